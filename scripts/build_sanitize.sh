#!/usr/bin/env bash
# Configures and builds the one sanitizer build, build-fuzz/: clang-14, -O1 with line tables only
# (stack traces keep file:line without the cost of full debug info), ASan + UBSan
# (-DBASALT_SANITIZE=ON) and libFuzzer coverage (-DBASALT_FUZZ=ON). Both `make test-sanitize`
# (scripts/test_sanitize.sh: CLI, unit tests, replayers) and `make fuzz` (scripts/fuzz.sh: the
# libFuzzer targets) build their targets here, so the instrumented library is compiled once.
# usage: scripts/build_sanitize.sh TARGET...   (prints the build dir's path last; exit 1 on failure)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
B=${BASALT_SANITIZE_BUILD:-$ROOT/build-fuzz}
CC=${CC_FUZZ:-clang-14}
CXX=${CXX_FUZZ:-clang++-14}
if ! command -v "$CXX" >/dev/null; then
  echo "sanitize build: $CXX not found (scripts/setup.sh installs clang-14 libclang-rt-14-dev)" >&2
  exit 1
fi
CC=$CC CXX=$CXX cmake -S "$ROOT" -B "$B" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DBASALT_FUZZ=ON -DBASALT_SANITIZE=ON >/dev/null || exit 1
ninja -C "$B" -j "${JOBS:-$(nproc)}" "$@" >&2 || exit 1
echo "$B"
