// Padding, cropping, block moves and generators: Pad, CenterCropPad, Col2Im, DepthToSpace,
// SpaceToDepth, Trilu, EyeLike, ConstantOfShape, Range, Dropout (a view of its input in inference).
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

void register_pad(OpRegistry& r) {
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

}

void register_constantofshape(OpRegistry& r) {
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

}

void register_range(OpRegistry& r) {
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

}

void register_dropout(OpRegistry& r) {
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

}

void register_eyelike(OpRegistry& r) {
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

}

void register_trilu(OpRegistry& r) {
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

}

void register_depthtospace_spacetodepth(OpRegistry& r) {
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

}

void register_centercroppad(OpRegistry& r) {
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

}

void register_col2im(OpRegistry& r) {
  r.add("Col2Im", 18, [](const Node& n) {
    std::vector<int64_t> dil = n.attr_ints("dilations", {}), pads = n.attr_ints("pads", {}), strides = n.attr_ints("strides", {});
    return kernel([dil, pads, strides](KernelContext& ctx) { do_col2im(ctx, dil, pads, strides); });
  });
}

}  // namespace

void register_pad_ops(OpRegistry& r) {
  for (auto family : {register_pad, register_constantofshape, register_range, register_dropout, register_eyelike, register_trilu, register_depthtospace_spacetodepth, register_centercroppad, register_col2im}) family(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"CenterCropPad", "Col2Im"}) r.def(op).data_dependent_shape();
  r.def("ConstantOfShape").infer(shapes::constant_of_shape);
  r.def("DepthToSpace").infer(shapes::depth_to_space);
  r.def("Dropout").infer_symbolic(shapes::dropout).alias(Alias::MaybeView);
  r.def("Pad").infer(shapes::pad);
  r.def("Range").infer(shapes::range);
  r.def("SpaceToDepth").infer(shapes::space_to_depth);
  r.def("Trilu").infer_symbolic(shapes::same);
  r.def("EyeLike").infer_symbolic(shapes::eye_like);
}

}  // namespace basalt
