// Symbolic expansion of ai.onnx.preview.training Gradient nodes (see gradient.cpp).
#pragma once

#include "onnx/proto.hpp"

#include <vector>

namespace basalt {

// Replaces every Gradient node in `nodes` by the nodes that compute it. Throws Error naming the
// Gradient node when a forward op on the path has no derivative rule.
void expand_gradient_nodes(std::vector<pb::NodeProto>& nodes, int64_t ai_onnx_opset);

}  // namespace basalt
