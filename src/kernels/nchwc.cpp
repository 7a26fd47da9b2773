// Blocked-layout kernels: weight packing, the work split, layout conversion, global pooling,
// the portable conv / pool (any CPU) and the reference twin. The AVX-512 conv and pool are in
// nchwc_avx512.cpp.
#include "kernels/nchwc.hpp"

#include "kernels/winograd.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace basalt::kernels::nchwc {

bool conv_supported(const Conv2dShape& s, bool plain_input) {
  if (s.G == 1) return true;
  return !plain_input && s.G == s.C && s.M == s.C;
}

namespace {
// The Winograd tile for a conv of a blocked chain (0 = the direct kernel wins). Narrow inputs with
// many outputs (16 -> 64 at 55x55) keep the direct kernel where FMAs are cheap (Intel Xeon: 0.38
// ms against blocked Winograd's 0.45), not where they are not (fma_pipes == 1, see below).
int chain_winograd_tile(const Conv2dShape& s, bool plain_input, int64_t image_pixels, int fma_pipes) {
  if (plain_input || s.G != 1 || s.KH != 3 || s.KW != 3 || s.sh != 1 || s.sw != 1 || s.dh != 1 || s.dw != 1) return 0;
  if (fma_pipes != 1 && s.M >= 64 && std::min(s.C, s.M) < 64) return 0;
  return winograd_choose_tile(s, image_pixels);
}

// Blocked Winograd's products are GEMMs of K = C rows by N = M columns (64-wide B panels): they
// pay from 64 input channels and 32 outputs (DenseNet's 128 -> 32 convs). Where a core starts one
// 512-bit FMA per cycle (AMD Zen 4) they also pay from 16 inputs with 64 outputs or more, as the
// direct kernel is FMA-bound at half the Xeons' rate: SqueezeNet's 16 -> 64 at 55x55, 32 -> 128 at
// 27x27 and 48 -> 192 at 13x13, 1 thread, 1.03 -> 0.58, 0.99 -> 0.46 and 0.53 -> 0.38 ms
// (2 threads: 0.53 -> 0.30, 0.52 -> 0.26, 0.32 -> 0.21 ms; the model 3.46 -> 2.85 ms).
bool blocked_winograd_channels(const Conv2dShape& s, int fma_pipes) {
  return (s.C >= 64 && s.M >= 32) || (fma_pipes == 1 && s.C >= 16 && s.M >= 64);
}
}  // namespace

int winograd_tile(const Conv2dShape& s, bool plain_input, int64_t image_pixels, int fma_pipes) {
  if (!blocked_winograd_channels(s, fma_pipes)) return 0;
  // t == 0: not a conv Winograd takes at all (or BASALT_WINOGRAD=0); else the tile at 20x20 and up
  const int t = chain_winograd_tile(s, plain_input, std::max<int64_t>(image_pixels, 400), fma_pipes);
  // BASALT_WINOGRAD=2/4 forces that tile (t is it) on every conv that reaches here
  if (t == 0 || image_pixels >= 400 || winograd_env_tile() > 0) return t;
  // image size not known at load: by channel counts (winograd_choose_tile)
  if (image_pixels < 0) return chain_winograd_tile(s, plain_input, image_pixels, fma_pipes);
  const int64_t narrow = std::min(s.C, s.M);
  // 10x10 to 19x19 images, where Winograd in NCHW lost to the direct kernels: on blocked tensors
  // F(2x2) wins (ResNet-50's six 256 -> 256 convs at 14x14, 1 thread: 13.76 -> 10.18 ms, on an
  // Intel Xeon). Where fma_pipes == 1, F(4x4) wins more when both channel counts are at least 96
  // (AMD EPYC Zen 4, BASALT_WINOGRAD=2 against 4: those ResNet-50 convs 5.41 -> 4.63 ms at 1
  // thread, 3.01 -> 2.70 at 2; Inception v1's five at 13x13 3.06 -> 2.89 ms), but not with 32
  // outputs (DenseNet-121's 128 -> 32 at 14x14: 2.81 -> 3.17 ms). F(4x4) keeps 4x the original
  // weights, F(2x2) 1.8x (this rule alone: ResNet-50's peak RSS 146 -> 171 MB).
  if (image_pixels >= 100) return fma_pipes == 1 && narrow >= 96 ? 4 : 2;
  // 6x6 to 9x9 images where fma_pipes == 1: F(2x2) (2x2 to 5x5 tiles) still does 1.3-2.25x fewer
  // multiplies than the direct kernel, and with wide products (both channel counts at least 128)
  // that pays: 1 thread, BASALT_WINOGRAD=2 against the direct kernel, ResNet-50's three
  // 512 -> 512 at 7x7 4.67 -> 3.22 ms, Inception v1's 192 -> 384 and 160 -> 320 at 6x6 0.51 ->
  // 0.32 and 0.35 -> 0.23 ms; with few outputs it loses (DenseNet-121's 128 -> 32 at 7x7: 0.66 ->
  // 0.92 ms). The weights grow 16/9x (this rule alone: ResNet-50's peak RSS 131.5 -> 145.7 MB).
  // Smaller images, and 6x6 to 9x9 where FMAs are cheap: the direct kernel.
  return image_pixels >= 36 && fma_pipes == 1 && narrow >= 128 ? 2 : 0;
}

// The same answer for either FMA rate: where fma_pipes == 1 takes more convs into the chain, they
// are ones blocked_winograd_channels accepts.
bool nchw_winograd(const Conv2dShape& s, bool plain_input, int64_t image_pixels, int fma_pipes) {
  return !blocked_winograd_channels(s, fma_pipes) && chain_winograd_tile(s, plain_input, image_pixels, fma_pipes) != 0;
}

ConvWeights pack_conv(const Conv2dShape& s, const float* w, const float* bias, bool plain_input) {
  ConvWeights cw;
  cw.s = s;
  cw.plain_input = plain_input;
  cw.depthwise = s.G > 1;
  const int64_t KK = s.KH * s.KW;
  if (cw.depthwise) {
    const int64_t CB = blocks(s.C);
    cw.w.reset(size_t(CB * KK * 16));  // zeros
    for (int64_t c = 0; c < s.C; ++c)
      for (int64_t k = 0; k < KK; ++k) cw.w[size_t(((c / 16) * KK + k) * 16 + c % 16)] = w[c * KK + k];
    cw.bias.assign(size_t(CB * 16), 0.f);
  } else {
    const int64_t OB = blocks(s.M), ICB = blocks(s.C);
    cw.w.reset(size_t(OB * ICB * KK * 256));  // zeros (the padding stays so)
    // dense_w_index, one destination block [KK][16 ci][F16 oc] (at most 36 KB) at a time.
    for (int64_t g = 0; g * 4 < OB; ++g) {
      const int64_t F16 = std::min<int64_t>(4, OB - g * 4) * 16, m0 = g * 64;
      for (int64_t cb = 0; cb < ICB; ++cb) {
        float* d = cw.w.data() + dense_w_index(s, m0, cb * 16, 0);
        const int64_t c0 = cb * 16, nc = std::min<int64_t>(16, s.C - c0);
        // Destination order (contiguous stores); the strided loads stay within the block's F16
        // source rows, which L1 holds. (Source order, scattering the stores F16 apart: ResNet-50's
        // prepare 90 -> 73 ms this way.)
        // Source rows are taken 8 at a time: the rows of a 1x1 conv with 1024 inputs lie 4 KB
        // apart, so all F16 of them map to one L1 set, and the loads missed L1 (1 GB/s).
        const int64_t no = std::min<int64_t>(F16, s.M - m0), row = s.C * KK;
        const float* src0 = w + (m0 * s.C + c0) * KK;
        for (int64_t o0 = 0; o0 < no; o0 += 8) {
          const int64_t o1 = std::min<int64_t>(no, o0 + 8);
          for (int64_t k = 0; k < KK; ++k)
            for (int64_t ci = 0; ci < nc; ++ci) {
              float* dd = d + (k * 16 + ci) * F16;
              const float* sp = src0 + ci * KK + k;
              for (int64_t o = o0; o < o1; ++o) dd[o] = sp[o * row];
            }
        }
      }
    }
    cw.bias.assign(size_t(OB * 16), 0.f);
  }
  if (bias) std::copy(bias, bias + s.M, cw.bias.begin());
  return cw;
}

DenseConvArgs dense_conv_args(const ConvWeights& cw, const Conv2dShape& s, const Activation& act) {
  DenseConvArgs a;
  a.cw = &cw;
  a.s = &s;
  a.act = &act;
  a.OB = blocks(s.M);
  a.ICB = blocks(s.C);
  const int64_t H = s.H, W = s.W;
  if (cw.plain_input) {
    a.xs_blk = 16 * H * W;
    a.xs_ic = H * W;
    a.xs_row = W;
    a.xs_pix = 1;
    a.x_img = s.C * H * W;
  } else {
    a.xs_blk = H * W * 16;
    a.xs_ic = 1;
    a.xs_row = W * 16;
    a.xs_pix = 16;
    a.x_img = a.ICB * H * W * 16;
  }
  a.ys_blk = s.OH * s.OW * 16;
  a.y_img = a.OB * a.ys_blk;
  a.wblk = a.ICB * s.KH * s.KW * 16 * 64;
  a.taps.resize(size_t(a.ICB * s.KH * s.KW));
  for (int64_t icb = 0, i = 0; icb < a.ICB; ++icb)
    for (int64_t kh = 0; kh < s.KH; ++kh)
      for (int64_t kw = 0; kw < s.KW; ++kw)
        a.taps[size_t(i++)] = icb * a.xs_blk + kh * s.dh * a.xs_row + kw * s.dw * a.xs_pix;
  return a;
}

void valid_taps(int64_t o, int64_t st, int64_t p, int64_t d, int64_t k, int64_t n, int64_t& k0, int64_t& k1) {
  k0 = 0;
  k1 = k;
  while (k0 < k1 && o * st - p + k0 * d < 0) ++k0;
  while (k1 > k0 && o * st - p + (k1 - 1) * d >= n) --k1;
}

void interior_cols(int64_t p, int64_t st, int64_t d, int64_t k, int64_t n, int64_t OW, int64_t& a, int64_t& b) {
  a = p > 0 ? (p + st - 1) / st : 0;
  const int64_t last_tap = (k - 1) * d - p;
  b = n - 1 - last_tap >= 0 ? (n - 1 - last_tap) / st + 1 : 0;
  a = std::min(a, OW);
  b = std::clamp(b, a, OW);
}

ConvTiling conv_tiling(const ConvWeights& cw, const Conv2dShape& s, int threads) {
  ConvTiling t;
  if (cw.depthwise) {
    t.groups = blocks(s.C);
    t.rows = s.OH;
    t.row_len = s.OW;
    t.rows_per_task = std::clamp<int64_t>(512 / std::max<int64_t>(1, s.OW), 1, std::max<int64_t>(1, s.OH));
    return t;
  }
  t.groups = (blocks(s.M) + 3) / 4;
  t.flat = true;
  // ResNet-50 at 2 threads, per conv class: splitting pixels is 1.04-1.40x faster where the input
  // is larger than the weights (1x1 and 3x3 convs at 56x56 / 28x28), splitting the groups 1.05-1.19x
  // where it is smaller (14x14, 7x7).
  const int64_t in_floats = (cw.plain_input ? s.C : blocks(s.C) * 16) * s.H * s.W;
  t.groups_inner = t.groups > 1 && in_floats > int64_t(cw.w.size());
  // Pixels per segment: as few segments of at most 120 pixels as cover the image (each segment
  // reads the weights once more), as even as multiples of 24 (every tile width: 6, 8, 12) allow:
  // 14x14 was 96 + 96 + 4 pixels (a weight pass for 4 pixels), now 120 + 76. ResNet-50 against
  // fixed 96-pixel segments: 2 threads 32.9-33.1 -> 32.4-32.7 ms, 1 thread 57.3-58.2 -> 57.0-57.6
  // (three alternating rounds); MobileNetV2, SqueezeNet, Inception v1 within noise.
  const int64_t P = s.OH * s.OW;
  int64_t nseg = (P + 119) / 120;
  t.row_len = std::min<int64_t>(120, ((P + nseg - 1) / nseg + 23) / 24 * 24);
  // Few tasks for several threads (1x1 convs at 14x14 and 7x7 with many input channels: MobileNetV2's
  // W320x960 @7x7 is 5 groups in one segment, 3 | 2 groups at 2 threads; W96x576 @14x14 is a
  // 4-block and a 2-block group): more, shorter segments, at least 4 tasks a thread, so that the
  // dynamic hand-out can even out groups of unequal work. Each segment reads its group's weights
  // again, from cache. Hot microbenchmark at 2 threads, best of 2000 runs, three alternating
  // processes: W96x576 @14x14 0.117-0.127 -> 0.101-0.112 ms, W160x960 @7x7 0.084-0.085 ->
  // 0.079-0.082, W320x960 @7x7 0.164-0.166 -> 0.140-0.153.
  t.rows = (P + t.row_len - 1) / t.row_len;
  if (threads > 1 && s.N * t.groups * t.rows < 4 * threads) {
    nseg = std::min<int64_t>((4 * threads + s.N * t.groups - 1) / (s.N * t.groups), std::max<int64_t>(1, P / 12));
    t.row_len = (P + nseg - 1) / nseg;
    t.rows = (P + t.row_len - 1) / t.row_len;
  }
  t.rows_per_task = 1;
  return t;
}

namespace {

// conv(x, w) + bias of output channel m (< s.M) at (oh, ow) of image xn (its first element),
// accumulated in Acc: the portable conv (float) and the reference twin (double) share it.
template <class Acc>
float conv_output(const ConvWeights& cw, const Conv2dShape& s, const float* xn, int64_t m, int64_t oh, int64_t ow) {
  const int64_t KK = s.KH * s.KW;
  Acc acc = 0;
  for (int64_t kh = 0; kh < s.KH; ++kh) {
    const int64_t ih = oh * s.sh - s.pt + kh * s.dh;
    if (ih < 0 || ih >= s.H) continue;
    for (int64_t kw = 0; kw < s.KW; ++kw) {
      const int64_t iw = ow * s.sw - s.pl + kw * s.dw;
      if (iw < 0 || iw >= s.W) continue;
      const int64_t k = kh * s.KW + kw;
      auto xat = [&](int64_t c) {
        return cw.plain_input ? xn[(c * s.H + ih) * s.W + iw] : xn[(((c / 16) * s.H + ih) * s.W + iw) * 16 + c % 16];
      };
      if (cw.depthwise) {
        acc += Acc(xat(m)) * cw.w[size_t(((m / 16) * KK + k) * 16 + m % 16)];
        continue;
      }
      for (int64_t c = 0; c < s.C; ++c) acc += Acc(xat(c)) * cw.w[size_t(dense_w_index(s, m, c, k))];
    }
  }
  return float(acc + Acc(cw.bias[size_t(m)]));
}

}  // namespace

void conv_rows_portable(const ConvWeights& cw, const Conv2dShape& s, const ConvTiling& t, const float* x,
                        const float* residual, const Activation& act, float* y, int64_t task0, int64_t task1) {
  const int64_t ICB = blocks(s.C), OB = cw.depthwise ? ICB : blocks(s.M);
  const int64_t x_img = cw.plain_input ? s.C * s.H * s.W : ICB * s.H * s.W * 16;
  const int64_t y_img = OB * s.OH * s.OW * 16;
  for (int64_t task = task0; task < task1; ++task) {
    int64_t n, grp, r0, r1;
    t.decode(task, n, grp, r0, r1);
    int64_t p0 = t.flat ? r0 * t.row_len : r0 * s.OW;
    int64_t p1 = t.flat ? std::min(r1 * t.row_len, s.OH * s.OW) : r1 * s.OW;
    int64_t ob0 = cw.depthwise ? grp : grp * 4, ob1 = cw.depthwise ? grp + 1 : std::min(OB, ob0 + 4);
    for (int64_t ob = ob0; ob < ob1; ++ob)
      for (int64_t pix = p0; pix < p1; ++pix) {
        const int64_t yo = n * y_img + (ob * s.OH * s.OW + pix) * 16;
        for (int64_t l = 0; l < 16; ++l) {
          const int64_t m = ob * 16 + l;
          if (m >= s.M) {
            y[yo + l] = 0.f;
            continue;
          }
          float v = conv_output<float>(cw, s, x + n * x_img, m, pix / s.OW, pix % s.OW);
          if (residual) v += residual[yo + l];
          y[yo + l] = apply_activation(act, v);
        }
      }
  }
}

namespace {

// The input extent a dense conv reads, padding included: [Hp, Wp] with the image at (pt, pl).
void padded_extent(const Conv2dShape& s, int64_t& Hp, int64_t& Wp) {
  Hp = std::max(s.H + s.pt, (s.OH - 1) * s.sh + (s.KH - 1) * s.dh + 1);
  Wp = std::max(s.W + s.pl, (s.OW - 1) * s.sw + (s.KW - 1) * s.dw + 1);
}

bool needs_padding(const ConvWeights& cw, const Conv2dShape& s) {
  if (cw.depthwise) return false;
  int64_t Hp, Wp;
  padded_extent(s, Hp, Wp);
  return Hp != s.H || Wp != s.W || s.pt || s.pl;
}

}  // namespace

int64_t conv_workspace_floats(const ConvWeights& cw, const Conv2dShape& s) {
  if (!needs_padding(cw, s)) return 0;
  int64_t Hp, Wp;
  padded_extent(s, Hp, Wp);
  const int64_t planes = cw.plain_input ? s.C : blocks(s.C) * 16;  // blocked: 16 floats per pixel
  return s.N * planes * Hp * Wp;
}

int64_t conv_workspace_bound_floats(const ConvWeights& cw, const Conv2dShape& s, int64_t pt, int64_t pb, int64_t pl,
                                    int64_t pr) {
  // Without pads the taps stay inside the image (no copy); with them the padded extent of
  // padded_extent is at most the image plus its pads.
  if (cw.depthwise || (pt == 0 && pb == 0 && pl == 0 && pr == 0)) return 0;
  const int64_t planes = cw.plain_input ? s.C : blocks(s.C) * 16;
  return s.N * planes * (s.H + pt + pb) * (s.W + pl + pr);
}

void conv(Isa isa, const ConvWeights& cw, const Conv2dShape& s, const float* x, const float* residual,
          const Activation& act, float* y, ThreadPool* pool, float* workspace) {
  if (s.N <= 0 || s.OH <= 0 || s.OW <= 0) return;
  if (int(isa) > int(best_isa())) isa = best_isa();
  auto* fn = &conv_rows_portable;
#if defined(__x86_64__)
  if (isa == Isa::Avx512) fn = &conv_rows_avx512;
  else if (isa == Isa::Avx2) fn = &conv_rows_avx2;
#endif
  Conv2dShape sp = s;
  if (needs_padding(cw, s)) {  // copy into a zero-padded buffer: the kernels then never test a tap
    int64_t Hp, Wp;
    padded_extent(s, Hp, Wp);
    const int64_t pix = cw.plain_input ? 1 : 16;  // floats per pixel of a plane
    const int64_t planes = s.N * (cw.plain_input ? s.C : blocks(s.C));
    // Work items are rows of the padded planes, ~16 KB a chunk: split by planes, a plain input's 3
    // planes went 2 | 1 to 2 threads (the 7x7 stem's 635 KB copy).
    const int64_t grain = std::max<int64_t>(1, 4096 / (Wp * pix));
    parallel_for(pool, planes * Hp, grain, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t p = i / Hp, r = i % Hp;
        const float* src = x + p * s.H * s.W * pix;
        float* d = workspace + (p * Hp + r) * Wp * pix;
        const int64_t ih = r - s.pt;
        if (ih < 0 || ih >= s.H) {
          std::memset(d, 0, size_t(Wp * pix) * sizeof(float));
          continue;
        }
        std::memset(d, 0, size_t(s.pl * pix) * sizeof(float));
        std::memcpy(d + s.pl * pix, src + ih * s.W * pix, size_t(s.W * pix) * sizeof(float));
        std::memset(d + (s.pl + s.W) * pix, 0, size_t((Wp - s.pl - s.W) * pix) * sizeof(float));
      }
    });
    sp.H = Hp;
    sp.W = Wp;
    sp.pt = sp.pl = 0;
    x = workspace;
  }
  const ConvTiling t = conv_tiling(cw, sp, pool ? pool->threads() : 1);
  parallel_for(pool, t.tasks(sp.N), 1, [&](int64_t t0, int64_t t1) { fn(cw, sp, t, x, residual, act, y, t0, t1); });
}

void conv_reference(const ConvWeights& cw, const Conv2dShape& s, const float* x, const float* residual,
                    const Activation& act, float* y) {
  const int64_t ICB = blocks(s.C), OB = cw.depthwise ? ICB : blocks(s.M);
  const int64_t x_img = cw.plain_input ? s.C * s.H * s.W : ICB * s.H * s.W * 16;
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t m = 0; m < OB * 16; ++m)
      for (int64_t oh = 0; oh < s.OH; ++oh)
        for (int64_t ow = 0; ow < s.OW; ++ow) {
          const int64_t yo = (((n * OB + m / 16) * s.OH + oh) * s.OW + ow) * 16 + m % 16;
          if (m >= s.M) {
            y[yo] = 0.f;
            continue;
          }
          float v = conv_output<double>(cw, s, x + n * x_img, m, oh, ow);
          if (residual) v += residual[yo];
          y[yo] = apply_activation(act, v);
        }
}

namespace {

// Work items of a layout conversion: (image and channel block, run of kReorderPixels pixels), so
// that one or two channel blocks of a large image still spread over every thread.
constexpr int64_t kReorderPixels = 1024;

// fn(n, cb, p0, p1) over every item, on the pool.
template <class Fn>
void for_reorder_items(ThreadPool* pool, int64_t N, int64_t CB, int64_t HW, Fn&& fn) {
  const int64_t runs = (HW + kReorderPixels - 1) / kReorderPixels;
  parallel_for(pool, N * CB * runs, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / runs, r = i % runs;
      fn(b / CB, b % CB, r * kReorderPixels, std::min(HW, (r + 1) * kReorderPixels));
    }
  });
}

}  // namespace

void to_blocked(Isa isa, const float* x, int64_t N, int64_t C, int64_t HW, float* y, ThreadPool* pool) {
  const int64_t CB = blocks(C);
  if (int(isa) > int(best_isa())) isa = best_isa();
  for_reorder_items(pool, N, CB, HW, [&](int64_t n, int64_t cb, int64_t p0, int64_t p1) {
    const int64_t nc = std::min<int64_t>(16, C - cb * 16);
    const float* xs = x + (n * C + cb * 16) * HW;
    float* yb = y + (n * CB + cb) * HW * 16;
#if defined(__x86_64__)
    if (isa == Isa::Avx512) return to_blocked_avx512(xs, nc, HW, yb, p0, p1);  // 16 x 16 register transposes
    if (isa == Isa::Avx2) return to_blocked_avx2(xs, nc, HW, yb, p0, p1);      // 8 x 8 ones
#endif
    for (int64_t p = p0; p < p1; ++p) {  // one contiguous write per pixel, 16 read streams
      float* yp = yb + p * 16;
      for (int64_t c = 0; c < nc; ++c) yp[c] = xs[c * HW + p];
      for (int64_t c = nc; c < 16; ++c) yp[c] = 0.f;
    }
  });
}

void from_blocked(Isa isa, const float* x, int64_t N, int64_t C, int64_t HW, float* y, ThreadPool* pool) {
  const int64_t CB = blocks(C);
  if (int(isa) > int(best_isa())) isa = best_isa();
  for_reorder_items(pool, N, CB, HW, [&](int64_t n, int64_t cb, int64_t p0, int64_t p1) {
    const int64_t nc = std::min<int64_t>(16, C - cb * 16);
    const float* xb = x + (n * CB + cb) * HW * 16;
    float* ys = y + (n * C + cb * 16) * HW;
#if defined(__x86_64__)
    if (isa == Isa::Avx512) return from_blocked_avx512(xb, nc, HW, ys, p0, p1);
    if (isa == Isa::Avx2) return from_blocked_avx2(xb, nc, HW, ys, p0, p1);
#endif
    // 16 pixels at a time: each channel's 16 outputs are one contiguous run, and the block's
    // 16 x 16 inputs (1 KB) stay in L1 while the channels are written (reading channel-major over
    // the whole block instead touched every input line 16 times: 4 ms for a 6.5 MB tensor)
    for (int64_t q = p0; q < p1; q += 16) {
      const int64_t qe = std::min(p1, q + 16);
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t p = q; p < qe; ++p) ys[c * HW + p] = xb[p * 16 + c];
    }
  });
}

namespace {

void pool_planes_portable(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  for (int64_t pl = p0; pl < p1; ++pl) {
    const float* xp = x + pl * g.H * g.W * 16;
    float* yp = y + pl * g.OH * g.OW * 16;
    for (int64_t oh = 0; oh < g.OH; ++oh)
      for (int64_t ow = 0; ow < g.OW; ++ow)
        for (int64_t l = 0; l < 16; ++l) {
          float acc = g.avg ? 0.f : -std::numeric_limits<float>::infinity();
          bool any = false;
          for (int64_t kh = 0; kh < g.kh; ++kh) {
            int64_t ih = oh * g.sh - g.ph + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.kw; ++kw) {
              int64_t iw = ow * g.sw - g.pw + kw * g.dw;
              if (iw < 0 || iw >= g.W) continue;
              float v = xp[(ih * g.W + iw) * 16 + l];
              any = true;
              if (g.avg) acc += v;
              else if (v > acc) acc = v;
            }
          }
          if (g.avg) {
            float cnt = g.count_include_pad ? t.pad_h[size_t(oh)] * t.pad_w[size_t(ow)] : t.cnt_h[size_t(oh)] * t.cnt_w[size_t(ow)];
            acc = cnt > 0 ? acc / cnt : 0.f;
          } else if (!any) {
            acc = 0.f;
          }
          yp[(oh * g.OW + ow) * 16 + l] = acc;
        }
  }
}

}  // namespace

void pool(Isa isa, const float* x, float* y, int64_t planes, const Pool2D& g, ThreadPool* tp) {
  if (planes <= 0 || g.OH <= 0 || g.OW <= 0) return;
  if (int(isa) > int(best_isa())) isa = best_isa();
  auto* fn = &pool_planes_portable;
#if defined(__x86_64__)
  if (isa == Isa::Avx512) fn = &pool_planes_avx512;
  else if (isa == Isa::Avx2) fn = &pool_planes_avx2;
#endif
  const PoolTables t(g);
  parallel_for(tp, planes, 1, [&](int64_t p0, int64_t p1) { fn(x, y, p0, p1, g, t); });
}

void global_pool(Isa isa, bool avg, const float* x, int64_t N, int64_t C, int64_t HW, float* y, ThreadPool* pool) {
  const int64_t CB = blocks(C);
  if (int(isa) > int(best_isa())) isa = best_isa();
  parallel_for(pool, N * CB, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n = b / CB, cb = b % CB, nc = std::min<int64_t>(16, C - cb * 16);
      const float* xb = x + b * HW * 16;
#if defined(__x86_64__)
      if (isa == Isa::Avx512 || isa == Isa::Avx2) {
        (isa == Isa::Avx512 ? global_pool_avx512 : global_pool_avx2)(avg, xb, nc, HW, y + n * C + cb * 16);
        continue;
      }
#endif
      float acc[16];
      for (int64_t l = 0; l < 16; ++l) acc[l] = avg ? 0.f : -std::numeric_limits<float>::infinity();
      for (int64_t p = 0; p < HW; ++p)
        for (int64_t l = 0; l < 16; ++l) {
          float v = xb[p * 16 + l];
          if (avg) acc[l] += v;
          else if (v > acc[l]) acc[l] = v;
        }
      for (int64_t l = 0; l < nc; ++l) y[n * C + cb * 16 + l] = avg ? acc[l] / float(HW) : acc[l];
    }
  });
}

void scale_shift(Isa isa, const float* x, const float* scale, const float* shift, const Activation& act, float* y,
                 int64_t N, int64_t CB, int64_t HW, ThreadPool* pool) {
  if (int(isa) > int(best_isa())) isa = best_isa();
  // Items: runs of up to kRun pixels of one plane; a chunk takes about kRun pixels (several small
  // planes at once: DenseNet's 7x7 ones are 49 pixels).
  constexpr int64_t kRun = 2048;
  const int64_t run = std::max<int64_t>(1, std::min(HW, kRun)), runs = (HW + run - 1) / run;
  parallel_for(pool, N * CB * runs, std::max<int64_t>(1, kRun / run), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t b = i / runs, p0 = i % runs * run, p1 = std::min(HW, p0 + run), cb = b % CB;
      const float* sc = scale + cb * 16;
      const float* sh = shift + cb * 16;
#if defined(__x86_64__)
      if (isa == Isa::Avx512 || isa == Isa::Avx2) {
        (isa == Isa::Avx512 ? scale_shift_avx512 : scale_shift_avx2)(x + b * HW * 16, sc, sh, act, y + b * HW * 16, p0, p1);
        continue;
      }
#endif
      for (int64_t p = p0; p < p1; ++p)
        for (int64_t l = 0; l < 16; ++l) {
          const int64_t k = (b * HW + p) * 16 + l;
          y[k] = apply_activation(act, x[k] * sc[l] + sh[l]);
        }
    }
  });
}

}  // namespace basalt::kernels::nchwc
