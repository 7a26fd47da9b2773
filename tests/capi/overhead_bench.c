/* overhead_bench: per-call time of basalt_session_run and basalt_session_run_into on a model with
 * one float input and one float output, 1 thread. scripts/bench_python_overhead.py runs it beside
 * the Python API in the same process tree and reports the ratios.
 *
 *   basalt_capi_overhead MODEL.onnx INPUT OUTPUT N ITERS     (input and output are float[1, N])
 *
 * Prints one JSON object: {"run_us": ..., "run_into_us": ...} (median of 5 rounds of ITERS calls). */
#define _POSIX_C_SOURCE 199309L
#include <basalt/c_api.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int check(basalt_status* st, const char* what) {
  if (!st) return 0;
  fprintf(stderr, "error: %s: %s\n", what, basalt_status_message(st));
  basalt_status_destroy(st);
  return 1;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: %s MODEL INPUT OUTPUT N ITERS\n", argv[0]);
    return 2;
  }
  const char* in_name = argv[2];
  const char* out_name = argv[3];
  int64_t n = atoll(argv[4]);
  long iters = atol(argv[5]);
  if (n <= 0 || iters <= 0) return 2;
  basalt_session_options o = BASALT_SESSION_OPTIONS_INIT;
  o.threads = 1;
  basalt_session* s = NULL;
  if (check(basalt_session_create_from_path(argv[1], &o, &s), "load")) return 1;
  int64_t shape[2] = {1, n};
  float* x = calloc((size_t)n, sizeof(float));
  float* y = calloc((size_t)n, sizeof(float));
  basalt_tensor *tx = NULL, *ty = NULL;
  if (check(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 2, x, (size_t)n * 4, &tx), "input") ||
      check(basalt_tensor_create_view(BASALT_DTYPE_FLOAT, shape, 2, y, (size_t)n * 4, &ty), "output"))
    return 1;
  const basalt_tensor* ins[1] = {tx};
  const char* in_names[1] = {in_name};
  const char* out_names[1] = {out_name};
  double run_us[5], into_us[5];
  for (int round = 0; round < 5; ++round) {
    double t0 = now_us();
    for (long i = 0; i < iters; ++i) {
      basalt_tensor* out = NULL;
      if (check(basalt_session_run(s, NULL, in_names, ins, 1, out_names, &out, 1), "run")) return 1;
      basalt_tensor_destroy(out);
    }
    double t1 = now_us();
    for (long i = 0; i < iters; ++i) {
      basalt_tensor* outs[1] = {ty};
      if (check(basalt_session_run_into(s, NULL, in_names, ins, 1, out_names, outs, 1), "run_into")) return 1;
    }
    double t2 = now_us();
    run_us[round] = (t1 - t0) / (double)iters;
    into_us[round] = (t2 - t1) / (double)iters;
  }
  qsort(run_us, 5, sizeof(double), cmp);
  qsort(into_us, 5, sizeof(double), cmp);
  printf("{\"run_us\": %.3f, \"run_into_us\": %.3f}\n", run_us[2], into_us[2]);
  basalt_tensor_destroy(tx);
  basalt_tensor_destroy(ty);
  basalt_session_destroy(s);
  free(x);
  free(y);
  return 0;
}
