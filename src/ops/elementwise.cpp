// Reference kernels: elementwise ops.
//
// Binary ops broadcast their inputs numpy style (plus the pre-opset-7 `broadcast`/`axis`
// attributes of Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Greater/Less). The broadcast loop collapses
// the output shape into as few dimensions as possible and runs the innermost dimension as a plain
// loop, specialised for "both contiguous" and "one side is a scalar" so the compiler can
// vectorize the common float32 cases.
//
// Integer arithmetic wraps (computed in unsigned types, no signed-overflow UB); integer division
// or modulo by zero is an error.
#include "ops/common.hpp"

#include "ops/broadcast_iter.hpp"

#include "kernels/eltwise.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <initializer_list>
#include <limits>
#include <optional>
#include <type_traits>

namespace basalt {
namespace {

using namespace bcast;

// Registers the same factory for every opset version of an op: [v0, v1-1], [v1, v2-1], ...
void add_versions(OpRegistry& r, const char* op, std::initializer_list<int> versions, const KernelFactory& f) {
  std::vector<int> v(versions);
  for (size_t i = 0; i < v.size(); ++i) r.add(op, v[i], f, i + 1 < v.size() ? v[i + 1] - 1 : INT_MAX);
}

// ---------------------------------------------------------------------------------------------
// Binary op argument handling (incl. legacy broadcast of opset < 7)

struct BinCfg {
  bool legacy = false;     // opset < 7 semantics
  bool bcast = false;      // legacy `broadcast` attribute
  std::optional<int64_t> axis;
};

BinCfg parse_bin(const Node& n, int legacy_before = 7) {
  BinCfg c;
  if (n.opset < legacy_before) {
    c.legacy = true;
    c.bcast = n.attr_int("broadcast", 0) != 0;
    if (n.has_attr("axis")) {
      c.axis = n.attr_int("axis");
      if (*c.axis < INT32_MIN || *c.axis > INT32_MAX)
        n.fail(ErrorCode::InvalidModel, "axis " + std::to_string(*c.axis) + " is out of range");
    }
  }
  return c;
}

struct BinArgs {
  Tensor a, b;
  Shape out;
};

BinArgs bin_args(KernelContext& ctx, const BinCfg& cfg, bool same_type = true) {
  BinArgs r{ctx.input(0), ctx.input(1), {}};
  if (same_type && r.a.dtype() != r.b.dtype())
    ctx.fail(ErrorCode::InvalidArgument, std::string("input types differ: ") + dtype_name(r.a.dtype()) + " and " +
                                             dtype_name(r.b.dtype()));
  if (!cfg.legacy) {
    r.out = broadcast_shapes(ctx, r.a.shape(), r.b.shape());
    return r;
  }
  const Shape& as = r.a.shape();
  const Shape& bs = r.b.shape();
  if (!cfg.bcast) {
    if (as != bs)
      ctx.fail(ErrorCode::InvalidArgument, "shapes " + shape_str(as) + " and " + shape_str(bs) +
                                               " differ and the broadcast attribute is not set");
    r.out = as;
    return r;
  }
  int ra = int(as.size()), rb = int(bs.size());
  int64_t axis = cfg.axis ? *cfg.axis : ra - rb;
  if (axis < 0) axis += ra;
  bool ok = rb <= ra && axis >= 0 && axis <= ra - rb;
  for (int i = 0; ok && i < rb; ++i)
    if (bs[size_t(i)] != as[size_t(axis + i)] && bs[size_t(i)] != 1) ok = false;
  if (!ok) {
    if (r.b.numel() == 1) {  // a one-element B is always allowed
      r.b = r.b.reshaped({});
      r.out = as;
      return r;
    }
    ctx.fail(ErrorCode::InvalidArgument, "shape " + shape_str(bs) + " cannot be broadcast to " + shape_str(as) +
                                             " at axis " + std::to_string(axis));
  }
  Shape nb(size_t(ra), 1);
  for (int i = 0; i < rb; ++i) nb[size_t(axis + i)] = bs[size_t(i)];
  r.b = r.b.reshaped(nb);
  r.out = as;
  return r;
}

// ---------------------------------------------------------------------------------------------
// Functors. T is the compute type (float for float16/bfloat16).

struct AddF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (is_int_v<T>) return T(wide_u<T>(a) + wide_u<T>(b));
    else return a + b;
  }
};
struct SubF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (is_int_v<T>) return T(wide_u<T>(a) - wide_u<T>(b));
    else return a - b;
  }
};
struct MulF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (is_int_v<T>) return T(wide_u<T>(a) * wide_u<T>(b));
    else return a * b;
  }
};
struct DivF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (is_int_v<T>) {
      if (b == 0) BASALT_THROW(InvalidArgument, "integer division by zero");
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return T(wide_u<T>(0) - wide_u<T>(a));
      return T(a / b);
    } else {
      return a / b;
    }
  }
};
struct MaxF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (std::is_floating_point_v<T>) return a != a ? a : (b != b ? b : (a < b ? b : a));
    else return a < b ? b : a;
  }
};
struct MinF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (std::is_floating_point_v<T>) return a != a ? a : (b != b ? b : (b < a ? b : a));
    else return b < a ? b : a;
  }
};
// Mod with the sign of the divisor (fmod=0, integers only).
struct ModF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if (b == 0) BASALT_THROW(InvalidArgument, "integer modulo by zero");
    if constexpr (std::is_signed_v<T>) {
      if (b == T(-1)) return T(0);
      T r = T(a % b);
      if (r != 0 && ((r < 0) != (b < 0))) r = T(r + b);
      return r;
    } else {
      return T(a % b);
    }
  }
};
// Mod with the sign of the dividend (fmod=1).
struct FmodF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if constexpr (is_int_v<T>) {
      if (b == 0) BASALT_THROW(InvalidArgument, "integer modulo by zero");
      if constexpr (std::is_signed_v<T>)
        if (b == T(-1)) return T(0);
      return T(a % b);
    } else {
      return std::fmod(a, b);
    }
  }
};
struct PowF {
  template <class X, class Y>
  auto operator()(const X& x, const Y& y) const {
    if constexpr (is_int_v<X> && is_int_v<Y>) {
      using W = wide_u<X>;
      if constexpr (std::is_signed_v<Y>) {
        if (y < 0) {
          if (x == 1) return X(1);
          if constexpr (std::is_signed_v<X>)
            if (x == X(-1)) return (y & 1) ? X(-1) : X(1);
          return X(0);
        }
      }
      W result = 1, base = W(x);
      uint64_t e = uint64_t(y);
      while (e) {
        if (e & 1) result *= base;
        base *= base;
        e >>= 1;
      }
      return X(result);
    } else if constexpr (is_int_v<X>) {
      return saturate_cast<X>(std::pow(double(x), double(y)));
    } else if constexpr (std::is_same_v<X, float> && std::is_same_v<Y, float>) {
      return std::pow(x, y);
    } else {
      return X(std::pow(double(x), double(y)));
    }
  }
};
struct EqF {
  template <class T>
  bool operator()(const T& a, const T& b) const { return a == b; }
};
struct GtF {
  template <class T>
  bool operator()(const T& a, const T& b) const { return a > b; }
};
struct LtF {
  template <class T>
  bool operator()(const T& a, const T& b) const { return a < b; }
};
struct GeF {
  template <class T>
  bool operator()(const T& a, const T& b) const { return a >= b; }
};
struct LeF {
  template <class T>
  bool operator()(const T& a, const T& b) const { return a <= b; }
};
struct BitAndF {
  template <class T>
  T operator()(const T& a, const T& b) const { return T(a & b); }
};
struct BitOrF {
  template <class T>
  T operator()(const T& a, const T& b) const { return T(a | b); }
};
struct BitXorF {
  template <class T>
  T operator()(const T& a, const T& b) const { return T(a ^ b); }
};
struct ShlF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if (uint64_t(b) >= sizeof(T) * 8) return T(0);
    return T(wide_u<T>(a) << b);
  }
};
struct ShrF {
  template <class T>
  T operator()(const T& a, const T& b) const {
    if (uint64_t(b) >= sizeof(T) * 8) return T(0);
    return T(wide_u<T>(a) >> b);
  }
};

// ---------------------------------------------------------------------------------------------
// Kernel builders

// Integer types only (no bool, no float).
template <class F>
bool visit_uint(DType dt, F&& f) {
  switch (dt) {
    case DType::Uint8: f.template operator()<uint8_t>(); return true;
    case DType::Uint16: f.template operator()<uint16_t>(); return true;
    case DType::Uint32: f.template operator()<uint32_t>(); return true;
    case DType::Uint64: f.template operator()<uint64_t>(); return true;
    default: return false;
  }
}
template <class F>
bool visit_int(DType dt, F&& f) {
  switch (dt) {
    case DType::Int8: f.template operator()<int8_t>(); return true;
    case DType::Int16: f.template operator()<int16_t>(); return true;
    case DType::Int32: f.template operator()<int32_t>(); return true;
    case DType::Int64: f.template operator()<int64_t>(); return true;
    default: return visit_uint(dt, f);
  }
}

// The vectorized float32 kernel for a functor, where there is one (-1: none).
template <class Op>
constexpr int kFastBin = -1;
template <>
constexpr int kFastBin<AddF> = int(kernels::BinaryOp::Add);
template <>
constexpr int kFastBin<SubF> = int(kernels::BinaryOp::Sub);
template <>
constexpr int kFastBin<MulF> = int(kernels::BinaryOp::Mul);
template <>
constexpr int kFastBin<DivF> = int(kernels::BinaryOp::Div);
template <>
constexpr int kFastBin<MaxF> = int(kernels::BinaryOp::Max);
template <>
constexpr int kFastBin<MinF> = int(kernels::BinaryOp::Min);

// The float32 cases of a binary op that need no broadcast plan: equal shapes, or one operand with
// a single element and no more dims than the other (the output then has the other's shape).
// Returns false (nothing done) for anything else.
bool binary_f32_flat(KernelContext& ctx, kernels::BinaryOp op) {
  const Tensor& a = ctx.input(0);
  const Tensor& b = ctx.input(1);
  if (a.dtype() != DType::Float || b.dtype() != DType::Float) return false;
  kernels::BinMode mode;
  const Tensor* big;
  if (a.shape() == b.shape()) mode = kernels::BinMode::VecVec, big = &a;
  else if (b.numel() == 1 && b.rank() <= a.rank()) mode = kernels::BinMode::VecScalar, big = &a;
  else if (a.numel() == 1 && a.rank() <= b.rank()) mode = kernels::BinMode::ScalarVec, big = &b;
  else return false;
  Tensor& y = ctx.output_uninit(0, DType::Float, big->shape());
  if (y.numel() == 0) return true;
  kernels::binary_f32(ctx.pool(), op, mode, a.data<float>(), b.data<float>(), y.data<float>(), y.numel());
  return true;
}

// y = Op(a, b) with broadcasting: the vectorized kernel for float32, the reference loop otherwise.
// y may be a (in place) when a already has y's shape.
template <class Op, class T>
void binary_dispatch(KernelContext& ctx, const Tensor& a, const Tensor& b, Tensor& y) {
  if constexpr (kFastBin<Op> >= 0 && std::is_same_v<T, float>)
    binary_f32_plan(ctx, kernels::BinaryOp(kFastBin<Op>), a, b, y);
  else
    binary_apply<T, T, T>(a, b, y, Op{});
}

// Same-type binary op, output of the input type, over numeric types.
template <class Op>
KernelFactory arith_factory() {
  return [](const Node& n) {
    BinCfg cfg = parse_bin(n);
    return kernel([cfg](KernelContext& ctx) {
      if constexpr (kFastBin<Op> >= 0) {
        // float32 with equal shapes or a one-element operand (no more dims than the other): one
        // flat pass of the row kernel, without the tensor copies and broadcast plan of the general
        // path (their allocations dominate small ops).
        if (!cfg.legacy && binary_f32_flat(ctx, kernels::BinaryOp(kFastBin<Op>))) return;
      }
      BinArgs ar = bin_args(ctx, cfg);
      if constexpr (kFastBin<Op> >= 0) {
        if (ar.a.dtype() == DType::Float) {
          Tensor& y = ctx.output_uninit(0, DType::Float, ar.out);
          binary_dispatch<Op, float>(ctx, ar.a, ar.b, y);
          return;
        }
      }
      if (!visit_numeric(ar.a.dtype(), [&]<class T>() {
            Tensor& y = ctx.output(0, ar.a.dtype(), ar.out);
            binary_apply<T, T, T>(ar.a, ar.b, y, Op{});
          }))
        unsupported_dtype(ctx, 0, ar.a.dtype());
    });
  };
}

enum class CmpTypes { Numeric, NumericBool, NumericBoolString };

template <class Op>
KernelFactory compare_factory(CmpTypes types) {
  return [types](const Node& n) {
    BinCfg cfg = parse_bin(n);
    return kernel([cfg, types](KernelContext& ctx) {
      BinArgs ar = bin_args(ctx, cfg);
      DType dt = ar.a.dtype();
      auto body = [&]<class T>() {
        Tensor& y = ctx.output(0, DType::Bool, ar.out);
        binary_apply<T, T, bool>(ar.a, ar.b, y, Op{});
      };
      bool ok;
      if (dt == DType::String && types == CmpTypes::NumericBoolString) {
        body.template operator()<std::string>();
        ok = true;
      } else if (dt == DType::Bool) {
        ok = types != CmpTypes::Numeric && visit_numeric_bool(dt, body);
      } else {
        ok = visit_numeric(dt, body);
      }
      if (!ok) unsupported_dtype(ctx, 0, dt);
    });
  };
}

template <class Op>
KernelFactory logic_factory() {
  return [](const Node& n) {
    BinCfg cfg = parse_bin(n);
    return kernel([cfg](KernelContext& ctx) {
      BinArgs ar = bin_args(ctx, cfg);
      if (ar.a.dtype() != DType::Bool) unsupported_dtype(ctx, 0, ar.a.dtype());
      Tensor& y = ctx.output(0, DType::Bool, ar.out);
      binary_apply<bool, bool, bool>(ar.a, ar.b, y, Op{});
    });
  };
}

struct AndF {
  bool operator()(bool a, bool b) const { return a && b; }
};
struct OrF {
  bool operator()(bool a, bool b) const { return a || b; }
};
struct XorF {
  bool operator()(bool a, bool b) const { return a != b; }
};

template <class Op>
KernelFactory bitwise_factory() {
  return [](const Node& n) {
    BinCfg cfg = parse_bin(n);
    return kernel([cfg](KernelContext& ctx) {
      BinArgs ar = bin_args(ctx, cfg);
      if (!visit_int(ar.a.dtype(), [&]<class T>() {
            Tensor& y = ctx.output(0, ar.a.dtype(), ar.out);
            binary_apply<T, T, T>(ar.a, ar.b, y, Op{});
          }))
        unsupported_dtype(ctx, 0, ar.a.dtype());
    });
  };
}

// Variadic Min/Max/Sum (fold with Op) and Mean (Sum then divide).
enum class VarTypes { Numeric, Float };

template <class Op>
KernelFactory variadic_factory(VarTypes types, bool mean) {
  return [types, mean](const Node&) {
    return kernel([types, mean](KernelContext& ctx) {
      int n = ctx.num_inputs();
      if (n < 1) ctx.fail(ErrorCode::InvalidModel, "needs at least one input");
      const Tensor& first = ctx.input(0);
      DType dt = first.dtype();
      Shape out = first.shape();
      for (int i = 1; i < n; ++i) {
        const Tensor& t = ctx.input(i);
        if (t.dtype() != dt)
          ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " has type " + dtype_name(t.dtype()) +
                                                   ", expected " + dtype_name(dt));
        out = broadcast_shapes(ctx, out, t.shape());
      }
      auto body = [&]<class T>() {
        if (n == 1) {
          ctx.set_output(0, ctx.input_value(0));
          return;
        }
        Tensor& y = ctx.output(0, dt, out);
        binary_dispatch<Op, T>(ctx, first, ctx.input(1), y);
        for (int i = 2; i < n; ++i) binary_dispatch<Op, T>(ctx, y, ctx.input(i), y);
        if (mean) {
          if constexpr (!is_int_v<T>) {
            T* p = y.data<T>();
            int64_t m = y.numel();
            using C = std::remove_cvref_t<decltype(cv(p[0]))>;
            for (int64_t i = 0; i < m; ++i) p[i] = T(cv(p[i]) / C(n));
          }
        }
      };
      bool ok = types == VarTypes::Float ? visit_float(dt, body) : visit_numeric(dt, body);
      if (!ok) unsupported_dtype(ctx, 0, dt);
    });
  };
}

enum class UnTypes { Float, Signed, Numeric };

// The vectorized float32 kernel for a unary functor, where there is one (-1: none). Declared
// here, specialised after the functors below.
template <class Op>
constexpr int kFastUn = -1;

// Same-type unary op (output dtype = input dtype).
template <class Op>
KernelFactory unary_factory(UnTypes types) {
  return [types](const Node&) {
    return kernel([types](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType dt = x.dtype();
      auto body = [&]<class T>() {
        if constexpr (kFastUn<Op> >= 0 && std::is_same_v<T, float>) {
          Tensor& y = ctx.output_uninit(0, dt, x.shape());
          kernels::unary_f32(ctx.pool(), kernels::UnaryOp(kFastUn<Op>), {}, x.data<float>(), y.data<float>(),
                             x.numel());
          return;
        }
        Tensor& y = ctx.output(0, dt, x.shape());
        unary_apply<T, T>(x, y, Op{});
      };
      bool ok;
      switch (types) {
        case UnTypes::Float: ok = visit_float(dt, body); break;
        case UnTypes::Signed:
          ok = dt != DType::Uint8 && dt != DType::Uint16 && dt != DType::Uint32 && dt != DType::Uint64 &&
               visit_numeric(dt, body);
          break;
        default: ok = visit_numeric(dt, body); break;
      }
      if (!ok) unsupported_dtype(ctx, 0, dt);
    });
  };
}

#define BASALT_FLOAT_UNARY(NAME, EXPR)            \
  struct NAME {                                   \
    template <class T>                            \
    T operator()(T v) const {                     \
      return EXPR;                                \
    }                                             \
  };
BASALT_FLOAT_UNARY(ExpF, std::exp(v))
BASALT_FLOAT_UNARY(LogF, std::log(v))
BASALT_FLOAT_UNARY(SqrtF, std::sqrt(v))
BASALT_FLOAT_UNARY(ReciprocalF, T(1) / v)
BASALT_FLOAT_UNARY(SinF, std::sin(v))
BASALT_FLOAT_UNARY(CosF, std::cos(v))
BASALT_FLOAT_UNARY(TanF, std::tan(v))
BASALT_FLOAT_UNARY(AsinF, std::asin(v))
BASALT_FLOAT_UNARY(AcosF, std::acos(v))
BASALT_FLOAT_UNARY(AtanF, std::atan(v))
BASALT_FLOAT_UNARY(SinhF, std::sinh(v))
BASALT_FLOAT_UNARY(CoshF, std::cosh(v))
BASALT_FLOAT_UNARY(AsinhF, std::asinh(v))
BASALT_FLOAT_UNARY(AcoshF, std::acosh(v))
BASALT_FLOAT_UNARY(AtanhF, std::atanh(v))
BASALT_FLOAT_UNARY(ErfF, std::erf(v))
BASALT_FLOAT_UNARY(CeilF, std::ceil(v))
BASALT_FLOAT_UNARY(FloorF, std::floor(v))
BASALT_FLOAT_UNARY(RoundF, std::nearbyint(v))  // default rounding mode: half to even
#undef BASALT_FLOAT_UNARY

struct AbsF {
  template <class T>
  T operator()(T v) const {
    if constexpr (is_int_v<T> && std::is_signed_v<T>) return v < 0 ? T(wide_u<T>(0) - wide_u<T>(v)) : v;
    else if constexpr (is_int_v<T>) return v;
    else return std::fabs(v);
  }
};
struct NegF {
  template <class T>
  T operator()(T v) const {
    if constexpr (is_int_v<T>) return T(wide_u<T>(0) - wide_u<T>(v));
    else return -v;
  }
};
struct SignF {
  template <class T>
  T operator()(T v) const {
    if constexpr (std::is_floating_point_v<T>)
      if (v != v) return v;
    return v > T(0) ? T(1) : (v < T(0) ? T(-1) : T(0));
  }
};
struct BitNotF {
  template <class T>
  T operator()(T v) const { return T(~v); }
};

template <>
constexpr int kFastUn<ExpF> = int(kernels::UnaryOp::Exp);
template <>
constexpr int kFastUn<SqrtF> = int(kernels::UnaryOp::Sqrt);
template <>
constexpr int kFastUn<ErfF> = int(kernels::UnaryOp::Erf);
template <>
constexpr int kFastUn<ReciprocalF> = int(kernels::UnaryOp::Reciprocal);
template <>
constexpr int kFastUn<AbsF> = int(kernels::UnaryOp::Abs);
template <>
constexpr int kFastUn<NegF> = int(kernels::UnaryOp::Neg);

// Float8 NaN / Inf detection on the stored bit pattern.
bool f8_isnan(DType dt, uint8_t b) {
  switch (dt) {
    case DType::Float8E4M3FN: return (b & 0x7F) == 0x7F;
    case DType::Float8E4M3FNUZ: case DType::Float8E5M2FNUZ: return b == 0x80;
    case DType::Float8E5M2: return (b & 0x7F) > 0x7C;
    case DType::Float8E8M0: return b == 0xFF;
    default: return false;
  }
}
// 1: +inf, -1: -inf, 0: finite or NaN.
int f8_isinf(DType dt, uint8_t b) {
  if (dt == DType::Float8E5M2) {
    if (b == 0x7C) return 1;
    if (b == 0xFC) return -1;
  }
  return 0;
}
bool is_f8(DType dt) {
  return dt == DType::Float8E4M3FN || dt == DType::Float8E4M3FNUZ || dt == DType::Float8E5M2 ||
         dt == DType::Float8E5M2FNUZ || dt == DType::Float8E8M0;
}

}  // namespace

static void register_arithmetic(OpRegistry& r) {
  // ---- arithmetic ----
  add_versions(r, "Add", {1, 6, 7, 13, 14}, arith_factory<AddF>());
  add_versions(r, "Sub", {1, 6, 7, 13, 14}, arith_factory<SubF>());
  add_versions(r, "Mul", {1, 6, 7, 13, 14}, arith_factory<MulF>());
  add_versions(r, "Div", {1, 6, 7, 13, 14}, arith_factory<DivF>());

  add_versions(r, "Pow", {1, 7, 12, 13, 15}, [](const Node& n) {
    BinCfg cfg = parse_bin(n);
    return kernel([cfg](KernelContext& ctx) {
      BinArgs ar = bin_args(ctx, cfg, /*same_type=*/false);
      DType xt = ar.a.dtype(), yt = ar.b.dtype();
      bool ok = false;
      auto outer = [&]<class X>() {
        ok = visit_numeric(yt, [&]<class Y>() {
          Tensor& y = ctx.output(0, xt, ar.out);
          binary_apply<X, Y, X>(ar.a, ar.b, y, PowF{});
        });
      };
      switch (xt) {
        case DType::Int32: case DType::Int64: case DType::Float16: case DType::BFloat16: case DType::Float:
        case DType::Double:
          visit_numeric(xt, outer);
          break;
        default: unsupported_dtype(ctx, 0, xt);
      }
      if (!ok) unsupported_dtype(ctx, 1, yt);
    });
  });

  add_versions(r, "Mod", {10, 13}, [](const Node& n) {
    int64_t fm = n.attr_int("fmod", 0);
    if (fm != 0 && fm != 1) n.fail(ErrorCode::InvalidModel, "fmod must be 0 or 1, got " + std::to_string(fm));
    BinCfg cfg = parse_bin(n);
    return kernel([cfg, fm](KernelContext& ctx) {
      BinArgs ar = bin_args(ctx, cfg);
      DType dt = ar.a.dtype();
      if (fm == 0 && dtype_is_float(dt))
        ctx.fail(ErrorCode::InvalidModel, "fmod must be 1 for floating-point inputs");
      if (!visit_numeric(dt, [&]<class T>() {
            Tensor& y = ctx.output(0, dt, ar.out);
            if constexpr (is_int_v<T>) {
              if (fm) binary_apply<T, T, T>(ar.a, ar.b, y, FmodF{});
              else binary_apply<T, T, T>(ar.a, ar.b, y, ModF{});
            } else {
              binary_apply<T, T, T>(ar.a, ar.b, y, FmodF{});
            }
          }))
        unsupported_dtype(ctx, 0, dt);
    });
  });
}

static void register_variadic(OpRegistry& r) {
  // ---- variadic ----
  add_versions(r, "Max", {1, 6, 8, 12, 13}, variadic_factory<MaxF>(VarTypes::Numeric, false));
  add_versions(r, "Min", {1, 6, 8, 12, 13}, variadic_factory<MinF>(VarTypes::Numeric, false));
  add_versions(r, "Sum", {1, 6, 8, 13}, variadic_factory<AddF>(VarTypes::Numeric, false));
  add_versions(r, "Mean", {1, 6, 8, 13}, variadic_factory<AddF>(VarTypes::Float, true));
}

static void register_comparison(OpRegistry& r) {
  // ---- comparison ----
  add_versions(r, "Equal", {1, 7, 11, 13, 19}, compare_factory<EqF>(CmpTypes::NumericBoolString));
  add_versions(r, "Greater", {1, 7, 9, 13}, compare_factory<GtF>(CmpTypes::Numeric));
  add_versions(r, "Less", {1, 7, 9, 13}, compare_factory<LtF>(CmpTypes::Numeric));
  add_versions(r, "GreaterOrEqual", {12, 16}, compare_factory<GeF>(CmpTypes::Numeric));
  add_versions(r, "LessOrEqual", {12, 16}, compare_factory<LeF>(CmpTypes::Numeric));
}

static void register_logical_bitwise(OpRegistry& r) {
  // ---- logical / bitwise ----
  add_versions(r, "And", {1, 7}, logic_factory<AndF>());
  add_versions(r, "Or", {1, 7}, logic_factory<OrF>());
  add_versions(r, "Xor", {1, 7}, logic_factory<XorF>());
  r.add("Not", 1, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.dtype() != DType::Bool) unsupported_dtype(ctx, 0, x.dtype());
      Tensor& y = ctx.output(0, DType::Bool, x.shape());
      unary_apply<bool, bool>(x, y, [](bool v) { return !v; });
    });
  });
  r.add("BitwiseAnd", 18, bitwise_factory<BitAndF>());
  r.add("BitwiseOr", 18, bitwise_factory<BitOrF>());
  r.add("BitwiseXor", 18, bitwise_factory<BitXorF>());
  r.add("BitwiseNot", 18, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (!visit_int(x.dtype(), [&]<class T>() {
            Tensor& y = ctx.output(0, x.dtype(), x.shape());
            unary_apply<T, T>(x, y, BitNotF{});
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  });
  r.add("BitShift", 11, [](const Node& n) {
    std::string dir = n.attr_string("direction");
    if (dir != "LEFT" && dir != "RIGHT")
      n.fail(ErrorCode::InvalidModel, "direction must be LEFT or RIGHT, got '" + dir + "'");
    bool left = dir == "LEFT";
    return kernel([left](KernelContext& ctx) {
      BinArgs ar = bin_args(ctx, BinCfg{});
      if (!visit_uint(ar.a.dtype(), [&]<class T>() {
            Tensor& y = ctx.output(0, ar.a.dtype(), ar.out);
            if (left) binary_apply<T, T, T>(ar.a, ar.b, y, ShlF{});
            else binary_apply<T, T, T>(ar.a, ar.b, y, ShrF{});
          }))
        unsupported_dtype(ctx, 0, ar.a.dtype());
    });
  });
}

static void register_where(OpRegistry& r) {
  // ---- Where ----
  add_versions(r, "Where", {9, 16}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& c = ctx.input(0);
      const Tensor& x = ctx.input(1);
      const Tensor& yv = ctx.input(2);
      if (c.dtype() != DType::Bool) unsupported_dtype(ctx, 0, c.dtype());
      if (x.dtype() != yv.dtype())
        ctx.fail(ErrorCode::InvalidArgument, std::string("X and Y types differ: ") + dtype_name(x.dtype()) + " and " +
                                                 dtype_name(yv.dtype()));
      Shape out = broadcast_shapes(ctx, broadcast_shapes(ctx, c.shape(), x.shape()), yv.shape());
      if (!visit_all(x.dtype(), [&]<class T>() {
            Tensor& o = ctx.output(0, x.dtype(), out);
            if (o.numel() == 0) return;
            const bool* pc = c.data<bool>();
            const T* px = x.data<T>();
            const T* py = yv.data<T>();
            T* po = o.data<T>();
            Plan<3> plan = make_plan<3>(out, {&c.shape(), &x.shape(), &yv.shape()});
            run_plan(plan, [&](int64_t oo, const int64_t* off, const int64_t* is, int64_t n) {
              const bool* cc = pc + off[0];
              const T* xx = px + off[1];
              const T* yy = py + off[2];
              T* w = po + oo;
              if (is[0] && is[1] && is[2]) {
                for (int64_t i = 0; i < n; ++i) w[i] = cc[i] ? xx[i] : yy[i];
              } else {
                for (int64_t i = 0; i < n; ++i) w[i] = cc[i * is[0]] ? xx[i * is[1]] : yy[i * is[2]];
              }
            });
          }))
        unsupported_dtype(ctx, 1, x.dtype());
    });
  });
}

static void register_unary_math(OpRegistry& r) {
  // ---- unary math ----
  add_versions(r, "Abs", {1, 6, 13}, unary_factory<AbsF>(UnTypes::Numeric));
  add_versions(r, "Neg", {1, 6, 13}, unary_factory<NegF>(UnTypes::Signed));
  add_versions(r, "Sign", {9, 13}, unary_factory<SignF>(UnTypes::Numeric));
  add_versions(r, "Exp", {1, 6, 13}, unary_factory<ExpF>(UnTypes::Float));
  add_versions(r, "Log", {1, 6, 13}, unary_factory<LogF>(UnTypes::Float));
  add_versions(r, "Sqrt", {1, 6, 13}, unary_factory<SqrtF>(UnTypes::Float));
  add_versions(r, "Reciprocal", {1, 6, 13}, unary_factory<ReciprocalF>(UnTypes::Float));
  add_versions(r, "Ceil", {1, 6, 13}, unary_factory<CeilF>(UnTypes::Float));
  add_versions(r, "Floor", {1, 6, 13}, unary_factory<FloorF>(UnTypes::Float));
  add_versions(r, "Round", {11, 22}, unary_factory<RoundF>(UnTypes::Float));
  add_versions(r, "Erf", {9, 13}, unary_factory<ErfF>(UnTypes::Float));
  add_versions(r, "Sin", {7, 22}, unary_factory<SinF>(UnTypes::Float));
  add_versions(r, "Cos", {7, 22}, unary_factory<CosF>(UnTypes::Float));
  add_versions(r, "Tan", {7, 22}, unary_factory<TanF>(UnTypes::Float));
  add_versions(r, "Asin", {7, 22}, unary_factory<AsinF>(UnTypes::Float));
  add_versions(r, "Acos", {7, 22}, unary_factory<AcosF>(UnTypes::Float));
  add_versions(r, "Atan", {7, 22}, unary_factory<AtanF>(UnTypes::Float));
  add_versions(r, "Sinh", {9, 22}, unary_factory<SinhF>(UnTypes::Float));
  add_versions(r, "Cosh", {9, 22}, unary_factory<CoshF>(UnTypes::Float));
  add_versions(r, "Asinh", {9, 22}, unary_factory<AsinhF>(UnTypes::Float));
  add_versions(r, "Acosh", {9, 22}, unary_factory<AcoshF>(UnTypes::Float));
  add_versions(r, "Atanh", {9, 22}, unary_factory<AtanhF>(UnTypes::Float));

  add_versions(r, "IsNaN", {9, 13, 20}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType dt = x.dtype();
      Tensor& y = ctx.output(0, DType::Bool, x.shape());
      if (is_f8(dt)) {
        unary_apply<uint8_t, bool>(x, y, [dt](uint8_t b) { return f8_isnan(dt, b); });
        return;
      }
      if (!visit_float(dt, [&]<class T>() { unary_apply<T, bool>(x, y, [](auto v) { return v != v; }); }))
        unsupported_dtype(ctx, 0, dt);
    });
  });
  add_versions(r, "IsInf", {10, 20}, [](const Node& n) {
    bool pos = n.attr_int("detect_positive", 1) != 0;
    bool neg = n.attr_int("detect_negative", 1) != 0;
    return kernel([pos, neg](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType dt = x.dtype();
      Tensor& y = ctx.output(0, DType::Bool, x.shape());
      if (is_f8(dt)) {
        unary_apply<uint8_t, bool>(x, y, [dt, pos, neg](uint8_t b) {
          int s = f8_isinf(dt, b);
          return (s > 0 && pos) || (s < 0 && neg);
        });
        return;
      }
      if (!visit_float(dt, [&]<class T>() {
            unary_apply<T, bool>(x, y, [pos, neg](auto v) { return std::isinf(v) && (v > 0 ? pos : neg); });
          }))
        unsupported_dtype(ctx, 0, dt);
    });
  });
}

void register_elementwise_ops(OpRegistry& r) {
  for (auto family : {register_arithmetic, register_variadic, register_comparison, register_logical_bitwise, register_where, register_unary_math}) family(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"Abs", "Erf", "Exp", "Neg", "Reciprocal", "Sqrt"}) r.def(op).infer_symbolic(shapes::same).in_place(in_place::unary_f32);
  for (const char* op : {"Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "BitwiseNot", "Ceil", "Cos", "Cosh", "Floor", "Log", "Not", "Round", "Sign", "Sin", "Sinh", "Tan"}) r.def(op).infer_symbolic(shapes::same);
  for (const char* op : {"Add", "Div", "Mul", "Sub"}) r.def(op).infer_symbolic(shapes::broadcast).in_place(in_place::binary_f32);
  for (const char* op : {"And", "Equal", "Greater", "GreaterOrEqual", "Less", "LessOrEqual", "Or", "Xor"}) r.def(op).infer_symbolic(shapes::broadcast_bool);
  for (const char* op : {"BitShift", "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Mod", "Pow"}) r.def(op).infer_symbolic(shapes::broadcast);
  for (const char* op : {"IsInf", "IsNaN"}) r.def(op).infer_symbolic(shapes::same_bool);
  for (const char* op : {"Max", "Mean", "Min", "Sum"}) r.def(op).infer_symbolic(shapes::broadcast).alias(Alias::MaybeView);
  r.def("Where").infer_symbolic(shapes::where);
}

}  // namespace basalt
