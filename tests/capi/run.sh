#!/usr/bin/env bash
# The C API suite: generates its models, runs tests/capi/capi_test.c, then the C example
# (examples/c/run_model.c) on a conformance model and on a model with a symbolic dim.
# usage: tests/capi/run.sh [BUILD_DIR]   (default build). Last line: "N passed, N failed".
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
TEST_ADD=/usr/share/libonnx-testdata/data/node/test_add/model.onnx

pass=0; fail=0
if ! /usr/bin/python3 "$ROOT/tests/capi/make_models.py" "$TMP/models"; then
  echo "FAIL: could not generate the test models"; echo "0 passed, 1 failed"; exit 1
fi

"$BUILD/basalt_capi_test" "$TMP/models" "$TEST_ADD" | tee "$TMP/capi.log"
rc=${PIPESTATUS[0]}
line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$TMP/capi.log" | tail -1)
if [ -n "$line" ]; then
  pass=$((pass + $(echo "$line" | cut -d' ' -f1))); fail=$((fail + $(echo "$line" | cut -d' ' -f3)))
fi
if [ -z "$line" ] || { [ "$rc" -ne 0 ] && [ "$fail" -eq 0 ]; }; then
  echo "FAIL: basalt_capi_test exited with $rc"; fail=$((fail + 1))
fi

# example CASE EXPECTED_RC ARGS...: runs the C example and checks its exit code.
example() {
  local name=$1 want=$2; shift 2
  echo "=== example $name: run_model_c $*"
  "$BUILD/run_model_c" "$@"
  local got=$?
  if [ "$got" -eq "$want" ]; then pass=$((pass + 1)); echo "[  OK  ] example $name"
  else fail=$((fail + 1)); echo "[ FAIL ] example $name: exit code $got, expected $want"; fi
}
example test_add 0 "$TEST_ADD"
example symbolic_default_dims 0 "$TMP/models/symbolic.onnx"
example symbolic_given_shape 0 "$TMP/models/symbolic.onnx" X=7x3
example wrong_shape 1 "$TMP/models/symbolic.onnx" X=7x4
example missing_file 1 "$TMP/does_not_exist.onnx"
example no_arguments 2

# The README's C++ quick start (examples/cpp/quickstart.cpp) on the same models.
cpp_example() {
  local name=$1 want=$2 expect=$3; shift 3
  echo "=== cpp example $name: quickstart_cpp $*"
  local out; out=$("$BUILD/quickstart_cpp" "$@" 2>&1)
  local got=$?
  echo "$out"
  if [ "$got" -eq "$want" ] && echo "$out" | grep -q -- "$expect"; then pass=$((pass + 1)); echo "[  OK  ] cpp example $name"
  else fail=$((fail + 1)); echo "[ FAIL ] cpp example $name: exit code $got (expected $want), output lacks '$expect'"; fi
}
cpp_example symbolic_given_shape 0 "\[7,3\]" "$TMP/models/symbolic.onnx" 7x3
cpp_example wrong_shape 1 "error: .*X" "$TMP/models/symbolic.onnx" 7x4
cpp_example bad_dims 1 "is not a dim" "$TMP/models/symbolic.onnx" 7xq
cpp_example missing_file 1 "error:" "$TMP/does_not_exist.onnx" 1
cpp_example no_arguments 2 "usage"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
