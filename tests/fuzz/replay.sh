#!/usr/bin/env bash
# Replays every saved fuzz input (tests/fuzz/regressions/<target>/) and a sample of the seed
# corpus through the replay binaries of BUILD (basalt_fuzz_replay_<target>): none may crash.
# Ends with "N passed, N failed". usage: tests/fuzz/replay.sh BUILD_DIR
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$1
pass=0; fail=0
for t in load run external serve; do
  bin="$BUILD/basalt_fuzz_replay_$t"
  if [ ! -x "$bin" ]; then echo "FAIL $t: $bin not built"; fail=$((fail + 1)); continue; fi
  out=$("$bin" "$HERE/regressions/$t" 2>&1); rc=$?
  n=$(echo "$out" | grep -oE '^[0-9]+ passed' | grep -oE '[0-9]+')
  if [ "$rc" -eq 0 ] && [ -n "$n" ]; then echo "PASS $t: $n inputs"; pass=$((pass + n))
  else echo "$out" | tail -20; echo "FAIL $t (exit $rc)"; fail=$((fail + 1)); fi
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
