// Affine and HardSwish patterns that exporters spell out with element-wise ops:
//   fuse_conv_affine (Basic): Conv -> Mul / Add / Sub / Div by a constant that is a scalar or one
//     value per output channel, folded into the Conv's weights and bias (PaddleOCR's PP-LCNet
//     writes a "learnable affine block" after every conv: Mul by a scalar, then Add a scalar).
//     The same constants after an inference BatchNormalization fold into its scale and B
//     (DenseNet-121 writes BatchNormalization -> Mul -> Add -> Relu before every conv).
//   fuse_hardswish (Extended): x * Clip(x + 3, 0, 6) / 6 (or * 1/6, or x * Clip(..) / 6 in the other
//     order, or x * HardSigmoid(x, 1/6, 0.5)) -> HardSwish(x), which fuse_conv_activation then puts
//     into the conv's epilogue.
// Both replace several memory-bound passes over an activation by nothing (folded) or by one op.
#include "ops/kernel.hpp"
#include "opt/passes.hpp"

#include <cmath>
#include <limits>
#include <optional>

namespace basalt {

namespace {

bool is_op(const Node& n, const char* op) { return n.domain.empty() && n.op_type == op; }

// Per-output-channel values of constant c when c, broadcast against a conv output of rank `rank`
// with M channels (axis 1), is a scalar or varies only along the channel axis. Empty when not.
std::vector<double> per_channel(const Tensor& c, int64_t M, int rank) {
  if (c.dtype() != DType::Float || c.rank() > rank) return {};
  std::vector<double> out(static_cast<size_t>(M));
  if (c.numel() == 1) {
    for (auto& v : out) v = c.get_double(0);
    return out;
  }
  // Right-aligned broadcasting: c's axis k lines up with output axis k + (rank - c.rank()).
  const int off = rank - c.rank();
  for (int k = 0; k < c.rank(); ++k) {
    const int64_t want = k + off == 1 ? M : 1;
    if (c.dim(k) != want) return {};
  }
  if (off > 1) return {};  // the channel axis is not covered: a scalar would have matched above
  for (int64_t m = 0; m < M; ++m) out[size_t(m)] = c.get_double(m);
  return out;
}

bool near(double v, double want) { return std::fabs(v - want) <= 1e-6 * std::max(1.0, std::fabs(want)); }

// The constant scalar among n's two inputs other than `x`, or NaN.
double other_scalar(const Graph& g, const Node& n, int x) {
  if (n.inputs.size() != 2) return std::numeric_limits<double>::quiet_NaN();
  int o = n.inputs[0] == x ? n.inputs[1] : n.inputs[1] == x ? n.inputs[0] : -1;
  const Tensor* t = o >= 0 ? constant_of(g, o) : nullptr;
  if (!t || t->numel() != 1 || (t->dtype() != DType::Float && t->dtype() != DType::Double))
    return std::numeric_limits<double>::quiet_NaN();
  return t->get_double(0);
}

// Which operand (0 or 1) of Mul/Add/Sub/Div node `op` is the output of a live `producer_op` node,
// or -1. Sub and Div only count their left operand (x - c and x / c fold; c - x and c / x do not).
int operand_from(const Graph& g, const GraphIndex& idx, const Node& op, const char* producer_op,
                 const std::vector<bool>& dead) {
  const bool left_only = is_op(op, "Sub") || is_op(op, "Div");
  for (int s = 0; s < (left_only ? 1 : 2); ++s) {
    const Node* p = producer_node(g, op.inputs[size_t(s)]);
    if (p && is_op(*p, producer_op) && !dead[size_t(idx.producer(op.inputs[size_t(s)]))]) return s;
  }
  return -1;
}

// Node p's inputs 1 (weights or scale) and 2 (bias, if any) replaced by new constants: `scaled`
// (null: input 1 stays) and `bias`; an old constant no other node reads is dropped. Returns the
// value ids of input 1 and the new bias.
std::pair<int, int> replace_scale_bias(Graph& g, const GraphIndex& idx, int p, Tensor* scaled, Tensor bias) {
  const Node& n = g.nodes[size_t(p)];
  const std::string base = g.values[size_t(n.inputs[1])].name;
  int sv = n.inputs[1];
  if (scaled) {
    if (idx.sole_consumer(n.inputs[1]) == p) drop_constant(g, n.inputs[1]);
    sv = add_constant(g, base + "_scaled", std::move(*scaled));
  }
  if (n.inputs.size() > 2 && n.inputs[2] >= 0 && idx.sole_consumer(n.inputs[2]) == p) drop_constant(g, n.inputs[2]);
  int bv = add_constant(g, base + "_affine_bias", std::move(bias));
  return {sv, bv};
}

// `last` (the chain's last node, whose output keeps its name) becomes a copy of `from` with `inputs`.
void become(Node& last, const Node& from, std::vector<int> inputs) {
  last.op_type = from.op_type;
  last.domain = from.domain;
  last.opset = from.opset;
  last.attrs = from.attrs;
  last.inputs = std::move(inputs);
  last.name = from.name;
  last.kernel.reset();
}

// The per-channel factor of Mul/Add/Sub/Div node `op` by constant c applied to x (x op c, or c op
// x for Mul and Add), as k with x*k (Mul, Div) or x+k (Add, Sub); empty with a reason if unusable.
std::vector<double> affine_factor(const Node& op, const Tensor& c, int64_t M, int rank, std::string& why) {
  const bool sub = is_op(op, "Sub"), div = is_op(op, "Div");
  std::vector<double> k = per_channel(c, M, rank);
  if (k.empty()) {
    why = "the constant is neither a scalar nor one value per output channel";
    return k;
  }
  if (div)
    for (double& v : k) {
      if (v == 0.0) {
        why = "division by zero";
        return {};
      }
      v = 1.0 / v;
    }
  if (sub)
    for (double& v : k) v = -v;
  return k;
}

// Mul/Add/Sub/Div node ni of x = the sole-consumed output of an inference BatchNormalization with
// constant float32 scale and B, by a per-channel constant: folded into scale and B (y = x*s + t
// with s, t from the BN: Mul/Div scale both, Add/Sub shift B). The node becomes the BN.
// `shapes`: the graph's static shapes, inferred on first use (this round's rewrites keep every
// existing value's shape).
bool fold_into_batchnorm(PassContext& ctx, GraphIndex& idx, size_t ni, std::vector<bool>& dead,
                         std::vector<bool>& rewritten, std::optional<StaticShapes>& shapes) {
  const char* kPattern = "BatchNormalization+Mul/Add";
  Graph& g = ctx.graph;
  Node& op = g.nodes[ni];
  const bool mul = is_op(op, "Mul"), div = is_op(op, "Div");
  const int side = operand_from(g, idx, op, "BatchNormalization", dead);
  if (side < 0) return false;
  const int y = op.inputs[size_t(side)];
  const int bi = idx.producer(y);
  const Node& bn = g.nodes[size_t(bi)];
  if (rewritten[size_t(bi)] || idx.sole_consumer(y) != int(ni) || bn.outputs.size() != 1 || bn.inputs.size() != 5)
    return false;
  const Tensor* c = constant_of(g, op.inputs[size_t(1 - side)]);
  if (!c) return false;
  if (bn.opset >= 14 && bn.attr_int("training_mode", 0) != 0) {
    ctx.reject(kPattern, bn, "training mode");
    return false;
  }
  const Tensor* sc = constant_of(g, bn.inputs[1]);
  const Tensor* b = constant_of(g, bn.inputs[2]);
  if (!sc || !b || sc->dtype() != DType::Float || b->dtype() != DType::Float || sc->numel() != b->numel()) {
    ctx.reject(kPattern, bn, "scale and B must be float32 constants");
    return false;
  }
  // The constant broadcasts against the BN's output, whose rank only shape inference knows.
  if (!shapes) shapes = infer_static_shapes(g);
  Shape xs;
  if (!shapes->get_symbolic(bn.inputs[0], xs) || xs.size() < 2) {
    ctx.reject(kPattern, bn, "the input's rank is not known at load");
    return false;
  }
  const int64_t C = sc->numel();
  std::string why;
  std::vector<double> k = affine_factor(op, *c, C, int(xs.size()), why);
  if (k.empty()) {
    ctx.reject(kPattern, op, why);
    return false;
  }
  Tensor ns = *sc, nb(DType::Float, {C});
  if (mul || div) {
    ns = Tensor(DType::Float, {C});
    for (int64_t m = 0; m < C; ++m) {
      ns.data<float>()[m] = float(double(sc->data<float>()[m]) * k[size_t(m)]);
      nb.data<float>()[m] = float(double(b->data<float>()[m]) * k[size_t(m)]);
    }
  } else {
    for (int64_t m = 0; m < C; ++m) nb.data<float>()[m] = float(double(b->data<float>()[m]) + k[size_t(m)]);
  }
  auto [sv, bv] = replace_scale_bias(g, idx, bi, mul || div ? &ns : nullptr, std::move(nb));
  Node& bn_now = g.nodes[size_t(bi)];
  become(g.nodes[ni], bn_now, {bn_now.inputs[0], sv, bv, bn_now.inputs[3], bn_now.inputs[4]});
  dead[size_t(bi)] = true;
  rewritten[ni] = true;
  ctx.applied(kPattern);
  return true;
}

// One folding round: every Mul/Add/Sub/Div whose left (or, for Mul/Add, either) operand is the
// sole-consumed output of a float Conv with constant weights, and whose other operand is a
// per-channel constant, becomes that Conv with scaled weights / shifted bias. Returns whether
// anything was folded.
bool fold_round(PassContext& ctx) {
  const char* kPattern = "Conv+Mul/Add";
  Graph& g = ctx.graph;
  GraphIndex idx(g);
  std::vector<bool> dead(g.nodes.size(), false), rewritten(g.nodes.size(), false);
  std::optional<StaticShapes> shapes;
  bool any = false;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    Node& op = g.nodes[ni];
    const bool mul = is_op(op, "Mul"), add = is_op(op, "Add"), sub = is_op(op, "Sub"), div = is_op(op, "Div");
    if (!(mul || add || sub || div) || op.inputs.size() != 2 || op.outputs.size() != 1) continue;
    // Which operand is the conv output (Sub and Div: only the left one, x - c and x / c).
    const int conv_side = operand_from(g, idx, op, "Conv", dead);
    if (conv_side < 0) {
      if (fold_into_batchnorm(ctx, idx, ni, dead, rewritten, shapes)) any = true;
      continue;
    }
    const int y = op.inputs[size_t(conv_side)];
    const int ci = idx.producer(y);
    const Node& conv = g.nodes[size_t(ci)];
    // A conv this round already rewrote (Conv -> Mul folded, now this Add) waits for the next
    // round: its new weights are not in this round's index.
    if (rewritten[size_t(ci)]) continue;
    if (idx.sole_consumer(y) != int(ni) || conv.outputs.size() != 1) continue;
    const Tensor* c = constant_of(g, op.inputs[size_t(1 - conv_side)]);
    if (!c) continue;  // an ordinary residual Add: fuse_conv_activation's business
    const Tensor* w = conv.inputs.size() > 1 ? constant_of(g, conv.inputs[1]) : nullptr;
    const bool has_b = conv.inputs.size() > 2 && conv.inputs[2] >= 0;
    const Tensor* b = has_b ? constant_of(g, conv.inputs[2]) : nullptr;
    if (!w || (has_b && !b)) {
      ctx.reject(kPattern, conv, "non-constant weight or bias");
      continue;
    }
    if (w->dtype() != DType::Float || (b && b->dtype() != DType::Float) || w->rank() < 3) {
      ctx.reject(kPattern, conv, "only float32 convs are folded");
      continue;
    }
    const int64_t M = w->dim(0);
    std::string why;
    std::vector<double> k = affine_factor(op, *c, M, int(w->rank()), why);
    if (k.empty()) {
      ctx.reject(kPattern, op, why);
      continue;
    }
    // New weights (scaled for Mul/Div) and bias.
    const int64_t per = w->numel() / M;
    Tensor nw = *w;
    Tensor nb(DType::Float, {M});
    if (b)
      for (int64_t m = 0; m < M; ++m) nb.data<float>()[m] = b->data<float>()[m];
    if (mul || div) {
      nw = Tensor::uninit(DType::Float, w->shape());
      const float* src = w->data<float>();
      float* dst = nw.data<float>();
      for (int64_t m = 0; m < M; ++m) {
        const float s = float(k[size_t(m)]);
        for (int64_t j = 0; j < per; ++j) dst[m * per + j] = src[m * per + j] * s;
        nb.data<float>()[m] = float(double(nb.data<float>()[m]) * k[size_t(m)]);
      }
    } else {
      for (int64_t m = 0; m < M; ++m) nb.data<float>()[m] = float(double(nb.data<float>()[m]) + k[size_t(m)]);
    }
    auto [wv, bv] = replace_scale_bias(g, idx, ci, mul || div ? &nw : nullptr, std::move(nb));
    // The Mul/Add node becomes the Conv (it is the chain's last node; its output keeps its name).
    Node& conv_now = g.nodes[size_t(ci)];
    become(g.nodes[ni], conv_now, {conv_now.inputs[0], wv, bv});
    dead[size_t(ci)] = true;
    rewritten[ni] = true;
    ctx.applied(kPattern);
    any = true;
  }
  if (any) compact(g, dead);
  return any;
}

}  // namespace

void fuse_conv_affine(PassContext& ctx) {
  // A chain Conv -> Mul -> Add folds in two rounds (the Mul's node is the Conv in the second).
  for (int round = 0; round < 8 && fold_round(ctx); ++round) {
  }
}

void fuse_hardswish(PassContext& ctx) {
  const char* kPattern = "HardSwish";
  Graph& g = ctx.graph;
  GraphIndex idx(g);
  std::vector<bool> dead(g.nodes.size(), false);
  bool any = false;
  // An intermediate of the pattern: read only by the next node of the pattern.
  auto single_use = [&](int v, int consumer) { return v >= 0 && idx.sole_consumer(v) == consumer; };
  auto model_opset = [&] {
    auto it = ctx.model.opsets.find("");
    return it == ctx.model.opsets.end() ? 0 : int(it->second);
  };
  for (size_t li = 0; li < g.nodes.size(); ++li) {
    Node& last = g.nodes[li];
    if (dead[li] || last.outputs.size() != 1) continue;
    // Candidates end in Div(m, 6), Mul(m, 1/6) or Mul(x, gate).
    std::vector<int> chain;  // node indices of the pattern other than `last`
    int x = -1;
    auto match_gate = [&](int gate_v, int consumer, int want_x) -> bool {
      // gate_v = Clip(Add(want_x, 3), 0, 6) [optionally / 6 or * 1/6 applied by the caller]
      const Node* clip = producer_node(g, gate_v);
      if (!clip || !is_op(*clip, "Clip") || !single_use(gate_v, consumer)) return false;
      int clip_i = idx.producer(gate_v);
      double lo = 0, hi = 0;
      if (clip->opset < 11) {
        lo = clip->attr_float("min", std::numeric_limits<float>::lowest());
        hi = clip->attr_float("max", std::numeric_limits<float>::max());
      } else {
        const Tensor* tl = clip->inputs.size() > 1 && clip->inputs[1] >= 0 ? constant_of(g, clip->inputs[1]) : nullptr;
        const Tensor* th = clip->inputs.size() > 2 && clip->inputs[2] >= 0 ? constant_of(g, clip->inputs[2]) : nullptr;
        if (!tl || !th || tl->numel() != 1 || th->numel() != 1) return false;
        lo = tl->get_double(0);
        hi = th->get_double(0);
      }
      if (!near(lo, 0.0) || !near(hi, 6.0)) return false;
      const Node* a = producer_node(g, clip->inputs[0]);
      if (!a || !is_op(*a, "Add") || !single_use(clip->inputs[0], clip_i)) return false;
      if (!near(other_scalar(g, *a, want_x), 3.0)) return false;
      chain.push_back(clip_i);
      chain.push_back(idx.producer(clip->inputs[0]));
      return true;
    };
    // Form A: last = Div(m, 6) or Mul(m, 1/6) with m = Mul(x, Clip(x + 3)).
    // Form B: last = Mul(x, g) with g = Div(Clip(x + 3), 6) / Mul(Clip(..), 1/6) / HardSigmoid(x, 1/6, .5).
    bool ok = false;
    if (is_op(last, "Div") || is_op(last, "Mul")) {
      for (int s = 0; s < 2 && !ok; ++s) {
        if (last.inputs.size() != 2) break;
        int mv = last.inputs[size_t(s)];
        double k = other_scalar(g, last, mv);
        bool scale6 = is_op(last, "Div") ? (s == 0 && near(k, 6.0)) : near(k, 1.0 / 6.0);
        const Node* m = producer_node(g, mv);
        if (scale6 && m && is_op(*m, "Mul") && m->inputs.size() == 2 && single_use(mv, int(li))) {
          int mi = idx.producer(mv);
          for (int t = 0; t < 2 && !ok; ++t) {
            chain.clear();
            int cand_x = m->inputs[size_t(t)], gate = m->inputs[size_t(1 - t)];
            if (match_gate(gate, mi, cand_x)) {
              chain.push_back(mi);
              x = cand_x;
              ok = true;
            }
          }
        }
      }
    }
    if (!ok && is_op(last, "Mul") && last.inputs.size() == 2) {
      for (int t = 0; t < 2 && !ok; ++t) {
        chain.clear();
        int cand_x = last.inputs[size_t(t)], gv = last.inputs[size_t(1 - t)];
        const Node* gn = producer_node(g, gv);
        if (!gn || !single_use(gv, int(li))) continue;
        int gi = idx.producer(gv);
        if (is_op(*gn, "HardSigmoid") && gn->inputs.size() == 1 && gn->inputs[0] == cand_x &&
            near(gn->attr_float("alpha", 0.2f), 1.0 / 6.0) && near(gn->attr_float("beta", 0.5f), 0.5)) {
          chain.push_back(gi);
          x = cand_x;
          ok = true;
        } else if ((is_op(*gn, "Div") || is_op(*gn, "Mul")) && gn->inputs.size() == 2) {
          for (int s = 0; s < 2 && !ok; ++s) {
            int cv = gn->inputs[size_t(s)];
            double k = other_scalar(g, *gn, cv);
            bool scale6 = is_op(*gn, "Div") ? (s == 0 && near(k, 6.0)) : near(k, 1.0 / 6.0);
            if (scale6 && match_gate(cv, gi, cand_x)) {
              chain.push_back(gi);
              x = cand_x;
              ok = true;
            }
          }
        }
      }
    }
    if (!ok) continue;
    bool clash = false;
    for (int c : chain) clash = clash || dead[size_t(c)];
    if (clash) continue;
    const int opset = model_opset();
    if (opset < 14 && ctx.opts.standard_ops) {
      ctx.reject(kPattern, last, "ai.onnx HardSwish needs opset 14 and the model imports opset " + std::to_string(opset) +
                                     " (--standard-ops keeps the model's opset)");
      continue;
    }
    for (int c : chain) dead[size_t(c)] = true;
    // The chain's last node becomes HardSwish(x); it keeps its output (and so the output's name).
    last.op_type = "HardSwish";
    last.domain = "";
    last.opset = std::max(14, opset);
    last.inputs = {x};
    last.attrs.clear();
    last.kernel.reset();
    ctx.applied(kPattern);
    any = true;
  }
  if (any) compact(g, dead);
}

}  // namespace basalt
