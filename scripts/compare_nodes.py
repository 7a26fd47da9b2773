#!/usr/bin/env python3
"""Where basalt and ONNX Runtime 1.30 spend a run, node by node (issue 5: finding the slow kernels).

Runs `basalt profile --profile` and `bench_ort.js bench --keep-profile` on the same .npy inputs and
threads (fresh processes, ROUNDS times alternating, each side's per-node mean over its timed runs,
the lowest of the rounds), then sums them per node class: convs by weight shape and input image
size (channel counts rounded up to 16,
as ORT pads them), other ops by op and output image size (names differ between the two: ORT renames the nodes
its layout pass rewrites, and unnamed nodes get each runtime's own names). Prints the classes both
ran, worst for basalt first, with the ratio ORT/basalt (> 1: basalt is faster), then the classes only
one side ran (layout reorders, unfused ops).

usage: compare_nodes.py --basalt build/basalt --model resnet50 [--threads 2] [--iters 20] [--rounds 2]
                        [--top 30] [--quick]
--quick: a smoke run (SqueezeNet, 1 thread, 3 iters, 1 round) that checks both profiles were read and
every conv class matched; it ends with "N passed, N failed" like the test suites.
Models and inputs are those of bench_compare.py (run scripts/bench.sh once to fetch/generate them).
"""
import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compare as bc  # noqa: E402

WARMUP = 3  # warm-up runs of each side, after the first run; neither is counted


def parse_dims(t):
    """'float32[1,64,56,56]' -> [1, 64, 56, 56] ([] for a scalar or anything else)."""
    if "[" not in t:
        return []
    body = t[t.index("[") + 1: t.rindex("]")]
    return [int(d) if d.lstrip("-").isdigit() else d for d in body.split(",") if d]


def node_class(op, ins, out):
    """A name both runtimes give the same node: convs by weight shape and input image size (basalt's
    blocked [N, CB, H, W, 16] and ORT's [N, C, H, W] both hold H, W at 2 and 3); other ops by op
    (without basalt's Nchwc / Fused prefixes) and output image size."""
    base = op.split(":")[-1]
    for pre in ("Nchwc", "Fused"):
        if base.startswith(pre) and len(base) > len(pre):
            base = base[len(pre):]
    if base == "Conv" and len(ins) > 1 and len(ins[0]) >= 4 and len(ins[1]) >= 2:
        # ORT's layout pass pads channel counts to its block (1000 -> 1008): both sides are named
        # with counts above 8 rounded up to 16
        w = [(d + 15) // 16 * 16 if isinstance(d, int) and d > 8 else d for d in ins[1][:2]] + ins[1][2:]
        return f"Conv W{'x'.join(map(str, w))} @{ins[0][2]}x{ins[0][3]}"
    if base == "MatMul" and ins and ins[0] and 0 < len(out) <= 3:
        # by K (the first input's last dim) too: BERT's projections share their output shape. (ORT's
        # profile leaves out prepacked weights, so K is taken from the activation on both sides.)
        return f"MatMul K{ins[0][-1]} -> {'x'.join(map(str, out))}"
    hw = f" @{out[2]}x{out[3]}" if len(out) >= 4 else (f" -> {'x'.join(map(str, out))}" if out else "")
    return base + hw


def basalt_nodes(args, model, opts, folder, threads):
    trace = os.path.join(folder, "basalt_trace.json")
    cmd = [args.basalt, "profile", model, *opts, "--threads", str(threads), "--warmup", str(WARMUP),
           "--iters", str(args.iters), "--profile", trace, "--top", "1"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
    with open(trace) as f:
        ev = json.load(f)
    ev = ev["traceEvents"] if isinstance(ev, dict) else ev
    runs = {e["args"]["run"] for e in ev if e.get("cat") == "node" and "parent" not in e.get("args", {})}
    total = collections.defaultdict(float)
    for e in ev:
        a = e.get("args", {})
        if e.get("cat") != "node" or "parent" in a:
            continue
        dims = [parse_dims(t) for t in a.get("input_shapes", [])]
        total[node_class(a["op"], dims, parse_dims((a.get("output_shapes") or [""])[0]))] += e["dur"] / 1000.0
    n = max(1, len(runs))
    return {k: v / n for k, v in total.items()}


def ort_nodes(args, model, folder, threads):
    prof = os.path.join(folder, "ort_profile.json")
    cmd = [*bc.node_cmd(), "bench", model, "--inputs", folder, "--threads", str(threads), "--warmup",
           str(WARMUP), "--iters", str(args.iters), "--keep-profile", prof]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, timeout=600)
    with open(prof) as f:
        ev = json.load(f)
    runs = sorted(e["ts"] for e in ev if e.get("name") == "model_run")
    skip = 1 + WARMUP  # the first run and the warm-ups
    first_timed = runs[skip] if len(runs) > skip else 0
    total = collections.defaultdict(float)
    nruns = max(1, len(runs) - skip)
    for e in ev:
        if e.get("cat") != "Node" or not e.get("name", "").endswith("_kernel_time") or e["ts"] < first_timed:
            continue
        a = e.get("args", {})
        dims = [list(next(iter(t.values()))) for t in a.get("input_type_shape", [])]
        out = [list(next(iter(t.values()))) for t in a.get("output_type_shape", [])[:1]]
        total[node_class(a.get("op_name", "?"), dims, out[0] if out else [])] += e["dur"] / 1000.0
    return {k: v / nruns for k, v in total.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--basalt", required=True)
    ap.add_argument("--model", default="resnet50", help="an id of bench_compare.py's MODELS")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.model, args.threads, args.iters, args.rounds = "squeezenet", 1, 3, 1
    spec = {m[0]: m for m in bc.MODELS}.get(args.model)
    if not spec:
        sys.exit(f"compare_nodes: unknown model {args.model} (one of {', '.join(m[0] for m in bc.MODELS)})")
    _, label, model, inputs = spec
    with tempfile.TemporaryDirectory() as folder:
        opts = bc.make_inputs(inputs, folder, 1)
        best_b, best_o = None, None
        for r in range(args.rounds):
            order = [0, 1] if r % 2 == 0 else [1, 0]
            for side in order:
                if side == 0:
                    t = basalt_nodes(args, model, opts, folder, args.threads)
                    best_b = t if best_b is None else {k: min(v, best_b.get(k, v)) for k, v in t.items()}
                else:
                    t = ort_nodes(args, model, folder, args.threads)
                    best_o = t if best_o is None else {k: min(v, best_o.get(k, v)) for k, v in t.items()}
    both = sorted(set(best_b) & set(best_o))
    print(f"{label}, {args.threads} thread(s), ms per run by node class (mean over {args.iters} runs, best of "
          f"{args.rounds} rounds)")
    print(f"{'basalt':>9} {'ORT':>9} {'ORT/b':>6}  class")
    rows = sorted(both, key=lambda k: -(best_b[k] - best_o[k]))
    for k in rows[: args.top]:
        b, o = best_b[k], best_o[k]
        print(f"{b:9.3f} {o:9.3f} {o / b if b else 0:6.2f}  {k}")
    sb, so = sum(best_b[k] for k in both), sum(best_o[k] for k in both)
    print(f"{sb:9.3f} {so:9.3f} {so / sb if sb else 0:6.2f}  all classes both ran ({len(both)})")
    for side, best, other in (("basalt", best_b, best_o), ("ORT", best_o, best_b)):
        only = {k: v for k, v in best.items() if k not in other}
        print(f"only {side}: {sum(only.values()):.3f} ms: " +
              ", ".join(f"{k} {v:.3f}" for k, v in sorted(only.items(), key=lambda kv: -kv[1])))
    tb, to = sum(best_b.values()), sum(best_o.values())
    print(f"{tb:9.3f} {to:9.3f} {to / tb if tb else 0:6.2f}  all nodes")
    if args.quick:
        checks = [tb > 0 and to > 0, sum(k.startswith("Conv ") for k in both) >= 10,
                  not any(k.startswith("Conv ") for k in set(best_b) ^ set(best_o))]
        print(f"{sum(checks)} passed, {len(checks) - sum(checks)} failed")
        return 0 if all(checks) else 1
    return 0

if __name__ == "__main__":
    sys.exit(main())
