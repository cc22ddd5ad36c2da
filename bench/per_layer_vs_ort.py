#!/usr/bin/env python3
"""Per-layer times of a kiln engine beside ONNX Runtime's for the same model, on a noisy machine.

Runs `kiln bench ENGINE --json` (its per-layer profile) and an ONNX Runtime session with profiling
on, alternately, ROUNDS times each, and keeps every layer's fastest time over the rounds on each
side: a stretch in which a neighbour slowed one run then costs that run, not the comparison. The
two lists are printed side by side in execution order (ORT's fused nodes and kiln's steps mostly
pair up one to one for convolution networks; rows are matched by position, not by name), with
the sum of the per-layer minima of each.

    python3 bench/per_layer_vs_ort.py --kiln build/tools/kiln --engine mobilenet_v2.kiln \\
        --model mobilenet_v2.onnx --batch 1 --threads 2 --rounds 4

The ONNX Runtime side: all graph optimizations, intra-op threads = --threads, inter-op 1,
sequential, input random in [0, 1).
"""
import argparse
import json
import subprocess
import sys
import tempfile


def kiln_layers(kiln, engine, batch, threads, iterations):
    out = subprocess.check_output([kiln, "bench", engine, "--batch", str(batch), "--threads", str(threads),
                                   "--iterations", str(iterations), "--warmup", "3", "--json"])
    # The median of the runs, as for ONNX Runtime below (the mean takes in every slowed run).
    return [(l["name"], float(l.get("median_ms", l["ms"]))) for l in json.loads(out)["layers"]]


def ort_layers(model, batch, threads, iterations):
    import numpy as np
    import onnxruntime as ort
    o = ort.SessionOptions()
    o.intra_op_num_threads = threads
    o.inter_op_num_threads = 1
    o.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    o.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    o.enable_profiling = True
    o.profile_file_prefix = tempfile.mkdtemp() + "/ort"
    s = ort.InferenceSession(model, o, providers=["CPUExecutionProvider"])
    i = s.get_inputs()[0]
    x = np.random.rand(*([batch] + list(i.shape[1:]))).astype(np.float32)
    for _ in range(iterations + 1):
        s.run(None, {i.name: x})
    times, order = {}, []
    for e in json.load(open(s.end_profiling())):
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            n = e["name"][:-len("_kernel_time")]
            if n not in times:
                order.append(n)
                times[n] = []
            times[n].append(e["dur"] / 1e3)
    # The first run (allocation, packing) is left out; the median of the rest.
    return [(n, sorted(times[n][1:] or times[n])[len(times[n][1:] or times[n]) // 2]) for n in order]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", default="build/tools/kiln")
    ap.add_argument("--engine", required=True, help="a kiln engine compiled from --model")
    ap.add_argument("--model", required=True, help="the ONNX model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--iterations", type=int, default=20)
    a = ap.parse_args()
    k_min, o_min = {}, {}
    k_order, o_order = [], []
    for _ in range(a.rounds):
        for dst, order, rows in ((k_min, k_order, kiln_layers(a.kiln, a.engine, a.batch, a.threads, a.iterations)),
                                 (o_min, o_order, ort_layers(a.model, a.batch, a.threads, a.iterations))):
            for n, ms in rows:
                if n not in dst:
                    order.append(n)
                    dst[n] = ms
                dst[n] = min(dst[n], ms)
    kt, ot = sum(k_min.values()), sum(o_min.values())
    print(f"batch {a.batch}, {a.threads} threads, {a.rounds} rounds: sum of per-layer minima kiln {kt:.3f} ms, "
          f"ORT {ot:.3f} ms, kiln / ORT {kt / ot:.3f}")
    print(f"{'#':>3} {'kiln step':28s} {'ms':>8} | {'ORT node':32s} {'ms':>8} {'kiln - ORT':>10}")
    for i in range(max(len(k_order), len(o_order))):
        kn = k_order[i] if i < len(k_order) else ""
        on = o_order[i] if i < len(o_order) else ""
        km, om = k_min.get(kn, 0.0), o_min.get(on, 0.0)
        print(f"{i:3d} {kn[:28]:28s} {km:8.3f} | {on[:32]:32s} {om:8.3f} {km - om:+10.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
