/* run_model: load an ONNX model with basalt's C API, print its inputs and outputs, run it once
 * with zero-filled inputs and print the output shapes.
 *
 *   run_model_c MODEL.onnx [NAME=DIMS ...]     e.g. run_model_c model.onnx x=1x3x224x224
 *
 * An input's shape is NAME=DIMS when given (NAME= is a scalar), otherwise the model's dims with
 * every symbolic or unknown dim set to 1. Inputs with a default (an initializer) are left out.
 * Exit code 0 on success, 1 when loading or running fails, 2 for a bad command line. */
#include <basalt/c_api.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANK 64

/* Prints the status's message and frees it; returns 1 if there was an error. */
static int failed(basalt_status* st, const char* what) {
  if (!st) return 0;
  fprintf(stderr, "error: %s: %s (%s)\n", what, basalt_status_message(st), basalt_status_code_name(basalt_status_code(st)));
  basalt_status_destroy(st);
  return 1;
}

static void print_info(const char* role, const basalt_io_info* io) {
  printf("  %s %s: %s [", role, io->name, basalt_dtype_name(io->dtype));
  for (size_t d = 0; d < io->rank; ++d) {
    if (d) printf(",");
    if (io->dims[d] >= 0)
      printf("%" PRId64, io->dims[d]);
    else
      printf("%s", io->dim_names[d][0] ? io->dim_names[d] : "?");
  }
  printf("]%s%s\n", io->has_shape ? "" : " (no shape declared)", io->kind == BASALT_VALUE_KIND_TENSOR ? "" : " (not a tensor)");
}

/* Parses "1x3x224x224" (or "" for a scalar) into dims; returns the rank or -1. */
static int parse_dims(const char* s, int64_t* dims) {
  int rank = 0;
  while (*s) {
    char* end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 0 || rank == MAX_RANK) return -1;
    dims[rank++] = (int64_t)v;
    s = end;
    if (*s == 'x') ++s;
    else if (*s) return -1;
  }
  return rank;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s MODEL.onnx [NAME=DIMS ...]\n", argv[0]);
    return 2;
  }
  printf("basalt C API version %u\n", (unsigned)basalt_api_version());

  basalt_session_options opts = BASALT_SESSION_OPTIONS_INIT;
  basalt_session* session = NULL;
  if (failed(basalt_session_create_from_path(argv[1], &opts, &session), "loading the model")) return 1;

  size_t n_in = basalt_session_input_count(session), n_out = basalt_session_output_count(session);
  printf("%zu inputs, %zu outputs\n", n_in, n_out);
  const char** names = calloc(n_in + 1, sizeof *names);
  basalt_tensor** inputs = calloc(n_in + 1, sizeof *inputs);
  basalt_tensor** outputs = calloc(n_out + 1, sizeof *outputs);
  size_t n_fed = 0;
  int rc = 0;
  if (!names || !inputs || !outputs) {
    fprintf(stderr, "error: out of memory\n");
    rc = 1;
    goto done;
  }

  for (size_t i = 0; i < n_in && rc == 0; ++i) {
    basalt_io_info io = {.struct_size = sizeof io};
    if (failed(basalt_session_input_info(session, i, &io), "reading input metadata")) { rc = 1; break; }
    print_info("input ", &io);
    if (io.has_default) continue;
    if (io.kind != BASALT_VALUE_KIND_TENSOR) {
      fprintf(stderr, "error: input '%s' is not a tensor; this example feeds tensors only\n", io.name);
      rc = 1;
      break;
    }
    int64_t dims[MAX_RANK];
    int rank = -1;
    size_t len = strlen(io.name);
    for (int a = 2; a < argc; ++a)
      if (strncmp(argv[a], io.name, len) == 0 && argv[a][len] == '=') rank = parse_dims(argv[a] + len + 1, dims);
    if (rank < 0) { /* no (valid) NAME=DIMS: the model's dims, symbolic ones set to 1 */
      if (io.rank > MAX_RANK) { fprintf(stderr, "error: input '%s' has rank %zu\n", io.name, io.rank); rc = 1; break; }
      rank = (int)io.rank;
      for (int d = 0; d < rank; ++d) dims[d] = io.dims[d] >= 0 ? io.dims[d] : 1;
    }
    /* basalt allocates zero-filled memory (empty strings for string tensors). */
    if (failed(basalt_tensor_create(io.dtype, dims, (size_t)rank, &inputs[n_fed]), io.name)) { rc = 1; break; }
    names[n_fed++] = io.name;
  }
  for (size_t i = 0; i < n_out && rc == 0; ++i) {
    basalt_io_info io = {.struct_size = sizeof io};
    if (failed(basalt_session_output_info(session, i, &io), "reading output metadata")) rc = 1;
    else print_info("output", &io);
  }
  if (rc) goto done;

  if (failed(basalt_session_run(session, NULL, names, (const basalt_tensor* const*)inputs, n_fed, NULL, outputs, n_out),
             "running the model")) {
    rc = 1;
    goto done;
  }
  for (size_t i = 0; i < n_out; ++i) {
    basalt_io_info io = {.struct_size = sizeof io};
    basalt_status_destroy(basalt_session_output_info(session, i, &io));
    if (!outputs[i]) {
      printf("output %s: none (empty optional)\n", io.name);
      continue;
    }
    const int64_t* shape = basalt_tensor_shape(outputs[i]);
    printf("output %s: %s [", io.name, basalt_dtype_name(basalt_tensor_dtype(outputs[i])));
    for (size_t d = 0; d < basalt_tensor_rank(outputs[i]); ++d) printf(d ? ",%" PRId64 : "%" PRId64, shape[d]);
    printf("]");
    if (basalt_tensor_dtype(outputs[i]) == BASALT_DTYPE_FLOAT && basalt_tensor_element_count(outputs[i]) > 0)
      printf(" first=%g", (double)((const float*)basalt_tensor_data(outputs[i]))[0]);
    printf("\n");
  }

done:
  for (size_t i = 0; inputs && i < n_fed; ++i) basalt_tensor_destroy(inputs[i]);
  for (size_t i = 0; outputs && i < n_out; ++i) basalt_tensor_destroy(outputs[i]);
  free(names);
  free(inputs);
  free(outputs);
  basalt_session_destroy(session);
  return rc;
}
