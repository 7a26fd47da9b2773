// A small, bounds-checked decoder for the ONNX protobuf messages basalt needs.
//
// Why our own and not libprotobuf: (1) tensor raw_data stays a pointer into the memory-mapped
// file (zero-copy weights; protobuf would copy every byte into a std::string); (2) every read is
// bounds-checked and nesting is limited, so a hostile file gives an Error, not a crash; (3) no
// 2 GiB message limit. Unknown fields are skipped, as protobuf does.
//
// Contract: the Bytes views returned point into the input buffer; the caller keeps it alive.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace basalt::pb {

struct Bytes {
  const uint8_t* p = nullptr;
  size_t n = 0;
  std::string str() const { return std::string(reinterpret_cast<const char*>(p), n); }
};

struct TensorProto {
  std::vector<int64_t> dims;
  int32_t data_type = 0;
  std::string name;
  bool has_raw = false;
  Bytes raw_data;
  std::vector<float> float_data;
  std::vector<int32_t> int32_data;
  std::vector<Bytes> string_data;
  std::vector<int64_t> int64_data;
  std::vector<double> double_data;
  std::vector<uint64_t> uint64_data;
  std::vector<std::pair<std::string, std::string>> external_data;
  int32_t data_location = 0;  // 1 = EXTERNAL
  bool has_segment = false;
};

struct SparseTensorProto {
  TensorProto values, indices;
  std::vector<int64_t> dims;
};

struct Dim {
  bool has_value = false;
  int64_t value = 0;
  std::string param;
  std::string denotation;  // e.g. DATA_BATCH (SessionOptions::free_dimensions_by_denotation)
};

struct TypeProto {
  enum class Kind { None, Tensor, Sequence, Map, Optional, SparseTensor };
  Kind kind = Kind::None;
  int32_t elem_type = 0;     // Tensor / SparseTensor element type
  bool has_shape = false;    // Tensor: shape present (may be rank 0)
  std::vector<Dim> shape;
  int32_t map_key_type = 0;  // Map
  std::shared_ptr<TypeProto> elem;  // Sequence / Optional element, Map value
};

struct ValueInfoProto {
  std::string name;
  TypeProto type;
  bool has_type = false;
};

struct GraphProto;

struct AttributeProto {
  std::string name;
  std::string ref_attr_name;
  int32_t type = 0;  // AttributeType: 1 FLOAT 2 INT 3 STRING 4 TENSOR 5 GRAPH 6 FLOATS 7 INTS
                     // 8 STRINGS 9 TENSORS 10 GRAPHS 11 SPARSE_TENSOR 12 SPARSE_TENSORS
                     // 13 TYPE_PROTO 14 TYPE_PROTOS
  float f = 0;
  int64_t i = 0;
  Bytes s;
  bool has_t = false;
  TensorProto t;
  std::shared_ptr<GraphProto> g;
  bool has_sparse = false;
  SparseTensorProto sparse_tensor;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<Bytes> strings;
  std::vector<TensorProto> tensors;
  std::vector<std::shared_ptr<GraphProto>> graphs;
  TypeProto tp;
  // which scalar fields were present (type may be omitted in very old models)
  bool has_f = false, has_i = false, has_s = false;
};

struct OpsetId;
struct NodeProto {
  std::vector<std::string> input, output;
  std::string name, op_type, domain, overload;
  std::vector<AttributeProto> attribute;
  // Set by function inlining: the opsets of the function body this node came from.
  std::shared_ptr<std::vector<OpsetId>> fn_opsets;
};

struct GraphProto {
  std::string name, doc_string;
  std::vector<NodeProto> node;
  std::vector<TensorProto> initializer;
  std::vector<SparseTensorProto> sparse_initializer;
  std::vector<ValueInfoProto> input, output, value_info;
};

struct OpsetId {
  std::string domain;
  int64_t version = 0;
};

struct FunctionProto {
  std::string name, domain, overload;
  std::vector<std::string> input, output, attribute;
  std::vector<AttributeProto> attribute_proto;
  std::vector<NodeProto> node;
  std::vector<OpsetId> opset_import;
};

struct ModelProto {
  int64_t ir_version = 0;
  std::vector<OpsetId> opset_import;
  std::string producer_name, producer_version, domain, doc_string;
  int64_t model_version = 0;
  bool has_graph = false;
  GraphProto graph;
  std::vector<FunctionProto> functions;
  std::vector<std::pair<std::string, std::string>> metadata_props;
};

// Test-data containers (input_*.pb / output_*.pb of the ONNX backend tests).
struct SequenceProto;
struct OptionalProto;
struct SequenceProto {
  std::string name;
  int32_t elem_type = 0;  // 1 tensor, 2 sparse, 3 sequence, 4 map, 5 optional
  std::vector<TensorProto> tensor_values;
  std::vector<SequenceProto> sequence_values;
  std::vector<OptionalProto> optional_values;
};
struct OptionalProto {
  std::string name;
  int32_t elem_type = 0;  // 0 undefined(empty), 1 tensor, 3 sequence, ...
  bool has_tensor = false, has_sequence = false, has_optional = false;
  TensorProto tensor_value;
  std::shared_ptr<SequenceProto> sequence_value;
  std::shared_ptr<OptionalProto> optional_value;
};

// All parse functions throw basalt::Error(InvalidModel) with a description of what is malformed.
ModelProto parse_model(const uint8_t* data, size_t size);
TensorProto parse_tensor(const uint8_t* data, size_t size);
SequenceProto parse_sequence(const uint8_t* data, size_t size);
OptionalProto parse_optional(const uint8_t* data, size_t size);

// Maximum nesting of graphs inside attributes (If/Loop/Scan bodies) accepted by the decoder.
constexpr int kMaxGraphNesting = 64;

}  // namespace basalt::pb
