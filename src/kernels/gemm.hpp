// fp32 GEMM: C[M,N] = epilogue(op(A)[M,K] * op(B)[K,N]), row-major with leading dimensions.
//
// Structure (the classic Goto/BLIS scheme, shape-agnostic, no per-shape code generation):
// - A is packed into panels of `mr` rows: panel p holds op(A)[p*mr + r, k] at [p*K*mr + k*mr + r]
//   (rows past M are zero). B is packed into panels of `nr` columns: panel q holds op(B)[k, q*nr + c]
//   at [q*K*nr + k*nr + c] (columns past N are zero). Any K range of a panel is contiguous, so one
//   packing serves every K blocking.
// - Where the ISA has a plain-A microkernel (AVX-512), a non-transposed A that is not packed
//   already is read in place instead: its 6 rows are 6 sequential streams, which the hardware
//   prefetchers follow, and the call skips a pass over A (for M=128 rows against a 768-column B,
//   packing A was 8-10% of the call at 2 threads).
// - A register-blocked microkernel per ISA computes an mr x nr tile of C from one A panel and one
//   B panel over a K block (AVX-512: 6x64 in 24 zmm accumulators; AVX2: 6x16; portable: 4x16).
// - The driver tiles C into blocks handed out dynamically by parallel_for, loops K in blocks of
//   kc (the B panel slice stays in L1, the A block in L2), and applies the epilogue to each tile
//   with its last K block: inside the microkernel, on the registers before the store, where the
//   ISA's kernel supports it (AVX-512, AVX2), else as a pass over the tile while it is in cache.
// - Operands too big for L2 (weights of big layers, large B matrices) are software-prefetched by
//   the microkernel: the next A sliver into L1 and the next B slice into L2, a line per k step.
//   The packed layouts make a K block of a panel contiguous, but consecutive panels lie K*mr (or
//   K*nr) floats apart, which the hardware prefetchers do not follow across pages.
// - A constant operand (weights) is packed once at load (pack_a / pack_b into a PackedMatrix);
//   the other is packed per call into caller-provided workspace.
// - A B of at most kGemvMaxCols columns skips the tiles: GemmArch::panel_gemv runs a
//   matrix-vector product per packed A panel (one pass over A with full-width vectors).
//
// Every ISA's path computes the same sums in the same K order up to FMA contraction, so results
// differ between ISAs only by rounding (tests compare against the portable twin with a tolerance
// relative to sum |a*b|).
#pragma once

#include "core/pages.hpp"
#include "kernels/activation.hpp"
#include "kernels/cpu.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace basalt {
class ThreadPool;
}

namespace basalt::kernels {

// What is done to each element of C after the product: c = act(alpha * c + row_bias[i] +
// col_bias[j] + residual[i*ldr + j]). Null pointers are skipped. Indices are global (row i of
// C, column j of C).
struct Epilogue {
  float alpha = 1.f;
  const float* row_bias = nullptr;
  const float* col_bias = nullptr;
  const float* residual = nullptr;
  int64_t ldr = 0;
  Activation act;
};

// An Epilogue as a microkernel applies it to one tile while storing the tile's last K block
// (no separate pass over C). Pointers are at the tile's element (0,0); null ones are skipped.
// All activations but Sigmoid and Tanh (which need exp in double) are fused this way, where the
// ISA's microkernel does it (GemmArch::fuses_epilogue).
struct TileEpilogue {
  float alpha = 1.f;
  const float* row_bias = nullptr;  // [m]
  const float* col_bias = nullptr;  // [n]
  const float* residual = nullptr;  // m x n, row stride ldr
  int64_t ldr = 0;
  Activation act;
};

// One ISA's microkernel and its tile geometry.
struct GemmArch {
  Isa isa;
  int mr, nr;  // tile rows (A panel height) and columns (B panel width)
  // C[0..m) x [0..n) (m <= mr, n <= nr, row stride ldc) = (accumulate ? C : 0) +
  //   sum_{k < kc} a[k*mr + i] * b[k*ldb + j]
  // ldb is nr for a packed B panel; a kernel with reads_plain_b reads only columns [0, n) of each
  // B row, so ldb may also be the row stride of a plain row-major B.
  // pf_a (may be null): the next A sliver (kc*mr floats), prefetched into L1 while this one runs.
  // pf_b (may be null): kc cache lines from pf_b on, prefetched into L2 (a part of the next B
  // slice). Prefetches are hints: they never fault and do not change the result.
  // te (may be null; only passed when fuses_epilogue): applied to the result before it is stored.
  void (*ukernel)(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n,
                  bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te);
  bool fuses_epilogue;  // the microkernel applies a TileEpilogue (any activation but Sigmoid and Tanh)
  bool reads_plain_b;   // the microkernel can read B in place (GemmOperand::in_place)
  // Applies `ep` to the m x n tile at c, whose element (0,0) is C's (row0, col0).
  void (*epilogue)(float* c, int64_t ldc, int m, int n, int64_t row0, int64_t col0, const Epilogue& ep);
  // ukernel reading A in place (may be null): row i of the tile at a + i * lda, k contiguous, so
  // a plain row-major op(A) needs no packing (sgemm then skips packing a non-transposed A).
  void (*ukernel_plain_a)(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                          int m, int n, bool accumulate, const float* pf_b, const TileEpilogue* te) = nullptr;
  // Matrix-vector product on one packed A panel, for a B of at most kGemvMaxCols columns:
  // y[r * ldy + c] = sum_k a[k * mr + r] * x[c * K + k] for r < m, c < n (columns of B stored
  // contiguously). It streams the panel once with full-width vectors instead of running the
  // microkernel on an nr-wide tile that holds n useful columns.
  void (*panel_gemv)(int64_t K, const float* a, const float* x, int n, float* y, int64_t ldy, int m) = nullptr;
};

// sgemm takes the panel_gemv route for B with at most this many columns (a 1x1 convolution on a
// 1x1 or 2x2 image: classifier heads, squeeze-excitation).
constexpr int64_t kGemvMaxCols = 4;

// The microkernel set of `isa`. The caller must only pick ISAs the CPU supports (best_isa() and
// below); Portable is always available.
const GemmArch& gemm_arch(Isa isa);
// gemm_arch(best_isa()).
const GemmArch& gemm_arch_best();

// Packed panel sizes in floats.
inline int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }
inline int64_t packed_a_floats(const GemmArch& g, int64_t M, int64_t K) { return round_up(M, g.mr) * K; }
inline int64_t packed_b_floats(const GemmArch& g, int64_t K, int64_t N) { return K * round_up(N, g.nr); }

// Packs op(A) (trans: A is stored [K, M] with leading dim lda) / op(B) (trans: B stored [N, K]).
// Panels [p0, p1) only, so callers can split packing across threads.
void pack_a(const GemmArch& g, int64_t M, int64_t K, const float* A, int64_t lda, bool trans, float* dst, int64_t p0,
            int64_t p1);
void pack_b(const GemmArch& g, int64_t K, int64_t N, const float* B, int64_t ldb, bool trans, float* dst, int64_t p0,
            int64_t p1);

// A matrix packed once (weights). `arch` records the geometry it was packed for.
struct PackedMatrix {
  const GemmArch* arch = nullptr;
  bool is_a = true;  // packed as the left operand (mr panels) or the right one (nr panels)
  int64_t rows = 0, cols = 0;  // op(X) dims: [M, K] for A, [K, N] for B
  PageBuffer<float> data;  // zero pages from the kernel (core/pages.hpp)
  size_t bytes() const { return data.size() * sizeof(float); }
};
PackedMatrix pack_a_matrix(const GemmArch& g, int64_t M, int64_t K, const float* A, int64_t lda, bool trans);
PackedMatrix pack_b_matrix(const GemmArch& g, int64_t K, int64_t N, const float* B, int64_t ldb, bool trans);

// An operand of sgemm: either packed already (packed != null, in the arch's layout) or a plain
// row-major matrix (data, ld, trans) that sgemm packs into the workspace.
struct GemmOperand {
  const float* data = nullptr;
  int64_t ld = 0;
  bool trans = false;
  const float* packed = nullptr;
  // B only, not transposed: where the arch reads_plain_b, the microkernel reads data in place
  // instead of a packed copy (a 1x1 convolution's input is already its B). Workspace sizes still
  // assume packing, so callers need not know whether the arch does this.
  bool in_place = false;
};

// Workspace floats sgemm needs for these operands (0 when both are packed).
int64_t sgemm_workspace_floats(const GemmArch& g, int64_t M, int64_t N, int64_t K, bool a_packed, bool b_packed);

// C[M,N] (row stride ldc) = epilogue(op(A) * op(B)). Runs on `pool` (null = inline). `workspace`
// must hold sgemm_workspace_floats(...) floats (64-byte alignment preferred). K == 0 gives
// epilogue(0).
void sgemm(const GemmArch& g, int64_t M, int64_t N, int64_t K, const GemmOperand& A, const GemmOperand& B, float* C,
           int64_t ldc, const Epilogue& ep, ThreadPool* pool, float* workspace);

// The portable reference: plain triple loop with double accumulation, then the epilogue. For
// differential tests only.
void sgemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, bool ta, const float* B, int64_t ldb,
                     bool tb, float* C, int64_t ldc, const Epilogue& ep);

// Microkernels per ISA (defined in gemm_avx512.cpp / gemm_avx2.cpp; call only on CPUs that have them).
void sgemm_ukernel_avx512(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n,
                          bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te);
void sgemm_ukernel_plain_a_avx512(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                  int64_t ldc, int m, int n, bool accumulate, const float* pf_b, const TileEpilogue* te);
void panel_gemv_avx512(int64_t K, const float* a, const float* x, int n, float* y, int64_t ldy, int m);
void sgemm_ukernel_avx2(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n,
                        bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te);
void panel_gemv_avx2(int64_t K, const float* a, const float* x, int n, float* y, int64_t ldy, int m);
// The end of an ISA's panel_gemv for one column: `part` holds the vector lanes of partial sums,
// lane j for row j % mr (its length a multiple of mr); adds them per row, then the k steps from
// k_tail on that the vector loop left, and stores rows [0, m) to y (stride ldy).
template <int MR>
inline void panel_gemv_finish(const float* part, int parts, const float* a, const float* x, int64_t k_tail, int64_t K,
                              float* y, int64_t ldy, int m) {
  float acc[MR];
  for (int r = 0; r < MR; ++r) {
    float t = 0.f;
    for (int j = r; j < parts; j += MR) t += part[j];
    acc[r] = t;
  }
  for (int64_t k = k_tail; k < K; ++k)
    for (int r = 0; r < MR; ++r) acc[r] += a[k * MR + r] * x[k];
  for (int r = 0; r < m; ++r) y[r * ldy] = acc[r];
}
// Epilogue over an m x n tile, compiled per ISA so the activations vectorize.
void epilogue_tile_portable(float* c, int64_t ldc, int m, int n, int64_t row0, int64_t col0, const Epilogue& ep);
void epilogue_tile_avx512(float* c, int64_t ldc, int m, int n, int64_t row0, int64_t col0, const Epilogue& ep);
void epilogue_tile_avx2(float* c, int64_t ldc, int m, int n, int64_t row0, int64_t col0, const Epilogue& ep);

}  // namespace basalt::kernels
