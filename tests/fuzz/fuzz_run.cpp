// libFuzzer target: a few small conformance models run on random input shapes and values.
// Input bytes: [model index] then, per graph input, one byte per dim (symbolic dims become
// 1..8; a fixed dim is kept unless the byte's top bit asks to change it), then element values.
// Every run must produce outputs or throw basalt::Error.
#include <basalt/basalt.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

// Small models that cover broadcasting, indexing, shape ops, convolution and control flow.
const char* kModels[] = {
    "test_add_bcast",  "test_matmul_3d",   "test_gather_0",       "test_slice",         "test_reshape_reordered_all_dims",
    "test_conv_with_strides_padding", "test_maxpool_2d_pads", "test_concat_2d_axis_0", "test_transpose_all_permutations_3",
    "test_where_example", "test_expand_dim_changed", "test_softmax_axis_1", "test_reduce_sum_keepdims_random",
    "test_tile", "test_loop11", "test_if", "test_resize_upsample_scales_nearest", "test_topk", "test_pad", "test_cumsum_1d"};

struct Bytes {
  const uint8_t* p;
  size_t n;
  uint8_t next() {
    if (!n) return 0;
    --n;
    return *p++;
  }
};

std::vector<std::unique_ptr<basalt::Session>>& sessions() {
  static std::vector<std::unique_ptr<basalt::Session>> all = [] {
    std::vector<std::unique_ptr<basalt::Session>> v;
    const char* root = "/usr/share/libonnx-testdata/data/node/";
    for (const char* m : kModels) {
      try {
        v.push_back(basalt::Session::open(std::string(root) + m + "/model.onnx"));
      } catch (const basalt::Error&) {
        // model missing from this libonnx-testdata version: skip it
      }
    }
    return v;
  }();
  return all;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto& all = sessions();
  if (all.empty() || size == 0) return 0;
  Bytes in{data, size};
  const basalt::Session& s = *all[in.next() % all.size()];
  std::vector<std::pair<std::string, basalt::Value>> feeds;
  for (const auto& io : s.inputs()) {
    if (io.kind != "tensor") continue;
    std::vector<int64_t> shape = io.shape;
    for (auto& d : shape) {
      uint8_t b = in.next();
      if (d < 0 || (b & 0x80)) d = b % 8 + (b & 0x40 ? 0 : 1);  // 0..8: zero-sized dims too
    }
    int64_t numel = 1;
    for (auto d : shape) numel *= d;
    if (numel > (1 << 16)) return 0;  // keep each run small and fast
    try {
      basalt::Tensor t(io.dtype, shape);
      uint8_t* raw = static_cast<uint8_t*>(t.raw());
      if (io.dtype == basalt::DType::Float) {
        for (int64_t i = 0; i < numel; ++i) t.data<float>()[i] = float(int8_t(in.next())) / 16.0f;
      } else if (io.dtype == basalt::DType::Int64) {
        for (int64_t i = 0; i < numel; ++i) t.data<int64_t>()[i] = int8_t(in.next()) % 9;  // small: indices, counts
      } else if (io.dtype == basalt::DType::Bool) {
        for (int64_t i = 0; i < numel; ++i) t.data<bool>()[i] = in.next() & 1;
      } else if (io.dtype != basalt::DType::String) {
        for (size_t i = 0; i < t.nbytes(); ++i) raw[i] = in.next();
      }
      feeds.emplace_back(io.name, basalt::Value(std::move(t)));
    } catch (const basalt::Error&) {
      return 0;
    }
  }
  try {
    s.run(feeds);
  } catch (const basalt::Error&) {
  }
  return 0;
}
