// What the runtime and the optimizer know about an operator besides its kernel, declared once,
// next to the kernel, in the op's family file (src/ops/<family>.cpp):
//   - type and shape inference (a ShapeFn), used by the memory planner for concrete input shapes
//     (runtime/shape_infer.hpp) and by the optimizer for symbolic ones (opt/graph_util.hpp);
//   - whether an output's shape depends on the contents of an input (data_dependent): such
//     outputs come from the bounded dynamic pool instead of the plan;
//   - aliasing: an output that is a view of input 0, one that may be input 0 passed through, or
//     outputs that may hold any input (sequences, optionals, control flow);
//   - in place: which inputs output 0 may overwrite (an InPlaceFn, checked per node and shapes).
//
// A registration line declares them with the builder returned by OpRegistry::def:
//   r.def("Relu").infer(shapes::same).in_place(in_place::unary_f32);
//   r.def("NonZero").data_dependent();
//   r.def("Reshape").infer(shapes::reshape).alias(Alias::View);
// tests/unit/op_traits_test.cpp walks the registry: an op with neither inference nor
// data_dependent fails it.
#pragma once

#include "graph/graph.hpp"

#include <basalt/tensor.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace basalt {

// One value as shape inference sees it.
struct InferredValue {
  enum class State : uint8_t { Unknown, Known, Dynamic };
  State state = State::Unknown;
  DType dtype = DType::Undefined;
  Shape shape;   // dims >= 0, or symbols (< -1, see SymbolTable) in symbolic inference
  Tensor value;  // defined when the contents are known (constants, propagated small values)
  bool known() const { return state == State::Known; }
  uint64_t bytes() const;  // numel * dtype size (Known, numeric dims only)
};

// Symbolic dims for the optimizer's static inference: dim value -2 - k names names[k] (a graph
// input's named dim "$N", or an expression of others such as "ceil($H/2)"). The same name is
// the same size. Concrete inference (the planner) has no table: every dim is a number.
struct SymbolTable {
  std::vector<std::string> names;
  int64_t intern(const std::string& key);
  const std::string& name(int64_t dim) const { return names[size_t(-2 - dim)]; }
};
inline bool is_symbol(int64_t d) { return d < -1; }
inline bool all_numeric(const Shape& s) {
  for (int64_t d : s)
    if (d < 0) return false;
  return true;
}

// The inputs of one node for its ShapeFn: entry i is input i, or null when omitted.
struct ShapeInputs {
  std::vector<const InferredValue*> v;
  SymbolTable* symbols = nullptr;  // non-null: symbolic inference (dims may be symbols)
  size_t size() const { return v.size(); }
  const InferredValue* operator[](size_t i) const { return v[i]; }
};
using ShapeOutputs = std::vector<InferredValue>;  // one per node output, filled by the ShapeFn

// Fills `out` and returns true, or returns false when the shapes cannot be known without the
// data (or the attributes are malformed: the kernel factory reports those). A ShapeFn may throw
// Error for a malformed attribute; inference then treats the outputs as unknown.
using ShapeFn = bool (*)(const Node& n, const ShapeInputs& in, ShapeOutputs& out);

// The inputs of node n (preferred first) whose arena block output 0 may take over when the
// input dies at n. in[k]: input k's (dtype, shape) ({Undefined, {-1}} omitted, {Undefined, {}}
// unknown); out: output 0's. Called only for float32 outputs of standard-domain nodes (and the
// basalt ops that declare it). The contract an op signs: see runtime/planner.cpp, "in place".
using InPlaceFn = std::vector<int> (*)(const Node& n, std::span<const std::pair<DType, Shape>> in,
                                       const std::pair<DType, Shape>& out);

enum class Alias : uint8_t {
  None,         // outputs are tensors of their own
  View,         // output 0 is always (a reshaped view of) input 0: no memory of its own
  MaybeView,    // output 0 may be input 0 passed through in a special case (identity permutation, ...)
  HoldsInputs,  // outputs may hold any input (sequences, optionals, control flow)
};

struct OpTraits {
  ShapeFn shape = nullptr;
  bool symbolic = false;        // shape handles symbolic dims; else it sees numeric dims only
  bool data_dependent = false;  // some output's shape depends on input contents
  Alias alias_kind = Alias::None;
  InPlaceFn in_place_fn = nullptr;

  OpTraits& infer(ShapeFn f) { shape = f; return *this; }
  // infer() for a function that handles symbolic dims (broadcasting, windows, permutations).
  OpTraits& infer_symbolic(ShapeFn f) { shape = f; symbolic = true; return *this; }
  OpTraits& data_dependent_shape() { data_dependent = true; return *this; }
  OpTraits& alias(Alias a) { alias_kind = a; return *this; }
  OpTraits& in_place(InPlaceFn f) { in_place_fn = f; return *this; }
};

// The shape rules ops share (ops/shape_fns.cpp). Each is a ShapeFn.
namespace shapes {
bool broadcast2(const Shape& a, const Shape& b, Shape& r);  // multidirectional; symbols only vs 1 or themselves
void set(ShapeOutputs& out, size_t i, DType dt, Shape s);
bool has(const ShapeInputs& in, size_t i);        // input i present with a known shape
bool has_value(const ShapeInputs& in, size_t i);  // ... and known contents
bool ints(const ShapeInputs& in, size_t i, std::vector<int64_t>& r);  // input i's known contents as int64
bool checked_numel(const Shape& s, int64_t& r);   // product of numeric dims; false on a symbol or overflow
int64_t norm_axis(int64_t a, int64_t rank);       // a negative axis counted from the end (not range-checked)
// MatMul's output shape (numpy broadcasting of the batch dims), optionally transposing a or b.
bool matmul_shapes(Shape a, Shape b, bool ta, bool tb, Shape& r);
// Spatial output dims of a sliding window (Conv, pools) into r[2..]; x is [N, C, spatial...].
bool window_dims(const Node& n, const ShapeInputs& in, const Shape& x, const std::vector<int64_t>& kernel,
                 bool ceil_mode, Shape& r);

bool same(const Node&, const ShapeInputs&, ShapeOutputs&);          // output 0 = input 0
bool same_all(const Node&, const ShapeInputs&, ShapeOutputs&);      // output i = input i
bool same_bool(const Node&, const ShapeInputs&, ShapeOutputs&);     // input 0's shape, bool
bool broadcast(const Node&, const ShapeInputs&, ShapeOutputs&);     // all inputs, input 0's dtype
bool broadcast_bool(const Node&, const ShapeInputs&, ShapeOutputs&);
bool where(const Node&, const ShapeInputs&, ShapeOutputs&);
bool dropout(const Node&, const ShapeInputs&, ShapeOutputs&);
bool cast(const Node&, const ShapeInputs&, ShapeOutputs&);
bool cast_like(const Node&, const ShapeInputs&, ShapeOutputs&);
bool conv(const Node&, const ShapeInputs&, ShapeOutputs&);
bool conv_integer(const Node&, const ShapeInputs&, ShapeOutputs&);
bool conv_transpose(const Node&, const ShapeInputs&, ShapeOutputs&);
bool pool(const Node&, const ShapeInputs&, ShapeOutputs&);
bool global_pool(const Node&, const ShapeInputs&, ShapeOutputs&);
bool nchwc_conv(const Node&, const ShapeInputs&, ShapeOutputs&);
bool nchwc_pool(const Node&, const ShapeInputs&, ShapeOutputs&);
bool nchwc_global_pool(const Node&, const ShapeInputs&, ShapeOutputs&);
bool reorder_from_nchwc(const Node&, const ShapeInputs&, ShapeOutputs&);
bool reorder_to_nchwc(const Node&, const ShapeInputs&, ShapeOutputs&);
bool matmul(const Node&, const ShapeInputs&, ShapeOutputs&);
bool matmul_integer(const Node&, const ShapeInputs&, ShapeOutputs&);
// com.microsoft DynamicQuantizeMatMul / MatMulIntegerToFloat: MatMul's shape, float.
bool matmul_to_float(const Node&, const ShapeInputs&, ShapeOutputs&);
// com.microsoft QLinearAdd / QLinearMul: inputs 0 and 3 broadcast, input 0's type.
bool qlinear_binary(const Node&, const ShapeInputs&, ShapeOutputs&);
bool gemm(const Node&, const ShapeInputs&, ShapeOutputs&);
bool reshape(const Node&, const ShapeInputs&, ShapeOutputs&);
bool flatten(const Node&, const ShapeInputs&, ShapeOutputs&);
bool transpose(const Node&, const ShapeInputs&, ShapeOutputs&);
bool concat(const Node&, const ShapeInputs&, ShapeOutputs&);
bool split(const Node&, const ShapeInputs&, ShapeOutputs&);
bool slice(const Node&, const ShapeInputs&, ShapeOutputs&);
bool squeeze(const Node&, const ShapeInputs&, ShapeOutputs&);
bool unsqueeze(const Node&, const ShapeInputs&, ShapeOutputs&);
bool gather(const Node&, const ShapeInputs&, ShapeOutputs&);
bool gather_elements(const Node&, const ShapeInputs&, ShapeOutputs&);
bool resize(const Node&, const ShapeInputs&, ShapeOutputs&);
bool pad(const Node&, const ShapeInputs&, ShapeOutputs&);
bool expand(const Node&, const ShapeInputs&, ShapeOutputs&);
bool tile(const Node&, const ShapeInputs&, ShapeOutputs&);
bool reduce(const Node&, const ShapeInputs&, ShapeOutputs&);
bool argreduce(const Node&, const ShapeInputs&, ShapeOutputs&);
bool shape_op(const Node&, const ShapeInputs&, ShapeOutputs&);
bool size_op(const Node&, const ShapeInputs&, ShapeOutputs&);
bool constant_of_shape(const Node&, const ShapeInputs&, ShapeOutputs&);
bool attention(const Node&, const ShapeInputs&, ShapeOutputs&);
bool range(const Node&, const ShapeInputs&, ShapeOutputs&);
bool rnn(const Node&, const ShapeInputs&, ShapeOutputs&);
bool layer_norm(const Node&, const ShapeInputs&, ShapeOutputs&);
bool batch_norm(const Node&, const ShapeInputs&, ShapeOutputs&);
bool depth_to_space(const Node&, const ShapeInputs&, ShapeOutputs&);
bool space_to_depth(const Node&, const ShapeInputs&, ShapeOutputs&);
bool quantize_linear(const Node&, const ShapeInputs&, ShapeOutputs&);
bool dequantize_linear(const Node&, const ShapeInputs&, ShapeOutputs&);
// Rules of single ops (one op each unless said).
bool bernoulli(const Node&, const ShapeInputs&, ShapeOutputs&);
bool bitcast(const Node&, const ShapeInputs&, ShapeOutputs&);
bool causal_conv_with_state(const Node&, const ShapeInputs&, ShapeOutputs&);
bool deform_conv(const Node&, const ShapeInputs&, ShapeOutputs&);
bool det(const Node&, const ShapeInputs&, ShapeOutputs&);
bool dynamic_quantize_linear(const Node&, const ShapeInputs&, ShapeOutputs&);
bool einsum(const Node&, const ShapeInputs&, ShapeOutputs&);
bool eye_like(const Node&, const ShapeInputs&, ShapeOutputs&);
bool gather_nd(const Node&, const ShapeInputs&, ShapeOutputs&);
bool grid_sample(const Node&, const ShapeInputs&, ShapeOutputs&);
bool linear_attention(const Node&, const ShapeInputs&, ShapeOutputs&);
bool max_roi_pool(const Node&, const ShapeInputs&, ShapeOutputs&);
bool max_unpool(const Node&, const ShapeInputs&, ShapeOutputs&);  // output_shape input: known values only
bool multinomial(const Node&, const ShapeInputs&, ShapeOutputs&);
bool negative_log_likelihood_loss(const Node&, const ShapeInputs&, ShapeOutputs&);
bool qlinear_conv(const Node&, const ShapeInputs&, ShapeOutputs&);
bool qlinear_matmul(const Node&, const ShapeInputs&, ShapeOutputs&);
bool random_tensor(const Node&, const ShapeInputs&, ShapeOutputs&);  // RandomUniform, RandomNormal
bool random_like(const Node&, const ShapeInputs&, ShapeOutputs&);  // RandomUniformLike, RandomNormalLike
bool roi_align(const Node&, const ShapeInputs&, ShapeOutputs&);
bool softmax_cross_entropy_loss(const Node&, const ShapeInputs&, ShapeOutputs&);
bool swiglu(const Node&, const ShapeInputs&, ShapeOutputs&);
bool tensor_scatter(const Node&, const ShapeInputs&, ShapeOutputs&);
bool tfidf_vectorizer(const Node&, const ShapeInputs&, ShapeOutputs&);
bool array_feature_extractor(const Node&, const ShapeInputs&, ShapeOutputs&);
bool binarizer(const Node&, const ShapeInputs&, ShapeOutputs&);
bool label_encoder(const Node&, const ShapeInputs&, ShapeOutputs&);
bool tree_ensemble(const Node&, const ShapeInputs&, ShapeOutputs&);
bool adagrad(const Node&, const ShapeInputs&, ShapeOutputs&);
bool momentum(const Node&, const ShapeInputs&, ShapeOutputs&);
bool adam(const Node&, const ShapeInputs&, ShapeOutputs&);
bool flex_attention(const Node&, const ShapeInputs&, ShapeOutputs&);
}  // namespace shapes

// In-place rules ops share (ops/shape_fns.cpp). Each is an InPlaceFn.
namespace in_place {
std::vector<int> unary_f32(const Node&, std::span<const std::pair<DType, Shape>>, const std::pair<DType, Shape>&);
std::vector<int> binary_f32(const Node&, std::span<const std::pair<DType, Shape>>, const std::pair<DType, Shape>&);
std::vector<int> softmax_f32(const Node&, std::span<const std::pair<DType, Shape>>, const std::pair<DType, Shape>&);
std::vector<int> batch_norm_f32(const Node&, std::span<const std::pair<DType, Shape>>, const std::pair<DType, Shape>&);
std::vector<int> layer_norm_f32(const Node&, std::span<const std::pair<DType, Shape>>, const std::pair<DType, Shape>&);
}  // namespace in_place

}  // namespace basalt
