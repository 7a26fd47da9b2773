#!/usr/bin/env python3
"""basalt vs ONNX Runtime 1.30, side by side on the same machine, inputs and threads (issues 4, 5).

Speed (the benchmark set of issue 5): for each model and thread count, `basalt bench --json` and
`node scripts/bench_ort.js bench` run in turn, ROUNDS times, alternating which goes first, each in
a fresh process on the same .npy inputs (written here with numpy, seeded). A runtime's figure is
the best (lowest) of its per-round medians; ORT's per-run time is taken from its own profiler.
Prints per model: median ms of each, the speed ratio ORT/basalt (> 1: basalt is faster), session
creation and peak RSS of each; then the geometric mean of the ratios.

Memory (issue 4), with `basalt perf` vs `bench_ort.js shapes|switch`:
- shapes: PaddleOCR v4 det over 40 sizes (320..1280, multiples of 32), one session, 2 threads:
  peak RSS, RSS after release vs before load, first run at a new size vs a repeat;
- switch: PaddleOCR det/rec/cls loaded, run and released in turn, 10 cycles, 2 threads.

Stability (issue 5), only when asked for (`--scenarios stability`, default model ResNet-50): at 2
threads, p99/p50 on the idle machine, and the slowdown when another process keeps one core busy,
for basalt, ORT with spinning on (its default) and ORT with spinning off.

usage: bench_compare.py --basalt build/basalt [--threads 1,2] [--iters 20] [--warmup 3] [--rounds 2]
                        [--models id,id] [--scenarios speed,shapes,switch,stability] [--quick] [--json OUT]
--quick: a smoke run (SqueezeNet, 1 thread, 3 iters, 1 round, no memory scenarios) that checks
the whole pipeline works; it ends with "N passed, N failed" like the test suites.
Run it through scripts/bench.sh, which installs ORT and fetches/generates the models first.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GEN = os.path.join(REPO, "models", "generated")
REAL = os.path.join(REPO, "models")
IMG = {"dtype": "float32", "fill": "uniform:-1,1"}


def img(name, h=224, w=224):
    return {name: dict(IMG, shape=[1, 3, h, w])}


def bert_inputs(token_type):
    d = {"input_ids": {"dtype": "int64", "shape": [1, 128], "fill": "int:0,30522"},
         "attention_mask": {"dtype": "int64", "shape": [1, 128], "fill": "const:1"}}
    if token_type:
        d["token_type_ids"] = {"dtype": "int64", "shape": [1, 128], "fill": "zeros"}
    return d


# id, label, file, inputs (name -> dtype, shape, fill)
MODELS = [
    ("resnet50", "ResNet-50", os.path.join(GEN, "light_resnet50.onnx"), img("gpu_0/data_0")),
    ("mobilenet_v2", "MobileNetV2", os.path.join(GEN, "mobilenet_v2.onnx"), img("input")),
    ("squeezenet", "SqueezeNet", os.path.join(GEN, "light_squeezenet.onnx"), img("data_0")),
    ("densenet121", "DenseNet-121", os.path.join(GEN, "light_densenet121.onnx"), img("data_0")),
    ("inception_v1", "Inception v1", os.path.join(GEN, "light_inception_v1.onnx"), img("data_0")),
    ("shufflenet", "ShuffleNet", os.path.join(GEN, "light_shufflenet.onnx"), img("gpu_0/data_0")),
    ("bert_base", "BERT-base, seq 128", os.path.join(GEN, "bert_base.onnx"), bert_inputs(True)),
    ("bert_mini", "BERT-mini, seq 128", os.path.join(GEN, "bert_mini.onnx"), bert_inputs(False)),
    ("unet", "UNet-lite 256x256", os.path.join(GEN, "unet.onnx"), img("image", 256, 256)),
    ("ppocr_det", "PaddleOCR det 640x640", os.path.join(REAL, "ppocr_v4_det.onnx"), img("x", 640, 640)),
    ("ppocr_rec", "PaddleOCR rec 48x320", os.path.join(REAL, "ppocr_v4_rec.onnx"), img("x", 48, 320)),
    ("silero_vad", "Silero VAD v5 (16k, 512)", os.path.join(REAL, "silero_vad_v5.onnx"),
     {"input": {"dtype": "float32", "shape": [1, 512], "fill": "uniform:-0.5,0.5"},
      "state": {"dtype": "float32", "shape": [2, 1, 128], "fill": "zeros"},
      "sr": {"dtype": "int64", "shape": [], "fill": "const:16000"}}),
]


def log(*a):
    print(*a, flush=True)


def make_inputs(spec, folder, seed):
    """Writes one .npy per input plus inputs.json; returns basalt's --input options."""
    rng = np.random.default_rng(seed)
    os.makedirs(folder, exist_ok=True)
    listing, opts = [], []
    for k, (name, s) in enumerate(spec.items()):
        dt, shape, fill = np.dtype(s["dtype"]), s["shape"], s["fill"]
        if fill == "zeros":
            a = np.zeros(shape, dt)
        elif fill.startswith("const:"):
            a = np.full(shape, float(fill[6:])).astype(dt)
        elif fill.startswith("int:"):
            lo, hi = (int(v) for v in fill[4:].split(","))
            a = rng.integers(lo, hi, size=shape).astype(dt)
        else:
            lo, hi = (float(v) for v in fill[8:].split(","))
            a = rng.uniform(lo, hi, size=shape).astype(dt)
        f = os.path.join(folder, f"in{k}.npy")
        np.save(f, np.asarray(a))
        listing.append({"name": name, "file": f"in{k}.npy"})
        opts += ["--input", f"{name}={f}"]
    with open(os.path.join(folder, "inputs.json"), "w") as fh:
        json.dump(listing, fh)
    return opts


def run_json(cmd, timeout):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... exited {r.returncode}: {r.stderr.strip()[-400:]}")
    return [json.loads(l) for l in r.stdout.splitlines() if l.startswith("{")]


def node_cmd():
    return ["node", "--expose-gc", os.path.join(REPO, "scripts", "bench_ort.js")]


def speed(args, tmp):
    threads = [int(t) for t in args.threads.split(",")]
    want = set(args.models.split(",")) if args.models else None
    rows = []
    for mid, label, path, spec in MODELS:
        if want and mid not in want:
            continue
        if not os.path.exists(path):
            log(f"skip {label}: {path} is missing")
            continue
        folder = os.path.join(tmp, mid)
        bopts = make_inputs(spec, folder, seed=7)
        for t in threads:
            b_runs, o_runs = [], []
            for rnd in range(args.rounds):
                order = ("basalt", "ort") if rnd % 2 == 0 else ("ort", "basalt")
                for who in order:
                    if who == "basalt":
                        cmd = [args.basalt, "bench", path] + bopts + ["--threads", str(t), "--warmup", str(args.warmup),
                                                                     "--iters", str(args.iters), "--json"]
                        b_runs.append(run_json(cmd, args.timeout)[0])
                    else:
                        cmd = node_cmd() + ["bench", path, "--inputs", folder, "--threads", str(t),
                                            "--warmup", str(args.warmup), "--iters", str(args.iters)]
                        o_runs.append(run_json(cmd, args.timeout)[0])
            b = min(b_runs, key=lambda j: j["median_ms"])
            o = min(o_runs, key=lambda j: j["median_ms"])
            row = {"id": mid, "model": label, "threads": t, "basalt_ms": b["median_ms"], "ort_ms": o["median_ms"],
                   "ratio": o["median_ms"] / b["median_ms"], "basalt_p99_ms": b["p99_ms"], "ort_p99_ms": o["p99_ms"],
                   "basalt_first_ms": b["first_run_ms"], "ort_first_ms": o["first_run_ms"],
                   "basalt_create_ms": min(j["session_create_ms"] for j in b_runs),
                   "ort_create_ms": min(j["session_create_ms"] for j in o_runs),
                   "basalt_peak_mb": max(j["peak_rss_mb"] for j in b_runs),
                   "ort_peak_mb": max(j["peak_rss_mb"] for j in o_runs),
                   "ort_node_base_mb": o["rss_before_load_mb"], "ort_wall_ms": o["wall_median_ms"],
                   # basalt's pool saw another process wanting the cores during its best run (it then
                   # stops spinning and keeps workers off the caller's core): a sign that the machine
                   # was not idle while that row was measured
                   "basalt_busy_detections": b.get("pool_busy_detections", 0),
                   # the kernels basalt picked for this CPU (kernels/cpu.hpp)
                   "basalt_isa": b.get("isa"), "basalt_fma512_pipes": b.get("fma512_pipes")}
            rows.append(row)
            busy = f"  (pool saw a busy machine {row['basalt_busy_detections']}x)" if row["basalt_busy_detections"] else ""
            log(f"{label:28s} {t}t  basalt {row['basalt_ms']:9.3f} ms  ort {row['ort_ms']:9.3f} ms  "
                f"ort/basalt {row['ratio']:5.2f}x  create {row['basalt_create_ms']:7.1f} / {row['ort_create_ms']:7.1f} ms  "
                f"peak RSS {row['basalt_peak_mb']:6.1f} / {row['ort_peak_mb']:6.1f} MB{busy}")
    return rows


def print_speed_table(rows):
    threads = sorted({r["threads"] for r in rows})
    kinds = sorted({(r.get("basalt_isa"), r.get("basalt_fma512_pipes")) for r in rows}, key=str)
    log("\nbasalt's kernels: " + "; ".join(f"{i}, {p} 512-bit FMA pipe(s) per core" for i, p in kinds))
    log("| model | threads | basalt ms | ORT ms | ORT/basalt | create ms basalt / ORT | peak RSS MB basalt / ORT |")
    log("|---|---|---|---|---|---|---|")
    for r in rows:
        log(f"| {r['model']} | {r['threads']} | {r['basalt_ms']:.2f} | {r['ort_ms']:.2f} | {r['ratio']:.2f}x | "
            f"{r['basalt_create_ms']:.0f} / {r['ort_create_ms']:.0f} | {r['basalt_peak_mb']:.0f} / {r['ort_peak_mb']:.0f} |")
    for t in threads:
        rs = [r["ratio"] for r in rows if r["threads"] == t]
        if rs:
            g = math.exp(sum(math.log(x) for x in rs) / len(rs))
            log(f"geometric mean ORT/basalt at {t} thread(s): {g:.3f}x over {len(rs)} models "
                f"(> 1 means basalt is faster); slower than ORT on {sum(x < 1 for x in rs)}")


def busy_core():
    """Starts a process that keeps one core busy (a pure-Python spin loop) until killed."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def stability(args, tmp):
    """Issue 5's stability targets, for each model (default ResNet-50) at 2 threads:
    - idle: p99 / p50 over the timed runs, basalt and ORT;
    - one of the two cores kept busy by another process: median with the busy core / median idle,
      for basalt (default spin), ORT with spinning on (its default) and ORT with spinning off.
    Each configuration runs ROUNDS times; the best median of each is used (as in speed)."""
    want = args.models.split(",") if args.models else ["resnet50"]
    rows = []
    for mid, label, path, spec in MODELS:
        if mid not in want or not os.path.exists(path):
            continue
        folder = os.path.join(tmp, "stab_" + mid)
        bopts = make_inputs(spec, folder, seed=7)
        common = ["--warmup", str(args.warmup), "--iters", str(args.iters)]
        runs = {
            "basalt": lambda: run_json([args.basalt, "bench", path] + bopts + ["--threads", "2", "--json"] + common,
                                       args.timeout)[0],
            "ort_spin": lambda: run_json(node_cmd() + ["bench", path, "--inputs", folder, "--threads", "2"] + common,
                                         args.timeout)[0],
            "ort_nospin": lambda: run_json(node_cmd() + ["bench", path, "--inputs", folder, "--threads", "2",
                                                         "--spin", "0"] + common, args.timeout)[0],
        }
        res = {k: {"idle": [], "busy": []} for k in runs}
        for rnd in range(args.rounds):
            for cond in ("idle", "busy"):
                hog = busy_core() if cond == "busy" else None
                try:
                    for k in (list(runs) if rnd % 2 == 0 else list(reversed(runs))):
                        res[k][cond].append(runs[k]())
                finally:
                    if hog:
                        hog.kill()
                        hog.wait()
        row = {"id": mid, "model": label, "threads": 2}
        for k, v in res.items():
            idle = min(v["idle"], key=lambda j: j["median_ms"])
            busy = min(v["busy"], key=lambda j: j["median_ms"])
            row[k] = {"idle_median_ms": idle["median_ms"], "idle_p99_ms": idle["p99_ms"],
                      "p99_over_p50": idle["p99_ms"] / idle["median_ms"], "busy_median_ms": busy["median_ms"],
                      "busy_slowdown": busy["median_ms"] / idle["median_ms"]}
            log(f"{label:28s} 2t {k:10s} idle median {idle['median_ms']:8.2f} ms  p99/p50 "
                f"{row[k]['p99_over_p50']:5.2f}  one core busy: {busy['median_ms']:8.2f} ms "
                f"(slowdown {row[k]['busy_slowdown']:5.2f}x)")
        rows.append(row)
    return rows


def sizes40():
    """40 sizes, multiples of 32 in [320, 1280], in a varied (not sorted) order."""
    sides = list(range(320, 1281, 32))  # 31 values
    grid = [(h, w) for h in sides for w in sides]
    return [grid[(k * 97) % len(grid)] for k in range(40)]


def shapes(args):
    det = os.path.join(REAL, "ppocr_v4_det.onnx")
    sz = ",".join(f"{h}x{w}" for h, w in sizes40())
    res = {}
    for who in ("basalt", "ort"):
        if who == "basalt":
            cmd = [args.basalt, "perf", "shapes", det, "--input", "x", "--sizes", sz, "--repeat", "1", "--threads", "2"]
        else:
            cmd = node_cmd() + ["shapes", det, "--input", "x", "--sizes", sz, "--repeat", "1", "--threads", "2"]
        lines = run_json(cmd, 3600)
        steps = [l for l in lines if not l.get("summary")]
        s = [l for l in lines if l.get("summary")][0]
        ratios = [l["first_ms"] / l["repeat_ms"] for l in steps]
        res[who] = {"base_mb": s["base_rss_mb"], "after_first_size_mb": steps[0]["rss_mb"], "peak_mb": s["peak_rss_mb"],
                    "after_release_mb": s["rss_after_release_mb"],
                    "kept_mb": s["rss_after_release_mb"] - s["base_rss_mb"],
                    "first_over_repeat_median": float(np.median(ratios)), "first_over_repeat_max": max(ratios),
                    "first_over_repeat_total": sum(l["first_ms"] for l in steps) / sum(l["repeat_ms"] for l in steps),
                    "create_ms": s["create_ms"]}
        log(f"shapes {who}: " + json.dumps(res[who]))
    b, o = res["basalt"], res["ort"]
    log("\n| PaddleOCR det, 40 sizes 320..1280, 2 threads | basalt | ORT |")
    log("|---|---|---|")
    log(f"| RSS before load (MB) | {b['base_mb']:.1f} | {o['base_mb']:.1f} |")
    log(f"| RSS after the first size (MB) | {b['after_first_size_mb']:.1f} | {o['after_first_size_mb']:.1f} |")
    log(f"| peak RSS (MB) | {b['peak_mb']:.1f} | {o['peak_mb']:.1f} |")
    log(f"| RSS after release (MB), kept vs before load | {b['after_release_mb']:.1f} ({b['kept_mb']:+.1f}) | "
        f"{o['after_release_mb']:.1f} ({o['kept_mb']:+.1f}) |")
    log(f"| first run / repeat at a new size: median, max, all sizes summed | {b['first_over_repeat_median']:.2f}, "
        f"{b['first_over_repeat_max']:.2f}, {b['first_over_repeat_total']:.2f} | {o['first_over_repeat_median']:.2f}, "
        f"{o['first_over_repeat_max']:.2f}, {o['first_over_repeat_total']:.2f} |")
    log(f"peak basalt/ORT: {b['peak_mb'] / o['peak_mb']:.2f}x (target <= 0.5x)")
    return res


def switch(args):
    det, rec, cls = (os.path.join(REAL, f) for f in ("ppocr_v4_det.onnx", "ppocr_v4_rec.onnx", "ppocr_mobile_v2_cls.onnx"))
    specs = [f"{det}:x=1x3x640x640", f"{rec}:x=1x3x48x320", f"{cls}:x=1x3x48x192"]
    res = {}
    for who in ("basalt", "ort"):
        base = [args.basalt, "perf"] if who == "basalt" else node_cmd()
        lines = run_json(base + ["switch", "--cycles", "10", "--threads", "2"] + specs, 3600)
        steps = [l for l in lines if not l.get("summary")]
        s = [l for l in lines if l.get("summary")][0]
        res[who] = {"base_mb": s["base_rss_mb"], "peak_mb": s["peak_rss_mb"],
                    "curve_mb": [l["rss_after_release_mb"] for l in steps]}
        log(f"switch {who}: " + json.dumps(res[who]))
    log("\n| det/rec/cls switch, 10 cycles, 2 threads | basalt | ORT |")
    log("|---|---|---|")
    for k, lab in (("base_mb", "RSS before load (MB)"), ("peak_mb", "peak RSS (MB)")):
        log(f"| {lab} | {res['basalt'][k]:.1f} | {res['ort'][k]:.1f} |")
    for i, lab in ((0, "after cycle 1"), (-1, "after cycle 10")):
        log(f"| RSS {lab} (MB) | {res['basalt']['curve_mb'][i]:.1f} | {res['ort']['curve_mb'][i]:.1f} |")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--basalt", default=os.path.join(REPO, "build", "basalt"))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default="")
    ap.add_argument("--scenarios", default="speed,shapes,switch")
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    if args.quick:
        args.models, args.threads, args.iters, args.warmup, args.rounds, args.scenarios = "squeezenet", "1", 3, 1, 1, "speed"
    tmp = tempfile.mkdtemp(prefix="basalt_bench_")
    out = {}
    sc = set(args.scenarios.split(","))
    if "speed" in sc:
        out["speed"] = speed(args, tmp)
        print_speed_table(out["speed"])
    if "shapes" in sc:
        out["shapes"] = shapes(args)
    if "switch" in sc:
        out["switch"] = switch(args)
    if "stability" in sc:
        out["stability"] = stability(args, tmp)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    if args.quick:
        rows = out.get("speed", [])
        ok = len(rows) == 1 and rows[0]["basalt_ms"] > 0 and rows[0]["ort_ms"] > 0
        log(f"{int(ok)} passed, {int(not ok)} failed")
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
