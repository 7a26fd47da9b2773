// AVX2+FMA sgemm microkernel: a 6x16 tile of C in 12 ymm accumulators (2 B vectors and 6 A
// broadcasts per k step). Rows below 6 get their own instantiations; a column tail is handled by
// masked loads and stores of C. The epilogue is applied on the registers before the store
// (fuses_epilogue), as in gemm_avx512.cpp. B is always packed: reading a plain B in place, 16
// columns per row step, made MobileNetV2's pointwise convs slower (AVX2, 1 thread: 12.6-13.5 ->
// 16.7 ms per run), where the 64-column AVX-512 tile gains.
#include "kernels/activation_avx2.hpp"
#include "kernels/gemm.hpp"

#include <immintrin.h>

namespace basalt::kernels {

namespace {

constexpr int MR = 6, NR = 16;

inline __m256i tail_mask(int n) {  // lanes [0, n) set, n in [1, 8]
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - n));
}

// B is a packed panel (its columns past n are zero and readable).
template <int R, int NV>
void tile(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int n, bool accumulate,
          const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  __m256 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) s[r][v] = _mm256_setzero_ps();
  const int tail = n - (NV - 1) * 8;
  const __m256i last = tail_mask(tail >= 8 ? 8 : tail);
  for (int64_t k = 0; k < kc; ++k) {
    // prefetches as in gemm_avx512.cpp
    if (pf_a) _mm_prefetch(reinterpret_cast<const char*>(pf_a + k * MR), _MM_HINT_T0);
    if (pf_b) _mm_prefetch(reinterpret_cast<const char*>(pf_b + k * 16), _MM_HINT_T1);
    __m256 bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + v * 8);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m256 av = _mm256_broadcast_ss(a + r);
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) s[r][v] = _mm256_fmadd_ps(av, bv[v], s[r][v]);
    }
    a += MR;
    b += ldb;
  }
  const bool full = tail >= 8;
  // masked where the vector runs past the tile's columns
  auto load = [&](const float* p, int v) {
    return v < NV - 1 || full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, last);
  };
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      __m256 x = s[r][v];
      if (accumulate) x = _mm256_add_ps(x, load(c + r * ldc + v * 8, v));
      if (te) {  // the Epilogue's order of operations (activation.hpp, epilogue_row)
        if (te->alpha != 1.f) x = _mm256_mul_ps(x, _mm256_set1_ps(te->alpha));
        if (te->row_bias) x = _mm256_add_ps(x, _mm256_set1_ps(te->row_bias[r]));
        if (te->col_bias) x = _mm256_add_ps(x, load(te->col_bias + v * 8, v));
        if (te->residual) x = _mm256_add_ps(x, load(te->residual + r * te->ldr + v * 8, v));
      }
      s[r][v] = x;
    }
  if (te) act_ymm_n(&s[0][0], R * NV, te->act);  // the activation's kind tested once per tile
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * 8;
      if (v < NV - 1 || full) _mm256_storeu_ps(p, s[r][v]);
      else _mm256_maskstore_ps(p, last, s[r][v]);
    }
}

template <int R>
void tile_rows(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int n, bool accumulate,
               const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  if (n <= 8) tile<R, 1>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te);
  else tile<R, 2>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te);
}

// panel_gemv as in gemm_avx512.cpp: 4 k steps of a panel are 24 floats, 3 vectors, multiplied by
// three permutes of 4 loaded x values; lane j of accumulator v sums row (8 v + j) % 6.
template <int NC>
void panel_gemv_cols(int64_t K, const float* a, const float* x, float* y, int64_t ldy, int m) {
  static_assert(MR == 6, "the permute pattern assumes 6-row panels");
  const __m256i i0 = _mm256_setr_epi32(0, 0, 0, 0, 0, 0, 1, 1);
  const __m256i i1 = _mm256_setr_epi32(1, 1, 1, 1, 2, 2, 2, 2);
  const __m256i i2 = _mm256_setr_epi32(2, 2, 3, 3, 3, 3, 3, 3);
  __m256 s[NC][3];
#pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) s[c][0] = s[c][1] = s[c][2] = _mm256_setzero_ps();
  const int64_t K4 = K / 4 * 4;
  for (int64_t k = 0; k < K4; k += 4) {
    const float* ak = a + k * MR;
    __m256 a0 = _mm256_loadu_ps(ak), a1 = _mm256_loadu_ps(ak + 8), a2 = _mm256_loadu_ps(ak + 16);
#pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      __m256 xv = _mm256_broadcast_ps(reinterpret_cast<const __m128*>(x + c * K + k));
      s[c][0] = _mm256_fmadd_ps(a0, _mm256_permutevar8x32_ps(xv, i0), s[c][0]);
      s[c][1] = _mm256_fmadd_ps(a1, _mm256_permutevar8x32_ps(xv, i1), s[c][1]);
      s[c][2] = _mm256_fmadd_ps(a2, _mm256_permutevar8x32_ps(xv, i2), s[c][2]);
    }
  }
  for (int c = 0; c < NC; ++c) {
    alignas(32) float part[24];
    _mm256_store_ps(part, s[c][0]);
    _mm256_store_ps(part + 8, s[c][1]);
    _mm256_store_ps(part + 16, s[c][2]);
    panel_gemv_finish<MR>(part, 24, a, x + c * K, K4, K, y + c, ldy, m);
  }
}

}  // namespace

void panel_gemv_avx2(int64_t K, const float* a, const float* x, int n, float* y, int64_t ldy, int m) {
  switch (n) {
    case 1: panel_gemv_cols<1>(K, a, x, y, ldy, m); break;
    case 2: panel_gemv_cols<2>(K, a, x, y, ldy, m); break;
    case 3: panel_gemv_cols<3>(K, a, x, y, ldy, m); break;
    default: panel_gemv_cols<4>(K, a, x, y, ldy, m); break;
  }
}

void sgemm_ukernel_avx2(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m, int n,
                        bool accumulate,
                        const float* pf_a, const float* pf_b, const TileEpilogue* te) {
  switch (m) {
    case 1: tile_rows<1>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 2: tile_rows<2>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 3: tile_rows<3>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 4: tile_rows<4>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    case 5: tile_rows<5>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
    default: tile_rows<6>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te); break;
  }
}

#define EPILOGUE_TILE_NAME epilogue_tile_avx2
#include "kernels/gemm_epilogue.inc"
#undef EPILOGUE_TILE_NAME

}  // namespace basalt::kernels
