// The built-in op families. Each function registers one family's OpDefs; register_builtin_ops
// calls them all in a fixed order (Note [One definition] in src/ops/registry.cc).
#pragma once

namespace kiln {

class OpRegistry;

void register_builtin_ops(OpRegistry& r);

void register_view_ops(OpRegistry& r);     // defs/shape/views.cc
void register_copy_ops(OpRegistry& r);     // defs/shape/copy.cc
void register_shape_ops(OpRegistry& r);    // defs/shape/*.cc (concat, split, stack, tile, pad, trilu)
void register_unary_ops(OpRegistry& r);    // defs/unary/*.cc
void register_binary_ops(OpRegistry& r);   // defs/binary/*.cc (incl. where)
void register_reduce_ops(OpRegistry& r);   // defs/reduce/*.cc
void register_scan_ops(OpRegistry& r);     // defs/scan/*.cc
void register_norm_ops(OpRegistry& r);     // defs/norm/*.cc (softmax, layer/rms/batch norms, rotary_embedding)
void register_linalg_ops(OpRegistry& r);   // defs/linalg/*.cc (matmul, gemm)
void register_conv_ops(OpRegistry& r);     // defs/conv/*.cc (conv2d, pooling, lrn)
void register_index_ops(OpRegistry& r);    // defs/index/*.cc (gather, scatter, one_hot, topk)
void register_resample_ops(OpRegistry& r); // defs/resample/*.cc (resize, N-d pooling, grid_sample)

}  // namespace kiln
