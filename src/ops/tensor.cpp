// Shape and layout ops: Shape, Size, Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Concat,
// Split, Slice, Expand, Tile. Ops whose output holds the input's bytes in the same order (Reshape,
// Flatten, Squeeze, Unsqueeze) return a reshaped view of the input, without a copy.
#include "ops/tensor_common.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>
#include <random>

namespace basalt {

namespace {

using namespace tensorops;

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

void register_shape(OpRegistry& r) {
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

}

void register_size(OpRegistry& r) {
  r.add("Size", 1, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      ctx.output(0, DType::Int64, {}).data<int64_t>()[0] = x.numel();
    });
  });

}

void register_reshape(OpRegistry& r) {
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

}

void register_flatten(OpRegistry& r) {
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

}

void register_squeeze_unsqueeze(OpRegistry& r) {
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

}

void register_transpose(OpRegistry& r) {
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

}

void register_concat(OpRegistry& r) {
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

}

void register_split(OpRegistry& r) {
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

}

void register_slice(OpRegistry& r) {
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

}

void register_expand(OpRegistry& r) {
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

}

void register_tile(OpRegistry& r) {
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

}

}  // namespace

void register_tensor_ops(OpRegistry& r) {
  for (auto family : {register_shape, register_size, register_reshape, register_flatten, register_squeeze_unsqueeze, register_transpose, register_concat, register_split, register_slice, register_expand, register_tile}) family(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Concat").infer_symbolic(shapes::concat).alias(Alias::MaybeView);
  r.def("Expand").infer(shapes::expand).alias(Alias::MaybeView);
  r.def("Flatten").infer(shapes::flatten).alias(Alias::View);
  r.def("Reshape").infer(shapes::reshape).alias(Alias::View);
  r.def("Shape").infer(shapes::shape_op);
  r.def("Size").infer(shapes::size_op);
  r.def("Slice").infer(shapes::slice).alias(Alias::MaybeView);
  r.def("Split").infer(shapes::split).alias(Alias::MaybeView);
  r.def("Squeeze").infer(shapes::squeeze).alias(Alias::View);
  r.def("Tile").infer(shapes::tile);
  r.def("Transpose").infer_symbolic(shapes::transpose).alias(Alias::MaybeView);
  r.def("Unsqueeze").infer(shapes::unsqueeze).alias(Alias::View);
}

}  // namespace basalt
