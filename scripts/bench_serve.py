#!/usr/bin/env python3
"""basalt serve vs the same models run in process, side by side in one run (docs/serving.md).

Starts `basalt serve` on loopback with ResNet-50 (light_resnet50, batch 1), Silero VAD and the
PaddleOCR classifier (with and without dynamic batching), then for concurrency 1, 4 and 16:
  - REST with the binary tensor extension, driven by wrk (Debian) with a fixed request body;
  - gRPC ModelInfer with raw_input_contents, driven by h2load (Debian nghttp2-client) with a
    framed protobuf body;
  - the same model in process: `basalt bench MODEL --concurrency C` (same threads).
Reports throughput and p50/p99 per row, the server's throughput as a ratio of in-process, the
per-request overhead on the tiny model (server p50 - in-process p50, concurrency 1), and the
throughput gain of dynamic batching. The load generator shares the machine's cores with the
server; on 2 cores that costs the server part of its CPU, and the ratios include that.
usage: bench_serve.py [--build build] [--seconds 5] [--json out.json]
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--threads", type=int, default=0, help="thread budget (0 = the cgroup quota / cores)")
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--json")
    args = ap.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    from basalt.client import GrpcClient, encode_rest_request
    from basalt import grpc_predict_v2_pb2 as pb
    basalt_bin = os.path.join(args.build, "basalt")
    models = os.path.join(ROOT, "models")
    for tool in ("wrk", "h2load"):
        if not shutil.which(tool):
            sys.exit(f"bench_serve: {tool} not found (scripts/setup.sh installs wrk and nghttp2-client)")
    tmp = tempfile.mkdtemp(prefix="basalt-bench-serve-")
    repo = os.path.join(tmp, "repo")
    specs = {
        "resnet50": ("generated/light_resnet50.onnx", None, {"gpu_0/data_0": np.random.default_rng(0).random((1, 3, 224, 224), dtype=np.float32)},
                     ["--shape", "gpu_0/data_0=1x3x224x224"]),
        "vad": ("silero_vad_v5.onnx", None, {"input": np.zeros((1, 512), np.float32), "state": np.zeros((2, 1, 128), np.float32),
                                             "sr": np.array(16000, np.int64)},
                ["--shape", "input=1x512", "--shape", "state=2x1x128", "--fill", "sr=const:16000"]),
        "cls": ("ppocr_mobile_v2_cls.onnx", None, {"x": np.random.default_rng(1).random((1, 3, 48, 192), dtype=np.float32)},
                ["--shape", "x=1x3x48x192"]),
        "cls_batched": ("ppocr_mobile_v2_cls.onnx", {"max_batch_size": 16, "max_queue_delay_us": 2000}, None, None),
    }
    for name, (src, cfg, _, _) in specs.items():
        os.makedirs(os.path.join(repo, name, "1"))
        shutil.copyfile(os.path.join(models, src), os.path.join(repo, name, "1", "model.onnx"))
        if cfg:
            json.dump(cfg, open(os.path.join(repo, name, "config.json"), "w"))
    cmd = [basalt_bin, "serve", "--model-repository", repo, "--http-port", "0", "--grpc-port", "0"]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    srv = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    m = re.search(r"http \S+:(\d+) grpc \S+:(\d+)", srv.stdout.readline())
    http_port, grpc_port = int(m.group(1)), int(m.group(2))
    srv.stdout.readline()  # ready
    rows = []
    try:
        bodies = {}
        for name in ("resnet50", "vad", "cls"):
            ins = specs[name][2]
            body, headers = encode_rest_request(ins, binary=True)
            bpath = os.path.join(tmp, f"{name}.body")
            open(bpath, "wb").write(body)
            lua = os.path.join(tmp, f"{name}.lua")
            open(lua, "w").write(
                f'wrk.method = "POST"\nlocal f = io.open("{bpath}", "rb")\nwrk.body = f:read("*all")\nf:close()\n'
                f'wrk.headers["Content-Type"] = "application/octet-stream"\n'
                f'wrk.headers["Inference-Header-Content-Length"] = "{headers["Inference-Header-Content-Length"]}"\n')
            g = GrpcClient(f"127.0.0.1:{grpc_port}")
            g.infer(name, ins)  # checks the model answers over gRPC before timing it
            msg = g.make_request(name, ins).SerializeToString()
            frame = os.path.join(tmp, f"{name}.grpc")
            open(frame, "wb").write(b"\x00" + len(msg).to_bytes(4, "big") + msg)
            bodies[name] = (lua, frame)
        for name in ("resnet50", "vad", "cls"):
            for c in [int(x) for x in args.concurrency.split(",")]:
                lua, frame = bodies[name]
                rows.append(run_wrk(name, c, lua, http_port, args.seconds, f"/v2/models/{name}/infer"))
                rows.append(run_h2load(name, c, frame, grpc_port, args.seconds, rows[-1]["throughput"], tmp))
                rows.append(run_inproc(basalt_bin, name, c, os.path.join(models, specs[name][0]), specs[name][3],
                                       args.seconds, args.threads))
        # Dynamic batching on the batchable CNN: the same requests to cls and cls_batched.
        # The same request script: only the route differs.
        batching = [run_wrk(m, 16, bodies["cls"][0], http_port, args.seconds, f"/v2/models/{m}/infer")
                    for m in ("cls", "cls_batched")]
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(60)
        shutil.rmtree(tmp, ignore_errors=True)
    report(rows, batching, args.json)


def parse_latency(s):
    v, unit = float(re.match(r"([\d.]+)", s).group(1)), re.sub(r"[\d.]+", "", s)
    return v * {"us": 1e-3, "ms": 1.0, "s": 1e3}[unit]


def run_wrk(name, c, lua, port, seconds, path):
    p = subprocess.run(["wrk", "-t", str(min(c, 2)), "-c", str(c), "-d", f"{max(1, int(seconds))}s", "--latency", "-s", lua,
                        f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True)
    out = p.stdout
    if "Requests/sec" not in out:
        raise SystemExit(f"bench_serve: wrk failed on {name}:\n{out}{p.stderr}")
    if "Non-2xx" in out:
        raise SystemExit(f"bench_serve: {name}: the server answered errors under wrk:\n{out}")
    thr = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    p50 = parse_latency(re.search(r"50%\s+(\S+)", out).group(1))
    p99 = parse_latency(re.search(r"99%\s+(\S+)", out).group(1))
    return {"model": name, "concurrency": c, "side": "REST binary", "throughput": thr, "p50_ms": p50, "p99_ms": p99}


def run_h2load(name, c, frame, port, seconds, rest_rate, tmp):
    n = max(c * 20, int(rest_rate * seconds))
    log = os.path.join(tmp, "h2load.log")
    out = subprocess.run(["h2load", "-n", str(n), "-c", str(c), "-m", "1", "-d", frame, "-H", "content-type: application/grpc",
                          "-H", "te: trailers", "--log-file", log,
                          f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer"],
                         capture_output=True, text=True).stdout
    m = re.search(r"finished in ([\d.]+)(m?s), ([\d.]+) req/s", out)
    if not m or not re.search(r"(\d+) succeeded", out) or int(re.search(r"(\d+) succeeded", out).group(1)) != n:
        raise SystemExit(f"bench_serve: {name}: h2load did not finish every request:\n{out}")
    durs = sorted(int(line.split()[2]) / 1000.0 for line in open(log) if line.strip())
    return {"model": name, "concurrency": c, "side": "gRPC", "throughput": float(m.group(3)),
            "p50_ms": durs[len(durs) // 2], "p99_ms": durs[min(len(durs) - 1, int(len(durs) * 0.99))]}


def run_inproc(basalt_bin, name, c, model, shape_args, seconds, threads):
    # About `seconds` of runs: time one short burst first.
    probe = json.loads(subprocess.run([basalt_bin, "bench", model, *shape_args, "--iters", "20", "--json"],
                                      capture_output=True, text=True, check=True).stdout)
    iters = max(20, int(seconds * 1000.0 / max(probe["median_ms"], 1e-3) / c))
    cmd = [basalt_bin, "bench", model, *shape_args, "--iters", str(iters), "--concurrency", str(c), "--json"]
    if threads:
        cmd += ["--threads", str(threads)]
    r = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    return {"model": name, "concurrency": c, "side": "in process", "throughput": r["throughput_per_s"],
            "p50_ms": r["median_ms"], "p99_ms": r["p99_ms"]}


def report(rows, batching, json_path):
    print(f"{'model':10} {'conc':>4} {'side':12} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'vs in-process':>13}")
    summary = {"rows": rows, "overhead_us": {}, "ratios": {}}
    for r in rows:
        base = next(x for x in rows if x["model"] == r["model"] and x["concurrency"] == r["concurrency"] and x["side"] == "in process")
        ratio = r["throughput"] / base["throughput"]
        r["ratio"] = ratio
        print(f"{r['model']:10} {r['concurrency']:>4} {r['side']:12} {r['throughput']:9.1f} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {ratio:12.2f}x")
    for side in ("REST binary", "gRPC"):
        for model in ("vad", "resnet50", "cls"):
            srv = next(x for x in rows if x["model"] == model and x["concurrency"] == 1 and x["side"] == side)
            base = next(x for x in rows if x["model"] == model and x["concurrency"] == 1 and x["side"] == "in process")
            summary["overhead_us"][f"{model} {side}"] = (srv["p50_ms"] - base["p50_ms"]) * 1e3
    print("per-request overhead at concurrency 1 (server p50 - in-process p50):")
    for k, v in summary["overhead_us"].items():
        print(f"  {k:24} {v:8.1f} us")
    gain = batching[1]["throughput"] / batching[0]["throughput"]
    summary["batching"] = {"unbatched": batching[0], "batched": batching[1], "gain": gain}
    print(f"dynamic batching, cls at concurrency 16 over REST: {batching[0]['throughput']:.1f} -> "
          f"{batching[1]['throughput']:.1f} req/s ({gain:.2f}x), p99 {batching[0]['p99_ms']:.2f} -> {batching[1]['p99_ms']:.2f} ms")
    if json_path:
        json.dump(summary, open(json_path, "w"), indent=1)


if __name__ == "__main__":
    main()
