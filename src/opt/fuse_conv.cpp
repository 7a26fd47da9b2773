// Conv fusions: Conv+BatchNormalization folded into the Conv's weights (Basic, standard op),
// Conv (+ residual Add) + activation -> basalt::FusedConv, Gemm + activation ->
// basalt::FusedMatMul and inference BatchNormalization + activation ->
// basalt::FusedBatchNormalization (Extended). The fused ops are specified in docs/fused_ops.md.
#include "ops/kernel.hpp"
#include "opt/passes.hpp"
#include "core/storage.hpp"

#include <cmath>
#include <limits>

namespace basalt {

namespace {

bool is_op(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

const char* kActivations[] = {"Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "LeakyRelu", "Tanh"};

bool is_activation(const Node& n) {
  if (!n.domain.empty()) return false;
  for (const char* a : kActivations)
    if (n.op_type == a) return true;
  return false;
}

// activation_params of docs/fused_ops.md for activation node `a`; false (with `why`) when they
// are not constants.
bool activation_params(const Graph& g, const Node& a, std::vector<float>& params, std::string& why) {
  params.clear();
  if (a.op_type == "Clip") {
    float lo = std::numeric_limits<float>::lowest(), hi = std::numeric_limits<float>::max();
    if (a.opset < 11) {
      lo = a.attr_float("min", lo);
      hi = a.attr_float("max", hi);
    } else {
      for (size_t k = 1; k < a.inputs.size() && k < 3; ++k) {
        if (a.inputs[k] < 0) continue;
        const Tensor* t = constant_of(g, a.inputs[k]);
        if (!t || t->numel() != 1) {
          why = "Clip bound is not a constant scalar";
          return false;
        }
        (k == 1 ? lo : hi) = float(t->get_double(0));
      }
    }
    params = {lo, hi};
  } else if (a.op_type == "HardSigmoid") {
    params = {a.attr_float("alpha", 0.2f), a.attr_float("beta", 0.5f)};
  } else if (a.op_type == "LeakyRelu") {
    params = {a.attr_float("alpha", 0.01f)};
  }
  return true;
}

bool kernel_registered(const char* op) { return OpRegistry::instance().find("basalt", op, 1) != nullptr; }

std::string consumers_reason(const GraphIndex& idx, int v, const char* what) {
  if (idx.is_graph_output(v)) return std::string(what) + " output is a graph output";
  if (idx.captured(v)) return std::string(what) + " output is used by a subgraph";
  return std::string(what) + " output has " + std::to_string(idx.num_consumers(v)) + " consumers";
}

}  // namespace

void fuse_conv_bn(PassContext& ctx) {
  const char* kPattern = "Conv+BatchNormalization";
  Graph& g = ctx.graph;
  GraphIndex idx(g);
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  for (size_t bi = 0; bi < g.nodes.size(); ++bi) {
    Node& bn = g.nodes[bi];
    if (!is_op(bn, "BatchNormalization") || bn.inputs.size() < 5 || bn.inputs[0] < 0) continue;
    const Node* conv_p = producer_node(g, bn.inputs[0]);
    if (!conv_p || !is_op(*conv_p, "Conv")) continue;
    int ci = g.values[size_t(bn.inputs[0])].producer;
    const Node& conv = *conv_p;
    if (dead[size_t(ci)]) continue;
    if (idx.sole_consumer(bn.inputs[0]) != int(bi)) {
      ctx.reject(kPattern, conv, consumers_reason(idx, bn.inputs[0], "Conv"));
      continue;
    }
    if (bn.attr_int("training_mode", 0) != 0) {
      ctx.reject(kPattern, bn, "BatchNormalization is in training mode");
      continue;
    }
    bool extra_outputs = false;
    for (size_t k = 1; k < bn.outputs.size(); ++k)
      if (bn.outputs[k] >= 0 && (idx.num_consumers(bn.outputs[k]) > 0 || idx.is_graph_output(bn.outputs[k])))
        extra_outputs = true;
    if (extra_outputs) {
      ctx.reject(kPattern, bn, "BatchNormalization's running mean/var outputs are used");
      continue;
    }
    const Tensor* w = conv.inputs.size() > 1 ? constant_of(g, conv.inputs[1]) : nullptr;
    const Tensor* b = conv.inputs.size() > 2 && conv.inputs[2] >= 0 ? constant_of(g, conv.inputs[2]) : nullptr;
    if (!w) {
      ctx.reject(kPattern, conv, "non-constant weight");
      continue;
    }
    if (conv.inputs.size() > 2 && conv.inputs[2] >= 0 && !b) {
      ctx.reject(kPattern, conv, "non-constant bias");
      continue;
    }
    const Tensor* p[4];
    bool params_const = true;
    for (int k = 0; k < 4; ++k) {
      p[k] = constant_of(g, bn.inputs[size_t(k + 1)]);
      if (!p[k]) params_const = false;
    }
    if (!params_const) {
      ctx.reject(kPattern, bn, "non-constant BatchNormalization parameters");
      continue;
    }
    bool all_float = w->dtype() == DType::Float && (!b || b->dtype() == DType::Float);
    for (auto* t : p) all_float = all_float && t->dtype() == DType::Float;
    if (!all_float) {
      ctx.reject(kPattern, conv, "only float32 weights are folded");
      continue;
    }
    int64_t m = w->rank() >= 1 ? w->dim(0) : -1;
    bool shapes_ok = m > 0 && (!b || b->numel() == m);
    for (auto* t : p) shapes_ok = shapes_ok && t->numel() == m;
    if (!shapes_ok) {
      ctx.reject(kPattern, conv, "mismatched shapes: BatchNormalization parameters do not match the Conv's " +
                                     std::to_string(m) + " output channels");
      continue;
    }
    float eps = bn.attr_float("epsilon", 1e-5f);
    // The folded weight overwrites the original when nothing else can see it (an owned copy,
    // e.g. the loader's aligned copy of a misaligned weight, read by this Conv alone): creating
    // a session then allocates (and the kernel zero-fills) one copy of the weights less.
    const bool in_place = idx.sole_consumer(conv.inputs[1]) == ci && w->storage() && w->storage()->owned &&
                          w->storage().use_count() == 1 && w->is_aligned();
    Tensor nw = in_place ? *w : Tensor::uninit(DType::Float, w->shape()), nb(DType::Float, {m});
    int64_t per = w->numel() / m;
    float* wd = nw.data<float>();
    const float* w0 = w->data<float>();
    const float *scale = p[0]->data<float>(), *bias = p[1]->data<float>(), *mean = p[2]->data<float>(),
                *var = p[3]->data<float>();
    for (int64_t c = 0; c < m; ++c) {
      // The scale in double (rsqrt of a small variance loses digits in float).
      double s = double(scale[c]) / std::sqrt(double(var[c]) + double(eps));
      const float sf = float(s);
      for (int64_t k = 0; k < per; ++k) wd[c * per + k] = w0[c * per + k] * sf;
      double b0 = b ? double(b->data<float>()[c]) : 0.0;
      nb.data<float>()[c] = float((b0 - double(mean[c])) * s + double(bias[c]));
    }
    std::string wname = g.values[size_t(conv.inputs[1])].name;
    // The originals die with this fold unless something else reads them: drop them now, not when
    // the pass ends, so folding a model's convs never holds two copies of its weights at once
    // (ResNet-50: the optimizer's peak was load + every folded copy).
    for (int v : {conv.inputs[1], conv.inputs.size() > 2 ? conv.inputs[2] : -1})
      if (v >= 0 && idx.sole_consumer(v) == ci) drop_constant(g, v);
    for (int k = 1; k < 5; ++k)
      if (idx.sole_consumer(bn.inputs[size_t(k)]) == int(bi)) drop_constant(g, bn.inputs[size_t(k)]);
    int wv = add_constant(g, wname + "_bn", std::move(nw));
    int bv = add_constant(g, wname + "_bn_bias", std::move(nb));
    // The BN node becomes the Conv (it is the chain's last node; its output keeps its name).
    int x = conv.inputs[0];
    std::string conv_name = conv.name;
    std::vector<Attribute> attrs = conv.attrs;
    int opset = conv.opset;
    dead[size_t(ci)] = true;
    bn.op_type = "Conv";
    bn.domain = "";
    bn.opset = opset;
    bn.attrs = std::move(attrs);
    bn.inputs = {x, wv, bv};
    bn.outputs.resize(1);
    bn.name = conv_name;
    ctx.applied(kPattern);
    any = true;
  }
  if (any) compact(g, dead);
}

void fuse_conv_activation(PassContext& ctx) {
  Graph& g = ctx.graph;
  bool have_kernel = kernel_registered("FusedConv");
  GraphIndex idx(g);
  StaticShapes shapes;
  bool shapes_done = false;
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    const Node& conv = g.nodes[ci];
    if (!is_op(conv, "Conv") || dead[ci] || conv.outputs.empty() || conv.outputs[0] < 0) continue;
    int y = conv.outputs[0];
    int next = idx.sole_consumer(y);
    if (next < 0 || idx.captured(y)) {
      // Only a candidate when something fusible reads it.
      bool fusible_reader = false;
      for (int c : idx.consumers(y))
        fusible_reader |= is_activation(g.nodes[size_t(c)]) || is_op(g.nodes[size_t(c)], "Add") || is_op(g.nodes[size_t(c)], "Sum");
      if (fusible_reader) ctx.reject("Conv+activation", conv, consumers_reason(idx, y, "Conv"));
      continue;
    }
    // Already absorbed into an earlier conv's fusion (both inputs of a residual Add can be
    // Conv outputs; the first Conv takes the Add, the other stays its Z).
    if (dead[size_t(next)]) continue;
    Node* add = nullptr;
    Node* act = nullptr;
    int z = -1;
    std::string pattern = "Conv";
    // Sum of two inputs is Add (older exports, e.g. the Caffe2 ResNet-50, use it).
    bool residual = is_op(g.nodes[size_t(next)], "Add") ||
                    (is_op(g.nodes[size_t(next)], "Sum") && g.nodes[size_t(next)].inputs.size() == 2);
    if (residual) {
      Node& a = g.nodes[size_t(next)];
      if (a.inputs.size() != 2 || a.inputs[0] == a.inputs[1]) continue;
      z = a.inputs[0] == y ? a.inputs[1] : a.inputs[0];
      if (!shapes_done) {
        shapes = infer_static_shapes(g);
        shapes_done = true;
      }
      Shape ys, zs;
      if (!shapes.get_symbolic(y, ys) || !shapes.get_symbolic(z, zs)) {
        ctx.reject("Conv+Add", conv, "shape of the Conv output or of the residual input is not known statically");
        continue;
      }
      if (ys != zs) {
        ctx.reject("Conv+Add", conv, "mismatched shapes (or not provably equal): residual " + shapes.shape_str(zs) +
                                         " vs Conv output " + shapes.shape_str(ys));
        continue;
      }
      add = &a;
      pattern += "+Add";
      int after = idx.sole_consumer(a.outputs[0]);
      if (after >= 0 && !idx.captured(a.outputs[0]) && is_activation(g.nodes[size_t(after)])) act = &g.nodes[size_t(after)];
    } else if (is_activation(g.nodes[size_t(next)])) {
      act = &g.nodes[size_t(next)];
    } else {
      continue;
    }
    std::vector<float> params;
    std::string why;
    if (act && !activation_params(g, *act, params, why)) {
      ctx.reject(pattern + "+" + act->op_type, conv, why);
      act = nullptr;
    }
    if (act) pattern += "+" + act->op_type;
    if (!add && !act) continue;
    const Tensor* w = conv.inputs.size() > 1 ? constant_of(g, conv.inputs[1]) : nullptr;
    if (!w) {
      ctx.reject(pattern, conv, "non-constant weight");
      continue;
    }
    if (w->dtype() != DType::Float) {
      ctx.reject(pattern, conv, std::string("weight dtype ") + dtype_name(w->dtype()) + ", FusedConv is float32 only");
      continue;
    }
    if (!have_kernel) {
      ctx.reject(pattern, conv, "no basalt::FusedConv kernel is registered");
      continue;
    }
    Node& last = act ? *act : *add;
    std::vector<int> inputs = {conv.inputs[0], conv.inputs[1], conv.inputs.size() > 2 ? conv.inputs[2] : -1};
    if (add) inputs.push_back(z);
    while (!inputs.empty() && inputs.back() < 0) inputs.pop_back();
    std::vector<Attribute> attrs = conv.attrs;
    std::string name = conv.name;
    dead[ci] = true;
    if (act && add) dead[size_t(next)] = true;
    std::string act_type = act ? act->op_type : "";
    last.op_type = "FusedConv";
    last.domain = "basalt";
    last.opset = 1;
    last.name = name;
    last.inputs = std::move(inputs);
    last.attrs = std::move(attrs);
    last.outputs.resize(1);
    set_attr(last, make_attr_string("activation", act_type));
    if (!params.empty()) set_attr(last, make_attr_floats("activation_params", params));
    ctx.applied(pattern);
    any = true;
  }
  if (any) compact(g, dead);
}

// FusedConv (with an activation) -> Mul(., a) [-> Add(., b) | Sub(., b)], a and b constant float
// scalars -> the FusedConv with post_affine [a, b] (docs/fused_ops.md). The chain's last node is
// rewritten in place (it keeps its output), so the order stays topological.
void fuse_conv_post_affine(PassContext& ctx) {
  Graph& g = ctx.graph;
  const char* kPattern = "FusedConv+Mul/Add";
  GraphIndex idx(g);
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  // The constant float scalar operand of Mul/Add/Sub node n whose other operand is x (Sub: only
  // x - c), or NaN. Float only, unlike fuse_affine.cpp's other_scalar: an ill-typed Mul (a
  // double constant) is left to fail as it does unfused.
  auto scalar_of = [&](const Node& n, int x) -> double {
    const double nan = std::numeric_limits<double>::quiet_NaN();
    if (n.inputs.size() != 2 || n.inputs[0] == n.inputs[1]) return nan;
    if (is_op(n, "Sub") && n.inputs[0] != x) return nan;
    int o = n.inputs[0] == x ? n.inputs[1] : n.inputs[1] == x ? n.inputs[0] : -1;
    const Tensor* t = o >= 0 ? constant_of(g, o) : nullptr;
    if (!t || t->numel() != 1 || t->dtype() != DType::Float) return nan;
    return t->get_double(0);
  };
  // The node that alone reads v (not a graph output, not captured), or -1.
  auto sole = [&](int v) { return idx.captured(v) ? -1 : idx.sole_consumer(v); };
  for (size_t ci = 0; ci < g.nodes.size(); ++ci) {
    const Node& conv = g.nodes[ci];
    if (dead[ci] || conv.domain != "basalt" || conv.op_type != "FusedConv" || conv.outputs.size() != 1 ||
        conv.attr_string("activation", "").empty() || conv.find_attr("post_affine"))
      continue;
    float mul = 1.f, add = -0.f;
    int v = conv.outputs[0], next = sole(v), mul_node = -1, add_node = -1;
    if (next >= 0 && is_op(g.nodes[size_t(next)], "Mul")) {
      double k = scalar_of(g.nodes[size_t(next)], v);
      if (std::isnan(k)) {
        ctx.reject(kPattern, conv, "the Mul's other operand is not a constant float scalar");
        continue;
      }
      mul = float(k);
      mul_node = next;
      v = g.nodes[size_t(next)].outputs[0];
      next = sole(v);
    }
    if (next >= 0 && (is_op(g.nodes[size_t(next)], "Add") || is_op(g.nodes[size_t(next)], "Sub"))) {
      double k = scalar_of(g.nodes[size_t(next)], v);  // NaN: e.g. a residual Add of two tensors
      if (!std::isnan(k)) {
        add = is_op(g.nodes[size_t(next)], "Sub") ? -float(k) : float(k);
        add_node = next;
      }
    }
    if (mul_node < 0 && add_node < 0) continue;
    Node* last = &g.nodes[size_t(add_node >= 0 ? add_node : mul_node)];
    std::vector<int> inputs = conv.inputs;
    std::vector<Attribute> attrs = conv.attrs;
    std::string name = conv.name;
    dead[ci] = true;
    if (mul_node >= 0 && add_node >= 0) dead[size_t(mul_node)] = true;
    last->op_type = "FusedConv";
    last->domain = "basalt";
    last->opset = 1;
    last->name = std::move(name);
    last->inputs = std::move(inputs);
    last->attrs = std::move(attrs);
    last->outputs.resize(1);
    set_attr(*last, make_attr_floats("post_affine", {mul, add}));
    ctx.applied(kPattern);
    any = true;
  }
  if (any) compact(g, dead);
}

namespace {

// The activation node that alone reads `producer`'s output y (not captured by a subgraph), or -1;
// when an activation reads y among other readers, the candidate is rejected as `<kind>+activation`.
int sole_activation_reader(PassContext& ctx, const GraphIndex& idx, const Node& producer, int y, const char* kind) {
  const Graph& g = ctx.graph;
  int next = idx.sole_consumer(y);
  if (next >= 0 && !idx.captured(y) && is_activation(g.nodes[size_t(next)])) return next;
  bool act_reader = false;
  for (int c : idx.consumers(y)) act_reader |= is_activation(g.nodes[size_t(c)]);
  if (act_reader) ctx.reject(std::string(kind) + "+activation", producer, consumers_reason(idx, y, kind));
  return -1;
}

// Activation node `act` becomes basalt::<op> (version 1) named `name` over `inputs`, keeping its
// output; `attrs` first, then activation / activation_params.
void become_fused(Node& act, const char* op, std::string name, std::vector<int> inputs, std::vector<Attribute> attrs,
                  const std::vector<float>& params) {
  std::string act_type = act.op_type;
  act.op_type = op;
  act.domain = "basalt";
  act.opset = 1;
  act.name = std::move(name);
  act.inputs = std::move(inputs);
  act.attrs.clear();
  act.outputs.resize(1);
  for (auto& a : attrs) set_attr(act, std::move(a));
  set_attr(act, make_attr_string("activation", act_type));
  if (!params.empty()) set_attr(act, make_attr_floats("activation_params", params));
}

}  // namespace

void fuse_gemm_activation(PassContext& ctx) {
  Graph& g = ctx.graph;
  bool have_kernel = kernel_registered("FusedMatMul");
  GraphIndex idx(g);
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  for (size_t gi = 0; gi < g.nodes.size(); ++gi) {
    const Node& gemm = g.nodes[gi];
    if (!is_op(gemm, "Gemm") || gemm.outputs.empty() || gemm.outputs[0] < 0 || gemm.inputs.size() < 2) continue;
    int next = sole_activation_reader(ctx, idx, gemm, gemm.outputs[0], "Gemm");
    if (next < 0) continue;
    Node& act = g.nodes[size_t(next)];
    std::string pattern = "Gemm+" + act.op_type;
    std::vector<float> params;
    std::string why;
    if (!activation_params(g, act, params, why)) {
      ctx.reject(pattern, gemm, why);
      continue;
    }
    if (!have_kernel) {
      ctx.reject(pattern, gemm, "no basalt::FusedMatMul kernel is registered");
      continue;
    }
    // FusedMatMul's bias is 1-D over N; Gemm's C may be any shape broadcastable to [M, N].
    int bias = -1;
    if (gemm.inputs.size() > 2 && gemm.inputs[2] >= 0) {
      const Tensor* c = constant_of(g, gemm.inputs[2]);
      Shape bs;
      const Tensor* bw = constant_of(g, gemm.inputs[1]);
      if (!c) {
        ctx.reject(pattern, gemm, "non-constant C (bias)");
        continue;
      }
      if (!bw || bw->rank() != 2) {
        ctx.reject(pattern, gemm, "B is not a constant matrix, so N is unknown");
        continue;
      }
      int64_t n = gemm.attr_int("transB", 0) ? bw->dim(0) : bw->dim(1);
      bool row = (c->rank() == 1 && c->dim(0) == n) || (c->rank() == 2 && c->dim(0) == 1 && c->dim(1) == n);
      if (!row || c->dtype() != DType::Float) {
        ctx.reject(pattern, gemm, "mismatched shapes: C " + shape_str(c->shape()) + " is not a float bias over N=" +
                                      std::to_string(n));
        continue;
      }
      float beta = gemm.attr_float("beta", 1.0f);
      Tensor nb(DType::Float, {n});
      for (int64_t k = 0; k < n; ++k) nb.data<float>()[k] = beta * c->data<float>()[k];
      bias = add_constant(g, g.values[size_t(gemm.inputs[2])].name + "_bias", std::move(nb));
    }
    std::vector<int> inputs = {gemm.inputs[0], gemm.inputs[1]};
    if (bias >= 0) inputs.push_back(bias);
    std::string name = gemm.name;
    int64_t ta = gemm.attr_int("transA", 0), tb = gemm.attr_int("transB", 0);
    float alpha = gemm.attr_float("alpha", 1.0f);
    dead[gi] = true;
    become_fused(act, "FusedMatMul", name, std::move(inputs),
                 {make_attr_int("transA", ta), make_attr_int("transB", tb), make_attr_float("alpha", alpha)}, params);
    ctx.applied(pattern);
    any = true;
  }
  if (any) compact(g, dead);
}

void fuse_bn_activation(PassContext& ctx) {
  Graph& g = ctx.graph;
  bool have_kernel = kernel_registered("FusedBatchNormalization");
  GraphIndex idx(g);
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  for (size_t bi = 0; bi < g.nodes.size(); ++bi) {
    const Node& bn = g.nodes[bi];
    if (!is_op(bn, "BatchNormalization") || bn.outputs.size() != 1 || bn.outputs[0] < 0 || bn.inputs.size() != 5)
      continue;
    int next = sole_activation_reader(ctx, idx, bn, bn.outputs[0], "BatchNormalization");
    if (next < 0) continue;
    Node& act = g.nodes[size_t(next)];
    std::string pattern = "BatchNormalization+" + act.op_type;
    std::vector<float> params;
    std::string why;
    if (bn.opset >= 14 && bn.attr_int("training_mode", 0) != 0) {
      ctx.reject(pattern, bn, "training mode");
      continue;
    }
    if (bn.opset < 9 && bn.attr_int("spatial", 1) == 0) {
      ctx.reject(pattern, bn, "spatial=0");
      continue;
    }
    if (!activation_params(g, act, params, why)) {
      ctx.reject(pattern, bn, why);
      continue;
    }
    // The fused op carries the activation's parameters as float32 attributes: a float64 model's
    // Clip bounds would be rounded. X's declared type tells a float64 BatchNormalization (opset 15
    // lets the parameters' types differ from X's); where it is not declared, its constant
    // parameters do.
    const DType xt = bn.inputs[0] >= 0 ? g.values[size_t(bn.inputs[0])].type.elem : DType::Undefined;
    bool float64 = xt == DType::Double;
    if (xt == DType::Undefined)
      for (size_t k = 1; k < bn.inputs.size(); ++k)
        if (const Tensor* t = constant_of(g, bn.inputs[k])) float64 = float64 || t->dtype() == DType::Double;
    if (float64) {
      ctx.reject(pattern, bn, "float64 parameters (the fused activation's parameters are float32)");
      continue;
    }
    if (!have_kernel) {
      ctx.reject(pattern, bn, "no basalt::FusedBatchNormalization kernel is registered");
      continue;
    }
    std::vector<int> inputs = bn.inputs;
    std::string name = bn.name;
    float eps = bn.attr_float("epsilon", 1e-5f);
    dead[bi] = true;
    become_fused(act, "FusedBatchNormalization", name, std::move(inputs), {make_attr_float("epsilon", eps)}, params);
    ctx.applied(pattern);
    any = true;
  }
  if (any) compact(g, dead);
}

}  // namespace basalt
