// MatMul (and basalt::FusedMatMul), Gemm, MatMulInteger-free float paths.
#include "ops/nn_common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <type_traits>

namespace basalt::nnops {

namespace {

// ---------------------------------------------------------------- MatMul / Gemm

template <class T>
void matmul_typed(const Tensor& A, const Tensor& B, Tensor& Y, const Shape& abatch, const Shape& bbatch, const Shape& obatch,
                  int64_t M, int64_t K, int64_t N) {
  std::vector<int64_t> st[2] = {broadcast_strides(abatch, obatch), broadcast_strides(bbatch, obatch)};
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* y = Y.data<T>();
  for_each_broadcast(obatch, st, [&](int64_t i, const int64_t* off) {
    gemm_acc<T>(M, N, K, a + off[0] * M * K, K, b + off[1] * K * N, N, y + i * M * N, N);
  });
}

// Reference MatMul (every dtype): i-k-j loops per batch item.
void matmul_reference(KernelContext& ctx) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  if (A.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "A and B must have the same type");
  if (A.rank() < 1 || B.rank() < 1) ctx.fail(ErrorCode::InvalidArgument, "MatMul operands must have rank >= 1");
  Shape as = A.shape(), bs = B.shape();
  bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  if (bs[bs.size() - 2] != K)
    ctx.fail(ErrorCode::InvalidArgument, "shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are not compatible");
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  Shape ob = broadcast_shapes(ctx, ab, bb);
  Shape ys = ob;
  if (!a1) ys.push_back(M);
  if (!b1) ys.push_back(N);
  Shape full = ob;
  full.push_back(M);
  full.push_back(N);
  DType dt = A.dtype();
  if (dt == DType::Float16 || dt == DType::BFloat16) {
    Tensor af = tof(A), bf = tof(B);
    Tensor yf(DType::Float, full);
    matmul_typed<float>(af, bf, yf, ab, bb, ob, M, K, N);
    ctx.set_output(0, Value(fromf(yf, dt).reshaped(ys)));
    return;
  }
  Tensor Y(dt, full);
  bool ok = false;
  switch (dt) {
    case DType::Float: matmul_typed<float>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Double: matmul_typed<double>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Int32: matmul_typed<int32_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Int64: matmul_typed<int64_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Uint32: matmul_typed<uint32_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    case DType::Uint64: matmul_typed<uint64_t>(A, B, Y, ab, bb, ob, M, K, N); ok = true; break;
    default: break;
  }
  if (!ok) unsupported_dtype(ctx, 0, dt);
  ctx.set_output(0, Value(Y.reshaped(ys)));
}

// Reference Gemm (every dtype): op(A), op(B) materialized, then alpha * A*B + beta * C.
void gemm_reference(KernelContext& ctx, float alpha, float beta, bool ta, bool tb) {
  const Tensor& A = ctx.input(0);
  const Tensor& B = ctx.input(1);
  if (A.rank() != 2 || B.rank() != 2)
    ctx.fail(ErrorCode::InvalidArgument, "A and B must be 2-D, got " + shape_str(A.shape()) + " and " + shape_str(B.shape()));
  if (A.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "A and B must have the same type");
  int64_t M = ta ? A.dim(1) : A.dim(0), K = ta ? A.dim(0) : A.dim(1);
  int64_t KB = tb ? B.dim(1) : B.dim(0), N = tb ? B.dim(0) : B.dim(1);
  if (K != KB)
    ctx.fail(ErrorCode::InvalidArgument, "inner dimensions do not match: A " + shape_str(A.shape()) + ", B " + shape_str(B.shape()));
  const Tensor* Cp = ctx.has_input(2) ? &ctx.input(2) : nullptr;
  if (Cp) {
    const Shape& cs = Cp->shape();
    bool okc = cs.size() <= 2;
    if (okc && cs.size() >= 1 && cs.back() != 1 && cs.back() != N) okc = false;
    if (okc && cs.size() == 2 && cs[0] != 1 && cs[0] != M) okc = false;
    if (!okc) ctx.fail(ErrorCode::InvalidArgument, "C shape " + shape_str(cs) + " cannot broadcast to [" + std::to_string(M) + "," + std::to_string(N) + "]");
  }
  DType dt = A.dtype();
  auto run = [&]<class T, class Acc>(const T* a, const T* b, const Tensor* C, T* y) {
    // materialize op(A) [M,K] and op(B) [K,N] in Acc
    std::vector<Acc> aa(size_t(M * K)), bb(size_t(K * N)), yy(size_t(M * N), Acc(0));
    for (int64_t i = 0; i < M; ++i)
      for (int64_t k = 0; k < K; ++k) aa[size_t(i * K + k)] = Acc(ta ? a[k * M + i] : a[i * K + k]);
    for (int64_t k = 0; k < K; ++k)
      for (int64_t j = 0; j < N; ++j) bb[size_t(k * N + j)] = Acc(tb ? b[j * K + k] : b[k * N + j]);
    gemm_acc<Acc>(M, N, K, aa.data(), K, bb.data(), N, yy.data(), N);
    std::vector<int64_t> cst;
    const T* c = nullptr;
    if (C) {
      cst = broadcast_strides(C->shape(), {M, N});
      c = C->data<T>();
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        Acc v = Acc(alpha) * yy[size_t(i * N + j)];
        if (c) v += Acc(beta) * Acc(c[i * cst[0] + j * cst[1]]);
        y[i * N + j] = T(v);
      }
  };
  if (Cp && Cp->dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "C must have the type of A");
  Tensor& Y = ctx.output(0, dt, {M, N});
  switch (dt) {
    case DType::Float: run.template operator()<float, float>(A.data<float>(), B.data<float>(), Cp, Y.data<float>()); break;
    case DType::Double: run.template operator()<double, double>(A.data<double>(), B.data<double>(), Cp, Y.data<double>()); break;
    case DType::Float16: run.template operator()<float16, float>(A.data<float16>(), B.data<float16>(), Cp, Y.data<float16>()); break;
    case DType::BFloat16: run.template operator()<bfloat16, float>(A.data<bfloat16>(), B.data<bfloat16>(), Cp, Y.data<bfloat16>()); break;
    case DType::Int32: run.template operator()<int32_t, int64_t>(A.data<int32_t>(), B.data<int32_t>(), Cp, Y.data<int32_t>()); break;
    case DType::Int64: run.template operator()<int64_t, int64_t>(A.data<int64_t>(), B.data<int64_t>(), Cp, Y.data<int64_t>()); break;
    case DType::Uint32: run.template operator()<uint32_t, uint64_t>(A.data<uint32_t>(), B.data<uint32_t>(), Cp, Y.data<uint32_t>()); break;
    case DType::Uint64: run.template operator()<uint64_t, uint64_t>(A.data<uint64_t>(), B.data<uint64_t>(), Cp, Y.data<uint64_t>()); break;
    default: unsupported_dtype(ctx, 0, dt);
  }
}

// The constant B operand of MatMul / Gemm, packed once at load for the GEMM. The packed copy is
// used only for the very tensor it was made from: an initializer that is also a graph input can
// be overridden by a feed (once the packed copy replaces the constant, the original's data is null).
struct PackedRhs {
  kernels::PackedMatrix m;
  Shape shape;
  const void* src = nullptr;  // the constant tensor's data the packed copy was made from

  // Packs input 1 when it is a non-empty 2-D float constant; tb: it is stored [N, K].
  void pack(const PrepareContext& pc, bool tb) {
    const Tensor* b = pc.constant.size() > 1 ? pc.constant[1] : nullptr;
    if (!b || b->dtype() != DType::Float || b->rank() != 2 || b->numel() == 0) return;
    int64_t K = tb ? b->dim(1) : b->dim(0), N = tb ? b->dim(0) : b->dim(1);
    m = kernels::pack_b_matrix(kernels::gemm_arch_best(), K, N, b->data<float>(), b->dim(1), tb);
    shape = b->shape();
    src = b->raw();
  }
  bool serves(const Tensor& B) const {
    return !m.data.empty() && B.shape() == shape && (B.raw() == src || B.raw() == nullptr);
  }
};

// MatMul and basalt::FusedMatMul share one kernel class. FusedMatMul (domain "basalt", opset 1)
// is emitted by the optimizer; its semantics:
//   inputs  A, B, bias (optional, 1-D of length N, added to every row)
//   attrs   transA, transB (0/1: transpose the last two dims of that operand; ignored for a 1-D
//           operand), alpha (float, default 1), activation, activation_params (as FusedConv)
//   Y = act(alpha * op(A) @ op(B) + bias), with MatMul's broadcasting of the batch dims and its
//   1-D operand rules.
// float32 runs on the packed GEMM (src/kernels/gemm.hpp); a constant 2-D B is packed at load.
// Other dtypes of MatMul use the reference loops; FusedMatMul computes them through float32.
struct MatMulDims {
  bool ok = false;
  bool a1 = false, b1 = false;
  int64_t M = 0, K = 0, N = 0;
  Shape ab, bb;  // batch dims
};

MatMulDims matmul_dims(const Shape& a, const Shape& b, bool ta, bool tb) {
  MatMulDims d;
  if (a.empty() || b.empty()) return d;
  Shape as = a, bs = b;
  d.a1 = as.size() == 1;
  d.b1 = bs.size() == 1;
  if (d.a1) as.insert(as.begin(), 1);
  if (d.b1) bs.push_back(1);
  bool tA = ta && !d.a1, tB = tb && !d.b1;
  d.M = tA ? as.back() : as[as.size() - 2];
  d.K = tA ? as[as.size() - 2] : as.back();
  int64_t kb = tB ? bs.back() : bs[bs.size() - 2];
  d.N = tB ? bs[bs.size() - 2] : bs.back();
  if (kb != d.K) return d;
  d.ab.assign(as.begin(), as.end() - 2);
  d.bb.assign(bs.begin(), bs.end() - 2);
  d.ok = true;
  return d;
}

class MatMulKernel final : public OpKernel {
 public:
  MatMulKernel(bool fused, bool ta, bool tb, float alpha, kernels::Activation act)
      : fused_(fused), ta_(ta), tb_(tb), alpha_(alpha), act_(act) {}

  void prepare(const PrepareContext& pc) override { packed_.pack(pc, tb_); }
  size_t packed_bytes() const override { return packed_.m.bytes(); }
  bool replaces_constant(int input) const override { return input == 1 && packed_bytes() > 0; }
  size_t workspace_bytes(std::span<const Shape> in, int threads) const override {
    if (in.size() < 2) return 0;
    MatMulDims d = matmul_dims(in[0], in[1], ta_, tb_);
    if (!d.ok) return 0;
    return plan(d, in[1] == packed_.shape, threads).bytes;
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != B.dtype()) ctx.fail(ErrorCode::InvalidArgument, "A and B must have the same type");
    if (A.rank() < 1 || B.rank() < 1) ctx.fail(ErrorCode::InvalidArgument, "MatMul operands must have rank >= 1");
    MatMulDims d = matmul_dims(A.shape(), B.shape(), ta_, tb_);
    if (!d.ok)
      ctx.fail(ErrorCode::InvalidArgument, "shapes " + shape_str(A.shape()) + " and " + shape_str(B.shape()) + " are not compatible");
    DType dt = A.dtype();
    if (!fused_ && dt != DType::Float) {
      matmul_reference(ctx);
      return;
    }
    if (fused_) require_float(ctx, 0, dt);
    Shape ob = broadcast_shapes(ctx, d.ab, d.bb);
    Shape ys = ob;
    if (!d.a1) ys.push_back(d.M);
    if (!d.b1) ys.push_back(d.N);
    Tensor biasf;
    if (fused_ && ctx.has_input(2)) {
      const Tensor& bias = ctx.input(2);
      require_float(ctx, 2, bias.dtype());
      if (bias.rank() != 1 || bias.dim(0) != d.N)
        ctx.fail(ErrorCode::InvalidArgument, "bias must be 1-D of length " + std::to_string(d.N) + ", got " + shape_str(bias.shape()));
      biasf = tof(bias);
    }
    Tensor af = tof(A), bf = tof(B);
    const bool f32 = dt == DType::Float;
    Tensor ylocal;
    if (!f32) ylocal = Tensor::uninit(DType::Float, ys);
    Tensor& yt = f32 ? ctx.output_uninit(0, DType::Float, ys) : ylocal;
    const bool use_packed = packed_.serves(B);
    Plan p = plan(d, use_packed, ctx.threads());
    float* work = p.bytes ? static_cast<float*>(ctx.workspace(p.bytes)) : nullptr;

    const kernels::GemmArch& g = kernels::gemm_arch_best();
    kernels::Epilogue ep;
    ep.alpha = alpha_;
    ep.col_bias = biasf.defined() ? biasf.data<float>() : nullptr;
    ep.act = act_;
    const bool tA = ta_ && !d.a1, tB = tb_ && !d.b1;
    const float* a = af.data<float>();
    const float* b = bf.data<float>();
    float* y = yt.data<float>();
    const int64_t M = d.M, N = d.N, K = d.K;
    auto item = [&](int64_t Mi, const float* ai, const float* bi, float* yi, ThreadPool* pool, float* w) {
      kernels::GemmOperand opa, opb;
      opa.data = ai;
      opa.ld = tA ? M : K;
      opa.trans = tA;
      if (use_packed) {
        opb.packed = packed_.m.data.data();
      } else {
        opb.data = bi;
        opb.ld = tB ? K : N;
        opb.trans = tB;
      }
      kernels::sgemm(g, Mi, N, K, opa, opb, yi, N, ep, pool, w);
    };
    if (p.fold_m) {  // B has no batch dims and A is not transposed: one GEMM over all rows
      item(p.rows, a, b, y, ctx.pool(), work);
    } else {
      std::vector<int64_t> st[2] = {broadcast_strides(d.ab, ob), broadcast_strides(d.bb, ob)};
      std::vector<int64_t> aoff, boff;
      for_each_broadcast(ob, st, [&](int64_t, const int64_t* off) {
        aoff.push_back(off[0]);
        boff.push_back(off[1]);
      });
      int64_t nb = int64_t(aoff.size());
      if (p.slots > 1) {  // many small products: one per task, each inline with its own workspace slot
        int64_t grain = (nb + p.slots - 1) / p.slots;
        parallel_for(ctx.pool(), nb, grain, [&](int64_t b0, int64_t b1) {
          float* w = work ? work + (b0 / grain) * p.slot_floats : nullptr;
          for (int64_t i = b0; i < b1; ++i) item(M, a + aoff[size_t(i)] * M * K, b + boff[size_t(i)] * K * N, y + i * M * N, nullptr, w);
        });
      } else {
        for (int64_t i = 0; i < nb; ++i) item(M, a + aoff[size_t(i)] * M * K, b + boff[size_t(i)] * K * N, y + i * M * N, ctx.pool(), work);
      }
    }
    if (!f32) ctx.set_output(0, Value(fromf(yt, dt)));
  }

 private:
  struct Plan {
    bool fold_m = false;
    int64_t rows = 0;        // M of the folded GEMM
    int64_t slots = 1;       // workspace slots (> 1: batch items run in parallel, one per task)
    int64_t slot_floats = 0;
    size_t bytes = 0;
  };
  Plan plan(const MatMulDims& d, bool use_packed, int threads) const {
    Plan p;
    const kernels::GemmArch& g = kernels::gemm_arch_best();
    int64_t nb_a = shape_numel(d.ab), nb_b = shape_numel(d.bb);
    int64_t nb = std::max(nb_a, nb_b);
    p.fold_m = nb_b == 1 && !(ta_ && !d.a1);
    p.rows = p.fold_m ? nb_a * d.M : d.M;
    int64_t M = p.rows;
    p.slot_floats = kernels::sgemm_workspace_floats(g, M, d.N, d.K, false, use_packed) + 16;
    if (!p.fold_m && threads > 1 && nb >= threads) p.slots = threads;
    p.bytes = size_t(p.slot_floats * p.slots) * sizeof(float) + 64;
    return p;
  }

  bool fused_, ta_, tb_;
  float alpha_;
  kernels::Activation act_;
  PackedRhs packed_;
};

// Gemm: float32 on the packed GEMM with C folded into the epilogue (scaled by beta); other
// dtypes on the reference loops.
class GemmKernel final : public OpKernel {
 public:
  GemmKernel(float alpha, float beta, bool ta, bool tb) : alpha_(alpha), beta_(beta), ta_(ta), tb_(tb) {}

  void prepare(const PrepareContext& pc) override { packed_.pack(pc, tb_); }
  size_t packed_bytes() const override { return packed_.m.bytes(); }
  bool replaces_constant(int input) const override { return input == 1 && packed_bytes() > 0; }
  size_t workspace_bytes(std::span<const Shape> in, int) const override {
    if (in.size() < 2 || in[0].size() != 2 || in[1].size() != 2) return 0;
    int64_t M = ta_ ? in[0][1] : in[0][0], K = ta_ ? in[0][0] : in[0][1], N = tb_ ? in[1][0] : in[1][1];
    return ws_bytes(M, N, K, in[1] == packed_.shape);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& A = ctx.input(0);
    const Tensor& B = ctx.input(1);
    if (A.dtype() != DType::Float || B.dtype() != DType::Float || A.rank() != 2 || B.rank() != 2 ||
        (ctx.has_input(2) && ctx.input(2).dtype() != DType::Float)) {
      gemm_reference(ctx, alpha_, beta_, ta_, tb_);
      return;
    }
    int64_t M = ta_ ? A.dim(1) : A.dim(0), K = ta_ ? A.dim(0) : A.dim(1);
    int64_t KB = tb_ ? B.dim(1) : B.dim(0), N = tb_ ? B.dim(0) : B.dim(1);
    if (K != KB)
      ctx.fail(ErrorCode::InvalidArgument, "inner dimensions do not match: A " + shape_str(A.shape()) + ", B " + shape_str(B.shape()));
    kernels::Epilogue ep;
    ep.alpha = alpha_;
    std::vector<float> cbuf;  // beta * C when it has to be scaled or expanded
    if (ctx.has_input(2)) {
      const Shape& cs = ctx.input(2).shape();
      bool okc = cs.size() <= 2;
      if (okc && cs.size() >= 1 && cs.back() != 1 && cs.back() != N) okc = false;
      if (okc && cs.size() == 2 && cs[0] != 1 && cs[0] != M) okc = false;
      if (!okc)
        ctx.fail(ErrorCode::InvalidArgument, "C shape " + shape_str(cs) + " cannot broadcast to [" + std::to_string(M) + "," +
                                                 std::to_string(N) + "]");
    }
    if (ctx.has_input(2) && beta_ != 0.f) {
      const Tensor& Ct = ctx.input(2);
      const Shape& cs = Ct.shape();
      const float* c = Ct.data<float>();
      int64_t cr = cs.size() == 2 ? cs[0] : 1, cc = cs.empty() ? 1 : cs.back();
      if (cr == M && cc == N) {  // one value per output element
        if (beta_ == 1.f) {
          ep.residual = c;
        } else {
          cbuf.resize(size_t(M * N));
          for (int64_t i = 0; i < M * N; ++i) cbuf[size_t(i)] = beta_ * c[i];
          ep.residual = cbuf.data();
        }
        ep.ldr = N;
      } else if (cc == N && cr == 1) {  // a row vector: per-column bias
        if (beta_ == 1.f) {
          ep.col_bias = c;
        } else {
          cbuf.resize(size_t(N));
          for (int64_t j = 0; j < N; ++j) cbuf[size_t(j)] = beta_ * c[j];
          ep.col_bias = cbuf.data();
        }
      } else if (cc == 1 && cr == M) {  // a column: per-row bias
        cbuf.resize(size_t(M));
        for (int64_t i = 0; i < M; ++i) cbuf[size_t(i)] = beta_ * c[i];
        ep.row_bias = cbuf.data();
      } else {  // a scalar
        cbuf.assign(size_t(N), beta_ * c[0]);
        ep.col_bias = cbuf.data();
      }
    }
    Tensor& Y = ctx.output_uninit(0, DType::Float, {M, N});
    const bool use_packed = packed_.serves(B);
    size_t bytes = ws_bytes(M, N, K, use_packed);
    float* work = static_cast<float*>(ctx.workspace(bytes));
    kernels::GemmOperand opa, opb;
    opa.data = A.data<float>();
    opa.ld = A.dim(1);
    opa.trans = ta_;
    if (use_packed) {
      opb.packed = packed_.m.data.data();
    } else {
      opb.data = B.data<float>();
      opb.ld = B.dim(1);
      opb.trans = tb_;
    }
    kernels::sgemm(kernels::gemm_arch_best(), M, N, K, opa, opb, Y.data<float>(), N, ep, ctx.pool(), work);
  }

 private:
  static size_t ws_bytes(int64_t M, int64_t N, int64_t K, bool packed) {
    return size_t(kernels::sgemm_workspace_floats(kernels::gemm_arch_best(), M, N, K, false, packed) + 16) * sizeof(float);
  }
  float alpha_, beta_;
  bool ta_, tb_;
  PackedRhs packed_;
};

void register_matmul(OpRegistry& r) {
  add_versions(r, "MatMul", {1, 9, 13}, [](const Node&) -> std::unique_ptr<OpKernel> {
    return std::make_unique<MatMulKernel>(false, false, false, 1.f, kernels::Activation{});
  });
  r.add("basalt", "FusedMatMul", 1, INT_MAX, [](const Node& n) -> std::unique_ptr<OpKernel> {
    int64_t ta = n.attr_int("transA", 0), tb = n.attr_int("transB", 0);
    if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) n.fail(ErrorCode::InvalidModel, "transA and transB must be 0 or 1");
    return std::make_unique<MatMulKernel>(true, ta != 0, tb != 0, n.attr_float("alpha", 1.0f), parse_fused_activation(n));
  });
  add_versions(r, "Gemm", {1, 6, 7, 9, 11, 13}, [](const Node& n) -> std::unique_ptr<OpKernel> {
    return std::make_unique<GemmKernel>(n.attr_float("alpha", 1.0f), n.attr_float("beta", 1.0f), n.attr_int("transA", 0) != 0,
                                        n.attr_int("transB", 0) != 0);
  });
}

}  // namespace

void register_matmul_ops(OpRegistry& r) {
  register_matmul(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Gemm").infer_symbolic(shapes::gemm);
  r.def("MatMul").infer_symbolic(shapes::matmul);
  r.def("basalt", "FusedMatMul").infer_symbolic(shapes::matmul);
}

}  // namespace basalt::nnops
