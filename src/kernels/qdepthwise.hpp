// Depthwise 8-bit convolution (QLinearConv / ConvInteger with one input and one output channel
// per group): per plane, the input minus its zero point is widened to int16 into a zero-padded
// copy (padding holds the zero point, which contributes nothing), the taps (weights minus their
// zero point) are swept over it with int32 sums, vectorized along the output row, and the plane's
// exact int32 sums go to `finish` (the caller runs the integer GEMM's tile epilogue on them,
// kernels/qgemm.hpp, so both paths share one output rule). Compiled per ISA from one source
// (qdepthwise.inc); every build gives the same sums.
#pragma once

#include "kernels/cpu.hpp"

#include <cstdint>
#include <functional>

namespace basalt::kernels {

struct QDepthwise {
  int64_t H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl;
  bool x_signed, w_signed;
  int32_t xzp;
};

// Bytes of per-thread scratch qdepthwise_planes needs.
int64_t qdepthwise_scratch_bytes(const QDepthwise& g);

// Planes [p0, p1) of x (N*C planes of H*W bytes); plane p uses channel c = p % C: weights
// w + c * KH * KW with zero point wzp[c]. finish(p, c, sums) gets each plane's OH*OW sums.
// scratch: qdepthwise_scratch_bytes, 64-byte aligned.
using QdwFinish = std::function<void(int64_t, int64_t, const int32_t*)>;
void qdepthwise_planes(Isa isa, const QDepthwise& g, const uint8_t* x, const uint8_t* w, const int32_t* wzp, int64_t C, int64_t p0,
                       int64_t p1, void* scratch, const QdwFinish& finish);
void qdepthwise_planes_avx2(const QDepthwise& g, const uint8_t* x, const uint8_t* w, const int32_t* wzp, int64_t C, int64_t p0,
                            int64_t p1, void* scratch, const QdwFinish& finish);
void qdepthwise_planes_avx512(const QDepthwise& g, const uint8_t* x, const uint8_t* w, const int32_t* wzp, int64_t C, int64_t p0,
                              int64_t p1, void* scratch, const QdwFinish& finish);

}  // namespace basalt::kernels
