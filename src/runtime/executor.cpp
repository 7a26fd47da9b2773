#include "runtime/executor.hpp"

#include "runtime/profiler.hpp"

#include <cstdlib>
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

Tensor& KernelContext::output(int i, DType dtype, const Shape& shape) {
  if (i < 0 || i >= num_outputs()) fail(ErrorCode::InvalidModel, "output " + std::to_string(i) + " does not exist");
  outputs_[size_t(i)] = Value(Tensor(dtype, shape));
  return outputs_[size_t(i)].tensor;
}

Tensor& KernelContext::output_uninit(int i, DType dtype, const Shape& shape) {
  if (i < 0 || i >= num_outputs()) fail(ErrorCode::InvalidModel, "output " + std::to_string(i) + " does not exist");
  outputs_[size_t(i)] = Value(Tensor::uninit(dtype, shape));
  return outputs_[size_t(i)].tensor;
}

void* KernelContext::workspace(size_t bytes) {
  if (bytes == 0) bytes = 64;
  if (bytes > workspace_size_) {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) fail(ErrorCode::MemoryLimit, "out of memory allocating a " + std::to_string(bytes) + "-byte workspace");
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
    if (!node.kernel) node.fail(ErrorCode::Unsupported, "operator " + node.op_type + " has no kernel (opset " + std::to_string(node.opset) + ")");
    ins.assign(node.inputs.size(), nullptr);
    for (size_t k = 0; k < node.inputs.size(); ++k)
      if (node.inputs[k] >= 0) ins[k] = &frame[size_t(node.inputs[k])];
    impl.assign(node.implicit_inputs.size(), nullptr);
    for (size_t k = 0; k < node.implicit_inputs.size(); ++k) impl[k] = &frame[size_t(node.implicit_inputs[k])];
    outs.assign(node.outputs.size(), Value());
    KernelContext ctx(node, ins, outs, impl, rc);
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
    for (size_t k = 0; k < node.outputs.size(); ++k)
      if (node.outputs[k] >= 0) frame[size_t(node.outputs[k])] = std::move(outs[k]);
    for (int v : g.free_after[ni]) {
      frame[size_t(v)] = Value();
      if constexpr (kProfile) {
        prof->sub_live(counted[size_t(v)]);
        counted[size_t(v)] = 0;
      }
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
