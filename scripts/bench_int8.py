#!/usr/bin/env python3
"""int8 side by side (issue 38): basalt and ONNX Runtime 1.30 on the same quantized models, and
basalt's int8 against its own fp32, in one run on one machine.

For each model: `basalt quantize` writes the int8 model (static QOperator from .npz calibration
samples drawn like the bench inputs, or dynamic for BERT), then for each thread count
`basalt bench --json` on the fp32 and the int8 model and `node scripts/bench_ort.js bench` on the
int8 model run in turn, ROUNDS times, alternating the order; each figure is the best of its
per-round medians. Reported per row: ms of each, ORT-int8 / basalt-int8 (> 1: basalt is faster),
basalt fp32 / basalt int8, peak RSS of basalt's int8 session over its fp32 one, and the accuracy
of the int8 model (relative L2 and max abs error against basalt fp32, top-1 agreement for
classifiers, the agreement of PaddleOCR det's thresholded map, relative L2 between basalt int8
and ORT int8). Ends with the geometric means.

usage: bench_int8.py --basalt build/basalt [--threads 1,2] [--iters 20] [--warmup 3] [--rounds 2]
                     [--models resnet50,mobilenet_v2,bert_base,ppocr_det] [--quick] [--json OUT]
--quick: MobileNetV2 only, 1 thread, 3 iterations, 1 round (a smoke run of the pipeline); ends
with "N passed, N failed".
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_compare as bc  # noqa: E402  (MODELS, make_inputs, run_json, node_cmd)

# id -> quantization mode; classifiers get a top-1 check
PLAN = {"resnet50": "static", "mobilenet_v2": "static", "bert_base": "dynamic", "ppocr_det": "static"}
CLASSIFIERS = {"resnet50", "mobilenet_v2"}


def log(*a):
    print(*a, flush=True)


def calibration(spec, folder, n, seed):
    os.makedirs(folder, exist_ok=True)
    for k in range(n):
        d = os.path.join(folder, f"s{k}")
        bc.make_inputs(spec, d, seed + k)
        arrays = {name: np.load(os.path.join(d, f"in{i}.npy")) for i, name in enumerate(spec)}
        np.savez(os.path.join(folder, f"sample{k:02d}.npz"), **arrays)
    return folder


def outputs(cmd, out_dir):
    subprocess.run(cmd + ["--output-dir", out_dir], check=True, capture_output=True, timeout=900)
    return np.load(os.path.join(out_dir, "output_0.npy"))


def rel_l2(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b.astype(np.float64)), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--basalt", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--models", default=",".join(PLAN))
    ap.add_argument("--timeout", type=int, default=1800)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    args = ap.parse_args()
    if args.quick:
        args.models, args.threads, args.iters, args.warmup, args.rounds = "mobilenet_v2", "1", 3, 1, 1
    want = args.models.split(",")
    threads = [int(t) for t in args.threads.split(",")]
    specs = {mid: (label, path, spec) for mid, label, path, spec in bc.MODELS}
    rows, failures = [], 0
    tmp = tempfile.mkdtemp(prefix="bench_int8_")
    for mid in want:
        if mid not in PLAN or mid not in specs:
            sys.exit(f"unknown model '{mid}' (choose from {', '.join(PLAN)})")
        label, f32, spec = specs[mid]
        if not os.path.exists(f32):
            log(f"skip {label}: {f32} is missing")
            continue
        folder = os.path.join(tmp, mid)
        bopts = bc.make_inputs(spec, folder, seed=7)
        q8 = os.path.join(tmp, mid + "_int8.onnx")
        qcmd = [args.basalt, "quantize", f32, "-o", q8]
        if PLAN[mid] == "dynamic":
            qcmd.append("--dynamic")
        else:
            qcmd += ["--calibration", calibration(spec, os.path.join(tmp, mid + "_cal"), 4 if not args.quick else 2, 100)]
        q = subprocess.run(qcmd, capture_output=True, text=True, timeout=args.timeout)
        if q.returncode != 0:
            log(f"{label}: basalt quantize failed: {q.stderr.strip()}")
            failures += 1
            continue
        log(f"{label}: {q.stdout.strip().splitlines()[0]}")
        # accuracy on the bench input
        ref = outputs([args.basalt, "run", f32] + bopts, os.path.join(tmp, mid + "_out_f32"))
        got = outputs([args.basalt, "run", q8] + bopts, os.path.join(tmp, mid + "_out_q8"))
        ort_dir = os.path.join(tmp, mid + "_out_ort")
        subprocess.run(["node", os.path.join(bc.REPO, "tests", "parity", "ort_run.js"), q8, folder, ort_dir, "1"], check=True,
                       capture_output=True, timeout=args.timeout)
        ort = np.load(os.path.join(ort_dir, "output_0.npy"))
        acc = {"rel_l2_vs_fp32": rel_l2(got, ref), "rel_l2_vs_ort_int8": rel_l2(got, ort),
               "max_abs_vs_fp32": float(np.abs(got.astype(np.float64) - ref).max())}
        if mid == "ppocr_det":  # a probability map: what PaddleOCR thresholds (0.3), not its near-zero values
            acc["det_map_agreement"] = float(((got > 0.3) == (ref > 0.3)).mean())
        if mid in CLASSIFIERS:
            acc["top1_agrees"] = bool(got.reshape(got.shape[0], -1).argmax(1)[0] == ref.reshape(ref.shape[0], -1).argmax(1)[0])
        for t in threads:
            runs = {"f32": [], "q8": [], "ort": []}
            for rnd in range(args.rounds):
                order = ["f32", "q8", "ort"] if rnd % 2 == 0 else ["ort", "q8", "f32"]
                for who in order:
                    if who == "ort":
                        cmd = bc.node_cmd() + ["bench", q8, "--inputs", folder, "--threads", str(t), "--warmup", str(args.warmup),
                                               "--iters", str(args.iters)]
                    else:
                        cmd = [args.basalt, "bench", f32 if who == "f32" else q8] + bopts + [
                            "--threads", str(t), "--warmup", str(args.warmup), "--iters", str(args.iters), "--json"]
                    runs[who].append(bc.run_json(cmd, args.timeout)[0])
            best = {k: min(v, key=lambda j: j["median_ms"]) for k, v in runs.items()}
            row = {"id": mid, "model": label, "mode": PLAN[mid], "threads": t,
                   "basalt_fp32_ms": best["f32"]["median_ms"], "basalt_int8_ms": best["q8"]["median_ms"],
                   "ort_int8_ms": best["ort"]["median_ms"],
                   "ort_over_basalt": best["ort"]["median_ms"] / best["q8"]["median_ms"],
                   "fp32_over_int8": best["f32"]["median_ms"] / best["q8"]["median_ms"],
                   "basalt_int8_peak_mb": max(j["peak_rss_mb"] for j in runs["q8"]),
                   "basalt_fp32_peak_mb": max(j["peak_rss_mb"] for j in runs["f32"]),
                   "ort_int8_peak_mb": max(j["peak_rss_mb"] for j in runs["ort"]),
                   "isa": best["q8"].get("isa"), **acc}
            row["rss_int8_over_fp32"] = row["basalt_int8_peak_mb"] / row["basalt_fp32_peak_mb"]
            rows.append(row)
            log(f"{label:28s} {t}t  int8 basalt {row['basalt_int8_ms']:8.2f} ms  ort {row['ort_int8_ms']:8.2f} ms  "
                f"ort/basalt {row['ort_over_basalt']:5.2f}x  fp32 {row['basalt_fp32_ms']:8.2f} ms  fp32/int8 {row['fp32_over_int8']:5.2f}x  "
                f"peak RSS int8/fp32 {row['rss_int8_over_fp32']:4.2f}  relL2 vs fp32 {acc['rel_l2_vs_fp32']:.4f}"
                + (f"  top-1 {'same' if acc.get('top1_agrees') else 'DIFFERS'}" if 'top1_agrees' in acc else "")
                + f"  max |int8 - fp32| {acc['max_abs_vs_fp32']:.2g}"
                + (f"  map>0.3 agrees {acc['det_map_agreement']:.4f}" if 'det_map_agreement' in acc else "")
                + f"  vs ORT int8 {acc['rel_l2_vs_ort_int8']:.4f}")
    if rows:
        for t in threads:
            sel = [r for r in rows if r["threads"] == t]
            if sel:
                g1 = math.exp(sum(math.log(r["ort_over_basalt"]) for r in sel) / len(sel))
                g2 = math.exp(sum(math.log(r["fp32_over_int8"]) for r in sel) / len(sel))
                log(f"geomean at {t} thread(s): ORT int8 / basalt int8 {g1:.2f}x, basalt fp32 / int8 {g2:.2f}x ({len(sel)} models)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)
    if args.quick:
        ok = len(rows) > 0 and failures == 0 and all(r["rel_l2_vs_ort_int8"] < 0.05 for r in rows)
        print(f"{1 if ok else 0} passed, {0 if ok else 1} failed")
        return 0 if ok else 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
