// Model quantization (issue 38; `basalt quantize`, tools/cli_quantize.cpp): rewrites a float
// model's graph into a standard quantized ONNX model that basalt and ONNX Runtime both run.
//
// Dynamic (no calibration; transformers): every MatMul whose B is a constant 2-D float matrix
// gets int8 weights (symmetric, per column with per_channel, else per tensor) and becomes
//   DynamicQuantizeLinear(A) -> MatMulInteger(Aq, Bq, a_zp, 0) -> Cast(float)
//     -> Mul(., Mul(a_scale, b_scale))
// the form ONNX Runtime's dynamic quantizer writes (one DynamicQuantizeLinear per distinct A).
// basalt's optimizer fuses it back into one integer kernel (opt/fuse_quant.cpp).
//
// Static (calibrated ranges; CNNs), QOperator format: with the range of every float activation
// measured on calibration inputs (ActivationRanges), activations are uint8 (asymmetric, from the
// range widened to contain 0) and weights int8 (symmetric, per output channel with per_channel):
//   Conv (constant W, B)        -> QLinearConv, bias as int32 in x_scale * w_scale units
//   MatMul (constant 2-D B)     -> QLinearMatMul
//   Add (or a two-input Sum) of two quantized values -> com.microsoft QLinearAdd
//   a Relu or Clip(0, hi) after any of these -> folded: the output's range starts at 0 (zero
//                                  point 0) and ends at most at hi, so the uint8 saturation is
//                                  the activation
//   MaxPool (opset >= 12), Reshape, Flatten, Transpose, Squeeze, Unsqueeze of a quantized value -> the same op on
//                                  the uint8 tensor (they move values, so the scale carries over)
// A QuantizeLinear is inserted where a float value enters a quantized op, a DequantizeLinear
// where a quantized value reaches a float op or a graph output. Nodes that cannot be quantized
// (no range, non-constant weights, another op) stay float; each is listed with its reason.
#pragma once

#include "graph/model.hpp"

#include <map>
#include <string>
#include <vector>

namespace basalt {

struct ActivationRange {
  float lo = 0.f, hi = 0.f;
};
using ActivationRanges = std::map<std::string, ActivationRange>;  // value name -> range

struct QuantizeOptions {
  bool dynamic = false;     // else static (needs ranges)
  bool per_channel = true;  // weight scales per output channel / column
  ActivationRanges ranges;
};

struct QuantizeReport {
  std::map<std::string, int> quantized;  // op type -> nodes rewritten
  struct Skipped {
    std::string node, op, reason;
  };
  std::vector<Skipped> skipped;
  size_t float_weight_bytes = 0, int8_weight_bytes = 0;  // of the weights rewritten
  int64_t opset_upgraded_from = 0;  // the ai.onnx import before it was raised to 12 (0: not raised)
};

// Rewrites m's main graph in place. An ai.onnx import below 12 is raised to 12 (the quantized
// ops need 10, DynamicQuantizeLinear 11, an 8-bit MaxPool 12) when every op in the graph means
// the same there; else a model below 11 is an InvalidModel error naming the op.
void quantize_model(Model& m, const QuantizeOptions& opts, QuantizeReport& report);

// The float tensor values a static quantization needs ranges of (inputs and outputs of the
// nodes it may rewrite), by name.
std::vector<std::string> calibration_values(const Model& m);

}  // namespace basalt
