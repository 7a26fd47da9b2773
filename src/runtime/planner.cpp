#include "runtime/planner.hpp"

#include "ops/kernel.hpp"
#include "runtime/shape_infer.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <unordered_set>

namespace basalt {

static uint64_t align_up(uint64_t v) { return (v + kArenaAlign - 1) / kArenaAlign * kArenaAlign; }

std::vector<uint64_t> plan_offsets(std::span<const PlanBlock> blocks, uint64_t* total, bool naive) {
  std::vector<uint64_t> off(blocks.size(), 0);
  uint64_t end = 0;
  if (naive) {
    for (size_t i = 0; i < blocks.size(); ++i) {
      off[i] = end;
      end += align_up(blocks[i].bytes);
    }
    if (total) *total = end;
    return off;
  }
  // Largest first; each block goes into the smallest gap between blocks already placed whose
  // lifetimes overlap its own (best fit), or above all of them.
  std::vector<size_t> order(blocks.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (blocks[a].bytes != blocks[b].bytes) return blocks[a].bytes > blocks[b].bytes;
    return blocks[a].first < blocks[b].first;
  });
  // placed_at[t]: blocks already placed that are live at step t. A query walks the steps of the
  // new block's lifetime, so a long chain of short-lived tensors costs O(n), not O(n^2).
  int t0 = 0, t1 = -1;
  for (const PlanBlock& b : blocks) {
    t0 = std::min(t0, b.first);
    t1 = std::max(t1, b.last);
  }
  std::vector<std::vector<size_t>> placed_at(size_t(t1 - t0 + 1));
  std::vector<size_t> live, seen(blocks.size(), ~size_t(0));
  for (size_t bi : order) {
    const PlanBlock& b = blocks[bi];
    uint64_t need = align_up(b.bytes);
    live.clear();
    for (int t = b.first; t <= b.last; ++t)
      for (size_t p : placed_at[size_t(t - t0)])
        if (seen[p] != bi) {
          seen[p] = bi;
          live.push_back(p);
        }
    std::sort(live.begin(), live.end(), [&](size_t x, size_t y) { return off[x] < off[y]; });
    uint64_t prev = 0, best = ~uint64_t(0), best_gap = ~uint64_t(0);
    for (size_t p : live) {
      if (off[p] > prev) {
        uint64_t gap = off[p] - prev;
        if (gap >= need && gap < best_gap) {
          best_gap = gap;
          best = prev;
        }
      }
      prev = std::max(prev, off[p] + align_up(blocks[p].bytes));
    }
    off[bi] = best != ~uint64_t(0) ? best : prev;
    end = std::max(end, off[bi] + need);
    for (int t = b.first; t <= b.last; ++t) placed_at[size_t(t - t0)].push_back(bi);
  }
  if (total) *total = end;
  return off;
}

std::string shape_key(std::span<const std::pair<DType, Shape>> inputs) {
  std::string k;
  for (const auto& [dt, s] : inputs) {
    if (!s.empty() && s[0] < 0) {
      k += "-;";
      continue;
    }
    k += std::to_string(int(dt));
    k += shape_str(s);
    k += ';';
  }
  return k;
}

namespace {

struct UnionFind {
  std::vector<int> p;
  explicit UnionFind(size_t n) : p(n) { std::iota(p.begin(), p.end(), 0); }
  int find(int x) {
    while (p[size_t(x)] != x) x = p[size_t(x)] = p[size_t(p[size_t(x)])];
    return x;
  }
  void unite(int a, int b) { p[size_t(find(a))] = find(b); }
};

// Kernels of these ops always return (a reshaped view of) input 0: their output needs no memory
// of its own, and input 0's storage must live as long as the output.
const std::unordered_set<std::string>& view_ops() {
  static const std::unordered_set<std::string> s = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"};
  return s;
}
// These may return input 0 unchanged in a special case (identity permutation, same shape, one
// input, same dtype, full slice): the output gets its own block, and input 0 is kept alive
// as long as the output in case the kernel passed it through.
const std::unordered_set<std::string>& maybe_view_ops() {
  static const std::unordered_set<std::string> s = {"Dropout", "Transpose", "Expand", "Concat", "Cast", "CastLike",
                                                    "Slice",   "Split",     "Sum",    "Max",    "Min",  "Mean"};
  return s;
}
// Outputs of these may hold any input (sequences, optionals, control flow passing values through).
bool holds_inputs(const Node& n) {
  const std::string& o = n.op_type;
  return o == "If" || o == "Loop" || o == "Scan" || o.rfind("Sequence", 0) == 0 || o.rfind("Optional", 0) == 0 ||
         o == "ConcatFromSequence" || o == "SplitToSequence";
}

}  // namespace

MemoryPlan build_memory_plan(const Graph& g, std::span<const std::pair<DType, Shape>> inputs, int threads,
                             uint64_t weights_bytes, uint64_t packed_weights_bytes) {
  MemoryPlan plan;
  plan.key = shape_key(inputs);
  plan.weights_bytes = weights_bytes;
  plan.packed_weights_bytes = packed_weights_bytes;
  std::vector<InferredValue> iv = infer_shapes(g, inputs);
  const int N = int(g.nodes.size());
  const size_t V = g.values.size();

  std::vector<int> def(V, -1), last(V, N);
  for (int ni = 0; ni < N; ++ni)
    for (int o : g.nodes[size_t(ni)].outputs)
      if (o >= 0) def[size_t(o)] = ni;
  for (int ni = 0; ni < N; ++ni)
    for (int v : g.free_after[size_t(ni)]) last[size_t(v)] = ni;

  UnionFind uf(V);
  std::vector<bool> is_view(V, false);
  for (const Node& n : g.nodes) {
    if (n.inputs.empty()) continue;
    int in0 = n.inputs[0];
    if (view_ops().count(n.op_type)) {
      if (in0 >= 0 && !n.outputs.empty() && n.outputs[0] >= 0) {
        uf.unite(n.outputs[0], in0);
        is_view[size_t(n.outputs[0])] = true;
      }
    } else if (maybe_view_ops().count(n.op_type)) {
      if (in0 < 0) continue;
      for (int o : n.outputs) {
        if (o < 0) continue;
        const InferredValue &a = iv[size_t(o)], &b = iv[size_t(in0)];
        // A pass-through needs equal dtype and shape; known to differ -> no alias possible.
        if (a.known() && b.known() && (a.dtype != b.dtype || a.shape != b.shape)) continue;
        uf.unite(o, in0);
      }
    } else if (holds_inputs(n)) {
      for (int o : n.outputs) {
        if (o < 0) continue;
        for (int i : n.inputs)
          if (i >= 0) uf.unite(o, i);
        for (int i : n.implicit_inputs) uf.unite(o, i);
      }
    }
  }
  std::vector<int> group_end(V, -1);
  for (size_t v = 0; v < V; ++v) {
    int r = uf.find(int(v));
    group_end[size_t(r)] = std::max(group_end[size_t(r)], last[v]);
  }
  plan.reserved_until.assign(V, N);
  for (size_t v = 0; v < V; ++v) plan.reserved_until[v] = group_end[size_t(uf.find(int(v)))];

  std::vector<bool> is_output(V, false);
  for (int o : g.outputs) is_output[size_t(o)] = true;

  plan.value_slot.assign(V, {});
  plan.workspace_slot.assign(size_t(N), {});
  std::vector<PlanBlock> blocks;
  std::vector<std::pair<bool, size_t>> owner;  // (is workspace, value id or node index)

  for (size_t i = 0; i < g.inputs.size() && i < inputs.size(); ++i) {
    const auto& [dt, s] = inputs[i];
    if (!s.empty() && s[0] < 0) continue;
    plan.inputs_bytes += uint64_t(shape_numel(s)) * dtype_size(dt);
  }
  for (int o : g.outputs) {
    const InferredValue& x = iv[size_t(o)];
    if (x.known()) plan.outputs_bytes += x.bytes();
  }
  for (size_t v = 0; v < V; ++v) {
    if (def[v] < 0) continue;  // inputs, constants, captures
    const InferredValue& x = iv[v];
    if (!x.known()) {
      plan.dynamic_values.push_back(g.values[v].name);
      if (is_output[v]) plan.dynamic_outputs.push_back(g.values[v].name);
      continue;
    }
    if (is_output[v]) {  // returned to the caller: a heap tensor, counted in outputs_bytes
      plan.value_slot[v].in_peak = true;
      continue;
    }
    if (is_view[v]) {
      ++plan.aliased_tensors;
      continue;
    }
    if (x.dtype == DType::String || dtype_size(x.dtype) == 0) continue;
    auto& slot = plan.value_slot[v];
    slot.dtype = x.dtype;
    slot.shape = x.shape;
    slot.bytes = x.bytes();
    blocks.push_back({std::max<uint64_t>(slot.bytes, 1), def[v], std::max(def[v], plan.reserved_until[v])});
    owner.push_back({false, v});
    plan.tensor_bytes += align_up(std::max<uint64_t>(slot.bytes, 1));
    ++plan.planned_tensors;
  }
  std::vector<Shape> shapes;
  for (int ni = 0; ni < N; ++ni) {
    const Node& n = g.nodes[size_t(ni)];
    if (!n.kernel) continue;
    shapes.clear();
    bool ok = true;
    for (int i : n.inputs) {
      if (i < 0) {
        shapes.emplace_back();
        continue;
      }
      if (!iv[size_t(i)].known()) ok = false;
      shapes.push_back(iv[size_t(i)].shape);
    }
    if (!ok) continue;
    size_t ws = n.kernel->workspace_bytes(shapes, threads);
    if (ws == 0) continue;
    plan.workspace_slot[size_t(ni)].bytes = ws;
    plan.workspace_bytes = std::max<uint64_t>(plan.workspace_bytes, ws);
    blocks.push_back({ws, ni, ni});
    owner.push_back({true, size_t(ni)});
  }
  uint64_t total = 0;
  std::vector<uint64_t> off = plan_offsets(blocks, &total);
  for (size_t b = 0; b < blocks.size(); ++b) {
    if (owner[b].first) plan.workspace_slot[owner[b].second].offset = off[b];
    else plan.value_slot[owner[b].second].offset = off[b];
  }
  plan.arena_bytes = total;
  plan.peak_bytes = weights_bytes + packed_weights_bytes + plan.arena_bytes + plan.inputs_bytes + plan.outputs_bytes;
  return plan;
}

int ArenaRun::node_index(const Node& n) const {
  if (!graph || graph->nodes.empty()) return -1;
  const Node* b = graph->nodes.data();
  if (&n < b || &n >= b + graph->nodes.size()) return -1;
  return int(&n - b);
}

void* ArenaRun::output(const Node& n, int i, DType dt, const Shape& shape) {
  int ni = node_index(n);
  if (ni < 0 || size_t(i) >= n.outputs.size() || n.outputs[size_t(i)] < 0) return nullptr;
  const MemoryPlan::Slot& s = plan->value_slot[size_t(n.outputs[size_t(i)])];
  if (s.offset == MemoryPlan::kNone) return nullptr;
  if (abandoned || !base || s.dtype != dt || s.shape != shape) {
    if (std::getenv("BASALT_PLAN_DEBUG"))
      std::fprintf(stderr, "plan miss: %s output %d: planned %s %s, got %s %s%s\n", n.describe().c_str(), i,
                   dtype_name(s.dtype), shape_str(s.shape).c_str(), dtype_name(dt), shape_str(shape).c_str(),
                   abandoned ? " (arena abandoned)" : "");
    ++fallbacks;
    return nullptr;
  }
  return base + s.offset;
}

void* ArenaRun::adopt(const Node& n, int i, DType dt, const Shape& shape) {
  int ni = node_index(n);
  if (ni < 0 || abandoned || !base || size_t(i) >= n.outputs.size() || n.outputs[size_t(i)] < 0) return nullptr;
  const MemoryPlan::Slot& s = plan->value_slot[size_t(n.outputs[size_t(i)])];
  if (s.offset == MemoryPlan::kNone || s.dtype != dt || s.shape != shape || dt == DType::String) return nullptr;
  ++adopted;
  return base + s.offset;
}

void* ArenaRun::workspace(const Node& n, size_t bytes) {
  int ni = node_index(n);
  if (ni < 0) return nullptr;
  const MemoryPlan::Slot& s = plan->workspace_slot[size_t(ni)];
  if (s.offset == MemoryPlan::kNone) return nullptr;
  if (abandoned || !base || bytes > s.bytes) {
    ++fallbacks;
    return nullptr;
  }
  return base + s.offset;
}

void ArenaRun::note_heap(const Node& n, int i, uint64_t bytes) {
  if (node_index(n) >= 0 && size_t(i) < n.outputs.size() && n.outputs[size_t(i)] >= 0 &&
      plan->value_slot[size_t(n.outputs[size_t(i)])].in_peak)
    return;
  heap_bytes += bytes;
  if (limit && plan && plan->peak_bytes + heap_bytes > limit)
    n.fail(ErrorCode::MemoryLimit, "the run exceeds the memory limit: planned peak " + std::to_string(plan->peak_bytes) +
                                       " bytes + " + std::to_string(heap_bytes) +
                                       " bytes of unplanned tensors > limit of " + std::to_string(limit) + " bytes");
}

std::shared_ptr<const MemoryPlan> PlanCache::get(const std::string& key, const std::function<MemoryPlan()>& build) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(key);
    if (it != index_.end()) {
      ++st_.hits;
      lru_.splice(lru_.begin(), lru_, it->second);
      return *it->second;
    }
    ++st_.misses;
  }
  auto plan = std::make_shared<const MemoryPlan>(build());
  if (max_entries_ == 0 || plan->arena_bytes > max_bytes_) return plan;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return plan;
  lru_.push_front(plan);
  index_[key] = lru_.begin();
  ++st_.entries;
  st_.bytes += plan->arena_bytes;
  while (st_.entries > max_entries_ || st_.bytes > max_bytes_) {
    const auto& victim = lru_.back();
    st_.bytes -= victim->arena_bytes;
    --st_.entries;
    ++st_.evictions;
    index_.erase(victim->key);
    lru_.pop_back();
  }
  return plan;
}

PlanCache::Stats PlanCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

}  // namespace basalt
