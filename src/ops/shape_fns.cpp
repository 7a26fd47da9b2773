// The shape rules of ops/op_traits.hpp: type and shape inference shared by the operators that
// declare them (each family file says which of its ops use which rule). They run on concrete
// shapes for the memory planner and, for the rules registered with infer_symbolic, on symbolic
// shapes for the optimizer. A rule returns false when it cannot know the result (data needed,
// malformed attributes); absurd attributes never overflow the arithmetic, they give up.
#include "ops/op_traits.hpp"

#include "ops/common.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>
#include <map>

namespace basalt {
uint64_t InferredValue::bytes() const {
  int64_t n = 0;
  uint64_t b = 0;
  if (!all_numeric(shape) || !shapes::checked_numel(shape, n) || __builtin_mul_overflow(uint64_t(n), dtype_size(dtype), &b)) return 0;
  return b;
}

int64_t SymbolTable::intern(const std::string& key) {
  for (size_t k = 0; k < names.size(); ++k)
    if (names[k] == key) return -2 - int64_t(k);
  names.push_back(key);
  return -2 - int64_t(names.size() - 1);
}

namespace shapes {

// Product of numeric dims without overflow.
bool checked_numel(const Shape& s, int64_t& r) {
  r = 1;
  for (int64_t d : s)
    if (d < 0 || __builtin_mul_overflow(r, d, &r)) return false;
  return true;
}

bool has(const ShapeInputs& in, size_t i) { return i < in.size() && in[i] && in[i]->known(); }
bool has_value(const ShapeInputs& in, size_t i) { return has(in, i) && in[i]->value.defined(); }

void set(ShapeOutputs& out, size_t i, DType dt, Shape s) {
  if (i >= out.size()) return;
  int64_t count = 0;
  if (all_numeric(s) && !checked_numel(s, count)) return;  // absurd sizes stay unknown
  out[i].state = InferredValue::State::Known;
  out[i].dtype = dt;
  out[i].shape = std::move(s);
}

bool ints(const ShapeInputs& in, size_t i, std::vector<int64_t>& r) {
  if (!has_value(in, i)) return false;
  r = in[i]->value.to_int64_vector();
  return true;
}

int64_t norm_axis(int64_t a, int64_t rank) { return a < 0 ? a + rank : a; }

// r may be a or b.
bool broadcast2(const Shape& a, const Shape& b, Shape& r) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n, 1);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da != db && da != 1 && db != 1) return false;
    out[i] = da == 1 ? db : da;
  }
  r = std::move(out);
  return true;
}

// Output dtype rules that differ from "same as input 0".
bool same(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  set(out, 0, in[0]->dtype, in[0]->shape);
  return true;
}

bool broadcast_all(const Node& n, const ShapeInputs& in, ShapeOutputs& out, DType dt, size_t first = 0) {
  Shape r;
  bool any = false;
  for (size_t i = first; i < in.size(); ++i) {
    if (!in[i]) continue;
    if (!in[i]->known()) return false;
    if (!any) {
      r = in[i]->shape;
      any = true;
    } else if (!broadcast2(r, in[i]->shape, r)) {
      return false;
    }
  }
  if (!any) return false;
  set(out, 0, dt, r);
  return true;
}

// Spatial output size of a sliding window (Conv, pools).
bool window_dims(const Node& n, const ShapeInputs& in_, const Shape& x, const std::vector<int64_t>& kernel, bool ceil_mode,
                 Shape& r) {
  size_t sp = kernel.size();
  if (x.size() != sp + 2) return false;
  auto strides = n.attr_ints("strides", std::vector<int64_t>(sp, 1));
  auto dil = n.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  auto pads = n.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  const std::optional<AutoPad> pad_mode = auto_pad_of(n);
  if (!pad_mode) return false;
  const AutoPad ap = *pad_mode;
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp) return false;
  // Absurd attribute values (overflowing int64) leave the shape unknown; the kernel reports them.
  for (size_t i = 0; i < sp; ++i) {
    int64_t in = x[i + 2], s = strides[i], ek;
    if (s <= 0 || kernel[i] <= 0 || dil[i] <= 0) return false;
    if (__builtin_mul_overflow(kernel[i] - 1, dil[i], &ek) || __builtin_add_overflow(ek, 1, &ek)) return false;
    if (in < 0) {
      // A symbolic size: the output is the same expression of it for the same (offset, stride),
      // whichever Conv or pool computes it, so equal symbols stay equal down the graph.
      if (!is_symbol(in) || !in_.symbols) return false;
      const std::string sym = in_.symbols->name(in);
      if (is_same_pad(ap)) {
        r[i + 2] = s == 1 ? in : in_.symbols->intern("ceil(" + sym + "/" + std::to_string(s) + ")");
        continue;
      }
      int64_t off;
      if (ap == AutoPad::Valid) off = 1 - ek;
      else if (__builtin_add_overflow(pads[i], pads[i + sp], &off) || __builtin_sub_overflow(off, ek, &off)) return false;
      if (s == 1 && off == -1) r[i + 2] = in;
      else
        r[i + 2] = in_.symbols->intern(std::string(ceil_mode ? "ceil" : "floor") + "((" + sym + (off >= 0 ? "+" : "") +
                                       std::to_string(off) + ")/" + std::to_string(s) + ")+1");
      continue;
    }
    int64_t o;
    if (is_same_pad(ap)) {
      if (__builtin_add_overflow(in, s - 1, &o)) return false;
      o /= s;
    } else if (ap == AutoPad::Valid) {
      if (in < ek) return false;
      o = (in - ek) / s + 1;
    } else {
      int64_t span, lo;
      if (__builtin_add_overflow(in, pads[i], &lo) || __builtin_add_overflow(lo, pads[i + sp], &span) ||
          __builtin_sub_overflow(span, ek, &span))
        return false;
      if (span < 0) return false;
      if (ceil_mode) {
        if (__builtin_add_overflow(span, s - 1, &o)) return false;
        o = o / s + 1;
      } else {
        o = span / s + 1;
      }
      // ONNX: the last window must start inside the input or its left padding.
      int64_t last;
      if (ceil_mode && (__builtin_mul_overflow(o - 1, s, &last) || last >= lo)) --o;
    }
    r[i + 2] = o;
  }
  return true;
}

bool conv(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const Shape& x = in[0]->shape;
  const Shape& w = in[1]->shape;
  if (x.size() < 3 || w.size() != x.size()) return false;
  std::vector<int64_t> k(w.begin() + 2, w.end());
  k = n.attr_ints("kernel_shape", k);
  Shape r = x;
  r[1] = w[0];
  if (!window_dims(n, in, x, k, false, r)) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool conv_transpose(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const Shape& x = in[0]->shape;
  const Shape& w = in[1]->shape;
  if (x.size() < 3 || w.size() != x.size()) return false;
  size_t sp = x.size() - 2;
  std::vector<int64_t> k(w.begin() + 2, w.end());
  k = n.attr_ints("kernel_shape", k);
  auto strides = n.attr_ints("strides", std::vector<int64_t>(sp, 1));
  auto dil = n.attr_ints("dilations", std::vector<int64_t>(sp, 1));
  auto pads = n.attr_ints("pads", std::vector<int64_t>(2 * sp, 0));
  auto opad = n.attr_ints("output_padding", std::vector<int64_t>(sp, 0));
  auto oshape = n.attr_ints("output_shape", {});
  const std::optional<AutoPad> pad_mode = auto_pad_of(n);
  if (!pad_mode) return false;
  const AutoPad ap = *pad_mode;
  if (k.size() != sp || strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || opad.size() != sp) return false;
  Shape r = x;
  // Absurd attribute values (overflowing int64) leave the shape unknown; the kernel reports them.
  if (__builtin_mul_overflow(w[1], n.attr_int("group", 1), &r[1])) return false;
  for (size_t i = 0; i < sp; ++i) {
    if (!oshape.empty()) {
      if (oshape.size() != sp) return false;
      r[i + 2] = oshape[i];
    } else if (is_same_pad(ap)) {
      if (__builtin_mul_overflow(x[i + 2], strides[i], &r[i + 2])) return false;
    } else {
      int64_t a, b;
      if (__builtin_mul_overflow(strides[i], x[i + 2] - 1, &a) || __builtin_add_overflow(a, opad[i], &a) ||
          __builtin_sub_overflow(k[i], 1, &b) || __builtin_mul_overflow(b, dil[i], &b) ||
          __builtin_add_overflow(a, b, &a) || __builtin_add_overflow(a, 1, &a) ||
          __builtin_sub_overflow(a, pads[i], &a) || __builtin_sub_overflow(a, pads[i + sp], &r[i + 2]))
        return false;
    }
    if (r[i + 2] < 0) return false;
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool pool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  auto k = n.attr_ints("kernel_shape", {});
  Shape r = in[0]->shape;
  if (!window_dims(n, in, in[0]->shape, k, n.attr_int("ceil_mode", 0) != 0, r)) return false;
  set(out, 0, in[0]->dtype, r);
  set(out, 1, DType::Int64, r);  // MaxPool indices
  return true;
}

bool global_pool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || in[0]->shape.size() < 2) return false;
  Shape r = in[0]->shape;
  for (size_t i = 2; i < r.size(); ++i) r[i] = 1;
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool matmul_shapes(Shape a, Shape b, bool ta, bool tb, Shape& r) {
  if (a.empty() || b.empty()) return false;
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  if (ta) std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (tb) std::swap(b[b.size() - 1], b[b.size() - 2]);
  if (a.back() != b[b.size() - 2]) return false;
  Shape ba(a.begin(), a.end() - 2), bb(b.begin(), b.end() - 2);
  if (!broadcast2(ba, bb, r)) return false;
  if (!a1) r.push_back(a[a.size() - 2]);
  if (!b1) r.push_back(b.back());
  return true;
}

bool matmul(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  Shape r;
  bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  if (!matmul_shapes(in[0]->shape, in[1]->shape, ta, tb, r)) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool gemm(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || in[0]->shape.size() != 2 || in[1]->shape.size() != 2) return false;
  const Shape &a = in[0]->shape, &b = in[1]->shape;
  int64_t m = n.attr_int("transA", 0) ? a[1] : a[0];
  int64_t nn = n.attr_int("transB", 0) ? b[0] : b[1];
  set(out, 0, in[0]->dtype, {m, nn});
  return true;
}

bool reshape(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  std::vector<int64_t> s;
  if (!has(in, 0)) return false;
  if (n.opset < 5) s = n.attr_ints("shape", {});
  else if (!ints(in, 1, s)) return false;
  bool allowzero = n.attr_int("allowzero", 0) != 0;
  const Shape& x = in[0]->shape;
  Shape r(s.size());
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == -1) {
      if (infer >= 0) return false;
      infer = int(i);
      continue;
    }
    r[i] = (s[i] == 0 && !allowzero) ? (i < x.size() ? x[i] : -1) : s[i];
    if (r[i] < 0 || __builtin_mul_overflow(known, r[i], &known)) return false;
  }
  int64_t total = 0;
  if (!checked_numel(x, total)) return false;
  if (infer >= 0) {
    if (known == 0 || total % known) return false;
    r[size_t(infer)] = total / known;
  } else if (known != total) {
    return false;
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool flatten(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  int64_t ax = norm_axis(n.attr_int("axis", 1), int64_t(x.size()));
  if (ax < 0 || ax > int64_t(x.size())) return false;
  int64_t a = 1, b = 1;
  // Each side is the product of its dims; a symbolic dim survives only among 1s.
  for (size_t i = 0; i < x.size(); ++i) {
    int64_t& side = int64_t(i) < ax ? a : b;
    if (x[i] == 1) continue;
    if (is_symbol(x[i]) || is_symbol(side)) {
      if (side != 1 || !is_symbol(x[i])) return false;
      side = x[i];
    } else if (x[i] < 0 || __builtin_mul_overflow(side, x[i], &side)) {
      return false;
    }
  }
  set(out, 0, in[0]->dtype, {a, b});
  return true;
}

bool transpose(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> p(x.size());
  for (size_t i = 0; i < p.size(); ++i) p[i] = int64_t(p.size() - 1 - i);
  p = n.attr_ints("perm", p);
  if (p.size() != x.size()) return false;
  Shape r(x.size());
  std::vector<bool> used(x.size(), false);
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] < 0 || p[i] >= int64_t(x.size()) || used[size_t(p[i])]) return false;
    used[size_t(p[i])] = true;
    r[i] = x[size_t(p[i])];
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool concat(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  Shape r;
  bool first = true;
  DType dt = DType::Undefined;
  int64_t ax = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i]) continue;
    if (!in[i]->known()) return false;
    const Shape& s = in[i]->shape;
    if (first) {
      r = s;
      dt = in[i]->dtype;
      ax = norm_axis(n.attr_int("axis"), int64_t(s.size()));
      if (ax < 0 || ax >= int64_t(s.size()) || r[size_t(ax)] < 0) return false;
      first = false;
    } else {
      if (s.size() != r.size()) return false;
      if (r[size_t(ax)] < 0 || s[size_t(ax)] < 0 ||
          __builtin_add_overflow(r[size_t(ax)], s[size_t(ax)], &r[size_t(ax)]))
        return false;  // a symbolic sum is not tracked
    }
  }
  if (first) return false;
  set(out, 0, dt, r);
  return true;
}

bool split(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  int64_t ax = norm_axis(n.attr_int("axis", 0), int64_t(x.size()));
  if (ax < 0 || ax >= int64_t(x.size())) return false;
  std::vector<int64_t> parts;
  if (n.opset >= 13 && in.size() > 1 && in[1]) {
    if (!ints(in, 1, parts)) return false;
  } else if (n.opset < 13) {
    parts = n.attr_ints("split", {});
  }
  size_t k = n.outputs.size();
  int64_t d = x[size_t(ax)];
  if (parts.empty()) {
    int64_t no = n.attr_int("num_outputs", int64_t(k));
    if (no <= 0) return false;
    int64_t chunk = (d + no - 1) / no;
    for (size_t i = 0; i < k; ++i) parts.push_back(std::max<int64_t>(0, std::min(chunk, d - int64_t(i) * chunk)));
  }
  if (parts.size() != k) return false;
  for (size_t i = 0; i < k; ++i) {
    Shape r = x;
    r[size_t(ax)] = parts[i];
    set(out, i, in[0]->dtype, r);
  }
  return true;
}

bool slice(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> starts, ends, axes, steps;
  if (n.opset < 10) {
    starts = n.attr_ints("starts");
    ends = n.attr_ints("ends");
    axes = n.attr_ints("axes", {});
  } else {
    if (!ints(in, 1, starts) || !ints(in, 2, ends)) return false;
    if (in.size() > 3 && in[3] && !ints(in, 3, axes)) return false;
    if (in.size() > 4 && in[4] && !ints(in, 4, steps)) return false;
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) return false;
  Shape r = x;
  for (size_t i = 0; i < starts.size(); ++i) {
    int64_t a = norm_axis(axes[i], int64_t(x.size()));
    if (a < 0 || a >= int64_t(x.size()) || steps[i] == 0) return false;
    int64_t d = x[size_t(a)], st = steps[i];
    // ONNX Slice: negative indices count from the end; clamp to [0, d] going forward and to
    // [-1, d-1] going backward.
    auto clampi = [&](int64_t v) {
      if (v < 0) v += d;
      if (st > 0) return std::clamp<int64_t>(v, 0, d);
      return std::clamp<int64_t>(v, -1, d - 1);
    };
    int64_t b = clampi(starts[i]), e = clampi(ends[i]);
    int64_t len = st > 0 ? (e - b + st - 1) / st : (b - e - st - 1) / -st;
    r[size_t(a)] = std::max<int64_t>(0, len);
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool squeeze(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> axes;
  if (n.opset >= 13) {
    if (in.size() > 1 && in[1] && !ints(in, 1, axes)) return false;
  } else {
    axes = n.attr_ints("axes", {});
  }
  std::vector<bool> drop(x.size(), false);
  if (axes.empty()) {
    for (size_t i = 0; i < x.size(); ++i) drop[i] = x[i] == 1;
  } else {
    for (int64_t a : axes) {
      a = norm_axis(a, int64_t(x.size()));
      if (a < 0 || a >= int64_t(x.size()) || x[size_t(a)] != 1) return false;
      drop[size_t(a)] = true;
    }
  }
  Shape r;
  for (size_t i = 0; i < x.size(); ++i)
    if (!drop[i]) r.push_back(x[i]);
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool unsqueeze(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> axes;
  if (n.opset >= 13) {
    if (!ints(in, 1, axes)) return false;
  } else {
    axes = n.attr_ints("axes", {});
  }
  int64_t rank = int64_t(x.size() + axes.size());
  std::vector<bool> ins(size_t(rank), false);
  for (int64_t a : axes) {
    a = norm_axis(a, rank);
    if (a < 0 || a >= rank || ins[size_t(a)]) return false;
    ins[size_t(a)] = true;
  }
  Shape r;
  size_t k = 0;
  for (int64_t i = 0; i < rank; ++i) r.push_back(ins[size_t(i)] ? 1 : x[k++]);
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool gather(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  const Shape& x = in[0]->shape;
  int64_t ax = norm_axis(n.attr_int("axis", 0), int64_t(x.size()));
  if (ax < 0 || ax >= int64_t(x.size())) return false;
  Shape r(x.begin(), x.begin() + ax);
  r.insert(r.end(), in[1]->shape.begin(), in[1]->shape.end());
  r.insert(r.end(), x.begin() + ax + 1, x.end());
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool resize(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> sizes;
  std::vector<double> scales;
  size_t si = n.op_type == "Upsample" || n.opset < 11 ? 1 : 2;
  if (n.op_type == "Upsample" && n.opset < 9) {
    for (float f : n.attr_floats("scales")) scales.push_back(f);
  } else {
    if (si == 2 && in.size() > 3 && in[3] && has_value(in, 3) && in[3]->value.numel() > 0) {
      ints(in, 3, sizes);
    } else if (has_value(in, si) && in[si]->value.numel() > 0) {
      const Tensor& t = in[si]->value;
      for (int64_t i = 0; i < t.numel(); ++i) scales.push_back(t.get_double(i));
    } else {
      return false;
    }
  }
  auto axes = n.attr_ints("axes", {});
  if (axes.empty())
    for (size_t i = 0; i < x.size(); ++i) axes.push_back(int64_t(i));
  std::string policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
  if (!sizes.empty() && policy != "stretch") return false;
  size_t cnt = sizes.empty() ? scales.size() : sizes.size();
  if (cnt != axes.size()) return false;
  Shape r = x;
  for (size_t i = 0; i < cnt; ++i) {
    int64_t a = norm_axis(axes[i], int64_t(x.size()));
    if (a < 0 || a >= int64_t(x.size())) return false;
    if (sizes.empty()) {
      const double d = double(x[size_t(a)]) * scales[i];
      if (!(d >= 0 && d < 9.0e18)) return false;  // NaN, negative or past int64
      r[size_t(a)] = int64_t(d);
    } else {
      r[size_t(a)] = sizes[i];
    }
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool pad(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> pads, axes;
  if (n.opset < 11) pads = n.attr_ints("pads");
  else if (!ints(in, 1, pads)) return false;
  if (in.size() > 3 && in[3] && !ints(in, 3, axes)) return false;
  if (axes.empty())
    for (size_t i = 0; i < x.size(); ++i) axes.push_back(int64_t(i));
  if (pads.size() != 2 * axes.size()) return false;
  Shape r = x;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = norm_axis(axes[i], int64_t(x.size()));
    if (a < 0 || a >= int64_t(x.size())) return false;
    if (__builtin_add_overflow(r[size_t(a)], pads[i], &r[size_t(a)]) ||
        __builtin_add_overflow(r[size_t(a)], pads[i + axes.size()], &r[size_t(a)]) || r[size_t(a)] < 0)
      return false;
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool expand(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  std::vector<int64_t> s;
  if (!has(in, 0) || !ints(in, 1, s)) return false;
  Shape r;
  if (!broadcast2(in[0]->shape, s, r)) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool tile(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  std::vector<int64_t> rep;
  if (!has(in, 0) || !ints(in, 1, rep) || rep.size() != in[0]->shape.size()) return false;
  Shape r = in[0]->shape;
  for (size_t i = 0; i < r.size(); ++i)
    if (rep[i] < 0 || __builtin_mul_overflow(r[i], rep[i], &r[i])) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool reduce_to(const Node& n, const ShapeInputs& in, ShapeOutputs& out, DType dt) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  std::vector<int64_t> axes;
  bool axes_input = (n.op_type == "ReduceSum" && n.opset >= 13) || n.opset >= 18;
  if (axes_input) {
    if (in.size() > 1 && in[1] && !ints(in, 1, axes)) return false;
  } else {
    axes = n.attr_ints("axes", {});
  }
  bool keep = n.attr_int("keepdims", 1) != 0;
  if (axes.empty() && axes_input && n.attr_int("noop_with_empty_axes", 0)) {
    set(out, 0, dt, x);
    return true;
  }
  std::vector<bool> red(x.size(), axes.empty());
  for (int64_t a : axes) {
    a = norm_axis(a, int64_t(x.size()));
    if (a < 0 || a >= int64_t(x.size())) return false;
    red[size_t(a)] = true;
  }
  Shape r;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!red[i]) r.push_back(x[i]);
    else if (keep) r.push_back(1);
  }
  set(out, 0, dt, r);
  return true;
}

bool argreduce(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  Shape r = in[0]->shape;
  int64_t a = norm_axis(n.attr_int("axis", 0), int64_t(r.size()));
  if (a < 0 || a >= int64_t(r.size())) return false;
  if (n.attr_int("keepdims", 1)) r[size_t(a)] = 1;
  else r.erase(r.begin() + a);
  set(out, 0, DType::Int64, r);
  return true;
}

bool shape_op(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  int64_t rank = int64_t(x.size());
  int64_t s = n.attr_int("start", 0), e = n.attr_int("end", rank);
  s = std::clamp<int64_t>(s < 0 ? s + rank : s, 0, rank);
  e = std::clamp<int64_t>(e < 0 ? e + rank : e, 0, rank);
  std::vector<int64_t> v;
  for (int64_t i = s; i < e; ++i) v.push_back(x[size_t(i)]);
  set(out, 0, DType::Int64, {int64_t(v.size())});
  out[0].value = Tensor(DType::Int64, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) out[0].value.data<int64_t>()[i] = v[i];
  return true;
}

bool size_op(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  set(out, 0, DType::Int64, {});
  int64_t count = 0;
  if (!checked_numel(in[0]->shape, count)) return false;
  out[0].value = Tensor::scalar<int64_t>(count);
  return true;
}

bool constant_of_shape(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  std::vector<int64_t> s;
  if (!ints(in, 0, s)) return false;
  DType dt = n.has_attr("value") ? n.attr_tensor("value").dtype() : DType::Float;
  set(out, 0, dt, s);
  return true;
}

bool rnn(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || in[0]->shape.size() != 3) return false;
  const Shape& x = in[0]->shape;
  bool batch_first = n.attr_int("layout", 0) != 0;
  int64_t seq = batch_first ? x[1] : x[0], batch = batch_first ? x[0] : x[1];
  int64_t hid = n.attr_int("hidden_size");
  int64_t dirs = n.attr_string("direction", "forward") == "bidirectional" ? 2 : 1;
  DType dt = in[0]->dtype;
  set(out, 0, dt, batch_first ? Shape{batch, seq, dirs, hid} : Shape{seq, dirs, batch, hid});
  Shape h = batch_first ? Shape{batch, dirs, hid} : Shape{dirs, batch, hid};
  set(out, 1, dt, h);
  set(out, 2, dt, h);
  return true;
}

bool layer_norm(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const Shape& x = in[0]->shape;
  set(out, 0, in[0]->dtype, x);
  int64_t ax = norm_axis(n.attr_int("axis", -1), int64_t(x.size()));
  if (ax < 0 || ax > int64_t(x.size())) return false;
  Shape st = x;
  for (size_t i = size_t(ax); i < st.size(); ++i) st[i] = 1;
  set(out, 1, DType::Float, st);
  set(out, 2, DType::Float, st);
  return true;
}

bool batch_norm(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  set(out, 0, in[0]->dtype, in[0]->shape);
  if (out.size() > 1 && in[0]->shape.size() >= 2) {
    for (size_t i = 1; i < out.size(); ++i) set(out, i, in[0]->dtype, {in[0]->shape[1]});
  }
  return true;
}

bool space_depth(const Node& n, const ShapeInputs& in, ShapeOutputs& out, bool to_space) {
  if (!has(in, 0) || in[0]->shape.size() != 4) return false;
  Shape r = in[0]->shape;
  int64_t b = n.attr_int("blocksize");
  int64_t bb;
  if (b <= 0 || __builtin_mul_overflow(b, b, &bb)) return false;
  if (to_space) {
    r[1] /= bb;
    if (__builtin_mul_overflow(r[2], b, &r[2]) || __builtin_mul_overflow(r[3], b, &r[3])) return false;
  } else {
    if (__builtin_mul_overflow(r[1], bb, &r[1])) return false;
    r[2] /= b;
    r[3] /= b;
  }
  set(out, 0, in[0]->dtype, r);
  return true;
}

// Blocked-layout ops (ops/nn.cpp, kernels/nchwc.hpp): a blocked tensor [N, CB, H, W, 16] holds
// the NCHW tensor [N, <= CB*16, H, W]; the window rules run on [N, CB*16, H, W].
bool is_blocked(const Shape& x) { return x.size() == 5 && x[4] == 16 && x[1] >= 0 && x[1] < (int64_t(1) << 58); }
Shape blocked_of(const Shape& nchw) { return {nchw[0], (nchw[1] + 15) / 16, nchw[2], nchw[3], 16}; }

bool nchwc_conv(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1) || in[1]->shape.size() != 4) return false;
  const Shape& x = in[0]->shape;
  const bool plain = n.attr_int("plain_input", 0) != 0;
  if (plain ? x.size() != 4 : !is_blocked(x)) return false;
  const Shape& w = in[1]->shape;
  Shape r = {x[0], w[0], x[2], x[3]};
  if (!window_dims(n, in, plain ? x : Shape{x[0], x[1] * 16, x[2], x[3]}, {w[2], w[3]}, false, r)) return false;
  set(out, 0, DType::Float, blocked_of(r));
  return true;
}

bool nchwc_pool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !is_blocked(in[0]->shape) || in[0]->shape[1] < 0) return false;
  const Shape& x = in[0]->shape;
  Shape r = {x[0], x[1] * 16, x[2], x[3]};
  if (!window_dims(n, in, r, n.attr_ints("kernel_shape", {}), n.attr_int("ceil_mode", 0) != 0, r)) return false;
  set(out, 0, DType::Float, blocked_of(r));
  return true;
}

bool nchwc_to_plain(const Node& n, const ShapeInputs& in, ShapeOutputs& out, bool global) {
  if (!has(in, 0) || !is_blocked(in[0]->shape)) return false;
  const Shape& x = in[0]->shape;
  int64_t c = n.attr_int("channels", 0);
  if (c <= 0 || (c + 15) / 16 != x[1]) return false;
  set(out, 0, DType::Float, global ? Shape{x[0], c, 1, 1} : Shape{x[0], c, x[2], x[3]});
  return true;
}

bool same_all(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  for (size_t i = 0; i < out.size(); ++i) {
    if (!has(in, i)) return false;
    set(out, i, in[i]->dtype, in[i]->shape);
  }
  return !out.empty();
}

bool same_bool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  set(out, 0, DType::Bool, in[0]->shape);
  return true;
}

bool broadcast(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  return has(in, 0) && broadcast_all(n, in, out, in[0]->dtype);
}

bool broadcast_bool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  return broadcast_all(n, in, out, DType::Bool);
}

bool where(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  return has(in, 1) && broadcast_all(n, in, out, in[1]->dtype);
}

bool dropout(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!same(n, in, out)) return false;
  set(out, 1, DType::Bool, in[0]->shape);
  return true;
}

bool cast(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  const int64_t to = n.attr_int("to");
  if (!dtype_attr_known(to)) return false;
  set(out, 0, DType(to), in[0]->shape);
  return true;
}

bool cast_like(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  set(out, 0, in[1]->dtype, in[0]->shape);
  return true;
}

bool conv_integer(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!conv(n, in, out)) return false;
  out[0].dtype = DType::Int32;
  return true;
}

bool matmul_integer(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!matmul(n, in, out)) return false;
  out[0].dtype = DType::Int32;
  return true;
}

bool qlinear_binary(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 3) || !in[0]->known() || !in[3]->known()) return false;
  Shape r;
  if (!broadcast2(in[0]->shape, in[3]->shape, r)) return false;
  set(out, 0, in[0]->dtype, r);
  return true;
}

bool matmul_to_float(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!matmul(n, in, out)) return false;
  out[0].dtype = DType::Float;
  return true;
}

bool gather_elements(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  set(out, 0, in[0]->dtype, in[1]->shape);
  return true;
}

bool reduce(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  return has(in, 0) && reduce_to(n, in, out, in[0]->dtype);
}

// basalt::Attention: Q, K, V [B, S, heads*D] -> [B, Sq, heads*Dv]. ai.onnx Attention (23): the
// same for 3-D inputs with equal head counts, [B, Hq, Sq, Dv] for 4-D ones; only the first
// output (the others, present key/value and scores, become dynamic).
bool attention(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 2)) return false;
  const Shape &q = in[0]->shape, &v = in[2]->shape;
  if (q.size() == 3 && v.size() == 3) {
    if (n.domain != "basalt" && n.attr_int("q_num_heads", 0) != n.attr_int("kv_num_heads", 0)) return false;
    set(out, 0, in[0]->dtype, {q[0], q[1], v[2]});
    return true;
  }
  if (q.size() == 4 && v.size() == 4) {
    set(out, 0, in[0]->dtype, {q[0], q[1], q[2], v[3]});
    return true;
  }
  return false;
}

bool range(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has_value(in, 0) || !has_value(in, 1) || !has_value(in, 2)) return false;
  double st = in[0]->value.get_double(0), lim = in[1]->value.get_double(0), d = in[2]->value.get_double(0);
  if (d == 0) return false;
  double cnt = std::ceil((lim - st) / d);
  if (!(cnt < 9e18)) return false;
  set(out, 0, in[0]->dtype, {std::max<int64_t>(0, int64_t(cnt))});
  return true;
}

bool depth_to_space(const Node& n, const ShapeInputs& in, ShapeOutputs& out) { return space_depth(n, in, out, true); }
bool space_to_depth(const Node& n, const ShapeInputs& in, ShapeOutputs& out) { return space_depth(n, in, out, false); }

bool quantize_linear(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0)) return false;
  DType dt = DType::Uint8;
  if (has(in, 2)) {
    dt = in[2]->dtype;
  } else {
    const int64_t od = n.attr_int("output_dtype", 0);
    if (od != 0) {
      if (!dtype_attr_known(od)) return false;
      dt = DType(od);
    }
  }
  if (dt == DType::Undefined) dt = DType::Uint8;
  set(out, 0, dt, in[0]->shape);
  return true;
}

bool dequantize_linear(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || !has(in, 1)) return false;
  set(out, 0, in[1]->dtype, in[0]->shape);
  return true;
}

bool nchwc_global_pool(const Node& n, const ShapeInputs& in, ShapeOutputs& out) { return nchwc_to_plain(n, in, out, true); }
bool reorder_from_nchwc(const Node& n, const ShapeInputs& in, ShapeOutputs& out) { return nchwc_to_plain(n, in, out, false); }

bool reorder_to_nchwc(const Node& n, const ShapeInputs& in, ShapeOutputs& out) {
  if (!has(in, 0) || in[0]->shape.size() != 4 || in[0]->shape[1] < 0) return false;
  set(out, 0, DType::Float, blocked_of(in[0]->shape));
  return true;
}

}  // namespace shapes
}  // namespace basalt
