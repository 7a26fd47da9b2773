// Float -> 8-bit quantization kernels for the dynamic quantization path (DynamicQuantizeLinear
// and the fused DynamicQuantizeMatMul), bit-exact with the ONNX definitions:
//   range:    lo = min(0, min x), hi = max(0, max x) (NaNs ignored)
//   scale:    (hi - lo) / 255;  zero point: saturate(round(0 - lo / scale)) (0 when scale is 0)
//   quantize: saturate(round(x / scale) + zero_point) to [0, 255]; NaN -> 0
// with round = round half to even (SSE2 cvtps2dq in the default rounding mode) and x / scale a
// true division, as the spec writes it (no reciprocal).
#pragma once

#include <cstdint>

namespace basalt::kernels {

// min(0, min x) and max(0, max x) over n floats (NaNs skipped).
void range_with_zero(const float* x, int64_t n, float& lo, float& hi);
// DynamicQuantizeLinear's scale and zero point for the range [lo, hi] (lo <= 0 <= hi).
void dynamic_quant_params(float lo, float hi, float& scale, uint8_t& zp);
// y[i] = saturate(round(x[i] / scale) + zp) for i < n; scale 0 gives zp everywhere.
void quantize_u8(const float* x, int64_t n, float scale, uint8_t zp, uint8_t* y);

// QuantizeLinear to 8 bits with a float scale: y[i] = saturate(round(x[i] / scale) + zp) to int8
// (is_signed) or uint8; NaN -> 0 (the reference kernel's rule).
void quantize_linear_8(const float* x, int64_t n, float scale, int32_t zp, bool is_signed, uint8_t* y);
// DequantizeLinear from 8 bits to float: y[i] = float(x[i] - zp) * scale.
void dequantize_linear_8(const uint8_t* x, int64_t n, float scale, int32_t zp, bool is_signed, float* y);
// com.microsoft QLinearAdd on equal shapes: c[i] = saturate(round(ka(a[i]) + kb(b[i])) + cz) with
// k(v) = (s * float(v - z)) / c_scale, the kernel's per-input terms (ops/quant_contrib.cpp).
void qlinear_add_8(const uint8_t* a, const uint8_t* b, int64_t n, float as, int32_t az, float bs, int32_t bz, float cs, int32_t cz,
                   bool is_signed, uint8_t* c);

// 2-D max pooling of 8-bit planes (MaxPool on a quantized tensor: the max commutes with the
// monotone dequantization, so the scale carries over): padding taps are skipped, the window is
// the vertical max of its rows (vectorized across the row) and then the horizontal max.
// Geometry as kernels::Pool2D (kernels/pool.hpp); planes [p0, p1).
struct Pool2D;
void maxpool2d_8(const uint8_t* x, uint8_t* y, int64_t p0, int64_t p1, const Pool2D& g, bool is_signed);

}  // namespace basalt::kernels
