// ONNX backend test data (input_*.pb / output_*.pb) and the comparison rules of the ONNX runner.
#pragma once

#include <basalt/basalt.hpp>

#include <string>

namespace basalt {

// Reads a .pb holding a TensorProto, SequenceProto or OptionalProto, as `kind` says
// ("tensor", "sequence", "optional"; anything else = tensor).
// `expect`: the model's declared element type; old test data stores bfloat16 as uint16, which
// is reinterpreted when the model expects bfloat16.
Value read_pb_value(const std::string& path, const std::string& kind, DType expect = DType::Undefined);

// Compares like the ONNX backend runner: same dtype and shape; floats allclose(rtol, atol)
// with NaN == NaN and matching infinities; integers, bools and strings exactly.
// Returns "" when equal, else a description of the first difference.
std::string compare_values(const Value& got, const Value& want, double rtol, double atol);

// Relative L2 error ||a-b|| / max(||b||, tiny) for numeric tensors (shape must match).
double rel_l2(const Tensor& a, const Tensor& b);

}  // namespace basalt
