// AVX2+FMA build of the 2-D pooling kernel body (pool_impl.inc; this file gets -mavx2 -mfma).
#include "kernels/pool.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace basalt::kernels {
namespace {
#include "kernels/pool_impl.inc"
}  // namespace

void pool2d_planes_avx2(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  pool2d_planes(x, y, p0, p1, g, t);
}

}  // namespace basalt::kernels
