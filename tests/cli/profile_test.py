#!/usr/bin/env python3
"""Acceptance tests for profiling: `basalt run --profile` and `basalt profile`.

Checks on the Chrome trace: valid JSON; one complete event per executed node, including nodes
run inside a Loop body (marked with args.parent); node events nested inside their run event and
subgraph nodes inside their parent node; top-level node durations add up to within 10% of the
run's duration; a memory counter per node; load/prepare/run phases. Then the `profile` tables,
and bad command lines / unwritable paths give a clear error.
usage: profile_test.py BASALT
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
CONFORMANCE = "/usr/share/libonnx-testdata/data/node"
tmp = tempfile.mkdtemp(prefix="basalt_profile_")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from tally import Tally  # noqa: E402

TALLY = Tally()


def check(name, ok, detail=""):
    TALLY.result(ok, name, detail)


def save(m, name):
    p = os.path.join(tmp, name)
    onnx.save(m, p)
    return p


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def basalt(args, timeout=300):
    return subprocess.run([BASALT] + args, capture_output=True, text=True, timeout=timeout)


def chain_model():
    """MatMul -> Relu -> Reshape (a view) -> Conv -> Add: big enough that node time dominates."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((256, 256)).astype(np.float32), "w")
    cw = numpy_helper.from_array(rng.standard_normal((8, 1, 3, 3)).astype(np.float32), "cw")
    shape = numpy_helper.from_array(np.array([1, 1, 256, 256], dtype=np.int64), "shape")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="mm"),
        helper.make_node("Relu", ["mm"], ["r"], name="relu"),
        helper.make_node("Reshape", ["r", "shape"], ["r4"], name="reshape"),
        helper.make_node("Conv", ["r4", "cw"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c", "c"], ["y"], name="add"),
    ]
    g = helper.make_graph(nodes, "chain", [vi("x", [256, 256])], [vi("y", [1, 8, 256, 256])], initializer=[w, cw, shape])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return save(m, "chain.onnx"), 5


def loop_model(trips):
    """A Loop whose body does a 64x64 MatMul and an Add per iteration, then a Relu."""
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((64, 64)).astype(np.float32) * 0.1, "w")
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body_cond"),
            helper.make_node("MatMul", ["h_in", "w"], ["hw"], name="body_mm"),
            helper.make_node("Add", ["hw", "h_in"], ["h_out"], name="body_add"),
        ],
        "body",
        [vi("i", [], TensorProto.INT64), vi("cond_in", [], TensorProto.BOOL), vi("h_in", [64, 64])],
        [vi("cond_out", [], TensorProto.BOOL), vi("h_out", [64, 64])],
    )
    trip = numpy_helper.from_array(np.array(trips, dtype=np.int64), "trip")
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [
        helper.make_node("Loop", ["trip", "cond", "x"], ["h"], name="loop", body=body),
        helper.make_node("Relu", ["h"], ["y"], name="relu"),
    ]
    g = helper.make_graph(nodes, "looped", [vi("x", [64, 64])], [vi("y", [64, 64])], initializer=[w, trip, cond])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return save(m, "loop.onnx"), 2 + 3 * trips


def load_trace(name, model, extra=(), cmd=("run",)):
    path = os.path.join(tmp, name + ".json")
    r = basalt(list(cmd) + [model, "--profile", path] + list(extra))
    check(f"{name}: {cmd[0]} --profile exits 0", r.returncode == 0, r.stderr.strip())
    check(f"{name}: {cmd[0]} --profile says where it wrote", ("profile: wrote " + path) in r.stdout, r.stdout[-300:])
    try:
        with open(path) as f:
            trace = json.load(f)
        check(f"{name}: trace is valid JSON", True)
    except Exception as e:  # noqa: BLE001 - any failure to read or parse is the finding
        check(f"{name}: trace is valid JSON", False, str(e))
        return None
    return trace


def timing_ok(trace):
    """Top-level node durations sum to within 10% of the single run event's duration."""
    ev = trace.get("traceEvents", [])
    runs = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "phase" and e["name"] == "run"]
    top = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "node" and "parent" not in e["args"]]
    return len(runs) == 1 and abs(sum(e["dur"] for e in top) - runs[0]["dur"]) <= 0.10 * runs[0]["dur"]


def check_trace(name, trace, want_nodes, want_parent=None):
    ev = trace.get("traceEvents", [])
    phases = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "phase"]
    nodes = [e for e in ev if e.get("ph") == "X" and e.get("cat") == "node"]
    counters = [e for e in ev if e.get("ph") == "C"]
    names = {p["name"] for p in phases}
    check(f"{name}: phases load, prepare, run", {"load", "prepare", "run"} <= names, sorted(names))
    check(f"{name}: one event per executed node ({want_nodes})", len(nodes) == want_nodes, f"got {len(nodes)}")
    keys = {"node", "op", "kernel", "input_shapes", "output_shapes", "bytes", "thread"}
    bad = [e["name"] for e in nodes if not keys <= set(e.get("args", {}))]
    check(f"{name}: node events carry {sorted(keys)}", not bad, bad[:3])
    check(f"{name}: one memory counter per node", len(counters) == len(nodes) and
          all(c["name"] == "tensor bytes in use" and c["args"]["bytes"] >= 0 for c in counters), len(counters))
    runs = [p for p in phases if p["name"] == "run"]
    if len(runs) != 1:
        check(f"{name}: one run event", False, len(runs))
        return
    run = runs[0]
    eps = 0.002  # timestamps are printed with 3 decimals (ns precision)
    inside = all(run["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= run["ts"] + run["dur"] + eps for e in nodes)
    check(f"{name}: node events nested in the run event", inside)
    top = [e for e in nodes if "parent" not in e["args"]]
    total = sum(e["dur"] for e in top)
    check(f"{name}: node durations within 10% of run ({total:.1f} of {run['dur']:.1f} us)",
          abs(total - run["dur"]) <= 0.10 * run["dur"], f"{total} vs {run['dur']}")
    if want_parent:
        sub = [e for e in nodes if e["args"].get("parent") == want_parent]
        parent = [e for e in top if e["args"]["node"] == want_parent]
        check(f"{name}: subgraph nodes marked with parent '{want_parent}'", len(sub) > 0 and len(parent) == 1,
              f"{len(sub)} nested, {len(parent)} parents")
        if parent:
            p = parent[0]
            ok = all(p["ts"] - eps <= e["ts"] and e["ts"] + e["dur"] <= p["ts"] + p["dur"] + eps for e in sub)
            check(f"{name}: subgraph node events nested in their parent's event", ok)
    return nodes


# 1. A straight chain of nodes.
chain, n_chain = chain_model()
# At level extended: the five nodes as written (at level all the layout pass would run the conv
# blocked and add a reorder after it, which is not what this checks).
trace = load_trace("chain", chain, ["--opt-level", "extended"])
if trace:
    nodes = check_trace("chain", trace, n_chain)
    mm = [e for e in nodes if e["args"]["node"] == "mm"]
    check("chain: MatMul shapes and bytes recorded",
          mm and mm[0]["args"]["input_shapes"] == ["float32[256,256]", "float32[256,256]"]
          and mm[0]["args"]["output_shapes"] == ["float32[256,256]"] and mm[0]["args"]["bytes"] == 3 * 256 * 256 * 4
          and mm[0]["args"]["kernel"] == "ref", mm[:1])

# 2. A Loop: body nodes appear once per iteration, marked with their parent.
loop, n_loop = loop_model(7)
trace = load_trace("loop", loop)
if trace:
    check_trace("loop", trace, n_loop, want_parent="loop")

# 3. The conformance Loop model (test_loop11), with generated inputs: 5 iterations (its body
# slices a 5-element input). The whole run takes ~50 us, so a cold first run's page faults before
# the first node are a visible share of it: trace one warm run with `basalt profile` instead.
c_loop = os.path.join(CONFORMANCE, "test_loop11", "model.onnx")
if os.path.exists(c_loop):
    m = onnx.load(c_loop)
    li = [i for i, n in enumerate(m.graph.node) if n.op_type == "Loop"][0]
    loop_node = m.graph.node[li]
    # Constant nodes are folded into weights at load, so they never execute.
    body = [a for a in loop_node.attribute if a.name == "body"][0].g
    body_nodes = len([n for n in body.node if n.op_type != "Constant"])
    top_nodes = len([n for n in m.graph.node if n.op_type != "Constant"])
    loop_name = loop_node.name or f"Loop_{li}"  # the importer names unnamed nodes "<op>_<index>"
    # A ~30 us run: one interrupt or preemption between two nodes is a visible share of it. The
    # timing is measured up to 3 times and the first trace that an unlucky moment did not disturb
    # is checked (the 10% bound itself is unchanged); every other check applies to that trace too.
    for attempt in range(3):
        trace = load_trace("test_loop11", c_loop,
                           ["--shape", "trip_count=", "--fill", "trip_count=const:5", "--shape", "cond=", "--fill",
                            "cond=const:1"],
                           cmd=("profile", "--warmup", "1", "--iters", "1"))
        if not trace or timing_ok(trace):
            break
        print(f"(test_loop11: node durations off by more than 10% in attempt {attempt + 1}; tracing again)")
    if trace:
        check_trace("test_loop11", trace, top_nodes + 5 * body_nodes, want_parent=loop_name)
else:
    print(f"(no {c_loop}: skipping the conformance Loop case)")

# 4. `basalt profile` tables.
r = basalt(["profile", chain, "--iters", "3"])
out = r.stdout
check("profile: exits 0", r.returncode == 0, r.stderr.strip())
check("profile: op table with header", "top ops by self time" in out and "GFLOP/s" in out, out[:400])
check("profile: names the kernels it ran", any(l.startswith("kernels: ") and "FMA pipe" in l for l in out.splitlines()),
      out[:400])
mm_line = [l for l in out.splitlines() if l.strip().startswith("MatMul ")]
check("profile: MatMul row with count and GFLOP/s",
      len(mm_line) == 1 and mm_line[0].split()[1] == "1" and mm_line[0].split()[-1] != "-", mm_line)
check("profile: top tensors and peak moment", "top tensors by size" in out and "peak tensor bytes in use" in out
      and "alive then" in out, out[-600:])
r = basalt(["profile", loop, "--iters", "2", "--warmup", "0"])
check("profile: loop model counts body nodes per run",
      r.returncode == 0 and "nodes per run: 23 (21 inside subgraphs)" in r.stdout, r.stdout[:600] + r.stderr)

# 5. Bad command lines and unwritable files.
for args, code, text in [
    (["run", chain, "--profile"], 2, "--profile"),
    (["profile", chain, "--iters", "0"], 2, "--iters"),
    (["profile", chain, "--iters", "x"], 2, "--iters"),
    (["profile"], 2, "MODEL"),
    (["run", chain, "--profile", os.path.join(tmp, "no", "such", "dir", "t.json")], 1, "profile file"),
]:
    r = basalt(args)
    err = r.stderr.strip()
    check(f"bad: {' '.join(args[:1] + args[2:])} -> exit {code}",
          r.returncode == code and len(err.splitlines()) == 1 and text.lower() in err.lower(), f"rc={r.returncode} {err!r}")

sys.exit(TALLY.finish())
