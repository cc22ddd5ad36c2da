#!/usr/bin/env python3
"""Pooling and depthwise-convolution layers: kiln (bench/conv_pool_bench.cc) against ONNX Runtime.

Each layer is a single-node ONNX model (onnx.helper) run by ONNX Runtime in this process (all graph
optimizations, intra-op threads = kiln's threads, inter-op 1), alternated with kiln's Google
Benchmark binary in a child process, `--rounds` times; the table gives the median wall time of
each (both timed as the mean over a >= 0.5 s loop, median of 3 loops) and kiln / ORT (below 1 =
kiln faster).

  python3 bench/conv_pool_vs_ort.py --kiln build/bench/kiln_bench_conv_pool [--rounds 3]
"""
import argparse
import json
import statistics
import subprocess
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

# (kiln benchmark name without threads, ONNX op, input shape, attributes, weight shape or None)
def cases():
    out = []
    for n in (1, 8):
        out.append((f"BM_max_pool_3x3s2/n:{n}", "MaxPool", [n, 64, 112, 112],
                    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), None))
        out.append((f"BM_max_pool_2x2s2/n:{n}", "MaxPool", [n, 64, 56, 56], dict(kernel_shape=[2, 2], strides=[2, 2]), None))
        out.append((f"BM_avg_pool_2x2s2/n:{n}", "AveragePool", [n, 64, 56, 56],
                    dict(kernel_shape=[2, 2], strides=[2, 2]), None))
        out.append((f"BM_global_avg_pool/n:{n}", "GlobalAveragePool", [n, 512, 7, 7], {}, None))
        out.append((f"BM_depthwise_3x3/n:{n}/c:32/hw:112/stride:1", "Conv", [n, 32, 112, 112],
                    dict(kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], group=32), [32, 1, 3, 3]))
        out.append((f"BM_depthwise_3x3/n:{n}/c:144/hw:56/stride:2", "Conv", [n, 144, 56, 56],
                    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], group=144), [144, 1, 3, 3]))
    return out


def model(op, shape, attrs, wshape):
    rng = np.random.default_rng(0)
    inits, inputs = [], ["x"]
    if wshape is not None:
        inits.append(numpy_helper.from_array(rng.standard_normal(wshape).astype(np.float32), "w"))
        inits.append(numpy_helper.from_array(rng.standard_normal([wshape[0]]).astype(np.float32), "b"))
        inputs += ["w", "b"]
    node = helper.make_node(op, inputs, ["y"], **attrs)
    graph = helper.make_graph([node], "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def time_ort(sess, x, min_time=0.5, repetitions=3):
    """Timed as Google Benchmark times kiln: the mean over a loop of >= min_time, median of 3 loops."""
    feed = {"x": x}
    for _ in range(3):
        sess.run(None, feed)
    means = []
    for _ in range(repetitions):
        n, start = 0, time.perf_counter()
        while True:
            sess.run(None, feed)
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        means.append(elapsed / n)
    return statistics.median(means) * 1e6


def time_kiln(binary, name, threads, min_time=0.5):
    pattern = "^" + name + f"/threads:{threads}/real_time$"
    res = subprocess.run([binary, f"--benchmark_filter={pattern}", "--benchmark_format=json",
                          f"--benchmark_min_time={min_time}", "--benchmark_repetitions=3",
                          "--benchmark_report_aggregates_only=true"], capture_output=True, text=True, check=True)
    rows = [b for b in json.loads(res.stdout)["benchmarks"] if b.get("aggregate_name") == "median"]
    if not rows:
        raise SystemExit(f"kiln benchmark {pattern} did not run")
    r = rows[0]
    scale = {"us": 1.0, "ms": 1e3, "ns": 1e-3, "s": 1e6}[r["time_unit"]]
    return r["real_time"] * scale


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True, help="path to kiln_bench_conv_pool")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = ap.parse_args()
    print(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}")
    print(f"{'layer':48} {'thr':>3} {'kiln us':>9} {'ORT us':>9} {'kiln/ORT':>8}")
    for name, op, shape, attrs, wshape in cases():
        x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        for threads in args.threads:
            so = ort.SessionOptions()
            so.intra_op_num_threads = threads
            so.inter_op_num_threads = 1
            so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
            sess = ort.InferenceSession(model(op, shape, attrs, wshape), so, providers=["CPUExecutionProvider"])
            k, o = [], []
            for _ in range(args.rounds):  # alternate the two
                k.append(time_kiln(args.kiln, name, threads))
                o.append(time_ort(sess, x))
            km, om = statistics.median(k), statistics.median(o)
            print(f"{name:48} {threads:>3} {km:>9.1f} {om:>9.1f} {km / om:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
