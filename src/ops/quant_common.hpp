// What the quantization ops share (ops/quant.cpp: the reference kernels and element helpers;
// ops/quant_gemm.cpp: the integer GEMM / convolution kernels, which fall back to the reference
// ones for the cases they do not take).
#pragma once

#include "ops/common.hpp"

#include <cstdint>
#include <vector>

namespace basalt {

class OpRegistry;

namespace quant {

// Element access on integer and float tensors of any quantization type.
void int_range(DType dt, int64_t& lo, int64_t& hi);
int64_t int_at(const Tensor& t, int64_t i);
double float_at(const Tensor& t, int64_t i);
// x / s computed in the precision of dt (the spec's arithmetic for scale ratios).
double div_in(DType dt, double x, double s);
bool is_float_scale(DType dt);
// Input i must be int8 or uint8 (an error naming the node and input otherwise).
void check_int8(const KernelContext& ctx, int i);
std::vector<int64_t> int_vector(const Tensor& t);
// Every element of scale input i must be positive and finite (a zero, negative, NaN or infinite
// scale would give garbage or a division by zero): InvalidArgument naming the input otherwise.
void check_scales(const KernelContext& ctx, int i, const char* what);
// QLinearMatMul / QLinearConv: inputs 1 and 4 (named s1, s4) and 6 (y_scale) are float scales,
// positive and finite, and input 7 an int8 / uint8 zero point. Errors name the input.
void check_qlinear_params(const KernelContext& ctx, const char* s1, const char* s4);
// The elements of an integer tensor as int32 (zero points), empty for null.
std::vector<int32_t> int32_vector(const Tensor* t);

struct ConvAttrs {
  AutoPad auto_pad = AutoPad::NotSet;
  std::vector<int64_t> dilations, kernel_shape, pads, strides;
  int64_t group = 1;
};
ConvAttrs parse_conv(const Node& n);

// Validated geometry of a convolution of X by W: kernel, strides, dilations, pads (begin, end)
// and output sizes per spatial dim. Errors name the node.
struct ConvGeom {
  std::vector<int64_t> ks, st, dl, pb, pe, os;
};
ConvGeom conv_geometry(const KernelContext& ctx, const ConvAttrs& at, const Tensor& X, const Tensor& W);

// The reference kernels (any rank, batch broadcasting, per-row parameters, int64 sums).
void matmul_integer_ref(KernelContext& ctx);
void qlinear_matmul_ref(KernelContext& ctx);
void conv_integer_ref(const ConvAttrs& at, KernelContext& ctx);
void qlinear_conv_ref(const ConvAttrs& at, KernelContext& ctx);

void register_quantize(OpRegistry& r);
// MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv on the integer GEMM (ops/quant_gemm.cpp).
void register_gemm_ops(OpRegistry& r);
// com.microsoft DynamicQuantizeMatMul and MatMulIntegerToFloat (ops/quant_contrib.cpp).
void register_contrib_ops(OpRegistry& r);

}  // namespace quant
}  // namespace basalt
