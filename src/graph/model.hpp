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
  // Kernels may pick Winograd convolution (SessionOptions::winograd).
  bool winograd = true;
};

struct OptimizeReport;  // opt/optimizer.hpp

struct Model {
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // canonical domain ("" = ai.onnx) -> version
  std::string producer_name, producer_version;
  // The rest of the file's description (Session::metadata): domain, doc_string, model_version,
  // the main graph's doc_string and metadata_props in file order.
  std::string domain, doc_string, graph_doc_string;
  int64_t model_version = 0;
  std::vector<std::pair<std::string, std::string>> metadata_props;
  std::shared_ptr<Graph> graph;
  // Not kept after loading (weights viewing the file hold its mapping alive); see loader.cpp.
  std::shared_ptr<const void> file_bytes;
  size_t file_size = 0;
  std::vector<std::string> unsupported;    // "Op (domain, opset N) at node 'x'"
  size_t weight_bytes = 0;                 // constant tensors held (recounted after kernels are prepared)
  size_t weight_bytes_in_place = 0;        // of which used in place from the mapped file(s)
  std::string path;                        // empty when loaded from memory
  int64_t kernel_create_ns = 0;            // time spent in kernel factories and prepare (all graphs)
  size_t weight_bytes_released = 0;        // originals dropped after packing (not in weight_bytes)
  size_t weight_bytes_released_in_place = 0;  // of those, views of the file
  size_t packed_weight_bytes = 0;          // copies kernels made of weights at prepare (packing)
  // Graph optimization (src/opt), run by Session::create before create_kernels: its wall time
  // (start/end on the profiler clock, 0 when not run) and what it did.
  int64_t optimize_start_ns = 0, optimize_end_ns = 0;
  std::shared_ptr<OptimizeReport> optimize_report;
};

// Import only: the graphs have no kernels yet. Sessions then optimize and call create_kernels.
std::shared_ptr<Model> load_model_file(const std::string& path, const LoadOptions& opts = {});
std::shared_ptr<Model> load_model_bytes(const void* data, size_t size, const LoadOptions& opts = {});

// Creates every node's kernel (subgraphs included) from the op registry, then calls each
// kernel's prepare() with its constant inputs (weight packing), and re-finalizes the graphs.
// An op without a kernel is an Unsupported error naming it, or, with opts.allow_unsupported, a
// line in m.unsupported. Counts m.packed_weight_bytes and m.kernel_create_ns. The prepare() calls
// run on `pool` when there is one (a node per chunk; kernels are independent there), which is
// where most of a session's creation time goes.
class ThreadPool;
void create_kernels(Model& m, const LoadOptions& opts, int threads, ThreadPool* pool = nullptr);

}  // namespace basalt
