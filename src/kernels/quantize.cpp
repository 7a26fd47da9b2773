#include "kernels/quantize.hpp"

#include "kernels/pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace basalt::kernels {

void range_with_zero(const float* x, int64_t n, float& lo, float& hi) {
  float mn = 0.f, mx = 0.f;
  int64_t i = 0;
#if defined(__x86_64__)
  // minps / maxps return their second operand when either is NaN: with x first, a NaN element
  // leaves the running value alone, as std::min / std::max do below
  __m128 vmn0 = _mm_setzero_ps(), vmx0 = _mm_setzero_ps(), vmn1 = vmn0, vmx1 = vmx0;
  for (; i + 8 <= n; i += 8) {
    const __m128 a = _mm_loadu_ps(x + i), b = _mm_loadu_ps(x + i + 4);
    vmn0 = _mm_min_ps(a, vmn0);
    vmx0 = _mm_max_ps(a, vmx0);
    vmn1 = _mm_min_ps(b, vmn1);
    vmx1 = _mm_max_ps(b, vmx1);
  }
  alignas(16) float t[8];
  _mm_store_ps(t, _mm_min_ps(vmn0, vmn1));
  _mm_store_ps(t + 4, _mm_max_ps(vmx0, vmx1));
  for (int j = 0; j < 4; ++j) {
    mn = std::min(mn, t[j]);
    mx = std::max(mx, t[4 + j]);
  }
#endif
  for (; i < n; ++i) {
    mn = std::min(mn, x[i]);
    mx = std::max(mx, x[i]);
  }
  lo = mn;
  hi = mx;
}

void dynamic_quant_params(float lo, float hi, float& scale, uint8_t& zp) {
  scale = (hi - lo) / 255.0f;
  zp = 0;
  if (scale != 0.f) {
    const float izp = std::nearbyint(0.0f - lo / scale);
    zp = uint8_t(std::clamp(izp, 0.0f, 255.0f));
  }
}

void quantize_u8(const float* x, int64_t n, float scale, uint8_t zp, uint8_t* y) {
  if (scale == 0.f) {
    std::fill(y, y + n, zp);
    return;
  }
  quantize_linear_8(x, n, scale, zp, false, y);
}

namespace {

#if defined(__x86_64__)
// 16 int32 lanes (four vectors) saturated to 8 bits and stored.
inline void store16(uint8_t* y, __m128i q0, __m128i q1, __m128i q2, __m128i q3, bool is_signed) {
  const __m128i w0 = _mm_packs_epi32(q0, q1), w1 = _mm_packs_epi32(q2, q3);
  _mm_storeu_si128(reinterpret_cast<__m128i*>(y), is_signed ? _mm_packs_epi16(w0, w1) : _mm_packus_epi16(w0, w1));
}
// The 4 bytes at p widened to int32 lanes (sign- or zero-extended).
inline __m128i widen4(const uint8_t* p, bool is_signed) {
  int32_t w;
  std::memcpy(&w, p, 4);
  __m128i v = _mm_cvtsi32_si128(w);
  v = _mm_unpacklo_epi8(v, v);
  v = _mm_unpacklo_epi16(v, v);
  return is_signed ? _mm_srai_epi32(v, 24) : _mm_srli_epi32(v, 24);
}
#endif

inline int32_t byte_value(uint8_t b, bool is_signed) { return is_signed ? int32_t(int8_t(b)) : int32_t(b); }

}  // namespace

void quantize_linear_8(const float* x, int64_t n, float scale, int32_t zp, bool is_signed, uint8_t* y) {
  const float lo = is_signed ? -128.f : 0.f, hi = is_signed ? 127.f : 255.f;
  int64_t i = 0;
#if defined(__x86_64__)
  const __m128 s = _mm_set1_ps(scale), big = _mm_set1_ps(1e9f), nbig = _mm_set1_ps(-1e9f);
  const __m128i z = _mm_set1_epi32(zp);
  auto one = [&](const float* p) {
    __m128 v = _mm_div_ps(_mm_loadu_ps(p), s);
    const __m128i nan = _mm_castps_si128(_mm_cmpunord_ps(v, v));
    v = _mm_max_ps(_mm_min_ps(v, big), nbig);  // in int32 range (the 8-bit clamp comes after)
    // NaN -> 0 after the zero point is added
    return _mm_andnot_si128(nan, _mm_add_epi32(_mm_cvtps_epi32(v), z));
  };
  for (; i + 16 <= n; i += 16) store16(y + i, one(x + i), one(x + i + 4), one(x + i + 8), one(x + i + 12), is_signed);
#endif
  for (; i < n; ++i) {
    const float q = std::nearbyint(x[i] / scale);
    const double v = double(q) + double(zp);
    y[i] = std::isnan(v) ? uint8_t(0) : uint8_t(int32_t(v <= double(lo) ? lo : v >= double(hi) ? hi : v));
  }
}

void dequantize_linear_8(const uint8_t* x, int64_t n, float scale, int32_t zp, bool is_signed, float* y) {
  int64_t i = 0;
#if defined(__x86_64__)
  const __m128 s = _mm_set1_ps(scale);
  const __m128i z = _mm_set1_epi32(zp);
  for (; i + 4 <= n; i += 4) _mm_storeu_ps(y + i, _mm_mul_ps(_mm_cvtepi32_ps(_mm_sub_epi32(widen4(x + i, is_signed), z)), s));
#endif
  for (; i < n; ++i) y[i] = float(byte_value(x[i], is_signed) - zp) * scale;
}

void qlinear_add_8(const uint8_t* a, const uint8_t* b, int64_t n, float as, int32_t az, float bs, int32_t bz, float cs, int32_t cz,
                   bool is_signed, uint8_t* c) {
  const float lo = (is_signed ? -128.f : 0.f) - float(cz), hi = (is_signed ? 127.f : 255.f) - float(cz);
  int64_t i = 0;
#if defined(__x86_64__)
  const __m128 vas = _mm_set1_ps(as), vbs = _mm_set1_ps(bs), vcs = _mm_set1_ps(cs), vlo = _mm_set1_ps(lo), vhi = _mm_set1_ps(hi);
  const __m128i vaz = _mm_set1_epi32(az), vbz = _mm_set1_epi32(bz), vcz = _mm_set1_epi32(cz);
  auto one = [&](int64_t k) {
    const __m128 ta = _mm_div_ps(_mm_mul_ps(vas, _mm_cvtepi32_ps(_mm_sub_epi32(widen4(a + k, is_signed), vaz))), vcs);
    const __m128 tb = _mm_div_ps(_mm_mul_ps(vbs, _mm_cvtepi32_ps(_mm_sub_epi32(widen4(b + k, is_signed), vbz))), vcs);
    const __m128 v = _mm_min_ps(_mm_max_ps(_mm_add_ps(ta, tb), vlo), vhi);  // max first: NaN -> lo
    return _mm_add_epi32(_mm_cvtps_epi32(v), vcz);
  };
  for (; i + 16 <= n; i += 16) store16(c + i, one(i), one(i + 4), one(i + 8), one(i + 12), is_signed);
#endif
  for (; i < n; ++i) {
    const float ta = as * float(byte_value(a[i], is_signed) - az) / cs, tb = bs * float(byte_value(b[i], is_signed) - bz) / cs;
    float v = ta + tb;
    v = v >= lo ? (v <= hi ? std::nearbyint(v) : hi) : lo;
    c[i] = uint8_t(int32_t(v) + cz);
  }
}

void maxpool2d_8(const uint8_t* x, uint8_t* y, int64_t p0, int64_t p1, const Pool2D& g, bool is_signed) {
  // int8 compares as uint8 with the top bit flipped (order-preserving), flipped back at the end
  const uint8_t flip = is_signed ? 0x80 : 0;
  std::vector<uint8_t> row(static_cast<size_t>(g.W));
  for (int64_t p = p0; p < p1; ++p) {
    const uint8_t* xp = x + p * g.H * g.W;
    uint8_t* yp = y + p * g.OH * g.OW;
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t h0 = oh * g.sh - g.ph;
      bool any = false;
      for (int64_t kh = 0; kh < g.kh; ++kh) {
        const int64_t ih = h0 + kh * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        const uint8_t* r = xp + ih * g.W;
        if (!any) {
          for (int64_t w = 0; w < g.W; ++w) row[size_t(w)] = uint8_t(r[w] ^ flip);
          any = true;
        } else {
          for (int64_t w = 0; w < g.W; ++w) row[size_t(w)] = std::max(row[size_t(w)], uint8_t(r[w] ^ flip));
        }
      }
      for (int64_t ow = 0; ow < g.OW; ++ow) {
        const int64_t w0 = ow * g.sw - g.pw;
        uint8_t m = 0;
        for (int64_t kw = 0; kw < g.kw; ++kw) {
          const int64_t iw = w0 + kw * g.dw;
          if (iw >= 0 && iw < g.W) m = std::max(m, row[size_t(iw)]);
        }
        // a window with no valid tap (only possible with huge pads) gives the type's minimum
        yp[oh * g.OW + ow] = uint8_t((any ? m : 0) ^ flip);
      }
    }
  }
}

}  // namespace basalt::kernels
