// The com.microsoft quantized matmuls that ONNX Runtime's quantizer and optimizer write into
// models, on the integer GEMM (kernels/qgemm.hpp):
//   DynamicQuantizeMatMul(A float, B 8-bit, b_scale, b_zero_point?, bias?) -> Y float:
//     A quantized per tensor to uint8 as DynamicQuantizeLinear does it, then
//     Y = (Aq - a_zp) (B - b_zp) * (a_scale * b_scale) + bias
//   MatMulIntegerToFloat(A 8-bit, B 8-bit, a_scale, b_scale, a_zero_point?, b_zero_point?, bias?)
//     -> Y = (A - a_zp) (B - b_zp) * (a_scale * b_scale) + bias
// b_scale / b_zero_point per tensor or per column of B; bias [N]. B must be 2-D (a constant B is
// packed once at load). The optimizer fuses ONNX Runtime's dynamic quantization pattern
// (DynamicQuantizeLinear -> MatMulInteger -> Cast -> Mul (-> Add)) into DynamicQuantizeMatMul
// (opt/fuse_quant.cpp); the float products and sums are the pattern's, in its order, so the
// fused op gives the same bits.
#include "kernels/qgemm.hpp"
#include "kernels/quantize.hpp"
#include "ops/broadcast_iter.hpp"
#include "ops/quant_common.hpp"

#include <cmath>
#include <cstring>

namespace basalt::quant {

namespace {

using kernels::QEpilogue;
using kernels::QMatrix;
using kernels::QOperand;

class QFloatMatMulKernel final : public OpKernel {
 public:
  explicit QFloatMatMulKernel(bool dynamic) : dynamic_(dynamic) {}

  void prepare(const PrepareContext& pc) override {
    const Tensor* b = pc.constant.size() > 1 ? pc.constant[1] : nullptr;
    if (!b || (b->dtype() != DType::Int8 && b->dtype() != DType::Uint8) || b->rank() != 2 || b->numel() == 0) return;
    packed_ = kernels::qpack_right(arch(), b->dim(0), b->dim(1), QMatrix{static_cast<const uint8_t*>(b->raw()), b->dim(1), false,
                                                                          b->dtype() == DType::Int8});
    shape_ = b->shape();
    src_ = b->raw();
    dtype_ = b->dtype();
  }
  size_t packed_bytes() const override { return packed_.data.empty() ? 0 : packed_.bytes(); }
  bool replaces_constant(int input) const override { return input == 1 && packed_bytes() > 0; }
  bool reads_bytes_only(int input) const override { return input == 1 || (!dynamic_ && input == 0); }
  size_t workspace_bytes(std::span<const Shape> in, int) const override {
    if (in.size() < 2 || in[0].empty() || in[1].size() != 2) return 0;
    double numel = 1;  // no estimate for dims whose products could overflow int64
    for (int64_t d : in[0]) {
      if (d < 0 || d >= (int64_t(1) << 40)) return 0;
      numel *= double(std::max<int64_t>(d, 1));
    }
    if (numel > 1e13 || in[1][1] < 0 || in[1][1] >= (int64_t(1) << 40)) return 0;
    const int64_t K = in[0].back(), N = in[1][1], rows = K > 0 ? shape_numel(in[0]) / K : 0;
    // the products below stay far from int64 overflow (else: no estimate)
    if (double(rows) * double(std::max<int64_t>(K, 1)) > 1e13 || double(N) * double(std::max<int64_t>(K, 1)) > 1e13) return 0;
    return size_t((dynamic_ ? rows * K + 64 : 0) + kernels::qgemm_workspace_bytes(arch(), rows, N, K, false, in[1] == shape_) + 128);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (dynamic_ && A.dtype() != DType::Float) unsupported_dtype(ctx, 0, A.dtype());
    if (!dynamic_) check_int8(ctx, 0);
    check_int8(ctx, 1);
    if (B.rank() != 2) ctx.fail(ErrorCode::Unsupported, "B must be 2-D, got " + shape_str(B.shape()));
    if (A.rank() < 1 || A.shape().back() != B.dim(0))
      ctx.fail(ErrorCode::InvalidArgument, "matmul shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are incompatible");
    const bool serves = packed_bytes() > 0 && B.shape() == shape_ && B.dtype() == dtype_ && (B.raw() == src_ || B.raw() == nullptr);
    if (!serves && !B.raw()) ctx.fail(ErrorCode::Internal, "B has no data");
    const int64_t K = B.dim(0), N = B.dim(1), rows = K > 0 ? A.numel() / K : 0;
    // inputs by role
    const int bsi = dynamic_ ? 2 : 3, bzi = dynamic_ ? 3 : 5, biasi = dynamic_ ? 4 : 6;
    const Tensor& bs = ctx.input(bsi);
    if (bs.dtype() != DType::Float) unsupported_dtype(ctx, bsi, bs.dtype());
    auto per_col = [&](const Tensor& t, const char* what) {
      if (t.numel() != 1 && !(t.numel() == N && t.rank() <= 2))
        ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " has shape " + shape_str(t.shape()) + ", expected a scalar or [" +
                                                 std::to_string(N) + "]");
    };
    per_col(bs, "b_scale");
    check_scales(ctx, bsi, "b_scale");
    std::vector<int32_t> bz;
    if (ctx.has_input(bzi)) {
      const Tensor& z = ctx.input(bzi);
      if (z.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "b_zero_point type differs from B");
      per_col(z, "b_zero_point");
      bz = int32_vector(&z);
    }
    const float* bias = nullptr;
    if (ctx.has_input(biasi)) {
      const Tensor& t = ctx.input(biasi);
      if (t.dtype() != DType::Float) unsupported_dtype(ctx, biasi, t.dtype());
      if (t.numel() != N) ctx.fail(ErrorCode::InvalidArgument, "bias must have " + std::to_string(N) + " elements, got " + shape_str(t.shape()));
      bias = t.data<float>();
    }
    Shape out = A.shape();
    out.back() = N;
    Tensor& Y = ctx.output(0, DType::Float, out);
    if (Y.numel() == 0) return;
    if (K == 0) {  // empty sums: Y = bias (or 0)
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t j = 0; j < N; ++j) Y.data<float>()[r * N + j] = bias ? 0.f + bias[j] : 0.f;
      return;
    }

    const kernels::QGemmArch& g = arch();
    uint8_t* ws = aligned(ctx.workspace(workspace_bytes(std::vector<Shape>{A.shape(), B.shape()}, 1)));
    float a_scale = 0.f;
    int32_t a_zp = 0;
    QOperand left;
    if (dynamic_) {
      float lo = 0.f, hi = 0.f;
      uint8_t zp = 0;
      kernels::range_with_zero(A.data<float>(), A.numel(), lo, hi);
      kernels::dynamic_quant_params(lo, hi, a_scale, zp);
      kernels::quantize_u8(A.data<float>(), A.numel(), a_scale, zp, ws);
      a_zp = zp;
      left.src = QMatrix{ws, K, false, false};
      ws += (rows * K + 63) / 64 * 64;
    } else {
      const Tensor& as = ctx.input(2);
      if (as.dtype() != DType::Float) unsupported_dtype(ctx, 2, as.dtype());
      if (as.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "a_scale must be a scalar, got " + shape_str(as.shape()));
      check_scales(ctx, 2, "a_scale");
      a_scale = as.data<float>()[0];
      if (ctx.has_input(4)) {
        const Tensor& z = ctx.input(4);
        if (z.dtype() != A.dtype()) ctx.fail(ErrorCode::InvalidArgument, "a_zero_point type differs from A");
        if (z.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "a_zero_point must be a scalar, got " + shape_str(z.shape()));
        a_zp = int32_t(int_at(z, 0));
      }
      left.src = QMatrix{static_cast<const uint8_t*>(A.raw()), K, false, A.dtype() == DType::Int8};
    }
    left.zp = &a_zp;
    left.zp_len = 1;
    // the pattern's scale: the float product a_scale * b_scale, per column
    std::vector<float> scale(size_t(bs.numel()));
    for (int64_t j = 0; j < bs.numel(); ++j) scale[size_t(j)] = a_scale * bs.data<float>()[j];
    QOperand right;
    right.src = QMatrix{static_cast<const uint8_t*>(B.raw()), N, false, B.dtype() == DType::Int8};
    if (serves) right.packed = &packed_;
    if (!bz.empty()) {
      right.zp = bz.data();
      right.zp_len = int64_t(bz.size());
    }
    QEpilogue ep;
    ep.out = QEpilogue::Out::Float;
    ep.scale = scale.data();
    ep.scale_len = int64_t(scale.size());
    ep.fbias = bias;
    ep.dst = Y.raw();
    ep.ldo = N;
    kernels::qgemm(g, rows, N, K, left, right, ep, ctx.pool(), ws);
  }

 private:
  static uint8_t* aligned(void* p) { return reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64); }
  static const kernels::QGemmArch& arch() { return kernels::qgemm_arch(kernels::qgemm_best_isa()); }
  bool dynamic_;
  kernels::QPacked packed_;
  Shape shape_;
  const void* src_ = nullptr;
  DType dtype_ = DType::Undefined;
};


// com.microsoft QLinearAdd(A, A_scale, A_zero_point, B, B_scale, B_zero_point, C_scale,
// C_zero_point) -> C = saturate(round((A_scale (A - A_zp) + B_scale (B - B_zp)) / C_scale) + C_zp),
// numpy broadcasting, uint8 or int8 (A, B and C of one type). Each input byte maps through a
// 256-entry table of its term divided by C_scale (equal shapes: the same arithmetic, vectorized in
// kernels/quantize.hpp), so an element is two loads, an add and a round.
void qlinear_add(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(3);
  check_int8(ctx, 0);
  if (B.dtype() != A.dtype()) ctx.fail(ErrorCode::InvalidArgument, "B type differs from A");
  const bool sg = A.dtype() == DType::Int8;
  auto scalar_f = [&](int i, const char* what) {
    const Tensor& t = ctx.input(i);
    if (t.dtype() != DType::Float) unsupported_dtype(ctx, i, t.dtype());
    if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be a scalar, got " + shape_str(t.shape()));
    const float v = t.data<float>()[0];
    if (!(v > 0.f) || !std::isfinite(v)) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be positive and finite, got " + std::to_string(v));
    return v;
  };
  auto zp = [&](int i, const char* what) -> int32_t {
    if (!ctx.has_input(i)) return 0;
    const Tensor& t = ctx.input(i);
    if (t.dtype() != A.dtype()) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " type differs from A");
    if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be a scalar, got " + shape_str(t.shape()));
    return int32_t(int_at(t, 0));
  };
  const float as = scalar_f(1, "A_scale"), bs = scalar_f(4, "B_scale"), cs = scalar_f(6, "C_scale");
  const int32_t az = zp(2, "A_zero_point"), bz = zp(5, "B_zero_point"), cz = zp(7, "C_zero_point");
  const Shape out = broadcast_shapes(ctx, A.shape(), B.shape());
  Tensor& C = ctx.output(0, A.dtype(), out);
  if (A.shape() == B.shape()) {  // the table arithmetic below, vectorized
    kernels::qlinear_add_8(static_cast<const uint8_t*>(A.raw()), static_cast<const uint8_t*>(B.raw()), C.numel(), as, az, bs, bz, cs, cz,
                           sg, static_cast<uint8_t*>(C.raw()));
    return;
  }
  float ta[256], tb[256];
  for (int i = 0; i < 256; ++i) {
    const int32_t v = sg ? int32_t(int8_t(uint8_t(i))) : i;
    ta[i] = as * float(v - az) / cs;
    tb[i] = bs * float(v - bz) / cs;
  }
  const float vlo = (sg ? -128.f : 0.f) - float(cz), vhi = (sg ? 127.f : 255.f) - float(cz);
  bcast::binary_apply<uint8_t, uint8_t, uint8_t>(A, B, C, [&](uint8_t x, uint8_t z) {
    float v = ta[x] + tb[z];
    v = v >= vlo ? (v <= vhi ? float(kernels::round_half_even(v)) : vhi) : vlo;  // clamped first: the bounds are integers; NaN -> lo
    return uint8_t(int32_t(v) + cz);
  });
}

}  // namespace

void register_contrib_ops(OpRegistry& r) {
  r.add("com.microsoft", "DynamicQuantizeMatMul", 1, INT_MAX, [](const Node&) { return std::make_unique<QFloatMatMulKernel>(true); });
  r.add("com.microsoft", "MatMulIntegerToFloat", 1, INT_MAX, [](const Node&) { return std::make_unique<QFloatMatMulKernel>(false); });
  r.add("com.microsoft", "QLinearAdd", 1, INT_MAX, [](const Node&) { return kernel(qlinear_add); });
  r.def("com.microsoft", "QLinearAdd").infer(shapes::qlinear_binary);
  r.def("com.microsoft", "DynamicQuantizeMatMul").infer_symbolic(shapes::matmul_to_float);
  r.def("com.microsoft", "MatMulIntegerToFloat").infer_symbolic(shapes::matmul_to_float);
}

}  // namespace basalt::quant
