// Shape inference for one concrete input signature, without running the model.
//
// Walks the top-level graph in node order. Per node:
//   1. every input is a known small value (constant, or computed here) -> the node's real kernel
//      runs on those values (value propagation: Shape -> Gather -> Concat -> Reshape chains need
//      no code of their own);
//   2. otherwise the op's shape function (a table keyed by op type in shape_infer.cpp) gives the
//      outputs' dtypes and shapes; Shape and Size also give their values;
//   3. an op without a shape function, or whose result depends on data (NonZero, Loop, If, an
//      input that is itself dynamic, ...), makes its outputs Dynamic.
// The result is a prediction; the executor checks every planned tensor against it at run time
// and falls back to the heap on a mismatch, so a wrong prediction costs memory, never results.
#pragma once

#include "graph/graph.hpp"

#include <basalt/tensor.hpp>

#include <span>
#include <string>
#include <vector>

namespace basalt {

struct InferredValue {
  enum class State : uint8_t { Unknown, Known, Dynamic };
  State state = State::Unknown;
  DType dtype = DType::Undefined;
  Shape shape;
  Tensor value;  // defined when the contents are known (constants, propagated small values)
  bool known() const { return state == State::Known; }
  uint64_t bytes() const;  // numel * dtype size (Known only)
};

// Values larger than this many elements are never computed at plan time.
constexpr int64_t kMaxPropagatedElements = 64 * 1024;

// inputs: one (dtype, shape) per g.inputs entry; a Shape with a negative first dim marks an
// omitted input (its initializer default, if any, is used). Returns one entry per g.values.
// Throws MemoryLimit when a node claims an absurd output size (more than 1 TiB), naming it.
std::vector<InferredValue> infer_shapes(const Graph& g, std::span<const std::pair<DType, Shape>> inputs);

// True when an op of this type has a shape function (for tests and `basalt plan`).
bool has_shape_function(const std::string& op_type);

}  // namespace basalt
