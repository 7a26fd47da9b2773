#include "runtime/shape_infer.hpp"

#include "ops/kernel.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <unordered_map>

namespace basalt {

// The same bound Tensor allocation enforces (core/tensor.cpp): larger is certainly a bogus shape.
static constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 40;

namespace {

using In = ShapeInputs;
using Out = ShapeOutputs;

void set(Out& out, size_t i, DType dt, Shape s) { shapes::set(out, i, dt, std::move(s)); }

// Runs the node's kernel on known inputs. Returns false (outputs stay unknown) when it fails:
// the real run will then report the error itself.
bool propagate_values(const Node& n, const In& in, Out& out) {
  if (!n.kernel) return false;
  std::vector<Value> vals(in.size());
  std::vector<const Value*> ptrs(in.size(), nullptr);
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i]) continue;
    vals[i] = Value(in[i]->value);
    ptrs[i] = &vals[i];
  }
  std::vector<Value> outs(n.outputs.size());
  RunContext rc;  // no pool, no arena: plan-time values live on the heap
  KernelContext ctx(n, ptrs, outs, {}, rc);
  try {
    n.kernel->compute(ctx);
  } catch (const std::exception&) {
    return false;
  }
  for (size_t i = 0; i < outs.size(); ++i) {
    if (n.outputs[i] < 0) continue;
    if (!outs[i].is_tensor()) return false;
    set(out, i, outs[i].tensor.dtype(), outs[i].tensor.shape());
    out[i].value = outs[i].tensor;
  }
  return true;
}

bool has_subgraph(const Node& n) {
  for (auto& a : n.attrs)
    if (a.g || !a.graphs.empty()) return true;
  return false;
}

}  // namespace

std::vector<InferredValue> infer_shapes(const Graph& g, std::span<const std::pair<DType, Shape>> inputs) {
  std::vector<InferredValue> vals(g.values.size());
  for (int c : g.constants) {
    auto& v = vals[size_t(c)];
    v.state = InferredValue::State::Known;
    v.value = g.values[size_t(c)].initializer;
    v.dtype = v.value.dtype();
    v.shape = v.value.shape();
  }
  for (size_t i = 0; i < g.inputs.size() && i < inputs.size(); ++i) {
    const auto& [dt, s] = inputs[i];
    if (!s.empty() && s[0] < 0) continue;  // omitted: the initializer default (already Known), if any
    auto& v = vals[size_t(g.inputs[i])];
    v = InferredValue();
    v.state = InferredValue::State::Known;
    v.dtype = dt;
    v.shape = s;
  }
  Out out;
  In in;
  for (const Node& n : g.nodes) {
    in.v.assign(n.inputs.size(), nullptr);
    bool all_values = true, any_dynamic = false;
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      if (n.inputs[k] < 0) continue;
      const InferredValue& iv = vals[size_t(n.inputs[k])];
      in.v[k] = &iv;
      if (!iv.known()) any_dynamic = true;
      if (!iv.value.defined() || iv.value.numel() > kMaxPropagatedElements) all_values = false;
    }
    out.assign(n.outputs.size(), InferredValue());
    bool ok = false;
    if (!any_dynamic && !has_subgraph(n) && n.implicit_inputs.empty()) {
      const OpTraits* t = op_traits(n);
      if (t && t->shape) {
        try {
          ok = t->shape(n, in, out);
        } catch (const Error&) {
          ok = false;  // a bad attribute: the kernel reports it at run time
        }
      }
      // Values are computed only when the outputs are known to be small (a shape function said
      // so) or the op has no shape function to ask.
      bool small = true;
      if (ok)
        for (auto& o : out)
          if (o.known() && shape_numel(o.shape) > kMaxPropagatedElements) small = false;
      if (all_values && small && !(ok && out.size() == 1 && out[0].value.defined())) {
        Out vals_out(n.outputs.size());
        if (propagate_values(n, in, vals_out)) {
          out = std::move(vals_out);
          ok = true;
        }
      }
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k] < 0) continue;
      InferredValue& o = out[k];
      if (!ok || !o.known()) {
        o = InferredValue();
        o.state = InferredValue::State::Dynamic;
      } else {
        uint64_t elems = 1;
        for (int64_t d : o.shape) {
          if (d < 0) {
            o = InferredValue();
            o.state = InferredValue::State::Dynamic;
            break;
          }
          if (d != 0 && elems > kMaxTensorBytes / uint64_t(d))
            n.fail(ErrorCode::MemoryLimit, "output " + std::to_string(k) + " would have shape " + shape_str(o.shape) +
                                               ": more than 1 TiB");
          elems *= uint64_t(d);
        }
        if (o.known() && elems * dtype_size(o.dtype) > kMaxTensorBytes)
          n.fail(ErrorCode::MemoryLimit, "output " + std::to_string(k) + " would have shape " + shape_str(o.shape) +
                                             " and type " + dtype_name(o.dtype) + ": more than 1 TiB");
      }
      vals[size_t(n.outputs[k])] = std::move(o);
    }
  }
  return vals;
}

}  // namespace basalt
