// The in-memory graph basalt runs: values (edges) addressed by index, nodes in topological
// order, attributes already decoded and type-checked, weights as Tensors (often views into the
// memory-mapped model file). Produced by the ONNX importer (src/onnx/loader.cpp), rewritten by
// the optimizer (later), executed by the executor (src/runtime/executor.cpp).
#pragma once

#include <basalt/tensor.hpp>

#include <climits>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace basalt {

struct DimInfo {
  int64_t value = -1;   // >= 0 when fixed
  std::string param;    // symbolic name when not fixed (may be empty = unknown)
  std::string denotation;  // the dim's ONNX denotation (DATA_BATCH, ...), usually empty
  bool fixed() const { return value >= 0; }
};

struct TypeInfo {
  enum class Kind { Unknown, Tensor, Sequence, Optional, Map, SparseTensor };
  Kind kind = Kind::Unknown;
  DType elem = DType::Undefined;      // Tensor element type
  bool has_shape = false;             // Tensor: rank known
  std::vector<DimInfo> dims;
  std::shared_ptr<TypeInfo> inner;    // Sequence / Optional element, Map value
  DType map_key = DType::Undefined;
  std::string str() const;            // "tensor(float)[1,3,H,W]", "seq(tensor(int64))", ...
};

class Graph;

struct Attribute {
  enum class Type {
    Undefined = 0, Float = 1, Int = 2, String = 3, Tensor = 4, Graph = 5, Floats = 6, Ints = 7,
    Strings = 8, Tensors = 9, Graphs = 10, SparseTensor = 11, SparseTensors = 12, TypeProto = 13,
    TypeProtos = 14
  };
  std::string name;
  Type type = Type::Undefined;
  float f = 0;
  int64_t i = 0;
  std::string s;
  Tensor t;  // Tensor and SparseTensor (densified)
  std::shared_ptr<Graph> g;
  std::vector<float> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
  std::vector<Tensor> tensors;
  std::vector<std::shared_ptr<Graph>> graphs;
  TypeInfo tp;
};
const char* attr_type_name(Attribute::Type t);

class OpKernel;
// A node's kernel, created by the runtime (runtime/prepare.cpp) after optimization. The graph
// layer knows only that one may be attached: the type and its deleter live in ops/ (the deleter
// is defined in ops/registry.cpp), so nothing here depends on the kernels.
struct KernelDeleter {
  KernelDeleter() = default;
  KernelDeleter(std::default_delete<OpKernel>) {}  // accepts the factories' std::unique_ptr
  void operator()(OpKernel* k) const;
};
using KernelHandle = std::unique_ptr<OpKernel, KernelDeleter>;

struct Node {
  std::string name;     // never empty: the importer names unnamed nodes "<op>_<index>"
  std::string op_type;
  std::string domain;   // "" for ai.onnx
  int opset = 0;        // the opset version of `domain` the model imports
  std::vector<int> inputs;   // value ids; -1 = omitted optional input
  std::vector<int> outputs;  // value ids; -1 = omitted optional output
  std::vector<Attribute> attrs;
  // Outer-scope values used inside this node's subgraphs (If/Loop/Scan), ids in this graph.
  std::vector<int> implicit_inputs;
  // For each subgraph of this node: capture i of that graph is implicit_inputs[map[i]].
  std::vector<std::pair<const Graph*, std::vector<int>>> capture_index;
  KernelHandle kernel;  // null until the runtime creates kernels

  // "node 'conv1' (Conv)": used to prefix every error about this node.
  std::string describe() const;

  // Attribute accessors. A present attribute of the wrong type is an InvalidModel error naming
  // the node and attribute; a missing required one too.
  const Attribute* find_attr(const std::string& name) const;
  bool has_attr(const std::string& name) const { return find_attr(name) != nullptr; }
  int64_t attr_int(const std::string& name) const;
  int64_t attr_int(const std::string& name, int64_t dflt) const;
  float attr_float(const std::string& name) const;
  float attr_float(const std::string& name, float dflt) const;
  std::string attr_string(const std::string& name) const;
  std::string attr_string(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& name) const;
  std::vector<int64_t> attr_ints(const std::string& name, const std::vector<int64_t>& dflt) const;
  std::vector<float> attr_floats(const std::string& name) const;
  std::vector<float> attr_floats(const std::string& name, const std::vector<float>& dflt) const;
  std::vector<std::string> attr_strings(const std::string& name) const;
  std::vector<std::string> attr_strings(const std::string& name, const std::vector<std::string>& dflt) const;
  const Tensor& attr_tensor(const std::string& name) const;
  std::shared_ptr<Graph> attr_graph(const std::string& name) const;

  // Throws an error of `code` prefixed with describe().
  [[noreturn]] void fail(ErrorCode code, const std::string& msg) const;
};

struct ValueDef {
  std::string name;
  TypeInfo type;             // declared type (graph input/output/value_info), may be Unknown
  bool is_initializer = false;
  Tensor initializer;        // constant data (initializers and folded Constant nodes)
  int producer = -1;         // node index, or -1
  bool is_graph_input = false;
  bool is_capture = false;   // comes from the enclosing graph's scope
};

class Graph {
 public:
  std::string name;
  std::vector<ValueDef> values;
  std::vector<Node> nodes;        // topologically sorted
  std::vector<int> inputs;        // graph inputs the caller must (or may, if initializer) feed
  std::vector<int> outputs;
  std::vector<int> captures;      // values taken from the enclosing scope
  // Execution helpers, computed by finalize():
  std::vector<std::vector<int>> free_after;  // per node: values that die after it runs
  std::vector<int> constants;                // values with initializer data

  int find_value(const std::string& name) const;  // -1 if absent
  int add_value(const std::string& name);         // new value; name must be unique
  // Recompute free_after / constants. Call after the node list changes.
  void finalize();

 private:
  std::map<std::string, int> index_;
};

}  // namespace basalt
