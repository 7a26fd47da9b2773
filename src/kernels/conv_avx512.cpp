// Depthwise convolution for AVX-512. Strides 1 and 2 keep 16 output columns in one zmm
// accumulator across all kernel taps (one masked load + one FMA per tap; masked lanes cover the
// padding and the row tail and never fault); square 3x3 and 5x5 kernels at stride 1 across run
// 3 or 4 output rows at a time (dw_plane_rows), sharing each loaded input row among them, with
// the epilogue on the registers; other strides use the generic loops of conv_depthwise.inc,
// vectorized here by the compiler.
#include "kernels/activation_avx512.hpp"
#include "kernels/conv.hpp"

#include <algorithm>
#include <cstring>
#include <immintrin.h>
#include <vector>

namespace basalt::kernels {

#define IM2COL_NAME im2col_pack_avx512
#include "kernels/conv_im2col.inc"
#undef IM2COL_NAME

namespace {

#define DEPTHWISE_NAME depthwise_generic_avx512
#include "kernels/conv_depthwise.inc"
#undef DEPTHWISE_NAME

// Bits t in [0, n) (n <= 32) with 0 <= i0 + t < W.
inline uint32_t range_mask(int64_t i0, int64_t W, int n) {
  int64_t lo = std::max<int64_t>(0, -i0), hi = std::min<int64_t>(n, W - i0);
  if (hi <= lo) return 0;
  uint64_t m = ((uint64_t(1) << hi) - 1) & ~((uint64_t(1) << lo) - 1);
  return uint32_t(m);
}

// One plane of a depthwise conv with KW and the stride known at compile time, so the taps of a
// kernel row unroll. Output row by output row, 16 columns at a time, one accumulator that stays
// in a register (the blocks are independent, so out-of-order execution overlaps their FMA chains).
// Rows in the padding read a zero row (the column masks only ever admit [0, W)), which keeps the
// tap loops free of branches; blocks whose taps all lie inside the row (`full`) load unmasked.
// KH0 > 0: the kernel height is KH0 (== s.KH) at compile time and the taps' weights are copied to
// locals that, once the loops unroll, live in registers (3x3: 9 zmm) instead of being reloaded.
template <int KW, int SW, int KH0 = 0>
void dw_plane(const Conv2dShape& s, const float* xc, const __m512* wz_in, const int64_t* off, const uint32_t* mask,
              const uint8_t* full, int64_t nblk, const float* zero_row, float* yc) {
  const int64_t H = s.H, W = s.W, OW = s.OW, KH = KH0 > 0 ? KH0 : s.KH;
  __m512 wloc[KH0 > 0 ? KH0 * KW : 1];
  if constexpr (KH0 > 0) {
#pragma GCC unroll 49
    for (int i = 0; i < KH0 * KW; ++i) wloc[i] = wz_in[i];
  }
  const __m512* wz = KH0 > 0 ? wloc : wz_in;
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const int tail = int(OW - (nblk - 1) * 16);
  const __mmask16 tail_mask = __mmask16(tail == 16 ? 0xFFFFu : (1u << tail) - 1u);
  const float* rows[16];
  const bool few_rows = KH <= 16;
  for (int64_t oh = 0; oh < s.OH; ++oh) {
    float* yr = yc + oh * OW;
    if (few_rows) {
      for (int64_t kh = 0; kh < KH; ++kh) {
        int64_t ih = oh * s.sh - s.pt + kh * s.dh;
        rows[kh] = (ih >= 0 && ih < H) ? xc + ih * W : zero_row;
      }
    }
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t* ob = off + b * KW;
      const uint32_t* mb = mask + b * KW;
      __m512 acc = _mm512_setzero_ps();
      if (SW == 2 && KW == 3 && s.dw == 1 && full[b]) {
        // The three taps of a row read the 34 inputs from ob[0] on: 32 + 2 loaded once, the taps
        // are their even lanes, their odd lanes and the even lanes shifted by two.
        const __m512i odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
#pragma GCC unroll 8
        for (int64_t kh = 0; kh < KH; ++kh) {
          const float* row;
          if (few_rows) {
            row = rows[kh];
          } else {
            int64_t ih = oh * s.sh - s.pt + kh * s.dh;
            row = (ih >= 0 && ih < H) ? xc + ih * W : zero_row;
          }
          const float* p = row + ob[0];
          const __m512 l0 = _mm512_loadu_ps(p), l1 = _mm512_loadu_ps(p + 16);
          const __m512 l2 = _mm512_maskz_loadu_ps(__mmask16(0x3u), p + 32);
          const __m512 s0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(l1), _mm512_castps_si512(l0), 2));
          const __m512 s1 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(l2), _mm512_castps_si512(l1), 2));
          const __m512* wk = wz + kh * KW;
          acc = _mm512_fmadd_ps(wk[0], _mm512_permutex2var_ps(l0, even, l1), acc);
          acc = _mm512_fmadd_ps(wk[1], _mm512_permutex2var_ps(l0, odd, l1), acc);
          acc = _mm512_fmadd_ps(wk[2], _mm512_permutex2var_ps(s0, even, s1), acc);
        }
      } else if (full[b]) {
#pragma GCC unroll 8
        for (int64_t kh = 0; kh < KH; ++kh) {
          const float* row;
          if (few_rows) {
            row = rows[kh];
          } else {
            int64_t ih = oh * s.sh - s.pt + kh * s.dh;
            row = (ih >= 0 && ih < H) ? xc + ih * W : zero_row;
          }
          const __m512* wk = wz + kh * KW;
#pragma GCC unroll 8
          for (int kw = 0; kw < KW; ++kw) {
            __m512 v;
            if constexpr (SW == 1) {
              v = _mm512_loadu_ps(row + ob[kw]);
            } else {
              v = _mm512_permutex2var_ps(_mm512_loadu_ps(row + ob[kw]), even, _mm512_loadu_ps(row + ob[kw] + 16));
            }
            acc = _mm512_fmadd_ps(wk[kw], v, acc);
          }
        }
      } else {
#pragma GCC unroll 8
        for (int64_t kh = 0; kh < KH; ++kh) {
          const float* row;
          if (few_rows) {
            row = rows[kh];
          } else {
            int64_t ih = oh * s.sh - s.pt + kh * s.dh;
            row = (ih >= 0 && ih < H) ? xc + ih * W : zero_row;
          }
          const __m512* wk = wz + kh * KW;
#pragma GCC unroll 8
          for (int kw = 0; kw < KW; ++kw) {
            __m512 v;
            if constexpr (SW == 1) {
              v = _mm512_maskz_loadu_ps(__mmask16(mb[kw]), row + ob[kw]);
            } else {
              __m512 lo = _mm512_maskz_loadu_ps(__mmask16(mb[kw] & 0xFFFFu), row + ob[kw]);
              __m512 hi = _mm512_maskz_loadu_ps(__mmask16(mb[kw] >> 16), row + ob[kw] + 16);
              v = _mm512_permutex2var_ps(lo, even, hi);
            }
            acc = _mm512_fmadd_ps(wk[kw], v, acc);
          }
        }
      }
      if (b + 1 < nblk) {
        _mm512_storeu_ps(yr + b * 16, acc);
      } else {
        _mm512_mask_storeu_ps(yr + b * 16, tail_mask, acc);
      }
    }
  }
}

// K x K taps, dilation 1, stride SH down and 1 across: R output rows at a time over one 16-column
// block. The R rows read (R - 1) * SH + K input rows; each tap column of each of them is loaded
// once and feeds every accumulator whose window covers it, so R independent FMA chains run side
// by side (one chain of K*K dependent FMAs per output is bound by the FMA latency: 5x5 taps at
// 12x80 reached half the FMA peak with two rows). Each output's taps are added in (kh, kw)
// order, as in the other paths; bias, residual and the activation are applied on the registers
// before the store, in epilogue_row's order. The weights live in registers (5x5: 25 zmm + 4
// accumulators).
template <int K, int SH, int R>
void dw_plane_rows(const Conv2dShape& s, const float* xc, const __m512* wz_in, const int64_t* off,
                   const uint32_t* mask, int64_t nblk, const float* zero_row, float* yc, float bv, const float* rc,
                   const Activation& act) {
  constexpr int NR = (R - 1) * SH + K;  // input rows of R output rows
  const int64_t H = s.H, W = s.W, OW = s.OW, OH = s.OH;
  __m512 wz[K * K];
#pragma GCC unroll 25
  for (int i = 0; i < K * K; ++i) wz[i] = wz_in[i];
  const int tail = int(OW - (nblk - 1) * 16);
  const __mmask16 tail_mask = __mmask16(tail == 16 ? 0xFFFFu : (1u << tail) - 1u);
  const __m512 bias = _mm512_set1_ps(bv);
  for (int64_t oh = 0; oh < OH; oh += R) {
    const int nrows = int(std::min<int64_t>(R, OH - oh));
    const float* rows[NR];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) {
      int64_t ih = oh * SH - s.pt + r;
      rows[r] = (ih >= 0 && ih < H) ? xc + ih * W : zero_row;
    }
    for (int64_t b = 0; b < nblk; ++b) {
      const int64_t* ob = off + b * K;
      const uint32_t* mb = mask + b * K;
      __m512 acc[R];
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) acc[j] = _mm512_setzero_ps();
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) {
#pragma GCC unroll 8
        for (int kw = 0; kw < K; ++kw) {
          const __m512 v = _mm512_maskz_loadu_ps(__mmask16(mb[kw]), rows[r] + ob[kw]);
#pragma GCC unroll 8
          for (int j = 0; j < R; ++j) {
            const int kh = r - j * SH;
            if (kh >= 0 && kh < K) acc[j] = _mm512_fmadd_ps(wz[kh * K + kw], v, acc[j]);
          }
        }
      }
      const __mmask16 m = b + 1 < nblk ? __mmask16(0xFFFFu) : tail_mask;
#pragma GCC unroll 8
      for (int j = 0; j < R; ++j) {
        if (j >= nrows) break;
        float* yp = yc + (oh + j) * OW + b * 16;
        __m512 v = acc[j];
        if (bv != 0.f) v = _mm512_add_ps(v, bias);
        if (rc) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, rc + (oh + j) * OW + b * 16));
        _mm512_mask_storeu_ps(yp, m, act_zmm(v, act));
      }
    }
  }
}
}  // namespace

void conv_depthwise_planes_avx512(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                                  const float* residual, const Activation& act, float* y, int64_t c0, int64_t c1) {
  constexpr int kMaxTaps = 49;  // up to 7x7 kernels keep their broadcast weights in an array
  if (s.sw > 2 || s.KH * s.KW > kMaxTaps) {
    depthwise_generic_avx512(s, x, w, bias, residual, act, y, c0, c1);
    return;
  }
  const int64_t H = s.H, W = s.W, OH = s.OH, OW = s.OW, KH = s.KH, KW = s.KW, Mg = s.Mg();
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  // Per (column block, kw): the input offset of lane 0 and the lanes inside the row. They do not
  // depend on the row or the channel, so they are computed once per call.
  const int64_t nblk = (OW + 15) / 16;
  std::vector<int64_t> off(static_cast<size_t>(nblk * KW));
  std::vector<uint32_t> mask(static_cast<size_t>(nblk * KW));
  std::vector<uint8_t> full(static_cast<size_t>(nblk), 1);
  for (int64_t b = 0; b < nblk; ++b) {
    int nv = int(std::min<int64_t>(16, OW - b * 16));
    for (int64_t kw = 0; kw < KW; ++kw) {
      int64_t iw0 = b * 16 * s.sw - s.pl + kw * s.dw;
      size_t i = size_t(b * KW + kw);
      off[i] = iw0;
      mask[i] = s.sw == 1 ? range_mask(iw0, W, 16) & ((1u << nv) - 1u)
                          : range_mask(iw0, W, 32) & uint32_t((uint64_t(1) << (2 * nv)) - 1);
      // every lane loaded (16 or 32 of them) lies inside the row
      const uint32_t all = s.sw == 1 ? 0xFFFFu : 0xFFFFFFFFu;
      if (nv < 16 || mask[i] != all) full[size_t(b)] = 0;
    }
  }
  // The kernel for every plane: dw_plane_rows (square 3x3 / 5x5, stride 1 across, 1 or 2 down,
  // no dilation), else dw_plane (KW 3, 5 or 7), else the run-time loop below.
  // Output rows per pass of dw_plane_rows: 4, or 3 where that computes fewer rows past the end
  // (6 and 3 rows: 8 and 4 with 4 at a time).
  const bool r3 = (OH + 2) / 3 * 3 - OH < (OH + 3) / 4 * 4 - OH;
  auto rows = s.sw == 1 && s.dw == 1 && s.dh == 1 && KH == KW && (KW == 3 || KW == 5) && (s.sh == 1 || s.sh == 2)
                  ? s.sh == 1 ? (KW == 3 ? (r3 ? dw_plane_rows<3, 1, 3> : dw_plane_rows<3, 1, 4>)
                                         : (r3 ? dw_plane_rows<5, 1, 3> : dw_plane_rows<5, 1, 4>))
                              : (KW == 3 ? (r3 ? dw_plane_rows<3, 2, 3> : dw_plane_rows<3, 2, 4>)
                                         : (r3 ? dw_plane_rows<5, 2, 3> : dw_plane_rows<5, 2, 4>))
                  : nullptr;
  auto plane = s.sw == 1 ? (KW == 3 ? (KH == 3 ? dw_plane<3, 1, 3> : dw_plane<3, 1>)
                            : KW == 5 ? (KH == 5 ? dw_plane<5, 1, 5> : dw_plane<5, 1>)
                            : KW == 7 ? dw_plane<7, 1>
                                      : nullptr)
                         : (KW == 3 ? (KH == 3 ? dw_plane<3, 2, 3> : dw_plane<3, 2>)
                            : KW == 5 ? (KH == 5 ? dw_plane<5, 2, 5> : dw_plane<5, 2>)
                            : KW == 7 ? dw_plane<7, 2>
                                      : nullptr);
  __m512 wz[kMaxTaps];
  const std::vector<float> zero_row(static_cast<size_t>(W), 0.f);
  for (int64_t nc = c0; nc < c1; ++nc) {
    int64_t n = nc / s.M, m = nc % s.M, c = m / Mg;
    const float* xc = x + (n * s.C + c) * H * W;
    float* yc = y + nc * OH * OW;
    const float* wm = w + m * KH * KW;
    for (int64_t t = 0; t < KH * KW; ++t) wz[t] = _mm512_set1_ps(wm[t]);
    const float* rc = residual ? residual + nc * OH * OW : nullptr;
    const float bv = bias ? bias[m] : 0.f;
    if (rows) {
      rows(s, xc, wz, off.data(), mask.data(), nblk, zero_row.data(), yc, bv, rc, act);
      continue;
    }
    if (plane) {
      plane(s, xc, wz, off.data(), mask.data(), full.data(), nblk, zero_row.data(), yc);
      epilogue_row(yc, OH * OW, 1.f, bv, nullptr, rc, act);
      continue;
    }
    // Other kernel widths: the same scheme with KW at run time.
    // Units of work are (output row, 16-column block) pairs, four at a time: four independent
    // accumulators hide the FMA latency that a single chain over the taps would expose.
    const int64_t units = OH * nblk;
    for (int64_t u0 = 0; u0 < units; u0 += 4) {
      const int cnt = int(std::min<int64_t>(4, units - u0));
      __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
      int64_t uoh[4], ub[4], ukh0[4], ukh1[4];
      for (int j = 0; j < 4; ++j) {
        int64_t u = u0 + std::min(j, cnt - 1);
        uoh[j] = u / nblk;
        ub[j] = u % nblk;
        int64_t kh0 = 0, kh1 = KH;  // taps whose input row exists
        while (kh0 < KH && uoh[j] * s.sh - s.pt + kh0 * s.dh < 0) ++kh0;
        while (kh1 > kh0 && uoh[j] * s.sh - s.pt + (kh1 - 1) * s.dh >= H) --kh1;
        ukh0[j] = j < cnt ? kh0 : 0;
        ukh1[j] = j < cnt ? kh1 : 0;  // a padding unit past the end does nothing
      }
      for (int64_t kh = 0; kh < KH; ++kh) {
        const __m512* wk = wz + kh * KW;
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          if (kh < ukh0[j] || kh >= ukh1[j]) continue;
          const float* row = xc + (uoh[j] * s.sh - s.pt + kh * s.dh) * W;
          const int64_t* ob = off.data() + ub[j] * KW;
          const uint32_t* mb = mask.data() + ub[j] * KW;
          if (s.sw == 1) {
            for (int64_t kw = 0; kw < KW; ++kw)
              acc[j] = _mm512_fmadd_ps(wk[kw], _mm512_maskz_loadu_ps(__mmask16(mb[kw]), row + ob[kw]), acc[j]);
          } else {  // stride 2: load 32 inputs, keep the even ones
            for (int64_t kw = 0; kw < KW; ++kw) {
              __m512 lo = _mm512_maskz_loadu_ps(__mmask16(mb[kw] & 0xFFFFu), row + ob[kw]);
              __m512 hi = _mm512_maskz_loadu_ps(__mmask16(mb[kw] >> 16), row + ob[kw] + 16);
              acc[j] = _mm512_fmadd_ps(wk[kw], _mm512_permutex2var_ps(lo, even, hi), acc[j]);
            }
          }
        }
      }
      for (int j = 0; j < cnt; ++j) {
        int nv = int(std::min<int64_t>(16, OW - ub[j] * 16));
        _mm512_mask_storeu_ps(yc + uoh[j] * OW + ub[j] * 16, __mmask16(nv == 16 ? 0xFFFFu : (1u << nv) - 1u), acc[j]);
      }
    }
    epilogue_row(yc, OH * OW, 1.f, bv, nullptr, rc, act);
  }
}

}  // namespace basalt::kernels
