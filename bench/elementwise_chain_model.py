#!/usr/bin/env python3
"""An ONNX chain of elementwise f32 ops for the engine-level elementwise rows of bench/RESULTS.md:
x [N, C, H, W] combined REPS times with a second input s, alternating the two ops of a pair so the
values stay in range. `same`: s has x's shape (Add / Sub); `scale`: s is [N, C, 1, 1], one value
per plane (Mul / Div, a squeeze-excite scale).

    python3 bench/elementwise_chain_model.py same 64 56 20 add.onnx
    python3 bench/elementwise_chain_model.py scale 576 7 20 scale7.onnx
    build/tools/kiln compile add.onnx -o add.kiln --batch 1:8
    build/tools/kiln bench add.kiln --batch 1 --threads 1 --iterations 1000
"""
import sys

import onnx
from onnx import TensorProto, helper


def main():
    kind, c, hw, reps, path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    ops = ("Add", "Sub") if kind == "same" else ("Mul", "Div")
    s_shape = ["N", c, hw, hw] if kind == "same" else ["N", c, 1, 1]
    nodes, prev = [], "x"
    for i in range(reps):
        nodes.append(helper.make_node(ops[i % 2], [prev, "s"], [f"v{i}"]))
        prev = f"v{i}"
    graph = helper.make_graph(nodes, f"{kind}_chain",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, hw, hw]),
                               helper.make_tensor_value_info("s", TensorProto.FLOAT, s_shape)],
                              [helper.make_tensor_value_info(prev, TensorProto.FLOAT, None)])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


if __name__ == "__main__":
    main()
