// Tree-ensemble evaluation: the compact layout and its walkers (see tree_ensemble.hpp).
#include "kernels/tree_ensemble.hpp"

#include "core/thread_pool.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>
#include <stdexcept>

namespace basalt::kernels {

namespace {

constexpr int kLanes = 16;        // (row, tree) pairs walked together
constexpr int64_t kTreeChunk = 32;  // trees per task when a batch is too small to split by rows

bool is_branch(TreeMode m) { return m != TreeMode::Leaf; }

// The comparison a NaN feature fails or passes when the node does not track missing values.
bool nan_goes_true(TreeMode m) { return m == TreeMode::Neq; }

// Steps from each node to its deepest leaf (leaves loop to themselves). Children come after their
// parent in the depth-first order, so a reverse sweep sees them first; a shared subtree may sit
// before a later parent, so sweep again until nothing changes.
std::vector<int32_t> node_depths(const std::vector<int32_t>& left, const std::vector<int32_t>& right) {
  const int64_t cn = int64_t(left.size());
  std::vector<int32_t> depth(size_t(cn), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int64_t i = cn - 1; i >= 0; --i) {
      if (left[size_t(i)] == int32_t(i)) continue;
      int32_t d = 1 + std::max(depth[size_t(left[size_t(i)])], depth[size_t(right[size_t(i)])]);
      if (d != depth[size_t(i)]) { depth[size_t(i)] = d; changed = true; }
    }
  }
  return depth;
}

}  // namespace

PostTransform parse_post_transform(const std::string& s) {
  if (s == "NONE") return PostTransform::None;
  if (s == "SOFTMAX") return PostTransform::Softmax;
  if (s == "LOGISTIC") return PostTransform::Logistic;
  if (s == "SOFTMAX_ZERO") return PostTransform::SoftmaxZero;
  if (s == "PROBIT") return PostTransform::Probit;
  throw std::invalid_argument("post_transform '" + s + "' is not one of NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO, PROBIT");
}

double probit(double p) {
  if (std::isnan(p) || p < 0.0 || p > 1.0) return NAN;
  if (p == 0.0) return -INFINITY;
  if (p == 1.0) return INFINITY;
  constexpr double kPi = std::numbers::pi;
  // sqrt(2) * erfinv(2p - 1): Winitzki's approximation, then Newton steps on std::erf.
  double y = 2.0 * p - 1.0;
  double a = 0.147, ln = std::log(1.0 - y * y);
  double t1 = 2.0 / (kPi * a) + ln / 2.0;
  double x = std::copysign(std::sqrt(std::sqrt(t1 * t1 - ln / a) - t1), y);
  for (int i = 0; i < 4; ++i) {
    double err = std::erf(x) - y;
    x -= err / (2.0 / std::sqrt(kPi) * std::exp(-x * x));
  }
  return std::sqrt(2.0) * x;
}

void apply_post_transform(PostTransform p, double* v, int64_t n) {
  switch (p) {
    case PostTransform::None: return;
    case PostTransform::Logistic:
      for (int64_t k = 0; k < n; ++k) v[k] = 1.0 / (1.0 + std::exp(-v[k]));
      return;
    case PostTransform::Probit:
      for (int64_t k = 0; k < n; ++k) v[k] = probit(v[k]);
      return;
    case PostTransform::Softmax:
    case PostTransform::SoftmaxZero: {
      // SOFTMAX_ZERO leaves zero scores at zero (a class no tree voted for).
      bool zero = p == PostTransform::SoftmaxZero;
      double mx = -INFINITY;
      for (int64_t k = 0; k < n; ++k)
        if (!zero || v[k] != 0.0) mx = std::max(mx, v[k]);
      double sum = 0;
      for (int64_t k = 0; k < n; ++k) {
        v[k] = (zero && v[k] == 0.0) ? 0.0 : std::exp(v[k] - mx);
        sum += v[k];
      }
      if (sum > 0)
        for (int64_t k = 0; k < n; ++k) v[k] /= sum;
      return;
    }
  }
}

TreeEnsemble TreeEnsemble::build(const TreeEnsembleSpec& spec) {
  const auto& sn = spec.nodes;
  const int64_t nn = int64_t(sn.size());
  TreeEnsemble e;
  e.n_targets_ = spec.n_targets;
  e.use_double_ = spec.double_thresholds;
  if (spec.n_targets < 1) throw std::invalid_argument("the ensemble must have at least one target");
  // Which fast path fits: every branch "x <= v" (LEQ, or GT with its children swapped) or every
  // branch "x < v" (LT, or GTE swapped).
  bool any_leq = false, any_lt = false, other = false;
  for (const auto& n : sn) {
    if (n.mode == TreeMode::Leq || n.mode == TreeMode::Gt) any_leq = true;
    else if (n.mode == TreeMode::Lt || n.mode == TreeMode::Gte) any_lt = true;
    else if (n.mode != TreeMode::Leaf) other = true;
  }
  e.fast_ = !other && !(any_leq && any_lt);
  e.lt_ = any_lt;

  // Lay every tree out depth first from its root. A node reached again within one tree (a shared
  // subtree) keeps its first place; one reached again on the current path is a cycle.
  std::vector<int32_t> place(size_t(nn), -1), placed_in(size_t(nn), -1);
  std::vector<uint8_t> on_path(size_t(nn), 0);
  std::vector<int64_t> order;  // compact index -> spec index
  std::vector<int32_t> left, right, nanc;
  const int64_t kMax = std::numeric_limits<int32_t>::max() - 1;
  bool any_nan_special = false;
  e.member_of_.clear();
  // Children, NaN targets and modes in compact indices, for the nodes of the tree just laid out
  // (place[] holds that tree's positions).
  auto resolve = [&](int64_t begin) {
    int64_t end = int64_t(order.size());
    left.resize(size_t(end));
    right.resize(size_t(end));
    nanc.resize(size_t(end));
    e.mode_.resize(size_t(end));
    e.member_of_.resize(size_t(end), -1);
    for (int64_t i = begin; i < end; ++i) {
      const TreeNodeSpec& n = sn[size_t(order[size_t(i)])];
      e.mode_[size_t(i)] = uint8_t(n.mode);
      if (!is_branch(n.mode)) {
        left[size_t(i)] = right[size_t(i)] = nanc[size_t(i)] = int32_t(i);
        continue;
      }
      int32_t tc = place[size_t(n.true_child)], fc = place[size_t(n.false_child)];
      int32_t nan_to = (n.missing_true || nan_goes_true(n.mode)) ? tc : fc;
      bool swap = e.fast_ && (n.mode == TreeMode::Gt || n.mode == TreeMode::Gte);
      left[size_t(i)] = swap ? fc : tc;
      right[size_t(i)] = swap ? tc : fc;
      nanc[size_t(i)] = n.missing_true ? tc : -1;
      if (e.fast_) {
        nanc[size_t(i)] = nan_to;
        if (nan_to != right[size_t(i)]) any_nan_special = true;
      }
      if (n.mode == TreeMode::Member) {
        e.member_of_[size_t(i)] = int32_t(e.members_.size());
        e.members_.push_back(n.members);
        std::sort(e.members_.back().begin(), e.members_.back().end());
      }
      if (n.feature > std::numeric_limits<int32_t>::max())
        throw std::invalid_argument("feature index " + std::to_string(n.feature) + " is too large");
      e.max_feature_ = std::max(e.max_feature_, n.feature);
    }
  };
  for (size_t t = 0; t < spec.roots.size(); ++t) {
    int64_t root = spec.roots[t];
    int64_t tree_begin = int64_t(order.size());
    if (root < 0 || root >= nn) throw std::invalid_argument("tree " + std::to_string(t) + ": root index out of range");
    struct Frame { int64_t node; int stage; };
    std::vector<Frame> stack{{root, 0}};
    while (!stack.empty()) {
      Frame& f = stack.back();
      const TreeNodeSpec& n = sn[size_t(f.node)];
      if (f.stage == 0) {
        if (placed_in[size_t(f.node)] == int32_t(t)) { stack.pop_back(); continue; }
        if (int64_t(order.size()) >= kMax) throw std::invalid_argument("the ensemble has more than 2^31 nodes");
        place[size_t(f.node)] = int32_t(order.size());
        placed_in[size_t(f.node)] = int32_t(t);
        order.push_back(f.node);
        on_path[size_t(f.node)] = 1;
        f.stage = 1;
        if (is_branch(n.mode)) {
          for (int64_t c : {n.true_child, n.false_child}) {
            if (c < 0 || c >= nn)
              throw std::invalid_argument("tree " + std::to_string(t) + ": a child of node " + std::to_string(f.node) +
                                          " is missing (index " + std::to_string(c) + ")");
            if (on_path[size_t(c)])
              throw std::invalid_argument("tree " + std::to_string(t) + " contains a cycle through node " + std::to_string(c));
          }
          int64_t tc = n.true_child, fc = n.false_child;
          stack.push_back({fc, 0});
          stack.push_back({tc, 0});
        }
        continue;
      }
      on_path[size_t(f.node)] = 0;
      stack.pop_back();
    }
    resolve(tree_begin);
    e.roots_.push_back(place[size_t(root)]);
  }
  const int64_t cn = int64_t(order.size());
  if (e.fast_ && !any_nan_special) nanc.clear();  // comparisons alone send NaN the right way
  e.nan_child_ = std::move(nanc);
  auto fill = [&](auto& nodes) {
    nodes.resize(size_t(cn));
    for (int64_t i = 0; i < cn; ++i) {
      const TreeNodeSpec& n = sn[size_t(order[size_t(i)])];
      auto& d = nodes[size_t(i)];
      d.value = decltype(d.value)(is_branch(n.mode) ? n.value : 0.0);
      d.feature = is_branch(n.mode) ? int32_t(n.feature) : 0;
      d.left = left[size_t(i)];
      d.right = right[size_t(i)];
    }
  };
  if (e.use_double_) fill(e.nodes_d_);
  else fill(e.nodes_f_);
  if (e.fast_) {
    e.mode_.clear();
    e.member_of_.clear();
  }
  std::vector<int32_t> depth = node_depths(left, right);
  for (int32_t r : e.roots_) e.depth_.push_back(depth[size_t(r)]);
  // Leaves.
  e.leaf_begin_.assign(size_t(cn) + 1, 0);
  bool single = spec.n_targets == 1;
  for (int64_t i = 0; i < cn; ++i) {
    const TreeNodeSpec& n = sn[size_t(order[size_t(i)])];
    if (!is_branch(n.mode) && n.weights.size() != 1) single = false;
    for (auto& [tg, w] : n.weights) {
      if (tg < 0 || tg >= spec.n_targets)
        throw std::invalid_argument("leaf " + std::to_string(order[size_t(i)]) + ": target " + std::to_string(tg) + " is outside [0, " +
                                    std::to_string(spec.n_targets) + ")");
      e.leaf_target_.push_back(int32_t(tg));
      e.leaf_weight_.push_back(w);
    }
    e.leaf_begin_[size_t(i) + 1] = int32_t(e.leaf_target_.size());
  }
  e.single_ = single;
  if (single) {
    e.leaf_value_.assign(size_t(cn), 0.0);
    for (int64_t i = 0; i < cn; ++i)
      if (e.leaf_begin_[size_t(i) + 1] > e.leaf_begin_[size_t(i)]) e.leaf_value_[size_t(i)] = e.leaf_weight_[size_t(e.leaf_begin_[size_t(i)])];
  }
  return e;
}

size_t TreeEnsemble::bytes() const {
  return nodes_f_.size() * sizeof(Node<float>) + nodes_d_.size() * sizeof(Node<double>) + mode_.size() +
         (nan_child_.size() + member_of_.size() + roots_.size() + depth_.size() + leaf_begin_.size() + leaf_target_.size()) * 4 +
         (leaf_weight_.size() + leaf_value_.size()) * 8;
}

// Walks `lanes` (row, start node) pairs `depth` steps; leaf_out gets each lane's final node.
template <class T, class X>
void TreeEnsemble::walk(const X* x, int64_t F, const int64_t* rows, const int64_t* starts, int lanes, int depth,
                        int32_t* leaf_out) const {
  const Node<T>* nodes;
  if constexpr (std::is_same_v<T, float>) nodes = nodes_f_.data();
  else nodes = nodes_d_.data();
  using C = decltype(X() + T());  // compare in the wider of the input and threshold types
  int32_t idx[kLanes];
  const X* xr[kLanes];
  for (int l = 0; l < lanes; ++l) {
    idx[l] = int32_t(starts[l]);
    xr[l] = x + rows[l] * F;
  }
  auto steps = [&]<bool LT, bool WithNan>() {
    const int32_t* nanc = nan_child_.data();
    for (int d = 0; d < depth; ++d)
      for (int l = 0; l < lanes; ++l) {
        const Node<T>& n = nodes[idx[l]];
        C v = C(xr[l][n.feature]);
        int32_t nx = (LT ? v < C(n.value) : v <= C(n.value)) ? n.left : n.right;
        if constexpr (WithNan) nx = v != v ? nanc[idx[l]] : nx;
        idx[l] = nx;
      }
  };
  if (fast_) {
    bool nan = !nan_child_.empty();
    if (lt_) nan ? steps.template operator()<true, true>() : steps.template operator()<true, false>();
    else nan ? steps.template operator()<false, true>() : steps.template operator()<false, false>();
  } else {
    for (int d = 0; d < depth; ++d)
      for (int l = 0; l < lanes; ++l) {
        int32_t i = idx[l];
        auto m = TreeMode(mode_[size_t(i)]);
        if (m == TreeMode::Leaf) continue;
        const Node<T>& n = nodes[i];
        C v = C(xr[l][n.feature]), s = C(n.value);
        bool go;
        if (v != v && nan_child_[size_t(i)] >= 0) go = true;
        else switch (m) {
          case TreeMode::Leq: go = v <= s; break;
          case TreeMode::Lt: go = v < s; break;
          case TreeMode::Gte: go = v >= s; break;
          case TreeMode::Gt: go = v > s; break;
          case TreeMode::Eq: go = v == s; break;
          case TreeMode::Neq: go = v != s; break;
          default: {
            const auto& set = members_[size_t(member_of_[size_t(i)])];
            go = v == v && std::binary_search(set.begin(), set.end(), double(v));
          }
        }
        idx[l] = go ? n.left : n.right;
      }
  }
  for (int l = 0; l < lanes; ++l) leaf_out[l] = idx[l];
}

template <class X>
void TreeEnsemble::run_rows(const X* x, int64_t F, int64_t r0, int64_t r1, int64_t t0, int64_t t1, TreeAgg agg, double* out,
                            uint8_t* seen) const {
  const int64_t T = n_targets_;
  int64_t rows[kLanes], starts[kLanes];
  int32_t leaves[kLanes];
  auto add = [&](int lanes) {
    for (int l = 0; l < lanes; ++l) {
      int32_t leaf = leaves[l];
      double* o = out + rows[l] * T;
      uint8_t* s = seen ? seen + rows[l] * T : nullptr;
      auto put = [&](int64_t tg, double w) {
        if (agg == TreeAgg::Min) o[tg] = (s && s[tg]) ? std::min(o[tg], w) : w;
        else if (agg == TreeAgg::Max) o[tg] = (s && s[tg]) ? std::max(o[tg], w) : w;
        else o[tg] += w;
        if (s) s[tg] = 1;
      };
      if (single_) put(0, leaf_value_[size_t(leaf)]);
      else
        for (int32_t k = leaf_begin_[size_t(leaf)]; k < leaf_begin_[size_t(leaf) + 1]; ++k) put(leaf_target_[size_t(k)], leaf_weight_[size_t(k)]);
    }
  };
  auto go = [&](int lanes, int depth) {
    if (use_double_) walk<double, X>(x, F, rows, starts, lanes, depth, leaves);
    else walk<float, X>(x, F, rows, starts, lanes, depth, leaves);
    add(lanes);
  };
  if (r1 - r0 >= kLanes / 2) {
    // Many rows: 16 rows through one tree at a time (the tree stays in cache for the block).
    for (int64_t rb = r0; rb < r1; rb += kLanes) {
      int lanes = int(std::min<int64_t>(kLanes, r1 - rb));
      for (int l = 0; l < lanes; ++l) rows[l] = rb + l;
      for (int64_t t = t0; t < t1; ++t) {
        for (int l = 0; l < lanes; ++l) starts[l] = roots_[size_t(t)];
        go(lanes, depth_[size_t(t)]);
      }
    }
  } else {
    // Few rows: each row through 16 trees at a time.
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t tb = t0; tb < t1; tb += kLanes) {
        int lanes = int(std::min<int64_t>(kLanes, t1 - tb));
        int depth = 0;
        for (int l = 0; l < lanes; ++l) {
          rows[l] = r;
          starts[l] = roots_[size_t(tb + l)];
          depth = std::max(depth, depth_[size_t(tb + l)]);
        }
        go(lanes, depth);
      }
  }
}

void TreeEnsemble::evaluate(const void* xv, bool x_double, int64_t N, int64_t F, TreeAgg agg, double* out, uint8_t* seen,
                            ThreadPool* pool) const {
  const int64_t T = n_targets_, NT = N * T, trees = n_trees();
  std::vector<uint8_t> own_seen;
  if (!seen && (agg == TreeAgg::Min || agg == TreeAgg::Max)) {
    own_seen.resize(size_t(NT));
    seen = own_seen.data();
  }
  std::fill(out, out + NT, 0.0);
  if (seen) std::fill(seen, seen + NT, uint8_t(0));
  auto rows_part = [&](int64_t r0, int64_t r1, int64_t t0, int64_t t1, double* o, uint8_t* s) {
    if (x_double) run_rows(static_cast<const double*>(xv), F, r0, r1, t0, t1, agg, o, s);
    else run_rows(static_cast<const float*>(xv), F, r0, r1, t0, t1, agg, o, s);
  };
  int threads = pool ? pool->threads() : 1;
  if (threads <= 1 || N * trees < 256) {
    rows_part(0, N, 0, trees, out, seen);
  } else if (N >= 2 * kLanes * threads) {
    // Rows are independent: each task owns its rows' outputs.
    int64_t blocks = (N + kLanes - 1) / kLanes;
    parallel_for(pool, blocks, 1, [&](int64_t b0, int64_t b1) {
      rows_part(b0 * kLanes, std::min(N, b1 * kLanes), 0, trees, out, seen);
    });
  } else {
    // Few rows: chunks of trees, each into its own buffer, merged in chunk order (the result does
    // not depend on the thread count).
    int64_t chunks = (trees + kTreeChunk - 1) / kTreeChunk;
    std::vector<double> part(size_t(chunks * NT), 0.0);
    std::vector<uint8_t> pseen(size_t(chunks * NT), 0);
    parallel_for(pool, chunks, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c)
        rows_part(0, N, c * kTreeChunk, std::min(trees, (c + 1) * kTreeChunk), part.data() + c * NT, pseen.data() + c * NT);
    });
    for (int64_t c = 0; c < chunks; ++c)
      for (int64_t i = 0; i < NT; ++i) {
        if (!pseen[size_t(c * NT + i)]) continue;
        double w = part[size_t(c * NT + i)];
        bool had = seen ? seen[i] != 0 : true;
        if (agg == TreeAgg::Min) out[i] = had ? std::min(out[i], w) : w;
        else if (agg == TreeAgg::Max) out[i] = had ? std::max(out[i], w) : w;
        else out[i] += w;
        if (seen) seen[i] = 1;
      }
  }
  if (agg == TreeAgg::Average && trees > 0)
    for (int64_t i = 0; i < NT; ++i) out[i] /= double(trees);
}

}  // namespace basalt::kernels
