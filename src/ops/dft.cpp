// Signal ops: DFT, STFT, the Blackman/Hamming/Hann windows and MelWeightMatrix (computed in double).
#include "ops/common.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <numbers>
#include <random>
#include <regex>

namespace basalt {

namespace {

constexpr double kPi = std::numbers::pi;

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

}  // namespace

void register_dft_ops(OpRegistry& r) {
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

  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"BlackmanWindow", "DFT", "HammingWindow", "HannWindow", "MelWeightMatrix", "STFT"}) r.def(op).data_dependent_shape();
}

}  // namespace basalt
