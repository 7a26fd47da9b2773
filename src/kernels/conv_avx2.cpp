// Depthwise convolution for AVX2. Strides 1 and 2 keep 8 output columns in one ymm accumulator
// across all kernel taps (one load + one FMA per tap; masked loads (vmaskmovps) cover the padding
// and the row tail and never fault), the scheme of the AVX-512 kernel (conv_avx512.cpp) at half
// the width. Other strides and kernels over 49 taps use the generic loops of conv_depthwise.inc,
// vectorized 8 wide here by the compiler. Those loops alone (short rows: a loop per tap and row)
// were no faster than the portable build; microbenchmark, 3x3 with Clip, 1 thread, best of 200:
// C576@14 1287 -> 324 us, C144@56 2043 -> 751 us, C960@7 ~790 -> 178 us (AVX-512: 111, 289, 103).
#include "kernels/conv.hpp"

#include <algorithm>
#include <immintrin.h>
#include <vector>

namespace basalt::kernels {

namespace {

#define DEPTHWISE_NAME depthwise_generic_avx2
#include "kernels/conv_depthwise.inc"
#undef DEPTHWISE_NAME

// Lanes t in [0, n) (n <= 8) with 0 <= i0 + t < W, as a vmaskmovps mask (-1 = load).
inline __m256i lanes_inside(int64_t i0, int64_t W, int n) {
  const int64_t lo = std::max<int64_t>(0, -i0), hi = std::min<int64_t>(n, W - i0);
  const __m256i t = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i ge_lo = _mm256_cmpgt_epi32(t, _mm256_set1_epi32(int(lo) - 1));
  const __m256i lt_hi = _mm256_cmpgt_epi32(_mm256_set1_epi32(int(std::max(hi, lo))), t);
  return _mm256_and_si256(ge_lo, lt_hi);
}

// Per (column block, kw): the input offset of lane 0, the masks of the lanes inside the row
// (stride 2: two, for the 16 inputs whose even lanes are the 8 outputs), and whether every lane of
// the block is inside (unmasked loads).
struct ColumnBlocks {
  int64_t nblk = 0;
  std::vector<int64_t> off;
  std::vector<int32_t> lo, hi;  // 8 lanes per (block, kw)
  std::vector<uint8_t> full;
};

ColumnBlocks column_blocks(const Conv2dShape& s) {
  ColumnBlocks cb;
  cb.nblk = (s.OW + 7) / 8;
  const size_t n = size_t(cb.nblk * s.KW);
  cb.off.resize(n);
  cb.lo.resize(n * 8);
  cb.hi.resize(n * 8);
  cb.full.assign(size_t(cb.nblk), 1);
  const __m256i all = _mm256_set1_epi32(-1);
  for (int64_t b = 0; b < cb.nblk; ++b) {
    const int nv = int(std::min<int64_t>(8, s.OW - b * 8));
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      const int64_t iw0 = b * 8 * s.sw - s.pl + kw * s.dw;
      const size_t i = size_t(b * s.KW + kw);
      cb.off[i] = iw0;
      __m256i lo, hi = _mm256_setzero_si256();
      if (s.sw == 1) {
        lo = lanes_inside(iw0, s.W, nv);
      } else {  // the 2 * nv inputs from iw0 on, 8 per load
        lo = lanes_inside(iw0, s.W, std::min(8, 2 * nv));
        hi = lanes_inside(iw0 + 8, s.W, std::max(0, 2 * nv - 8));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb.lo.data() + i * 8), lo);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(cb.hi.data() + i * 8), hi);
      const bool inside = _mm256_testc_si256(lo, all) && (s.sw == 1 || _mm256_testc_si256(hi, all));
      if (nv < 8 || !inside) cb.full[size_t(b)] = 0;
    }
  }
  return cb;
}

inline __m256i mask(const int32_t* m, int kw) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(m + kw * 8)); }

// The even lanes of 16 consecutive floats lo:hi, in order.
inline __m256 even_lanes(__m256 lo, __m256 hi) {
  const __m256 e = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));  // lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6
  return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0)));
}

constexpr int kMaxTaps = 49;              // kernels with more taps take the generic loops
constexpr int kMaxRows = kMaxTaps / 3;    // kernel rows of a 3-, 5- or 7-wide kernel within them

// One plane, KW and the stride at compile time: output row by output row, 8 columns at a time,
// one accumulator per block over every tap. Rows in the padding read a zero row.
template <int KW, int SW>
void dw_plane(const Conv2dShape& s, const float* xc, const __m256* wz, const ColumnBlocks& cb, const float* zero_row,
              float* yc) {
  const int64_t H = s.H, W = s.W, OW = s.OW, KH = s.KH;
  const int tail = int(OW - (cb.nblk - 1) * 8);
  const __m256i tail_mask = lanes_inside(0, tail, 8);
  const float* rows[kMaxRows];  // (KH * KW <= 49 with KW >= 3)
  for (int64_t oh = 0; oh < s.OH; ++oh) {
    for (int64_t kh = 0; kh < KH; ++kh) {
      const int64_t ih = oh * s.sh - s.pt + kh * s.dh;
      rows[kh] = ih >= 0 && ih < H ? xc + ih * W : zero_row;
    }
    float* yr = yc + oh * OW;
    for (int64_t b = 0; b < cb.nblk; ++b) {
      const int64_t* ob = cb.off.data() + b * KW;
      const int32_t* ml = cb.lo.data() + b * KW * 8;
      const int32_t* mh = cb.hi.data() + b * KW * 8;
      const bool full = cb.full[size_t(b)] != 0;
      __m256 acc = _mm256_setzero_ps();
      for (int64_t kh = 0; kh < KH; ++kh) {
        const float* row = rows[kh];
        const __m256* wk = wz + kh * KW;
#pragma GCC unroll 8
        for (int kw = 0; kw < KW; ++kw) {
          const float* p = row + ob[kw];
          __m256 v;
          if constexpr (SW == 1) {
            v = full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(ml, kw));
          } else {
            const __m256 lo = full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, mask(ml, kw));
            const __m256 hi = full ? _mm256_loadu_ps(p + 8) : _mm256_maskload_ps(p + 8, mask(mh, kw));
            v = even_lanes(lo, hi);
          }
          acc = _mm256_fmadd_ps(wk[kw], v, acc);
        }
      }
      if (b + 1 < cb.nblk) _mm256_storeu_ps(yr + b * 8, acc);
      else _mm256_maskstore_ps(yr + b * 8, tail_mask, acc);
    }
  }
}

}  // namespace

void conv_depthwise_planes_avx2(const Conv2dShape& s, const float* x, const float* w, const float* bias,
                                const float* residual, const Activation& act, float* y, int64_t c0, int64_t c1) {
  auto plane = s.sw == 1 ? (s.KW == 3 ? dw_plane<3, 1> : s.KW == 5 ? dw_plane<5, 1> : s.KW == 7 ? dw_plane<7, 1> : nullptr)
               : s.sw == 2 ? (s.KW == 3 ? dw_plane<3, 2> : s.KW == 5 ? dw_plane<5, 2> : s.KW == 7 ? dw_plane<7, 2> : nullptr)
                           : nullptr;
  if (!plane || s.KH * s.KW > kMaxTaps) {
    depthwise_generic_avx2(s, x, w, bias, residual, act, y, c0, c1);
    return;
  }
  const int64_t H = s.H, W = s.W, OH = s.OH, OW = s.OW, KK = s.KH * s.KW, Mg = s.Mg();
  const ColumnBlocks cb = column_blocks(s);
  const std::vector<float> zero_row(size_t(W + 16), 0.f);
  __m256 wz[kMaxTaps];
  for (int64_t nc = c0; nc < c1; ++nc) {
    const int64_t n = nc / s.M, m = nc % s.M, c = m / Mg;
    const float* wm = w + m * KK;
    for (int64_t t = 0; t < KK; ++t) wz[t] = _mm256_set1_ps(wm[t]);
    float* yc = y + nc * OH * OW;
    plane(s, x + (n * s.C + c) * H * W, wz, cb, zero_row.data(), yc);
    epilogue_row(yc, OH * OW, 1.f, bias ? bias[m] : 0.f, nullptr, residual ? residual + nc * OH * OW : nullptr, act);
  }
}

}  // namespace basalt::kernels
