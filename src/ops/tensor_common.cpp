// The shared helpers of ops/tensor_common.hpp.
#include "ops/tensor_common.hpp"

#include <algorithm>
#include <climits>
#include <cstring>

namespace basalt::tensorops {

// A shape-like input (1-D integer tensor) as int64 values.
std::vector<int64_t> int_input(const KernelContext& ctx, int i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (!dtype_is_integer(t.dtype()))
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " (input " + std::to_string(i) + ") must be an integer tensor, got " + dtype_name(t.dtype()));
  if (t.rank() > 1)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " (input " + std::to_string(i) + ") must be 1-D, got shape " + shape_str(t.shape()));
  return t.to_int64_vector();
}

// Rejects negative dimensions and shapes whose element count overflows int64 (a wrapped count
// would allocate too little storage for the shape).
void check_shape_nonneg(const KernelContext& ctx, const Shape& s, const char* what) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " " + shape_str(s) + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n))
      ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " " + shape_str(s) + " has too many elements");
  }
}

// Normalizes a list of axes against rank; rejects out-of-range and duplicate axes.
std::vector<int> normalize_axes(const Node& n, const std::vector<int64_t>& axes, int rank) {
  std::vector<int> out;
  std::vector<bool> seen(size_t(std::max(rank, 0)), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      n.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    int x = int(a < 0 ? a + rank : a);
    if (seen[size_t(x)]) n.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(a) + " is repeated in " + ints_str(axes));
    seen[size_t(x)] = true;
    out.push_back(x);
  }
  return out;
}

// out[index] = src[base + sum_d index[d] * st[d]] for every index of oshape (strides in elements).
Tensor strided_copy(const KernelContext& ctx, const Tensor& src, const Shape& oshape, const std::vector<int64_t>& st,
                    int64_t base) {
  Tensor out(src.dtype(), oshape);
  int64_t total = shape_numel(oshape);
  if (total == 0) return out;
  dispatch_all(ctx, 0, src.dtype(), [&]<class T>() {
    const T* s = src.data<T>();
    T* o = out.data<T>();
    int r = int(oshape.size());
    if (r == 0) {
      o[0] = s[base];
      return;
    }
    int64_t inner = oshape[size_t(r - 1)], ist = st[size_t(r - 1)];
    int64_t rows = total / inner;
    std::vector<int64_t> idx(size_t(r), 0);
    int64_t off = base;
    for (int64_t row = 0; row < rows; ++row) {
      T* dst = o + row * inner;
      const T* sp = s + off;
      if (ist == 1) {
        for (int64_t k = 0; k < inner; ++k) dst[k] = sp[k];
      } else {
        for (int64_t k = 0; k < inner; ++k) dst[k] = sp[k * ist];
      }
      for (int d = r - 2; d >= 0; --d) {
        if (++idx[size_t(d)] < oshape[size_t(d)]) {
          off += st[size_t(d)];
          break;
        }
        off -= st[size_t(d)] * (oshape[size_t(d)] - 1);
        idx[size_t(d)] = 0;
      }
    }
  });
  return out;
}

// strided_copy into output `out` of ctx (its planned slot), with the byte-level copy; strings
// take the element-wise path (std::string copies).
void strided_copy_out(KernelContext& ctx, int out, const Tensor& src, const Shape& oshape,
                      const std::vector<int64_t>& st, int64_t base) {
  const size_t es = dtype_size(src.dtype());
  if (src.dtype() == DType::String || es == 0) {
    ctx.set_output(out, Value(strided_copy(ctx, src, oshape, st, base)));
    return;
  }
  Tensor& y = ctx.output_uninit(out, src.dtype(), oshape);
  if (y.numel() == 0) return;
  kernels::strided_copy_bytes(ctx.pool(), static_cast<const uint8_t*>(src.raw()), static_cast<uint8_t*>(y.raw()), es, oshape,
                     st, base);
}

// Transpose as a batched 2-D transpose when it is one: after dropping size-1 axes and merging
// input axes that stay adjacent, the permutation is [1, 0] or [0, 2, 1]. Element sizes 1, 2,
// 4 and 8 bytes. Returns false otherwise (the generic strided copy runs).
bool transpose_fast(KernelContext& ctx, const Tensor& x, const std::vector<int>& perm) {
  const size_t es = dtype_size(x.dtype());
  if (x.dtype() == DType::String || (es != 1 && es != 2 && es != 4 && es != 8) || x.numel() < 64) return false;
  // Axes of size > 1 in output order, as input axis numbers, merged into runs of consecutive axes.
  std::vector<int> kept;
  for (int a : perm)
    if (x.dim(a) > 1) kept.push_back(a);
  std::vector<std::pair<int, int64_t>> runs;  // (first input axis, merged size), in output order
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!runs.empty() && kept[i] == kept[i - 1] + 1) {
      runs.back().second *= x.dim(kept[i]);
    } else {
      runs.push_back({kept[i], x.dim(kept[i])});
    }
  }
  int64_t B = 1, R = 0, C = 0;
  if (runs.size() == 2 && runs[0].first > runs[1].first) {
    R = runs[1].second, C = runs[0].second;  // input [R, C] -> output [C, R]
  } else if (runs.size() == 3 && runs[0].first < runs[2].first && runs[2].first < runs[1].first) {
    B = runs[0].second, R = runs[2].second, C = runs[1].second;  // input [B, R, C] -> output [B, C, R]
  } else {
    return false;
  }
  Shape os(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) os[d] = x.shape()[size_t(perm[d])];
  Tensor& y = ctx.output_uninit(0, x.dtype(), os);
  switch (es) {
    case 1: kernels::transpose_2d_tiled(ctx.pool(), x.data<uint8_t>(), y.data<uint8_t>(), B, R, C); break;
    case 2: kernels::transpose_2d_tiled(ctx.pool(), x.data<uint16_t>(), y.data<uint16_t>(), B, R, C); break;
    case 4: kernels::transpose_2d_tiled(ctx.pool(), x.data<uint32_t>(), y.data<uint32_t>(), B, R, C); break;
    default: kernels::transpose_2d_tiled(ctx.pool(), x.data<uint64_t>(), y.data<uint64_t>(), B, R, C); break;
  }
  return true;
}

// Transposed copy of x (perm already validated).
Tensor transpose_copy(const KernelContext& ctx, const Tensor& x, const std::vector<int>& perm) {
  std::vector<int64_t> xs = shape_strides(x.shape());
  Shape os(perm.size());
  std::vector<int64_t> st(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    os[d] = x.shape()[size_t(perm[d])];
    st[d] = xs[size_t(perm[d])];
  }
  return strided_copy(ctx, x, os, st, 0);
}

}  // namespace basalt::tensorops
