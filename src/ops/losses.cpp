// Losses: NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss.
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
// Losses
// ---------------------------------------------------------------------------------------------

enum class Red { None, Sum, Mean };

Red parse_reduction(const Node& n) {
  std::string s = n.attr_string("reduction", "mean");
  if (s == "none") return Red::None;
  if (s == "sum") return Red::Sum;
  if (s == "mean") return Red::Mean;
  n.fail(ErrorCode::InvalidModel, "reduction must be 'none', 'sum' or 'mean', got '" + s + "'");
}

// NLL core: logp (N, C, D) as doubles; target (N, D). Writes output 0.
void nll_compute(KernelContext& ctx, const std::vector<double>& logp, const Shape& in_shape, const Tensor& target,
                 int weight_input, bool has_ii, int64_t ii, Red red, DType out_dt) {
  if (in_shape.size() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got " + shape_str(in_shape));
  int64_t N = in_shape[0], C = in_shape[1], D = 1;
  for (size_t d = 2; d < in_shape.size(); ++d) D *= in_shape[d];
  Shape tshape = in_shape;
  tshape.erase(tshape.begin() + 1);
  if (target.shape() != tshape)
    ctx.fail(ErrorCode::InvalidArgument, "target shape " + shape_str(target.shape()) + " does not match expected " +
                                             shape_str(tshape));
  if (!dtype_is_integer(target.dtype())) unsupported_dtype(ctx, 1, target.dtype());
  std::vector<int64_t> t = target.to_int64_vector();
  std::vector<double> w;
  if (ctx.has_input(weight_input)) w = per_channel_param(ctx, weight_input, C, "weight");
  std::vector<double> loss(size_t(N * D), 0.0);
  double wsum = 0;
  for (int64_t b = 0; b < N; ++b)
    for (int64_t k = 0; k < D; ++k) {
      int64_t c = t[size_t(b * D + k)];
      if (has_ii && c == ii) continue;
      if (c < 0 || c >= C)
        ctx.fail(ErrorCode::InvalidArgument, "target value " + std::to_string(c) + " is out of range [0, " +
                                                 std::to_string(C) + ")");
      double wt = w.empty() ? 1.0 : w[size_t(c)];
      loss[size_t(b * D + k)] = -logp[size_t((b * C + c) * D + k)] * wt;
      wsum += wt;
    }
  if (red == Red::None) {
    from_dvec(ctx.output(0, out_dt, tshape), loss);
    return;
  }
  double s = 0;
  for (double v : loss) s += v;
  if (red == Red::Mean) s = wsum != 0 ? s / wsum : 0.0;
  from_dvec(ctx.output(0, out_dt, {}), {s});
}

void register_losses(OpRegistry& r) {
  for (int v : {12, 13, 22}) {
    r.add("NegativeLogLikelihoodLoss", v, [](const Node& n) {
      Red red = parse_reduction(n);
      bool has_ii = n.has_attr("ignore_index");
      int64_t ii = has_ii ? n.attr_int("ignore_index") : 0;
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        std::vector<double> xs = to_dvec(ctx, 0, x);
        nll_compute(ctx, xs, x.shape(), ctx.input(1), 2, has_ii, ii, red, x.dtype());
      });
    });
  }
  for (int v : {12, 13}) {
    r.add("SoftmaxCrossEntropyLoss", v, [](const Node& n) {
      Red red = parse_reduction(n);
      bool has_ii = n.has_attr("ignore_index");
      int64_t ii = has_ii ? n.attr_int("ignore_index") : 0;
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "scores must have rank >= 2, got " + shape_str(x.shape()));
        int64_t N = x.dim(0), C = x.dim(1), D = 1;
        for (int d = 2; d < x.rank(); ++d) D *= x.dim(d);
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> lp(xs.size());
        for (int64_t b = 0; b < N; ++b)
          for (int64_t k = 0; k < D; ++k) {
            double m = -std::numeric_limits<double>::infinity();
            for (int64_t c = 0; c < C; ++c) m = std::max(m, xs[size_t((b * C + c) * D + k)]);
            if (std::isinf(m)) m = 0;
            double s = 0;
            for (int64_t c = 0; c < C; ++c) s += std::exp(xs[size_t((b * C + c) * D + k)] - m);
            double ls = std::log(s);
            for (int64_t c = 0; c < C; ++c) {
              size_t i = size_t((b * C + c) * D + k);
              lp[i] = xs[i] - m - ls;
            }
          }
        nll_compute(ctx, lp, x.shape(), ctx.input(1), 2, has_ii, ii, red, x.dtype());
        if (ctx.has_output(1)) from_dvec(ctx.output(1, x.dtype(), x.shape()), lp);
      });
    });
  }
}

}  // namespace

void register_loss_ops(OpRegistry& r) {
  register_losses(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("NegativeLogLikelihoodLoss").infer(shapes::negative_log_likelihood_loss);
  r.def("SoftmaxCrossEntropyLoss").infer(shapes::softmax_cross_entropy_loss);
}

}  // namespace basalt
