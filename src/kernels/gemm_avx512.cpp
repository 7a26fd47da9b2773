// AVX-512 sgemm microkernel: a 6x64 tile of C in 24 zmm accumulators. Per k step it loads 4
// vectors of the B panel and broadcasts 6 values of the A panel (24 FMAs). Row counts below 6 and
// column counts below 64 get their own instantiations (no wasted FMAs on tails beyond the last
// 16-column vector, which is masked).
#include "kernels/gemm.hpp"

#include <immintrin.h>

namespace basalt::kernels {

namespace {

constexpr int MR = 6, NR = 64;

template <int R, int NV>
void tile(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int n, bool accumulate) {
  __m512 s[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) s[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + v * 16);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      __m512 av = _mm512_set1_ps(a[r]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) s[r][v] = _mm512_fmadd_ps(av, bv[v], s[r][v]);
    }
    a += MR;
    b += NR;
  }
  int tail = n - (NV - 1) * 16;
  __mmask16 last = tail >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << tail) - 1);
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* p = c + r * ldc + v * 16;
      __mmask16 mk = v == NV - 1 ? last : __mmask16(0xFFFF);
      __m512 x = s[r][v];
      if (accumulate) x = _mm512_add_ps(x, _mm512_maskz_loadu_ps(mk, p));
      _mm512_mask_storeu_ps(p, mk, x);
    }
}

template <int R>
void tile_rows(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int n, bool accumulate) {
  switch ((n + 15) / 16) {
    case 1: tile<R, 1>(kc, a, b, c, ldc, n, accumulate); break;
    case 2: tile<R, 2>(kc, a, b, c, ldc, n, accumulate); break;
    case 3: tile<R, 3>(kc, a, b, c, ldc, n, accumulate); break;
    default: tile<R, 4>(kc, a, b, c, ldc, n, accumulate); break;
  }
}

}  // namespace

void sgemm_ukernel_avx512(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n, bool accumulate) {
  switch (m) {
    case 1: tile_rows<1>(kc, a, b, c, ldc, n, accumulate); break;
    case 2: tile_rows<2>(kc, a, b, c, ldc, n, accumulate); break;
    case 3: tile_rows<3>(kc, a, b, c, ldc, n, accumulate); break;
    case 4: tile_rows<4>(kc, a, b, c, ldc, n, accumulate); break;
    case 5: tile_rows<5>(kc, a, b, c, ldc, n, accumulate); break;
    default: tile_rows<6>(kc, a, b, c, ldc, n, accumulate); break;
  }
}

#define EPILOGUE_TILE_NAME epilogue_tile_avx512
#include "kernels/gemm_epilogue.inc"
#undef EPILOGUE_TILE_NAME

}  // namespace basalt::kernels
