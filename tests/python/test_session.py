"""basalt's Python API: metadata, input/output conversion and aliasing, errors, threads, and the
PaddleOCR detector against ONNX Runtime's cached outputs."""
import glob
import importlib.util
import json
import os
import pathlib
import threading
import time

import numpy as np
import pytest

import basalt

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
MODELS = ROOT / "models"
DET = MODELS / "ppocr_v4_det.onnx"


def save(tmp_path, nodes, inputs, outputs, inits=(), name="m.onnx", opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    p = tmp_path / name
    onnx.save(m, str(p))
    return p


@pytest.fixture
def relu_model(tmp_path):
    """y = Relu(x), x: float[N, 3] with symbolic N."""
    return save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])],
                [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])],
                [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 3])])


# ---------------------------------------------------------------- metadata

def test_symbolic_dims_metadata(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, None])
    x.type.tensor_type.shape.dim[2].Clear()  # a dim with neither value nor symbol: unknown
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, None)  # unknown rank
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, None])
    y.type.tensor_type.shape.dim[2].Clear()
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    p = save(tmp_path, [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Size", ["ids"], ["n"])],
             [x, ids], [y, n])
    s = basalt.InferenceSession(str(p))
    ins, outs = s.get_inputs(), s.get_outputs()
    assert [i.name for i in ins] == ["x", "ids"]
    assert ins[0].shape == ["batch", 3, None]
    assert ins[0].type == "tensor(float)" and ins[0].dtype == np.float32
    assert ins[1].shape is None and ins[1].type == "tensor(int64)"
    assert [o.name for o in outs] == ["y", "n"]
    assert outs[1].shape == [] and outs[1].type == "tensor(int64)"
    assert "batch" in repr(ins[0])


def test_winograd_off_keeps_weights_small_and_results(tmp_path):
    # A 3x3 stride-1 conv with 32 channels at 32x32 runs Winograd by default; winograd = False runs
    # the direct kernel: smaller packed weights, the same outputs to fp32 rounding.
    rng = np.random.default_rng(5)
    w = numpy_helper.from_array((rng.standard_normal((32, 32, 3, 3)) * 0.1).astype(np.float32), "w")
    p = save(tmp_path, [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1])],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32, 32, 32])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 32, 32])], [w])
    x = rng.uniform(-1, 1, size=(1, 32, 32, 32)).astype(np.float32)
    on, off = basalt.SessionOptions(), basalt.SessionOptions()
    assert on.winograd is True
    off.winograd = False
    s_on, s_off = basalt.InferenceSession(p, on), basalt.InferenceSession(p, off)
    y_on, y_off = s_on.run(None, {"x": x})[0], s_off.run(None, {"x": x})[0]
    np.testing.assert_allclose(y_on, y_off, rtol=1e-4, atol=1e-4)
    if "BASALT_WINOGRAD" not in os.environ:  # BASALT_WINOGRAD=0 turns it off for both
        assert s_on.memory_stats()["packed_weight_bytes"] > s_off.memory_stats()["packed_weight_bytes"]


def test_winograd_off_in_a_blocked_chain(tmp_path):
    # Two 64-channel 3x3 convs at 28x28 form a blocked (NCHWc) chain whose convs run Winograd on
    # the blocked tensors by default; winograd = False keeps them on the direct blocked kernel.
    rng = np.random.default_rng(6)
    w1 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w1")
    w2 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w2")
    p = save(tmp_path, [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
                        helper.make_node("Relu", ["a"], ["r"]),
                        helper.make_node("Conv", ["r", "w2"], ["y"], pads=[1, 1, 1, 1])],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 28, 28])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 28, 28])], [w1, w2])
    x = rng.uniform(-1, 1, size=(1, 64, 28, 28)).astype(np.float32)
    off = basalt.SessionOptions()
    off.winograd = False
    s_on, s_off = basalt.InferenceSession(p), basalt.InferenceSession(p, off)
    y_on, y_off = s_on.run(None, {"x": x})[0], s_off.run(None, {"x": x})[0]
    np.testing.assert_allclose(y_on, y_off, rtol=1e-4, atol=1e-4)
    if "BASALT_WINOGRAD" not in os.environ and os.environ.get("BASALT_NCHWC") != "0":
        # F(4x4) keeps 36 / 9 = 4x the direct weights (the blocked pack pads nothing at 64 channels)
        assert s_on.memory_stats()["packed_weight_bytes"] > 3 * s_off.memory_stats()["packed_weight_bytes"]


def test_pool_outputs_are_not_copied(tmp_path):
    # A Loop's stacked output comes from the session's dynamic pool; Python gets that block as the
    # array's memory (no copy, no fresh pages per run), and a dropped array gives it back.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Identity", ["x_in"], ["x_out"]),
         helper.make_node("Identity", ["x_in"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [4096])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [4096]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [4096])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    p = save(tmp_path, [helper.make_node("Loop", ["M", "cond", "x"], ["x_final", "stacked"], body=body),
                        helper.make_node("Neg", ["stacked"], ["y"])],
             [helper.make_tensor_value_info("M", TensorProto.INT64, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [4096])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 4096])], inits=[cond])
    s = basalt.InferenceSession(p)
    x = np.linspace(-1, 1, 4096, dtype=np.float32)
    m = np.array(8, np.int64)
    addrs = set()
    for _ in range(3):
        (y,) = s.run(["y"], {"M": m, "x": x})
        np.testing.assert_array_equal(y, -np.stack([x] * 8))
        addrs.add(y.ctypes.data)
        del y
    assert len(addrs) == 1  # the same block each time: handed out, given back
    a = s.run(["y"], {"M": m, "x": x})[0]
    b = s.run(["y"], {"M": m, "x": x})[0]
    assert not np.shares_memory(a, b)  # a held array keeps its block
    assert s.memory_stats()["dynamic_pool_in_use_bytes"] >= 2 * a.nbytes  # not copies: the pool's blocks
    b[...] = 0
    np.testing.assert_array_equal(a, -np.stack([x] * 8))
    del a, b
    assert s.memory_stats()["dynamic_pool_in_use_bytes"] == 0


def test_larger_batches_grow_one_arena(tmp_path):
    # R = Relu(x) lives in the run arena; ever larger batches grow that one arena in place.
    p = save(tmp_path, [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "r"], ["z"])],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 256])],
             [helper.make_tensor_value_info("z", TensorProto.FLOAT, ["N", 256])])
    s = basalt.InferenceSession(str(p))
    rng = np.random.default_rng(2)
    for k, n in enumerate((2, 100, 5000, 30)):
        x = rng.standard_normal((n, 256)).astype(np.float32)
        (z,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(z, 2 * np.maximum(x, 0))
        st = s.memory_stats()
        assert st["arena_maps"] == 1
        assert st["arena_grows"] == min(k, 2)  # the last, smaller batch fits
        assert st["arena_bytes"] >= n * 256 * 4


def test_ppocr_metadata():
    if not DET.exists():
        pytest.skip(f"{DET} not present (make demo fetches it)")
    s = basalt.InferenceSession(str(DET))
    (i,), (o,) = s.get_inputs(), s.get_outputs()
    assert i.name == "x" and i.type == "tensor(float)"
    assert len(i.shape) == 4 and i.shape[1] == 3 and all(isinstance(d, str) for d in (i.shape[0], i.shape[2], i.shape[3]))
    assert o.type == "tensor(float)" and o.shape[1] == 1
    st = s.memory_stats()
    assert st["model_file_bytes"] == DET.stat().st_size
    assert 0 < st["weight_bytes"] <= st["model_file_bytes"]
    assert st["weight_bytes_in_place"] + st["weight_bytes_copied"] == st["weight_bytes"]


def test_types_of_sequences_and_providers(tmp_path):
    p = save(tmp_path, [helper.make_node("SequenceConstruct", ["a", "b"], ["s"])],
             [helper.make_tensor_value_info("a", TensorProto.INT32, [2]),
              helper.make_tensor_value_info("b", TensorProto.INT32, [2])],
             [helper.make_tensor_sequence_value_info("s", TensorProto.INT32, None)])
    s = basalt.InferenceSession(p, providers=["CPUExecutionProvider"])  # os.PathLike accepted
    assert s.get_outputs()[0].type == "seq(tensor(int32))"
    assert s.get_providers() == ["CPUExecutionProvider"]
    out = s.run(None, {"a": np.array([1, 2], np.int32), "b": np.array([3, 4], np.int32)})
    assert isinstance(out[0], list) and [a.tolist() for a in out[0]] == [[1, 2], [3, 4]]


# ---------------------------------------------------------------- inputs and outputs

def test_run_basic_and_bytes(relu_model):
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    for src in (str(relu_model), relu_model.read_bytes(), bytearray(relu_model.read_bytes())):
        s = basalt.InferenceSession(src)
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        (y2,) = s.run(["y"], {"x": x})
        np.testing.assert_array_equal(y2, y)


def test_output_is_zero_copy_and_writable(relu_model):
    s = basalt.InferenceSession(str(relu_model))
    (y,) = s.run(None, {"x": np.ones((4, 3), np.float32)})
    # the run's own tensor, handed over through a capsule (no copy)
    assert type(y.base).__name__ == "PyCapsule"
    assert y.flags.writeable and y.flags.c_contiguous
    y[:] = 7  # the caller owns it
    del y


def test_noncontiguous_and_byteswapped_inputs(relu_model):
    s = basalt.InferenceSession(str(relu_model))
    base = np.arange(-12, 12, dtype=np.float32).reshape(4, 6)
    strided = base[:, ::2]
    assert not strided.flags.c_contiguous
    (y,) = s.run(None, {"x": strided})
    np.testing.assert_array_equal(y, np.maximum(strided, 0))
    swapped = np.ascontiguousarray(strided).astype(">f4")
    (y,) = s.run(None, {"x": swapped})
    np.testing.assert_array_equal(y, np.maximum(strided, 0))


def test_identity_output_does_not_alias_input(tmp_path):
    p = save(tmp_path, [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Reshape", ["x", "shape"], ["z"])],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3]),
              helper.make_tensor_value_info("z", TensorProto.FLOAT, [6])],
             inits=[numpy_helper.from_array(np.array([6], np.int64), "shape")])
    s = basalt.InferenceSession(str(p))
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y, z = s.run(None, {"x": x})
    assert not np.shares_memory(y, x) and not np.shares_memory(z, x)
    x[:] = -1
    np.testing.assert_array_equal(y, np.arange(6, dtype=np.float32).reshape(2, 3))
    np.testing.assert_array_equal(z, np.arange(6, dtype=np.float32))


def test_weight_output_cannot_change_the_session(tmp_path):
    w = np.arange(16, dtype=np.float32).reshape(4, 4)
    p = save(tmp_path, [helper.make_node("Identity", ["w"], ["v"]), helper.make_node("Add", ["x", "w"], ["y"])],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 4])],
             [helper.make_tensor_value_info("w", TensorProto.FLOAT, [4, 4]),
              helper.make_tensor_value_info("v", TensorProto.FLOAT, [4, 4]),
              helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
             inits=[numpy_helper.from_array(w, "w")])
    s = basalt.InferenceSession(str(p))
    x = np.zeros((4, 4), np.float32)
    w_out, v_out, y = s.run(None, {"x": x})
    assert not np.shares_memory(w_out, v_out)
    w_out[:] = 100  # writable copies: the session's weight must not change
    v_out[:] = 100
    w2, v2, y2 = s.run(None, {"x": x})
    np.testing.assert_array_equal(w2, w)
    np.testing.assert_array_equal(y2, w)


def test_strings_bools_and_optional(tmp_path):
    p = save(tmp_path, [helper.make_node("Identity", ["s"], ["t"]), helper.make_node("Not", ["b"], ["nb"])],
             [helper.make_tensor_value_info("s", TensorProto.STRING, [2]),
              helper.make_tensor_value_info("b", TensorProto.BOOL, [3])],
             [helper.make_tensor_value_info("t", TensorProto.STRING, [2]),
              helper.make_tensor_value_info("nb", TensorProto.BOOL, [3])])
    s = basalt.InferenceSession(str(p))
    t, nb = s.run(None, {"s": np.array(["héllo", "x"]), "b": np.array([True, False, True])})
    assert t.tolist() == ["héllo", "x"]
    assert nb.dtype == np.bool_ and nb.tolist() == [False, True, False]
    (t,) = s.run(["t"], {"s": np.array([b"a", b"b"], dtype=object), "b": np.zeros(3, bool)})
    assert t.tolist() == ["a", "b"]


# ---------------------------------------------------------------- errors

def test_bad_path():
    with pytest.raises(basalt.BasaltIOError, match="nonexistent"):
        basalt.InferenceSession("/nonexistent/model.onnx")
    with pytest.raises(OSError):
        basalt.InferenceSession("/nonexistent/model.onnx")


def test_garbage_bytes(tmp_path):
    with pytest.raises(basalt.InvalidModelError):
        basalt.InferenceSession(b"\x08\x07garbage, not a protobuf \xff\xff\xff")
    f = tmp_path / "garbage.onnx"
    f.write_bytes(os.urandom(1000))
    with pytest.raises(basalt.BasaltError):
        basalt.InferenceSession(str(f))
    with pytest.raises(TypeError):
        basalt.InferenceSession(12345)


def test_wrong_inputs(relu_model):
    s = basalt.InferenceSession(str(relu_model))
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(basalt.InvalidArgumentError, match=r"unknown input 'nope'.*x"):
        s.run(None, {"nope": x})
    with pytest.raises(ValueError, match="expected dtype float32, got float64"):
        s.run(None, {"x": x.astype(np.float64)})
    with pytest.raises(basalt.InvalidArgumentError, match="rank"):
        s.run(None, {"x": np.zeros((2, 3, 1), np.float32)})
    with pytest.raises(basalt.InvalidArgumentError, match="dimension 1 must be 3"):
        s.run(None, {"x": np.zeros((2, 4), np.float32)})
    with pytest.raises(basalt.InvalidArgumentError, match="required"):
        s.run(None, {})
    with pytest.raises(basalt.InvalidArgumentError, match="unknown output 'zz'"):
        s.run(["zz"], {"x": x})
    with pytest.raises(basalt.InvalidArgumentError, match="no ONNX equivalent"):
        s.run(None, {"x": np.zeros((2, 3), "datetime64[s]")})
    with pytest.raises(basalt.InvalidArgumentError, match="None"):
        s.run(None, {"x": None})
    with pytest.raises(TypeError):
        s.run(None, [x])
    with pytest.raises(TypeError):
        s.run("y", {"x": x})
    # the session still works after every error
    (y,) = s.run(None, {"x": x})
    assert y.shape == (2, 3)


def test_options(relu_model):
    o = basalt.SessionOptions()
    assert o.intra_op_num_threads == 0 and o.memory_limit == 0 and o.allow_unsupported is False
    o.intra_op_num_threads = 4
    assert o.threads == 4
    o.memory_limit = 1 << 30
    with pytest.raises(ValueError):
        o.intra_op_num_threads = -1
    o.inter_op_num_threads = 2  # onnxruntime's knob: accepted (docs/python.md says why it changes nothing)
    with pytest.raises(AttributeError):
        o.inter_op_num_thread = 2  # a typo neither API has: no silent acceptance
    s = basalt.InferenceSession(str(relu_model), o)
    assert s.options.intra_op_num_threads == 4 and s.memory_stats()["memory_limit"] == 1 << 30
    ps = s.pool_stats()
    assert ps["threads"] == 4 and ps["shared"] is False and ps["spin_us"] >= 0
    assert all(isinstance(ps[k], int) and ps[k] >= 0 for k in ("busy_detections", "preempted_spins", "apart_moves"))
    with pytest.raises(TypeError):
        basalt.InferenceSession(str(relu_model), sess_options="fast")
    with pytest.warns(UserWarning, match="CUDAExecutionProvider"):  # onnxruntime's rule: warn, run on the CPU
        assert basalt.InferenceSession(str(relu_model), providers=["CUDAExecutionProvider"]).get_providers() == \
            ["CPUExecutionProvider"]


def test_allow_unsupported(tmp_path):
    p = save(tmp_path, [helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = onnx.load(str(p))
    m.opset_import.append(helper.make_opsetid("com.example", 1))
    onnx.save(m, str(p))
    with pytest.raises(basalt.UnsupportedError, match="NoSuchOp"):
        basalt.InferenceSession(str(p))
    o = basalt.SessionOptions()
    o.allow_unsupported = True
    s = basalt.InferenceSession(str(p), o)
    with pytest.raises(basalt.BasaltError, match="NoSuchOp"):
        s.run(None, {"x": np.zeros(1, np.float32)})


def test_exception_hierarchy():
    assert issubclass(basalt.BasaltError, RuntimeError)
    for cls, builtin in [(basalt.InvalidModelError, ValueError), (basalt.InvalidArgumentError, ValueError),
                         (basalt.UnsupportedError, NotImplementedError), (basalt.MemoryLimitError, MemoryError),
                         (basalt.BasaltIOError, OSError), (basalt.InternalError, RuntimeError)]:
        assert issubclass(cls, basalt.BasaltError) and issubclass(cls, builtin)


# ---------------------------------------------------------------- threads

def det_session_or_skip():
    if not DET.exists():
        pytest.skip(f"{DET} not present (make demo fetches it)")
    return basalt.InferenceSession(str(DET))


def test_four_threads_one_session():
    s = det_session_or_skip()
    rs = np.random.RandomState(7)
    xs = [rs.uniform(-1, 1, (1, 3, 96 + 32 * i, 128)).astype(np.float32) for i in range(8)]
    seq = [s.run(None, {"x": x})[0] for x in xs]
    got = [None] * len(xs)
    errors = []

    def work(t):
        try:
            for k in range(t, len(xs), 4):
                got[k] = s.run(None, {"x": xs[k]})[0]
        except Exception as e:  # reported below, not lost in the thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    for a, b in zip(got, seq):
        np.testing.assert_array_equal(a, b)


def test_gil_released_during_run():
    """While one thread is inside run(), another thread keeps executing Python code."""
    s = det_session_or_skip()
    x = np.random.RandomState(0).uniform(-1, 1, (1, 3, 320, 320)).astype(np.float32)
    span = {}
    ticks = []
    done = threading.Event()

    def work():
        span["start"] = time.perf_counter()
        s.run(None, {"x": x})
        span["end"] = time.perf_counter()
        done.set()

    t = threading.Thread(target=work)
    t.start()
    while not done.is_set():
        ticks.append(time.perf_counter())
    t.join()
    a, b = span["start"], span["end"]
    lo, hi = a + 0.25 * (b - a), b - 0.25 * (b - a)
    # with the GIL held for the whole run, no tick could fall in the middle half of it
    assert any(lo <= v <= hi for v in ticks), f"no Python progress during a {b - a:.3f} s run"


# ---------------------------------------------------------------- a real model vs ONNX Runtime

def load_parity_module():
    path = ROOT / "tests" / "parity" / "run_parity.py"
    if not path.exists():
        return None
    spec = importlib.util.spec_from_file_location("run_parity", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ppocr_det_matches_ort_cache():
    """ppocr_v4_det at 320x320 with the parity suite's seeded input, against the ORT output that
    tests/parity/run_parity.py cached in models/.ort_cache; same acceptance rule as that suite."""
    s = det_session_or_skip()
    rp = load_parity_module()
    if rp is None:
        pytest.skip("tests/parity/run_parity.py missing")
    case = [c for c in rp.real_cases(str(MODELS), False) if c.model_name == "ppocr_v4_det" and c.shape_name == "320x320"]
    if not case:
        pytest.skip("no ppocr_v4_det 320x320 case in tests/models/real_models.json")
    (name, x), = case[0].make_inputs()
    ref = None
    for f in glob.glob(str(MODELS / ".ort_cache" / "*" / "outputs.json")):
        meta = json.load(open(f))
        if len(meta) == 1 and meta[0]["name"] == s.get_outputs()[0].name and meta[0]["shape"] == [1, 1, 320, 320]:
            ref = np.load(os.path.join(os.path.dirname(f), meta[0]["file"]))
    if ref is None:
        pytest.skip("no cached ORT output for ppocr_v4_det 320x320 (run tests/parity/run_parity.py once)")
    (got,) = s.run(None, {name: x})
    assert got.shape == ref.shape and got.dtype == ref.dtype
    rel = np.linalg.norm(got.astype(np.float64) - ref) / max(np.linalg.norm(ref.astype(np.float64)), 1e-30)
    maxabs = float(np.max(np.abs(got.astype(np.float64) - ref)))
    assert rel <= 1e-3 or maxabs <= 1e-6, f"rel L2 {rel:.3g}, max abs {maxabs:.3g}"


def test_sequence_items_zero_copy_unless_shared(tmp_path):
    p = save(tmp_path, [helper.make_node("Relu", ["a"], ["r"]), helper.make_node("SequenceConstruct", ["r", "a"], ["s"])],
             [helper.make_tensor_value_info("a", TensorProto.FLOAT, [3])],
             [helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)])
    s = basalt.InferenceSession(str(p))
    a = np.array([-1, 0, 2], np.float32)
    (seq,) = s.run(None, {"a": a})
    assert type(seq[0].base).__name__ == "PyCapsule"  # the run's own tensor: no copy
    assert not np.shares_memory(seq[1], a)  # the input itself: copied
    np.testing.assert_array_equal(seq[1], a)


def test_int4_input_as_int8(tmp_path):
    p = save(tmp_path, [helper.make_node("Cast", ["q"], ["f"], to=TensorProto.FLOAT)],
             [helper.make_tensor_value_info("q", 22, [4])],  # 22 = INT4 (onnx 1.12 has no name for it)
             [helper.make_tensor_value_info("f", TensorProto.FLOAT, [4])], opset=21)
    m = onnx.load(str(p))
    m.ir_version = 10
    onnx.save(m, str(p))
    s = basalt.InferenceSession(str(p))
    assert s.get_inputs()[0].type == "tensor(int4)"
    (f,) = s.run(None, {"q": np.array([-8, -1, 0, 7], np.int8)})
    assert f.tolist() == [-8, -1, 0, 7]
    with pytest.raises(basalt.InvalidArgumentError, match="out of range for int4"):
        s.run(None, {"q": np.array([8, 0, 0, 0], np.int8)})


def test_memoryview_model(relu_model):
    data = relu_model.read_bytes()
    s = basalt.InferenceSession(memoryview(data))
    assert s.get_inputs()[0].name == "x"


def test_profiling_through_session_options(relu_model, tmp_path):
    opts = basalt.SessionOptions()
    opts.enable_profiling = True
    s = basalt.InferenceSession(relu_model, opts)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    s.run(None, {s.get_inputs()[0].name: x})
    s.run(None, {s.get_inputs()[0].name: x})
    path = s.end_profiling(str(tmp_path / "trace.json"))
    trace = json.load(open(path))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    runs = [e for e in events if e.get("ph") == "X" and e.get("name") == "run"]
    nodes = [e for e in events if e.get("ph") == "X" and e.get("args", {}).get("op")]
    assert len(runs) == 2
    assert len(nodes) == 2 * len(s.get_outputs())  # one node per run in this one-op model
    off = basalt.InferenceSession(relu_model)
    assert off.end_profiling(str(tmp_path / "none.json")) == ""  # onnxruntime's answer when profiling is off
    assert not (tmp_path / "none.json").exists()


def test_session_options_pool_spin_level_plan_cache():
    o = basalt.SessionOptions()
    o.shared_pool = True
    o.spin_us = 0
    o.graph_optimization_level = 1
    o.plan_cache_entries = 3
    o.plan_cache_bytes = 1 << 26
    assert (o.shared_pool, o.spin_us, o.graph_optimization_level, o.plan_cache_entries) == (True, 0, 1, 3)
    o.graph_optimization_level = 99  # onnxruntime's ORT_ENABLE_ALL: kept as set, basalt's level 3 at load
    assert o.graph_optimization_level == basalt.GraphOptimizationLevel.ORT_ENABLE_ALL
    for attr, bad in (("spin_us", -1), ("graph_optimization_level", 7), ("plan_cache_entries", -2)):
        with pytest.raises(ValueError, match=attr):
            setattr(o, attr, bad)
    s = basalt.InferenceSession(str(DET), o)
    assert s.options.graph_optimization_level == 3
    st = s.memory_stats()
    for k in ("packed_weight_bytes", "plan_cache_hits", "plan_cache_misses", "plan_cache_evictions",
              "plan_cache_entries", "arena_bytes", "peak_run_bytes"):
        assert k in st and st[k] >= 0


def test_plan_memory_without_running_and_limit():
    if not DET.exists():
        pytest.skip(f"{DET} not present")
    s = basalt.InferenceSession(str(DET))
    p = s.plan_memory({"x": [1, 3, 320, 320]})
    assert p["arena_bytes"] > 0 and p["peak_bytes"] >= p["arena_bytes"] + p["inputs_bytes"]
    assert p["inputs_bytes"] == 3 * 320 * 320 * 4
    assert s.memory_stats()["plan_cache_entries"] >= 1
    # A limit between what a 64x64 and a 320x320 input need: the large run is refused before
    # allocating, the small one still runs on the same session.
    p_small = s.plan_memory({"x": [1, 3, 64, 64]})
    assert p_small["peak_bytes"] < p["peak_bytes"]
    o = basalt.SessionOptions()
    o.memory_limit = (p_small["peak_bytes"] + p["peak_bytes"]) // 2
    small = basalt.InferenceSession(str(DET), o)
    assert small.plan_memory({"x": [1, 3, 320, 320]})["peak_bytes"] > o.memory_limit  # planning never fails on the limit
    with pytest.raises(basalt.MemoryLimitError, match="more than the memory limit"):
        small.run(None, {"x": np.zeros((1, 3, 320, 320), np.float32)})
    out = small.run(None, {"x": np.zeros((1, 3, 64, 64), np.float32)})  # still usable for smaller inputs
    assert out[0].shape[-2:] == (64, 64)


def test_run_into_fills_caller_arrays():
    if not DET.exists():
        pytest.skip(f"{DET} not present")
    s = basalt.InferenceSession(str(DET))
    x = np.random.default_rng(3).uniform(0, 1, (1, 3, 96, 128)).astype(np.float32)
    ref = s.run(None, {"x": x})[0]
    out = np.full(ref.shape, -1, np.float32)
    s.run_into({s.get_outputs()[0].name: out}, {"x": x})
    assert np.array_equal(out, ref)
    with pytest.raises(basalt.InvalidArgumentError, match=s.get_outputs()[0].name):
        s.run_into({s.get_outputs()[0].name: np.zeros((1, 1, 5, 5), np.float32)}, {"x": x})
    with pytest.raises(ValueError, match="C-contiguous"):
        s.run_into({s.get_outputs()[0].name: np.zeros(ref.shape[::-1], np.float32).T}, {"x": x})


def test_dynamic_pool_reuses_data_dependent_tensors(tmp_path):
    # NonZero's output size depends on the data: it has no planned slot and comes from the
    # session's bounded pool, whose idle blocks later runs reuse.
    p = save(tmp_path, [helper.make_node("NonZero", ["x"], ["nz"]),
                        helper.make_node("Transpose", ["nz"], ["y"], perm=[1, 0])],
             [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, None])],
             [helper.make_tensor_value_info("y", TensorProto.INT64, [None, 2])])
    o = basalt.SessionOptions()
    o.dynamic_pool_bytes = 1 << 20
    assert o.dynamic_pool_bytes == 1 << 20
    s = basalt.InferenceSession(p, o)
    rng = np.random.default_rng(3)
    x = (rng.uniform(size=(64, 48)) > 0.5).astype(np.float32)
    want = np.argwhere(x != 0)
    # nz comes from the pool, and so does the graph output y: the caller holds y's block until it
    # drops the array. Run 2 still holds run 1's y while it runs (a second block); after that, the
    # two blocks alternate and nothing new is allocated.
    for _ in range(2):
        (y,) = s.run(None, {"x": x})
    settled = s.memory_stats()
    for _ in range(5):
        (y,) = s.run(None, {"x": x})
        np.testing.assert_array_equal(y, want)
    st = s.memory_stats()
    assert st["dynamic_pool_hits"] - settled["dynamic_pool_hits"] >= 10, st  # nz and y, 5 runs
    assert st["dynamic_pool_misses"] == settled["dynamic_pool_misses"], st
    assert st["dynamic_pool_held_bytes"] <= 1 << 20
    assert st["dynamic_pool_peak_bytes"] >= want.size * 8
    none = basalt.SessionOptions()
    none.dynamic_pool_bytes = 0  # keep no idle blocks: every run allocates anew, results equal
    s0 = basalt.InferenceSession(p, none)
    for _ in range(3):
        np.testing.assert_array_equal(s0.run(None, {"x": x})[0], want)
    assert s0.memory_stats()["dynamic_pool_held_bytes"] == 0


def test_loop_scan_output_comes_from_the_pool(tmp_path):
    # The stacked scan output of a Loop has a data-dependent length (trip count M is an input):
    # it comes from the session's bounded pool, so repeated runs reuse its block.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Add", ["x_in", "x_in"], ["x_out"]),
         helper.make_node("Identity", ["x_out"], ["scan"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, [256])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, [256]),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [256])])
    cond = numpy_helper.from_array(np.array(True), "cond")
    p = save(tmp_path, [helper.make_node("Loop", ["M", "cond", "x"], ["x_final", "stacked"], body=body),
                        helper.make_node("Neg", ["stacked"], ["y"])],
             [helper.make_tensor_value_info("M", TensorProto.INT64, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [256])],
             [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 256])], inits=[cond])
    s = basalt.InferenceSession(p)
    x = np.linspace(-1, 1, 256, dtype=np.float32)
    m = np.array(6, np.int64)
    want = -np.stack([x * 2 ** (k + 1) for k in range(6)])
    (y,) = s.run(["y"], {"M": m, "x": x})
    np.testing.assert_allclose(y, want, rtol=1e-6)
    # The output array is the pool's block itself (no copy): while y holds it, a run needs another.
    held = s.run(["y"], {"M": m, "x": x})[0]
    assert s.memory_stats()["dynamic_pool_misses"] > 0 and not np.shares_memory(held, y)
    del y, held
    first = s.memory_stats()
    for _ in range(4):
        np.testing.assert_allclose(s.run(["y"], {"M": m, "x": x})[0], want, rtol=1e-6)
    st = s.memory_stats()
    assert st["dynamic_pool_hits"] - first["dynamic_pool_hits"] >= 4, st
    assert st["dynamic_pool_misses"] == first["dynamic_pool_misses"], st
