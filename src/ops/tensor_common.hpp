// What the tensor op families (tensor.cpp: shape and layout; pad.cpp: padding, cropping, block
// moves and generators) share: integer inputs, axis normalization, strided and transposed copies.
#pragma once

#include "ops/common.hpp"

#include "kernels/copy.hpp"

#include <string>
#include <vector>

namespace basalt::tensorops {

template <class F>
void dispatch_all(const KernelContext& ctx, int input, DType dt, F&& f) {
  if (!visit_all(dt, f)) unsupported_dtype(ctx, input, dt);
}

inline std::string ints_str(const std::vector<int64_t>& v) { return shape_str(v); }

// A shape-like input (1-D integer tensor) as int64 values.
std::vector<int64_t> int_input(const KernelContext& ctx, int i, const char* what);
// Rejects negative dimensions and shapes whose element count overflows int64 (a wrapped count
// would allocate too little storage for the shape).
void check_shape_nonneg(const KernelContext& ctx, const Shape& s, const char* what);
// Normalizes a list of axes against rank; rejects out-of-range and duplicate axes.
std::vector<int> normalize_axes(const Node& n, const std::vector<int64_t>& axes, int rank);
// out[index] = src[base + sum_d index[d] * st[d]] for every index of oshape (strides in elements).
Tensor strided_copy(const KernelContext& ctx, const Tensor& src, const Shape& oshape, const std::vector<int64_t>& st,
                    int64_t base);
// strided_copy into output `out` of ctx (its planned slot), with the byte-level copy; strings
// take the element-wise path (std::string copies).
void strided_copy_out(KernelContext& ctx, int out, const Tensor& src, const Shape& oshape,
                      const std::vector<int64_t>& st, int64_t base);
// Transpose as a batched 2-D transpose when it is one: after dropping size-1 axes and merging
// input axes that stay adjacent, the permutation is [1, 0] or [0, 2, 1]. Element sizes 1, 2,
// 4 and 8 bytes. Returns false otherwise (the generic strided copy runs).
bool transpose_fast(KernelContext& ctx, const Tensor& x, const std::vector<int>& perm);
// Transposed copy of x (perm already validated).
Tensor transpose_copy(const KernelContext& ctx, const Tensor& x, const std::vector<int>& perm);

// Per-axis index maps: out[index] = src[sum_d map[d][index[d]] * stride[d]], or `fill` when any
// map entry is negative.
template <class T>
void axis_map_copy(const Tensor& src, Tensor& out, const std::vector<std::vector<int64_t>>& maps, const T& fill) {
  const Shape& os = out.shape();
  int64_t total = out.numel();
  if (total == 0) return;
  const T* s = src.data<T>();
  T* o = out.data<T>();
  int r = int(os.size());
  if (r == 0) {
    o[0] = s[0];
    return;
  }
  std::vector<int64_t> ss = shape_strides(src.shape());
  int64_t inner = os[size_t(r - 1)];
  int64_t rows = total / inner;
  std::vector<int64_t> idx(size_t(r), 0);
  const std::vector<int64_t>& last = maps[size_t(r - 1)];
  int64_t lst = ss[size_t(r - 1)];
  for (int64_t row = 0; row < rows; ++row) {
    T* dst = o + row * inner;
    bool valid = true;
    int64_t off = 0;
    for (int d = 0; d < r - 1; ++d) {
      int64_t m = maps[size_t(d)][size_t(idx[size_t(d)])];
      if (m < 0) {
        valid = false;
        break;
      }
      off += m * ss[size_t(d)];
    }
    if (!valid) {
      for (int64_t k = 0; k < inner; ++k) dst[k] = fill;
    } else {
      for (int64_t k = 0; k < inner; ++k) {
        int64_t m = last[size_t(k)];
        dst[k] = m < 0 ? fill : s[off + m * lst];
      }
    }
    for (int d = r - 2; d >= 0; --d) {
      if (++idx[size_t(d)] < os[size_t(d)]) break;
      idx[size_t(d)] = 0;
    }
  }
}

}  // namespace basalt::tensorops
