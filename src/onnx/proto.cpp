#include "onnx/proto.hpp"

#include <basalt/error.hpp>

#include <cstring>

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

std::pair<std::string, std::string> read_string_entry(Reader r) {
  std::pair<std::string, std::string> kv;
  uint32_t f, w;
  while (r.tag(f, w)) {
    if (f == 1) kv.first = read_string(r, w, "key");
    else if (f == 2) kv.second = read_string(r, w, "value");
    else r.skip(w);
  }
  return kv;
}

TensorProto read_tensor(Reader r) {
  TensorProto t;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: read_int64s(r, w, t.dims); break;
      case 2: expect(w, 0, "TensorProto.data_type"); t.data_type = int32_t(r.varint()); break;
      case 3: t.has_segment = true; r.skip(w); break;
      case 4: read_floats(r, w, t.float_data); break;
      case 5: read_int32s(r, w, t.int32_data); break;
      case 6: expect(w, 2, "TensorProto.string_data"); t.string_data.push_back(r.bytes()); break;
      case 7: read_int64s(r, w, t.int64_data); break;
      case 8: t.name = read_string(r, w, "TensorProto.name"); break;
      case 9: expect(w, 2, "TensorProto.raw_data"); t.raw_data = r.bytes(); t.has_raw = true; break;
      case 10: read_doubles(r, w, t.double_data); break;
      case 11: read_uint64s(r, w, t.uint64_data); break;
      case 13: expect(w, 2, "TensorProto.external_data"); t.external_data.push_back(read_string_entry(r.sub())); break;
      case 14: expect(w, 0, "TensorProto.data_location"); t.data_location = int32_t(r.varint()); break;
      default: r.skip(w);
    }
  }
  return t;
}

SparseTensorProto read_sparse(Reader r) {
  SparseTensorProto s;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: expect(w, 2, "SparseTensorProto.values"); s.values = read_tensor(r.sub()); break;
      case 2: expect(w, 2, "SparseTensorProto.indices"); s.indices = read_tensor(r.sub()); break;
      case 3: read_int64s(r, w, s.dims); break;
      default: r.skip(w);
    }
  }
  return s;
}

TypeProto read_type(Reader r, int depth = 0);

void read_shape(Reader r, TypeProto& t) {
  t.has_shape = true;
  uint32_t f, w;
  while (r.tag(f, w)) {
    if (f == 1) {
      expect(w, 2, "TensorShapeProto.dim");
      Reader d = r.sub();
      Dim dim;
      uint32_t f2, w2;
      while (d.tag(f2, w2)) {
        if (f2 == 1) {
          expect(w2, 0, "Dimension.dim_value");
          dim.has_value = true;
          dim.value = int64_t(d.varint());
        } else if (f2 == 2) {
          dim.param = read_string(d, w2, "Dimension.dim_param");
        } else {
          d.skip(w2);
        }
      }
      t.shape.push_back(std::move(dim));
    } else {
      r.skip(w);
    }
  }
}

void read_tensor_type(Reader r, TypeProto& t) {
  uint32_t f, w;
  while (r.tag(f, w)) {
    if (f == 1) { expect(w, 0, "elem_type"); t.elem_type = int32_t(r.varint()); }
    else if (f == 2) { expect(w, 2, "shape"); read_shape(r.sub(), t); }
    else r.skip(w);
  }
}

std::shared_ptr<TypeProto> read_elem_type(Reader r, int depth) {
  if (depth > 32) malformed("type nesting deeper than 32");
  std::shared_ptr<TypeProto> e;
  uint32_t f, w;
  while (r.tag(f, w)) {
    if (f == 1) { expect(w, 2, "elem_type"); e = std::make_shared<TypeProto>(read_type(r.sub(), depth + 1)); }
    else r.skip(w);
  }
  return e;
}

TypeProto read_type(Reader r, int depth) {
  if (depth > 32) malformed("type nesting deeper than 32");
  TypeProto t;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: expect(w, 2, "TypeProto.tensor_type"); t.kind = TypeProto::Kind::Tensor; read_tensor_type(r.sub(), t); break;
      case 8: expect(w, 2, "TypeProto.sparse_tensor_type"); t.kind = TypeProto::Kind::SparseTensor; read_tensor_type(r.sub(), t); break;
      case 4: expect(w, 2, "TypeProto.sequence_type"); t.kind = TypeProto::Kind::Sequence; t.elem = read_elem_type(r.sub(), depth); break;
      case 9: expect(w, 2, "TypeProto.optional_type"); t.kind = TypeProto::Kind::Optional; t.elem = read_elem_type(r.sub(), depth); break;
      case 5: {
        expect(w, 2, "TypeProto.map_type");
        t.kind = TypeProto::Kind::Map;
        Reader m = r.sub();
        uint32_t f2, w2;
        while (m.tag(f2, w2)) {
          if (f2 == 1) { expect(w2, 0, "key_type"); t.map_key_type = int32_t(m.varint()); }
          else if (f2 == 2) { expect(w2, 2, "value_type"); t.elem = std::make_shared<TypeProto>(read_type(m.sub(), depth + 1)); }
          else m.skip(w2);
        }
        break;
      }
      default: r.skip(w);
    }
  }
  return t;
}

ValueInfoProto read_value_info(Reader r) {
  ValueInfoProto v;
  uint32_t f, w;
  while (r.tag(f, w)) {
    if (f == 1) v.name = read_string(r, w, "ValueInfoProto.name");
    else if (f == 2) { expect(w, 2, "ValueInfoProto.type"); v.type = read_type(r.sub()); v.has_type = true; }
    else r.skip(w);
  }
  return v;
}

GraphProto read_graph(Reader r);

AttributeProto read_attribute(Reader r) {
  AttributeProto a;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: a.name = read_string(r, w, "AttributeProto.name"); break;
      case 21: a.ref_attr_name = read_string(r, w, "AttributeProto.ref_attr_name"); break;
      case 20: expect(w, 0, "AttributeProto.type"); a.type = int32_t(r.varint()); break;
      case 2: {
        expect(w, 5, "AttributeProto.f");
        uint32_t u = r.fixed32();
        std::memcpy(&a.f, &u, 4);
        a.has_f = true;
        break;
      }
      case 3: expect(w, 0, "AttributeProto.i"); a.i = int64_t(r.varint()); a.has_i = true; break;
      case 4: expect(w, 2, "AttributeProto.s"); a.s = r.bytes(); a.has_s = true; break;
      case 5: expect(w, 2, "AttributeProto.t"); a.t = read_tensor(r.sub()); a.has_t = true; break;
      case 6: {
        expect(w, 2, "AttributeProto.g");
        Reader g = r.sub(1);
        if (g.depth() > kMaxGraphNesting)
          malformed("subgraphs nested deeper than " + std::to_string(kMaxGraphNesting) + " levels");
        a.g = std::make_shared<GraphProto>(read_graph(g));
        break;
      }
      case 22: expect(w, 2, "AttributeProto.sparse_tensor"); a.sparse_tensor = read_sparse(r.sub()); a.has_sparse = true; break;
      case 7: read_floats(r, w, a.floats); break;
      case 8: read_int64s(r, w, a.ints); break;
      case 9: expect(w, 2, "AttributeProto.strings"); a.strings.push_back(r.bytes()); break;
      case 10: expect(w, 2, "AttributeProto.tensors"); a.tensors.push_back(read_tensor(r.sub())); break;
      case 11: {
        expect(w, 2, "AttributeProto.graphs");
        Reader g = r.sub(1);
        if (g.depth() > kMaxGraphNesting)
          malformed("subgraphs nested deeper than " + std::to_string(kMaxGraphNesting) + " levels");
        a.graphs.push_back(std::make_shared<GraphProto>(read_graph(g)));
        break;
      }
      case 14: expect(w, 2, "AttributeProto.tp"); a.tp = read_type(r.sub()); break;
      default: r.skip(w);
    }
  }
  return a;
}

NodeProto read_node(Reader r) {
  NodeProto n;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: n.input.push_back(read_string(r, w, "NodeProto.input")); break;
      case 2: n.output.push_back(read_string(r, w, "NodeProto.output")); break;
      case 3: n.name = read_string(r, w, "NodeProto.name"); break;
      case 4: n.op_type = read_string(r, w, "NodeProto.op_type"); break;
      case 7: n.domain = read_string(r, w, "NodeProto.domain"); break;
      case 8: n.overload = read_string(r, w, "NodeProto.overload"); break;
      case 5: expect(w, 2, "NodeProto.attribute"); n.attribute.push_back(read_attribute(r.sub())); break;
      default: r.skip(w);
    }
  }
  return n;
}

GraphProto read_graph(Reader r) {
  GraphProto g;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: expect(w, 2, "GraphProto.node"); g.node.push_back(read_node(r.sub(0))); break;
      case 2: g.name = read_string(r, w, "GraphProto.name"); break;
      case 5: expect(w, 2, "GraphProto.initializer"); g.initializer.push_back(read_tensor(r.sub())); break;
      case 15: expect(w, 2, "GraphProto.sparse_initializer"); g.sparse_initializer.push_back(read_sparse(r.sub())); break;
      case 11: expect(w, 2, "GraphProto.input"); g.input.push_back(read_value_info(r.sub())); break;
      case 12: expect(w, 2, "GraphProto.output"); g.output.push_back(read_value_info(r.sub())); break;
      case 13: expect(w, 2, "GraphProto.value_info"); g.value_info.push_back(read_value_info(r.sub())); break;
      default: r.skip(w);
    }
  }
  return g;
}

OpsetId read_opset(Reader r) {
  OpsetId o;
  uint32_t f, w;
  while (r.tag(f, w)) {
    if (f == 1) o.domain = read_string(r, w, "OperatorSetIdProto.domain");
    else if (f == 2) { expect(w, 0, "OperatorSetIdProto.version"); o.version = int64_t(r.varint()); }
    else r.skip(w);
  }
  return o;
}

FunctionProto read_function(Reader r) {
  FunctionProto fn;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: fn.name = read_string(r, w, "FunctionProto.name"); break;
      case 10: fn.domain = read_string(r, w, "FunctionProto.domain"); break;
      case 13: fn.overload = read_string(r, w, "FunctionProto.overload"); break;
      case 4: fn.input.push_back(read_string(r, w, "FunctionProto.input")); break;
      case 5: fn.output.push_back(read_string(r, w, "FunctionProto.output")); break;
      case 6: fn.attribute.push_back(read_string(r, w, "FunctionProto.attribute")); break;
      case 11: expect(w, 2, "FunctionProto.attribute_proto"); fn.attribute_proto.push_back(read_attribute(r.sub())); break;
      case 7: expect(w, 2, "FunctionProto.node"); fn.node.push_back(read_node(r.sub())); break;
      case 9: expect(w, 2, "FunctionProto.opset_import"); fn.opset_import.push_back(read_opset(r.sub())); break;
      default: r.skip(w);
    }
  }
  return fn;
}

SequenceProto read_sequence(Reader r);
OptionalProto read_optional(Reader r);

SequenceProto read_sequence(Reader r) {
  if (r.depth() > 32) malformed("sequence nesting deeper than 32");
  SequenceProto s;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: s.name = read_string(r, w, "SequenceProto.name"); break;
      case 2: expect(w, 0, "SequenceProto.elem_type"); s.elem_type = int32_t(r.varint()); break;
      case 3: expect(w, 2, "SequenceProto.tensor_values"); s.tensor_values.push_back(read_tensor(r.sub())); break;
      case 5: expect(w, 2, "SequenceProto.sequence_values"); s.sequence_values.push_back(read_sequence(r.sub(1))); break;
      case 7: expect(w, 2, "SequenceProto.optional_values"); s.optional_values.push_back(read_optional(r.sub(1))); break;
      default: r.skip(w);
    }
  }
  return s;
}

OptionalProto read_optional(Reader r) {
  if (r.depth() > 32) malformed("optional nesting deeper than 32");
  OptionalProto o;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: o.name = read_string(r, w, "OptionalProto.name"); break;
      case 2: expect(w, 0, "OptionalProto.elem_type"); o.elem_type = int32_t(r.varint()); break;
      case 3: expect(w, 2, "OptionalProto.tensor_value"); o.tensor_value = read_tensor(r.sub()); o.has_tensor = true; break;
      case 5:
        expect(w, 2, "OptionalProto.sequence_value");
        o.sequence_value = std::make_shared<SequenceProto>(read_sequence(r.sub(1)));
        o.has_sequence = true;
        break;
      case 7:
        expect(w, 2, "OptionalProto.optional_value");
        o.optional_value = std::make_shared<OptionalProto>(read_optional(r.sub(1)));
        o.has_optional = true;
        break;
      default: r.skip(w);
    }
  }
  return o;
}

}  // namespace

ModelProto parse_model(const uint8_t* data, size_t size) {
  Reader r(data, size);
  ModelProto m;
  uint32_t f, w;
  while (r.tag(f, w)) {
    switch (f) {
      case 1: expect(w, 0, "ModelProto.ir_version"); m.ir_version = int64_t(r.varint()); break;
      case 8: expect(w, 2, "ModelProto.opset_import"); m.opset_import.push_back(read_opset(r.sub())); break;
      case 2: m.producer_name = read_string(r, w, "ModelProto.producer_name"); break;
      case 3: m.producer_version = read_string(r, w, "ModelProto.producer_version"); break;
      case 4: m.domain = read_string(r, w, "ModelProto.domain"); break;
      case 5: expect(w, 0, "ModelProto.model_version"); m.model_version = int64_t(r.varint()); break;
      case 6: m.doc_string = read_string(r, w, "ModelProto.doc_string"); break;
      case 7: expect(w, 2, "ModelProto.graph"); m.graph = read_graph(r.sub()); m.has_graph = true; break;
      case 14: expect(w, 2, "ModelProto.metadata_props"); m.metadata_props.push_back(read_string_entry(r.sub())); break;
      case 25: expect(w, 2, "ModelProto.functions"); m.functions.push_back(read_function(r.sub())); break;
      default: r.skip(w);
    }
  }
  return m;
}

TensorProto parse_tensor(const uint8_t* data, size_t size) { return read_tensor(Reader(data, size)); }
SequenceProto parse_sequence(const uint8_t* data, size_t size) { return read_sequence(Reader(data, size)); }
OptionalProto parse_optional(const uint8_t* data, size_t size) { return read_optional(Reader(data, size)); }

}  // namespace basalt::pb
