#include "onnx/proto.hpp"

#include <basalt/error.hpp>

#include <cstring>
#include <memory>
#include <type_traits>

namespace basalt::pb {
namespace {

[[noreturn]] void malformed(const std::string& what) {
  BASALT_THROW(InvalidModel, "malformed protobuf: " + what);
}

class Reader {
 public:
  Reader(const uint8_t* p, size_t n, int depth = 0) : p_(p), end_(p + n), depth_(depth) {}
  bool done() const { return p_ >= end_; }
  int depth() const { return depth_; }

  uint64_t varint() {
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ >= end_) malformed("truncated varint");
      uint8_t b = *p_++;
      r |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return r;
    }
    malformed("varint longer than 10 bytes");
  }
  uint32_t fixed32() {
    if (end_ - p_ < 4) malformed("truncated fixed32");
    uint32_t v;
    std::memcpy(&v, p_, 4);
    p_ += 4;
    return v;
  }
  uint64_t fixed64() {
    if (end_ - p_ < 8) malformed("truncated fixed64");
    uint64_t v;
    std::memcpy(&v, p_, 8);
    p_ += 8;
    return v;
  }
  Bytes bytes() {
    uint64_t n = varint();
    if (n > uint64_t(end_ - p_)) malformed("length-delimited field runs past the end of its message");
    Bytes b{p_, size_t(n)};
    p_ += n;
    return b;
  }
  // Reads a tag; returns false at end of message.
  bool tag(uint32_t& field, uint32_t& wire) {
    if (done()) return false;
    uint64_t t = varint();
    field = uint32_t(t >> 3);
    wire = uint32_t(t & 7);
    if (field == 0) malformed("field number 0");
    return true;
  }
  void skip(uint32_t wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: fixed64(); break;
      case 2: bytes(); break;
      case 5: fixed32(); break;
      default: malformed("unsupported wire type " + std::to_string(wire));
    }
  }
  Reader sub(int extra_depth = 0) {
    Bytes b = bytes();
    return Reader(b.p, b.n, depth_ + extra_depth);
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
  int depth_;
};

void expect(uint32_t wire, uint32_t want, const char* field) {
  if (wire != want) malformed(std::string("field ") + field + " has wrong wire type " + std::to_string(wire));
}

std::string read_string(Reader& r, uint32_t wire, const char* field) {
  expect(wire, 2, field);
  return r.bytes().str();
}

// Repeated scalar fields may be packed (wire 2) or not.
template <class T, class F>
void read_repeated(Reader& r, uint32_t wire, std::vector<T>& out, uint32_t scalar_wire, F&& read_one) {
  if (wire == 2) {
    Bytes b = r.bytes();
    Reader s(b.p, b.n);
    while (!s.done()) out.push_back(read_one(s));
  } else if (wire == scalar_wire) {
    out.push_back(read_one(r));
  } else {
    malformed("repeated field has wrong wire type " + std::to_string(wire));
  }
}

void read_int64s(Reader& r, uint32_t wire, std::vector<int64_t>& out) {
  read_repeated(r, wire, out, 0, [](Reader& s) { return int64_t(s.varint()); });
}
void read_int32s(Reader& r, uint32_t wire, std::vector<int32_t>& out) {
  read_repeated(r, wire, out, 0, [](Reader& s) { return int32_t(s.varint()); });
}
void read_uint64s(Reader& r, uint32_t wire, std::vector<uint64_t>& out) {
  read_repeated(r, wire, out, 0, [](Reader& s) { return s.varint(); });
}
void read_floats(Reader& r, uint32_t wire, std::vector<float>& out) {
  read_repeated(r, wire, out, 5, [](Reader& s) {
    uint32_t u = s.fixed32();
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  });
}
void read_doubles(Reader& r, uint32_t wire, std::vector<double>& out) {
  read_repeated(r, wire, out, 1, [](Reader& s) {
    uint64_t u = s.fixed64();
    double d;
    std::memcpy(&d, &u, 8);
    return d;
  });
}

// ---- The field tables ----
// Each message is decoded by one loop (decode) over a table of its fields: number, name (for
// errors) and a reader that checks the wire type and stores the value. The readers are built from
// member pointers (str<&M::name>, msgs<&M::node, read_node>, ...); the few fields with more to do
// (a has_* flag, a nesting check) use the same forms with a flag or a small function of their own.

template <class M>
struct Field {
  uint32_t num;
  const char* name;
  void (*read)(Reader& r, uint32_t wire, const char* name, M& m);
};

// Reads every field of the message r into m; unknown fields are skipped.
template <class M, size_t N>
void decode_into(Reader r, const Field<M> (&fields)[N], M& m) {
  uint32_t f, w;
  while (r.tag(f, w)) {
    const Field<M>* fd = nullptr;
    for (const Field<M>& x : fields)
      if (x.num == f) fd = &x;
    if (fd) fd->read(r, w, fd->name, m);
    else r.skip(w);
  }
}
template <class M, size_t N>
M decode(Reader r, const Field<M> (&fields)[N]) {
  M m;
  decode_into(r, fields, m);
  return m;
}

template <class T> struct member_traits;
template <class M, class V> struct member_traits<V M::*> {
  using msg = M;
  using value = V;
};
template <auto P> using Msg = typename member_traits<decltype(P)>::msg;
template <auto P> using Val = typename member_traits<decltype(P)>::value;

// Sets the has_* flag Has (a bool member pointer) when given.
template <auto Has, class M>
void mark(M& m) {
  if constexpr (!std::is_same_v<decltype(Has), std::nullptr_t>) m.*Has = true;
}

template <auto P>  // a string
void str(Reader& r, uint32_t w, const char* n, Msg<P>& m) { m.*P = read_string(r, w, n); }
template <auto P>  // a repeated string
void strs(Reader& r, uint32_t w, const char* n, Msg<P>& m) { (m.*P).push_back(read_string(r, w, n)); }
template <auto P, auto Has = nullptr>  // a varint-coded integer
void varint(Reader& r, uint32_t w, const char* n, Msg<P>& m) {
  expect(w, 0, n);
  m.*P = Val<P>(r.varint());
  mark<Has>(m);
}
template <auto P, auto Has = nullptr>  // bytes, kept as a view into the file
void bytes(Reader& r, uint32_t w, const char* n, Msg<P>& m) {
  expect(w, 2, n);
  m.*P = r.bytes();
  mark<Has>(m);
}
template <auto P>  // repeated bytes
void bytes_list(Reader& r, uint32_t w, const char* n, Msg<P>& m) {
  expect(w, 2, n);
  (m.*P).push_back(r.bytes());
}
template <auto P>  // a repeated scalar, packed or not
void scalars(Reader& r, uint32_t w, const char*, Msg<P>& m) {
  using T = typename Val<P>::value_type;
  if constexpr (std::is_same_v<T, int64_t>) read_int64s(r, w, m.*P);
  else if constexpr (std::is_same_v<T, int32_t>) read_int32s(r, w, m.*P);
  else if constexpr (std::is_same_v<T, uint64_t>) read_uint64s(r, w, m.*P);
  else if constexpr (std::is_same_v<T, float>) read_floats(r, w, m.*P);
  else read_doubles(r, w, m.*P);
}
template <auto P, auto Read, auto Has = nullptr, int Depth = 0>  // a message (Depth: nesting it adds)
void msg(Reader& r, uint32_t w, const char* n, Msg<P>& m) {
  expect(w, 2, n);
  m.*P = Read(r.sub(Depth));
  mark<Has>(m);
}
template <auto P, auto Read, int Depth = 0>  // a repeated message
void msgs(Reader& r, uint32_t w, const char* n, Msg<P>& m) {
  expect(w, 2, n);
  (m.*P).push_back(Read(r.sub(Depth)));
}

using StringEntry = std::pair<std::string, std::string>;
const Field<StringEntry> kStringEntry[] = {
    {1, "StringStringEntryProto.key", str<&StringEntry::first>},
    {2, "StringStringEntryProto.value", str<&StringEntry::second>},
};
StringEntry read_string_entry(Reader r) { return decode(r, kStringEntry); }

TensorProto read_tensor(Reader r);
const Field<TensorProto> kTensor[] = {
    {1, "TensorProto.dims", scalars<&TensorProto::dims>},
    {2, "TensorProto.data_type", varint<&TensorProto::data_type>},
    {3, "TensorProto.segment", [](Reader& r, uint32_t w, const char*, TensorProto& t) { t.has_segment = true; r.skip(w); }},
    {4, "TensorProto.float_data", scalars<&TensorProto::float_data>},
    {5, "TensorProto.int32_data", scalars<&TensorProto::int32_data>},
    {6, "TensorProto.string_data", bytes_list<&TensorProto::string_data>},
    {7, "TensorProto.int64_data", scalars<&TensorProto::int64_data>},
    {8, "TensorProto.name", str<&TensorProto::name>},
    {9, "TensorProto.raw_data", bytes<&TensorProto::raw_data, &TensorProto::has_raw>},
    {10, "TensorProto.double_data", scalars<&TensorProto::double_data>},
    {11, "TensorProto.uint64_data", scalars<&TensorProto::uint64_data>},
    {13, "TensorProto.external_data", msgs<&TensorProto::external_data, read_string_entry>},
    {14, "TensorProto.data_location", varint<&TensorProto::data_location>},
};
TensorProto read_tensor(Reader r) { return decode(r, kTensor); }

const Field<SparseTensorProto> kSparse[] = {
    {1, "SparseTensorProto.values", msg<&SparseTensorProto::values, read_tensor>},
    {2, "SparseTensorProto.indices", msg<&SparseTensorProto::indices, read_tensor>},
    {3, "SparseTensorProto.dims", scalars<&SparseTensorProto::dims>},
};
SparseTensorProto read_sparse(Reader r) { return decode(r, kSparse); }

// Types nest (sequence of map of ...) with a depth of their own, counted here rather than in the
// Reader (whose depth counts subgraphs).
TypeProto read_type(Reader r, int depth = 0);

const Field<Dim> kDim[] = {
    {1, "Dimension.dim_value", varint<&Dim::value, &Dim::has_value>},
    {2, "Dimension.dim_param", str<&Dim::param>},
    {3, "Dimension.denotation", str<&Dim::denotation>},
};
Dim read_dim(Reader r) { return decode(r, kDim); }

struct ShapeFields {
  std::vector<Dim> dim;
};
const Field<ShapeFields> kShape[] = {{1, "TensorShapeProto.dim", msgs<&ShapeFields::dim, read_dim>}};

// TypeProto.Tensor / SparseTensor: elem_type and shape.
struct TensorTypeFields {
  int32_t elem_type = 0;
  bool has_shape = false;
  ShapeFields shape;
};
const Field<TensorTypeFields> kTensorType[] = {
    {1, "TypeProto.Tensor.elem_type", varint<&TensorTypeFields::elem_type>},
    {2, "TypeProto.Tensor.shape", msg<&TensorTypeFields::shape, [](Reader r) { return decode(r, kShape); }, &TensorTypeFields::has_shape>},
};
void read_tensor_type(Reader r, TypeProto& t) {
  TensorTypeFields f = decode(r, kTensorType);
  t.elem_type = f.elem_type;
  t.has_shape = f.has_shape;
  t.shape = std::move(f.shape.dim);
}

// Sequence / Optional element types, and Map key and value types, one level deeper.
struct ElemTypeFields {
  int depth = 0;
  int32_t key_type = 0;
  std::shared_ptr<TypeProto> elem;
};
void read_nested_type(Reader& r, uint32_t w, const char* n, ElemTypeFields& e) {
  expect(w, 2, n);
  e.elem = std::make_shared<TypeProto>(read_type(r.sub(), e.depth + 1));
}
const Field<ElemTypeFields> kElemType[] = {{1, "elem_type", read_nested_type}};
const Field<ElemTypeFields> kMapType[] = {
    {1, "key_type", varint<&ElemTypeFields::key_type>},
    {2, "value_type", read_nested_type},
};
template <size_t N>
ElemTypeFields read_elem(Reader r, int depth, const Field<ElemTypeFields> (&fields)[N]) {
  if (depth > 32) malformed("type nesting deeper than 32");
  ElemTypeFields e;
  e.depth = depth;
  decode_into(r, fields, e);
  return e;
}

// TypeProto's value is one of these fields, each a message of its own.
struct TypeField {
  uint32_t num;
  TypeProto::Kind kind;
  const char* name;
};
constexpr TypeField kTypeFields[] = {
    {1, TypeProto::Kind::Tensor, "TypeProto.tensor_type"},
    {8, TypeProto::Kind::SparseTensor, "TypeProto.sparse_tensor_type"},
    {4, TypeProto::Kind::Sequence, "TypeProto.sequence_type"},
    {9, TypeProto::Kind::Optional, "TypeProto.optional_type"},
    {5, TypeProto::Kind::Map, "TypeProto.map_type"},
};

TypeProto read_type(Reader r, int depth) {
  if (depth > 32) malformed("type nesting deeper than 32");
  TypeProto t;
  uint32_t f, w;
  while (r.tag(f, w)) {
    const TypeField* tf = nullptr;
    for (const TypeField& x : kTypeFields)
      if (x.num == f) tf = &x;
    if (!tf) {
      r.skip(w);
      continue;
    }
    expect(w, 2, tf->name);
    t.kind = tf->kind;
    using K = TypeProto::Kind;
    if (tf->kind == K::Tensor || tf->kind == K::SparseTensor) {
      read_tensor_type(r.sub(), t);
    } else if (tf->kind == K::Map) {
      ElemTypeFields e = read_elem(r.sub(), depth, kMapType);
      t.map_key_type = e.key_type;
      t.elem = std::move(e.elem);
    } else {
      t.elem = read_elem(r.sub(), depth, kElemType).elem;
    }
  }
  return t;
}
TypeProto read_top_type(Reader r) { return read_type(r, 0); }

const Field<ValueInfoProto> kValueInfo[] = {
    {1, "ValueInfoProto.name", str<&ValueInfoProto::name>},
    {2, "ValueInfoProto.type", msg<&ValueInfoProto::type, read_top_type, &ValueInfoProto::has_type>},
};
ValueInfoProto read_value_info(Reader r) { return decode(r, kValueInfo); }

GraphProto read_graph(Reader r);
// A subgraph attribute: one level of graph nesting deeper, refused past kMaxGraphNesting.
std::shared_ptr<GraphProto> read_subgraph(Reader r) {
  if (r.depth() > kMaxGraphNesting) malformed("subgraphs nested deeper than " + std::to_string(kMaxGraphNesting) + " levels");
  return std::make_shared<GraphProto>(read_graph(r));
}

const Field<AttributeProto> kAttribute[] = {
    {1, "AttributeProto.name", str<&AttributeProto::name>},
    {21, "AttributeProto.ref_attr_name", str<&AttributeProto::ref_attr_name>},
    {20, "AttributeProto.type", varint<&AttributeProto::type>},
    {2, "AttributeProto.f", [](Reader& r, uint32_t w, const char* n, AttributeProto& a) {
       expect(w, 5, n);
       uint32_t u = r.fixed32();
       std::memcpy(&a.f, &u, 4);
       a.has_f = true;
     }},
    {3, "AttributeProto.i", varint<&AttributeProto::i, &AttributeProto::has_i>},
    {4, "AttributeProto.s", bytes<&AttributeProto::s, &AttributeProto::has_s>},
    {5, "AttributeProto.t", msg<&AttributeProto::t, read_tensor, &AttributeProto::has_t>},
    {6, "AttributeProto.g", msg<&AttributeProto::g, read_subgraph, nullptr, 1>},
    {22, "AttributeProto.sparse_tensor", msg<&AttributeProto::sparse_tensor, read_sparse, &AttributeProto::has_sparse>},
    {7, "AttributeProto.floats", scalars<&AttributeProto::floats>},
    {8, "AttributeProto.ints", scalars<&AttributeProto::ints>},
    {9, "AttributeProto.strings", bytes_list<&AttributeProto::strings>},
    {10, "AttributeProto.tensors", msgs<&AttributeProto::tensors, read_tensor>},
    {11, "AttributeProto.graphs", msgs<&AttributeProto::graphs, read_subgraph, 1>},
    {14, "AttributeProto.tp", msg<&AttributeProto::tp, read_top_type>},
};
AttributeProto read_attribute(Reader r) { return decode(r, kAttribute); }

const Field<NodeProto> kNode[] = {
    {1, "NodeProto.input", strs<&NodeProto::input>},
    {2, "NodeProto.output", strs<&NodeProto::output>},
    {3, "NodeProto.name", str<&NodeProto::name>},
    {4, "NodeProto.op_type", str<&NodeProto::op_type>},
    {7, "NodeProto.domain", str<&NodeProto::domain>},
    {8, "NodeProto.overload", str<&NodeProto::overload>},
    {5, "NodeProto.attribute", msgs<&NodeProto::attribute, read_attribute>},
};
NodeProto read_node(Reader r) { return decode(r, kNode); }

const Field<GraphProto> kGraph[] = {
    {1, "GraphProto.node", msgs<&GraphProto::node, read_node>},
    {2, "GraphProto.name", str<&GraphProto::name>},
    {10, "GraphProto.doc_string", str<&GraphProto::doc_string>},
    {5, "GraphProto.initializer", msgs<&GraphProto::initializer, read_tensor>},
    {15, "GraphProto.sparse_initializer", msgs<&GraphProto::sparse_initializer, read_sparse>},
    {11, "GraphProto.input", msgs<&GraphProto::input, read_value_info>},
    {12, "GraphProto.output", msgs<&GraphProto::output, read_value_info>},
    {13, "GraphProto.value_info", msgs<&GraphProto::value_info, read_value_info>},
};
GraphProto read_graph(Reader r) { return decode(r, kGraph); }

const Field<OpsetId> kOpset[] = {
    {1, "OperatorSetIdProto.domain", str<&OpsetId::domain>},
    {2, "OperatorSetIdProto.version", varint<&OpsetId::version>},
};
OpsetId read_opset(Reader r) { return decode(r, kOpset); }

const Field<FunctionProto> kFunction[] = {
    {1, "FunctionProto.name", str<&FunctionProto::name>},
    {10, "FunctionProto.domain", str<&FunctionProto::domain>},
    {13, "FunctionProto.overload", str<&FunctionProto::overload>},
    {4, "FunctionProto.input", strs<&FunctionProto::input>},
    {5, "FunctionProto.output", strs<&FunctionProto::output>},
    {6, "FunctionProto.attribute", strs<&FunctionProto::attribute>},
    {11, "FunctionProto.attribute_proto", msgs<&FunctionProto::attribute_proto, read_attribute>},
    {7, "FunctionProto.node", msgs<&FunctionProto::node, read_node>},
    {9, "FunctionProto.opset_import", msgs<&FunctionProto::opset_import, read_opset>},
};
FunctionProto read_function(Reader r) { return decode(r, kFunction); }

// Sequences and optionals nest through the Reader's depth (each level one deeper).
SequenceProto read_sequence(Reader r);
OptionalProto read_optional(Reader r);
std::shared_ptr<SequenceProto> read_sequence_ptr(Reader r) { return std::make_shared<SequenceProto>(read_sequence(r)); }
std::shared_ptr<OptionalProto> read_optional_ptr(Reader r) { return std::make_shared<OptionalProto>(read_optional(r)); }

const Field<SequenceProto> kSequence[] = {
    {1, "SequenceProto.name", str<&SequenceProto::name>},
    {2, "SequenceProto.elem_type", varint<&SequenceProto::elem_type>},
    {3, "SequenceProto.tensor_values", msgs<&SequenceProto::tensor_values, read_tensor>},
    {5, "SequenceProto.sequence_values", msgs<&SequenceProto::sequence_values, read_sequence, 1>},
    {7, "SequenceProto.optional_values", msgs<&SequenceProto::optional_values, read_optional, 1>},
};
SequenceProto read_sequence(Reader r) {
  if (r.depth() > 32) malformed("sequence nesting deeper than 32");
  return decode(r, kSequence);
}

const Field<OptionalProto> kOptional[] = {
    {1, "OptionalProto.name", str<&OptionalProto::name>},
    {2, "OptionalProto.elem_type", varint<&OptionalProto::elem_type>},
    {3, "OptionalProto.tensor_value", msg<&OptionalProto::tensor_value, read_tensor, &OptionalProto::has_tensor>},
    {5, "OptionalProto.sequence_value", msg<&OptionalProto::sequence_value, read_sequence_ptr, &OptionalProto::has_sequence, 1>},
    {7, "OptionalProto.optional_value", msg<&OptionalProto::optional_value, read_optional_ptr, &OptionalProto::has_optional, 1>},
};
OptionalProto read_optional(Reader r) {
  if (r.depth() > 32) malformed("optional nesting deeper than 32");
  return decode(r, kOptional);
}

GraphProto read_model_graph(Reader r) { return read_graph(r); }
const Field<ModelProto> kModel[] = {
    {1, "ModelProto.ir_version", varint<&ModelProto::ir_version>},
    {8, "ModelProto.opset_import", msgs<&ModelProto::opset_import, read_opset>},
    {2, "ModelProto.producer_name", str<&ModelProto::producer_name>},
    {3, "ModelProto.producer_version", str<&ModelProto::producer_version>},
    {4, "ModelProto.domain", str<&ModelProto::domain>},
    {5, "ModelProto.model_version", varint<&ModelProto::model_version>},
    {6, "ModelProto.doc_string", str<&ModelProto::doc_string>},
    {7, "ModelProto.graph", msg<&ModelProto::graph, read_model_graph, &ModelProto::has_graph>},
    {14, "ModelProto.metadata_props", msgs<&ModelProto::metadata_props, read_string_entry>},
    {25, "ModelProto.functions", msgs<&ModelProto::functions, read_function>},
};

}  // namespace

ModelProto parse_model(const uint8_t* data, size_t size) { return decode(Reader(data, size), kModel); }

TensorProto parse_tensor(const uint8_t* data, size_t size) { return read_tensor(Reader(data, size)); }
SequenceProto parse_sequence(const uint8_t* data, size_t size) { return read_sequence(Reader(data, size)); }
OptionalProto parse_optional(const uint8_t* data, size_t size) { return read_optional(Reader(data, size)); }

}  // namespace basalt::pb
