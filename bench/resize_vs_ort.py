"""Single Resize layers, kiln against ONNX Runtime (bench/RESULTS.md, 2026-12-07 20:11).

The image resizes that held-out models spend time in: EfficientFormerV2's 2x bilinear upsample of
1024 planes of 7x7, a segmentation-style 2x bilinear upsample of 64 planes of 56x56, and
GhostNetV2's 2x nearest upsample of its attention maps (72 planes of 28x28). Each is one Resize
node (opset 19, scales, batch symbolic), compiled by `kiln compile` and timed by `kiln bench`
(median); ONNX Runtime (all optimizations, intra-op threads = --threads) times session.run on the
same shape from Python (median of --iterations runs after 50 warmups), alternated for --rounds
rounds; the table gives each side's best median.

    python3 bench/resize_vs_ort.py --kiln build/tools/kiln --work /tmp/resize_bench [--threads 1]
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CASES = [("bilinear_1024x7x7", [1, 1024, 7, 7], "linear", "half_pixel", "round_prefer_floor"),
         ("bilinear_64x56x56", [1, 64, 56, 56], "linear", "half_pixel", "round_prefer_floor"),
         ("nearest_72x28x28", [1, 72, 28, 28], "nearest", "asymmetric", "floor")]

ORT_CHILD = r"""
import sys, time, numpy as np, onnxruntime as ort
model, shape = sys.argv[1], [int(v) for v in sys.argv[2].split(",")]
threads, iters = int(sys.argv[3]), int(sys.argv[4])
so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
x = np.random.default_rng(0).random(shape, dtype=np.float32)
for _ in range(50): s.run(None, {"x": x})
ts = []
for _ in range(iters):
    t = time.perf_counter(); s.run(None, {"x": x}); ts.append(time.perf_counter() - t)
print(np.median(ts) * 1e3)
"""


def build(path, shape, mode, coord, nearest):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch"] + shape[1:])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    scales = numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "scales")
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode=mode, coordinate_transformation_mode=coord,
                            nearest_mode=nearest)
    graph = helper.make_graph([node], "resize", [x], [y], [scales])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]), path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    print(f"{'resize':20} {'kiln ms':>9} {'ORT ms':>9} {'kiln/ORT':>8}")
    for name, shape, mode, coord, nearest in CASES:
        model, engine = os.path.join(a.work, name + ".onnx"), os.path.join(a.work, name + ".kiln")
        build(model, shape, mode, coord, nearest)
        subprocess.run([a.kiln, "compile", model, "-o", engine, "--batch", "1:8", "--threads", str(a.threads)],
                       check=True, capture_output=True)
        kiln_ms, ort_ms = [], []
        for _ in range(a.rounds):
            r = subprocess.run([a.kiln, "bench", engine, "--batch", "1", "--threads", str(a.threads), "--iterations",
                                str(a.iterations)], check=True, capture_output=True, text=True)
            kiln_ms.append(float(re.search(r"median ([0-9.]+)", r.stdout).group(1)))
            r = subprocess.run([sys.executable, "-c", ORT_CHILD, model, ",".join(map(str, shape)), str(a.threads),
                                str(a.iterations)], check=True, capture_output=True, text=True)
            ort_ms.append(float(r.stdout))
        k, o = min(kiln_ms), min(ort_ms)
        print(f"{name:20} {k:>9.3f} {o:>9.3f} {k / o:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
