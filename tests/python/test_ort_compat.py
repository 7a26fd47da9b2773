"""onnxruntime programs on basalt, unchanged: every item of the onnxruntime Python API used the ORT
way, through the `onnxruntime` alias package (build/python/compat), with results asserted."""
import json
import os
import pathlib
import threading
import time
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import onnxruntime as ort  # noqa: E402  (conftest puts build/python/compat first)
from onnxruntime.capi import onnxruntime_pybind11_state as state  # noqa: E402
from onnxruntime.capi.onnxruntime_pybind11_state import (  # noqa: E402
    Fail, InvalidArgument, InvalidGraph, InvalidProtobuf, NoSuchFile, NotImplemented, RuntimeException,
)

import basalt  # noqa: E402

F = TensorProto.FLOAT


def save(tmp_path, nodes, inputs, outputs, inits=(), name="m.onnx", opset=17, **model_kw):
    g = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    model_kw.setdefault("opset_imports", [helper.make_opsetid("", opset)])
    m = helper.make_model(g, **model_kw)
    p = tmp_path / name
    onnx.save(m, str(p))
    return str(p)


@pytest.fixture
def add_model(tmp_path):
    """z = x + w, x: float[N, 4] (N symbolic), w: an initializer [4] that is also a graph input."""
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    return save(tmp_path, [helper.make_node("Add", ["x", "w"], ["z"])],
                [helper.make_tensor_value_info("x", F, ["N", 4]), helper.make_tensor_value_info("w", F, [4])],
                [helper.make_tensor_value_info("z", F, ["N", 4])], inits=[w], name="add.onnx")


@pytest.fixture
def two_out_model(tmp_path):
    """a = x * 2, b = Relu(x); x: float[2, 3]."""
    two = numpy_helper.from_array(np.float32([2]), "two")
    return save(tmp_path, [helper.make_node("Mul", ["x", "two"], ["a"]), helper.make_node("Relu", ["x"], ["b"])],
                [helper.make_tensor_value_info("x", F, [2, 3])],
                [helper.make_tensor_value_info("a", F, [2, 3]), helper.make_tensor_value_info("b", F, [2, 3])],
                inits=[two], name="two_out.onnx")


X23 = np.float32([[-1, 2, -3], [4, -5, 6]])


# ---------------------------------------------------------------- module level

def test_alias_is_basalt_and_module_functions():
    assert ort.__version__.startswith("1.30.0+basalt") and ort.InferenceSession is basalt.InferenceSession
    assert ort.get_available_providers() == ["CPUExecutionProvider"]
    assert "CUDAExecutionProvider" in ort.get_all_providers() and ort.get_all_providers()[-1] == "CPUExecutionProvider"
    assert ort.get_device() == "CPU" and ort.get_version_string() == "1.30.0"
    assert "basalt" in ort.get_build_info()
    assert [int(ort.GraphOptimizationLevel.ORT_DISABLE_ALL), int(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC),
            int(ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED), int(ort.GraphOptimizationLevel.ORT_ENABLE_LAYOUT),
            int(ort.GraphOptimizationLevel.ORT_ENABLE_ALL)] == [0, 1, 2, 3, 99]
    assert int(ort.ExecutionMode.ORT_PARALLEL) == 1 and int(ort.ExecutionOrder.PRIORITY_BASED) == 1
    ort.set_default_logger_severity(3)
    ort.set_default_logger_verbosity(0)
    with pytest.raises(InvalidArgument):
        ort.set_default_logger_severity(7)
    from onnxruntime.capi import _pybind_state
    assert _pybind_state.Fail is Fail


def test_set_seed_makes_unseeded_random_ops_repeatable(tmp_path):
    p = save(tmp_path, [helper.make_node("RandomNormal", [], ["r"], shape=[64])], [],
             [helper.make_tensor_value_info("r", F, [64])])
    ort.set_seed(1234)
    a = ort.InferenceSession(p).run(None, {})[0]
    b = ort.InferenceSession(p).run(None, {})[0]
    ort.set_seed(99)
    c = ort.InferenceSession(p).run(None, {})[0]
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert 0.5 < a.std() < 1.5  # still normal(0, 1) draws
    with pytest.raises(TypeError):
        ort.set_seed("x")


# ---------------------------------------------------------------- errors

def test_each_mistake_raises_onnxruntimes_class_and_basalts(tmp_path, add_model, two_out_model):
    s = ort.InferenceSession(add_model)
    x = np.ones((2, 4), np.float32)
    cases = [
        (lambda: s.run(None, {"nope": x}), InvalidArgument, basalt.InvalidArgumentError, "nope"),
        (lambda: s.run(None, {"x": x.astype(np.float64)}), InvalidArgument, basalt.InvalidArgumentError, "dtype"),
        (lambda: s.run(None, {"x": np.ones(4, np.float32)}), InvalidArgument, basalt.InvalidArgumentError, "rank"),
        (lambda: s.run(["zz"], {"x": x}), InvalidArgument, basalt.InvalidArgumentError, "zz"),
        (lambda: ort.InferenceSession(str(tmp_path / "missing.onnx")), NoSuchFile, basalt.BasaltIOError, "missing"),
        (lambda: ort.InferenceSession(b"\x08\x07garbage\xff\xff"), InvalidProtobuf, basalt.InvalidModelError, ""),
    ]
    dangling = save(tmp_path, [helper.make_node("Relu", ["ghost"], ["y"])], [helper.make_tensor_value_info("x", F, [1])],
                    [helper.make_tensor_value_info("y", F, [1])], name="dangling.onnx")
    cases.append((lambda: ort.InferenceSession(dangling), InvalidGraph, basalt.InvalidModelError, "ghost"))
    cases.append((lambda: ort.InferenceSession(dangling), Fail, basalt.InvalidModelError, "ghost"))
    custom = save(tmp_path, [helper.make_node("NoSuchOp", ["x"], ["y"], domain="com.example")],
                  [helper.make_tensor_value_info("x", F, [1])], [helper.make_tensor_value_info("y", F, [1])],
                  name="custom.onnx", opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])
    cases.append((lambda: ort.InferenceSession(custom), NotImplemented, basalt.UnsupportedError, "NoSuchOp"))
    o = ort.SessionOptions()
    o.memory_limit = 4096  # basalt's knob, on the same SessionOptions
    small = ort.InferenceSession(add_model, o)
    big = np.ones((4096, 4), np.float32)
    cases.append((lambda: small.run(None, {"x": big}), RuntimeException, basalt.MemoryLimitError, "memory limit of 4096"))
    for call, ort_cls, basalt_cls, text in cases:
        for cls in (ort_cls, basalt_cls):
            with pytest.raises(cls, match=text) as e:
                call()
            assert isinstance(e.value, basalt.BasaltError)
    # the sessions still work after every error
    assert np.allclose(s.run(None, {"x": x})[0], x + np.arange(4))
    assert small.run(None, {"x": x})[0].shape == (2, 4)
    for name in ("Fail", "InvalidArgument", "NoSuchFile", "NoModel", "EngineError", "RuntimeException",
                 "InvalidProtobuf", "ModelLoaded", "NotImplemented", "InvalidGraph", "EPFail"):
        cls = getattr(state, name)
        assert issubclass(cls, Exception) and cls.__module__ == "onnxruntime.capi.onnxruntime_pybind11_state"


# ---------------------------------------------------------------- SessionOptions

def test_session_options_every_attribute(add_model, tmp_path):
    o = ort.SessionOptions()
    defaults = dict(intra_op_num_threads=0, inter_op_num_threads=0, execution_mode=ort.ExecutionMode.ORT_SEQUENTIAL,
                    execution_order=ort.ExecutionOrder.DEFAULT, enable_cpu_mem_arena=True, enable_mem_pattern=True,
                    enable_mem_reuse=True, enable_profiling=False, profile_file_prefix="onnxruntime_profile_",
                    optimized_model_filepath="", log_severity_level=2, log_verbosity_level=0, logid="",
                    use_deterministic_compute=False, graph_optimization_level=ort.GraphOptimizationLevel.ORT_ENABLE_ALL)
    for k, v in defaults.items():
        assert getattr(o, k) == v, k
    o.intra_op_num_threads = 1
    o.inter_op_num_threads = 2
    o.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    o.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    o.log_severity_level = 3
    o.log_verbosity_level = 1
    o.logid = "job"
    o.use_deterministic_compute = True
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    assert (o.intra_op_num_threads, o.inter_op_num_threads, o.execution_mode, o.logid) == \
        (1, 2, ort.ExecutionMode.ORT_PARALLEL, "job")
    for attr, bad in (("log_severity_level", 9), ("inter_op_num_threads", -1), ("graph_optimization_level", 5),
                      ("execution_mode", 7), ("intra_op_num_threads", -2)):
        with pytest.raises(InvalidArgument, match=attr.split("_num")[0] if attr != "execution_mode" else "execution"):
            setattr(o, attr, bad)
    with pytest.raises(AttributeError):
        o.enable_cpu_arena = False  # a typo
    s = ort.InferenceSession(add_model, o)
    assert s.get_session_options() is o
    assert s.options.threads == 1 and s.options.graph_optimization_level == 2
    x = np.ones((3, 4), np.float32)
    r1, r2 = s.run(None, {"x": x})[0], s.run(None, {"x": x})[0]
    assert np.array_equal(r1, r2)  # deterministic


def test_memory_flags_map_onto_the_arena_and_plans(add_model):
    o = ort.SessionOptions()
    o.enable_cpu_mem_arena = False
    s = ort.InferenceSession(add_model, o)
    assert s.options.memory_plan is False
    o = ort.SessionOptions()
    o.enable_mem_pattern = False
    s = ort.InferenceSession(add_model, o)
    assert s.options.plan_cache_entries == 0 and s.options.memory_plan is True
    x = np.ones((2, 4), np.float32)
    s.run(None, {"x": x})
    assert s.memory_stats()["plan_cache_entries"] == 0
    o = ort.SessionOptions()
    o.enable_mem_reuse = False
    assert ort.InferenceSession(add_model, o).options.memory_plan is False
    d = ort.InferenceSession(add_model)
    assert d.options.memory_plan is True and d.options.plan_cache_entries > 0


def test_config_entries(add_model, tmp_path):
    o = ort.SessionOptions()
    o.add_session_config_entry("session.intra_op.allow_spinning", "0")
    o.add_session_config_entry("session.set_denormal_as_zero", "1")
    o.add_session_config_entry("my.own.key", "kept")
    assert o.get_session_config_entry("my.own.key") == "kept"
    assert o.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    with pytest.raises(InvalidArgument, match="does not have configuration with key: absent"):
        o.get_session_config_entry("absent")
    with pytest.raises(InvalidArgument, match="maximum length"):
        o.add_session_config_entry("", "x")
    with pytest.raises(InvalidArgument, match="'0' or '1'"):
        o.add_session_config_entry("session.set_denormal_as_zero", "yes")
    with pytest.raises(NotImplemented, match="ONNX"):
        o.add_session_config_entry("session.load_model_format", "ORT")
    s = ort.InferenceSession(add_model, o)
    assert s.options.spin_us == 0 and s.options.denormals_as_zero is True
    assert s.pool_stats()["spin_us"] == 0


def test_denormals_as_zero_changes_results_only_for_denormals(tmp_path):
    p = save(tmp_path, [helper.make_node("Mul", ["x", "y"], ["z"])],
             [helper.make_tensor_value_info("x", F, [64]), helper.make_tensor_value_info("y", F, [64])],
             [helper.make_tensor_value_info("z", F, [64])])
    x = np.full(64, 1e-39, np.float32)  # denormal
    x[:8] = 3.0
    y = np.ones(64, np.float32)
    plain = ort.InferenceSession(p).run(None, {"x": x, "y": y})[0]
    o = ort.SessionOptions()
    o.add_session_config_entry("session.set_denormal_as_zero", "1")
    flushed = ort.InferenceSession(p, o).run(None, {"x": x, "y": y})[0]
    assert np.array_equal(plain, x) and np.all(flushed[8:] == 0) and np.array_equal(flushed[:8], x[:8])
    # the caller's mode is restored after the run
    again = ort.InferenceSession(p).run(None, {"x": x, "y": y})[0]
    assert np.array_equal(again, x)


def test_free_dimension_overrides(tmp_path, add_model):
    o = ort.SessionOptions()
    o.add_free_dimension_override_by_name("N", 3)
    s = ort.InferenceSession(add_model, o)
    assert s.get_inputs()[0].shape == [3, 4]
    assert s.run(None, {"x": np.zeros((3, 4), np.float32)})[0].shape == (3, 4)
    with pytest.raises(InvalidArgument, match="dimension 0 must be 3"):
        s.run(None, {"x": np.zeros((5, 4), np.float32)})
    x = helper.make_tensor_value_info("x", F, ["batch", 2])
    x.type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    p = save(tmp_path, [helper.make_node("Relu", ["x"], ["y"])], [x], [helper.make_tensor_value_info("y", F, ["batch", 2])],
             name="den.onnx")
    o = ort.SessionOptions()
    o.add_free_dimension_override_by_denotation("DATA_BATCH", 7)
    assert ort.InferenceSession(p, o).get_inputs()[0].shape == [7, 2]
    with pytest.raises(InvalidArgument, match=">= 0"):
        o.add_free_dimension_override_by_name("N", -1)


def test_add_initializer_replaces_weights(add_model):
    w = np.float32([10, 20, 30, 40])
    o = ort.SessionOptions()
    o.add_initializer("w", ort.OrtValue.ortvalue_from_numpy(w))
    s = ort.InferenceSession(add_model, o)
    assert np.array_equal(s.run(None, {"x": np.ones((1, 4), np.float32)})[0], [[11, 21, 31, 41]])
    bad = ort.SessionOptions()
    bad.add_initializer("w", ort.OrtValue.ortvalue_from_numpy(np.ones(5, np.float32)))
    with pytest.raises(InvalidArgument, match="'w' is float32 \\[4\\]"):
        ort.InferenceSession(add_model, bad)
    bad = ort.SessionOptions()
    bad.add_initializer("nope", ort.OrtValue.ortvalue_from_numpy(w))
    with pytest.raises(InvalidArgument, match="not an initializer"):
        ort.InferenceSession(add_model, bad)
    with pytest.raises(TypeError):
        bad.add_initializer("w", w)
    ext = ort.SessionOptions()
    ext.add_external_initializers(["w"], [ort.OrtValue.ortvalue_from_numpy(w * 2)])
    assert ort.InferenceSession(add_model, ext).run(None, {"x": np.zeros((1, 4), np.float32)})[0][0, 3] == 80


def test_optimized_model_filepath_and_profiling(tmp_path, two_out_model, monkeypatch):
    monkeypatch.chdir(tmp_path)
    o = ort.SessionOptions()
    o.optimized_model_filepath = str(tmp_path / "opt.onnx")
    o.enable_profiling = True
    o.profile_file_prefix = "myprof"
    before = time.time_ns()
    s = ort.InferenceSession(two_out_model, o)
    assert os.path.getsize(tmp_path / "opt.onnx") > 0
    ref = s.run(None, {"x": X23})
    again = ort.InferenceSession(str(tmp_path / "opt.onnx")).run(None, {"x": X23})
    assert all(np.array_equal(a, b) for a, b in zip(ref, again))
    start = s.get_profiling_start_time_ns()
    assert before - 10**9 <= start <= time.time_ns()
    name = s.end_profiling()
    assert name.startswith("myprof_") and name.endswith(".json")
    trace = json.load(open(name))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    assert any(e.get("name") == "run" for e in events)
    assert ort.InferenceSession(two_out_model).end_profiling() == ""


def test_register_custom_ops_library(tmp_path):
    o = ort.SessionOptions()
    with pytest.raises(NoSuchFile):
        o.register_custom_ops_library(str(tmp_path / "libnone.so"))
    lib = tmp_path / "libops.so"
    lib.write_bytes(b"\x7fELF")
    with pytest.raises(NotImplemented, match="custom operator libraries"):
        o.register_custom_ops_library(str(lib))


# ---------------------------------------------------------------- InferenceSession

def test_providers_follow_onnxruntimes_rules(add_model):
    with pytest.warns(UserWarning, match="Specified provider 'CUDAExecutionProvider' is not in available provider"):
        s = ort.InferenceSession(add_model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        s = ort.InferenceSession(add_model, providers=[("CPUExecutionProvider", {"use_arena": 0})])
    assert s.get_provider_options() == {"CPUExecutionProvider": {"use_arena": "0"}}
    assert s.options.memory_plan is False
    s = ort.InferenceSession(add_model, providers=["CPUExecutionProvider"], provider_options=[{"a": 1}])
    assert s.get_provider_options()["CPUExecutionProvider"] == {"a": "1"}
    with pytest.raises(ValueError, match="same length"):
        ort.InferenceSession(add_model, providers=["CPUExecutionProvider"], provider_options=[{}, {}])
    with pytest.raises(ValueError, match="duplicate"):
        ort.InferenceSession(add_model, providers=["CPUExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ValueError, match="strings or"):
        ort.InferenceSession(add_model, providers=[3])
    with pytest.warns(UserWarning):
        s.set_providers(["TensorrtExecutionProvider"])
    assert s.get_providers() == ["CPUExecutionProvider"]
    s.disable_fallback()
    s.enable_fallback()
    assert s.run(None, {"x": np.ones((1, 4), np.float32)})[0].shape == (1, 4)


def test_metadata_node_args_and_overridable_initializers(tmp_path, add_model):
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "det_graph",
                          [helper.make_tensor_value_info("x", F, ["N", None, 3])],
                          [helper.make_tensor_value_info("y", F, ["N", None, 3])], doc_string="the graph's doc")
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], producer_name="paddle2onnx",
                          domain="ai.example", model_version=7, doc_string="a detector")
    helper.set_model_props(m, {"character": "abc\ndef", "shape": "[3,48,320]"})
    p = tmp_path / "meta.onnx"
    onnx.save(m, str(p))
    s = ort.InferenceSession(str(p))
    meta = s.get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.graph_description, meta.domain, meta.description,
            meta.version) == ("paddle2onnx", "det_graph", "the graph's doc", "ai.example", "a detector", 7)
    assert meta.custom_metadata_map == {"character": "abc\ndef", "shape": "[3,48,320]"}
    (i,) = s.get_inputs()
    assert (i.name, i.type, i.shape) == ("x", "tensor(float)", ["N", None, 3])
    a = ort.InferenceSession(add_model)
    assert [i.name for i in a.get_inputs()] == ["x"]
    (w,) = a.get_overridable_initializers()
    assert (w.name, w.type, w.shape) == ("w", "tensor(float)", [4])
    # an overridable initializer may still be fed
    out = a.run(None, {"x": np.zeros((1, 4), np.float32), "w": np.full(4, 5, np.float32)})[0]
    assert np.all(out == 5)


def test_run_options_terminate_from_another_thread(tmp_path, add_model):
    # A Loop of 50M cheap iterations: seconds of work, each iteration a node the terminate flag is checked before.
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]), helper.make_node("Add", ["v_in", "one"], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v_in", F, [1])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("v_out", F, [1])],
        initializer=[numpy_helper.from_array(np.float32([1]), "one")])
    inits = [numpy_helper.from_array(np.array(50_000_000, np.int64), "M"),
             numpy_helper.from_array(np.array(True), "c")]
    p = save(tmp_path, [helper.make_node("Loop", ["M", "c", "v0"], ["v"], body=body)],
             [helper.make_tensor_value_info("v0", F, [1])], [helper.make_tensor_value_info("v", F, [1])], inits=inits,
             name="loop.onnx")
    s = ort.InferenceSession(p)
    ro = ort.RunOptions()
    ro.logid, ro.log_severity_level = "slow", 3
    ro.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    assert ro.get_run_config_entry("memory.enable_memory_arena_shrinkage") == "cpu:0"
    threading.Timer(0.3, lambda: setattr(ro, "terminate", True)).start()
    t0 = time.monotonic()
    with pytest.raises(Fail, match="terminated"):
        s.run(None, {"v0": np.zeros(1, np.float32)}, ro)
    assert time.monotonic() - t0 < 10
    assert ro.terminate is True
    with pytest.raises(basalt.CancelledError):  # still set: the next run stops at once
        ort.InferenceSession(add_model).run(None, {"x": np.ones((1, 4), np.float32)}, ro)
    ro.terminate = False
    a = ort.InferenceSession(add_model)
    assert a.run(None, {"x": np.ones((1, 4), np.float32)}, ro)[0].shape == (1, 4)
    with pytest.raises(TypeError):
        a.run(None, {"x": np.ones((1, 4), np.float32)}, run_options={"terminate": True})


def test_ortvalue_round_trips_and_run_with_ort_values(two_out_model):
    x = X23.copy()
    v = ort.OrtValue.ortvalue_from_numpy(x)
    assert v.data_ptr() == x.ctypes.data  # shared, not copied
    assert (v.shape(), v.data_type(), v.element_type(), v.device_name()) == ([2, 3], "tensor(float)", 1, "cpu")
    assert v.is_tensor() and v.has_value() and not v.is_tensor_sequence() and not v.is_sparse_tensor()
    assert np.array_equal(v.numpy(), x)
    v.update_inplace(np.zeros((2, 3), np.float32))
    assert np.all(x == 0)
    v.update_inplace(X23)
    z = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    assert z.shape() == [2, 3] and z.data_type() == "tensor(float)"
    assert ort.OrtValue.ortvalue_from_shape_and_type((4,), TensorProto.INT64).numpy().dtype == np.int64
    with pytest.raises(InvalidArgument, match="cpu"):
        ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0)
    with pytest.raises(InvalidArgument):
        z.update_inplace(np.zeros(3, np.float32))
    s = ort.InferenceSession(two_out_model)
    a, b = s.run_with_ort_values(["a", "b"], {"x": v})
    assert isinstance(a, ort.OrtValue) and np.array_equal(a.numpy(), X23 * 2) and np.array_equal(b.numpy(), np.maximum(X23, 0))
    (b_only,) = s.run_with_ort_values(["b"], {"x": v})
    assert np.array_equal(b_only.numpy(), np.maximum(X23, 0))
    with pytest.raises(TypeError):
        s.run_with_ort_values(None, {"x": X23})


def test_iobinding_preallocated_outputs_allocate_nothing(two_out_model):
    s = ort.InferenceSession(two_out_model)
    io = s.io_binding()
    a_out = ort.OrtValue.ortvalue_from_shape_and_type([2, 3], np.float32)
    b_buf = np.empty((2, 3), np.float32)
    x = X23.copy()
    io.bind_cpu_input("x", x)
    io.bind_ortvalue_output("a", a_out)
    io.bind_output("b", "cpu", 0, np.float32, [2, 3], b_buf.ctypes.data)
    io.synchronize_inputs()
    s.run_with_iobinding(io)
    io.synchronize_outputs()
    outs = io.get_outputs()
    assert [o.data_ptr() for o in outs] == [a_out.data_ptr(), b_buf.ctypes.data]
    assert np.array_equal(a_out.numpy(), X23 * 2) and np.array_equal(b_buf, np.maximum(X23, 0))
    copies = io.copy_outputs_to_cpu()
    assert np.array_equal(copies[0], X23 * 2) and not np.shares_memory(copies[0], a_out.numpy())
    # steady state: no arena, plan, pool or heap allocation per call
    st0 = s.memory_stats()
    for k in range(50):
        x[:] = X23 * k
        s.run_with_iobinding(io)
    st = s.memory_stats()
    assert np.array_equal(b_buf, np.maximum(X23 * 49, 0)) and np.array_equal(a_out.numpy(), X23 * 98)
    for key in ("arena_maps", "arena_grows", "plan_cache_misses", "dynamic_pool_misses", "heap_fallbacks"):
        assert st[key] == st0[key], key
    assert st["last_run_heap_bytes"] == 0 and st["plan_cache_hits"] >= st0["plan_cache_hits"] + 50
    assert io.get_outputs()[0] is outs[0]  # the same OrtValue, not a new one each run


def test_iobinding_by_name_buffer_inputs_and_errors(two_out_model):
    s = ort.InferenceSession(two_out_model)
    io = s.io_binding()
    x = X23.copy()
    io.bind_input("x", "cpu", 0, np.float32, [2, 3], x.ctypes.data)
    io.bind_output("b")  # by name: basalt allocates it
    s.run_with_iobinding(io)
    (b,) = io.get_outputs()
    assert np.array_equal(b.numpy(), np.maximum(X23, 0))
    io.clear_binding_outputs()
    assert io.get_outputs() == []
    io.bind_output("a")
    s.run_with_iobinding(io)
    assert np.array_equal(io.get_outputs()[0].numpy(), X23 * 2)
    with pytest.raises(InvalidArgument, match="unknown output 'zz'"):
        io.bind_output("zz")
    with pytest.raises(InvalidArgument, match="cpu"):
        io.bind_output("a", "cuda", 0)
    wrong = s.io_binding()
    wrong.bind_cpu_input("x", X23)
    wrong.bind_ortvalue_output("a", ort.OrtValue.ortvalue_from_shape_and_type([3, 2], np.float32))
    with pytest.raises(InvalidArgument, match="'a'"):
        s.run_with_iobinding(wrong)
    io.clear_binding_inputs()
    with pytest.raises(InvalidArgument, match="required"):
        s.run_with_iobinding(io)
    with pytest.raises(TypeError):
        ort.InferenceSession(two_out_model).run_with_iobinding(io)  # another session's binding


def test_run_async_calls_back(two_out_model):
    s = ort.InferenceSession(two_out_model)
    done = threading.Event()
    got = {}

    def cb(outs, user_data, err):
        got.update(outs=outs, user=user_data, err=err)
        done.set()

    s.run_async(None, {"x": X23}, cb, "ctx")
    assert done.wait(30) and got["err"] == "" and got["user"] == "ctx"
    assert np.array_equal(got["outs"][0], X23 * 2)
    done.clear()
    s.run_async(None, {"nope": X23}, cb, None)
    assert done.wait(30) and got["outs"] is None and "nope" in got["err"]


def test_unknown_keyword_and_bad_options(add_model):
    with pytest.raises(TypeError, match="unexpected"):
        ort.InferenceSession(add_model, sess_option=ort.SessionOptions())
    with pytest.raises(TypeError):
        ort.InferenceSession(add_model, "fast")
    assert ort.InferenceSession(add_model, disabled_optimizers=["ConstantFolding"]).get_inputs()[0].name == "x"
    assert ort.InferenceSession(pathlib.Path(add_model)).get_outputs()[0].name == "z"
    with open(add_model, "rb") as f:
        assert ort.InferenceSession(f.read()).get_outputs()[0].name == "z"


def test_newer_provider_apis_and_unsupported_features(add_model):
    assert ort.get_ep_devices() == []
    o = ort.SessionOptions()
    o.add_provider("CPUExecutionProvider", {})
    o.set_provider_selection_policy(ort.OrtExecutionProviderDevicePolicy.PREFER_CPU)
    o.set_load_cancellation_flag(False)
    assert o.has_providers() is False
    with pytest.raises(NotImplemented, match="CUDAExecutionProvider"):
        o.add_provider("CUDAExecutionProvider", {})
    for make in (lambda: ort.LoraAdapter(), lambda: ort.SparseTensor(), lambda: ort.ModelCompiler(),
                 lambda: ort.register_execution_provider_library("x", "/lib/x.so"),
                 lambda: ort.RunOptions().add_active_adapter(None)):
        with pytest.raises(NotImplemented):
            make()
    ort.create_and_register_allocator(ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                                                        ort.OrtMemType.DEFAULT), ort.OrtArenaCfg(0, -1, -1, -1))
    with pytest.raises(InvalidArgument):
        ort.OrtMemoryInfo("Cuda")
    assert ort.InferenceSession(add_model, o).run(None, {"x": np.ones((1, 4), np.float32)})[0].shape == (1, 4)


def _parity():
    import importlib.util
    path = pathlib.Path(__file__).resolve().parents[1] / "parity" / "run_parity.py"
    spec = importlib.util.spec_from_file_location("run_parity", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_real_models_in_the_style_of_ort_programs_match_ort(tmp_path):
    """Each real model (default shapes) loaded the way the OCR, wake-word and VAD programs load it,
    through the alias, against ONNX Runtime 1.30's outputs (the parity suite's cache, or a fresh ORT
    run through node), with the parity suite's acceptance rule."""
    import subprocess
    rp = _parity()
    root = pathlib.Path(__file__).resolve().parents[2]
    models = root / "models"
    cases = [c for c in rp.real_cases(str(models), True) if os.path.exists(c.model_path)]
    if not cases:
        pytest.skip("no real models in models/ (scripts/prepare_models.sh fetches them)")
    r = subprocess.run(["bash", str(root / "scripts" / "setup_ort.sh")], capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        pytest.skip("ONNX Runtime for node is not installed (scripts/setup_ort.sh)")
    ort_path = r.stdout.strip().splitlines()[-1]
    env = dict(os.environ, ORT_NODE_PATH=ort_path)
    for c in cases:
        so = ort.SessionOptions()
        so.inter_op_num_threads = 1
        so.intra_op_num_threads = 1
        so.log_severity_level = 3
        so.enable_cpu_mem_arena = False
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        sess = ort.InferenceSession(c.model_path, sess_options=so, providers=["CPUExecutionProvider"])
        assert isinstance(sess.get_modelmeta().custom_metadata_map, dict)
        feeds = c.make_inputs()
        names = [i.name for i in sess.get_inputs()]
        assert set(n for n, _ in feeds) <= set(names + [i.name for i in sess.get_overridable_initializers()])
        got = sess.run(None, dict(feeds))
        d = tmp_path / c.label.replace(" ", "_").replace("/", "_")
        ind, od = d / "in", d / "ort"
        ind.mkdir(parents=True)
        listing = []
        for k, (n, a) in enumerate(feeds):
            np.save(ind / f"input_{k}.npy", a)
            listing.append({"name": n, "file": f"input_{k}.npy"})
        json.dump(listing, open(ind / "inputs.json", "w"))
        rc, msg, _, ref_dir = rp.ort_reference(str(models), c.model_path, feeds, str(ind), str(od), ort_path, 1, 600, env)
        assert rc == 0, f"{c.label}: ORT failed: {msg}"
        ok, detail = rp.compare([(o.name, g) for o, g in zip(sess.get_outputs(), got)], rp.load_outputs(ref_dir))
        assert ok, f"{c.label}: {detail}"
