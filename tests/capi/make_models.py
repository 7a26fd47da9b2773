#!/usr/bin/python3
"""Writes the small models the C API test uses into OUT_DIR (built with onnx.helper, at test time).

symbolic.onnx: X float [batch,3], Y float [1,3] ->
  Z = X + Y  [batch,3]   (values the test checks)
  W = Identity(X)        (an output that would alias the caller's input memory)
  B = Identity(weight)   (an output that would view the read-only mapped weight)
strings.onnx: S string [n] -> T = Identity(S)
unsupported.onnx: one node of an unknown op
conv3x3.onnx: X float [1,32,32,32] -> Y = Conv(X, W 32x32x3x3, pads 1): Winograd's shape
chain.onnx: X float [batch,256] -> R = Relu(X) -> Z = R + R  (R lives in the run arena)
nonzero.onnx: X float [n] -> Y = NonZero(X) int64 [1, ?]  (a data-dependent output: dynamic pool)
"""
import os
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

out = sys.argv[1]
os.makedirs(out, exist_ok=True)

weight = numpy_helper.from_array(np.array([10.0, 20.0, 30.0], dtype=np.float32), "weight")
g = helper.make_graph(
    [helper.make_node("Add", ["X", "Y"], ["Z"], name="add"),
     helper.make_node("Identity", ["X"], ["W"], name="copy_x"),
     helper.make_node("Identity", ["weight"], ["B"], name="copy_weight")],
    "symbolic",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3]),
     helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3])],
    [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 3]),
     helper.make_tensor_value_info("W", TensorProto.FLOAT, ["batch", 3]),
     helper.make_tensor_value_info("B", TensorProto.FLOAT, [3])],
    [weight])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(out, "symbolic.onnx"))

g = helper.make_graph(
    [helper.make_node("Identity", ["S"], ["T"], name="copy_s")],
    "strings",
    [helper.make_tensor_value_info("S", TensorProto.STRING, ["n"])],
    [helper.make_tensor_value_info("T", TensorProto.STRING, ["n"])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(out, "strings.onnx"))

# unsupported.onnx: an op no runtime knows; loads only with allow_unsupported, and running fails.
g = helper.make_graph(
    [helper.make_node("NoSuchOp", ["X"], ["Y"], name="mystery", domain="com.example")],
    "unsupported",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)], ir_version=8),
     os.path.join(out, "unsupported.onnx"))

# conv3x3.onnx: a 3x3 stride-1 conv with 32 channels at 32x32, which Winograd runs by default
w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((32, 32, 3, 3)).astype(np.float32) * 0.1, "w")
g = helper.make_graph(
    [helper.make_node("Conv", ["X", "w"], ["Y"], name="conv", pads=[1, 1, 1, 1])],
    "conv3x3",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 32, 32, 32])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 32, 32, 32])],
    [w])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(out, "conv3x3.onnx"))

# chain.onnx: an intermediate (R) whose size follows the batch: it lives in the run's arena.
g = helper.make_graph(
    [helper.make_node("Relu", ["X"], ["R"], name="relu"), helper.make_node("Add", ["R", "R"], ["Z"], name="twice")],
    "chain",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 256])],
    [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["batch", 256])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(out, "chain.onnx"))

# nonzero.onnx: an output whose size depends on the data, so it comes from the dynamic pool.
g = helper.make_graph(
    [helper.make_node("NonZero", ["X"], ["Y"], name="nz")],
    "nonzero",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n"])],
    [helper.make_tensor_value_info("Y", TensorProto.INT64, [1, "k"])])
save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), os.path.join(out, "nonzero.onnx"))
