// Blocked-layout (NCHWc, block 16) kernels for AVX2: the schemes of nchwc_avx512.cpp with one
// channel block held as two ymm (a `Blk`), for CPUs without AVX-512 (16 vector registers).
//
// Dense conv: a tile is P <= 6 output pixels x ONE output block (12 accumulators, the block's two
// weight vectors and a broadcast: 15 of the 16 registers). A task's group of up to 4 output
// blocks (the packed weight layout, dense_w_index) is walked block by block; for each, the input
// channels go in chunks whose weights stay in L1 while the segment's tiles reuse them, partial
// sums going to the output and back between chunks, as in the AVX-512 kernel. Every operand is
// read in place: weights as two vector loads per input channel, inputs as broadcasts.
// Depthwise, pools, layout conversions and the blocked scale/shift vectorize along the 16
// channels of a pixel, two ymm at a time.
#include "kernels/activation_avx2.hpp"
#include "kernels/nchwc.hpp"

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <limits>
#include <utility>

namespace basalt::kernels::nchwc {

namespace {

// ------------------------------------------------------------------ one channel block

struct Blk {
  __m256 lo, hi;  // channels 0-7, 8-15
};

inline Blk bload(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
inline void bstore(float* p, Blk v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
inline Blk bzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
inline Blk bset1(float f) { return {_mm256_set1_ps(f), _mm256_set1_ps(f)}; }
inline Blk badd(Blk a, Blk b) { return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)}; }
inline Blk bfmadd(Blk a, Blk b, Blk c) { return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)}; }
inline Blk bdiv(Blk a, __m256 d) { return {_mm256_div_ps(a.lo, d), _mm256_div_ps(a.hi, d)}; }
// max(v, acc): v where v > acc, else acc (maxps returns its second operand when either is NaN:
// a NaN v is skipped, as in the AVX-512 kernels; acc starts at -inf and so is never NaN).
inline Blk bmax(Blk v, Blk acc) { return {_mm256_max_ps(v.lo, acc.lo), _mm256_max_ps(v.hi, acc.hi)}; }
inline Blk bact(Blk v, const Activation& act) { return {act_ymm(v.lo, act), act_ymm(v.hi, act)}; }

// The channels of a block that exist (the first n of 16): all-ones lanes, as float masks.
struct Lanes {
  __m256 lo, hi;
};
inline Lanes first_lanes(int64_t n) {
  const __m256i t0 = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), t1 = _mm256_setr_epi32(8, 9, 10, 11, 12, 13, 14, 15);
  const __m256i nn = _mm256_set1_epi32(int(std::clamp<int64_t>(n, 0, 16)));
  return {_mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, t0)), _mm256_castsi256_ps(_mm256_cmpgt_epi32(nn, t1))};
}
inline Blk bkeep(Blk v, const Lanes& m) { return {_mm256_and_ps(v.lo, m.lo), _mm256_and_ps(v.hi, m.hi)}; }

// ------------------------------------------------------------------ dense conv

struct TileEpilogue {
  const float* bias;      // the block's 16 channels
  const float* residual;  // at the tile's first output, laid out like y; or null
  const Activation* act;
  Lanes valid;            // channels that exist in the block
};

// The inner product of one tile: P output pixels x one output block, over `ntaps` taps (an input
// block and a kernel position: the input offsets in taps[]), each of 16 input channels for a
// blocked input (nic in the last tail_taps taps: a partial last block) and nic = C for a plain
// one. xp[p]: pixel p's input at tap offset 0; w0: the block's weights of the first tap, the next input channel's `wic` floats on (the group's blocks are
// interleaved: wic = 16 * blocks in the group), the next tap's 16 * wic. acc is loaded from /
// stored to y (P pixels of 16 floats); `first`: start from 0 instead. nt tiles in a row (RUN):
// tile i reads xp[p] + i * xstep and writes y + i * P * 16.
template <int P, bool PLAIN, bool RUN>
__attribute__((noinline)) void tile_kernel(const float* const* xp, const int64_t* taps, int64_t ntaps, int nic,
                                           int64_t tail_taps, int64_t xs_ic, const float* w0, int64_t wic, float* y0,
                                           bool first, const TileEpilogue* epi, int64_t nt, int64_t xstep) {
  if constexpr (!RUN) nt = 1;
  for (int64_t i = 0; i < nt; ++i) {
    float* y = y0 + i * P * 16;
    const float* res = epi && epi->residual ? epi->residual + i * P * 16 : nullptr;
    Blk acc[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[p] = first ? bzero() : bload(y + p * 16);
    const float* x[P];
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) x[p] = xp[p] + i * xstep;
    // a constant channel count for blocked inputs and the usual RGB stem, so the loop unrolls
    auto tap = [&]<int KN>(int64_t t) {
      const int64_t off = taps[t];
      const float* wp = w0 + t * 16 * wic;
      const int n = KN ? KN : nic;
#pragma GCC unroll 4
      for (int ic = 0; ic < n; ++ic, wp += wic) {
        const int64_t o = off + (PLAIN ? ic * xs_ic : ic);
        const __m256 w_lo = _mm256_loadu_ps(wp), w_hi = _mm256_loadu_ps(wp + 8);
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const __m256 b = _mm256_broadcast_ss(x[p] + o);
          acc[p].lo = _mm256_fmadd_ps(b, w_lo, acc[p].lo);
          acc[p].hi = _mm256_fmadd_ps(b, w_hi, acc[p].hi);
        }
      }
    };
    for_each_tap<PLAIN>(ntaps, tail_taps, nic, tap);
    if (epi) {
      const Blk b = bload(epi->bias);
      __m256 v[2 * P];
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        Blk t = badd(acc[p], b);
        if (res) t = badd(t, bload(res + p * 16));
        v[2 * p] = t.lo;
        v[2 * p + 1] = t.hi;
      }
      act_ymm_n(v, 2 * P, *epi->act);
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        acc[p] = bkeep(Blk{v[2 * p], v[2 * p + 1]}, epi->valid);
      }
    }
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) bstore(y + p * 16, acc[p]);
  }
}

constexpr int kPixels = 6;                // pixels per tile
constexpr int64_t kChunkFloats = 4096;    // weight floats of one block per input chunk (16 KB of L1)
constexpr int64_t kSegment = 120;         // the most ConvTiling::row_len of dense convs (nchwc.cpp)

// One tile of n <= kPixels pixels (their input offsets in pofs), or nt full tiles in a run.
template <bool PLAIN>
void tile(const DenseConvArgs& a, int64_t pix0, const int64_t* pofs, int n, int64_t ob, int64_t fg,
          int64_t f, int64_t c0, int64_t c1, bool first, bool last, int64_t nt, int64_t xstep) {
  const Conv2dShape& s = *a.s;
  const int64_t KK = s.KH * s.KW;
  float* y = a.y + ob * a.ys_blk + pix0 * 16;
  const float* xp[kPixels];
  for (int p = 0; p < n; ++p) xp[p] = a.x + pofs[p];
  // dense_w_index: group (ob / 4) of fg blocks, input block c0, tap 0, channel 0, block f
  const float* w = a.cw->w.data() + (ob / 4) * a.wblk + c0 * KK * 16 * fg * 16 + f * 16;
  const bool tail = !PLAIN && c1 == a.ICB && s.C % 16 != 0;  // a partial last input block
  const int nic = PLAIN ? int(std::min<int64_t>(16, s.C)) : tail ? int(s.C % 16) : 16;
  const int64_t tail_taps = tail ? KK : 0;
  TileEpilogue epi;
  if (last) {
    epi.bias = a.cw->bias.data() + ob * 16;
    epi.residual = a.res ? a.res + ob * a.ys_blk + pix0 * 16 : nullptr;
    epi.act = a.act;
    epi.valid = first_lanes(s.M - ob * 16);
  }
  const int64_t* tp = a.taps.data() + c0 * KK;
  const int64_t ntaps = (c1 - c0) * KK, wic = fg * 16;
  const TileEpilogue* e = last ? &epi : nullptr;
  if (nt > 1) return tile_kernel<kPixels, PLAIN, true>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, nt, xstep);
  switch (n) {
    case 1: return tile_kernel<1, PLAIN, false>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, 1, 0);
    case 2: return tile_kernel<2, PLAIN, false>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, 1, 0);
    case 3: return tile_kernel<3, PLAIN, false>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, 1, 0);
    case 4: return tile_kernel<4, PLAIN, false>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, 1, 0);
    case 5: return tile_kernel<5, PLAIN, false>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, 1, 0);
    default: return tile_kernel<6, PLAIN, false>(xp, tp, ntaps, nic, tail_taps, a.xs_ic, w, wic, y, first, e, 1, 0);
  }
}

// Output pixels [p0, p1) of the image, the group's blocks [ob, ob + fg) one after the other:
// input-block chunks outside the tiles, so the chunk's weights stay in L1 over the segment.
template <bool PLAIN>
void conv_segment(const DenseConvArgs& a, int64_t ob0, int64_t fg, int64_t p0, int64_t p1) {
  const Conv2dShape& s = *a.s;
  const int64_t chunk = std::max<int64_t>(1, kChunkFloats / (s.KH * s.KW * 256));
  int64_t pofs[kSegment];  // input offset of each output pixel's first tap
  for (int64_t pix = p0, oh = p0 / s.OW, ow = p0 % s.OW; pix < p1; ++pix) {
    pofs[pix - p0] = oh * s.sh * a.xs_row + ow * s.sw * a.xs_pix;
    if (++ow == s.OW) ow = 0, ++oh;
  }
  // Runs of evenly spaced inputs (as in nchwc_avx512.cpp): run_end[k] is the last pixel of the
  // run pixel p0 + k is in; a run's full tiles go to one kernel call.
  const int64_t d = s.sw * a.xs_pix, n = p1 - p0;
  int64_t run_end[kSegment];
  run_end[n - 1] = n - 1;
  for (int64_t k = n - 2; k >= 0; --k) run_end[k] = pofs[k + 1] - pofs[k] == d ? run_end[k + 1] : k;
  for (int64_t f = 0; f < fg; ++f)
    for (int64_t c0 = 0; c0 < a.ICB; c0 += chunk) {
      const int64_t c1 = std::min(a.ICB, c0 + chunk);
      const bool first = c0 == 0, last = c1 == a.ICB;
      for (int64_t pix = p0; pix < p1;) {
        const int64_t k = pix - p0, nrun = (run_end[k] - k + 1) / kPixels;
        if (nrun >= 2) {
          tile<PLAIN>(a, pix, pofs + k, kPixels, ob0 + f, fg, f, c0, c1, first, last, nrun, kPixels * d);
          pix += nrun * kPixels;
          continue;
        }
        const int np = int(std::min<int64_t>(kPixels, p1 - pix));  // (may span rows)
        tile<PLAIN>(a, pix, pofs + k, np, ob0 + f, fg, f, c0, c1, first, last, 1, 0);
        pix += np;
      }
    }
}

// ------------------------------------------------------------------ depthwise

struct DwArgs {
  const Conv2dShape* s;
  const float* xb;   // the input plane of the block
  const float* wb;   // the block's weights [KH][KW][16]
  Blk bias;
  const float* rb;   // the residual plane, or null
  const Activation* act;
  Lanes valid;
  float* yb;
};

inline void dw_store(const DwArgs& d, Blk v, int64_t oh, int64_t ow) {
  const int64_t o = (oh * d.s->OW + ow) * 16;
  if (d.rb) v = badd(v, bload(d.rb + o));
  bstore(d.yb + o, bkeep(bact(v, *d.act), d.valid));
}

// P interior outputs of row oh from column ow0 on, kernel rows [kh0, kh1).
template <int P>
void dw_tile(const DwArgs& d, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  const Conv2dShape& s = *d.s;
  Blk acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = d.bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = d.xb + (oh * s.sh - s.pt + kh * s.dh) * s.W * 16;
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      const Blk w = bload(d.wb + (kh * s.KW + kw) * 16);
      const float* xp = xr + (ow0 * s.sw - s.pl + kw * s.dw) * 16;
#pragma GCC unroll 8
      for (int p = 0; p < P; ++p) acc[p] = bfmadd(bload(xp + p * s.sw * 16), w, acc[p]);
    }
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) dw_store(d, acc[p], oh, ow0 + p);
}

// dw_tile for 3-wide kernel rows at dilation 1 and stride SW (1 or 2: MobileNet's 3x3 depthwise
// convs), as in nchwc_avx512.cpp: each input block of a kernel row is loaded once and feeds every
// output it is a tap of, (P - 1) * SW + 3 loads per kernel row where dw_tile makes 3P.
template <int P, int SW>
void dw_tile_k3(const DwArgs& d, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  const Conv2dShape& s = *d.s;
  Blk acc[P];
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) acc[p] = d.bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xp = d.xb + ((oh * s.sh - s.pt + kh * s.dh) * s.W + ow0 * SW - s.pl) * 16;
    const Blk w0 = bload(d.wb + kh * 48), w1 = bload(d.wb + kh * 48 + 16), w2 = bload(d.wb + kh * 48 + 32);
    auto tap = [&]<int i>() {
      const Blk v = bload(xp + i * 16);
      if constexpr (i % SW == 0 && i / SW < P) acc[i / SW] = bfmadd(v, w0, acc[i / SW]);
      if constexpr (i >= 1 && (i - 1) % SW == 0 && (i - 1) / SW < P) acc[(i - 1) / SW] = bfmadd(v, w1, acc[(i - 1) / SW]);
      if constexpr (i >= 2 && (i - 2) % SW == 0 && (i - 2) / SW < P) acc[(i - 2) / SW] = bfmadd(v, w2, acc[(i - 2) / SW]);
    };
    [&]<int... J>(std::integer_sequence<int, J...>) { (tap.template operator()<J>(), ...); }(
        std::make_integer_sequence<int, (P - 1) * SW + 3>{});
  }
#pragma GCC unroll 8
  for (int p = 0; p < P; ++p) dw_store(d, acc[p], oh, ow0 + p);
}

// dw_tile_k3 at stride 1 with the block's two 8-channel halves one after the other: P
// accumulators, 3 weights and the input stay in registers, where both halves at once need
// 2P + 6 + 2 of the 16 and spill. Depthwise 3x3 alone, 1 thread, best of 7 x 200 runs, the
// lowest of 5 alternating rounds: C144@56 267 -> 216 us, C32@112 231 -> 185, C192@28 94 -> 87,
// C576@14 81 -> 77 (AVX-512 build: 224, 191, 78, 62). At stride 2 it was slower (C96@112 191 ->
// 204), so stride 2 keeps both halves at once.
template <int P, int SW>
void dw_tile_k3_halves(const DwArgs& d, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  const Conv2dShape& s = *d.s;
  const float* x0 = d.xb + ((oh * s.sh - s.pt) * s.W + ow0 * SW - s.pl) * 16;
  auto half = [&]<int H>() {
    __m256 acc[P];
    const __m256 bias = H ? d.bias.hi : d.bias.lo;
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) acc[p] = bias;
    for (int64_t kh = kh0; kh < kh1; ++kh) {
      const float* xp = x0 + kh * s.dh * s.W * 16 + 8 * H;
      const float* wp = d.wb + kh * 48 + 8 * H;
      const __m256 w0 = _mm256_loadu_ps(wp), w1 = _mm256_loadu_ps(wp + 16), w2 = _mm256_loadu_ps(wp + 32);
      auto tap = [&]<int i>() {
        const __m256 v = _mm256_loadu_ps(xp + i * 16);
        if constexpr (i % SW == 0 && i / SW < P) acc[i / SW] = _mm256_fmadd_ps(v, w0, acc[i / SW]);
        if constexpr (i >= 1 && (i - 1) % SW == 0 && (i - 1) / SW < P)
          acc[(i - 1) / SW] = _mm256_fmadd_ps(v, w1, acc[(i - 1) / SW]);
        if constexpr (i >= 2 && (i - 2) % SW == 0 && (i - 2) / SW < P)
          acc[(i - 2) / SW] = _mm256_fmadd_ps(v, w2, acc[(i - 2) / SW]);
      };
      [&]<int... J>(std::integer_sequence<int, J...>) { (tap.template operator()<J>(), ...); }(
          std::make_integer_sequence<int, (P - 1) * SW + 3>{});
    }
    const __m256 keep = H ? d.valid.hi : d.valid.lo;
    const Activation act = *d.act;  // a local copy: the stores cannot alias it
#pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const int64_t o = (oh * s.OW + ow0 + p) * 16 + 8 * H;
      __m256 v = acc[p];
      if (d.rb) v = _mm256_add_ps(v, _mm256_loadu_ps(d.rb + o));
      _mm256_storeu_ps(d.yb + o, _mm256_and_ps(act_ymm(v, act), keep));
    }
  };
  half.template operator()<0>();
  half.template operator()<1>();
}

template <int P>
void dw_tiles(const DwArgs& d, int64_t oh, int64_t ow0, int64_t kh0, int64_t kh1) {
  const Conv2dShape& s = *d.s;
  if (s.KW == 3 && s.dw == 1 && s.sw == 1) return dw_tile_k3_halves<P, 1>(d, oh, ow0, kh0, kh1);
  if (s.KW == 3 && s.dw == 1 && s.sw == 2) return dw_tile_k3<P, 2>(d, oh, ow0, kh0, kh1);
  dw_tile<P>(d, oh, ow0, kh0, kh1);
}

void dw_edge(const DwArgs& d, int64_t oh, int64_t ow, int64_t kh0, int64_t kh1) {
  const Conv2dShape& s = *d.s;
  Blk acc = d.bias;
  for (int64_t kh = kh0; kh < kh1; ++kh) {
    const float* xr = d.xb + (oh * s.sh - s.pt + kh * s.dh) * s.W * 16;
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      const int64_t iw = ow * s.sw - s.pl + kw * s.dw;
      if (iw < 0 || iw >= s.W) continue;
      acc = bfmadd(bload(xr + iw * 16), bload(d.wb + (kh * s.KW + kw) * 16), acc);
    }
  }
  dw_store(d, acc, oh, ow);
}

constexpr int kDwPixels = 6;  // 12 accumulators, a weight and an input block: 16 registers

void dw_task(const ConvWeights& cw, const Conv2dShape& s, const float* x, const float* res, const Activation& act,
             float* y, int64_t n, int64_t cb, int64_t r0, int64_t r1) {
  const int64_t CB = blocks(s.C);
  const int64_t yo = (n * CB + cb) * s.OH * s.OW * 16;
  DwArgs d;
  d.s = &s;
  d.xb = x + (n * CB + cb) * s.H * s.W * 16;
  d.wb = cw.w.data() + cb * s.KH * s.KW * 16;
  d.bias = bload(cw.bias.data() + cb * 16);
  d.rb = res ? res + yo : nullptr;
  d.act = &act;
  d.valid = first_lanes(s.C - cb * 16);
  d.yb = y + yo;
  int64_t owa, owb;
  interior_cols(s.pl, s.sw, s.dw, s.KW, s.W, s.OW, owa, owb);
  for (int64_t oh = r0; oh < r1; ++oh) {
    int64_t kh0, kh1;
    valid_taps(oh, s.sh, s.pt, s.dh, s.KH, s.H, kh0, kh1);
    for (int64_t ow = 0; ow < owa; ++ow) dw_edge(d, oh, ow, kh0, kh1);
    int64_t ow = owa;
    for (; ow + kDwPixels <= owb; ow += kDwPixels) dw_tiles<kDwPixels>(d, oh, ow, kh0, kh1);
    switch (owb - ow) {
      case 5: dw_tiles<5>(d, oh, ow, kh0, kh1); break;
      case 4: dw_tiles<4>(d, oh, ow, kh0, kh1); break;
      case 3: dw_tiles<3>(d, oh, ow, kh0, kh1); break;
      case 2: dw_tiles<2>(d, oh, ow, kh0, kh1); break;
      case 1: dw_tiles<1>(d, oh, ow, kh0, kh1); break;
      default: break;
    }
    for (ow = owb; ow < s.OW; ++ow) dw_edge(d, oh, ow, kh0, kh1);
  }
}

}  // namespace

void conv_rows_avx2(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                    const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1) {
  for_each_conv_task(
      cw, s, t, x, residual, act, y, task0, task1, kSegment,
      [&](int64_t n, int64_t cb, int64_t r0, int64_t r1) { dw_task(cw, s, x, residual, act, y, n, cb, r0, r1); },
      [&](const DenseConvArgs& a, int64_t ob, int64_t fg, int64_t p0, int64_t p1) {
        if (cw.plain_input) conv_segment<true>(a, ob, fg, p0, p1);
        else conv_segment<false>(a, ob, fg, p0, p1);
      });
}

// ------------------------------------------------------------------ layout conversions

namespace {

// In-register transpose of an 8 x 8 float block: r[i] lane j <- r[j] lane i.
inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
#pragma GCC unroll 2
  for (int g = 0; g < 2; ++g) {
    u[4 * g] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 1] = _mm256_shuffle_ps(t[4 * g], t[4 * g + 2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * g + 2] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * g + 3] = _mm256_shuffle_ps(t[4 * g + 1], t[4 * g + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
    r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
  }
}

}  // namespace

void to_blocked_avx2(const float* xs, int64_t nc, int64_t HW, float* yb, int64_t p0, int64_t p1) {
  int64_t q = p0;
  if (nc == 16) {  // 8 pixels x 16 channels: two 8 x 8 transposes
    __m256 r[8];
    for (; q + 8 <= p1; q += 8)
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) r[c] = _mm256_loadu_ps(xs + (h * 8 + c) * HW + q);
        transpose8(r);
#pragma GCC unroll 8
        for (int p = 0; p < 8; ++p) _mm256_storeu_ps(yb + (q + p) * 16 + h * 8, r[p]);
      }
  }
  for (; q < p1; ++q) {  // tail pixels, or a partial last block (padding channels 0)
    float* yp = yb + q * 16;
    for (int64_t c = 0; c < nc; ++c) yp[c] = xs[c * HW + q];
    for (int64_t c = nc; c < 16; ++c) yp[c] = 0.f;
  }
}

void from_blocked_avx2(const float* xb, int64_t nc, int64_t HW, float* ys, int64_t p0, int64_t p1) {
  int64_t q = p0;
  if (nc == 16) {
    __m256 r[8];
    for (; q + 8 <= p1; q += 8)
      for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 8
        for (int p = 0; p < 8; ++p) r[p] = _mm256_loadu_ps(xb + (q + p) * 16 + h * 8);
        transpose8(r);
#pragma GCC unroll 8
        for (int c = 0; c < 8; ++c) _mm256_storeu_ps(ys + (h * 8 + c) * HW + q, r[c]);
      }
  }
  for (; q < p1; q += 16) {  // 16 pixels at a time, channel by channel (as the portable loop)
    const int64_t qe = std::min(p1, q + 16);
    for (int64_t c = 0; c < nc; ++c)
      for (int64_t p = q; p < qe; ++p) ys[c * HW + p] = xb[p * 16 + c];
  }
}

// ------------------------------------------------------------------ pooling (nchwc_pool.inc)

// One channel block as two ymm (Blk).
struct B {
  using V = Blk;
  static constexpr int kPoolPixels = 6;
  static constexpr int kGlobalChains = 2;
  static V load(const float* p) { return bload(p); }
  static void store(float* p, V v) { bstore(p, v); }
  static V zero() { return bzero(); }
  static V set1(float f) { return bset1(f); }
  static V add(V a, V b) { return badd(a, b); }
  static V fmadd(V a, V b, V c) { return bfmadd(a, b, c); }
  static V max(V v, V acc) { return bmax(v, acc); }
  static V div(V v, float d) { return bdiv(v, _mm256_set1_ps(d)); }
  static V act(V v, const Activation& a) { return bact(v, a); }
  static void store_first(float* p, V v, int64_t n) {
    alignas(32) float out[16];
    bstore(out, v);
    std::memcpy(p, out, size_t(n) * sizeof(float));
  }
};

#include "kernels/nchwc_pool.inc"

void pool_planes_avx2(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  pool_planes_blocked(x, y, p0, p1, g, t);
}

void global_pool_avx2(bool avg, const float* xb, int64_t nc, int64_t HW, float* y) { global_pool_blocked(avg, xb, nc, HW, y); }

void scale_shift_avx2(const float* xb, const float* scale, const float* shift, const Activation& act, float* yb,
                      int64_t p0, int64_t p1) {
  scale_shift_blocked(xb, scale, shift, act, yb, p0, p1);
}

}  // namespace basalt::kernels::nchwc
