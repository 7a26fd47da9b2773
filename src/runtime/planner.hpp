// The static memory plan of one input-shape signature.
//
//   plan_offsets   - a pure function from (sizes, lifetimes) to arena offsets: best-fit, 64-byte
//                    aligned, largest first; `naive` gives every block its own offsets (for
//                    debugging and for tests that compare the two).
//   build_memory_plan - shape inference (runtime/shape_infer.hpp) over the top-level graph, then
//                    the size and lifetime of every statically known intermediate and of every
//                    kernel workspace, then plan_offsets. An element-wise node whose input dies
//                    at that node writes its output over the input's block (in place; see
//                    in_place_inputs in planner.cpp for the ops and why each kernel is safe).
//                    Graph inputs and outputs and tensors whose shape depends on data stay out
//                    of the arena (outputs belong to the caller; dynamic tensors come from the
//                    session's DynamicPool at run time, runtime/dynamic_pool.hpp).
//   ArenaRun       - what one run uses: the plan plus the arena it runs in. KernelContext asks it
//                    for output and workspace memory; every answer is checked against the plan
//                    (dtype, shape, size), and anything unplanned or mismatched comes from the
//                    heap and is counted, so a wrong prediction never gives a wrong result.
#pragma once

#include "graph/graph.hpp"
#include "core/arena.hpp"
#include "core/dynamic_pool.hpp"

#include <basalt/tensor.hpp>

#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <span>
#include <string>
#include <vector>

namespace basalt {

constexpr uint64_t kArenaAlign = 64;

struct PlanBlock {
  uint64_t bytes = 0;
  int first = 0, last = 0;  // node indices, inclusive: the block is live from first to last
};

// Offsets for `blocks` such that blocks whose lifetimes overlap never overlap in memory.
// Returns one offset per block (multiples of kArenaAlign) and sets *total to the arena size.
std::vector<uint64_t> plan_offsets(std::span<const PlanBlock> blocks, uint64_t* total, bool naive = false);

struct MemoryPlan {
  static constexpr uint64_t kNone = ~uint64_t(0);
  struct Slot {
    uint64_t offset = kNone;  // kNone: not in the arena
    uint64_t bytes = 0;
    DType dtype = DType::Undefined;
    uint32_t dims_at = 0, rank = 0;  // the shape: dims[dims_at .. dims_at + rank)
    bool in_peak = false;     // a graph output of known size: already counted in peak_bytes
  };
  // The planned shapes, packed: one array for every slot instead of a heap block per value (a
  // cached plan keeps what it holds small; see held_bytes).
  std::vector<int64_t> dims;
  Shape slot_shape(const Slot& s) const { return Shape(dims.begin() + s.dims_at, dims.begin() + s.dims_at + s.rank); }
  bool slot_shape_is(const Slot& s, const Shape& shape) const {
    return shape.size() == s.rank && std::equal(shape.begin(), shape.end(), dims.begin() + s.dims_at);
  }
  std::string key;                   // the input signature (see shape_key)
  std::vector<Slot> value_slot;      // per top-level value
  std::vector<Slot> workspace_slot;  // per top-level node (dtype/shape unused)
  // Per value: the last node after which its storage may still be referenced (aliases such as
  // Reshape outputs extend it); the executor checks at that point that nothing else holds it.
  std::vector<int> reserved_until;
  // Per value: the input value whose block it reuses in place (its node reads that input and
  // writes this value over it, element by element), or -1. Such an output must be requested
  // with KernelContext::output_uninit: zero-filling it would destroy the input before the kernel
  // read it, so a zero-filled request for it is served from the heap instead (ArenaRun::output).
  std::vector<int> in_place_of;
  uint64_t arena_bytes = 0;          // the arena a run needs
  uint64_t tensor_bytes = 0;         // sum of planned tensors before reuse
  uint64_t workspace_bytes = 0;      // largest single workspace (they live one node each)
  uint64_t inputs_bytes = 0, outputs_bytes = 0;  // outputs: those with a known size
  uint64_t weights_bytes = 0, packed_weights_bytes = 0;
  uint64_t peak_bytes = 0;           // weights + packed + arena + inputs + outputs
  int planned_tensors = 0, aliased_tensors = 0;
  int in_place_tensors = 0;          // planned tensors that reuse their input's block
  int concat_in_place = 0;           // Concats whose inputs are written into the output's block
  std::vector<std::string> dynamic_values;  // names of values whose size depends on data
  std::vector<std::string> dynamic_outputs; // graph outputs among them
  // Bytes this plan keeps resident while it is cached: the struct, every vector's and string's
  // heap block as the allocator sizes it (core/pages.hpp, heap_block_bytes). Set by
  // build_memory_plan; what PlanCache counts against its byte bound.
  uint64_t held_bytes = 0;
  uint64_t compute_held_bytes() const;
};

// Canonical key of an input signature: per graph input, its dtype and exact dims (or "omitted").
// Exact bytes, compared whole: never a hash.
std::string shape_key(std::span<const std::pair<DType, Shape>> inputs);

// inputs: one (dtype, shape) per g.inputs entry (see infer_shapes for omitted inputs).
// in_place = false gives every planned tensor its own block (for comparisons; the environment
// variable BASALT_PLAN_IN_PLACE=0 turns it off for a whole process).
MemoryPlan build_memory_plan(const Graph& g, std::span<const std::pair<DType, Shape>> inputs, int threads,
                             uint64_t weights_bytes, uint64_t packed_weights_bytes, bool in_place = true);

// The inputs of node n (indices, preferred first) whose arena block its output 0 may take over
// when the input dies at n: the kernel's contract for running in place. `in`/`out`: the inferred
// dtype and shape of n's inputs and of output 0 (an omitted input is {Undefined, {-1}}, one whose
// shape is not known {Undefined, {}}). Only inputs of exactly the output's dtype and
// shape are listed (never a broadcast operand).
std::vector<int> in_place_inputs(const Node& n, std::span<const std::pair<DType, Shape>> in,
                                 const std::pair<DType, Shape>& out);

// One run's view of its plan and arena (see the header comment). Single-threaded use: the node
// loop of one run.
struct ArenaRun {
  const MemoryPlan* plan = nullptr;
  const Graph* graph = nullptr;       // the planned (top-level) graph
  char* base = nullptr;               // the arena (null when the plan needs none)
  uint64_t size = 0;
  std::shared_ptr<const void> keep;   // held by every tensor viewing the arena
  bool abandoned = false;             // an unplanned alias was found: heap for the rest of the run
  uint64_t limit = 0;                 // memory limit (0 = none) for heap allocations of this run
  uint64_t heap_bytes = 0;            // bytes this run took from the heap through KernelContext
  uint64_t fallbacks = 0;             // planned tensors that came from the heap (mismatch/abandon)
  uint64_t adopted = 0;               // heap outputs of kernels moved into their planned slot
  // The session's pool for tensors without a slot (runtime/dynamic_pool.hpp); null = the heap.
  DynamicPool* pool = nullptr;

  // Index of `n` in the planned graph, or -1 when it belongs to a subgraph.
  int node_index(const Node& n) const;
  // Memory for output i of node n with this dtype and shape, or null (then use the heap).
  // `zero`: the caller will zero-fill it (KernelContext::output); an in-place slot is refused then.
  void* output(const Node& n, int i, DType dt, const Shape& shape, bool zero = false);
  // The planned slot of output i of node n when a kernel made that output on the heap itself
  // (set_output) with the planned dtype and shape: the executor moves it there. Null otherwise.
  void* adopt(const Node& n, int i, DType dt, const Shape& shape);
  // Planned workspace of node n when it holds `bytes`, or null.
  void* workspace(const Node& n, size_t bytes);
  // Called for every heap allocation of `bytes` for output i of node n (i = -1: a workspace);
  // throws MemoryLimit when the run would exceed the limit.
  void note_heap(const Node& n, int i, uint64_t bytes);
  // A tensor from the pool for output i of node n when the plan has no slot for it (its size
  // depends on data, n is inside a subgraph, or it is a graph output, which the caller then holds
  // until it lets go); an undefined Tensor otherwise (then use the heap). Checked against the memory limit
  // like a heap tensor; idle pool blocks count too and are trimmed to stay within the limit.
  Tensor dynamic(const Node& n, int i, DType dt, const Shape& shape);
  // Pool memory for a workspace of a node without a planned one; null when there is no pool.
  std::shared_ptr<void> dynamic_workspace(const Node& n, uint64_t bytes);
  // With a memory limit: frees idle pool blocks so that the plan, this run's heap tensors and
  // the idle blocks together stay within it.
  void trim_pool();
  bool contains(const void* p) const { return base && p >= base && p < base + size; }
};

// Plans by input signature: an LRU bounded by entries and by bytes: the resident bytes the cached
// plans keep (MemoryPlan::held_bytes plus the cache's own nodes), not the arenas they describe
// (one arena serves every plan; core/arena.hpp). Keys are compared whole (shape_key). Thread-safe; plans are built outside the lock, so
// two threads missing on one key at once may both build it (the second insert is dropped).
class PlanCache {
 public:
  PlanCache(size_t max_entries, uint64_t max_bytes) : max_entries_(max_entries), max_bytes_(max_bytes) {}
  // The cached plan for `key`, or build() (cached when it fits the bounds).
  std::shared_ptr<const MemoryPlan> get(const std::string& key, const std::function<MemoryPlan()>& build);
  struct Stats {
    uint64_t hits = 0, misses = 0, evictions = 0, entries = 0, bytes = 0;
  };
  Stats stats() const;
  static uint64_t entry_bytes(const MemoryPlan& p);  // what one cached plan counts

 private:
  using List = std::list<std::shared_ptr<const MemoryPlan>>;  // front = most recently used
  mutable std::mutex mu_;
  size_t max_entries_;
  uint64_t max_bytes_;
  List lru_;
  std::unordered_map<std::string, List::iterator> index_;
  Stats st_;
};

}  // namespace basalt
