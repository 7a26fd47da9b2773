#include "runtime/planner.hpp"

#include "core/config.hpp"
#include "core/pages.hpp"
#include "ops/kernel.hpp"
#include "runtime/shape_infer.hpp"
#include "core/storage.hpp"

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

// The op's aliasing (ops/op_traits.hpp): View outputs need no memory of their own and keep input
// 0's storage alive as long as they live; MaybeView outputs get their own block, and input 0 is
// kept alive as long as the output in case the kernel passed it through; HoldsInputs outputs
// (sequences, optionals, control flow) may hold any input.
Alias alias_of(const Node& n) {
  const OpTraits* t = op_traits(n);
  return t ? t->alias_kind : Alias::None;
}
bool view_op(const Node& n) { return alias_of(n) == Alias::View; }
bool maybe_view_op(const Node& n) { return alias_of(n) == Alias::MaybeView; }
bool holds_inputs(const Node& n) { return alias_of(n) == Alias::HoldsInputs; }

// Node attribute as an int, or `def` when absent or not an int.
int64_t attr_or(const Node& n, const char* name, int64_t def) { return n.has_attr(name) ? n.attr_int(name, def) : def; }

}  // namespace

// The in-place contract is declared op by op (ops/shape_fns.cpp, namespace in_place, says what
// a kernel signs); only float32 outputs take part.
std::vector<int> in_place_inputs(const Node& n, std::span<const std::pair<DType, Shape>> in,
                                 const std::pair<DType, Shape>& out) {
  if (out.first != DType::Float || n.outputs.empty()) return {};
  const OpTraits* t = op_traits(n);
  return t && t->in_place_fn ? t->in_place_fn(n, in, out) : std::vector<int>{};
}

namespace {

// The steps of build_memory_plan over one graph and one input signature. Each step reads what the
// ones before it computed: lifetimes (def, last), alias groups (views, pass-throughs, subgraph
// holders) and their ends, the planned slots, the in-place chains, Concat in place, then one block
// per host and the offsets.
struct PlanBuilder {
  const Graph& g;
  MemoryPlan& plan;
  std::vector<InferredValue> iv;
  int N;
  size_t V;
  std::vector<int> def, last;  // producer node of each value; node after which it is freed
  UnionFind uf;
  std::vector<bool> is_view, planned;
  std::vector<int> group_end;  // per alias-group root: the last node any member is used at
  std::vector<int> host;       // the value whose block v lives in (-1: none)
  std::vector<uint64_t> sub;   // v's byte offset inside its host's block

  PlanBuilder(const Graph& graph, MemoryPlan& p, std::span<const std::pair<DType, Shape>> inputs)
      : g(graph), plan(p), iv(infer_shapes(graph, inputs)), N(int(graph.nodes.size())), V(graph.values.size()),
        def(V, -1), last(V, N), uf(V), is_view(V, false), planned(V, false), group_end(V, -1), host(V, -1), sub(V, 0) {}

  bool alias_group_ends_at(int v, int ni) { return group_end[size_t(uf.find(v))] == ni; }

  void lifetimes() {
    for (int ni = 0; ni < N; ++ni)
      for (int o : g.nodes[size_t(ni)].outputs)
        if (o >= 0) def[size_t(o)] = ni;
    for (int ni = 0; ni < N; ++ni)
      for (int v : g.free_after[size_t(ni)]) last[size_t(v)] = ni;
  }

  void alias_groups() {
    for (const Node& n : g.nodes) {
      if (n.inputs.empty()) continue;
      int in0 = n.inputs[0];
      if (view_op(n)) {
        if (in0 >= 0 && !n.outputs.empty() && n.outputs[0] >= 0) {
          uf.unite(n.outputs[0], in0);
          is_view[size_t(n.outputs[0])] = true;
        }
      } else if (maybe_view_op(n)) {
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
    for (size_t v = 0; v < V; ++v) {
      int r = uf.find(int(v));
      group_end[size_t(r)] = std::max(group_end[size_t(r)], last[v]);
    }
    plan.reserved_until.assign(V, N);
    for (size_t v = 0; v < V; ++v) plan.reserved_until[v] = group_end[size_t(uf.find(int(v)))];
  }

  void io_bytes(std::span<const std::pair<DType, Shape>> inputs) {
    for (size_t i = 0; i < g.inputs.size() && i < inputs.size(); ++i) {
      const auto& [dt, s] = inputs[i];
      if (!s.empty() && s[0] < 0) continue;
      plan.inputs_bytes += uint64_t(shape_numel(s)) * dtype_size(dt);
    }
    for (int o : g.outputs) {
      const InferredValue& x = iv[size_t(o)];
      if (x.known()) plan.outputs_bytes += x.bytes();
    }
  }

  void slots() {
    std::vector<bool> is_output(V, false);
    for (int o : g.outputs) is_output[size_t(o)] = true;
    plan.value_slot.assign(V, {});
    plan.workspace_slot.assign(size_t(N), {});
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
      slot.dims_at = uint32_t(plan.dims.size());
      slot.rank = uint32_t(x.shape.size());
      plan.dims.insert(plan.dims.end(), x.shape.begin(), x.shape.end());
      slot.bytes = x.bytes();
      planned[v] = true;
      plan.tensor_bytes += align_up(std::max<uint64_t>(slot.bytes, 1));
      ++plan.planned_tensors;
    }
    plan.in_place_of.assign(V, -1);
    for (size_t v = 0; v < V; ++v)
      if (planned[v]) host[v] = int(v);
  }

  // In place, in node order so that chains (Add -> Relu -> Mul) share one block: output 0 of an
  // element-wise node takes the block of an input of the same dtype and shape that dies at this
  // node, when nothing else (a view, a pass-through, a subgraph) keeps that input's storage
  // beyond it (its alias group ends here).
  void in_place_chains() {
    // storage[v]: the planned value whose block holds v's data: v itself, or for a view
    // (Reshape, Flatten, ...) the planned value it views. An input that is a view is written
    // over like its storage: a view keeps the element order, so index i is the same byte.
    std::vector<int> storage(V, -1);
    for (size_t v = 0; v < V; ++v)
      if (planned[v]) storage[v] = int(v);
    std::vector<std::pair<DType, Shape>> in_shapes;
    for (int ni = 0; ni < N; ++ni) {
      const Node& n = g.nodes[size_t(ni)];
      if (view_op(n) && !n.inputs.empty() && n.inputs[0] >= 0 && !n.outputs.empty() &&
          n.outputs[0] >= 0 && is_view[size_t(n.outputs[0])])
        storage[size_t(n.outputs[0])] = storage[size_t(n.inputs[0])];
      if (!n.kernel || n.outputs.empty() || n.outputs[0] < 0 || !planned[size_t(n.outputs[0])]) continue;
      const int o = n.outputs[0];
      const MemoryPlan::Slot& os = plan.value_slot[size_t(o)];
      in_shapes.clear();
      for (int i : n.inputs) {
        if (i < 0) in_shapes.push_back({DType::Undefined, Shape{-1}});
        else if (!iv[size_t(i)].known()) in_shapes.push_back({DType::Undefined, Shape{}});
        else in_shapes.push_back({iv[size_t(i)].dtype, iv[size_t(i)].shape});
      }
      for (int k : in_place_inputs(n, in_shapes, {os.dtype, iv[size_t(o)].shape})) {
        const int x = n.inputs[size_t(k)];
        if (x < 0 || storage[size_t(x)] < 0 || !alias_group_ends_at(x, ni)) continue;
        const int sx = storage[size_t(x)];
        const MemoryPlan::Slot& xs = plan.value_slot[size_t(sx)];
        if (xs.dtype != os.dtype || xs.bytes != os.bytes) continue;
        host[size_t(o)] = host[size_t(sx)];
        plan.in_place_of[size_t(o)] = x;
        ++plan.in_place_tensors;
        break;
      }
    }
  }

  // Concat in place: when a Concat's pieces are contiguous byte ranges of its output (every dim
  // before the axis is 1: NCHW along C with N = 1) and every input is a planned tensor whose last
  // use is this Concat, the inputs' producers write straight into their ranges of the output's
  // block and the Concat copies nothing (its kernel skips a piece already in place). Chains nest:
  // DenseNet's Concat of a Concat puts a whole dense block in the last Concat's block.
  void concat_in_place() {
    std::vector<int> hosts;
    for (int ni = 0; ni < N; ++ni) {
      const Node& n = g.nodes[size_t(ni)];
      if (!n.domain.empty() || n.op_type != "Concat" || n.outputs.size() != 1 || n.inputs.size() < 2) continue;
      const int o = n.outputs[0];
      if (o < 0 || !planned[size_t(o)] || host[size_t(o)] != o) continue;
      if (!concat_pieces_fit(n, ni, hosts)) continue;
      uint64_t at = 0;
      for (size_t k = 0; k < n.inputs.size(); ++k) {
        const int h = hosts[k];
        for (size_t v = 0; v < V; ++v)
          if (host[v] == h) {  // v sits at sub[v] in h's block, which goes to `at` in o's
            host[v] = o;
            sub[v] += at;
          }
        at += plan.value_slot[size_t(n.inputs[k])].bytes;
      }
      ++plan.concat_in_place;
    }
  }

  // Whether Concat node n (index ni) can hold its inputs in place; hosts gets each input's host.
  bool concat_pieces_fit(const Node& n, int ni, std::vector<int>& hosts) {
    const int o = n.outputs[0];
    const MemoryPlan::Slot& os = plan.value_slot[size_t(o)];
    const Shape& oshape = iv[size_t(o)].shape;
    int64_t axis = attr_or(n, "axis", 1);
    if (axis < 0) axis += int64_t(oshape.size());
    if (axis < 0 || axis >= int64_t(oshape.size())) return false;
    for (int64_t d = 0; d < axis; ++d)
      if (oshape[size_t(d)] != 1) return false;
    // Each input: planned, alone in a block of its own size (possibly shared with the in-place
    // chain that produced it), last used here, not a repeat of another input.
    uint64_t at = 0;
    hosts.clear();
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const int x = n.inputs[k];
      if (x < 0 || !planned[size_t(x)] || !alias_group_ends_at(x, ni)) return false;
      const MemoryPlan::Slot& xs = plan.value_slot[size_t(x)];
      const int h = host[size_t(x)];
      const bool ok = xs.dtype == os.dtype && h >= 0 && host[size_t(h)] == h && sub[size_t(x)] == 0 &&
                      plan.value_slot[size_t(h)].bytes == xs.bytes && std::find(hosts.begin(), hosts.end(), h) == hosts.end() &&
                      at % kArenaAlign == 0;  // kernels may rely on 64-byte aligned tensors
      if (!ok) return false;
      hosts.push_back(h);
      at += xs.bytes;
    }
    return at == os.bytes;
  }

  // One block per host, live from the first producer of a value it holds to the end of the last;
  // one per kernel workspace, live for its node; then the offsets of all of them in one arena.
  void place(int threads) {
    std::vector<PlanBlock> blocks;
    std::vector<std::pair<bool, size_t>> owner;  // (is workspace, value id or node index)
    std::vector<int> block_end(V, -1), block_start(V, N);
    for (size_t v = 0; v < V; ++v)
      if (host[v] >= 0) {
        block_end[size_t(host[v])] = std::max({block_end[size_t(host[v])], def[v], plan.reserved_until[v]});
        block_start[size_t(host[v])] = std::min(block_start[size_t(host[v])], def[v]);
      }
    std::vector<size_t> block_of(V, ~size_t(0));
    for (size_t v = 0; v < V; ++v) {
      if (host[v] != int(v)) continue;
      block_of[v] = blocks.size();
      blocks.push_back({std::max<uint64_t>(plan.value_slot[v].bytes, 1), block_start[v], block_end[v]});
      owner.push_back({false, v});
    }
    std::vector<Shape> shapes;
    for (int ni = 0; ni < N; ++ni) {
      const size_t ws = workspace_of(ni, threads, shapes);
      if (ws == 0) continue;
      plan.workspace_slot[size_t(ni)].bytes = ws;
      plan.workspace_bytes = std::max<uint64_t>(plan.workspace_bytes, ws);
      blocks.push_back({ws, ni, ni});
      owner.push_back({true, size_t(ni)});
    }
    uint64_t total = 0;
    std::vector<uint64_t> off = plan_offsets(blocks, &total);
    for (size_t b = 0; b < blocks.size(); ++b)
      if (owner[b].first) plan.workspace_slot[owner[b].second].offset = off[b];
    for (size_t v = 0; v < V; ++v)
      if (host[v] >= 0) plan.value_slot[v].offset = off[block_of[size_t(host[v])]] + sub[v];
    plan.arena_bytes = total;
  }

  // The workspace node ni's kernel asks for at these input shapes (0 when one is unknown).
  size_t workspace_of(int ni, int threads, std::vector<Shape>& shapes) {
    const Node& n = g.nodes[size_t(ni)];
    if (!n.kernel) return 0;
    shapes.clear();
    for (int i : n.inputs) {
      if (i < 0) {
        shapes.emplace_back();
        continue;
      }
      if (!iv[size_t(i)].known()) return 0;
      shapes.push_back(iv[size_t(i)].shape);
    }
    return n.kernel->workspace_bytes(shapes, threads);
  }
};

}  // namespace

MemoryPlan build_memory_plan(const Graph& g, std::span<const std::pair<DType, Shape>> inputs, int threads,
                             uint64_t weights_bytes, uint64_t packed_weights_bytes, bool in_place) {
  in_place = in_place && env_config().plan_in_place;
  MemoryPlan plan;
  plan.key = shape_key(inputs);
  plan.weights_bytes = weights_bytes;
  plan.packed_weights_bytes = packed_weights_bytes;
  PlanBuilder b(g, plan, inputs);
  b.lifetimes();
  b.alias_groups();
  b.io_bytes(inputs);
  b.slots();
  if (in_place) {
    b.in_place_chains();
    b.concat_in_place();
  }
  b.place(threads);
  plan.peak_bytes = weights_bytes + packed_weights_bytes + plan.arena_bytes + plan.inputs_bytes + plan.outputs_bytes;
  plan.held_bytes = plan.compute_held_bytes();
  return plan;
}

namespace {
template <class T>
uint64_t vector_block(const std::vector<T>& v) {
  return v.capacity() ? heap_block_bytes(v.data(), v.capacity() * sizeof(T)) : 0;
}
uint64_t string_block(const std::string& s) {
  // Short strings live inside the object (no block of their own).
  return s.data() >= reinterpret_cast<const char*>(&s) && s.data() < reinterpret_cast<const char*>(&s + 1)
             ? 0
             : heap_block_bytes(s.data(), s.capacity() + 1);
}
}  // namespace

uint64_t MemoryPlan::compute_held_bytes() const {
  // The plan itself sits in its shared_ptr's control block (make_shared): one heap block, whose
  // start is not `this`, so it is sized from its request (a null pointer would count nothing).
  uint64_t b = (sizeof(MemoryPlan) + 16 + sizeof(size_t) + 15) & ~uint64_t(15);
  b += string_block(key);
  b += vector_block(value_slot) + vector_block(workspace_slot) + vector_block(reserved_until) +
       vector_block(in_place_of) + vector_block(dims) + vector_block(dynamic_values) + vector_block(dynamic_outputs);
  for (const auto& s : dynamic_values) b += string_block(s);
  for (const auto& s : dynamic_outputs) b += string_block(s);
  return b;
}

int ArenaRun::node_index(const Node& n) const {
  if (!graph || graph->nodes.empty()) return -1;
  const Node* b = graph->nodes.data();
  if (&n < b || &n >= b + graph->nodes.size()) return -1;
  return int(&n - b);
}

void* ArenaRun::output(const Node& n, int i, DType dt, const Shape& shape, bool zero) {
  int ni = node_index(n);
  if (ni < 0 || size_t(i) >= n.outputs.size() || n.outputs[size_t(i)] < 0) return nullptr;
  const int v = n.outputs[size_t(i)];
  const MemoryPlan::Slot& s = plan->value_slot[size_t(v)];
  if (s.offset == MemoryPlan::kNone) return nullptr;
  if (zero && size_t(v) < plan->in_place_of.size() && plan->in_place_of[size_t(v)] >= 0) {
    // The slot is the input's block: zero-filling it now would destroy the input before the
    // kernel reads it (a kernel breaking the in-place contract, see in_place_inputs).
    if (env_config().plan_debug)
      std::fprintf(stderr, "plan miss: %s output %d: in-place slot asked for zero-filled\n", n.describe().c_str(), i);
    ++fallbacks;
    return nullptr;
  }
  if (abandoned || !base || s.dtype != dt || !plan->slot_shape_is(s, shape)) {
    if (env_config().plan_debug)
      std::fprintf(stderr, "plan miss: %s output %d: planned %s %s, got %s %s%s\n", n.describe().c_str(), i,
                   dtype_name(s.dtype), shape_str(plan->slot_shape(s)).c_str(), dtype_name(dt), shape_str(shape).c_str(),
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
  if (s.offset == MemoryPlan::kNone || s.dtype != dt || !plan->slot_shape_is(s, shape) || dt == DType::String) return nullptr;
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

Tensor ArenaRun::dynamic(const Node& n, int i, DType dt, const Shape& shape) {
  if (!pool || dt == DType::String || dtype_size(dt) == 0) return {};
  int ni = node_index(n);
  if (ni >= 0) {
    if (size_t(i) >= n.outputs.size() || n.outputs[size_t(i)] < 0) return {};
    const int v = n.outputs[size_t(i)];
    if (plan->value_slot[size_t(v)].offset != MemoryPlan::kNone) return {};
    // Graph outputs come from the pool too: the caller holds the block while it uses the result,
    // and when it lets go the block returns for the next run, so a service that runs, reads and
    // drops its outputs gets them without new pages (fresh mmap'd outputs page-faulted on every
    // run). A caller that keeps outputs just makes the pool allocate new blocks; a block outlives
    // the session safely (see DynamicPool).
  }
  // Sizes the heap path would refuse (negative or overflowing dims) go there for its error.
  uint64_t numel = 1;
  for (int64_t d : shape) {
    if (d < 0 || (d > 0 && numel > (uint64_t(1) << 56) / uint64_t(d))) return {};
    numel *= uint64_t(d);
  }
  const uint64_t bytes = numel * dtype_size(dt);
  if (bytes > (uint64_t(1) << 56)) return {};
  note_heap(n, i, DynamicPool::size_class(bytes));
  DynamicPool::Block b = pool->acquire(bytes);
  trim_pool();
  Tensor t = Tensor::view(dt, shape, b.data, std::move(b.keep));
  t.storage()->exclusive = true;
  return t;
}

std::shared_ptr<void> ArenaRun::dynamic_workspace(const Node& n, uint64_t bytes) {
  if (!pool) return nullptr;
  note_heap(n, -1, DynamicPool::size_class(bytes));
  DynamicPool::Block b = pool->acquire(bytes);
  trim_pool();
  // Aliasing constructor: the pointer is the block, ownership is the block's keep-alive.
  return std::shared_ptr<void>(std::const_pointer_cast<void>(b.keep), b.data);
}

void ArenaRun::trim_pool() {
  if (!limit || !plan || !pool) return;
  const uint64_t used = plan->peak_bytes + heap_bytes;
  if (used >= limit) return;
  if (used + pool->stats().idle_bytes > limit) pool->trim(limit - used);
}

// What one cached plan costs: the plan's own blocks, plus the cache's list node, index node and
// the index's copy of the key.
uint64_t PlanCache::entry_bytes(const MemoryPlan& p) {
  constexpr uint64_t kNodes = 32 + 64;  // list node (two links + shared_ptr), hash node (+ bucket share)
  return p.held_bytes + kNodes + (p.key.size() > 15 ? ((p.key.size() + 1 + sizeof(size_t) + 15) & ~size_t(15)) : 0);
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
  if (max_entries_ == 0 || entry_bytes(*plan) > max_bytes_) return plan;
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key)) return plan;
  lru_.push_front(plan);
  index_[key] = lru_.begin();
  ++st_.entries;
  st_.bytes += entry_bytes(*plan);
  while (st_.entries > max_entries_ || st_.bytes > max_bytes_) {
    const auto& victim = lru_.back();
    st_.bytes -= entry_bytes(*victim);
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
