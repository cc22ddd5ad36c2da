"""kiln against ONNX Runtime on models as exporters write them, not as bench/models.py builds them.

issue #9 is judged on held-out models. The models of bench/models.py are clean onnx.helper graphs;
models that users bring come out of torch.onnx.export and tf2onnx with their own idioms: SiLU as
Sigmoid * x, nn.MultiheadAttention's seq-first layout and unbind (Gather), masked_fill (Where) in
attention, expand(n, -1, -1) through Shape / Equal / Where, SAME padding as an explicit Pad. Each
of those once cost kiln 1.1-1.7x ONNX Runtime's time (bench/RESULTS.md, 2026-12-05 18:35). This
script exports such models, checks kiln's output against ONNX Runtime's, and times both.

Models (--models, comma-separated; default all that can be built here):
  torchvision (needs torch and torchvision): resnet18, resnet50, mobilenet_v2, mobilenet_v3_large,
      mobilenet_v3_small, efficientnet_b0, regnet_y_400mf, vit_b_16, resnet34, wide_resnet50_2,
      resnext50_32x4d (grouped 3x3 layers), mnasnet1_0, mobilenet_v2_w14 (width multiplier 1.4),
      resnet101, densenet121, shufflenet_v2_x1_0, squeezenet1_1, googlenet, convnext_tiny,
      efficientnet_b1, mnasnet0_5, inception_v3, vgg16, alexnet, regnet_x_400mf, efficientnet_v2_s,
      swin_t (shifted-window attention)
  PyTorch modules written here (needs torch): torch_encoder (nn.TransformerEncoder, 12 x 768,
      batch_first, post-norm, GELU; float input [B, 128, 768]), torch_encoder_prenorm,
      torch_encoder_512 (6 x 512, 8 heads, ReLU: the layer's defaults), hf_bert
      (a HuggingFace-style BERT-base: embeddings, additive finfo.min mask, erf GELU; inputs
      input_ids and attention_mask [B, 128], the last 28 keys padded), distil_bert (the same
      with DistilBERT's masked_fill and q / sqrt(d)), sdpa_bert (F.scaled_dot_product_attention),
      sdpa_bool_bert (the same with a boolean mask of the keys kept, as HuggingFace's default
      attention passes it: the export adds where(keep, 0, -inf) and where(isnan(p), 0, p))
  timm (needs timm), random weights: timm_mobilenetv3_large_100, timm_mobilenetv3_small_100,
      timm_tf_mobilenetv3_large_100, timm_efficientnet_b0, timm_lcnet_100, timm_mobilenetv2_100,
      timm_resnet50d, timm_mobilenetv1_100, timm_mobilenetv4_conv_small, timm_mobilenetv4_conv_medium
      (MobileNetV4's universal inverted bottlenecks: an extra depthwise before the expansion),
      timm_ghostnet_100, timm_deit_tiny_patch16_224, timm_dla34, timm_repvgg_a0,
      timm_deit3_small_patch16_224 (layer scale after each block's attention and MLP), timm_mixnet_s
      (mixed kernel sizes: split, convolve, concat, then batch norm), timm_mobileone_s0, timm_fastvit_t8
      and timm_repghostnet_100 (training-time parallel branches, not re-parameterized),
      timm_mobilenetv4_hybrid_medium (multi-query attention between the convolutions),
      timm_efficientvit_b0 (linear attention), timm_mobilevit_s (transformer blocks on unfolded patches),
      timm_resnet50_gn and timm_resnetv2_50x1_bit (GroupNorm), timm_skresnet18 and timm_resnest14d
      (split attention), timm_ecaresnet50d, timm_levit_128s (BatchNorm1d after its Linear layers), and 37
      more added untuned (the TIMM list below: EfficientFormerV2, InceptionNeXt, GhostNetV2, EfficientViT-M,
      ConvNeXtV2, TinyViT, RepViT, EdgeNeXt, MambaOut, HGNetV2, ...)
  HuggingFace transformers (needs transformers), random weights, default attention (SDPA):
      transformers_bert (BertModel, base), transformers_roberta, transformers_distilbert,
      transformers_minilm (BertModel at all-MiniLM-L6's shape: 6 layers, hidden 384, 12 heads),
      transformers_electra (ElectraModel, small: hidden 256), transformers_albert (AlbertModel,
      base: shared layers, 128-wide embeddings), transformers_gpt2 (GPT2Model: causal attention
      with the padding mask), transformers_t5_encoder (T5EncoderModel at t5-small's shape: RMS norms,
      relative position buckets, no biases), transformers_deberta_v3 (DebertaV2Model at deberta-v3-base's
      shape with 6 of its 12 layers: disentangled relative attention, 256 position buckets),
      transformers_llama (LlamaModel, 6 layers, 4 key / value heads), and at their default shapes
      transformers_mobilebert, transformers_squeezebert (grouped Conv1d), transformers_mpnet,
      transformers_convbert, transformers_modernbert, transformers_esm (12 x 480, rotary),
      transformers_clip_text, transformers_bigbird
  onnx.helper (no torch): tf_mobilenet_v2 (bench/models.py's MobileNetV2 with an NHWC input,
      batch norms folded into biased convolutions and SAME padding as explicit Pad nodes, as
      tf2onnx writes it)
  TensorFlow through tf2onnx, exported beforehand into --work by bench/export_tf.py (in a TensorFlow
      venv; skipped when absent): Keras' tfk_resnet50, tfk_resnet50v2, tfk_resnet101, tfk_mobilenet,
      tfk_mobilenetv2, tfk_mobilenetv3l, tfk_mobilenetv3s, tfk_efficientnetb0, tfk_densenet121 (NHWC
      input), HuggingFace's tfb_bert, tfb_distilbert, tfb_roberta (int32 ids) and tfb_vit

Weights are random (seeded); torchvision's zero-initialized classifier heads are re-drawn so the
check compares something. Batch is a dynamic axis; kiln compiles --batch 1:8 (and --dim seq=128
for the BERTs). Per batch, kiln (`kiln bench`) and ONNX Runtime (all graph optimizations,
intra-op threads = --threads, inter-op 1) run alternately in separate processes for --rounds
rounds; the table gives each side's best median and the ratio kiln / ORT.

    python3 bench/exported_vs_ort.py --kiln build/tools/kiln --work /tmp/exported \\
        [--models efficientnet_b0,hf_bert] [--batch 1 8] [--threads 2] [--rounds 3] [--exporter dynamo]

--exporter dynamo exports the PyTorch models with torch.onnx.export(dynamo=True), the default from
PyTorch 2.9 on (pip install onnxscript): opset 18 or later, LayerNormalization as one node,
attention and GELU as torch.export decomposes them.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys

import numpy as np
import onnxruntime as ort

HERE = os.path.dirname(os.path.abspath(__file__))
VISION = ["resnet18", "resnet50", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "efficientnet_b0",
          "regnet_y_400mf", "vit_b_16", "resnet34", "wide_resnet50_2", "resnext50_32x4d", "mnasnet1_0",
          "mobilenet_v2_w14", "resnet101", "densenet121", "shufflenet_v2_x1_0", "squeezenet1_1", "googlenet",
          "convnext_tiny", "efficientnet_b1", "mnasnet0_5", "inception_v3", "vgg16", "alexnet", "regnet_x_400mf",
          "efficientnet_v2_s", "swin_t"]
# HuggingFace transformers' own models (random weights), exported with their default attention.
TRANSFORMERS = {"transformers_bert": ("Bert", {}), "transformers_roberta": ("Roberta", {}),
                "transformers_distilbert": ("DistilBert", {}), "transformers_electra": ("Electra", {}),
                "transformers_albert": ("Albert", dict(vocab_size=30522, hidden_size=768, num_attention_heads=12,
                                                       intermediate_size=3072)),
                "transformers_minilm": ("Bert", dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                                                     intermediate_size=1536)),
                "transformers_gpt2": ("GPT2", dict(use_cache=False)),
                "transformers_t5_encoder": ("T5Encoder", dict(d_model=512, d_ff=2048, num_layers=6, num_heads=8)),
                "transformers_deberta_v3": ("DebertaV2", dict(
                    vocab_size=128100, hidden_size=768, num_hidden_layers=6, num_attention_heads=12,
                    intermediate_size=3072, relative_attention=True, pos_att_type=["p2c", "c2p"],
                    position_buckets=256, max_relative_positions=-1, norm_rel_ebd="layer_norm",
                    share_att_key=True)),
                # A decoder of today's shape: RMSNorm, rotary positions, grouped-query causal
                # attention, a SiLU-gated MLP.
                "transformers_llama": ("Llama", dict(
                    vocab_size=32000, hidden_size=768, intermediate_size=2048, num_hidden_layers=6,
                    num_attention_heads=12, num_key_value_heads=4, use_cache=False)),
                # Encoders no session had tried (2026-12-07 evening): MobileBERT's bottlenecks and
                # NoNorm, SqueezeBERT's grouped 1-D convolutions, MPNet's relative position bias,
                # ConvBERT's span-based dynamic convolution, ModernBERT (rotary, GeGLU, local and
                # global attention, no biases), ESM-2 (rotary), CLIP's text tower (causal, quick GELU),
                # BigBird at full attention (sequence 128).
                "transformers_mobilebert": ("MobileBert", {}),
                "transformers_squeezebert": ("SqueezeBert", {}),
                "transformers_mpnet": ("MPNet", {}),
                "transformers_convbert": ("ConvBert", {}),
                "transformers_modernbert": ("ModernBert", {}),
                "transformers_esm": ("Esm", dict(vocab_size=30522, hidden_size=480, num_hidden_layers=12,
                                                 num_attention_heads=20, intermediate_size=1920,
                                                 position_embedding_type="rotary", pad_token_id=1)),
                "transformers_clip_text": ("CLIPText", dict(vocab_size=49408, max_position_embeddings=128)),
                "transformers_bigbird": ("BigBird", dict(attention_type="original_full"))}
ENCODERS = ["torch_encoder", "torch_encoder_prenorm", "torch_encoder_512", "hf_bert", "distil_bert", "sdpa_bert",
            "sdpa_bool_bert"] + list(TRANSFORMERS)
# timm's models (random weights): squeeze-excites that pool with x.mean((2, 3)), ResNet-D's average-pooled
# shortcuts, TF-ported "same" padding.
TIMM = ["timm_mobilenetv3_large_100", "timm_mobilenetv3_small_100", "timm_tf_mobilenetv3_large_100",
        "timm_efficientnet_b0", "timm_lcnet_100", "timm_mobilenetv2_100", "timm_resnet50d", "timm_mobilenetv1_100",
        "timm_mobilenetv4_conv_small", "timm_mobilenetv4_conv_medium", "timm_ghostnet_100",
        "timm_deit_tiny_patch16_224", "timm_dla34", "timm_repvgg_a0", "timm_deit3_small_patch16_224",
        "timm_mixnet_s", "timm_mobileone_s0", "timm_fastvit_t8", "timm_mobilenetv4_hybrid_medium",
        "timm_repghostnet_100", "timm_efficientvit_b0", "timm_mobilevit_s", "timm_resnet50_gn",
        "timm_resnetv2_50x1_bit", "timm_skresnet18", "timm_resnest14d", "timm_ecaresnet50d", "timm_levit_128s",
        # Added 2026-12-07 (RESULTS.md, 16:54 - 19:50): 37 more, none tuned for beforehand.
        "timm_tf_efficientnet_lite0", "timm_fbnetc_100", "timm_ghostnetv2_100", "timm_repvit_m1",
        "timm_mobilevitv2_050", "timm_efficientvit_m0", "timm_tinynet_a", "timm_hardcorenas_a",
        "timm_mobilenetv4_conv_blur_medium", "timm_mobilenetv3_rw", "timm_resnet18d", "timm_regnetz_b16",
        "timm_efficientnetv2_rw_t", "timm_convnextv2_atto", "timm_edgenext_xx_small", "timm_semnasnet_100",
        "timm_spnasnet_100", "timm_mnasnet_100", "timm_lcnet_050", "timm_rexnet_100", "timm_cspresnet50",
        "timm_resnet26t", "timm_seresnext26d_32x4d", "timm_mobilenetv4_conv_aa_large", "timm_mobilenetv1_100h",
        "timm_mobileone_s1", "timm_fastvit_t12", "timm_inception_next_atto", "timm_starnet_s1",
        "timm_efficientformerv2_s0", "timm_tiny_vit_5m_224", "timm_hgnetv2_b0", "timm_mambaout_femto",
        "timm_ese_vovnet19b_dw", "timm_dla46_c", "timm_gernet_s", "timm_resnet10t"]
# Exported by bench/export_tf.py (tf2onnx), not here.
TF_VISION = ["tfk_resnet50", "tfk_resnet50v2", "tfk_resnet101", "tfk_mobilenet", "tfk_mobilenetv2", "tfk_mobilenetv3l",
             "tfk_mobilenetv3s", "tfk_efficientnetb0", "tfk_densenet121", "tfb_vit"]
TF_ENCODERS = ["tfb_bert", "tfb_distilbert", "tfb_roberta"]
ENCODERS += TF_ENCODERS
ALL = VISION + ENCODERS + ["tf_mobilenet_v2"] + TIMM + TF_VISION
SEQ, VOCAB, PADDED = 128, 30522, 28


# ---- exporters ---------------------------------------------------------------------------------

def export_torch(name, path, exporter="torchscript"):
    import torch
    import torchvision
    torch.manual_seed(0)
    dyn = {"input": {0: "batch"}, "output": {0: "batch"}}
    # torch.export specializes a dim of size 1 whatever dynamic_axes says: an example batch of 2.
    b = 2 if exporter == "dynamo" else 1
    if name in VISION or name in TIMM:
        if name in TIMM:
            import timm
            m = timm.create_model(name[len("timm_"):], pretrained=False).eval()
        else:
            m = (torchvision.models.mobilenet_v2(width_mult=1.4) if name == "mobilenet_v2_w14"
                 else getattr(torchvision.models, name)()).eval()
        with torch.no_grad():
            for mod in m.modules():
                if isinstance(mod, torch.nn.BatchNorm2d):  # statistics that do something
                    mod.running_mean.uniform_(-0.1, 0.1)
                    mod.running_var.uniform_(0.5, 1.5)
            for mod in m.modules():
                if isinstance(mod, torch.nn.Linear) and float(mod.weight.abs().max()) == 0.0:
                    torch.nn.init.normal_(mod.weight, std=0.02)
        args, names = (torch.randn(b, 3, 224, 224),), ["input"]
    elif name.startswith("torch_encoder"):
        # torch_encoder_512: a smaller encoder with nn.TransformerEncoderLayer's defaults (ReLU, 8 heads).
        d, heads, ff, layers, act = (512, 8, 2048, 6, "relu") if name.endswith("512") else (768, 12, 3072, 12, "gelu")
        layer = torch.nn.TransformerEncoderLayer(d, heads, ff, dropout=0.0, activation=act, batch_first=True,
                                                 norm_first=name.endswith("prenorm"))
        m = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
        args, names = (torch.randn(b, SEQ, d),), ["input"]
    else:
        m = transformers_model(name) if name in TRANSFORMERS else bert(name).eval()
        args = (torch.randint(0, VOCAB, (b, SEQ)), torch.ones(b, SEQ, dtype=torch.int64))
        names = ["input_ids", "attention_mask"]
        dyn = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
               "output": {0: "batch", 1: "seq"}}
    # Not under no_grad: there nn.MultiheadAttention takes its fused fast path, which has no ONNX form.
    if exporter == "dynamo":
        # torch.export's graph through onnxscript (the default exporter from PyTorch 2.9 on): its own
        # opset (18 or later) and decompositions.
        torch.onnx.export(m, args, path, input_names=names, output_names=["output"], dynamic_axes=dyn, dynamo=True,
                          external_data=False)
    else:
        torch.onnx.export(m, args, path, input_names=names, output_names=["output"], dynamic_axes=dyn,
                          opset_version=17, dynamo=False)


def have_timm():
    try:
        import timm  # noqa: F401
        return True
    except Exception:
        return False


def have_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except Exception:  # absent, or its own dependency check failing (an old safetensors)
        return False


def transformers_model(name):
    """A HuggingFace model's last hidden state from (input_ids, attention_mask)."""
    import torch
    import transformers
    arch, cfg = TRANSFORMERS[name]
    config = getattr(transformers, arch.removesuffix("Encoder") + "Config")(**cfg)
    plain = ("DistilBert", "Electra", "GPT2", "T5Encoder", "DebertaV2", "Llama", "SqueezeBert", "ConvBert",
             "ModernBert", "CLIPText")
    extra = {} if arch in plain else {"add_pooling_layer": False}
    model = getattr(transformers, arch + "Model")(config, **extra).eval()

    class Hidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, attn):
            return self.model(input_ids=ids, attention_mask=attn).last_hidden_state

    return Hidden()


def bert(kind, layers=12, d=768, heads=12, ff=3072):
    import torch

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.dh = d // heads
            self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ln2 = torch.nn.LayerNorm(d, eps=1e-12), torch.nn.LayerNorm(d, eps=1e-12)
            self.f1, self.f2 = torch.nn.Linear(d, ff), torch.nn.Linear(ff, d)

        def heads(self, x):
            return x.view(x.shape[0], x.shape[1], heads, self.dh).permute(0, 2, 1, 3)

        def forward(self, x, mask):
            q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
            if kind in ("sdpa_bert", "sdpa_bool_bert"):
                c = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            else:
                if kind == "distil_bert":
                    s = torch.matmul(q / math.sqrt(self.dh), k.transpose(-1, -2))
                    s = s.masked_fill(mask, torch.finfo(torch.float32).min)
                else:
                    s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + mask
                c = torch.matmul(torch.softmax(s, dim=-1), v)
            c = c.permute(0, 2, 1, 3).contiguous()
            x = self.ln1(self.o(c.view(c.shape[0], c.shape[1], -1)) + x)
            return self.ln2(self.f2(torch.nn.functional.gelu(self.f1(x))) + x)

    class Bert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.words, self.pos, self.types = (torch.nn.Embedding(n, d) for n in (VOCAB, 512, 2))
            self.ln = torch.nn.LayerNorm(d, eps=1e-12)
            self.layers = torch.nn.ModuleList(Layer() for _ in range(layers))
            self.register_buffer("positions", torch.arange(512).unsqueeze(0))

        def forward(self, ids, attn):
            x = self.words(ids) + self.pos(self.positions[:, :ids.shape[1]]) + self.types(torch.zeros_like(ids))
            x = self.ln(x)
            if kind == "distil_bert":
                mask = (attn == 0)[:, None, None, :]
            elif kind == "sdpa_bool_bert":
                mask = (attn != 0)[:, None, None, :]
            else:
                mask = (1.0 - attn[:, None, None, :].to(torch.float32)) * torch.finfo(torch.float32).min
            for layer in self.layers:
                x = layer(x, mask)
            return x

    m = Bert()
    for p in m.parameters():
        if p.dim() > 1:
            torch.nn.init.normal_(p, std=0.02)
    return m


def export_tf_mobilenet_v2(path):
    """bench/models.py's MobileNetV2 as tf2onnx writes one: NHWC input, biased convolutions, Pad."""
    sys.path.insert(0, HERE)
    import onnx
    from onnx import TensorProto, helper
    import models

    def conv_bn(g, x, cin, cout, k, hw, stride=1, group=1, act="relu"):
        w = g.randn("w", (cout, cin // group, k, k), np.sqrt(2.0 / (cin // group * k * k)))
        b = g.const("b", g.rng.normal(0, 0.1, cout))
        pads = [k // 2] * 4
        if stride == 2 and k > 1:  # SAME on an even size: nothing before, k - 2 after
            x = g.op("Pad", [x, g.const("pads", [0, 0, 0, 0, 0, 0, k - 2, k - 2], np.int64)])
            pads = [0] * 4
        h = g.op("Conv", [x, w, b], kernel_shape=[k, k], strides=[stride, stride], pads=pads, group=group)
        if act == "relu6":
            h = g.op("Clip", [h, g.const("zero", 0.0), g.const("six", 6.0)])
        return h, (hw + 2 * (k // 2) - k) // stride + 1

    build = models.Graph.model

    def model(self, name, inputs, outputs):
        self.nodes.insert(0, helper.make_node("Transpose", ["input_nhwc"], ["input"], perm=[0, 3, 1, 2]))
        return build(self, name, [helper.make_tensor_value_info("input_nhwc", TensorProto.FLOAT, ["N", 224, 224, 3])],
                     outputs)

    models.conv_bn, models.Graph.model = conv_bn, model
    onnx.save(models.mobilenet_v2()[0], path)


# ---- running -----------------------------------------------------------------------------------

def inputs_for(session, batch, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for i in session.get_inputs():
        ints = np.int32 if i.type == "tensor(int32)" else np.int64  # tf2onnx's models take int32
        if i.name == "input_ids":
            feeds[i.name] = rng.integers(0, VOCAB, (batch, SEQ)).astype(ints)
        elif i.name == "attention_mask":
            m = np.ones((batch, SEQ), ints)
            m[:, SEQ - PADDED:] = 0
            feeds[i.name] = m
        elif i.name == "token_type_ids":  # BERT's segment ids: the first sentence, the rest the second
            t = np.zeros((batch, SEQ), ints)
            t[:, SEQ // 2:] = 1
            feeds[i.name] = t
        else:
            feeds[i.name] = rng.standard_normal((batch, *i.shape[1:])).astype(np.float32)
    return feeds


def seq_dims(onnx_path):
    """`--dim NAME=SEQ` for each symbolic dim after the batch of the model's inputs (torch names
    it seq; tf2onnx names each input's dims on its own: unk__1579, unk__1581)."""
    import onnx
    names = []
    for i in onnx.load(onnx_path, load_external_data=False).graph.input:
        for d in list(i.type.tensor_type.shape.dim)[1:]:
            if d.dim_param and d.dim_param not in names:
                names.append(d.dim_param)
    return [a for n in names for a in ("--dim", f"{n}={SEQ}")]


def ort_session(model, threads):
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = threads, 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


ORT_CHILD = """
import sys, time, numpy as np, onnxruntime as ort
model, threads, iters, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
feeds = dict(np.load(sys.argv[5]))
so = ort.SessionOptions(); so.intra_op_num_threads = threads; so.inter_op_num_threads = 1
so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
s = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
for _ in range(warmup): s.run(None, feeds)
ts = []
for _ in range(iters):
    t0 = time.perf_counter(); s.run(None, feeds); ts.append(time.perf_counter() - t0)
print(np.median(ts) * 1e3)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", default="build/tools/kiln")
    ap.add_argument("--work", default="/tmp/kiln_exported")
    ap.add_argument("--models", default=",".join(ALL))
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                    help="torch.onnx.export(dynamo=False, opset 17), or dynamo=True (needs onnxscript); "
                         "dynamo's files are named MODEL__dynamo")
    ap.add_argument("--json")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        have_torch = True
    except ImportError:
        have_torch = False
    rows, failed = [], []
    print(f"{'model':24} {'batch':>5} {'kiln ms':>9} {'ORT ms':>9} {'kiln/ORT':>8}  check")
    for name in a.models.split(","):
        tf = name == "tf_mobilenet_v2" or name in TF_VISION or name in TF_ENCODERS
        stem = name + ("__dynamo" if a.exporter == "dynamo" and not tf else "")
        onnx_path = os.path.join(a.work, stem + ".onnx")
        engine = os.path.join(a.work, stem + ".kiln")
        if not os.path.exists(onnx_path):
            if name == "tf_mobilenet_v2":
                export_tf_mobilenet_v2(onnx_path)
            elif name in TF_VISION or name in TF_ENCODERS:
                print(f"{name:24} skipped: export it first with bench/export_tf.py (a TensorFlow venv)")
                continue
            elif not have_torch:
                print(f"{name:24} skipped: needs torch and torchvision (pip install torch torchvision)")
                continue
            elif name in TRANSFORMERS and not have_transformers():
                print(f"{name:24} skipped: needs transformers that imports (pip install -U transformers)")
                continue
            elif name in TIMM and not have_timm():
                print(f"{name:24} skipped: needs timm (pip install timm)")
                continue
            else:
                try:
                    export_torch(name, onnx_path, a.exporter)
                except Exception as e:  # the exporter's failure, not kiln's: say so and go on
                    print(f"{stem:24} export failed: {(str(e).strip().splitlines() or [type(e).__name__])[0][:160]}")
                    continue
        extra = seq_dims(onnx_path) if name in ENCODERS and not name.startswith("torch_encoder") else []
        r = subprocess.run([a.kiln, "compile", onnx_path, "-o", engine, "--batch", "1:8", "--threads", str(a.threads)]
                           + extra, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if r.returncode != 0:
            print(f"{stem:24} kiln compile FAILED: {(r.stderr.strip().splitlines() or ['?'])[-1]}", flush=True)
            failed.append(stem)
            continue
        session = ort_session(onnx_path, a.threads)
        for batch in a.batch:
            feeds = inputs_for(session, batch)
            feed_file = os.path.join(a.work, f"{stem}_b{batch}.npz")
            np.savez(feed_file, **feeds)
            in_args = []
            for k, v in feeds.items():
                np.save(os.path.join(a.work, f"{stem}_b{batch}_{k}.npy"), v)
                in_args += ["-i", f"{k}={os.path.join(a.work, f'{stem}_b{batch}_{k}.npy')}"]
            out_dir = os.path.join(a.work, f"{stem}_b{batch}_out")
            subprocess.run([a.kiln, "run", engine, "-o", out_dir] + in_args, check=True, stdout=subprocess.DEVNULL)
            got = np.load(os.path.join(out_dir, os.listdir(out_dir)[0]))
            want = session.run(None, feeds)[0]
            check = f"max |diff| {np.abs(got - want).max():.2g} of max |out| {np.abs(want).max():.2g}"
            heavy = name == "vit_b_16" or name in ENCODERS
            iters = (3 if batch > 1 else 6) if heavy else (6 if batch > 1 else 20)
            kiln_ms, ort_ms = [], []
            for _ in range(a.rounds):
                # The text output, not --json: --json also times every layer.
                r = subprocess.run([a.kiln, "bench", engine, "--batch", str(batch), "--threads", str(a.threads),
                                    "--iterations", str(iters), "--warmup", "2"] + in_args,
                                   check=True, capture_output=True, text=True)
                kiln_ms.append(float(re.search(r"median ([0-9.]+)", r.stdout).group(1)))
                r = subprocess.run([sys.executable, "-c", ORT_CHILD, onnx_path, str(a.threads), str(iters), "2",
                                    feed_file], check=True, capture_output=True, text=True)
                ort_ms.append(float(r.stdout))
            k, o = min(kiln_ms), min(ort_ms)
            rows.append({"model": stem, "batch": batch, "kiln_ms": k, "ort_ms": o, "ratio": k / o, "check": check})
            print(f"{stem:24} {batch:>5} {k:>9.3f} {o:>9.3f} {k / o:>8.2f}  {check}", flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    if failed:
        sys.exit(f"kiln could not compile: {', '.join(failed)}")


if __name__ == "__main__":
    main()
