// Unit tests for the rnn_quant group's kernels (src/ops/rnn.cpp, src/ops/quant.cpp): features the
// ONNX conformance data does not cover (bidirectional / reverse RNNs, layout=1, sequence_lens,
// clip, input_forget, linear_before_reset, activation attributes; float8 rounding and saturation,
// per-axis / blocked quantization, zero-point variants of the integer ops) and validation errors.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor rq_f(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }

// Deterministic pseudo-random floats in [-1, 1).
std::vector<float> rq_rand(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  uint32_t s = seed * 2654435761u + 1;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = float((s >> 8) & 0xFFFF) / 32768.0f - 1.0f;
  }
  return v;
}

std::vector<float> rq_vals(const Tensor& t) {
  std::vector<float> r(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) r[size_t(i)] = t.data<float>()[i];
  return r;
}

void rq_expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

float rq_sig(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Slice direction d of a [nd, ...] tensor as a [1, ...] tensor.
Tensor rq_dir(const Tensor& t, int d) {
  Shape s = t.shape();
  int64_t per = t.numel() / s[0];
  s[0] = 1;
  std::vector<float> v(t.data<float>() + d * per, t.data<float>() + (d + 1) * per);
  return rq_f(v, s);
}

}  // namespace

// ------------------------------------------------------------------------------------------------
// RNN / GRU / LSTM
// ------------------------------------------------------------------------------------------------

TEST(RnnQuantRnn, HandComputedWithBiasAndClip) {
  Tensor X = rq_f({1, 2}, {2, 1, 1});
  Tensor W = rq_f({0.5f}, {1, 1, 1}), R = rq_f({0.25f}, {1, 1, 1}), B = rq_f({0.1f, 0.2f}, {1, 2});
  auto out = run_op("RNN", 14, {X, W, R, B}, {attr("hidden_size", 1)}, 2);
  float h1 = std::tanh(0.8f), h2 = std::tanh(1.3f + 0.25f * h1);
  rq_expect_near(rq_vals(out[0].tensor), {h1, h2});
  EXPECT_EQ(out[0].tensor.shape(), (Shape{2, 1, 1, 1}));
  rq_expect_near(rq_vals(out[1].tensor), {h2});
  auto clipped = run_op("RNN", 14, {X, W, R, B}, {attr("hidden_size", 1), attr("clip", 0.5f)}, 2);
  rq_expect_near(rq_vals(clipped[0].tensor), {std::tanh(0.5f), std::tanh(0.5f)});
}

TEST(RnnQuantRnn, ActivationWithAlpha) {
  Tensor X = rq_f({-1}, {1, 1, 1});
  Tensor W = rq_f({0.5f}, {1, 1, 1}), R = rq_f({0.25f}, {1, 1, 1}), B = rq_f({0.1f, 0.2f}, {1, 2});
  auto out = run_op("RNN", 7, {X, W, R, B},
                    {attr("hidden_size", 1), attr("activations", Strings{"LeakyRelu"}),
                     attr("activation_alpha", Floats{0.1f})},
                    1);
  rq_expect_near(rq_vals(out[0].tensor), {-0.02f});
  auto hs = run_op("RNN", 7, {X, W, R, B},
                   {attr("hidden_size", 1), attr("activations", Strings{"HardSigmoid"}),
                    attr("activation_alpha", Floats{0.5f}), attr("activation_beta", Floats{0.25f})},
                   1);
  rq_expect_near(rq_vals(hs[0].tensor), {0.5f * -0.2f + 0.25f});
}

TEST(RnnQuantGru, HandComputedLinearBeforeReset) {
  const float x = 0.7f, h0 = -0.4f;
  const float wz = 0.3f, wr = -0.6f, wh = 0.9f, rz = 0.2f, rr = 0.5f, rh = -0.8f;
  const float b[6] = {0.01f, 0.02f, 0.03f, 0.04f, 0.05f, 0.06f};
  Tensor X = rq_f({x}, {1, 1, 1}), W = rq_f({wz, wr, wh}, {1, 3, 1}), R = rq_f({rz, rr, rh}, {1, 3, 1});
  Tensor B = rq_f({b[0], b[1], b[2], b[3], b[4], b[5]}, {1, 6}), H0 = rq_f({h0}, {1, 1, 1});
  float z = rq_sig(wz * x + b[0] + rz * h0 + b[3]);
  float r = rq_sig(wr * x + b[1] + rr * h0 + b[4]);
  for (int lbr = 0; lbr < 2; ++lbr) {
    float hh = lbr ? std::tanh(wh * x + b[2] + r * (rh * h0 + b[5])) : std::tanh(wh * x + b[2] + rh * (r * h0) + b[5]);
    float h = (1 - z) * hh + z * h0;
    auto out = run_op("GRU", 14, {X, W, R, B, Value(), H0},
                      {attr("hidden_size", 1), attr("linear_before_reset", lbr)}, 2);
    rq_expect_near(rq_vals(out[1].tensor), {h});
  }
}

TEST(RnnQuantLstm, HandComputedInputForgetAndPeepholes) {
  const float x = 0.3f, h0 = 0.2f, c0 = -0.5f;
  const float wi = 0.4f, wo = -0.3f, wf = 0.6f, wc = 0.8f, ri = 0.1f, ro = 0.2f, rf = -0.3f, rc = 0.5f;
  const float pi = 0.05f, po = -0.07f, pf = 0.09f;
  Tensor X = rq_f({x}, {1, 1, 1}), W = rq_f({wi, wo, wf, wc}, {1, 4, 1}), R = rq_f({ri, ro, rf, rc}, {1, 4, 1});
  Tensor H0 = rq_f({h0}, {1, 1, 1}), C0 = rq_f({c0}, {1, 1, 1}), P = rq_f({pi, po, pf}, {1, 3});
  for (int inf = 0; inf < 2; ++inf) {
    float i = rq_sig(wi * x + ri * h0 + pi * c0);
    float f = inf ? 1 - i : rq_sig(wf * x + rf * h0 + pf * c0);
    float g = std::tanh(wc * x + rc * h0);
    float c = f * c0 + i * g;
    float o = rq_sig(wo * x + ro * h0 + po * c);
    float h = o * std::tanh(c);
    auto out = run_op("LSTM", 14, {X, W, R, Value(), Value(), H0, C0, P},
                      {attr("hidden_size", 1), attr("input_forget", inf)}, 3);
    rq_expect_near(rq_vals(out[0].tensor), {h});
    rq_expect_near(rq_vals(out[1].tensor), {h});
    rq_expect_near(rq_vals(out[2].tensor), {c});
  }
}

// Bidirectional = forward with W[0] and reverse with W[1]; reverse = forward on reversed time.
TEST(RnnQuantLstm, BidirectionalMatchesTwoSingleDirections) {
  const int64_t S = 4, Bn = 2, I = 3, H = 5;
  Tensor X = rq_f(rq_rand(size_t(S * Bn * I), 1), {S, Bn, I});
  Tensor W = rq_f(rq_rand(size_t(2 * 4 * H * I), 2), {2, 4 * H, I});
  Tensor R = rq_f(rq_rand(size_t(2 * 4 * H * H), 3), {2, 4 * H, H});
  Tensor B = rq_f(rq_rand(size_t(2 * 8 * H), 4), {2, 8 * H});
  Tensor H0 = rq_f(rq_rand(size_t(2 * Bn * H), 5), {2, Bn, H});
  Tensor C0 = rq_f(rq_rand(size_t(2 * Bn * H), 6), {2, Bn, H});
  auto bi = run_op("LSTM", 14, {X, W, R, B, Value(), H0, C0}, {attr("hidden_size", H), attr("direction", "bidirectional")}, 3);
  ASSERT_EQ(bi[0].tensor.shape(), (Shape{S, 2, Bn, H}));
  auto fw = run_op("LSTM", 14, {X, rq_dir(W, 0), rq_dir(R, 0), rq_dir(B, 0), Value(), rq_dir(H0, 0), rq_dir(C0, 0)},
                   {attr("hidden_size", H)}, 3);
  auto rv = run_op("LSTM", 14, {X, rq_dir(W, 1), rq_dir(R, 1), rq_dir(B, 1), Value(), rq_dir(H0, 1), rq_dir(C0, 1)},
                   {attr("hidden_size", H), attr("direction", "reverse")}, 3);
  // reverse == forward on time-reversed X with Y reversed
  std::vector<float> xr(size_t(X.numel()));
  for (int64_t t = 0; t < S; ++t)
    for (int64_t k = 0; k < Bn * I; ++k) xr[size_t(t * Bn * I + k)] = X.data<float>()[(S - 1 - t) * Bn * I + k];
  auto fr = run_op("LSTM", 14, {rq_f(xr, {S, Bn, I}), rq_dir(W, 1), rq_dir(R, 1), rq_dir(B, 1), Value(), rq_dir(H0, 1), rq_dir(C0, 1)},
                   {attr("hidden_size", H)}, 3);
  std::vector<float> y = rq_vals(bi[0].tensor), yf = rq_vals(fw[0].tensor), yr = rq_vals(rv[0].tensor), yfr = rq_vals(fr[0].tensor);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t k = 0; k < Bn * H; ++k) {
      EXPECT_NEAR(y[size_t((t * 2 + 0) * Bn * H + k)], yf[size_t(t * Bn * H + k)], 1e-6);
      EXPECT_NEAR(y[size_t((t * 2 + 1) * Bn * H + k)], yr[size_t(t * Bn * H + k)], 1e-6);
      EXPECT_NEAR(yr[size_t(t * Bn * H + k)], yfr[size_t((S - 1 - t) * Bn * H + k)], 1e-6);
    }
  std::vector<float> yh = rq_vals(bi[1].tensor), yc = rq_vals(bi[2].tensor);
  for (int64_t k = 0; k < Bn * H; ++k) {
    EXPECT_NEAR(yh[size_t(k)], rq_vals(fw[1].tensor)[size_t(k)], 1e-6);
    EXPECT_NEAR(yh[size_t(Bn * H + k)], rq_vals(rv[1].tensor)[size_t(k)], 1e-6);
    EXPECT_NEAR(yc[size_t(Bn * H + k)], rq_vals(rv[2].tensor)[size_t(k)], 1e-6);
  }
}

// layout=1 is layout=0 with batch and sequence (and direction) axes swapped.
TEST(RnnQuantGru, Layout1MatchesLayout0) {
  const int64_t S = 3, Bn = 2, I = 2, H = 3;
  std::vector<float> x = rq_rand(size_t(S * Bn * I), 11);
  Tensor W = rq_f(rq_rand(size_t(2 * 3 * H * I), 12), {2, 3 * H, I});
  Tensor R = rq_f(rq_rand(size_t(2 * 3 * H * H), 13), {2, 3 * H, H});
  std::vector<float> h0 = rq_rand(size_t(2 * Bn * H), 14);
  std::vector<float> xb(x.size()), h0b(h0.size());
  for (int64_t t = 0; t < S; ++t)
    for (int64_t b = 0; b < Bn; ++b)
      for (int64_t i = 0; i < I; ++i) xb[size_t((b * S + t) * I + i)] = x[size_t((t * Bn + b) * I + i)];
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t b = 0; b < Bn; ++b)
      for (int64_t h = 0; h < H; ++h) h0b[size_t((b * 2 + d) * H + h)] = h0[size_t((d * Bn + b) * H + h)];
  std::vector<Attribute> at = {attr("hidden_size", H), attr("direction", "bidirectional")};
  auto a = run_op("GRU", 14, {rq_f(x, {S, Bn, I}), W, R, Value(), Value(), rq_f(h0, {2, Bn, H})}, at, 2);
  at.push_back(attr("layout", 1));
  auto b = run_op("GRU", 14, {rq_f(xb, {Bn, S, I}), W, R, Value(), Value(), rq_f(h0b, {Bn, 2, H})}, at, 2);
  ASSERT_EQ(b[0].tensor.shape(), (Shape{Bn, S, 2, H}));
  ASSERT_EQ(b[1].tensor.shape(), (Shape{Bn, 2, H}));
  std::vector<float> ya = rq_vals(a[0].tensor), yb = rq_vals(b[0].tensor), ha = rq_vals(a[1].tensor), hb = rq_vals(b[1].tensor);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < 2; ++d)
      for (int64_t bb = 0; bb < Bn; ++bb)
        for (int64_t h = 0; h < H; ++h)
          EXPECT_NEAR(ya[size_t(((t * 2 + d) * Bn + bb) * H + h)], yb[size_t(((bb * S + t) * 2 + d) * H + h)], 1e-6);
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t bb = 0; bb < Bn; ++bb)
      for (int64_t h = 0; h < H; ++h) EXPECT_NEAR(ha[size_t((d * Bn + bb) * H + h)], hb[size_t((bb * 2 + d) * H + h)], 1e-6);
}

// sequence_lens: a short batch entry behaves like a run on its own truncated sequence; Y is zero
// past its length; the reverse direction starts at its last valid step.
TEST(RnnQuantRnn, SequenceLensBidirectional) {
  const int64_t S = 4, Bn = 2, I = 2, H = 3;
  std::vector<float> x = rq_rand(size_t(S * Bn * I), 21);
  Tensor W = rq_f(rq_rand(size_t(2 * H * I), 22), {2, H, I});
  Tensor R = rq_f(rq_rand(size_t(2 * H * H), 23), {2, H, H});
  std::vector<Attribute> at = {attr("hidden_size", H), attr("direction", "bidirectional")};
  Tensor lens = Tensor::from_vector<int32_t>({4, 2}, {2});
  auto full = run_op("RNN", 14, {rq_f(x, {S, Bn, I}), W, R, Value(), lens}, at, 2);
  // batch entry 1 alone, length 2
  std::vector<float> x1;
  for (int64_t t = 0; t < 2; ++t)
    for (int64_t i = 0; i < I; ++i) x1.push_back(x[size_t((t * Bn + 1) * I + i)]);
  auto solo = run_op("RNN", 14, {rq_f(x1, {2, 1, I}), W, R}, at, 2);
  std::vector<float> y = rq_vals(full[0].tensor), ys = rq_vals(solo[0].tensor);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t d = 0; d < 2; ++d)
      for (int64_t h = 0; h < H; ++h) {
        float got = y[size_t(((t * 2 + d) * Bn + 1) * H + h)];
        if (t >= 2) EXPECT_EQ(got, 0.0f);
        else EXPECT_NEAR(got, ys[size_t((t * 2 + d) * H + h)], 1e-6);
      }
  std::vector<float> yh = rq_vals(full[1].tensor), yhs = rq_vals(solo[1].tensor);
  for (int64_t d = 0; d < 2; ++d)
    for (int64_t h = 0; h < H; ++h) EXPECT_NEAR(yh[size_t((d * Bn + 1) * H + h)], yhs[size_t(d * H + h)], 1e-6);
}

// A zero-length sequence gives zero Y and zero final states (ONNX Runtime's behaviour).
TEST(RnnQuantLstm, ZeroLengthSequenceGivesZeroStates) {
  const int64_t S = 2, Bn = 2, I = 2, H = 2;
  Tensor X = rq_f(rq_rand(size_t(S * Bn * I), 31), {S, Bn, I});
  Tensor W = rq_f(rq_rand(size_t(4 * H * I), 32), {1, 4 * H, I});
  Tensor R = rq_f(rq_rand(size_t(4 * H * H), 33), {1, 4 * H, H});
  Tensor H0 = rq_f(rq_rand(size_t(Bn * H), 34), {1, Bn, H});
  Tensor C0 = rq_f(rq_rand(size_t(Bn * H), 35), {1, Bn, H});
  Tensor lens = Tensor::from_vector<int32_t>({0, 2}, {2});
  auto out = run_op("LSTM", 14, {X, W, R, Value(), lens, H0, C0}, {attr("hidden_size", H)}, 3);
  std::vector<float> y = rq_vals(out[0].tensor), yh = rq_vals(out[1].tensor), yc = rq_vals(out[2].tensor);
  for (int64_t t = 0; t < S; ++t)
    for (int64_t h = 0; h < H; ++h) EXPECT_EQ(y[size_t((t * Bn + 0) * H + h)], 0.0f);
  for (int64_t h = 0; h < H; ++h) {
    EXPECT_EQ(yh[size_t(h)], 0.0f);
    EXPECT_EQ(yc[size_t(h)], 0.0f);
    EXPECT_NE(yh[size_t(H + h)], 0.0f);
  }
}

TEST(RnnQuantRnn, ValidationErrors) {
  Tensor X = rq_f({1, 2}, {2, 1, 1});
  Tensor W = rq_f({0.5f}, {1, 1, 1}), R = rq_f({0.25f}, {1, 1, 1});
  EXPECT_THROW(run_op("RNN", 14, {X, W, R}, {attr("hidden_size", 2)}), Error);  // W does not match hidden_size
  EXPECT_THROW(run_op("RNN", 14, {X, W, R}, {attr("direction", "sideways")}), Error);
  EXPECT_THROW(run_op("RNN", 14, {X, W, R}, {attr("activations", Strings{"Nope"})}), Error);
  EXPECT_THROW(run_op("RNN", 14, {X, W, R, Value(), Tensor::from_vector<int32_t>({3}, {1})}), Error);  // len > seq
  EXPECT_THROW(run_op("RNN", 14, {rq_f({1, 2}, {2, 1}), W, R}), Error);  // X rank 2
}

// ------------------------------------------------------------------------------------------------
// QuantizeLinear / DequantizeLinear
// ------------------------------------------------------------------------------------------------

namespace {
std::vector<int> rq_bytes(const Tensor& t) {
  std::vector<int> r;
  for (int64_t i = 0; i < t.numel(); ++i)
    r.push_back(t.dtype() == DType::Int8 || t.dtype() == DType::Int4 ? int(t.data<int8_t>()[i]) : int(t.data<uint8_t>()[i]));
  return r;
}
Tensor rq_quant(const Tensor& x, const Tensor& scale, const Tensor* zp, std::vector<Attribute> attrs = {}, int opset = 21) {
  std::vector<Value> in = {x, scale};
  if (zp) in.push_back(*zp);
  return run_op("QuantizeLinear", opset, in, std::move(attrs))[0].tensor;
}
Tensor rq_zp(DType dt, Shape s = {}) { return Tensor(dt, s); }
const float rqInf = std::numeric_limits<float>::infinity();
const float rqNaN = std::numeric_limits<float>::quiet_NaN();
}  // namespace

TEST(RnnQuantQuantize, RoundHalfEvenAndSaturate) {
  Tensor x = rq_f({2.5f, -2.5f, 3.5f, 0.5f, 300.0f, -300.0f, 1.49f}, {7});
  Tensor s = Tensor::scalar<float>(1.0f);
  Tensor u8 = rq_zp(DType::Uint8);
  u8.data<uint8_t>()[0] = 10;
  EXPECT_EQ(rq_bytes(rq_quant(x, s, &u8)), (std::vector<int>{12, 8, 14, 10, 255, 0, 11}));
  Tensor i8 = rq_zp(DType::Int8);
  EXPECT_EQ(rq_bytes(rq_quant(x, s, &i8)), (std::vector<int>{2, -2, 4, 0, 127, -128, 1}));
  Tensor i4 = rq_zp(DType::Int4);
  EXPECT_EQ(rq_bytes(rq_quant(x, s, &i4)), (std::vector<int>{2, -2, 4, 0, 7, -8, 1}));
  // no zero point: uint8, or output_dtype
  EXPECT_EQ(rq_quant(x, s, nullptr).dtype(), DType::Uint8);
  EXPECT_EQ(rq_quant(x, s, nullptr, {attr("output_dtype", int64_t(DType::Int16))}).dtype(), DType::Int16);
  EXPECT_THROW(rq_quant(x, s, &u8, {attr("output_dtype", int64_t(DType::Int8))}), Error);
}

TEST(RnnQuantQuantize, Float8RoundingAndSaturation) {
  Tensor x = rq_f({448, 464, 480, -rqInf, rqNaN, 0x1p-9f, 0x1p-10f, -0.0f, 1.0f, 1e6f}, {10});
  Tensor s = Tensor::scalar<float>(1.0f);
  Tensor z = rq_zp(DType::Float8E4M3FN);
  EXPECT_EQ(rq_bytes(rq_quant(x, s, &z)), (std::vector<int>{0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x01, 0x00, 0x00, 0x38, 0x7E}));
  // -0 stays -0 without a zero point (with one, -0 + 0 = +0)
  EXPECT_EQ(rq_bytes(rq_quant(x, s, nullptr, {attr("output_dtype", int64_t(DType::Float8E4M3FN))}))[7], 0x80);
  auto ns = rq_bytes(rq_quant(x, s, &z, {attr("saturate", 0)}));
  EXPECT_EQ(ns[1], 0x7E);  // tie to even -> 448
  EXPECT_EQ(ns[2], 0x7F);  // overflow -> NaN
  EXPECT_EQ(ns[9], 0x7F);
  Tensor z5 = rq_zp(DType::Float8E5M2);
  auto e5 = rq_bytes(rq_quant(x, s, &z5, {attr("saturate", 0)}));
  EXPECT_EQ(e5[3], 0xFC);  // -inf stays -inf
  EXPECT_EQ(e5[9], 0x7C);  // overflow -> inf
  EXPECT_EQ(e5[8], 0x3C);  // 1.0
  EXPECT_EQ(rq_bytes(rq_quant(x, s, &z5))[9], 0x7B);  // saturate -> 57344
  Tensor zu = rq_zp(DType::Float8E4M3FNUZ);
  auto uz = rq_bytes(rq_quant(x, s, &zu));
  EXPECT_EQ(uz[7], 0x00);  // no negative zero
  EXPECT_EQ(uz[4], 0x80);  // NaN
  EXPECT_EQ(uz[8], 0x40);  // 1.0 (bias 8)
  EXPECT_EQ(uz[0], 0x7F);  // 448 saturates to 240
}

TEST(RnnQuantQuantize, PerAxisAndBlocked) {
  Tensor x = rq_f({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  Tensor s0 = rq_f({1, 2}, {2});
  Tensor u8 = rq_zp(DType::Uint8, {2});
  EXPECT_EQ(rq_bytes(rq_quant(x, s0, &u8, {attr("axis", 0)})), (std::vector<int>{1, 2, 3, 4, 2, 3, 4, 4}));
  // blocked along axis 1, block 3: scales [2, 2]
  Tensor sb = rq_f({1, 2, 4, 8}, {2, 2});
  EXPECT_EQ(rq_bytes(rq_quant(x, sb, nullptr, {attr("axis", 1), attr("block_size", 3)})),
            (std::vector<int>{1, 2, 3, 2, 1, 2, 2, 1}));
  EXPECT_THROW(rq_quant(x, sb, nullptr, {attr("axis", 1), attr("block_size", 1)}), Error);  // 4 blocks needed, 2 given
}

TEST(RnnQuantDequantize, IntegerFloat8AndErrors) {
  Tensor x(DType::Int32, {3});
  x.data<int32_t>()[0] = -5;
  x.data<int32_t>()[1] = 0;
  x.data<int32_t>()[2] = 1000;
  auto y = run_op("DequantizeLinear", 21, {x, Tensor::scalar<float>(0.5f)})[0].tensor;
  rq_expect_near(rq_vals(y), {-2.5f, 0.0f, 500.0f});
  Tensor f8(DType::Float8E4M3FN, {3});
  f8.data<uint8_t>()[0] = 0x38;  // 1
  f8.data<uint8_t>()[1] = 0xFE;  // -448
  f8.data<uint8_t>()[2] = 0x01;  // 2^-9
  auto y8 = run_op("DequantizeLinear", 21, {f8, Tensor::scalar<float>(2.0f)})[0].tensor;
  rq_expect_near(rq_vals(y8), {2.0f, -896.0f, 0x1p-8f}, 0);
  Tensor u8(DType::Uint8, {2, 2});
  EXPECT_THROW(run_op("DequantizeLinear", 21, {u8, rq_f({1, 2, 3}, {3})}, {attr("axis", 0)}), Error);  // wrong per-axis size
  EXPECT_THROW(run_op("DequantizeLinear", 21, {u8, rq_f({1, 2}, {2})}, {attr("axis", 5)}), Error);     // bad axis
  Tensor zp(DType::Int8, {});
  EXPECT_THROW(run_op("DequantizeLinear", 21, {u8, Tensor::scalar<float>(1.0f), zp}), Error);  // zp type mismatch
}

TEST(RnnQuantDynamic, AllZeroInput) {
  auto out = run_op("DynamicQuantizeLinear", 11, {rq_f({0, 0}, {2})}, {}, 3);
  EXPECT_EQ(rq_bytes(out[0].tensor), (std::vector<int>{0, 0}));
  EXPECT_EQ(out[1].tensor.data<float>()[0], 0.0f);
}

// ------------------------------------------------------------------------------------------------
// MatMulInteger / ConvInteger / QLinear*
// ------------------------------------------------------------------------------------------------

TEST(RnnQuantMatMulInteger, PerRowAndPerColumnZeroPoints) {
  Tensor A = Tensor::from_vector<uint8_t>({1, 2, 3, 4}, {2, 2});
  Tensor B = Tensor::from_vector<int8_t>({1, -1, 2, 3}, {2, 2});
  Tensor az = Tensor::from_vector<uint8_t>({1, 2}, {2});
  Tensor bz = Tensor::from_vector<int8_t>({0, 1}, {2});
  auto y = run_op("MatMulInteger", 10, {A, B, az, bz})[0].tensor;
  // A - az(row) = [[0,1],[1,2]]; B - bz(col) = [[1,-2],[2,2]]
  ASSERT_EQ(y.dtype(), DType::Int32);
  std::vector<int32_t> got(y.data<int32_t>(), y.data<int32_t>() + 4);
  EXPECT_EQ(got, (std::vector<int32_t>{2, 2, 5, 2}));
  EXPECT_THROW(run_op("MatMulInteger", 10, {A, Tensor::from_vector<int8_t>({1, 2, 3}, {3, 1})}), Error);
}

TEST(RnnQuantConvInteger, GroupsAndPerChannelZeroPoint) {
  // 2 input channels, group 2, 1x1 kernels, per-output-channel w zero point.
  Tensor X = Tensor::from_vector<uint8_t>({1, 2, 3, 4}, {1, 2, 1, 2});
  Tensor W = Tensor::from_vector<uint8_t>({3, 5}, {2, 1, 1, 1});
  Tensor xz = Tensor::scalar<uint8_t>(1);
  Tensor wz = Tensor::from_vector<uint8_t>({1, 2}, {2});
  auto y = run_op("ConvInteger", 10, {X, W, xz, wz}, {attr("group", 2)})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{1, 2, 1, 2}));
  std::vector<int32_t> got(y.data<int32_t>(), y.data<int32_t>() + 4);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 2, 6, 9}));
  auto same = run_op("ConvInteger", 10, {X, W, xz, wz},
                     {attr("auto_pad", "SAME_UPPER"), attr("kernel_shape", Ints{1, 1}), attr("group", 2)})[0].tensor;
  EXPECT_EQ(same.shape(), (Shape{1, 2, 1, 2}));
  EXPECT_THROW(run_op("ConvInteger", 10, {X, W}), Error);  // channels mismatch without group
}

TEST(RnnQuantQLinearMatMul, PerColumnScale) {
  Tensor A = Tensor::from_vector<uint8_t>({2, 4}, {1, 2});
  Tensor B = Tensor::from_vector<uint8_t>({1, 2, 3, 4}, {2, 2});
  auto y = run_op("QLinearMatMul", 10, {A, Tensor::scalar<float>(0.5f), Tensor::scalar<uint8_t>(0), B, rq_f({1.0f, 2.0f}, {2}),
                   Tensor::from_vector<uint8_t>({0, 0}, {2}), Tensor::scalar<float>(1.0f), Tensor::scalar<uint8_t>(1)})[0]
               .tensor;
  // acc = [14, 20]; scale = [0.5, 1.0] -> [7, 20] + 1
  EXPECT_EQ(rq_bytes(y), (std::vector<int>{8, 21}));
}
