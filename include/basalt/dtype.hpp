// Element types. The numeric values are ONNX's TensorProto.DataType values.
//
// Storage: every element type occupies dtype_size() bytes in a basalt Tensor. Sub-byte types
// (int4, uint4, float4e2m1, int2, uint2) are stored unpacked, one element per byte, and packed
// only at the file boundary. String tensors hold std::string objects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace basalt {

enum class DType : int32_t {
  Undefined = 0,
  Float = 1,
  Uint8 = 2,
  Int8 = 3,
  Uint16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Double = 11,
  Uint32 = 12,
  Uint64 = 13,
  Complex64 = 14,
  Complex128 = 15,
  BFloat16 = 16,
  Float8E4M3FN = 17,
  Float8E4M3FNUZ = 18,
  Float8E5M2 = 19,
  Float8E5M2FNUZ = 20,
  Uint4 = 21,
  Int4 = 22,
  Float4E2M1 = 23,
  Float8E8M0 = 24,
  Uint2 = 25,
  Int2 = 26,
};

// Bytes per element in a basalt Tensor (0 for Undefined).
size_t dtype_size(DType t);
// Short name: "float32", "int64", "float16", "string", ...
const char* dtype_name(DType t);
// ONNX Runtime style type string: "tensor(float)", "tensor(int64)", ...
std::string dtype_onnx_type_string(DType t);
// Parse a short name ("float32", "float", "int64", ...). Returns Undefined when unknown.
DType dtype_from_name(const std::string& name);
// Is this a valid ONNX data type value basalt knows about?
bool dtype_is_known(int32_t v);
bool dtype_is_float(DType t);    // float, double, f16, bf16, f8*, f4
bool dtype_is_integer(DType t);  // signed/unsigned ints incl. 4/2-bit
bool dtype_is_signed(DType t);
// Number of bits of a packed element in ONNX files (4 for int4/uint4/float4, 2 for int2/uint2,
// otherwise 8 * dtype_size).
int dtype_file_bits(DType t);

// ---- 16-bit float storage types. Arithmetic goes through float. ----
uint16_t float_to_half_bits(float f);
float half_bits_to_float(uint16_t h);
uint16_t float_to_bf16_bits(float f);  // round to nearest even, NaN preserved
inline float bf16_bits_to_float(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  float16(float f) : bits(float_to_half_bits(f)) {}  // NOLINT: implicit on purpose
  operator float() const { return half_bits_to_float(bits); }
  static float16 from_bits(uint16_t b) {
    float16 h;
    h.bits = b;
    return h;
  }
};

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  bfloat16(float f) : bits(float_to_bf16_bits(f)) {}  // NOLINT: implicit on purpose
  operator float() const { return bf16_bits_to_float(bits); }
  static bfloat16 from_bits(uint16_t b) {
    bfloat16 h;
    h.bits = b;
    return h;
  }
};

// Maps a C++ type to its DType.
template <class T>
struct dtype_of;
#define BASALT_DTYPE_OF(T, D) \
  template <>                 \
  struct dtype_of<T> {        \
    static constexpr DType value = DType::D; \
  };
BASALT_DTYPE_OF(float, Float)
BASALT_DTYPE_OF(double, Double)
BASALT_DTYPE_OF(int8_t, Int8)
BASALT_DTYPE_OF(uint8_t, Uint8)
BASALT_DTYPE_OF(int16_t, Int16)
BASALT_DTYPE_OF(uint16_t, Uint16)
BASALT_DTYPE_OF(int32_t, Int32)
BASALT_DTYPE_OF(uint32_t, Uint32)
BASALT_DTYPE_OF(int64_t, Int64)
BASALT_DTYPE_OF(uint64_t, Uint64)
BASALT_DTYPE_OF(bool, Bool)
BASALT_DTYPE_OF(float16, Float16)
BASALT_DTYPE_OF(bfloat16, BFloat16)
BASALT_DTYPE_OF(std::string, String)
#undef BASALT_DTYPE_OF

}  // namespace basalt
