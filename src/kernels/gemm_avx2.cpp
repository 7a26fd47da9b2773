// AVX2+FMA sgemm microkernel: a 6x16 tile of C in 12 ymm accumulators (2 B vectors and 6 A
// broadcasts per k step). Rows below 6 get their own instantiations; a column tail is handled by
// masked loads and stores.
#include "kernels/gemm.hpp"

#include <immintrin.h>

namespace basalt::kernels {

namespace {

constexpr int MR = 6, NR = 16;

inline __m256i tail_mask(int n) {  // lanes [0, n) set, n in [1, 8]
  alignas(32) static const int32_t bits[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(bits + 8 - n));
}

template <int R, int NV>
void tile(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int n, bool accumulate,
          const float* pf_a,
          const float* pf_b, const TileEpilogue* te) {
  __m256 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) s[r][v] = _mm256_setzero_ps();
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
  int tail = n - (NV - 1) * 8;
  __m256i last = tail_mask(tail >= 8 ? 8 : tail);
  bool full = tail >= 8;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * 8;
      __m256 x = s[r][v];
      if (v < NV - 1 || full) {
        if (accumulate) x = _mm256_add_ps(x, _mm256_loadu_ps(p));
        _mm256_storeu_ps(p, x);
      } else {
        if (accumulate) x = _mm256_add_ps(x, _mm256_maskload_ps(p, last));
        _mm256_maskstore_ps(p, last, x);
      }
    }
}

template <int R>
void tile_rows(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int n, bool accumulate,
               const float* pf_a,
               const float* pf_b, const TileEpilogue* te) {
  if (n <= 8) tile<R, 1>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te);
  else tile<R, 2>(kc, a, b, ldb, c, ldc, n, accumulate, pf_a, pf_b, te);
}

}  // namespace

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
