// ONNX importer: ModelProto -> Graph with kernels. Translates and checks; does no math.
#include "core/mapped_file.hpp"
#include "onnx/gradient.hpp"
#include "onnx/proto.hpp"
#include "onnx/tensor_proto.hpp"
#include "ops/kernel.hpp"
#include "graph/model.hpp"
#include "core/storage.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <queue>
#include <set>

namespace basalt {
namespace {

struct Scope {
  Graph* g;
  Scope* parent;
};

struct FunctionKey {
  std::string domain, name;
  bool operator<(const FunctionKey& o) const { return std::tie(domain, name) < std::tie(o.domain, o.name); }
};

struct BuildCtx {
  std::map<std::string, int64_t> opsets;
  ExternalDataResolver* ext = nullptr;
  std::shared_ptr<const void> keep;
  const MappedFile* file = nullptr;  // the read-only mapping that keep owns; null for a model from memory
  const LoadOptions* opts = nullptr;
  Model* model = nullptr;
  std::map<FunctionKey, const pb::FunctionProto*> functions;
  int depth = 0;
};

TypeInfo type_from_proto(const pb::TypeProto& t) {
  TypeInfo r;
  switch (t.kind) {
    case pb::TypeProto::Kind::None: r.kind = TypeInfo::Kind::Unknown; break;
    case pb::TypeProto::Kind::Tensor: r.kind = TypeInfo::Kind::Tensor; break;
    case pb::TypeProto::Kind::SparseTensor: r.kind = TypeInfo::Kind::SparseTensor; break;
    case pb::TypeProto::Kind::Sequence: r.kind = TypeInfo::Kind::Sequence; break;
    case pb::TypeProto::Kind::Optional: r.kind = TypeInfo::Kind::Optional; break;
    case pb::TypeProto::Kind::Map: r.kind = TypeInfo::Kind::Map; break;
  }
  r.elem = dtype_is_known(t.elem_type) ? DType(t.elem_type) : DType::Undefined;
  r.has_shape = t.has_shape;
  for (auto& d : t.shape) {
    DimInfo di;
    if (d.has_value) di.value = d.value;
    di.param = d.param;
    di.denotation = d.denotation;
    r.dims.push_back(di);
  }
  if (t.elem) r.inner = std::make_shared<TypeInfo>(type_from_proto(*t.elem));
  r.map_key = dtype_is_known(t.map_key_type) ? DType(t.map_key_type) : DType::Undefined;
  return r;
}

std::shared_ptr<Graph> build_graph(const pb::GraphProto& gp, Scope* parent, BuildCtx& cx);

// `allow_misaligned`: a TENSOR value may be a misaligned view of the file (Constant nodes, whose
// value becomes an initializer that align_weights_for_readers checks; see tensor_proto.hpp).
Attribute convert_attr(const pb::AttributeProto& a, const std::string& node_desc, Scope* scope, BuildCtx& cx,
                       bool allow_misaligned = false) {
  Attribute r;
  r.name = a.name;
  if (!a.ref_attr_name.empty())
    BASALT_THROW(InvalidModel, node_desc + ": attribute '" + a.name + "' refers to function attribute '" + a.ref_attr_name +
                                   "' outside a function");
  int type = a.type;
  if (type == 0) {  // very old models omit the type: infer it from the field that is set
    if (a.has_f) type = 1;
    else if (a.has_i) type = 2;
    else if (a.has_s) type = 3;
    else if (a.has_t) type = 4;
    else if (a.g) type = 5;
    else if (!a.floats.empty()) type = 6;
    else if (!a.ints.empty()) type = 7;
    else if (!a.strings.empty()) type = 8;
    else if (!a.tensors.empty()) type = 9;
    else if (!a.graphs.empty()) type = 10;
    else BASALT_THROW(InvalidModel, node_desc + ": attribute '" + a.name + "' has no type and no value");
  }
  if (type < 1 || type > 14) BASALT_THROW(InvalidModel, node_desc + ": attribute '" + a.name + "' has unknown type " + std::to_string(type));
  r.type = Attribute::Type(type);
  std::string what = node_desc + " attribute '" + a.name + "'";
  switch (r.type) {
    case Attribute::Type::Float: r.f = a.f; break;
    case Attribute::Type::Int: r.i = a.i; break;
    case Attribute::Type::String: r.s = a.s.str(); break;
    case Attribute::Type::Tensor:
      if (!a.has_t) BASALT_THROW(InvalidModel, what + " of type TENSOR has no tensor");
      r.t = tensor_from_proto(a.t, what, cx.keep, cx.ext, cx.file, allow_misaligned);
      break;
    case Attribute::Type::SparseTensor: r.t = tensor_from_sparse_proto(a.sparse_tensor, what, cx.ext); break;
    case Attribute::Type::Graph:
      if (!a.g) BASALT_THROW(InvalidModel, what + " of type GRAPH has no graph");
      r.g = build_graph(*a.g, scope, cx);
      break;
    case Attribute::Type::Floats: r.floats = a.floats; break;
    case Attribute::Type::Ints: r.ints = a.ints; break;
    case Attribute::Type::Strings:
      for (auto& s : a.strings) r.strings.push_back(s.str());
      break;
    case Attribute::Type::Tensors:
      for (auto& t : a.tensors) r.tensors.push_back(tensor_from_proto(t, what, cx.keep, cx.ext, cx.file));
      break;
    case Attribute::Type::Graphs:
      for (auto& g : a.graphs) r.graphs.push_back(build_graph(*g, scope, cx));
      break;
    case Attribute::Type::TypeProto: r.tp = type_from_proto(a.tp); break;
    default: BASALT_THROW(Unsupported, what + ": attribute type " + attr_type_name(r.type) + " is not supported");
  }
  return r;
}

// Value of a Constant node, from whichever of its attributes is set.
Tensor constant_value(const Node& n) {
  if (n.attrs.size() != 1) n.fail(ErrorCode::InvalidModel, "Constant needs exactly one value attribute, has " + std::to_string(n.attrs.size()));
  const Attribute& a = n.attrs[0];
  if (a.name == "value" || a.name == "sparse_value") return n.attr_tensor(a.name);
  if (a.name == "value_float") return Tensor::scalar<float>(n.attr_float(a.name));
  if (a.name == "value_int") return Tensor::scalar<int64_t>(n.attr_int(a.name));
  if (a.name == "value_string") {
    Tensor t(DType::String, {});
    t.data<std::string>()[0] = n.attr_string(a.name);
    return t;
  }
  if (a.name == "value_floats") {
    auto v = n.attr_floats(a.name);
    Tensor t(DType::Float, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), t.data<float>());
    return t;
  }
  if (a.name == "value_ints") {
    auto v = n.attr_ints(a.name);
    Tensor t(DType::Int64, {int64_t(v.size())});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return t;
  }
  if (a.name == "value_strings") {
    auto v = n.attr_strings(a.name);
    Tensor t(DType::String, {int64_t(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
    return t;
  }
  n.fail(ErrorCode::InvalidModel, "Constant has unknown attribute '" + a.name + "'");
}

int resolve(Scope* s, const std::string& name) {
  int id = s->g->find_value(name);
  if (id >= 0) return id;
  if (!s->parent) return -1;
  int pid = resolve(s->parent, name);
  if (pid < 0) return -1;
  TypeInfo t = s->parent->g->values[size_t(pid)].type;
  id = s->g->add_value(name);
  s->g->values[size_t(id)].is_capture = true;
  s->g->values[size_t(id)].type = t;
  s->g->captures.push_back(id);
  return id;
}

// Inline calls to model-local functions (recursively), renaming internal values uniquely.
void inline_functions(std::vector<pb::NodeProto>& nodes, BuildCtx& cx, int depth, int& counter) {
  if (cx.functions.empty()) return;
  if (depth > 32) BASALT_THROW(InvalidModel, "model-local functions nest deeper than 32 levels (recursive function?)");
  std::vector<pb::NodeProto> out;
  bool changed = false;
  for (auto& n : nodes) {
    auto it = cx.functions.find({canonical_domain(n.domain), n.op_type});
    if (it == cx.functions.end()) {
      out.push_back(n);
      continue;
    }
    changed = true;
    const pb::FunctionProto& fn = *it->second;
    std::string prefix = "__fn" + std::to_string(counter++) + "_" + (n.name.empty() ? fn.name : n.name) + "/";
    std::map<std::string, std::string> rename;
    for (size_t i = 0; i < fn.input.size(); ++i) rename[fn.input[i]] = i < n.input.size() ? n.input[i] : "";
    for (size_t i = 0; i < fn.output.size(); ++i) rename[fn.output[i]] = i < n.output.size() ? n.output[i] : "";
    auto opsets = std::make_shared<std::vector<pb::OpsetId>>(fn.opset_import);
    auto map_name = [&](const std::string& s) -> std::string {
      if (s.empty()) return s;
      auto r = rename.find(s);
      return r != rename.end() ? r->second : prefix + s;
    };
    for (const auto& body : fn.node) {
      pb::NodeProto b = body;
      for (auto& s : b.input) s = map_name(s);
      for (auto& s : b.output) s = map_name(s);
      if (!b.name.empty()) b.name = prefix + b.name;
      b.fn_opsets = opsets;
      std::vector<pb::AttributeProto> attrs;
      for (auto& a : b.attribute) {
        if (a.ref_attr_name.empty()) {
          attrs.push_back(a);
          continue;
        }
        const pb::AttributeProto* src = nullptr;
        for (auto& na : n.attribute)
          if (na.name == a.ref_attr_name) src = &na;
        if (!src)
          for (auto& da : fn.attribute_proto)
            if (da.name == a.ref_attr_name) src = &da;
        if (!src) continue;  // attribute not given: the op's default applies
        pb::AttributeProto c = *src;
        c.name = a.name;
        attrs.push_back(std::move(c));
      }
      b.attribute = std::move(attrs);
      out.push_back(std::move(b));
    }
  }
  nodes = std::move(out);
  if (changed) inline_functions(nodes, cx, depth + 1, counter);
}

namespace {

// Initializers, dense and sparse (tensors used in place from the mapped file where aligned).
void add_initializers(Graph& g, const pb::GraphProto& gp, const std::string& gname, BuildCtx& cx) {
  // 1. Initializers.
  for (const auto& t : gp.initializer) {
    if (t.name.empty()) BASALT_THROW(InvalidModel, gname + ": initializer without a name");
    if (g.find_value(t.name) >= 0) BASALT_THROW(InvalidModel, gname + ": duplicate initializer '" + t.name + "'");
    Tensor w = tensor_from_proto(t, "initializer '" + t.name + "'", cx.keep, cx.ext, cx.file, /*allow_misaligned=*/true);
    int id = g.add_value(t.name);
    auto& v = g.values[size_t(id)];
    v.is_initializer = true;
    v.type.kind = TypeInfo::Kind::Tensor;
    v.type.elem = w.dtype();
    v.initializer = std::move(w);
  }
  for (const auto& s : gp.sparse_initializer) {
    const std::string& nm = s.values.name;
    if (nm.empty()) BASALT_THROW(InvalidModel, gname + ": sparse initializer without a name");
    if (g.find_value(nm) >= 0) BASALT_THROW(InvalidModel, gname + ": duplicate initializer '" + nm + "'");
    Tensor w = tensor_from_sparse_proto(s, "sparse initializer '" + nm + "'", cx.ext);
    int id = g.add_value(nm);
    auto& v = g.values[size_t(id)];
    v.is_initializer = true;
    v.type.kind = TypeInfo::Kind::Tensor;
    v.type.elem = w.dtype();
    v.initializer = std::move(w);
  }
}

// Graph inputs (an input that is also an initializer is an input with a default).
void add_inputs(Graph& g, const pb::GraphProto& gp, const std::string& gname) {
  for (const auto& in : gp.input) {
    if (in.name.empty()) BASALT_THROW(InvalidModel, gname + ": graph input without a name");
    int id = g.find_value(in.name);
    if (id >= 0 && !g.values[size_t(id)].is_initializer)
      BASALT_THROW(InvalidModel, gname + ": duplicate graph input '" + in.name + "'");
    if (id >= 0 && g.values[size_t(id)].is_graph_input)
      BASALT_THROW(InvalidModel, gname + ": duplicate graph input '" + in.name + "'");
    if (id < 0) id = g.add_value(in.name);
    auto& v = g.values[size_t(id)];
    v.is_graph_input = true;
    if (in.has_type) v.type = type_from_proto(in.type);
    g.inputs.push_back(id);
  }

}

// Registers every node's outputs before any node is built, so that subgraphs and unsorted graphs
// can refer to values defined by later nodes. Returns the nodes' names (made up where empty).
std::vector<std::string> add_node_outputs(Graph& g, const std::vector<pb::NodeProto>& pnodes) {
  std::vector<std::string> node_names(pnodes.size());
  std::set<std::string> used_names;
  for (size_t i = 0; i < pnodes.size(); ++i) {
    const auto& pn = pnodes[i];
    std::string nm = pn.name.empty() ? pn.op_type + "_" + std::to_string(i) : pn.name;
    node_names[i] = nm;
    for (const auto& o : pn.output) {
      if (o.empty()) continue;
      int existing = g.find_value(o);
      if (existing >= 0) {
        const auto& ev = g.values[size_t(existing)];
        std::string by = ev.is_initializer ? "an initializer" : ev.is_graph_input ? "a graph input" : "another node";
        BASALT_THROW(InvalidModel, "node '" + nm + "' (" + pn.op_type + "): output '" + o + "' is already defined by " + by);
      }
      int id = g.add_value(o);
      g.values[size_t(id)].producer = int(i);
    }
  }
  return node_names;
}

// Outer-scope values used by node n's subgraphs become its implicit inputs.
void link_captures(Node& n, Scope& scope) {
  for (const auto& a : n.attrs) {
    std::vector<const Graph*> subs;
    if (a.g) subs.push_back(a.g.get());
    for (auto& sg : a.graphs) subs.push_back(sg.get());
    for (const Graph* sg : subs) {
      std::vector<int> map;
      for (int c : sg->captures) {
        const std::string& cname = sg->values[size_t(c)].name;
        int pid = resolve(&scope, cname);
        if (pid < 0) n.fail(ErrorCode::Internal, "cannot resolve captured value '" + cname + "'");
        auto it = std::find(n.implicit_inputs.begin(), n.implicit_inputs.end(), pid);
        if (it == n.implicit_inputs.end()) {
          n.implicit_inputs.push_back(pid);
          it = n.implicit_inputs.end() - 1;
        }
        map.push_back(int(it - n.implicit_inputs.begin()));
      }
      n.capture_index.emplace_back(sg, std::move(map));
    }
  }
}

// Node pn as a graph node; a Constant becomes its output's initializer instead (nullopt).
std::optional<Node> build_node(const pb::NodeProto& pn, const std::string& name, Graph& g, Scope& scope, BuildCtx& cx) {
  Node n;
  n.name = name;
  n.op_type = pn.op_type;
  n.domain = canonical_domain(pn.domain);
  if (n.op_type.empty()) BASALT_THROW(InvalidModel, "node '" + n.name + "' has no op_type");
  int64_t opset = -1;
  if (pn.fn_opsets) {
    for (auto& o : *pn.fn_opsets)
      if (canonical_domain(o.domain) == n.domain) opset = o.version;
  }
  if (opset < 0) {
    auto it = cx.opsets.find(n.domain);
    if (it == cx.opsets.end())
      n.fail(ErrorCode::InvalidModel, "uses domain '" + (n.domain.empty() ? std::string("ai.onnx") : n.domain) +
                                          "', which the model does not import");
    opset = it->second;
  }
  n.opset = int(opset);
  std::set<std::string> attr_names;
  const bool is_constant = n.op_type == "Constant" && n.domain.empty();
  for (const auto& a : pn.attribute) {
    if (!attr_names.insert(a.name).second) n.fail(ErrorCode::InvalidModel, "duplicate attribute '" + a.name + "'");
    n.attrs.push_back(convert_attr(a, n.describe(), &scope, cx, is_constant));
  }
  for (const auto& in : pn.input) {
    if (in.empty()) {
      n.inputs.push_back(-1);
      continue;
    }
    int id = resolve(&scope, in);
    if (id < 0)
      n.fail(ErrorCode::InvalidModel, "input '" + in + "' is not a graph input, an initializer, or the output of any node");
    n.inputs.push_back(id);
  }
  for (const auto& o : pn.output) n.outputs.push_back(o.empty() ? -1 : g.find_value(o));

  if (n.op_type == "Constant" && n.domain.empty()) {
    if (n.outputs.size() != 1 || n.outputs[0] < 0) n.fail(ErrorCode::InvalidModel, "Constant must have one output");
    auto& v = g.values[size_t(n.outputs[0])];
    v.initializer = constant_value(n);
    v.is_initializer = true;
    v.producer = -1;
    v.type.kind = TypeInfo::Kind::Tensor;
    v.type.elem = v.initializer.dtype();
    return std::nullopt;
  }
  link_captures(n, scope);
  return n;
}

// Graph outputs, each produced by a node, an input or an initializer.
void add_outputs(Graph& g, const pb::GraphProto& gp, const std::string& gname, Scope& scope) {
  // 4. Graph outputs.
  std::set<std::string> out_names;
  for (const auto& o : gp.output) {
    if (!out_names.insert(o.name).second) BASALT_THROW(InvalidModel, gname + ": duplicate graph output '" + o.name + "'");
    int id = resolve(&scope, o.name);
    if (id < 0) BASALT_THROW(InvalidModel, gname + ": output '" + o.name + "' is not produced by any node, input or initializer");
    auto& v = g.values[size_t(id)];
    if (o.has_type && v.type.kind == TypeInfo::Kind::Unknown) v.type = type_from_proto(o.type);
    g.outputs.push_back(id);
  }

}

// Topological sort (Kahn) of the built nodes into g.nodes, keeping file order among ready nodes;
// a cycle is an InvalidModel error naming a node on it. orig_index: built node -> pnodes index.
void sort_nodes(Graph& g, std::vector<Node>& built, const std::vector<int>& orig_index, size_t n_pnodes) {
  // Producers are indices into pnodes; map them to built nodes.
  std::vector<int> pn_to_built(n_pnodes, -1);
  for (size_t b = 0; b < built.size(); ++b) pn_to_built[size_t(orig_index[b])] = int(b);
  size_t nb = built.size();
  std::vector<int> indeg(nb, 0);
  std::vector<std::vector<int>> users(nb);
  for (size_t b = 0; b < nb; ++b) {
    std::set<int> deps;
    auto add_dep = [&](int v) {
      if (v < 0) return;
      int p = g.values[size_t(v)].producer;
      if (p >= 0 && !g.values[size_t(v)].is_capture) deps.insert(pn_to_built[size_t(p)]);
    };
    for (int v : built[b].inputs) add_dep(v);
    for (int v : built[b].implicit_inputs) add_dep(v);
    for (int d : deps) {
      if (d < 0) continue;
      ++indeg[b];
      users[size_t(d)].push_back(int(b));
    }
  }
  std::vector<int> order;
  order.reserve(nb);
  // Keep file order among ready nodes: process the smallest index first. A min-heap, not a
  // vector re-sorted after each push: that was quadratic when many nodes are ready at once
  // (50k parallel two-node chains took minutes to load).
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (size_t b = 0; b < nb; ++b)
    if (indeg[b] == 0) ready.push(int(b));
  while (!ready.empty()) {
    int b = ready.top();
    ready.pop();
    order.push_back(b);
    for (int u : users[size_t(b)])
      if (--indeg[size_t(u)] == 0) ready.push(u);
  }
  if (order.size() != nb) {
    for (size_t b = 0; b < nb; ++b)
      if (indeg[b] > 0) built[b].fail(ErrorCode::InvalidModel, "is part of a cycle in the graph");
  }
  for (size_t k = 0; k < nb; ++k) {
    g.nodes.push_back(std::move(built[size_t(order[k])]));
    for (int v : g.nodes.back().outputs)
      if (v >= 0) g.values[size_t(v)].producer = int(k);
  }

}

}  // namespace

std::shared_ptr<Graph> build_graph(const pb::GraphProto& gp, Scope* parent, BuildCtx& cx) {
  if (++cx.depth > pb::kMaxGraphNesting)
    BASALT_THROW(InvalidModel, "subgraphs nested deeper than " + std::to_string(pb::kMaxGraphNesting) + " levels");
  auto g = std::make_shared<Graph>();
  g->name = gp.name;
  Scope scope{g.get(), parent};
  std::string gname = gp.name.empty() ? std::string("graph") : "graph '" + gp.name + "'";
  add_initializers(*g, gp, gname, cx);
  add_inputs(*g, gp, gname);
  // Nodes, with model-local functions inlined.
  std::vector<pb::NodeProto> pnodes = gp.node;
  int counter = 0;
  inline_functions(pnodes, cx, 0, counter);
  expand_gradient_nodes(pnodes, cx.opsets.count("") ? cx.opsets.at("") : 1);
  const std::vector<std::string> node_names = add_node_outputs(*g, pnodes);
  for (const auto& vi : gp.value_info) {
    int id = g->find_value(vi.name);
    if (id >= 0 && vi.has_type && g->values[size_t(id)].type.kind == TypeInfo::Kind::Unknown)
      g->values[size_t(id)].type = type_from_proto(vi.type);
  }
  std::vector<Node> built;
  built.reserve(pnodes.size());
  std::vector<int> orig_index;  // built node -> pnodes index
  for (size_t i = 0; i < pnodes.size(); ++i) {
    std::optional<Node> n = build_node(pnodes[i], node_names[i], *g, scope, cx);
    if (!n) continue;
    built.push_back(std::move(*n));
    orig_index.push_back(int(i));
  }
  add_outputs(*g, gp, gname, scope);
  sort_nodes(*g, built, orig_index, pnodes.size());
  // Kernels are created after optimization, by create_kernels (runtime/prepare.cpp).
  g->finalize();
  --cx.depth;
  return g;
}

// True when node n's kernel reads input `input` bytewise only (OpKernel::reads_bytes_only). The
// kernel is created here just to ask; an op without a kernel, or whose factory refuses the node,
// reads nothing in place (create_kernels reports the error later).
bool reads_bytes_only(const Node& n, int input) {
  const KernelFactory* f = OpRegistry::instance().find(n.domain, n.op_type, n.opset);
  if (!f) return false;
  try {
    return (*f)(n)->reads_bytes_only(input);
  } catch (const std::exception&) {
    return false;
  }
}

// Misaligned weights (onnx/tensor_proto.hpp): a misaligned view stays only when every reader is
// a node input whose kernel reads it bytewise; a weight that is a graph output or captured by a
// subgraph (whose readers are checked when they run) becomes an aligned copy, before the optimizer
// (whose constant folding runs kernels) sees it.
void align_weights_for_readers(Graph& g) {
  std::vector<char> byte_readers_only(g.values.size(), 1);
  bool any = false;
  for (const auto& v : g.values) any |= v.is_initializer && !v.initializer.is_aligned();
  for (const auto& n : g.nodes) {
    for (const auto& a : n.attrs) {
      if (a.g) align_weights_for_readers(*a.g);
      for (auto& sg : a.graphs) align_weights_for_readers(*sg);
    }
    if (!any) continue;
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int v = n.inputs[i];
      if (v >= 0 && byte_readers_only[size_t(v)] && !g.values[size_t(v)].initializer.is_aligned())
        byte_readers_only[size_t(v)] = reads_bytes_only(n, int(i));
    }
    for (int v : n.implicit_inputs)
      if (v >= 0) byte_readers_only[size_t(v)] = 0;
  }
  if (!any) return;
  for (int v : g.outputs) byte_readers_only[size_t(v)] = 0;
  for (size_t v = 0; v < g.values.size(); ++v) {
    Tensor& w = g.values[v].initializer;
    if (g.values[v].is_initializer && !w.is_aligned() && !byte_readers_only[v]) w = aligned_weight_copy(w);
  }
}

void count_weights(const Graph& g, const uint8_t* lo, const uint8_t* hi, Model& m) {
  for (const auto& v : g.values) {
    if (!v.is_initializer) continue;
    m.weight_bytes += v.initializer.nbytes();
    auto* p = static_cast<const uint8_t*>(v.initializer.raw());
    if (v.initializer.storage() && !v.initializer.storage()->owned) m.weight_bytes_in_place += v.initializer.nbytes();
    (void)lo;
    (void)hi;
    (void)p;
  }
  for (const auto& n : g.nodes)
    for (const auto& a : n.attrs) {
      if (a.g) count_weights(*a.g, lo, hi, m);
      for (auto& sg : a.graphs) count_weights(*sg, lo, hi, m);
    }
}

// `file`: the mapping that `keep` owns and `data` lies in; null for a model from memory.
std::shared_ptr<Model> load(const uint8_t* data, size_t size, std::shared_ptr<const void> keep, const MappedFile* file,
                            const std::string& path, const LoadOptions& opts) {
  std::string what = path.empty() ? std::string("model") : "'" + path + "'";
  if (size == 0) BASALT_THROW(InvalidModel, what + " is empty (0 bytes)");
  pb::ModelProto mp;
  try {
    mp = pb::parse_model(data, size);
  } catch (const Error& e) {
    BASALT_THROW(InvalidModel, what + " is not a valid ONNX model: " + e.what());
  }
  if (mp.ir_version <= 0 || !mp.has_graph)
    BASALT_THROW(InvalidModel, what + " is not an ONNX model: " +
                                   (mp.ir_version <= 0 ? std::string("no ir_version") : std::string("no graph")));
  auto model = std::make_shared<Model>();
  model->ir_version = mp.ir_version;
  model->producer_name = mp.producer_name;
  model->producer_version = mp.producer_version;
  model->domain = mp.domain;
  model->doc_string = mp.doc_string;
  model->model_version = mp.model_version;
  model->graph_doc_string = mp.graph.doc_string;
  model->metadata_props = mp.metadata_props;
  model->file_bytes = keep;
  model->file_size = size;
  model->path = path;
  for (const auto& o : mp.opset_import) {
    if (o.version <= 0) BASALT_THROW(InvalidModel, what + ": opset import for domain '" + o.domain + "' has version " + std::to_string(o.version));
    model->opsets[canonical_domain(o.domain)] = o.version;
  }
  if (mp.opset_import.empty()) {
    if (mp.ir_version >= 3) BASALT_THROW(InvalidModel, what + ": no opset_import (required since IR version 3)");
    model->opsets[""] = 1;
  }
  if (model->opsets.count("") && model->opsets[""] > 28)
    BASALT_THROW(Unsupported, what + ": ai.onnx opset " + std::to_string(model->opsets[""]) + " is newer than basalt supports (28)");

  std::string dir;
  if (!path.empty()) dir = std::filesystem::path(path).parent_path().string();
  if (!path.empty() && dir.empty()) dir = ".";
  ExternalDataResolver ext(dir);
  BuildCtx cx;
  cx.opsets = model->opsets;
  cx.ext = &ext;
  cx.keep = keep;
  cx.file = file;
  cx.opts = &opts;
  cx.model = model.get();
  for (const auto& f : mp.functions) cx.functions[{canonical_domain(f.domain), f.name}] = &f;
  model->graph = build_graph(mp.graph, nullptr, cx);
  align_weights_for_readers(*model->graph);
  count_weights(*model->graph, data, data + size, *model);
  // The model does not keep the file: weights used in place hold their mapping alive, and once
  // nothing does, it is unmapped. Pages touched while parsing (and copying unaligned weights) are
  // given back now; in-place weights fault theirs back in on first use.
  model->file_bytes.reset();
  ext.release_pages();
  return model;
}

}  // namespace

std::shared_ptr<Model> load_model_file(const std::string& path, const LoadOptions& opts) {
  auto f = MappedFile::open(path);
  auto m = load(f->data(), f->size(), f, f.get(), path, opts);
  f->release_pages();
  return m;
}

std::shared_ptr<Model> load_model_bytes(const void* data, size_t size, const LoadOptions& opts) {
  // Copy once into an aligned buffer that the weights can then view.
  void* p = std::aligned_alloc(64, (size + 63) / 64 * 64 + 64);
  if (!p) BASALT_THROW(MemoryLimit, "out of memory copying a " + std::to_string(size) + "-byte model");
  if (size) std::memcpy(p, data, size);
  std::shared_ptr<const void> keep(p, [](const void* q) { std::free(const_cast<void*>(q)); });
  return load(static_cast<const uint8_t*>(p), size, keep, nullptr, "", opts);
}

}  // namespace basalt
