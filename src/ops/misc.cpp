// Reference kernels: Identity, and the ai.onnx.preview.training optimizers (Adagrad, Momentum,
// Adam), which update tensors in a functional way (new tensors out, inputs untouched).
#include "ops/common.hpp"

#include <cmath>

namespace basalt {
namespace {

const char* kTraining = "ai.onnx.preview.training";

// Common frame of the optimizers: R (scalar learning rate), T (scalar step), then `groups`
// runs of n tensors each. fn(k, i, in[groups]) returns the new values for element i of tensor k.
template <class Fn>
void optimizer(KernelContext& ctx, int groups, int out_groups, Fn&& fn) {
  int rest = ctx.num_inputs() - 2;
  if (rest <= 0 || rest % groups) ctx.fail(ErrorCode::InvalidModel, "expects R, T and " + std::to_string(groups) + " groups of tensors");
  int n = rest / groups;
  double R = ctx.input(0).get_double(0);
  int64_t T = ctx.input(1).get_int(0);
  for (int k = 0; k < n; ++k) {
    const Tensor& X = ctx.input(2 + k);
    std::vector<const Tensor*> in(static_cast<size_t>(groups));
    for (int g = 0; g < groups; ++g) {
      in[size_t(g)] = &ctx.input(2 + g * n + k);
      if (in[size_t(g)]->shape() != X.shape()) ctx.fail(ErrorCode::InvalidArgument, "optimizer inputs must have the same shape");
      if (!dtype_is_float(in[size_t(g)]->dtype())) unsupported_dtype(ctx, 2 + g * n + k, in[size_t(g)]->dtype());
    }
    std::vector<Tensor*> out(static_cast<size_t>(out_groups));
    for (int g = 0; g < out_groups; ++g) out[size_t(g)] = &ctx.output(g * n + k, X.dtype(), X.shape());
    std::vector<double> vals(static_cast<size_t>(groups)), res(static_cast<size_t>(out_groups));
    for (int64_t i = 0; i < X.numel(); ++i) {
      for (int g = 0; g < groups; ++g) vals[size_t(g)] = in[size_t(g)]->get_double(i);
      fn(R, T, vals, res);
      for (int g = 0; g < out_groups; ++g) {
        Tensor& o = *out[size_t(g)];
        if (o.dtype() == DType::Double) o.data<double>()[i] = res[size_t(g)];
        else if (o.dtype() == DType::Float) o.data<float>()[i] = float(res[size_t(g)]);
        else if (o.dtype() == DType::Float16) o.data<float16>()[i] = float16(float(res[size_t(g)]));
        else o.data<bfloat16>()[i] = bfloat16(float(res[size_t(g)]));
      }
    }
  }
}

}  // namespace

void register_misc_ops(OpRegistry& r) {
  // Identity passes its input through without a copy (tensors are immutable once produced).
  r.add("Identity", 1, [](const Node&) {
    return kernel([](KernelContext& ctx) { ctx.set_output(0, ctx.input_value(0)); });
  });

  // basalt::SumToShape(G, Like): sums G over the axes along which Like was broadcast, giving
  // Like's shape (used by the Gradient expansion to undo broadcasting).
  r.add("basalt", "SumToShape", 1, INT_MAX, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& g = ctx.input(0);
      const Shape& ls = ctx.input(1).shape();
      Shape full = broadcast_shapes(ctx, g.shape(), ls);
      if (full != g.shape())
        ctx.fail(ErrorCode::InvalidArgument, "shape " + shape_str(ls) + " does not broadcast to " + shape_str(g.shape()));
      Tensor& y = ctx.output(0, g.dtype(), ls);
      std::vector<int64_t> st[2] = {broadcast_strides(g.shape(), full), broadcast_strides(ls, full)};
      if (!visit_float(g.dtype(), [&]<class T>() {
            std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
            const T* a = g.data<T>();
            for_each_broadcast(full, st, [&](int64_t, const int64_t* off) { acc[size_t(off[1])] += double(a[off[0]]); });
            for (size_t i = 0; i < acc.size(); ++i) {
              if constexpr (std::is_same_v<T, double>) y.data<T>()[i] = acc[i];
              else y.data<T>()[i] = T(float(acc[i]));
            }
          }))
        unsupported_dtype(ctx, 0, g.dtype());
    });
  });

  r.add(kTraining, "Adagrad", 1, INT_MAX, [](const Node& n) {
    double decay = n.attr_float("decay_factor", 0.0f), eps = n.attr_float("epsilon", 1e-6f),
           norm = n.attr_float("norm_coefficient", 0.0f);
    return kernel([=](KernelContext& ctx) {
      optimizer(ctx, 3, 2, [&](double R, int64_t T, const std::vector<double>& v, std::vector<double>& o) {
        double rr = R / (1 + double(T) * decay);
        double g = norm * v[0] + v[1];
        double h = v[2] + g * g;
        o[0] = v[0] - rr * g / (std::sqrt(h) + eps);
        o[1] = h;
      });
    });
  });
  r.add(kTraining, "Momentum", 1, INT_MAX, [](const Node& n) {
    double alpha = n.attr_float("alpha"), beta = n.attr_float("beta"), norm = n.attr_float("norm_coefficient");
    std::string mode = n.attr_string("mode");
    if (mode != "standard" && mode != "nesterov") n.fail(ErrorCode::InvalidModel, "mode must be 'standard' or 'nesterov', got '" + mode + "'");
    bool nesterov = mode == "nesterov";
    return kernel([=](KernelContext& ctx) {
      optimizer(ctx, 3, 2, [&](double R, int64_t T, const std::vector<double>& v, std::vector<double>& o) {
        double g = norm * v[0] + v[1];
        double b = T > 0 ? beta : 1.0;
        double vn = alpha * v[2] + b * g;
        o[0] = nesterov ? v[0] - R * (g + alpha * vn) : v[0] - R * vn;
        o[1] = vn;
      });
    });
  });
  r.add(kTraining, "Adam", 1, INT_MAX, [](const Node& n) {
    double alpha = n.attr_float("alpha", 0.9f), beta = n.attr_float("beta", 0.999f), eps = n.attr_float("epsilon", 1e-6f),
           norm = n.attr_float("norm_coefficient", 0.0f), post = n.attr_float("norm_coefficient_post", 0.0f);
    return kernel([=](KernelContext& ctx) {
      optimizer(ctx, 4, 3, [&](double R, int64_t T, const std::vector<double>& v, std::vector<double>& o) {
        double g = norm * v[0] + v[1];
        double vn = alpha * v[2] + (1 - alpha) * g;
        double hn = beta * v[3] + (1 - beta) * g * g;
        double hs = std::sqrt(hn) + eps;
        double ra = T > 0 ? R * std::sqrt(1 - std::pow(beta, double(T))) / (1 - std::pow(alpha, double(T))) : R;
        o[0] = (1 - post) * (v[0] - ra * (vn / hs));
        o[1] = vn;
        o[2] = hn;
      });
    });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Identity").infer_symbolic(shapes::same).alias(Alias::View);
  r.def("basalt", "SumToShape").data_dependent_shape();
  r.def(kTraining, "Adagrad").infer_symbolic(shapes::adagrad);
  r.def(kTraining, "Adam").infer_symbolic(shapes::adam);
  r.def(kTraining, "Momentum").infer_symbolic(shapes::momentum);
}

}  // namespace basalt
