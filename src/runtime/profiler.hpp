// Profiling: what each node of a run did and when, for `basalt run --profile` (a Chrome trace)
// and `basalt profile` (tables).
//
// Contract:
// - Off costs nothing: RunContext::profile is null and the executor takes its unprofiled path
//   (one test per graph execution, none per node).
// - On, recording is cheap: steady_clock stamps and plain numbers appended to vectors whose
//   capacity is reserved from the previous run. Names and strings are formatted only when a
//   trace or table is written, from the Node pointers kept in the records.
// - One RunProfile belongs to one Session::run call and is filled by the thread executing it
//   (subgraphs run on the same thread). Profiler::end_run moves it into the session's Profiler
//   under a mutex, so concurrent runs do not contend while running.
// - Records hold Graph/Node pointers: they are valid while the Session (and its Model) lives.
//
// "Tensor bytes in use" is the sum of the bytes of live tensors produced during the run plus the
// run's inputs. A tensor that shares storage with one of its node's inputs (a reshape view, an
// Identity) counts zero; weights (initializers) are not counted. basalt has no arena yet, so this
// is what the run holds, not what an allocator reserved.
#pragma once

#include "graph/graph.hpp"

#include <basalt/tensor.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace basalt {

// Nanoseconds on steady_clock (absolute; traces are shifted so the earliest event is at 0).
inline int64_t prof_now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// A small integer naming the calling thread (0, 1, 2... in order of first use).
int prof_thread_index();

// One tensor seen by a node: shape dims live in RunProfile::dims[dims_at, dims_at + rank).
struct ProfTensor {
  DType dtype = DType::Undefined;
  bool is_sequence = false;     // a sequence: dims are empty, bytes sum its elements
  bool present = false;         // false for an omitted optional input/output
  uint32_t rank = 0;
  uint32_t dims_at = 0;
  int32_t value = -1;           // value id in the node's graph
  uint64_t bytes = 0;           // nbytes (all elements of a sequence)
};

// One executed node.
struct ProfNode {
  const Graph* graph = nullptr;
  int32_t node = -1;            // index in graph->nodes
  int32_t parent = -1;          // index (in RunProfile::nodes) of the node whose subgraph ran this one
  int32_t thread = 0;
  int64_t start_ns = 0, end_ns = 0;
  uint32_t tensors_at = 0;      // inputs then outputs in RunProfile::tensors
  uint16_t n_in = 0, n_out = 0;
  uint64_t bytes = 0;           // input + output tensor bytes
  uint64_t live_after = 0;      // tensor bytes in use after the node
  const Node& def() const { return graph->nodes[size_t(node)]; }
};

// A tensor alive at the peak.
struct ProfAlive {
  const Graph* graph = nullptr;
  int32_t value = -1;
  DType dtype = DType::Undefined;
  uint64_t bytes = 0;
  std::vector<int64_t> shape;
};

// What one Session::run recorded. Filled by the executor (see executor.cpp).
class RunProfile {
 public:
  int64_t start_ns = 0, end_ns = 0;
  int32_t thread = 0;
  std::vector<ProfNode> nodes;
  std::vector<ProfTensor> tensors;
  std::vector<int64_t> dims;
  uint64_t peak_bytes = 0;
  int32_t peak_node = -1;       // index in nodes; -1 = the peak is the inputs alone
  std::vector<ProfAlive> peak_alive;

  // --- executor interface ---
  // A frame of values being executed; `counted` holds each value's counted bytes.
  struct Frame {
    const Graph* graph;
    const std::vector<Value>* values;
    const std::vector<uint64_t>* counted;
  };
  void reserve(size_t nodes_hint, size_t tensors_hint, size_t dims_hint);
  // Appends a tensor record for v (null or None = omitted); returns v's bytes.
  uint64_t add_tensor(const Value* v, int value_id);
  // Bytes `v` adds to the live total, counting zero for storage shared with any of `ins`.
  static uint64_t new_bytes(const Value& v, std::span<const Value* const> ins, std::span<const Value* const> impl);
  void add_live(uint64_t b) { live_ += b; }
  void sub_live(uint64_t b) { live_ -= b; }
  uint64_t live() const { return live_; }
  // After node `idx` finished: stores live_after and snapshots the alive set on a new peak.
  void after_node(size_t idx);
  // The inputs alone may be the peak (before any node ran).
  void note_inputs_peak();
  std::vector<Frame> frames;    // the stack of frames executing now (outermost first)
  int32_t current_parent = -1;  // the node whose subgraph is executing now

 private:
  void snapshot_alive();
  uint64_t live_ = 0;
};

// A session phase (load, prepare, ...), recorded at most once each.
struct ProfPhase {
  std::string name;
  std::string detail;
  int64_t start_ns = 0, end_ns = 0;
};

class Profiler {
 public:
  void add_phase(std::string name, std::string detail, int64_t start_ns, int64_t end_ns);
  // A record for one run, with capacity reserved from the previous runs.
  std::unique_ptr<RunProfile> begin_run() const;
  void end_run(std::unique_ptr<RunProfile> r);
  // Drops recorded runs (e.g. warm-up runs), keeping phases.
  void clear_runs();
  // A copy of what was recorded so far (safe while other threads run).
  std::vector<ProfPhase> phases() const;
  std::vector<std::shared_ptr<const RunProfile>> runs() const;
  // Writes a Chrome trace (JSON, viewable in Perfetto / chrome://tracing). Throws basalt::Error
  // (Io) when the file cannot be written.
  void write_chrome_trace(const std::string& path) const;

 private:
  mutable std::mutex mu_;
  std::vector<ProfPhase> phases_;
  std::vector<std::shared_ptr<const RunProfile>> runs_;
  size_t hint_nodes_ = 0, hint_tensors_ = 0, hint_dims_ = 0;
};

// FLOPs of a node from its recorded shapes, for Conv, ConvTranspose, MatMul and Gemm (0 for
// other ops or when shapes are missing).
double node_flops(const RunProfile& r, const ProfNode& n);
// "[1,3,224,224]" of a recorded tensor.
std::string prof_shape_str(const RunProfile& r, const ProfTensor& t);

}  // namespace basalt
