// Differential tests of the fast non-GEMM kernels (issue 5):
// - row kernels: every ISA's table (kernels/eltwise.hpp) against the portable twin and libm,
//   on odd lengths (vector tails) and special values;
// - ops: the float32 fast path of each op against the same op on float64 input, which runs the
//   reference kernel, on random shapes with odd sizes, with 1, 2 and 3 threads (results must not
//   depend on the thread count).
#include "kernels/activation.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/pool.hpp"
#include "op_tester.hpp"
#include "core/thread_pool.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace basalt {
namespace {

using namespace basalt::test;
using kernels::BinaryOp;
using kernels::BinMode;
using kernels::Isa;
using kernels::UnaryOp;

std::vector<float> random_floats(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<Isa> isas() { return {Isa::Portable, Isa::Avx2, Isa::Avx512}; }

// Lengths that cover empty, sub-vector, exact multiples of 8 and 16, and tails.
const int64_t kLengths[] = {0, 1, 3, 7, 8, 15, 16, 17, 31, 33, 64, 100, 257, 1023};

// ---------------------------------------------------------------------------------------------
// Row kernels

struct UnaryCase {
  UnaryOp op;
  const char* name;
  kernels::UnaryParams p;
  double (*ref)(double, const kernels::UnaryParams&);
  double rel, abs;  // allowed error: |y - ref| <= abs + rel * |ref|
};

double gelu_ref(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

const UnaryCase kUnary[] = {
    {UnaryOp::Relu, "Relu", {}, [](double v, const auto&) { return v > 0 ? v : 0.0; }, 0, 0},
    {UnaryOp::LeakyRelu, "LeakyRelu", {0.1f, 0}, [](double v, const auto& p) { return v < 0 ? double(float(p.alpha * v)) : v; }, 0, 0},
    {UnaryOp::Clip, "Clip", {-0.5f, 0.75f}, [](double v, const auto& p) { return std::min<double>(std::max<double>(v, p.alpha), p.beta); }, 0, 0},
    {UnaryOp::HardSigmoid, "HardSigmoid", {0.2f, 0.5f}, [](double v, const auto& p) { return std::max(0.0, std::min(1.0, double(p.alpha) * v + double(p.beta))); }, 1e-6, 5e-7},
    {UnaryOp::HardSwish, "HardSwish", {}, [](double v, const auto&) { return v * std::max(0.0, std::min(1.0, v / 6 + 0.5)); }, 1e-6, 5e-7},
    {UnaryOp::Sigmoid, "Sigmoid", {}, [](double v, const auto&) { return 1 / (1 + std::exp(-v)); }, 2e-7, 0},
    // x * sigmoid(alpha * x) with alpha * x rounded to float, as the kernel computes it (exact for
    // alpha 1). That rounding (6e-8 relative) moves sigmoid by (1 - s)|alpha x| * 6e-8 relative, past
    // 4e-7 where alpha x < -6.7: inside this range with alpha 1.702 (QuickGELU's).
    {UnaryOp::Swish, "Swish", {1.0f, 0}, [](double v, const auto& p) { return v / (1 + std::exp(-double(float(p.alpha * v)))); }, 4e-7, 1e-30},
    {UnaryOp::Swish, "Swish alpha 1.702", {1.702f, 0}, [](double v, const auto& p) { return v / (1 + std::exp(-double(float(p.alpha * v)))); }, 4e-7, 1e-30},
    {UnaryOp::Tanh, "Tanh", {}, [](double v, const auto&) { return std::tanh(v); }, 3e-7, 0},
    {UnaryOp::Exp, "Exp", {}, [](double v, const auto&) { return std::exp(v); }, 2e-7, 0},
    {UnaryOp::Erf, "Erf", {}, [](double v, const auto&) { return std::erf(v); }, 0, 4e-7},
    {UnaryOp::Gelu, "Gelu", {}, [](double v, const auto&) { return gelu_ref(v); }, 0, 2e-6},
    {UnaryOp::GeluTanh, "GeluTanh", {}, [](double v, const auto&) {
       return 0.5 * v * (1 + std::tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
     }, 1e-6, 1e-6},
    {UnaryOp::Sqrt, "Sqrt", {}, [](double v, const auto&) { return std::sqrt(std::fabs(v)); }, 1e-7, 0},
    {UnaryOp::Square, "Square", {}, [](double v, const auto&) { return v * v; }, 1e-7, 0},
    {UnaryOp::Neg, "Neg", {}, [](double v, const auto&) { return -v; }, 0, 0},
    {UnaryOp::Abs, "Abs", {}, [](double v, const auto&) { return std::fabs(v); }, 0, 0},
    {UnaryOp::Reciprocal, "Reciprocal", {}, [](double v, const auto&) { return 1 / v; }, 1e-7, 0},
    {UnaryOp::Affine, "Affine", {1.5f, -0.25f}, [](double v, const auto& p) { return double(p.alpha) * v + double(p.beta); }, 2e-7, 2e-6},
};

TEST(KernelsVec, UnaryEveryIsaMatchesLibmAndPortable) {
  std::mt19937 rng(1);
  for (const UnaryCase& c : kUnary)
    for (int64_t n : kLengths) {
      std::vector<float> x = random_floats(rng, n, -12.f, 12.f);
      if (c.op == UnaryOp::Sqrt)
        for (auto& v : x) v = std::fabs(v);
      std::vector<float> ref(x.size());
      kernels::vec_ops(Isa::Portable).unary(c.op, c.p, x.data(), ref.data(), n);
      for (Isa isa : isas()) {
        std::vector<float> y(x.size(), -1.f);
        kernels::vec_ops(isa).unary(c.op, c.p, x.data(), y.data(), n);
        for (size_t i = 0; i < x.size(); ++i) {
          double r = c.ref(x[i], c.p);
          double tol = c.abs + c.rel * std::fabs(r) + 1e-37;
          ASSERT_LE(std::fabs(double(y[i]) - r), tol)
              << c.name << " " << kernels::isa_name(isa) << " n=" << n << " x=" << x[i] << " y=" << y[i];
          ASSERT_LE(std::fabs(y[i] - ref[i]), 2 * tol) << c.name << " vs portable, x=" << x[i];
        }
      }
    }
}

TEST(KernelsVec, TranscendentalsSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {0.f, -0.f, inf, -inf, nan, 88.7f, 89.5f, -87.5f, -103.f, -120.f, 9.5f, -9.5f, 4.5f, -4.5f, 1e-8f};
  for (Isa isa : isas()) {
    const kernels::VecOps& k = kernels::vec_ops(isa);
    std::vector<float> y(x.size());
    k.unary(UnaryOp::Exp, {}, x.data(), y.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
      float r = std::exp(x[i]);
      if (std::isnan(r)) EXPECT_TRUE(std::isnan(y[i])) << kernels::isa_name(isa);
      else if (std::isinf(r) || r == 0.f) EXPECT_EQ(y[i], r) << "exp(" << x[i] << ") " << kernels::isa_name(isa);
      else EXPECT_NEAR(y[i], r, 2e-7 * r + 1e-44) << "exp(" << x[i] << ") " << kernels::isa_name(isa);
    }
    for (UnaryOp op : {UnaryOp::Tanh, UnaryOp::Sigmoid, UnaryOp::Erf}) {
      k.unary(op, {}, x.data(), y.data(), int64_t(x.size()));
      for (size_t i = 0; i < x.size(); ++i) {
        double r = op == UnaryOp::Tanh ? std::tanh(double(x[i])) : op == UnaryOp::Erf ? std::erf(double(x[i])) : 1 / (1 + std::exp(-double(x[i])));
        if (std::isnan(r)) EXPECT_TRUE(std::isnan(y[i])) << int(op) << " " << kernels::isa_name(isa);
        else EXPECT_NEAR(y[i], r, 4e-7) << int(op) << "(" << x[i] << ") " << kernels::isa_name(isa);
      }
    }
  }
}

TEST(KernelsVec, BinaryEveryIsaEveryMode) {
  std::mt19937 rng(2);
  for (BinaryOp op : {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min})
    for (BinMode mode : {BinMode::VecVec, BinMode::VecScalar, BinMode::ScalarVec})
      for (int64_t n : kLengths) {
        std::vector<float> a = random_floats(rng, std::max<int64_t>(n, 1), -4.f, 4.f);
        std::vector<float> b = random_floats(rng, std::max<int64_t>(n, 1), 0.5f, 3.f);
        for (Isa isa : isas()) {
          std::vector<float> y(a.size(), 0.f);
          kernels::vec_ops(isa).binary(op, mode, a.data(), b.data(), y.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            float u = mode == BinMode::ScalarVec ? a[0] : a[size_t(i)];
            float v = mode == BinMode::VecScalar ? b[0] : b[size_t(i)];
            float r = op == BinaryOp::Add ? u + v : op == BinaryOp::Sub ? u - v : op == BinaryOp::Mul ? u * v
                    : op == BinaryOp::Div ? u / v : op == BinaryOp::Max ? std::max(u, v) : std::min(u, v);
            ASSERT_EQ(y[size_t(i)], r) << int(op) << " mode " << int(mode) << " n=" << n << " " << kernels::isa_name(isa);
          }
        }
      }
}

// affine, max_into / add_into and gemv (LSTM/GRU's recurrent step), every ISA against plain
// loops: lengths with vector tails, gemv rows 1-9 (around its 4-row blocks), lda > cols, with
// and without bias.
// The scalar epilogue (epilogue_row: the fused activation of the portable GEMM, NCHW conv and
// the Winograd output transforms) on every sign and special value. Relu keeps NaN and -0 and
// zeroes the rest of the negatives, as maxps(0, v) does in the vector epilogues (act_zmm/act_ymm).
TEST(KernelsVec, EpilogueRowReluSpecialValues) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<float> in = {1.5f, -1.5f, 0.f, -0.f, nan, -inf, inf, 1e-40f, -1e-40f};
  for (int64_t n = 1; n <= 37; ++n) {  // every tail length the compiler's vector loop may take
    std::vector<float> c(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) c[j] = in[j % in.size()];
    kernels::Activation relu;
    relu.kind = kernels::ActKind::Relu;
    kernels::epilogue_row(c.data(), n, 1.f, 0.f, nullptr, nullptr, relu);
    for (int64_t j = 0; j < n; ++j) {
      const float v = in[j % in.size()];
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(c[j])) << "n " << n << " j " << j;
      } else if (v < 0.f) {
        EXPECT_EQ(c[j], 0.f) << "n " << n << " j " << j << " v " << v;
        EXPECT_FALSE(std::signbit(c[j])) << "n " << n << " j " << j;
      } else {
        EXPECT_EQ(std::memcmp(&c[j], &v, sizeof v), 0) << "n " << n << " j " << j << " v " << v;
      }
    }
  }
}

TEST(KernelsVec, AffineAccumulateGemvEveryIsa) {
  std::mt19937 rng(11);
  for (int64_t n : kLengths) {
    std::vector<float> x = random_floats(rng, std::max<int64_t>(n, 1), -4.f, 4.f);
    std::vector<float> a0 = random_floats(rng, std::max<int64_t>(n, 1), -4.f, 4.f);
    for (Isa isa : isas()) {
      const kernels::VecOps& v = kernels::vec_ops(isa);
      std::vector<float> y(x.size(), 7.f);
      v.affine(x.data(), y.data(), n, 1.5f, -0.25f);
      for (int64_t i = 0; i < n; ++i)
        ASSERT_NEAR(y[size_t(i)], double(x[size_t(i)]) * 1.5 - 0.25, 1e-5) << "affine n=" << n << " " << kernels::isa_name(isa);
      std::vector<float> mx = a0, ad = a0;
      v.max_into(mx.data(), x.data(), n);
      v.add_into(ad.data(), x.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_EQ(mx[size_t(i)], std::max(a0[size_t(i)], x[size_t(i)])) << "max_into n=" << n << " " << kernels::isa_name(isa);
        ASSERT_EQ(ad[size_t(i)], a0[size_t(i)] + x[size_t(i)]) << "add_into n=" << n << " " << kernels::isa_name(isa);
      }
    }
  }
  for (int64_t rows = 1; rows <= 9; ++rows)
    for (int64_t cols : {1, 7, 16, 17, 33, 100, 257})
      for (int64_t pad : {0, 5})
        for (bool with_bias : {false, true}) {
          const int64_t lda = cols + pad;
          std::vector<float> A = random_floats(rng, rows * lda, -1.f, 1.f), x = random_floats(rng, cols, -1.f, 1.f);
          std::vector<float> bias = random_floats(rng, rows, -1.f, 1.f);
          for (Isa isa : isas()) {
            std::vector<float> y(size_t(rows), 7.f);
            kernels::vec_ops(isa).gemv(A.data(), rows, cols, lda, x.data(), with_bias ? bias.data() : nullptr, y.data());
            for (int64_t r = 0; r < rows; ++r) {
              double want = with_bias ? bias[size_t(r)] : 0.0;
              for (int64_t k = 0; k < cols; ++k) want += double(A[size_t(r * lda + k)]) * x[size_t(k)];
              ASSERT_NEAR(y[size_t(r)], want, 1e-5 * (1.0 + double(cols))) << "gemv rows " << rows << " cols " << cols
                                                                         << " lda " << lda << " " << kernels::isa_name(isa);
            }
          }
        }
}

TEST(KernelsVec, ReductionsSoftmaxLayerNormAgainstDouble) {
  std::mt19937 rng(3);
  for (int64_t n : kLengths) {
    if (n == 0) continue;
    std::vector<float> x = random_floats(rng, n, -6.f, 6.f);
    std::vector<float> g = random_floats(rng, n, 0.5f, 1.5f), bt = random_floats(rng, n, -1.f, 1.f);
    double s = 0, m = -1e300;
    for (float v : x) s += v, m = std::max(m, double(v));
    double es = 0;
    for (float v : x) es += std::exp(v - m);
    double mean = s / double(n), var = 0;
    for (float v : x) var += (v - mean) * (v - mean);
    var /= double(n);
    double rstd = 1 / std::sqrt(var + 1e-5);
    for (Isa isa : isas()) {
      const kernels::VecOps& k = kernels::vec_ops(isa);
      const char* name = kernels::isa_name(isa);
      EXPECT_NEAR(k.sum(x.data(), n), s, 1e-5 * double(n)) << name;
      EXPECT_EQ(k.max(x.data(), n), float(m)) << name;
      std::vector<float> y(x.size());
      k.softmax(x.data(), y.data(), n, false);
      for (int64_t i = 0; i < n; ++i) {
        double r = std::exp(x[size_t(i)] - m) / es;
        ASSERT_NEAR(y[size_t(i)], r, 1e-6 * r + 1e-12) << name << " softmax n=" << n;
      }
      k.softmax(x.data(), y.data(), n, true);
      for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(y[size_t(i)], x[size_t(i)] - m - std::log(es), 2e-5) << name;
      float mo = 0, ro = 0;
      k.layernorm(x.data(), g.data(), bt.data(), y.data(), n, 1e-5f, &mo, &ro);
      EXPECT_NEAR(mo, mean, 1e-5) << name;
      EXPECT_NEAR(ro, rstd, 1e-5 * rstd) << name;
      for (int64_t i = 0; i < n; ++i) {
        size_t j = size_t(i);
        ASSERT_NEAR(y[j], (x[j] - mean) * rstd * g[j] + bt[j], 1e-5) << name << " layernorm n=" << n;
      }
    }
  }
}

// The layer-norm row without beta, without gamma, and without both (1 and 0, the header's contract),
// on every ISA against double, on lengths with vector tails.
TEST(KernelsVec, LayerNormWithoutGammaOrBetaEveryIsa) {
  std::mt19937 rng(19);
  for (int64_t n : kLengths) {
    if (n == 0) continue;
    std::vector<float> x = random_floats(rng, n, -6.f, 6.f), g = random_floats(rng, n, 0.5f, 1.5f),
                       bt = random_floats(rng, n, -2.f, 2.f);
    double mean = 0, var = 0;
    for (float v : x) mean += v;
    mean /= double(n);
    for (float v : x) var += (v - mean) * (v - mean);
    var /= double(n);
    const double rstd = 1 / std::sqrt(var + 1e-5);
    for (Isa isa : isas())
      for (int which = 0; which < 3; ++which) {  // gamma only, neither, beta only
        const bool with_gamma = which == 0, with_beta = which == 2;
        const std::string what = std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n) +
                                 (with_gamma ? " gamma, no beta" : with_beta ? " beta, no gamma" : " no gamma, no beta");
        std::vector<float> y(x.size(), 7.f);
        float mo = 0, ro = 0;
        kernels::vec_ops(isa).layernorm(x.data(), with_gamma ? g.data() : nullptr, with_beta ? bt.data() : nullptr, y.data(),
                                        n, 1e-5f, &mo, &ro);
        EXPECT_NEAR(mo, mean, 1e-5) << what;
        EXPECT_NEAR(ro, rstd, 1e-5 * rstd) << what;
        for (int64_t i = 0; i < n; ++i) {
          const size_t j = size_t(i);
          ASSERT_NEAR(y[j], (x[j] - mean) * rstd * (with_gamma ? g[j] : 1.0) + (with_beta ? bt[j] : 0.0), 1e-5)
              << what << " element " << i;
        }
      }
  }
}

// Softmax and log-softmax rows as attention masks leave them: -inf, -FLT_MAX, -1e30 and -10000
// (BERT's mask) next to ordinary scores, on every ISA against double, on lengths with vector tails
// (masked entries in the tail too). Rows: a few entries masked; all but the first; all (a finite
// mask added to every score; -FLT_MAX everywhere: equal entries, uniform). A masked entry is
// exactly 0 (softmax), -inf stays -inf (log-softmax). A row that is all -inf gives NaN everywhere,
// as the reference Softmax does (shift by 0 when the max is infinite, then 0 / 0) and
// docs/fused_ops.md says. Log-softmax too where every entry is masked by a finite value (a max of
// large magnitude): the row kernel once computed x - fl(max + log(sum)), which rounds the log
// term away (all -FLT_MAX: 0 instead of -log(n); -10000: errors of 3e-4); it now computes
// (x - max) - log(sum), as the reference does.
TEST(KernelsVec, SoftmaxMaskedRowsEveryIsa) {
  const float inf = std::numeric_limits<float>::infinity(), big = std::numeric_limits<float>::max();
  const float masks[] = {-inf, -big, -1e30f, -10000.f};
  std::mt19937 rng(20);
  for (int64_t n : kLengths) {
    if (n == 0) continue;
    for (int kind = 0; kind < 3; ++kind)
      for (float mk : masks) {
        std::vector<float> x = random_floats(rng, n, -6.f, 6.f);
        for (int64_t i = 0; i < n; ++i) {
          const bool masked = kind == 0 ? (i % 3 == 1 || i == n - 1) && n > 1 : kind == 1 ? i > 0 : true;
          if (masked) x[size_t(i)] = mk == -inf || mk == -big ? mk : x[size_t(i)] + mk;
        }
        double m = -inf;
        for (float v : x) m = std::max(m, double(v));
        const bool all_inf = m == -inf;
        if (std::isinf(m)) m = 0;
        double es = 0;
        for (float v : x) es += std::exp(double(v) - m);
        for (Isa isa : isas()) {
          const std::string what = std::string(kernels::isa_name(isa)) + " n=" + std::to_string(n) + " kind " +
                                   std::to_string(kind) + " mask " + std::to_string(mk);
          std::vector<float> y(x.size()), l(x.size());
          kernels::vec_ops(isa).softmax(x.data(), y.data(), n, false);
          kernels::vec_ops(isa).softmax(x.data(), l.data(), n, true);
          for (int64_t i = 0; i < n; ++i) {
            const size_t j = size_t(i);
            if (all_inf) {
              ASSERT_TRUE(std::isnan(y[j]) && std::isnan(l[j])) << what << " element " << i << ": " << y[j] << " " << l[j];
              continue;
            }
            const double r = std::exp(double(x[j]) - m) / es, lr = double(x[j]) - m - std::log(es);
            if (r == 0) ASSERT_EQ(y[j], 0.f) << what << " element " << i;
            else ASSERT_NEAR(y[j], r, 1e-6 * r + 1e-12) << what << " element " << i;
            if (std::isinf(lr)) ASSERT_EQ(l[j], -inf) << what << " element " << i;
            // 2e-5 as for ordinary rows, plus the float32 rounding of a masked value (up to 1e30)
            else ASSERT_NEAR(l[j], lr, 2e-5 + 1.2e-7 * std::fabs(lr)) << what << " element " << i;
          }
        }
      }
  }
}

// The threaded drivers give bit-identical results for 1, 2 and 3 threads, on sizes that do and
// do not split.
TEST(KernelsVec, DriversIndependentOfThreadCount) {
  std::mt19937 rng(4);
  for (int64_t n : {int64_t(5), int64_t(4097), int64_t(100003)}) {
    std::vector<float> x = random_floats(rng, n, -5.f, 5.f), b = random_floats(rng, n, 1.f, 2.f);
    std::vector<float> y1(x.size()), s1(x.size()), t1(x.size());
    kernels::unary_f32(nullptr, UnaryOp::Gelu, {}, x.data(), y1.data(), n);
    kernels::binary_f32(nullptr, BinaryOp::Div, BinMode::VecVec, x.data(), b.data(), s1.data(), n);
    kernels::softmax_rows_f32(nullptr, x.data(), t1.data(), n / 5, 5, false);
    for (int threads : {2, 3}) {
      ThreadPool pool(threads, 0);
      std::vector<float> y(x.size()), s(x.size()), t(x.size());
      kernels::unary_f32(&pool, UnaryOp::Gelu, {}, x.data(), y.data(), n);
      kernels::binary_f32(&pool, BinaryOp::Div, BinMode::VecVec, x.data(), b.data(), s.data(), n);
      kernels::softmax_rows_f32(&pool, x.data(), t.data(), n / 5, 5, false);
      EXPECT_EQ(0, std::memcmp(y.data(), y1.data(), y.size() * sizeof(float))) << threads;
      EXPECT_EQ(0, std::memcmp(s.data(), s1.data(), s.size() * sizeof(float))) << threads;
      EXPECT_EQ(0, std::memcmp(t.data(), t1.data(), t.size() * sizeof(float))) << threads;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Ops: float32 fast path vs. the reference kernel (float64 input), 1-3 threads

std::vector<Value> run_op_threads(const std::string& op, int opset, const std::vector<Value>& inputs,
                                  const std::vector<Attribute>& attrs, int threads, int num_outputs = 1) {
  return run_op(op, opset, inputs, attrs, num_outputs, "", threads);
}

Tensor rand_tensor(std::mt19937& rng, const Shape& s, float lo = -3.f, float hi = 3.f) {
  std::vector<float> v = random_floats(rng, shape_numel(s), lo, hi);
  return Tensor::from_vector<float>(v, s.empty() ? Shape{} : s).reshaped(s);
}
Tensor as_double(const Tensor& t) {
  Tensor d(DType::Double, t.shape());
  for (int64_t i = 0; i < t.numel(); ++i) d.data<double>()[i] = double(t.data<float>()[i]);
  return d;
}

// Runs op on float32 inputs (fast path) with 1, 2, 3 threads and on float64 copies (reference);
// float32 results must match the reference within tol (abs + rel) and each other exactly.
// as_is[i]: input i goes to the reference unconverted (integer inputs); output: the output checked.
void check_op(const std::string& op, int opset, const std::vector<Tensor>& fin, const std::vector<Attribute>& attrs,
              double tol, const std::string& what, std::vector<bool> as_is = {}, int output = 0) {
  std::vector<Value> fv, dv;
  for (size_t i = 0; i < fin.size(); ++i) {
    bool keep = i < as_is.size() && as_is[i];
    fv.push_back(fin[i].defined() ? Value(fin[i]) : Value());
    dv.push_back(fin[i].defined() ? Value(keep ? fin[i] : as_double(fin[i])) : Value());
  }
  Tensor ref = run_op_threads(op, opset, dv, attrs, 1, output + 1)[size_t(output)].tensor;
  Tensor y1;
  for (int threads : {1, 2, 3}) {
    Tensor y = run_op_threads(op, opset, fv, attrs, threads, output + 1)[size_t(output)].tensor;
    ASSERT_EQ(y.dtype(), DType::Float) << what;
    ASSERT_EQ(y.shape(), ref.shape()) << what;
    for (int64_t i = 0; i < y.numel(); ++i) {
      double r = ref.data<double>()[i], v = y.data<float>()[i];
      ASSERT_NEAR(v, r, tol * (1 + std::fabs(r))) << what << " element " << i << " threads " << threads;
    }
    if (threads == 1) y1 = y;
    else ASSERT_EQ(0, std::memcmp(y.raw(), y1.raw(), y.nbytes())) << what << ": differs with " << threads << " threads";
  }
}

TEST(KernelsVecOps, BinaryBroadcastShapes) {
  std::mt19937 rng(5);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3, 17, 19}, {2, 3, 17, 19}},  // same shape
      {{2, 3, 17, 19}, {}},              // scalar
      {{1}, {5, 33}},                    // scalar on the left
      {{2, 5, 9, 7}, {1, 5, 1, 1}},      // per channel
      {{3, 37, 21}, {21}},               // last dim
      {{4, 1, 9}, {1, 7, 1}},            // outer product
      {{2, 3, 40, 41}, {2, 3, 40, 41}},  // large enough to split over threads
      {{1, 64, 70, 71}, {1, 64, 1, 1}},
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    for (auto& [sa, sb] : shapes) {
      Tensor a = rand_tensor(rng, sa), b = rand_tensor(rng, sb, 0.5f, 2.f);
      check_op(op, 13, {a, b}, {}, 1e-6, std::string(op) + " " + shape_str(sa) + " " + shape_str(sb));
      check_op(op, 13, {b, a}, {}, 1e-6, std::string(op) + " " + shape_str(sb) + " " + shape_str(sa));
    }
}

// Binary ops on sizes that split into several chunks over 2 and 3 threads, for each way the op
// hands work to the pool:
// - one flat pass (binary_f32: same shapes, or a one-element operand), chunks of 32768 elements
//   (8192 for Div): 3 x 149 x 151 = 67497 elements are 3 chunks (9 for Div), the last partial;
//   each chunk offsets the vector operands and keeps the scalar one;
// - a one-element operand with more dims than the other (the broadcast plan, one row: the same
//   flat pass);
// - rows of the broadcast plan, chunks of 32768 / row length rows (8192 / row length for Div):
//   1000 rows of 67 are 3 chunks (9 for Div); 300 x 4 rows of 67 are 3 chunks (10 for Div) that
//   start part-way through the dim of 4 (489 and 122 rows are not multiples of 4).
TEST(KernelsVecOps, BinarySplitOverThreads) {
  std::mt19937 rng(18);
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 149, 151}, {3, 149, 151}},  // same shape
      {{3, 149, 151}, {}},             // scalar
      {{3, 149, 151}, {1}},            // one element, rank 1
      {{67497}, {1, 1}},               // one element with more dims: [1, 67497]
      {{1000, 67}, {67}},              // last dim
      {{300, 1, 67}, {1, 4, 67}},      // outer product of the leading dims
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min"})
    for (auto& [sa, sb] : shapes) {
      Tensor a = rand_tensor(rng, sa), b = rand_tensor(rng, sb, 0.5f, 2.f);
      check_op(op, 13, {a, b}, {}, 1e-6, std::string(op) + " " + shape_str(sa) + " " + shape_str(sb));
      check_op(op, 13, {b, a}, {}, 1e-6, std::string(op) + " " + shape_str(sb) + " " + shape_str(sa));
    }
}

TEST(KernelsVecOps, Activations) {
  std::mt19937 rng(6);
  for (Shape s : {Shape{7}, Shape{3, 5, 33}, Shape{2, 16, 45, 47}}) {
    Tensor x = rand_tensor(rng, s, -6.f, 6.f);
    std::string sh = shape_str(s);
    check_op("Relu", 14, {x}, {}, 0, "Relu " + sh);
    check_op("LeakyRelu", 16, {x}, {attr("alpha", 0.2f)}, 1e-7, "LeakyRelu " + sh);
    check_op("Sigmoid", 13, {x}, {}, 3e-7, "Sigmoid " + sh);
    check_op("Tanh", 13, {x}, {}, 3e-7, "Tanh " + sh);
    check_op("HardSigmoid", 6, {x}, {attr("alpha", 0.3f), attr("beta", 0.4f)}, 1e-6, "HardSigmoid " + sh);
    check_op("HardSwish", 14, {x}, {}, 1e-6, "HardSwish " + sh);
    // Swish-24: x * sigmoid(alpha * x), alpha 1 by default. 4e-7: sigmoid's 1.8e-7 and the product's
    // rounding; with alpha 1.702 also the float rounding of alpha * x (6e-8 relative), which moves
    // y = x s by |x| s (1 - s)|alpha x| * 6e-8 <= 1.6e-8 absolute (that product peaks at 0.26).
    check_op("Swish", 24, {x}, {}, 4e-7, "Swish " + sh);
    check_op("Swish", 24, {x}, {attr("alpha", 1.702f)}, 4e-7, "Swish alpha 1.702 " + sh);
    check_op("Exp", 13, {x}, {}, 2e-7, "Exp " + sh);
    check_op("Erf", 13, {x}, {}, 4e-7, "Erf " + sh);
    check_op("Gelu", 20, {x}, {}, 2e-6, "Gelu " + sh);
    check_op("Gelu", 20, {x}, {attr("approximate", "tanh")}, 2e-6, "Gelu tanh " + sh);
    check_op("Clip", 6, {x}, {attr("min", -1.0f), attr("max", 2.5f)}, 0, "Clip-6 " + sh);
    check_op("Clip", 13, {x, Tensor::scalar<float>(-0.5f), Tensor()}, {}, 0, "Clip-13 min " + sh, {false, false});
    check_op("Neg", 13, {x}, {}, 0, "Neg " + sh);
    check_op("Abs", 13, {x}, {}, 0, "Abs " + sh);
    Tensor pos = rand_tensor(rng, s, 0.01f, 9.f);
    check_op("Sqrt", 13, {pos}, {}, 1e-7, "Sqrt " + sh);
    check_op("Reciprocal", 13, {pos}, {}, 1e-7, "Reciprocal " + sh);
  }
}

TEST(KernelsVecOps, SoftmaxLayerNormBatchNorm) {
  std::mt19937 rng(7);
  for (Shape s : {Shape{1, 7}, Shape{3, 5, 33}, Shape{2, 4, 128, 129}}) {
    Tensor x = rand_tensor(rng, s, -8.f, 8.f);
    std::string sh = shape_str(s);
    check_op("Softmax", 13, {x}, {}, 1e-6, "Softmax " + sh);
    check_op("LogSoftmax", 13, {x}, {}, 2e-6, "LogSoftmax " + sh);
    check_op("Softmax", 11, {x}, {attr("axis", 1)}, 1e-6, "Softmax-11 axis 1 " + sh);
    int64_t last = s.back();
    Tensor g = rand_tensor(rng, {last}, 0.5f, 1.5f), b = rand_tensor(rng, {last});
    check_op("LayerNormalization", 17, {x, g, b}, {}, 1e-5, "LayerNorm " + sh);
    check_op("LayerNormalization", 17, {x, g, Tensor()}, {}, 1e-5, "LayerNorm no bias " + sh);
    int64_t C = s[1];
    Tensor sc = rand_tensor(rng, {C}, 0.5f, 1.5f), bi = rand_tensor(rng, {C}), mu = rand_tensor(rng, {C}),
           var = rand_tensor(rng, {C}, 0.1f, 2.f);
    check_op("BatchNormalization", 15, {x, sc, bi, mu, var}, {}, 1e-5, "BatchNorm " + sh);
  }
}

// The Softmax / LogSoftmax ops, float32 (the threaded row driver) and float64 (the reference),
// on a row of -inf: NaN (the documented result, docs/fused_ops.md), and on a row with one finite
// entry: one-hot (0 and -inf for log-softmax).
TEST(KernelsVecOps, SoftmaxAllMaskedRow) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor x = Tensor::from_vector<float>(std::vector<float>(2 * 37, -inf), {2, 37});
  x.data<float>()[40] = 1.f;  // row 1 has one finite score, at column 3
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (bool dbl : {false, true}) {
      const bool lg = std::string(op) == "LogSoftmax";
      const std::string what = std::string(op) + (dbl ? " double" : " float");
      Tensor y = run_op(op, 13, {dbl ? as_double(x) : x})[0].tensor;
      for (int64_t i = 0; i < 37; ++i) {
        const double v0 = dbl ? y.data<double>()[i] : y.data<float>()[i];
        const double v1 = dbl ? y.data<double>()[37 + i] : y.data<float>()[37 + i];
        EXPECT_TRUE(std::isnan(v0)) << what << " element " << i << ": " << v0;
        EXPECT_EQ(v1, i == 3 ? (lg ? 0.0 : 1.0) : (lg ? -double(inf) : 0.0)) << what << " element " << i;
      }
    }
}

TEST(KernelsVecOps, Pooling) {
  std::mt19937 rng(8);
  struct P {
    Shape x;
    Ints k, s, pads, dil;
    int ceil;
  };
  const std::vector<P> cases = {
      {{1, 3, 17, 19}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0},
      {{2, 5, 16, 16}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 0},
      {{1, 4, 15, 13}, {3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 0},
      {{1, 2, 15, 13}, {3, 2}, {2, 3}, {0, 1, 2, 0}, {1, 1}, 1},
      {{1, 2, 20, 21}, {3, 3}, {1, 2}, {2, 2, 2, 2}, {2, 2}, 0},
      {{1, 3, 7, 9}, {7, 9}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 0},
      // Enough planes to split over 2 and 3 threads: pool2d_f32 takes planes in chunks of
      // 65536 / (OH * (kh * W + kw * OW)): 128 planes of 37 (4 chunks), 96 of 36 (3 chunks),
      // 80 of 12 (7 chunks, dilated: MaxPool only).
      {{2, 64, 28, 28}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 0},
      {{1, 96, 33, 35}, {2, 2}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1},
      {{1, 80, 30, 30}, {3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 0},
  };
  for (const P& c : cases) {
    Tensor x = rand_tensor(rng, c.x);
    std::string what = shape_str(c.x) + " k" + std::to_string(c.k[0]) + "x" + std::to_string(c.k[1]);
    std::vector<Attribute> at = {attr("kernel_shape", c.k), attr("strides", c.s), attr("pads", c.pads),
                                 attr("ceil_mode", c.ceil)};
    std::vector<Attribute> mx = at;
    mx.push_back(attr("dilations", c.dil));
    check_op("MaxPool", 12, {x}, mx, 0, "MaxPool " + what);
    if (c.dil[0] == 1) {
      check_op("AveragePool", 11, {x}, at, 1e-6, "AveragePool " + what);
      std::vector<Attribute> inc = at;
      inc.push_back(attr("count_include_pad", 1));
      check_op("AveragePool", 11, {x}, inc, 1e-6, "AveragePool include pad " + what);
    }
  }
  Tensor x = rand_tensor(rng, {2, 7, 9, 11});
  check_op("GlobalAveragePool", 1, {x}, {}, 1e-6, "GlobalAveragePool");
  // GlobalAveragePool sums planes in chunks of 32768 / (H * W) planes (at least 1): 80 planes of
  // 13x13 are one chunk (193 planes), 1200 are 7 chunks, and 5 planes of 181x211 (over 32768
  // elements each) are a chunk each, so the last two split over 2 and 3 threads.
  for (Shape s : {Shape{2, 40, 13, 13}, Shape{2, 600, 13, 13}, Shape{1, 5, 181, 211}}) {
    Tensor xl = rand_tensor(rng, s);
    check_op("GlobalAveragePool", 1, {xl}, {}, 1e-6, "GlobalAveragePool " + shape_str(s));
    check_op("GlobalMaxPool", 1, {xl}, {}, 0, "GlobalMaxPool " + shape_str(s));
  }
}

TEST(KernelsVecOps, Resize) {
  std::mt19937 rng(10);
  for (Shape xs : {Shape{1, 3, 7, 9}, Shape{2, 16, 33, 35}})
    for (const char* mode : {"nearest", "linear"})
      for (float sc : {2.0f, 0.5f, 1.7f}) {
        Tensor x = rand_tensor(rng, xs);
        Tensor scales = Tensor::from_vector<float>({1.f, 1.f, sc, sc});
        std::string what = std::string("Resize ") + mode + " " + shape_str(xs) + " x" + std::to_string(sc);
        check_op("Resize", 13, {x, Tensor(), scales}, {attr("mode", mode)}, 1e-6, what, {false, true, true});
        check_op("Resize", 13, {x, Tensor(), scales}, {attr("mode", mode), attr("coordinate_transformation_mode", "align_corners")},
                 1e-6, what + " align_corners", {false, true, true});
      }
}

// Transpose: the tiled 2-D path against a direct index computation, for the perms it takes and
// some it does not.
TEST(KernelsVecOps, Transpose) {
  std::mt19937 rng(11);
  const std::vector<std::pair<Shape, Ints>> cases = {
      {{37, 53}, {1, 0}},           {{3, 17, 19}, {0, 2, 1}},     {{2, 5, 7, 9}, {0, 2, 3, 1}},
      {{2, 5, 7, 9}, {0, 3, 1, 2}}, {{2, 9, 4, 33}, {0, 2, 1, 3}}, {{1, 20, 1, 31}, {3, 1, 2, 0}},
      {{4, 6, 5}, {2, 1, 0}},
  };
  for (auto& [shape, perm] : cases) {
    Tensor x = rand_tensor(rng, shape);
    Shape os;
    for (int64_t a : perm) os.push_back(shape[size_t(a)]);
    std::vector<int64_t> xs(shape.size(), 1);
    for (size_t d = shape.size() - 1; d-- > 0;) xs[d] = xs[d + 1] * shape[d + 1];
    for (int threads : {1, 2, 3}) {
      Tensor y = run_op_threads("Transpose", 13, {x}, {attr("perm", perm)}, threads)[0].tensor;
      ASSERT_EQ(y.shape(), os);
      std::vector<int64_t> idx(os.size(), 0);
      for (int64_t i = 0; i < y.numel(); ++i) {
        int64_t off = 0;
        for (size_t d = 0; d < os.size(); ++d) off += idx[d] * xs[size_t(perm[d])];
        ASSERT_EQ(y.data<float>()[i], x.data<float>()[off]) << shape_str(shape) << " element " << i;
        for (size_t d = os.size(); d-- > 0;) {
          if (++idx[d] < os[d]) break;
          idx[d] = 0;
        }
      }
    }
  }
}

// The fused two-axis pass equals resizing H, then W, with two one-axis Resize nodes (the
// separable path), for every mode. (tf_crop_and_resize counts every axis as resized, so it
// always takes the separable path and is covered by the conformance tests.)
TEST(KernelsVecOps, ResizeFusedEqualsSeparable) {
  std::mt19937 rng(12);
  Tensor x = rand_tensor(rng, {2, 3, 11, 13});
  for (const char* mode : {"nearest", "linear", "cubic"})
    for (const char* ctm : {"half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"})
      for (float sc : {2.0f, 0.6f}) {
        std::vector<Attribute> at = {attr("mode", mode), attr("coordinate_transformation_mode", ctm)};
        Tensor fused = run_op_threads("Resize", 13, {x, Value(), Tensor::from_vector<float>({1, 1, sc, sc})}, at, 2)[0].tensor;
        Tensor h = run_op_threads("Resize", 13, {x, Value(), Tensor::from_vector<float>({1, 1, sc, 1})}, at, 1)[0].tensor;
        Tensor hw = run_op_threads("Resize", 13, {h, Value(), Tensor::from_vector<float>({1, 1, 1, sc})}, at, 1)[0].tensor;
        std::string what = std::string(mode) + " " + ctm + " x" + std::to_string(sc);
        ASSERT_EQ(fused.shape(), hw.shape()) << what;
        ASSERT_EQ(0, std::memcmp(fused.raw(), hw.raw(), fused.nbytes())) << what;
      }
}

TEST(KernelsVecOps, RecurrentLstmGru) {
  std::mt19937 rng(9);
  struct R {
    int64_t S, B, I, H;
    const char* dir;
  };
  for (const R& c : {R{1, 1, 64, 64, "forward"}, R{5, 3, 13, 17, "bidirectional"}, R{4, 2, 33, 9, "reverse"}}) {
    int64_t nd = std::string(c.dir) == "bidirectional" ? 2 : 1;
    std::string what = std::string(c.dir) + " S" + std::to_string(c.S) + " H" + std::to_string(c.H);
    Tensor X = rand_tensor(rng, {c.S, c.B, c.I}, -1.f, 1.f);
    Tensor W = rand_tensor(rng, {nd, 4 * c.H, c.I}, -0.3f, 0.3f), Rm = rand_tensor(rng, {nd, 4 * c.H, c.H}, -0.3f, 0.3f);
    Tensor B = rand_tensor(rng, {nd, 8 * c.H}, -0.5f, 0.5f);
    Tensor h0 = rand_tensor(rng, {nd, c.B, c.H}, -1.f, 1.f), c0 = rand_tensor(rng, {nd, c.B, c.H}, -1.f, 1.f);
    std::vector<Attribute> at = {attr("hidden_size", c.H), attr("direction", c.dir)};
    check_op("LSTM", 14, {X, W, Rm, B, Tensor(), h0, c0}, at, 2e-6, "LSTM " + what);
    Tensor Wg = rand_tensor(rng, {nd, 3 * c.H, c.I}, -0.3f, 0.3f), Rg = rand_tensor(rng, {nd, 3 * c.H, c.H}, -0.3f, 0.3f);
    Tensor Bg = rand_tensor(rng, {nd, 6 * c.H}, -0.5f, 0.5f);
    check_op("GRU", 14, {X, Wg, Rg, Bg, Tensor(), h0}, at, 2e-6, "GRU " + what);
  }
}

// Plain RNN's float32 path (the gemv row kernel for X_t W^T + Wb and H_{t-1} R^T + Rb, 4 rows a
// pass, then the activation per element) against the op on float64 input (plain loops in double),
// outputs Y and Y_h: forward, reverse and bidirectional; with and without initial_h and
// sequence_lens (a 0 length too: zero Y_h and Y); layout 1; Relu per direction and clip; hidden
// sizes around the 4-row blocks. The op runs without the pool (check_op still tries 1-3 threads).
TEST(KernelsVecOps, RecurrentRnn) {
  std::mt19937 rng(22);
  struct R {
    int64_t S, B, I, H;
    const char* dir;
    bool h0;
    std::vector<int32_t> lens;  // empty: no sequence_lens
    int64_t layout;
    Strings acts;  // empty: the default (Tanh)
    float clip;    // 0: none
  };
  const R cases[] = {
      {1, 1, 64, 64, "forward", false, {}, 0, {}, 0.f},
      {6, 2, 5, 1, "forward", true, {}, 0, {}, 0.f},
      {7, 3, 13, 17, "bidirectional", true, {7, 3, 5}, 0, {}, 0.f},
      {5, 4, 33, 9, "reverse", false, {5, 0, 2, 1}, 0, {}, 0.f},
      {8, 1, 19, 23, "reverse", true, {}, 0, {}, 0.f},
      {4, 3, 11, 6, "bidirectional", true, {}, 1, {"Relu", "Tanh"}, 0.f},
      {5, 2, 7, 10, "bidirectional", false, {4, 5}, 1, {}, 0.5f},
  };
  for (const R& c : cases) {
    const int64_t nd = std::string(c.dir) == "bidirectional" ? 2 : 1;
    const std::string what = std::string(c.dir) + " S" + std::to_string(c.S) + " B" + std::to_string(c.B) + " I" +
                             std::to_string(c.I) + " H" + std::to_string(c.H) + (c.h0 ? " h0" : "") +
                             (c.lens.empty() ? "" : " lens") + " layout " + std::to_string(c.layout) +
                             (c.acts.empty() ? "" : " " + c.acts[0]) + (c.clip > 0 ? " clip" : "");
    Tensor X = rand_tensor(rng, c.layout ? Shape{c.B, c.S, c.I} : Shape{c.S, c.B, c.I}, -1.f, 1.f);
    Tensor W = rand_tensor(rng, {nd, c.H, c.I}, -0.3f, 0.3f), Rm = rand_tensor(rng, {nd, c.H, c.H}, -0.3f, 0.3f);
    Tensor B = rand_tensor(rng, {nd, 2 * c.H}, -0.5f, 0.5f);
    Tensor h0 = c.h0 ? rand_tensor(rng, c.layout ? Shape{c.B, nd, c.H} : Shape{nd, c.B, c.H}, -1.f, 1.f) : Tensor();
    Tensor lens = c.lens.empty() ? Tensor() : Tensor::from_vector<int32_t>(c.lens, {c.B});
    std::vector<Attribute> at = {attr("hidden_size", c.H), attr("direction", c.dir), attr("layout", c.layout)};
    if (!c.acts.empty()) at.push_back(attr("activations", c.acts));
    if (c.clip > 0) at.push_back(attr("clip", c.clip));
    const std::vector<bool> as_is = {false, false, false, false, true, false};  // sequence_lens stays int32
    // 2e-6 as for LSTM / GRU: float sums of I + H (up to 128) products of |w x| <= 0.3, their
    // rounding carried through up to 8 steps (1.6e-7 measured).
    check_op("RNN", 14, {X, W, Rm, B, lens, h0}, at, 2e-6, "RNN Y " + what, as_is, 0);
    check_op("RNN", 14, {X, W, Rm, B, lens, h0}, at, 2e-6, "RNN Y_h " + what, as_is, 1);
  }
}


// The 2-D pooling kernel: every ISA build and 1-3 threads give bit-identical results (same
// operations in the same order), on widths around the vector lengths (tails), strides 1, 2 and 3,
// dilations, asymmetric padding and windows wider than the image; the portable build against the
// generic N-d reference is covered by KernelsVecOps.Pooling.
TEST(KernelsVec, Pool2dEveryIsaAndThreadCount) {
  std::mt19937 rng(13);
  struct G {
    int64_t H, W, kh, kw, sh, sw, dh, dw, ph, pw, ph_end, pw_end;
  };
  const G cases[] = {
      {7, 1, 3, 1, 1, 1, 1, 1, 1, 0, 1, 0},   {9, 16, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1},
      {9, 17, 3, 3, 2, 2, 1, 1, 1, 1, 0, 0},  {13, 33, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
      {11, 111, 3, 3, 2, 2, 1, 1, 0, 0, 0, 0}, {8, 31, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1},
      {10, 35, 3, 5, 3, 3, 2, 2, 2, 2, 2, 1}, {6, 7, 9, 11, 1, 1, 1, 1, 2, 3, 1, 3},
      {15, 64, 5, 5, 1, 2, 1, 2, 2, 4, 2, 4},
      // planes at most 16 wide (the AVX-512 build's one-register rows): ShuffleNet's 3x3 stride 2
      // on 14x14, a 7x7 window over 7x7, 4 rows (groups of 3 + 1) with dilation, dilated columns,
      // stride 3, rows with no valid tap
      {14, 14, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {7, 7, 7, 7, 1, 1, 1, 1, 0, 0, 0, 0},
      {5, 13, 4, 5, 1, 1, 2, 1, 2, 2, 2, 2},  {12, 16, 5, 3, 2, 1, 1, 3, 1, 2, 1, 2},
      {9, 11, 2, 4, 3, 3, 1, 1, 1, 3, 1, 3},  {3, 5, 2, 2, 1, 1, 1, 1, 3, 1, 3, 1},
      // 17 to 32 wide with at most 16 outputs (two registers per row): 28x28 3x3 stride 2, 16
      // outputs from 32 columns, a 7-wide dilated window at stride 3
      {28, 28, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1}, {6, 17, 2, 2, 2, 2, 1, 1, 0, 0, 0, 1},
      {9, 32, 3, 5, 1, 2, 1, 1, 1, 2, 1, 2},  {5, 20, 3, 7, 2, 3, 1, 2, 1, 3, 1, 3},
      // 2x2 stride 2 with every window inside (the AVX-512 build's two-row path): 16 outputs a
      // row, 16 and a tail of 1 or 15 (odd rows and columns left over), and a ceil-mode end pad
      // (the general path, a partial last window)
      {6, 32, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},  {7, 35, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},
      {4, 62, 2, 2, 2, 2, 1, 1, 0, 0, 0, 0},  {5, 97, 2, 2, 2, 2, 1, 1, 0, 0, 1, 1},
  };
  for (const G& c : cases)
    for (int avg = 0; avg < 2; ++avg)
      for (int incl = 0; incl < 1 + avg; ++incl) {
        kernels::Pool2D g;
        g.H = c.H, g.W = c.W, g.kh = c.kh, g.kw = c.kw, g.sh = c.sh, g.sw = c.sw, g.dh = c.dh, g.dw = c.dw;
        g.ph = c.ph, g.pw = c.pw, g.ph_end = c.ph_end, g.pw_end = c.pw_end;
        g.OH = (c.H + c.ph + c.ph_end - ((c.kh - 1) * c.dh + 1)) / c.sh + 1;
        g.OW = (c.W + c.pw + c.pw_end - ((c.kw - 1) * c.dw + 1)) / c.sw + 1;
        g.avg = avg != 0;
        g.count_include_pad = incl != 0;
        // 5 planes, then enough planes for 3 threads to get a chunk each: pool2d_f32 hands out
        // planes in chunks of grain = 65536 / (OH * (kh * W + kw * OW)) (at least 1), so
        // 2 * grain + 1 planes are three chunks.
        const int64_t grain = std::max<int64_t>(1, 65536 / (g.OH * (g.kh * g.W + g.kw * g.OW)));
        for (const int64_t planes : {int64_t(5), 2 * grain + 1}) {
          std::vector<float> x = random_floats(rng, planes * c.H * c.W, -3.f, 3.f);
          std::vector<float> ref(static_cast<size_t>(planes * g.OH * g.OW));
          kernels::pool2d_f32(nullptr, x.data(), ref.data(), planes, g, Isa::Portable);
          const std::string what = std::string(avg ? "avg" : "max") + (incl ? " incl" : "") + " H" +
                                   std::to_string(c.H) + " W" + std::to_string(c.W) + " k" + std::to_string(c.kh) +
                                   "x" + std::to_string(c.kw) + " s" + std::to_string(c.sw) + " planes " +
                                   std::to_string(planes);
          // Spot-check the portable build against a direct evaluation of the definition.
          for (int64_t p = 0; p < planes; ++p)
            for (int64_t oy = 0; oy < g.OH; ++oy)
              for (int64_t ox = 0; ox < g.OW; ++ox) {
                double acc = avg ? 0.0 : -INFINITY;
                int64_t valid = 0, padded = 0;
                for (int64_t ky = 0; ky < g.kh; ++ky)
                  for (int64_t kx = 0; kx < g.kw; ++kx) {
                    const int64_t iy = oy * g.sh - g.ph + ky * g.dh, ix = ox * g.sw - g.pw + kx * g.dw;
                    if (iy >= -g.ph && iy < g.H + g.ph_end && ix >= -g.pw && ix < g.W + g.pw_end) ++padded;
                    if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
                    ++valid;
                    const double v = x[size_t((p * g.H + iy) * g.W + ix)];
                    acc = avg ? acc + v : std::max(acc, v);
                  }
                const int64_t cnt = incl ? padded : valid;
                const double want = valid == 0 ? 0.0 : (avg ? acc / double(cnt) : acc);
                ASSERT_NEAR(ref[size_t((p * g.OH + oy) * g.OW + ox)], want, 1e-6 * (1 + std::fabs(want)))
                    << what << " at " << p << "," << oy << "," << ox;
              }
          for (Isa isa : isas())
            for (int threads : {1, 2, 3}) {
              std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads, 0) : nullptr;
              std::vector<float> y(ref.size(), 12345.f);
              kernels::pool2d_f32(pool.get(), x.data(), y.data(), planes, g, isa);
              ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)))
                  << what << " isa " << kernels::isa_name(isa) << " threads " << threads;
            }
        }
      }
}

// Row-major strides (in elements) of shape s.
std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (size_t d = s.size(); d-- > 1;) st[d - 1] = st[d] * s[d];
  return st;
}

// Calls f(out_index, in_offset) for each element of shape os in row-major order;
// in_offset = base + sum idx[d] * st[d].
template <class F>
void walk(const Shape& os, const std::vector<int64_t>& st, int64_t base, F&& f) {
  std::vector<int64_t> idx(os.size(), 0);
  const int64_t n = shape_numel(os);
  for (int64_t i = 0; i < n; ++i) {
    int64_t off = base;
    for (size_t d = 0; d < os.size(); ++d) off += idx[d] * st[d];
    f(i, off);
    for (size_t d = os.size(); d-- > 0;) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
}

// y has shape os and x's dtype, and element i of y is, byte for byte, element
// base + sum idx[d] * st[d] of x (idx: i's index in os).
void expect_gather(const Tensor& y, const Tensor& x, const Shape& os, const std::vector<int64_t>& st, int64_t base,
                   const std::string& what) {
  ASSERT_EQ(y.shape(), os) << what;
  ASSERT_EQ(y.dtype(), x.dtype()) << what;
  const size_t es = dtype_size(x.dtype());
  const auto* xb = static_cast<const uint8_t*>(x.raw());
  const auto* yb = static_cast<const uint8_t*>(y.raw());
  bool ok = true;
  int64_t bad = -1;
  walk(os, st, base, [&](int64_t i, int64_t off) {
    if (ok && std::memcmp(yb + size_t(i) * es, xb + size_t(off) * es, es) != 0) ok = false, bad = i;
  });
  ASSERT_TRUE(ok) << what << ": element " << bad;
}

// A tensor of dt (a fixed-size type) holding random bytes: every element's bit pattern is random,
// so a copy that misplaces elements or mixes bytes of two shows.
Tensor rand_bytes(std::mt19937& rng, DType dt, const Shape& s) {
  Tensor t(dt, s);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = uint8_t(rng() >> 24);
  return t;
}

// Copy-style ops (Transpose that keeps the last axes, Slice with steps, Split, Concat, Expand)
// against a direct index computation, on 1-3 threads, with sizes large enough to be split over
// the pool and odd ones; float32 and a 2-byte and an 8-byte type (the byte-level copy).
TEST(KernelsVecOps, CopyOpsAgainstIndexing) {
  std::mt19937 rng(14);
  auto typed = [&](const Tensor& f, DType dt) {
    if (dt == DType::Float) return f;
    Tensor t(dt, f.shape());
    for (int64_t i = 0; i < f.numel(); ++i) {
      if (dt == DType::Int64) t.data<int64_t>()[i] = int64_t(f.data<float>()[i] * 1000);
      else t.data<int16_t>()[i] = int16_t(f.data<float>()[i] * 1000);
    }
    return t;
  };
  for (DType dt : {DType::Float, DType::Int16, DType::Int64})
    for (int threads : {1, 2, 3}) {
      const std::string tw = std::string(" ") + dtype_name(dt) + " threads " + std::to_string(threads);
      // Transpose keeping the last axes (channel shuffle) and one with a strided inner axis.
      for (auto [shape, perm] : std::vector<std::pair<Shape, Ints>>{{{1, 4, 28, 56, 57}, {0, 2, 1, 3, 4}},
                                                                  {{3, 5, 7, 9}, {1, 0, 2, 3}},
                                                                  {{2, 3, 5, 7, 11}, {0, 3, 1, 4, 2}},
                                                                  {{1, 8, 40, 15}, {0, 2, 1, 3}}}) {
        Tensor x = typed(rand_tensor(rng, shape), dt);
        std::vector<int64_t> xs = strides_of(shape), st;
        Shape os;
        for (int64_t a : perm) os.push_back(shape[size_t(a)]), st.push_back(xs[size_t(a)]);
        Tensor y = run_op_threads("Transpose", 13, {x}, {attr("perm", perm)}, threads)[0].tensor;
        expect_gather(y, x, os, st, 0, "Transpose " + shape_str(shape) + tw);
      }
      // Slice with positive and negative steps.
      {
        Shape shape = {3, 67, 129};
        Tensor x = typed(rand_tensor(rng, shape), dt);
        Tensor y = run_op_threads("Slice", 13,
                                  {x, Tensor::from_vector<int64_t>({1, 60, 3}), Tensor::from_vector<int64_t>({3, 2, 128}),
                                   Tensor::from_vector<int64_t>({0, 1, 2}), Tensor::from_vector<int64_t>({1, -3, 2})},
                                  {}, threads)[0].tensor;
        std::vector<int64_t> xs = strides_of(shape);
        expect_gather(y, x, {2, 20, 63}, {xs[0], -3 * xs[1], 2}, 1 * xs[0] + 60 * xs[1] + 3, "Slice" + tw);
      }
      // Split along a middle axis into unequal parts.
      {
        Shape shape = {2, 37, 1031};
        Tensor x = typed(rand_tensor(rng, shape), dt);
        std::vector<Value> ys = run_op_threads("Split", 13, {x, Tensor::from_vector<int64_t>({5, 0, 32})}, {attr("axis", 1)}, threads, 3);
        std::vector<int64_t> xs = strides_of(shape);
        int64_t start = 0;
        for (int64_t i = 0; i < 3; ++i) {
          const int64_t len = i == 0 ? 5 : (i == 1 ? 0 : 32);
          expect_gather(ys[size_t(i)].tensor, x, {2, len, 1031}, xs, start * xs[1], "Split part " + std::to_string(i) + tw);
          start += len;
        }
      }
      // Concat along axis 1 of three inputs (outer rows 3), then Expand with a broadcast inner axis.
      {
        Tensor a = typed(rand_tensor(rng, {3, 5, 1001}), dt), b = typed(rand_tensor(rng, {3, 1, 1001}), dt),
               c = typed(rand_tensor(rng, {3, 17, 1001}), dt);
        Tensor y = run_op_threads("Concat", 13, {a, b, c}, {attr("axis", 1)}, threads)[0].tensor;
        const Tensor* parts[3] = {&a, &b, &c};
        const int64_t offs[3] = {0, 5, 6};
        for (int k = 0; k < 3; ++k) {
          // The part's elements sit in y at [i, offs[k] + j, l]: check by slicing y back out.
          const Tensor& p = *parts[k];
          Tensor back = run_op_threads("Slice", 13,
                                       {y, Tensor::from_vector<int64_t>({offs[k]}),
                                        Tensor::from_vector<int64_t>({offs[k] + p.dim(1)}), Tensor::from_vector<int64_t>({1})},
                                       {}, 1)[0].tensor;
          ASSERT_EQ(back.shape(), p.shape());
          ASSERT_EQ(0, std::memcmp(back.raw(), p.raw(), p.nbytes())) << "Concat part " << k << tw;
        }
        // One outer row (concat along axis 0) of ~480 KB: split into byte ranges across pieces.
        Tensor p = typed(rand_tensor(rng, {2, 40000}), dt), q = typed(rand_tensor(rng, {1, 40000}), dt);
        Tensor pq = run_op_threads("Concat", 13, {p, q}, {attr("axis", 0)}, threads)[0].tensor;
        ASSERT_EQ(pq.shape(), (Shape{3, 40000}));
        ASSERT_EQ(0, std::memcmp(pq.raw(), p.raw(), p.nbytes())) << "Concat axis 0" << tw;
        ASSERT_EQ(0, std::memcmp(static_cast<const uint8_t*>(pq.raw()) + p.nbytes(), q.raw(), q.nbytes()))
            << "Concat axis 0" << tw;
        Tensor e = run_op_threads("Expand", 13, {b, Tensor::from_vector<int64_t>({3, 4, 1001})}, {}, threads)[0].tensor;
        std::vector<int64_t> bs = strides_of(b.shape());
        expect_gather(e, b, {3, 4, 1001}, {bs[0], 0, 1}, 0, "Expand" + tw);
      }
    }
}

// Transpose of 1-, 2- and 8-byte elements (uint8 / int8, float16 / int16, int64 / double) against
// a direct index computation, on 1-3 threads. transpose_fast takes a perm that is a batched 2-D
// transpose once size-1 axes are dropped and adjacent ones merged: 16x16 tiles, tile rows of all
// batches in chunks of 16384 / (16 * C) (C: the merged inner input extent), so each of these is
// several chunks: [37, 1001] (3 tile rows, a chunk each), [3, 67, 129] (15 in chunks of 7), NCHW
// -> NHWC [2, 53, 9, 31] (8 in chunks of 3), NHWC -> NCHW [2, 45, 47, 21] (266 in chunks of 48),
// [1, 300, 1, 77] with size-1 axes (19 in chunks of 13). The others take the byte-level strided
// copy: fewer than 64 elements, and a full reversal (rows gathered with inner stride 41 * 67, in
// chunks of 64 KB: 2, 3 and 12 chunks for 1, 2 and 8 bytes).
TEST(KernelsVecOps, TransposeEveryElementSize) {
  std::mt19937 rng(23);
  const std::vector<std::pair<Shape, Ints>> cases = {
      {{37, 1001}, {1, 0}},           {{3, 67, 129}, {0, 2, 1}},       {{2, 53, 9, 31}, {0, 2, 3, 1}},
      {{2, 45, 47, 21}, {0, 3, 1, 2}}, {{1, 300, 1, 77}, {3, 2, 1, 0}}, {{5, 7}, {1, 0}},
      {{33, 41, 67}, {2, 1, 0}},
  };
  for (DType dt : {DType::Uint8, DType::Int8, DType::Float16, DType::Int16, DType::Int64, DType::Double})
    for (auto& [shape, perm] : cases) {
      Tensor x = rand_bytes(rng, dt, shape);
      std::vector<int64_t> xs = strides_of(shape), st;
      Shape os;
      for (int64_t a : perm) os.push_back(shape[size_t(a)]), st.push_back(xs[size_t(a)]);
      for (int threads : {1, 2, 3}) {
        Tensor y = run_op_threads("Transpose", 13, {x}, {attr("perm", perm)}, threads)[0].tensor;
        ASSERT_NO_FATAL_FAILURE(expect_gather(y, x, os, st, 0,
                                              std::string("Transpose ") + dtype_name(dt) + " " + shape_str(shape) +
                                                  " perm " + shape_str(perm) + " threads " + std::to_string(threads)));
      }
    }
}

// The byte-level copies with 1-byte elements (uint8), sized so that their 64 KB chunks split over
// 2 and 3 threads: Slice with steps (rows gathered with inner stride 2: 532 rows of 257 bytes,
// chunks of 255 rows) and with a contiguous inner run (memcpy: 228 rows of 1000 bytes, chunks of
// 65), Split along the last axis into unequal parts (rows of 500, 1 and 530 bytes), Expand of a
// middle axis (160 rows of 1001 bytes) and of the last one (stride 0: 300 rows of 257 bytes), and
// Concat (its own copier: 64 KB ranges of output rows) along axis 1 (40 rows of 21021 bytes, 3 a
// range) and axis 0 (one row of 210003 bytes: 4 ranges); against a direct index computation.
TEST(KernelsVecOps, CopyOpsOneByteElements) {
  std::mt19937 rng(24);
  const DType u8 = DType::Uint8;
  auto i64 = [](Ints v) { return Tensor::from_vector<int64_t>(v); };
  for (int threads : {1, 2, 3}) {
    const std::string tw = " threads " + std::to_string(threads);
    {
      const Shape shape = {9, 400, 517};
      Tensor x = rand_bytes(rng, u8, shape);
      const std::vector<int64_t> xs = strides_of(shape);
      Tensor y = run_op_threads("Slice", 13, {x, i64({1, 399, 3}), i64({9, 0, 516}), i64({0, 1, 2}), i64({2, -3, 2})}, {},
                                threads)[0].tensor;
      ASSERT_NO_FATAL_FAILURE(
          expect_gather(y, x, {4, 133, 257}, {2 * xs[0], -3 * xs[1], 2}, xs[0] + 399 * xs[1] + 3, "Slice steps" + tw));
    }
    {
      const Shape shape = {6, 50, 1031};
      Tensor x = rand_bytes(rng, u8, shape);
      Tensor y = run_op_threads("Slice", 13, {x, i64({7, 0}), i64({45, 1000}), i64({1, 2})}, {}, threads)[0].tensor;
      ASSERT_NO_FATAL_FAILURE(expect_gather(y, x, {6, 38, 1000}, strides_of(shape), 7 * 1031, "Slice contiguous" + tw));
    }
    {
      const Shape shape = {5, 41, 1031};
      Tensor x = rand_bytes(rng, u8, shape);
      const int64_t parts[3] = {500, 1, 530};
      std::vector<Value> ys = run_op_threads("Split", 13, {x, i64({parts[0], parts[1], parts[2]})}, {attr("axis", 2)}, threads, 3);
      int64_t start = 0;
      for (int i = 0; i < 3; ++i) {
        ASSERT_NO_FATAL_FAILURE(expect_gather(ys[size_t(i)].tensor, x, {5, 41, parts[i]}, strides_of(shape), start,
                                              "Split part " + std::to_string(i) + tw));
        start += parts[i];
      }
    }
    {
      Tensor b = rand_bytes(rng, u8, {40, 1, 1001}), c = rand_bytes(rng, u8, {300, 1});
      Tensor e = run_op_threads("Expand", 13, {b, i64({40, 4, 1001})}, {}, threads)[0].tensor;
      ASSERT_NO_FATAL_FAILURE(expect_gather(e, b, {40, 4, 1001}, {1001, 0, 1}, 0, "Expand axis 1" + tw));
      Tensor f = run_op_threads("Expand", 13, {c, i64({300, 257})}, {}, threads)[0].tensor;
      ASSERT_NO_FATAL_FAILURE(expect_gather(f, c, {300, 257}, {1, 0}, 0, "Expand last axis" + tw));
    }
    // Concat: each input is, element for element, its block of the output.
    for (const auto& [axis, shapes] : std::vector<std::pair<int64_t, std::vector<Shape>>>{
             {1, {{40, 3, 1001}, {40, 1, 1001}, {40, 17, 1001}}}, {0, {{2, 70001}, {1, 70001}}}}) {
      std::vector<Tensor> in;
      std::vector<Value> vals;
      for (const Shape& sh : shapes) in.push_back(rand_bytes(rng, u8, sh)), vals.push_back(in.back());
      Tensor y = run_op_threads("Concat", 13, vals, {attr("axis", axis)}, threads)[0].tensor;
      Shape os = shapes[0];
      os[size_t(axis)] = 0;
      for (const Shape& sh : shapes) os[size_t(axis)] += sh[size_t(axis)];
      ASSERT_EQ(y.shape(), os) << "Concat axis " << axis << tw;
      const std::vector<int64_t> ys = strides_of(os);
      int64_t at = 0;
      for (size_t k = 0; k < in.size(); ++k) {
        ASSERT_NO_FATAL_FAILURE(expect_gather(in[k], y, in[k].shape(), ys, at * ys[size_t(axis)],
                                              "Concat axis " + std::to_string(axis) + " input " + std::to_string(k) + tw));
        at += in[k].dim(int(axis));
      }
    }
  }
}


// LRN's float32 path (window sums in float, the beta 0.75 / 0.5 / 1 special cases and powf) against
// the double reference, on odd channel counts and spatial sizes over one and several blocks of
// 256 positions, 1-3 threads.
TEST(KernelsVecOps, Lrn) {
  std::mt19937 rng(15);
  for (Shape s : {Shape{1, 7, 5, 3}, Shape{2, 16, 13, 11}, Shape{1, 33, 23, 29}, Shape{3, 5}})
    for (float beta : {0.75f, 0.5f, 1.0f, 0.6f})
      for (int64_t size : {1, 4, 5}) {
        Tensor x = rand_tensor(rng, s, -4.f, 4.f);
        std::vector<Attribute> at = {attr("size", size), attr("alpha", 0.02f), attr("beta", beta), attr("bias", 1.5f)};
        check_op("LRN", 13, {x}, at, 2e-6,
                 "LRN " + shape_str(s) + " beta " + std::to_string(beta) + " size " + std::to_string(size));
      }
}


// Reductions: the float32 fast path ([outer, R, inner] layouts after merging dims) against the
// double reference, for every kind it takes, with and without keepdims, on odd sizes, inner
// blocks over 256 and layouts it does not take (reference path), 1-3 threads.
TEST(KernelsVecOps, Reductions) {
  std::mt19937 rng(16);
  const std::vector<std::pair<Shape, Ints>> cases = {
      {{3, 5, 33}, {2}},          {{3, 5, 33}, {1}},       {{3, 5, 33}, {0}},      {{2, 7, 300}, {1}},
      {{1, 96, 31, 17}, {2, 3}},  {{2, 3, 4, 5}, {1, 2}},  {{2, 3, 4, 5}, {0, 2}}, {{1, 1, 9, 1}, {2}},
      {{4, 1, 6}, {1}},           {{70001}, {0}},
  };
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1", "ReduceL2", "ReduceSumSquare"})
    for (auto& [shape, axes] : cases)
      for (int keep : {0, 1}) {
        Tensor x = rand_tensor(rng, shape, -2.f, 2.f);
        check_op(op, 18, {x, Tensor::from_vector<int64_t>(axes)}, {attr("keepdims", keep)}, 2e-6,
                 std::string(op) + " " + shape_str(shape) + " axes " + shape_str(axes) + " keepdims " + std::to_string(keep),
                 {false, true});
      }
}


// BatchNormalization folds constant parameters once at load (prepare): a run with those very
// tensors gives the bits of the run-time folding, and a run with other parameter tensors (an
// initializer overridden by a feed) folds again instead of using the stale load-time values.
TEST(KernelsVecOps, BatchNormFoldedAtLoad) {
  std::mt19937 rng(17);
  const int64_t C = 13;
  Tensor x = rand_tensor(rng, {2, C, 7, 9});
  Tensor sc = rand_tensor(rng, {C}, 0.5f, 1.5f), bi = rand_tensor(rng, {C}), mu = rand_tensor(rng, {C}),
         var = rand_tensor(rng, {C}, 0.1f, 2.f);
  Node n;
  n.name = "bn";
  n.op_type = "BatchNormalization";
  n.opset = 15;
  n.inputs = {0, 1, 2, 3, 4};
  n.outputs = {100};
  const KernelFactory* f = OpRegistry::instance().find("", "BatchNormalization", 15);
  ASSERT_NE(f, nullptr);
  auto run = [&](OpKernel& k, const std::vector<Tensor>& in) {
    std::vector<Value> vals;
    for (const Tensor& t : in) vals.push_back(Value(t));
    std::vector<const Value*> ins;
    for (auto& v : vals) ins.push_back(&v);
    std::vector<Value> outs(1);
    RunContext rc;
    KernelContext ctx(n, ins, outs, {}, rc);
    k.compute(ctx);
    return outs[0].tensor;
  };
  std::unique_ptr<OpKernel> plain = (*f)(n), prepared = (*f)(n);
  const Tensor* consts[5] = {nullptr, &sc, &bi, &mu, &var};
  prepared->prepare(PrepareContext{n, std::span<const Tensor* const>(consts, 5), 1});
  EXPECT_EQ(prepared->packed_bytes(), size_t(2 * C) * sizeof(float));
  Tensor want = run(*plain, {x, sc, bi, mu, var});
  Tensor got = run(*prepared, {x, sc, bi, mu, var});
  ASSERT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes()));
  // Other parameter tensors: the prepared kernel must not use its load-time folding.
  Tensor sc2 = rand_tensor(rng, {C}, 0.5f, 1.5f);
  Tensor want2 = run(*plain, {x, sc2, bi, mu, var});
  Tensor got2 = run(*prepared, {x, sc2, bi, mu, var});
  ASSERT_EQ(0, std::memcmp(got2.raw(), want2.raw(), want2.nbytes()));
  ASSERT_NE(0, std::memcmp(got2.raw(), want.raw(), want.nbytes()));
}

// basalt::FusedBatchNormalization on float32 (per plane: the affine row kernel, then the
// activation's row kernel in place) against BatchNormalization followed by the activation op, bit
// for bit (the same row kernels on the same values; they compute each element alike wherever it
// falls in a row), for every activation the fused op takes, with default and given params, at 1-3
// threads. Planes go to the pool in chunks of 16384 / S planes (S: plane size), so [2, 131, 13, 11]
// (262 planes of 143, chunks of 114) and [7001, 5] (planes of one element, chunks of 16384) are 3
// chunks that start mid-image, and [1, 3, 131, 129] a chunk per plane; odd channel counts.
TEST(KernelsVecOps, FusedBatchNormMatchesBatchNormThenActivation) {
  std::mt19937 rng(21);
  struct A {
    const char* name;  // the activation attribute
    Floats params;     // activation_params
    const char* op;    // the standalone op (nullptr: none)
    int opset;
    std::vector<Attribute> attrs;
  };
  const std::vector<A> acts = {
      {"", {}, nullptr, 0, {}},
      {"Relu", {}, "Relu", 14, {}},
      {"Clip", {-0.5f, 0.75f}, "Clip", 6, {attr("min", -0.5f), attr("max", 0.75f)}},
      {"Clip", {0.f}, "Clip", 6, {attr("min", 0.f)}},
      {"HardSigmoid", {}, "HardSigmoid", 6, {}},
      {"HardSigmoid", {0.3f, 0.4f}, "HardSigmoid", 6, {attr("alpha", 0.3f), attr("beta", 0.4f)}},
      {"HardSwish", {}, "HardSwish", 14, {}},
      {"Sigmoid", {}, "Sigmoid", 13, {}},
      {"LeakyRelu", {}, "LeakyRelu", 16, {}},
      {"LeakyRelu", {0.2f}, "LeakyRelu", 16, {attr("alpha", 0.2f)}},
      {"Tanh", {}, "Tanh", 13, {}},
  };
  for (const Shape& s : {Shape{1, 7, 5, 3}, Shape{2, 131, 13, 11}, Shape{1, 3, 131, 129}, Shape{7001, 5}, Shape{2, 9, 4, 3, 5}}) {
    const int64_t C = s[1];
    Tensor x = rand_tensor(rng, s);
    Tensor sc = rand_tensor(rng, {C}, 0.5f, 1.5f), bi = rand_tensor(rng, {C}), mu = rand_tensor(rng, {C}),
           var = rand_tensor(rng, {C}, 0.1f, 2.f);
    for (int threads : {1, 2, 3}) {
      Tensor bn = run_op_threads("BatchNormalization", 15, {x, sc, bi, mu, var}, {attr("epsilon", 1e-3f)}, threads)[0].tensor;
      for (const A& a : acts) {
        std::vector<Attribute> fat = {attr("epsilon", 1e-3f), attr("activation", a.name)};
        if (!a.params.empty()) fat.push_back(attr("activation_params", a.params));
        const std::string what = std::string("FusedBatchNormalization ") + (*a.name ? a.name : "none") + " " +
                                 std::to_string(a.params.size()) + " params " + shape_str(s);
        Tensor want = a.op ? run_op_threads(a.op, a.opset, {bn}, a.attrs, threads)[0].tensor : bn;
        Tensor got = run_op("FusedBatchNormalization", 1, {x, sc, bi, mu, var}, fat, 1, "basalt", threads)[0].tensor;
        ASSERT_EQ(got.dtype(), DType::Float) << what;
        ASSERT_EQ(got.shape(), s) << what;
        ASSERT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes())) << what << " threads " << threads;
      }
    }
  }
}

// basalt::FusedBatchNormalization on float64 keeps float64 precision: against the double
// BatchNormalization followed by the double activation op (the fused op used to round its result
// to float32 before the activation: 7.7e-10 off after Relu, 1e-8 after Sigmoid).
TEST(KernelsVecOps, FusedBatchNormFloat64KeepsDoublePrecision) {
  std::mt19937 rng(22);
  struct A {
    const char* name;
    Floats params;
    const char* op;
    int opset;
    std::vector<Attribute> attrs;
  };
  const std::vector<A> acts = {
      {"Relu", {}, "Relu", 14, {}},
      {"Clip", {-0.5f, 0.75f}, "Clip", 6, {attr("min", -0.5f), attr("max", 0.75f)}},
      {"HardSigmoid", {0.3f, 0.4f}, "HardSigmoid", 6, {attr("alpha", 0.3f), attr("beta", 0.4f)}},
      {"HardSwish", {}, "HardSwish", 14, {}},
      {"Sigmoid", {}, "Sigmoid", 13, {}},
      {"LeakyRelu", {0.25f}, "LeakyRelu", 16, {attr("alpha", 0.25f)}},
      {"Tanh", {}, "Tanh", 13, {}},
  };
  auto dbl = [&](Shape s, double lo, double hi) {
    std::uniform_real_distribution<double> d(lo, hi);
    Tensor t(DType::Double, std::move(s));
    for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = d(rng);
    return t;
  };
  const Shape s = {2, 5, 7, 3};
  Tensor x = dbl(s, -4, 4), sc = dbl({5}, 0.5, 1.5), bi = dbl({5}, -1, 1), mu = dbl({5}, -1, 1), var = dbl({5}, 0.1, 2);
  Tensor bn = run_op("BatchNormalization", 15, {x, sc, bi, mu, var}, {attr("epsilon", 1e-3f)})[0].tensor;
  for (const A& a : acts) {
    std::vector<Attribute> fat = {attr("epsilon", 1e-3f), attr("activation", a.name)};
    if (!a.params.empty()) fat.push_back(attr("activation_params", a.params));
    Tensor want = run_op(a.op, a.opset, {bn}, a.attrs)[0].tensor;
    Tensor got = run_op("FusedBatchNormalization", 1, {x, sc, bi, mu, var}, fat, 1, "basalt")[0].tensor;
    ASSERT_EQ(got.dtype(), DType::Double) << a.name;
    ASSERT_EQ(got.shape(), s) << a.name;
    for (int64_t i = 0; i < got.numel(); ++i)
      ASSERT_NEAR(got.data<double>()[i], want.data<double>()[i], 1e-14) << a.name << " element " << i;
  }
}

}  // namespace
}  // namespace basalt
