// Reference kernels: quantization ops (QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
// MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv).
//
// Float8 / float4 elements are stored one per byte holding the bit pattern; int4/int2 are stored
// sign-extended in int8, uint4/uint2 in uint8. Conversions to and from float are below.
#include "kernels/quantize.hpp"
#include "ops/quant_common.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace basalt {

namespace quant {

// ---------------------------------------------------------------------------------------------
// Small-float formats
// ---------------------------------------------------------------------------------------------

struct MiniFloat {
  int exp_bits, man_bits, bias;
  bool fnuz;      // no negative zero, NaN = 0x80, no infinity
  bool has_inf;   // IEEE-like infinities (E5M2)
  bool has_nan;   // false for float4e2m1
  double max;     // largest finite value
};

const MiniFloat* minifloat_of(DType dt) {
  static const MiniFloat e4m3fn{4, 3, 7, false, false, true, 448.0};
  static const MiniFloat e4m3fnuz{4, 3, 8, true, false, true, 240.0};
  static const MiniFloat e5m2{5, 2, 15, false, true, true, 57344.0};
  static const MiniFloat e5m2fnuz{5, 2, 16, true, false, true, 57344.0};
  static const MiniFloat e2m1{2, 1, 1, false, false, false, 6.0};
  switch (dt) {
    case DType::Float8E4M3FN: return &e4m3fn;
    case DType::Float8E4M3FNUZ: return &e4m3fnuz;
    case DType::Float8E5M2: return &e5m2;
    case DType::Float8E5M2FNUZ: return &e5m2fnuz;
    case DType::Float4E2M1: return &e2m1;
    default: return nullptr;
  }
}

double minifloat_decode(const MiniFloat& f, uint8_t bits) {
  const int total = 1 + f.exp_bits + f.man_bits;
  const uint32_t sign_bit = 1u << (total - 1);
  const uint32_t man_mask = (1u << f.man_bits) - 1;
  const uint32_t exp_mask = (1u << f.exp_bits) - 1;
  uint32_t b = bits & ((1u << total) - 1);
  if (f.fnuz && b == 0x80) return std::numeric_limits<double>::quiet_NaN();
  bool neg = (b & sign_bit) != 0;
  uint32_t e = (b >> f.man_bits) & exp_mask;
  uint32_t m = b & man_mask;
  if (f.has_nan && !f.fnuz) {
    if (f.has_inf) {  // E5M2: exponent all ones is inf / NaN
      if (e == exp_mask) return m == 0 ? (neg ? -INFINITY : INFINITY) : std::numeric_limits<double>::quiet_NaN();
    } else if (e == exp_mask && m == man_mask) {  // E4M3FN: only S.1111.111 is NaN
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  double v;
  if (e == 0) v = std::ldexp(double(m), 1 - f.bias - f.man_bits);
  else v = std::ldexp(double(m | (1u << f.man_bits)), int(e) - f.bias - f.man_bits);
  return neg ? -v : v;
}

uint8_t minifloat_encode(const MiniFloat& f, double x, bool saturate) {
  const int total = 1 + f.exp_bits + f.man_bits;
  const uint8_t sign = std::signbit(x) ? uint8_t(1u << (total - 1)) : uint8_t(0);
  const uint8_t nan_bits = f.fnuz ? uint8_t(0x80) : uint8_t(0x7F | sign);
  const uint32_t max_bits_mag = [&] {  // encoding of the largest finite magnitude
    if (f.fnuz) return (1u << (total - 1)) - 1;
    if (f.has_inf) return ((((1u << f.exp_bits) - 1) - 1) << f.man_bits) | ((1u << f.man_bits) - 1);
    if (f.has_nan) return (1u << (total - 1)) - 2;  // E4M3FN: 0x7E
    return (1u << (total - 1)) - 1;                 // E2M1: 0x7
  }();
  auto max_enc = [&] { return uint8_t(sign | max_bits_mag); };
  auto overflow = [&]() -> uint8_t {
    if (saturate || !f.has_nan) return max_enc();
    if (f.has_inf) return uint8_t(sign | (((1u << f.exp_bits) - 1) << f.man_bits));
    return nan_bits;
  };
  if (std::isnan(x)) return f.has_nan ? nan_bits : max_enc();
  if (std::isinf(x)) {
    if (!f.has_nan) return max_enc();
    if (f.fnuz) return nan_bits;
    if (f.has_inf) return saturate ? max_enc() : uint8_t(sign | (((1u << f.exp_bits) - 1) << f.man_bits));
    return saturate ? max_enc() : nan_bits;
  }
  double a = std::fabs(x);
  const int emin = 1 - f.bias;  // exponent of the smallest normal
  int e;
  if (a < std::ldexp(1.0, emin)) e = emin;
  else {
    std::frexp(a, &e);
    e -= 1;  // a in [2^e, 2^(e+1))
  }
  double q = std::ldexp(1.0, e - f.man_bits);
  double r = std::nearbyint(a / q) * q;  // round half to even (default rounding mode)
  if (r > f.max) return overflow();
  if (r == 0) return f.fnuz ? uint8_t(0) : sign;
  uint32_t mag;
  if (r < std::ldexp(1.0, emin)) {
    mag = uint32_t(std::ldexp(r, f.man_bits - emin));
  } else {
    int re;
    std::frexp(r, &re);
    re -= 1;
    uint32_t m = uint32_t(std::ldexp(r, f.man_bits - re)) - (1u << f.man_bits);
    mag = (uint32_t(re + f.bias) << f.man_bits) | m;
  }
  return uint8_t(sign | mag);
}

// ---------------------------------------------------------------------------------------------
// Element access helpers for quantized types
// ---------------------------------------------------------------------------------------------

bool is_int_quant(DType dt) {
  switch (dt) {
    case DType::Int8: case DType::Uint8: case DType::Int16: case DType::Uint16: case DType::Int32:
    case DType::Int4: case DType::Uint4: case DType::Int2: case DType::Uint2:
      return true;
    default: return false;
  }
}

void int_range(DType dt, int64_t& lo, int64_t& hi) {
  switch (dt) {
    case DType::Int8: lo = -128; hi = 127; break;
    case DType::Uint8: lo = 0; hi = 255; break;
    case DType::Int16: lo = -32768; hi = 32767; break;
    case DType::Uint16: lo = 0; hi = 65535; break;
    case DType::Int32: lo = INT32_MIN; hi = INT32_MAX; break;
    case DType::Int4: lo = -8; hi = 7; break;
    case DType::Uint4: lo = 0; hi = 15; break;
    case DType::Int2: lo = -2; hi = 1; break;
    case DType::Uint2: lo = 0; hi = 3; break;
    default: lo = 0; hi = 0; break;
  }
}

// Integer element i of an integer tensor (incl. int4/uint4/int2/uint2 stored per byte).
int64_t int_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Int8: case DType::Int4: case DType::Int2: return t.data<int8_t>()[i];
    case DType::Uint8: case DType::Uint4: case DType::Uint2: return t.data<uint8_t>()[i];
    case DType::Int16: return t.data<int16_t>()[i];
    case DType::Uint16: return t.data<uint16_t>()[i];
    case DType::Int32: return t.data<int32_t>()[i];
    default: return t.get_int(i);
  }
}

void int_store(Tensor& t, int64_t i, int64_t v) {
  switch (t.dtype()) {
    case DType::Int8: case DType::Int4: case DType::Int2: t.data<int8_t>()[i] = int8_t(v); break;
    case DType::Uint8: case DType::Uint4: case DType::Uint2: t.data<uint8_t>()[i] = uint8_t(v); break;
    case DType::Int16: t.data<int16_t>()[i] = int16_t(v); break;
    case DType::Uint16: t.data<uint16_t>()[i] = uint16_t(v); break;
    case DType::Int32: t.data<int32_t>()[i] = int32_t(v); break;
    default: break;
  }
}

// Float value of element i of a float-like tensor (float/double/f16/bf16).
double float_at(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::Float: return t.data<float>()[i];
    case DType::Double: return t.data<double>()[i];
    case DType::Float16: return float(t.data<float16>()[i]);
    case DType::BFloat16: return float(t.data<bfloat16>()[i]);
    default: return t.get_double(i);
  }
}

// x / s computed in the precision of dt.
double div_in(DType dt, double x, double s) {
  switch (dt) {
    case DType::Double: return x / s;
    case DType::Float: return double(float(x) / float(s));
    default: return round_to(dt, double(float(round_to(dt, x)) / float(round_to(dt, s))));
  }
}

void store_float(Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::Float: t.data<float>()[i] = float(v); break;
    case DType::Double: t.data<double>()[i] = v; break;
    case DType::Float16: t.data<float16>()[i] = float16(float(v)); break;
    case DType::BFloat16: t.data<bfloat16>()[i] = bfloat16(float(v)); break;
    default: break;
  }
}

bool is_float_scale(DType dt) {
  return dt == DType::Float || dt == DType::Float16 || dt == DType::BFloat16 || dt == DType::Double;
}

// Maps element index of x to the index of its scale / zero point.
struct QuantParamIndex {
  enum Mode { PerTensor, PerAxis, Blocked } mode = PerTensor;
  int64_t inner = 1, axis_dim = 1, block = 1, scale_axis_dim = 1;
  int64_t operator()(int64_t i) const {
    switch (mode) {
      case PerTensor: return 0;
      case PerAxis: return (i / inner) % axis_dim;
      case Blocked: {
        int64_t in = i % inner;
        int64_t a = (i / inner) % axis_dim;
        int64_t outer = i / (inner * axis_dim);
        return (outer * scale_axis_dim + a / block) * inner + in;
      }
    }
    return 0;
  }
};

QuantParamIndex make_param_index(const KernelContext& ctx, const Tensor& x, const Tensor& scale, int64_t axis_attr,
                                 int64_t block_size) {
  QuantParamIndex pi;
  if (block_size < 0) ctx.fail(ErrorCode::InvalidModel, "block_size must be >= 0");
  if (block_size == 0 && (scale.rank() == 0 || (scale.rank() == 1 && scale.numel() == 1))) return pi;
  int rank = x.rank();
  int axis = normalize_axis(ctx, axis_attr, rank);
  pi.axis_dim = x.dim(axis);
  pi.inner = 1;
  for (int d = axis + 1; d < rank; ++d) pi.inner *= x.dim(d);
  if (block_size == 0) {
    if (scale.rank() != 1 || scale.dim(0) != pi.axis_dim)
      ctx.fail(ErrorCode::InvalidArgument, "per-axis scale has shape " + shape_str(scale.shape()) + ", expected [" +
                                               std::to_string(pi.axis_dim) + "] (axis " + std::to_string(axis) + " of " +
                                               shape_str(x.shape()) + ")");
    pi.mode = QuantParamIndex::PerAxis;
    return pi;
  }
  if (scale.rank() != rank) ctx.fail(ErrorCode::InvalidArgument, "blocked scale must have the rank of the input, got " + shape_str(scale.shape()));
  for (int d = 0; d < rank; ++d) {
    if (d == axis) continue;
    if (scale.dim(d) != x.dim(d))
      ctx.fail(ErrorCode::InvalidArgument, "blocked scale shape " + shape_str(scale.shape()) + " does not match input " + shape_str(x.shape()));
  }
  int64_t want = pi.axis_dim == 0 ? 0 : (pi.axis_dim - 1) / block_size + 1;  // ceil, without overflow for a huge block_size
  if (scale.dim(axis) != want)
    ctx.fail(ErrorCode::InvalidArgument, "blocked scale dimension " + std::to_string(axis) + " is " + std::to_string(scale.dim(axis)) +
                                             ", expected ceil(" + std::to_string(pi.axis_dim) + "/" + std::to_string(block_size) + ")");
  pi.mode = QuantParamIndex::Blocked;
  pi.block = block_size;
  pi.scale_axis_dim = want;
  return pi;
}

double quant_value_at(const Tensor& t, int64_t i) {
  if (t.dtype() == DType::Float8E8M0) {
    uint8_t b = t.data<uint8_t>()[i];
    return b == 0xFF ? std::numeric_limits<double>::quiet_NaN() : std::ldexp(1.0, int(b) - 127);
  }
  if (const MiniFloat* mf = minifloat_of(t.dtype())) return minifloat_decode(*mf, t.data<uint8_t>()[i]);
  return double(int_at(t, i));
}

bool is_quant_type(DType dt) { return is_int_quant(dt) || minifloat_of(dt) != nullptr; }

// ---------------------------------------------------------------------------------------------
// QuantizeLinear / DequantizeLinear
// ---------------------------------------------------------------------------------------------

void register_quantize(OpRegistry& r) {
  for (int v : {10, 13, 19, 21, 23, 24, 25}) {
    r.add("QuantizeLinear", v, [](const Node& n) {
      int64_t axis = n.opset >= 13 ? n.attr_int("axis", 1) : 1;
      bool saturate = n.opset >= 19 ? n.attr_int("saturate", 1) != 0 : true;
      int64_t block = n.opset >= 21 ? n.attr_int("block_size", 0) : 0;
      DType out_attr = DType::Undefined;
      if (n.opset >= 21 && n.has_attr("output_dtype")) {
        int64_t od = n.attr_int("output_dtype");
        if (od != 0) {
          if (od < 0 || !dtype_attr_known(od) || !is_quant_type(DType(od)))
            n.fail(ErrorCode::Unsupported, "output_dtype " + std::to_string(od) + " is not a supported quantized type");
          out_attr = DType(od);
        }
      }
      DType precision = DType::Undefined;
      if (n.has_attr("precision")) {
        int64_t p = n.attr_int("precision");
        if (p != 0) {
          if (p < 0 || !dtype_attr_known(p) || !is_float_scale(DType(p)))
            n.fail(ErrorCode::Unsupported, "precision " + std::to_string(p) + " is not a supported float type");
          precision = DType(p);
        }
      }
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        if (!is_float_scale(x.dtype()) && x.dtype() != DType::Int32) unsupported_dtype(ctx, 0, x.dtype());
        if (!is_float_scale(scale.dtype())) unsupported_dtype(ctx, 1, scale.dtype());
        check_scales(ctx, 1, "y_scale");
        const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        DType out = zp ? zp->dtype() : (out_attr != DType::Undefined ? out_attr : DType::Uint8);
        if (zp && out_attr != DType::Undefined && out_attr != zp->dtype())
          ctx.fail(ErrorCode::InvalidArgument, std::string("output_dtype ") + dtype_name(out_attr) + " does not match y_zero_point type " +
                                                   dtype_name(zp->dtype()));
        if (!is_quant_type(out)) unsupported_dtype(ctx, 2, out);
        if (zp && zp->shape() != scale.shape() && !(zp->numel() == 1 && scale.numel() == 1))
          ctx.fail(ErrorCode::InvalidArgument, "y_zero_point shape " + shape_str(zp->shape()) + " differs from y_scale shape " +
                                                   shape_str(scale.shape()));
        QuantParamIndex pi = make_param_index(ctx, x, scale, axis, block);
        DType prec = precision != DType::Undefined ? precision : scale.dtype();
        Tensor& y = ctx.output(0, out, x.shape());
        if (x.dtype() == DType::Float && scale.dtype() == DType::Float && prec == DType::Float &&
            (out == DType::Uint8 || out == DType::Int8) && pi.mode != QuantParamIndex::Blocked) {
          // the 8-bit fast path: one run of `inner` elements per scale
          const int64_t run = pi.mode == QuantParamIndex::PerTensor ? x.numel() : pi.inner;
          for (int64_t b0 = 0; b0 < x.numel(); b0 += std::max<int64_t>(run, 1)) {
            const int64_t si = pi(b0);
            kernels::quantize_linear_8(x.data<float>() + b0, std::min(run, x.numel() - b0), scale.data<float>()[si],
                                       zp ? int32_t(int_at(*zp, si)) : 0, out == DType::Int8, static_cast<uint8_t*>(y.raw()) + b0);
          }
          return;
        }
        const MiniFloat* mf = minifloat_of(out);
        int64_t lo = 0, hi = 0;
        int_range(out, lo, hi);
        for (int64_t i = 0; i < x.numel(); ++i) {
          int64_t si = pi(i);
          double q = div_in(prec, float_at(x, i), float_at(scale, si));
          if (mf) {
            double zv = zp ? minifloat_decode(*mf, zp->data<uint8_t>()[si]) : 0.0;
            y.data<uint8_t>()[i] = minifloat_encode(*mf, zp ? q + zv : q, saturate);  // spec: x / scale + zp (-0 + 0 = +0)
          } else {
            double rq = std::nearbyint(q);
            double zv = zp ? double(int_at(*zp, si)) : 0.0;
            double vv = rq + zv;
            int64_t iv = std::isnan(vv) ? 0 : vv <= double(lo) ? lo : vv >= double(hi) ? hi : int64_t(vv);
            int_store(y, i, iv);
          }
        }
      });
    });
  }

  for (int v : {10, 13, 19, 21, 23, 24, 25}) {
    r.add("DequantizeLinear", v, [](const Node& n) {
      int64_t axis = n.opset >= 13 ? n.attr_int("axis", 1) : 1;
      int64_t block = n.opset >= 21 ? n.attr_int("block_size", 0) : 0;
      DType out_attr = DType::Undefined;
      if (n.has_attr("output_dtype")) {
        int64_t od = n.attr_int("output_dtype");
        if (od != 0) {
          if (od < 0 || !dtype_attr_known(od) || !is_float_scale(DType(od)))
            n.fail(ErrorCode::Unsupported, "output_dtype " + std::to_string(od) + " is not a supported float type");
          out_attr = DType(od);
        }
      }
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& scale = ctx.input(1);
        if (!is_quant_type(x.dtype()) && x.dtype() != DType::Float8E8M0) unsupported_dtype(ctx, 0, x.dtype());
        if (!is_float_scale(scale.dtype())) unsupported_dtype(ctx, 1, scale.dtype());
        check_scales(ctx, 1, "x_scale");
        const Tensor* zp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
        if (zp) {
          if (zp->dtype() != x.dtype())
            ctx.fail(ErrorCode::InvalidArgument, std::string("x_zero_point type ") + dtype_name(zp->dtype()) + " differs from x type " +
                                                     dtype_name(x.dtype()));
          if (zp->shape() != scale.shape() && !(zp->numel() == 1 && scale.numel() == 1))
            ctx.fail(ErrorCode::InvalidArgument, "x_zero_point shape " + shape_str(zp->shape()) + " differs from x_scale shape " +
                                                     shape_str(scale.shape()));
        }
        DType out = out_attr != DType::Undefined ? out_attr : scale.dtype();
        QuantParamIndex pi = make_param_index(ctx, x, scale, axis, block);
        Tensor& y = ctx.output(0, out, x.shape());
        if ((x.dtype() == DType::Uint8 || x.dtype() == DType::Int8) && scale.dtype() == DType::Float && out == DType::Float &&
            pi.mode != QuantParamIndex::Blocked) {
          const int64_t run = pi.mode == QuantParamIndex::PerTensor ? x.numel() : pi.inner;
          for (int64_t b0 = 0; b0 < x.numel(); b0 += std::max<int64_t>(run, 1)) {
            const int64_t si = pi(b0);
            kernels::dequantize_linear_8(static_cast<const uint8_t*>(x.raw()) + b0, std::min(run, x.numel() - b0), scale.data<float>()[si],
                                         zp ? int32_t(int_at(*zp, si)) : 0, x.dtype() == DType::Int8, y.data<float>() + b0);
          }
          return;
        }
        const bool mini = minifloat_of(x.dtype()) != nullptr || x.dtype() == DType::Float8E8M0;
        for (int64_t i = 0; i < x.numel(); ++i) {
          int64_t si = pi(i);
          double d;
          if (mini) d = round_to(out, quant_value_at(x, i) - (zp ? quant_value_at(*zp, si) : 0.0));
          else d = round_to(out, double(int_at(x, i) - (zp ? int_at(*zp, si) : 0)));
          double s = round_to(out, float_at(scale, si));
          double prod = out == DType::Double ? d * s : double(float(d) * float(s));
          store_float(y, i, prod);
        }
      });
    });
  }

  r.add("DynamicQuantizeLinear", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.dtype() != DType::Float) unsupported_dtype(ctx, 0, x.dtype());
      float lo = 0.f, hi = 0.f, scale = 0.f;
      uint8_t zp = 0;
      kernels::range_with_zero(x.data<float>(), x.numel(), lo, hi);
      kernels::dynamic_quant_params(lo, hi, scale, zp);
      Tensor& y = ctx.output(0, DType::Uint8, x.shape());
      kernels::quantize_u8(x.data<float>(), x.numel(), scale, zp, y.data<uint8_t>());
      if (ctx.has_output(1)) ctx.output(1, DType::Float, {}).data<float>()[0] = scale;
      if (ctx.has_output(2)) ctx.output(2, DType::Uint8, {}).data<uint8_t>()[0] = zp;
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Integer matmul (MatMulInteger, QLinearMatMul)
// ---------------------------------------------------------------------------------------------

// Batched matmul with numpy semantics on integer inputs. zp_a(batch_offset_a_row_index) etc. are
// resolved by callers through the row/column callbacks zpa(a_batch, m) / zpb(b_batch, n).
// emit(out_index, a_batch, m, b_batch, n, acc).
template <class ZA, class ZB, class Emit>
Shape int_matmul(KernelContext& ctx, const Tensor& A, const Tensor& B, ZA&& zpa, ZB&& zpb, Shape* out_shape_ptr, Emit&& emit,
                 bool dry_run) {
  if (A.rank() == 0 || B.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "matmul inputs must have rank >= 1");
  Shape as = A.shape(), bs = B.shape();
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), K2 = bs[bs.size() - 2], N = bs.back();
  if (K != K2)
    ctx.fail(ErrorCode::InvalidArgument, "matmul shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are incompatible");
  Shape abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  Shape batch = broadcast_shapes(ctx, abatch, bbatch);
  Shape out = batch;
  if (!a1) out.push_back(M);
  if (!b1) out.push_back(N);
  if (out_shape_ptr) *out_shape_ptr = out;
  if (dry_run) return out;
  std::vector<int64_t> sa = broadcast_strides(abatch, batch), sb = broadcast_strides(bbatch, batch);
  int64_t nb = shape_numel(batch);
  std::vector<int64_t> idx(batch.size(), 0);
  for (int64_t bi = 0; bi < nb; ++bi) {
    int64_t oa = 0, ob = 0;
    for (size_t d = 0; d < batch.size(); ++d) {
      oa += idx[d] * sa[d];
      ob += idx[d] * sb[d];
    }
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int64_t acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          int64_t ia = (oa * M + m) * K + k, ib = (ob * K + k) * N + n;
          acc += (int_at(A, ia) - zpa(oa, m)) * (int_at(B, ib) - zpb(ob, n));
        }
        emit((bi * M + m) * N + n, oa, m, ob, n, acc);
      }
    for (size_t d = batch.size(); d-- > 0;) {
      if (++idx[d] < batch[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Zero point / scale lookup for the rows of A (per tensor, per row [M], or per batch row [..., M, 1]).
struct RowParam {
  const Tensor* t = nullptr;
  int64_t M = 1;
  bool per_batch = false;
  int64_t index(int64_t batch_off, int64_t m) const {
    if (!t || t->numel() == 1) return 0;
    return per_batch ? batch_off * M + m : m;
  }
};

RowParam make_row_param(const KernelContext& ctx, const Tensor* t, const Tensor& A, bool rows, const char* what) {
  RowParam p;
  p.t = t;
  if (!t || t->numel() == 1) return p;
  Shape s = A.shape();
  if (s.size() == 1) {
    if (rows) s.insert(s.begin(), 1);
    else s.push_back(1);
  }
  int64_t M = rows ? s[s.size() - 2] : s.back();
  int64_t batch = shape_numel(s) / (s[s.size() - 2] * s.back());
  p.M = M;
  if (t->numel() == M && t->rank() <= 2) return p;
  if (t->numel() == M * batch && batch > 1) {
    p.per_batch = true;
    return p;
  }
  ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " has shape " + shape_str(t->shape()) + ", incompatible with input " +
                                           shape_str(A.shape()));
}

void check_scales(const KernelContext& ctx, int i, const char* what) {
  const Tensor& t = ctx.input(i);
  for (int64_t k = 0; k < t.numel(); ++k) {
    const double v = float_at(t, k);
    if (!(v > 0.0) || !std::isfinite(v))
      ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be positive and finite; element " + std::to_string(k) + " is " +
                                               std::to_string(v));
  }
}

void check_qlinear_params(const KernelContext& ctx, const char* s1, const char* s4) {
  for (int i : {1, 4, 6})
    if (!is_float_scale(ctx.input(i).dtype())) unsupported_dtype(ctx, i, ctx.input(i).dtype());
  const DType z = ctx.input(7).dtype();
  if (z != DType::Int8 && z != DType::Uint8) unsupported_dtype(ctx, 7, z);
  check_scales(ctx, 1, s1);
  check_scales(ctx, 4, s4);
  check_scales(ctx, 6, "y_scale");
}

std::vector<int32_t> int32_vector(const Tensor* t) {
  std::vector<int32_t> v;
  if (!t) return v;
  v.resize(size_t(t->numel()));
  for (int64_t i = 0; i < t->numel(); ++i) v[size_t(i)] = int32_t(int_at(*t, i));
  return v;
}

void check_int8(const KernelContext& ctx, int i) {
  DType dt = ctx.input(i).dtype();
  if (dt != DType::Int8 && dt != DType::Uint8) unsupported_dtype(ctx, i, dt);
}

void matmul_integer_ref(KernelContext& ctx) {
      const Tensor& A = ctx.input(0);
      const Tensor& B = ctx.input(1);
      check_int8(ctx, 0);
      check_int8(ctx, 1);
      const Tensor* azp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
      const Tensor* bzp = ctx.has_input(3) ? &ctx.input(3) : nullptr;
      if (azp && azp->dtype() != A.dtype()) ctx.fail(ErrorCode::InvalidArgument, "a_zero_point type differs from A");
      if (bzp && bzp->dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "b_zero_point type differs from B");
      RowParam ra = make_row_param(ctx, azp, A, true, "a_zero_point");
      RowParam rb = make_row_param(ctx, bzp, B, false, "b_zero_point");
      auto za = [&](int64_t bo, int64_t m) { return azp ? int_at(*azp, ra.index(bo, m)) : int64_t(0); };
      auto zb = [&](int64_t bo, int64_t n) { return bzp ? int_at(*bzp, rb.index(bo, n)) : int64_t(0); };
      Shape out;
      int_matmul(ctx, A, B, za, zb, &out, [](int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) {}, true);
      Tensor& y = ctx.output(0, DType::Int32, out);
      int32_t* py = y.data<int32_t>();
      int_matmul(ctx, A, B, za, zb, nullptr, [&](int64_t oi, int64_t, int64_t, int64_t, int64_t, int64_t acc) { py[oi] = int32_t(acc); }, false);
}

void qlinear_matmul_ref(KernelContext& ctx) {
        const Tensor& A = ctx.input(0);
        const Tensor& as = ctx.input(1);
        const Tensor& azp = ctx.input(2);
        const Tensor& B = ctx.input(3);
        const Tensor& bs = ctx.input(4);
        const Tensor& bzp = ctx.input(5);
        const Tensor& ys = ctx.input(6);
        const Tensor& yzp = ctx.input(7);
        check_int8(ctx, 0);
        check_int8(ctx, 3);
        check_qlinear_params(ctx, "a_scale", "b_scale");
        if (ys.numel() != 1 || yzp.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "y_scale and y_zero_point must be scalars");
        RowParam ra = make_row_param(ctx, &azp, A, true, "a_zero_point");
        RowParam ras = make_row_param(ctx, &as, A, true, "a_scale");
        RowParam rb = make_row_param(ctx, &bzp, B, false, "b_zero_point");
        RowParam rbs = make_row_param(ctx, &bs, B, false, "b_scale");
        auto za = [&](int64_t bo, int64_t m) { return int_at(azp, ra.index(bo, m)); };
        auto zb = [&](int64_t bo, int64_t n) { return int_at(bzp, rb.index(bo, n)); };
        Shape out;
        int_matmul(ctx, A, B, za, zb, &out, [](int64_t, int64_t, int64_t, int64_t, int64_t, int64_t) {}, true);
        Tensor& y = ctx.output(0, yzp.dtype(), out);
        int64_t lo, hi;
        int_range(yzp.dtype(), lo, hi);
        DType prec = as.dtype();
        double ysv = float_at(ys, 0);
        int64_t yz = int_at(yzp, 0);
        // Scale per output element: a_scale[m] * b_scale[n] / y_scale, computed in the scale precision.
        int_matmul(ctx, A, B, za, zb, nullptr,
                   [&](int64_t oi, int64_t oa, int64_t m, int64_t ob, int64_t n, int64_t acc) {
                     double mult = div_in(prec, round_to(prec, float_at(as, ras.index(oa, m)) * float_at(bs, rbs.index(ob, n))), ysv);
                     double v = std::nearbyint(double(acc) * mult) + double(yz);
                     int_store(y, oi, int64_t(std::clamp(v, double(lo), double(hi))));
                   },
                   false);
}

// ---------------------------------------------------------------------------------------------
// Integer convolution (ConvInteger, QLinearConv)
// ---------------------------------------------------------------------------------------------

ConvAttrs parse_conv(const Node& n) {
  ConvAttrs a;
  const std::optional<AutoPad> ap = auto_pad_of(n);
  if (!ap) n.fail(ErrorCode::InvalidModel, "unknown auto_pad '" + n.attr_string("auto_pad", "") + "'");
  a.auto_pad = *ap;
  a.dilations = n.attr_ints("dilations", {});
  a.kernel_shape = n.attr_ints("kernel_shape", {});
  a.pads = n.attr_ints("pads", {});
  a.strides = n.attr_ints("strides", {});
  a.group = n.attr_int("group", 1);
  if (a.group <= 0) n.fail(ErrorCode::InvalidModel, "group must be positive");
  return a;
}

ConvGeom conv_geometry(const KernelContext& ctx, const ConvAttrs& at, const Tensor& X, const Tensor& W) {
  if (X.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3, got " + shape_str(X.shape()));
  if (W.rank() != X.rank()) ctx.fail(ErrorCode::InvalidArgument, "W rank differs from X rank");
  const int nsp = X.rank() - 2;
  const int64_t Cin = X.dim(1), M = W.dim(0), Cg = W.dim(1), G = at.group;
  if (Cin % G != 0 || M % G != 0 || Cg != Cin / G)
    ctx.fail(ErrorCode::InvalidArgument, "X " + shape_str(X.shape()) + " and W " + shape_str(W.shape()) + " are incompatible for group " +
                                             std::to_string(G));
  std::vector<int64_t> ks(static_cast<size_t>(nsp)), st(static_cast<size_t>(nsp), 1), dl(static_cast<size_t>(nsp), 1), pb(static_cast<size_t>(nsp), 0), pe(static_cast<size_t>(nsp), 0), os(static_cast<size_t>(nsp));
  for (int d = 0; d < nsp; ++d) ks[size_t(d)] = W.dim(d + 2);
  if (!at.kernel_shape.empty()) {
    if (at.kernel_shape.size() != size_t(nsp) || !std::equal(ks.begin(), ks.end(), at.kernel_shape.begin()))
      ctx.fail(ErrorCode::InvalidArgument, "kernel_shape does not match W " + shape_str(W.shape()));
  }
  if (!at.strides.empty()) {
    if (at.strides.size() != size_t(nsp)) ctx.fail(ErrorCode::InvalidArgument, "strides has wrong length");
    st = at.strides;
  }
  if (!at.dilations.empty()) {
    if (at.dilations.size() != size_t(nsp)) ctx.fail(ErrorCode::InvalidArgument, "dilations has wrong length");
    dl = at.dilations;
  }
  for (int d = 0; d < nsp; ++d)
    if (st[size_t(d)] <= 0 || dl[size_t(d)] <= 0) ctx.fail(ErrorCode::InvalidArgument, "strides and dilations must be positive");
  if (at.auto_pad == AutoPad::NotSet && !at.pads.empty()) {
    if (at.pads.size() != size_t(2 * nsp)) ctx.fail(ErrorCode::InvalidArgument, "pads has wrong length");
    for (int d = 0; d < nsp; ++d) {
      pb[size_t(d)] = at.pads[size_t(d)];
      pe[size_t(d)] = at.pads[size_t(d + nsp)];
      if (pb[size_t(d)] < 0 || pe[size_t(d)] < 0) ctx.fail(ErrorCode::InvalidArgument, "pads must be non-negative");
    }
  }
  for (int d = 0; d < nsp; ++d) {
    // Bounded first so that none of the window arithmetic below can overflow (the attributes come
    // from the model; input dims are at most 2^40, the dilated kernel is checked).
    const int64_t kLim = int64_t(1) << 31;
    if (st[size_t(d)] > kLim || dl[size_t(d)] > kLim || pb[size_t(d)] > kLim || pe[size_t(d)] > kLim)
      ctx.fail(ErrorCode::InvalidArgument, "strides, dilations and pads must be at most 2^31");
    int64_t in = X.dim(d + 2), ek = 0, s = st[size_t(d)];
    if (__builtin_mul_overflow(ks[size_t(d)] - 1, dl[size_t(d)], &ek) || ek > (int64_t(1) << 50))
      ctx.fail(ErrorCode::InvalidArgument, "the dilated kernel of W " + shape_str(W.shape()) + " is too large");
    ek += 1;
    if (is_same_pad(at.auto_pad)) {
      int64_t o = (in + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (o - 1) * s + ek - in);
      pb[size_t(d)] = at.auto_pad == AutoPad::SameUpper ? total / 2 : total - total / 2;
      pe[size_t(d)] = total - pb[size_t(d)];
    }
    int64_t span = in + pb[size_t(d)] + pe[size_t(d)] - ek;
    if (span < 0) ctx.fail(ErrorCode::InvalidArgument, "kernel is larger than the padded input");
    os[size_t(d)] = span / s + 1;
  }
  ConvGeom g;
  g.ks = std::move(ks);
  g.st = std::move(st);
  g.dl = std::move(dl);
  g.pb = std::move(pb);
  g.pe = std::move(pe);
  g.os = std::move(os);
  return g;
}

// Computes acc[n][m][out positions] = sum (x - xzp) * (w - wzp[m]); emit(out_index, m, acc).
template <class Emit>
Shape int_conv(KernelContext& ctx, const ConvAttrs& at, const Tensor& X, const Tensor& W, int64_t xzp,
               const std::vector<int64_t>& wzp, Emit&& emit, bool dry_run) {
  ConvGeom geo = conv_geometry(ctx, at, X, W);
  const int nsp = X.rank() - 2;
  const int64_t N = X.dim(0), M = W.dim(0), Cg = W.dim(1), G = at.group;
  const std::vector<int64_t>&ks = geo.ks, &st = geo.st, &dl = geo.dl, &pb = geo.pb, &os = geo.os;
  Shape out{N, M};
  out.insert(out.end(), os.begin(), os.end());
  if (dry_run) return out;
  if (!wzp.empty() && wzp.size() != 1 && wzp.size() != size_t(M))
    ctx.fail(ErrorCode::InvalidArgument, "w_zero_point must be a scalar or have " + std::to_string(M) + " elements");
  std::vector<int64_t> xs = shape_strides(X.shape()), wst = shape_strides(W.shape());
  int64_t osp = 1, ksp = 1;
  for (int d = 0; d < nsp; ++d) {
    osp *= os[size_t(d)];
    ksp *= ks[size_t(d)];
  }
  std::vector<int64_t> oidx(static_cast<size_t>(nsp)), kidx(static_cast<size_t>(nsp));
  const int64_t Mg = M / G;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      int64_t g = m / Mg;
      int64_t wz = wzp.empty() ? 0 : wzp.size() == 1 ? wzp[0] : wzp[size_t(m)];
      for (int64_t o = 0; o < osp; ++o) {
        int64_t rem = o;
        for (int d = nsp - 1; d >= 0; --d) {
          oidx[size_t(d)] = rem % os[size_t(d)];
          rem /= os[size_t(d)];
        }
        int64_t acc = 0;
        for (int64_t c = 0; c < Cg; ++c) {
          int64_t ci = g * Cg + c;
          for (int64_t k = 0; k < ksp; ++k) {
            int64_t kr = k;
            for (int d = nsp - 1; d >= 0; --d) {
              kidx[size_t(d)] = kr % ks[size_t(d)];
              kr /= ks[size_t(d)];
            }
            int64_t xoff = n * xs[0] + ci * xs[1];
            bool inside = true;
            for (int d = 0; d < nsp; ++d) {
              int64_t p = oidx[size_t(d)] * st[size_t(d)] - pb[size_t(d)] + kidx[size_t(d)] * dl[size_t(d)];
              if (p < 0 || p >= X.dim(d + 2)) {
                inside = false;
                break;
              }
              xoff += p * xs[size_t(d + 2)];
            }
            if (!inside) continue;  // padding holds the zero point: contributes (xzp - xzp) = 0
            int64_t woff = m * wst[0] + c * wst[1] + k;
            acc += (int_at(X, xoff) - xzp) * (int_at(W, woff) - wz);
          }
        }
        emit((n * M + m) * osp + o, m, acc);
      }
    }
  return out;
}

std::vector<int64_t> int_vector(const Tensor& t) {
  std::vector<int64_t> v(size_t(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i) v[size_t(i)] = int_at(t, i);
  return v;
}

void conv_integer_ref(const ConvAttrs& at, KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& W = ctx.input(1);
      check_int8(ctx, 0);
      check_int8(ctx, 1);
      int64_t xzp = 0;
      if (ctx.has_input(2)) {
        const Tensor& z = ctx.input(2);
        if (z.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "x_zero_point must be a scalar");
        if (z.dtype() != X.dtype()) ctx.fail(ErrorCode::InvalidArgument, "x_zero_point type differs from x");
        xzp = int_at(z, 0);
      }
      std::vector<int64_t> wzp;
      if (ctx.has_input(3)) {
        if (ctx.input(3).dtype() != W.dtype()) ctx.fail(ErrorCode::InvalidArgument, "w_zero_point type differs from w");
        wzp = int_vector(ctx.input(3));
      }
      Shape out = int_conv(ctx, at, X, W, xzp, wzp, [](int64_t, int64_t, int64_t) {}, true);
      Tensor& y = ctx.output(0, DType::Int32, out);
      int32_t* py = y.data<int32_t>();
      int_conv(ctx, at, X, W, xzp, wzp, [&](int64_t oi, int64_t, int64_t acc) { py[oi] = int32_t(acc); }, false);
}

void qlinear_conv_ref(const ConvAttrs& at, KernelContext& ctx) {
        const Tensor& X = ctx.input(0);
        const Tensor& xs = ctx.input(1);
        const Tensor& xz = ctx.input(2);
        const Tensor& W = ctx.input(3);
        const Tensor& ws = ctx.input(4);
        const Tensor& wz = ctx.input(5);
        const Tensor& ys = ctx.input(6);
        const Tensor& yz = ctx.input(7);
        check_int8(ctx, 0);
        check_int8(ctx, 3);
        check_qlinear_params(ctx, "x_scale", "w_scale");
        if (xs.numel() != 1 || xz.numel() != 1 || ys.numel() != 1 || yz.numel() != 1)
          ctx.fail(ErrorCode::InvalidArgument, "x_scale, x_zero_point, y_scale and y_zero_point must be scalars");
        const int64_t M = W.rank() > 0 ? W.dim(0) : 0;
        if ((ws.numel() != 1 && ws.numel() != M) || (wz.numel() != 1 && wz.numel() != M))
          ctx.fail(ErrorCode::InvalidArgument, "w_scale and w_zero_point must be scalars or have " + std::to_string(M) + " elements");
        std::vector<int64_t> bias;
        if (ctx.has_input(8)) {
          const Tensor& B = ctx.input(8);
          if (B.dtype() != DType::Int32) unsupported_dtype(ctx, 8, B.dtype());
          if (B.numel() != M) ctx.fail(ErrorCode::InvalidArgument, "B must have " + std::to_string(M) + " elements");
          bias = int_vector(B);
        }
        std::vector<int64_t> wzp = int_vector(wz);
        int64_t xzp = int_at(xz, 0);
        Shape out = int_conv(ctx, at, X, W, xzp, wzp, [](int64_t, int64_t, int64_t) {}, true);
        Tensor& y = ctx.output(0, yz.dtype(), out);
        int64_t lo, hi;
        int_range(yz.dtype(), lo, hi);
        DType prec = xs.dtype();
        double xsv = float_at(xs, 0), ysv = float_at(ys, 0);
        int64_t yzp = int_at(yz, 0);
        std::vector<double> mult(static_cast<size_t>(M));
        for (int64_t m = 0; m < M; ++m)
          mult[size_t(m)] = div_in(prec, round_to(prec, xsv * float_at(ws, ws.numel() == 1 ? 0 : m)), ysv);
        int_conv(ctx, at, X, W, xzp, wzp,
                 [&](int64_t oi, int64_t m, int64_t acc) {
                   if (!bias.empty()) acc += bias[size_t(m)];
                   double v = std::nearbyint(double(acc) * mult[size_t(m)]) + double(yzp);
                   int_store(y, oi, int64_t(std::clamp(v, double(lo), double(hi))));
                 },
                 false);
}

}  // namespace quant

void register_quant_ops(OpRegistry& r) {
  quant::register_quantize(r);
  quant::register_gemm_ops(r);     // ops/quant_gemm.cpp
  quant::register_contrib_ops(r);  // ops/quant_contrib.cpp
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("ConvInteger").infer_symbolic(shapes::conv_integer);
  r.def("DequantizeLinear").infer_symbolic(shapes::dequantize_linear);
  r.def("MatMulInteger").infer_symbolic(shapes::matmul_integer);
  r.def("QuantizeLinear").infer_symbolic(shapes::quantize_linear);
  r.def("DynamicQuantizeLinear").infer_symbolic(shapes::dynamic_quantize_linear);
  r.def("QLinearConv").infer(shapes::qlinear_conv);
  r.def("QLinearMatMul").infer_symbolic(shapes::qlinear_matmul);
}

}  // namespace basalt
