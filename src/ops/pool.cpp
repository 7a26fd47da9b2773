// Pools: Average/Max/Lp pools, their Global forms, MaxUnpool, MaxRoiPool.
#include "kernels/quantize.hpp"
#include "ops/nn_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace basalt::nnops {

namespace {

// ---------------------------------------------------------------- pools

enum class PoolKind { Max, Avg, Lp };

struct PoolOpts {
  PoolKind kind = PoolKind::Max;
  bool count_include_pad = false;
  double p = 2;
  int64_t storage_order = 0;
};

// Generic N-d pooling on float data. Writes y and optional indices (MaxPool).
void pool_f32(const float* x, float* y, int64_t* ind, int64_t NC, const Geom& g, const PoolOpts& o) {
  int nd = g.nd;
  int64_t in_sp = g.in_size(), out_sp = g.out_size(), K = g.k_size();
  // column-major strides for storage_order=1
  std::vector<int64_t> cm(size_t(nd), 1);
  for (int d = 1; d < nd; ++d) cm[size_t(d)] = cm[size_t(d - 1)] * g.in[size_t(d - 1)];
  // kernel tap offsets
  std::vector<int64_t> taps;  // K * nd
  for_each_index(g.k, [&](const std::vector<int64_t>& kk) {
    for (int d = 0; d < nd; ++d) taps.push_back(kk[size_t(d)] * g.d[size_t(d)]);
  });
  std::vector<int64_t> start(static_cast<size_t>(nd));
  for (int64_t nc = 0; nc < NC; ++nc) {
    const float* xc = x + nc * in_sp;
    int64_t o_idx = 0;
    for_each_index(g.out, [&](const std::vector<int64_t>& oc) {
      for (int d = 0; d < nd; ++d) start[size_t(d)] = oc[size_t(d)] * g.s[size_t(d)] - g.pb[size_t(d)];
      double acc = o.kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
      int64_t best = -1, best_cm = -1;
      int64_t cnt_valid = 0, cnt_pad = 0;
      for (int64_t t = 0; t < K; ++t) {
        int64_t idx = 0, cidx = 0;
        bool inside = true, inpad = true;
        for (int d = 0; d < nd; ++d) {
          int64_t v = start[size_t(d)] + taps[size_t(t * nd + d)];
          if (v < 0 || v >= g.in[size_t(d)]) inside = false;
          if (v < -g.pb[size_t(d)] || v >= g.in[size_t(d)] + g.pe[size_t(d)]) inpad = false;
          idx = idx * g.in[size_t(d)] + v;
          cidx += v * cm[size_t(d)];
        }
        if (inpad) ++cnt_pad;
        if (!inside) continue;
        ++cnt_valid;
        double v = xc[idx];
        switch (o.kind) {
          case PoolKind::Max:
            if (best < 0 || v > acc) {
              acc = v;
              best = idx;
              best_cm = cidx;
            }
            break;
          case PoolKind::Avg: acc += v; break;
          case PoolKind::Lp: acc += std::pow(std::fabs(v), o.p); break;
        }
      }
      float res;
      if (o.kind == PoolKind::Max) {
        res = best < 0 ? 0.f : float(acc);
        if (ind) ind[nc * out_sp + o_idx] = best < 0 ? 0 : nc * in_sp + (o.storage_order ? best_cm : best);
      } else if (o.kind == PoolKind::Avg) {
        int64_t cnt = o.count_include_pad ? cnt_pad : cnt_valid;
        res = cnt > 0 ? float(acc / double(cnt)) : 0.f;
      } else {
        res = float(std::pow(acc, 1.0 / o.p));
      }
      y[nc * out_sp + o_idx] = res;
      ++o_idx;
    });
  }
}

double parse_p(const Node& n) {
  const Attribute* a = n.find_attr("p");
  if (!a) return 2.0;
  if (a->type == Attribute::Type::Float) return a->f;
  return double(n.attr_int("p"));
}

static void register_window_pools(OpRegistry& r) {
  // ---- MaxPool, AveragePool, LpPool ----
  auto make_pool = [](PoolKind kind) {
    return [kind](const Node& n) {
      WinAttrs a = parse_win(n, true);
      check_pool_kernel(n, a);
      PoolOpts o;
      o.kind = kind;
      o.count_include_pad = n.attr_int("count_include_pad", 0) != 0;
      o.storage_order = n.attr_int("storage_order", 0);
      if (kind == PoolKind::Lp) {
        o.p = parse_p(n);
        if (!(o.p > 0)) n.fail(ErrorCode::InvalidModel, "p must be positive");
      }
      if (kind != PoolKind::Max && kind != PoolKind::Lp && !a.dilations.empty() && n.opset < 19) {
        // AveragePool gained dilations in opset 19; accept anyway
      }
      return kernel([a, o](KernelContext& ctx) {
        const Tensor& X = ctx.input(0);
        bool ok = is_float_like(X.dtype()) || (o.kind == PoolKind::Max && (X.dtype() == DType::Int8 || X.dtype() == DType::Uint8));
        if (!ok) unsupported_dtype(ctx, 0, X.dtype());
        if (X.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3, got shape " + shape_str(X.shape()));
        Geom g = make_geom(ctx, a, Shape(X.shape().begin() + 2, X.shape().end()), a.kernel, true);
        Shape ys = {X.dim(0), X.dim(1)};
        ys.insert(ys.end(), g.out.begin(), g.out.end());
        const bool want_ind = o.kind == PoolKind::Max && ctx.num_outputs() > 1 && ctx.has_output(1);
        const bool separable = X.dtype() == DType::Float && g.nd == 2 && o.kind != PoolKind::Lp && !want_ind;
        check_pool_work(ctx, g, double(X.dim(0)) * double(X.dim(1)), separable);
        if (separable) {
          // 2-D float32 max/average: the row-wise kernel (kernels/pool.hpp), planes over the pool.
          const kernels::Pool2D p2 = pool2d_of(g, o.kind == PoolKind::Avg, o.count_include_pad);
          Tensor& y = ctx.output_uninit(0, DType::Float, ys);
          kernels::pool2d_f32(ctx.pool(), X.data<float>(), y.data<float>(), X.dim(0) * X.dim(1), p2);
          return;
        }
        if ((X.dtype() == DType::Uint8 || X.dtype() == DType::Int8) && g.nd == 2 && !want_ind) {
          // 8-bit max pooling (a quantized tensor): kernels/quantize.hpp, planes over the pool
          const kernels::Pool2D p2 = pool2d_of(g, false, false);
          Tensor& y = ctx.output_uninit(0, X.dtype(), ys);
          const uint8_t* xs = static_cast<const uint8_t*>(X.raw());
          uint8_t* yd = static_cast<uint8_t*>(y.raw());
          parallel_for(ctx.pool(), X.dim(0) * X.dim(1), 1,
                       [&](int64_t q0, int64_t q1) { kernels::maxpool2d_8(xs, yd, q0, q1, p2, X.dtype() == DType::Int8); });
          return;
        }
        Tensor xf = tof(X);
        Tensor yf(DType::Float, ys);
        int64_t* ind = nullptr;
        if (want_ind)
          ind = ctx.output(1, DType::Int64, ys).data<int64_t>();
        pool_f32(xf.data<float>(), yf.data<float>(), ind, X.dim(0) * X.dim(1), g, o);
        ctx.set_output(0, Value(fromf(yf, X.dtype())));
      });
    };
  };
  add_versions(r, "MaxPool", {1, 8, 10, 11, 12, 22}, make_pool(PoolKind::Max));
  add_versions(r, "AveragePool", {1, 7, 10, 11, 19, 22}, make_pool(PoolKind::Avg));
  add_versions(r, "LpPool", {1, 2, 11, 18, 22}, make_pool(PoolKind::Lp));
}

static void register_global_pools(OpRegistry& r) {
  // ---- GlobalMaxPool, GlobalAveragePool, GlobalLpPool ----
  auto make_global = [](PoolKind kind) {
    return [kind](const Node& n) {
      double p = kind == PoolKind::Lp ? parse_p(n) : 2.0;
      return kernel([kind, p](KernelContext& ctx) {
        const Tensor& X = ctx.input(0);
        require_float(ctx, 0, X.dtype());
        if (X.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 2");
        Shape ys = X.shape();
        for (size_t i = 2; i < ys.size(); ++i) ys[i] = 1;
        int64_t NC = X.dim(0) * X.dim(1);
        int64_t sp = NC ? X.numel() / NC : 0;
        if (kind == PoolKind::Avg && X.dtype() == DType::Float && sp > 0) {
          // Vectorized plane sums, planes over the pool.
          Tensor& yt = ctx.output_uninit(0, DType::Float, ys);
          const float* x = X.data<float>();
          float* y = yt.data<float>();
          const kernels::VecOps& k = kernels::vec_ops();
          parallel_for(ctx.pool(), NC, std::max<int64_t>(1, kernels::eltwise_grain(1) / sp), [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) y[i] = k.sum(x + i * sp, sp) / float(sp);
          });
          return;
        }
        Tensor xf = tof(X);
        Tensor yf(DType::Float, ys);
        const float* x = xf.data<float>();
        float* y = yf.data<float>();
        for (int64_t i = 0; i < NC; ++i) {
          const float* xc = x + i * sp;
          double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
          for (int64_t j = 0; j < sp; ++j) {
            double v = xc[j];
            if (kind == PoolKind::Max) acc = (v > acc || std::isnan(v)) ? v : acc;
            else if (kind == PoolKind::Avg) acc += v;
            else acc += std::pow(std::fabs(v), p);
          }
          if (kind == PoolKind::Avg) acc = sp ? acc / double(sp) : 0.0;
          if (kind == PoolKind::Lp) acc = std::pow(acc, 1.0 / p);
          y[i] = float(acc);
        }
        ctx.set_output(0, Value(fromf(yf, X.dtype())));
      });
    };
  };
  add_versions(r, "GlobalMaxPool", {1, 22}, make_global(PoolKind::Max));
  add_versions(r, "GlobalAveragePool", {1, 22}, make_global(PoolKind::Avg));
  add_versions(r, "GlobalLpPool", {1, 2, 22}, make_global(PoolKind::Lp));
}

static void register_max_unpool(OpRegistry& r) {
  // ---- MaxUnpool ----
  add_versions(r, "MaxUnpool", {9, 11, 22}, [](const Node& n) {
    WinAttrs a = parse_win(n, true);
    return kernel([a](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& I = ctx.input(1);
      if (X.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3");
      if (I.shape() != X.shape()) ctx.fail(ErrorCode::InvalidArgument, "I must have the shape of X");
      if (I.dtype() != DType::Int64) unsupported_dtype(ctx, 1, I.dtype());
      size_t nd = size_t(X.rank() - 2);
      if (a.kernel.size() != nd) ctx.fail(ErrorCode::InvalidArgument, "kernel_shape does not match input rank");
      std::vector<int64_t> s = a.strides.empty() ? std::vector<int64_t>(nd, 1) : a.strides;
      std::vector<int64_t> p = a.pads.empty() ? std::vector<int64_t>(2 * nd, 0) : a.pads;
      if (s.size() != nd || p.size() != 2 * nd) ctx.fail(ErrorCode::InvalidArgument, "strides/pads do not match input rank");
      Shape ys = {X.dim(0), X.dim(1)};
      for (size_t i = 0; i < nd; ++i) {
        // X dims <= 2^40 and attributes <= INT32_MAX (parse_win): only the stride product can overflow
        int64_t v = 0;
        if (__builtin_mul_overflow(X.dim(int(i) + 2) - 1, s[i], &v) || __builtin_add_overflow(v, a.kernel[i] - p[i] - p[i + nd], &v))
          ctx.fail(ErrorCode::InvalidArgument, "output size from strides " + vec_str(s) + " overflows");
        ys.push_back(v);
      }
      Shape inferred = ys;
      if (ctx.has_input(2)) {
        std::vector<int64_t> os = ctx.input(2).to_int64_vector();
        if (os.size() != ys.size()) ctx.fail(ErrorCode::InvalidArgument, "output_shape must have rank " + std::to_string(ys.size()));
        ys = os;
      }
      for (int64_t v : ys)
        if (v < 0) ctx.fail(ErrorCode::InvalidArgument, "invalid output shape " + shape_str(ys));
      for (int64_t v : inferred)
        if (v <= 0) ctx.fail(ErrorCode::InvalidArgument, "invalid inferred output shape " + shape_str(inferred));
      int64_t total = 1;
      for (int64_t v : inferred)
        if (__builtin_mul_overflow(total, v, &total))
          ctx.fail(ErrorCode::InvalidArgument, "inferred output shape " + shape_str(inferred) + " is too large");
      Tensor& Y = ctx.output(0, X.dtype(), ys);
      bool same = inferred == ys;
      const int64_t* idx = I.data<int64_t>();
      // Indices address the inferred (default) output layout; when output_shape differs, the
      // element keeps its coordinates in the larger output.
      auto map_index = [&](int64_t flat) -> int64_t {
        if (flat < 0 || flat >= total)
          ctx.fail(ErrorCode::InvalidArgument, "index " + std::to_string(flat) + " out of range for output of shape " + shape_str(inferred));
        if (same) return flat;
        int64_t out = 0, mul = 1;
        for (size_t d = inferred.size(); d-- > 0;) {
          int64_t c = flat % inferred[d];
          flat /= inferred[d];
          if (c >= ys[d]) ctx.fail(ErrorCode::InvalidArgument, "index does not fit output_shape " + shape_str(ys));
          out += c * mul;
          mul *= ys[d];
        }
        return out;
      };
      if (!visit_numeric(X.dtype(), [&]<class T>() {
            const T* x = X.data<T>();
            T* y = Y.data<T>();
            for (int64_t i = 0; i < X.numel(); ++i) y[map_index(idx[i])] = x[i];
          }))
        unsupported_dtype(ctx, 0, X.dtype());
    });
  });
}

static void register_max_roi_pool(OpRegistry& r) {
  // ---- MaxRoiPool ----
  add_versions(r, "MaxRoiPool", {1, 22}, [](const Node& n) {
    std::vector<int64_t> pooled = n.attr_ints("pooled_shape");
    float scale = n.attr_float("spatial_scale", 1.0f);
    if (pooled.size() != 2 || pooled[0] <= 0 || pooled[1] <= 0) n.fail(ErrorCode::InvalidModel, "pooled_shape must be 2 positive values");
    return kernel([pooled, scale](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& R = ctx.input(1);
      require_float(ctx, 0, X.dtype());
      if (X.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "X must be 4-D");
      if (R.rank() != 2 || R.dim(1) != 5) ctx.fail(ErrorCode::InvalidArgument, "rois must have shape [num_rois, 5]");
      int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3), nr = R.dim(0), PH = pooled[0], PW = pooled[1];
      Tensor xf = tof(X), rf = tof(R);
      Tensor yf(DType::Float, {nr, C, PH, PW});
      const float* x = xf.data<float>();
      const float* rr = rf.data<float>();
      float* y = yf.data<float>();
      for (int64_t i = 0; i < nr; ++i) {
        const float* roi = rr + i * 5;
        if (!(roi[0] > -1.0f && double(roi[0]) < double(N))) ctx.fail(ErrorCode::InvalidArgument, "roi batch index out of range");
        int64_t b = int64_t(roi[0]);
        // roi * spatial_scale can be anything: clamp in double before converting (NaN -> 0); the
        // window is clamped to the image afterwards anyway
        auto coord = [scale](float v) {
          double r = std::round(double(v * scale));
          return std::isnan(r) ? int64_t(0) : int64_t(std::clamp(r, -1e15, 1e15));
        };
        int64_t sw = coord(roi[1]), sh = coord(roi[2]);
        int64_t ew = coord(roi[3]), eh = coord(roi[4]);
        int64_t rw = std::max<int64_t>(ew - sw + 1, 1), rh = std::max<int64_t>(eh - sh + 1, 1);
        double bh = double(rh) / double(PH), bw = double(rw) / double(PW);
        for (int64_t c = 0; c < C; ++c) {
          const float* xc = x + (b * C + c) * H * W;
          for (int64_t ph = 0; ph < PH; ++ph)
            for (int64_t pw = 0; pw < PW; ++pw) {
              int64_t hs = std::clamp<int64_t>(int64_t(std::floor(double(ph) * bh)) + sh, 0, H);
              int64_t he = std::clamp<int64_t>(int64_t(std::ceil(double(ph + 1) * bh)) + sh, 0, H);
              int64_t ws = std::clamp<int64_t>(int64_t(std::floor(double(pw) * bw)) + sw, 0, W);
              int64_t we = std::clamp<int64_t>(int64_t(std::ceil(double(pw + 1) * bw)) + sw, 0, W);
              float m = -std::numeric_limits<float>::infinity();
              bool empty = he <= hs || we <= ws;
              for (int64_t h = hs; h < he; ++h)
                for (int64_t w = ws; w < we; ++w) m = std::max(m, xc[h * W + w]);
              y[((i * C + c) * PH + ph) * PW + pw] = empty ? 0.f : m;
            }
        }
      }
      ctx.set_output(0, Value(fromf(yf, X.dtype())));
    });
  });
}

void register_pools(OpRegistry& r) {
  for (auto family : {register_window_pools, register_global_pools, register_max_unpool, register_max_roi_pool}) family(r);
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  register_pools(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"AveragePool", "LpPool", "MaxPool"}) r.def(op).infer_symbolic(shapes::pool);
  for (const char* op : {"GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool"}) r.def(op).infer_symbolic(shapes::global_pool);
  r.def("MaxRoiPool").infer(shapes::max_roi_pool);
  // MaxUnpool's optional output_shape input sets the shape by its values: the rule knows it only
  // from a known value (a constant), and gives up otherwise.
  r.def("MaxUnpool").infer(shapes::max_unpool);
}

}  // namespace basalt::nnops
