#!/usr/bin/env python3
"""Small TensorFlow models exported by tf2onnx, as cases for check_models.py (same layout as
export_models.py's: model.onnx, in_*.npy / out_*.npy with TensorFlow's outputs, meta.json).

  keras_mnv3_block: MobileNetV3-style blocks written as Keras' applications write them (hard-swish
    as x * relu6(x + 3) / 6, a squeeze-excite gated by relu6(x + 3) / 6, ZeroPadding2D before a
    strided depthwise convolution, a residual add), NHWC input. tf2onnx's transpose optimizer gives
    up on the hard-swish's scalar add, so the ONNX graph keeps a Transpose pair around every
    convolution (Note [Sinking transposes] in src/compiler/passes/transpose.cc).
  tf_bert: HuggingFace's TFBertModel (2 layers, hidden 32) through tf2onnx: int32 ids and mask, the
    shapes computed in int32, each input's dims named on their own (unk__N) (Note [One batch
    symbol] in src/onnx/import.cc); meta.json's "dims" binds the sequence dims.

Needs tensorflow (2.15: Keras 2, which tf2onnx 1.16 converts), tf2onnx and transformers 4.40; not
run in CI:

    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx==1.16.1 \\
        "numpy<2" onnx==1.16.2 transformers==4.40.2
    /tmp/tfenv/bin/python export_tf_models.py --out fixtures
"""
import argparse
import json
import os
import shutil

import numpy as np
import tensorflow as tf
import tf2onnx

EXPORT_BATCH, ALT_BATCH, SEQ = 2, 3, 8


def hard_sigmoid(x):
    return tf.keras.layers.ReLU(6.0)(x + 3.0) * (1.0 / 6.0)


def hard_swish(x):
    return tf.keras.layers.Multiply()([x, hard_sigmoid(x)])


def keras_mnv3_block():
    L = tf.keras.layers
    x0 = tf.keras.Input((32, 32, 3), name="input")
    x = hard_swish(L.BatchNormalization()(L.Conv2D(16, 3, strides=2, padding="same", use_bias=False)(x0)))
    for expand, out, stride in ((32, 16, 1), (48, 24, 2)):
        y = hard_swish(L.BatchNormalization()(L.Conv2D(expand, 1, use_bias=False)(x)))
        if stride == 2:
            y = L.ZeroPadding2D(((0, 1), (0, 1)))(y)
        y = L.DepthwiseConv2D(3, strides=stride, padding="same" if stride == 1 else "valid", use_bias=False)(y)
        y = hard_swish(L.BatchNormalization()(y))
        s = L.GlobalAveragePooling2D(keepdims=True)(y)
        s = L.Conv2D(8, 1, activation="relu")(s)
        s = hard_sigmoid(L.Conv2D(expand, 1)(s))
        y = L.Multiply()([y, s])
        y = L.BatchNormalization()(L.Conv2D(out, 1, use_bias=False)(y))
        x = L.Add()([x, y]) if stride == 1 and out == x.shape[-1] else y
    x = L.Dense(5)(L.GlobalAveragePooling2D()(x))
    m = tf.keras.Model(x0, x)
    rng = np.random.default_rng(0)
    for layer in m.layers:
        if isinstance(layer, L.BatchNormalization):
            layer.moving_mean.assign(rng.uniform(-0.1, 0.1, layer.moving_mean.shape).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, layer.moving_variance.shape).astype(np.float32))
    spec = (tf.TensorSpec((None, 32, 32, 3), tf.float32, name="input"),)

    def inputs(batch, rng):
        return [rng.standard_normal((batch, 32, 32, 3)).astype(np.float32)]

    return m, spec, inputs


def tf_bert():
    import transformers
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=16)
    bert = transformers.TFBertModel(cfg)
    spec = (tf.TensorSpec((None, None), tf.int32, name="input_ids"),
            tf.TensorSpec((None, None), tf.int32, name="attention_mask"))

    @tf.function(input_signature=spec)
    def f(ids, mask):
        return bert(input_ids=ids, attention_mask=mask).last_hidden_state

    def inputs(batch, rng):
        mask = np.ones((batch, SEQ), np.int32)
        mask[:, SEQ - 3:] = 0
        return [rng.integers(0, 50, (batch, SEQ)).astype(np.int32), mask]

    return f, spec, inputs


def export(out_dir, name, build):
    import onnx
    tf.random.set_seed(0)
    model, spec, make_inputs = build()
    case_dir = os.path.join(out_dir, name + "__tf2onnx__dyn")
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    path = os.path.join(case_dir, "model.onnx")
    if isinstance(model, tf.keras.Model):
        tf2onnx.convert.from_keras(model, input_signature=spec, opset=17, output_path=path)
    else:
        tf2onnx.convert.from_function(model, input_signature=spec, opset=17, output_path=path)
    m = onnx.load(path)
    meta = {"model": name, "exporter": "tf2onnx " + tf2onnx.__version__, "opset": 17, "dynamic_batch": True,
            "export_batch": EXPORT_BATCH, "onnx_inputs": [i.name for i in m.graph.input],
            "onnx_outputs": [o.name for o in m.graph.output], "tensorflow": tf.__version__}
    dims = {d.dim_param: SEQ for i in m.graph.input for d in list(i.type.tensor_type.shape.dim)[1:] if d.dim_param}
    if dims:
        meta["dims"] = dims
    rng = np.random.default_rng(1)
    for prefix, batch in (("", EXPORT_BATCH), ("alt_", ALT_BATCH)):
        ins = make_inputs(batch, rng)
        outs = model(*ins)
        outs = outs if isinstance(outs, (list, tuple)) else [outs]
        files = {"inputs": [], "outputs": []}
        for i, v in enumerate(ins):
            np.save(os.path.join(case_dir, "{}in_{}.npy".format(prefix, i)), v)
            files["inputs"].append({"name": meta["onnx_inputs"][i], "file": "{}in_{}.npy".format(prefix, i)})
        for i, v in enumerate(outs):
            np.save(os.path.join(case_dir, "{}out_{}.npy".format(prefix, i)), np.asarray(v))
            files["outputs"].append({"name": meta["onnx_outputs"][i], "file": "{}out_{}.npy".format(prefix, i)})
        if prefix:
            meta["alt"] = dict(batch=batch, **files)
        else:
            meta.update(files)
    with open(os.path.join(case_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(name, os.path.getsize(path), "bytes")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    export(a.out, "keras_mnv3_block", keras_mnv3_block)
    export(a.out, "tf_bert", tf_bert)


if __name__ == "__main__":
    main()
