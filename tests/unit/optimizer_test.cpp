// Graph optimizer passes (src/opt) on minimal graphs: where each must apply, and where it must
// not (extra consumers, graph-output intermediates, mismatched shapes, non-constant weights).
// Graphs are built in memory, serialized with the ONNX writer and opened through Session, so
// every test also checks writer -> loader round trips and the Session integration; outputs are
// compared against the same model at level none.
#include <basalt/basalt.hpp>

#include "kernels/cpu.hpp"
#include "onnx/writer.hpp"
#include "op_tester.hpp"
#include "opt/graph_util.hpp"
#include "opt/optimizer.hpp"
#include "graph/model.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include "runtime/session_access.hpp"

namespace basalt {
namespace {

using test::attr;
using test::Floats;
using test::Ints;

// Builds a Model node by node (in topological order).
struct Builder {
  std::shared_ptr<Model> m = std::make_shared<Model>();
  Graph* g;
  explicit Builder(int opset = 13) {
    m->ir_version = 8;
    m->opsets[""] = opset;
    m->graph = std::make_shared<Graph>();
    g = m->graph.get();
    g->name = "test";
  }
  int value(const std::string& n) {
    int v = g->find_value(n);
    return v >= 0 ? v : g->add_value(n);
  }
  void input(const std::string& n, Shape s) {
    int v = value(n);
    auto& d = g->values[size_t(v)];
    d.is_graph_input = true;
    d.type.kind = TypeInfo::Kind::Tensor;
    d.type.elem = DType::Float;
    d.type.has_shape = true;
    for (int64_t x : s) d.type.dims.push_back(DimInfo{x, ""});
    g->inputs.push_back(v);
  }
  void init(const std::string& n, Tensor t) {
    int v = value(n);
    g->values[size_t(v)].is_initializer = true;
    g->values[size_t(v)].initializer = std::move(t);
  }
  Node& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
             std::vector<Attribute> attrs = {}, const std::string& name = "") {
    Node n;
    n.op_type = op;
    n.opset = int(m->opsets[""]);
    n.name = name.empty() ? op + "_" + std::to_string(g->nodes.size()) : name;
    for (auto& i : ins) n.inputs.push_back(i.empty() ? -1 : value(i));
    for (auto& o : outs) {
      int v = value(o);
      g->values[size_t(v)].producer = int(g->nodes.size());
      n.outputs.push_back(v);
    }
    n.attrs = std::move(attrs);
    g->nodes.push_back(std::move(n));
    return g->nodes.back();
  }
  void output(const std::string& n) { g->outputs.push_back(value(n)); }
  std::string bytes() {
    g->finalize();
    return save_model_bytes(*m);
  }
};

Tensor random_tensor(Shape s, uint32_t seed, float lo = -1, float hi = 1) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  Tensor t(DType::Float, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = d(rng);
  return t;
}

std::unique_ptr<Session> open(const std::string& bytes, int level) {
  SessionOptions o;
  o.optimization_level = level;
  o.threads = 1;
  return Session::from_bytes(bytes.data(), bytes.size(), o);
}

const OptimizeReport& report_of(const Session& s) { return *session_model(s).optimize_report; }

int count_ops(const Graph& g, const std::string& op) {
  int c = 0;
  for (auto& n : g.nodes) c += n.op_type == op;
  return c;
}

bool rejected_with(const OptimizeReport& r, const std::string& pattern_part, const std::string& reason_part) {
  for (auto& x : r.rejected)
    if (x.pattern.find(pattern_part) != std::string::npos && x.reason.find(reason_part) != std::string::npos) return true;
  return false;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double x = a.get_double(i), y = b.get_double(i);
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Runs the model at `level` and at level none on the same inputs; expects equal outputs.
void expect_same_outputs(const std::string& bytes, int level, const std::vector<std::pair<std::string, Value>>& feeds,
                         double tol = 1e-5) {
  auto ref = open(bytes, 0);
  auto opt = open(bytes, level);
  auto a = ref->run(feeds), b = opt->run(feeds);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(rel_l2(b[i].tensor, a[i].tensor), tol) << "output " << i;
}

// X[1,3,8,8] -> Conv(3->4, 3x3, pad 1) -> BatchNormalization -> Y
Builder conv_bn(bool weight_is_input = false, int64_t bn_channels = 4) {
  Builder b;
  b.input("X", {1, 3, 8, 8});
  if (weight_is_input) b.input("W", {4, 3, 3, 3});
  else b.init("W", random_tensor({4, 3, 3, 3}, 1));
  b.init("B", random_tensor({4}, 2));
  b.init("scale", random_tensor({bn_channels}, 3, 0.5f, 1.5f));
  b.init("bias", random_tensor({bn_channels}, 4));
  b.init("mean", random_tensor({bn_channels}, 5));
  b.init("var", random_tensor({bn_channels}, 6, 0.5f, 2.0f));
  b.node("Conv", {"X", "W", "B"}, {"C"}, {attr("pads", Ints{1, 1, 1, 1}), attr("kernel_shape", Ints{3, 3})}, "conv1");
  b.node("BatchNormalization", {"C", "scale", "bias", "mean", "var"}, {"Y"}, {attr("epsilon", 1e-3f)}, "bn1");
  b.output("Y");
  return b;
}

TEST(Optimizer, ParsesLevels) {
  EXPECT_EQ(parse_opt_level("none"), OptLevel::None);
  EXPECT_EQ(parse_opt_level("2"), OptLevel::Extended);
  EXPECT_EQ(parse_opt_level("all"), OptLevel::All);
  EXPECT_THROW(parse_opt_level("max"), Error);
  SessionOptions o;
  o.optimization_level = 7;
  std::string bytes = conv_bn().bytes();
  EXPECT_THROW(Session::from_bytes(bytes.data(), bytes.size(), o), Error);
}

TEST(Optimizer, ConvBatchNormFoldsIntoConv) {
  std::string bytes = conv_bn().bytes();
  auto s = open(bytes, 1);
  EXPECT_EQ(report_of(*s).fusions.at("Conv+BatchNormalization"), 1);
  const Graph& g = *session_model(*s).graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Conv");
  EXPECT_EQ(g.nodes[0].name, "conv1");
  EXPECT_EQ(g.values[size_t(g.nodes[0].outputs[0])].name, "Y");  // the graph output keeps its name
  expect_same_outputs(bytes, 1, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
}

// The fold lets go of the original weight and BN parameters at once (so optimizing never holds
// two copies of a model's conv weights), but not of a weight another node still reads.
TEST(Optimizer, ConvBatchNormFoldDropsTheOriginalsUnlessShared) {
  auto data_of = [](const Graph& g, const std::string& name) -> const void* {
    for (const auto& v : g.values)
      if (v.name == name) return v.initializer.raw();
    ADD_FAILURE() << "no value " << name;
    return nullptr;
  };
  {
    Builder b = conv_bn();
    b.g->finalize();
    EXPECT_NE(data_of(*b.g, "W"), nullptr);
    optimize_model(*b.m, {OptLevel::Basic, false}, nullptr);
    EXPECT_EQ(data_of(*b.g, "W"), nullptr);
    EXPECT_EQ(data_of(*b.g, "scale"), nullptr);
    EXPECT_EQ(data_of(*b.g, "var"), nullptr);
  }
  Builder b = conv_bn();
  b.node("Conv", {"X", "W"}, {"C2"}, {attr("pads", Ints{1, 1, 1, 1}), attr("kernel_shape", Ints{3, 3})}, "conv2");
  b.output("C2");
  std::string bytes = b.bytes();
  b.g->finalize();
  optimize_model(*b.m, {OptLevel::Basic, false}, nullptr);
  EXPECT_EQ(count_ops(*b.g, "BatchNormalization"), 0);
  EXPECT_NE(data_of(*b.g, "W"), nullptr);  // conv2 still reads it
  expect_same_outputs(bytes, 1, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
}

TEST(Optimizer, ConvBatchNormNotFoldedWhenConvOutputHasAnotherConsumer) {
  Builder b = conv_bn();
  b.node("Relu", {"C"}, {"R"});
  b.output("R");
  auto s = open(b.bytes(), 1);
  EXPECT_EQ(report_of(*s).fusions.count("Conv+BatchNormalization"), 0u);
  EXPECT_TRUE(rejected_with(report_of(*s), "Conv+BatchNormalization", "2 consumers"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "BatchNormalization"), 1);
}

TEST(Optimizer, ConvBatchNormNotFoldedWhenConvOutputIsGraphOutput) {
  Builder b = conv_bn();
  b.output("C");
  auto s = open(b.bytes(), 1);
  EXPECT_TRUE(rejected_with(report_of(*s), "Conv+BatchNormalization", "graph output"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "BatchNormalization"), 1);
}

TEST(Optimizer, ConvBatchNormNotFoldedWithNonConstantWeight) {
  auto s = open(conv_bn(true).bytes(), 1);
  EXPECT_TRUE(rejected_with(report_of(*s), "Conv+BatchNormalization", "non-constant weight"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "BatchNormalization"), 1);
}

TEST(Optimizer, ConvBatchNormNotFoldedWithMismatchedShapes) {
  // Optimized only (the model itself is invalid at run time: BN has 5 channels, Conv makes 4).
  Builder b = conv_bn(false, 5);
  b.g->finalize();
  OptimizeReport r;
  optimize_model(*b.m, {OptLevel::Basic, false}, &r);
  EXPECT_TRUE(rejected_with(r, "Conv+BatchNormalization", "mismatched shapes"));
  EXPECT_EQ(count_ops(*b.g, "BatchNormalization"), 1);
}

TEST(Optimizer, LevelNoneChangesNothing) {
  auto s = open(conv_bn().bytes(), 0);
  EXPECT_EQ(session_model(*s).graph->nodes.size(), 2u);
  EXPECT_TRUE(report_of(*s).passes.empty());
}

TEST(Optimizer, RemovesIdentityAndInferenceDropout) {
  Builder b;
  b.input("X", {2, 5});
  b.node("Identity", {"X"}, {"A"});
  b.node("Relu", {"A"}, {"R"});
  b.node("Dropout", {"R"}, {"D"});
  b.node("Identity", {"D"}, {"Y"});  // a graph output: the Dropout's input producer is rewired
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 1);
  const Graph& g = *session_model(*s).graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Relu");
  EXPECT_EQ(g.values[size_t(g.nodes[0].outputs[0])].name, "Y");
  EXPECT_EQ(report_of(*s).fusions.at("Identity removed"), 2);
  EXPECT_EQ(report_of(*s).fusions.at("Dropout removed"), 1);
  expect_same_outputs(bytes, 1, {{"X", random_tensor({2, 5}, 3)}});
}

TEST(Optimizer, KeepsDropoutWhoseMaskIsUsedAndIdentityOfAnInputThatIsAnOutput) {
  Builder b;
  b.input("X", {2, 5});
  b.node("Dropout", {"X"}, {"D", "M"});
  b.node("Identity", {"X"}, {"Y"});
  b.output("D");
  b.output("M");
  b.output("Y");
  auto s = open(b.bytes(), 1);
  EXPECT_TRUE(rejected_with(report_of(*s), "Dropout", "mask output is used"));
  EXPECT_TRUE(rejected_with(report_of(*s), "Identity", "graph output"));
  EXPECT_EQ(session_model(*s).graph->nodes.size(), 2u);
}

TEST(Optimizer, FoldsConstantsAndStaticShapes) {
  Builder b;
  b.input("X", {2, 3, 4});
  b.init("c1", test::make_tensor<float>({4}, {1, 2, 3, 4}));
  b.init("c2", test::make_tensor<float>({4}, {10, 20, 30, 40}));
  b.node("Add", {"c1", "c2"}, {"c"});       // constant
  b.node("Shape", {"X"}, {"sh"});           // static shape [2,3,4]
  b.init("idx", Tensor::from_vector<int64_t>({0}, Shape{1}));
  b.node("Gather", {"sh", "idx"}, {"n"}, {attr("axis", 0)});
  b.init("minus1", Tensor::from_vector<int64_t>({-1}, Shape{1}));
  b.node("Concat", {"n", "minus1"}, {"target"}, {attr("axis", 0)});
  b.node("Reshape", {"X", "target"}, {"r"});
  b.init("c3", test::make_tensor<float>({12}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}));
  b.node("Mul", {"r", "c3"}, {"Y"});
  b.node("Mul", {"X", "c"}, {"Y2"});
  b.output("Y");
  b.output("Y2");
  std::string bytes = b.bytes();
  auto s = open(bytes, 1);
  const Graph& g = *session_model(*s).graph;
  EXPECT_EQ(count_ops(g, "Shape"), 0);
  EXPECT_EQ(count_ops(g, "Gather"), 0);
  EXPECT_EQ(count_ops(g, "Concat"), 0);
  EXPECT_EQ(count_ops(g, "Add"), 0);
  EXPECT_EQ(g.nodes.size(), 3u);  // Reshape, Mul, Mul
  EXPECT_EQ(report_of(*s).fusions.at("Shape of a static shape folded"), 1);
  EXPECT_EQ(report_of(*s).fusions.at("ConstantFolding"), 3);
  expect_same_outputs(bytes, 1, {{"X", random_tensor({2, 3, 4}, 5)}});
}

TEST(Optimizer, DoesNotFoldShapeOfADynamicInputOrHugeResults) {
  Builder b;
  b.input("X", {2, 3});
  b.g->values[size_t(b.value("X"))].type.dims[0] = DimInfo{-1, "batch"};
  b.node("Shape", {"X"}, {"sh"});
  b.output("sh");
  b.init("big", Tensor::from_vector<int64_t>({2048, 1024}, Shape{2}));
  b.node("ConstantOfShape", {"big"}, {"Z"}, {}, "cos");
  b.output("Z");
  auto s = open(b.bytes(), 1);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Shape"), 1);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "ConstantOfShape"), 1);
  EXPECT_TRUE(rejected_with(report_of(*s), "ConstantFolding", "1M-element bound"));
}

TEST(Optimizer, FoldsReshapeChainsButNotWhenTheLastShapeCopiesADim) {
  Builder b;
  b.input("X", {2, 3, 4});
  b.init("s1", Tensor::from_vector<int64_t>({6, 4}, Shape{2}));
  b.init("s2", Tensor::from_vector<int64_t>({4, -1}, Shape{2}));
  b.init("s3", Tensor::from_vector<int64_t>({0, -1}, Shape{2}));
  b.node("Reshape", {"X", "s1"}, {"a"});
  b.node("Flatten", {"a"}, {"f"}, {attr("axis", 1)});
  b.node("Reshape", {"f", "s2"}, {"Y"});
  b.node("Reshape", {"X", "s1"}, {"b2"});
  b.node("Reshape", {"b2", "s3"}, {"Y2"}, {}, "copies_dim");
  b.output("Y");
  b.output("Y2");
  std::string bytes = b.bytes();
  auto s = open(bytes, 1);
  EXPECT_EQ(report_of(*s).fusions.at("Reshape chain folded"), 1);
  EXPECT_TRUE(rejected_with(report_of(*s), "Reshape chain", "0 entry"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Reshape"), 3);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Flatten"), 0);
  expect_same_outputs(bytes, 1, {{"X", random_tensor({2, 3, 4}, 7)}});
}

TEST(Optimizer, RemovesDeadNodes) {
  Builder b;
  b.input("X", {4});
  b.node("Relu", {"X"}, {"unused"});
  b.node("Neg", {"unused"}, {"unused2"});
  b.node("Sigmoid", {"X"}, {"Y"});
  b.output("Y");
  auto s = open(b.bytes(), 1);
  ASSERT_EQ(session_model(*s).graph->nodes.size(), 1u);
  EXPECT_EQ(report_of(*s).fusions.at("dead node removed"), 2);
}

bool has_fused_conv_kernel() { return OpRegistry::instance().find("basalt", "FusedConv", 1) != nullptr; }

TEST(Optimizer, ConvBatchNormReluBecomesFusedConvAtExtended) {
  Builder b = conv_bn();
  b.g->outputs.clear();
  b.node("Relu", {"Y"}, {"R"}, {}, "relu1");
  b.output("R");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  const auto& r = report_of(*s);
  EXPECT_EQ(r.fusions.at("Conv+BatchNormalization"), 1);
  if (has_fused_conv_kernel()) {
    EXPECT_EQ(r.fusions.at("Conv+Relu"), 1);
    const Graph& g = *session_model(*s).graph;
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op_type, "FusedConv");
    EXPECT_EQ(g.nodes[0].domain, "basalt");
    EXPECT_EQ(g.nodes[0].attr_string("activation"), "Relu");
    EXPECT_EQ(session_model(*s).opsets.count("basalt"), 1u);
    expect_same_outputs(bytes, 2, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
  } else {
    EXPECT_TRUE(rejected_with(r, "Conv+Relu", "no basalt::FusedConv kernel"));
  }
}

TEST(Optimizer, StandardOpsKeepsOnlyAiOnnxOps) {
  Builder b = conv_bn();
  b.g->outputs.clear();
  b.node("Relu", {"Y"}, {"R"});
  b.output("R");
  b.g->finalize();
  OptimizeReport r;
  optimize_model(*b.m, {OptLevel::All, true}, &r);
  for (auto& n : b.g->nodes) EXPECT_EQ(n.domain, "");
  EXPECT_EQ(r.fusions.at("Conv+BatchNormalization"), 1);
  EXPECT_TRUE(rejected_with(r, "fuse_conv_activation", "standard-ops"));
  EXPECT_EQ(b.m->opsets.count("basalt"), 0u);
}

TEST(Optimizer, ConvActivationNotFusedWhenConvOutputIsGraphOutput) {
  Builder b;
  b.input("X", {1, 2, 4, 4});
  b.init("W", random_tensor({2, 2, 1, 1}, 1));
  b.node("Conv", {"X", "W"}, {"C"}, {}, "conv");
  b.node("Relu", {"C"}, {"Y"});
  b.output("C");
  b.output("Y");
  auto s = open(b.bytes(), 2);
  EXPECT_TRUE(rejected_with(report_of(*s), "Conv+activation", "graph output"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Conv"), 1);
}

TEST(Optimizer, ResidualAddWithMismatchedShapesIsNotFolded) {
  Builder b;
  b.input("X", {1, 2, 4, 4});
  b.input("Z", {1, 2, 1, 1});  // broadcasts in Add, but FusedConv's Z must match Y
  b.init("W", random_tensor({2, 2, 1, 1}, 1));
  b.node("Conv", {"X", "W"}, {"C"}, {}, "conv");
  b.node("Add", {"C", "Z"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  EXPECT_TRUE(rejected_with(report_of(*s), "Conv+Add", "mismatched shapes"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Add"), 1);
  expect_same_outputs(bytes, 2, {{"X", random_tensor({1, 2, 4, 4}, 2)}, {"Z", random_tensor({1, 2, 1, 1}, 3)}});
}

TEST(Optimizer, ResidualAddAndReluFoldIntoFusedConv) {
  Builder b;
  b.input("X", {1, 2, 5, 5});
  b.init("W", random_tensor({2, 2, 3, 3}, 1));
  b.init("B", random_tensor({2}, 4));
  b.node("Conv", {"X", "W", "B"}, {"C"}, {attr("pads", Ints{1, 1, 1, 1})}, "conv");
  b.node("Add", {"X", "C"}, {"S"});
  b.node("Relu", {"S"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  if (!has_fused_conv_kernel()) {
    EXPECT_TRUE(rejected_with(report_of(*s), "Conv+Add+Relu", "no basalt::FusedConv kernel"));
    return;
  }
  EXPECT_EQ(report_of(*s).fusions.at("Conv+Add+Relu"), 1);
  ASSERT_EQ(session_model(*s).graph->nodes.size(), 1u);
  EXPECT_EQ(session_model(*s).graph->nodes[0].inputs.size(), 4u);
  expect_same_outputs(bytes, 2, {{"X", random_tensor({1, 2, 5, 5}, 2)}});
}

bool has_fused_matmul_kernel() { return OpRegistry::instance().find("basalt", "FusedMatMul", 1) != nullptr; }

// X[3,4] -> Gemm(W[5,4] transB, C, alpha 0.5, beta 2) -> LeakyRelu -> Y
Builder gemm_act(Shape c_shape) {
  Builder b;
  b.input("X", {3, 4});
  b.init("W", random_tensor({5, 4}, 1));
  b.init("C", random_tensor(c_shape, 2));
  b.node("Gemm", {"X", "W", "C"}, {"G"}, {attr("transB", 1), attr("alpha", 0.5f), attr("beta", 2.0f)}, "gemm");
  b.node("LeakyRelu", {"G"}, {"Y"}, {attr("alpha", 0.1f)});
  b.output("Y");
  return b;
}

TEST(Optimizer, GemmActivationBecomesFusedMatMul) {
  std::string bytes = gemm_act({5}).bytes();
  auto s = open(bytes, 2);
  if (!has_fused_matmul_kernel()) {
    EXPECT_TRUE(rejected_with(report_of(*s), "Gemm+LeakyRelu", "no basalt::FusedMatMul kernel"));
    return;
  }
  EXPECT_EQ(report_of(*s).fusions.at("Gemm+LeakyRelu"), 1);
  const Graph& g = *session_model(*s).graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(g.nodes[0].attr_floats("activation_params"), (Floats{0.1f}));
  expect_same_outputs(bytes, 2, {{"X", random_tensor({3, 4}, 3)}});
}

TEST(Optimizer, GemmWithAFullMatrixBiasIsNotFused) {
  std::string bytes = gemm_act({3, 5}).bytes();
  auto s = open(bytes, 2);
  EXPECT_TRUE(rejected_with(report_of(*s), "Gemm+LeakyRelu", "mismatched shapes"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Gemm"), 1);
  expect_same_outputs(bytes, 2, {{"X", random_tensor({3, 4}, 3)}});
}

TEST(Optimizer, ConvClipWithNonConstantBoundIsNotFused) {
  Builder b(13);
  b.input("X", {1, 2, 4, 4});
  b.input("hi", {});
  b.init("W", random_tensor({2, 2, 1, 1}, 1));
  b.init("lo", Tensor::scalar<float>(0.0f));
  b.node("Conv", {"X", "W"}, {"C"}, {}, "conv");
  b.node("Clip", {"C", "lo", "hi"}, {"Y"});
  b.output("Y");
  auto s = open(b.bytes(), 2);
  EXPECT_TRUE(rejected_with(report_of(*s), "Conv+Clip", "not a constant"));
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Clip"), 1);
}

TEST(Optimizer, ResidualAddFusesWithSymbolicShapes) {
  // ResNet's downsampling block with a dynamic batch and image size: the 3x3 stride-2 pad-1 Conv
  // and the 1x1 stride-2 Conv give the same symbolic size, floor((H-1)/2)+1.
  Builder b;
  b.input("X", {1, 2, 7, 7});
  for (int k : {0, 2, 3}) b.g->values[size_t(b.value("X"))].type.dims[size_t(k)] = DimInfo{-1, k == 0 ? "N" : k == 2 ? "H" : "W"};
  b.init("W1", random_tensor({4, 2, 3, 3}, 1));
  b.init("W2", random_tensor({4, 2, 1, 1}, 2));
  b.node("Conv", {"X", "W1"}, {"A"}, {attr("pads", Ints{1, 1, 1, 1}), attr("strides", Ints{2, 2})}, "main");
  b.node("Conv", {"X", "W2"}, {"D"}, {attr("strides", Ints{2, 2})}, "down");
  b.node("Add", {"A", "D"}, {"S"});
  b.node("Relu", {"S"}, {"Y"});
  // Not provable: Z's dims are other symbols (equal at run time here, but nothing says so).
  b.input("Z", {1, 4, 4, 3});
  for (int k : {0, 2, 3}) b.g->values[size_t(b.value("Z"))].type.dims[size_t(k)] = DimInfo{-1, k == 0 ? "N" : k == 2 ? "P" : "Q"};
  b.init("W3", random_tensor({4, 4, 1, 1}, 3));
  b.node("Conv", {"Y", "W3"}, {"E"}, {}, "other");
  b.node("Add", {"E", "Z"}, {"Y2"});
  b.output("Y2");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  const auto& r = report_of(*s);
  if (!has_fused_conv_kernel()) {
    EXPECT_TRUE(rejected_with(r, "Conv+Add+Relu", "no basalt::FusedConv kernel"));
    return;
  }
  EXPECT_EQ(r.fusions.at("Conv+Add+Relu"), 1);
  EXPECT_TRUE(rejected_with(r, "Conv+Add", "not provably equal"));
  expect_same_outputs(bytes, 2, {{"X", random_tensor({2, 2, 9, 6}, 4)}, {"Z", random_tensor({2, 4, 5, 3}, 5)}});
}

// Passes run inside subgraphs. A captured initializer of the enclosing graph is a constant there
// (Add(outer_c, inner_c) folds); a captured graph input (X) is not (Add(X, k) stays).
TEST(Optimizer, PassesRunInsideSubgraphsAndCapturedWeightsAreConstants) {
  Builder b;
  b.input("X", {3});
  b.init("outer_c", test::make_tensor<float>({3}, {1, 2, 3}));
  b.init("cond", Tensor::scalar<bool>(true));
  // then: Identity(X) -> Add(outer_c, inner_c) + it; else: X
  auto then_g = std::make_shared<Graph>();
  then_g->name = "then";
  auto cap = [&](const std::string& n) {
    int v = then_g->add_value(n);
    then_g->values[size_t(v)].is_capture = true;
    then_g->captures.push_back(v);
    return v;
  };
  int x = cap("X"), oc = cap("outer_c");
  int ic = then_g->add_value("inner_c");
  then_g->values[size_t(ic)].is_initializer = true;
  then_g->values[size_t(ic)].initializer = test::make_tensor<float>({3}, {10, 20, 30});
  int xi = then_g->add_value("xi"), k = then_g->add_value("k"), out = then_g->add_value("then_out");
  auto add_node = [&](const std::string& op, std::vector<int> ins, int o) {
    Node n;
    n.op_type = op;
    n.opset = 13;
    n.name = op + "_then_" + std::to_string(then_g->nodes.size());
    n.inputs = std::move(ins);
    n.outputs = {o};
    then_g->values[size_t(o)].producer = int(then_g->nodes.size());
    then_g->nodes.push_back(std::move(n));
  };
  add_node("Identity", {x}, xi);
  add_node("Add", {oc, ic}, k);
  add_node("Add", {xi, k}, out);
  then_g->outputs = {out};
  then_g->finalize();
  auto else_g = std::make_shared<Graph>();
  else_g->name = "else";
  int ex = else_g->add_value("X");
  else_g->values[size_t(ex)].is_capture = true;
  else_g->captures.push_back(ex);
  int eo = else_g->add_value("else_out");
  Node en;
  en.op_type = "Neg";
  en.opset = 13;
  en.name = "neg_else";
  en.inputs = {ex};
  en.outputs = {eo};
  else_g->values[size_t(eo)].producer = 0;
  else_g->nodes.push_back(std::move(en));
  else_g->outputs = {eo};
  else_g->finalize();
  Attribute ta, ea;
  ta.name = "then_branch";
  ta.type = Attribute::Type::Graph;
  ta.g = then_g;
  ea.name = "else_branch";
  ea.type = Attribute::Type::Graph;
  ea.g = else_g;
  Node& ifn = b.node("If", {"cond"}, {"Y"}, {ta, ea}, "if");
  ifn.implicit_inputs = {b.value("X"), b.value("outer_c")};
  ifn.capture_index = {{then_g.get(), {0, 1}}, {else_g.get(), {0}}};
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 3);
  const Graph& tg = *session_model(*s).graph->nodes.at(0).attr_graph("then_branch");
  EXPECT_EQ(count_ops(tg, "Identity"), 0);
  EXPECT_EQ(count_ops(tg, "Add"), 1);  // Add(outer_c, inner_c) folded; Add(X, k) stays
  expect_same_outputs(bytes, 3, {{"X", test::make_tensor<float>({3}, {0.5f, -1, 2})}});
}

TEST(Writer, NodeWithANewerOpsetThanTheModelRoundTripsThroughAFunction) {
  Builder b(13);
  b.input("X", {2, 4});
  b.init("gamma", test::make_tensor<float>({4}, {1, 2, 3, 4}));
  b.node("LayerNormalization", {"X", "gamma"}, {"Y"}, {attr("epsilon", 1e-5f)}, "ln").opset = 17;
  b.node("Relu", {"Y"}, {"R"});
  b.output("R");
  std::string bytes = b.bytes();
  auto m = load_model_bytes(bytes.data(), bytes.size());
  ASSERT_EQ(m->graph->nodes.size(), 2u);
  EXPECT_EQ(m->graph->nodes[0].op_type, "LayerNormalization");
  EXPECT_EQ(m->graph->nodes[0].opset, 17);
  EXPECT_EQ(m->graph->nodes[1].opset, 13);
  auto s = open(bytes, 0);
  auto out = s->run({{"X", test::make_tensor<float>({2, 4}, {1, 2, 3, 4, -1, 0, 1, 2})}});
  // Row 0 normalized: (x - 2.5) / sqrt(1.25 + eps), times gamma, then Relu.
  EXPECT_NEAR(out[0].tensor.data<float>()[3], 4 * 1.5f / std::sqrt(1.25f + 1e-5f), 1e-4);
  EXPECT_EQ(out[0].tensor.data<float>()[0], 0.0f);
}

TEST(Writer, RoundTripsAttributesOfEveryKind) {
  Builder b;
  b.input("X", {2});
  Attribute sub;
  sub.name = "body";
  sub.type = Attribute::Type::Graph;
  sub.g = std::make_shared<Graph>();
  sub.g->name = "body";
  Attribute ss = attr("strs", test::Strings{"a", "bc"});
  b.node("Relu", {"X"}, {"Y"},
         {attr("i", 7), attr("f", 2.5f), attr("s", "txt"), attr("ints", Ints{1, -2}), attr("floats", Floats{0.5f, -1}), ss,
          attr("t", test::make_tensor<float>({2}, {3, 4})), sub},
         "n");
  b.init("strings", [] {
    Tensor t(DType::String, {2});
    t.data<std::string>()[0] = "x";
    t.data<std::string>()[1] = "yz";
    return t;
  }());
  b.node("Identity", {"strings"}, {"S"});
  b.output("Y");
  b.output("S");
  std::string bytes = b.bytes();
  auto m = load_model_bytes(bytes.data(), bytes.size());
  const Node& n = m->graph->nodes.at(0);
  EXPECT_EQ(n.attr_int("i"), 7);
  EXPECT_EQ(n.attr_float("f"), 2.5f);
  EXPECT_EQ(n.attr_string("s"), "txt");
  EXPECT_EQ(n.attr_ints("ints"), (Ints{1, -2}));
  EXPECT_EQ(n.attr_floats("floats"), (Floats{0.5f, -1}));
  EXPECT_EQ(n.attr_strings("strs"), (test::Strings{"a", "bc"}));
  EXPECT_EQ(n.attr_tensor("t").data<float>()[1], 4.0f);
  EXPECT_EQ(n.attr_graph("body")->name, "body");
  int sv = m->graph->find_value("strings");
  ASSERT_GE(sv, 0);
  EXPECT_EQ(m->graph->values[size_t(sv)].initializer.data<std::string>()[1], "yz");
  EXPECT_EQ(m->graph->values[size_t(m->graph->inputs[0])].type.str(), "tensor(float32)[2]");
}

}  // namespace
}  // namespace basalt

namespace basalt {
namespace {

Tensor scalar_f(float v) {
  Tensor t(DType::Float, {});
  t.data<float>()[0] = v;
  return t;
}

// X[1,3,8,8] -> Conv(3->4) -> Mul(scalar) -> Add(per-channel [4,1,1]) -> Y
Builder conv_affine() {
  Builder b;
  b.input("X", {1, 3, 8, 8});
  b.init("W", random_tensor({4, 3, 3, 3}, 1));
  b.init("B", random_tensor({4}, 2));
  b.init("s", scalar_f(1.75f));
  b.init("t", random_tensor({4, 1, 1}, 3));
  b.node("Conv", {"X", "W", "B"}, {"C"}, {attr("pads", Ints{1, 1, 1, 1}), attr("kernel_shape", Ints{3, 3})}, "conv1");
  b.node("Mul", {"s", "C"}, {"M"});
  b.node("Add", {"M", "t"}, {"Y"});
  b.output("Y");
  return b;
}

TEST(OptimizerAffine, ConvMulAddFoldIntoTheConv) {
  std::string bytes = conv_affine().bytes();
  auto s = open(bytes, 1);
  EXPECT_EQ(report_of(*s).fusions.at("Conv+Mul/Add"), 2);
  const Graph& g = *session_model(*s).graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "Conv");
  EXPECT_EQ(g.values[size_t(g.nodes[0].outputs[0])].name, "Y");
  expect_same_outputs(bytes, 1, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
}

TEST(OptimizerAffine, SubAndDivByAConstantFoldButNotASpatialConstantOrZero) {
  {
    Builder b = conv_affine();
    b.init("d", random_tensor({4, 1, 1}, 4, 0.5f, 2.f));
    b.node("Div", {"Y", "d"}, {"Q"});
    b.node("Sub", {"Q", "s"}, {"R"});
    b.g->outputs.clear();
    b.output("R");
    std::string bytes = b.bytes();
    auto s = open(bytes, 1);
    EXPECT_EQ(report_of(*s).fusions.at("Conv+Mul/Add"), 4);
    EXPECT_EQ(session_model(*s).graph->nodes.size(), 1u);
    expect_same_outputs(bytes, 1, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
  }
  {
    Builder b = conv_affine();
    b.init("sp", random_tensor({8, 8}, 5));  // varies over space: not a per-channel affine
    b.node("Mul", {"Y", "sp"}, {"Z"});
    b.g->outputs.clear();
    b.output("Z");
    std::string bytes = b.bytes();
    auto s = open(bytes, 1);
    EXPECT_TRUE(rejected_with(report_of(*s), "Conv+Mul/Add", "neither a scalar nor one value per output channel"));
    EXPECT_EQ(count_ops(*session_model(*s).graph, "Mul"), 1);
    expect_same_outputs(bytes, 1, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
  }
  {
    Builder b = conv_affine();
    b.init("zero", scalar_f(0.f));
    b.node("Div", {"Y", "zero"}, {"Z"});
    b.g->outputs.clear();
    b.output("Z");
    auto s = open(b.bytes(), 1);
    EXPECT_TRUE(rejected_with(report_of(*s), "Conv+Mul/Add", "division by zero"));
    EXPECT_EQ(count_ops(*session_model(*s).graph, "Div"), 1);
  }
}

// X[1,4,6,6] and the four [4] parameters of a BatchNormalization over it.
Builder bn_input() {
  Builder b;
  b.input("X", {1, 4, 6, 6});
  b.init("scale", random_tensor({4}, 1));
  b.init("bias", random_tensor({4}, 2));
  b.init("mean", random_tensor({4}, 3));
  b.init("var", random_tensor({4}, 4, 0.5f, 2.f));
  return b;
}

// X[1,4,6,6] -> BatchNormalization -> Mul(per-channel [4,1,1]) -> Sub(scalar) -> Y, as DenseNet's
// pre-activation blocks spell it: both fold into the BN's scale and B.
TEST(OptimizerAffine, MulAndSubAfterBatchNormFoldIntoIt) {
  Builder b = bn_input();
  b.init("k", random_tensor({4, 1, 1}, 5));
  b.init("s", scalar_f(0.25f));
  b.node("BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"N"}, {attr("epsilon", 1e-3f)}, "bn1");
  b.node("Mul", {"k", "N"}, {"M"});
  b.node("Sub", {"M", "s"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 1);
  EXPECT_EQ(report_of(*s).fusions.at("BatchNormalization+Mul/Add"), 2);
  const Graph& g = *session_model(*s).graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "BatchNormalization");
  EXPECT_EQ(g.values[size_t(g.nodes[0].outputs[0])].name, "Y");
  expect_same_outputs(bytes, 1, {{"X", random_tensor({1, 4, 6, 6}, 9)}});
  // A constant along the last axis of a [1,4,6,6] tensor is not per channel: left alone.
  Builder b2 = bn_input();
  b2.init("w", random_tensor({6}, 5));
  b2.node("BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"N"}, {}, "bn1");
  b2.node("Mul", {"N", "w"}, {"Y"});
  b2.output("Y");
  std::string bytes2 = b2.bytes();
  auto s2 = open(bytes2, 1);
  EXPECT_TRUE(rejected_with(report_of(*s2), "BatchNormalization+Mul/Add", "neither a scalar nor one value per output channel"));
  EXPECT_EQ(count_ops(*session_model(*s2).graph, "Mul"), 1);
  expect_same_outputs(bytes2, 1, {{"X", random_tensor({1, 4, 6, 6}, 9)}});
}

// BatchNormalization -> Clip(constant bounds) -> basalt::FusedBatchNormalization at Extended, whose
// output shape the static shape inference knows (the memory planner needs it).
TEST(OptimizerAffine, BatchNormActivationBecomesFusedBatchNormalization) {
  Builder b = bn_input();
  b.init("lo", scalar_f(-0.5f));
  b.init("hi", scalar_f(0.75f));
  b.node("BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"N"}, {attr("epsilon", 1e-3f)}, "bn1");
  b.node("Clip", {"N", "lo", "hi"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  EXPECT_EQ(report_of(*s).fusions.at("BatchNormalization+Clip"), 1);
  const Graph& g = *session_model(*s).graph;
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op_type, "FusedBatchNormalization");
  EXPECT_EQ(g.nodes[0].name, "bn1");
  EXPECT_EQ(g.nodes[0].attr_string("activation", ""), "Clip");
  EXPECT_EQ(g.nodes[0].attr_floats("activation_params"), (Floats{-0.5f, 0.75f}));
  Shape ys;
  EXPECT_TRUE(infer_static_shapes(g).get(g.nodes[0].outputs[0], ys));
  EXPECT_EQ(ys, (Shape{1, 4, 6, 6}));
  expect_same_outputs(bytes, 2, {{"X", random_tensor({1, 4, 6, 6}, 9)}});
  // Basic level: standard ops only.
  auto basic = open(bytes, 1);
  EXPECT_EQ(count_ops(*session_model(*basic).graph, "BatchNormalization"), 1);
}

// A float64 BatchNormalization -> Clip stays unfused (the fused op's activation parameters are
// float32: Clip's bound 0.1 would be rounded), with the reason in the report; the session's
// output is the double BatchNormalization then Clip.
TEST(OptimizerAffine, Float64BatchNormActivationIsNotFused) {
  auto dtensor = [](Shape s, uint32_t seed, double lo, double hi) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<double> d(lo, hi);
    Tensor t(DType::Double, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = d(rng);
    return t;
  };
  Builder b;
  b.input("X", {1, 3, 4, 4});
  b.g->values[size_t(b.value("X"))].type.elem = DType::Double;
  b.init("scale", dtensor({3}, 1, 0.5, 1.5));
  b.init("bias", dtensor({3}, 2, -1, 1));
  b.init("mean", dtensor({3}, 3, -1, 1));
  b.init("var", dtensor({3}, 4, 0.5, 2));
  Tensor lo(DType::Double, {}), hi(DType::Double, {});
  lo.data<double>()[0] = -0.1;
  hi.data<double>()[0] = 0.1;
  b.init("lo", lo);
  b.init("hi", hi);
  b.node("BatchNormalization", {"X", "scale", "bias", "mean", "var"}, {"N"}, {}, "bn1");
  b.node("Clip", {"N", "lo", "hi"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "FusedBatchNormalization"), 0);
  EXPECT_TRUE(rejected_with(report_of(*s), "BatchNormalization+Clip", "float64")) << "no rejection reason";
  Tensor x = dtensor({1, 3, 4, 4}, 5, -3, 3);
  Tensor y = s->run({{"X", Value(x)}})[0].tensor;
  ASSERT_EQ(y.dtype(), DType::Double);
  const double* sc = b.g->values[size_t(b.value("scale"))].initializer.data<double>();
  const double* bi = b.g->values[size_t(b.value("bias"))].initializer.data<double>();
  const double* mu = b.g->values[size_t(b.value("mean"))].initializer.data<double>();
  const double* va = b.g->values[size_t(b.value("var"))].initializer.data<double>();
  int hits_bound = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i / 16;
    const double n = (x.data<double>()[i] - mu[c]) / std::sqrt(va[c] + double(1e-5f)) * sc[c] + bi[c];
    const double want = std::min(std::max(n, -0.1), 0.1);
    hits_bound += std::fabs(want) == 0.1;
    ASSERT_NEAR(y.data<double>()[i], want, 1e-14) << i;
  }
  EXPECT_GT(hits_bound, 0);  // the bounds matter: a float32 0.1 would be 1.5e-9 off
}

// Spelled-out HardSwish after a conv: x * Clip(x + 3, 0, 6) / 6 (Clip-11 bounds as inputs).
Builder conv_hardswish(float three, bool extra_consumer) {
  Builder b;
  b.input("X", {1, 3, 8, 8});
  b.init("W", random_tensor({4, 3, 3, 3}, 1, -2.f, 2.f));
  b.init("three", scalar_f(three));
  b.init("zero", scalar_f(0.f));
  b.init("six", scalar_f(6.f));
  b.node("Conv", {"X", "W"}, {"C"}, {attr("pads", Ints{1, 1, 1, 1}), attr("kernel_shape", Ints{3, 3})}, "conv1");
  b.node("Add", {"C", "three"}, {"A"});
  b.node("Clip", {"A", "zero", "six"}, {"G"});
  b.node("Mul", {"C", "G"}, {"M"});
  b.node("Div", {"M", "six"}, {"Y"});
  b.output("Y");
  if (extra_consumer) b.output("G");
  return b;
}

TEST(OptimizerAffine, SpelledOutHardSwishBecomesHardSwishThenFusedConv) {
  std::string bytes = conv_hardswish(3.f, false).bytes();
  // Extended: the fusions only (at level all this stem conv then runs blocked: NchwcConv and a
  // reorder, whose outputs expect_same_outputs checks below)
  auto s = open(bytes, 2);
  const auto& f = report_of(*s).fusions;
  EXPECT_EQ(f.at("HardSwish"), 1);
  EXPECT_EQ(f.at("Conv+HardSwish"), 1);
  ASSERT_EQ(session_model(*s).graph->nodes.size(), 1u);
  EXPECT_EQ(session_model(*s).graph->nodes[0].op_type, "FusedConv");
  expect_same_outputs(bytes, 2, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
  expect_same_outputs(bytes, 3, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
  // At basic level nothing changes (HardSwish is an opset-14 rewrite: Extended).
  EXPECT_EQ(count_ops(*session_model(*open(bytes, 1)).graph, "Clip"), 1);
}

// X[1,16,10,10] -> `blocks` x (Conv(pad 1) -> act -> [Mul(scalar)] -> [Add / Sub(scalar)]) ->
// Conv(pad 1) -> Y: PaddleOCR's "learnable affine blocks" between padded convs (the affine cannot
// fold into the next conv's weights: its zero padding would then stand for another value).
Builder conv_act_affine(const char* act, const char* op1, const char* op2, bool tensor_mul = false, int blocks = 1) {
  Builder b(14);
  b.input("X", {1, 16, 10, 10});
  b.init("B", random_tensor({16}, 2));
  b.init("s", tensor_mul ? random_tensor({16, 1, 1}, 5) : scalar_f(1.75f));
  b.init("t", scalar_f(-0.625f));
  std::vector<Attribute> conv_attrs = {attr("pads", Ints{1, 1, 1, 1}), attr("kernel_shape", Ints{3, 3})};
  std::string cur = "X";
  for (int k = 0; k <= blocks; ++k) {
    const std::string id = std::to_string(k);
    b.init("W" + id, random_tensor({16, 16, 3, 3}, 10 + uint32_t(k), -0.3f, 0.3f));
    if (k == blocks) {
      b.node("Conv", {cur, "W" + id}, {"Y"}, conv_attrs, "conv" + id);
      break;
    }
    b.node("Conv", {cur, "W" + id, "B"}, {"C" + id}, conv_attrs, "conv" + id);
    b.node(act, {"C" + id}, {"A" + id});
    cur = "A" + id;
    if (op1) {
      b.node(op1, {"s", cur}, {"M" + id});
      cur = "M" + id;
    }
    if (op2) {
      b.node(op2, {cur, "t"}, {"P" + id});
      cur = "P" + id;
    }
  }
  b.output("Y");
  return b;
}

TEST(OptimizerAffine, ScalarMulAddAfterAnActivationBecomePostAffine) {
  const std::vector<std::pair<std::string, Value>> feeds = {{"X", random_tensor({1, 16, 10, 10}, 9)}};
  {
    std::string bytes = conv_act_affine("HardSwish", "Mul", "Add").bytes();
    auto s = open(bytes, 2);
    EXPECT_EQ(report_of(*s).fusions.at("FusedConv+Mul/Add"), 1);
    const Graph& g = *session_model(*s).graph;
    EXPECT_EQ(count_ops(g, "Mul"), 0);
    EXPECT_EQ(count_ops(g, "Add"), 0);
    ASSERT_EQ(g.nodes.size(), 2u);  // FusedConv (post_affine) and the last Conv
    const Attribute* pa = g.nodes[0].find_attr("post_affine");
    ASSERT_NE(pa, nullptr);
    ASSERT_EQ(pa->floats.size(), 2u);
    EXPECT_EQ(pa->floats[0], 1.75f);
    EXPECT_EQ(pa->floats[1], -0.625f);
    expect_same_outputs(bytes, 2, feeds);
  }
  {
    // A chain of four convs runs blocked with the layout pass (AVX2 / AVX-512 CPUs); each
    // NchwcConv keeps its post_affine.
    std::string bytes = conv_act_affine("HardSwish", "Mul", "Add", false, 3).bytes();
    auto s3 = open(bytes, 3);
    EXPECT_EQ(report_of(*s3).fusions.at("FusedConv+Mul/Add"), 3);
    if (kernels::best_isa() >= kernels::Isa::Avx2) {
      int blocked_with_affine = 0;
      for (auto& n : session_model(*s3).graph->nodes) blocked_with_affine += n.op_type == "NchwcConv" && n.find_attr("post_affine");
      EXPECT_EQ(count_ops(*session_model(*s3).graph, "NchwcConv"), 4);
      EXPECT_EQ(blocked_with_affine, 3);
    }
    expect_same_outputs(bytes, 3, feeds);
  }
  {
    std::string bytes = conv_act_affine("Relu", nullptr, "Sub").bytes();  // x - t alone: [1, -t]
    auto s = open(bytes, 2);
    EXPECT_EQ(report_of(*s).fusions.at("FusedConv+Mul/Add"), 1);
    const Attribute* pa = session_model(*s).graph->nodes[0].find_attr("post_affine");
    ASSERT_NE(pa, nullptr);
    EXPECT_EQ(pa->floats[0], 1.f);
    EXPECT_EQ(pa->floats[1], 0.625f);
    expect_same_outputs(bytes, 2, feeds);
  }
  {
    std::string bytes = conv_act_affine("LeakyRelu", "Mul", nullptr).bytes();  // Mul alone: [s, -0]
    auto s = open(bytes, 3);
    EXPECT_EQ(report_of(*s).fusions.at("FusedConv+Mul/Add"), 1);
    expect_same_outputs(bytes, 3, feeds);
  }
  {
    // A per-channel Mul is not a scalar: reported, left as it is.
    std::string bytes = conv_act_affine("HardSwish", "Mul", "Add", true).bytes();
    auto s = open(bytes, 2);
    EXPECT_EQ(report_of(*s).fusions.count("FusedConv+Mul/Add"), 0u);
    EXPECT_TRUE(rejected_with(report_of(*s), "FusedConv+Mul/Add", "not a constant float scalar"));
    EXPECT_EQ(count_ops(*session_model(*s).graph, "Mul"), 1);
    expect_same_outputs(bytes, 2, feeds);
  }
}

TEST(OptimizerAffine, HardSwishNotMatchedWithOtherConstantsOrAnIntermediateInUse) {
  {
    auto s = open(conv_hardswish(2.f, false).bytes(), 3);  // x * Clip(x + 2, 0, 6) / 6 is not HardSwish
    EXPECT_EQ(report_of(*s).fusions.count("HardSwish"), 0u);
    EXPECT_EQ(count_ops(*session_model(*s).graph, "Clip"), 1);
  }
  {
    std::string bytes = conv_hardswish(3.f, true).bytes();  // the gate G is also a graph output
    auto s = open(bytes, 3);
    EXPECT_EQ(report_of(*s).fusions.count("HardSwish"), 0u);
    expect_same_outputs(bytes, 3, {{"X", random_tensor({1, 3, 8, 8}, 9)}});
  }
  {
    // x * HardSigmoid(x, 1/6, 0.5) is HardSwish too.
    Builder b;
    b.input("X", {2, 5});
    b.node("HardSigmoid", {"X"}, {"H"}, {attr("alpha", 1.f / 6.f), attr("beta", 0.5f)});
    b.node("Mul", {"H", "X"}, {"Y"});
    b.output("Y");
    std::string bytes = b.bytes();
    auto s = open(bytes, 3);
    EXPECT_EQ(report_of(*s).fusions.at("HardSwish"), 1);
    EXPECT_EQ(count_ops(*session_model(*s).graph, "HardSwish"), 1);
    expect_same_outputs(bytes, 3, {{"X", random_tensor({2, 5}, 9, -5.f, 5.f)}});
  }
}


// Layout pass (level All, AVX-512 CPUs): a chain with a depthwise and narrow convs (6 convs, 3
// reorders: within the pass's one-per-two-convs limit) runs on blocked tensors; reorders appear only where a plain op or a graph output reads a blocked value; every
// value's shape stays known (the memory planner needs it) and the outputs equal level none's.
TEST(OptimizerLayout, NarrowAndDepthwiseChainRunsBlocked) {
  if (kernels::best_isa() < kernels::Isa::Avx2) GTEST_SKIP() << "the layout pass runs on AVX2 and AVX-512 CPUs only";
  Builder b;
  b.input("X", {1, 20, 15, 13});
  b.init("W1", random_tensor({24, 20, 1, 1}, 1));
  b.init("B1", random_tensor({24}, 2));
  b.init("Wd", random_tensor({24, 1, 3, 3}, 3));
  b.init("W2", random_tensor({32, 24, 1, 1}, 4));
  b.init("W3", random_tensor({32, 32, 3, 3}, 5));
  b.node("Conv", {"X", "W1", "B1"}, {"c1"}, {attr("kernel_shape", Ints{1, 1})});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Conv", {"r1", "Wd"}, {"d1"}, {attr("group", int64_t(24)), attr("pads", Ints{1, 1, 1, 1}), attr("strides", Ints{2, 2})});
  b.node("Conv", {"d1", "W2"}, {"c2"}, {attr("kernel_shape", Ints{1, 1})});
  b.node("MaxPool", {"c2"}, {"p1"}, {attr("kernel_shape", Ints{3, 3}), attr("pads", Ints{1, 1, 1, 1})});
  b.node("Conv", {"p1", "W3"}, {"c3"}, {attr("pads", Ints{1, 1, 1, 1})});
  b.node("Add", {"c3", "p1"}, {"a1"});
  b.init("W4", random_tensor({32, 32, 1, 1}, 6));
  b.init("W5", random_tensor({32, 32, 1, 1}, 7));
  b.node("Conv", {"a1", "W4"}, {"c4"});
  b.node("Conv", {"c4", "W5"}, {"c5"});
  b.node("Concat", {"a1", "c5"}, {"cat"}, {attr("axis", int64_t(1))});
  b.node("GlobalAveragePool", {"cat"}, {"gap"});
  b.node("Sigmoid", {"c2"}, {"side"});  // a plain op reading a blocked value
  b.output("gap");
  b.output("side");
  b.output("a1");  // a graph output that is blocked inside
  std::string bytes = b.bytes();
  auto s = open(bytes, 3);
  const Graph& g = *session_model(*s).graph;
  EXPECT_EQ(count_ops(g, "NchwcConv"), 6);
  EXPECT_EQ(count_ops(g, "NchwcMaxPool"), 1);
  EXPECT_EQ(count_ops(g, "NchwcGlobalAveragePool"), 1);
  EXPECT_EQ(count_ops(g, "ReorderToNchwc"), 1);    // X (20 channels: not a plain-input conv)
  EXPECT_EQ(count_ops(g, "ReorderFromNchwc"), 2);  // for Sigmoid and for the output a1
  const StaticShapes st = infer_static_shapes(g);
  for (const Node& n : g.nodes)
    for (int v : n.outputs) {
      Shape sh;
      EXPECT_TRUE(st.get(v, sh)) << n.op_type << " " << n.name << ": shape unknown";
    }
  expect_same_outputs(bytes, 3, {{"X", random_tensor({1, 20, 15, 13}, 9)}});
  // Extended: no layout change
  auto ext = open(bytes, 2);
  EXPECT_EQ(count_ops(*session_model(*ext).graph, "NchwcConv"), 0);
}

// 3x3 stride-1 convs with 64+ channels run Winograd on the blocked tensors (F(4x4) at 24x24,
// F(2x2) at 12x12, 72 output channels: a partial last block), inside the chain: no reorder
// anywhere, and the outputs match the unoptimized model (NCHW Winograd and im2col there).
TEST(OptimizerLayout, WinogradConvsStayInTheChain) {
  if (kernels::best_isa() < kernels::Isa::Avx2) GTEST_SKIP() << "the layout pass runs on AVX2 and AVX-512 CPUs only";
  Builder b;
  b.input("X", {1, 3, 24, 24});
  b.init("W0", random_tensor({64, 3, 3, 3}, 1));
  b.init("W1", random_tensor({64, 64, 3, 3}, 2, -0.2f, 0.2f));
  b.init("B1", random_tensor({64}, 3));
  b.init("W2", random_tensor({72, 64, 3, 3}, 4, -0.2f, 0.2f));
  b.init("W3", random_tensor({64, 72, 3, 3}, 5, -0.2f, 0.2f));
  b.init("B3", random_tensor({64}, 6));
  const Ints pad1{1, 1, 1, 1};
  b.node("Conv", {"X", "W0"}, {"c0"}, {attr("pads", pad1)});  // plain-input stem
  b.node("Conv", {"c0", "W1", "B1"}, {"c1"}, {attr("pads", pad1)});
  b.node("Relu", {"c1"}, {"r1"});
  b.node("Add", {"r1", "c0"}, {"a1"});
  b.node("Conv", {"a1", "W2"}, {"c2"}, {attr("pads", pad1)});
  b.node("MaxPool", {"c2"}, {"p2"}, {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{2, 2})});
  b.node("Conv", {"p2", "W3", "B3"}, {"c3"}, {attr("pads", pad1)});
  b.node("GlobalAveragePool", {"c3"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 3);
  const Graph& g = *session_model(*s).graph;
  EXPECT_EQ(count_ops(g, "NchwcConv"), 4);
  EXPECT_EQ(count_ops(g, "ReorderToNchwc"), 0);
  EXPECT_EQ(count_ops(g, "ReorderFromNchwc"), 0);
  expect_same_outputs(bytes, 3, {{"X", random_tensor({1, 3, 24, 24}, 9)}});
}

// DenseNet's pattern: a conv output read by a concat and by a batch norm (which cannot fold into
// the conv), BN + Relu before each conv, a 64 -> 32 3x3 conv (blocked Winograd from 64 inputs and
// 32 outputs). Everything runs blocked with no reorder, and matches the unoptimized model. A batch
// norm whose scale is a graph input is not converted (the chain ends there).
TEST(OptimizerLayout, DenseBlockRunsBlocked) {
  if (kernels::best_isa() < kernels::Isa::Avx2) GTEST_SKIP() << "the layout pass runs on AVX2 and AVX-512 CPUs only";
  for (bool fed_scale : {false, true}) {
    Builder b(15);
    b.input("X", {1, 3, 24, 24});
    if (fed_scale) b.input("S2", {64});
    b.init("W0", random_tensor({32, 3, 3, 3}, 1));
    b.init("W1", random_tensor({64, 32, 1, 1}, 2, -0.3f, 0.3f));
    b.init("W2", random_tensor({32, 64, 3, 3}, 3, -0.2f, 0.2f));
    b.init("W3", random_tensor({48, 64, 1, 1}, 4, -0.3f, 0.3f));
    for (int k : {1, 2}) {
      const int64_t c = k == 1 ? 32 : 64;
      const std::string i = std::to_string(k);
      if (k == 1 || !fed_scale) b.init("S" + i, random_tensor({c}, uint32_t(10 + k), 0.5f, 1.5f));
      b.init("T" + i, random_tensor({c}, uint32_t(20 + k)));
      b.init("M" + i, random_tensor({c}, uint32_t(30 + k)));
      b.init("V" + i, random_tensor({c}, uint32_t(40 + k), 0.5f, 2.f));
    }
    const Ints pad1{1, 1, 1, 1};
    b.node("Conv", {"X", "W0"}, {"c0"}, {attr("pads", pad1)});
    b.node("BatchNormalization", {"c0", "S1", "T1", "M1", "V1"}, {"n1"});
    b.node("Relu", {"n1"}, {"r1"});
    b.node("Conv", {"r1", "W1"}, {"c1"});
    b.node("Relu", {"c1"}, {"r2"});
    b.node("Conv", {"r2", "W2"}, {"c2"}, {attr("pads", pad1)});
    b.node("Concat", {"c0", "c2"}, {"k"}, {attr("axis", int64_t(1))});
    b.node("BatchNormalization", {"k", "S2", "T2", "M2", "V2"}, {"n2"});
    b.node("Relu", {"n2"}, {"r3"});
    b.node("Conv", {"r3", "W3"}, {"c3"});
    b.node("GlobalAveragePool", {"c3"}, {"Y"});
    b.output("Y");
    std::string bytes = b.bytes();
    auto s = open(bytes, 3);
    const Graph& g = *session_model(*s).graph;
    EXPECT_EQ(count_ops(g, "NchwcBatchNormalization"), fed_scale ? 1 : 2) << "fed scale " << fed_scale;
    if (!fed_scale) {
      EXPECT_EQ(count_ops(g, "NchwcConv"), 4);
      EXPECT_EQ(count_ops(g, "ReorderToNchwc"), 0);
      EXPECT_EQ(count_ops(g, "ReorderFromNchwc"), 0);
    }
    std::vector<std::pair<std::string, Value>> feeds = {{"X", random_tensor({1, 3, 24, 24}, 9)}};
    if (fed_scale) feeds.push_back({"S2", random_tensor({64}, 12, 0.5f, 1.5f)});
    expect_same_outputs(bytes, 3, feeds);
  }
}

// An input whose channel count the model leaves open: 24 channels instead of the 20 the first conv
// takes fill the same two blocks, and must still be an error naming the mismatch (not a result).
TEST(OptimizerLayout, WrongChannelCountIsAnError) {
  if (kernels::best_isa() < kernels::Isa::Avx2) GTEST_SKIP() << "the layout pass runs on AVX2 and AVX-512 CPUs only";
  Builder b;
  b.input("X", {1, 20, 9, 9});
  b.g->values[size_t(b.value("X"))].type.dims[1] = DimInfo{-1, "C"};
  const char* ins[] = {"X", "c1", "c2", "c3"};
  for (int i = 0; i < 4; ++i) {
    std::string w = "W" + std::to_string(i);
    b.init(w, random_tensor({32, i == 0 ? 20 : 32, 1, 1}, uint32_t(i + 1)));
    b.node("Conv", {ins[i], w}, {i == 3 ? std::string("Y") : "c" + std::to_string(i + 1)});
  }
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 3);
  ASSERT_EQ(count_ops(*session_model(*s).graph, "NchwcConv"), 4);
  expect_same_outputs(bytes, 3, {{"X", random_tensor({1, 20, 9, 9}, 9)}});
  try {
    s->run({{"X", random_tensor({1, 24, 9, 9}, 9)}});
    ADD_FAILURE() << "a 24-channel input ran";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("24 channels"), std::string::npos) << e.what();
  }
}

// Two convs with a reorder in and one out: the chain is not worth the reorders (stays NCHW).
TEST(OptimizerLayout, ShortChainWithReordersStaysNchw) {
  if (kernels::best_isa() < kernels::Isa::Avx2) GTEST_SKIP() << "the layout pass runs on AVX2 and AVX-512 CPUs only";
  Builder b;
  b.input("X", {1, 64, 9, 9});
  b.init("W1", random_tensor({128, 64, 1, 1}, 1));
  b.init("W2", random_tensor({64, 128, 1, 1}, 2));
  b.node("Conv", {"X", "W1"}, {"c1"});
  b.node("Conv", {"c1", "W2"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 3);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "NchwcConv"), 0);
  EXPECT_TRUE(rejected_with(report_of(*s), "NCHWc layout", "not worth"));
}

// A stem alone runs blocked: one conv on a 3-channel input whose output goes to an op that stays
// NCHW (here Softmax) becomes NchwcConv (reading the plain input) and one ReorderFromNchwc, with
// the outputs of the NCHW graph. A single conv on a blocked-width input stays NCHW (above).
TEST(OptimizerLayout, StemAloneRunsBlocked) {
  if (kernels::best_isa() < kernels::Isa::Avx2) GTEST_SKIP() << "the layout pass runs on AVX2 and AVX-512 CPUs only";
  Builder b;
  b.input("X", {1, 3, 13, 11});
  b.init("W", random_tensor({20, 3, 3, 3}, 1));
  b.init("B", random_tensor({20}, 2));
  b.node("Conv", {"X", "W", "B"}, {"c"}, {attr("pads", Ints{1, 1, 1, 1}), attr("kernel_shape", Ints{3, 3})});
  b.node("Relu", {"c"}, {"r"});
  b.node("Softmax", {"r"}, {"Y"}, {attr("axis", int64_t(1))});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 3);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "NchwcConv"), 1);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "ReorderFromNchwc"), 1);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "ReorderToNchwc"), 0);
  expect_same_outputs(bytes, 3, {{"X", random_tensor({1, 3, 13, 11}, 9)}});
}

// Kernels prepare (pack weights) on the session's pool, a node per chunk: when several nodes fail,
// the error is the first failing node's in graph order, whatever thread met which failure first.
TEST(Prepare, FirstFailingNodeInGraphOrderIsReported) {
  Builder b;
  b.m->opsets["basalt"] = 1;
  b.input("X", {1, 2, 6, 6, 16});
  std::string x = "X";
  for (int i = 0; i < 6; ++i) {
    std::string w = "W" + std::to_string(i), bias = "B" + std::to_string(i), y = "Y" + std::to_string(i);
    b.init(w, random_tensor({32, 32, 1, 1}, uint32_t(i + 1)));
    // nodes 2 and 4 get a bias of the wrong size, an error only prepare() sees
    b.init(bias, random_tensor({i == 2 || i == 4 ? 31 : 32}, uint32_t(i + 11)));
    Node& n = b.node("NchwcConv", {x, w, bias}, {y}, {attr("kernel_shape", Ints{1, 1})}, "conv" + std::to_string(i));
    n.domain = "basalt";
    n.opset = 1;
    x = y;
  }
  b.output(x);
  std::string bytes = b.bytes();
  for (int threads : {1, 2, 3})
    for (int rep = 0; rep < 5; ++rep) {
      SessionOptions o;
      o.optimization_level = 0;
      o.threads = threads;
      try {
        Session::from_bytes(bytes.data(), bytes.size(), o);
        ADD_FAILURE() << "no error at " << threads << " threads";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("conv2"), std::string::npos) << threads << " threads: " << e.what();
        EXPECT_NE(std::string(e.what()).find("B must have 32 elements"), std::string::npos) << e.what();
      }
    }
}

// Static shapes pass through Transpose (perm, or reversed axes by default; symbols move along),
// so a residual that went through a channel shuffle (Reshape -> Transpose -> Reshape, as in
// ShuffleNet) is provably the Conv output's shape and Conv+Add+Relu folds; the outputs match.
TEST(Optimizer, ResidualThroughChannelShuffleFolds) {
  Builder b;
  b.input("X", {1, 4, 5, 5});
  b.init("W", random_tensor({4, 4, 3, 3}, 1));
  b.init("s5", Tensor::from_vector<int64_t>({1, 2, 2, 5, 5}, Shape{5}));
  b.init("s4", Tensor::from_vector<int64_t>({1, 4, 5, 5}, Shape{4}));
  b.node("Reshape", {"X", "s5"}, {"r5"});
  b.node("Transpose", {"r5"}, {"t5"}, {attr("perm", Ints{0, 2, 1, 3, 4})});
  b.node("Reshape", {"t5", "s4"}, {"Z"});
  b.node("Conv", {"X", "W"}, {"C"}, {attr("pads", Ints{1, 1, 1, 1})}, "conv");
  b.node("Add", {"C", "Z"}, {"S"});
  b.node("Relu", {"S"}, {"Y"});
  b.output("Y");
  std::string bytes = b.bytes();
  auto s = open(bytes, 2);
  if (!has_fused_conv_kernel()) GTEST_SKIP() << "no basalt::FusedConv kernel";
  EXPECT_EQ(report_of(*s).fusions.at("Conv+Add+Relu"), 1);
  EXPECT_EQ(count_ops(*session_model(*s).graph, "Add"), 0);
  expect_same_outputs(bytes, 2, {{"X", random_tensor({1, 4, 5, 5}, 2)}});

  Builder t;
  t.input("A", {2, 3, 7});
  t.input("B", {-1, 3, 7});
  t.g->values[size_t(t.value("B"))].type.dims[0].param = "batch";
  t.node("Transpose", {"A"}, {"ta"});  // default: reversed axes
  t.node("Transpose", {"B"}, {"tb"}, {attr("perm", Ints{2, 0, 1})});
  t.node("Transpose", {"A"}, {"te"}, {attr("perm", Ints{})});  // explicit empty perm: not reversed
  t.output("ta");
  t.output("tb");
  t.output("te");
  auto u = open(t.bytes(), 0);
  const Graph& g = *session_model(*u).graph;
  const StaticShapes st = infer_static_shapes(g);
  Shape ta, tb, bs;
  ASSERT_TRUE(st.get(g.nodes[0].outputs[0], ta));
  EXPECT_EQ(ta, (Shape{7, 3, 2}));
  ASSERT_TRUE(st.get_symbolic(g.nodes[1].outputs[0], tb));
  ASSERT_TRUE(st.get_symbolic(g.nodes[1].inputs[0], bs));
  EXPECT_EQ(tb, (Shape{7, bs[0], 3}));
  EXPECT_LT(bs[0], 0);  // the symbol for "batch"
  Shape te;
  EXPECT_FALSE(st.get_symbolic(g.nodes[2].outputs[0], te));
}

}  // namespace
}  // namespace basalt
