#!/usr/bin/env python3
"""Exports PyTorch models to ONNX for tests/onnx/torch_models/check_models.py (needs torch; not run in CI).

Every model is built with a fixed seed and random weights in eval mode (BatchNorm running statistics
randomized, so folding BN is exercised), exported with the TorchScript exporter (dynamo=False,
opsets 13 and 17) and the dynamo exporter (dynamo=True, when onnxscript is installed), each with a
static batch and with a dynamic batch axis. Each export lands in OUT/<model>__<exporter>__<batch>/:
model.onnx, the inputs and PyTorch's outputs as .npy and meta.json naming them; a dynamic-batch case
also stores inputs and outputs at a second batch size (alt_*.npy).

  export_models.py --out DIR [--set small|full|all] [--filter SUBSTR]

`--set small` is the committed fixture set (tests/onnx/torch_models/fixtures): narrow models at
32x32 and d_model 32 so every .onnx stays far below 1 MB. `--set full` is the torchvision models at
224x224 and a wider encoder, checked locally only.
"""
import argparse
import json
import math
import os
import shutil
import sys
import warnings
import zlib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:
    import onnxscript  # noqa: F401  (the dynamo exporter needs it)
    HAVE_DYNAMO = True
except ImportError:
    HAVE_DYNAMO = False

EXPORT_BATCH = 2
ALT_BATCH = 3


# ---- weights --------------------------------------------------------------------------------------
def randomize(model, seed):
    """Random weights everywhere and random BN running stats, so that every parameter matters."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(fan_in))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1 + (1.0 if name.endswith("weight") else 0.0))
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.running_mean.shape, generator=g) * 0.2)
                m.running_var.copy_(torch.rand(m.running_var.shape, generator=g) * 1.0 + 0.5)
    return model.eval()


# ---- models ---------------------------------------------------------------------------------------
class TinyResNet(nn.Module):
    """Conv-BN-ReLU stem, maxpool, two residual blocks (one with a strided 1x1 shortcut), avgpool,
    flatten, linear."""

    def __init__(self, width=8, classes=10):
        super().__init__()
        w = width
        self.stem = nn.Sequential(nn.Conv2d(3, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU())
        self.pool = nn.MaxPool2d(3, stride=2, padding=1)
        self.b1 = nn.Sequential(nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                                nn.Conv2d(w, w, 3, padding=1, bias=False), nn.BatchNorm2d(w))
        self.b2 = nn.Sequential(nn.Conv2d(w, 2 * w, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(2 * w),
                                nn.ReLU6(), nn.Conv2d(2 * w, 2 * w, 3, padding=1), nn.BatchNorm2d(2 * w))
        self.down = nn.Sequential(nn.Conv2d(w, 2 * w, 1, stride=2, bias=False), nn.BatchNorm2d(2 * w))
        self.avg = nn.AvgPool2d(2)
        self.fc = nn.Linear(2 * w * 4 * 4, classes)

    def forward(self, x):
        x = self.pool(self.stem(x))
        x = F.relu(x + self.b1(x))
        x = F.relu(self.down(x) + self.b2(x))
        x = self.avg(x)
        return self.fc(torch.flatten(x, 1))


class GapCNN(nn.Module):
    """Depthwise-separable convs, SiLU/Hardswish, global average pool via adaptive pool, view."""

    def __init__(self, classes=7):
        super().__init__()
        self.c1 = nn.Conv2d(3, 12, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(12)
        self.dw = nn.Conv2d(12, 12, 3, padding=1, groups=12, bias=False)
        self.bn2 = nn.BatchNorm2d(12)
        self.pw = nn.Conv2d(12, 16, 1)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.silu(self.bn1(self.c1(x)))
        x = F.hardswish(self.bn2(self.dw(x)))
        x = self.pw(x)
        x = F.adaptive_avg_pool2d(x, 1)
        x = x.view(x.size(0), -1)
        return F.softmax(self.fc(x), dim=-1)


class TinyUNet(nn.Module):
    """Encoder-decoder: strided conv, GroupNorm, LeakyReLU, ConvTranspose2d, bilinear and nearest
    upsampling, skip concatenation, InstanceNorm, sigmoid output."""

    def __init__(self, c=8):
        super().__init__()
        self.e1 = nn.Sequential(nn.Conv2d(3, c, 3, padding=1), nn.GroupNorm(2, c), nn.LeakyReLU(0.1))
        self.e2 = nn.Sequential(nn.Conv2d(c, 2 * c, 3, stride=2, padding=1), nn.BatchNorm2d(2 * c), nn.ELU())
        self.e3 = nn.Sequential(nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1), nn.InstanceNorm2d(2 * c, affine=True),
                                nn.GELU())
        self.up1 = nn.ConvTranspose2d(2 * c, 2 * c, 2, stride=2)
        self.d1 = nn.Conv2d(4 * c, c, 3, padding=1)
        self.d2 = nn.Conv2d(2 * c, 1, 1)

    def forward(self, x):
        a = self.e1(x)
        b = self.e2(a)
        y = self.e3(b)
        y = torch.cat([self.up1(y), F.interpolate(y, scale_factor=2, mode="nearest")], 1)
        y = F.relu(self.d1(y))
        y = F.interpolate(y, scale_factor=2, mode="bilinear", align_corners=False)
        return torch.sigmoid(self.d2(torch.cat([y, a], 1)))


class ConvNeXtBlock(nn.Module):
    """ConvNeXt-style: depthwise 7x7, channels-last LayerNorm, pointwise MLP with GELU, layer scale,
    residual; a patchify stem and a pooled head."""

    def __init__(self, c=16, classes=5):
        super().__init__()
        self.stem = nn.Conv2d(3, c, 4, stride=4)
        self.dw = nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.ln = nn.LayerNorm(c, eps=1e-6)
        self.pw1 = nn.Linear(c, 4 * c)
        self.pw2 = nn.Linear(4 * c, c)
        self.gamma = nn.Parameter(torch.full((c,), 0.5))
        self.head = nn.Linear(c, classes)

    def forward(self, x):
        x = self.stem(x)
        y = self.dw(x).permute(0, 2, 3, 1)
        y = self.pw2(F.gelu(self.pw1(self.ln(y)))) * self.gamma
        x = x + y.permute(0, 3, 1, 2)
        return self.head(x.mean(dim=(2, 3)))


class Encoder(nn.Module):
    """nn.TransformerEncoder with optional key-padding / causal attention masks."""

    def __init__(self, d, heads, ff, layers, batch_first, norm_first, activation, mask):
        super().__init__()
        layer = nn.TransformerEncoderLayer(d, heads, ff, dropout=0.1, activation=activation,
                                           batch_first=batch_first, norm_first=norm_first)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False,
                                         norm=nn.LayerNorm(d) if norm_first else None)
        self.batch_first, self.mask = batch_first, mask

    def forward(self, x, pad=None):
        if self.mask == "pad":
            return self.enc(x, src_key_padding_mask=pad)
        if self.mask == "causal":
            s = x.shape[1] if self.batch_first else x.shape[0]
            causal = torch.triu(torch.full((s, s), float("-inf")), diagonal=1)
            return self.enc(x, mask=causal, is_causal=True)
        return self.enc(x)


class BertLayer(nn.Module):
    def __init__(self, d, heads, ff, gelu):
        super().__init__()
        self.h, self.dh = heads, d // heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff1 = nn.Linear(d, ff)
        self.ff2 = nn.Linear(ff, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)
        self.gelu = gelu

    def forward(self, x, bias):
        b, s, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, s, self.h, self.dh).transpose(1, 2)
        k = k.view(b, s, self.h, self.dh).transpose(1, 2)
        v = v.view(b, s, self.h, self.dh).transpose(1, 2)
        att = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.dh) + bias
        att = torch.softmax(att, dim=-1)
        y = torch.matmul(att, v).transpose(1, 2).reshape(b, s, d)
        x = self.ln1(x + self.proj(y))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x), approximate=self.gelu)))


class Bert(nn.Module):
    """Hand-written BERT-style encoder: token + learned position + token-type embeddings, LayerNorm,
    attention by matmul/softmax with an additive mask built from attention_mask, GELU (tanh in one
    layer, erf in the other), a tanh pooler on the first token."""

    def __init__(self, vocab=50, d=32, heads=4, ff=64, max_len=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d)
        self.typ = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList([BertLayer(d, heads, ff, "tanh"), BertLayer(d, heads, ff, "none")])
        self.pool = nn.Linear(d, d)

    def forward(self, ids, attention_mask):
        s = ids.shape[1]
        pos = torch.arange(s, device=ids.device).unsqueeze(0)
        x = self.ln(self.tok(ids) + self.pos(pos) + self.typ(torch.zeros_like(ids)))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        return x, torch.tanh(self.pool(x[:, 0]))


# ---- the model table ------------------------------------------------------------------------------
def image_input(res):
    def make(batch, g):
        return {"x": torch.randn(batch, 3, res, res, generator=g)}
    return make, {"x": 0}


def encoder_input(d, seq, batch_first, mask):
    def make(batch, g):
        shape = (batch, seq, d) if batch_first else (seq, batch, d)
        inputs = {"x": torch.randn(shape, generator=g)}
        if mask == "pad":
            lengths = torch.randint(2, seq + 1, (batch,), generator=g)
            inputs["pad"] = torch.arange(seq)[None, :] >= lengths[:, None]  # True: padding
        return inputs
    axes = {"x": 0 if batch_first else 1}
    if mask == "pad":
        axes["pad"] = 0
    return make, axes


def bert_input(vocab, seq, dynamic_seq=False):
    def make(batch, g):
        ids = torch.randint(0, vocab, (batch, seq), generator=g)
        lengths = torch.randint(2, seq + 1, (batch,), generator=g)
        mask = (torch.arange(seq)[None, :] < lengths[:, None]).to(torch.int64)
        return {"ids": ids, "attention_mask": mask}
    # A third entry: axes exported as a symbolic "seq" (bound to seq when the case is checked).
    if dynamic_seq:
        return make, {"ids": 0, "attention_mask": 0}, ({"ids": 1, "attention_mask": 1}, seq)
    return make, {"ids": 0, "attention_mask": 0}


def models():
    """name -> (set, builder, (make_inputs, batch_axes))."""
    import torchvision.models as tvm
    table = {}
    table["tiny_resnet"] = ("small", lambda: TinyResNet(), image_input(32))
    table["gap_cnn"] = ("small", lambda: GapCNN(), image_input(24))
    table["mobilenet_v2_w025"] = ("small", lambda: _small_mobilenet(tvm), image_input(32))
    table["tiny_unet"] = ("small", lambda: TinyUNet(), image_input(16))
    table["convnext_block"] = ("small", lambda: ConvNeXtBlock(), image_input(32))
    for bf in (True, False):
        for nf in (False, True):
            for act in ("relu", "gelu"):
                name = "encoder_{}_{}_{}".format("bf" if bf else "sf", "pre" if nf else "post", act)
                table[name] = ("small", _encoder(32, 4, 64, 2, bf, nf, act, None), encoder_input(32, 6, bf, None))
    table["encoder_bf_post_relu_pad"] = ("small", _encoder(32, 4, 64, 2, True, False, "relu", "pad"),
                                         encoder_input(32, 6, True, "pad"))
    table["encoder_sf_pre_gelu_causal"] = ("small", _encoder(32, 4, 64, 2, False, True, "gelu", "causal"),
                                           encoder_input(32, 6, False, "causal"))
    table["bert"] = ("small", lambda: Bert(), bert_input(50, 8))
    # HuggingFace's own GPT-2 (when transformers is installed): its causal mask and position ids as
    # transformers writes them, with the sequence exported dynamic as well: under dynamo its length
    # is then attention_mask.numel() // batch, and its position ids a Slice to Shape(ids)[1:2].
    table["hf_gpt2"] = ("small", _hf_gpt2, bert_input(50, 8, dynamic_seq=True))
    # ...and its BertModel, whose position ids are a slice of a buffer to the sequence's length.
    table["hf_bert"] = ("small", _hf_bert, bert_input(50, 8, dynamic_seq=True))
    # Full size, local only.
    table["resnet18"] = ("full", lambda: tvm.resnet18(), image_input(224))
    table["mobilenet_v2"] = ("full", lambda: tvm.mobilenet_v2(), image_input(224))
    table["efficientnet_b0"] = ("full", lambda: tvm.efficientnet_b0(), image_input(224))
    table["squeezenet1_1"] = ("full", lambda: tvm.squeezenet1_1(), image_input(224))
    table["shufflenet_v2_x0_5"] = ("full", lambda: tvm.shufflenet_v2_x0_5(), image_input(224))
    table["densenet121"] = ("full", lambda: tvm.densenet121(), image_input(224))
    table["regnet_y_400mf"] = ("full", lambda: tvm.regnet_y_400mf(), image_input(224))
    table["convnext_tiny"] = ("full", lambda: tvm.convnext_tiny(), image_input(224))
    table["googlenet"] = ("full", lambda: tvm.googlenet(aux_logits=False, init_weights=False), image_input(224))
    table["encoder_d256_l4"] = ("full", _encoder(256, 8, 1024, 4, True, False, "gelu", "pad"),
                                encoder_input(256, 32, True, "pad"))
    table["bert_d256"] = ("full", lambda: Bert(vocab=1000, d=256, heads=8, ff=1024, max_len=64), bert_input(1000, 32))
    return table


def _small_mobilenet(tvm):
    # torchvision's MobileNetV2 (inverted residuals, ReLU6, depthwise convs) at width 0.25, with a
    # 96-channel head conv instead of 1280 so the committed .onnx stays small.
    from torchvision.ops.misc import Conv2dNormActivation
    m = tvm.mobilenet_v2(width_mult=0.25, num_classes=10)
    m.features[-1] = Conv2dNormActivation(m.features[-1][0].in_channels, 96, kernel_size=1,
                                          activation_layer=nn.ReLU6)
    m.classifier[1] = nn.Linear(96, 10)
    return m


class _LastHidden(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids, attention_mask):
        return self.model(input_ids=ids, attention_mask=attention_mask).last_hidden_state


def _hf_gpt2():
    import transformers
    cfg = transformers.GPT2Config(vocab_size=50, n_positions=16, n_embd=32, n_layer=2, n_head=4, use_cache=False)
    return _LastHidden(transformers.GPT2Model(cfg))


def _hf_bert():
    import transformers
    cfg = transformers.BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=64, max_position_embeddings=16)
    return _LastHidden(transformers.BertModel(cfg, add_pooling_layer=False))


def _encoder(d, heads, ff, layers, bf, nf, act, mask):
    return lambda: Encoder(d, heads, ff, layers, bf, nf, act, mask)


# ---- export ---------------------------------------------------------------------------------------
def exporters():
    out = [("ts13", dict(dynamo=False, opset_version=13)), ("ts17", dict(dynamo=False, opset_version=17))]
    if HAVE_DYNAMO:
        out.append(("dynamo", dict(dynamo=True)))
    return out


def save_case(case_dir, model, inputs, alt_inputs, meta):
    names = list(inputs)
    with torch.no_grad():
        outs = model(*inputs.values())
        alt_outs = model(*alt_inputs.values()) if alt_inputs else None
    outs = outs if isinstance(outs, tuple) else (outs,)
    meta["inputs"] = []
    for i, n in enumerate(names):
        np.save(os.path.join(case_dir, "in_{}.npy".format(i)), inputs[n].numpy())
        meta["inputs"].append({"name": meta["onnx_inputs"][i], "file": "in_{}.npy".format(i)})
    meta["outputs"] = []
    for i, o in enumerate(outs):
        np.save(os.path.join(case_dir, "out_{}.npy".format(i)), o.numpy())
        meta["outputs"].append({"name": meta["onnx_outputs"][i], "file": "out_{}.npy".format(i)})
    if alt_inputs:
        alt_outs = alt_outs if isinstance(alt_outs, tuple) else (alt_outs,)
        meta["alt"] = {"batch": ALT_BATCH, "inputs": [], "outputs": []}
        for i, n in enumerate(names):
            np.save(os.path.join(case_dir, "alt_in_{}.npy".format(i)), alt_inputs[n].numpy())
            meta["alt"]["inputs"].append({"name": meta["onnx_inputs"][i], "file": "alt_in_{}.npy".format(i)})
        for i, o in enumerate(alt_outs):
            np.save(os.path.join(case_dir, "alt_out_{}.npy".format(i)), o.numpy())
            meta["alt"]["outputs"].append({"name": meta["onnx_outputs"][i], "file": "alt_out_{}.npy".format(i)})


def export_case(out_dir, name, builder, inputs_spec, exporter, kwargs, dynamic, seed):
    import onnx
    make_inputs, batch_axes = inputs_spec[:2]
    seq_axes, seq = inputs_spec[2] if len(inputs_spec) > 2 and dynamic else ({}, 0)
    case = "{}__{}__{}".format(name, exporter, "dyn" if dynamic else "static")
    case_dir = os.path.join(out_dir, case)
    shutil.rmtree(case_dir, ignore_errors=True)
    os.makedirs(case_dir)
    torch.manual_seed(seed)
    model = randomize(builder(), seed)
    g = torch.Generator().manual_seed(seed + 1)
    inputs = make_inputs(EXPORT_BATCH, g)
    alt_inputs = make_inputs(ALT_BATCH, g) if dynamic else None
    path = os.path.join(case_dir, "model.onnx")
    args = tuple(inputs.values())
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        if kwargs["dynamo"]:
            extra = {}
            if dynamic and seq_axes:
                # As users write it (dynamic_axes, which the exporter turns into its own dims): with
                # explicit Dims torch.export knows numel = batch * seq and simplifies it away.
                extra["input_names"] = list(inputs)
                extra["dynamic_axes"] = {n: {a: "batch"} for n, a in batch_axes.items()}
                for n, a in seq_axes.items():
                    extra["dynamic_axes"][n][a] = "seq"
            elif dynamic:
                batch = torch.export.Dim("batch", min=1, max=1024)
                extra["dynamic_shapes"] = {n: {a: batch} for n, a in batch_axes.items()}
            prog = torch.onnx.export(model, args, dynamo=True, verbose=False, **extra)
            prog.save(path)
        else:
            extra = {}
            if dynamic:
                extra["dynamic_axes"] = {n: {a: "batch"} for n, a in batch_axes.items()}
                for n, a in seq_axes.items():
                    extra["dynamic_axes"][n][a] = "seq"
            torch.onnx.export(model, args, path, dynamo=False, opset_version=kwargs["opset_version"],
                              input_names=list(inputs), output_names=None, **extra)
    m = onnx.load(path)
    inits = {t.name for t in m.graph.initializer}
    meta = {"model": name, "exporter": exporter, "opset": [o.version for o in m.opset_import if o.domain in ("", "ai.onnx")][0],
            "dynamic_batch": dynamic, "export_batch": EXPORT_BATCH,
            "onnx_inputs": [i.name for i in m.graph.input if i.name not in inits],
            "onnx_outputs": [o.name for o in m.graph.output], "torch": torch.__version__}
    if seq_axes:
        meta["dims"] = {"seq": seq}
    save_case(case_dir, model, inputs, alt_inputs, meta)
    with open(os.path.join(case_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    return case, os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--set", choices=["small", "full", "all"], default="small")
    ap.add_argument("--filter", default="")
    ap.add_argument("--exporters", default="", help="comma list of ts13,ts17,dynamo (default: all available)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    # nn.TransformerEncoderLayer's eval-mode fast path (aten::_transformer_encoder_layer_fwd) has no
    # ONNX export; PyTorch users switch it off to export.
    torch.backends.mha.set_fastpath_enabled(False)
    wanted = set(args.exporters.split(",")) if args.exporters else None
    failures = 0
    for name, (which, builder, spec) in models().items():
        seed = 100 + zlib.crc32(name.encode()) % 10000  # stable per model, whatever the table's order
        if args.set != "all" and which != args.set:
            continue
        if args.filter and args.filter not in name:
            continue
        for exporter, kwargs in exporters():
            if wanted and exporter not in wanted:
                continue
            for dynamic in (False, True):
                try:
                    case, size = export_case(args.out, name, builder, spec, exporter, kwargs, dynamic, seed)
                    print("exported {:60s} {:9d} bytes".format(case, size), flush=True)
                except Exception as e:  # an exporter limitation: report it, go on
                    failures += 1
                    print("EXPORT FAILED {} {} {}: {}".format(name, exporter, dynamic, str(e).splitlines()[0][:300]),
                          flush=True)
    if not HAVE_DYNAMO:
        print("onnxscript is not installed: dynamo exports skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
