// The compiled tree-ensemble evaluator (kernels/tree_ensemble.hpp) against a naive walk of the
// node list: random forests in every node mode, missing-value tracking, NaN inputs, multi-target
// leaves, all four aggregates, float and double thresholds, batch sizes on both lane layouts,
// threads; and the errors a malformed ensemble gets.
#include "core/thread_pool.hpp"
#include "kernels/tree_ensemble.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <stdexcept>

using namespace basalt;
using namespace basalt::kernels;

namespace {

// A random tree of the given depth, appended to spec.nodes; returns its root.
int64_t grow(TreeEnsembleSpec& s, std::mt19937& rng, int depth, int64_t F, const std::vector<TreeMode>& modes, bool mvt) {
  int64_t id = int64_t(s.nodes.size());
  s.nodes.emplace_back();
  std::uniform_real_distribution<double> u(-1, 1);
  if (depth == 0 || rng() % 7 == 0) {
    auto& n = s.nodes[size_t(id)];
    n.mode = TreeMode::Leaf;
    for (int64_t t = 0; t < s.n_targets; ++t)
      if (s.n_targets == 1 || rng() % 2) n.weights.push_back({t, u(rng)});
    return id;
  }
  TreeNodeSpec n;
  n.mode = modes[rng() % modes.size()];
  n.feature = int64_t(rng() % uint64_t(F));
  n.value = std::round(u(rng) * 4) / 4;  // on a grid, so rows land exactly on thresholds too
  n.missing_true = mvt && rng() % 2;
  if (n.mode == TreeMode::Member) n.members = {-0.5, 0.25, 0.75};
  int64_t t = grow(s, rng, depth - 1, F, modes, mvt);
  int64_t f = grow(s, rng, depth - 1, F, modes, mvt);
  n.true_child = t;
  n.false_child = f;
  s.nodes[size_t(id)] = n;
  return id;
}

double naive(const TreeEnsembleSpec& s, const double* row, int64_t tree_root, int64_t target, bool* hit) {
  int64_t i = tree_root;
  while (s.nodes[size_t(i)].mode != TreeMode::Leaf) {
    const auto& n = s.nodes[size_t(i)];
    double v = row[n.feature], th = s.double_thresholds ? n.value : double(float(n.value));
    bool go;
    if (std::isnan(v) && n.missing_true) go = true;
    else switch (n.mode) {
      case TreeMode::Leq: go = v <= th; break;
      case TreeMode::Lt: go = v < th; break;
      case TreeMode::Gte: go = v >= th; break;
      case TreeMode::Gt: go = v > th; break;
      case TreeMode::Eq: go = v == th; break;
      case TreeMode::Neq: go = v != th; break;
      default: go = std::find(n.members.begin(), n.members.end(), v) != n.members.end();
    }
    i = go ? n.true_child : n.false_child;
  }
  *hit = false;
  double w = 0;
  for (auto& [t, x] : s.nodes[size_t(i)].weights)
    if (t == target) { w += x; *hit = true; }
  return w;
}

void check(const std::vector<TreeMode>& modes, bool mvt, int64_t targets, bool dbl, TreeAgg agg, int64_t N, int threads,
           unsigned seed) {
  std::mt19937 rng(seed);
  TreeEnsembleSpec s;
  s.n_targets = targets;
  s.double_thresholds = dbl;
  const int64_t F = 5;
  for (int t = 0; t < 40; ++t) s.roots.push_back(grow(s, rng, 6, F, modes, mvt));
  TreeEnsemble e = TreeEnsemble::build(s);
  std::vector<double> xd(size_t(N * F));
  for (auto& v : xd) v = rng() % 10 == 0 ? NAN : std::round(std::uniform_real_distribution<double>(-1, 1)(rng) * 8) / 8;
  std::vector<float> xf(xd.begin(), xd.end());
  std::vector<double> out(size_t(N * targets));
  std::vector<uint8_t> seen(size_t(N * targets));
  ThreadPool pool(threads);
  e.evaluate(xf.data(), false, N, F, agg, out.data(), seen.data(), threads > 1 ? &pool : nullptr);
  for (int64_t r = 0; r < N; ++r)
    for (int64_t k = 0; k < targets; ++k) {
      double acc = 0;
      bool any = false;
      for (int64_t root : s.roots) {
        bool hit;
        double w = naive(s, xd.data() + r * F, root, k, &hit);
        if (!hit) continue;
        if (agg == TreeAgg::Min) acc = any ? std::min(acc, w) : w;
        else if (agg == TreeAgg::Max) acc = any ? std::max(acc, w) : w;
        else acc += w;
        any = true;
      }
      if (agg == TreeAgg::Average) acc /= double(s.roots.size());
      ASSERT_NEAR(out[size_t(r * targets + k)], acc, 1e-9) << "row " << r << " target " << k;
      ASSERT_EQ(seen[size_t(r * targets + k)], any ? 1 : 0);
    }
}

}  // namespace

TEST(TreeEnsembleKernel, FastPathsMatchNaiveWalk) {
  for (int64_t N : {1, 3, 37}) {
    check({TreeMode::Leq}, false, 1, false, TreeAgg::Sum, N, 1, 1);
    check({TreeMode::Leq, TreeMode::Gt}, false, 1, false, TreeAgg::Sum, N, 1, 2);     // GT swapped into LEQ
    check({TreeMode::Lt, TreeMode::Gte}, true, 1, false, TreeAgg::Average, N, 1, 3);  // NaN tracked
    check({TreeMode::Lt}, true, 3, true, TreeAgg::Sum, N, 1, 4);                      // multi-target, double
  }
}

TEST(TreeEnsembleKernel, GeneralModesAndAggregates) {
  std::vector<TreeMode> all = {TreeMode::Leq, TreeMode::Lt, TreeMode::Gte, TreeMode::Gt, TreeMode::Eq, TreeMode::Neq, TreeMode::Member};
  for (TreeAgg agg : {TreeAgg::Sum, TreeAgg::Average, TreeAgg::Min, TreeAgg::Max})
    for (int64_t N : {1, 20}) check(all, true, 2, false, agg, N, 1, 10 + unsigned(agg));
}

TEST(TreeEnsembleKernel, ThreadsSplitRowsAndTrees) {
  for (int64_t N : {1, 5, 200}) {
    check({TreeMode::Leq}, false, 1, false, TreeAgg::Sum, N, 2, 20);
    check({TreeMode::Lt, TreeMode::Eq}, true, 3, false, TreeAgg::Max, N, 2, 21);
  }
}

TEST(TreeEnsembleKernel, MalformedEnsemblesAreErrors) {
  TreeEnsembleSpec s;
  s.nodes.resize(3);
  s.nodes[0].mode = TreeMode::Leq;
  s.nodes[0].true_child = 1;
  s.nodes[0].false_child = 2;
  s.nodes[1].weights = {{0, 1.0}};
  s.nodes[2].weights = {{0, 2.0}};
  s.roots = {0};
  EXPECT_NO_THROW(TreeEnsemble::build(s));
  auto bad = s;
  bad.nodes[0].false_child = 7;
  EXPECT_THROW(TreeEnsemble::build(bad), std::invalid_argument);  // missing child
  bad = s;
  bad.nodes[2].mode = TreeMode::Lt;
  bad.nodes[2].true_child = 0;
  bad.nodes[2].false_child = 1;
  EXPECT_THROW(TreeEnsemble::build(bad), std::invalid_argument);  // cycle
  bad = s;
  bad.nodes[1].weights = {{3, 1.0}};
  EXPECT_THROW(TreeEnsemble::build(bad), std::invalid_argument);  // target outside n_targets
  bad = s;
  bad.roots = {-1};
  EXPECT_THROW(TreeEnsemble::build(bad), std::invalid_argument);
  try {
    bad = s;
    bad.nodes[0].false_child = 7;
    TreeEnsemble::build(bad);
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("node 0"), std::string::npos) << e.what();
  }
}
