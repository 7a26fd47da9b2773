// Reference kernels: nn ops (Conv, ConvTranspose, pools, MatMul, Gemm, Resize, GridSample, ...).
//
// Float-like inputs (float16, bfloat16, double) are computed through float32.
#include "ops/common.hpp"
#include "kernels/conv.hpp"
#include "kernels/gemm.hpp"
#include "kernels/nchwc.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/pool.hpp"
#include "kernels/winograd.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <cstring>
#include <numeric>
#include <type_traits>

namespace basalt {

namespace {

// ---------------------------------------------------------------- small helpers

// Registers one factory for each opset version of `op` listed in the ONNX spec (the semantics
// that changed between versions are handled inside the factory via n.opset).
void add_versions(OpRegistry& r, const std::string& op, std::initializer_list<int> versions, const KernelFactory& f) {
  for (int v : versions) r.add(op, v, f);
}

bool is_floatlike(DType dt) {
  return dt == DType::Float || dt == DType::Double || dt == DType::Float16 || dt == DType::BFloat16;
}

// Any numeric tensor as float32 (no copy for float32).
Tensor tof(const Tensor& t) { return to_float32(t); }

// A float32 tensor converted to dt (float-like or integer types).
Tensor fromf(const Tensor& t, DType dt) {
  if (dt == DType::Float) return t;
  if (is_floatlike(dt)) return from_float32(t, dt);
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

void require_float(const KernelContext& ctx, int i, DType dt) {
  if (!is_floatlike(dt)) unsupported_dtype(ctx, i, dt);
}

std::string vec_str(const std::vector<int64_t>& v) { return shape_str(v); }

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

AutoPad parse_auto_pad(const Node& n) {
  std::string s = n.attr_string("auto_pad", "NOTSET");
  if (s == "NOTSET" || s.empty()) return AutoPad::NotSet;
  if (s == "SAME_UPPER") return AutoPad::SameUpper;
  if (s == "SAME_LOWER") return AutoPad::SameLower;
  if (s == "VALID") return AutoPad::Valid;
  n.fail(ErrorCode::InvalidModel, "auto_pad has invalid value '" + s + "'");
}

// Window attributes of Conv/ConvTranspose/pools, parsed at load.
struct WinAttrs {
  std::vector<int64_t> kernel, strides, dilations, pads;
  AutoPad auto_pad = AutoPad::NotSet;
  bool ceil_mode = false;
};

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
constexpr int64_t kMaxPoolTaps = int64_t(1) << 24;
constexpr int64_t kMaxPoolExtent = int64_t(1) << 20;  // per axis, dilations included
void check_pool_kernel(const Node& n, const WinAttrs& a) {
  int64_t taps = 1;
  for (int64_t k : a.kernel)
    if (__builtin_mul_overflow(taps, k, &taps) || taps > kMaxPoolTaps)
      n.fail(ErrorCode::InvalidModel, "kernel_shape " + vec_str(a.kernel) + " has more than " + std::to_string(kMaxPoolTaps) + " taps");
}

// Resolved geometry of a sliding window over nd spatial axes.
struct Geom {
  int nd = 0;
  std::vector<int64_t> in, k, s, d, pb, pe, out;
  int64_t in_size() const { return shape_numel(in); }
  int64_t out_size() const { return shape_numel(out); }
  int64_t k_size() const { return shape_numel(k); }
};

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

// Iterate over an N-d index space: calls fn(index vector) in row-major order.
template <class Fn>
void for_each_index(const std::vector<int64_t>& shape, Fn&& fn) {
  int64_t total = shape_numel(shape);
  if (total == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t t = 0; t < total; ++t) {
    fn(idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// float32 C[M,N] += A[M,K] * B[K,N]: 4x8 register tiles (GCC/Clang vector extensions, plain
// SSE on x86-64), scalar i-k-j loops for the edges.
typedef float v4f __attribute__((vector_size(16)));
inline v4f ld4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void st4(float* p, v4f v) { std::memcpy(p, &v, sizeof v); }

// y[0..n) += a * x[0..n)
inline void axpy(int64_t n, float a, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    st4(y + i, ld4(y + i) + a * ld4(x + i));
    st4(y + i + 4, ld4(y + i + 4) + a * ld4(x + i + 4));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

void sgemm_acc(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  int64_t i = 0;
  int64_t NP = N / 8 * 8;
  if (M >= 8 && NP >= 16 && K >= 8) {
    // Pack the 8-column panels of B contiguously: panel p holds B[k, 8p..8p+8) for every k.
    std::vector<float> bp(size_t(NP * K));
    for (int64_t p = 0; p < NP / 8; ++p)
      for (int64_t k = 0; k < K; ++k) std::memcpy(&bp[size_t((p * K + k) * 8)], B + k * ldb + p * 8, 8 * sizeof(float));
    for (; i + 4 <= M; i += 4) {
      const float* a0 = A + i * lda;
      const float* a1 = a0 + lda;
      const float* a2 = a1 + lda;
      const float* a3 = a2 + lda;
      float* c0 = C + i * ldc;
      float* c1 = c0 + ldc;
      float* c2 = c1 + ldc;
      float* c3 = c2 + ldc;
      for (int64_t j = 0; j < NP; j += 8) {
        v4f r00 = ld4(c0 + j), r01 = ld4(c0 + j + 4), r10 = ld4(c1 + j), r11 = ld4(c1 + j + 4);
        v4f r20 = ld4(c2 + j), r21 = ld4(c2 + j + 4), r30 = ld4(c3 + j), r31 = ld4(c3 + j + 4);
        const float* b = bp.data() + j * K;
        for (int64_t k = 0; k < K; ++k, b += 8) {
          v4f b0 = ld4(b), b1 = ld4(b + 4);
          float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
          r00 += x0 * b0;
          r01 += x0 * b1;
          r10 += x1 * b0;
          r11 += x1 * b1;
          r20 += x2 * b0;
          r21 += x2 * b1;
          r30 += x3 * b0;
          r31 += x3 * b1;
        }
        st4(c0 + j, r00); st4(c0 + j + 4, r01); st4(c1 + j, r10); st4(c1 + j + 4, r11);
        st4(c2 + j, r20); st4(c2 + j + 4, r21); st4(c3 + j, r30); st4(c3 + j + 4, r31);
      }
      for (int64_t j = NP; j < N; ++j) {
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        for (int64_t k = 0; k < K; ++k) {
          float bv = B[k * ldb + j];
          s0 += a0[k] * bv;
          s1 += a1[k] * bv;
          s2 += a2[k] * bv;
          s3 += a3[k] * bv;
        }
        c0[j] += s0; c1[j] += s1; c2[j] += s2; c3[j] += s3;
      }
    }
  }
  for (; i + 4 <= M; i += 4) {
    const float* a0 = A + i * lda;
    const float* a1 = a0 + lda;
    const float* a2 = a1 + lda;
    const float* a3 = a2 + lda;
    float* c0 = C + i * ldc;
    float* c1 = c0 + ldc;
    float* c2 = c1 + ldc;
    float* c3 = c2 + ldc;
    int64_t j = 0;
    for (; j + 8 <= N; j += 8) {
      v4f r00 = ld4(c0 + j), r01 = ld4(c0 + j + 4), r10 = ld4(c1 + j), r11 = ld4(c1 + j + 4);
      v4f r20 = ld4(c2 + j), r21 = ld4(c2 + j + 4), r30 = ld4(c3 + j), r31 = ld4(c3 + j + 4);
      const float* b = B + j;
      for (int64_t k = 0; k < K; ++k, b += ldb) {
        v4f b0 = ld4(b), b1 = ld4(b + 4);
        float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
        r00 += x0 * b0;
        r01 += x0 * b1;
        r10 += x1 * b0;
        r11 += x1 * b1;
        r20 += x2 * b0;
        r21 += x2 * b1;
        r30 += x3 * b0;
        r31 += x3 * b1;
      }
      st4(c0 + j, r00); st4(c0 + j + 4, r01); st4(c1 + j, r10); st4(c1 + j + 4, r11);
      st4(c2 + j, r20); st4(c2 + j + 4, r21); st4(c3 + j, r30); st4(c3 + j + 4, r31);
    }
    for (; j < N; ++j) {
      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t k = 0; k < K; ++k) {
        float bv = B[k * ldb + j];
        s0 += a0[k] * bv;
        s1 += a1[k] * bv;
        s2 += a2[k] * bv;
        s3 += a3[k] * bv;
      }
      c0[j] += s0; c1[j] += s1; c2[j] += s2; c3[j] += s3;
    }
  }
  for (; i < M; ++i) {
    float* c = C + i * ldc;
    const float* a = A + i * lda;
    for (int64_t k = 0; k < K; ++k) axpy(N, a[k], B + k * ldb, c);
  }
}

// C[M,N] += A[M,K] * B[K,N] (row-major, leading dims given). i-k-j order.
template <class T>
void gemm_acc(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm_acc(M, N, K, A, lda, B, ldb, C, ldc);
    return;
  }
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    const T* a = A + i * lda;
    for (int64_t k = 0; k < K; ++k) {
      T av = a[k];
      const T* b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) c[j] += av * b[j];
    }
  }
}

// ---------------------------------------------------------------- Conv

// im2col of positions [p0, p0+cols) of the output for one group: buf[CK, cols].
void im2col(const float* x, int64_t Cg, const Geom& g, int64_t p0, int64_t cols, float* buf, std::vector<int64_t>& starts) {
  int nd = g.nd;
  starts.assign(size_t(cols) * size_t(nd), 0);
  {
    // decompose p0 into output coordinates
    std::vector<int64_t> oc(size_t(nd), 0);
    int64_t p = p0;
    for (int d = nd - 1; d >= 0; --d) {
      oc[size_t(d)] = p % g.out[size_t(d)];
      p /= g.out[size_t(d)];
    }
    for (int64_t j = 0; j < cols; ++j) {
      for (int d = 0; d < nd; ++d) starts[size_t(j * nd + d)] = oc[size_t(d)] * g.s[size_t(d)] - g.pb[size_t(d)];
      for (int d = nd - 1; d >= 0; --d) {
        if (++oc[size_t(d)] < g.out[size_t(d)]) break;
        oc[size_t(d)] = 0;
      }
    }
  }
  int64_t K = g.k_size();
  int64_t in_sp = g.in_size();
  std::vector<int64_t> off(static_cast<size_t>(nd));
  std::vector<int64_t> kk(size_t(nd), 0);
  for (int64_t kidx = 0; kidx < K; ++kidx) {
    for (int d = 0; d < nd; ++d) off[size_t(d)] = kk[size_t(d)] * g.d[size_t(d)];
    for (int64_t c = 0; c < Cg; ++c) {
      float* row = buf + (c * K + kidx) * cols;
      const float* xc = x + c * in_sp;
      if (nd == 2) {
        int64_t H = g.in[0], W = g.in[1];
        for (int64_t j = 0; j < cols; ++j) {
          int64_t h = starts[size_t(2 * j)] + off[0], w = starts[size_t(2 * j + 1)] + off[1];
          row[j] = (h >= 0 && h < H && w >= 0 && w < W) ? xc[h * W + w] : 0.f;
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) {
          int64_t idx = 0;
          bool ok = true;
          for (int d = 0; d < nd; ++d) {
            int64_t v = starts[size_t(j * nd + d)] + off[size_t(d)];
            if (v < 0 || v >= g.in[size_t(d)]) {
              ok = false;
              break;
            }
            idx = idx * g.in[size_t(d)] + v;
          }
          row[j] = ok ? xc[idx] : 0.f;
        }
      }
    }
    for (int d = nd - 1; d >= 0; --d) {
      if (++kk[size_t(d)] < g.k[size_t(d)]) break;
      kk[size_t(d)] = 0;
    }
  }
}

// Direct 2-D convolution for groups with one input channel (depthwise): im2col would dominate.
void conv_depthwise2d(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C, int64_t M, int64_t G,
                      const Geom& g) {
  int64_t Mg = M / G, H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1], KH = g.k[0], KW = g.k[1];
  int64_t sh = g.s[0], sw = g.s[1], dh = g.d[0], dw = g.d[1], ph = g.pb[0], pw = g.pb[1];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      int64_t c = m / Mg;
      const float* xc = x + (n * C + c) * H * W;
      float* yc = y + (n * M + m) * OH * OW;
      const float* wm = w + m * KH * KW;
      float bv = b ? b[m] : 0.f;
      for (int64_t i = 0; i < OH * OW; ++i) yc[i] = bv;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float* yr = yc + oh * OW;
        for (int64_t kh = 0; kh < KH; ++kh) {
          int64_t ih = oh * sh - ph + kh * dh;
          if (ih < 0 || ih >= H) continue;
          for (int64_t kw = 0; kw < KW; ++kw) {
            float wv = wm[kh * KW + kw];
            int64_t offw = kw * dw - pw;
            // ow range with 0 <= ow*sw + offw < W
            int64_t lo = offw >= 0 ? 0 : (-offw + sw - 1) / sw;
            int64_t hi = W - 1 - offw < 0 ? 0 : std::min<int64_t>(OW, (W - 1 - offw) / sw + 1);
            const float* xr = xc + ih * W + offw;
            if (sw == 1) {
              if (hi > lo) axpy(hi - lo, wv, xr + lo, yr + lo);
            } else
              for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * sw];
          }
        }
      }
    }
}

void conv_f32(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C, int64_t M, int64_t G,
              const Geom& g) {
  int64_t Cg = C / G, Mg = M / G;
  if (Cg == 1 && G > 1 && g.nd == 2) {
    conv_depthwise2d(x, w, b, y, N, C, M, G, g);
    return;
  }
  int64_t in_sp = g.in_size(), out_sp = g.out_size(), K = g.k_size(), CK = Cg * K;
  bool direct = K == 1;
  for (int i = 0; i < g.nd; ++i)
    if (g.s[size_t(i)] != 1 || g.pb[size_t(i)] != 0 || g.pe[size_t(i)] != 0) direct = false;
  int64_t chunk = std::max<int64_t>(256, (int64_t(1) << 18) / std::max<int64_t>(CK, 1));
  chunk = std::min(chunk, out_sp);
  std::vector<float> buf;
  if (!direct) buf.resize(size_t(CK * chunk));
  std::vector<int64_t> starts;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gi = 0; gi < G; ++gi) {
      const float* xg = x + (n * C + gi * Cg) * in_sp;
      float* yg = y + (n * M + gi * Mg) * out_sp;
      const float* wg = w + gi * Mg * CK;
      for (int64_t p0 = 0; p0 < out_sp; p0 += chunk) {
        int64_t cols = std::min(chunk, out_sp - p0);
        const float* B;
        int64_t ldb;
        if (direct) {
          B = xg + p0;
          ldb = in_sp;
        } else {
          im2col(xg, Cg, g, p0, cols, buf.data(), starts);
          B = buf.data();
          ldb = cols;
        }
        gemm_acc<float>(Mg, cols, CK, wg, CK, B, ldb, yg + p0, out_sp);
      }
      if (b)
        for (int64_t m = 0; m < Mg; ++m) {
          float bv = b[gi * Mg + m];
          float* row = yg + m * out_sp;
          for (int64_t j = 0; j < out_sp; ++j) row[j] += bv;
        }
    }
}

// Conv and basalt::FusedConv share one kernel class. FusedConv (domain "basalt", opset 1) is
// emitted by the optimizer; its semantics:
//   inputs  X, W, B (optional, [M]), Z (optional residual, exactly Y's shape)
//   attrs   every Conv attribute (auto_pad, dilations, group, kernel_shape, pads, strides), plus
//           activation: "" | Relu | Clip | HardSigmoid | HardSwish | Sigmoid | LeakyRelu | Tanh
//           activation_params: floats (Clip [min, max], HardSigmoid [alpha, beta], LeakyRelu [alpha])
//           post_affine: floats [mul, add] (optional): Y = act(...) * mul + add
//   Y = act(conv(X, W) + B + Z), with each activation's float semantics equal to the ONNX op's
//   (src/kernels/activation.hpp). An unknown activation is an Unsupported error at load.
// 1-D and 2-D float convolutions run on the packed-GEMM / depthwise kernels of src/kernels/conv.hpp
// (other float-like dtypes through float32); 3-D and larger stay on the reference loops above.
kernels::Activation parse_fused_activation(const Node& n) {
  kernels::Activation act;
  std::string err;
  if (!kernels::parse_activation(n.attr_string("activation", ""), n.attr_floats("activation_params", {}), act, &err))
    n.fail(ErrorCode::Unsupported, err);
  if (!kernels::parse_post_affine(n.attr_floats("post_affine", {}), act, &err)) n.fail(ErrorCode::InvalidModel, err);
  return act;
}

class ConvKernel final : public OpKernel {
 public:
  ConvKernel(WinAttrs a, int64_t group, kernels::Activation act, bool fused)
      : a_(std::move(a)), group_(group), act_(act), fused_(fused) {}

  void prepare(const PrepareContext& pc) override {
    const Tensor* w = pc.constant.size() > 1 ? pc.constant[1] : nullptr;
    if (!w || w->dtype() != DType::Float || (w->rank() != 3 && w->rank() != 4) || w->numel() == 0) return;
    kernels::Conv2dShape s = weight_shape(w->shape());
    if (s.M % group_ != 0 || s.is_depthwise()) return;
    packed_shape_ = w->shape();
    packed_src_ = w->raw();
    // 3x3 stride-1 convs: Winograd weights instead of im2col ones (kernels/winograd.hpp)
    // The image size, when the model fixes it, decides (see winograd_choose_tile).
    const Shape* xs = pc.shape.size() > 0 ? pc.shape[0] : nullptr;
    int64_t spatial = xs && xs->size() == 4 ? (*xs)[2] * (*xs)[3] : -1;
    if (int tile = pc.winograd && unit_steps() && w->rank() == 4 ? kernels::winograd_choose_tile(s, spatial) : 0) {
      wino_ = kernels::winograd_pack_weights(kernels::gemm_arch_best(), s, w->data<float>(), tile);
      return;
    }
    packed_ = kernels::pack_conv_weights(kernels::gemm_arch_best(), s, w->data<float>());
  }
  size_t packed_bytes() const override { return packed_.bytes() + wino_.bytes(); }
  bool replaces_constant(int input) const override { return input == 1 && packed_bytes() > 0; }
  size_t workspace_bytes(std::span<const Shape> in, int threads) const override {
    if (in.size() < 2 || (in[1].size() != 3 && in[1].size() != 4)) return 0;
    if (in[1][1] > INT64_MAX / group_) return 0;  // the run rejects the channel count
    kernels::Conv2dShape s = weight_shape(in[1]);
    if (s.M % group_ != 0 || s.is_depthwise()) return 0;
    // Upper bound over output sizes (the chunk never exceeds 2 MB of packed columns + a panel).
    s.OH = 1;
    s.OW = int64_t(1) << 40;
    const kernels::GemmArch& g = kernels::gemm_arch_best();
    // (A W fed at run time over transformed weights takes the im2col path; its workspace then
    // comes from the heap, as for a W fed over packed weights.)
    if (wino_.tile && in[1] == packed_shape_)
      return size_t(kernels::winograd_workspace_floats(g, s, wino_.tile, threads)) * sizeof(float) + 128;
    return size_t(kernels::conv2d_workspace_floats(g, s, in[1] == packed_shape_, threads)) * sizeof(float) + 128;
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.input(0);
    const Tensor& W = ctx.input(1);
    Shape ksp = check_conv_inputs(ctx, X, W, a_.kernel);
    int64_t N = X.dim(0), C = X.dim(1), M = W.dim(0), group = group_;
    int64_t wc = 0;
    if (__builtin_mul_overflow(W.dim(1), group, &wc) || wc != C)
      ctx.fail(ErrorCode::InvalidArgument, "channel mismatch: X has " + std::to_string(C) + " channels, W " +
                                               shape_str(W.shape()) + " with group " + std::to_string(group));
    if (M % group != 0) ctx.fail(ErrorCode::InvalidArgument, "output channels not divisible by group");
    Geom g = make_geom(ctx, a_, Shape(X.shape().begin() + 2, X.shape().end()), ksp, false);
    Tensor bf;
    if (ctx.has_input(2)) {
      const Tensor& B = ctx.input(2);
      require_float(ctx, 2, B.dtype());
      if (B.numel() != M) ctx.fail(ErrorCode::InvalidArgument, "B must have " + std::to_string(M) + " elements, got " + shape_str(B.shape()));
      bf = tof(B);
    }
    Shape ys = {N, M};
    ys.insert(ys.end(), g.out.begin(), g.out.end());
    Tensor zf;
    if (fused_ && ctx.has_input(3)) {
      const Tensor& Z = ctx.input(3);
      require_float(ctx, 3, Z.dtype());
      if (Z.shape() != ys)
        ctx.fail(ErrorCode::InvalidArgument, "residual Z has shape " + shape_str(Z.shape()) + ", expected the output shape " + shape_str(ys));
      zf = tof(Z);
    }
    Tensor xf = tof(X), wf = tof(W);
    const float* bias = bf.defined() ? bf.data<float>() : nullptr;
    const float* res = zf.defined() ? zf.data<float>() : nullptr;
    const bool f32 = X.dtype() == DType::Float;
    Tensor ylocal;
    if (!f32) ylocal = Tensor::uninit(DType::Float, ys);
    Tensor& yf = f32 ? ctx.output_uninit(0, DType::Float, ys) : ylocal;
    if (yf.numel() == 0) {  // nothing to compute (and `group` may be large over 0 channels)
      if (!f32) ctx.set_output(0, Value(fromf(yf, X.dtype())));
      return;
    }
    float* y = yf.data<float>();
    if (g.nd > 2) {  // reference loops, then the fused residual and activation
      std::fill(y, y + yf.numel(), 0.f);
      conv_f32(xf.data<float>(), wf.data<float>(), bias, y, N, C, M, group, g);
      for (int64_t i = 0, n = yf.numel(); i < n; ++i) y[i] = kernels::apply_activation(act_, y[i] + (res ? res[i] : 0.f));
    } else {
      kernels::Conv2dShape s;
      s.N = N;
      s.C = C;
      s.M = M;
      s.G = group;
      set_conv2d_window(g, s);
      const kernels::GemmArch& arch = kernels::gemm_arch_best();
      // The packed copy is used only for the very tensor it was made from: an initializer that is
      // also a graph input can be overridden by a feed.
      const bool use_packed = !packed_.groups.empty() && W.shape() == packed_shape_ && (W.raw() == packed_src_ || W.raw() == nullptr);
      const int threads = ctx.pool() ? ctx.pool()->threads() : 1;
      if (wino_.tile && W.shape() == packed_shape_ && (W.raw() == packed_src_ || W.raw() == nullptr) &&
          kernels::winograd_applicable(s)) {
        float* work = static_cast<float*>(
            ctx.workspace(size_t(kernels::winograd_workspace_floats(arch, s, wino_.tile, threads)) * sizeof(float) + 128));
        kernels::conv2d_winograd(arch, s, xf.data<float>(), wino_, bias, res, act_, y, ctx.pool(), work);
        if (!f32) ctx.set_output(0, Value(fromf(yf, X.dtype())));
        return;
      }
      size_t ws = size_t(kernels::conv2d_workspace_floats(arch, s, use_packed, threads)) * sizeof(float) + 128;
      float* work = s.is_depthwise() ? nullptr : static_cast<float*>(ctx.workspace(ws));
      kernels::conv2d(arch, s, xf.data<float>(), wf.data<float>(), use_packed ? &packed_ : nullptr, bias, res, act_, y,
                      ctx.pool(), work);
    }
    if (!f32) ctx.set_output(0, Value(fromf(yf, X.dtype())));
  }

 private:
  kernels::Conv2dShape weight_shape(const Shape& w) const {
    kernels::Conv2dShape s;
    s.M = w[0];
    s.G = group_;
    s.C = w[1] * group_;
    s.KH = w.size() == 4 ? w[2] : 1;
    s.KW = w.back();
    return s;
  }

  WinAttrs a_;
  int64_t group_;
  kernels::Activation act_;
  bool fused_;
  // Strides and dilations all 1 (attributes absent or 1): Winograd may apply.
  bool unit_steps() const {
    auto ones = [](const std::vector<int64_t>& v) { return std::all_of(v.begin(), v.end(), [](int64_t x) { return x == 1; }); };
    return ones(a_.strides) && ones(a_.dilations);
  }

  kernels::PackedConvWeights packed_;
  kernels::WinogradWeights wino_;  // 3x3 stride-1 convs (then packed_ is empty)
  Shape packed_shape_;
  const void* packed_src_ = nullptr;  // the constant tensor's data the packed copy was made from
};

void register_conv(OpRegistry& r) {
  auto make = [](bool fused) {
    return [fused](const Node& n) -> std::unique_ptr<OpKernel> {
      WinAttrs a = parse_win(n, false);
      int64_t group = n.attr_int("group", 1);
      if (group <= 0) n.fail(ErrorCode::InvalidModel, "group must be positive");
      if (group > INT32_MAX) n.fail(ErrorCode::InvalidModel, "group value " + std::to_string(group) + " is too large");
      kernels::Activation act = fused ? parse_fused_activation(n) : kernels::Activation{};
      return std::make_unique<ConvKernel>(a, group, act, fused);
    };
  };
  add_versions(r, "Conv", {1, 11, 22}, make(false));
  r.add("basalt", "FusedConv", 1, INT_MAX, make(true));
}

// ---------------------------------------------------------------- ConvTranspose

// Scatter-add columns col[ch*K + kidx, j] (positions j in [p0, p0+cols) of grid `gshape`) into
// out[ch, out_spatial]. Geometry: out coord = grid coord * s - pb + k * d. 2-D: the channels
// (each its own output plane) are shared by the pool's threads.
void col2im_add(const float* col, int64_t ld, int64_t channels, const std::vector<int64_t>& gshape, int64_t p0, int64_t cols,
                const std::vector<int64_t>& k, const std::vector<int64_t>& s, const std::vector<int64_t>& d,
                const std::vector<int64_t>& pb, const std::vector<int64_t>& out_sp_shape, float* out,
                ThreadPool* pool = nullptr) {
  int nd = int(k.size());
  int64_t K = shape_numel(k), out_sp = shape_numel(out_sp_shape);
  if (nd == 2) {  // the common case without per-element index arithmetic over nd axes
    const int64_t GW = gshape[1], OH = out_sp_shape[0], OW = out_sp_shape[1];
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, K * cols));
    // the geometry as locals: the closure's references would be reloaded around every store
    const int64_t KH = k[0], KW = k[1], sh = s[0], sw = s[1], dh = d[0], dw = d[1], pt = pb[0], pl = pb[1];
    parallel_for(pool, channels, grain, [=](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        float* oc = out + c * out_sp;
        for (int64_t kh = 0; kh < KH; ++kh)
          for (int64_t kw = 0; kw < KW; ++kw) {
            const float* row = col + (c * K + kh * KW + kw) * ld;
            int64_t j = 0;
            while (j < cols) {  // one grid row at a time
              const int64_t gp = p0 + j, gh = gp / GW, gw = gp % GW;
              const int64_t len = std::min(cols - j, GW - gw);
              const int64_t oh = gh * sh - pt + kh * dh;
              if (oh >= 0 && oh < OH) {
                // grid positions t in [t0, t1) land inside the output row
                const int64_t ow0 = gw * sw - pl + kw * dw;
                // (a segment that starts at a chunk boundary may begin past the row's end)
                const int64_t t0 = ow0 >= 0 ? 0 : (-ow0 + sw - 1) / sw;
                const int64_t t1 = ow0 > OW - 1 ? 0 : std::min(len, (OW - 1 - ow0) / sw + 1);
                float* o = oc + oh * OW;
                const float* r = row + j;
                for (int64_t t = t0; t < t1; ++t) o[ow0 + t * sw] += r[t];
              }
              j += len;
            }
          }
      }
    });
    return;
  }
  std::vector<int64_t> starts(size_t(cols * nd));
  std::vector<int64_t> gc(size_t(nd), 0);
  int64_t p = p0;
  for (int i = nd - 1; i >= 0; --i) {
    gc[size_t(i)] = p % gshape[size_t(i)];
    p /= gshape[size_t(i)];
  }
  for (int64_t j = 0; j < cols; ++j) {
    for (int i = 0; i < nd; ++i) starts[size_t(j * nd + i)] = gc[size_t(i)] * s[size_t(i)] - pb[size_t(i)];
    for (int i = nd - 1; i >= 0; --i) {
      if (++gc[size_t(i)] < gshape[size_t(i)]) break;
      gc[size_t(i)] = 0;
    }
  }
  std::vector<int64_t> kk(static_cast<size_t>(nd), 0), off(static_cast<size_t>(nd));
  for (int64_t kidx = 0; kidx < K; ++kidx) {
    for (int i = 0; i < nd; ++i) off[size_t(i)] = kk[size_t(i)] * d[size_t(i)];
    for (int64_t c = 0; c < channels; ++c) {
      const float* row = col + (c * K + kidx) * ld;
      float* oc = out + c * out_sp;
      for (int64_t j = 0; j < cols; ++j) {
        int64_t idx = 0;
        bool ok = true;
        for (int i = 0; i < nd; ++i) {
          int64_t v = starts[size_t(j * nd + i)] + off[size_t(i)];
          if (v < 0 || v >= out_sp_shape[size_t(i)]) {
            ok = false;
            break;
          }
          idx = idx * out_sp_shape[size_t(i)] + v;
        }
        if (ok) oc[idx] += row[j];
      }
    }
    for (int i = nd - 1; i >= 0; --i) {
      if (++kk[size_t(i)] < k[size_t(i)]) break;
      kk[size_t(i)] = 0;
    }
  }
}

// ConvTranspose's scratch: GEMM columns for `chunk` input positions at a time (MK = output
// channels per group x kernel size, Cg = input channels per group) and the GEMM's own workspace.
struct ConvTransposeScratch {
  int64_t chunk = 0, col_floats = 0, gemm_floats = 0;
};
static ConvTransposeScratch convtranspose_scratch(int64_t MK, int64_t Cg, int64_t in_sp) {
  ConvTransposeScratch sc;
  sc.chunk = std::max<int64_t>(1, std::min<int64_t>(in_sp, std::max<int64_t>(256, (int64_t(1) << 18) / std::max<int64_t>(MK, 1))));
  sc.col_floats = (MK * sc.chunk + 15) / 16 * 16;
  sc.gemm_floats = kernels::sgemm_workspace_floats(kernels::gemm_arch_best(), MK, sc.chunk, Cg, false, false) + 32;
  return sc;
}

void register_convtranspose(OpRegistry& r) {
  add_versions(r, "ConvTranspose", {1, 11, 22}, [](const Node& n) {
    WinAttrs a = parse_win(n, false);
    int64_t group = n.attr_int("group", 1);
    if (group <= 0) n.fail(ErrorCode::InvalidModel, "group must be positive");
    if (group > INT32_MAX) n.fail(ErrorCode::InvalidModel, "group value " + std::to_string(group) + " is too large");
    std::vector<int64_t> output_padding = n.attr_ints("output_padding", {});
    for (int64_t v : output_padding)
      if (v > INT32_MAX || v < -INT32_MAX)
        n.fail(ErrorCode::InvalidModel, "output_padding value " + std::to_string(v) + " is too large");
    std::vector<int64_t> output_shape = n.attr_ints("output_shape", {});
    return kernel([a, group, output_padding, output_shape](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& W = ctx.input(1);
      std::vector<int64_t> k = check_conv_inputs(ctx, X, W, a.kernel);
      int64_t N = X.dim(0), C = X.dim(1);
      if (W.dim(0) != C || C % group != 0)
        ctx.fail(ErrorCode::InvalidArgument, "channel mismatch: X has " + std::to_string(C) + " channels, W is " + shape_str(W.shape()));
      int64_t Mg = W.dim(1), M = 0, Cg = C / group;
      if (__builtin_mul_overflow(Mg, group, &M))
        ctx.fail(ErrorCode::InvalidArgument, "output channels of W " + shape_str(W.shape()) + " times group " + std::to_string(group) +
                                                 " overflow");
      size_t nd = size_t(X.rank() - 2);
      std::vector<int64_t> in(X.shape().begin() + 2, X.shape().end());
      std::vector<int64_t> s = a.strides.empty() ? std::vector<int64_t>(nd, 1) : a.strides;
      std::vector<int64_t> d = a.dilations.empty() ? std::vector<int64_t>(nd, 1) : a.dilations;
      std::vector<int64_t> op = output_padding.empty() ? std::vector<int64_t>(nd, 0) : output_padding;
      if (s.size() != nd || d.size() != nd || op.size() != nd || (!a.pads.empty() && a.pads.size() != 2 * nd))
        ctx.fail(ErrorCode::InvalidArgument, "strides/dilations/output_padding/pads do not match the input rank");
      std::vector<int64_t> pb(nd, 0), pe(nd, 0), out(nd, 0);
      std::vector<int64_t> target;
      if (!output_shape.empty()) {
        if (output_shape.size() < nd) ctx.fail(ErrorCode::InvalidArgument, "output_shape has too few values");
        target.assign(output_shape.end() - long(nd), output_shape.end());
      } else if (a.auto_pad == AutoPad::SameUpper || a.auto_pad == AutoPad::SameLower) {
        for (size_t i = 0; i < nd; ++i) target.push_back(in[i] * s[i]);
      }
      for (size_t i = 0; i < nd; ++i) {
        // k <= 2^40 (from W), attributes <= INT32_MAX (parse_win), but hostile combinations still overflow
        int64_t ek = 0, full = 0, total = 0;
        bool ovf = __builtin_mul_overflow(k[i] - 1, d[i], &ek) || __builtin_add_overflow(ek, int64_t(1), &ek) ||
                   __builtin_mul_overflow(s[i], in[i] - 1, &full) || __builtin_add_overflow(full, op[i], &full) ||
                   __builtin_add_overflow(full, ek, &full) || (!target.empty() && __builtin_sub_overflow(full, target[i], &total));
        if (ovf)
          ctx.fail(ErrorCode::InvalidArgument, "output size of kernel " + vec_str(k) + " with strides " + vec_str(s) + ", dilations " +
                                                   vec_str(d) + " and output_padding " + vec_str(op) + " overflows");
        if (!target.empty()) {
          if (total < 0) total = 0;  // output larger than the full result: extra cells stay zero
          if (a.auto_pad == AutoPad::SameUpper) {
            pb[i] = total / 2;
            pe[i] = total - pb[i];
          } else {
            pe[i] = total / 2;
            pb[i] = total - pe[i];
          }
          out[i] = target[i];
        } else {
          if (a.auto_pad == AutoPad::NotSet && !a.pads.empty()) {
            pb[i] = a.pads[i];
            pe[i] = a.pads[i + nd];
          }
          out[i] = full - pb[i] - pe[i];
        }
        if (out[i] <= 0) ctx.fail(ErrorCode::InvalidArgument, "computed output shape " + vec_str(out) + " is not positive");
      }
      Tensor bf;
      if (ctx.has_input(2)) {
        const Tensor& B = ctx.input(2);
        require_float(ctx, 2, B.dtype());
        if (B.numel() != M) ctx.fail(ErrorCode::InvalidArgument, "B must have " + std::to_string(M) + " elements");
        bf = tof(B);
      }
      Tensor xf = tof(X), wf = tof(W);
      Shape ys = {N, M};
      ys.insert(ys.end(), out.begin(), out.end());
      // float32 writes straight into the planned output (zero-filled) and takes its scratch from
      // the run's workspace: no page-faulting allocation per run (PaddleOCR det's two
      // ConvTransposes made ~12 MB of fresh pages every run). Other dtypes go through float.
      const bool direct = X.dtype() == DType::Float;
      Tensor yconv;
      Tensor& yf = direct ? ctx.output(0, DType::Float, ys) : (yconv = Tensor(DType::Float, ys));
      if (yf.numel() == 0) {  // nothing to write (and `group` may be large over 0 channels)
        if (!direct) ctx.set_output(0, Value(fromf(yf, X.dtype())));
        return;
      }
      int64_t K = shape_numel(k), MK = 0, in_sp = shape_numel(in), out_sp = shape_numel(out);
      if (__builtin_mul_overflow(Mg, K, &MK) || MK > (int64_t(1) << 40))
        ctx.fail(ErrorCode::InvalidArgument, "W " + shape_str(W.shape()) + " is too large");
      // Scratch from the run's workspace (declared below, so the planner places it in the arena).
      const ConvTransposeScratch sc = convtranspose_scratch(MK, Cg, in_sp);
      const int64_t chunk = sc.chunk;
      const kernels::GemmArch& garch = kernels::gemm_arch_best();
      float* col = static_cast<float*>(ctx.workspace(size_t(sc.col_floats + sc.gemm_floats) * sizeof(float)));
      float* gws = col + sc.col_floats;
      const float* x = xf.data<float>();
      const float* w = wf.data<float>();
      float* y = yf.data<float>();
      for (int64_t b = 0; b < N; ++b)
        for (int64_t gi = 0; gi < group; ++gi) {
          const float* xg = x + (b * C + gi * Cg) * in_sp;
          const float* wg = w + gi * Cg * MK;  // [Cg, MK]
          float* yg = y + (b * M + gi * Mg) * out_sp;
          for (int64_t p0 = 0; p0 < in_sp; p0 += chunk) {
            int64_t cols = std::min(chunk, in_sp - p0);
            // col[i, j] = sum_c wg[c, i] * xg[c, p0 + j]: the packed GEMM with A = wg transposed
            kernels::GemmOperand opa, opb;
            opa.data = wg;
            opa.ld = MK;
            opa.trans = true;
            opb.data = xg + p0;
            opb.ld = in_sp;
            kernels::sgemm(garch, MK, cols, Cg, opa, opb, col, cols, kernels::Epilogue{}, ctx.pool(), gws);
            col2im_add(col, cols, Mg, in, p0, cols, k, s, d, pb, out, yg, ctx.pool());
          }
          if (bf.defined()) {  // the bias, a channel's plane at a time on the pool's threads
            const float* bg = bf.data<float>() + gi * Mg;
            const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, out_sp));
            parallel_for(ctx.pool(), Mg, grain, [&](int64_t m0, int64_t m1) {
              for (int64_t m = m0; m < m1; ++m)
                for (int64_t j = 0; j < out_sp; ++j) yg[m * out_sp + j] += bg[m];
            });
          }
        }
      if (!direct) ctx.set_output(0, Value(fromf(yf, X.dtype())));
    }, [group](std::span<const Shape> in, int) -> size_t {
      if (in.size() < 2 || in[0].size() < 3 || in[1].size() != in[0].size() || group <= 0) return 0;
      int64_t K = 1, in_sp = 1, MK = 0;
      for (size_t i = 2; i < in[1].size(); ++i)
        if (__builtin_mul_overflow(K, in[1][i], &K)) return 0;
      for (size_t i = 2; i < in[0].size(); ++i)
        if (__builtin_mul_overflow(in_sp, in[0][i], &in_sp)) return 0;
      // an empty batch needs none; an absurd W (possible only with 0 channels) gets it from the heap if at all
      if (in[0][0] == 0 || __builtin_mul_overflow(in[1][1], K, &MK) || MK > (int64_t(1) << 32)) return 0;
      const ConvTransposeScratch sc = convtranspose_scratch(MK, in[0][1] / group, in_sp);
      return size_t(sc.col_floats + sc.gemm_floats) * sizeof(float);
    });
  });
  // (Col2Im is registered in ops/tensor.cpp, for every numeric type.)
}

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

void register_pools(OpRegistry& r) {
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
        bool ok = is_floatlike(X.dtype()) || (o.kind == PoolKind::Max && (X.dtype() == DType::Int8 || X.dtype() == DType::Uint8));
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

// ---------------------------------------------------------------- MatMul / Gemm

template <class T>
void matmul_typed(const Tensor& A, const Tensor& B, Tensor& Y, const Shape& abatch, const Shape& bbatch, const Shape& obatch,
                  int64_t M, int64_t K, int64_t N) {
  std::vector<int64_t> st[2] = {broadcast_strides(abatch, obatch), broadcast_strides(bbatch, obatch)};
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* y = Y.data<T>();
  for_each_broadcast(obatch, st, [&](int64_t i, const int64_t* off) {
    gemm_acc<T>(M, N, K, a + off[0] * M * K, K, b + off[1] * K * N, N, y + i * M * N, N);
  });
}

// Reference MatMul (every dtype): i-k-j loops per batch item.
void matmul_reference(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  if (A.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "A and B must have the same type");
  if (A.rank() < 1 || B.rank() < 1) ctx.fail(ErrorCode::InvalidArgument, "MatMul operands must have rank >= 1");
  Shape as = A.shape(), bs = B.shape();
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K)
    ctx.fail(ErrorCode::InvalidArgument, "shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are not compatible");
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape ob = broadcast_shapes(ctx, ab, bb);
  Shape ys = ob;
  if (!a1) ys.push_back(M);
  if (!b1) ys.push_back(N);
  Shape full = ob;
  full.push_back(M);
  full.push_back(N);
  DType dt = A.dtype();
  if (dt == DType::Float16 || dt == DType::BFloat16) {
    Tensor af = tof(A), bf = tof(B);
    Tensor yf(DType::Float, full);
    matmul_typed<float>(af, bf, yf, ab, bb, ob, M, K, N);
    ctx.set_output(0, Value(fromf(yf, dt).reshaped(ys)));
    return;
  }
  Tensor Y(dt, full);
  bool ok = false;
  switch (dt) {
    case DType::Float: matmul_typed<float>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Double: matmul_typed<double>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Int32: matmul_typed<int32_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Int64: matmul_typed<int64_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Uint32: matmul_typed<uint32_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Uint64: matmul_typed<uint64_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    default: break;
  }
  if (!ok) unsupported_dtype(ctx, 0, dt);
  ctx.set_output(0, Value(Y.reshaped(ys)));
}

// Reference Gemm (every dtype): op(A), op(B) materialized, then alpha * A*B + beta * C.
void gemm_reference(KernelContext& ctx, float alpha, float beta, bool ta, bool tb) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  if (A.rank() != 2 || B.rank() != 2)
    ctx.fail(ErrorCode::InvalidArgument, "A and B must be 2-D, got " + shape_str(A.shape()) + " and " + shape_str(B.shape()));
  if (A.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "A and B must have the same type");
  int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1);
  int64_t KB = tb ? B.dim(1) : B.dim(0), N = tb ? B.dim(0) : B.dim(1);
  if (K != KB)
    ctx.fail(ErrorCode::InvalidArgument, "inner dimensions do not match: A " + shape_str(A.shape()) + ", B " + shape_str(B.shape()));
  const Tensor* Cp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (Cp) {
    const Shape& cs = Cp->shape();
    bool okc = cs.size() <= 2;
    if (okc && cs.size() >= 1 && cs.back() != 1 && cs.back() != N) okc = false;
    if (okc && cs.size() == 2 && cs[0] != 1 && cs[0] != M) okc = false;
    if (!okc) ctx.fail(ErrorCode::InvalidArgument, "C shape " + shape_str(cs) + " cannot broadcast to [" + std::to_string(M) + "," + std::to_string(N) + "]");
  }
  DType dt = A.dtype();
  auto run = [&]<class T, class Acc>(const T* a, const T* b, const Tensor* C, T* y) {
    // materialize op(A) [M,K] and op(B) [K,N] in Acc
    std::vector<Acc> aa(size_t(M * K)), bb(size_t(K * N)), yy(size_t(M * N), Acc(0));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) aa[size_t(i * K + k)] = Acc(ta ? a[k * M + i] : a[i * K + k]);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) bb[size_t(k * N + j)] = Acc(tb ? b[j * K + k] : b[k * N + j]);
    gemm_acc<Acc>(M, N, K, aa.data(), K, bb.data(), N, yy.data(), N);
    std::vector<int64_t> cst;
    const T* c = nullptr;
    if (C) {
      cst = broadcast_strides(C->shape(), {M, N});
      c = C->data<T>();
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        Acc v = Acc(alpha) * yy[size_t(i * N + j)];
        if (c) v += Acc(beta) * Acc(c[i * cst[0] + j * cst[1]]);
        y[i * N + j] = T(v);
      }
  };
  if (Cp && Cp->dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "C must have the type of A");
  Tensor& Y = ctx.output(0, dt, {M, N});
  switch (dt) {
    case DType::Float: run.template operator()<float, float>(A.data<float>(), B.data<float>(), Cp, Y.data<float>()); break;
    case DType::Double: run.template operator()<double, double>(A.data<double>(), B.data<double>(), Cp, Y.data<double>()); break;
    case DType::Float16: run.template operator()<float16, float>(A.data<float16>(), B.data<float16>(), Cp, Y.data<float16>()); break;
    case DType::BFloat16: run.template operator()<bfloat16, float>(A.data<bfloat16>(), B.data<bfloat16>(), Cp, Y.data<bfloat16>()); break;
    case DType::Int32: run.template operator()<int32_t, int64_t>(A.data<int32_t>(), B.data<int32_t>(), Cp, Y.data<int32_t>()); break;
    case DType::Int64: run.template operator()<int64_t, int64_t>(A.data<int64_t>(), B.data<int64_t>(), Cp, Y.data<int64_t>()); break;
    case DType::Uint32: run.template operator()<uint32_t, uint64_t>(A.data<uint32_t>(), B.data<uint32_t>(), Cp, Y.data<uint32_t>()); break;
    case DType::Uint64: run.template operator()<uint64_t, uint64_t>(A.data<uint64_t>(), B.data<uint64_t>(), Cp, Y.data<uint64_t>()); break;
    default: unsupported_dtype(ctx, 0, dt);
  }
}

// The constant B operand of MatMul / Gemm, packed once at load for the GEMM. The packed copy is
// used only for the very tensor it was made from: an initializer that is also a graph input can
// be overridden by a feed (once the packed copy replaces the constant, the original's data is null).
struct PackedRhs {
  kernels::PackedMatrix m;
  Shape shape;
  const void* src = nullptr;  // the constant tensor's data the packed copy was made from

  // Packs input 1 when it is a non-empty 2-D float constant; tb: it is stored [N, K].
  void pack(const PrepareContext& pc, bool tb) {
    const Tensor* b = pc.constant.size() > 1 ? pc.constant[1] : nullptr;
    if (!b || b->dtype() != DType::Float || b->rank() != 2 || b->numel() == 0) return;
    int64_t K = tb ? b->dim(1) : b->dim(0), N = tb ? b->dim(0) : b->dim(1);
    m = kernels::pack_b_matrix(kernels::gemm_arch_best(), K, N, b->data<float>(), b->dim(1), tb);
    shape = b->shape();
    src = b->raw();
  }
  bool serves(const Tensor& B) const {
    return !m.data.empty() && B.shape() == shape && (B.raw() == src || B.raw() == nullptr);
  }
};

// MatMul and basalt::FusedMatMul share one kernel class. FusedMatMul (domain "basalt", opset 1)
// is emitted by the optimizer; its semantics:
//   inputs  A, B, bias (optional, 1-D of length N, added to every row)
//   attrs   transA, transB (0/1: transpose the last two dims of that operand; ignored for a 1-D
//           operand), alpha (float, default 1), activation, activation_params (as FusedConv)
//   Y = act(alpha * op(A) @ op(B) + bias), with MatMul's broadcasting of the batch dims and its
//   1-D operand rules.
// float32 runs on the packed GEMM (src/kernels/gemm.hpp); a constant 2-D B is packed at load.
// Other dtypes of MatMul use the reference loops; FusedMatMul computes them through float32.
struct MatMulDims {
  bool ok = false;
  bool a1 = false, b1 = false;
  int64_t M = 0, K = 0, N = 0;
  Shape ab, bb;  // batch dims
};

MatMulDims matmul_dims(const Shape& a, const Shape& b, bool ta, bool tb) {
  MatMulDims d;
  if (a.empty() || b.empty()) return d;
  Shape as = a, bs = b;
  d.a1 = as.size() == 1;
  d.b1 = bs.size() == 1;
  if (d.a1) as.insert(as.begin(), 1);
  if (d.b1) bs.push_back(1);
  bool tA = ta && !d.a1, tB = tb && !d.b1;
  d.M = tA ? as.back() : as[as.size() - 2];
  d.K = tA ? as[as.size() - 2] : as.back();
  int64_t kb = tB ? bs.back() : bs[bs.size() - 2];
  d.N = tB ? bs[bs.size() - 2] : bs.back();
  if (kb != d.K) return d;
  d.ab.assign(as.begin(), as.end() - 2);
  d.bb.assign(bs.begin(), bs.end() - 2);
  d.ok = true;
  return d;
}

class MatMulKernel final : public OpKernel {
 public:
  MatMulKernel(bool fused, bool ta, bool tb, float alpha, kernels::Activation act)
      : fused_(fused), ta_(ta), tb_(tb), alpha_(alpha), act_(act) {}

  void prepare(const PrepareContext& pc) override { packed_.pack(pc, tb_); }
  size_t packed_bytes() const override { return packed_.m.bytes(); }
  bool replaces_constant(int input) const override { return input == 1 && packed_bytes() > 0; }
  size_t workspace_bytes(std::span<const Shape> in, int threads) const override {
    if (in.size() < 2) return 0;
    MatMulDims d = matmul_dims(in[0], in[1], ta_, tb_);
    if (!d.ok) return 0;
    return plan(d, in[1] == packed_.shape, threads).bytes;
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "A and B must have the same type");
    if (A.rank() < 1 || B.rank() < 1) ctx.fail(ErrorCode::InvalidArgument, "MatMul operands must have rank >= 1");
    MatMulDims d = matmul_dims(A.shape(), B.shape(), ta_, tb_);
    if (!d.ok)
      ctx.fail(ErrorCode::InvalidArgument, "shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are not compatible");
    DType dt = A.dtype();
    if (!fused_ && dt != DType::Float) {
      matmul_reference(ctx);
      return;
    }
    if (fused_) require_float(ctx, 0, dt);
    Shape ob = broadcast_shapes(ctx, d.ab, d.bb);
    Shape ys = ob;
    if (!d.a1) ys.push_back(d.M);
    if (!d.b1) ys.push_back(d.N);
    Tensor biasf;
    if (fused_ && ctx.has_input(2)) {
      const Tensor& bias = ctx.input(2);
      require_float(ctx, 2, bias.dtype());
      if (bias.rank() != 1 || bias.dim(0) != d.N)
        ctx.fail(ErrorCode::InvalidArgument, "bias must be 1-D of length " + std::to_string(d.N) + ", got " + shape_str(bias.shape()));
      biasf = tof(bias);
    }
    Tensor af = tof(A), bf = tof(B);
    const bool f32 = dt == DType::Float;
    Tensor ylocal;
    if (!f32) ylocal = Tensor::uninit(DType::Float, ys);
    Tensor& yt = f32 ? ctx.output_uninit(0, DType::Float, ys) : ylocal;
    const bool use_packed = packed_.serves(B);
    Plan p = plan(d, use_packed, ctx.threads());
    float* work = p.bytes ? static_cast<float*>(ctx.workspace(p.bytes)) : nullptr;

    const kernels::GemmArch& g = kernels::gemm_arch_best();
    kernels::Epilogue ep;
    ep.alpha = alpha_;
    ep.col_bias = biasf.defined() ? biasf.data<float>() : nullptr;
    ep.act = act_;
    const bool tA = ta_ && !d.a1, tB = tb_ && !d.b1;
    const float* a = af.data<float>();
    const float* b = bf.data<float>();
    float* y = yt.data<float>();
    const int64_t M = d.M, N = d.N, K = d.K;
    auto item = [&](int64_t Mi, const float* ai, const float* bi, float* yi, ThreadPool* pool, float* w) {
      kernels::GemmOperand opa, opb;
      opa.data = ai;
      opa.ld = tA ? M : K;
      opa.trans = tA;
      if (use_packed) {
        opb.packed = packed_.m.data.data();
      } else {
        opb.data = bi;
        opb.ld = tB ? K : N;
        opb.trans = tB;
      }
      kernels::sgemm(g, Mi, N, K, opa, opb, yi, N, ep, pool, w);
    };
    if (p.fold_m) {  // B has no batch dims and A is not transposed: one GEMM over all rows
      item(p.rows, a, b, y, ctx.pool(), work);
    } else {
      std::vector<int64_t> st[2] = {broadcast_strides(d.ab, ob), broadcast_strides(d.bb, ob)};
      std::vector<int64_t> aoff, boff;
      for_each_broadcast(ob, st, [&](int64_t, const int64_t* off) {
        aoff.push_back(off[0]);
        boff.push_back(off[1]);
      });
      int64_t nb = int64_t(aoff.size());
      if (p.slots > 1) {  // many small products: one per task, each inline with its own workspace slot
        int64_t grain = (nb + p.slots - 1) / p.slots;
        parallel_for(ctx.pool(), nb, grain, [&](int64_t b0, int64_t b1) {
          float* w = work ? work + (b0 / grain) * p.slot_floats : nullptr;
          for (int64_t i = b0; i < b1; ++i) item(M, a + aoff[size_t(i)] * M * K, b + boff[size_t(i)] * K * N, y + i * M * N, nullptr, w);
        });
      } else {
        for (int64_t i = 0; i < nb; ++i) item(M, a + aoff[size_t(i)] * M * K, b + boff[size_t(i)] * K * N, y + i * M * N, ctx.pool(), work);
      }
    }
    if (!f32) ctx.set_output(0, Value(fromf(yt, dt)));
  }

 private:
  struct Plan {
    bool fold_m = false;
    int64_t rows = 0;        // M of the folded GEMM
    int64_t slots = 1;       // workspace slots (> 1: batch items run in parallel, one per task)
    int64_t slot_floats = 0;
    size_t bytes = 0;
  };
  Plan plan(const MatMulDims& d, bool use_packed, int threads) const {
    Plan p;
    const kernels::GemmArch& g = kernels::gemm_arch_best();
    int64_t nb_a = shape_numel(d.ab), nb_b = shape_numel(d.bb);
    int64_t nb = std::max(nb_a, nb_b);
    p.fold_m = nb_b == 1 && !(ta_ && !d.a1);
    p.rows = p.fold_m ? nb_a * d.M : d.M;
    int64_t M = p.rows;
    p.slot_floats = kernels::sgemm_workspace_floats(g, M, d.N, d.K, false, use_packed) + 16;
    if (!p.fold_m && threads > 1 && nb >= threads) p.slots = threads;
    p.bytes = size_t(p.slot_floats * p.slots) * sizeof(float) + 64;
    return p;
  }

  bool fused_, ta_, tb_;
  float alpha_;
  kernels::Activation act_;
  PackedRhs packed_;
};

// Gemm: float32 on the packed GEMM with C folded into the epilogue (scaled by beta); other
// dtypes on the reference loops.
class GemmKernel final : public OpKernel {
 public:
  GemmKernel(float alpha, float beta, bool ta, bool tb) : alpha_(alpha), beta_(beta), ta_(ta), tb_(tb) {}

  void prepare(const PrepareContext& pc) override { packed_.pack(pc, tb_); }
  size_t packed_bytes() const override { return packed_.m.bytes(); }
  bool replaces_constant(int input) const override { return input == 1 && packed_bytes() > 0; }
  size_t workspace_bytes(std::span<const Shape> in, int) const override {
    if (in.size() < 2 || in[0].size() != 2 || in[1].size() != 2) return 0;
    int64_t M = ta_ ? in[0][1] : in[0][0], K = ta_ ? in[0][0] : in[0][1], N = tb_ ? in[1][0] : in[1][1];
    return ws_bytes(M, N, K, in[1] == packed_.shape);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != DType::Float || B.dtype() != DType::Float || A.rank() != 2 || B.rank() != 2 ||
        (ctx.has_input(2) && ctx.input(2).dtype() != DType::Float)) {
      gemm_reference(ctx, alpha_, beta_, ta_, tb_);
      return;
    }
    int64_t M = ta_ ? A.dim(1) : A.dim(0), K = ta_ ? A.dim(0) : A.dim(1);
    int64_t KB = tb_ ? B.dim(1) : B.dim(0), N = tb_ ? B.dim(0) : B.dim(1);
    if (K != KB)
      ctx.fail(ErrorCode::InvalidArgument, "inner dimensions do not match: A " + shape_str(A.shape()) + ", B " + shape_str(B.shape()));
    kernels::Epilogue ep;
    ep.alpha = alpha_;
    std::vector<float> cbuf;  // beta * C when it has to be scaled or expanded
    if (ctx.has_input(2)) {
      const Shape& cs = ctx.input(2).shape();
      bool okc = cs.size() <= 2;
      if (okc && cs.size() >= 1 && cs.back() != 1 && cs.back() != N) okc = false;
      if (okc && cs.size() == 2 && cs[0] != 1 && cs[0] != M) okc = false;
      if (!okc)
        ctx.fail(ErrorCode::InvalidArgument, "C shape " + shape_str(cs) + " cannot broadcast to [" + std::to_string(M) + "," +
                                                 std::to_string(N) + "]");
    }
    if (ctx.has_input(2) && beta_ != 0.f) {
      const Tensor& Ct = ctx.input(2);
      const Shape& cs = Ct.shape();
      const float* c = Ct.data<float>();
      int64_t cr = cs.size() == 2 ? cs[0] : 1, cc = cs.empty() ? 1 : cs.back();
      if (cr == M && cc == N) {  // one value per output element
        if (beta_ == 1.f) {
          ep.residual = c;
        } else {
          cbuf.resize(size_t(M * N));
          for (int64_t i = 0; i < M * N; ++i) cbuf[size_t(i)] = beta_ * c[i];
          ep.residual = cbuf.data();
        }
        ep.ldr = N;
      } else if (cc == N && cr == 1) {  // a row vector: per-column bias
        if (beta_ == 1.f) {
          ep.col_bias = c;
        } else {
          cbuf.resize(size_t(N));
          for (int64_t j = 0; j < N; ++j) cbuf[size_t(j)] = beta_ * c[j];
          ep.col_bias = cbuf.data();
        }
      } else if (cc == 1 && cr == M) {  // a column: per-row bias
        cbuf.resize(size_t(M));
        for (int64_t i = 0; i < M; ++i) cbuf[size_t(i)] = beta_ * c[i];
        ep.row_bias = cbuf.data();
      } else {  // a scalar
        cbuf.assign(size_t(N), beta_ * c[0]);
        ep.col_bias = cbuf.data();
      }
    }
    Tensor& Y = ctx.output_uninit(0, DType::Float, {M, N});
    const bool use_packed = packed_.serves(B);
    size_t bytes = ws_bytes(M, N, K, use_packed);
    float* work = static_cast<float*>(ctx.workspace(bytes));
    kernels::GemmOperand opa, opb;
    opa.data = A.data<float>();
    opa.ld = A.dim(1);
    opa.trans = ta_;
    if (use_packed) {
      opb.packed = packed_.m.data.data();
    } else {
      opb.data = B.data<float>();
      opb.ld = B.dim(1);
      opb.trans = tb_;
    }
    kernels::sgemm(kernels::gemm_arch_best(), M, N, K, opa, opb, Y.data<float>(), N, ep, ctx.pool(), work);
  }

 private:
  static size_t ws_bytes(int64_t M, int64_t N, int64_t K, bool packed) {
    return size_t(kernels::sgemm_workspace_floats(kernels::gemm_arch_best(), M, N, K, false, packed) + 16) * sizeof(float);
  }
  float alpha_, beta_;
  bool ta_, tb_;
  PackedRhs packed_;
};

void register_matmul(OpRegistry& r) {
  add_versions(r, "MatMul", {1, 9, 13}, [](const Node&) -> std::unique_ptr<OpKernel> {
    return std::make_unique<MatMulKernel>(false, false, false, 1.f, kernels::Activation{});
  });
  r.add("basalt", "FusedMatMul", 1, INT_MAX, [](const Node& n) -> std::unique_ptr<OpKernel> {
    int64_t ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) n.fail(ErrorCode::InvalidModel, "transA and transB must be 0 or 1");
    return std::make_unique<MatMulKernel>(true, ta != 0, tb != 0, n.attr_float("alpha", 1.0f), parse_fused_activation(n));
  });
  add_versions(r, "Gemm", {1, 6, 7, 9, 11, 13}, [](const Node& n) -> std::unique_ptr<OpKernel> {
    return std::make_unique<GemmKernel>(n.attr_float("alpha", 1.0f), n.attr_float("beta", 1.0f), n.attr_int("transA", 0) != 0,
                                        n.attr_int("transB", 0) != 0);
  });
}

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
  bool numeric_ok = is_floatlike(X.dtype()) || dtype_is_integer(X.dtype());
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


// ---------------------------------------------------------------- DeformConv (2-D)

void register_deformconv(OpRegistry& r) {
  add_versions(r, "DeformConv", {19, 22}, [](const Node& n) {
    WinAttrs a = parse_win(n, false);
    int64_t group = n.attr_int("group", 1), ogroup = n.attr_int("offset_group", 1);
    if (group <= 0 || ogroup <= 0) n.fail(ErrorCode::InvalidModel, "group and offset_group must be positive");
    if (group > INT32_MAX || ogroup > INT32_MAX)
      n.fail(ErrorCode::InvalidModel, "group value " + std::to_string(group) + " or offset_group value " + std::to_string(ogroup) +
                                          " is too large");
    return kernel([a, group, ogroup](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& W = ctx.input(1);
      const Tensor& O = ctx.input(2);
      require_float(ctx, 0, X.dtype());
      if (X.rank() != 4 || W.rank() != 4) ctx.fail(ErrorCode::Unsupported, "only 2-D DeformConv (4-D X and W) is supported");
      int64_t N = X.dim(0), C = X.dim(1), H = X.dim(2), Wd = X.dim(3), M = W.dim(0), KH = W.dim(2), KW = W.dim(3);
      int64_t wc = 0, K = 0, OK2 = 0;
      if (__builtin_mul_overflow(W.dim(1), group, &wc) || wc != C || M % group != 0 || C % ogroup != 0)
        ctx.fail(ErrorCode::InvalidArgument, "channel mismatch between X " + shape_str(X.shape()) + " and W " + shape_str(W.shape()) +
                                                 " with group " + std::to_string(group));
      if (__builtin_mul_overflow(KH, KW, &K) || __builtin_mul_overflow(K, 2 * ogroup, &OK2))
        ctx.fail(ErrorCode::InvalidArgument, "kernel of W " + shape_str(W.shape()) + " with offset_group " + std::to_string(ogroup) +
                                                 " is too large");
      Geom g = make_geom(ctx, a, {H, Wd}, {KH, KW}, false);
      int64_t OH = g.out[0], OW = g.out[1], P = OH * OW;
      if (O.shape() != Shape{N, OK2, OH, OW})
        ctx.fail(ErrorCode::InvalidArgument, "offset shape " + shape_str(O.shape()) + " does not match the expected " +
                                                 shape_str({N, OK2, OH, OW}));
      Tensor bf, mf;
      if (ctx.has_input(3)) {
        if (ctx.input(3).numel() != M) ctx.fail(ErrorCode::InvalidArgument, "B must have " + std::to_string(M) + " elements");
        bf = tof(ctx.input(3));
      }
      if (ctx.has_input(4)) {
        if (ctx.input(4).shape() != Shape{N, ogroup * K, OH, OW}) ctx.fail(ErrorCode::InvalidArgument, "mask has the wrong shape");
        mf = tof(ctx.input(4));
      }
      Tensor xf = tof(X), wf = tof(W), of = tof(O);
      Tensor yf(DType::Float, {N, M, OH, OW});
      if (yf.numel() == 0) {  // nothing to compute (and `group` may be large over 0 channels)
        ctx.set_output(0, Value(fromf(yf, X.dtype())));
        return;
      }
      const float* x = xf.data<float>();
      const float* off = of.data<float>();
      const float* msk = mf.defined() ? mf.data<float>() : nullptr;
      int64_t Cg = C / group, Mg = M / group, Cog = C / ogroup;
      std::vector<float> col(size_t(C * K * P));
      for (int64_t b = 0; b < N; ++b) {
        for (int64_t c = 0; c < C; ++c) {
          int64_t og = c / Cog;
          const float* xc = x + (b * C + c) * H * Wd;
          for (int64_t kh = 0; kh < KH; ++kh)
            for (int64_t kw = 0; kw < KW; ++kw) {
              int64_t k = kh * KW + kw;
              const float* oy = off + ((b * ogroup + og) * 2 * K + 2 * k) * P;
              const float* ox = oy + P;
              const float* mk = msk ? msk + ((b * ogroup + og) * K + k) * P : nullptr;
              float* row = col.data() + (c * K + k) * P;
              for (int64_t oh = 0; oh < OH; ++oh)
                for (int64_t ow = 0; ow < OW; ++ow) {
                  int64_t p = oh * OW + ow;
                  double hy = double(oh * g.s[0] - g.pb[0] + kh * g.d[0]) + oy[p];
                  double wx = double(ow * g.s[1] - g.pb[1] + kw * g.d[1]) + ox[p];
                  double v = 0;
                  if (hy > -1 && hy < double(H) && wx > -1 && wx < double(Wd)) {
                    double h0 = std::floor(hy), w0 = std::floor(wx);
                    double lh = hy - h0, lw = wx - w0;
                    int64_t ih = int64_t(h0), iw = int64_t(w0);
                    auto at = [&](int64_t yy, int64_t xx) -> double {
                      return (yy >= 0 && yy < H && xx >= 0 && xx < Wd) ? double(xc[yy * Wd + xx]) : 0.0;
                    };
                    v = (1 - lh) * (1 - lw) * at(ih, iw) + (1 - lh) * lw * at(ih, iw + 1) + lh * (1 - lw) * at(ih + 1, iw) +
                        lh * lw * at(ih + 1, iw + 1);
                  }
                  if (mk) v *= mk[p];
                  row[p] = float(v);
                }
            }
        }
        for (int64_t gi = 0; gi < group; ++gi)
          gemm_acc<float>(Mg, P, Cg * K, wf.data<float>() + gi * Mg * Cg * K, Cg * K, col.data() + gi * Cg * K * P, P,
                          yf.data<float>() + (b * M + gi * Mg) * P, P);
        if (bf.defined())
          for (int64_t m = 0; m < M; ++m) {
            float* yr = yf.data<float>() + (b * M + m) * P;
            for (int64_t p = 0; p < P; ++p) yr[p] += bf.data<float>()[m];
          }
      }
      ctx.set_output(0, Value(fromf(yf, X.dtype())));
    });
  });
}


// ---------------------------------------------------------------- CausalConvWithState (opset 27)
// padded = concat(past_state or zeros [B, C, K-1], input [B, C, L]) along the last axis;
// output = act(conv1d(padded, weight, bias, group = C / weight.dim(1))); present_state = the last
// K-1 steps of padded.

void register_causalconv(OpRegistry& r) {
  add_versions(r, "CausalConvWithState", {27}, [](const Node& n) {
    std::string act = n.attr_string("activation", "none");
    bool silu = act == "silu" || act == "swish";
    if (!silu && act != "none" && !act.empty()) n.fail(ErrorCode::Unsupported, "unsupported activation '" + act + "'");
    return kernel([silu](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      const Tensor& W = ctx.input(1);
      require_float(ctx, 0, X.dtype());
      require_float(ctx, 1, W.dtype());
      if (X.rank() != 3 || W.rank() != 3) ctx.fail(ErrorCode::InvalidArgument, "input and weight must be 3-D");
      int64_t B = X.dim(0), C = X.dim(1), L = X.dim(2), K = W.dim(2);
      if (W.dim(0) != C || W.dim(1) <= 0 || C % W.dim(1) != 0 || K <= 0)
        ctx.fail(ErrorCode::InvalidArgument, "weight shape " + shape_str(W.shape()) + " does not match input " + shape_str(X.shape()));
      int64_t G = C / W.dim(1), S = K - 1, PL = S + L;
      Tensor xf = tof(X);
      Tensor pad(DType::Float, {B, C, PL});
      if (ctx.has_input(3)) {
        const Tensor& P = ctx.input(3);
        if (P.shape() != Shape{B, C, S}) ctx.fail(ErrorCode::InvalidArgument, "past_state must have shape " + shape_str({B, C, S}));
        Tensor pf = tof(P);
        for (int64_t i = 0; i < B * C; ++i) std::copy_n(pf.data<float>() + i * S, S, pad.data<float>() + i * PL);
      }
      for (int64_t i = 0; i < B * C; ++i) std::copy_n(xf.data<float>() + i * L, L, pad.data<float>() + i * PL + S);
      Tensor bf;
      if (ctx.has_input(2)) {
        if (ctx.input(2).numel() != C) ctx.fail(ErrorCode::InvalidArgument, "bias must have " + std::to_string(C) + " elements");
        bf = tof(ctx.input(2));
      }
      Geom g;
      g.nd = 1;
      g.in = {PL};
      g.k = {K};
      g.s = {1};
      g.d = {1};
      g.pb = {0};
      g.pe = {0};
      g.out = {L};
      Tensor wf = tof(W);
      Tensor yf(DType::Float, {B, C, L});
      conv_f32(pad.data<float>(), wf.data<float>(), bf.defined() ? bf.data<float>() : nullptr, yf.data<float>(), B, C, C, G, g);
      if (silu) {
        float* y = yf.data<float>();
        for (int64_t i = 0; i < yf.numel(); ++i) y[i] = float(double(y[i]) / (1.0 + std::exp(-double(y[i]))));
      }
      ctx.set_output(0, Value(fromf(yf, X.dtype())));
      if (ctx.num_outputs() > 1 && ctx.has_output(1)) {
        Tensor st(DType::Float, {B, C, S});
        for (int64_t i = 0; i < B * C; ++i) std::copy_n(pad.data<float>() + i * PL + L, S, st.data<float>() + i * S);
        ctx.set_output(1, Value(fromf(st, X.dtype())));
      }
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

void register_nn_ops(OpRegistry& r) {
  register_nchwc(r);
  register_conv(r);
  register_convtranspose(r);
  register_pools(r);
  register_matmul(r);
  register_resize(r);
  register_gridsample(r);
  register_roialign(r);
  register_nms(r);
  register_deformconv(r);
  register_causalconv(r);
  register_affinegrid(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"AffineGrid", "NonMaxSuppression"}) r.def(op).data_dependent_shape();
  for (const char* op : {"AveragePool", "LpPool", "MaxPool"}) r.def(op).infer_symbolic(shapes::pool);
  r.def("Conv").infer_symbolic(shapes::conv);
  r.def("basalt", "FusedConv").infer_symbolic(shapes::conv);
  r.def("ConvTranspose").infer(shapes::conv_transpose);
  r.def("Gemm").infer_symbolic(shapes::gemm);
  for (const char* op : {"GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool"}) r.def(op).infer_symbolic(shapes::global_pool);
  r.def("MatMul").infer_symbolic(shapes::matmul);
  r.def("basalt", "FusedMatMul").infer_symbolic(shapes::matmul);
  for (const char* op : {"Resize", "Upsample"}) r.def(op).infer(shapes::resize);
  r.def("basalt", "NchwcAveragePool").infer_symbolic(shapes::nchwc_pool);
  r.def("basalt", "NchwcMaxPool").infer_symbolic(shapes::nchwc_pool);
  r.def("basalt", "NchwcBatchNormalization").infer_symbolic(shapes::batch_norm).in_place(in_place::batch_norm_f32);
  r.def("basalt", "NchwcConv").infer_symbolic(shapes::nchwc_conv);
  r.def("basalt", "NchwcGlobalAveragePool").infer_symbolic(shapes::nchwc_global_pool);
  r.def("basalt", "NchwcGlobalMaxPool").infer_symbolic(shapes::nchwc_global_pool);
  r.def("basalt", "ReorderFromNchwc").infer_symbolic(shapes::reorder_from_nchwc);
  r.def("basalt", "ReorderToNchwc").infer_symbolic(shapes::reorder_to_nchwc);
  r.def("CausalConvWithState").infer(shapes::causal_conv_with_state);
  r.def("DeformConv").infer(shapes::deform_conv);
  r.def("GridSample").infer(shapes::grid_sample);
  r.def("MaxRoiPool").infer(shapes::max_roi_pool);
  // MaxUnpool's optional output_shape input sets the shape by its values: the rule knows it only
  // from a known value (a constant), and gives up otherwise.
  r.def("MaxUnpool").infer(shapes::max_unpool);
  r.def("RoiAlign").infer(shapes::roi_align);
}

}  // namespace basalt
