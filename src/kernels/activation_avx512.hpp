// The fused activations of activation.hpp on one zmm, for the AVX-512 epilogues (GEMM tiles,
// blocked convs). Include only from *_avx512.cpp files. Same float semantics as
// apply_activation (NaN handling included); Sigmoid and Tanh go per element through
// apply_activation_kind (act_zmm_scalar, out of line).
#pragma once

#include "kernels/activation.hpp"

#include <immintrin.h>

namespace basalt::kernels {
namespace {

// Sigmoid / Tanh per element (out of line: keeps act_zmm small enough to inline in tile loops).
[[maybe_unused]] __attribute__((noinline)) __m512 act_zmm_scalar(__m512 x, const Activation& act) {
  alignas(64) float v[16];
  _mm512_store_ps(v, x);
  for (float& e : v) e = apply_activation_kind(act, e);
  return _mm512_load_ps(v);
}

[[maybe_unused]] inline __m512 act_zmm_kind(__m512 x, const Activation& act) {
  // Clamps as blends on ordered compares (false for NaN), so NaN passes where std::max /
  // std::min let it pass; `below(v, lo)` / `above(v, hi)`: v < lo -> lo, v > hi -> hi.
  // (_mm512_max_ps / _mm512_min_ps would do, but trip GCC 12's -Wmaybe-uninitialized.)
  auto below = [](__m512 v, __m512 lo) { return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, lo, _CMP_LT_OQ), lo); };
  auto above = [](__m512 v, __m512 hi) { return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, hi, _CMP_GT_OQ), hi); };
  // v <= 0 -> +0, as `v > 0 ? v : 0` and std::max(0.f, v) give (-0 becomes +0)
  auto pos = [](__m512 v) {
    return _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, _mm512_setzero_ps(), _CMP_LE_OQ), _mm512_setzero_ps());
  };
  // std::min(1.f, t) is 1 for NaN t (HardSigmoid's NaN result; HardSwish multiplies by x)
  auto min1 = [](__m512 t) {
    return _mm512_mask_mov_ps(t, _mm512_cmp_ps_mask(t, _mm512_set1_ps(1.f), _CMP_NLT_UQ), _mm512_set1_ps(1.f));
  };
  switch (act.kind) {
    case ActKind::Relu: return pos(x);
    case ActKind::Clip: return above(below(x, _mm512_set1_ps(act.a)), _mm512_set1_ps(act.b));
    case ActKind::HardSigmoid: {
      __m512 t = _mm512_add_ps(_mm512_mul_ps(_mm512_set1_ps(act.a), x), _mm512_set1_ps(act.b));
      return pos(min1(t));
    }
    case ActKind::HardSwish: {
      __m512 t = _mm512_fmadd_ps(x, _mm512_set1_ps(1.f / 6.f), _mm512_set1_ps(0.5f));  // as the HardSwish op (eltwise)
      return _mm512_mul_ps(x, pos(min1(t)));
    }
    case ActKind::LeakyRelu:
      return _mm512_mask_mul_ps(x, _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_LT_OQ), x, _mm512_set1_ps(act.a));
    case ActKind::Sigmoid:
    case ActKind::Tanh: return act_zmm_scalar(x, act);
    default: return x;
  }
}

// The post affine (Activation::post): x * post_mul + post_add.
[[maybe_unused]] inline __m512 act_zmm_post(__m512 x, const Activation& act) {
  return _mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(act.post_mul)), _mm512_set1_ps(act.post_add));
}

// The activation, then the post affine when there is one.
[[maybe_unused]] inline __m512 act_zmm(__m512 x, const Activation& act) {
  x = act_zmm_kind(x, act);
  return act.post ? act_zmm_post(x, act) : x;
}

// act_zmm on v[0..n), the kind tested once for all of them (act_vec_n in activation.hpp).
[[maybe_unused]] __attribute__((always_inline)) inline void act_zmm_n(__m512* v, int n, const Activation& act) {
  act_vec_n(v, n, act, [](__m512 x, const Activation& a) { return act_zmm_kind(x, a); },
            [](__m512 x, const Activation& a) { return act_zmm_post(x, a); });
}

}  // namespace
}  // namespace basalt::kernels
