// AVX512-VNNI integer microkernel: a 6 x 64 int32 tile in 24 zmm accumulators. Per group of 4 k
// it loads the 4 vectors of the panel (64 columns x 4 int8) and broadcasts 4 uint8 of each of 6
// left rows: 24 vpdpbusd, each 64 multiply-adds (kernels/qgemm.hpp for the layouts).
#include "kernels/qgemm.hpp"

#include <immintrin.h>

#include <cstring>

namespace basalt::kernels {

namespace {

template <int R>
void tile(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c) {
  __m512i s[R][4];
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) s[r][v] = _mm512_setzero_si512();
  const int64_t groups = kp / 4;
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* pb = panel + g * 256;
    __m512i b0 = _mm512_loadu_si512(pb), b1 = _mm512_loadu_si512(pb + 64), b2 = _mm512_loadu_si512(pb + 128),
            b3 = _mm512_loadu_si512(pb + 192);
#pragma GCC unroll 6
    for (int r = 0; r < R; ++r) {
      int32_t q;
      std::memcpy(&q, left + r * kp + g * 4, 4);
      const __m512i a = _mm512_set1_epi32(q);
      s[r][0] = _mm512_dpbusd_epi32(s[r][0], a, b0);
      s[r][1] = _mm512_dpbusd_epi32(s[r][1], a, b1);
      s[r][2] = _mm512_dpbusd_epi32(s[r][2], a, b2);
      s[r][3] = _mm512_dpbusd_epi32(s[r][3], a, b3);
    }
  }
#pragma GCC unroll 6
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
    for (int v = 0; v < 4; ++v) _mm512_store_si512(c + r * 64 + v * 16, s[r][v]);
}

}  // namespace

void qgemm_ukernel_vnni(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m) {
  switch (m) {
    case 1: tile<1>(kp, left, panel, c); break;
    case 2: tile<2>(kp, left, panel, c); break;
    case 3: tile<3>(kp, left, panel, c); break;
    case 4: tile<4>(kp, left, panel, c); break;
    case 5: tile<5>(kp, left, panel, c); break;
    default: tile<6>(kp, left, panel, c); break;
  }
}

}  // namespace basalt::kernels
