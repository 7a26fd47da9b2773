#include <basalt/basalt.hpp>

#include "onnx/writer.hpp"
#include "opt/optimizer.hpp"
#include "runtime/executor.hpp"
#include "runtime/planner.hpp"
#include "graph/model.hpp"
#include "runtime/profiler.hpp"
#include "runtime/session_access.hpp"
#include "core/thread_pool.hpp"
#include "core/storage.hpp"

#include <algorithm>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <chrono>
#include <cstring>
#include <atomic>
#include <cstdio>
#include <malloc.h>
#include <set>
#include <unordered_set>

namespace basalt {

std::string IoInfo::type_string() const {
  if (kind == "tensor") return dtype_onnx_type_string(dtype);
  if (kind == "sequence") return "seq(" + dtype_onnx_type_string(dtype) + ")";
  if (kind == "optional") return "optional(" + dtype_onnx_type_string(dtype) + ")";
  return kind;
}

struct Session::Impl {
  std::shared_ptr<Model> model;
  SessionOptions opts;
  std::vector<IoInfo> inputs, outputs;
  std::vector<int> input_ids;  // graph input index per IoInfo
  std::shared_ptr<ThreadPool> pool;        // own or process-wide
  std::unique_ptr<Profiler> profiler;      // null = profiling off
  mutable std::atomic<bool> profile_written{false};
  int64_t profile_start_wall_ns = 0;       // system clock, ns since the epoch
  ModelMetadata metadata;
  // Memory (runtime/planner.hpp): plans by input signature and the arenas runs use.
  std::unique_ptr<PlanCache> plans;
  std::shared_ptr<ArenaPool> arenas = std::make_shared<ArenaPool>();
  std::shared_ptr<DynamicPool> dynamic;  // tensors without a slot (runtime/dynamic_pool.hpp)
  mutable std::atomic<uint64_t> last_arena{0}, peak_run{0}, fallbacks{0}, alias_runs{0}, last_heap{0};
  std::shared_ptr<const MemoryPlan> plan_for(const std::vector<std::pair<DType, Shape>>& sig) const;
};

// SessionOptions::free_dimensions_by_*: symbolic dims of the main graph fixed before the optimizer
// runs. A key that no dim carries changes nothing (as in onnxruntime).
static void apply_free_dimensions(Graph& g, const SessionOptions& o) {
  if (o.free_dimensions_by_name.empty() && o.free_dimensions_by_denotation.empty()) return;
  auto fix = [&](TypeInfo& t) {
    for (DimInfo& d : t.dims) {
      if (d.fixed()) continue;
      auto n = d.param.empty() ? o.free_dimensions_by_name.end() : o.free_dimensions_by_name.find(d.param);
      auto a = d.denotation.empty() ? o.free_dimensions_by_denotation.end() : o.free_dimensions_by_denotation.find(d.denotation);
      if (n != o.free_dimensions_by_name.end()) d.value = n->second;
      else if (a != o.free_dimensions_by_denotation.end()) d.value = a->second;
    }
  };
  for (ValueDef& v : g.values) {
    TypeInfo* t = &v.type;
    while ((t->kind == TypeInfo::Kind::Sequence || t->kind == TypeInfo::Kind::Optional) && t->inner) t = t->inner.get();
    if (t->kind == TypeInfo::Kind::Tensor) fix(*t);
  }
}

// SessionOptions::initializers: the caller's tensors replace initializers of the main graph.
static void apply_initializers(Graph& g, const SessionOptions& o) {
  for (const auto& entry : o.initializers) {
    const std::string& name = entry.first;
    const Tensor& t = entry.second;
    auto it = std::find_if(g.values.begin(), g.values.end(), [&](const ValueDef& v) { return v.name == name; });
    if (it == g.values.end() || !it->is_initializer)
      BASALT_THROW(InvalidArgument, "SessionOptions.initializers: '" + name + "' is not an initializer of the model");
    const Tensor& old = it->initializer;
    if (t.dtype() != old.dtype() || t.shape() != old.shape())
      BASALT_THROW(InvalidArgument, "SessionOptions.initializers: '" + name + "' is " + dtype_name(old.dtype()) + " " +
                                        shape_str(old.shape()) + " in the model, the given tensor is " +
                                        dtype_name(t.dtype()) + " " + shape_str(t.shape()));
    if (t.numel() > 0 && !t.raw())
      BASALT_THROW(InvalidArgument, "SessionOptions.initializers: '" + name + "' has no data");
    it->initializer = t;
  }
}

static ModelMetadata metadata_of(const Model& m) {
  ModelMetadata md;
  md.producer_name = m.producer_name;
  md.producer_version = m.producer_version;
  md.domain = m.domain;
  md.description = m.doc_string;
  md.graph_name = m.graph ? m.graph->name : std::string();
  md.graph_description = m.graph_doc_string;
  md.version = m.model_version;
  md.custom = m.metadata_props;
  return md;
}

// SessionOptions::denormals_as_zero for the length of one run on the calling thread; the pool's
// workers take the caller's mode with each job (core/thread_pool.cpp).
struct DenormalsScope {
  bool on;
  unsigned saved = 0;
  explicit DenormalsScope(bool want) : on(want) {
#if defined(__x86_64__)
    if (on) {
      saved = _mm_getcsr();
      _mm_setcsr(saved | 0x8040u);  // FTZ (bit 15) | DAZ (bit 6)
    }
#endif
  }
  ~DenormalsScope() {
#if defined(__x86_64__)
    if (on) _mm_setcsr(saved);
#endif
  }
};

static bool profiling_on(const SessionOptions& o) { return o.enable_profiling || !o.profile_path.empty(); }

// Records the load phase and, inside it, the time spent creating kernels ("prepare"). Kernel
// creation is interleaved with graph building in the loader, so "prepare" is its summed time,
// drawn at the end of the load span; the optimize phase is drawn where it ran, inside load.
static void record_load(Session& s, int64_t t0, int64_t t1) {
  Profiler* p = session_profiler(s);
  if (!p) return;
  int64_t kc = std::min<int64_t>(session_model(s).kernel_create_ns, t1 - t0);
  p->add_phase("load", "parse the model, build graphs, create kernels", t0, t1);
  const Model& m = session_model(s);
  if (m.optimize_end_ns > m.optimize_start_ns && m.optimize_start_ns >= t0)
    p->add_phase("optimize", "graph optimization passes (src/opt)", m.optimize_start_ns, m.optimize_end_ns);
  p->add_phase("prepare", "kernel creation, summed: it is interleaved with graph building during load", t1 - kc, t1);
}

static IoInfo make_info(const ValueDef& v) {
  IoInfo io;
  io.name = v.name;
  const TypeInfo* t = &v.type;
  switch (t->kind) {
    case TypeInfo::Kind::Tensor: io.kind = "tensor"; break;
    case TypeInfo::Kind::Sequence: io.kind = "sequence"; break;
    case TypeInfo::Kind::Optional: io.kind = "optional"; break;
    case TypeInfo::Kind::Map: io.kind = "map"; break;
    case TypeInfo::Kind::SparseTensor: io.kind = "sparse_tensor"; break;
    default: io.kind = "unknown"; break;
  }
  while ((t->kind == TypeInfo::Kind::Sequence || t->kind == TypeInfo::Kind::Optional) && t->inner) t = t->inner.get();
  io.dtype = t->elem;
  io.has_shape = t->has_shape;
  for (auto& d : t->dims) {
    io.shape.push_back(d.fixed() ? d.value : -1);
    io.dim_params.push_back(d.fixed() ? "" : d.param);
  }
  io.has_default = v.is_initializer;
  return io;
}


// Bounds that keep a typo from becoming a hang or an exhausted machine: a million pool threads,
// an hour of spinning.
constexpr int kMaxThreads = 4096;
constexpr int kMaxSpinUs = 1'000'000;

void SessionOptions::validate() const {
  auto bad = [](const std::string& what) { BASALT_THROW(InvalidArgument, "SessionOptions." + what); };
  if (threads < 0 || threads > kMaxThreads)
    bad("threads must be 0 (every core) or 1.." + std::to_string(kMaxThreads) + ", got " + std::to_string(threads));
  if (spin_us < 0 || spin_us > kMaxSpinUs)
    bad("spin_us must be 0 (never spin) or 1.." + std::to_string(kMaxSpinUs) + " microseconds, got " +
        std::to_string(spin_us));
  if (optimization_level < 0 || optimization_level > 3)
    bad("optimization_level must be 0..3 (none, basic, extended, all), got " + std::to_string(optimization_level));
  for (const auto* m : {&free_dimensions_by_name, &free_dimensions_by_denotation})
    for (const auto& [k, v] : *m) {
      const char* which = m == &free_dimensions_by_name ? "free_dimensions_by_name" : "free_dimensions_by_denotation";
      if (k.empty()) bad(std::string(which) + ": the dimension name is empty");
      if (v < 0) bad(std::string(which) + "['" + k + "'] must be >= 0, got " + std::to_string(v));
    }
}

std::unique_ptr<Session> Session::open(const std::string& path, const SessionOptions& opts) {
  opts.validate();
  LoadOptions lo;
  lo.allow_unsupported = opts.allow_unsupported;
  int64_t t0 = prof_now_ns();
  auto s = SessionAccess::create(load_model_file(path, lo), opts);
  record_load(*s, t0, prof_now_ns());
  return s;
}

std::unique_ptr<Session> Session::from_bytes(const void* data, size_t size, const SessionOptions& opts) {
  opts.validate();
  LoadOptions lo;
  lo.allow_unsupported = opts.allow_unsupported;
  int64_t t0 = prof_now_ns();
  auto s = SessionAccess::create(load_model_bytes(data, size, lo), opts);
  record_load(*s, t0, prof_now_ns());
  return s;
}

std::unique_ptr<Session> SessionAccess::create(std::shared_ptr<Model> m, const SessionOptions& opts) {
  auto impl = std::make_unique<Session::Impl>();
  impl->model = std::move(m);
  impl->opts = opts;
  opts.validate();
  int threads = opts.threads > 0 ? opts.threads : ThreadPool::available_cores();
  impl->pool = opts.shared_pool ? ThreadPool::shared(threads, opts.spin_us) : std::make_shared<ThreadPool>(threads, opts.spin_us);
  impl->opts.threads = impl->pool->threads();
  impl->plans = std::make_unique<PlanCache>(opts.plan_cache_entries, opts.plan_cache_bytes);
  impl->dynamic = std::make_shared<DynamicPool>(opts.dynamic_pool_bytes);
  impl->metadata = metadata_of(*impl->model);
  apply_free_dimensions(*impl->model->graph, opts);
  apply_initializers(*impl->model->graph, opts);
  {
    // Kernels do not exist yet: passes rewrite plain graph nodes (src/opt/optimizer.hpp).
    OptimizeOptions oo;
    oo.level = static_cast<OptLevel>(opts.optimization_level);
    oo.winograd = opts.winograd;
    auto rep = std::make_shared<OptimizeReport>();
    impl->model->optimize_start_ns = prof_now_ns();
    optimize_model(*impl->model, oo, rep.get());
    impl->model->optimize_end_ns = prof_now_ns();
    impl->model->optimize_report = std::move(rep);
  }
  // Before create_kernels: packing may drop the original weights.
  if (!opts.optimized_model_path.empty()) save_model_file(*impl->model, opts.optimized_model_path);
  LoadOptions lo;
  lo.allow_unsupported = opts.allow_unsupported;
  lo.winograd = opts.winograd;
  create_kernels(*impl->model, lo, impl->opts.threads, impl->pool.get());
  const Graph& g = *impl->model->graph;
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    impl->inputs.push_back(make_info(g.values[size_t(g.inputs[i])]));
    impl->input_ids.push_back(int(i));
  }
  for (int o : g.outputs) impl->outputs.push_back(make_info(g.values[size_t(o)]));
  if (profiling_on(opts)) {
    impl->profiler = std::make_unique<Profiler>();
    impl->profile_start_wall_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                      std::chrono::system_clock::now().time_since_epoch()).count();
  }
  std::unique_ptr<Session> s(new Session());
  s->impl_ = std::move(impl);
  return s;
}

Session::~Session() {
  if (impl_ && impl_->profiler && !impl_->opts.profile_path.empty() && !impl_->profile_written) {
    try {
      impl_->profiler->write_chrome_trace(impl_->opts.profile_path);
    } catch (const std::exception& e) {
      // A destructor cannot throw; end_profiling() is the way to see this error as an exception.
      std::fprintf(stderr, "basalt: %s\n", e.what());
    }
  }
  // Everything the session allocated goes now (arenas are unmapped with their pool); trimming
  // the heap hands freed small blocks back to the OS too, so resident memory returns near its
  // level before the model was loaded.
  impl_.reset();
  malloc_trim(0);
}

Profiler* SessionAccess::profiler(const Session& s) { return s.impl_->profiler.get(); }

std::string Session::end_profiling(const std::string& path) const {
  if (!impl_->profiler) BASALT_THROW(InvalidArgument, "end_profiling: profiling is off (set SessionOptions::profile_path or enable_profiling)");
  std::string p = path.empty() ? impl_->opts.profile_path : path;
  if (p.empty()) BASALT_THROW(InvalidArgument, "end_profiling: no path given and SessionOptions::profile_path is empty");
  impl_->profile_written = true;  // set first: a failed write is reported here, not again at destruction
  impl_->profiler->write_chrome_trace(p);
  return p;
}
const std::vector<IoInfo>& Session::inputs() const { return impl_->inputs; }
const std::vector<IoInfo>& Session::outputs() const { return impl_->outputs; }
const Model& SessionAccess::model(const Session& s) { return *s.impl_->model; }
const SessionOptions& Session::options() const { return impl_->opts; }
const ModelMetadata& Session::metadata() const { return impl_->metadata; }
int64_t Session::profiling_start_ns() const { return impl_->profile_start_wall_ns; }

static std::string dims_str(const IoInfo& io) {
  std::string s = "[";
  for (size_t i = 0; i < io.shape.size(); ++i) {
    if (i) s += ",";
    s += io.shape[i] >= 0 ? std::to_string(io.shape[i]) : (io.dim_params[i].empty() ? "?" : io.dim_params[i]);
  }
  return s + "]";
}

static void check_input(const IoInfo& io, const Value& v) {
  std::string what = "input '" + io.name + "'";
  if (io.kind == "tensor") {
    if (!v.is_tensor()) BASALT_THROW(InvalidArgument, what + ": expected a tensor " + io.type_string());
    const Tensor& t = v.tensor;
    if (io.dtype != DType::Undefined && t.dtype() != io.dtype)
      BASALT_THROW(InvalidArgument, what + ": expected dtype " + dtype_name(io.dtype) + ", got " + dtype_name(t.dtype()));
    if (io.has_shape) {
      if (size_t(t.rank()) != io.shape.size())
        BASALT_THROW(InvalidArgument, what + ": expected rank " + std::to_string(io.shape.size()) + " " + dims_str(io) +
                                          ", got shape " + shape_str(t.shape()));
      for (size_t d = 0; d < io.shape.size(); ++d)
        if (io.shape[d] >= 0 && t.shape()[d] != io.shape[d])
          BASALT_THROW(InvalidArgument, what + ": dimension " + std::to_string(d) + " must be " + std::to_string(io.shape[d]) +
                                            " " + dims_str(io) + ", got shape " + shape_str(t.shape()));
    }
  } else if (io.kind == "sequence") {
    if (!v.is_sequence()) BASALT_THROW(InvalidArgument, what + ": expected a sequence " + io.type_string());
    for (auto& t : *v.sequence)
      if (io.dtype != DType::Undefined && t.dtype() != io.dtype)
        BASALT_THROW(InvalidArgument, what + ": expected sequence elements of dtype " + dtype_name(io.dtype) + ", got " +
                                          dtype_name(t.dtype()));
  }
}

// Outputs are the caller's to read and write: an output that shares storage with a weight (which
// may be a read-only page of the mapped file), with an input, or with an earlier output (a graph
// that returns one value twice) is copied. Outputs produced fresh by a kernel are not.
void Session::make_outputs_private(std::vector<Value>& outs, const std::vector<Value>& ins) const {
  std::unordered_set<const Storage*> shared;
  for (int c : impl_->model->graph->constants) {
    const auto& st = impl_->model->graph->values[size_t(c)].initializer.storage();
    if (st) shared.insert(st.get());
  }
  auto note = [&](const Value& v) {
    if (v.is_tensor() && v.tensor.storage()) shared.insert(v.tensor.storage().get());
    if (v.is_sequence())
      for (auto& t : *v.sequence)
        if (t.storage()) shared.insert(t.storage().get());
  };
  for (auto& v : ins) note(v);
  auto fix = [&](Tensor& t) {
    if (!t.storage()) return;
    // Views of the arena or of weights are copied; a dynamic pool block is the caller's already.
    const Storage& st = *t.storage();
    if (!(st.owned || st.exclusive) || shared.count(&st)) t = t.clone();
    shared.insert(t.storage().get());
  };
  for (auto& v : outs) {
    if (v.is_tensor()) {
      fix(v.tensor);
    } else if (v.is_sequence()) {
      auto items = std::make_shared<std::vector<Tensor>>(*v.sequence);
      for (auto& t : *items) fix(t);
      v.sequence = items;
    }
  }
}

std::vector<Value> Session::run(const std::vector<std::pair<std::string, Value>>& feeds,
                                const std::vector<std::string>& output_names, const RunOptions& ro) const {
  return run_impl(feeds, output_names, nullptr, ro);
}

std::vector<Value> Session::run_into(const std::vector<std::pair<std::string, Value>>& feeds,
                                     const std::vector<std::pair<std::string, Tensor>>& outputs,
                                     const RunOptions& ro) const {
  const Graph& g = *impl_->model->graph;
  std::vector<Tensor> bound(g.values.size());
  std::vector<int> which;  // output index per binding
  for (const auto& [name, t] : outputs) {
    size_t k = 0;
    while (k < impl_->outputs.size() && impl_->outputs[k].name != name) ++k;
    if (k == impl_->outputs.size()) BASALT_THROW(InvalidArgument, "run_into: unknown output '" + name + "'");
    const IoInfo& io = impl_->outputs[k];
    int v = g.outputs[k];
    if (bound[size_t(v)].defined()) BASALT_THROW(InvalidArgument, "run_into: output '" + name + "' bound twice");
    if (t.dtype() == DType::String) BASALT_THROW(InvalidArgument, "run_into: output '" + name + "': string outputs cannot be bound");
    if (io.kind != "tensor") BASALT_THROW(InvalidArgument, "run_into: output '" + name + "' is a " + io.kind + ", not a tensor");
    if (io.dtype != DType::Undefined && t.dtype() != io.dtype)
      BASALT_THROW(InvalidArgument, "run_into: output '" + name + "' is " + dtype_name(io.dtype) + ", the bound tensor is " +
                                        dtype_name(t.dtype()));
    if (t.numel() > 0 && !t.raw()) BASALT_THROW(InvalidArgument, "run_into: output '" + name + "': the bound tensor has no memory");
    bound[size_t(v)] = t;
    which.push_back(int(k));
  }
  std::vector<Value> res = run_impl(feeds, {}, &bound, ro);
  // Check every binding before writing any, so a mismatch leaves the caller's buffers untouched
  // by the copy step (kernels may already have written into matching ones).
  for (size_t j = 0; j < which.size(); ++j) {
    const Tensor& b = outputs[j].second;
    const Value& r = res[size_t(which[j])];
    const std::string& name = outputs[j].first;
    if (!r.is_tensor()) BASALT_THROW(InvalidArgument, "run_into: output '" + name + "' produced no tensor");
    if (r.tensor.dtype() != b.dtype() || r.tensor.shape() != b.shape())
      BASALT_THROW(InvalidArgument, "run_into: output '" + name + "' is " + dtype_name(r.tensor.dtype()) + " " +
                                        shape_str(r.tensor.shape()) + ", the bound tensor is " + dtype_name(b.dtype()) + " " +
                                        shape_str(b.shape()));
  }
  for (size_t j = 0; j < which.size(); ++j) {
    const Tensor& b = outputs[j].second;
    const Tensor& r = res[size_t(which[j])].tensor;
    if (r.raw() != b.raw() && b.nbytes()) std::memcpy(const_cast<void*>(b.raw()), r.raw(), b.nbytes());
    res[size_t(which[j])] = Value(b);
  }
  return res;
}

std::vector<Value> Session::run_impl(const std::vector<std::pair<std::string, Value>>& feeds,
                                     const std::vector<std::string>& output_names, const std::vector<Tensor>* bound,
                                     const RunOptions& ro) const {
  const Graph& g = *impl_->model->graph;
  std::vector<Value> ins(g.inputs.size());
  std::vector<bool> given(g.inputs.size(), false);
  for (const auto& [name, v] : feeds) {
    size_t k = 0;
    while (k < impl_->inputs.size() && impl_->inputs[k].name != name) ++k;
    if (k == impl_->inputs.size()) {
      std::string names;
      for (auto& io : impl_->inputs) names += (names.empty() ? "" : ", ") + io.name;
      BASALT_THROW(InvalidArgument, "unknown input '" + name + "'; the model's inputs are: " + names);
    }
    if (given[k]) BASALT_THROW(InvalidArgument, "input '" + name + "' given twice");
    check_input(impl_->inputs[k], v);
    ins[k] = v;
    given[k] = true;
  }
  for (size_t k = 0; k < ins.size(); ++k)
    if (!given[k] && !impl_->inputs[k].has_default && impl_->inputs[k].kind != "optional")
      BASALT_THROW(InvalidArgument, "input '" + impl_->inputs[k].name + "' (" + impl_->inputs[k].type_string() + " " +
                                        dims_str(impl_->inputs[k]) + ") is required but was not given");
  RunContext rc;
  rc.threads = impl_->pool->threads();
  rc.pool = impl_->pool.get();
  rc.terminate = ro.terminate;
  if (bound) {
    rc.bound = bound;
    rc.bound_graph = &g;
  }

  // Memory: the plan for this input signature, the limit checked before anything is allocated,
  // then an arena of exactly the planned size (runtime/planner.hpp).
  std::vector<std::pair<DType, Shape>> sig(g.inputs.size(), {DType::Undefined, Shape{-1}});
  for (size_t k = 0; k < ins.size(); ++k)
    if (given[k] && ins[k].is_tensor()) sig[k] = {ins[k].tensor.dtype(), ins[k].tensor.shape()};
  std::shared_ptr<const MemoryPlan> plan = impl_->plan_for(sig);
  const uint64_t limit = impl_->opts.memory_limit;
  if (plan && limit && plan->peak_bytes > limit) {
    std::string shapes;
    for (size_t k = 0; k < sig.size(); ++k)
      if (given[k] && ins[k].is_tensor()) shapes += (shapes.empty() ? "" : ", ") + impl_->inputs[k].name + "=" + shape_str(sig[k].second);
    BASALT_THROW(MemoryLimit, "the run needs " + std::to_string(plan->peak_bytes) + " bytes (arena " +
                                  std::to_string(plan->arena_bytes) + ", inputs " + std::to_string(plan->inputs_bytes) +
                                  ", outputs " + std::to_string(plan->outputs_bytes) + ", weights " +
                                  std::to_string(plan->weights_bytes + plan->packed_weights_bytes) +
                                  "), more than the memory limit of " + std::to_string(limit) +
                                  " bytes; input shapes " + shapes);
  }
  ArenaRun ar;
  std::shared_ptr<Arena> arena;
  struct ArenaReturn {
    ArenaPool* pool;
    std::shared_ptr<Arena>* a;
    ArenaRun* ar;
    ~ArenaReturn() {
      ar->keep.reset();
      if (*a) pool->release(std::move(*a));
    }
  } arena_return{impl_->arenas.get(), &arena, &ar};
  if (plan && impl_->opts.memory_plan) {
    ar.plan = plan.get();
    ar.graph = &g;
    ar.limit = limit;
    ar.pool = impl_->dynamic.get();
    if (plan->arena_bytes) {
      arena = impl_->arenas->acquire(plan->arena_bytes, impl_->pool.get());
      ar.base = arena->data();
      ar.size = plan->arena_bytes;
      ar.keep = arena;
    }
    rc.arena = &ar;
    impl_->last_arena = plan->arena_bytes;
  }
  if (plan) {
    uint64_t prev = impl_->peak_run.load();
    while (plan->peak_bytes > prev && !impl_->peak_run.compare_exchange_weak(prev, plan->peak_bytes)) {
    }
  }
  std::vector<Value> outs;
  DenormalsScope denormals(impl_->opts.denormals_as_zero);
  if (Profiler* prof = impl_->profiler.get()) {
    // A failed run's partial record is dropped with `rec`.
    std::unique_ptr<RunProfile> rec = prof->begin_run();
    rc.profile = rec.get();
    rec->start_ns = prof_now_ns();
    outs = execute_graph(g, ins, {}, rc);
    rec->end_ns = prof_now_ns();
    prof->end_run(std::move(rec));
  } else {
    outs = execute_graph(g, ins, {}, rc);
  }
  if (bound) {
    // Bound outputs stay where they are (run_into copies or checks them); the rest as usual.
    std::vector<Value> rest;
    std::vector<size_t> idx;
    for (size_t k = 0; k < outs.size(); ++k)
      if (!(*bound)[size_t(g.outputs[k])].defined()) {
        rest.push_back(outs[k]);
        idx.push_back(k);
      }
    make_outputs_private(rest, ins);
    for (size_t j = 0; j < idx.size(); ++j) outs[idx[j]] = std::move(rest[j]);
  } else {
    make_outputs_private(outs, ins);  // outputs viewing the arena are copied out here
  }
  impl_->fallbacks += ar.fallbacks;
  impl_->last_heap = ar.heap_bytes;
  if (ar.abandoned) ++impl_->alias_runs;
  if (output_names.empty()) return outs;
  std::vector<Value> sel;
  for (const auto& n : output_names) {
    size_t k = 0;
    while (k < impl_->outputs.size() && impl_->outputs[k].name != n) ++k;
    if (k == impl_->outputs.size()) BASALT_THROW(InvalidArgument, "unknown output '" + n + "'");
    sel.push_back(outs[k]);
  }
  return sel;
}

}  // namespace basalt

namespace basalt {

std::shared_ptr<const MemoryPlan> Session::Impl::plan_for(const std::vector<std::pair<DType, Shape>>& sig) const {
  const Graph& g = *model->graph;
  try {
    return plans->get(shape_key(sig), [&] {
      return build_memory_plan(g, sig, opts.threads, model->weight_bytes, model->packed_weight_bytes);
    });
  } catch (const Error& e) {
    // Absurd sizes are refused; any other planning failure leaves the run on the heap, where
    // the kernels report real errors themselves.
    if (e.code() == ErrorCode::MemoryLimit) throw;
    return nullptr;
  }
}

ThreadPoolStats Session::pool_stats() const {
  ThreadPoolStats s;
  const ThreadPool& p = *impl_->pool;
  s.threads = p.threads();
  s.spin_us = p.spin_us();
  s.shared = impl_->opts.shared_pool;
  s.busy_detections = p.busy_detections();
  s.preempted_spins = p.preempted_spins();
  s.apart_moves = p.apart_moves();
  return s;
}

MemoryStats Session::memory_stats() const {
  MemoryStats s;
  const Model& m = *impl_->model;
  s.weights_bytes = m.weight_bytes;
  s.weights_in_place_bytes = m.weight_bytes_in_place;
  s.packed_weights_bytes = m.packed_weight_bytes;
  s.memory_limit = impl_->opts.memory_limit;
  PlanCache::Stats c = impl_->plans->stats();
  s.plan_cache_hits = c.hits;
  s.plan_cache_misses = c.misses;
  s.plan_cache_evictions = c.evictions;
  s.plan_cache_entries = c.entries;
  s.plan_cache_bytes = c.bytes;
  s.arena_bytes = impl_->arenas->mapped_bytes();
  s.arena_maps = impl_->arenas->maps();
  s.arena_grows = impl_->arenas->grows();
  s.last_run_arena_bytes = impl_->last_arena;
  s.peak_run_bytes = impl_->peak_run;
  s.heap_fallbacks = impl_->fallbacks;
  s.unplanned_alias_runs = impl_->alias_runs;
  s.last_run_heap_bytes = impl_->last_heap;
  DynamicPool::Stats d = impl_->dynamic->stats();
  s.dynamic_pool_hits = d.hits;
  s.dynamic_pool_misses = d.misses;
  s.dynamic_pool_frees = d.frees;
  s.dynamic_pool_held_bytes = d.idle_bytes;
  s.dynamic_pool_in_use_bytes = d.in_use_bytes;
  s.dynamic_pool_peak_bytes = d.peak_bytes;
  return s;
}

MemoryPlanReport Session::plan_memory(const std::map<std::string, Shape>& shapes) const {
  const Graph& g = *impl_->model->graph;
  for (auto& [n, sh] : shapes) {
    bool known = false;
    for (auto& io : impl_->inputs) known |= io.name == n;
    if (!known) BASALT_THROW(InvalidArgument, "plan: the model has no input '" + n + "'");
  }
  std::vector<std::pair<DType, Shape>> sig(g.inputs.size(), {DType::Undefined, Shape{-1}});
  for (size_t k = 0; k < impl_->inputs.size() && k < sig.size(); ++k) {
    const IoInfo& io = impl_->inputs[k];
    auto it = shapes.find(io.name);
    if (it != shapes.end()) {
      for (int64_t d : it->second)
        if (d < 0) BASALT_THROW(InvalidArgument, "plan: input '" + io.name + "' has a negative dimension " + shape_str(it->second));
      sig[k] = {io.dtype == DType::Undefined ? DType::Float : io.dtype, it->second};
      continue;
    }
    if (io.has_default || io.kind != "tensor") continue;
    bool fixed = io.has_shape;
    for (int64_t d : io.shape) fixed &= d >= 0;
    if (!fixed) BASALT_THROW(InvalidArgument, "plan: input '" + io.name + "' " + dims_str(io) + " has symbolic dims: give its shape");
    sig[k] = {io.dtype, io.shape};
  }
  std::shared_ptr<const MemoryPlan> p = impl_->plans->get(shape_key(sig), [&] {
    return build_memory_plan(g, sig, impl_->opts.threads, impl_->model->weight_bytes, impl_->model->packed_weight_bytes);
  });
  MemoryPlanReport r;
  r.key = p->key;
  r.arena_bytes = p->arena_bytes;
  r.tensor_bytes = p->tensor_bytes;
  r.workspace_bytes = p->workspace_bytes;
  r.inputs_bytes = p->inputs_bytes;
  r.outputs_bytes = p->outputs_bytes;
  r.weights_bytes = p->weights_bytes;
  r.packed_weights_bytes = p->packed_weights_bytes;
  r.peak_bytes = p->peak_bytes;
  r.planned_tensors = p->planned_tensors;
  r.aliased_tensors = p->aliased_tensors;
  r.in_place_tensors = p->in_place_tensors;
  r.concat_in_place = p->concat_in_place;
  r.dynamic_values = p->dynamic_values;
  return r;
}

}  // namespace basalt
