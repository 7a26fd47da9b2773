// Hostile attribute values for the window / group ops of src/ops/nn.cpp (audit findings 2, 3, 7,
// 8, 9, 11, 16): each must give a basalt::Error naming the problem, or for an empty output the
// right (empty) shape, never a crash, a hang or a huge allocation.
#include "op_tester.hpp"

#include <basalt/error.hpp>
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

using namespace basalt;
using namespace basalt::test;

namespace {

constexpr int64_t kBig = int64_t(1) << 62;
constexpr int64_t kI32 = std::numeric_limits<int32_t>::max();

Tensor zeros(Shape s) { return Tensor(DType::Float, std::move(s)); }

// The message of the basalt::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}
#define EXPECT_ERROR(expr, text) EXPECT_NE(error_of([&] { (void)(expr); }).find(text), std::string::npos) << error_of([&] { (void)(expr); })

// Finding 2: (k-1)*d wrapped, so the geometry looked valid and the pool read out of bounds.
TEST(HostileNn, PoolHugeDilationRejected) {
  EXPECT_ERROR(run_op("MaxPool", 12, {Value(zeros({1, 1, 1, 40}))},
                      {attr("kernel_shape", Ints{1, 4}), attr("dilations", Ints{1, 6148914691236517206})}),
               "dilations value");
  EXPECT_ERROR(run_op("AveragePool", 19, {Value(zeros({1, 1, 40}))}, {attr("kernel_shape", Ints{2}), attr("strides", Ints{kBig})}),
               "strides value");
  EXPECT_ERROR(run_op("MaxPool", 12, {Value(zeros({1, 1, 40}))}, {attr("kernel_shape", Ints{2}), attr("pads", Ints{kBig, 0})}), "pads value");
}

TEST(HostileNn, ConvHugeDilationRejected) {
  EXPECT_ERROR(run_op("Conv", 11, {Value(zeros({1, 1, 1, 40})), Value(zeros({1, 1, 1, 4}))}, {attr("dilations", Ints{1, 6148914691236517206})}),
               "dilations value");
  // A kernel from W (empty, so it can be huge) times a legal dilation overflows int64.
  EXPECT_ERROR(run_op("Conv", 11, {Value(zeros({1, 1, 1, 4})), Value(zeros({0, 1, 1, int64_t(1) << 40}))}, {attr("dilations", Ints{1, kI32})}),
               "dilated kernel extent");
}

// Finding 3 / 9: group over 0 channels looped `group` times and wrote past the output.
TEST(HostileNn, ConvTransposeGroupOverEmptyChannels) {
  EXPECT_ERROR(run_op("ConvTranspose", 11, {Value(zeros({1, 0, 2, 2})), Value(zeros({0, 4, 1, 1}))}, {attr("group", kBig)}), "group value");
  auto y = run_op("ConvTranspose", 11, {Value(zeros({1, 0, 2, 2})), Value(zeros({0, 0, 1, 1}))}, {attr("group", int64_t(1) << 30)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 0, 2, 2}));
  auto yb = run_op("ConvTranspose", 11, {Value(zeros({1, 0, 2, 2})), Value(zeros({0, 0, 1, 1})), Value(zeros({0}))},
                   {attr("group", int64_t(1) << 30)})[0].tensor;
  EXPECT_EQ(yb.shape(), (Shape{1, 0, 2, 2}));
}

TEST(HostileNn, ConvGroupOverEmptyChannels) {
  EXPECT_ERROR(run_op("Conv", 11, {Value(zeros({1, 0, 4, 4})), Value(zeros({0, 0, 1, 1}))}, {attr("group", kBig)}), "group value");
  auto y = run_op("Conv", 11, {Value(zeros({1, 0, 4, 4})), Value(zeros({0, 0, 1, 1}))}, {attr("group", int64_t(1) << 30)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 0, 4, 4}));
  auto y3 = run_op("Conv", 11, {Value(zeros({1, 0, 2, 2, 2})), Value(zeros({0, 0, 1, 1, 1}))}, {attr("group", int64_t(1) << 30)})[0].tensor;
  EXPECT_EQ(y3.shape(), (Shape{1, 0, 2, 2, 2}));
  // W.dim(1) * group overflows int64 (W is empty, so W.dim(1) can be huge).
  EXPECT_ERROR(run_op("Conv", 11, {Value(zeros({1, 4, 2, 2})), Value(zeros({0, int64_t(1) << 40, 1, 1}))}, {attr("group", int64_t(1) << 30)}),
               "channel mismatch");
}

TEST(HostileNn, DeformConvGroupOverEmptyChannels) {
  EXPECT_ERROR(run_op("DeformConv", 19, {Value(zeros({1, 0, 4, 4})), Value(zeros({0, 0, 1, 1})), Value(zeros({1, 2, 4, 4}))},
                      {attr("group", kBig)}),
               "group value");
  auto y = run_op("DeformConv", 19, {Value(zeros({1, 0, 4, 4})), Value(zeros({0, 0, 1, 1})), Value(zeros({1, 2, 4, 4}))},
                  {attr("group", int64_t(1) << 30)})[0]
               .tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 0, 4, 4}));
}

// Finding 7: kernel/pads-sized tables for a tiny output.
TEST(HostileNn, PoolKernelTooLargeRejected) {
  EXPECT_ERROR(run_op("MaxPool", 12, {Value(zeros({1, 1, 1}))}, {attr("kernel_shape", Ints{200000000}), attr("pads", Ints{100000000, 100000000})}),
               "has more than");
  EXPECT_ERROR(run_op("AveragePool", 19, {Value(zeros({1, 1, 1, 1}))},
                      {attr("kernel_shape", Ints{1, 2000000000}), attr("pads", Ints{0, 1000000000, 0, 1000000000})}),
               "has more than");
  // a small kernel dilated to a huge extent (the 2-D kernel's row buffer spans it)
  EXPECT_ERROR(run_op("AveragePool", 19, {Value(zeros({1, 1, 1, 1}))},
                      {attr("kernel_shape", Ints{1, 2}), attr("dilations", Ints{1, int64_t(1) << 30}),
                       attr("pads", Ints{0, int64_t(1) << 29, 0, int64_t(1) << 29})}),
               "too large for a pool");
  // kernel as large as the padded 1-element input: O(output x kernel) = 2^40 taps
  const int64_t k = int64_t(1) << 20;
  EXPECT_ERROR(run_op("MaxPool", 12, {Value(zeros({1, 1, 1}))}, {attr("kernel_shape", Ints{k}), attr("pads", Ints{k - 1, k - 1})}),
               "tap operations");
  EXPECT_ERROR(run_op("MaxPool", 12, {Value(zeros({1, 1, 1, 1}))},
                      {attr("kernel_shape", Ints{1, k}), attr("pads", Ints{0, k - 1, 0, k - 1})}),
               "tap operations");
  // a window over the whole of a long signal (a global max written as MaxPool) is not "too large":
  // the extent cap applies to windows larger than the input only
  {
    const int64_t n = (int64_t(1) << 20) + 5;
    Tensor x = zeros({1, 1, n});
    x.data<float>()[n - 3] = 7.0f;
    auto g = run_op("MaxPool", 12, {Value(x)}, {attr("kernel_shape", Ints{n})})[0].tensor;
    ASSERT_EQ(g.shape(), (Shape{1, 1, 1}));
    EXPECT_EQ(g.data<float>()[0], 7.0f);
  }
  // pads must be smaller than the kernel (onnxruntime's rule)
  EXPECT_ERROR(run_op("MaxPool", 12, {Value(zeros({1, 1, 4}))}, {attr("kernel_shape", Ints{2}), attr("pads", Ints{2, 0})}), "must be smaller than");
  auto y = run_op("MaxPool", 12, {Value(zeros({1, 1, 4}))}, {attr("kernel_shape", Ints{2}), attr("pads", Ints{1, 1})})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 1, 5}));
}

// Finding 8: samples per bin unbounded.
TEST(HostileNn, RoiAlignSamplesBounded) {
  auto rois = Value(Tensor::from_vector<float>({0, 0, 1, 1}, {1, 4}));
  auto bi = Value(Tensor::from_vector<int64_t>({0}, {1}));
  auto x = Value(zeros({1, 1, 2, 2}));
  EXPECT_ERROR(run_op("RoiAlign", 16, {x, rois, bi}, {attr("sampling_ratio", int64_t(1) << 20)}), "sampling_ratio value");
  EXPECT_ERROR(run_op("RoiAlign", 16, {x, rois, bi}, {attr("spatial_scale", std::numeric_limits<float>::infinity())}), "spatial_scale must be finite");
  EXPECT_ERROR(run_op("RoiAlign", 16, {x, rois, bi}, {attr("spatial_scale", 1e6f)}), "samples per bin");
  auto y = run_op("RoiAlign", 16, {x, rois, bi}, {attr("sampling_ratio", 2)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
}

TEST(HostileNn, MaxRoiPoolHugeScale) {
  auto x = Value(zeros({1, 1, 2, 2}));
  auto rois = Value(Tensor::from_vector<float>({0, 0, 0, 1, 1}, {1, 5}));
  auto y = run_op("MaxRoiPool", 1, {x, rois}, {attr("pooled_shape", Ints{1, 1}), attr("spatial_scale", 1e30f)})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{1, 1, 1, 1}));
  auto nan_rois = Value(Tensor::from_vector<float>({std::numeric_limits<float>::quiet_NaN(), 0, 0, 1, 1}, {1, 5}));
  EXPECT_ERROR(run_op("MaxRoiPool", 1, {x, nan_rois}, {attr("pooled_shape", Ints{1, 1})}), "batch index");
}

// Finding 11: Upsample-7 scales.
TEST(HostileNn, UpsampleScales) {
  EXPECT_ERROR(run_op("Upsample", 7, {Value(zeros({1, 1}))}, {attr("scales", Floats{1, std::numeric_limits<float>::infinity()})}), "finite and positive");
  EXPECT_ERROR(run_op("Upsample", 7, {Value(zeros({1, 1}))}, {attr("scales", Floats{1, -2})}), "finite and positive");
  EXPECT_ERROR(run_op("Upsample", 7, {Value(zeros({1, 1}))}, {attr("scales", Floats{1, 1e30f})}), "gives a too large output");
  // empty output: no per-position tap tables
  auto y = run_op("Upsample", 7, {Value(zeros({0, 1}))}, {attr("scales", Floats{1, 1e8f})})[0].tensor;
  EXPECT_EQ(y.shape(), (Shape{0, 100000000}));
  auto yi = run_op("Upsample", 7, {Value(Tensor(DType::Int32, {0, 1}))}, {attr("scales", Floats{1, 1e8f})})[0].tensor;
  EXPECT_EQ(yi.shape(), (Shape{0, 100000000}));
  EXPECT_EQ(yi.dtype(), DType::Int32);
  // an empty axis that is resized still fails as before
  EXPECT_ERROR(run_op("Upsample", 7, {Value(zeros({0, 1}))}, {attr("scales", Floats{2, 1e8f}), attr("mode", "linear")}), "cannot resize an empty axis");
}

// Finding 16: output-size arithmetic of MaxUnpool, ConvTranspose, Col2Im and the NCHWc ops.
TEST(HostileNn, WindowOutputOverflowRejected) {
  const int64_t huge = int64_t(1) << 33;
  EXPECT_ERROR(run_op("MaxUnpool", 11, {Value(zeros({0, 1, huge})), Value(Tensor(DType::Int64, {0, 1, huge}))},
                      {attr("kernel_shape", Ints{2}), attr("strides", Ints{kI32})}),
               "overflows");
  EXPECT_ERROR(run_op("ConvTranspose", 11, {Value(zeros({0, 1, huge})), Value(zeros({1, 1, 1}))}, {attr("strides", Ints{kI32})}), "overflows");
  EXPECT_ERROR(run_op("ConvTranspose", 11, {Value(zeros({1, 1, 2})), Value(zeros({1, 1, 1}))}, {attr("output_padding", Ints{kBig})}), "output_padding value");
  // (Col2Im runs ops/tensor.cpp's kernel: checked image + pads - extent and block / grid products)
  EXPECT_ERROR(run_op("Col2Im", 18,
                      {Value(zeros({1, 1, 1})), Value(Tensor::from_vector<int64_t>({std::numeric_limits<int64_t>::max()}, {1})),
                       Value(Tensor::from_vector<int64_t>({1}, {1}))},
                      {attr("pads", Ints{1, 1})}),
               "overflow");
  EXPECT_ERROR(run_op("Col2Im", 18,
                      {Value(zeros({1, 1, 1})), Value(Tensor::from_vector<int64_t>({4, 4}, {2})),
                       Value(Tensor::from_vector<int64_t>({int64_t(1) << 40, int64_t(1) << 40}, {2}))}, {}),
               "too many elements");
  EXPECT_ERROR(run_op("Col2Im", 18,
                      {Value(zeros({1, 1, 1})), Value(Tensor::from_vector<int64_t>({4}, {1})),
                       Value(Tensor::from_vector<int64_t>({1}, {1}))},
                      {attr("pads", Ints{-1, 0})}),
               "pads must be >= 0");
  EXPECT_ERROR(run_op("NchwcGlobalAveragePool", 1, {Value(zeros({1, 1, 1, 1, 16}))}, {attr("channels", kBig)}, 1, "basalt"), "channels value");
}

}  // namespace
