// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv on the integer GEMM
// (kernels/qgemm.hpp): constant weights packed once at load (the packed copy replaces the
// original), zero points folded into the GEMM's corrections, requantization in its epilogue.
// Cases the GEMM does not take (a B with batch dims, a 1-D or 3-D convolution) run the reference
// kernels of ops/quant.cpp, which compute the same exact sums.
#include "core/thread_pool.hpp"
#include "kernels/qdepthwise.hpp"
#include "kernels/qgemm.hpp"
#include "ops/quant_common.hpp"

#include <algorithm>
#include <cstring>

namespace basalt::quant {

namespace {

using kernels::QEpilogue;
using kernels::QMatrix;
using kernels::QOperand;
using kernels::QPacked;

bool is_8bit(DType dt) { return dt == DType::Int8 || dt == DType::Uint8; }

// Whether a workspace estimate from these sizes can be computed without int64 overflow: every
// value in [0, 2^40) and their product below 2^46 (a model's absurd dims or attributes give a 0
// estimate instead; its run fails on its own checks, or on the memory limit).
bool estimable(std::span<const int64_t> v) {
  double prod = 1;
  for (int64_t x : v) {
    if (x < 0 || x >= (int64_t(1) << 40)) return false;
    prod *= double(std::max<int64_t>(x, 1));
  }
  return prod < double(int64_t(1) << 46);
}
bool estimable(std::initializer_list<int64_t> v) { return estimable(std::span<const int64_t>(v.begin(), v.size())); }

uint8_t* aligned_workspace(KernelContext& ctx, int64_t bytes) {
  auto p = reinterpret_cast<uintptr_t>(ctx.workspace(size_t(bytes) + 64));
  return reinterpret_cast<uint8_t*>((p + 63) / 64 * 64);
}

// The requantization multipliers as the spec computes them: x_scale * w_scale / y_scale in the
// scale's precision, one per element of the longer of the two scale vectors.
std::vector<double> multipliers(const Tensor& as, const Tensor& bs, const Tensor& ys) {
  const DType prec = as.dtype();
  const double ysv = float_at(ys, 0);
  const int64_t n = std::max(as.numel(), bs.numel());
  std::vector<double> m(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    m[size_t(i)] = div_in(prec, round_to(prec, float_at(as, as.numel() == 1 ? 0 : i) * float_at(bs, bs.numel() == 1 ? 0 : i)), ysv);
  return m;
}

// ---------------------------------------------------------------------------------------------
// MatMulInteger / QLinearMatMul
// ---------------------------------------------------------------------------------------------

class QMatMulKernel final : public OpKernel {
 public:
  explicit QMatMulKernel(bool qlinear) : qlinear_(qlinear), bi_(qlinear ? 3 : 1) {}

  void prepare(const PrepareContext& pc) override {
    const Tensor* b = pc.constant.size() > size_t(bi_) ? pc.constant[size_t(bi_)] : nullptr;
    if (!b || !is_8bit(b->dtype()) || b->rank() != 2 || b->numel() == 0) return;
    const int64_t K = b->dim(0), N = b->dim(1);
    packed_ = kernels::qpack_right(arch(), K, N, QMatrix{b->data<uint8_t>(), N, false, b->dtype() == DType::Int8});
    shape_ = b->shape();
    src_ = b->raw();
    signed_ = b->dtype() == DType::Int8;
  }
  size_t packed_bytes() const override { return packed_.data.empty() ? 0 : packed_.bytes(); }
  bool replaces_constant(int input) const override { return input == bi_ && packed_bytes() > 0; }
  bool reads_bytes_only(int input) const override { return input == bi_; }
  size_t workspace_bytes(std::span<const Shape> in, int) const override {
    if (in.size() <= size_t(bi_) || in[0].empty() || in[size_t(bi_)].size() != 2) return 0;
    if (!estimable(in[0]) || !estimable(in[size_t(bi_)])) return 0;
    const int64_t K = in[0].back(), N = in[size_t(bi_)][1];
    const int64_t rows = K > 0 ? shape_numel(in[0]) / K : 0;
    if (!estimable({rows, K}) || !estimable({N, K}) || !estimable({rows, N})) return 0;
    return size_t(kernels::qgemm_workspace_bytes(arch(), rows, N, K, false, in[size_t(bi_)] == shape_) + 64);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(bi_);
    const bool serves = packed_bytes() > 0 && B.shape() == shape_ && (B.raw() == src_ || B.raw() == nullptr);
    if (A.rank() < 1 || B.rank() != 2 || (!serves && !B.raw())) return qlinear_ ? qlinear_matmul_ref(ctx) : matmul_integer_ref(ctx);
    check_int8(ctx, 0);
    check_int8(ctx, bi_);
    if (serves && B.dtype() != (signed_ ? DType::Int8 : DType::Uint8)) unsupported_dtype(ctx, bi_, B.dtype());
    const int64_t K = A.shape().back(), N = B.dim(1);
    if (B.dim(0) != K)
      ctx.fail(ErrorCode::InvalidArgument, "matmul shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are incompatible");
    const int64_t M = A.rank() == 1 ? 1 : A.dim(A.rank() - 2);
    const int64_t batches = M * K == 0 ? shape_numel(A.shape()) == 0 ? 0 : 1 : shape_numel(A.shape()) / (M * K);
    Shape out_shape = A.shape();  // [..., M, N], or [N] for a 1-D A
    out_shape.back() = N;

    // zero points and scales: A's per tensor, per row [M] or per batch row [..., M, 1]; B's per
    // tensor or per column [N]
    const int azi = 2, bzi = qlinear_ ? 5 : 3;
    const Tensor* azp = ctx.has_input(azi) ? &ctx.input(azi) : nullptr;
    const Tensor* bzp = ctx.has_input(bzi) ? &ctx.input(bzi) : nullptr;
    if (azp && azp->dtype() != A.dtype()) ctx.fail(ErrorCode::InvalidArgument, "a_zero_point type differs from A");
    if (bzp && bzp->dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "b_zero_point type differs from B");
    auto row_len = [&](const Tensor* t, const char* what) -> int64_t {
      if (!t || t->numel() == 1) return 1;
      if (t->numel() == M && (t->rank() <= 1 || (t->rank() == 2 && batches == 1))) return M;
      if (t->numel() == M * batches && batches > 1) return M * batches;
      ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " has shape " + shape_str(t->shape()) + ", incompatible with input " +
                                               shape_str(A.shape()));
    };
    auto col_ok = [&](const Tensor* t, const char* what) {
      if (t && t->numel() != 1 && !(t->numel() == N && t->rank() <= 2))
        ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " has shape " + shape_str(t->shape()) + ", incompatible with input " +
                                                 shape_str(B.shape()));
    };
    const int64_t azl = row_len(azp, "a_zero_point");
    col_ok(bzp, "b_zero_point");
    std::vector<int32_t> za = int32_vector(azp), zb = int32_vector(bzp);

    QEpilogue ep;
    ep.ldo = N;
    std::vector<double> mult;
    bool per_row_scale = false;
    if (qlinear_) {
      const Tensor& as = ctx.input(1);
      const Tensor& bs = ctx.input(4);
      const Tensor& ys = ctx.input(6);
      const Tensor& yzp = ctx.input(7);
      check_qlinear_params(ctx, "a_scale", "b_scale");
      if (ys.numel() != 1 || yzp.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "y_scale and y_zero_point must be scalars");
      if (row_len(&as, "a_scale") != 1) per_row_scale = true;
      col_ok(&bs, "b_scale");
      if (per_row_scale && B.raw()) return qlinear_matmul_ref(ctx);  // a per-row a_scale: rare, the reference takes it
      mult = multipliers(per_row_scale ? ctx.input(4) : as, bs, ys);  // per row: recomputed per row below
      ep.out = QEpilogue::Out::Quant8;
      ep.mult = mult.data();
      ep.mult_len = int64_t(mult.size());
      int64_t lo, hi;
      int_range(yzp.dtype(), lo, hi);
      ep.lo = int32_t(lo);
      ep.hi = int32_t(hi);
      ep.yzp = int32_t(int_at(yzp, 0));
    }
    Tensor& Y = ctx.output(0, qlinear_ ? ctx.input(7).dtype() : DType::Int32, out_shape);
    if (Y.numel() == 0) return;
    const kernels::QGemmArch& g = arch();
    QOperand right;
    right.src = QMatrix{B.data<uint8_t>(), N, false, B.dtype() == DType::Int8};
    if (serves) right.packed = &packed_;
    right.zp = zb.empty() ? nullptr : zb.data();
    right.zp_len = int64_t(zb.size());
    const size_t esz = qlinear_ ? 1 : 4;
    // one GEMM over all rows unless A's zero point changes per batch (then one per batch) or
    // a_scale per row meets a packed B (then one per row, each with its own multipliers)
    const int64_t calls = per_row_scale ? M * batches : azl == M * batches && batches > 1 ? batches : 1;
    const int64_t rows = M * batches / calls;
    uint8_t* ws = aligned_workspace(ctx, kernels::qgemm_workspace_bytes(g, rows, N, K, false, serves));
    for (int64_t c = 0; c < calls; ++c) {
      QOperand left;
      left.src = QMatrix{A.data<uint8_t>() + c * rows * K, K, false, A.dtype() == DType::Int8};
      std::vector<int32_t> zrow;
      if (!za.empty()) {
        if (azl == 1) {
          left.zp = za.data();
          left.zp_len = 1;
        } else {
          // per row: the M values repeat for each batch in this call
          zrow.resize(size_t(rows));
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t gr = c * rows + r;  // the row's index over all batches
            zrow[size_t(r)] = za[size_t(azl == M ? gr % M : gr)];
          }
          left.zp = zrow.data();
          left.zp_len = rows;
        }
      }
      if (per_row_scale) {  // row c: a_scale[c % M] (or per batch row) times b_scale[j] / y_scale
        const Tensor& as = ctx.input(1);
        const Tensor one = Tensor::scalar(float(float_at(as, as.numel() == M ? c % M : c)));
        mult = multipliers(one, ctx.input(4), ctx.input(6));
        ep.mult = mult.data();
        ep.mult_len = int64_t(mult.size());
      }
      ep.dst = static_cast<uint8_t*>(Y.raw()) + size_t(c * rows * N) * esz;
      kernels::qgemm(g, rows, N, K, left, right, ep, ctx.pool(), ws);
    }
  }

 private:
  static const kernels::QGemmArch& arch() { return kernels::qgemm_arch(kernels::qgemm_best_isa()); }
  bool qlinear_;
  int bi_;
  QPacked packed_;
  Shape shape_;
  const void* src_ = nullptr;
  bool signed_ = false;
};

// ---------------------------------------------------------------------------------------------
// ConvInteger / QLinearConv
// ---------------------------------------------------------------------------------------------

struct Conv2d {
  int64_t C, H, W, KH, KW, OH, OW, sh, sw, dh, dw, pt, pl;
};

// im2col of one image's channel group (Cg planes of H x W bytes) into rows [r0, r1) of
// dst[(c * KH + kh) * KW + kw][OH * OW]; taps in the padding hold `pad` (the input zero point,
// which contributes nothing to the corrected sums).
void im2col_u8(const Conv2d& g, const uint8_t* x, uint8_t pad, uint8_t* dst, int64_t r0, int64_t r1) {
  const int64_t ohw = g.OH * g.OW;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t kw = r % g.KW, kh = (r / g.KW) % g.KH, c = r / (g.KW * g.KH);
    const uint8_t* plane = x + c * g.H * g.W;
    uint8_t* d = dst + r * ohw;
    // output columns whose tap lands inside the row: iw = ow * sw - pl + kw * dw in [0, W)
    const int64_t off = kw * g.dw - g.pl;
    int64_t ow_lo = off >= 0 ? 0 : (-off + g.sw - 1) / g.sw;
    int64_t ow_hi = g.W - off <= 0 ? 0 : (g.W - off + g.sw - 1) / g.sw;  // first ow with iw >= W
    ow_lo = std::min(ow_lo, g.OW);
    ow_hi = std::clamp(ow_hi, ow_lo, g.OW);
    for (int64_t oh = 0; oh < g.OH; ++oh) {
      const int64_t ih = oh * g.sh - g.pt + kh * g.dh;
      uint8_t* drow = d + oh * g.OW;
      if (ih < 0 || ih >= g.H) {
        std::memset(drow, pad, size_t(g.OW));
        continue;
      }
      const uint8_t* srow = plane + ih * g.W;
      std::memset(drow, pad, size_t(ow_lo));
      if (g.sw == 1) {
        std::memcpy(drow + ow_lo, srow + ow_lo + off, size_t(ow_hi - ow_lo));
      } else {
        for (int64_t ow = ow_lo; ow < ow_hi; ++ow) drow[ow] = srow[ow * g.sw + off];
      }
      std::memset(drow + ow_hi, pad, size_t(g.OW - ow_hi));
    }
  }
}

class QConvKernel final : public OpKernel {
 public:
  QConvKernel(bool qlinear, ConvAttrs at) : qlinear_(qlinear), at_(std::move(at)), wi_(qlinear ? 3 : 1) {}

  void prepare(const PrepareContext& pc) override {
    const Tensor* w = pc.constant.size() > size_t(wi_) ? pc.constant[size_t(wi_)] : nullptr;
    if (!w || !is_8bit(w->dtype()) || w->rank() != 4 || w->numel() == 0 || at_.group <= 0 || w->dim(0) % at_.group != 0) return;
    const int64_t M = w->dim(0), K = w->numel() / M, Mg = M / at_.group;
    if (w->dim(1) == 1 && Mg == 1 && at_.group > 1) return;  // depthwise: the direct kernel reads W itself
    for (int64_t gi = 0; gi < at_.group; ++gi)
      packed_.push_back(kernels::qpack_left(arch(), Mg, K, QMatrix{w->data<uint8_t>() + gi * Mg * K, K, false, w->dtype() == DType::Int8}));
    shape_ = w->shape();
    src_ = w->raw();
    signed_ = w->dtype() == DType::Int8;
  }
  size_t packed_bytes() const override {
    size_t b = 0;
    for (const QPacked& p : packed_) b += p.bytes();
    return b;
  }
  bool replaces_constant(int input) const override { return input == wi_ && !packed_.empty(); }
  bool reads_bytes_only(int input) const override { return input == wi_; }
  size_t workspace_bytes(std::span<const Shape> in, int) const override {
    if (in.size() <= size_t(wi_) || in[0].size() != 4 || in[size_t(wi_)].size() != 4) return 0;
    const Shape& x = in[0];
    const Shape& w = in[size_t(wi_)];
    // an upper bound: output planes at most the padded input's size (stride >= 1)
    if (!estimable(x) || !estimable(w)) return 0;
    for (int64_t d : at_.pads)
      if (!estimable({d})) return 0;
    for (int64_t d : at_.dilations)
      if (!estimable({d})) return 0;
    int64_t ph = 0, pw = 0;
    if (at_.pads.size() == 4) {
      ph = at_.pads[0] + at_.pads[2];
      pw = at_.pads[1] + at_.pads[3];
    } else if (is_same_pad(at_.auto_pad)) {
      ph = w[2] * (at_.dilations.size() == 2 ? at_.dilations[0] : 1);
      pw = w[3] * (at_.dilations.size() == 2 ? at_.dilations[1] : 1);
    }
    if (!estimable({x[2] + ph, x[3] + pw}) || !estimable({w[1], w[2], w[3], x[2] + ph, x[3] + pw})) return 0;
    const int64_t ohw = (x[2] + ph) * (x[3] + pw);
    const int64_t K = w[1] * w[2] * w[3], Mg = at_.group > 0 ? w[0] / at_.group : w[0];
    return size_t(K * ohw + 64 + kernels::qgemm_workspace_bytes(arch(), Mg, ohw, K, w == shape_, false) + 64);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    const Tensor& W = ctx.input(wi_);
    const bool serves = !packed_.empty() && W.shape() == shape_ && (W.raw() == src_ || W.raw() == nullptr);
    if (X.rank() != 4 || W.rank() != 4 || (!serves && !W.raw())) return qlinear_ ? qlinear_conv_ref(at_, ctx) : conv_integer_ref(at_, ctx);
    check_int8(ctx, 0);
    check_int8(ctx, wi_);
    if (serves && W.dtype() != (signed_ ? DType::Int8 : DType::Uint8)) unsupported_dtype(ctx, wi_, W.dtype());
    const ConvGeom geo = conv_geometry(ctx, at_, X, W);
    const int64_t N = X.dim(0), M = W.dim(0), G = at_.group, Cg = W.dim(1), Mg = M / G;
    const Conv2d cg{Cg, X.dim(2), X.dim(3), geo.ks[0], geo.ks[1], geo.os[0], geo.os[1], geo.st[0], geo.st[1],
                    geo.dl[0], geo.dl[1], geo.pb[0], geo.pb[1]};
    const int64_t K = Cg * cg.KH * cg.KW, ohw = cg.OH * cg.OW;
    // pads beyond any real model's: the reference kernel skips padded taps instead of padding copies
    for (int64_t p : {geo.pb[0], geo.pb[1], geo.pe[0], geo.pe[1]})
      if (p > 4096) {
        if (W.raw()) return qlinear_ ? qlinear_conv_ref(at_, ctx) : conv_integer_ref(at_, ctx);
        ctx.fail(ErrorCode::Unsupported, "pads above 4096 with packed weights are not supported");
      }

    // zero points: x per tensor; w per tensor or per output channel
    const int xzi = 2, wzi = qlinear_ ? 5 : 3;
    int32_t xzp = 0;
    if (ctx.has_input(xzi)) {
      const Tensor& z = ctx.input(xzi);
      if (z.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "x_zero_point must be a scalar");
      if (z.dtype() != X.dtype()) ctx.fail(ErrorCode::InvalidArgument, "x_zero_point type differs from x");
      xzp = int32_t(int_at(z, 0));
    }
    std::vector<int32_t> wz;
    if (ctx.has_input(wzi)) {
      const Tensor& z = ctx.input(wzi);
      if (z.dtype() != W.dtype()) ctx.fail(ErrorCode::InvalidArgument, "w_zero_point type differs from w");
      if (z.numel() != 1 && z.numel() != M)
        ctx.fail(ErrorCode::InvalidArgument, "w_zero_point must be a scalar or have " + std::to_string(M) + " elements");
      wz = int32_vector(&z);
    }
    QEpilogue ep;
    ep.per_row = true;
    ep.ldo = ohw;
    std::vector<double> mult;
    std::vector<int32_t> bias;
    if (qlinear_) {
      const Tensor& xs = ctx.input(1);
      const Tensor& ws = ctx.input(4);
      const Tensor& ys = ctx.input(6);
      const Tensor& yz = ctx.input(7);
      check_qlinear_params(ctx, "x_scale", "w_scale");
      if (xs.numel() != 1 || ctx.input(2).numel() != 1 || ys.numel() != 1 || yz.numel() != 1)
        ctx.fail(ErrorCode::InvalidArgument, "x_scale, x_zero_point, y_scale and y_zero_point must be scalars");
      if (ws.numel() != 1 && ws.numel() != M)
        ctx.fail(ErrorCode::InvalidArgument, "w_scale and w_zero_point must be scalars or have " + std::to_string(M) + " elements");
      if (ctx.has_input(8)) {
        const Tensor& B = ctx.input(8);
        if (B.dtype() != DType::Int32) unsupported_dtype(ctx, 8, B.dtype());
        if (B.numel() != M) ctx.fail(ErrorCode::InvalidArgument, "B must have " + std::to_string(M) + " elements");
        bias.assign(B.data<int32_t>(), B.data<int32_t>() + M);
      }
      mult = multipliers(xs, ws, ys);
      if (mult.size() == 1) mult.resize(size_t(M), mult[0]);
      ep.out = QEpilogue::Out::Quant8;
      int64_t lo, hi;
      int_range(yz.dtype(), lo, hi);
      ep.lo = int32_t(lo);
      ep.hi = int32_t(hi);
      ep.yzp = int32_t(int_at(yz, 0));
    }
    Shape out{N, M, cg.OH, cg.OW};
    Tensor& Y = ctx.output(0, qlinear_ ? ctx.input(7).dtype() : DType::Int32, out);
    if (Y.numel() == 0) return;
    if (wz.size() == 1) wz.resize(size_t(M), wz[0]);
    const size_t esz = qlinear_ ? 1 : 4;
    const uint8_t* x = X.data<uint8_t>();
    if (Cg == 1 && Mg == 1 && G > 1) {
      depthwise(ctx, cg, x, W, xzp, wz, ep, mult, bias, Y, N, M);
      return;
    }
    const kernels::QGemmArch& g = arch();
    const bool direct = cg.KH == 1 && cg.KW == 1 && cg.sh == 1 && cg.sw == 1 && cg.pt == 0 && cg.pl == 0 && geo.pe[0] == 0 &&
                        geo.pe[1] == 0;  // a 1x1 convolution: the input planes are the right operand
    uint8_t* col = direct ? nullptr : aligned_workspace(ctx, K * ohw + 64 + kernels::qgemm_workspace_bytes(g, Mg, ohw, K, serves, false));
    uint8_t* ws = direct ? aligned_workspace(ctx, kernels::qgemm_workspace_bytes(g, Mg, ohw, K, serves, false))
                         : col + (K * ohw + 63) / 64 * 64;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t gi = 0; gi < G; ++gi) {
        const uint8_t* xg = x + (n * X.dim(1) + gi * Cg) * cg.H * cg.W;
        if (!direct)
          parallel_for(ctx.pool(), K, std::max<int64_t>(1, 65536 / std::max<int64_t>(1, ohw)),
                       [&](int64_t r0, int64_t r1) { im2col_u8(cg, xg, uint8_t(xzp), col, r0, r1); });
        QOperand left, right;
        left.src = QMatrix{W.raw() ? W.data<uint8_t>() + gi * Mg * K : nullptr, K, false, W.dtype() == DType::Int8};
        if (serves) left.packed = &packed_[size_t(gi)];
        if (!wz.empty()) {
          left.zp = wz.data() + gi * Mg;
          left.zp_len = Mg;
        }
        right.src = QMatrix{direct ? xg : col, ohw, false, X.dtype() == DType::Int8};
        right.zp = &xzp;
        right.zp_len = 1;
        QEpilogue e = ep;
        if (qlinear_) {
          e.mult = mult.data() + gi * Mg;
          e.mult_len = Mg;
          if (!bias.empty()) {
            e.bias = bias.data() + gi * Mg;
            e.bias_len = Mg;
          }
        }
        e.dst = static_cast<uint8_t*>(Y.raw()) + size_t((n * M + gi * Mg) * ohw) * esz;
        kernels::qgemm(g, Mg, ohw, K, left, right, e, ctx.pool(), ws);
      }
  }

 private:
  // One output channel per input channel: a direct loop per plane (int32 sums of the corrected
  // values), then the same output rule as the GEMM's epilogue.
  void depthwise(KernelContext& ctx, const Conv2d& cg, const uint8_t* x, const Tensor& W, int32_t xzp, const std::vector<int32_t>& wz,
                 const QEpilogue& ep, const std::vector<double>& mult, const std::vector<int32_t>& bias, Tensor& Y, int64_t N,
                 int64_t M) const {
    const kernels::QDepthwise g{cg.H, cg.W, cg.KH, cg.KW, cg.OH, cg.OW, cg.sh, cg.sw, cg.dh, cg.dw, cg.pt, cg.pl,
                                ctx.input(0).dtype() == DType::Int8, W.dtype() == DType::Int8, xzp};
    const int64_t ohw = cg.OH * cg.OW;
    const std::vector<int32_t> zeros(static_cast<size_t>(std::max(M, ohw)), 0);
    const int32_t* wzp = wz.empty() ? zeros.data() : wz.data();
    const uint8_t* wb = static_cast<const uint8_t*>(W.raw());
    // the plane's sums are finished by the GEMM's tile epilogue: one row (channel c) of ohw
    // columns with no zero-point corrections left (they are in the sums already)
    const kernels::QTileParams tp{nullptr, zeros.data(), nullptr, zeros.data(), zeros.data(), zeros.data()};
    QEpilogue e = ep;
    e.per_row = true;
    e.ldo = ohw;
    if (qlinear_) {
      e.mult = mult.data();
      e.mult_len = M;
      if (!bias.empty()) {
        e.bias = bias.data();
        e.bias_len = M;
      }
    }
    const size_t esz = qlinear_ ? 1 : 4;
    const kernels::QGemmArch& ga = arch();
    const int64_t scratch = kernels::qdepthwise_scratch_bytes(g);
    parallel_for(ctx.pool(), N * M, 1, [&](int64_t p0, int64_t p1) {
      std::vector<uint8_t> buf(static_cast<size_t>(scratch) + 64);
      void* sp = reinterpret_cast<void*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
      kernels::qdepthwise_planes(kernels::best_isa(), g, x, wb, wzp, M, p0, p1, sp, [&](int64_t p, int64_t c, const int32_t* sums) {
        QEpilogue pe = e;
        pe.dst = static_cast<uint8_t*>(Y.raw()) + size_t((p - c) * ohw) * esz;  // row c of this image's planes
        ga.finish(sums, int(ohw), c, 0, 1, int(ohw), 0, tp, pe);
      });
    });
  }

  static const kernels::QGemmArch& arch() { return kernels::qgemm_arch(kernels::qgemm_best_isa()); }
  bool qlinear_;
  ConvAttrs at_;
  int wi_;
  std::vector<QPacked> packed_;  // per group
  Shape shape_;
  const void* src_ = nullptr;
  bool signed_ = false;
};

}  // namespace

void register_gemm_ops(OpRegistry& r) {
  r.add("MatMulInteger", 10, [](const Node&) { return std::make_unique<QMatMulKernel>(false); });
  for (int v : {10, 21}) r.add("QLinearMatMul", v, [](const Node&) { return std::make_unique<QMatMulKernel>(true); });
  r.add("ConvInteger", 10, [](const Node& n) { return std::make_unique<QConvKernel>(false, parse_conv(n)); });
  r.add("QLinearConv", 10, [](const Node& n) { return std::make_unique<QConvKernel>(true, parse_conv(n)); });
}

}  // namespace basalt::quant
