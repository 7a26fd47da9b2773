// Unit tests for the reduce group's kernels (src/ops/reduce.cpp): edge cases the ONNX
// conformance data does not cover (validation errors, integer exactness, einsum forms).
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor ft(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }
Tensor it(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, s); }

std::vector<float> fv(const Tensor& t) {
  std::vector<float> r(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) r[size_t(i)] = float(t.get_double(i));
  return r;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b, float tol = 1e-5f) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

}  // namespace

TEST(ReduceOps, SumAxesInputKeepdims0) {
  auto y = run_op("ReduceSum", 13, {ft({1, 2, 3, 4, 5, 6}, {2, 3}), it({1}, {1})}, {attr("keepdims", 0)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{2}));
  expect_near(fv(y), {6, 15});
}

TEST(ReduceOps, SumOldAxesAttribute) {
  auto y = run_op("ReduceSum", 11, {ft({1, 2, 3, 4, 5, 6}, {2, 3})}, {attr("axes", Ints{0})})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 3}));
  expect_near(fv(y), {5, 7, 9});
}

TEST(ReduceOps, Int64SumIsExact) {
  int64_t big = (int64_t(1) << 53) + 1;
  auto y = run_op("ReduceSum", 13, {it({big, 1}, {2})}, {attr("keepdims", 0)})[0].tensor;
  EXPECT_EQ(y.data<int64_t>()[0], big + 1);
}

TEST(ReduceOps, EmptyReductionsGiveIdentity) {
  Tensor x(DType::Float, {2, 0});
  auto mx = run_op("ReduceMax", 18, {x, it({1}, {1})}, {attr("keepdims", 0)})[0].tensor;
  ASSERT_EQ(mx.shape(), (Shape{2}));
  EXPECT_TRUE(std::isinf(mx.data<float>()[0]) && mx.data<float>()[0] < 0);
  auto mn = run_op("ReduceMin", 18, {x, it({1}, {1})}, {attr("keepdims", 0)})[0].tensor;
  EXPECT_TRUE(std::isinf(mn.data<float>()[0]) && mn.data<float>()[0] > 0);
  auto pr = run_op("ReduceProd", 18, {x, it({1}, {1})})[0].tensor;
  EXPECT_EQ(pr.shape(), (Shape{2, 1}));
  expect_near(fv(pr), {1, 1});
  auto sm = run_op("ReduceSum", 13, {x})[0].tensor;
  EXPECT_EQ(sm.shape(), (Shape{1, 1}));
  expect_near(fv(sm), {0});
}

TEST(ReduceOps, NoopWithEmptyAxes) {
  auto y = run_op("ReduceSumSquare", 18, {ft({1, -2, 3}, {3}), it({}, {0})}, {attr("noop_with_empty_axes", 1)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{3}));
  expect_near(fv(y), {1, 4, 9});
  auto s = run_op("ReduceSum", 13, {ft({1, -2, 3}, {3})}, {attr("noop_with_empty_axes", 1)})[0].tensor;
  expect_near(fv(s), {1, -2, 3});
}

TEST(ReduceOps, BadAxesAreErrors) {
  EXPECT_THROW(run_op("ReduceSum", 13, {ft({1, 2}, {2}), it({1}, {1})}), Error);
  EXPECT_THROW(run_op("ReduceMean", 18, {ft({1, 2, 3, 4}, {2, 2}), it({0, -2}, {2})}), Error);
  EXPECT_THROW(run_op("ReduceMean", 11, {ft({1, 2, 3, 4}, {2, 2})}, {attr("axes", Ints{-3})}), Error);
}

TEST(ReduceOps, LogSumExpIsStable) {
  auto y = run_op("ReduceLogSumExp", 18, {ft({1000, 1000}, {2})}, {attr("keepdims", 0)})[0].tensor;
  expect_near(fv(y), {1000.f + std::log(2.f)}, 1e-3f);
}

TEST(ReduceOps, BoolMaxMin) {
  Tensor b = Tensor::from_vector<bool>({true, false, false, false}, {2, 2});
  auto mx = run_op("ReduceMax", 20, {b, it({1}, {1})}, {attr("keepdims", 0)})[0].tensor;
  EXPECT_TRUE(mx.data<bool>()[0]);
  EXPECT_FALSE(mx.data<bool>()[1]);
  EXPECT_THROW(run_op("ReduceSum", 13, {b}), Error);
}

TEST(ReduceSoftmax, OldOpsetFlattens) {
  // opset 11, axis=1 on [1,2,2]: normalizes over all 4 values.
  auto y = run_op("Softmax", 11, {ft({0, 0, 0, 0}, {1, 2, 2})})[0].tensor;
  expect_near(fv(y), {0.25f, 0.25f, 0.25f, 0.25f});
  auto z = run_op("Softmax", 13, {ft({0, 0, 0, 0}, {1, 2, 2})}, {attr("axis", 1)})[0].tensor;
  expect_near(fv(z), {0.5f, 0.5f, 0.5f, 0.5f});
}

TEST(ReduceSoftmax, HardmaxFirstMaxWins) {
  auto y = run_op("Hardmax", 13, {ft({3, 1, 3, 2}, {4})})[0].tensor;
  expect_near(fv(y), {1, 0, 0, 0});
}

TEST(ReduceSoftmax, BadAxisIsError) {
  EXPECT_THROW(run_op("LogSoftmax", 13, {ft({1, 2}, {1, 2})}, {attr("axis", 2)}), Error);
}

TEST(ReduceEinsum, ImplicitMatmul) {
  auto y = run_op("Einsum", 12, {ft({1, 2, 3, 4}, {2, 2}), ft({5, 6, 7, 8}, {2, 2})}, {attr("equation", "ij,jk")})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  expect_near(fv(y), {19, 22, 43, 50});
}

TEST(ReduceEinsum, BatchDiagonalWithEllipsis) {
  auto y = run_op("Einsum", 12, {ft({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2})}, {attr("equation", "...ii->...i")})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{2, 2}));
  expect_near(fv(y), {1, 4, 5, 8});
}

TEST(ReduceEinsum, TraceAndBroadcast) {
  auto tr = run_op("Einsum", 12, {ft({1, 2, 3, 4}, {2, 2})}, {attr("equation", "ii")})[0].tensor;
  EXPECT_EQ(tr.shape(), (Shape{}));
  expect_near(fv(tr), {5});
  auto y = run_op("Einsum", 12, {ft({1, 2, 3, 4, 5, 6}, {2, 3}), ft({1, 1, 1}, {3})}, {attr("equation", "...j,j->...")})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{2}));
  expect_near(fv(y), {6, 15});
  auto b = run_op("Einsum", 12, {ft({1, 2, 3, 4}, {2, 2}), ft({1, 1}, {1, 2})}, {attr("equation", "...i,...i->...")})[0].tensor;
  EXPECT_EQ(b.shape(), (Shape{2}));
  expect_near(fv(b), {3, 7});
}

TEST(ReduceEinsum, Errors) {
  EXPECT_THROW(run_op("Einsum", 12, {ft({1, 2, 3, 4, 5, 6}, {2, 3}), ft({1, 2}, {2, 1})}, {attr("equation", "ij,jk->ik")}), Error);
  EXPECT_THROW(run_op("Einsum", 12, {ft({1, 2}, {2})}, {attr("equation", "ij->i")}), Error);
  EXPECT_THROW(run_op("Einsum", 12, {ft({1, 2}, {2})}, {attr("equation", "i1->i")}), Error);
  EXPECT_THROW(run_op("Einsum", 12, {ft({1, 2}, {1, 2})}, {attr("equation", "ij->k")}), Error);
}

TEST(ReduceDet, PivotingAndBatch) {
  auto y = run_op("Det", 11, {ft({0, 1, 1, 0, 2, 0, 0, 3, 1, 2, 2, 4}, {3, 2, 2})})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{3}));
  expect_near(fv(y), {-1, 6, 0});
  EXPECT_THROW(run_op("Det", 11, {ft({1, 2, 3, 4, 5, 6}, {2, 3})}), Error);
}

TEST(ReduceNorms, LayerNormOutputs) {
  auto o = run_op("LayerNormalization", 17, {ft({1, 3, 0, 4}, {2, 2}), ft({1, 1}, {2})}, {attr("epsilon", 0.0f)}, 3);
  expect_near(fv(o[0].tensor), {-1, 1, -1, 1});
  EXPECT_EQ(o[1].tensor.shape(), (Shape{2, 1}));
  expect_near(fv(o[1].tensor), {2, 2});
}

TEST(ReduceNorms, GroupNormOpset18PerGroup) {
  // C=4, 2 groups, per-group scale [1, 2], bias [0, 10]
  auto y = run_op("GroupNormalization", 18, {ft({1, 3, 4, 6}, {1, 4}), ft({1, 2}, {2}), ft({0, 10}, {2})},
                  {attr("num_groups", 2), attr("epsilon", 0.0f)})[0].tensor;
  expect_near(fv(y), {-1, 1, 8, 12});
  EXPECT_THROW(run_op("GroupNormalization", 18, {ft({1, 3, 5, 5}, {1, 4}), ft({1, 2, 3}, {3}), ft({0, 1, 2}, {3})},
                      {attr("num_groups", 3)}),
               Error);
}

TEST(ReduceLosses, NllTargetOutOfRangeIsError) {
  EXPECT_THROW(run_op("NegativeLogLikelihoodLoss", 13, {ft({-1, -2}, {1, 2}), it({2}, {1})}), Error);
  auto y = run_op("NegativeLogLikelihoodLoss", 13, {ft({-1, -2, -3, -4}, {2, 2}), it({2, 1}, {2})}, {attr("ignore_index", 2)})[0].tensor;
  expect_near(fv(y), {4});
}

TEST(ReduceNorms, LpNormalization) {
  auto y = run_op("LpNormalization", 1, {ft({3, 4, 0, 0}, {2, 2})}, {attr("p", 2)})[0].tensor;
  expect_near(fv(y), {0.6f, 0.8f, 0, 0});
  auto z = run_op("LpNormalization", 22, {ft({1, 2, 3, 2}, {2, 2})}, {attr("p", 1), attr("axis", 0)})[0].tensor;
  expect_near(fv(z), {0.25f, 0.5f, 0.75f, 0.5f});
}

TEST(ReduceNorms, BatchNormInference) {
  auto y = run_op("BatchNormalization", 15, {ft({1, 2, 3, 4}, {1, 2, 2}), ft({2, 1}, {2}), ft({0, 1}, {2}), ft({1, 3}, {2}), ft({1, 4}, {2})},
                  {attr("epsilon", 0.0f)})[0].tensor;
  expect_near(fv(y), {0, 2, 1, 1.5f});
}
