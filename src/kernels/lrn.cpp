// The LRN kernel of kernels/lrn.hpp.
#include "kernels/lrn.hpp"

#include "kernels/eltwise.hpp"

#include <algorithm>
#include <cmath>

namespace basalt::kernels {

// LRN on float32 NCHW data: y = x / (bias + alpha/size * sum of x^2 over channels [c-lo, c+hi])^beta.
// Work is split over (image, block of kLrnBlock spatial positions); per channel the window sum is
// taken directly (no running sum, whose subtractions would cancel), then the power: beta 0.75
// (GoogLeNet, AlexNet) as 1 / (sqrt(b) * sqrt(sqrt(b))) and beta 0.5 as 1 / sqrt(b) with the
// vectorized square root, any other beta with powf. Float accumulation: relative error ~1e-6
// against the double reference (checked by kernels_vec_test.cpp).
void lrn_f32(ThreadPool* pool, const float* x, float* y, int64_t N, int64_t C, int64_t S, int64_t lo, int64_t hi,
             float alpha, float beta, float bias, int64_t size) {
  constexpr int64_t kLrnBlock = 256;
  const int64_t blocks = (S + kLrnBlock - 1) / kLrnBlock;
  if (N * C * S == 0) return;
  const float a_n = float(double(alpha) / double(size));
  const VecOps& vec = vec_ops();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C * std::min(S, kLrnBlock) * (hi + lo + 4)) );
  parallel_for(pool, N * blocks, grain, [&](int64_t t0, int64_t t1) {
    float acc[kLrnBlock], r1[kLrnBlock], r2[kLrnBlock];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / blocks, k0 = (t % blocks) * kLrnBlock, len = std::min(kLrnBlock, S - k0);
      const float* xb = x + b * C * S + k0;
      float* yb = y + b * C * S + k0;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t c_lo = std::max<int64_t>(0, c - lo), c_hi = std::min(C - 1, c + hi);
        for (int64_t k = 0; k < len; ++k) acc[k] = 0.0f;
        for (int64_t c2 = c_lo; c2 <= c_hi; ++c2) {
          const float* p = xb + c2 * S;
          for (int64_t k = 0; k < len; ++k) acc[k] += p[k] * p[k];
        }
        for (int64_t k = 0; k < len; ++k) acc[k] = bias + a_n * acc[k];
        const float* xc = xb + c * S;
        float* yc = yb + c * S;
        if (beta == 0.75f) {
          vec.unary(UnaryOp::Sqrt, {}, acc, r1, len);
          vec.unary(UnaryOp::Sqrt, {}, r1, r2, len);
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] / (r1[k] * r2[k]);
        } else if (beta == 0.5f) {
          vec.unary(UnaryOp::Sqrt, {}, acc, r1, len);
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] / r1[k];
        } else if (beta == 1.0f) {
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] / acc[k];
        } else {
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] * std::pow(acc[k], -beta);
        }
      }
    }
  });
}

}  // namespace basalt::kernels
