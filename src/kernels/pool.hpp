// Fast 2-D max/average pooling over NCHW float32 planes (issue 5). The reference twin is the
// generic N-d pool in ops/nn.cpp; tests/unit/kernels_vec_test.cpp compares the two.
//
// Semantics (the reference's): a window's taps are oy*sh - ph + ky*dh (and the same along x);
// taps outside [0, H) x [0, W) are skipped. Max of no valid tap is 0. Average divides by the
// valid taps, or with count_include_pad by the taps inside [-ph, H + pad_end_h) x [-pw, W + pad_end_w)
// (taps added by ceil_mode beyond the end padding never count).
#pragma once

#include "kernels/cpu.hpp"

#include <cstdint>
#include <vector>

namespace basalt {
class ThreadPool;
}

namespace basalt::kernels {

struct Pool2D {
  int64_t H = 0, W = 0, OH = 0, OW = 0;
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t ph = 0, pw = 0, ph_end = 0, pw_end = 0;  // begin and end padding
  bool avg = false;
  bool count_include_pad = false;
};

// y[p] = pool(x[p]) for each of `planes` planes of H*W inputs / OH*OW outputs, split over pool.
// isa picks the kernel build (capped at best_isa()); every build gives bit-identical results
// (same operations in the same order), and so does every thread count.
void pool2d_f32(ThreadPool* pool, const float* x, float* y, int64_t planes, const Pool2D& g, Isa isa = best_isa());

// Per-geometry tables shared by every plane: per output column / row the valid and padded tap
// counts; the output columns with no valid tap.
struct PoolTables {
  explicit PoolTables(const Pool2D& g);
  std::vector<float> cnt_w, pad_w, cnt_h, pad_h;
  std::vector<int64_t> empty_cols;
};
// One build of the kernel over planes [p0, p1) (pool.cpp / pool_avx2.cpp / pool_avx512.cpp; call
// the AVX ones only on CPUs that have them).
void pool2d_planes_portable(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t);
void pool2d_planes_avx2(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t);
void pool2d_planes_avx512(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t);

}  // namespace basalt::kernels
