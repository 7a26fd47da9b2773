// Transformer fusions (src/opt/fuse_transformer.cpp) on minimal graphs: each pattern where it
// applies (and the fused graph computes the same outputs as the unfused one) and where it must
// not (extra consumers, wrong axes, non-constant or mismatched parameters), with the reason the
// report gives. Also the fused kernels basalt::Attention and basalt::Gelu against the spelled-out
// computation.
#include "onnx/writer.hpp"
#include "op_tester.hpp"
#include "ops/common.hpp"
#include "opt/passes.hpp"
#include "graph/model.hpp"

#include <basalt/basalt.hpp>

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <iterator>
#include <random>
#include "runtime/session_access.hpp"

namespace basalt {
namespace {

// Builds a Model graph node by node (nodes are added in topological order).
struct GraphBuilder {
  std::shared_ptr<Model> m = std::make_shared<Model>();
  Graph* g = nullptr;
  int opset;
  int n = 0;

  explicit GraphBuilder(int opset_) : opset(opset_) {
    m->graph = std::make_shared<Graph>();
    g = m->graph.get();
    g->name = "test";
    m->opsets[""] = opset;
    m->ir_version = 8;
  }
  // A float input; dims < 0 are symbolic.
  int input(const std::string& name, const Shape& dims, DType dt = DType::Float) {
    int v = g->add_value(name);
    ValueDef& d = g->values[size_t(v)];
    d.is_graph_input = true;
    d.type.kind = TypeInfo::Kind::Tensor;
    d.type.elem = dt;
    d.type.has_shape = true;
    for (size_t i = 0; i < dims.size(); ++i)
      d.type.dims.push_back(dims[i] >= 0 ? DimInfo{dims[i], ""} : DimInfo{-1, "d" + std::to_string(i)});
    g->inputs.push_back(v);
    return v;
  }
  int constant(Tensor t) { return add_constant(*g, "c" + std::to_string(n++), std::move(t)); }
  int scalar(float x) { return constant(Tensor::scalar<float>(x)); }
  int ints(std::vector<int64_t> v) { return constant(Tensor::from_vector<int64_t>(v, {int64_t(v.size())})); }
  int floats(std::vector<float> v, Shape s = {}) { return constant(Tensor::from_vector<float>(v, s.empty() ? Shape{int64_t(v.size())} : s)); }
  int node(const std::string& op, std::vector<int> ins, std::vector<Attribute> attrs = {}, int node_opset = 0) {
    Node nd;
    nd.name = op + "_" + std::to_string(n++);
    nd.op_type = op;
    nd.opset = node_opset ? node_opset : opset;
    nd.inputs = std::move(ins);
    nd.attrs = std::move(attrs);
    int out = g->add_value(nd.name + "_out");
    nd.outputs = {out};
    g->values[size_t(out)].producer = int(g->nodes.size());
    g->nodes.push_back(std::move(nd));
    return out;
  }
  void output(int v) {
    ValueDef& d = g->values[size_t(v)];
    d.type.kind = TypeInfo::Kind::Tensor;
    d.type.elem = DType::Float;
    g->outputs.push_back(v);
  }
  std::string bytes() {
    g->finalize();
    return save_model_bytes(*m);
  }
};

Tensor random_tensor(const Shape& s, uint32_t seed, float lo = -1.f, float hi = 1.f) {
  Tensor t(DType::Float, s);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

double rel_l2(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  double num = 0, den = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    double d = double(a.data<float>()[i]) - double(b.data<float>()[i]);
    num += d * d;
    den += double(b.data<float>()[i]) * double(b.data<float>()[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

// Runs one pass on a copy of the builder's model and returns its report.
OptimizeReport run_pass(GraphBuilder& b, void (*pass)(PassContext&), bool standard_ops = false) {
  b.g->finalize();
  OptimizeOptions o;
  o.standard_ops = standard_ops;
  OptimizeReport rep;
  PassContext ctx{*b.m, *b.g, o, rep};
  pass(ctx);
  return rep;
}

int count_op(const Graph& g, const std::string& op) {
  int c = 0;
  for (auto& n : g.nodes) c += n.op_type == op;
  return c;
}

std::string reasons(const OptimizeReport& r) {
  std::string s;
  for (auto& x : r.rejected) s += x.pattern + " at " + x.node + ": " + x.reason + "\n";
  return s;
}

// Serializes the unoptimized model, runs it at optimization levels none and all, and checks the
// outputs agree (relative L2 <= tol). Returns the optimized session's fusion counts.
std::map<std::string, int> check_equivalent(GraphBuilder& b, const std::vector<std::pair<std::string, Value>>& feeds,
                                            double tol = 1e-5) {
  std::string bytes = b.bytes();
  SessionOptions none, all;
  none.optimization_level = 0;
  all.optimization_level = 3;
  none.threads = all.threads = 2;
  auto s0 = Session::from_bytes(bytes.data(), bytes.size(), none);
  auto s3 = Session::from_bytes(bytes.data(), bytes.size(), all);
  auto y0 = s0->run(feeds);
  auto y3 = s3->run(feeds);
  EXPECT_EQ(y0.size(), y3.size());
  for (size_t i = 0; i < y0.size() && i < y3.size(); ++i) EXPECT_LE(rel_l2(y3[i].tensor, y0[i].tensor), tol) << "output " << i;
  std::map<std::string, int> fusions;
  if (session_model(*s3).optimize_report) fusions = session_model(*s3).optimize_report->fusions;
  return fusions;
}

// ---- LayerNorm ----

// The PyTorch / PaddleOCR spelling. Options select the variants.
struct LnSpec {
  bool pow = true;           // Pow(d, 2) vs Mul(d, d)
  bool reciprocal = false;   // Mul(d, Reciprocal(std)) vs Div(d, std)
  bool affine = true;        // Mul(gamma), Add(beta)
  std::vector<int64_t> axes = {-1};
  bool sub_other_input = false;  // Sub from a different tensor than the ReduceMean input
};
int build_layernorm(GraphBuilder& b, int x, int64_t C, const LnSpec& s, int* d_out = nullptr) {
  int mean = b.node("ReduceMean", {x}, {make_attr_ints("axes", s.axes)});
  int src = s.sub_other_input ? b.node("Relu", {x}) : x;
  int d = b.node("Sub", {src, mean});
  if (d_out) *d_out = d;
  int sq = s.pow ? b.node("Pow", {d, b.scalar(2.f)}) : b.node("Mul", {d, d});
  int var = b.node("ReduceMean", {sq}, {make_attr_ints("axes", s.axes)});
  int sd = b.node("Sqrt", {b.node("Add", {var, b.scalar(1e-5f)})});
  int nrm = s.reciprocal ? b.node("Mul", {d, b.node("Reciprocal", {sd})}) : b.node("Div", {d, sd});
  if (!s.affine) return nrm;
  std::vector<float> gamma(static_cast<size_t>(C)), beta(static_cast<size_t>(C));
  for (int64_t i = 0; i < C; ++i) gamma[size_t(i)] = 1.f + 0.1f * float(i), beta[size_t(i)] = 0.05f * float(i);
  int y = b.node("Mul", {nrm, b.floats(gamma)});
  return b.node("Add", {b.floats(beta), y});  // beta first: operand order must not matter
}

TEST(Fusions, LayerNormPytorchSpelling) {
  GraphBuilder b(14);
  int x = b.input("x", {-1, 5, 8});
  b.output(build_layernorm(b, x, 8, {}));
  auto fus = check_equivalent(b, {{"x", random_tensor({2, 5, 8}, 1, -3, 3)}});
  EXPECT_EQ(fus["LayerNorm"], 1);
  auto rep = run_pass(b, fuse_layernorm);
  EXPECT_EQ(rep.fusions["LayerNorm"], 1) << reasons(rep);
  ASSERT_EQ(b.g->nodes.size(), 1u);
  const Node& ln = b.g->nodes[0];
  EXPECT_EQ(ln.op_type, "LayerNormalization");
  EXPECT_EQ(ln.opset, 17);  // an opset-14 model gets the op at its first opset
  EXPECT_NEAR(ln.attr_float("epsilon"), 1e-5f, 1e-12);
  EXPECT_EQ(ln.inputs.size(), 3u);
}

TEST(Fusions, LayerNormVariantsMulSquareReciprocalNoAffine) {
  GraphBuilder b(13);
  int x = b.input("x", {3, 16});
  LnSpec s;
  s.pow = false;
  s.reciprocal = true;
  s.affine = false;
  b.output(build_layernorm(b, x, 16, s));
  auto fus = check_equivalent(b, {{"x", random_tensor({3, 16}, 2)}});
  EXPECT_EQ(fus["LayerNorm"], 1);
  auto rep = run_pass(b, fuse_layernorm);
  EXPECT_EQ(rep.fusions["LayerNorm"], 1) << reasons(rep);
  EXPECT_EQ(count_op(*b.g, "LayerNormalization"), 1);
  EXPECT_EQ(b.g->nodes.size(), 1u);
}

TEST(Fusions, LayerNormRejectsWrongAxis) {
  GraphBuilder b(14);
  int x = b.input("x", {2, 5, 8});
  LnSpec s;
  s.axes = {1};
  b.output(build_layernorm(b, x, 8, s));
  auto rep = run_pass(b, fuse_layernorm);
  EXPECT_EQ(rep.fusions.count("LayerNorm"), 0u);
  ASSERT_EQ(rep.rejected.size(), 1u);
  EXPECT_NE(rep.rejected[0].reason.find("not the last axis"), std::string::npos) << rep.rejected[0].reason;
  EXPECT_EQ(count_op(*b.g, "LayerNormalization"), 0);
}

TEST(Fusions, LayerNormRejectsExtraConsumer) {
  GraphBuilder b(14);
  int x = b.input("x", {2, 8});
  int d = -1;
  b.output(build_layernorm(b, x, 8, {}, &d));
  b.output(d);  // x - mean is also a graph output: it must stay
  auto rep = run_pass(b, fuse_layernorm);
  EXPECT_EQ(rep.fusions.count("LayerNorm"), 0u);
  ASSERT_EQ(rep.rejected.size(), 1u) << reasons(rep);
  EXPECT_NE(rep.rejected[0].reason.find("graph output"), std::string::npos) << rep.rejected[0].reason;
}

TEST(Fusions, LayerNormRejectsSubOfAnotherTensor) {
  GraphBuilder b(14);
  int x = b.input("x", {2, 8});
  LnSpec s;
  s.sub_other_input = true;
  b.output(build_layernorm(b, x, 8, s));
  auto rep = run_pass(b, fuse_layernorm);
  EXPECT_EQ(rep.fusions.count("LayerNorm"), 0u);
  ASSERT_EQ(rep.rejected.size(), 1u) << reasons(rep);
  EXPECT_NE(rep.rejected[0].reason.find("not the ReduceMean input"), std::string::npos) << rep.rejected[0].reason;
}

TEST(Fusions, LayerNormNonConstantGammaStaysOutside) {
  // A Mul by a graph input is not a gamma: the LayerNorm is fused without it when the
  // normalized length is static, and rejected when it is not (LayerNormalization needs a scale).
  for (bool static_c : {true, false}) {
    GraphBuilder b(14);
    int x = b.input("x", {2, static_c ? 8 : -1});
    int gam = b.input("gamma", {8});
    LnSpec s;
    s.affine = false;
    b.output(b.node("Mul", {build_layernorm(b, x, 8, s), gam}));
    if (static_c) {
      auto fus = check_equivalent(b, {{"x", random_tensor({2, 8}, 3)}, {"gamma", random_tensor({8}, 4)}});
      EXPECT_EQ(fus["LayerNorm"], 1);
    }
    auto rep = run_pass(b, fuse_layernorm);
    if (static_c) {
      EXPECT_EQ(rep.fusions["LayerNorm"], 1) << reasons(rep);
      EXPECT_EQ(count_op(*b.g, "Mul"), 1);
    } else {
      EXPECT_EQ(rep.fusions.count("LayerNorm"), 0u);
      ASSERT_EQ(rep.rejected.size(), 1u);
      EXPECT_NE(rep.rejected[0].reason.find("not static"), std::string::npos) << rep.rejected[0].reason;
    }
  }
}

TEST(Fusions, LayerNormRejectsMismatchedGamma) {
  GraphBuilder b(14);
  int x = b.input("x", {2, 8});
  LnSpec s;
  s.affine = false;
  int y = b.node("Mul", {build_layernorm(b, x, 8, s), b.floats({1, 2, 3, 4}, {1, 4})});
  b.output(y);
  auto rep = run_pass(b, fuse_layernorm);
  EXPECT_EQ(rep.fusions.count("LayerNorm"), 0u);
  ASSERT_EQ(rep.rejected.size(), 1u);
  EXPECT_NE(rep.rejected[0].reason.find("gamma has 4 elements"), std::string::npos) << rep.rejected[0].reason;
}

TEST(Fusions, LayerNormStandardOpsNeedsOpset17) {
  for (int opset : {14, 17}) {
    GraphBuilder b(opset);
    int x = b.input("x", {2, 8});
    b.output(build_layernorm(b, x, 8, {}));
    auto rep = run_pass(b, fuse_layernorm, /*standard_ops=*/true);
    if (opset == 17) {
      EXPECT_EQ(rep.fusions["LayerNorm"], 1) << reasons(rep);
      EXPECT_EQ(b.g->nodes[0].domain, "");
    } else {
      ASSERT_EQ(rep.rejected.size(), 1u);
      EXPECT_NE(rep.rejected[0].reason.find("opset 17"), std::string::npos);
    }
  }
}

// ---- GELU ----

// Erf GELU in three association orders: 0 = Mul(Mul(x, p), 0.5) (HF), 1 = Mul(Mul(p, 0.5), x),
// 2 = Mul(Mul(x, 0.5), p).
int build_gelu_erf(GraphBuilder& b, int x, int order, float half = 0.5f) {
  int e = b.node("Erf", {b.node("Div", {x, b.scalar(1.4142135f)})});
  int p = b.node("Add", {e, b.scalar(1.f)});
  if (order == 0) return b.node("Mul", {b.node("Mul", {x, p}), b.scalar(half)});
  if (order == 1) return b.node("Mul", {b.node("Mul", {p, b.scalar(half)}), x});
  return b.node("Mul", {b.node("Mul", {x, b.scalar(half)}), p});
}

TEST(Fusions, GeluErfAllOrders) {
  for (int order = 0; order < 3; ++order) {
    GraphBuilder b(14);
    int x = b.input("x", {4, 7});
    b.output(build_gelu_erf(b, x, order));
    auto fus = check_equivalent(b, {{"x", random_tensor({4, 7}, 5, -4, 4)}});
    EXPECT_EQ(fus["GELU(Erf)"], 1) << "order " << order;
    auto rep = run_pass(b, fuse_gelu);
    ASSERT_EQ(b.g->nodes.size(), 1u) << reasons(rep);
    EXPECT_EQ(b.g->nodes[0].domain, "basalt");  // opset 14 has no ai.onnx Gelu
    EXPECT_EQ(b.g->nodes[0].attr_string("approximate"), "none");
  }
}

TEST(Fusions, GeluOpset20UsesOnnxGelu) {
  GraphBuilder b(20);
  int x = b.input("x", {4, 7});
  b.output(build_gelu_erf(b, x, 0));
  auto rep = run_pass(b, fuse_gelu, /*standard_ops=*/true);
  ASSERT_EQ(b.g->nodes.size(), 1u) << reasons(rep);
  EXPECT_EQ(b.g->nodes[0].domain, "");
  EXPECT_EQ(b.g->nodes[0].op_type, "Gelu");
}

TEST(Fusions, GeluTanhForm) {
  GraphBuilder b(14);
  int x = b.input("x", {4, 7});
  int cube = b.node("Pow", {x, b.scalar(3.f)});
  int inner = b.node("Add", {x, b.node("Mul", {b.scalar(0.044715f), cube})});
  int t = b.node("Tanh", {b.node("Mul", {inner, b.scalar(0.7978845608f)})});
  int p = b.node("Add", {b.scalar(1.f), t});
  b.output(b.node("Mul", {b.node("Mul", {b.scalar(0.5f), x}), p}));
  auto fus = check_equivalent(b, {{"x", random_tensor({4, 7}, 6, -4, 4)}});
  EXPECT_EQ(fus["GELU(Tanh)"], 1);
  auto rep = run_pass(b, fuse_gelu);
  ASSERT_EQ(b.g->nodes.size(), 1u) << reasons(rep);
  EXPECT_EQ(b.g->nodes[0].attr_string("approximate"), "tanh");
}

TEST(Fusions, GeluRejectsWrongConstantAndExtraConsumer) {
  {
    GraphBuilder b(14);
    int x = b.input("x", {4});
    b.output(build_gelu_erf(b, x, 0, 0.6f));  // x * 0.6 * (1 + erf): not a GELU
    auto rep = run_pass(b, fuse_gelu);
    EXPECT_EQ(rep.fusions.size(), 0u);
    ASSERT_EQ(rep.rejected.size(), 1u);
    EXPECT_NE(rep.rejected[0].reason.find("0.5"), std::string::npos) << rep.rejected[0].reason;
  }
  {
    GraphBuilder b(14);
    int x = b.input("x", {4});
    b.output(build_gelu_erf(b, x, 0));
    b.output(b.g->nodes[1].outputs[0]);  // the Erf output is also a graph output
    auto rep = run_pass(b, fuse_gelu);
    EXPECT_EQ(rep.fusions.size(), 0u);
    ASSERT_EQ(rep.rejected.size(), 1u);
    EXPECT_NE(rep.rejected[0].reason.find("graph output"), std::string::npos) << rep.rejected[0].reason;
  }
}

// ---- Attention ----

struct AttnSpec {
  bool mask = true;
  bool k_two_transposes = false;  // Transpose [0,2,1,3] then [0,1,3,2] instead of [0,2,3,1]
  bool probs_output = false;      // the Softmax output is also a graph output
  bool foreign_shape = false;     // head-split shape taken from an unrelated tensor's size
  bool mul_scale = false;         // Mul(1/sqrt(d)) instead of Div(sqrt(d))
  bool sdpa_scale = false;        // Q and K^T each multiplied by sqrt(1/sqrt(d)), no scale after the MatMul
  Shape static_bs;                // a static export: constant reshape targets [B, S, ...]
  bool declare_types = false;     // with static_bs: the reshaped tensors carry their static shapes
};

// x [B, S, H*D] -> BERT self-attention as torch.onnx writes it (projections without bias).
int build_attention(GraphBuilder& b, int x, int mask, int64_t H, int64_t D, const AttnSpec& s, int other = -1) {
  const int64_t hid = H * D;
  auto size_shape = [&](int t, std::vector<int64_t> tail) {
    int sh = b.node("Shape", {t});
    std::vector<int> parts;
    for (int i = 0; i < 2; ++i)
      parts.push_back(b.node("Unsqueeze", {b.node("Gather", {sh, b.constant(Tensor::scalar<int64_t>(i))}, {make_attr_int("axis", 0)}), b.ints({0})}));
    for (int64_t v : tail) parts.push_back(b.ints({v}));
    return b.node("Concat", parts, {make_attr_int("axis", 0)});
  };
  auto proj = [&](uint32_t seed) {
    return b.node("MatMul", {x, b.constant(random_tensor({hid, hid}, seed, -0.5f, 0.5f))});
  };
  auto declare = [&](int v, Shape dims) {
    if (!s.declare_types) return;
    TypeInfo& t = b.g->values[size_t(v)].type;
    t.kind = TypeInfo::Kind::Tensor;
    t.elem = DType::Float;
    t.has_shape = true;
    for (int64_t d : dims) t.dims.push_back(DimInfo{d, ""});
  };
  auto target = [&](int t, std::vector<int64_t> tail) {
    if (s.static_bs.empty()) return size_shape(t, tail);
    std::vector<int64_t> full = {s.static_bs[0], s.static_bs[1]};
    full.insert(full.end(), tail.begin(), tail.end());
    return b.ints(full);
  };
  auto split = [&](int p) {
    if (!s.static_bs.empty()) declare(p, {s.static_bs[0], s.static_bs[1], hid});
    return b.node("Reshape", {p, target(s.foreign_shape ? other : p, {H, D})});
  };
  int q = b.node("Transpose", {split(proj(11))}, {make_attr_ints("perm", {0, 2, 1, 3})});
  int kr = split(proj(12));
  int kt = s.k_two_transposes
               ? b.node("Transpose", {b.node("Transpose", {kr}, {make_attr_ints("perm", {0, 2, 1, 3})})}, {make_attr_ints("perm", {0, 1, 3, 2})})
               : b.node("Transpose", {kr}, {make_attr_ints("perm", {0, 2, 3, 1})});
  int v = b.node("Transpose", {split(proj(13))}, {make_attr_ints("perm", {0, 2, 1, 3})});
  if (s.sdpa_scale) {
    const float r = float(std::sqrt(1.0 / std::sqrt(double(D))));
    q = b.node("Mul", {q, b.scalar(r)});
    kt = b.node("Mul", {kt, b.scalar(r)});
  }
  int sc = b.node("MatMul", {q, kt});
  if (!s.sdpa_scale)
    sc = s.mul_scale ? b.node("Mul", {sc, b.scalar(float(1.0 / std::sqrt(double(D))))}) : b.node("Div", {sc, b.scalar(float(std::sqrt(double(D))))});
  if (s.mask) sc = b.node("Add", {sc, mask});
  int pr = b.node("Softmax", {sc}, {make_attr_int("axis", -1)});
  if (s.probs_output) b.output(pr);
  int c = b.node("Transpose", {b.node("MatMul", {pr, v})}, {make_attr_ints("perm", {0, 2, 1, 3})});
  if (!s.static_bs.empty()) declare(c, {s.static_bs[0], s.static_bs[1], H, D});
  return b.node("Reshape", {c, target(c, {hid})});
}

// The HF extended mask: (1 - mask[:, None, None, :]) * -10000.
int build_mask(GraphBuilder& b, int m) {
  int m4 = b.node("Unsqueeze", {b.node("Unsqueeze", {m, b.ints({1})}), b.ints({2})});
  return b.node("Mul", {b.node("Sub", {b.scalar(1.f), m4}), b.scalar(-10000.f)});
}

Tensor padding_mask(int64_t B, int64_t S) {
  Tensor t(DType::Float, {B, S});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t s = 0; s < S; ++s) t.data<float>()[b * S + s] = s < S - b ? 1.f : 0.f;  // batch b pads b tokens
  return t;
}

TEST(Fusions, AttentionBertExport) {
  for (int variant = 0; variant < 4; ++variant) {
    GraphBuilder b(14);
    int x = b.input("x", {-1, -1, 12});
    int m = b.input("mask", {-1, -1});
    AttnSpec s;
    s.k_two_transposes = variant == 1 || variant == 3;
    s.mul_scale = variant == 2;
    s.sdpa_scale = variant == 3;
    b.output(build_attention(b, x, build_mask(b, m), 3, 4, s));
    auto fus = check_equivalent(b, {{"x", random_tensor({2, 5, 12}, 7)}, {"mask", padding_mask(2, 5)}});
    EXPECT_EQ(fus["Attention"], 1) << "variant " << variant;
    auto rep = run_pass(b, fuse_attention);
    EXPECT_EQ(rep.fusions["Attention"], 1) << reasons(rep);
    ASSERT_EQ(count_op(*b.g, "Attention"), 1);
    EXPECT_EQ(count_op(*b.g, "Softmax"), 0);
    EXPECT_EQ(count_op(*b.g, "Transpose"), 0);
    for (auto& n : b.g->nodes)
      if (n.op_type == "Attention") {
        EXPECT_EQ(n.attr_int("num_heads"), 3);
        EXPECT_NEAR(n.attr_float("scale"), 0.5f, 1e-6) << "variant " << variant;
        EXPECT_EQ(n.inputs.size(), 4u);
      }
  }
}

TEST(Fusions, AttentionStaticExportNeedsDeclaredShapes) {
  // Exported without dynamic axes, the head split is Reshape(x, [2, 5, 3, 4]): the constants are
  // the input's dims only if the graph says so (value_info); otherwise the candidate is rejected.
  for (bool declared : {true, false}) {
    GraphBuilder b(14);
    int x = b.input("x", {2, 5, 12});
    int m = b.input("mask", {2, 5});
    AttnSpec s;
    s.static_bs = {2, 5};
    s.declare_types = declared;
    b.output(build_attention(b, x, build_mask(b, m), 3, 4, s));
    if (declared) {
      auto fus = check_equivalent(b, {{"x", random_tensor({2, 5, 12}, 7)}, {"mask", padding_mask(2, 5)}});
      EXPECT_EQ(fus["Attention"], 1);
    }
    auto rep = run_pass(b, fuse_attention);
    if (declared) {
      EXPECT_EQ(rep.fusions["Attention"], 1) << reasons(rep);
    } else {
      ASSERT_EQ(rep.rejected.size(), 1u);
      EXPECT_NE(rep.rejected[0].reason.find("not provably input dim 0"), std::string::npos) << rep.rejected[0].reason;
    }
  }
}

TEST(Fusions, AttentionWithoutMaskAndLongerSequence) {
  // More query rows than one kernel block, odd head size.
  GraphBuilder b(14);
  int x = b.input("x", {-1, -1, 10});
  AttnSpec s;
  s.mask = false;
  b.output(build_attention(b, x, -1, 2, 5, s));
  auto fus = check_equivalent(b, {{"x", random_tensor({1, 200, 10}, 8)}});
  EXPECT_EQ(fus["Attention"], 1);
}

TEST(Fusions, AttentionRejectsExtraConsumerAndUnprovableShape) {
  {
    GraphBuilder b(14);
    int x = b.input("x", {2, 5, 12});
    int m = b.input("mask", {2, 5});
    AttnSpec s;
    s.probs_output = true;
    b.output(build_attention(b, x, build_mask(b, m), 3, 4, s));
    auto rep = run_pass(b, fuse_attention);
    EXPECT_EQ(rep.fusions.count("Attention"), 0u);
    ASSERT_EQ(rep.rejected.size(), 1u);
    EXPECT_NE(rep.rejected[0].reason.find("graph output"), std::string::npos) << rep.rejected[0].reason;
  }
  {
    GraphBuilder b(14);
    int x = b.input("x", {2, 5, 12});
    int m = b.input("mask", {2, 5});
    int other = b.input("other", {10, 1});
    AttnSpec s;
    s.foreign_shape = true;
    b.output(build_attention(b, x, build_mask(b, m), 3, 4, s, other));
    auto rep = run_pass(b, fuse_attention);
    EXPECT_EQ(rep.fusions.count("Attention"), 0u);
    ASSERT_EQ(rep.rejected.size(), 1u);
    EXPECT_NE(rep.rejected[0].reason.find("not provably input dim"), std::string::npos) << rep.rejected[0].reason;
  }
}

// ---- MatMul + Add, Transpose + MatMul ----

TEST(Fusions, MatMulAddToFusedMatMul) {
  GraphBuilder b(14);
  int a = b.input("a", {-1, 3, 6});
  int y = b.node("MatMul", {a, b.constant(random_tensor({6, 5}, 9))});
  b.output(b.node("Add", {b.constant(random_tensor({5}, 10)), y}));
  auto fus = check_equivalent(b, {{"a", random_tensor({2, 3, 6}, 11)}});
  EXPECT_EQ(fus["MatMul+Add"], 1);
  auto rep = run_pass(b, fuse_matmul_add);
  ASSERT_EQ(b.g->nodes.size(), 1u) << reasons(rep);
  EXPECT_EQ(b.g->nodes[0].op_type, "FusedMatMul");
  EXPECT_EQ(b.g->nodes[0].inputs.size(), 3u);
}

TEST(Fusions, MatMulAddRejectsNonConstantAndNonChannelBias) {
  {
    GraphBuilder b(14);
    int a = b.input("a", {3, 6});
    int r = b.input("r", {3, 5});
    b.output(b.node("Add", {b.node("MatMul", {a, b.constant(random_tensor({6, 5}, 9))}), r}));
    auto rep = run_pass(b, fuse_matmul_add);
    ASSERT_EQ(rep.rejected.size(), 1u);
    EXPECT_NE(rep.rejected[0].reason.find("not a constant bias"), std::string::npos) << rep.rejected[0].reason;
    EXPECT_EQ(b.g->nodes.size(), 2u);
  }
  {
    GraphBuilder b(14);
    int a = b.input("a", {3, 6});
    b.output(b.node("Add", {b.node("MatMul", {a, b.constant(random_tensor({6, 5}, 9))}), b.constant(random_tensor({3, 5}, 1))}));
    auto rep = run_pass(b, fuse_matmul_add);
    ASSERT_EQ(rep.rejected.size(), 1u);
    EXPECT_NE(rep.rejected[0].reason.find("not over the last axis"), std::string::npos) << rep.rejected[0].reason;
  }
}

TEST(Fusions, TransposeFoldedIntoMatMul) {
  for (int side = 0; side < 2; ++side) {
    GraphBuilder b(14);
    int a = b.input("a", {2, 6, 3});
    int c = b.input("c", {2, 4, 6});
    int at = b.node("Transpose", {a}, {make_attr_ints("perm", {0, 2, 1})});
    int y = side == 0 ? b.node("MatMul", {at, b.node("Transpose", {c}, {make_attr_ints("perm", {0, 2, 1})})})
                      : b.node("MatMul", {b.node("Relu", {at}), b.node("Transpose", {c}, {make_attr_ints("perm", {0, 2, 1})})});
    b.output(y);
    auto fus = check_equivalent(b, {{"a", random_tensor({2, 6, 3}, 12)}, {"c", random_tensor({2, 4, 6}, 13)}});
    EXPECT_EQ(fus["Transpose+MatMul"], side == 0 ? 2 : 1);
    auto rep = run_pass(b, fold_transpose_into_matmul);
    EXPECT_EQ(count_op(*b.g, "Transpose"), side == 0 ? 0 : 1) << reasons(rep);
    for (auto& n : b.g->nodes)
      if (n.op_type == "FusedMatMul") {
        EXPECT_EQ(n.attr_int("transB", 0), 1);
        EXPECT_EQ(n.attr_int("transA", 0), side == 0 ? 1 : 0);
      }
  }
}

TEST(Fusions, TransposeWithTwoConsumersStays) {
  GraphBuilder b(14);
  int a = b.input("a", {6, 3});
  int at = b.node("Transpose", {a}, {make_attr_ints("perm", {1, 0})});
  b.output(b.node("MatMul", {at, b.constant(random_tensor({6, 2}, 1))}));
  b.output(at);
  auto rep = run_pass(b, fold_transpose_into_matmul);
  EXPECT_EQ(count_op(*b.g, "Transpose"), 1);
  ASSERT_EQ(rep.rejected.size(), 1u);
  EXPECT_NE(rep.rejected[0].reason.find("graph output"), std::string::npos) << rep.rejected[0].reason;
}

// ---- the fused kernels on bad input ----

// A graph of one basalt::Attention node (inputs q, k, v and, when with_mask, m).
std::string attention_node_model(bool with_mask, int64_t heads) {
  GraphBuilder b(14);
  b.m->opsets["basalt"] = 1;
  std::vector<int> ins = {b.input("q", {-1, -1, -1}), b.input("k", {-1, -1, -1}), b.input("v", {-1, -1, -1})};
  if (with_mask) ins.push_back(b.input("m", {-1, -1, -1, -1}));
  Node& n = b.g->nodes.emplace_back();
  n.name = "attn";
  n.op_type = "Attention";
  n.domain = "basalt";
  n.opset = 1;
  n.inputs = ins;
  n.attrs = {make_attr_int("num_heads", heads), make_attr_float("scale", 0.3f)};
  int y = b.g->add_value("y");
  n.outputs = {y};
  b.g->values[size_t(y)].producer = 0;
  b.output(y);
  return b.bytes();
}

// softmax(0.3 * Q_h K_h^T + mask) V_h per head, in double.
Tensor attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor* m, int64_t H) {
  const int64_t B = q.dim(0), Sq = q.dim(1), Sk = k.dim(1), D = q.dim(2) / H, Dv = v.dim(2) / H;
  Tensor y(DType::Float, {B, Sq, H * Dv});
  Shape full = {B, H, Sq, Sk};
  std::vector<int64_t> ms(4, 0);
  if (m) {
    int64_t st = 1;
    for (int d = 3, md = m->rank() - 1; md >= 0; --d, --md) {
      ms[size_t(d)] = m->dim(md) == 1 ? 0 : st;
      st *= m->dim(md);
    }
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t s = 0; s < Sq; ++s) {
        std::vector<double> sc(static_cast<size_t>(Sk));
        double mx = -1e300, sum = 0;
        for (int64_t t = 0; t < Sk; ++t) {
          double acc = 0;
          for (int64_t d = 0; d < D; ++d)
            acc += double(q.data<float>()[(b * Sq + s) * H * D + h * D + d]) * k.data<float>()[(b * Sk + t) * H * D + h * D + d];
          acc *= 0.3;
          if (m) acc += m->data<float>()[b * ms[0] + h * ms[1] + s * ms[2] + t * ms[3]];
          sc[size_t(t)] = acc;
          mx = std::max(mx, acc);
        }
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t t = 0; t < Sk; ++t) acc += sc[size_t(t)] / sum * v.data<float>()[(b * Sk + t) * H * Dv + h * Dv + e];
          y.data<float>()[(b * Sq + s) * H * Dv + h * Dv + e] = float(acc);
        }
      }
  return y;
}

// Every mask layout, 1-3 threads (B * H = 6 (batch, head) tasks: chunks of 3 and of 2), on a
// short sequence (one block of query rows) and on Sq = 300 > kAttnRows = 128 (src/ops/attention.cpp:
// blocks of 128, 128 and 44 query rows, the mask offset to each block's rows) with Sk = 161 keys,
// the last 17 of them padding (-inf) in every layout with a key axis.
TEST(Fusions, AttentionKernelMatchesReferenceForEveryMaskLayout) {
  struct Dims {
    int64_t B, H, Sq, Sk, D, Dv;
    bool pad;  // -inf mask on the last keys
  };
  uint32_t seed = 21;
  for (const Dims& dm : {Dims{2, 3, 7, 9, 5, 4, false}, Dims{2, 3, 300, 161, 8, 6, true}}) {
    const int64_t B = dm.B, H = dm.H, Sq = dm.Sq, Sk = dm.Sk, D = dm.D, Dv = dm.Dv;
    Tensor q = random_tensor({B, Sq, H * D}, seed++), k = random_tensor({B, Sk, H * D}, seed++),
           v = random_tensor({B, Sk, H * Dv}, seed++);
    // Column mask (epilogue col_bias), dense plane (residual), row mask and a per-head plane with
    // broadcast columns (added after the GEMM), and no mask.
    for (Shape ms : {Shape{B, 1, 1, Sk}, Shape{B, H, Sq, Sk}, Shape{Sq, Sk}, Shape{B, 1, Sq, 1}, Shape{1, H, 1, Sk}, Shape{}}) {
      const bool with_mask = !ms.empty();
      const std::string what = "Sq " + std::to_string(Sq) + " Sk " + std::to_string(Sk) + " mask " + shape_str(ms);
      Tensor m = with_mask ? random_tensor(ms, seed++, -2, 2) : Tensor();
      if (with_mask && dm.pad && ms.back() == Sk)
        for (int64_t i = 0; i < m.numel(); ++i)
          if (i % Sk >= Sk - 17) m.data<float>()[i] = -INFINITY;
      if (m.defined() && m.rank() == 2) m = m.reshaped({1, 1, Sq, Sk});
      const Tensor ref = attention_reference(q, k, v, with_mask ? &m : nullptr, H);
      std::string bytes = attention_node_model(with_mask, H);
      for (int threads : {1, 2, 3}) {
        SessionOptions o;
        o.optimization_level = 0;
        o.threads = threads;
        auto s = Session::from_bytes(bytes.data(), bytes.size(), o);
        std::vector<std::pair<std::string, Value>> feeds = {{"q", q}, {"k", k}, {"v", v}};
        if (with_mask) feeds.push_back({"m", m});
        auto y = s->run(feeds);
        ASSERT_EQ(y[0].tensor.shape(), ref.shape()) << what;
        EXPECT_LE(rel_l2(y[0].tensor, ref), 1e-5) << what << ", threads " << threads;
      }
    }
  }
}

TEST(Fusions, GeluKernelFloatTypesAndBadType) {
  // basalt::Gelu on double (computed through float32, like ai.onnx Gelu's float path) and int32.
  for (DType dt : {DType::Double, DType::Int32}) {
    GraphBuilder b(14);
    b.m->opsets["basalt"] = 1;
    int x = b.input("x", {5}, dt);
    for (const char* approx : {"none", "tanh"}) {
      Node& n = b.g->nodes.emplace_back();
      n.name = std::string("gelu_") + approx;
      n.op_type = "Gelu";
      n.domain = "basalt";
      n.opset = 1;
      n.inputs = {x};
      n.attrs = {make_attr_string("approximate", approx)};
      int y = b.g->add_value(n.name + "_y");
      n.outputs = {y};
      b.g->values[size_t(y)].producer = int(b.g->nodes.size()) - 1;
      b.output(y);
      b.g->values[size_t(y)].type.elem = dt;
    }
    std::string bytes = b.bytes();
    SessionOptions o;
    o.optimization_level = 0;
    auto s = Session::from_bytes(bytes.data(), bytes.size(), o);
    if (dt == DType::Int32) {
      try {
        s->run({{"x", Tensor::from_vector<int32_t>({1, 2, 3, 4, 5})}});
        FAIL() << "expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("gelu_none"), std::string::npos) << e.what();
      }
      continue;
    }
    std::vector<double> xs = {-3.0, -0.5, 0.0, 0.7, 2.5};
    auto y = s->run({{"x", Tensor::from_vector<double>(xs)}});
    ASSERT_EQ(y.size(), 2u);
    for (size_t i = 0; i < xs.size(); ++i) {
      double v = xs[i];
      double erf_form = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
      double tanh_form = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
      EXPECT_EQ(y[0].tensor.dtype(), DType::Double);
      EXPECT_NEAR(y[0].tensor.data<double>()[i], erf_form, 1e-6);
      EXPECT_NEAR(y[1].tensor.data<double>()[i], tanh_form, 1e-6);
    }
  }
}

// basalt::Gelu on float16 and bfloat16 (computed through float32): bit-identical to the float32
// op on the same (rounded) values, rounded to the type, in that type; both forms, 1-3 threads, on
// 8700 elements (chunks of 2730 for erf/tanh-cost ops: 4 chunks, the last partial) over
// [-6, 6), with zeros, small values and NaN (NaN in, NaN out).
TEST(Fusions, GeluKernelHalfTypesMatchFloat) {
  using test::attr;
  using test::run_op;
  Tensor base = random_tensor({3, 2900}, 31, -6.f, 6.f);
  const float specials[] = {0.f, -0.f, 1e-3f, -1e-3f, 1e-6f, NAN};
  for (size_t i = 0; i < std::size(specials); ++i) base.data<float>()[i * 97] = specials[i];
  for (DType dt : {DType::Float16, DType::BFloat16})
    for (const char* approx : {"none", "tanh"}) {
      const Tensor xh = from_float32(base, dt), xf = to_float32(xh);
      for (int threads : {1, 2, 3}) {
        const std::string what = std::string(dtype_name(dt)) + " " + approx + " threads " + std::to_string(threads);
        Tensor got = run_op("Gelu", 1, {xh}, {attr("approximate", approx)}, 1, "basalt", threads)[0].tensor;
        Tensor want32 = run_op("Gelu", 1, {xf}, {attr("approximate", approx)}, 1, "basalt", threads)[0].tensor;
        ASSERT_EQ(got.dtype(), dt) << what;
        ASSERT_EQ(got.shape(), xh.shape()) << what;
        ASSERT_EQ(want32.dtype(), DType::Float) << what;
        const Tensor want = from_float32(want32, dt);
        ASSERT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes())) << what;
        // and the float32 op is Gelu (the form's formula in double, within the row kernels' 2e-6)
        for (int64_t i = 0; i < xf.numel(); ++i) {
          const double v = xf.data<float>()[i], y = want32.data<float>()[i];
          const double r = std::string(approx) == "none" ? 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)))
                                                         : 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
          if (std::isnan(r)) ASSERT_TRUE(std::isnan(y)) << what << " element " << i;
          else ASSERT_NEAR(y, r, 2e-6 * (1 + std::fabs(r))) << what << " element " << i;
        }
      }
    }
}

TEST(Fusions, AttentionKernelRejectsBadShapes) {
  GraphBuilder b(14);
  b.m->opsets["basalt"] = 1;
  int q = b.input("q", {-1, -1, -1});
  int k = b.input("k", {-1, -1, -1});
  int v = b.input("v", {-1, -1, -1});
  int mk = b.input("m", {-1, -1, -1, -1});
  Node& n = b.g->nodes.emplace_back();
  n.name = "attn";
  n.op_type = "Attention";
  n.domain = "basalt";
  n.opset = 1;
  n.inputs = {q, k, v, mk};
  n.attrs = {make_attr_int("num_heads", 2)};
  int y = b.g->add_value("y");
  n.outputs = {y};
  b.g->values[size_t(y)].producer = 0;
  b.output(y);
  std::string bytes = b.bytes();
  SessionOptions o;
  o.optimization_level = 0;
  auto s = Session::from_bytes(bytes.data(), bytes.size(), o);
  auto run = [&](Shape qs, Shape ks, Shape ms) {
    return s->run({{"q", random_tensor(qs, 1)}, {"k", random_tensor(ks, 2)}, {"v", random_tensor(ks, 3)}, {"m", random_tensor(ms, 4)}});
  };
  EXPECT_NO_THROW(run({1, 3, 4}, {1, 5, 4}, {1, 1, 1, 5}));
  try {
    run({1, 3, 5}, {1, 5, 5}, {1, 1, 1, 5});  // 5 is not divisible by 2 heads
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("divisible by num_heads"), std::string::npos) << e.what();
  }
  try {
    run({1, 3, 4}, {1, 5, 4}, {1, 1, 3, 4});  // mask's last dim is not the key length
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does not broadcast"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace basalt
