#!/usr/bin/env bash
# ASan + UBSan build (build-sanitize/, -O1 -g, -DBASALT_SANITIZE=ON) of the CLI, the unit tests
# and the fuzz replayers, then: unit tests, bad-input tests, the Debian conformance suite and the
# fuzz regressions. Any sanitizer report fails the run. Ends with "N passed, N failed".
# usage: scripts/test_sanitize.sh [BUILD_DIR]   (`make test-sanitize`)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$ROOT/build-sanitize}
cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g" \
  -DBASALT_SANITIZE=ON >/dev/null || { echo "0 passed, 1 failed"; exit 1; }
ninja -C "$B" -j "${JOBS:-$(nproc)}" basalt basalt_tests basalt_fuzz_replay_load basalt_fuzz_replay_run \
  basalt_fuzz_replay_external || { echo "0 passed, 1 failed"; exit 1; }
# Leak checking stays off: sessions cached in function statics (fuzz replayers) are not leaks.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
BASALT_SUITES="unit cli-bad-input conformance-debian fuzz-regressions" \
  bash "$ROOT/scripts/run_tests.sh" "$B"
