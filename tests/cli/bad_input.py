#!/usr/bin/env python3
"""Bad input must give a clear one-line error and exit code 1 or 2: never a signal, never a hang.

Each case builds a broken file (or command line), runs the basalt CLI on it with a timeout, and
checks the exit code, that stderr is one line, and that it names what is wrong.
usage: bad_input.py BASALT
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

BASALT = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="basalt_bad_")
passed = failed = 0


def model(nodes, inputs, outputs, inits=(), opset=17, name="m"):
    g = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def save(m, name):
    p = os.path.join(tmp, name)
    with open(p, "wb") as f:
        f.write(m.SerializeToString() if not isinstance(m, bytes) else m)
    return p


def vi(name, shape, t=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, t, shape)


def case(name, args, want_codes=(1, 2), want_text=(), stdin=None):
    global passed, failed
    try:
        r = subprocess.run([BASALT] + args, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        print(f"FAIL {name}: hung (timeout 60 s)")
        failed += 1
        return
    err = r.stderr.strip()
    problems = []
    if r.returncode < 0:
        problems.append(f"killed by signal {-r.returncode}")
    elif r.returncode not in want_codes:
        problems.append(f"exit code {r.returncode}, expected one of {want_codes}")
    if not err:
        problems.append("no error message on stderr")
    elif len(err.splitlines()) != 1:
        problems.append(f"error is {len(err.splitlines())} lines, expected one")
    for t in want_text:
        if t.lower() not in err.lower():
            problems.append(f"error does not mention '{t}': {err!r}")
    if problems:
        print(f"FAIL {name}: " + "; ".join(problems))
        failed += 1
    else:
        print(f"PASS {name}: {err}")
        passed += 1


ident = model([helper.make_node("Identity", ["x"], ["y"], name="id")], [vi("x", [2, 3])], [vi("y", [2, 3])])
good = save(ident, "good.onnx")

# --- files that are not ONNX models
case("empty file", ["run", save(b"", "empty.onnx")], want_text=["empty"])
case("missing file", ["run", os.path.join(tmp, "nope.onnx")], want_text=["nope.onnx"])
case("random bytes", ["run", save(np.random.RandomState(0).bytes(4096), "random.onnx")], want_text=["not"])
case("text file", ["run", save(b"hello, this is not a model\n" * 10, "text.onnx")], want_text=["not"])
case("png header", ["run", save(b"\x89PNG\r\n\x1a\n" + bytes(100), "png.onnx")], want_text=["not"])
big = model([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", [256, 256])],
            inits=[numpy_helper.from_array(np.ones((256, 256), np.float32), "w")])
raw = big.SerializeToString()
for frac in (0.5, 0.9, 0.999):
    case(f"truncated at {frac:.1%}", ["run", save(raw[: int(len(raw) * frac)], f"trunc{frac}.onnx")], want_text=["model"])
case("directory as model", ["run", tmp], want_text=[tmp])

# --- broken graphs
cyc = model([helper.make_node("Identity", ["b"], ["a"], name="n1"), helper.make_node("Identity", ["a"], ["b"], name="n2")],
            [vi("x", [1])], [vi("a", [1])])
case("cycle", ["run", save(cyc, "cycle.onnx")], want_text=["cycle", "n1"])
dang = model([helper.make_node("Identity", ["nothing"], ["y"], name="dangler")], [vi("x", [1])], [vi("y", [1])])
case("dangling input", ["run", save(dang, "dangling.onnx")], want_text=["dangler", "nothing"])
dup = model([helper.make_node("Identity", ["x"], ["y"], name="first"), helper.make_node("Identity", ["x"], ["y"], name="second")],
            [vi("x", [1])], [vi("y", [1])])
case("duplicate output name", ["run", save(dup, "dup.onnx")], want_text=["second", "'y'"])
missing_init = model([helper.make_node("Identity", ["weight"], ["y"], name="uses_w")], [], [vi("y", [1])])
case("missing initializer", ["run", save(missing_init, "noinit.onnx")], want_text=["uses_w", "weight"])
noout = model([helper.make_node("Identity", ["x"], ["y"], name="id")], [vi("x", [1])], [vi("z", [1])])
case("graph output not produced", ["run", save(noout, "noout.onnx")], want_text=["'z'"])
then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [], [vi("t", [1])])
wrong_attr = model([helper.make_node("If", ["c"], ["y"], name="branch", then_branch=3, else_branch=then_g)],
                   [vi("c", [], TensorProto.BOOL), vi("x", [1])], [vi("y", [1])])
case("wrong attribute type", ["run", save(wrong_attr, "wrongattr.onnx")], want_text=["branch", "then_branch", "INT"])
unsup = model([helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")], [vi("x", [1])], [vi("y", [1])])
case("unsupported op", ["run", save(unsup, "unsup.onnx")], want_text=["NoSuchOp", "not supported"])
short_w = TensorProto()
short_w.name, short_w.data_type, short_w.raw_data = "w", TensorProto.FLOAT, b"\0" * 12
short_w.dims.extend([4])
badw = model([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", [4])], inits=[short_w])
case("initializer with short raw data", ["run", save(badw, "shortraw.onnx")], want_text=["'w'", "bytes"])
noopset = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", [1])], [vi("y", [1])], opset=99)
case("opset too new", ["run", save(noopset, "opset99.onnx")], want_text=["opset"])

# deep nesting of If subgraphs
inner = helper.make_graph([helper.make_node("Identity", ["x"], ["o0"])], "g0", [], [vi("o0", [1])])
for d in range(1, 80):
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{d}"])], f"e{d}", [], [vi(f"e{d}", [1])])
    inner = helper.make_graph([helper.make_node("If", ["c"], [f"o{d}"], then_branch=inner, else_branch=leaf)], f"g{d}", [],
                              [vi(f"o{d}", [1])])
deep = model(inner.node, [vi("c", [], TensorProto.BOOL), vi("x", [1])], list(inner.output))
case("subgraphs nested too deep", ["run", save(deep, "deep.onnx")], want_text=["nested"])

# external data that escapes the model folder / is too short
ext_dir = os.path.join(tmp, "ext")
os.makedirs(ext_dir, exist_ok=True)
os.symlink(os.path.join(tmp, "good.onnx"), os.path.join(ext_dir, "link.bin"))  # points outside the folder
def ext_model(location, length=None, data=b"\0" * 64):
    t = TensorProto()
    t.name, t.data_type = "w", TensorProto.FLOAT
    t.dims.extend([16])
    t.data_location = TensorProto.EXTERNAL
    for k, v in [("location", location), ("offset", "0")] + ([("length", str(length))] if length is not None else []):
        e = t.external_data.add()
        e.key, e.value = k, v
    with open(os.path.join(ext_dir, "w.bin"), "wb") as f:
        f.write(data)
    m = model([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", [16])], inits=[t])
    return m
case("external data escapes folder", ["run", save(ext_model("../good.onnx"), "ext/escape.onnx")], want_text=["escapes"])
case("external data absolute path", ["run", save(ext_model("/etc/passwd"), "ext/abs.onnx")], want_text=["absolute"])
case("external data too short", ["run", save(ext_model("w.bin", data=b"\0" * 10), "ext/short.onnx")], want_text=["'w'"])
case("external data length beyond file", ["run", save(ext_model("w.bin", length=1 << 40), "ext/long.onnx")], want_text=["'w'"])
case("external data escapes via symlink", ["run", save(ext_model("link.bin"), "ext/link.onnx")], want_text=["'w'"])
case("external data missing file", ["run", save(ext_model("absent.bin"), "ext/absent.onnx")], want_text=["absent.bin"])

# --- memory pressure (issue 9): ops and weights that claim enormous tensors, inputs beyond memory.
# Each must be a one-line error naming the problem, never an OOM kill.
E15 = 10**15
def shape_op(op, shape, out_type=TensorProto.FLOAT):
    inits = [numpy_helper.from_array(np.array(shape, np.int64), "shape"), numpy_helper.from_array(np.ones(1, np.float32), "one")]
    ins = {"ConstantOfShape": ["shape"], "Expand": ["one", "shape"], "Tile": ["one", "shape"]}[op]
    return model([helper.make_node(op, ins, ["y"], name="big")], [], [vi("y", None, out_type)], inits=inits)
for op in ("ConstantOfShape", "Expand", "Tile"):
    case(f"{op} to 1e15 elements", ["run", save(shape_op(op, [E15]), f"huge_{op}.onnx")], want_text=["big", "TiB"])
# 500 GB: under the 1 TiB cap, so only the machine-memory check stops a zero-fill OOM kill.
case("ConstantOfShape to 500 GB", ["run", save(shape_op("ConstantOfShape", [125 * 10**9]), "huge_500g.onnx")],
     want_text=["big", "memory"])
rng = model([helper.make_node("Range", ["a", "b", "c"], ["y"], name="big")], [], [vi("y", None, TensorProto.INT64)],
            inits=[numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("a", 0), ("b", E15), ("c", 1))])
case("Range to 1e15 elements", ["run", save(rng, "huge_range.onnx")], want_text=["big"])
tb = TensorProto()
tb.name, tb.data_type, tb.raw_data = "w", TensorProto.FLOAT, b"\0" * 16
tb.dims.extend([1 << 20, 1 << 20, 1 << 10])
case("initializer claiming 4 PB", ["run", save(model([helper.make_node("Identity", ["w"], ["y"], name="id")], [], [vi("y", None)],
                                                    inits=[tb]), "claims_pb.onnx")], want_text=["'w'"])
dyn = save(model([helper.make_node("Identity", ["x"], ["y"], name="id")], [vi("x", ["n"])], [vi("y", ["n"])]), "dyn.onnx")
case("input shape beyond 1 TiB", ["run", dyn, "--shape", "x=1000000000000"], want_text=["TiB"])
case("input shape beyond machine memory", ["run", dyn, "--shape", "x=125000000000"], want_text=["memory"])

# --- wrong inputs to a good model
np.save(os.path.join(tmp, "f64.npy"), np.zeros((2, 3), np.float64))
np.save(os.path.join(tmp, "rank1.npy"), np.zeros((6,), np.float32))
np.save(os.path.join(tmp, "dim.npy"), np.zeros((2, 4), np.float32))
case("wrong input name", ["run", good, "--shape", "nope=1x2"], want_text=["nope"])
case("wrong input dtype", ["run", good, "--input", "x=" + os.path.join(tmp, "f64.npy")], want_text=["'x'", "float32", "float64"])
case("wrong input rank", ["run", good, "--input", "x=" + os.path.join(tmp, "rank1.npy")], want_text=["'x'", "rank"])
case("wrong fixed dim", ["run", good, "--input", "x=" + os.path.join(tmp, "dim.npy")], want_text=["'x'", "dimension 1"])
case("bad npy file", ["run", good, "--input", "x=" + good], want_text=["npy"])

# --- command-line mistakes: exit code 2
case("no model", ["run"], want_codes=(2,), want_text=["MODEL"])
case("unknown option", ["run", good, "--frobnicate"], want_codes=(2,), want_text=["frobnicate"])
case("bad shape", ["run", good, "--shape", "x=2xq"], want_codes=(2,), want_text=["2xq"])
case("unknown command", ["explode"], want_codes=(2,), want_text=["explode"])

print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
