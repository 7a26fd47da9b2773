// The shape rules of ops/shape_fns.cpp against the kernels they describe: for each op, the rule
// registered in its family file (OpRegistry traits) is asked for the outputs' dtypes and shapes
// from the inputs' (and, where a rule needs them, their values), and the answer must be what the
// real kernel produces on those inputs. Malformed or absurd attributes must make the rule give up
// (return false), never guess, overflow or crash.
#include "op_tester.hpp"

#include "ops/op_traits.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

using namespace basalt;
using namespace basalt::test;

namespace {

constexpr const char* kMl = "ai.onnx.ml";
constexpr const char* kTrain = "ai.onnx.preview.training";
constexpr const char* kPreview = "ai.onnx.preview";

Tensor os_f(Shape s, float start = 0.1f, float step = 0.05f) {
  Tensor t(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = start + step * float(i % 17);
  return t;
}

Tensor os_typed(DType dt, Shape s) { return Tensor(dt, s); }

Tensor os_i64(std::vector<int64_t> v, Shape s) { return Tensor::from_vector<int64_t>(v, s); }

Tensor os_strings(std::vector<std::string> v) {
  Tensor t(DType::String, {int64_t(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
  return t;
}


const OpTraits& os_traits(const std::string& domain, const std::string& op) {
  const OpTraits* t = OpRegistry::instance().traits(domain, op);
  if (!t || !t->shape) throw Error(ErrorCode::Internal, "no shape rule for " + op);
  return *t;
}

// Runs the rule on the inputs' dtypes and shapes; inputs listed in `with_values` also carry their
// contents. Returns whether it answered (an Error it throws counts as not answering).
bool os_infer(const std::string& domain, const std::string& op, int opset, const std::vector<Value>& inputs,
              const std::vector<Attribute>& attrs, int outputs, ShapeOutputs& out,
              const std::vector<size_t>& with_values = {}) {
  const OpTraits& t = os_traits(domain, op);
  Node n = test_node(domain, op, opset, inputs, attrs, outputs);
  std::vector<InferredValue> iv(inputs.size());
  ShapeInputs in;
  in.v.assign(inputs.size(), nullptr);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_none()) continue;
    const Tensor& x = inputs[i].tensor;
    iv[i].state = InferredValue::State::Known;
    iv[i].dtype = x.dtype();
    iv[i].shape = x.shape();
    for (size_t k : with_values)
      if (k == i) iv[i].value = x;
    in.v[i] = &iv[i];
  }
  out.assign(size_t(outputs), InferredValue());
  try {
    return t.shape(n, in, out);
  } catch (const Error&) {
    return false;
  }
}

// The rule on (dtype, shape) pairs alone, for shapes too large to allocate.
bool os_infer_shapes(const std::string& domain, const std::string& op, int opset, std::vector<std::pair<DType, Shape>> ins,
                     std::vector<Attribute> attrs, int outputs = 1) {
  const OpTraits& t = os_traits(domain, op);
  std::vector<Value> dummy(ins.size(), Value(Tensor::scalar<float>(0)));
  Node n = test_node(domain, op, opset, dummy, std::move(attrs), outputs);
  std::vector<InferredValue> iv(ins.size());
  ShapeInputs in;
  for (size_t i = 0; i < ins.size(); ++i) {
    iv[i].state = InferredValue::State::Known;
    iv[i].dtype = ins[i].first;
    iv[i].shape = ins[i].second;
    in.v.push_back(&iv[i]);
  }
  ShapeOutputs out(static_cast<size_t>(outputs));
  try {
    return t.shape(n, in, out);
  } catch (const Error&) {
    return false;
  }
}

// The rule's answer equals what the kernel computes, output by output.
void expect_rule_matches_kernel(const std::string& domain, const std::string& op, int opset, std::vector<Value> inputs,
                                std::vector<Attribute> attrs, int outputs = 1, std::vector<size_t> with_values = {}) {
  SCOPED_TRACE(op + "-" + std::to_string(opset));
  std::vector<Value> ys = run_op(op, opset, inputs, attrs, outputs, domain);
  ShapeOutputs pred;
  ASSERT_TRUE(os_infer(domain, op, opset, inputs, attrs, outputs, pred, with_values)) << "the rule gave up";
  ASSERT_EQ(pred.size(), ys.size());
  for (size_t k = 0; k < ys.size(); ++k) {
    SCOPED_TRACE("output " + std::to_string(k));
    ASSERT_TRUE(ys[k].is_tensor());
    ASSERT_TRUE(pred[k].known());
    EXPECT_EQ(pred[k].dtype, ys[k].tensor.dtype()) << dtype_name(pred[k].dtype) << " vs " << dtype_name(ys[k].tensor.dtype());
    EXPECT_EQ(pred[k].shape, ys[k].tensor.shape()) << shape_str(pred[k].shape) << " vs " << shape_str(ys[k].tensor.shape());
  }
}

// The rule must give up (and the kernel, where it can be built, must refuse too: the rule never
// answers for a node the kernel would reject).
void expect_rule_gives_up(const std::string& domain, const std::string& op, int opset, std::vector<Value> inputs,
                          std::vector<Attribute> attrs, int outputs = 1, std::vector<size_t> with_values = {}) {
  SCOPED_TRACE(op + "-" + std::to_string(opset));
  ShapeOutputs pred;
  EXPECT_FALSE(os_infer(domain, op, opset, inputs, attrs, outputs, pred, with_values));
  EXPECT_THROW(run_op(op, opset, inputs, attrs, outputs, domain), Error);
}

Value none() { return Value(); }

constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();

}  // namespace

// ---------------------------------------------------------------- random, Bernoulli, Multinomial

TEST(OpShapes, RandomOps) {
  expect_rule_matches_kernel("", "RandomUniform", 1, {}, {attr("shape", Ints{2, 3}), attr("seed", 1.0f)});
  expect_rule_matches_kernel("", "RandomNormal", 1, {}, {attr("shape", Ints{4}), attr("dtype", 11), attr("seed", 2.0f)});
  expect_rule_matches_kernel("", "RandomNormal", 1, {}, {attr("shape", Ints{}), attr("dtype", 10)});
  expect_rule_matches_kernel("", "RandomUniformLike", 1, {os_typed(DType::Double, {3, 2})}, {attr("seed", 1.0f)});
  expect_rule_matches_kernel("", "RandomUniformLike", 1, {os_typed(DType::Double, {3})}, {attr("dtype", 1)});
  expect_rule_matches_kernel("", "RandomNormalLike", 1, {os_f({2, 0, 2})}, {attr("dtype", 16)});
  expect_rule_matches_kernel("", "Bernoulli", 15, {os_f({2, 3}, 0.0f, 0.05f)}, {attr("seed", 3.0f)});
  expect_rule_matches_kernel("", "Bernoulli", 15, {os_f({5}, 0.0f, 0.1f)}, {attr("dtype", 9)});
  expect_rule_matches_kernel("", "Bernoulli", 15, {os_f({2, 2}, 0.0f, 0.1f)}, {attr("dtype", 6)});
  expect_rule_matches_kernel("", "Multinomial", 7, {os_f({2, 3})}, {attr("sample_size", 4), attr("dtype", 7)});
  expect_rule_matches_kernel("", "Multinomial", 7, {os_f({3, 5})}, {});
}

TEST(OpShapes, RandomOpsMalformed) {
  // A shape whose element count overflows int64, or is beyond 2^40; a negative dim; bad dtypes.
  expect_rule_gives_up("", "RandomUniform", 1, {}, {attr("shape", Ints{int64_t(1) << 40, int64_t(1) << 40})});
  expect_rule_gives_up("", "RandomUniform", 1, {}, {attr("shape", Ints{kHuge, kHuge, 2})});
  expect_rule_gives_up("", "RandomNormal", 1, {}, {attr("shape", Ints{2, -1})});
  expect_rule_gives_up("", "RandomNormal", 1, {}, {attr("shape", Ints{2}), attr("dtype", 6)});
  expect_rule_gives_up("", "RandomNormal", 1, {}, {attr("shape", Ints{2}), attr("dtype", kHuge)});
  expect_rule_gives_up("", "RandomNormal", 1, {}, {attr("shape", Ints{2}), attr("scale", -1.0f)});
  expect_rule_gives_up("", "RandomUniform", 1, {}, {attr("shape", Ints{2}), attr("low", 2.0f), attr("high", 1.0f)});
  expect_rule_gives_up("", "RandomUniform", 1, {}, {});  // no shape
  expect_rule_gives_up("", "RandomUniformLike", 1, {os_f({2})}, {attr("dtype", int64_t(1) << 32 | 1)});
  expect_rule_gives_up("", "RandomNormalLike", 1, {os_typed(DType::Int32, {2})}, {});
  expect_rule_gives_up("", "Bernoulli", 15, {os_f({2})}, {attr("dtype", -3)});
  expect_rule_gives_up("", "Bernoulli", 15, {os_typed(DType::Int64, {2})}, {});
  expect_rule_gives_up("", "Multinomial", 7, {os_f({2, 3})}, {attr("sample_size", -1)});
  expect_rule_gives_up("", "Multinomial", 7, {os_f({2, 3})}, {attr("dtype", 1)});
  expect_rule_gives_up("", "Multinomial", 7, {os_f({6})}, {});
}

// ---------------------------------------------------------------- ai.onnx.ml, TfIdfVectorizer

TEST(OpShapes, MlOps) {
  expect_rule_matches_kernel(kMl, "Binarizer", 1, {os_f({2, 3})}, {attr("threshold", 0.2f)});
  expect_rule_matches_kernel(kMl, "Binarizer", 1, {os_typed(DType::Int32, {4})}, {});
  expect_rule_matches_kernel(kMl, "ArrayFeatureExtractor", 1, {os_f({2, 4}), os_i64({3, 0, 1}, {3})}, {});
  expect_rule_matches_kernel(kMl, "ArrayFeatureExtractor", 1, {os_f({4}), os_i64({1, 2}, {2})}, {});
  expect_rule_matches_kernel(kMl, "ArrayFeatureExtractor", 1, {os_f({2, 2, 5}), os_i64({4, 4, 0, 1}, {2, 2})}, {});
  expect_rule_matches_kernel(kMl, "LabelEncoder", 2, {os_strings({"a", "c", "b"})},
                             {attr("keys_strings", Strings{"a", "b"}), attr("values_int64s", Ints{7, 8})});
  expect_rule_matches_kernel(kMl, "LabelEncoder", 4, {os_i64({1, 5, 2, 3}, {2, 2})},
                             {attr("keys_int64s", Ints{1, 2}), attr("values_tensor", Tensor::from_vector<double>({0.5, 1.5}))});
  expect_rule_matches_kernel(kMl, "LabelEncoder", 1, {os_strings({"x", "y"})}, {attr("classes_strings", Strings{"y", "x"})});
  expect_rule_matches_kernel(kMl, "LabelEncoder", 1, {os_i64({0, 3}, {2})}, {attr("classes_strings", Strings{"y", "x"})});
  // One tree: node 0 splits feature 1 at 0.5 (BRANCH_LEQ) into leaves 0 and 1 of targets 0 and 2.
  std::vector<Attribute> tree = {
      attr("nodes_featureids", Ints{1}),     attr("nodes_truenodeids", Ints{0}), attr("nodes_falsenodeids", Ints{1}),
      attr("nodes_trueleafs", Ints{1}),      attr("nodes_falseleafs", Ints{1}),
      attr("nodes_modes", Tensor::from_vector<uint8_t>({0}, {1})),
      attr("nodes_splits", Tensor::from_vector<float>({0.5f}, {1})),
      attr("leaf_targetids", Ints{0, 2}),    attr("leaf_weights", Tensor::from_vector<float>({1.0f, 2.0f})),
      attr("tree_roots", Ints{0}),           attr("n_targets", 3)};
  expect_rule_matches_kernel(kMl, "TreeEnsemble", 5, {os_f({4, 2})}, tree);
  expect_rule_matches_kernel(kMl, "TreeEnsemble", 5, {os_typed(DType::Double, {2})}, tree);
  std::vector<Attribute> tfidf = {attr("mode", "TFIDF"), attr("min_gram_length", 1), attr("max_gram_length", 2),
                                  attr("max_skip_count", 0), attr("ngram_counts", Ints{0, 3}),
                                  attr("ngram_indexes", Ints{0, 4, 2, 1}), attr("pool_int64s", Ints{2, 3, 5, 2, 3}),
                                  attr("weights", Floats{1, 2, 3, 4})};
  expect_rule_matches_kernel("", "TfIdfVectorizer", 9, {os_i64({2, 3, 5, 2, 3, 3, 2, 5}, {2, 4})}, tfidf);
  expect_rule_matches_kernel("", "TfIdfVectorizer", 9, {os_i64({2, 3, 5}, {3})}, tfidf);
  expect_rule_matches_kernel("", "TfIdfVectorizer", 9, {Tensor::from_vector<int32_t>({2, 3}, {1, 2})}, tfidf);
}

TEST(OpShapes, MlOpsMalformed) {
  expect_rule_gives_up(kMl, "Binarizer", 1, {os_strings({"a"})}, {});
  expect_rule_gives_up(kMl, "ArrayFeatureExtractor", 1, {os_f({2, 4}), os_f({2})}, {});
  expect_rule_gives_up(kMl, "LabelEncoder", 2, {os_strings({"a"})}, {attr("keys_strings", Strings{"a", "b"}), attr("values_int64s", Ints{7})});
  expect_rule_gives_up(kMl, "LabelEncoder", 2, {os_strings({"a"})}, {attr("keys_strings", Strings{"a"})});
  expect_rule_gives_up(kMl, "LabelEncoder", 2, {os_i64({1}, {1})}, {attr("keys_strings", Strings{"a"}), attr("values_int64s", Ints{7})});
  expect_rule_gives_up(kMl, "LabelEncoder", 1, {os_f({1})}, {attr("classes_strings", Strings{"a"})});
  std::vector<Attribute> tree = {
      attr("nodes_featureids", Ints{0}), attr("nodes_truenodeids", Ints{0}), attr("nodes_falsenodeids", Ints{0}),
      attr("nodes_trueleafs", Ints{1}),  attr("nodes_falseleafs", Ints{1}),
      attr("nodes_modes", Tensor::from_vector<uint8_t>({0}, {1})),
      attr("nodes_splits", Tensor::from_vector<float>({0.5f}, {1})),
      attr("leaf_targetids", Ints{0}),   attr("leaf_weights", Tensor::from_vector<float>({1.0f})),
      attr("tree_roots", Ints{0}),       attr("n_targets", 0)};
  expect_rule_gives_up(kMl, "TreeEnsemble", 5, {os_f({2, 2})}, tree);
  tree.back() = attr("n_targets", kHuge);  // [N, 2^63-1]: N * T overflows
  {
    ShapeOutputs out;
    EXPECT_FALSE(os_infer(kMl, "TreeEnsemble", 5, {os_f({4, 2})}, tree, 1, out));
  }
  std::vector<Attribute> tfidf = {attr("mode", "TF"), attr("min_gram_length", 1), attr("max_gram_length", 1),
                                  attr("max_skip_count", 0), attr("ngram_counts", Ints{0}),
                                  attr("ngram_indexes", Ints{kHuge}), attr("pool_int64s", Ints{2})};
  expect_rule_gives_up("", "TfIdfVectorizer", 9, {os_i64({2}, {1})}, tfidf);
  tfidf[5] = attr("ngram_indexes", Ints{-1});
  expect_rule_gives_up("", "TfIdfVectorizer", 9, {os_i64({2}, {1})}, tfidf);
  tfidf[5] = attr("ngram_indexes", Ints{0});
  tfidf[0] = attr("mode", "BM25");
  expect_rule_gives_up("", "TfIdfVectorizer", 9, {os_i64({2}, {1})}, tfidf);
  tfidf[0] = attr("mode", "TF");
  {
    ShapeOutputs out;  // the pool holds int64s: a string input does not match
    EXPECT_FALSE(os_infer("", "TfIdfVectorizer", 9, {os_strings({"a"})}, tfidf, 1, out));
    EXPECT_FALSE(os_infer("", "TfIdfVectorizer", 9, {os_i64({2, 2, 2, 2, 2, 2, 2, 2}, {2, 2, 2})}, tfidf, 1, out));
  }
}

// ---------------------------------------------------------------- training optimizers

TEST(OpShapes, TrainingOptimizers) {
  Tensor R = Tensor::scalar<float>(0.1f), T = Tensor::scalar<int64_t>(1);
  // Two tensors per group: outputs come group by group (X1', X2', H1', H2').
  expect_rule_matches_kernel(kTrain, "Adagrad", 1, {R, T, os_f({2}), os_f({3, 1}), os_f({2}), os_f({3, 1}), os_f({2}), os_f({3, 1})},
                             {}, 4);
  expect_rule_matches_kernel(kTrain, "Momentum", 1, {R, T, os_typed(DType::Double, {2, 2}), os_typed(DType::Double, {2, 2}), os_typed(DType::Double, {2, 2})},
                             {attr("alpha", 0.9f), attr("beta", 0.1f), attr("norm_coefficient", 0.0f), attr("mode", "nesterov")}, 2);
  expect_rule_matches_kernel(kTrain, "Adam", 1, {R, T, os_f({3}), os_f({3}), os_f({3}), os_f({3})}, {}, 3);
}

TEST(OpShapes, TrainingOptimizersMalformed) {
  Tensor R = Tensor::scalar<float>(0.1f), T = Tensor::scalar<int64_t>(1);
  expect_rule_gives_up(kTrain, "Momentum", 1, {R, T, os_f({2}), os_f({2}), os_f({2})},
                       {attr("alpha", 0.9f), attr("beta", 0.1f), attr("norm_coefficient", 0.0f), attr("mode", "heavy")}, 2);
  expect_rule_gives_up(kTrain, "Adagrad", 1, {R, T, os_f({2}), os_f({3}), os_f({2})}, {}, 2);  // G's shape differs
  expect_rule_gives_up(kTrain, "Adam", 1, {R, T, os_f({2}), os_f({2}), os_f({2})}, {}, 3);     // a group short
  ShapeOutputs out;  // more outputs than the op produces
  EXPECT_FALSE(os_infer(kTrain, "Adam", 1, {R, T, os_f({2}), os_f({2}), os_f({2}), os_f({2})}, {}, 4, out));
}

// ---------------------------------------------------------------- attention family

TEST(OpShapes, AttentionFamily) {
  expect_rule_matches_kernel("", "BitCast", 26, {os_f({2, 3})}, {attr("to", 6)});
  expect_rule_matches_kernel("", "BitCast", 26, {os_typed(DType::Int16, {4})}, {attr("to", 10)});
  expect_rule_matches_kernel("", "BitCast", 26, {os_typed(DType::Uint8, {2, 0})}, {attr("to", 9)});
  expect_rule_matches_kernel("", "SwiGLU", 28, {os_f({2, 3}), os_f({3})}, {});
  expect_rule_matches_kernel("", "SwiGLU", 28, {os_f({1, 4}), os_f({3, 1})}, {attr("alpha", 1.702f)});
  // linear: no decay / beta; 2 query heads share 1 kv head; dk = 4, dv = 5.
  expect_rule_matches_kernel("", "LinearAttention", 27, {os_f({1, 3, 8}), os_f({1, 3, 4}), os_f({1, 3, 5})},
                             {attr("q_num_heads", 2), attr("kv_num_heads", 1), attr("update_rule", "linear")}, 2);
  expect_rule_matches_kernel("", "LinearAttention", 27,
                             {os_f({2, 2, 4}), os_f({2, 2, 4}), os_f({2, 2, 6}), os_typed(DType::Double, {2, 2, 2, 3}),
                              os_f({2, 2, 2}), os_f({2, 2, 2})},
                             {attr("q_num_heads", 2), attr("kv_num_heads", 2)}, 2);
  expect_rule_matches_kernel("", "LinearAttention", 27, {os_f({1, 3, 8}), os_f({1, 3, 4}), os_f({1, 3, 5})},
                             {attr("q_num_heads", 2), attr("kv_num_heads", 1), attr("update_rule", "linear")}, 1);
  expect_rule_matches_kernel(kPreview, "FlexAttention", 1, {os_f({1, 2, 3, 4}), os_f({1, 1, 5, 4}), os_f({1, 1, 5, 6})}, {});
  expect_rule_matches_kernel(kPreview, "FlexAttention", 1,
                             {os_typed(DType::Double, {2, 4, 1, 2}), os_typed(DType::Double, {2, 2, 3, 2}), os_typed(DType::Double, {2, 2, 3, 1})},
                             {attr("scale", 0.5f), attr("softmax_precision", 11)});
}

TEST(OpShapes, AttentionFamilyMalformed) {
  expect_rule_gives_up("", "BitCast", 26, {os_f({2})}, {attr("to", 7)});   // 4 bytes to 8
  expect_rule_gives_up("", "BitCast", 26, {os_f({2})}, {attr("to", 8)});   // string
  expect_rule_gives_up("", "BitCast", 26, {os_f({2})}, {attr("to", kHuge)});
  expect_rule_gives_up("", "BitCast", 26, {os_typed(DType::Uint8, {2})}, {attr("to", 21)});  // sub-byte
  expect_rule_gives_up("", "SwiGLU", 28, {os_f({2, 3}), os_f({4})}, {});
  expect_rule_gives_up("", "SwiGLU", 28, {os_typed(DType::Int32, {2}), os_typed(DType::Int32, {2})}, {});
  expect_rule_gives_up("", "LinearAttention", 27, {os_f({1, 3, 8}), os_f({1, 3, 4}), os_f({1, 3, 5})},
                       {attr("q_num_heads", 3), attr("kv_num_heads", 2), attr("update_rule", "linear")}, 2);
  expect_rule_gives_up("", "LinearAttention", 27, {os_f({1, 3, 8}), os_f({1, 3, 4}), os_f({1, 3, 5})},
                       {attr("q_num_heads", kHuge), attr("kv_num_heads", 1), attr("update_rule", "linear")}, 2);
  expect_rule_gives_up("", "LinearAttention", 27, {os_f({1, 3, 8}), os_f({1, 3, 4}), os_f({1, 3, 5})},
                       {attr("q_num_heads", 2), attr("kv_num_heads", 1)}, 2);  // gated_delta needs decay and beta
  expect_rule_gives_up("", "LinearAttention", 27, {os_f({1, 3, 8}), os_f({1, 3, 4}), os_f({1, 3, 5})},
                       {attr("q_num_heads", 2), attr("kv_num_heads", 1), attr("update_rule", "fast")}, 2);
  expect_rule_gives_up(kPreview, "FlexAttention", 1, {os_f({1, 2, 3, 4}), os_f({1, 1, 5, 4}), os_f({1, 1, 5, 6})},
                       {attr("softmax_precision", 6)});
  expect_rule_gives_up(kPreview, "FlexAttention", 1, {os_f({1, 2, 3, 4}), os_f({1, 1, 5, 4}), os_f({1, 1, 5, 6})},
                       {attr("is_causal", 1)});
  expect_rule_gives_up(kPreview, "FlexAttention", 1, {os_f({1, 3, 3, 4}), os_f({1, 2, 5, 4}), os_f({1, 2, 5, 6})}, {});
}

// ---------------------------------------------------------------- nn family

TEST(OpShapes, NnFamily) {
  expect_rule_matches_kernel("", "CausalConvWithState", 27, {os_f({1, 2, 5}), os_f({2, 1, 3}), os_f({2}), os_f({1, 2, 2})},
                             {attr("activation", "silu")}, 2);
  expect_rule_matches_kernel("", "CausalConvWithState", 27, {os_f({2, 4, 3}), os_f({4, 2, 1})}, {}, 2);
  expect_rule_matches_kernel("", "CausalConvWithState", 27, {os_f({2, 4, 3}), os_f({4, 1, 4})}, {}, 1);
  // group 2: W [4, 1, 3, 3] over 2 channels; offset [N, 2*9, OH, OW].
  expect_rule_matches_kernel("", "DeformConv", 19, {os_f({1, 2, 4, 4}), os_f({4, 1, 3, 3}), os_f({1, 18, 2, 2}), os_f({4})},
                             {attr("group", 2)});
  expect_rule_matches_kernel("", "DeformConv", 22,
                             {os_f({2, 2, 5, 6}), os_f({3, 2, 2, 2}), os_f({2, 16, 3, 3}), none(), os_f({2, 8, 3, 3})},
                             {attr("offset_group", 2), attr("strides", Ints{2, 2}), attr("pads", Ints{0, 0, 1, 1})});
  expect_rule_matches_kernel("", "GridSample", 16, {os_f({1, 2, 3, 3}), os_f({1, 4, 5, 2}, -1.0f, 0.1f)}, {});
  expect_rule_matches_kernel("", "GridSample", 20, {os_f({2, 1, 3, 3, 3}), os_f({2, 2, 2, 4, 3}, -0.9f, 0.1f)},
                             {attr("mode", "nearest"), attr("padding_mode", "border")});
  expect_rule_matches_kernel("", "MaxRoiPool", 1, {os_f({1, 2, 6, 6}), Tensor::from_vector<float>({0, 0, 0, 3, 3, 0, 1, 1, 5, 4, 0, 2, 2, 2, 2}, {3, 5})},
                             {attr("pooled_shape", Ints{2, 3})});
  expect_rule_matches_kernel("", "RoiAlign", 16, {os_f({1, 2, 5, 5}), Tensor::from_vector<float>({0, 0, 3, 3, 1, 1, 4, 2}, {2, 4}), os_i64({0, 0}, {2})},
                             {attr("output_height", 2), attr("output_width", 3)});
  expect_rule_matches_kernel("", "RoiAlign", 10, {os_f({2, 3, 4, 4}), Tensor::from_vector<float>({0, 0, 3, 3}, {1, 4}), os_i64({1}, {1})},
                             {attr("mode", "max")});
  Tensor I = os_i64({0, 3, 9, 14}, {1, 1, 2, 2});
  expect_rule_matches_kernel("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I}, {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{2, 2})});
  expect_rule_matches_kernel("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I, os_i64({1, 1, 5, 5}, {4})},
                             {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{2, 2})}, 1, {2});
  expect_rule_matches_kernel("", "MaxUnpool", 22, {os_f({1, 1, 2, 2}), os_i64({0, 1, 2, 3}, {1, 1, 2, 2})},
                             {attr("kernel_shape", Ints{2, 3}), attr("pads", Ints{0, 1, 0, 0})});
  // output_shape of unknown contents: the shape is not known.
  ShapeOutputs out;
  EXPECT_FALSE(os_infer("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I, os_i64({1, 1, 5, 5}, {4})},
                        {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{2, 2})}, 1, out));
}

TEST(OpShapes, NnFamilyMalformed) {
  expect_rule_gives_up("", "CausalConvWithState", 27, {os_f({1, 2, 5}), os_f({2, 1, 3})}, {attr("activation", "gelu")}, 2);
  expect_rule_gives_up("", "CausalConvWithState", 27, {os_f({1, 2, 5}), os_f({3, 1, 3})}, {}, 2);
  expect_rule_gives_up("", "CausalConvWithState", 27, {os_f({1, 2, 5}), os_f({2, 1, 3}), none(), os_f({1, 2, 3})}, {}, 2);
  Tensor X = os_f({1, 2, 4, 4}), W = os_f({4, 1, 3, 3}), O = os_f({1, 18, 2, 2});
  expect_rule_gives_up("", "DeformConv", 19, {X, W, O}, {attr("group", kHuge)});
  expect_rule_gives_up("", "DeformConv", 19, {X, W, O}, {attr("group", 2), attr("strides", Ints{kHuge, 1})});
  expect_rule_gives_up("", "DeformConv", 19, {X, W, O}, {attr("group", 2), attr("dilations", Ints{int64_t(1) << 31, 1})});
  expect_rule_gives_up("", "DeformConv", 19, {X, W, O}, {attr("group", 2), attr("pads", Ints{-1, 0, 0, 0})});
  expect_rule_gives_up("", "DeformConv", 19, {X, W, O}, {attr("group", 2), attr("auto_pad", "FULL")});
  expect_rule_gives_up("", "DeformConv", 19, {X, W, os_f({1, 18, 3, 3})}, {attr("group", 2)});  // offset shape
  // A kernel of 2^23 x 2^30 taps with offset_group 2^30: 2 * offset_group * KH * KW overflows.
  EXPECT_FALSE(os_infer_shapes("", "DeformConv", 19,
                               {{DType::Float, {1, int64_t(1) << 30, 1 << 24, 1 << 30}}, {DType::Float, {4, int64_t(1) << 30, 1 << 23, 1 << 30}},
                                {DType::Float, {1, 2, 1, 1}}},
                               {attr("offset_group", 1 << 30)}));
  expect_rule_gives_up("", "GridSample", 16, {os_f({1, 2, 3, 3}), os_f({1, 4, 5, 2})}, {attr("mode", "area")});
  expect_rule_gives_up("", "GridSample", 16, {os_f({1, 2, 3, 3}), os_f({1, 4, 5, 2})}, {attr("padding_mode", "wrap")});
  expect_rule_gives_up("", "GridSample", 20, {os_f({1, 2, 3, 3, 3}), os_f({1, 4, 5, 2, 3})}, {attr("mode", "cubic")});
  expect_rule_gives_up("", "GridSample", 16, {os_f({1, 2, 3, 3}), os_f({1, 4, 5, 3})}, {});
  Tensor rois5 = Tensor::from_vector<float>({0, 0, 0, 3, 3}, {1, 5});
  expect_rule_gives_up("", "MaxRoiPool", 1, {os_f({1, 2, 6, 6}), rois5}, {attr("pooled_shape", Ints{2, -2})});
  expect_rule_gives_up("", "MaxRoiPool", 1, {os_f({1, 2, 6, 6}), rois5}, {attr("pooled_shape", Ints{2})});
  Tensor rois4 = Tensor::from_vector<float>({0, 0, 3, 3}, {1, 4});
  expect_rule_gives_up("", "RoiAlign", 16, {os_f({1, 2, 5, 5}), rois4, os_i64({0}, {1})}, {attr("output_height", 0)});
  expect_rule_gives_up("", "RoiAlign", 16, {os_f({1, 2, 5, 5}), rois4, os_i64({0}, {1})}, {attr("sampling_ratio", kHuge)});
  expect_rule_gives_up("", "RoiAlign", 16, {os_f({1, 2, 5, 5}), rois4, os_i64({0}, {1})}, {attr("coordinate_transformation_mode", "asymmetric")});
  expect_rule_gives_up("", "RoiAlign", 16, {os_f({1, 2, 5, 5}), rois4, os_i64({0, 0}, {2})}, {});
  Tensor I = os_i64({0, 3, 9, 14}, {1, 1, 2, 2});
  expect_rule_gives_up("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I}, {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{kHuge, 2})});
  expect_rule_gives_up("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I}, {attr("kernel_shape", Ints{2})});
  expect_rule_gives_up("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I}, {attr("kernel_shape", Ints{1, 1}), attr("pads", Ints{1, 1, 1, 1})});
  expect_rule_gives_up("", "MaxUnpool", 11, {os_f({1, 1, 2, 2}), I, os_i64({1, 1, 5}, {3})}, {attr("kernel_shape", Ints{2, 2})}, 1, {2});
  // Huge inputs: (D - 1) * stride overflows int64 (the rule alone: nothing that size is allocated).
  EXPECT_FALSE(os_infer_shapes("", "MaxUnpool", 11, {{DType::Float, {1, 1, int64_t(1) << 40}}, {DType::Int64, {1, 1, int64_t(1) << 40}}},
                               {attr("kernel_shape", Ints{2}), attr("strides", Ints{INT32_MAX})}));
  // ... or the output's element count does.
  EXPECT_FALSE(os_infer_shapes("", "MaxUnpool", 11,
                               {{DType::Float, {1, 1, int64_t(1) << 30, int64_t(1) << 30}}, {DType::Int64, {1, 1, int64_t(1) << 30, int64_t(1) << 30}}},
                               {attr("kernel_shape", Ints{2, 2}), attr("strides", Ints{1 << 20, 1 << 20})}));
}

// ---------------------------------------------------------------- reduce family

TEST(OpShapes, ReduceFamily) {
  expect_rule_matches_kernel("", "Det", 11, {os_f({2, 3, 3})}, {});
  expect_rule_matches_kernel("", "Det", 22, {os_typed(DType::Double, {2, 2})}, {});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({2, 3, 4}), os_f({2, 4, 5})}, {attr("equation", "bij,bjk->bik")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({3, 4}), os_f({4, 2})}, {attr("equation", "ij,jk")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({3, 3})}, {attr("equation", "ii")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({3, 3})}, {attr("equation", "ii->i")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({2, 1, 3, 4}), os_f({5, 4, 2})}, {attr("equation", "...ij,...jk->...ik")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_typed(DType::Int32, {2, 3, 4})}, {attr("equation", "...ij")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({2, 3}), os_f({4})}, {attr("equation", "ba, c -> cab")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({3}), os_f({3})}, {attr("equation", "i,i->")});
  expect_rule_matches_kernel("", "Einsum", 12, {os_f({2, 3}), os_f({3})}, {attr("equation", "Bi,i")});
  Tensor x = os_f({2, 3, 4});
  Tensor tgt = os_i64({0, 1, 2, 0, 1, 1, 2, 0}, {2, 4});
  expect_rule_matches_kernel("", "NegativeLogLikelihoodLoss", 13, {x, tgt}, {attr("reduction", "none")});
  expect_rule_matches_kernel("", "NegativeLogLikelihoodLoss", 22, {x, tgt, os_f({3})}, {});
  expect_rule_matches_kernel("", "NegativeLogLikelihoodLoss", 12, {os_f({2, 3}), os_i64({0, 1}, {2})}, {attr("reduction", "sum")});
  expect_rule_matches_kernel("", "SoftmaxCrossEntropyLoss", 13, {x, tgt}, {attr("reduction", "none")}, 2);
  expect_rule_matches_kernel("", "SoftmaxCrossEntropyLoss", 12, {os_f({2, 3}), os_i64({0, 1}, {2}), os_f({3})},
                             {attr("ignore_index", 1)}, 2);
  expect_rule_matches_kernel("", "SoftmaxCrossEntropyLoss", 13, {x, tgt}, {}, 1);
}

TEST(OpShapes, ReduceFamilyMalformed) {
  expect_rule_gives_up("", "Det", 11, {os_f({2, 3})}, {});
  expect_rule_gives_up("", "Det", 11, {os_typed(DType::Int32, {2, 2})}, {});
  Tensor a = os_f({2, 3}), b = os_f({3, 4});
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ij,jk->ik,")});
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ij,jk->i1")});
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ij,kk->ik")});   // k: 3 vs 4
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ij->ij")});      // 1 term, 2 inputs
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ij,jk->iik")});  // repeated output label
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ij,jk->iz")});   // z in no input
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "......ij,jk")});
  expect_rule_gives_up("", "Einsum", 12, {a, b}, {attr("equation", "ijk,jk")});
  expect_rule_gives_up("", "Einsum", 12, {a, os_typed(DType::Double, {3, 4})}, {attr("equation", "ij,jk")});
  Tensor x = os_f({2, 3, 4});
  expect_rule_gives_up("", "NegativeLogLikelihoodLoss", 13, {x, os_i64({0, 0}, {2})}, {attr("reduction", "none")});
  expect_rule_gives_up("", "NegativeLogLikelihoodLoss", 13, {x, os_i64({0, 0, 0, 0, 0, 0, 0, 0}, {2, 4})}, {attr("reduction", "max")});
  expect_rule_gives_up("", "NegativeLogLikelihoodLoss", 13, {x, os_i64({0, 0, 0, 0, 0, 0, 0, 0}, {2, 4}), os_f({4})}, {});
  expect_rule_gives_up("", "SoftmaxCrossEntropyLoss", 13, {os_f({3}), os_i64({0}, {1})}, {}, 2);
  expect_rule_gives_up("", "SoftmaxCrossEntropyLoss", 13, {os_f({2, 3}), os_f({2})}, {}, 2);  // float target
}

// ---------------------------------------------------------------- indexing, tensor, quant

TEST(OpShapes, IndexingTensorQuant) {
  expect_rule_matches_kernel("", "GatherND", 12, {os_f({2, 3, 4}), os_i64({1, 2}, {2, 1})}, {attr("batch_dims", 1)});
  expect_rule_matches_kernel("", "GatherND", 13, {os_f({2, 3, 4}), os_i64({1, 2, 0, 1}, {2, 2})}, {});
  expect_rule_matches_kernel("", "GatherND", 11, {os_strings({"a", "b", "c"}), os_i64({2, 0}, {2, 1})}, {});
  expect_rule_matches_kernel("", "GatherND", 13, {os_f({2, 3}), os_i64({1, 2}, {1, 2})}, {});
  expect_rule_matches_kernel("", "TensorScatter", 24, {os_f({2, 5, 3}), os_f({2, 2, 3}), os_i64({0, 3}, {2})}, {});
  expect_rule_matches_kernel("", "TensorScatter", 24, {os_f({2, 2, 4, 3}), os_f({2, 2, 4, 3})}, {attr("axis", 2), attr("mode", "circular")});
  expect_rule_matches_kernel("", "EyeLike", 9, {os_typed(DType::Int32, {3, 4})}, {attr("k", 1), attr("dtype", 1)});
  expect_rule_matches_kernel("", "EyeLike", 9, {os_f({2, 5})}, {attr("k", -7)});
  expect_rule_matches_kernel("", "EyeLike", 9, {os_f({2, 2})}, {attr("dtype", 9)});
  expect_rule_matches_kernel("", "DynamicQuantizeLinear", 11, {os_f({2, 3}, -0.4f)}, {}, 3);
  expect_rule_matches_kernel("", "DynamicQuantizeLinear", 11, {os_f({4})}, {}, 1);
  Tensor fs = Tensor::scalar<float>(0.05f);
  Tensor u8z = Tensor::scalar<uint8_t>(3), i8z = Tensor::scalar<int8_t>(-2);
  expect_rule_matches_kernel("", "QLinearConv", 10,
                             {os_typed(DType::Uint8, {1, 1, 4, 4}), fs, u8z, os_typed(DType::Uint8, {2, 1, 3, 3}), fs, u8z, fs, i8z},
                             {attr("pads", Ints{1, 1, 1, 1}), attr("strides", Ints{2, 2})});
  expect_rule_matches_kernel("", "QLinearConv", 10,
                             {os_typed(DType::Int8, {2, 4, 5, 5}), fs, i8z, os_typed(DType::Int8, {6, 2, 2, 3}),
                              Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}), os_typed(DType::Int8, {6}), fs, u8z, os_typed(DType::Int32, {6})},
                             {attr("group", 2), attr("auto_pad", "SAME_LOWER"), attr("dilations", Ints{1, 2})});
  expect_rule_matches_kernel("", "QLinearMatMul", 10,
                             {os_typed(DType::Uint8, {2, 3}), fs, u8z, os_typed(DType::Uint8, {3, 4}), fs, u8z, fs, u8z}, {});
  expect_rule_matches_kernel("", "QLinearMatMul", 21,
                             {os_typed(DType::Int8, {2, 1, 2, 3}), fs, i8z, os_typed(DType::Int8, {3}), fs, i8z, fs, i8z}, {});
  expect_rule_matches_kernel("", "QLinearMatMul", 21,
                             {os_typed(DType::Int8, {3}), fs, i8z, os_typed(DType::Int8, {5, 3, 2}), fs, i8z, fs, u8z}, {});
}

TEST(OpShapes, IndexingTensorQuantMalformed) {
  expect_rule_gives_up("", "GatherND", 12, {os_f({2, 3, 4}), os_i64({1, 2}, {2, 1})}, {attr("batch_dims", -1)});
  expect_rule_gives_up("", "GatherND", 12, {os_f({2, 3, 4}), os_i64({1, 2}, {2, 1})}, {attr("batch_dims", kHuge)});
  expect_rule_gives_up("", "GatherND", 12, {os_f({2, 3}), os_i64({0, 0, 0}, {1, 3})}, {});
  expect_rule_gives_up("", "GatherND", 13, {os_f({2, 3}), Tensor::from_vector<int32_t>({0}, {1, 1})}, {});
  expect_rule_gives_up("", "TensorScatter", 24, {os_f({2, 5, 3}), os_f({2, 2, 3})}, {attr("axis", 0)});
  expect_rule_gives_up("", "TensorScatter", 24, {os_f({2, 5, 3}), os_f({2, 2, 3})}, {attr("axis", -kHuge)});
  expect_rule_gives_up("", "TensorScatter", 24, {os_f({2, 5, 3}), os_f({2, 2, 3})}, {attr("mode", "ring")});
  expect_rule_gives_up("", "TensorScatter", 24, {os_f({2, 5, 3}), os_f({2, 6, 3})}, {});
  expect_rule_gives_up("", "EyeLike", 9, {os_f({2, 2})}, {attr("dtype", kHuge)});
  expect_rule_gives_up("", "EyeLike", 9, {os_f({2, 2, 2})}, {});
  expect_rule_gives_up("", "DynamicQuantizeLinear", 11, {os_typed(DType::Double, {2})}, {}, 3);
  Tensor fs = Tensor::scalar<float>(0.05f);
  Tensor u8z = Tensor::scalar<uint8_t>(3);
  std::vector<Value> qc = {os_typed(DType::Uint8, {1, 1, 4, 4}), fs, u8z, os_typed(DType::Uint8, {2, 1, 3, 3}), fs, u8z, fs, u8z};
  expect_rule_gives_up("", "QLinearConv", 10, qc, {attr("group", 0)});
  expect_rule_gives_up("", "QLinearConv", 10, qc, {attr("strides", Ints{kHuge, 1})});
  expect_rule_gives_up("", "QLinearConv", 10, qc, {attr("dilations", Ints{int64_t(1) << 62, 1})});
  expect_rule_gives_up("", "QLinearConv", 10, qc, {attr("pads", Ints{kHuge, 0, kHuge, 0})});
  expect_rule_gives_up("", "QLinearConv", 10, qc, {attr("kernel_shape", Ints{2, 2})});
  expect_rule_gives_up("", "QLinearConv", 10, qc, {attr("auto_pad", "SAME")});
  // An empty auto_pad is NOTSET for QLinearConv as for Conv (ops/common auto_pad_of, as ONNX Runtime reads it).
  expect_rule_matches_kernel("", "QLinearConv", 10, qc, {attr("auto_pad", "")});
  expect_rule_gives_up("", "QLinearMatMul", 10,
                       {os_typed(DType::Uint8, {2, 3}), fs, u8z, os_typed(DType::Uint8, {4, 4}), fs, u8z, fs, u8z}, {});
  expect_rule_gives_up("", "QLinearMatMul", 10,
                       {os_typed(DType::Uint8, {2, 3}), fs, u8z, os_typed(DType::Uint8, {3, 4}), fs, u8z, os_f({2}), u8z}, {});
}

// Rules declared infer_symbolic keep symbolic dims as they are (the optimizer's inference).
TEST(OpShapes, SymbolicPassThrough) {
  SymbolTable sym;
  const int64_t N = sym.intern("$N"), S = sym.intern("$S");
  auto run = [&](const std::string& domain, const std::string& op, int opset, std::vector<InferredValue> ivs,
                 std::vector<Attribute> attrs, int outputs, ShapeOutputs& out) {
    const OpTraits& t = os_traits(domain, op);
    EXPECT_TRUE(t.symbolic) << op;
    std::vector<Value> dummy(ivs.size(), Value(Tensor::scalar<float>(0)));
    Node n = test_node(domain, op, opset, dummy, std::move(attrs), outputs);
    ShapeInputs in;
    in.symbols = &sym;
    for (auto& v : ivs) in.v.push_back(&v);
    out.assign(size_t(outputs), InferredValue());
    return t.shape(n, in, out);
  };
  auto K = [](DType dt, Shape s) { return InferredValue{InferredValue::State::Known, dt, std::move(s), Tensor()}; };
  ShapeOutputs out;
  ASSERT_TRUE(run(kMl, "Binarizer", 1, {K(DType::Float, {N, 3})}, {}, 1, out));
  EXPECT_EQ(out[0].shape, (Shape{N, 3}));
  ASSERT_TRUE(run("", "SwiGLU", 28, {K(DType::Float, {N, S, 8}), K(DType::Float, {1, S, 8})}, {}, 1, out));
  EXPECT_EQ(out[0].shape, (Shape{N, S, 8}));
  EXPECT_FALSE(run("", "SwiGLU", 28, {K(DType::Float, {N, 8}), K(DType::Float, {S, 8})}, {}, 1, out));
  ASSERT_TRUE(run("", "TensorScatter", 24, {K(DType::Float, {N, 16, 4}), K(DType::Float, {N, 1, 4})}, {}, 1, out));
  EXPECT_EQ(out[0].shape, (Shape{N, 16, 4}));
  EXPECT_FALSE(run("", "TensorScatter", 24, {K(DType::Float, {N, 16, 4}), K(DType::Float, {N, S, 4})}, {}, 1, out));
  ASSERT_TRUE(run("", "QLinearMatMul", 21,
                  {K(DType::Uint8, {N, S, 3}), K(DType::Float, {}), K(DType::Uint8, {}), K(DType::Uint8, {3, 5}),
                   K(DType::Float, {}), K(DType::Uint8, {}), K(DType::Float, {}), K(DType::Int8, {})},
                  {}, 1, out));
  EXPECT_EQ(out[0].shape, (Shape{N, S, 5}));
  EXPECT_EQ(out[0].dtype, DType::Int8);
  ASSERT_TRUE(run("", "DynamicQuantizeLinear", 11, {K(DType::Float, {N, S})}, {}, 3, out));
  EXPECT_EQ(out[0].shape, (Shape{N, S}));
  EXPECT_EQ(out[1].shape, Shape{});
  ASSERT_TRUE(run(kTrain, "Adam", 1,
                  {K(DType::Float, {}), K(DType::Int64, {}), K(DType::Float, {N}), K(DType::Float, {N}), K(DType::Float, {N}), K(DType::Float, {N})},
                  {}, 3, out));
  EXPECT_EQ(out[2].shape, (Shape{N}));
  // An input of unknown shape: nothing is known.
  InferredValue unknown;
  EXPECT_FALSE(run(kMl, "LabelEncoder", 2, {unknown}, {attr("keys_strings", Strings{"a"}), attr("values_int64s", Ints{1})}, 1, out));
}

// Every op of this file's families now has a rule or says why not.
TEST(OpShapes, NewRulesAreRegistered) {
  const std::vector<std::pair<std::string, std::string>> ops = {
      {"", "Bernoulli"}, {"", "BitCast"}, {"", "CausalConvWithState"}, {"", "DeformConv"}, {"", "Det"},
      {"", "DynamicQuantizeLinear"}, {"", "Einsum"}, {"", "EyeLike"}, {"", "GatherND"}, {"", "GridSample"},
      {"", "LinearAttention"}, {"", "MaxRoiPool"}, {"", "MaxUnpool"}, {"", "Multinomial"},
      {"", "NegativeLogLikelihoodLoss"}, {"", "QLinearConv"}, {"", "QLinearMatMul"}, {"", "RandomNormal"},
      {"", "RandomNormalLike"}, {"", "RandomUniform"}, {"", "RandomUniformLike"}, {"", "RoiAlign"},
      {"", "SoftmaxCrossEntropyLoss"}, {"", "SwiGLU"}, {"", "TensorScatter"}, {"", "TfIdfVectorizer"},
      {kMl, "ArrayFeatureExtractor"}, {kMl, "Binarizer"}, {kMl, "LabelEncoder"}, {kMl, "TreeEnsemble"},
      {kTrain, "Adagrad"}, {kTrain, "Adam"}, {kTrain, "Momentum"}, {kPreview, "FlexAttention"}};
  for (const auto& [d, op] : ops) {
    const OpTraits* t = OpRegistry::instance().traits(d, op);
    ASSERT_NE(t, nullptr) << op;
    EXPECT_NE(t->shape, nullptr) << op;
  }
}
