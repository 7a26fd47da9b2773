// Activations fused into the store of GEMM / convolution tiles (the epilogue), with the float32
// semantics of the ONNX ops of the same name (src/ops/activation.cpp), so that a fused node gives
// the same numbers as the unfused pair:
//   Relu         max(0, x), NaN passes through
//   Clip         min(max(x, lo), hi)                      params [lo, hi]
//   HardSigmoid  max(0, min(1, alpha * x + beta))         params [alpha, beta] (default 0.2, 0.5)
//   HardSwish    x * max(0, min(1, x * (1/6) + 0.5)), one rounding (fma), as the HardSwish op
//   Sigmoid      1 / (1 + exp(-x)), computed in double like the reference op
//   LeakyRelu    x < 0 ? alpha * x : x                    params [alpha] (default 0.01)
//   Tanh         tanh(x), computed in double like the reference op
//
// Everything here has internal linkage (unnamed namespace): the header is compiled into the
// portable, AVX2 and AVX-512 translation units with different instruction sets, and an inline
// function with external linkage could be merged across them by the linker (an AVX-512 copy
// called on a CPU without AVX-512).
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace basalt::kernels {

enum class ActKind { None, Relu, Clip, HardSigmoid, HardSwish, Sigmoid, LeakyRelu, Tanh };

struct Activation {
  ActKind kind = ActKind::None;
  float a = 0.f, b = 0.f;  // Clip: lo, hi; HardSigmoid: alpha, beta; LeakyRelu: alpha
  // A scalar affine after the activation, v * post_mul + post_add (basalt::FusedConv's
  // post_affine: a Mul and an Add by constant scalars that read the activation's output, as
  // PaddleOCR's "learnable affine blocks"). The identities are 1 and -0 (x + -0 == x for every x,
  // -0 included), so a Mul alone or an Add alone changes nothing else.
  bool post = false;
  float post_mul = 1.f, post_add = -0.f;
};

namespace {

// Parses the `activation` / `activation_params` attributes of basalt::FusedConv / FusedMatMul.
// Returns false (and sets *err) for an unknown name or a wrong number of params.
[[maybe_unused]] bool parse_activation(const std::string& name, const std::vector<float>& params, Activation& out,
                                       std::string* err) {
  Activation act;
  size_t want_min = 0, want_max = 0;
  if (name.empty()) act.kind = ActKind::None;
  else if (name == "Relu") act.kind = ActKind::Relu;
  else if (name == "Clip") {
    act.kind = ActKind::Clip;
    act.a = -FLT_MAX;
    act.b = FLT_MAX;
    want_max = 2;
  } else if (name == "HardSigmoid") {
    act.kind = ActKind::HardSigmoid;
    act.a = 0.2f;
    act.b = 0.5f;
    want_max = 2;
  } else if (name == "HardSwish") act.kind = ActKind::HardSwish;
  else if (name == "Sigmoid") act.kind = ActKind::Sigmoid;
  else if (name == "LeakyRelu") {
    act.kind = ActKind::LeakyRelu;
    act.a = 0.01f;
    want_max = 1;
  } else if (name == "Tanh") act.kind = ActKind::Tanh;
  else {
    if (err) *err = "unknown activation '" + name + "'";
    return false;
  }
  if (params.size() < want_min || params.size() > want_max) {
    if (err) *err = "activation '" + name + "' takes at most " + std::to_string(want_max) + " params, got " + std::to_string(params.size());
    return false;
  }
  if (params.size() >= 1) act.a = params[0];
  if (params.size() >= 2) act.b = params[1];
  out = act;
  return true;
}

// The activation alone, in T (float, or double for float64 ops); the parameters are float.
// Sigmoid and Tanh are computed in double either way.
template <class T>
inline T activation_value(const Activation& act, T v) {
  const T a = T(act.a), b = T(act.b);
  switch (act.kind) {
    case ActKind::None: return v;
    case ActKind::Relu: return (std::isnan(v) || v > 0) ? v : T(0);
    case ActKind::Clip: return std::min(std::max(v, a), b);
    case ActKind::HardSigmoid: return std::max(T(0), std::min(T(1), a * v + b));
    case ActKind::HardSwish: return v * std::max(T(0), std::min(T(1), std::fma(v, T(1) / T(6), T(0.5))));
    case ActKind::Sigmoid: {
      double d = double(v);
      if (d >= 0) return T(1.0 / (1.0 + std::exp(-d)));
      double e = std::exp(d);
      return T(e / (1.0 + e));
    }
    case ActKind::LeakyRelu: return v < 0 ? a * v : v;
    case ActKind::Tanh: return T(std::tanh(double(v)));
  }
  return v;
}

[[maybe_unused]] inline float apply_activation_kind(const Activation& act, float v) { return activation_value(act, v); }

// The activation, then the post affine when there is one.
[[maybe_unused]] inline float apply_activation(const Activation& act, float v) {
  v = apply_activation_kind(act, v);
  return act.post ? v * act.post_mul + act.post_add : v;
}

// Reads basalt::FusedConv's optional post_affine attribute value ([mul, add]) into act.post*.
// Returns false (and sets *err) unless it is absent (empty) or has exactly two values.
[[maybe_unused]] bool parse_post_affine(const std::vector<float>& v, Activation& act, std::string* err) {
  if (v.empty()) return true;
  if (v.size() != 2) {
    if (err) *err = "post_affine takes 2 values [mul, add], got " + std::to_string(v.size());
    return false;
  }
  act.post = true;
  act.post_mul = v[0];
  act.post_add = v[1];
  return true;
}

// The epilogue over one row segment c[0..n): c = act(alpha * c + row_bias + col_bias[j] + res[j]).
// col_bias / res may be null. Written as plain loops per activation so the compiler vectorizes
// the cheap ones for the instruction set of the including file.
[[maybe_unused]] inline void epilogue_row(float* c, int64_t n, float alpha, float row_bias, const float* col_bias,
                                          const float* res, const Activation& act) {
  if (alpha != 1.f)
    for (int64_t j = 0; j < n; ++j) c[j] *= alpha;
  if (row_bias != 0.f)
    for (int64_t j = 0; j < n; ++j) c[j] += row_bias;
  if (col_bias)
    for (int64_t j = 0; j < n; ++j) c[j] += col_bias[j];
  if (res)
    for (int64_t j = 0; j < n; ++j) c[j] += res[j];
  switch (act.kind) {
    case ActKind::None: break;
    case ActKind::Relu:
      // 0 > v ? 0 : v is Relu that keeps NaN (the comparison is false for it), and it is exactly
      // maxps(0, v), which the compiler emits even where the loop is unrolled into straight code.
      // (The form (v > 0 || v != v) ? v : 0 became a compare and a branch per element in the
      // 16-wide NCHWc Winograd output transform, mispredicted on every other sign: 61% of a
      // 4-conv 64 -> 64 @56x56 chain's time, 1 thread.)
      for (int64_t j = 0; j < n; ++j) c[j] = 0.f > c[j] ? 0.f : c[j];
      break;
    case ActKind::Clip: {
      float lo = act.a, hi = act.b;
      for (int64_t j = 0; j < n; ++j) c[j] = std::min(std::max(c[j], lo), hi);
      break;
    }
    case ActKind::HardSigmoid: {
      float al = act.a, be = act.b;
      for (int64_t j = 0; j < n; ++j) c[j] = std::max(0.f, std::min(1.f, al * c[j] + be));
      break;
    }
    case ActKind::HardSwish:
      for (int64_t j = 0; j < n; ++j) c[j] = c[j] * std::max(0.f, std::min(1.f, std::fma(c[j], 1.f / 6.f, 0.5f)));
      break;
    case ActKind::LeakyRelu: {
      float al = act.a;
      for (int64_t j = 0; j < n; ++j) c[j] = c[j] < 0.f ? al * c[j] : c[j];
      break;
    }
    case ActKind::Sigmoid:
    case ActKind::Tanh:
      for (int64_t j = 0; j < n; ++j) c[j] = apply_activation_kind(act, c[j]);
      break;
  }
  if (act.post) {
    const float pm = act.post_mul, pa = act.post_add;
    for (int64_t j = 0; j < n; ++j) c[j] = c[j] * pm + pa;
  }
}

// The loop behind act_zmm_n / act_ymm_n (activation_avx512.hpp / activation_avx2.hpp): kind(v[i],
// a) on v[0..n) with the switch on the activation's kind outside the loop (inside each case the
// inlined kind function sees its kind as a constant), then post(v[i], a) when there is a post
// affine. Testing the kind and `post` per vector cost 3% more instructions in the blocked conv
// tiles. With n known at the call site, the loops unroll and v stays in registers.
template <class V, class KindFn, class PostFn>
[[maybe_unused]] __attribute__((always_inline)) inline void act_vec_n(V* v, int n, const Activation& act, KindFn kind,
                                                                      PostFn post) {
  const Activation a = act;  // a local copy: the kind is known in each case
  switch (a.kind) {
    case ActKind::None: break;
#define BASALT_ACT_N_CASE(K)                                                      \
  case ActKind::K:                                                                \
    _Pragma("GCC unroll 24") for (int i = 0; i < n; ++i) v[i] = kind(v[i], a);    \
    break;
    BASALT_ACT_N_CASE(Relu)
    BASALT_ACT_N_CASE(Clip)
    BASALT_ACT_N_CASE(HardSigmoid)
    BASALT_ACT_N_CASE(HardSwish)
    BASALT_ACT_N_CASE(LeakyRelu)
    BASALT_ACT_N_CASE(Sigmoid)
    BASALT_ACT_N_CASE(Tanh)
#undef BASALT_ACT_N_CASE
  }
  if (a.post) {
#pragma GCC unroll 24
    for (int i = 0; i < n; ++i) v[i] = post(v[i], a);
  }
}

}  // namespace

}  // namespace basalt::kernels
