// Winograd convolution driver, weight transform and the portable transforms (see winograd.hpp).
#include "kernels/winograd.hpp"
#include "core/config.hpp"

#include <basalt/error.hpp>

#include "kernels/slot_set.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace basalt::kernels {

namespace {
// One blocked output pixel of the blocked transform (16 channels), the scalar epilogue.
inline void wino_pixel_epilogue(float* y, const float* z, const float* bias, const float* res, const Activation& act) {
  for (int l = 0; l < 16; ++l) y[l] = z[l];
  epilogue_row(y, 16, 1.f, 0.f, bias, res, act);
}
}  // namespace

#define WINO_INPUT_NAME winograd_input_portable
#define WINO_OUTPUT_NAME winograd_output_portable
#include "kernels/winograd_impl.inc"
#undef WINO_INPUT_NAME
#undef WINO_OUTPUT_NAME

namespace {

// Below these channel counts the per-tile transforms cost about as much as the products save.
constexpr int64_t kMinChannels = 16;
// Most concurrent jobs (one workspace slot each); a bigger pool runs the conv inline.
constexpr int kMaxSlots = SlotSet::kMax;

// BASALT_WINOGRAD: -1 = not set.
int env_tile() {
  return env_config().winograd;
}

// G of F(4x4, 3x3) and F(2x2, 3x3) (Lavin & Gray 2016), rows = transform positions.
constexpr double kG4[6][3] = {{1.0 / 4, 0, 0},           {-1.0 / 6, -1.0 / 6, -1.0 / 6}, {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                              {1.0 / 24, 1.0 / 12, 1.0 / 6}, {1.0 / 24, -1.0 / 12, 1.0 / 6}, {0, 0, 1}};
constexpr double kG2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

// Output channels per pass of the output transform: bounds the product buffer (alpha² x rows x
// block tiles) whatever M is.
int64_t msub_rows(const GemmArch& g, int64_t M) {
  return std::min(round_up(M, g.mr), std::max<int64_t>(g.mr, 128 / g.mr * g.mr));
}

float* align64(float* p) { return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63)); }

// Blocked layout: output channels per pass, a whole number of B panels and of 16-channel blocks.
int64_t msub_cols(const GemmArch& g, int64_t M) {
  const int64_t unit = std::max<int64_t>(g.nr, 16);  // (nr is 16 or 64: a multiple of 16 or 16 itself)
  return std::min(round_up(M, unit), std::max<int64_t>(unit, 128 / unit * unit));
}

// Floats of one job's workspace slot: V, the products and the transform scratch (+ alignment).
// The same for both layouts: the larger of each part (blocked: V rows padded to whole channel
// blocks, no scratch, but A packed per product where the arch cannot read it in place).
int64_t slot_floats(const GemmArch& g, const Conv2dShape& s, int tile) {
  const int64_t A = tile + 2, T = winograd_block_tiles(g);
  const int64_t v = A * A * round_up(s.C, 16) * T, o = A * A * std::max(msub_rows(g, s.M), msub_cols(g, s.M)) * T;
  const int64_t scratch = std::max(winograd_scratch_floats(tile, g.nr),
                                   sgemm_workspace_floats(g, T, msub_cols(g, s.M), s.C, false, true));
  return v + o + scratch + 3 * 16;
}

int slot_count(int threads) { return threads > kMaxSlots ? 1 : std::max(threads, 1); }

}  // namespace

int winograd_env_tile() {
  const int e = env_tile();
  return e == 0 || e == 2 || e == 4 ? e : -1;
}

bool winograd_applicable(const Conv2dShape& s) {
  return s.KH == 3 && s.KW == 3 && s.sh == 1 && s.sw == 1 && s.dh == 1 && s.dw == 1 && s.G == 1 &&
         s.C >= kMinChannels && s.M >= kMinChannels;
}

int winograd_choose_tile(const Conv2dShape& s, int64_t image_pixels) {
  if (!winograd_applicable(s)) return 0;
  const int e = env_tile();
  if (e == 0) return 0;
  if (e == 2 || e == 4) return e;
  // Image size known at load (static input shapes): measured per conv at 1 thread over ResNet-50,
  // SqueezeNet, Inception v1, DenseNet-121 and UNet (BASALT_WINOGRAD=0/2/4, basalt profile
  // traces), F(4x4) is 1.07-1.64x faster than the im2col conv from 27x27 images on (on par at
  // 55x55 with 16 input channels), while at 13x13-14x14 both tile sizes are slower (F(2x2) 0.69-
  // 0.96x, F(4x4) 0.55-0.83x) and at 6x6-7x7 far slower (0.2-0.77x). F(2x2) was never the best.
  if (image_pixels >= 0) return image_pixels >= 20 * 20 ? 4 : 0;
  // What pays depends on the tile count (the image size), which is not known at load; channel
  // counts stand in for it, as CNNs widen where they downsample. Measured at 1 thread against the
  // im2col conv (Winograd.DISABLED_Timings): F(4x4) is 1.7-2.7x faster from 28x28 outputs on, but
  // slower than F(2x2) at 13x13-16x16 (it streams 2.25x more transformed weights per tile) and
  // 0.25-0.5x at 6x6-7x7; F(2x2) is 1.2-1.7x faster at 13x13 and up and 0.8-0.9x at 6x6-7x7.
  const int64_t cm = s.C * s.M;
  if (cm <= 128 * 192) return 4;  // ResNet 64/128, DenseNet 128->32, UNet, Inception's 3x3 at 27x27+
  if (cm <= 256 * 256) return 2;  // ResNet 256 at 14x14, Inception's 13x13 blocks
  return 0;                       // 512-channel stages (7x7 in ResNet): the im2col conv is faster
}

int64_t winograd_block_tiles(const GemmArch& g) { return round_up(64, g.nr); }

int64_t winograd_scratch_floats(int tile, int nr) {
  // the row strides winograd_impl.inc uses: LW for a segment's columns, LT for a block's tiles
  const int64_t MT = tile, A = tile + 2, LW = MT * nr + 8, LT = round_up(round_up(64, nr), 16) + 16;
  // input transform: zero row + vertical rows + taps; output: vertical + per-pixel + one row
  return std::max(LW + A * LW + A * A * LT, (MT * A + MT * MT + MT) * LT) + 16;
}

WinogradWeights winograd_pack_weights(const GemmArch& g, const Conv2dShape& s, const float* w, int tile, bool blocked) {
  if (tile != 2 && tile != 4) BASALT_THROW(Internal, "winograd_pack_weights: tile must be 2 or 4");
  WinogradWeights u;
  u.arch = &g;
  u.tile = tile;
  u.M = s.M;
  u.C = s.C;
  u.blocked = blocked;
  const int A = tile + 2;
  const int64_t M = s.M, C = s.C, mf = u.matrix_floats();
  // U[ξ](m, c) = (G g Gᵀ)[ξ] for each (m, c) in double, written straight into its packed place
  // (pack_a's panels of U[ξ] [M x C], or pack_b's of U[ξ]ᵀ [C x M]); the padding rows or columns
  // stay zero from the fresh block. Going through a plain [ξ][m][c] copy and packing it after cost
  // ResNet-50's session creation a zero-filled 36 * M * C float vector and a transposing pass.
  u.data.reset(static_cast<size_t>(A * A * mf));
  float* out = u.data.data();
  const int64_t pw = blocked ? g.nr : g.mr;  // panel width
  const double(*G)[3] = tile == 4 ? kG4 : kG2;
  // Panel by panel, input channel outside, the panel's pw output channels innermost: each of
  // the A² matrices' stores then run sequentially through the panel, and the arithmetic is pw
  // independent lanes the compiler vectorizes (ResNet-50 session creation, perf samples: 15% ->
  // 5% of it).
  constexpr int64_t kMaxPanel = 64;
  if (pw > kMaxPanel) BASALT_THROW(Internal, "winograd_pack_weights: panel wider than 64");
  for (int64_t m0 = 0; m0 < M; m0 += pw) {
    const int64_t nm = std::min(pw, M - m0);
    float* panel = out + (m0 / pw) * C * pw;
    for (int64_t c = 0; c < C; ++c) {
      double kt[9][kMaxPanel];  // the 3x3 kernels of (m0 + mm, c), transposed
      for (int64_t mm = 0; mm < nm; ++mm)
        for (int t = 0; t < 9; ++t) kt[t][mm] = w[((m0 + mm) * C + c) * 9 + t];
      double gg[6][3][kMaxPanel];  // G g
      for (int i = 0; i < A; ++i)
        for (int kw = 0; kw < 3; ++kw)
          for (int64_t mm = 0; mm < nm; ++mm)
            gg[i][kw][mm] = G[i][0] * kt[kw][mm] + G[i][1] * kt[3 + kw][mm] + G[i][2] * kt[6 + kw][mm];
      // blocked: panel m / nr of B = U[ξ]ᵀ holds (k = c, column m % nr); else panel m / mr of A
      // holds (row m % mr, k = c): either way the panel's row c is pw consecutive floats
      for (int i = 0; i < A; ++i)
        for (int j = 0; j < A; ++j) {
          float* d = panel + (i * A + j) * mf + c * pw;
          for (int64_t mm = 0; mm < nm; ++mm)
            d[mm] = float(gg[i][0][mm] * G[j][0] + gg[i][1][mm] * G[j][1] + gg[i][2][mm] * G[j][2]);
        }
    }
  }
  return u;
}

int64_t winograd_workspace_floats(const GemmArch& g, const Conv2dShape& s, int tile, int threads) {
  if (tile != 2 && tile != 4) return 0;
  return slot_count(threads) * slot_floats(g, s, tile);
}

namespace {

// One conv2d_winograd call: the block split of the tiles over the threads, the per-thread
// workspace slots, and the two forms (NCHW input, or blocked weights/inputs).
struct WinogradRun {
  const GemmArch& g;
  const Conv2dShape& s;
  const float* x;
  const WinogradWeights& u;
  const float* bias;
  const float* residual;
  const Activation& act;
  float* y;
  ThreadPool* pool;
  float* workspace;
  int MT = 0, A = 0, AA = 0;
  int64_t M = 0, C = 0, T = 0, tiles = 0, nblocks = 0;
  int threads = 1;
  int64_t mp = 0, msub = 0, mf = 0, vstride = 0, ostride = 0, slot = 0;
  int64_t units = 0, bpt = 0;  // runs of 16 tiles; blocks per thread's run (0 = plain blocks of T)
  decltype(&winograd_input_portable) input = nullptr;
  decltype(&winograd_output_portable) output = nullptr;
  SlotSet slots;

  WinogradRun(const GemmArch& g_, const Conv2dShape& s_, const float* x_, const WinogradWeights& u_, const float* bias_,
              const float* residual_, const Activation& act_, float* y_, ThreadPool* pool_, float* workspace_)
      : g(g_), s(s_), x(x_), u(u_), bias(bias_), residual(residual_), act(act_), y(y_), pool(pool_), workspace(workspace_) {
    MT = u.tile, A = MT + 2, AA = A * A;
    M = s.M, C = s.C, T = winograd_block_tiles(g);
    tiles = s.N * ((s.OH + MT - 1) / MT) * ((s.OW + MT - 1) / MT);
    nblocks = (tiles + T - 1) / T;
    threads = pool ? pool->threads() : 1;
    if (threads > kMaxSlots) {  // more jobs at once than slots: run inline (the workspace has one slot)
      pool = nullptr;
      threads = 1;
    }
    mp = (M + g.mr - 1) / g.mr, msub = msub_rows(g, M), mf = u.matrix_floats();
    vstride = C * T, ostride = msub * T, slot = slot_floats(g, s, MT);
    input = g.isa == Isa::Avx512 ? winograd_input_avx512 : g.isa == Isa::Avx2 ? winograd_input_avx2 : winograd_input_portable;
    output = g.isa == Isa::Avx512 ? winograd_output_avx512 : g.isa == Isa::Avx2 ? winograd_output_avx2 : winograd_output_portable;
    split_blocks();
  }

  // Blocks: T tiles each, in order; but on a pool whose threads would get unequal numbers of
  // them (196 tiles = 64 + 64 + 64 + 4 at 2 threads: one thread 128 tiles, the other 68), the
  // tiles are first split evenly over the threads in runs of 16 (the GEMM's column vector), and
  // each thread's run into as few blocks of at most T tiles as hold it: the pool's parts are then
  // one thread's run each (196 tiles: 48 + 48 | 48 + 52).
  void split_blocks() {
    units = (tiles + 15) / 16;
    bpt = 0;
    if (threads > 1 && nblocks > threads) {
      const int64_t even = (units + threads - 1) / threads;
      int64_t plain_max = 0;  // the most 16-tile units one thread's part of plain blocks holds
      for (int p = 0; p < threads; ++p) {
        const int64_t b0 = nblocks * p / threads, b1 = nblocks * (p + 1) / threads;
        plain_max = std::max(plain_max, (std::min(tiles, b1 * T) - b0 * T + 15) / 16);
      }
      if (plain_max > even) {
        bpt = (even * 16 + T - 1) / T;
        nblocks = bpt * threads;
      }
    }
  }

  WinogradBlock block(int64_t blk) const {
    if (bpt == 0) return WinogradBlock{&s, MT, blk * T, std::min(T, tiles - blk * T), g.nr, 0, C, u.blocked};
    const int64_t p = blk / bpt, k = blk % bpt;
    const int64_t u0 = units * p / threads, u1 = units * (p + 1) / threads;
    const int64_t t0 = std::min(tiles, 16 * (u0 + (u1 - u0) * k / bpt));
    const int64_t t1 = std::min(tiles, 16 * (u0 + (u1 - u0) * (k + 1) / bpt));
    return WinogradBlock{&s, MT, t0, t1 - t0, g.nr, 0, C, u.blocked};
  }

  // Slot sl's areas: V, the products, the transform scratch.
  float* v_of(int sl) const { return align64(workspace + sl * slot); }
  float* o_of(int sl) const { return align64(v_of(sl) + AA * vstride); }
  float* scratch_of(int sl) const { return align64(o_of(sl) + AA * ostride); }

  // Products and output transform of output channels [ma, mb) of a block whose V is at v.
  void products(const WinogradBlock& b, const float* v, int64_t ma, int64_t mb, int sl) const {
    float* o = o_of(sl);
    for (int64_t m0 = ma; m0 < mb; m0 += msub) {
      const int64_t m1 = std::min(mb, m0 + msub);
      for (int xi = 0; xi < AA; ++xi) {
        GemmOperand pa, pb;
        pa.packed = u.data.data() + xi * mf + m0 * C;  // m0 is a whole number of mr-row panels
        pb.packed = v + xi * vstride;
        sgemm(g, m1 - m0, b.nt, C, pa, pb, o + xi * ostride, T, Epilogue{}, nullptr, nullptr);
      }
      output(b, o, ostride, T, m0, m1, bias, residual, act, y, scratch_of(sl));
    }
  }

  template <class Fn>
  void with_slot(Fn&& fn) {
    const int sl = slots.acquire();
    try {
      fn(sl);
    } catch (...) {
      slots.release(sl);
      throw;
    }
    slots.release(sl);
  }

  // The blocked form: V[xi]^T rows of round_up(C, 16) floats, products as [tiles, channels].
  void run_blocked() {
    // V[ξ]ᵀ rows of round_up(C, 16) floats (whole channel blocks), Out[ξ]ᵀ rows of msb columns.
    const int64_t ldv = round_up(C, 16), vs = ldv * T, msb = msub_cols(g, M), os = msb * T;
    const int64_t unit = std::max<int64_t>(g.nr, 16), mpb = (M + unit - 1) / unit;
    // Slot sl's areas: V as in the NCHW form (v_of), then these products and the GEMM's A packing.
    auto bo_of = [&](int sl) { return align64(v_of(sl) + AA * vs); };
    auto gemm_ws_of = [&](int sl) { return align64(bo_of(sl) + AA * os); };
    // Tiles [ta, tb) of block b.
    auto sub_block = [](WinogradBlock b, int64_t ta, int64_t tb) {
      b.t0 += ta;
      b.nt = tb - ta;
      return b;
    };
    // Products and output transform of tiles [ta, tb) of block b (V at v), channels [ma, mb).
    auto products_b = [&](const WinogradBlock& b, const float* v, int64_t ta, int64_t tb, int64_t ma, int64_t mb,
                          int sl) {
      const WinogradBlock sb = sub_block(b, ta, tb);
      float* o = bo_of(sl);
      for (int64_t m0 = ma; m0 < mb; m0 += msb) {
        const int64_t m1 = std::min(mb, m0 + msb);
        for (int xi = 0; xi < AA; ++xi) {
          GemmOperand pa, pb;
          pa.data = v + xi * vs + ta * ldv;
          pa.ld = ldv;
          pb.packed = u.data.data() + xi * mf + m0 * C;  // m0 is a whole number of nr-column panels
          sgemm(g, sb.nt, m1 - m0, C, pa, pb, o + xi * os, msb, Epilogue{}, nullptr, gemm_ws_of(sl));
        }
        output(sb, o, os, msb, m0, m1, bias, residual, act, y, nullptr);
      }
    };
    if (threads > 1 && nblocks <= threads) {
      // Few blocks: block b's V lives in slot b. The input transforms split by tiles; the
      // products by output channels (each part streams its share of U) and, where there are too
      // few panels of them, by tiles too (whole A slivers of mr rows).
      const int64_t want = (2 * threads + nblocks - 1) / nblocks;
      parallel_for(pool, nblocks * want, 1, [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          const WinogradBlock b = block(j / want);
          const int64_t part = j % want, ta = b.nt * part / want, tb = b.nt * (part + 1) / want;
          if (ta < tb) input(sub_block(b, ta, tb), x, v_of(int(j / want)) + ta * ldv, vs, nullptr);
        }
      });
      const int64_t mparts = std::min(mpb, want);
      const int64_t tparts = std::min((T + g.mr - 1) / g.mr, (want + mparts - 1) / mparts);
      parallel_for(pool, nblocks * mparts * tparts, 1, [&](int64_t j0, int64_t j1) {
        with_slot([&](int sl) {
          for (int64_t j = j0; j < j1; ++j) {
            const int64_t blk = j / (mparts * tparts), mpart = j / tparts % mparts, tpart = j % tparts;
            const WinogradBlock b = block(blk);
            const int64_t slivers = (b.nt + g.mr - 1) / g.mr;
            const int64_t ta = std::min(b.nt, slivers * tpart / tparts * g.mr);
            const int64_t tb = std::min(b.nt, slivers * (tpart + 1) / tparts * g.mr);
            const int64_t ma = mpb * mpart / mparts * unit, mb = std::min(M, mpb * (mpart + 1) / mparts * unit);
            if (ta < tb && ma < mb) products_b(b, v_of(int(blk)), ta, tb, ma, mb, sl);
          }
        });
      });
      return;
    }
    parallel_for(pool, nblocks, 1, [&](int64_t j0, int64_t j1) {
      with_slot([&](int sl) {
        for (int64_t j = j0; j < j1; ++j) {
          const WinogradBlock b = block(j);
          if (b.nt == 0) continue;
          input(b, x, v_of(sl), vs, nullptr);
          products_b(b, v_of(sl), 0, b.nt, 0, M, sl);
        }
      });
    });
  }

  // The NCHW form.
  void run_nchw() {
    if (threads > 1 && nblocks <= threads) {
      // Few blocks: block b's V lives in slot b. First every block's input transform, split by
      // input channels; then its products and output transform, split by output channels (a
      // job's products and scratch in a slot of its own).
      const int64_t cparts = std::min(C, (2 * threads + nblocks - 1) / nblocks);
      parallel_for(pool, nblocks * cparts, 1, [&](int64_t j0, int64_t j1) {
        with_slot([&](int sl) {
          for (int64_t j = j0; j < j1; ++j) {
            WinogradBlock b = block(j / cparts);
            const int64_t part = j % cparts;
            b.c0 = C * part / cparts;
            b.c1 = C * (part + 1) / cparts;
            input(b, x, v_of(int(j / cparts)), vstride, scratch_of(sl));
          }
        });
      });
      const int64_t mparts = std::min(mp, (2 * threads + nblocks - 1) / nblocks);
      parallel_for(pool, nblocks * mparts, 1, [&](int64_t j0, int64_t j1) {
        with_slot([&](int sl) {
          for (int64_t j = j0; j < j1; ++j) {
            const int64_t blk = j / mparts, part = j % mparts;
            const int64_t ma = mp * part / mparts * g.mr, mb = std::min(M, mp * (part + 1) / mparts * g.mr);
            products(block(blk), v_of(int(blk)), ma, mb, sl);
          }
        });
      });
      return;
    }
    parallel_for(pool, nblocks, 1, [&](int64_t j0, int64_t j1) {
      with_slot([&](int sl) {
        for (int64_t j = j0; j < j1; ++j) {
          const WinogradBlock b = block(j);
          if (b.nt == 0) continue;  // (a thread's run of fewer tiles than its blocks)
          input(b, x, v_of(sl), vstride, scratch_of(sl));
          products(b, v_of(sl), 0, M, sl);
        }
      });
    });
  }
};

}  // namespace

void conv2d_winograd(const GemmArch& g, const Conv2dShape& s, const float* x, const WinogradWeights& u,
                     const float* bias, const float* residual, const Activation& act, float* y, ThreadPool* pool,
                     float* workspace) {
  if (!winograd_applicable(s)) BASALT_THROW(Internal, "conv2d_winograd: not a 3x3 stride-1 ungrouped conv");
  if (u.arch != &g || u.M != s.M || u.C != s.C || (u.tile != 2 && u.tile != 4))
    BASALT_THROW(Internal, "conv2d_winograd: weights were transformed for another arch or shape");
  WinogradRun run(g, s, x, u, bias, residual, act, y, pool, workspace);
  if (run.tiles == 0) return;  // an empty output
  if (u.blocked) run.run_blocked();
  else run.run_nchw();
}

}  // namespace basalt::kernels
