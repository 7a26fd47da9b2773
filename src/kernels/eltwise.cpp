// Portable flavour of the element-wise row kernels (eltwise_simd.hpp with one float per
// "register"), the per-ISA dispatch table, and the threaded drivers.
#include "kernels/eltwise.hpp"

#include "core/thread_pool.hpp"

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace basalt::kernels {

VecOps vec_ops_avx2();    // eltwise_avx2.cpp
VecOps vec_ops_avx512();  // eltwise_avx512.cpp

namespace {

struct V1 {
  static constexpr int W = 1;
  using R = float;
  using M = bool;
  static R load(const float* p) { return *p; }
  static void store(float* p, R v) { *p = v; }
  static R set1(float v) { return v; }
  static R add(R a, R b) { return a + b; }
  static R sub(R a, R b) { return a - b; }
  static R mul(R a, R b) { return a * b; }
  static R div(R a, R b) { return a / b; }
  static R fma(R a, R b, R c) { return a * b + c; }
  static R max(R a, R b) { return a > b ? a : b; }
  static R min(R a, R b) { return a < b ? a : b; }
  static R sqrt(R a) { return std::sqrt(a); }
  static R abs(R a) { return std::fabs(a); }
  static R neg(R a) { return -a; }
  static M lt(R a, R b) { return a < b; }
  static M isnan(R a) { return a != a; }
  static R blend(M m, R f, R t) { return m ? t : f; }
  static R copysign(R mag, R sgn) { return std::copysign(mag, sgn); }
  // Round to nearest even by adding and subtracting 1.5 * 2^23 (exact for |a| < 2^22, which
  // holds for the exponents exp() rounds); a libm call here would cost more than the polynomial.
  static R round(R a) {
    const float big = 12582912.0f;  // not folded away: no -ffast-math
    return (a + big) - big;
  }
  // p * 2^n for integral n in [-150, 130], as two normal power-of-two factors built from bits.
  static R scale2(R p, R n) {
    if (n != n) return p + n;  // NaN
    int32_t k = int32_t(n), h = k >> 1, l = k - h;
    uint32_t b1 = uint32_t(h + 127) << 23, b2 = uint32_t(l + 127) << 23;
    float f1, f2;
    std::memcpy(&f1, &b1, sizeof f1);
    std::memcpy(&f2, &b2, sizeof f2);
    return p * f1 * f2;
  }
  static float hsum(R a) { return a; }
  static float hmax(R a) { return a; }
};

#include "kernels/eltwise_simd.hpp"

struct Tables {
  VecOps portable, avx2, avx512;
  Tables() : portable(Simd<V1>::table(Isa::Portable)), avx2(portable), avx512(portable) {
#if defined(__x86_64__)
    if (int(best_isa()) >= int(Isa::Avx2)) avx2 = vec_ops_avx2();
    avx512 = avx2;
    if (int(best_isa()) >= int(Isa::Avx512)) avx512 = vec_ops_avx512();
#endif
  }
};

}  // namespace

const VecOps& vec_ops(Isa isa) {
  static const Tables t;
  switch (isa) {
    case Isa::Avx512: return t.avx512;
    case Isa::Avx2: return t.avx2;
    default: return t.portable;
  }
}

int unary_cost(UnaryOp op) {
  switch (op) {
    case UnaryOp::Sigmoid: case UnaryOp::Swish: case UnaryOp::Exp: return 8;
    case UnaryOp::Tanh: case UnaryOp::GeluTanh: case UnaryOp::Erf: case UnaryOp::Gelu: return 12;
    case UnaryOp::Sqrt: case UnaryOp::Reciprocal: return 4;
    default: return 1;
  }
}

void unary_f32(ThreadPool* pool, UnaryOp op, const UnaryParams& p, const float* x, float* y, int64_t n,
               const VecOps& k) {
  parallel_for(pool, n, eltwise_grain(unary_cost(op)),
               [&](int64_t b, int64_t e) { k.unary(op, p, x + b, y + b, e - b); });
}

void binary_f32(ThreadPool* pool, BinaryOp op, BinMode mode, const float* a, const float* b, float* y, int64_t n,
                const VecOps& k) {
  const int cost = op == BinaryOp::Div ? 4 : 1;
  parallel_for(pool, n, eltwise_grain(cost), [&](int64_t s, int64_t e) {
    const float* pa = mode == BinMode::ScalarVec ? a : a + s;
    const float* pb = mode == BinMode::VecScalar ? b : b + s;
    k.binary(op, mode, pa, pb, y + s, e - s);
  });
}

void softmax_rows_f32(ThreadPool* pool, const float* x, float* y, int64_t rows, int64_t n, bool log,
                      const VecOps& k) {
  if (n <= 0) return;
  const int64_t grain = (eltwise_grain(8) + n - 1) / n;
  parallel_for(pool, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) k.softmax(x + r * n, y + r * n, n, log);
  });
}

void layernorm_rows_f32(ThreadPool* pool, const float* x, const float* gamma, const float* beta, float* y,
                        int64_t rows, int64_t n, float eps, float* mean_out, float* rstd_out, const VecOps& k) {
  if (n <= 0) return;
  const int64_t grain = (eltwise_grain(3) + n - 1) / n;
  parallel_for(pool, rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r)
      k.layernorm(x + r * n, gamma, beta, y + r * n, n, eps, mean_out ? mean_out + r : nullptr,
                  rstd_out ? rstd_out + r : nullptr);
  });
}

}  // namespace basalt::kernels
