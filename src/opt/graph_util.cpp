#include "opt/graph_util.hpp"

#include "core/mapped_file.hpp"

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

Attribute make_attr_int(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Int;
  a.i = v;
  return a;
}
Attribute make_attr_float(const std::string& name, float v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Float;
  a.f = v;
  return a;
}
Attribute make_attr_string(const std::string& name, const std::string& v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::String;
  a.s = v;
  return a;
}
Attribute make_attr_ints(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute make_attr_floats(const std::string& name, std::vector<float> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Floats;
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

namespace {

// Symbolic dims (< -1) broadcast only against 1 or the same symbol: a symbol might be 1 at run
// time, so "S vs 5" or "S vs T" is not provable and gives up.
bool broadcast_shapes(const Shape& a, const Shape& b, Shape& out) {
  size_t r = std::max(a.size(), b.size());
  Shape o(r, 1);
  for (size_t i = 0; i < r; ++i) {
    int64_t x = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t y = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (x != y && x != 1 && y != 1) return false;
    o[i] = x == 1 ? y : x;
  }
  out = std::move(o);
  return true;
}

// Interns symbol expressions: dim value -2 - k names symbols[k].
int64_t intern(StaticShapes& st, const std::string& key) {
  for (size_t k = 0; k < st.symbols.size(); ++k)
    if (st.symbols[k] == key) return -2 - int64_t(k);
  st.symbols.push_back(key);
  return -2 - int64_t(st.symbols.size() - 1);
}

// Output spatial dims of Conv / pooling. kernel: spatial kernel sizes. False when attributes
// are malformed (the kernel factory reports those later).
bool window_out(const Node& n, const Shape& x, const std::vector<int64_t>& kernel, bool ceil_mode, Shape& out,
                StaticShapes& st) {
  size_t sp = kernel.size();
  if (x.size() != sp + 2) return false;
  std::vector<int64_t> strides = n.attr_ints("strides", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> dil = n.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  std::vector<int64_t> pads = n.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) return false;
  // Absurd values (the kernel factory rejects them) would overflow the arithmetic below: unknown.
  for (const auto* v : {&strides, &dil, &pads})
    for (int64_t e : *v)
      if (e > INT32_MAX || e < -INT32_MAX) return false;
  out.assign(sp, 0);
  for (size_t i = 0; i < sp; ++i) {
    int64_t in = x[i + 2], s = strides[i], ek = 0;
    if (kernel[i] > (int64_t(1) << 40) || kernel[i] < -(int64_t(1) << 40) || __builtin_mul_overflow(kernel[i] - 1, dil[i], &ek)) return false;
    ek += 1;
    if (s <= 0 || ek <= 0) return false;
    if (in > (int64_t(1) << 62) || ek > (int64_t(1) << 62)) return false;
    if (in < 0) {
      // Symbolic input size: the output is the same expression of it for the same
      // (offset, stride), whichever Conv or pool computes it.
      std::string sym = st.symbols[size_t(-2 - in)];
      if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
        out[i] = s == 1 ? in : intern(st, "ceil(" + sym + "/" + std::to_string(s) + ")");
      } else {
        int64_t off = ap == "VALID" ? 1 - ek : pads[i] + pads[i + sp] - ek;
        if (s == 1 && off == -1) out[i] = in;
        else
          out[i] = intern(st, std::string(ceil_mode ? "ceil" : "floor") + "((" + sym + (off >= 0 ? "+" : "") +
                                  std::to_string(off) + ")/" + std::to_string(s) + ")+1");
      }
      continue;
    }
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      out[i] = (in + s - 1) / s;
    } else if (ap == "VALID") {
      out[i] = in >= ek ? (in - ek) / s + 1 : 0;
    } else {
      int64_t span = in + pads[i] + pads[i + sp] - ek;
      if (span < 0) return false;
      out[i] = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
    }
  }
  return true;
}

}  // namespace

std::string StaticShapes::shape_str(const Shape& s) const {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i) r += (i ? "," : "") + dim_str(s[i]);
  return r + "]";
}

StaticShapes infer_static_shapes(const Graph& g) {
  StaticShapes st;
  st.known.assign(g.values.size(), false);
  st.shape.assign(g.values.size(), {});
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
                                : intern(st, dim.param.empty() ? "?" + d.name + "#" + std::to_string(k) : "$" + dim.param));
      }
      st.known[v] = true;
      st.shape[v] = s;
    }
  }
  auto set = [&](int v, const Shape& s) {
    if (v < 0) return;
    st.known[size_t(v)] = true;
    st.shape[size_t(v)] = s;
  };
  static const char* const kSame[] = {
      "Relu", "Sigmoid", "Tanh", "Clip", "LeakyRelu", "HardSigmoid", "HardSwish", "Elu", "Selu", "Erf",
      "Exp", "Log", "Sqrt", "Neg", "Abs", "Reciprocal", "Identity", "Dropout", "Cast", "Softmax",
      "LogSoftmax", "BatchNormalization", "LRN", "InstanceNormalization", "LayerNormalization", "Gelu",
      "Softplus", "Softsign", "Mish", "Floor", "Ceil", "Round", "Not", "Sign", "Sin", "Cos", "PRelu",
      "ThresholdedRelu", "Celu", "IsNaN", "IsInf"};
  static const char* const kBroadcast[] = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean",
                                           "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual",
                                           "And", "Or", "Xor", "Where", "Mod", "BitShift"};
  for (const Node& n : g.nodes) {
    if (n.outputs.empty() || n.outputs[0] < 0) continue;
    int out = n.outputs[0];
    std::vector<Shape> in(n.inputs.size());
    // have[k]: input k exists and its shape is known. At least 4 entries, so that the rules below
    // may test have[0..3] of a node with fewer inputs (a malformed model's Flatten without any).
    std::vector<bool> have(std::max<size_t>(n.inputs.size(), 4), false);
    for (size_t i = 0; i < n.inputs.size(); ++i) have[i] = st.get_symbolic(n.inputs[i], in[i]);
    auto numeric = [&](size_t i) {
      for (int64_t d : in[i])
        if (d < 0) return false;
      return true;
    };
    auto all_inputs = [&]() {
      for (size_t i = 0; i < n.inputs.size(); ++i)
        if (n.inputs[i] >= 0 && !have[i]) return false;
      return !n.inputs.empty();
    };
    const std::string& op = n.op_type;
    bool std_domain = n.domain.empty();
    Shape s;
    bool ok = false;
    try {
      if ((std_domain && std::find(std::begin(kSame), std::end(kSame), op) != std::end(kSame)) ||
          (n.domain == "basalt" && (op == "FusedBatchNormalization" || op == "NchwcBatchNormalization"))) {
        if (!n.inputs.empty() && have[0]) {
          s = in[0];
          ok = true;
        }
      } else if (std_domain && std::find(std::begin(kBroadcast), std::end(kBroadcast), op) != std::end(kBroadcast)) {
        if (all_inputs()) {
          ok = true;
          s = in[0];
          for (size_t i = 1; i < in.size() && ok; ++i) ok = broadcast_shapes(s, in[i], s);
        }
      } else if ((std_domain && op == "Conv") || (n.domain == "basalt" && op == "FusedConv")) {
        if (n.inputs.size() >= 2 && have[0] && have[1] && in[1].size() == in[0].size() && in[0].size() >= 3) {
          std::vector<int64_t> k(in[1].begin() + 2, in[1].end());
          Shape sp;
          if (window_out(n, in[0], k, false, sp, st)) {
            s = {in[0][0], in[1][0]};
            s.insert(s.end(), sp.begin(), sp.end());
            ok = true;
          }
        }
      } else if (n.domain == "basalt" && (op == "NchwcConv" || op == "NchwcMaxPool" || op == "NchwcAveragePool")) {
        // blocked [N, CB, H, W, 16] (kernels/nchwc.hpp); NchwcConv may read NCHW (plain_input)
        const bool conv = op == "NchwcConv";
        const bool plain = conv && n.attr_int("plain_input", 0) != 0;
        if (have[0] && in[0].size() == (plain ? 4u : 5u) && (!conv || (have[1] && in[1].size() == 4 && in[1][0] > 0))) {
          std::vector<int64_t> k = conv ? std::vector<int64_t>(in[1].begin() + 2, in[1].end()) : n.attr_ints("kernel_shape");
          Shape logical(in[0].begin(), in[0].begin() + 4);
          Shape sp;
          if (window_out(n, logical, k, !conv && n.attr_int("ceil_mode", 0) != 0, sp, st) && sp.size() == 2) {
            s = {in[0][0], conv ? (in[1][0] + 15) / 16 : in[0][1], sp[0], sp[1], 16};
            ok = true;
          }
        }
      } else if (n.domain == "basalt" && (op == "ReorderToNchwc" || op == "ReorderFromNchwc" ||
                                          op == "NchwcGlobalAveragePool" || op == "NchwcGlobalMaxPool")) {
        if (have[0] && op == "ReorderToNchwc" && in[0].size() == 4 && in[0][1] > 0) {
          s = {in[0][0], (in[0][1] + 15) / 16, in[0][2], in[0][3], 16};
          ok = true;
        } else if (have[0] && in[0].size() == 5 && n.attr_int("channels", 0) > 0) {
          bool global = op != "ReorderFromNchwc";
          s = {in[0][0], n.attr_int("channels"), global ? 1 : in[0][2], global ? 1 : in[0][3]};
          ok = true;
        }
      } else if (std_domain && (op == "MaxPool" || op == "AveragePool" || op == "LpPool")) {
        if (have[0] && in[0].size() >= 3) {
          std::vector<int64_t> k = n.attr_ints("kernel_shape");
          Shape sp;
          if (window_out(n, in[0], k, n.attr_int("ceil_mode", 0) != 0, sp, st)) {
            s = {in[0][0], in[0][1]};
            s.insert(s.end(), sp.begin(), sp.end());
            ok = true;
          }
        }
      } else if (std_domain && (op == "GlobalAveragePool" || op == "GlobalMaxPool")) {
        if (have[0] && in[0].size() >= 2) {
          s = in[0];
          for (size_t i = 2; i < s.size(); ++i) s[i] = 1;
          ok = true;
        }
      } else if (std_domain && op == "Concat") {
        if (all_inputs()) {
          int64_t r = int64_t(in[0].size()), ax = n.attr_int("axis");
          if (ax < 0) ax += r;
          ok = ax >= 0 && ax < r;
          s = in[0];
          for (size_t i = 0; i < in.size() && ok; ++i)
            if (int64_t(in[i].size()) != r || in[i][size_t(ax)] < 0) ok = false;  // a symbolic sum: give up
          for (size_t i = 1; i < in.size() && ok; ++i)
            if (__builtin_add_overflow(s[size_t(ax)], in[i][size_t(ax)], &s[size_t(ax)])) ok = false;
        }
      } else if (std_domain && op == "Flatten") {
        if (have[0] && numeric(0)) {
          int64_t r = int64_t(in[0].size()), ax = n.attr_int("axis", 1);
          if (ax < 0) ax += r;
          if (ax >= 0 && ax <= r) {
            int64_t a = 1, b = 1;
            ok = true;
            for (int64_t i = 0; i < r && ok; ++i)
              if (__builtin_mul_overflow(i < ax ? a : b, in[0][size_t(i)], i < ax ? &a : &b)) ok = false;
            s = {a, b};
          }
        }
      } else if (std_domain && op == "Reshape") {
        const Tensor* sh = n.inputs.size() >= 2 ? constant_of(g, n.inputs[1]) : nullptr;
        if (have[0] && numeric(0) && sh) {
          std::vector<int64_t> t = sh->to_int64_vector();
          bool allowzero = n.attr_int("allowzero", 0) != 0;
          int64_t known = 1, neg = -1;
          ok = true;
          for (size_t i = 0; i < t.size() && ok; ++i) {
            if (t[i] == 0 && !allowzero) {
              if (i >= in[0].size()) ok = false;
              else t[i] = in[0][i];
            }
            if (t[i] == -1) {
              if (neg >= 0) ok = false;
              neg = int64_t(i);
            } else if (t[i] < 0) {
              ok = false;
            } else if (__builtin_mul_overflow(known, t[i], &known)) {
              ok = false;  // a bogus shape (fuzzed model): leave it to the kernel's checks
            }
          }
          int64_t total = 1;
          for (int64_t d : in[0])
            if (__builtin_mul_overflow(total, d, &total)) ok = false;
          if (ok && neg >= 0) {
            if (known == 0 || total % known) ok = false;
            else t[size_t(neg)] = total / known;
          } else if (ok && known != total) {
            ok = false;
          }
          s = t;
        }
      } else if (std_domain && op == "Transpose") {
        // perm must be a permutation of the input's axes (default: reversed); symbols move along.
        if (have[0]) {
          const size_t r = in[0].size();
          // Reversed only when the attribute is absent: an empty perm on rank >= 1 is an error
          // the kernel reports, so the shape stays unknown.
          std::vector<int64_t> perm = n.attr_ints("perm", {});
          if (!n.has_attr("perm"))
            for (size_t i = 0; i < r; ++i) perm.push_back(int64_t(r - 1 - i));
          std::vector<bool> used(r, false);
          ok = perm.size() == r;
          for (size_t i = 0; i < perm.size() && ok; ++i) {
            ok = perm[i] >= 0 && perm[i] < int64_t(r) && !used[size_t(perm[i])];
            if (ok) {
              used[size_t(perm[i])] = true;
              s.push_back(in[0][size_t(perm[i])]);
            }
          }
        }
      } else if (std_domain && op == "Gemm") {
        if (have[0] && have[1] && in[0].size() == 2 && in[1].size() == 2) {
          s = {n.attr_int("transA", 0) ? in[0][1] : in[0][0], n.attr_int("transB", 0) ? in[1][0] : in[1][1]};
          ok = true;
        }
      } else if (std_domain && op == "MatMul") {
        if (have[0] && have[1] && in[0].size() >= 2 && in[1].size() >= 2) {
          Shape ba(in[0].begin(), in[0].end() - 2), bb(in[1].begin(), in[1].end() - 2);
          if (in[0].back() == in[1][in[1].size() - 2] && broadcast_shapes(ba, bb, s)) {
            s.push_back(in[0][in[0].size() - 2]);
            s.push_back(in[1].back());
            ok = true;
          }
        }
      }
    } catch (const Error&) {
      ok = false;  // malformed attributes: the kernel factory reports them
    }
    if (ok) set(out, s);
    else if (static_shape_of(g, out, s)) set(out, s);  // declared (value_info)
  }
  return st;
}

}  // namespace basalt
