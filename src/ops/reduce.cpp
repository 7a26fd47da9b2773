// Reference kernels: reductions, softmax family, normalizations, losses, Einsum, Det.
#include "ops/common.hpp"

#include "kernels/activation.hpp"
#include "kernels/eltwise.hpp"
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
// Small helpers
// ---------------------------------------------------------------------------------------------

bool is_float_like(DType dt) {
  return dt == DType::Float || dt == DType::Double || dt == DType::Float16 || dt == DType::BFloat16;
}

// Any numeric tensor as doubles.
std::vector<double> to_dvec(const KernelContext& ctx, int input, const Tensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  if (!visit_numeric(t.dtype(), [&]<class T>() {
        const T* a = t.data<T>();
        for (size_t i = 0; i < v.size(); ++i) v[i] = double(a[i]);
      }))
    unsupported_dtype(ctx, input, t.dtype());
  return v;
}

// Write doubles into a numeric tensor (already allocated, numel must match).
void from_dvec(Tensor& t, const std::vector<double>& v) {
  visit_numeric(t.dtype(), [&]<class T>() {
    T* a = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) {
      if constexpr (std::is_integral_v<T>) {
        double d = v[i];
        if (std::isnan(d)) d = 0;
        a[i] = T(d);
      } else {
        a[i] = T(v[i]);
      }
    }
  });
}

// LRN on float32 NCHW data: y = x / (bias + alpha/size * sum of x^2 over channels [c-lo, c+hi])^beta.
// Work is split over (image, block of kLrnBlock spatial positions); per channel the window sum is
// taken directly (no running sum, whose subtractions would cancel), then the power: beta 0.75
// (GoogLeNet, AlexNet) as 1 / (sqrt(b) * sqrt(sqrt(b))) and beta 0.5 as 1 / sqrt(b) with the
// vectorized square root, any other beta with powf. Float accumulation: relative error ~1e-6
// against the double reference (checked by kernels_vec_test.cpp).
void lrn_f32(ThreadPool* pool, const float* x, float* y, int64_t N, int64_t C, int64_t S, int64_t lo, int64_t hi,
             float alpha, float beta, float bias, int64_t size) {
  constexpr int64_t kLrnBlock = 256;
  const int64_t blocks = (S + kLrnBlock - 1) / kLrnBlock;
  if (N * C * S == 0) return;
  const float a_n = float(double(alpha) / double(size));
  const kernels::VecOps& vec = kernels::vec_ops();
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, C * std::min(S, kLrnBlock) * (hi + lo + 4)) );
  parallel_for(pool, N * blocks, grain, [&](int64_t t0, int64_t t1) {
    float acc[kLrnBlock], r1[kLrnBlock], r2[kLrnBlock];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / blocks, k0 = (t % blocks) * kLrnBlock, len = std::min(kLrnBlock, S - k0);
      const float* xb = x + b * C * S + k0;
      float* yb = y + b * C * S + k0;
      for (int64_t c = 0; c < C; ++c) {
        const int64_t c_lo = std::max<int64_t>(0, c - lo), c_hi = std::min(C - 1, c + hi);
        for (int64_t k = 0; k < len; ++k) acc[k] = 0.0f;
        for (int64_t c2 = c_lo; c2 <= c_hi; ++c2) {
          const float* p = xb + c2 * S;
          for (int64_t k = 0; k < len; ++k) acc[k] += p[k] * p[k];
        }
        for (int64_t k = 0; k < len; ++k) acc[k] = bias + a_n * acc[k];
        const float* xc = xb + c * S;
        float* yc = yb + c * S;
        if (beta == 0.75f) {
          vec.unary(kernels::UnaryOp::Sqrt, {}, acc, r1, len);
          vec.unary(kernels::UnaryOp::Sqrt, {}, r1, r2, len);
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] / (r1[k] * r2[k]);
        } else if (beta == 0.5f) {
          vec.unary(kernels::UnaryOp::Sqrt, {}, acc, r1, len);
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] / r1[k];
        } else if (beta == 1.0f) {
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] / acc[k];
        } else {
          for (int64_t k = 0; k < len; ++k) yc[k] = xc[k] * std::pow(acc[k], -beta);
        }
      }
    }
  });
}

void require_float(const KernelContext& ctx, int input, DType dt) {
  if (!is_float_like(dt)) unsupported_dtype(ctx, input, dt);
}

// ---------------------------------------------------------------------------------------------
// Reduce*
// ---------------------------------------------------------------------------------------------

enum class RK { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

struct ReducePlan {
  Shape out_shape;
  std::vector<int64_t> base;  // per output element: offset of its first input element
  std::vector<int64_t> roff;  // offsets of the reduced elements relative to base
};

// Enumerate all offsets of an index space given dims and strides (odometer).
std::vector<int64_t> enumerate_offsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides) {
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  std::vector<int64_t> out;
  if (total == 0) return out;
  out.reserve(size_t(total));
  std::vector<int64_t> idx(dims.size(), 0);
  int64_t off = 0;
  for (int64_t i = 0; i < total; ++i) {
    out.push_back(off);
    for (size_t d = dims.size(); d-- > 0;) {
      if (++idx[d] < dims[d]) {
        off += strides[d];
        break;
      }
      off -= strides[d] * (dims[d] - 1);
      idx[d] = 0;
    }
  }
  return out;
}

ReducePlan make_plan(const Shape& in, const std::vector<bool>& reduced, bool keepdims) {
  ReducePlan p;
  auto st = shape_strides(in);
  std::vector<int64_t> kd, ks, rd, rs;
  for (size_t d = 0; d < in.size(); ++d) {
    if (reduced[d]) {
      rd.push_back(in[d]);
      rs.push_back(st[d]);
      if (keepdims) p.out_shape.push_back(1);
    } else {
      kd.push_back(in[d]);
      ks.push_back(st[d]);
      p.out_shape.push_back(in[d]);
    }
  }
  p.base = enumerate_offsets(kd, ks);
  p.roff = enumerate_offsets(rd, rs);
  return p;
}

template <class T>
void reduce_typed(RK kind, const Tensor& x, const ReducePlan& p, Tensor& y) {
  const T* a = x.data<T>();
  T* b = y.data<T>();
  const int64_t R = int64_t(p.roff.size());
  for (size_t o = 0; o < p.base.size(); ++o) {
    const T* s = a + p.base[o];
    if constexpr (std::is_same_v<T, bool>) {
      bool r = kind == RK::Min;  // identity: Max -> false, Min -> true
      for (int64_t k = 0; k < R; ++k) r = kind == RK::Max ? (r || s[p.roff[size_t(k)]]) : (r && s[p.roff[size_t(k)]]);
      b[o] = r;
    } else if constexpr (std::is_integral_v<T>) {
      using A = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
      if (kind == RK::Max || kind == RK::Min) {
        T m = kind == RK::Max ? std::numeric_limits<T>::lowest() : std::numeric_limits<T>::max();
        for (int64_t k = 0; k < R; ++k) {
          T v = s[p.roff[size_t(k)]];
          if (kind == RK::Max ? v > m : v < m) m = v;
        }
        b[o] = m;
      } else if (kind == RK::Sum || kind == RK::Prod || kind == RK::SumSquare || kind == RK::L1) {
        A acc = kind == RK::Prod ? A(1) : A(0);
        for (int64_t k = 0; k < R; ++k) {
          A v = A(s[p.roff[size_t(k)]]);
          switch (kind) {
            case RK::Sum: acc = A(uint64_t(acc) + uint64_t(v)); break;
            case RK::Prod: acc = A(uint64_t(acc) * uint64_t(v)); break;
            case RK::SumSquare: acc = A(uint64_t(acc) + uint64_t(v) * uint64_t(v)); break;
            default: acc = A(uint64_t(acc) + uint64_t(v < A(0) ? A(0) - v : v)); break;
          }
        }
        b[o] = T(acc);
      } else {
        double acc = 0, m = -std::numeric_limits<double>::infinity();
        if (kind == RK::LogSumExp)
          for (int64_t k = 0; k < R; ++k) m = std::max(m, double(s[p.roff[size_t(k)]]));
        for (int64_t k = 0; k < R; ++k) {
          double v = double(s[p.roff[size_t(k)]]);
          switch (kind) {
            case RK::Mean: case RK::LogSum: acc += v; break;
            case RK::L2: acc += v * v; break;
            default: acc += std::exp(v - m); break;
          }
        }
        double r;
        switch (kind) {
          case RK::Mean: r = R ? acc / double(R) : 0; break;
          case RK::L2: r = std::sqrt(acc); break;
          case RK::LogSum: r = std::log(acc); break;
          default: r = std::isinf(m) ? m : std::log(acc) + m; break;
        }
        if (std::isnan(r) || std::isinf(r)) r = 0;
        b[o] = T(r);
      }
    } else {
      // floating types: accumulate in double
      double acc;
      switch (kind) {
        case RK::Max: acc = -std::numeric_limits<double>::infinity(); break;
        case RK::Min: acc = std::numeric_limits<double>::infinity(); break;
        case RK::Prod: acc = 1; break;
        default: acc = 0; break;
      }
      double m = -std::numeric_limits<double>::infinity();
      if (kind == RK::LogSumExp)
        for (int64_t k = 0; k < R; ++k) {
          double v = double(s[p.roff[size_t(k)]]);
          if (v > m || std::isnan(v)) m = v;
        }
      for (int64_t k = 0; k < R; ++k) {
        double v = double(s[p.roff[size_t(k)]]);
        switch (kind) {
          case RK::Sum: case RK::Mean: case RK::LogSum: acc += v; break;
          case RK::Max: if (v > acc || std::isnan(v)) acc = std::isnan(acc) ? acc : v; break;
          case RK::Min: if (v < acc || std::isnan(v)) acc = std::isnan(acc) ? acc : v; break;
          case RK::Prod: acc *= v; break;
          case RK::L1: acc += std::fabs(v); break;
          case RK::L2: case RK::SumSquare: acc += v * v; break;
          case RK::LogSumExp: acc += std::exp(v - m); break;
        }
      }
      switch (kind) {
        case RK::Mean: acc = acc / double(R); break;
        case RK::L2: acc = std::sqrt(acc); break;
        case RK::LogSum: acc = std::log(acc); break;
        case RK::LogSumExp: acc = (std::isinf(m) || std::isnan(m)) ? m : std::log(acc) + m; break;
        default: break;
      }
      b[o] = T(acc);
    }
  }
}

// float32 fast path of the reductions for the layouts real models use: after dropping size-1
// dims and merging neighbours, the input is [outer, R, inner] with the R axis reduced and outer /
// inner kept (either may be absent). Rows are read directly with strides instead of through the
// offset lists of ReducePlan (which cost an allocation and an indirect load per element). Sums
// accumulate in double as the reference does; Max/Min use the reference's comparisons, so a NaN
// is kept. Returns false (nothing written) for other layouts, kinds, or empty tensors.
bool reduce_f32_fast(KernelContext& ctx, RK kind, const Tensor& x, const std::vector<bool>& reduced,
                     const Shape& out_shape) {
  if (x.dtype() != DType::Float || x.numel() == 0) return false;
  switch (kind) {
    case RK::Sum: case RK::Mean: case RK::SumSquare: case RK::L1: case RK::L2: case RK::Max: case RK::Min: break;
    default: return false;
  }
  std::vector<std::pair<bool, int64_t>> groups;  // (reduced, merged size), size-1 dims dropped
  for (int d = 0; d < x.rank(); ++d) {
    if (x.dim(d) == 1) continue;
    if (!groups.empty() && groups.back().first == reduced[size_t(d)]) groups.back().second *= x.dim(d);
    else groups.push_back({reduced[size_t(d)], x.dim(d)});
  }
  int64_t outer = 1, R = 1, inner = 1;
  size_t g = 0;
  if (g < groups.size() && !groups[g].first) outer = groups[g++].second;
  if (g < groups.size() && groups[g].first) R = groups[g++].second;
  if (g < groups.size() && !groups[g].first) inner = groups[g++].second;
  if (g != groups.size() || R == 1) return false;
  Tensor& y = ctx.output_uninit(0, DType::Float, out_shape);
  const float* xd = x.data<float>();
  float* yd = y.data<float>();
  const bool is_max = kind == RK::Max, is_min = kind == RK::Min;
  auto term = [kind](double v) {
    switch (kind) {
      case RK::SumSquare: case RK::L2: return v * v;
      case RK::L1: return std::fabs(v);
      default: return v;
    }
  };
  auto finish = [kind, R](double acc) {
    switch (kind) {
      case RK::Mean: return float(acc / double(R));
      case RK::L2: return float(std::sqrt(acc));
      default: return float(acc);
    }
  };
  // Reference comparisons (reduce_typed): a NaN replaces the running value once and then stays.
  auto pick = [is_max](double acc, double v) {
    if (is_max ? (v > acc || std::isnan(v)) : (v < acc || std::isnan(v))) return std::isnan(acc) ? acc : v;
    return acc;
  };
  const double init = is_max ? -std::numeric_limits<double>::infinity()
                             : is_min ? std::numeric_limits<double>::infinity() : 0.0;
  if (inner == 1) {
    // [outer, R]: one contiguous row per output.
    const int64_t grain = std::max<int64_t>(1, 32768 / R);
    parallel_for(ctx.pool(), outer, grain, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        const float* s = xd + o * R;
        if (is_max || is_min) {
          double acc = init;
          for (int64_t k = 0; k < R; ++k) acc = pick(acc, double(s[k]));
          yd[o] = float(acc);
        } else {
          double a[4] = {0, 0, 0, 0};  // four chains, summed in a fixed order
          int64_t k = 0;
          for (; k + 4 <= R; k += 4)
            for (int j = 0; j < 4; ++j) a[j] += term(double(s[k + j]));
          for (; k < R; ++k) a[0] += term(double(s[k]));
          yd[o] = finish((a[0] + a[1]) + (a[2] + a[3]));
        }
      }
    });
    return true;
  }
  // [outer, R, inner]: accumulate R rows of `inner` contiguous values, split over (outer, inner
  // blocks of 256).
  constexpr int64_t kBlk = 256;
  const int64_t blocks = (inner + kBlk - 1) / kBlk;
  const int64_t grain = std::max<int64_t>(1, 32768 / (R * std::min(inner, kBlk)));
  parallel_for(ctx.pool(), outer * blocks, grain, [&](int64_t t0, int64_t t1) {
    double acc[kBlk];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t o = t / blocks, i0 = (t % blocks) * kBlk, n = std::min(kBlk, inner - i0);
      for (int64_t i = 0; i < n; ++i) acc[i] = init;
      for (int64_t k = 0; k < R; ++k) {
        const float* s = xd + (o * R + k) * inner + i0;
        if (is_max || is_min)
          for (int64_t i = 0; i < n; ++i) acc[i] = pick(acc[i], double(s[i]));
        else
          for (int64_t i = 0; i < n; ++i) acc[i] += term(double(s[i]));
      }
      float* d = yd + o * inner + i0;
      for (int64_t i = 0; i < n; ++i) d[i] = (is_max || is_min) ? float(acc[i]) : finish(acc[i]);
    }
  });
  return true;
}

void register_reduce(OpRegistry& r, const char* name, RK kind, std::initializer_list<int> versions, int input_since) {
  for (int v : versions) {
    r.add(name, v, [kind, input_since](const Node& n) {
      bool axes_input = n.opset >= input_since;
      bool keepdims = n.attr_int("keepdims", 1) != 0;
      bool noop = axes_input && n.attr_int("noop_with_empty_axes", 0) != 0;
      std::vector<int64_t> attr_axes;
      bool has_attr_axes = false;
      if (!axes_input && n.has_attr("axes")) {
        attr_axes = n.attr_ints("axes");
        has_attr_axes = true;
      }
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        int rank = x.rank();
        std::vector<int64_t> axes = attr_axes;
        bool have_axes = has_attr_axes;
        if (axes_input && ctx.has_input(1)) {
          const Tensor& at = ctx.input(1);
          if (at.dtype() != DType::Int64 && at.dtype() != DType::Int32)
            ctx.fail(ErrorCode::InvalidArgument, "axes input must be int64");
          if (at.rank() > 1) ctx.fail(ErrorCode::InvalidArgument, "axes input must be 1-D");
          axes = at.to_int64_vector();
          have_axes = true;
        }
        std::vector<bool> reduced(size_t(rank), false);
        if (!have_axes || axes.empty()) {
          if (!noop) std::fill(reduced.begin(), reduced.end(), true);
        } else {
          for (int64_t a : axes) {
            if (a < -rank || a >= rank)
              ctx.fail(ErrorCode::InvalidArgument,
                       "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
            int d = int(a < 0 ? a + rank : a);
            if (reduced[size_t(d)]) ctx.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(a) + " is repeated");
            reduced[size_t(d)] = true;
          }
        }
        if (x.dtype() == DType::Float) {
          Shape os;
          for (int d = 0; d < rank; ++d)
            if (!reduced[size_t(d)]) os.push_back(x.dim(d));
            else if (keepdims) os.push_back(1);
          if (reduce_f32_fast(ctx, kind, x, reduced, os)) return;
        }
        ReducePlan p = make_plan(x.shape(), reduced, keepdims);
        Tensor& y = ctx.output(0, x.dtype(), p.out_shape);
        bool ok;
        if (x.dtype() == DType::Bool) {
          ok = kind == RK::Max || kind == RK::Min;
          if (ok) reduce_typed<bool>(kind, x, p, y);
        } else {
          ok = visit_numeric(x.dtype(), [&]<class T>() { reduce_typed<T>(kind, x, p, y); });
        }
        if (!ok) unsupported_dtype(ctx, 0, x.dtype());
      });
    });
  }
}

// ---------------------------------------------------------------------------------------------
// Softmax / LogSoftmax / Hardmax
// ---------------------------------------------------------------------------------------------

enum class SM { Softmax, LogSoftmax, Hardmax };

void register_softmax(OpRegistry& r, const char* name, SM kind) {
  for (int v : {1, 11, 13}) {
    r.add(name, v, [kind](const Node& n) {
      bool old = n.opset < 13;
      int64_t axis = n.attr_int("axis", old ? 1 : -1);
      return kernel([=](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        int rank = x.rank();
        int64_t outer = 1, dim = 1, inner = 1;
        if (rank == 0) {
          if (axis != 0 && axis != -1) normalize_axis(ctx, axis, rank);
        } else {
          int ax = normalize_axis(ctx, axis, rank);
          for (int d = 0; d < ax; ++d) outer *= x.dim(d);
          if (old) {
            for (int d = ax; d < rank; ++d) dim *= x.dim(d);
          } else {
            dim = x.dim(ax);
            for (int d = ax + 1; d < rank; ++d) inner *= x.dim(d);
          }
        }
        if (kind != SM::Hardmax && x.dtype() == DType::Float && inner == 1 && dim > 0) {
          // Contiguous rows: the vectorized kernel, rows split over the pool.
          Tensor& y = ctx.output_uninit(0, x.dtype(), x.shape());
          kernels::softmax_rows_f32(ctx.pool(), x.data<float>(), y.data<float>(), outer, dim, kind == SM::LogSoftmax);
          return;
        }
        Tensor& y = ctx.output(0, x.dtype(), x.shape());
        visit_float(x.dtype(), [&]<class T>() {
          const T* a = x.data<T>();
          T* b = y.data<T>();
          std::vector<double> buf(static_cast<size_t>(dim));
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              int64_t base = o * dim * inner + i;
              if (dim == 0) continue;
              double m = -std::numeric_limits<double>::infinity();
              int64_t arg = 0;
              for (int64_t k = 0; k < dim; ++k) {
                double v = double(a[base + k * inner]);
                buf[size_t(k)] = v;
                if (v > m) {
                  m = v;
                  arg = k;
                }
              }
              if (kind == SM::Hardmax) {
                for (int64_t k = 0; k < dim; ++k) b[base + k * inner] = T(k == arg ? 1.0 : 0.0);
                continue;
              }
              if (std::isinf(m)) m = 0;
              double sum = 0;
              for (int64_t k = 0; k < dim; ++k) sum += std::exp(buf[size_t(k)] - m);
              for (int64_t k = 0; k < dim; ++k) {
                double r = kind == SM::Softmax ? std::exp(buf[size_t(k)] - m) / sum : buf[size_t(k)] - m - std::log(sum);
                b[base + k * inner] = T(r);
              }
            }
        });
      });
    });
  }
}

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

std::vector<double> per_channel_param(const KernelContext& ctx, int input, int64_t C, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != C)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must have " + std::to_string(C) +
                                             " elements (one per channel), got shape " + shape_str(t.shape()));
  return to_dvec(ctx, input, t);
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

void register_norms(OpRegistry& r) {
  // LayerNormalization-17
  r.add("LayerNormalization", 17, [](const Node& n) {
    int64_t axis = n.attr_int("axis", -1);
    float eps = n.attr_float("epsilon", 1e-5f);
    int64_t stash = n.attr_int("stash_type", 1);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      require_float(ctx, 0, x.dtype());
      int rank = x.rank();
      if (rank == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
      int ax = normalize_axis(ctx, axis, rank);
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < ax; ++d) outer *= x.dim(d);
      for (int d = ax; d < rank; ++d) inner *= x.dim(d);
      if (layernorm_fast(ctx, x, ax, outer, inner, eps, stash)) return;
      std::vector<double> xs = to_dvec(ctx, 0, x);
      std::vector<double> sc = broadcast_param(ctx, 1, x.shape());
      std::vector<double> bi;
      if (ctx.has_input(2)) bi = broadcast_param(ctx, 2, x.shape());
      Shape stat_shape = x.shape();
      for (int d = ax; d < rank; ++d) stat_shape[size_t(d)] = 1;
      std::vector<double> ys(xs.size()), means(static_cast<size_t>(outer)), invs(static_cast<size_t>(outer));
      for (int64_t o = 0; o < outer; ++o) {
        const double* p = xs.data() + o * inner;
        double mean = 0;
        for (int64_t k = 0; k < inner; ++k) mean += p[k];
        mean /= double(inner);
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
      DType sd = stash_dtype(stash, x.dtype());
      if (ctx.has_output(1)) from_dvec(ctx.output(1, sd, stat_shape), means);
      if (ctx.has_output(2)) from_dvec(ctx.output(2, sd, stat_shape), invs);
    });
  });

  // RMSNormalization-23
  r.add("RMSNormalization", 23, [](const Node& n) {
    int64_t axis = n.attr_int("axis", -1);
    float eps = n.attr_float("epsilon", 1e-5f);
    (void)n.attr_int("stash_type", 1);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      require_float(ctx, 0, x.dtype());
      int rank = x.rank();
      if (rank == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
      int ax = normalize_axis(ctx, axis, rank);
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < ax; ++d) outer *= x.dim(d);
      for (int d = ax; d < rank; ++d) inner *= x.dim(d);
      std::vector<double> xs = to_dvec(ctx, 0, x);
      std::vector<double> sc = broadcast_param(ctx, 1, x.shape());
      std::vector<double> ys(xs.size());
      for (int64_t o = 0; o < outer; ++o) {
        const double* p = xs.data() + o * inner;
        double ms = 0;
        for (int64_t k = 0; k < inner; ++k) ms += p[k] * p[k];
        ms /= double(inner);
        double inv = 1.0 / std::sqrt(ms + double(eps));
        for (int64_t k = 0; k < inner; ++k) {
          size_t i = size_t(o * inner + k);
          ys[i] = p[k] * inv * sc[i];
        }
      }
      from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
    });
  });

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
            double m = 0;
            for (int64_t k = 0; k < S; ++k) m += p[k];
            m = S ? m / double(S) : 0;
            double q = 0;
            for (int64_t k = 0; k < S; ++k) q += (p[k] - m) * (p[k] - m);
            q = S ? q / double(S) : 0;
            double inv = 1.0 / std::sqrt(q + double(eps));
            for (int64_t k = 0; k < S; ++k)
              ys[size_t((b * C + c) * S + k)] = (p[k] - m) * inv * sc[size_t(c)] + bi[size_t(c)];
          }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }

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
            double m = 0;
            for (int64_t k = 0; k < gs; ++k) m += p[k];
            m = gs ? m / double(gs) : 0;
            double q = 0;
            for (int64_t k = 0; k < gs; ++k) q += (p[k] - m) * (p[k] - m);
            q = gs ? q / double(gs) : 0;
            double inv = 1.0 / std::sqrt(q + double(eps));
            for (int64_t k = 0; k < gs; ++k) {
              int64_t c = g * cpg + k / (S ? S : 1);
              ys[size_t((b * C + g * cpg) * S + k)] = (p[k] - m) * inv * sc[size_t(c)] + bi[size_t(c)];
            }
          }
        from_dvec(ctx.output(0, x.dtype(), x.shape()), ys);
      });
    });
  }

  // LRN. float32: lrn_f32 (below); other float types: the double reference loop.
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
          lrn_f32(ctx.pool(), x.data<float>(), y.data<float>(), N, C, S, lo, hi, alpha, beta, bias, size);
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

// ---------------------------------------------------------------------------------------------
// Einsum
// ---------------------------------------------------------------------------------------------

struct EinsumSpec {
  std::vector<std::string> inputs;  // terms, ellipsis kept as "..."
  std::string output;
  bool explicit_output = false;
};

EinsumSpec parse_einsum(const Node& n, const std::string& eq_raw) {
  std::string eq;
  for (char c : eq_raw)
    if (c != ' ' && c != '\t') eq += c;
  EinsumSpec s;
  std::string lhs = eq;
  size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    s.output = eq.substr(arrow + 2);
    s.explicit_output = true;
  }
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    s.inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto check_term = [&](const std::string& t) {
    size_t e = t.find("...");
    if (e != std::string::npos && t.find("...", e + 3) != std::string::npos)
      n.fail(ErrorCode::InvalidModel, "equation '" + eq_raw + "' has more than one ellipsis in a term");
    for (size_t i = 0; i < t.size(); ++i) {
      if (e != std::string::npos && i >= e && i < e + 3) continue;
      if (!std::isalpha(static_cast<unsigned char>(t[i])))
        n.fail(ErrorCode::InvalidModel, "equation '" + eq_raw + "' has an invalid character '" + t[i] + "'");
    }
  };
  for (auto& t : s.inputs) check_term(t);
  if (s.explicit_output) check_term(s.output);
  return s;
}

// Label list for a term: letters as their char code (>= 0), ellipsis dims as -1-k (k = position within
// the broadcast ellipsis, counted so that ellipsis dims are right-aligned across inputs).
std::vector<int> term_labels(const KernelContext& ctx, const std::string& term, int rank, int ell_rank, bool is_output,
                             int* my_ell) {
  std::vector<int> labels;
  size_t e = term.find("...");
  int letters = int(term.size()) - (e == std::string::npos ? 0 : 3);
  int ne = 0;
  if (e == std::string::npos) {
    if (!is_output && letters != rank)
      ctx.fail(ErrorCode::InvalidArgument, "einsum term '" + term + "' has " + std::to_string(letters) +
                                               " labels but the input has rank " + std::to_string(rank));
  } else {
    ne = is_output ? ell_rank : rank - letters;
    if (ne < 0)
      ctx.fail(ErrorCode::InvalidArgument, "einsum term '" + term + "' has more labels than the input rank " +
                                               std::to_string(rank));
  }
  if (my_ell) *my_ell = ne;
  for (size_t i = 0; i < term.size(); ++i) {
    if (e != std::string::npos && i == e) {
      for (int k = 0; k < ne; ++k) labels.push_back(-1 - (ell_rank - ne + k));
      i += 2;
      continue;
    }
    labels.push_back(int(static_cast<unsigned char>(term[i])));
  }
  return labels;
}

void register_einsum(OpRegistry& r) {
  r.add("Einsum", 12, [](const Node& n) {
    std::string eq = n.attr_string("equation");
    EinsumSpec spec = parse_einsum(n, eq);
    return kernel([=](KernelContext& ctx) {
      int ni = ctx.num_inputs();
      if (ni != int(spec.inputs.size()))
        ctx.fail(ErrorCode::InvalidArgument, "equation has " + std::to_string(spec.inputs.size()) + " terms but the node has " +
                                                 std::to_string(ni) + " inputs");
      DType dt = ctx.input(0).dtype();
      for (int i = 0; i < ni; ++i) {
        if (ctx.input(i).dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "all inputs must have the same type");
      }
      if (dt == DType::Bool || !visit_numeric(dt, []<class T>() {})) unsupported_dtype(ctx, 0, dt);
      // ellipsis rank
      int ell_rank = 0;
      for (int i = 0; i < ni; ++i) {
        const std::string& t = spec.inputs[size_t(i)];
        size_t e = t.find("...");
        if (e != std::string::npos) ell_rank = std::max(ell_rank, ctx.input(i).rank() - int(t.size() - 3));
      }
      std::vector<std::vector<int>> in_labels(static_cast<size_t>(ni));
      std::map<int, int64_t> size;  // label -> dim
      std::map<int, int> count;
      for (int i = 0; i < ni; ++i) {
        const Tensor& x = ctx.input(i);
        in_labels[size_t(i)] = term_labels(ctx, spec.inputs[size_t(i)], x.rank(), ell_rank, false, nullptr);
        for (int d = 0; d < x.rank(); ++d) {
          int l = in_labels[size_t(i)][size_t(d)];
          int64_t dim = x.dim(d);
          ++count[l];
          auto it = size.find(l);
          if (it == size.end()) {
            size[l] = dim;
          } else if (it->second != dim) {
            if (l < 0 && dim == 1) continue;
            if (l < 0 && it->second == 1) {
              it->second = dim;
              continue;
            }
            ctx.fail(ErrorCode::InvalidArgument, std::string("einsum dimension mismatch for label '") +
                                                     (l >= 0 ? std::string(1, char(l)) : std::string("...")) + "': " +
                                                     std::to_string(it->second) + " vs " + std::to_string(dim));
          }
        }
      }
      std::vector<int> out_labels;
      if (spec.explicit_output) {
        out_labels = term_labels(ctx, spec.output, 0, ell_rank, true, nullptr);
        for (int l : out_labels) {
          if (l >= 0 && !size.count(l))
            ctx.fail(ErrorCode::InvalidArgument, std::string("output label '") + char(l) + "' does not appear in inputs");
          if (std::count(out_labels.begin(), out_labels.end(), l) > 1)
            ctx.fail(ErrorCode::InvalidArgument, "output labels must be unique");
        }
      } else {
        for (int k = 0; k < ell_rank; ++k) out_labels.push_back(-1 - k);
        for (auto& [l, c] : count)
          if (l >= 0 && c == 1) out_labels.push_back(l);
      }
      for (int l : out_labels)
        if (!size.count(l)) size[l] = 1;  // ellipsis dims not present in any input (rank 0)
      // summed labels
      std::vector<int> sum_labels;
      for (auto& [l, d] : size)
        if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) sum_labels.push_back(l);
      std::vector<int> all = out_labels;
      all.insert(all.end(), sum_labels.begin(), sum_labels.end());
      std::map<int, size_t> pos;
      for (size_t k = 0; k < all.size(); ++k) pos[all[k]] = k;
      std::vector<int64_t> dims(all.size());
      for (size_t k = 0; k < all.size(); ++k) dims[k] = size[all[k]];
      // strides of each input per loop label
      std::vector<std::vector<int64_t>> st(size_t(ni), std::vector<int64_t>(all.size(), 0));
      for (int i = 0; i < ni; ++i) {
        const Tensor& x = ctx.input(i);
        auto xs = shape_strides(x.shape());
        for (int d = 0; d < x.rank(); ++d) {
          if (x.dim(d) == 1 && size[in_labels[size_t(i)][size_t(d)]] != 1) continue;  // broadcast
          st[size_t(i)][pos[in_labels[size_t(i)][size_t(d)]]] += xs[size_t(d)];
        }
      }
      Shape out_shape;
      for (int l : out_labels) out_shape.push_back(size[l]);
      Tensor& y = ctx.output(0, dt, out_shape);
      int64_t n_out = shape_numel(out_shape);
      int64_t n_sum = 1;
      for (size_t k = out_labels.size(); k < all.size(); ++k) n_sum *= dims[k];
      visit_numeric(dt, [&]<class T>() {
        using A = std::conditional_t<std::is_integral_v<T>, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>, double>;
        std::vector<const T*> ptr(static_cast<size_t>(ni));
        for (int i = 0; i < ni; ++i) ptr[size_t(i)] = ctx.input(i).data<T>();
        T* out = y.data<T>();
        std::vector<int64_t> idx(all.size(), 0);
        std::vector<int64_t> off(size_t(ni), 0);
        size_t no = out_labels.size();
        for (int64_t o = 0; o < n_out; ++o) {
          A acc = 0;
          if (n_sum > 0) {
            for (int64_t s = 0; s < n_sum; ++s) {
              A prod = 1;
              for (int i = 0; i < ni; ++i) prod = A(prod * A(ptr[size_t(i)][off[size_t(i)]]));
              acc = A(acc + prod);
              // advance summed index
              for (size_t d = all.size(); d-- > no;) {
                if (++idx[d] < dims[d]) {
                  for (int i = 0; i < ni; ++i) off[size_t(i)] += st[size_t(i)][d];
                  break;
                }
                for (int i = 0; i < ni; ++i) off[size_t(i)] -= st[size_t(i)][d] * (dims[d] - 1);
                idx[d] = 0;
              }
            }
          }
          out[o] = T(acc);
          for (size_t d = no; d-- > 0;) {
            if (++idx[d] < dims[d]) {
              for (int i = 0; i < ni; ++i) off[size_t(i)] += st[size_t(i)][d];
              break;
            }
            for (int i = 0; i < ni; ++i) off[size_t(i)] -= st[size_t(i)][d] * (dims[d] - 1);
            idx[d] = 0;
          }
        }
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Det
// ---------------------------------------------------------------------------------------------

void register_det(OpRegistry& r) {
  for (int v : {11, 22}) {
    r.add("Det", v, [](const Node&) {
      return kernel([](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2 || x.dim(-1) != x.dim(-2))
          ctx.fail(ErrorCode::InvalidArgument, "input must have shape [..., M, M], got " + shape_str(x.shape()));
        int64_t M = x.dim(-1);
        Shape os(x.shape().begin(), x.shape().end() - 2);
        int64_t B = shape_numel(os);
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> res(static_cast<size_t>(B));
        std::vector<double> a(static_cast<size_t>(M * M));
        for (int64_t b = 0; b < B; ++b) {
          std::copy(xs.begin() + b * M * M, xs.begin() + (b + 1) * M * M, a.begin());
          double det = 1;
          for (int64_t c = 0; c < M; ++c) {
            int64_t piv = c;
            for (int64_t rr = c + 1; rr < M; ++rr)
              if (std::fabs(a[size_t(rr * M + c)]) > std::fabs(a[size_t(piv * M + c)])) piv = rr;
            if (a[size_t(piv * M + c)] == 0) {
              det = 0;
              break;
            }
            if (piv != c) {
              for (int64_t k = 0; k < M; ++k) std::swap(a[size_t(c * M + k)], a[size_t(piv * M + k)]);
              det = -det;
            }
            double d = a[size_t(c * M + c)];
            det *= d;
            for (int64_t rr = c + 1; rr < M; ++rr) {
              double f = a[size_t(rr * M + c)] / d;
              if (f == 0) continue;
              for (int64_t k = c; k < M; ++k) a[size_t(rr * M + k)] -= f * a[size_t(c * M + k)];
            }
          }
          res[size_t(b)] = det;
        }
        from_dvec(ctx.output(0, x.dtype(), os), res);
      });
    });
  }
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  register_reduce(r, "ReduceSum", RK::Sum, {1, 11, 13}, 13);
  register_reduce(r, "ReduceMean", RK::Mean, {1, 11, 13, 18}, 18);
  register_reduce(r, "ReduceMax", RK::Max, {1, 11, 12, 13, 18, 20}, 18);
  register_reduce(r, "ReduceMin", RK::Min, {1, 11, 12, 13, 18, 20}, 18);
  register_reduce(r, "ReduceProd", RK::Prod, {1, 11, 13, 18}, 18);
  register_reduce(r, "ReduceL1", RK::L1, {1, 11, 13, 18}, 18);
  register_reduce(r, "ReduceL2", RK::L2, {1, 11, 13, 18}, 18);
  register_reduce(r, "ReduceLogSum", RK::LogSum, {1, 11, 13, 18}, 18);
  register_reduce(r, "ReduceLogSumExp", RK::LogSumExp, {1, 11, 13, 18}, 18);
  register_reduce(r, "ReduceSumSquare", RK::SumSquare, {1, 11, 13, 18}, 18);
  register_softmax(r, "Softmax", SM::Softmax);
  register_softmax(r, "LogSoftmax", SM::LogSoftmax);
  register_softmax(r, "Hardmax", SM::Hardmax);
  register_norms(r);
  register_losses(r);
  register_einsum(r);
  register_det(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("BatchNormalization").infer_symbolic(shapes::batch_norm).in_place(in_place::batch_norm_f32);
  r.def("basalt", "FusedBatchNormalization").infer_symbolic(shapes::batch_norm).in_place(in_place::batch_norm_f32);
  for (const char* op : {"GroupNormalization", "Hardmax", "InstanceNormalization", "LRN", "LpNormalization", "MeanVarianceNormalization", "RMSNormalization"}) r.def(op).infer_symbolic(shapes::same);
  r.def("LayerNormalization").infer(shapes::layer_norm).in_place(in_place::layer_norm_f32);
  for (const char* op : {"LogSoftmax", "Softmax"}) r.def(op).infer_symbolic(shapes::same).in_place(in_place::softmax_f32);
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"}) r.def(op).infer(shapes::reduce);
  r.def("Det").infer(shapes::det);
  r.def("Einsum").infer(shapes::einsum);
  r.def("NegativeLogLikelihoodLoss").infer(shapes::negative_log_likelihood_loss);
  r.def("SoftmaxCrossEntropyLoss").infer(shapes::softmax_cross_entropy_loss);
}

}  // namespace basalt
