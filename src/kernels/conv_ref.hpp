// Reference loops of the nn ops for what the fast kernels do not cover: a blocked float32
// C += A*B, a generic C += A*B for other types, im2col, direct depthwise and grouped convolution
// over any number of spatial axes. ops/conv.cpp (3-D and larger convs, ConvTranspose, DeformConv,
// CausalConvWithState) and ops/matmul.cpp (integer MatMul) call them.
#pragma once

#include <basalt/tensor.hpp>

#include <cstdint>
#include <type_traits>
#include <vector>

namespace basalt::kernels {

// Resolved geometry of a sliding window over nd spatial axes (Conv, ConvTranspose and pools):
// input, kernel, strides, dilations, pads at the begin and end of each axis, output.
struct WindowGeom {
  int nd = 0;
  std::vector<int64_t> in, k, s, d, pb, pe, out;
  int64_t in_size() const { return shape_numel(in); }
  int64_t out_size() const { return shape_numel(out); }
  int64_t k_size() const { return shape_numel(k); }
};

// Calls fn(index vector) over an N-d index space in row-major order.
template <class Fn>
void for_each_index(const std::vector<int64_t>& shape, Fn&& fn) {
  int64_t total = shape_numel(shape);
  if (total == 0) return;
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t t = 0; t < total; ++t) {
    fn(idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

// float32 C[M,N] += A[M,K] * B[K,N] (row-major, leading dims given).
void sgemm_acc(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C, int64_t ldc);

// C[M,N] += A[M,K] * B[K,N] for any arithmetic T (float goes to sgemm_acc). i-k-j order.
template <class T>
void gemm_acc(int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B, int64_t ldb, T* C, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    sgemm_acc(M, N, K, A, lda, B, ldb, C, ldc);
    return;
  }
  for (int64_t i = 0; i < M; ++i) {
    T* c = C + i * ldc;
    const T* a = A + i * lda;
    for (int64_t k = 0; k < K; ++k) {
      T av = a[k];
      const T* b = B + k * ldb;
      for (int64_t j = 0; j < N; ++j) c[j] += av * b[j];
    }
  }
}

// im2col of positions [p0, p0+cols) of the output for one group: buf[CK, cols].
void im2col(const float* x, int64_t Cg, const WindowGeom& g, int64_t p0, int64_t cols, float* buf, std::vector<int64_t>& starts);

// Direct 2-D convolution for groups with one input channel (depthwise).
void conv_depthwise2d(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C, int64_t M, int64_t G,
                      const WindowGeom& g);

// Grouped float32 convolution over g.nd spatial axes: im2col + gemm_acc, depthwise directly.
void conv_f32(const float* x, const float* w, const float* b, float* y, int64_t N, int64_t C, int64_t M, int64_t G,
              const WindowGeom& g);

}  // namespace basalt::kernels
