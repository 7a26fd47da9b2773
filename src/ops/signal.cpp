// Reference kernels: signal ops (DFT, STFT, windows, MelWeightMatrix), string ops
// (StringNormalizer, TfIdfVectorizer, StringConcat, StringSplit, RegexFullMatch) and random ops
// (RandomUniform[Like], RandomNormal[Like], Bernoulli, Multinomial).
#include "ops/common.hpp"

#include <algorithm>
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
  if (!dtype_is_known(int32_t(v)) || v == 0) n.fail(ErrorCode::InvalidModel, std::string("attribute '") + name + "' is not a valid data type: " + std::to_string(v));
  return DType(int32_t(v));
}

constexpr double kPi = std::numbers::pi;

// ---------------------------------------------------------------------------------------------
// DFT
// ---------------------------------------------------------------------------------------------

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
  std::vector<double> twc(static_cast<size_t>(N)), tws(static_cast<size_t>(N));
  for (int64_t k = 0; k < N; ++k) {
    double a = 2.0 * kPi * double(k) / double(N);
    twc[size_t(k)] = std::cos(a);
    tws[size_t(k)] = std::sin(a);
  }
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
      for (int64_t k = 0; k < n_out; ++k) {
        double sr = 0, si = 0;
        for (int64_t n = 0; n < N; ++n) {
          size_t idx = size_t((k * n) % N);
          double c = twc[idx], sn = sign * tws[idx];
          sr += re[size_t(n)] * c - im[size_t(n)] * sn;
          si += re[size_t(n)] * sn + im[size_t(n)] * c;
        }
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
  std::vector<double> v(size_t(shape_numel(shape)));
  if (normal) {
    std::normal_distribution<double> d(a, b);
    for (auto& x : v) x = d(gen);
  } else {
    std::uniform_real_distribution<double> d(a, b);
    for (auto& x : v) x = d(gen);
  }
  Tensor& y = ctx.output(0, dt, shape);
  write_doubles(ctx, y, v);
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
      if (sig.rank() != 3 || (sig.dim(2) != 1 && sig.dim(2) != 2))
        ctx.fail(ErrorCode::InvalidArgument, "signal must have shape [batch, length, 1 or 2], got " + shape_str(sig.shape()));
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
      int64_t B = sig.dim(0), L = sig.dim(1), C = sig.dim(2);
      if (flen < 1 || flen > L)
        ctx.fail(ErrorCode::InvalidArgument, "frame_length " + std::to_string(flen) + " must be in [1, signal length " + std::to_string(L) + "]");
      int64_t frames = 1 + (L - flen) / step;
      int64_t bins = onesided ? flen / 2 + 1 : flen;
      std::vector<double> x = read_doubles(ctx, 0, sig);
      std::vector<double> out(static_cast<size_t>(B * frames * bins * 2));
      std::vector<double> twc(static_cast<size_t>(flen)), tws(static_cast<size_t>(flen));
      for (int64_t k = 0; k < flen; ++k) {
        double a = 2.0 * kPi * double(k) / double(flen);
        twc[size_t(k)] = std::cos(a);
        tws[size_t(k)] = std::sin(a);
      }
      std::vector<double> re(static_cast<size_t>(flen)), im(static_cast<size_t>(flen));
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t f = 0; f < frames; ++f) {
          for (int64_t t = 0; t < flen; ++t) {
            size_t xi = size_t((b * L + f * step + t) * C);
            double w = has_win ? win[size_t(t)] : 1.0;
            re[size_t(t)] = x[xi] * w;
            im[size_t(t)] = C == 2 ? x[xi + 1] * w : 0.0;
          }
          for (int64_t k = 0; k < bins; ++k) {
            double sr = 0, si = 0;
            for (int64_t t = 0; t < flen; ++t) {
              size_t idx = size_t((k * t) % flen);
              double c = twc[idx], sn = -tws[idx];
              sr += re[size_t(t)] * c - im[size_t(t)] * sn;
              si += re[size_t(t)] * sn + im[size_t(t)] * c;
            }
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
      double step = (hi_mel - lo_mel) / double(num_mel + 1);
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
    // Weight per output column (indexed by column).
    std::vector<double> colw(size_t(n_out), 1.0);
    if (!weights.empty())
      for (size_t i = 0; i < indexes.size(); ++i) colw[size_t(indexes[i])] = weights[i];
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 1 && x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be 1-D or 2-D, got " + shape_str(x.shape()));
      if (str_pool != (x.dtype() == DType::String))
        ctx.fail(ErrorCode::InvalidArgument, std::string("input type ") + dtype_name(x.dtype()) + " does not match the pool type");
      if (!str_pool && x.dtype() != DType::Int32 && x.dtype() != DType::Int64) unsupported_dtype(ctx, 0, x.dtype());
      int64_t rows = x.rank() == 2 ? x.dim(0) : 1;
      int64_t cols = x.rank() == 2 ? x.dim(1) : (x.rank() == 1 ? x.dim(0) : 0);
      Tensor& y = ctx.output(0, DType::Float, x.rank() == 2 ? Shape{rows, n_out} : Shape{n_out});
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
        for (int64_t c = 0; c < n_out; ++c) {
          double v = cnt[size_t(c)];
          if (mode == "IDF") v = v > 0 ? colw[size_t(c)] : 0.0;
          else if (mode == "TFIDF") v = v * colw[size_t(c)];
          out[r0 * n_out + c] = float(v);
        }
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
    std::shared_ptr<const std::regex> re;
    try {
      re = std::make_shared<const std::regex>(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      n.fail(ErrorCode::Unsupported, "pattern '" + pattern + "' is not supported: " + e.what());
    }
    return kernel([re](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::string* p = string_data(ctx, 0, x);
      Tensor& y = ctx.output(0, DType::Bool, x.shape());
      for (int64_t i = 0; i < x.numel(); ++i) y.data<bool>()[i] = std::regex_match(p[i], *re);
    });
  });

  // ---- Random ----
  r.add("RandomUniform", 1, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Float);
    check_random_float_dtype(n, dt);
    double lo = n.attr_float("low", 0.0f), hi = n.attr_float("high", 1.0f);
    if (!(lo <= hi)) n.fail(ErrorCode::InvalidModel, "low must be <= high");
    Shape shape = n.attr_ints("shape");
    for (int64_t d : shape)
      if (d < 0) n.fail(ErrorCode::InvalidModel, "shape must not have negative dimensions");
    SeedSpec seed = read_seed(n);
    return kernel([=](KernelContext& ctx) { fill_random(ctx, dt, shape, seed, false, lo, hi); });
  });
  r.add("RandomNormal", 1, [](const Node& n) {
    DType dt = dtype_attr(n, "dtype", DType::Float);
    check_random_float_dtype(n, dt);
    double mean = n.attr_float("mean", 0.0f), scale = n.attr_float("scale", 1.0f);
    if (!(scale > 0)) n.fail(ErrorCode::InvalidModel, "scale must be > 0");
    Shape shape = n.attr_ints("shape");
    for (int64_t d : shape)
      if (d < 0) n.fail(ErrorCode::InvalidModel, "shape must not have negative dimensions");
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
        double mx = *std::max_element(l, l + K);
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) {
          acc += std::isfinite(mx) || l[k] == mx ? std::exp(l[k] - mx) : 0.0;
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
}

}  // namespace basalt
