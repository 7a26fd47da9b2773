// AVX-512 build of the 2-D pooling kernel body (pool_impl.inc; this file gets -mavx512*), and a
// path for planes at most 32 wide with at most 16 outputs per row (ShuffleNet's 3x3 stride-2
// average pools on 14x14 and 28x28, 7x7 windows on 7x7), where the row loops of pool_impl.inc run
// a few lanes each and their per-row set-up dominates: there a whole input row is one or two zmm,
// the vertical taps are whole-register operations and each horizontal tap is one masked permute.
//
// It evaluates the same operations in the same order as pool_impl.inc, so the results are
// bit-identical to the other builds (KernelsVec.Pool2dEveryIsaAndThreadCount compares bytes):
// - vertical: the window's rows inside the image folded left to right (pool_impl.inc's groups of
//   3 and then 2 rows, ((r0 + r1) + r2), ((v + r3) + r4), are that fold); max as `b > a ? b : a`;
// - horizontal: a = tap 0, then a = op(a, tap k) for k = 1.. in order; a tap outside the image
//   reads the identity (0 for average, -inf for max);
// - average divides by cnt_h * cnt_w (or the padded counts) when that is > 0, else 0; an output
//   row or column with no valid tap is 0.
#include "kernels/pool.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace basalt::kernels {
namespace {
#include "kernels/pool_impl.inc"

// `b > a ? b : a` on every lane (NaN in b never replaces a), as pool_impl.inc's max.
inline __m512 vmax(__m512 a, __m512 b) { return _mm512_mask_mov_ps(a, _mm512_cmp_ps_mask(b, a, _CMP_GT_OQ), b); }

constexpr int kMaxTapsW = 16;

// Rows of at most 32 inputs (one or two registers) and 16 outputs.
bool narrow_applies(const Pool2D& g) { return g.W <= 32 && g.OW <= 16 && g.kw <= kMaxTapsW && g.W > 0; }

void pool2d_planes_narrow(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  const bool avg = g.avg;
  const int64_t W = g.W, OW = g.OW, in_sp = g.H * W, out_sp = g.OH * OW;
  // the row's inputs: lanes of the first register, then of the second (W > 16)
  const __mmask16 in_lo = __mmask16(W >= 16 ? 0xFFFFu : (1u << W) - 1u);
  const __mmask16 in_hi = __mmask16(W <= 16 ? 0u : W >= 32 ? 0xFFFFu : (1u << (W - 16)) - 1u);
  const bool two = W > 16;
  const __mmask16 out_mask = __mmask16(OW == 16 ? 0xFFFFu : (1u << OW) - 1u);
  const __m512 ident = _mm512_set1_ps(avg ? 0.f : -std::numeric_limits<float>::infinity());
  // Per horizontal tap: the input column of each output lane, and the lanes where it is inside
  // the image (and the output exists).
  __m512i idx[kMaxTapsW];
  __mmask16 valid[kMaxTapsW];
  for (int64_t kx = 0; kx < g.kw; ++kx) {
    alignas(64) int32_t col[16];
    uint32_t m = 0;
    for (int64_t ox = 0; ox < 16; ++ox) {
      const int64_t c = ox * g.sw - g.pw + kx * g.dw;
      col[ox] = int32_t(c >= 0 && c < W ? c : 0);
      if (ox < OW && c >= 0 && c < W) m |= 1u << ox;
    }
    idx[kx] = _mm512_load_si512(col);
    valid[kx] = __mmask16(m);
  }
  // Divisors (average) and the columns with no valid tap (max).
  alignas(64) float dw_cnt[16] = {};
  for (int64_t ox = 0; ox < OW; ++ox) dw_cnt[ox] = g.count_include_pad ? t.pad_w[size_t(ox)] : t.cnt_w[size_t(ox)];
  const __m512 dcol = _mm512_load_ps(dw_cnt);
  uint32_t nonempty = 0;
  for (int64_t ox = 0; ox < OW; ++ox)
    if (t.cnt_w[size_t(ox)] > 0) nonempty |= 1u << ox;
  const __mmask16 keep_cols = __mmask16(nonempty);
  auto op = [avg](__m512 a, __m512 b) { return avg ? _mm512_add_ps(a, b) : vmax(a, b); };

  // NP planes at a time: their rows are independent chains of dependent operations, so two of
  // them overlap. (The whole path, 3x3 stride 2 on 272 planes 14x14 -> 7x7, 1 thread: 68-70 ->
  // 9.2 us a node; the two-plane step's own share was not measured apart.)
  auto planes = [&]<int NP, bool TWO>(int64_t p) {
    for (int64_t oy = 0; oy < g.OH; ++oy) {
      // vertical reduction: pool_impl.inc groups the rows (3, then 2 at a time), but its
      // ((r0 + r1) + r2), ((v + r3) + r4), ... is the plain left-to-right fold
      __m512 v[NP], vh[NP];
      bool any = false;
      for (int64_t ky = 0; ky < g.kh; ++ky) {
        const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
        if (iy < 0 || iy >= g.H) continue;
#pragma GCC unroll 2
        for (int j = 0; j < NP; ++j) {
          const float* row = x + (p + j) * in_sp + iy * W;
          const __m512 r = _mm512_maskz_loadu_ps(in_lo, row);
          v[j] = any ? op(v[j], r) : r;
          if constexpr (TWO) {
            const __m512 rh = _mm512_maskz_loadu_ps(in_hi, row + 16);
            vh[j] = any ? op(vh[j], rh) : rh;
          }
        }
        any = true;
      }
      if (!any) {
#pragma GCC unroll 2
        for (int j = 0; j < NP; ++j) _mm512_mask_storeu_ps(y + (p + j) * out_sp + oy * OW, out_mask, _mm512_setzero_ps());
        continue;
      }
      // horizontal taps
      // tap kx of output lane ox: input column idx[kx][ox] (of the two registers when W > 16)
      auto tap = [&](int64_t kx, int j) {
        if constexpr (TWO) return _mm512_mask_mov_ps(ident, valid[kx], _mm512_permutex2var_ps(v[j], idx[kx], vh[j]));
        else return _mm512_mask_permutexvar_ps(ident, valid[kx], idx[kx], v[j]);
      };
      __m512 acc[NP];
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) acc[j] = tap(0, j);
      for (int64_t kx = 1; kx < g.kw; ++kx)
#pragma GCC unroll 2
        for (int j = 0; j < NP; ++j) acc[j] = op(acc[j], tap(kx, j));
      __m512 c = dcol;
      __mmask16 keep = keep_cols;
      if (avg) {
        const float ch = g.count_include_pad ? t.pad_h[size_t(oy)] : t.cnt_h[size_t(oy)];
        c = _mm512_mul_ps(_mm512_set1_ps(ch), dcol);
        keep = _mm512_cmp_ps_mask(c, _mm512_setzero_ps(), _CMP_GT_OQ);
      }
#pragma GCC unroll 2
      for (int j = 0; j < NP; ++j) {
        const __m512 o = avg ? _mm512_maskz_div_ps(keep, acc[j], c) : _mm512_maskz_mov_ps(keep, acc[j]);
        _mm512_mask_storeu_ps(y + (p + j) * out_sp + oy * OW, out_mask, o);
      }
    }
  };
  int64_t p = p0;
  if (two) {
    for (; p + 2 <= p1; p += 2) planes.template operator()<2, true>(p);
    if (p < p1) planes.template operator()<1, true>(p);
  } else {
    for (; p + 2 <= p1; p += 2) planes.template operator()<2, false>(p);
    if (p < p1) planes.template operator()<1, false>(p);
  }
}

// 2x2 windows at stride 2, every window inside the image (no padding, 2 OH <= H, 2 OW <= W) and
// at least 16 outputs a row: VGG's and UNet's pools. pool_impl.inc reduces the two rows into a
// buffer, splits its even and odd columns into two more and then reduces those: four passes over
// the row. Here 32 columns of both rows are two registers each: op(r0, r1) per register, the even
// and odd columns by two permutes, op(even, odd), stored as 16 outputs. The same operations in
// the same order, so the same bits; average divides by the window's 2 * 2 taps.
// UNet-lite's two max pools (16 planes 256x256 -> 128x128, 32 planes 128x128 -> 64x64), 1 thread:
// 0.85-0.90 -> 0.30-0.47 ms.
bool two_by_two_applies(const Pool2D& g) {
  return g.kh == 2 && g.kw == 2 && g.sh == 2 && g.sw == 2 && g.dh == 1 && g.dw == 1 && g.ph == 0 && g.pw == 0 &&
         2 * g.OH <= g.H && 2 * g.OW <= g.W && g.OW >= 16;
}

void pool2d_planes_2x2(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g) {
  const bool avg = g.avg;
  const int64_t W = g.W, OW = g.OW, in_sp = g.H * W, out_sp = g.OH * OW;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 taps = _mm512_set1_ps(4.f);
  auto op = [avg](__m512 a, __m512 b) { return avg ? _mm512_add_ps(a, b) : vmax(a, b); };
  // 16 outputs from the 32 columns at r0 / r1 (the first 2n of them when n < 16)
  auto outputs = [&](const float* r0, const float* r1, __mmask16 lo, __mmask16 hi) {
    const __m512 v0 = op(_mm512_maskz_loadu_ps(lo, r0), _mm512_maskz_loadu_ps(lo, r1));
    const __m512 v1 = op(_mm512_maskz_loadu_ps(hi, r0 + 16), _mm512_maskz_loadu_ps(hi, r1 + 16));
    const __m512 o = op(_mm512_permutex2var_ps(v0, even, v1), _mm512_permutex2var_ps(v0, odd, v1));
    return avg ? _mm512_div_ps(o, taps) : o;
  };
  const int64_t tail = OW % 16, n16 = OW - tail;
  const __mmask16 tail_lo = __mmask16(2 * tail >= 16 ? 0xFFFFu : (1u << (2 * tail)) - 1u);
  const __mmask16 tail_hi = __mmask16(2 * tail > 16 ? (1u << (2 * tail - 16)) - 1u : 0u);
  const __mmask16 tail_out = __mmask16((1u << tail) - 1u);
  for (int64_t p = p0; p < p1; ++p)
    for (int64_t oy = 0; oy < g.OH; ++oy) {
      const float* r0 = x + p * in_sp + 2 * oy * W;
      const float* r1 = r0 + W;
      float* yr = y + p * out_sp + oy * OW;
      for (int64_t ox = 0; ox < n16; ox += 16) _mm512_storeu_ps(yr + ox, outputs(r0 + 2 * ox, r1 + 2 * ox, 0xFFFF, 0xFFFF));
      if (tail) _mm512_mask_storeu_ps(yr + n16, tail_out, outputs(r0 + 2 * n16, r1 + 2 * n16, tail_lo, tail_hi));
    }
}

}  // namespace

void pool2d_planes_avx512(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  if (two_by_two_applies(g)) {
    pool2d_planes_2x2(x, y, p0, p1, g);
    return;
  }
  if (narrow_applies(g)) {
    pool2d_planes_narrow(x, y, p0, p1, g, t);
    return;
  }
  pool2d_planes(x, y, p0, p1, g, t);
}

}  // namespace basalt::kernels
