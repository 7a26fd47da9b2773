// Reference kernels: signal ops (DFT, STFT, windows, MelWeightMatrix), string ops
// (StringNormalizer, TfIdfVectorizer, StringConcat, StringSplit, RegexFullMatch) and random ops
// (RandomUniform[Like], RandomNormal[Like], Bernoulli, Multinomial).
#include "ops/common.hpp"

#include <algorithm>
#include <limits>
#include <cmath>
#include <cstring>
#include <map>
#include <numbers>
#include <random>
#include <regex>

namespace basalt {

namespace {

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

// All elements of a float tensor (float/double/float16/bfloat16) as double.
std::vector<double> read_doubles(const KernelContext& ctx, int input, const Tensor& t) {
  std::vector<double> v(size_t(t.numel()));
  if (!visit_float(t.dtype(), [&]<class T>() {
        const T* p = t.data<T>();
        for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<double>(p[i]);
      }))
    unsupported_dtype(ctx, input, t.dtype());
  return v;
}

// Writes doubles into a tensor of any numeric dtype.
template <class T>
T cast_from_double(double v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) return T(float(v));
  else return static_cast<T>(v);
}

void write_doubles(const KernelContext& ctx, Tensor& y, const std::vector<double>& v) {
  if (!visit_numeric(y.dtype(), [&]<class T>() {
        T* p = y.data<T>();
        for (size_t i = 0; i < v.size(); ++i) p[i] = cast_from_double<T>(v[i]);
      }))
    ctx.fail(ErrorCode::Unsupported, std::string("output type ") + dtype_name(y.dtype()) + " is not supported");
}

// A scalar (or one-element) input as int64.
int64_t scalar_int(const KernelContext& ctx, int input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be a scalar, got shape " + shape_str(t.shape()));
  if (dtype_is_float(t.dtype())) return int64_t(t.get_double(0));
  return t.get_int(0);
}
double scalar_double(const KernelContext& ctx, int input, const char* what) {
  const Tensor& t = ctx.input(input);
  if (t.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " must be a scalar, got shape " + shape_str(t.shape()));
  return t.get_double(0);
}

DType dtype_attr(const Node& n, const char* name, DType dflt) {
  if (!n.has_attr(name)) return dflt;
  int64_t v = n.attr_int(name);
  if (v <= 0 || !dtype_attr_known(v)) n.fail(ErrorCode::InvalidModel, std::string("attribute '") + name + "' is not a valid data type: " + std::to_string(v));
  return DType(int32_t(v));
}

constexpr double kPi = std::numbers::pi;

// ---------------------------------------------------------------------------------------------
// DFT
// ---------------------------------------------------------------------------------------------

// One-dimensional complex DFT of length N with precomputed twiddles. sign = -1 forward, +1 inverse
// (unscaled). Power-of-two lengths use an iterative radix-2 FFT; other lengths the direct sum.
struct Dft1d {
  int64_t N;
  std::vector<double> twc, tws;
  bool pow2;
  explicit Dft1d(int64_t n) : N(n), twc(static_cast<size_t>(n)), tws(static_cast<size_t>(n)), pow2(n >= 2 && (n & (n - 1)) == 0) {
    for (int64_t k = 0; k < N; ++k) {
      double a = 2.0 * kPi * double(k) / double(N);
      twc[size_t(k)] = std::cos(a);
      tws[size_t(k)] = std::sin(a);
    }
  }
  // Writes the first n_out bins into ore/oim (each sized >= N for the FFT path).
  void run(const std::vector<double>& re, const std::vector<double>& im, double sign, int64_t n_out, std::vector<double>& ore,
           std::vector<double>& oim) const {
    if (pow2) {
      int bits = 0;
      while ((int64_t(1) << bits) < N) ++bits;
      for (int64_t i = 0; i < N; ++i) {
        int64_t r = 0;
        for (int b = 0; b < bits; ++b)
          if (i & (int64_t(1) << b)) r |= int64_t(1) << (bits - 1 - b);
        ore[size_t(r)] = re[size_t(i)];
        oim[size_t(r)] = im[size_t(i)];
      }
      for (int64_t len = 2; len <= N; len <<= 1) {
        int64_t half = len / 2, step = N / len;
        for (int64_t start = 0; start < N; start += len) {
          for (int64_t j = 0; j < half; ++j) {
            double c = twc[size_t(j * step)], sn = sign * tws[size_t(j * step)];
            size_t a = size_t(start + j), b = size_t(start + j + half);
            double br = ore[b] * c - oim[b] * sn, bi = ore[b] * sn + oim[b] * c;
            ore[b] = ore[a] - br;
            oim[b] = oim[a] - bi;
            ore[a] += br;
            oim[a] += bi;
          }
        }
      }
      return;
    }
    for (int64_t k = 0; k < n_out; ++k) {
      double sr = 0, si = 0;
      for (int64_t n = 0; n < N; ++n) {
        size_t idx = size_t((k * n) % N);
        double c = twc[idx], sn = sign * tws[idx];
        sr += re[size_t(n)] * c - im[size_t(n)] * sn;
        si += re[size_t(n)] * sn + im[size_t(n)] * c;
      }
      ore[size_t(k)] = sr;
      oim[size_t(k)] = si;
    }
  }
};

// x: [..., n, ..., C] with C = 1 (real) or 2 (complex). Transform along `axis`.
void run_dft(KernelContext& ctx, const Tensor& x, int64_t axis_raw, int64_t dft_len, bool inverse, bool onesided) {
  int r = x.rank();
  if (r < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2 (last dimension is 1 for real or 2 for complex), got " + shape_str(x.shape()));
  int64_t C = x.dim(r - 1);
  if (C != 1 && C != 2) ctx.fail(ErrorCode::InvalidArgument, "last dimension of the input must be 1 (real) or 2 (complex), got " + shape_str(x.shape()));
  int64_t axis = axis_raw < 0 ? axis_raw + r : axis_raw;
  if (axis < 0 || axis > r - 2)
    ctx.fail(ErrorCode::InvalidArgument, "axis " + std::to_string(axis_raw) + " is out of range for input of rank " + std::to_string(r) + " (the last dimension cannot be transformed)");
  const Shape& s = x.shape();
  int64_t n_in = s[size_t(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= s[size_t(d)];
  for (int64_t d = axis + 1; d < r - 1; ++d) inner *= s[size_t(d)];
  bool irfft = inverse && onesided;
  int64_t N;
  if (dft_len >= 0) {
    if (dft_len < 1) ctx.fail(ErrorCode::InvalidArgument, "dft_length must be >= 1, got " + std::to_string(dft_len));
    N = dft_len;
  } else {
    N = irfft ? 2 * (n_in - 1) : n_in;
  }
  if (N < 1) ctx.fail(ErrorCode::InvalidArgument, "signal length along axis " + std::to_string(axis) + " gives an empty transform");
  int64_t n_out = irfft ? N : (onesided ? N / 2 + 1 : N);
  int64_t C_out = irfft ? 1 : 2;
  Shape os = s;
  os[size_t(axis)] = n_out;
  os[size_t(r - 1)] = C_out;

  std::vector<double> xv = read_doubles(ctx, 0, x);
  std::vector<double> out(size_t(shape_numel(os)), 0.0);
  Dft1d dft(N);
  std::vector<double> ore(static_cast<size_t>(N)), oim(static_cast<size_t>(N));
  double sign = inverse ? 1.0 : -1.0;
  double scale = inverse ? 1.0 / double(N) : 1.0;
  std::vector<double> re(static_cast<size_t>(N)), im(static_cast<size_t>(N));
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      std::fill(re.begin(), re.end(), 0.0);
      std::fill(im.begin(), im.end(), 0.0);
      auto at = [&](int64_t n) { return ((o * n_in + n) * inner + i) * C; };
      if (irfft) {
        int64_t m = std::min(n_in, N / 2 + 1);
        for (int64_t k = 0; k < m; ++k) {
          re[size_t(k)] = xv[size_t(at(k))];
          im[size_t(k)] = C == 2 ? xv[size_t(at(k) + 1)] : 0.0;
        }
        for (int64_t k = N / 2 + 1; k < N; ++k) {
          int64_t src = N - k;
          if (src < m) {
            re[size_t(k)] = re[size_t(src)];
            im[size_t(k)] = -im[size_t(src)];
          }
        }
      } else {
        int64_t m = std::min(n_in, N);
        for (int64_t n = 0; n < m; ++n) {
          re[size_t(n)] = xv[size_t(at(n))];
          im[size_t(n)] = C == 2 ? xv[size_t(at(n) + 1)] : 0.0;
        }
      }
      dft.run(re, im, sign, n_out, ore, oim);
      for (int64_t k = 0; k < n_out; ++k) {
        double sr = ore[size_t(k)], si = oim[size_t(k)];
        size_t oi = size_t(((o * n_out + k) * inner + i) * C_out);
        out[oi] = sr * scale;
        if (C_out == 2) out[oi + 1] = si * scale;
      }
    }
  }
  Tensor& y = ctx.output(0, x.dtype(), os);
  write_doubles(ctx, y, out);
}

// ---------------------------------------------------------------------------------------------
// Windows
// ---------------------------------------------------------------------------------------------

enum class WindowKind { Hann, Hamming, Blackman };

void register_window(OpRegistry& r, const char* name, WindowKind kind) {
  r.add(name, 17, [kind](const Node& n) {
    DType out_dt = dtype_attr(n, "output_datatype", DType::Float);
    bool periodic = n.attr_int("periodic", 1) != 0;
    if (out_dt == DType::String || out_dt == DType::Bool || out_dt == DType::Complex64 || out_dt == DType::Complex128)
      n.fail(ErrorCode::Unsupported, std::string("output_datatype ") + dtype_name(out_dt) + " is not supported");
    return kernel([kind, out_dt, periodic](KernelContext& ctx) {
      int64_t size = scalar_int(ctx, 0, "size");
      if (size < 0) ctx.fail(ErrorCode::InvalidArgument, "size must be >= 0, got " + std::to_string(size));
      std::vector<double> w(static_cast<size_t>(size));
      double denom = periodic ? double(size) : double(size - 1);
      for (int64_t i = 0; i < size; ++i) {
        double a = denom > 0 ? 2.0 * kPi * double(i) / denom : 0.0;
        switch (kind) {
          case WindowKind::Hann: w[size_t(i)] = 0.5 - 0.5 * std::cos(a); break;
          case WindowKind::Hamming: {
            double a0 = 25.0 / 46.0;
            w[size_t(i)] = a0 - (1.0 - a0) * std::cos(a);
            break;
          }
          case WindowKind::Blackman: w[size_t(i)] = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a); break;
        }
      }
      Tensor& y = ctx.output(0, out_dt, {size});
      write_doubles(ctx, y, w);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Strings
// ---------------------------------------------------------------------------------------------

// Decode one UTF-8 code point at s[i]; returns the byte length (1 for invalid bytes, cp = byte).
size_t utf8_decode(const std::string& s, size_t i, uint32_t& cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  auto cont = [&](size_t k) { return i + k < s.size() && (static_cast<unsigned char>(s[i + k]) & 0xC0) == 0x80; };
  auto cb = [&](size_t k) { return uint32_t(static_cast<unsigned char>(s[i + k]) & 0x3F); };
  if (c < 0x80) { cp = c; return 1; }
  if ((c & 0xE0) == 0xC0 && cont(1)) { cp = (uint32_t(c & 0x1F) << 6) | cb(1); return 2; }
  if ((c & 0xF0) == 0xE0 && cont(1) && cont(2)) { cp = (uint32_t(c & 0x0F) << 12) | (cb(1) << 6) | cb(2); return 3; }
  if ((c & 0xF8) == 0xF0 && cont(1) && cont(2) && cont(3)) {
    cp = (uint32_t(c & 0x07) << 18) | (cb(1) << 12) | (cb(2) << 6) | cb(3);
    return 4;
  }
  cp = 0xFFFFFFFFu;  // invalid: copied through as a raw byte
  return 1;
}

void utf8_append(std::string& out, uint32_t cp) {
  if (cp < 0x80) out += char(cp);
  else if (cp < 0x800) { out += char(0xC0 | (cp >> 6)); out += char(0x80 | (cp & 0x3F)); }
  else if (cp < 0x10000) { out += char(0xE0 | (cp >> 12)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
  else { out += char(0xF0 | (cp >> 18)); out += char(0x80 | ((cp >> 12) & 0x3F)); out += char(0x80 | ((cp >> 6) & 0x3F)); out += char(0x80 | (cp & 0x3F)); }
}

// Simple case mapping: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic.
uint32_t to_lower_cp(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return c;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x137) return c | 1;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c + 1 : c;
  if (c >= 0x14A && c <= 0x177) return c | 1;
  if (c == 0x178) return 0xFF;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c + 1 : c;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  return c;
}
uint32_t to_upper_cp(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return c;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0x100 && c <= 0x137) return c & ~1u;
  if (c >= 0x139 && c <= 0x148) return (c & 1) ? c : c - 1;
  if (c >= 0x14A && c <= 0x177) return c & ~1u;
  if (c >= 0x179 && c <= 0x17E) return (c & 1) ? c : c - 1;
  if (c >= 0x3B1 && c <= 0x3CB && c != 0x3C2) return c - 32;
  if (c == 0x3C2) return 0x3A3;  // final sigma
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  return c;
}

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    size_t len = utf8_decode(s, i, cp);
    if (cp == 0xFFFFFFFFu) out += s[i];
    else utf8_append(out, upper ? to_upper_cp(cp) : to_lower_cp(cp));
    i += len;
  }
  return out;
}

const std::string* string_data(const KernelContext& ctx, int input, const Tensor& t) {
  if (t.dtype() != DType::String) unsupported_dtype(ctx, input, t.dtype());
  return t.data<std::string>();
}

// Python str.split semantics.
std::vector<std::string> split_string(const std::string& s, const std::string& delim, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (delim.empty()) {
    auto ws = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    size_t i = 0;
    int64_t splits = 0;
    while (true) {
      while (i < s.size() && ws(s[i])) ++i;
      if (i >= s.size()) break;
      if (maxsplit >= 0 && splits >= maxsplit) {
        size_t e = s.size();
        while (e > i && ws(s[e - 1])) --e;
        parts.push_back(s.substr(i, e - i));
        break;
      }
      size_t j = i;
      while (j < s.size() && !ws(s[j])) ++j;
      parts.push_back(s.substr(i, j - i));
      ++splits;
      i = j;
    }
    return parts;
  }
  size_t start = 0;
  int64_t splits = 0;
  while (true) {
    if (maxsplit >= 0 && splits >= maxsplit) break;
    size_t p = s.find(delim, start);
    if (p == std::string::npos) break;
    parts.push_back(s.substr(start, p - start));
    start = p + delim.size();
    ++splits;
  }
  parts.push_back(s.substr(start));
  return parts;
}

// TfIdfVectorizer n-gram table.
template <class K>
struct NgramPool {
  std::map<std::vector<K>, int64_t> index;  // n-gram -> output column
};

template <class K>
void tfidf_count(const std::vector<K>& tokens, const NgramPool<K>& pool, int64_t min_n, int64_t max_n, int64_t max_skip,
                 std::vector<double>& counts) {
  int64_t L = int64_t(tokens.size());
  std::vector<K> key;
  for (int64_t n = min_n; n <= max_n; ++n) {
    for (int64_t start = 0; start < L; ++start) {
      int64_t skips = n == 1 ? 0 : max_skip;
      for (int64_t sk = 0; sk <= skips; ++sk) {
        int64_t last = start + (n - 1) * (sk + 1);
        if (last >= L) break;
        key.clear();
        for (int64_t j = 0; j < n; ++j) key.push_back(tokens[size_t(start + j * (sk + 1))]);
        auto it = pool.index.find(key);
        if (it != pool.index.end()) counts[size_t(it->second)] += 1.0;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Random
// ---------------------------------------------------------------------------------------------

// A generator seeded from the `seed` attribute when given (deterministic), else from the OS.
struct SeedSpec {
  bool has = false;
  float seed = 0;
};
SeedSpec read_seed(const Node& n) {
  SeedSpec s;
  if (n.has_attr("seed")) {
    s.has = true;
    s.seed = n.attr_float("seed");
  }
  return s;
}
std::mt19937_64 make_gen(const SeedSpec& s) {
  if (s.has) {
    uint32_t bits;
    std::memcpy(&bits, &s.seed, 4);
    return std::mt19937_64(uint64_t(bits) * 0x9E3779B97F4A7C15ull + 12345);
  }
  std::random_device rd;
  uint64_t a = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  return std::mt19937_64(a);
}

void check_random_float_dtype(const Node& n, DType dt) {
  if (dt != DType::Float && dt != DType::Double && dt != DType::Float16 && dt != DType::BFloat16)
    n.fail(ErrorCode::Unsupported, std::string("dtype ") + dtype_name(dt) + " is not supported (float types only)");
}

void fill_random(KernelContext& ctx, DType dt, const Shape& shape, const SeedSpec& seed, bool normal, double a, double b) {
  std::mt19937_64 gen = make_gen(seed);
  // The output first (its allocation refuses absurd sizes), then the values straight into it.
  Tensor& y = ctx.output(0, dt, shape);
  int64_t cnt = y.numel();
  if (!visit_numeric(y.dtype(), [&]<class T>() {
        T* p = y.data<T>();
        if (normal) {
          std::normal_distribution<double> d(a, b);
          for (int64_t i = 0; i < cnt; ++i) p[i] = cast_from_double<T>(d(gen));
        } else {
          std::uniform_real_distribution<double> d(a, b);
          for (int64_t i = 0; i < cnt; ++i) p[i] = cast_from_double<T>(d(gen));
        }
      }))
    ctx.fail(ErrorCode::Unsupported, std::string("output type ") + dtype_name(y.dtype()) + " is not supported");
}

// The `shape` attribute of RandomUniform/RandomNormal: non-negative dims whose product
// (checked for overflow) stays at most 2^40 elements.
Shape random_shape_attr(const Node& n) {
  Shape shape = n.attr_ints("shape");
  int64_t total = 1;
  for (int64_t d : shape) {
    if (d < 0) n.fail(ErrorCode::InvalidModel, "shape must not have negative dimensions");
    // (a running product, like Tensor's own check: once it is 0 the later dims cannot overflow it)
    if (total != 0 && (__builtin_mul_overflow(total, d, &total) || total > (int64_t(1) << 40)))
      n.fail(ErrorCode::InvalidModel, "attribute 'shape' " + shape_str(shape) + " has too many elements (more than 2^40)");
  }
  return shape;
}

// ---------------------------------------------------------------------------------------------
// ai.onnx.ml helpers
// ---------------------------------------------------------------------------------------------


// Copies element si of src into element di of dst (same dtype).
void copy_element(const KernelContext& ctx, Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  if (!visit_all(dst.dtype(), [&]<class T>() { dst.data<T>()[di] = src.data<T>()[si]; }))
    ctx.fail(ErrorCode::Unsupported, std::string("type ") + dtype_name(dst.dtype()) + " is not supported");
}

// Inverse of the standard normal CDF: sqrt(2) * erfinv(2p - 1), by Newton iteration on std::erf.
double probit(double p) {
  if (std::isnan(p) || p < 0.0 || p > 1.0) return NAN;
  if (p == 0.0) return -INFINITY;
  if (p == 1.0) return INFINITY;
  double y = 2.0 * p - 1.0;
  // Initial guess (Winitzki's approximation), then Newton steps.
  double a = 0.147, ln = std::log(1.0 - y * y);
  double t1 = 2.0 / (kPi * a) + ln / 2.0;
  double x = std::copysign(std::sqrt(std::sqrt(t1 * t1 - ln / a) - t1), y);
  for (int i = 0; i < 4; ++i) {
    double err = std::erf(x) - y;
    x -= err / (2.0 / std::sqrt(kPi) * std::exp(-x * x));
  }
  return std::sqrt(2.0) * x;
}

}  // namespace

void register_signal_ops(OpRegistry& r) {
  // ---- DFT ----
  r.add("DFT", 17, [](const Node& n) {
    int64_t axis = n.attr_int("axis", 1);
    bool inverse = n.attr_int("inverse", 0) != 0;
    bool onesided = n.attr_int("onesided", 0) != 0;
    return kernel([axis, inverse, onesided](KernelContext& ctx) {
      int64_t len = ctx.has_input(1) ? scalar_int(ctx, 1, "dft_length") : -1;
      run_dft(ctx, ctx.input(0), axis, len, inverse, onesided);
    });
  }, 19);
  r.add("DFT", 20, [](const Node& n) {
    bool inverse = n.attr_int("inverse", 0) != 0;
    bool onesided = n.attr_int("onesided", 0) != 0;
    return kernel([inverse, onesided](KernelContext& ctx) {
      int64_t len = ctx.has_input(1) ? scalar_int(ctx, 1, "dft_length") : -1;
      int64_t axis = ctx.has_input(2) ? scalar_int(ctx, 2, "axis") : -2;
      run_dft(ctx, ctx.input(0), axis, len, inverse, onesided);
    });
  });

  // ---- STFT ----
  r.add("STFT", 17, [](const Node& n) {
    bool onesided = n.attr_int("onesided", 1) != 0;
    return kernel([onesided](KernelContext& ctx) {
      const Tensor& sig = ctx.input(0);
      if (!(sig.rank() == 2 || (sig.rank() == 3 && (sig.dim(2) == 1 || sig.dim(2) == 2))))
        ctx.fail(ErrorCode::InvalidArgument, "signal must have shape [batch, length, 1 or 2] or [batch, length], got " + shape_str(sig.shape()));
      int64_t step = scalar_int(ctx, 1, "frame_step");
      if (step < 1) ctx.fail(ErrorCode::InvalidArgument, "frame_step must be >= 1, got " + std::to_string(step));
      std::vector<double> win;
      bool has_win = ctx.has_input(2);
      if (has_win) {
        const Tensor& w = ctx.input(2);
        if (w.rank() != 1) ctx.fail(ErrorCode::InvalidArgument, "window must be 1-D, got " + shape_str(w.shape()));
        win = read_doubles(ctx, 2, w);
      }
      int64_t flen;
      if (ctx.has_input(3)) {
        flen = scalar_int(ctx, 3, "frame_length");
        if (has_win && int64_t(win.size()) != flen)
          ctx.fail(ErrorCode::InvalidArgument, "frame_length " + std::to_string(flen) + " does not match window length " + std::to_string(win.size()));
      } else if (has_win) {
        flen = int64_t(win.size());
      } else {
        ctx.fail(ErrorCode::InvalidArgument, "either window or frame_length must be given");
      }
      int64_t B = sig.dim(0), L = sig.dim(1), C = sig.rank() == 3 ? sig.dim(2) : 1;
      if (flen < 1 || flen > L)
        ctx.fail(ErrorCode::InvalidArgument, "frame_length " + std::to_string(flen) + " must be in [1, signal length " + std::to_string(L) + "]");
      int64_t frames = 1 + (L - flen) / step;
      int64_t bins = onesided ? flen / 2 + 1 : flen;
      std::vector<double> x = read_doubles(ctx, 0, sig);
      std::vector<double> out(static_cast<size_t>(B * frames * bins * 2));
      Dft1d dft(flen);
      std::vector<double> ore(static_cast<size_t>(flen)), oim(static_cast<size_t>(flen));
      std::vector<double> re(static_cast<size_t>(flen)), im(static_cast<size_t>(flen));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t f = 0; f < frames; ++f) {
          for (int64_t t = 0; t < flen; ++t) {
            size_t xi = size_t((b * L + f * step + t) * C);
            double w = has_win ? win[size_t(t)] : 1.0;
            re[size_t(t)] = x[xi] * w;
            im[size_t(t)] = C == 2 ? x[xi + 1] * w : 0.0;
          }
          dft.run(re, im, -1.0, bins, ore, oim);
          for (int64_t k = 0; k < bins; ++k) {
            double sr = ore[size_t(k)], si = oim[size_t(k)];
            size_t oi = size_t(((b * frames + f) * bins + k) * 2);
            out[oi] = sr;
            out[oi + 1] = si;
          }
        }
      }
      Tensor& y = ctx.output(0, sig.dtype(), {B, frames, bins, 2});
      write_doubles(ctx, y, out);
    });
  });

  // ---- Windows ----
  register_window(r, "HannWindow", WindowKind::Hann);
  register_window(r, "HammingWindow", WindowKind::Hamming);
  register_window(r, "BlackmanWindow", WindowKind::Blackman);

  // ---- MelWeightMatrix ----
  r.add("MelWeightMatrix", 17, [](const Node& n) {
    DType out_dt = dtype_attr(n, "output_datatype", DType::Float);
    if (out_dt == DType::String || out_dt == DType::Bool || out_dt == DType::Complex64 || out_dt == DType::Complex128)
      n.fail(ErrorCode::Unsupported, std::string("output_datatype ") + dtype_name(out_dt) + " is not supported");
    return kernel([out_dt](KernelContext& ctx) {
      int64_t num_mel = scalar_int(ctx, 0, "num_mel_bins");
      int64_t dft_length = scalar_int(ctx, 1, "dft_length");
      int64_t sample_rate = scalar_int(ctx, 2, "sample_rate");
      double lower = scalar_double(ctx, 3, "lower_edge_hertz");
      double upper = scalar_double(ctx, 4, "upper_edge_hertz");
      if (num_mel < 1) ctx.fail(ErrorCode::InvalidArgument, "num_mel_bins must be >= 1");
      if (dft_length < 1) ctx.fail(ErrorCode::InvalidArgument, "dft_length must be >= 1");
      if (sample_rate < 1) ctx.fail(ErrorCode::InvalidArgument, "sample_rate must be >= 1");
      if (lower < 0 || upper < lower)
        ctx.fail(ErrorCode::InvalidArgument, "need 0 <= lower_edge_hertz <= upper_edge_hertz");
      int64_t nbins = dft_length / 2 + 1;
      // num_mel + 2 points evenly spaced on the mel scale, mapped back to FFT bin indices.
      double lo_mel = 2595.0 * std::log10(1.0 + lower / 700.0);
      double hi_mel = 2595.0 * std::log10(1.0 + upper / 700.0);
      double step = (hi_mel - lo_mel) / double(num_mel + 2);
      std::vector<int64_t> pts(static_cast<size_t>(num_mel + 2));
      for (int64_t i = 0; i < num_mel + 2; ++i) {
        double mel = double(i) * step + lo_mel;
        double hz = 700.0 * (std::pow(10.0, mel / 2595.0) - 1.0);
        pts[size_t(i)] = int64_t(std::floor(double(dft_length + 1) * hz / double(sample_rate)));
      }
      std::vector<double> w(size_t(nbins * num_mel), 0.0);
      auto set = [&](int64_t bin, int64_t m, double v) {
        if (bin >= 0 && bin < nbins) w[size_t(bin * num_mel + m)] = v;
      };
      for (int64_t m = 0; m < num_mel; ++m) {
        int64_t lo = pts[size_t(m)], ce = pts[size_t(m + 1)], hi = pts[size_t(m + 2)];
        if (ce == lo) set(ce, m, 1.0);
        else
          for (int64_t j = lo; j <= ce; ++j) set(j, m, double(j - lo) / double(ce - lo));
        if (hi > ce)
          for (int64_t j = ce; j < hi; ++j) set(j, m, double(hi - j) / double(hi - ce));
      }
      Tensor& y = ctx.output(0, out_dt, {nbins, num_mel});
      write_doubles(ctx, y, w);
    });
  });

  // ---- StringNormalizer ----
  r.add("StringNormalizer", 10, [](const Node& n) {
    std::string action = n.attr_string("case_change_action", "NONE");
    if (action != "NONE" && action != "LOWER" && action != "UPPER")
      n.fail(ErrorCode::InvalidModel, "case_change_action must be NONE, LOWER or UPPER, got '" + action + "'");
    bool sensitive = n.attr_int("is_case_sensitive", 0) != 0;
    std::vector<std::string> stop = n.attr_strings("stopwords", {});
    if (!sensitive)
      for (auto& s : stop) s = map_case(s, false);
    return kernel([action, sensitive, stop](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      bool two_d = x.rank() == 2;
      if (!(x.rank() == 1 || (two_d && x.dim(0) == 1)))
        ctx.fail(ErrorCode::InvalidArgument, "input must have shape [C] or [1, C], got " + shape_str(x.shape()));
      std::vector<std::string> kept;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const std::string& s = p[i];
        bool is_stop = false;
        if (!stop.empty()) {
          std::string cmp = sensitive ? s : map_case(s, false);
          is_stop = std::find(stop.begin(), stop.end(), cmp) != stop.end();
        }
        if (is_stop) continue;
        if (action == "LOWER") kept.push_back(map_case(s, false));
        else if (action == "UPPER") kept.push_back(map_case(s, true));
        else kept.push_back(s);
      }
      if (kept.empty()) kept.push_back("");
      int64_t c = int64_t(kept.size());
      Tensor& y = ctx.output(0, DType::String, two_d ? Shape{1, c} : Shape{c});
      std::string* q = y.data<std::string>();
      for (int64_t i = 0; i < c; ++i) q[i] = std::move(kept[size_t(i)]);
    });
  });

  // ---- TfIdfVectorizer ----
  r.add("TfIdfVectorizer", 9, [](const Node& n) {
    int64_t max_n = n.attr_int("max_gram_length");
    int64_t min_n = n.attr_int("min_gram_length");
    int64_t max_skip = n.attr_int("max_skip_count");
    std::string mode = n.attr_string("mode");
    if (mode != "TF" && mode != "IDF" && mode != "TFIDF") n.fail(ErrorCode::InvalidModel, "mode must be TF, IDF or TFIDF, got '" + mode + "'");
    if (min_n < 1 || max_n < min_n) n.fail(ErrorCode::InvalidModel, "need 1 <= min_gram_length <= max_gram_length");
    if (max_skip < 0) n.fail(ErrorCode::InvalidModel, "max_skip_count must be >= 0");
    std::vector<int64_t> counts = n.attr_ints("ngram_counts");
    std::vector<int64_t> indexes = n.attr_ints("ngram_indexes");
    std::vector<float> weights = n.attr_floats("weights", {});
    bool str_pool = n.has_attr("pool_strings");
    if (str_pool == n.has_attr("pool_int64s")) n.fail(ErrorCode::InvalidModel, "exactly one of pool_strings and pool_int64s must be given");
    std::vector<std::string> spool = n.attr_strings("pool_strings", {});
    std::vector<int64_t> ipool = n.attr_ints("pool_int64s", {});
    int64_t pool_size = str_pool ? int64_t(spool.size()) : int64_t(ipool.size());
    if (!weights.empty() && weights.size() != indexes.size()) n.fail(ErrorCode::InvalidModel, "weights must have as many entries as ngram_indexes");
    int64_t n_out = 0;
    for (int64_t v : indexes) {
      if (v < 0) n.fail(ErrorCode::InvalidModel, "ngram_indexes must be >= 0");
      // (the output has max + 1 columns: its size is checked when the run allocates it)
      if (v == std::numeric_limits<int64_t>::max())
        n.fail(ErrorCode::InvalidModel, "ngram_indexes value " + std::to_string(v) + " is too large");
      n_out = std::max(n_out, v + 1);
    }
    NgramPool<std::string> sp;
    NgramPool<int64_t> ip;
    int64_t ngram_no = 0;
    for (size_t g = 0; g < counts.size(); ++g) {
      int64_t begin = counts[g], end = g + 1 < counts.size() ? counts[g + 1] : pool_size;
      int64_t len = int64_t(g) + 1;
      if (begin < 0 || end > pool_size || begin > end || (end - begin) % len != 0)
        n.fail(ErrorCode::InvalidModel, "ngram_counts is inconsistent with the pool size");
      for (int64_t p = begin; p < end; p += len, ++ngram_no) {
        if (ngram_no >= int64_t(indexes.size())) n.fail(ErrorCode::InvalidModel, "ngram_indexes has fewer entries than the pool has n-grams");
        int64_t col = indexes[size_t(ngram_no)];
        if (str_pool) sp.index[std::vector<std::string>(spool.begin() + p, spool.begin() + p + len)] = col;
        else ip.index[std::vector<int64_t>(ipool.begin() + p, ipool.begin() + p + len)] = col;
      }
    }
    // The pool's longest n-gram has ngram_counts.size() tokens: longer lengths can never match,
    // so scanning them is wasted work (max_gram_length = 2^62 would never finish).
    max_n = std::min<int64_t>(max_n, int64_t(counts.size()));
    // Weights of the columns that have one (a column's last entry wins), as (column, weight):
    // the output's width comes from the attribute values, so nothing of that size is made
    // before a run has allocated the output itself (a model whose ngram_indexes claim billions
    // of columns must not allocate gigabytes at load).
    std::vector<std::pair<int64_t, double>> colw;
    if (!weights.empty())
      for (size_t i = 0; i < indexes.size(); ++i) colw.emplace_back(indexes[i], weights[i]);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 1 && x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be 1-D or 2-D, got " + shape_str(x.shape()));
      if (str_pool != (x.dtype() == DType::String))
        ctx.fail(ErrorCode::InvalidArgument, std::string("input type ") + dtype_name(x.dtype()) + " does not match the pool type");
      if (!str_pool && x.dtype() != DType::Int32 && x.dtype() != DType::Int64) unsupported_dtype(ctx, 0, x.dtype());
      int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
      int64_t cols = x.rank() == 2 ? x.dim(1) : (x.rank() == 1 ? x.dim(0) : 0);
      Tensor& y = ctx.output(0, DType::Float, x.rank() == 2 ? Shape{rows, n_out} : Shape{n_out});
      // An empty output (0 rows) passes the output's size check whatever n_out is: size nothing by it.
      if (y.numel() == 0) return;
      float* out = y.data<float>();
      std::vector<double> cnt(static_cast<size_t>(n_out));
      for (int64_t r0 = 0; r0 < rows; ++r0) {
        std::fill(cnt.begin(), cnt.end(), 0.0);
        if (str_pool) {
          const std::string* p = x.data<std::string>() + r0 * cols;
          std::vector<std::string> toks(p, p + cols);
          tfidf_count(toks, sp, min_n, max_n, max_skip, cnt);
        } else {
          std::vector<int64_t> toks(static_cast<size_t>(cols));
          for (int64_t i = 0; i < cols; ++i) toks[size_t(i)] = x.get_int(r0 * cols + i);
          tfidf_count(toks, ip, min_n, max_n, max_skip, cnt);
        }
        // Weight 1 unless the column has one.
        auto weighted = [&](int64_t c, double w) {
          double v = cnt[size_t(c)];
          if (mode == "IDF") v = v > 0 ? w : 0.0;
          else if (mode == "TFIDF") v = v * w;
          out[r0 * n_out + c] = float(v);
        };
        for (int64_t c = 0; c < n_out; ++c) weighted(c, 1.0);
        for (const auto& [c, w] : colw) weighted(c, w);
      }
    });
  });

  // ---- StringConcat ----
  r.add("StringConcat", 20, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& a = ctx.input(0);
      const Tensor& b = ctx.input(1);
      const std::string* pa = string_data(ctx, 0, a);
      const std::string* pb = string_data(ctx, 1, b);
      Shape os = broadcast_shapes(ctx, a.shape(), b.shape());
      std::vector<int64_t> st[2] = {broadcast_strides(a.shape(), os), broadcast_strides(b.shape(), os)};
      Tensor& y = ctx.output(0, DType::String, os);
      std::string* q = y.data<std::string>();
      for_each_broadcast(os, st, [&](int64_t i, const int64_t* off) { q[i] = pa[off[0]] + pb[off[1]]; });
    });
  });

  // ---- StringSplit ----
  r.add("StringSplit", 20, [](const Node& n) {
    std::string delim = n.attr_string("delimiter", "");
    int64_t maxsplit = n.has_attr("maxsplit") ? n.attr_int("maxsplit") : -1;
    return kernel([delim, maxsplit](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      std::vector<std::vector<std::string>> parts(size_t(x.numel()));
      int64_t width = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        parts[size_t(i)] = split_string(p[i], delim, maxsplit);
        width = std::max(width, int64_t(parts[size_t(i)].size()));
      }
      Shape ys = x.shape();
      ys.push_back(width);
      Tensor& y = ctx.output(0, DType::String, ys);
      std::string* q = y.data<std::string>();
      for (int64_t i = 0; i < x.numel(); ++i)
        for (size_t k = 0; k < parts[size_t(i)].size(); ++k) q[i * width + int64_t(k)] = parts[size_t(i)][k];
      if (ctx.has_output(1)) {
        Tensor& z = ctx.output(1, DType::Int64, x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) z.data<int64_t>()[i] = int64_t(parts[size_t(i)].size());
      }
    });
  });

  // ---- RegexFullMatch ----
  r.add("RegexFullMatch", 20, [](const Node& n) {
    std::string pattern = n.attr_string("pattern");
    // The spec uses RE2 syntax; translate the common RE2-only forms to ECMAScript: a leading (?i)
    // flag, named groups (?P<name>...) (names dropped), \A and \z anchors.
    auto flags = std::regex::ECMAScript;
    std::string pat = pattern;
    if (pat.rfind("(?i)", 0) == 0) {
      pat = pat.substr(4);
      flags |= std::regex::icase;
    }
    std::string tr;
    for (size_t i = 0; i < pat.size(); ++i) {
      if (pat[i] == '\\' && i + 1 < pat.size()) {
        if (pat[i + 1] == 'A') tr += '^';
        else if (pat[i + 1] == 'z') tr += '$';
        else { tr += pat[i]; tr += pat[i + 1]; }
        ++i;
      } else if (pat.compare(i, 4, "(?P<") == 0 && pat.find('>', i + 4) != std::string::npos) {
        tr += '(';
        i = pat.find('>', i + 4);
      } else {
        tr += pat[i];
      }
    }
    std::shared_ptr<const std::regex> re;
    try {
      re = std::make_shared<const std::regex>(tr, flags);
    } catch (const std::regex_error& e) {
      n.fail(ErrorCode::Unsupported, "pattern '" + pattern + "' is not supported: " + e.what());
    }
    return kernel([re](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      Tensor& y = ctx.output(0, DType::Bool, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        try {
          y.data<bool>()[i] = std::regex_match(p[i], *re);
        } catch (const std::regex_error& e) {
          ctx.fail(ErrorCode::InvalidArgument, std::string("regex match failed on element ") + std::to_string(i) + ": " + e.what());
        }
      }
    });
  });

  // ---- Random ----
  r.add("RandomUniform", 1, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Float);
    check_random_float_dtype(n, dt);
    double lo = n.attr_float("low", 0.0f), hi = n.attr_float("high", 1.0f);
    if (!(lo <= hi)) n.fail(ErrorCode::InvalidModel, "low must be <= high");
    Shape shape = random_shape_attr(n);
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) { fill_random(ctx, dt, shape, seed, false, lo, hi); });
  });
  r.add("RandomNormal", 1, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Float);
    check_random_float_dtype(n, dt);
    double mean = n.attr_float("mean", 0.0f), scale = n.attr_float("scale", 1.0f);
    if (!(scale > 0)) n.fail(ErrorCode::InvalidModel, "scale must be > 0");
    Shape shape = random_shape_attr(n);
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) { fill_random(ctx, dt, shape, seed, true, mean, scale); });
  });
  r.add("RandomUniformLike", 1, [](const Node& n) {
    bool has_dt = n.has_attr("dtype");
    DType dt = dtype_attr(n, "dtype", DType::Float);
    if (has_dt) check_random_float_dtype(n, dt);
    double lo = n.attr_float("low", 0.0f), hi = n.attr_float("high", 1.0f);
    if (!(lo <= hi)) n.fail(ErrorCode::InvalidModel, "low must be <= high");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType odt = has_dt ? dt : x.dtype();
      if (!dtype_is_float(odt) || dtype_size(odt) < 2) unsupported_dtype(ctx, 0, x.dtype());
      fill_random(ctx, odt, x.shape(), seed, false, lo, hi);
    });
  });
  r.add("RandomNormalLike", 1, [](const Node& n) {
    bool has_dt = n.has_attr("dtype");
    DType dt = dtype_attr(n, "dtype", DType::Float);
    if (has_dt) check_random_float_dtype(n, dt);
    double mean = n.attr_float("mean", 0.0f), scale = n.attr_float("scale", 1.0f);
    if (!(scale > 0)) n.fail(ErrorCode::InvalidModel, "scale must be > 0");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      DType odt = has_dt ? dt : x.dtype();
      if (!dtype_is_float(odt) || dtype_size(odt) < 2) unsupported_dtype(ctx, 0, x.dtype());
      fill_random(ctx, odt, x.shape(), seed, true, mean, scale);
    });
  });
  r.add("Bernoulli", 15, [](const Node& n) {
    bool has_dt = n.has_attr("dtype");
    DType dt = dtype_attr(n, "dtype", DType::Float);
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      std::vector<double> p = read_doubles(ctx, 0, x);
      DType odt = has_dt ? dt : x.dtype();
      std::mt19937_64 gen = make_gen(seed);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      for (double& v : p) {
        if (!(v >= 0.0 && v <= 1.0)) ctx.fail(ErrorCode::InvalidArgument, "probabilities must be in [0, 1]");
        v = u(gen) < v ? 1.0 : 0.0;
      }
      Tensor& y = ctx.output(0, odt, x.shape());
      if (odt == DType::Bool) {
        for (size_t i = 0; i < p.size(); ++i) y.data<bool>()[i] = p[i] != 0.0;
      } else {
        write_doubles(ctx, y, p);
      }
    });
  });
  r.add("Multinomial", 7, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Int32);
    if (dt != DType::Int32 && dt != DType::Int64) n.fail(ErrorCode::Unsupported, "dtype must be int32 or int64");
    int64_t samples = n.attr_int("sample_size", 1);
    if (samples < 0) n.fail(ErrorCode::InvalidModel, "sample_size must be >= 0");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be [batch_size, class_size], got " + shape_str(x.shape()));
      std::vector<double> logits = read_doubles(ctx, 0, x);
      int64_t B = x.dim(0), K = x.dim(1);
      if (K < 1) ctx.fail(ErrorCode::InvalidArgument, "class_size must be >= 1");
      std::mt19937_64 gen = make_gen(seed);
      std::uniform_real_distribution<double> u(0.0, 1.0);
      Tensor& y = ctx.output(0, dt, {B, samples});
      std::vector<double> cdf(static_cast<size_t>(K));
      for (int64_t b = 0; b < B; ++b) {
        const double* l = logits.data() + b * K;
        double mx = -INFINITY;
        for (int64_t k = 0; k < K; ++k) {
          if (std::isnan(l[k]) || l[k] == INFINITY) ctx.fail(ErrorCode::InvalidArgument, "logits must not be NaN or +inf");
          mx = std::max(mx, l[k]);
        }
        if (mx == -INFINITY) ctx.fail(ErrorCode::InvalidArgument, "row " + std::to_string(b) + " has no class with non-zero probability");
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += std::exp(l[k] - mx);
          cdf[size_t(k)] = acc;
        }
        for (int64_t s = 0; s < samples; ++s) {
          double t = u(gen) * acc;
          int64_t k = int64_t(std::upper_bound(cdf.begin(), cdf.end(), t) - cdf.begin());
          if (k >= K) k = K - 1;
          if (dt == DType::Int32) y.data<int32_t>()[b * samples + s] = int32_t(k);
          else y.data<int64_t>()[b * samples + s] = k;
        }
      }
    });
  });
  // ---- ai.onnx.ml: Binarizer ----
  r.add("ai.onnx.ml", "Binarizer", 1, INT_MAX, [](const Node& n) {
    double thr = n.attr_float("threshold", 0.0f);
    return kernel([thr](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      Tensor& y = ctx.output(0, x.dtype(), x.shape());
      if (!visit_numeric(x.dtype(), [&]<class T>() {
            const T* a = x.data<T>();
            T* b = y.data<T>();
            for (int64_t i = 0; i < x.numel(); ++i) b[i] = cast_from_double<T>(static_cast<double>(a[i]) > thr ? 1.0 : 0.0);
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  });

  // ---- ai.onnx.ml: ArrayFeatureExtractor ----
  r.add("ai.onnx.ml", "ArrayFeatureExtractor", 1, INT_MAX, [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& idx = ctx.input(1);
      if (x.rank() < 1) ctx.fail(ErrorCode::InvalidArgument, "input X must have rank >= 1");
      if (!dtype_is_integer(idx.dtype())) unsupported_dtype(ctx, 1, idx.dtype());
      std::vector<int64_t> ind = idx.to_int64_vector();
      int64_t last = x.dim(-1);
      for (int64_t v : ind)
        if (v < 0 || v >= last) ctx.fail(ErrorCode::InvalidArgument, "index " + std::to_string(v) + " is out of range [0, " + std::to_string(last) + ")");
      Shape os = x.shape();
      if (x.rank() == 1) os = {1, int64_t(ind.size())};
      else os.back() = int64_t(ind.size());
      int64_t rows = last == 0 ? 0 : x.numel() / last;
      Tensor& y = ctx.output(0, x.dtype(), os);
      int64_t k = int64_t(ind.size());
      for (int64_t r0 = 0; r0 < rows; ++r0)
        for (int64_t j = 0; j < k; ++j) copy_element(ctx, y, r0 * k + j, x, r0 * last + ind[size_t(j)]);
    });
  });

  // ---- ai.onnx.ml: LabelEncoder (opsets 2 and 4; opset 1 uses classes_strings) ----
  r.add("ai.onnx.ml", "LabelEncoder", 1, INT_MAX, [](const Node& n) {
    // Keys and values as tensors; the default as a one-element tensor of the value type.
    Tensor keys, vals, dflt;
    if (n.opset < 2) {
      std::vector<std::string> classes = n.attr_strings("classes_strings", {});
      // Direction is decided at run time from the input type: string -> int64 or int64 -> string.
      Tensor cls(DType::String, {int64_t(classes.size())});
      for (size_t i = 0; i < classes.size(); ++i) cls.data<std::string>()[i] = classes[i];
      Tensor ids(DType::Int64, {int64_t(classes.size())});
      for (size_t i = 0; i < classes.size(); ++i) ids.data<int64_t>()[i] = int64_t(i);
      Tensor d_int = Tensor::scalar<int64_t>(n.attr_int("default_int64", -1));
      Tensor d_str(DType::String, {});
      d_str.data<std::string>()[0] = n.attr_string("default_string", "_Unused");
      keys = cls; vals = ids; dflt = d_int;
      // Stash the reverse mapping in the lambda.
      return kernel([cls, ids, d_int, d_str](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        bool from_str = x.dtype() == DType::String;
        if (!from_str && x.dtype() != DType::Int64) unsupported_dtype(ctx, 0, x.dtype());
        Tensor& y = ctx.output(0, from_str ? DType::Int64 : DType::String, x.shape());
        for (int64_t i = 0; i < x.numel(); ++i) {
          if (from_str) {
            const std::string& s = x.data<std::string>()[i];
            int64_t v = d_int.data<int64_t>()[0];
            for (int64_t k = 0; k < cls.numel(); ++k)
              if (cls.data<std::string>()[k] == s) { v = k; break; }
            y.data<int64_t>()[i] = v;
          } else {
            int64_t k = x.data<int64_t>()[i];
            y.data<std::string>()[i] = (k >= 0 && k < cls.numel()) ? cls.data<std::string>()[k] : d_str.data<std::string>()[0];
          }
        }
      });
    }
    auto strings_tensor = [](const std::vector<std::string>& v) {
      Tensor t(DType::String, {int64_t(v.size())});
      for (size_t i = 0; i < v.size(); ++i) t.data<std::string>()[i] = v[i];
      return t;
    };
    auto floats_tensor = [](const std::vector<float>& v) { Tensor t(DType::Float, {int64_t(v.size())}); for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = v[i]; return t; };
    auto ints_tensor = [](const std::vector<int64_t>& v) { Tensor t(DType::Int64, {int64_t(v.size())}); for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i]; return t; };
    if (n.has_attr("keys_tensor")) keys = n.attr_tensor("keys_tensor");
    else if (n.has_attr("keys_strings")) keys = strings_tensor(n.attr_strings("keys_strings"));
    else if (n.has_attr("keys_int64s")) keys = ints_tensor(n.attr_ints("keys_int64s"));
    else if (n.has_attr("keys_floats")) keys = floats_tensor(n.attr_floats("keys_floats"));
    else n.fail(ErrorCode::InvalidModel, "one of keys_tensor, keys_strings, keys_int64s, keys_floats is required");
    if (n.has_attr("values_tensor")) vals = n.attr_tensor("values_tensor");
    else if (n.has_attr("values_strings")) vals = strings_tensor(n.attr_strings("values_strings"));
    else if (n.has_attr("values_int64s")) vals = ints_tensor(n.attr_ints("values_int64s"));
    else if (n.has_attr("values_floats")) vals = floats_tensor(n.attr_floats("values_floats"));
    else n.fail(ErrorCode::InvalidModel, "one of values_tensor, values_strings, values_int64s, values_floats is required");
    if (keys.numel() != vals.numel()) n.fail(ErrorCode::InvalidModel, "keys and values must have the same number of entries");
    DType vdt = vals.dtype();
    if (n.has_attr("default_tensor")) {
      dflt = n.attr_tensor("default_tensor");
      if (dflt.dtype() != vdt || dflt.numel() < 1) n.fail(ErrorCode::InvalidModel, "default_tensor must have one element of the value type");
    } else if (vdt == DType::String) {
      dflt = Tensor(DType::String, {});
      dflt.data<std::string>()[0] = n.attr_string("default_string", "_Unused");
    } else if (vdt == DType::Float) {
      dflt = Tensor::scalar<float>(n.attr_float("default_float", -0.0f));
    } else if (vdt == DType::Int64) {
      dflt = Tensor::scalar<int64_t>(n.attr_int("default_int64", -1));
    } else {
      dflt = Tensor(vdt, {});  // zero / empty for other types
    }
    bool str_keys = keys.dtype() == DType::String;
    std::map<std::string, int64_t> smap;
    std::map<double, int64_t> nmap;
    int64_t nan_index = -1;
    for (int64_t i = 0; i < keys.numel(); ++i) {
      if (str_keys) smap.emplace(keys.data<std::string>()[i], i);
      else {
        double k = keys.get_double(i);
        if (std::isnan(k)) { if (nan_index < 0) nan_index = i; }
        else nmap.emplace(k, i);
      }
    }
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if ((x.dtype() == DType::String) != str_keys)
        ctx.fail(ErrorCode::InvalidArgument, std::string("input type ") + dtype_name(x.dtype()) + " does not match the key type " + dtype_name(keys.dtype()));
      Tensor& y = ctx.output(0, vdt, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) {
        int64_t k = -1;
        if (str_keys) {
          auto it = smap.find(x.data<std::string>()[i]);
          if (it != smap.end()) k = it->second;
        } else {
          double v = x.get_double(i);
          if (std::isnan(v)) k = nan_index;
          else {
            auto it = nmap.find(v);
            if (it != nmap.end()) k = it->second;
          }
        }
        if (k >= 0) copy_element(ctx, y, i, vals, k);
        else copy_element(ctx, y, i, dflt, 0);
      }
    });
  });
  // ---- ai.onnx.ml: TreeEnsemble (opset 5) ----
  r.add("ai.onnx.ml", "TreeEnsemble", 5, INT_MAX, [](const Node& n) {
    struct Tree {
      std::vector<int64_t> feat, tid, fid, tleaf, fleaf, mvt, member_set;
      std::vector<uint8_t> mode;
      std::vector<double> split;
      std::vector<std::vector<double>> members;
      std::vector<int64_t> leaf_target, roots;
      std::vector<double> leaf_w;
      int64_t n_targets = 1, agg = 1, post = 0;
    };
    auto t = std::make_shared<Tree>();
    t->feat = n.attr_ints("nodes_featureids");
    t->tid = n.attr_ints("nodes_truenodeids");
    t->fid = n.attr_ints("nodes_falsenodeids");
    t->tleaf = n.attr_ints("nodes_trueleafs");
    t->fleaf = n.attr_ints("nodes_falseleafs");
    t->mvt = n.attr_ints("nodes_missing_value_tracks_true", {});
    t->leaf_target = n.attr_ints("leaf_targetids");
    t->roots = n.attr_ints("tree_roots");
    t->n_targets = n.attr_int("n_targets", 1);
    t->agg = n.attr_int("aggregate_function", 1);
    t->post = n.attr_int("post_transform", 0);
    const Tensor& modes = n.attr_tensor("nodes_modes");
    const Tensor& splits = n.attr_tensor("nodes_splits");
    const Tensor& lw = n.attr_tensor("leaf_weights");
    size_t nn = t->feat.size();
    if (t->tid.size() != nn || t->fid.size() != nn || t->tleaf.size() != nn || t->fleaf.size() != nn ||
        size_t(modes.numel()) != nn || size_t(splits.numel()) != nn || (!t->mvt.empty() && t->mvt.size() != nn))
      n.fail(ErrorCode::InvalidModel, "nodes_* attributes must all have the same length");
    if (size_t(lw.numel()) != t->leaf_target.size()) n.fail(ErrorCode::InvalidModel, "leaf_weights and leaf_targetids must have the same length");
    if (t->n_targets < 1) n.fail(ErrorCode::InvalidModel, "n_targets must be >= 1");
    if (t->agg < 0 || t->agg > 3) n.fail(ErrorCode::InvalidModel, "aggregate_function must be in [0, 3]");
    if (t->post < 0 || t->post > 4) n.fail(ErrorCode::InvalidModel, "post_transform must be in [0, 4], got " + std::to_string(t->post));
    for (int64_t i = 0; i < lw.numel(); ++i) t->leaf_w.push_back(lw.get_double(i));
    for (int64_t v : t->leaf_target)
      if (v < 0 || v >= t->n_targets) n.fail(ErrorCode::InvalidModel, "leaf_targetids entry out of range");
    std::vector<std::vector<double>> sets;
    if (n.has_attr("membership_values")) {
      const Tensor& mv = n.attr_tensor("membership_values");
      std::vector<double> cur;
      for (int64_t i = 0; i < mv.numel(); ++i) {
        double v = mv.get_double(i);
        if (std::isnan(v)) { sets.push_back(cur); cur.clear(); }
        else cur.push_back(v);
      }
      if (!cur.empty()) sets.push_back(cur);
    }
    t->member_set.assign(nn, -1);
    size_t next_set = 0;
    for (size_t i = 0; i < nn; ++i) {
      t->mode.push_back(uint8_t(modes.get_int(int64_t(i))));
      t->split.push_back(splits.get_double(int64_t(i)));
      if (t->mode[i] > 6) n.fail(ErrorCode::InvalidModel, "nodes_modes entry out of range");
      if (t->mode[i] == 6) {
        if (next_set >= sets.size()) n.fail(ErrorCode::InvalidModel, "membership_values has fewer sets than BRANCH_MEMBER nodes");
        t->member_set[i] = int64_t(next_set++);
      }
      if (t->feat[i] < 0) n.fail(ErrorCode::InvalidModel, "nodes_featureids entry is negative");
      int64_t lim_t = t->tleaf[i] ? int64_t(t->leaf_w.size()) : int64_t(nn);
      int64_t lim_f = t->fleaf[i] ? int64_t(t->leaf_w.size()) : int64_t(nn);
      if (t->tid[i] < 0 || t->tid[i] >= lim_t || t->fid[i] < 0 || t->fid[i] >= lim_f)
        n.fail(ErrorCode::InvalidModel, "node " + std::to_string(i) + " has a child index out of range");
    }
    t->members = std::move(sets);
    for (int64_t r0 : t->roots)
      if (r0 < 0 || r0 >= int64_t(nn)) n.fail(ErrorCode::InvalidModel, "tree_roots entry out of range");
    return kernel([t](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 1 && x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be [N, F], got " + shape_str(x.shape()));
      int64_t N = x.rank() == 2 ? x.dim(0) : 1, F = x.dim(-1);
      std::vector<double> xv = read_doubles(ctx, 0, x);
      int64_t T = t->n_targets;
      size_t nn = t->feat.size();
      for (size_t i = 0; i < nn; ++i)
        if (t->feat[i] >= F) ctx.fail(ErrorCode::InvalidArgument, "model uses feature " + std::to_string(t->feat[i]) + " but input has " + std::to_string(F));
      int64_t NT;
      if (__builtin_mul_overflow(N, T, &NT))
        ctx.fail(ErrorCode::InvalidArgument, "output [" + std::to_string(N) + ", n_targets=" + std::to_string(T) + "] is too large");
      // The output first (its allocation refuses absurd n_targets), then the per-target buffers.
      Tensor& y = ctx.output(0, x.dtype(), {N, T});
      if (NT == 0) return;
      auto write_row = [&](int64_t r0, const std::vector<double>& v) {
        if (!visit_numeric(y.dtype(), [&]<class U>() {
              U* p = y.data<U>() + r0 * T;
              for (int64_t k = 0; k < T; ++k) p[k] = cast_from_double<U>(v[size_t(k)]);
            }))
          ctx.fail(ErrorCode::Unsupported, std::string("output type ") + dtype_name(y.dtype()) + " is not supported");
      };
      std::vector<double> acc(static_cast<size_t>(T));
      std::vector<char> seen(static_cast<size_t>(T));
      for (int64_t r0 = 0; r0 < N; ++r0) {
        const double* row = xv.data() + r0 * F;
        std::fill(acc.begin(), acc.end(), 0.0);
        std::fill(seen.begin(), seen.end(), 0);
        for (int64_t root : t->roots) {
          int64_t cur = root;
          size_t steps = 0;
          while (true) {
            if (++steps > nn + 1) ctx.fail(ErrorCode::InvalidArgument, "tree contains a cycle");
            size_t i = size_t(cur);
            double v = row[t->feat[i]], s = t->split[i];
            bool go;
            if (std::isnan(v) && !t->mvt.empty() && t->mvt[i]) go = true;
            else switch (t->mode[i]) {
              case 0: go = v <= s; break;
              case 1: go = v < s; break;
              case 2: go = v >= s; break;
              case 3: go = v > s; break;
              case 4: go = v == s; break;
              case 5: go = v != s; break;
              default: {
                const auto& set = t->members[size_t(t->member_set[i])];
                go = std::find(set.begin(), set.end(), v) != set.end();
              }
            }
            int64_t next = go ? t->tid[i] : t->fid[i];
            bool leaf = go ? t->tleaf[i] != 0 : t->fleaf[i] != 0;
            if (leaf) {
              size_t tg = size_t(t->leaf_target[size_t(next)]);
              double w = t->leaf_w[size_t(next)];
              if (t->agg == 2) acc[tg] = seen[tg] ? std::min(acc[tg], w) : w;
              else if (t->agg == 3) acc[tg] = seen[tg] ? std::max(acc[tg], w) : w;
              else acc[tg] += w;
              seen[tg] = 1;
              break;
            }
            cur = next;
          }
        }
        if (t->agg == 0 && !t->roots.empty())
          for (auto& a : acc) a /= double(t->roots.size());
        if (t->post == 1 || t->post == 3) {
          double mx = -INFINITY;
          for (int64_t k = 0; k < T; ++k)
            if (t->post == 1 || acc[size_t(k)] != 0.0) mx = std::max(mx, acc[size_t(k)]);
          double sum = 0;
          for (int64_t k = 0; k < T; ++k) {
            double e = (t->post == 3 && acc[size_t(k)] == 0.0) ? 0.0 : std::exp(acc[size_t(k)] - mx);
            acc[size_t(k)] = e;
            sum += e;
          }
          if (sum > 0)
            for (auto& a : acc) a /= sum;
        } else if (t->post == 2) {
          for (auto& a : acc) a = 1.0 / (1.0 + std::exp(-a));
        } else if (t->post == 4) {
          for (auto& a : acc) a = probit(a);
        }
        write_row(r0, acc);
      }
    });
  });
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"BlackmanWindow", "DFT", "HammingWindow", "HannWindow", "MelWeightMatrix", "STFT", "StringNormalizer", "StringSplit"}) r.def(op).data_dependent_shape();
  r.def("RegexFullMatch").infer_symbolic(shapes::same_bool);
  r.def("StringConcat").infer_symbolic(shapes::broadcast);
  r.def("Bernoulli").infer_symbolic(shapes::bernoulli);
  r.def("Multinomial").infer(shapes::multinomial);
  for (const char* op : {"RandomNormal", "RandomUniform"}) r.def(op).infer(shapes::random_tensor);
  for (const char* op : {"RandomNormalLike", "RandomUniformLike"}) r.def(op).infer_symbolic(shapes::random_like);
  r.def("TfIdfVectorizer").infer(shapes::tfidf_vectorizer);
  r.def("ai.onnx.ml", "ArrayFeatureExtractor").infer(shapes::array_feature_extractor);
  r.def("ai.onnx.ml", "Binarizer").infer_symbolic(shapes::binarizer);
  r.def("ai.onnx.ml", "LabelEncoder").infer_symbolic(shapes::label_encoder);
  r.def("ai.onnx.ml", "TreeEnsemble").infer(shapes::tree_ensemble);
}

}  // namespace basalt
