// Reference kernels: activation ops (Relu, Sigmoid, Gelu, Clip, ...) and Cast / CastLike.
//
// Float activations compute through float for float/float16/bfloat16 and through double for
// double. Cast converts between every element type basalt stores, including the float8 family,
// float4e2m1 and the 4-/2-bit integers (stored unpacked, one element per byte).
#include "ops/common.hpp"

#include "kernels/eltwise.hpp"

#include <algorithm>
#include <cfloat>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <type_traits>

namespace basalt {

namespace {

// ------------------------------------------------------------------------------------------
// Elementwise helpers
// ------------------------------------------------------------------------------------------

// Applies f(C) -> C elementwise for float types (C = double for double, float otherwise).
// f is a generic lambda [](auto v) { ... } so it can be instantiated for both.
template <class F>
void unary_float(KernelContext& ctx, F f) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  bool ok = visit_float(x.dtype(), [&]<class T>() {
    using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const T* a = x.data<T>();
    T* b = y.data<T>();
    int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) b[i] = T(f(C(a[i])));
  });
  if (!ok) unsupported_dtype(ctx, 0, x.dtype());
}

// Applies f(double) -> double elementwise for every numeric type (result converted back to T
// with clamping for integers, which cannot overflow for the ops that use this).
template <class F>
void unary_numeric(KernelContext& ctx, F f) {
  const Tensor& x = ctx.input(0);
  Tensor& y = ctx.output(0, x.dtype(), x.shape());
  bool ok = visit_numeric(x.dtype(), [&]<class T>() {
    const T* a = x.data<T>();
    T* b = y.data<T>();
    int64_t n = x.numel();
    if constexpr (std::is_integral_v<T>) {
      for (int64_t i = 0; i < n; ++i) {
        double r = f(double(a[i]));
        if (std::isnan(r)) r = 0;
        r = std::clamp(r, double(std::numeric_limits<T>::lowest()), double(std::numeric_limits<T>::max()));
        // double(max) of 64-bit types rounds up to 2^63 / 2^64: keep the value inside range.
        if (r >= double(std::numeric_limits<T>::max())) b[i] = std::numeric_limits<T>::max();
        else b[i] = T(r);
      }
    } else {
      using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
      for (int64_t i = 0; i < n; ++i) b[i] = T(C(f(double(C(a[i])))));
    }
  });
  if (!ok) unsupported_dtype(ctx, 0, x.dtype());
}

// float32 inputs go to the vectorized kernel (kernels/eltwise.hpp); returns false for other
// dtypes, which take the reference loop.
bool fast_unary(KernelContext& ctx, kernels::UnaryOp op, kernels::UnaryParams p = {}) {
  const Tensor& x = ctx.input(0);
  if (x.dtype() != DType::Float) return false;
  Tensor& y = ctx.output_uninit(0, DType::Float, x.shape());
  kernels::unary_f32(ctx.pool(), op, p, x.data<float>(), y.data<float>(), x.numel());
  return true;
}

template <class C>
C sigmoid_of(C v) {
  if (v >= 0) return C(1) / (C(1) + std::exp(-v));
  C e = std::exp(v);
  return e / (C(1) + e);
}

template <class C>
C softplus_of(C v) {
  // log(1 + exp(v)) without overflow.
  if (v > 0) return v + std::log1p(std::exp(-v));
  return std::log1p(std::exp(v));
}

// Registers the same factory for each listed opset version.
void add_versions(OpRegistry& r, const std::string& op, std::initializer_list<int> versions, const KernelFactory& f) {
  for (int v : versions) r.add(op, v, f);
}

// ------------------------------------------------------------------------------------------
// Small-float formats (float8 family, float4e2m1, float8e8m0)
// ------------------------------------------------------------------------------------------

struct MiniFloat {
  int mant_bits;     // explicit mantissa bits
  int exp_bits;      // exponent bits
  int bias;          // exponent bias
  bool has_inf;      // E5M2: exponent all-ones, mantissa 0 is infinity
  bool uz;           // FNUZ: 0x80 is the only NaN, no negative zero
  bool has_nan;      // float4e2m1 has no NaN
  uint8_t max_code;  // largest finite magnitude code (without sign)
  int sign_shift;    // bit of the sign (7 for float8, 3 for float4)
};

constexpr MiniFloat kE4M3FN{3, 4, 7, false, false, true, 0x7E, 7};
constexpr MiniFloat kE4M3FNUZ{3, 4, 8, false, true, true, 0x7F, 7};
constexpr MiniFloat kE5M2{2, 5, 15, true, false, true, 0x7B, 7};
constexpr MiniFloat kE5M2FNUZ{2, 5, 16, false, true, true, 0x7F, 7};
constexpr MiniFloat kE2M1{1, 2, 1, false, false, false, 0x7, 3};

const MiniFloat* minifloat_format(DType dt) {
  switch (dt) {
    case DType::Float8E4M3FN: return &kE4M3FN;
    case DType::Float8E4M3FNUZ: return &kE4M3FNUZ;
    case DType::Float8E5M2: return &kE5M2;
    case DType::Float8E5M2FNUZ: return &kE5M2FNUZ;
    case DType::Float4E2M1: return &kE2M1;
    default: return nullptr;
  }
}

// Decode a small-float bit pattern to double.
double minifloat_to_double(const MiniFloat& f, uint8_t code) {
  uint8_t sign_mask = uint8_t(1u << f.sign_shift);
  uint8_t mag_mask = uint8_t(sign_mask - 1);
  code &= uint8_t(sign_mask | mag_mask);
  bool neg = (code & sign_mask) != 0;
  uint8_t mag = code & mag_mask;
  if (f.uz && code == sign_mask) return std::numeric_limits<double>::quiet_NaN();
  int e = mag >> f.mant_bits;
  int m = mag & ((1 << f.mant_bits) - 1);
  int emax_field = (1 << f.exp_bits) - 1;
  if (!f.uz && f.has_nan) {
    if (f.has_inf) {
      if (e == emax_field) {
        if (m == 0) return neg ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
        return std::numeric_limits<double>::quiet_NaN();
      }
    } else if (mag == mag_mask) {
      return std::numeric_limits<double>::quiet_NaN();
    }
  }
  double v;
  if (e == 0) v = std::ldexp(double(m), 1 - f.bias - f.mant_bits);
  else v = std::ldexp(double(m + (1 << f.mant_bits)), e - f.bias - f.mant_bits);
  return neg ? -v : v;
}

// Encode a double to a small-float bit pattern, rounding to nearest even. With `saturate`,
// out-of-range values (and infinities) become the largest finite value of that sign;
// without it they become infinity (E5M2) or NaN.
uint8_t double_to_minifloat(const MiniFloat& f, double x, bool saturate) {
  uint8_t sign = std::signbit(x) ? uint8_t(1u << f.sign_shift) : uint8_t(0);
  // NaN: 0x80 for FNUZ, S.1111.111 for E4M3FN, S.11111.10 for E5M2 (a quiet NaN).
  uint8_t nan_code = f.uz ? uint8_t(0x80) : f.has_inf ? uint8_t(sign | 0x7E) : uint8_t(sign | ((1u << f.sign_shift) - 1));
  if (std::isnan(x)) {
    if (!f.has_nan) return 0x8;  // float4e2m1 has no NaN: ONNX maps it to 0x8 (negative zero)
    return nan_code;
  }
  auto overflow = [&]() -> uint8_t {
    if (saturate || !f.has_nan) return uint8_t(sign | f.max_code);
    if (f.has_inf) return uint8_t(sign | (f.max_code + 1));
    return nan_code;
  };
  double a = std::fabs(x);
  if (std::isinf(a)) return overflow();
  int emin = 1 - f.bias;  // exponent of the smallest normal
  uint32_t code;
  if (a < std::ldexp(1.0, emin)) {
    // subnormal range: multiples of 2^(emin - mant_bits); rounding may reach the smallest normal
    double q = std::nearbyint(std::ldexp(a, f.mant_bits - emin));
    code = uint32_t(q);
  } else {
    int k;
    std::frexp(a, &k);  // a = fr * 2^k, fr in [0.5, 1)
    int e = k - 1;
    double q = std::nearbyint(std::ldexp(a, f.mant_bits - e));  // in [2^M, 2^(M+1)]
    if (q >= double(2u << f.mant_bits)) {
      ++e;
      q = double(1u << f.mant_bits);
    }
    int field = e + f.bias;
    if (field >= (1 << f.exp_bits)) return overflow();
    code = (uint32_t(field) << f.mant_bits) | (uint32_t(q) - (1u << f.mant_bits));
  }
  if (code > f.max_code) return overflow();
  if (code == 0 && f.uz) return 0;  // no negative zero
  return uint8_t(sign | code);
}

// float8e8m0: an unsigned power of two 2^(code - 127); 0xFF is NaN.
enum class RoundMode { Up, Down, Nearest };

double e8m0_to_double(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<double>::quiet_NaN();
  return std::ldexp(1.0, int(code) - 127);
}

uint8_t double_to_e8m0(double x, bool saturate, RoundMode mode) {
  if (std::isnan(x)) return 0xFF;
  double a = std::fabs(x);
  if (std::isinf(a)) return saturate ? 0xFE : 0xFF;
  if (a == 0) return 0;
  int k;
  double fr = std::frexp(a, &k);  // a = fr * 2^k, fr in [0.5, 1): a = (2 fr) * 2^(k-1)
  int e = k - 1;
  double m = 2 * fr;  // in [1, 2)
  if (m > 1) {
    if (mode == RoundMode::Up) ++e;
    else if (mode == RoundMode::Nearest && m >= 1.5) ++e;
  }
  int field = e + 127;
  if (field < 0) return 0;
  if (field > 254) return saturate ? 0xFE : 0xFF;
  return uint8_t(field);
}

// ------------------------------------------------------------------------------------------
// Cast
// ------------------------------------------------------------------------------------------

bool is_small_int(DType dt) { return dt == DType::Int4 || dt == DType::Uint4 || dt == DType::Int2 || dt == DType::Uint2; }

// Shortest decimal digits that round-trip through type T. Returns digits (no dot) and the
// decimal exponent of the first digit.
template <class T>
void shortest_digits(double v, std::string& digits, int& exp10) {
  char buf[64];
  for (int p = 1; p <= 17; ++p) {
    std::snprintf(buf, sizeof buf, "%.*e", p - 1, v);
    double back = std::strtod(buf, nullptr);
    bool same;
    if constexpr (std::is_same_v<T, double>) same = back == v;
    else same = float(T(float(back))) == float(v);
    if (same || p == 17) break;
  }
  std::string s(buf);
  size_t epos = s.find('e');
  std::string mant = s.substr(0, epos);
  exp10 = std::atoi(s.c_str() + epos + 1);
  digits.clear();
  for (char c : mant)
    if (c >= '0' && c <= '9') digits += c;
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
}

// Formats like numpy's str() of a scalar: positional for 1e-4 <= |v| < 1e16, otherwise
// scientific ("1e-05", "1.5e+16"); "nan", "inf", "-inf".
template <class T>
std::string format_float(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v < 0 ? "-inf" : "inf";
  std::string out = std::signbit(v) ? "-" : "";
  double a = std::fabs(v);
  if (a == 0) return out + "0.0";
  std::string d;
  int e;
  shortest_digits<T>(a, d, e);
  if (a >= 1e-4 && a < 1e16) {
    if (e >= 0) {
      std::string ip = d.substr(0, std::min(d.size(), size_t(e + 1)));
      while (ip.size() < size_t(e + 1)) ip += '0';
      std::string fp = d.size() > size_t(e + 1) ? d.substr(size_t(e + 1)) : "0";
      return out + ip + "." + fp;
    }
    return out + "0." + std::string(size_t(-e - 1), '0') + d;
  }
  out += d.substr(0, 1);
  if (d.size() > 1) out += "." + d.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", e < 0 ? '-' : '+', std::abs(e));
  return out + eb;
}

// Float -> integer, truncating toward zero. In range of int64 the result wraps to T like
// numpy/C on x86; NaN gives 0 and values beyond int64 saturate (never UB).
template <class T>
T float_to_int(double v) {
  if (std::isnan(v)) return T(0);
  double t = std::trunc(v);
  if constexpr (std::is_same_v<T, uint64_t>) {
    if (t >= 18446744073709551616.0) return std::numeric_limits<uint64_t>::max();
    if (t >= 9223372036854775808.0) return uint64_t(t);
  }
  if (t >= 9223372036854775808.0) return T(std::numeric_limits<int64_t>::max());
  if (t < -9223372036854775808.0) return T(std::numeric_limits<int64_t>::min());
  return T(int64_t(t));
}

// The value of one source element, as one of a few canonical kinds.
struct Elem {
  enum Kind { Int, UInt, Float, Str } kind;
  int64_t i = 0;
  uint64_t u = 0;
  double d = 0;
  const std::string* s = nullptr;
  double as_double() const { return kind == Int ? double(i) : kind == UInt ? double(u) : d; }
};

// Calls fn(index, Elem) for each element of t.
template <class Fn>
bool for_each_elem(const Tensor& t, Fn&& fn) {
  DType dt = t.dtype();
  int64_t n = t.numel();
  if (dt == DType::String) {
    const std::string* p = t.data<std::string>();
    for (int64_t k = 0; k < n; ++k) fn(k, Elem{Elem::Str, 0, 0, 0, &p[k]});
    return true;
  }
  if (const MiniFloat* f = minifloat_format(dt)) {
    const uint8_t* p = t.data<uint8_t>();
    for (int64_t k = 0; k < n; ++k) fn(k, Elem{Elem::Float, 0, 0, minifloat_to_double(*f, p[k]), nullptr});
    return true;
  }
  if (dt == DType::Float8E8M0) {
    const uint8_t* p = t.data<uint8_t>();
    for (int64_t k = 0; k < n; ++k) fn(k, Elem{Elem::Float, 0, 0, e8m0_to_double(p[k]), nullptr});
    return true;
  }
  if (dt == DType::Int4 || dt == DType::Int2) {
    const int8_t* p = t.data<int8_t>();
    for (int64_t k = 0; k < n; ++k) fn(k, Elem{Elem::Int, p[k], 0, 0, nullptr});
    return true;
  }
  if (dt == DType::Uint4 || dt == DType::Uint2) {
    const uint8_t* p = t.data<uint8_t>();
    for (int64_t k = 0; k < n; ++k) fn(k, Elem{Elem::Int, p[k], 0, 0, nullptr});
    return true;
  }
  return visit_numeric_bool(dt, [&]<class T>() {
    const T* p = t.data<T>();
    for (int64_t k = 0; k < n; ++k) {
      if constexpr (std::is_same_v<T, uint64_t>) fn(k, Elem{Elem::UInt, 0, p[k], 0, nullptr});
      else if constexpr (std::is_integral_v<T>) fn(k, Elem{Elem::Int, int64_t(p[k]), 0, 0, nullptr});
      else fn(k, Elem{Elem::Float, 0, 0, double(p[k]), nullptr});
    }
  });
}

// Parses a string element to a number (Elem of kind Int/UInt/Float).
Elem parse_number(const KernelContext& ctx, const std::string& s, DType to) {
  std::string t = s;
  size_t b = t.find_first_not_of(" \t\n\r");
  size_t e = t.find_last_not_of(" \t\n\r");
  t = b == std::string::npos ? std::string() : t.substr(b, e - b + 1);
  if (to == DType::Bool) {
    std::string low = t;
    for (char& c : low) c = char(std::tolower(static_cast<unsigned char>(c)));
    if (low == "true") return Elem{Elem::Int, 1, 0, 0, nullptr};
    if (low == "false") return Elem{Elem::Int, 0, 0, 0, nullptr};
  }
  if (!t.empty()) {
    bool integral = dtype_is_integer(to) || to == DType::Bool;
    if (integral) {
      const char* first = t.data() + (t[0] == '+' ? 1 : 0);
      const char* last = t.data() + t.size();
      if (t[0] != '-' && to == DType::Uint64) {
        uint64_t u;
        auto r = std::from_chars(first, last, u);
        if (r.ec == std::errc() && r.ptr == last) return Elem{Elem::UInt, 0, u, 0, nullptr};
      } else {
        int64_t i;
        auto r = std::from_chars(first, last, i);
        if (r.ec == std::errc() && r.ptr == last) return Elem{Elem::Int, i, 0, 0, nullptr};
      }
    }
    char* end = nullptr;
    double d = std::strtod(t.c_str(), &end);
    if (end && *end == '\0') return Elem{Elem::Float, 0, 0, d, nullptr};
  }
  ctx.fail(ErrorCode::InvalidArgument, "cannot convert string '" + s + "' to " + dtype_name(to));
}

struct CastOptions {
  bool saturate = true;
  RoundMode round_mode = RoundMode::Up;
};

// Writes element v (not a string) into slot k of a tensor of dtype `to`.
template <class T>
void store_number(T* out, int64_t k, const Elem& v) {
  if constexpr (std::is_same_v<T, bool>) {
    out[k] = v.kind == Elem::Int ? v.i != 0 : v.kind == Elem::UInt ? v.u != 0 : v.d != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (v.kind == Elem::Int) out[k] = T(v.i);
    else if (v.kind == Elem::UInt) out[k] = T(v.u);
    else out[k] = float_to_int<T>(v.d);
  } else if constexpr (std::is_same_v<T, double>) {
    out[k] = v.as_double();
  } else if constexpr (std::is_same_v<T, float>) {
    out[k] = v.kind == Elem::Int ? float(v.i) : v.kind == Elem::UInt ? float(v.u) : float(v.d);
  } else {  // float16 / bfloat16
    float f = v.kind == Elem::Int ? float(v.i) : v.kind == Elem::UInt ? float(v.u) : float(v.d);
    out[k] = T(f);
  }
}

std::string format_elem(const Elem& v, DType from) {
  if (v.kind == Elem::Int) {
    if (from == DType::Bool) return v.i ? "True" : "False";
    return std::to_string(v.i);
  }
  if (v.kind == Elem::UInt) return std::to_string(v.u);
  switch (from) {
    case DType::Double: return format_float<double>(v.d);
    case DType::Float16: return format_float<float16>(v.d);
    case DType::BFloat16: return format_float<bfloat16>(v.d);
    default: return format_float<float>(v.d);  // float and smaller formats
  }
}

Tensor cast_tensor(const KernelContext& ctx, const Tensor& x, DType to, const CastOptions& opt) {
  DType from = x.dtype();
  if (from == to) return x;  // tensors are immutable: pass through
  Tensor y(to, x.shape());
  bool ok;
  if (to == DType::String) {
    std::string* out = y.data<std::string>();
    ok = for_each_elem(x, [&](int64_t k, const Elem& v) { out[k] = v.kind == Elem::Str ? *v.s : format_elem(v, from); });
  } else {
    auto num = [&](const Elem& v) -> Elem { return v.kind == Elem::Str ? parse_number(ctx, *v.s, to) : v; };
    if (const MiniFloat* f = minifloat_format(to)) {
      uint8_t* out = y.data<uint8_t>();
      const MiniFloat fmt = *f;
      ok = for_each_elem(x, [&](int64_t k, const Elem& v) { out[k] = double_to_minifloat(fmt, num(v).as_double(), opt.saturate); });
    } else if (to == DType::Float8E8M0) {
      uint8_t* out = y.data<uint8_t>();
      ok = for_each_elem(x, [&](int64_t k, const Elem& v) { out[k] = double_to_e8m0(num(v).as_double(), opt.saturate, opt.round_mode); });
    } else if (is_small_int(to)) {
      int bits = dtype_file_bits(to);
      uint64_t mask = (uint64_t(1) << bits) - 1, sign_bit = uint64_t(1) << (bits - 1);
      bool is_signed = to == DType::Int4 || to == DType::Int2;
      uint8_t* out = y.data<uint8_t>();
      ok = for_each_elem(x, [&](int64_t k, const Elem& e) {
        Elem v = num(e);
        // Like the wider integer casts: truncate toward zero, then keep the low bits (wraps).
        uint64_t r = v.kind == Elem::Int ? uint64_t(v.i) : v.kind == Elem::UInt ? v.u : uint64_t(float_to_int<int64_t>(v.d));
        r &= mask;
        if (is_signed && (r & sign_bit)) r |= ~mask;  // sign-extend
        out[k] = uint8_t(r);
      });
    } else {
      bool src_ok = true;
      ok = visit_numeric_bool(to, [&]<class T>() {
        T* out = y.data<T>();
        src_ok = for_each_elem(x, [&](int64_t k, const Elem& v) { store_number<T>(out, k, num(v)); });
      });
      if (!ok) ctx.fail(ErrorCode::Unsupported, std::string("cast to ") + dtype_name(to) + " is not supported");
      ok = src_ok;
    }
  }
  if (!ok) unsupported_dtype(ctx, 0, from);
  return y;
}

DType dtype_from_cast1_name(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  static const std::pair<const char*, DType> names[] = {
      {"FLOAT", DType::Float},   {"UINT8", DType::Uint8},     {"INT8", DType::Int8},       {"UINT16", DType::Uint16},
      {"INT16", DType::Int16},   {"INT32", DType::Int32},     {"INT64", DType::Int64},     {"STRING", DType::String},
      {"BOOL", DType::Bool},     {"FLOAT16", DType::Float16}, {"DOUBLE", DType::Double},   {"UINT32", DType::Uint32},
      {"UINT64", DType::Uint64}, {"BFLOAT16", DType::BFloat16}};
  for (auto& [n, d] : names)
    if (s == n) return d;
  return DType::Undefined;
}

CastOptions parse_cast_options(const Node& n) {
  CastOptions o;
  if (n.opset >= 19) o.saturate = n.attr_int("saturate", 1) != 0;
  std::string rm = n.attr_string("round_mode", "up");
  if (rm == "up") o.round_mode = RoundMode::Up;
  else if (rm == "down") o.round_mode = RoundMode::Down;
  else if (rm == "nearest") o.round_mode = RoundMode::Nearest;
  else n.fail(ErrorCode::InvalidModel, "attribute round_mode must be 'up', 'down' or 'nearest', got '" + rm + "'");
  return o;
}

bool castable(DType dt) {
  return dt != DType::Undefined && dt != DType::Complex64 && dt != DType::Complex128 && dtype_is_known(int32_t(dt));
}

// ------------------------------------------------------------------------------------------
// Clip
// ------------------------------------------------------------------------------------------

// Reads a scalar bound (min/max input) of Clip-11+, checking its type and size.
template <class T>
bool read_bound(KernelContext& ctx, int i, T& out) {
  if (!ctx.has_input(i)) return false;
  const Tensor& b = ctx.input(i);
  if (b.dtype() != ctx.input(0).dtype())
    ctx.fail(ErrorCode::InvalidArgument, std::string("input ") + std::to_string(i) + " has type " + dtype_name(b.dtype()) +
                                             ", expected " + dtype_name(ctx.input(0).dtype()) + " like input 0");
  if (b.numel() != 1)
    ctx.fail(ErrorCode::InvalidArgument, std::string("input ") + std::to_string(i) + " must be a scalar, got shape " + shape_str(b.shape()));
  out = b.data<T>()[0];
  return true;
}

}  // namespace

static void register_relu(OpRegistry& r) {
  // ---- Relu: max(0, x). Integer types since opset 14. ----
  add_versions(r, "Relu", {1, 6, 13, 14}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::Relu)) return;
      const Tensor& x = ctx.input(0);
      Tensor& y = ctx.output(0, x.dtype(), x.shape());
      bool ok = visit_numeric(x.dtype(), [&]<class T>() {
        const T* a = x.data<T>();
        T* b = y.data<T>();
        for (int64_t i = 0, n = x.numel(); i < n; ++i) {
          if constexpr (std::is_integral_v<T>) b[i] = a[i] > T(0) ? a[i] : T(0);
          else {
            float v = float(a[i]);
            b[i] = (std::isnan(v) || v > 0) ? a[i] : T(0.0f);
          }
        }
      });
      if (!ok) unsupported_dtype(ctx, 0, x.dtype());
    });
  });

  add_versions(r, "LeakyRelu", {1, 6, 16}, [](const Node& n) {
    float alpha = n.attr_float("alpha", 0.01f);
    return kernel([alpha](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::LeakyRelu, {alpha, 0})) return;
      unary_float(ctx, [alpha](auto v) { using C = decltype(v); return v < 0 ? C(alpha) * v : v; });
    });
  });
}

static void register_prelu(OpRegistry& r) {
  // ---- PRelu: slope broadcasts (unidirectionally) to X. ----
  add_versions(r, "PRelu", {1, 6, 7, 9, 16}, [](const Node& n) {
    // Before opset 7, a 1-D slope of size C applies per channel (axis 1), as PyTorch exported it.
    bool legacy = n.opset < 7;
    return kernel([legacy](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      Tensor s = ctx.input(1);
      if (legacy && s.rank() == 1 && x.rank() >= 2 && s.dim(0) == x.dim(1) && s.dim(0) != 1) {
        Shape ss(size_t(x.rank() - 1), 1);
        ss[0] = s.dim(0);
        s = s.reshaped(ss);
      }
      if (s.dtype() != x.dtype())
        ctx.fail(ErrorCode::InvalidArgument, std::string("slope type ") + dtype_name(s.dtype()) + " differs from input type " + dtype_name(x.dtype()));
      Shape out = broadcast_shapes(ctx, x.shape(), s.shape());
      if (out != x.shape())
        ctx.fail(ErrorCode::InvalidArgument, "slope shape " + shape_str(s.shape()) + " does not broadcast to input shape " + shape_str(x.shape()));
      Tensor& y = ctx.output(0, x.dtype(), out);
      std::vector<int64_t> st[2] = {broadcast_strides(x.shape(), out), broadcast_strides(s.shape(), out)};
      bool ok = visit_numeric(x.dtype(), [&]<class T>() {
        const T* a = x.data<T>();
        const T* sl = s.data<T>();
        T* b = y.data<T>();
        for_each_broadcast(out, st, [&](int64_t i, const int64_t* off) {
          if constexpr (std::is_integral_v<T>) {
            T v = a[off[0]];
            b[i] = v < T(0) ? T(v * sl[off[1]]) : v;
          } else {
            using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
            C v = C(a[off[0]]);
            b[i] = T(v < 0 ? C(sl[off[1]]) * v : v);
          }
        });
      });
      if (!ok) unsupported_dtype(ctx, 0, x.dtype());
    });
  });

  add_versions(r, "Sigmoid", {1, 6, 13}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::Sigmoid)) return;
      unary_float(ctx, [](auto v) { return sigmoid_of(v); });
    });
  });

  add_versions(r, "HardSigmoid", {1, 6, 22}, [](const Node& n) {
    float alpha = n.attr_float("alpha", 0.2f), beta = n.attr_float("beta", 0.5f);
    return kernel([alpha, beta](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::HardSigmoid, {alpha, beta})) return;
      unary_float(ctx, [=](auto v) {
        using C = decltype(v);
        return std::max(C(0), std::min(C(1), C(alpha) * v + C(beta)));
      });
    });
  });

  add_versions(r, "HardSwish", {14, 22}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::HardSwish)) return;
      unary_float(ctx, [](auto v) {
        using C = decltype(v);
        return v * std::max(C(0), std::min(C(1), v / C(6) + C(0.5)));
      });
    });
  });

  add_versions(r, "Tanh", {1, 6, 13}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::Tanh)) return;
      unary_float(ctx, [](auto v) { return std::tanh(v); });
    });
  });

  add_versions(r, "Elu", {1, 6, 22}, [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return kernel([alpha](KernelContext& ctx) {
      unary_float(ctx, [alpha](auto v) { using C = decltype(v); return v < 0 ? C(alpha) * std::expm1(v) : v; });
    });
  });

  add_versions(r, "Selu", {1, 6, 22}, [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.67326319217681884765625f);
    float gamma = n.attr_float("gamma", 1.05070102214813232421875f);
    return kernel([alpha, gamma](KernelContext& ctx) {
      unary_float(ctx, [=](auto v) {
        using C = decltype(v);
        return v > 0 ? C(gamma) * v : C(gamma) * (C(alpha) * std::exp(v) - C(alpha));
      });
    });
  });

  r.add("Celu", 12, [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    if (alpha == 0) n.fail(ErrorCode::InvalidModel, "attribute alpha must not be 0");
    return kernel([alpha](KernelContext& ctx) {
      unary_float(ctx, [alpha](auto v) {
        using C = decltype(v);
        return std::max(C(0), v) + std::min(C(0), C(alpha) * std::expm1(v / C(alpha)));
      });
    });
  });

  add_versions(r, "Softplus", {1, 22}, [](const Node&) {
    return kernel([](KernelContext& ctx) { unary_float(ctx, [](auto v) { return softplus_of(v); }); });
  });

  add_versions(r, "Softsign", {1, 22}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      unary_float(ctx, [](auto v) { using C = decltype(v); return v / (C(1) + std::fabs(v)); });
    });
  });

  add_versions(r, "ThresholdedRelu", {10, 22}, [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return kernel([alpha](KernelContext& ctx) {
      unary_float(ctx, [alpha](auto v) { using C = decltype(v); return v > C(alpha) ? v : C(0); });
    });
  });
}

static void register_shrink(OpRegistry& r) {
  // ---- Shrink: all numeric types. ----
  r.add("Shrink", 9, [](const Node& n) {
    double bias = n.attr_float("bias", 0.0f), lambd = n.attr_float("lambd", 0.5f);
    return kernel([bias, lambd](KernelContext& ctx) {
      unary_numeric(ctx, [=](double v) { return v < -lambd ? v + bias : v > lambd ? v - bias : 0.0; });
    });
  });

  r.add("Gelu", 20, [](const Node& n) {
    std::string approx = n.attr_string("approximate", "none");
    if (approx != "none" && approx != "tanh")
      n.fail(ErrorCode::InvalidModel, "attribute approximate must be 'none' or 'tanh', got '" + approx + "'");
    bool use_tanh = approx == "tanh";
    return kernel([use_tanh](KernelContext& ctx) {
      if (fast_unary(ctx, use_tanh ? kernels::UnaryOp::GeluTanh : kernels::UnaryOp::Gelu)) return;
      unary_float(ctx, [use_tanh](auto v) {
        using C = decltype(v);
        if (use_tanh) {
          C k = C(0.7978845608028654);  // sqrt(2/pi)
          return C(0.5) * v * (C(1) + std::tanh(k * (v + C(0.044715) * v * v * v)));
        }
        return C(0.5) * v * (C(1) + std::erf(v * C(0.7071067811865476)));
      });
    });
  });

  add_versions(r, "Mish", {18, 22}, [](const Node&) {
    return kernel([](KernelContext& ctx) { unary_float(ctx, [](auto v) { return v * std::tanh(softplus_of(v)); }); });
  });

  r.add("Swish", 24, [](const Node& n) {
    float alpha = n.attr_float("alpha", 1.0f);
    return kernel([alpha](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::Swish, {alpha, 0})) return;
      unary_float(ctx, [alpha](auto v) { using C = decltype(v); return v * sigmoid_of(C(alpha) * v); });
    });
  });
}

static void register_clip(OpRegistry& r) {
  // ---- Clip: attributes (1, 6) or optional scalar inputs (11+); min > max gives max. ----
  add_versions(r, "Clip", {1, 6}, [](const Node& n) {
    float lo = n.attr_float("min", -FLT_MAX), hi = n.attr_float("max", FLT_MAX);
    return kernel([lo, hi](KernelContext& ctx) {
      if (fast_unary(ctx, kernels::UnaryOp::Clip, {lo, hi})) return;
      unary_float(ctx, [=](auto v) { using C = decltype(v); return std::min(std::max(v, C(lo)), C(hi)); });
    });
  });
  add_versions(r, "Clip", {11, 12, 13}, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      bool ok = visit_numeric(x.dtype(), [&]<class T>() {
        T lo{}, hi{};
        bool has_lo = read_bound<T>(ctx, 1, lo), has_hi = read_bound<T>(ctx, 2, hi);
        if constexpr (std::is_same_v<T, float>) {
          // Same order as the loop below: max with lo first, then min with hi (lo > hi gives hi).
          if (fast_unary(ctx, kernels::UnaryOp::Clip,
                         {has_lo ? lo : -std::numeric_limits<float>::infinity(),
                          has_hi ? hi : std::numeric_limits<float>::infinity()}))
            return;
        }
        Tensor& y = ctx.output(0, x.dtype(), x.shape());
        const T* a = x.data<T>();
        T* b = y.data<T>();
        if constexpr (std::is_integral_v<T>) {
          for (int64_t i = 0, n = x.numel(); i < n; ++i) {
            T v = a[i];
            if (has_lo && v < lo) v = lo;
            if (has_hi && v > hi) v = hi;
            b[i] = v;
          }
        } else {
          using C = std::conditional_t<std::is_same_v<T, double>, double, float>;
          C l = C(lo), h = C(hi);
          for (int64_t i = 0, n = x.numel(); i < n; ++i) {
            C v = C(a[i]);
            if (has_lo && v < l) v = l;
            if (has_hi && v > h) v = h;
            b[i] = T(v);
          }
        }
      });
      if (!ok) unsupported_dtype(ctx, 0, x.dtype());
    });
  });
}

static void register_cast_castlike(OpRegistry& r) {
  // ---- Cast / CastLike ----
  add_versions(r, "Cast", {1, 6, 9, 13, 19, 21, 23, 24, 25}, [](const Node& n) {
    const Attribute* a = n.find_attr("to");
    if (!a) n.fail(ErrorCode::InvalidModel, "required attribute 'to' is missing");
    DType to;
    if (a->type == Attribute::Type::String) {
      to = dtype_from_cast1_name(a->s);
      if (to == DType::Undefined) n.fail(ErrorCode::InvalidModel, "attribute 'to' names an unknown type '" + a->s + "'");
    } else {
      int64_t v = n.attr_int("to");
      if (v < 0 || v > INT32_MAX || !castable(DType(int32_t(v))))
        n.fail(ErrorCode::Unsupported, "attribute 'to' = " + std::to_string(v) + " is not a supported element type");
      to = DType(int32_t(v));
    }
    CastOptions opt = parse_cast_options(n);
    return kernel([to, opt](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      ctx.set_output(0, Value(cast_tensor(ctx, x, to, opt)));
    });
  });

  add_versions(r, "CastLike", {15, 19, 21, 23, 24, 25}, [](const Node& n) {
    CastOptions opt = parse_cast_options(n);
    return kernel([opt](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType to = ctx.input(1).dtype();
      if (!castable(to)) unsupported_dtype(ctx, 1, to);
      ctx.set_output(0, Value(cast_tensor(ctx, x, to, opt)));
    });
  });
}

void register_activation_ops(OpRegistry& r) {
  for (auto family : {register_relu, register_prelu, register_shrink, register_clip, register_cast_castlike}) family(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Cast").infer_symbolic(shapes::cast).alias(Alias::MaybeView);
  r.def("CastLike").infer_symbolic(shapes::cast_like).alias(Alias::MaybeView);
  for (const char* op : {"Celu", "Elu", "Mish", "Selu", "Shrink", "Softplus", "Softsign", "ThresholdedRelu"}) r.def(op).infer_symbolic(shapes::same);
  r.def("basalt", "Gelu").infer_symbolic(shapes::same);
  for (const char* op : {"Clip", "Gelu", "HardSigmoid", "HardSwish", "LeakyRelu", "Relu", "Sigmoid", "Swish", "Tanh"}) r.def(op).infer_symbolic(shapes::same).in_place(in_place::unary_f32);
  r.def("PRelu").infer_symbolic(shapes::broadcast);
}

}  // namespace basalt
