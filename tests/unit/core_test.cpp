// Unit tests for core pieces: dtypes, tensors, broadcasting helpers, npy I/O, the decoder's
// robustness on hostile bytes, and running one session from several threads.
#include "ops/common.hpp"
#include "onnx/proto.hpp"
#include "graph/model.hpp"
#include "tools/npy.hpp"

#include <basalt/basalt.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <atomic>
#include <cstring>
#include <thread>

using namespace basalt;

TEST(DType, HalfRoundTripsExactValues) {
  for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f}) {
    EXPECT_EQ(half_bits_to_float(float_to_half_bits(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(half_bits_to_float(float_to_half_bits(1e6f))));
  EXPECT_TRUE(std::isnan(half_bits_to_float(float_to_half_bits(NAN))));
  // round to nearest even: 1 + 2^-11 is halfway between 1 and 1+2^-10 -> 1
  EXPECT_EQ(half_bits_to_float(float_to_half_bits(1.0f + std::ldexp(1.0f, -11))), 1.0f);
}

TEST(DType, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(1.0f)), 1.0f);
  EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(3.140625f)), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(NAN))));
}

TEST(DType, NamesRoundTrip) {
  for (int v = 1; v <= 26; ++v) {
    DType t = DType(v);
    EXPECT_EQ(dtype_from_name(dtype_name(t)), t) << dtype_name(t);
  }
}

TEST(Tensor, AllocatesZeroedAndReshapesWithoutCopy) {
  Tensor t(DType::Float, {2, 3});
  EXPECT_EQ(t.numel(), 6);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(t.data<float>()[i], 0.0f);
  Tensor r = t.reshaped({3, 2});
  EXPECT_EQ(r.raw(), t.raw());
  EXPECT_THROW(t.reshaped({4, 2}), Error);
}

TEST(Tensor, RejectsAbsurdShapes) {
  EXPECT_THROW(Tensor(DType::Float, {int64_t(1) << 40, int64_t(1) << 40}), Error);
  EXPECT_THROW(Tensor(DType::Float, {-1}), Error);
}

TEST(Broadcast, StridesAndShapes) {
  EXPECT_EQ(broadcast_strides({3, 1}, {2, 3, 4}), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(shape_strides({2, 3, 4}), (std::vector<int64_t>{12, 4, 1}));
}

TEST(Npy, RoundTrip) {
  Tensor t(DType::Int64, {2, 2});
  for (int i = 0; i < 4; ++i) t.data<int64_t>()[i] = i * 7 - 3;
  auto path = (std::filesystem::temp_directory_path() / "basalt_npy_test.npy").string();
  write_npy(path, t);
  Tensor u = read_npy(path);
  EXPECT_EQ(u.dtype(), DType::Int64);
  EXPECT_EQ(u.shape(), t.shape());
  for (int i = 0; i < 4; ++i) EXPECT_EQ(u.data<int64_t>()[i], t.data<int64_t>()[i]);
  std::filesystem::remove(path);
}

// The decoder must reject or accept any byte string without crashing (the fuzzer does this at
// scale; this is the quick version that always runs).
TEST(Proto, RandomBytesNeverCrash) {
  std::mt19937 rng(1);
  for (int iter = 0; iter < 3000; ++iter) {
    std::vector<uint8_t> b(size_t(rng() % 256));
    for (auto& x : b) x = uint8_t(rng());
    try {
      pb::parse_model(b.data(), b.size());
    } catch (const Error&) {
    }
    try {
      load_model_bytes(b.data(), b.size());
    } catch (const Error&) {
    }
  }
  SUCCEED();
}

static const char* kDebianNode = "/usr/share/libonnx-testdata/data/node";

TEST(Session, MetadataAndInputChecks) {
  std::string path = std::string(kDebianNode) + "/test_identity/model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "libonnx-testdata not installed";
  auto s = Session::open(path);
  ASSERT_EQ(s->inputs().size(), 1u);
  EXPECT_EQ(s->inputs()[0].type_string(), "tensor(float)");
  EXPECT_EQ(s->inputs()[0].shape, (std::vector<int64_t>{1, 1, 2, 2}));
  EXPECT_THROW(s->run({{"x", Value(Tensor(DType::Float, {1, 1, 2, 3}))}}), Error);
  EXPECT_THROW(s->run({{"x", Value(Tensor(DType::Int64, {1, 1, 2, 2}))}}), Error);
  EXPECT_THROW(s->run({{"nope", Value(Tensor(DType::Float, {1, 1, 2, 2}))}}), Error);
  EXPECT_THROW(s->run({}), Error);
  try {
    s->run({{"x", Value(Tensor(DType::Int64, {1, 1, 2, 2}))}});
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos);
  }
}

TEST(Session, ConcurrentRunsMatchSequential) {
  std::string path = std::string(kDebianNode) + "/test_loop11/model.onnx";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << "libonnx-testdata not installed";
  auto s = Session::open(path);
  auto make = [&](int64_t trip) {
    std::vector<std::pair<std::string, Value>> feeds;
    feeds.emplace_back("trip_count", Value(Tensor::scalar<int64_t>(trip)));
    feeds.emplace_back("cond", Value(Tensor::scalar<bool>(true)));
    Tensor y(DType::Float, {1});
    y.data<float>()[0] = 0.5f;
    feeds.emplace_back("y", Value(y));
    return feeds;
  };
  // test_loop11's body slices one element per iteration from a 5-element tensor: 1..5 trips.
  std::vector<std::vector<Value>> ref;
  for (int k = 0; k < 5; ++k) ref.push_back(s->run(make(k + 1)));
  std::atomic<int> mismatches{0};
  std::vector<std::thread> th;
  for (int t = 0; t < 4; ++t)
    th.emplace_back([&, t] {
      for (int rep = 0; rep < 50; ++rep) {
        int k = (rep + t) % 5;
        auto out = s->run(make(k + 1));
        for (size_t o = 0; o < out.size(); ++o) {
          const Tensor& a = out[o].tensor;
          const Tensor& b = ref[size_t(k)][o].tensor;
          if (a.shape() != b.shape() || std::memcmp(a.raw(), b.raw(), a.nbytes()) != 0) ++mismatches;
        }
      }
    });
  for (auto& x : th) x.join();
  EXPECT_EQ(mismatches.load(), 0);
}
