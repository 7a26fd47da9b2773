// Unit tests for the elementwise group's kernels (src/ops/elementwise.cpp): corner cases the ONNX
// conformance data does not cover (legacy broadcast, integer division/modulo edge cases, NaN
// propagation, general broadcasting, validation errors).
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace basalt;
using namespace basalt::test;

namespace {

template <class T>
Tensor ew_t(std::vector<T> v, Shape s = {}) {
  if (s.empty()) s = {int64_t(v.size())};
  return Tensor::from_vector<T>(v, s);
}

template <class T>
std::vector<T> ew_vec(const Tensor& t) {
  std::vector<T> r;
  for (int64_t i = 0; i < t.numel(); ++i) r.push_back(t.data<T>()[i]);
  return r;
}

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

}  // namespace

TEST(Elementwise, GeneralBroadcast) {
  // [2,1,3] + [1,4,1] -> [2,4,3]
  Tensor a = ew_t<float>({0, 1, 2, 3, 4, 5}, {2, 1, 3});
  Tensor b = ew_t<float>({0, 10, 20, 30}, {1, 4, 1});
  Tensor y = run_op("Add", 14, {a, b})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2, 4, 3}));
  auto v = ew_vec<float>(y);
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) EXPECT_EQ(v[size_t(i * 12 + j * 3 + k)], float(i * 3 + k + j * 10));
  // scalar on the left
  Tensor s = Tensor::scalar<float>(100);
  EXPECT_EQ(ew_vec<float>(run_op("Sub", 14, {s, a})[0].tensor), (std::vector<float>{100, 99, 98, 97, 96, 95}));
  // incompatible
  EXPECT_THROW(run_op("Mul", 14, {ew_t<float>({1, 2, 3}), ew_t<float>({1, 2})})[0].tensor, Error);
  // type mismatch
  EXPECT_THROW(run_op("Add", 14, {ew_t<float>({1}), ew_t<double>({1})})[0].tensor, Error);
}

TEST(Elementwise, LegacyBroadcast) {
  Tensor a = ew_t<float>(std::vector<float>(24, 1.0f), {2, 3, 4});
  Tensor b = ew_t<float>({1, 2, 3});
  Tensor y = run_op("Add", 6, {a, b}, {attr("broadcast", 1), attr("axis", 1)})[0].tensor;
  ASSERT_EQ(y.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(y.data<float>()[0], 2);
  EXPECT_EQ(y.data<float>()[4], 3);
  EXPECT_EQ(y.data<float>()[23], 4);
  // suffix match without axis
  Tensor c = ew_t<float>({1, 2, 3, 4});
  Tensor z = run_op("Mul", 1, {a, c}, {attr("broadcast", 1)})[0].tensor;
  EXPECT_EQ(z.data<float>()[3], 4);
  // broadcast not set and shapes differ
  EXPECT_THROW(run_op("Add", 6, {a, b})[0].tensor, Error);
  // mismatching dims at axis
  EXPECT_THROW(run_op("Add", 6, {a, b}, {attr("broadcast", 1), attr("axis", 0)})[0].tensor, Error);
}

TEST(Elementwise, IntegerDivision) {
  Tensor a = ew_t<int32_t>({-7, 7, std::numeric_limits<int32_t>::min()});
  Tensor b = ew_t<int32_t>({2, -2, -1});
  EXPECT_EQ(ew_vec<int32_t>(run_op("Div", 14, {a, b})[0].tensor),
            (std::vector<int32_t>{-3, -3, std::numeric_limits<int32_t>::min()}));
  EXPECT_THROW(run_op("Div", 14, {a, ew_t<int32_t>({1, 0, 1})})[0].tensor, Error);
  EXPECT_EQ(ew_vec<uint8_t>(run_op("Div", 14, {ew_t<uint8_t>({255}), ew_t<uint8_t>({2})})[0].tensor),
            (std::vector<uint8_t>{127}));
  // wrapping arithmetic
  EXPECT_EQ(ew_vec<int64_t>(run_op("Add", 14, {ew_t<int64_t>({std::numeric_limits<int64_t>::max()}),
                                                    ew_t<int64_t>({1})})[0].tensor),
            (std::vector<int64_t>{std::numeric_limits<int64_t>::min()}));
  EXPECT_EQ(ew_vec<uint16_t>(run_op("Mul", 14, {ew_t<uint16_t>({65535}), ew_t<uint16_t>({65535})})[0].tensor),
            (std::vector<uint16_t>{1}));
}

TEST(Elementwise, Mod) {
  Tensor a = ew_t<int32_t>({-7, 7, -7, 7});
  Tensor b = ew_t<int32_t>({3, -3, -3, 3});
  EXPECT_EQ(ew_vec<int32_t>(run_op("Mod", 13, {a, b})[0].tensor), (std::vector<int32_t>{2, -2, -1, 1}));
  EXPECT_EQ(ew_vec<int32_t>(run_op("Mod", 13, {a, b}, {attr("fmod", 1)})[0].tensor),
            (std::vector<int32_t>{-1, 1, -1, 1}));
  EXPECT_THROW(run_op("Mod", 13, {a, ew_t<int32_t>({1, 0, 1, 1})})[0].tensor, Error);
  EXPECT_THROW(run_op("Mod", 13, {ew_t<float>({1}), ew_t<float>({2})})[0].tensor, Error);
  auto f = ew_vec<float>(run_op("Mod", 13, {ew_t<float>({-7.5f}), ew_t<float>({2})}, {attr("fmod", 1)})[0].tensor);
  EXPECT_FLOAT_EQ(f[0], -1.5f);
}

TEST(Elementwise, Pow) {
  EXPECT_EQ(ew_vec<int64_t>(run_op("Pow", 15, {ew_t<int64_t>({3, 2, -1, 2}), ew_t<int64_t>({39, -1, -3, 0})})[0].tensor),
            (std::vector<int64_t>{4052555153018976267LL, 0, -1, 1}));
  EXPECT_EQ(ew_vec<int32_t>(run_op("Pow", 15, {ew_t<int32_t>({2}), ew_t<float>({0.5f})})[0].tensor),
            (std::vector<int32_t>{1}));
  auto f = ew_vec<float>(run_op("Pow", 15, {ew_t<float>({2, 4}), ew_t<uint8_t>({3, 2})})[0].tensor);
  EXPECT_EQ(f, (std::vector<float>{8, 16}));
  EXPECT_THROW(run_op("Pow", 15, {ew_t<uint8_t>({2}), ew_t<uint8_t>({2})})[0].tensor, Error);
}

TEST(Elementwise, MinMaxNaN) {
  Tensor a = ew_t<float>({1, kNaN, 3});
  Tensor b = ew_t<float>({kNaN, 2, 1});
  auto mx = ew_vec<float>(run_op("Max", 13, {a, b})[0].tensor);
  EXPECT_TRUE(std::isnan(mx[0]));
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_EQ(mx[2], 3);
  auto mn = ew_vec<float>(run_op("Min", 13, {a, b, ew_t<float>({0})})[0].tensor);
  EXPECT_TRUE(std::isnan(mn[0]));
  EXPECT_TRUE(std::isnan(mn[1]));
  EXPECT_EQ(mn[2], 0);
}

TEST(Elementwise, SumMeanVariadic) {
  Tensor a = ew_t<float>({1, 2, 3, 4}, {2, 2});
  Tensor b = ew_t<float>({10, 20}, {2});
  Tensor c = ew_t<float>({100, 200}, {2, 1});
  EXPECT_EQ(ew_vec<float>(run_op("Sum", 13, {a, b, c})[0].tensor), (std::vector<float>{111, 122, 213, 224}));
  EXPECT_EQ(ew_vec<float>(run_op("Mean", 13, {a, b, c})[0].tensor), (std::vector<float>{37, 122.0f / 3, 71, 224.0f / 3}));
  Tensor one = run_op("Sum", 13, {a})[0].tensor;
  EXPECT_EQ(ew_vec<float>(one), (std::vector<float>{1, 2, 3, 4}));
}

TEST(Elementwise, WhereStrings) {
  Tensor c = ew_t<bool>({true, false}, {2, 1});
  Tensor x = ew_t<std::string>({"a", "b", "c"});
  Tensor y = Tensor::scalar<std::string>("z");
  Tensor o = run_op("Where", 16, {c, x, y})[0].tensor;
  ASSERT_EQ(o.shape(), (Shape{2, 3}));
  EXPECT_EQ(ew_vec<std::string>(o), (std::vector<std::string>{"a", "b", "c", "z", "z", "z"}));
  EXPECT_THROW(run_op("Where", 16, {ew_t<int32_t>({1}), x, y})[0].tensor, Error);
}

TEST(Elementwise, EqualStringsAndBool) {
  auto e = ew_vec<bool>(run_op("Equal", 19, {ew_t<std::string>({"a", "b"}), Tensor::scalar<std::string>("b")})[0].tensor);
  EXPECT_EQ(e, (std::vector<bool>{false, true}));
  auto eb = ew_vec<bool>(run_op("Equal", 13, {ew_t<bool>({true, false}), ew_t<bool>({true, true})})[0].tensor);
  EXPECT_EQ(eb, (std::vector<bool>{true, false}));
  EXPECT_THROW(run_op("Greater", 13, {ew_t<bool>({true}), ew_t<bool>({true})})[0].tensor, Error);
}

TEST(Elementwise, BitShiftWide) {
  auto l = ew_vec<uint8_t>(run_op("BitShift", 11, {ew_t<uint8_t>({1, 1, 255}), ew_t<uint8_t>({7, 8, 1})},
                                  {attr("direction", "LEFT")})[0].tensor);
  EXPECT_EQ(l, (std::vector<uint8_t>{128, 0, 254}));
  auto r = ew_vec<uint64_t>(run_op("BitShift", 11, {ew_t<uint64_t>({~0ULL, 8}), ew_t<uint64_t>({64, 3})},
                                   {attr("direction", "RIGHT")})[0].tensor);
  EXPECT_EQ(r, (std::vector<uint64_t>{0, 1}));
  EXPECT_THROW(run_op("BitShift", 11, {ew_t<uint8_t>({1}), ew_t<uint8_t>({1})}, {attr("direction", "UP")})[0].tensor,
               Error);
}

TEST(Elementwise, UnaryCorners) {
  auto rd = ew_vec<float>(run_op("Round", 22, {ew_t<float>({0.5f, 1.5f, 2.5f, -0.5f, -1.5f, 2.6f})})[0].tensor);
  EXPECT_EQ(rd, (std::vector<float>{0, 2, 2, -0.0f, -2, 3}));
  EXPECT_EQ(ew_vec<int8_t>(run_op("Abs", 13, {ew_t<int8_t>({-128, -5, 5})})[0].tensor), (std::vector<int8_t>{-128, 5, 5}));
  EXPECT_EQ(ew_vec<int8_t>(run_op("Neg", 13, {ew_t<int8_t>({-128, -5})})[0].tensor), (std::vector<int8_t>{-128, 5}));
  EXPECT_THROW(run_op("Neg", 13, {ew_t<uint8_t>({1})})[0].tensor, Error);
  auto sg = ew_vec<float>(run_op("Sign", 13, {ew_t<float>({-2, 0, 3, kNaN})})[0].tensor);
  EXPECT_EQ(sg[0], -1);
  EXPECT_EQ(sg[1], 0);
  EXPECT_EQ(sg[2], 1);
  EXPECT_TRUE(std::isnan(sg[3]));
  auto inf = ew_vec<bool>(run_op("IsInf", 20, {ew_t<float>({kInf, -kInf, kNaN, 1})}, {attr("detect_negative", 0)})[0].tensor);
  EXPECT_EQ(inf, (std::vector<bool>{true, false, false, false}));
  EXPECT_THROW(run_op("Exp", 13, {ew_t<int32_t>({1})})[0].tensor, Error);
}
