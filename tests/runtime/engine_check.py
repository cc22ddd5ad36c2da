#!/usr/bin/env python3
"""Engines end to end through the CLI: ONNX models built here with onnx.helper (an MLP and a
ResNet-style CNN with a symbolic batch, a transformer encoder block with static shapes) are
compiled with `kiln compile` at -O0..-O3, run with `kiln run ENGINE.kiln` at every batch of the
feeds, and compared with ONNX Runtime and with kiln's reference executor (`kiln run MODEL.onnx`):

    rel = max|engine - want| / max(max|want|, 1e-30)  <= 1e-4 per output (f32).

Also checks `kiln inspect ENGINE` (signature, target, steps, arena), `kiln bench --json` (the
object's keys and that the layers add up), and that damaged engines (truncated, one flipped
byte) fail with exit status 1 and a "kiln: error:" line rather than a crash.

Usage: engine_check.py --kiln path/to/kiln --work DIR
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

REL_TOL = 1e-4


class Builder:
    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits, self.count = [], [], 0

    def name(self, stem):
        self.count += 1
        return f"{stem}_{self.count}"

    def const(self, stem, array):
        n = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(array), n))
        return n

    def weight(self, stem, shape, scale=1.0):
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        w = (self.rng.standard_normal(shape) * (scale / np.sqrt(fan_in))).astype(np.float32)
        w[np.abs(w) < 1e-4] = 1e-4
        return self.const(stem, w)

    def vec(self, stem, n, lo=-0.5, hi=0.5):
        return self.const(stem, self.rng.uniform(lo, hi, n).astype(np.float32))

    def op(self, op_type, inputs, stem=None, **attrs):
        out = stem or self.name(op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def model(self, name, inputs, outputs):
        g = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        m.ir_version = 8
        return m


def randn(rng, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    x[np.abs(x) < 1e-3] = 1e-3
    return x


def vinfo(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def mlp():
    b = Builder(1)
    h = b.op("Relu", [b.op("Gemm", ["x", b.weight("w1", (48, 21)), b.vec("b1", 48)], transB=1)])
    h = b.op("Sigmoid", [b.op("Add", [b.op("MatMul", [h, b.weight("w2", (48, 17))]), b.vec("b2", 17)])])
    y = b.op("Softmax", [b.op("Gemm", [h, b.weight("w3", (9, 17)), b.vec("b3", 9)], transB=1)], stem="y", axis=-1)
    rng = np.random.default_rng(11)
    return (b.model("mlp", [vinfo("x", ["batch", 21])], [vinfo(y, ["batch", 9])]),
            [{"x": randn(rng, (n, 21))} for n in (4, 1, 3)], "1:4")


def conv_bn(b, x, cin, cout, k, stride=1, relu=True):
    h = b.op("Conv", [x, b.weight("w", (cout, cin, k, k), 1.4)], kernel_shape=[k, k], strides=[stride, stride],
             pads=[k // 2] * 4)
    h = b.op("BatchNormalization", [h, b.vec("g", cout, 0.5, 1.5), b.vec("beta", cout), b.vec("mu", cout, -0.2, 0.2),
                                    b.vec("var", cout, 0.5, 2.0)], epsilon=1e-5)
    return b.op("Relu", [h]) if relu else h


def resnet():
    b = Builder(2)
    h = conv_bn(b, "image", 3, 16, 7, stride=2)
    h = b.op("MaxPool", [h], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    r = conv_bn(b, conv_bn(b, h, 16, 16, 3), 16, 16, 3, relu=False)
    h = b.op("Relu", [b.op("Add", [r, h])])
    r = conv_bn(b, conv_bn(b, h, 16, 32, 3, stride=2), 32, 32, 3, relu=False)
    h = b.op("Relu", [b.op("Add", [r, conv_bn(b, h, 16, 32, 1, stride=2, relu=False)])])
    h = b.op("Flatten", [b.op("GlobalAveragePool", [h])], axis=1)
    y = b.op("Gemm", [h, b.weight("fc_w", (10, 32)), b.vec("fc_b", 10)], transB=1, stem="logits")
    rng = np.random.default_rng(12)
    return (b.model("resnet", [vinfo("image", ["N", 3, 33, 33])], [vinfo(y, ["N", 10])]),
            [{"image": randn(rng, (n, 3, 33, 33))} for n in (3, 1)], "1:3")


def encoder():
    """One post-LN transformer encoder layer, batch 2, sequence 5, hidden 16, 2 heads."""
    b = Builder(3)
    B, S, H, NH = 2, 5, 16, 2
    x = "x"
    q, k, v = (b.op("Add", [b.op("MatMul", [x, b.weight(n, (H, H))]), b.vec(n + "_b", H)]) for n in "qkv")
    to_heads = b.const("heads_shape", np.array([B, S, NH, H // NH], np.int64))
    qh = b.op("Transpose", [b.op("Reshape", [q, to_heads])], perm=[0, 2, 1, 3])
    kh = b.op("Transpose", [b.op("Reshape", [k, to_heads])], perm=[0, 2, 3, 1])
    vh = b.op("Transpose", [b.op("Reshape", [v, to_heads])], perm=[0, 2, 1, 3])
    scores = b.op("Mul", [b.op("MatMul", [qh, kh]), b.const("scale", np.float32(1 / np.sqrt(H // NH)))])
    att = b.op("MatMul", [b.op("Softmax", [scores], axis=-1), vh])
    att = b.op("Reshape", [b.op("Transpose", [att], perm=[0, 2, 1, 3]), b.const("back", np.array([B, S, H], np.int64))])
    h = b.op("Add", [x, b.op("MatMul", [att, b.weight("o", (H, H))])])
    h = b.op("LayerNormalization", [h, b.vec("ln1_g", H, 0.5, 1.5), b.vec("ln1_b", H)], axis=-1, epsilon=1e-5)
    f = b.op("MatMul", [h, b.weight("ff1", (H, 4 * H))])
    f = b.op("Mul", [b.op("Mul", [f, b.const("half", np.float32(0.5))]),
                     b.op("Add", [b.op("Erf", [b.op("Div", [f, b.const("sqrt2", np.float32(np.sqrt(2)))])]),
                                  b.const("one", np.float32(1))])])
    h = b.op("Add", [h, b.op("MatMul", [f, b.weight("ff2", (4 * H, H))])])
    y = b.op("LayerNormalization", [h, b.vec("ln2_g", H, 0.5, 1.5), b.vec("ln2_b", H)], stem="y", axis=-1, epsilon=1e-5)
    rng = np.random.default_rng(13)
    return b.model("encoder", [vinfo(x, [B, S, H])], [vinfo(y, [B, S, H])]), [{x: randn(rng, (B, S, H))}], None


MODELS = {"mlp": mlp, "resnet": resnet, "encoder": encoder}


def save_pb(array, name, path):
    with open(path, "wb") as f:
        f.write(numpy_helper.from_array(array, name).SerializeToString())


def load_pb(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return numpy_helper.to_array(t)


def kiln(args, *cmd, check=True):
    p = subprocess.run([args.kiln, *cmd], capture_output=True, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"kiln {' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip() or p.stdout.strip()}")
    return p


def run_outputs(args, target, feeds, folder):
    os.makedirs(folder, exist_ok=True)
    cmd = ["run", target]
    for k, v in feeds.items():
        p = os.path.join(folder, f"in_{k}.pb")
        save_pb(v, k, p)
        cmd += ["-i", f"{k}={p}"]
    out = os.path.join(folder, "out")
    kiln(args, *cmd, "-o", out, "--pb")
    return {f[:-3]: load_pb(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".pb")}


def rel_err(got, want):
    if got.shape != want.shape or got.dtype != want.dtype:
        return float("inf")
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not np.isfinite(g).all():
        return float("inf")
    return float(np.abs(g - w).max()) / max(float(np.abs(w).max()), 1e-30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    failures = []
    for name, build in MODELS.items():
        model, feed_sets, batch = build()
        onnx.checker.check_model(model, full_check=True)
        folder = os.path.join(args.work, name)
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, "model.onnx")
        onnx.save(model, path)
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        refs = [run_outputs(args, path, feeds, os.path.join(folder, f"ref_{i}")) for i, feeds in enumerate(feed_sets)]
        for level in range(4):
            engine = os.path.join(folder, f"O{level}.kiln")
            cmd = ["compile", path, "-o", engine, f"-O{level}"] + (["--batch", batch] if batch else [])
            try:
                report = kiln(args, *cmd).stdout
                if "memory: arena" not in report or "passes:" not in report:
                    raise RuntimeError("compile report lacks the pass report or the memory plan:\n" + report)
                for i, feeds in enumerate(feed_sets):
                    got = run_outputs(args, engine, feeds, os.path.join(folder, f"O{level}_{i}"))
                    for info, want in zip(sess.get_outputs(), sess.run(None, feeds)):
                        g = got.get(info.name)
                        if g is None:
                            raise RuntimeError(f"engine gave no output {info.name}")
                        r_ort, r_ref = rel_err(g, np.asarray(want)), rel_err(g, refs[i][info.name])
                        ok = r_ort <= REL_TOL and r_ref <= REL_TOL
                        print(f"{name:8} -O{level} batch {list(feeds.values())[0].shape[0]}  {info.name}: "
                              f"rel vs ORT {r_ort:.2e}, vs reference {r_ref:.2e}  {'ok' if ok else 'FAIL'}")
                        if not ok:
                            failures.append(f"{name} -O{level} set {i}")
            except RuntimeError as e:
                print(f"{name:8} -O{level}  FAIL {e}")
                failures.append(f"{name} -O{level}")
        # inspect and bench on the -O2 engine
        engine = os.path.join(folder, "O2.kiln")
        if os.path.exists(engine):
            text = kiln(args, "inspect", engine).stdout
            for part in ("target: ", "inputs:", "outputs:", "arena: ", "steps ("):
                if part not in text:
                    failures.append(f"{name}: inspect lacks '{part}'")
            bench_batch = batch.split(":")[1] if batch else "1"
            out = kiln(args, "bench", engine, "--batch", bench_batch, "--iterations", "5", "--warmup", "1",
                       "--json").stdout
            j = json.loads(out)
            keys = {"batch", "threads", "iterations", "latency_ms", "throughput_per_s", "layers"}
            lat = j.get("latency_ms", {})
            if not keys <= set(j) or not {"min", "median", "p90", "p99"} <= set(lat) or \
                    not lat["min"] <= lat["median"] <= lat["p90"] <= lat["p99"] or not j["layers"] or \
                    abs(sum(layer["percent"] for layer in j["layers"]) - 100) > 0.5 or j["iterations"] != 5:
                failures.append(f"{name}: bench --json object is wrong: {out}")
            # An engine runs on the threads its tactics were chosen for unless told otherwise.
            one = os.path.join(folder, "threads1.kiln")
            kiln(args, "compile", path, "-o", one, "-O2", "--threads", "1", "--no-autotune",
                 *(["--batch", batch] if batch else []))
            j1 = json.loads(kiln(args, "bench", one, "--batch", bench_batch, "--iterations", "1", "--warmup", "0",
                                 "--json").stdout)
            if j1.get("threads") != 1:
                failures.append(f"{name}: an engine compiled for 1 thread was benchmarked on {j1.get('threads')}")
            # Damaged engines: an error, never a crash.
            data = open(engine, "rb").read()
            for label, bad in (("truncated", data[: len(data) // 2]),
                               ("flipped", data[:100] + bytes([data[100] ^ 0x10]) + data[101:])):
                p = os.path.join(folder, f"{label}.kiln")
                open(p, "wb").write(bad)
                r = kiln(args, "inspect", p, check=False)
                if r.returncode != 1 or "kiln: error:" not in r.stderr:
                    failures.append(f"{name}: {label} engine gave status {r.returncode}: {r.stderr.strip()}")
    print("all engines agree" if not failures else "FAILED: " + "; ".join(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
