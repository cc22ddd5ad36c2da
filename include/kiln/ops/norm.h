// Softmax, normalization and rotary position layers.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

Tensor softmax(const Tensor& x, int64_t axis = -1, SourceLoc loc = KILN_HERE);
Tensor log_softmax(const Tensor& x, int64_t axis = -1, SourceLoc loc = KILN_HERE);
// Normalizes over the dims from `axis` to the end (ONNX LayerNormalization's axis); weight and
// bias (optional) have the normalized shape.
Tensor layer_norm(const Tensor& x, int64_t axis, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5, SourceLoc loc = KILN_HERE);
// Root-mean-square norm over the dims from `axis` to the end (ONNX RMSNormalization's axis; T5's and
// LLaMA's RMSNorm): x / sqrt(mean(x^2) + eps) * weight; weight (optional) has the normalized shape.
Tensor rms_norm(const Tensor& x, int64_t axis = -1, const Tensor& weight = {}, double eps = 1e-5,
                SourceLoc loc = KILN_HERE);
// Rotary position embedding on the last dim (ONNX RotaryEmbedding's rotation, with cos and sin at
// full width): x * cos + R(x) * sin, R turning each pair (i, i + D/2) (rotate_half; or (2i, 2i + 1)
// when interleaved) a quarter turn: R(x) = (-x2, x1). cos and sin broadcast to x's shape.
Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved = false,
                        SourceLoc loc = KILN_HERE);
// Inference form over channel dim 1: (x - mean) / sqrt(var + eps) * weight + bias.
Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5, SourceLoc loc = KILN_HERE);

}  // namespace kiln
