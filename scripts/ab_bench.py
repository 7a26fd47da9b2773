#!/usr/bin/env python3
"""A/B of two basalt builds side by side: alternating fresh `basalt bench --json` processes on the
same models, inputs and threads. For a change meant to be speed-neutral (or faster), against a
build of the commit before it.

usage: scripts/ab_bench.py OLD_BASALT NEW_BASALT [ROUNDS (3)] [MODEL,MODEL... (substrings)]
Prints a markdown table per model and thread count: the best per-round median of each, NEW/OLD
(below 1: NEW faster), session creation and peak RSS, then the geometric means. Needs the models
of scripts/prepare_models.sh in models/."""
import json, os, subprocess, sys, math
old, new = sys.argv[1], sys.argv[2]
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
M = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "models")
img = lambda n, h=224, w=224: [f"--shape", f"{n}=1x3x{h}x{w}", "--fill", f"{n}=uniform:-1,1"]
models = [
    ("ResNet-50", f"{M}/generated/light_resnet50.onnx", img("gpu_0/data_0"), 10),
    ("MobileNetV2", f"{M}/generated/mobilenet_v2.onnx", img("input"), 30),
    ("SqueezeNet", f"{M}/generated/light_squeezenet.onnx", img("data_0"), 30),
    ("DenseNet-121", f"{M}/generated/light_densenet121.onnx", img("data_0"), 10),
    ("BERT-mini s128", f"{M}/generated/bert_mini.onnx", ["--shape", "input_ids=1x128", "--fill", "input_ids=int:0,30522", "--shape", "attention_mask=1x128", "--fill", "attention_mask=const:1"], 30),
    ("PaddleOCR det 640", f"{M}/ppocr_v4_det.onnx", img("x", 640, 640), 10),
    ("PaddleOCR rec 48x320", f"{M}/ppocr_v4_rec.onnx", img("x", 48, 320), 20),
    ("Silero VAD v5", f"{M}/silero_vad_v5.onnx", ["--shape", "input=1x512", "--fill", "input=uniform:-0.5,0.5", "--shape", "state=2x1x128", "--fill", "state=zeros", "--shape", "sr=", "--fill", "sr=const:16000"], 2000),
]
def run(b, path, args, iters, t):
    out = subprocess.run([b, "bench", path, *args, "--threads", str(t), "--warmup", str(max(2, iters // 5)), "--iters", str(iters), "--json"],
                         capture_output=True, text=True, timeout=600)
    if out.returncode: raise SystemExit(out.stderr)
    d = json.loads(out.stdout.strip().splitlines()[-1])
    return d["median_ms"], d["session_create_ms"], d["peak_rss_mb"]
print("| model | threads | old ms | new ms | new/old | create old / new ms | peak RSS old / new MB |")
print("|---|---|---|---|---|---|---|")
ratios = {1: [], 2: []}
only = sys.argv[4].split(",") if len(sys.argv) > 4 else None
for name, path, args, iters in models:
    if only and not any(o in name for o in only): continue
    for t in (1, 2):
        o, n = [], []
        for r in range(rounds):
            o.append(run(old, path, args, iters, t)); n.append(run(new, path, args, iters, t))
        bo, bn = min(x[0] for x in o), min(x[0] for x in n)
        co, cn = min(x[1] for x in o), min(x[1] for x in n)
        ro, rn = min(x[2] for x in o), min(x[2] for x in n)
        ratios[t].append(bn / bo)
        print(f"| {name} | {t} | {bo:.3f} | {bn:.3f} | {bn/bo:.3f} | {co:.0f} / {cn:.0f} | {ro:.1f} / {rn:.1f} |", flush=True)
for t in (1, 2):
    g = math.exp(sum(math.log(x) for x in ratios[t]) / len(ratios[t]))
    print(f"geomean new/old at {t} thread(s): {g:.3f}")
