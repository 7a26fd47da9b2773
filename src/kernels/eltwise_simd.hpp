// Generic source of the row kernels declared in eltwise.hpp, written once against a small vector
// type V and compiled three times: eltwise.cpp (V = one float, portable), eltwise_avx2.cpp
// (__m256) and eltwise_avx512.cpp (__m512).
//
// Include this file only inside an anonymous namespace, after defining V: every function here
// then has internal linkage, so the linker can never swap an AVX-512 instantiation into
// baseline code (the usual hazard of inline functions compiled with different -m flags). For
// the same reason this file calls no std:: template functions.
//
// V provides: W (lanes), R (register), M (lane mask), load, store, set1, add, sub, mul, div,
// fma(a,b,c) = a*b+c, max(a,b) = a > b ? a : b and min(a,b) = a < b ? a : b (lane-wise, so a NaN
// in b is kept), sqrt, abs, neg, lt(a,b) -> M, isnan(a) -> M, blend(m, f, t) = m ? t : f,
// copysign(mag, sgn), round (to nearest even), scale2(p, n) = p * 2^n for integral n in
// [-150, 130], hsum, hmax.

#ifndef BASALT_ELTWISE_SIMD_BODY
#define BASALT_ELTWISE_SIMD_BODY
#endif

template <class V>
struct Simd {
  using R = typename V::R;
  static constexpr int W = V::W;

  // y[0..n) = f(x[0..n)); the tail goes through a zero-padded local block.
  template <class F>
  static inline void map1(const float* x, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      R a = V::load(x + i), b = V::load(x + i + W);
      V::store(y + i, f(a));
      V::store(y + i + W, f(b));
    }
    for (; i + W <= n; i += W) V::store(y + i, f(V::load(x + i)));
    if (i < n) {
      float tx[W] = {}, ty[W];
      __builtin_memcpy(tx, x + i, size_t(n - i) * sizeof(float));
      V::store(ty, f(V::load(tx)));
      __builtin_memcpy(y + i, ty, size_t(n - i) * sizeof(float));
    }
  }
  template <class F>
  static inline void map2(const float* a, const float* b, float* y, int64_t n, F f) {
    int64_t i = 0;
    for (; i + W <= n; i += W) V::store(y + i, f(V::load(a + i), V::load(b + i)));
    if (i < n) {
      float ta[W] = {}, tb[W] = {}, ty[W];
      __builtin_memcpy(ta, a + i, size_t(n - i) * sizeof(float));
      __builtin_memcpy(tb, b + i, size_t(n - i) * sizeof(float));
      V::store(ty, f(V::load(ta), V::load(tb)));
      __builtin_memcpy(y + i, ty, size_t(n - i) * sizeof(float));
    }
  }

  // exp: Cody-Waite range reduction x = n ln2 + r, |r| <= ln2/2, then a degree-6 polynomial
  // (Cephes expf coefficients), scaled by 2^n. Clamping to [-104, 89] makes underflow give 0 and
  // overflow give inf through scale2; NaN passes through the clamps (max/min keep b's NaN).
  static inline R exp(R x) {
    x = V::max(V::set1(-104.0f), x);
    x = V::min(V::set1(89.0f), x);
    R n = V::round(V::mul(x, V::set1(1.44269504088896341f)));
    R r = V::fma(n, V::set1(-0.693359375f), x);
    r = V::fma(n, V::set1(2.12194440e-4f), r);
    R p = V::set1(1.9875691500e-4f);
    p = V::fma(p, r, V::set1(1.3981999507e-3f));
    p = V::fma(p, r, V::set1(8.3334519073e-3f));
    p = V::fma(p, r, V::set1(4.1665795894e-2f));
    p = V::fma(p, r, V::set1(1.6666665459e-1f));
    p = V::fma(p, r, V::set1(5.0000001201e-1f));
    R r2 = V::mul(r, r);
    p = V::fma(p, r2, V::add(r, V::set1(1.0f)));
    return V::scale2(p, n);
  }

  static inline R sigmoid(R x) {
    R one = V::set1(1.0f);
    return V::div(one, V::add(one, exp(V::neg(x))));
  }

  // tanh: odd polynomial below 0.625 (Cephes tanhf), 1 - 2 / (exp(2|x|) + 1) above; |x| >= 9
  // saturates to +-1.
  static inline R tanh(R x) {
    R ax = V::abs(x);
    R z = V::mul(x, x);
    R p = V::set1(-5.70498872745e-3f);
    p = V::fma(p, z, V::set1(2.06390887954e-2f));
    p = V::fma(p, z, V::set1(-5.37397155531e-2f));
    p = V::fma(p, z, V::set1(1.33314422036e-1f));
    p = V::fma(p, z, V::set1(-3.33332819422e-1f));
    R small = V::fma(V::mul(p, z), x, x);
    R e = exp(V::add(V::min(ax, V::set1(9.0f)), V::min(ax, V::set1(9.0f))));
    R big = V::sub(V::set1(1.0f), V::div(V::set1(2.0f), V::add(e, V::set1(1.0f))));
    big = V::copysign(big, x);
    R r = V::blend(V::lt(ax, V::set1(0.625f)), big, small);
    return V::blend(V::isnan(x), r, x);
  }

  // erf: odd rational approximation p(x^2) x / q(x^2) on [-4, 4] (erf(4) = 1 - 1.5e-8 rounds to
  // 1 in float), about 1e-7 absolute error.
  static inline R erf(R x) {
    R c = V::max(V::set1(-4.0f), x);
    c = V::min(V::set1(4.0f), c);
    R z = V::mul(c, c);
    R p = V::set1(-2.72614225801306e-10f);
    p = V::fma(p, z, V::set1(2.77068142495902e-08f));
    p = V::fma(p, z, V::set1(-2.10102402082508e-06f));
    p = V::fma(p, z, V::set1(-5.69250639462346e-05f));
    p = V::fma(p, z, V::set1(-7.34990630326855e-04f));
    p = V::fma(p, z, V::set1(-2.95459980854025e-03f));
    p = V::fma(p, z, V::set1(-1.60960333262415e-02f));
    p = V::mul(p, c);
    R q = V::set1(-1.45660718464996e-05f);
    q = V::fma(q, z, V::set1(-2.13374055278905e-04f));
    q = V::fma(q, z, V::set1(-1.68282697438203e-03f));
    q = V::fma(q, z, V::set1(-7.37332916720468e-03f));
    q = V::fma(q, z, V::set1(-1.42647390514189e-02f));
    return V::div(p, q);
  }

  static void unary(UnaryOp op, const UnaryParams& prm, const float* x, float* y, int64_t n) {
    const R zero = V::set1(0.0f), one = V::set1(1.0f), half = V::set1(0.5f);
    const R al = V::set1(prm.alpha), be = V::set1(prm.beta);
    switch (op) {
      case UnaryOp::Relu: map1(x, y, n, [&](R v) { return V::max(zero, v); }); break;
      case UnaryOp::LeakyRelu:
        map1(x, y, n, [&](R v) { return V::blend(V::lt(v, zero), v, V::mul(v, al)); });
        break;
      case UnaryOp::Clip: map1(x, y, n, [&](R v) { return V::min(be, V::max(al, v)); }); break;
      case UnaryOp::HardSigmoid:
        map1(x, y, n, [&](R v) { return V::max(zero, V::min(one, V::fma(v, al, be))); });
        break;
      case UnaryOp::HardSwish: {
        const R sixth = V::set1(1.0f / 6.0f);
        map1(x, y, n, [&](R v) { return V::mul(v, V::max(zero, V::min(one, V::fma(v, sixth, half)))); });
        break;
      }
      case UnaryOp::Sigmoid: map1(x, y, n, [&](R v) { return sigmoid(v); }); break;
      case UnaryOp::Swish: map1(x, y, n, [&](R v) { return V::mul(v, sigmoid(V::mul(al, v))); }); break;
      case UnaryOp::Tanh: map1(x, y, n, [&](R v) { return tanh(v); }); break;
      case UnaryOp::Exp: map1(x, y, n, [&](R v) { return exp(v); }); break;
      case UnaryOp::Erf: map1(x, y, n, [&](R v) { return erf(v); }); break;
      case UnaryOp::Gelu: {
        const R rs2 = V::set1(0.70710678118654752f);
        map1(x, y, n, [&](R v) { return V::mul(V::mul(half, v), V::add(one, erf(V::mul(v, rs2)))); });
        break;
      }
      case UnaryOp::GeluTanh: {
        const R k = V::set1(0.7978845608028654f), c = V::set1(0.044715f);
        map1(x, y, n, [&](R v) {
          R inner = V::mul(k, V::fma(V::mul(c, V::mul(v, v)), v, v));
          return V::mul(V::mul(half, v), V::add(one, tanh(inner)));
        });
        break;
      }
      case UnaryOp::Sqrt: map1(x, y, n, [&](R v) { return V::sqrt(v); }); break;
      case UnaryOp::Square: map1(x, y, n, [&](R v) { return V::mul(v, v); }); break;
      case UnaryOp::Neg: map1(x, y, n, [&](R v) { return V::neg(v); }); break;
      case UnaryOp::Abs: map1(x, y, n, [&](R v) { return V::abs(v); }); break;
      case UnaryOp::Reciprocal: map1(x, y, n, [&](R v) { return V::div(one, v); }); break;
      case UnaryOp::Affine: map1(x, y, n, [&](R v) { return V::fma(v, al, be); }); break;
    }
  }

  template <class F>
  static inline void binary_op(BinMode mode, const float* a, const float* b, float* y, int64_t n, F f) {
    if (mode == BinMode::VecVec) {
      map2(a, b, y, n, f);
    } else if (mode == BinMode::VecScalar) {
      const R s = V::set1(b[0]);
      map1(a, y, n, [&](R v) { return f(v, s); });
    } else {
      const R s = V::set1(a[0]);
      map1(b, y, n, [&](R v) { return f(s, v); });
    }
  }

  static void binary(BinaryOp op, BinMode mode, const float* a, const float* b, float* y, int64_t n) {
    switch (op) {
      case BinaryOp::Add: binary_op(mode, a, b, y, n, [](R u, R v) { return V::add(u, v); }); break;
      case BinaryOp::Sub: binary_op(mode, a, b, y, n, [](R u, R v) { return V::sub(u, v); }); break;
      case BinaryOp::Mul: binary_op(mode, a, b, y, n, [](R u, R v) { return V::mul(u, v); }); break;
      case BinaryOp::Div: binary_op(mode, a, b, y, n, [](R u, R v) { return V::div(u, v); }); break;
      // NaN in either operand gives NaN (as the reference Max/Min do).
      case BinaryOp::Max:
        binary_op(mode, a, b, y, n, [](R u, R v) { return V::blend(V::isnan(u), V::max(u, v), u); });
        break;
      case BinaryOp::Min:
        binary_op(mode, a, b, y, n, [](R u, R v) { return V::blend(V::isnan(u), V::min(u, v), u); });
        break;
    }
  }

  static void affine(const float* x, float* y, int64_t n, float scale, float shift) {
    const R s = V::set1(scale), t = V::set1(shift);
    map1(x, y, n, [&](R v) { return V::fma(v, s, t); });
  }

  static float sum(const float* x, int64_t n) {
    R a0 = V::set1(0.0f), a1 = a0;
    int64_t i = 0;
    for (; i + 2 * W <= n; i += 2 * W) {
      a0 = V::add(a0, V::load(x + i));
      a1 = V::add(a1, V::load(x + i + W));
    }
    for (; i + W <= n; i += W) a0 = V::add(a0, V::load(x + i));
    float s = V::hsum(V::add(a0, a1));
    for (; i < n; ++i) s += x[i];
    return s;
  }

  static float max(const float* x, int64_t n) {
    float m = x[0];
    int64_t i = 0;
    if (n >= W) {
      R a = V::load(x);
      for (i = W; i + W <= n; i += W) a = V::max(a, V::load(x + i));
      m = V::hmax(a);
    }
    for (; i < n; ++i) m = m > x[i] ? m : x[i];
    return m;
  }

  static void max_into(float* acc, const float* x, int64_t n) {
    map2(acc, x, acc, n, [](R u, R v) { return V::max(u, v); });
  }
  static void add_into(float* acc, const float* x, int64_t n) {
    map2(acc, x, acc, n, [](R u, R v) { return V::add(u, v); });
  }

  static void softmax(const float* x, float* y, int64_t n, bool log) {
    float m = max(x, n);
    if (m - m != 0) m = m != m ? m : 0.0f;  // +-inf: shift by 0 as the reference does; NaN stays NaN
    const R mv = V::set1(m);
    R acc = V::set1(0.0f);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      R e = exp(V::sub(V::load(x + i), mv));
      if (!log) V::store(y + i, e);
      acc = V::add(acc, e);
    }
    float s = V::hsum(acc);
    if (i < n) {
      float tx[W] = {}, ty[W];
      int64_t r = n - i;
      __builtin_memcpy(tx, x + i, size_t(r) * sizeof(float));
      V::store(ty, exp(V::sub(V::load(tx), mv)));
      for (int64_t k = 0; k < r; ++k) s += ty[k];
      if (!log) __builtin_memcpy(y + i, ty, size_t(r) * sizeof(float));
    }
    if (log) {
      // (x - m) - log(s), not x - (m + log(s)): when |m| is large, m + log(s) rounds log(s) away
      // (a row of -1e30 would give 0 instead of -log(n)).
      const R ls = V::set1(__builtin_logf(s));
      map1(x, y, n, [&](R v) { return V::sub(V::sub(v, mv), ls); });
    } else {
      const R inv = V::set1(1.0f / s);
      map1(y, y, n, [&](R v) { return V::mul(v, inv); });
    }
  }

  static void layernorm(const float* x, const float* gamma, const float* beta, float* y, int64_t n, float eps,
                        float* mean_out, float* rstd_out) {
    const float mean = sum(x, n) / float(n);
    const R mv = V::set1(mean);
    R acc = V::set1(0.0f);
    int64_t i = 0;
    for (; i + W <= n; i += W) {
      R d = V::sub(V::load(x + i), mv);
      acc = V::fma(d, d, acc);
    }
    float var = V::hsum(acc);
    for (; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= float(n);
    const float rstd = 1.0f / __builtin_sqrtf(var + eps);
    const R rv = V::set1(rstd);
    if (gamma && beta) {
      i = 0;
      for (; i + W <= n; i += W)
        V::store(y + i, V::fma(V::mul(V::sub(V::load(x + i), mv), rv), V::load(gamma + i), V::load(beta + i)));
      for (; i < n; ++i) y[i] = (x[i] - mean) * rstd * gamma[i] + beta[i];
    } else if (gamma) {
      i = 0;
      for (; i + W <= n; i += W) V::store(y + i, V::mul(V::mul(V::sub(V::load(x + i), mv), rv), V::load(gamma + i)));
      for (; i < n; ++i) y[i] = (x[i] - mean) * rstd * gamma[i];
    } else if (beta) {
      i = 0;
      for (; i + W <= n; i += W) V::store(y + i, V::fma(V::sub(V::load(x + i), mv), rv, V::load(beta + i)));
      for (; i < n; ++i) y[i] = (x[i] - mean) * rstd + beta[i];
    } else {
      map1(x, y, n, [&](R v) { return V::mul(V::sub(v, mv), rv); });
    }
    if (mean_out) *mean_out = mean;
    if (rstd_out) *rstd_out = rstd;
  }

  // Four rows at a time share each load of x.
  static void gemv(const float* A, int64_t rows, int64_t cols, int64_t lda, const float* x, const float* bias,
                   float* y) {
    int64_t r = 0;
    for (; r + 4 <= rows; r += 4) {
      const float* p0 = A + r * lda;
      const float* p1 = p0 + lda;
      const float* p2 = p1 + lda;
      const float* p3 = p2 + lda;
      R a0 = V::set1(0.0f), a1 = a0, a2 = a0, a3 = a0;
      int64_t k = 0;
      for (; k + W <= cols; k += W) {
        R xv = V::load(x + k);
        a0 = V::fma(V::load(p0 + k), xv, a0);
        a1 = V::fma(V::load(p1 + k), xv, a1);
        a2 = V::fma(V::load(p2 + k), xv, a2);
        a3 = V::fma(V::load(p3 + k), xv, a3);
      }
      float s0 = V::hsum(a0), s1 = V::hsum(a1), s2 = V::hsum(a2), s3 = V::hsum(a3);
      for (; k < cols; ++k) {
        s0 += p0[k] * x[k];
        s1 += p1[k] * x[k];
        s2 += p2[k] * x[k];
        s3 += p3[k] * x[k];
      }
      y[r] = s0 + (bias ? bias[r] : 0.0f);
      y[r + 1] = s1 + (bias ? bias[r + 1] : 0.0f);
      y[r + 2] = s2 + (bias ? bias[r + 2] : 0.0f);
      y[r + 3] = s3 + (bias ? bias[r + 3] : 0.0f);
    }
    for (; r < rows; ++r) {
      const float* p0 = A + r * lda;
      R a0 = V::set1(0.0f);
      int64_t k = 0;
      for (; k + W <= cols; k += W) a0 = V::fma(V::load(p0 + k), V::load(x + k), a0);
      float s0 = V::hsum(a0);
      for (; k < cols; ++k) s0 += p0[k] * x[k];
      y[r] = s0 + (bias ? bias[r] : 0.0f);
    }
  }

  static VecOps table(Isa isa) {
    return VecOps{isa, &unary, &binary, &affine, &softmax, &layernorm, &sum, &max, &max_into, &add_into, &gemv};
  }
};
