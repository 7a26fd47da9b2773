#include "graph/graph.hpp"


#include <set>

namespace basalt {

const char* attr_type_name(Attribute::Type t) {
  switch (t) {
    case Attribute::Type::Undefined: return "UNDEFINED";
    case Attribute::Type::Float: return "FLOAT";
    case Attribute::Type::Int: return "INT";
    case Attribute::Type::String: return "STRING";
    case Attribute::Type::Tensor: return "TENSOR";
    case Attribute::Type::Graph: return "GRAPH";
    case Attribute::Type::Floats: return "FLOATS";
    case Attribute::Type::Ints: return "INTS";
    case Attribute::Type::Strings: return "STRINGS";
    case Attribute::Type::Tensors: return "TENSORS";
    case Attribute::Type::Graphs: return "GRAPHS";
    case Attribute::Type::SparseTensor: return "SPARSE_TENSOR";
    case Attribute::Type::SparseTensors: return "SPARSE_TENSORS";
    case Attribute::Type::TypeProto: return "TYPE_PROTO";
    case Attribute::Type::TypeProtos: return "TYPE_PROTOS";
  }
  return "?";
}

std::string TypeInfo::str() const {
  switch (kind) {
    case Kind::Unknown: return "unknown";
    case Kind::Tensor:
    case Kind::SparseTensor: {
      std::string s = (kind == Kind::SparseTensor ? "sparse_tensor(" : "tensor(") + std::string(dtype_name(elem)) + ")";
      if (has_shape) {
        s += "[";
        for (size_t i = 0; i < dims.size(); ++i) {
          if (i) s += ",";
          s += dims[i].fixed() ? std::to_string(dims[i].value) : (dims[i].param.empty() ? "?" : dims[i].param);
        }
        s += "]";
      }
      return s;
    }
    case Kind::Sequence: return "seq(" + (inner ? inner->str() : std::string("?")) + ")";
    case Kind::Optional: return "optional(" + (inner ? inner->str() : std::string("?")) + ")";
    case Kind::Map: return "map(" + std::string(dtype_name(map_key)) + "," + (inner ? inner->str() : std::string("?")) + ")";
  }
  return "?";
}

std::string Node::describe() const { return "node '" + name + "' (" + op_type + ")"; }

void Node::fail(ErrorCode code, const std::string& msg) const { throw Error(code, describe() + ": " + msg); }

const Attribute* Node::find_attr(const std::string& n) const {
  for (const auto& a : attrs)
    if (a.name == n) return &a;
  return nullptr;
}

namespace {
const Attribute& typed(const Node& node, const std::string& name, Attribute::Type want) {
  const Attribute* a = node.find_attr(name);
  if (!a) node.fail(ErrorCode::InvalidModel, "missing required attribute '" + name + "'");
  if (a->type != want)
    node.fail(ErrorCode::InvalidModel, "attribute '" + name + "' has type " + attr_type_name(a->type) +
                                           ", expected " + attr_type_name(want));
  return *a;
}
}  // namespace

int64_t Node::attr_int(const std::string& n) const { return typed(*this, n, Attribute::Type::Int).i; }
int64_t Node::attr_int(const std::string& n, int64_t d) const { return has_attr(n) ? attr_int(n) : d; }
float Node::attr_float(const std::string& n) const { return typed(*this, n, Attribute::Type::Float).f; }
float Node::attr_float(const std::string& n, float d) const { return has_attr(n) ? attr_float(n) : d; }
std::string Node::attr_string(const std::string& n) const { return typed(*this, n, Attribute::Type::String).s; }
std::string Node::attr_string(const std::string& n, const std::string& d) const {
  return has_attr(n) ? attr_string(n) : d;
}
std::vector<int64_t> Node::attr_ints(const std::string& n) const { return typed(*this, n, Attribute::Type::Ints).ints; }
std::vector<int64_t> Node::attr_ints(const std::string& n, const std::vector<int64_t>& d) const {
  return has_attr(n) ? attr_ints(n) : d;
}
std::vector<float> Node::attr_floats(const std::string& n) const {
  return typed(*this, n, Attribute::Type::Floats).floats;
}
std::vector<float> Node::attr_floats(const std::string& n, const std::vector<float>& d) const {
  return has_attr(n) ? attr_floats(n) : d;
}
std::vector<std::string> Node::attr_strings(const std::string& n) const {
  return typed(*this, n, Attribute::Type::Strings).strings;
}
std::vector<std::string> Node::attr_strings(const std::string& n, const std::vector<std::string>& d) const {
  return has_attr(n) ? attr_strings(n) : d;
}
const Tensor& Node::attr_tensor(const std::string& n) const {
  const Attribute* a = find_attr(n);
  if (a && a->type == Attribute::Type::SparseTensor) return a->t;
  return typed(*this, n, Attribute::Type::Tensor).t;
}
std::shared_ptr<Graph> Node::attr_graph(const std::string& n) const { return typed(*this, n, Attribute::Type::Graph).g; }

int Graph::find_value(const std::string& n) const {
  auto it = index_.find(n);
  return it == index_.end() ? -1 : it->second;
}

int Graph::add_value(const std::string& n) {
  int id = int(values.size());
  ValueDef v;
  v.name = n;
  values.push_back(std::move(v));
  if (!n.empty()) index_[n] = id;
  return id;
}

void Graph::finalize() {
  // Last use of every value; graph outputs never die inside the graph.
  std::vector<int> last_use(values.size(), -1);
  for (size_t ni = 0; ni < nodes.size(); ++ni) {
    for (int v : nodes[ni].inputs)
      if (v >= 0) last_use[size_t(v)] = int(ni);
    for (int v : nodes[ni].implicit_inputs) last_use[size_t(v)] = int(ni);
  }
  std::set<int> keep(outputs.begin(), outputs.end());
  free_after.assign(nodes.size(), {});
  for (size_t v = 0; v < values.size(); ++v) {
    if (keep.count(int(v)) || values[v].is_initializer) continue;
    if (last_use[v] >= 0) free_after[size_t(last_use[v])].push_back(int(v));
    else if (values[v].producer >= 0) free_after[size_t(values[v].producer)].push_back(int(v));  // unused output
  }
  constants.clear();
  for (size_t v = 0; v < values.size(); ++v)
    if (values[v].is_initializer) constants.push_back(int(v));
}

}  // namespace basalt
