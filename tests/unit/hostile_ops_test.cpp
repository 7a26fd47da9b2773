// Hostile attribute values (audit findings 5, 6, 9, 12–16): a malformed model must get a clear
// basalt::Error, never a crash, a hang, a size_t underflow or an attribute-sized allocation.
// Each test here failed (wrong exception type, no error, or a hang/huge allocation) before its fix.
#include "op_tester.hpp"

#include "graph/graph.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>

using namespace basalt;
using namespace basalt::test;

namespace {

constexpr int64_t kHuge = int64_t(1) << 62;
constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();

// The basalt::Error code f throws; fails the test if it throws anything else or nothing.
ErrorCode error_code(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a basalt::Error: " << e.what();
    return ErrorCode::Internal;
  }
  ADD_FAILURE() << "no error";
  return ErrorCode::Internal;
}

// Runs only the kernel factory (attribute validation) of a node with n_inputs inputs.
void make_kernel(const std::string& op, int opset, int n_inputs, std::vector<Attribute> attrs, int n_outputs = 1) {
  Node n;
  n.name = "t";
  n.op_type = op;
  n.opset = opset;
  n.attrs = std::move(attrs);
  for (int i = 0; i < n_inputs; ++i) n.inputs.push_back(i);
  for (int i = 0; i < n_outputs; ++i) n.outputs.push_back(100 + i);
  const KernelFactory* f = OpRegistry::instance().find("", op, opset);
  ASSERT_NE(f, nullptr);
  n.kernel = (*f)(n);
}

Attribute graph_attr(const std::string& name, int n_inputs, int n_outputs) {
  auto g = std::make_shared<Graph>();
  for (int i = 0; i < n_inputs; ++i) g->inputs.push_back(g->add_value("in" + std::to_string(i)));
  for (int i = 0; i < n_outputs; ++i) g->outputs.push_back(g->add_value("out" + std::to_string(i)));
  Attribute a;
  a.name = name;
  a.type = Attribute::Type::Graph;
  a.g = g;
  return a;
}

Tensor zeros_f(Shape s) {
  Tensor t(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = 0.f;
  return t;
}

}  // namespace

// #13: Scan-8 directions shorter than num_scan_inputs (heap read past the attribute), and
// Scan-8/9 bodies with fewer outputs than state variables (size_t underflow).
TEST(HostileOps, ScanDirectionsAndBodyOutputs) {
  // Scan-8 inputs: sequence_lens, then 2 scan inputs (no state).
  EXPECT_EQ(error_code([] { make_kernel("Scan", 8, 3, {attr("num_scan_inputs", 2), attr("directions", Ints{0}), graph_attr("body", 2, 1)}); }),
            ErrorCode::InvalidModel);
  make_kernel("Scan", 8, 3, {attr("num_scan_inputs", 2), attr("directions", Ints{0, 1}), graph_attr("body", 2, 1)});
  // 1 state + 1 scan input, a body with no outputs.
  EXPECT_EQ(error_code([] { make_kernel("Scan", 8, 3, {attr("num_scan_inputs", 1), graph_attr("body", 2, 0)}); }),
            ErrorCode::InvalidModel);
  EXPECT_EQ(error_code([] { make_kernel("Scan", 9, 2, {attr("num_scan_inputs", 1), graph_attr("body", 2, 0)}); }),
            ErrorCode::InvalidModel);
  make_kernel("Scan", 9, 2, {attr("num_scan_inputs", 1), graph_attr("body", 2, 1)});
}

// #6: max_gram_length far beyond the pool's longest n-gram (used to scan 2^62 lengths).
TEST(HostileOps, TfIdfHugeMaxGramLength) {
  Tensor x = Tensor::from_vector<int64_t>({1, 2, 1}, {1, 3});
  auto attrs = [](int64_t max_n) {
    return std::vector<Attribute>{attr("max_gram_length", max_n), attr("min_gram_length", 1), attr("max_skip_count", kI64Max),
                                  attr("mode", "TF"), attr("ngram_counts", Ints{0, 2}), attr("ngram_indexes", Ints{0, 1, 2}),
                                  attr("pool_int64s", Ints{1, 2, 1, 2})};
  };
  Tensor ref = run_op("TfIdfVectorizer", 9, {Value(x)}, attrs(2))[0].tensor;
  for (int64_t max_n : {kHuge, kI64Max}) {
    Tensor y = run_op("TfIdfVectorizer", 9, {Value(x)}, attrs(max_n))[0].tensor;
    ASSERT_EQ(y.shape(), (Shape{1, 3}));
    for (int i = 0; i < 3; ++i) EXPECT_EQ(y.data<float>()[i], ref.data<float>()[i]);
  }
  EXPECT_EQ(ref.data<float>()[0], 2.0f);  // "1" twice
  EXPECT_EQ(ref.data<float>()[2], 1.0f);  // "1 2" once
}

// #5: 0 rows -> an empty output whatever ngram_indexes claims; nothing of width n_out is allocated.
TEST(HostileOps, TfIdfEmptyRowsHugeWidth) {
  Tensor x(DType::Int64, {0, 3});
  std::vector<Attribute> a = {attr("max_gram_length", 1), attr("min_gram_length", 1), attr("max_skip_count", 0),
                              attr("mode", "TF"), attr("ngram_counts", Ints{0}), attr("ngram_indexes", Ints{int64_t(1) << 37}),
                              attr("pool_int64s", Ints{5})};
  Tensor y = run_op("TfIdfVectorizer", 9, {Value(x)}, a)[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{0, (int64_t(1) << 37) + 1}));
}

// #9: head/group counts over a 0-size hidden/channel dim (used to loop 2^30..2^62 times).
TEST(HostileOps, GroupNormManyGroupsZeroChannels) {
  Tensor x = zeros_f({1, 0, 2});
  Tensor s = zeros_f({0});
  Tensor y = run_op("GroupNormalization", 21, {Value(x), Value(s), Value(s)}, {attr("num_groups", int64_t(1) << 30)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 0, 2}));
  EXPECT_EQ(error_code([&] { run_op("GroupNormalization", 21, {Value(x), Value(s), Value(s)}, {attr("num_groups", kHuge)}); }),
            ErrorCode::InvalidModel);
  // A valid one still normalizes.
  Tensor x2 = Tensor::from_vector<float>({1, 3, 5, 7}, {1, 2, 2});
  Tensor one = Tensor::from_vector<float>({1, 1}, {2}), zero = Tensor::from_vector<float>({0, 0}, {2});
  Tensor y2 = run_op("GroupNormalization", 21, {Value(x2), Value(one), Value(zero)}, {attr("num_groups", 2), attr("epsilon", 0.0f)})[0].tensor;
  EXPECT_NEAR(y2.data<float>()[0], -1.0f, 1e-5);
  EXPECT_NEAR(y2.data<float>()[3], 1.0f, 1e-5);
}

TEST(HostileOps, AttentionHeadsOverZeroHidden) {
  Tensor q = zeros_f({1, 1, 0});
  int64_t h = int64_t(1) << 30;
  EXPECT_EQ(error_code([&] {
              run_op("Attention", 23, {Value(q), Value(q), Value(q)}, {attr("q_num_heads", h), attr("kv_num_heads", h)});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code([&] {
              run_op("Attention", 23, {Value(q), Value(q), Value(q)}, {attr("q_num_heads", kHuge), attr("kv_num_heads", kHuge)});
            }),
            ErrorCode::InvalidModel);
  // LinearAttention
  EXPECT_EQ(error_code([&] {
              run_op("LinearAttention", 27, {Value(q), Value(q), Value(q)},
                     {attr("q_num_heads", h), attr("kv_num_heads", h), attr("update_rule", "linear")});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code([&] {
              run_op("LinearAttention", 27, {Value(q), Value(q), Value(q)},
                     {attr("q_num_heads", kHuge), attr("kv_num_heads", kHuge), attr("update_rule", "linear")});
            }),
            ErrorCode::InvalidModel);
  // basalt::Attention
  EXPECT_EQ(error_code([&] { run_op("Attention", 1, {Value(q), Value(q), Value(q)}, {attr("num_heads", h)}, 1, "basalt"); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code([&] { run_op("Attention", 1, {Value(q), Value(q), Value(q)}, {attr("num_heads", kHuge)}, 1, "basalt"); }),
            ErrorCode::InvalidModel);
}

TEST(HostileOps, RotaryHeadsOverZeroHidden) {
  Tensor x = zeros_f({1, 1, 0});
  Tensor cs = zeros_f({1, 0});
  Tensor pos = Tensor::from_vector<int64_t>({0}, {1, 1});
  EXPECT_EQ(error_code([&] {
              run_op("RotaryEmbedding", 23, {Value(x), Value(cs), Value(cs), Value(pos)}, {attr("num_heads", int64_t(1) << 30)});
            }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code([&] { run_op("RotaryEmbedding", 23, {Value(x), Value(cs), Value(cs), Value(pos)}, {attr("num_heads", kHuge)}); }),
            ErrorCode::InvalidModel);
}

// #12: n_targets sized three work buffers (17 B/target) before the output.
TEST(HostileOps, TreeEnsembleHugeNTargets) {
  Tensor modes(DType::Uint8, {1});
  modes.data<uint8_t>()[0] = 0;
  auto attrs = [&](int64_t T) {
    return std::vector<Attribute>{
        attr("nodes_featureids", Ints{0}), attr("nodes_truenodeids", Ints{0}), attr("nodes_falsenodeids", Ints{1}),
        attr("nodes_trueleafs", Ints{1}), attr("nodes_falseleafs", Ints{1}), attr("leaf_targetids", Ints{0, T - 1}),
        attr("tree_roots", Ints{0}), attr("n_targets", T), attr("nodes_modes", modes),
        attr("nodes_splits", Tensor::from_vector<float>({0.5f}, {1})), attr("leaf_weights", Tensor::from_vector<float>({2.0f, 3.0f}, {2}))};
  };
  Tensor x = Tensor::from_vector<float>({0.0f, 1.0f}, {2, 1});
  EXPECT_THROW(run_op("TreeEnsemble", 5, {Value(x)}, attrs(int64_t(1) << 50), 1, "ai.onnx.ml"), Error);
  Tensor y = run_op("TreeEnsemble", 5, {Value(x)}, attrs(3), 1, "ai.onnx.ml")[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const float want[6] = {2, 0, 0, 0, 0, 3};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y.data<float>()[i], want[i]) << i;
  Tensor e(DType::Float, {0, 1});
  EXPECT_EQ(run_op("TreeEnsemble", 5, {Value(e)}, attrs(3), 1, "ai.onnx.ml")[0].tensor.shape(), (Shape{0, 3}));
}

// #14: the shape attribute's product overflowed int64 (UB, then std::length_error).
TEST(HostileOps, RandomShapeTooLarge) {
  for (const char* op : {"RandomUniform", "RandomNormal"}) {
    EXPECT_EQ(error_code([&] { run_op(op, 1, {}, {attr("shape", Ints{3, kHuge})}); }), ErrorCode::InvalidModel) << op;
    EXPECT_EQ(error_code([&] { run_op(op, 1, {}, {attr("shape", Ints{int64_t(1) << 21, int64_t(1) << 21})}); }), ErrorCode::InvalidModel)
        << op;
    Tensor z = run_op(op, 1, {}, {attr("shape", Ints{0, kHuge})})[0].tensor;
    EXPECT_EQ(z.numel(), 0);
    EXPECT_EQ(error_code([&] { run_op(op, 1, {}, {attr("shape", Ints{int64_t(1) << 32, int64_t(1) << 32, 0})}); }), ErrorCode::InvalidModel)
        << op;
    // Seeded: deterministic, and every dtype gets the same sequence.
    Tensor a = run_op(op, 1, {}, {attr("shape", Ints{2, 3}), attr("seed", 7.0f)})[0].tensor;
    Tensor b = run_op(op, 1, {}, {attr("shape", Ints{2, 3}), attr("seed", 7.0f), attr("dtype", int64_t(DType::Double))})[0].tensor;
    for (int i = 0; i < 6; ++i) EXPECT_EQ(a.data<float>()[i], float(b.data<double>()[i]));
  }
}

// #15: dtype attributes were narrowed with int32_t(v) before the check: 2^32 + 1 ran as float.
TEST(HostileOps, DtypeAttributesNotTruncated) {
  const int64_t f32 = (int64_t(1) << 32) + 1, i8 = (int64_t(1) << 32) + 3;
  EXPECT_EQ(error_code([&] { run_op("RandomNormal", 1, {}, {attr("shape", Ints{2}), attr("dtype", f32)}); }), ErrorCode::InvalidModel);
  EXPECT_EQ(error_code([&] { run_op("SequenceEmpty", 11, {}, {attr("dtype", f32)}); }), ErrorCode::InvalidModel);
  Tensor X = Tensor::from_vector<float>({1, 2}, {2});
  EXPECT_EQ(error_code([&] { run_op("BitCast", 26, {Value(X)}, {attr("to", (int64_t(1) << 32) + 6)}); }), ErrorCode::InvalidModel);
  Tensor q = zeros_f({1, 1, 2, 2});
  EXPECT_EQ(error_code([&] { run_op("Attention", 23, {Value(q), Value(q), Value(q)}, {attr("softmax_precision", f32)}); }),
            ErrorCode::InvalidModel);
  Tensor sc = Tensor::from_vector<float>({1}, {1});
  EXPECT_EQ(error_code([&] { run_op("QuantizeLinear", 23, {Value(X), Value(sc)}, {attr("output_dtype", i8)}); }), ErrorCode::Unsupported);
  EXPECT_EQ(error_code([&] { run_op("QuantizeLinear", 25, {Value(X), Value(sc)}, {attr("precision", f32)}); }), ErrorCode::Unsupported);
  Tensor xi = Tensor::from_vector<int8_t>({1, 2}, {2});
  EXPECT_EQ(error_code([&] { run_op("DequantizeLinear", 23, {Value(xi), Value(sc)}, {attr("output_dtype", f32)}); }), ErrorCode::Unsupported);
  // The real values still work.
  EXPECT_EQ(run_op("RandomNormal", 1, {}, {attr("shape", Ints{2}), attr("dtype", int64_t(1))})[0].tensor.dtype(), DType::Float);
}

// #16: LSTM hidden_size (G*H wrapped), QuantizeLinear block_size ceil-div overflow, LRN size.
TEST(HostileOps, SizeAttributeOverflow) {
  EXPECT_EQ(error_code([] { make_kernel("LSTM", 14, 3, {attr("hidden_size", kHuge)}, 3); }), ErrorCode::InvalidModel);
  make_kernel("LSTM", 14, 3, {attr("hidden_size", 4)}, 3);
  EXPECT_EQ(error_code([] { make_kernel("LRN", 13, 1, {attr("size", kI64Max)}); }), ErrorCode::InvalidModel);
  // block_size larger than the axis: one block, ceil(4 / block_size) = 1 (the sum used to overflow).
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8}, {2, 4});
  Tensor s = Tensor::from_vector<float>({1, 2}, {2, 1});
  Tensor y = run_op("QuantizeLinear", 21, {Value(x), Value(s)}, {attr("axis", 1), attr("block_size", kI64Max)})[0].tensor;
  Tensor r = run_op("QuantizeLinear", 21, {Value(x), Value(s)}, {attr("axis", 1), attr("block_size", 4)})[0].tensor;
  ASSERT_EQ(y.shape(), r.shape());
  for (int64_t i = 0; i < y.numel(); ++i) EXPECT_EQ(y.data<uint8_t>()[i], r.data<uint8_t>()[i]);
}

// ConvInteger's window arithmetic: a dilation near 2^62 wrapped (k - 1) * d + 1 (UB; each tap is
// bounds-checked, so it only gave a wrong geometry). Now an error naming the limit.
TEST(HostileOps, ConvIntegerWindowOverflow) {
  Tensor x(DType::Uint8, {1, 1, 1, 8}), w(DType::Uint8, {1, 1, 1, 4});
  EXPECT_EQ(error_code([&] { run_op("ConvInteger", 10, {Value(x), Value(w)}, {attr("dilations", Ints{1, kHuge})}); }),
            ErrorCode::InvalidArgument);
  EXPECT_EQ(error_code([&] { run_op("ConvInteger", 10, {Value(x), Value(w)}, {attr("pads", Ints{0, 0, 0, kHuge})}); }),
            ErrorCode::InvalidArgument);
  // the ordinary case still runs: 1x8 input, 1x4 kernel, dilation 2 -> 1x2 output
  EXPECT_EQ(run_op("ConvInteger", 10, {Value(x), Value(w)}, {attr("dilations", Ints{1, 2})})[0].tensor.shape(),
            (Shape{1, 1, 1, 2}));
}
