// Basic-level cleanups: they keep standard ai.onnx ops, so models saved after them load anywhere.
#include "ops/kernel.hpp"
#include "opt/passes.hpp"

#include <algorithm>

namespace basalt {

namespace {

bool is_op(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

bool has_subgraph(const Node& n) {
  for (auto& a : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

// Makes the output `out` of node `ni` (about to be dropped) be read from `in` instead. Returns
// false (and leaves the graph alone) when that would change a name the outside world sees.
bool bypass(Graph& g, const GraphIndex& idx, int ni, int in, int out, const char* pattern, PassContext& ctx) {
  const Node& n = g.nodes[size_t(ni)];
  if (idx.captured(out)) {
    ctx.reject(pattern, n, "output is used by a subgraph (captured by name)");
    return false;
  }
  if (!idx.is_graph_output(out)) {
    replace_uses(g, out, in);
    return true;
  }
  // `out` names a graph output: the producer of `in` must produce `out` itself instead.
  const ValueDef& iv = g.values[size_t(in)];
  int p = iv.producer;
  if (p < 0 || iv.is_graph_input || iv.is_initializer || idx.is_graph_output(in) || idx.captured(in)) {
    ctx.reject(pattern, n, "output is a graph output and its input is a graph input, a constant or another graph output");
    return false;
  }
  for (int& o : g.nodes[size_t(p)].outputs)
    if (o == in) o = out;
  g.values[size_t(out)].producer = p;
  replace_uses(g, in, out);
  g.values[size_t(in)].producer = -1;
  return true;
}

}  // namespace

void remove_identity(PassContext& ctx) {
  Graph& g = ctx.graph;
  // Rescans after each rewrite (the index is stale) from where it stopped, so each node is
  // judged, and each rejection reported, once.
  bool changed = true;
  size_t resume = 0;
  while (changed) {
    changed = false;
    GraphIndex idx(g);
    for (size_t i = resume; i < g.nodes.size() && !changed; ++i) {
      resume = i;
      const Node& n = g.nodes[i];
      bool identity = is_op(n, "Identity"), dropout = is_op(n, "Dropout");
      if (!identity && !dropout) continue;
      if (n.inputs.empty() || n.inputs[0] < 0 || n.outputs.empty() || n.outputs[0] < 0) continue;
      const char* pattern = identity ? "Identity" : "Dropout";
      if (dropout) {
        if (n.outputs.size() > 1 && n.outputs[1] >= 0 &&
            (idx.num_consumers(n.outputs[1]) > 0 || idx.is_graph_output(n.outputs[1]))) {
          ctx.reject(pattern, n, "its mask output is used");
          continue;
        }
        if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
          const Tensor* tm = constant_of(g, n.inputs[2]);
          if (!tm || tm->numel() != 1 || tm->get_int(0) != 0) {
            ctx.reject(pattern, n, "training_mode is not a constant false");
            continue;
          }
        }
      }
      int in = n.inputs[0], out = n.outputs[0];
      if (!bypass(g, idx, int(i), in, out, pattern, ctx)) continue;
      std::vector<bool> dead(g.nodes.size(), false);
      dead[i] = true;
      compact(g, dead);
      ctx.applied(std::string(pattern) + " removed");
      changed = true;
    }
  }
}

namespace {

// Never folded: ops whose result is not a function of their inputs, and DequantizeLinear,
// whose folding would store quantized weights as 4x larger floats and hide the quantized
// pattern from the kernels that run it directly.
bool never_fold(const Node& n) {
  static const char* const kOps[] = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                                     "Multinomial", "Bernoulli", "DequantizeLinear"};
  return std::find(std::begin(kOps), std::end(kOps), n.op_type) != std::end(kOps);
}

constexpr int64_t kFoldMaxElements = int64_t(1) << 20;

// Shape / Size of a value whose shape is static: computed here, no kernel needed.
bool fold_shape_op(const Node& n, const StaticShapes& shapes, Tensor& out) {
  Shape s;
  if (n.inputs.empty() || !shapes.get(n.inputs[0], s)) return false;
  if (n.op_type == "Size") {
    out = Tensor::scalar<int64_t>(shape_numel(s));
    return true;
  }
  int64_t r = int64_t(s.size());
  int64_t start = n.attr_int("start", 0), end = n.attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(s[size_t(i)]);
  out = Tensor::from_vector(dims, Shape{int64_t(dims.size())});
  return true;
}

void make_constant(Graph& g, int v, Tensor t) {
  ValueDef& d = g.values[size_t(v)];
  d.is_initializer = true;
  d.type.kind = TypeInfo::Kind::Tensor;
  d.type.elem = t.dtype();
  d.type.has_shape = true;
  d.type.dims.clear();
  for (int64_t x : t.shape()) d.type.dims.push_back(DimInfo{x, ""});
  d.initializer = std::move(t);
}

}  // namespace

void fold_constants(PassContext& ctx) {
  Graph& g = ctx.graph;
  const OpRegistry& reg = OpRegistry::instance();
  StaticShapes shapes = infer_static_shapes(g);
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.outputs.empty() || !n.implicit_inputs.empty() || has_subgraph(n) || never_fold(n)) continue;
    bool produces = false;
    for (int o : n.outputs) produces |= o >= 0;
    if (!produces) continue;
    if (n.domain.empty() && (n.op_type == "Shape" || n.op_type == "Size") && n.outputs.size() == 1) {
      Tensor t;
      if (fold_shape_op(n, shapes, t)) {
        make_constant(g, n.outputs[0], std::move(t));
        dead[i] = true;
        any = true;
        ctx.applied(n.op_type + " of a static shape folded");
        continue;
      }
    }
    if (n.inputs.empty()) continue;
    std::vector<Value> in_vals(n.inputs.size());
    std::vector<const Value*> in_ptrs(n.inputs.size(), nullptr);
    std::vector<const Tensor*> consts(n.inputs.size(), nullptr);
    bool all_const = true;
    int64_t in_elems = 0;
    for (size_t k = 0; k < n.inputs.size() && all_const; ++k) {
      if (n.inputs[k] < 0) continue;
      const Tensor* t = constant_of(g, n.inputs[k]);
      if (!t) all_const = false;
      else {
        in_vals[k] = Value(*t);
        in_ptrs[k] = &in_vals[k];
        consts[k] = t;
        in_elems += t->numel();
      }
    }
    if (!all_const) continue;
    const KernelFactory* f = reg.find(n.domain, n.op_type, n.opset);
    if (!f) continue;  // create_kernels reports the unsupported op
    std::vector<Value> outs(n.outputs.size());
    try {
      std::unique_ptr<OpKernel> k = (*f)(n);
      PrepareContext pc{n, consts, 1, {}, ctx.opts.winograd};
      k->prepare(pc);
      RunContext rc;
      KernelContext kc(n, in_ptrs, outs, {}, rc);
      k->compute(kc);
    } catch (const std::exception& e) {
      // The same error would come at run time; leave the node for it to be reported there.
      ctx.reject("ConstantFolding", n, std::string("kernel failed at optimize time: ") + e.what());
      continue;
    }
    bool foldable = true;
    int64_t out_elems = 0;
    for (size_t k = 0; k < outs.size(); ++k) {
      if (n.outputs[k] < 0) continue;
      if (!outs[k].is_tensor()) foldable = false;
      else out_elems += outs[k].tensor.numel();
    }
    if (!foldable) continue;
    if (out_elems > kFoldMaxElements && out_elems > in_elems) {
      ctx.reject("ConstantFolding", n,
                 "result has " + std::to_string(out_elems) +
                     " elements, more than its inputs and the 1M-element bound (kept: folding would grow the model)");
      continue;
    }
    for (size_t k = 0; k < outs.size(); ++k)
      if (n.outputs[k] >= 0) make_constant(g, n.outputs[k], std::move(outs[k].tensor));
    dead[i] = true;
    any = true;
    ctx.applied("ConstantFolding");
  }
  if (any) compact(g, dead);
}

void fold_reshape_chains(PassContext& ctx) {
  Graph& g = ctx.graph;
  bool changed = true;
  size_t resume = 0;  // as in remove_identity: one judgement per node
  while (changed) {
    changed = false;
    GraphIndex idx(g);
    for (size_t i = resume; i < g.nodes.size() && !changed; ++i) {
      Node& n = g.nodes[i];
      if (!is_op(n, "Reshape") || n.inputs.size() < 2 || n.inputs[0] < 0) continue;
      // The last Reshape's target shape must not depend on its input's shape: a 0 entry copies
      // a dim of the input (unless allowzero), which the bypassed chain may have changed.
      const Tensor* shape = constant_of(g, n.inputs[1]);
      if (!shape) continue;
      bool allowzero = n.attr_int("allowzero", 0) != 0;
      std::vector<int64_t> dims = shape->to_int64_vector();
      bool copies_dim = !allowzero && std::find(dims.begin(), dims.end(), 0) != dims.end();
      // Walk back over shape-only ops whose output only this chain reads.
      int src = n.inputs[0];
      std::vector<int> chain;
      while (true) {
        const Node* p = producer_node(g, src);
        if (!p || !p->domain.empty() || p->inputs.empty() || p->inputs[0] < 0) break;
        if (p->op_type != "Reshape" && p->op_type != "Squeeze" && p->op_type != "Unsqueeze" && p->op_type != "Flatten")
          break;
        if (idx.sole_consumer(src) < 0 || idx.captured(src)) break;
        chain.push_back(g.values[size_t(src)].producer);
        src = p->inputs[0];
      }
      if (chain.empty()) continue;
      if (copies_dim) {
        ctx.reject("Reshape chain", n, "target shape has a 0 entry (copies a dim of its input)");
        continue;
      }
      n.inputs[0] = src;
      std::vector<bool> dead(g.nodes.size(), false);
      for (int c : chain) dead[size_t(c)] = true;
      compact(g, dead);
      resume = i - chain.size();  // the chain's nodes all came before node i
      ctx.applied("Reshape chain folded");
      changed = true;
    }
  }
}

void remove_dead_nodes(PassContext& ctx) {
  Graph& g = ctx.graph;
  std::vector<bool> needed(g.values.size(), false);
  for (int v : g.outputs) needed[size_t(v)] = true;
  std::vector<bool> dead(g.nodes.size(), false);
  int removed = 0;
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    bool live = n.outputs.empty();  // an op with no outputs is kept: nothing says it is unused
    for (int o : n.outputs)
      if (o >= 0 && needed[size_t(o)]) live = true;
    if (!live) {
      dead[i] = true;
      ++removed;
      continue;
    }
    for (int v : n.inputs)
      if (v >= 0) needed[size_t(v)] = true;
    for (int v : n.implicit_inputs) needed[size_t(v)] = true;
  }
  if (removed) {
    compact(g, dead);
    for (int k = 0; k < removed; ++k) ctx.applied("dead node removed");
  }
  // Constants nothing reads any more (weights replaced by folded copies) are released, so the
  // session does not keep both. Graph inputs with defaults stay: callers may feed them.
  bool freed = false;
  for (size_t v = 0; v < g.values.size(); ++v) {
    ValueDef& d = g.values[v];
    if (d.is_initializer && !d.is_graph_input && !needed[v]) {
      d.is_initializer = false;
      d.initializer = Tensor();
      freed = true;
    }
  }
  if (freed) g.finalize();
}

}  // namespace basalt
