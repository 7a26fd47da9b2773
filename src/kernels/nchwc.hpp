// Blocked channel layout ("NCHWc", block 16) for chains of convolutions and pools (issue 5).
//
// A blocked tensor holds an NCHW float32 tensor [N, C, H, W] as [N, CB, H, W, 16], CB = ceil(C/16):
// element (n, c, h, w) lives at ((n*CB + c/16)*H + h)*W + w)*16 + c%16. Channels C..CB*16-1 (the
// padding of the last block) are always 0: every kernel here writes 0 there, so a chain of
// blocked ops never carries anything but zeros in them.
//
// Why: a convolution on blocked tensors is an outer product of 16 output channels (one zmm of
// weights) by a few output pixels (broadcast input values), with every operand read in place:
// no im2col, no packing of activations at run time, and the output of one pixel is one aligned
// vector. Pools and depthwise convs vectorize along the 16 channels of a pixel.
//
// The optimizer (opt/layout_nchwc.cpp) rewrites chains of Conv / pools into the basalt-domain ops
// of ops/nchwc.cpp and converts at the chain's ends (docs/fused_ops.md).
#pragma once

#include "kernels/activation.hpp"
#include "kernels/conv.hpp"
#include "kernels/cpu.hpp"
#include "kernels/pool.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace basalt {
class ThreadPool;
}

namespace basalt::kernels::nchwc {

constexpr int64_t kBlock = 16;
inline int64_t blocks(int64_t c) { return (c + kBlock - 1) / kBlock; }

// Weights of a convolution packed for the blocked kernels.
// - Dense (G == 1): groups of up to 4 output blocks (64 channels), each [ICB][KH][KW][16 ic][F*16 oc]
//   (F = the group's blocks), ICB = blocks(C): the F weight vectors of one input channel and tap
//   are contiguous (dense_w_index).
// - Depthwise (G == C == M): [CB][KH][KW][16].
// Padding entries are 0. bias is padded to OB*16 (0 when the conv has none).
struct ConvWeights {
  Conv2dShape s;
  bool depthwise = false;
  bool plain_input = false;  // the input is NCHW (the first conv of a chain), not blocked
  PageBuffer<float> w;        // packed once at load, zero pages from the kernel (core/pages.hpp)
  std::vector<float> bias;
  size_t bytes() const { return (w.size() + bias.size()) * sizeof(float); }
};

// Index of weight (m, c, tap k) of a dense conv in ConvWeights::w.
inline int64_t dense_w_index(const Conv2dShape& s, int64_t m, int64_t c, int64_t k) {
  const int64_t OB = blocks(s.M), ICB = blocks(s.C), KK = s.KH * s.KW;
  const int64_t g = m / 64, F = std::min<int64_t>(4, OB - 4 * g);
  return g * ICB * KK * 16 * 64 + (((c / 16) * KK + k) * 16 + c % 16) * F * 16 + (m / 16 % 4) * 16 + m % 16;
}

// True when the blocked kernels handle conv shape `s` (2-D; G == 1, or depthwise with M == C).
// A plain input is supported for G == 1 only.
bool conv_supported(const Conv2dShape& s, bool plain_input);
ConvWeights pack_conv(const Conv2dShape& s, const float* w, const float* bias, bool plain_input);

// Where a conv of a blocked chain runs (image_pixels: H*W when known at load, else -1).
// Winograd (at the image sizes winograd_choose_tile picks) beats the direct blocked kernel on wide
// 3x3 stride-1 convs (64 -> 64 at 56x56: 1.04 vs 1.66 ms) and on those with few outputs (32 -> 16
// at 256x256: 4.0 vs 6.2 ms), not on narrow inputs with many outputs (16 -> 64 at 55x55: 0.45 vs
// 0.38 ms). Its blocked form (kernels/winograd.hpp) pays from 64 input and 32 output channels:
// ResNet-50, 1 thread, against NCHW Winograd and the reorders around it, 64 -> 64 at 56x56 6.10
// -> 5.79 ms and 128 -> 128 at 28x28 5.69 -> 4.73 ms (+ 1.2 ms of reorders gone); DenseNet-121's
// 128 -> 32 convs (1 thread: ~3.8 -> 3.0 ms at 14x14 with F(2x2), well under NCHW Winograd plus
// reorders at 56x56 and 28x28); with fewer inputs its products are narrow GEMMs (N = M columns
// of 64-wide panels, K = C) and it is slower (UNet-lite:
// 32 -> 16 at 256x256 16.7 -> 24.7 ms, 32 -> 32 at 128x128 3.3 -> 4.8 ms).
// At 10x10 to 19x19 images, where NCHW Winograd loses to the direct kernels, blocked F(2x2) wins
// (ResNet-50's 256 -> 256 at 14x14). Where a core starts one 512-bit FMA per cycle (AMD Zen 4,
// routing_fma_pipes() == 1) the direct kernels run at half the Xeons' FMA rate and Winograd pays more
// widely: F(4x4) at 10x10 to 19x19 when both channel counts are at least 96, F(2x2) at 6x6 to 9x9
// when both are at least 128 (ResNet-50's 512 -> 512 at 7x7), and blocked Winograd from 16 inputs
// with 64 outputs or more (SqueezeNet); nchwc.cpp has the figures. winograd_tile: the tile of blocked Winograd for `s` (0 = not
// that); nchw_winograd: true when `s` is better run in NCHW by Winograd, out of the chain.
// fma_pipes: routing_fma_pipes() of the CPU (kernels/cpu.hpp), a parameter for tests.
int winograd_tile(const Conv2dShape& s, bool plain_input, int64_t image_pixels, int fma_pipes = routing_fma_pipes());
bool nchw_winograd(const Conv2dShape& s, bool plain_input, int64_t image_pixels, int fma_pipes = routing_fma_pipes());

// Workspace floats conv() needs for sizes `s`: a padded copy of the input when a dense conv pads
// (0 otherwise).
int64_t conv_workspace_floats(const ConvWeights& cw, const Conv2dShape& s);
// At least conv_workspace_floats for the image s.N x s.H x s.W and pads (top, bottom, left, right),
// whatever the output size: for the memory planner, from input shapes alone.
int64_t conv_workspace_bound_floats(const ConvWeights& cw, const Conv2dShape& s, int64_t pt, int64_t pb, int64_t pl,
                                    int64_t pr);

// y = act(conv(x, w) + bias + residual), x blocked (or NCHW when cw.plain_input), y and residual
// (may be null) blocked [N, blocks(M), OH, OW, 16]. `s` gives this call's sizes (N, H, W, OH, OW
// may differ from the packed shape; channels, kernel, strides, dilations and pads may not).
// `workspace`: conv_workspace_floats(cw, s) floats.
void conv(Isa isa, const ConvWeights& cw, const Conv2dShape& s, const float* x, const float* residual,
          const Activation& act, float* y, ThreadPool* pool, float* workspace);

// NCHW [N, C, HW] -> blocked [N, CB, HW, 16] (padding channels 0), and back.
void to_blocked(Isa isa, const float* x, int64_t N, int64_t C, int64_t HW, float* y, ThreadPool* pool);
void from_blocked(Isa isa, const float* x, int64_t N, int64_t C, int64_t HW, float* y, ThreadPool* pool);

// Max / average pooling on blocked tensors, the semantics of kernels/pool.hpp (Pool2D) per
// channel; planes = N * CB.
void pool(Isa isa, const float* x, float* y, int64_t planes, const Pool2D& g, ThreadPool* pool);
// Global average (avg) or max pool of a blocked [N, CB, HW, 16] into NCHW [N, C, 1, 1].
void global_pool(Isa isa, bool avg, const float* x, int64_t N, int64_t C, int64_t HW, float* y, ThreadPool* pool);

// y = act(x * scale[c] + shift[c]) on blocked [N, CB, HW, 16] (inference batch norm after a
// concat, where it cannot fold into a conv): scale and shift hold CB*16 values, 0 on the padding
// channels, so those stay 0 (act(0) must be 0: the layout pass only converts such activations).
// y may equal x (in place).
void scale_shift(Isa isa, const float* x, const float* scale, const float* shift, const Activation& act, float* y,
                 int64_t N, int64_t CB, int64_t HW, ThreadPool* pool);

// Reference twins (plain loops over the blocked indexing; double accumulation for conv).
void conv_reference(const ConvWeights& cw, const Conv2dShape& s, const float* x, const float* residual,
                    const Activation& act, float* y);

// Per-ISA entry points (nchwc.cpp = portable, nchwc_avx2.cpp, nchwc_avx512.cpp); `conv` etc.
// dispatch to them.
// Tasks [task0, task1) of tiling t (conv_tiling of the same cw and s).
struct ConvTiling;
void conv_rows_portable(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                        const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1);
void conv_rows_avx512(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                      const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1);
// One (image, channel block) of a layout conversion, pixels [p0, p1): xs / ys are the block's
// first NCHW channel (nc <= 16 of them exist), yb / xb its blocked plane.
void to_blocked_avx512(const float* xs, int64_t nc, int64_t HW, float* yb, int64_t p0, int64_t p1);
void from_blocked_avx512(const float* xb, int64_t nc, int64_t HW, float* ys, int64_t p0, int64_t p1);
// Global average or max of one blocked plane [HW][16] into y[0, nc).
void global_pool_avx512(bool avg, const float* xb, int64_t nc, int64_t HW, float* y);
// Pixels [p0, p1) of one blocked plane: y = act(x * scale + shift), scale / shift 16 lanes.
void scale_shift_avx512(const float* xb, const float* scale, const float* shift, const Activation& act, float* yb,
                        int64_t p0, int64_t p1);
void pool_planes_avx512(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t);
// The same entry points for AVX2 (nchwc_avx2.cpp).
void conv_rows_avx2(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                    const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1);
void to_blocked_avx2(const float* xs, int64_t nc, int64_t HW, float* yb, int64_t p0, int64_t p1);
void from_blocked_avx2(const float* xb, int64_t nc, int64_t HW, float* ys, int64_t p0, int64_t p1);
void global_pool_avx2(bool avg, const float* xb, int64_t nc, int64_t HW, float* y);
void scale_shift_avx2(const float* xb, const float* scale, const float* shift, const Activation& act, float* yb,
                      int64_t p0, int64_t p1);
void pool_planes_avx2(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t);

// Scalar set-up shared by the per-ISA dense and depthwise kernels (defined in nchwc.cpp, out of
// line: the ISA files are compiled with other -m flags).
// One dense conv call as the per-ISA kernels walk it: the input strides (floats; a plain input is
// C planes, a blocked one 16 floats a pixel), the output and packed-weight strides, and the input
// offset of every (input block, kernel row, kernel column), in weight order. x, res and y point
// at the image a task works on (set per task).
struct DenseConvArgs {
  const ConvWeights* cw = nullptr;
  const Conv2dShape* s = nullptr;
  const Activation* act = nullptr;
  const float* x = nullptr;    // image n
  const float* res = nullptr;  // image n, or null
  float* y = nullptr;          // image n
  int64_t xs_blk = 0, xs_ic = 0, xs_row = 0, xs_pix = 0;  // input: channel block, channel in block, row, pixel
  int64_t x_img = 0, y_img = 0;  // floats per image of the input and of the output
  int64_t ys_blk = 0;            // output stride between channel blocks
  int64_t wblk = 0;              // packed-weight floats per group of 4 output blocks
  int64_t OB = 0, ICB = 0;
  std::vector<int64_t> taps;
};
DenseConvArgs dense_conv_args(const ConvWeights& cw, const Conv2dShape& s, const Activation& act);
// Taps [k0, k1) of a window of k taps (stride st, begin pad p, dilation d) at output o whose
// input index o*st - p + t*d lies in [0, n).
void valid_taps(int64_t o, int64_t st, int64_t p, int64_t d, int64_t k, int64_t n, int64_t& k0, int64_t& k1);
// Output columns [a, b) of OW whose k taps (stride st, begin pad p, dilation d) all lie in the
// input row of n columns; the columns before a and from b on have taps outside it.
void interior_cols(int64_t p, int64_t st, int64_t d, int64_t k, int64_t n, int64_t OW, int64_t& a, int64_t& b);

// Work split of conv: tasks [0, tasks(N)) cover every (image, channel group, row range).
// Dense: groups of up to 4 output blocks, rows = segments of row_len consecutive output pixels
// (flat). Depthwise: one group per channel block, rows = output rows.
struct ConvTiling {
  int64_t groups = 0;
  int64_t rows = 0;
  int64_t row_len = 0;    // pixels per row
  int64_t rows_per_task = 1;
  bool flat = false;      // rows are pixel segments of the image's output, not output rows
  bool groups_inner = false;  // see decode
  int64_t row_tasks() const { return (rows + rows_per_task - 1) / rows_per_task; }
  int64_t tasks(int64_t N) const { return N * groups * row_tasks(); }
  // task -> image n, group g, row range [r0, r1). Row ranges inner (the default): the threads'
  // contiguous parts split the groups, and so the weights (a thread streams only its groups'
  // weights, but all of the input). Groups inner: the parts split the pixels (a thread streams
  // its share of the input once, reused from cache by every group, but all of the weights);
  // conv_tiling picks it when the input is larger than the weights.
  void decode(int64_t task, int64_t& n, int64_t& g, int64_t& r0, int64_t& r1) const {
    const int64_t rt_n = row_tasks(), per_image = groups * rt_n, t = task % per_image;
    n = task / per_image;
    const int64_t rt = groups_inner ? t / groups : t % rt_n;
    g = groups_inner ? t % groups : t / rt_n;
    r0 = rt * rows_per_task;
    r1 = std::min(rows, r0 + rows_per_task);
  }
};

// The taps of a dense conv tile, each as tap.template operator()<N>(t) with the input channels
// per tap known at compile time where they can be: N = 16 for a blocked input's full blocks and 0
// (the run-time count) for its last tail_taps (a last block of fewer than 16 channels); for a
// plain input N = 3 (RGB) or 0.
template <bool PLAIN, class Tap>
inline void for_each_tap(int64_t ntaps, int64_t tail_taps, int64_t nic, Tap&& tap) {
  if constexpr (!PLAIN) {
    const int64_t full = ntaps - tail_taps;
    int64_t t = 0;
    for (; t < full; ++t) tap.template operator()<16>(t);
    for (; t < ntaps; ++t) tap.template operator()<0>(t);
  } else if (nic == 3) {
    for (int64_t t = 0; t < ntaps; ++t) tap.template operator()<3>(t);
  } else {
    for (int64_t t = 0; t < ntaps; ++t) tap.template operator()<0>(t);
  }
}

// The task loop of the per-ISA conv_rows: a depthwise task is dw(n, channel block, rows r0..r1);
// a dense one is seg(args, first output block, blocks in the group (<= 4), pixels p0..p1) with the
// args' image pointers set for image n. max_segment: the most pixels a dense task may hold.
template <class Dw, class Seg>
void for_each_conv_task(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                        const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1,
                        int64_t max_segment, Dw&& dw, Seg&& seg) {
  if (cw.depthwise) {
    for (int64_t task = task0; task < task1; ++task) {
      int64_t n, cb, r0, r1;
      t.decode(task, n, cb, r0, r1);
      dw(n, cb, r0, r1);
    }
    return;
  }
  DenseConvArgs a = dense_conv_args(cw, s, act);
  if (t.row_len > max_segment) return;  // (conv_tiling and the kernel file disagree: never)
  for (int64_t task = task0; task < task1; ++task) {
    int64_t n, grp, sg, sg1;
    t.decode(task, n, grp, sg, sg1);
    const int64_t p0 = sg * t.row_len, p1 = std::min(s.OH * s.OW, p0 + t.row_len);
    a.x = x + n * a.x_img;
    a.y = y + n * a.y_img;
    a.res = residual ? residual + n * a.y_img : nullptr;
    const int64_t ob = grp * 4;
    seg(a, ob, std::min<int64_t>(4, a.OB - ob), p0, p1);
  }
}
// threads: how many will share the tasks (more, shorter segments when there are few).
ConvTiling conv_tiling(const ConvWeights& cw, const Conv2dShape& s, int threads = 1);

}  // namespace basalt::kernels::nchwc
