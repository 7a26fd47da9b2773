// AVX2+FMA flavour of the element-wise row kernels (eltwise_simd.hpp with 8-lane registers).
#include "kernels/eltwise.hpp"

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

namespace basalt::kernels {
namespace {

struct V256 {
  static constexpr int W = 8;
  using R = __m256;
  using M = __m256;
  static R load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static R set1(float v) { return _mm256_set1_ps(v); }
  static R add(R a, R b) { return _mm256_add_ps(a, b); }
  static R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static R div(R a, R b) { return _mm256_div_ps(a, b); }
  static R fma(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static R max(R a, R b) { return _mm256_max_ps(a, b); }  // b when either is NaN
  static R min(R a, R b) { return _mm256_min_ps(a, b); }
  static R sqrt(R a) { return _mm256_sqrt_ps(a); }
  static R abs(R a) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), a); }
  static R neg(R a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static M lt(R a, R b) { return _mm256_cmp_ps(a, b, _CMP_LT_OQ); }
  static M isnan(R a) { return _mm256_cmp_ps(a, a, _CMP_UNORD_Q); }
  static R blend(M m, R f, R t) { return _mm256_blendv_ps(f, t, m); }
  static R copysign(R mag, R sgn) {
    const R s = _mm256_set1_ps(-0.0f);
    return _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sgn));
  }
  static R round(R a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  // p * 2^n as p * 2^(n/2) * 2^(n - n/2): each factor stays a normal float for n in [-150, 130].
  static R scale2(R p, R n) {
    __m256i k = _mm256_cvtps_epi32(n);
    __m256i h = _mm256_srai_epi32(k, 1);
    __m256i l = _mm256_sub_epi32(k, h);
    R f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(h, _mm256_set1_epi32(127)), 23));
    R f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(l, _mm256_set1_epi32(127)), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, f1), f2);
  }
  static float hsum(R a) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static float hmax(R a) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "kernels/eltwise_simd.hpp"

}  // namespace

VecOps vec_ops_avx2() { return Simd<V256>::table(Isa::Avx2); }

}  // namespace basalt::kernels
