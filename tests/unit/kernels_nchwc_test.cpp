// Differential tests of the blocked-layout kernels (kernels/nchwc.hpp): every ISA build and
// thread count against the reference twins, and the blocked results against the NCHW kernels
// (conv2d_reference, pool2d_f32) through the layout conversions. Random shapes with channel
// counts that are not multiples of 16, odd image sizes, strides, dilations, padding, residual and
// each fused activation.
#include "kernel_test_util.hpp"
#include "kernels/conv.hpp"
#include "kernels/nchwc.hpp"
#include "kernels/pool.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

namespace basalt {
namespace {

using kernels::Activation;
using kernels::ActKind;
using kernels::Conv2dShape;
namespace nc = kernels::nchwc;

struct ConvCase {
  int64_t N, C, M, H, W, K, stride, dil, pad;
  bool depthwise, plain, residual;
  ActKind act;
};

Conv2dShape shape_of(const ConvCase& c) {
  Conv2dShape s;
  s.N = c.N, s.C = c.C, s.M = c.depthwise ? c.C : c.M, s.G = c.depthwise ? c.C : 1;
  s.H = c.H, s.W = c.W, s.KH = c.K, s.KW = c.K;
  s.sh = s.sw = c.stride, s.dh = s.dw = c.dil, s.pt = s.pl = c.pad;
  s.OH = (c.H + 2 * c.pad - (c.K - 1) * c.dil - 1) / c.stride + 1;
  s.OW = (c.W + 2 * c.pad - (c.K - 1) * c.dil - 1) / c.stride + 1;
  return s;
}

Activation act_of(ActKind k) {
  Activation a;
  a.kind = k;
  if (k == ActKind::Clip) a.a = -0.5f, a.b = 0.75f;
  if (k == ActKind::HardSigmoid) a.a = 0.2f, a.b = 0.5f;
  if (k == ActKind::LeakyRelu) a.a = 0.1f;
  return a;
}

std::string describe(const ConvCase& c) {
  return "N" + std::to_string(c.N) + " C" + std::to_string(c.C) + " M" + std::to_string(c.M) + " " + std::to_string(c.H) + "x" +
         std::to_string(c.W) + " k" + std::to_string(c.K) + " s" + std::to_string(c.stride) + " d" + std::to_string(c.dil) +
         " p" + std::to_string(c.pad) + (c.depthwise ? " dw" : "") + (c.plain ? " plain" : "") + (c.residual ? " res" : "") +
         " act" + std::to_string(int(c.act));
}

void check_conv(const ConvCase& c, std::mt19937& rng) {
  const Conv2dShape s = shape_of(c);
  const int64_t Cg = c.depthwise ? 1 : s.C;
  auto x = test::rnd(s.N * s.C * s.H * s.W, rng);
  auto w = test::rnd(s.M * Cg * s.KH * s.KW, rng);
  auto b = test::rnd(s.M, rng);
  auto r = test::rnd(s.N * s.M * s.OH * s.OW, rng);
  const Activation act = act_of(c.act);
  // NCHW reference
  std::vector<float> y_ref(size_t(s.N * s.M * s.OH * s.OW));
  kernels::conv2d_reference(s, x.data(), w.data(), b.data(), c.residual ? r.data() : nullptr, act, y_ref.data());
  // blocked operands
  const int64_t CB = nc::blocks(s.C), OB = nc::blocks(s.M), opix = s.OH * s.OW;
  std::vector<float> xb(size_t(c.plain ? x.size() : size_t(s.N * CB * 16 * s.H * s.W)));
  if (c.plain) xb = x;
  else nc::to_blocked(kernels::Isa::Portable, x.data(), s.N, s.C, s.H * s.W, xb.data(), nullptr);
  std::vector<float> rb(size_t(s.N * OB * 16 * opix));
  nc::to_blocked(kernels::Isa::Portable, r.data(), s.N, s.M, opix, rb.data(), nullptr);
  const nc::ConvWeights cw = nc::pack_conv(s, w.data(), b.data(), c.plain);
  std::vector<float> yb_ref(rb.size());
  nc::conv_reference(cw, s, xb.data(), c.residual ? rb.data() : nullptr, act, yb_ref.data());
  {  // the blocked reference is the NCHW reference, re-laid out
    std::vector<float> back(y_ref.size());
    nc::from_blocked(kernels::Isa::Portable, yb_ref.data(), s.N, s.M, opix, back.data(), nullptr);
    for (size_t i = 0; i < back.size(); ++i)
      ASSERT_NEAR(back[i], y_ref[i], 1e-4f * (1.f + std::fabs(y_ref[i]))) << describe(c) << " at " << i;
  }
  std::vector<float> ws(size_t(nc::conv_workspace_floats(cw, s)) + 1);
  // what the memory planner reserves from the input shape alone covers it
  ASSERT_GE(nc::conv_workspace_bound_floats(cw, s, c.pad, c.pad, c.pad, c.pad), nc::conv_workspace_floats(cw, s)) << describe(c);
  auto pools = test::pools();
  for (kernels::Isa isa : test::isas())
    for (auto& pool : pools) {
      std::vector<float> yb(rb.size(), 12345.f);
      nc::conv(isa, cw, s, xb.data(), c.residual ? rb.data() : nullptr, act, yb.data(), pool.get(), ws.data());
      for (size_t i = 0; i < yb.size(); ++i) {
        const int64_t ch = (int64_t(i) / (16 * opix)) % OB * 16 + int64_t(i) % 16;
        if (ch >= s.M) {  // padding channels are written as 0
          ASSERT_EQ(yb[i], 0.f) << describe(c) << " isa " << int(isa) << " padding channel at " << i;
          continue;
        }
        ASSERT_NEAR(yb[i], yb_ref[i], 2e-4f * (1.f + std::fabs(yb_ref[i])))
            << describe(c) << " isa " << kernels::isa_name(isa) << " threads " << (pool ? pool->threads() : 1) << " at " << i;
      }
    }
}

TEST(NchwcConv, MatchesReferenceOnFixedShapes) {
  std::mt19937 rng(7);
  const ConvCase cases[] = {
      {1, 64, 256, 14, 14, 1, 1, 1, 0, false, false, true, ActKind::Relu},   // pointwise + residual
      {1, 48, 40, 9, 11, 3, 1, 1, 1, false, false, false, ActKind::None},   // 3x3 pad 1, odd channels
      {2, 24, 72, 13, 7, 3, 2, 1, 1, false, false, true, ActKind::Clip},    // strided, batch 2
      {1, 3, 20, 23, 23, 7, 2, 1, 3, false, true, false, ActKind::Relu},    // plain input stem
      {1, 5, 17, 10, 10, 3, 1, 1, 1, false, true, true, ActKind::HardSigmoid},
      {1, 33, 33, 12, 12, 3, 1, 2, 2, false, false, false, ActKind::LeakyRelu},  // dilated
      {1, 40, 40, 15, 9, 3, 1, 1, 1, true, false, true, ActKind::Clip},     // depthwise
      {2, 96, 96, 8, 8, 3, 2, 1, 1, true, false, false, ActKind::Relu},     // depthwise stride 2
      {1, 17, 17, 11, 13, 5, 1, 1, 2, true, false, false, ActKind::Sigmoid},  // depthwise 5x5
      {1, 130, 70, 7, 7, 1, 2, 1, 0, false, false, false, ActKind::Tanh},   // strided 1x1
      {1, 16, 64, 1, 1, 1, 1, 1, 0, false, false, false, ActKind::HardSwish},  // one pixel
      // pointwise runs of tiles in one kernel call: 3 input chunks, residual, pixel tails (F = 4,
      // 437 pixels in segments of 120); F = 2 and F = 3 (8-pixel tiles), batch 2
      {1, 272, 50, 19, 23, 1, 1, 1, 0, false, false, true, ActKind::Relu},
      {2, 20, 24, 37, 5, 1, 1, 1, 0, false, false, true, ActKind::Clip},
      {1, 33, 40, 11, 25, 1, 1, 1, 0, false, false, false, ActKind::None},
      // few tasks at 2 and 3 threads: the image is cut into shorter segments (a 4-block and a
      // 2-block group at 7x7; a 3x3 conv with one group)
      {1, 200, 90, 7, 7, 1, 1, 1, 0, false, false, true, ActKind::Relu},
      // a partial last input block (C % 16 != 0) whose taps end a chunk that has full blocks
      // before it (3x3, one output block: 3 input blocks a chunk), and one that is a chunk alone
      // (1x1 with 18 blocks: chunks of 8), 8 and 1 channels in it
      {1, 40, 16, 9, 10, 3, 1, 1, 1, false, false, true, ActKind::Relu},
      {1, 273, 64, 6, 7, 1, 1, 1, 0, false, false, false, ActKind::Clip},
      {2, 40, 48, 6, 5, 3, 1, 1, 1, false, false, false, ActKind::Clip},
      // depthwise 3x3 rows that load each input once (dw_tile_k3): full 8-pixel tiles and every
      // shorter tail, stride 1 and 2, with and without padding, residual
      {1, 35, 35, 6, 29, 3, 1, 1, 1, true, false, true, ActKind::Clip},
      {1, 20, 20, 5, 30, 3, 1, 1, 0, true, false, false, ActKind::HardSwish},
      {2, 33, 33, 7, 41, 3, 2, 1, 1, true, false, true, ActKind::Relu},
      {1, 16, 16, 9, 36, 3, 2, 1, 0, true, false, false, ActKind::None},
      // stride 1 interiors of 14 and 9 pixels (more tile tails of dw_tile_k3 and its AVX2 halves)
      {1, 24, 24, 5, 16, 3, 1, 1, 1, true, false, true, ActKind::Relu},
      {1, 9, 9, 6, 11, 3, 1, 1, 0, true, false, false, ActKind::Clip},
      // depthwise 5x5 rows that load each input once (dw_tile_k): stride 1 and 2, with and
      // without padding, residual, full tiles and tails
      {1, 35, 35, 9, 29, 5, 1, 1, 2, true, false, true, ActKind::HardSwish},
      {1, 20, 20, 7, 37, 5, 2, 1, 2, true, false, false, ActKind::Relu},
      {2, 16, 16, 6, 21, 5, 1, 1, 0, true, false, true, ActKind::None},
      {1, 33, 33, 11, 40, 5, 2, 1, 0, true, false, false, ActKind::Clip},
      // narrow 3x3 depthwise rows, one pass per row (dw_row_narrow): 14 and 7 wide at stride 1,
      // stride 2 with and without a missing right tap, 16 and 2 wide, residual
      {1, 40, 40, 14, 14, 3, 1, 1, 1, true, false, true, ActKind::Clip},
      {1, 20, 20, 7, 7, 3, 1, 1, 1, true, false, false, ActKind::HardSwish},
      {2, 24, 24, 14, 14, 3, 2, 1, 1, true, false, true, ActKind::Relu},
      {1, 17, 17, 7, 7, 3, 2, 1, 1, true, false, false, ActKind::None},
      {1, 16, 16, 5, 16, 3, 1, 1, 1, true, false, true, ActKind::LeakyRelu},
      {1, 9, 9, 3, 2, 3, 1, 1, 1, true, false, false, ActKind::Clip},
      // rows in several chunks of 16 (first, middle, last): 28, 17 and 33 wide, stride 2 from 56
      {1, 20, 20, 5, 28, 3, 1, 1, 1, true, false, true, ActKind::Clip},
      {1, 18, 18, 4, 17, 3, 1, 1, 1, true, false, false, ActKind::Relu},
      {1, 16, 16, 3, 33, 3, 1, 1, 1, true, false, true, ActKind::None},
      {1, 24, 24, 6, 56, 3, 2, 1, 1, true, false, false, ActKind::HardSwish},
      {1, 16, 16, 5, 35, 3, 2, 1, 1, true, false, true, ActKind::Clip},
  };
  for (const ConvCase& c : cases) check_conv(c, rng);
}

TEST(NchwcConv, MatchesReferenceOnRandomShapes) {
  std::mt19937 rng(11);
  std::uniform_int_distribution<int> ch(1, 70), hw(1, 17), k(1, 3), st(1, 2), dil(1, 2), coin(0, 1), act(0, 4);
  const ActKind acts[] = {ActKind::None, ActKind::Relu, ActKind::Clip, ActKind::LeakyRelu, ActKind::HardSwish};
  for (int t = 0; t < 40; ++t) {
    ConvCase c{};
    c.N = 1 + coin(rng);
    c.depthwise = t % 4 == 3;
    c.plain = !c.depthwise && t % 5 == 4;
    c.C = c.plain ? 1 + ch(rng) % 8 : ch(rng);
    c.M = ch(rng);
    c.K = 2 * k(rng) - 1;  // 1, 3, 5
    c.stride = st(rng);
    c.dil = dil(rng);
    c.pad = coin(rng) ? c.K / 2 * c.dil : 0;
    const int64_t span = (c.K - 1) * c.dil + 1;
    c.H = std::max<int64_t>(hw(rng), span - 2 * c.pad);
    c.W = std::max<int64_t>(hw(rng), span - 2 * c.pad);
    c.residual = coin(rng);
    c.act = acts[act(rng)];
    check_conv(c, rng);
  }
}

TEST(NchwcConv, TilingCoversEveryOutputOnce) {
  // Every (image, output block group, pixel) in exactly one task, whatever the thread count;
  // with several threads, at least 4 tasks a thread where the image has the pixels for it.
  for (int64_t M : {16, 90, 320})
    for (int64_t hw : {1, 3, 7, 14, 56})
      for (int64_t N : {1, 2})
        for (int threads : {1, 2, 3, 8}) {
          Conv2dShape s;
          s.N = N, s.C = 64, s.M = M, s.H = s.W = s.OH = s.OW = hw;
          nc::ConvWeights cw;
          cw.s = s;
          const nc::ConvTiling t = nc::conv_tiling(cw, s, threads);
          ASSERT_LE(t.row_len, 120);
          std::vector<int> seen(size_t(N * t.groups * hw * hw), 0);
          for (int64_t task = 0; task < t.tasks(N); ++task) {
            int64_t n, g, r0, r1;
            t.decode(task, n, g, r0, r1);
            for (int64_t p = r0 * t.row_len; p < std::min(r1 * t.row_len, hw * hw); ++p) ++seen[size_t((n * t.groups + g) * hw * hw + p)];
          }
          const std::string what = "M" + std::to_string(M) + " " + std::to_string(hw) + "x" + std::to_string(hw) + " N" +
                                   std::to_string(N) + " threads " + std::to_string(threads);
          for (int v : seen) ASSERT_EQ(v, 1) << what;
          if (threads > 1 && N * t.groups * hw * hw >= 4 * threads * 12) EXPECT_GE(t.tasks(N), 4 * threads) << what;
        }
}

TEST(NchwcConv, SupportedShapes) {
  Conv2dShape s;
  s.C = s.M = 32;
  s.G = 1;
  EXPECT_TRUE(nc::conv_supported(s, false));
  EXPECT_TRUE(nc::conv_supported(s, true));
  s.G = 32;  // depthwise
  EXPECT_TRUE(nc::conv_supported(s, false));
  EXPECT_FALSE(nc::conv_supported(s, true));
  s.G = 4;  // grouped
  EXPECT_FALSE(nc::conv_supported(s, false));
  s.G = 32;
  s.M = 64;  // channel multiplier 2
  EXPECT_FALSE(nc::conv_supported(s, false));
}

// Where a conv of a blocked chain runs (winograd_tile / nchw_winograd), on ResNet-50's, UNet's
// and SqueezeNet's shapes (BASALT_WINOGRAD must not be set for this test).
TEST(NchwcConv, WinogradRouting) {
  if (std::getenv("BASALT_WINOGRAD")) GTEST_SKIP() << "BASALT_WINOGRAD overrides the routing";
  auto shape = [](int64_t C, int64_t M, int64_t k, int64_t stride) {
    Conv2dShape s;
    s.C = C;
    s.M = M;
    s.KH = s.KW = k;
    s.sh = s.sw = stride;
    return s;
  };
  // p: fma512_pipes, 2 (Intel Xeon: cheap FMAs) and 1 (AMD Zen 4); routing for each
  for (int p : {1, 2}) {
    SCOPED_TRACE("fma512_pipes " + std::to_string(p));
    EXPECT_EQ(nc::winograd_tile(shape(64, 64, 3, 1), false, 56 * 56, p), 4);
    EXPECT_EQ(nc::winograd_tile(shape(128, 128, 3, 1), false, 28 * 28, p), 4);
    EXPECT_EQ(nc::winograd_tile(shape(128, 128, 3, 2), false, 56 * 56, p), 0);  // stride 2: direct
    EXPECT_EQ(nc::winograd_tile(shape(64, 64, 1, 1), false, 56 * 56, p), 0);
    EXPECT_EQ(nc::winograd_tile(shape(128, 128, 3, 1), true, 56 * 56, p), 0);  // plain input: direct
    for (int64_t px : {int64_t(56 * 56), int64_t(14 * 14), int64_t(7 * 7)})
      EXPECT_FALSE(nc::nchw_winograd(shape(64, 64, 3, 1), false, px, p));
    // 10x10 to 19x19: F(2x2), or F(4x4) with at least 96 channels each side where p == 1
    EXPECT_EQ(nc::winograd_tile(shape(256, 256, 3, 1), false, 14 * 14, p), p == 1 ? 4 : 2);
    EXPECT_EQ(nc::winograd_tile(shape(96, 208, 3, 1), false, 13 * 13, p), p == 1 ? 4 : 2);
    EXPECT_EQ(nc::winograd_tile(shape(128, 32, 3, 1), false, 14 * 14, p), 2);
    EXPECT_EQ(nc::winograd_tile(shape(64, 64, 3, 1), false, 10 * 10, p), 2);
    // 6x6 to 9x9: F(2x2) with at least 128 channels each side where p == 1, else direct
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, 7 * 7, p), p == 1 ? 2 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(160, 320, 3, 1), false, 6 * 6, p), p == 1 ? 2 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(128, 32, 3, 1), false, 7 * 7, p), 0);
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, 5 * 5, p), 0);  // below 6x6: direct
    // narrow inputs, many outputs: the direct blocked kernel where p == 2, blocked Winograd where
    // p == 1 (from 16 inputs); never NCHW Winograd
    EXPECT_EQ(nc::winograd_tile(shape(16, 64, 3, 1), false, 55 * 55, p), p == 1 ? 4 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(32, 128, 3, 1), false, 27 * 27, p), p == 1 ? 4 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(48, 192, 3, 1), false, 13 * 13, p), p == 1 ? 2 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(8, 64, 3, 1), false, 55 * 55, p), 0);
    EXPECT_FALSE(nc::nchw_winograd(shape(16, 64, 3, 1), false, 55 * 55, p));
    EXPECT_FALSE(nc::nchw_winograd(shape(8, 64, 3, 1), false, 55 * 55, p));
    EXPECT_EQ(nc::winograd_tile(shape(16, 64, 3, 1), false, 14 * 14, p), p == 1 ? 2 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(32, 64, 3, 1), false, 55 * 55, p), p == 1 ? 4 : 0);
    EXPECT_FALSE(nc::nchw_winograd(shape(32, 64, 3, 1), false, 55 * 55, p));
    EXPECT_EQ(nc::winograd_tile(shape(32, 63, 3, 1), false, 55 * 55, p), 0);  // 63 outputs: NCHW Winograd
    EXPECT_TRUE(nc::nchw_winograd(shape(32, 63, 3, 1), false, 55 * 55, p));
    // image size not known at load (-1): by channel counts, as winograd_choose_tile
    EXPECT_EQ(nc::winograd_tile(shape(64, 64, 3, 1), false, -1, p), 4);
    EXPECT_EQ(nc::winograd_tile(shape(256, 256, 3, 1), false, -1, p), 2);
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, -1, p), 0);
    EXPECT_EQ(nc::winograd_tile(shape(16, 64, 3, 1), false, -1, p), p == 1 ? 4 : 0);
    // the image-size edges: 35 | 36, 99 | 100, 399 | 400 pixels
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, 35, p), 0);
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, 36, p), p == 1 ? 2 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, 99, p), p == 1 ? 2 : 0);
    EXPECT_EQ(nc::winograd_tile(shape(512, 512, 3, 1), false, 100, p), p == 1 ? 4 : 2);
    EXPECT_EQ(nc::winograd_tile(shape(256, 256, 3, 1), false, 399, p), p == 1 ? 4 : 2);
    EXPECT_EQ(nc::winograd_tile(shape(256, 256, 3, 1), false, 400, p), 4);
    EXPECT_EQ(nc::winograd_tile(shape(64, 32, 3, 1), false, 400, p), 4);
    // the channel edges: 95 | 96 at 10x10-19x19, 127 | 128 at 6x6-9x9
    EXPECT_EQ(nc::winograd_tile(shape(95, 256, 3, 1), false, 14 * 14, p), 2);
    EXPECT_EQ(nc::winograd_tile(shape(256, 96, 3, 1), false, 14 * 14, p), p == 1 ? 4 : 2);
    EXPECT_EQ(nc::winograd_tile(shape(127, 512, 3, 1), false, 7 * 7, p), 0);
    EXPECT_EQ(nc::winograd_tile(shape(512, 128, 3, 1), false, 7 * 7, p), p == 1 ? 2 : 0);
    // fewer than 64 inputs and outputs: Winograd in NCHW where it wins, else the direct blocked kernel
    EXPECT_EQ(nc::winograd_tile(shape(32, 16, 3, 1), false, 256 * 256, p), 0);
    EXPECT_TRUE(nc::nchw_winograd(shape(32, 16, 3, 1), false, 256 * 256, p));
    EXPECT_FALSE(nc::nchw_winograd(shape(32, 16, 3, 1), false, 13 * 13, p));
  }
}

TEST(NchwcLayout, RoundTripAndPaddingZeros) {
  // Every ISA's conversions against the blocked indexing, at pixel counts with and without a
  // 16-pixel tail and across work items (1024 pixels), on 1, 2 and 3 threads.
  std::mt19937 rng(3);
  const std::vector<std::unique_ptr<ThreadPool>> pools = test::pools();
  for (int64_t C : {1, 15, 16, 17, 40})
    for (int64_t HW : {1, 13, 16, 33, 1030}) {
      const int64_t N = 2, CB = nc::blocks(C);
      auto x = test::rnd(N * C * HW, rng);
      std::vector<float> want(size_t(N * CB * 16 * HW), 0.f);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t p = 0; p < HW; ++p)
            want[size_t(((n * CB + c / 16) * HW + p) * 16 + c % 16)] = x[size_t((n * C + c) * HW + p)];
      for (kernels::Isa isa : test::isas())
        for (auto& pool : pools) {
          std::vector<float> b(want.size(), 7.f), back(x.size(), 7.f);
          nc::to_blocked(isa, x.data(), N, C, HW, b.data(), pool.get());
          ASSERT_EQ(b, want) << "C " << C << " HW " << HW << " isa " << kernels::isa_name(isa);  // padding channels 0
          nc::from_blocked(isa, b.data(), N, C, HW, back.data(), pool.get());
          ASSERT_EQ(back, x) << "C " << C << " HW " << HW << " isa " << kernels::isa_name(isa);
        }
    }
}

TEST(NchwcPool, MatchesNchwPool) {
  std::mt19937 rng(5);
  struct P {
    int64_t H, W, k, s, p, d;
    bool avg, cip;
    bool ceil = false;  // ceil_mode: one more output row and column than the input fills (end padding)
  };
  const P cases[] = {{112, 112, 3, 2, 1, 1, false, false}, {55, 55, 3, 2, 0, 1, false, false}, {9, 11, 3, 1, 1, 1, true, false},
                     {9, 11, 3, 1, 1, 1, true, true},      {7, 7, 7, 1, 0, 1, true, false},   {10, 10, 2, 2, 0, 1, false, false},
                     {12, 9, 3, 2, 2, 2, false, false},   {111, 111, 3, 2, 0, 1, false, false, true},
                     {20, 17, 3, 2, 1, 1, true, false, true}, {30, 30, 5, 1, 2, 1, true, true}};
  for (const P& c : cases)
    for (int64_t C : {16, 40}) {
      kernels::Pool2D g;
      g.H = c.H, g.W = c.W, g.kh = g.kw = c.k, g.sh = g.sw = c.s, g.dh = g.dw = c.d;
      g.ph = g.pw = g.ph_end = g.pw_end = c.p;
      g.OH = (c.H + 2 * c.p - (c.k - 1) * c.d - 1) / c.s + 1 + (c.ceil ? 1 : 0);
      g.OW = (c.W + 2 * c.p - (c.k - 1) * c.d - 1) / c.s + 1 + (c.ceil ? 1 : 0);
      if (c.ceil) g.ph_end = g.pw_end = c.p + c.s;  // the extra window reaches past the input
      g.avg = c.avg;
      g.count_include_pad = c.cip;
      const int64_t N = 1, CB = nc::blocks(C);
      auto x = test::rnd(N * C * c.H * c.W, rng);
      std::vector<float> y(size_t(N * C * g.OH * g.OW));
      kernels::pool2d_f32(nullptr, x.data(), y.data(), N * C, g, kernels::Isa::Portable);
      std::vector<float> xb(size_t(N * CB * 16 * c.H * c.W));
      nc::to_blocked(kernels::Isa::Portable, x.data(), N, C, c.H * c.W, xb.data(), nullptr);
      auto pools = test::pools();
      for (kernels::Isa isa : test::isas())
        for (auto& pool : pools) {
          std::vector<float> yb(size_t(N * CB * 16 * g.OH * g.OW)), back(y.size());
          nc::pool(isa, xb.data(), yb.data(), N * CB, g, pool.get());
          nc::from_blocked(kernels::Isa::Portable, yb.data(), N, C, g.OH * g.OW, back.data(), nullptr);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(back[i], y[i], 1e-5f * (1.f + std::fabs(y[i]))) << "pool case H" << c.H << " k" << c.k << " isa " << int(isa);
        }
      // global average / max into NCHW: every ISA and thread count
      for (bool avg : {true, false})
        for (kernels::Isa isa : test::isas())
          for (auto& pool : pools) {
            std::vector<float> gy(size_t(N * C), 7.f);
            nc::global_pool(isa, avg, xb.data(), N, C, c.H * c.W, gy.data(), pool.get());
            for (int64_t ci = 0; ci < C; ++ci) {
              double acc = avg ? 0.0 : -1e30;
              for (int64_t p = 0; p < c.H * c.W; ++p) {
                double v = x[size_t(ci * c.H * c.W + p)];
                acc = avg ? acc + v : std::max(acc, v);
              }
              if (avg) acc /= double(c.H * c.W);
              ASSERT_NEAR(gy[size_t(ci)], acc, 1e-4) << "global " << (avg ? "avg" : "max") << " channel " << ci
                                                     << " isa " << kernels::isa_name(isa);
            }
          }
    }
}

// Inference batch norm on blocked tensors (scale_shift): every ISA and thread count against
// act(x * s + t) per NCHW element, channel counts with a partial last block (its padding lanes
// must stay 0), odd plane sizes (vector tails, runs of several small planes per chunk), in place.
// Work items are runs of up to 2048 pixels of one plane, in chunks of about 2048 pixels, so
// [1, 64, 56, 57] and [1, 24, 45, 47] (two runs a plane, a chunk each) and [5, 270, 7, 7] (85
// planes of 49 pixels, chunks of 41) split over 2 and 3 threads. Every activation the layout
// pass lets through (act(0) == 0, asserted): none, Relu, Clip around 0, LeakyRelu, HardSwish,
// Tanh, and HardSigmoid with beta <= 0 (x * s + t spans (-2, 2): Clip [-0.5, 0.75] and
// HardSigmoid 0.8 v - 0.2 clamp both ways).
TEST(NchwcScaleShift, MatchesPerChannelAffine) {
  std::mt19937 rng(11);
  struct P {
    int64_t N, C, H, W;
  };
  const P cases[] = {{1, 16, 7, 7},    {2, 40, 5, 3},   {1, 64, 56, 57}, {3, 33, 1, 1},
                     {1, 128, 14, 14}, {5, 270, 7, 7}, {1, 24, 45, 47}};
  const Activation acts[] = {Activation{}, act_of(ActKind::Relu), act_of(ActKind::Clip), act_of(ActKind::LeakyRelu),
                             act_of(ActKind::HardSwish), act_of(ActKind::Tanh), [] {
                               Activation a = act_of(ActKind::Clip);
                               a.a = 0.f, a.b = 6.f;  // Relu6
                               return a;
                             }(),
                             [] {
                               Activation a = act_of(ActKind::HardSigmoid);
                               a.a = 0.8f, a.b = -0.2f;
                               return a;
                             }()};
  auto pools = test::pools();
  for (const Activation& act : acts) ASSERT_EQ(kernels::apply_activation(act, 0.f), 0.f) << "act " << int(act.kind);
  for (const P& c : cases)
    for (const Activation& act : acts) {
      const int64_t CB = nc::blocks(c.C), HW = c.H * c.W;
      auto x = test::rnd(c.N * c.C * HW, rng);
      std::vector<float> sc(size_t(CB * 16), 0.f), sh(size_t(CB * 16), 0.f);
      auto s0 = test::rnd(c.C, rng), t0 = test::rnd(c.C, rng);
      std::copy(s0.begin(), s0.end(), sc.begin());
      std::copy(t0.begin(), t0.end(), sh.begin());
      std::vector<float> xb(size_t(c.N * CB * 16 * HW));
      nc::to_blocked(kernels::Isa::Portable, x.data(), c.N, c.C, HW, xb.data(), nullptr);
      std::vector<float> want(x.size());  // NCHW
      for (size_t i = 0; i < x.size(); ++i) {
        const size_t ch = i / size_t(HW) % size_t(c.C);
        want[i] = kernels::apply_activation(act, x[i] * s0[ch] + t0[ch]);
      }
      for (kernels::Isa isa : test::isas())
        for (auto& pool : pools)
          for (bool in_place : {false, true}) {
            std::vector<float> yb = in_place ? xb : std::vector<float>(xb.size(), -1.f);
            nc::scale_shift(isa, in_place ? yb.data() : xb.data(), sc.data(), sh.data(), act, yb.data(), c.N, CB, HW,
                            pool.get());
            for (int64_t n = 0; n < c.N; ++n)
              for (int64_t ch = 0; ch < CB * 16; ++ch)
                for (int64_t p = 0; p < HW; ++p) {
                  const float got = yb[size_t(((n * CB + ch / 16) * HW + p) * 16 + ch % 16)];
                  if (ch >= c.C) {
                    ASSERT_EQ(got, 0.f) << "padding channel " << ch << " of C" << c.C;
                    continue;
                  }
                  const float w = want[size_t((n * c.C + ch) * HW + p)];
                  ASSERT_NEAR(got, w, 1e-5f * (1.f + std::fabs(w)))
                      << "C" << c.C << " " << c.H << "x" << c.W << " isa " << int(isa) << " act " << int(act.kind)
                      << " threads " << (pool ? pool->threads() : 1);
                }
          }
    }
}

}  // namespace
}  // namespace basalt
