// Protobuf encoding of ONNX messages (field numbers from onnx/onnx.proto; the decoder is
// src/onnx/proto.cpp). Repeated scalars are written unpacked, as onnx.proto (proto2) declares
// them; every ONNX reader accepts that.
#include "onnx/writer.hpp"

#include <basalt/dtype.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

namespace basalt {

namespace {

class Out {
 public:
  std::string buf;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      buf.push_back(char(uint8_t(v) | 0x80));
      v >>= 7;
    }
    buf.push_back(char(v));
  }
  void tag(int field, int wire) { varint(uint64_t(field) << 3 | uint64_t(wire)); }
  void i64(int field, int64_t v) {
    tag(field, 0);
    varint(uint64_t(v));
  }
  void f32(int field, float v) {
    tag(field, 5);
    char b[4];
    std::memcpy(b, &v, 4);
    buf.append(b, 4);
  }
  void bytes(int field, const void* p, size_t n) {
    tag(field, 2);
    varint(n);
    buf.append(static_cast<const char*>(p), n);
  }
  void str(int field, const std::string& s) { bytes(field, s.data(), s.size()); }
  void msg(int field, const Out& m) { bytes(field, m.buf.data(), m.buf.size()); }
};

Out encode_type(const TypeInfo& t);

Out encode_tensor_type(const TypeInfo& t) {
  Out o;
  if (t.elem != DType::Undefined) o.i64(1, int64_t(t.elem));
  if (t.has_shape) {
    Out shape;
    for (const DimInfo& d : t.dims) {
      Out dim;
      if (d.fixed()) dim.i64(1, d.value);
      else if (!d.param.empty()) dim.str(2, d.param);
      shape.msg(1, dim);
    }
    o.msg(2, shape);
  }
  return o;
}

Out encode_type(const TypeInfo& t) {
  Out o;
  switch (t.kind) {
    case TypeInfo::Kind::Tensor: o.msg(1, encode_tensor_type(t)); break;
    case TypeInfo::Kind::SparseTensor: o.msg(8, encode_tensor_type(t)); break;
    case TypeInfo::Kind::Sequence: {
      Out s;
      if (t.inner) s.msg(1, encode_type(*t.inner));
      o.msg(4, s);
      break;
    }
    case TypeInfo::Kind::Optional: {
      Out s;
      if (t.inner) s.msg(1, encode_type(*t.inner));
      o.msg(9, s);
      break;
    }
    case TypeInfo::Kind::Map: {
      Out s;
      s.i64(1, int64_t(t.map_key));
      if (t.inner) s.msg(2, encode_type(*t.inner));
      o.msg(5, s);
      break;
    }
    case TypeInfo::Kind::Unknown: break;
  }
  return o;
}

Out encode_tensor(const Tensor& t, const std::string& name) {
  Out o;
  for (int64_t d : t.shape()) o.i64(1, d);
  o.i64(2, int64_t(t.dtype()));
  if (!name.empty()) o.str(8, name);
  DType dt = t.dtype();
  size_t n = size_t(t.numel());
  if (dt == DType::String) {
    const std::string* s = t.data<std::string>();
    for (size_t i = 0; i < n; ++i) o.str(6, s[i]);
    return o;
  }
  int bits = dtype_file_bits(dt);
  if (bits <= 0) BASALT_THROW(Unsupported, "tensor '" + name + "': element type " + dtype_name(dt) + " cannot be saved");
  if (bits < 8) {
    // basalt holds sub-byte types one element per byte; the file packs them, low bits first.
    int per = 8 / bits;
    std::string packed((n + size_t(per) - 1) / size_t(per), '\0');
    const uint8_t* src = static_cast<const uint8_t*>(t.raw());
    uint8_t mask = uint8_t((1 << bits) - 1);
    for (size_t i = 0; i < n; ++i)
      packed[i / size_t(per)] = char(uint8_t(packed[i / size_t(per)]) | uint8_t((src[i] & mask) << (bits * int(i % size_t(per)))));
    o.bytes(9, packed.data(), packed.size());
    return o;
  }
  o.bytes(9, t.raw(), t.nbytes());  // x86-64 is little-endian, as raw_data is
  return o;
}

// Nodes whose opset differs from the model's import of their domain (a fusion may create, say,
// an opset-17 LayerNormalization in an opset-11 model) cannot be written as plain nodes: ONNX
// has one opset per domain per model. Each such node becomes a call of a model-local function
// (domain kShimDomain) whose opset_import says the node's opset, and whose body is the node.
// Readers inline the call (basalt's loader, ONNX Runtime), so the model keeps standard ops.
constexpr const char* kShimDomain = "basalt.opset_shim";

struct Ctx {
  const std::map<std::string, int64_t>& opsets;
  std::vector<Out> functions;
  int counter = 0;
};

Out encode_graph(const Graph& g, Ctx& cx);

Out encode_attr(const Attribute& a, Ctx& cx) {
  Out o;
  o.str(1, a.name);
  using T = Attribute::Type;
  T type = a.type;
  switch (a.type) {
    case T::Float: o.f32(2, a.f); break;
    case T::Int: o.i64(3, a.i); break;
    case T::String: o.str(4, a.s); break;
    case T::Tensor:
    case T::SparseTensor:
      // basalt densifies sparse tensors at load; the dense tensor is what is written.
      type = T::Tensor;
      o.msg(5, encode_tensor(a.t, ""));
      break;
    case T::Graph:
      if (a.g) o.msg(6, encode_graph(*a.g, cx));
      break;
    case T::Floats:
      for (float f : a.floats) o.f32(7, f);
      break;
    case T::Ints:
      for (int64_t i : a.ints) o.i64(8, i);
      break;
    case T::Strings:
      for (auto& s : a.strings) o.str(9, s);
      break;
    case T::Tensors:
    case T::SparseTensors:
      type = T::Tensors;
      for (auto& t : a.tensors) o.msg(10, encode_tensor(t, ""));
      break;
    case T::Graphs:
      for (auto& sg : a.graphs) o.msg(11, encode_graph(*sg, cx));
      break;
    case T::TypeProto: o.msg(14, encode_type(a.tp)); break;
    case T::TypeProtos: o.msg(15, encode_type(a.tp)); break;
    case T::Undefined: break;
  }
  o.i64(20, int64_t(type));
  return o;
}

Out encode_value_info(const ValueDef& v) {
  Out o;
  o.str(1, v.name);
  TypeInfo t = v.type;
  if (t.kind == TypeInfo::Kind::Unknown && v.is_initializer) {
    t.kind = TypeInfo::Kind::Tensor;
    t.elem = v.initializer.dtype();
    t.has_shape = true;
    for (int64_t d : v.initializer.shape()) t.dims.push_back(DimInfo{d, "", ""});
  }
  if (t.kind != TypeInfo::Kind::Unknown) o.msg(2, encode_type(t));
  return o;
}

const std::string& vname(const Graph& g, int v) {
  static const std::string empty;
  return v < 0 ? empty : g.values[size_t(v)].name;
}

// Wraps node n (opset differing from the model's) in a function; returns the call's op_type.
std::string add_shim_function(const Node& n, Ctx& cx) {
  std::string fname = n.op_type + "_opset" + std::to_string(n.opset) + "_" + std::to_string(cx.counter++);
  Out body, fn;
  for (size_t i = 0; i < n.inputs.size(); ++i) body.str(1, n.inputs[i] < 0 ? std::string() : "i" + std::to_string(i));
  for (size_t i = 0; i < n.outputs.size(); ++i) body.str(2, n.outputs[i] < 0 ? std::string() : "o" + std::to_string(i));
  body.str(3, n.name);
  body.str(4, n.op_type);
  for (const Attribute& a : n.attrs) body.msg(5, encode_attr(a, cx));
  if (!n.domain.empty()) body.str(7, n.domain);
  fn.str(1, fname);
  for (size_t i = 0; i < n.inputs.size(); ++i) fn.str(4, "i" + std::to_string(i));
  for (size_t i = 0; i < n.outputs.size(); ++i) fn.str(5, "o" + std::to_string(i));
  fn.msg(7, body);
  Out op;
  if (!n.domain.empty()) op.str(1, n.domain);
  op.i64(2, n.opset);
  fn.msg(9, op);
  fn.str(10, kShimDomain);
  cx.functions.push_back(std::move(fn));
  return fname;
}

Out encode_graph(const Graph& g, Ctx& cx) {
  Out o;
  std::vector<bool> used(g.values.size(), false);
  for (const Node& n : g.nodes) {
    Out node;
    for (int v : n.inputs) {
      node.str(1, vname(g, v));
      if (v >= 0) used[size_t(v)] = true;
    }
    for (int v : n.implicit_inputs) used[size_t(v)] = true;
    for (int v : n.outputs) node.str(2, vname(g, v));
    node.str(3, n.name);
    auto imp = cx.opsets.find(n.domain);
    if (imp != cx.opsets.end() && n.opset > 0 && imp->second != n.opset) {
      node.str(4, add_shim_function(n, cx));
      node.str(7, kShimDomain);
    } else {
      node.str(4, n.op_type);
      for (const Attribute& a : n.attrs) node.msg(5, encode_attr(a, cx));
      if (!n.domain.empty()) node.str(7, n.domain);
    }
    o.msg(1, node);
  }
  o.str(2, g.name.empty() ? std::string("graph") : g.name);
  for (int v : g.outputs) used[size_t(v)] = true;
  std::set<int> io(g.inputs.begin(), g.inputs.end());
  io.insert(g.outputs.begin(), g.outputs.end());
  for (size_t v = 0; v < g.values.size(); ++v) {
    const ValueDef& d = g.values[v];
    if (d.is_initializer && !d.is_capture && (used[v] || d.is_graph_input)) o.msg(5, encode_tensor(d.initializer, d.name));
  }
  for (int v : g.inputs) o.msg(11, encode_value_info(g.values[size_t(v)]));
  for (int v : g.outputs) o.msg(12, encode_value_info(g.values[size_t(v)]));
  // Declared types of intermediate values (from the source model's value_info).
  for (size_t v = 0; v < g.values.size(); ++v) {
    const ValueDef& d = g.values[v];
    if (d.producer < 0 || io.count(int(v)) || d.is_initializer || d.is_capture) continue;
    if (d.type.kind == TypeInfo::Kind::Unknown) continue;
    o.msg(13, encode_value_info(d));
  }
  return o;
}

}  // namespace

std::string save_model_bytes(const Model& m) {
  if (!m.graph) BASALT_THROW(InvalidArgument, "save_model: the model has no graph");
  Ctx cx{m.opsets, {}, 0};
  Out graph = encode_graph(*m.graph, cx);
  // IR 4: initializers need not be graph inputs; IR 8: model-local functions (the opset shims).
  int64_t ir = std::max<int64_t>(m.ir_version, cx.functions.empty() ? 4 : 8);
  Out o;
  o.i64(1, ir);
  o.str(2, m.producer_name.empty() ? std::string("basalt") : m.producer_name);
  if (!m.producer_version.empty()) o.str(3, m.producer_version);
  o.msg(7, graph);
  for (const auto& [domain, version] : m.opsets) {
    Out op;
    if (!domain.empty()) op.str(1, domain);
    op.i64(2, version);
    o.msg(8, op);
  }
  if (!cx.functions.empty()) {
    Out op;
    op.str(1, kShimDomain);
    op.i64(2, 1);
    o.msg(8, op);
    for (const Out& f : cx.functions) o.msg(25, f);
  }
  return std::move(o.buf);
}

void save_model_file(const Model& m, const std::string& path) { write_model_bytes(save_model_bytes(m), path); }

void write_model_bytes(const std::string& bytes, const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) BASALT_THROW(Io, "cannot open '" + path + "' for writing");
  size_t w = std::fwrite(bytes.data(), 1, bytes.size(), f);
  bool ok = w == bytes.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) BASALT_THROW(Io, "cannot write '" + path + "'");
}

}  // namespace basalt
