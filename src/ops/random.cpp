// Random ops: RandomUniform[Like], RandomNormal[Like], Bernoulli, Multinomial. A `seed` attribute
// makes them deterministic; without one the generator is seeded from the OS.
#include "ops/common.hpp"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <regex>

namespace basalt {

namespace {

// A generator seeded from the `seed` attribute when given (deterministic), else from the OS.
struct SeedSpec {
  bool has = false;
  float seed = 0;
};
SeedSpec read_seed(const Node& n) {
  SeedSpec s;
  if (n.has_attr("seed")) {
    s.has = true;
    s.seed = n.attr_float("seed");
  }
  return s;
}
// set_default_random_seed: 0 bit 63 clear = not set.
std::atomic<uint64_t> g_default_seed{0};
constexpr uint64_t kSeedSet = uint64_t(1) << 63;

std::mt19937_64 make_gen(const SeedSpec& s) {
  if (s.has) {
    uint32_t bits;
    std::memcpy(&bits, &s.seed, 4);
    return std::mt19937_64(uint64_t(bits) * 0x9E3779B97F4A7C15ull + 12345);
  }
  if (uint64_t d = g_default_seed.load(std::memory_order_relaxed); d & kSeedSet)
    return std::mt19937_64((d & ~kSeedSet) * 0x9E3779B97F4A7C15ull + 67890);
  std::random_device rd;
  uint64_t a = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  return std::mt19937_64(a);
}

void check_random_float_dtype(const Node& n, DType dt) {
  if (dt != DType::Float && dt != DType::Double && dt != DType::Float16 && dt != DType::BFloat16)
    n.fail(ErrorCode::Unsupported, std::string("dtype ") + dtype_name(dt) + " is not supported (float types only)");
}

void fill_random(KernelContext& ctx, DType dt, const Shape& shape, const SeedSpec& seed, bool normal, double a, double b) {
  std::mt19937_64 gen = make_gen(seed);
  // The output first (its allocation refuses absurd sizes), then the values straight into it.
  Tensor& y = ctx.output(0, dt, shape);
  int64_t cnt = y.numel();
  if (!visit_numeric(y.dtype(), [&]<class T>() {
        T* p = y.data<T>();
        if (normal) {
          std::normal_distribution<double> d(a, b);
          for (int64_t i = 0; i < cnt; ++i) p[i] = cast_from_double<T>(d(gen));
        } else {
          std::uniform_real_distribution<double> d(a, b);
          for (int64_t i = 0; i < cnt; ++i) p[i] = cast_from_double<T>(d(gen));
        }
      }))
    ctx.fail(ErrorCode::Unsupported, std::string("output type ") + dtype_name(y.dtype()) + " is not supported");
}

// The `shape` attribute of RandomUniform/RandomNormal: non-negative dims whose product
// (checked for overflow) stays at most 2^40 elements.
Shape random_shape_attr(const Node& n) {
  Shape shape = n.attr_ints("shape");
  int64_t total = 1;
  for (int64_t d : shape) {
    if (d < 0) n.fail(ErrorCode::InvalidModel, "shape must not have negative dimensions");
    // (a running product, like Tensor's own check: once it is 0 the later dims cannot overflow it)
    if (total != 0 && (__builtin_mul_overflow(total, d, &total) || total > (int64_t(1) << 40)))
      n.fail(ErrorCode::InvalidModel, "attribute 'shape' " + shape_str(shape) + " has too many elements (more than 2^40)");
  }
  return shape;
}

}  // namespace

void register_random_ops(OpRegistry& r) {
  // ---- Random ----
  r.add("RandomUniform", 1, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Float);
    check_random_float_dtype(n, dt);
    double lo = n.attr_float("low", 0.0f), hi = n.attr_float("high", 1.0f);
    if (!(lo <= hi)) n.fail(ErrorCode::InvalidModel, "low must be <= high");
    Shape shape = random_shape_attr(n);
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) { fill_random(ctx, dt, shape, seed, false, lo, hi); });
  });
  r.add("RandomNormal", 1, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Float);
    check_random_float_dtype(n, dt);
    double mean = n.attr_float("mean", 0.0f), scale = n.attr_float("scale", 1.0f);
    if (!(scale > 0)) n.fail(ErrorCode::InvalidModel, "scale must be > 0");
    Shape shape = random_shape_attr(n);
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) { fill_random(ctx, dt, shape, seed, true, mean, scale); });
  });
  r.add("RandomUniformLike", 1, [](const Node& n) {
    bool has_dt = n.has_attr("dtype");
    DType dt = dtype_attr(n, "dtype", DType::Float);
    if (has_dt) check_random_float_dtype(n, dt);
    double lo = n.attr_float("low", 0.0f), hi = n.attr_float("high", 1.0f);
    if (!(lo <= hi)) n.fail(ErrorCode::InvalidModel, "low must be <= high");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType odt = has_dt ? dt : x.dtype();
      if (!dtype_is_float(odt) || dtype_size(odt) < 2) unsupported_dtype(ctx, 0, x.dtype());
      fill_random(ctx, odt, x.shape(), seed, false, lo, hi);
    });
  });
  r.add("RandomNormalLike", 1, [](const Node& n) {
    bool has_dt = n.has_attr("dtype");
    DType dt = dtype_attr(n, "dtype", DType::Float);
    if (has_dt) check_random_float_dtype(n, dt);
    double mean = n.attr_float("mean", 0.0f), scale = n.attr_float("scale", 1.0f);
    if (!(scale > 0)) n.fail(ErrorCode::InvalidModel, "scale must be > 0");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType odt = has_dt ? dt : x.dtype();
      if (!dtype_is_float(odt) || dtype_size(odt) < 2) unsupported_dtype(ctx, 0, x.dtype());
      fill_random(ctx, odt, x.shape(), seed, true, mean, scale);
    });
  });
  r.add("Bernoulli", 15, [](const Node& n) {
    bool has_dt = n.has_attr("dtype");
    DType dt = dtype_attr(n, "dtype", DType::Float);
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      std::vector<double> p = read_doubles(ctx, 0, x);
      DType odt = has_dt ? dt : x.dtype();
      std::mt19937_64 gen = make_gen(seed);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      for (double& v : p) {
        if (!(v >= 0.0 && v <= 1.0)) ctx.fail(ErrorCode::InvalidArgument, "probabilities must be in [0, 1]");
        v = u(gen) < v ? 1.0 : 0.0;
      }
      Tensor& y = ctx.output(0, odt, x.shape());
      if (odt == DType::Bool) {
        for (size_t i = 0; i < p.size(); ++i) y.data<bool>()[i] = p[i] != 0.0;
      } else {
        write_doubles(ctx, y, p);
      }
    });
  });
  r.add("Multinomial", 7, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Int32);
    if (dt != DType::Int32 && dt != DType::Int64) n.fail(ErrorCode::Unsupported, "dtype must be int32 or int64");
    int64_t samples = n.attr_int("sample_size", 1);
    if (samples < 0) n.fail(ErrorCode::InvalidModel, "sample_size must be >= 0");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be [batch_size, class_size], got " + shape_str(x.shape()));
      std::vector<double> logits = read_doubles(ctx, 0, x);
      int64_t B = x.dim(0), K = x.dim(1);
      if (K < 1) ctx.fail(ErrorCode::InvalidArgument, "class_size must be >= 1");
      std::mt19937_64 gen = make_gen(seed);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      Tensor& y = ctx.output(0, dt, {B, samples});
      std::vector<double> cdf(static_cast<size_t>(K));
      for (int64_t b = 0; b < B; ++b) {
        const double* l = logits.data() + b * K;
        double mx = -INFINITY;
        for (int64_t k = 0; k < K; ++k) {
          if (std::isnan(l[k]) || l[k] == INFINITY) ctx.fail(ErrorCode::InvalidArgument, "logits must not be NaN or +inf");
          mx = std::max(mx, l[k]);
        }
        if (mx == -INFINITY) ctx.fail(ErrorCode::InvalidArgument, "row " + std::to_string(b) + " has no class with non-zero probability");
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += std::exp(l[k] - mx);
          cdf[size_t(k)] = acc;
        }
        for (int64_t s = 0; s < samples; ++s) {
          double t = u(gen) * acc;
          int64_t k = int64_t(std::upper_bound(cdf.begin(), cdf.end(), t) - cdf.begin());
          if (k >= K) k = K - 1;
          if (dt == DType::Int32) y.data<int32_t>()[b * samples + s] = int32_t(k);
          else y.data<int64_t>()[b * samples + s] = k;
        }
      }
    });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Bernoulli").infer_symbolic(shapes::bernoulli);
  r.def("Multinomial").infer(shapes::multinomial);
  for (const char* op : {"RandomNormal", "RandomUniform"}) r.def(op).infer(shapes::random_tensor);
  for (const char* op : {"RandomNormalLike", "RandomUniformLike"}) r.def(op).infer_symbolic(shapes::random_like);
}

void set_default_random_seed(int64_t seed) {
  g_default_seed.store((uint64_t(seed) & ~kSeedSet) | kSeedSet, std::memory_order_relaxed);
}

}  // namespace basalt
