// Winograd input/output transforms compiled for AVX2 (winograd_impl.inc; the compiler
// vectorizes its loops over runs of tiles for this instruction set).
#include "kernels/winograd.hpp"

#include <algorithm>
#include <cstring>

namespace basalt::kernels {

#define WINO_INPUT_NAME winograd_input_avx2
#define WINO_OUTPUT_NAME winograd_output_avx2
#include "kernels/winograd_impl.inc"
#undef WINO_INPUT_NAME
#undef WINO_OUTPUT_NAME

}  // namespace basalt::kernels
