#include "ops/defs/common.h"

#include <algorithm>

namespace kiln::defs {

OpDef& rules_pending(OpDef& d, const char* onnx_type, int since) {
  d.vjp_pending(kVjpPending).batch_pending(kBatchPending);
  if (onnx_type) d.onnx(OnnxMapping{onnx_type, since, ""});
  else d.onnx_pending(kOnnxPending);
  return d;
}

std::vector<TensorMeta> infer_same(const InferCtx& c) { return {c.in(0)}; }

std::vector<TensorMeta> infer_broadcast_promote(const InferCtx& c) {
  std::optional<TensorMeta> out;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has(i)) continue;
    const TensorMeta& m = c.inputs[i].value();
    if (!out) {
      out = m;
      continue;
    }
    out->shape = broadcast_shapes(out->shape, m.shape, c.op.name().c_str());
    out->dtype = promote_types(out->dtype, m.dtype);
  }
  if (!out) c.fail("no inputs");
  return {*out};
}

Shape reduced_shape(const Shape& shape, const std::vector<int64_t>& axes, bool keepdim) {
  Shape out;
  for (size_t d = 0; d < shape.size(); ++d) {
    bool reduced = std::find(axes.begin(), axes.end(), static_cast<int64_t>(d)) != axes.end();
    if (!reduced) out.push_back(shape[d]);
    else if (keepdim) out.push_back(1);
  }
  return out;
}

}  // namespace kiln::defs
