// Differential tests of the Winograd convolution (src/kernels/winograd.hpp) against the direct
// reference conv (kernels::conv2d_reference): F(2x2, 3x3) and F(4x4, 3x3), every ISA this CPU
// has, odd image sizes (partial tiles on the right and bottom), padding 0/1/2 and asymmetric,
// channel counts off the vector width, several images, bias / residual / activations, and 1, 2
// and 3 threads. The tolerance is relative to sum |w*x| behind each output.
#include "kernel_test_util.hpp"
#include "op_tester.hpp"

#include "kernels/winograd.hpp"
#include "core/thread_pool.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace basalt;
using namespace basalt::test;
namespace k = basalt::kernels;

namespace {

struct Case {
  int64_t N, C, H, W, M, pt, pl, pb, pr;
};

k::Conv2dShape shape_of(const Case& c) {
  k::Conv2dShape s;
  s.N = c.N;
  s.C = c.C;
  s.H = c.H;
  s.W = c.W;
  s.M = c.M;
  s.KH = s.KW = 3;
  s.pt = c.pt;
  s.pl = c.pl;
  s.OH = c.H + c.pt + c.pb - 2;
  s.OW = c.W + c.pl + c.pr - 2;
  return s;
}

// Every fused activation in turn (the output transforms apply them per ISA).
k::Activation act_of(int i) {
  k::Activation a;
  switch (i % 8) {
    case 0: break;
    case 1: a.kind = k::ActKind::Relu; break;
    case 2: a.kind = k::ActKind::Clip; a.a = -0.5f; a.b = 0.75f; break;
    case 3: a.kind = k::ActKind::Sigmoid; break;
    case 4: a.kind = k::ActKind::LeakyRelu; a.a = 0.1f; break;
    case 5: a.kind = k::ActKind::HardSigmoid; a.a = 0.2f; a.b = 0.5f; break;
    case 6: a.kind = k::ActKind::HardSwish; break;
    default: a.kind = k::ActKind::Tanh; break;
  }
  return a;
}

// Largest |got - want| / (sum |w*x| + 1) over the output, and the first element not finite.
double max_rel_error(const std::vector<float>& got, const std::vector<float>& want, const std::vector<float>& absum) {
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    worst = std::max(worst, std::fabs(double(got[i]) - double(want[i])) / (double(absum[i]) + 1.0));
  }
  return worst;
}

// want = the direct reference conv; absum = sum |w*x| behind each output (the error scale).
void reference_with_absum(const k::Conv2dShape& s, const std::vector<float>& x, const std::vector<float>& w,
                          const float* bias, const float* resid, const k::Activation& act, std::vector<float>& want,
                          std::vector<float>& absum) {
  const size_t ysz = static_cast<size_t>(s.N * s.M * s.OH * s.OW);
  want.assign(ysz, 0.f);
  absum.assign(ysz, 0.f);
  k::conv2d_reference(s, x.data(), w.data(), bias, resid, act, want.data());
  std::vector<float> xa(x.size()), wa(w.size());
  for (size_t i = 0; i < x.size(); ++i) xa[i] = std::fabs(x[i]);
  for (size_t i = 0; i < w.size(); ++i) wa[i] = std::fabs(w[i]);
  k::conv2d_reference(s, xa.data(), wa.data(), nullptr, nullptr, k::Activation{}, absum.data());
}

// NCHW [N, C, HW] -> blocked [N, CB, HW, 16] (padding channels 0).
std::vector<float> to_blocked(const std::vector<float>& v, int64_t N, int64_t C, int64_t HW) {
  const int64_t CB = (C + 15) / 16;
  std::vector<float> b(static_cast<size_t>(N * CB * HW * 16), 0.f);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < HW; ++p) b[size_t(((n * CB + c / 16) * HW + p) * 16 + c % 16)] = v[size_t((n * C + c) * HW + p)];
  return b;
}

// Runs conv2d_winograd on shape `s` (NCHW or blocked) for both tiles, every ISA and every pool,
// on fresh random data, and compares each output with the reference conv. The reference applies
// act without its post affine; the test applies v * post_mul + post_add itself, and the error
// bound (relative to sum |w*x|) scales by max(1, |post_mul|), the factor the affine puts on the
// conv's rounding error. Blocked outputs must have 0 in the padding lanes (post_add included).
// Returns the number of runs compared.
int check_winograd(const k::Conv2dShape& s, std::mt19937& rng, const k::Activation& act, bool with_bias,
                   bool with_resid, bool blocked, const std::vector<std::unique_ptr<ThreadPool>>& pools,
                   const std::string& what) {
  auto x = rnd(s.N * s.C * s.H * s.W, rng), w = rnd(s.M * s.C * 9, rng), b = rnd(s.M, rng);
  const int64_t OHW = s.OH * s.OW, ysz = s.N * s.M * OHW, OB = (s.M + 15) / 16;
  auto res = rnd(ysz, rng);
  const float* bias = with_bias ? b.data() : nullptr;
  const float* resid = with_resid ? res.data() : nullptr;
  k::Activation base = act;
  base.post = false;
  base.post_mul = 1.f;
  base.post_add = -0.f;
  std::vector<float> want, absum;
  reference_with_absum(s, x, w, bias, resid, base, want, absum);
  double scale = 1.0;
  if (act.post) {
    for (float& v : want) v = v * act.post_mul + act.post_add;
    scale = std::max(1.0, double(std::fabs(act.post_mul)));
  }
  const std::vector<float> xb = blocked ? to_blocked(x, s.N, s.C, s.H * s.W) : std::vector<float>{};
  const std::vector<float> rb = blocked ? to_blocked(res, s.N, s.M, OHW) : std::vector<float>{};
  int runs = 0;
  for (int tile : {2, 4}) {
    // as in MatchesReferenceOnOddShapes: F(4x4) measured up to 2.4e-6, F(2x2) up to 1.3e-7
    const double tol = (tile == 4 ? 1e-5 : 1e-6) * scale;
    for (k::Isa isa : isas()) {
      const k::GemmArch& g = k::gemm_arch(isa);
      const k::WinogradWeights u = k::winograd_pack_weights(g, s, w.data(), tile, blocked);
      EXPECT_EQ(u.blocked, blocked);
      for (auto& pool : pools) {
        const int threads = pool ? pool->threads() : 1;
        const std::string where = what + " F(" + std::to_string(tile) + "x" + std::to_string(tile) + ",3x3) isa " +
                                  k::isa_name(isa) + " threads " + std::to_string(threads);
        const size_t wsz = static_cast<size_t>(k::winograd_workspace_floats(g, s, tile, threads));
        std::vector<float> ws(wsz + 64, 12345.f);
        std::vector<float> got(static_cast<size_t>(blocked ? s.N * OB * OHW * 16 : ysz), std::nanf(""));
        k::conv2d_winograd(g, s, blocked ? xb.data() : x.data(), u, bias,
                           resid ? (blocked ? rb.data() : res.data()) : nullptr, act, got.data(), pool.get(), ws.data());
        EXPECT_TRUE(std::all_of(ws.begin() + long(wsz), ws.end(), [](float f) { return f == 12345.f; }))
            << where << ": wrote past the workspace";
        if (blocked) {
          std::vector<float> plain(static_cast<size_t>(ysz));
          bool pad_zero = true;
          for (int64_t n = 0; n < s.N; ++n)
            for (int64_t m = 0; m < OB * 16; ++m)
              for (int64_t p = 0; p < OHW; ++p) {
                const float v = got[size_t(((n * OB + m / 16) * OHW + p) * 16 + m % 16)];
                if (m < s.M) plain[size_t((n * s.M + m) * OHW + p)] = v;
                else pad_zero = pad_zero && v == 0.f;
              }
          EXPECT_TRUE(pad_zero) << where << ": padding lanes not 0";
          got.swap(plain);
        }
        EXPECT_LE(max_rel_error(got, want, absum), tol) << where;
        ++runs;
      }
    }
  }
  return runs;
}

// A random Winograd-applicable shape: N 1-2, C and M from 16 (mostly off the vector width; now
// and then M past one 128-row output-channel pass), images from 1x1 up (odd sizes, partial tiles,
// now and then wide rows), each pad 0-2 (asymmetric), and at least one output pixel.
k::Conv2dShape random_winograd_shape(std::mt19937& rng) {
  auto uni = [&](int64_t lo, int64_t hi) { return lo + int64_t(rng() % uint32_t(hi - lo + 1)); };
  for (;;) {
    Case c;
    c.N = uni(1, 2);
    c.C = uni(16, 48);
    c.M = rng() % 8 == 0 ? uni(120, 150) : uni(16, 50);
    c.H = uni(1, 20);
    c.W = rng() % 6 == 0 ? uni(40, 75) : uni(1, 20);
    c.pt = uni(0, 2), c.pl = uni(0, 2), c.pb = uni(0, 2), c.pr = uni(0, 2);
    const k::Conv2dShape s = shape_of(c);
    if (s.OH >= 1 && s.OW >= 1) return s;
  }
}

// A random fused activation: every kind in turn with a post affine on every other call
// (negative scales included).
k::Activation random_activation(std::mt19937& rng) {
  k::Activation a = act_of(int(rng() % 8));
  if (rng() % 2) {
    std::uniform_real_distribution<float> d(-1.5f, 1.5f);
    a.post = true;
    a.post_mul = d(rng);
    a.post_add = d(rng);
  }
  return a;
}

std::string shape_desc(const k::Conv2dShape& s) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "N %lld C %lld %lldx%lld M %lld pads t%lld l%lld -> %lldx%lld", (long long)s.N,
                (long long)s.C, (long long)s.H, (long long)s.W, (long long)s.M, (long long)s.pt, (long long)s.pl,
                (long long)s.OH, (long long)s.OW);
  return buf;
}

// Shapes that reach every path of the driver and the transforms.
std::vector<Case> odd_cases() {
  return {
      {1, 16, 8, 8, 16, 1, 1, 1, 1},      // exact tiles (F4: 2x2 tiles)
      {1, 17, 9, 11, 19, 1, 1, 1, 1},     // partial tiles right and bottom, C/M off the vector width
      {2, 16, 13, 7, 33, 0, 0, 0, 0},     // no padding, N = 2, tiles spanning images in one block
      {1, 20, 5, 70, 18, 1, 1, 1, 1},     // wide rows: segments split at B panels
      {1, 16, 3, 3, 16, 1, 1, 1, 1},      // output of a single (partial) tile
      {1, 24, 1, 9, 20, 1, 1, 1, 1},      // one input row
      {1, 16, 10, 12, 21, 2, 0, 1, 2},    // asymmetric padding, 2 on one side
      {1, 35, 30, 30, 150, 1, 1, 1, 1},   // M beyond one output-channel pass (128 rows)
      {3, 16, 17, 17, 16, 1, 1, 1, 1},    // several blocks of 64 tiles
      {1, 64, 18, 18, 70, 1, 1, 1, 1},    // K = C = 64
      {1, 16, 56, 56, 16, 1, 1, 1, 1},    // 196 tiles: at 2 threads blocks balanced per thread (48+48 | 48+52)
      {3, 16, 30, 30, 20, 1, 1, 1, 1},    // 192 tiles over 3 images, balanced blocks crossing images
  };
}

}  // namespace

TEST(Winograd, Applicability) {
  k::Conv2dShape s = shape_of({1, 16, 8, 8, 16, 1, 1, 1, 1});
  EXPECT_TRUE(k::winograd_applicable(s));
  k::Conv2dShape t = s;
  t.sh = 2;
  EXPECT_FALSE(k::winograd_applicable(t));
  t = s;
  t.dw = 2;
  EXPECT_FALSE(k::winograd_applicable(t));
  t = s;
  t.G = 2;
  EXPECT_FALSE(k::winograd_applicable(t));
  t = s;
  t.KH = 5;
  EXPECT_FALSE(k::winograd_applicable(t));
  t = s;
  t.C = 8;
  EXPECT_FALSE(k::winograd_applicable(t));
  t = s;
  t.M = 15;
  EXPECT_FALSE(k::winograd_applicable(t));
  EXPECT_EQ(k::winograd_choose_tile(t), 0);
  EXPECT_EQ(k::winograd_choose_tile(t, 56 * 56), 0);
  if (!std::getenv("BASALT_WINOGRAD")) {
    // a known image size decides: F(4x4) from 20x20 on, im2col below
    EXPECT_EQ(k::winograd_choose_tile(s, 56 * 56), 4);
    EXPECT_EQ(k::winograd_choose_tile(s, 20 * 20), 4);
    EXPECT_EQ(k::winograd_choose_tile(s, 14 * 14), 0);
    EXPECT_EQ(k::winograd_choose_tile(s, 7 * 7), 0);
  }
  // the workspace does not grow with the image
  k::Conv2dShape big = s;
  big.H = big.W = big.OH = big.OW = 1000;
  big.N = 4;
  const k::GemmArch& g = k::gemm_arch_best();
  EXPECT_EQ(k::winograd_workspace_floats(g, s, 4, 2), k::winograd_workspace_floats(g, big, 4, 2));
  EXPECT_GT(k::winograd_workspace_floats(g, s, 4, 2), k::winograd_workspace_floats(g, s, 4, 1));
}

TEST(Winograd, MatchesReferenceOnOddShapes) {
  const std::vector<Case> cases = odd_cases();
  std::mt19937 rng(5);
  const std::vector<std::unique_ptr<ThreadPool>> pools = test::pools();
  int idx = 0;
  for (const Case& c : cases) {
    const k::Conv2dShape s = shape_of(c);
    ASSERT_TRUE(k::winograd_applicable(s));
    auto x = rnd(s.N * s.C * s.H * s.W, rng), w = rnd(s.M * s.C * 9, rng), b = rnd(s.M, rng);
    const int64_t ysz = s.N * s.M * s.OH * s.OW;
    auto res = rnd(ysz, rng);
    const k::Activation act = act_of(idx);
    const float* bias = idx % 2 ? b.data() : nullptr;
    const float* resid = idx % 3 == 1 ? res.data() : nullptr;
    std::vector<float> want, absum;
    reference_with_absum(s, x, w, bias, resid, act, want, absum);
    for (int tile : {2, 4}) {
      // F(4x4, 3x3) rounds more (constants up to 8 and 1/24; measured up to 2.4e-6), F(2x2, 3x3)
      // like a direct conv (measured up to 1.3e-7)
      const double tol = tile == 4 ? 1e-5 : 1e-6;
      for (k::Isa isa : isas()) {
        const k::GemmArch& g = k::gemm_arch(isa);
        const k::WinogradWeights u = k::winograd_pack_weights(g, s, w.data(), tile);
        EXPECT_GT(u.bytes(), 0u);
        for (auto& pool : pools) {
          const int threads = pool ? pool->threads() : 1;
          // sentinels past the declared workspace catch writes beyond it
          const size_t wsz = static_cast<size_t>(k::winograd_workspace_floats(g, s, tile, threads));
          std::vector<float> ws(wsz + 64, 12345.f);
          std::vector<float> got(static_cast<size_t>(ysz), std::nanf(""));
          k::conv2d_winograd(g, s, x.data(), u, bias, resid, act, got.data(), pool.get(), ws.data());
          EXPECT_TRUE(std::all_of(ws.begin() + long(wsz), ws.end(), [](float f) { return f == 12345.f; }))
              << "case " << idx << ": wrote past the workspace";
          const double err = max_rel_error(got, want, absum);
          EXPECT_LE(err, tol) << "case " << idx << " F(" << tile << "x" << tile << ",3x3) isa " << k::isa_name(isa)
                              << " threads " << threads;
        }
      }
    }
    ++idx;
  }
}

// The blocked layout ([N, CB, H, W, 16], weights packed with blocked = true) on the same cases:
// every output channel matches the reference, padding lanes of the last block are 0, and the
// workspace is the NCHW one.
TEST(Winograd, BlockedMatchesReferenceOnOddShapes) {
  std::vector<Case> cases = odd_cases();
  cases.push_back({1, 64, 28, 28, 64, 1, 1, 1, 1});   // one block of 49 tiles: few-blocks split by tiles at 2-3 threads
  cases.push_back({1, 40, 14, 14, 136, 1, 1, 1, 1});  // few blocks, output channels in parts
  std::mt19937 rng(15);
  const std::vector<std::unique_ptr<ThreadPool>> pools = test::pools();
  int idx = 0;
  for (const Case& c : cases) {
    const k::Conv2dShape s = shape_of(c);
    ASSERT_TRUE(k::winograd_applicable(s));
    auto x = rnd(s.N * s.C * s.H * s.W, rng), w = rnd(s.M * s.C * 9, rng), b = rnd(s.M, rng);
    const int64_t OHW = s.OH * s.OW, ysz = s.N * s.M * OHW, OB = (s.M + 15) / 16;
    auto res = rnd(ysz, rng);
    const k::Activation act = act_of(idx + 1);
    const float* bias = idx % 2 ? nullptr : b.data();
    const float* resid = idx % 3 == 0 ? res.data() : nullptr;
    std::vector<float> want, absum;
    reference_with_absum(s, x, w, bias, resid, act, want, absum);
    const std::vector<float> xb = to_blocked(x, s.N, s.C, s.H * s.W), rb = to_blocked(res, s.N, s.M, OHW);
    for (int tile : {2, 4}) {
      const double tol = tile == 4 ? 1e-5 : 1e-6;
      for (k::Isa isa : isas()) {
        const k::GemmArch& g = k::gemm_arch(isa);
        const k::WinogradWeights u = k::winograd_pack_weights(g, s, w.data(), tile, true);
        ASSERT_TRUE(u.blocked);
        for (auto& pool : pools) {
          const int threads = pool ? pool->threads() : 1;
          const size_t wsz = static_cast<size_t>(k::winograd_workspace_floats(g, s, tile, threads));
          std::vector<float> ws(wsz + 64, 12345.f);
          std::vector<float> got(static_cast<size_t>(s.N * OB * OHW * 16), std::nanf(""));
          k::conv2d_winograd(g, s, xb.data(), u, bias, resid ? rb.data() : nullptr, act, got.data(), pool.get(), ws.data());
          EXPECT_TRUE(std::all_of(ws.begin() + long(wsz), ws.end(), [](float f) { return f == 12345.f; }))
              << "case " << idx << ": wrote past the workspace";
          std::vector<float> plain(static_cast<size_t>(ysz));
          bool pad_zero = true;
          for (int64_t n = 0; n < s.N; ++n)
            for (int64_t m = 0; m < OB * 16; ++m)
              for (int64_t p = 0; p < OHW; ++p) {
                const float v = got[size_t(((n * OB + m / 16) * OHW + p) * 16 + m % 16)];
                if (m < s.M) plain[size_t((n * s.M + m) * OHW + p)] = v;
                else pad_zero = pad_zero && v == 0.f;
              }
          EXPECT_TRUE(pad_zero) << "case " << idx << ": padding lanes not 0";
          const double err = max_rel_error(plain, want, absum);
          EXPECT_LE(err, tol) << "case " << idx << " blocked F(" << tile << "x" << tile << ",3x3) isa " << k::isa_name(isa)
                              << " threads " << threads;
        }
      }
    }
    ++idx;
  }
}

// Random shapes (fixed seed) in one layout: F(2x2) and F(4x4), every ISA, 1, 2 and 3 threads,
// random bias / residual / activation, half of them with a post affine.
static void check_random_winograd_shapes(uint32_t seed, bool blocked) {
  std::mt19937 rng(seed);
  const std::vector<std::unique_ptr<ThreadPool>> pools = test::pools();
  int runs = 0;
  for (int i = 0; i < 40; ++i) {
    const k::Conv2dShape s = random_winograd_shape(rng);
    ASSERT_TRUE(k::winograd_applicable(s)) << shape_desc(s);
    const k::Activation act = random_activation(rng);
    const bool bias = rng() % 2, resid = rng() % 3 == 0;
    runs += check_winograd(s, rng, act, bias, resid, blocked, pools,
                           std::string(blocked ? "blocked " : "") + "random case " + std::to_string(i) + " " + shape_desc(s));
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_EQ(runs, 40 * 2 * int(isas().size()) * int(pools.size()));
}

TEST(Winograd, MatchesReferenceOnRandomShapes) { check_random_winograd_shapes(20240611, false); }

TEST(Winograd, BlockedMatchesReferenceOnRandomShapes) { check_random_winograd_shapes(777001, true); }

// Every fused activation with a post affine (positive and negative scales, with and without a
// shift; also the affine alone), bias and residual, through the NCHW and blocked output
// transforms: partial tiles, C and M off the vector width, N = 2, a block spread over threads.
TEST(Winograd, ActivationWithPostAffineMatchesReference) {
  const std::vector<Case> shapes = {
      {1, 24, 13, 11, 20, 1, 1, 1, 1},
      {2, 17, 9, 22, 33, 0, 1, 2, 1},
      {1, 32, 24, 24, 40, 1, 1, 1, 1},   // few blocks: split by channels at 2-3 threads
  };
  const float muls[] = {1.25f, -0.75f, 0.5f, -2.f}, adds[] = {-0.5f, 0.25f, 0.f, 3.f};
  std::mt19937 rng(31);
  const std::vector<std::unique_ptr<ThreadPool>> pools = test::pools();
  int runs = 0;
  for (int i = 0; i < 8; ++i)
    for (size_t si = 0; si < shapes.size(); ++si) {
      const k::Conv2dShape s = shape_of(shapes[si]);
      k::Activation act = act_of(i);
      act.post = true;
      act.post_mul = muls[(size_t(i) + si) % 4];
      act.post_add = adds[(size_t(i) + 2 * si) % 4];
      for (int blocked = 0; blocked < 2; ++blocked)
        runs += check_winograd(s, rng, act, true, (i + int(si)) % 2 == 0, blocked, pools,
                               std::string(blocked ? "blocked " : "") + "act " + std::to_string(i) + " post " +
                                   std::to_string(act.post_mul) + "," + std::to_string(act.post_add) + " " + shape_desc(s));
      if (HasFailure()) return;
    }
  EXPECT_EQ(runs, 8 * int(shapes.size()) * 2 * 2 * int(isas().size()) * int(pools.size()));
}

TEST(Winograd, RejectsMismatchedWeights) {
  const k::Conv2dShape s = shape_of({1, 16, 8, 8, 16, 1, 1, 1, 1});
  std::vector<float> w(static_cast<size_t>(16 * 16 * 9), 0.5f), x(static_cast<size_t>(16 * 64), 1.f), y(16 * 64);
  const k::GemmArch& g = k::gemm_arch(k::Isa::Portable);
  const k::WinogradWeights u = k::winograd_pack_weights(g, s, w.data(), 2);
  k::Conv2dShape other = s;
  other.M = 32;
  std::vector<float> ws(static_cast<size_t>(k::winograd_workspace_floats(g, other, 2, 1)));
  EXPECT_THROW(k::conv2d_winograd(g, other, x.data(), u, nullptr, nullptr, k::Activation{}, y.data(), nullptr, ws.data()),
               basalt::Error);
  EXPECT_THROW(k::winograd_pack_weights(g, s, w.data(), 3), basalt::Error);
}

// The Conv / FusedConv kernels: weights given as constants at prepare take the Winograd path
// (3x3, stride 1, 16+ channels) and match the reference; a W fed at run time with the same shape
// but other data is not mistaken for the transformed one.
TEST(Winograd, ConvKernelUsesTransformedWeights) {
  std::mt19937 rng(9);
  const k::Conv2dShape s = shape_of({2, 18, 11, 13, 20, 1, 1, 1, 1});
  auto xv = rnd(s.N * s.C * s.H * s.W, rng), wv = rnd(s.M * s.C * 9, rng), w2v = rnd(s.M * s.C * 9, rng),
       bv = rnd(s.M, rng), zv = rnd(s.N * s.M * s.OH * s.OW, rng);
  auto tensor = [](const Shape& shape, const std::vector<float>& v) {
    Tensor t(DType::Float, shape);
    std::copy(v.begin(), v.end(), t.data<float>());
    return t;
  };
  Tensor x = tensor({s.N, s.C, s.H, s.W}, xv), w = tensor({s.M, s.C, 3, 3}, wv), w2 = tensor({s.M, s.C, 3, 3}, w2v),
         b = tensor({s.M}, bv), z = tensor({s.N, s.M, s.OH, s.OW}, zv);
  k::Activation relu;
  relu.kind = k::ActKind::Relu;
  std::vector<float> absum(zv.size());
  {
    std::vector<float> xa(xv.size()), wa(wv.size());
    for (size_t i = 0; i < xv.size(); ++i) xa[i] = std::fabs(xv[i]);
    for (size_t i = 0; i < wv.size(); ++i) wa[i] = std::max(std::fabs(wv[i]), std::fabs(w2v[i]));
    k::conv2d_reference(s, xa.data(), wa.data(), nullptr, nullptr, k::Activation{}, absum.data());
  }
  for (int threads : {1, 2, 3})
    for (int fused = 0; fused < 2; ++fused)
      for (int fed = 0; fed < 2; ++fed) {
        Node n;
        n.name = "t";
        n.op_type = fused ? "FusedConv" : "Conv";
        n.domain = fused ? "basalt" : "";
        n.opset = fused ? 1 : 11;
        n.attrs = {attr("pads", Ints{1, 1, 1, 1})};
        if (fused) n.attrs.push_back(attr("activation", "Relu"));
        std::vector<Value> ins = {Value(x), Value(w), Value(b)};
        if (fused) ins.push_back(Value(z));
        for (size_t i = 0; i < ins.size(); ++i) n.inputs.push_back(int(i));
        n.outputs.push_back(100);
        const KernelFactory* f = OpRegistry::instance().find(n.domain, n.op_type, n.opset);
        ASSERT_NE(f, nullptr);
        n.kernel = (*f)(n);
        std::vector<const Tensor*> consts = {nullptr, &ins[1].tensor, &ins[2].tensor, nullptr};
        consts.resize(ins.size());
        n.kernel->prepare(PrepareContext{n, consts, threads});
        // the transformed weights replace W (BASALT_WINOGRAD=0 turns them off)
        if (k::winograd_choose_tile(s) != 0) {
          EXPECT_GE(n.kernel->packed_bytes(), size_t(16 * s.M * s.C) * sizeof(float));
          EXPECT_TRUE(n.kernel->replaces_constant(1));
        }
        if (fed) ins[1] = Value(w2);  // another W of the same shape, fed at run time
        std::vector<const Value*> in_ptrs;
        for (auto& v : ins) in_ptrs.push_back(&v);
        std::vector<Value> outs(1);
        ThreadPool pool(threads, 0);
        RunContext rc;
        rc.threads = threads;
        rc.pool = &pool;
        KernelContext ctx(n, in_ptrs, outs, {}, rc);
        n.kernel->compute(ctx);
        std::vector<float> want(zv.size());
        k::conv2d_reference(s, xv.data(), fed ? w2v.data() : wv.data(), bv.data(), fused ? zv.data() : nullptr,
                            fused ? relu : k::Activation{}, want.data());
        const Tensor& y = outs[0].tensor;
        ASSERT_EQ(y.numel(), int64_t(want.size()));
        std::vector<float> got(y.data<float>(), y.data<float>() + y.numel());
        EXPECT_LE(max_rel_error(got, want, absum), 1e-5)
            << n.op_type << " threads " << threads << (fed ? " with a fed W" : "");
      }
}

// Timings against the im2col conv (kernels::conv2d with packed weights), 1 thread by default:
// build/basalt_tests --gtest_filter=Winograd.DISABLED_Timings --gtest_also_run_disabled_tests
TEST(Winograd, DISABLED_Timings) {
  struct B {
    int64_t C, HW, M;
  };
  const std::vector<B> shapes = {{64, 56, 64}, {128, 28, 128}, {256, 14, 256}, {512, 7, 512}, {32, 128, 32},
                                 {16, 256, 16}, {64, 64, 64},  {128, 32, 128},  {256, 16, 256}, {32, 256, 32},
                                 {128, 7, 32},  {128, 14, 32},  {128, 28, 32},   {128, 56, 32},  {96, 13, 208},
                                 {128, 13, 256}, {160, 6, 320}, {192, 6, 384},  {144, 13, 288}, {64, 55, 192},
                                 {512, 14, 512}, {512, 28, 512}};
  std::mt19937 rng(1);
  const k::GemmArch& g = k::gemm_arch_best();
  // BASALT_WINOGRAD_BENCH_THREADS=N: a pool of N threads instead of 1
  const char* te = std::getenv("BASALT_WINOGRAD_BENCH_THREADS");
  const int threads = te ? std::max(1, std::atoi(te)) : 1;
  std::unique_ptr<ThreadPool> pool = threads > 1 ? std::make_unique<ThreadPool>(threads) : nullptr;
  // BASALT_WINOGRAD_BENCH=C,HW,M times that one shape (for profiling)
  std::vector<B> chosen = shapes;
  if (const char* e = std::getenv("BASALT_WINOGRAD_BENCH")) {
    long long c = 0, hw = 0, m = 0;
    if (std::sscanf(e, "%lld,%lld,%lld", &c, &hw, &m) == 3) chosen = {{c, hw, m}};
  }
  for (const B& b : chosen) {
    const k::Conv2dShape s = shape_of({1, b.C, b.HW, b.HW, b.M, 1, 1, 1, 1});
    auto x = rnd(s.C * s.H * s.W, rng), w = rnd(s.M * s.C * 9, rng);
    std::vector<float> y(static_cast<size_t>(s.M * s.OH * s.OW));
    const int reps = std::getenv("BASALT_WINOGRAD_BENCH") ? 200 : 5;
    // BASALT_WINOGRAD_BENCH_FLUSH=1: evict the caches before each run (weights come from memory
    // or L3, as inside a model)
    static std::vector<float> flush(std::getenv("BASALT_WINOGRAD_BENCH_FLUSH") ? size_t(16) << 20 : 0);
    auto time_ms = [&](auto&& fn) {
      fn();
      double best = 1e30;
      for (int r = 0; r < reps; ++r) {
        for (size_t i = 0; i < flush.size(); i += 16) flush[i] += 1.f;
        auto t0 = std::chrono::steady_clock::now();
        fn();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      return best;
    };
    k::PackedConvWeights pw = k::pack_conv_weights(g, s, w.data());
    std::vector<float> ws(static_cast<size_t>(k::conv2d_workspace_floats(g, s, true, threads)) + 64);
    double direct = time_ms([&] {
      k::conv2d(g, s, x.data(), w.data(), &pw, nullptr, nullptr, k::Activation{}, y.data(), pool.get(), ws.data());
    });
    double wt[2];
    for (int i = 0; i < 2; ++i) {
      const int tile = i ? 4 : 2;
      k::WinogradWeights u = k::winograd_pack_weights(g, s, w.data(), tile);
      std::vector<float> wws(static_cast<size_t>(k::winograd_workspace_floats(g, s, tile, threads)));
      wt[i] = time_ms([&] {
        k::conv2d_winograd(g, s, x.data(), u, nullptr, nullptr, k::Activation{}, y.data(), pool.get(), wws.data());
      });
    }
    std::printf("C %4lld M %4lld %3lldx%-3lld  im2col %7.3f ms  F(2,3) %7.3f ms (%.2fx)  F(4,3) %7.3f ms (%.2fx)\n",
                (long long)b.C, (long long)b.M, (long long)b.HW, (long long)b.HW, direct, wt[0], direct / wt[0], wt[1],
                direct / wt[1]);
  }
}
