#!/usr/bin/env bash
# The sanitizer suites (issue 9): the ASan + UBSan build (build-fuzz/, see scripts/build_sanitize.sh)
# of the CLI, the unit tests and the fuzz replayers, then, on it: the unit tests, the bad-input
# tests, the Debian conformance suite, the fuzz regressions and the model parity suite (every
# real and generated model at its default shape, outputs against ONNX Runtime). The AVX2 kernels
# are sanitized by unit (the kernel tests loop over every ISA) and unit-avx2 (the op-level tests);
# parity-avx2 runs in the plain build only, which keeps CI near its time budget. Any sanitizer
# report aborts the process and so fails its test. Ends with "N passed, N failed".
# usage: scripts/test_sanitize.sh   (`make test-sanitize`; `make test` runs it as suite "sanitize")
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=$(bash "$ROOT/scripts/build_sanitize.sh" basalt basalt_tests basalt_fuzz_replay_load basalt_fuzz_replay_run \
  basalt_fuzz_replay_external basalt_fuzz_replay_serve | tail -1)
[ -d "$B" ] || { echo "0 passed, 1 failed"; exit 1; }
# Leak checking stays off: sessions cached in function statics (fuzz replayers) are not leaks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
BASALT_SUITES="unit unit-avx2 cli-bad-input conformance-debian fuzz-regressions parity" PARITY_ARGS="--default-shapes" \
  bash "$ROOT/scripts/run_tests.sh" "$B"
