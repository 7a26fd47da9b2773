// The blocked layout (NCHWc) ops the optimizer's layout pass emits (domain basalt).
#include "ops/nn_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace basalt::nnops {

namespace {

// ---------------------------------------------------------------- blocked layout (NCHWc)
// The ops of the layout pass (opt/layout_nchwc.cpp; docs/fused_ops.md, "Blocked layout"), on
// float32 tensors [N, CB, H, W, 16] (kernels/nchwc.hpp):
//   NchwcConv               X (blocked, or NCHW with plain_input = 1), W, B (constants), Z
//                           (optional residual, blocked like Y); the attributes of FusedConv
//                           (explicit pads only)
//   NchwcMaxPool / NchwcAveragePool    X blocked; MaxPool / AveragePool attributes
//   NchwcGlobalAveragePool / NchwcGlobalMaxPool   X blocked -> NCHW [N, channels, 1, 1]
//   ReorderToNchwc          NCHW -> blocked;  ReorderFromNchwc  blocked -> NCHW [N, channels, H, W]
//   NchwcBatchNormalization X blocked, scale, B, input_mean, input_var (float32, one per channel);
//                           epsilon and FusedBatchNormalization's activation attributes: inference
//                           BatchNormalization then the activation, per channel of the blocked X

// X must be a blocked float32 tensor; returns its [N, CB, H, W].
void check_blocked(const KernelContext& ctx, int i, const Tensor& X) {
  if (X.dtype() != DType::Float) unsupported_dtype(ctx, i, X.dtype());
  if (X.rank() != 5 || X.dim(4) != kernels::nchwc::kBlock)
    ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " must be a blocked tensor [N, C/16, H, W, 16], got " +
                                             shape_str(X.shape()));
}

class NchwcConvKernel final : public OpKernel {
 public:
  NchwcConvKernel(WinAttrs a, int64_t group, kernels::Activation act, bool plain)
      : a_(std::move(a)), group_(group), act_(act), plain_(plain) {}

  void prepare(const PrepareContext& pc) override {
    const Tensor* w = pc.constant.size() > 1 ? pc.constant[1] : nullptr;
    const Tensor* b = pc.constant.size() > 2 ? pc.constant[2] : nullptr;
    const bool has_b = pc.node.inputs.size() > 2 && pc.node.inputs[2] >= 0;
    if (!w || w->dtype() != DType::Float || w->rank() != 4 || (has_b && (!b || b->dtype() != DType::Float)))
      pc.node.fail(ErrorCode::InvalidModel, "NchwcConv needs constant float32 W and B");
    kernels::Conv2dShape s;
    s.M = w->dim(0);
    s.G = group_;
    if (__builtin_mul_overflow(w->dim(1), group_, &s.C))
      pc.node.fail(ErrorCode::InvalidModel, "W " + shape_str(w->shape()) + " with group " + std::to_string(group_) + " is too large");
    s.KH = w->dim(2);
    s.KW = w->dim(3);
    if (has_b && b->numel() != s.M) pc.node.fail(ErrorCode::InvalidModel, "B must have " + std::to_string(s.M) + " elements");
    if (!kernels::nchwc::conv_supported(s, plain_)) pc.node.fail(ErrorCode::Unsupported, "NchwcConv: unsupported group");
    wshape_ = w->shape();
    if (a_.strides.size() == 2) s.sh = a_.strides[0], s.sw = a_.strides[1];
    if (a_.dilations.size() == 2) s.dh = a_.dilations[0], s.dw = a_.dilations[1];
    // 3x3 stride-1 convs where Winograd pays: transformed weights for its blocked layout. The
    // image size, when the model fixes it, decides (see kernels::nchwc::winograd_tile).
    const Shape* xs = pc.shape.size() > 0 ? pc.shape[0] : nullptr;
    const int64_t pixels = xs && xs->size() == 5 ? (*xs)[2] * (*xs)[3] : -1;
    if (int tile = pc.winograd ? kernels::nchwc::winograd_tile(s, plain_, pixels) : 0) {
      wino_ = kernels::winograd_pack_weights(kernels::gemm_arch_best(), s, w->data<float>(), tile, true);
      wino_s_ = s;
      if (has_b) wino_bias_.assign(b->data<float>(), b->data<float>() + s.M);
      return;
    }
    cw_ = kernels::nchwc::pack_conv(s, w->data<float>(), has_b ? b->data<float>() : nullptr, plain_);
  }
  size_t packed_bytes() const override { return cw_.bytes() + wino_.bytes() + wino_bias_.size() * sizeof(float); }
  bool replaces_constant(int input) const override { return input == 1 || input == 2; }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    if (cw_.w.empty() && !wino_.tile) ctx.fail(ErrorCode::Internal, "NchwcConv was not prepared");
    if (ctx.has_input(1) && ctx.input(1).shape() != wshape_)
      ctx.fail(ErrorCode::InvalidArgument, "W was fed with shape " + shape_str(ctx.input(1).shape()) + ", packed " + shape_str(wshape_));
    kernels::Conv2dShape s = wino_.tile ? wino_s_ : cw_.s;
    if (plain_) {
      if (X.dtype() != DType::Float) unsupported_dtype(ctx, 0, X.dtype());
      if (X.rank() != 4 || X.dim(1) != s.C)
        ctx.fail(ErrorCode::InvalidArgument, "X must be [N, " + std::to_string(s.C) + ", H, W], got " + shape_str(X.shape()));
    } else {
      check_blocked(ctx, 0, X);
      if (X.dim(1) != kernels::nchwc::blocks(s.C))
        ctx.fail(ErrorCode::InvalidArgument, "X has " + std::to_string(X.dim(1)) + " channel blocks, W wants " + std::to_string(s.C) + " channels");
    }
    Geom g = make_geom(ctx, a_, {X.dim(2), X.dim(3)}, {s.KH, s.KW}, false);
    s.N = X.dim(0);
    set_conv2d_window(g, s);
    Shape ys = {s.N, kernels::nchwc::blocks(s.M), s.OH, s.OW, kernels::nchwc::kBlock};
    const float* res = nullptr;
    if (ctx.has_input(3)) {
      const Tensor& Z = ctx.input(3);
      check_blocked(ctx, 3, Z);
      if (Z.shape() != ys) ctx.fail(ErrorCode::InvalidArgument, "residual Z has shape " + shape_str(Z.shape()) + ", expected " + shape_str(ys));
      res = Z.data<float>();
    }
    Tensor& y = ctx.output_uninit(0, DType::Float, ys);
    if (wino_.tile) {
      const kernels::GemmArch& arch = kernels::gemm_arch_best();
      const int threads = ctx.pool() ? ctx.pool()->threads() : 1;
      float* ws = static_cast<float*>(
          ctx.workspace(size_t(kernels::winograd_workspace_floats(arch, s, wino_.tile, threads)) * sizeof(float) + 128));
      kernels::conv2d_winograd(arch, s, X.data<float>(), wino_, wino_bias_.empty() ? nullptr : wino_bias_.data(), res,
                               act_, y.data<float>(), ctx.pool(), ws);
      return;
    }
    const int64_t wsf = kernels::nchwc::conv_workspace_floats(cw_, s);
    float* ws = wsf ? static_cast<float*>(ctx.workspace(size_t(wsf) * sizeof(float))) : nullptr;
    kernels::nchwc::conv(kernels::best_isa(), cw_, s, X.data<float>(), res, act_, y.data<float>(), ctx.pool(), ws);
  }
  size_t workspace_bytes(std::span<const Shape> in, int threads) const override {
    if (wino_.tile)  // (independent of the image size)
      return size_t(kernels::winograd_workspace_floats(kernels::gemm_arch_best(), wino_s_, wino_.tile, threads)) *
                 sizeof(float) + 128;
    if (in.empty() || cw_.w.empty() || in[0].size() != (plain_ ? 4u : 5u)) return 0;
    kernels::Conv2dShape s = cw_.s;
    s.N = in[0][0];
    s.H = in[0][2];
    s.W = in[0][3];
    // (an upper bound over output sizes: the padded input never exceeds the image plus its pads)
    auto pad = [&](size_t i) { return i < a_.pads.size() ? a_.pads[i] : int64_t(0); };
    return size_t(kernels::nchwc::conv_workspace_bound_floats(cw_, s, pad(0), pad(2), pad(1), pad(3))) * sizeof(float);
  }

 private:
  WinAttrs a_;
  int64_t group_;
  kernels::Activation act_;
  bool plain_;
  kernels::nchwc::ConvWeights cw_;  // the direct kernels' weights, or
  kernels::WinogradWeights wino_;   // Winograd's (tile != 0), with the conv's shape and bias
  kernels::Conv2dShape wino_s_;
  std::vector<float> wino_bias_;
  Shape wshape_;
};

// Inference batch norm (+ activation) on a blocked tensor: y = act(x * s[c] + t[c]), s and t
// folded in double as BatchNormalization does (at load for constant parameters; a feed that
// overrides one of them is folded at run time), padded with zeros to whole blocks.
class NchwcBatchNormKernel final : public OpKernel {
 public:
  NchwcBatchNormKernel(float eps, kernels::Activation act) : eps_(eps), act_(act) {}
  void prepare(const PrepareContext& pc) override {
    std::vector<const Tensor*> p;
    for (size_t i = 1; i <= 4; ++i) p.push_back(pc.constant.size() > i ? pc.constant[i] : nullptr);
    for (const Tensor* t : p)
      if (!t || !t->raw()) return;  // folded per run
    std::string err;
    if (!fold(p, s_, t_, C_, err)) pc.node.fail(ErrorCode::InvalidModel, err);
    for (size_t i = 0; i < 4; ++i) src_[i] = p[i]->raw();
  }
  size_t packed_bytes() const override { return (s_.size() + t_.size()) * sizeof(float); }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    check_blocked(ctx, 0, X);
    std::vector<const Tensor*> p;
    bool prepared = !s_.empty();
    for (int i = 1; i <= 4; ++i) {
      p.push_back(&ctx.input(i));
      prepared = prepared && p.back()->raw() == src_[i - 1];
    }
    std::vector<float> s_run, t_run;
    int64_t C = C_;
    if (!prepared) {
      std::string err;
      if (!fold(p, s_run, t_run, C, err)) ctx.fail(ErrorCode::InvalidArgument, err);
    }
    const std::vector<float>& s = prepared ? s_ : s_run;
    const std::vector<float>& t = prepared ? t_ : t_run;
    if (X.dim(1) != kernels::nchwc::blocks(C))
      ctx.fail(ErrorCode::InvalidArgument, "X has " + std::to_string(X.dim(1)) + " channel blocks, the parameters " +
                                               std::to_string(C) + " channels");
    Tensor& y = ctx.output_uninit(0, DType::Float, X.shape());
    kernels::nchwc::scale_shift(kernels::best_isa(), X.data<float>(), s.data(), t.data(), act_, y.data<float>(), X.dim(0),
                                X.dim(1), X.dim(2) * X.dim(3), ctx.pool());
  }

 private:
  // bn_fold of four float32 vectors of one length C, padded with zeros to blocks(C) * 16.
  bool fold(const std::vector<const Tensor*>& p, std::vector<float>& s, std::vector<float>& t, int64_t& C,
            std::string& err) const {
    static const char* names[4] = {"scale", "B", "input_mean", "input_var"};
    C = p[0]->numel();
    for (size_t i = 0; i < 4; ++i) {
      if (p[i]->dtype() != DType::Float || p[i]->rank() != 1 || p[i]->numel() != C || C <= 0) {
        err = std::string(names[i]) + " must be a float32 vector of " + std::to_string(C) + " values, got " +
              dtype_name(p[i]->dtype()) + " " + shape_str(p[i]->shape());
        return false;
      }
    }
    std::vector<double> d[4];
    for (size_t i = 0; i < 4; ++i) d[i].assign(p[i]->data<float>(), p[i]->data<float>() + C);
    bn_fold(d[0], d[1], d[2], d[3], eps_, s, t, size_t(kernels::nchwc::blocks(C) * kernels::nchwc::kBlock));
    return true;
  }
  float eps_;
  kernels::Activation act_;
  std::vector<float> s_, t_;
  int64_t C_ = 0;
  const void* src_[4] = {};
};

void register_nchwc(OpRegistry& r) {
  r.add("basalt", "NchwcBatchNormalization", 1, INT_MAX, [](const Node& n) -> std::unique_ptr<OpKernel> {
    kernels::Activation act = parse_fused_activation(n);
    if (kernels::apply_activation(act, 0.f) != 0.f)
      n.fail(ErrorCode::Unsupported, "NchwcBatchNormalization: activation " + n.attr_string("activation", "") +
                                         " does not keep 0 at 0 (the padding channels of a blocked tensor)");
    return std::make_unique<NchwcBatchNormKernel>(n.attr_float("epsilon", 1e-5f), act);
  });

  r.add("basalt", "NchwcConv", 1, INT_MAX, [](const Node& n) -> std::unique_ptr<OpKernel> {
    WinAttrs a = parse_win(n, false);
    if (a.auto_pad != AutoPad::NotSet && a.auto_pad != AutoPad::Valid) n.fail(ErrorCode::InvalidModel, "NchwcConv takes explicit pads");
    int64_t group = n.attr_int("group", 1);
    if (group <= 0) n.fail(ErrorCode::InvalidModel, "group must be positive");
    if (group > INT32_MAX) n.fail(ErrorCode::InvalidModel, "group value " + std::to_string(group) + " is too large");
    return std::make_unique<NchwcConvKernel>(a, group, parse_fused_activation(n), n.attr_int("plain_input", 0) != 0);
  });
  for (bool avg : {false, true})
    r.add("basalt", avg ? "NchwcAveragePool" : "NchwcMaxPool", 1, INT_MAX, [avg](const Node& n) {
      WinAttrs a = parse_win(n, true);
      if (a.kernel.size() != 2) n.fail(ErrorCode::InvalidModel, "kernel_shape must have 2 values");
      check_pool_kernel(n, a);
      const bool cip = n.attr_int("count_include_pad", 0) != 0;
      return kernel([a, avg, cip](KernelContext& ctx) {
        const Tensor& X = ctx.input(0);
        check_blocked(ctx, 0, X);
        Geom g = make_geom(ctx, a, {X.dim(2), X.dim(3)}, a.kernel, true);
        check_pool_work(ctx, g, double(X.dim(0)) * double(X.dim(1)) * double(kernels::nchwc::kBlock), true);
        const kernels::Pool2D p2 = pool2d_of(g, avg, cip);
        Tensor& y = ctx.output_uninit(0, DType::Float, {X.dim(0), X.dim(1), p2.OH, p2.OW, kernels::nchwc::kBlock});
        kernels::nchwc::pool(kernels::best_isa(), X.data<float>(), y.data<float>(), X.dim(0) * X.dim(1), p2, ctx.pool());
      });
    });
  auto channels_of = [](const Node& n) {
    int64_t c = n.attr_int("channels");
    if (c <= 0) n.fail(ErrorCode::InvalidModel, "channels must be positive");
    if (c > INT32_MAX) n.fail(ErrorCode::InvalidModel, "channels value " + std::to_string(c) + " is too large");
    return c;
  };
  for (bool avg : {false, true})
    r.add("basalt", avg ? "NchwcGlobalAveragePool" : "NchwcGlobalMaxPool", 1, INT_MAX, [avg, channels_of](const Node& n) {
      const int64_t C = channels_of(n);
      return kernel([avg, C](KernelContext& ctx) {
        const Tensor& X = ctx.input(0);
        check_blocked(ctx, 0, X);
        if (X.dim(1) != kernels::nchwc::blocks(C))
          ctx.fail(ErrorCode::InvalidArgument, "X has " + std::to_string(X.dim(1)) + " channel blocks for " + std::to_string(C) + " channels");
        Tensor& y = ctx.output_uninit(0, DType::Float, {X.dim(0), C, 1, 1});
        kernels::nchwc::global_pool(kernels::best_isa(), avg, X.data<float>(), X.dim(0), C, X.dim(2) * X.dim(3), y.data<float>(), ctx.pool());
      });
    });
  r.add("basalt", "ReorderToNchwc", 1, INT_MAX, [](const Node& n) {
    const int64_t want = n.attr_int("channels", 0);  // 0: any
    return kernel([want](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      if (X.dtype() != DType::Float) unsupported_dtype(ctx, 0, X.dtype());
      if (X.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "X must be [N, C, H, W], got " + shape_str(X.shape()));
      const int64_t C = X.dim(1);
      if (want > 0 && C != want)
        ctx.fail(ErrorCode::InvalidArgument, "X has " + std::to_string(C) + " channels, the conv it feeds takes " + std::to_string(want) +
                                                 " (shape " + shape_str(X.shape()) + ")");
      Tensor& y = ctx.output_uninit(0, DType::Float, {X.dim(0), kernels::nchwc::blocks(C), X.dim(2), X.dim(3), kernels::nchwc::kBlock});
      kernels::nchwc::to_blocked(kernels::best_isa(), X.data<float>(), X.dim(0), C, X.dim(2) * X.dim(3), y.data<float>(), ctx.pool());
    });
  });
  r.add("basalt", "ReorderFromNchwc", 1, INT_MAX, [channels_of](const Node& n) {
    const int64_t C = channels_of(n);
    return kernel([C](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      check_blocked(ctx, 0, X);
      if (X.dim(1) != kernels::nchwc::blocks(C))
        ctx.fail(ErrorCode::InvalidArgument, "X has " + std::to_string(X.dim(1)) + " channel blocks for " + std::to_string(C) + " channels");
      Tensor& y = ctx.output_uninit(0, DType::Float, {X.dim(0), C, X.dim(2), X.dim(3)});
      kernels::nchwc::from_blocked(kernels::best_isa(), X.data<float>(), X.dim(0), C, X.dim(2) * X.dim(3), y.data<float>(), ctx.pool());
    });
  });
}

}  // namespace

void register_nchwc_ops(OpRegistry& r) {
  register_nchwc(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("basalt", "NchwcAveragePool").infer_symbolic(shapes::nchwc_pool);
  r.def("basalt", "NchwcMaxPool").infer_symbolic(shapes::nchwc_pool);
  r.def("basalt", "NchwcBatchNormalization").infer_symbolic(shapes::batch_norm).in_place(in_place::batch_norm_f32);
  r.def("basalt", "NchwcConv").infer_symbolic(shapes::nchwc_conv);
  r.def("basalt", "NchwcGlobalAveragePool").infer_symbolic(shapes::nchwc_global_pool);
  r.def("basalt", "NchwcGlobalMaxPool").infer_symbolic(shapes::nchwc_global_pool);
  r.def("basalt", "ReorderFromNchwc").infer_symbolic(shapes::reorder_from_nchwc);
  r.def("basalt", "ReorderToNchwc").infer_symbolic(shapes::reorder_to_nchwc);
}

}  // namespace basalt::nnops
