#!/usr/bin/env python3
"""Peer check: models built here with onnx.helper + numpy run in kiln and in ONNX Runtime.

Each model is the kind of graph an exporter writes for a well-known architecture, with seeded
random weights and inputs (never zeros): an MLP (Gemm, MatMul+Add, Relu), a ResNet-style CNN
(Conv+BatchNormalization+Relu, residual Add, MaxPool, GlobalAveragePool, Flatten, Gemm), a
MobileNetV2/EfficientNet-style block (1x1 expand, depthwise 3x3 with group=C, Clip(0,6), 1x1
project, residual, HardSwish, HardSigmoid, SiLU gate, squeeze-excite), Inception/ShuffleNet/
DenseNet patterns (Concat of branches, LRN, AveragePool, channel shuffle), a 2-layer BERT-style
encoder (Gather embeddings, position ids from Shape -> Range, LayerNormalization or its decomposed
ReduceMean/Sub/Pow/Sqrt/Div form, Q/K/V MatMuls (fused + Split in layer 2), Reshape/Transpose to
heads, Cast/Sub/Mul or Equal/Where additive mask, Softmax, Erf GELU, residuals) and exporter-style
shape subgraphs (Shape -> Gather -> Unsqueeze -> Concat -> Reshape), with static shapes and with a
symbolic batch dim (dim_param "batch"). Opsets 17 and 13. A model with a symbolic dim runs at two
sizes, so kiln must keep the dim symbolic rather than specialize on the first.

For each model: onnx.checker.check_model(full_check=True); then `kiln run MODEL.onnx -i NAME=F.pb
... -o DIR --pb` and ONNX Runtime (CPUExecutionProvider, ORT_ENABLE_ALL) on the same .pb inputs.
Every output must agree in dtype and shape, and in value:

    rel = max|kiln - ort| / max(max|ort|, 1e-30)   (max-norm relative error, per output)

must be <= 1e-4 for float32 outputs (both sides compute in f32; the bound is relative to the
output's scale, so one tiny element near a cancellation cannot fail the check, while any element
off by more than 1e-4 of the output's magnitude does). Non-float outputs must be equal. Outputs
must be finite. Prints a table; exits non-zero on any failure.

A case listed with a known gap (see CASES) must fail in kiln with that error today; it fails the
check once it passes, so that it moves to the expected-to-work cases.

Usage: peer_check.py --kiln path/to/kiln --work DIR [--only NAME,...]
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REL_TOL = 1e-4
TINY = 1e-30
IR_VERSION = 8  # opset 13 and 17 both fit; ONNX Runtime 1.32 reads it


class Builder:
    """Collects nodes and initializers; names values uniquely; seeded weights."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.count = 0

    def name(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem, value):
        n = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value), n))
        return n

    def weight(self, stem, shape, fan_in=None, scale=1.0):
        fan_in = fan_in if fan_in is not None else (shape[-1] if len(shape) > 0 else 1)
        w = self.rng.standard_normal(shape) * (scale / np.sqrt(max(fan_in, 1)))
        return self.const(stem, w.astype(np.float32))

    def bias(self, stem, n, scale=0.1):
        return self.const(stem, (self.rng.standard_normal(n) * scale).astype(np.float32))

    def op(self, op_type, inputs, n_out=1, stem=None, **attrs):
        outs = [self.name(stem or op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name("n_" + op_type), **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name, inputs, outputs, opset):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="kiln-peer-check", ir_version=IR_VERSION)
        # value_info for intermediates, as PyTorch's exporter writes it, from ONNX's own strict
        # shape inference (which also checks the declared output shapes).
        return onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)


def out_info(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def randn(rng, shape, scale=1.0):
    x = rng.standard_normal(shape).astype(np.float32) * scale
    x[np.abs(x) < 1e-3] = 1e-3  # never zero
    return x


# ---------------------------------------------------------------------------------------------
# Model builders. Each returns (model, [feeds, ...]), a feed being {input name: array}.

def mlp(opset, batch_param=False):
    b = Builder(1000 + opset + batch_param)
    batch = "batch" if batch_param else 5
    x = "x"
    # Gemm with transB (PyTorch's Linear), alpha/beta not 1.
    h = b.op("Gemm", [x, b.weight("w1", (64, 37)), b.bias("b1", 64)], transB=1, alpha=0.75, beta=1.5)
    h = b.op("Relu", [h])
    # MatMul + Add (TF / older exporters).
    h = b.op("MatMul", [h, b.weight("w2", (64, 29), fan_in=64)])
    h = b.op("Add", [h, b.bias("b2", 29)])
    h = b.op("Relu", [h])
    # Gemm with transA: A is given transposed.
    ht = b.op("Transpose", [h], perm=[1, 0])
    y = b.op("Gemm", [ht, b.weight("w3", (29, 10), fan_in=29), b.bias("b3", 10)], transA=1, stem="y")
    m = b.model(f"mlp_op{opset}", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, 37])],
                [out_info(y, [batch, 10])], opset)
    rng = np.random.default_rng(1)
    return m, [{x: randn(rng, (n, 37))} for n in ([5, 2] if batch_param else [5])]


def conv_bn(b, x, cin, cout, k, stride=1, pad=None, group=1, relu=True, auto_pad=None, gain=1.0):
    """Conv (no bias) + BatchNormalization (+ Relu); the output's std is about 1.3 * gain."""
    pad = (k // 2) if pad is None else pad
    w = b.weight("conv_w", (cout, cin // group, k, k), fan_in=cin // group * k * k, scale=1.4)
    # auto_pad SAME_UPPER (as tf2onnx writes it) instead of explicit pads.
    padding = {"auto_pad": auto_pad} if auto_pad else {"pads": [pad] * 4}
    h = b.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], group=group, **padding)
    scale = b.const("bn_scale", (gain * b.rng.uniform(0.5, 1.5, cout)).astype(np.float32))
    shift = b.bias("bn_bias", cout)
    mean = b.bias("bn_mean", cout, scale=0.2)
    var = b.const("bn_var", b.rng.uniform(0.5, 2.0, cout).astype(np.float32))
    h = b.op("BatchNormalization", [h, scale, shift, mean, var], epsilon=1e-5)
    return b.op("Relu", [h]) if relu else h


def resnet(opset):
    b = Builder(2000 + opset)
    x = "image"
    # ResNet stem: 7x7 stride-2 conv, then 3x3 stride-2 max pool. Odd sizes: 33 -> 17 -> 9.
    h = conv_bn(b, x, 3, 16, 7, stride=2)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    # Basic block, identity shortcut.
    r = conv_bn(b, h, 16, 16, 3)
    r = conv_bn(b, r, 16, 16, 3, relu=False)
    h = b.op("Relu", [b.op("Add", [r, h])])
    # Downsampling block: stride-2 3x3 and a 1x1 stride-2 projection shortcut (9 -> 5).
    r = conv_bn(b, h, 16, 32, 3, stride=2)
    r = conv_bn(b, r, 32, 32, 3, relu=False)
    s = conv_bn(b, h, 16, 32, 1, stride=2, relu=False)
    h = b.op("Relu", [b.op("Add", [r, s])])
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h], axis=1)
    y = b.op("Gemm", [h, b.weight("fc_w", (10, 32)), b.bias("fc_b", 10)], transB=1, stem="logits")
    m = b.model(f"resnet_op{opset}", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, 3, 33, 33])],
                [out_info(y, [2, 10])], opset)
    rng = np.random.default_rng(2)
    return m, [{x: randn(rng, (2, 3, 33, 33))}]


def relu6(b, h):
    # Clip 11+: min and max are inputs.
    return b.op("Clip", [h, b.const("zero", np.float32(0)), b.const("six", np.float32(6))])


def silu(b, h):
    return b.op("Mul", [h, b.op("Sigmoid", [h])])


def hard_swish(b, h, opset):
    if opset >= 14:
        return b.op("HardSwish", [h])
    # Before HardSwish (opset 14) PyTorch exports x * HardSigmoid(x) with alpha 1/6.
    return b.op("Mul", [h, b.op("HardSigmoid", [h], alpha=1.0 / 6, beta=0.5)])


def mobilenet(opset):
    b = Builder(3000 + opset)
    x = "x"
    c, t = 16, 6
    e = c * t
    # MobileNetV2 inverted residual, stride 1: expand, depthwise, project, residual. The gains put
    # 10-30% of the values above 6, so both ends of ReLU6 (and of HardSigmoid, HardSwish
    # below) are exercised.
    h = relu6(b, conv_bn(b, x, c, e, 1, relu=False, gain=4.0))
    h = relu6(b, conv_bn(b, h, e, e, 3, group=e, relu=False, gain=3.0))
    # EfficientNet squeeze-excite on the depthwise output: GAP -> 1x1 reduce -> SiLU -> 1x1 -> Sigmoid gate.
    s = b.op("GlobalAveragePool", [h])
    s = b.op("Conv", [s, b.weight("se_w1", (8, e, 1, 1), fan_in=e, scale=2.0), b.bias("se_b1", 8)], kernel_shape=[1, 1])
    s = silu(b, s)
    s = b.op("Conv", [s, b.weight("se_w2", (e, 8, 1, 1), fan_in=8, scale=2.0), b.bias("se_b2", e)], kernel_shape=[1, 1])
    h = b.op("Mul", [h, b.op("Sigmoid", [s])])
    h = conv_bn(b, h, e, c, 1, relu=False)
    h = b.op("Add", [h, x])
    # MobileNetV3 tail: stride-2 depthwise with HardSwish, HardSigmoid gate (PyTorch's alpha 1/6),
    # Clip with only a min (optional max left empty), EfficientNet SiLU.
    # Stride-2 depthwise with SAME_UPPER on an even size: padding 0 before, 1 after (14 -> 7).
    h = hard_swish(b, conv_bn(b, h, c, c, 3, stride=2, group=c, relu=False, auto_pad="SAME_UPPER", gain=2.5), opset)
    g = b.op("HardSigmoid", [conv_bn(b, h, c, c, 1, relu=False, gain=2.5)], alpha=1.0 / 6, beta=0.5)
    h = b.op("Mul", [h, g])
    h = b.op("Clip", [h, b.const("lo", np.float32(-0.25))])
    h = silu(b, conv_bn(b, h, c, 24, 1, relu=False))
    h = b.op("GlobalAveragePool", [h])
    h = b.op("Flatten", [h])
    y = b.op("Gemm", [h, b.weight("fc_w", (7, 24)), b.bias("fc_b", 7)], transB=1, stem="logits")
    m = b.model(f"mobilenet_op{opset}", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, c, 14, 14])],
                [out_info(y, [2, 7])], opset)
    rng = np.random.default_rng(3)
    return m, [{x: randn(rng, (2, c, 14, 14))}]


def branches(opset):
    """Inception/SqueezeNet/ShuffleNet/DenseNet patterns: parallel branches joined by Concat (1x1,
    3x3, 5x5 as two 3x3, avg-pool + 1x1), LRN (GoogLeNet), a ShuffleNet channel shuffle
    (Reshape [N, g, C/g, H, W] -> Transpose -> Reshape), a DenseNet-style Concat with the block's
    input, AveragePool with ceil_mode, Dropout (inference: identity)."""
    b = Builder(6000 + opset)
    x = "x"
    c = 12
    h = b.op("LRN", [x], size=5, alpha=1e-3, beta=0.75, bias=2.0)
    b1 = conv_bn(b, h, c, 8, 1)
    b2 = conv_bn(b, conv_bn(b, h, c, 6, 1), 6, 8, 3)
    b3 = conv_bn(b, conv_bn(b, conv_bn(b, h, c, 4, 1), 4, 8, 3), 8, 8, 3)
    b4 = conv_bn(b, b.op("AveragePool", [h], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                         count_include_pad=0), c, 8, 1)
    h = b.op("Concat", [b1, b2, b3, b4], axis=1)  # 32 channels
    groups = 4
    h = b.op("Reshape", [h, b.const("shape", np.array([2, groups, 32 // groups, 11, 11], np.int64))])
    h = b.op("Transpose", [h], perm=[0, 2, 1, 3, 4])
    h = b.op("Reshape", [h, b.const("shape", np.array([2, 32, 11, 11], np.int64))])
    h = conv_bn(b, h, 32, 32, 3, group=groups)  # grouped conv after the shuffle
    h = b.op("Concat", [h, x], axis=1)  # dense connection: 44 channels
    h = b.op("AveragePool", [h], kernel_shape=[2, 2], strides=[2, 2], ceil_mode=1)  # 11 -> 6
    h = b.op("Dropout", [h])
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])])
    y = b.op("Gemm", [h, b.weight("fc_w", (5, 44)), b.bias("fc_b", 5)], transB=1, stem="logits")
    m = b.model(f"branches_op{opset}", [helper.make_tensor_value_info(x, TensorProto.FLOAT, [2, c, 11, 11])],
                [out_info(y, [2, 5])], opset)
    rng = np.random.default_rng(6)
    return m, [{x: randn(rng, (2, c, 11, 11))}]


def shape_dims(b, x, indices):
    """Exporter-style: Shape(x) -> Gather(i) -> Unsqueeze, one 1-element int64 tensor per index."""
    shp = b.op("Shape", [x])
    parts = []
    for i in indices:
        d = b.op("Gather", [shp, b.const("idx", np.int64(i))], axis=0)
        parts.append(b.op("Unsqueeze", [d, b.const("axes", np.array([0], np.int64))]))
    return parts


def dynamic_reshape(b, x, keep, tail):
    """Reshape x to [x.shape[i] for i in keep] + tail, the shape built from a Shape subgraph."""
    parts = shape_dims(b, x, keep)
    shape = b.op("Concat", parts + [b.const("tail", np.array(tail, np.int64))], axis=0)
    return b.op("Reshape", [x, shape])


def layer_norm(b, x, hidden, fused):
    gamma = b.const("ln_g", b.rng.uniform(0.5, 1.5, hidden).astype(np.float32))
    beta = b.bias("ln_b", hidden)
    if fused:
        return b.op("LayerNormalization", [x, gamma, beta], axis=-1, epsilon=1e-12)
    mean = b.op("ReduceMean", [x], axes=[-1], keepdims=1)
    d = b.op("Sub", [x, mean])
    var = b.op("ReduceMean", [b.op("Pow", [d, b.const("two", np.float32(2))])], axes=[-1], keepdims=1)
    std = b.op("Sqrt", [b.op("Add", [var, b.const("eps", np.float32(1e-12))])])
    return b.op("Add", [b.op("Mul", [b.op("Div", [d, std]), gamma]), beta])


def gelu_erf(b, x):
    e = b.op("Erf", [b.op("Div", [x, b.const("sqrt2", np.float32(np.sqrt(2.0)))])])
    return b.op("Mul", [b.op("Mul", [x, b.op("Add", [e, b.const("one", np.float32(1))])]),
                        b.const("half", np.float32(0.5))])


def linear(b, x, n_in, n_out, stem):
    return b.op("Add", [b.op("MatMul", [x, b.weight(stem + "_w", (n_in, n_out), fan_in=n_in)]),
                        b.bias(stem + "_b", n_out)])


def bert(opset, fused_ln, symbolic=()):
    """symbolic: which input dims are symbolic, of "batch" and "sequence" (transformers' exporter
    declares both); the model then runs at two sizes."""
    b = Builder(4000 + opset + 7 * fused_ln)
    vocab, max_pos, hidden, heads, ffn, layers = 50, 16, 32, 4, 64, 2
    hd = hidden // heads
    batch = "batch" if "batch" in symbolic else 2
    seq = "sequence" if "sequence" in symbolic else 7
    ids, mask = "input_ids", "attention_mask"
    # Embeddings: word (Gather on ids) + position (Range over the sequence length, from Shape) + token type 0.
    word = b.op("Gather", [b.weight("word_emb", (vocab, hidden), fan_in=1, scale=0.5), ids], axis=0)
    (seq_len,) = shape_dims(b, ids, [1])
    seq_scalar = b.op("Squeeze", [seq_len, b.const("axes", np.array([0], np.int64))])
    pos_ids = b.op("Range", [b.const("start", np.int64(0)), seq_scalar, b.const("step", np.int64(1))])
    pos = b.op("Gather", [b.weight("pos_emb", (max_pos, hidden), fan_in=1, scale=0.5), pos_ids], axis=0)
    tok = b.weight("type_emb", (1, hidden), fan_in=1, scale=0.5)
    h = b.op("Add", [b.op("Add", [word, pos]), tok])
    h = layer_norm(b, h, hidden, fused_ln)
    h = b.op("Dropout", [h])  # inference: the identity (some exporters keep it)
    m = b.op("Unsqueeze", [mask, b.const("axes", np.array([1, 2], np.int64))])
    if fused_ln:
        # Additive mask as newer transformers export it: where(mask == 0, finfo(f32).min, 0).
        m = b.op("Where", [b.op("Equal", [m, b.const("zero_i", np.int64(0))]),
                           b.const("fmin", np.float32(np.finfo(np.float32).min)), b.const("zero_f", np.float32(0))])
    else:
        # ... and as older ones do: (1 - float(mask[:, None, None, :])) * -10000.
        m = b.op("Cast", [m], to=TensorProto.FLOAT)
        m = b.op("Mul", [b.op("Sub", [b.const("one", np.float32(1)), m]), b.const("neg", np.float32(-10000))])
    for layer in range(layers):
        def heads_of(t, perm):
            # Layer 0: a constant target shape with 0 (copy the dim); layer 1: a Shape subgraph.
            if layer == 0:
                t = b.op("Reshape", [t, b.const("shape", np.array([0, 0, heads, hd], np.int64))])
            else:
                t = dynamic_reshape(b, t, [0, 1], [heads, hd])
            return b.op("Transpose", [t], perm=perm)
        if layer == 0:
            q, k, v = (linear(b, h, hidden, hidden, n) for n in "qkv")
        else:  # one fused QKV projection, then Split (sizes as an input, opset 13+)
            q, k, v = b.op("Split", [linear(b, h, hidden, 3 * hidden, "qkv"),
                                     b.const("split", np.array([hidden] * 3, np.int64))], n_out=3, axis=-1)
        q = heads_of(q, [0, 2, 1, 3])  # [B, h, S, d]
        k = heads_of(k, [0, 2, 3, 1])  # [B, h, d, S]
        v = heads_of(v, [0, 2, 1, 3])
        scores = b.op("Div", [b.op("MatMul", [q, k]), b.const("scale", np.float32(np.sqrt(hd)))])
        probs = b.op("Softmax", [b.op("Add", [scores, m])], axis=-1)
        ctx = b.op("Transpose", [b.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])  # [B, S, h, d]
        if layer == 0:
            ctx = b.op("Reshape", [ctx, b.const("shape", np.array([0, 0, hidden], np.int64))])
        else:
            ctx = dynamic_reshape(b, ctx, [0, 1], [hidden])
        h = layer_norm(b, b.op("Add", [linear(b, ctx, hidden, hidden, "o"), h]), hidden, fused_ln)
        f = linear(b, gelu_erf(b, linear(b, h, hidden, ffn, "ff1")), ffn, hidden, "ff2")
        h = layer_norm(b, b.op("Add", [f, h]), hidden, fused_ln)
    last = b.op("Identity", [h], stem="last_hidden_state")
    # Pooler: the first token -> dense -> tanh.
    first = b.op("Gather", [h, b.const("cls", np.int64(0))], axis=1)
    pooled = b.op("Tanh", [b.op("Gemm", [first, b.weight("pool_w", (hidden, hidden)), b.bias("pool_b", hidden)],
                                transB=1)], stem="pooler_output")
    kind = ("ln" if fused_ln else "decomposed") + "".join("_" + d for d in symbolic)
    model = b.model(f"bert_{kind}_op{opset}",
                    [helper.make_tensor_value_info(ids, TensorProto.INT64, [batch, seq]),
                     helper.make_tensor_value_info(mask, TensorProto.INT64, [batch, seq])],
                    [out_info(last, [batch, seq, hidden]), out_info(pooled, [batch, hidden])], opset)
    rng = np.random.default_rng(4)
    feeds = []
    sizes = [(2, 7)] + ([(3 if "batch" in symbolic else 2, 5 if "sequence" in symbolic else 7)] if symbolic else [])
    for n, s in sizes:
        mask_v = np.ones((n, s), np.int64)
        mask_v[1, s - 2:] = 0  # padding in the second sequence
        feeds.append({ids: rng.integers(0, vocab, (n, s)).astype(np.int64), mask: mask_v})
    return model, feeds


def shape_subgraph(opset, symbolic, arith=True, batches=(3,)):
    """x [B, 6, 5] -> reshape to [B, 30] via Shape/Gather/Unsqueeze/Concat -> MatMul -> reshape to
    [B, 2, 4] the same way (the batch read from the MatMul output) -> z. With arith, as PyTorch
    exports x.view(x.size(0) * x.size(1), -1): [B, 2, 4] -> [B*2, 4] with Mul on the gathered dims
    -> Softmax -> y."""
    b = Builder(5000 + opset)
    batch = "batch" if symbolic else batches[0]
    x = "x"
    h = dynamic_reshape(b, x, [0], [30])
    h = b.op("Relu", [linear(b, h, 30, 8, "fc")])
    h = dynamic_reshape(b, h, [-2], [2, 4])  # the batch as Gather(Shape(h), -2): negative index
    z = b.op("Identity", [h], stem="z")
    outputs = [out_info(z, [batch, 2, 4])]
    if arith:
        b2, two = shape_dims(b, h, [0, 1])
        rows = b.op("Mul", [b2, two])
        h2 = b.op("Reshape", [h, b.op("Concat", [rows, b.const("four", np.array([4], np.int64))], axis=0)])
        y = b.op("Softmax", [h2], axis=-1, stem="y")
        outputs.append(out_info(y, ["rows" if symbolic else batch * 2, 4]))
    m = b.model(f"shape_{'symbolic' if symbolic else 'static'}_op{opset}",
                [helper.make_tensor_value_info(x, TensorProto.FLOAT, [batch, 6, 5])], outputs, opset)
    rng = np.random.default_rng(5)
    return m, [{x: randn(rng, (n, 6, 5))} for n in batches]


# name -> (builder, extra kiln args, known gap). A known gap is the start of the error kiln is
# expected to give today: the case runs, must fail with that error (shown as "gap" in the table),
# and fails the check once it passes, so that it is moved to the expected-to-work cases.
# Range(0, Shape(ids)[1]) now imports; the reshape to [batch, sequence, heads, d] needs two unknown
# dims, and kiln's reshape infers one.
SYMBOLIC_TWO_DIM_RESHAPE_GAP = "has more than one unknown dim"
CASES = {
    "mlp_op17": (lambda: mlp(17), [], None),
    "mlp_op13": (lambda: mlp(13), [], None),
    "mlp_symbolic_batch_op17": (lambda: mlp(17, batch_param=True), [], None),
    "resnet_op17": (lambda: resnet(17), [], None),
    "resnet_op13": (lambda: resnet(13), [], None),
    "mobilenet_op17": (lambda: mobilenet(17), [], None),
    "mobilenet_op13": (lambda: mobilenet(13), [], None),
    "branches_op17": (lambda: branches(17), [], None),
    "bert_ln_op17": (lambda: bert(17, True), [], None),
    "bert_decomposed_op17": (lambda: bert(17, False), [], None),
    "bert_decomposed_op13": (lambda: bert(13, False), [], None),
    "bert_decomposed_symbolic_batch_op17": (lambda: bert(17, False, symbolic=("batch",)), [], None),
    # Batch and sequence symbolic: the position ids are Range(0, Shape(ids)[1]).
    "bert_ln_symbolic_batch_sequence_op17": (lambda: bert(17, True, symbolic=("batch", "sequence")), [],
                                             SYMBOLIC_TWO_DIM_RESHAPE_GAP),
    "shape_static_op17": (lambda: shape_subgraph(17, False), [], None),
    "shape_static_op13": (lambda: shape_subgraph(13, False), [], None),
    # The symbolic batch bound at import (`--dim batch=3`): the shape subgraph folds.
    "shape_symbolic_bound_op17": (lambda: shape_subgraph(17, True), ["--dim", "batch=3"], None),
    # The symbolic batch left symbolic: Shape of a symbolic dim flows through Gather, Unsqueeze and
    # Concat into Reshape; one model, run at batch 3 and 5.
    "shape_symbolic_op17": (lambda: shape_subgraph(17, True, arith=False, batches=(3, 5)), [], None),
    "shape_symbolic_op13": (lambda: shape_subgraph(13, True, arith=False, batches=(3, 5)), [], None),
    # ... and through arithmetic on the gathered dims (Mul), as x.view(a * b, -1) exports.
    "shape_symbolic_arith_op17": (lambda: shape_subgraph(17, True, batches=(3, 5)), [], None),
}


def save_pb(array, name, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def compare(got, want):
    """(ok, rel, max_abs, why) for one output."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False, float("nan"), float("nan"), f"kiln {got.dtype}{list(got.shape)} vs ORT {want.dtype}{list(want.shape)}"
    if not np.issubdtype(want.dtype, np.floating):
        same = np.array_equal(got, want)
        return same, 0.0 if same else float("inf"), 0.0, "" if same else "values differ"
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not (np.isfinite(g).all() and np.isfinite(w).all()):
        return False, float("nan"), float("nan"), "non-finite values"
    if g.size == 0:
        return True, 0.0, 0.0, ""
    max_abs = float(np.abs(g - w).max())
    rel = max_abs / max(float(np.abs(w).max()), TINY)
    return rel <= REL_TOL, rel, max_abs, "" if rel <= REL_TOL else f"rel {rel:.3g} > {REL_TOL:g}"


class Row:
    def __init__(self, case, output="-", shape="-", rel=float("nan"), max_abs=float("nan"), status="FAIL", note=""):
        self.case, self.output, self.shape, self.rel, self.max_abs, self.status, self.note = \
            case, output, shape, rel, max_abs, status, note


def run_kiln(kiln, model_path, feeds, folder, extra):
    """kiln's outputs by ONNX name, or the first line of its error."""
    args = []
    for k, v in feeds.items():
        p = os.path.join(folder, f"in_{k}.pb")
        save_pb(v, k, p)
        args += ["-i", f"{k}={p}"]
    out_dir = os.path.join(folder, "kiln_out")
    proc = subprocess.run([kiln, "run", model_path, *args, "-o", out_dir, "--pb", *extra],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        err = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip() and "--help" not in ln]
        msg = err[0] if err else f"exit status {proc.returncode}"
        return None, msg.replace("kiln: error: ", "").replace(model_path + ": ", "")
    outs = {}
    for f in os.listdir(out_dir):
        if f.endswith(".pb"):
            outs[f[:-3]] = load_pb(os.path.join(out_dir, f))
    return outs, ""


def run_case(name, build, extra, kiln, work):
    """One table row per (input set, output): kiln against ONNX Runtime."""
    model, feed_sets = build()
    onnx.checker.check_model(model, full_check=True)
    folder = os.path.join(work, name)
    os.makedirs(folder, exist_ok=True)
    model_path = os.path.join(folder, "model.onnx")
    onnx.save(model, model_path)
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_path, opts, providers=["CPUExecutionProvider"])
    rows = []
    for k, feeds in enumerate(feed_sets):
        sub = os.path.join(folder, f"set_{k}")
        os.makedirs(sub, exist_ok=True)
        got, err = run_kiln(kiln, model_path, feeds, sub, extra)
        if got is None:
            rows.append(Row(name, note="kiln: " + err))
            continue
        for info, w in zip(sess.get_outputs(), sess.run(None, feeds)):
            w = np.asarray(w)
            g = got.get(info.name.replace("/", "_").replace("\\", "_"))
            if g is None:
                rows.append(Row(name, info.name, note=f"kiln gave no output {info.name}"))
                continue
            ok, rel, max_abs, why = compare(g, w)
            rows.append(Row(name, info.name, f"{w.dtype}{list(w.shape)}", rel, max_abs, "ok" if ok else "FAIL", why))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True, help="the kiln executable")
    ap.add_argument("--work", required=True, help="scratch folder for models, inputs and outputs")
    ap.add_argument("--only", default="", help="comma-separated case names")
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        sys.exit(f"peer_check: unknown case(s) {unknown}; cases: {list(CASES)}")
    if not (os.path.isfile(args.kiln) and os.access(args.kiln, os.X_OK)):
        sys.exit(f"peer_check: {args.kiln} is not an executable (build kiln_cli)")
    os.makedirs(args.work, exist_ok=True)
    print(f"onnx {onnx.__version__}, onnxruntime {ort.__version__} (CPU, ORT_ENABLE_ALL); "
          f"rel = max|kiln - ort| / max(max|ort|, {TINY:g}) per output, bound {REL_TOL:g}")
    rows = []
    for n in names:
        build, extra, gap = CASES[n]
        t0 = time.time()
        try:
            case_rows = run_case(n, build, extra, args.kiln, args.work)
        except Exception as e:  # a checker or ONNX Runtime error fails the case
            case_rows = [Row(n, note=f"{type(e).__name__}: {e}".splitlines()[0])]
        if gap is not None:
            # A known gap: every row must be kiln's expected error; a pass means the gap is closed.
            if all(r.status == "FAIL" and gap in r.note for r in case_rows):
                for r in case_rows:
                    r.status, r.note = "gap", "known gap: " + r.note
            elif all(r.status == "ok" for r in case_rows):
                for r in case_rows:
                    r.status, r.note = "FAIL", "passes now: move it to the expected-to-work cases"
        if case_rows and case_rows[0].status == "ok":
            case_rows[0].note = f"{time.time() - t0:.2f}s"
        rows += case_rows
    widths = [max(len(h), *(len(getattr(r, a)) for r in rows)) for h, a in
              [("model", "case"), ("output", "output"), ("dtype/shape", "shape")]]
    print(f"{'model':<{widths[0]}}  {'output':<{widths[1]}}  {'dtype/shape':<{widths[2]}}  {'rel err':>9}  "
          f"{'max abs':>9}  status")
    for r in rows:
        print(f"{r.case:<{widths[0]}}  {r.output:<{widths[1]}}  {r.shape:<{widths[2]}}  {r.rel:>9.2e}  "
              f"{r.max_abs:>9.2e}  {r.status:<4}  {r.note}")
    failed = sorted({r.case for r in rows if r.status == "FAIL"})
    gaps = sorted({r.case for r in rows if r.status == "gap"})
    print(f"{len(names) - len(failed) - len(gaps)} of {len(names)} models agree"
          + (f"; known gaps: {', '.join(gaps)}" if gaps else "")
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
