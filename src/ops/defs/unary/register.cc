// Registration of the unary family: math (math.cc) and activations (activation.cc).
#include "ops/defs/register_all.h"

namespace kiln {

void register_unary_math_ops(OpRegistry& r);
void register_unary_activation_ops(OpRegistry& r);
void register_unary_trig_ops(OpRegistry& r);             // trig.cc
void register_unary_activation_onnx_ops(OpRegistry& r);  // activation_onnx.cc

void register_unary_ops(OpRegistry& r) {
  register_unary_math_ops(r);
  register_unary_activation_ops(r);
  register_unary_trig_ops(r);
  register_unary_activation_onnx_ops(r);
}

}  // namespace kiln
