// Session features behind onnxruntime's API (issue 43): RunOptions::terminate, the model's metadata,
// free-dimension and initializer overrides, the optimized model file and denormals as zero.
#include <basalt/basalt.hpp>

#include "core/thread_pool.hpp"
#include "pb_writer.hpp"

#include <immintrin.h>

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

using namespace basalt;
using test::Pb;

namespace {

// A float tensor type whose dims are fixed (>= 0) or named; `denote` gives dim 0 a denotation.
Pb float_io(const std::string& name, const std::vector<std::string>& dims, const std::string& denote = "") {
  Pb shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    Pb d;
    bool fixed = !dims[i].empty() && dims[i][0] >= '0' && dims[i][0] <= '9';
    if (fixed) d.u(1, std::stoull(dims[i]));
    else d.s(2, dims[i]);
    if (i == 0 && !denote.empty()) d.s(3, denote);
    shape.m(1, d);
  }
  Pb tensor_type, type;
  tensor_type.u(1, 1).m(2, shape);
  type.m(1, tensor_type);
  return Pb().s(1, name).m(2, type);
}

// ModelProto around one binary or unary node; `w` (float[4]) is an initializer when given.
std::string one_node_model(const std::string& op, const std::vector<std::string>& in, const std::vector<Pb>& inputs,
                           const std::vector<std::string>& out_dims, const std::vector<float>& w = {}) {
  Pb g;
  g.m(1, test::onnx_node(op, in, {"y"}, "n0")).s(2, "main_graph").s(10, "graph doc");
  if (!w.empty()) {
    Pb t;
    t.u(1, w.size()).u(2, 1).s(8, "w").s(9, std::string(reinterpret_cast<const char*>(w.data()), w.size() * 4));
    g.m(5, t);
  }
  for (const Pb& i : inputs) g.m(11, i);
  g.m(12, float_io("y", out_dims));
  Pb opset, prop1, prop2, m;
  opset.s(1, "").u(2, 17);
  prop1.s(1, "vocab").s(2, "a b c");
  prop2.s(1, "author").s(2, "basalt tests");
  m.u(1, 8).s(2, "unit").s(3, "1.0").s(4, "ai.basalt.test").u(5, 42).s(6, "model doc").m(7, g).m(8, opset);
  m.m(14, prop1).m(14, prop2);
  return m.b;
}

std::string add_model() { return one_node_model("Add", {"x", "w"}, {float_io("x", {"N", "4"})}, {"N", "4"}, {1, 2, 3, 4}); }

Tensor floats(Shape s, float v) {
  Tensor t(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = v;
  return t;
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode(0);
}

}  // namespace

TEST(SessionFeatures, TerminateStopsTheRunAndTheSessionStaysUsable) {
  std::string b = add_model();
  auto s = Session::from_bytes(b.data(), b.size());
  std::atomic<bool> stop{true};
  RunOptions ro;
  ro.terminate = &stop;
  EXPECT_EQ(code_of([&] { s->run({{"x", floats({2, 4}, 1)}}, {}, ro); }), ErrorCode::Cancelled);
  stop = false;
  auto out = s->run({{"x", floats({2, 4}, 1)}}, {}, ro);
  EXPECT_FLOAT_EQ(out[0].tensor.data<float>()[3], 5.f);
  EXPECT_STREQ(error_code_name(ErrorCode::Cancelled), "cancelled");
}

TEST(SessionFeatures, MetadataComesFromTheFile) {
  std::string b = add_model();
  auto s = Session::from_bytes(b.data(), b.size());
  const ModelMetadata& md = s->metadata();
  EXPECT_EQ(md.producer_name, "unit");
  EXPECT_EQ(md.producer_version, "1.0");
  EXPECT_EQ(md.domain, "ai.basalt.test");
  EXPECT_EQ(md.version, 42);
  EXPECT_EQ(md.description, "model doc");
  EXPECT_EQ(md.graph_name, "main_graph");
  EXPECT_EQ(md.graph_description, "graph doc");
  ASSERT_EQ(md.custom.size(), 2u);
  EXPECT_EQ(md.custom[0], (std::pair<std::string, std::string>{"vocab", "a b c"}));
  EXPECT_EQ(md.custom[1].first, "author");
}

TEST(SessionFeatures, FreeDimensionsByNameAndDenotation) {
  std::string b = add_model();
  SessionOptions o;
  o.free_dimensions_by_name["N"] = 3;
  o.free_dimensions_by_name["unused"] = 9;  // no dim has it: nothing changes (as in onnxruntime)
  auto s = Session::from_bytes(b.data(), b.size(), o);
  EXPECT_EQ(s->inputs()[0].shape, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(s->run({{"x", floats({3, 4}, 0)}})[0].tensor.shape(), (Shape{3, 4}));
  EXPECT_EQ(code_of([&] { s->run({{"x", floats({2, 4}, 0)}}); }), ErrorCode::InvalidArgument);

  std::string d = one_node_model("Relu", {"x"}, {float_io("x", {"batch", "2"}, "DATA_BATCH")}, {"batch", "2"});
  SessionOptions od;
  od.free_dimensions_by_denotation["DATA_BATCH"] = 5;
  EXPECT_EQ(Session::from_bytes(d.data(), d.size(), od)->inputs()[0].shape, (std::vector<int64_t>{5, 2}));

  SessionOptions bad;
  bad.free_dimensions_by_name["N"] = -1;
  EXPECT_EQ(code_of([&] { Session::from_bytes(b.data(), b.size(), bad); }), ErrorCode::InvalidArgument);
}

TEST(SessionFeatures, InitializerOverridesAreUsedInPlaceAndChecked) {
  std::string b = add_model();
  std::vector<float> w = {10, 20, 30, 40};
  SessionOptions o;
  o.initializers.emplace_back("w", Tensor::view(DType::Float, {4}, w.data(), nullptr));
  auto s = Session::from_bytes(b.data(), b.size(), o);
  auto out = s->run({{"x", floats({1, 4}, 1)}});
  EXPECT_FLOAT_EQ(out[0].tensor.data<float>()[2], 31.f);
  std::vector<float> five(5, 0.f);
  SessionOptions wrong_shape, unknown;
  wrong_shape.initializers.emplace_back("w", Tensor::view(DType::Float, {5}, five.data(), nullptr));
  unknown.initializers.emplace_back("nope", Tensor::view(DType::Float, {4}, w.data(), nullptr));
  EXPECT_EQ(code_of([&] { Session::from_bytes(b.data(), b.size(), wrong_shape); }), ErrorCode::InvalidArgument);
  EXPECT_EQ(code_of([&] { Session::from_bytes(b.data(), b.size(), unknown); }), ErrorCode::InvalidArgument);
}

TEST(SessionFeatures, OptimizedModelIsWrittenAndRunsTheSame) {
  std::string b = add_model();
  std::string path = (std::filesystem::temp_directory_path() / "basalt_optimized_test.onnx").string();
  SessionOptions o;
  o.optimized_model_path = path;
  auto s = Session::from_bytes(b.data(), b.size(), o);
  auto again = Session::open(path);
  Tensor x = floats({2, 4}, 0.5f);
  auto a = s->run({{"x", x}}), c = again->run({{"x", x}});
  for (int i = 0; i < 8; ++i) EXPECT_EQ(a[0].tensor.data<float>()[i], c[0].tensor.data<float>()[i]);
  std::remove(path.c_str());
  SessionOptions unwritable;
  unwritable.optimized_model_path = "/nonexistent-dir/x.onnx";
  EXPECT_EQ(code_of([&] { Session::from_bytes(b.data(), b.size(), unwritable); }), ErrorCode::Io);
}

TEST(SessionFeatures, DenormalsAsZeroFlushesOnlyDenormals) {
  std::string b = one_node_model("Mul", {"x", "z"}, {float_io("x", {"64"}), float_io("z", {"64"})}, {"64"});
  float tiny = std::numeric_limits<float>::denorm_min() * 1000;
  Tensor x = floats({64}, tiny), one = floats({64}, 1);
  x.data<float>()[0] = 2.f;
  SessionOptions o;
  o.denormals_as_zero = true;
  o.threads = 2;  // the pool's worker runs under the caller's mode too
  auto plain = Session::from_bytes(b.data(), b.size())->run({{"x", x}, {"z", one}});
  auto flushed = Session::from_bytes(b.data(), b.size(), o)->run({{"x", x}, {"z", one}});
  EXPECT_EQ(plain[0].tensor.data<float>()[5], tiny);
  EXPECT_EQ(flushed[0].tensor.data<float>()[5], 0.f);
  EXPECT_EQ(flushed[0].tensor.data<float>()[0], 2.f);
  // the calling thread's mode is restored after the run
  volatile float v = tiny;
  EXPECT_EQ(v * 1.0f, tiny);
}

TEST(SessionFeatures, PoolWorkersRunUnderTheCallersFloatingPointMode) {
  ThreadPool pool(2, 0);
  unsigned saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);  // FTZ | DAZ
  std::atomic<int> with_ftz{0}, chunks{0};
  pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      ++chunks;
      if ((_mm_getcsr() & 0x8040u) == 0x8040u) ++with_ftz;
    }
  });
  _mm_setcsr(saved);
  EXPECT_EQ(chunks.load(), 64);
  EXPECT_EQ(with_ftz.load(), 64);
  // and back to the default mode on the next job
  std::atomic<int> still{0};
  pool.parallel_for(64, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      if (_mm_getcsr() & 0x8040u) ++still;
  });
  EXPECT_EQ(still.load(), 0);
}
