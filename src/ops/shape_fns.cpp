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
namespace shapes {
bool checked_numel(const Shape& s, int64_t& r);
}

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
  std::string ap = n.attr_string("auto_pad", "NOTSET");
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
      if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
        r[i + 2] = s == 1 ? in : in_.symbols->intern("ceil(" + sym + "/" + std::to_string(s) + ")");
        continue;
      }
      int64_t off;
      if (ap == "VALID") off = 1 - ek;
      else if (__builtin_add_overflow(pads[i], pads[i + sp], &off) || __builtin_sub_overflow(off, ek, &off)) return false;
      if (s == 1 && off == -1) r[i + 2] = in;
      else
        r[i + 2] = in_.symbols->intern(std::string(ceil_mode ? "ceil" : "floor") + "((" + sym + (off >= 0 ? "+" : "") +
                                       std::to_string(off) + ")/" + std::to_string(s) + ")+1");
      continue;
    }
    int64_t o;
    if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
      if (__builtin_add_overflow(in, s - 1, &o)) return false;
      o /= s;
    } else if (ap == "VALID") {
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
  std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (k.size() != sp || strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp || opad.size() != sp) return false;
  Shape r = x;
  // Absurd attribute values (overflowing int64) leave the shape unknown; the kernel reports them.
  if (__builtin_mul_overflow(w[1], n.attr_int("group", 1), &r[1])) return false;
  for (size_t i = 0; i < sp; ++i) {
    if (!oshape.empty()) {
      if (oshape.size() != sp) return false;
      r[i + 2] = oshape[i];
    } else if (ap == "SAME_UPPER" || ap == "SAME_LOWER") {
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

// ---------------------------------------------------------------------------------------------
// Rules of single ops (each mirrors what its kernel in ops/<family>.cpp asks its output() for;
// where the kernel would fail on the given shapes or attributes the rule gives up instead).
// ---------------------------------------------------------------------------------------------
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
  const std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && !ap.empty() && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") return false;
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
  const std::string ap = n.attr_string("auto_pad", "NOTSET");
  if (ap != "NOTSET" && ap != "SAME_UPPER" && ap != "SAME_LOWER" && ap != "VALID") return false;
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
