#include "kernels/qgemm.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__x86_64__)
#include <emmintrin.h>
#endif

namespace basalt::kernels {

namespace {

constexpr int PMR = 4, PNR = 16;

// Portable microkernel: 4 x 16 tile, int32 sums (the compiler vectorizes the column loop).
void ukernel_portable(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m) {
  int32_t acc[PMR][PNR] = {};
  for (int64_t g = 0; g < kp / 4; ++g) {
    const int8_t* pr = panel + g * PNR * 4;
    for (int i = 0; i < m; ++i) {
      const uint8_t* pl = left + i * kp + g * 4;
      for (int j = 0; j < PNR; ++j)
        acc[i][j] += int32_t(pl[0]) * pr[j * 4] + int32_t(pl[1]) * pr[j * 4 + 1] + int32_t(pl[2]) * pr[j * 4 + 2] +
                     int32_t(pl[3]) * pr[j * 4 + 3];
    }
  }
  for (int i = 0; i < m; ++i) std::memcpy(c + i * PNR, acc[i], sizeof(acc[i]));
}

const QGemmArch kPortable{QIsa::Portable, PMR, PNR, ukernel_portable, qgemm_finish_portable};
const QGemmArch kAvx2{QIsa::Avx2, 4, 16, qgemm_ukernel_avx2, qgemm_finish_portable};
const QGemmArch kVnni{QIsa::Avx512Vnni, 6, 64, qgemm_ukernel_vnni, qgemm_finish_avx512};

QIsa detect() {
  Isa isa = best_isa();
#if defined(__x86_64__)
  if (isa == Isa::Avx512 && __builtin_cpu_supports("avx512vnni")) return QIsa::Avx512Vnni;
#endif
  return isa == Isa::Portable ? QIsa::Portable : QIsa::Avx2;
}

// Stored value of a source byte: the left side is uint8, the right int8; a source of the other
// signedness flips the top bit (x + 128 for int8 -> uint8, x - 128 for uint8 -> int8).
inline uint8_t flip_of(bool src_signed, bool right) { return src_signed == right ? 0 : 0x80; }
// What the flip adds to every value (and so to the zero points).
inline int32_t offset_of(bool src_signed, bool right) {
  if (src_signed == right) return 0;
  return right ? -128 : 128;
}

// Left rows [r0, r1) of src (M x K) into dst (rows of Kp bytes), with their sums.
void pack_left_rows(int64_t K, const QMatrix& src, int64_t r0, int64_t r1, uint8_t* dst, int32_t* sums) {
  const int64_t Kp = qround4(K);
  const uint8_t flip = flip_of(src.is_signed, false);
  for (int64_t i = r0; i < r1; ++i) {
    uint8_t* d = dst + i * Kp;
    if (!src.trans) {
      const uint8_t* s = src.data + i * src.ld;
      for (int64_t k = 0; k < K; ++k) d[k] = uint8_t(s[k] ^ flip);
    } else {
      for (int64_t k = 0; k < K; ++k) d[k] = uint8_t(src.data[k * src.ld + i] ^ flip);
    }
    for (int64_t k = K; k < Kp; ++k) d[k] = 0;
    int32_t sum = 0;
    for (int64_t k = 0; k < K; ++k) sum += d[k];
    sums[i] = sum;
  }
}

// Right panels [p0, p1) of src (K x N): panel p at dst + p * Kp * nr, with the column sums.
void pack_right_panels(const QGemmArch& g, int64_t K, int64_t N, const QMatrix& src, int64_t p0, int64_t p1,
                       int8_t* dst, int32_t* sums) {
  const int nr = g.nr;
  const int64_t Kp = qround4(K);
  const uint8_t flip = flip_of(src.is_signed, true);
  // One group of 4 rows at a time across all the panels: the 4 source rows are read in order
  // (a panel at a time would read one cache line of each of K rows per panel, far apart).
  for (int64_t gk = 0; gk < Kp / 4; ++gk) {
    const uint8_t* rows[4];
    if (!src.trans)
      for (int t = 0; t < 4; ++t) rows[t] = 4 * gk + t < K ? src.data + (4 * gk + t) * src.ld : nullptr;
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t c0 = p * nr;
      const int cols = int(std::min<int64_t>(nr, N - c0));
      int8_t* dg = dst + p * Kp * nr + gk * nr * 4;
      int c = 0;
      if (!src.trans) {
#if defined(__x86_64__)
        if (rows[3]) {  // four whole rows: interleave 16 columns at a time (SSE2)
          const __m128i fx = _mm_set1_epi8(char(flip));
          for (; c + 16 <= cols; c += 16) {
            __m128i r0 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[0] + c0 + c)), fx);
            __m128i r1 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[1] + c0 + c)), fx);
            __m128i r2 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[2] + c0 + c)), fx);
            __m128i r3 = _mm_xor_si128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rows[3] + c0 + c)), fx);
            __m128i lo01 = _mm_unpacklo_epi8(r0, r1), hi01 = _mm_unpackhi_epi8(r0, r1);
            __m128i lo23 = _mm_unpacklo_epi8(r2, r3), hi23 = _mm_unpackhi_epi8(r2, r3);
            __m128i* o = reinterpret_cast<__m128i*>(dg + c * 4);
            _mm_storeu_si128(o, _mm_unpacklo_epi16(lo01, lo23));
            _mm_storeu_si128(o + 1, _mm_unpackhi_epi16(lo01, lo23));
            _mm_storeu_si128(o + 2, _mm_unpacklo_epi16(hi01, hi23));
            _mm_storeu_si128(o + 3, _mm_unpackhi_epi16(hi01, hi23));
          }
        }
#endif
        for (; c < cols; ++c)
          for (int t = 0; t < 4; ++t) dg[c * 4 + t] = rows[t] ? int8_t(rows[t][c0 + c] ^ flip) : int8_t(0);
      } else {
        for (; c < cols; ++c) {
          const uint8_t* s = src.data + (c0 + c) * src.ld;
          for (int t = 0; t < 4; ++t) {
            int64_t k = 4 * gk + t;
            dg[c * 4 + t] = k < K ? int8_t(s[k] ^ flip) : int8_t(0);
          }
        }
      }
      for (; c < nr; ++c) std::memset(dg + c * 4, 0, 4);
    }
  }
  // column sums, a group row at a time (contiguous: the compiler vectorizes it across columns)
  for (int64_t p = p0; p < p1; ++p) {
    const int8_t* d = dst + p * Kp * nr;
    const int64_t c0 = p * nr;
    const int cols = int(std::min<int64_t>(nr, N - c0));
    int32_t acc[64] = {};
    for (int64_t gk = 0; gk < Kp / 4; ++gk) {
      const int8_t* e = d + gk * nr * 4;
      for (int c = 0; c < nr; ++c) acc[c] += int32_t(e[c * 4]) + e[c * 4 + 1] + e[c * 4 + 2] + e[c * 4 + 3];
    }
    for (int c = 0; c < cols; ++c) sums[c0 + c] = acc[c];
  }
}

inline int64_t align64(int64_t b) { return (b + 63) / 64 * 64; }

// Corrections and output of one finished tile (rows [i0, i0 + m), columns [j0, j0 + n)).
}  // namespace

void qgemm_finish_portable(const int32_t* tile, int ldt, int64_t i0, int64_t j0, int m, int n, int64_t K, const QTileParams& a,
                           const QEpilogue& ep) {
  uint32_t v[64];
  for (int i = 0; i < m; ++i) {
    const int64_t gi = i0 + i;
    const uint32_t zli = uint32_t(a.zl[gi]);
    const uint32_t rk = uint32_t(a.rowsum[gi]) - uint32_t(K) * zli;
    const int32_t* t = tile + i * ldt;
    for (int j0n = 0; j0n < n; j0n += 64) {
      const int cn = std::min(64, n - j0n);
      const int32_t* zr = a.zr + j0 + j0n;
      const int32_t* cs = a.colsum + j0 + j0n;
      for (int j = 0; j < cn; ++j) v[j] = uint32_t(t[j0n + j]) - uint32_t(zr[j]) * rk - zli * uint32_t(cs[j]);
      const int64_t gj0 = j0 + j0n;
      auto pidx = [&](int64_t len, int j) -> int64_t { return len == 1 ? 0 : ep.per_row ? gi : gj0 + j; };
      switch (ep.out) {
        case QEpilogue::Out::Int32: {
          int32_t* o = static_cast<int32_t*>(ep.dst) + gi * ep.ldo + gj0;
          std::memcpy(o, v, size_t(cn) * sizeof(int32_t));
          break;
        }
        case QEpilogue::Out::Quant8: {
          uint8_t* o = static_cast<uint8_t*>(ep.dst) + gi * ep.ldo + gj0;
          const double lo = double(ep.lo - ep.yzp), hi = double(ep.hi - ep.yzp);
          for (int j = 0; j < cn; ++j) {
            int64_t acc = int64_t(int32_t(v[j]));
            if (ep.bias) acc += ep.bias[pidx(ep.bias_len, j)];
            double x = double(acc) * ep.mult[pidx(ep.mult_len, j)];
            // clamp before rounding (the clamp bounds are integers, so the order does not change
            // the result); NaN (a zero times an infinite multiplier) goes to lo
            x = x >= lo ? (x <= hi ? round_half_even(x) : hi) : lo;
            o[j] = uint8_t(int32_t(x) + ep.yzp);
          }
          break;
        }
        case QEpilogue::Out::Float: {
          float* o = static_cast<float*>(ep.dst) + gi * ep.ldo + gj0;
          for (int j = 0; j < cn; ++j) {
            float y = float(int32_t(v[j])) * ep.scale[pidx(ep.scale_len, j)];
            if (ep.fbias) y += ep.fbias[gj0 + j];
            o[j] = y;
          }
          break;
        }
      }
    }
  }
}

namespace {

// Fills dst[0..n) with the stored-value zero points of an operand (its own zero points plus the
// offset its packing adds).
void adjusted_zp(const QOperand& op, bool right, bool src_signed, int64_t n, int32_t* dst) {
  const int32_t off = offset_of(src_signed, right);
  for (int64_t i = 0; i < n; ++i) dst[i] = (op.zp ? op.zp[op.zp_len == 1 ? 0 : i] : 0) + off;
}

}  // namespace

QIsa qgemm_best_isa() {
  static const QIsa isa = detect();
  return isa;
}

const char* qisa_name(QIsa isa) {
  switch (isa) {
    case QIsa::Avx512Vnni: return "avx512vnni";
    case QIsa::Avx2: return "avx2";
    default: return "portable";
  }
}

const QGemmArch& qgemm_arch(QIsa isa) {
  switch (isa) {
    case QIsa::Avx512Vnni: return kVnni;
    case QIsa::Avx2: return kAvx2;
    default: return kPortable;
  }
}

namespace {

// A packed operand's description and buffers (data_bytes of packed values, nsums sums).
QPacked packed_shell(const QGemmArch& g, bool right, int64_t rows, int64_t cols, bool src_signed, int64_t data_bytes, int64_t nsums) {
  QPacked p;
  p.arch = &g;
  p.right = right;
  p.rows = rows;
  p.cols = cols;
  p.Kp = qround4(right ? rows : cols);
  p.src_signed = src_signed;
  p.data.reset(size_t(std::max<int64_t>(1, data_bytes)));
  p.sums.reset(size_t(std::max<int64_t>(1, nsums)));
  return p;
}

}  // namespace

QPacked qpack_left(const QGemmArch& g, int64_t M, int64_t K, const QMatrix& src) {
  QPacked p = packed_shell(g, false, M, K, src.is_signed, M * qround4(K), M);
  pack_left_rows(K, src, 0, M, p.data.data(), p.sums.data());
  return p;
}

QPacked qpack_right(const QGemmArch& g, int64_t K, int64_t N, const QMatrix& src) {
  const int64_t panels = (N + g.nr - 1) / g.nr;
  QPacked p = packed_shell(g, true, K, N, src.is_signed, panels * qround4(K) * g.nr, N);
  pack_right_panels(g, K, N, src, 0, panels, reinterpret_cast<int8_t*>(p.data.data()), p.sums.data());
  return p;
}

int64_t qgemm_workspace_bytes(const QGemmArch& g, int64_t M, int64_t N, int64_t K, bool left_packed, bool right_packed) {
  const int64_t Kp = qround4(K);
  int64_t b = align64(4 * M) + align64(4 * N);  // adjusted zero points
  if (!left_packed) b += align64(M * Kp) + align64(4 * M);
  if (!right_packed) b += align64((N + g.nr - 1) / g.nr * g.nr * Kp) + align64(4 * N);
  return b;
}

void qgemm(const QGemmArch& g, int64_t M, int64_t N, int64_t K, const QOperand& left, const QOperand& right,
           const QEpilogue& ep, ThreadPool* pool, uint8_t* workspace) {
  if (M <= 0 || N <= 0) return;
  const int64_t Kp = qround4(K);
  uint8_t* w = workspace;
  auto take = [&](int64_t bytes) {
    uint8_t* p = w;
    w += align64(bytes);
    return p;
  };
  QTileParams a{};
  int32_t* zl = reinterpret_cast<int32_t*>(take(4 * M));
  int32_t* zr = reinterpret_cast<int32_t*>(take(4 * N));
  const bool lsigned = left.packed ? left.packed->src_signed : left.src.is_signed;
  const bool rsigned = right.packed ? right.packed->src_signed : right.src.is_signed;
  adjusted_zp(left, false, lsigned, M, zl);
  adjusted_zp(right, true, rsigned, N, zr);
  a.zl = zl;
  a.zr = zr;
  const int64_t panels = (N + g.nr - 1) / g.nr;
  if (left.packed) {
    a.L = left.packed->data.data();
    a.rowsum = left.packed->sums.data();
  } else {
    uint8_t* L = take(M * Kp);
    int32_t* rs = reinterpret_cast<int32_t*>(take(4 * M));
    parallel_for(pool, M, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, K)),
                 [&](int64_t r0, int64_t r1) { pack_left_rows(K, left.src, r0, r1, L, rs); });
    a.L = L;
    a.rowsum = rs;
  }
  if (right.packed) {
    a.R = reinterpret_cast<const int8_t*>(right.packed->data.data());
    a.colsum = right.packed->sums.data();
  } else {
    int8_t* R = reinterpret_cast<int8_t*>(take(panels * g.nr * Kp));
    int32_t* cs = reinterpret_cast<int32_t*>(take(4 * N));
    parallel_for(pool, panels, 1, [&](int64_t p0, int64_t p1) { pack_right_panels(g, K, N, right.src, p0, p1, R, cs); });
    a.R = R;
    a.colsum = cs;
  }
  const int64_t tiles_m = (M + g.mr - 1) / g.mr;
  // Row tiles per task: one right panel (nr * Kp bytes) is reused by all of them from L1/L2.
  const int64_t block = std::min<int64_t>(tiles_m, std::max<int64_t>(1, 8));
  const int64_t blocks_m = (tiles_m + block - 1) / block;
  parallel_for(pool, panels * blocks_m, 1, [&](int64_t t0, int64_t t1) {
    alignas(64) int32_t tile[6 * 64];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p = t / blocks_m, bm = t % blocks_m;
      const int64_t j0 = p * g.nr;
      const int n = int(std::min<int64_t>(g.nr, N - j0));
      const int8_t* panel = a.R + p * Kp * g.nr;
      for (int64_t tm = bm * block; tm < std::min(tiles_m, (bm + 1) * block); ++tm) {
        const int64_t i0 = tm * g.mr;
        const int m = int(std::min<int64_t>(g.mr, M - i0));
        g.ukernel(Kp, a.L + i0 * Kp, panel, tile, m);
        g.finish(tile, g.nr, i0, j0, m, n, K, a, ep);
      }
    }
  });
}

void qgemm_reference(int64_t M, int64_t N, int64_t K, const QOperand& left, const QOperand& right, const QEpilogue& ep) {
  auto val = [](const QMatrix& s, int64_t i, int64_t j) -> int64_t {
    uint8_t b = s.trans ? s.data[j * s.ld + i] : s.data[i * s.ld + j];
    return s.is_signed ? int64_t(int8_t(b)) : int64_t(b);
  };
  std::vector<int32_t> tile(static_cast<size_t>(N));
  std::vector<int32_t> zero_l(size_t(std::max<int64_t>(M, 1)), 0), zero_r(size_t(std::max<int64_t>(N, 1)), 0),
      sums_l(size_t(std::max<int64_t>(M, 1)), 0), sums_r(size_t(std::max<int64_t>(N, 1)), 0);
  QTileParams a{};
  a.zl = zero_l.data();
  a.zr = zero_r.data();
  a.rowsum = sums_l.data();
  a.colsum = sums_r.data();
  for (int64_t i = 0; i < M; ++i) {
    const int64_t zl = left.zp ? left.zp[left.zp_len == 1 ? 0 : i] : 0;
    for (int64_t j = 0; j < N; ++j) {
      const int64_t zr = right.zp ? right.zp[right.zp_len == 1 ? 0 : j] : 0;
      int64_t acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += (val(left.src, i, k) - zl) * (val(right.src, k, j) - zr);
      tile[size_t(j)] = int32_t(uint32_t(uint64_t(acc)));
    }
    qgemm_finish_portable(tile.data(), int(N), i, 0, 1, int(N), K, a, ep);
  }
}

}  // namespace basalt::kernels
