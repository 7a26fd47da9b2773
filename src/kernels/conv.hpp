// fp32 2-D convolution, NCHW (1-D convolutions run as 2-D with H = 1).
//
// - General conv (any kernel, stride, dilation, padding, groups): per image and group, the output
//   pixels are processed in chunks of columns; each chunk's im2col is written straight into packed
//   GEMM B panels in the workspace (so its size is bounded by conv2d_workspace_floats, not by the
//   image), and the GEMM Y[Mg, cols] = W[Mg, Cg*KH*KW] x cols runs on weights packed at load.
// - 1x1, stride 1, no padding: the input itself is the GEMM's B operand (no im2col): read in
//   place by the microkernel for few output channels, else copied into panels chunk by chunk.
// - With several threads and enough columns, whole chunks go to threads, each with its own
//   column buffer (the same memory in total as one shared buffer).
// - Depthwise (Cg == 1, G > 1): a direct kernel per channel, vectorized along the output width
//   (AVX-512: 16 columns per register, 3 or 4 output rows at a time for square 3x3 / 5x5 kernels).
// - Bias, residual (same shape as Y) and the activation are applied in the GEMM epilogue, i.e.
//   on each tile while it is in cache.
#pragma once

#include "kernels/gemm.hpp"

namespace basalt::kernels {

struct Conv2dShape {
  int64_t N = 1, C = 1, H = 1, W = 1;  // input
  int64_t M = 1, G = 1;                // output channels, groups
  int64_t KH = 1, KW = 1, sh = 1, sw = 1, dh = 1, dw = 1;
  int64_t pt = 0, pl = 0;  // top / left padding (bottom / right are implied by OH / OW)
  int64_t OH = 1, OW = 1;
  int64_t Cg() const { return C / G; }
  int64_t Mg() const { return M / G; }
  int64_t Kg() const { return Cg() * KH * KW; }  // GEMM K per group
  bool is_depthwise() const { return G > 1 && Cg() == 1; }
  bool is_pointwise() const {
    return KH == 1 && KW == 1 && sh == 1 && sw == 1 && pt == 0 && pl == 0 && OH == H && OW == W;
  }
};

// Weights [M, Cg, KH, KW] packed as GEMM A operands, one per group (empty for depthwise, whose
// kernel reads W directly).
struct PackedConvWeights {
  const GemmArch* arch = nullptr;
  std::vector<PackedMatrix> groups;
  size_t bytes() const {
    size_t b = 0;
    for (auto& g : groups) b += g.bytes();
    return b;
  }
};
PackedConvWeights pack_conv_weights(const GemmArch& g, const Conv2dShape& s, const float* w);

// Workspace floats conv2d needs (0 for depthwise). `weights_packed`: a PackedConvWeights is given;
// `threads`: those of the pool conv2d runs on (with several, each may get its own share of the
// column buffer).
int64_t conv2d_workspace_floats(const GemmArch& g, const Conv2dShape& s, bool weights_packed, int threads);

// y[N, M, OH, OW] = act(conv(x, w) + bias[m] + residual). bias / residual may be null. `packed`
// may be null (the weights are then packed into the workspace on every call); when given it must
// have been packed with the same arch. Runs on `pool` (null = inline); `workspace` holds
// conv2d_workspace_floats(g, s, packed != null, pool's threads) floats.
void conv2d(const GemmArch& g, const Conv2dShape& s, const float* x, const float* w, const PackedConvWeights* packed,
            const float* bias, const float* residual, const Activation& act, float* y, ThreadPool* pool, float* workspace);

// Depthwise (and channel-multiplier) convolution: Cg == 1. `isa` picks the compiled variant.
void conv2d_depthwise(Isa isa, const Conv2dShape& s, const float* x, const float* w, const float* bias,
                      const float* residual, const Activation& act, float* y, ThreadPool* pool);

// Per-ISA depthwise planes [c0, c1) of image-channel index n*M + m (defined in conv_*.cpp).
void conv_depthwise_planes_portable(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                                    const float* residual, const Activation& act, float* y, int64_t c0, int64_t c1);
void conv_depthwise_planes_avx2(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                                const float* residual, const Activation& act, float* y, int64_t c0, int64_t c1);
void conv_depthwise_planes_avx512(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                                  const float* residual, const Activation& act, float* y, int64_t c0, int64_t c1);

// im2col of output pixels [col0, col0 + ncols) of one image and group (xg: its first input
// channel), written as packed GEMM B panels [q0, q1) of `g`'s layout (panel q covers pixels
// col0 + q*nr ...; row k = (ci*KH + kh)*KW + kw). Padding taps and pixels past the chunk are 0.
// Per ISA (conv_im2col.inc); both give the same values.
void im2col_pack_portable(const GemmArch& g, const Conv2dShape& s, const float* xg, int64_t col0, int64_t ncols,
                          float* dst, int64_t q0, int64_t q1);
void im2col_pack_avx512(const GemmArch& g, const Conv2dShape& s, const float* xg, int64_t col0, int64_t ncols,
                        float* dst, int64_t q0, int64_t q1);

// Reference twin: direct 7-loop convolution with double accumulation, then the epilogue.
void conv2d_reference(const Conv2dShape& s, const float* x, const float* w, const float* bias, const float* residual,
                      const Activation& act, float* y);

}  // namespace basalt::kernels
