#include "opt/graph_util.hpp"

#include "core/mapped_file.hpp"
#include "ops/kernel.hpp"
#include "core/storage.hpp"

#include <algorithm>

namespace basalt {

void PassContext::applied(const std::string& pattern) { ++report.fusions[pattern]; }

void PassContext::reject(const std::string& pattern, const Node& n, const std::string& reason) {
  report.rejected.push_back({pattern, n.name, reason});
}

GraphIndex::GraphIndex(const Graph& g)
    : g_(g), consumers_(g.values.size()), captured_(g.values.size(), false), is_output_(g.values.size(), false) {
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& n = g.nodes[ni];
    auto add = [&](int v) {
      if (v < 0) return;
      auto& c = consumers_[size_t(v)];
      if (c.empty() || c.back() != int(ni)) c.push_back(int(ni));
    };
    for (int v : n.inputs) add(v);
    for (int v : n.implicit_inputs) {
      add(v);
      captured_[size_t(v)] = true;
    }
  }
  for (int v : g.outputs) is_output_[size_t(v)] = true;
}

int GraphIndex::sole_consumer(int v) const {
  if (!indexed(v) || is_output_[size_t(v)] || consumers_[size_t(v)].size() != 1) return -1;
  return consumers_[size_t(v)][0];
}

const Tensor* constant_of(const Graph& g, int v) {
  if (v < 0 || size_t(v) >= g.values.size()) return nullptr;
  const ValueDef& d = g.values[size_t(v)];
  // A capture is a constant only when propagate_capture_constants made it one (an initializer of
  // the enclosing graph).
  if (!d.is_initializer || d.is_graph_input) return nullptr;
  return &d.initializer;
}

void drop_constant(Graph& g, int v) {
  Tensor& t = g.values[size_t(v)].initializer;
  if (!t.raw()) return;
  if (t.storage() && !t.storage()->owned && t.storage()->file_fd >= 0) release_file_pages(t.raw(), t.nbytes());
  t = Tensor::view(t.dtype(), t.shape(), nullptr, nullptr);
}

void replace_uses(Graph& g, int old_value, int new_value) {
  for (auto& n : g.nodes) {
    for (int& v : n.inputs)
      if (v == old_value) v = new_value;
    for (int& v : n.implicit_inputs)
      if (v == old_value) v = new_value;
  }
  for (int& v : g.outputs)
    if (v == old_value) v = new_value;
}

std::string unique_value_name(const Graph& g, const std::string& hint) {
  std::string base = hint.empty() ? std::string("basalt_opt") : hint;
  if (g.find_value(base) < 0) return base;
  for (int k = 1;; ++k) {
    std::string s = base + "_" + std::to_string(k);
    if (g.find_value(s) < 0) return s;
  }
}

int add_constant(Graph& g, const std::string& name_hint, Tensor t) {
  int id = g.add_value(unique_value_name(g, name_hint));
  ValueDef& d = g.values[size_t(id)];
  d.is_initializer = true;
  d.type.kind = TypeInfo::Kind::Tensor;
  d.type.elem = t.dtype();
  d.type.has_shape = true;
  for (int64_t x : t.shape()) d.type.dims.push_back(DimInfo{x, ""});
  d.initializer = std::move(t);
  return id;
}

void compact(Graph& g, const std::vector<bool>& dead_nodes) {
  if (dead_nodes.size() != g.nodes.size()) BASALT_THROW(Internal, "compact: dead_nodes has the wrong size");
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!dead_nodes[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  reindex(g);
}

void reindex(Graph& g) {
  for (auto& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int v : g.nodes[i].outputs)
      if (v >= 0) g.values[size_t(v)].producer = int(i);
  g.finalize();
}

namespace {
// An attribute with a name and a type; the caller sets its value.
Attribute named_attr(const std::string& name, Attribute::Type type) {
  Attribute a;
  a.name = name;
  a.type = type;
  return a;
}
}  // namespace

Attribute make_attr_int(const std::string& name, int64_t v) {
  Attribute a = named_attr(name, Attribute::Type::Int);
  a.i = v;
  return a;
}
Attribute make_attr_float(const std::string& name, float v) {
  Attribute a = named_attr(name, Attribute::Type::Float);
  a.f = v;
  return a;
}
Attribute make_attr_string(const std::string& name, const std::string& v) {
  Attribute a = named_attr(name, Attribute::Type::String);
  a.s = v;
  return a;
}
Attribute make_attr_ints(const std::string& name, std::vector<int64_t> v) {
  Attribute a = named_attr(name, Attribute::Type::Ints);
  a.ints = std::move(v);
  return a;
}
Attribute make_attr_floats(const std::string& name, std::vector<float> v) {
  Attribute a = named_attr(name, Attribute::Type::Floats);
  a.floats = std::move(v);
  return a;
}

void set_attr(Node& n, Attribute a) {
  for (auto& x : n.attrs)
    if (x.name == a.name) {
      x = std::move(a);
      return;
    }
  n.attrs.push_back(std::move(a));
}

void remove_attr(Node& n, const std::string& name) {
  n.attrs.erase(std::remove_if(n.attrs.begin(), n.attrs.end(), [&](const Attribute& a) { return a.name == name; }),
                n.attrs.end());
}

bool static_shape_of(const Graph& g, int v, Shape& out) {
  if (v < 0) return false;
  const ValueDef& d = g.values[size_t(v)];
  if (d.is_initializer && !d.is_graph_input) {
    out = d.initializer.shape();
    return true;
  }
  if (d.type.kind != TypeInfo::Kind::Tensor || !d.type.has_shape) return false;
  out.clear();
  for (auto& dim : d.type.dims) {
    if (!dim.fixed()) return false;
    out.push_back(dim.value);
  }
  return true;
}

void import_basalt_domain(Model& m) {
  if (!m.opsets.count("basalt")) m.opsets["basalt"] = 1;
}

}  // namespace basalt

namespace basalt {

std::string StaticShapes::shape_str(const Shape& s) const {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + dim_str(s[i]);
  return r + "]";
}

// The optimizer's shape inference: the same per-op rules as the planner's (ops/op_traits.hpp),
// run on shapes whose unknown dims are symbols. A rule declared infer_symbolic sees the symbols;
// any other runs only when its inputs' dims are all numbers. Constants carry their values (a
// Reshape's target shape); nothing is computed from data here (no kernels exist yet).
StaticShapes infer_static_shapes(const Graph& g) {
  StaticShapes st;
  st.known.assign(g.values.size(), false);
  st.shape.assign(g.values.size(), {});
  std::vector<InferredValue> iv(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) {
    const ValueDef& d = g.values[v];
    if (d.is_capture) continue;
    Shape s;
    if ((d.is_initializer || d.is_graph_input || d.producer < 0) && static_shape_of(g, int(v), s)) {
      st.known[v] = true;
      st.shape[v] = s;
    } else if (d.is_graph_input && !d.is_initializer && d.type.kind == TypeInfo::Kind::Tensor && d.type.has_shape) {
      // Named dims are symbols (the same name is the same size, as ONNX specifies); an unnamed
      // unknown dim gets a symbol of its own.
      s.clear();
      for (size_t k = 0; k < d.type.dims.size(); ++k) {
        const DimInfo& dim = d.type.dims[k];
        s.push_back(dim.fixed() ? dim.value
                                : st.symbols.intern(dim.param.empty() ? "?" + d.name + "#" + std::to_string(k)
                                                                      : "$" + dim.param));
      }
      st.known[v] = true;
      st.shape[v] = s;
    } else {
      continue;
    }
    InferredValue& x = iv[v];
    x.state = InferredValue::State::Known;
    x.shape = st.shape[v];
    if (d.is_initializer && !d.is_graph_input) {
      x.dtype = d.initializer.dtype();
      x.value = d.initializer;
    } else if (d.type.kind == TypeInfo::Kind::Tensor) {
      x.dtype = d.type.elem;
    }
  }
  ShapeInputs in;
  in.symbols = &st.symbols;
  ShapeOutputs out;
  for (const Node& n : g.nodes) {
    in.v.assign(n.inputs.size(), nullptr);
    bool numeric = true;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] < 0) continue;  // omitted: null; unknown: present but not known()
      in.v[k] = &iv[size_t(n.inputs[k])];
      if (in.v[k]->known() && !all_numeric(in.v[k]->shape)) numeric = false;
    }
    out.assign(n.outputs.size(), InferredValue());
    bool ok = false;
    const OpTraits* t = op_traits(n);
    if (t && t->shape && (numeric || t->symbolic)) {
      try {
        ok = t->shape(n, in, out);
      } catch (const Error&) {
        ok = false;  // malformed attributes: the kernel factory reports them
      }
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const int o = n.outputs[k];
      if (o < 0) continue;
      Shape s;
      if (ok && out[k].known()) {
        // A value a rule gives from shapes alone (Shape, Size: numeric dims only) is kept.
        st.known[size_t(o)] = true;
        st.shape[size_t(o)] = out[k].shape;
        iv[size_t(o)] = out[k];
      } else if (static_shape_of(g, o, s)) {  // declared (value_info)
        st.known[size_t(o)] = true;
        st.shape[size_t(o)] = s;
        iv[size_t(o)].state = InferredValue::State::Known;
        iv[size_t(o)].shape = s;
        iv[size_t(o)].dtype = g.values[size_t(o)].type.elem;
      }
    }
  }
  return st;
}

}  // namespace basalt
