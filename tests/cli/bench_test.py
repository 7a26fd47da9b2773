#!/usr/bin/env python3
"""Tests of the measuring commands: `basalt bench` and `basalt perf shapes|switch`.

On small generated models (a conv net with dynamic H, W and an MLP), and with --concurrency 4 on
PaddleOCR v4 det and BERT-mini too: the JSON fields are present
and consistent (min <= median <= p90 <= p99, peak RSS >= RSS after load, counts as asked),
--concurrency 4 reports identical results and a throughput, the perf commands print one line per
size / cycle plus a summary, and bad command lines fail with exit code 2 and a message naming the
option (bad models and inputs with exit code 1).
usage: bench_test.py BASALT
"""
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BASALT = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="basalt_bench_")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tally import Tally  # noqa: E402

TALLY = Tally()


def check(name, ok, detail=""):
    TALLY.result(ok, name, detail)


def basalt(args, timeout=300, env=None):
    return subprocess.run([BASALT] + args, capture_output=True, text=True, timeout=timeout, env=env)


def conv_model():
    """Conv 3->8 (3x3, pad 1) -> Relu -> Conv 8->1 (1x1) on [1,3,H,W] with symbolic H, W."""
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32), "w1")
    w2 = numpy_helper.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), "w2")
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2"], ["y"])]
    g = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "h", "w"])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    p = os.path.join(tmp, "conv.onnx")
    onnx.save(m, p)
    return p


def mlp_model():
    """MatMul 64x256 -> Add -> Relu -> MatMul 256x10 on [batch, 64]."""
    rng = np.random.default_rng(1)
    w1 = numpy_helper.from_array(rng.standard_normal((64, 256)).astype(np.float32), "w1")
    b1 = numpy_helper.from_array(rng.standard_normal((256,)).astype(np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((256, 10)).astype(np.float32), "w2")
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"]), helper.make_node("Add", ["h", "b1"], ["hb"]),
             helper.make_node("Relu", ["hb"], ["hr"]), helper.make_node("MatMul", ["hr", "w2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w1, b1, w2])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    p = os.path.join(tmp, "mlp.onnx")
    onnx.save(m, p)
    return p


def json_lines(out):
    return [json.loads(l) for l in out.splitlines() if l.startswith("{")]


CONV, MLP = conv_model(), mlp_model()

# --- bench --json
r = basalt(["bench", MLP, "--dim", "batch=32", "--threads", "2", "--warmup", "1", "--iters", "7", "--json"])
check("bench --json exits 0", r.returncode == 0, r.stderr)
lines = json_lines(r.stdout)
check("bench --json prints one JSON line", len(lines) == 1 and len(r.stdout.strip().splitlines()) == 1, r.stdout)
j = lines[0] if lines else {}
fields = ["median_ms", "p90_ms", "p99_ms", "min_ms", "first_run_ms", "session_create_ms", "peak_rss_mb",
          "rss_after_load_mb", "threads", "iters", "model"]
missing = [f for f in fields if f not in j]
check("bench --json has every field", not missing, f"missing {missing}")
if not missing:
    check("bench: min <= median <= p90 <= p99", 0 < j["min_ms"] <= j["median_ms"] <= j["p90_ms"] <= j["p99_ms"], j)
    check("bench: first run and session creation timed", j["first_run_ms"] > 0 and j["session_create_ms"] > 0, j)
    check("bench: peak RSS >= RSS after load > 0", j["peak_rss_mb"] >= j["rss_after_load_mb"] > 0, j)
    check("bench: threads, iters and model as asked", j["threads"] == 2 and j["iters"] == 7 and j["model"] == MLP, j)
    check("bench: no concurrency fields without --concurrency", "identical" not in j and "throughput_per_s" not in j, j)
    check("bench: one arena for one shape (arena_maps 1, arena_grows 0)",
          j.get("arena_maps") == 1 and j.get("arena_grows") == 0 and j.get("arena_bytes", 0) > 0, j)
    pool = [j.get(k) for k in ("pool_busy_detections", "pool_preempted_spins", "pool_apart_moves")]
    check("bench: thread pool counters are counts", all(isinstance(v, int) and v >= 0 for v in pool), pool)
    check("bench: names the kernels it ran", j.get("isa") in ("avx512", "avx2", "portable") and
          j.get("fma512_pipes") in (1, 2), j)

# --no-winograd (SessionOptions::winograd = false): a 32-channel 3x3 conv at 32x32, which Winograd
# runs by default, keeps the direct kernel and its smaller packed weights; run and plan accept it
def conv32_model():
    rng = np.random.default_rng(2)
    w = numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32), "w")
    g = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])], "conv32",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32, 32])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    p = os.path.join(tmp, "conv32.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


CONV32 = conv32_model()
packed = {}
for opt in ([], ["--no-winograd"]):
    r = basalt(["bench", CONV32, "--iters", "1", "--warmup", "0", "--json"] + opt)
    packed[bool(opt)] = (json_lines(r.stdout) or [{}])[0].get("packed_weights_bytes")
    check(f"bench {' '.join(opt) or '(winograd on)'} exits 0", r.returncode == 0, r.stderr)
if "BASALT_WINOGRAD" not in os.environ:  # BASALT_WINOGRAD=0 turns it off for both
    check("bench --no-winograd: smaller packed weights", all(isinstance(v, int) for v in packed.values()) and
          packed[True] < packed[False], packed)
for cmd in (["run", CONV32, "--no-winograd"], ["plan", CONV32, "--no-winograd"]):
    r = basalt(cmd)
    check(f"{cmd[0]} accepts --no-winograd", r.returncode == 0, r.stderr)

# the kernel choice follows BASALT_ISA and BASALT_FMA512_PIPES (what a benchmark log records)
for isa, pipes in (("portable", 1), ("portable", 2)):
    r = basalt(["bench", MLP, "--dim", "batch=4", "--iters", "1", "--warmup", "0", "--json"],
               env=dict(os.environ, BASALT_ISA=isa, BASALT_FMA512_PIPES=str(pipes)))
    jj = (json_lines(r.stdout) or [{}])[0]
    check(f"bench --json under BASALT_ISA={isa}, BASALT_FMA512_PIPES={pipes} says so",
          jj.get("isa") == isa and jj.get("fma512_pipes") == pipes, r.stdout + r.stderr)
r = basalt(["bench", MLP, "--dim", "batch=4", "--iters", "1", "--warmup", "0"],
           env=dict(os.environ, BASALT_FMA512_PIPES="1"))
check("bench summary names the kernels", r.returncode == 0 and "512-bit FMA pipe(s) per core" in r.stdout,
      r.stdout + r.stderr)

# --- bench, human summary
r = basalt(["bench", CONV, "--shape", "x=1x3x32x32", "--iters", "3", "--warmup", "0"])
check("bench summary mentions median and peak RSS", r.returncode == 0 and "median" in r.stdout and "peak" in r.stdout,
      r.stdout + r.stderr)

# --- bench --concurrency 4
for name, model, opts in (("mlp", MLP, ["--dim", "batch=16"]), ("conv", CONV, ["--shape", "x=1x3x40x24"])):
    r = basalt(["bench", model] + opts + ["--threads", "2", "--iters", "5", "--warmup", "1", "--concurrency", "4", "--json"])
    j = (json_lines(r.stdout) or [{}])[0]
    check(f"bench --concurrency 4 ({name}): identical true", r.returncode == 0 and j.get("identical") is True,
          r.stdout + r.stderr)
    check(f"bench --concurrency 4 ({name}): throughput and 20 runs", j.get("throughput_per_s", 0) > 0
          and j.get("concurrency") == 4 and j.get("iters") == 5, j)

# --- bench --concurrency 4 on real models (issue 9's acceptance: PaddleOCR det and BERT-mini).
# models-setup (scripts/prepare_models.sh) fetches/generates them first; a missing one fails.
MODELS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "models")
for name, rel, opts in (
        ("ppocr_v4_det", "ppocr_v4_det.onnx", ["--shape", "x=1x3x640x640", "--fill", "x=uniform:-1,1"]),
        ("bert_mini", "generated/bert_mini.onnx", ["--dim", "batch=1", "--dim", "sequence=128",
                                                   "--fill", "input_ids=int:0,30522", "--fill", "attention_mask=const:1"])):
    path = os.path.join(MODELS_DIR, rel)
    if not os.path.exists(path):
        check(f"bench --concurrency 4 ({name}): model present", False, f"{path} missing (scripts/prepare_models.sh)")
        continue
    r = basalt(["bench", path] + opts + ["--threads", "2", "--iters", "3", "--warmup", "1", "--concurrency", "4",
                                         "--json"], timeout=600)
    j = (json_lines(r.stdout) or [{}])[0]
    check(f"bench --concurrency 4 ({name}): identical true", r.returncode == 0 and j.get("identical") is True,
          (r.stdout + r.stderr)[-600:])

# --- perf shapes
sizes = ["32x32", "64x48", "96x96", "32x64"]
r = basalt(["perf", "shapes", CONV, "--input", "x", "--sizes", ",".join(sizes), "--repeat", "2", "--threads", "1"])
lines = json_lines(r.stdout)
steps = [l for l in lines if not l.get("summary")]
summ = [l for l in lines if l.get("summary")]
check("perf shapes: one line per size and a summary", r.returncode == 0 and len(steps) == 4 and len(summ) == 1,
      r.stdout + r.stderr)
if len(steps) == 4 and summ:
    s = summ[0]
    check("perf shapes: sizes in order", [f"{l['h']}x{l['w']}" for l in steps] == sizes, steps)
    check("perf shapes: per-size fields", all(l["first_ms"] > 0 and l["repeat_ms"] > 0 and l["rss_mb"] > 0 for l in steps),
          steps)
    need = ["base_rss_mb", "create_ms", "peak_rss_mb", "rss_after_release_mb", "sizes"]
    check("perf shapes: summary fields", all(k in s for k in need) and s["sizes"] == 4
          and s["peak_rss_mb"] >= max(l["rss_mb"] for l in steps), s)

# --- perf switch
r = basalt(["perf", "switch", "--cycles", "3", "--threads", "1", f"{CONV}:x=1x3x32x32", f"{MLP}:x=4x64"])
lines = json_lines(r.stdout)
steps = [l for l in lines if not l.get("summary")]
summ = [l for l in lines if l.get("summary")]
check("perf switch: one line per cycle and a summary", r.returncode == 0 and len(steps) == 3 and len(summ) == 1,
      r.stdout + r.stderr)
if len(steps) == 3 and summ:
    s = summ[0]
    check("perf switch: cycles numbered, two runs each", [l["cycle"] for l in steps] == [1, 2, 3]
          and all(len(l["run_ms"]) == 2 for l in steps), steps)
    need = ["base_rss_mb", "peak_rss_mb", "rss_after_first_cycle_mb", "rss_after_last_cycle_mb", "cycles"]
    check("perf switch: summary fields", all(k in s for k in need) and s["cycles"] == 3
          and s["rss_after_first_cycle_mb"] == steps[0]["rss_after_release_mb"], s)

# --- bad command lines: exit 2 and a message that names the problem
bad = [
    (["bench"], "missing MODEL"),
    (["bench", MLP, "--iters", "0"], "--iters must be >= 1"),
    (["bench", MLP, "--concurrency", "four"], "--concurrency: 'four' is not an integer"),
    (["bench", MLP, "--threads"], "--threads needs a value"),
    (["bench", MLP, "--bogus"], "unknown option '--bogus'"),
    (["perf"], "missing subcommand"),
    (["perf", "walk"], "unknown subcommand 'walk'"),
    (["perf", "shapes", CONV, "--sizes", "32x32"], "missing --input"),
    (["perf", "shapes", CONV, "--input", "x"], "missing --sizes"),
    (["perf", "shapes", CONV, "--input", "x", "--sizes", "32by32"], "'32by32' is not a size"),
    (["perf", "shapes", CONV, "--input", "x", "--sizes", "0x32"], "both >= 1"),
    (["perf", "switch", CONV], "missing --cycles"),
    (["perf", "switch", "--cycles", "2"], "missing MODEL"),
    (["perf", "switch", "--cycles", "2", f"{CONV}:x=1x3xAx4"], "is not a shape"),
]
for args, msg in bad:
    r = basalt(args)
    check(f"bad command line {' '.join(a.replace(tmp + '/', '') for a in args)!r}: exit 2, names it",
          r.returncode == 2 and msg in r.stderr, f"exit {r.returncode}, stderr {r.stderr.strip()!r}")

# --- bad model or inputs: exit 1 with a one-line error
bad_run = [
    (["bench", os.path.join(tmp, "nope.onnx")], "nope.onnx"),
    (["bench", MLP, "--shape", "y=1x64"], "no input 'y'"),
    (["bench", MLP, "--shape", "x=2x63"], "input 'x'"),
    (["perf", "shapes", CONV, "--input", "img", "--sizes", "32x32"], "no tensor input 'img'"),
    (["perf", "switch", "--cycles", "1", os.path.join(tmp, "nope.onnx") + ":x=1x3"], "nope.onnx"),
]
for args, msg in bad_run:
    r = basalt(args)
    check(f"bad input {' '.join(os.path.basename(a) for a in args)!r}: exit 1, names it",
          r.returncode == 1 and msg in r.stderr and "error" in r.stderr,
          f"exit {r.returncode}, stderr {r.stderr.strip()!r}")

sys.exit(TALLY.finish())
