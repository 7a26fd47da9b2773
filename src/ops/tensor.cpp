// Reference kernels: tensor (shape / layout / copy-style) ops.
//
// Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat, Split, Slice, Expand,
// Tile, Pad, ConstantOfShape, Range, Dropout, EyeLike, Trilu, DepthToSpace, SpaceToDepth,
// CenterCropPad, Col2Im.
//
// Ops whose output holds the input's bytes in the same order (Reshape, Flatten, Squeeze,
// Unsqueeze, Dropout in inference) return a reshaped view of the input, without a copy.
#include "ops/common.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>

namespace basalt {

namespace {

std::string ints_str(const std::vector<int64_t>& v) { return shape_str(v); }

template <class F>
void dispatch_all(const KernelContext& ctx, int input, DType dt, F&& f) {
  if (!visit_all(dt, f)) unsupported_dtype(ctx, input, dt);
}

// A shape-like input (1-D integer tensor) as int64 values.
std::vector<int64_t> int_input(const KernelContext& ctx, int i, const char* what) {
  const Tensor& t = ctx.input(i);
  if (!dtype_is_integer(t.dtype()))
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " (input " + std::to_string(i) + ") must be an integer tensor, got " + dtype_name(t.dtype()));
  if (t.rank() > 1)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " (input " + std::to_string(i) + ") must be 1-D, got shape " + shape_str(t.shape()));
  return t.to_int64_vector();
}

// Rejects negative dimensions and shapes whose element count overflows int64 (a wrapped count
// would allocate too little storage for the shape).
void check_shape_nonneg(const KernelContext& ctx, const Shape& s, const char* what) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d < 0) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " " + shape_str(s) + " has a negative dimension");
    if (__builtin_mul_overflow(n, d, &n))
      ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " " + shape_str(s) + " has too many elements");
  }
}

// Normalizes a list of axes against rank; rejects out-of-range and duplicate axes.
std::vector<int> normalize_axes(const Node& n, const std::vector<int64_t>& axes, int rank) {
  std::vector<int> out;
  std::vector<bool> seen(size_t(std::max(rank, 0)), false);
  for (int64_t a : axes) {
    if (a < -rank || a >= rank)
      n.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(a) + " is out of range for rank " + std::to_string(rank));
    int x = int(a < 0 ? a + rank : a);
    if (seen[size_t(x)]) n.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(a) + " is repeated in " + ints_str(axes));
    seen[size_t(x)] = true;
    out.push_back(x);
  }
  return out;
}

// out[index] = src[base + sum_d index[d] * st[d]] for every index of oshape (strides in elements).
Tensor strided_copy(const KernelContext& ctx, const Tensor& src, const Shape& oshape, const std::vector<int64_t>& st,
                    int64_t base) {
  Tensor out(src.dtype(), oshape);
  int64_t total = shape_numel(oshape);
  if (total == 0) return out;
  dispatch_all(ctx, 0, src.dtype(), [&]<class T>() {
    const T* s = src.data<T>();
    T* o = out.data<T>();
    int r = int(oshape.size());
    if (r == 0) {
      o[0] = s[base];
      return;
    }
    int64_t inner = oshape[size_t(r - 1)], ist = st[size_t(r - 1)];
    int64_t rows = total / inner;
    std::vector<int64_t> idx(size_t(r), 0);
    int64_t off = base;
    for (int64_t row = 0; row < rows; ++row) {
      T* dst = o + row * inner;
      const T* sp = s + off;
      if (ist == 1) {
        for (int64_t k = 0; k < inner; ++k) dst[k] = sp[k];
      } else {
        for (int64_t k = 0; k < inner; ++k) dst[k] = sp[k * ist];
      }
      for (int d = r - 2; d >= 0; --d) {
        if (++idx[size_t(d)] < oshape[size_t(d)]) {
          off += st[size_t(d)];
          break;
        }
        off -= st[size_t(d)] * (oshape[size_t(d)] - 1);
        idx[size_t(d)] = 0;
      }
    }
  });
  return out;
}

// Byte-level twin of strided_copy for element types without constructors (every dtype but
// string), writing into caller memory: dst[index] = src[base + sum_d index[d] * st[d]] for every
// index of oshape (strides and base in elements of `es` bytes). The output shape is collapsed
// first (size-1 dims dropped, neighbours merged where the source is contiguous across them), so a
// view whose innermost run is contiguous (Slice of outer axes, Split, a Transpose that keeps the
// last axes, as in ShuffleNet's channel shuffle) copies whole rows with memcpy. Rows are split
// over the pool in chunks of about 64 KB.
void strided_copy_bytes(ThreadPool* pool, const uint8_t* src, uint8_t* dst, size_t es, const Shape& oshape,
                        const std::vector<int64_t>& st, int64_t base) {
  const int64_t total = shape_numel(oshape);
  if (total == 0) return;
  std::vector<int64_t> dims, strides;
  for (size_t d = 0; d < oshape.size(); ++d) {
    if (oshape[d] == 1) continue;
    if (!dims.empty() && strides.back() == st[d] * oshape[d]) {
      dims.back() *= oshape[d];
      strides.back() = st[d];
    } else {
      dims.push_back(oshape[d]);
      strides.push_back(st[d]);
    }
  }
  if (dims.empty()) dims.push_back(1), strides.push_back(0);
  const size_t r = dims.size();
  const int64_t inner = dims[r - 1], ist = strides[r - 1], rows = total / inner;
  const size_t row_bytes = size_t(inner) * es;
  const int64_t grain = std::max<int64_t>(1, int64_t(65536 / std::max<size_t>(row_bytes, 1)));
  parallel_for(pool, rows, grain, [&](int64_t r0, int64_t r1) {
    // Source offset of row r0 (mixed radix over the outer dims), then an odometer.
    std::vector<int64_t> idx(r, 0);
    int64_t off = base, rem = r0;
    for (size_t d = r - 1; d-- > 0;) {
      idx[d] = rem % dims[d];
      rem /= dims[d];
      off += idx[d] * strides[d];
    }
    for (int64_t row = r0; row < r1; ++row) {
      uint8_t* o = dst + size_t(row) * row_bytes;
      const uint8_t* s = src + off * int64_t(es);
      if (ist == 1) {
        std::memcpy(o, s, row_bytes);
      } else {
        auto gather = [&]<class U>() {
          U* ou = reinterpret_cast<U*>(o);
          const U* su = reinterpret_cast<const U*>(s);
          for (int64_t k = 0; k < inner; ++k) ou[k] = su[k * ist];
        };
        switch (es) {
          case 1: gather.template operator()<uint8_t>(); break;
          case 2: gather.template operator()<uint16_t>(); break;
          case 4: gather.template operator()<uint32_t>(); break;
          case 8: gather.template operator()<uint64_t>(); break;
          default:
            for (int64_t k = 0; k < inner; ++k) std::memcpy(o + size_t(k) * es, s + k * ist * int64_t(es), es);
        }
      }
      for (size_t d = r - 1; d-- > 0;) {
        if (++idx[d] < dims[d]) {
          off += strides[d];
          break;
        }
        off -= strides[d] * (dims[d] - 1);
        idx[d] = 0;
      }
    }
  });
}

// strided_copy into output `out` of ctx (its planned slot), with the byte-level copy; strings
// take the element-wise path (std::string copies).
void strided_copy_out(KernelContext& ctx, int out, const Tensor& src, const Shape& oshape,
                      const std::vector<int64_t>& st, int64_t base) {
  const size_t es = dtype_size(src.dtype());
  if (src.dtype() == DType::String || es == 0) {
    ctx.set_output(out, Value(strided_copy(ctx, src, oshape, st, base)));
    return;
  }
  Tensor& y = ctx.output_uninit(out, src.dtype(), oshape);
  if (y.numel() == 0) return;
  strided_copy_bytes(ctx.pool(), static_cast<const uint8_t*>(src.raw()), static_cast<uint8_t*>(y.raw()), es, oshape,
                     st, base);
}

// Batched 2-D transpose of T elements: x [B, R, C] -> y [B, C, R], in 16x16 tiles so both the
// reads and the writes stay within a few cache lines; tile rows of all batches split over pool.
template <class T>
void transpose_2d_tiled(ThreadPool* pool, const T* x, T* y, int64_t B, int64_t R, int64_t C) {
  constexpr int64_t kTile = 16;
  const int64_t row_tiles = (R + kTile - 1) / kTile;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kTile * C));
  parallel_for(pool, B * row_tiles, grain, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t b = t / row_tiles, r0 = (t % row_tiles) * kTile, r1 = std::min(R, r0 + kTile);
      const T* xb = x + b * R * C;
      T* yb = y + b * R * C;
      for (int64_t c0 = 0; c0 < C; c0 += kTile) {
        const int64_t c1 = std::min(C, c0 + kTile);
        for (int64_t c = c0; c < c1; ++c)
          for (int64_t r = r0; r < r1; ++r) yb[c * R + r] = xb[r * C + c];
      }
    }
  });
}

// Transpose as a batched 2-D transpose when it is one: after dropping size-1 axes and merging
// input axes that stay adjacent, the permutation is [1, 0] or [0, 2, 1]. Element sizes 1, 2,
// 4 and 8 bytes. Returns false otherwise (the generic strided copy runs).
bool transpose_fast(KernelContext& ctx, const Tensor& x, const std::vector<int>& perm) {
  const size_t es = dtype_size(x.dtype());
  if (x.dtype() == DType::String || (es != 1 && es != 2 && es != 4 && es != 8) || x.numel() < 64) return false;
  // Axes of size > 1 in output order, as input axis numbers, merged into runs of consecutive axes.
  std::vector<int> kept;
  for (int a : perm)
    if (x.dim(a) > 1) kept.push_back(a);
  std::vector<std::pair<int, int64_t>> runs;  // (first input axis, merged size), in output order
  for (size_t i = 0; i < kept.size(); ++i) {
    if (!runs.empty() && kept[i] == kept[i - 1] + 1) {
      runs.back().second *= x.dim(kept[i]);
    } else {
      runs.push_back({kept[i], x.dim(kept[i])});
    }
  }
  int64_t B = 1, R = 0, C = 0;
  if (runs.size() == 2 && runs[0].first > runs[1].first) {
    R = runs[1].second, C = runs[0].second;  // input [R, C] -> output [C, R]
  } else if (runs.size() == 3 && runs[0].first < runs[2].first && runs[2].first < runs[1].first) {
    B = runs[0].second, R = runs[2].second, C = runs[1].second;  // input [B, R, C] -> output [B, C, R]
  } else {
    return false;
  }
  Shape os(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) os[d] = x.shape()[size_t(perm[d])];
  Tensor& y = ctx.output_uninit(0, x.dtype(), os);
  switch (es) {
    case 1: transpose_2d_tiled(ctx.pool(), x.data<uint8_t>(), y.data<uint8_t>(), B, R, C); break;
    case 2: transpose_2d_tiled(ctx.pool(), x.data<uint16_t>(), y.data<uint16_t>(), B, R, C); break;
    case 4: transpose_2d_tiled(ctx.pool(), x.data<uint32_t>(), y.data<uint32_t>(), B, R, C); break;
    default: transpose_2d_tiled(ctx.pool(), x.data<uint64_t>(), y.data<uint64_t>(), B, R, C); break;
  }
  return true;
}

// Transposed copy of x (perm already validated).
Tensor transpose_copy(const KernelContext& ctx, const Tensor& x, const std::vector<int>& perm) {
  std::vector<int64_t> xs = shape_strides(x.shape());
  Shape os(perm.size());
  std::vector<int64_t> st(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) {
    os[d] = x.shape()[size_t(perm[d])];
    st[d] = xs[size_t(perm[d])];
  }
  return strided_copy(ctx, x, os, st, 0);
}

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

// ---------------------------------------------------------------- Reshape

Shape reshape_target(const KernelContext& ctx, const Shape& in, const std::vector<int64_t>& shape, bool allowzero) {
  Shape out(shape.size());
  int neg = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t s = shape[i];
    if (s == 0 && !allowzero) {
      if (i >= in.size())
        ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + ": 0 at index " + std::to_string(i) + " has no matching input dimension (input " + shape_str(in) + ")");
      out[i] = in[i];
    } else if (s == -1) {
      if (neg >= 0) ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + " has more than one -1");
      neg = int(i);
      continue;
    } else if (s < 0) {
      ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + " has an invalid dimension " + std::to_string(s));
    } else {
      out[i] = s;
    }
    if (__builtin_mul_overflow(known, out[i], &known))
      ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + " has too many elements");
  }
  int64_t numel = shape_numel(in);
  if (neg >= 0) {
    if (known == 0) {
      if (allowzero) ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + " has both 0 and -1 with allowzero=1");
      ctx.fail(ErrorCode::InvalidArgument, "cannot infer the -1 dimension of shape " + ints_str(shape) + " for input " + shape_str(in));
    }
    if (numel % known != 0)
      ctx.fail(ErrorCode::InvalidArgument, "cannot reshape input " + shape_str(in) + " to " + ints_str(shape));
    out[size_t(neg)] = numel / known;
  } else if (known != numel) {
    ctx.fail(ErrorCode::InvalidArgument, "cannot reshape input " + shape_str(in) + " (" + std::to_string(numel) + " elements) to " + ints_str(shape));
  }
  return out;
}

// ---------------------------------------------------------------- Split

void do_split(KernelContext& ctx, int64_t axis_attr, std::vector<int64_t> split, bool have_split, int64_t num_outputs_attr) {
  const Tensor& x = ctx.input(0);
  int r = x.rank();
  if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot split a scalar");
  int axis = normalize_axis(ctx, axis_attr, r);
  int64_t dim = x.dim(axis);
  int nout = ctx.num_outputs();
  if (have_split) {
    if (int64_t(split.size()) != nout)
      ctx.fail(ErrorCode::InvalidArgument, "split " + ints_str(split) + " has " + std::to_string(split.size()) + " entries but the node has " + std::to_string(nout) + " outputs");
    int64_t sum = 0;
    for (int64_t s : split) {
      if (s < 0) ctx.fail(ErrorCode::InvalidArgument, "split " + ints_str(split) + " has a negative entry");
      if (s > dim || __builtin_add_overflow(sum, s, &sum))
        ctx.fail(ErrorCode::InvalidArgument, "split " + ints_str(split) + " exceeds the size " + std::to_string(dim) + " of axis " + std::to_string(axis));
    }
    if (sum != dim)
      ctx.fail(ErrorCode::InvalidArgument, "split " + ints_str(split) + " sums to " + std::to_string(sum) + " but axis " + std::to_string(axis) + " has size " + std::to_string(dim));
  } else if (num_outputs_attr > 0) {
    if (num_outputs_attr != nout)
      ctx.fail(ErrorCode::InvalidArgument, "num_outputs=" + std::to_string(num_outputs_attr) + " but the node has " + std::to_string(nout) + " outputs");
    int64_t chunk = (dim + nout - 1) / nout;
    int64_t left = dim;
    split.clear();
    for (int i = 0; i < nout; ++i) {
      int64_t c = std::min(chunk, left);
      split.push_back(c);
      left -= c;
    }
  } else {
    if (nout == 0 || dim % nout != 0)
      ctx.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(axis) + " of size " + std::to_string(dim) + " cannot be split evenly into " + std::to_string(nout) + " outputs");
    split.assign(size_t(nout), dim / nout);
  }
  std::vector<int64_t> xs = shape_strides(x.shape());
  int64_t start = 0;
  for (int i = 0; i < nout; ++i) {
    if (ctx.has_output(i)) {
      Shape os = x.shape();
      os[size_t(axis)] = split[size_t(i)];
      strided_copy_out(ctx, i, x, os, xs, start * xs[size_t(axis)]);
    }
    start += split[size_t(i)];
  }
}

// ---------------------------------------------------------------- Slice

void do_slice(KernelContext& ctx, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
              const std::vector<int64_t>* axes_in, const std::vector<int64_t>* steps_in) {
  const Tensor& x = ctx.input(0);
  int r = x.rank();
  if (starts.size() != ends.size())
    ctx.fail(ErrorCode::InvalidArgument, "starts " + ints_str(starts) + " and ends " + ints_str(ends) + " differ in length");
  std::vector<int64_t> axes;
  if (axes_in) {
    axes = *axes_in;
    if (axes.size() != starts.size())
      ctx.fail(ErrorCode::InvalidArgument, "axes " + ints_str(axes) + " and starts " + ints_str(starts) + " differ in length");
  } else {
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(int64_t(i));
  }
  std::vector<int64_t> steps(starts.size(), 1);
  if (steps_in) {
    if (steps_in->size() != starts.size())
      ctx.fail(ErrorCode::InvalidArgument, "steps " + ints_str(*steps_in) + " and starts " + ints_str(starts) + " differ in length");
    steps = *steps_in;
  }
  std::vector<int> ax = normalize_axes(ctx.node(), axes, r);
  Shape os = x.shape();
  std::vector<int64_t> xs = shape_strides(x.shape());
  std::vector<int64_t> st = xs;
  int64_t base = 0;
  for (size_t i = 0; i < ax.size(); ++i) {
    int a = ax[i];
    int64_t dim = x.dim(a), step = steps[i];
    if (step == 0) ctx.fail(ErrorCode::InvalidArgument, "slice step for axis " + std::to_string(a) + " is 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s = s < -dim ? -dim - 1 : s;  // keep from overflowing below
    if (e < 0) e = e < -dim ? -dim - 1 : e;
    if (s < 0) s += dim;
    if (e < 0) e += dim;
    int64_t len;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      len = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, -1, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      len = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    os[size_t(a)] = len;
    st[size_t(a)] = xs[size_t(a)] * step;
    if (len > 0) base += s * xs[size_t(a)];
  }
  strided_copy_out(ctx, 0, x, os, st, base);
}

// ---------------------------------------------------------------- Pad

enum class PadMode { Constant, Reflect, Edge, Wrap };

PadMode parse_pad_mode(const Node& n) {
  std::string m = n.attr_string("mode", "constant");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap") {
    if (n.opset < 19) n.fail(ErrorCode::InvalidModel, "Pad mode 'wrap' requires opset 19 or later");
    return PadMode::Wrap;
  }
  n.fail(ErrorCode::InvalidModel, "unknown Pad mode '" + m + "'");
}

// pads: [b_0..b_{k-1}, e_0..e_{k-1}] for the given axes (already normalized).
void do_pad(KernelContext& ctx, PadMode mode, const std::vector<int64_t>& pads, const std::vector<int>& axes,
            const Tensor* cvalue, float attr_value) {
  const Tensor& x = ctx.input(0);
  int r = x.rank();
  size_t k = axes.size();
  if (pads.size() != 2 * k)
    ctx.fail(ErrorCode::InvalidArgument, "pads " + ints_str(pads) + " must have 2 * " + std::to_string(k) + " entries");
  std::vector<int64_t> b(size_t(r), 0), e(size_t(r), 0);
  for (size_t i = 0; i < k; ++i) {
    b[size_t(axes[i])] = pads[i];
    e[size_t(axes[i])] = pads[i + k];
  }
  Shape os(static_cast<size_t>(r));
  std::vector<std::vector<int64_t>> maps(static_cast<size_t>(r));
  for (int d = 0; d < r; ++d) {
    int64_t dim = x.dim(d);
    int64_t od;
    if (__builtin_add_overflow(dim, b[size_t(d)], &od) || __builtin_add_overflow(od, e[size_t(d)], &od))
      ctx.fail(ErrorCode::InvalidArgument, "pads " + ints_str(pads) + " are out of range");
    if (od < 0)
      ctx.fail(ErrorCode::InvalidArgument, "pads " + ints_str(pads) + " remove more than the " + std::to_string(dim) + " elements of axis " + std::to_string(d));
    if (mode != PadMode::Constant && dim == 0 && od > 0)
      ctx.fail(ErrorCode::InvalidArgument, "cannot pad empty axis " + std::to_string(d) + " in non-constant mode");
    os[size_t(d)] = od;
  }
  check_shape_nonneg(ctx, os, "padded shape");
  if (cvalue) {
    if (cvalue->dtype() != x.dtype())
      ctx.fail(ErrorCode::InvalidArgument, std::string("constant_value has type ") + dtype_name(cvalue->dtype()) + " but data has type " + dtype_name(x.dtype()));
    if (cvalue->numel() > 1)
      ctx.fail(ErrorCode::InvalidArgument, "constant_value must be a scalar, got shape " + shape_str(cvalue->shape()));
  }
  // Allocate the output first: its size check gives the clear error for absurd pads, and an
  // empty output needs no index maps (one entry per padded position, sized by the pads).
  Tensor& y = ctx.output(0, x.dtype(), os);
  if (y.numel() == 0) return;
  for (int d = 0; d < r; ++d) {
    int64_t dim = x.dim(d), od = os[size_t(d)];
    auto& m = maps[size_t(d)];
    m.resize(size_t(od));
    for (int64_t o = 0; o < od; ++o) {
      int64_t i = o - b[size_t(d)];
      if (i >= 0 && i < dim) {
        m[size_t(o)] = i;
        continue;
      }
      if (mode != PadMode::Constant && dim == 0)
        ctx.fail(ErrorCode::InvalidArgument, "cannot pad empty axis " + std::to_string(d) + " in non-constant mode");
      switch (mode) {
        case PadMode::Constant: i = -1; break;
        case PadMode::Edge: i = i < 0 ? 0 : dim - 1; break;
        case PadMode::Wrap: i = ((i % dim) + dim) % dim; break;
        case PadMode::Reflect:
          if (dim == 1) {
            i = 0;
          } else {
            int64_t p = 2 * (dim - 1);
            i = ((i % p) + p) % p;
            if (i >= dim) i = p - i;
          }
          break;
      }
      m[size_t(o)] = i;
    }
  }
  dispatch_all(ctx, 0, x.dtype(), [&]<class T>() {
    T fill{};
    if (cvalue) {
      if (cvalue->numel() == 1) fill = cvalue->data<T>()[0];
    } else {
      if constexpr (!std::is_same_v<T, std::string>) fill = T(attr_value);
    }
    axis_map_copy<T>(x, y, maps, fill);
  });
}

// ---------------------------------------------------------------- Col2Im

void do_col2im(KernelContext& ctx, const std::vector<int64_t>& dil_attr, const std::vector<int64_t>& pads_attr,
               const std::vector<int64_t>& strides_attr) {
  const Tensor& x = ctx.input(0);
  std::vector<int64_t> image = int_input(ctx, 1, "image_shape");
  std::vector<int64_t> block = int_input(ctx, 2, "block_shape");
  size_t nd = image.size();
  if (block.size() != nd || nd == 0)
    ctx.fail(ErrorCode::InvalidArgument, "image_shape " + ints_str(image) + " and block_shape " + ints_str(block) + " must have the same non-zero length");
  if (x.rank() != 3) ctx.fail(ErrorCode::InvalidArgument, "input must be 3-D [N, C*prod(block_shape), L], got " + shape_str(x.shape()));
  std::vector<int64_t> dil = dil_attr.empty() ? std::vector<int64_t>(nd, 1) : dil_attr;
  std::vector<int64_t> str = strides_attr.empty() ? std::vector<int64_t>(nd, 1) : strides_attr;
  std::vector<int64_t> pads = pads_attr.empty() ? std::vector<int64_t>(2 * nd, 0) : pads_attr;
  if (dil.size() != nd || str.size() != nd || pads.size() != 2 * nd)
    ctx.fail(ErrorCode::InvalidArgument, "dilations/strides/pads lengths do not match " + std::to_string(nd) + " spatial dimensions");
  int64_t bprod = 1;
  for (size_t i = 0; i < nd; ++i) {
    if (block[i] <= 0 || image[i] < 0 || dil[i] <= 0 || str[i] <= 0)
      ctx.fail(ErrorCode::InvalidArgument, "image_shape, block_shape, dilations and strides must be positive");
    if (pads[i] < 0 || pads[i + nd] < 0) ctx.fail(ErrorCode::InvalidArgument, "pads must be >= 0, got " + ints_str(pads));
    if (__builtin_mul_overflow(bprod, block[i], &bprod))
      ctx.fail(ErrorCode::InvalidArgument, "block_shape " + ints_str(block) + " has too many elements");
  }
  int64_t N = x.dim(0), CB = x.dim(1), L = x.dim(2);
  if (CB % bprod != 0)
    ctx.fail(ErrorCode::InvalidArgument, "input dimension 1 (" + std::to_string(CB) + ") is not a multiple of prod(block_shape) = " + std::to_string(bprod));
  int64_t C = CB / bprod;
  std::vector<int64_t> nblocks(nd);
  int64_t lprod = 1;
  for (size_t i = 0; i < nd; ++i) {
    // Checked: image_shape and block_shape are inputs and the attributes come from the model.
    int64_t eff = 0, span = 0;
    if (__builtin_mul_overflow(dil[i], block[i] - 1, &eff) || __builtin_add_overflow(eff, int64_t(1), &eff) ||
        __builtin_add_overflow(image[i], pads[i], &span) || __builtin_add_overflow(span, pads[i + nd], &span) ||
        __builtin_sub_overflow(span, eff, &span))
      ctx.fail(ErrorCode::InvalidArgument, "image_shape " + ints_str(image) + " and block_shape " + ints_str(block) +
                                               " with these dilations and pads overflow");
    nblocks[i] = span < 0 ? 0 : span / str[i] + 1;
    if (__builtin_mul_overflow(lprod, nblocks[i], &lprod))
      ctx.fail(ErrorCode::InvalidArgument, "the sliding blocks implied by the attributes overflow");
  }
  if (lprod != L)
    ctx.fail(ErrorCode::InvalidArgument, "input dimension 2 (" + std::to_string(L) + ") does not match the " + std::to_string(lprod) + " sliding blocks implied by the attributes");
  Shape os = {N, C};
  for (int64_t v : image) os.push_back(v);
  check_shape_nonneg(ctx, os, "output shape");
  Tensor& y = ctx.output(0, x.dtype(), os);
  int64_t isz = shape_numel(image);
  if (!visit_numeric(x.dtype(), [&]<class T>() {
        const T* src = x.data<T>();
        T* dst = y.data<T>();
        std::vector<int64_t> bi(nd), li(nd);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t c = 0; c < C; ++c) {
            T* img = dst + (n * C + c) * isz;
            for (int64_t b = 0; b < bprod; ++b) {
              int64_t t = b;
              for (size_t d = nd; d-- > 0;) {
                bi[d] = t % block[d];
                t /= block[d];
              }
              const T* col = src + ((n * C + c) * bprod + b) * L;
              for (int64_t l = 0; l < L; ++l) {
                int64_t u = l;
                for (size_t d = nd; d-- > 0;) {
                  li[d] = u % nblocks[d];
                  u /= nblocks[d];
                }
                int64_t off = 0;
                bool inside = true;
                for (size_t d = 0; d < nd; ++d) {
                  int64_t p = li[d] * str[d] - pads[d] + bi[d] * dil[d];
                  if (p < 0 || p >= image[d]) {
                    inside = false;
                    break;
                  }
                  off = off * image[d] + p;
                }
                if (!inside) continue;
                if constexpr (std::is_arithmetic_v<T>)
                  img[off] = T(img[off] + col[l]);
                else
                  img[off] = T(float(img[off]) + float(col[l]));
              }
            }
          }
      }))
    unsupported_dtype(ctx, 0, x.dtype());
}

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  // ------------------------------------------------------------------ Shape
  r.add("Shape", 1, [](const Node& n) {
    bool ranged = n.opset >= 15;
    int64_t start = ranged ? n.attr_int("start", 0) : 0;
    bool has_end = ranged && n.has_attr("end");
    int64_t end = has_end ? n.attr_int("end") : 0;
    return kernel([start, end, has_end](KernelContext& ctx) {
      const Value& v = ctx.input_value(0);
      if (!v.is_tensor()) ctx.fail(ErrorCode::InvalidArgument, "input 0 must be a tensor");
      const Shape& s = v.tensor.shape();
      int64_t r = int64_t(s.size());
      int64_t a = start < 0 ? start + r : start, b = has_end ? (end < 0 ? end + r : end) : r;
      a = std::clamp<int64_t>(a, 0, r);
      b = std::clamp<int64_t>(b, 0, r);
      int64_t len = std::max<int64_t>(b - a, 0);
      Tensor& y = ctx.output(0, DType::Int64, {len});
      for (int64_t i = 0; i < len; ++i) y.data<int64_t>()[i] = s[size_t(a + i)];
    });
  });

  // ------------------------------------------------------------------ Size
  r.add("Size", 1, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      ctx.output(0, DType::Int64, {}).data<int64_t>()[0] = x.numel();
    });
  });

  // ------------------------------------------------------------------ Reshape
  r.add("Reshape", 1, [](const Node& n) {
    if (n.opset < 5) {
      std::vector<int64_t> shape = n.attr_ints("shape", {});
      return kernel([shape](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        ctx.set_output(0, Value(x.reshaped(reshape_target(ctx, x.shape(), shape, false))));
      });
    }
    bool allowzero = n.opset >= 14 && n.attr_int("allowzero", 0) != 0;
    return kernel([allowzero](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      std::vector<int64_t> shape = int_input(ctx, 1, "shape");
      ctx.set_output(0, Value(x.reshaped(reshape_target(ctx, x.shape(), shape, allowzero))));
    });
  });

  // ------------------------------------------------------------------ Flatten
  r.add("Flatten", 1, [](const Node& n) {
    int64_t axis = n.attr_int("axis", 1);
    return kernel([axis](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      int64_t rk = x.rank();
      if (axis < -rk || axis > rk)
        ctx.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rk));
      int64_t a = axis < 0 ? axis + rk : axis;
      int64_t outer = 1, inner = 1;
      for (int64_t i = 0; i < rk; ++i) (i < a ? outer : inner) *= x.shape()[size_t(i)];
      ctx.set_output(0, Value(x.reshaped({outer, inner})));
    });
  });

  // ------------------------------------------------------------------ Squeeze / Unsqueeze
  auto squeeze = [](KernelContext& ctx, const std::vector<int64_t>* axes) {
    const Tensor& x = ctx.input(0);
    Shape os;
    if (!axes) {
      for (int64_t d : x.shape())
        if (d != 1) os.push_back(d);
    } else {
      std::vector<int> ax = normalize_axes(ctx.node(), *axes, x.rank());
      std::vector<bool> drop(size_t(x.rank()), false);
      for (int a : ax) {
        if (x.dim(a) != 1)
          ctx.fail(ErrorCode::InvalidArgument, "cannot squeeze axis " + std::to_string(a) + " of size " + std::to_string(x.dim(a)) + " (input " + shape_str(x.shape()) + ")");
        drop[size_t(a)] = true;
      }
      for (int d = 0; d < x.rank(); ++d)
        if (!drop[size_t(d)]) os.push_back(x.dim(d));
    }
    ctx.set_output(0, Value(x.reshaped(os)));
  };
  r.add("Squeeze", 1, [squeeze](const Node& n) {
    if (n.opset < 13) {
      bool has = n.has_attr("axes");
      std::vector<int64_t> axes = n.attr_ints("axes", {});
      return kernel([squeeze, has, axes](KernelContext& ctx) { squeeze(ctx, has ? &axes : nullptr); });
    }
    return kernel([squeeze](KernelContext& ctx) {
      if (ctx.has_input(1)) {
        std::vector<int64_t> axes = int_input(ctx, 1, "axes");
        squeeze(ctx, &axes);
      } else {
        squeeze(ctx, nullptr);
      }
    });
  });

  auto unsqueeze = [](KernelContext& ctx, const std::vector<int64_t>& axes) {
    const Tensor& x = ctx.input(0);
    int orank = x.rank() + int(axes.size());
    std::vector<int> ax = normalize_axes(ctx.node(), axes, orank);
    std::vector<bool> ins(size_t(orank), false);
    for (int a : ax) ins[size_t(a)] = true;
    Shape os(static_cast<size_t>(orank));
    size_t k = 0;
    for (int d = 0; d < orank; ++d) os[size_t(d)] = ins[size_t(d)] ? 1 : x.shape()[k++];
    ctx.set_output(0, Value(x.reshaped(os)));
  };
  r.add("Unsqueeze", 1, [unsqueeze](const Node& n) {
    if (n.opset < 13) {
      std::vector<int64_t> axes = n.attr_ints("axes");
      return kernel([unsqueeze, axes](KernelContext& ctx) { unsqueeze(ctx, axes); });
    }
    return kernel([unsqueeze](KernelContext& ctx) { unsqueeze(ctx, int_input(ctx, 1, "axes")); });
  });

  // ------------------------------------------------------------------ Transpose
  r.add("Transpose", 1, [](const Node& n) {
    bool has_perm = n.has_attr("perm");
    std::vector<int64_t> perm = n.attr_ints("perm", {});
    return kernel([has_perm, perm](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      int rk = x.rank();
      std::vector<int> p;
      if (!has_perm) {
        for (int d = rk - 1; d >= 0; --d) p.push_back(d);
      } else {
        if (int(perm.size()) != rk)
          ctx.fail(ErrorCode::InvalidArgument, "perm " + ints_str(perm) + " does not match input rank " + std::to_string(rk));
        std::vector<bool> seen(size_t(rk), false);
        for (int64_t a : perm) {
          if (a < -rk || a >= rk) ctx.fail(ErrorCode::InvalidArgument, "perm " + ints_str(perm) + " is not a permutation of 0.." + std::to_string(rk - 1));
          int v = int(a < 0 ? a + rk : a);
          if (seen[size_t(v)]) ctx.fail(ErrorCode::InvalidArgument, "perm " + ints_str(perm) + " repeats axis " + std::to_string(v));
          seen[size_t(v)] = true;
          p.push_back(v);
        }
      }
      bool identity = true;
      for (int d = 0; d < rk; ++d) identity = identity && p[size_t(d)] == d;
      if (identity) {
        ctx.set_output(0, ctx.input_value(0));
        return;
      }
      if (transpose_fast(ctx, x, p)) return;
      std::vector<int64_t> xs = shape_strides(x.shape());
      Shape os(p.size());
      std::vector<int64_t> st(p.size());
      for (size_t d = 0; d < p.size(); ++d) {
        os[d] = x.shape()[size_t(p[d])];
        st[d] = xs[size_t(p[d])];
      }
      strided_copy_out(ctx, 0, x, os, st, 0);
    });
  });

  // ------------------------------------------------------------------ Concat
  r.add("Concat", 1, [](const Node& n) {
    int64_t axis = n.opset < 4 ? n.attr_int("axis", 1) : n.attr_int("axis");
    return kernel([axis](KernelContext& ctx) {
      int ni = ctx.num_inputs();
      if (ni == 0) ctx.fail(ErrorCode::InvalidModel, "Concat needs at least one input");
      const Tensor& x0 = ctx.input(0);
      int rk = x0.rank();
      if (rk == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot concatenate scalars");
      int a = normalize_axis(ctx, axis, rk);
      Shape os = x0.shape();
      os[size_t(a)] = 0;
      for (int i = 0; i < ni; ++i) {
        const Tensor& xi = ctx.input(i);
        if (xi.dtype() != x0.dtype())
          ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " has type " + dtype_name(xi.dtype()) + " but input 0 has type " + dtype_name(x0.dtype()));
        bool ok = xi.rank() == rk;
        for (int d = 0; ok && d < rk; ++d) ok = d == a || xi.dim(d) == x0.dim(d);
        if (!ok)
          ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " shape " + shape_str(xi.shape()) + " is incompatible with input 0 shape " + shape_str(x0.shape()) + " for axis " + std::to_string(a));
        os[size_t(a)] += xi.dim(a);
      }
      if (ni == 1) {
        ctx.set_output(0, ctx.input_value(0));
        return;
      }
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < a; ++d) outer *= os[size_t(d)];
      for (int d = a + 1; d < rk; ++d) inner *= os[size_t(d)];
      int64_t orow = os[size_t(a)] * inner;
      const size_t es = dtype_size(x0.dtype());
      if (x0.dtype() != DType::String && es > 0) {
        // Every output element is written: no zero fill. Output row b (one per outer index) is
        // the inputs' row-b pieces side by side; the rows are cut into byte ranges of at most
        // 64 KB, each copied (memcpy of its overlap with every piece) by one task, so a concat
        // of a few large rows (UNet's [1, C, 256, 256] along C) splits over the pool as well as
        // one of many small rows.
        Tensor& y = ctx.output_uninit(0, x0.dtype(), os);
        if (y.numel() == 0) return;
        uint8_t* o = static_cast<uint8_t*>(y.raw());
        const size_t orow_bytes = size_t(orow) * es;
        std::vector<std::pair<const uint8_t*, size_t>> pieces;  // (input data, bytes per outer row)
        // With one outer row, the memory plan may have had the producers write each input at its
        // place in the output already (runtime/planner.cpp, "Concat in place"): nothing to copy.
        bool all_in_place = outer == 1;
        size_t at = 0;
        for (int i = 0; i < ni; ++i) {
          const Tensor& xi = ctx.input(i);
          const size_t bytes = size_t(xi.dim(a) * inner) * es;
          const uint8_t* src = static_cast<const uint8_t*>(xi.raw());
          if (outer == 1 && src == o + at) src = nullptr;  // in place: skipped below
          else all_in_place = false;
          pieces.push_back({src, bytes});
          at += bytes;
        }
        if (all_in_place) return;
        constexpr size_t kRange = 65536;
        const int64_t ranges = int64_t((orow_bytes + kRange - 1) / kRange);
        const int64_t grain = std::max<int64_t>(1, int64_t(kRange / std::min(orow_bytes, kRange)));
        parallel_for(ctx.pool(), outer * ranges, grain, [&](int64_t t0, int64_t t1) {
          for (int64_t t = t0; t < t1; ++t) {
            const int64_t b = t / ranges;
            const size_t lo = size_t(t % ranges) * kRange, hi = std::min(lo + kRange, orow_bytes);
            uint8_t* row = o + size_t(b) * orow_bytes;
            size_t col = 0;
            for (const auto& [src, bytes] : pieces) {
              const size_t s0 = std::max(lo, col), s1 = std::min(hi, col + bytes);
              if (s0 < s1 && src) std::memcpy(row + s0, src + size_t(b) * bytes + (s0 - col), s1 - s0);
              col += bytes;
              if (col >= hi) break;
            }
          }
        });
        return;
      }
      Tensor& y = ctx.output(0, x0.dtype(), os);
      if (y.numel() == 0) return;
      dispatch_all(ctx, 0, x0.dtype(), [&]<class T>() {
        T* o = y.data<T>();
        int64_t col = 0;
        for (int i = 0; i < ni; ++i) {
          const Tensor& xi = ctx.input(i);
          const T* s = xi.data<T>();
          int64_t chunk = xi.dim(a) * inner;
          for (int64_t b = 0; b < outer; ++b) {
            T* dst = o + b * orow + col;
            const T* sp = s + b * chunk;
            for (int64_t k = 0; k < chunk; ++k) dst[k] = sp[k];
          }
          col += chunk;
        }
      });
    });
  });

  // ------------------------------------------------------------------ Split
  r.add("Split", 1, [](const Node& n) {
    int64_t axis = n.attr_int("axis", 0);
    if (n.opset < 13) {
      bool has = n.has_attr("split");
      std::vector<int64_t> split = n.attr_ints("split", {});
      bool v1 = n.opset < 2;
      return kernel([axis, has, split, v1](KernelContext& ctx) {
        if (!has && v1 && ctx.has_input(1)) {
          do_split(ctx, axis, int_input(ctx, 1, "split"), true, 0);
          return;
        }
        do_split(ctx, axis, split, has, 0);
      });
    }
    int64_t num_outputs = 0;
    if (n.opset >= 18 && n.has_attr("num_outputs")) {
      num_outputs = n.attr_int("num_outputs");
      if (num_outputs < 1) n.fail(ErrorCode::InvalidModel, "num_outputs must be positive, got " + std::to_string(num_outputs));
    }
    return kernel([axis, num_outputs](KernelContext& ctx) {
      if (ctx.has_input(1) && ctx.input(1).numel() > 0) {  // an empty split tensor means "not given"
        if (num_outputs > 0) ctx.fail(ErrorCode::InvalidModel, "both the split input and the num_outputs attribute are given");
        do_split(ctx, axis, int_input(ctx, 1, "split"), true, 0);
      } else {
        do_split(ctx, axis, {}, false, num_outputs);
      }
    });
  });

  // ------------------------------------------------------------------ Slice
  r.add("Slice", 1, [](const Node& n) {
    if (n.opset < 10) {
      std::vector<int64_t> starts = n.attr_ints("starts"), ends = n.attr_ints("ends");
      bool has_axes = n.has_attr("axes");
      std::vector<int64_t> axes = n.attr_ints("axes", {});
      return kernel([starts, ends, has_axes, axes](KernelContext& ctx) {
        do_slice(ctx, starts, ends, has_axes ? &axes : nullptr, nullptr);
      });
    }
    return kernel([](KernelContext& ctx) {
      std::vector<int64_t> starts = int_input(ctx, 1, "starts"), ends = int_input(ctx, 2, "ends");
      std::vector<int64_t> axes, steps;
      bool ha = ctx.has_input(3), hs = ctx.has_input(4);
      if (ha) axes = int_input(ctx, 3, "axes");
      if (hs) steps = int_input(ctx, 4, "steps");
      do_slice(ctx, starts, ends, ha ? &axes : nullptr, hs ? &steps : nullptr);
    });
  });

  // ------------------------------------------------------------------ Expand
  r.add("Expand", 8, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      Shape shape = int_input(ctx, 1, "shape");
      check_shape_nonneg(ctx, shape, "shape");
      Shape os = broadcast_shapes(ctx, x.shape(), shape);
      check_shape_nonneg(ctx, os, "output shape");
      if (os == x.shape()) {
        ctx.set_output(0, ctx.input_value(0));
        return;
      }
      strided_copy_out(ctx, 0, x, os, broadcast_strides(x.shape(), os), 0);
    });
  });

  // ------------------------------------------------------------------ Tile
  auto tile = [](KernelContext& ctx, const std::vector<int64_t>& reps) {
    const Tensor& x = ctx.input(0);
    int rk = x.rank();
    if (int(reps.size()) != rk)
      ctx.fail(ErrorCode::InvalidArgument, "repeats " + ints_str(reps) + " must have one entry per input dimension (rank " + std::to_string(rk) + ")");
    Shape os(static_cast<size_t>(rk));
    std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rk));
    for (int d = 0; d < rk; ++d) {
      if (reps[size_t(d)] < 0) ctx.fail(ErrorCode::InvalidArgument, "repeats " + ints_str(reps) + " has a negative entry");
      int64_t dim = x.dim(d);
      if (__builtin_mul_overflow(dim, reps[size_t(d)], &os[size_t(d)]))
        ctx.fail(ErrorCode::InvalidArgument, "repeats " + ints_str(reps) + " give too many elements");
    }
    check_shape_nonneg(ctx, os, "tiled shape");
    // Allocate the output first: its size check gives the clear MemoryLimit error for absurd
    // repeats, before the index maps (one entry per output row/column) try to allocate.
    Tensor& y = ctx.output(0, x.dtype(), os);
    if (y.numel() == 0) return;  // an empty output needs no maps (another axis may still be huge)
    for (int d = 0; d < rk; ++d) {
      int64_t dim = x.dim(d);
      maps[size_t(d)].resize(size_t(os[size_t(d)]));
      for (int64_t o = 0; o < os[size_t(d)]; ++o) maps[size_t(d)][size_t(o)] = o % dim;
    }
    dispatch_all(ctx, 0, x.dtype(), [&]<class T>() { axis_map_copy<T>(x, y, maps, T{}); });
  };
  r.add("Tile", 1, [tile](const Node& n) {
    if (n.opset < 6) {
      // Tile-1: inputs (input, tiles: scalar count, axis: scalar axis).
      return kernel([tile](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        const Tensor& t = ctx.input(1);
        const Tensor& a = ctx.input(2);
        if (t.numel() != 1 || a.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "tiles and axis must be scalars");
        int ax = normalize_axis(ctx, a.get_int(0), x.rank());
        std::vector<int64_t> reps(size_t(x.rank()), 1);
        reps[size_t(ax)] = t.get_int(0);
        tile(ctx, reps);
      });
    }
    return kernel([tile](KernelContext& ctx) { tile(ctx, int_input(ctx, 1, "repeats")); });
  });

  // ------------------------------------------------------------------ Pad
  r.add("Pad", 1, [](const Node& n) {
    PadMode mode = parse_pad_mode(n);
    if (n.opset < 11) {
      std::vector<int64_t> pads = n.opset < 2 ? n.attr_ints("paddings") : n.attr_ints("pads");
      float value = n.attr_float("value", 0.0f);
      return kernel([mode, pads, value](KernelContext& ctx) {
        int rk = ctx.input(0).rank();
        std::vector<int> axes;
        for (int d = 0; d < rk; ++d) axes.push_back(d);
        do_pad(ctx, mode, pads, axes, nullptr, value);
      });
    }
    return kernel([mode](KernelContext& ctx) {
      int rk = ctx.input(0).rank();
      std::vector<int64_t> pads = int_input(ctx, 1, "pads");
      std::vector<int> axes;
      if (ctx.has_input(3)) {
        axes = normalize_axes(ctx.node(), int_input(ctx, 3, "axes"), rk);
      } else {
        for (int d = 0; d < rk; ++d) axes.push_back(d);
      }
      const Tensor* cv = ctx.has_input(2) ? &ctx.input(2) : nullptr;
      do_pad(ctx, mode, pads, axes, cv, 0.0f);
    });
  });

  // ------------------------------------------------------------------ ConstantOfShape
  r.add("ConstantOfShape", 9, [](const Node& n) {
    Tensor value;
    if (n.has_attr("value")) {
      value = n.attr_tensor("value");
      if (value.numel() != 1) n.fail(ErrorCode::InvalidModel, "attribute 'value' must hold exactly one element, got shape " + shape_str(value.shape()));
    } else {
      value = Tensor::scalar<float>(0.0f);
    }
    return kernel([value](KernelContext& ctx) {
      Shape shape = int_input(ctx, 0, "shape");
      check_shape_nonneg(ctx, shape, "shape");
      Tensor& y = ctx.output(0, value.dtype(), shape);
      dispatch_all(ctx, 0, value.dtype(), [&]<class T>() {
        T v = value.data<T>()[0];
        T* o = y.data<T>();
        for (int64_t i = 0; i < y.numel(); ++i) o[i] = v;
      });
    });
  });

  // ------------------------------------------------------------------ Range
  r.add("Range", 11, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& s = ctx.input(0);
      const Tensor& l = ctx.input(1);
      const Tensor& d = ctx.input(2);
      DType dt = s.dtype();
      if (l.dtype() != dt || d.dtype() != dt)
        ctx.fail(ErrorCode::InvalidArgument, "start, limit and delta must have the same type");
      for (int i = 0; i < 3; ++i)
        if (ctx.input(i).numel() != 1)
          ctx.fail(ErrorCode::InvalidArgument, "input " + std::to_string(i) + " must be a scalar, got shape " + shape_str(ctx.input(i).shape()));
      if (!visit_numeric(dt, [&]<class T>() {
            T start = s.data<T>()[0], limit = l.data<T>()[0], delta = d.data<T>()[0];
            int64_t n;
            if constexpr (std::is_integral_v<T>) {
              if (delta == 0) ctx.fail(ErrorCode::InvalidArgument, "delta must not be 0");
              __int128 diff = __int128(limit) - __int128(start), dl = __int128(delta);
              __int128 cnt = 0;
              if (dl > 0 && diff > 0) cnt = (diff + dl - 1) / dl;
              if (dl < 0 && diff < 0) cnt = (-diff + -dl - 1) / -dl;
              if (cnt > (__int128(1) << 40)) ctx.fail(ErrorCode::InvalidArgument, "range is too large");
              n = int64_t(cnt);
            } else {
              double fs = double(start), fl = double(limit), fd = double(delta);
              if (fd == 0 || !std::isfinite(fs) || !std::isfinite(fl) || !std::isfinite(fd))
                ctx.fail(ErrorCode::InvalidArgument, "start, limit and delta must be finite and delta non-zero");
              double c = std::ceil((fl - fs) / fd);
              if (c > double(int64_t(1) << 40)) ctx.fail(ErrorCode::InvalidArgument, "range is too large");
              n = c > 0 ? int64_t(c) : 0;
            }
            Tensor& y = ctx.output(0, dt, {n});
            T* o = y.data<T>();
            if constexpr (std::is_integral_v<T>) {
              for (int64_t i = 0; i < n; ++i) o[i] = T(int64_t(start) + i * int64_t(delta));
            } else {
              for (int64_t i = 0; i < n; ++i) o[i] = T(double(start) + double(i) * double(delta));
            }
          }))
        unsupported_dtype(ctx, 0, dt);
    });
  });

  // ------------------------------------------------------------------ Dropout
  r.add("Dropout", 1, [](const Node& n) {
    int ver = n.opset;
    bool old_mask = ver < 10;  // mask has the data type before opset 10, bool after
    float ratio_attr = ver < 12 ? n.attr_float("ratio", 0.5f) : 0.5f;
    // Dropout-1/6 had an is_test attribute; basalt runs inference, so it is ignored.
    bool has_seed = n.has_attr("seed");
    int64_t seed = n.attr_int("seed", 0);
    return kernel([ver, old_mask, ratio_attr, has_seed, seed](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      float ratio = ratio_attr;
      bool training = false;
      if (ver >= 12) {
        if (ctx.has_input(1)) {
          const Tensor& rt = ctx.input(1);
          if (rt.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "ratio must be a scalar");
          ratio = float(rt.get_double(0));
        }
        if (ctx.has_input(2)) {
          const Tensor& tm = ctx.input(2);
          if (tm.numel() != 1 || tm.dtype() != DType::Bool) ctx.fail(ErrorCode::InvalidArgument, "training_mode must be a bool scalar");
          training = tm.data<bool>()[0];
        }
      }
      if (training && (ratio < 0 || ratio >= 1))
        ctx.fail(ErrorCode::InvalidArgument, "ratio must be in [0, 1), got " + std::to_string(ratio));
      if (!training || ratio == 0) {
        ctx.set_output(0, ctx.input_value(0));
        if (ctx.has_output(1)) {
          DType mt = old_mask ? x.dtype() : DType::Bool;
          Tensor& m = ctx.output(1, mt, x.shape());
          if (!visit_numeric_bool(mt, [&]<class T>() {
                T* p = m.data<T>();
                for (int64_t i = 0; i < m.numel(); ++i) p[i] = T(1);
              }))
            unsupported_dtype(ctx, 0, mt);
        }
        return;
      }
      // Training mode: random mask, kept values scaled by 1 / (1 - ratio). The generator is
      // MT19937 with doubles built from two 32-bit draws (53 bits), the same stream numpy's
      // RandomState(seed).uniform() produces, so a given seed gives the reference's mask.
      std::mt19937 rng(has_seed ? uint32_t(seed) : uint32_t(std::random_device{}()));
      auto uniform = [&rng]() {
        uint32_t a = rng() >> 5, b = rng() >> 6;
        return (double(a) * 67108864.0 + double(b)) / 9007199254740992.0;
      };
      Tensor& y = ctx.output(0, x.dtype(), x.shape());
      Tensor mask(DType::Bool, x.shape());
      if (!visit_float(x.dtype(), [&]<class T>() {
            const T* a = x.data<T>();
            T* b = y.data<T>();
            bool* mk = mask.data<bool>();
            using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
            C scale = C(1) / (C(1) - C(ratio));
            for (int64_t i = 0; i < x.numel(); ++i) {
              mk[i] = uniform() >= double(ratio);
              b[i] = mk[i] ? T(C(a[i]) * scale) : T(0.0f);
            }
          }))
        unsupported_dtype(ctx, 0, x.dtype());
      if (ctx.has_output(1)) ctx.set_output(1, Value(mask));
    });
  });

  // ------------------------------------------------------------------ EyeLike
  r.add("EyeLike", 9, [](const Node& n) {
    int64_t k = n.attr_int("k", 0);
    DType dt = DType::Undefined;
    if (n.has_attr("dtype")) {
      int64_t v = n.attr_int("dtype");
      if (!dtype_attr_known(v)) n.fail(ErrorCode::InvalidModel, "unknown dtype " + std::to_string(v));
      dt = DType(int32_t(v));
    }
    return kernel([k, dt](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be 2-D, got shape " + shape_str(x.shape()));
      DType ot = dt == DType::Undefined ? x.dtype() : dt;
      Tensor& y = ctx.output(0, ot, x.shape());
      int64_t R = x.dim(0), C = x.dim(1);
      if (k >= C || k <= -R) return;  // no diagonal entry inside (and i + k cannot overflow below)
      if (!visit_numeric_bool(ot, [&]<class T>() {
            T* o = y.data<T>();
            for (int64_t i = 0; i < R; ++i) {
              int64_t j = i + k;
              if (j >= 0 && j < C) o[i * C + j] = T(1);
            }
          }))
        unsupported_dtype(ctx, 0, ot);
    });
  });

  // ------------------------------------------------------------------ Trilu
  r.add("Trilu", 14, [](const Node& n) {
    bool upper = n.attr_int("upper", 1) != 0;
    return kernel([upper](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2, got shape " + shape_str(x.shape()));
      int64_t k = 0;
      if (ctx.has_input(1)) {
        const Tensor& kt = ctx.input(1);
        if (kt.numel() != 1 || !dtype_is_integer(kt.dtype())) ctx.fail(ErrorCode::InvalidArgument, "k must be an integer scalar");
        k = kt.get_int(0);
      }
      Tensor& y = ctx.output(0, x.dtype(), x.shape());
      int64_t R = x.dim(-2), C = x.dim(-1);
      int64_t mats = R * C == 0 ? 0 : x.numel() / (R * C);
      dispatch_all(ctx, 0, x.dtype(), [&]<class T>() {
        const T* a = x.data<T>();
        T* o = y.data<T>();
        for (int64_t m = 0; m < mats; ++m)
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < C; ++j) {
              int64_t p = (m * R + i) * C + j;
              bool keep = upper ? j - i >= k : j - i <= k;
              if (keep) o[p] = a[p];
            }
      });
    });
  });

  // ------------------------------------------------------------------ DepthToSpace / SpaceToDepth
  // A blocksize this large needs >= 2^32 channels (or spatial positions) per image; the cap keeps
  // b * b and the output dims (checked below) far from overflow.
  constexpr int64_t kMaxBlocksize = int64_t(1) << 16;
  r.add("DepthToSpace", 1, [](const Node& n) {
    int64_t b = n.attr_int("blocksize");
    if (b <= 0 || b > kMaxBlocksize)
      n.fail(ErrorCode::InvalidModel, "blocksize must be in [1, " + std::to_string(kMaxBlocksize) + "], got " + std::to_string(b));
    std::string mode = n.opset >= 11 ? n.attr_string("mode", "DCR") : "DCR";
    if (mode != "DCR" && mode != "CRD") n.fail(ErrorCode::InvalidModel, "mode must be DCR or CRD, got '" + mode + "'");
    bool crd = mode == "CRD";
    return kernel([b, crd](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "input must be 4-D NCHW, got shape " + shape_str(x.shape()));
      int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
      if (C % (b * b) != 0)
        ctx.fail(ErrorCode::InvalidArgument, "channels " + std::to_string(C) + " are not divisible by blocksize^2 = " + std::to_string(b * b));
      int64_t c = C / (b * b);
      Tensor t;
      if (crd)
        t = transpose_copy(ctx, x.reshaped({N, c, b, b, H, W}), {0, 1, 4, 2, 5, 3});
      else
        t = transpose_copy(ctx, x.reshaped({N, b, b, c, H, W}), {0, 3, 4, 1, 5, 2});
      int64_t oh, ow;
      if (__builtin_mul_overflow(H, b, &oh) || __builtin_mul_overflow(W, b, &ow))
        ctx.fail(ErrorCode::InvalidArgument, "blocksize " + std::to_string(b) + " gives too large an output for shape " + shape_str(x.shape()));
      ctx.set_output(0, Value(t.reshaped({N, c, oh, ow})));
    });
  });
  r.add("SpaceToDepth", 1, [](const Node& n) {
    int64_t b = n.attr_int("blocksize");
    if (b <= 0 || b > kMaxBlocksize)
      n.fail(ErrorCode::InvalidModel, "blocksize must be in [1, " + std::to_string(kMaxBlocksize) + "], got " + std::to_string(b));
    return kernel([b](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 4) ctx.fail(ErrorCode::InvalidArgument, "input must be 4-D NCHW, got shape " + shape_str(x.shape()));
      int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3);
      if (H % b != 0 || W % b != 0)
        ctx.fail(ErrorCode::InvalidArgument, "spatial size " + std::to_string(H) + "x" + std::to_string(W) + " is not divisible by blocksize " + std::to_string(b));
      int64_t oc;
      if (__builtin_mul_overflow(C, b * b, &oc))
        ctx.fail(ErrorCode::InvalidArgument, "blocksize " + std::to_string(b) + " gives too large an output for shape " + shape_str(x.shape()));
      Tensor t = transpose_copy(ctx, x.reshaped({N, C, H / b, b, W / b, b}), {0, 3, 5, 1, 2, 4});
      ctx.set_output(0, Value(t.reshaped({N, oc, H / b, W / b})));
    });
  });

  // ------------------------------------------------------------------ CenterCropPad
  r.add("CenterCropPad", 18, [](const Node& n) {
    bool has_axes = n.has_attr("axes");
    std::vector<int64_t> axes_attr = n.attr_ints("axes", {});
    return kernel([has_axes, axes_attr](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      int rk = x.rank();
      std::vector<int64_t> shape = int_input(ctx, 1, "shape");
      std::vector<int> axes;
      if (has_axes) {
        axes = normalize_axes(ctx.node(), axes_attr, rk);
      } else {
        for (int d = 0; d < rk; ++d) axes.push_back(d);
      }
      if (shape.size() != axes.size())
        ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + " must have one entry per axis (" + std::to_string(axes.size()) + ")");
      Shape os = x.shape();
      for (size_t i = 0; i < axes.size(); ++i) os[size_t(axes[i])] = shape[i];
      check_shape_nonneg(ctx, os, "output shape");
      os = x.shape();
      std::vector<std::vector<int64_t>> maps(static_cast<size_t>(rk));
      for (int d = 0; d < rk; ++d) {
        maps[size_t(d)].resize(size_t(os[size_t(d)]));
        for (int64_t i = 0; i < os[size_t(d)]; ++i) maps[size_t(d)][size_t(i)] = i;
      }
      for (size_t i = 0; i < axes.size(); ++i) {
        int a = axes[i];
        int64_t dim = x.dim(a), target = shape[i];
        if (target < 0) ctx.fail(ErrorCode::InvalidArgument, "shape " + ints_str(shape) + " has a negative entry");
        int64_t off = target <= dim ? (dim - target) / 2 : -((target - dim) / 2);  // source index of output 0
        os[size_t(a)] = target;
        auto& m = maps[size_t(a)];
        m.assign(size_t(target), -1);
        for (int64_t o = 0; o < target; ++o) {
          int64_t s = o + off;
          if (s >= 0 && s < dim) m[size_t(o)] = s;
        }
      }
      Tensor& y = ctx.output(0, x.dtype(), os);
      dispatch_all(ctx, 0, x.dtype(), [&]<class T>() { axis_map_copy<T>(x, y, maps, T{}); });
    });
  });

  // ------------------------------------------------------------------ Col2Im
  r.add("Col2Im", 18, [](const Node& n) {
    std::vector<int64_t> dil = n.attr_ints("dilations", {}), pads = n.attr_ints("pads", {}), strides = n.attr_ints("strides", {});
    return kernel([dil, pads, strides](KernelContext& ctx) { do_col2im(ctx, dil, pads, strides); });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"CenterCropPad", "Col2Im"}) r.def(op).data_dependent_shape();
  r.def("Concat").infer_symbolic(shapes::concat).alias(Alias::MaybeView);
  r.def("ConstantOfShape").infer(shapes::constant_of_shape);
  r.def("DepthToSpace").infer(shapes::depth_to_space);
  r.def("Dropout").infer_symbolic(shapes::dropout).alias(Alias::MaybeView);
  r.def("Expand").infer(shapes::expand).alias(Alias::MaybeView);
  r.def("Flatten").infer(shapes::flatten).alias(Alias::View);
  r.def("Pad").infer(shapes::pad);
  r.def("Range").infer(shapes::range);
  r.def("Reshape").infer(shapes::reshape).alias(Alias::View);
  r.def("Shape").infer(shapes::shape_op);
  r.def("Size").infer(shapes::size_op);
  r.def("Slice").infer(shapes::slice).alias(Alias::MaybeView);
  r.def("SpaceToDepth").infer(shapes::space_to_depth);
  r.def("Split").infer(shapes::split).alias(Alias::MaybeView);
  r.def("Squeeze").infer(shapes::squeeze).alias(Alias::View);
  r.def("Tile").infer(shapes::tile);
  r.def("Transpose").infer_symbolic(shapes::transpose).alias(Alias::MaybeView);
  r.def("Trilu").infer_symbolic(shapes::same);
  r.def("Unsqueeze").infer(shapes::unsqueeze).alias(Alias::View);
  r.def("EyeLike").infer_symbolic(shapes::eye_like);
}

}  // namespace basalt
