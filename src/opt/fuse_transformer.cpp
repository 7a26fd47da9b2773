// Transformer-side fusions (issue 6): spelled-out LayerNorm, GELU (Erf and Tanh forms), the
// attention block as PyTorch exports BERT, MatMul + bias, and transposes folded into MatMul.
//
// Every matcher checks the whole pattern before it changes anything: the ops and their operand
// roles (in either operand order where the op commutes), constant operands and their values or
// shapes, axes, and that each intermediate value has exactly one consumer and is not a graph
// output (so removing it changes nothing else). A node that starts a pattern but fails a check is
// reported with ctx.reject(pattern, node, reason); nodes that merely share the anchor's op type
// (a Tanh that is not part of a GELU, a Transpose that is not a last-two-dims swap) are not.
//
// Rewrite convention (opt/graph_util.hpp): the LAST node of the chain is rewritten in place, the
// rest are dropped with compact(). Values that only fed the dropped nodes (shape subgraphs of the
// attention Reshapes, say) are left for remove_dead_nodes.
#include "ops/kernel.hpp"
#include "opt/match_util.hpp"
#include "opt/passes.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace basalt {
namespace {

// ---- LayerNorm -----------------------------------------------------------------------------

constexpr const char* kLayerNorm = "LayerNorm";

// The axes of a ReduceMean (attribute before opset 18, constant input from 18).
bool reduce_axes(const Graph& g, const Node& n, std::vector<int64_t>& axes) {
  if (n.opset >= 18) {
    if (n.inputs.size() < 2 || n.inputs[1] < 0) return false;
    const Tensor* t = constant_of(g, n.inputs[1]);
    if (!t) return false;
    axes = t->to_int64_vector();
    return true;
  }
  if (!n.has_attr("axes")) return false;
  axes = n.attr_ints("axes");
  return true;
}

// "" when n reduces over exactly the last axis of a rank-`rank` input (-1 = unknown rank) with
// keepdims; otherwise why not.
std::string last_axis_problem(const Graph& g, const Node& n, int rank) {
  std::vector<int64_t> axes;
  if (!reduce_axes(g, n, axes)) return n.name + " has no constant axes (it reduces over all axes)";
  if (n.attr_int("keepdims", 1) != 1) return n.name + " has keepdims=0";
  bool last = axes.size() == 1 && (axes[0] == -1 || (rank > 0 && axes[0] == rank - 1));
  if (!last) {
    std::string s;
    for (int64_t a : axes) s += (s.empty() ? "" : ",") + std::to_string(a);
    return n.name + " reduces over axes [" + s + "], not the last axis" + (rank < 0 ? " (input rank unknown)" : "");
  }
  return "";
}

// A per-channel parameter (gamma or beta) as a 1-D [C] constant: accepts [C] and [1,...,1,C],
// and [1]/scalar when C is known (expanded). C is updated when it was unknown (-1).
// With create=false only checks; with create=true also adds the reshaped/expanded constant.
std::string channel_param(PassContext& ctx, int v, int64_t& C, DType dt, const char* what, bool create, int& out) {
  Graph& g = ctx.graph;
  const Tensor* t = constant_of(g, v);
  if (!t) return std::string(what) + " " + vname(g, v) + " is not a constant";
  if (dt != DType::Undefined && t->dtype() != dt)
    return std::string(what) + " has type " + dtype_name(t->dtype()) + ", the input " + dtype_name(dt);
  for (int d = 0; d + 1 < t->rank(); ++d)
    if (t->dim(d) != 1)
      return std::string(what) + " shape " + shape_str(t->shape()) + " is not over the last axis only";
  int64_t n = t->rank() ? t->dim(-1) : 1;
  if (C < 0 && n == 1) return std::string(what) + " has one element and the normalized axis length is not static";
  if (C >= 0 && n != C && n != 1)
    return std::string(what) + " has " + std::to_string(n) + " elements, the normalized axis " + std::to_string(C);
  if (C < 0) C = n;
  if (n != C && t->dtype() != DType::Float)
    return std::string(what) + " would need expanding to " + std::to_string(C) + " elements (float32 only)";
  if (!create) return "";
  if (t->rank() == 1 && n == C) {
    out = v;
    return "";
  }
  if (n == C) {
    out = add_constant(g, g.values[size_t(v)].name + "_1d", t->reshaped({C}));
    return "";
  }
  Tensor e(DType::Float, {C});
  std::fill(e.data<float>(), e.data<float>() + C, t->data<float>()[0]);
  out = add_constant(g, g.values[size_t(v)].name + "_expanded", std::move(e));
  return "";
}

Match try_layernorm(PassContext& ctx, const GraphIndex& ix, int i, std::vector<bool>& dead) {
  Graph& g = ctx.graph;
  const Node& m1 = g.nodes[size_t(i)];
  if (!is_op(m1, "ReduceMean") || m1.inputs.empty() || m1.outputs.empty()) return Match::None;
  const int X = m1.inputs[0], mean = m1.outputs[0];
  // Candidate: ReduceMean(X) feeding Sub(X, mean). Anything else is not a LayerNorm start.
  int sub_i = ix.sole_consumer(mean);
  const Node* sub = sub_i >= 0 ? &g.nodes[size_t(sub_i)] : nullptr;
  if (!sub || !is_op(*sub, "Sub") || sub->inputs.size() != 2 || sub->inputs[1] != mean) {
    // A ReduceMean whose output also feeds other nodes while one of them is Sub(X, mean).
    for (int c : ix.consumers(mean)) {
      const Node& n = g.nodes[size_t(c)];
      if (is_op(n, "Sub") && n.inputs.size() == 2 && n.inputs[0] == X && n.inputs[1] == mean) {
        ctx.reject(kLayerNorm, m1, "the mean " + fanout_reason(g, ix, mean));
        return Match::Rejected;
      }
    }
    return Match::None;
  }
  auto reject = [&](const std::string& why) {
    ctx.reject(kLayerNorm, m1, why);
    return Match::Rejected;
  };
  if (sub->inputs[0] != X) return reject("Sub subtracts the mean from " + vname(g, sub->inputs[0]) + ", not the ReduceMean input " + vname(g, X));
  const int rank = rank_of(g, X);
  if (auto p = last_axis_problem(g, m1, rank); !p.empty()) return reject(p);
  const int d = sub->outputs[0];
  // d = X - mean feeds the square and the normalization: exactly two consumer nodes.
  if (ix.is_graph_output(d) || ix.num_consumers(d) != 2) return reject("X - mean " + fanout_reason(g, ix, d) + " (expected 2: the square and the division)");
  const Node* sq = nullptr;
  const Node* norm = nullptr;
  for (int c : ix.consumers(d)) {
    const Node& n = g.nodes[size_t(c)];
    bool is_sq = (is_op(n, "Pow") && n.inputs.size() == 2 && n.inputs[0] == d && scalar_near(g, n.inputs[1], 2.0)) ||
                 (is_op(n, "Mul") && n.inputs.size() == 2 && n.inputs[0] == d && n.inputs[1] == d);
    if (is_sq && !sq) sq = &n;
    else norm = &n;
  }
  if (!sq) return reject("X - mean is not squared (Pow(d, 2) or Mul(d, d))");
  // Variance: ReduceMean over the same axis.
  int v_i = ix.sole_consumer(sq->outputs[0]);
  if (v_i < 0) return reject("the square " + fanout_reason(g, ix, sq->outputs[0]));
  const Node& m2 = g.nodes[size_t(v_i)];
  if (!is_op(m2, "ReduceMean")) return reject("the square feeds " + m2.op_type + ", not ReduceMean");
  if (auto p = last_axis_problem(g, m2, rank); !p.empty()) return reject(p);
  int a_i = ix.sole_consumer(m2.outputs[0]);
  if (a_i < 0) return reject("the variance " + fanout_reason(g, ix, m2.outputs[0]));
  const Node& add_eps = g.nodes[size_t(a_i)];
  double eps = 0;
  if (!is_op(add_eps, "Add")) return reject("the variance feeds " + add_eps.op_type + ", not Add(epsilon)");
  int eps_v = other_input(add_eps, m2.outputs[0]);
  if (eps_v < 0 || !scalar_of(g, eps_v, eps)) return reject("the variance is added to " + vname(g, eps_v) + ", not a scalar constant epsilon");
  if (!(eps >= 0)) return reject("epsilon " + std::to_string(eps) + " is negative");
  int s_i = ix.sole_consumer(add_eps.outputs[0]);
  if (s_i < 0) return reject("variance + epsilon " + fanout_reason(g, ix, add_eps.outputs[0]));
  const Node& sqrt = g.nodes[size_t(s_i)];
  if (!is_op(sqrt, "Sqrt")) return reject("variance + epsilon feeds " + sqrt.op_type + ", not Sqrt");
  // Normalization: Div(d, std), or Mul(d, Reciprocal(std)).
  const Node* recip = nullptr;
  if (is_op(*norm, "Div")) {
    if (norm->inputs.size() != 2 || norm->inputs[0] != d || norm->inputs[1] != sqrt.outputs[0])
      return reject("X - mean feeds " + norm->name + " (Div), which does not divide it by the standard deviation");
    if (ix.sole_consumer(sqrt.outputs[0]) < 0) return reject("the standard deviation " + fanout_reason(g, ix, sqrt.outputs[0]));
  } else if (is_op(*norm, "Mul")) {
    int r_i = ix.sole_consumer(sqrt.outputs[0]);
    recip = r_i >= 0 ? &g.nodes[size_t(r_i)] : nullptr;
    if (!recip || !is_op(*recip, "Reciprocal") || other_input(*norm, d) != recip->outputs[0])
      return reject("X - mean feeds " + norm->name + " (Mul), which does not multiply it by Reciprocal(standard deviation)");
    if (ix.sole_consumer(recip->outputs[0]) < 0) return reject("1/std " + fanout_reason(g, ix, recip->outputs[0]));
  } else {
    return reject("X - mean feeds " + norm->op_type + " " + norm->name + ", not Div/Mul by the standard deviation");
  }
  // Optional affine part: Mul(gamma) then Add(beta), constants over the last axis.
  DType dt = elem_of(g, eps_v);
  int64_t C = rank > 0 ? last_dim_of(g, X) : -1;
  int last = node_index(g, norm);
  int gamma = -1, beta = -1;
  std::vector<int> chain;  // nodes dropped besides the ones above
  int cur = norm->outputs[0];
  int c_i = ix.sole_consumer(cur);
  if (c_i >= 0 && is_op(g.nodes[size_t(c_i)], "Mul")) {
    int gv = other_input(g.nodes[size_t(c_i)], cur);
    // A Mul by a non-constant is not a gamma: the LayerNorm ends before it.
    if (gv >= 0 && constant_of(g, gv)) {
      if (auto p = channel_param(ctx, gv, C, dt, "gamma", false, gamma); !p.empty()) return reject(p);
      gamma = gv;
      last = c_i;
      cur = g.nodes[size_t(c_i)].outputs[0];
      c_i = ix.sole_consumer(cur);
    }
  }
  if (c_i >= 0 && is_op(g.nodes[size_t(c_i)], "Add")) {
    int bv = other_input(g.nodes[size_t(c_i)], cur);
    if (bv >= 0 && constant_of(g, bv)) {
      if (auto p = channel_param(ctx, bv, C, dt, "beta", false, beta); !p.empty()) return reject(p);
      beta = bv;
      last = c_i;
    }
  }
  if (gamma < 0) {
    if (C < 0) return reject("no gamma and the normalized axis length is not static");
    if (dt != DType::Float && dt != DType::Undefined) return reject(std::string("no gamma and type ") + dtype_name(dt) + " (ones are made for float32 only)");
  }
  // LayerNormalization is ai.onnx from opset 17; an older model gets it as a node of opset 17.
  const int model_opset = ai_onnx_opset(ctx.model);
  if (model_opset < 17 && ctx.opts.standard_ops)
    return reject("LayerNormalization needs ai.onnx opset 17 and the model imports opset " + std::to_string(model_opset) +
                  " (--standard-ops keeps the model's opset)");
  // All checks passed: make the 1-D parameters (this adds values, not nodes).
  const std::string last_name = g.nodes[size_t(last)].name;
  if (gamma < 0) {  // LayerNormalization needs a scale: ones
    Tensor ones(DType::Float, {C});
    std::fill(ones.data<float>(), ones.data<float>() + C, 1.f);
    gamma = add_constant(g, last_name + "_ones", std::move(ones));
  } else {
    channel_param(ctx, gamma, C, dt, "gamma", true, gamma);
  }
  if (beta >= 0) channel_param(ctx, beta, C, dt, "beta", true, beta);
  for (const Node* n : {&m1, sub, sq, &m2, &add_eps, &sqrt, norm, recip})
    if (n) dead[size_t(node_index(g, n))] = true;
  // Every node from the normalization to `last` is the Mul(gamma)/Add(beta) chain.
  int k = node_index(g, norm);
  int v = norm->outputs[0];
  while (k != last) {
    dead[size_t(k)] = true;
    k = ix.sole_consumer(v);
    v = g.nodes[size_t(k)].outputs[0];
  }
  dead[size_t(last)] = false;
  std::vector<int> ins = {X, gamma};
  if (beta >= 0) ins.push_back(beta);
  rewrite(g.nodes[size_t(last)], "", "LayerNormalization", std::max(17, model_opset), ins,
          {make_attr_int("axis", -1), make_attr_float("epsilon", float(eps))});
  adopt_first_name(g, dead, last);
  ctx.applied(kLayerNorm);
  return Match::Applied;
}

// ---- GELU ----------------------------------------------------------------------------------

constexpr const char* kGelu = "GELU";

// p = 1 + f(x). Matches the "x * 0.5 * p" tail in its association orders:
//   Mul(Mul(x, p), 0.5), Mul(Mul(p, 0.5), x), Mul(Mul(x, 0.5), p).
// On success sets `last` (the node producing the GELU value) and adds the other nodes to dead.
std::string match_gelu_tail(const Graph& g, const GraphIndex& ix, int p, int x, int& last, std::vector<int>& nodes) {
  int m1_i = ix.sole_consumer(p);
  if (m1_i < 0) return "1 + f(x) " + fanout_reason(g, ix, p);
  const Node& m1 = g.nodes[size_t(m1_i)];
  if (!is_op(m1, "Mul")) return "1 + f(x) feeds " + m1.op_type + ", not Mul";
  int o = other_input(m1, p);
  if (o < 0) return "1 + f(x) is multiplied by itself";
  if (o == x || scalar_near(g, o, 0.5)) {
    int m2_i = ix.sole_consumer(m1.outputs[0]);
    if (m2_i < 0) return "the product " + fanout_reason(g, ix, m1.outputs[0]);
    const Node& m2 = g.nodes[size_t(m2_i)];
    int o2 = is_op(m2, "Mul") ? other_input(m2, m1.outputs[0]) : -1;
    bool ok = o == x ? (o2 >= 0 && scalar_near(g, o2, 0.5)) : o2 == x;
    if (!ok) return "the product is not then multiplied by " + std::string(o == x ? "0.5" : "x");
    nodes.push_back(m1_i);
    last = m2_i;
    return "";
  }
  const Node* h = producer_op(g, o, "Mul");
  if (h && other_input(*h, x) >= 0 && scalar_near(g, other_input(*h, x), 0.5)) {
    if (ix.sole_consumer(o) != m1_i) return "x * 0.5 " + fanout_reason(g, ix, o);
    nodes.push_back(node_index(g, h));
    last = m1_i;
    return "";
  }
  return "1 + f(x) is multiplied by " + vname(g, o) + ", not x or 0.5";
}

// x^3 as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x); its nodes are added to `nodes`.
bool match_cube(const Graph& g, const GraphIndex& ix, int v, int x, std::vector<int>& nodes) {
  const Node* p = producer_node(g, v);
  if (!p || ix.sole_consumer(v) < 0) return false;
  if (is_op(*p, "Pow") && p->inputs.size() == 2 && p->inputs[0] == x && scalar_near(g, p->inputs[1], 3.0)) {
    nodes.push_back(node_index(g, p));
    return true;
  }
  if (!is_op(*p, "Mul") || p->inputs.size() != 2) return false;
  for (int s = 0; s < 2; ++s) {
    if (p->inputs[size_t(s)] != x) continue;
    const Node* sq = producer_op(g, p->inputs[size_t(1 - s)], "Mul");
    if (sq && sq->inputs.size() == 2 && sq->inputs[0] == x && sq->inputs[1] == x && ix.sole_consumer(sq->outputs[0]) >= 0) {
      nodes.push_back(node_index(g, p));
      nodes.push_back(node_index(g, sq));
      return true;
    }
  }
  return false;
}

Match try_gelu(PassContext& ctx, const GraphIndex& ix, int i, std::vector<bool>& dead) {
  Graph& g = ctx.graph;
  const Node& f = g.nodes[size_t(i)];
  const bool erf = is_op(f, "Erf"), tanh = is_op(f, "Tanh");
  if ((!erf && !tanh) || f.inputs.empty()) return Match::None;
  std::vector<int> nodes = {i};
  int x = -1;
  const Node* arg = producer_node(g, f.inputs[0]);
  if (erf) {
    // Erf(x / sqrt(2)) or Erf(x * (1/sqrt(2))).
    if (!arg) return Match::None;
    if (is_op(*arg, "Div") && arg->inputs.size() == 2 && scalar_near(g, arg->inputs[1], std::sqrt(2.0))) x = arg->inputs[0];
    else if (is_op(*arg, "Mul") && arg->inputs.size() == 2 && scalar_near(g, arg->inputs[1], std::sqrt(0.5))) x = arg->inputs[0];
    else if (is_op(*arg, "Mul") && arg->inputs.size() == 2 && scalar_near(g, arg->inputs[0], std::sqrt(0.5))) x = arg->inputs[1];
    if (x < 0) return Match::None;  // an Erf of something else: not a GELU
  } else {
    // Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)): only a Tanh of sqrt(2/pi) * (...) is a candidate.
    const double k = std::sqrt(2.0 / M_PI);
    if (!arg || !is_op(*arg, "Mul")) return Match::None;
    int inner = -1;
    for (int s = 0; s < 2 && arg->inputs.size() == 2; ++s)
      if (scalar_near(g, arg->inputs[size_t(s)], k)) inner = arg->inputs[size_t(1 - s)];
    if (inner < 0) return Match::None;
    const Node* add = producer_op(g, inner, "Add");
    bool found = false;
    for (int s = 0; add && s < 2 && !found; ++s) {
      int cand_x = add->inputs[size_t(s)], t1 = add->inputs[size_t(1 - s)];
      const Node* mul = producer_op(g, t1, "Mul");
      if (!mul || mul->inputs.size() != 2) continue;
      for (int u = 0; u < 2 && !found; ++u) {
        if (!scalar_near(g, mul->inputs[size_t(u)], 0.044715)) continue;
        std::vector<int> cube;
        if (match_cube(g, ix, mul->inputs[size_t(1 - u)], cand_x, cube) && ix.sole_consumer(t1) >= 0 &&
            ix.sole_consumer(inner) >= 0) {
          x = cand_x;
          found = true;
          nodes.insert(nodes.end(), {node_index(g, add), node_index(g, mul)});
          nodes.insert(nodes.end(), cube.begin(), cube.end());
        }
      }
    }
    if (!found) {
      ctx.reject(kGelu, f, "Tanh of sqrt(2/pi) * y where y is not x + 0.044715 * x^3 with single-use intermediates");
      return Match::Rejected;
    }
  }
  auto reject = [&](const std::string& why) {
    ctx.reject(kGelu, f, why);
    return Match::Rejected;
  };
  if (ix.sole_consumer(f.inputs[0]) < 0) return reject("the argument of " + f.op_type + " " + fanout_reason(g, ix, f.inputs[0]));
  nodes.push_back(node_index(g, arg));
  int a_i = ix.sole_consumer(f.outputs[0]);
  if (a_i < 0) return reject(f.op_type + " output " + fanout_reason(g, ix, f.outputs[0]));
  const Node& one = g.nodes[size_t(a_i)];
  int ov = is_op(one, "Add") ? other_input(one, f.outputs[0]) : -1;
  if (ov < 0 || !scalar_near(g, ov, 1.0)) return reject(f.op_type + " output feeds " + one.name + " (" + one.op_type + "), not Add(1)");
  nodes.push_back(a_i);
  int last = -1;
  if (auto p = match_gelu_tail(g, ix, one.outputs[0], x, last, nodes); !p.empty()) return reject(p);
  DType dt = elem_of(g, ov);
  if (dt != DType::Undefined && dt != DType::Float && dt != DType::Float16 && dt != DType::BFloat16 && dt != DType::Double)
    return reject(std::string("type ") + dtype_name(dt) + " is not a float type");
  const int model_opset = ai_onnx_opset(ctx.model);
  const std::string approx = erf ? "none" : "tanh";
  std::string domain = "basalt";
  int opset = 1;
  if (model_opset >= 20) {
    domain = "";
    opset = model_opset;
  } else if (ctx.opts.standard_ops) {
    return reject("ai.onnx Gelu needs opset 20 and the model imports opset " + std::to_string(model_opset) +
                  " (--standard-ops allows only ai.onnx operators of the model's opset)");
  }
  for (int n : nodes) dead[size_t(n)] = true;
  rewrite(g.nodes[size_t(last)], domain, "Gelu", opset, {x}, {make_attr_string("approximate", approx)});
  adopt_first_name(g, dead, last);
  ctx.applied(erf ? "GELU(Erf)" : "GELU(Tanh)");
  return Match::Applied;
}

// ---- Attention -----------------------------------------------------------------------------

constexpr const char* kAttention = "Attention";

// One entry of a Reshape target shape: a constant, or "dim `dim` of tensor `t`" as PyTorch
// writes x.size(i): Unsqueeze(Gather(Shape(t), i)), or Gather(Shape(t), [i]).
struct ShapeEntry {
  bool is_const = false;
  int64_t c = 0;
  int t = -1;
  int64_t dim = -1;
};

bool shape_dim_of(const Graph& g, int v, int& t, int64_t& dim) {
  const Node* gather = producer_op(g, v, "Gather");
  bool unsq = false;
  if (!gather) {
    const Node* u = producer_op(g, v, "Unsqueeze");
    if (!u || u->inputs.empty()) return false;
    std::vector<int64_t> axes;
    if (u->opset >= 13) {
      const Tensor* a = u->inputs.size() > 1 ? constant_of(g, u->inputs[1]) : nullptr;
      if (!a) return false;
      axes = a->to_int64_vector();
    } else {
      axes = u->attr_ints("axes", {});
    }
    if (axes != std::vector<int64_t>{0}) return false;
    gather = producer_op(g, u->inputs[0], "Gather");
    unsq = true;
  }
  if (!gather || gather->inputs.size() != 2 || gather->attr_int("axis", 0) != 0) return false;
  const Tensor* idx = constant_of(g, gather->inputs[1]);
  if (!idx || idx->numel() != 1 || idx->rank() != (unsq ? 0 : 1)) return false;
  const Node* shape = producer_op(g, gather->inputs[0], "Shape");
  if (!shape || shape->has_attr("start") || shape->has_attr("end")) return false;
  t = shape->inputs[0];
  dim = idx->get_int(0);
  return true;
}

bool shape_entries(const Graph& g, int v, std::vector<ShapeEntry>& out) {
  out.clear();
  if (const Tensor* t = constant_of(g, v)) {
    for (int64_t x : t->to_int64_vector()) out.push_back({true, x, -1, -1});
    return true;
  }
  const Node* cat = producer_op(g, v, "Concat");
  if (!cat) return false;
  for (int in : cat->inputs) {
    if (const Tensor* t = constant_of(g, in)) {
      if (t->rank() != 1) return false;
      for (int64_t x : t->to_int64_vector()) out.push_back({true, x, -1, -1});
      continue;
    }
    ShapeEntry e;
    if (!shape_dim_of(g, in, e.t, e.dim)) return false;
    out.push_back(e);
  }
  return true;
}

// True when a and b have the same leading dims: a == b, or one is reached from the other through
// ops that keep every dim but the last (MatMul/FusedMatMul by a constant 2-D matrix, bias Add).
bool same_leading_dims(const Graph& g, int a, int b) {
  auto walk = [&](int from, int to) {
    for (int v = from, steps = 0; v >= 0 && steps < 8; ++steps) {
      if (v == to) return true;
      const Node* p = producer_node(g, v);
      if (!p || p->inputs.size() < 2) return false;
      const Tensor* w = constant_of(g, p->inputs[1]);
      if ((is_op(*p, "MatMul") || (is_basalt_op(*p, "FusedMatMul") && p->attr_int("transA", 0) == 0)) && w && w->rank() == 2) {
        v = p->inputs[0];
      } else if (is_op(*p, "Add")) {
        int o = constant_of(g, p->inputs[0]) ? 1 : 0;
        const Tensor* bias = constant_of(g, p->inputs[size_t(1 - o)]);
        if (!bias || bias->rank() > 1) return false;
        v = p->inputs[size_t(o)];
      } else {
        return false;
      }
    }
    return false;
  };
  return walk(a, b) || walk(b, a);
}

// Checks that Reshape r turns data [d0, d1, H*D] into [d0, d1, H, D] (want_rank 4) or data
// [d0, d1, H, D] into [d0, d1, H*D] (want_rank 3); returns the trailing constants in tail.
std::string reshape_problem(const Graph& g, const Node& r, int want_rank, std::vector<int64_t>& tail) {
  if (r.inputs.size() < 2) return r.name + " has no shape input";
  std::vector<ShapeEntry> e;
  if (!shape_entries(g, r.inputs[1], e))
    return r.name + ": the target shape is neither a constant nor a Concat of constants and x.size(i) values";
  if (int(e.size()) != want_rank) return r.name + ": target shape has " + std::to_string(e.size()) + " entries, expected " + std::to_string(want_rank);
  const bool allowzero = r.attr_int("allowzero", 0) != 0;
  const int data = r.inputs[0];
  Shape data_shape;  // a static export: the constants must be the input's declared dims
  const bool data_static = static_shape_of(g, data, data_shape) && int(data_shape.size()) == (want_rank == 4 ? 3 : 4);
  int inferred = 0;
  for (int k = 0; k < 2; ++k) {
    const ShapeEntry& s = e[size_t(k)];
    if (s.is_const && s.c == 0 && !allowzero) continue;  // copies the input dim
    if (s.is_const && data_static && s.c == data_shape[size_t(k)]) continue;
    if (s.is_const && s.c == -1) {
      ++inferred;
      continue;
    }
    if (!s.is_const && s.dim == k && same_leading_dims(g, s.t, data)) continue;
    return r.name + ": target dim " + std::to_string(k) + " is not provably input dim " + std::to_string(k);
  }
  tail.clear();
  for (size_t k = 2; k < e.size(); ++k) {
    if (!e[k].is_const || e[k].c < (want_rank == 3 ? -1 : 1) || e[k].c == 0)
      return r.name + ": target dim " + std::to_string(k) + " is not a positive constant";
    if (e[k].c == -1) ++inferred;
    tail.push_back(e[k].c);
  }
  if (inferred > 1) return r.name + ": more than one inferred (-1) dim";
  return "";
}

struct HeadInput {
  int proj = -1;   // [B, S, H*D] value fed to the fused op
  int64_t heads = 0, size = 0;
  double factor = 1;  // a scalar the head was multiplied by (scaled_dot_product_attention's export)
  std::vector<int> nodes;  // Reshape and Transpose(s) dropped by the fusion
};

// v = Transpose(Reshape(proj, [B, S, H, D]), perm) where perm is [0,2,1,3] (Q, V), or the key's
// [0,2,3,1] (K^T, also as Transpose([0,1,3,2]) of Transpose([0,2,1,3])). With may_scale, also
// Mul(that, c) for a scalar constant c, as torch exports scaled_dot_product_attention (Q and K^T
// each multiplied by sqrt(scale)).
std::string head_input(const Graph& g, const GraphIndex& ix, int v, bool key_t, HeadInput& out, const char* what,
                       bool may_scale = false) {
  const std::vector<int64_t> bhsd = {0, 2, 1, 3}, bhds = {0, 2, 3, 1}, swap = {0, 1, 3, 2};
  if (const Node* m = may_scale ? producer_op(g, v, "Mul") : nullptr) {
    double c = 0;
    int s = m->inputs.size() == 2 && scalar_of(g, m->inputs[1], c) ? 0 : m->inputs.size() == 2 && scalar_of(g, m->inputs[0], c) ? 1 : -1;
    if (s >= 0 && producer_op(g, m->inputs[size_t(s)], "Transpose")) {
      if (ix.sole_consumer(v) < 0) return std::string(what) + " * scale " + fanout_reason(g, ix, v);
      out.factor = c;
      out.nodes.push_back(node_index(g, m));
      v = m->inputs[size_t(s)];
    }
  }
  const Node* t = producer_op(g, v, "Transpose");
  if (!t) {
    const Node* p = producer_node(g, v);
    return std::string(what) + " " + vname(g, v) + " comes from " + (p ? p->op_type + " '" + p->name + "'" : std::string("no node")) +
           ", not from a Transpose of the reshaped projection";
  }
  if (ix.sole_consumer(v) < 0) return std::string(what) + " " + fanout_reason(g, ix, v);
  out.nodes.push_back(node_index(g, t));
  std::vector<int64_t> perm = perm_of(*t);
  if (key_t && perm == swap) {
    const Node* t0 = producer_op(g, t->inputs[0], "Transpose");
    if (!t0 || perm_of(*t0) != bhsd) return std::string(what) + ": Transpose [0,1,3,2] of something other than Transpose [0,2,1,3]";
    if (ix.sole_consumer(t->inputs[0]) < 0) return std::string(what) + " " + fanout_reason(g, ix, t->inputs[0]);
    out.nodes.push_back(node_index(g, t0));
    t = t0;
  } else if (perm != (key_t ? bhds : bhsd)) {
    std::string s;
    for (int64_t p : perm) s += (s.empty() ? "" : ",") + std::to_string(p);
    return std::string(what) + ": Transpose perm [" + s + "], expected " + (key_t ? "[0,2,3,1]" : "[0,2,1,3]");
  }
  const Node* r = producer_op(g, t->inputs[0], "Reshape");
  if (!r) return std::string(what) + ": the Transpose input is not a Reshape";
  if (ix.sole_consumer(t->inputs[0]) < 0) return std::string(what) + ": the Reshape output " + fanout_reason(g, ix, t->inputs[0]);
  std::vector<int64_t> tail;
  if (auto p = reshape_problem(g, *r, 4, tail); !p.empty()) return p;
  out.nodes.push_back(node_index(g, r));
  out.proj = r->inputs[0];
  out.heads = tail[0];
  out.size = tail[1];
  return "";
}

// PyTorch takes the merge shape from the context tensor itself (context.size()[:-2] + (H*D,)), so
// the transposed context has, besides the Reshape, Shape consumers whose results only feed that
// Reshape's shape input. True when every consumer of v other than node `user` is such a
// shape-only subgraph; its nodes are added to `nodes` (they die with the fusion).
bool only_shape_uses_besides(const Graph& g, const GraphIndex& ix, int v, int user, std::vector<int>& nodes) {
  if (ix.is_graph_output(v)) return false;
  std::vector<int> todo, seen;
  for (int c : ix.consumers(v)) {
    if (c == user) continue;
    if (!is_op(g.nodes[size_t(c)], "Shape")) return false;
    todo.push_back(c);
  }
  auto in = [&](int n) { return std::find(seen.begin(), seen.end(), n) != seen.end(); };
  while (!todo.empty()) {
    int n = todo.back();
    todo.pop_back();
    if (in(n)) continue;
    seen.push_back(n);
    if (seen.size() > 32) return false;
    const Node& nd = g.nodes[size_t(n)];
    bool shape_op = false;
    for (const char* op : {"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast"}) shape_op |= is_op(nd, op);
    if (!shape_op) return false;
    for (int o : nd.outputs) {
      if (o < 0) continue;
      if (ix.is_graph_output(o) || ix.captured(o)) return false;
      for (int c : ix.consumers(o)) {
        if (c == user) {
          const Node& u = g.nodes[size_t(c)];
          if (u.inputs.size() < 2 || u.inputs[1] != o || u.inputs[0] == o) return false;
          continue;
        }
        todo.push_back(c);
      }
    }
  }
  nodes.insert(nodes.end(), seen.begin(), seen.end());
  return true;
}

Match try_attention(PassContext& ctx, const GraphIndex& ix, int i, std::vector<bool>& dead) {
  Graph& g = ctx.graph;
  const Node& sm = g.nodes[size_t(i)];
  if (!is_op(sm, "Softmax") || sm.inputs.empty()) return Match::None;
  // Walk back: [Add(mask)] <- [Div/Mul(scale)] <- MatMul(Q, K^T). Without a MatMul it is not a candidate.
  std::vector<int> nodes = {i};
  int v = sm.inputs[0], mask = -1;
  double scale = 1.0;
  const Node* p = producer_node(g, v);
  // The Add operand that carries the scores: a MatMul, or a Div/Mul by a constant of one.
  auto scores_side = [&](const Node* n) {
    auto is_mm = [&](const Node* m) { return m && (is_op(*m, "MatMul") || is_basalt_op(*m, "FusedMatMul")); };
    if (is_mm(n)) return true;
    if (!n || (!is_op(*n, "Div") && !is_op(*n, "Mul")) || n->inputs.size() != 2) return false;
    return is_mm(producer_node(g, n->inputs[0])) || is_mm(producer_node(g, n->inputs[1]));
  };
  std::string why;
  auto note = [&](const std::string& s) {
    if (why.empty()) why = s;
  };
  if (p && is_op(*p, "Add") && p->inputs.size() == 2) {
    int s = scores_side(producer_node(g, p->inputs[0])) ? 0 : 1;
    mask = p->inputs[size_t(1 - s)];
    if (ix.sole_consumer(v) < 0) note("the masked scores " + fanout_reason(g, ix, v));
    nodes.push_back(node_index(g, p));
    v = p->inputs[size_t(s)];
    p = producer_node(g, v);
  }
  if (p && (is_op(*p, "Div") || is_op(*p, "Mul")) && p->inputs.size() == 2) {
    double c = 0;
    int s = -1;
    if (scalar_of(g, p->inputs[1], c)) s = 0;
    else if (is_op(*p, "Mul") && scalar_of(g, p->inputs[0], c)) s = 1;
    if (s < 0) return Match::None;
    if (is_op(*p, "Div")) {
      if (c == 0) return Match::None;
      scale = 1.0 / c;
    } else {
      scale = c;
    }
    if (ix.sole_consumer(v) < 0) note("the scaled scores " + fanout_reason(g, ix, v));
    nodes.push_back(node_index(g, p));
    v = p->inputs[size_t(s)];
    p = producer_node(g, v);
  }
  const bool fused_mm = p && is_basalt_op(*p, "FusedMatMul");
  if (!p || (!is_op(*p, "MatMul") && !fused_mm) || p->inputs.size() < 2) return Match::None;
  // Scores of a product by a weight (a classifier head) are not attention.
  if (constant_of(g, p->inputs[0]) || constant_of(g, p->inputs[1])) return Match::None;
  auto reject = [&](const std::string& r) {
    ctx.reject(kAttention, sm, r);
    return Match::Rejected;
  };
  // Softmax over the last axis of the [B, H, S, S] scores.
  const int64_t axis = sm.attr_int("axis", sm.opset >= 13 ? -1 : 1);
  if (axis != -1 && axis != 3) return reject("Softmax axis " + std::to_string(axis) + " is not the last axis of 4-D scores");
  const Node& qk = *p;
  bool key_t = true;
  if (fused_mm) {
    if (qk.attr_int("transA", 0) != 0 || (qk.inputs.size() > 2 && qk.inputs[2] >= 0) ||
        !qk.attr_string("activation", "").empty())
      return reject("Q K^T is a FusedMatMul with transA, a bias or an activation");
    key_t = qk.attr_int("transB", 0) == 0;
    scale *= qk.attr_float("alpha", 1.0f);
  }
  if (ix.sole_consumer(v) < 0) note("Q K^T " + fanout_reason(g, ix, v));
  nodes.push_back(node_index(g, &qk));
  if (!why.empty()) return reject(why);
  HeadInput q, k, vv;
  if (auto r = head_input(g, ix, qk.inputs[0], false, q, "Q", true); !r.empty()) return reject(r);
  if (auto r = head_input(g, ix, qk.inputs[1], key_t, k, key_t ? "K^T" : "K", true); !r.empty()) return reject(r);
  scale *= q.factor * k.factor;
  // Forward: MatMul(P, V) -> Transpose [0,2,1,3] -> Reshape [B, S, H*Dv].
  int pv_i = ix.sole_consumer(sm.outputs[0]);
  if (pv_i < 0) return reject("the probabilities " + fanout_reason(g, ix, sm.outputs[0]));
  const Node& pv = g.nodes[size_t(pv_i)];
  if (!is_op(pv, "MatMul") || pv.inputs[0] != sm.outputs[0]) return reject("the probabilities feed " + pv.name + " (" + pv.op_type + "), not MatMul(P, V)");
  if (auto r = head_input(g, ix, pv.inputs[1], false, vv, "V"); !r.empty()) return reject(r);
  int ct_i = ix.sole_consumer(pv.outputs[0]);
  if (ct_i < 0) return reject("P V " + fanout_reason(g, ix, pv.outputs[0]));
  const Node& ct = g.nodes[size_t(ct_i)];
  if (!is_op(ct, "Transpose") || perm_of(ct) != std::vector<int64_t>{0, 2, 1, 3})
    return reject("P V feeds " + ct.name + " (" + ct.op_type + "), not Transpose [0,2,1,3]");
  int r_i = -1;
  for (int c : ix.consumers(ct.outputs[0]))
    if (is_op(g.nodes[size_t(c)], "Reshape") && g.nodes[size_t(c)].inputs[0] == ct.outputs[0]) r_i = c;
  if (r_i < 0) return reject("the context " + vname(g, ct.outputs[0]) + " feeds no Reshape");
  std::vector<int> shape_nodes;
  if (!only_shape_uses_besides(g, ix, ct.outputs[0], r_i, shape_nodes))
    return reject("the context " + vname(g, ct.outputs[0]) + " has consumers besides its Reshape and that Reshape's shape computation");
  const Node& out = g.nodes[size_t(r_i)];
  std::vector<int64_t> tail;
  if (auto r = reshape_problem(g, out, 3, tail); !r.empty()) return reject(r);
  if (q.heads != k.heads || q.heads != vv.heads)
    return reject("Q, K and V are split into different head counts (" + std::to_string(q.heads) + ", " +
                  std::to_string(k.heads) + ", " + std::to_string(vv.heads) + ")");
  if (q.size != k.size) return reject("Q and K head sizes differ (" + std::to_string(q.size) + " vs " + std::to_string(k.size) + ")");
  if (tail[0] != -1 && tail[0] != vv.heads * vv.size)
    return reject(out.name + " merges the heads into " + std::to_string(tail[0]) + ", not heads*head_size = " + std::to_string(vv.heads * vv.size));
  for (int val : {q.proj, k.proj, vv.proj, mask}) {
    DType dt = val >= 0 ? elem_of(g, val) : DType::Undefined;
    if (dt != DType::Undefined && dt != DType::Float)
      return reject(vname(g, val) + " has type " + dtype_name(dt) + "; basalt::Attention is float32 only");
  }
  if (!ctx.nonstandard_ok()) return reject("basalt::Attention is not an ai.onnx operator (--standard-ops)");
  for (const auto* h : {&q, &k, &vv}) nodes.insert(nodes.end(), h->nodes.begin(), h->nodes.end());
  nodes.insert(nodes.end(), {pv_i, ct_i});
  nodes.insert(nodes.end(), shape_nodes.begin(), shape_nodes.end());
  for (int n : nodes) dead[size_t(n)] = true;
  std::vector<int> ins = {q.proj, k.proj, vv.proj};
  if (mask >= 0) ins.push_back(mask);
  rewrite(g.nodes[size_t(r_i)], "basalt", "Attention", 1, ins,
          {make_attr_int("num_heads", q.heads), make_attr_float("scale", float(scale))});
  adopt_first_name(g, dead, r_i);
  ctx.applied(kAttention);
  return Match::Applied;
}

// ---- MatMul + bias -------------------------------------------------------------------------

constexpr const char* kMatMulAdd = "MatMul+Add";

Match try_matmul_add(PassContext& ctx, const GraphIndex& ix, int i, std::vector<bool>& dead) {
  Graph& g = ctx.graph;
  const Node& mm = g.nodes[size_t(i)];
  // A MatMul, or a FusedMatMul from the transpose folding that has no bias or activation yet.
  const bool fused = is_basalt_op(mm, "FusedMatMul");
  if (fused && ((mm.inputs.size() > 2 && mm.inputs[2] >= 0) || !mm.attr_string("activation", "").empty())) return Match::None;
  if ((!is_op(mm, "MatMul") && !fused) || mm.inputs.size() < 2 || mm.outputs.empty()) return Match::None;
  const int y = mm.outputs[0];
  // Candidate: the MatMul's output feeds an Add.
  const Node* add = nullptr;
  for (int c : ix.consumers(y))
    if (is_op(g.nodes[size_t(c)], "Add")) add = &g.nodes[size_t(c)];
  if (!add) return Match::None;
  auto reject = [&](const std::string& r) {
    ctx.reject(kMatMulAdd, mm, r);
    return Match::Rejected;
  };
  if (ix.sole_consumer(y) < 0) return reject("the MatMul output " + fanout_reason(g, ix, y));
  const int bias = other_input(*add, y);
  const Tensor* bt = bias >= 0 ? constant_of(g, bias) : nullptr;
  if (!bt) return reject("the MatMul output is added to " + vname(g, bias) + ", which is not a constant bias");
  Shape ws;
  if (!static_shape_of(g, mm.inputs[1], ws) || ws.size() < 2) return reject("B " + vname(g, mm.inputs[1]) + " has no static shape of rank >= 2");
  const int64_t N = fused && mm.attr_int("transB", 0) ? ws[ws.size() - 2] : ws.back();
  if (bt->dtype() != DType::Float) return reject(std::string("bias type ") + dtype_name(bt->dtype()) + "; FusedMatMul is float32 only");
  DType wt = elem_of(g, mm.inputs[1]);
  if (wt != DType::Undefined && wt != DType::Float) return reject(std::string("B type ") + dtype_name(wt) + "; FusedMatMul is float32 only");
  if (bt->rank() > int(ws.size())) return reject("bias " + shape_str(bt->shape()) + " has a higher rank than the MatMul output");
  for (int d = 0; d + 1 < bt->rank(); ++d)
    if (bt->dim(d) != 1) return reject("bias shape " + shape_str(bt->shape()) + " is not over the last axis only");
  const int64_t bn = bt->rank() ? bt->dim(-1) : 1;
  if (bn != N && bn != 1) return reject("bias has " + std::to_string(bn) + " elements, the MatMul output's last dim " + std::to_string(N));
  if (!ctx.nonstandard_ok()) return reject("basalt::FusedMatMul is not an ai.onnx operator (--standard-ops)");
  int b1 = bias;
  if (bt->rank() != 1 || bn != N) {
    Tensor e(DType::Float, {N});
    for (int64_t k = 0; k < N; ++k) e.data<float>()[k] = bt->data<float>()[bn == 1 ? 0 : k];
    b1 = add_constant(g, g.values[size_t(bias)].name + "_1d", std::move(e));
  }
  dead[size_t(i)] = true;
  Node& out = g.nodes[size_t(node_index(g, add))];
  std::vector<Attribute> attrs = fused ? mm.attrs : std::vector<Attribute>{};
  rewrite(out, "basalt", "FusedMatMul", 1, {mm.inputs[0], mm.inputs[1], b1}, std::move(attrs));
  adopt_first_name(g, dead, node_index(g, &out));
  ctx.applied(kMatMulAdd);
  return Match::Applied;
}

// ---- Transpose folded into MatMul ----------------------------------------------------------

constexpr const char* kTransposeMatMul = "Transpose+MatMul";

Match try_transpose_matmul(PassContext& ctx, const GraphIndex& ix, int i, std::vector<bool>& dead) {
  Graph& g = ctx.graph;
  const Node& t = g.nodes[size_t(i)];
  if (!is_op(t, "Transpose") || t.inputs.empty() || t.outputs.empty()) return Match::None;
  std::vector<int64_t> perm = perm_of(t);
  if (perm.empty() && rank_of(g, t.inputs[0]) == 2) perm = {1, 0};  // default perm reverses the dims
  const int r = int(perm.size());
  if (r < 2) return Match::None;
  for (int d = 0; d < r; ++d) {
    int want = d == r - 2 ? r - 1 : d == r - 1 ? r - 2 : d;
    if (perm[size_t(d)] != want) return Match::None;  // not a swap of the last two dims
  }
  const int y = t.outputs[0];
  const Node* mm = nullptr;
  for (int c : ix.consumers(y)) {
    const Node& n = g.nodes[size_t(c)];
    if (is_op(n, "MatMul") || is_basalt_op(n, "FusedMatMul")) mm = &n;
  }
  if (!mm) return Match::None;
  auto reject = [&](const std::string& why) {
    ctx.reject(kTransposeMatMul, t, why);
    return Match::Rejected;
  };
  if (ix.sole_consumer(y) < 0) return reject("the transposed value " + fanout_reason(g, ix, y));
  if (mm->inputs.size() < 2 || (mm->inputs[0] == y) == (mm->inputs[1] == y)) return reject(mm->name + " reads the transposed value as both operands");
  if (!ctx.nonstandard_ok()) return reject("basalt::FusedMatMul is not an ai.onnx operator (--standard-ops)");
  const int side = mm->inputs[0] == y ? 0 : 1;
  const char* flag = side == 0 ? "transA" : "transB";
  Node& n = g.nodes[size_t(node_index(g, mm))];
  if (is_op(n, "MatMul")) {
    rewrite(n, "basalt", "FusedMatMul", 1, n.inputs, {make_attr_int(flag, 1)});
  } else {
    set_attr(n, make_attr_int(flag, n.attr_int(flag, 0) ? 0 : 1));
  }
  n.inputs[size_t(side)] = t.inputs[0];
  dead[size_t(i)] = true;
  ctx.applied(kTransposeMatMul);
  return Match::Applied;
}

}  // namespace

void fuse_layernorm(PassContext& ctx) {
  scan(ctx, [&](const GraphIndex& ix, int i, std::vector<bool>& dead) { return try_layernorm(ctx, ix, i, dead); });
}
void fuse_gelu(PassContext& ctx) {
  scan(ctx, [&](const GraphIndex& ix, int i, std::vector<bool>& dead) { return try_gelu(ctx, ix, i, dead); });
}
void fuse_attention(PassContext& ctx) {
  scan(ctx, [&](const GraphIndex& ix, int i, std::vector<bool>& dead) { return try_attention(ctx, ix, i, dead); });
}
void fuse_matmul_add(PassContext& ctx) {
  scan(ctx, [&](const GraphIndex& ix, int i, std::vector<bool>& dead) { return try_matmul_add(ctx, ix, i, dead); });
}
void fold_transpose_into_matmul(PassContext& ctx) {
  scan(ctx, [&](const GraphIndex& ix, int i, std::vector<bool>& dead) { return try_transpose_matmul(ctx, ix, i, dead); });
}

}  // namespace basalt
