// Resampling and detection: Resize / Upsample, GridSample, AffineGrid, RoiAlign, NonMaxSuppression.
#include "ops/nn_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace basalt::nnops {

namespace {

// ---------------------------------------------------------------- Resize / Upsample

struct ResizeCfg {
  int mode = 0;  // 0 nearest, 1 linear, 2 cubic
  std::string ctm = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";  // "simple": opset < 11 behavior
  double cubic_a = -0.75;
  bool exclude_outside = false;
  float extrapolation = 0.f;
  bool antialias = false;
  std::vector<int64_t> axes;
  std::string policy = "stretch";
};

int parse_resize_mode(const Node& n, const std::string& m) {
  if (m == "nearest") return 0;
  if (m == "linear" || m == "bilinear" || m == "trilinear") return 1;
  if (m == "cubic" || m == "bicubic") return 2;
  n.fail(ErrorCode::InvalidModel, "unsupported mode '" + m + "'");
}

double resize_coord(const ResizeCfg& c, int64_t xo, int64_t in_len, int64_t out_len, double scale, double rs, double re) {
  double x = double(xo);
  const std::string& m = c.ctm;
  double out_f = scale * double(in_len);  // the unrounded resized length
  if (m == "half_pixel") return (x + 0.5) / scale - 0.5;
  if (m == "half_pixel_symmetric") {
    double adj = double(out_len) / (scale * double(in_len));
    double center = double(in_len) / 2.0;
    double offset = center * (1.0 - adj);
    return offset + (x + 0.5) / scale - 0.5;
  }
  if (m == "pytorch_half_pixel") return out_len > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  if (m == "align_corners") return out_len == 1 ? 0.0 : x * double(in_len - 1) / (out_f - 1.0);
  if (m == "asymmetric") return x / scale;
  if (m == "tf_half_pixel_for_nn") return (x + 0.5) / scale;
  // tf_crop_and_resize
  if (out_len > 1) return rs * double(in_len - 1) + x * (re - rs) * double(in_len - 1) / (out_f - 1.0);
  return 0.5 * (rs + re) * double(in_len - 1);
}

double cubic_w(double a, double A) {
  a = std::fabs(a);
  if (a < 1) return ((A + 2) * a - (A + 3)) * a * a + 1;
  if (a < 2) return ((A * a - 5 * A) * a + 8 * A) * a - 4 * A;
  return 0;
}

// One pass along one axis: data [outer, in_len, inner] -> [outer, out_len, inner].
using TapList = std::vector<std::vector<std::pair<int64_t, double>>>;

// For each output position along one axis: the (input index, weight) taps, or ext = 1 when the
// position takes the extrapolation value.
void resize_taps(int64_t in_len, int64_t out_len, const ResizeCfg& c, double scale, double rs, double re, TapList& taps,
                 std::vector<char>& ext) {
  taps.assign(size_t(out_len), {});
  ext.assign(size_t(out_len), 0);
  for (int64_t xo = 0; xo < out_len; ++xo) {
    double x = resize_coord(c, xo, in_len, out_len, scale, rs, re);
    auto& t = taps[size_t(xo)];
    if (c.ctm == "tf_crop_and_resize" && (x < 0 || x > double(in_len - 1))) {
      ext[size_t(xo)] = 1;
      continue;
    }
    if (c.mode == 0) {
      double fl = std::floor(x);
      int64_t i;
      if (c.nearest_mode == "simple") i = scale < 1 ? int64_t(std::ceil(x)) : int64_t(x);
      else if (c.nearest_mode == "floor") i = int64_t(fl);
      else if (c.nearest_mode == "ceil") i = int64_t(std::ceil(x));
      else if (c.nearest_mode == "round_prefer_ceil") i = (x - fl == 0.5) ? int64_t(fl) + 1 : int64_t(std::round(x));
      else i = (x - fl == 0.5) ? int64_t(fl) : int64_t(std::round(x));
      t.push_back({std::clamp<int64_t>(i, 0, in_len - 1), 1.0});
      continue;
    }
    double s = c.antialias ? std::min(scale, 1.0) : 1.0;
    double x0 = std::floor(x), f = x - x0;
    int64_t j0, j1;
    if (c.mode == 1) {
      j0 = int64_t(std::floor(-1.0 / s)) + 1;
      j1 = 1 - j0;
    } else {
      j0 = int64_t(std::floor(-2.0 / s)) + 1;
      j1 = 1 - j0;
    }
    double sum = 0;
    for (int64_t j = j0; j <= j1; ++j) {
      double arg = (double(j) - f) * s;
      double w = c.mode == 1 ? std::max(0.0, 1.0 - std::fabs(arg)) : cubic_w(arg, c.cubic_a);
      sum += w;
      int64_t idx = int64_t(x0) + j;
      t.push_back({idx, w});
    }
    if (sum != 0)
      for (auto& p : t) p.second /= sum;
    if (c.exclude_outside) {
      double s2 = 0;
      for (auto& p : t) {
        if (p.first < 0 || p.first >= in_len) p.second = 0;
        s2 += p.second;
      }
      if (s2 != 0)
        for (auto& p : t) p.second /= s2;
    }
    for (auto& p : t) p.first = std::clamp<int64_t>(p.first, 0, in_len - 1);
  }
}

// One axis's taps, flattened: position xo takes the extrapolation value (ext), copies input
// idx[first[xo]] (copy), or sums w[k] * x[idx[k]] for k in [first[xo], first[xo + 1]) in order,
// zero weights dropped (the sums of the straightforward loop, bit for bit).
struct FlatTaps {
  std::vector<int64_t> first, idx;
  std::vector<float> w;
  std::vector<char> copy, ext;
  // Output position xo from a contiguous input line `src` (extv: the extrapolation value).
  float at(int64_t xo, const float* src, float extv) const {
    const size_t x = size_t(xo);
    if (ext[x]) return extv;
    if (copy[x]) return src[idx[size_t(first[x])]];
    float acc = 0;
    for (int64_t k = first[x]; k < first[x + 1]; ++k) acc += w[size_t(k)] * src[idx[size_t(k)]];
    return acc;
  }
};

FlatTaps flat_taps(int64_t in_len, int64_t out_len, const ResizeCfg& c, double scale, double rs, double re) {
  TapList taps;
  FlatTaps f;
  resize_taps(in_len, out_len, c, scale, rs, re, taps, f.ext);
  f.first.assign(static_cast<size_t>(out_len) + 1, 0);
  f.copy.assign(static_cast<size_t>(out_len), 0);
  for (int64_t xo = 0; xo < out_len; ++xo) {
    const auto& t = taps[size_t(xo)];
    if (!f.ext[size_t(xo)] && t.size() == 1) {
      f.copy[size_t(xo)] = 1;
      f.idx.push_back(t[0].first);
      f.w.push_back(1.f);
    } else if (!f.ext[size_t(xo)]) {
      for (auto& p : t)
        if (p.second != 0) {
          f.idx.push_back(p.first);
          f.w.push_back(float(p.second));
        }
    }
    f.first[size_t(xo) + 1] = int64_t(f.idx.size());
  }
  return f;
}

// One pass along one axis: data [outer, in_len, inner] -> [outer, out_len, inner]; outer rows
// split over the pool.
void resize_axis(const float* in, float* out, int64_t outer, int64_t in_len, int64_t out_len, int64_t inner, const ResizeCfg& c,
                 double scale, double rs, double re, ThreadPool* pool = nullptr) {
  const FlatTaps f = flat_taps(in_len, out_len, c, scale, rs, re);
  const float extv = c.extrapolation;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_len * inner));
  parallel_for(pool, outer, grain, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const float* src = in + o * in_len * inner;
      if (inner == 1) {
        float* dst = out + o * out_len;
        for (int64_t xo = 0; xo < out_len; ++xo) dst[xo] = f.at(xo, src, extv);
        continue;
      }
      for (int64_t xo = 0; xo < out_len; ++xo) {
        float* dst = out + (o * out_len + xo) * inner;
        if (f.ext[size_t(xo)]) {
          for (int64_t i = 0; i < inner; ++i) dst[i] = extv;
        } else if (f.copy[size_t(xo)]) {
          std::memcpy(dst, src + f.idx[size_t(f.first[size_t(xo)])] * inner, size_t(inner) * sizeof(float));
        } else {
          for (int64_t i = 0; i < inner; ++i) dst[i] = 0;
          for (int64_t k = f.first[size_t(xo)]; k < f.first[size_t(xo) + 1]; ++k) {
            const float* s0 = src + f.idx[size_t(k)] * inner;
            const float wk = f.w[size_t(k)];
            for (int64_t i = 0; i < inner; ++i) dst[i] += wk * s0[i];
          }
        }
      }
    }
  });
}

// The last two axes in one pass, without the intermediate tensor of two resize_axis calls but
// with the same arithmetic: per output row, the H-axis pass into a row buffer (exactly the row
// resize_axis would have stored), then the W-axis pass from it. Output rows split over the pool.
void resize_last2(const float* in, float* out, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                  const FlatTaps& fy, const FlatTaps& fx, float extv, ThreadPool* pool) {
  const int64_t rows = planes * OH;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, OW * 2));
  // Nearest along W (every output column copies one input column): a plain gather by column.
  std::vector<int64_t> xsrc(static_cast<size_t>(OW));
  bool x_all_copy = true;
  for (int64_t xo = 0; xo < OW; ++xo) {
    x_all_copy = x_all_copy && fx.copy[size_t(xo)] && !fx.ext[size_t(xo)];
    xsrc[size_t(xo)] = x_all_copy ? fx.idx[size_t(fx.first[size_t(xo)])] : 0;
  }
  // The usual 2x nearest upsampling along W (UNet's decoders, FPN necks): each input column
  // written twice, a loop the compiler turns into unpacks and whole-vector stores (the indexed
  // gather above does an index load and a scalar load per output). UNet-lite's 32 x 128x128 ->
  // 256x256, 1 thread: 0.55-0.66 -> 0.29-0.37 ms.
  bool x_twice = x_all_copy && OW == 2 * W;
  for (int64_t xo = 0; x_twice && xo < OW; ++xo) x_twice = xsrc[size_t(xo)] == xo / 2;
  parallel_for(pool, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> hrow(static_cast<size_t>(W));  // this output row's H-axis values
    float* t = hrow.data();
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t p = r / OH, yo = r % OH;
      const float* src = in + p * H * W;
      float* dst = out + r * OW;
      const int64_t y0 = fy.first[size_t(yo)], y1 = fy.first[size_t(yo) + 1];
      // An output row that copies the same input row as the previous one (upsampling) repeats
      // that row's output, when this chunk wrote it.
      if (yo > 0 && r > r0 && fy.copy[size_t(yo)] && fy.copy[size_t(yo) - 1] && !fy.ext[size_t(yo)] &&
          !fy.ext[size_t(yo) - 1] && fy.idx[size_t(y0)] == fy.idx[size_t(fy.first[size_t(yo) - 1])]) {
        std::memcpy(dst, dst - OW, size_t(OW) * sizeof(float));
        continue;
      }
      const float* row = t;
      if (fy.ext[size_t(yo)]) {
        for (int64_t ix = 0; ix < W; ++ix) t[ix] = extv;
      } else if (fy.copy[size_t(yo)]) {
        row = src + fy.idx[size_t(y0)] * W;  // used in place
      } else {
        for (int64_t ix = 0; ix < W; ++ix) t[ix] = 0;
        for (int64_t k = y0; k < y1; ++k) {
          const float* s0 = src + fy.idx[size_t(k)] * W;
          const float wk = fy.w[size_t(k)];
          for (int64_t ix = 0; ix < W; ++ix) t[ix] += wk * s0[ix];
        }
      }
      if (x_twice) {
        for (int64_t ix = 0; ix < W; ++ix) {
          const float v = row[ix];
          dst[2 * ix] = v;
          dst[2 * ix + 1] = v;
        }
        continue;
      }
      if (x_all_copy) {
        const int64_t* xs = xsrc.data();
        for (int64_t xo = 0; xo < OW; ++xo) dst[xo] = row[xs[xo]];
        continue;
      }
      for (int64_t xo = 0; xo < OW; ++xo) dst[xo] = fx.at(xo, row, extv);
    }
  });
}

// Resize X (any float-like or numeric type) to out shape with per-axis scales and roi.
// float32 input resized on its last two axes is written straight into output 0 of ctx.
Tensor resize_run(KernelContext& ctx, const Tensor& X, const Shape& out, const std::vector<double>& scales,
                  const std::vector<double>& rs, const std::vector<double>& re, const ResizeCfg& c) {
  const bool empty_out = shape_numel(out) == 0;  // then no tap tables (their size is out's, not 0)
  if (c.mode == 0 && X.dtype() != DType::Float) {
    // Nearest: a pure gather, done on the native type (exact for int64, works for bool).
    if (empty_out) {
      Tensor Y(X.dtype(), out);
      if (!visit_numeric_bool(X.dtype(), []<class T>() {})) unsupported_dtype(ctx, 0, X.dtype());
      return Y;
    }
    int r = X.rank();
    std::vector<std::vector<int64_t>> src(static_cast<size_t>(r));
    for (int a = 0; a < r; ++a) {
      TapList taps;
      std::vector<char> ext;
      bool identity = out[size_t(a)] == X.dim(a) && scales[size_t(a)] == 1.0 && c.ctm != "tf_crop_and_resize";
      if (!identity) resize_taps(X.dim(a), out[size_t(a)], c, scales[size_t(a)], rs[size_t(a)], re[size_t(a)], taps, ext);
      for (int64_t xo = 0; xo < out[size_t(a)]; ++xo)
        src[size_t(a)].push_back(identity ? xo : ext[size_t(xo)] ? -1 : taps[size_t(xo)][0].first);
    }
    std::vector<int64_t> st = shape_strides(X.shape());
    Tensor Y(X.dtype(), out);
    bool ok = visit_numeric_bool(X.dtype(), [&]<class T>() {
      const T* x = X.data<T>();
      T* y = Y.data<T>();
      T extv = T(c.extrapolation);
      int64_t o = 0;
      for_each_index(out, [&](const std::vector<int64_t>& idx) {
        int64_t off = 0;
        for (int a = 0; a < r; ++a) {
          int64_t s0 = src[size_t(a)][size_t(idx[size_t(a)])];
          if (s0 < 0) {
            off = -1;
            break;
          }
          off += s0 * st[size_t(a)];
        }
        y[o++] = off < 0 ? extv : x[off];
      });
    });
    if (!ok) unsupported_dtype(ctx, 0, X.dtype());
    return Y;
  }
  bool numeric_ok = is_float_like(X.dtype()) || dtype_is_integer(X.dtype());
  if (!numeric_ok || X.dtype() == DType::Int4 || X.dtype() == DType::Uint4 || X.dtype() == DType::Int2 || X.dtype() == DType::Uint2)
    unsupported_dtype(ctx, 0, X.dtype());
  Shape cs = X.shape();
  int r = X.rank();
  auto resized = [&](int a) {
    return !(out[size_t(a)] == cs[size_t(a)] && scales[size_t(a)] == 1.0 && c.ctm != "tf_crop_and_resize");
  };
  bool only_last2 = r >= 2 && resized(r - 2) && resized(r - 1) && X.dim(r - 2) > 0 && X.dim(r - 1) > 0;
  for (int a = 0; only_last2 && a < r - 2; ++a) only_last2 = !resized(a);
  if (empty_out) {  // the axis loop below, without its tables
    for (int a = 0; !only_last2 && a < r; ++a)
      if (resized(a) && cs[size_t(a)] == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot resize an empty axis");
    return Tensor(X.dtype(), out);
  }
  Tensor cur = tof(X);
  if (only_last2) {
    // The usual NCHW image resize: both spatial axes in one pass.
    const int64_t H = cs[size_t(r - 2)], W = cs[size_t(r - 1)], OH = out[size_t(r - 2)], OW = out[size_t(r - 1)];
    FlatTaps fy = flat_taps(H, OH, c, scales[size_t(r - 2)], rs[size_t(r - 2)], re[size_t(r - 2)]);
    FlatTaps fx = flat_taps(W, OW, c, scales[size_t(r - 1)], rs[size_t(r - 1)], re[size_t(r - 1)]);
    Tensor nt = X.dtype() == DType::Float ? ctx.output_uninit(0, DType::Float, out) : Tensor::uninit(DType::Float, out);
    resize_last2(cur.data<float>(), nt.data<float>(), X.numel() / (H * W), H, W, OH, OW, fy, fx, c.extrapolation, ctx.pool());
    cur = nt;
    cs = out;
  }
  for (int a = 0; !only_last2 && a < r; ++a) {
    if (out[size_t(a)] == cs[size_t(a)] && scales[size_t(a)] == 1.0 && c.ctm != "tf_crop_and_resize") continue;
    if (cs[size_t(a)] == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot resize an empty axis");
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < a; ++d) outer *= cs[size_t(d)];
    for (int d = a + 1; d < r; ++d) inner *= cs[size_t(d)];
    Shape ns = cs;
    ns[size_t(a)] = out[size_t(a)];
    Tensor nt = Tensor::uninit(DType::Float, ns);  // resize_axis writes every element
    resize_axis(cur.data<float>(), nt.data<float>(), outer, cs[size_t(a)], out[size_t(a)], inner, c, scales[size_t(a)], rs[size_t(a)],
                re[size_t(a)], ctx.pool());
    cur = nt;
    cs = ns;
  }
  if (cur.shape() != out) cur = cur.reshaped(out);
  if (dtype_is_integer(X.dtype()) && c.mode != 0) {
    // round to nearest and saturate for integer outputs
    float* p = cur.data<float>();
    double lo = 0, hi = 0;
    switch (X.dtype()) {
      case DType::Uint8: lo = 0; hi = 255; break;
      case DType::Int8: lo = -128; hi = 127; break;
      default: lo = -3.4e38; hi = 3.4e38; break;
    }
    for (int64_t i = 0; i < cur.numel(); ++i) p[i] = float(std::clamp<double>(std::nearbyint(p[i]), lo, hi));
  }
  if (cur.storage() == X.storage() && X.dtype() == DType::Float) return cur;
  return fromf(cur, X.dtype());
}

void register_resize(OpRegistry& r) {
  add_versions(r, "Resize", {10, 11, 13, 18, 19}, [](const Node& n) {
    ResizeCfg c;
    c.mode = parse_resize_mode(n, n.attr_string("mode", "nearest"));
    if (n.opset < 11) {
      c.ctm = "asymmetric";
      c.nearest_mode = "simple";
    } else {
      c.ctm = n.attr_string("coordinate_transformation_mode", "half_pixel");
      c.nearest_mode = n.attr_string("nearest_mode", "round_prefer_floor");
      c.cubic_a = n.attr_float("cubic_coeff_a", -0.75f);
      c.exclude_outside = n.attr_int("exclude_outside", 0) != 0;
      c.extrapolation = n.attr_float("extrapolation_value", 0.f);
      c.antialias = n.attr_int("antialias", 0) != 0;
      c.axes = n.attr_ints("axes", {});
      c.policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
    }
    static const char* ctms[] = {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
                                 "tf_half_pixel_for_nn", "tf_crop_and_resize"};
    if (std::find_if(std::begin(ctms), std::end(ctms), [&](const char* s) { return c.ctm == s; }) == std::end(ctms))
      n.fail(ErrorCode::InvalidModel, "unsupported coordinate_transformation_mode '" + c.ctm + "'");
    static const char* nms[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil", "simple"};
    if (std::find_if(std::begin(nms), std::end(nms), [&](const char* s) { return c.nearest_mode == s; }) == std::end(nms))
      n.fail(ErrorCode::InvalidModel, "unsupported nearest_mode '" + c.nearest_mode + "'");
    if (c.policy != "stretch" && c.policy != "not_larger" && c.policy != "not_smaller")
      n.fail(ErrorCode::InvalidModel, "unsupported keep_aspect_ratio_policy '" + c.policy + "'");
    return kernel([c](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      int r = X.rank();
      bool v10 = ctx.node().opset < 11;
      std::vector<int64_t> axes;
      if (c.axes.empty()) {
        for (int i = 0; i < r; ++i) axes.push_back(i);
      } else {
        std::vector<char> seen(size_t(r), 0);
        for (int64_t a : c.axes) {
          int na = normalize_axis(ctx, a, r);
          if (seen[size_t(na)]) ctx.fail(ErrorCode::InvalidArgument, "axes contains a duplicate");
          seen[size_t(na)] = 1;
          axes.push_back(na);
        }
      }
      size_t na = axes.size();
      std::vector<double> rs(size_t(r), 0.0), re(size_t(r), 1.0), scales(size_t(r), 1.0);
      Shape out = X.shape();
      int si = v10 ? 1 : 2;
      bool has_scales = ctx.has_input(si) && ctx.input(si).numel() > 0;
      bool has_sizes = !v10 && ctx.has_input(3) && ctx.input(3).numel() > 0;
      if (!v10 && ctx.has_input(1) && ctx.input(1).numel() > 0) {
        const Tensor& R = ctx.input(1);
        if (size_t(R.numel()) != 2 * na) ctx.fail(ErrorCode::InvalidArgument, "roi must have 2 * " + std::to_string(na) + " values");
        for (size_t i = 0; i < na; ++i) {
          rs[size_t(axes[i])] = R.get_double(int64_t(i));
          re[size_t(axes[i])] = R.get_double(int64_t(na + i));
        }
      }
      if (has_scales == has_sizes)
        ctx.fail(ErrorCode::InvalidArgument, has_scales ? "only one of scales and sizes may be given" : "one of scales and sizes is required");
      if (has_scales) {
        const Tensor& S = ctx.input(si);
        if (size_t(S.numel()) != na)
          ctx.fail(ErrorCode::InvalidArgument, "scales must have " + std::to_string(na) + " values, got " + std::to_string(S.numel()));
        for (size_t i = 0; i < na; ++i) {
          double sv = S.get_double(int64_t(i));
          if (!(sv > 0)) ctx.fail(ErrorCode::InvalidArgument, "scales must be positive");
          size_t a = size_t(axes[i]);
          scales[a] = sv;
          out[a] = int64_t(std::floor(double(X.dim(int(a))) * sv));
        }
      } else {
        std::vector<int64_t> sz = ctx.input(3).to_int64_vector();
        if (sz.size() != na) ctx.fail(ErrorCode::InvalidArgument, "sizes must have " + std::to_string(na) + " values");
        for (int64_t v : sz)
          if (v < 0) ctx.fail(ErrorCode::InvalidArgument, "sizes must be non-negative");
        if (c.policy == "stretch") {
          for (size_t i = 0; i < na; ++i) {
            size_t a = size_t(axes[i]);
            out[a] = sz[i];
            scales[a] = X.dim(int(a)) ? double(sz[i]) / double(X.dim(int(a))) : 1.0;
          }
        } else {
          double sc = c.policy == "not_larger" ? std::numeric_limits<double>::infinity() : 0.0;
          for (size_t i = 0; i < na; ++i) {
            double v = double(sz[i]) / double(std::max<int64_t>(1, X.dim(int(axes[i]))));
            sc = c.policy == "not_larger" ? std::min(sc, v) : std::max(sc, v);
          }
          for (size_t i = 0; i < na; ++i) {
            size_t a = size_t(axes[i]);
            scales[a] = sc;
            out[a] = int64_t(std::round(sc * double(X.dim(int(a)))));
          }
        }
      }
      for (size_t a = 0; a < size_t(r); ++a)
        if (out[a] != X.dim(int(a)) && (X.dim(int(a)) == 0 || out[a] == 0))
          ctx.fail(ErrorCode::InvalidArgument, "cannot resize " + shape_str(X.shape()) + " to " + shape_str(out));
      ctx.set_output(0, Value(resize_run(ctx, X, out, scales, rs, re, c)));
    });
  });

  add_versions(r, "Upsample", {7, 9}, [](const Node& n) {
    ResizeCfg c;
    c.mode = parse_resize_mode(n, n.attr_string("mode", "nearest"));
    c.ctm = "asymmetric";
    c.nearest_mode = "simple";
    std::vector<float> attr_scales;
    if (n.opset < 9) attr_scales = n.attr_floats("scales");
    for (float f : attr_scales)
      if (!(std::isfinite(f) && f > 0)) n.fail(ErrorCode::InvalidModel, "scales must be finite and positive, got " + std::to_string(f));
    return kernel([c, attr_scales](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      int r = X.rank();
      std::vector<double> sc;
      if (ctx.node().opset < 9) {
        for (float f : attr_scales) sc.push_back(f);
      } else {
        const Tensor& S = ctx.input(1);
        for (int64_t i = 0; i < S.numel(); ++i) sc.push_back(S.get_double(i));
      }
      if (sc.size() != size_t(r)) ctx.fail(ErrorCode::InvalidArgument, "scales must have one value per input dimension");
      Shape out = X.shape();
      for (int a = 0; a < r; ++a) {
        if (!(sc[size_t(a)] > 0)) ctx.fail(ErrorCode::InvalidArgument, "scales must be positive");
        const double o = std::floor(double(X.dim(a)) * sc[size_t(a)]);
        if (!(o <= double(int64_t(1) << 40)))  // also catches NaN (0 * inf) before the conversion
          ctx.fail(ErrorCode::InvalidArgument, "scales value " + std::to_string(sc[size_t(a)]) + " on dimension " + std::to_string(a) +
                                                   " of " + shape_str(X.shape()) + " gives a too large output");
        out[size_t(a)] = int64_t(o);
      }
      std::vector<double> rs(size_t(r), 0.0), re(size_t(r), 1.0);
      ctx.set_output(0, Value(resize_run(ctx, X, out, sc, rs, re, c)));
    });
  });
}

// ---------------------------------------------------------------- GridSample

double gs_reflect(double x, double lo, double hi) {
  double rng = hi - lo;
  if (rng <= 0) return lo;
  if (x < lo) {
    double dx = lo - x;
    int64_t k = int64_t(dx / rng);
    double r = dx - double(k) * rng;
    return (k % 2 == 0) ? lo + r : hi - r;
  }
  if (x > hi) {
    double dx = x - hi;
    int64_t k = int64_t(dx / rng);
    double r = dx - double(k) * rng;
    return (k % 2 == 0) ? hi - r : lo + r;
  }
  return x;
}

void register_gridsample(OpRegistry& r) {
  add_versions(r, "GridSample", {16, 20, 22}, [](const Node& n) {
    std::string ms = n.attr_string("mode", n.opset >= 20 ? "linear" : "bilinear");
    int mode = parse_resize_mode(n, ms);
    std::string pm = n.attr_string("padding_mode", "zeros");
    int pad = pm == "zeros" ? 0 : pm == "border" ? 1 : pm == "reflection" ? 2 : -1;
    if (pad < 0) n.fail(ErrorCode::InvalidModel, "unsupported padding_mode '" + pm + "'");
    bool align = n.attr_int("align_corners", 0) != 0;
    return kernel([mode, pad, align](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& G = ctx.input(1);
      require_float(ctx, 0, X.dtype());
      require_float(ctx, 1, G.dtype());
      int r = X.rank() - 2;
      if (r < 1) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3");
      if (G.rank() != X.rank() || G.dim(0) != X.dim(0) || G.dim(-1) != r)
        ctx.fail(ErrorCode::InvalidArgument, "grid shape " + shape_str(G.shape()) + " does not match X shape " + shape_str(X.shape()));
      if (mode == 2 && r != 2) ctx.fail(ErrorCode::Unsupported, "cubic mode supports only 4-D input");
      int64_t N = X.dim(0), C = X.dim(1);
      std::vector<int64_t> in(X.shape().begin() + 2, X.shape().end());
      std::vector<int64_t> osp(G.shape().begin() + 1, G.shape().end() - 1);
      Shape ys = {N, C};
      ys.insert(ys.end(), osp.begin(), osp.end());
      Tensor xf = tof(X), gf = tof(G);
      Tensor yf(DType::Float, ys);
      int64_t in_sp = shape_numel(in), out_sp = shape_numel(osp);
      const float* x = xf.data<float>();
      const float* g = gf.data<float>();
      float* y = yf.data<float>();
      int ntap = mode == 0 ? 1 : mode == 1 ? 2 : 4;
      int64_t combos = 1;
      for (int d = 0; d < r; ++d) combos *= ntap;
            std::vector<double> wts(size_t(r) * 4);
      std::vector<int64_t> idxs(size_t(r) * 4);
      std::vector<char> valid(size_t(r) * 4);
      for (int64_t b = 0; b < N; ++b)
        for (int64_t o = 0; o < out_sp; ++o) {
          const float* gp = g + (b * out_sp + o) * r;
          for (int d = 0; d < r; ++d) {
            double L = double(in[size_t(d)]);
            double gv = gp[r - 1 - d];
            double c = align ? (gv + 1) / 2.0 * (L - 1) : ((gv + 1) * L - 1) / 2.0;
            double lo = align ? 0.0 : -0.5, hi = align ? L - 1 : L - 0.5;
            if (mode == 0) c = std::nearbyint(c);
            if (pad == 1) c = std::clamp(c, 0.0, L - 1);
            else if (pad == 2) c = gs_reflect(c, lo, hi);
            if (mode == 0) c = std::nearbyint(c);
            // taps along this axis
            double f0 = std::floor(c), f = c - f0;
            for (int t = 0; t < ntap; ++t) {
              int64_t idx;
              double w;
              if (mode == 0) {
                idx = int64_t(c);
                w = 1;
              } else if (mode == 1) {
                idx = int64_t(f0) + t;
                w = t == 0 ? 1 - f : f;
              } else {
                idx = int64_t(f0) - 1 + t;
                w = cubic_w(double(t - 1) - f, -0.75);
              }
              bool ok = true;
              int64_t Li = in[size_t(d)];
              if (idx < 0 || idx >= Li) {
                if (pad == 0) ok = false;
                else if (pad == 1) idx = std::clamp<int64_t>(idx, 0, Li - 1);
                else {
                  idx = int64_t(gs_reflect(double(idx), lo, hi));
                  idx = std::clamp<int64_t>(idx, 0, Li - 1);
                }
              }
              idxs[size_t(d * 4 + t)] = idx;
              wts[size_t(d * 4 + t)] = w;
              valid[size_t(d * 4 + t)] = ok;
            }
          }
          for (int64_t c = 0; c < C; ++c) {
            const float* xc = x + (b * C + c) * in_sp;
            double acc = 0;
            for (int64_t k = 0; k < combos; ++k) {
              int64_t kk = k, flat = 0;
              double w = 1;
              bool ok = true;
              int64_t mul = 1;
              for (int d = r - 1; d >= 0; --d) {
                int t = int(kk % ntap);
                kk /= ntap;
                size_t q = size_t(d * 4 + t);
                if (!valid[q]) {
                  ok = false;
                  break;
                }
                w *= wts[q];
                flat += idxs[q] * mul;
                mul *= in[size_t(d)];
              }
              if (ok && w != 0) acc += w * xc[flat];
            }
            y[(b * C + c) * out_sp + o] = float(acc);
          }
        }
      ctx.set_output(0, Value(fromf(yf, X.dtype())));
    });
  });
}

// ---------------------------------------------------------------- AffineGrid (opset 20)

void register_affinegrid(OpRegistry& r) {
  add_versions(r, "AffineGrid", {20}, [](const Node& n) {
    bool align = n.attr_int("align_corners", 0) != 0;
    return kernel([align](KernelContext& ctx) {
      const Tensor& T = ctx.input(0);
      require_float(ctx, 0, T.dtype());
      std::vector<int64_t> size = ctx.input(1).to_int64_vector();
      if (size.size() != 4 && size.size() != 5) ctx.fail(ErrorCode::InvalidArgument, "size must have 4 or 5 values");
      int nd = int(size.size()) - 2;
      int64_t N = size[0];
      if (T.shape() != Shape{N, nd, nd + 1})
        ctx.fail(ErrorCode::InvalidArgument, "theta shape " + shape_str(T.shape()) + " does not match size " + vec_str(size));
      std::vector<int64_t> sp(size.begin() + 2, size.end());
      for (int64_t v : sp)
        if (v < 0) ctx.fail(ErrorCode::InvalidArgument, "size must be non-negative");
      auto base = [&](int64_t i, int64_t L) -> double {
        if (align) return L > 1 ? -1.0 + 2.0 * double(i) / double(L - 1) : -1.0;
        return (2.0 * double(i) + 1.0) / double(L) - 1.0;
      };
      Shape ys = {N};
      ys.insert(ys.end(), sp.begin(), sp.end());
      ys.push_back(nd);
      Tensor tf = tof(T);
      Tensor yf(DType::Float, ys);
      const float* th = tf.data<float>();
      float* y = yf.data<float>();
      int64_t o = 0;
      for (int64_t b = 0; b < N; ++b) {
        const float* t = th + b * nd * (nd + 1);
        for_each_index(sp, [&](const std::vector<int64_t>& idx) {
          double v[4];
          // v = (x, y[, z], 1): x follows the last spatial axis
          for (int d = 0; d < nd; ++d) v[d] = base(idx[size_t(nd - 1 - d)], sp[size_t(nd - 1 - d)]);
          v[nd] = 1.0;
          for (int rr = 0; rr < nd; ++rr) {
            double acc = 0;
            for (int c = 0; c <= nd; ++c) acc += double(t[rr * (nd + 1) + c]) * v[c];
            y[o++] = float(acc);
          }
        });
      }
      ctx.set_output(0, Value(fromf(yf, T.dtype())));
    });
  });
}

// ---------------------------------------------------------------- RoiAlign

void register_roialign(OpRegistry& r) {
  // Samples per output bin: sampling_ratio^2, or the adaptive grid ceil(roi extent / output size).
  constexpr int64_t kMaxRoiSamplingRatio = 1024;
  constexpr double kMaxRoiBinSamples = double(int64_t(1) << 20);
  add_versions(r, "RoiAlign", {10, 16, 22}, [](const Node& n) {
    std::string mode = n.attr_string("mode", "avg");
    if (mode != "avg" && mode != "max") n.fail(ErrorCode::InvalidModel, "mode must be avg or max");
    int64_t oh = n.attr_int("output_height", 1), ow = n.attr_int("output_width", 1), sr = n.attr_int("sampling_ratio", 0);
    float scale = n.attr_float("spatial_scale", 1.0f);
    std::string ctm = n.opset >= 16 ? n.attr_string("coordinate_transformation_mode", "half_pixel") : "output_half_pixel";
    if (ctm != "half_pixel" && ctm != "output_half_pixel") n.fail(ErrorCode::InvalidModel, "invalid coordinate_transformation_mode '" + ctm + "'");
    if (oh <= 0 || ow <= 0 || sr < 0) n.fail(ErrorCode::InvalidModel, "output_height/output_width must be positive, sampling_ratio >= 0");
    if (sr > kMaxRoiSamplingRatio)
      n.fail(ErrorCode::InvalidModel, "sampling_ratio value " + std::to_string(sr) + " is too large (at most " +
                                          std::to_string(kMaxRoiSamplingRatio) + ")");
    if (!std::isfinite(scale)) n.fail(ErrorCode::InvalidModel, "spatial_scale must be finite, got " + std::to_string(scale));
    bool is_max = mode == "max";
    bool half = ctm == "half_pixel";
    return kernel([is_max, oh, ow, sr, scale, half](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& R = ctx.input(1);
      const Tensor& BI = ctx.input(2);
      require_float(ctx, 0, X.dtype());
      require_float(ctx, 1, R.dtype());
      if (X.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "X must be 4-D");
      if (R.rank() != 2 || R.dim(1) != 4) ctx.fail(ErrorCode::InvalidArgument, "rois must have shape [num_rois, 4]");
      if (BI.numel() != R.dim(0)) ctx.fail(ErrorCode::InvalidArgument, "batch_indices must have num_rois elements");
      int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), W = X.dim(3), nr = R.dim(0);
      Tensor xf = tof(X), rf = tof(R);
      Tensor yf(DType::Float, {nr, C, oh, ow});
      const float* x = xf.data<float>();
      const float* rr = rf.data<float>();
      float* y = yf.data<float>();
      double off = half ? 0.5 : 0.0;
      for (int64_t i = 0; i < nr; ++i) {
        int64_t b = BI.get_int(i);
        if (b < 0 || b >= N) ctx.fail(ErrorCode::InvalidArgument, "batch index " + std::to_string(b) + " out of range");
        double x1 = rr[i * 4] * scale - off, y1 = rr[i * 4 + 1] * scale - off;
        double x2 = rr[i * 4 + 2] * scale - off, y2 = rr[i * 4 + 3] * scale - off;
        double rw = x2 - x1, rh = y2 - y1;
        if (!half) {
          rw = std::max(rw, 1.0);
          rh = std::max(rh, 1.0);
        }
        double bh = rh / double(oh), bw = rw / double(ow);
        const double ghd = sr > 0 ? double(sr) : std::ceil(rh / double(oh));
        const double gwd = sr > 0 ? double(sr) : std::ceil(rw / double(ow));
        if (!(std::fabs(ghd) <= kMaxRoiBinSamples && std::fabs(gwd) <= kMaxRoiBinSamples && std::fabs(ghd * gwd) <= kMaxRoiBinSamples))
          ctx.fail(ErrorCode::InvalidArgument, "roi " + std::to_string(i) + " with spatial_scale " + std::to_string(scale) + " needs " +
                                                   std::to_string(ghd) + " x " + std::to_string(gwd) + " samples per bin (more than " +
                                                   std::to_string(int64_t(kMaxRoiBinSamples)) + ")");
        int64_t gh = int64_t(ghd), gw = int64_t(gwd);
        double count = double(std::max<int64_t>(gh * gw, 1));
        for (int64_t c = 0; c < C; ++c) {
          const float* xc = x + (b * C + c) * H * W;
          for (int64_t ph = 0; ph < oh; ++ph)
            for (int64_t pw = 0; pw < ow; ++pw) {
              double acc = 0;
              bool first = true;
              for (int64_t iy = 0; iy < gh; ++iy) {
                double yy = y1 + double(ph) * bh + (double(iy) + 0.5) * bh / double(gh);
                for (int64_t ix = 0; ix < gw; ++ix) {
                  double xx = x1 + double(pw) * bw + (double(ix) + 0.5) * bw / double(gw);
                  double val = 0;
                  if (!(yy < -1.0 || yy > double(H) || xx < -1.0 || xx > double(W))) {
                    double yv = std::max(yy, 0.0), xv = std::max(xx, 0.0);
                    int64_t yl = int64_t(yv), xl = int64_t(xv), yh, xh;
                    if (yl >= H - 1) {
                      yh = yl = H - 1;
                      yv = double(yl);
                    } else {
                      yh = yl + 1;
                    }
                    if (xl >= W - 1) {
                      xh = xl = W - 1;
                      xv = double(xl);
                    } else {
                      xh = xl + 1;
                    }
                    double ly = yv - double(yl), lx = xv - double(xl), hy = 1 - ly, hx = 1 - lx;
                    double w1 = hy * hx, w2 = hy * lx, w3 = ly * hx, w4 = ly * lx;
                    double v1 = xc[yl * W + xl], v2 = xc[yl * W + xh], v3 = xc[yh * W + xl], v4 = xc[yh * W + xh];
                    if (is_max) val = std::max(std::max(std::max(w1 * v1, w2 * v2), w3 * v3), w4 * v4);
                    else val = w1 * v1 + w2 * v2 + w3 * v3 + w4 * v4;
                  }
                  if (is_max) {
                    acc = first ? val : std::max(acc, val);
                    first = false;
                  } else {
                    acc += val;
                  }
                }
              }
              y[((i * C + c) * oh + ph) * ow + pw] = float(is_max ? acc : acc / count);
            }
        }
      }
      ctx.set_output(0, Value(fromf(yf, X.dtype())));
    });
  });
}

// ---------------------------------------------------------------- NonMaxSuppression

void register_nms(OpRegistry& r) {
  add_versions(r, "NonMaxSuppression", {10, 11}, [](const Node& n) {
    int64_t cpb = n.attr_int("center_point_box", 0);
    if (cpb != 0 && cpb != 1) n.fail(ErrorCode::InvalidModel, "center_point_box must be 0 or 1");
    return kernel([cpb](KernelContext& ctx) {
      const Tensor& Bx = ctx.input(0);
      const Tensor& Sc = ctx.input(1);
      if (Bx.rank() != 3 || Bx.dim(2) != 4) ctx.fail(ErrorCode::InvalidArgument, "boxes must have shape [batch, num_boxes, 4]");
      if (Sc.rank() != 3 || Sc.dim(0) != Bx.dim(0) || Sc.dim(2) != Bx.dim(1))
        ctx.fail(ErrorCode::InvalidArgument, "scores shape " + shape_str(Sc.shape()) + " does not match boxes " + shape_str(Bx.shape()));
      int64_t max_out = 0;
      if (ctx.has_input(2) && ctx.input(2).numel() > 0) max_out = ctx.input(2).get_int(0);
      double iou_th = 0;
      if (ctx.has_input(3) && ctx.input(3).numel() > 0) iou_th = ctx.input(3).get_double(0);
      bool has_st = ctx.has_input(4) && ctx.input(4).numel() > 0;
      double st = has_st ? ctx.input(4).get_double(0) : 0;
      int64_t B = Bx.dim(0), NB = Bx.dim(1), NC = Sc.dim(1);
      std::vector<int64_t> sel;
      if (max_out > 0) {
        // corners: y1, x1, y2, x2 (min/max normalized)
        std::vector<double> box(size_t(B * NB * 4));
        for (int64_t i = 0; i < B * NB; ++i) {
          double a = Bx.get_double(i * 4), b2 = Bx.get_double(i * 4 + 1), c = Bx.get_double(i * 4 + 2), d = Bx.get_double(i * 4 + 3);
          double y1, x1, y2, x2;
          if (cpb == 0) {
            y1 = std::min(a, c); y2 = std::max(a, c);
            x1 = std::min(b2, d); x2 = std::max(b2, d);
          } else {  // x_center, y_center, width, height
            x1 = a - c / 2; x2 = a + c / 2;
            y1 = b2 - d / 2; y2 = b2 + d / 2;
          }
          box[size_t(i * 4)] = y1; box[size_t(i * 4 + 1)] = x1; box[size_t(i * 4 + 2)] = y2; box[size_t(i * 4 + 3)] = x2;
        }
        auto iou = [&](int64_t p, int64_t q) {
          const double* a = &box[size_t(p * 4)];
          const double* b2 = &box[size_t(q * 4)];
          double iy1 = std::max(a[0], b2[0]), ix1 = std::max(a[1], b2[1]), iy2 = std::min(a[2], b2[2]), ix2 = std::min(a[3], b2[3]);
          double inter = std::max(0.0, iy2 - iy1) * std::max(0.0, ix2 - ix1);
          double ua = (a[2] - a[0]) * (a[3] - a[1]) + (b2[2] - b2[0]) * (b2[3] - b2[1]) - inter;
          if (ua <= 0 || inter <= 0) return 0.0;
          return inter / ua;
        };
        std::vector<int64_t> order, kept;
        for (int64_t b = 0; b < B; ++b)
          for (int64_t c = 0; c < NC; ++c) {
            order.clear();
            kept.clear();
            for (int64_t k = 0; k < NB; ++k) {
              double s = Sc.get_double((b * NC + c) * NB + k);
              if (!has_st || s > st) order.push_back(k);
            }
            std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
              return Sc.get_double((b * NC + c) * NB + p) > Sc.get_double((b * NC + c) * NB + q);
            });
            for (int64_t k : order) {
              if (int64_t(kept.size()) >= max_out) break;
              bool keep = true;
              for (int64_t q : kept)
                if (iou(b * NB + k, b * NB + q) > iou_th) {
                  keep = false;
                  break;
                }
              if (keep) {
                kept.push_back(k);
                sel.push_back(b);
                sel.push_back(c);
                sel.push_back(k);
              }
            }
          }
      }
      Tensor& Y = ctx.output(0, DType::Int64, {int64_t(sel.size() / 3), 3});
      std::copy(sel.begin(), sel.end(), Y.data<int64_t>());
    });
  });
}

}  // namespace

void register_sampling_ops(OpRegistry& r) {
  register_resize(r);
  register_gridsample(r);
  register_affinegrid(r);
  register_roialign(r);
  register_nms(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"AffineGrid", "NonMaxSuppression"}) r.def(op).data_dependent_shape();
  for (const char* op : {"Resize", "Upsample"}) r.def(op).infer(shapes::resize);
  r.def("GridSample").infer(shapes::grid_sample);
  r.def("RoiAlign").infer(shapes::roi_align);
}

}  // namespace basalt::nnops
