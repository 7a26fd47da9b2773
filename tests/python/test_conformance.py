"""The ONNX node conformance tests (Debian's libonnx-testdata) through the Python module.

Each test's inputs are read with onnx.numpy_helper, fed to basalt.InferenceSession.run as numpy
arrays (lists for sequences, None for empty optionals) and compared as the ONNX runner compares:
rtol 1e-3, atol 1e-7, NaN equals NaN; integers, bools and strings exactly. This exercises every
dtype conversion of the binding in both directions. Tests listed in
tests/conformance/expected_failures/ are skipped, as `basalt conformance` skips them.
"""
import glob
import os

import numpy as np
import pytest

import basalt

onnx = pytest.importorskip("onnx")
from onnx import numpy_helper  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NODE_DIR = "/usr/share/libonnx-testdata/data/node"


def expected_failures():
    out = {}
    for f in glob.glob(os.path.join(ROOT, "tests", "conformance", "expected_failures", "*.txt")):
        for line in open(f):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            name, _, reason = line.partition(" ")
            name, _, where = name.partition("@")
            if not where or where in NODE_DIR:
                out[name] = reason.strip()
    return out


XFAIL = expected_failures()
TESTS = sorted(d for d in glob.glob(os.path.join(NODE_DIR, "test_*")) if os.path.isfile(os.path.join(d, "model.onnx")))


def read_value(path, type_proto):
    """A .pb file as the Python value basalt takes/returns for that ONNX type."""
    data = open(path, "rb").read()
    which = type_proto.WhichOneof("value")
    if which == "sequence_type":
        p = onnx.SequenceProto()
        p.ParseFromString(data)
        return [np.asarray(a) for a in numpy_helper.to_list(p)]
    if which == "optional_type":
        p = onnx.OptionalProto()
        p.ParseFromString(data)
        v = numpy_helper.to_optional(p)
        return [np.asarray(a) for a in v] if isinstance(v, list) else v
    p = onnx.TensorProto()
    p.ParseFromString(data)
    a = numpy_helper.to_array(p)
    if p.data_type == onnx.TensorProto.BFLOAT16 and a.dtype == np.uint16:
        # onnx 1.12 reads bfloat16 as its raw bits; basalt takes those bits for a bfloat16 input
        # and returns bfloat16 outputs as float32 (exact), so compare in float32
        a = (a.astype(np.uint32) << 16).view(np.float32)
    return a


def assert_same(got, ref, what):
    if ref is None:
        assert got is None, f"{what}: expected None (empty optional)"
        return
    if isinstance(ref, list):
        assert isinstance(got, list), f"{what}: expected a list (sequence), got {type(got).__name__}"
        assert len(got) == len(ref), f"{what}: sequence length {len(got)}, expected {len(ref)}"
        for i, (g, r) in enumerate(zip(got, ref)):
            assert_same(g, r, f"{what}[{i}]")
        return
    assert isinstance(got, np.ndarray), f"{what}: expected an ndarray, got {type(got).__name__}"
    assert got.shape == ref.shape, f"{what}: shape {got.shape}, expected {ref.shape}"
    if ref.dtype.kind in "fc":
        assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype}, expected {ref.dtype}"
        np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-7, equal_nan=True, err_msg=what)
    elif ref.dtype.kind in "OUS":
        assert got.tolist() == ref.astype(object).tolist(), what
    else:
        assert got.dtype == ref.dtype, f"{what}: dtype {got.dtype}, expected {ref.dtype}"
        np.testing.assert_array_equal(got, ref, err_msg=what)


@pytest.mark.skipif(not TESTS, reason=f"no ONNX node tests in {NODE_DIR} (Debian package libonnx-testdata)")
@pytest.mark.parametrize("test_dir", TESTS, ids=[os.path.basename(t) for t in TESTS])
def test_node(test_dir):
    name = os.path.basename(test_dir)
    if name in XFAIL:
        pytest.skip(XFAIL[name])
    model = onnx.load(os.path.join(test_dir, "model.onnx"), load_external_data=False)
    inits = {i.name for i in model.graph.initializer}
    graph_inputs = [i for i in model.graph.input if i.name not in inits]
    sess = basalt.InferenceSession(os.path.join(test_dir, "model.onnx"))
    for ds in sorted(glob.glob(os.path.join(test_dir, "test_data_set_*"))):
        feeds = {}
        for k in range(len(glob.glob(os.path.join(ds, "input_*.pb")))):
            vi = graph_inputs[k]
            feeds[vi.name] = read_value(os.path.join(ds, f"input_{k}.pb"), vi.type)
        refs = [read_value(os.path.join(ds, f"output_{k}.pb"), model.graph.output[k].type)
                for k in range(len(glob.glob(os.path.join(ds, "output_*.pb"))))]
        got = sess.run(None, feeds)
        assert len(got) == len(refs), f"{len(got)} outputs, expected {len(refs)}"
        for k, (g, r) in enumerate(zip(got, refs)):
            assert_same(g, r, f"{os.path.basename(ds)} output '{model.graph.output[k].name}'")
