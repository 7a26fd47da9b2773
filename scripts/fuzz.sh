#!/usr/bin/env bash
# Fuzzes basalt with libFuzzer for SECONDS in all, split over the four targets in tests/fuzz/
# (load: bytes -> Session, run: small models on random shapes/values, external: the
# external-data resolver, serve: the server's REST and gRPC request decoders), built in build-fuzz/ (scripts/build_sanitize.sh: clang-14, ASan + UBSan,
# coverage).
# Seeds: the Debian conformance models. Crashes land in build-fuzz/crashes/<target>/: each one
# is a bug to fix, then copied to tests/fuzz/regressions/<target>/ (replayed by `make test`).
# Ends with "N passed, N failed" (one test per target: failed = it found a crash).
# usage: scripts/fuzz.sh [SECONDS]   (default 60; `make fuzz FUZZ_SECONDS=3600` for a long run)
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECS=${1:-60}
B=$(bash "$ROOT/scripts/build_sanitize.sh" fuzz_load fuzz_run fuzz_external fuzz_serve | tail -1)
[ -d "$B" ] || { echo "0 passed, 1 failed"; exit 1; }

SEEDS=/usr/share/libonnx-testdata/data/node
mkdir -p "$B/seeds/load"
if [ -d "$SEEDS" ] && [ -z "$(ls -A "$B/seeds/load")" ]; then
  for d in "$SEEDS"/*/; do cp "$d/model.onnx" "$B/seeds/load/$(basename "$d").onnx" 2>/dev/null; done
fi
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=0:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
per=$(( SECS / 4 )); [ "$per" -ge 1 ] || per=1
pass=0; fail=0
for t in load run external serve; do
  mkdir -p "$B/corpus/$t" "$B/crashes/$t"
  seeds=(); [ "$t" = load ] && seeds=("$B/seeds/load")
  # First the saved regressions under ASan + UBSan (the sanitizer check of these inputs in CI).
  if ! "$B/fuzz_$t" -runs=0 -timeout=10 -rss_limit_mb=2048 "$ROOT/tests/fuzz/regressions/$t" >"$B/replay_$t.log" 2>&1; then
    tail -20 "$B/replay_$t.log"; echo "FAIL fuzz_$t: a saved regression input fails under ASan/UBSan"
    fail=$((fail + 1)); continue
  fi
  echo "--- fuzz_$t for ${per}s (corpus before: $(ls "$B/corpus/$t" | wc -l) inputs, seeds: ${#seeds[@]} dirs)"
  t0=$SECONDS
  # A fixed seed (FUZZ_SEED, default 1) makes the short CI run reproducible; `make fuzz` runs pass
  # FUZZ_SEED=0 for a random one.
  "$B/fuzz_$t" "$B/corpus/$t" "${seeds[@]}" -seed="${FUZZ_SEED:-1}" -max_total_time="$per" -timeout=10 -rss_limit_mb=2048 \
    -max_len=65536 -print_final_stats=1 -artifact_prefix="$B/crashes/$t/" 2>&1 | grep -E '^(#[0-9]+ +DONE|==|SUMMARY|stat::number_of_executed_units|artifact_prefix|Test unit written|.*ERROR)' 
  rc=${PIPESTATUS[0]}
  echo "fuzz_$t: ran $((SECONDS - t0)) s, corpus now $(ls "$B/corpus/$t" | wc -l) inputs"
  if [ "$rc" -eq 0 ]; then echo "PASS fuzz_$t"; pass=$((pass + 1))
  else echo "FAIL fuzz_$t (exit $rc): crash input in $B/crashes/$t/"; fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
