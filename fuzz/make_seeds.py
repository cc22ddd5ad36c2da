#!/usr/bin/env python3
"""Writes the seed corpus for fuzz/onnx_import_fuzz: small valid ONNX models (onnx.helper + numpy,
fixed random weights) covering Conv, Gemm, Reshape, Slice, ConstantOfShape, a shape subgraph,
a model-local function and external data. libFuzzer mutates these; a seed that already fails to
import teaches it little, so every model here passes onnx.checker.

    python3 fuzz/make_seeds.py OUT_DIR

writes OUT_DIR/corpus/*.onnx and OUT_DIR/data/weights.bin (the external data the last seed points
at; run the fuzzer with KILN_FUZZ_BASE_DIR=OUT_DIR/data so it resolves).
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
rng = np.random.default_rng(7)


def weight(name, *shape):
    return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def model(nodes, inputs, outputs, inits=(), functions=(), extra_opsets=()):
    graph = helper.make_graph(nodes, "seed", inputs, outputs, list(inits))
    opsets = [helper.make_opsetid("", OPSET)] + list(extra_opsets)
    m = helper.make_model(graph, opset_imports=opsets, functions=list(functions), producer_name="kiln-fuzz-seeds")
    m.ir_version = 8
    return m


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def seeds(data_dir):
    out = {}
    out["conv_relu_pool"] = model(
        [helper.make_node("Conv", ["x", "W", "B"], ["c"], pads=[1, 1, 1, 1], strides=[1, 1]),
         helper.make_node("Relu", ["c"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [f32("x", [1, 2, 6, 6])], [f32("y", [1, 3, 3, 3])], [weight("W", 3, 2, 3, 3), weight("B", 3)])
    out["gemm_softmax"] = model(
        [helper.make_node("Gemm", ["x", "W", "b"], ["g"], transB=1, alpha=0.5),
         helper.make_node("Softmax", ["g"], ["y"], axis=1)],
        [f32("x", [2, 5])], [f32("y", [2, 4])], [weight("W", 4, 5), weight("b", 4)])
    out["reshape_transpose"] = model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"]),
         helper.make_node("Transpose", ["r"], ["y"], perm=[1, 0, 2])],
        [f32("x", [2, 3, 4])], [f32("y", [6, 2, 2])], [ints("shape", [2, 6, 2])])
    out["slice_concat"] = model(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes", "steps"], ["s"]),
         helper.make_node("Concat", ["s", "x"], ["y"], axis=1)],
        [f32("x", [3, 8])], [f32("y", [3, 11])],
        [ints("starts", [1]), ints("ends", [7]), ints("axes", [1]), ints("steps", [2])])
    out["constant_of_shape"] = model(
        [helper.make_node("ConstantOfShape", ["dims"], ["c"],
                          value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25])),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [f32("x", [2, 3])], [f32("y", [2, 3])], [ints("dims", [2, 3])])
    # The exporter's shape subgraph: Shape -> Gather -> Unsqueeze -> Concat -> Reshape.
    out["shape_subgraph"] = model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
         helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
         helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["y"])],
        [f32("x", [2, 3, 4])], [f32("y", [2, 12])],
        [ints("zero", 0), ints("axes", [0]), ints("minus_one", [-1])])
    out["elementwise_mix"] = model(
        [helper.make_node("Mul", ["x", "x"], ["sq"]),
         helper.make_node("ReduceMean", ["sq"], ["m"], axes=[1], keepdims=1),
         helper.make_node("Sqrt", ["m"], ["r"]),
         helper.make_node("Div", ["x", "r"], ["d"]),
         helper.make_node("Cast", ["d"], ["i"], to=TensorProto.INT64),
         helper.make_node("Cast", ["i"], ["y"], to=TensorProto.FLOAT)],
        [f32("x", [2, 6])], [f32("y", [2, 6])])
    # A model-local function (inlined by the importer).
    fn = helper.make_function("local", "Swish", ["a"], ["b"],
                              [helper.make_node("Sigmoid", ["a"], ["s"]), helper.make_node("Mul", ["a", "s"], ["b"])],
                              [helper.make_opsetid("", OPSET)])
    out["local_function"] = model(
        [helper.make_node("Swish", ["x"], ["t"], domain="local"), helper.make_node("Swish", ["t"], ["y"], domain="local")],
        [f32("x", [4])], [f32("y", [4])], functions=[fn], extra_opsets=[helper.make_opsetid("local", 1)])
    # External data: W's bytes live in data/weights.bin, 16 bytes in.
    w = rng.standard_normal((3, 4)).astype(np.float32)
    os.makedirs(data_dir, exist_ok=True)
    with open(os.path.join(data_dir, "weights.bin"), "wb") as f:
        f.write(b"\0" * 16 + w.tobytes())
    ext = TensorProto()
    ext.name, ext.data_type = "W", TensorProto.FLOAT
    ext.dims.extend([3, 4])
    ext.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", "16"), ("length", str(w.nbytes))):
        entry = ext.external_data.add()
        entry.key, entry.value = k, v
    out["external_data"] = model([helper.make_node("MatMul", ["x", "W"], ["y"])], [f32("x", [2, 3])],
                                 [f32("y", [2, 4])], [ext])
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    root = sys.argv[1]
    corpus, data = os.path.join(root, "corpus"), os.path.join(root, "data")
    os.makedirs(corpus, exist_ok=True)
    for name, m in seeds(data).items():
        if name != "external_data":  # the checker would look for weights.bin next to the model
            onnx.checker.check_model(m, full_check=True)
        with open(os.path.join(corpus, name + ".onnx"), "wb") as f:
            f.write(m.SerializeToString())
    print(f"wrote {len(os.listdir(corpus))} seeds to {corpus}, external data in {data}")


if __name__ == "__main__":
    main()
