// Unit tests for the tensor group's kernels (src/ops/tensor.cpp): validation errors and edge
// cases the ONNX conformance data does not cover.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor tf(std::vector<float> v, Shape s) { return Tensor::from_vector<float>(v, s); }
Tensor ti1(std::vector<int64_t> v) { return Tensor::from_vector<int64_t>(v, {int64_t(v.size())}); }

std::vector<int64_t> iv(const Tensor& t) { return t.to_int64_vector(); }

Tensor iota(Shape s) {
  Tensor t(DType::Int64, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<int64_t>()[i] = i;
  return t;
}

}  // namespace

TEST(TensorOps, ReshapeIsAViewAndInfersMinusOne) {
  Tensor x = iota({2, 3, 4});
  auto y = run_op("Reshape", 14, {x, ti1({0, -1})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{2, 12}));
  EXPECT_EQ(y[0].tensor.raw(), x.raw());
}

TEST(TensorOps, ReshapeErrors) {
  Tensor x = iota({2, 3});
  EXPECT_THROW(run_op("Reshape", 14, {x, ti1({-1, -1})}), Error);
  EXPECT_THROW(run_op("Reshape", 14, {x, ti1({4, 2})}), Error);
  EXPECT_THROW(run_op("Reshape", 14, {x, ti1({1, 1, 0})}), Error);  // 0 past input rank
  EXPECT_THROW(run_op("Reshape", 14, {x, ti1({-2, 3})}), Error);
  EXPECT_THROW(run_op("Reshape", 14, {iota({0, 3}), ti1({0, -1})}, {attr("allowzero", 1)}), Error);
  auto y = run_op("Reshape", 14, {iota({0, 3}), ti1({3, 0})}, {attr("allowzero", 1)});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{3, 0}));
  auto z = run_op("Reshape", 1, {x}, {attr("shape", Ints{3, -1})});
  EXPECT_EQ(z[0].tensor.shape(), (Shape{3, 2}));
}

TEST(TensorOps, SqueezeUnsqueezeValidation) {
  Tensor x = iota({1, 3, 1});
  EXPECT_EQ(run_op("Squeeze", 13, {x})[0].tensor.shape(), (Shape{3}));
  EXPECT_EQ(run_op("Squeeze", 13, {x, ti1({-1})})[0].tensor.shape(), (Shape{1, 3}));
  EXPECT_THROW(run_op("Squeeze", 13, {x, ti1({1})}), Error);
  EXPECT_THROW(run_op("Squeeze", 11, {x}, {attr("axes", Ints{3})}), Error);
  EXPECT_EQ(run_op("Unsqueeze", 13, {iota({3}), ti1({-1, 0})})[0].tensor.shape(), (Shape{1, 3, 1}));
  EXPECT_THROW(run_op("Unsqueeze", 13, {iota({3}), ti1({0, 0})}), Error);
  EXPECT_THROW(run_op("Unsqueeze", 11, {iota({3})}, {attr("axes", Ints{5})}), Error);
}

TEST(TensorOps, TransposeAndErrors) {
  auto y = run_op("Transpose", 13, {iota({2, 3})}, {attr("perm", Ints{1, 0})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{3, 2}));
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(run_op("Transpose", 13, {iota({2, 3})}, {attr("perm", Ints{0, 0})}), Error);
  EXPECT_THROW(run_op("Transpose", 13, {iota({2, 3})}, {attr("perm", Ints{0})}), Error);
}

TEST(TensorOps, ConcatStringsAndErrors) {
  Tensor a(DType::String, {1, 2}), b(DType::String, {1, 1});
  a.data<std::string>()[0] = "a";
  a.data<std::string>()[1] = "b";
  b.data<std::string>()[0] = "c";
  auto y = run_op("Concat", 13, {a, b}, {attr("axis", -1)});
  ASSERT_EQ(y[0].tensor.shape(), (Shape{1, 3}));
  EXPECT_EQ(y[0].tensor.data<std::string>()[2], "c");
  EXPECT_THROW(run_op("Concat", 13, {a, b}, {attr("axis", 0)}), Error);
  EXPECT_THROW(run_op("Concat", 13, {a, a}, {attr("axis", 2)}), Error);
  EXPECT_THROW(run_op("Concat", 13, {a, Value(iota({1, 1}))}, {attr("axis", 1)}), Error);
}

TEST(TensorOps, SplitForms) {
  auto y = run_op("Split", 18, {iota({7})}, {attr("num_outputs", 3)}, 3);
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(iv(y[2].tensor), (std::vector<int64_t>{6}));
  EXPECT_THROW(run_op("Split", 13, {iota({7})}, {}, 3), Error);               // uneven, no split
  EXPECT_THROW(run_op("Split", 13, {iota({7}), ti1({3, 3})}, {}, 2), Error);  // wrong sum
  auto z = run_op("Split", 11, {iota({1, 2})}, {attr("split", Ints{0, 2}), attr("axis", -1)}, 2);
  EXPECT_EQ(z[0].tensor.shape(), (Shape{1, 0}));
  EXPECT_EQ(iv(z[1].tensor), (std::vector<int64_t>{0, 1}));
}

TEST(TensorOps, SliceClampingAndNegativeSteps) {
  Tensor x = iota({5});
  auto y = run_op("Slice", 13, {x, ti1({INT64_MAX}), ti1({INT64_MIN}), ti1({0}), ti1({-2})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{4, 2, 0}));
  y = run_op("Slice", 13, {x, ti1({-100}), ti1({100})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  y = run_op("Slice", 13, {x, ti1({3}), ti1({1})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{0}));
  y = run_op("Slice", 13, {x, ti1({-1}), ti1({-6}), Value(), ti1({-1})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{4, 3, 2, 1, 0}));
  EXPECT_THROW(run_op("Slice", 13, {x, ti1({0}), ti1({2}), ti1({0}), ti1({0})}), Error);
  EXPECT_THROW(run_op("Slice", 13, {x, ti1({0}), ti1({2}), ti1({1})}), Error);
  EXPECT_THROW(run_op("Slice", 13, {x, ti1({0, 0}), ti1({2})}), Error);
  y = run_op("Slice", 1, {x}, {attr("starts", Ints{1}), attr("ends", Ints{3})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{1, 2}));
}

TEST(TensorOps, PadModes) {
  Tensor x = iota({3});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return iv(run_op("Pad", 19, {x, ti1(pads)}, {attr("mode", mode)})[0].tensor);
  };
  EXPECT_EQ(pad("constant", {2, 1}), (std::vector<int64_t>{0, 0, 0, 1, 2, 0}));
  EXPECT_EQ(pad("reflect", {2, 2}), (std::vector<int64_t>{2, 1, 0, 1, 2, 1, 0}));
  EXPECT_EQ(pad("edge", {2, 1}), (std::vector<int64_t>{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(pad("wrap", {2, 1}), (std::vector<int64_t>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<int64_t>{1, 2, 0}));
  auto c = run_op("Pad", 18, {x, ti1({1, 0}), Tensor::scalar<int64_t>(9)});
  EXPECT_EQ(iv(c[0].tensor), (std::vector<int64_t>{9, 0, 1, 2}));
  EXPECT_THROW(run_op("Pad", 18, {x, ti1({1})}), Error);
  EXPECT_THROW(run_op("Pad", 18, {x, ti1({-2, -2})}), Error);
  EXPECT_THROW(run_op("Pad", 18, {iota({0}), ti1({1, 1})}, {attr("mode", "edge")}), Error);
  EXPECT_THROW(run_op("Pad", 18, {x, ti1({1, 1})}, {attr("mode", "bogus")}), Error);
}

TEST(TensorOps, ExpandTileRange) {
  auto e = run_op("Expand", 13, {iota({3, 1}), ti1({2, 1, 2})});
  EXPECT_EQ(e[0].tensor.shape(), (Shape{2, 3, 2}));
  EXPECT_THROW(run_op("Expand", 13, {iota({3}), ti1({2})}), Error);
  EXPECT_THROW(run_op("Expand", 13, {iota({3}), ti1({-1})}), Error);
  auto t = run_op("Tile", 13, {iota({2}), ti1({3})});
  EXPECT_EQ(iv(t[0].tensor), (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_THROW(run_op("Tile", 13, {iota({2}), ti1({3, 1})}), Error);
  auto r = run_op("Range", 11, {Tensor::scalar<int32_t>(10), Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(-3)});
  EXPECT_EQ(iv(r[0].tensor), (std::vector<int64_t>{10, 7, 4}));
  EXPECT_THROW(run_op("Range", 11, {Tensor::scalar<int32_t>(0), Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(0)}), Error);
  auto f = run_op("Range", 11, {Tensor::scalar<float>(0), Tensor::scalar<float>(1), Tensor::scalar<float>(0.25f)});
  EXPECT_EQ(f[0].tensor.shape(), (Shape{4}));
}

TEST(TensorOps, CenterCropPadTriluFlatten) {
  auto c = run_op("CenterCropPad", 18, {iota({5}), ti1({3})});
  EXPECT_EQ(iv(c[0].tensor), (std::vector<int64_t>{1, 2, 3}));
  c = run_op("CenterCropPad", 18, {iota({2}), ti1({5})});
  EXPECT_EQ(iv(c[0].tensor), (std::vector<int64_t>{0, 0, 1, 0, 0}));
  auto t = run_op("Trilu", 14, {iota({2, 2})}, {attr("upper", 0)});
  EXPECT_EQ(iv(t[0].tensor), (std::vector<int64_t>{0, 0, 2, 3}));
  EXPECT_THROW(run_op("Trilu", 14, {iota({3})}), Error);
  EXPECT_EQ(run_op("Flatten", 13, {iota({2, 3})}, {attr("axis", 0)})[0].tensor.shape(), (Shape{1, 6}));
  EXPECT_THROW(run_op("Flatten", 13, {iota({2, 3})}, {attr("axis", 3)}), Error);
  auto s = run_op("Shape", 15, {iota({2, 3})}, {attr("start", -1)});
  EXPECT_EQ(iv(s[0].tensor), (std::vector<int64_t>{3}));
}

TEST(TensorOps, DropoutInferenceIsPassThrough) {
  Tensor x = tf({1, 2, 3}, {3});
  auto y = run_op("Dropout", 13, {x}, {}, 2);
  EXPECT_EQ(y[0].tensor.raw(), x.raw());
  ASSERT_EQ(y[1].tensor.dtype(), DType::Bool);
  EXPECT_TRUE(y[1].tensor.data<bool>()[2]);
}

TEST(TensorOps, OverflowingShapesAreErrors) {
  Tensor x = iota({4});
  int64_t big = (int64_t(1) << 62) + 1;
  EXPECT_THROW(run_op("Reshape", 14, {x, ti1({big, 4})}), Error);
  EXPECT_THROW(run_op("ConstantOfShape", 9, {ti1({int64_t(1) << 32, int64_t(1) << 32})}), Error);
  EXPECT_THROW(run_op("Tile", 13, {iota({2, 2}), ti1({int64_t(1) << 32, int64_t(1) << 32})}), Error);
  EXPECT_THROW(run_op("Pad", 13, {x, ti1({INT64_MAX, INT64_MAX})}), Error);
  EXPECT_THROW(run_op("Expand", 13, {x, ti1({int64_t(1) << 62, 1})}), Error);
}
