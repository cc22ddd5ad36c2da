"""The benchmark models of bench/run_vs_ort.py, built with onnx.helper and seeded random weights.

ResNet-18 and ResNet-50 (torchvision's layout: 7x7 stem, max pool, basic / bottleneck stages,
global average pool, fc 1000), MobileNetV2 (width 1.0: inverted residuals with ReLU6 and
depthwise 3x3), and a BERT-base-shaped encoder (12 layers, hidden 768, 12 heads, FFN 3072, GELU,
LayerNormalization, sequence 128, an additive attention mask); beyond those, ResNet-34 and a
MobileNetV3-Small (HardSwish, squeeze-excite, 5x5 depthwise), which run_vs_ort.py runs when named
in --models. Convolutions carry a separate BatchNormalization (as exported from training
frameworks) so the compilers' folding is part of what is measured. The batch dimension is symbolic ("N"), so one model serves batch 1 and 8.

    python3 bench/models.py OUT_DIR                              # writes resnet18.onnx, resnet50.onnx, ...
    python3 bench/models.py OUT_DIR --models mobilenet_v3_small  # only those named

Each builder also returns the model's multiply-accumulate count per sample (convolutions, GEMMs
and attention matmuls), for the compute floor in bench/RESULTS.md.
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8


class Graph:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0
        self.macs = 0  # per sample

    def name(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem, value, dtype=np.float32):
        n = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def randn(self, stem, shape, scale):
        return self.const(stem, self.rng.standard_normal(shape) * scale)

    def op(self, op_type, inputs, stem=None, **attrs):
        out = self.name(stem or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], name=self.name("n_" + op_type), **attrs))
        return out

    def model(self, name, inputs, outputs):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, initializer=self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              producer_name="kiln-bench", ir_version=IR_VERSION)
        onnx.checker.check_model(m)
        return m


# --- CNNs ----------------------------------------------------------------------------------------

def conv_bn(g, x, cin, cout, k, hw, stride=1, group=1, act="relu"):
    """Conv (no bias) + BatchNormalization + activation; hw is the input's spatial size."""
    w = g.randn("w", (cout, cin // group, k, k), np.sqrt(2.0 / (cin // group * k * k)))
    h = g.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4, group=group)
    out_hw = (hw + 2 * (k // 2) - k) // stride + 1
    g.macs += cout * (cin // group) * k * k * out_hw * out_hw
    bn = [g.const("bn_scale", g.rng.uniform(0.5, 1.0, cout)), g.const("bn_bias", g.rng.normal(0, 0.1, cout)),
          g.const("bn_mean", g.rng.normal(0, 0.1, cout)), g.const("bn_var", g.rng.uniform(0.5, 1.5, cout))]
    h = g.op("BatchNormalization", [h] + bn, epsilon=1e-5)
    if act == "relu":
        h = g.op("Relu", [h])
    elif act == "relu6":
        h = g.op("Clip", [h, g.const("zero", 0.0), g.const("six", 6.0)])
    return h, out_hw


def classifier(g, h, channels):
    h = g.op("GlobalAveragePool", [h])
    h = g.op("Flatten", [h], axis=1)
    g.macs += channels * 1000
    return g.op("Gemm", [h, g.randn("fc_w", (1000, channels), 1 / np.sqrt(channels)), g.const("fc_b", np.zeros(1000))],
                transB=1, stem="logits")


def resnet(depth):
    g = Graph(depth)
    x = "input"
    h, hw = conv_bn(g, x, 3, 64, 7, 224, stride=2)
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    hw = (hw + 1) // 2
    bottleneck = depth >= 50
    blocks = {18: [2, 2, 2, 2], 34: [3, 4, 6, 3], 50: [3, 4, 6, 3], 101: [3, 4, 23, 3]}[depth]
    cin = 64
    for stage, n in enumerate(blocks):
        width = 64 * 2**stage
        cout = width * 4 if bottleneck else width
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            if bottleneck:
                r, rhw = conv_bn(g, h, cin, width, 1, hw)
                r, rhw = conv_bn(g, r, width, width, 3, rhw, stride=stride)
                r, rhw = conv_bn(g, r, width, cout, 1, rhw, act=None)
            else:
                r, rhw = conv_bn(g, h, cin, width, 3, hw, stride=stride)
                r, rhw = conv_bn(g, r, width, cout, 3, rhw, act=None)
            s = h
            if stride != 1 or cin != cout:
                s, _ = conv_bn(g, h, cin, cout, 1, hw, stride=stride, act=None)
            h = g.op("Relu", [g.op("Add", [r, s])])
            cin, hw = cout, rhw
    y = classifier(g, h, cin)
    m = g.model(f"resnet{depth}", [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 3, 224, 224])],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", 1000])])
    return m, g.macs


def resnet_v2(depth):
    """Pre-activation ResNet (He et al., "Identity Mappings in Deep Residual Networks"; the ONNX model
    zoo's resnet*-v2): BatchNormalization and ReLU before each convolution, the shortcut reading the
    block input as it is, so the batch norm on each block's input has no convolution to fold into."""
    g = Graph(100 + depth)
    x = "input"

    def bn_relu(t, c):
        bn = [g.const("bn_scale", g.rng.uniform(0.5, 1.0, c)), g.const("bn_bias", g.rng.normal(0, 0.1, c)),
              g.const("bn_mean", g.rng.normal(0, 0.1, c)), g.const("bn_var", g.rng.uniform(0.5, 1.5, c))]
        return g.op("Relu", [g.op("BatchNormalization", [t] + bn, epsilon=1e-5)])

    def conv(t, cin, cout, k, hw, stride=1):
        w = g.randn("w", (cout, cin, k, k), np.sqrt(2.0 / (cin * k * k)))
        out_hw = (hw + 2 * (k // 2) - k) // stride + 1
        g.macs += cout * cin * k * k * out_hw * out_hw
        return g.op("Conv", [t, w], kernel_shape=[k, k], strides=[stride, stride], pads=[k // 2] * 4), out_hw

    h, hw = conv_bn(g, x, 3, 64, 7, 224, stride=2)
    h = g.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    hw = (hw + 1) // 2
    cin = 64
    for stage, n in enumerate({50: [3, 4, 6, 3], 101: [3, 4, 23, 3]}[depth]):
        width = 64 * 2**stage
        for i in range(n):
            stride = 2 if stage > 0 and i == 0 else 1
            a = bn_relu(h, cin)
            r, rhw = conv(a, cin, width, 1, hw)
            r, rhw = conv(bn_relu(r, width), width, width, 3, rhw, stride)
            r, rhw = conv(bn_relu(r, width), width, 4 * width, 1, rhw)
            s = conv(a, cin, 4 * width, 1, hw, stride)[0] if stride != 1 or cin != 4 * width else h
            h = g.op("Add", [r, s])
            cin, hw = 4 * width, rhw
    y = classifier(g, bn_relu(h, cin), cin)
    m = g.model(f"resnet{depth}_v2", [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 3, 224, 224])],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", 1000])])
    return m, g.macs


def mobilenet_v2():
    g = Graph(2)
    x = "input"
    h, hw = conv_bn(g, x, 3, 32, 3, 224, stride=2, act="relu6")
    cin = 32
    # (expansion t, channels c, repeats n, first stride s), as in the paper.
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                       (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            r, rhw = h, hw
            hidden = cin * t
            if t != 1:
                r, rhw = conv_bn(g, r, cin, hidden, 1, rhw, act="relu6")
            r, rhw = conv_bn(g, r, hidden, hidden, 3, rhw, stride=stride, group=hidden, act="relu6")
            r, rhw = conv_bn(g, r, hidden, c, 1, rhw, act=None)
            h = g.op("Add", [h, r]) if stride == 1 and cin == c else r
            cin, hw = c, rhw
    h, hw = conv_bn(g, h, cin, 1280, 1, hw, act="relu6")
    y = classifier(g, h, 1280)
    m = g.model("mobilenet_v2", [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 3, 224, 224])],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", 1000])])
    return m, g.macs


def mobilenet_v1():
    """MobileNetV1 (width 1.0): 13 depthwise-separable blocks, ReLU6 (Clip), no residuals."""
    g = Graph(5)
    x = "input"
    h, hw = conv_bn(g, x, 3, 32, 3, 224, stride=2, act="relu6")
    cin = 32
    for c, s in [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]:
        h, hw = conv_bn(g, h, cin, cin, 3, hw, stride=s, group=cin, act="relu6")
        h, hw = conv_bn(g, h, cin, c, 1, hw, act="relu6")
        cin = c
    y = classifier(g, h, cin)
    m = g.model("mobilenet_v1", [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 3, 224, 224])],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", 1000])])
    return m, g.macs


def mobilenet_v3(name, seed, blocks, last):
    """MobileNetV3 from its paper's layer table (width 1.0): HardSwish or ReLU per block,
    squeeze-excite (GlobalAveragePool, 1x1 conv, ReLU, 1x1 conv, HardSigmoid, Mul) where the paper
    has it, 3x3 and 5x5 depthwise convolutions; the last convolution's `last` channels feed the
    classifier (the paper's wider hidden layer is left out). blocks: (kernel, expanded channels,
    out channels, squeeze-excite, activation, stride)."""
    g = Graph(seed)
    x = "input"
    h, hw = conv_bn(g, x, 3, 16, 3, 224, stride=2, act=None)
    h = g.op("HardSwish", [h])
    cin = 16
    for k, e, c, se, act, s in blocks:
        relu = "relu" if act == "RE" else None
        r, rhw = h, hw
        if e != cin:
            r, rhw = conv_bn(g, r, cin, e, 1, rhw, act=relu)
            r = r if relu else g.op("HardSwish", [r])
        r, rhw = conv_bn(g, r, e, e, k, rhw, stride=s, group=e, act=relu)
        r = r if relu else g.op("HardSwish", [r])
        if se:
            sq = max(8, e // 4)
            p = g.op("GlobalAveragePool", [r])
            p = g.op("Relu", [g.op("Conv", [p, g.randn("se_w", (sq, e, 1, 1), 1 / np.sqrt(e)), g.const("se_b", np.zeros(sq))])])
            p = g.op("Conv", [p, g.randn("se_w", (e, sq, 1, 1), 1 / np.sqrt(sq)), g.const("se_b", np.zeros(e))])
            g.macs += 2 * e * sq
            r = g.op("Mul", [r, g.op("HardSigmoid", [p], alpha=1.0 / 6, beta=0.5)])
        r, rhw = conv_bn(g, r, e, c, 1, rhw, act=None)
        h = g.op("Add", [h, r]) if s == 1 and cin == c else r
        cin, hw = c, rhw
    h, hw = conv_bn(g, h, cin, last, 1, hw, act=None)
    y = classifier(g, g.op("HardSwish", [h]), last)
    m = g.model(name, [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", 3, 224, 224])],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", 1000])])
    return m, g.macs


def mobilenet_v3_small():
    return mobilenet_v3("mobilenet_v3_small", 4,
                        [(3, 16, 16, 1, "RE", 2), (3, 72, 24, 0, "RE", 2), (3, 88, 24, 0, "RE", 1),
                         (5, 96, 40, 1, "HS", 2), (5, 240, 40, 1, "HS", 1), (5, 240, 40, 1, "HS", 1),
                         (5, 120, 48, 1, "HS", 1), (5, 144, 48, 1, "HS", 1), (5, 288, 96, 1, "HS", 2),
                         (5, 576, 96, 1, "HS", 1), (5, 576, 96, 1, "HS", 1)], 576)


def mobilenet_v3_large():
    return mobilenet_v3("mobilenet_v3_large", 6,
                        [(3, 16, 16, 0, "RE", 1), (3, 64, 24, 0, "RE", 2), (3, 72, 24, 0, "RE", 1),
                         (5, 72, 40, 1, "RE", 2), (5, 120, 40, 1, "RE", 1), (5, 120, 40, 1, "RE", 1),
                         (3, 240, 80, 0, "HS", 2), (3, 200, 80, 0, "HS", 1), (3, 184, 80, 0, "HS", 1),
                         (3, 184, 80, 0, "HS", 1), (3, 480, 112, 1, "HS", 1), (3, 672, 112, 1, "HS", 1),
                         (5, 672, 160, 1, "HS", 2), (5, 960, 160, 1, "HS", 1), (5, 960, 160, 1, "HS", 1)], 960)


# --- BERT-base-shaped encoder --------------------------------------------------------------------

def bert_base(layers=12, hidden=768, heads=12, ffn=3072, seq=128):
    g = Graph(3)
    x, mask = "hidden_states", "attention_mask"  # [N, S, H] embeddings; [N, 1, 1, S] additive mask
    dh = hidden // heads
    h = x

    def linear(t, n_in, n_out):
        g.macs += seq * n_in * n_out
        y = g.op("MatMul", [t, g.randn("w", (n_in, n_out), 1 / np.sqrt(n_in))])
        return g.op("Add", [y, g.const("b", g.rng.normal(0, 0.02, n_out))])

    def layer_norm(t):
        return g.op("LayerNormalization", [t, g.const("ln_g", g.rng.uniform(0.8, 1.2, hidden)),
                                           g.const("ln_b", g.rng.normal(0, 0.02, hidden))], axis=-1, epsilon=1e-12)

    split = g.const("heads_shape", [0, seq, heads, dh], np.int64)
    merge = g.const("merge_shape", [0, seq, hidden], np.int64)
    for _ in range(layers):
        def heads_of(t, perm):
            return g.op("Transpose", [g.op("Reshape", [t, split])], perm=perm)
        q = heads_of(linear(h, hidden, hidden), [0, 2, 1, 3])  # [N, heads, S, dh]
        kt = heads_of(linear(h, hidden, hidden), [0, 2, 3, 1])  # [N, heads, dh, S]
        v = heads_of(linear(h, hidden, hidden), [0, 2, 1, 3])
        g.macs += 2 * heads * seq * seq * dh
        scores = g.op("Div", [g.op("MatMul", [q, kt]), g.const("scale", np.sqrt(dh))])
        probs = g.op("Softmax", [g.op("Add", [scores, mask])], axis=-1)
        ctx = g.op("Transpose", [g.op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        attn = linear(g.op("Reshape", [ctx, merge]), hidden, hidden)
        h = layer_norm(g.op("Add", [attn, h]))
        # GELU in the erf form PyTorch exports below opset 20: x * (1 + erf(x / sqrt 2)) * 0.5.
        t = linear(h, hidden, ffn)
        e = g.op("Erf", [g.op("Div", [t, g.const("sqrt2", np.sqrt(2.0))])])
        f = g.op("Mul", [g.op("Mul", [t, g.op("Add", [e, g.const("one", 1.0)])]), g.const("half", 0.5)])
        h = layer_norm(g.op("Add", [linear(f, ffn, hidden), h]))
    y = g.op("Identity", [h], stem="last_hidden_state")
    m = g.model("bert_base", [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["N", seq, hidden]),
                              helper.make_tensor_value_info(mask, TensorProto.FLOAT, ["N", 1, 1, seq])],
                [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", seq, hidden])])
    return m, g.macs


MODELS = {
    "resnet18": lambda: resnet(18),
    "resnet50": lambda: resnet(50),
    "mobilenet_v2": mobilenet_v2,
    "bert_base": bert_base,
    # Beyond issue #9's four: shapes and ops those do not have (more basic blocks; HardSwish,
    # squeeze-excite and 5x5 depthwise layers; batch norms no convolution precedes).
    "resnet34": lambda: resnet(34),
    "mobilenet_v3_small": mobilenet_v3_small,
    "resnet50_v2": lambda: resnet_v2(50),
    "mobilenet_v1": mobilenet_v1,
    "mobilenet_v3_large": mobilenet_v3_large,
}
DEFAULT_MODELS = ["resnet18", "resnet50", "mobilenet_v2", "bert_base"]  # run_vs_ort.py's default set


def feeds(name, model, batch, seed=0):
    """Random inputs (never zero) for one run at `batch`; the mask hides the last 16 positions."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        dims = [batch if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.name == "attention_mask":
            m = np.zeros(dims, np.float32)
            m[..., -16:] = -10000.0
            out[vi.name] = m
        else:
            out[vi.name] = (rng.standard_normal(dims) + 0.01).astype(np.float32)
    return out


def main():
    ap = argparse.ArgumentParser(description="Write the benchmark models (seeded random weights) as ONNX files.")
    ap.add_argument("out", nargs="?", default="bench/models", help="directory to write NAME.onnx into")
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated subset of " + ", ".join(MODELS))
    args = ap.parse_args()
    names = [n for n in args.models.split(",") if n]
    unknown = [n for n in names if n not in MODELS]
    if unknown:
        ap.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    out = args.out
    os.makedirs(out, exist_ok=True)
    for name in names:
        build = MODELS[name]
        m, macs = build()
        onnx.save(m, os.path.join(out, name + ".onnx"))
        print(f"{name}: {len(m.graph.node)} nodes, {macs / 1e9:.2f} GMAC per sample")


if __name__ == "__main__":
    main()
