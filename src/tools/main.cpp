// The `basalt` command-line tool: run, profile, inspect, conformance.
//
// Exit codes: 0 success; 1 the model or its run failed (a one-line error on stderr);
// 2 bad command line. `conformance` exits 1 when any test failed.
#include <basalt/basalt.hpp>

#include "graph/model.hpp"
#include "tools/cli.hpp"

#include <cstdio>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

using namespace basalt;

static void usage(std::FILE* f) {
  std::fprintf(f,
               "usage: basalt <command> [options]\n"
               "commands:\n"
               "  run MODEL [--input NAME=FILE.npy ...] [--shape NAME=1x3x224x224 ...] [--dim SYMBOL=VALUE ...]\n"
               "            [--fill NAME=zeros|const:V|int:LO,HI ...] [--threads N] [--output-dir DIR] [--profile TRACE.json]\n"
               "            [--memory-limit BYTES] [--no-arena] [--no-winograd] [--dynamic-pool-bytes BYTES]\n"
               "  plan MODEL [--shape NAME=DIMS ...] [--dim SYMBOL=VALUE ...] [--threads N] [--memory-limit BYTES]\n"
               "            [--no-winograd] [--json]\n"
               "  profile MODEL [same input options as run] [--iters K] [--warmup W] [--threads N] [--top N] [--profile TRACE.json]\n"
               "  bench MODEL [same input options as run] [--threads N] [--warmup W] [--iters K] [--concurrency C] [--json]\n"
               "  perf shapes MODEL --input NAME --sizes HxW,HxW,... [--repeat R] [--threads N] [--plan-cache-entries N]\n"
               "  perf switch --cycles K [--threads N] MODEL[:NAME=DIMS[,NAME=DIMS...]] ...\n"
               "  inspect MODEL\n"
               "  optimize MODEL [--level none|basic|extended|all] [--standard-ops] [--no-winograd] [-o OUT.onnx]\n"
               "            [--report] [--json]\n"
               "            [--check [--tol T] [same input options as run]]\n"
               "  quantize MODEL -o OUT.onnx [--dynamic] [--calibration DIR] [--samples N] [--method minmax|percentile]\n"
               "            [--percentile P] [--per-tensor] [--report] [same input options as run]\n"
               "  serve --model-repository DIR [--http-port 8000] [--grpc-port 8001] [--host 127.0.0.1] [--no-load]\n"
               "            [--model NAME ...] [--threads N] [--memory-budget BYTES] [--max-body-bytes B]\n"
               "            [--max-connections N] [--tls-cert PEM --tls-key PEM] [--token-file F] [--access-log]\n"
               "  conformance PATH... [--json FILE] [--expected-failures FILE] [--filter SUBSTR]\n"
               "            [--run-expected] [--timeout SEC] [--no-fork] [--verbose]\n");
}

int main(int argc, char** argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  std::string cmd = argv[1];
  std::vector<std::string> args(argv + 2, argv + argc);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    usage(stdout);
    return 0;
  }
  try {
    if (cmd == "run") return cmd_run(args);
    if (cmd == "plan") return cmd_plan(args);
    if (cmd == "profile") return cmd_profile(args);
    if (cmd == "bench") return cmd_bench(args);
    if (cmd == "perf") return cmd_perf(args);
    if (cmd == "inspect") return cmd_inspect(args);
    if (cmd == "optimize") return cmd_optimize(args);
    if (cmd == "serve") return cmd_serve(args);
    if (cmd == "quantize") return cmd_quantize(args);
    if (cmd == "conformance") return cmd_conformance(args, argv[0]);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "basalt %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "basalt: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "basalt: error: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "basalt: unknown command '%s' (try 'basalt --help')\n", cmd.c_str());
  return 2;
}
