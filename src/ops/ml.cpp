// Classic ML ops of the ai.onnx.ml domain: Binarizer, ArrayFeatureExtractor, LabelEncoder, TreeEnsemble.
#include "ops/common.hpp"
#include "kernels/tree_ensemble.hpp"

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

// Copies element si of src into element di of dst (same dtype).
void copy_element(const KernelContext& ctx, Tensor& dst, int64_t di, const Tensor& src, int64_t si) {
  if (!visit_all(dst.dtype(), [&]<class T>() { dst.data<T>()[di] = src.data<T>()[si]; }))
    ctx.fail(ErrorCode::Unsupported, std::string("type ") + dtype_name(dst.dtype()) + " is not supported");
}

}  // namespace

static void register_binarizer(OpRegistry& r) {
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
}

static void register_arrayfeatureextractor(OpRegistry& r) {
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
}

static void register_labelencoder(OpRegistry& r) {
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
}

namespace {

// A TreeEnsemble (opset 5) model from its attributes: nodes, leaves, membership sets, checked.
struct TreeModel {
  std::vector<int64_t> feat, tid, fid, tleaf, fleaf, mvt, member_set;
  std::vector<uint8_t> mode;
  std::vector<double> split;
  std::vector<std::vector<double>> members;
  std::vector<int64_t> leaf_target, roots;
  std::vector<double> leaf_w;
  int64_t n_targets = 1, agg = 1, post = 0;
};

std::shared_ptr<const TreeModel> parse_tree_ensemble(const Node& n) {
  auto t = std::make_shared<TreeModel>();
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
  return t;
}

}  // namespace

// The compiled evaluator (kernels/tree_ensemble.hpp) for a parsed TreeEnsemble: branch nodes keep
// their indices, leaf j becomes node nodes + j. Its checks (cycles, missing children) are errors
// of the node at session creation.
static std::shared_ptr<const kernels::TreeEnsemble> compile_tree_ensemble(const Node& n, const TreeModel& t, bool double_splits) {
  kernels::TreeEnsembleSpec spec;
  const int64_t nn = int64_t(t.feat.size());
  spec.n_targets = t.n_targets;
  spec.double_thresholds = double_splits;
  spec.roots = t.roots;
  spec.nodes.resize(size_t(nn) + t.leaf_w.size());
  for (int64_t i = 0; i < nn; ++i) {
    auto& d = spec.nodes[size_t(i)];
    d.mode = kernels::TreeMode(t.mode[size_t(i)]);
    d.feature = t.feat[size_t(i)];
    d.value = t.split[size_t(i)];
    d.true_child = t.tleaf[size_t(i)] ? nn + t.tid[size_t(i)] : t.tid[size_t(i)];
    d.false_child = t.fleaf[size_t(i)] ? nn + t.fid[size_t(i)] : t.fid[size_t(i)];
    d.missing_true = !t.mvt.empty() && t.mvt[size_t(i)] != 0;
    if (t.member_set[size_t(i)] >= 0) d.members = t.members[size_t(t.member_set[size_t(i)])];
  }
  for (size_t j = 0; j < t.leaf_w.size(); ++j) spec.nodes[size_t(nn) + j].weights = {{t.leaf_target[j], t.leaf_w[j]}};
  try {
    return std::make_shared<const kernels::TreeEnsemble>(kernels::TreeEnsemble::build(spec));
  } catch (const std::invalid_argument& e) {
    n.fail(ErrorCode::InvalidModel, e.what());
  }
}

static void register_treeensemble(OpRegistry& r) {
  // ---- ai.onnx.ml: TreeEnsemble (opset 5) ----
  r.add("ai.onnx.ml", "TreeEnsemble", 5, INT_MAX, [](const Node& n) {
    auto t = parse_tree_ensemble(n);
    auto e = compile_tree_ensemble(n, *t, n.attr_tensor("nodes_splits").dtype() == DType::Double);
    // The kernel keeps only the compiled layout, not the parsed attribute arrays.
    const int64_t T = t->n_targets;
    const auto agg = kernels::TreeAgg(t->agg);
    const auto post = kernels::PostTransform(t->post);
    return kernel([e, T, agg, post](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      if (x.rank() != 1 && x.rank() != 2) ctx.fail(ErrorCode::InvalidArgument, "input must be [N, F], got " + shape_str(x.shape()));
      int64_t N = x.rank() == 2 ? x.dim(0) : 1, F = x.dim(-1);
      if (e->max_feature() >= F)
        ctx.fail(ErrorCode::InvalidArgument, "model uses feature " + std::to_string(e->max_feature()) + " but input has " + std::to_string(F));
      int64_t NT;
      if (__builtin_mul_overflow(N, T, &NT))
        ctx.fail(ErrorCode::InvalidArgument, "output [" + std::to_string(N) + ", n_targets=" + std::to_string(T) + "] is too large");
      // The output first (its allocation refuses absurd n_targets), then the scores.
      Tensor& y = ctx.output(0, x.dtype(), {N, T});
      if (NT == 0) return;
      std::vector<double> xv = read_doubles(ctx, 0, x);
      std::vector<double> acc(static_cast<size_t>(NT));
      e->evaluate(xv.data(), true, N, F, agg, acc.data(), nullptr, ctx.pool());
      for (int64_t r0 = 0; r0 < N; ++r0) kernels::apply_post_transform(post, acc.data() + r0 * T, T);
      if (!visit_numeric(y.dtype(), [&]<class U>() {
            U* p = y.data<U>();
            for (int64_t i = 0; i < NT; ++i) p[i] = cast_from_double<U>(acc[size_t(i)]);
          }))
        ctx.fail(ErrorCode::Unsupported, std::string("output type ") + dtype_name(y.dtype()) + " is not supported");
    });
  });
}

void register_ml_ops(OpRegistry& r) {
  for (auto family : {register_binarizer, register_arrayfeatureextractor, register_labelencoder, register_treeensemble}) family(r);
  // What the planner and the optimizer know of these ops (ops/op_traits.hpp).
  r.def("ai.onnx.ml", "ArrayFeatureExtractor").infer(shapes::array_feature_extractor);
  r.def("ai.onnx.ml", "Binarizer").infer_symbolic(shapes::binarizer);
  r.def("ai.onnx.ml", "LabelEncoder").infer_symbolic(shapes::label_encoder);
  r.def("ai.onnx.ml", "TreeEnsemble").infer(shapes::tree_ensemble);
}

}  // namespace basalt
