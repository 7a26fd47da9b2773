// Blocked-layout (NCHWc, block 16) kernels for AVX-512: dense and depthwise convolution, pooling.
//
// Dense conv: a tile is P output pixels of one row x F output-channel blocks (F*16 channels),
// kept in P*F zmm accumulators (F = 4: P = 6; F <= 2: P = 12). For each input channel and tap
// the tile loads F weight vectors and broadcasts P input values: every operand read in place.
// The input channels are walked in chunks whose weights fit L1 (kChunkFloats); partial sums of a
// chunk go to the output and come back for the next chunk, so the output rows of a task stay in L1
// while the chunk's weights are reused over all of them. The last chunk applies bias, residual
// and activation in registers and writes zeros into the padding channels.
// Padding: conv() first copies a padded input into the workspace, so the dense kernel never
// tests a tap; tiles are runs of consecutive output pixels that may span rows.
#include "kernels/activation_avx512.hpp"
#include "kernels/nchwc.hpp"

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <utility>
#include <vector>

namespace basalt::kernels::nchwc {

namespace {

// The first n lanes of a vector (all 16 from n = 16 on).
inline __mmask16 first_lanes(int64_t n) { return n >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << n) - 1u); }

// Channels of output block ob that exist (16 except in the last block).
inline __mmask16 valid_lanes(const DenseConvArgs& a, int64_t ob) { return first_lanes(a.s->M - ob * 16); }

// The inner product of one tile: P output pixels x F output blocks, over `ntaps` taps (an input
// block and a kernel position: the input offsets in taps[]), each of 16 input channels for a
// blocked input (nic in the last tail_taps taps: a partial last block) and nic = C for a plain
// one. xp[p]: pixel p's input at tap offset 0; w0: the taps' weights, 16 * F * 16 floats per tap
// (dense_w_index). acc is loaded from / stored to y
// (F blocks of ys_blk floats apart, P pixels of 16 floats); `first`: start from 0 instead.
// Kept out of line with only what its loops need, so the accumulators, weights and pixel
// pointers all stay in registers.
// nt tiles in a row: tile i reads xp[p] + i * xstep and writes (and takes the residual at) y +
// i * step. One call for a run of tiles pays the call and the set-up once: for 1x1 convs with
// 16-32 input channels that was a fifth of a tile's time (Zen 4, MobileNetV2's 112x112 1x1 convs
// 0.81 -> 0.65 ms per run, hot microbenchmark 70 -> 86 GFLOP/s).
// pf, pf_total: cache lines to prefetch into L2 alongside (spread over the tiles and their taps).
// The last chunk's epilogue, applied in registers before the store.
struct TileEpilogue {
  const float* bias;      // the tile's first block's 16 channels; F blocks follow
  const float* residual;  // at the tile's first output, laid out like y; or null
  const Activation* act;
  __mmask16 last_lanes;   // channels that exist in the tile's last block
};

template <int F, int P, bool PLAIN, bool RUN>
__attribute__((noinline)) void tile_kernel(const float* const* xp, const int64_t* taps, int64_t ntaps, int nic,
                                           int64_t tail_taps, int64_t xs_ic, const float* w0, float* y0, int64_t ys_blk,
                                           bool first, const float* pf0, int64_t pf_total, const TileEpilogue* epi0,
                                           int64_t nt, int64_t step, int64_t xstep) {
  if constexpr (!RUN) nt = 1;  // a single tile: no loop (the code of the kernel before runs)
  for (int64_t i = 0; i < nt; ++i) {
    float* y = y0 + i * step;
    const float* pf = pf0 ? pf0 + (i * pf_total / nt) * 16 : nullptr;
    const int64_t pf_lines = (i + 1) * pf_total / nt - i * pf_total / nt;
    TileEpilogue ecopy;
    const TileEpilogue* epi = epi0;
    if (RUN && epi0) {  // this tile's residual
      ecopy = *epi0;
      if (ecopy.residual) ecopy.residual += i * step;
      epi = &ecopy;
    }
    __m512 acc[P][F];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
      for (int f = 0; f < F; ++f) acc[p][f] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + f * ys_blk + p * 16);
    const float* x[P];
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p) x[p] = xp[p] + i * xstep;
    if (epi && epi->residual) {  // the epilogue's residual lines, in L1 by the time it reads them
#pragma GCC unroll 4
      for (int f = 0; f < F; ++f)
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) _mm_prefetch(reinterpret_cast<const char*>(epi->residual + f * ys_blk + p * 16), _MM_HINT_T0);
    }
    auto tap = [&]<int KN>(int64_t t) {
      const int64_t off = taps[t];
      const float* wp = w0 + t * (16 * F * 16);
      if (pf_lines) {  // this tap's share of the lines to prefetch
        for (int64_t l = t * pf_lines / ntaps, e = (t + 1) * pf_lines / ntaps; l < e; ++l)
          _mm_prefetch(reinterpret_cast<const char*>(pf + l * 16), _MM_HINT_T1);
      }
      // KN input channels per tap: 16 for blocked inputs; for plain ones the image's channels,
      // a constant for the usual 3 (an RGB stem), so that the loop unrolls. Stem node time, 1
      // thread, median of 50 runs, four alternating processes: MobileNetV2's 3x3 296-313 ->
      // 266-278 us, SqueezeNet's 395-413 -> 373-395, ResNet-50's 7x7 1541-1615 -> 1526-1616.
      const int n = KN ? KN : nic;
#pragma GCC unroll 4
      for (int ic = 0; ic < n; ++ic, wp += F * 16) {
        const int64_t o = off + (PLAIN ? ic * xs_ic : ic);
        __m512 wv[F];
#pragma GCC unroll 4
        for (int f = 0; f < F; ++f) wv[f] = _mm512_loadu_ps(wp + f * 16);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          const __m512 b = _mm512_set1_ps(x[p][o]);
#pragma GCC unroll 4
          for (int f = 0; f < F; ++f) acc[p][f] = _mm512_fmadd_ps(b, wv[f], acc[p][f]);
        }
      }
    };
    // All 16 channels of every input block but the last one of a layer whose channel count is
    // not a multiple of 16: its taps, the last tail_taps, have only `nic` (the padding channels
    // are 0, and so are their weights). MobileNetV2's and Inception v1's 24-channel inputs: a
    // quarter of those convs' FMAs multiplied zeros.
    for_each_tap<PLAIN>(ntaps, tail_taps, nic, tap);
    if (epi) {
#pragma GCC unroll 4
      for (int f = 0; f < F; ++f) {
        const __m512 b = _mm512_loadu_ps(epi->bias + f * 16);
        const __mmask16 lanes = f == F - 1 ? epi->last_lanes : __mmask16(0xFFFF);
        __m512 v[P];
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) {
          v[p] = _mm512_add_ps(acc[p][f], b);
          if (epi->residual) v[p] = _mm512_add_ps(v[p], _mm512_loadu_ps(epi->residual + f * ys_blk + p * 16));
        }
        act_zmm_n(v, P, *epi->act);
#pragma GCC unroll 16
        for (int p = 0; p < P; ++p) acc[p][f] = _mm512_maskz_mov_ps(lanes, v[p]);
      }
    }
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 4
      for (int f = 0; f < F; ++f) _mm512_storeu_ps(y + f * ys_blk + p * 16, acc[p][f]);
  }
}

// P consecutive output pixels [pix0, pix0 + P) of the image (they may span rows; pofs: their
// input offsets) x output blocks [ob, ob + F), input blocks [c0, c1). The input has no padding
// (conv() copies it into a padded buffer first), so every tap of every pixel is inside it.
// first: start from 0 (else from y); last: apply the epilogue. nt > 1: nt such tiles in a row,
// the pixels' inputs evenly spaced, `xstep` floats from one tile's to the next's (the caller
// checks).
template <int F, int P, bool PLAIN>
void tile(const DenseConvArgs& a, int64_t pix0, const int64_t* pofs, int64_t ob, int64_t c0,
          int64_t c1, bool first, bool last, const float* pf, int64_t pf_lines, int64_t nt = 1, int64_t xstep = 0) {
  const Conv2dShape& s = *a.s;
  const int64_t KK = s.KH * s.KW;
  float* y = a.y + ob * a.ys_blk + pix0 * 16;
  const float* xp[P];
  for (int p = 0; p < P; ++p) xp[p] = a.x + pofs[p];
  const float* w = a.cw->w.data() + (ob / 4) * a.wblk + c0 * KK * 16 * F * 16;  // dense_w_index
  // Plain inputs have one block of nic channels. A blocked one's last block has fewer than 16
  // when C is not a multiple of 16; its KK taps end the range when c1 is the last block.
  const bool tail = !PLAIN && c1 == a.ICB && s.C % 16 != 0;
  const int nic = PLAIN ? int(std::min<int64_t>(16, s.C)) : tail ? int(s.C % 16) : 16;
  const int64_t tail_taps = tail ? KK : 0;
  TileEpilogue epi;
  if (last) {
    epi.bias = a.cw->bias.data() + ob * 16;
    epi.residual = a.res ? a.res + ob * a.ys_blk + pix0 * 16 : nullptr;
    epi.act = a.act;
    epi.last_lanes = valid_lanes(a, ob + F - 1);
  }
  if (nt > 1)
    tile_kernel<F, P, PLAIN, true>(xp, a.taps.data() + c0 * KK, (c1 - c0) * KK, nic, tail_taps, a.xs_ic, w, y, a.ys_blk,
                                   first, pf, pf_lines, last ? &epi : nullptr, nt, P * 16, xstep);
  else
    tile_kernel<F, P, PLAIN, false>(xp, a.taps.data() + c0 * KK, (c1 - c0) * KK, nic, tail_taps, a.xs_ic, w, y,
                                    a.ys_blk, first, pf, pf_lines, last ? &epi : nullptr, 1, 0, 0);
}

template <int F>
constexpr int max_pixels() {
  return F >= 4 ? 6 : 8;  // (more pixels would run out of general registers for their pointers)
}

template <int F, int P, bool PLAIN>
void tiles_p(const DenseConvArgs& a, int64_t pix, const int64_t* pofs, int64_t n, int64_t ob,
             int64_t c0, int64_t c1, bool first, bool last, const float* pf, int64_t pf_lines) {
  // n < max P: one tile of exactly n pixels
  if constexpr (P > 1) {
    if (n < P) return tiles_p<F, P - 1, PLAIN>(a, pix, pofs, n, ob, c0, c1, first, last, pf, pf_lines);
  }
  tile<F, P, PLAIN>(a, pix, pofs, ob, c0, c1, first, last, pf, pf_lines);
}

// Floats of weights per chunk of input blocks (L1 is 48 KB: leave room for the input and output).
constexpr int64_t kChunkFloats = 8192;
constexpr int64_t kSegment = 120;  // the most ConvTiling::row_len of dense convs (nchwc.cpp)

// Output pixels [p0, p1) of the image, blocks [ob, ob + F): input-block chunks outside, so the
// chunk's weights stay in L1 over the segment's tiles.
template <int F, bool PLAIN>
void conv_segment(const DenseConvArgs& a, int64_t ob, int64_t p0, int64_t p1) {
  const Conv2dShape& s = *a.s;
  const int64_t per_blk = s.KH * s.KW * 256 * F;
  const int64_t chunk = std::max<int64_t>(1, kChunkFloats / per_blk);
  constexpr int PM = max_pixels<F>();
  // input offset of each output pixel's first tap
  int64_t pofs[kSegment];
  for (int64_t pix = p0, oh = p0 / s.OW, ow = p0 % s.OW; pix < p1; ++pix) {
    pofs[pix - p0] = oh * s.sh * a.xs_row + ow * s.sw * a.xs_pix;
    if (++ow == s.OW) ow = 0, ++oh;
  }
  // Runs of output pixels whose inputs are evenly spaced (one output row, or the whole segment of
  // a 1x1 stride-1 conv without padding): the run's full tiles go to one kernel call, which pays
  // the call and the set-up once. run_end[k]: the last pixel of the run pixel p0 + k is in.
  // Stems (a plain 3-channel input, 27 taps of 3x3) spent a fifth of a tile's time there.
  const int64_t d = s.sw * a.xs_pix, n = p1 - p0;
  int64_t run_end[kSegment];
  run_end[n - 1] = n - 1;
  for (int64_t k = n - 2; k >= 0; --k) run_end[k] = pofs[k + 1] - pofs[k] == d ? run_end[k + 1] : k;
  for (int64_t c0 = 0; c0 < a.ICB; c0 += chunk) {
    const int64_t c1 = std::min(a.ICB, c0 + chunk);
    const bool first = c0 == 0, last = c1 == a.ICB;
    // The tiles prefetch the next chunk's weights into L2, each its share, so that they stream
    // in from memory while this chunk computes (a chunk's weights are read from memory once per
    // segment; the later tiles find them in cache).
    const float* next = c1 < a.ICB ? a.cw->w.data() + (ob / 4) * a.wblk + c1 * s.KH * s.KW * 16 * F * 16 : nullptr;
    const int64_t next_lines = next ? (std::min(a.ICB, c1 + chunk) - c1) * s.KH * s.KW * F * 16 : 0;
    const int64_t ntiles = (n + PM - 1) / PM;
    for (int64_t pix = p0, i = 0; pix < p1;) {
      const int64_t l0 = i * next_lines / ntiles;
      const int64_t k = pix - p0, nrun = (run_end[k] - k + 1) / PM;  // full tiles in the run from pix
      if (nrun >= 2) {
        const int64_t l1 = (i + nrun) * next_lines / ntiles;
        tile<F, PM, PLAIN>(a, pix, pofs + k, ob, c0, c1, first, last, next ? next + l0 * 16 : nullptr, l1 - l0,
                           nrun, PM * d);
        pix += nrun * PM;
        i += nrun;
        continue;
      }
      // one tile (it may span rows: every pixel has its own input offset)
      const int64_t l1 = (i + 1) * next_lines / ntiles;
      tiles_p<F, PM, PLAIN>(a, pix, pofs + k, std::min<int64_t>(PM, p1 - pix), ob, c0, c1, first, last,
                            next ? next + l0 * 16 : nullptr, l1 - l0);
      pix += PM;
      ++i;
    }
  }
}

// ------------------------------------------------------------------ depthwise

// Stores P depthwise outputs (row oh, columns ow0..): + residual, activation, padding lanes 0.
template <int P>
inline void dw_store(const Conv2dShape& s, const __m512* acc, const float* rb, const Activation& act, __mmask16 lanes,
                     float* yb, int64_t oh, int64_t ow0) {
  float* y = yb + (oh * s.OW + ow0) * 16;
  const Activation a = act;  // a local copy: the stores cannot alias it
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) {
    __m512 v = acc[p];
    if (rb) v = _mm512_add_ps(v, _mm512_loadu_ps(rb + (oh * s.OW + ow0 + p) * 16));
    _mm512_storeu_ps(y + p * 16, _mm512_maskz_mov_ps(lanes, act_zmm(v, a)));
  }
}

// Depthwise: block cb of image n, output rows [r0, r1). Each pixel is one zmm (16 channels):
// P pixels at a time, the taps' weights loaded once per tile.
template <int P>
void dw_tile(const Conv2dShape& s, const float* xb, const float* wb, __m512 bias, const float* rb, const Activation& act,
             __mmask16 lanes, float* yb, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  __m512 acc[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = xb + (oh * s.sh - s.pt + kh * s.dh) * s.W * 16;
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      const __m512 w = _mm512_loadu_ps(wb + (kh * s.KW + kw) * 16);
      const float* xp = xr + (ow0 * s.sw - s.pl + kw * s.dw) * 16;
#pragma GCC unroll 16
      for (int p = 0; p < P; ++p) acc[p] = _mm512_fmadd_ps(_mm512_loadu_ps(xp + p * s.sw * 16), w, acc[p]);
    }
  }
  dw_store<P>(s, acc, rb, act, lanes, yb, oh, ow0);
}

// dw_tile for 3-wide kernel rows at dilation 1 and stride SW (1 or 2: MobileNet's 3x3 depthwise
// convs): each input vector of a kernel row is loaded once and feeds every output it is a tap of,
// (P - 1) * SW + 3 loads per kernel row where dw_tile makes 3P. Depthwise 3x3 microbenchmark on
// MobileNetV2's stride-1 shapes, 1 thread, best of 3000 runs, three alternating processes (Zen 4):
// C32@112 164 -> 147 us, C144@56 148 -> 128, C192@28 64 -> 56, C576@14 50 -> 44, C960@7 24 -> 21;
// stride 2: C144@56 51 -> 44, C96@112 199 -> 196 (bound by reading its 4.8 MB input). MobileNetV2
// (basalt bench, median of 200, four alternating processes): 1 thread 6.18-6.46 -> 6.11-6.41 ms,
// 2 threads 3.72-3.83 -> 3.53-3.68 ms.
// (The same for 5-wide rows, PaddleOCR's 5x5 depthwise convs: (P - 1) * SW + 5 loads per kernel
// row instead of 5P. PaddleOCR rec, 1 thread, compare_nodes.py: W240x1x5x5 @12x80 0.884 -> 0.709
// ms.)
template <int P, int SW, int K>
inline void dw_row_k(const float* xp, const __m512* w, __m512* acc) {
  auto tap = [&]<int i>() {
    const __m512 v = _mm512_loadu_ps(xp + i * 16);
    [&]<int... T>(std::integer_sequence<int, T...>) {
      ((void)((i >= T && (i - T) % SW == 0 && (i - T) / SW < P)
                  ? (acc[(i - T) / SW] = _mm512_fmadd_ps(v, w[T], acc[(i - T) / SW]), 0)
                  : 0),
       ...);
    }(std::make_integer_sequence<int, K>{});
  };
  [&]<int... J>(std::integer_sequence<int, J...>) { (tap.template operator()<J>(), ...); }(
      std::make_integer_sequence<int, (P - 1) * SW + K>{});
}

template <int P, int SW, int K>
void dw_tile_k(const Conv2dShape& s, const float* xb, const float* wb, __m512 bias, const float* rb,
               const Activation& act, __mmask16 lanes, float* yb, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  __m512 acc[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xp = xb + ((oh * s.sh - s.pt + kh * s.dh) * s.W + ow0 * SW - s.pl) * 16;
    __m512 w[K];
#pragma GCC unroll 8
    for (int k = 0; k < K; ++k) w[k] = _mm512_loadu_ps(wb + (kh * K + k) * 16);
    dw_row_k<P, SW, K>(xp, w, acc);
  }
  dw_store<P>(s, acc, rb, act, lanes, yb, oh, ow0);
}

void dw_edge(const Conv2dShape& s, const float* xb, const float* wb, __m512 bias, const float* rb, const Activation& act,
             __mmask16 lanes, float* yb, int64_t oh, int64_t ow, int64_t kh0, int64_t kh1) {
  __m512 acc = bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = xb + (oh * s.sh - s.pt + kh * s.dh) * s.W * 16;
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      int64_t iw = ow * s.sw - s.pl + kw * s.dw;
      if (iw < 0 || iw >= s.W) continue;
      acc = _mm512_fmadd_ps(_mm512_loadu_ps(xr + iw * 16), _mm512_loadu_ps(wb + (kh * s.KW + kw) * 16), acc);
    }
  }
  __m512 v = acc;
  if (rb) v = _mm512_add_ps(v, _mm512_loadu_ps(rb + (oh * s.OW + ow) * 16));
  _mm512_storeu_ps(yb + (oh * s.OW + ow) * 16, _mm512_maskz_mov_ps(lanes, act_zmm(v, act)));
}

template <int P>
void dw_tiles(const Conv2dShape& s, const float* xb, const float* wb, __m512 bias, const float* rb,
              const Activation& act, __mmask16 lanes, float* yb, int64_t oh, int64_t ow, int64_t n, int64_t kh0,
              int64_t kh1) {
  if constexpr (P > 1) {
    if (n < P) return dw_tiles<P - 1>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, n, kh0, kh1);
  }
  if (s.KW == 3 && s.dw == 1 && s.sw == 1) return dw_tile_k<P, 1, 3>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
  if (s.KW == 3 && s.dw == 1 && s.sw == 2) return dw_tile_k<P, 2, 3>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
  if (s.KW == 5 && s.dw == 1 && s.sw == 1) return dw_tile_k<P, 1, 5>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
  if (s.KW == 5 && s.dw == 1 && s.sw == 2) return dw_tile_k<P, 2, 5>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
  dw_tile<P>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
}

// P output pixels from column ow0 of a 3x3 depthwise conv with padding 1 on the left, dilation
// 1 and stride SW across: P independent accumulators, the taps unrolled, so each input vector is
// loaded once; LEFT / RIGHT: the chunk holds the row's first / last pixel, whose missing tap
// (column -1 / column W) is known at compile time. A row is a few such chunks, the edge pixels
// inside them: dw_edge's lone chains of dependent FMAs were ~40% of a 14x14 row (2 of its 14
// pixels) and ~25% of a 28x28 one. Same order of sums as dw_tile / dw_edge (kernel row by kernel
// row, taps left to right).
template <int P, int SW, bool LEFT, bool RIGHT>
void dw_chunk(const Conv2dShape& s, const float* xb, const float* wb, __m512 bias, const float* rb,
              const Activation& act, __mmask16 lanes, float* yb, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  __m512 acc[P];
#pragma GCC unroll 16
  for (int p = 0; p < P; ++p) acc[p] = bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = xb + ((oh * s.sh - s.pt + kh) * s.W + ow0 * SW - 1) * 16;  // column ow0 * SW - 1
    const __m512 w[3] = {_mm512_loadu_ps(wb + kh * 48), _mm512_loadu_ps(wb + kh * 48 + 16), _mm512_loadu_ps(wb + kh * 48 + 32)};
#pragma GCC unroll 16
    for (int p = 0; p < P; ++p)
#pragma GCC unroll 3
      for (int k = 0; k < 3; ++k) {
        if (LEFT && p == 0 && k == 0) continue;           // column -1
        if (RIGHT && p == P - 1 && k == 2) continue;      // column W
        acc[p] = _mm512_fmadd_ps(_mm512_loadu_ps(xr + (p * SW + k) * 16), w[k], acc[p]);
      }
  }
  dw_store<P>(s, acc, rb, act, lanes, yb, oh, ow0);
}

using DwChunkFn = void (*)(const Conv2dShape&, const float*, const float*, __m512, const float*, const Activation&,
                           __mmask16, float*, int64_t, int64_t, int64_t, int64_t);

constexpr int kDwChunk = 16;

// dw_chunk<P, SW, LEFT, RIGHT>, P in [1, 16], SW in {1, 2}.
DwChunkFn dw_chunk_fn(int64_t P, int64_t SW, bool left, bool right) {
  if (P < 1 || P > kDwChunk || SW < 1 || SW > 2) return nullptr;  // (callers pass these only)
  struct Table {  // (a plain array: std::array of this pointer type drops its __m512 attributes, with a warning)
    DwChunkFn f[kDwChunk * 8];
  };
  static constexpr Table table = []<int... I>(std::integer_sequence<int, I...>) {
    // index ((P - 1) * 2 + (SW - 1)) * 4 + LEFT * 2 + RIGHT
    return Table{{&dw_chunk<I / 8 + 1, (I / 4) % 2 + 1, ((I / 2) % 2) != 0, (I % 2) != 0>...}};
  }(std::make_integer_sequence<int, kDwChunk * 8>{});
  return table.f[size_t(((P - 1) * 2 + (SW - 1)) * 4 + (left ? 2 : 0) + (right ? 1 : 0))];
}

// Whether the rows of s run as dw_chunks (3x3, padding 1 on the left, dilation 1, stride 1 or 2
// across, no pixel with more than one missing tap in a row).
bool dw_chunks_apply(const Conv2dShape& s) {
  return s.KW == 3 && s.dw == 1 && s.dh == 1 && s.pl == 1 && (s.sw == 1 || s.sw == 2) && s.OW >= 1 &&
         (s.OW - 1) * s.sw + 1 <= s.W && s.W >= 2;
}

void dw_task(const ConvWeights& cw, const Conv2dShape& s, const float* x, const float* res, const Activation& act,
             float* y, int64_t n, int64_t cb, int64_t r0, int64_t r1) {
  const int64_t CB = blocks(s.C);
  const float* xb = x + (n * CB + cb) * s.H * s.W * 16;
  const int64_t yo = (n * CB + cb) * s.OH * s.OW * 16;
  const float* rb = res ? res + yo : nullptr;
  float* yb = y + yo;
  const float* wb = cw.w.data() + cb * s.KH * s.KW * 16;
  const __m512 bias = _mm512_loadu_ps(cw.bias.data() + cb * 16);
  const __mmask16 lanes = first_lanes(s.C - cb * 16);
  if (dw_chunks_apply(s)) {
    // the row in chunks of 16 pixels, the first holding the left edge, the last the right one
    const bool right = (s.OW - 1) * s.sw + 1 >= s.W;  // the last pixel's right tap is column W
    const int64_t nchunk = (s.OW + kDwChunk - 1) / kDwChunk, last = s.OW - (nchunk - 1) * kDwChunk;
    const DwChunkFn only = nchunk == 1 ? dw_chunk_fn(s.OW, s.sw, true, right) : nullptr;
    const DwChunkFn first = dw_chunk_fn(kDwChunk, s.sw, true, false);
    const DwChunkFn mid = dw_chunk_fn(kDwChunk, s.sw, false, false);
    const DwChunkFn end = dw_chunk_fn(last, s.sw, false, right);
    for (int64_t oh = r0; oh < r1; ++oh) {
      int64_t kh0, kh1;
      valid_taps(oh, s.sh, s.pt, s.dh, s.KH, s.H, kh0, kh1);
      if (nchunk == 1) {
        only(s, xb, wb, bias, rb, act, lanes, yb, oh, 0, kh0, kh1);
        continue;
      }
      first(s, xb, wb, bias, rb, act, lanes, yb, oh, 0, kh0, kh1);
      for (int64_t c = 1; c + 1 < nchunk; ++c) mid(s, xb, wb, bias, rb, act, lanes, yb, oh, c * kDwChunk, kh0, kh1);
      end(s, xb, wb, bias, rb, act, lanes, yb, oh, (nchunk - 1) * kDwChunk, kh0, kh1);
    }
    return;
  }
  int64_t owa, owb;
  interior_cols(s.pl, s.sw, s.dw, s.KW, s.W, s.OW, owa, owb);
  for (int64_t oh = r0; oh < r1; ++oh) {
    int64_t kh0, kh1;
    valid_taps(oh, s.sh, s.pt, s.dh, s.KH, s.H, kh0, kh1);
    for (int64_t ow = 0; ow < owa; ++ow) dw_edge(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
    for (int64_t ow = owa; ow < owb; ow += 8)
      dw_tiles<8>(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, std::min<int64_t>(8, owb - ow), kh0, kh1);
    for (int64_t ow = owb; ow < s.OW; ++ow) dw_edge(s, xb, wb, bias, rb, act, lanes, yb, oh, ow, kh0, kh1);
  }
}

}  // namespace

void conv_rows_avx512(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                      const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1) {
  for_each_conv_task(
      cw, s, t, x, residual, act, y, task0, task1, kSegment,
      [&](int64_t n, int64_t cb, int64_t r0, int64_t r1) { dw_task(cw, s, x, residual, act, y, n, cb, r0, r1); },
      [&](const DenseConvArgs& a, int64_t ob, int64_t fg, int64_t p0, int64_t p1) {
        // F output blocks at once: the tile's accumulators are P x F zmm.
        switch (int(fg) + (cw.plain_input ? 4 : 0)) {
          case 1: conv_segment<1, false>(a, ob, p0, p1); break;
          case 2: conv_segment<2, false>(a, ob, p0, p1); break;
          case 3: conv_segment<3, false>(a, ob, p0, p1); break;
          case 4: conv_segment<4, false>(a, ob, p0, p1); break;
          case 5: conv_segment<1, true>(a, ob, p0, p1); break;
          case 6: conv_segment<2, true>(a, ob, p0, p1); break;
          case 7: conv_segment<3, true>(a, ob, p0, p1); break;
          default: conv_segment<4, true>(a, ob, p0, p1); break;
        }
      });
}

// ------------------------------------------------------------------ layout conversions

namespace {

// The masked forms with a full mask are the same instructions as the plain unpack / shuffle
// intrinsics, which pass an undefined vector that GCC 12 reports as maybe uninitialized.
inline __m512 unpack_lo(__m512 a, __m512 b) { return _mm512_mask_unpacklo_ps(a, 0xFFFF, a, b); }
inline __m512 unpack_hi(__m512 a, __m512 b) { return _mm512_mask_unpackhi_ps(a, 0xFFFF, a, b); }
inline __m512 unpack_lo64(__m512 a, __m512 b) {
  const __m512d x = _mm512_castps_pd(a);
  return _mm512_castpd_ps(_mm512_mask_unpacklo_pd(x, 0xFF, x, _mm512_castps_pd(b)));
}
inline __m512 unpack_hi64(__m512 a, __m512 b) {
  const __m512d x = _mm512_castps_pd(a);
  return _mm512_castpd_ps(_mm512_mask_unpackhi_pd(x, 0xFF, x, _mm512_castps_pd(b)));
}
template <int IMM>
inline __m512 lanes(__m512 a, __m512 b) { return _mm512_mask_shuffle_f32x4(a, 0xFFFF, a, b, IMM); }

// In-register transpose of a 16 x 16 float block: r[i] lane j <- r[j] lane i.
inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {  // pairs of rows interleaved within each 128-bit lane
    t[2 * i] = unpack_lo(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = unpack_hi(r[2 * i], r[2 * i + 1]);
  }
  __m512 u[16];  // u[4g + k], 128-bit lane L: column 4L + k of rows 4g .. 4g + 3
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    u[4 * g] = unpack_lo64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 1] = unpack_hi64(t[4 * g], t[4 * g + 2]);
    u[4 * g + 2] = unpack_lo64(t[4 * g + 1], t[4 * g + 3]);
    u[4 * g + 3] = unpack_hi64(t[4 * g + 1], t[4 * g + 3]);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {  // row 4L + k gathers lane L of u[k], u[4 + k], u[8 + k], u[12 + k]
    const __m512 v0 = lanes<0x44>(u[k], u[4 + k]), v1 = lanes<0xEE>(u[k], u[4 + k]);
    const __m512 v2 = lanes<0x44>(u[8 + k], u[12 + k]), v3 = lanes<0xEE>(u[8 + k], u[12 + k]);
    r[k] = lanes<0x88>(v0, v2);
    r[4 + k] = lanes<0xDD>(v0, v2);
    r[8 + k] = lanes<0x88>(v1, v3);
    r[12 + k] = lanes<0xDD>(v1, v3);
  }
}

// max(v, acc): v where v > acc, else acc (a NaN v is skipped; acc starts at -inf and so is never NaN).
inline __m512 vmax(__m512 v, __m512 acc) { return _mm512_mask_max_ps(acc, 0xFFFF, v, acc); }

}  // namespace

void to_blocked_avx512(const float* xs, int64_t nc, int64_t HW, float* yb, int64_t p0, int64_t p1) {
  __m512 r[16];
  int64_t q = p0;
  if (nc == 16) {
    // Whole 16 x 16 blocks with the 128-bit lane stage done by the loads: s[4k + i] lane R holds
    // pixels 4k .. 4k + 3 of channel 4R + i, so a 4 x 4 transpose within the lanes of s[4k .. 4k + 3]
    // gives pixels 4k .. 4k + 3 (lane R: channels 4R .. 4R + 3). Half the shuffles of
    // transpose16, which bound this loop (the inserts' ALU part also runs on port 0).
    for (; q + 16 <= p1; q += 16) {
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          const float* src = xs + i * HW + q + 4 * k;
          __m512 v = _mm512_castps128_ps512(_mm_loadu_ps(src));
          v = _mm512_insertf32x4(v, _mm_loadu_ps(src + 4 * HW), 1);
          v = _mm512_insertf32x4(v, _mm_loadu_ps(src + 8 * HW), 2);
          r[4 * k + i] = _mm512_insertf32x4(v, _mm_loadu_ps(src + 12 * HW), 3);
        }
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        const __m512 t0 = unpack_lo(r[4 * k], r[4 * k + 1]), t1 = unpack_hi(r[4 * k], r[4 * k + 1]);
        const __m512 t2 = unpack_lo(r[4 * k + 2], r[4 * k + 3]), t3 = unpack_hi(r[4 * k + 2], r[4 * k + 3]);
        float* y = yb + (q + 4 * k) * 16;
        _mm512_storeu_ps(y, unpack_lo64(t0, t2));
        _mm512_storeu_ps(y + 16, unpack_hi64(t0, t2));
        _mm512_storeu_ps(y + 32, unpack_lo64(t1, t3));
        _mm512_storeu_ps(y + 48, unpack_hi64(t1, t3));
      }
    }
  }
  for (; q < p1; q += 16) {
    const int64_t np = std::min<int64_t>(16, p1 - q);
    const __mmask16 m = first_lanes(np);
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)  // channels past nc: zeros (an empty mask reads nothing)
      r[c] = _mm512_maskz_loadu_ps(c < nc ? m : __mmask16(0), xs + std::min<int64_t>(c, nc - 1) * HW + q);
    transpose16(r);
    for (int64_t p = 0; p < np; ++p) _mm512_storeu_ps(yb + (q + p) * 16, r[p]);
  }
}

void from_blocked_avx512(const float* xb, int64_t nc, int64_t HW, float* ys, int64_t p0, int64_t p1) {
  __m512 r[16];
  for (int64_t q = p0; q < p1; q += 16) {
    const int64_t np = std::min<int64_t>(16, p1 - q);
    const __mmask16 m = first_lanes(np);
#pragma GCC unroll 16
    for (int p = 0; p < 16; ++p)
      r[p] = _mm512_maskz_loadu_ps(p < np ? __mmask16(0xFFFF) : __mmask16(0), xb + (q + std::min<int64_t>(p, np - 1)) * 16);
    transpose16(r);
    for (int64_t c = 0; c < nc; ++c) _mm512_mask_storeu_ps(ys + c * HW + q, m, r[c]);
  }
}

// ------------------------------------------------------------------ pooling (nchwc_pool.inc)

// One channel block as one zmm.
struct B {
  using V = __m512;
  static constexpr int kPoolPixels = 8;
  static constexpr int kGlobalChains = 4;
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
  static V zero() { return _mm512_setzero_ps(); }
  static V set1(float f) { return _mm512_set1_ps(f); }
  static V add(V a, V b) { return _mm512_add_ps(a, b); }
  static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V max(V v, V acc) { return vmax(v, acc); }
  static V div(V v, float d) { return _mm512_div_ps(v, _mm512_set1_ps(d)); }
  static V act(V v, const Activation& a) { return act_zmm(v, a); }
  static void store_first(float* p, V v, int64_t n) { _mm512_mask_storeu_ps(p, first_lanes(n), v); }
};

#include "kernels/nchwc_pool.inc"

void pool_planes_avx512(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  pool_planes_blocked(x, y, p0, p1, g, t);
}

void global_pool_avx512(bool avg, const float* xb, int64_t nc, int64_t HW, float* y) {
  global_pool_blocked(avg, xb, nc, HW, y);
}

void scale_shift_avx512(const float* xb, const float* scale, const float* shift, const Activation& act, float* yb,
                        int64_t p0, int64_t p1) {
  scale_shift_blocked(xb, scale, shift, act, yb, p0, p1);
}

}  // namespace basalt::kernels::nchwc
