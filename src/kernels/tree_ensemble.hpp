// Tree-ensemble evaluation (ai.onnx.ml TreeEnsemble, TreeEnsembleClassifier, TreeEnsembleRegressor).
//
// The ops' attribute arrays (one entry per node, trees and nodes named by ids) are checked and
// compiled once, at session creation, into a compact layout: one array of 16-byte nodes per
// threshold type, every tree laid out depth first from its root, children as absolute indices,
// and every leaf a node whose two children are itself. A walk is then a fixed number of
// branch-free steps (the tree's depth): a leaf reached early stays put. Rows are walked in lanes
// of 16 (row, tree) pairs at once, so the loads of 16 independent paths overlap; a batch is split
// over the session's pool by rows, a single row by trees. See docs/classic_ml.md.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace basalt {
class ThreadPool;
}

namespace basalt::kernels {

enum class TreeMode : uint8_t { Leq = 0, Lt = 1, Gte = 2, Gt = 3, Eq = 4, Neq = 5, Member = 6, Leaf = 7 };
enum class TreeAgg : uint8_t { Average = 0, Sum = 1, Min = 2, Max = 3 };

// One node as the ops describe it, after their ids are resolved to indices into this list.
struct TreeNodeSpec {
  TreeMode mode = TreeMode::Leaf;
  int64_t feature = 0;
  double value = 0;           // threshold
  int64_t true_child = -1;    // index into the node list
  int64_t false_child = -1;
  bool missing_true = false;  // NaN goes to the true child
  std::vector<double> members;  // Member: the set
  // Leaf: its (target, weight) pairs.
  std::vector<std::pair<int64_t, double>> weights;
};

struct TreeEnsembleSpec {
  std::vector<TreeNodeSpec> nodes;
  std::vector<int64_t> roots;  // one per tree, indices into nodes
  int64_t n_targets = 1;
  bool double_thresholds = false;  // compare in double (threshold tensors of type double)
};

// The compiled ensemble. Build throws std::invalid_argument with a message naming the problem
// (a child index out of range, a cycle, a node reachable from two parents is fine: it is copied).
class TreeEnsemble {
 public:
  static TreeEnsemble build(const TreeEnsembleSpec& spec);

  int64_t n_targets() const { return n_targets_; }
  int64_t n_trees() const { return int64_t(roots_.size()); }
  int64_t max_feature() const { return max_feature_; }  // largest feature index used, -1 if none
  size_t bytes() const;                                  // memory of the compiled layout

  // Raw aggregation of every tree into out[N * n_targets] (double): Sum / Average / Min / Max as
  // the op says; `seen` (N * n_targets, may be null) is set to 1 where some leaf wrote a target.
  // x is float (or double when x_double), row-major [N, F] with F > max_feature().
  void evaluate(const void* x, bool x_double, int64_t N, int64_t F, TreeAgg agg, double* out, uint8_t* seen,
                ThreadPool* pool) const;

 private:
  template <class T>
  struct Node {
    T value;
    int32_t feature;
    int32_t left;   // taken when the comparison holds
    int32_t right;
  };
  template <class T, class X>
  void walk(const X* x, int64_t F, const int64_t* rows, const int64_t* trees, int lanes, int depth,
            int32_t* leaf_out) const;
  template <class X>
  void run_rows(const X* x, int64_t F, int64_t r0, int64_t r1, int64_t t0, int64_t t1, TreeAgg agg, double* out,
                uint8_t* seen) const;

  int64_t n_targets_ = 1;
  int64_t max_feature_ = -1;
  bool use_double_ = false;
  bool fast_ = true;         // every branch is "x <= v" (or "x < v" when lt_), NaN to the false child
  bool lt_ = false;
  std::vector<Node<float>> nodes_f_;
  std::vector<Node<double>> nodes_d_;
  std::vector<uint8_t> mode_;      // general path: per node TreeMode (Leaf for leaves)
  std::vector<int32_t> nan_child_;  // general path: where NaN goes
  std::vector<int32_t> member_of_;  // general path: Member nodes' set index
  std::vector<std::vector<double>> members_;
  std::vector<int32_t> roots_, depth_;
  // Leaves: per node index, the range of its weights in leaf_target_/leaf_weight_ (empty for a
  // branch). Single-target ensembles with one weight per leaf read leaf_value_ directly.
  std::vector<int32_t> leaf_begin_;  // size nodes + 1
  std::vector<int32_t> leaf_target_;
  std::vector<double> leaf_weight_;
  bool single_ = false;
  std::vector<double> leaf_value_;
};

// Post transforms of the ML ops on one row of scores (ai.onnx.ml's POST_EVAL_TRANSFORM).
enum class PostTransform : uint8_t { None = 0, Softmax = 1, Logistic = 2, SoftmaxZero = 3, Probit = 4 };
PostTransform parse_post_transform(const std::string& s);  // throws std::invalid_argument
void apply_post_transform(PostTransform p, double* v, int64_t n);
double probit(double p);  // inverse of the standard normal CDF

}  // namespace basalt::kernels
