#!/usr/bin/python3
"""Runs basalt on the ONNX "light" models and compares with their stored expected outputs.

usage: tests/parity/run_light.py [--basalt build/basalt] [--light-dir DIR] [--only SUBSTR] [--keep]

The light models (onnx/backend/test/data/light in the ONNX repository: light_<name>.onnx plus
light_<name>_output_0.pb, no input file) have every large float initializer replaced by a
ConstantOfShape node. Their input is not stored: the ONNX backend test runner
(onnx/backend/test/runner/__init__.py, Runner.generate_dummy_data with random=False) builds it
from the first graph input that is not an initializer:
    shape = dim_value of each dim (1 where a dim has no value)
    n = prod(shape);  x = (np.arange(n).reshape(shape) / n).astype(np.float32)
and compares the backend's outputs with output_<i>.pb using np.testing.assert_allclose with
rtol=1e-3, atol=1e-7 (the runner's defaults). This script does the same with `basalt run`.

The light folder is taken from --light-dir, else $BASALT_LIGHT_DIR, else
/work/shared/onnx-testdata/light. Prints one line per model, then `N passed, N failed`;
exit status 1 if any failed.
"""
import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
RTOL, ATOL = 1e-3, 1e-7


def light_input(model):
    inits = {t.name for t in model.graph.initializer}
    out = []
    for x in model.graph.input:
        if x.name in inits:
            continue
        shape = tuple(d.dim_value if d.HasField("dim_value") else 1 for d in x.type.tensor_type.shape.dim)
        n = int(np.prod(shape))
        out.append((x.name, (np.arange(n).reshape(shape) / n).astype(np.float32)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--basalt", default=os.path.join(REPO, "build", "basalt"))
    ap.add_argument("--light-dir", default=os.environ.get("BASALT_LIGHT_DIR", "/work/shared/onnx-testdata/light"))
    ap.add_argument("--only", default="")
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    basalt = os.path.abspath(args.basalt)
    if not os.access(basalt, os.X_OK):
        sys.exit(f"basalt binary not found: {basalt} (build it, or pass --basalt)")
    models = sorted(glob.glob(os.path.join(args.light_dir, "light_*.onnx")))
    if not models:
        sys.exit(f"no light_*.onnx in {args.light_dir} (pass --light-dir)")
    work = tempfile.mkdtemp(prefix="basalt-light-")
    passed = failed = 0
    for path in models:
        name = os.path.basename(path)[:-5]
        if args.only not in name:
            continue
        d = os.path.join(work, name)
        os.makedirs(d)
        m = onnx.load(path)
        cmd = [basalt, "run", path, "--output-dir", os.path.join(d, "out")]
        for k, (n, a) in enumerate(light_input(m)):
            f = os.path.join(d, f"input_{k}.npy")
            np.save(f, a)
            cmd += ["--input", f"{n}={f}"]
        expected = []
        for i in range(len(m.graph.output)):
            pb = os.path.join(args.light_dir, f"{name}_output_{i}.pb")
            if not os.path.exists(pb):
                break
            expected.append(numpy_helper.to_array(onnx.load_tensor(pb)))
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=args.timeout)
            rc, err = r.returncode, (r.stderr.strip() or r.stdout.strip())
        except subprocess.TimeoutExpired:
            rc, err = -1, f"timed out after {args.timeout} s"
        if rc != 0:
            msg = err.splitlines()[-1] if err else f"exit status {rc}"
            for p in ("basalt: error: ", "basalt: "):
                if msg.startswith(p):
                    msg = msg[len(p):]
            print(f"FAIL {name}: basalt: {msg}", flush=True)
            failed += 1
            continue
        try:
            outs = json.load(open(os.path.join(d, "out", "outputs.json")))
            got = [np.load(os.path.join(d, "out", o["file"])) for o in outs]
            if len(got) < len(expected):
                raise AssertionError(f"{len(got)} outputs, expected {len(expected)}")
            worst = 0.0
            for i, (g, e) in enumerate(zip(got, expected)):
                if g.dtype != e.dtype:
                    raise AssertionError(f"output {i}: dtype {g.dtype}, expected {e.dtype}")
                if g.shape != e.shape:
                    raise AssertionError(f"output {i}: shape {list(g.shape)}, expected {list(e.shape)}")
                np.testing.assert_allclose(g, e, rtol=RTOL, atol=ATOL)
                worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - e))) if e.size else 0.0)
            print(f"PASS {name} max_abs_diff={worst:.2e}", flush=True)
            passed += 1
        except AssertionError as e:
            msg = " ".join(str(e).split())
            print(f"FAIL {name}: {msg[:300]}", flush=True)
            failed += 1
        if not args.keep:
            shutil.rmtree(d, ignore_errors=True)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"work folder kept: {work}", file=sys.stderr)
    print(f"{passed} passed, {failed} failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
