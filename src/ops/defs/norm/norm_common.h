// Pieces shared by the norm family's definitions (softmax.cc, layer_norm.cc, rotary.cc).
#pragma once

#include "kiln/ops/op_def.h"

namespace kiln::defs {

// kiln::Error naming the op and input i unless input i is floating.
void check_floating_input(const InferCtx& c, size_t i);

void register_norm_layer_ops(OpRegistry& r);  // layer_norm.cc: layer_norm, rms_norm, batch_norm
void register_rotary_ops(OpRegistry& r);      // rotary.cc: rotary_embedding

}  // namespace kiln::defs
