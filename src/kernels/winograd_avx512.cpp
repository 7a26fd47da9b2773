// Winograd input/output transforms compiled for AVX512 (winograd_impl.inc; the compiler
// vectorizes its loops over runs of tiles for this instruction set).
#include "kernels/activation_avx512.hpp"
#include "kernels/winograd.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cstring>

namespace basalt::kernels {

namespace {
// One blocked output pixel of the blocked transform: 16 channels, one zmm.
inline void wino_pixel_epilogue(float* y, const float* z, const float* bias, const float* res, const Activation& act) {
  __m512 v = _mm512_add_ps(_mm512_loadu_ps(z), _mm512_loadu_ps(bias));
  if (res) v = _mm512_add_ps(v, _mm512_loadu_ps(res));
  _mm512_storeu_ps(y, act_zmm(v, act));
}
}  // namespace

#define WINO_INPUT_NAME winograd_input_avx512
#define WINO_OUTPUT_NAME winograd_output_avx512
#include "kernels/winograd_impl.inc"
#undef WINO_INPUT_NAME
#undef WINO_OUTPUT_NAME

}  // namespace basalt::kernels
