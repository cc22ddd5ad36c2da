"""Prints the expected outputs of tests/ops/grid_sample_test.cc's ONNX cases, computed by
onnx.reference (GridSample 20). Input: x[i] = ((i * 7) % 11 - 5.5) / 3; grid[i] = ((i * 5) % 13 - 6) / 5
(coordinates in [-1.2, 1.2], so some fall outside). Run: python3 tests/data/make_grid_sample_cases.py"""
import numpy as np
from onnx import helper, TensorProto
from onnx.reference import ReferenceEvaluator

CASES = []
for mode in ["nearest", "linear", "cubic"]:
    for pad in ["zeros", "border", "reflection"]:
        for align in [0, 1]:
            CASES.append((f"{mode}_{pad}_{align}", [2, 3, 4, 5], [2, 3, 4, 2], mode, pad, align))
CASES += [
    ("linear_3d_reflection", [1, 2, 3, 4, 5], [1, 2, 3, 2, 3], "linear", "reflection", 0),
    ("nearest_3d_border_align", [1, 2, 3, 4, 5], [1, 2, 3, 2, 3], "nearest", "border", 1),
    ("cubic_1d_zeros", [2, 2, 7], [2, 5, 1], "cubic", "zeros", 0),
]


def pattern(shape, mul, mod, off, div):
    return (((np.arange(np.prod(shape)) * mul) % mod - off) / div).reshape(shape)


for name, xs, gs, mode, pad, align in CASES:
    x = pattern(xs, 7, 11, 5.5, 3)
    g = pattern(gs, 5, 13, 6, 5)
    node = helper.make_node("GridSample", ["X", "G"], ["Y"], mode=mode, padding_mode=pad, align_corners=align)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, xs),
                                            helper.make_tensor_value_info("G", TensorProto.DOUBLE, gs)],
                              [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    (y,) = ReferenceEvaluator(m).run(None, {"X": x, "G": g})
    fmt = lambda v: ", ".join(repr(float(t)) for t in v)
    print(f'    {{"{name}", {{{", ".join(map(str, xs))}}}, {{{", ".join(map(str, gs))}}}, {{{", ".join(map(str, y.shape))}}}, '
          f'"{mode}", "{pad}", {"true" if align else "false"},')
    print(f'     {{{fmt(y.ravel())}}}}},')
