// A loaded model: the graph with kernels, opset imports, and the memory that backs its weights.
#pragma once

#include "graph/graph.hpp"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace basalt {

struct LoadOptions {
  // Keep loading when an op has no kernel (for `basalt inspect`); running such a model fails.
  bool allow_unsupported = false;
};

struct Model {
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // canonical domain ("" = ai.onnx) -> version
  std::string producer_name, producer_version;
  std::shared_ptr<Graph> graph;
  // Not kept after loading (weights viewing the file hold its mapping alive); see loader.cpp.
  std::shared_ptr<const void> file_bytes;
  size_t file_size = 0;
  std::vector<std::string> unsupported;    // "Op (domain, opset N) at node 'x'"
  size_t weight_bytes = 0;                 // all constant tensors
  size_t weight_bytes_in_place = 0;        // of which used in place from the mapped file(s)
  std::string path;                        // empty when loaded from memory
  int64_t kernel_create_ns = 0;            // time spent in kernel factories (all graphs), for profiles
};

std::shared_ptr<Model> load_model_file(const std::string& path, const LoadOptions& opts = {});
std::shared_ptr<Model> load_model_bytes(const void* data, size_t size, const LoadOptions& opts = {});

}  // namespace basalt
