// Unit tests for the signal group's kernels (src/ops/signal.cpp): DFT round trips, windows, string
// ops (UTF-8 case mapping, splitting), seeded random ops, ai.onnx.ml ops and bad-input errors the
// conformance data does not cover.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace basalt;
using namespace basalt::test;

namespace {

Tensor sig_strings(std::vector<std::string> v) {
  Tensor t(DType::String, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}

}  // namespace

TEST(SignalOps, DftRoundTripAndRfft) {
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  Tensor in = Tensor::from_vector<float>(x, {1, 6, 1});
  Tensor spec = run_op("DFT", 20, {Value(in)})[0].tensor;
  ASSERT_EQ(spec.shape(), (Shape{1, 6, 2}));
  EXPECT_NEAR(spec.data<float>()[0], 21.0f, 1e-5);  // DC = sum
  EXPECT_NEAR(spec.data<float>()[1], 0.0f, 1e-5);
  Tensor back = run_op("DFT", 20, {Value(spec)}, {attr("inverse", 1)})[0].tensor;
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(back.data<float>()[2 * i], x[size_t(i)], 1e-5);
    EXPECT_NEAR(back.data<float>()[2 * i + 1], 0.0f, 1e-5);
  }
  // One-sided forward, then IRFFT back to the real signal.
  Tensor half = run_op("DFT", 17, {Value(in)}, {attr("onesided", 1)})[0].tensor;
  ASSERT_EQ(half.shape(), (Shape{1, 4, 2}));
  Tensor real = run_op("DFT", 17, {Value(half)}, {attr("onesided", 1), attr("inverse", 1)})[0].tensor;
  ASSERT_EQ(real.shape(), (Shape{1, 6, 1}));
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(real.data<float>()[i], x[size_t(i)], 1e-5);
  // dft_length zero-pads.
  Tensor padded = run_op("DFT", 20, {Value(in), Value(Tensor::scalar<int64_t>(8))})[0].tensor;
  EXPECT_EQ(padded.shape(), (Shape{1, 8, 2}));
}

TEST(SignalOps, DftBadInput) {
  Tensor in = Tensor::from_vector<float>({1, 2, 3, 4}, {1, 4, 1});
  EXPECT_THROW(run_op("DFT", 20, {Value(in), Value(), Value(Tensor::scalar<int64_t>(2))}), Error);  // last dim
  EXPECT_THROW(run_op("DFT", 20, {Value(in), Value(Tensor::scalar<int64_t>(0))}), Error);
  Tensor bad = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {1, 2, 3});
  EXPECT_THROW(run_op("DFT", 20, {Value(bad)}), Error);
}

TEST(SignalOps, Windows) {
  Tensor hann = run_op("HannWindow", 17, {Value(Tensor::scalar<int32_t>(4))})[0].tensor;
  ASSERT_EQ(hann.shape(), (Shape{4}));
  const float want[] = {0.0f, 0.5f, 1.0f, 0.5f};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(hann.data<float>()[i], want[i], 1e-6);
  Tensor sym = run_op("HannWindow", 17, {Value(Tensor::scalar<int64_t>(3))},
                       {attr("periodic", 0), attr("output_datatype", 11)})[0].tensor;
  ASSERT_EQ(sym.dtype(), DType::Double);
  EXPECT_NEAR(sym.data<double>()[1], 1.0, 1e-12);
  EXPECT_THROW(run_op("HannWindow", 17, {Value(Tensor::scalar<int64_t>(-1))}), Error);
}

TEST(SignalOps, StringNormalizerUtf8) {
  Tensor x = sig_strings({"ÄPFEL", "und", "Straße", "ΑΒΓ", "Привет"});
  Tensor y = run_op("StringNormalizer", 10, {Value(x)},
                     {attr("case_change_action", "LOWER"), attr("stopwords", Strings{"UND"})})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{4}));
  EXPECT_EQ(y.data<std::string>()[0], "äpfel");
  EXPECT_EQ(y.data<std::string>()[1], "straße");
  EXPECT_EQ(y.data<std::string>()[2], "αβγ");
  EXPECT_EQ(y.data<std::string>()[3], "привет");
  Tensor u = run_op("StringNormalizer", 10, {Value(sig_strings({"éa"}))}, {attr("case_change_action", "UPPER")})[0].tensor;
  EXPECT_EQ(u.data<std::string>()[0], "ÉA");
}

TEST(SignalOps, StringSplit) {
  auto outs = run_op("StringSplit", 20, {Value(sig_strings({"  a b  c ", ""}))}, {}, 2);
  ASSERT_EQ(outs[0].tensor.shape(), (Shape{2, 3}));
  EXPECT_EQ(outs[0].tensor.data<std::string>()[2], "c");
  EXPECT_EQ(outs[1].tensor.data<int64_t>()[0], 3);
  EXPECT_EQ(outs[1].tensor.data<int64_t>()[1], 0);
  auto o2 = run_op("StringSplit", 20, {Value(sig_strings({"a,,b,c"}))}, {attr("delimiter", ","), attr("maxsplit", 1)}, 2);
  ASSERT_EQ(o2[0].tensor.shape(), (Shape{1, 2}));
  EXPECT_EQ(o2[0].tensor.data<std::string>()[1], ",b,c");
}

TEST(SignalOps, SeededRandomIsDeterministic) {
  std::vector<Attribute> a = {attr("shape", Ints{3, 5}), attr("seed", 3.0f), attr("low", 2.0f), attr("high", 4.0f)};
  Tensor r1 = run_op("RandomUniform", 1, {}, a)[0].tensor;
  Tensor r2 = run_op("RandomUniform", 1, {}, a)[0].tensor;
  ASSERT_EQ(r1.shape(), (Shape{3, 5}));
  for (int i = 0; i < 15; ++i) {
    EXPECT_EQ(r1.data<float>()[i], r2.data<float>()[i]);
    EXPECT_GE(r1.data<float>()[i], 2.0f);
    EXPECT_LE(r1.data<float>()[i], 4.0f);
  }
  Tensor logits = Tensor::from_vector<float>({-100.0f, 50.0f, -100.0f}, {1, 3});
  Tensor m = run_op("Multinomial", 7, {Value(logits)}, {attr("sample_size", 4), attr("dtype", 7)})[0].tensor;
  ASSERT_EQ(m.shape(), (Shape{1, 4}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(m.data<int64_t>()[i], 1);
  Tensor p = Tensor::from_vector<float>({0.0f, 1.0f, 1.0f, 0.0f}, {4});
  Tensor b = run_op("Bernoulli", 15, {Value(p)})[0].tensor;
  for (int i = 0; i < 4; ++i) EXPECT_EQ(b.data<float>()[i], p.data<float>()[i]);
}

TEST(SignalOps, TfIdfAndMl) {
  std::vector<Attribute> a = {attr("max_gram_length", 1), attr("min_gram_length", 1), attr("max_skip_count", 0),
                              attr("mode", "TF"), attr("ngram_counts", Ints{0}), attr("ngram_indexes", Ints{0, 1}),
                              attr("pool_int64s", Ints{7, 9})};
  Tensor x = Tensor::from_vector<int64_t>({7, 9, 7, 3}, {4});
  Tensor y = run_op("TfIdfVectorizer", 9, {Value(x)}, a)[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2}));
  EXPECT_EQ(y.data<float>()[0], 2.0f);
  EXPECT_EQ(y.data<float>()[1], 1.0f);
  // Inconsistent pool: 3 entries cannot hold bigrams.
  std::vector<Attribute> bad = a;
  bad[0] = attr("max_gram_length", 2);
  bad[4] = attr("ngram_counts", Ints{0, 0});
  bad[6] = attr("pool_int64s", Ints{7, 9, 3});
  EXPECT_THROW(run_op("TfIdfVectorizer", 9, {Value(x)}, bad), Error);

  // Weights per column (TFIDF: count x weight, IDF: weight where counted); a column no n-gram
  // maps to is 0, and one without a weight keeps weight 1.
  std::vector<Attribute> w = {attr("max_gram_length", 1), attr("min_gram_length", 1), attr("max_skip_count", 0),
                              attr("mode", "TFIDF"), attr("ngram_counts", Ints{0}), attr("ngram_indexes", Ints{3, 1}),
                              attr("pool_int64s", Ints{7, 9}), attr("weights", Floats{0.5f, 4.0f})};
  Tensor tw = run_op("TfIdfVectorizer", 9, {Value(x)}, w)[0].tensor;
  ASSERT_EQ(tw.shape(), (Shape{4}));
  EXPECT_EQ(std::vector<float>(tw.data<float>(), tw.data<float>() + 4), (std::vector<float>{0.0f, 4.0f, 0.0f, 1.0f}));
  w[3] = attr("mode", "IDF");
  Tensor iw = run_op("TfIdfVectorizer", 9, {Value(x)}, w)[0].tensor;
  EXPECT_EQ(std::vector<float>(iw.data<float>(), iw.data<float>() + 4), (std::vector<float>{0.0f, 4.0f, 0.0f, 0.5f}));
  // ngram_indexes that claim 2^40 output columns: the run refuses the output with an error
  // (nothing of that size is allocated when the kernel is made: a fuzzed model did that).
  w[5] = attr("ngram_indexes", Ints{int64_t(1) << 40, 1});
  EXPECT_THROW(run_op("TfIdfVectorizer", 9, {Value(x)}, w), Error);
  w[5] = attr("ngram_indexes", Ints{std::numeric_limits<int64_t>::max(), 1});
  EXPECT_THROW(run_op("TfIdfVectorizer", 9, {Value(x)}, w), Error);

  Tensor feats = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor idx = Tensor::from_vector<int64_t>({2, 0}, {2});
  Tensor z = run_op("ArrayFeatureExtractor", 1, {Value(feats), Value(idx)}, {}, 1, "ai.onnx.ml")[0].tensor;
  ASSERT_EQ(z.shape(), (Shape{2, 2}));
  EXPECT_EQ(z.data<float>()[0], 3.0f);
  EXPECT_EQ(z.data<float>()[3], 4.0f);
  Tensor oob = Tensor::from_vector<int64_t>({3}, {1});
  EXPECT_THROW(run_op("ArrayFeatureExtractor", 1, {Value(feats), Value(oob)}, {}, 1, "ai.onnx.ml"), Error);
}

TEST(SignalOps, TreeEnsembleProbit) {
  Tensor modes(DType::Uint8, {1});
  std::vector<Attribute> a = {
      attr("nodes_featureids", Ints{0}), attr("nodes_truenodeids", Ints{0}), attr("nodes_falsenodeids", Ints{1}),
      attr("nodes_trueleafs", Ints{1}), attr("nodes_falseleafs", Ints{1}), attr("leaf_targetids", Ints{0, 0}),
      attr("tree_roots", Ints{0}), attr("n_targets", 1), attr("post_transform", 4),
      attr("nodes_modes", modes), attr("nodes_splits", Tensor::from_vector<float>({0.5f}, {1})),
      attr("leaf_weights", Tensor::from_vector<float>({0.975f, 0.5f}, {2}))};
  Tensor x = Tensor::from_vector<float>({0.0f, 1.0f}, {2, 1});
  Tensor y = run_op("TreeEnsemble", 5, {Value(x)}, a, 1, "ai.onnx.ml")[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2, 1}));
  EXPECT_NEAR(y.data<float>()[0], 1.959964f, 1e-4);
  EXPECT_NEAR(y.data<float>()[1], 0.0f, 1e-6);
  // A child index past the leaf list is rejected at load.
  a[1] = attr("nodes_truenodeids", Ints{5});
  EXPECT_THROW(run_op("TreeEnsemble", 5, {Value(x)}, a, 1, "ai.onnx.ml"), Error);
}

TEST(SignalOps, DftPowerOfTwoMatchesDirect) {
  // Length 8 (radix-2 path) vs length 6 (direct path) checked against the analytic transform of a cosine.
  for (int64_t N : {8, 6}) {
    std::vector<float> x(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) x[size_t(n)] = float(std::cos(2.0 * M_PI * double(n) / double(N)) + 0.5 * std::sin(4.0 * M_PI * double(n) / double(N)));
    Tensor y = run_op("DFT", 20, {Value(Tensor::from_vector<float>(x, {1, N, 1}))})[0].tensor;
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
  Tensor y = run_op("RegexFullMatch", 20, {Value(x)}, {attr("pattern", "(?i)(?P<word>hello)\\d+")})[0].tensor;
  EXPECT_TRUE(y.data<bool>()[0]);
  EXPECT_FALSE(y.data<bool>()[1]);
  EXPECT_TRUE(y.data<bool>()[2]);
  EXPECT_FALSE(y.data<bool>()[3]);
  EXPECT_THROW(run_op("RegexFullMatch", 20, {Value(x)}, {attr("pattern", "(unclosed")}), Error);
}
