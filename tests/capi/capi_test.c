/* Tests of the C API (include/basalt/c_api.h), in plain C11 against libbasalt.so.
 *
 *   basalt_capi_test MODELS_DIR [TEST_ADD_MODEL]
 *
 * MODELS_DIR holds the models tests/capi/make_models.py writes; TEST_ADD_MODEL defaults to the
 * conformance model /usr/share/libonnx-testdata/data/node/test_add/model.onnx.
 * Each test case counts once; the last line is "N passed, N failed". */
#include <basalt/c_api.h>

#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char* g_models = ".";
static const char* g_test_add = "/usr/share/libonnx-testdata/data/node/test_add/model.onnx";
static int g_case_failed;

#define CHECK(cond)                                                          \
  do {                                                                       \
    if (!(cond)) {                                                           \
      fprintf(stderr, "  FAIL %s:%d: %s\n", __FILE__, __LINE__, #cond);     \
      g_case_failed = 1;                                                     \
    }                                                                        \
  } while (0)

/* A call that must succeed; on failure prints the status message. */
#define OK(call)                                                                                   \
  do {                                                                                             \
    basalt_status* st_ = (call);                                                                   \
    if (st_) {                                                                                     \
      fprintf(stderr, "  FAIL %s:%d: %s: %s\n", __FILE__, __LINE__, #call, basalt_status_message(st_)); \
      g_case_failed = 1;                                                                           \
      basalt_status_destroy(st_);                                                                  \
    }                                                                                              \
  } while (0)

/* A call that must fail with `code` and a message containing each of the given words. */
#define EXPECT_ERROR(call, code, ...) expect_error((call), (code), #call, __LINE__, (const char*[]){__VA_ARGS__, NULL})

static void expect_error(basalt_status* st, int32_t code, const char* call, int line, const char** words) {
  if (!st) {
    fprintf(stderr, "  FAIL line %d: %s succeeded, expected %s\n", line, call, basalt_status_code_name(code));
    g_case_failed = 1;
    return;
  }
  const char* msg = basalt_status_message(st);
  printf("    (expected error, %s) %s\n", basalt_status_code_name(basalt_status_code(st)), msg);
  if (basalt_status_code(st) != code) {
    fprintf(stderr, "  FAIL line %d: %s: code %d (%s), expected %d (%s)\n", line, call, basalt_status_code(st),
            basalt_status_code_name(basalt_status_code(st)), code, basalt_status_code_name(code));
    g_case_failed = 1;
  }
  for (; *words; ++words)
    if (!strstr(msg, *words)) {
      fprintf(stderr, "  FAIL line %d: %s: message does not mention '%s'\n", line, call, *words);
      g_case_failed = 1;
    }
  basalt_status_destroy(st);
}

static char* path_in_models(const char* name) {
  static char buf[4096];
  snprintf(buf, sizeof buf, "%s/%s", g_models, name);
  return buf;
}

static basalt_session* open_model(const char* path) {
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(path, NULL, &s));
  return s;
}

/* ---------------------------------------------------------------------------------------------- */

static void test_api_version(void) {
  CHECK(basalt_api_version() == BASALT_API_VERSION);
  CHECK(strcmp(basalt_dtype_name(BASALT_DTYPE_FLOAT), "float32") == 0);
  CHECK(strcmp(basalt_dtype_name(1234), "unknown") == 0);
  CHECK(basalt_dtype_size(BASALT_DTYPE_FLOAT16) == 2);
  CHECK(basalt_dtype_size(BASALT_DTYPE_STRING) == 0);
  CHECK(strcmp(basalt_status_code_name(BASALT_STATUS_INVALID_ARGUMENT), "invalid argument") == 0);
  CHECK(strcmp(basalt_status_code_name(-5), "unknown") == 0);
}

static void test_create_from_path(void) {
  basalt_session* s = open_model(g_test_add);
  CHECK(s != NULL);
  CHECK(basalt_session_input_count(s) == 2);
  CHECK(basalt_session_output_count(s) == 1);
  basalt_io_info io = {.struct_size = sizeof io};
  OK(basalt_session_input_info(s, 0, &io));
  CHECK(io.name && strcmp(io.name, "x") == 0);
  CHECK(io.kind == BASALT_VALUE_KIND_TENSOR && io.dtype == BASALT_DTYPE_FLOAT && io.has_shape);
  CHECK(io.rank == 3 && io.dims[0] == 3 && io.dims[1] == 4 && io.dims[2] == 5);
  OK(basalt_session_output_info(s, 0, &io));
  CHECK(io.name && strcmp(io.name, "sum") == 0);
  basalt_session_destroy(s);
}

/* Runs test_add (x + y, float [3,4,5]) with inputs viewing caller memory; checks every element. */
static void run_test_add(basalt_session* s) {
  float x[60], y[60];
  for (int i = 0; i < 60; ++i) x[i] = (float)i * 0.5f, y[i] = 100.0f - (float)i;
  int64_t shape[3] = {3, 4, 5};
  basalt_tensor* in[2] = {NULL, NULL};
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 3, x, sizeof x, &in[0]));
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 3, y, sizeof y, &in[1]));
  const char* names[2] = {"x", "y"};
  basalt_tensor* out = NULL;
  OK(basalt_session_run(s, NULL, names, (const basalt_tensor* const*)in, 2, NULL, &out, 1));
  CHECK(out != NULL);
  if (out) {
    CHECK(basalt_tensor_dtype(out) == BASALT_DTYPE_FLOAT);
    CHECK(basalt_tensor_rank(out) == 3 && basalt_tensor_shape(out)[2] == 5);
    CHECK(basalt_tensor_element_count(out) == 60 && basalt_tensor_byte_size(out) == sizeof x);
    const float* z = basalt_tensor_data(out);
    int bad = 0;
    for (int i = 0; i < 60; ++i) bad += z[i] != x[i] + y[i];
    CHECK(bad == 0);
  }
  basalt_tensor_destroy(out);
  basalt_tensor_destroy(in[0]);
  basalt_tensor_destroy(in[1]);
}

static void test_create_from_bytes(void) {
  FILE* f = fopen(g_test_add, "rb");
  CHECK(f != NULL);
  if (!f) return;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* bytes = malloc((size_t)n);
  CHECK(bytes && fread(bytes, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  basalt_session* s = NULL;
  OK(basalt_session_create_from_bytes(bytes, (size_t)n, NULL, &s));
  /* The header says the bytes are copied: scribble over them before running. */
  memset(bytes, 0xAB, (size_t)n);
  free(bytes);
  CHECK(s != NULL);
  if (s) run_test_add(s);
  basalt_session_destroy(s);
}

static void test_run_conformance_add(void) {
  basalt_session* s = open_model(g_test_add);
  if (s) run_test_add(s);
  basalt_session_destroy(s);
}

static void test_metadata_symbolic(void) {
  basalt_session* s = open_model(path_in_models("symbolic.onnx"));
  CHECK(s != NULL);
  if (!s) return;
  CHECK(basalt_session_input_count(s) == 2 && basalt_session_output_count(s) == 3);
  basalt_io_info io = {.struct_size = sizeof io};
  OK(basalt_session_input_info(s, 0, &io));
  CHECK(strcmp(io.name, "X") == 0 && io.dtype == BASALT_DTYPE_FLOAT && io.has_shape && !io.has_default);
  CHECK(io.rank == 2);
  CHECK(io.dims[0] == -1 && strcmp(io.dim_names[0], "batch") == 0);
  CHECK(io.dims[1] == 3 && strcmp(io.dim_names[1], "") == 0);
  OK(basalt_session_input_info(s, 1, &io));
  CHECK(strcmp(io.name, "Y") == 0 && io.rank == 2 && io.dims[0] == 1 && io.dims[1] == 3);
  OK(basalt_session_output_info(s, 0, &io));
  CHECK(strcmp(io.name, "Z") == 0 && io.rank == 2 && io.dims[0] == -1 && strcmp(io.dim_names[0], "batch") == 0);
  OK(basalt_session_output_info(s, 2, &io));
  CHECK(strcmp(io.name, "B") == 0 && io.rank == 1 && io.dims[0] == 3);
  EXPECT_ERROR(basalt_session_input_info(s, 2, &io), BASALT_STATUS_INVALID_ARGUMENT, "index 2", "2 inputs");
  EXPECT_ERROR(basalt_session_output_info(s, 7, &io), BASALT_STATUS_INVALID_ARGUMENT, "index 7");
  basalt_session_destroy(s);
}

/* struct_size rules: larger out-structs get their unknown tail zeroed; in-structs with a nonzero
 * unknown tail are refused; too-small sizes are refused. */
static void test_struct_versioning(void) {
  basalt_session* s = open_model(path_in_models("symbolic.onnx"));
  if (!s) { CHECK(0); return; }
  struct { basalt_io_info v1; uint64_t future; } big;
  memset(&big, 0xFF, sizeof big);
  big.v1.struct_size = sizeof big;
  OK(basalt_session_input_info(s, 0, &big.v1));
  CHECK(big.future == 0 && strcmp(big.v1.name, "X") == 0);
  basalt_io_info small = {.struct_size = 8};
  EXPECT_ERROR(basalt_session_input_info(s, 0, &small), BASALT_STATUS_INVALID_ARGUMENT, "struct_size");
  basalt_session_destroy(s);

  struct { basalt_session_options v1; uint64_t future; } opts;
  memset(&opts, 0, sizeof opts);
  opts.v1.struct_size = sizeof opts;
  s = NULL;
  OK(basalt_session_create_from_path(path_in_models("symbolic.onnx"), &opts.v1, &s)); /* zero tail: fine */
  CHECK(s != NULL);
  basalt_session_destroy(s);
  opts.future = 1;
  EXPECT_ERROR(basalt_session_create_from_path(path_in_models("symbolic.onnx"), &opts.v1, &s), BASALT_STATUS_UNSUPPORTED,
               "basalt_session_options", "does not know");
  CHECK(s == NULL);
  basalt_session_options zero = {0};
  EXPECT_ERROR(basalt_session_create_from_path(path_in_models("symbolic.onnx"), &zero, &s), BASALT_STATUS_INVALID_ARGUMENT,
               "struct_size");
  basalt_session_options neg = BASALT_SESSION_OPTIONS_INIT;
  neg.threads = -1;
  EXPECT_ERROR(basalt_session_create_from_path(path_in_models("symbolic.onnx"), &neg, &s), BASALT_STATUS_INVALID_ARGUMENT,
               "threads");
}

static void test_options(void) {
  basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;
  o.threads = 2;
  o.memory_limit = (uint64_t)1 << 30;
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(g_test_add, &o, &s));
  if (s) run_test_add(s);
  basalt_session_destroy(s);

  /* An unknown op: refused by default, loaded with allow_unsupported, and then running fails. */
  EXPECT_ERROR(basalt_session_create_from_path(path_in_models("unsupported.onnx"), NULL, &s), BASALT_STATUS_UNSUPPORTED,
               "NoSuchOp");
  o.allow_unsupported = 1;
  OK(basalt_session_create_from_path(path_in_models("unsupported.onnx"), &o, &s));
  CHECK(s != NULL);
  float x[2] = {1, 2};
  int64_t shape[1] = {2};
  basalt_tensor* in = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 1, x, sizeof x, &in));
  const char* name = "X";
  basalt_tensor* out = (basalt_tensor*)&out; /* garbage: must come back NULL */
  basalt_status* st = basalt_session_run(s, NULL, &name, (const basalt_tensor* const*)&in, 1, NULL, &out, 1);
  CHECK(st != NULL && out == NULL);
  if (st) printf("    (expected error, %s) %s\n", basalt_status_code_name(basalt_status_code(st)), basalt_status_message(st));
  basalt_status_destroy(st);
  basalt_tensor_destroy(in);
  basalt_session_destroy(s);
}

/* The symbolic model with caller memory, at two batch sizes; checks values, that outputs never
 * alias the input buffer, and that an output forwarding a (read-only mapped) weight is writable. */
static void run_symbolic(basalt_session* s, int64_t batch, int use_views) {
  float x[8 * 3], y[3] = {0.5f, -1.0f, 2.0f};
  for (int i = 0; i < batch * 3; ++i) x[i] = (float)(i * i) - 3.0f;
  int64_t xs[2] = {batch, 3}, ys[2] = {1, 3};
  basalt_tensor* in[2] = {NULL, NULL};
  if (use_views) {
    OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, xs, 2, x, sizeof x, &in[0]));
  } else {
    OK(basalt_tensor_create(BASALT_DTYPE_FLOAT, xs, 2, &in[0]));
    if (in[0]) memcpy(basalt_tensor_mutable_data(in[0]), x, (size_t)batch * 3 * sizeof(float));
  }
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, ys, 2, y, sizeof y, &in[1]));
  const char* names[2] = {"X", "Y"};
  basalt_tensor* out[3] = {NULL, NULL, NULL};
  OK(basalt_session_run(s, NULL, names, (const basalt_tensor* const*)in, 2, NULL, out, 3));
  if (!out[0] || !out[1] || !out[2]) {
    CHECK(0);
    goto done;
  }
  CHECK(basalt_tensor_rank(out[0]) == 2 && basalt_tensor_shape(out[0])[0] == batch && basalt_tensor_shape(out[0])[1] == 3);
  const float* z = basalt_tensor_data(out[0]);
  const float* w = basalt_tensor_data(out[1]);
  int bad = 0;
  for (int i = 0; i < batch * 3; ++i) bad += z[i] != x[i] + y[i % 3] || w[i] != x[i];
  CHECK(bad == 0);
  /* W = Identity(X) must be its own memory, not the input's. */
  CHECK((const void*)w != basalt_tensor_data(in[0]));
  if (use_views) {
    x[0] = 12345.0f;
    CHECK(w[0] != 12345.0f);
  }
  /* B = Identity(weight): readable and writable, even though the weight lives in a read-only map. */
  float* b = basalt_tensor_mutable_data(out[2]);
  CHECK(b[0] == 10.0f && b[1] == 20.0f && b[2] == 30.0f);
  b[0] = -1.0f;
  CHECK(b[0] == -1.0f);

  /* Selected outputs, by name, in the caller's order. */
  const char* want[2] = {"B", "Z"};
  basalt_tensor* sel[2] = {NULL, NULL};
  OK(basalt_session_run(s, NULL, names, (const basalt_tensor* const*)in, 2, want, sel, 2));
  CHECK(sel[0] && basalt_tensor_element_count(sel[0]) == 3 && ((const float*)basalt_tensor_data(sel[0]))[0] == 10.0f);
  CHECK(sel[1] && basalt_tensor_element_count(sel[1]) == batch * 3);
  basalt_tensor_destroy(sel[0]);
  basalt_tensor_destroy(sel[1]);
done:
  for (int i = 0; i < 3; ++i) basalt_tensor_destroy(out[i]);
  basalt_tensor_destroy(in[0]);
  basalt_tensor_destroy(in[1]);
}

static void test_run_symbolic(void) {
  basalt_session* s = open_model(path_in_models("symbolic.onnx"));
  if (!s) { CHECK(0); return; }
  run_symbolic(s, 2, 1);
  run_symbolic(s, 5, 1);
  run_symbolic(s, 8, 0);
  basalt_session_destroy(s);
}

/* Outputs outlive the session that made them. */
static void test_output_outlives_session(void) {
  basalt_session* s = open_model(path_in_models("symbolic.onnx"));
  if (!s) { CHECK(0); return; }
  float x[3] = {1, 2, 3}, y[3] = {1, 1, 1};
  int64_t xs[2] = {1, 3};
  basalt_tensor* in[2] = {NULL, NULL};
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, xs, 2, x, sizeof x, &in[0]));
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, xs, 2, y, sizeof y, &in[1]));
  const char* names[2] = {"X", "Y"};
  const char* want[1] = {"B"};
  basalt_tensor* b = NULL;
  OK(basalt_session_run(s, NULL, names, (const basalt_tensor* const*)in, 2, want, &b, 1));
  basalt_session_destroy(s);
  CHECK(b && ((const float*)basalt_tensor_data(b))[2] == 30.0f);
  basalt_tensor_destroy(b);
  basalt_tensor_destroy(in[0]);
  basalt_tensor_destroy(in[1]);
}

static void test_strings(void) {
  basalt_session* s = open_model(path_in_models("strings.onnx"));
  if (!s) { CHECK(0); return; }
  int64_t n = 2;
  basalt_tensor* in = NULL;
  OK(basalt_tensor_create(BASALT_DTYPE_STRING, &n, 1, &in));
  OK(basalt_tensor_set_string(in, 0, "hello", 5));
  OK(basalt_tensor_set_string(in, 1, "wo\0rld", 6));
  CHECK(basalt_tensor_data(in) == NULL && basalt_tensor_byte_size(in) == 0);
  const char* name = "S";
  basalt_tensor* out = NULL;
  OK(basalt_session_run(s, NULL, &name, (const basalt_tensor* const*)&in, 1, NULL, &out, 1));
  const char* p = NULL;
  size_t len = 0;
  OK(basalt_tensor_get_string(out, 1, &p, &len));
  CHECK(len == 6 && p && memcmp(p, "wo\0rld", 6) == 0);
  OK(basalt_tensor_get_string(out, 0, &p, &len));
  CHECK(len == 5 && p && memcmp(p, "hello", 5) == 0);
  EXPECT_ERROR(basalt_tensor_get_string(out, 2, &p, &len), BASALT_STATUS_INVALID_ARGUMENT, "index 2");
  CHECK(p == NULL && len == 0);
  float f = 0;
  int64_t one = 1;
  basalt_tensor* ft = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, &one, 1, &f, sizeof f, &ft));
  EXPECT_ERROR(basalt_tensor_get_string(ft, 0, &p, &len), BASALT_STATUS_INVALID_ARGUMENT, "float32", "not string");
  basalt_tensor* sv = NULL;
  char buf[64];
  EXPECT_ERROR(basalt_tensor_create_view(BASALT_DTYPE_STRING, &n, 1, buf, sizeof buf, &sv), BASALT_STATUS_UNSUPPORTED,
               "string");
  CHECK(sv == NULL);
  basalt_tensor_destroy(ft);
  basalt_tensor_destroy(out);
  basalt_tensor_destroy(in);
  basalt_session_destroy(s);
}

static void test_load_errors(void) {
  basalt_session* s = (basalt_session*)&s; /* garbage: must come back NULL */
  EXPECT_ERROR(basalt_session_create_from_path("/nonexistent/model.onnx", NULL, &s), BASALT_STATUS_IO,
               "/nonexistent/model.onnx");
  CHECK(s == NULL);
  const char garbage[] = "this is not an ONNX model at all \x01\x02\xff\xfe\x80\x80\x80\x80\x80";
  EXPECT_ERROR(basalt_session_create_from_bytes(garbage, sizeof garbage, NULL, &s), BASALT_STATUS_INVALID_MODEL, "");
  CHECK(s == NULL);
  EXPECT_ERROR(basalt_session_create_from_bytes(NULL, 10, NULL, &s), BASALT_STATUS_INVALID_ARGUMENT, "data is NULL");
  EXPECT_ERROR(basalt_session_create_from_path(NULL, NULL, &s), BASALT_STATUS_INVALID_ARGUMENT, "path is NULL");
  EXPECT_ERROR(basalt_session_create_from_path(g_test_add, NULL, NULL), BASALT_STATUS_INVALID_ARGUMENT, "out is NULL");
  /* A folder, not a file. */
  basalt_status* st = basalt_session_create_from_path(g_models, NULL, &s);
  CHECK(st != NULL && s == NULL);
  if (st) printf("    (expected error, %s) %s\n", basalt_status_code_name(basalt_status_code(st)), basalt_status_message(st));
  basalt_status_destroy(st);
}

static void test_tensor_errors(void) {
  float buf[5];
  int64_t shape[2] = {2, 2}, neg[2] = {2, -3};
  basalt_tensor* t = (basalt_tensor*)&t;
  EXPECT_ERROR(basalt_tensor_create(99, shape, 2, &t), BASALT_STATUS_INVALID_ARGUMENT, "element type 99");
  CHECK(t == NULL);
  EXPECT_ERROR(basalt_tensor_create(BASALT_DTYPE_FLOAT, neg, 2, &t), BASALT_STATUS_INVALID_ARGUMENT, "negative");
  EXPECT_ERROR(basalt_tensor_create(BASALT_DTYPE_FLOAT, NULL, 2, &t), BASALT_STATUS_INVALID_ARGUMENT, "shape is NULL");
  EXPECT_ERROR(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 2, buf, 8, &t), BASALT_STATUS_INVALID_ARGUMENT, "needs 16 bytes",
               "data_bytes is 8");
  EXPECT_ERROR(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 2, (char*)buf + 1, 16, &t), BASALT_STATUS_INVALID_ARGUMENT,
               "aligned");
  EXPECT_ERROR(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 2, NULL, 16, &t), BASALT_STATUS_INVALID_ARGUMENT, "data is NULL");
  int64_t huge[3] = {INT64_MAX, INT64_MAX, 4};
  EXPECT_ERROR(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, huge, 3, buf, sizeof buf, &t), BASALT_STATUS_INVALID_ARGUMENT,
               "overflows");
  EXPECT_ERROR(basalt_tensor_create(BASALT_DTYPE_FLOAT, huge, 3, &t), BASALT_STATUS_MEMORY_LIMIT, "overflows");
  /* A scalar: rank 0, shape may be NULL. */
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, NULL, 0, buf, sizeof(float), &t));
  CHECK(t && basalt_tensor_rank(t) == 0 && basalt_tensor_element_count(t) == 1 && basalt_tensor_shape(t) == NULL);
  basalt_tensor_destroy(t);
}

static void test_run_errors(void) {
  basalt_session* s = open_model(path_in_models("symbolic.onnx"));
  if (!s) { CHECK(0); return; }
  float x[6] = {0}, y[3] = {0};
  int64_t xs[2] = {2, 3}, ys[2] = {1, 3}, wrong_dim[2] = {2, 4}, wrong_rank[1] = {6};
  int64_t xi[6] = {0};
  basalt_tensor *tx = NULL, *ty = NULL, *ti = NULL, *tw = NULL, *tr = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, xs, 2, x, sizeof x, &tx));
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, ys, 2, y, sizeof y, &ty));
  OK(basalt_tensor_create_view(BASALT_DTYPE_INT64, xs, 2, xi, sizeof xi, &ti));
  OK(basalt_tensor_create(BASALT_DTYPE_FLOAT, wrong_dim, 2, &tw));
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, wrong_rank, 1, x, sizeof x, &tr));
  basalt_tensor* out[3];
  for (int i = 0; i < 3; ++i) out[i] = (basalt_tensor*)&out; /* garbage: must come back NULL */

  const char* bad_name[2] = {"X", "nope"};
  const basalt_tensor* in[2] = {tx, ty};
  EXPECT_ERROR(basalt_session_run(s, NULL, bad_name, in, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'nope'", "X, Y");
  CHECK(out[0] == NULL && out[1] == NULL && out[2] == NULL);

  const char* names[2] = {"X", "Y"};
  const basalt_tensor* in_dtype[2] = {ti, ty};
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in_dtype, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'X'", "float32",
               "int64");
  const basalt_tensor* in_dim[2] = {tw, ty};
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in_dim, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'X'", "dimension 1",
               "[2,4]");
  const basalt_tensor* in_rank[2] = {tr, ty};
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in_rank, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'X'", "rank 2",
               "[6]");
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in, 1, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'Y'", "required");
  const basalt_tensor* in_null[2] = {tx, NULL};
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in_null, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'Y'", "tensor");
  const char* twice[2] = {"X", "X"};
  EXPECT_ERROR(basalt_session_run(s, NULL, twice, in, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "'X'", "twice");
  const char* bad_out[1] = {"Q"};
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in, 2, bad_out, out, 1), BASALT_STATUS_INVALID_ARGUMENT, "'Q'");
  EXPECT_ERROR(basalt_session_run(s, NULL, names, in, 2, NULL, out, 2), BASALT_STATUS_INVALID_ARGUMENT, "output_count", "3");
  EXPECT_ERROR(basalt_session_run(NULL, NULL, names, in, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "session is NULL");
  EXPECT_ERROR(basalt_session_run(s, NULL, NULL, in, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "input_names");
  const char* null_name[2] = {"X", NULL};
  EXPECT_ERROR(basalt_session_run(s, NULL, null_name, in, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "input_names[1]");
  basalt_run_options ro = {0};
  EXPECT_ERROR(basalt_session_run(s, &ro, names, in, 2, NULL, out, 3), BASALT_STATUS_INVALID_ARGUMENT, "basalt_run_options");
  ro.struct_size = sizeof ro;
  OK(basalt_session_run(s, &ro, names, in, 2, NULL, out, 3));
  CHECK(out[0] != NULL);
  for (int i = 0; i < 3; ++i) basalt_tensor_destroy(out[i]);

  basalt_tensor_destroy(tx);
  basalt_tensor_destroy(ty);
  basalt_tensor_destroy(ti);
  basalt_tensor_destroy(tw);
  basalt_tensor_destroy(tr);
  basalt_session_destroy(s);
}

static void test_null_handles(void) {
  basalt_session_destroy(NULL);
  basalt_tensor_destroy(NULL);
  basalt_status_destroy(NULL);
  CHECK(basalt_status_code(NULL) == BASALT_STATUS_OK && strcmp(basalt_status_message(NULL), "") == 0);
  CHECK(basalt_session_input_count(NULL) == 0 && basalt_session_output_count(NULL) == 0);
  CHECK(basalt_tensor_dtype(NULL) == BASALT_DTYPE_UNDEFINED && basalt_tensor_rank(NULL) == 0);
  CHECK(basalt_tensor_shape(NULL) == NULL && basalt_tensor_data(NULL) == NULL && basalt_tensor_mutable_data(NULL) == NULL);
  CHECK(basalt_tensor_element_count(NULL) == 0 && basalt_tensor_byte_size(NULL) == 0);
  basalt_io_info io = {.struct_size = sizeof io};
  EXPECT_ERROR(basalt_session_input_info(NULL, 0, &io), BASALT_STATUS_INVALID_ARGUMENT, "session is NULL");
}

/* One session, several threads running at once, each with its own inputs. */
struct worker {
  basalt_session* s;
  int id, bad;
};
static void* work(void* arg) {
  struct worker* w = arg;
  for (int iter = 0; iter < 50; ++iter) {
    float x[12], y[3] = {1, 2, 3};
    for (int i = 0; i < 12; ++i) x[i] = (float)(w->id * 1000 + iter * 10 + i);
    int64_t xs[2] = {4, 3}, ys[2] = {1, 3};
    basalt_tensor* in[2] = {NULL, NULL};
    basalt_tensor* out[3] = {NULL, NULL, NULL};
    const char* names[2] = {"X", "Y"};
    basalt_status* st = basalt_tensor_create_view(BASALT_DTYPE_FLOAT, xs, 2, x, sizeof x, &in[0]);
    if (!st) st = basalt_tensor_create_view(BASALT_DTYPE_FLOAT, ys, 2, y, sizeof y, &in[1]);
    if (!st) st = basalt_session_run(w->s, NULL, names, (const basalt_tensor* const*)in, 2, NULL, out, 3);
    if (st) {
      w->bad++;
      basalt_status_destroy(st);
    } else {
      const float* z = basalt_tensor_data(out[0]);
      for (int i = 0; i < 12; ++i) w->bad += z[i] != x[i] + y[i % 3];
    }
    for (int i = 0; i < 3; ++i) basalt_tensor_destroy(out[i]);
    basalt_tensor_destroy(in[0]);
    basalt_tensor_destroy(in[1]);
  }
  return NULL;
}

static void test_concurrent_runs(void) {
  basalt_session* s = open_model(path_in_models("symbolic.onnx"));
  if (!s) { CHECK(0); return; }
  enum { N = 4 };
  pthread_t th[N];
  struct worker w[N];
  for (int i = 0; i < N; ++i) {
    w[i] = (struct worker){s, i, 0};
    CHECK(pthread_create(&th[i], NULL, work, &w[i]) == 0);
  }
  for (int i = 0; i < N; ++i) {
    pthread_join(th[i], NULL);
    CHECK(w[i].bad == 0);
  }
  basalt_session_destroy(s);
}

/* ---------------------------------------------------------------------------------------------- */

/* Profiling through the options: a run is recorded and end_profiling writes a Chrome trace that
 * names the node's op; with profiling off, end_profiling is an error. */
static void test_profiling(void) {
  char trace[4096];
  snprintf(trace, sizeof trace, "%s/capi_trace.json", g_models);
  basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;
  o.profile_path = trace;
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(g_test_add, &o, &s));
  if (!s) return;
  run_test_add(s);
  OK(basalt_session_end_profiling(s, NULL));
  basalt_session_destroy(s);
  FILE* f = fopen(trace, "rb");
  CHECK(f != NULL);
  if (f) {
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    CHECK(strstr(buf, "\"traceEvents\"") != NULL || buf[0] == '[');
    CHECK(strstr(buf, "\"Add\"") != NULL);
  }
  OK(basalt_session_create_from_path(g_test_add, NULL, &s));
  EXPECT_ERROR(basalt_session_end_profiling(s, trace), BASALT_STATUS_INVALID_ARGUMENT, "profiling is off");
  basalt_session_destroy(s);
}

/* API version 2 options (pool, spin, optimization level, plan cache) are accepted and checked;
 * a version-1 struct_size (ending after memory_limit) still works; memory stats report weights. */
static void test_options_v2_and_memory_stats(void) {
  basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;
  o.threads = 2;
  o.shared_pool = 1;
  o.spin_us = BASALT_SPIN_NEVER;
  o.optimization_level = BASALT_OPT_NONE;
  o.plan_cache_entries = 4;
  o.plan_cache_bytes = (uint64_t)64 << 20;
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(g_test_add, &o, &s));
  if (s) run_test_add(s);
  basalt_memory_stats st;
  memset(&st, 0xFF, sizeof st);
  st.struct_size = sizeof st;
  if (s) OK(basalt_session_memory_stats(s, &st));
  CHECK(st.memory_limit == 0);
  CHECK(st.weights_in_place_bytes <= st.weights_bytes);
  {
    const char* names[1] = {"x"};
    int64_t dims[3] = {3, 4, 5};
    const int64_t* shapes[1] = {dims};
    size_t ranks[1] = {3};
    basalt_memory_plan plan;
    memset(&plan, 0xFF, sizeof plan);
    plan.struct_size = sizeof plan;
    if (s) OK(basalt_session_plan_memory(s, names, shapes, ranks, 1, &plan));
    CHECK(plan.inputs_bytes == 2 * 60 * 4 && plan.outputs_bytes == 60 * 4);
    CHECK(plan.peak_bytes >= plan.inputs_bytes + plan.outputs_bytes);
    basalt_memory_plan small_plan = {.struct_size = 8};
    if (s) EXPECT_ERROR(basalt_session_plan_memory(s, names, shapes, ranks, 1, &small_plan), BASALT_STATUS_INVALID_ARGUMENT,
                        "struct_size");
  }
  basalt_memory_stats bad = {.struct_size = 4};
  if (s) EXPECT_ERROR(basalt_session_memory_stats(s, &bad), BASALT_STATUS_INVALID_ARGUMENT, "struct_size");
  EXPECT_ERROR(basalt_session_memory_stats(NULL, &st), BASALT_STATUS_INVALID_ARGUMENT, "session is NULL");
  basalt_session_destroy(s);

  basalt_session_options v1 = BASALT_SESSION_OPTIONS_INIT;
  v1.struct_size = offsetof(basalt_session_options, memory_limit) + sizeof(uint64_t);
  v1.threads = 1;
  s = NULL;
  OK(basalt_session_create_from_path(g_test_add, &v1, &s));
  if (s) run_test_add(s);
  basalt_session_destroy(s);

  basalt_session_options e = BASALT_SESSION_OPTIONS_INIT;
  e.optimization_level = 9;
  EXPECT_ERROR(basalt_session_create_from_path(g_test_add, &e, &s), BASALT_STATUS_INVALID_ARGUMENT, "optimization_level");
  e.optimization_level = 0;
  e.spin_us = -5;
  EXPECT_ERROR(basalt_session_create_from_path(g_test_add, &e, &s), BASALT_STATUS_INVALID_ARGUMENT, "spin_us");
  e.spin_us = 0;
  e.plan_cache_entries = -7;
  EXPECT_ERROR(basalt_session_create_from_path(g_test_add, &e, &s), BASALT_STATUS_INVALID_ARGUMENT, "plan_cache_entries");
}

/* API version 3: the dynamic pool's bound is accepted and checked; a version-2 caller's smaller
 * basalt_memory_stats gets only the fields it knows (bytes past its struct_size stay untouched). */
static void test_options_v3_dynamic_pool(void) {
  basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;
  o.dynamic_pool_bytes = BASALT_DYNAMIC_POOL_NONE;
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(g_test_add, &o, &s));
  if (s) run_test_add(s);
  basalt_memory_stats st;
  memset(&st, 0xFF, sizeof st);
  st.struct_size = sizeof st;
  if (s) OK(basalt_session_memory_stats(s, &st));
  CHECK(st.dynamic_pool_held_bytes == 0);
  CHECK(st.dynamic_pool_peak_bytes != UINT64_MAX && st.dynamic_pool_hits != UINT64_MAX);
  basalt_memory_stats v2;
  memset(&v2, 0xAB, sizeof v2);
  v2.struct_size = offsetof(basalt_memory_stats, dynamic_pool_hits);
  if (s) OK(basalt_session_memory_stats(s, &v2));
  const unsigned char* tail = (const unsigned char*)&v2 + offsetof(basalt_memory_stats, dynamic_pool_hits);
  int untouched = 1;
  for (size_t i = 0; i < sizeof v2 - offsetof(basalt_memory_stats, dynamic_pool_hits); ++i) untouched &= tail[i] == 0xAB;
  CHECK(untouched);
  CHECK(v2.weights_bytes == st.weights_bytes);
  basalt_session_destroy(s);
  basalt_session_options e = BASALT_SESSION_OPTIONS_INIT;
  e.dynamic_pool_bytes = -5;
  s = NULL;
  EXPECT_ERROR(basalt_session_create_from_path(g_test_add, &e, &s), BASALT_STATUS_INVALID_ARGUMENT, "dynamic_pool_bytes");
}

/* API version 5: arena_grows. Ever larger batches grow the session's one arena in place
 * (arena_maps stays 1) with correct results; a version-4 caller's smaller basalt_memory_stats
 * leaves the new field untouched. */
static void test_memory_stats_v5_arena_grows(void) {
  basalt_session* s = open_model(path_in_models("chain.onnx"));
  if (!s) { CHECK(0); return; }
  static float x[4096 * 256];
  for (int i = 0; i < 4096 * 256; ++i) x[i] = (float)((i * 7) % 13) - 6.0f;
  const int64_t batches[3] = {1, 64, 4096}; /* the last one's arena is 4 MB (huge pages where turned on) */
  for (int k = 0; k < 3; ++k) {
    int64_t shape[2] = {batches[k], 256};
    basalt_tensor* in = NULL;
    OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 2, x, (size_t)batches[k] * 256 * sizeof(float), &in));
    const char* name = "X";
    basalt_tensor* out = NULL;
    OK(basalt_session_run(s, NULL, &name, (const basalt_tensor* const*)&in, 1, NULL, &out, 1));
    if (out) {
      const float* z = basalt_tensor_data(out);
      int bad = 0;
      for (int64_t i = 0; i < batches[k] * 256; ++i) bad += z[i] != (x[i] > 0 ? 2 * x[i] : 0.0f);
      CHECK(bad == 0);
    }
    basalt_tensor_destroy(out);
    basalt_tensor_destroy(in);
    basalt_memory_stats st;
    memset(&st, 0xFF, sizeof st);
    st.struct_size = sizeof st;
    OK(basalt_session_memory_stats(s, &st));
    CHECK(st.arena_maps == 1);
    CHECK(st.arena_grows == (uint64_t)k);
    CHECK(st.arena_bytes >= st.last_run_arena_bytes && st.last_run_arena_bytes >= (uint64_t)batches[k] * 256 * 4);
  }
  basalt_memory_stats v4;
  memset(&v4, 0xAB, sizeof v4);
  v4.struct_size = offsetof(basalt_memory_stats, arena_grows);
  OK(basalt_session_memory_stats(s, &v4));
  const unsigned char* tail = (const unsigned char*)&v4 + offsetof(basalt_memory_stats, arena_grows);
  int untouched = 1;
  for (size_t i = 0; i < sizeof v4 - offsetof(basalt_memory_stats, arena_grows); ++i) untouched &= tail[i] == 0xAB;
  CHECK(untouched && v4.arena_maps == 1);
  basalt_session_destroy(s);
}

/* An output the session made in its dynamic pool (NonZero's, whose size depends on the data) is
 * handed out without a copy: while the caller holds it, the pool counts its block in use; destroying
 * it gives the block back. Holding one output while running again gives a second, separate block. */
static void test_pool_outputs_not_copied(void) {
  basalt_session* s = open_model(path_in_models("nonzero.onnx"));
  if (!s) { CHECK(0); return; }
  enum { N = 20000 };
  static float x[N];
  for (int i = 0; i < N; ++i) x[i] = (i % 3 == 0) ? 0.0f : 1.0f;
  int64_t n = N;
  basalt_tensor* in = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, &n, 1, x, sizeof x, &in));
  const char* name = "X";
  basalt_tensor* out[2] = {NULL, NULL};
  basalt_memory_stats st = {.struct_size = sizeof st};
  for (int k = 0; k < 2; ++k) {
    OK(basalt_session_run(s, NULL, &name, (const basalt_tensor* const*)&in, 1, NULL, &out[k], 1));
    if (!out[k]) { CHECK(0); break; }
    const int64_t* y = basalt_tensor_data(out[k]);
    int64_t want = 0, bad = 0, count = basalt_tensor_element_count(out[k]);
    for (int i = 0; i < N; ++i)
      if (x[i] != 0.0f) bad += want >= count || y[want++] != i;
    CHECK(bad == 0 && count == want);
    OK(basalt_session_memory_stats(s, &st));
    CHECK(st.dynamic_pool_in_use_bytes >= (uint64_t)(k + 1) * basalt_tensor_byte_size(out[k]));
  }
  if (out[0] && out[1]) CHECK(basalt_tensor_data(out[0]) != basalt_tensor_data(out[1]));
  basalt_tensor_destroy(out[0]);
  basalt_tensor_destroy(out[1]);
  OK(basalt_session_memory_stats(s, &st));
  CHECK(st.dynamic_pool_in_use_bytes == 0 && st.dynamic_pool_held_bytes > 0);
  basalt_tensor_destroy(in);
  basalt_session_destroy(s);
}

/* API version 4: winograd = BASALT_WINOGRAD_OFF keeps a 3x3 conv on the direct kernels: smaller packed
 * weights, the same outputs (to fp32 rounding); any other nonzero value is refused. */
static void test_options_v4_winograd(void) {
  const char* path = path_in_models("conv3x3.onnx");
  enum { N = 32 * 32 * 32 };
  static float x[N], y[2][N];
  for (int i = 0; i < N; ++i) x[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
  /* k = 0: default; 1: BASALT_WINOGRAD_OFF; 2: a version-3 struct_size (ends before winograd,
   * which then keeps its default even though the field says off) */
  uint64_t packed[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k) {
    basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;
    o.threads = 1;
    o.winograd = k == 0 ? 0 : BASALT_WINOGRAD_OFF;
    if (k == 2) o.struct_size = offsetof(basalt_session_options, winograd);
    basalt_session* s = NULL;
    OK(basalt_session_create_from_path(path, &o, &s));
    if (!s) return;
    basalt_memory_stats st;
    memset(&st, 0, sizeof st);
    st.struct_size = sizeof st;
    OK(basalt_session_memory_stats(s, &st));
    packed[k] = st.packed_weights_bytes;
    int64_t shape[4] = {1, 32, 32, 32};
    basalt_tensor* in = NULL;
    OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 4, x, sizeof x, &in));
    basalt_tensor* out = NULL;
    const char* name = "X";
    OK(basalt_session_run(s, NULL, &name, (const basalt_tensor* const*)&in, 1, NULL, &out, 1));
    if (out && k < 2) memcpy(y[k], basalt_tensor_data(out), sizeof y[k]);
    basalt_tensor_destroy(out);
    basalt_tensor_destroy(in);
    basalt_session_destroy(s);
  }
  double num = 0, den = 0;
  for (int i = 0; i < N; ++i) num += (double)(y[0][i] - y[1][i]) * (y[0][i] - y[1][i]), den += (double)y[1][i] * y[1][i];
  CHECK(den > 0 && num <= 1e-10 * den);
  /* BASALT_WINOGRAD=0 in the environment turns Winograd off for both */
  if (!getenv("BASALT_WINOGRAD")) CHECK(packed[0] > packed[1]);
  CHECK(packed[1] > 0 && packed[2] == packed[0]);
  basalt_session_options e = BASALT_SESSION_OPTIONS_INIT;
  e.winograd = 3;
  basalt_session* s = NULL;
  EXPECT_ERROR(basalt_session_create_from_path(path, &e, &s), BASALT_STATUS_INVALID_ARGUMENT, "winograd");
  CHECK(s == NULL);
  basalt_session_options r = BASALT_SESSION_OPTIONS_INIT;
  r.reserved4 = 1; /* what a newer caller's field would look like to this library */
  EXPECT_ERROR(basalt_session_create_from_path(path, &r, &s), BASALT_STATUS_UNSUPPORTED, "reserved4");
  CHECK(s == NULL);
}

/* IO binding: the output lands in the caller's buffer; a wrong shape is refused naming the output. */
static void test_run_into(void) {
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(g_test_add, NULL, &s));
  if (!s) return;
  float x[60], y[60], out[60];
  for (int i = 0; i < 60; ++i) x[i] = (float)i, y[i] = 1.0f, out[i] = -5.0f;
  int64_t shape[3] = {3, 4, 5};
  basalt_tensor* in[2] = {NULL, NULL};
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 3, x, sizeof x, &in[0]));
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 3, y, sizeof y, &in[1]));
  basalt_tensor* o = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 3, out, sizeof out, &o));
  const char* in_names[2] = {"x", "y"};
  const char* out_names[1] = {"sum"};
  OK(basalt_session_run_into(s, NULL, in_names, (const basalt_tensor* const*)in, 2, out_names, &o, 1));
  int good = 1;
  for (int i = 0; i < 60; ++i) good &= out[i] == (float)i + 1.0f;
  CHECK(good);
  int64_t flat[1] = {60};
  basalt_tensor* wrong = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, flat, 1, out, sizeof out, &wrong));
  EXPECT_ERROR(basalt_session_run_into(s, NULL, in_names, (const basalt_tensor* const*)in, 2, out_names, &wrong, 1),
               BASALT_STATUS_INVALID_ARGUMENT, "sum");
  basalt_tensor_destroy(wrong);
  basalt_tensor_destroy(o);
  basalt_tensor_destroy(in[0]);
  basalt_tensor_destroy(in[1]);
  basalt_session_destroy(s);
}

/* Sequences through the C API: SequenceInsert appends a tensor to a sequence given by the caller. */
static void test_sequences(void) {
  const char* path = "/usr/share/libonnx-testdata/data/node/test_sequence_insert_at_back/model.onnx";
  basalt_session* s = NULL;
  OK(basalt_session_create_from_path(path, NULL, &s));
  if (!s) return;
  int64_t a[3] = {1, 2, 3}, b[3] = {4, 5, 6}, c[3] = {7, 8, 9};
  int64_t shape[1] = {3};
  basalt_tensor *ta = NULL, *tb = NULL, *tc = NULL;
  OK(basalt_tensor_create_view(BASALT_DTYPE_INT64, shape, 1, a, sizeof a, &ta));
  OK(basalt_tensor_create_view(BASALT_DTYPE_INT64, shape, 1, b, sizeof b, &tb));
  OK(basalt_tensor_create_view(BASALT_DTYPE_INT64, shape, 1, c, sizeof c, &tc));
  const basalt_tensor* items[2] = {ta, tb};
  basalt_sequence* seq = NULL;
  OK(basalt_sequence_create(BASALT_DTYPE_INT64, items, 2, &seq));
  CHECK(basalt_sequence_length(seq) == 2 && basalt_sequence_elem_dtype(seq) == BASALT_DTYPE_INT64);
  const char* in_names[2] = {"sequence", "tensor"};
  const basalt_tensor* tin[2] = {NULL, tc};
  const basalt_sequence* sin[2] = {seq, NULL};
  basalt_tensor* tout[1] = {NULL};
  basalt_sequence* sout[1] = {NULL};
  OK(basalt_session_run_values(s, NULL, in_names, tin, sin, 2, NULL, tout, sout, 1));
  CHECK(tout[0] == NULL && sout[0] != NULL);
  if (sout[0]) {
    CHECK(basalt_sequence_length(sout[0]) == 3);
    basalt_tensor* last = NULL;
    OK(basalt_sequence_item(sout[0], 2, &last));
    if (last) {
      const int64_t* d = (const int64_t*)basalt_tensor_data(last);
      CHECK(d[0] == 7 && d[1] == 8 && d[2] == 9);
      CHECK((const void*)d != (const void*)c); /* outputs never alias an input */
    }
    basalt_tensor_destroy(last);
    EXPECT_ERROR(basalt_sequence_item(sout[0], 3, &last), BASALT_STATUS_INVALID_ARGUMENT, "out of range");
  }
  /* basalt_session_run has no way to pass a sequence: leaving it out is an error naming the input. */
  basalt_tensor* plain[1] = {NULL};
  const basalt_tensor* seq_as_nothing[2] = {NULL, tc};
  EXPECT_ERROR(basalt_session_run(s, NULL, in_names, seq_as_nothing, 2, NULL, plain, 1), BASALT_STATUS_INVALID_ARGUMENT,
               "sequence");
  /* Wrong item dtype, both kinds given for one input. */
  basalt_sequence* bad = NULL;
  EXPECT_ERROR(basalt_sequence_create(BASALT_DTYPE_FLOAT, items, 2, &bad), BASALT_STATUS_INVALID_ARGUMENT, "element type");
  const basalt_tensor* both_t[2] = {tc, tc};
  const basalt_sequence* both_s[2] = {seq, NULL};
  EXPECT_ERROR(basalt_session_run_values(s, NULL, in_names, both_t, both_s, 2, NULL, tout, sout, 1),
               BASALT_STATUS_INVALID_ARGUMENT, "both");
  basalt_sequence_destroy(sout[0]);
  basalt_sequence_destroy(seq);
  basalt_tensor_destroy(ta);
  basalt_tensor_destroy(tb);
  basalt_tensor_destroy(tc);
  basalt_session_destroy(s);
}

int main(int argc, char** argv) {
  if (argc > 1) g_models = argv[1];
  if (argc > 2) g_test_add = argv[2];
  struct {
    const char* name;
    void (*fn)(void);
  } tests[] = {
      {"api_version", test_api_version},
      {"create_from_path", test_create_from_path},
      {"create_from_bytes", test_create_from_bytes},
      {"run_conformance_add_with_caller_memory", test_run_conformance_add},
      {"metadata_symbolic_dims", test_metadata_symbolic},
      {"struct_size_versioning", test_struct_versioning},
      {"options_threads_memory_limit_allow_unsupported", test_options},
      {"options_v2_and_memory_stats", test_options_v2_and_memory_stats},
      {"options_v3_dynamic_pool", test_options_v3_dynamic_pool},
      {"options_v4_winograd", test_options_v4_winograd},
      {"memory_stats_v5_arena_grows", test_memory_stats_v5_arena_grows},
      {"pool_outputs_not_copied", test_pool_outputs_not_copied},
      {"run_into_io_binding", test_run_into},
      {"sequences_run_values", test_sequences},
      {"run_symbolic_caller_and_basalt_memory", test_run_symbolic},
      {"output_outlives_session", test_output_outlives_session},
      {"string_tensors", test_strings},
      {"load_errors", test_load_errors},
      {"tensor_errors", test_tensor_errors},
      {"run_errors", test_run_errors},
      {"null_handles_are_noops", test_null_handles},
      {"concurrent_runs", test_concurrent_runs},
      {"profiling", test_profiling},
  };
  int passed = 0, failed = 0;
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; ++i) {
    g_case_failed = 0;
    printf("[ RUN  ] %s\n", tests[i].name);
    fflush(stdout);
    tests[i].fn();
    printf("[ %s ] %s\n", g_case_failed ? "FAIL" : " OK ", tests[i].name);
    if (g_case_failed) ++failed;
    else ++passed;
  }
  printf("%d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
