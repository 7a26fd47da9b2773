// Helpers the optimizer passes share: the pass context (report plumbing), a consumer index, and
// graph-editing primitives that keep a Graph valid (graph/graph.hpp).
//
// Rewrite convention for fusions: rewrite the LAST node of the matched chain in place (its
// outputs, and so the names of graph outputs, stay), change its op_type/domain/opset/inputs/
// attrs, mark the other nodes of the chain dead, then compact(). Because the last node comes
// after every node it depends on, the topological order stays valid without re-sorting.
// Fused ops use domain "basalt", opset 1 (docs/fused_ops.md).
//
// A GraphIndex is a snapshot: rebuild it after editing inputs/outputs (or update it yourself).
#pragma once

#include "graph/graph.hpp"
#include "ops/op_traits.hpp"
#include "opt/optimizer.hpp"

#include <string>
#include <vector>

namespace basalt {

// What every pass gets. `graph` is the graph being rewritten (the model's main graph or one of
// its subgraphs); `model` is the whole model (opset imports).
struct PassContext {
  Model& model;
  Graph& graph;
  const OptimizeOptions& opts;
  OptimizeReport& report;
  // A pattern applied once: counts report.fusions[pattern].
  void applied(const std::string& pattern);
  // A candidate was not rewritten: records {pattern, n.name, reason} in report.rejected.
  void reject(const std::string& pattern, const Node& n, const std::string& reason);
  // True when the pass may introduce basalt-domain ops (opts.standard_ops is off).
  bool nonstandard_ok() const { return !opts.standard_ops; }
};

// Consumers and producers of every value of one graph, at the time it was built.
class GraphIndex {
 public:
  explicit GraphIndex(const Graph& g);
  // True when v existed when the index was built. A value a pass adds afterwards (add_constant)
  // is not indexed: the queries below treat it as read by nobody known, so sole_consumer gives -1
  // and a pass leaves it alone until the next pass builds a fresh index.
  bool indexed(int v) const { return v >= 0 && size_t(v) < consumers_.size(); }
  // Node indices reading v as an input or implicit input (a node reading v twice appears once).
  const std::vector<int>& consumers(int v) const { return indexed(v) ? consumers_[size_t(v)] : none_; }
  int num_consumers(int v) const { return int(consumers(v).size()); }
  // True when v is read by some node as an implicit input (a subgraph captures it by name).
  bool captured(int v) const { return indexed(v) && captured_[size_t(v)]; }
  bool is_graph_output(int v) const { return indexed(v) && is_output_[size_t(v)]; }
  int producer(int v) const { return g_.values[size_t(v)].producer; }
  // The single consumer of v, or -1 when v has 0 or several consumers or is a graph output.
  int sole_consumer(int v) const;

 private:
  const Graph& g_;
  std::vector<std::vector<int>> consumers_;
  std::vector<bool> captured_, is_output_;
  const std::vector<int> none_;
};

// The constant tensor behind value v (an initializer, including folded Constant nodes), or null.
// A graph input with a default (initializer that is also a graph input) is NOT constant: the
// caller may override it. Values captured from an enclosing graph are never constants here.
const Tensor* constant_of(const Graph& g, int v);

// Lets go of constant v's data once no node will read it again (the caller has checked that):
// the value keeps its dtype and shape with no data, and if the bytes were a view of the model
// file, their pages are given back. Anything else sharing the storage keeps it alive.
void drop_constant(Graph& g, int v);

// The producer node of v, or null.
inline const Node* producer_node(const Graph& g, int v) {
  if (v < 0) return nullptr;
  int p = g.values[size_t(v)].producer;
  return p >= 0 ? &g.nodes[size_t(p)] : nullptr;
}

// Replaces every read of old_value by new_value: node inputs, implicit inputs and graph outputs.
// Prefer rewiring the producer when old_value is a graph output (its name is the output's name);
// callers must not replace a value a subgraph captures (GraphIndex::captured): the subgraph
// refers to it by name.
void replace_uses(Graph& g, int old_value, int new_value);

// Adds an initializer with a name derived from name_hint, unique in g. Returns its value id.
int add_constant(Graph& g, const std::string& name_hint, Tensor t);

// A fresh value name derived from hint, unique in g.
std::string unique_value_name(const Graph& g, const std::string& hint);

// Drops the nodes with dead_nodes[i] set, keeping the order of the others; fixes
// ValueDef::producer of every value (outputs of dropped nodes lose their producer) and calls
// g.finalize(). dead_nodes.size() must equal g.nodes.size().
void compact(Graph& g, const std::vector<bool>& dead_nodes);
// After replacing g.nodes (a new node list in topological order): producers and finalize().
void reindex(Graph& g);

// Attribute builders for rewritten nodes.
Attribute make_attr_int(const std::string& name, int64_t v);
Attribute make_attr_float(const std::string& name, float v);
Attribute make_attr_string(const std::string& name, const std::string& v);
Attribute make_attr_ints(const std::string& name, std::vector<int64_t> v);
Attribute make_attr_floats(const std::string& name, std::vector<float> v);
// Sets (replaces or appends) attribute a on n.
void set_attr(Node& n, Attribute a);
void remove_attr(Node& n, const std::string& name);

// Declared static shape of v (every dim fixed), from the graph's type information or the
// constant's shape; false when unknown.
bool static_shape_of(const Graph& g, int v, Shape& out);

// Ensures m imports domain "basalt" (version 1) so saved models declare it.
void import_basalt_domain(Model& m);

}  // namespace basalt

namespace basalt {

// Static shapes of a graph's tensor values, as far as they follow from fixed graph-input
// shapes, constants and declared types through a small set of ops (elementwise and unary ops,
// Conv/pooling, BatchNormalization, Concat, Flatten, Reshape with a constant shape, Gemm,
// MatMul, basalt::FusedConv). shapes[v] is empty-optional when unknown. Used to prove that two
// values have the same shape (residual Add) and to fold Shape/Size.
//
// Dims may be symbolic: a dim below -1 stands for a symbol (a graph input's dim_param, or an
// expression of one such as "(H-1)/2+1" after a strided Conv), equal symbols meaning equal
// sizes. So with a dynamic batch or image size, two values can still be proven to have the
// same shape. get() gives fully numeric shapes only; get_symbolic() may contain symbols.
struct StaticShapes {
  std::vector<bool> known;
  std::vector<Shape> shape;
  SymbolTable symbols;  // dim -2 - k is symbols.names[k]
  bool get(int v, Shape& out) const {
    if (!get_symbolic(v, out)) return false;
    for (int64_t d : out)
      if (d < 0) return false;
    return true;
  }
  bool get_symbolic(int v, Shape& out) const {
    if (v < 0 || !known[size_t(v)]) return false;
    out = shape[size_t(v)];
    return true;
  }
  std::string dim_str(int64_t d) const { return d >= 0 ? std::to_string(d) : symbols.name(d); }
  std::string shape_str(const Shape& s) const;
};
StaticShapes infer_static_shapes(const Graph& g);

}  // namespace basalt
