// Reference kernels: indexing and search ops.
//
// Gather, GatherElements, GatherND, Scatter, ScatterElements, ScatterND, OneHot, Compress,
// NonZero, Unique, TopK, ArgMax, ArgMin, ReverseSequence, CumSum.
//
// Every index read from a tensor is range-checked before it is used to address memory; an
// out-of-range index is an InvalidArgument error naming the node.
#include "ops/common.hpp"
#include "core/thread_pool.hpp"
#include "core/storage.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace basalt {
namespace {

// ---------------------------------------------------------------------------------------------
// Small helpers
// ---------------------------------------------------------------------------------------------

void add_versions(OpRegistry& r, const std::string& op, std::initializer_list<int> versions, const KernelFactory& f) {
  for (int v : versions) r.add(op, v, f);
}

int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t p = 1;
  for (size_t i = from; i < to && i < s.size(); ++i) p *= s[i];
  return p;
}

// Copy n elements of dtype dt from src[so..] to dst[dof..] (strings by assignment).
void copy_elems(DType dt, const void* src, int64_t so, void* dst, int64_t dof, int64_t n) {
  if (n <= 0) return;
  if (dt == DType::String) {
    const auto* s = static_cast<const std::string*>(src) + so;
    auto* d = static_cast<std::string*>(dst) + dof;
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
    return;
  }
  size_t es = dtype_size(dt);
  std::memcpy(static_cast<char*>(dst) + size_t(dof) * es, static_cast<const char*>(src) + size_t(so) * es,
              size_t(n) * es);
}

void check_copyable(const KernelContext& ctx, int input, DType dt) {
  if (dt == DType::Undefined || dtype_size(dt) == 0) unsupported_dtype(ctx, input, dt);
}

void check_index_dtype(const KernelContext& ctx, int input, const Tensor& t) {
  if (t.dtype() != DType::Int64 && t.dtype() != DType::Int32) unsupported_dtype(ctx, input, t.dtype());
}

bool is_numeric_bool(DType dt) {
  return visit_numeric_bool(dt, []<class T>() {});
}

// Index in [-dim, dim) -> [0, dim); anything else is an error.
int64_t fix_index(const KernelContext& ctx, int64_t idx, int64_t dim, const char* what) {
  if (idx < -dim || idx >= dim)
    ctx.fail(ErrorCode::InvalidArgument, std::string(what) + " index " + std::to_string(idx) +
                                             " is out of range for a dimension of size " + std::to_string(dim));
  return idx < 0 ? idx + dim : idx;
}

// Comparison key: 16-bit floats compare as float.
template <class T>
decltype(auto) key(const T& v) {
  if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>)
    return float(v);
  else
    return v;
}
template <class K>
bool is_nan_key(const K& k) {
  if constexpr (std::is_floating_point_v<K>)
    return std::isnan(k);
  else
    return false;
}
// Strict weak order with NaN greater than everything (and NaNs equal to each other).
template <class T>
bool less_nan_last(const T& a, const T& b) {
  auto x = key(a);
  auto y = key(b);
  if (is_nan_key(x)) return false;
  if (is_nan_key(y)) return true;
  return x < y;
}

// Integer add/mul that wrap around instead of overflowing (signed overflow is UB, and small
// unsigned types promote to int).
template <class T>
T add_wrap(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return T(uint64_t(a) + uint64_t(b));
  else
    return T(a + b);
}
template <class T>
T mul_wrap(T a, T b) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
    return T(uint64_t(a) * uint64_t(b));
  else
    return T(a * b);
}

enum class Reduction { None, Add, Mul, Max, Min };

Reduction parse_reduction(const Node& n) {
  std::string s = n.attr_string("reduction", "none");
  if (s == "none") return Reduction::None;
  if (s == "add") return Reduction::Add;
  if (s == "mul") return Reduction::Mul;
  if (s == "max") return Reduction::Max;
  if (s == "min") return Reduction::Min;
  n.fail(ErrorCode::InvalidModel, "unknown reduction '" + s + "' (expected none, add, mul, max or min)");
}

template <class T>
void reduce_into(T& dst, const T& src, Reduction red) {
  if constexpr (std::is_same_v<T, std::string>) {
    dst = src;  // reductions on strings are rejected before we get here
  } else {
    switch (red) {
      case Reduction::None: dst = src; break;
      case Reduction::Add: dst = add_wrap(dst, src); break;
      case Reduction::Mul: dst = mul_wrap(dst, src); break;
      case Reduction::Max: if (key(dst) < key(src)) dst = src; break;
      case Reduction::Min: if (key(src) < key(dst)) dst = src; break;
    }
  }
}

void check_reduction_dtype(const KernelContext& ctx, Reduction red, DType dt) {
  if (red != Reduction::None && !is_numeric_bool(dt))
    ctx.fail(ErrorCode::Unsupported, std::string("reduction is not supported for element type ") + dtype_name(dt));
}

// ---------------------------------------------------------------------------------------------
// Gather family
// ---------------------------------------------------------------------------------------------

// Gather reads its data input only bytewise (Tensor::read_bytes, or copy_elems for strings, which
// never come from the file in place), so it opts in to misaligned data (OpKernel::reads_bytes_only):
// an embedding table can then stay in place in the model file, and a run reads only the rows it
// gathers, with pread for a view of the file, so those rows' pages do not become resident.
class GatherKernel final : public OpKernel {
  static constexpr int64_t kMaxReadBytesRows = 4096;

 public:
  explicit GatherKernel(int64_t axis) : axis_(axis) {}
  bool reads_bytes_only(int input) const override { return input == 0; }
  void compute(KernelContext& ctx) const override {
    const int64_t axis = axis_;
    const Tensor& x = ctx.input(0);
    const Tensor& ind = ctx.input(1);
    check_copyable(ctx, 0, x.dtype());
    check_index_dtype(ctx, 1, ind);
    int r = x.rank();
    if (r == 0) ctx.fail(ErrorCode::InvalidArgument, "data must have rank >= 1");
    int ax = normalize_axis(ctx, axis, r);
    int64_t dim = x.dim(ax);
    std::vector<int64_t> idx = ind.to_int64_vector();
    for (auto& i : idx) i = fix_index(ctx, i, dim, "Gather");
    const Shape& xs = x.shape();
    Shape os(xs.begin(), xs.begin() + ax);
    os.insert(os.end(), ind.shape().begin(), ind.shape().end());
    os.insert(os.end(), xs.begin() + ax + 1, xs.end());
    int64_t outer = prod(xs, 0, size_t(ax)), inner = prod(xs, size_t(ax) + 1, xs.size());
    int64_t ni = int64_t(idx.size());
    Tensor& y = ctx.output_uninit(0, x.dtype(), os);  // every element is copied below
    if (x.dtype() == DType::String) {
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < ni; ++j)
          copy_elems(x.dtype(), x.raw(), (o * dim + idx[size_t(j)]) * inner, y.raw(), (o * ni + j) * inner, inner);
      return;
    }
    const size_t row = size_t(inner) * dtype_size(x.dtype());
    const int64_t nrows = outer * ni;
    if (row == 0 || nrows == 0) return;
    auto* dst = static_cast<char*>(y.raw());
    // read_bytes costs a system call per row for a view of the file; worth it for a few rows of a
    // large table (an embedding lookup), not when the gather reads much of the table anyway.
    const bool few_rows = nrows <= kMaxReadBytesRows && size_t(nrows) * row <= x.nbytes() / 4;
    const auto* src = static_cast<const char*>(x.raw());
    if (few_rows && x.storage() && x.storage()->file_fd >= 0) {
      read_rows(ctx, x, idx, outer, dim, ni, row, dst);
      return;
    }
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < ni; ++j) {
        size_t from = size_t(o * dim + idx[size_t(j)]) * row;
        char* to = dst + size_t(o * ni + j) * row;
        if (few_rows) x.read_bytes(from, row, to);
        else std::memcpy(to, src + from, row);
      }
  }

 private:
  // Rows gathered from a view of the model file, with as few system calls as the indices allow:
  // one read per run of consecutive rows (position ids 0..S-1 are one read), a row that occurs
  // again copied from the output row that already holds it (token type ids, repeated tokens), and
  // the reads shared by the pool's threads. BERT-mini at sequence 128 (`basalt profile`, three
  // alternating rounds): its word and position lookups were 2 x 128 reads of 1 KB; now 128 + 1,
  // Gather 0.31-0.35 -> 0.28 ms at 1 thread, 0.33-0.39 -> 0.21-0.25 ms at 2 threads. (A read
  // costs about 2 us of system call on this VM; the position ids alone were half of them.)
  static void read_rows(KernelContext& ctx, const Tensor& x, const std::vector<int64_t>& idx, int64_t outer, int64_t dim,
                        int64_t ni, size_t row, char* dst) {
    struct Read {
      int64_t from, to, rows;  // source row, first output row, rows
    };
    std::vector<Read> reads;
    std::vector<std::pair<int64_t, int64_t>> copies;  // (output row, output row that holds it)
    std::unordered_map<int64_t, int64_t> first;       // source row -> the output row read into
    first.reserve(size_t(outer * ni));
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t j = 0; j < ni;) {
        const int64_t from = o * dim + idx[size_t(j)], to = o * ni + j;
        auto [it, fresh] = first.try_emplace(from, to);
        if (!fresh) {
          copies.emplace_back(to, it->second);
          ++j;
          continue;
        }
        int64_t n = 1;
        while (j + n < ni && idx[size_t(j + n)] == idx[size_t(j)] + n && first.try_emplace(from + n, to + n).second) ++n;
        reads.push_back({from, to, n});
        j += n;
      }
    parallel_for(ctx.pool(), int64_t(reads.size()), 8, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const Read& rd = reads[size_t(r)];
        x.read_bytes(size_t(rd.from) * row, size_t(rd.rows) * row, dst + size_t(rd.to) * row);
      }
    });
    for (auto [to, held] : copies) std::memcpy(dst + size_t(to) * row, dst + size_t(held) * row, row);
  }

  int64_t axis_;
};

KernelFactory gather_factory() {
  return [](const Node& n) -> std::unique_ptr<OpKernel> { return std::make_unique<GatherKernel>(n.attr_int("axis", 0)); };
}

// Shared by GatherElements / ScatterElements: validates that `ind` has the rank of `x` and fits
// inside it on every axis but `ax`.
void check_elements_shapes(const KernelContext& ctx, const Tensor& x, const Tensor& ind, int ax) {
  if (ind.rank() != x.rank())
    ctx.fail(ErrorCode::InvalidArgument, "indices rank " + std::to_string(ind.rank()) + " must equal data rank " +
                                             std::to_string(x.rank()));
  for (int d = 0; d < x.rank(); ++d)
    if (d != ax && ind.dim(d) > x.dim(d))
      ctx.fail(ErrorCode::InvalidArgument, "indices shape " + shape_str(ind.shape()) + " exceeds data shape " +
                                               shape_str(x.shape()) + " on axis " + std::to_string(d));
}

// Calls fn(i, data_offset) for every element i of `ishape`, where data_offset is the offset of
// the corresponding data element with the axis coordinate replaced by idx[i].
template <class Fn>
void for_each_element_index(const KernelContext& ctx, const Shape& dshape, const Shape& ishape, int ax,
                            const std::vector<int64_t>& idx, const char* what, Fn&& fn) {
  int r = int(ishape.size());
  int64_t total = shape_numel(ishape);
  if (total == 0) return;
  std::vector<int64_t> ds = shape_strides(dshape);
  std::vector<int64_t> cnt(size_t(r), 0);
  int64_t base = 0;
  int64_t dim = dshape[size_t(ax)];
  for (int64_t i = 0; i < total; ++i) {
    int64_t k = fix_index(ctx, idx[size_t(i)], dim, what);
    fn(i, base + k * ds[size_t(ax)]);
    for (int d = r - 1; d >= 0; --d) {
      if (++cnt[size_t(d)] < ishape[size_t(d)]) {
        if (d != ax) base += ds[size_t(d)];
        break;
      }
      if (d != ax) base -= ds[size_t(d)] * (ishape[size_t(d)] - 1);
      cnt[size_t(d)] = 0;
    }
  }
}

KernelFactory gather_elements_factory() {
  return [](const Node& n) {
    int64_t axis = n.attr_int("axis", 0);
    return kernel([axis](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& ind = ctx.input(1);
      check_index_dtype(ctx, 1, ind);
      if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "data must have rank >= 1");
      int ax = normalize_axis(ctx, axis, x.rank());
      check_elements_shapes(ctx, x, ind, ax);
      std::vector<int64_t> idx = ind.to_int64_vector();
      Tensor& y = ctx.output(0, x.dtype(), ind.shape());
      if (!visit_all(x.dtype(), [&]<class T>() {
            const T* a = x.data<T>();
            T* b = y.data<T>();
            for_each_element_index(ctx, x.shape(), ind.shape(), ax, idx, "GatherElements",
                                   [&](int64_t i, int64_t off) { b[i] = a[off]; });
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  };
}

KernelFactory gather_nd_factory() {
  return [](const Node& n) {
    int64_t b = n.opset >= 12 ? n.attr_int("batch_dims", 0) : 0;
    if (b < 0) n.fail(ErrorCode::InvalidModel, "batch_dims must be >= 0");
    return kernel([b](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& ind = ctx.input(1);
      check_copyable(ctx, 0, x.dtype());
      if (ind.dtype() != DType::Int64) unsupported_dtype(ctx, 1, ind.dtype());
      int r = x.rank(), q = ind.rank();
      if (r < 1 || q < 1) ctx.fail(ErrorCode::InvalidArgument, "data and indices must have rank >= 1");
      if (b >= std::min(r, q))
        ctx.fail(ErrorCode::InvalidArgument, "batch_dims " + std::to_string(b) + " must be less than both ranks");
      int64_t k = ind.dim(q - 1);
      if (k < 0 || k > r - b)
        ctx.fail(ErrorCode::InvalidArgument, "indices last dimension " + std::to_string(k) +
                                                 " must be at most data rank - batch_dims = " + std::to_string(r - b));
      const Shape& xs = x.shape();
      const Shape& is = ind.shape();
      for (int64_t i = 0; i < b; ++i)
        if (xs[size_t(i)] != is[size_t(i)])
          ctx.fail(ErrorCode::InvalidArgument, "batch dimensions of data " + shape_str(xs) + " and indices " +
                                                   shape_str(is) + " differ");
      Shape os(is.begin(), is.end() - 1);
      os.insert(os.end(), xs.begin() + b + k, xs.end());
      int64_t B = prod(is, 0, size_t(b));
      int64_t M = prod(is, size_t(b), size_t(q - 1));
      int64_t slice = prod(xs, size_t(b + k), xs.size());
      int64_t xbatch = prod(xs, size_t(b), xs.size());
      std::vector<int64_t> st(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) st[size_t(j)] = prod(xs, size_t(b + j + 1), xs.size());
      const int64_t* idx = ind.data<int64_t>();
      Tensor& y = ctx.output(0, x.dtype(), os);
      for (int64_t bi = 0; bi < B; ++bi)
        for (int64_t m = 0; m < M; ++m) {
          int64_t row = bi * M + m;
          int64_t off = bi * xbatch;
          for (int64_t j = 0; j < k; ++j)
            off += fix_index(ctx, idx[row * k + j], xs[size_t(b + j)], "GatherND") * st[size_t(j)];
          copy_elems(x.dtype(), x.raw(), off, y.raw(), row * slice, slice);
        }
    });
  };
}

// ---------------------------------------------------------------------------------------------
// Scatter family
// ---------------------------------------------------------------------------------------------

KernelFactory scatter_elements_factory(bool allow_reduction) {
  return [allow_reduction](const Node& n) {
    int64_t axis = n.attr_int("axis", 0);
    Reduction red = allow_reduction && n.opset >= 16 ? parse_reduction(n) : Reduction::None;
    return kernel([axis, red](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& ind = ctx.input(1);
      const Tensor& upd = ctx.input(2);
      check_index_dtype(ctx, 1, ind);
      check_reduction_dtype(ctx, red, x.dtype());
      if (upd.dtype() != x.dtype())
        ctx.fail(ErrorCode::InvalidArgument, std::string("updates type ") + dtype_name(upd.dtype()) +
                                                 " differs from data type " + dtype_name(x.dtype()));
      if (upd.shape() != ind.shape())
        ctx.fail(ErrorCode::InvalidArgument, "updates shape " + shape_str(upd.shape()) +
                                                 " must equal indices shape " + shape_str(ind.shape()));
      if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "data must have rank >= 1");
      int ax = normalize_axis(ctx, axis, x.rank());
      check_elements_shapes(ctx, x, ind, ax);
      std::vector<int64_t> idx = ind.to_int64_vector();
      Tensor y = x.clone();
      if (!visit_all(x.dtype(), [&]<class T>() {
            const T* u = upd.data<T>();
            T* b = y.data<T>();
            for_each_element_index(ctx, x.shape(), ind.shape(), ax, idx, "ScatterElements",
                                   [&](int64_t i, int64_t off) { reduce_into(b[off], u[i], red); });
          }))
        unsupported_dtype(ctx, 0, x.dtype());
      ctx.set_output(0, Value(std::move(y)));
    });
  };
}

KernelFactory scatter_nd_factory() {
  return [](const Node& n) {
    Reduction red = n.opset >= 16 ? parse_reduction(n) : Reduction::None;
    return kernel([red](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& ind = ctx.input(1);
      const Tensor& upd = ctx.input(2);
      if (ind.dtype() != DType::Int64) unsupported_dtype(ctx, 1, ind.dtype());
      check_reduction_dtype(ctx, red, x.dtype());
      if (upd.dtype() != x.dtype())
        ctx.fail(ErrorCode::InvalidArgument, std::string("updates type ") + dtype_name(upd.dtype()) +
                                                 " differs from data type " + dtype_name(x.dtype()));
      int r = x.rank(), q = ind.rank();
      if (r < 1 || q < 1) ctx.fail(ErrorCode::InvalidArgument, "data and indices must have rank >= 1");
      int64_t k = ind.dim(q - 1);
      if (k < 1 || k > r)
        ctx.fail(ErrorCode::InvalidArgument, "indices last dimension " + std::to_string(k) + " must be in [1, " +
                                                 std::to_string(r) + "]");
      const Shape& xs = x.shape();
      const Shape& is = ind.shape();
      Shape us(is.begin(), is.end() - 1);
      us.insert(us.end(), xs.begin() + k, xs.end());
      if (upd.shape() != us)
        ctx.fail(ErrorCode::InvalidArgument, "updates shape " + shape_str(upd.shape()) + " must be " + shape_str(us));
      int64_t M = prod(is, 0, size_t(q - 1));
      int64_t slice = prod(xs, size_t(k), xs.size());
      std::vector<int64_t> st(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) st[size_t(j)] = prod(xs, size_t(j + 1), xs.size());
      const int64_t* idx = ind.data<int64_t>();
      // Validate every index before touching the output.
      std::vector<int64_t> offs(static_cast<size_t>(M));
      for (int64_t m = 0; m < M; ++m) {
        int64_t off = 0;
        for (int64_t j = 0; j < k; ++j) off += fix_index(ctx, idx[m * k + j], xs[size_t(j)], "ScatterND") * st[size_t(j)];
        offs[size_t(m)] = off;
      }
      Tensor y = x.clone();
      if (!visit_all(x.dtype(), [&]<class T>() {
            const T* u = upd.data<T>();
            T* b = y.data<T>();
            for (int64_t m = 0; m < M; ++m)
              for (int64_t e = 0; e < slice; ++e) reduce_into(b[offs[size_t(m)] + e], u[m * slice + e], red);
          }))
        unsupported_dtype(ctx, 0, x.dtype());
      ctx.set_output(0, Value(std::move(y)));
    });
  };
}

// ---------------------------------------------------------------------------------------------
// OneHot, Compress, NonZero
// ---------------------------------------------------------------------------------------------

KernelFactory one_hot_factory() {
  return [](const Node& n) {
    int64_t axis = n.attr_int("axis", -1);
    return kernel([axis](KernelContext& ctx) {
      const Tensor& ind = ctx.input(0);
      const Tensor& dep = ctx.input(1);
      const Tensor& vals = ctx.input(2);
      if (!is_numeric_bool(ind.dtype()) || ind.dtype() == DType::Bool) unsupported_dtype(ctx, 0, ind.dtype());
      if (!is_numeric_bool(dep.dtype()) || dep.dtype() == DType::Bool) unsupported_dtype(ctx, 1, dep.dtype());
      check_copyable(ctx, 2, vals.dtype());
      if (dep.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "depth must be a scalar or a 1-element tensor");
      if (vals.numel() != 2) ctx.fail(ErrorCode::InvalidArgument, "values must hold exactly 2 elements [off, on]");
      double dd = dep.get_double(0);
      if (!std::isfinite(dd) || dd < 1 || dd > 1e15)
        ctx.fail(ErrorCode::InvalidArgument, "depth must be a positive number, got " + std::to_string(dd));
      int64_t depth = int64_t(dd);
      int r = ind.rank();
      int ax = normalize_axis(ctx, axis, r + 1);
      const Shape& is = ind.shape();
      Shape os(is.begin(), is.begin() + ax);
      os.push_back(depth);
      os.insert(os.end(), is.begin() + ax, is.end());
      int64_t outer = prod(is, 0, size_t(ax)), inner = prod(is, size_t(ax), is.size());
      Tensor& y = ctx.output(0, vals.dtype(), os);
      int64_t total = y.numel();
      for (int64_t i = 0; i < total; ++i) copy_elems(vals.dtype(), vals.raw(), 0, y.raw(), i, 1);
      bool integral = !dtype_is_float(ind.dtype());
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t src = o * inner + i;
          int64_t v;
          if (integral) {
            v = ind.get_int(src);
          } else {
            double d = ind.get_double(src);
            if (!std::isfinite(d) || std::fabs(d) > 1e18) continue;  // out of range: all "off"
            v = int64_t(d);
          }
          if (v < 0) v += depth;
          if (v < 0 || v >= depth) continue;
          copy_elems(vals.dtype(), vals.raw(), 1, y.raw(), (o * depth + v) * inner + i, 1);
        }
    });
  };
}

KernelFactory compress_factory() {
  return [](const Node& n) {
    bool has_axis = n.has_attr("axis");
    int64_t axis = n.attr_int("axis", 0);
    return kernel([has_axis, axis](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& cond = ctx.input(1);
      check_copyable(ctx, 0, x.dtype());
      if (!is_numeric_bool(cond.dtype())) unsupported_dtype(ctx, 1, cond.dtype());
      if (cond.rank() != 1) ctx.fail(ErrorCode::InvalidArgument, "condition must be 1-D, got " + shape_str(cond.shape()));
      int64_t outer = 1, dim, inner = 1;
      int ax = 0;
      const Shape& xs = x.shape();
      if (has_axis) {
        if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1 when axis is given");
        ax = normalize_axis(ctx, axis, x.rank());
        outer = prod(xs, 0, size_t(ax));
        dim = xs[size_t(ax)];
        inner = prod(xs, size_t(ax) + 1, xs.size());
      } else {
        dim = x.numel();
      }
      std::vector<int64_t> sel;
      for (int64_t i = 0; i < cond.numel(); ++i) {
        if (cond.get_double(i) == 0) continue;
        if (i >= dim)
          ctx.fail(ErrorCode::InvalidArgument, "condition selects index " + std::to_string(i) +
                                                   " beyond the dimension size " + std::to_string(dim));
        sel.push_back(i);
      }
      int64_t c = int64_t(sel.size());
      Shape os;
      if (has_axis) {
        os = xs;
        os[size_t(ax)] = c;
      } else {
        os = {c};
      }
      Tensor& y = ctx.output(0, x.dtype(), os);
      for (int64_t o = 0; o < outer; ++o)
        for (int64_t j = 0; j < c; ++j)
          copy_elems(x.dtype(), x.raw(), (o * dim + sel[size_t(j)]) * inner, y.raw(), (o * c + j) * inner, inner);
    });
  };
}

KernelFactory non_zero_factory() {
  return [](const Node&) {
    return kernel([](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      std::vector<int64_t> nz;
      bool ok = visit_numeric_bool(x.dtype(), [&]<class T>() {
        const T* a = x.data<T>();
        for (int64_t i = 0; i < x.numel(); ++i)
          if (static_cast<double>(a[i]) != 0.0) nz.push_back(i);
      });
      if (!ok && x.dtype() == DType::String) {
        ok = true;
        const auto* a = x.data<std::string>();
        for (int64_t i = 0; i < x.numel(); ++i)
          if (!a[i].empty()) nz.push_back(i);
      }
      if (!ok) unsupported_dtype(ctx, 0, x.dtype());
      // A scalar behaves like a 1-element 1-D tensor (as numpy.nonzero does).
      Shape xs = x.rank() == 0 ? Shape{1} : x.shape();
      int r = int(xs.size());
      int64_t c = int64_t(nz.size());
      Tensor& y = ctx.output(0, DType::Int64, {int64_t(r), c});
      int64_t* out = y.data<int64_t>();
      std::vector<int64_t> st = shape_strides(xs);
      for (int64_t j = 0; j < c; ++j)
        for (int d = 0; d < r; ++d) out[d * c + j] = (nz[size_t(j)] / st[size_t(d)]) % xs[size_t(d)];
    });
  };
}

// ---------------------------------------------------------------------------------------------
// Unique
// ---------------------------------------------------------------------------------------------

KernelFactory unique_factory() {
  return [](const Node& n) {
    bool has_axis = n.has_attr("axis");
    int64_t axis = n.attr_int("axis", 0);
    bool sorted = n.attr_int("sorted", 1) != 0;
    return kernel([has_axis, axis, sorted](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Shape& xs = x.shape();
      int64_t outer = 1, nsl, inner = 1;
      int ax = 0;
      if (has_axis) {
        if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1 when axis is given");
        ax = normalize_axis(ctx, axis, x.rank());
        outer = prod(xs, 0, size_t(ax));
        nsl = xs[size_t(ax)];
        inner = prod(xs, size_t(ax) + 1, xs.size());
      } else {
        nsl = x.numel();
      }
      auto body = [&]<class T>() {
        const T* a = x.data<T>();
        auto elem = [&](int64_t s, int64_t o, int64_t i) -> const T& { return a[(o * nsl + s) * inner + i]; };
        auto less_slice = [&](int64_t p, int64_t q) {
          for (int64_t o = 0; o < outer; ++o)
            for (int64_t i = 0; i < inner; ++i) {
              const T& u = elem(p, o, i);
              const T& v = elem(q, o, i);
              if (less_nan_last(u, v)) return true;
              if (less_nan_last(v, u)) return false;
            }
          return false;
        };
        std::vector<int64_t> perm(static_cast<size_t>(nsl));
        std::iota(perm.begin(), perm.end(), int64_t(0));
        std::stable_sort(perm.begin(), perm.end(), less_slice);
        std::vector<int64_t> group_of(static_cast<size_t>(nsl)), first, counts;
        for (int64_t t = 0; t < nsl; ++t) {
          int64_t s = perm[size_t(t)];
          if (t == 0 || less_slice(perm[size_t(t - 1)], s)) {
            first.push_back(s);  // stable sort: the lowest original index of the group
            counts.push_back(0);
          }
          group_of[size_t(s)] = int64_t(first.size()) - 1;
          ++counts.back();
        }
        int64_t G = int64_t(first.size());
        std::vector<int64_t> order(static_cast<size_t>(G));
        std::iota(order.begin(), order.end(), int64_t(0));
        if (!sorted)
          std::sort(order.begin(), order.end(), [&](int64_t p, int64_t q) { return first[size_t(p)] < first[size_t(q)]; });
        std::vector<int64_t> rank_of(static_cast<size_t>(G));
        for (int64_t k = 0; k < G; ++k) rank_of[size_t(order[size_t(k)])] = k;

        Shape ys;
        if (has_axis) {
          ys = xs;
          ys[size_t(ax)] = G;
        } else {
          ys = {G};
        }
        Tensor& y = ctx.output(0, x.dtype(), ys);
        T* b = y.data<T>();
        for (int64_t o = 0; o < outer; ++o)
          for (int64_t k = 0; k < G; ++k)
            for (int64_t i = 0; i < inner; ++i) b[(o * G + k) * inner + i] = elem(first[size_t(order[size_t(k)])], o, i);
        if (ctx.has_output(1)) {
          int64_t* p = ctx.output(1, DType::Int64, {G}).data<int64_t>();
          for (int64_t k = 0; k < G; ++k) p[k] = first[size_t(order[size_t(k)])];
        }
        if (ctx.has_output(2)) {
          int64_t* p = ctx.output(2, DType::Int64, {nsl}).data<int64_t>();
          for (int64_t s = 0; s < nsl; ++s) p[s] = rank_of[size_t(group_of[size_t(s)])];
        }
        if (ctx.has_output(3)) {
          int64_t* p = ctx.output(3, DType::Int64, {G}).data<int64_t>();
          for (int64_t k = 0; k < G; ++k) p[k] = counts[size_t(order[size_t(k)])];
        }
      };
      bool ok = x.dtype() == DType::String ? (body.template operator()<std::string>(), true)
                                            : visit_numeric_bool(x.dtype(), body);
      if (!ok) unsupported_dtype(ctx, 0, x.dtype());
    });
  };
}

// ---------------------------------------------------------------------------------------------
// TopK, ArgMax, ArgMin
// ---------------------------------------------------------------------------------------------

KernelFactory top_k_factory() {
  return [](const Node& n) {
    int64_t axis = n.attr_int("axis", -1);
    bool k_attr = n.opset < 10;
    int64_t k_fixed = k_attr ? n.attr_int("k") : 0;
    bool largest = n.opset >= 11 ? n.attr_int("largest", 1) != 0 : true;
    // sorted=0 lets the implementation choose the order; we always return sorted results.
    if (n.opset >= 11) (void)n.attr_int("sorted", 1);
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      int64_t k = k_fixed;
      if (!k_attr) {
        const Tensor& kt = ctx.input(1);
        if (kt.dtype() != DType::Int64) unsupported_dtype(ctx, 1, kt.dtype());
        if (kt.numel() != 1) ctx.fail(ErrorCode::InvalidArgument, "K must hold exactly one element");
        k = kt.data<int64_t>()[0];
      }
      if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
      int ax = normalize_axis(ctx, axis, x.rank());
      const Shape& xs = x.shape();
      int64_t dim = xs[size_t(ax)];
      if (k < 0 || k > dim)
        ctx.fail(ErrorCode::InvalidArgument, "K = " + std::to_string(k) + " is out of range [0, " +
                                                 std::to_string(dim) + "] for axis " + std::to_string(ax));
      int64_t outer = prod(xs, 0, size_t(ax)), inner = prod(xs, size_t(ax) + 1, xs.size());
      Shape os = xs;
      os[size_t(ax)] = k;
      if (!visit_numeric(x.dtype(), [&]<class T>() {
            const T* a = x.data<T>();
            Tensor& vy = ctx.output(0, x.dtype(), os);
            T* vo = vy.data<T>();
            int64_t* io = nullptr;
            if (ctx.has_output(1)) io = ctx.output(1, DType::Int64, os).data<int64_t>();
            std::vector<int64_t> perm(static_cast<size_t>(dim));
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t i = 0; i < inner; ++i) {
                auto at = [&](int64_t j) -> const T& { return a[(o * dim + j) * inner + i]; };
                std::iota(perm.begin(), perm.end(), int64_t(0));
                auto cmp = [&](int64_t p, int64_t q) {
                  const T& u = at(p);
                  const T& v = at(q);
                  bool before = largest ? less_nan_last(v, u) : less_nan_last(u, v);
                  bool after = largest ? less_nan_last(u, v) : less_nan_last(v, u);
                  if (before) return true;
                  if (after) return false;
                  return p < q;  // ties: lower index first
                };
                std::partial_sort(perm.begin(), perm.begin() + k, perm.end(), cmp);
                for (int64_t j = 0; j < k; ++j) {
                  int64_t dst = (o * k + j) * inner + i;
                  vo[dst] = at(perm[size_t(j)]);
                  if (io) io[dst] = perm[size_t(j)];
                }
              }
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  };
}

KernelFactory arg_factory(bool is_max) {
  return [is_max](const Node& n) {
    int64_t axis = n.attr_int("axis", 0);
    bool keepdims = n.attr_int("keepdims", 1) != 0;
    bool last = n.opset >= 12 ? n.attr_int("select_last_index", 0) != 0 : false;
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
      int ax = normalize_axis(ctx, axis, x.rank());
      const Shape& xs = x.shape();
      int64_t dim = xs[size_t(ax)];
      if (dim == 0) ctx.fail(ErrorCode::InvalidArgument, "cannot reduce over an empty axis");
      int64_t outer = prod(xs, 0, size_t(ax)), inner = prod(xs, size_t(ax) + 1, xs.size());
      Shape os = xs;
      if (keepdims)
        os[size_t(ax)] = 1;
      else
        os.erase(os.begin() + ax);
      Tensor& y = ctx.output(0, DType::Int64, os);
      int64_t* out = y.data<int64_t>();
      if (!visit_numeric(x.dtype(), [&]<class T>() {
            const T* a = x.data<T>();
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t i = 0; i < inner; ++i) {
                auto at = [&](int64_t j) { return key(a[(o * dim + j) * inner + i]); };
                int64_t best = 0;
                auto bv = at(0);
                for (int64_t j = 1; j < dim; ++j) {
                  auto v = at(j);
                  bool better;
                  // NaN wins (like numpy): the first NaN, or the last with select_last_index.
                  if (is_nan_key(bv))
                    better = last && is_nan_key(v);
                  else if (is_nan_key(v))
                    better = true;
                  else if (is_max)
                    better = last ? !(v < bv) : bv < v;
                  else
                    better = last ? !(bv < v) : v < bv;
                  if (better) {
                    best = j;
                    bv = v;
                  }
                }
                out[o * inner + i] = best;
              }
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  };
}

// ---------------------------------------------------------------------------------------------
// ReverseSequence, CumSum
// ---------------------------------------------------------------------------------------------

KernelFactory reverse_sequence_factory() {
  return [](const Node& n) {
    int64_t time_axis = n.attr_int("time_axis", 0);
    int64_t batch_axis = n.attr_int("batch_axis", 1);
    if ((time_axis != 0 && time_axis != 1) || (batch_axis != 0 && batch_axis != 1) || time_axis == batch_axis)
      n.fail(ErrorCode::InvalidModel, "time_axis and batch_axis must be 0 and 1 (in either order), got " +
                                          std::to_string(time_axis) + " and " + std::to_string(batch_axis));
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& lt = ctx.input(1);
      check_index_dtype(ctx, 1, lt);
      if (x.rank() < 2) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 2");
      const Shape& xs = x.shape();
      int64_t T = xs[size_t(time_axis)], B = xs[size_t(batch_axis)];
      if (lt.rank() != 1 || lt.dim(0) != B)
        ctx.fail(ErrorCode::InvalidArgument, "sequence_lens shape " + shape_str(lt.shape()) + " must be [" +
                                                 std::to_string(B) + "]");
      std::vector<int64_t> lens = lt.to_int64_vector();
      for (int64_t l : lens)
        if (l < 0 || l > T)
          ctx.fail(ErrorCode::InvalidArgument, "sequence length " + std::to_string(l) + " is out of range [0, " +
                                                   std::to_string(T) + "]");
      std::vector<int64_t> st = shape_strides(xs);
      int64_t ts = st[size_t(time_axis)], bs = st[size_t(batch_axis)];
      Tensor& y = ctx.output(0, x.dtype(), xs);
      if (!visit_all(x.dtype(), [&]<class E>() {
            const E* a = x.data<E>();
            E* b = y.data<E>();
            for (int64_t i = 0; i < x.numel(); ++i) {
              int64_t t = (i / ts) % T, bi = (i / bs) % B;
              int64_t l = lens[size_t(bi)];
              b[i] = t < l ? a[i + (l - 1 - 2 * t) * ts] : a[i];
            }
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  };
}

template <class T>
struct acc_of {
  using type = T;
};
template <>
struct acc_of<float16> {
  using type = float;
};
template <>
struct acc_of<bfloat16> {
  using type = float;
};

KernelFactory cum_sum_factory() {
  return [](const Node& n) {
    bool exclusive = n.attr_int("exclusive", 0) != 0;
    bool reverse = n.attr_int("reverse", 0) != 0;
    return kernel([=](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const Tensor& at = ctx.input(1);
      check_index_dtype(ctx, 1, at);
      if (at.numel() != 1 || at.rank() > 1)
        ctx.fail(ErrorCode::InvalidArgument, "axis must be a scalar, got shape " + shape_str(at.shape()));
      const Shape& xs = x.shape();
      if (x.rank() == 0) ctx.fail(ErrorCode::InvalidArgument, "input must have rank >= 1");
      int ax = normalize_axis(ctx, at.get_int(0), x.rank());
      int64_t outer = prod(xs, 0, size_t(ax)), dim = xs[size_t(ax)], inner = prod(xs, size_t(ax) + 1, xs.size());
      Tensor& y = ctx.output(0, x.dtype(), xs);
      if (x.dtype() == DType::Bool ||
          !visit_numeric(x.dtype(), [&]<class T>() {
            using A = typename acc_of<T>::type;
            const T* a = x.data<T>();
            T* b = y.data<T>();
            for (int64_t o = 0; o < outer; ++o)
              for (int64_t i = 0; i < inner; ++i) {
                A acc = A(0);
                for (int64_t s = 0; s < dim; ++s) {
                  int64_t j = reverse ? dim - 1 - s : s;
                  int64_t p = (o * dim + j) * inner + i;
                  if (exclusive) {
                    b[p] = T(acc);
                    acc = add_wrap(acc, A(a[p]));
                  } else {
                    acc = add_wrap(acc, A(a[p]));
                    b[p] = T(acc);
                  }
                }
              }
          }))
        unsupported_dtype(ctx, 0, x.dtype());
    });
  };
}

// TensorScatter (opset 24): KV-cache style update of past_cache along the sequence axis.
KernelFactory tensor_scatter_factory() {
  return [](const Node& n) {
    int64_t axis = n.attr_int("axis", -2);
    std::string mode = n.attr_string("mode", "linear");
    if (mode != "linear" && mode != "circular")
      n.fail(ErrorCode::InvalidModel, "mode must be 'linear' or 'circular', got '" + mode + "'");
    bool circular = mode == "circular";
    return kernel([axis, circular](KernelContext& ctx) {
      const Tensor& past = ctx.input(0);
      const Tensor& upd = ctx.input(1);
      check_copyable(ctx, 0, past.dtype());
      if (upd.dtype() != past.dtype())
        ctx.fail(ErrorCode::InvalidArgument, std::string("update type ") + dtype_name(upd.dtype()) +
                                                 " differs from past_cache type " + dtype_name(past.dtype()));
      int r = past.rank();
      if (r < 2) ctx.fail(ErrorCode::InvalidArgument, "past_cache must have rank >= 2");
      int ax = normalize_axis(ctx, axis, r);
      if (ax == 0) ctx.fail(ErrorCode::InvalidArgument, "axis must not be the batch axis 0");
      const Shape& ps = past.shape();
      const Shape& us = upd.shape();
      bool shape_ok = upd.rank() == r;
      for (int d = 0; shape_ok && d < r; ++d)
        if (d != ax && us[size_t(d)] != ps[size_t(d)]) shape_ok = false;
      if (!shape_ok || us[size_t(ax)] > ps[size_t(ax)])
        ctx.fail(ErrorCode::InvalidArgument, "update shape " + shape_str(us) + " is incompatible with past_cache shape " +
                                                 shape_str(ps) + " along axis " + std::to_string(ax));
      int64_t B = ps[0], maxlen = ps[size_t(ax)], seqlen = us[size_t(ax)];
      std::vector<int64_t> wi(static_cast<size_t>(B), 0);
      if (ctx.has_input(2)) {
        const Tensor& w = ctx.input(2);
        check_index_dtype(ctx, 2, w);
        if (w.numel() != B)
          ctx.fail(ErrorCode::InvalidArgument, "write_indices shape " + shape_str(w.shape()) + " must be [" +
                                                   std::to_string(B) + "]");
        wi = w.to_int64_vector();
      }
      for (int64_t b = 0; b < B; ++b) {
        int64_t w = wi[size_t(b)];
        if (w < 0 || (!circular && w + seqlen > maxlen))
          ctx.fail(ErrorCode::InvalidArgument, "write index " + std::to_string(w) + " with sequence length " +
                                                   std::to_string(seqlen) + " does not fit max_sequence_length " +
                                                   std::to_string(maxlen));
      }
      int64_t outer = prod(ps, 0, size_t(ax)), inner = prod(ps, size_t(ax) + 1, ps.size());
      int64_t per_batch = prod(ps, 1, size_t(ax));
      Tensor y = past.clone();
      for (int64_t o = 0; o < outer; ++o) {
        int64_t b = o / per_batch;
        for (int64_t s = 0; s < seqlen; ++s) {
          int64_t pos = wi[size_t(b)] + s;
          if (circular) pos %= maxlen;
          copy_elems(past.dtype(), upd.raw(), (o * seqlen + s) * inner, y.raw(), (o * maxlen + pos) * inner, inner);
        }
      }
      ctx.set_output(0, Value(std::move(y)));
    });
  };
}

}  // namespace

void register_indexing_ops(OpRegistry& r) {
  add_versions(r, "Gather", {1, 11, 13}, gather_factory());
  add_versions(r, "GatherElements", {11, 13}, gather_elements_factory());
  add_versions(r, "GatherND", {11, 12, 13}, gather_nd_factory());
  add_versions(r, "Scatter", {9, 11}, scatter_elements_factory(false));
  add_versions(r, "ScatterElements", {11, 13, 16, 18}, scatter_elements_factory(true));
  add_versions(r, "ScatterND", {11, 13, 16, 18}, scatter_nd_factory());
  add_versions(r, "OneHot", {9, 11}, one_hot_factory());
  add_versions(r, "Compress", {9, 11}, compress_factory());
  add_versions(r, "NonZero", {9, 13}, non_zero_factory());
  add_versions(r, "Unique", {11}, unique_factory());
  add_versions(r, "TopK", {1, 10, 11, 24}, top_k_factory());
  add_versions(r, "ArgMax", {1, 11, 12, 13}, arg_factory(true));
  add_versions(r, "ArgMin", {1, 11, 12, 13}, arg_factory(false));
  add_versions(r, "ReverseSequence", {10}, reverse_sequence_factory());
  add_versions(r, "CumSum", {11, 14}, cum_sum_factory());
  add_versions(r, "TensorScatter", {24}, tensor_scatter_factory());
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  for (const char* op : {"ArgMax", "ArgMin"}) r.def(op).infer(shapes::argreduce);
  for (const char* op : {"Compress", "NonZero", "OneHot", "TopK", "Unique"}) r.def(op).data_dependent_shape();
  for (const char* op : {"CumSum", "ReverseSequence", "Scatter", "ScatterElements", "ScatterND"}) r.def(op).infer_symbolic(shapes::same);
  r.def("Gather").infer(shapes::gather);
  r.def("GatherElements").infer_symbolic(shapes::gather_elements);
  r.def("GatherND").infer(shapes::gather_nd);
  r.def("TensorScatter").infer_symbolic(shapes::tensor_scatter);
}

}  // namespace basalt
