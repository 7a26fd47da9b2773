// Conv (and basalt::FusedConv), ConvTranspose, DeformConv and CausalConvWithState.
#include "ops/nn_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace basalt::nnops {

namespace {

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
// (other float-like dtypes through float32); 3-D and larger on the reference loops of
// kernels/conv_ref.hpp.

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

}  // namespace

void register_conv_ops(OpRegistry& r) {
  register_conv(r);
  register_convtranspose(r);
  register_deformconv(r);
  register_causalconv(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Conv").infer_symbolic(shapes::conv);
  r.def("basalt", "FusedConv").infer_symbolic(shapes::conv);
  r.def("ConvTranspose").infer(shapes::conv_transpose);
  r.def("CausalConvWithState").infer(shapes::causal_conv_with_state);
  r.def("DeformConv").infer(shapes::deform_conv);
}

}  // namespace basalt::nnops
