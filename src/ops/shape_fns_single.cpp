// The shape rules of single ops (ops/op_traits.hpp): each mirrors what its kernel in
// ops/<family>.cpp asks its output() for; where the kernel would fail on the given shapes or
// attributes the rule gives up instead. The rules several ops share are in ops/shape_fns.cpp.
#include "ops/op_traits.hpp"

#include "ops/common.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>
#include <span>

namespace basalt {
namespace shapes {

namespace {

bool float_type(DType t) { return t == DType::Float || t == DType::Double || t == DType::Float16 || t == DType::BFloat16; }
bool numeric_type(DType t) { return visit_numeric(t, []<class T>() {}); }
bool int8_type(DType t) { return t == DType::Int8 || t == DType::Uint8; }

// A `dtype`-style attribute (ops/signal.cpp dtype_attr): absent -> dflt, else a known type > 0.
bool dtype_attr_or(const Node& n, const char* name, DType dflt, DType& dt) {
  dt = dflt;
  if (!n.has_attr(name)) return true;
  const int64_t v = n.attr_int(name);
  if (v <= 0 || !dtype_attr_known(v)) return false;
  dt = DType(int32_t(v));
  return true;
}

// A present optional input whose shape is known must equal `want`; an absent one is fine, a present
// one of unknown shape too (only its contents are read, the kernel checks it).
bool optional_shape_is(const ShapeInputs& in, size_t i, const Shape& want) {
  if (i >= in.size() || !in[i] || !in[i]->known()) return true;
  return in[i]->shape == want;
}
bool optional_numel_is(const ShapeInputs& in, size_t i, int64_t want) {
  if (i >= in.size() || !in[i] || !in[i]->known()) return true;
  int64_t k;
  return checked_numel(in[i]->shape, k) && k == want;
}

// The window attributes as parse_win (ops/nn.cpp) accepts them.
bool win_attrs_ok(const Node& n) {
  if (!auto_pad_of(n)) return false;
  for (const char* name : {"kernel_shape", "strides", "dilations", "pads"}) {
    for (int64_t v : n.attr_ints(name, {})) {
      if (v > INT32_MAX) return false;
      if (std::string(name) == "pads" ? v < 0 : v <= 0) return false;
    }
  }
  return true;
}

// The loss reduction attribute (ops/reduce.cpp parse_reduction): 0 none, 1 sum or mean, -1 bad.
int loss_reduction(const Node& n) {
  const std::string s = n.attr_string("reduction", "mean");
  if (s == "none") return 0;
  if (s == "sum" || s == "mean") return 1;
  return -1;
}

// NegativeLogLikelihoodLoss / SoftmaxCrossEntropyLoss output 0: [N, d1, ...] (input 0 without
// its class axis 1) for reduction none, a scalar otherwise; input 0's dtype.
bool loss_output(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const Shape& x = in[0]->shape;
  if (!float_type(in[0]->dtype) || x.size() < 2) return false;
  Shape t = x;
  t.erase(t.begin() + 1);
  if (in[1]->shape != t || !dtype_is_integer(in[1]->dtype)) return false;
  if (!optional_numel_is(in, 2, x[1])) return false;  // weight: one per class
  const int red = loss_reduction(n);
  if (red < 0) return false;
  set(out, 0, in[0]->dtype, red == 0 ? t : Shape{});
  return true;
}

// The ai.onnx.preview.training optimizers (ops/misc.cpp): inputs R, T, then `groups` runs of n
// tensors; outputs `out_groups` runs of n, output g*n+k taking tensor k's (X_k's) dtype and shape.
bool training_optimizer(const ShapeInputs& in, ShapeOutputs& out, size_t groups, size_t out_groups) {
  if (in.size() <= 2 || (in.size() - 2) % groups) return false;
  const size_t cnt = (in.size() - 2) / groups;
  if (out.size() != cnt * out_groups || !in[0] || !in[1]) return false;  // R, T: read, not sized by
  for (size_t k = 0; k < cnt; ++k) {
    if (!has(in, 2 + k)) return false;
    const InferredValue& x = *in[2 + k];
    for (size_t g = 0; g < groups; ++g) {
      const size_t i = 2 + g * cnt + k;
      if (!has(in, i) || in[i]->shape != x.shape || !dtype_is_float(in[i]->dtype)) return false;
    }
    for (size_t g = 0; g < out_groups; ++g) set(out, g * cnt + k, x.dtype, x.shape);
  }
  return true;
}

// RandomUniform / RandomNormal attributes (ops/signal.cpp): low <= high, scale > 0.
bool random_params_ok(const Node& n, bool normal) {
  if (normal) {
    const double scale = n.attr_float("scale", 1.0f);
    return scale > 0;
  }
  const double lo = n.attr_float("low", 0.0f), hi = n.attr_float("high", 1.0f);
  return lo <= hi;
}

}  // namespace

// Bernoulli: input 0's shape; the dtype attribute, else input 0's (a float type: the kernel reads
// the probabilities as floats).
bool bernoulli(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !float_type(in[0]->dtype)) return false;
  DType dt;
  if (!dtype_attr_or(n, "dtype", in[0]->dtype, dt)) return false;
  if (dt != DType::Bool && !numeric_type(dt)) return false;
  set(out, 0, dt, in[0]->shape);
  return true;
}

// BitCast: input 0's shape as `to`, between types of the same byte size (not string, not
// sub-byte).
bool bitcast(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const int64_t to = n.attr_int("to");
  if (to <= 0 || !dtype_attr_known(to)) return false;
  const DType target = DType(int32_t(to)), src = in[0]->dtype;
  if (target == DType::String || src == DType::String || src == DType::Undefined) return false;
  if (dtype_file_bits(target) < 8 || dtype_file_bits(src) < 8 || dtype_size(src) != dtype_size(target)) return false;
  set(out, 0, target, in[0]->shape);
  return true;
}

// CausalConvWithState: X [B, C, L], weight [C, C/group, K] -> output [B, C, L] and present_state
// [B, C, K-1], both X's dtype.
bool causal_conv_with_state(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const std::string act = n.attr_string("activation", "none");
  if (act != "none" && !act.empty() && act != "silu" && act != "swish") return false;
  const Shape &x = in[0]->shape, &w = in[1]->shape;
  if (!float_type(in[0]->dtype) || !float_type(in[1]->dtype) || x.size() != 3 || w.size() != 3) return false;
  const int64_t B = x[0], C = x[1], L = x[2], K = w[2];
  if (w[0] != C || w[1] <= 0 || C % w[1] != 0 || K <= 0) return false;
  const Shape state{B, C, K - 1};
  if (!optional_numel_is(in, 2, C) || !optional_shape_is(in, 3, state)) return false;
  set(out, 0, in[0]->dtype, {B, C, L});
  set(out, 1, in[0]->dtype, state);
  return true;
}

// DeformConv (2-D): X [N, C, H, W], W [M, C/group, KH, KW] -> [N, M, OH, OW] with Conv's window
// arithmetic on W's kernel; offset [N, 2*offset_group*KH*KW, OH, OW], mask [N,
// offset_group*KH*KW, OH, OW] and B [M] must agree.
bool deform_conv(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !win_attrs_ok(n)) return false;
  const Shape &x = in[0]->shape, &w = in[1]->shape;
  if (!float_type(in[0]->dtype) || x.size() != 4 || w.size() != 4) return false;
  const int64_t group = n.attr_int("group", 1), og = n.attr_int("offset_group", 1);
  if (group <= 0 || og <= 0 || group > INT32_MAX || og > INT32_MAX) return false;
  const int64_t N = x[0], C = x[1], M = w[0];
  int64_t wc, K, OK2;
  if (__builtin_mul_overflow(w[1], group, &wc) || wc != C || M % group != 0 || C % og != 0) return false;
  if (__builtin_mul_overflow(w[2], w[3], &K) || __builtin_mul_overflow(K, 2 * og, &OK2)) return false;
  const std::vector<int64_t> k{w[2], w[3]};
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != k) return false;
  Shape r{N, M, x[2], x[3]};
  if (!window_dims(n, in, x, k, false, r)) return false;
  if (in.size() < 3 || !in[2] || !optional_shape_is(in, 2, {N, OK2, r[2], r[3]})) return false;  // offset
  if (!optional_numel_is(in, 3, M) || !optional_shape_is(in, 4, {N, og * K, r[2], r[3]})) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

// Det: [..., M, M] -> [...].
bool det(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !float_type(in[0]->dtype)) return false;
  const Shape& x = in[0]->shape;
  if (x.size() < 2 || x[x.size() - 1] != x[x.size() - 2]) return false;
  set(out, 0, in[0]->dtype, Shape(x.begin(), x.end() - 2));
  return true;
}

// DynamicQuantizeLinear: y uint8 of x's shape, y_scale float scalar, y_zero_point uint8 scalar.
bool dynamic_quantize_linear(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || in[0]->dtype != DType::Float) return false;
  set(out, 0, DType::Uint8, in[0]->shape);
  set(out, 1, DType::Float, {});
  set(out, 2, DType::Uint8, {});
  return true;
}

// Einsum: the kernel's label bookkeeping (ops/reduce.cpp) on shapes: letters must agree, ellipsis
// dims broadcast (right-aligned), the output is the explicit term or, implicitly, the ellipsis
// dims then the letters seen once, in character order.
bool einsum(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  std::string eq;
  for (char c : n.attr_string("equation"))
    if (c != ' ' && c != '\t') eq += c;
  std::vector<std::string> terms;
  std::string lhs = eq, rhs;
  const size_t arrow = eq.find("->");
  const bool explicit_out = arrow != std::string::npos;
  if (explicit_out) {
    lhs = eq.substr(0, arrow);
    rhs = eq.substr(arrow + 2);
  }
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto term_ok = [](const std::string& t) {
    const size_t e = t.find("...");
    if (e != std::string::npos && t.find("...", e + 3) != std::string::npos) return false;
    for (size_t i = 0; i < t.size(); ++i) {
      if (e != std::string::npos && i >= e && i < e + 3) continue;
      if (!std::isalpha(static_cast<unsigned char>(t[i]))) return false;
    }
    return true;
  };
  for (const auto& t : terms)
    if (!term_ok(t)) return false;
  if (explicit_out && !term_ok(rhs)) return false;
  if (in.size() != terms.size() || in.size() > 1024) return false;
  for (size_t i = 0; i < in.size(); ++i)
    if (!has(in, i) || in[i]->dtype != in[0]->dtype) return false;
  const DType dt = in[0]->dtype;
  if (dt == DType::Bool || !numeric_type(dt)) return false;
  int64_t ell_rank = 0;
  for (size_t i = 0; i < in.size(); ++i)
    if (terms[i].find("...") != std::string::npos)
      ell_rank = std::max(ell_rank, int64_t(in[i]->shape.size()) - int64_t(terms[i].size() - 3));
  // Labels: letters as their character code (>= 0), ellipsis dim k (of ell_rank) as -1-k.
  auto labels_of = [&](const std::string& t, int64_t rank, bool is_out, std::vector<int64_t>& labels) {
    const size_t e = t.find("...");
    const int64_t letters = int64_t(t.size()) - (e == std::string::npos ? 0 : 3);
    int64_t ne = 0;
    if (e == std::string::npos) {
      if (!is_out && letters != rank) return false;
    } else {
      ne = is_out ? ell_rank : rank - letters;
      if (ne < 0) return false;
    }
    for (size_t i = 0; i < t.size(); ++i) {
      if (e != std::string::npos && i == e) {
        for (int64_t k = 0; k < ne; ++k) labels.push_back(-1 - (ell_rank - ne + k));
        i += 2;
        continue;
      }
      labels.push_back(int64_t(static_cast<unsigned char>(t[i])));
    }
    return true;
  };
  std::map<int64_t, int64_t> size, count;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& s = in[i]->shape;
    std::vector<int64_t> labels;
    if (!labels_of(terms[i], int64_t(s.size()), false, labels) || labels.size() != s.size()) return false;
    for (size_t d = 0; d < s.size(); ++d) {
      const int64_t l = labels[d], dim = s[d];
      ++count[l];
      auto it = size.find(l);
      if (it == size.end()) size[l] = dim;
      else if (it->second != dim) {
        if (l < 0 && dim == 1) continue;
        if (l < 0 && it->second == 1) {
          it->second = dim;
          continue;
        }
        return false;
      }
    }
  }
  std::vector<int64_t> out_labels;
  if (explicit_out) {
    if (!labels_of(rhs, 0, true, out_labels)) return false;
    for (int64_t l : out_labels)
      if ((l >= 0 && !size.count(l)) || std::count(out_labels.begin(), out_labels.end(), l) > 1) return false;
  } else {
    for (int64_t k = 0; k < ell_rank; ++k) out_labels.push_back(-1 - k);
    for (auto& [l, c] : count)
      if (l >= 0 && c == 1) out_labels.push_back(l);
  }
  Shape r;
  for (int64_t l : out_labels) {
    auto it = size.find(l);
    r.push_back(it == size.end() ? 1 : it->second);
  }
  set(out, 0, dt, r);
  return true;
}

// EyeLike: input 0's 2-D shape; the dtype attribute (0: none), else input 0's.
bool eye_like(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || in[0]->shape.size() != 2) return false;
  DType dt = in[0]->dtype;
  if (n.has_attr("dtype")) {
    const int64_t v = n.attr_int("dtype");
    if (!dtype_attr_known(v)) return false;
    if (DType(int32_t(v)) != DType::Undefined) dt = DType(int32_t(v));
  }
  if (dt != DType::Bool && !numeric_type(dt)) return false;
  set(out, 0, dt, in[0]->shape);
  return true;
}

// GatherND: indices.shape[:-1] + data.shape[batch_dims + k:], k = indices.shape[-1].
bool gather_nd(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const Shape &x = in[0]->shape, &ind = in[1]->shape;
  const DType dt = in[0]->dtype;
  if (dt == DType::Undefined || dtype_size(dt) == 0 || in[1]->dtype != DType::Int64) return false;
  const int64_t b = n.opset >= 12 ? n.attr_int("batch_dims", 0) : 0;
  const int64_t r = int64_t(x.size()), q = int64_t(ind.size());
  if (b < 0 || r < 1 || q < 1 || b >= std::min(r, q)) return false;
  const int64_t k = ind[size_t(q - 1)];
  if (k < 0 || k > r - b) return false;
  for (int64_t i = 0; i < b; ++i)
    if (x[size_t(i)] != ind[size_t(i)]) return false;
  Shape o(ind.begin(), ind.end() - 1);
  o.insert(o.end(), x.begin() + b + k, x.end());
  set(out, 0, dt, o);
  return true;
}

// GridSample: X [N, C, D1..Dr], grid [N, O1..Or, r] -> [N, C, O1..Or], X's dtype.
bool grid_sample(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const std::string mode = n.attr_string("mode", n.opset >= 20 ? "linear" : "bilinear");
  const bool cubic = mode == "cubic" || mode == "bicubic";
  if (!cubic && mode != "nearest" && mode != "linear" && mode != "bilinear" && mode != "trilinear") return false;
  const std::string pm = n.attr_string("padding_mode", "zeros");
  if (pm != "zeros" && pm != "border" && pm != "reflection") return false;
  const Shape &x = in[0]->shape, &g = in[1]->shape;
  if (!float_type(in[0]->dtype) || !float_type(in[1]->dtype)) return false;
  const int64_t r = int64_t(x.size()) - 2;
  if (r < 1 || g.size() != x.size() || g[0] != x[0] || g.back() != r || (cubic && r != 2)) return false;
  Shape o{x[0], x[1]};
  o.insert(o.end(), g.begin() + 1, g.end() - 1);
  set(out, 0, in[0]->dtype, o);
  return true;
}

// LinearAttention: query [B, T, Hq*dk], key [B, T, Hkv*dk], value [B, T, Hkv*dv] -> output [B, T,
// Hq*dv] (query's dtype) and present_state [B, Hkv, dk, dv] (past_state's dtype, else query's).
bool linear_attention(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !has(in, 2)) return false;
  const int64_t hq = n.attr_int("q_num_heads"), hkv = n.attr_int("kv_num_heads");
  if (hq <= 0 || hkv <= 0 || hq % hkv || hq > INT32_MAX) return false;
  const std::string rule = n.attr_string("update_rule", "gated_delta");
  if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta") return false;
  const DType dt = in[0]->dtype;
  if (!float_type(dt) || in[1]->dtype != dt || in[2]->dtype != dt) return false;
  const Shape &q = in[0]->shape, &k = in[1]->shape, &v = in[2]->shape;
  if (q.size() != 3 || k.size() != 3 || v.size() != 3) return false;
  const int64_t B = q[0], T = q[1];
  if (k[0] != B || v[0] != B || k[1] != T || v[1] != T) return false;
  if (hq > std::max<int64_t>(1, q[2]) || hkv > std::max<int64_t>(1, k[2])) return false;
  if (q[2] % hq || k[2] % hkv || v[2] % hkv) return false;
  const int64_t dk = q[2] / hq, dv = v[2] / hkv;
  if (k[2] / hkv != dk) return false;
  // Optional inputs past_state (3), decay (4), beta (5), erase_gate (6): decay with the gated
  // rules only, beta with the delta ones, erase_gate never without beta's rules.
  auto given = [&](size_t i) { return i < in.size() && in[i] != nullptr; };
  const bool gating = rule == "gated" || rule == "gated_delta", delta = rule == "delta" || rule == "gated_delta";
  if (gating != given(4) || delta != given(5) || (!delta && given(6))) return false;
  const Shape state{B, hkv, dk, dv};
  DType state_dt = dt;
  bool state_known = true;
  if (in.size() > 3 && in[3]) {
    if (!in[3]->known()) state_known = false;
    else if (!float_type(in[3]->dtype) || in[3]->shape != state) return false;
    else state_dt = in[3]->dtype;
  }
  int64_t hv;
  if (__builtin_mul_overflow(hq, dv, &hv)) return false;
  set(out, 0, dt, {B, T, hv});
  if (state_known) set(out, 1, state_dt, state);
  return true;
}

// MaxRoiPool: X [N, C, H, W], rois [R, 5] -> [R, C, pooled_h, pooled_w], X's dtype.
bool max_roi_pool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !n.has_attr("pooled_shape")) return false;
  const auto pooled = n.attr_ints("pooled_shape");
  if (pooled.size() != 2 || pooled[0] <= 0 || pooled[1] <= 0) return false;
  const Shape &x = in[0]->shape, &r = in[1]->shape;
  if (!float_type(in[0]->dtype) || x.size() != 4 || r.size() != 2 || r[1] != 5) return false;
  set(out, 0, in[0]->dtype, {r[0], x[1], pooled[0], pooled[1]});
  return true;
}

// MaxUnpool: [N, C, (D_i - 1) * stride_i + kernel_i - pad_begin_i - pad_end_i ...], or the
// output_shape input's values when it is given (then only a known value says the shape).
bool max_unpool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !win_attrs_ok(n) || !n.has_attr("kernel_shape")) return false;
  const Shape& x = in[0]->shape;
  if (x.size() < 3 || in[1]->shape != x || in[1]->dtype != DType::Int64 || !numeric_type(in[0]->dtype)) return false;
  const size_t nd = x.size() - 2;
  const auto k = n.attr_ints("kernel_shape");
  const auto s = n.attr_ints("strides", std::vector<int64_t>(nd, 1));
  const auto p = n.attr_ints("pads", std::vector<int64_t>(2 * nd, 0));
  if (k.size() != nd || s.size() != nd || p.size() != 2 * nd) return false;
  Shape r{x[0], x[1]};
  for (size_t i = 0; i < nd; ++i) {
    int64_t v;
    if (__builtin_mul_overflow(x[i + 2] - 1, s[i], &v) || __builtin_add_overflow(v, k[i] - p[i] - p[i + nd], &v))
      return false;
    r.push_back(v);
  }
  int64_t total;
  for (int64_t v : r)
    if (v <= 0) return false;
  if (!checked_numel(r, total)) return false;
  if (in.size() > 2 && in[2]) {
    std::vector<int64_t> os;
    if (!ints(in, 2, os) || os.size() != r.size()) return false;
    for (int64_t v : os)
      if (v < 0) return false;
    r = os;
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

// Multinomial: [batch_size, class_size] -> [batch_size, sample_size], int32 or int64.
bool multinomial(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !float_type(in[0]->dtype) || in[0]->shape.size() != 2 || in[0]->shape[1] < 1) return false;
  DType dt;
  if (!dtype_attr_or(n, "dtype", DType::Int32, dt) || (dt != DType::Int32 && dt != DType::Int64)) return false;
  const int64_t samples = n.attr_int("sample_size", 1);
  if (samples < 0) return false;
  set(out, 0, dt, {in[0]->shape[0], samples});
  return true;
}

bool negative_log_likelihood_loss(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  return loss_output(n, in, out);
}

// SoftmaxCrossEntropyLoss: the loss as NegativeLogLikelihoodLoss's, log_prob (if asked for) of
// the scores' shape and dtype.
bool softmax_cross_entropy_loss(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!loss_output(n, in, out)) return false;
  set(out, 1, in[0]->dtype, in[0]->shape);
  return true;
}

// QLinearConv: Conv's output shape (the kernel from W; kernel_shape must match it), y_zero_point's
// dtype.
bool qlinear_conv(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 3) || !has(in, 7)) return false;
  if (!auto_pad_of(n)) return false;
  const int64_t group = n.attr_int("group", 1);
  if (group <= 0) return false;
  const Shape &x = in[0]->shape, &w = in[3]->shape;
  if (!int8_type(in[0]->dtype) || !int8_type(in[3]->dtype) || !int8_type(in[7]->dtype)) return false;
  if (x.size() < 3 || w.size() != x.size()) return false;
  const int64_t C = x[1], M = w[0];
  if (C % group || M % group || w[1] != C / group) return false;
  const std::vector<int64_t> k(w.begin() + 2, w.end());
  if (n.has_attr("kernel_shape") && n.attr_ints("kernel_shape") != k) return false;
  const int64_t lim = int64_t(1) << 31;
  for (const char* name : {"strides", "dilations", "pads"})
    for (int64_t v : n.attr_ints(name, {}))
      if (v > lim || v < 0) return false;
  for (size_t i : {1, 2, 6, 7})
    if (!optional_numel_is(in, i, 1)) return false;
  for (size_t i : {4, 5})
    if (!optional_numel_is(in, i, 1) && !optional_numel_is(in, i, M)) return false;
  if (!optional_numel_is(in, 8, M)) return false;
  Shape r = x;
  r[1] = M;
  if (!window_dims(n, in, x, k, false, r)) return false;
  set(out, 0, in[7]->dtype, r);
  return true;
}

// QLinearMatMul: MatMul's output shape, y_zero_point's dtype.
bool qlinear_matmul(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 3) || !has(in, 7)) return false;
  if (!int8_type(in[0]->dtype) || !int8_type(in[3]->dtype) || !int8_type(in[7]->dtype)) return false;
  for (size_t i : {6, 7}) {
    if (!has(in, i) || !all_numeric(in[i]->shape)) return false;
    int64_t k;
    if (!checked_numel(in[i]->shape, k) || k != 1) return false;
  }
  Shape r;
  if (!matmul_shapes(in[0]->shape, in[3]->shape, false, false, r)) return false;
  set(out, 0, in[7]->dtype, r);
  return true;
}

// RandomUniform / RandomNormal: the shape attribute (at most 2^40 elements), the dtype attribute
// (a float type, float by default).
bool random_tensor(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  DType dt;
  if (!dtype_attr_or(n, "dtype", DType::Float, dt) || !float_type(dt) || !n.has_attr("shape")) return false;
  if (!random_params_ok(n, n.op_type == "RandomNormal")) return false;
  const Shape s = n.attr_ints("shape");
  int64_t total;
  if (!checked_numel(s, total) || total > (int64_t(1) << 40)) return false;
  set(out, 0, dt, s);
  return true;
}

// RandomUniformLike / RandomNormalLike: input 0's shape; the dtype attribute, else input 0's
// (a float type either way).
bool random_like(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  DType dt;
  if (!dtype_attr_or(n, "dtype", in[0]->dtype, dt) || !float_type(dt)) return false;
  if (!random_params_ok(n, n.op_type == "RandomNormalLike")) return false;
  set(out, 0, dt, in[0]->shape);
  return true;
}

// RoiAlign: X [N, C, H, W], rois [R, 4], batch_indices [R] -> [R, C, output_height,
// output_width], X's dtype.
bool roi_align(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !has(in, 2)) return false;
  const std::string mode = n.attr_string("mode", "avg");
  if (mode != "avg" && mode != "max") return false;
  const int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1), sr = n.attr_int("sampling_ratio", 0);
  if (oh <= 0 || ow <= 0 || sr < 0 || sr > 1024 || !std::isfinite(n.attr_float("spatial_scale", 1.0f))) return false;
  if (n.opset >= 16) {
    const std::string ctm = n.attr_string("coordinate_transformation_mode", "half_pixel");
    if (ctm != "half_pixel" && ctm != "output_half_pixel") return false;
  }
  const Shape &x = in[0]->shape, &r = in[1]->shape;
  if (!float_type(in[0]->dtype) || !float_type(in[1]->dtype) || x.size() != 4 || r.size() != 2 || r[1] != 4) return false;
  if (!optional_numel_is(in, 2, r[0])) return false;
  set(out, 0, in[0]->dtype, {r[0], x[1], oh, ow});
  return true;
}

// SwiGLU: a and b broadcast (one float type).
bool swiglu(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !float_type(in[0]->dtype) || in[1]->dtype != in[0]->dtype) return false;
  Shape r;
  if (!broadcast2(in[0]->shape, in[1]->shape, r)) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

// TensorScatter: past_cache passed through (its shape and dtype), checked against update.
bool tensor_scatter(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const std::string mode = n.attr_string("mode", "linear");
  if (mode != "linear" && mode != "circular") return false;
  const Shape &p = in[0]->shape, &u = in[1]->shape;
  const DType dt = in[0]->dtype;
  if (dt == DType::Undefined || dtype_size(dt) == 0 || in[1]->dtype != dt) return false;
  const int64_t r = int64_t(p.size());
  const int64_t ax = norm_axis(n.attr_int("axis", -2), r);
  if (r < 2 || ax <= 0 || ax >= r || int64_t(u.size()) != r) return false;
  for (int64_t d = 0; d < r; ++d)
    if (d != ax && u[size_t(d)] != p[size_t(d)]) return false;
  if (all_numeric({u[size_t(ax)], p[size_t(ax)]}) ? u[size_t(ax)] > p[size_t(ax)] : u[size_t(ax)] != p[size_t(ax)]) return false;
  set(out, 0, dt, p);
  return true;
}

// TfIdfVectorizer: float [max(ngram_indexes) + 1] for 1-D input, [rows, that] for 2-D.
bool tfidf_vectorizer(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const std::string mode = n.attr_string("mode");
  if (mode != "TF" && mode != "IDF" && mode != "TFIDF") return false;
  const int64_t max_n = n.attr_int("max_gram_length"), min_n = n.attr_int("min_gram_length");
  if (min_n < 1 || max_n < min_n || n.attr_int("max_skip_count") < 0) return false;
  const bool str_pool = n.has_attr("pool_strings");
  if (str_pool == n.has_attr("pool_int64s")) return false;
  const DType dt = in[0]->dtype;
  if (str_pool ? dt != DType::String : (dt != DType::Int32 && dt != DType::Int64)) return false;
  int64_t n_out = 0;
  for (int64_t v : n.attr_ints("ngram_indexes")) {
    if (v < 0 || v == std::numeric_limits<int64_t>::max()) return false;
    n_out = std::max(n_out, v + 1);
  }
  const Shape& x = in[0]->shape;
  if (x.size() == 1) set(out, 0, DType::Float, {n_out});
  else if (x.size() == 2) set(out, 0, DType::Float, {x[0], n_out});
  else return false;
  return true;
}

// ai.onnx.ml ArrayFeatureExtractor: X's shape with its last dim replaced by the number of
// indices ([1, count] for 1-D X), X's dtype.
bool array_feature_extractor(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || in[0]->shape.empty() || !dtype_is_integer(in[1]->dtype)) return false;
  int64_t cnt;
  if (!checked_numel(in[1]->shape, cnt)) return false;
  Shape r = in[0]->shape;
  if (r.size() == 1) r = {1, cnt};
  else r.back() = cnt;
  set(out, 0, in[0]->dtype, r);
  return true;
}

// ai.onnx.ml Binarizer: input 0 (a numeric type) as it is.
bool binarizer(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !numeric_type(in[0]->dtype)) return false;
  set(out, 0, in[0]->dtype, in[0]->shape);
  return true;
}

// ai.onnx.ml LabelEncoder: input 0's shape as the value type (opset 1: int64 <-> string by the
// input's type).
bool label_encoder(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const DType x = in[0]->dtype;
  if (n.opset < 2) {
    if (x != DType::String && x != DType::Int64) return false;
    set(out, 0, x == DType::String ? DType::Int64 : DType::String, in[0]->shape);
    return true;
  }
  // The type and count of a keys_* / values_* attribute family.
  auto family = [&](const std::string& what, DType& dt, int64_t& cnt) {
    if (n.has_attr(what + "_tensor")) {
      const Tensor& t = n.attr_tensor(what + "_tensor");
      dt = t.dtype();
      cnt = t.numel();
    } else if (n.has_attr(what + "_strings")) {
      dt = DType::String;
      cnt = int64_t(n.attr_strings(what + "_strings").size());
    } else if (n.has_attr(what + "_int64s")) {
      dt = DType::Int64;
      cnt = int64_t(n.attr_ints(what + "_int64s").size());
    } else if (n.has_attr(what + "_floats")) {
      dt = DType::Float;
      cnt = int64_t(n.attr_floats(what + "_floats").size());
    } else {
      return false;
    }
    return true;
  };
  DType kdt, vdt;
  int64_t kn, vn;
  if (!family("keys", kdt, kn) || !family("values", vdt, vn) || kn != vn) return false;
  if (n.has_attr("default_tensor")) {
    const Tensor& d = n.attr_tensor("default_tensor");
    if (d.dtype() != vdt || d.numel() < 1) return false;
  }
  if ((x == DType::String) != (kdt == DType::String)) return false;
  set(out, 0, vdt, in[0]->shape);
  return true;
}

// ai.onnx.ml TreeEnsemble: X [N, F] (or [F]: N = 1) -> [N, n_targets], X's dtype.
bool tree_ensemble(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !float_type(in[0]->dtype)) return false;
  const Shape& x = in[0]->shape;
  if (x.size() != 1 && x.size() != 2) return false;
  const int64_t T = n.attr_int("n_targets", 1), agg = n.attr_int("aggregate_function", 1), post = n.attr_int("post_transform", 0);
  if (T < 1 || agg < 0 || agg > 3 || post < 0 || post > 4) return false;
  const int64_t N = x.size() == 2 ? x[0] : 1;
  int64_t nt;
  if (__builtin_mul_overflow(N, T, &nt)) return false;
  set(out, 0, in[0]->dtype, {N, T});
  return true;
}

// ai.onnx.preview.training optimizers: Adagrad (X, G, H) -> (X_new, H_new); Momentum (X, G, V)
// -> (X_new, V_new); Adam (X, G, V, H) -> (X_new, V_new, H_new).
bool adagrad(const Node& n, const ShapeInputs& in, ShapeOutputs& out) { return training_optimizer(in, out, 3, 2); }
bool momentum(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  const std::string mode = n.attr_string("mode");
  if (mode != "standard" && mode != "nesterov") return false;
  return training_optimizer(in, out, 3, 2);
}
bool adam(const Node& n, const ShapeInputs& in, ShapeOutputs& out) { return training_optimizer(in, out, 4, 3); }

// ai.onnx.preview FlexAttention: Q [B, Hq, L, D], K [B, Hkv, S, D], V [B, Hkv, S, Dv] -> [B, Hq,
// L, Dv], Q's dtype (score_mod / prob_mod must keep the scores' shape).
bool flex_attention(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || !has(in, 2)) return false;
  for (const auto& a : n.attrs)
    if (a.name != "scale" && a.name != "softmax_precision" && a.name != "score_mod" && a.name != "prob_mod") return false;
  if (n.has_attr("softmax_precision")) {
    const int64_t sp = n.attr_int("softmax_precision");
    if (sp < 0 || !dtype_attr_known(sp) || !float_type(DType(int32_t(sp)))) return false;
  }
  const DType dt = in[0]->dtype;
  if (!float_type(dt) || in[1]->dtype != dt || in[2]->dtype != dt) return false;
  const Shape &q = in[0]->shape, &k = in[1]->shape, &v = in[2]->shape;
  if (q.size() != 4 || k.size() != 4 || v.size() != 4) return false;
  const int64_t B = q[0], Hq = q[1], L = q[2], D = q[3], Hkv = k[1], S = k[2], Dv = v[3];
  if (k[0] != B || k[3] != D || v[0] != B || v[1] != Hkv || v[2] != S || Hkv <= 0 || Hq % Hkv) return false;
  set(out, 0, dt, {B, Hq, L, Dv});
  return true;
}

}  // namespace shapes
}  // namespace basalt
