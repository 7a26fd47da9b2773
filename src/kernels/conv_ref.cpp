// The reference loops of kernels/conv_ref.hpp.
#include "kernels/conv_ref.hpp"

#include <algorithm>
#include <cstring>

namespace basalt::kernels {

namespace {

// float32 C[M,N] += A[M,K] * B[K,N]: 4x8 register tiles (GCC/Clang vector extensions, plain
// SSE on x86-64), scalar i-k-j loops for the edges.
typedef float v4f __attribute__((vector_size(16)));
inline v4f ld4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void st4(float* p, v4f v) { std::memcpy(p, &v, sizeof v); }

// y[0..n) += a * x[0..n)
inline void axpy(int64_t n, float a, const float* x, float* y) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    st4(y + i, ld4(y + i) + a * ld4(x + i));
    st4(y + i + 4, ld4(y + i + 4) + a * ld4(x + i + 4));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

namespace {

// Rows [i, i + 4) of C += A * B: 8-column tiles up to NP (N rounded down to 8) with tile j's B
// rows at b_of(j), bstep floats apart; the columns past NP one by one from B itself.
template <class BOf>
void rows4(int64_t i, int64_t N, int64_t NP, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
           int64_t ldc, BOf&& b_of, int64_t bstep) {
  const float* a0 = A + i * lda;
  const float* a1 = a0 + lda;
  const float* a2 = a1 + lda;
  const float* a3 = a2 + lda;
  float* c0 = C + i * ldc;
  float* c1 = c0 + ldc;
  float* c2 = c1 + ldc;
  float* c3 = c2 + ldc;
  for (int64_t j = 0; j < NP; j += 8) {
    v4f r00 = ld4(c0 + j), r01 = ld4(c0 + j + 4), r10 = ld4(c1 + j), r11 = ld4(c1 + j + 4);
    v4f r20 = ld4(c2 + j), r21 = ld4(c2 + j + 4), r30 = ld4(c3 + j), r31 = ld4(c3 + j + 4);
    const float* b = b_of(j);
    for (int64_t k = 0; k < K; ++k, b += bstep) {
      v4f b0 = ld4(b), b1 = ld4(b + 4);
      float x0 = a0[k], x1 = a1[k], x2 = a2[k], x3 = a3[k];
      r00 += x0 * b0;
      r01 += x0 * b1;
      r10 += x1 * b0;
      r11 += x1 * b1;
      r20 += x2 * b0;
      r21 += x2 * b1;
      r30 += x3 * b0;
      r31 += x3 * b1;
    }
    st4(c0 + j, r00); st4(c0 + j + 4, r01); st4(c1 + j, r10); st4(c1 + j + 4, r11);
    st4(c2 + j, r20); st4(c2 + j + 4, r21); st4(c3 + j, r30); st4(c3 + j + 4, r31);
  }
  for (int64_t j = NP; j < N; ++j) {
    float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int64_t k = 0; k < K; ++k) {
      float bv = B[k * ldb + j];
      s0 += a0[k] * bv;
      s1 += a1[k] * bv;
      s2 += a2[k] * bv;
      s3 += a3[k] * bv;
    }
    c0[j] += s0; c1[j] += s1; c2[j] += s2; c3[j] += s3;
  }
}

}  // namespace

void sgemm_acc(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc) {
  int64_t i = 0;
  const int64_t NP = N / 8 * 8;
  if (M >= 8 && NP >= 16 && K >= 8) {
    // Pack the 8-column panels of B contiguously: panel p holds B[k, 8p..8p+8) for every k.
    std::vector<float> bp(size_t(NP * K));
    for (int64_t p = 0; p < NP / 8; ++p)
      for (int64_t k = 0; k < K; ++k) std::memcpy(&bp[size_t((p * K + k) * 8)], B + k * ldb + p * 8, 8 * sizeof(float));
    for (; i + 4 <= M; i += 4) rows4(i, N, NP, K, A, lda, B, ldb, C, ldc, [&](int64_t j) { return bp.data() + j * K; }, 8);
  }
  for (; i + 4 <= M; i += 4) rows4(i, N, NP, K, A, lda, B, ldb, C, ldc, [&](int64_t j) { return B + j; }, ldb);
  for (; i < M; ++i) {
    float* c = C + i * ldc;
    const float* a = A + i * lda;
    for (int64_t k = 0; k < K; ++k) axpy(N, a[k], B + k * ldb, c);
  }
}

// im2col of positions [p0, p0+cols) of the output for one group: buf[CK, cols].
void im2col(const float* x, int64_t Cg, const WindowGeom& g, int64_t p0, int64_t cols, float* buf, std::vector<int64_t>& starts) {
  int nd = g.nd;
  starts.assign(size_t(cols) * size_t(nd), 0);
  {
    // decompose p0 into output coordinates
    std::vector<int64_t> oc(size_t(nd), 0);
    int64_t p = p0;
    for (int d = nd - 1; d >= 0; --d) {
      oc[size_t(d)] = p % g.out[size_t(d)];
      p /= g.out[size_t(d)];
    }
    for (int64_t j = 0; j < cols; ++j) {
      for (int d = 0; d < nd; ++d) starts[size_t(j * nd + d)] = oc[size_t(d)] * g.s[size_t(d)] - g.pb[size_t(d)];
      for (int d = nd - 1; d >= 0; --d) {
        if (++oc[size_t(d)] < g.out[size_t(d)]) break;
        oc[size_t(d)] = 0;
      }
    }
  }
  int64_t K = g.k_size();
  int64_t in_sp = g.in_size();
  std::vector<int64_t> off(static_cast<size_t>(nd));
  std::vector<int64_t> kk(size_t(nd), 0);
  for (int64_t kidx = 0; kidx < K; ++kidx) {
    for (int d = 0; d < nd; ++d) off[size_t(d)] = kk[size_t(d)] * g.d[size_t(d)];
    for (int64_t c = 0; c < Cg; ++c) {
      float* row = buf + (c * K + kidx) * cols;
      const float* xc = x + c * in_sp;
      if (nd == 2) {
        int64_t H = g.in[0], W = g.in[1];
        for (int64_t j = 0; j < cols; ++j) {
          int64_t h = starts[size_t(2 * j)] + off[0], w = starts[size_t(2 * j + 1)] + off[1];
          row[j] = (h >= 0 && h < H && w >= 0 && w < W) ? xc[h * W + w] : 0.f;
        }
      } else {
        for (int64_t j = 0; j < cols; ++j) {
          int64_t idx = 0;
          bool ok = true;
          for (int d = 0; d < nd; ++d) {
            int64_t v = starts[size_t(j * nd + d)] + off[size_t(d)];
            if (v < 0 || v >= g.in[size_t(d)]) {
              ok = false;
              break;
            }
            idx = idx * g.in[size_t(d)] + v;
          }
          row[j] = ok ? xc[idx] : 0.f;
        }
      }
    }
    for (int d = nd - 1; d >= 0; --d) {
      if (++kk[size_t(d)] < g.k[size_t(d)]) break;
      kk[size_t(d)] = 0;
    }
  }
}

// Direct 2-D convolution for groups with one input channel (depthwise): im2col would dominate.
void conv_depthwise2d(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C, int64_t M, int64_t G,
                      const WindowGeom& g) {
  int64_t Mg = M / G, H = g.in[0], W = g.in[1], OH = g.out[0], OW = g.out[1], KH = g.k[0], KW = g.k[1];
  int64_t sh = g.s[0], sw = g.s[1], dh = g.d[0], dw = g.d[1], ph = g.pb[0], pw = g.pb[1];
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      int64_t c = m / Mg;
      const float* xc = x + (n * C + c) * H * W;
      float* yc = y + (n * M + m) * OH * OW;
      const float* wm = w + m * KH * KW;
      float bv = b ? b[m] : 0.f;
      for (int64_t i = 0; i < OH * OW; ++i) yc[i] = bv;
      for (int64_t oh = 0; oh < OH; ++oh) {
        float* yr = yc + oh * OW;
        for (int64_t kh = 0; kh < KH; ++kh) {
          int64_t ih = oh * sh - ph + kh * dh;
          if (ih < 0 || ih >= H) continue;
          for (int64_t kw = 0; kw < KW; ++kw) {
            float wv = wm[kh * KW + kw];
            int64_t offw = kw * dw - pw;
            // ow range with 0 <= ow*sw + offw < W
            int64_t lo = offw >= 0 ? 0 : (-offw + sw - 1) / sw;
            int64_t hi = W - 1 - offw < 0 ? 0 : std::min<int64_t>(OW, (W - 1 - offw) / sw + 1);
            const float* xr = xc + ih * W + offw;
            if (sw == 1) {
              if (hi > lo) axpy(hi - lo, wv, xr + lo, yr + lo);
            } else
              for (int64_t ow = lo; ow < hi; ++ow) yr[ow] += wv * xr[ow * sw];
          }
        }
      }
    }
}

void conv_f32(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C, int64_t M, int64_t G,
              const WindowGeom& g) {
  int64_t Cg = C / G, Mg = M / G;
  if (Cg == 1 && G > 1 && g.nd == 2) {
    conv_depthwise2d(x, w, b, y, N, C, M, G, g);
    return;
  }
  int64_t in_sp = g.in_size(), out_sp = g.out_size(), K = g.k_size(), CK = Cg * K;
  bool direct = K == 1;
  for (int i = 0; i < g.nd; ++i)
    if (g.s[size_t(i)] != 1 || g.pb[size_t(i)] != 0 || g.pe[size_t(i)] != 0) direct = false;
  int64_t chunk = std::max<int64_t>(256, (int64_t(1) << 18) / std::max<int64_t>(CK, 1));
  chunk = std::min(chunk, out_sp);
  std::vector<float> buf;
  if (!direct) buf.resize(size_t(CK * chunk));
  std::vector<int64_t> starts;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t gi = 0; gi < G; ++gi) {
      const float* xg = x + (n * C + gi * Cg) * in_sp;
      float* yg = y + (n * M + gi * Mg) * out_sp;
      const float* wg = w + gi * Mg * CK;
      for (int64_t p0 = 0; p0 < out_sp; p0 += chunk) {
        int64_t cols = std::min(chunk, out_sp - p0);
        const float* B;
        int64_t ldb;
        if (direct) {
          B = xg + p0;
          ldb = in_sp;
        } else {
          im2col(xg, Cg, g, p0, cols, buf.data(), starts);
          B = buf.data();
          ldb = cols;
        }
        gemm_acc<float>(Mg, cols, CK, wg, CK, B, ldb, yg + p0, out_sp);
      }
      if (b)
        for (int64_t m = 0; m < Mg; ++m) {
          float bv = b[gi * Mg + m];
          float* row = yg + m * out_sp;
          for (int64_t j = 0; j < out_sp; ++j) row[j] += bv;
        }
    }
}
}  // namespace basalt::kernels
