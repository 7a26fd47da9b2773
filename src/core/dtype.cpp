#include <basalt/dtype.hpp>
#include <basalt/error.hpp>

#include <cmath>
#include <cstring>
#include <string>

namespace basalt {

const char* error_code_name(ErrorCode c) {
  switch (c) {
    case ErrorCode::InvalidModel: return "invalid model";
    case ErrorCode::InvalidArgument: return "invalid argument";
    case ErrorCode::Unsupported: return "unsupported";
    case ErrorCode::MemoryLimit: return "memory limit";
    case ErrorCode::Io: return "i/o error";
    case ErrorCode::Internal: return "internal error";
    case ErrorCode::Cancelled: return "cancelled";
  }
  return "error";
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float: case DType::Int32: case DType::Uint32: return 4;
    case DType::Double: case DType::Int64: case DType::Uint64: case DType::Complex64: return 8;
    case DType::Complex128: return 16;
    case DType::Float16: case DType::BFloat16: case DType::Int16: case DType::Uint16: return 2;
    case DType::Uint8: case DType::Int8: case DType::Bool:
    case DType::Float8E4M3FN: case DType::Float8E4M3FNUZ: case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ: case DType::Float8E8M0:
    case DType::Uint4: case DType::Int4: case DType::Float4E2M1: case DType::Uint2: case DType::Int2:
      return 1;
    case DType::String: return sizeof(std::string);
    case DType::Undefined: return 0;
  }
  return 0;
}

int dtype_file_bits(DType t) {
  switch (t) {
    case DType::Uint4: case DType::Int4: case DType::Float4E2M1: return 4;
    case DType::Uint2: case DType::Int2: return 2;
    default: return int(dtype_size(t) * 8);
  }
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Undefined: return "undefined";
    case DType::Float: return "float32";
    case DType::Uint8: return "uint8";
    case DType::Int8: return "int8";
    case DType::Uint16: return "uint16";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::String: return "string";
    case DType::Bool: return "bool";
    case DType::Float16: return "float16";
    case DType::Double: return "float64";
    case DType::Uint32: return "uint32";
    case DType::Uint64: return "uint64";
    case DType::Complex64: return "complex64";
    case DType::Complex128: return "complex128";
    case DType::BFloat16: return "bfloat16";
    case DType::Float8E4M3FN: return "float8e4m3fn";
    case DType::Float8E4M3FNUZ: return "float8e4m3fnuz";
    case DType::Float8E5M2: return "float8e5m2";
    case DType::Float8E5M2FNUZ: return "float8e5m2fnuz";
    case DType::Uint4: return "uint4";
    case DType::Int4: return "int4";
    case DType::Float4E2M1: return "float4e2m1";
    case DType::Float8E8M0: return "float8e8m0";
    case DType::Uint2: return "uint2";
    case DType::Int2: return "int2";
  }
  return "unknown";
}

std::string dtype_onnx_type_string(DType t) {
  switch (t) {
    case DType::Float: return "tensor(float)";
    case DType::Double: return "tensor(double)";
    default: break;
  }
  return std::string("tensor(") + dtype_name(t) + ")";
}

DType dtype_from_name(const std::string& n) {
  if (n == "float" || n == "float32" || n == "f32") return DType::Float;
  if (n == "double" || n == "float64" || n == "f64") return DType::Double;
  for (int v = 1; v <= 26; ++v) {
    if (n == dtype_name(DType(v))) return DType(v);
  }
  return DType::Undefined;
}

bool dtype_is_known(int32_t v) { return v >= 1 && v <= 26; }

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::Float: case DType::Double: case DType::Float16: case DType::BFloat16:
    case DType::Float8E4M3FN: case DType::Float8E4M3FNUZ: case DType::Float8E5M2:
    case DType::Float8E5M2FNUZ: case DType::Float8E8M0: case DType::Float4E2M1:
      return true;
    default: return false;
  }
}

bool dtype_is_integer(DType t) {
  switch (t) {
    case DType::Uint8: case DType::Int8: case DType::Uint16: case DType::Int16: case DType::Int32:
    case DType::Int64: case DType::Uint32: case DType::Uint64: case DType::Uint4: case DType::Int4:
    case DType::Uint2: case DType::Int2:
      return true;
    default: return false;
  }
}

bool dtype_is_signed(DType t) {
  switch (t) {
    case DType::Int8: case DType::Int16: case DType::Int32: case DType::Int64: case DType::Int4:
    case DType::Int2:
      return true;
    default: return dtype_is_float(t);
  }
}

// IEEE half <-> float, round to nearest even, with subnormals, inf and NaN.
uint16_t float_to_half_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xffu;
  uint32_t mant = x & 0x7fffffu;
  if (exp == 0xff) {  // inf / nan
    return uint16_t(sign | 0x7c00u | (mant ? 0x200u | (mant >> 13) : 0));
  }
  int32_t e = int32_t(exp) - 127 + 15;
  if (e >= 0x1f) return uint16_t(sign | 0x7c00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return uint16_t(sign);  // underflow -> 0
    mant |= 0x800000u;
    uint32_t shift = uint32_t(14 - e);
    uint32_t h = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = (uint32_t(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1))) ++h;  // may carry into exponent: correct
  return uint16_t(sign | h);
}

float half_bits_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t x;
  if (exp == 0) {
    if (mant == 0) {
      x = sign;
    } else {
      // subnormal: normalize
      int e = -1;
      do {
        ++e;
        mant <<= 1;
      } while (!(mant & 0x400u));
      mant &= 0x3ffu;
      x = sign | (uint32_t(127 - 15 - e) << 23) | (mant << 13);
    }
  } else if (exp == 0x1f) {
    x = sign | 0x7f800000u | (mant << 13);
  } else {
    x = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

uint16_t float_to_bf16_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if (std::isnan(f)) return uint16_t((x >> 16) | 0x40u);
  uint32_t lsb = (x >> 16) & 1u;
  x += 0x7fffu + lsb;
  return uint16_t(x >> 16);
}

}  // namespace basalt
