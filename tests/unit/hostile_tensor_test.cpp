// Hostile attribute values for the tensor/elementwise kernels and the shape rules
// (src/ops/elementwise.cpp, src/ops/tensor.cpp, src/runtime/shape_infer.cpp): values that used
// to overflow, write out of bounds, divide by zero or size huge buffers must give a clear Error
// (or an unknown shape at plan time), and nearby valid values must still work.
#include "op_tester.hpp"

#include "runtime/shape_infer.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

using namespace basalt;
using namespace basalt::test;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Tensor ones_f(Shape s) {
  int64_t n = shape_numel(s);
  return Tensor::from_vector<float>(std::vector<float>(size_t(n), 1.0f), std::move(s));
}

// A one-node graph over graph inputs of the given shapes (no kernels: shape rules only).
// Returns the inferred output.
InferredValue infer_one(const std::string& op, int opset, const std::vector<Shape>& shapes,
                        std::vector<Attribute> attrs) {
  Graph g;
  Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = opset;
  n.attrs = std::move(attrs);
  std::vector<std::pair<DType, Shape>> ins;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int v = g.add_value("in" + std::to_string(i));
    g.values[size_t(v)].is_graph_input = true;
    g.inputs.push_back(v);
    n.inputs.push_back(v);
    ins.emplace_back(DType::Float, shapes[i]);
  }
  int y = g.add_value("y");
  n.outputs.push_back(y);
  g.values[size_t(y)].producer = 0;
  g.outputs.push_back(y);
  g.nodes.push_back(std::move(n));
  g.finalize();
  return infer_shapes(g, ins)[size_t(y)];
}

}  // namespace

// #1: legacy broadcast axis near INT64_MAX wrapped `axis + rb <= ra` and wrote before the heap
// block. Now the factory rejects |axis| > INT32_MAX, and an in-range bad axis is an error.
TEST(HostileTensor, LegacyBroadcastAxisOverflow) {
  Value a(ones_f({2})), b(ones_f({1, 1}));
  EXPECT_THROW(run_op("Add", 6, {a, b}, {attr("broadcast", 1), attr("axis", kMax)}), Error);
  EXPECT_THROW(run_op("Mul", 6, {a, b}, {attr("broadcast", 1), attr("axis", std::numeric_limits<int64_t>::min())}),
               Error);
  // In int32 range but past the end: the overflow-free test still rejects it.
  Value b2(ones_f({2}));
  EXPECT_THROW(run_op("Add", 6, {Value(ones_f({2, 2})), b2}, {attr("broadcast", 1), attr("axis", 2)}), Error);
  // Valid legacy broadcast still works.
  Tensor y = run_op("Add", 6, {Value(ones_f({2, 3})), Value(ones_f({2}))}, {attr("broadcast", 1), attr("axis", 0)})[0]
                 .tensor;
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.data<float>()[5], 2.0f);
}

// #4: blocksize 2^32 made b*b wrap to 0 (SIGFPE in the kernel and in shape inference).
TEST(HostileTensor, DepthToSpaceBlocksizeTooLarge) {
  Value x(ones_f({1, 4, 2, 2}));
  int64_t big = int64_t(1) << 32;
  EXPECT_THROW(run_op("DepthToSpace", 13, {x}, {attr("blocksize", big)}), Error);
  EXPECT_THROW(run_op("SpaceToDepth", 13, {x}, {attr("blocksize", big)}), Error);
  EXPECT_THROW(run_op("DepthToSpace", 13, {x}, {attr("blocksize", kMax)}), Error);
  // Shape rule: unknown, not a crash.
  EXPECT_FALSE(infer_one("DepthToSpace", 13, {{1, 4, 2, 2}}, {attr("blocksize", big)}).known());
  EXPECT_FALSE(infer_one("SpaceToDepth", 13, {{1, 4, 2, 2}}, {attr("blocksize", big)}).known());
  // Valid blocksize still works, in both the kernel and the shape rule.
  Tensor y = run_op("DepthToSpace", 13, {x}, {attr("blocksize", 2)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  InferredValue iv = infer_one("DepthToSpace", 13, {{1, 4, 2, 2}}, {attr("blocksize", 2)});
  ASSERT_TRUE(iv.known());
  EXPECT_EQ(iv.shape, (Shape{1, 1, 4, 4}));
}

// #10: Pad-2 sized its per-position index maps from the pads before the (empty) output, so
// pads of 1e9 on a [1,0] input tried to allocate 8 GB.
TEST(HostilePad, EmptyOutputHugePadsAllocatesNothing) {
  Value x(Tensor(DType::Float, {1, 0}));
  Tensor y = run_op("Pad", 2, {x}, {attr("pads", Ints{0, 0, 1000000000000, 0})})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1000000000001, 0}));
  // dim + pads overflowing int64 is an error.
  EXPECT_THROW(run_op("Pad", 2, {x}, {attr("pads", Ints{0, 0, kMax, 0})}), Error);
  // Non-constant modes still reject padding an empty axis.
  EXPECT_THROW(run_op("Pad", 2, {x}, {attr("pads", Ints{0, 1, 0, 0}), attr("mode", "edge")}), Error);
  // A normal pad still works.
  Tensor z = run_op("Pad", 2, {Value(ones_f({1, 2}))}, {attr("pads", Ints{0, 1, 0, 1})})[0].tensor;
  ASSERT_EQ(z.shape(), (Shape{1, 4}));
  EXPECT_EQ(z.data<float>()[0], 0.0f);
  EXPECT_EQ(z.data<float>()[1], 1.0f);
  EXPECT_EQ(z.data<float>()[3], 0.0f);
}

// Tile's empty-output case had the same hole: repeats of 1e12 on another axis.
TEST(HostilePad, TileEmptyOutputHugeRepeats) {
  Value x(Tensor(DType::Float, {0, 1}));
  Value reps(Tensor::from_vector<int64_t>({1, 1000000000000}, {2}));
  Tensor y = run_op("Tile", 13, {x, reps})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{0, 1000000000000}));
}

// #15: Split's int64 axis was narrowed to int, so axis 2^32 split along axis 0.
TEST(HostileTensor, SplitAxisNotTruncated) {
  Value x(ones_f({2, 2}));
  int64_t ax = int64_t(1) << 32;
  EXPECT_THROW(run_op("Split", 13, {x}, {attr("axis", ax)}, 2), Error);
  EXPECT_THROW(run_op("Split", 11, {x}, {attr("axis", ax)}, 2), Error);
  EXPECT_THROW(run_op("Split", 18, {x}, {attr("axis", ax), attr("num_outputs", 2)}, 2), Error);
  auto outs = run_op("Split", 13, {x}, {attr("axis", -1)}, 2);
  EXPECT_EQ(outs[1].tensor.shape(), (Shape{2, 1}));
}

// #16: Split-11 `sum += s` overflowed for split entries near INT64_MAX.
TEST(HostileTensor, SplitSumOverflow) {
  Value x(ones_f({3}));
  EXPECT_THROW(run_op("Split", 11, {x}, {attr("split", Ints{kMax, kMax, 3})}, 3), Error);
  EXPECT_THROW(run_op("Split", 11, {x}, {attr("split", Ints{4, 0})}, 2), Error);
  auto outs = run_op("Split", 11, {x}, {attr("split", Ints{1, 2})}, 2);
  EXPECT_EQ(outs[1].tensor.shape(), (Shape{2}));
}

// #16: EyeLike `i + k` overflowed for k near INT64_MAX.
TEST(HostileTensor, EyeLikeHugeK) {
  Value x(ones_f({3, 4}));
  for (int64_t k : {kMax, std::numeric_limits<int64_t>::min(), int64_t(4), int64_t(-3)}) {
    Tensor y = run_op("EyeLike", 9, {x}, {attr("k", k)})[0].tensor;
    for (int i = 0; i < 12; ++i) EXPECT_EQ(y.data<float>()[i], 0.0f) << "k=" << k;
  }
  Tensor y = run_op("EyeLike", 9, {x}, {attr("k", 1)})[0].tensor;
  EXPECT_EQ(y.data<float>()[1], 1.0f);
  EXPECT_EQ(y.data<float>()[11], 1.0f);
  EXPECT_EQ(y.data<float>()[0], 0.0f);
  Tensor z = run_op("EyeLike", 9, {x}, {attr("k", -2)})[0].tensor;
  EXPECT_EQ(z.data<float>()[8], 1.0f);
}

// #16: shape-rule window arithmetic. Dilations 6148914691236517206 made (k-1)*d+1 wrap to 3 and
// the rule predicted a shape; huge pads/strides overflowed too. Now the shape stays unknown.
TEST(HostileShapeInfer, WindowArithmeticOverflow) {
  const int64_t d = 6148914691236517206;
  EXPECT_FALSE(infer_one("MaxPool", 12, {{1, 1, 1, 40}}, {attr("kernel_shape", Ints{1, 4}), attr("dilations", Ints{1, d})})
                   .known());
  EXPECT_FALSE(infer_one("Conv", 11, {{1, 1, 1, 40}, {1, 1, 1, 4}}, {attr("dilations", Ints{1, d})}).known());
  EXPECT_FALSE(
      infer_one("MaxPool", 12, {{1, 1, 1, 40}}, {attr("kernel_shape", Ints{1, 1}), attr("pads", Ints{0, kMax, 0, kMax})})
          .known());
  EXPECT_FALSE(infer_one("MaxPool", 12, {{1, 1, 1, 40}},
                         {attr("kernel_shape", Ints{1, 1}), attr("strides", Ints{1, kMax}), attr("auto_pad", "SAME_UPPER")})
                   .known());
  // Valid windows are unchanged (ceil_mode included).
  InferredValue v = infer_one("MaxPool", 12, {{1, 1, 5, 5}},
                              {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{2, 2}), attr("ceil_mode", 1)});
  ASSERT_TRUE(v.known());
  EXPECT_EQ(v.shape, (Shape{1, 1, 3, 3}));
  InferredValue c = infer_one("Conv", 11, {{1, 1, 7, 7}, {2, 1, 3, 3}}, {attr("dilations", Ints{2, 2}), attr("pads", Ints{1, 1, 1, 1})});
  ASSERT_TRUE(c.known());
  EXPECT_EQ(c.shape, (Shape{1, 2, 5, 5}));
}

// #16: ConvTranspose shape rule: w[1]*group and the output-size arithmetic overflowed.
TEST(HostileShapeInfer, ConvTransposeOverflow) {
  EXPECT_FALSE(infer_one("ConvTranspose", 11, {{1, 0, 2, 2}, {0, 4, 1, 1}}, {attr("group", int64_t(1) << 62)}).known());
  EXPECT_FALSE(infer_one("ConvTranspose", 11, {{1, 1, 2, 2}, {1, 1, 1, 1}}, {attr("strides", Ints{kMax, 1})}).known());
  EXPECT_FALSE(infer_one("ConvTranspose", 11, {{1, 1, 2, 2}, {1, 1, 1, 1}},
                         {attr("strides", Ints{kMax, 1}), attr("auto_pad", "SAME_UPPER")})
                   .known());
  EXPECT_FALSE(infer_one("ConvTranspose", 11, {{1, 1, 2, 2}, {1, 1, 3, 3}}, {attr("dilations", Ints{kMax, 1})}).known());
  InferredValue v = infer_one("ConvTranspose", 11, {{1, 2, 3, 3}, {2, 3, 3, 3}},
                              {attr("group", 2), attr("strides", Ints{2, 2}), attr("pads", Ints{1, 1, 1, 1})});
  ASSERT_TRUE(v.known());
  EXPECT_EQ(v.shape, (Shape{1, 6, 5, 5}));
}
