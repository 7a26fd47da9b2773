// Winograd convolution for 3x3, stride 1, dilation 1, ungrouped fp32 convs (NCHW):
// F(4x4, 3x3) (6x6 input tiles, 36 products) or F(2x2, 3x3) (4x4 tiles, 16 products).
//
//   Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A          per 3x3 filter g and input tile d
//
// - Weights are transformed once at load (U = G g Gᵀ, in double) and stored as alpha² GEMM A
//   operands [M x C] in the arch's packed-panel layout (one per transform position ξ).
// - The output tiles of all images are numbered n*TY*TX + ty*TX + tx and processed in blocks of
//   winograd_block_tiles() tiles. Per block: the input transform writes V[ξ] = Bᵀ d B straight into
//   packed GEMM B panels [C x tiles]; alpha² GEMMs Out[ξ][M x tiles] = U[ξ] x V[ξ] run on the
//   existing sgemm driver/microkernel (inline, on the calling thread); the output transform
//   Y = Aᵀ Out A writes the output tiles and applies the epilogue (bias[m], residual of Y's shape,
//   activation) to each output row segment while it is in cache.
// - Blocks are jobs handed out dynamically by parallel_for, each with its own slice of the
//   workspace. When there are no more blocks than threads (small images), the input transforms of
//   all blocks first run split by channels, then the products and output transforms split by
//   output channels, so every thread has work without redoing a transform. The
//   workspace depends only on C, M, the arch and the thread count, never on the image size; no
//   per-shape setup: a new image size costs nothing extra.
// - The transforms are written as loops over contiguous runs of tiles (the input rows are first
//   split into their tile phases), compiled per ISA (winograd_impl.inc) so the compiler
//   vectorizes them; all ISAs compute the same formulas.
//
// Blocked layout (kernels/nchwc.hpp, [N, CB, H, W, 16]; weights packed with blocked = true): the
// same products with the operands' roles swapped, so that no transform ever transposes. The input
// transform of one tile and channel block is 16 channels wide in every operation (a vector), and
// writes V[ξ]ᵀ [tiles x C] rows in place; the GEMMs are Out[ξ]ᵀ [tiles x M] = V[ξ]ᵀ x U[ξ]ᵀ, with
// U[ξ]ᵀ [C x M] packed as B panels at load (on AVX-512 the microkernel reads V[ξ]ᵀ in place);
// the output transform reads 16 output channels of a tile at once and writes blocked pixels,
// epilogue and zero padding lanes included. A chain of blocked convs then keeps its layout
// through its Winograd convs instead of converting around each.
//
// Accuracy: F(4x4, 3x3) rounds more than a direct conv (its transform constants reach 8 and
// 1/24); errors stay within ~1e-5 of sum |w*x| per layer on unit-scale data (tests/unit/
// winograd_test.cpp). F(2x2, 3x3) is about as exact as the direct conv.
#pragma once

#include "kernels/conv.hpp"

#include <cstdint>
#include <vector>

namespace basalt::kernels {

// Transformed weights of one conv, packed for `arch`.
struct WinogradWeights {
  const GemmArch* arch = nullptr;
  int tile = 0;  // output tile edge: 4 = F(4x4, 3x3), 2 = F(2x2, 3x3); 0 = empty
  int64_t M = 0, C = 0;
  bool blocked = false;  // for blocked tensors: U[ξ]ᵀ as B panels (else U[ξ] as A panels)
  PageBuffer<float> data;  // alpha² packed matrices, each matrix_floats() floats
  int alpha() const { return tile + 2; }
  int64_t matrix_floats() const {
    return !arch ? 0 : blocked ? packed_b_floats(*arch, C, M) : packed_a_floats(*arch, M, C);
  }
  size_t bytes() const { return data.size() * sizeof(float); }
};

// True when the conv has the form Winograd handles (3x3, stride 1, dilation 1, 1 group) and
// enough channels to pay (C >= 16 and M >= 16: below that the transforms cost more than the
// products save). Padding and image size are free (an empty output computes nothing).
bool winograd_applicable(const Conv2dShape& s);

// The tile edge to use for this conv, 0 = do not use Winograd (measured crossovers in
// winograd.cpp). image_pixels: H*W of the input when the model fixes it at load, else -1; then
// 4 from 20x20 images on, else 0. Unknown image size: by channel counts, 4 for C*M <= 128*192,
// 2 up to 256*256, else 0. BASALT_WINOGRAD in the environment overrides both:
// 0 = off, 2 = F(2x2, 3x3), 4 = F(4x4, 3x3) (read once per process).
int winograd_choose_tile(const Conv2dShape& s, int64_t image_pixels = -1);
// BASALT_WINOGRAD as read: 0, 2 or 4 when set to one of those, else -1 (the routing decides).
int winograd_env_tile();

// U[ξ] = G g Gᵀ for every (m, c), packed. `w`: [M, C, 3, 3]. tile: 2 or 4. blocked: for
// conv2d_winograd on blocked tensors.
WinogradWeights winograd_pack_weights(const GemmArch& g, const Conv2dShape& s, const float* w, int tile,
                                      bool blocked = false);

// Tiles per block (a whole number of the arch's B panels).
int64_t winograd_block_tiles(const GemmArch& g);

// Workspace floats conv2d_winograd needs for convs with these channel counts on a pool of
// `threads` threads (independent of N, H, W and padding).
int64_t winograd_workspace_floats(const GemmArch& g, const Conv2dShape& s, int tile, int threads);

// y[N, M, OH, OW] = act(conv(x, w) + bias[m] + residual) with `u` from winograd_pack_weights
// (same arch as g). bias / residual may be null. With u.blocked, x, residual and y are blocked
// tensors ([N, CB, H, W, 16], [N, OB, OH, OW, 16]) and y's padding channels are written as 0.
// Requires winograd_applicable(s). Runs on `pool` (null = inline); `workspace` holds
// winograd_workspace_floats(g, s, u.tile, pool's threads) floats.
void conv2d_winograd(const GemmArch& g, const Conv2dShape& s, const float* x, const WinogradWeights& u,
                     const float* bias, const float* residual, const Activation& act, float* y, ThreadPool* pool,
                     float* workspace);

// Per-ISA transforms (winograd_impl.inc), for the driver.
// Input transform of tiles [t0, t0 + nt) into packed B panels: v + ξ*vstride holds V[ξ] as
// C x round_up(nt, nr) panels. `scratch` holds winograd_scratch_floats(tile, nr) floats.
// Blocked: v + ξ*vstride holds V[ξ]ᵀ, row t - t0 (stride blocks(C) * 16) = tile t's C values;
// channels [c0, c1) (block-aligned) are written; no scratch.
struct WinogradBlock {
  const Conv2dShape* s;
  int tile;
  int64_t t0, nt;  // first tile id and tile count of the block
  int nr;          // B panel width of the arch
  int64_t c0 = 0, c1 = 0;  // input channels [c0, c1) the input transform writes
  bool blocked = false;    // blocked tensors: V[ξ]ᵀ rows / Out[ξ]ᵀ rows (winograd_impl.inc)
};
int64_t winograd_scratch_floats(int tile, int nr);
void winograd_input_portable(const WinogradBlock& b, const float* x, float* v, int64_t vstride, float* scratch);
void winograd_input_avx2(const WinogradBlock& b, const float* x, float* v, int64_t vstride, float* scratch);
void winograd_input_avx512(const WinogradBlock& b, const float* x, float* v, int64_t vstride, float* scratch);
// Output transform of channels [m0, m1) of the block: Out[ξ] at o + ξ*ostride, row m - m0, column
// = tile - t0 (row stride ldo); writes y and applies the epilogue. Blocked: Out[ξ]ᵀ, row tile - t0,
// column m - m0 (m0 a multiple of 16, ldo >= round_up(m1 - m0, 16)); no scratch.
void winograd_output_portable(const WinogradBlock& b, const float* o, int64_t ostride, int64_t ldo, int64_t m0,
                              int64_t m1, const float* bias, const float* residual, const Activation& act, float* y,
                              float* scratch);
void winograd_output_avx2(const WinogradBlock& b, const float* o, int64_t ostride, int64_t ldo, int64_t m0, int64_t m1,
                          const float* bias, const float* residual, const Activation& act, float* y, float* scratch);
void winograd_output_avx512(const WinogradBlock& b, const float* o, int64_t ostride, int64_t ldo, int64_t m0,
                            int64_t m1, const float* bias, const float* residual, const Activation& act, float* y,
                            float* scratch);

}  // namespace basalt::kernels
