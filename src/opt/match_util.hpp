// Small graph queries and the scan / rewrite driver that the pattern-fusion passes share
// (fuse_transformer.cpp, fuse_quant.cpp): op tests, value names for reasons, constant scalars,
// declared types and shapes, and the rewrite convention of opt/graph_util.hpp.
#pragma once

#include "ops/kernel.hpp"
#include "opt/graph_util.hpp"

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace basalt {

// ---- small graph queries ------------------------------------------------------------------

inline bool is_op(const Node& n, const char* op) { return canonical_domain(n.domain).empty() && n.op_type == op; }
inline bool is_basalt_op(const Node& n, const char* op) { return n.domain == "basalt" && n.op_type == op; }

inline const Node* producer_op(const Graph& g, int v, const char* op) {
  const Node* p = producer_node(g, v);
  return p && is_op(*p, op) ? p : nullptr;
}

inline int node_index(const Graph& g, const Node* n) { return n ? int(n - g.nodes.data()) : -1; }

inline std::string vname(const Graph& g, int v) { return v >= 0 ? "'" + g.values[size_t(v)].name + "'" : "(none)"; }

// Why v cannot be an intermediate of a fused chain (it must be read by exactly one node).
inline std::string fanout_reason(const Graph& g, const GraphIndex& ix, int v) {
  if (ix.is_graph_output(v)) return vname(g, v) + " is a graph output";
  return vname(g, v) + " has " + std::to_string(ix.num_consumers(v)) + " consumers";
}

// The value of a one-element numeric constant.
inline bool scalar_of(const Graph& g, int v, double& out) {
  const Tensor* t = constant_of(g, v);
  if (!t || t->numel() != 1 || t->dtype() == DType::String || t->dtype() == DType::Bool) return false;
  out = t->get_double(0);
  return true;
}

inline bool close_to(double a, double b, double rel = 1e-4) { return std::fabs(a - b) <= rel * std::fabs(b); }

inline bool scalar_near(const Graph& g, int v, double want) {
  double x;
  return scalar_of(g, v, x) && close_to(x, want);
}

// For a two-input node, the input that is not `v` (-1 when v is not an input or both are v).
inline int other_input(const Node& n, int v) {
  if (n.inputs.size() != 2) return -1;
  if (n.inputs[0] == v && n.inputs[1] != v) return n.inputs[1];
  if (n.inputs[1] == v && n.inputs[0] != v) return n.inputs[0];
  return -1;
}

inline int ai_onnx_opset(const Model& m) {
  auto it = m.opsets.find("");
  return it == m.opsets.end() ? 0 : int(it->second);
}

// Declared rank of v, or -1.
inline int rank_of(const Graph& g, int v) {
  if (const Tensor* t = constant_of(g, v)) return t->rank();
  const TypeInfo& ti = g.values[size_t(v)].type;
  return ti.kind == TypeInfo::Kind::Tensor && ti.has_shape ? int(ti.dims.size()) : -1;
}
// Declared element type of v, or Undefined.
inline DType elem_of(const Graph& g, int v) {
  if (const Tensor* t = constant_of(g, v)) return t->dtype();
  const TypeInfo& ti = g.values[size_t(v)].type;
  return ti.kind == TypeInfo::Kind::Tensor ? ti.elem : DType::Undefined;
}
// Declared last dim of v, or -1 when unknown.
inline int64_t last_dim_of(const Graph& g, int v) {
  if (const Tensor* t = constant_of(g, v)) return t->rank() ? t->dim(-1) : 1;
  const TypeInfo& ti = g.values[size_t(v)].type;
  if (ti.kind != TypeInfo::Kind::Tensor || !ti.has_shape || ti.dims.empty()) return -1;
  return ti.dims.back().fixed() ? ti.dims.back().value : -1;
}

inline std::vector<int64_t> perm_of(const Node& n) { return n.attr_ints("perm", {}); }

// Result of trying one anchor node.
enum class Match { None, Rejected, Applied };

// Runs try_at on every node in order. After an applied rewrite the graph is compacted (dropping
// the nodes try_at marked dead), the index rebuilt, and the scan continues after the nodes
// already visited.
inline void scan(PassContext& ctx, const std::function<Match(const GraphIndex&, int, std::vector<bool>&)>& try_at) {
  Graph& g = ctx.graph;
  auto ix = std::make_unique<GraphIndex>(g);
  for (int i = 0; i < int(g.nodes.size()); ++i) {
    std::vector<bool> dead(g.nodes.size(), false);
    if (try_at(*ix, i, dead) != Match::Applied) continue;
    int removed_upto_i = 0;
    for (int k = 0; k <= i; ++k) removed_upto_i += dead[size_t(k)] ? 1 : 0;
    compact(g, dead);
    ix = std::make_unique<GraphIndex>(g);
    i -= removed_upto_i;  // nodes up to i that survived were visited; go on with the next one
  }
}

// Rewrites node n in place as the fused op.
inline void rewrite(Node& n, const std::string& domain, const std::string& op, int opset, std::vector<int> inputs,
             std::vector<Attribute> attrs) {
  n.domain = domain;
  n.op_type = op;
  n.opset = opset;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  n.implicit_inputs.clear();
  n.capture_index.clear();
  n.kernel.reset();
}

// The fused node takes the name of the chain's first node (docs/fused_ops.md), so reports and
// profiles name the layer the exporter named; that node is dropped, so the name stays unique.
inline void adopt_first_name(Graph& g, const std::vector<bool>& dead, int fused) {
  for (int k = 0; k < fused; ++k)
    if (dead[size_t(k)]) {
      g.nodes[size_t(fused)].name = g.nodes[size_t(k)].name;
      return;
    }
}

}  // namespace basalt
