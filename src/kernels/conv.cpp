// fp32 2-D convolution driver (see conv.hpp), the portable depthwise kernel and the reference.
#include "kernels/conv.hpp"

#include "runtime/thread_pool.hpp"

#include <algorithm>
#include <cstring>

namespace basalt::kernels {

#define DEPTHWISE_NAME conv_depthwise_planes_portable
#include "kernels/conv_depthwise.inc"
#undef DEPTHWISE_NAME

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

// im2col of output pixels [col0, col0 + ncols) of one image and group, written as packed B
// panels [q0, q1) (panel q covers pixels col0 + q*nr ...): dst[q*K*nr + k*nr + c] with
// k = (ci*KH + kh)*KW + kw. Pixels past the chunk and taps in the padding are zero.
void im2col_pack(const GemmArch& g, const Conv2dShape& s, const float* xg, int64_t col0, int64_t ncols, float* dst,
                 int64_t q0, int64_t q1) {
  const int nr = g.nr;
  const int64_t K = s.Kg(), H = s.H, W = s.W;
  struct Run {
    int j, len;
    int64_t oh, ow0;
  };
  std::vector<Run> runs;
  runs.reserve(size_t(nr));
  for (int64_t q = q0; q < q1; ++q) {
    float* d = dst + q * K * nr;
    int64_t j0 = col0 + q * nr;
    int cols = int(std::min<int64_t>(nr, col0 + ncols - j0));
    runs.clear();
    for (int j = 0; j < cols;) {  // split the panel's pixels into runs along one output row
      int64_t p = j0 + j, oh = p / s.OW, ow = p % s.OW;
      int len = int(std::min<int64_t>(cols - j, s.OW - ow));
      runs.push_back({j, len, oh, ow});
      j += len;
    }
    int64_t k = 0;
    for (int64_t ci = 0; ci < s.Cg(); ++ci)
      for (int64_t kh = 0; kh < s.KH; ++kh)
        for (int64_t kw = 0; kw < s.KW; ++kw, ++k) {
          float* dk = d + k * nr;
          const float* xc = xg + ci * H * W;
          for (const Run& r : runs) {
            float* o = dk + r.j;
            int64_t ih = r.oh * s.sh - s.pt + kh * s.dh;
            if (ih < 0 || ih >= H) {
              std::fill(o, o + r.len, 0.f);
              continue;
            }
            const float* row = xc + ih * W;
            int64_t iw0 = r.ow0 * s.sw - s.pl + kw * s.dw;
            if (s.sw == 1) {
              int64_t lo = std::clamp<int64_t>(-iw0, 0, r.len), hi = std::clamp<int64_t>(W - iw0, lo, r.len);
              if (lo == 0 && hi == r.len && (r.len == 64 || r.len == 16)) {
                // whole panel rows of the usual widths: a constant-size copy, inlined instead of a
                // library call per tap
                if (r.len == 64) {
                  std::memcpy(o, row + iw0, 64 * sizeof(float));
                } else {
                  std::memcpy(o, row + iw0, 16 * sizeof(float));
                }
                continue;
              }
              std::fill(o, o + lo, 0.f);
              if (hi > lo) std::memcpy(o + lo, row + iw0 + lo, size_t(hi - lo) * sizeof(float));
              std::fill(o + hi, o + r.len, 0.f);
            } else {
              for (int t = 0; t < r.len; ++t) {
                int64_t iw = iw0 + t * s.sw;
                o[t] = (iw >= 0 && iw < W) ? row[iw] : 0.f;
              }
            }
          }
          if (cols < nr) std::fill(dk + cols, dk + nr, 0.f);
        }
  }
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

int64_t conv2d_workspace_floats(const GemmArch& g, const Conv2dShape& s, bool weights_packed) {
  if (s.is_depthwise()) return 0;
  int64_t cols = chunk_cols(g, s);
  int64_t n = packed_b_floats(g, s.Kg(), cols) + 16;
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
  Epilogue ep;
  ep.act = act;
  for (int64_t gi = 0; gi < s.G; ++gi) {
    const float* pa;
    if (packed) {
      pa = packed->groups[size_t(gi)].data.data();
    } else {
      int64_t mp = (Mg + g.mr - 1) / g.mr;
      pack_a(g, Mg, K, w + gi * Mg * K, K, false, abuf, 0, mp);
      pa = abuf;
    }
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
          parallel_for(pool, panels, 1, [&](int64_t b, int64_t e) { im2col_pack(g, s, xg, col0, cols, bbuf, b, e); });
        }
        ep.row_bias = bias ? bias + gi * Mg : nullptr;
        ep.residual = residual ? residual + (n * s.M + gi * Mg) * out + col0 : nullptr;
        ep.ldr = out;
        GemmOperand A, B;
        A.packed = pa;
        B.packed = bbuf;
        sgemm(g, Mg, cols, K, A, B, yg + col0, out, ep, pool, nullptr);
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
