// AVX-512 flavour of the element-wise row kernels (eltwise_simd.hpp with 16-lane registers).
#include "kernels/eltwise.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace basalt::kernels {
namespace {

struct V512 {
  static constexpr int W = 16;
  using R = __m512;
  using M = __mmask16;
  static R load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static R set1(float v) { return _mm512_set1_ps(v); }
  static R add(R a, R b) { return _mm512_add_ps(a, b); }
  static R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static R div(R a, R b) { return _mm512_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm512_max_ps(a, b); }  // b when either is NaN
  static R min(R a, R b) { return _mm512_min_ps(a, b); }
  static R sqrt(R a) { return _mm512_sqrt_ps(a); }
  static R abs(R a) { return _mm512_abs_ps(a); }
  static R neg(R a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
  static M lt(R a, R b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M isnan(R a) { return _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q); }
  static R blend(M m, R f, R t) { return _mm512_mask_blend_ps(m, f, t); }
  static R copysign(R mag, R sgn) {
    const __m512i s = _mm512_set1_epi32(INT32_MIN);
    return _mm512_castsi512_ps(_mm512_ternarylogic_epi32(s, _mm512_castps_si512(sgn), _mm512_castps_si512(mag), 0xCA));
  }
  static R round(R a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static R scale2(R p, R n) { return _mm512_scalef_ps(p, n); }
  static float hsum(R a) { return _mm512_reduce_add_ps(a); }
  static float hmax(R a) { return _mm512_reduce_max_ps(a); }
};

#include "kernels/eltwise_simd.hpp"

}  // namespace

VecOps vec_ops_avx512() { return Simd<V512>::table(Isa::Avx512); }

}  // namespace basalt::kernels
