// Vectorized float32 row kernels for element-wise ops, activations, softmax, layer norm and
// simple reductions (issue 5), plus threaded drivers over them.
//
// Each kernel exists three times, from one generic source (eltwise_simd.hpp): portable C++,
// AVX2+FMA and AVX-512. vec_ops(isa) returns one flavour's table (capped at what this CPU
// supports, see kernels/cpu.hpp); the portable one is the reference twin in differential tests.
// The row kernels are single-threaded and take raw pointers; the *_f32 drivers split the work
// over a thread pool with parallel_for and a grain that keeps small tensors on the caller's thread.
//
// Contracts: x and y may be the same pointer (in place) but must not otherwise overlap; n >= 0.
// Results do not depend on the thread count (each element is computed by one thread with the same
// code). Accuracy (float32, vs. double libm; measured, and checked by kernels_vec_test.cpp):
// exp 1.2e-7 relative, sigmoid 1.8e-7 relative, tanh 1.2e-7 relative, erf 3.4e-7 absolute,
// gelu 1.2e-6 absolute (0.5 x erf's error). exp overflows to inf above 88.72 and underflows to
// 0. NaN inputs give NaN (Relu/Clip/Max/Min keep NaN as the reference kernels do).
#pragma once

#include "kernels/cpu.hpp"

#include <cstdint>

namespace basalt {
class ThreadPool;
}

namespace basalt::kernels {

enum class UnaryOp : uint8_t {
  Relu,         // max(x, 0)
  LeakyRelu,    // x < 0 ? alpha * x : x
  Clip,         // min(max(x, alpha), beta)
  HardSigmoid,  // max(0, min(1, alpha * x + beta))
  HardSwish,    // x * max(0, min(1, x / 6 + 0.5))
  Sigmoid,      // 1 / (1 + exp(-x))
  Swish,        // x * sigmoid(alpha * x)
  Tanh,
  Exp,
  Erf,
  Gelu,      // 0.5 x (1 + erf(x / sqrt 2))
  GeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
  Sqrt,
  Square,      // x * x (Pow with exponent 2)
  Neg,
  Abs,
  Reciprocal,  // 1 / x
  Affine,      // alpha * x + beta
};
struct UnaryParams {
  float alpha = 0, beta = 0;
};

enum class BinaryOp : uint8_t { Add, Sub, Mul, Div, Max, Min };
// Which operands are vectors of n elements; the other one is a single value read from b[0] / a[0].
enum class BinMode : uint8_t { VecVec, VecScalar, ScalarVec };

// One instruction set's row kernels.
struct VecOps {
  Isa isa;
  void (*unary)(UnaryOp op, const UnaryParams& p, const float* x, float* y, int64_t n);
  void (*binary)(BinaryOp op, BinMode mode, const float* a, const float* b, float* y, int64_t n);
  // y[i] = x[i] * scale + shift (per-channel affine: BatchNormalization, folded scale/bias).
  void (*affine)(const float* x, float* y, int64_t n, float scale, float shift);
  // One softmax (log = false) or log-softmax (log = true) over n contiguous elements. n >= 1.
  void (*softmax)(const float* x, float* y, int64_t n, bool log);
  // One layer-norm row: y = (x - mean) * rstd * gamma + beta (gamma/beta may be null: 1 / 0).
  // mean_out/rstd_out (may be null) receive the row's statistics.
  void (*layernorm)(const float* x, const float* gamma, const float* beta, float* y, int64_t n, float eps,
                    float* mean_out, float* rstd_out);
  float (*sum)(const float* x, int64_t n);
  float (*max)(const float* x, int64_t n);  // n >= 1; with NaN elements the result is unspecified
  // acc[i] = max(acc[i], x[i]) / acc[i] += x[i]: the inner step of pooling and axis reductions.
  void (*max_into)(float* acc, const float* x, int64_t n);
  void (*add_into)(float* acc, const float* x, int64_t n);
  // y[r] = (bias ? bias[r] : 0) + sum_k A[r * lda + k] * x[k] for r < rows (matrix-vector product,
  // the recurrent step of LSTM). y must not overlap A or x.
  void (*gemv)(const float* A, int64_t rows, int64_t cols, int64_t lda, const float* x, const float* bias, float* y);
};

// The table for `isa`, capped at best_isa() (asking for AVX-512 on an AVX2 CPU gives AVX2).
const VecOps& vec_ops(Isa isa);
inline const VecOps& vec_ops() { return vec_ops(best_isa()); }

// Relative cost of one element of op, in units of one add (used to pick parallel grains).
int unary_cost(UnaryOp op);

// Threaded drivers: the same results as the row kernel over the whole range, on up to
// pool->threads() threads (pool may be null: inline).
void unary_f32(ThreadPool* pool, UnaryOp op, const UnaryParams& p, const float* x, float* y, int64_t n,
               const VecOps& k = vec_ops());
void binary_f32(ThreadPool* pool, BinaryOp op, BinMode mode, const float* a, const float* b, float* y, int64_t n,
                const VecOps& k = vec_ops());
// rows softmax rows of n contiguous elements each.
void softmax_rows_f32(ThreadPool* pool, const float* x, float* y, int64_t rows, int64_t n, bool log,
                      const VecOps& k = vec_ops());
void layernorm_rows_f32(ThreadPool* pool, const float* x, const float* gamma, const float* beta, float* y,
                        int64_t rows, int64_t n, float eps, float* mean_out, float* rstd_out,
                        const VecOps& k = vec_ops());

// Elements per parallel chunk for a streaming op costing `cost` adds per element.
inline int64_t eltwise_grain(int cost) {
  int64_t g = 32768 / (cost < 1 ? 1 : cost);
  return g < 2048 ? 2048 : g;
}

}  // namespace basalt::kernels
