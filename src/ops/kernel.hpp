// The kernel interface and the op registry.
//
// Lifecycle: at load, the registry finds a factory for (domain, op_type, opset) and calls it
// with the Node. The factory reads and validates attributes (errors name the node) and returns
// an OpKernel. At run time, compute() reads inputs from the KernelContext and writes outputs.
// Kernels are const and hold no per-run state, so one session can run on many threads at once.
//
// Adding an op: write it in its family's file (src/ops/<family>.cpp), add its `r.add(...)` line
// to that file's register function, and declare what the planner and the optimizer need to know
// (shape inference, aliasing, in place) with `r.def(...)` (ops/op_traits.hpp). docs/adding-an-op.md
// walks through an example.
#pragma once

#include "graph/graph.hpp"
#include "ops/op_traits.hpp"

#include <basalt/tensor.hpp>

#include <climits>
#include <functional>
#include <map>
#include <memory>
#include <atomic>
#include <span>
#include <string>
#include <vector>

namespace basalt {

struct RunContext;
class KernelContext;
class RunProfile;
class ThreadPool;
struct ArenaRun;

// Constant inputs of a node, offered to OpKernel::prepare at load (after optimization).
struct PrepareContext {
  const Node& node;
  // constant[i]: input i's tensor when it is a constant (initializer / folded), else null.
  std::span<const Tensor* const> constant;
  int threads = 1;  // the session's thread count
  // shape[i]: input i's shape when load-time shape inference fixed every dim (a model with static
  // input sizes), else null. Lets a kernel pick an algorithm for the sizes it will see; compute()
  // must still handle any shape.
  std::span<const Shape* const> shape = {};
  // Winograd convolution allowed (SessionOptions::winograd); false: direct / im2col kernels only.
  bool winograd = true;
};

class OpKernel {
 public:
  virtual ~OpKernel() = default;
  virtual void compute(KernelContext& ctx) const = 0;
  // Called once at load, before any run, with the node's constant inputs: pack weights here.
  // Packed copies are owned by the kernel; report their size in packed_bytes().
  virtual void prepare(const PrepareContext&) {}
  virtual size_t packed_bytes() const { return 0; }
  // True when prepare() made a copy of constant input `input` that compute() uses instead of the
  // original whenever that input's data is the original's or null. The runtime then drops the
  // original once no other node reads it (its data becomes null; shape and dtype stay).
  virtual bool replaces_constant(int input) const { return false; }
  // True when prepare() and compute() read input `input` only as bytes (memcpy), never with a
  // typed load, so it may be a misaligned tensor (Tensor::is_aligned() false): a weight used in
  // place from the model file, where protobuf leaves raw_data unaligned. Default false: the
  // runtime then hands this input an aligned copy (onnx/tensor_proto.hpp, "Misaligned weights").
  virtual bool reads_bytes_only(int input) const { return false; }
  // Scratch memory compute() asks for through KernelContext::workspace(), for these input
  // shapes and the session's thread count. The memory planner puts it in the run's arena.
  virtual size_t workspace_bytes(std::span<const Shape> input_shapes, int threads) const { return 0; }
};

using KernelFn = std::function<void(KernelContext&)>;

// Wraps a lambda as a kernel. Capture the attributes you parsed in the factory by value.
// `ws`, when given, is its workspace_bytes (what compute() asks of KernelContext::workspace).
using WorkspaceFn = std::function<size_t(std::span<const Shape>, int)>;
class FnKernel final : public OpKernel {
 public:
  explicit FnKernel(KernelFn f, WorkspaceFn ws = {}) : f_(std::move(f)), ws_(std::move(ws)) {}
  void compute(KernelContext& ctx) const override { f_(ctx); }
  size_t workspace_bytes(std::span<const Shape> in, int threads) const override { return ws_ ? ws_(in, threads) : 0; }

 private:
  KernelFn f_;
  WorkspaceFn ws_;
};
inline std::unique_ptr<OpKernel> kernel(KernelFn f, WorkspaceFn ws = {}) {
  return std::make_unique<FnKernel>(std::move(f), std::move(ws));
}

using KernelFactory = std::function<std::unique_ptr<OpKernel>(const Node&)>;

class OpRegistry {
 public:
  // The process-wide registry, filled on first use by every group's register function.
  static const OpRegistry& instance();

  // Register op `op` of domain `domain` ("" = ai.onnx) for opset versions [since, until].
  void add(const std::string& domain, const std::string& op, int since, int until, KernelFactory f);
  // ai.onnx, opsets [since, until]
  void add(const std::string& op, int since, KernelFactory f, int until = INT_MAX) {
    add("", op, since, until, std::move(f));
  }
  const KernelFactory* find(const std::string& domain, const std::string& op, int opset) const;
  // All registered (domain, op) pairs, for `basalt inspect` and docs.
  std::vector<std::string> op_names() const;

  // The traits of op `op` of `domain` (all its opset versions share them), for the family file
  // to declare: r.def("Relu").infer_symbolic(shapes::same).in_place(in_place::unary_f32).
  OpTraits& def(const std::string& domain, const std::string& op);
  OpTraits& def(const std::string& op) { return def("", op); }
  // The declared traits, or null when the op is not registered.
  const OpTraits* traits(const std::string& domain, const std::string& op) const;

  struct Listed {
    std::string domain, op;
    std::vector<std::pair<int, int>> opsets;  // [since, until] per kernel entry
    const OpTraits* traits;
  };
  std::vector<Listed> list() const;  // every op, sorted by domain then name
  void check_traits() const;         // throws Internal for traits of an op without a kernel

 private:
  struct Entry {
    int since, until;
    KernelFactory f;
  };
  struct Op {
    std::vector<Entry> kernels;
    OpTraits traits;
  };
  std::map<std::string, Op> map_;  // key "domain::op"
};

// The traits of node n's op: its domain and type (an unregistered op has none: null).
const OpTraits* op_traits(const Node& n);

// Canonical domain: "" and "ai.onnx" are the same domain.
inline std::string canonical_domain(const std::string& d) { return d == "ai.onnx" ? std::string() : d; }

// State shared by one run() and every subgraph execution inside it.
struct RunContext {
  int threads = 1;
  ThreadPool* pool = nullptr;     // the session's pool; null = run everything inline
  RunProfile* profile = nullptr;  // non-null: record every node (runtime/profiler.hpp); null = off
  // The memory plan and arena of this run (runtime/planner.hpp); null = every tensor on the heap.
  ArenaRun* arena = nullptr;
  // IO binding (Session::run_into): caller tensors by value id of `bound_graph` (the top-level
  // graph). A node producing a bound value with the same dtype and shape writes straight into it.
  const Graph* bound_graph = nullptr;
  const std::vector<Tensor>* bound = nullptr;
  // Checked before every node (subgraphs included): true stops the run with Error(Cancelled).
  const std::atomic<bool>* terminate = nullptr;
};

class KernelContext {
 public:
  KernelContext(const Node& node, std::span<const Value* const> inputs, std::span<Value> outputs,
                std::span<const Value* const> implicit, RunContext& run)
      : node_(node), inputs_(inputs), outputs_(outputs), implicit_(implicit), run_(run) {}

  const Node& node() const { return node_; }
  RunContext& run() { return run_; }

  int num_inputs() const { return int(inputs_.size()); }
  int num_outputs() const { return int(outputs_.size()); }
  // True when input i exists (index in range, not omitted, not an empty optional).
  bool has_input(int i) const {
    return i >= 0 && i < num_inputs() && inputs_[size_t(i)] && !inputs_[size_t(i)]->is_none();
  }
  const Value& input_value(int i) const;  // error if omitted
  const Tensor& input(int i) const;       // error if omitted or not a tensor
  // True when output i is wanted by the graph (not omitted).
  bool has_output(int i) const { return i >= 0 && i < num_outputs() && requested(i); }

  // Allocate output i (zero-filled) and return it for writing.
  Tensor& output(int i, DType dtype, const Shape& shape);
  // Same, but the contents are unspecified: for kernels that write every element.
  Tensor& output_uninit(int i, DType dtype, const Shape& shape);
  // Scratch memory for this compute() call, 64-byte aligned, at least `bytes` (declare the size
  // in OpKernel::workspace_bytes so the planner can place it). Valid until compute() returns.
  void* workspace(size_t bytes);
  ThreadPool* pool() const { return run_.pool; }
  int threads() const { return run_.threads; }
  // Set output i to a value computed elsewhere (a view, an input passed through, a sequence).
  void set_output(int i, Value v);

  // Run one of this node's subgraphs with the given formal inputs. Outer-scope values the
  // subgraph uses are supplied from this node's implicit inputs.
  std::vector<Value> run_subgraph(const Graph& g, std::span<const Value> inputs);

  [[noreturn]] void fail(ErrorCode code, const std::string& msg) const { node_.fail(code, msg); }

 private:
  bool requested(int i) const;
  const Node& node_;
  std::span<const Value* const> inputs_;
  std::span<Value> outputs_;
  std::span<const Value* const> implicit_;
  RunContext& run_;
  std::shared_ptr<void> workspace_;  // heap fallback for workspace()
  size_t workspace_size_ = 0;
};

// Group registration functions: one per file in src/ops/. Listed once in registry.cpp.
void register_elementwise_ops(OpRegistry& r);
void register_activation_ops(OpRegistry& r);
void register_tensor_ops(OpRegistry& r);
void register_pad_ops(OpRegistry& r);
void register_indexing_ops(OpRegistry& r);
void register_reduce_ops(OpRegistry& r);
void register_norm_ops(OpRegistry& r);
void register_loss_ops(OpRegistry& r);
void register_linalg_ops(OpRegistry& r);
void register_nn_ops(OpRegistry& r);
void register_rnn_ops(OpRegistry& r);
void register_quant_ops(OpRegistry& r);
void register_dft_ops(OpRegistry& r);
void register_string_ops(OpRegistry& r);
void register_random_ops(OpRegistry& r);
void register_ml_ops(OpRegistry& r);
void register_controlflow_ops(OpRegistry& r);
void register_sequence_ops(OpRegistry& r);
void register_misc_ops(OpRegistry& r);
void register_attention_ops(OpRegistry& r);
void register_image_ops(OpRegistry& r);

}  // namespace basalt
