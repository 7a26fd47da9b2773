// The depthwise 8-bit kernel compiled for AVX2 (kernels/qdepthwise.hpp).
#include "kernels/qdepthwise.hpp"

#include <algorithm>
#include <vector>

namespace basalt::kernels {

#define QDW_NAME qdepthwise_planes_avx2
#include "kernels/qdepthwise.inc"
#undef QDW_NAME

}  // namespace basalt::kernels
