// Reductions (Reduce*) and the softmax family (Softmax, LogSoftmax, Hardmax).
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
// Reduce*
// ---------------------------------------------------------------------------------------------

enum class RK { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

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
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"LogSoftmax", "Softmax"}) r.def(op).infer_symbolic(shapes::same).in_place(in_place::softmax_f32);
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin", "ReduceProd", "ReduceSum", "ReduceSumSquare"}) r.def(op).infer(shapes::reduce);
  r.def("Hardmax").infer_symbolic(shapes::same);
}

}  // namespace basalt
