// The strided copy of kernels/copy.hpp.
#include "kernels/copy.hpp"

#include <cstring>

namespace basalt::kernels {

// Byte-level twin of strided_copy for element types without constructors (every dtype but
// string), writing into caller memory: dst[index] = src[base + sum_d index[d] * st[d]] for every
// index of oshape (strides and base in elements of `es` bytes). The output shape is collapsed
// first (size-1 dims dropped, neighbours merged where the source is contiguous across them), so a
// view whose innermost run is contiguous (Slice of outer axes, Split, a Transpose that keeps the
// last axes, as in ShuffleNet's channel shuffle) copies whole rows with memcpy. Rows are split
// over the pool in chunks of about 64 KB.
void strided_copy_bytes(ThreadPool* pool, const uint8_t* src, uint8_t* dst, size_t es, const Shape& oshape,
                        const std::vector<int64_t>& st, int64_t base) {
  const int64_t total = shape_numel(oshape);
  if (total == 0) return;
  std::vector<int64_t> dims, strides;
  for (size_t d = 0; d < oshape.size(); ++d) {
    if (oshape[d] == 1) continue;
    if (!dims.empty() && strides.back() == st[d] * oshape[d]) {
      dims.back() *= oshape[d];
      strides.back() = st[d];
    } else {
      dims.push_back(oshape[d]);
      strides.push_back(st[d]);
    }
  }
  if (dims.empty()) dims.push_back(1), strides.push_back(0);
  const size_t r = dims.size();
  const int64_t inner = dims[r - 1], ist = strides[r - 1], rows = total / inner;
  const size_t row_bytes = size_t(inner) * es;
  const int64_t grain = std::max<int64_t>(1, int64_t(65536 / std::max<size_t>(row_bytes, 1)));
  parallel_for(pool, rows, grain, [&](int64_t r0, int64_t r1) {
    // Source offset of row r0 (mixed radix over the outer dims), then an odometer.
    std::vector<int64_t> idx(r, 0);
    int64_t off = base, rem = r0;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      off += idx[d] * strides[d];
    }
    for (int64_t row = r0; row < r1; ++row) {
      uint8_t* o = dst + size_t(row) * row_bytes;
      const uint8_t* s = src + off * int64_t(es);
      if (ist == 1) {
        std::memcpy(o, s, row_bytes);
      } else {
        auto gather = [&]<class U>() {
          U* ou = reinterpret_cast<U*>(o);
          const U* su = reinterpret_cast<const U*>(s);
          for (int64_t k = 0; k < inner; ++k) ou[k] = su[k * ist];
        };
        switch (es) {
          case 1: gather.template operator()<uint8_t>(); break;
          case 2: gather.template operator()<uint16_t>(); break;
          case 4: gather.template operator()<uint32_t>(); break;
          case 8: gather.template operator()<uint64_t>(); break;
          default:
            for (int64_t k = 0; k < inner; ++k) std::memcpy(o + size_t(k) * es, s + k * ist * int64_t(es), es);
        }
      }
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < dims[d]) {
          off += strides[d];
          break;
        }
        off -= strides[d] * (dims[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

}  // namespace basalt::kernels
