#!/usr/bin/env python3
"""TensorFlow models through tf2onnx, for bench/exported_vs_ort.py (which times them; it cannot
export them itself: TensorFlow wants its own numpy and onnx versions, so this runs in a venv).

  Keras applications (random weights, batch-norm statistics randomized; NHWC input
  [N, 224, 224, 3]): tfk_resnet50, tfk_resnet50v2, tfk_resnet101, tfk_mobilenet, tfk_mobilenetv2,
  tfk_mobilenetv3l, tfk_mobilenetv3s (tf2onnx's transpose optimizer fails on their hard-swish and
  leaves a Transpose pair around every convolution), tfk_efficientnetb0, tfk_densenet121
  HuggingFace's TF models (random weights): tfb_bert (TFBertModel, base), tfb_distilbert,
  tfb_roberta (int32 input_ids and attention_mask with each input's dims named on its own), tfb_vit
  (TFViTModel, base; NCHW pixel values)

    python3 -m venv /tmp/tfenv && /tmp/tfenv/bin/pip install tensorflow-cpu==2.15.1 tf2onnx==1.16.1 \\
        "numpy<2" onnx==1.16.2 transformers==4.40.2
    /tmp/tfenv/bin/python bench/export_tf.py --work /tmp/kiln_exported [--models tfk_mobilenetv3l,tfb_bert]
    python3 bench/exported_vs_ort.py --kiln build/tools/kiln --work /tmp/kiln_exported \\
        --models tfk_mobilenetv3l,tfb_bert
"""
import argparse
import os

import numpy as np
import tensorflow as tf
import tf2onnx

KERAS = {"tfk_resnet50": "ResNet50", "tfk_resnet50v2": "ResNet50V2", "tfk_resnet101": "ResNet101",
         "tfk_mobilenet": "MobileNet", "tfk_mobilenetv2": "MobileNetV2", "tfk_mobilenetv3l": "MobileNetV3Large",
         "tfk_mobilenetv3s": "MobileNetV3Small", "tfk_efficientnetb0": "EfficientNetB0",
         "tfk_densenet121": "DenseNet121"}
HF = ["tfb_bert", "tfb_distilbert", "tfb_roberta", "tfb_vit"]


def export_keras(name, path):
    rng = np.random.default_rng(0)
    m = getattr(tf.keras.applications, KERAS[name])(weights=None, input_shape=(224, 224, 3))
    for layer in m.layers:
        if isinstance(layer, tf.keras.layers.BatchNormalization):
            layer.moving_mean.assign(rng.uniform(-0.1, 0.1, layer.moving_mean.shape).astype(np.float32))
            layer.moving_variance.assign(rng.uniform(0.5, 1.5, layer.moving_variance.shape).astype(np.float32))
    spec = (tf.TensorSpec((None, 224, 224, 3), tf.float32, name="input"),)
    tf2onnx.convert.from_keras(m, input_signature=spec, opset=17, output_path=path)


def export_hf(name, path):
    import transformers as T
    if name == "tfb_bert":
        m = T.TFBertModel(T.BertConfig())
    elif name == "tfb_distilbert":
        m = T.TFDistilBertModel(T.DistilBertConfig())
    elif name == "tfb_roberta":
        m = T.TFRobertaModel(T.RobertaConfig(vocab_size=50265, max_position_embeddings=514, type_vocab_size=1,
                                             pad_token_id=1))
    else:
        m = T.TFViTModel(T.ViTConfig())
    if name == "tfb_vit":
        spec = (tf.TensorSpec((None, 3, 224, 224), tf.float32, name="input"),)

        @tf.function(input_signature=spec)
        def f(x):
            return m(pixel_values=x).last_hidden_state
    else:
        spec = (tf.TensorSpec((None, None), tf.int32, name="input_ids"),
                tf.TensorSpec((None, None), tf.int32, name="attention_mask"))

        @tf.function(input_signature=spec)
        def f(ids, mask):
            return m(input_ids=ids, attention_mask=mask).last_hidden_state
    tf2onnx.convert.from_function(f, input_signature=spec, opset=17, output_path=path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/tmp/kiln_exported")
    ap.add_argument("--models", default=",".join(list(KERAS) + HF))
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    for name in a.models.split(","):
        path = os.path.join(a.work, name + ".onnx")
        if os.path.exists(path):
            continue
        tf.random.set_seed(0)
        (export_keras if name in KERAS else export_hf)(name, path)
        print("exported", path, flush=True)


if __name__ == "__main__":
    main()
