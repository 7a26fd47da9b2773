#include "ops/common.hpp"

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

}  // namespace basalt
