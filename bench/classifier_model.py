#!/usr/bin/env python3
"""A one-Gemm ONNX model, a CNN's classifier on its own: y = x @ W^T + b, W [N, K] random, batch
symbolic. The single-layer engine of bench/RESULTS.md's classifier rows.

    python3 bench/classifier_model.py 2048 1000 fc2048.onnx
    build/tools/kiln compile fc2048.onnx -o fc2048.kiln --batch 1:8
    build/tools/kiln bench fc2048.kiln --batch 1 --threads 2 --iterations 500
"""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def main():
    k, n, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((n, k)) * 0.02).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "b")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", n])
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    graph = helper.make_graph([node], "classifier", [x], [y], [w, b])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


if __name__ == "__main__":
    main()
