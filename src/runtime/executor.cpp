#include "runtime/executor.hpp"

#include "core/config.hpp"
#include "runtime/planner.hpp"
#include "runtime/profiler.hpp"
#include "core/storage.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

namespace basalt {

const Value& KernelContext::input_value(int i) const {
  if (!has_input(i)) fail(ErrorCode::InvalidModel, "input " + std::to_string(i) + " is required but missing");
  return *inputs_[size_t(i)];
}

const Tensor& KernelContext::input(int i) const {
  const Value& v = input_value(i);
  if (!v.is_tensor()) fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " must be a tensor");
  return v.tensor;
}

bool KernelContext::requested(int i) const { return node_.outputs[size_t(i)] >= 0; }

// Outputs and workspaces come from the run's arena when the plan has a slot of exactly this
// dtype and shape (ArenaRun checks); otherwise from the heap, counted against the memory limit.
static Tensor make_output(KernelContext& ctx, int i, DType dtype, const Shape& shape, bool zero) {
  const RunContext& rc = ctx.run();
  if (rc.bound && dtype != DType::String) {
    const auto& nodes = rc.bound_graph->nodes;
    const Node* n = &ctx.node();
    int v = n->outputs[size_t(i)];
    if (!nodes.empty() && n >= nodes.data() && n < nodes.data() + nodes.size() && v >= 0 &&
        size_t(v) < rc.bound->size()) {
      const Tensor& b = (*rc.bound)[size_t(v)];
      if (b.defined() && b.raw() && b.dtype() == dtype && b.shape() == shape) {
        if (zero && b.nbytes()) std::memset(const_cast<void*>(b.raw()), 0, b.nbytes());
        return b;
      }
    }
  }
  ArenaRun* ar = ctx.run().arena;
  if (ar) {
    if (void* p = ar->output(ctx.node(), i, dtype, shape, zero)) {
      Tensor t = Tensor::view(dtype, shape, p, ar->keep);
      if (zero && t.nbytes()) std::memset(p, 0, t.nbytes());
      return t;
    }
    // No slot because the size depends on data (or a subgraph node): the session's bounded pool.
    Tensor t = ar->dynamic(ctx.node(), i, dtype, shape);
    if (t.defined()) {
      if (zero && t.nbytes()) std::memset(t.raw(), 0, t.nbytes());
      return t;
    }
  }
  Tensor t = zero ? Tensor(dtype, shape) : Tensor::uninit(dtype, shape);
  if (ar) ar->note_heap(ctx.node(), i, t.nbytes());
  return t;
}

Tensor& KernelContext::output(int i, DType dtype, const Shape& shape) {
  if (i < 0 || i >= num_outputs()) fail(ErrorCode::InvalidModel, "output " + std::to_string(i) + " does not exist");
  outputs_[size_t(i)] = Value(make_output(*this, i, dtype, shape, true));
  return outputs_[size_t(i)].tensor;
}

Tensor& KernelContext::output_uninit(int i, DType dtype, const Shape& shape) {
  if (i < 0 || i >= num_outputs()) fail(ErrorCode::InvalidModel, "output " + std::to_string(i) + " does not exist");
  outputs_[size_t(i)] = Value(make_output(*this, i, dtype, shape, false));
  return outputs_[size_t(i)].tensor;
}

void* KernelContext::workspace(size_t bytes) {
  if (bytes == 0) bytes = 64;
  if (run_.arena)
    if (void* p = run_.arena->workspace(node_, bytes)) return p;
  if (bytes > workspace_size_ && run_.arena && run_.arena->pool) {
    workspace_ = run_.arena->dynamic_workspace(node_, bytes);
    workspace_size_ = bytes;
  }
  if (bytes > workspace_size_) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) fail(ErrorCode::MemoryLimit, "out of memory allocating a " + std::to_string(bytes) + "-byte workspace");
    detail::count_allocation();
    if (run_.arena) run_.arena->note_heap(node_, -1, bytes);
    workspace_.reset(p, [](void* q) { std::free(q); });
    workspace_size_ = bytes;
  }
  return workspace_.get();
}

void KernelContext::set_output(int i, Value v) {
  if (i < 0 || i >= num_outputs()) fail(ErrorCode::InvalidModel, "output " + std::to_string(i) + " does not exist");
  outputs_[size_t(i)] = std::move(v);
}

std::vector<Value> KernelContext::run_subgraph(const Graph& g, std::span<const Value> inputs) {
  const std::vector<int>* map = nullptr;
  for (auto& [sg, m] : node_.capture_index)
    if (sg == &g) map = &m;
  if (!map) fail(ErrorCode::Internal, "subgraph does not belong to this node");
  std::vector<Value> caps;
  caps.reserve(map->size());
  for (int k : *map) caps.push_back(*implicit_[size_t(k)]);
  return execute_graph(g, inputs, caps, run_);
}

// The node loop, instantiated twice: kProfile = false is the plain loop (no profiling code at
// all); kProfile = true records each node into rc.profile (see runtime/profiler.hpp).
template <bool kProfile>
static std::vector<Value> execute_impl(const Graph& g, std::span<const Value> inputs, std::span<const Value> captures,
                                       RunContext& rc) {
  std::vector<Value> frame(g.values.size());
  for (int c : g.constants) frame[size_t(c)] = Value(g.values[size_t(c)].initializer);
  for (size_t i = 0; i < inputs.size() && i < g.inputs.size(); ++i)
    if (!inputs[i].is_none() || !g.values[size_t(g.inputs[i])].is_initializer) frame[size_t(g.inputs[i])] = inputs[i];
  for (size_t i = 0; i < captures.size() && i < g.captures.size(); ++i) frame[size_t(g.captures[i])] = captures[i];

  RunProfile* prof = kProfile ? rc.profile : nullptr;
  std::vector<uint64_t> counted;  // kProfile: bytes each live value adds to "tensor bytes in use"
  const int32_t parent = kProfile ? prof->current_parent : -1;
  if constexpr (kProfile) {
    counted.assign(g.values.size(), 0);
    prof->frames.push_back({&g, &frame, &counted});
    // The run's own inputs count; a subgraph's inputs and captures alias its parent's values.
    if (parent < 0) {
      for (int v : g.inputs) {
        const Value& val = frame[size_t(v)];
        if (val.is_none() || g.values[size_t(v)].is_initializer) continue;
        counted[size_t(v)] = RunProfile::new_bytes(val, {}, {});
        prof->add_live(counted[size_t(v)]);
      }
      prof->note_inputs_peak();
    }
  }

  std::vector<const Value*> ins, impl;
  std::vector<Value> outs;
  std::vector<std::shared_ptr<Storage>> ending;  // arena storages whose slot is released now
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const Node& node = g.nodes[ni];
    size_t pi = 0;
    if constexpr (kProfile) {
      pi = prof->nodes.size();
      ProfNode pn;
      pn.graph = &g;
      pn.node = int32_t(ni);
      pn.parent = parent;
      pn.thread = prof_thread_index();
      pn.start_ns = prof_now_ns();
      prof->nodes.push_back(pn);
      prof->current_parent = int32_t(pi);
    }
    if (rc.terminate && rc.terminate->load(std::memory_order_relaxed))
      BASALT_THROW(Cancelled, "the run was terminated by its caller (RunOptions::terminate) before node '" + node.name + "'");
    if (!node.kernel) node.fail(ErrorCode::Unsupported, "operator " + node.op_type + " has no kernel (opset " + std::to_string(node.opset) + ")");
    ins.assign(node.inputs.size(), nullptr);
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (node.inputs[k] >= 0) ins[k] = &frame[size_t(node.inputs[k])];
    impl.assign(node.implicit_inputs.size(), nullptr);
    for (size_t k = 0; k < node.implicit_inputs.size(); ++k) impl[k] = &frame[size_t(node.implicit_inputs[k])];
    outs.assign(node.outputs.size(), Value());
    KernelContext ctx(node, ins, outs, impl, rc);
    // BASALT_PLAN_DEBUG=1: name the nodes that allocate outside the plan (for finding kernels to
    // move onto ctx.output / ctx.workspace).
    static const bool debug_allocs = env_config().plan_debug;
    const uint64_t allocs0 = debug_allocs ? allocation_count() : 0;
    try {
      node.kernel->compute(ctx);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("node '", 0) != 0) msg = node.describe() + ": " + msg;
      throw Error(e.code(), msg);
    } catch (const std::bad_alloc&) {
      node.fail(ErrorCode::MemoryLimit, "out of memory");
    } catch (const std::exception& e) {
      node.fail(ErrorCode::Internal, e.what());
    }
    if (debug_allocs && rc.arena && allocation_count() != allocs0)
      std::fprintf(stderr, "plan: %s made %llu heap allocations\n", node.describe().c_str(),
                   (unsigned long long)(allocation_count() - allocs0));
    if constexpr (kProfile) {
      prof->current_parent = parent;
      ProfNode& pn = prof->nodes[pi];
      pn.tensors_at = uint32_t(prof->tensors.size());
      pn.n_in = uint16_t(node.inputs.size());
      pn.n_out = uint16_t(node.outputs.size());
      uint64_t bytes = 0;
      for (size_t k = 0; k < node.inputs.size(); ++k) bytes += prof->add_tensor(ins[k], node.inputs[k]);
      for (size_t k = 0; k < node.outputs.size(); ++k) bytes += prof->add_tensor(&outs[k], node.outputs[k]);
      pn.bytes = bytes;
      for (size_t k = 0; k < node.outputs.size(); ++k)
        if (node.outputs[k] >= 0) {
          uint64_t b = RunProfile::new_bytes(outs[k], ins, impl);
          prof->sub_live(counted[size_t(node.outputs[k])]);
          counted[size_t(node.outputs[k])] = b;
          prof->add_live(b);
        }
    }
    ArenaRun* top = rc.arena && rc.arena->graph == &g && !rc.arena->abandoned ? rc.arena : nullptr;
    for (size_t k = 0; k < node.outputs.size(); ++k) {
      if (node.outputs[k] < 0) continue;
      // A kernel that made its output itself (set_output of a fresh heap tensor) left its planned
      // slot empty: move the data there, so that the heap block is freed now instead of living
      // beside the arena for the whole lifetime of the value.
      if (top && outs[k].is_tensor()) {
        Tensor& t = outs[k].tensor;
        if (t.storage() && t.storage()->owned && t.storage().use_count() == 1 && !top->contains(t.raw()))
          if (void* p = top->adopt(node, int(k), t.dtype(), t.shape())) {
            if (t.nbytes()) std::memcpy(p, t.raw(), t.nbytes());
            outs[k] = Value(Tensor::view(t.dtype(), t.shape(), p, top->keep));
          }
      }
      frame[size_t(node.outputs[k])] = std::move(outs[k]);
    }
    // The arena slot of a value may be reused after reserved_until; by then nothing else may
    // hold its storage. A kernel that kept an unplanned alias (a view in another value) would
    // see its data overwritten later, so the rest of this run takes its memory from the heap.
    ArenaRun* ar = rc.arena && rc.arena->graph == &g && !rc.arena->abandoned ? rc.arena : nullptr;
    ending.clear();
    for (int v : g.free_after[ni]) {
      if (ar && ar->plan->reserved_until[size_t(v)] <= int(ni)) {
        const Value& fv = frame[size_t(v)];
        if (fv.is_tensor() && fv.tensor.storage() && ar->contains(fv.tensor.raw())) ending.push_back(fv.tensor.storage());
      }
      frame[size_t(v)] = Value();
      if constexpr (kProfile) {
        prof->sub_live(counted[size_t(v)]);
        counted[size_t(v)] = 0;
      }
    }
    if (!ending.empty()) {
      // Each storage is held by `ending` (once per copy there) and by nobody else, or it escaped.
      std::sort(ending.begin(), ending.end());
      for (size_t a = 0; a < ending.size();) {
        size_t b = a;
        while (b < ending.size() && ending[b] == ending[a]) ++b;
        if (ending[a].use_count() > long(b - a)) ar->abandoned = true;
        a = b;
      }
      ending.clear();
    }
    if constexpr (kProfile) {
      // Stamped after the bookkeeping so that node events tile the run without gaps.
      prof->after_node(pi);
      prof->nodes[pi].end_ns = prof_now_ns();
    }
  }
  std::vector<Value> result;
  result.reserve(g.outputs.size());
  for (int o : g.outputs) result.push_back(frame[size_t(o)]);
  if constexpr (kProfile) {
    // The frame's values die here; whatever the caller keeps is counted again where it lands.
    for (uint64_t b : counted) prof->sub_live(b);
    prof->frames.pop_back();
  }
  return result;
}

std::vector<Value> execute_graph(const Graph& g, std::span<const Value> inputs, std::span<const Value> captures,
                                 RunContext& rc) {
  if (rc.profile) return execute_impl<true>(g, inputs, captures, rc);
  return execute_impl<false>(g, inputs, captures, rc);
}

}  // namespace basalt
