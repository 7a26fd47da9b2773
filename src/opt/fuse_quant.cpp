// Quantized-graph fusions (issue 38).
//
// DynamicQuantizeLinear -> MatMulInteger -> Cast(float) -> Mul(scale) (-> Add(bias)) becomes one
// com.microsoft DynamicQuantizeMatMul (ops/quant_contrib.cpp): the pattern that ONNX Runtime's
// dynamic quantizer writes for every MatMul with constant weights (transformers, most published
// uint8 models). The scale is a_scale * b_scale, as a Mul node of DynamicQuantizeLinear's scale
// output and a constant, multiplied into the Cast's output (either operand order), or the two
// Muls one after the other. The fused kernel quantizes A, runs the integer GEMM and applies the
// scale and bias in its epilogue: the same float operations in the same order, so the outputs do
// not change. The DynamicQuantizeLinear stays where other nodes still read it (it often feeds
// the Q, K and V projections at once) and goes with remove_dead_nodes otherwise.
#include "opt/match_util.hpp"
#include "opt/passes.hpp"

#include <cstring>

namespace basalt {
namespace {

constexpr const char* kDynQuantMatMul = "DynamicQuantizeLinear+MatMulInteger";

// A constant float scale for B: one value, or one per column of B ([N], or [1, N]).
bool column_vector(const Tensor* t, int64_t N, DType dt) {
  if (!t || t->dtype() != dt) return false;
  if (t->numel() == 1) return true;
  if (t->numel() != N) return false;
  for (int d = 0; d + 1 < t->rank(); ++d)
    if (t->dim(d) != 1) return false;
  return true;
}

Match try_dynamic_quant_matmul(PassContext& ctx, const GraphIndex& ix, int i, std::vector<bool>& dead) {
  Graph& g = ctx.graph;
  const Node& mi = g.nodes[size_t(i)];
  if (!is_op(mi, "MatMulInteger") || mi.inputs.size() < 3 || mi.outputs.empty()) return Match::None;
  const Node* dq = producer_op(g, mi.inputs[0], "DynamicQuantizeLinear");
  if (!dq || dq->outputs.size() < 3 || dq->outputs[0] != mi.inputs[0]) return Match::None;
  auto reject = [&](const std::string& r) {
    ctx.reject(kDynQuantMatMul, mi, r);
    return Match::Rejected;
  };
  if (mi.inputs[2] != dq->outputs[2]) return reject("a_zero_point is not the DynamicQuantizeLinear's zero point");
  const int b = mi.inputs[1];
  const Tensor* bt = constant_of(g, b);
  if (!bt || bt->rank() != 2 || (bt->dtype() != DType::Int8 && bt->dtype() != DType::Uint8))
    return reject("B " + vname(g, b) + " is not a constant 2-D int8 / uint8 matrix");
  const int64_t N = bt->dim(1);
  const int bzp = mi.inputs.size() > 3 ? mi.inputs[3] : -1;
  if (bzp >= 0 && !column_vector(constant_of(g, bzp), N, bt->dtype()))
    return reject("b_zero_point " + vname(g, bzp) + " is not a constant scalar or per-column vector");
  // MatMulInteger -> Cast(to float)
  const int y = mi.outputs[0];
  const int ci = ix.sole_consumer(y);
  if (ci < 0) return reject("the MatMulInteger output " + fanout_reason(g, ix, y));
  const Node& cast = g.nodes[size_t(ci)];
  if (!is_op(cast, "Cast") || cast.attr_int("to", 0) != int64_t(DType::Float)) return reject("the MatMulInteger output is not cast to float");
  const int yc = cast.outputs[0];
  const int m1i = ix.sole_consumer(yc);
  if (m1i < 0) return reject("the Cast output " + fanout_reason(g, ix, yc));
  const Node& m1 = g.nodes[size_t(m1i)];
  if (!is_op(m1, "Mul")) return reject("the Cast output is not multiplied by the scale");
  const int a_scale = dq->outputs[1];
  int bs = -1, last = m1i;
  std::vector<int> chain = {i, ci, m1i};  // the nodes the fused op replaces
  const int other = other_input(m1, yc);
  if (other < 0) return reject("the scale Mul does not take the Cast output once");
  if (const Node* sm = producer_op(g, other, "Mul"); sm && other_input(*sm, a_scale) >= 0) {
    // Mul(cast, Mul(a_scale, b_scale))
    if (ix.sole_consumer(other) != m1i) return reject("the scale product " + fanout_reason(g, ix, other));
    bs = other_input(*sm, a_scale);
    chain.push_back(node_index(g, sm));
  } else if (other == a_scale) {
    // Mul(Mul(cast, a_scale), b_scale)
    const int o1 = m1.outputs[0];
    const int m2i = ix.sole_consumer(o1);
    if (m2i < 0 || !is_op(g.nodes[size_t(m2i)], "Mul")) return reject("the Cast output times a_scale is not multiplied by b_scale");
    bs = other_input(g.nodes[size_t(m2i)], o1);
    last = m2i;
    chain.push_back(m2i);
  } else {
    return reject("the Cast output is multiplied by " + vname(g, other) + ", not by the DynamicQuantizeLinear's scale");
  }
  if (bs < 0 || !column_vector(constant_of(g, bs), N, DType::Float))
    return reject("b_scale " + vname(g, bs) + " is not a constant float scalar or per-column vector");
  // optional bias Add
  int bias = -1;
  const int lo = g.nodes[size_t(last)].outputs[0];
  const int ai = ix.sole_consumer(lo);
  if (ai >= 0 && is_op(g.nodes[size_t(ai)], "Add")) {
    const int bv = other_input(g.nodes[size_t(ai)], lo);
    const Tensor* b1 = bv >= 0 ? constant_of(g, bv) : nullptr;
    if (b1 && b1->numel() == N && column_vector(b1, N, DType::Float)) {
      bias = bv;
      last = ai;
      chain.push_back(ai);
    }
  }
  if (!ctx.nonstandard_ok()) return reject("com.microsoft::DynamicQuantizeMatMul is not an ai.onnx operator (--standard-ops)");
  // scale and bias as 1-D (or scalar) vectors, as the fused op takes them
  auto flat = [&](int v) {
    const Tensor* t = constant_of(g, v);
    if (t->rank() <= 1) return v;
    Tensor e = Tensor::from_vector(std::vector<float>(t->data<float>(), t->data<float>() + t->numel()), {t->numel()});
    return add_constant(g, g.values[size_t(v)].name + "_1d", std::move(e));
  };
  const int bs1 = flat(bs), bias1 = bias >= 0 ? flat(bias) : -1;
  int bz1 = bzp;
  if (bzp >= 0 && constant_of(g, bzp)->rank() > 1) {
    const Tensor* t = constant_of(g, bzp);
    Tensor e(t->dtype(), {t->numel()});
    std::memcpy(e.raw(), t->raw(), size_t(t->numel()));
    bz1 = add_constant(g, g.values[size_t(bzp)].name + "_1d", std::move(e));
  }
  for (int k : chain)
    if (k != last) dead[size_t(k)] = true;
  Node& out = g.nodes[size_t(last)];
  rewrite(out, "com.microsoft", "DynamicQuantizeMatMul", 1, {dq->inputs[0], b, bs1, bz1, bias1}, {});
  adopt_first_name(g, dead, last);
  if (!ctx.model.opsets.count("com.microsoft")) ctx.model.opsets["com.microsoft"] = 1;
  ctx.applied(kDynQuantMatMul);
  return Match::Applied;
}

}  // namespace

void fuse_dynamic_quant_matmul(PassContext& ctx) {
  scan(ctx, [&](const GraphIndex& ix, int i, std::vector<bool>& dead) { return try_dynamic_quant_matmul(ctx, ix, i, dead); });
}

}  // namespace basalt
