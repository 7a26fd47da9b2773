// Unit tests for the indexing kernels (src/ops/indexing.cpp): edge cases the ONNX conformance
// data does not cover, especially that bad indices are clean errors.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <basalt/tensor.hpp>
#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace basalt;
using namespace basalt::test;

namespace {

template <class T>
std::vector<T> vals(const Value& v) {
  const Tensor& t = v.tensor;
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

Tensor i64(std::vector<int64_t> v, Shape s = {}) { return Tensor::from_vector<int64_t>(v, s); }
Tensor f32(std::vector<float> v, Shape s = {}) { return Tensor::from_vector<float>(v, s); }

}  // namespace

TEST(Indexing, GatherNegativeAndOutOfRange) {
  auto y = run_op("Gather", 13, {f32({1, 2, 3}), i64({-1, 0})});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{3, 1}));
  EXPECT_THROW(run_op("Gather", 13, {f32({1, 2, 3}), i64({3})}), Error);
  EXPECT_THROW(run_op("Gather", 13, {f32({1, 2, 3}), i64({-4})}), Error);
  EXPECT_THROW(run_op("Gather", 13, {f32({1, 2, 3}), i64({0})}, {attr("axis", 1)}), Error);
}

TEST(Indexing, GatherStrings) {
  Tensor s(DType::String, {3});
  s.data<std::string>()[0] = "a";
  s.data<std::string>()[1] = "b";
  s.data<std::string>()[2] = "c";
  auto y = run_op("Gather", 13, {s, i64({2, 2, 0}, {3})});
  EXPECT_EQ(vals<std::string>(y[0]), (std::vector<std::string>{"c", "c", "a"}));
}

TEST(Indexing, GatherElementsBounds) {
  EXPECT_THROW(run_op("GatherElements", 13, {f32({1, 2, 3, 4}, {2, 2}), i64({0, 2}, {1, 2})}), Error);
  // indices larger than data on a non-axis dimension
  EXPECT_THROW(run_op("GatherElements", 13, {f32({1, 2, 3, 4}, {2, 2}), i64({0, 0, 0}, {1, 3})}), Error);
  auto y = run_op("GatherElements", 13, {f32({1, 2, 3, 4}, {2, 2}), i64({1, -2}, {2, 1})}, {attr("axis", 1)});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{2, 3}));
}

TEST(Indexing, GatherNDBounds) {
  EXPECT_THROW(run_op("GatherND", 13, {f32({1, 2, 3, 4}, {2, 2}), i64({0, 5}, {1, 2})}), Error);
  EXPECT_THROW(run_op("GatherND", 13, {f32({1, 2, 3, 4}, {2, 2}), i64({0, 0, 0}, {1, 3})}), Error);
  auto y = run_op("GatherND", 13, {f32({1, 2, 3, 4}, {2, 2}), i64({1, -1}, {1, 2})});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{4}));
}

TEST(Indexing, ScatterOutOfRange) {
  EXPECT_THROW(run_op("ScatterElements", 18, {f32({1, 2, 3}), i64({3}), f32({9})}), Error);
  EXPECT_THROW(run_op("ScatterND", 18, {f32({1, 2, 3}), i64({7}, {1, 1}), f32({9})}), Error);
  EXPECT_THROW(run_op("ScatterND", 18, {f32({1, 2, 3}), i64({1}, {1, 1}), f32({9, 9})}), Error);
}

TEST(Indexing, ScatterElementsReductions) {
  auto y = run_op("ScatterElements", 18, {f32({1, 2, 3}), i64({0, 0}), f32({5, 6})}, {attr("reduction", "add")});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{12, 2, 3}));
  y = run_op("ScatterElements", 18, {f32({1, 2, 3}), i64({1, 2}), f32({5, -1})}, {attr("reduction", "min")});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{1, 2, -1}));
  EXPECT_THROW(run_op("ScatterElements", 18, {f32({1}), i64({0}), f32({1})}, {attr("reduction", "bogus")}), Error);
}

TEST(Indexing, TopKTiesAndK) {
  auto y = run_op("TopK", 11, {f32({1, 3, 3, 2, 3}), i64({3}, {1})}, {}, 2);
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{3, 3, 3}));
  EXPECT_EQ(vals<int64_t>(y[1]), (std::vector<int64_t>{1, 2, 4}));
  y = run_op("TopK", 11, {f32({2, 1, 1}), i64({2}, {1})}, {attr("largest", 0)}, 2);
  EXPECT_EQ(vals<int64_t>(y[1]), (std::vector<int64_t>{1, 2}));
  EXPECT_THROW(run_op("TopK", 11, {f32({1, 2}), i64({3}, {1})}, {}, 2), Error);
  EXPECT_THROW(run_op("TopK", 11, {f32({1, 2}), i64({-1}, {1})}, {}, 2), Error);
}

TEST(Indexing, ArgMaxSelectLast) {
  auto y = run_op("ArgMax", 13, {f32({1, 5, 5, 0})}, {attr("keepdims", 0)});
  EXPECT_EQ(vals<int64_t>(y[0]), (std::vector<int64_t>{1}));
  y = run_op("ArgMax", 13, {f32({1, 5, 5, 0})}, {attr("keepdims", 0), attr("select_last_index", 1)});
  EXPECT_EQ(vals<int64_t>(y[0]), (std::vector<int64_t>{2}));
  y = run_op("ArgMin", 13, {f32({0, 5, 0, 1})}, {attr("select_last_index", 1)});
  EXPECT_EQ(vals<int64_t>(y[0]), (std::vector<int64_t>{2}));
}

TEST(Indexing, UniqueUnsorted) {
  auto y = run_op("Unique", 11, {f32({2, 1, 1, 3, 4, 3})}, {attr("sorted", 0)}, 4);
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{2, 1, 3, 4}));
  EXPECT_EQ(vals<int64_t>(y[1]), (std::vector<int64_t>{0, 1, 3, 4}));
  EXPECT_EQ(vals<int64_t>(y[2]), (std::vector<int64_t>{0, 1, 1, 2, 3, 2}));
  EXPECT_EQ(vals<int64_t>(y[3]), (std::vector<int64_t>{1, 2, 2, 1}));
}

TEST(Indexing, OneHotOutOfRangeIsOff) {
  auto y = run_op("OneHot", 11, {i64({-1, 5}, {2}), i64({3}), f32({0, 1}, {2})});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{0, 0, 1, 0, 0, 0}));
}

TEST(Indexing, CompressAndNonZero) {
  Tensor c = Tensor::from_vector<bool>({false, true, true}, {3});
  auto y = run_op("Compress", 11, {f32({1, 2, 3}), c});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{2, 3}));
  Tensor c2 = Tensor::from_vector<bool>({false, true, true, true}, {4});
  EXPECT_THROW(run_op("Compress", 11, {f32({1, 2, 3}), c2}, {attr("axis", 0)}), Error);
  y = run_op("NonZero", 13, {f32({0, 1, 0, 2}, {2, 2})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{2, 2}));
  EXPECT_EQ(vals<int64_t>(y[0]), (std::vector<int64_t>{0, 1, 1, 1}));
}

TEST(Indexing, ReverseSequenceBadLength) {
  EXPECT_THROW(run_op("ReverseSequence", 10, {f32({1, 2, 3, 4}, {2, 2}), i64({3, 1}, {2})}), Error);
  auto y = run_op("ReverseSequence", 10, {f32({1, 2, 3, 4}, {2, 2}), i64({2, 1}, {2})},
                  {attr("batch_axis", 0), attr("time_axis", 1)});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{2, 1, 3, 4}));
}

TEST(Indexing, CumSumExclusiveReverse) {
  auto y = run_op("CumSum", 14, {f32({1, 2, 3}), i64({0})}, {attr("exclusive", 1), attr("reverse", 1)});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{5, 3, 0}));
}

TEST(Indexing, TensorScatterCircularAndBounds) {
  // past [1, 4, 1], update [1, 2, 1] written at 3 circularly -> positions 3, 0
  auto y = run_op("TensorScatter", 24, {f32({0, 0, 0, 0}, {1, 4, 1}), f32({7, 8}, {1, 2, 1}), i64({3}, {1})},
                  {attr("axis", 1), attr("mode", "circular")});
  EXPECT_EQ(vals<float>(y[0]), (std::vector<float>{8, 0, 0, 7}));
  EXPECT_THROW(run_op("TensorScatter", 24, {f32({0, 0, 0, 0}, {1, 4, 1}), f32({7, 8}, {1, 2, 1}), i64({3}, {1})},
                      {attr("axis", 1)}),
               Error);
}
