// Helpers shared by the reference kernels: dtype dispatch, broadcasting, axis handling.
#pragma once

#include "ops/kernel.hpp"

#include <basalt/tensor.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <optional>
#include <string>
#include <vector>

namespace basalt {

// Calls f.template operator()<T>() with T the C++ type of dt. Usage:
//   visit_numeric(t.dtype(), [&]<class T>() { ... T ... });
// float16/bfloat16 are storage structs that convert to/from float implicitly, so templated
// arithmetic computes through float for them.
// Sub-byte and float8 types are not visited (their storage is one byte; handle them explicitly).
template <class F>
bool visit_numeric(DType dt, F&& f) {
  switch (dt) {
    case DType::Float: f.template operator()<float>(); return true;
    case DType::Double: f.template operator()<double>(); return true;
    case DType::Float16: f.template operator()<float16>(); return true;
    case DType::BFloat16: f.template operator()<bfloat16>(); return true;
    case DType::Int8: f.template operator()<int8_t>(); return true;
    case DType::Uint8: f.template operator()<uint8_t>(); return true;
    case DType::Int16: f.template operator()<int16_t>(); return true;
    case DType::Uint16: f.template operator()<uint16_t>(); return true;
    case DType::Int32: f.template operator()<int32_t>(); return true;
    case DType::Uint32: f.template operator()<uint32_t>(); return true;
    case DType::Int64: f.template operator()<int64_t>(); return true;
    case DType::Uint64: f.template operator()<uint64_t>(); return true;
    default: return false;
  }
}
// Numeric plus bool.
template <class F>
bool visit_numeric_bool(DType dt, F&& f) {
  if (dt == DType::Bool) {
    f.template operator()<bool>();
    return true;
  }
  return visit_numeric(dt, f);
}
// Every storage type incl. string (for copy-style ops).
template <class F>
bool visit_all(DType dt, F&& f) {
  if (dt == DType::String) {
    f.template operator()<std::string>();
    return true;
  }
  if (visit_numeric_bool(dt, f)) return true;
  switch (dt) {  // one-byte storage types
    case DType::Float8E4M3FN: case DType::Float8E4M3FNUZ: case DType::Float8E5M2: case DType::Float8E5M2FNUZ:
    case DType::Float8E8M0: case DType::Uint4: case DType::Float4E2M1: case DType::Uint2:
      f.template operator()<uint8_t>();
      return true;
    case DType::Int4: case DType::Int2:
      f.template operator()<int8_t>();
      return true;
    default: return false;
  }
}
// Floating types only (float, double, float16, bfloat16).
template <class F>
bool visit_float(DType dt, F&& f) {
  switch (dt) {
    case DType::Float: f.template operator()<float>(); return true;
    case DType::Double: f.template operator()<double>(); return true;
    case DType::Float16: f.template operator()<float16>(); return true;
    case DType::BFloat16: f.template operator()<bfloat16>(); return true;
    default: return false;
  }
}

// Fails with "input i has unsupported type X" naming the node.
[[noreturn]] void unsupported_dtype(const KernelContext& ctx, int input, DType dt);

// Multidirectional (numpy) broadcasting of shapes. Errors name the node.
Shape broadcast_shapes(const KernelContext& ctx, const Shape& a, const Shape& b);

// Strides (in elements) for reading a tensor of shape `in` broadcast to `out` (rank of out;
// broadcast dims get stride 0).
std::vector<int64_t> broadcast_strides(const Shape& in, const Shape& out);

// Iterates over every index of `out`, keeping a linear offset into each input (given their
// broadcast strides). fn(out_index, offsets...).
template <size_t N, class Fn>
void for_each_broadcast(const Shape& out, const std::vector<int64_t> (&strides)[N], Fn&& fn) {
  int64_t total = shape_numel(out);
  if (total == 0) return;
  int rank = int(out.size());
  std::vector<int64_t> idx(size_t(rank), 0);
  int64_t off[N] = {};
  for (int64_t i = 0; i < total; ++i) {
    fn(i, off);
    for (int d = rank - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < out[size_t(d)]) {
        for (size_t k = 0; k < N; ++k) off[k] += strides[k][size_t(d)];
        break;
      }
      for (size_t k = 0; k < N; ++k) off[k] -= strides[k][size_t(d)] * (out[size_t(d)] - 1);
      idx[size_t(d)] = 0;
    }
  }
}

// Axis in [-rank, rank) -> [0, rank). Error names the node.
int normalize_axis(const KernelContext& ctx, int64_t axis, int rank);
int normalize_axis(const Node& node, int64_t axis, int rank);

// An int64 attribute holds a data type basalt knows (an ONNX TensorProto.DataType value): range-
// checked before it narrows to dtype_is_known's int32, so 2^32 + 1 is not taken for float (1).
inline bool dtype_attr_known(int64_t v) { return v >= INT32_MIN && v <= INT32_MAX && dtype_is_known(int32_t(v)); }

// Row-major strides of a shape.
std::vector<int64_t> shape_strides(const Shape& s);

// Convert any float-like tensor to float32 and back (float16, bfloat16, double, float).
Tensor to_float32(const Tensor& t);
Tensor from_float32(const Tensor& t, DType dt);

// Inference BatchNormalization's parameters folded into a per-channel scale and shift:
// s[c] = scale / sqrt(var + eps), t[c] = B - mean * s (double), as floats; s and t get
// max(C, padded_to) entries, 0 past C (blocked tensors pad channels to whole blocks).
inline void bn_fold(const std::vector<double>& sc, const std::vector<double>& bi, const std::vector<double>& mean,
                    const std::vector<double>& var, float eps, std::vector<float>& s, std::vector<float>& t,
                    size_t padded_to = 0) {
  const size_t C = sc.size();
  s.assign(C > padded_to ? C : padded_to, 0.f);
  t.assign(s.size(), 0.f);
  for (size_t c = 0; c < C; ++c) {
    double inv = 1.0 / std::sqrt(var[c] + double(eps));
    s[c] = float(inv * sc[c]);
    t[c] = float(bi[c] - mean[c] * inv * sc[c]);
  }
}

// double -> integer without UB for out-of-range values (saturates; NaN -> 0).
template <class T>
T saturate_cast(double v) {
  if (std::isnan(v)) return T(0);
  if (v <= double(std::numeric_limits<T>::lowest())) return std::numeric_limits<T>::lowest();
  if (v >= double(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
  return T(v);
}

// Element access for the reference kernels that compute in double (signal, random, ml ops).
std::vector<double> read_doubles(const KernelContext& ctx, int input, const Tensor& t);  // float-like t
template <class T>
T cast_from_double(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) return T(float(v));
  else return static_cast<T>(v);
}
void write_doubles(const KernelContext& ctx, Tensor& y, const std::vector<double>& v);  // any numeric y
// A scalar (or one-element) input as int64 / double; InvalidArgument naming `what` otherwise.
int64_t scalar_int(const KernelContext& ctx, int input, const char* what);
double scalar_double(const KernelContext& ctx, int input, const char* what);
// A `dtype`-style attribute: absent -> dflt, else a known data type (InvalidModel otherwise).
DType dtype_attr(const Node& n, const char* name, DType dflt);

// The four float types kernels compute (through float32 or double): float, double, float16, bfloat16.
bool is_float_like(DType dt);
// Unsupported naming input `input` unless dt is float-like.
void require_float(const KernelContext& ctx, int input, DType dt);
// Any numeric tensor as doubles; and doubles written back into an allocated numeric tensor of the
// same count (integers: NaN -> 0, rounded toward zero and clamped to the type's range).
std::vector<double> to_dvec(const KernelContext& ctx, int input, const Tensor& t);
void from_dvec(Tensor& t, const std::vector<double>& v);

// Offsets of a reduction (Reduce*, LpNormalization, MeanVarianceNormalization): for each output
// element the offset of its first input element, and the offsets of the reduced elements from it.
struct ReducePlan {
  Shape out_shape;
  std::vector<int64_t> base;  // per output element: offset of its first input element
  std::vector<int64_t> roff;  // offsets of the reduced elements relative to base
};
ReducePlan make_plan(const Shape& in, const std::vector<bool>& reduced, bool keepdims);
// Every offset of an index space of these dims and strides, in row-major order.
std::vector<int64_t> enumerate_offsets(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides);

// Input `input` as C doubles (one per channel); InvalidArgument naming `what` otherwise.
std::vector<double> per_channel_param(const KernelContext& ctx, int input, int64_t C, const char* what);

// x rounded to the precision of float type t (float, float16, bfloat16; double and others as is).
double round_to(DType t, double x);
// The wider of two float types (for mixed-precision products); float16 vs bfloat16 gives float.
DType wider_float(DType a, DType b);

// The auto_pad attribute of conv and pool nodes, parsed in one place ("" counts as NOTSET);
// nullopt for a value the spec does not define.
enum class AutoPad { NotSet, SameUpper, SameLower, Valid };
std::optional<AutoPad> auto_pad_of(const Node& n);
inline bool is_same_pad(AutoPad a) { return a == AutoPad::SameUpper || a == AutoPad::SameLower; }

}  // namespace basalt
