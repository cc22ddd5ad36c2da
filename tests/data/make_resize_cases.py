"""Prints the expected outputs of tests/ops/resize_test.cc's ONNX cases, computed by onnx.reference
(ONNX's own Resize implementation). Input: x[i] = ((i * 7) % 11 - 5.5) / 3 in row-major order.
Run: python3 tests/data/make_resize_cases.py > /tmp/cases.inc"""
import numpy as np
import onnx
from onnx import helper, TensorProto
from onnx.reference import ReferenceEvaluator

CASES = [
    # name, shape, sizes, scales (or None), attrs, roi
    ("linear_half_pixel_up", [1, 1, 3, 4], [1, 1, 5, 7], None, dict(mode="linear"), None),
    ("cubic_align_corners_scales", [1, 2, 5, 6], None, [1, 1, 0.6, 1.7], dict(mode="cubic", coordinate_transformation_mode="align_corners"), None),
    ("cubic_antialias_down", [1, 1, 7, 9], [1, 1, 3, 4], None, dict(mode="cubic", antialias=1), None),
    ("linear_antialias_scales", [1, 1, 6, 7], None, [1, 1, 0.4, 0.75], dict(mode="linear", antialias=1), None),
    ("crop_and_resize_extrapolate", [1, 1, 4, 5], [1, 1, 3, 4], None, dict(mode="linear", coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=10.0), [0, 0, 0.4, -0.2, 1, 1, 1.3, 0.7]),
    ("nearest_ceil_asymmetric_3d", [2, 3, 4], [3, 5, 7], None, dict(mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="round_prefer_ceil"), None),
    ("nearest_floor_half_pixel_scales", [1, 1, 5, 3], None, [1, 1, 0.7, 2.5], dict(mode="nearest", nearest_mode="floor"), None),
    ("linear_half_pixel_symmetric", [1, 1, 4, 5], None, [1, 1, 1.3, 0.7], dict(mode="linear", coordinate_transformation_mode="half_pixel_symmetric"), None),
    ("cubic_exclude_outside", [1, 1, 4, 4], [1, 1, 7, 3], None, dict(mode="cubic", cubic_coeff_a=-0.5, exclude_outside=1), None),
    ("linear_pytorch_half_pixel_to_one", [1, 2, 5, 4], [1, 2, 1, 3], None, dict(mode="linear", coordinate_transformation_mode="pytorch_half_pixel"), None),
    ("linear_5d", [1, 1, 3, 4, 3], [1, 1, 5, 3, 4], None, dict(mode="linear", coordinate_transformation_mode="align_corners"), None),
]


def run(shape, sizes, scales, attrs, roi):
    x = ((np.arange(np.prod(shape)) * 7) % 11 - 5.5) / 3
    x = x.reshape(shape).astype(np.float64)
    inputs = ["X", "roi" if roi is not None else "", "scales" if scales is not None else "", "sizes" if sizes is not None else ""]
    while inputs[-1] == "":
        inputs.pop()
    node = helper.make_node("Resize", inputs, ["Y"], **attrs)
    inits = []
    if roi is not None:
        inits.append(helper.make_tensor("roi", TensorProto.FLOAT, [len(roi)], roi))
    if scales is not None:
        inits.append(helper.make_tensor("scales", TensorProto.FLOAT, [len(scales)], scales))
    if sizes is not None:
        inits.append(helper.make_tensor("sizes", TensorProto.INT64, [len(sizes)], sizes))
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.DOUBLE, shape)],
                          [helper.make_tensor_value_info("Y", TensorProto.DOUBLE, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 19)])
    (y,) = ReferenceEvaluator(m).run(None, {"X": x})
    # ONNX reads scales as float32: pass kiln the same values.
    sc = None if scales is None else [float(np.float32(s)) for s in scales]
    r = None if roi is None else [float(np.float32(v)) for v in roi]
    return y, sc, r


for name, shape, sizes, scales, attrs, roi in CASES:
    y, sc, r = run(shape, sizes, scales, attrs, roi)
    fmt = lambda v: ", ".join(repr(float(t)) for t in v)
    a = dict(mode="nearest", coordinate_transformation_mode="half_pixel", nearest_mode="round_prefer_floor",
             cubic_coeff_a=-0.75, exclude_outside=0, extrapolation_value=0.0, antialias=0)
    a.update(attrs)
    opts = (f'"{a["mode"]}", "{a["coordinate_transformation_mode"]}", "{a["nearest_mode"]}", {a["cubic_coeff_a"]}, '
            f'{"true" if a["exclude_outside"] else "false"}, {a["extrapolation_value"]}, {"true" if a["antialias"] else "false"}')
    print(f'    {{"{name}", {{{", ".join(map(str, shape))}}}, {{{", ".join(map(str, y.shape))}}},')
    print(f'     {{{fmt(sc) if sc else ""}}}, {{{fmt(r) if r else ""}}},')
    print(f'     {{{opts}}},')
    print(f'     {{{fmt(y.ravel())}}}}},')
