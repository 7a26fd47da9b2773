// Winograd input/output transforms compiled for AVX2 (winograd_impl.inc; the compiler
// vectorizes its loops over runs of tiles for this instruction set).
#include "kernels/activation_avx2.hpp"
#include "kernels/winograd.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace basalt::kernels {

namespace {
// One blocked output pixel of the blocked transform: 16 channels, two ymm.
inline void wino_pixel_epilogue(float* y, const float* z, const float* bias, const float* res, const Activation& act) {
  for (int h = 0; h < 16; h += 8) {
    __m256 v = _mm256_add_ps(_mm256_loadu_ps(z + h), _mm256_loadu_ps(bias + h));
    if (res) v = _mm256_add_ps(v, _mm256_loadu_ps(res + h));
    _mm256_storeu_ps(y + h, act_ymm(v, act));
  }
}
}  // namespace

#define WINO_INPUT_NAME winograd_input_avx2
#define WINO_OUTPUT_NAME winograd_output_avx2
#include "kernels/winograd_impl.inc"
#undef WINO_INPUT_NAME
#undef WINO_OUTPUT_NAME

}  // namespace basalt::kernels
