#!/usr/bin/env python3
"""Per-call overhead of the Python API against basalt's own C API, side by side in one run.

A tiny model (y = x + w, float[1, N], 1 thread) is run through
  - the C API: basalt_session_run (allocates the output) and basalt_session_run_into (bound buffer),
    timed by build/basalt_capi_overhead;
  - the onnxruntime alias (build/python/compat): InferenceSession.run and run_with_iobinding with a
    preallocated output, and the native core's run underneath (no Python wrapper);
and the ratios to the C API are printed. It also checks, from the memory statistics, that
run_with_iobinding with preallocated outputs allocates nothing per call.

    /usr/bin/python3 scripts/bench_python_overhead.py [--build build] [--n 16] [--iters 20000] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def per_call_us(fn, iters, rounds=5):
    fn()
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        out.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--n", type=int, default=16)
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--json")
    a = ap.parse_args()
    sys.path.insert(0, os.path.join(a.build, "python", "compat"))
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import onnxruntime as ort

    assert "basalt" in ort.__version__, "the onnxruntime alias was not found in the build"
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tiny.onnx")
        w = numpy_helper.from_array(np.ones((1, a.n), np.float32), "w")
        g = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "tiny",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, a.n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, a.n])], initializer=[w])
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)

        c = json.loads(subprocess.check_output([os.path.join(a.build, "basalt_capi_overhead"), path, "x", "y",
                                                str(a.n), str(a.iters)], text=True))
        o = ort.SessionOptions()
        o.intra_op_num_threads = 1
        s = ort.InferenceSession(path, o)
        x = np.zeros((1, a.n), np.float32)
        feed = {"x": x}
        py_run = per_call_us(lambda: s.run(None, feed), a.iters)
        native_run = per_call_us(lambda: s._s.run(None, feed, None), a.iters)
        io = s.io_binding()
        io.bind_cpu_input("x", x)
        y = ort.OrtValue.ortvalue_from_shape_and_type([1, a.n], np.float32)
        io.bind_ortvalue_output("y", y)
        s.run_with_iobinding(io)
        st0 = s.memory_stats()
        py_io = per_call_us(lambda: s.run_with_iobinding(io), a.iters)
        st1 = s.memory_stats()
        calls = st1["plan_cache_hits"] - st0["plan_cache_hits"]
        alloc_free = all(st1[k] == st0[k] for k in ("arena_maps", "arena_grows", "plan_cache_misses",
                                                    "dynamic_pool_misses", "heap_fallbacks")) \
            and st1["last_run_heap_bytes"] == 0
    rows = [("C API basalt_session_run", c["run_us"], c["run_us"]),
            ("python onnxruntime-alias run", py_run, c["run_us"]),
            ("python native core run (no wrapper)", native_run, c["run_us"]),
            ("C API basalt_session_run_into", c["run_into_us"], c["run_into_us"]),
            ("python run_with_iobinding (preallocated)", py_io, c["run_into_us"])]
    print(f"tiny Add model, float[1,{a.n}], 1 thread, {a.iters} calls x 5 rounds (median)")
    print(f"{'path':44s} {'us/call':>9s} {'vs C API':>9s}")
    for name, us, ref in rows:
        print(f"{name:44s} {us:9.2f} {us / ref:8.2f}x")
    print(f"run_with_iobinding: {calls} calls, arena/plan/pool/heap allocations per call: "
          f"{'none' if alloc_free else 'SOME'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"n": a.n, "iters": a.iters, "c_run_us": c["run_us"], "c_run_into_us": c["run_into_us"],
                       "py_run_us": py_run, "native_run_us": native_run, "py_iobinding_us": py_io,
                       "iobinding_alloc_free": alloc_free}, f, indent=1)
    return 0 if alloc_free else 1


if __name__ == "__main__":
    sys.exit(main())
