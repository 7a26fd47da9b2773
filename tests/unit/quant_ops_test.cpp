// The integer-GEMM kernels of MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv
// (ops/quant_gemm.cpp) against the reference kernels (ops/quant.cpp) on random inputs: odd
// shapes, groups, depthwise, strides, pads, dilations, per-channel and per-row parameters, all
// int8 / uint8 combinations, weights constant (packed at load, the original dropped) or fed, one
// and two threads. Run at the process's kernels; the unit-avx2 and unit-portable suites rerun
// them on the other paths. Bad parameters get errors naming what is wrong.
#include "core/thread_pool.hpp"
#include "op_tester.hpp"
#include "ops/quant_common.hpp"

#include <gtest/gtest.h>

#include <random>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor random8(Shape s, bool is_signed, std::mt19937& rng) {
  Tensor t(is_signed ? DType::Int8 : DType::Uint8, s);
  std::uniform_int_distribution<int> d(0, 255);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = uint8_t(d(rng));
  return t;
}

Tensor zp8(Shape s, bool is_signed, std::mt19937& rng) {
  Tensor t(is_signed ? DType::Int8 : DType::Uint8, s);
  std::uniform_int_distribution<int> d(is_signed ? -20 : 100, is_signed ? 20 : 150);
  auto* p = static_cast<uint8_t*>(t.raw());
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = uint8_t(d(rng));
  return t;
}

Tensor scales(Shape s, float base) {
  Tensor t(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base * float(1 + i % 3);
  return t;
}

// Runs the registered kernel with inputs `constant` (indices) offered to prepare(), the way a
// session does: where the kernel replaces a constant, its input is then a tensor without data.
Tensor run_fast(const std::string& op, const std::vector<Value>& inputs, std::vector<Attribute> attrs, std::vector<int> constant,
                int threads) {
  Node n = test_node("", op, 10, inputs, std::move(attrs), 1);
  n.kernel = (*OpRegistry::instance().find("", op, 10))(n);
  std::vector<const Tensor*> consts(inputs.size(), nullptr);
  for (int i : constant) consts[size_t(i)] = &inputs[size_t(i)].tensor;
  PrepareContext pc{n, consts, threads};
  n.kernel->prepare(pc);
  std::vector<Value> ins = inputs;
  for (int i : constant)
    if (n.kernel->replaces_constant(i)) {
      const Tensor& t = inputs[size_t(i)].tensor;
      ins[size_t(i)] = Value(Tensor::view(t.dtype(), t.shape(), nullptr, nullptr));
    }
  return compute_node(n, ins, 1, threads)[0].tensor;
}

template <class Ref>
Tensor run_ref(const std::string& op, const std::vector<Value>& inputs, std::vector<Attribute> attrs, Ref&& ref) {
  Node n = test_node("", op, 10, inputs, std::move(attrs), 1);
  std::vector<const Value*> ip;
  for (auto& v : inputs) ip.push_back(v.is_none() ? nullptr : &v);
  std::vector<Value> outs(1);
  RunContext rc;
  KernelContext ctx(n, ip, outs, {}, rc);
  ref(ctx, n);
  return outs[0].tensor;
}

void expect_same(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  ASSERT_EQ(0, std::memcmp(a.raw(), b.raw(), size_t(a.numel()) * dtype_size(a.dtype()))) << what;
}

struct ConvCase {
  int64_t N, C, H, W, M, KH, KW, group, stride, pad, dil;
  bool xs, ws, per_channel;
};

void check_conv(const ConvCase& c, bool qlinear) {
  std::mt19937 rng(unsigned(c.C * 31 + c.M * 7 + c.KH + c.group * 101 + c.stride * 13 + c.xs * 2 + c.ws));
  Tensor X = random8({c.N, c.C, c.H, c.W}, c.xs, rng), W = random8({c.M, c.C / c.group, c.KH, c.KW}, c.ws, rng);
  Shape wp = c.per_channel ? Shape{c.M} : Shape{};
  Tensor xz = zp8({}, c.xs, rng), wz = zp8(wp, c.ws, rng);
  std::vector<Attribute> attrs = {attr("group", c.group), attr("strides", Ints{c.stride, c.stride}),
                                  attr("pads", Ints{c.pad, c.pad, c.pad, c.pad}), attr("dilations", Ints{c.dil, c.dil})};
  std::vector<Value> in;
  std::vector<int> wconst;
  if (qlinear) {
    Tensor bias(DType::Int32, {c.M});
    for (int64_t m = 0; m < c.M; ++m) bias.data<int32_t>()[m] = int32_t(m * 977 % 4001) - 2000;
    in = {Value(X), Value(scales({}, 0.02f)), Value(xz), Value(W), Value(scales(wp, 0.01f)), Value(wz), Value(scales({}, 0.5f)),
          Value(zp8({}, c.xs, rng)), Value(bias)};
    wconst = {3, 4, 5, 8};
  } else {
    in = {Value(X), Value(W), Value(xz), Value(wz)};
    wconst = {1, 3};
  }
  const std::string op = qlinear ? "QLinearConv" : "ConvInteger";
  Tensor want = run_ref(op, in, attrs, [&](KernelContext& ctx, const Node& n) {
    quant::ConvAttrs at = quant::parse_conv(n);
    qlinear ? quant::qlinear_conv_ref(at, ctx) : quant::conv_integer_ref(at, ctx);
  });
  for (int threads : {1, 2})
    for (bool constw : {false, true}) {
      Tensor got = run_fast(op, in, attrs, constw ? wconst : std::vector<int>{}, threads);
      expect_same(want, got, op + " C=" + std::to_string(c.C) + " M=" + std::to_string(c.M) + " g=" + std::to_string(c.group) +
                                 " k=" + std::to_string(c.KH) + " s=" + std::to_string(c.stride) + " const=" + std::to_string(constw) +
                                 " threads=" + std::to_string(threads));
    }
}

}  // namespace

TEST(QuantOps, ConvMatchesReference) {
  const ConvCase cases[] = {
      {1, 8, 9, 11, 16, 3, 3, 1, 1, 1, 1, false, true, true},    // 3x3 pad 1
      {2, 6, 7, 7, 10, 1, 1, 1, 1, 0, 1, true, true, false},     // 1x1: the input planes are the right operand
      {1, 8, 10, 9, 12, 3, 3, 2, 2, 1, 1, false, false, true},   // groups, stride 2
      {1, 12, 8, 8, 12, 3, 3, 12, 1, 1, 1, false, true, true},   // depthwise
      {1, 6, 9, 9, 6, 3, 3, 6, 2, 1, 1, true, false, false},     // depthwise, stride 2
      {1, 5, 12, 10, 7, 3, 2, 1, 1, 2, 2, true, true, true},     // dilation 2, non-square kernel
      {1, 3, 5, 5, 70, 5, 5, 1, 1, 2, 1, false, true, false},    // more channels than a tile
      {1, 4, 3, 3, 8, 1, 1, 1, 2, 0, 1, false, true, false},     // 1x1 stride 2
      // enough output pixels for the blocked path (blocks of 256 pixels per thread, a partial last one)
      {1, 4, 40, 40, 8, 3, 3, 1, 1, 1, 1, true, true, true},     // 1600 pixels, 3x3
      {2, 8, 33, 33, 12, 1, 1, 1, 1, 0, 1, false, true, false},  // 1089 pixels, 1x1 direct, batch 2
      {1, 6, 48, 47, 10, 3, 3, 2, 1, 1, 2, false, false, true},  // groups, dilation 2
  };
  for (const auto& c : cases) {
    check_conv(c, false);
    check_conv(c, true);
  }
}

TEST(QuantOps, MatMulMatchesReference) {
  std::mt19937 rng(7);
  for (int signs = 0; signs < 4; ++signs) {
    const bool as = signs & 1, bs = signs & 2;
    for (int zmode = 0; zmode < 3; ++zmode) {
      // A [2, 3, 37] x B [37, 70]; a_zero_point per tensor, per row [3], per batch row [2, 3, 1]
      Tensor A = random8({2, 3, 37}, as, rng), B = random8({37, 70}, bs, rng);
      Shape azs = zmode == 0 ? Shape{} : zmode == 1 ? Shape{3} : Shape{2, 3, 1};
      Tensor az = zp8(azs, as, rng), bz = zp8({70}, bs, rng);
      std::vector<Value> mi = {Value(A), Value(B), Value(az), Value(bz)};
      Tensor want = run_ref("MatMulInteger", mi, {}, [](KernelContext& ctx, const Node&) { quant::matmul_integer_ref(ctx); });
      for (bool constb : {false, true})
        for (int threads : {1, 2})
          expect_same(want, run_fast("MatMulInteger", mi, {}, constb ? std::vector<int>{1, 3} : std::vector<int>{}, threads),
                      "MatMulInteger signs=" + std::to_string(signs) + " zmode=" + std::to_string(zmode));
      if (zmode == 1) {
        // QLinearMatMul with a_scale and a_zero_point per row [3]: with a packed B, one GEMM per row
        std::vector<Value> qr = {Value(A), Value(scales({3}, 0.03f)), Value(az), Value(B), Value(scales({70}, 0.01f)), Value(bz),
                                 Value(scales({}, 0.2f)), Value(zp8({}, !as, rng))};
        Tensor wr = run_ref("QLinearMatMul", qr, {}, [](KernelContext& ctx, const Node&) { quant::qlinear_matmul_ref(ctx); });
        for (bool constb : {false, true})
          expect_same(wr, run_fast("QLinearMatMul", qr, {}, constb ? std::vector<int>{3, 4, 5} : std::vector<int>{}, 2),
                      "QLinearMatMul per-row a_scale signs=" + std::to_string(signs));
      }
      if (zmode != 0) continue;  // QLinearMatMul: a_scale and a_zero_point per tensor here
      std::vector<Value> ql = {Value(A), Value(scales({}, 0.03f)), Value(az), Value(B), Value(scales({70}, 0.01f)), Value(bz),
                               Value(scales({}, 0.2f)), Value(zp8({}, !as, rng))};
      Tensor wq = run_ref("QLinearMatMul", ql, {}, [](KernelContext& ctx, const Node&) { quant::qlinear_matmul_ref(ctx); });
      for (bool constb : {false, true})
        expect_same(wq, run_fast("QLinearMatMul", ql, {}, constb ? std::vector<int>{3, 4, 5} : std::vector<int>{}, 2),
                    "QLinearMatMul signs=" + std::to_string(signs));
    }
  }
}

TEST(QuantOps, BadParametersNameTheProblem) {
  std::mt19937 rng(3);
  Tensor X = random8({1, 4, 5, 5}, false, rng), W = random8({6, 4, 3, 3}, true, rng);
  auto conv_err = [&](std::vector<Value> in) {
    try {
      run_fast("ConvInteger", in, {}, {1}, 1);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(conv_err({Value(X), Value(W), Value(zp8({2}, false, rng))}).find("x_zero_point must be a scalar"), std::string::npos);
  EXPECT_NE(conv_err({Value(X), Value(W), Value(zp8({}, true, rng))}).find("x_zero_point type differs"), std::string::npos);
  EXPECT_NE(conv_err({Value(X), Value(W), Value(zp8({}, false, rng)), Value(zp8({5}, true, rng))}).find("w_zero_point must be a scalar or have 6"),
            std::string::npos);
  EXPECT_NE(conv_err({Value(random8({1, 3, 5, 5}, false, rng)), Value(W)}).find("incompatible"), std::string::npos);
  Tensor A = random8({3, 8}, false, rng), B = random8({8, 5}, true, rng);
  auto mm_err = [&](std::vector<Value> in) {
    try {
      run_fast("MatMulInteger", in, {}, {1}, 1);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(mm_err({Value(A), Value(random8({7, 5}, true, rng))}).find("incompatible"), std::string::npos);
  EXPECT_NE(mm_err({Value(A), Value(B), Value(zp8({}, false, rng)), Value(zp8({4}, true, rng))}).find("b_zero_point has shape"),
            std::string::npos);
  EXPECT_NE(mm_err({Value(A), Value(B), Value(zp8({2}, false, rng))}).find("a_zero_point has shape"), std::string::npos);
  // scales: zero, negative, NaN; QLinearConv and QLinearMatMul, packed weights or not
  Tensor bad_ws = scales({6}, 0.01f);
  bad_ws.data<float>()[4] = 0.f;
  std::vector<Value> qc = {Value(X), Value(scales({}, 0.02f)), Value(zp8({}, false, rng)), Value(W), Value(bad_ws), Value(zp8({6}, true, rng)),
                           Value(scales({}, 0.5f)), Value(zp8({}, false, rng))};
  for (int constw = 0; constw < 2; ++constw) {
    try {
      run_fast("QLinearConv", qc, {}, constw ? std::vector<int>{3, 4, 5} : std::vector<int>{}, 1);
      ADD_FAILURE() << "a zero w_scale was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("w_scale must be positive and finite; element 4"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("QLinearConv"), std::string::npos) << e.what();
    }
  }
  Tensor neg = scales({}, -0.5f);
  std::vector<Value> qm = {Value(A), Value(neg), Value(zp8({}, false, rng)), Value(B), Value(scales({}, 0.1f)), Value(zp8({}, true, rng)),
                           Value(scales({}, 0.5f)), Value(zp8({}, false, rng))};
  try {
    run_fast("QLinearMatMul", qm, {}, {3}, 1);
    ADD_FAILURE() << "a negative a_scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("a_scale must be positive"), std::string::npos) << e.what();
  }
  Tensor F(DType::Float, {3, 8});
  EXPECT_NE(mm_err({Value(F), Value(B)}).find("t"), std::string::npos);
  EXPECT_NE(mm_err({Value(F), Value(B)}), "no error");
}

TEST(QuantOps, QLinearAddBroadcastingMatchesTheEqualShapePath) {
  // the broadcasting path (tables) and the equal-shape path (vectorized) compute the same terms:
  // B [1, 3, 1] against B expanded to A's [2, 3, 17]
  std::mt19937 rng(11);
  for (bool sg : {false, true}) {
    Tensor A = random8({2, 3, 17}, sg, rng), B = random8({1, 3, 1}, sg, rng), Bx(A.dtype(), A.shape());
    for (int64_t i = 0; i < Bx.numel(); ++i) static_cast<uint8_t*>(Bx.raw())[i] = static_cast<const uint8_t*>(B.raw())[(i / 17) % 3];
    auto add = [&](const Tensor& b) {
      return run_op("QLinearAdd", 1,
                    {Value(A), Value(scales({}, 0.05f)), Value(zp8({}, sg, rng)), Value(b), Value(scales({}, 0.02f)), Value(zp8({}, sg, rng)),
                     Value(scales({}, 0.07f)), Value(zp8({}, sg, rng))},
                    {}, 1, "com.microsoft")[0]
          .tensor;
    };
    rng.seed(5);
    Tensor got = add(B);
    rng.seed(5);
    Tensor want = add(Bx);
    expect_same(want, got, std::string("QLinearAdd broadcast, signed=") + (sg ? "1" : "0"));
  }
}
