// AVX-512 sgemm microkernel: a 6x64 tile of C in 24 zmm accumulators. Per k step it loads 4
// vectors of the B panel and broadcasts 6 values of the A panel (24 FMAs). Row counts below 6 and
// column counts below 64 get their own instantiations (no wasted FMAs on tails beyond the last
// 16-column vector, which is masked).
#include "kernels/activation_avx512.hpp"
#include "kernels/gemm.hpp"

#include <immintrin.h>

namespace basalt::kernels {

namespace {

constexpr int MR = 6, NR = 64;

// PLAIN: a is op(A) itself, row-major with row stride lda (rows r of the tile at a + r * lda, k
// contiguous); otherwise a packed panel (a[k * MR + r]) and lda is unused.
template <int R, int NV, bool PLAIN>
void tile(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int n,
          bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  __m512 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  int tail = n - (NV - 1) * 16;
  const __mmask16 last = tail >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << tail) - 1);
  for (int64_t k = 0; k < kc; ++k) {
    // The next A sliver (same size as this one) is fetched into L1 at the pace this one is
    // consumed, so it is there when its call starts; pf_b: one line per k step of whatever the
    // driver wants in L2 next (part of the next B slice).
    if (pf_a) _mm_prefetch(reinterpret_cast<const char*>(pf_a + k * MR), _MM_HINT_T0);
    if (pf_b) _mm_prefetch(reinterpret_cast<const char*>(pf_b + k * 16), _MM_HINT_T1);
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      // the last vector loads only the tile's columns: B may be a plain matrix (ldb != NR)
      // whose row ends there
      bv[v] = v < NV - 1 ? _mm512_loadu_ps(b + v * 16) : _mm512_maskz_loadu_ps(last, b + v * 16);
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(PLAIN ? a[r * lda] : a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
    }
    a += PLAIN ? 1 : MR;
    b += ldb;
  }
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __mmask16 mk = v == NV - 1 ? last : __mmask16(0xFFFF);
      __m512 x = s[r][v];
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, c + r * ldc + v * 16));
      if (te) {  // the Epilogue's order of operations (activation.hpp, epilogue_row)
        if (te->alpha != 1.f) x = _mm512_mul_ps(x, _mm512_set1_ps(te->alpha));
        if (te->row_bias) x = _mm512_add_ps(x, _mm512_set1_ps(te->row_bias[r]));
        if (te->col_bias) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, te->col_bias + v * 16));
        if (te->residual) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, te->residual + r * te->ldr + v * 16));
      }
      s[r][v] = x;
    }
  if (te) act_zmm_n(&s[0][0], R * NV, te->act);  // the activation's kind tested once per tile
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) _mm512_mask_storeu_ps(c + r * ldc + v * 16, v == NV - 1 ? last : __mmask16(0xFFFF), s[r][v]);
}

template <int R, bool PLAIN>
void tile_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int n,
               bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  switch ((n + 15) / 16) {
    case 1: tile<R, 1, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 2: tile<R, 2, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 3: tile<R, 3, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    default: tile<R, 4, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
  }
}

template <bool PLAIN>
void ukernel_rows(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
                  int n, bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  switch (m) {
    case 1: tile_rows<1, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 2: tile_rows<2, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 3: tile_rows<3, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 4: tile_rows<4, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 5: tile_rows<5, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    default: tile_rows<6, PLAIN>(kc, a, lda, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
  }
}

// panel_gemv: 8 k steps of a panel are 48 floats, 3 vectors. The x values they multiply follow
// the pattern k = flat index / 6, which three permutes of 8 loaded x values produce. Lane j of
// accumulator v then holds a partial sum for row (16 v + j) % 6; the 8 partials of each row are
// added at the end.
template <int NC>
void panel_gemv_cols(int64_t K, const float* a, const float* x, float* y, int64_t ldy, int m) {
  static_assert(MR == 6, "the permute pattern assumes 6-row panels");
  const __m512i i0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2);
  const __m512i i1 = _mm512_setr_epi32(2, 2, 3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 5, 5);
  const __m512i i2 = _mm512_setr_epi32(5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7);
  __m512 s[NC][3];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) s[c][0] = s[c][1] = s[c][2] = _mm512_setzero_ps();
  const int64_t K8 = K / 8 * 8;
  for (int64_t k = 0; k < K8; k += 8) {
    const float* ak = a + k * MR;
    __m512 a0 = _mm512_loadu_ps(ak), a1 = _mm512_loadu_ps(ak + 16), a2 = _mm512_loadu_ps(ak + 32);
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      __m512 xv = _mm512_maskz_loadu_ps(0xFF, x + c * K + k);
      s[c][0] = _mm512_fmadd_ps(a0, _mm512_maskz_permutexvar_ps(0xFFFF, i0, xv), s[c][0]);
      s[c][1] = _mm512_fmadd_ps(a1, _mm512_maskz_permutexvar_ps(0xFFFF, i1, xv), s[c][1]);
      s[c][2] = _mm512_fmadd_ps(a2, _mm512_maskz_permutexvar_ps(0xFFFF, i2, xv), s[c][2]);
    }
  }
  for (int c = 0; c < NC; ++c) {
    alignas(64) float part[48];
    _mm512_store_ps(part, s[c][0]);
    _mm512_store_ps(part + 16, s[c][1]);
    _mm512_store_ps(part + 32, s[c][2]);
    panel_gemv_finish<MR>(part, 48, a, x + c * K, K8, K, y + c, ldy, m);
  }
}

}  // namespace

void sgemm_ukernel_avx512(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n,
                          bool accumulate, const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  ukernel_rows<false>(kc, a, 0, b, ldb, c, ldc, m, n, accumulate, pf_a, pf_b, te);
}

void sgemm_ukernel_plain_a_avx512(int64_t kc, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                  int64_t ldc, int m, int n, bool accumulate, const float* pf_b, const TileEpilogue* te) {
  ukernel_rows<true>(kc, a, lda, b, ldb, c, ldc, m, n, accumulate, nullptr, pf_b, te);
}

void panel_gemv_avx512(int64_t K, const float* a, const float* x, int n, float* y, int64_t ldy, int m) {
  switch (n) {
    case 1: panel_gemv_cols<1>(K, a, x, y, ldy, m); break;
    case 2: panel_gemv_cols<2>(K, a, x, y, ldy, m); break;
    case 3: panel_gemv_cols<3>(K, a, x, y, ldy, m); break;
    default: panel_gemv_cols<4>(K, a, x, y, ldy, m); break;
  }
}

#define EPILOGUE_TILE_NAME epilogue_tile_avx512
#include "kernels/gemm_epilogue.inc"
#undef EPILOGUE_TILE_NAME

}  // namespace basalt::kernels
