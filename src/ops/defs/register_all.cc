#include "ops/defs/register_all.h"

namespace kiln {

void register_fused_ops(OpRegistry& r);  // defs/fused/fused.cc (fused_gemm, fused_conv2d: compiler epilogues)
void register_fused_elementwise_ops(OpRegistry& r);  // defs/fused/elementwise.cc (fused_elementwise)
void register_fused_attention_ops(OpRegistry& r);  // defs/fused/attention.cc (fused_attention)
void register_nchwc_ops(OpRegistry& r);  // defs/conv/nchwc.cc (to_nchwc, from_nchwc, fused_conv2d_nchwc: the layout pass)
void register_tactic_kernels(OpRegistry& r);  // defs/linalg/matmul_tactics.cc (gemm/matmul/fused_gemm tactics)

void register_builtin_ops(OpRegistry& r) {
  register_view_ops(r);
  register_copy_ops(r);
  register_shape_ops(r);
  register_unary_ops(r);
  register_binary_ops(r);
  register_reduce_ops(r);
  register_scan_ops(r);
  register_norm_ops(r);
  register_linalg_ops(r);
  register_conv_ops(r);
  register_index_ops(r);
  register_resample_ops(r);
  register_fused_ops(r);
  register_fused_elementwise_ops(r);
  register_fused_attention_ops(r);
  register_nchwc_ops(r);
  register_tactic_kernels(r);  // last: adds kernels to ops registered above
}

}  // namespace kiln
