// AVX512-VNNI integer microkernel: a 6 x 64 int32 tile in 24 zmm accumulators. Per group of 4 k
// it loads the 4 vectors of the panel (64 columns x 4 int8) and broadcasts 4 uint8 of each of 6
// left rows: 24 vpdpbusd, each 64 multiply-adds (kernels/qgemm.hpp for the layouts).
#include "kernels/qgemm.hpp"

#include <immintrin.h>

#include <cstring>

namespace basalt::kernels {

namespace {

template <int R>
void tile(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c) {
  __m512i s[R][4];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) s[r][v] = _mm512_setzero_si512();
  const int64_t groups = kp / 4;
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* pb = panel + g * 256;
    __m512i b0 = _mm512_loadu_si512(pb), b1 = _mm512_loadu_si512(pb + 64), b2 = _mm512_loadu_si512(pb + 128),
            b3 = _mm512_loadu_si512(pb + 192);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      int32_t q;
      std::memcpy(&q, left + r * kp + g * 4, 4);
      const __m512i a = _mm512_set1_epi32(q);
      s[r][0] = _mm512_dpbusd_epi32(s[r][0], a, b0);
      s[r][1] = _mm512_dpbusd_epi32(s[r][1], a, b1);
      s[r][2] = _mm512_dpbusd_epi32(s[r][2], a, b2);
      s[r][3] = _mm512_dpbusd_epi32(s[r][3], a, b3);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_si512(c + r * 64 + v * 16, s[r][v]);
}

}  // namespace

void qgemm_ukernel_vnni(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m) {
  switch (m) {
    case 1: tile<1>(kp, left, panel, c); break;
    case 2: tile<2>(kp, left, panel, c); break;
    case 3: tile<3>(kp, left, panel, c); break;
    case 4: tile<4>(kp, left, panel, c); break;
    case 5: tile<5>(kp, left, panel, c); break;
    default: tile<6>(kp, left, panel, c); break;
  }
}

}  // namespace basalt::kernels

namespace basalt::kernels {

// The tile epilogue with AVX-512: the zero-point corrections in wrapping int32 lanes, then the
// output rule of qgemm_finish_portable (kernels/qgemm.cpp) in the same arithmetic: doubles for
// requantization (exact sums, one rounding in the multiply, clamp, then round half to even by
// vcvtpd2dq), floats for the float output. Bit-identical to the portable version.
void qgemm_finish_avx512(const int32_t* tile, int ldt, int64_t i0, int64_t j0, int m, int n, int64_t K, const QTileParams& a,
                         const QEpilogue& ep) {
  for (int i = 0; i < m; ++i) {
    const int64_t gi = i0 + i;
    const int32_t zli = a.zl[gi];
    const int32_t rk = int32_t(uint32_t(a.rowsum[gi]) - uint32_t(K) * uint32_t(zli));
    const __m512i vzl = _mm512_set1_epi32(zli), vrk = _mm512_set1_epi32(rk);
    const int32_t* t = tile + i * ldt;
    for (int j = 0; j < n; j += 16) {
      const int cn = n - j < 16 ? n - j : 16;
      const __mmask16 mk = cn == 16 ? __mmask16(0xFFFF) : __mmask16((1u << cn) - 1);
      const int64_t gj = j0 + j;
      const __m512i zr = _mm512_maskz_loadu_epi32(mk, a.zr + gj), cs = _mm512_maskz_loadu_epi32(mk, a.colsum + gj);
      __m512i v = _mm512_maskz_loadu_epi32(mk, t + j);
      v = _mm512_sub_epi32(v, _mm512_mullo_epi32(zr, vrk));
      v = _mm512_sub_epi32(v, _mm512_mullo_epi32(vzl, cs));
      switch (ep.out) {
        case QEpilogue::Out::Int32:
          _mm512_mask_storeu_epi32(static_cast<int32_t*>(ep.dst) + gi * ep.ldo + gj, mk, v);
          break;
        case QEpilogue::Out::Quant8: {
          // params per row: broadcast; per column: the vector at gj (a length-1 vector: broadcast)
          auto dvec = [&](const double* p, int64_t len, int half) {
            if (len == 1) return _mm512_set1_pd(p[0]);
            if (ep.per_row) return _mm512_set1_pd(p[gi]);
            const int base = half * 8;
            const __mmask8 hm = __mmask8(cn > base ? (cn - base >= 8 ? 0xFF : (1u << (cn - base)) - 1) : 0);
            return _mm512_maskz_loadu_pd(hm, p + gj + base);
          };
          __m512i b = _mm512_setzero_si512();
          if (ep.bias)
            b = ep.bias_len == 1 ? _mm512_set1_epi32(ep.bias[0])
                : ep.per_row     ? _mm512_set1_epi32(ep.bias[gi])
                                 : _mm512_maskz_loadu_epi32(mk, ep.bias + gj);
          const __m512d lo = _mm512_set1_pd(double(ep.lo - ep.yzp)), hi = _mm512_set1_pd(double(ep.hi - ep.yzp));
          __m256i q[2];
          for (int h = 0; h < 2; ++h) {
            const __m256i vh = h ? _mm512_extracti64x4_epi64(v, 1) : _mm512_castsi512_si256(v);
            const __m256i bh = h ? _mm512_extracti64x4_epi64(b, 1) : _mm512_castsi512_si256(b);
            __m512d x = _mm512_add_pd(_mm512_cvtepi32_pd(vh), _mm512_cvtepi32_pd(bh));
            x = _mm512_mul_pd(x, dvec(ep.mult, ep.mult_len, h));
            x = _mm512_min_pd(_mm512_max_pd(x, lo), hi);  // max first: NaN -> lo
            q[h] = _mm512_cvtpd_epi32(x);                 // round half to even
          }
          __m512i r = _mm512_inserti64x4(_mm512_castsi256_si512(q[0]), q[1], 1);
          r = _mm512_add_epi32(r, _mm512_set1_epi32(ep.yzp));
          _mm_mask_storeu_epi8(static_cast<uint8_t*>(ep.dst) + gi * ep.ldo + gj, mk, _mm512_cvtepi32_epi8(r));
          break;
        }
        case QEpilogue::Out::Float: {
          const __m512 s = ep.scale_len == 1 ? _mm512_set1_ps(ep.scale[0])
                           : ep.per_row      ? _mm512_set1_ps(ep.scale[gi])
                                             : _mm512_maskz_loadu_ps(mk, ep.scale + gj);
          __m512 y = _mm512_mul_ps(_mm512_cvtepi32_ps(v), s);
          if (ep.fbias) y = _mm512_add_ps(y, _mm512_maskz_loadu_ps(mk, ep.fbias + gj));
          _mm512_mask_storeu_ps(static_cast<float*>(ep.dst) + gi * ep.ldo + gj, mk, y);
          break;
        }
      }
    }
  }
}

}  // namespace basalt::kernels
