"""Prints the expected outputs of tests/ops/pool_nd_test.cc's ONNX cases, computed by onnx.reference
(MaxPool 12 with Indices, AveragePool 19, LpPool 18). Input: x[i] = ((i * 7) % 11 - 5.5) / 3.
Run: python3 tests/data/make_pool_cases.py > /tmp/cases.inc"""
import numpy as np
from onnx import helper, TensorProto
from onnx.reference import ReferenceEvaluator

CASES = [
    # name, op, shape, attrs
    ("max_1d_strided_pads", "MaxPool", [2, 3, 11], dict(kernel_shape=[3], strides=[2], pads=[1, 2])),
    ("max_3d_dilated_ceil", "MaxPool", [1, 2, 5, 6, 7], dict(kernel_shape=[2, 3, 2], strides=[2, 1, 3], dilations=[2, 1, 2], pads=[1, 0, 1, 0, 1, 1], ceil_mode=1)),
    ("max_2d_column_major", "MaxPool", [1, 2, 5, 7], dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 0, 0, 1], storage_order=1)),
    ("max_3d_column_major", "MaxPool", [1, 1, 3, 4, 5], dict(kernel_shape=[2, 2, 2], strides=[1, 2, 2], storage_order=1)),
    ("avg_3d_dilated_include_pad_ceil", "AveragePool", [1, 2, 5, 6, 7], dict(kernel_shape=[2, 3, 2], strides=[2, 2, 3], dilations=[2, 1, 2], pads=[1, 1, 0, 1, 1, 1], ceil_mode=1, count_include_pad=1)),
    ("avg_3d_dilated_exclude_pad", "AveragePool", [1, 1, 6, 5, 7], dict(kernel_shape=[3, 2, 2], strides=[1, 2, 2], dilations=[2, 2, 1], pads=[2, 1, 1, 0, 1, 1], ceil_mode=0, count_include_pad=0)),
    ("avg_1d_ceil_include_pad", "AveragePool", [1, 2, 10], dict(kernel_shape=[4], strides=[3], pads=[2, 1], ceil_mode=1, count_include_pad=1)),
    ("lp_2d_p3_pads", "LpPool", [1, 2, 5, 6], dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 1, 0, 1], p=3)),
    ("lp_1d_dilated", "LpPool", [2, 1, 9], dict(kernel_shape=[3], dilations=[2], p=2)),
]

for name, op, shape, attrs in CASES:
    x = (((np.arange(np.prod(shape)) * 7) % 11 - 5.5) / 3).reshape(shape)
    outs = ["Y", "I"] if op == "MaxPool" else ["Y"]
    node = helper.make_node(op, ["X"], outs, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, shape)],
                          [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    res = ReferenceEvaluator(m).run(None, {"X": x})
    fmt = lambda v: ", ".join(repr(float(t)) for t in v)
    k = len(shape) - 2
    ints = lambda key, d: "{" + ", ".join(str(v) for v in attrs.get(key, d)) + "}"
    print(f'    {{"{name}", "{op}", {{{", ".join(map(str, shape))}}}, {{{", ".join(map(str, res[0].shape))}}},')
    print(f'     {ints("kernel_shape", [])}, {ints("strides", [1] * k)}, {ints("pads", [0] * 2 * k)}, {ints("dilations", [1] * k)}, '
          f'{"true" if attrs.get("ceil_mode") else "false"}, {"true" if attrs.get("count_include_pad") else "false"}, {attrs.get("p", 2)}, {attrs.get("storage_order", 0)},')
    print(f'     {{{fmt(res[0].ravel())}}},')
    print(f'     {{{fmt(res[1].ravel()) if len(res) > 1 else ""}}}}},')
