// AVX2 integer microkernel: a 4 x 16 int32 tile in 8 ymm accumulators, exact for every input.
// vpmaddubsw would multiply the bytes directly but sums each pair into a saturating int16
// (255 * 127 * 2 overflows it), so instead each group of 4 k is split into its even and odd bytes
// widened to int16 (the panel's by sign-extending shifts, the broadcast left values by a mask and
// a shift) and multiplied with vpmaddwd, whose pair sums go to int32 and cannot saturate.
#include "kernels/qgemm.hpp"

#include <immintrin.h>

#include <cstring>

namespace basalt::kernels {

namespace {

template <int R>
void tile(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c) {
  __m256i s[R][2];
  for (int r = 0; r < R; ++r) s[r][0] = s[r][1] = _mm256_setzero_si256();
  const __m256i low = _mm256_set1_epi16(0x00FF);
  const int64_t groups = kp / 4;
  for (int64_t g = 0; g < groups; ++g) {
    const int8_t* pb = panel + g * 64;
    const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb));
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32));
    // per column (32-bit lane) of bytes b0 b1 b2 b3: even = (b0, b2), odd = (b1, b3) as int16
    const __m256i e0 = _mm256_srai_epi16(_mm256_slli_epi16(x0, 8), 8), o0 = _mm256_srai_epi16(x0, 8);
    const __m256i e1 = _mm256_srai_epi16(_mm256_slli_epi16(x1, 8), 8), o1 = _mm256_srai_epi16(x1, 8);
    for (int r = 0; r < R; ++r) {
      int32_t q;
      std::memcpy(&q, left + r * kp + g * 4, 4);
      const __m256i a = _mm256_set1_epi32(q);
      const __m256i ae = _mm256_and_si256(a, low), ao = _mm256_srli_epi16(a, 8);
      s[r][0] = _mm256_add_epi32(s[r][0], _mm256_add_epi32(_mm256_madd_epi16(ae, e0), _mm256_madd_epi16(ao, o0)));
      s[r][1] = _mm256_add_epi32(s[r][1], _mm256_add_epi32(_mm256_madd_epi16(ae, e1), _mm256_madd_epi16(ao, o1)));
    }
  }
  for (int r = 0; r < R; ++r) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * 16), s[r][0]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(c + r * 16 + 8), s[r][1]);
  }
}

}  // namespace

void qgemm_ukernel_avx2(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m) {
  switch (m) {
    case 1: tile<1>(kp, left, panel, c); break;
    case 2: tile<2>(kp, left, panel, c); break;
    case 3: tile<3>(kp, left, panel, c); break;
    default: tile<4>(kp, left, panel, c); break;
  }
}

}  // namespace basalt::kernels
