// Shape inference for one concrete input signature, without running the model.
//
// Walks the top-level graph in node order. Per node:
//   1. every input is a known small value (constant, or computed here) -> the node's real kernel
//      runs on those values (value propagation: Shape -> Gather -> Concat -> Reshape chains need
//      no code of their own);
//   2. otherwise the op's shape function (declared with the op: ops/op_traits.hpp) gives the
//      outputs' dtypes and shapes; Shape and Size also give their values;
//   3. an op without a shape function, or whose result depends on data (NonZero, Loop, If, an
//      input that is itself dynamic, ...), makes its outputs Dynamic.
// The result is a prediction; the executor checks every planned tensor against it at run time
// and falls back to the heap on a mismatch, so a wrong prediction costs memory, never results.
#pragma once

#include "graph/graph.hpp"
#include "ops/op_traits.hpp"

#include <basalt/tensor.hpp>

#include <span>
#include <string>
#include <vector>

namespace basalt {

// Values larger than this many elements are never computed at plan time.
constexpr int64_t kMaxPropagatedElements = 64 * 1024;

// inputs: one (dtype, shape) per g.inputs entry; a Shape with a negative first dim marks an
// omitted input (its initializer default, if any, is used). Returns one entry per g.values.
// Throws MemoryLimit when a node claims an absurd output size (more than 1 TiB), naming it.
std::vector<InferredValue> infer_shapes(const Graph& g, std::span<const std::pair<DType, Shape>> inputs);

}  // namespace basalt
