#!/usr/bin/env python3
"""Chains of 3x3 convolutions (Conv + bias, Relu, L times, C channels, H x H, padding 1; random
weights) through kiln with and without a tactic, against ONNX Runtime (issue #9).

Each chain is compiled twice with `kiln compile --no-autotune`: as kiln chooses, and with
`--no-tactic TACTIC` (default winograd, Note [Winograd tiles] in src/kernels/cpu/conv_nchwc.cc);
then the two engines and ONNX Runtime run alternately, each in its own process, --rounds times,
and the best median of each is printed.

    python3 bench/conv_chain_vs_ort.py --kiln build/tools/kiln --chains 64x56,256x14 --threads 1 2

ONNX Runtime: run_vs_ort.py's worker (all graph optimizations, intra-op threads = threads, inter-op
1, sequential).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run_vs_ort import run_ort  # noqa: E402  (ONNX Runtime in its own process, as the table's)


def chain_model(path, c, h, layers):
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(layers):
        w = (rng.standard_normal((c, c, 3, 3)) * (2.0 / (c * 9)) ** 0.5).astype(np.float32)
        b = (rng.standard_normal(c) * 0.1).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(b, f"b{i}")]
        nodes.append(helper.make_node("Conv", [cur, f"w{i}", f"b{i}"], [f"c{i}"], pads=[1] * 4, kernel_shape=[3, 3]))
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        cur = f"r{i}"
    g = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, h, h])],
                          [helper.make_tensor_value_info(cur, TensorProto.FLOAT, ["N", c, h, h])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, path)


def kiln_median(kiln, engine, batch, threads, iterations):
    out = subprocess.check_output([kiln, "bench", engine, "--batch", str(batch), "--threads", str(threads),
                                   "--iterations", str(iterations), "--warmup", "3"], text=True)
    return float(re.search(r"median ([0-9.]+)", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/tools/kiln")
    ap.add_argument("--work", default=None, help="where models and engines are written (default: a temp dir)")
    ap.add_argument("--chains", default="64x56,128x28,256x14", help="CxH,... (channels x plane side)")
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--without", default="winograd", help="the tactic the second engine leaves out")
    ap.add_argument("--batch", type=int, nargs="+", default=[1])
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=30)
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="kiln_chain_")
    os.makedirs(work, exist_ok=True)
    print(f"| chain | batch | threads | kiln ms | kiln without {a.without} ms | ORT ms | kiln / ORT |")
    print("|---|---|---|---|---|---|---|")
    for spec in a.chains.split(","):
        c, h = (int(v) for v in spec.split("x"))
        model = os.path.join(work, f"chain_{c}x{h}.onnx")
        chain_model(model, c, h, a.layers)
        with_t, without = model[:-5] + ".kiln", model[:-5] + f"_no_{a.without}.kiln"
        base = [a.kiln, "compile", model, "--no-autotune", "--batch", f"1:{max(a.batch)}"]
        subprocess.check_output(base + ["-o", with_t])
        subprocess.check_output(base + ["-o", without, "--no-tactic", a.without])
        for batch in a.batch:
            for threads in a.threads:
                best = {"kiln": 1e9, "without": 1e9, "ort": 1e9}
                for _ in range(a.rounds):
                    best["kiln"] = min(best["kiln"], kiln_median(a.kiln, with_t, batch, threads, a.iterations))
                    best["without"] = min(best["without"], kiln_median(a.kiln, without, batch, threads, a.iterations))
                    best["ort"] = min(best["ort"], run_ort(model, batch, threads, a.iterations, 3)["median"])
                print(f"| {c} ch, {h} x {h}, {a.layers} layers | {batch} | {threads} | {best['kiln']:.2f} | "
                      f"{best['without']:.2f} | {best['ort']:.2f} | {best['kiln'] / best['ort']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
