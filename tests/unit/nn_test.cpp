// Unit tests for the nn group's kernels (src/ops/nn.cpp): the fast paths (register-tiled GEMM,
// depthwise convolution, 1x1 convolution) against naive loops, plus validation errors.
#include "op_tester.hpp"
#include "ops/common.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor nn_rand(Shape s, uint32_t seed) {
  Tensor t(DType::Float, s);
  uint32_t st = seed * 2654435761u + 1;
  for (int64_t i = 0; i < t.numel(); ++i) {
    st = st * 1664525u + 1013904223u;
    t.data<float>()[i] = float((st >> 8) % 2001) / 1000.f - 1.f;
  }
  return t;
}

// Naive 2-D convolution.
Tensor naive_conv2d(const Tensor& x, const Tensor& w, int64_t G, int64_t s, int64_t d, int64_t p) {
  int64_t N = x.dim(0), C = x.dim(1), H = x.dim(2), W = x.dim(3), M = w.dim(0), KH = w.dim(2), KW = w.dim(3);
  int64_t Cg = C / G, Mg = M / G;
  int64_t OH = (H + 2 * p - (KH - 1) * d - 1) / s + 1, OW = (W + 2 * p - (KW - 1) * d - 1) / s + 1;
  Tensor y(DType::Float, {N, M, OH, OW});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = 0;
          int64_t g = m / Mg;
          for (int64_t c = 0; c < Cg; ++c)
            for (int64_t kh = 0; kh < KH; ++kh)
              for (int64_t kw = 0; kw < KW; ++kw) {
                int64_t ih = oh * s - p + kh * d, iw = ow * s - p + kw * d;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += double(x.data<float>()[((n * C + g * Cg + c) * H + ih) * W + iw]) *
                       double(w.data<float>()[((m * Cg + c) * KH + kh) * KW + kw]);
              }
          y.data<float>()[((n * M + m) * OH + oh) * OW + ow] = float(acc);
        }
  return y;
}

void nn_expect_close(const Tensor& a, const Tensor& b, float tol = 1e-4f) {
  ASSERT_EQ(a.shape(), b.shape());
  for (int64_t i = 0; i < a.numel(); ++i) ASSERT_NEAR(a.data<float>()[i], b.data<float>()[i], tol) << "at " << i;
}

}  // namespace

TEST(NnOps, ConvPathsMatchNaive) {
  struct Case {
    int64_t C, M, H, W, K, G, s, d, p;
  };
  std::vector<Case> cases = {
      {3, 5, 9, 11, 3, 1, 1, 1, 1},   // generic im2col
      {4, 6, 10, 7, 3, 2, 2, 1, 1},   // groups + stride
      {8, 8, 12, 13, 3, 8, 1, 1, 1},  // depthwise
      {6, 12, 9, 9, 5, 6, 2, 2, 3},   // depthwise, 2 outputs per group, stride, dilation, pad
      {7, 9, 6, 5, 1, 1, 1, 1, 0},    // 1x1 direct
      {16, 20, 17, 19, 3, 1, 1, 2, 2},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    Tensor x = nn_rand({2, c.C, c.H, c.W}, seed++);
    Tensor w = nn_rand({c.M, c.C / c.G, c.K, c.K}, seed++);
    auto y = run_op("Conv", 11, {x, w},
                    {attr("group", c.G), attr("strides", Ints{c.s, c.s}), attr("dilations", Ints{c.d, c.d}),
                     attr("pads", Ints{c.p, c.p, c.p, c.p})})[0]
                 .tensor;
    nn_expect_close(y, naive_conv2d(x, w, c.G, c.s, c.d, c.p));
  }
}

TEST(NnOps, MatMulTilesAndEdges) {
  for (int64_t M : {1, 3, 4, 9})
    for (int64_t N : {1, 7, 8, 19})
      for (int64_t K : {1, 5, 16}) {
        Tensor a = nn_rand({2, M, K}, uint32_t(M * 100 + N * 10 + K)), b = nn_rand({K, N}, uint32_t(M + N + K));
        Tensor y = run_op("MatMul", 13, {a, b})[0].tensor;
        ASSERT_EQ(y.shape(), (Shape{2, M, N}));
        for (int64_t bi = 0; bi < 2; ++bi)
          for (int64_t i = 0; i < M; ++i)
            for (int64_t j = 0; j < N; ++j) {
              double acc = 0;
              for (int64_t k = 0; k < K; ++k) acc += double(a.data<float>()[(bi * M + i) * K + k]) * double(b.data<float>()[k * N + j]);
              ASSERT_NEAR(y.data<float>()[(bi * M + i) * N + j], acc, 1e-4);
            }
      }
}

TEST(NnOps, MatMulIntegerAnd1D) {
  Tensor a = Tensor::from_vector<int64_t>({1, 2, 3}, {3});
  Tensor b = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6}, {3, 2});
  auto y = run_op("MatMul", 13, {a, b})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.data<int64_t>()[0], 22);
  EXPECT_EQ(y.data<int64_t>()[1], 28);
}

TEST(NnOps, ValidationErrors) {
  Tensor x = nn_rand({1, 3, 5, 5}, 1);
  Tensor w = nn_rand({4, 2, 3, 3}, 2);  // wrong channel count
  EXPECT_THROW(run_op("Conv", 11, {x, w}), Error);
  Tensor w2 = nn_rand({4, 3, 7, 7}, 3);  // kernel larger than input
  EXPECT_THROW(run_op("Conv", 11, {x, w2}), Error);
  EXPECT_THROW(run_op("MatMul", 13, {nn_rand({2, 3}, 4), nn_rand({4, 2}, 5)}), Error);
  // MaxUnpool with an out-of-range index
  Tensor xi = nn_rand({1, 1, 1, 1}, 6);
  Tensor ii = Tensor::from_vector<int64_t>({99}, {1, 1, 1, 1});
  EXPECT_THROW(run_op("MaxUnpool", 11, {xi, ii}, {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{2, 2})}), Error);
}

TEST(NnOps, ConvTransposeGroupsMatchesScatter) {
  // ConvTranspose against a direct scatter formulation: with groups; and with a bias and more
  // input positions than one GEMM chunk (Mg * K * K = 1152 output rows: chunks of 256 positions,
  // the bias added with the last one's scatter), on 1, 2 and 3 threads (the scatter splits the
  // output channels).
  // A third case pads the output (begin 1 / 0, end 2): with 100 x 3 x 3 = 900 rows the chunks are
  // 291 positions, so the second chunk starts at the last column of a 73-wide grid row, whose
  // taps all land past the output row's end (1 x 145 columns after the end pad).
  struct Case {
    int64_t C, G, Mg, H, W, K, s, pt, pl, pb, pr;
    bool bias;
  };
  for (const Case& cs : {Case{4, 2, 3, 4, 5, 3, 2, 0, 0, 0, 0, false}, Case{4, 1, 128, 17, 19, 3, 2, 0, 0, 0, 0, true},
                         Case{2, 1, 100, 5, 73, 3, 2, 1, 0, 2, 2, true}}) {
    const int64_t C = cs.C, G = cs.G, Mg = cs.Mg, H = cs.H, W = cs.W, K = cs.K, s = cs.s;
    Tensor x = nn_rand({1, C, H, W}, 11), w = nn_rand({C, Mg, K, K}, 12);
    int64_t OH = (H - 1) * s + K - cs.pt - cs.pb, OW = (W - 1) * s + K - cs.pl - cs.pr, M = Mg * G;
    Tensor b = nn_rand({M}, 13);
    std::vector<double> ref(size_t(M * OH * OW), 0.0);
    for (int64_t c = 0; c < C; ++c) {
      int64_t g = c / (C / G);
      for (int64_t m = 0; m < Mg; ++m)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t ww = 0; ww < W; ++ww)
            for (int64_t kh = 0; kh < K; ++kh)
              for (int64_t kw = 0; kw < K; ++kw) {
                const int64_t oh = h * s + kh - cs.pt, ow = ww * s + kw - cs.pl;
                if (oh < 0 || oh >= OH || ow < 0 || ow >= OW) continue;
                ref[size_t(((g * Mg + m) * OH + oh) * OW + ow)] +=
                    double(x.data<float>()[(c * H + h) * W + ww]) * double(w.data<float>()[((c * Mg + m) * K + kh) * K + kw]);
              }
    }
    if (cs.bias)
      for (int64_t m = 0; m < M; ++m)
        for (int64_t j = 0; j < OH * OW; ++j) ref[size_t(m * OH * OW + j)] += double(b.data<float>()[m]);
    for (int threads : {1, 2, 3}) {
      std::vector<Value> in = {x, w};
      if (cs.bias) in.push_back(b);
      auto y = run_op("ConvTranspose", 11, in,
                      {attr("group", G), attr("strides", Ints{s, s}), attr("pads", Ints{cs.pt, cs.pl, cs.pb, cs.pr})}, 1, "",
                      threads)[0]
                   .tensor;
      ASSERT_EQ(y.shape(), (Shape{1, M, OH, OW}));
      for (size_t i = 0; i < ref.size(); ++i)
        ASSERT_NEAR(y.data<float>()[i], ref[i], 1e-4) << "Mg " << Mg << " at " << i << " threads " << threads;
    }
  }
}

// An empty input axis still gives a non-empty output ((in - 1) * s + k): every element is the
// bias (no GEMM chunk runs, so the bias is not added with one).
TEST(NnOps, ConvTransposeEmptyInputGivesTheBias) {
  Tensor x = nn_rand({1, 2, 0, 5}, 21), w = nn_rand({2, 3, 3, 3}, 22), b = nn_rand({3}, 23);
  auto y = run_op("ConvTranspose", 11, {x, w, b}, {}, 1, "", 2)[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{1, 3, 2, 7}));
  for (int64_t i = 0; i < y.numel(); ++i) ASSERT_EQ(y.data<float>()[i], b.data<float>()[i / 14]) << i;
}

TEST(NnOps, ResizeNearestIsExactForInt64) {
  int64_t big = (int64_t(1) << 53) + 1;
  Tensor x = Tensor::from_vector<int64_t>({big, 2, 3, big + 2}, {1, 1, 2, 2});
  Tensor scales = Tensor::from_vector<float>({1, 1, 2, 2}, {4});
  Attribute mode = attr("mode", "nearest");
  auto y = run_op("Resize", 13, {x, Value(), scales}, {mode})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{1, 1, 4, 4}));
  ASSERT_EQ(y.dtype(), DType::Int64);
  EXPECT_EQ(y.data<int64_t>()[0], big);
  EXPECT_EQ(y.data<int64_t>()[1], big);
  EXPECT_EQ(y.data<int64_t>()[15], big + 2);
  // Upsample-9 on uint8 (nearest, floor semantics)
  Tensor u = Tensor::from_vector<uint8_t>({1, 2, 3, 4}, {1, 1, 2, 2});
  auto z = run_op("Upsample", 9, {u, Tensor::from_vector<float>({1, 1, 1, 3}, {4})}, {mode})[0].tensor;
  ASSERT_EQ(z.shape(), (Shape{1, 1, 2, 6}));
  std::vector<int> expect = {1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
  for (size_t i = 0; i < expect.size(); ++i) EXPECT_EQ(int(z.data<uint8_t>()[i]), expect[i]);
}

// float16 / bfloat16 inputs: Conv (and its fast paths), ConvTranspose, LSTM and GRU run the fp32
// kernels on converted copies; MatMul and Gemm take their reference loops (src/ops/nn.cpp:
// matmul_reference, gemm_reference), which accumulate in float32. Either way the result must be
// the fp32 op's on the same (rounded) values, rounded to the input type (or its neighbour: the
// reference loops sum in another order than the fp32 GEMM), with the output in that type; 1, 2
// and 3 threads.

TEST(NnOps, HalfTypesMatchFloatOnTheSameValues) {
  struct OpCase {
    const char* op;
    int opset;
    std::vector<Shape> shapes;  // inputs (all float)
    std::vector<Attribute> attrs;
    int outputs;
  };
  const int64_t T = 3, B = 2, I = 5, H = 4;
  const OpCase cases[] = {
      {"Conv", 11, {{1, 5, 9, 11}, {7, 5, 3, 3}, {7}}, {attr("pads", Ints{1, 1, 1, 1})}, 1},
      {"Conv", 11, {{2, 16, 6, 7}, {16, 1, 3, 3}, {16}}, {attr("group", 16), attr("strides", Ints{2, 2})}, 1},
      {"Conv", 11, {{1, 9, 8, 8}, {12, 9, 1, 1}}, {}, 1},
      {"ConvTranspose", 11, {{1, 4, 5, 6}, {4, 3, 3, 3}}, {attr("strides", Ints{2, 2})}, 1},
      {"MatMul", 13, {{2, 7, 19}, {19, 13}}, {}, 1},
      {"Gemm", 13, {{6, 33}, {17, 33}, {17}}, {attr("transB", 1)}, 1},
      {"LSTM", 14, {{T, B, I}, {1, 4 * H, I}, {1, 4 * H, H}, {1, 8 * H}}, {attr("hidden_size", H)}, 3},
      {"GRU", 14, {{T, B, I}, {1, 3 * H, I}, {1, 3 * H, H}, {1, 6 * H}}, {attr("hidden_size", H)}, 2},
  };
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    const double ulp = dt == DType::Float16 ? 1.0 / 1024 : 1.0 / 128;
    uint32_t seed = 40;
    for (const OpCase& c : cases) {
      std::vector<Value> half_in, float_in;
      for (const Shape& s : c.shapes) {
        Tensor h = from_float32(nn_rand(s, seed++), dt);
        half_in.emplace_back(h);
        float_in.emplace_back(to_float32(h));
      }
      for (int threads : {1, 2, 3}) {
        auto got = run_op(c.op, c.opset, half_in, c.attrs, c.outputs, "", threads);
        auto want = run_op(c.op, c.opset, float_in, c.attrs, c.outputs, "", threads);
        ASSERT_EQ(got.size(), want.size()) << c.op;
        for (size_t o = 0; o < got.size(); ++o) {
          const Tensor& g = got[o].tensor;
          const Tensor w = from_float32(want[o].tensor, dt);
          ASSERT_EQ(g.dtype(), dt) << c.op << " output " << o;
          ASSERT_EQ(g.shape(), w.shape()) << c.op << " output " << o;
          const Tensor gf = to_float32(g), wf = to_float32(w);
          for (int64_t i = 0; i < g.numel(); ++i) {
            const double a = gf.data<float>()[i], b = wf.data<float>()[i];
            // the same value, or its neighbour in the half type (the fp32 sums may round differently)
            ASSERT_LE(std::fabs(a - b), ulp * std::fabs(b) + 1e-6)
                << c.op << " " << dtype_name(dt) << " output " << o << " element " << i << " threads " << threads;
          }
        }
      }
    }
  }
}

// basalt::FusedConv and basalt::FusedMatMul on float16 / bfloat16 inputs (bias, the residual Z of
// FusedConv and the activation all converted to float32, src/ops/nn.cpp): bit-identical to the
// fused op on the float32 copies of the same values, rounded to the type, in that type; 1, 2 and
// 3 threads. FusedConv: im2col with Relu and a post-affine, depthwise (LeakyRelu), 1x1 without
// bias (Clip), 1-D (HardSigmoid), 3-D (the reference loops, then residual and activation: Tanh)
// and 16 -> 24 channels 3x3 over two 20x21 images (HardSwish); FusedMatMul: batch rows folded
// into one GEMM with alpha (Relu), both operands transposed with batch dims (Sigmoid: one GEMM
// per batch item, items over the pool), a 1-D A, and no bias (Tanh).
TEST(NnOps, FusedConvAndMatMulHalfTypesMatchFloat) {
  struct OpCase {
    const char* op;
    std::vector<Shape> shapes;  // inputs; an empty shape: input omitted
    std::vector<Attribute> attrs;
  };
  const OpCase cases[] = {
      {"FusedConv", {{1, 5, 9, 11}, {7, 5, 3, 3}, {7}, {1, 7, 9, 11}},
       {attr("pads", Ints{1, 1, 1, 1}), attr("activation", "Relu"), attr("post_affine", Floats{0.5f, 0.25f})}},
      {"FusedConv", {{2, 16, 6, 7}, {16, 1, 3, 3}, {16}, {2, 16, 2, 3}},
       {attr("group", 16), attr("strides", Ints{2, 2}), attr("activation", "LeakyRelu"), attr("activation_params", Floats{0.1f})}},
      {"FusedConv", {{1, 9, 8, 8}, {12, 9, 1, 1}, {}, {1, 12, 8, 8}},
       {attr("activation", "Clip"), attr("activation_params", Floats{-0.5f, 0.75f})}},
      {"FusedConv", {{2, 6, 17}, {4, 6, 3}, {4}, {2, 4, 15}}, {attr("activation", "HardSigmoid")}},
      {"FusedConv", {{1, 3, 4, 5, 6}, {4, 3, 2, 2, 2}, {4}, {1, 4, 3, 4, 5}}, {attr("activation", "Tanh")}},
      {"FusedConv", {{2, 16, 20, 21}, {24, 16, 3, 3}, {24}, {2, 24, 20, 21}},
       {attr("pads", Ints{1, 1, 1, 1}), attr("activation", "HardSwish")}},
      {"FusedMatMul", {{2, 7, 19}, {19, 13}, {13}}, {attr("alpha", 0.5f), attr("activation", "Relu")}},
      {"FusedMatMul", {{4, 19, 5}, {4, 13, 19}, {13}},
       {attr("transA", 1), attr("transB", 1), attr("activation", "Sigmoid")}},
      {"FusedMatMul", {{19}, {19, 13}, {13}}, {}},
      {"FusedMatMul", {{3, 33, 40}, {40, 17}}, {attr("activation", "Tanh")}},
  };
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    uint32_t seed = 60;
    for (const OpCase& c : cases) {
      std::vector<Value> half_in, float_in;
      for (const Shape& s : c.shapes) {
        if (s.empty()) {
          half_in.emplace_back();
          float_in.emplace_back();
          continue;
        }
        Tensor h = from_float32(nn_rand(s, seed++), dt);
        half_in.emplace_back(h);
        float_in.emplace_back(to_float32(h));
      }
      for (int threads : {1, 2, 3}) {
        const std::string what = std::string(c.op) + " " + shape_str(c.shapes[0]) + " " + dtype_name(dt) +
                                 " threads " + std::to_string(threads);
        const Tensor got = run_op(c.op, 1, half_in, c.attrs, 1, "basalt", threads)[0].tensor;
        const Tensor want32 = run_op(c.op, 1, float_in, c.attrs, 1, "basalt", threads)[0].tensor;
        ASSERT_EQ(got.dtype(), dt) << what;
        ASSERT_EQ(got.shape(), want32.shape()) << what;
        const Tensor want = from_float32(want32, dt);
        ASSERT_EQ(0, std::memcmp(got.raw(), want.raw(), want.nbytes())) << what;
      }
    }
  }
}
