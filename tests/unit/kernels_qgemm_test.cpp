// The integer GEMM (kernels/qgemm.hpp) against its naive twin, on every integer kernel this CPU
// runs: odd shapes (tails in M, N and K), all four int8/uint8 combinations, extreme and per-row /
// per-column zero points, the three epilogues, packed and per-call operands, threads.
#include "core/thread_pool.hpp"
#include "kernels/qgemm.hpp"

#include <gtest/gtest.h>

#include <random>
#include <vector>

using namespace basalt;
using namespace basalt::kernels;

namespace {

std::vector<QIsa> qisas() {
  std::vector<QIsa> v = {QIsa::Portable};
  if (qgemm_best_isa() >= QIsa::Avx2) v.push_back(QIsa::Avx2);
  if (qgemm_best_isa() >= QIsa::Avx512Vnni) v.push_back(QIsa::Avx512Vnni);
  return v;
}

struct Case {
  int64_t M, N, K;
  bool ls, rs;        // left / right int8
  bool ltrans, rtrans;
  int zl_len, zr_len;  // 0: none, 1: scalar, else per row / column
  bool extreme;        // values and zero points at the ends of the range
};

std::vector<uint8_t> random_bytes(size_t n, std::mt19937& rng, bool extreme) {
  std::vector<uint8_t> v(n);
  std::uniform_int_distribution<int> d(0, 255);
  for (auto& x : v) x = extreme ? (d(rng) & 1 ? 255 : 0) : uint8_t(d(rng));
  return v;
}

std::vector<int32_t> zero_points(int len, bool is_signed, std::mt19937& rng, bool extreme) {
  std::vector<int32_t> z(static_cast<size_t>(len));
  std::uniform_int_distribution<int> d(is_signed ? -128 : 0, is_signed ? 127 : 255);
  for (auto& x : z) x = extreme ? (is_signed ? 127 : 255) : d(rng);
  return z;
}

void run_case(const Case& c, QEpilogue::Out out, ThreadPool* pool) {
  std::mt19937 rng(unsigned(c.M * 7919 + c.N * 104729 + c.K));
  auto L = random_bytes(size_t(c.M * c.K), rng, c.extreme), R = random_bytes(size_t(c.K * c.N), rng, c.extreme);
  auto zl = zero_points(c.zl_len ? c.zl_len : 1, c.ls, rng, c.extreme), zr = zero_points(c.zr_len ? c.zr_len : 1, c.rs, rng, c.extreme);
  QOperand lo, ro;
  lo.src = {L.data(), c.ltrans ? c.M : c.K, c.ltrans, c.ls};
  ro.src = {R.data(), c.rtrans ? c.K : c.N, c.rtrans, c.rs};
  if (c.zl_len) {
    lo.zp = zl.data();
    lo.zp_len = c.zl_len;
  }
  if (c.zr_len) {
    ro.zp = zr.data();
    ro.zp_len = c.zr_len;
  }
  std::vector<int32_t> bias(size_t(c.N));
  std::vector<double> mult(size_t(c.N));
  std::vector<float> scale(size_t(c.N));
  for (int64_t j = 0; j < c.N; ++j) {
    bias[size_t(j)] = int32_t(j * 37 % 2001) - 1000;
    mult[size_t(j)] = 1.0 / double(64 + j % 7 * 900);
    scale[size_t(j)] = 0.001f * float(1 + j % 5);
  }
  QEpilogue ep;
  ep.out = out;
  ep.ldo = c.N;
  if (out == QEpilogue::Out::Quant8) {
    ep.bias = bias.data();
    ep.bias_len = c.N;
    ep.mult = mult.data();
    ep.mult_len = c.N;
    ep.yzp = 3;
    ep.lo = c.rs ? -128 : 0;
    ep.hi = c.rs ? 127 : 255;
  } else if (out == QEpilogue::Out::Float) {
    ep.scale = scale.data();
    ep.scale_len = c.N;
  }
  const size_t esz = out == QEpilogue::Out::Quant8 ? 1 : 4;
  std::vector<uint8_t> want(size_t(c.M * c.N) * esz), got(want.size());
  QEpilogue ew = ep;
  ew.dst = want.data();
  qgemm_reference(c.M, c.N, c.K, lo, ro, ew);
  for (QIsa isa : qisas()) {
    const QGemmArch& g = qgemm_arch(isa);
    for (int packed = 0; packed < 2; ++packed) {
      QPacked pl, pr;
      QOperand l2 = lo, r2 = ro;
      if (packed) {
        pl = qpack_left(g, c.M, c.K, lo.src);
        pr = qpack_right(g, c.K, c.N, ro.src);
        l2.packed = &pl;
        r2.packed = &pr;
      }
      std::vector<uint8_t> ws(size_t(qgemm_workspace_bytes(g, c.M, c.N, c.K, packed, packed)) + 64);
      uint8_t* wp = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
      std::fill(got.begin(), got.end(), uint8_t(0xAB));
      QEpilogue eg = ep;
      eg.dst = got.data();
      qgemm(g, c.M, c.N, c.K, l2, r2, eg, pool, wp);
      ASSERT_EQ(want, got) << qisa_name(isa) << " packed=" << packed << " M=" << c.M << " N=" << c.N << " K=" << c.K
                           << " ls=" << c.ls << " rs=" << c.rs << " out=" << int(out);
    }
  }
}

}  // namespace

TEST(QGemm, MatchesNaiveTwinOnEveryKernel) {
  ThreadPool pool(2);
  const int64_t shapes[][3] = {{1, 1, 1}, {1, 17, 3}, {5, 63, 7}, {6, 64, 4}, {7, 65, 9}, {13, 130, 33}, {2, 200, 300}, {37, 19, 129}};
  for (auto& s : shapes)
    for (int signs = 0; signs < 4; ++signs)
      for (auto out : {QEpilogue::Out::Int32, QEpilogue::Out::Quant8, QEpilogue::Out::Float}) {
        Case c{s[0], s[1], s[2], (signs & 1) != 0, (signs & 2) != 0, false, false, 1, 1, false};
        run_case(c, out, signs == 3 ? &pool : nullptr);
      }
}

TEST(QGemm, PerRowAndPerColumnZeroPointsTransposedSources) {
  ThreadPool pool(2);
  for (int t = 0; t < 4; ++t)
    for (int signs = 0; signs < 4; ++signs) {
      Case c{11, 70, 23, (signs & 1) != 0, (signs & 2) != 0, (t & 1) != 0, (t & 2) != 0, 11, 70, false};
      run_case(c, QEpilogue::Out::Int32, &pool);
      c.zl_len = 0;  // no zero points at all
      c.zr_len = 0;
      run_case(c, QEpilogue::Out::Quant8, nullptr);
    }
}

TEST(QGemm, ExtremeValuesAndZeroPointsStayExact) {
  // all-255 / all-0 bytes with zero points at the range's end: the largest products, no saturation
  for (int signs = 0; signs < 4; ++signs) {
    Case c{9, 80, 1031, (signs & 1) != 0, (signs & 2) != 0, false, false, 1, 80, true};
    run_case(c, QEpilogue::Out::Int32, nullptr);
    run_case(c, QEpilogue::Out::Quant8, nullptr);
  }
}

TEST(QGemm, Vpmaddubsw_SaturatingCaseIsExactOnAvx2) {
  // 255 * 127 + 255 * 127 overflows int16: the case vpmaddubsw gets wrong
  std::vector<uint8_t> L(8, 255), R(8 * 16, 127);
  QOperand lo, ro;
  lo.src = {L.data(), 8, false, false};
  ro.src = {R.data(), 16, false, true};
  for (QIsa isa : qisas()) {
    const QGemmArch& g = qgemm_arch(isa);
    std::vector<int32_t> out(16, 0);
    QEpilogue ep;
    ep.dst = out.data();
    ep.ldo = 16;
    std::vector<uint8_t> ws(size_t(qgemm_workspace_bytes(g, 1, 16, 8, false, false)) + 64);
    uint8_t* wp = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(ws.data()) + 63) / 64 * 64);
    qgemm(g, 1, 16, 8, lo, ro, ep, nullptr, wp);
    for (int j = 0; j < 16; ++j) ASSERT_EQ(out[size_t(j)], 8 * 255 * 127) << qisa_name(isa);
  }
}

TEST(QGemm, KernelChoiceFollowsTheCpu) {
  const QIsa best = qgemm_best_isa();
  if (best_isa() == Isa::Portable) {
    EXPECT_EQ(best, QIsa::Portable);
  }
  if (best == QIsa::Avx512Vnni) {
    EXPECT_EQ(best_isa(), Isa::Avx512);
  }
  EXPECT_STRNE(qisa_name(best), "");
}
