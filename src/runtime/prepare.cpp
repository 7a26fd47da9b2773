// Kernel creation and preparation: the step between optimization and the first run.
#include "core/pages.hpp"
#include "core/mapped_file.hpp"
#include "onnx/tensor_proto.hpp"
#include "opt/graph_util.hpp"
#include "ops/kernel.hpp"
#include "graph/model.hpp"
#include "core/thread_pool.hpp"
#include "core/storage.hpp"

#include <chrono>
#include <cstdint>
#include <exception>
#include <mutex>


namespace basalt {

// Readers of each constant value in g (node inputs and implicit inputs); graph inputs and outputs
// count as readers that never let go.
static std::vector<int> constant_readers(const Graph& g) {
  std::vector<int> r(g.values.size(), 0);
  for (const auto& n : g.nodes) {
    for (int v : n.inputs)
      if (v >= 0) ++r[size_t(v)];
    for (int v : n.implicit_inputs)
      if (v >= 0) ++r[size_t(v)];
  }
  for (int v : g.inputs) r[size_t(v)] += 1 << 20;
  for (int v : g.outputs) r[size_t(v)] += 1 << 20;
  return r;
}

// Misaligned weights (onnx/tensor_proto.hpp): the loader kept a misaligned view only for byte
// readers, but optimization may have rewired readers since. Here, with the final kernels, any
// reader that has not opted in gets an aligned copy before its prepare() or compute() sees it.
static void align_weight(Graph& g, int v) {
  Tensor& w = g.values[size_t(v)].initializer;
  if (g.values[size_t(v)].is_initializer && !w.is_aligned()) w = aligned_weight_copy(w);
}

// One node's prepare() inputs, gathered before the prepares run in parallel.
struct PendingPrepare {
  Node* node = nullptr;
  std::vector<const Tensor*> consts;
  std::vector<Shape> shape;
  std::vector<const Shape*> shape_ptr;
  std::exception_ptr error;
};

static void create_graph_kernels(Graph& g, Model& m, const LoadOptions& opts, int threads, ThreadPool* pool) {
  const OpRegistry& reg = OpRegistry::instance();
  std::vector<int> readers = constant_readers(g);
  // Static input shapes for prepare() (PrepareContext::shape); none when inference fails.
  StaticShapes shapes;
  try {
    shapes = infer_static_shapes(g);
  } catch (const std::exception&) {
    shapes = StaticShapes{};
  }
  // Graph outputs and subgraph captures have readers that are not kernels of this graph.
  for (int v : g.outputs) align_weight(g, v);
  for (const auto& n : g.nodes)
    for (int v : n.implicit_inputs)
      if (v >= 0) align_weight(g, v);
  // 1. In node order: kernels from the factories, aligned weights, each prepare()'s inputs.
  std::vector<PendingPrepare> todo;
  for (auto& n : g.nodes) {
    for (auto& a : n.attrs) {
      if (a.g) create_graph_kernels(*a.g, m, opts, threads, pool);
      for (auto& sg : a.graphs) create_graph_kernels(*sg, m, opts, threads, pool);
    }
    if (n.kernel) continue;
    const KernelFactory* f = reg.find(n.domain, n.op_type, n.opset);
    if (!f) {
      std::string msg = n.op_type + " (domain " + (n.domain.empty() ? std::string("ai.onnx") : n.domain) + ", opset " +
                        std::to_string(n.opset) + ")";
      if (opts.allow_unsupported) {
        m.unsupported.push_back(msg + " at node '" + n.name + "'");
        continue;
      }
      n.fail(ErrorCode::Unsupported, "operator " + msg + " is not supported");
    }
    n.kernel = (*f)(n);
    PendingPrepare pp;
    pp.node = &n;
    pp.consts.assign(n.inputs.size(), nullptr);
    for (size_t i = 0; i < n.inputs.size(); ++i) {
      int v = n.inputs[i];
      if (v < 0 || !g.values[size_t(v)].is_initializer) continue;
      if (!n.kernel->reads_bytes_only(int(i))) align_weight(g, v);
      pp.consts[i] = &g.values[size_t(v)].initializer;
    }
    pp.shape.assign(n.inputs.size(), Shape{});
    pp.shape_ptr.assign(n.inputs.size(), nullptr);
    for (size_t i = 0; i < n.inputs.size(); ++i)
      if (!shapes.known.empty() && size_t(n.inputs[i]) < shapes.known.size() && shapes.get(n.inputs[i], pp.shape[i]))
        pp.shape_ptr[i] = &pp.shape[i];
    todo.push_back(std::move(pp));
  }
  // 2. prepare() (weight packing: most of a session's creation time) on the session's pool, a
  // node per chunk. Kernels only read their constants here; a constant is dropped (3, below)
  // under the lock, by the last of its readers to finish, so nothing reads it after that. Done
  // per node, not after all of them: only the weights being packed right now are held twice.
  std::mutex mu;
  auto prepare_one = [&](PendingPrepare& pp) {
    const Node& n = *pp.node;
    PrepareContext pc{n, pp.consts, threads, pp.shape_ptr, opts.winograd};
    try {
      n.kernel->prepare(pc);
    } catch (const Error& e) {
      std::string msg = e.what();
      if (msg.rfind("node '", 0) != 0) msg = n.describe() + ": " + msg;
      pp.error = std::make_exception_ptr(Error(e.code(), msg));
      return;
    } catch (...) {
      pp.error = std::current_exception();
      return;
    }
    // Packing read the original weights, so their file pages are resident again; with a packed
    // copy in use they are rarely needed, so give them back (a later read refaults them from
    // the file). Only for views of the model's file mapping: a model from bytes views the
    // caller's memory, where MADV_DONTNEED would destroy data.
    if (n.kernel->packed_bytes() > 0 && !m.path.empty())
      for (const Tensor* t : pp.consts)
        if (t && t->storage() && !t->storage()->owned && t->nbytes()) release_file_pages(t->raw(), t->nbytes());
    // 3. A weight that every reader replaced with its own packed copy is dropped: its memory (an
    // owned copy, or its share of the file mapping) is given back, and it keeps only its shape
    // and dtype, so weight memory is not held twice.
    std::lock_guard<std::mutex> lk(mu);
    m.packed_weight_bytes += n.kernel->packed_bytes();
    for (size_t i = 0; i < pp.consts.size(); ++i) {
      if (!pp.consts[i] || !n.kernel->replaces_constant(int(i))) continue;
      int v = n.inputs[i];
      if (--readers[size_t(v)] != 0) continue;
      Tensor& w = g.values[size_t(v)].initializer;
      if (!w.raw()) continue;
      size_t bytes = w.nbytes();
      bool in_place = w.storage() && !w.storage()->owned;
      w = Tensor::view(w.dtype(), w.shape(), nullptr, nullptr);
      m.weight_bytes_released += bytes;
      if (in_place) m.weight_bytes_released_in_place += bytes;
    }
  };
  {
    // The weights each packing frees become the pages of the next packed copies (core/pages.hpp).
    RecycleScope recycle;
    parallel_for(pool, int64_t(todo.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) prepare_one(todo[size_t(i)]);
    });
  }
  // The first failure in node order, whichever thread met it first.
  for (auto& pp : todo)
    if (pp.error) std::rethrow_exception(pp.error);
  g.finalize();
}

// Weight bytes held now (after optimization folded some and packing dropped others).
static void count_held_weights(const Graph& g, Model& m) {
  for (const auto& v : g.values) {
    if (!v.is_initializer || !v.initializer.raw()) continue;
    m.weight_bytes += v.initializer.nbytes();
    if (v.initializer.storage() && !v.initializer.storage()->owned) m.weight_bytes_in_place += v.initializer.nbytes();
  }
  for (const auto& n : g.nodes)
    for (const auto& a : n.attrs) {
      if (a.g) count_held_weights(*a.g, m);
      for (const auto& sg : a.graphs) count_held_weights(*sg, m);
    }
}

void create_kernels(Model& m, const LoadOptions& opts, int threads, ThreadPool* pool) {
  if (!m.graph) return;
  auto t0 = std::chrono::steady_clock::now();
  create_graph_kernels(*m.graph, m, opts, threads, pool);
  m.kernel_create_ns +=
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  m.weight_bytes = m.weight_bytes_in_place = 0;
  count_held_weights(*m.graph, m);
}

}  // namespace basalt
