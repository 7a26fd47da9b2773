// Normalizations: BatchNormalization (and basalt::FusedBatchNormalization), InstanceNormalization,
// GroupNormalization, LayerNormalization, RMSNormalization, LpNormalization, LRN,
// MeanVarianceNormalization.
#include "ops/common.hpp"

#include "kernels/activation.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/lrn.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>

namespace basalt {

namespace {

// ---------------------------------------------------------------------------------------------
// Normalizations
// ---------------------------------------------------------------------------------------------

// Read a parameter tensor broadcast (unidirectionally) to `shape`, as doubles.
std::vector<double> broadcast_param(const KernelContext& ctx, int input, const Shape& shape) {
  const Tensor& t = ctx.input(input);
  if (t.rank() > int(shape.size()))
    ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(input) + " of shape " + shape_str(t.shape()) +
                                             " cannot be broadcast to " + shape_str(shape));
  for (int k = 0; k < t.rank(); ++k) {
    int64_t d = t.shape()[size_t(k)], o = shape[size_t(k + int(shape.size()) - t.rank())];
    if (d != o && d != 1)
      ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(input) + " of shape " + shape_str(t.shape()) +
                                               " cannot be broadcast to " + shape_str(shape));
  }
  std::vector<double> src = to_dvec(ctx, input, t);
  std::vector<double> out(static_cast<size_t>(shape_numel(shape)));
  std::vector<int64_t> st[1] = {broadcast_strides(t.shape(), shape)};
  for_each_broadcast(shape, st, [&](int64_t i, const int64_t* off) { out[size_t(i)] = src[size_t(off[0])]; });
  return out;
}

// The fused activation in double, for a double FusedBatchNormalization: rounding the result to
// float32 first would give a float64 model float32 precision (7.7e-10 off after Relu, 1e-8 after
// Sigmoid). The parameters (act.a, act.b) are the fused op's float attributes.
double activation_double(const kernels::Activation& act, double v) {
  v = kernels::activation_value(act, v);
  return act.post ? v * double(act.post_mul) + double(act.post_add) : v;
}

// Inference BatchNormalization on float32 folds its four parameters into a per-channel scale s and
// shift t (in double, then rounded to float). With constant parameters (the usual case) that
// folding is done once at load; a run uses it only when inputs 1..4 are still those very tensors
// (an initializer that a feed overrides is folded again at run time, with the same arithmetic).
struct BnFolded {
  std::vector<float> s, t;
  const void* src[5] = {};
};

using BnFn = std::function<void(KernelContext&, const BnFolded*)>;
class BatchNormKernel final : public OpKernel {
 public:
  BatchNormKernel(float eps, bool training, BnFn f) : eps_(eps), training_(training), f_(std::move(f)) {}
  void prepare(const PrepareContext& pc) override {
    if (training_ || pc.constant.size() < 5) return;
    std::vector<double> p[4];
    int64_t C = -1;
    for (int i = 1; i <= 4; ++i) {
      const Tensor* t = pc.constant[size_t(i)];
      if (!t || !t->raw() || (C >= 0 && t->numel() != C)) return;
      C = t->numel();
      bool ok = visit_float(t->dtype(), [&]<class T>() {
        const T* d = t->data<T>();
        for (int64_t k = 0; k < C; ++k) p[i - 1].push_back(double(d[k]));
      });
      if (!ok) return;
    }
    bn_fold(p[0], p[1], p[2], p[3], eps_, folded_.s, folded_.t);
    for (int i = 1; i <= 4; ++i) folded_.src[i] = pc.constant[size_t(i)]->raw();
    prepared_ = true;
  }
  size_t packed_bytes() const override { return (folded_.s.size() + folded_.t.size()) * sizeof(float); }
  void compute(KernelContext& ctx) const override { f_(ctx, prepared_ ? &folded_ : nullptr); }

 private:
  float eps_;
  bool training_;
  BnFn f_;
  BnFolded folded_;
  bool prepared_ = false;
};

DType stash_dtype(int64_t stash_type, DType x) {
  if (stash_type == 1) return DType::Float;
  if (dtype_attr_known(stash_type) && is_float_like(DType(stash_type))) return DType(stash_type);
  return x;
}

// LayerNormalization for float32 whose scale (and bias) cover exactly the normalized dims (the
// usual [C] over the last axis): rows go to the vectorized kernel. Returns false for anything
// else (other dtypes, parameters broadcast along the normalized dims), which takes the reference.
bool layernorm_fast(KernelContext& ctx, const Tensor& x, int ax, int64_t outer, int64_t inner, float eps,
                    int64_t stash) {
  if (x.dtype() != DType::Float || inner == 0) return false;
  auto covers = [&](int i) {
    if (!ctx.has_input(i)) return true;
    const Tensor& t = ctx.input(i);
    if (t.dtype() != DType::Float || t.numel() != inner) return false;
    // Leading 1s, then exactly the normalized dims.
    int lead = t.rank() - (x.rank() - ax);
    if (lead < 0) return false;
    for (int d = 0; d < t.rank(); ++d) {
      int64_t want = d < lead ? 1 : x.dim(ax + d - lead);
      if (t.dim(d) != want) return false;
    }
    return true;
  };
  if (!covers(1) || !covers(2)) return false;
  DType sd = stash_dtype(stash, x.dtype());
  if ((ctx.has_output(1) || ctx.has_output(2)) && sd != DType::Float) return false;
  Shape stat_shape = x.shape();
  for (int d = ax; d < x.rank(); ++d) stat_shape[size_t(d)] = 1;
  float* mean = ctx.has_output(1) ? ctx.output_uninit(1, DType::Float, stat_shape).data<float>() : nullptr;
  float* rstd = ctx.has_output(2) ? ctx.output_uninit(2, DType::Float, stat_shape).data<float>() : nullptr;
  Tensor& y = ctx.output_uninit(0, DType::Float, x.shape());
  kernels::layernorm_rows_f32(ctx.pool(), x.data<float>(), ctx.input(1).data<float>(),
                              ctx.has_input(2) ? ctx.input(2).data<float>() : nullptr, y.data<float>(), outer, inner,
                              eps, mean, rstd);
  return true;
}

// The reference path LayerNormalization and RMSNormalization share (in double): x viewed as
// [outer, inner] around `axis`; each row is centred on its mean (LayerNorm; RMSNorm does not
// centre), scaled by 1 / sqrt(mean square + eps), then by the broadcast scale and, for LayerNorm,
// plus the bias. Writes output 0 and, for LayerNorm, the mean and inverse std (outputs 1, 2).
struct RowNorm {
  int64_t axis = -1;
  float eps = 1e-5f;
  int64_t stash = 1;
  bool centre = true;  // LayerNorm: subtract the mean first, optional bias, stats outputs

  void operator()(KernelContext& ctx) const {
    const Tensor& x = ctx.input(0);
    require_float(ctx, 0, x.dtype());
    int rank = x.rank();
    if (rank == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
    int ax = normalize_axis(ctx, axis, rank);
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < ax; ++d) outer *= x.dim(d);
    for (int d = ax; d < rank; ++d) inner *= x.dim(d);
    if (centre && layernorm_fast(ctx, x, ax, outer, inner, eps, stash)) return;
    std::vector<double> xs = to_dvec(ctx, 0, x);
    std::vector<double> sc = broadcast_param(ctx, 1, x.shape());
    std::vector<double> bi;
    if (centre && ctx.has_input(2)) bi = broadcast_param(ctx, 2, x.shape());
    std::vector<double> ys(xs.size()), means(static_cast<size_t>(outer)), invs(static_cast<size_t>(outer));
    for (int64_t o = 0; o < outer; ++o) {
      const double* p = xs.data() + o * inner;
      double mean = 0;
      if (centre) {
        for (int64_t k = 0; k < inner; ++k) mean += p[k];
        mean /= double(inner);
      }
      double var = 0;
      for (int64_t k = 0; k < inner; ++k) var += (p[k] - mean) * (p[k] - mean);
      var /= double(inner);
      double inv = 1.0 / std::sqrt(var + double(eps));
      means[size_t(o)] = mean;
      invs[size_t(o)] = inv;
      for (int64_t k = 0; k < inner; ++k) {
        size_t i = size_t(o * inner + k);
        ys[i] = (p[k] - mean) * inv * sc[i] + (bi.empty() ? 0.0 : bi[i]);
      }
    }
    from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
    if (!centre) return;
    Shape stat_shape = x.shape();
    for (int d = ax; d < rank; ++d) stat_shape[size_t(d)] = 1;
    DType sd = stash_dtype(stash, x.dtype());
    if (ctx.has_output(1)) from_dvec(ctx.output(1, sd, stat_shape), means);
    if (ctx.has_output(2)) from_dvec(ctx.output(2, sd, stat_shape), invs);
  }
};

RowNorm row_norm_attrs(const Node& n, bool centre) {
  RowNorm k;
  k.axis = n.attr_int("axis", -1);
  k.eps = n.attr_float("epsilon", 1e-5f);
  k.stash = n.attr_int("stash_type", 1);
  k.centre = centre;
  return k;
}

static void register_layer_norm(OpRegistry& r) {
  r.add("LayerNormalization", 17, [](const Node& n) { return kernel(row_norm_attrs(n, true)); });
}

static void register_rms_norm(OpRegistry& r) {
  r.add("RMSNormalization", 23, [](const Node& n) { return kernel(row_norm_attrs(n, false)); });
}

static void register_batch_norm(OpRegistry& r) {
  // BatchNormalization, and basalt::FusedBatchNormalization (inference BN, then an activation:
  // docs/fused_ops.md), applied to each plane while it is in L1.
  auto make_bn = [](const Node& n, bool fused) -> std::unique_ptr<OpKernel> {
      float eps = n.attr_float("epsilon", 1e-5f);
      float momentum = n.attr_float("momentum", 0.9f);
      bool training = !fused && n.opset >= 14 && n.attr_int("training_mode", 0) != 0;
      if (!fused && n.opset < 9 && n.attr_int("spatial", 1) == 0)
        n.fail(ErrorCode::Unsupported, "spatial=0 is not supported");
      int opset = fused ? 15 : n.opset;
      kernels::Activation act;
      std::string err;
      if (fused && !kernels::parse_activation(n.attr_string("activation", ""), n.attr_floats("activation_params", {}), act, &err))
        n.fail(ErrorCode::Unsupported, err);
      return std::make_unique<BatchNormKernel>(eps, training, [=](KernelContext& ctx, const BnFolded* folded) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got " + shape_str(x.shape()));
        int64_t N = x.dim(0), C = x.dim(1), S = 1;
        for (int d = 2; d < x.rank(); ++d) S *= x.dim(d);
        if (!training && x.dtype() == DType::Float) {
          // Inference on float32: y = x * s[c] + t[c] with s, t folded in double (at load when
          // the parameters are constants), one vectorized pass; planes split over the pool.
          for (int i = 1; i < ctx.num_outputs(); ++i)
            if (ctx.has_output(i))
              ctx.fail(ErrorCode::Unsupported, "output " + std::to_string(i) + " is only produced in training mode" +
                                                   (opset < 14 ? " (not supported before opset 14)" : ""));
          bool use_folded = folded && int64_t(folded->s.size()) == C;
          for (int i = 1; use_folded && i <= 4; ++i) use_folded = ctx.input(i).raw() == folded->src[i];
          std::vector<float> s_run, t_run;
          if (!use_folded)
            bn_fold(per_channel_param(ctx, 1, C, "scale"), per_channel_param(ctx, 2, C, "B"),
                    per_channel_param(ctx, 3, C, "input_mean"), per_channel_param(ctx, 4, C, "input_var"), eps, s_run,
                    t_run);
          const std::vector<float>& s = use_folded ? folded->s : s_run;
          const std::vector<float>& t = use_folded ? folded->t : t_run;
          Tensor& y = ctx.output_uninit(0, x.dtype(), x.shape());
          const float* px = x.data<float>();
          float* py = y.data<float>();
          const kernels::VecOps& k = kernels::vec_ops();
          // The activation as the standalone op's row kernel (the same semantics as that op).
          kernels::UnaryOp act_op = kernels::UnaryOp::Relu;
          kernels::UnaryParams act_params;
          act_params.alpha = act.a;
          act_params.beta = act.b;
          switch (act.kind) {
            case kernels::ActKind::LeakyRelu: act_op = kernels::UnaryOp::LeakyRelu; break;
            case kernels::ActKind::Clip: act_op = kernels::UnaryOp::Clip; break;
            case kernels::ActKind::HardSigmoid: act_op = kernels::UnaryOp::HardSigmoid; break;
            case kernels::ActKind::HardSwish: act_op = kernels::UnaryOp::HardSwish; break;
            case kernels::ActKind::Sigmoid: act_op = kernels::UnaryOp::Sigmoid; break;
            case kernels::ActKind::Tanh: act_op = kernels::UnaryOp::Tanh; break;
            default: break;
          }
          const bool has_act = act.kind != kernels::ActKind::None;
          const int64_t grain = S > 0 ? std::max<int64_t>(1, kernels::eltwise_grain(has_act ? 2 : 1) / S) : 1;
          parallel_for(ctx.pool(), N * C, grain, [&](int64_t b, int64_t e) {
            for (int64_t p = b; p < e; ++p) {
              size_t c = size_t(p % C);
              k.affine(px + p * S, py + p * S, S, s[c], t[c]);
              if (has_act) k.unary(act_op, act_params, py + p * S, py + p * S, S);
            }
          });
          return;
        }
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> sc = per_channel_param(ctx, 1, C, "scale");
        std::vector<double> bi = per_channel_param(ctx, 2, C, "B");
        std::vector<double> mean = per_channel_param(ctx, 3, C, "input_mean");
        std::vector<double> var = per_channel_param(ctx, 4, C, "input_var");
        std::vector<double> use_mean = mean, use_var = var;
        if (training) {
          for (int64_t c = 0; c < C; ++c) {
            double s = 0, cnt = double(N * S);
            for (int64_t b = 0; b < N; ++b)
              for (int64_t k = 0; k < S; ++k) s += xs[size_t((b * C + c) * S + k)];
            double m = cnt > 0 ? s / cnt : 0;
            double q = 0;
            for (int64_t b = 0; b < N; ++b)
              for (int64_t k = 0; k < S; ++k) {
                double d = xs[size_t((b * C + c) * S + k)] - m;
                q += d * d;
              }
            use_mean[size_t(c)] = m;
            use_var[size_t(c)] = cnt > 0 ? q / cnt : 0;
          }
        }
        std::vector<double> ys(xs.size());
        for (int64_t b = 0; b < N; ++b)
          for (int64_t c = 0; c < C; ++c) {
            double inv = 1.0 / std::sqrt(use_var[size_t(c)] + double(eps));
            for (int64_t k = 0; k < S; ++k) {
              size_t i = size_t((b * C + c) * S + k);
              ys[i] = (xs[i] - use_mean[size_t(c)]) * inv * sc[size_t(c)] + bi[size_t(c)];
              if (act.kind != kernels::ActKind::None)
                ys[i] = x.dtype() == DType::Double ? activation_double(act, ys[i])
                                                   : double(kernels::apply_activation(act, float(ys[i])));
            }
          }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
        if (training) {
          std::vector<double> rm(static_cast<size_t>(C)), rv(static_cast<size_t>(C));
          for (int64_t c = 0; c < C; ++c) {
            rm[size_t(c)] = mean[size_t(c)] * momentum + use_mean[size_t(c)] * (1.0 - momentum);
            rv[size_t(c)] = var[size_t(c)] * momentum + use_var[size_t(c)] * (1.0 - momentum);
          }
          if (ctx.has_output(1)) from_dvec(ctx.output(1, ctx.input(3).dtype(), ctx.input(3).shape()), rm);
          if (ctx.has_output(2)) from_dvec(ctx.output(2, ctx.input(4).dtype(), ctx.input(4).shape()), rv);
        } else {
          for (int i = 1; i < ctx.num_outputs(); ++i)
            if (ctx.has_output(i))
              ctx.fail(ErrorCode::Unsupported, "output " + std::to_string(i) + " is only produced in training mode" +
                                                   (opset < 14 ? " (not supported before opset 14)" : ""));
        }
      });
  };
  for (int v : {1, 6, 7, 9, 14, 15}) r.add("BatchNormalization", v, [=](const Node& n) { return make_bn(n, false); });
  r.add("basalt", "FusedBatchNormalization", 1, INT_MAX, [=](const Node& n) { return make_bn(n, true); });
}

// Mean and 1 / sqrt(variance + eps) of n contiguous values (mean 0 and variance 0 when n is 0).
void moments(const double* p, int64_t n, float eps, double& mean, double& inv) {
  double m = 0;
  for (int64_t k = 0; k < n; ++k) m += p[k];
  m = n ? m / double(n) : 0;
  double q = 0;
  for (int64_t k = 0; k < n; ++k) q += (p[k] - m) * (p[k] - m);
  q = n ? q / double(n) : 0;
  mean = m;
  inv = 1.0 / std::sqrt(q + double(eps));
}

static void register_instance_norm(OpRegistry& r) {
  // InstanceNormalization
  for (int v : {1, 6}) {
    r.add("InstanceNormalization", v, [](const Node& n) {
      float eps = n.attr_float("epsilon", 1e-5f);
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got " + shape_str(x.shape()));
        int64_t N = x.dim(0), C = x.dim(1), S = 1;
        for (int d = 2; d < x.rank(); ++d) S *= x.dim(d);
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> sc = per_channel_param(ctx, 1, C, "scale");
        std::vector<double> bi = per_channel_param(ctx, 2, C, "B");
        std::vector<double> ys(xs.size());
        for (int64_t b = 0; b < N; ++b)
          for (int64_t c = 0; c < C; ++c) {
            const double* p = xs.data() + (b * C + c) * S;
            double m, inv;
            moments(p, S, eps, m, inv);
            for (int64_t k = 0; k < S; ++k)
              ys[size_t((b * C + c) * S + k)] = (p[k] - m) * inv * sc[size_t(c)] + bi[size_t(c)];
          }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }
}

static void register_group_norm(OpRegistry& r) {
  // GroupNormalization: opset 18 scale/bias per group, opset 21 per channel.
  for (int v : {18, 21}) {
    r.add("GroupNormalization", v, [](const Node& n) {
      float eps = n.attr_float("epsilon", 1e-5f);
      int64_t G = n.attr_int("num_groups");
      if (G <= 0 || G > INT32_MAX) n.fail(ErrorCode::InvalidModel, "num_groups must be in [1, 2^31), got " + std::to_string(G));
      (void)n.attr_int("stash_type", 1);
      bool per_channel = n.opset >= 21;
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got " + shape_str(x.shape()));
        int64_t N = x.dim(0), C = x.dim(1), S = 1;
        for (int d = 2; d < x.rank(); ++d) S *= x.dim(d);
        if (C % G != 0)
          ctx.fail(ErrorCode::InvalidArgument, "channel count " + std::to_string(C) + " is not divisible by num_groups " +
                                                   std::to_string(G));
        int64_t cpg = C / G;
        std::vector<double> sc, bi;
        // Opset 18 specifies one scale/bias per group; opset 21 one per channel. Some exporters
        // emit per-channel parameters with opset 18, so accept that too when C != num_groups.
        if (per_channel || (ctx.input(1).numel() == C && ctx.input(1).numel() != G)) {
          sc = per_channel_param(ctx, 1, C, "scale");
          bi = per_channel_param(ctx, 2, C, "bias");
        } else {
          std::vector<double> sg = per_channel_param(ctx, 1, G, "scale (per group)");
          std::vector<double> bg = per_channel_param(ctx, 2, G, "bias (per group)");
          sc.resize(size_t(C));
          bi.resize(size_t(C));
          for (int64_t c = 0; c < C; ++c) {
            sc[size_t(c)] = sg[size_t(c / cpg)];
            bi[size_t(c)] = bg[size_t(c / cpg)];
          }
        }
        // An empty input (e.g. 0 channels, which any num_groups divides): nothing to normalize, and
        // the group loop below must not run num_groups times over nothing.
        if (x.numel() == 0) {
          ctx.output(0, x.dtype(), x.shape());
          return;
        }
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> ys(xs.size());
        int64_t gs = cpg * S;
        for (int64_t b = 0; b < N; ++b)
          for (int64_t g = 0; g < G; ++g) {
            const double* p = xs.data() + (b * C + g * cpg) * S;
            double m, inv;
            moments(p, gs, eps, m, inv);
            for (int64_t k = 0; k < gs; ++k) {
              int64_t c = g * cpg + k / (S ? S : 1);
              ys[size_t((b * C + g * cpg) * S + k)] = (p[k] - m) * inv * sc[size_t(c)] + bi[size_t(c)];
            }
          }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }
}

static void register_lrn(OpRegistry& r) {
  // LRN. float32: kernels::lrn_f32 (kernels/lrn.hpp); other float types: the double reference loop.
  for (int v : {1, 13}) {
    r.add("LRN", v, [](const Node& n) {
      float alpha = n.attr_float("alpha", 1e-4f);
      float beta = n.attr_float("beta", 0.75f);
      float bias = n.attr_float("bias", 1.0f);
      int64_t size = n.attr_int("size");
      if (size <= 0 || size > INT32_MAX) n.fail(ErrorCode::InvalidModel, "size must be in [1, 2^31), got " + std::to_string(size));
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got " + shape_str(x.shape()));
        int64_t N = x.dim(0), C = x.dim(1), S = 1;
        for (int d = 2; d < x.rank(); ++d) S *= x.dim(d);
        int64_t lo = (size - 1) / 2, hi = size - 1 - lo;  // floor, ceil
        if (x.dtype() == DType::Float) {
          Tensor& y = ctx.output_uninit(0, DType::Float, x.shape());
          kernels::lrn_f32(ctx.pool(), x.data<float>(), y.data<float>(), N, C, S, lo, hi, alpha, beta, bias, size);
          return;
        }
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> ys(xs.size());
        for (int64_t b = 0; b < N; ++b)
          for (int64_t c = 0; c < C; ++c)
            for (int64_t k = 0; k < S; ++k) {
              double sq = 0;
              for (int64_t c2 = std::max<int64_t>(0, c - lo); c2 <= std::min(C - 1, c + hi); ++c2) {
                double v2 = xs[size_t((b * C + c2) * S + k)];
                sq += v2 * v2;
              }
              size_t i = size_t((b * C + c) * S + k);
              ys[i] = xs[i] / std::pow(double(bias) + double(alpha) / double(size) * sq, double(beta));
            }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }
}

static void register_lp_norm(OpRegistry& r) {
  // LpNormalization (p = 1 or 2) along one axis. A zero norm gives a zero output.
  for (int v : {1, 22}) {
    r.add("LpNormalization", v, [](const Node& n) {
      int64_t axis = n.attr_int("axis", -1);
      int64_t pw = n.attr_int("p", 2);
      if (pw != 1 && pw != 2) n.fail(ErrorCode::InvalidModel, "p must be 1 or 2, got " + std::to_string(pw));
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        int rank = x.rank();
        if (rank == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
        int ax = normalize_axis(ctx, axis, rank);
        std::vector<bool> red(size_t(rank), false);
        red[size_t(ax)] = true;
        ReducePlan p = make_plan(x.shape(), red, true);
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> ys(xs.size());
        for (int64_t base : p.base) {
          double nrm = 0;
          for (int64_t o : p.roff) {
            double v = xs[size_t(base + o)];
            nrm += pw == 1 ? std::fabs(v) : v * v;
          }
          if (pw == 2) nrm = std::sqrt(nrm);
          for (int64_t o : p.roff) ys[size_t(base + o)] = nrm == 0 ? 0.0 : xs[size_t(base + o)] / nrm;
        }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }
}

static void register_mvn(OpRegistry& r) {
  // MeanVarianceNormalization
  for (int v : {9, 13}) {
    r.add("MeanVarianceNormalization", v, [](const Node& n) {
      std::vector<int64_t> axes = n.attr_ints("axes", {0, 2, 3});
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        int rank = x.rank();
        std::vector<bool> red(size_t(rank), false);
        for (int64_t a : axes) {
          int d = normalize_axis(ctx, a, rank);
          red[size_t(d)] = true;
        }
        ReducePlan p = make_plan(x.shape(), red, true);
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> ys(xs.size());
        double R = double(p.roff.size());
        for (int64_t base : p.base) {
          double m = 0;
          for (int64_t o : p.roff) m += xs[size_t(base + o)];
          m = R > 0 ? m / R : 0;
          double q = 0;
          for (int64_t o : p.roff) q += (xs[size_t(base + o)] - m) * (xs[size_t(base + o)] - m);
          q = R > 0 ? q / R : 0;
          double sd = std::sqrt(q) + 1e-9;
          for (int64_t o : p.roff) ys[size_t(base + o)] = (xs[size_t(base + o)] - m) / sd;
        }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }
}

void register_norms(OpRegistry& r) {
  for (auto family : {register_layer_norm, register_rms_norm, register_batch_norm, register_instance_norm, register_group_norm, register_lrn, register_lp_norm, register_mvn}) family(r);
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  register_norms(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("BatchNormalization").infer_symbolic(shapes::batch_norm).in_place(in_place::batch_norm_f32);
  r.def("basalt", "FusedBatchNormalization").infer_symbolic(shapes::batch_norm).in_place(in_place::batch_norm_f32);
  r.def("LayerNormalization").infer(shapes::layer_norm).in_place(in_place::layer_norm_f32);
  for (const char* op : {"GroupNormalization", "InstanceNormalization", "LRN", "LpNormalization", "MeanVarianceNormalization", "RMSNormalization"}) r.def(op).infer_symbolic(shapes::same);
}

}  // namespace basalt
