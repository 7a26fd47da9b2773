// Control flow: If, Loop, Scan. Subgraphs run through KernelContext::run_subgraph, which also
// supplies the outer-scope values they capture.
#include "ops/common.hpp"

#include <algorithm>
#include <cstring>

namespace basalt {
namespace {

bool read_cond(const KernelContext& ctx, const Tensor& t, const char* what) {
  if (t.numel() != 1)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must have exactly one element, has shape " + shape_str(t.shape()));
  if (t.dtype() == DType::Bool) return t.data<bool>()[0];
  return t.get_double(0) != 0;
}

// Stack equally-shaped tensors along a new axis `axis` (0..rank). With out_index >= 0 the result
// is node output out_index, allocated through the context (output_uninit), so a Loop/Scan output
// whose length depends on the data comes from the session's bounded pool like any other
// data-dependent tensor; strings and empty results are set as plain heap tensors.
Tensor stack(KernelContext& ctx, const std::vector<Tensor>& items, int axis, DType dt, const Shape& empty_elem_shape,
             int out_index = -1) {
  if (items.empty()) {
    Shape s = empty_elem_shape;
    s.insert(s.begin() + axis, 0);
    Tensor r(dt, s);
    if (out_index >= 0) ctx.set_output(out_index, Value(r));
    return r;
  }
  const Shape& es = items[0].shape();
  for (auto& t : items)
    if (t.shape() != es || t.dtype() != items[0].dtype())
      ctx.fail(ErrorCode::InvalidArgument, "scan output changes shape or type between iterations: " + shape_str(es) + " vs " +
                                               shape_str(t.shape()));
  Shape out = es;
  out.insert(out.begin() + axis, int64_t(items.size()));
  const bool via_ctx = out_index >= 0 && items[0].dtype() != DType::String;
  Tensor r = via_ctx ? ctx.output_uninit(out_index, items[0].dtype(), out) : Tensor(items[0].dtype(), out);
  if (out_index >= 0 && !via_ctx) ctx.set_output(out_index, Value(r));
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= es[size_t(d)];
  for (size_t d = size_t(axis); d < es.size(); ++d) inner *= es[d];
  size_t esz = dtype_size(r.dtype());
  int64_t n = int64_t(items.size());
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& t = items[size_t(i)];
    for (int64_t o = 0; o < outer; ++o) {
      int64_t dst = (o * n + i) * inner;
      int64_t src = o * inner;
      if (r.dtype() == DType::String) {
        for (int64_t k = 0; k < inner; ++k) r.data<std::string>()[dst + k] = t.data<std::string>()[src + k];
      } else {
        std::memcpy(static_cast<char*>(r.raw()) + size_t(dst) * esz, static_cast<const char*>(t.raw()) + size_t(src) * esz,
                    size_t(inner) * esz);
      }
    }
  }
  return r;
}

// Sets v to a scalar tensor holding x: rewritten in place when v already holds a T scalar that
// nothing else references (a body that passes the iteration number or condition through to an
// output keeps a reference, and then a fresh scalar is made), so Loop iterations allocate nothing
// for them.
template <class T>
void set_scalar(Value& v, T x) {
  if (v.is_tensor() && v.tensor.dtype() == dtype_of<T>::value && v.tensor.shape().empty() && v.tensor.storage() &&
      v.tensor.storage().use_count() == 1)
    v.tensor.data<T>()[0] = x;
  else
    v = Value(Tensor::scalar<T>(x));
}

// Slice index i along `axis`, dropping that axis.
Tensor take_slice(const Tensor& t, int axis, int64_t i) {
  Shape s = t.shape();
  int64_t n = s[size_t(axis)];
  s.erase(s.begin() + axis);
  Tensor r(t.dtype(), s);
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= t.shape()[size_t(d)];
  for (size_t d = size_t(axis) + 1; d < t.shape().size(); ++d) inner *= t.shape()[d];
  size_t esz = dtype_size(t.dtype());
  for (int64_t o = 0; o < outer; ++o) {
    int64_t src = (o * n + i) * inner, dst = o * inner;
    if (t.dtype() == DType::String) {
      for (int64_t k = 0; k < inner; ++k) r.data<std::string>()[dst + k] = t.data<std::string>()[src + k];
    } else {
      std::memcpy(static_cast<char*>(r.raw()) + size_t(dst) * esz, static_cast<const char*>(t.raw()) + size_t(src) * esz,
                  size_t(inner) * esz);
    }
  }
  return r;
}

// Element type and shape of a declared graph output, for empty scan outputs.
void declared(const Graph& g, size_t out_index, DType& dt, Shape& shape) {
  const TypeInfo& t = g.values[size_t(g.outputs[out_index])].type;
  dt = t.elem == DType::Undefined ? DType::Float : t.elem;
  shape.clear();
  for (auto& d : t.dims) shape.push_back(d.fixed() ? d.value : 0);
}

void register_if(OpRegistry& r) {
  r.add("If", 1, [](const Node& n) {
    auto then_g = n.attr_graph("then_branch");
    auto else_g = n.attr_graph("else_branch");
    if (then_g->outputs.size() != n.outputs.size() || else_g->outputs.size() != n.outputs.size())
      n.fail(ErrorCode::InvalidModel, "then_branch and else_branch must each have " + std::to_string(n.outputs.size()) + " outputs");
    return kernel([then_g, else_g](KernelContext& ctx) {
      bool c = read_cond(ctx, ctx.input(0), "If condition");
      std::vector<Value> outs = ctx.run_subgraph(c ? *then_g : *else_g, {});
      for (size_t i = 0; i < outs.size(); ++i) ctx.set_output(int(i), std::move(outs[i]));
    });
  });
}

void register_loop(OpRegistry& r) {
  r.add("Loop", 1, [](const Node& n) {
    auto body = n.attr_graph("body");
    size_t n_carried = n.inputs.size() >= 2 ? n.inputs.size() - 2 : 0;
    if (body->inputs.size() != n_carried + 2)
      n.fail(ErrorCode::InvalidModel, "body must have " + std::to_string(n_carried + 2) + " inputs (iteration, condition, " +
                                          std::to_string(n_carried) + " loop-carried), has " + std::to_string(body->inputs.size()));
    if (body->outputs.size() < n_carried + 1)
      n.fail(ErrorCode::InvalidModel, "body must have at least " + std::to_string(n_carried + 1) + " outputs");
    size_t n_scan = body->outputs.size() - 1 - n_carried;
    if (n.outputs.size() > n_carried + n_scan)
      n.fail(ErrorCode::InvalidModel, "has more outputs than its body produces");
    return kernel([body, n_carried, n_scan](KernelContext& ctx) {
      int64_t max_trip = -1;
      if (ctx.has_input(0)) {
        const Tensor& m = ctx.input(0);
        if (m.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "trip count M must be a scalar");
        // A given negative M means zero iterations (as in onnxruntime), not "no M": that ran
        // unbounded and was OOM-killed (found by fuzz_run, test_loop11 with M = -2).
        max_trip = std::max<int64_t>(m.get_int(0), 0);
      }
      bool cond = true;
      if (ctx.has_input(1)) cond = read_cond(ctx, ctx.input(1), "loop condition");
      std::vector<Value> carried(n_carried);
      for (size_t i = 0; i < n_carried; ++i) carried[i] = ctx.has_input(int(i + 2)) ? ctx.input_value(int(i + 2)) : Value();
      std::vector<std::vector<Tensor>> scans(n_scan);
      // An unbounded loop (no M, condition always true) would hang: cap it.
      constexpr int64_t kMaxIterations = int64_t(1) << 31;
      std::vector<Value> ins(2 + n_carried);
      for (int64_t it = 0; (max_trip < 0 || it < max_trip) && cond; ++it) {
        if (it >= kMaxIterations) ctx.fail(ErrorCode::InvalidArgument, "loop exceeded 2^31 iterations");
        set_scalar(ins[0], it);
        set_scalar(ins[1], cond);
        for (size_t i = 0; i < n_carried; ++i) ins[2 + i] = carried[i];
        std::vector<Value> outs = ctx.run_subgraph(*body, ins);
        if (!outs[0].is_tensor()) ctx.fail(ErrorCode::InvalidArgument, "body condition output is not a tensor");
        cond = read_cond(ctx, outs[0].tensor, "body condition output");
        for (size_t i = 0; i < n_carried; ++i) carried[i] = std::move(outs[1 + i]);
        for (size_t k = 0; k < n_scan; ++k) {
          Value& v = outs[1 + n_carried + k];
          if (!v.is_tensor()) ctx.fail(ErrorCode::Unsupported, "scan output " + std::to_string(k) + " is not a tensor");
          scans[k].push_back(v.tensor);
        }
      }
      for (size_t i = 0; i < n_carried && int(i) < ctx.num_outputs(); ++i) ctx.set_output(int(i), carried[i]);
      for (size_t k = 0; k < n_scan && int(n_carried + k) < ctx.num_outputs(); ++k) {
        DType dt;
        Shape es;
        declared(*body, 1 + n_carried + k, dt, es);
        if (!scans[k].empty()) dt = scans[k][0].dtype();
        stack(ctx, scans[k], 0, dt, es, int(n_carried + k));
      }
    });
  });
}

// Scan-9+: inputs are N state values then M scan inputs; no batch axis.
void register_scan(OpRegistry& r) {
  r.add("Scan", 9, [](const Node& n) {
    auto body = n.attr_graph("body");
    int64_t m = n.attr_int("num_scan_inputs");
    int64_t n_in = int64_t(n.inputs.size());
    if (m < 1 || m > n_in) n.fail(ErrorCode::InvalidModel, "num_scan_inputs " + std::to_string(m) + " is out of range");
    size_t n_state = size_t(n_in - m);
    if (body->inputs.size() != size_t(n_in))
      n.fail(ErrorCode::InvalidModel, "body must have " + std::to_string(n_in) + " inputs");
    if (body->outputs.size() < n_state)
      n.fail(ErrorCode::InvalidModel, "body has " + std::to_string(body->outputs.size()) + " outputs, fewer than the " +
                                          std::to_string(n_state) + " state variables");
    size_t n_scan_out = body->outputs.size() - n_state;
    auto in_axes = n.attr_ints("scan_input_axes", std::vector<int64_t>(size_t(m), 0));
    auto in_dirs = n.attr_ints("scan_input_directions", std::vector<int64_t>(size_t(m), 0));
    auto out_axes = n.attr_ints("scan_output_axes", std::vector<int64_t>(n_scan_out, 0));
    auto out_dirs = n.attr_ints("scan_output_directions", std::vector<int64_t>(n_scan_out, 0));
    if (in_axes.size() != size_t(m) || in_dirs.size() != size_t(m) || out_axes.size() != n_scan_out || out_dirs.size() != n_scan_out)
      n.fail(ErrorCode::InvalidModel, "scan axes/directions attributes have the wrong length");
    return kernel([=](KernelContext& ctx) {
      std::vector<Value> state(n_state);
      for (size_t i = 0; i < n_state; ++i) state[i] = ctx.input_value(int(i));
      int64_t len = -1;
      std::vector<int> axes(static_cast<size_t>(m));
      for (int64_t j = 0; j < m; ++j) {
        const Tensor& t = ctx.input(int(n_state + size_t(j)));
        axes[size_t(j)] = normalize_axis(ctx, in_axes[size_t(j)], t.rank());
        int64_t l = t.shape()[size_t(axes[size_t(j)])];
        if (len >= 0 && l != len) ctx.fail(ErrorCode::InvalidArgument, "scan inputs have different sequence lengths");
        len = l;
      }
      std::vector<std::vector<Tensor>> outs_k(n_scan_out);
      std::vector<Value> ins(n_state + size_t(m));
      for (int64_t it = 0; it < len; ++it) {
        for (size_t i = 0; i < n_state; ++i) ins[i] = state[i];
        for (int64_t j = 0; j < m; ++j) {
          int64_t idx = in_dirs[size_t(j)] ? len - 1 - it : it;
          ins[n_state + size_t(j)] = Value(take_slice(ctx.input(int(n_state + size_t(j))), axes[size_t(j)], idx));
        }
        auto outs = ctx.run_subgraph(*body, ins);
        for (size_t i = 0; i < n_state; ++i) state[i] = std::move(outs[i]);
        for (size_t k = 0; k < n_scan_out; ++k) {
          if (!outs[n_state + k].is_tensor()) ctx.fail(ErrorCode::Unsupported, "scan output is not a tensor");
          outs_k[k].push_back(outs[n_state + k].tensor);
        }
      }
      for (size_t i = 0; i < n_state; ++i) ctx.set_output(int(i), state[i]);
      for (size_t k = 0; k < n_scan_out; ++k) {
        if (out_dirs[k]) std::reverse(outs_k[k].begin(), outs_k[k].end());
        DType dt;
        Shape es;
        declared(*body, n_state + k, dt, es);
        if (!outs_k[k].empty()) {
          dt = outs_k[k][0].dtype();
          es = outs_k[k][0].shape();
        }
        int axis = normalize_axis(ctx, out_axes[k], int(es.size()) + 1);
        stack(ctx, outs_k[k], axis, dt, es, int(n_state + k));
      }
    });
  });
  // Scan-8: a leading batch axis on every state and scan value, optional sequence_lens input.
  r.add("Scan", 8, [](const Node& n) {
    auto body = n.attr_graph("body");
    int64_t m = n.attr_int("num_scan_inputs");
    int64_t n_in = int64_t(n.inputs.size()) - 1;
    if (m < 1 || m > n_in) n.fail(ErrorCode::InvalidModel, "num_scan_inputs is out of range");
    size_t n_state = size_t(n_in - m);
    if (body->outputs.size() < n_state)
      n.fail(ErrorCode::InvalidModel, "body has " + std::to_string(body->outputs.size()) + " outputs, fewer than the " +
                                          std::to_string(n_state) + " state variables");
    size_t n_scan_out = body->outputs.size() - n_state;
    auto dirs = n.attr_ints("directions", std::vector<int64_t>(size_t(m), 0));
    if (dirs.size() != size_t(m))
      n.fail(ErrorCode::InvalidModel, "directions has " + std::to_string(dirs.size()) + " entries, expected num_scan_inputs = " +
                                          std::to_string(m));
    return kernel([=](KernelContext& ctx) {
      if (ctx.has_input(0)) ctx.fail(ErrorCode::Unsupported, "Scan-8 sequence_lens is not supported");
      int64_t batch = ctx.input(1).shape().at(0);
      std::vector<std::vector<Tensor>> state_b(n_state), scan_b(n_scan_out);
      for (int64_t b = 0; b < batch; ++b) {
        std::vector<Value> state(n_state);
        for (size_t i = 0; i < n_state; ++i) state[i] = Value(take_slice(ctx.input(int(1 + i)), 0, b));
        int64_t len = take_slice(ctx.input(int(1 + n_state)), 0, b).shape().at(0);
        std::vector<std::vector<Tensor>> outs_k(n_scan_out);
        std::vector<Tensor> seqs;
        for (int64_t j = 0; j < m; ++j) seqs.push_back(take_slice(ctx.input(int(1 + n_state + size_t(j))), 0, b));
        std::vector<Value> ins(n_state + size_t(m));
        for (int64_t it = 0; it < len; ++it) {
          for (size_t i = 0; i < n_state; ++i) ins[i] = state[i];
          for (int64_t j = 0; j < m; ++j)
            ins[n_state + size_t(j)] = Value(take_slice(seqs[size_t(j)], 0, dirs[size_t(j)] ? len - 1 - it : it));
          auto outs = ctx.run_subgraph(*body, ins);
          for (size_t i = 0; i < n_state; ++i) state[i] = std::move(outs[i]);
          for (size_t k = 0; k < n_scan_out; ++k) outs_k[k].push_back(outs[n_state + k].tensor);
        }
        for (size_t i = 0; i < n_state; ++i) state_b[i].push_back(state[i].tensor);
        for (size_t k = 0; k < n_scan_out; ++k) {
          DType dt;
          Shape es;
          declared(*body, n_state + k, dt, es);
          scan_b[k].push_back(stack(ctx, outs_k[k], 0, outs_k[k].empty() ? dt : outs_k[k][0].dtype(), es));
        }
      }
      for (size_t i = 0; i < n_state; ++i) stack(ctx, state_b[i], 0, ctx.input(int(1 + i)).dtype(), {}, int(i));
      for (size_t k = 0; k < n_scan_out; ++k)
        stack(ctx, scan_b[k], 0, scan_b[k].empty() ? DType::Float : scan_b[k][0].dtype(), {}, int(n_state + k));
    });
  }, 8);
}

}  // namespace

void register_controlflow_ops(OpRegistry& r) {
  register_if(r);
  register_loop(r);
  register_scan(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"If", "Loop", "Scan"}) r.def(op).data_dependent_shape().alias(Alias::HoldsInputs);
}

}  // namespace basalt
