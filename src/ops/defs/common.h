// Helpers shared by op definitions: inference rules that many ops use, and the reason strings
// for rule slots that later issues fill.
#pragma once

#include "kiln/ops/dispatch.h"
#include "kiln/ops/op_def.h"

namespace kiln::defs {

// Rule slots that are filled by later layers say so, with the issue that fills them.
inline constexpr const char* kVjpPending = "derivative rules land with the autograd layer (issue #4)";
inline constexpr const char* kBatchPending = "batching rules land with the fn/vmap layer";
inline constexpr const char* kOnnxPending = "ONNX mapping lands with the ONNX layer (issue #7)";

// Marks the three rule slots pending (the common state of an op defined by the core issue).
// `onnx` records the ONNX op it maps to when there is one ("" = none in ONNX).
OpDef& rules_pending(OpDef& d, const char* onnx_type = nullptr, int since = 0);

// out = in(0) (same dtype and shape).
std::vector<TensorMeta> infer_same(const InferCtx& c);
// Broadcast of all defined inputs; dtype = promote_types of them.
std::vector<TensorMeta> infer_broadcast_promote(const InferCtx& c);

// The shape of a reduction of `shape` over normalized `axes`.
Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim);

}  // namespace kiln::defs
