// The depthwise convolution kernel compiled for AVX2 (the loops in conv_depthwise.inc
// vectorize 8 wide here).
#include "kernels/conv.hpp"

#include <algorithm>

namespace basalt::kernels {

#define DEPTHWISE_NAME conv_depthwise_planes_avx2
#include "kernels/conv_depthwise.inc"
#undef DEPTHWISE_NAME

}  // namespace basalt::kernels
