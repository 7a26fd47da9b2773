// Element-wise iteration shared by the element-wise ops (ops/elementwise.cpp) and any op that
// broadcasts its inputs: the arithmetic type of an element (cv), a broadcast plan that collapses
// the output into as few dims as possible with per-input strides, row walkers over it, and the
// float32 path onto the vectorized row kernels of kernels/eltwise.hpp.
#pragma once

#include "ops/common.hpp"

#include "kernels/eltwise.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <array>
#include <cstdint>
#include <type_traits>

namespace basalt::bcast {

// ---------------------------------------------------------------------------------------------
// Type helpers

template <class T>
constexpr bool is_half_v = std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>;

// Element as used in arithmetic: float16/bfloat16 widen to float, everything else is used as is
// (by reference, so strings are not copied).
template <class T>
inline decltype(auto) cv(const T& x) {
  if constexpr (is_half_v<T>)
    return float(x);
  else
    return (x);
}

// Unsigned type wide enough to do wrapping integer arithmetic for T (no promotion to int).
template <class T>
using wide_u = std::conditional_t<(sizeof(T) <= 4), uint32_t, uint64_t>;

template <class T>
constexpr bool is_int_v = std::is_integral_v<T> && !std::is_same_v<T, bool>;



// ---------------------------------------------------------------------------------------------
// Broadcast iteration

// The output shape collapsed into as few dimensions as possible (dims of size 1 dropped,
// neighbours merged where every input is contiguous across them). Strides per input, in elements.
template <size_t N>
struct Plan {
  std::vector<int64_t> dims;
  std::vector<int64_t> st[N];
};

template <size_t N>
Plan<N> make_plan(const Shape& out, const std::array<const Shape*, N>& ins) {
  Plan<N> p;
  std::vector<int64_t> full[N];
  for (size_t k = 0; k < N; ++k) full[k] = broadcast_strides(*ins[k], out);
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1) continue;
    if (!p.dims.empty()) {
      bool merge = true;
      for (size_t k = 0; k < N; ++k)
        if (p.st[k].back() != full[k][d] * out[d]) merge = false;
      if (merge) {
        p.dims.back() *= out[d];
        for (size_t k = 0; k < N; ++k) p.st[k].back() = full[k][d];
        continue;
      }
    }
    p.dims.push_back(out[d]);
    for (size_t k = 0; k < N; ++k) p.st[k].push_back(full[k][d]);
  }
  if (p.dims.empty()) {
    p.dims.push_back(1);
    for (size_t k = 0; k < N; ++k) p.st[k].push_back(0);
  }
  return p;
}

// Calls row(out_offset, in_offsets[N], inner_strides[N], n) for each innermost row. Inner
// strides are 0 (broadcast) or 1 (contiguous).
template <size_t N, class Row>
void run_plan(const Plan<N>& p, Row&& row) {
  size_t r = p.dims.size();
  int64_t inner = p.dims[r - 1];
  int64_t is[N];
  for (size_t k = 0; k < N; ++k) is[k] = p.st[k][r - 1];
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < r; ++d) outer *= p.dims[d];
  std::vector<int64_t> idx(r, 0);
  int64_t off[N] = {};
  for (int64_t o = 0; o < outer; ++o) {
    row(o * inner, off, is, inner);
    for (size_t d = r - 1; d-- > 0;) {
      if (++idx[d] < p.dims[d]) {
        for (size_t k = 0; k < N; ++k) off[k] += p.st[k][d];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= p.st[k][d] * (p.dims[d] - 1);
      idx[d] = 0;
    }
  }
}

// w[i] = g(i) for i in [0, n). Trivial types go through a small local block so GCC's -O2
// ("very cheap") vectorizer can handle them: fixed trip count, no possible aliasing with w.
template <class R, class G>
inline void fill_row(R* w, int64_t n, G&& g) {
  int64_t i = 0;
  if constexpr (std::is_trivially_copyable_v<R>) {
    constexpr int B = 16;
    for (; i + B <= n; i += B) {
      R tmp[B];
      for (int j = 0; j < B; ++j) tmp[j] = R(g(i + j));
      for (int j = 0; j < B; ++j) w[i + j] = tmp[j];
    }
  }
  for (; i < n; ++i) w[i] = R(g(i));
}

// y = f(a, b) elementwise; a and b broadcast to y's shape (already validated). y may be a (in place).
template <class A, class B, class R, class F>
void binary_apply(const Tensor& a, const Tensor& b, Tensor& y, F f) {
  if (y.numel() == 0) return;
  const A* pa = a.data<A>();
  const B* pb = b.data<B>();
  R* py = y.data<R>();
  Plan<2> plan = make_plan<2>(y.shape(), {&a.shape(), &b.shape()});
  run_plan(plan, [&](int64_t o, const int64_t* off, const int64_t* is, int64_t n) {
    const A* x = pa + off[0];
    const B* z = pb + off[1];
    R* w = py + o;
    if (is[0] && is[1]) {
      fill_row(w, n, [&](int64_t i) { return f(cv(x[i]), cv(z[i])); });
    } else if (is[0]) {
      const auto zv = cv(z[0]);
      fill_row(w, n, [&](int64_t i) { return f(cv(x[i]), zv); });
    } else if (is[1]) {
      const auto xv = cv(x[0]);
      fill_row(w, n, [&](int64_t i) { return f(xv, cv(z[i])); });
    } else {
      const R v = R(f(cv(x[0]), cv(z[0])));
      for (int64_t i = 0; i < n; ++i) w[i] = v;
    }
  });
}

// float32 fast path (kernels/eltwise.hpp): the collapsed broadcast plan's innermost rows go to
// the vectorized row kernel (vector-vector, vector-scalar or scalar-vector), split over the pool:
// by rows when there are many, by elements when the plan is one long row (same shape, scalar).
inline void binary_f32_plan(KernelContext& ctx, kernels::BinaryOp op, const Tensor& a, const Tensor& b, Tensor& y) {
  const int64_t total = y.numel();
  if (total == 0) return;
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  const kernels::VecOps& k = kernels::vec_ops();
  Plan<2> plan = make_plan<2>(y.shape(), {&a.shape(), &b.shape()});
  const size_t r = plan.dims.size();
  const int64_t inner = plan.dims[r - 1];
  const int64_t outer = total / inner;
  const bool va = plan.st[0][r - 1] != 0, vb = plan.st[1][r - 1] != 0;
  if (!va && !vb) {  // only possible for a one-element output
    k.binary(op, kernels::BinMode::VecScalar, pa, pb, py, 1);
    return;
  }
  const kernels::BinMode mode =
      va && vb ? kernels::BinMode::VecVec : (va ? kernels::BinMode::VecScalar : kernels::BinMode::ScalarVec);
  const int cost = op == kernels::BinaryOp::Div ? 4 : 1;
  if (outer == 1) {
    kernels::binary_f32(ctx.pool(), op, mode, pa, pb, py, inner, k);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kernels::eltwise_grain(cost) / inner);
  parallel_for(ctx.pool(), outer, grain, [&](int64_t r0, int64_t r1) {
    // Offsets of row r0, then an odometer over the outer dims.
    std::vector<int64_t> idx(r, 0);
    int64_t off[2] = {0, 0};
    int64_t rem = r0;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % plan.dims[d];
      rem /= plan.dims[d];
      off[0] += idx[d] * plan.st[0][d];
      off[1] += idx[d] * plan.st[1][d];
    }
    for (int64_t o = r0; o < r1; ++o) {
      k.binary(op, mode, pa + off[0], pb + off[1], py + o * inner, inner);
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < plan.dims[d]) {
          off[0] += plan.st[0][d];
          off[1] += plan.st[1][d];
          break;
        }
        off[0] -= plan.st[0][d] * (plan.dims[d] - 1);
        off[1] -= plan.st[1][d] * (plan.dims[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

// y = f(x) elementwise, same shape.
template <class T, class R, class F>
void unary_apply(const Tensor& x, Tensor& y, F f) {
  const T* px = x.data<T>();
  R* py = y.data<R>();
  fill_row(py, x.numel(), [&](int64_t i) { return f(cv(px[i])); });
}

}  // namespace basalt::bcast
