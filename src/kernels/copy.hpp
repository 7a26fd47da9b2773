// Copy kernels of the tensor ops: a strided gather of fixed-size elements (Slice, Split, Expand,
// Transpose) and a tiled batched 2-D transpose.
#pragma once

#include <basalt/tensor.hpp>

#include "core/thread_pool.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace basalt::kernels {

// dst[index] = src[base + sum_d index[d] * st[d]] for every index of oshape, elements of `es` bytes.
void strided_copy_bytes(ThreadPool* pool, const uint8_t* src, uint8_t* dst, size_t es, const Shape& oshape,
                        const std::vector<int64_t>& st, int64_t base);

// Batched 2-D transpose of T elements: x [B, R, C] -> y [B, C, R], in 16x16 tiles so both the
// reads and the writes stay within a few cache lines; tile rows of all batches split over pool.
template <class T>
void transpose_2d_tiled(ThreadPool* pool, const T* x, T* y, int64_t B, int64_t R, int64_t C) {
  constexpr int64_t kTile = 16;
  const int64_t row_tiles = (R + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kTile * C));
  parallel_for(pool, B * row_tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / row_tiles, r0 = (t % row_tiles) * kTile, r1 = std::min(R, r0 + kTile);
      const T* xb = x + b * R * C;
      T* yb = y + b * R * C;
      for (int64_t c0 = 0; c0 < C; c0 += kTile) {
        const int64_t c1 = std::min(C, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) yb[c * R + r] = xb[r * C + c];
      }
    }
  });
}

}  // namespace basalt::kernels
