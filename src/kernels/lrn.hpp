// Local response normalization (LRN) over the channels of float32 NCHW data.
#pragma once

#include "core/thread_pool.hpp"

#include <cstdint>

namespace basalt::kernels {

// y = x / (bias + alpha/size * sum of x^2 over channels [c-lo, c+hi])^beta, for N images of C
// channels of S positions each.
void lrn_f32(ThreadPool* pool, const float* x, float* y, int64_t N, int64_t C, int64_t S, int64_t lo, int64_t hi,
             float alpha, float beta, float bias, int64_t size);

}  // namespace basalt::kernels
