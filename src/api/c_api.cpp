// The C API (include/basalt/c_api.h) over the C++ API.
//
// Every entry point that can fail runs its body inside guarded(), which turns any exception
// (basalt::Error, std::bad_alloc, anything else) into a basalt_status. That is the only place
// exceptions stop, so nothing can unwind into C code.
#include <basalt/basalt.hpp>
#include <basalt/c_api.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <limits>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

using basalt::DType;
using basalt::Tensor;
using basalt::Value;

struct basalt_status {
  int32_t code;
  std::string message;
  bool is_static;  // the preallocated out-of-memory status: destroy must not free it
};

struct basalt_session {
  std::unique_ptr<basalt::Session> session;
  // dim_names arrays handed out by *_info: pointers into the session's IoInfo strings, which never
  // change after the session is created.
  std::vector<std::vector<const char*>> input_dim_names, output_dim_names;
};

struct basalt_tensor {
  Tensor tensor;
};

struct basalt_sequence {
  std::vector<Tensor> items;
  DType elem = DType::Undefined;
};

namespace {

// Returned when even allocating a status fails. Built at library load, so handing it out
// allocates nothing.
basalt_status g_out_of_memory{BASALT_STATUS_OUT_OF_MEMORY, "out of memory", true};

basalt_status* make_status(int32_t code, const char* message) noexcept {
  try {
    return new basalt_status{code, message, false};
  } catch (...) {
    return &g_out_of_memory;
  }
}

// An error the C layer itself detects (bad pointer, bad struct_size, ...).
[[noreturn]] void fail(int32_t code, const std::string& message) {
  throw basalt::Error(static_cast<basalt::ErrorCode>(code), message);
}
[[noreturn]] void invalid(const std::string& message) { fail(BASALT_STATUS_INVALID_ARGUMENT, message); }

template <class F>
basalt_status* guarded(F&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const basalt::Error& e) {
    return make_status(static_cast<int32_t>(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return &g_out_of_memory;
  } catch (const std::exception& e) {
    try {
      return make_status(BASALT_STATUS_INTERNAL, (std::string("internal error: ") + e.what()).c_str());
    } catch (...) {
      return &g_out_of_memory;
    }
  } catch (...) {
    return make_status(BASALT_STATUS_INTERNAL, "internal error: unknown exception");
  }
}

// struct_size above this is certainly an uninitialised field, not a struct from a newer header.
constexpr size_t kMaxStructSize = 4096;

// Checks an in-struct's struct_size: at least the version-1 size, and any bytes beyond what this
// library knows must be zero (they would be fields of a newer header, set to non-defaults).
void check_in_struct(const void* p, size_t struct_size, size_t v1_size, size_t known_size, const char* what) {
  if (struct_size < v1_size || struct_size > kMaxStructSize)
    invalid(std::string(what) + ".struct_size is " + std::to_string(struct_size) + "; set it to sizeof(" + what + ")");
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = known_size; i < struct_size; ++i)
    if (b[i] != 0)
      fail(BASALT_STATUS_UNSUPPORTED, std::string(what) + " sets a field at byte offset " + std::to_string(i) +
                                          " that this library (API version " + std::to_string(BASALT_API_VERSION) +
                                          ") does not know");
}

basalt::SessionOptions read_options(const basalt_session_options* o) {
  basalt::SessionOptions so;
  if (!o) return so;
  // Version 1 ends after memory_limit; later versions only append.
  constexpr size_t kV1 = offsetof(basalt_session_options, memory_limit) + sizeof(uint64_t);
  check_in_struct(o, o->struct_size, kV1, sizeof(basalt_session_options), "basalt_session_options");
  so.threads = o->threads;
  so.allow_unsupported = o->allow_unsupported != 0;
  so.memory_limit = o->memory_limit;
  if (o->struct_size >= offsetof(basalt_session_options, profile_path) + sizeof(const char*) && o->profile_path)
    so.profile_path = o->profile_path;
  if (o->struct_size >= offsetof(basalt_session_options, enable_profiling) + sizeof(int32_t))
    so.enable_profiling = o->enable_profiling != 0;
  auto has = [&](size_t off, size_t sz) { return o->struct_size >= off + sz; };
  if (has(offsetof(basalt_session_options, shared_pool), sizeof(int32_t))) so.shared_pool = o->shared_pool != 0;
  if (has(offsetof(basalt_session_options, spin_us), sizeof(int32_t))) {
    if (o->spin_us < 0 && o->spin_us != BASALT_SPIN_NEVER)
      invalid("basalt_session_options.spin_us must be >= 0 or BASALT_SPIN_NEVER, got " + std::to_string(o->spin_us));
    if (o->spin_us == BASALT_SPIN_NEVER) so.spin_us = 0;
    else if (o->spin_us > 0) so.spin_us = o->spin_us;
  }
  if (has(offsetof(basalt_session_options, optimization_level), sizeof(int32_t))) {
    int32_t l = o->optimization_level;
    if (l < BASALT_OPT_DEFAULT || l > BASALT_OPT_ALL)
      invalid("basalt_session_options.optimization_level must be one of BASALT_OPT_DEFAULT/NONE/BASIC/EXTENDED/ALL (0..4), got " +
              std::to_string(l));
    if (l != BASALT_OPT_DEFAULT) so.optimization_level = l - BASALT_OPT_NONE;
  }
  if (has(offsetof(basalt_session_options, plan_cache_entries), sizeof(int64_t))) {
    int64_t e = o->plan_cache_entries;
    if (e < 0 && e != BASALT_PLAN_CACHE_DISABLED)
      invalid("basalt_session_options.plan_cache_entries must be >= 0 or BASALT_PLAN_CACHE_DISABLED, got " + std::to_string(e));
    if (e == BASALT_PLAN_CACHE_DISABLED) so.plan_cache_entries = 0;
    else if (e > 0) so.plan_cache_entries = size_t(e);
  }
  if (has(offsetof(basalt_session_options, plan_cache_bytes), sizeof(uint64_t)) && o->plan_cache_bytes)
    so.plan_cache_bytes = o->plan_cache_bytes;
  if (has(offsetof(basalt_session_options, dynamic_pool_bytes), sizeof(int64_t))) {
    int64_t b = o->dynamic_pool_bytes;
    if (b < 0 && b != BASALT_DYNAMIC_POOL_NONE)
      invalid("basalt_session_options.dynamic_pool_bytes must be >= 0 or BASALT_DYNAMIC_POOL_NONE, got " + std::to_string(b));
    if (b == BASALT_DYNAMIC_POOL_NONE) so.dynamic_pool_bytes = 0;
    else if (b > 0) so.dynamic_pool_bytes = uint64_t(b);
  }
  if (has(offsetof(basalt_session_options, winograd), sizeof(int32_t))) {
    if (o->winograd != 0 && o->winograd != BASALT_WINOGRAD_OFF)
      invalid("basalt_session_options.winograd must be 0 (default) or BASALT_WINOGRAD_OFF, got " + std::to_string(o->winograd));
    so.winograd = o->winograd != BASALT_WINOGRAD_OFF;
  }
  if (has(offsetof(basalt_session_options, reserved4), sizeof(int32_t)) && o->reserved4 != 0)
    fail(BASALT_STATUS_UNSUPPORTED, "basalt_session_options.reserved4 must be 0: this library (API version " +
                                        std::to_string(BASALT_API_VERSION) + ") does not know what it asks for");
  so.validate();  // the ranges: one check for every front end (include/basalt/basalt.hpp)
  return so;
}

basalt_session* wrap_session(std::unique_ptr<basalt::Session> s) {
  auto w = std::make_unique<basalt_session>();
  auto names = [](const std::vector<basalt::IoInfo>& infos, std::vector<std::vector<const char*>>& out) {
    for (const auto& io : infos) {
      std::vector<const char*> v;
      for (const auto& n : io.dim_params) v.push_back(n.c_str());
      out.push_back(std::move(v));
    }
  };
  names(s->inputs(), w->input_dim_names);
  names(s->outputs(), w->output_dim_names);
  w->session = std::move(s);
  return w.release();
}

int32_t kind_code(const std::string& kind) {
  if (kind == "tensor") return BASALT_VALUE_KIND_TENSOR;
  if (kind == "sequence") return BASALT_VALUE_KIND_SEQUENCE;
  if (kind == "optional") return BASALT_VALUE_KIND_OPTIONAL;
  if (kind == "map") return BASALT_VALUE_KIND_MAP;
  if (kind == "sparse_tensor") return BASALT_VALUE_KIND_SPARSE_TENSOR;
  return BASALT_VALUE_KIND_UNKNOWN;
}

void fill_info(const basalt_session* s, size_t index, basalt_io_info* info, bool input) {
  if (!s) invalid("session is NULL");
  if (!info) invalid("info is NULL");
  constexpr size_t kV1 = offsetof(basalt_io_info, dim_names) + sizeof(const char* const*);
  if (info->struct_size < kV1 || info->struct_size > kMaxStructSize)
    invalid("basalt_io_info.struct_size is " + std::to_string(info->struct_size) + "; set it to sizeof(basalt_io_info)");
  const auto& infos = input ? s->session->inputs() : s->session->outputs();
  const char* what = input ? "input" : "output";
  if (index >= infos.size())
    invalid(std::string(what) + " index " + std::to_string(index) + " is out of range: the model has " +
            std::to_string(infos.size()) + " " + what + "s");
  const basalt::IoInfo& io = infos[index];
  const auto& dim_names = (input ? s->input_dim_names : s->output_dim_names)[index];
  size_t struct_size = info->struct_size;
  basalt_io_info r{};
  r.struct_size = struct_size;
  r.name = io.name.c_str();
  r.kind = kind_code(io.kind);
  r.dtype = static_cast<int32_t>(io.dtype);
  r.has_shape = io.has_shape ? 1 : 0;
  r.has_default = io.has_default ? 1 : 0;
  r.rank = io.shape.size();
  r.dims = io.shape.empty() ? nullptr : io.shape.data();
  r.dim_names = dim_names.empty() ? nullptr : dim_names.data();
  // Write what this library knows, zero what a newer header added.
  size_t n = struct_size < sizeof(r) ? struct_size : sizeof(r);
  std::memcpy(info, &r, n);
  if (struct_size > sizeof(r)) std::memset(reinterpret_cast<unsigned char*>(info) + sizeof(r), 0, struct_size - sizeof(r));
}

DType checked_dtype(int32_t dtype) {
  if (!basalt::dtype_is_known(dtype))
    invalid("unknown element type " + std::to_string(dtype) + " (expected a BASALT_DTYPE_* value)");
  return static_cast<DType>(dtype);
}

basalt::Shape checked_shape(const int64_t* shape, size_t rank) {
  // ONNX has no rank limit; this only catches a garbage rank before it allocates gigabytes.
  constexpr size_t kMaxRank = 1024;
  if (rank > kMaxRank) invalid("rank " + std::to_string(rank) + " is too large (at most " + std::to_string(kMaxRank) + ")");
  if (rank > 0 && !shape) invalid("shape is NULL but rank is " + std::to_string(rank));
  basalt::Shape s(shape, shape + rank);
  for (size_t i = 0; i < rank; ++i)
    if (s[i] < 0) invalid("dimension " + std::to_string(i) + " of shape " + basalt::shape_str(s) + " is negative");
  return s;
}

// Alignment that the element type's C++ accesses need (complex types are pairs of scalars).
size_t element_alignment(DType t) {
  if (t == DType::Complex64) return 4;
  if (t == DType::Complex128) return 8;
  return basalt::dtype_size(t);
}

// The output names a run asks for: output_names[0..count), or every output (then count must be
// the model's output count) when output_names is NULL.
std::vector<std::string> requested_outputs(const basalt::Session& s, const char* const* output_names, size_t count) {
  std::vector<std::string> names;
  if (output_names) {
    for (size_t i = 0; i < count; ++i) {
      if (!output_names[i]) invalid("output_names[" + std::to_string(i) + "] is NULL");
      names.emplace_back(output_names[i]);
    }
  } else if (count != s.outputs().size()) {
    invalid("output_names is NULL, so output_count must be the model's output count " + std::to_string(s.outputs().size()) +
            ", got " + std::to_string(count));
  }
  return names;
}

basalt_tensor* wrap_tensor(Tensor t) { return new basalt_tensor{std::move(t)}; }

const std::string& string_element(const basalt_tensor* tensor, int64_t index) {
  if (!tensor) invalid("tensor is NULL");
  const Tensor& t = tensor->tensor;
  if (t.dtype() != DType::String)
    invalid(std::string("tensor is ") + basalt::dtype_name(t.dtype()) + ", not string");
  if (index < 0 || index >= t.numel())
    invalid("string index " + std::to_string(index) + " is out of range for shape " + basalt::shape_str(t.shape()));
  return t.data<std::string>()[index];
}

}  // namespace

extern "C" {

uint32_t basalt_api_version(void) { return BASALT_API_VERSION; }

// ---- status ----

int32_t basalt_status_code(const basalt_status* status) { return status ? status->code : BASALT_STATUS_OK; }

const char* basalt_status_message(const basalt_status* status) { return status ? status->message.c_str() : ""; }

const char* basalt_status_code_name(int32_t code) {
  switch (code) {
    case BASALT_STATUS_OK: return "ok";
    case BASALT_STATUS_INVALID_MODEL: case BASALT_STATUS_INVALID_ARGUMENT: case BASALT_STATUS_UNSUPPORTED:
    case BASALT_STATUS_MEMORY_LIMIT: case BASALT_STATUS_IO: case BASALT_STATUS_INTERNAL: case BASALT_STATUS_CANCELLED:
      return basalt::error_code_name(static_cast<basalt::ErrorCode>(code));
    case BASALT_STATUS_OUT_OF_MEMORY: return "out of memory";
    default: return "unknown";
  }
}

void basalt_status_destroy(basalt_status* status) {
  if (status && !status->is_static) delete status;
}

// ---- element types ----

const char* basalt_dtype_name(int32_t dtype) {
  if (dtype == 0) return "undefined";
  return basalt::dtype_is_known(dtype) ? basalt::dtype_name(static_cast<DType>(dtype)) : "unknown";
}

size_t basalt_dtype_size(int32_t dtype) {
  if (!basalt::dtype_is_known(dtype) || dtype == BASALT_DTYPE_STRING) return 0;
  return basalt::dtype_size(static_cast<DType>(dtype));
}

// ---- sessions ----

basalt_status* basalt_session_create_from_path(const char* path, const basalt_session_options* options,
                                               basalt_session** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) invalid("out is NULL");
    if (!path) invalid("path is NULL");
    basalt::SessionOptions so = read_options(options);
    *out = wrap_session(basalt::Session::open(path, so));
  });
}

basalt_status* basalt_session_create_from_bytes(const void* data, size_t size, const basalt_session_options* options,
                                                basalt_session** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) invalid("out is NULL");
    if (!data && size) invalid("data is NULL but size is " + std::to_string(size));
    basalt::SessionOptions so = read_options(options);
    *out = wrap_session(basalt::Session::from_bytes(data ? data : "", size, so));
  });
}

void basalt_session_destroy(basalt_session* session) { delete session; }

basalt_status* basalt_session_end_profiling(basalt_session* session, const char* path) {
  return guarded([&] {
    if (!session) invalid("session is NULL");
    session->session->end_profiling(path ? path : "");
  });
}

basalt_status* basalt_session_memory_stats(const basalt_session* session, basalt_memory_stats* stats) {
  return guarded([&] {
    if (!session) invalid("session is NULL");
    if (!stats) invalid("stats is NULL");
    constexpr size_t kV2 = sizeof(basalt_memory_stats);
    size_t struct_size = stats->struct_size;
    if (struct_size < offsetof(basalt_memory_stats, memory_limit) + sizeof(uint64_t) || struct_size > kMaxStructSize)
      invalid("basalt_memory_stats.struct_size is " + std::to_string(struct_size) + "; set it to sizeof(basalt_memory_stats)");
    basalt::MemoryStats m = session->session->memory_stats();
    basalt_memory_stats r{};
    r.struct_size = struct_size;
    r.weights_bytes = m.weights_bytes;
    r.weights_in_place_bytes = m.weights_in_place_bytes;
    r.packed_weights_bytes = m.packed_weights_bytes;
    r.plan_cache_hits = m.plan_cache_hits;
    r.plan_cache_misses = m.plan_cache_misses;
    r.plan_cache_evictions = m.plan_cache_evictions;
    r.plan_cache_entries = m.plan_cache_entries;
    r.plan_cache_bytes = m.plan_cache_bytes;
    r.arena_bytes = m.arena_bytes;
    r.last_run_arena_bytes = m.last_run_arena_bytes;
    r.peak_run_bytes = m.peak_run_bytes;
    r.memory_limit = m.memory_limit;
    r.arena_maps = m.arena_maps;
    r.heap_fallbacks = m.heap_fallbacks;
    r.unplanned_alias_runs = m.unplanned_alias_runs;
    r.last_run_heap_bytes = m.last_run_heap_bytes;
    r.dynamic_pool_hits = m.dynamic_pool_hits;
    r.dynamic_pool_misses = m.dynamic_pool_misses;
    r.dynamic_pool_frees = m.dynamic_pool_frees;
    r.dynamic_pool_held_bytes = m.dynamic_pool_held_bytes;
    r.dynamic_pool_in_use_bytes = m.dynamic_pool_in_use_bytes;
    r.dynamic_pool_peak_bytes = m.dynamic_pool_peak_bytes;
    r.arena_grows = m.arena_grows;
    // A caller built against an older header gets the fields its struct has.
    std::memcpy(stats, &r, struct_size < kV2 ? struct_size : kV2);
    if (struct_size > kV2) std::memset(reinterpret_cast<unsigned char*>(stats) + kV2, 0, struct_size - kV2);
  });
}

basalt_status* basalt_session_plan_memory(const basalt_session* session, const char* const* names,
                                          const int64_t* const* shapes, const size_t* ranks, size_t count,
                                          basalt_memory_plan* plan) {
  return guarded([&] {
    if (!session) invalid("session is NULL");
    if (!plan) invalid("plan is NULL");
    if (plan->struct_size < sizeof(basalt_memory_plan) || plan->struct_size > kMaxStructSize)
      invalid("basalt_memory_plan.struct_size is " + std::to_string(plan->struct_size) + "; set it to sizeof(basalt_memory_plan)");
    if (count && (!names || !shapes || !ranks)) invalid("names, shapes and ranks must not be NULL when count > 0");
    std::map<std::string, basalt::Shape> m;
    for (size_t i = 0; i < count; ++i) {
      if (!names[i]) invalid("names[" + std::to_string(i) + "] is NULL");
      if (ranks[i] && !shapes[i]) invalid("shapes[" + std::to_string(i) + "] is NULL");
      if (ranks[i] > 64) invalid("ranks[" + std::to_string(i) + "] is " + std::to_string(ranks[i]) + " (at most 64)");
      m[names[i]] = basalt::Shape(shapes[i], shapes[i] + ranks[i]);
    }
    basalt::MemoryPlanReport r = session->session->plan_memory(m);
    size_t struct_size = plan->struct_size;
    basalt_memory_plan o{};
    o.struct_size = struct_size;
    o.arena_bytes = r.arena_bytes;
    o.tensor_bytes = r.tensor_bytes;
    o.workspace_bytes = r.workspace_bytes;
    o.inputs_bytes = r.inputs_bytes;
    o.outputs_bytes = r.outputs_bytes;
    o.weights_bytes = r.weights_bytes;
    o.packed_weights_bytes = r.packed_weights_bytes;
    o.peak_bytes = r.peak_bytes;
    o.dynamic_values = r.dynamic_values.size();
    std::memcpy(plan, &o, sizeof o);
    if (struct_size > sizeof o) std::memset(reinterpret_cast<unsigned char*>(plan) + sizeof o, 0, struct_size - sizeof o);
  });
}

size_t basalt_session_input_count(const basalt_session* session) {
  return session ? session->session->inputs().size() : 0;
}

size_t basalt_session_output_count(const basalt_session* session) {
  return session ? session->session->outputs().size() : 0;
}

basalt_status* basalt_session_input_info(const basalt_session* session, size_t index, basalt_io_info* info) {
  return guarded([&] { fill_info(session, index, info, true); });
}

basalt_status* basalt_session_output_info(const basalt_session* session, size_t index, basalt_io_info* info) {
  return guarded([&] { fill_info(session, index, info, false); });
}

// ---- tensors ----

basalt_status* basalt_tensor_create(int32_t dtype, const int64_t* shape, size_t rank, basalt_tensor** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) invalid("out is NULL");
    DType dt = checked_dtype(dtype);
    *out = wrap_tensor(Tensor(dt, checked_shape(shape, rank)));
  });
}

basalt_status* basalt_tensor_create_view(int32_t dtype, const int64_t* shape, size_t rank, void* data,
                                         size_t data_bytes, basalt_tensor** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) invalid("out is NULL");
    DType dt = checked_dtype(dtype);
    if (dt == DType::String) fail(BASALT_STATUS_UNSUPPORTED, "a string tensor cannot view caller memory; use basalt_tensor_create");
    basalt::Shape s = checked_shape(shape, rank);
    // Element count and byte size, overflow-checked: the shape comes from the caller.
    uint64_t n = 1;
    for (int64_t d : s) {
      if (d != 0 && n > std::numeric_limits<uint64_t>::max() / uint64_t(d)) invalid("shape " + basalt::shape_str(s) + " overflows");
      n *= uint64_t(d);
    }
    size_t es = basalt::dtype_size(dt);
    if (n > std::numeric_limits<uint64_t>::max() / es) invalid("shape " + basalt::shape_str(s) + " overflows");
    uint64_t need = n * es;
    if (need > data_bytes)
      invalid("a " + std::string(basalt::dtype_name(dt)) + " tensor of shape " + basalt::shape_str(s) + " needs " +
              std::to_string(need) + " bytes, but data_bytes is " + std::to_string(data_bytes));
    if (!data && need) invalid("data is NULL");
    if (data && reinterpret_cast<uintptr_t>(data) % element_alignment(dt) != 0)
      invalid("data is not aligned to " + std::to_string(element_alignment(dt)) + " bytes, as " + basalt::dtype_name(dt) +
              " elements need");
    // No keep-alive: the caller owns the memory and guarantees its lifetime (see the header).
    *out = wrap_tensor(Tensor::view(dt, std::move(s), data, nullptr));
  });
}

void basalt_tensor_destroy(basalt_tensor* tensor) { delete tensor; }

int32_t basalt_tensor_dtype(const basalt_tensor* tensor) {
  return tensor ? static_cast<int32_t>(tensor->tensor.dtype()) : BASALT_DTYPE_UNDEFINED;
}

size_t basalt_tensor_rank(const basalt_tensor* tensor) { return tensor ? tensor->tensor.shape().size() : 0; }

const int64_t* basalt_tensor_shape(const basalt_tensor* tensor) {
  if (!tensor || tensor->tensor.shape().empty()) return nullptr;
  return tensor->tensor.shape().data();
}

int64_t basalt_tensor_element_count(const basalt_tensor* tensor) { return tensor ? tensor->tensor.numel() : 0; }

size_t basalt_tensor_byte_size(const basalt_tensor* tensor) {
  if (!tensor || tensor->tensor.dtype() == DType::String) return 0;
  return tensor->tensor.nbytes();
}

const void* basalt_tensor_data(const basalt_tensor* tensor) {
  if (!tensor || tensor->tensor.dtype() == DType::String) return nullptr;
  return tensor->tensor.raw();
}

void* basalt_tensor_mutable_data(basalt_tensor* tensor) {
  if (!tensor || tensor->tensor.dtype() == DType::String) return nullptr;
  return tensor->tensor.raw();
}

basalt_status* basalt_tensor_get_string(const basalt_tensor* tensor, int64_t index, const char** data,
                                        size_t* length) {
  if (data) *data = nullptr;
  if (length) *length = 0;
  return guarded([&] {
    if (!data || !length) invalid("data or length is NULL");
    const std::string& s = string_element(tensor, index);
    *data = s.data();
    *length = s.size();
  });
}

basalt_status* basalt_tensor_set_string(basalt_tensor* tensor, int64_t index, const char* data, size_t length) {
  return guarded([&] {
    if (!data && length) invalid("data is NULL but length is " + std::to_string(length));
    const std::string& s = string_element(tensor, index);
    const_cast<std::string&>(s).assign(data ? data : "", length);
  });
}

// ---- running ----

basalt_status* basalt_session_run_into(const basalt_session* session, const basalt_run_options* options,
                                       const char* const* input_names, const basalt_tensor* const* inputs,
                                       size_t input_count, const char* const* output_names, basalt_tensor* const* outputs,
                                       size_t output_count) {
  return guarded([&] {
    if (!session) invalid("session is NULL");
    if (options) check_in_struct(options, options->struct_size, sizeof(size_t), sizeof(basalt_run_options), "basalt_run_options");
    if (input_count && (!input_names || !inputs)) invalid("input_names or inputs is NULL but input_count is " + std::to_string(input_count));
    if (output_count && (!outputs || !output_names))
      invalid("output_names or outputs is NULL but output_count is " + std::to_string(output_count));
    std::vector<std::pair<std::string, Value>> feeds;
    for (size_t i = 0; i < input_count; ++i) {
      if (!input_names[i]) invalid("input_names[" + std::to_string(i) + "] is NULL");
      feeds.emplace_back(input_names[i], inputs[i] ? Value(inputs[i]->tensor) : Value());
    }
    std::vector<std::pair<std::string, Tensor>> bind;
    for (size_t i = 0; i < output_count; ++i) {
      if (!output_names[i]) invalid("output_names[" + std::to_string(i) + "] is NULL");
      if (!outputs[i]) invalid("outputs[" + std::to_string(i) + "] is NULL");
      bind.emplace_back(output_names[i], outputs[i]->tensor);
    }
    session->session->run_into(feeds, bind);
  });
}

basalt_status* basalt_session_run(const basalt_session* session, const basalt_run_options* options,
                                  const char* const* input_names, const basalt_tensor* const* inputs,
                                  size_t input_count, const char* const* output_names, basalt_tensor** outputs,
                                  size_t output_count) {
  if (outputs)
    for (size_t i = 0; i < output_count; ++i) outputs[i] = nullptr;
  return guarded([&] {
    if (!session) invalid("session is NULL");
    if (options) check_in_struct(options, options->struct_size, sizeof(size_t), sizeof(basalt_run_options), "basalt_run_options");
    if (input_count && (!input_names || !inputs)) invalid("input_names or inputs is NULL but input_count is " + std::to_string(input_count));
    if (output_count && !outputs) invalid("outputs is NULL but output_count is " + std::to_string(output_count));
    const basalt::Session& s = *session->session;

    std::vector<std::pair<std::string, Value>> feeds;
    for (size_t i = 0; i < input_count; ++i) {
      if (!input_names[i]) invalid("input_names[" + std::to_string(i) + "] is NULL");
      if (inputs[i]) {
        feeds.emplace_back(input_names[i], Value(inputs[i]->tensor));
      } else {
        feeds.emplace_back(input_names[i], Value());  // an empty optional
      }
    }
    std::vector<std::string> names = requested_outputs(s, output_names, output_count);
    if (output_names && output_count == 0) return;  // nothing asked for; don't run

    std::vector<Value> res = s.run(feeds, names);
    // Build every output before handing any out, so a failure leaves outputs all NULL.
    std::vector<std::unique_ptr<basalt_tensor>> made(res.size());
    for (size_t i = 0; i < res.size(); ++i) {
      const std::string& name = output_names ? names[i] : s.outputs()[i].name;
      Value& v = res[i];
      if (v.is_none()) continue;
      if (!v.is_tensor())
        fail(BASALT_STATUS_UNSUPPORTED, "output '" + name + "' is a sequence; the C API returns only tensors");
      Tensor t = std::move(v.tensor);
      // An output must own its memory exclusively: a node such as Identity can forward a weight
      // (the session's, possibly a read-only mapping), a caller's input buffer, or another
      // output. The caller may write or free that memory, so such outputs are copied. After the
      // run nothing but `t` holds a fresh result, so any other holder means sharing. A block of
      // the session's dynamic pool (exclusive) is handed out as it is, like memory basalt owns;
      // destroying the tensor gives it back to the pool.
      if (!t.owns_exclusively()) t = t.clone();
      made[i].reset(wrap_tensor(std::move(t)));
    }
    for (size_t i = 0; i < made.size() && i < output_count; ++i) outputs[i] = made[i].release();
  });
}

basalt_status* basalt_sequence_create(int32_t elem_dtype, const basalt_tensor* const* items, size_t count,
                                      basalt_sequence** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) invalid("out is NULL");
    DType dt = checked_dtype(elem_dtype);
    if (count && !items) invalid("items is NULL but count is " + std::to_string(count));
    auto q = std::make_unique<basalt_sequence>();
    q->elem = dt;
    for (size_t i = 0; i < count; ++i) {
      if (!items[i]) invalid("items[" + std::to_string(i) + "] is NULL");
      if (items[i]->tensor.dtype() != dt)
        invalid("items[" + std::to_string(i) + "] is " + basalt::dtype_name(items[i]->tensor.dtype()) +
                ", the sequence's element type is " + basalt::dtype_name(dt));
      q->items.push_back(items[i]->tensor);
    }
    *out = q.release();
  });
}

void basalt_sequence_destroy(basalt_sequence* sequence) { delete sequence; }

size_t basalt_sequence_length(const basalt_sequence* sequence) { return sequence ? sequence->items.size() : 0; }

int32_t basalt_sequence_elem_dtype(const basalt_sequence* sequence) {
  return sequence ? static_cast<int32_t>(sequence->elem) : BASALT_DTYPE_UNDEFINED;
}

basalt_status* basalt_sequence_item(const basalt_sequence* sequence, size_t index, basalt_tensor** out) {
  if (out) *out = nullptr;
  return guarded([&] {
    if (!out) invalid("out is NULL");
    if (!sequence) invalid("sequence is NULL");
    if (index >= sequence->items.size())
      invalid("index " + std::to_string(index) + " is out of range for a sequence of length " +
              std::to_string(sequence->items.size()));
    *out = wrap_tensor(sequence->items[index]);
  });
}

basalt_status* basalt_session_run_values(const basalt_session* session, const basalt_run_options* options,
                                         const char* const* input_names, const basalt_tensor* const* inputs,
                                         const basalt_sequence* const* seq_inputs, size_t input_count,
                                         const char* const* output_names, basalt_tensor** outputs,
                                         basalt_sequence** seq_outputs, size_t output_count) {
  for (size_t i = 0; i < output_count; ++i) {
    if (outputs) outputs[i] = nullptr;
    if (seq_outputs) seq_outputs[i] = nullptr;
  }
  return guarded([&] {
    if (!session) invalid("session is NULL");
    if (options) check_in_struct(options, options->struct_size, sizeof(size_t), sizeof(basalt_run_options), "basalt_run_options");
    if (input_count && !input_names) invalid("input_names is NULL but input_count is " + std::to_string(input_count));
    if (output_count && (!outputs || !seq_outputs))
      invalid("outputs and seq_outputs must both be given when output_count is " + std::to_string(output_count));
    const basalt::Session& s = *session->session;
    std::vector<std::pair<std::string, Value>> feeds;
    for (size_t i = 0; i < input_count; ++i) {
      if (!input_names[i]) invalid("input_names[" + std::to_string(i) + "] is NULL");
      const basalt_tensor* t = inputs ? inputs[i] : nullptr;
      const basalt_sequence* q = seq_inputs ? seq_inputs[i] : nullptr;
      if (t && q) invalid("input '" + std::string(input_names[i]) + "' is given both as a tensor and as a sequence");
      if (t) feeds.emplace_back(input_names[i], Value(t->tensor));
      else if (q) feeds.emplace_back(input_names[i], Value::make_sequence(q->items, q->elem));
      else feeds.emplace_back(input_names[i], Value());
    }
    std::vector<std::string> names = requested_outputs(s, output_names, output_count);
    if (output_names && output_count == 0) return;
    std::vector<Value> res = s.run(feeds, names);
    feeds.clear();
    // Same exclusivity rule as basalt_session_run: anything still shared after the run is copied.
    auto exclusive = [](Tensor t) {
      if (!t.owns_exclusively()) t = t.clone();
      return t;
    };
    std::vector<std::unique_ptr<basalt_tensor>> made(res.size());
    std::vector<std::unique_ptr<basalt_sequence>> made_seq(res.size());
    for (size_t i = 0; i < res.size(); ++i) {
      Value& v = res[i];
      if (v.is_tensor()) {
        made[i].reset(wrap_tensor(exclusive(std::move(v.tensor))));
      } else if (v.is_sequence()) {
        auto q = std::make_unique<basalt_sequence>();
        q->elem = v.seq_elem_type;
        std::vector<Tensor> items = *v.sequence;
        v = Value();
        for (auto& t : items) q->items.push_back(exclusive(std::move(t)));
        made_seq[i] = std::move(q);
      }
    }
    for (size_t i = 0; i < res.size() && i < output_count; ++i) {
      outputs[i] = made[i].release();
      seq_outputs[i] = made_seq[i].release();
    }
  });
}

}  // extern "C"
