"""Measures the transformer fusions (layer_norm_fusion, gelu_fusion, attention_fusion) one by one
against the unfused graph on one BERT-base-shaped encoder layer (batch 1, sequence 128, hidden 768,
12 heads, FFN 3072), built with onnx.helper the way PyTorch exports it below opset 17/20: LayerNorm
decomposed (ReduceMean, Sub, Pow 2, ReduceMean, Add eps, Sqrt, Div, Mul gamma, Add beta), GELU
in the erf form (Div sqrt2, Erf, Add 1, Mul x, Mul 0.5), attention as MatMul(q, k^T) / sqrt(dh) +
mask -> Softmax -> MatMul(., v) with k^T = Transpose(perm 0,2,3,1).

    python3 bench/transformer_fusion_bench.py BUILD/tools/kiln [--threads 1] [--rounds 5]

Each pattern is measured alone at the layer's shapes (LayerNorm on [1, 128, 768], GELU on
[1, 128, 3072], attention from [1, 128, 768] q/k/v through the head split and merge), then the
whole layer with each fusion on its own and all three. Every configuration is -O2 with the three
fusions disabled except the ones named, and configurations alternate round by round (the machine
may be shared); each row is the median of per-round medians.
"""
import argparse
import json
import os
import subprocess
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FUSIONS = ["layer_norm_fusion", "gelu_fusion", "attention_fusion"]


def bert_layer(seq=128, hidden=768, heads=12, ffn=3072, seed=0, part="layer"):
    """The whole layer, or one pattern alone at the layer's shapes (part = layer_norm, gelu,
    attention)."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def name(stem):
        count[0] += 1
        return f"{stem}_{count[0]}"

    def const(stem, value, dtype=np.float32):
        n = name(stem)
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), n))
        return n

    def op(op_type, inputs, **attrs):
        out = name(op_type.lower())
        nodes.append(helper.make_node(op_type, inputs, [out], name=name("n_" + op_type), **attrs))
        return out

    def linear(t, n_in, n_out):
        y = op("MatMul", [t, const("w", rng.standard_normal((n_in, n_out)) / np.sqrt(n_in))])
        return op("Add", [y, const("b", rng.normal(0, 0.02, n_out))])

    def layer_norm(t):
        mu = op("ReduceMean", [t], axes=[-1], keepdims=1)
        d = op("Sub", [t, mu])
        var = op("ReduceMean", [op("Pow", [d, const("two", 2.0)])], axes=[-1], keepdims=1)
        n = op("Div", [d, op("Sqrt", [op("Add", [var, const("eps", 1e-12)])])])
        n = op("Mul", [n, const("gamma", rng.uniform(0.8, 1.2, hidden))])
        return op("Add", [n, const("beta", rng.normal(0, 0.02, hidden))])

    dh = hidden // heads
    x, mask = "hidden_states", "attention_mask"
    split = const("heads_shape", [1, seq, heads, dh], np.int64)
    merge = const("merge_shape", [1, seq, hidden], np.int64)

    def heads_of(t, perm):
        return op("Transpose", [op("Reshape", [t, split])], perm=perm)

    def attention(q_in, k_in, v_in):
        q = heads_of(q_in, [0, 2, 1, 3])
        kt = heads_of(k_in, [0, 2, 3, 1])
        v = heads_of(v_in, [0, 2, 1, 3])
        scores = op("Div", [op("MatMul", [q, kt]), const("scale", np.sqrt(dh))])
        probs = op("Softmax", [op("Add", [scores, mask])], axis=-1)
        return op("Reshape", [op("Transpose", [op("MatMul", [probs, v])], perm=[0, 2, 1, 3]), merge])

    def gelu(t):
        e = op("Erf", [op("Div", [t, const("sqrt2", np.sqrt(2.0))])])
        return op("Mul", [op("Mul", [t, op("Add", [e, const("one", 1.0)])]), const("half", 0.5)])

    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, hidden]),
              helper.make_tensor_value_info(mask, TensorProto.FLOAT, [1, 1, 1, seq])]
    out_dim = hidden
    if part == "layer":
        ctx = attention(linear(x, hidden, hidden), linear(x, hidden, hidden), linear(x, hidden, hidden))
        h = layer_norm(op("Add", [linear(ctx, hidden, hidden), x]))
        f = gelu(linear(h, hidden, ffn))
        y = layer_norm(op("Add", [linear(f, ffn, hidden), h]))
    elif part == "layer_norm":
        y = layer_norm(x)
        inputs = inputs[:1]
    elif part == "gelu":
        inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, ffn])]
        y = gelu(x)
        out_dim = ffn
    else:
        inputs += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, seq, hidden]) for n in ("keys", "values")]
        y = attention(x, "keys", "values")
    graph = helper.make_graph(nodes, "bert_" + part, inputs,
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [1, seq, out_dim])],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.checker.check_model(m)
    return m


def run(kiln, model, enabled, threads, iterations):
    cmd = [kiln, "bench", model, "-O", "2", "--threads", str(threads), "--iterations", str(iterations),
           "--warmup", "10", "--json"]
    for f in FUSIONS:
        if f not in enabled:
            cmd += ["--disable-pass", f]
    out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    return out["latency_ms"]["median"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kiln")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="kiln_tf_")
    print(f"BERT-base shapes (batch 1, seq 128, hidden 768, 12 heads, FFN 3072), -O2, {a.threads} thread(s), "
          f"{a.rounds} alternating rounds x {a.iterations} iterations; ms = median of per-round medians")
    for part, fusion in [("layer_norm", "layer_norm_fusion"), ("gelu", "gelu_fusion"),
                         ("attention", "attention_fusion"), ("layer", None)]:
        model = os.path.join(work, part + ".onnx")
        onnx.save(bert_layer(part=part), model)
        if fusion:
            configs = [("unfused", []), ("fused", [fusion])]
        else:
            configs = [("unfused", []), ("+layer_norm", ["layer_norm_fusion"]), ("+gelu", ["gelu_fusion"]),
                       ("+attention", ["attention_fusion"]), ("all three", FUSIONS)]
        results = {c: [] for c, _ in configs}
        for r in range(a.rounds):
            for label, enabled in (configs if r % 2 == 0 else configs[::-1]):
                results[label].append(run(a.kiln, model, enabled, a.threads, a.iterations))
        base = float(np.median(results["unfused"]))
        title = "one encoder layer" if part == "layer" else part + " alone"
        print(f"{title}:")
        for label, _ in configs:
            med = float(np.median(results[label]))
            rounds = " ".join(f"{x:.3f}" for x in results[label])
            print(f"  {label:<12} {med:>9.3f} ms {base / med:>6.2f}x   rounds: {rounds}")


if __name__ == "__main__":
    main()
