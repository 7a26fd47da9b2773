// Unit tests for the attention group's kernels (src/ops/attention.cpp): small hand-computed
// cases and the validation errors the ONNX conformance data does not cover.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor attn_f(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }

ErrorCode attn_error_code(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::Internal;  // no error: the tests expect one
}

}  // namespace

TEST(AttentionOps, AttentionSmallHandComputed) {
  // One head, one query, two keys: scores = q.k * (1/sqrt(2)).
  Tensor Q = attn_f({1, 0}, {1, 1, 1, 2});
  Tensor K = attn_f({1, 0, 0, 1}, {1, 1, 2, 2});
  Tensor V = attn_f({10, 20}, {1, 1, 2, 1});
  Tensor Y = run_op("Attention", 23, {Value(Q), Value(K), Value(V)})[0].tensor;
  ASSERT_EQ(Y.shape(), (Shape{1, 1, 1, 1}));
  double s0 = 1.0 / std::sqrt(2.0);
  double p0 = std::exp(s0) / (std::exp(s0) + 1.0);
  EXPECT_NEAR(Y.data<float>()[0], p0 * 10 + (1 - p0) * 20, 1e-4);
}

TEST(AttentionOps, AttentionFullyMaskedRowIsZero) {
  Tensor Q = attn_f({1, 0}, {1, 1, 1, 2});
  Tensor K = attn_f({1, 0, 0, 1}, {1, 1, 2, 2});
  Tensor V = attn_f({10, 20}, {1, 1, 2, 1});
  Tensor M = Tensor::from_vector<bool>({false, false}, {1, 2});
  auto outs = run_op("Attention", 23, {Value(Q), Value(K), Value(V), Value(M)}, {attr("qk_matmul_output_mode", 3)}, 4);
  EXPECT_EQ(outs[0].tensor.data<float>()[0], 0.0f);
  EXPECT_EQ(outs[3].tensor.data<float>()[0], 0.0f);
  EXPECT_EQ(outs[3].tensor.data<float>()[1], 0.0f);
}

TEST(AttentionOps, AttentionShortMaskIsPadded) {
  // A mask covering only the first key masks the second one.
  Tensor Q = attn_f({1, 0}, {1, 1, 1, 2});
  Tensor K = attn_f({1, 0, 0, 1}, {1, 1, 2, 2});
  Tensor V = attn_f({10, 20}, {1, 1, 2, 1});
  Tensor M = attn_f({0}, {1, 1});
  Tensor Y = run_op("Attention", 23, {Value(Q), Value(K), Value(V), Value(M)})[0].tensor;
  EXPECT_NEAR(Y.data<float>()[0], 10.0f, 1e-5);
}

TEST(AttentionOps, AttentionValidation) {
  Tensor Q = attn_f(std::vector<float>(3 * 2, 0.5f), {1, 3, 1, 2});
  Tensor K = attn_f(std::vector<float>(2 * 2, 0.5f), {1, 2, 1, 2});
  Tensor V = attn_f(std::vector<float>(2, 0.5f), {1, 2, 1, 1});
  // 3 query heads cannot share 2 key/value heads.
  EXPECT_EQ(attn_error_code([&] { run_op("Attention", 23, {Value(Q), Value(K), Value(V)}); }), ErrorCode::InvalidArgument);
  // Mask longer than the key sequence.
  Tensor Q1 = attn_f({1, 0}, {1, 1, 1, 2});
  Tensor K1 = attn_f({1, 0}, {1, 1, 1, 2});
  Tensor V1 = attn_f({1}, {1, 1, 1, 1});
  Tensor M = attn_f({0, 0, 0}, {1, 3});
  EXPECT_EQ(attn_error_code([&] { run_op("Attention", 23, {Value(Q1), Value(K1), Value(V1), Value(M)}); }), ErrorCode::InvalidArgument);
  // 3-D inputs without head counts.
  Tensor Q3 = attn_f({1, 0}, {1, 1, 2});
  EXPECT_EQ(attn_error_code([&] { run_op("Attention", 23, {Value(Q3), Value(Q3), Value(Q3)}); }), ErrorCode::InvalidModel);
  // Bad qk_matmul_output_mode.
  EXPECT_EQ(attn_error_code([&] { run_op("Attention", 23, {Value(Q1), Value(K1), Value(V1)}, {attr("qk_matmul_output_mode", 7)}); }),
            ErrorCode::InvalidModel);
}

TEST(AttentionOps, RotaryEmbeddingValidation) {
  Tensor X = attn_f(std::vector<float>(4, 1.0f), {1, 1, 1, 4});
  Tensor C = attn_f(std::vector<float>(2 * 2, 1.0f), {2, 2});
  Tensor P = Tensor::from_vector<int64_t>({5}, {1, 1});
  EXPECT_EQ(attn_error_code([&] { run_op("RotaryEmbedding", 23, {Value(X), Value(C), Value(C), Value(P)}); }), ErrorCode::InvalidArgument);
  // Rotation by 90 degrees: cos 0, sin 1 -> (x1, x2) -> (-x2, x1).
  Tensor X2 = attn_f({1, 2, 3, 4}, {1, 1, 1, 4});
  Tensor C0 = attn_f({0, 0}, {1, 2});
  Tensor S1 = attn_f({1, 1}, {1, 2});
  Tensor P0 = Tensor::from_vector<int64_t>({0}, {1, 1});
  Tensor Y = run_op("RotaryEmbedding", 23, {Value(X2), Value(C0), Value(S1), Value(P0)})[0].tensor;
  EXPECT_FLOAT_EQ(Y.data<float>()[0], -3);
  EXPECT_FLOAT_EQ(Y.data<float>()[1], -4);
  EXPECT_FLOAT_EQ(Y.data<float>()[2], 1);
  EXPECT_FLOAT_EQ(Y.data<float>()[3], 2);
}

TEST(AttentionOps, CumProdExclusiveReverse) {
  Tensor X = attn_f({1, 2, 3, 4}, {4});
  Tensor A = Tensor::scalar<int64_t>(0);
  Tensor Y = run_op("CumProd", 26, {Value(X), Value(A)}, {attr("exclusive", 1), attr("reverse", 1)})[0].tensor;
  EXPECT_FLOAT_EQ(Y.data<float>()[0], 24);
  EXPECT_FLOAT_EQ(Y.data<float>()[1], 12);
  EXPECT_FLOAT_EQ(Y.data<float>()[2], 4);
  EXPECT_FLOAT_EQ(Y.data<float>()[3], 1);
  Tensor bad = Tensor::scalar<int64_t>(3);
  Tensor X2 = attn_f({1, 2}, {2});
  EXPECT_EQ(attn_error_code([&] { run_op("CumProd", 26, {Value(X2), Value(bad)}); }), ErrorCode::InvalidArgument);
}

TEST(AttentionOps, BitCast) {
  Tensor X = attn_f({1.0f}, {1});
  Tensor Y = run_op("BitCast", 26, {Value(X)}, {attr("to", int64_t(DType::Int32))})[0].tensor;
  EXPECT_EQ(Y.dtype(), DType::Int32);
  EXPECT_EQ(Y.data<int32_t>()[0], 0x3f800000);
  EXPECT_EQ(attn_error_code([&] { run_op("BitCast", 26, {Value(X)}, {attr("to", int64_t(DType::Int64))}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(attn_error_code([&] { run_op("BitCast", 26, {Value(X)}, {attr("to", int64_t(DType::String))}); }),
            ErrorCode::InvalidModel);
}

TEST(AttentionOps, SwiGLU) {
  Tensor A = attn_f({0, 1}, {2});
  Tensor B = attn_f({5, 2}, {2});
  Tensor Y = run_op("SwiGLU", 28, {Value(A), Value(B)})[0].tensor;
  EXPECT_FLOAT_EQ(Y.data<float>()[0], 0);
  EXPECT_NEAR(Y.data<float>()[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

TEST(AttentionOps, LinearAttention) {
  // linear rule, one head, d_k = d_v = 1: state accumulates k*v, output = scale * q * state.
  Tensor Q = attn_f({1, 1}, {1, 2, 1});
  Tensor K = attn_f({2, 3}, {1, 2, 1});
  Tensor V = attn_f({1, 1}, {1, 2, 1});
  std::vector<Attribute> at{attr("q_num_heads", 1), attr("kv_num_heads", 1), attr("update_rule", "linear")};
  auto outs = run_op("LinearAttention", 27, {Value(Q), Value(K), Value(V)}, at, 2);
  EXPECT_FLOAT_EQ(outs[0].tensor.data<float>()[0], 2);
  EXPECT_FLOAT_EQ(outs[0].tensor.data<float>()[1], 5);
  EXPECT_FLOAT_EQ(outs[1].tensor.data<float>()[0], 5);
  // gated rule without decay input.
  std::vector<Attribute> gated{attr("q_num_heads", 1), attr("kv_num_heads", 1), attr("update_rule", "gated")};
  EXPECT_EQ(attn_error_code([&] { run_op("LinearAttention", 27, {Value(Q), Value(K), Value(V)}, gated, 2); }), ErrorCode::InvalidArgument);
  std::vector<Attribute> badheads{attr("q_num_heads", 3), attr("kv_num_heads", 2)};
  EXPECT_EQ(attn_error_code([&] { run_op("LinearAttention", 27, {Value(Q), Value(K), Value(V)}, badheads, 2); }), ErrorCode::InvalidModel);
}
