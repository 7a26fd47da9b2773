// The depthwise 8-bit kernel compiled for AVX512 (kernels/qdepthwise.hpp).
#include "kernels/qdepthwise.hpp"

#include <immintrin.h>

#include <algorithm>
#include <vector>

namespace basalt::kernels {

#define QDW_NAME qdepthwise_planes_avx512
#include "kernels/qdepthwise.inc"
#undef QDW_NAME

}  // namespace basalt::kernels
