// basalt — public C++ API.
//
//   auto s = basalt::Session::open("model.onnx");
//   std::vector<basalt::Value> out = s->run({{"x", basalt::Tensor(basalt::DType::Float, {1, 3, 224, 224})}});
//
// Errors: every function throws basalt::Error (see error.hpp) with a message that names what
// is wrong (node, op, input). A Session is immutable after creation; run() may be called from
// many threads at once.
#pragma once

#include <basalt/dtype.hpp>
#include <basalt/error.hpp>
#include <basalt/tensor.hpp>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace basalt {


struct SessionOptions {
  // Intra-op threads working on one run (the calling thread included); 0 = every core this
  // process may use.
  int threads = 0;
  // Use the process-wide pool (shared by every session that sets this) instead of one owned by
  // this session. The shared pool is sized by the first session that asks for it.
  bool shared_pool = false;
  // How long an idle pool thread spins before it sleeps, in microseconds; 0 = never spin.
  int spin_us = 50;
  uint64_t memory_limit = 0;     // bytes; 0 = no limit
  bool allow_unsupported = false;  // load models with unsupported ops (running them fails)
  // Profiling. When profile_path is non-empty or enable_profiling is set, the session records its
  // phases (load, prepare) and, for every run(), each executed node (time, shapes, bytes) and the
  // tensor bytes in use; see Session::profiler(). With profile_path, the record is written there
  // as a Chrome trace (Perfetto, chrome://tracing) by end_profiling() or, failing that, when the
  // session is destroyed. Off (the default), runs record nothing and cost nothing extra.
  std::string profile_path;
  bool enable_profiling = false;
  // Graph optimization level: 0 none, 1 basic, 2 extended, 3 all (see src/opt/optimizer.hpp).
  int optimization_level = 3;
  // Memory plans are cached per input-shape signature in an LRU bounded by entries and by the
  // resident bytes the cached plans keep (slots, packed shapes, lifetimes: MemoryStats::
  // plan_cache_bytes); 0 entries = no caching (plan every run). A plan larger than the byte bound
  // is used for its run and not kept.
  size_t plan_cache_entries = 32;
  uint64_t plan_cache_bytes = kDefaultPlanCacheBytes;
  // 8 MiB: 32 plans of a 5,000-value graph (about 40 bytes per value and node, shapes packed;
  // PaddleOCR det's 1,000-odd values take 38 KB a plan). A larger plan runs uncached.
  static constexpr uint64_t kDefaultPlanCacheBytes = uint64_t(8) << 20;
  // Run in a planned arena (runtime/planner.hpp). Off: every tensor comes from the heap (for
  // comparing results and memory); the plan is still made for the memory limit.
  bool memory_plan = true;
  // Tensors the plan cannot place (sizes that depend on data: NonZero, Loop bodies, ...) come
  // from a per-session pool of blocks reused across runs; at most this many bytes of idle
  // blocks are kept (blocks returned beyond it are freed at once). 0 = keep none.
  uint64_t dynamic_pool_bytes = uint64_t(64) << 20;
  // Winograd convolution for the 3x3 stride-1 convs where it is faster than the direct kernels.
  // Its transformed weights replace the originals but are 1.8x (F(2x2)) to 4x (F(4x4)) their
  // size: false keeps every conv on the direct / im2col kernels, whose packed weights are the
  // originals' size, for the smallest memory at some speed (ResNet-50 on an AMD Zen 4, 1 thread:
  // peak RSS 170 -> 118 MB, run 66 -> 79 ms). BASALT_WINOGRAD=0 in the environment turns it off
  // for every session; false here also overrides BASALT_WINOGRAD=2/4.
  bool winograd = true;

  // Free dimensions fixed at load (onnxruntime's add_free_dimension_override_by_name /
  // _by_denotation): every graph-input dim whose dim_param (or denotation, e.g. "DATA_BATCH") is a
  // key becomes that fixed size, so shape inference and the optimizer see it; a run with another
  // size is then an InvalidArgument error. A key no graph input uses is an InvalidArgument error.
  std::map<std::string, int64_t> free_dimensions_by_name, free_dimensions_by_denotation;
  // Initializers replaced at load by the caller's tensors (onnxruntime's add_initializer): each
  // must name an initializer of the main graph and have its dtype and shape. The tensors are
  // used as they are (a view stays a view): the caller keeps their memory alive and unchanged.
  std::vector<std::pair<std::string, Tensor>> initializers;
  // When set, the model as optimized (before kernels pack weights) is written there as ONNX at
  // load (onnxruntime's optimized_model_filepath); see src/onnx/writer.hpp for what it keeps.
  std::string optimized_model_path;
  // Flush denormal results to zero and read denormal inputs as zero during runs (x86 MXCSR FTZ +
  // DAZ on the calling thread and, through the pool, on every worker; onnxruntime's
  // session.set_denormal_as_zero). Faster where denormals occur; results differ only there.
  bool denormals_as_zero = false;

  // The one check of these options (the C API, the Python module and the CLI all come through
  // it): throws Error(InvalidArgument) naming the first field out of range. Sessions call it
  // before they load anything.
  void validate() const;
};

// Memory figures of a session (Session::memory_stats).
struct MemoryStats {
  uint64_t weights_bytes = 0;         // constant tensors of the model
  uint64_t weights_in_place_bytes = 0;  // of which used in place from the mapped file
  uint64_t packed_weights_bytes = 0;  // copies kernels made at load (packed layouts)
  // Plan cache (shape-keyed): counters since the session was created.
  uint64_t plan_cache_hits = 0, plan_cache_misses = 0, plan_cache_evictions = 0;
  uint64_t plan_cache_entries = 0;    // plans held now
  uint64_t plan_cache_bytes = 0;      // resident bytes the cached plans keep now
  uint64_t arena_bytes = 0;           // arena memory allocated now (all cached arenas)
  uint64_t last_run_arena_bytes = 0;  // planned arena of the last run
  uint64_t peak_run_bytes = 0;        // largest planned peak (arena + workspaces) of any run
  uint64_t memory_limit = 0;          // 0 = none
  uint64_t arena_maps = 0;            // arenas mapped since the session was created
  uint64_t arena_grows = 0;           // idle arenas grown in place for a larger plan (pages kept)
  uint64_t heap_fallbacks = 0;        // planned tensors that came from the heap (prediction missed)
  uint64_t unplanned_alias_runs = 0;  // runs that left the arena early (a kernel kept an unplanned view)
  uint64_t last_run_heap_bytes = 0;   // bytes the last run took from the heap via KernelContext
  // The pool of tensors whose size depends on data (SessionOptions::dynamic_pool_bytes).
  uint64_t dynamic_pool_hits = 0, dynamic_pool_misses = 0;  // requests served by an idle block / new blocks
  uint64_t dynamic_pool_frees = 0;       // blocks given back to the OS (over the bound or trimmed)
  uint64_t dynamic_pool_held_bytes = 0;  // idle blocks held now (at most dynamic_pool_bytes)
  uint64_t dynamic_pool_in_use_bytes = 0;  // blocks tensors hold now
  uint64_t dynamic_pool_peak_bytes = 0;  // largest idle + in use so far
};

// The session's thread pool (Session::pool_stats): counters since the pool was created (for a
// shared pool, over every session using it), to tell a busy machine from a slow kernel.
struct ThreadPoolStats {
  int threads = 1;               // threads working on a parallel_for, the caller included
  int spin_us = 0;               // bounded spin before sleeping
  bool shared = false;           // the process-wide pool (SessionOptions::shared_pool)
  uint64_t busy_detections = 0;  // times the pool found another process wanting the cores
  uint64_t preempted_spins = 0;  // spinning pool threads found descheduled
  uint64_t apart_moves = 0;      // times the workers were moved off the caller's core (busy machine)
};

// The memory plan of one input-shape signature (Session::plan_memory, `basalt plan`).
struct MemoryPlanReport {
  std::string key;                    // canonical input signature
  uint64_t arena_bytes = 0;           // one arena holds every planned intermediate and workspace
  uint64_t tensor_bytes = 0;          // the planned intermediates before reuse
  uint64_t workspace_bytes = 0;       // largest kernel workspace
  uint64_t inputs_bytes = 0, outputs_bytes = 0;
  uint64_t weights_bytes = 0, packed_weights_bytes = 0;
  uint64_t peak_bytes = 0;            // weights + packed + arena + inputs + outputs
  int planned_tensors = 0, aliased_tensors = 0;
  int in_place_tensors = 0;           // planned tensors written over their input's block
  int concat_in_place = 0;            // Concats whose inputs are written at their place in the output
  std::vector<std::string> dynamic_values;  // sizes that depend on data: not in peak_bytes
};

// The model's own description (Session::metadata; onnxruntime's ModelMetadata).
struct ModelMetadata {
  std::string producer_name, producer_version, domain;
  std::string description;        // ModelProto.doc_string
  std::string graph_name, graph_description;  // the main graph's name and doc_string
  int64_t version = 0;            // ModelProto.model_version
  std::vector<std::pair<std::string, std::string>> custom;  // metadata_props, in file order
};

// Per-run options (Session::run, run_into).
struct RunOptions {
  // Set to true from any thread to stop the run before its next node (of any graph, subgraphs
  // included): run() then throws Error(Cancelled) and the session stays usable. It is read, never
  // reset; null = the run cannot be stopped.
  const std::atomic<bool>* terminate = nullptr;
};

// Metadata of a graph input or output.
struct IoInfo {
  std::string name;
  std::string kind;              // "tensor", "sequence", "optional", "map", "unknown"
  DType dtype = DType::Undefined;
  bool has_shape = false;
  std::vector<int64_t> shape;    // -1 for a symbolic/unknown dim
  std::vector<std::string> dim_params;  // symbolic names ("" for fixed/unknown dims)
  bool has_default = false;      // input backed by an initializer (may be omitted)
  std::string type_string() const;      // "tensor(float)" like onnxruntime
};

// The seed of random ops (RandomNormal, RandomUniform[Like], Bernoulli, Multinomial) that have no
// `seed` attribute, for every session of the process (onnxruntime's set_seed): each run of such
// an op then draws the same values. Before any call, they are seeded from the OS.
void set_default_random_seed(int64_t seed);

class Session {
 public:
  static std::unique_ptr<Session> open(const std::string& path, const SessionOptions& opts = {});
  static std::unique_ptr<Session> from_bytes(const void* data, size_t size, const SessionOptions& opts = {});
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  const std::vector<IoInfo>& inputs() const;
  const std::vector<IoInfo>& outputs() const;

  // Runs the model. `feeds` maps input names to values; every input without a default must be
  // given. `output_names` selects outputs (empty = all, in graph order). Inputs are checked
  // against the model: a wrong name, dtype, rank or fixed dim is an InvalidArgument error.
  // Returned tensors belong to the caller: none shares storage with a weight, an input or
  // another output (pass-through outputs are copied), so writing into them is safe.
  std::vector<Value> run(const std::vector<std::pair<std::string, Value>>& feeds,
                         const std::vector<std::string>& output_names = {}, const RunOptions& run_options = {}) const;

  // IO binding: runs the model and writes the outputs named in `outputs` into the caller's tensors
  // (e.g. Tensor::view of preallocated buffers). Each must have exactly the dtype and shape the run
  // produces, else InvalidArgument naming the output (nothing else is written then). A kernel that
  // produces a bound output writes straight into the buffer; an output forwarded from elsewhere
  // (Identity of an input, a weight) is copied in. String outputs cannot be bound.
  // Returns every output in graph order: a bound one as the caller's tensor, the others as run()
  // returns them (so a caller may bind some outputs and take the rest).
  std::vector<Value> run_into(const std::vector<std::pair<std::string, Value>>& feeds,
                              const std::vector<std::pair<std::string, Tensor>>& outputs,
                              const RunOptions& run_options = {}) const;

  // Counters and sizes; cheap, thread-safe.
  MemoryStats memory_stats() const;
  ThreadPoolStats pool_stats() const;

  // Plans the memory of a run with these input shapes without running (and caches the plan).
  // Inputs not named keep their default (initializer) or their fixed dims; an input with
  // symbolic dims must be named. dtypes are the model's.
  MemoryPlanReport plan_memory(const std::map<std::string, Shape>& shapes) const;

  const SessionOptions& options() const;
  const ModelMetadata& metadata() const;

  // When profiling is on: the wall-clock time the profile starts at, in ns since the Unix epoch
  // (onnxruntime's get_profiling_start_time_ns); 0 when profiling is off.
  int64_t profiling_start_ns() const;

  // Writes what was recorded so far as a Chrome trace to `path` (default: options().profile_path)
  // and returns the path written; the destructor then writes nothing. Throws InvalidArgument when
  // profiling is off or no path is known, Io when the file cannot be written.
  std::string end_profiling(const std::string& path = {}) const;

 private:
  Session() = default;
  void make_outputs_private(std::vector<Value>& outs, const std::vector<Value>& ins) const;
  std::vector<Value> run_impl(const std::vector<std::pair<std::string, Value>>& feeds,
                              const std::vector<std::string>& output_names, const std::vector<Tensor>* bound,
                              const RunOptions& ro) const;
  friend struct SessionAccess;  // internal access (src/runtime/session_access.hpp): model, profiler
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace basalt
