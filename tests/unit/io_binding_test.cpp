// IO binding: Session::run_into writes outputs into caller buffers, straight from the kernel when
// it can, and refuses mismatched buffers with an error naming the output.
#include <basalt/basalt.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

using namespace basalt;

static const char* kAdd = "/usr/share/libonnx-testdata/data/node/test_add/model.onnx";
static const char* kIdentity = "/usr/share/libonnx-testdata/data/node/test_identity/model.onnx";

static Tensor filled(Shape s, float base) {
  Tensor t(DType::Float, s);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = base + float(i);
  return t;
}

TEST(IoBinding, WritesIntoCallerBufferWithoutCopy) {
  auto s = Session::open(kAdd);
  Tensor x = filled({3, 4, 5}, 1), y = filled({3, 4, 5}, 100);
  std::vector<float> buf(60, -1.f);
  Tensor out = Tensor::view(DType::Float, {3, 4, 5}, buf.data(), nullptr);
  s->run_into({{"x", x}, {"y", y}}, {{"sum", out}});  // first run: plans and maps the arena
  std::fill(buf.begin(), buf.end(), -1.f);
  uint64_t before = allocation_count();
  s->run_into({{"x", x}, {"y", y}}, {{"sum", out}});
  EXPECT_EQ(allocation_count(), before) << "the kernel should write straight into the bound buffer";
  for (int i = 0; i < 60; ++i) ASSERT_FLOAT_EQ(buf[size_t(i)], 101.f + 2.f * float(i));
  // Same result as run().
  auto ref = s->run({{"x", x}, {"y", y}});
  for (int i = 0; i < 60; ++i) ASSERT_FLOAT_EQ(ref[0].tensor.data<float>()[i], buf[size_t(i)]);
}

TEST(IoBinding, ForwardedOutputIsCopiedIn) {
  auto s = Session::open(kIdentity);
  const auto& in = s->inputs()[0];
  Shape shape;
  for (int64_t d : in.shape) shape.push_back(d < 0 ? 2 : d);
  Tensor x = filled(shape, 7);
  std::vector<float> buf(size_t(x.numel()), 0.f);
  Tensor out = Tensor::view(DType::Float, shape, buf.data(), nullptr);
  s->run_into({{in.name, x}}, {{s->outputs()[0].name, out}});
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_FLOAT_EQ(buf[size_t(i)], 7.f + float(i));
  ASSERT_NE(static_cast<const void*>(buf.data()), x.raw());
}

TEST(IoBinding, MismatchesAreClearErrors) {
  auto s = Session::open(kAdd);
  Tensor x = filled({3, 4, 5}, 1), y = filled({3, 4, 5}, 100);
  std::vector<float> buf(60, -1.f);
  Tensor wrong_shape = Tensor::view(DType::Float, {60}, buf.data(), nullptr);
  try {
    s->run_into({{"x", x}, {"y", y}}, {{"sum", wrong_shape}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'sum'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[3,4,5]"), std::string::npos) << e.what();
  }
  Tensor wrong_type(DType::Int32, {3, 4, 5});
  EXPECT_THROW(s->run_into({{"x", x}, {"y", y}}, {{"sum", wrong_type}}), Error);
  Tensor ok = Tensor::view(DType::Float, {3, 4, 5}, buf.data(), nullptr);
  EXPECT_THROW(s->run_into({{"x", x}, {"y", y}}, {{"nope", ok}}), Error);
  EXPECT_THROW(s->run_into({{"x", x}, {"y", y}}, {{"sum", ok}, {"sum", ok}}), Error);
}
