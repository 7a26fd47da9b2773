// fp32 2-D convolution driver (see conv.hpp), the portable depthwise kernel and the reference.
#include "kernels/conv.hpp"

#include "kernels/slot_set.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

namespace basalt::kernels {

#define DEPTHWISE_NAME conv_depthwise_planes_portable
#include "kernels/conv_depthwise.inc"
#undef DEPTHWISE_NAME

#define IM2COL_NAME im2col_pack_portable
#include "kernels/conv_im2col.inc"
#undef IM2COL_NAME

namespace {

// Columns (output pixels) per chunk: the chunk's packed im2col (K x cols floats) stays near
// 64K floats (256 KB, in L2 while the A panels stream by: 10-20% faster than 2 MB chunks for
// small Cout), a whole number of B panels, at least 256 columns (so that a large A, big K, is
// not re-streamed for every few columns).
int64_t chunk_cols(const GemmArch& g, const Conv2dShape& s) {
  int64_t out = s.OH * s.OW;
  int64_t target = (int64_t(1) << 16) / std::max<int64_t>(s.Kg(), 1);
  int64_t cols = std::max<int64_t>(std::max<int64_t>(g.nr, 256 / g.nr * g.nr), target / g.nr * g.nr);
  return std::min(cols, round_up(out, g.nr));
}

// A 1x1 convolution with at most this many output channels per group reads its input in place
// as the GEMM's B (where the arch can): with few rows, copying B into panels costs as much as the
// product. With more rows, B is reused across many A panels and its packed, contiguous copy is
// faster to read (measured: 10% faster in place at 24 channels, 10-15% slower at 64 to 512).
constexpr int64_t kMaxInPlaceRows = 32;

// Floats of one chunk's packed-column buffer (plus alignment slack).
int64_t slot_floats(const GemmArch& g, const Conv2dShape& s) {
  return packed_b_floats(g, s.Kg(), chunk_cols(g, s)) + 16;
}

// With several threads, whole chunks go to threads: each packs its own columns into its own
// buffer and runs the GEMM inline (no barrier per chunk, and the packed panels stay in the L2 of
// the core that packed them). The chunks are then 1/threads of the usual width, so the buffers
// together take no more memory than the one shared buffer. 0: not possible (chunks would be
// narrower than a panel).
int64_t per_thread_cols(const GemmArch& g, const Conv2dShape& s, int threads) {
  if (threads <= 1 || threads > SlotSet::kMax) return 0;
  int64_t cols = chunk_cols(g, s) / threads / g.nr * g.nr;
  return cols >= g.nr ? cols : 0;
}

}  // namespace

PackedConvWeights pack_conv_weights(const GemmArch& g, const Conv2dShape& s, const float* w) {
  PackedConvWeights pw;
  pw.arch = &g;
  if (s.is_depthwise()) return pw;
  int64_t Mg = s.Mg(), K = s.Kg();
  for (int64_t gi = 0; gi < s.G; ++gi) pw.groups.push_back(pack_a_matrix(g, Mg, K, w + gi * Mg * K, K, false));
  return pw;
}

int64_t conv2d_workspace_floats(const GemmArch& g, const Conv2dShape& s, bool weights_packed, int threads) {
  if (s.is_depthwise()) return 0;
  int64_t n = slot_floats(g, s) + 16 * std::max(threads, 1);  // per-thread buffers: alignment slack each
  if (!weights_packed) n += packed_a_floats(g, s.Mg(), s.Kg()) + 16;
  return n;
}

void conv2d_depthwise(Isa isa, const Conv2dShape& s, const float* x, const float* w, const float* bias,
                      const float* residual, const Activation& act, float* y, ThreadPool* pool) {
  auto fn = isa == Isa::Avx512 ? conv_depthwise_planes_avx512
            : isa == Isa::Avx2 ? conv_depthwise_planes_avx2
                               : conv_depthwise_planes_portable;
  int64_t planes = s.N * s.M;
  int64_t work = std::max<int64_t>(1, s.OH * s.OW * s.KH * s.KW);
  int64_t grain = std::max<int64_t>(1, 32768 / work);
  parallel_for(pool, planes, grain, [&](int64_t b, int64_t e) { fn(s, x, w, bias, residual, act, y, b, e); });
}

void conv2d(const GemmArch& g, const Conv2dShape& s, const float* x, const float* w, const PackedConvWeights* packed,
            const float* bias, const float* residual, const Activation& act, float* y, ThreadPool* pool, float* workspace) {
  if (s.is_depthwise()) {
    conv2d_depthwise(g.isa, s, x, w, bias, residual, act, y, pool);
    return;
  }
  const int64_t Mg = s.Mg(), K = s.Kg(), out = s.OH * s.OW, in = s.H * s.W;
  const int64_t cols_max = chunk_cols(g, s);
  auto align = [](float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); };
  float* bbuf = align(workspace);
  float* abuf = align(bbuf + packed_b_floats(g, K, cols_max));
  const bool pointwise = s.is_pointwise();
  auto im2col = g.isa == Isa::Avx512 ? im2col_pack_avx512 : im2col_pack_portable;
  Epilogue ep;
  ep.act = act;
  // The epilogue of the output block of group gi, image n, from output column col0: this group's
  // bias rows and the residual at the same place as the output.
  auto block_epilogue = [&](int64_t gi, int64_t n, int64_t col0) {
    Epilogue e = ep;
    e.row_bias = bias ? bias + gi * Mg : nullptr;
    e.residual = residual ? residual + (n * s.M + gi * Mg) * out + col0 : nullptr;
    e.ldr = out;
    return e;
  };
  // Group gi's weights as a packed A: packed at load, else packed into abuf now.
  auto packed_group = [&](int64_t gi) -> const float* {
    if (packed) return packed->groups[size_t(gi)].data.data();
    pack_a(g, Mg, K, w + gi * Mg * K, K, false, abuf, 0, (Mg + g.mr - 1) / g.mr);
    return abuf;
  };
  if (pointwise && (out <= kGemvMaxCols || (g.reads_plain_b && Mg <= kMaxInPlaceRows))) {
    // The input [Cg, H*W] of an image and group is the GEMM's B as it is: no copy, no chunks.
    // With at most kGemvMaxCols pixels sgemm runs it as matrix-vector products on any arch.
    for (int64_t gi = 0; gi < s.G; ++gi)
      for (int64_t n = 0; n < s.N; ++n) {
        GemmOperand A, B;
        if (packed) {
          A.packed = packed->groups[size_t(gi)].data.data();
        } else {
          A.data = w + gi * Mg * K;
          A.ld = K;
        }
        B.data = x + (n * s.C + gi * s.Cg()) * in;
        B.ld = in;
        B.in_place = true;
        sgemm(g, Mg, out, K, A, B, y + (n * s.M + gi * Mg) * out, out, block_epilogue(gi, n, 0), pool, workspace);
      }
    return;
  }
  // (Both copies of the columns fit in the packed-column buffer: 2 * out * K + alignment floats.)
  if (out <= kGemvMaxCols && g.panel_gemv && 2 * out * K + 32 <= packed_b_floats(g, K, cols_max)) {
    // A few output pixels (a 1-D convolution over a short frame: Silero VAD's have 3-4): the
    // im2col columns are gathered plainly and sgemm's matrix-vector route streams each packed A
    // panel once with full vectors, instead of multiplying panels nr columns wide of which `out`
    // are used. Silero VAD v5 at 1 thread (`basalt profile`): its six convolutions
    // 0.071 -> 0.037 ms per run; a run 0.105 -> 0.072 ms (`basalt bench`, 3 alternating rounds).
    float* colbuf = bbuf;                     // [out][K]: im2col column j contiguous
    float* gemm_ws = align(colbuf + out * K);  // sgemm's copy of those columns (the gemv route)
    for (int64_t gi = 0; gi < s.G; ++gi) {
      GemmOperand A;
      A.packed = packed_group(gi);
      for (int64_t n = 0; n < s.N; ++n) {
        const float* xg = x + (n * s.C + gi * s.Cg()) * in;
        for (int64_t j = 0; j < out; ++j) {
          const int64_t oh = j / s.OW, ow = j % s.OW;
          float* col = colbuf + j * K;
          for (int64_t c = 0, k = 0; c < s.Cg(); ++c)
            for (int64_t kh = 0; kh < s.KH; ++kh) {
              const int64_t ih = oh * s.sh - s.pt + kh * s.dh;
              const float* xr = ih >= 0 && ih < s.H ? xg + (c * s.H + ih) * s.W : nullptr;
              for (int64_t kw = 0; kw < s.KW; ++kw, ++k) {
                const int64_t iw = ow * s.sw - s.pl + kw * s.dw;
                col[k] = xr && iw >= 0 && iw < s.W ? xr[iw] : 0.f;
              }
            }
        }
        GemmOperand B;
        B.data = colbuf;
        B.ld = K;
        B.trans = true;
        sgemm(g, Mg, out, K, A, B, y + (n * s.M + gi * Mg) * out, out, block_epilogue(gi, n, 0), pool, gemm_ws);
      }
    }
    return;
  }
  const int threads = pool ? pool->threads() : 1;
  const int64_t cols_pt = per_thread_cols(g, s, threads);
  const int64_t chunks = cols_pt ? (out + cols_pt - 1) / cols_pt : 0, jobs = s.G * s.N * chunks;
  if (cols_pt && packed && jobs >= 2 * threads) {
    // One chunk of cols_pt columns per job; the workspace holds `threads` buffers of `slot`.
    const int64_t slot = packed_b_floats(g, K, cols_pt) + 16;
    SlotSet slots;
    parallel_for(pool, jobs, 1, [&](int64_t j0, int64_t j1) {
      const int sl = slots.acquire();
      float* buf = align(workspace + sl * slot);
      for (int64_t j = j0; j < j1; ++j) {
        const int64_t gi = j / (s.N * chunks), n = j / chunks % s.N, col0 = j % chunks * cols_pt;
        const int64_t cols = std::min(cols_pt, out - col0), panels = (cols + g.nr - 1) / g.nr;
        const float* xg = x + (n * s.C + gi * s.Cg()) * in;
        if (pointwise) pack_b(g, K, cols, xg + col0, in, false, buf, 0, panels);
        else im2col(g, s, xg, col0, cols, buf, 0, panels);
        const Epilogue e = block_epilogue(gi, n, col0);
        GemmOperand A, B;
        A.packed = packed->groups[size_t(gi)].data.data();
        B.packed = buf;
        sgemm(g, Mg, cols, K, A, B, y + (n * s.M + gi * Mg) * out + col0, out, e, nullptr, nullptr);
      }
      slots.release(sl);
    });
    return;
  }
  for (int64_t gi = 0; gi < s.G; ++gi) {
    const float* pa = packed_group(gi);
    for (int64_t n = 0; n < s.N; ++n) {
      const float* xg = x + (n * s.C + gi * s.Cg()) * in;
      float* yg = y + (n * s.M + gi * Mg) * out;
      for (int64_t col0 = 0; col0 < out; col0 += cols_max) {
        int64_t cols = std::min(cols_max, out - col0);
        int64_t panels = (cols + g.nr - 1) / g.nr;
        if (pointwise) {
          parallel_for(pool, panels, 1,
                       [&](int64_t b, int64_t e) { pack_b(g, K, cols, xg + col0, in, false, bbuf, b, e); });
        } else {
          parallel_for(pool, panels, 1, [&](int64_t b, int64_t e) { im2col(g, s, xg, col0, cols, bbuf, b, e); });
        }
        GemmOperand A, B;
        A.packed = pa;
        B.packed = bbuf;
        sgemm(g, Mg, cols, K, A, B, yg + col0, out, block_epilogue(gi, n, col0), pool, nullptr);
      }
    }
  }
}

void conv2d_reference(const Conv2dShape& s, const float* x, const float* w, const float* bias, const float* residual,
                      const Activation& act, float* y) {
  const int64_t Cg = s.Cg(), Mg = s.Mg();
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t m = 0; m < s.M; ++m) {
      int64_t gi = m / Mg;
      for (int64_t oh = 0; oh < s.OH; ++oh) {
        float* yr = y + ((n * s.M + m) * s.OH + oh) * s.OW;
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          double acc = 0;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < s.KH; ++kh)
              for (int64_t kw = 0; kw < s.KW; ++kw) {
                int64_t ih = oh * s.sh - s.pt + kh * s.dh, iw = ow * s.sw - s.pl + kw * s.dw;
                if (ih < 0 || ih >= s.H || iw < 0 || iw >= s.W) continue;
                acc += double(x[((n * s.C + gi * Cg + c) * s.H + ih) * s.W + iw]) *
                       double(w[((m * Cg + c) * s.KH + kh) * s.KW + kw]);
              }
          yr[ow] = float(acc);
        }
        epilogue_row(yr, s.OW, 1.f, bias ? bias[m] : 0.f, nullptr,
                     residual ? residual + ((n * s.M + m) * s.OH + oh) * s.OW : nullptr, act);
      }
    }
}

}  // namespace basalt::kernels
