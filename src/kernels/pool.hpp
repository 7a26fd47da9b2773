// Fast 2-D max/average pooling over NCHW float32 planes (issue 5). The reference twin is the
// generic N-d pool in ops/nn.cpp; tests/unit/kernels_vec_test.cpp compares the two.
//
// Semantics (the reference's): a window's taps are oy*sh - ph + ky*dh (and the same along x);
// taps outside [0, H) x [0, W) are skipped. Max of no valid tap is 0. Average divides by the
// valid taps, or with count_include_pad by the taps inside [-ph, H + pad_end_h) x [-pw, W + pad_end_w)
// (taps added by ceil_mode beyond the end padding never count).
#pragma once

#include <cstdint>

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
void pool2d_f32(ThreadPool* pool, const float* x, float* y, int64_t planes, const Pool2D& g);

}  // namespace basalt::kernels
