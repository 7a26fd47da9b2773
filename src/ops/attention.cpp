// Reference kernels: attention-family and other recent ops.
//   Attention (23, 24), RotaryEmbedding (23), CumProd (26), BitCast (26), SwiGLU (28),
//   LinearAttention (27), ai.onnx.preview FlexAttention (1).
//   (TensorScatter lives in indexing.cpp.)
// Fused ops the optimizer introduces (docs/fused_ops.md): basalt::Attention (float32, on the
// packed GEMM, parallel over batch x heads) and basalt::Gelu (vectorized row kernels).
//
// Float kernels compute in double and round intermediate results to the element type at the
// points where the ONNX definition produces an intermediate tensor of that type, so float16
// results match the specification's step-by-step evaluation closely.
#include "ops/common.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/gemm.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace basalt {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<double> to_doubles(const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  bool ok = visit_numeric_bool(t.dtype(), [&]<class T>() {
    const T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = double(p[i]);
  });
  if (!ok) BASALT_THROW(Internal, std::string("to_doubles: unsupported type ") + dtype_name(t.dtype()));
  return v;
}

template <class T>
auto float_cast(double x) {
  if constexpr (std::is_same_v<T, double>) return x;
  else return float(x);
}

// Store doubles into a float tensor of type t.dtype().
void from_doubles(Tensor& t, const std::vector<double>& v) {
  visit_float(t.dtype(), [&]<class T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = T(float_cast<T>(v[i]));
  });
}

std::string shp(const Shape& s) { return shape_str(s); }

// ------------------------------------------------------------------------------------------
// Attention
// ------------------------------------------------------------------------------------------
struct AttentionAttrs {
  bool causal = false;
  int64_t q_heads = 0, kv_heads = 0;
  int64_t mode = 0;
  bool has_scale = false;
  double scale = 0;
  double softcap = 0;
  DType softmax_type = DType::Undefined;
};

// The sizes of one Attention run, checked: batch, query / key-value heads, sequence lengths, head
// sizes, the past key/value (always 4-D) and the total key length T = past + new.
struct AttnDims {
  int rank = 0;
  int64_t B = 0, Hq = 0, Sq = 0, D = 0, Hkv = 0, Skv = 0, Dv = 0, group = 0, P = 0, T = 0;
  const Tensor* PK = nullptr;
  const Tensor* PV = nullptr;
};

AttnDims attention_dims(KernelContext& ctx, const AttentionAttrs& a) {
  const Tensor& Q = ctx.input(0);
  const Tensor& K = ctx.input(1);
  const Tensor& V = ctx.input(2);
  const DType dt = Q.dtype();
  if (!is_float_like(dt)) unsupported_dtype(ctx, 0, dt);
  if (K.dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "K must have the type of Q");
  if (V.dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "V must have the type of Q");
  const int rank = Q.rank();
  if (rank != 3 && rank != 4) ctx.fail(ErrorCode::InvalidArgument, "Q must be 3-D or 4-D, got " + shp(Q.shape()));
  if (K.rank() != rank || V.rank() != rank)
    ctx.fail(ErrorCode::InvalidArgument, "Q, K and V must have the same rank; got " + shp(Q.shape()) + ", " + shp(K.shape()) + ", " + shp(V.shape()));

  int64_t B, Hq, Sq, D, Hkv, Skv, Dv;
  if (rank == 4) {
    B = Q.dim(0), Hq = Q.dim(1), Sq = Q.dim(2), D = Q.dim(3);
    Hkv = K.dim(1), Skv = K.dim(2);
    if (K.dim(0) != B || K.dim(3) != D)
      ctx.fail(ErrorCode::InvalidArgument, "K shape " + shp(K.shape()) + " does not match Q shape " + shp(Q.shape()));
    if (V.dim(0) != B || V.dim(1) != Hkv || V.dim(2) != Skv)
      ctx.fail(ErrorCode::InvalidArgument, "V shape " + shp(V.shape()) + " does not match K shape " + shp(K.shape()));
    Dv = V.dim(3);
  } else {
    if (a.q_heads <= 0 || a.kv_heads <= 0)
      ctx.fail(ErrorCode::InvalidModel, "3-D inputs need the q_num_heads and kv_num_heads attributes");
    B = Q.dim(0), Sq = Q.dim(1), Hq = a.q_heads, Hkv = a.kv_heads, Skv = K.dim(1);
    // Every head must get at least one channel: with a 0-size hidden dim the divisibility checks
    // below pass for any head count, and the loops would run that many times.
    if (Hq > std::max<int64_t>(1, Q.dim(2)) || Hkv > std::max<int64_t>(1, K.dim(2)))
      ctx.fail(ErrorCode::InvalidArgument, "q_num_heads (" + std::to_string(Hq) + ") / kv_num_heads (" + std::to_string(Hkv) +
                                               ") must not exceed the hidden size of Q " + shp(Q.shape()) + " / K " + shp(K.shape()));
    if (Q.dim(2) % Hq) ctx.fail(ErrorCode::InvalidArgument, "Q hidden size " + std::to_string(Q.dim(2)) + " is not divisible by q_num_heads");
    if (K.dim(2) % Hkv || V.dim(2) % Hkv)
      ctx.fail(ErrorCode::InvalidArgument, "K/V hidden sizes are not divisible by kv_num_heads");
    D = Q.dim(2) / Hq;
    Dv = V.dim(2) / Hkv;
    if (K.dim(0) != B || K.dim(2) / Hkv != D)
      ctx.fail(ErrorCode::InvalidArgument, "K shape " + shp(K.shape()) + " does not match Q shape " + shp(Q.shape()));
    if (V.dim(0) != B || V.dim(1) != Skv)
      ctx.fail(ErrorCode::InvalidArgument, "V shape " + shp(V.shape()) + " does not match K shape " + shp(K.shape()));
  }
  if (Hkv <= 0 || Hq <= 0 || Hq % Hkv)
    ctx.fail(ErrorCode::InvalidArgument, "the number of query heads (" + std::to_string(Hq) + ") must be a multiple of the number of key/value heads (" + std::to_string(Hkv) + ")");

  // Past key/value (always 4-D).
  int64_t P = 0;
  const Tensor* PK = nullptr;
  const Tensor* PV = nullptr;
  if (ctx.has_input(4) != ctx.has_input(5)) ctx.fail(ErrorCode::InvalidArgument, "past_key and past_value must be given together");
  if (ctx.has_input(4)) {
    PK = &ctx.input(4);
    PV = &ctx.input(5);
    if (PK->dtype() != dt || PV->dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "past_key/past_value must have the type of Q");
    if (PK->rank() != 4 || PK->dim(0) != B || PK->dim(1) != Hkv || PK->dim(3) != D)
      ctx.fail(ErrorCode::InvalidArgument, "past_key shape " + shp(PK->shape()) + " must be [batch, kv_heads, past_len, head_size]");
    P = PK->dim(2);
    if (PV->rank() != 4 || PV->dim(0) != B || PV->dim(1) != Hkv || PV->dim(2) != P || PV->dim(3) != Dv)
      ctx.fail(ErrorCode::InvalidArgument, "past_value shape " + shp(PV->shape()) + " does not match past_key " + shp(PK->shape()));
  }

  AttnDims r;
  r.rank = rank, r.B = B, r.Hq = Hq, r.Sq = Sq, r.D = D, r.Hkv = Hkv, r.Skv = Skv, r.Dv = Dv, r.group = Hq / Hkv;
  r.P = P, r.T = P + Skv, r.PK = PK, r.PV = PV;
  return r;
}

// Q as [B, Hq, Sq, D] doubles, and past + new K and V as [B, Hkv, T, D] / [B, Hkv, T, Dv].
void gather_qkv(KernelContext& ctx, const AttnDims& z, std::vector<double>& qv, std::vector<double>& kall,
                std::vector<double>& vall) {
  const int64_t B = z.B, Hq = z.Hq, Sq = z.Sq, D = z.D, Hkv = z.Hkv, Skv = z.Skv, Dv = z.Dv, P = z.P, T = z.T;
  const int rank = z.rank;
  const Tensor* PK = z.PK;
  const Tensor* PV = z.PV;
  std::vector<double> q = to_doubles(ctx.input(0)), kin = to_doubles(ctx.input(1)), vin = to_doubles(ctx.input(2));
  qv.assign(size_t(B * Hq * Sq * D), 0.0);
  kall.assign(size_t(B * Hkv * T * D), 0.0);
  vall.assign(size_t(B * Hkv * T * Dv), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t s = 0; s < Sq; ++s)
        for (int64_t d = 0; d < D; ++d) {
          size_t src = rank == 4 ? size_t(((b * Hq + h) * Sq + s) * D + d) : size_t((b * Sq + s) * Hq * D + h * D + d);
          qv[size_t(((b * Hq + h) * Sq + s) * D + d)] = q[src];
        }
  // past (4-D) then new (3-D packed or 4-D) rows of K or V, Dk values each.
  auto join = [&](const Tensor* past, const std::vector<double>& in, int64_t Dk, std::vector<double>& all) {
    std::vector<double> pst;
    if (past) pst = to_doubles(*past);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < Hkv; ++h)
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < Dk; ++d) {
            const int64_t s = t - P;
            all[size_t(((b * Hkv + h) * T + t) * Dk + d)] =
                t < P ? pst[size_t(((b * Hkv + h) * P + t) * Dk + d)]
                      : in[rank == 4 ? size_t(((b * Hkv + h) * Skv + s) * Dk + d) : size_t((b * Skv + s) * Hkv * Dk + h * Dk + d)];
          }
  };
  join(PK, kin, D, kall);
  join(PV, vin, Dv, vall);
}

// The attention mask broadcast (numpy rules, right-aligned) to [B, Hq, Sq, T]; a last dim
// shorter than T is padded with -inf (float) / false (bool).
struct AttnMask {
  bool present = false, is_bool = false;
  std::vector<double> v;
  int64_t last = 0;
  int64_t stride[4] = {0, 0, 0, 0};
  // The additive bias of score (b, h, i, j): the mask value, 0 / -inf for a bool mask.
  double bias(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (!present) return 0;
    if (j >= last) return -kInf;
    const double m = v[size_t(b * stride[0] + h * stride[1] + i * stride[2] + j)];
    return is_bool ? (m != 0 ? 0.0 : -kInf) : m;
  }
};

AttnMask attention_mask(KernelContext& ctx, const AttnDims& z, DType dt) {
  AttnMask r;
  if (!ctx.has_input(3)) return r;
  const Tensor* M = &ctx.input(3);
  const int64_t B = z.B, Hq = z.Hq, Sq = z.Sq, T = z.T;
  r.present = true;
  r.is_bool = M->dtype() == DType::Bool;
  if (!r.is_bool && M->dtype() != dt)
    ctx.fail(ErrorCode::InvalidArgument, std::string("attn_mask must be bool or ") + dtype_name(dt) + ", got " + dtype_name(M->dtype()));
  int mr = M->rank();
  if (mr < 1 || mr > 4) ctx.fail(ErrorCode::InvalidArgument, "attn_mask must have rank 1 to 4, got " + shp(M->shape()));
  r.last = M->dim(-1);
  if (r.last > T)
    ctx.fail(ErrorCode::InvalidArgument, "attn_mask last dimension " + std::to_string(r.last) + " exceeds the total key length " + std::to_string(T));
  const int64_t target[4] = {B, Hq, Sq, T};
  std::vector<int64_t> st = shape_strides(M->shape());
  for (int k = 0; k < mr; ++k) {
    int td = 4 - mr + k;
    int64_t md = M->dim(k);
    if (td == 3) {
      r.stride[3] = 1;
      continue;
    }
    if (md == target[td]) r.stride[td] = st[size_t(k)];
    else if (md == 1) r.stride[td] = 0;
    else ctx.fail(ErrorCode::InvalidArgument, "attn_mask shape " + shp(M->shape()) + " cannot broadcast to [" + std::to_string(B) + "," + std::to_string(Hq) + "," + std::to_string(Sq) + "," + std::to_string(T) + "]");
  }
  r.v = to_doubles(*M);
  return r;
}

void attention_compute(KernelContext& ctx, const AttentionAttrs& a) {
  const DType dt = ctx.input(0).dtype();
  const AttnDims z = attention_dims(ctx, a);
  const int64_t B = z.B, Hq = z.Hq, Sq = z.Sq, D = z.D, Hkv = z.Hkv, Dv = z.Dv, group = z.group, P = z.P, T = z.T;
  const int rank = z.rank;
  const Tensor* PK = z.PK;
  std::vector<double> qv, kall, vall;
  gather_qkv(ctx, z, qv, kall, vall);
  if (ctx.has_output(1)) {
    Tensor& o = ctx.output(1, dt, {B, Hkv, T, D});
    from_doubles(o, kall);
  }
  if (ctx.has_output(2)) {
    Tensor& o = ctx.output(2, dt, {B, Hkv, T, Dv});
    from_doubles(o, vall);
  }
  const AttnMask mask = attention_mask(ctx, z, dt);

  // nonpad_kv_seqlen (opset 24): per-batch count of valid keys.
  std::vector<int64_t> nonpad;
  if (ctx.has_input(6)) {
    const Tensor& N = ctx.input(6);
    if (N.dtype() != DType::Int64 && N.dtype() != DType::Int32) unsupported_dtype(ctx, 6, N.dtype());
    if (N.numel() != B) ctx.fail(ErrorCode::InvalidArgument, "nonpad_kv_seqlen must have batch_size (" + std::to_string(B) + ") elements, got " + shp(N.shape()));
    nonpad = N.to_int64_vector();
  }

  const double scale = a.has_scale ? a.scale : 1.0 / std::sqrt(double(D));
  const double sq = round_to(dt, std::sqrt(scale));
  for (double& x : qv) x = round_to(dt, x * sq);
  std::vector<double> ks(kall.size());
  for (size_t i = 0; i < kall.size(); ++i) ks[i] = round_to(dt, kall[i] * sq);
  const double cap = round_to(dt, a.softcap);
  const DType smt = a.softmax_type == DType::Undefined ? dt : a.softmax_type;
  const DType pvt = wider_float(smt, dt);

  std::vector<double> y(size_t(B * Hq * Sq * Dv));
  const bool want_qk = ctx.has_output(3);
  std::vector<double> qk(want_qk ? size_t(B * Hq * Sq * T) : 0);
  std::vector<double> raw(static_cast<size_t>(T)), biased(static_cast<size_t>(T)), p(static_cast<size_t>(T));

  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t hk = h / group;
      for (int64_t i = 0; i < Sq; ++i) {
        const double* qrow = &qv[size_t(((b * Hq + h) * Sq + i) * D)];
        for (int64_t j = 0; j < T; ++j) {
          const double* krow = &ks[size_t(((b * Hkv + hk) * T + j) * D)];
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += qrow[d] * krow[d];
          double s = round_to(dt, acc);
          if (a.softcap > 0) s = round_to(dt, round_to(dt, std::tanh(round_to(dt, s / cap))) * cap);
          raw[size_t(j)] = s;
          double bias = mask.bias(b, h, i, j);
          if (a.causal) {
            int64_t offset = P;
            if (!PK && !nonpad.empty()) offset = nonpad[size_t(b)] - Sq;
            if (j > i + offset) bias = round_to(dt, bias + -kInf);
          }
          if (!nonpad.empty() && j >= nonpad[size_t(b)]) bias = round_to(dt, bias + -kInf);
          biased[size_t(j)] = round_to(dt, s + bias);
        }
        // Softmax in precision smt.
        double mx = -kInf;
        for (int64_t j = 0; j < T; ++j) {
          p[size_t(j)] = round_to(smt, biased[size_t(j)]);
          mx = std::max(mx, p[size_t(j)]);
        }
        // A fully masked row (every score -inf) attends to nothing: its probabilities are 0.
        const bool empty_row = mx == -kInf;
        double sum = 0;
        if (empty_row) std::fill(p.begin(), p.end(), 0.0);
        else for (int64_t j = 0; j < T; ++j) {
          p[size_t(j)] = round_to(smt, std::exp(round_to(smt, p[size_t(j)] - mx)));
          sum += p[size_t(j)];
        }
        sum = round_to(smt, sum);
        if (!empty_row)
          for (int64_t j = 0; j < T; ++j) p[size_t(j)] = round_to(smt, p[size_t(j)] / sum);
        if (want_qk) {
          double* o = &qk[size_t(((b * Hq + h) * Sq + i) * T)];
          for (int64_t j = 0; j < T; ++j) {
            double v;
            switch (a.mode) {
              case 0: v = raw[size_t(j)]; break;
              case 1: v = a.softcap > 0 ? raw[size_t(j)] : biased[size_t(j)]; break;
              case 2: v = biased[size_t(j)]; break;
              default: v = p[size_t(j)]; break;
            }
            o[j] = round_to(dt, v);
          }
        }
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < T; ++j) acc += p[size_t(j)] * vall[size_t(((b * Hkv + hk) * T + j) * Dv + d)];
          double r = round_to(dt, round_to(pvt, acc));
          if (rank == 4) y[size_t(((b * Hq + h) * Sq + i) * Dv + d)] = r;
          else y[size_t((b * Sq + i) * Hq * Dv + h * Dv + d)] = r;
        }
      }
    }
  Shape yshape = rank == 4 ? Shape{B, Hq, Sq, Dv} : Shape{B, Sq, Hq * Dv};
  Tensor& Y = ctx.output(0, dt, yshape);
  from_doubles(Y, y);
  if (want_qk) {
    Tensor& o = ctx.output(3, dt, {B, Hq, Sq, T});
    from_doubles(o, qk);
  }
}

KernelFactory attention_factory() {
  return [](const Node& n) {
    AttentionAttrs a;
    a.causal = n.attr_int("is_causal", 0) != 0;
    a.q_heads = n.attr_int("q_num_heads", 0);
    a.kv_heads = n.attr_int("kv_num_heads", 0);
    if (a.q_heads > INT32_MAX || a.kv_heads > INT32_MAX)
      n.fail(ErrorCode::InvalidModel, "q_num_heads (" + std::to_string(a.q_heads) + ") and kv_num_heads (" + std::to_string(a.kv_heads) + ") must be < 2^31");
    a.mode = n.attr_int("qk_matmul_output_mode", 0);
    if (a.mode < 0 || a.mode > 3) n.fail(ErrorCode::InvalidModel, "qk_matmul_output_mode must be 0..3, got " + std::to_string(a.mode));
    a.has_scale = n.has_attr("scale");
    if (a.has_scale) a.scale = n.attr_float("scale");
    a.softcap = n.attr_float("softcap", 0.0f);
    if (n.has_attr("softmax_precision")) {
      int64_t sp = n.attr_int("softmax_precision");
      DType t = sp >= 0 && dtype_attr_known(sp) ? DType(int32_t(sp)) : DType::Undefined;
      if (!is_float_like(t)) n.fail(ErrorCode::InvalidModel, "softmax_precision must be a float type (1, 10, 11 or 16), got " + std::to_string(sp));
      a.softmax_type = t;
    }
    return kernel([a](KernelContext& ctx) { attention_compute(ctx, a); });
  };
}

// ------------------------------------------------------------------------------------------
// RotaryEmbedding
// ------------------------------------------------------------------------------------------
void rotary_compute(KernelContext& ctx, bool interleaved, int64_t num_heads, int64_t rot_dim_attr) {
  const Tensor& X = ctx.input(0);
  const Tensor& C = ctx.input(1);
  const Tensor& S = ctx.input(2);
  const DType dt = X.dtype();
  if (!is_float_like(dt)) unsupported_dtype(ctx, 0, dt);
  if (C.dtype() != dt) unsupported_dtype(ctx, 1, C.dtype());
  if (S.dtype() != dt) unsupported_dtype(ctx, 2, S.dtype());
  if (C.shape() != S.shape()) ctx.fail(ErrorCode::InvalidArgument, "cos_cache " + shp(C.shape()) + " and sin_cache " + shp(S.shape()) + " must have the same shape");
  int64_t B, Sl, H, Dh;
  const bool r4 = X.rank() == 4;
  if (r4) {
    B = X.dim(0), H = X.dim(1), Sl = X.dim(2), Dh = X.dim(3);
  } else if (X.rank() == 3) {
    if (num_heads <= 0) ctx.fail(ErrorCode::InvalidModel, "3-D input needs the num_heads attribute");
    B = X.dim(0), Sl = X.dim(1), H = num_heads;
    if (H > std::max<int64_t>(1, X.dim(2)))
      ctx.fail(ErrorCode::InvalidArgument, "num_heads " + std::to_string(H) + " must not exceed the hidden size " + std::to_string(X.dim(2)));
    if (X.dim(2) % H) ctx.fail(ErrorCode::InvalidArgument, "hidden size " + std::to_string(X.dim(2)) + " is not divisible by num_heads " + std::to_string(H));
    Dh = X.dim(2) / H;
  } else {
    ctx.fail(ErrorCode::InvalidArgument, "input must be 3-D or 4-D, got " + shp(X.shape()));
  }
  int64_t rd = rot_dim_attr > 0 ? rot_dim_attr : Dh;
  if (rd > Dh || rd % 2) ctx.fail(ErrorCode::InvalidArgument, "rotary_embedding_dim " + std::to_string(rd) + " must be even and <= head size " + std::to_string(Dh));
  const int64_t half = rd / 2;
  std::vector<int64_t> pos;
  bool shared_rows = false;
  if (ctx.has_input(3)) {
    const Tensor& Pi = ctx.input(3);
    if (Pi.dtype() != DType::Int64 && Pi.dtype() != DType::Int32) unsupported_dtype(ctx, 3, Pi.dtype());
    if (Pi.rank() != 2 || Pi.dim(0) != B || Pi.dim(1) != Sl)
      ctx.fail(ErrorCode::InvalidArgument, "position_ids shape " + shp(Pi.shape()) + " must be [batch, seq]");
    if (C.rank() != 2 || C.dim(1) != half)
      ctx.fail(ErrorCode::InvalidArgument, "cos_cache shape " + shp(C.shape()) + " must be [max_pos, " + std::to_string(half) + "] with position_ids");
    pos = Pi.to_int64_vector();
    for (int64_t p : pos)
      if (p < 0 || p >= C.dim(0)) ctx.fail(ErrorCode::InvalidArgument, "position id " + std::to_string(p) + " is out of range [0, " + std::to_string(C.dim(0)) + ")");
  } else {
    // [batch, seq, rd/2], or [seq, rd/2] shared by every batch entry.
    bool ok3 = C.rank() == 3 && C.dim(0) == B && C.dim(1) == Sl && C.dim(2) == half;
    bool ok2 = C.rank() == 2 && C.dim(0) == Sl && C.dim(1) == half;
    if (!ok3 && !ok2)
      ctx.fail(ErrorCode::InvalidArgument, "cos_cache shape " + shp(C.shape()) + " must be [batch, seq, " + std::to_string(half) + "] without position_ids");
    shared_rows = ok2 && !ok3;
  }
  std::vector<double> x = to_doubles(X), c = to_doubles(C), s = to_doubles(S), y(x.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < Sl; ++t) {
      int64_t row = !pos.empty() ? pos[size_t(b * Sl + t)] : shared_rows ? t : (b * Sl + t);
      const double* cr = &c[size_t(row * half)];
      const double* sr = &s[size_t(row * half)];
      for (int64_t h = 0; h < H; ++h) {
        size_t base = r4 ? size_t(((b * H + h) * Sl + t) * Dh) : size_t((b * Sl + t) * H * Dh + h * Dh);
        const double* xi = &x[base];
        double* yo = &y[base];
        for (int64_t k = 0; k < half; ++k) {
          int64_t i1 = interleaved ? 2 * k : k, i2 = interleaved ? 2 * k + 1 : k + half;
          double x1 = xi[i1], x2 = xi[i2];
          yo[i1] = round_to(dt, round_to(dt, cr[k] * x1) - round_to(dt, sr[k] * x2));
          yo[i2] = round_to(dt, round_to(dt, sr[k] * x1) + round_to(dt, cr[k] * x2));
        }
        for (int64_t k = rd; k < Dh; ++k) yo[k] = xi[k];
      }
    }
  Tensor& Y = ctx.output(0, dt, X.shape());
  from_doubles(Y, y);
}

// ------------------------------------------------------------------------------------------
// CumProd
// ------------------------------------------------------------------------------------------
void cumprod_compute(KernelContext& ctx, bool exclusive, bool reverse) {
  const Tensor& X = ctx.input(0);
  const Tensor& A = ctx.input(1);
  if (A.dtype() != DType::Int64 && A.dtype() != DType::Int32) unsupported_dtype(ctx, 1, A.dtype());
  if (A.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "axis must be a scalar, got shape " + shp(A.shape()));
  if (X.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
  int axis = normalize_axis(ctx, A.get_int(0), X.rank());
  int64_t outer = 1, inner = 1, len = X.dim(axis);
  for (int d = 0; d < axis; ++d) outer *= X.dim(d);
  for (int d = axis + 1; d < X.rank(); ++d) inner *= X.dim(d);
  Tensor& Y = ctx.output(0, X.dtype(), X.shape());
  if (!visit_numeric(X.dtype(), [&]<class T>() {
        const T* x = X.data<T>();
        T* y = Y.data<T>();
        using Acc = std::conditional_t<std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>, float, T>;
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t in = 0; in < inner; ++in) {
            Acc acc = Acc(1);
            for (int64_t k = 0; k < len; ++k) {
              int64_t kk = reverse ? len - 1 - k : k;
              int64_t idx = (o * len + kk) * inner + in;
              if (exclusive) {
                y[idx] = T(acc);
                acc = Acc(acc * Acc(x[idx]));
              } else {
                acc = Acc(acc * Acc(x[idx]));
                y[idx] = T(acc);
              }
            }
          }
      }))
    unsupported_dtype(ctx, 0, X.dtype());
}

// ------------------------------------------------------------------------------------------
// SwiGLU: y = a * sigmoid(alpha * a) * b (broadcasting a and b)
// ------------------------------------------------------------------------------------------
void swiglu_compute(KernelContext& ctx, double alpha) {
  const Tensor& A = ctx.input(0);
  const Tensor& Bt = ctx.input(1);
  const DType dt = A.dtype();
  if (!is_float_like(dt)) unsupported_dtype(ctx, 0, dt);
  if (Bt.dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "inputs a and b must have the same type");
  Shape out = broadcast_shapes(ctx, A.shape(), Bt.shape());
  std::vector<int64_t> st[2] = {broadcast_strides(A.shape(), out), broadcast_strides(Bt.shape(), out)};
  std::vector<double> a = to_doubles(A), b = to_doubles(Bt), y(size_t(shape_numel(out)));
  const double al = round_to(dt, alpha);
  for_each_broadcast(out, st, [&](int64_t i, const int64_t* off) {
    double x = a[size_t(off[0])];
    // Rounded to the element type after each step, as the definition evaluates it.
    double e = round_to(dt, std::exp(round_to(dt, -al * x)));
    double sig = round_to(dt, 1.0 / round_to(dt, 1.0 + e));
    y[size_t(i)] = round_to(dt, round_to(dt, x * sig) * b[size_t(off[1])]);
  });
  Tensor& Y = ctx.output(0, dt, out);
  from_doubles(Y, y);
}

// ------------------------------------------------------------------------------------------
// LinearAttention (27): recurrent linear attention with linear / gated / delta / gated_delta
// update rules; packed [B, T, H*D] activations, state [B, H_kv, d_k, d_v].
// ------------------------------------------------------------------------------------------
// Inputs 0-2 (Q, K, V): one float type and the given rank. Returns the type.
DType check_qkv(const KernelContext& ctx, int rank, const char* names, const char* layout) {
  const Tensor& Q = ctx.input(0);
  const Tensor& K = ctx.input(1);
  const Tensor& V = ctx.input(2);
  const DType dt = Q.dtype();
  if (!is_float_like(dt)) unsupported_dtype(ctx, 0, dt);
  if (K.dtype() != dt || V.dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, std::string(names) + " must have the same type");
  if (Q.rank() != rank || K.rank() != rank || V.rank() != rank)
    ctx.fail(ErrorCode::InvalidArgument, std::string(names) + " must be " + layout + "; got " + shp(Q.shape()) + ", " +
                                             shp(K.shape()) + ", " + shp(V.shape()));
  return dt;
}

struct LinearAttentionAttrs {
  int64_t q_heads = 0, kv_heads = 0;
  double scale = 0;
  bool gating = false, delta = false;
};

void linear_attention_compute(KernelContext& ctx, const LinearAttentionAttrs& a) {
  const Tensor& Q = ctx.input(0);
  const Tensor& K = ctx.input(1);
  const Tensor& V = ctx.input(2);
  const DType dt = check_qkv(ctx, 3, "query, key and value", "3-D [batch, seq, heads*dim]");
  const int64_t B = Q.dim(0), T = Q.dim(1), Hq = a.q_heads, Hkv = a.kv_heads;
  if (K.dim(0) != B || V.dim(0) != B || K.dim(1) != T || V.dim(1) != T)
    ctx.fail(ErrorCode::InvalidArgument, "query, key and value must agree on batch and sequence sizes");
  if (Hq > std::max<int64_t>(1, Q.dim(2)) || Hkv > std::max<int64_t>(1, K.dim(2)))
    ctx.fail(ErrorCode::InvalidArgument, "q_num_heads (" + std::to_string(Hq) + ") / kv_num_heads (" + std::to_string(Hkv) +
                                             ") must not exceed the hidden size of query " + shp(Q.shape()) + " / key " + shp(K.shape()));
  if (Q.dim(2) % Hq || K.dim(2) % Hkv || V.dim(2) % Hkv)
    ctx.fail(ErrorCode::InvalidArgument, "hidden sizes must be divisible by the head counts");
  const int64_t dk = Q.dim(2) / Hq, dv = V.dim(2) / Hkv;
  if (K.dim(2) / Hkv != dk) ctx.fail(ErrorCode::InvalidArgument, "key head size " + std::to_string(K.dim(2) / Hkv) + " differs from query head size " + std::to_string(dk));
  const int64_t group = Hq / Hkv;

  // Optional inputs: past_state (3), decay (4), beta (5), erase_gate (6).
  const bool has_decay = ctx.has_input(4), has_beta = ctx.has_input(5), has_erase = ctx.has_input(6);
  if (a.gating && !has_decay) ctx.fail(ErrorCode::InvalidArgument, "this update_rule needs the decay input");
  if (!a.gating && has_decay) ctx.fail(ErrorCode::InvalidArgument, "this update_rule does not take a decay input");
  if (a.delta && !has_beta) ctx.fail(ErrorCode::InvalidArgument, "this update_rule needs the beta input");
  if (!a.delta && has_beta) ctx.fail(ErrorCode::InvalidArgument, "this update_rule does not take a beta input");
  if (!a.delta && has_erase) ctx.fail(ErrorCode::InvalidArgument, "this update_rule does not take an erase_gate input");

  std::vector<double> state(size_t(B * Hkv * dk * dv), 0.0);
  DType state_type = dt;
  if (ctx.has_input(3)) {
    const Tensor& S = ctx.input(3);
    if (!is_float_like(S.dtype())) unsupported_dtype(ctx, 3, S.dtype());
    if (S.shape() != Shape{B, Hkv, dk, dv})
      ctx.fail(ErrorCode::InvalidArgument, "past_state shape " + shp(S.shape()) + " must be [" + std::to_string(B) + "," + std::to_string(Hkv) + "," + std::to_string(dk) + "," + std::to_string(dv) + "]");
    state = to_doubles(S);
    state_type = S.dtype();
  }
  std::vector<double> decay, beta, erase;
  int64_t decay_w = 0, beta_w = 0;
  if (has_decay) {
    const Tensor& G = ctx.input(4);
    if (!is_float_like(G.dtype())) unsupported_dtype(ctx, 4, G.dtype());
    if (G.rank() != 3 || G.dim(0) != B || G.dim(1) != T || (G.dim(2) != Hkv && G.dim(2) != Hkv * dk))
      ctx.fail(ErrorCode::InvalidArgument, "decay shape " + shp(G.shape()) + " must be [batch, seq, kv_heads] or [batch, seq, kv_heads*head_size]");
    decay_w = G.dim(2) == Hkv * dk ? dk : 1;
    decay = to_doubles(G);
  }
  if (has_beta) {
    const Tensor& Bb = ctx.input(5);
    if (!is_float_like(Bb.dtype())) unsupported_dtype(ctx, 5, Bb.dtype());
    if (Bb.rank() != 3 || Bb.dim(0) != B || Bb.dim(1) != T || (Bb.dim(2) != Hkv && Bb.dim(2) != 1))
      ctx.fail(ErrorCode::InvalidArgument, "beta shape " + shp(Bb.shape()) + " must be [batch, seq, kv_heads] or [batch, seq, 1]");
    beta_w = Bb.dim(2);
    beta = to_doubles(Bb);
  }
  if (has_erase) {
    const Tensor& E = ctx.input(6);
    if (!is_float_like(E.dtype())) unsupported_dtype(ctx, 6, E.dtype());
    if (E.rank() != 3 || E.dim(0) != B || E.dim(1) != T || E.dim(2) != Hkv * dk)
      ctx.fail(ErrorCode::InvalidArgument, "erase_gate shape " + shp(E.shape()) + " must be [batch, seq, kv_heads*head_size]");
    erase = to_doubles(E);
  }
  const double scale = a.scale != 0 ? a.scale : 1.0 / std::sqrt(double(dk));
  std::vector<double> q = to_doubles(Q), k = to_doubles(K), v = to_doubles(V);
  std::vector<double> y(static_cast<size_t>(B * T * Hq * dv), 0.0), vt(static_cast<size_t>(dv)), ke(static_cast<size_t>(dk));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t h = 0; h < Hkv; ++h) {
        double* S = &state[size_t((b * Hkv + h) * dk * dv)];
        const double* kt = &k[size_t((b * T + t) * Hkv * dk + h * dk)];
        const double* vin = &v[size_t((b * T + t) * Hkv * dv + h * dv)];
        if (a.gating) {
          for (int64_t i = 0; i < dk; ++i) {
            double g = decay[size_t((b * T + t) * Hkv * decay_w + h * decay_w + (decay_w == 1 ? 0 : i))];
            double e = std::exp(g);
            for (int64_t m = 0; m < dv; ++m) S[i * dv + m] *= e;
          }
        }
        for (int64_t m = 0; m < dv; ++m) vt[size_t(m)] = vin[m];
        if (a.delta) {
          for (int64_t i = 0; i < dk; ++i)
            ke[size_t(i)] = has_erase ? erase[size_t((b * T + t) * Hkv * dk + h * dk + i)] * kt[i] : kt[i];
          double bt = beta[size_t((b * T + t) * beta_w + (beta_w == 1 ? 0 : h))];
          for (int64_t m = 0; m < dv; ++m) {
            double r = 0;
            for (int64_t i = 0; i < dk; ++i) r += S[i * dv + m] * ke[size_t(i)];
            vt[size_t(m)] = bt * (vt[size_t(m)] - r);
          }
        }
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t m = 0; m < dv; ++m) S[i * dv + m] += kt[i] * vt[size_t(m)];
      }
      for (int64_t h = 0; h < Hq; ++h) {
        const double* S = &state[size_t((b * Hkv + h / group) * dk * dv)];
        const double* qt = &q[size_t((b * T + t) * Hq * dk + h * dk)];
        double* o = &y[size_t((b * T + t) * Hq * dv + h * dv)];
        for (int64_t m = 0; m < dv; ++m) {
          double r = 0;
          for (int64_t i = 0; i < dk; ++i) r += qt[i] * S[i * dv + m];
          o[m] = scale * r;
        }
      }
    }
  Tensor& Y = ctx.output(0, dt, {B, T, Hq * dv});
  from_doubles(Y, y);
  if (ctx.has_output(1)) {
    Tensor& P = ctx.output(1, state_type, {B, Hkv, dk, dv});
    from_doubles(P, state);
  }
}

// ------------------------------------------------------------------------------------------
// FlexAttention (ai.onnx.preview 1): scaled dot-product attention over 4-D inputs with
// optional score_mod / prob_mod subgraphs applied to the whole [B, Hq, L, S] tensor.
// ------------------------------------------------------------------------------------------
struct FlexAttrs {
  bool has_scale = false;
  double scale = 0;
  DType softmax_type = DType::Undefined;
  std::shared_ptr<Graph> score_mod, prob_mod;
};

// Runs a modifier subgraph on a [B, H, L, S] tensor held as doubles (type dt).
void run_modifier(KernelContext& ctx, const Graph& g, const char* what, DType dt, const Shape& shape, std::vector<double>& x) {
  Tensor t(dt, shape);
  from_doubles(t, x);
  std::vector<Value> in{Value(t)};
  std::vector<Value> out = ctx.run_subgraph(g, in);
  if (out.size() != 1 || !out[0].is_tensor()) ctx.fail(ErrorCode::InvalidModel, std::string(what) + " must produce one tensor");
  const Tensor& r = out[0].tensor;
  if (r.shape() != shape) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " output shape " + shp(r.shape()) + " must equal its input shape " + shp(shape));
  if (r.dtype() == DType::String || !visit_numeric_bool(r.dtype(), []<class T>() {}))
    ctx.fail(ErrorCode::Unsupported, std::string(what) + " output has unsupported type " + dtype_name(r.dtype()));
  x = to_doubles(r);
}

void flex_attention_compute(KernelContext& ctx, const FlexAttrs& a) {
  const Tensor& Q = ctx.input(0);
  const Tensor& K = ctx.input(1);
  const Tensor& V = ctx.input(2);
  const DType dt = check_qkv(ctx, 4, "Q, K and V", "4-D");
  const int64_t B = Q.dim(0), Hq = Q.dim(1), L = Q.dim(2), D = Q.dim(3), Hkv = K.dim(1), S = K.dim(2), Dv = V.dim(3);
  if (K.dim(0) != B || K.dim(3) != D) ctx.fail(ErrorCode::InvalidArgument, "K shape " + shp(K.shape()) + " does not match Q shape " + shp(Q.shape()));
  if (V.dim(0) != B || V.dim(1) != Hkv || V.dim(2) != S) ctx.fail(ErrorCode::InvalidArgument, "V shape " + shp(V.shape()) + " does not match K shape " + shp(K.shape()));
  if (Hkv <= 0 || Hq % Hkv) ctx.fail(ErrorCode::InvalidArgument, "q_num_heads (" + std::to_string(Hq) + ") must be a multiple of kv_num_heads (" + std::to_string(Hkv) + ")");
  const int64_t group = Hq / Hkv;
  const DType smt = a.softmax_type != DType::Undefined ? a.softmax_type : (dt == DType::Double ? DType::Double : DType::Float);
  const double scale = a.has_scale ? a.scale : round_to(DType::Float, 1.0 / std::sqrt(double(D)));
  const double sq = round_to(dt, round_to(DType::Float, std::sqrt(scale)));
  std::vector<double> q = to_doubles(Q), k = to_doubles(K), v = to_doubles(V);
  for (double& x : q) x = round_to(dt, x * sq);
  for (double& x : k) x = round_to(dt, x * sq);
  const Shape sshape{B, Hq, L, S};
  std::vector<double> sc(size_t(B * Hq * L * S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j) {
          const double* qr = &q[size_t(((b * Hq + h) * L + i) * D)];
          const double* kr = &k[size_t(((b * Hkv + h / group) * S + j) * D)];
          double acc = 0;
          for (int64_t d = 0; d < D; ++d) acc += qr[d] * kr[d];
          sc[size_t(((b * Hq + h) * L + i) * S + j)] = round_to(smt, round_to(dt, acc));
        }
  if (a.score_mod) run_modifier(ctx, *a.score_mod, "score_mod", smt, sshape, sc);
  for (int64_t r = 0; r < B * Hq * L; ++r) {
    double* row = &sc[size_t(r * S)];
    double mx = -kInf;
    for (int64_t j = 0; j < S; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j < S; ++j) {
      row[j] = round_to(smt, std::exp(round_to(smt, row[j] - mx)));
      sum += row[j];
    }
    sum = round_to(smt, sum);
    for (int64_t j = 0; j < S; ++j) row[j] = round_to(smt, row[j] / sum);
  }
  if (a.prob_mod) run_modifier(ctx, *a.prob_mod, "prob_mod", smt, sshape, sc);
  std::vector<double> y(size_t(B * Hq * L * Dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < L; ++i) {
        const double* p = &sc[size_t(((b * Hq + h) * L + i) * S)];
        for (int64_t d = 0; d < Dv; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < S; ++j) acc += p[j] * v[size_t(((b * Hkv + h / group) * S + j) * Dv + d)];
          y[size_t(((b * Hq + h) * L + i) * Dv + d)] = round_to(dt, round_to(smt, acc));
        }
      }
  Tensor& Y = ctx.output(0, dt, {B, Hq, L, Dv});
  from_doubles(Y, y);
}

// ------------------------------------------------------------------------------------------
// basalt::Attention and basalt::Gelu: the fused ops the optimizer introduces (docs/fused_ops.md).
// ------------------------------------------------------------------------------------------

// The fused attention kernel works on blocks of up to kAttnRows query rows of one (batch, head):
// scores = Q_blk K_h^T (sgemm, scale and the mask applied in its epilogue where the mask's
// layout allows), softmax in place, then Y_blk = P V_h (sgemm). Q/K/V/Y are read and written in
// place in their [B, S, H*D] layouts (leading dims H*D), so no head transpose is materialized,
// and the block bounds the scratch to kAttnRows x Sk scores per worker.
constexpr int64_t kAttnRows = 128;

struct AttnScratch {
  int64_t scores = 0, gemm = 0;
  int64_t total() const { return scores + gemm; }
};
AttnScratch fused_attention_scratch(const kernels::GemmArch& ga, int64_t Sq, int64_t Sk, int64_t D, int64_t Dv) {
  const int64_t rows = std::min(Sq, kAttnRows);
  AttnScratch s;
  s.scores = rows * Sk;
  s.gemm = std::max(kernels::sgemm_workspace_floats(ga, rows, Sk, D, false, false),
                    kernels::sgemm_workspace_floats(ga, rows, Dv, Sk, false, false));
  s.scores = kernels::round_up(s.scores, 16);  // keep the gemm part 64-byte aligned
  return s;
}

struct FusedAttentionAttrs {
  int64_t heads = 0;
  bool has_scale = false;
  float scale = 0;
};

// One (batch, head). mask points at this (b, h)'s [Sq, Sk] plane with strides mask_s (rows) and
// mask_t (columns); either may be 0 (broadcast).
void fused_attention_head(const kernels::GemmArch& ga, const float* q, int64_t ldq, const float* k, int64_t ldk,
                          const float* v, int64_t ldv, float* y, int64_t ldy, int64_t Sq, int64_t Sk, int64_t D,
                          int64_t Dv, float scale, const float* mask, int64_t mask_s, int64_t mask_t, float* scratch,
                          const AttnScratch& sz) {
  float* sc = scratch;
  float* ws = scratch + sz.scores;
  const kernels::VecOps& vec = kernels::vec_ops();
  for (int64_t s0 = 0; s0 < Sq; s0 += kAttnRows) {
    const int64_t rows = std::min(kAttnRows, Sq - s0);
    // scores = scale * Q K^T + mask; the mask goes into the epilogue when it is a per-column row
    // (the usual [B, 1, 1, Sk] padding mask) or a dense [.., Sq, Sk] plane with unit column stride.
    kernels::Epilogue ep;
    ep.alpha = scale;
    const float* mrow = mask ? mask + s0 * mask_s : nullptr;
    bool mask_done = !mask;
    if (mask && mask_s == 0 && mask_t == 1) {
      ep.col_bias = mrow;
      mask_done = true;
    } else if (mask && mask_t == 1) {
      ep.residual = mrow;
      ep.ldr = mask_s;
      mask_done = true;
    }
    kernels::GemmOperand A{q + s0 * ldq, ldq, false, nullptr};
    kernels::GemmOperand B{k, ldk, true, nullptr};
    kernels::sgemm(ga, rows, Sk, D, A, B, sc, Sk, ep, nullptr, ws);
    for (int64_t r = 0; r < rows; ++r) {
      float* row = sc + r * Sk;
      if (!mask_done) {
        const float* mr = mrow + r * mask_s;
        for (int64_t t = 0; t < Sk; ++t) row[t] += mr[t * mask_t];
      }
      vec.softmax(row, row, Sk, false);
    }
    kernels::GemmOperand P{sc, Sk, false, nullptr};
    kernels::GemmOperand Vh{v, ldv, false, nullptr};
    kernels::sgemm(ga, rows, Dv, Sk, P, Vh, y + s0 * ldy, ldy, kernels::Epilogue{}, nullptr, ws);
  }
}

class FusedAttentionKernel final : public OpKernel {
 public:
  explicit FusedAttentionKernel(FusedAttentionAttrs a) : a_(a) {}

  size_t workspace_bytes(std::span<const Shape> in, int threads) const override {
    if (in.size() < 3 || in[0].size() != 3 || in[1].size() != 3 || in[2].size() != 3 || a_.heads <= 0) return 0;
    for (int i = 0; i < 3; ++i)
      for (int64_t d : in[size_t(i)])
        if (d < 0) return 0;  // unknown dims: compute() asks for what it needs
    const int64_t H = a_.heads;
    int64_t tasks;
    if (H > std::max<int64_t>(1, in[0][2]) || __builtin_mul_overflow(in[0][0], H, &tasks)) return 0;  // compute() rejects it
    const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(threads, tasks));
    const AttnScratch sz = fused_attention_scratch(kernels::gemm_arch_best(), in[0][1], in[1][1], in[0][2] / H, in[2][2] / H);
    return size_t(slots * sz.total()) * sizeof(float);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& Q = ctx.input(0);
    const Tensor& K = ctx.input(1);
    const Tensor& V = ctx.input(2);
    for (int i = 0; i < 3; ++i)
      if (ctx.input(i).dtype() != DType::Float) unsupported_dtype(ctx, i, ctx.input(i).dtype());
    if (Q.rank() != 3 || K.rank() != 3 || V.rank() != 3)
      ctx.fail(ErrorCode::InvalidArgument, "Q, K and V must be 3-D [batch, seq, heads*head_size]; got " + shp(Q.shape()) +
                                               ", " + shp(K.shape()) + ", " + shp(V.shape()));
    const int64_t H = a_.heads, B = Q.dim(0), Sq = Q.dim(1), Sk = K.dim(1);
    if (H > std::max<int64_t>(1, Q.dim(2)))
      ctx.fail(ErrorCode::InvalidArgument, "num_heads " + std::to_string(H) + " must not exceed the hidden size of Q " + shp(Q.shape()));
    if (Q.dim(2) % H || K.dim(2) % H || V.dim(2) % H)
      ctx.fail(ErrorCode::InvalidArgument, "hidden sizes of Q " + shp(Q.shape()) + ", K " + shp(K.shape()) + " and V " +
                                               shp(V.shape()) + " must be divisible by num_heads=" + std::to_string(H));
    const int64_t D = Q.dim(2) / H, Dv = V.dim(2) / H;
    if (K.dim(0) != B || V.dim(0) != B || K.dim(2) != Q.dim(2) || V.dim(1) != Sk)
      ctx.fail(ErrorCode::InvalidArgument, "K " + shp(K.shape()) + " and V " + shp(V.shape()) +
                                               " do not match Q " + shp(Q.shape()) + " (same batch; K hidden = Q hidden; V seq = K seq)");
    // The mask broadcasts to [B, H, Sq, Sk] (numpy rules): stride 0 along its size-1 dims.
    const float* mask = nullptr;
    int64_t ms[4] = {0, 0, 0, 0};
    if (ctx.has_input(3)) {
      const Tensor& M = ctx.input(3);
      if (M.dtype() != DType::Float) unsupported_dtype(ctx, 3, M.dtype());
      const Shape full = {B, H, Sq, Sk};
      if (M.rank() > 4) ctx.fail(ErrorCode::InvalidArgument, "mask " + shp(M.shape()) + " has rank > 4");
      int64_t stride = 1;
      for (int d = 3, md = M.rank() - 1; md >= 0; --d, --md) {
        const int64_t n = M.dim(md);
        if (n != 1 && n != full[size_t(d)])
          ctx.fail(ErrorCode::InvalidArgument, "mask " + shp(M.shape()) + " does not broadcast to [batch, heads, q_seq, kv_seq] = " + shp(full));
        ms[d] = n == 1 ? 0 : stride;
        stride *= n;
      }
      mask = M.data<float>();
    }
    Tensor& Y = ctx.output_uninit(0, DType::Float, {B, Sq, H * Dv});
    if (Y.numel() == 0) return;
    if (Sk == 0) {  // softmax over nothing: the unfused graph's MatMul with an empty axis gives zeros
      std::fill(Y.data<float>(), Y.data<float>() + Y.numel(), 0.f);
      return;
    }
    const int64_t tasks = B * H;
    const int64_t slots = std::max<int64_t>(1, std::min<int64_t>(ctx.threads(), tasks));
    const int64_t grain = (tasks + slots - 1) / slots;
    const kernels::GemmArch& ga = kernels::gemm_arch_best();
    const AttnScratch sz = fused_attention_scratch(ga, Sq, Sk, D, Dv);
    const int64_t per = sz.total();
    float* scratch = static_cast<float*>(ctx.workspace(size_t(slots * per) * sizeof(float)));
    const float scale = a_.has_scale ? a_.scale : float(1.0 / std::sqrt(double(D)));
    const float *qd = Q.data<float>(), *kd = K.data<float>(), *vd = V.data<float>();
    float* yd = Y.data<float>();
    parallel_for(ctx.pool(), tasks, grain, [&](int64_t b0, int64_t e0) {
      float* mine = scratch + (b0 / grain) * per;  // one chunk per slot: chunk index = b0 / grain
      for (int64_t i = b0; i < e0; ++i) {
        const int64_t b = i / H, h = i % H;
        const float* m = mask ? mask + b * ms[0] + h * ms[1] : nullptr;
        fused_attention_head(ga, qd + b * Sq * H * D + h * D, H * D, kd + b * Sk * H * D + h * D, H * D,
                             vd + b * Sk * H * Dv + h * Dv, H * Dv, yd + b * Sq * H * Dv + h * Dv, H * Dv, Sq, Sk, D,
                             Dv, scale, m, ms[2], ms[3], mine, sz);
      }
    });
  }

 private:
  FusedAttentionAttrs a_;
};

// GELU with the erf form (approximate "none") or the tanh form: the math of ai.onnx Gelu-20, on
// the vectorized row kernels (float32; other float types go through float32).
void fused_gelu_compute(KernelContext& ctx, bool use_tanh) {
  const Tensor& x = ctx.input(0);
  if (!is_float_like(x.dtype())) unsupported_dtype(ctx, 0, x.dtype());
  const Tensor xf = x.dtype() == DType::Float ? x : to_float32(x);
  Tensor yf = x.dtype() == DType::Float ? ctx.output_uninit(0, DType::Float, x.shape()) : Tensor::uninit(DType::Float, x.shape());
  kernels::unary_f32(ctx.pool(), use_tanh ? kernels::UnaryOp::GeluTanh : kernels::UnaryOp::Gelu, {}, xf.data<float>(),
                     yf.data<float>(), xf.numel());
  if (x.dtype() != DType::Float) ctx.set_output(0, from_float32(yf, x.dtype()));
}

}  // namespace

void register_attention_ops(OpRegistry& r) {
  r.add("basalt", "Attention", 1, INT_MAX, [](const Node& n) {
    FusedAttentionAttrs a;
    a.heads = n.attr_int("num_heads");
    if (a.heads <= 0 || a.heads > INT32_MAX) n.fail(ErrorCode::InvalidModel, "num_heads must be in [1, 2^31), got " + std::to_string(a.heads));
    a.has_scale = n.has_attr("scale");
    if (a.has_scale) a.scale = n.attr_float("scale");
    return std::make_unique<FusedAttentionKernel>(a);
  });
  r.add("basalt", "Gelu", 1, INT_MAX, [](const Node& n) {
    std::string approx = n.attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh")
      n.fail(ErrorCode::InvalidModel, "attribute approximate must be 'none' or 'tanh', got '" + approx + "'");
    return kernel([t = approx == "tanh"](KernelContext& ctx) { fused_gelu_compute(ctx, t); });
  });
  r.add("Attention", 23, attention_factory());

  r.add("RotaryEmbedding", 23, [](const Node& n) {
    bool interleaved = n.attr_int("interleaved", 0) != 0;
    int64_t num_heads = n.attr_int("num_heads", 0);
    int64_t rd = n.attr_int("rotary_embedding_dim", 0);
    if (num_heads < 0 || rd < 0) n.fail(ErrorCode::InvalidModel, "num_heads and rotary_embedding_dim must be >= 0");
    if (num_heads > INT32_MAX) n.fail(ErrorCode::InvalidModel, "num_heads must be < 2^31, got " + std::to_string(num_heads));
    return kernel([=](KernelContext& ctx) { rotary_compute(ctx, interleaved, num_heads, rd); });
  });

  r.add("CumProd", 26, [](const Node& n) {
    bool exclusive = n.attr_int("exclusive", 0) != 0, reverse = n.attr_int("reverse", 0) != 0;
    return kernel([=](KernelContext& ctx) { cumprod_compute(ctx, exclusive, reverse); });
  });

  r.add("BitCast", 26, [](const Node& n) {
    int64_t to = n.attr_int("to");
    if (to <= 0 || !dtype_attr_known(to)) n.fail(ErrorCode::InvalidModel, "attribute 'to' = " + std::to_string(to) + " is not a known target type");
    DType target = DType(int32_t(to));
    if (target == DType::String) n.fail(ErrorCode::InvalidModel, "BitCast to string is not allowed");
    if (dtype_file_bits(target) < 8) n.fail(ErrorCode::Unsupported, std::string("BitCast to sub-byte type ") + dtype_name(target) + " is not supported");
    return kernel([target](KernelContext& ctx) {
      const Tensor& X = ctx.input(0);
      DType src = X.dtype();
      if (src == DType::String || dtype_file_bits(src) < 8) unsupported_dtype(ctx, 0, src);
      if (dtype_size(src) != dtype_size(target))
        ctx.fail(ErrorCode::InvalidArgument, std::string("BitCast needs types of the same size: ") + dtype_name(src) + " (" + std::to_string(8 * dtype_size(src)) + " bits) to " + dtype_name(target) + " (" + std::to_string(8 * dtype_size(target)) + " bits)");
      Tensor& Y = ctx.output(0, target, X.shape());
      if (X.nbytes()) std::memcpy(Y.raw(), X.raw(), X.nbytes());
      if (target == DType::Bool) {  // keep bool storage canonical (0/1)
        auto* p = static_cast<uint8_t*>(Y.raw());
        for (int64_t i = 0; i < Y.numel(); ++i) p[i] = p[i] != 0;
      }
    });
  });

  r.add("SwiGLU", 28, [](const Node& n) {
    double alpha = n.attr_float("alpha", 1.0f);
    return kernel([alpha](KernelContext& ctx) { swiglu_compute(ctx, alpha); });
  });

  r.add("LinearAttention", 27, [](const Node& n) {
    LinearAttentionAttrs a;
    a.q_heads = n.attr_int("q_num_heads");
    a.kv_heads = n.attr_int("kv_num_heads");
    if (a.q_heads <= 0 || a.kv_heads <= 0 || a.q_heads % a.kv_heads || a.q_heads > INT32_MAX)
      n.fail(ErrorCode::InvalidModel, "q_num_heads (" + std::to_string(a.q_heads) + ") must be a positive multiple of kv_num_heads (" + std::to_string(a.kv_heads) + "), below 2^31");
    a.scale = n.attr_float("scale", 0.0f);
    std::string rule = n.attr_string("update_rule", "gated_delta");
    if (rule != "linear" && rule != "gated" && rule != "delta" && rule != "gated_delta")
      n.fail(ErrorCode::InvalidModel, "update_rule must be linear, gated, delta or gated_delta; got '" + rule + "'");
    a.gating = rule == "gated" || rule == "gated_delta";
    a.delta = rule == "delta" || rule == "gated_delta";
    return kernel([a](KernelContext& ctx) { linear_attention_compute(ctx, a); });
  });
  r.add("ai.onnx.preview", "FlexAttention", 1, INT_MAX, [](const Node& n) {
    FlexAttrs a;
    a.has_scale = n.has_attr("scale");
    if (a.has_scale) a.scale = n.attr_float("scale");
    if (n.has_attr("softmax_precision")) {
      int64_t sp = n.attr_int("softmax_precision");
      DType t = sp >= 0 && dtype_attr_known(sp) ? DType(int32_t(sp)) : DType::Undefined;
      if (!is_float_like(t)) n.fail(ErrorCode::InvalidModel, "softmax_precision must be a float type, got " + std::to_string(sp));
      a.softmax_type = t;
    }
    for (const auto& at : n.attrs)
      if (at.name != "scale" && at.name != "softmax_precision" && at.name != "score_mod" && at.name != "prob_mod")
        n.fail(ErrorCode::Unsupported, "attribute '" + at.name + "' is not supported");
    if (n.has_attr("score_mod")) a.score_mod = n.attr_graph("score_mod");
    if (n.has_attr("prob_mod")) a.prob_mod = n.attr_graph("prob_mod");
    for (const auto* g : {a.score_mod.get(), a.prob_mod.get()})
      if (g && (g->inputs.size() != 1 || g->outputs.size() != 1))
        n.fail(ErrorCode::InvalidModel, "score_mod/prob_mod subgraphs must have exactly one input and one output");
    return kernel([a](KernelContext& ctx) { flex_attention_compute(ctx, a); });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Attention").infer(shapes::attention);
  r.def("basalt", "Attention").infer(shapes::attention);
  for (const char* op : {"CumProd", "RotaryEmbedding"}) r.def(op).infer_symbolic(shapes::same);
  r.def("BitCast").infer_symbolic(shapes::bitcast);
  r.def("ai.onnx.preview", "FlexAttention").infer(shapes::flex_attention);
  r.def("LinearAttention").infer(shapes::linear_attention);
  r.def("SwiGLU").infer_symbolic(shapes::swiglu);
}

}  // namespace basalt
