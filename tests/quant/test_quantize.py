"""`basalt quantize` and the int8 kernels end to end (issue 38, docs/quantization.md).

- static QOperator quantization of a small residual CNN (built here) and of ResNet-50 (models/
  generated) from .npz calibration files: the rewritten ops, accuracy against the float model,
  top-1 agreement, and parity with ONNX Runtime 1.30 on the same quantized file (within one
  quantization step of the output);
- dynamic quantization of BERT-mini: the fused DynamicQuantizeMatMul gives the same bits as the
  unfused pattern (optimization level none), and ONNX Runtime agrees;
- bad input: a clear error and exit code for each malformed request.
Run by scripts/run_tests.sh as suite "quantize" (needs ORT: scripts/setup_ort.sh)."""
import json
import os
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BASALT_BUILD", os.path.join(ROOT, "build"))
BASALT = os.path.join(BUILD, "basalt")
MODELS = os.path.join(ROOT, "models")
ORT_RUN = os.path.join(ROOT, "tests", "parity", "ort_run.js")


def run(*args, check=True):
    r = subprocess.run([BASALT, *args], capture_output=True, text=True, timeout=600)
    if check and r.returncode != 0:
        raise AssertionError(f"basalt {' '.join(args)} exited {r.returncode}: {r.stderr}")
    return r


def save_inputs(folder, feeds):
    os.makedirs(folder, exist_ok=True)
    listing, opts = [], []
    for k, (name, a) in enumerate(feeds.items()):
        f = os.path.join(folder, f"in{k}.npy")
        np.save(f, a)
        listing.append({"name": name, "file": f"in{k}.npy"})
        opts += ["--input", f"{name}={f}"]
    with open(os.path.join(folder, "inputs.json"), "w") as fh:
        json.dump(listing, fh)
    return opts


def basalt_outputs(model, folder, feeds, *extra):
    opts = save_inputs(folder, feeds)
    out = folder + "_basalt" + "_".join(e.strip("-") for e in extra)
    run("run", model, *opts, "--output-dir", out, *extra)
    return [np.load(os.path.join(out, f"output_{i}.npy")) for i in range(len(os.listdir(out)) - 1)]


_ORT = []


def ort_path():
    """onnxruntime-node, installed by scripts/setup_ort.sh on first use (it prints the package path)."""
    if not _ORT:
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "setup_ort.sh")], capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, "setup_ort.sh failed: " + r.stderr[-2000:]
        _ORT.append(r.stdout.strip().splitlines()[-1])
    return _ORT[0]


def ort_outputs(model, folder):
    out = folder + "_ort"
    env = dict(os.environ, ORT_NODE_PATH=ort_path())
    r = subprocess.run(["node", ORT_RUN, model, folder, out, "1"], capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out, "outputs.json")) as fh:
        n = len(json.load(fh))
    return [np.load(os.path.join(out, f"output_{i}.npy")) for i in range(n)]


def rel_l2(a, b):
    return float(np.linalg.norm(a.astype(np.float64) - b) / max(np.linalg.norm(b.astype(np.float64)), 1e-30))


def ops_of(path):
    m = onnx.load(path)
    out = {}
    for n in m.graph.node:
        out[n.op_type] = out.get(n.op_type, 0) + 1
    return out, m


def small_cnn(path):
    """Conv+Relu -> Conv -> Add (residual) + Relu -> MaxPool -> Conv(stride 2) -> Flatten -> MatMul."""
    rng = np.random.default_rng(0)
    w = lambda *s: numpy_helper.from_array((rng.standard_normal(s) * 0.2).astype(np.float32))
    inits = []
    def init(name, arr):
        arr.name = name
        inits.append(arr)
        return name
    nodes = [
        helper.make_node("Conv", ["x", init("w1", w(8, 3, 3, 3)), init("b1", w(8))], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", init("w2", w(8, 8, 3, 3)), init("b2", w(8))], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["c2", "r1"], ["a"]),
        helper.make_node("Relu", ["a"], ["r2"]),
        helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p", init("w3", w(16, 8, 3, 3))], ["c3"], pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Flatten", ["c3"], ["f"]),
        helper.make_node("MatMul", ["f", init("wm", w(16 * 4 * 4, 10))], ["y"]),
    ]
    g = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def calibration_dir(folder, name, shape, n, seed):
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(seed)
    for k in range(n):
        np.savez(os.path.join(folder, f"sample{k:02d}.npz"), **{name: rng.uniform(-1, 1, shape).astype(np.float32)})
    return folder


def output_step(model, out_name):
    """The quantization step of the float output: the scale of the DequantizeLinear producing it."""
    m = onnx.load(model)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    for n in m.graph.node:
        if n.op_type == "DequantizeLinear" and n.output[0] == out_name:
            return float(inits[n.input[1]])
    raise AssertionError(f"{out_name} is not dequantized in {model}")


def test_static_cnn_ops_accuracy_and_ort_parity(tmp_path):
    f32 = str(tmp_path / "cnn.onnx")
    q8 = str(tmp_path / "cnn_int8.onnx")
    small_cnn(f32)
    cal = calibration_dir(str(tmp_path / "cal"), "x", (1, 3, 16, 16), 6, 1)
    r = run("quantize", f32, "-o", q8, "--calibration", cal, "--report")
    assert "0 nodes left float" in r.stdout, r.stdout
    ops, m = ops_of(q8)
    assert ops.get("QLinearConv") == 3 and ops.get("QLinearAdd") == 1 and ops.get("QLinearMatMul") == 1, ops
    assert "Conv" not in ops and "Relu" not in ops, ops  # the Relus are folded into the output ranges
    assert ops.get("MaxPool") == 1 and ops.get("QuantizeLinear") == 1 and ops.get("DequantizeLinear") == 1, ops
    x = {"x": np.random.default_rng(5).uniform(-1, 1, (1, 3, 16, 16)).astype(np.float32)}
    ref = basalt_outputs(f32, str(tmp_path / "in"), x)[0]
    got = basalt_outputs(q8, str(tmp_path / "in"), x)[0]
    assert rel_l2(got, ref) < 0.06, rel_l2(got, ref)
    ort = ort_outputs(q8, str(tmp_path / "in"))[0]
    step = output_step(q8, "y")
    assert np.abs(got - ort).max() <= step * 1.001, (np.abs(got - ort).max(), step)
    # every kernel path gives the same int8 model output
    for isa in ("avx2", "portable"):
        env_out = subprocess.run([BASALT, "run", q8, "--input", f"x={tmp_path}/in/in0.npy", "--output-dir", str(tmp_path / isa)],
                                 capture_output=True, text=True, env=dict(os.environ, BASALT_ISA=isa))
        assert env_out.returncode == 0, env_out.stderr
        np.testing.assert_array_equal(np.load(str(tmp_path / isa / "output_0.npy")), got)


def test_static_resnet50_top1_and_ort(tmp_path):
    f32 = os.path.join(MODELS, "generated", "light_resnet50.onnx")
    q8 = str(tmp_path / "r50_int8.onnx")
    cal = calibration_dir(str(tmp_path / "cal"), "gpu_0/data_0", (1, 3, 224, 224), 4, 2)
    r = run("quantize", f32, "-o", q8, "--calibration", cal)
    assert "Conv+Relu/Clip x33" in r.stdout and "Add+Relu/Clip x16" in r.stdout, r.stdout
    agree = 0
    for k in range(3):
        x = {"gpu_0/data_0": np.random.default_rng(10 + k).uniform(-1, 1, (1, 3, 224, 224)).astype(np.float32)}
        folder = str(tmp_path / f"in{k}")
        ref = basalt_outputs(f32, folder, x)[0]
        got = basalt_outputs(q8, folder, x)[0]
        assert rel_l2(got, ref) < 0.05, rel_l2(got, ref)
        agree += int(got.argmax() == ref.argmax())
        ort = ort_outputs(q8, folder)[0]
        assert rel_l2(got, ort) < 0.01, rel_l2(got, ort)
    assert agree >= 2, agree
    # int8 weights: the quantized file is about a third of the float one (the classifier Gemm stays float)
    assert os.path.getsize(q8) < 0.35 * os.path.getsize(f32)


def mlp(path):
    """MatMul + bias -> Relu -> MatMul + bias: the dynamic pattern twice, with the Add fused in."""
    rng = np.random.default_rng(1)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.1).astype(np.float32), n)
             for n, s in (("w1", (64, 96)), ("b1", (96,)), ("w2", (96, 33)), ("b2", (33,)))]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["m1"]), helper.make_node("Add", ["m1", "b1"], ["a1"]),
             helper.make_node("Relu", ["a1"], ["r"]), helper.make_node("MatMul", ["r", "w2"], ["m2"]),
             helper.make_node("Add", ["m2", "b2"], ["y"])]
    g = helper.make_graph(nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 64])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5, 33])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.save(m, path)


def test_dynamic_pattern_fused_gives_the_unfused_bits(tmp_path):
    f32, q8 = str(tmp_path / "mlp.onnx"), str(tmp_path / "mlp_int8.onnx")
    mlp(f32)
    run("quantize", f32, "-o", q8, "--dynamic")
    rep = " ".join(run("optimize", q8, "--report").stdout.split())
    assert "DynamicQuantizeLinear+MatMulInteger 2" in rep, rep
    x = {"x": np.random.default_rng(4).standard_normal((3, 5, 64)).astype(np.float32)}
    folder = str(tmp_path / "in")
    fused = basalt_outputs(q8, folder, x)[0]
    unfused = basalt_outputs(q8, folder, x, "--opt-level", "none")[0]
    np.testing.assert_array_equal(fused, unfused)  # the fused kernel computes the pattern's own float ops
    assert rel_l2(fused, basalt_outputs(f32, folder, x)[0]) < 0.05
    assert rel_l2(fused, ort_outputs(q8, folder)[0]) < 1e-3


def test_dynamic_bert_mini_accuracy_and_ort(tmp_path):
    f32 = os.path.join(MODELS, "generated", "bert_mini.onnx")
    q8 = str(tmp_path / "bert_int8.onnx")
    run("quantize", f32, "-o", q8, "--dynamic")
    ops, _ = ops_of(q8)
    n = ops.get("MatMulInteger", 0)
    assert n >= 20 and ops.get("DynamicQuantizeLinear", 0) >= 1, ops
    rep = " ".join(run("optimize", q8, "--report").stdout.split())
    assert f"DynamicQuantizeLinear+MatMulInteger {n}" in rep, rep
    rng = np.random.default_rng(3)
    x = {"input_ids": rng.integers(0, 30522, (1, 128)).astype(np.int64),
         "attention_mask": np.ones((1, 128), np.int64)}
    folder = str(tmp_path / "in")
    got = basalt_outputs(q8, folder, x)
    ref = basalt_outputs(f32, folder, x)
    ort = ort_outputs(q8, folder)
    for a, f, o in zip(got, ref, ort):
        assert rel_l2(a, f) < 0.1, rel_l2(a, f)
        assert rel_l2(a, o) < 0.01, rel_l2(a, o)


@pytest.mark.parametrize("args,code,message", [
    (["/nonexistent.onnx", "-o", "/tmp/x.onnx"], 1, "nonexistent"),
    (["MODEL", "-o", "OUT", "--method", "entropy2"], 2, "--method must be minmax or percentile"),
    (["MODEL"], 2, "missing -o"),
    (["MODEL", "-o", "OUT", "--dynamic", "--calibration", "CAL"], 2, "--calibration is for static"),
    (["MODEL", "-o", "OUT", "--calibration", "EMPTY"], 1, "no .npz files"),
    (["MODEL", "-o", "OUT", "--calibration", "BADNPZ"], 1, "not a .npz"),
    (["MODEL", "-o", "OUT", "--calibration", "WRONGNAME"], 1, "x"),
    (["MODEL", "-o", "OUT", "--percentile", "20"], 2, "--percentile must be"),
])
def test_bad_input(tmp_path, args, code, message):
    model = str(tmp_path / "cnn.onnx")
    small_cnn(model)
    (tmp_path / "empty").mkdir()
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "s.npz").write_bytes(b"this is not a zip file at all, not even close")
    (tmp_path / "wrong").mkdir()
    np.savez(str(tmp_path / "wrong" / "s.npz"), not_x=np.zeros((1, 3, 16, 16), np.float32))
    subst = {"MODEL": model, "OUT": str(tmp_path / "o.onnx"), "CAL": str(tmp_path / "empty"), "EMPTY": str(tmp_path / "empty"),
             "BADNPZ": str(tmp_path / "bad"), "WRONGNAME": str(tmp_path / "wrong")}
    r = run("quantize", *[subst.get(a, a) for a in args], check=False)
    assert r.returncode == code, (r.returncode, r.stderr)
    assert message in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and "terminate" not in r.stderr


def test_old_opset_with_changed_op_is_refused(tmp_path):
    # opset 9 with Upsample (changed meaning later): refused with the node named, nothing written
    g = helper.make_graph([helper.make_node("Upsample", ["x", "s"], ["y"], name="up")], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 4, 4])],
                          [numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "s")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 9)])
    m.ir_version = 4
    p = str(tmp_path / "old.onnx")
    onnx.save(m, p)
    out = str(tmp_path / "o.onnx")
    r = run("quantize", p, "-o", out, "--dynamic", check=False)
    assert r.returncode == 1 and "'up' (Upsample)" in r.stderr and "opset" in r.stderr, r.stderr
    assert not os.path.exists(out)


def test_zero_scale_in_a_model_is_a_clear_error(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.UINT8, None)
    inits = [numpy_helper.from_array(np.array(0.1, np.float32), "xs"), numpy_helper.from_array(np.array(0, np.uint8), "xz"),
             numpy_helper.from_array(np.ones((2, 1, 1, 1), np.int8), "w"), numpy_helper.from_array(np.array([0.5, 0.0], np.float32), "ws"),
             numpy_helper.from_array(np.zeros(2, np.int8), "wz"), numpy_helper.from_array(np.array(0.2, np.float32), "ys"),
             numpy_helper.from_array(np.array(0, np.uint8), "yz")]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], name="qc")
    m = helper.make_model(helper.make_graph([node], "g", [x], [y], inits), opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    p = str(tmp_path / "zero.onnx")
    onnx.save(m, p)
    r = run("run", p, "--fill", "x=int:0,255", check=False)
    assert r.returncode == 1, r.stderr
    assert "'qc'" in r.stderr and "w_scale must be positive and finite; element 1" in r.stderr, r.stderr
