// 2-D pooling: per output row, each kernel tap adds one strided input row segment into a row
// accumulator, over the output columns where that tap is inside the image (computed once per
// tap). The stride-1 case is a contiguous loop the compiler vectorizes.
#include "kernels/pool.hpp"

#include "runtime/thread_pool.hpp"

#include <algorithm>
#include <limits>
#include <vector>

namespace basalt::kernels {

namespace {

// First and one-past-last output index o with 0 <= o*s + off < n (off = k*d - pad).
inline void valid_range(int64_t n, int64_t s, int64_t off, int64_t out, int64_t& a, int64_t& b) {
  // o*s + off >= 0  <=>  o >= ceil(-off / s)
  int64_t lo = off >= 0 ? 0 : (-off + s - 1) / s;
  // o*s + off <= n - 1  <=>  o <= floor((n - 1 - off) / s)
  int64_t hi = n - 1 - off < 0 ? -1 : (n - 1 - off) / s;
  a = std::min(lo, out);
  b = std::max(a, std::min(hi + 1, out));
}

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

void pool2d_f32(ThreadPool* pool, const float* x, float* y, int64_t planes, const Pool2D& g) {
  if (planes <= 0 || g.OH <= 0 || g.OW <= 0) return;
  // Per column tap ranges and per column/row divisors, shared by every plane.
  std::vector<int64_t> kx_a(static_cast<size_t>(g.kw)), kx_b(static_cast<size_t>(g.kw));
  for (int64_t kx = 0; kx < g.kw; ++kx)
    valid_range(g.W, g.sw, kx * g.dw - g.pw, g.OW, kx_a[size_t(kx)], kx_b[size_t(kx)]);
  std::vector<int64_t> cnt_w(static_cast<size_t>(g.OW)), pad_w(static_cast<size_t>(g.OW));
  for (int64_t ox = 0; ox < g.OW; ++ox) tap_counts(ox, g.sw, g.kw, g.dw, g.pw, g.W, g.pw_end, cnt_w[size_t(ox)], pad_w[size_t(ox)]);
  std::vector<int64_t> cnt_h(static_cast<size_t>(g.OH)), pad_h(static_cast<size_t>(g.OH));
  for (int64_t oy = 0; oy < g.OH; ++oy) tap_counts(oy, g.sh, g.kh, g.dh, g.ph, g.H, g.ph_end, cnt_h[size_t(oy)], pad_h[size_t(oy)]);

  const int64_t in_sp = g.H * g.W, out_sp = g.OH * g.OW;
  const int64_t work = std::max<int64_t>(1, out_sp * g.kh * g.kw);
  const int64_t grain = std::max<int64_t>(1, 65536 / work);
  parallel_for(pool, planes, grain, [&](int64_t p0, int64_t p1) {
    std::vector<float> acc(static_cast<size_t>(g.OW));
    // Stride 2 along x: each input row is split into its even and odd columns first, so every
    // tap reads a contiguous run (column 2*ox + o is even[ox + o/2] or odd[ox + (o-1)/2]).
    std::vector<float> even(g.sw == 2 ? static_cast<size_t>((g.W + 1) / 2) : 0);
    std::vector<float> odd(g.sw == 2 ? static_cast<size_t>(g.W / 2) : 0);
    const float init = g.avg ? 0.0f : -std::numeric_limits<float>::infinity();
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * in_sp;
      float* yp = y + p * out_sp;
      for (int64_t oy = 0; oy < g.OH; ++oy) {
        float* a = acc.data();
        std::fill(acc.begin(), acc.end(), init);
        for (int64_t ky = 0; ky < g.kh; ++ky) {
          const int64_t iy = oy * g.sh - g.ph + ky * g.dh;
          if (iy < 0 || iy >= g.H) continue;
          const float* row = xp + iy * g.W;
          if (g.sw == 2) {
            const int64_t half = g.W / 2;
            for (int64_t i = 0; i < half; ++i) {
              even[size_t(i)] = row[2 * i];
              odd[size_t(i)] = row[2 * i + 1];
            }
            if (g.W & 1) even[size_t(half)] = row[g.W - 1];
            for (int64_t kx = 0; kx < g.kw; ++kx) {
              const int64_t b0 = kx_a[size_t(kx)], b1 = kx_b[size_t(kx)];
              const int64_t o = kx * g.dw - g.pw;
              const float* src = (o & 1) ? odd.data() : even.data();
              const int64_t off = (o & 1) ? (o - 1) / 2 : o / 2;  // exact: o - 1 resp. o is even
              if (g.avg)
                for (int64_t ox = b0; ox < b1; ++ox) a[ox] += src[ox + off];
              else
                for (int64_t ox = b0; ox < b1; ++ox) a[ox] = src[ox + off] > a[ox] ? src[ox + off] : a[ox];
            }
            continue;
          }
          for (int64_t kx = 0; kx < g.kw; ++kx) {
            const int64_t b0 = kx_a[size_t(kx)], b1 = kx_b[size_t(kx)];
            const float* r = row + kx * g.dw - g.pw;  // r[ox * sw] is the tap of column ox
            if (g.avg) {
              if (g.sw == 1)
                for (int64_t ox = b0; ox < b1; ++ox) a[ox] += r[ox];
              else
                for (int64_t ox = b0; ox < b1; ++ox) a[ox] += r[ox * g.sw];
            } else {
              if (g.sw == 1)
                for (int64_t ox = b0; ox < b1; ++ox) a[ox] = r[ox] > a[ox] ? r[ox] : a[ox];
              else
                for (int64_t ox = b0; ox < b1; ++ox) {
                  float v = r[ox * g.sw];
                  a[ox] = v > a[ox] ? v : a[ox];
                }
            }
          }
        }
        float* yr = yp + oy * g.OW;
        const int64_t ch = cnt_h[size_t(oy)];
        if (g.avg) {
          for (int64_t ox = 0; ox < g.OW; ++ox) {
            int64_t c = g.count_include_pad ? pad_h[size_t(oy)] * pad_w[size_t(ox)] : ch * cnt_w[size_t(ox)];
            yr[ox] = c > 0 ? a[ox] / float(c) : 0.0f;
          }
        } else {
          for (int64_t ox = 0; ox < g.OW; ++ox) yr[ox] = ch * cnt_w[size_t(ox)] > 0 ? a[ox] : 0.0f;
        }
      }
    }
  });
}

}  // namespace basalt::kernels
