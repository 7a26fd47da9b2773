// Integer GEMM for the quantized operators (MatMulInteger, QLinearMatMul, ConvInteger,
// QLinearConv): exact int32 results of
//     C[i, j] = sum_k (l[i, k] - zl[i]) * (r[k, j] - zr[j])
// for 8-bit operands l (the left matrix, M x K) and r (the right one, K x N), each int8 or uint8,
// with a zero point per row of l and per column of r (a scalar zero point is a constant row).
//
// Structure:
// - The hardware multiplies unsigned by signed bytes (AVX512-VNNI vpdpbusd: four u8 x s8 products
//   summed into an int32 lane). So the left operand is stored as uint8 and the right one as int8:
//   an int8 left gets +128 (x ^ 0x80), a uint8 right gets -128, and each zero point moves by the
//   same amount, which leaves every (value - zero point) difference unchanged. The product then
//   expands to
//       C = sum l'r' - zr'[j] * rowsum(l')[i] - zl'[i] * colsum(r')[j] + K * zl'[i] * zr'[j]
//   with the row and column sums taken while packing. All of it is computed in wrapping 32-bit
//   arithmetic: exact (mod 2^32), so the result is exact whenever the true sum fits int32, as the
//   operators' int32 outputs require. No instruction saturates (vpdpbusd, not vpdpbusds).
// - The right operand is packed into panels of nr columns, k in groups of 4: panel p holds
//   r'[k, p*nr + c] at [p*Kp*nr + (k/4)*nr*4 + c*4 + k%4] (Kp = K rounded up to 4; padding is 0).
//   A constant right operand (MatMul weights) is packed once at load; a convolution's im2col
//   matrix is packed per call straight from its rows.
// - The left operand is packed row-major as uint8 with rows of Kp elements, padding 0.
// - A microkernel computes an mr x nr tile over the whole K in registers; the driver hands out
//   (column panel, block of row tiles) tasks so that one right panel stays in cache while the rows
//   stream past it, and finishes each tile with the epilogue (the corrections above, then int32
//   out, requantization to 8 bits, or scaling to float) while it is in L1.
//
// Kernels (QIsa): AVX512-VNNI (6 x 64 tile, 24 zmm accumulators), AVX2 (4 x 16: the bytes of each
// group of 4 are split into even and odd ones widened to int16, and multiplied with vpmaddwd,
// whose pairwise int32 sums cannot overflow or saturate, unlike vpmaddubsw's int16 ones: exact
// for every input, where vpmaddubsw saturates on 255 * 127 * 2), and portable C++ (4 x 16). All
// read the same packed layouts.
// All three give bit-identical results; the tests compare them with a naive triple loop.
#pragma once

#include "core/pages.hpp"
#include "kernels/cpu.hpp"

#include <cstddef>
#include <cstdint>

namespace basalt {
class ThreadPool;
}

namespace basalt::kernels {

enum class QIsa { Portable = 0, Avx2 = 1, Avx512Vnni = 2 };

// The best integer kernel this CPU runs, under best_isa()'s cap (BASALT_ISA=avx2 gives Avx2,
// portable gives Portable; AVX-512 without VNNI gives Avx2).
QIsa qgemm_best_isa();
const char* qisa_name(QIsa isa);

struct QEpilogue;
// What the epilogue of a tile needs besides the QEpilogue: the packed operands' sums and the
// zero points of the stored values (the source's plus the packing offset), per row and column.
struct QTileParams {
  const uint8_t* L;
  const int32_t* rowsum;
  const int8_t* R;
  const int32_t* colsum;
  const int32_t* zl;  // [M]
  const int32_t* zr;  // [N]
};

struct QGemmArch {
  QIsa isa;
  int mr, nr;
  // tile (m <= mr rows, all nr columns) = sum over kp (a multiple of 4) of the packed left rows
  // (row i at left + i * kp) times one packed right panel; stored to c[i * nr + j].
  void (*ukernel)(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m);
  // Corrections and output of the finished tile (m rows, n columns, row stride ldt) whose element
  // (0, 0) is C's (i0, j0). Every arch's version gives the same bits.
  void (*finish)(const int32_t* tile, int ldt, int64_t i0, int64_t j0, int m, int n, int64_t K, const QTileParams& a,
                 const QEpilogue& ep);
};
const QGemmArch& qgemm_arch(QIsa isa);

inline int64_t qround4(int64_t k) { return (k + 3) / 4 * 4; }

// Round half to even (the quantization ops' rounding) of a double of magnitude below 2^51, by the
// 1.5 * 2^52 trick, exact in the default rounding mode; no libm call (callers clamp first).
inline double round_half_even(double x) {
  constexpr double kMagic = 6755399441055744.0;
  return (x + kMagic) - kMagic;  // not folded: the build has no -ffast-math
}

// Source of an 8-bit matrix: element (i, j) at data[i * ld + j], or data[j * ld + i] when trans.
struct QMatrix {
  const uint8_t* data = nullptr;  // the bytes of an int8 or uint8 tensor
  int64_t ld = 0;
  bool trans = false;
  bool is_signed = false;  // int8 (else uint8)
};

// An operand packed for one arch (weights, once at load): the left one as rows of Kp uint8, the
// right one as panels; sums: the per-row (left) or per-column (right) sums of the stored values.
struct QPacked {
  const QGemmArch* arch = nullptr;
  bool right = false;
  int64_t rows = 0, cols = 0, Kp = 0;  // [M, K] for left, [K, N] for right
  bool src_signed = false;             // the source's type (the stored one is fixed by the side)
  PageBuffer<uint8_t> data;
  PageBuffer<int32_t> sums;
  size_t bytes() const { return data.size() + sums.size() * sizeof(int32_t); }
};
QPacked qpack_left(const QGemmArch& g, int64_t M, int64_t K, const QMatrix& src);
QPacked qpack_right(const QGemmArch& g, int64_t K, int64_t N, const QMatrix& src);

// One operand of qgemm: packed already (packed != null, for this arch and these dims) or a source
// matrix packed per call into the workspace; zp: its zero points in the source's own values, one
// per row (left) or column (right), or a single one (zp_len 1), or none (null: 0).
struct QOperand {
  QMatrix src;
  const QPacked* packed = nullptr;
  const int32_t* zp = nullptr;
  int64_t zp_len = 0;
};

// What is done with each finished C[i, j] (after the zero-point corrections), with params per row
// (per_row: index i) or per column (index j); a vector of length 1 applies to all.
struct QEpilogue {
  enum class Out { Int32, Quant8, Float } out = Out::Int32;
  bool per_row = false;           // bias / mult / scale vectors index rows (else columns)
  const int32_t* bias = nullptr;  // added to C first (QLinearConv's int32 bias), may be null
  int64_t bias_len = 0;
  // Quant8: y = clamp(round_half_even(double(C + bias) * mult) + yzp, lo, hi) as 8 bits (int8
  // where lo < 0)
  const double* mult = nullptr;
  int64_t mult_len = 0;
  int32_t yzp = 0, lo = 0, hi = 255;
  // Float: y = float(C) * scale (+ fbias[j])
  const float* scale = nullptr;
  int64_t scale_len = 0;
  const float* fbias = nullptr;  // per column, may be null
  void* dst = nullptr;           // int32_t*, uint8_t* / int8_t*, or float*
  int64_t ldo = 0;               // row stride of the output, in elements
};

// Workspace qgemm needs for these operands: per-call packing of the unpacked ones and the
// adjusted zero points (64-byte aligned).
int64_t qgemm_workspace_bytes(const QGemmArch& g, int64_t M, int64_t N, int64_t K, bool left_packed, bool right_packed);

// out = epilogue(sum_k (l - zl) (r - zr)) for an M x N result, on `pool` (null: inline).
void qgemm(const QGemmArch& g, int64_t M, int64_t N, int64_t K, const QOperand& left, const QOperand& right,
           const QEpilogue& ep, ThreadPool* pool, uint8_t* workspace);

// The naive twin for the tests: int64 triple loop, then the same epilogue.
void qgemm_reference(int64_t M, int64_t N, int64_t K, const QOperand& left, const QOperand& right, const QEpilogue& ep);

// Microkernels per ISA (qgemm_avx512vnni.cpp, qgemm_avx2.cpp; call only where the CPU has them).
void qgemm_ukernel_vnni(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m);
void qgemm_ukernel_avx2(int64_t kp, const uint8_t* left, const int8_t* panel, int32_t* c, int m);
void qgemm_finish_portable(const int32_t* tile, int ldt, int64_t i0, int64_t j0, int m, int n, int64_t K, const QTileParams& a,
                           const QEpilogue& ep);
void qgemm_finish_avx512(const int32_t* tile, int ldt, int64_t i0, int64_t j0, int m, int n, int64_t K, const QTileParams& a,
                         const QEpilogue& ep);

}  // namespace basalt::kernels
