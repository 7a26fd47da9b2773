// The shared helpers of ops/nn_common.hpp.
#include "ops/nn_common.hpp"

#include <algorithm>
#include <cstdint>

namespace basalt::nnops {

// Registers one factory for each opset version of `op` listed in the ONNX spec (the semantics
// that changed between versions are handled inside the factory via n.opset).
void add_versions(OpRegistry& r, const std::string& op, std::initializer_list<int> versions, const KernelFactory& f) {
  for (int v : versions) r.add(op, v, f);
}

// Any numeric tensor as float32 (no copy for float32).
Tensor tof(const Tensor& t) { return to_float32(t); }

// A float32 tensor converted to dt (float-like or integer types).
Tensor fromf(const Tensor& t, DType dt) {
  if (dt == DType::Float) return t;
  if (is_float_like(dt)) return from_float32(t, dt);
  Tensor out(dt, t.shape());
  const float* s = t.data<float>();
  int64_t n = t.numel();
  if (!visit_numeric(dt, [&]<class T>() {
        T* o = out.data<T>();
        for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(s[i]);
      }))
    BASALT_THROW(Unsupported, std::string("cannot convert float32 to ") + dtype_name(dt));
  return out;
}

std::string vec_str(const std::vector<int64_t>& v) { return shape_str(v); }

AutoPad parse_auto_pad(const Node& n) {
  const std::optional<AutoPad> a = auto_pad_of(n);
  if (!a) n.fail(ErrorCode::InvalidModel, "auto_pad has invalid value '" + n.attr_string("auto_pad", "") + "'");
  return *a;
}

WinAttrs parse_win(const Node& n, bool kernel_required) {
  WinAttrs a;
  if (kernel_required || n.has_attr("kernel_shape")) a.kernel = n.attr_ints("kernel_shape");
  a.strides = n.attr_ints("strides", {});
  a.dilations = n.attr_ints("dilations", {});
  a.pads = n.attr_ints("pads", {});
  a.auto_pad = parse_auto_pad(n);
  a.ceil_mode = n.attr_int("ceil_mode", 0) != 0;
  for (int64_t k : a.kernel)
    if (k <= 0) n.fail(ErrorCode::InvalidModel, "kernel_shape must be positive, got " + vec_str(a.kernel));
  for (int64_t s : a.strides)
    if (s <= 0) n.fail(ErrorCode::InvalidModel, "strides must be positive, got " + vec_str(a.strides));
  for (int64_t d : a.dilations)
    if (d <= 0) n.fail(ErrorCode::InvalidModel, "dilations must be positive, got " + vec_str(a.dilations));
  for (int64_t p : a.pads)
    if (p < 0) n.fail(ErrorCode::InvalidModel, "pads must be non-negative, got " + vec_str(a.pads));
  // Bounding every entry keeps the window arithmetic ((k-1)*d, in+pb+pe, (out-1)*s) well inside int64.
  for (const auto* v : {&a.kernel, &a.strides, &a.dilations, &a.pads}) {
    const char* name = v == &a.kernel ? "kernel_shape" : v == &a.strides ? "strides" : v == &a.dilations ? "dilations" : "pads";
    for (int64_t x : *v)
      if (x > INT32_MAX) n.fail(ErrorCode::InvalidModel, std::string(name) + " value " + std::to_string(x) + " is too large");
  }
  if (!a.kernel.empty()) {
    size_t nd = a.kernel.size();
    if (!a.strides.empty() && a.strides.size() != nd) n.fail(ErrorCode::InvalidModel, "strides must have one value per spatial axis");
    if (!a.dilations.empty() && a.dilations.size() != nd) n.fail(ErrorCode::InvalidModel, "dilations must have one value per spatial axis");
    if (!a.pads.empty() && a.pads.size() != 2 * nd) n.fail(ErrorCode::InvalidModel, "pads must have two values per spatial axis");
  }
  return a;
}

// Pools walk every kernel tap of every window (and size per-tap tables): cap prod(kernel_shape).
void check_pool_kernel(const Node& n, const WinAttrs& a) {
  int64_t taps = 1;
  for (int64_t k : a.kernel)
    if (__builtin_mul_overflow(taps, k, &taps) || taps > kMaxPoolTaps)
      n.fail(ErrorCode::InvalidModel, "kernel_shape " + vec_str(a.kernel) + " has more than " + std::to_string(kMaxPoolTaps) + " taps");
}

// Forward window geometry (Conv and pools).
// Conv and ConvTranspose: float-like X and W of the same rank >= 3, and W's kernel dims equal to
// the kernel_shape attribute when it is given. Returns W's kernel dims.
std::vector<int64_t> check_conv_inputs(const KernelContext& ctx, const Tensor& X, const Tensor& W,
                                       const std::vector<int64_t>& kernel_shape) {
  require_float(ctx, 0, X.dtype());
  require_float(ctx, 1, W.dtype());
  if (X.rank() < 3) ctx.fail(ErrorCode::InvalidArgument, "X must have rank >= 3, got shape " + shape_str(X.shape()));
  if (W.rank() != X.rank())
    ctx.fail(ErrorCode::InvalidArgument, "W shape " + shape_str(W.shape()) + " does not match X shape " + shape_str(X.shape()));
  std::vector<int64_t> k(W.shape().begin() + 2, W.shape().end());
  if (!kernel_shape.empty() && kernel_shape != k)
    ctx.fail(ErrorCode::InvalidArgument, "kernel_shape " + vec_str(kernel_shape) + " does not match W shape " + shape_str(W.shape()));
  return k;
}

Geom make_geom(const KernelContext& ctx, const WinAttrs& a, const Shape& in_spatial, const std::vector<int64_t>& kernel,
               bool pool) {
  Geom g;
  g.nd = int(in_spatial.size());
  size_t nd = size_t(g.nd);
  if (kernel.size() != nd)
    ctx.fail(ErrorCode::InvalidArgument, "kernel has " + std::to_string(kernel.size()) + " spatial axes but input has " +
                                             std::to_string(nd));
  if (!a.strides.empty() && a.strides.size() != nd) ctx.fail(ErrorCode::InvalidArgument, "strides length does not match input rank");
  if (!a.dilations.empty() && a.dilations.size() != nd) ctx.fail(ErrorCode::InvalidArgument, "dilations length does not match input rank");
  if (!a.pads.empty() && a.pads.size() != 2 * nd) ctx.fail(ErrorCode::InvalidArgument, "pads length does not match input rank");
  g.in = in_spatial;
  g.k = kernel;
  g.s = a.strides.empty() ? std::vector<int64_t>(nd, 1) : a.strides;
  g.d = a.dilations.empty() ? std::vector<int64_t>(nd, 1) : a.dilations;
  g.pb.assign(nd, 0);
  g.pe.assign(nd, 0);
  g.out.assign(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    if (g.k[i] <= 0 || g.s[i] <= 0 || g.d[i] <= 0)
      ctx.fail(ErrorCode::InvalidArgument, "kernel, strides and dilations must be positive, got kernel " + shape_str(kernel));
    // kernel (from W, <= 2^40), dilation and stride (<= INT32_MAX) can still overflow int64 together.
    int64_t ek = 0;
    if (__builtin_mul_overflow(g.k[i] - 1, g.d[i], &ek) || __builtin_add_overflow(ek, int64_t(1), &ek) || ek > (int64_t(1) << 50))
      ctx.fail(ErrorCode::InvalidArgument, "dilated kernel extent of kernel " + shape_str(kernel) + " with dilations " +
                                               vec_str(g.d) + " is too large");
    // The 2-D kernel's padded row buffer spans the dilated extent (pads are smaller): a window
    // within the input costs at most a few input rows (a global pool over a long 1-D signal
    // written as MaxPool), a larger one only over a bounded size.
    if (pool && ek > kMaxPoolExtent && ek > g.in[i])
      ctx.fail(ErrorCode::InvalidArgument, "dilated kernel extent " + std::to_string(ek) + " of kernel_shape " + shape_str(kernel) +
                                               " with dilations " + vec_str(g.d) + " is too large for a pool");
    int64_t in = g.in[i];
    if (a.auto_pad == AutoPad::SameUpper || a.auto_pad == AutoPad::SameLower) {
      int64_t out = (in + g.s[i] - 1) / g.s[i];
      int64_t total = std::max<int64_t>(0, (out - 1) * g.s[i] + ek - in);
      if (a.auto_pad == AutoPad::SameUpper) {
        g.pb[i] = total / 2;
        g.pe[i] = total - g.pb[i];
      } else {
        g.pe[i] = total / 2;
        g.pb[i] = total - g.pe[i];
      }
      g.out[i] = out;
    } else {
      if (a.auto_pad == AutoPad::NotSet && !a.pads.empty()) {
        g.pb[i] = a.pads[i];
        g.pe[i] = a.pads[i + nd];
        // onnxruntime's rule for pools ("Pad should be smaller than kernel"): a window made only of padding
        // has nothing to pool.
        if (pool && (g.pb[i] >= ek || g.pe[i] >= ek))
          ctx.fail(ErrorCode::InvalidArgument, "pads " + vec_str(a.pads) + " must be smaller than the (dilated) kernel " +
                                                   shape_str(kernel));
      }
      int64_t span = in + g.pb[i] + g.pe[i] - ek;
      if (span < 0)
        ctx.fail(ErrorCode::InvalidArgument, "input spatial shape " + shape_str(in_spatial) + " (with padding) is smaller than the kernel " +
                                                 shape_str(kernel));
      int64_t out;
      if (pool && a.ceil_mode) {
        out = (span + g.s[i] - 1) / g.s[i] + 1;
        if ((out - 1) * g.s[i] >= in + g.pb[i]) --out;  // last window would start in the right padding
      } else {
        out = span / g.s[i] + 1;
      }
      g.out[i] = out;
    }
  }
  return g;
}

// The window fields of a 2-D conv shape (image, kernel, steps, begin pads, output) from a resolved
// 1-D or 2-D window; 1-D runs as 2-D with H = 1.
void set_conv2d_window(const Geom& g, kernels::Conv2dShape& s) {
  const size_t o = g.nd == 2 ? 1 : 0;
  s.H = g.nd == 2 ? g.in[0] : 1;
  s.W = g.in[o];
  s.KH = g.nd == 2 ? g.k[0] : 1;
  s.KW = g.k[o];
  if (g.nd == 2) {
    s.sh = g.s[0];
    s.dh = g.d[0];
    s.pt = g.pb[0];
    s.OH = g.out[0];
  }
  s.sw = g.s[o];
  s.dw = g.d[o];
  s.pl = g.pb[o];
  s.OW = g.out[o];
}

// The 2-D pooling kernels' geometry (kernels/pool.hpp) of a resolved 2-D window.
// A pool's kernel may be as large as its padded input (pads < kernel), so a tiny input can ask for
// O(output x kernel) work far beyond any real model: refuse it instead of running for hours.
// separable: the 2-D row kernel (kernels/pool.hpp), which costs kh*W + kw*OW per output row.
void check_pool_work(const KernelContext& ctx, const Geom& g, double planes, bool separable) {
  double work = planes;
  if (separable) {
    work *= double(g.out[0]) * (double(g.k[0]) * double(g.in[1]) + double(g.k[1]) * double(g.out[1]));
  } else {
    work *= double(g.out_size()) * double(g.k_size()) * double(g.nd);
  }
  const double cap = separable ? double(int64_t(1) << 40) : double(int64_t(1) << 38);
  if (work > cap)
    ctx.fail(ErrorCode::InvalidArgument, "kernel_shape " + shape_str(g.k) + " over the output " + shape_str(g.out) + " needs " +
                                             std::to_string(work) + " tap operations (more than " + std::to_string(cap) + ")");
}

kernels::Pool2D pool2d_of(const Geom& g, bool avg, bool count_include_pad) {
  kernels::Pool2D p2;
  p2.H = g.in[0], p2.W = g.in[1], p2.OH = g.out[0], p2.OW = g.out[1];
  p2.kh = g.k[0], p2.kw = g.k[1], p2.sh = g.s[0], p2.sw = g.s[1], p2.dh = g.d[0], p2.dw = g.d[1];
  p2.ph = g.pb[0], p2.pw = g.pb[1], p2.ph_end = g.pe[0], p2.pw_end = g.pe[1];
  p2.avg = avg;
  p2.count_include_pad = count_include_pad;
  return p2;
}

kernels::Activation parse_fused_activation(const Node& n) {
  kernels::Activation act;
  std::string err;
  if (!kernels::parse_activation(n.attr_string("activation", ""), n.attr_floats("activation_params", {}), act, &err))
    n.fail(ErrorCode::Unsupported, err);
  if (!kernels::parse_post_affine(n.attr_floats("post_affine", {}), act, &err)) n.fail(ErrorCode::InvalidModel, err);
  return act;
}

}  // namespace basalt::nnops
