// Differential tests of the fast fp32 GEMM and convolution kernels (src/kernels/gemm.hpp,
// conv.hpp): every ISA path this CPU supports against the portable reference twins, on odd sizes
// (vector and tile tails), K blocking, transposes, every epilogue and 1, 2 and 3 threads; then
// the ops built on them (Conv, basalt::FusedConv, MatMul, basalt::FusedMatMul, Gemm), with and
// without weights packed at load, against naive loops.
#include "kernel_test_util.hpp"
#include "op_tester.hpp"

#include "kernels/conv.hpp"
#include "ops/common.hpp"
#include "kernels/gemm.hpp"
#include "kernels/winograd.hpp"
#include "core/thread_pool.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace basalt;
using namespace basalt::test;
namespace k = basalt::kernels;

namespace {

std::vector<k::Activation> activations() {
  std::vector<k::Activation> v;
  const char* names[] = {"", "Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "LeakyRelu", "Tanh"};
  for (const char* n : names) {
    k::Activation a;
    std::vector<float> params;
    if (std::string(n) == "Clip") params = {-0.5f, 0.75f};
    if (std::string(n) == "LeakyRelu") params = {0.1f};
    EXPECT_TRUE(k::parse_activation(n, params, a, nullptr)) << n;
    v.push_back(a);
  }
  return v;
}

// |got - want| within a tolerance relative to the sum of |a*b| terms behind each element.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& absum,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    float tol = 2e-5f * (absum[i] + 1.f);
    ASSERT_NEAR(got[i], want[i], tol) << what << " at " << i;
  }
}

}  // namespace

TEST(KernelsGemm, EveryIsaMatchesReferenceOnOddShapes) {
  std::mt19937 rng(7);
  const int64_t sizes[] = {1, 2, 3, 7, 15, 17, 31, 33, 63, 65, 127};
  auto acts = activations();
  auto ps = pools();
  int cases = 0;
  for (int iter = 0; iter < 60; ++iter) {
    int64_t M = sizes[rng() % 11], N = sizes[rng() % 11], K = sizes[rng() % 11];
    if (iter % 10 == 0) K = 300 + int64_t(rng() % 300);  // crosses the K block (256 to 512)
    if (iter % 15 == 1) N = 130 + int64_t(rng() % 200);
    if (iter % 6 == 5) {  // large enough (~1-5M multiply-adds) that 2 and 3 threads split the tiles
      M = 100 + int64_t(rng() % 150);
      N = 70 + int64_t(rng() % 200);
      K = 40 + int64_t(rng() % 100);
    }
    bool ta = rng() % 2, tb = rng() % 2;
    auto A = rnd(M * K, rng), B = rnd(K * N, rng), rb = rnd(M, rng), cb = rnd(N, rng), res = rnd(M * N, rng);
    int64_t lda = ta ? M : K, ldb = tb ? K : N;
    k::Epilogue ep;
    ep.alpha = iter % 3 == 0 ? 0.5f : 1.f;
    if (iter % 2) ep.row_bias = rb.data();
    if (iter % 4 < 2) ep.col_bias = cb.data();
    if (iter % 5 == 0) {
      ep.residual = res.data();
      ep.ldr = N;
    }
    ep.act = acts[size_t(iter) % acts.size()];
    // reference and |a*b| sums
    std::vector<float> want(static_cast<size_t>(M * N)), absum(static_cast<size_t>(M * N));
    k::sgemm_reference(M, N, K, A.data(), lda, ta, B.data(), ldb, tb, want.data(), N, ep);
    {
      std::vector<float> aa(A.size()), bb(B.size());
      for (size_t i = 0; i < A.size(); ++i) aa[i] = std::fabs(A[i]);
      for (size_t i = 0; i < B.size(); ++i) bb[i] = std::fabs(B[i]);
      k::sgemm_reference(M, N, K, aa.data(), lda, ta, bb.data(), ldb, tb, absum.data(), N, k::Epilogue{});
    }
    for (k::Isa isa : isas()) {
      const k::GemmArch& g = k::gemm_arch(isa);
      for (auto& pool : ps) {
        for (int packed = 0; packed < 3; ++packed) {  // 0: both per call, 1: A packed, 2: B packed
          k::PackedMatrix pa, pb;
          k::GemmOperand oa{A.data(), lda, ta, nullptr}, ob{B.data(), ldb, tb, nullptr};
          if (packed == 1) {
            pa = k::pack_a_matrix(g, M, K, A.data(), lda, ta);
            oa.packed = pa.data.data();
          }
          if (packed == 2) {
            pb = k::pack_b_matrix(g, K, N, B.data(), ldb, tb);
            ob.packed = pb.data.data();
          }
          std::vector<float> ws(static_cast<size_t>(k::sgemm_workspace_floats(g, M, N, K, packed == 1, packed == 2)) + 16);
          std::vector<float> got(static_cast<size_t>(M * N), std::nanf(""));
          k::sgemm(g, M, N, K, oa, ob, got.data(), N, ep, pool.get(), ws.data());
          expect_close(got, want, absum,
                       std::string(k::isa_name(isa)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" +
                           std::to_string(K) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb) +
                           " threads=" + std::to_string(pool ? pool->threads() : 1) + " packed=" + std::to_string(packed));
          if (HasFatalFailure()) return;
          ++cases;
        }
      }
    }
  }
  EXPECT_GT(cases, 0);
}

// B with at most kGemvMaxCols columns goes through the arch's panel_gemv instead of the
// microkernel: row counts around the panel height, K around the 8- and 4-step vector loops,
// transposed and plain B with a row stride, every epilogue (one past the limit checks the switch).
TEST(KernelsGemm, FewColumnsMatchReference) {
  std::mt19937 rng(23);
  const int64_t Ms[] = {1, 5, 6, 7, 13, 100, 1001};
  const int64_t Ks[] = {1, 3, 4, 7, 8, 9, 17, 64, 1027};
  auto acts = activations();
  auto ps = pools();
  int cases = 0;
  for (int iter = 0; iter < 40; ++iter) {
    const int64_t M = Ms[rng() % 7], K = Ks[rng() % 9], N = 1 + int64_t(rng() % (k::kGemvMaxCols + 1));
    const bool tb = rng() % 2;
    const int64_t ldb = tb ? K + 3 : N + 2;  // row strides wider than the matrix
    auto A = rnd(M * K, rng), B = rnd((tb ? N : K) * ldb, rng), rb = rnd(M, rng), cb = rnd(N, rng),
         res = rnd(M * N, rng);
    k::Epilogue ep;
    if (iter % 2) ep.row_bias = rb.data();
    if (iter % 3 == 0) ep.col_bias = cb.data();
    if (iter % 4 == 1) {
      ep.residual = res.data();
      ep.ldr = N;
    }
    ep.act = acts[size_t(iter) % acts.size()];
    std::vector<float> want(size_t(M * N)), absum(size_t(M * N));
    k::sgemm_reference(M, N, K, A.data(), K, false, B.data(), ldb, tb, want.data(), N, ep);
    {
      std::vector<float> aa(A.size()), bb(B.size());
      for (size_t i = 0; i < A.size(); ++i) aa[i] = std::fabs(A[i]);
      for (size_t i = 0; i < B.size(); ++i) bb[i] = std::fabs(B[i]);
      k::sgemm_reference(M, N, K, aa.data(), K, false, bb.data(), ldb, tb, absum.data(), N, k::Epilogue{});
    }
    for (k::Isa isa : isas()) {
      const k::GemmArch& g = k::gemm_arch(isa);
      k::PackedMatrix pa = k::pack_a_matrix(g, M, K, A.data(), K, false);
      for (auto& pool : ps)
        for (int packed = 0; packed < 2; ++packed) {
          k::GemmOperand oa{A.data(), K, false, packed ? pa.data.data() : nullptr}, ob{B.data(), ldb, tb, nullptr};
          std::vector<float> ws(size_t(k::sgemm_workspace_floats(g, M, N, K, packed, false)) + 16);
          std::vector<float> got(size_t(M * N), std::nanf(""));
          k::sgemm(g, M, N, K, oa, ob, got.data(), N, ep, pool.get(), ws.data());
          expect_close(got, want, absum,
                       std::string(k::isa_name(isa)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                           " K=" + std::to_string(K) + " tb=" + std::to_string(tb) + " threads=" +
                           std::to_string(pool ? pool->threads() : 1) + " packed=" + std::to_string(packed));
          if (HasFatalFailure()) return;
          ++cases;
        }
    }
  }
  EXPECT_GT(cases, 0);
}

TEST(KernelsGemm, WritesOnlyItsTileAndHandlesKZero) {
  // C with a leading dimension wider than N: the columns past N (sentinels) must stay untouched.
  std::mt19937 rng(3);
  for (k::Isa isa : isas()) {
    const k::GemmArch& g = k::gemm_arch(isa);
    int64_t M = 13, N = 37, K = 19, ldc = 45;
    auto A = rnd(M * K, rng), B = rnd(K * N, rng);
    std::vector<float> C(static_cast<size_t>(M * ldc), 123.f), ws(static_cast<size_t>(k::sgemm_workspace_floats(g, M, N, K, false, false)) + 16);
    k::sgemm(g, M, N, K, {A.data(), K, false, nullptr}, {B.data(), N, false, nullptr}, C.data(), ldc, k::Epilogue{},
             nullptr, ws.data());
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[size_t(i * ldc + j)], 123.f) << k::isa_name(isa);
    // K == 0: the product is 0, so C = epilogue(0) = act(bias).
    std::vector<float> bias = {1.f, -2.f, 3.f};
    k::Epilogue ep;
    ep.row_bias = bias.data();
    k::parse_activation("Relu", {}, ep.act, nullptr);
    std::vector<float> c0(6, 9.f);
    k::sgemm(g, 3, 2, 0, {A.data(), 1, false, nullptr}, {B.data(), 2, false, nullptr}, c0.data(), 2, ep, nullptr, nullptr);
    EXPECT_EQ(c0, (std::vector<float>{1.f, 1.f, 0.f, 0.f, 3.f, 3.f})) << k::isa_name(isa);
  }
}

// The epilogue applied inside the microkernel (each fused activation, with biases and a residual):
// NaN from the product comes out as the unfused ops give it (NaN, or 1 from HardSigmoid), a
// residual and C with leading dimensions wider than N are indexed correctly, and nothing past
// column N is written.
TEST(KernelsGemm, FusedEpilogueKeepsNaNAndStrides) {
  std::mt19937 rng(11);
  const char* names[] = {"", "Relu", "Clip", "HardSigmoid", "HardSwish", "LeakyRelu"};
  for (k::Isa isa : isas()) {
    const k::GemmArch& g = k::gemm_arch(isa);
    for (const char* name : names) {
      for (int64_t K : {5, 200}) {
        int64_t M = 14, N = 77, ldc = 90, ldr = 85;
        auto A = rnd(M * K, rng), B = rnd(K * N, rng), rb = rnd(M, rng), cb = rnd(N, rng), res = rnd(M * ldr, rng);
        A[size_t(3 * K + 1)] = std::nanf("");  // row 3 of the product is NaN
        k::Epilogue ep;
        ep.alpha = 0.75f;
        ep.row_bias = rb.data();
        ep.col_bias = cb.data();
        ep.residual = res.data();
        ep.ldr = ldr;
        std::vector<float> params;
        if (std::string(name) == "Clip") params = {-0.25f, 0.5f};
        if (std::string(name) == "HardSigmoid") params = {0.3f, 0.4f};
        if (std::string(name) == "LeakyRelu") params = {0.2f};
        ASSERT_TRUE(k::parse_activation(name, params, ep.act, nullptr));
        std::vector<float> want(static_cast<size_t>(M * N));
        k::sgemm_reference(M, N, K, A.data(), K, false, B.data(), N, false, want.data(), N, ep);
        std::vector<float> C(static_cast<size_t>(M * ldc), 123.f);
        std::vector<float> ws(static_cast<size_t>(k::sgemm_workspace_floats(g, M, N, K, false, false)) + 16);
        k::sgemm(g, M, N, K, {A.data(), K, false, nullptr}, {B.data(), N, false, nullptr}, C.data(), ldc, ep, nullptr,
                 ws.data());
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t j = 0; j < N; ++j) {
            float got = C[size_t(i * ldc + j)], w = want[size_t(i * N + j)];
            ASSERT_EQ(std::isnan(got), std::isnan(w)) << k::isa_name(isa) << " act '" << name << "' at " << i << "," << j;
            if (!std::isnan(w)) {
              ASSERT_NEAR(got, w, 1e-4f * (float(K) + 3.f)) << k::isa_name(isa) << " act '" << name << "'";
            }
          }
          for (int64_t j = N; j < ldc; ++j) ASSERT_EQ(C[size_t(i * ldc + j)], 123.f) << k::isa_name(isa);
        }
        const bool nan_out = std::string(name) != "HardSigmoid";
        for (int64_t j = 0; j < N; ++j)
          ASSERT_EQ(std::isnan(C[size_t(3 * ldc + j)]), nan_out) << k::isa_name(isa) << " " << name;
      }
    }
  }
}

// B read in place (GemmOperand::in_place; AVX-512 reads a plain B, the other ISAs pack it): odd
// column counts whose last vector ends inside the row (a masked load), a leading dimension wider
// than N, B at the very end of its allocation (a full-width load past N would read past it),
// K blocking, and 1, 2 and 3 threads.
TEST(KernelsGemm, PlainBInPlaceMatchesReference) {
  std::mt19937 rng(5);
  auto ps = pools();
  for (k::Isa isa : isas()) {
    const k::GemmArch& g = k::gemm_arch(isa);
    for (int iter = 0; iter < 12; ++iter) {
      int64_t M = 1 + int64_t(rng() % 40), N = 1 + int64_t(rng() % 150), K = 1 + int64_t(rng() % (iter % 3 ? 60 : 400));
      int64_t ldb = N + int64_t(rng() % 3) * 7;
      auto A = rnd(M * K, rng), bias = rnd(M, rng);
      // B's last row ends exactly at the end of the vector
      auto B = rnd((K - 1) * ldb + N, rng);
      k::Epilogue ep;
      ep.row_bias = bias.data();
      k::parse_activation("Relu", {}, ep.act, nullptr);
      std::vector<float> want(static_cast<size_t>(M * N)), absum(static_cast<size_t>(M * N));
      k::sgemm_reference(M, N, K, A.data(), K, false, B.data(), ldb, false, want.data(), N, ep);
      std::vector<float> aa(A.size()), bb(B.size());
      for (size_t i = 0; i < A.size(); ++i) aa[i] = std::fabs(A[i]);
      for (size_t i = 0; i < B.size(); ++i) bb[i] = std::fabs(B[i]);
      k::sgemm_reference(M, N, K, aa.data(), K, false, bb.data(), ldb, false, absum.data(), N, k::Epilogue{});
      k::PackedMatrix pa = k::pack_a_matrix(g, M, K, A.data(), K, false);
      for (auto& pool : ps) {
        k::GemmOperand oa, ob;
        oa.packed = pa.data.data();
        ob.data = B.data();
        ob.ld = ldb;
        ob.in_place = true;
        std::vector<float> ws(static_cast<size_t>(k::sgemm_workspace_floats(g, M, N, K, true, false)) + 16);
        std::vector<float> got(static_cast<size_t>(M * N), std::nanf(""));
        k::sgemm(g, M, N, K, oa, ob, got.data(), N, ep, pool.get(), ws.data());
        expect_close(got, want, absum,
                     std::string(k::isa_name(isa)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                         " K=" + std::to_string(K) + " ldb=" + std::to_string(ldb));
        if (HasFatalFailure()) return;
      }
    }
  }
}

// A plain, not transposed, with a row stride past K (a sub-matrix): the AVX-512 kernel reads it in
// place (GemmArch::ukernel_plain_a), the others pack it. The last row of A ends exactly at the end
// of the vector, so a read past a row's K columns of the last rows would be caught by ASan.
TEST(KernelsGemm, PlainAWithRowStrideMatchesReference) {
  std::mt19937 rng(9);
  auto ps = pools();
  for (k::Isa isa : isas()) {
    const k::GemmArch& g = k::gemm_arch(isa);
    for (int iter = 0; iter < 12; ++iter) {
      int64_t M = 1 + int64_t(rng() % 40), N = 1 + int64_t(rng() % 150), K = 1 + int64_t(rng() % (iter % 3 ? 60 : 400));
      int64_t lda = K + int64_t(rng() % 3) * 5;
      auto A = rnd((M - 1) * lda + K, rng), B = rnd(K * N, rng), bias = rnd(N, rng), res = rnd(M * N, rng);
      k::Epilogue ep;
      ep.col_bias = bias.data();
      ep.residual = iter % 2 ? res.data() : nullptr;
      ep.ldr = N;
      k::parse_activation(iter % 4 == 1 ? "Tanh" : "Relu", {}, ep.act, nullptr);  // Tanh: the unfused epilogue
      std::vector<float> want(static_cast<size_t>(M * N)), absum(static_cast<size_t>(M * N));
      k::sgemm_reference(M, N, K, A.data(), lda, false, B.data(), N, false, want.data(), N, ep);
      std::vector<float> aa(A.size()), bb(B.size());
      for (size_t i = 0; i < A.size(); ++i) aa[i] = std::fabs(A[i]);
      for (size_t i = 0; i < B.size(); ++i) bb[i] = std::fabs(B[i]);
      k::sgemm_reference(M, N, K, aa.data(), lda, false, bb.data(), N, false, absum.data(), N, k::Epilogue{});
      k::PackedMatrix pb = k::pack_b_matrix(g, K, N, B.data(), N, false);
      for (int b_packed = 0; b_packed < 2; ++b_packed)
        for (auto& pool : ps) {
          k::GemmOperand oa, ob;
          oa.data = A.data();
          oa.ld = lda;
          ob.data = B.data();
          ob.ld = N;
          if (b_packed) ob.packed = pb.data.data();
          std::vector<float> ws(static_cast<size_t>(k::sgemm_workspace_floats(g, M, N, K, false, b_packed)) + 16);
          std::vector<float> got(static_cast<size_t>(M * N), std::nanf(""));
          k::sgemm(g, M, N, K, oa, ob, got.data(), N, ep, pool.get(), ws.data());
          expect_close(got, want, absum,
                       std::string(k::isa_name(isa)) + " M=" + std::to_string(M) + " N=" + std::to_string(N) +
                           " K=" + std::to_string(K) + " lda=" + std::to_string(lda) + " threads=" +
                           std::to_string(pool ? pool->threads() : 1) + " b_packed=" + std::to_string(b_packed));
          if (HasFatalFailure()) return;
        }
    }
  }
}

TEST(KernelsGemm, ActivationParsing) {
  k::Activation a;
  std::string err;
  EXPECT_FALSE(k::parse_activation("Gelu", {}, a, &err));
  EXPECT_NE(err.find("Gelu"), std::string::npos);
  EXPECT_FALSE(k::parse_activation("Relu", {1.f}, a, &err));
  ASSERT_TRUE(k::parse_activation("Clip", {0.f, 6.f}, a, &err));
  EXPECT_EQ(k::apply_activation(a, 7.f), 6.f);
  EXPECT_EQ(k::apply_activation(a, -1.f), 0.f);
  ASSERT_TRUE(k::parse_activation("HardSigmoid", {}, a, &err));  // ONNX defaults 0.2, 0.5
  EXPECT_FLOAT_EQ(k::apply_activation(a, 1.f), 0.7f);
  ASSERT_TRUE(k::parse_activation("Relu", {}, a, &err));
  EXPECT_TRUE(std::isnan(k::apply_activation(a, std::nanf(""))));
}

namespace {

struct ConvCase {
  int64_t N, C, H, W, M, G, KH, KW, sh, sw, dh, dw, pt, pl, pb, pr;
};

k::Conv2dShape conv_shape(const ConvCase& c) {
  k::Conv2dShape s;
  s.N = c.N, s.C = c.C, s.H = c.H, s.W = c.W, s.M = c.M, s.G = c.G, s.KH = c.KH, s.KW = c.KW;
  s.sh = c.sh, s.sw = c.sw, s.dh = c.dh, s.dw = c.dw, s.pt = c.pt, s.pl = c.pl;
  s.OH = (c.H + c.pt + c.pb - (c.KH - 1) * c.dh - 1) / c.sh + 1;
  s.OW = (c.W + c.pl + c.pr - (c.KW - 1) * c.dw - 1) / c.sw + 1;
  return s;
}

}  // namespace

namespace {
int check_conv(const k::Conv2dShape& s, std::mt19937& rng, const k::Activation& act, bool with_bias, bool with_resid,
               const std::vector<std::unique_ptr<ThreadPool>>& ps, const std::string& what);  // below
}  // namespace

TEST(KernelsConv, EveryIsaMatchesReference) {
  std::vector<ConvCase> cases = {
      {1, 3, 9, 11, 5, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},       // 3x3 pad 1
      {2, 7, 10, 13, 17, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},     // 1x1 direct, N=2
      {1, 3, 23, 21, 8, 1, 7, 7, 2, 2, 1, 1, 3, 3, 3, 3},      // 7x7 stride 2 (stem)
      {1, 8, 12, 9, 12, 4, 3, 3, 1, 2, 2, 1, 2, 1, 0, 2},      // groups, mixed strides/dilations, asymmetric pads
      {1, 16, 15, 17, 16, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   // depthwise 3x3
      {2, 6, 14, 11, 12, 6, 5, 5, 2, 2, 1, 1, 2, 2, 2, 2},     // depthwise x2 multiplier, stride 2
      {1, 5, 9, 9, 7, 1, 3, 3, 1, 1, 3, 2, 0, 1, 2, 0},        // dilation
      {1, 33, 8, 70, 65, 1, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0},     // non-square kernel, N tails
      {1, 64, 6, 6, 70, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},      // K = 576 crosses the K block
      {1, 4, 1, 50, 6, 1, 1, 5, 1, 3, 1, 1, 0, 2, 0, 2},       // 1-D as H = 1, stride 3
      {1, 9, 40, 40, 4, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},      // strided 1x1 (not pointwise)
      {1, 5, 9, 45, 5, 5, 3, 3, 2, 2, 2, 2, 2, 2, 1, 2},       // depthwise, stride 2 + dilation 2, 3 column blocks
      {1, 4, 8, 37, 4, 4, 3, 3, 1, 3, 1, 1, 1, 1, 1, 1},       // depthwise, stride 3 (generic loops)
      {1, 3, 5, 33, 3, 3, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},       // depthwise 7x7, padding wider than the row tail
      {1, 6, 7, 50, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},       // depthwise 3x3, unmasked interior blocks + tail
      {1, 4, 5, 36, 4, 4, 3, 3, 1, 1, 1, 1, 0, 0, 0, 0},       // depthwise 3x3 no padding: first blocks unmasked
      {1, 4, 9, 70, 4, 4, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},       // depthwise 3x3 stride 2, unmasked interior blocks
      {1, 3, 8, 40, 3, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},       // depthwise 5x5 stride 1
      {1, 4, 6, 41, 4, 4, 5, 3, 1, 1, 1, 1, 2, 1, 2, 1},       // depthwise 5x3 (kernel height at run time)
      {2, 3, 6, 40, 3, 3, 3, 5, 2, 2, 1, 1, 1, 2, 1, 2},       // depthwise 3x5 stride 2, N=2
      {1, 2, 7, 20, 2, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},       // depthwise 5x5, odd output height (row pairs)
      {1, 3, 6, 35, 3, 3, 3, 3, 1, 1, 1, 1, 0, 1, 2, 0},       // depthwise 3x3, asymmetric pads
      {1, 2, 1, 18, 2, 2, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},       // depthwise 3x3, one input row
      {1, 4, 9, 40, 4, 4, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},       // depthwise 3x3 stride 1 dilation 2
      {1, 5, 14, 14, 5, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},      // depthwise 3x3 at 14x14 (8 + 6 columns)
      {1, 5, 14, 14, 5, 5, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},      // depthwise 3x3 stride 2 to 7x7 (one partial block)
      {1, 3, 7, 7, 3, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},        // depthwise 5x5 on a 7x7 plane
      {1, 4, 12, 37, 4, 4, 5, 5, 2, 1, 1, 1, 2, 2, 2, 2},      // depthwise 5x5 stride (2, 1): 6 rows, 3 per pass
      {1, 3, 13, 20, 3, 3, 3, 3, 2, 1, 1, 1, 1, 1, 1, 1},      // depthwise 3x3 stride (2, 1): 7 rows, 4 + 3
      {1, 3, 10, 33, 3, 3, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},      // depthwise 5x5, 10 rows: 4 + 4 + 2 (rows past the end)
      {1, 2, 3, 80, 2, 2, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},       // depthwise 5x5, 3 rows (one pass of 3), 5 full blocks
      {1, 5, 9, 16, 5, 5, 3, 3, 1, 1, 1, 1, 0, 1, 2, 1},       // depthwise 3x3, 4 + 4 + 3 rows, asymmetric pads
      {1, 64, 20, 20, 7, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     // 400 outputs in two column chunks (K = 576)
      {1, 16, 10, 15, 9, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},     // pointwise, 150 outputs: 3 panels, the last partial
      {1, 6, 31, 29, 10, 1, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},     // stride 2 im2col over several panels, padding both sides
      {1, 5, 17, 23, 6, 1, 5, 5, 3, 3, 1, 1, 2, 2, 1, 1},      // stride 3 im2col, taps left of and past the row
      {2, 64, 30, 30, 5, 1, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},     // many column chunks: whole chunks per thread, own buffers
      {2, 256, 25, 25, 7, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},    // pointwise, whole chunks per thread
      {1, 1027, 1, 1, 100, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},   // pointwise on a 1x1 image (classifier): GEMV route
      {2, 45, 2, 2, 70, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},      // pointwise on 2x2 (4 columns), N=2: GEMV route
      {1, 96, 1, 3, 40, 2, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0},      // grouped pointwise, 3 columns
      // kxk with at most kGemvMaxCols outputs: plain im2col columns, GEMV route
      {1, 1, 1, 576, 257, 1, 1, 256, 1, 128, 1, 1, 0, 0, 0, 0},  // 1-D, kernel 256 stride 128: 3 outputs (Silero's STFT)
      {1, 129, 1, 4, 128, 1, 1, 3, 1, 1, 1, 1, 0, 1, 0, 1},    // 1-D kernel 3, padding both ends: 4 outputs
      {2, 64, 1, 7, 37, 1, 1, 3, 1, 2, 1, 1, 0, 1, 0, 1},      // 1-D stride 2, N=2: 4 outputs each
      {2, 7, 5, 5, 11, 1, 3, 3, 2, 2, 2, 2, 1, 1, 0, 0},       // 2-D stride 2 dilation 2: 1 output
      {1, 12, 4, 4, 9, 3, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},       // grouped 3x3 stride 2: 2x2 outputs
      {1, 1, 3, 3, 5, 1, 1, 1, 2, 2, 1, 1, 0, 0, 0, 0},        // K = 1, 2x2 outputs: too small a buffer on narrow ISAs
  };
  std::mt19937 rng(11);
  auto acts = activations();
  auto ps = pools();
  int idx = 0;
  for (const ConvCase& c : cases) {
    check_conv(conv_shape(c), rng, acts[size_t(idx) % acts.size()], idx % 2, idx % 3 == 0, ps, "case " + std::to_string(idx));
    if (HasFatalFailure()) return;
    ++idx;
  }
}

namespace {

// conv2d on shape `s` with fresh random data, every ISA, every pool, weights packed at load and
// per call, against conv2d_reference. The reference applies act without its post affine; the
// test applies v * post_mul + post_add itself, and the error scale sum |w*x| is multiplied by
// max(1, |post_mul|) (the factor the affine puts on the conv's rounding error). Returns the
// number of runs compared.
int check_conv(const k::Conv2dShape& s, std::mt19937& rng, const k::Activation& act, bool with_bias, bool with_resid,
               const std::vector<std::unique_ptr<ThreadPool>>& ps, const std::string& what) {
  auto x = rnd(s.N * s.C * s.H * s.W, rng), w = rnd(s.M * s.Cg() * s.KH * s.KW, rng), b = rnd(s.M, rng);
  const int64_t ysz = s.N * s.M * s.OH * s.OW;
  auto res = rnd(ysz, rng);
  const float* bias = with_bias ? b.data() : nullptr;
  const float* resid = with_resid ? res.data() : nullptr;
  k::Activation base = act;
  base.post = false;
  base.post_mul = 1.f;
  base.post_add = -0.f;
  std::vector<float> want(static_cast<size_t>(ysz)), absum(static_cast<size_t>(ysz));
  k::conv2d_reference(s, x.data(), w.data(), bias, resid, base, want.data());
  {
    std::vector<float> xa(x.size()), wa(w.size());
    for (size_t i = 0; i < x.size(); ++i) xa[i] = std::fabs(x[i]);
    for (size_t i = 0; i < w.size(); ++i) wa[i] = std::fabs(w[i]);
    k::conv2d_reference(s, xa.data(), wa.data(), nullptr, nullptr, k::Activation{}, absum.data());
  }
  if (act.post) {
    const float scale = std::max(1.f, std::fabs(act.post_mul));
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] = want[i] * act.post_mul + act.post_add;
      absum[i] *= scale;
    }
  }
  int runs = 0;
  for (k::Isa isa : isas()) {
    const k::GemmArch& g = k::gemm_arch(isa);
    k::PackedConvWeights pw = k::pack_conv_weights(g, s, w.data());
    for (auto& pool : ps)
      for (int packed = 0; packed < 2; ++packed) {
        const int threads = pool ? pool->threads() : 1;
        std::vector<float> ws(static_cast<size_t>(k::conv2d_workspace_floats(g, s, packed, threads)) + 16);
        std::vector<float> got(static_cast<size_t>(ysz), std::nanf(""));
        k::conv2d(g, s, x.data(), w.data(), packed ? &pw : nullptr, bias, resid, act, got.data(), pool.get(), ws.data());
        expect_close(got, want, absum,
                     what + " " + k::isa_name(isa) + " threads=" + std::to_string(threads) + " packed=" + std::to_string(packed));
        if (::testing::Test::HasFatalFailure()) return runs;
        ++runs;
      }
  }
  return runs;
}

std::string conv_desc(const k::Conv2dShape& s) {
  char buf[256];
  std::snprintf(buf, sizeof buf, "N%lld C%lld %lldx%lld M%lld G%lld k%lldx%lld s%lld,%lld d%lld,%lld p%lld,%lld -> %lldx%lld",
                (long long)s.N, (long long)s.C, (long long)s.H, (long long)s.W, (long long)s.M, (long long)s.G,
                (long long)s.KH, (long long)s.KW, (long long)s.sh, (long long)s.sw, (long long)s.dh, (long long)s.dw,
                (long long)s.pt, (long long)s.pl, (long long)s.OH, (long long)s.OW);
  return buf;
}

// A random conv shape of kind `kind` (0 dense, 1 grouped, 2 depthwise with channel multiplier
// 1-2, 3 1x1): N 1-2, channels 1-40 (2-24 depthwise) (dense convs often with C >= 16 and off the vector width),
// kernels 1, 2, 3, 5, 7 (not square), strides 1-3, dilations 1-2, pads on each side from 0 to
// the dilated kernel's reach, images from 1 pixel up with now and then a wide row (vector tails),
// at least one output pixel, and at most ~3M multiply-adds (the reference runs in double).
k::Conv2dShape random_conv_shape(int kind, std::mt19937& rng) {
  auto uni = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint32_t(hi - lo + 1)); };
  const int64_t ks[] = {1, 2, 3, 5, 7};
  for (;;) {
    ConvCase c{};
    c.N = uni(1, 2);
    switch (kind) {
      case 0:
        c.G = 1;
        c.C = rng() % 2 ? uni(16, 40) : uni(1, 15);
        c.M = uni(1, 40);
        break;
      case 1: {
        c.G = uni(2, 4);
        c.C = c.G * uni(2, 8);
        c.M = c.G * uni(1, 10);
        break;
      }
      case 2:
        c.C = uni(2, 24);  // (one channel would be a plain conv: depthwise needs G > 1)
        c.G = c.C;
        c.M = c.C * uni(1, 2);
        break;
      default:
        c.G = rng() % 4 == 0 ? 2 : 1;
        c.C = c.G * uni(1, 40);
        c.M = c.G * uni(1, 40);
        break;
    }
    if (kind == 3) {
      c.KH = c.KW = 1;
      c.sh = c.sw = rng() % 3 == 0 ? uni(2, 3) : 1;
      c.dh = c.dw = 1;
    } else {
      c.KH = ks[rng() % 5];
      c.KW = rng() % 2 ? c.KH : ks[rng() % 5];
      c.sh = uni(1, 3);
      c.sw = rng() % 2 ? c.sh : uni(1, 3);
      c.dh = uni(1, 2);
      c.dw = uni(1, 2);
    }
    c.H = uni(1, 24);
    c.W = rng() % 5 == 0 ? uni(30, 80) : uni(1, 24);
    const int64_t rh = (c.KH - 1) * c.dh, rw = (c.KW - 1) * c.dw;
    if (kind == 3 && rng() % 2) {
      c.pt = c.pl = c.pb = c.pr = 0;  // pointwise (no im2col) unless strided
    } else {
      c.pt = uni(0, rh), c.pb = uni(0, rh), c.pl = uni(0, rw), c.pr = uni(0, rw);
    }
    if (c.H + c.pt + c.pb - rh < 1 || c.W + c.pl + c.pr - rw < 1) continue;
    const k::Conv2dShape s = conv_shape(c);
    if (s.N * s.M * s.OH * s.OW * s.Kg() > 3000000) continue;
    return s;
  }
}

}  // namespace

// Random shapes (fixed seed), a quarter each dense, grouped, depthwise and 1x1: every ISA,
// 1, 2 and 3 threads, packed and per-call weights, random bias / residual / activation, a third
// with a post affine.
TEST(KernelsConv, EveryIsaMatchesReferenceOnRandomShapes) {
  std::mt19937 rng(4242);
  auto acts = activations();
  auto ps = pools();
  int runs = 0;
  const int n_cases = 60;
  for (int i = 0; i < n_cases; ++i) {
    const k::Conv2dShape s = random_conv_shape(i % 4, rng);
    if (i % 4 == 2) {
      ASSERT_TRUE(s.is_depthwise()) << conv_desc(s);
    }
    k::Activation act = acts[rng() % acts.size()];
    if (rng() % 3 == 0) {
      std::uniform_real_distribution<float> d(-1.5f, 1.5f);
      act.post = true;
      act.post_mul = d(rng);
      act.post_add = d(rng);
    }
    const bool bias = rng() % 2, resid = rng() % 3 == 0;
    runs += check_conv(s, rng, act, bias, resid, ps, "random case " + std::to_string(i) + " " + conv_desc(s));
    if (HasFatalFailure()) return;
  }
  EXPECT_EQ(runs, n_cases * int(isas().size()) * int(ps.size()) * 2);
}

// Depthwise convs big enough that conv2d_depthwise's parallel_for (grain 32768 / (OH*OW*KH*KW)
// planes, src/kernels/conv.cpp) makes several chunks, so at 2 and 3 threads planes really go to
// different threads (the small cases above run as one chunk at any thread count): 3x3, 5x5 and
// 7x7, channel multiplier 2, strides, dilation, N = 2, plane counts that leave a partial chunk,
// with bias, residual, activations and a post affine.
TEST(KernelsConv, DepthwiseSplitsAcrossThreads) {
  const std::vector<ConvCase> cases = {
      {1, 96, 16, 16, 96, 96, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},   // 96 planes, grain 14
      {2, 48, 12, 19, 48, 48, 5, 5, 1, 1, 1, 1, 2, 2, 2, 2},   // N = 2: 96 planes, grain 5
      {1, 40, 31, 29, 80, 40, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},   // multiplier 2, stride 2: 80 planes, grain 15
      {1, 64, 20, 37, 64, 64, 3, 3, 1, 1, 2, 2, 2, 2, 2, 2},   // dilation 2: 64 planes, grain 4
      {2, 33, 9, 45, 33, 33, 3, 5, 1, 2, 1, 1, 1, 2, 1, 2},    // 3x5, stride (1, 2): 66 planes, grain 10
      {1, 50, 14, 14, 50, 50, 7, 7, 1, 1, 1, 1, 3, 3, 3, 3},   // 7x7: 50 planes, grain 3
      {1, 72, 18, 18, 72, 72, 3, 3, 1, 1, 1, 1, 0, 1, 2, 0},   // asymmetric pads: 72 planes, grain 10
  };
  std::mt19937 rng(99);
  auto acts = activations();
  auto ps = pools();
  int runs = 0, idx = 0;
  for (const ConvCase& c : cases) {
    const k::Conv2dShape s = conv_shape(c);
    ASSERT_TRUE(s.is_depthwise());
    // the kernel's chunking: at least 3 chunks, so 2 and 3 threads each get planes
    const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, s.OH * s.OW * s.KH * s.KW));
    EXPECT_GE(s.N * s.M, 3 * grain) << "case " << idx;
    k::Activation act = acts[size_t(idx + 1) % acts.size()];
    if (idx % 2) {
      act.post = true;
      act.post_mul = idx % 4 == 1 ? -0.75f : 1.25f;
      act.post_add = 0.5f;
    }
    runs += check_conv(s, rng, act, idx % 3 != 2, idx % 2 == 0, ps, "depthwise case " + std::to_string(idx) + " " + conv_desc(s));
    if (HasFatalFailure()) return;
    ++idx;
  }
  EXPECT_EQ(runs, int(cases.size()) * int(isas().size()) * int(ps.size()) * 2);
}

// ---------------------------------------------------------------- ops

namespace {

// Runs a node like run_op, but first calls prepare() with the inputs flagged constant (so the
// weight-packing paths run) and gives it a pool of `threads` threads.
// packed_bytes: when given, receives the kernel's packed_bytes() after prepare.
Tensor run_prepared(const std::string& op, int opset, std::vector<Value> inputs, std::vector<Attribute> attrs,
                    std::vector<bool> constant, int threads, const std::string& domain = "",
                    size_t* packed_bytes = nullptr) {
  Node n = test_node(domain, op, opset, inputs, std::move(attrs), 1);
  const KernelFactory* f = OpRegistry::instance().find(domain, op, opset);
  if (!f) throw Error(ErrorCode::Unsupported, "no kernel for " + op);
  n.kernel = (*f)(n);
  std::vector<const Tensor*> consts(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size() && i < constant.size(); ++i)
    if (constant[i] && !inputs[i].is_none()) consts[i] = &inputs[i].tensor;
  PrepareContext pc{n, consts, threads};
  n.kernel->prepare(pc);
  if (packed_bytes) *packed_bytes = n.kernel->packed_bytes();
  std::vector<const Value*> ins;
  for (auto& v : inputs) ins.push_back(v.is_none() ? nullptr : &v);
  std::vector<Value> outs(1);
  ThreadPool pool(threads, 0);
  RunContext rc;
  rc.threads = threads;
  rc.pool = &pool;
  KernelContext ctx(n, ins, outs, {}, rc);
  n.kernel->compute(ctx);
  return outs[0].tensor;
}

Tensor rand_tensor(Shape s, std::mt19937& rng) {
  Tensor t(DType::Float, s);
  auto v = rnd(t.numel(), rng);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

void expect_tensors_close(const Tensor& a, const Tensor& b, float tol, const std::string& what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << what << " at " << i;
}

// Naive batched matmul with transposes on the last two dims and numpy broadcasting (ranks >= 2).
Tensor naive_matmul(const Tensor& a, const Tensor& b, bool ta, bool tb, float alpha, const float* bias, const k::Activation& act) {
  int ra = a.rank(), rb = b.rank();
  int64_t M = ta ? a.dim(-1) : a.dim(-2), K = ta ? a.dim(-2) : a.dim(-1), N = tb ? b.dim(-2) : b.dim(-1);
  Shape ab(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  size_t r = std::max(ab.size(), bb.size());
  while (ab.size() < r) ab.insert(ab.begin(), 1);
  while (bb.size() < r) bb.insert(bb.begin(), 1);
  Shape ob(r);
  for (size_t i = 0; i < r; ++i) ob[i] = std::max(ab[i], bb[i]);
  Shape ys = ob;
  ys.push_back(M);
  ys.push_back(N);
  Tensor y(DType::Float, ys);
  int64_t nb = shape_numel(ob);
  (void)ra;
  (void)rb;
  for (int64_t t = 0; t < nb; ++t) {
    int64_t rem = t, ia = 0, ib = 0, sa = 1, sb = 1;
    for (size_t d = r; d-- > 0;) {
      int64_t idx = rem % ob[d];
      rem /= ob[d];
      ia += (ab[d] == 1 ? 0 : idx) * sa;
      ib += (bb[d] == 1 ? 0 : idx) * sb;
      sa *= ab[d];
      sb *= bb[d];
    }
    const float* pa = a.data<float>() + ia * M * K;
    const float* pb = b.data<float>() + ib * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t kk = 0; kk < K; ++kk)
          s += double(ta ? pa[kk * M + i] : pa[i * K + kk]) * double(tb ? pb[j * K + kk] : pb[kk * N + j]);
        float v = float(alpha * s) + (bias ? bias[j] : 0.f);
        y.data<float>()[(t * M + i) * N + j] = k::apply_activation(act, v);
      }
  }
  return y;
}

}  // namespace

TEST(KernelsOps, MatMulPackedAndBatchedMatchNaive) {
  std::mt19937 rng(5);
  struct Case {
    Shape a, b;
  };
  std::vector<Case> cases = {
      {{2, 17, 33}, {33, 65}},         // folded rows, constant B packed
      {{3, 1, 7, 31}, {2, 31, 15}},    // broadcast batch
      {{12, 5, 16}, {12, 16, 9}},      // many small items (parallel over the batch)
      {{1, 1}, {1, 70}},
  };
  for (int threads : {1, 2, 3})
    for (auto& c : cases)
      for (bool cb : {false, true}) {
        Tensor a = rand_tensor(c.a, rng), b = rand_tensor(c.b, rng);
        Tensor y = run_prepared("MatMul", 13, {a, b}, {}, {false, cb}, threads);
        expect_tensors_close(y, naive_matmul(a, b, false, false, 1.f, nullptr, k::Activation{}), 1e-4f,
                             "MatMul " + shape_str(c.a) + "x" + shape_str(c.b) + " threads=" + std::to_string(threads));
      }
  // 1-D operands
  Tensor v = rand_tensor({7}, rng), m = rand_tensor({7, 5}, rng), m2 = rand_tensor({3, 4, 7}, rng);
  Tensor y1 = run_prepared("MatMul", 13, {v, m}, {}, {false, true}, 2);
  ASSERT_EQ(y1.shape(), (Shape{5}));
  expect_tensors_close(y1.reshaped({1, 5}), naive_matmul(v.reshaped({1, 7}), m, false, false, 1.f, nullptr, k::Activation{}), 1e-4f, "1-D A");
  Tensor y2 = run_prepared("MatMul", 13, {m2, v}, {}, {false, true}, 2);
  ASSERT_EQ(y2.shape(), (Shape{3, 4}));
  expect_tensors_close(y2.reshaped({3, 4, 1}), naive_matmul(m2, v.reshaped({7, 1}), false, false, 1.f, nullptr, k::Activation{}), 1e-4f,
                       "1-D B");
}

TEST(KernelsOps, FusedMatMulMatchesNaive) {
  std::mt19937 rng(9);
  auto acts = activations();
  const char* names[] = {"", "Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "LeakyRelu", "Tanh"};
  int i = 0;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (bool cb : {false, true}) {
        int64_t M = 19, K = 23, N = 35;
        Tensor a = rand_tensor(ta ? Shape{2, K, M} : Shape{2, M, K}, rng);
        Tensor b = rand_tensor(tb ? Shape{N, K} : Shape{K, N}, rng);
        Tensor bias = rand_tensor({N}, rng);
        size_t ai = size_t(i++) % acts.size();
        std::vector<float> params;
        if (ai == 2) params = {-0.5f, 0.75f};
        if (ai == 6) params = {0.1f};
        Tensor y = run_prepared("FusedMatMul", 1, {a, b, bias},
                                {attr("transA", ta), attr("transB", tb), attr("alpha", 0.75f), attr("activation", names[ai]),
                                 attr("activation_params", Floats(params))},
                                {false, cb, true}, int(1 + ai % 3), "basalt");  // 1, 2 and 3 threads in turn
        expect_tensors_close(y, naive_matmul(a, b, ta, tb, 0.75f, bias.data<float>(), acts[ai]), 1e-4f,
                             std::string("FusedMatMul ") + names[ai] + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      }
  EXPECT_THROW(run_op("FusedMatMul", 1, {rand_tensor({2, 2}, rng), rand_tensor({2, 2}, rng)}, {attr("activation", "Swish")}, 1,
                      "basalt"),
               Error);
}

TEST(KernelsOps, GemmBroadcastCAndPackedB) {
  std::mt19937 rng(13);
  int64_t M = 9, K = 37, N = 70;
  std::vector<Shape> cshapes = {{}, {1}, {N}, {1, N}, {M, 1}, {M, N}};
  int run = 0;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb)
      for (auto& cs : cshapes) {
        Tensor a = rand_tensor(ta ? Shape{K, M} : Shape{M, K}, rng), b = rand_tensor(tb ? Shape{N, K} : Shape{K, N}, rng);
        Tensor c = rand_tensor(cs, rng);
        float alpha = 1.5f, beta = cs.size() == 2 && cs[0] == M && cs[1] == N ? 1.f : -0.5f;
        Tensor y = run_prepared("Gemm", 13, {a, b, c},
                                {attr("transA", ta), attr("transB", tb), attr("alpha", alpha), attr("beta", beta)},
                                {false, true, true}, 1 + run++ % 3);  // 1, 2 and 3 threads in turn
        Tensor want = naive_matmul(a, b, ta, tb, alpha, nullptr, k::Activation{});
        auto st = broadcast_strides(cs, {M, N});
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) want.data<float>()[i * N + j] += beta * c.data<float>()[i * st[0] + j * st[1]];
        expect_tensors_close(y, want, 1e-4f, "Gemm C=" + shape_str(cs) + " ta=" + std::to_string(ta) + " tb=" + std::to_string(tb));
      }
  EXPECT_THROW(run_op("Gemm", 13, {rand_tensor({3, 4}, rng), rand_tensor({4, 5}, rng), rand_tensor({2, 5}, rng)}), Error);
}

TEST(KernelsOps, FusedConvMatchesConvPlusActivation) {
  std::mt19937 rng(17);
  auto acts = activations();
  const char* names[] = {"", "Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "LeakyRelu", "Tanh"};
  struct Case {
    int64_t C, M, H, W, K, G, s, p;
  };
  std::vector<Case> cases = {{3, 8, 13, 11, 3, 1, 1, 1}, {16, 16, 9, 10, 3, 16, 2, 1}, {12, 24, 7, 7, 1, 1, 1, 0},
                             {8, 6, 10, 9, 5, 2, 2, 2},  {16, 16, 9, 21, 3, 16, 1, 1}, {5, 5, 7, 18, 5, 5, 1, 2}};
  int i = 0;
  for (auto& c : cases)
    for (int threads : {1, 2, 3}) {
      Tensor x = rand_tensor({2, c.C, c.H, c.W}, rng), w = rand_tensor({c.M, c.C / c.G, c.K, c.K}, rng), b = rand_tensor({c.M}, rng);
      std::vector<Attribute> at = {attr("group", c.G), attr("strides", Ints{c.s, c.s}), attr("pads", Ints{c.p, c.p, c.p, c.p})};
      Tensor conv = run_op("Conv", 11, {x, w, b}, at)[0].tensor;
      Tensor z = rand_tensor(conv.shape(), rng);
      size_t ai = size_t(i++) % acts.size();
      std::vector<float> params;
      if (ai == 2) params = {-0.5f, 0.75f};
      if (ai == 6) params = {0.1f};
      auto fat = at;
      fat.push_back(attr("activation", names[ai]));
      fat.push_back(attr("activation_params", Floats(params)));
      Tensor y = run_prepared("FusedConv", 1, {x, w, b, z}, fat, {false, true, true}, threads, "basalt");
      Tensor want = conv.clone();
      for (int64_t e = 0; e < want.numel(); ++e)
        want.data<float>()[e] = k::apply_activation(acts[ai], want.data<float>()[e] + z.data<float>()[e]);
      expect_tensors_close(y, want, 1e-4f, std::string("FusedConv ") + names[ai]);
      // The same with a post affine (the Mul and Add that follow the activation, fused): every
      // kernel path (GEMM tiles, im2col, depthwise, and their scalar epilogues) applies it.
      auto pat = fat;
      const float pm = i % 2 ? 1.25f : -0.75f, pa = i % 2 ? -0.5f : 0.f;
      pat.push_back(attr("post_affine", Floats{pm, pa}));
      Tensor yp = run_prepared("FusedConv", 1, {x, w, b, z}, pat, {false, true, true}, threads, "basalt");
      Tensor wantp = want.clone();
      for (int64_t e = 0; e < wantp.numel(); ++e) wantp.data<float>()[e] = wantp.data<float>()[e] * pm + pa;
      expect_tensors_close(yp, wantp, 1e-4f, std::string("FusedConv post_affine ") + names[ai]);
      // Without prepare (weights packed per call) and with prepare agree with plain Conv.
      Tensor y2 = run_prepared("Conv", 11, {x, w, b}, at, {false, true, true}, threads);
      expect_tensors_close(y2, conv, 1e-5f, "Conv packed");
    }
  Tensor x = rand_tensor({1, 2, 5, 5}, rng), w = rand_tensor({3, 2, 3, 3}, rng);
  EXPECT_THROW(run_op("FusedConv", 1, {x, w}, {attr("activation", "Mish")}, 1, "basalt"), Error);
  // post_affine takes exactly [mul, add]
  EXPECT_THROW(run_op("FusedConv", 1, {x, w}, {attr("activation", "Relu"), attr("post_affine", Floats{2.f})}, 1, "basalt"),
               Error);
  // residual of the wrong shape
  EXPECT_THROW(run_op("FusedConv", 1, {x, w, Value(), rand_tensor({1, 3, 2, 2}, rng)}, {}, 1, "basalt"), Error);
}

// FusedConv shapes that route to Winograd (3x3, stride 1, no dilation, one group, C and M >= 16;
// the image size is not given at prepare, so winograd_choose_tile picks by channel counts:
// F(4x4) up to C*M = 128*192, F(2x2) above): the kernel keeps exactly the transformed weights
// (asserted through packed_bytes), and every activation, with and without a post affine and a
// residual, matches act(conv + B + Z) * mul + add from the reference conv, at 1, 2 and 3 threads.
TEST(KernelsOps, FusedConvWinogradMatchesReference) {
  std::mt19937 rng(23);
  const char* names[] = {"", "Relu", "Clip", "HardSigmoid", "HardSwish", "Sigmoid", "LeakyRelu", "Tanh"};
  auto acts = activations();
  struct Case {
    int64_t N, C, M, H, W, pt, pl, pb, pr;
  };
  const std::vector<Case> cases = {
      {2, 16, 16, 9, 10, 1, 1, 1, 1},     // the smallest channel counts Winograd takes
      {1, 24, 19, 13, 11, 1, 1, 1, 1},    // M off the vector width, partial tiles
      {2, 17, 33, 20, 20, 0, 0, 0, 0},    // no padding
      {1, 40, 24, 7, 30, 1, 0, 2, 1},     // asymmetric padding, wide rows
      {1, 128, 200, 10, 9, 1, 1, 1, 1},   // C*M past 128*192: F(2x2)
  };
  int i = 0;
  for (const Case& c : cases) {
    k::Conv2dShape s;
    s.N = c.N, s.C = c.C, s.M = c.M, s.H = c.H, s.W = c.W, s.KH = s.KW = 3, s.pt = c.pt, s.pl = c.pl;
    s.OH = c.H + c.pt + c.pb - 2;
    s.OW = c.W + c.pl + c.pr - 2;
    ASSERT_TRUE(k::winograd_applicable(s));
    const int tile = k::winograd_choose_tile(s);
    // BASALT_WINOGRAD=0 in the environment turns Winograd off (then the im2col weights are kept)
    if (k::winograd_env_tile() != 0) {
      EXPECT_NE(tile, 0) << "C " << c.C << " M " << c.M;
    }
    Tensor x = rand_tensor({c.N, c.C, c.H, c.W}, rng), w = rand_tensor({c.M, c.C, 3, 3}, rng), b = rand_tensor({c.M}, rng);
    Tensor z = rand_tensor({c.N, c.M, s.OH, s.OW}, rng);
    const std::vector<Attribute> at = {attr("pads", Ints{c.pt, c.pl, c.pb, c.pr})};
    const k::GemmArch& g = k::gemm_arch_best();
    const size_t im2col_bytes = k::pack_conv_weights(g, s, w.data<float>()).bytes();
    const size_t want_bytes = tile ? k::winograd_pack_weights(g, s, w.data<float>(), tile).bytes() : im2col_bytes;
    // (the two differ, so packed_bytes tells which kernel prepare chose)
    if (tile) {
      EXPECT_NE(want_bytes, im2col_bytes);
    }
    const int64_t ysz = s.N * s.M * s.OH * s.OW;
    std::vector<float> conv(static_cast<size_t>(ysz)), absum(static_cast<size_t>(ysz));
    k::conv2d_reference(s, x.data<float>(), w.data<float>(), b.data<float>(), nullptr, k::Activation{}, conv.data());
    {
      std::vector<float> xa(x.data<float>(), x.data<float>() + x.numel()), wa(w.data<float>(), w.data<float>() + w.numel());
      for (float& v : xa) v = std::fabs(v);
      for (float& v : wa) v = std::fabs(v);
      k::conv2d_reference(s, xa.data(), wa.data(), nullptr, nullptr, k::Activation{}, absum.data());
    }
    for (int threads : {1, 2, 3})
      for (int post = 0; post < 2; ++post)
        for (int with_z = 0; with_z < 2; ++with_z) {
          const size_t ai = size_t(i++) % acts.size();
          std::vector<float> params;
          if (ai == 2) params = {-0.5f, 0.75f};
          if (ai == 6) params = {0.1f};
          auto fat = at;
          fat.push_back(attr("activation", names[ai]));
          fat.push_back(attr("activation_params", Floats(params)));
          const float pm = i % 2 ? 1.25f : -0.75f, pa = i % 3 ? -0.5f : 0.f;
          if (post) fat.push_back(attr("post_affine", Floats{pm, pa}));
          std::vector<Value> ins = {x, w, b};
          if (with_z) ins.push_back(z);
          size_t packed = 0;
          Tensor y = run_prepared("FusedConv", 1, ins, fat, {false, true, true}, threads, "basalt", &packed);
          const std::string what = std::string("FusedConv ") + names[ai] + (post ? " post_affine" : "") +
                                   (with_z ? " residual" : "") + " C" + std::to_string(c.C) + " M" + std::to_string(c.M) +
                                   " " + std::to_string(c.H) + "x" + std::to_string(c.W) + " threads=" + std::to_string(threads);
          EXPECT_EQ(packed, want_bytes) << what << ": not the weights of the routed kernel (tile " << tile << ")";
          ASSERT_EQ(y.shape(), (Shape{c.N, c.M, s.OH, s.OW})) << what;
          std::vector<float> want(conv.size()), scale(absum);
          for (size_t e = 0; e < want.size(); ++e) {
            want[e] = k::apply_activation(acts[ai], conv[e] + (with_z ? z.data<float>()[e] : 0.f));
            if (post) {
              want[e] = want[e] * pm + pa;
              scale[e] *= std::max(1.f, std::fabs(pm));
            }
          }
          expect_close(std::vector<float>(y.data<float>(), y.data<float>() + y.numel()), want, scale, what);
          if (HasFatalFailure()) return;
        }
  }
}

// Not a test: timings of the GEMM and convolution shapes of ../shared/KERNELS.md (1 thread, this
// thread's CPU time, median of 15 runs, % of the 230 GFLOP/s per-core AVX-512 peak). Run with
//   build/basalt_tests --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_Timings*'
TEST(KernelsBench, DISABLED_Timings) {
  auto cpu_now = [] {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  };
  auto median_of = [&](auto&& fn) {
    std::vector<double> t;
    for (int i = 0; i < 17; ++i) {
      double t0 = cpu_now();
      fn();
      if (i >= 2) t.push_back(cpu_now() - t0);
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
  };
  const k::GemmArch& g = k::gemm_arch_best();
  std::mt19937 rng(1);
  auto report = [](const std::string& what, double sec, double flop) {
    double gf = flop / sec / 1e9;
    std::printf("%-36s %8.3f ms %7.1f GFLOP/s %4.0f%% of peak\n", what.c_str(), sec * 1e3, gf, gf / 230.0 * 100);
  };
  struct G {
    int64_t M, N, K;
  };
  for (G s : {G{128, 768, 768}, G{128, 3072, 768}, G{128, 768, 3072}}) {
    auto A = rnd(s.M * s.K, rng), B = rnd(s.K * s.N, rng);
    std::vector<float> C(static_cast<size_t>(s.M * s.N));
    k::PackedMatrix pb = k::pack_b_matrix(g, s.K, s.N, B.data(), s.N, false);
    std::vector<float> ws(static_cast<size_t>(k::sgemm_workspace_floats(g, s.M, s.N, s.K, false, true)) + 16);
    k::GemmOperand oa{A.data(), s.K, false, nullptr}, ob;
    ob.packed = pb.data.data();
    double sec = median_of([&] { k::sgemm(g, s.M, s.N, s.K, oa, ob, C.data(), s.N, k::Epilogue{}, nullptr, ws.data()); });
    report("gemm " + std::to_string(s.M) + "x" + std::to_string(s.N) + "x" + std::to_string(s.K) + " (B packed)", sec,
           2.0 * double(s.M * s.N * s.K));
  }
  struct Cv {
    int64_t C, H, M, KH, stride, groups;
  };
  for (Cv c : {Cv{3, 224, 64, 7, 2, 1}, Cv{256, 56, 64, 1, 1, 1}, Cv{64, 56, 64, 3, 1, 1}, Cv{128, 28, 128, 3, 1, 1},
               Cv{2048, 7, 512, 1, 1, 1}, Cv{144, 56, 144, 3, 1, 144}}) {
    k::Conv2dShape s;
    s.C = c.C, s.H = s.W = c.H, s.M = c.M, s.G = c.groups, s.KH = s.KW = c.KH, s.sh = s.sw = c.stride;
    s.pt = s.pl = c.KH / 2;
    s.OH = s.OW = (c.H + 2 * s.pt - c.KH) / c.stride + 1;
    auto x = rnd(s.C * s.H * s.W, rng), w = rnd(s.M * s.Cg() * s.KH * s.KW, rng), b = rnd(s.M, rng);
    std::vector<float> y(static_cast<size_t>(s.M * s.OH * s.OW));
    k::PackedConvWeights pw = k::pack_conv_weights(g, s, w.data());
    std::vector<float> ws(static_cast<size_t>(k::conv2d_workspace_floats(g, s, true, 1)) + 16);
    k::Activation relu;
    relu.kind = k::ActKind::Relu;
    double sec = median_of([&] {
      k::conv2d(g, s, x.data(), w.data(), &pw, b.data(), nullptr, relu, y.data(), nullptr, ws.data());
    });
    report("conv " + std::to_string(c.KH) + "x" + std::to_string(c.KH) + " s" + std::to_string(c.stride) + " " +
               std::to_string(c.C) + "->" + std::to_string(c.M) + (c.groups > 1 ? " dw" : "") + " @" + std::to_string(c.H),
           sec, 2.0 * double(s.M * s.OH * s.OW * s.Cg() * s.KH * s.KW));
  }
}
