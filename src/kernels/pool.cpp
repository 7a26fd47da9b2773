// 2-D pooling: the geometry tables (computed once per call, shared by every plane), the per-ISA
// dispatch and the threaded driver. The kernel body is pool_impl.inc, compiled here (portable)
// and in pool_avx2.cpp / pool_avx512.cpp.
#include "kernels/pool.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <cstring>
#include <limits>
#include <vector>

namespace basalt::kernels {

namespace {

// Taps of output o along one axis: inside the image, and inside the padded extent.
inline void tap_counts(int64_t o, int64_t s, int64_t k, int64_t d, int64_t p, int64_t n, int64_t p_end,
                       int64_t& valid, int64_t& padded) {
  valid = padded = 0;
  for (int64_t t = 0; t < k; ++t) {
    int64_t i = o * s - p + t * d;
    if (i >= 0 && i < n) ++valid;
    if (i >= -p && i < n + p_end) ++padded;
  }
}

}  // namespace

PoolTables::PoolTables(const Pool2D& g) {
  cnt_w.resize(size_t(g.OW));
  pad_w.resize(size_t(g.OW));
  for (int64_t ox = 0; ox < g.OW; ++ox) {
    int64_t c, p;
    tap_counts(ox, g.sw, g.kw, g.dw, g.pw, g.W, g.pw_end, c, p);
    cnt_w[size_t(ox)] = float(c);
    pad_w[size_t(ox)] = float(p);
    if (c == 0) empty_cols.push_back(ox);
  }
  cnt_h.resize(size_t(g.OH));
  pad_h.resize(size_t(g.OH));
  for (int64_t oy = 0; oy < g.OH; ++oy) {
    int64_t c, p;
    tap_counts(oy, g.sh, g.kh, g.dh, g.ph, g.H, g.ph_end, c, p);
    cnt_h[size_t(oy)] = float(c);
    pad_h[size_t(oy)] = float(p);
  }
}

namespace {
#include "kernels/pool_impl.inc"
}  // namespace

void pool2d_planes_portable(const float* x, float* y, int64_t p0, int64_t p1, const Pool2D& g, const PoolTables& t) {
  pool2d_planes(x, y, p0, p1, g, t);
}

void pool2d_f32(ThreadPool* pool, const float* x, float* y, int64_t planes, const Pool2D& g, Isa isa) {
  if (planes <= 0 || g.OH <= 0 || g.OW <= 0) return;
  if (int(isa) > int(best_isa())) isa = best_isa();
  auto* fn = &pool2d_planes_portable;
#if defined(__x86_64__)
  if (isa == Isa::Avx512) fn = &pool2d_planes_avx512;
  else if (isa == Isa::Avx2) fn = &pool2d_planes_avx2;
#endif
  const PoolTables t(g);
  const int64_t work = std::max<int64_t>(1, g.OH * (g.kh * g.W + g.kw * g.OW));
  const int64_t grain = std::max<int64_t>(1, 65536 / work);
  parallel_for(pool, planes, grain, [&](int64_t p0, int64_t p1) { fn(x, y, p0, p1, g, t); });
}

}  // namespace basalt::kernels
