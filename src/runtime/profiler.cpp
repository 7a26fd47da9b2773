#include "runtime/profiler.hpp"

#include "core/json_text.hpp"
#include "core/storage.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>

namespace basalt {

int prof_thread_index() {
  static std::atomic<int> next{0};
  thread_local int id = next.fetch_add(1);
  return id;
}

void RunProfile::reserve(size_t nodes_hint, size_t tensors_hint, size_t dims_hint) {
  nodes.reserve(nodes_hint);
  tensors.reserve(tensors_hint);
  dims.reserve(dims_hint);
  frames.reserve(8);
}

static uint64_t value_bytes(const Value& v) {
  if (v.is_tensor()) return v.tensor.nbytes();
  uint64_t b = 0;
  if (v.is_sequence())
    for (const Tensor& t : *v.sequence) b += t.nbytes();
  return b;
}

uint64_t RunProfile::add_tensor(const Value* v, int value_id) {
  ProfTensor t;
  t.value = value_id;
  t.dims_at = uint32_t(dims.size());
  if (v && !v->is_none()) {
    t.present = true;
    t.bytes = value_bytes(*v);
    if (v->is_tensor()) {
      t.dtype = v->tensor.dtype();
      t.rank = uint32_t(v->tensor.rank());
      dims.insert(dims.end(), v->tensor.shape().begin(), v->tensor.shape().end());
    } else {
      t.is_sequence = true;
      t.dtype = v->seq_elem_type;
    }
  }
  tensors.push_back(t);
  return t.bytes;
}

// True when storage s is used by any of the values in `vs`.
static bool shares(const Storage* s, std::span<const Value* const> vs) {
  for (const Value* v : vs) {
    if (!v) continue;
    if (v->is_tensor() && v->tensor.storage().get() == s) return true;
    if (v->is_sequence())
      for (const Tensor& t : *v->sequence)
        if (t.storage().get() == s) return true;
  }
  return false;
}

uint64_t RunProfile::new_bytes(const Value& v, std::span<const Value* const> ins, std::span<const Value* const> impl) {
  auto one = [&](const Tensor& t) -> uint64_t {
    const Storage* s = t.storage().get();
    if (!s || shares(s, ins) || shares(s, impl)) return 0;
    return t.nbytes();
  };
  if (v.is_tensor()) return one(v.tensor);
  uint64_t b = 0;
  if (v.is_sequence())
    for (const Tensor& t : *v.sequence) b += one(t);
  return b;
}

void RunProfile::snapshot_alive() {
  // Called only when the live total reaches a new high, which stops happening once the run
  // passes its widest point; each call walks the frames executing now.
  peak_alive.clear();
  for (const Frame& f : frames) {
    for (size_t v = 0; v < f.counted->size(); ++v) {
      uint64_t b = (*f.counted)[v];
      if (!b) continue;
      ProfAlive a;
      a.graph = f.graph;
      a.value = int32_t(v);
      a.bytes = b;
      const Value& val = (*f.values)[v];
      if (val.is_tensor()) {
        a.dtype = val.tensor.dtype();
        a.shape = val.tensor.shape();
      } else if (val.is_sequence()) {
        a.dtype = val.seq_elem_type;
      }
      peak_alive.push_back(std::move(a));
    }
  }
}

void RunProfile::after_node(size_t idx) {
  nodes[idx].live_after = live_;
  if (live_ > peak_bytes) {
    peak_bytes = live_;
    peak_node = int32_t(idx);
    snapshot_alive();
  }
}

void RunProfile::note_inputs_peak() {
  // No snapshot here: it would sit in the run's set-up, outside every node event; when the
  // inputs alone are the peak, the inputs are what is alive (the CLI says so).
  if (live_ > peak_bytes) {
    peak_bytes = live_;
    peak_node = -1;
    peak_alive.clear();
  }
}

void Profiler::add_phase(std::string name, std::string detail, int64_t start_ns, int64_t end_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  phases_.push_back({std::move(name), std::move(detail), start_ns, end_ns});
}

std::unique_ptr<RunProfile> Profiler::begin_run() const {
  auto r = std::make_unique<RunProfile>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    r->reserve(hint_nodes_, hint_tensors_, hint_dims_);
  }
  r->thread = prof_thread_index();
  return r;
}

void Profiler::end_run(std::unique_ptr<RunProfile> r) {
  std::lock_guard<std::mutex> lock(mu_);
  hint_nodes_ = std::max(hint_nodes_, r->nodes.size());
  hint_tensors_ = std::max(hint_tensors_, r->tensors.size());
  hint_dims_ = std::max(hint_dims_, r->dims.size());
  r->frames.clear();
  runs_.push_back(std::shared_ptr<const RunProfile>(std::move(r)));
}

void Profiler::clear_runs() {
  std::lock_guard<std::mutex> lock(mu_);
  runs_.clear();
}

std::vector<ProfPhase> Profiler::phases() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phases_;
}

std::vector<std::shared_ptr<const RunProfile>> Profiler::runs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return runs_;
}

std::string prof_shape_str(const RunProfile& r, const ProfTensor& t) {
  if (!t.present) return "none";
  if (t.is_sequence) return "sequence";
  std::string s = "[";
  for (uint32_t i = 0; i < t.rank; ++i) {
    if (i) s += ",";
    s += std::to_string(r.dims[t.dims_at + i]);
  }
  return s + "]";
}

double node_flops(const RunProfile& r, const ProfNode& n) {
  const Node& d = n.def();
  if (!d.domain.empty()) return 0;
  auto in = [&](int i) -> const ProfTensor* {
    if (i >= n.n_in) return nullptr;
    const ProfTensor* t = &r.tensors[n.tensors_at + uint32_t(i)];
    return t->present && !t->is_sequence ? t : nullptr;
  };
  auto out = [&](int i) -> const ProfTensor* {
    if (i >= n.n_out) return nullptr;
    const ProfTensor* t = &r.tensors[n.tensors_at + n.n_in + uint32_t(i)];
    return t->present && !t->is_sequence ? t : nullptr;
  };
  auto numel = [&](const ProfTensor* t) {
    double e = 1;
    for (uint32_t i = 0; i < t->rank; ++i) e *= double(r.dims[t->dims_at + i]);
    return e;
  };
  auto dim = [&](const ProfTensor* t, uint32_t i) { return double(r.dims[t->dims_at + i]); };
  const ProfTensor *x = in(0), *w = in(1), *y = out(0);
  if (!x || !w || !y) return 0;
  if (d.op_type == "Conv") {
    // Each output element is a dot product over (C/group) * kernel-size inputs.
    if (w->rank < 2 || dim(w, 0) == 0) return 0;
    return 2.0 * numel(y) * (numel(w) / dim(w, 0));
  }
  if (d.op_type == "ConvTranspose") {
    // Each input element is scattered into (M/group) * kernel-size outputs.
    if (w->rank < 2 || dim(w, 0) == 0) return 0;
    return 2.0 * numel(x) * (numel(w) / dim(w, 0));
  }
  if (d.op_type == "MatMul") {
    if (x->rank == 0) return 0;
    return 2.0 * numel(y) * dim(x, x->rank - 1);
  }
  if (d.op_type == "Gemm") {
    if (x->rank != 2) return 0;
    bool ta = false;
    for (const auto& a : d.attrs)
      if (a.name == "transA") ta = a.i != 0;
    return 2.0 * numel(y) * (ta ? dim(x, 0) : dim(x, 1));
  }
  return 0;
}

static void json_str(std::string& o, const std::string& s) { append_json_string(o, s); }

static void json_us(std::string& o, int64_t ns) {
  char b[32];
  std::snprintf(b, sizeof b, "%.3f", double(ns) / 1000.0);
  o += b;
}

void Profiler::write_chrome_trace(const std::string& path) const {
  auto phases = this->phases();
  auto runs = this->runs();
  int64_t origin = INT64_MAX;
  for (auto& p : phases) origin = std::min(origin, p.start_ns);
  for (auto& r : runs) origin = std::min(origin, r->start_ns);
  if (origin == INT64_MAX) origin = 0;

  std::string o;
  o.reserve(4096);
  o += "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"basalt\",\"memory_counter\":\"tensor bytes in use\"},\n"
       "\"traceEvents\":[\n";
  bool first = true;
  auto begin_event = [&]() {
    if (!first) o += ",\n";
    first = false;
  };
  auto complete = [&](const std::string& name, const char* cat, int64_t s, int64_t e, int tid) {
    begin_event();
    o += "{\"name\":";
    json_str(o, name);
    o += ",\"cat\":\"";
    o += cat;
    o += "\",\"ph\":\"X\",\"pid\":1,\"tid\":" + std::to_string(tid) + ",\"ts\":";
    json_us(o, s - origin);
    o += ",\"dur\":";
    json_us(o, e - s);
  };
  begin_event();
  o += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"args\":{\"name\":\"basalt\"}}";
  for (auto& p : phases) {
    complete(p.name, "phase", p.start_ns, p.end_ns, 0);
    o += ",\"args\":{\"phase\":";
    json_str(o, p.name);
    o += ",\"detail\":";
    json_str(o, p.detail);
    o += "}}";
  }
  for (size_t ri = 0; ri < runs.size(); ++ri) {
    const RunProfile& r = *runs[ri];
    complete("run", "phase", r.start_ns, r.end_ns, r.thread);
    o += ",\"args\":{\"phase\":\"run\",\"run\":" + std::to_string(ri) + ",\"nodes\":" + std::to_string(r.nodes.size()) +
         ",\"peak_tensor_bytes\":" + std::to_string(r.peak_bytes) + "}}";
    for (size_t ni = 0; ni < r.nodes.size(); ++ni) {
      const ProfNode& n = r.nodes[ni];
      const Node& d = n.def();
      complete(d.name, "node", n.start_ns, n.end_ns, n.thread);
      o += ",\"args\":{\"node\":";
      json_str(o, d.name);
      o += ",\"op\":";
      json_str(o, d.domain.empty() ? d.op_type : d.domain + ":" + d.op_type);
      o += ",\"kernel\":\"ref\",\"thread\":" + std::to_string(n.thread) + ",\"run\":" + std::to_string(ri);
      if (n.parent >= 0) {
        o += ",\"parent\":";
        json_str(o, r.nodes[size_t(n.parent)].def().name);
        o += ",\"graph\":";
        json_str(o, n.graph->name);
      }
      for (int side = 0; side < 2; ++side) {
        o += side ? ",\"output_shapes\":[" : ",\"input_shapes\":[";
        uint32_t b = n.tensors_at + (side ? n.n_in : 0), cnt = side ? n.n_out : n.n_in;
        for (uint32_t k = 0; k < cnt; ++k) {
          const ProfTensor& t = r.tensors[b + k];
          if (k) o += ",";
          json_str(o, t.present ? (t.is_sequence ? std::string("sequence(") + dtype_name(t.dtype) + ")"
                                                 : std::string(dtype_name(t.dtype)) + prof_shape_str(r, t))
                                : std::string("none"));
        }
        o += "]";
      }
      o += ",\"bytes\":" + std::to_string(n.bytes) + "}}";
      begin_event();
      o += "{\"name\":\"tensor bytes in use\",\"ph\":\"C\",\"pid\":1,\"ts\":";
      json_us(o, n.end_ns - origin);
      o += ",\"args\":{\"bytes\":" + std::to_string(n.live_after) + "}}";
    }
  }
  o += "\n]}\n";
  std::ofstream f(path, std::ios::binary);
  if (!f) BASALT_THROW(Io, "cannot open profile file '" + path + "' for writing");
  f.write(o.data(), std::streamsize(o.size()));
  f.close();
  if (!f) BASALT_THROW(Io, "cannot write profile file '" + path + "'");
}

}  // namespace basalt
