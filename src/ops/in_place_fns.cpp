// The in-place rules of ops/op_traits.hpp (namespace in_place), declared by the ops whose kernels
// may write their output over an input.
#include "ops/op_traits.hpp"

#include "ops/common.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <span>

namespace basalt {

// The in-place contract, op by op (runtime/planner.cpp applies it). An op declares one of these
// only when its kernel, for the dtype and shapes checked here, (1) asks for output 0 with
// KernelContext::output_uninit (a zero-filled output() request would wipe the input first;
// ArenaRun::output refuses the in-place slot then, so a kernel that changes this falls back to
// the heap instead of computing garbage), and (2) computes each output element from the input
// elements at the same index only, reading them before it stores (row kernels of
// kernels/eltwise.hpp state "x and y may be the same pointer"; threads split the index range, so
// no thread reads what another wrote). Every rule is float32: the reference paths of other
// dtypes use output() and declare nothing.
//   - unary_f32: the fast_unary activations (ops/activation.cpp) and the float unary ops with a
//     vectorized kernel (ops/elementwise.cpp, kFastUn): kernels::unary_f32 over the whole tensor.
//   - binary_f32 (Add/Sub/Mul/Div): binary_f32_plan walks output rows in order; an operand with
//     the output's shape is read at the output's own offsets. A broadcast operand is read at other
//     offsets, so it is never aliased (the shape check excludes it).
//   - batch_norm_f32 (inference): kernels' affine row per (n, c) plane.
//   - softmax_f32 over contiguous rows (inner size 1): the row kernel reads the row for its max
//     before it writes, then rewrites its own output.
//   - layer_norm_f32 with gamma/beta covering the normalized dims (layernorm_fast): the row kernel
//     reads the whole row (mean, variance) before it writes it.
// Not declared, and why: FusedConv's residual Z (the GEMM accumulates partial K sums into Y before
// the epilogue reads Z), Pow/Where/Cast (output() or different dtypes), ops that may pass their
// input through (Clip is safe: its float path always writes through unary_f32).
namespace in_place {
namespace {
using Sig = std::span<const std::pair<DType, Shape>>;
using Out0 = std::pair<DType, Shape>;
bool same(Sig in, const Out0& out, size_t k) {
  return k < in.size() && in[k].first == out.first && in[k].second == out.second;
}
int64_t attr_or(const Node& n, const char* name, int64_t def) { return n.has_attr(name) ? n.attr_int(name, def) : def; }
}  // namespace

std::vector<int> unary_f32(const Node& n, Sig in, const Out0& out) {
  if (out.first != DType::Float || !same(in, out, 0)) return {};
  return {0};
}

std::vector<int> binary_f32(const Node& n, Sig in, const Out0& out) {
  std::vector<int> r;
  if (out.first != DType::Float) return r;
  if (same(in, out, 0)) r.push_back(0);
  if (same(in, out, 1)) r.push_back(1);
  return r;
}

std::vector<int> softmax_f32(const Node& n, Sig in, const Out0& out) {
  if (out.first != DType::Float || !same(in, out, 0)) return {};
  const Shape& s = out.second;
  // Opset 13+: one axis, contiguous only when it is the last one. Before 13 the input is
  // flattened at `axis` into rows, always contiguous.
  if (n.opset >= 13 && !s.empty()) {
    int64_t ax = attr_or(n, "axis", -1);
    if (ax < 0) ax += int64_t(s.size());
    if (ax != int64_t(s.size()) - 1) return {};
  }
  if (!s.empty() && s.back() == 0) return {};
  return {0};
}

std::vector<int> batch_norm_f32(const Node& n, Sig in, const Out0& out) {
  if (out.first != DType::Float || !same(in, out, 0)) return {};
  // basalt::FusedBatchNormalization / NchwcBatchNormalization have no training mode.
  if (n.domain.empty() && n.opset >= 14 && attr_or(n, "training_mode", 0) != 0) return {};
  if (n.outputs.size() > 1) return {};  // running statistics: training graphs
  return {0};
}

std::vector<int> layer_norm_f32(const Node& n, Sig in, const Out0& out) {
  if (out.first != DType::Float || !same(in, out, 0)) return {};
  const Shape& s = out.second;
  if (s.empty() || n.outputs.size() > 1) return {};  // mean / inv_std_dev outputs: not planned here
  int64_t ax = attr_or(n, "axis", -1);
  if (ax < 0) ax += int64_t(s.size());
  if (ax < 0 || ax >= int64_t(s.size())) return {};
  // layernorm_fast's condition: scale and bias are float, leading 1s then the normalized dims.
  const size_t norm = s.size() - size_t(ax);
  for (size_t k = 1; k < 3 && k < in.size(); ++k) {
    const Shape& t = in[k].second;
    if (t.size() == 1 && t[0] < 0) continue;  // omitted input
    if (in[k].first != DType::Float || t.size() < norm) return {};
    const size_t lead = t.size() - norm;
    for (size_t d = 0; d < t.size(); ++d)
      if (t[d] != (d < lead ? 1 : s[size_t(ax) + d - lead])) return {};
  }
  return {0};
}

}  // namespace in_place

}  // namespace basalt
