// Unit tests for the tensor group's kernels (src/ops/tensor.cpp): validation errors and edge
// cases the ONNX conformance data does not cover.
#include "ops/kernel.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <climits>
#include <string>
#include <vector>

using namespace basalt;

namespace {

Attribute tattr_i(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Int;
  a.i = v;
  return a;
}
Attribute tattr_ints(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute tattr_s(const std::string& name, const std::string& v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::String;
  a.s = v;
  return a;
}

std::vector<Value> trun(const std::string& op, int opset, std::vector<Attribute> attrs, std::vector<Value> inputs,
                        int num_outputs = 1) {
  Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = opset;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i].is_none() ? -1 : int(i));
  for (int i = 0; i < num_outputs; ++i) n.outputs.push_back(100 + i);
  const KernelFactory* f = OpRegistry::instance().find("", op, opset);
  if (!f) throw Error(ErrorCode::Unsupported, "no kernel for " + op);
  n.kernel = (*f)(n);
  std::vector<const Value*> ins;
  for (auto& v : inputs) ins.push_back(v.is_none() ? nullptr : &v);
  std::vector<Value> outs(static_cast<size_t>(num_outputs));
  std::vector<const Value*> impl;
  RunContext rc;
  KernelContext ctx(n, ins, outs, impl, rc);
  n.kernel->compute(ctx);
  return outs;
}

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
  auto y = trun("Reshape", 14, {}, {x, ti1({0, -1})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{2, 12}));
  EXPECT_EQ(y[0].tensor.raw(), x.raw());
}

TEST(TensorOps, ReshapeErrors) {
  Tensor x = iota({2, 3});
  EXPECT_THROW(trun("Reshape", 14, {}, {x, ti1({-1, -1})}), Error);
  EXPECT_THROW(trun("Reshape", 14, {}, {x, ti1({4, 2})}), Error);
  EXPECT_THROW(trun("Reshape", 14, {}, {x, ti1({1, 1, 0})}), Error);  // 0 past input rank
  EXPECT_THROW(trun("Reshape", 14, {}, {x, ti1({-2, 3})}), Error);
  EXPECT_THROW(trun("Reshape", 14, {tattr_i("allowzero", 1)}, {iota({0, 3}), ti1({0, -1})}), Error);
  auto y = trun("Reshape", 14, {tattr_i("allowzero", 1)}, {iota({0, 3}), ti1({3, 0})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{3, 0}));
  auto z = trun("Reshape", 1, {tattr_ints("shape", {3, -1})}, {x});
  EXPECT_EQ(z[0].tensor.shape(), (Shape{3, 2}));
}

TEST(TensorOps, SqueezeUnsqueezeValidation) {
  Tensor x = iota({1, 3, 1});
  EXPECT_EQ(trun("Squeeze", 13, {}, {x})[0].tensor.shape(), (Shape{3}));
  EXPECT_EQ(trun("Squeeze", 13, {}, {x, ti1({-1})})[0].tensor.shape(), (Shape{1, 3}));
  EXPECT_THROW(trun("Squeeze", 13, {}, {x, ti1({1})}), Error);
  EXPECT_THROW(trun("Squeeze", 11, {tattr_ints("axes", {3})}, {x}), Error);
  EXPECT_EQ(trun("Unsqueeze", 13, {}, {iota({3}), ti1({-1, 0})})[0].tensor.shape(), (Shape{1, 3, 1}));
  EXPECT_THROW(trun("Unsqueeze", 13, {}, {iota({3}), ti1({0, 0})}), Error);
  EXPECT_THROW(trun("Unsqueeze", 11, {tattr_ints("axes", {5})}, {iota({3})}), Error);
}

TEST(TensorOps, TransposeAndErrors) {
  auto y = trun("Transpose", 13, {tattr_ints("perm", {1, 0})}, {iota({2, 3})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{3, 2}));
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{0, 3, 1, 4, 2, 5}));
  EXPECT_THROW(trun("Transpose", 13, {tattr_ints("perm", {0, 0})}, {iota({2, 3})}), Error);
  EXPECT_THROW(trun("Transpose", 13, {tattr_ints("perm", {0})}, {iota({2, 3})}), Error);
}

TEST(TensorOps, ConcatStringsAndErrors) {
  Tensor a(DType::String, {1, 2}), b(DType::String, {1, 1});
  a.data<std::string>()[0] = "a";
  a.data<std::string>()[1] = "b";
  b.data<std::string>()[0] = "c";
  auto y = trun("Concat", 13, {tattr_i("axis", -1)}, {a, b});
  ASSERT_EQ(y[0].tensor.shape(), (Shape{1, 3}));
  EXPECT_EQ(y[0].tensor.data<std::string>()[2], "c");
  EXPECT_THROW(trun("Concat", 13, {tattr_i("axis", 0)}, {a, b}), Error);
  EXPECT_THROW(trun("Concat", 13, {tattr_i("axis", 2)}, {a, a}), Error);
  EXPECT_THROW(trun("Concat", 13, {tattr_i("axis", 1)}, {a, Value(iota({1, 1}))}), Error);
}

TEST(TensorOps, SplitForms) {
  auto y = trun("Split", 18, {tattr_i("num_outputs", 3)}, {iota({7})}, 3);
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(iv(y[2].tensor), (std::vector<int64_t>{6}));
  EXPECT_THROW(trun("Split", 13, {}, {iota({7})}, 3), Error);               // uneven, no split
  EXPECT_THROW(trun("Split", 13, {}, {iota({7}), ti1({3, 3})}, 2), Error);  // wrong sum
  auto z = trun("Split", 11, {tattr_ints("split", {0, 2}), tattr_i("axis", -1)}, {iota({1, 2})}, 2);
  EXPECT_EQ(z[0].tensor.shape(), (Shape{1, 0}));
  EXPECT_EQ(iv(z[1].tensor), (std::vector<int64_t>{0, 1}));
}

TEST(TensorOps, SliceClampingAndNegativeSteps) {
  Tensor x = iota({5});
  auto y = trun("Slice", 13, {}, {x, ti1({INT64_MAX}), ti1({INT64_MIN}), ti1({0}), ti1({-2})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{4, 2, 0}));
  y = trun("Slice", 13, {}, {x, ti1({-100}), ti1({100})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  y = trun("Slice", 13, {}, {x, ti1({3}), ti1({1})});
  EXPECT_EQ(y[0].tensor.shape(), (Shape{0}));
  y = trun("Slice", 13, {}, {x, ti1({-1}), ti1({-6}), Value(), ti1({-1})});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{4, 3, 2, 1, 0}));
  EXPECT_THROW(trun("Slice", 13, {}, {x, ti1({0}), ti1({2}), ti1({0}), ti1({0})}), Error);
  EXPECT_THROW(trun("Slice", 13, {}, {x, ti1({0}), ti1({2}), ti1({1})}), Error);
  EXPECT_THROW(trun("Slice", 13, {}, {x, ti1({0, 0}), ti1({2})}), Error);
  y = trun("Slice", 1, {tattr_ints("starts", {1}), tattr_ints("ends", {3})}, {x});
  EXPECT_EQ(iv(y[0].tensor), (std::vector<int64_t>{1, 2}));
}

TEST(TensorOps, PadModes) {
  Tensor x = iota({3});
  auto pad = [&](const std::string& mode, std::vector<int64_t> pads) {
    return iv(trun("Pad", 19, {tattr_s("mode", mode)}, {x, ti1(pads)})[0].tensor);
  };
  EXPECT_EQ(pad("constant", {2, 1}), (std::vector<int64_t>{0, 0, 0, 1, 2, 0}));
  EXPECT_EQ(pad("reflect", {2, 2}), (std::vector<int64_t>{2, 1, 0, 1, 2, 1, 0}));
  EXPECT_EQ(pad("edge", {2, 1}), (std::vector<int64_t>{0, 0, 0, 1, 2, 2}));
  EXPECT_EQ(pad("wrap", {2, 1}), (std::vector<int64_t>{1, 2, 0, 1, 2, 0}));
  EXPECT_EQ(pad("constant", {-1, 1}), (std::vector<int64_t>{1, 2, 0}));
  auto c = trun("Pad", 18, {}, {x, ti1({1, 0}), Tensor::scalar<int64_t>(9)});
  EXPECT_EQ(iv(c[0].tensor), (std::vector<int64_t>{9, 0, 1, 2}));
  EXPECT_THROW(trun("Pad", 18, {}, {x, ti1({1})}), Error);
  EXPECT_THROW(trun("Pad", 18, {}, {x, ti1({-2, -2})}), Error);
  EXPECT_THROW(trun("Pad", 18, {tattr_s("mode", "edge")}, {iota({0}), ti1({1, 1})}), Error);
  EXPECT_THROW(trun("Pad", 18, {tattr_s("mode", "bogus")}, {x, ti1({1, 1})}), Error);
}

TEST(TensorOps, ExpandTileRange) {
  auto e = trun("Expand", 13, {}, {iota({3, 1}), ti1({2, 1, 2})});
  EXPECT_EQ(e[0].tensor.shape(), (Shape{2, 3, 2}));
  EXPECT_THROW(trun("Expand", 13, {}, {iota({3}), ti1({2})}), Error);
  EXPECT_THROW(trun("Expand", 13, {}, {iota({3}), ti1({-1})}), Error);
  auto t = trun("Tile", 13, {}, {iota({2}), ti1({3})});
  EXPECT_EQ(iv(t[0].tensor), (std::vector<int64_t>{0, 1, 0, 1, 0, 1}));
  EXPECT_THROW(trun("Tile", 13, {}, {iota({2}), ti1({3, 1})}), Error);
  auto r = trun("Range", 11, {}, {Tensor::scalar<int32_t>(10), Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(-3)});
  EXPECT_EQ(iv(r[0].tensor), (std::vector<int64_t>{10, 7, 4}));
  EXPECT_THROW(trun("Range", 11, {}, {Tensor::scalar<int32_t>(0), Tensor::scalar<int32_t>(3), Tensor::scalar<int32_t>(0)}), Error);
  auto f = trun("Range", 11, {}, {Tensor::scalar<float>(0), Tensor::scalar<float>(1), Tensor::scalar<float>(0.25f)});
  EXPECT_EQ(f[0].tensor.shape(), (Shape{4}));
}

TEST(TensorOps, CenterCropPadTriluFlatten) {
  auto c = trun("CenterCropPad", 18, {}, {iota({5}), ti1({3})});
  EXPECT_EQ(iv(c[0].tensor), (std::vector<int64_t>{1, 2, 3}));
  c = trun("CenterCropPad", 18, {}, {iota({2}), ti1({5})});
  EXPECT_EQ(iv(c[0].tensor), (std::vector<int64_t>{0, 0, 1, 0, 0}));
  auto t = trun("Trilu", 14, {tattr_i("upper", 0)}, {iota({2, 2})});
  EXPECT_EQ(iv(t[0].tensor), (std::vector<int64_t>{0, 0, 2, 3}));
  EXPECT_THROW(trun("Trilu", 14, {}, {iota({3})}), Error);
  EXPECT_EQ(trun("Flatten", 13, {tattr_i("axis", 0)}, {iota({2, 3})})[0].tensor.shape(), (Shape{1, 6}));
  EXPECT_THROW(trun("Flatten", 13, {tattr_i("axis", 3)}, {iota({2, 3})}), Error);
  auto s = trun("Shape", 15, {tattr_i("start", -1)}, {iota({2, 3})});
  EXPECT_EQ(iv(s[0].tensor), (std::vector<int64_t>{3}));
}

TEST(TensorOps, DropoutInferenceIsPassThrough) {
  Tensor x = tf({1, 2, 3}, {3});
  auto y = trun("Dropout", 13, {}, {x}, 2);
  EXPECT_EQ(y[0].tensor.raw(), x.raw());
  ASSERT_EQ(y[1].tensor.dtype(), DType::Bool);
  EXPECT_TRUE(y[1].tensor.data<bool>()[2]);
}

TEST(TensorOps, OverflowingShapesAreErrors) {
  Tensor x = iota({4});
  int64_t big = (int64_t(1) << 62) + 1;
  EXPECT_THROW(trun("Reshape", 14, {}, {x, ti1({big, 4})}), Error);
  EXPECT_THROW(trun("ConstantOfShape", 9, {}, {ti1({int64_t(1) << 32, int64_t(1) << 32})}), Error);
  EXPECT_THROW(trun("Tile", 13, {}, {iota({2, 2}), ti1({int64_t(1) << 32, int64_t(1) << 32})}), Error);
  EXPECT_THROW(trun("Pad", 13, {}, {x, ti1({INT64_MAX, INT64_MAX})}), Error);
  EXPECT_THROW(trun("Expand", 13, {}, {x, ti1({int64_t(1) << 62, 1})}), Error);
}
