/* basalt — stable C API.
 *
 *   basalt_session* s = NULL;
 *   basalt_status* st = basalt_session_create_from_path("model.onnx", NULL, &s);
 *   if (st) { fprintf(stderr, "%s\n", basalt_status_message(st)); basalt_status_destroy(st); return 1; }
 *   ...
 *   basalt_session_destroy(s);
 *
 * ABI rules (what stays stable, and how the API grows):
 *  - Everything is `extern "C"`; no C++ or STL type crosses the boundary, and no exception does
 *    either: every entry point catches everything (std::bad_alloc included) and returns a status.
 *  - Objects are opaque handles with an explicit create and destroy. Destroying NULL is a no-op.
 *  - Only fixed-width integers, size_t, pointers and char strings (UTF-8, NUL-terminated) are used.
 *  - Enumerations are int32_t values with explicit numbers (the BASALT_* macros below); numbers are
 *    never reused or renumbered. New values may be added, so callers should handle unknown ones.
 *  - Structs passed in or out start with `size_t struct_size`, which the caller sets to
 *    sizeof(the struct) from the header it compiled against. New fields are only ever appended.
 *      * In-structs (options): the library reads only the fields that lie inside struct_size; fields
 *        it does not read take their default. A struct_size larger than the library knows is
 *        accepted only when the extra bytes are zero (they would mean "default"), so a newer caller
 *        asking for a feature an older library lacks gets an error instead of being ignored.
 *      * Out-structs (basalt_io_info): the library fills the fields it knows and zeroes the bytes
 *        after them, up to struct_size.
 *      * For every struct, all-zero fields mean the defaults.
 *  - basalt_api_version() returns BASALT_API_VERSION of the library that is loaded; compare it
 *    with the header's value to detect a library older than the header.
 *
 * Errors: every function that can fail returns `basalt_status*`: NULL means success; otherwise the
 * caller owns the status and frees it with basalt_status_destroy(). A status has a code
 * (BASALT_STATUS_*) and a message that names what is wrong (file, input name, expected vs given).
 * On failure, out-parameters are set to NULL / zero.
 *
 * Threads: a session is immutable after creation. basalt_session_run() may be called on the same
 * session from many threads at once. Tensors are not synchronised: don't write a tensor while
 * another thread reads it (including a run that uses it as an input).
 */
#ifndef BASALT_C_API_H_
#define BASALT_C_API_H_

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#define BASALT_C_EXPORT __declspec(dllexport)
#elif defined(__GNUC__)
#define BASALT_C_EXPORT __attribute__((visibility("default")))
#else
#define BASALT_C_EXPORT
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the API described by this header. Bumped when functions or fields are added. */
#define BASALT_API_VERSION 5
BASALT_C_EXPORT uint32_t basalt_api_version(void);

/* ---- status ------------------------------------------------------------------------------- */

/* Status codes. 1..6 and 8 are the codes of basalt::Error (include/basalt/error.hpp). */
#define BASALT_STATUS_OK 0
#define BASALT_STATUS_INVALID_MODEL 1    /* the model file or graph is malformed */
#define BASALT_STATUS_INVALID_ARGUMENT 2 /* the caller's arguments are wrong (name, dtype, shape, NULL) */
#define BASALT_STATUS_UNSUPPORTED 3      /* valid ONNX (or a request) that basalt does not handle */
#define BASALT_STATUS_MEMORY_LIMIT 4     /* a request would exceed a memory limit */
#define BASALT_STATUS_IO 5               /* a file could not be read or mapped */
#define BASALT_STATUS_INTERNAL 6         /* a bug in basalt */
#define BASALT_STATUS_OUT_OF_MEMORY 7    /* an allocation failed (std::bad_alloc inside basalt) */
#define BASALT_STATUS_CANCELLED 8        /* the run was stopped by its caller (basalt::RunOptions::terminate) */

typedef struct basalt_status basalt_status;

/* BASALT_STATUS_OK for NULL. */
BASALT_C_EXPORT int32_t basalt_status_code(const basalt_status* status);
/* The message; "" for NULL. Valid until the status is destroyed. */
BASALT_C_EXPORT const char* basalt_status_message(const basalt_status* status);
/* "ok", "invalid model", ...; "unknown" for a code this library does not know. Static storage. */
BASALT_C_EXPORT const char* basalt_status_code_name(int32_t code);
BASALT_C_EXPORT void basalt_status_destroy(basalt_status* status);

/* ---- element types ------------------------------------------------------------------------ */

/* Element types: ONNX's TensorProto.DataType numbers. In memory every element takes
 * basalt_dtype_size() bytes, in the machine's byte order:
 *  - float16 and bfloat16 are their 16-bit patterns (uint16_t);
 *  - bool is one byte holding 0 or 1 (any other value is undefined behaviour);
 *  - 8-bit floats and the 4/2-bit types are unpacked: one element per byte (4/2-bit values in the
 *    low bits, sign-extended for int4/int2);
 *  - complex64/complex128 are (real, imaginary) pairs of float/double;
 *  - string tensors have no flat data: use basalt_tensor_get_string / basalt_tensor_set_string. */
#define BASALT_DTYPE_UNDEFINED 0
#define BASALT_DTYPE_FLOAT 1
#define BASALT_DTYPE_UINT8 2
#define BASALT_DTYPE_INT8 3
#define BASALT_DTYPE_UINT16 4
#define BASALT_DTYPE_INT16 5
#define BASALT_DTYPE_INT32 6
#define BASALT_DTYPE_INT64 7
#define BASALT_DTYPE_STRING 8
#define BASALT_DTYPE_BOOL 9
#define BASALT_DTYPE_FLOAT16 10
#define BASALT_DTYPE_DOUBLE 11
#define BASALT_DTYPE_UINT32 12
#define BASALT_DTYPE_UINT64 13
#define BASALT_DTYPE_COMPLEX64 14
#define BASALT_DTYPE_COMPLEX128 15
#define BASALT_DTYPE_BFLOAT16 16
#define BASALT_DTYPE_FLOAT8E4M3FN 17
#define BASALT_DTYPE_FLOAT8E4M3FNUZ 18
#define BASALT_DTYPE_FLOAT8E5M2 19
#define BASALT_DTYPE_FLOAT8E5M2FNUZ 20
#define BASALT_DTYPE_UINT4 21
#define BASALT_DTYPE_INT4 22
#define BASALT_DTYPE_FLOAT4E2M1 23
#define BASALT_DTYPE_FLOAT8E8M0 24
#define BASALT_DTYPE_UINT2 25
#define BASALT_DTYPE_INT2 26

/* "float32", "int64", ...; "unknown" for a number basalt does not know. Static storage. */
BASALT_C_EXPORT const char* basalt_dtype_name(int32_t dtype);
/* Bytes per element in a tensor's data (0 for undefined, unknown and string). */
BASALT_C_EXPORT size_t basalt_dtype_size(int32_t dtype);

/* ---- sessions ----------------------------------------------------------------------------- */

typedef struct basalt_session basalt_session;

/* Session options. All-zero fields mean the defaults:
 *   basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;  (or memset 0, then set struct_size) */
typedef struct basalt_session_options {
  size_t struct_size;        /* sizeof(basalt_session_options) */
  int32_t threads;           /* intra-op threads; 0 = all cores. Must be >= 0. */
  int32_t allow_unsupported; /* nonzero: load models with ops basalt lacks (running them fails) */
  uint64_t memory_limit;     /* bytes, 0 = no limit: a run whose memory plan needs more fails with
                                BASALT_STATUS_MEMORY_LIMIT before allocating */
  /* Profiling: when profile_path is non-NULL and non-empty or enable_profiling is nonzero, every run
   * is recorded per node; basalt_session_end_profiling() writes a Chrome trace (the string is
   * copied at session creation). */
  const char* profile_path;
  int32_t enable_profiling;
  /* --- API version 2 (appended; a version-1 struct_size leaves these at their defaults) --- */
  int32_t shared_pool;        /* nonzero: use the process-wide thread pool instead of an own one */
  int32_t spin_us;            /* idle spin before a pool thread sleeps: 0 = default (50 us),
                                 BASALT_SPIN_NEVER = never spin, else microseconds */
  int32_t optimization_level; /* BASALT_OPT_DEFAULT (= all), _NONE, _BASIC, _EXTENDED, _ALL */
  int64_t plan_cache_entries; /* memory plans cached per input shape: 0 = default (32),
                                 BASALT_PLAN_CACHE_DISABLED = plan every run, else the bound */
  uint64_t plan_cache_bytes;  /* bound on the resident bytes the cached plans keep: 0 = default (8 MiB) */
  /* --- API version 3 (appended) --- */
  int64_t dynamic_pool_bytes; /* idle bytes the pool of data-dependent tensors keeps: 0 = default
                                 (64 MiB), BASALT_DYNAMIC_POOL_NONE = keep none, else the bound */
  /* --- API version 4 (appended) --- */
  int32_t winograd;           /* 0 = default (Winograd convolution where it is faster),
                                 BASALT_WINOGRAD_OFF = direct / im2col kernels only, whose packed
                                 weights are the originals' size (Winograd's are 1.8x-4x); it also
                                 overrides BASALT_WINOGRAD=2/4 in the environment */
  int32_t reserved4;          /* must be 0 (the next version's fields start after it) */
} basalt_session_options;
#define BASALT_SESSION_OPTIONS_INIT {sizeof(basalt_session_options), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
#define BASALT_WINOGRAD_OFF (-1)
#define BASALT_SPIN_NEVER (-1)
#define BASALT_OPT_DEFAULT 0
#define BASALT_OPT_NONE 1
#define BASALT_OPT_BASIC 2
#define BASALT_OPT_EXTENDED 3
#define BASALT_OPT_ALL 4
#define BASALT_PLAN_CACHE_DISABLED (-1)
#define BASALT_DYNAMIC_POOL_NONE (-1)

/* Loads a model. `options` may be NULL (defaults). On success *out is a new session that the caller
 * destroys with basalt_session_destroy(); weights are used in place from the memory-mapped file. */
BASALT_C_EXPORT basalt_status* basalt_session_create_from_path(const char* path,
                                                               const basalt_session_options* options,
                                                               basalt_session** out);
/* Loads a model from memory. The bytes are copied once, so the caller may free them as soon as
 * this returns. A model with external data cannot be loaded this way (there is no folder). */
BASALT_C_EXPORT basalt_status* basalt_session_create_from_bytes(const void* data, size_t size,
                                                                const basalt_session_options* options,
                                                                basalt_session** out);
/* Destroys the session. Tensors it returned stay valid. NULL is a no-op. */
BASALT_C_EXPORT void basalt_session_destroy(basalt_session* session);

/* Memory figures of a session (see basalt::MemoryStats in basalt.hpp). */
typedef struct basalt_memory_stats {
  size_t struct_size;               /* in: sizeof(basalt_memory_stats) */
  uint64_t weights_bytes;           /* constant tensors of the model */
  uint64_t weights_in_place_bytes;  /* of which used in place from the mapped file */
  uint64_t packed_weights_bytes;    /* copies kernels made at load (packed layouts) */
  uint64_t plan_cache_hits, plan_cache_misses, plan_cache_evictions;
  uint64_t plan_cache_entries;      /* plans held now */
  uint64_t plan_cache_bytes;        /* resident bytes the cached plans keep now */
  uint64_t arena_bytes;             /* arena memory allocated now */
  uint64_t last_run_arena_bytes;    /* planned arena of the last run */
  uint64_t peak_run_bytes;          /* largest planned peak of any run */
  uint64_t memory_limit;            /* 0 = none */
  uint64_t arena_maps;              /* arenas mapped since the session was created */
  uint64_t heap_fallbacks;          /* planned tensors that came from the heap (prediction missed) */
  uint64_t unplanned_alias_runs;    /* runs that left the arena early */
  uint64_t last_run_heap_bytes;     /* bytes the last run took from the heap */
  /* --- API version 3 (appended): the pool of data-dependent tensors --- */
  uint64_t dynamic_pool_hits;       /* requests served by an idle block */
  uint64_t dynamic_pool_misses;     /* requests that allocated a new block */
  uint64_t dynamic_pool_frees;      /* blocks given back to the OS (over the bound or trimmed) */
  uint64_t dynamic_pool_held_bytes; /* idle blocks held now */
  uint64_t dynamic_pool_in_use_bytes; /* blocks tensors hold now */
  uint64_t dynamic_pool_peak_bytes; /* largest idle + in use so far */
  /* --- API version 5 (appended) --- */
  uint64_t arena_grows;             /* idle arenas grown in place for a larger plan (pages kept) */
} basalt_memory_stats;
/* Fills *stats (whose struct_size the caller sets). Thread-safe. Since API version 2. */
BASALT_C_EXPORT basalt_status* basalt_session_memory_stats(const basalt_session* session, basalt_memory_stats* stats);

/* The memory plan of one input-shape signature, made without running (see `basalt plan`). */
typedef struct basalt_memory_plan {
  size_t struct_size;               /* in: sizeof(basalt_memory_plan) */
  uint64_t arena_bytes;             /* one arena holds every planned intermediate and workspace */
  uint64_t tensor_bytes;            /* the planned intermediates before reuse */
  uint64_t workspace_bytes;         /* largest kernel workspace */
  uint64_t inputs_bytes, outputs_bytes;
  uint64_t weights_bytes, packed_weights_bytes;
  uint64_t peak_bytes;              /* weights + packed + arena + inputs + outputs */
  uint64_t dynamic_values;          /* values whose size depends on data (not in peak_bytes) */
} basalt_memory_plan;
/* Plans a run with inputs names[i] of shape shapes[i] (ranks[i] dims), i < count, without running.
 * Inputs not named keep their default or fixed dims. Planning does not fail on the memory limit:
 * compare peak_bytes with it (a run over the limit fails with BASALT_STATUS_MEMORY_LIMIT before
 * allocating). Since API version 2. */
BASALT_C_EXPORT basalt_status* basalt_session_plan_memory(const basalt_session* session, const char* const* names,
                                                          const int64_t* const* shapes, const size_t* ranks,
                                                          size_t count, basalt_memory_plan* plan);

/* Writes the profile recorded so far as a Chrome trace to `path` (NULL or "" = the options'
 * profile_path). Fails with BASALT_STATUS_INVALID_ARGUMENT when profiling is off or no path is known. */
BASALT_C_EXPORT basalt_status* basalt_session_end_profiling(basalt_session* session, const char* path);

/* ---- model inputs and outputs ------------------------------------------------------------- */

#define BASALT_VALUE_KIND_UNKNOWN 0
#define BASALT_VALUE_KIND_TENSOR 1
#define BASALT_VALUE_KIND_SEQUENCE 2
#define BASALT_VALUE_KIND_OPTIONAL 3
#define BASALT_VALUE_KIND_MAP 4
#define BASALT_VALUE_KIND_SPARSE_TENSOR 5

/* Metadata of a graph input or output. Every pointer is owned by the session and stays valid until
 * the session is destroyed. */
typedef struct basalt_io_info {
  size_t struct_size;            /* in: sizeof(basalt_io_info) */
  const char* name;
  int32_t kind;                  /* BASALT_VALUE_KIND_* */
  int32_t dtype;                 /* BASALT_DTYPE_*; for a sequence/optional, that of its tensors */
  int32_t has_shape;             /* 0: the model declares no shape (rank unknown; rank is 0) */
  int32_t has_default;           /* input only: backed by an initializer, so it may be omitted */
  size_t rank;
  const int64_t* dims;           /* rank entries; -1 for a symbolic or unknown dim */
  const char* const* dim_names;  /* rank entries; the symbolic name ("batch"), or "" */
} basalt_io_info;

/* 0 for NULL. */
BASALT_C_EXPORT size_t basalt_session_input_count(const basalt_session* session);
BASALT_C_EXPORT size_t basalt_session_output_count(const basalt_session* session);
/* Fills *info (whose struct_size the caller sets) for input/output `index` (0-based, graph order). */
BASALT_C_EXPORT basalt_status* basalt_session_input_info(const basalt_session* session, size_t index,
                                                         basalt_io_info* info);
BASALT_C_EXPORT basalt_status* basalt_session_output_info(const basalt_session* session, size_t index,
                                                          basalt_io_info* info);

/* ---- tensors ------------------------------------------------------------------------------ */

typedef struct basalt_tensor basalt_tensor;

/* A new tensor with memory allocated by basalt (64-byte aligned, zero-filled; strings empty).
 * `shape` has `rank` entries, each >= 0 (it may be NULL when rank is 0: a scalar). */
BASALT_C_EXPORT basalt_status* basalt_tensor_create(int32_t dtype, const int64_t* shape, size_t rank,
                                                    basalt_tensor** out);
/* A tensor that views the caller's memory, without a copy.
 * Contract: `data` must stay valid and must not be written while the tensor exists or while a run
 * that uses it is in progress; the caller frees it after basalt_tensor_destroy(). basalt never
 * writes through an input view, and run outputs never alias an input (see basalt_session_run).
 * `data` must be aligned to the element size
 * and hold at least `data_bytes` >= element count * basalt_dtype_size(dtype) bytes. String tensors
 * cannot be views. */
BASALT_C_EXPORT basalt_status* basalt_tensor_create_view(int32_t dtype, const int64_t* shape, size_t rank,
                                                         void* data, size_t data_bytes, basalt_tensor** out);
/* NULL is a no-op. */
BASALT_C_EXPORT void basalt_tensor_destroy(basalt_tensor* tensor);

/* Accessors. For NULL they return BASALT_DTYPE_UNDEFINED / 0 / NULL. */
BASALT_C_EXPORT int32_t basalt_tensor_dtype(const basalt_tensor* tensor);
BASALT_C_EXPORT size_t basalt_tensor_rank(const basalt_tensor* tensor);
/* `rank` entries (NULL for a scalar); valid while the tensor exists. */
BASALT_C_EXPORT const int64_t* basalt_tensor_shape(const basalt_tensor* tensor);
BASALT_C_EXPORT int64_t basalt_tensor_element_count(const basalt_tensor* tensor);
/* element count * basalt_dtype_size(dtype); 0 for string tensors. */
BASALT_C_EXPORT size_t basalt_tensor_byte_size(const basalt_tensor* tensor);
/* The elements, row-major and contiguous; valid while the tensor exists. NULL for string tensors;
 * for a tensor with no elements, a pointer that must not be read. */
BASALT_C_EXPORT const void* basalt_tensor_data(const basalt_tensor* tensor);
BASALT_C_EXPORT void* basalt_tensor_mutable_data(basalt_tensor* tensor);

/* String tensors: element `index` (row-major). get returns a pointer valid until the element is
 * set again or the tensor is destroyed; strings may contain NUL bytes, hence the length. */
BASALT_C_EXPORT basalt_status* basalt_tensor_get_string(const basalt_tensor* tensor, int64_t index,
                                                        const char** data, size_t* length);
BASALT_C_EXPORT basalt_status* basalt_tensor_set_string(basalt_tensor* tensor, int64_t index,
                                                        const char* data, size_t length);

/* ---- running ------------------------------------------------------------------------------ */

/* Per-run options: no fields yet besides struct_size. Pass NULL. */
typedef struct basalt_run_options {
  size_t struct_size; /* sizeof(basalt_run_options) */
} basalt_run_options;

/* Runs the model.
 *  - Inputs: `input_names[i]` is fed `inputs[i]`, for i < input_count. Every input without a
 *    default must be given. inputs[i] may be NULL only for an optional input (an empty optional).
 *    Names, dtypes, ranks and fixed dims are checked; a mismatch is BASALT_STATUS_INVALID_ARGUMENT
 *    naming the input, what the model expects and what was given.
 *  - Outputs: `outputs` has `output_count` entries. With `output_names`, outputs[i] receives the
 *    output named output_names[i]; with output_names NULL, output_count must equal
 *    basalt_session_output_count() and outputs come in graph order.
 *    On success each outputs[i] is a new tensor the caller destroys, or NULL for an empty optional
 *    output. Each output owns its memory and may be written: it never aliases an input, a weight
 *    of the model or another output (memory a node such as Identity forwards is copied).
 *    A sequence output is BASALT_STATUS_UNSUPPORTED here: use basalt_session_run_values.
 *    On failure every outputs[i] is NULL.
 *  - Input tensors are only read, and remain the caller's. */
BASALT_C_EXPORT basalt_status* basalt_session_run(const basalt_session* session, const basalt_run_options* options,
                                                  const char* const* input_names,
                                                  const basalt_tensor* const* inputs, size_t input_count,
                                                  const char* const* output_names, basalt_tensor** outputs,
                                                  size_t output_count);

/* ---- sequences (ONNX seq(tensor(T))) ----------------------------------------------------- */

typedef struct basalt_sequence basalt_sequence;

/* A sequence of `count` tensors of dtype `elem_dtype` (count may be 0: an empty sequence). The
 * sequence refers to the items' memory (views stay views), so the same lifetime rules apply as for
 * the tensors given; the tensor handles themselves may be destroyed afterwards. Since API version 2. */
BASALT_C_EXPORT basalt_status* basalt_sequence_create(int32_t elem_dtype, const basalt_tensor* const* items, size_t count,
                                                      basalt_sequence** out);
/* NULL is a no-op. */
BASALT_C_EXPORT void basalt_sequence_destroy(basalt_sequence* sequence);
/* 0 for NULL. */
BASALT_C_EXPORT size_t basalt_sequence_length(const basalt_sequence* sequence);
BASALT_C_EXPORT int32_t basalt_sequence_elem_dtype(const basalt_sequence* sequence);
/* Item `index` as a new tensor handle the caller destroys; it shares the item's memory. */
BASALT_C_EXPORT basalt_status* basalt_sequence_item(const basalt_sequence* sequence, size_t index, basalt_tensor** out);

/* Runs like basalt_session_run, for models whose inputs or outputs may be sequences. Input i is
 * inputs[i] (a tensor) or seq_inputs[i] (a sequence): at most one of them non-NULL, both NULL for an
 * empty optional; either array may be NULL when no entry uses it. On success output i is in
 * outputs[i] when it is a tensor or in seq_outputs[i] when it is a sequence (the other is NULL; both
 * NULL for an empty optional); outputs own their memory as in basalt_session_run. On failure every
 * entry is NULL. Since API version 2. */
BASALT_C_EXPORT basalt_status* basalt_session_run_values(const basalt_session* session, const basalt_run_options* options,
                                                         const char* const* input_names, const basalt_tensor* const* inputs,
                                                         const basalt_sequence* const* seq_inputs, size_t input_count,
                                                         const char* const* output_names, basalt_tensor** outputs,
                                                         basalt_sequence** seq_outputs, size_t output_count);

/* IO binding: runs like basalt_session_run, but writes output output_names[i] into the caller's
 * tensor outputs[i] (typically basalt_tensor_create_view of a preallocated buffer), i < output_count.
 * Each must have exactly the dtype and shape the run produces, else BASALT_STATUS_INVALID_ARGUMENT
 * naming the output. A kernel that produces a bound output writes straight into its memory; an
 * output forwarded from elsewhere (an Identity of an input) is copied in. Outputs not named are
 * computed and dropped. String outputs cannot be bound. Since API version 2. */
BASALT_C_EXPORT basalt_status* basalt_session_run_into(const basalt_session* session, const basalt_run_options* options,
                                                       const char* const* input_names, const basalt_tensor* const* inputs,
                                                       size_t input_count, const char* const* output_names,
                                                       basalt_tensor* const* outputs, size_t output_count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* BASALT_C_API_H_ */
