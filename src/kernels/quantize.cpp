#include "kernels/quantize.hpp"

#include <algorithm>
#include <cmath>

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
  int64_t i = 0;
#if defined(__x86_64__)
  const __m128 s = _mm_set1_ps(scale);
  const __m128i z = _mm_set1_epi32(zp);
  for (; i + 16 <= n; i += 16) {
    // cvtps2dq: round half to even; NaN (and out-of-range) give INT_MIN, which saturates to 0
    __m128i q0 = _mm_add_epi32(_mm_cvtps_epi32(_mm_div_ps(_mm_loadu_ps(x + i), s)), z);
    __m128i q1 = _mm_add_epi32(_mm_cvtps_epi32(_mm_div_ps(_mm_loadu_ps(x + i + 4), s)), z);
    __m128i q2 = _mm_add_epi32(_mm_cvtps_epi32(_mm_div_ps(_mm_loadu_ps(x + i + 8), s)), z);
    __m128i q3 = _mm_add_epi32(_mm_cvtps_epi32(_mm_div_ps(_mm_loadu_ps(x + i + 12), s)), z);
    const __m128i w = _mm_packus_epi16(_mm_packs_epi32(q0, q1), _mm_packs_epi32(q2, q3));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), w);
  }
#endif
  for (; i < n; ++i) {
    const float v = std::nearbyint(x[i] / scale) + float(zp);
    y[i] = std::isnan(v) ? uint8_t(0) : uint8_t(std::clamp(v, 0.0f, 255.0f));
  }
}

}  // namespace basalt::kernels
