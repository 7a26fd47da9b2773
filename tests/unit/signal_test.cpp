// Unit tests for the signal group's kernels (src/ops/signal.cpp): DFT round trips, windows, string
// ops (UTF-8 case mapping, splitting), seeded random ops, ai.onnx.ml ops and bad-input errors the
// conformance data does not cover.
#include "ops/kernel.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>

using namespace basalt;

namespace {

Attribute sig_attr_i(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Int;
  a.i = v;
  return a;
}
Attribute sig_attr_f(const std::string& name, float v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Float;
  a.f = v;
  return a;
}
Attribute sig_attr_s(const std::string& name, const std::string& v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::String;
  a.s = v;
  return a;
}
Attribute sig_attr_ints(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Ints;
  a.ints = std::move(v);
  return a;
}
Attribute sig_attr_strs(const std::string& name, std::vector<std::string> v) {
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Strings;
  a.strings = std::move(v);
  return a;
}

std::vector<Value> sig_run(const std::string& op, int opset, std::vector<Attribute> attrs, std::vector<Value> inputs,
                           int n_out = 1, const std::string& domain = "") {
  Node n;
  n.name = "t";
  n.op_type = op;
  n.domain = domain;
  n.opset = opset;
  n.attrs = std::move(attrs);
  for (size_t i = 0; i < inputs.size(); ++i) n.inputs.push_back(inputs[i].is_none() ? -1 : int(i));
  for (int i = 0; i < n_out; ++i) n.outputs.push_back(100 + i);
  const KernelFactory* f = OpRegistry::instance().find(domain, op, opset);
  if (!f) throw Error(ErrorCode::Unsupported, "no kernel for " + op);
  n.kernel = (*f)(n);
  std::vector<const Value*> ins;
  for (auto& v : inputs) ins.push_back(v.is_none() ? nullptr : &v);
  std::vector<Value> outs(static_cast<size_t>(n_out));
  std::vector<const Value*> impl;
  RunContext rc;
  KernelContext ctx(n, ins, outs, impl, rc);
  n.kernel->compute(ctx);
  return outs;
}

Tensor sig_strings(std::vector<std::string> v) {
  Tensor t(DType::String, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

}  // namespace

TEST(SignalOps, DftRoundTripAndRfft) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  Tensor in = Tensor::from_vector<float>(x, {1, 6, 1});
  Tensor spec = sig_run("DFT", 20, {}, {Value(in)})[0].tensor;
  ASSERT_EQ(spec.shape(), (Shape{1, 6, 2}));
  EXPECT_NEAR(spec.data<float>()[0], 21.0f, 1e-5);  // DC = sum
  EXPECT_NEAR(spec.data<float>()[1], 0.0f, 1e-5);
  Tensor back = sig_run("DFT", 20, {sig_attr_i("inverse", 1)}, {Value(spec)})[0].tensor;
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(back.data<float>()[2 * i], x[size_t(i)], 1e-5);
    EXPECT_NEAR(back.data<float>()[2 * i + 1], 0.0f, 1e-5);
  }
  // One-sided forward, then IRFFT back to the real signal.
  Tensor half = sig_run("DFT", 17, {sig_attr_i("onesided", 1)}, {Value(in)})[0].tensor;
  ASSERT_EQ(half.shape(), (Shape{1, 4, 2}));
  Tensor real = sig_run("DFT", 17, {sig_attr_i("onesided", 1), sig_attr_i("inverse", 1)}, {Value(half)})[0].tensor;
  ASSERT_EQ(real.shape(), (Shape{1, 6, 1}));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(real.data<float>()[i], x[size_t(i)], 1e-5);
  // dft_length zero-pads.
  Tensor padded = sig_run("DFT", 20, {}, {Value(in), Value(Tensor::scalar<int64_t>(8))})[0].tensor;
  EXPECT_EQ(padded.shape(), (Shape{1, 8, 2}));
}

TEST(SignalOps, DftBadInput) {
  Tensor in = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 4, 1});
  EXPECT_THROW(sig_run("DFT", 20, {}, {Value(in), Value(), Value(Tensor::scalar<int64_t>(2))}), Error);  // last dim
  EXPECT_THROW(sig_run("DFT", 20, {}, {Value(in), Value(Tensor::scalar<int64_t>(0))}), Error);
  Tensor bad = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  EXPECT_THROW(sig_run("DFT", 20, {}, {Value(bad)}), Error);
}

TEST(SignalOps, Windows) {
  Tensor hann = sig_run("HannWindow", 17, {}, {Value(Tensor::scalar<int32_t>(4))})[0].tensor;
  ASSERT_EQ(hann.shape(), (Shape{4}));
  const float want[] = {0.0f, 0.5f, 1.0f, 0.5f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(hann.data<float>()[i], want[i], 1e-6);
  Tensor sym = sig_run("HannWindow", 17, {sig_attr_i("periodic", 0), sig_attr_i("output_datatype", 11)},
                       {Value(Tensor::scalar<int64_t>(3))})[0].tensor;
  ASSERT_EQ(sym.dtype(), DType::Double);
  EXPECT_NEAR(sym.data<double>()[1], 1.0, 1e-12);
  EXPECT_THROW(sig_run("HannWindow", 17, {}, {Value(Tensor::scalar<int64_t>(-1))}), Error);
}

TEST(SignalOps, StringNormalizerUtf8) {
  Tensor x = sig_strings({"ÄPFEL", "und", "Straße", "ΑΒΓ", "Привет"});
  Tensor y = sig_run("StringNormalizer", 10, {sig_attr_s("case_change_action", "LOWER"), sig_attr_strs("stopwords", {"UND"})},
                     {Value(x)})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{4}));
  EXPECT_EQ(y.data<std::string>()[0], "äpfel");
  EXPECT_EQ(y.data<std::string>()[1], "straße");
  EXPECT_EQ(y.data<std::string>()[2], "αβγ");
  EXPECT_EQ(y.data<std::string>()[3], "привет");
  Tensor u = sig_run("StringNormalizer", 10, {sig_attr_s("case_change_action", "UPPER")}, {Value(sig_strings({"éa"}))})[0].tensor;
  EXPECT_EQ(u.data<std::string>()[0], "ÉA");
}

TEST(SignalOps, StringSplit) {
  auto outs = sig_run("StringSplit", 20, {}, {Value(sig_strings({"  a b  c ", ""}))}, 2);
  ASSERT_EQ(outs[0].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(outs[0].tensor.data<std::string>()[2], "c");
  EXPECT_EQ(outs[1].tensor.data<int64_t>()[0], 3);
  EXPECT_EQ(outs[1].tensor.data<int64_t>()[1], 0);
  auto o2 = sig_run("StringSplit", 20, {sig_attr_s("delimiter", ","), sig_attr_i("maxsplit", 1)}, {Value(sig_strings({"a,,b,c"}))}, 2);
  ASSERT_EQ(o2[0].tensor.shape(), (Shape{1, 2}));
  EXPECT_EQ(o2[0].tensor.data<std::string>()[1], ",b,c");
}

TEST(SignalOps, SeededRandomIsDeterministic) {
  std::vector<Attribute> a = {sig_attr_ints("shape", {3, 5}), sig_attr_f("seed", 3.0f), sig_attr_f("low", 2.0f), sig_attr_f("high", 4.0f)};
  Tensor r1 = sig_run("RandomUniform", 1, a, {})[0].tensor;
  Tensor r2 = sig_run("RandomUniform", 1, a, {})[0].tensor;
  ASSERT_EQ(r1.shape(), (Shape{3, 5}));
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(r1.data<float>()[i], r2.data<float>()[i]);
    EXPECT_GE(r1.data<float>()[i], 2.0f);
    EXPECT_LE(r1.data<float>()[i], 4.0f);
  }
  Tensor logits = Tensor::from_vector<float>({-100.0f, 50.0f, -100.0f}, {1, 3});
  Tensor m = sig_run("Multinomial", 7, {sig_attr_i("sample_size", 4), sig_attr_i("dtype", 7)}, {Value(logits)})[0].tensor;
  ASSERT_EQ(m.shape(), (Shape{1, 4}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m.data<int64_t>()[i], 1);
  Tensor p = Tensor::from_vector<float>({0.0f, 1.0f, 1.0f, 0.0f}, {4});
  Tensor b = sig_run("Bernoulli", 15, {}, {Value(p)})[0].tensor;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.data<float>()[i], p.data<float>()[i]);
}

TEST(SignalOps, TfIdfAndMl) {
  std::vector<Attribute> a = {sig_attr_i("max_gram_length", 1), sig_attr_i("min_gram_length", 1), sig_attr_i("max_skip_count", 0),
                              sig_attr_s("mode", "TF"), sig_attr_ints("ngram_counts", {0}), sig_attr_ints("ngram_indexes", {0, 1}),
                              sig_attr_ints("pool_int64s", {7, 9})};
  Tensor x = Tensor::from_vector<int64_t>({7, 9, 7, 3}, {4});
  Tensor y = sig_run("TfIdfVectorizer", 9, a, {Value(x)})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.data<float>()[0], 2.0f);
  EXPECT_EQ(y.data<float>()[1], 1.0f);
  // Inconsistent pool: 3 entries cannot hold bigrams.
  std::vector<Attribute> bad = a;
  bad[0] = sig_attr_i("max_gram_length", 2);
  bad[4] = sig_attr_ints("ngram_counts", {0, 0});
  bad[6] = sig_attr_ints("pool_int64s", {7, 9, 3});
  EXPECT_THROW(sig_run("TfIdfVectorizer", 9, bad, {Value(x)}), Error);

  Tensor feats = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor idx = Tensor::from_vector<int64_t>({2, 0}, {2});
  Tensor z = sig_run("ArrayFeatureExtractor", 1, {}, {Value(feats), Value(idx)}, 1, "ai.onnx.ml")[0].tensor;
  ASSERT_EQ(z.shape(), (Shape{2, 2}));
  EXPECT_EQ(z.data<float>()[0], 3.0f);
  EXPECT_EQ(z.data<float>()[3], 4.0f);
  Tensor oob = Tensor::from_vector<int64_t>({3}, {1});
  EXPECT_THROW(sig_run("ArrayFeatureExtractor", 1, {}, {Value(feats), Value(oob)}, 1, "ai.onnx.ml"), Error);
}

TEST(SignalOps, TreeEnsembleProbit) {
  auto tens = [](const std::string& name, Tensor t) {
    Attribute a;
    a.name = name;
    a.type = Attribute::Type::Tensor;
    a.t = std::move(t);
    return a;
  };
  Tensor modes(DType::Uint8, {1});
  std::vector<Attribute> a = {
      sig_attr_ints("nodes_featureids", {0}), sig_attr_ints("nodes_truenodeids", {0}), sig_attr_ints("nodes_falsenodeids", {1}),
      sig_attr_ints("nodes_trueleafs", {1}), sig_attr_ints("nodes_falseleafs", {1}), sig_attr_ints("leaf_targetids", {0, 0}),
      sig_attr_ints("tree_roots", {0}), sig_attr_i("n_targets", 1), sig_attr_i("post_transform", 4),
      tens("nodes_modes", modes), tens("nodes_splits", Tensor::from_vector<float>({0.5f}, {1})),
      tens("leaf_weights", Tensor::from_vector<float>({0.975f, 0.5f}, {2}))};
  Tensor x = Tensor::from_vector<float>({0.0f, 1.0f}, {2, 1});
  Tensor y = sig_run("TreeEnsemble", 5, a, {Value(x)}, 1, "ai.onnx.ml")[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_NEAR(y.data<float>()[0], 1.959964f, 1e-4);
  EXPECT_NEAR(y.data<float>()[1], 0.0f, 1e-6);
  // A child index past the leaf list is rejected at load.
  a[1] = sig_attr_ints("nodes_truenodeids", {5});
  EXPECT_THROW(sig_run("TreeEnsemble", 5, a, {Value(x)}, 1, "ai.onnx.ml"), Error);
}

TEST(SignalOps, DftPowerOfTwoMatchesDirect) {
  // Length 8 (radix-2 path) vs length 6 (direct path) checked against the analytic transform of a cosine.
  for (int64_t N : {8, 6}) {
    std::vector<float> x(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) x[size_t(n)] = float(std::cos(2.0 * M_PI * double(n) / double(N)) + 0.5 * std::sin(4.0 * M_PI * double(n) / double(N)));
    Tensor y = sig_run("DFT", 20, {}, {Value(Tensor::from_vector<float>(x, {1, N, 1}))})[0].tensor;
    for (int64_t k = 0; k < N; ++k) {
      double want_re = (k == 1 || k == N - 1) ? double(N) / 2 : 0.0;
      double want_im = k == 2 ? -double(N) / 4 : (k == N - 2 ? double(N) / 4 : 0.0);
      EXPECT_NEAR(y.data<float>()[2 * k], want_re, 1e-4) << "N=" << N << " k=" << k;
      EXPECT_NEAR(y.data<float>()[2 * k + 1], want_im, 1e-4) << "N=" << N << " k=" << k;
    }
  }
}

TEST(SignalOps, RegexFullMatchRe2Forms) {
  Tensor x = sig_strings({"Hello42", "hello", "HELLO7", "x"});
  Tensor y = sig_run("RegexFullMatch", 20, {sig_attr_s("pattern", "(?i)(?P<word>hello)\\d+")}, {Value(x)})[0].tensor;
  EXPECT_TRUE(y.data<bool>()[0]);
  EXPECT_FALSE(y.data<bool>()[1]);
  EXPECT_TRUE(y.data<bool>()[2]);
  EXPECT_FALSE(y.data<bool>()[3]);
  EXPECT_THROW(sig_run("RegexFullMatch", 20, {sig_attr_s("pattern", "(unclosed")}, {Value(x)}), Error);
}
