#!/usr/bin/env python3
"""Acceptance (e) of issue 4: `basalt plan` predicts what `basalt run` then uses.

For each model (a missing one is a failure: scripts/prepare_models.sh fetches the real ones and
generates the others) and input shape:
  - `basalt plan --json` gives arena_bytes and peak_bytes without running;
  - `basalt run` with the same shapes reports the arena it used and how many planned tensors had
    to come from the heap instead (a wrong prediction);
  - the run's arena must equal the planned one, no planned tensor may fall back to the heap, and
    the bytes kernels took from the heap outside the plan must stay under 5% of the arena;
  - the run's resident-memory growth over its level after load must stay within the plan's run
    memory (arena + inputs + outputs) plus the weights (in-place weights are file pages faulted in
    on first use) + 5% + a fixed 24 MB for code pages, thread stacks and allocator slack, and the
    process's peak RSS within the plan's peak + 5% + 32 MB. (Resident memory can be lower than
    planned: untouched arena pages.)
  - `basalt plan --memory-limit` below the peak exits 1 and says so.
Ends with "N passed, N failed".
usage: plan_vs_run.py BASALT
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CASES = [
    # (model path relative to the repo, shape args, extra run args)
    ("models/generated/mobilenet_v2.onnx", [], []),
    ("models/generated/bert_mini.onnx", ["--dim", "batch=1", "--dim", "sequence=128"], ["--fill", "token_type_ids=zeros", "--fill", "input_ids=int:0,1000", "--fill", "attention_mask=const:1"]),
    ("models/ppocr_v4_det.onnx", ["--shape", "x=1x3x640x640"], []),
]

passed = failed = 0


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
        print("  ok   " + what)
    else:
        failed += 1
        print("  FAIL " + what)


def main():
    basalt = sys.argv[1]
    for rel, shape_args, run_args in CASES:
        path = os.path.join(ROOT, rel)
        if not os.path.exists(path):
            check(False, "%s is present (scripts/prepare_models.sh makes it)" % rel)
            continue
        print(rel, " ".join(shape_args))
        p = subprocess.run([basalt, "plan", path, "--threads", "2", "--json"] + shape_args, capture_output=True, text=True)
        if p.returncode != 0:
            check(False, "basalt plan exits 0: " + p.stderr.strip())
            continue
        plan = json.loads(p.stdout)
        for k in ("arena_bytes", "weights_bytes", "packed_weights_bytes", "workspace_bytes", "peak_bytes"):
            check(k in plan, "plan JSON has " + k)
        r = subprocess.run([basalt, "run", path, "--threads", "2"] + shape_args + run_args, capture_output=True, text=True)
        if r.returncode != 0:
            check(False, "basalt run exits 0: " + r.stderr.strip())
            continue
        m = re.search(r"memory: arena (\d+) bytes \(planned\), heap fallbacks (\d+), unplanned heap (\d+) bytes", r.stdout)
        rss = re.search(r"RSS after load ([\d.]+) MB, peak RSS ([\d.]+) MB", r.stdout)
        if not m or not rss:
            check(False, "run prints its memory line:\n" + r.stdout)
            continue
        arena, fallbacks, unplanned = int(m.group(1)), int(m.group(2)), int(m.group(3))
        check(arena == plan["arena_bytes"], "run arena %d == planned %d" % (arena, plan["arena_bytes"]))
        check(fallbacks == 0, "no planned tensor came from the heap (%d)" % fallbacks)
        check(unplanned <= 0.05 * max(arena, 1), "unplanned heap %d <= 5%% of the arena" % unplanned)
        run_mem = plan["arena_bytes"] + plan["inputs_bytes"] + plan["outputs_bytes"]
        growth = (float(rss.group(2)) - float(rss.group(1))) * 1024 * 1024
        bound = run_mem * 1.05 + 24 * 1024 * 1024
        print("    plan: arena %.1f MB, run memory %.1f MB, peak %.1f MB; run: RSS growth %.1f MB" %
              (arena / 2**20, run_mem / 2**20, plan["peak_bytes"] / 2**20, growth / 2**20))
        # In-place weights are file pages faulted in on first use, so RSS after load does not
        # hold them yet: the run's growth may include them. Bound it by the plan's run memory plus
        # those weights, and the whole process peak by the plan's peak (weights included).
        lazy = plan["weights_bytes"]
        check(growth <= bound + lazy, "RSS growth %.1f MB <= planned run memory + weights paged in on use + 5%% + 24 MB = %.1f MB"
              % (growth / 2**20, (bound + lazy) / 2**20))
        peak = float(rss.group(2)) * 1024 * 1024
        # 32 MB fixed: the process itself (code and libraries, ~15 MB here), thread stacks, and the
        # moment at load when a weight and its packed copy both exist.
        pbound = plan["peak_bytes"] * 1.05 + 32 * 1024 * 1024
        check(peak <= pbound, "peak RSS %.1f MB <= planned peak + 5%% + 32 MB = %.1f MB" % (peak / 2**20, pbound / 2**20))
        lim = subprocess.run([basalt, "plan", path, "--threads", "2", "--memory-limit", str(plan["peak_bytes"] - 1)] + shape_args,
                             capture_output=True, text=True)
        check(lim.returncode == 1 and "memory limit" in lim.stderr, "plan over --memory-limit exits 1 naming the limit")
        rl = subprocess.run([basalt, "run", path, "--threads", "2", "--memory-limit", str(plan["peak_bytes"] - 1)] + shape_args + run_args,
                            capture_output=True, text=True)
        check(rl.returncode == 1 and str(plan["peak_bytes"]) in rl.stderr, "run over --memory-limit fails naming the bytes needed")
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
