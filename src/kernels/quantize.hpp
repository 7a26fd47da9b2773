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

}  // namespace basalt::kernels
