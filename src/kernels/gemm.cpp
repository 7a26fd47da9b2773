// fp32 GEMM driver, packing and the portable microkernel (see gemm.hpp for the scheme).
#include "kernels/gemm.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace basalt::kernels {

namespace {

// Portable microkernel: a 4x16 tile accumulated in a local array the compiler keeps in SSE
// registers. Also the twin the ISA kernels are tested against.
constexpr int PMR = 4, PNR = 16;

void ukernel_portable(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n,
                      bool accumulate, const float*, const float*, const TileEpilogue*) {
  float acc[PMR][PNR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    for (int r = 0; r < PMR; ++r) {
      float av = a[r];
      for (int j = 0; j < PNR; ++j) acc[r][j] += av * b[j];
    }
    a += PMR;
    b += ldb;
  }
  for (int r = 0; r < m; ++r) {
    float* cr = c + r * ldc;
    if (accumulate)
      for (int j = 0; j < n; ++j) cr[j] += acc[r][j];
    else
      for (int j = 0; j < n; ++j) cr[j] = acc[r][j];
  }
}

void panel_gemv_portable(int64_t K, const float* a, const float* x, int n, float* y, int64_t ldy, int m) {
  for (int c = 0; c < n; ++c) {
    float acc[PMR] = {};
    for (int64_t k = 0; k < K; ++k)
      for (int r = 0; r < PMR; ++r) acc[r] += a[k * PMR + r] * x[c * K + k];
    for (int r = 0; r < m; ++r) y[r * ldy + c] = acc[r];
  }
}

const GemmArch kPortable{Isa::Portable, PMR, PNR, ukernel_portable, false, false, epilogue_tile_portable, nullptr,
                         panel_gemv_portable};
const GemmArch kAvx2{Isa::Avx2, 6, 16, sgemm_ukernel_avx2, true, false, epilogue_tile_avx2, nullptr, panel_gemv_avx2};
const GemmArch kAvx512{Isa::Avx512, 6, 64, sgemm_ukernel_avx512, true, true, epilogue_tile_avx512,
                       sgemm_ukernel_plain_a_avx512, panel_gemv_avx512};

// K block: the B panel slice (kc x nr floats) that the A panels of a tile stream by. Each K block
// stores the tile of C and loads it back in the next, so longer blocks save that traffic; 64 KB
// slices (kc = 256 at nr = 64) sit in L2 and still feed the microkernel at full speed. Against
// 32 KB (kc = 128, L1-sized) on AVX-512, Zen 4, 1 thread: BERT-base 213-225 -> 208-216 ms and
// BERT-mini 9.1-9.4 -> 8.6-8.9 ms in alternating runs; CNNs (NCHWc, Winograd) unchanged. AVX2
// (nr = 16) keeps kc = 512, 32 KB.
int64_t k_block(const GemmArch& g) { return std::clamp<int64_t>(16384 / g.nr, 64, 512); }
constexpr int64_t MC_ROWS = 96;   // rows of C per tile (A block of MC x KC in L2)
constexpr int64_t NC_COLS = 256;  // columns of C per tile
constexpr int64_t kMinChunkMacs = int64_t(1) << 18;  // ~5 us of FMA work on one core (sgemm)
// Operands larger than these are prefetched by the microkernel (see sgemm).
constexpr int64_t PREFETCH_A_BYTES = 512 << 10;
constexpr int64_t PREFETCH_B_BYTES = 1 << 20;

bool has_epilogue(const Epilogue& ep) {
  return ep.alpha != 1.f || ep.row_bias || ep.col_bias || ep.residual || ep.act.kind != ActKind::None || ep.act.post;
}

}  // namespace

#define EPILOGUE_TILE_NAME epilogue_tile_portable
#include "kernels/gemm_epilogue.inc"
#undef EPILOGUE_TILE_NAME

const GemmArch& gemm_arch(Isa isa) {
  switch (isa) {
    case Isa::Avx512: return kAvx512;
    case Isa::Avx2: return kAvx2;
    default: return kPortable;
  }
}

const GemmArch& gemm_arch_best() {
  static const GemmArch& g = gemm_arch(best_isa());
  return g;
}

void pack_a(const GemmArch& g, int64_t M, int64_t K, const float* A, int64_t lda, bool trans, float* dst, int64_t p0,
            int64_t p1) {
  const int mr = g.mr;
  for (int64_t p = p0; p < p1; ++p) {
    float* d = dst + p * K * mr;
    int64_t r0 = p * mr;
    int rows = int(std::min<int64_t>(mr, M - r0));
    if (trans) {  // A stored [K, M]: each k gives mr contiguous values
      for (int64_t k = 0; k < K; ++k) {
        const float* s = A + k * lda + r0;
        float* dk = d + k * mr;
        int r = 0;
        for (; r < rows; ++r) dk[r] = s[r];
        for (; r < mr; ++r) dk[r] = 0.f;
      }
    } else {
      for (int r = 0; r < rows; ++r) {
        const float* s = A + (r0 + r) * lda;
        for (int64_t k = 0; k < K; ++k) d[k * mr + r] = s[k];
      }
      for (int r = rows; r < mr; ++r)
        for (int64_t k = 0; k < K; ++k) d[k * mr + r] = 0.f;
    }
  }
}

void pack_b(const GemmArch& g, int64_t K, int64_t N, const float* B, int64_t ldb, bool trans, float* dst, int64_t p0,
            int64_t p1) {
  const int nr = g.nr;
  if (!trans) {
    // B stored [K, N]: row k of the panels [p0, p1) is one contiguous source segment, read in
    // order (a panel at a time would read K short pieces of rows far apart).
    const int64_t c_end = std::min<int64_t>(N, p1 * nr);
    // The rows are far apart (a conv's input planes), too short for the hardware prefetcher to
    // follow: fetch the segment kPrefetchRows rows ahead while this one is copied.
    constexpr int64_t kPrefetchRows = 8;
    const int64_t seg_bytes = (c_end - p0 * nr) * int64_t(sizeof(float));
    for (int64_t k = 0; k < K; ++k) {
      const float* s = B + k * ldb;
      if (k + kPrefetchRows < K) {
        const char* pf = reinterpret_cast<const char*>(s + kPrefetchRows * ldb + p0 * nr);
        for (int64_t off = 0; off < seg_bytes; off += 64) __builtin_prefetch(pf + off, 0, 3);
      }
      for (int64_t p = p0; p < p1; ++p) {
        float* dk = dst + p * K * nr + k * nr;
        int64_t c0 = p * nr;
        if (c0 + nr <= c_end) {
          if (nr == 64) std::memcpy(dk, s + c0, 64 * sizeof(float));  // constant sizes inline
          else if (nr == 16) std::memcpy(dk, s + c0, 16 * sizeof(float));
          else std::memcpy(dk, s + c0, size_t(nr) * sizeof(float));
        } else {
          int cols = int(c_end - c0);
          std::memcpy(dk, s + c0, size_t(cols) * sizeof(float));
          for (int c = cols; c < nr; ++c) dk[c] = 0.f;
        }
      }
    }
    return;
  }
  for (int64_t p = p0; p < p1; ++p) {
    float* d = dst + p * K * nr;
    int64_t c0 = p * nr;
    int cols = int(std::min<int64_t>(nr, N - c0));
    // B stored [N, K]: column c of the panel is row c0 + c of B
    for (int c = 0; c < cols; ++c) {
      const float* s = B + (c0 + c) * ldb;
      for (int64_t k = 0; k < K; ++k) d[k * nr + c] = s[k];
    }
    for (int c = cols; c < nr; ++c)
      for (int64_t k = 0; k < K; ++k) d[k * nr + c] = 0.f;
  }
}

PackedMatrix pack_a_matrix(const GemmArch& g, int64_t M, int64_t K, const float* A, int64_t lda, bool trans) {
  PackedMatrix pm;
  pm.arch = &g;
  pm.is_a = true;
  pm.rows = M;
  pm.cols = K;
  pm.data.reset(size_t(packed_a_floats(g, M, K)));
  pack_a(g, M, K, A, lda, trans, pm.data.data(), 0, (M + g.mr - 1) / g.mr);
  return pm;
}

PackedMatrix pack_b_matrix(const GemmArch& g, int64_t K, int64_t N, const float* B, int64_t ldb, bool trans) {
  PackedMatrix pm;
  pm.arch = &g;
  pm.is_a = false;
  pm.rows = K;
  pm.cols = N;
  pm.data.reset(size_t(packed_b_floats(g, K, N)));
  pack_b(g, K, N, B, ldb, trans, pm.data.data(), 0, (N + g.nr - 1) / g.nr);
  return pm;
}

int64_t sgemm_workspace_floats(const GemmArch& g, int64_t M, int64_t N, int64_t K, bool a_packed, bool b_packed) {
  int64_t n = 0;
  if (!a_packed) n += packed_a_floats(g, M, K) + 16;
  if (!b_packed) n += packed_b_floats(g, K, N) + 16;
  return n;
}

void sgemm(const GemmArch& g, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, float* C,
           int64_t ldc, const Epilogue& ep, ThreadPool* pool, float* workspace) {
  if (M <= 0 || N <= 0) return;
  const bool epi = has_epilogue(ep);
  // the microkernel applies the epilogue itself where it can (no second pass over the tile)
  const bool fuse = epi && g.fuses_epilogue && ep.act.kind != ActKind::Sigmoid && ep.act.kind != ActKind::Tanh;
  if (K <= 0) {
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.f);
    if (epi) g.epilogue(C, ldc, int(M), int(N), 0, 0, ep);  // m/n only index rows/cols here
    return;
  }
  const int64_t mp = (M + g.mr - 1) / g.mr, np = (N + g.nr - 1) / g.nr;
  const float* pa = A.packed;
  const float* pb = B.packed;
  float* w = workspace;
  auto align16 = [](float* p) {
    return reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(p) + 63) & ~uintptr_t(63));
  };
  // A read in place by the arch's plain-A kernel: no packing pass, and no extra pass over A
  // before the product. BERT-base's 128x768 by 768x768 projection at 2 threads, microbenchmark:
  // packing A was 8-10% of the call. Not for a few columns of B: the panel_gemv route below reads
  // A packed.
  const bool gemv = N <= kGemvMaxCols && !pb && g.panel_gemv;
  const bool a_in_place = !gemv && !pa && !A.trans && g.ukernel_plain_a;
  if (!pa && !a_in_place) {
    float* dst = align16(w);
    w = dst + packed_a_floats(g, M, K);
    int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(K * g.mr, 1));
    parallel_for(pool, mp, grain, [&](int64_t b, int64_t e) { pack_a(g, M, K, A.data, A.ld, A.trans, dst, b, e); });
    pa = dst;
  }
  // A few columns of B (a 1x1 convolution on a 1x1 image): panel_gemv streams each A panel once
  // with full vectors. The microkernel would multiply a whole nr-wide tile for them (64 columns
  // on AVX-512, N useful), after packing B into nr-wide zero-padded panels. DenseNet-121's
  // 1000x1024 classifier: 0.47 ms on the microkernel path.
  if (gemv) {  // A is packed by now
    float* xt = align16(w);  // the columns of op(B), each contiguous
    for (int64_t c = 0; c < N; ++c)
      for (int64_t k = 0; k < K; ++k) xt[c * K + k] = B.trans ? B.data[c * B.ld + k] : B.data[k * B.ld + c];
    const int64_t grain = std::max<int64_t>(1, 32768 / (K * g.mr));
    parallel_for(pool, mp, grain, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const int m = int(std::min<int64_t>(g.mr, M - p * g.mr));
        float* c = C + p * g.mr * ldc;
        g.panel_gemv(K, pa + p * K * g.mr, xt, int(N), c, ldc, m);
        if (epi) g.epilogue(c, ldc, m, int(N), p * g.mr, 0, ep);
      }
    });
    return;
  }
  const bool b_in_place = !pb && B.in_place && !B.trans && g.reads_plain_b;
  if (!pb && !b_in_place) {
    float* dst = align16(w);
    int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(K * g.nr, 1));
    parallel_for(pool, np, grain, [&](int64_t b, int64_t e) { pack_b(g, K, N, B.data, B.ld, B.trans, dst, b, e); });
    pb = dst;
  }

  // Tile grid: blocks of mcp A panels x ncp B panels, shrunk until there are enough tiles to
  // balance across the pool's threads.
  int64_t mcp = std::min<int64_t>(mp, std::max<int64_t>(1, MC_ROWS / g.mr));
  int64_t ncp = std::min<int64_t>(np, std::max<int64_t>(1, NC_COLS / g.nr));
  const int threads = pool ? pool->threads() : 1;
  auto count = [&] { return ((mp + mcp - 1) / mcp) * ((np + ncp - 1) / ncp); };
  if (threads > 1) {
    while (count() < 4 * threads && ncp > 1) ncp = (ncp + 1) / 2;
    while (count() < 4 * threads && mcp > 1) mcp = (mcp + 1) / 2;
  }
  const int64_t tm = (mp + mcp - 1) / mcp, tn = (np + ncp - 1) / ncp;
  // Software prefetch pays off for operands that come from L3 or memory (weights of big layers,
  // B matrices larger than L2); for operands that sit in L2 anyway (small weights, freshly packed
  // panels) the extra loads only cost issue slots (measured 5-8% on small convs).
  const bool prefetch_a = !a_in_place && mp * g.mr * K * int64_t(sizeof(float)) > PREFETCH_A_BYTES;
  const bool prefetch_b = !b_in_place && np * g.nr * K * int64_t(sizeof(float)) > PREFETCH_B_BYTES;
  const int64_t ldb = b_in_place ? B.ld : g.nr;  // B row stride as the microkernel reads it
  // Tiles per chunk: at least kMinChunkMacs multiply-adds of real work each (a tile's rows and
  // columns capped at M and N: a tile over 3 columns of B is not nr columns of work), so a small
  // GEMM runs inline instead of paying a hand-off per few microseconds of work. Silero VAD's
  // convolutions (M 128-258, N 3-4, K 387-768) ran as 8 tiles of ~20K multiply-adds on 2 threads:
  // a run took 0.126 ms at 2 threads against 0.105 at 1; now 0.107 (`basalt bench`, 3 alternating
  // rounds). ResNet-50, MobileNetV2, SqueezeNet, ShuffleNet and BERT-mini unchanged within noise.
  const int64_t tile_macs = std::min(M, mcp * g.mr) * std::min(N, ncp * g.nr) * K;
  const int64_t grain = std::max<int64_t>(1, kMinChunkMacs / std::max<int64_t>(tile_macs, 1));
  parallel_for(pool, tm * tn, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      int64_t bm = t % tm, bn = t / tm;
      int64_t pm0 = bm * mcp, pm1 = std::min(mp, pm0 + mcp);
      int64_t pn0 = bn * ncp, pn1 = std::min(np, pn0 + ncp);
      const int64_t KC = k_block(g);
      for (int64_t k0 = 0; k0 < K; k0 += KC) {
        int64_t kc = std::min(KC, K - k0);
        bool acc = k0 > 0, last = k0 + kc >= K;
        for (int64_t pn = pn0; pn < pn1; ++pn) {
          const float* bp = b_in_place ? B.data + k0 * B.ld + pn * g.nr : pb + pn * K * g.nr + k0 * g.nr;
          int n = int(std::min<int64_t>(g.nr, N - pn * g.nr));
          // The B slice used after this one: the next panel's, or the first panel's in the next K
          // block. The first calls below bring it into L2, kc lines each.
          const float* bnext = nullptr;
          int64_t bnext_kc = 0;
          if (prefetch_b && pn + 1 < pn1) {
            bnext = pb + (pn + 1) * K * g.nr + k0 * g.nr;
            bnext_kc = kc;
          } else if (prefetch_b && !last) {
            bnext = pb + pn0 * K * g.nr + (k0 + kc) * g.nr;
            bnext_kc = std::min(KC, K - k0 - kc);
          }
          const int64_t bnext_calls = bnext ? (bnext_kc * g.nr + kc * 16 - 1) / (kc * 16) : 0;
          for (int64_t pm = pm0; pm < pm1; ++pm) {
            const float* ap = a_in_place ? A.data + pm * g.mr * A.ld + k0 : pa + pm * K * g.mr + k0 * g.mr;
            int m = int(std::min<int64_t>(g.mr, M - pm * g.mr));
            float* c = C + pm * g.mr * ldc + pn * g.nr;
            // the A sliver of the next call (the next panel, or the first one again)
            const float* anext = !prefetch_a ? nullptr : pm + 1 < pm1 ? ap + K * g.mr : pa + pm0 * K * g.mr + k0 * g.mr;
            const float* bpf = bnext && pm - pm0 < bnext_calls ? bnext + (pm - pm0) * kc * 16 : nullptr;
            auto ukernel = [&](const TileEpilogue* tep) {
              if (a_in_place) g.ukernel_plain_a(kc, ap, A.ld, bp, ldb, c, ldc, m, n, acc, bpf, tep);
              else g.ukernel(kc, ap, bp, ldb, c, ldc, m, n, acc, anext, bpf, tep);
            };
            if (last && fuse) {
              TileEpilogue te;
              te.alpha = ep.alpha;
              te.row_bias = ep.row_bias ? ep.row_bias + pm * g.mr : nullptr;
              te.col_bias = ep.col_bias ? ep.col_bias + pn * g.nr : nullptr;
              te.residual = ep.residual ? ep.residual + pm * g.mr * ep.ldr + pn * g.nr : nullptr;
              te.ldr = ep.ldr;
              te.act = ep.act;
              ukernel(&te);
            } else {
              ukernel(nullptr);
              if (last && epi) g.epilogue(c, ldc, m, n, pm * g.mr, pn * g.nr, ep);
            }
          }
        }
      }
    }
  });
}

void sgemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B, int64_t ldb,
                     bool tb, float* C, int64_t ldc, const Epilogue& ep) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        s += a * b;
      }
      C[i * ldc + j] = float(s);
    }
    epilogue_row(C + i * ldc, N, ep.alpha, ep.row_bias ? ep.row_bias[i] : 0.f, ep.col_bias,
                 ep.residual ? ep.residual + i * ep.ldr : nullptr, ep.act);
  }
}

}  // namespace basalt::kernels
