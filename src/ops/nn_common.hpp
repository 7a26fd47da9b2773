// What the nn op families (conv, pool, matmul, sampling, nchwc_ops) share: float conversion, the
// window attributes (kernel_shape, strides, dilations, pads, auto_pad) parsed and checked once,
// their resolved geometry, the fused-activation attributes and the per-opset registration helper.
#pragma once

#include "ops/common.hpp"
#include "kernels/activation.hpp"
#include "kernels/conv.hpp"
#include "kernels/conv_ref.hpp"
#include "kernels/gemm.hpp"
#include "kernels/nchwc.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/pool.hpp"
#include "kernels/winograd.hpp"
#include "core/thread_pool.hpp"

#include <initializer_list>
#include <string>
#include <vector>

namespace basalt::nnops {

using Geom = kernels::WindowGeom;
using kernels::conv_f32;
using kernels::for_each_index;
using kernels::gemm_acc;
using kernels::im2col;

// Registers one factory for each opset version of `op` listed in the ONNX spec (the semantics
// that changed between versions are handled inside the factory via n.opset).
void add_versions(OpRegistry& r, const std::string& op, std::initializer_list<int> versions, const KernelFactory& f);

Tensor tof(const Tensor& t);                // any numeric tensor as float32 (no copy for float32)
Tensor fromf(const Tensor& t, DType dt);    // a float32 tensor converted to dt
std::string vec_str(const std::vector<int64_t>& v);

AutoPad parse_auto_pad(const Node& n);  // InvalidModel on an unknown value

// Window attributes of Conv/ConvTranspose/pools, parsed at load.
struct WinAttrs {
  std::vector<int64_t> kernel, strides, dilations, pads;
  AutoPad auto_pad = AutoPad::NotSet;
  bool ceil_mode = false;
};

// Parses and bounds the window attributes (InvalidModel naming the bad one).
WinAttrs parse_win(const Node& n, bool kernel_required);

// Pools walk every kernel tap of every window (and size per-tap tables): cap prod(kernel_shape).
constexpr int64_t kMaxPoolTaps = int64_t(1) << 24;
constexpr int64_t kMaxPoolExtent = int64_t(1) << 20;  // per axis, dilations included
void check_pool_kernel(const Node& n, const WinAttrs& a);

// Conv and ConvTranspose: float-like X and W of the same rank >= 3, and W's kernel dims equal to
// the kernel_shape attribute when it is given. Returns W's kernel dims.
std::vector<int64_t> check_conv_inputs(const KernelContext& ctx, const Tensor& X, const Tensor& W,
                                       const std::vector<int64_t>& kernel_shape);
// Forward window geometry (Conv and pools) of an input's spatial dims.
Geom make_geom(const KernelContext& ctx, const WinAttrs& a, const Shape& in_spatial, const std::vector<int64_t>& kernel,
               bool pool);
void set_conv2d_window(const Geom& g, kernels::Conv2dShape& s);
void check_pool_work(const KernelContext& ctx, const Geom& g, double planes, bool separable);
kernels::Pool2D pool2d_of(const Geom& g, bool avg, bool count_include_pad);

// The `activation`, `activation_params` and `post_affine` attributes of the fused ops.
kernels::Activation parse_fused_activation(const Node& n);

// The families (one file each), listed in register_nn_ops (ops/nn.cpp).
void register_conv_ops(OpRegistry& r);
void register_pool_ops(OpRegistry& r);
void register_matmul_ops(OpRegistry& r);
void register_sampling_ops(OpRegistry& r);
void register_nchwc_ops(OpRegistry& r);

}  // namespace basalt::nnops
