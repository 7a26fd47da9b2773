#!/usr/bin/python3
"""Generates the architecture models of the parity suite, with seeded random weights.

usage: tests/parity/gen_models.py OUT_DIR [--only SUBSTR] [--force]

Models (OUT_DIR/<name>.onnx):
  light_*       the 9 ONNX "light" models (ResNet-50, DenseNet-121, Inception v1/v2, SqueezeNet,
                ShuffleNet, VGG-19, AlexNet, ZFNet-512) with their ConstantOfShape-generated weights
                replaced by random initializers of the same shapes; the graph is otherwise unchanged
                (IR 3 / opset 9, weights listed as graph inputs as IR 3 requires)
  mobilenet_v2  MobileNetV2 1x3x224x224 (inverted residuals, depthwise convs, Clip as ReLU6; BN folded
                into the convs as PyTorch's exporter does), opset 13
  bert_base     BERT encoder as PyTorch exports it at opset 14 (12 layers, hidden 768, 12 heads, ffn 3072,
                vocab 30522), inputs input_ids/attention_mask/token_type_ids [batch, sequence] int64
                LayerNorm spelled out (ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div/Mul/Add), GELU with Erf,
                head split/merge shapes from Shape/Gather/Unsqueeze/Concat of the tensor being reshaped
  bert_mini     4 layers, hidden 256, 4 heads, ffn 1024; no token_type_ids input (zeros buffer, like HF)
  bert_mini_ext bert_mini with its weights stored as external data (bert_mini_ext.onnx.data)
  unet          small UNet, input [1, 3, height, width] (H, W multiples of 4), opset 13

Weights are scaled so activations stay in a trained network's range (He init for convs, BN with
running var ~1 and positive gamma, small gamma on the BN that ends a residual branch, LayerNorm gamma
~1, BERT's N(0, 0.02)). Every model has its own fixed seed: re-running gives identical files, and
models already present are skipped (--force regenerates them).
Needs Debian's python3-numpy and python3-onnx (onnx >= 1.12).
"""
import argparse
import collections
import math
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
LIGHT_DIRS = [
    os.environ.get("BASALT_LIGHT_DIR", ""),
    "/work/shared/onnx-testdata/light",
    "/usr/share/libonnx-testdata/data/light",
]


def light_dir():
    for d in LIGHT_DIRS:
        if d and os.path.isdir(d) and any(f.endswith(".onnx") for f in os.listdir(d)):
            return d
    return None


LIGHT_NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50",
               "shufflenet", "squeezenet", "vgg19", "zfnet512"]


def f32(a):
    return np.ascontiguousarray(a, dtype=np.float32)


# ----------------------------------------------------------------------------------------------
# (a) light models with random weights


def randomize_light(src, seed):
    m = onnx.load(src)
    g = m.graph
    rs = np.random.RandomState(seed)
    inits = {t.name: t for t in g.initializer}
    consumers = collections.defaultdict(list)
    producers = {}
    for n in g.node:
        for k, x in enumerate(n.input):
            consumers[x].append((n, k))
        for o in n.output:
            producers[o] = n

    def role(name, depth=0):
        """(op_type, input index, node) of the op that really uses this weight, looking through
        Unsqueeze/Reshape."""
        for n, k in consumers.get(name, []):
            if n.op_type in ("Unsqueeze", "Reshape") and k == 0 and depth < 3:
                r = role(n.output[0], depth + 1)
                if r:
                    return r
            return (n.op_type, k, n)
        return None

    def feeds_residual(node):
        """True when a node's output goes (possibly through Mul/Add affine ops) into Sum/Add with
        another branch: the BN that ends a residual branch."""
        out = node.output[0]
        for _ in range(3):
            cs = consumers.get(out, [])
            if not cs:
                return False
            n = cs[0][0]
            if n.op_type == "Sum" or (n.op_type == "Add" and all(x in producers for x in n.input)
                                       and not any(producers[x].op_type == "Unsqueeze" for x in n.input)):
                return True
            if n.op_type in ("Mul", "Add") and len(cs) == 1:
                out = n.output[0]
                continue
            return False
        return False

    def attr(node, name, default):
        for a in node.attribute:
            if a.name == name:
                return helper.get_attribute_value(a)
        return default

    def make_value(name, shape):
        shape = tuple(int(d) for d in shape)
        r = role(name)
        if r is None:
            return None
        op, k, node = r
        if op == "Conv" and k == 1:
            fan_in = int(np.prod(shape[1:]))
            return rs.normal(0, math.sqrt(2.0 / fan_in), shape)
        if op in ("Conv", "Gemm") and k == 2:
            return rs.normal(0, 0.01, shape)
        if op == "Gemm" and k == 1:
            fan_in = int(np.prod(shape[1:])) if attr(node, "transB", 0) else shape[0]
            last = node.output[0] in g.output[0].name or any(
                c.op_type == "Softmax" for c, _ in consumers.get(node.output[0], []))
            # logits of a trained classifier have a std of a few units
            return rs.normal(0, math.sqrt((16.0 if last else 2.0) / fan_in), shape)
        if op == "BatchNormalization":
            if k == 1:
                lo, hi = (0.1, 0.3) if feeds_residual(node) else (0.6, 1.0)
                return rs.uniform(lo, hi, shape)
            if k == 2:
                return rs.normal(0.05, 0.05, shape)
            if k == 3:
                return rs.normal(0.0, 0.1, shape)
            if k == 4:
                return rs.uniform(0.5, 1.5, shape)
        if op == "Mul":
            return rs.uniform(0.8, 1.2, shape)
        if op == "Add":
            return rs.normal(0.0, 0.05, shape)
        return None

    new_inits = []
    drop_nodes = set()
    drop_inits = set()
    for i, n in enumerate(g.node):
        if n.op_type != "ConstantOfShape" or n.input[0] not in inits:
            continue
        shape = numpy_helper.to_array(inits[n.input[0]])
        v = make_value(n.output[0], shape)
        if v is None:
            v = rs.normal(0, 0.02, tuple(int(d) for d in shape))
        new_inits.append(numpy_helper.from_array(f32(v), n.output[0]))
        drop_nodes.add(i)
        drop_inits.add(n.input[0])
    # the small float initializers the light tool left alone
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT and t.name not in drop_inits:
            v = make_value(t.name, t.dims)
            if v is not None:
                t.CopyFrom(numpy_helper.from_array(f32(v), t.name))
    # only drop a shape initializer when nothing else uses it
    for nm in list(drop_inits):
        if any(j not in drop_nodes for j, n in enumerate(g.node) if nm in n.input):
            drop_inits.discard(nm)
    nodes = [n for j, n in enumerate(g.node) if j not in drop_nodes]
    del g.node[:]
    g.node.extend(nodes)
    kept = [t for t in g.initializer if t.name not in drop_inits]
    del g.initializer[:]
    g.initializer.extend(kept + new_inits)
    inputs = [x for x in g.input if x.name not in drop_inits]
    del g.input[:]
    g.input.extend(inputs)
    if m.ir_version < 4:  # IR 3: every initializer is also a graph input
        have = {x.name for x in g.input}
        for t in new_inits:
            if t.name not in have:
                g.input.append(helper.make_tensor_value_info(t.name, TensorProto.FLOAT, list(t.dims)))
    m.producer_name = "basalt gen_models.py (random weights on " + os.path.basename(src) + ")"
    return m


# ----------------------------------------------------------------------------------------------
# small graph-building helper


class Builder:
    def __init__(self, seed):
        self.rs = np.random.RandomState(seed)
        self.nodes = []
        self.inits = []
        self.n = 0

    def name(self, p):
        self.n += 1
        return f"{p}_{self.n}"

    def init(self, prefix, arr):
        nm = self.name(prefix)
        self.inits.append(numpy_helper.from_array(np.asarray(arr), nm))
        return nm

    def const_i64(self, prefix, vals):
        return self.init(prefix, np.array(vals, dtype=np.int64))

    def const_f(self, prefix, v):
        return self.init(prefix, np.array(v, dtype=np.float32))

    def op(self, op_type, inputs, n_out=1, name=None, **attrs):
        nm = name or self.name(op_type)
        outs = [f"{nm}_out{i}" if n_out > 1 else f"{nm}_out" for i in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=nm, **attrs))
        return outs if n_out > 1 else outs[0]

    def model(self, inputs, outputs, opset, graph_name, producer):
        g = helper.make_graph(self.nodes, graph_name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], producer_name=producer)
        m.ir_version = 8
        return m


# ----------------------------------------------------------------------------------------------
# (b) MobileNetV2


def mobilenet_v2(seed=2):
    b = Builder(seed)
    rs = b.rs
    six = b.const_f("six", 6.0)
    zero = b.const_f("zero", 0.0)

    def conv(x, cin, cout, k, stride=1, group=1, act=True, scale=1.0):
        fan_in = cin // group * k * k
        w = rs.normal(0, scale * math.sqrt(2.0 / fan_in), (cout, cin // group, k, k))
        bias = rs.normal(0.0, 0.02, (cout,))
        y = b.op("Conv", [x, b.init("conv_w", f32(w)), b.init("conv_b", f32(bias))],
                 kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group, dilations=[1, 1])
        if act:
            y = b.op("Clip", [y, zero, six])
        return y

    x = "input"
    y = conv(x, 3, 32, 3, 2)
    cin = 32
    cfg = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]
    for t, c, n, s in cfg:
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = cin * t
            h = y
            if t != 1:
                h = conv(h, cin, hidden, 1)
            h = conv(h, hidden, hidden, 3, stride, group=hidden)
            res = stride == 1 and cin == c
            h = conv(h, hidden, c, 1, act=False, scale=0.5 if res else 1.0)
            y = b.op("Add", [y, h]) if res else h
            cin = c
    y = conv(y, cin, 1280, 1)
    y = b.op("GlobalAveragePool", [y])
    y = b.op("Flatten", [y], axis=1)
    w = rs.normal(0, math.sqrt(1.0 / 1280), (1000, 1280))
    y = b.op("Gemm", [y, b.init("fc_w", f32(w)), b.init("fc_b", f32(rs.normal(0, 0.01, 1000)))],
             name="classifier", alpha=1.0, beta=1.0, transB=1)
    b.nodes[-1].output[0] = "output"
    return b.model([helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, 224, 224])],
                   [helper.make_tensor_value_info("output", TensorProto.FLOAT, [1, 1000])],
                   13, "mobilenet_v2", "basalt gen_models.py")


# ----------------------------------------------------------------------------------------------
# (c) BERT encoder, spelled the way torch.onnx.export (opset 14, dynamic axes) writes HF's BertModel


def bert(layers, hidden, heads, ffn, vocab, seed, token_type_input=True, max_pos=512):
    b = Builder(seed)
    rs = b.rs
    hd = hidden // heads

    def w(*shape, std=0.02):
        return f32(rs.normal(0, std, shape))

    def ln(x, prefix):
        # opset 14 has no LayerNormalization: torch.onnx spells it out over the last axis
        gamma = f32(1.0 + rs.normal(0, 0.05, hidden))
        beta = f32(rs.normal(0, 0.05, hidden))
        mean = b.op("ReduceMean", [x], axes=[-1])
        d = b.op("Sub", [x, mean])
        var = b.op("ReduceMean", [b.op("Pow", [d, b.const_f("two", 2.0)])], axes=[-1])
        std = b.op("Sqrt", [b.op("Add", [var, b.const_f("eps", 1e-12)])])
        y = b.op("Mul", [b.op("Div", [d, std]), b.init(prefix + "_gamma", gamma)])
        return b.op("Add", [y, b.init(prefix + "_beta", beta)])

    def size_shape(x, tail):
        # x.size()[:2] + tail, as torch.onnx writes it with dynamic axes: Shape -> Gather -> Unsqueeze -> Concat
        s = b.op("Shape", [x])
        dims = [b.op("Unsqueeze", [b.op("Gather", [s, b.const_i64("idx", i)], axis=0), b.const_i64("ax0", [0])])
                for i in range(2)]
        return b.op("Concat", dims + [b.const_i64("dim", [t]) for t in tail], axis=0)

    def linear(x, cin, cout, prefix, std=0.02):
        y = b.op("MatMul", [x, b.init(prefix + "_w", w(cin, cout, std=std))])
        return b.op("Add", [b.init(prefix + "_b", w(cout, std=0.02)), y])

    ids, mask = "input_ids", "attention_mask"
    # shapes: batch and sequence from Shape(input_ids)
    shp = b.op("Shape", [ids])
    batch = b.op("Gather", [shp, b.const_i64("idx0", 0)], axis=0)
    seq = b.op("Gather", [shp, b.const_i64("idx1", 1)], axis=0)
    seq_1d = b.op("Unsqueeze", [seq, b.const_i64("ax0", [0])])
    batch_1d = b.op("Unsqueeze", [batch, b.const_i64("ax0", [0])])

    # embeddings
    word = b.op("Gather", [b.init("word_embeddings", w(vocab, hidden)), ids], axis=0)
    if token_type_input:
        tt = "token_type_ids"
    else:  # HF's registered buffer of zeros, sliced to the sequence and expanded to the batch
        buf = b.init("token_type_ids_buffer", np.zeros((1, max_pos), np.int64))
        sl = b.op("Slice", [buf, b.const_i64("st", [0]), seq_1d, b.const_i64("ax", [1]), b.const_i64("stp", [1])])
        tt = b.op("Expand", [sl, b.op("Concat", [batch_1d, seq_1d], axis=0)])
    tok = b.op("Gather", [b.init("token_type_embeddings", w(2, hidden)), tt], axis=0)
    emb = b.op("Add", [word, tok])
    pos_ids = b.op("Slice", [b.init("position_ids", np.arange(max_pos, dtype=np.int64).reshape(1, max_pos)),
                             b.const_i64("st", [0]), seq_1d, b.const_i64("ax", [1]), b.const_i64("stp", [1])])
    pos = b.op("Gather", [b.init("position_embeddings", w(max_pos, hidden)), pos_ids], axis=0)
    emb = b.op("Add", [emb, pos])
    h = ln(emb, "emb_ln")

    # extended attention mask: (1 - mask[:, None, None, :]) * -10000
    m1 = b.op("Unsqueeze", [mask, b.const_i64("ax", [1])])
    m2 = b.op("Unsqueeze", [m1, b.const_i64("ax", [2])])
    mf = b.op("Cast", [m2], to=TensorProto.FLOAT)
    inv = b.op("Sub", [b.const_f("one", 1.0), mf])
    ext = b.op("Mul", [inv, b.const_f("neg", -10000.0)])

    sqrt_d = b.const_f("sqrt_d", math.sqrt(hd))
    sqrt2 = b.const_f("sqrt2", math.sqrt(2.0))
    one = b.const_f("one", 1.0)
    half = b.const_f("half", 0.5)
    for L in range(layers):
        p = f"l{L}"
        # Q/K a bit larger than BERT's init so attention is not uniform (trained heads are peaky)
        qp = linear(h, hidden, hidden, p + "_q", 0.04)
        kp = linear(h, hidden, hidden, p + "_k", 0.04)
        vp = linear(h, hidden, hidden, p + "_v")
        q = b.op("Reshape", [qp, size_shape(qp, [heads, hd])])
        k = b.op("Reshape", [kp, size_shape(kp, [heads, hd])])
        v = b.op("Reshape", [vp, size_shape(vp, [heads, hd])])
        q = b.op("Transpose", [q], perm=[0, 2, 1, 3])
        kt = b.op("Transpose", [k], perm=[0, 2, 3, 1])
        v = b.op("Transpose", [v], perm=[0, 2, 1, 3])
        s = b.op("MatMul", [q, kt])
        s = b.op("Div", [s, sqrt_d])
        s = b.op("Add", [s, ext])
        s = b.op("Softmax", [s], axis=-1)
        c = b.op("MatMul", [s, v])
        c = b.op("Transpose", [c], perm=[0, 2, 1, 3])
        c = b.op("Reshape", [c, size_shape(c, [hidden])])
        a = linear(c, hidden, hidden, p + "_o")
        h = ln(b.op("Add", [a, h]), p + "_attn_ln")
        f = linear(h, hidden, ffn, p + "_ffn1")
        g = b.op("Div", [f, sqrt2])
        g = b.op("Erf", [g])
        g = b.op("Add", [g, one])
        g = b.op("Mul", [f, g])
        g = b.op("Mul", [g, half])
        f = linear(g, ffn, hidden, p + "_ffn2")
        h = ln(b.op("Add", [f, h]), p + "_out_ln")
    b.nodes[-1].output[0] = "last_hidden_state"
    h = "last_hidden_state"
    first = b.op("Gather", [h, b.const_i64("idx0", 0)], axis=1)
    pooled = b.op("Tanh", [linear(first, hidden, hidden, "pooler")])
    b.nodes[-1].output[0] = "pooler_output"

    ins = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
           helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "sequence"])]
    if token_type_input:
        ins.append(helper.make_tensor_value_info("token_type_ids", TensorProto.INT64, ["batch", "sequence"]))
    outs = [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["batch", "sequence", hidden]),
            helper.make_tensor_value_info("pooler_output", TensorProto.FLOAT, ["batch", hidden])]
    return b.model(ins, outs, 14, "bert", "basalt gen_models.py (pytorch-style export)")


# ----------------------------------------------------------------------------------------------
# (d) UNet


def unet(seed=7):
    b = Builder(seed)
    rs = b.rs

    def conv(x, cin, cout, k=3, act=True):
        wt = rs.normal(0, math.sqrt(2.0 / (cin * k * k)), (cout, cin, k, k))
        y = b.op("Conv", [x, b.init("w", f32(wt)), b.init("b", f32(rs.normal(0, 0.02, cout)))],
                 kernel_shape=[k, k], pads=[k // 2] * 4)
        return b.op("Relu", [y]) if act else y

    x = "image"
    e1 = conv(conv(x, 3, 16), 16, 16)
    p1 = b.op("MaxPool", [e1], kernel_shape=[2, 2], strides=[2, 2])
    e2 = conv(conv(p1, 16, 32), 32, 32)
    p2 = b.op("MaxPool", [e2], kernel_shape=[2, 2], strides=[2, 2])
    bott = conv(conv(p2, 32, 64), 64, 64)
    # up 1: ConvTranspose k2 s2
    wt = rs.normal(0, math.sqrt(2.0 / (64 * 4)) * 1.4, (64, 32, 2, 2))
    u2 = b.op("ConvTranspose", [bott, b.init("up_w", f32(wt)), b.init("up_b", f32(rs.normal(0, 0.02, 32)))],
              kernel_shape=[2, 2], strides=[2, 2])
    d2 = conv(b.op("Concat", [u2, e2], axis=1), 64, 32)
    # up 2: nearest Resize by scales, then conv
    u1 = b.op("Resize", [d2, "", b.init("scales", np.array([1, 1, 2, 2], np.float32))], mode="nearest",
              coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    u1 = conv(u1, 32, 16)
    d1 = conv(b.op("Concat", [u1, e1], axis=1), 32, 16)
    conv(d1, 16, 2, k=1, act=False)
    b.nodes[-1].output[0] = "mask"
    return b.model([helper.make_tensor_value_info("image", TensorProto.FLOAT, [1, 3, "height", "width"])],
                   [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 2, "height", "width"])],
                   13, "unet", "basalt gen_models.py")


# ----------------------------------------------------------------------------------------------


def save(m, path, external=False):
    onnx.checker.check_model(m)
    tmp = path + ".part"
    if external:
        loc = os.path.basename(path) + ".data"
        if os.path.exists(os.path.join(os.path.dirname(path), loc)):
            os.remove(os.path.join(os.path.dirname(path), loc))
        onnx.save_model(m, tmp, save_as_external_data=True, all_tensors_to_one_file=True, location=loc,
                        size_threshold=1024)
    else:
        onnx.save_model(m, tmp)
    os.replace(tmp, path)


# Models whose generator changed after copies were already generated: a present file without the
# matching stamp (NAME.onnx.gen holding this version) is regenerated. bert v2: opset 14 export
# (spelled-out LayerNorm, per-reshape size() shapes) instead of opset 17 with LayerNormalization.
GEN_VERSIONS = {"bert_mini": 2, "bert_mini_ext": 2, "bert_base": 2}


def stamp_ok(path, name):
    want = GEN_VERSIONS.get(name)
    if want is None:
        return True
    try:
        return open(path + ".gen").read().strip() == str(want)
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out_dir")
    ap.add_argument("--only", default="", help="generate only models whose name contains this")
    ap.add_argument("--force", action="store_true", help="regenerate models already present")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)

    jobs = []
    ld = light_dir()
    for i, nm in enumerate(LIGHT_NAMES):
        src = os.path.join(ld, f"light_{nm}.onnx") if ld else None
        jobs.append((f"light_{nm}", (lambda src=src, i=i: randomize_light(src, 100 + i)) if src and os.path.exists(src) else None, False))
    jobs.append(("mobilenet_v2", mobilenet_v2, False))
    jobs.append(("bert_mini", lambda: bert(4, 256, 4, 1024, 30522, seed=11, token_type_input=False), False))
    jobs.append(("bert_mini_ext", lambda: bert(4, 256, 4, 1024, 30522, seed=11, token_type_input=False), True))
    jobs.append(("bert_base", lambda: bert(12, 768, 12, 3072, 30522, seed=12, token_type_input=True), False))
    jobs.append(("unet", unet, False))

    made = present = missing = 0
    for name, fn, ext in jobs:
        if args.only and args.only not in name and args.only not in name.replace("light_", ""):
            continue
        path = os.path.join(args.out_dir, name + ".onnx")
        if os.path.exists(path) and (not ext or os.path.exists(path + ".data")) and stamp_ok(path, name) and not args.force:
            present += 1
            continue
        if fn is None:
            print(f"skip     {name}: light model source not found (set BASALT_LIGHT_DIR)", file=sys.stderr)
            missing += 1
            continue
        save(fn(), path, external=ext)
        if name in GEN_VERSIONS:
            with open(path + ".gen", "w") as f:
                f.write(f"{GEN_VERSIONS[name]}\n")
        print(f"made     {name} ({os.path.getsize(path)} B)", file=sys.stderr)
        made += 1
    print(f"{present} present, {made} generated, {missing} skipped -> {args.out_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
