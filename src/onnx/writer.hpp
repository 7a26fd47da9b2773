// ONNX serializer: writes a Model (as loaded, possibly optimized) back to an ONNX ModelProto.
//
// What is written: ir_version (at least 4, so initializers need not be graph inputs), the
// model's opset imports (including "basalt" v1 when the graph uses fused ops), the main graph
// and every subgraph: nodes with all attribute types (sparse-tensor attributes are written as
// dense tensors, which is how basalt holds them), initializers as raw_data (strings as
// string_data, 4/2-bit types packed), graph inputs/outputs and value_info with their types.
// Initializers nothing reads are left out. A node whose opset differs from the model's import of
// its domain (fusions may create, e.g., an opset-17 LayerNormalization in an opset-11 model) is
// written as a call of a model-local function (domain "basalt.opset_shim") whose body is that
// node under its own opset import, which readers inline. basalt and ONNX Runtime 1.30 load such
// files (tested: same outputs); onnx.checker (1.12) flags the differing function opset, since the
// spec asks function and model imports to be compatible. Model-local functions were inlined at load and
// metadata is not kept, so neither is written. Weights are always embedded (no external data),
// so a model whose weights exceed the 2 GiB protobuf limit cannot be saved.
#pragma once

#include "graph/model.hpp"

#include <string>

namespace basalt {

// The serialized ModelProto. Unsupported content (a tensor of an element type ONNX cannot
// store) is an Unsupported error naming the value.
std::string save_model_bytes(const Model& m);
// Writes save_model_bytes(m) to `path`; an Io error names the path on failure.
void save_model_file(const Model& m, const std::string& path);
// Writes already serialized bytes to `path` (same errors).
void write_model_bytes(const std::string& bytes, const std::string& path);

}  // namespace basalt
