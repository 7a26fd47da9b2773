// The fused activations of activation.hpp on one ymm, for the AVX2 epilogues (GEMM tiles): the
// twin of activation_avx512.hpp, same float semantics as apply_activation (NaN handling included)
// for every kind but Sigmoid and Tanh, which go per element through apply_activation. Include
// only from *_avx2.cpp files.
#pragma once

#include "kernels/activation.hpp"

#include <immintrin.h>

namespace basalt::kernels {
namespace {

// Sigmoid / Tanh per element (out of line: keeps act_ymm small enough to inline in tile loops).
[[maybe_unused]] __attribute__((noinline)) __m256 act_ymm_scalar(__m256 x, const Activation& act) {
  alignas(32) float v[8];
  _mm256_store_ps(v, x);
  for (float& e : v) e = apply_activation_kind(act, e);
  return _mm256_load_ps(v);
}

[[maybe_unused]] inline __m256 act_ymm_kind(__m256 x, const Activation& act) {
  // Clamps as blends on ordered compares (false for NaN), so NaN passes as in act_zmm.
  auto below = [](__m256 v, __m256 lo) { return _mm256_blendv_ps(v, lo, _mm256_cmp_ps(v, lo, _CMP_LT_OQ)); };
  auto above = [](__m256 v, __m256 hi) { return _mm256_blendv_ps(v, hi, _mm256_cmp_ps(v, hi, _CMP_GT_OQ)); };
  // v <= 0 -> +0 (-0 becomes +0)
  auto pos = [](__m256 v) {
    return _mm256_blendv_ps(v, _mm256_setzero_ps(), _mm256_cmp_ps(v, _mm256_setzero_ps(), _CMP_LE_OQ));
  };
  // std::min(1.f, t) is 1 for NaN t
  auto min1 = [](__m256 t) {
    const __m256 one = _mm256_set1_ps(1.f);
    return _mm256_blendv_ps(t, one, _mm256_cmp_ps(t, one, _CMP_NLT_UQ));
  };
  switch (act.kind) {
    case ActKind::Relu: return pos(x);
    case ActKind::Clip: return above(below(x, _mm256_set1_ps(act.a)), _mm256_set1_ps(act.b));
    case ActKind::HardSigmoid: {
      __m256 t = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(act.a), x), _mm256_set1_ps(act.b));
      return pos(min1(t));
    }
    case ActKind::HardSwish: {
      __m256 t = _mm256_fmadd_ps(x, _mm256_set1_ps(1.f / 6.f), _mm256_set1_ps(0.5f));  // as the HardSwish op (eltwise)
      return _mm256_mul_ps(x, pos(min1(t)));
    }
    case ActKind::LeakyRelu: {
      const __m256 neg = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_LT_OQ);
      return _mm256_blendv_ps(x, _mm256_mul_ps(x, _mm256_set1_ps(act.a)), neg);
    }
    case ActKind::Sigmoid:
    case ActKind::Tanh: return act_ymm_scalar(x, act);
    default: return x;
  }
}

// The post affine (Activation::post): x * post_mul + post_add.
[[maybe_unused]] inline __m256 act_ymm_post(__m256 x, const Activation& act) {
  return _mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(act.post_mul)), _mm256_set1_ps(act.post_add));
}

// The activation, then the post affine when there is one.
[[maybe_unused]] inline __m256 act_ymm(__m256 x, const Activation& act) {
  x = act_ymm_kind(x, act);
  return act.post ? act_ymm_post(x, act) : x;
}

// act_ymm on v[0..n), the kind tested once for all of them (act_vec_n in activation.hpp).
[[maybe_unused]] __attribute__((always_inline)) inline void act_ymm_n(__m256* v, int n, const Activation& act) {
  act_vec_n(v, n, act, [](__m256 x, const Activation& a) { return act_ymm_kind(x, a); },
            [](__m256 x, const Activation& a) { return act_ymm_post(x, a); });
}

}  // namespace
}  // namespace basalt::kernels
