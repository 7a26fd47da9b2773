// Unit tests for the activation group's kernels (src/ops/activation.cpp): Cast corner cases
// (float8/float4/e8m0 rounding and saturation, string formatting and parsing, sub-byte integer
// wrapping) and validation errors the ONNX conformance data does not cover.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor cast(const Tensor& x, DType to, int opset = 25, std::vector<Attribute> extra = {}) {
  extra.push_back(attr("to", int64_t(to)));
  return run_op("Cast", opset, {Value(x)}, std::move(extra))[0].tensor;
}

Tensor floats(std::vector<float> v) { return Tensor::from_vector<float>(v, {int64_t(v.size())}); }

std::vector<int> bytes(const Tensor& t) {
  std::vector<int> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.data<uint8_t>()[i]);
  return r;
}

const float kInf = std::numeric_limits<float>::infinity();
const float kNaN = std::numeric_limits<float>::quiet_NaN();

}  // namespace

TEST(ActivationCast, Float8E4M3FNRoundingAndSaturation) {
  Tensor x = floats({448, 464, 480, -kInf, kNaN, 0x1p-9f, 0x1p-10f, 0x1.8p-10f, -0.0f, 1.0f});
  EXPECT_EQ(bytes(cast(x, DType::Float8E4M3FN)),
            (std::vector<int>{0x7E, 0x7E, 0x7E, 0xFE, 0x7F, 0x01, 0x00, 0x01, 0x80, 0x38}));
  auto ns = cast(x, DType::Float8E4M3FN, 25, {attr("saturate", 0)});
  EXPECT_EQ(bytes(ns)[1], 0x7E);  // tie rounds to even (448)
  EXPECT_EQ(bytes(ns)[2], 0x7F);  // overflow -> NaN
  EXPECT_EQ(bytes(ns)[3], 0xFF);  // -inf -> NaN
}

TEST(ActivationCast, Float8FnuzHasNoNegativeZero) {
  Tensor x = floats({-0.0f, kNaN, 240, 1000, -1e-9f});
  EXPECT_EQ(bytes(cast(x, DType::Float8E4M3FNUZ)), (std::vector<int>{0x00, 0x80, 0x7F, 0x7F, 0x00}));
  EXPECT_EQ(bytes(cast(x, DType::Float8E4M3FNUZ, 25, {attr("saturate", 0)}))[3], 0x80);
}

TEST(ActivationCast, Float8E5M2Infinity) {
  Tensor x = floats({57344, kInf, -kInf, 1e6f});
  EXPECT_EQ(bytes(cast(x, DType::Float8E5M2)), (std::vector<int>{0x7B, 0x7B, 0xFB, 0x7B}));
  EXPECT_EQ(bytes(cast(x, DType::Float8E5M2, 25, {attr("saturate", 0)})), (std::vector<int>{0x7B, 0x7C, 0xFC, 0x7C}));
}

TEST(ActivationCast, Float8RoundTripsEveryCode) {
  for (DType dt : {DType::Float8E4M3FN, DType::Float8E4M3FNUZ, DType::Float8E5M2, DType::Float8E5M2FNUZ}) {
    Tensor codes(dt, {256});
    for (int i = 0; i < 256; ++i) codes.data<uint8_t>()[i] = uint8_t(i);
    Tensor f = cast(codes, DType::Float);
    Tensor back = cast(f, dt, 25, {attr("saturate", 0)});
    for (int i = 0; i < 256; ++i) {
      if (std::isnan(f.data<float>()[i])) continue;
      EXPECT_EQ(back.data<uint8_t>()[i], i) << dtype_name(dt) << " value " << f.data<float>()[i];
    }
  }
}

TEST(ActivationCast, Float4E2M1) {
  Tensor x = floats({0.25f, 0.75f, 5.0f, -3.5f, 100.0f, -kInf});
  EXPECT_EQ(bytes(cast(x, DType::Float4E2M1)), (std::vector<int>{0x0, 0x2, 0x6, 0xE, 0x7, 0xF}));
  Tensor codes(DType::Float4E2M1, {3});
  codes.data<uint8_t>()[0] = 0x7;
  codes.data<uint8_t>()[1] = 0xB;
  codes.data<uint8_t>()[2] = 0x1;
  Tensor f = cast(codes, DType::Float);
  EXPECT_EQ(f.data<float>()[0], 6.0f);
  EXPECT_EQ(f.data<float>()[1], -1.5f);
  EXPECT_EQ(f.data<float>()[2], 0.5f);
}

TEST(ActivationCast, Float8E8M0RoundModes) {
  Tensor x = floats({1.0f, 3.0f, 2.5f, kNaN, kInf});
  EXPECT_EQ(bytes(cast(x, DType::Float8E8M0)), (std::vector<int>{127, 129, 129, 255, 254}));
  EXPECT_EQ(bytes(cast(x, DType::Float8E8M0, 25, {attr("round_mode", "down")})),
            (std::vector<int>{127, 128, 128, 255, 254}));
  EXPECT_EQ(bytes(cast(x, DType::Float8E8M0, 25, {attr("round_mode", "nearest")})),
            (std::vector<int>{127, 129, 128, 255, 254}));
  EXPECT_THROW(cast(x, DType::Float8E8M0, 25, {attr("round_mode", "sideways")}), Error);
}

TEST(ActivationCast, SubByteIntegersWrap) {
  Tensor x = floats({9, -9, 7, -1});
  Tensor y = cast(x, DType::Int4);
  EXPECT_EQ(y.data<int8_t>()[0], -7);
  EXPECT_EQ(y.data<int8_t>()[1], 7);
  EXPECT_EQ(y.data<int8_t>()[2], 7);
  EXPECT_EQ(y.data<int8_t>()[3], -1);
  EXPECT_EQ(bytes(cast(x, DType::Uint2)), (std::vector<int>{1, 3, 3, 3}));
}

TEST(ActivationCast, FloatToString) {
  Tensor x = floats({1.0f, 1e-5f, 0.1f, 1e16f, 123456.0f, -0.0f, kNaN, -kInf, 0.9767611f});
  Tensor s = cast(x, DType::String);
  std::vector<std::string> want = {"1.0", "1e-05", "0.1", "1e+16", "123456.0", "-0.0", "nan", "-inf", "0.9767611"};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(s.data<std::string>()[i], want[i]);
}

TEST(ActivationCast, StringToNumbers) {
  Tensor s(DType::String, {4});
  s.data<std::string>()[0] = "42";
  s.data<std::string>()[1] = "100.5";
  s.data<std::string>()[2] = "-INF";
  s.data<std::string>()[3] = "1e3";
  Tensor i = cast(s, DType::Int32);
  EXPECT_EQ(i.data<int32_t>()[0], 42);
  EXPECT_EQ(i.data<int32_t>()[1], 100);
  Tensor f = cast(s, DType::Float);
  EXPECT_EQ(f.data<float>()[2], -kInf);
  EXPECT_EQ(f.data<float>()[3], 1000.0f);
  Tensor bad(DType::String, {1});
  bad.data<std::string>()[0] = "abc";
  EXPECT_THROW(cast(bad, DType::Float), Error);
}

TEST(ActivationCast, FloatToIntNeverUB) {
  Tensor x = floats({kNaN, 1e30f, -1e30f, -1.0f, 2.9f, -2.9f});
  Tensor y = cast(x, DType::Int64);
  EXPECT_EQ(y.data<int64_t>()[0], 0);
  EXPECT_EQ(y.data<int64_t>()[1], std::numeric_limits<int64_t>::max());
  EXPECT_EQ(y.data<int64_t>()[2], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(y.data<int64_t>()[4], 2);
  EXPECT_EQ(y.data<int64_t>()[5], -2);
  EXPECT_EQ(cast(x, DType::Uint8).data<uint8_t>()[3], 255);
}

TEST(ActivationCast, OldStringToAttributeAndBadTo) {
  Tensor x = floats({1.5f});
  Tensor y = run_op("Cast", 1, {Value(x)}, {attr("to", "INT32")})[0].tensor;
  EXPECT_EQ(y.dtype(), DType::Int32);
  EXPECT_EQ(y.data<int32_t>()[0], 1);
  EXPECT_THROW(cast(x, DType(99)), Error);
}

TEST(ActivationOps, ClipBoundsValidated) {
  Tensor x = Tensor::from_vector<int8_t>({-5, 0, 5}, {3});
  Value lo(Tensor::scalar<int8_t>(2)), hi(Tensor::scalar<int8_t>(1));
  Tensor y = run_op("Clip", 13, {Value(x), lo, hi})[0].tensor;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(y.data<int8_t>()[i], 1);  // min > max -> max
  Value wrong(Tensor::scalar<float>(1.0f));
  EXPECT_THROW(run_op("Clip", 13, {Value(x), wrong}), Error);
  Value not_scalar(Tensor::from_vector<int8_t>({1, 2}, {2}));
  EXPECT_THROW(run_op("Clip", 13, {Value(x), not_scalar}), Error);
  Tensor z = run_op("Clip", 13, {Value(x), Value(), hi})[0].tensor;  // omitted min
  EXPECT_EQ(z.data<int8_t>()[0], -5);
  EXPECT_EQ(z.data<int8_t>()[2], 1);
}

TEST(ActivationOps, PReluSlopeBroadcast) {
  Tensor x = Tensor::from_vector<float>({-1, 2, -3, -4, 5, -6}, {2, 3});
  Tensor s = Tensor::from_vector<float>({0.1f, 0.2f, 0.3f}, {3});
  Tensor y = run_op("PRelu", 16, {Value(x), Value(s)})[0].tensor;
  EXPECT_FLOAT_EQ(y.data<float>()[0], -0.1f);
  EXPECT_FLOAT_EQ(y.data<float>()[1], 2.0f);
  EXPECT_FLOAT_EQ(y.data<float>()[5], -1.8f);
  Tensor bad = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_THROW(run_op("PRelu", 16, {Value(x), Value(bad)}), Error);
  Tensor big = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 2, 3});
  EXPECT_THROW(run_op("PRelu", 16, {Value(x), Value(big)}), Error);  // would grow the output
}

TEST(ActivationOps, GeluRejectsUnknownApproximation) {
  Tensor x = floats({1.0f});
  EXPECT_THROW(run_op("Gelu", 20, {Value(x)}, {attr("approximate", "fast")}), Error);
  Tensor y = run_op("Gelu", 20, {Value(x)}, {attr("approximate", "tanh")})[0].tensor;
  EXPECT_NEAR(y.data<float>()[0], 0.8411920f, 1e-6f);
}

TEST(ActivationOps, ReluIntegerAndFloat16) {
  Tensor x = Tensor::from_vector<int32_t>({-3, 0, 4}, {3});
  Tensor y = run_op("Relu", 14, {Value(x)})[0].tensor;
  EXPECT_EQ(y.data<int32_t>()[0], 0);
  EXPECT_EQ(y.data<int32_t>()[2], 4);
  Tensor h = Tensor::from_vector<float16>({float16(-1.0f), float16(2.5f)}, {2});
  Tensor hy = run_op("Relu", 14, {Value(h)})[0].tensor;
  EXPECT_EQ(float(hy.data<float16>()[0]), 0.0f);
  EXPECT_EQ(float(hy.data<float16>()[1]), 2.5f);
  Tensor s(DType::String, {1});
  EXPECT_THROW(run_op("Relu", 14, {Value(s)}), Error);
}

// Swish (since opset 24): x * sigmoid(alpha * x), attribute alpha (float, default 1.0), on float32
// (the vectorized row kernel) and float64 (the reference loop): the default is x * sigmoid(x),
// alpha 0 halves x exactly, a negative alpha mirrors the sigmoid, and the op has no earlier version.
TEST(ActivationOps, SwishAlphaPerSpec) {
  const std::vector<double> xs = {-6, -1.5, -0.25, 0, 0.5, 2, 7};
  Tensor xf = floats(std::vector<float>(xs.begin(), xs.end()));
  Tensor xd = Tensor::from_vector<double>(xs, {int64_t(xs.size())});
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  for (float alpha : {1.0f, 0.0f, -0.5f, 1.5f})  // alpha * x exact in float for these x
    for (bool dbl : {false, true}) {
      std::vector<Attribute> at;
      if (alpha != 1.0f) at.push_back(attr("alpha", alpha));  // 1: the default
      Tensor y = run_op("Swish", 24, {Value(dbl ? xd : xf)}, at)[0].tensor;
      ASSERT_EQ(y.dtype(), dbl ? DType::Double : DType::Float);
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want = xs[i] * sig(double(alpha) * xs[i]);
        const double got = dbl ? y.data<double>()[i] : y.data<float>()[i];
        if (alpha == 0.0f) {
          EXPECT_EQ(got, xs[i] / 2) << (dbl ? "double" : "float") << " x " << xs[i];  // x * 0.5
        }
        // float32: the row kernel's 4e-7 relative (kernels_vec_test); float64: libm's last bits
        EXPECT_NEAR(got, want, (dbl ? 1e-15 : 4e-7) * (1e-30 + std::fabs(want)))
            << (dbl ? "double" : "float") << " alpha " << alpha << " x " << xs[i];
      }
    }
  EXPECT_THROW(run_op("Swish", 22, {Value(xf)}), Error);
}

// The worked example of docs/adding-an-op.md: Shrink's kernel, its declared shape rule and a bad
// input, each checked.
TEST(ActivationShrink, KernelShapeRuleAndBadInput) {
  Tensor x = make_tensor<float>({2, 3}, {-2.0f, -0.5f, 0.0f, 0.25f, 1.0f, 3.0f});
  Tensor y = run_op("Shrink", 9, {Value(x)}, {attr("lambd", 0.5f), attr("bias", 0.5f)})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const float want[] = {-1.5f, 0.0f, 0.0f, 0.0f, 0.5f, 2.5f};
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], want[i]) << i;
  // Integers too (all numeric types).
  Tensor xi = make_tensor<int32_t>({3}, {-3, 0, 4});
  Tensor yi = run_op("Shrink", 9, {Value(xi)}, {attr("lambd", 1.0f), attr("bias", 1.0f)})[0].tensor;
  EXPECT_EQ(yi.data<int32_t>()[0], -2);
  EXPECT_EQ(yi.data<int32_t>()[2], 3);
  // The shape rule the planner and the optimizer use says what the kernel made.
  const OpTraits* t = OpRegistry::instance().traits("", "Shrink");
  ASSERT_TRUE(t && t->shape);
  InferredValue in;
  in.state = InferredValue::State::Known;
  in.dtype = DType::Float;
  in.shape = {2, 3};
  ShapeInputs si;
  si.v = {&in};
  ShapeOutputs out(1);
  ASSERT_TRUE(t->shape(Node{}, si, out));
  EXPECT_EQ(out[0].shape, y.shape());
  EXPECT_EQ(out[0].dtype, y.dtype());
  // Bad input: a string tensor is refused with an error naming the node, not a crash.
  Tensor s(DType::String, {1});
  EXPECT_THROW(run_op("Shrink", 9, {Value(s)}), Error);
}
