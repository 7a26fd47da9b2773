// Linear algebra: Einsum, Det.
#include "ops/common.hpp"

#include "kernels/activation.hpp"
#include "kernels/eltwise.hpp"
#include "kernels/lrn.hpp"
#include "core/thread_pool.hpp"

#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>
#include <map>
#include <type_traits>

namespace basalt {

namespace {

// ---------------------------------------------------------------------------------------------
// Einsum
// ---------------------------------------------------------------------------------------------

struct EinsumSpec {
  std::vector<std::string> inputs;  // terms, ellipsis kept as "..."
  std::string output;
  bool explicit_output = false;
};

EinsumSpec parse_einsum(const Node& n, const std::string& eq_raw) {
  std::string eq;
  for (char c : eq_raw)
    if (c != ' ' && c != '\t') eq += c;
  EinsumSpec s;
  std::string lhs = eq;
  size_t arrow = eq.find("->");
  if (arrow != std::string::npos) {
    lhs = eq.substr(0, arrow);
    s.output = eq.substr(arrow + 2);
    s.explicit_output = true;
  }
  size_t start = 0;
  while (true) {
    size_t comma = lhs.find(',', start);
    s.inputs.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  auto check_term = [&](const std::string& t) {
    size_t e = t.find("...");
    if (e != std::string::npos && t.find("...", e + 3) != std::string::npos)
      n.fail(ErrorCode::InvalidModel, "equation '" + eq_raw + "' has more than one ellipsis in a term");
    for (size_t i = 0; i < t.size(); ++i) {
      if (e != std::string::npos && i >= e && i < e + 3) continue;
      if (!std::isalpha(static_cast<unsigned char>(t[i])))
        n.fail(ErrorCode::InvalidModel, "equation '" + eq_raw + "' has an invalid character '" + t[i] + "'");
    }
  };
  for (auto& t : s.inputs) check_term(t);
  if (s.explicit_output) check_term(s.output);
  return s;
}

// Label list for a term: letters as their char code (>= 0), ellipsis dims as -1-k (k = position within
// the broadcast ellipsis, counted so that ellipsis dims are right-aligned across inputs).
std::vector<int> term_labels(const KernelContext& ctx, const std::string& term, int rank, int ell_rank, bool is_output,
                             int* my_ell) {
  std::vector<int> labels;
  size_t e = term.find("...");
  int letters = int(term.size()) - (e == std::string::npos ? 0 : 3);
  int ne = 0;
  if (e == std::string::npos) {
    if (!is_output && letters != rank)
      ctx.fail(ErrorCode::InvalidArgument, "einsum term '" + term + "' has " + std::to_string(letters) +
                                               " labels but the input has rank " + std::to_string(rank));
  } else {
    ne = is_output ? ell_rank : rank - letters;
    if (ne < 0)
      ctx.fail(ErrorCode::InvalidArgument, "einsum term '" + term + "' has more labels than the input rank " +
                                               std::to_string(rank));
  }
  if (my_ell) *my_ell = ne;
  for (size_t i = 0; i < term.size(); ++i) {
    if (e != std::string::npos && i == e) {
      for (int k = 0; k < ne; ++k) labels.push_back(-1 - (ell_rank - ne + k));
      i += 2;
      continue;
    }
    labels.push_back(int(static_cast<unsigned char>(term[i])));
  }
  return labels;
}

void register_einsum(OpRegistry& r) {
  r.add("Einsum", 12, [](const Node& n) {
    std::string eq = n.attr_string("equation");
    EinsumSpec spec = parse_einsum(n, eq);
    return kernel([=](KernelContext& ctx) {
      int ni = ctx.num_inputs();
      if (ni != int(spec.inputs.size()))
        ctx.fail(ErrorCode::InvalidArgument, "equation has " + std::to_string(spec.inputs.size()) + " terms but the node has " +
                                                 std::to_string(ni) + " inputs");
      DType dt = ctx.input(0).dtype();
      for (int i = 0; i < ni; ++i) {
        if (ctx.input(i).dtype() != dt) ctx.fail(ErrorCode::InvalidArgument, "all inputs must have the same type");
      }
      if (dt == DType::Bool || !visit_numeric(dt, []<class T>() {})) unsupported_dtype(ctx, 0, dt);
      // ellipsis rank
      int ell_rank = 0;
      for (int i = 0; i < ni; ++i) {
        const std::string& t = spec.inputs[size_t(i)];
        size_t e = t.find("...");
        if (e != std::string::npos) ell_rank = std::max(ell_rank, ctx.input(i).rank() - int(t.size() - 3));
      }
      std::vector<std::vector<int>> in_labels(static_cast<size_t>(ni));
      std::map<int, int64_t> size;  // label -> dim
      std::map<int, int> count;
      for (int i = 0; i < ni; ++i) {
        const Tensor& x = ctx.input(i);
        in_labels[size_t(i)] = term_labels(ctx, spec.inputs[size_t(i)], x.rank(), ell_rank, false, nullptr);
        for (int d = 0; d < x.rank(); ++d) {
          int l = in_labels[size_t(i)][size_t(d)];
          int64_t dim = x.dim(d);
          ++count[l];
          auto it = size.find(l);
          if (it == size.end()) {
            size[l] = dim;
          } else if (it->second != dim) {
            if (l < 0 && dim == 1) continue;
            if (l < 0 && it->second == 1) {
              it->second = dim;
              continue;
            }
            ctx.fail(ErrorCode::InvalidArgument, std::string("einsum dimension mismatch for label '") +
                                                     (l >= 0 ? std::string(1, char(l)) : std::string("...")) + "': " +
                                                     std::to_string(it->second) + " vs " + std::to_string(dim));
          }
        }
      }
      std::vector<int> out_labels;
      if (spec.explicit_output) {
        out_labels = term_labels(ctx, spec.output, 0, ell_rank, true, nullptr);
        for (int l : out_labels) {
          if (l >= 0 && !size.count(l))
            ctx.fail(ErrorCode::InvalidArgument, std::string("output label '") + char(l) + "' does not appear in inputs");
          if (std::count(out_labels.begin(), out_labels.end(), l) > 1)
            ctx.fail(ErrorCode::InvalidArgument, "output labels must be unique");
        }
      } else {
        for (int k = 0; k < ell_rank; ++k) out_labels.push_back(-1 - k);
        for (auto& [l, c] : count)
          if (l >= 0 && c == 1) out_labels.push_back(l);
      }
      for (int l : out_labels)
        if (!size.count(l)) size[l] = 1;  // ellipsis dims not present in any input (rank 0)
      // summed labels
      std::vector<int> sum_labels;
      for (auto& [l, d] : size)
        if (std::find(out_labels.begin(), out_labels.end(), l) == out_labels.end()) sum_labels.push_back(l);
      std::vector<int> all = out_labels;
      all.insert(all.end(), sum_labels.begin(), sum_labels.end());
      std::map<int, size_t> pos;
      for (size_t k = 0; k < all.size(); ++k) pos[all[k]] = k;
      std::vector<int64_t> dims(all.size());
      for (size_t k = 0; k < all.size(); ++k) dims[k] = size[all[k]];
      // strides of each input per loop label
      std::vector<std::vector<int64_t>> st(size_t(ni), std::vector<int64_t>(all.size(), 0));
      for (int i = 0; i < ni; ++i) {
        const Tensor& x = ctx.input(i);
        auto xs = shape_strides(x.shape());
        for (int d = 0; d < x.rank(); ++d) {
          if (x.dim(d) == 1 && size[in_labels[size_t(i)][size_t(d)]] != 1) continue;  // broadcast
          st[size_t(i)][pos[in_labels[size_t(i)][size_t(d)]]] += xs[size_t(d)];
        }
      }
      Shape out_shape;
      for (int l : out_labels) out_shape.push_back(size[l]);
      Tensor& y = ctx.output(0, dt, out_shape);
      int64_t n_out = shape_numel(out_shape);
      int64_t n_sum = 1;
      for (size_t k = out_labels.size(); k < all.size(); ++k) n_sum *= dims[k];
      visit_numeric(dt, [&]<class T>() {
        using A = std::conditional_t<std::is_integral_v<T>, std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>, double>;
        std::vector<const T*> ptr(static_cast<size_t>(ni));
        for (int i = 0; i < ni; ++i) ptr[size_t(i)] = ctx.input(i).data<T>();
        T* out = y.data<T>();
        std::vector<int64_t> idx(all.size(), 0);
        std::vector<int64_t> off(size_t(ni), 0);
        size_t no = out_labels.size();
        for (int64_t o = 0; o < n_out; ++o) {
          A acc = 0;
          if (n_sum > 0) {
            for (int64_t s = 0; s < n_sum; ++s) {
              A prod = 1;
              for (int i = 0; i < ni; ++i) prod = A(prod * A(ptr[size_t(i)][off[size_t(i)]]));
              acc = A(acc + prod);
              // advance summed index
              for (size_t d = all.size(); d-- > no;) {
                if (++idx[d] < dims[d]) {
                  for (int i = 0; i < ni; ++i) off[size_t(i)] += st[size_t(i)][d];
                  break;
                }
                for (int i = 0; i < ni; ++i) off[size_t(i)] -= st[size_t(i)][d] * (dims[d] - 1);
                idx[d] = 0;
              }
            }
          }
          out[o] = T(acc);
          for (size_t d = no; d-- > 0;) {
            if (++idx[d] < dims[d]) {
              for (int i = 0; i < ni; ++i) off[size_t(i)] += st[size_t(i)][d];
              break;
            }
            for (int i = 0; i < ni; ++i) off[size_t(i)] -= st[size_t(i)][d] * (dims[d] - 1);
            idx[d] = 0;
          }
        }
      });
    });
  });
}

// ---------------------------------------------------------------------------------------------
// Det
// ---------------------------------------------------------------------------------------------

void register_det(OpRegistry& r) {
  for (int v : {11, 22}) {
    r.add("Det", v, [](const Node&) {
      return kernel([](KernelContext& ctx) {
        const Tensor& x = ctx.input(0);
        require_float(ctx, 0, x.dtype());
        if (x.rank() < 2 || x.dim(-1) != x.dim(-2))
          ctx.fail(ErrorCode::InvalidArgument, "input must have shape [..., M, M], got " + shape_str(x.shape()));
        int64_t M = x.dim(-1);
        Shape os(x.shape().begin(), x.shape().end() - 2);
        int64_t B = shape_numel(os);
        std::vector<double> xs = to_dvec(ctx, 0, x);
        std::vector<double> res(static_cast<size_t>(B));
        std::vector<double> a(static_cast<size_t>(M * M));
        for (int64_t b = 0; b < B; ++b) {
          std::copy(xs.begin() + b * M * M, xs.begin() + (b + 1) * M * M, a.begin());
          double det = 1;
          for (int64_t c = 0; c < M; ++c) {
            int64_t piv = c;
            for (int64_t rr = c + 1; rr < M; ++rr)
              if (std::fabs(a[size_t(rr * M + c)]) > std::fabs(a[size_t(piv * M + c)])) piv = rr;
            if (a[size_t(piv * M + c)] == 0) {
              det = 0;
              break;
            }
            if (piv != c) {
              for (int64_t k = 0; k < M; ++k) std::swap(a[size_t(c * M + k)], a[size_t(piv * M + k)]);
              det = -det;
            }
            double d = a[size_t(c * M + c)];
            det *= d;
            for (int64_t rr = c + 1; rr < M; ++rr) {
              double f = a[size_t(rr * M + c)] / d;
              if (f == 0) continue;
              for (int64_t k = c; k < M; ++k) a[size_t(rr * M + k)] -= f * a[size_t(c * M + k)];
            }
          }
          res[size_t(b)] = det;
        }
        from_dvec(ctx.output(0, x.dtype(), os), res);
      });
    });
  }
}

}  // namespace

void register_linalg_ops(OpRegistry& r) {
  register_einsum(r);
  register_det(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("Det").infer(shapes::det);
  r.def("Einsum").infer(shapes::einsum);
}

}  // namespace basalt
