#include "ops/common.hpp"

#include <cmath>
#include <limits>
#include <type_traits>

namespace basalt {

void unsupported_dtype(const KernelContext& ctx, int input, DType dt) {
  ctx.fail(ErrorCode::Unsupported, "input " + std::to_string(input) + " has unsupported type " + dtype_name(dt));
}

Shape broadcast_shapes(const KernelContext& ctx, const Shape& a, const Shape& b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da == db || db == 1) out[i] = da;
    else if (da == 1) out[i] = db;
    else
      ctx.fail(ErrorCode::InvalidArgument, "shapes " + shape_str(a) + " and " + shape_str(b) + " cannot be broadcast");
  }
  return out;
}

std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out) {
  std::vector<int64_t> st(out.size(), 0);
  int64_t s = 1;
  for (size_t k = in.size(); k-- > 0;) {
    size_t o = k + (out.size() - in.size());
    st[o] = in[k] == 1 ? 0 : s;
    s *= in[k];
  }
  return st;
}

int normalize_axis(const Node& node, int64_t axis, int rank) {
  if (axis < -rank || (axis >= rank && !(rank == 0 && axis == 0)))
    node.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return int(axis < 0 ? axis + rank : axis);
}
int normalize_axis(const KernelContext& ctx, int64_t axis, int rank) { return normalize_axis(ctx.node(), axis, rank); }

std::vector<int64_t> shape_strides(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t k = s.size(); k-- > 1;) st[k - 1] = st[k] * s[k];
  return st;
}

Tensor to_float32(const Tensor& t) {
  if (t.dtype() == DType::Float) return t;
  Tensor out(DType::Float, t.shape());
  float* o = out.data<float>();
  int64_t n = t.numel();
  switch (t.dtype()) {
    case DType::Float16: for (int64_t i = 0; i < n; ++i) o[i] = float(t.data<float16>()[i]); break;
    case DType::BFloat16: for (int64_t i = 0; i < n; ++i) o[i] = float(t.data<bfloat16>()[i]); break;
    default: for (int64_t i = 0; i < n; ++i) o[i] = float(t.get_double(i)); break;
  }
  return out;
}

Tensor from_float32(const Tensor& t, DType dt) {
  if (dt == DType::Float) return t;
  Tensor out(dt, t.shape());
  const float* s = t.data<float>();
  int64_t n = t.numel();
  switch (dt) {
    case DType::Float16: for (int64_t i = 0; i < n; ++i) out.data<float16>()[i] = float16(s[i]); break;
    case DType::BFloat16: for (int64_t i = 0; i < n; ++i) out.data<bfloat16>()[i] = bfloat16(s[i]); break;
    case DType::Double: for (int64_t i = 0; i < n; ++i) out.data<double>()[i] = s[i]; break;
    default: BASALT_THROW(Unsupported, std::string("cannot convert float32 to ") + dtype_name(dt));
  }
  return out;
}

// All elements of a float tensor (float/double/float16/bfloat16) as double.
std::vector<double> read_doubles(const KernelContext& ctx, int input, const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  if (!visit_float(t.dtype(), [&]<class T>() {
        const T* p = t.data<T>();
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
      }))
    unsupported_dtype(ctx, input, t.dtype());
  return v;
}

void write_doubles(const KernelContext& ctx, Tensor& y, const std::vector<double>& v) {
  if (!visit_numeric(y.dtype(), [&]<class T>() {
        T* p = y.data<T>();
        for (size_t i = 0; i < v.size(); ++i) p[i] = cast_from_double<T>(v[i]);
      }))
    ctx.fail(ErrorCode::Unsupported, std::string("output type ") + dtype_name(y.dtype()) + " is not supported");
}

// A scalar (or one-element) input as int64.
int64_t scalar_int(const KernelContext& ctx, int input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be a scalar, got shape " + shape_str(t.shape()));
  if (dtype_is_float(t.dtype())) return int64_t(t.get_double(0));
  return t.get_int(0);
}
double scalar_double(const KernelContext& ctx, int input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be a scalar, got shape " + shape_str(t.shape()));
  return t.get_double(0);
}

DType dtype_attr(const Node& n, const char* name, DType dflt) {
  if (!n.has_attr(name)) return dflt;
  int64_t v = n.attr_int(name);
  if (v <= 0 || !dtype_attr_known(v)) n.fail(ErrorCode::InvalidModel, std::string("attribute '") + name + "' is not a valid data type: " + std::to_string(v));
  return DType(int32_t(v));
}

bool is_float_like(DType dt) {
  return dt == DType::Float || dt == DType::Double || dt == DType::Float16 || dt == DType::BFloat16;
}

// Any numeric tensor as doubles.
std::vector<double> to_dvec(const KernelContext& ctx, int input, const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (!visit_numeric(t.dtype(), [&]<class T>() {
        const T* a = t.data<T>();
        for (size_t i = 0; i < v.size(); ++i) v[i] = double(a[i]);
      }))
    unsupported_dtype(ctx, input, t.dtype());
  return v;
}

// Write doubles into a numeric tensor (already allocated, numel must match).
void from_dvec(Tensor& t, const std::vector<double>& v) {
  visit_numeric(t.dtype(), [&]<class T>() {
    T* a = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_integral_v<T>) {
        if constexpr (std::is_same_v<T, bool>) a[i] = !std::isnan(v[i]) && v[i] != 0;
        else a[i] = saturate_cast<T>(v[i]);  // NaN -> 0, out of range clamped (a plain cast would be UB)
      } else {
        a[i] = T(v[i]);
      }
    }
  });
}

void require_float(const KernelContext& ctx, int input, DType dt) {
  if (!is_float_like(dt)) unsupported_dtype(ctx, input, dt);
}

// Enumerate all offsets of an index space given dims and strides (odometer).
std::vector<int64_t> enumerate_offsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> out;
  if (total == 0) return out;
  out.reserve(size_t(total));
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    out.push_back(off);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

ReducePlan make_plan(const Shape& in, const std::vector<bool>& reduced, bool keepdims) {
  ReducePlan p;
  auto st = shape_strides(in);
  std::vector<int64_t> kd, ks, rd, rs;
  for (size_t d = 0; d < in.size(); ++d) {
    if (reduced[d]) {
      rd.push_back(in[d]);
      rs.push_back(st[d]);
      if (keepdims) p.out_shape.push_back(1);
    } else {
      kd.push_back(in[d]);
      ks.push_back(st[d]);
      p.out_shape.push_back(in[d]);
    }
  }
  p.base = enumerate_offsets(kd, ks);
  p.roff = enumerate_offsets(rd, rs);
  return p;
}

std::vector<double> per_channel_param(const KernelContext& ctx, int input, int64_t C, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != C)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must have " + std::to_string(C) +
                                             " elements (one per channel), got shape " + shape_str(t.shape()));
  return to_dvec(ctx, input, t);
}

// Round a value to the precision of a float element type.
double round_to(DType t, double x) {
  switch (t) {
    case DType::Float: return double(float(x));
    case DType::Float16: return double(float(float16(float(x))));
    case DType::BFloat16: return double(float(bfloat16(float(x))));
    default: return x;
  }
}

// The wider of two float types (for mixed-precision products).
DType wider_float(DType a, DType b) {
  auto rank = [](DType t) {
    switch (t) {
      case DType::Double: return 3;
      case DType::Float: return 2;
      default: return 1;
    }
  };
  if (rank(a) != rank(b)) return rank(a) > rank(b) ? a : b;
  return a == b ? a : DType::Float;  // float16 vs bfloat16 promotes to float
}

std::optional<AutoPad> auto_pad_of(const Node& n) {
  const std::string s = n.attr_string("auto_pad", "NOTSET");
  if (s == "NOTSET" || s.empty()) return AutoPad::NotSet;
  if (s == "SAME_UPPER") return AutoPad::SameUpper;
  if (s == "SAME_LOWER") return AutoPad::SameLower;
  if (s == "VALID") return AutoPad::Valid;
  return std::nullopt;
}

}  // namespace basalt
