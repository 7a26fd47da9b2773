// Graph optimizer (issue 6): rewrites a loaded Model's graphs before kernels are created.
//
// Pipeline: load (src/onnx) -> optimize (here) -> create_kernels (runtime/prepare.cpp) -> plan
// -> run. Passes work on the Graph of graph/graph.hpp (values by id, nodes in topological
// order); after a pass changes the node list it must leave the graph valid: nodes still in
// topological order, every value produced at most once, Node::capture_index intact.
//
// Levels (cumulative):
//   None     - nothing.
//   Basic    - cleanups that keep standard ops: constant folding, dead-node removal,
//              Identity/Dropout removal, Reshape/Squeeze/Unsqueeze chain folding, static
//              shape-subgraph folding, Conv+BatchNormalization folding.
//   Extended - fusions into basalt-domain ops (docs/fused_ops.md): Conv/Gemm + bias +
//              activation (+ residual Add), MatMul + Add, LayerNorm, GELU, attention,
//              transposes folded into MatMul.
//   All      - Extended plus layout choices for the fast kernels.
// With standard_ops, passes that would introduce non-ai.onnx ops are skipped (each skip is
// reported), so the saved model loads in any ONNX runtime.
#pragma once

#include "graph/model.hpp"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace basalt {

enum class OptLevel { None = 0, Basic = 1, Extended = 2, All = 3 };
// "none" | "basic" | "extended" | "all" (also "0".."3"); InvalidArgument otherwise.
OptLevel parse_opt_level(const std::string& s);
const char* opt_level_name(OptLevel l);

struct OptimizeOptions {
  OptLevel level = OptLevel::All;
  bool standard_ops = false;
  // Winograd may run convs (SessionOptions::winograd): the layout pass leaves a conv that
  // Winograd runs best in NCHW out of a blocked chain only then.
  bool winograd = true;
};

struct OptimizeReport {
  struct Rejected {
    std::string pattern, node, reason;  // e.g. {"Conv+BatchNormalization", "conv1", "BN output has 2 consumers"}
  };
  struct Pass {
    std::string name;
    double ms = 0;
  };
  std::map<std::string, int> fusions;  // pattern -> times applied
  std::vector<Rejected> rejected;
  std::vector<Pass> passes;
  int nodes_before = 0, nodes_after = 0;  // top-level graph
};

// Runs the passes of opts.level over m's graph and every subgraph. Fills `report` when given.
void optimize_model(Model& m, const OptimizeOptions& opts, OptimizeReport* report = nullptr);

}  // namespace basalt
