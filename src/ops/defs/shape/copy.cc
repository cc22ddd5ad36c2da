// Copy ops: clone (contiguous copy), cast (dtype conversion), copy (copy_ into an existing
// tensor, broadcasting and converting the source).
#include "kernels/cpu/loops.h"
#include "kiln/ops/unary.h"
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::rules_pending;

void copy_kernel(const KernelCall& k) { kernels::cpu::copy_into(k.out(0), k.in(k.inputs.size() - 1)); }

std::vector<TensorMeta> infer_copy(const InferCtx& c) {
  const TensorMeta& dst = c.in(0);
  const TensorMeta& src = c.in(1);
  Shape b = broadcast_shapes(dst.shape, src.shape, "copy_");
  KILN_CHECK(b == dst.shape, "copy_: source of shape ", shape_str(src.shape), " does not broadcast to the ",
             "destination's shape ", shape_str(dst.shape));
  return {dst};
}

}  // namespace

void register_copy_ops(OpRegistry& r) {
  rules_pending(r.add("clone(Tensor x) -> Tensor"), "Identity", 1)
      .infer(defs::infer_same)
      .kernel(DeviceType::cpu, DTypeSet::all(), copy_kernel)
      .vjp(VjpRule{[](const VjpCtx&, std::span<const Tensor> g) { return std::vector<Tensor>{g[0]}; }, {}, {}})
      .doc("A contiguous copy.");
  rules_pending(r.add("cast(Tensor x, dtype dtype) -> Tensor"), "Cast", 6)
      .infer([](const InferCtx& c) { return std::vector<TensorMeta>{{c.attrs.get_dtype("dtype"), c.in(0).shape}}; })
      .kernel(DeviceType::cpu, DTypeSet::all(), copy_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Only floating -> floating casts carry a gradient (integer outputs record none).
                     return std::vector<Tensor>{cast(g[0], c.input_metas[0].dtype)};
                   },
                   {}, {}})
      .doc("Converts elements to dtype (floats to integers truncate toward zero; to bool is != 0).");
  rules_pending(r.add("copy(Tensor dst, Tensor src) -> Tensor"))
      .infer(infer_copy)
      .kernel(DeviceType::cpu, DTypeSet::all(), copy_kernel)
      .dtype_key(0)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // dst is overwritten: no gradient to its old value; src receives g summed back
                     // over the dims it was broadcast along.
                     std::vector<Tensor> res(2);
                     if (c.needs(0)) res[0] = zeros_like(g[0]);
                     if (c.needs(1)) res[1] = defs::sum_to(g[0], c.in_shape(1));
                     return res;
                   },
                   {}, {}})
      .doc("dst with src's values broadcast and converted into it; the in-place form is copy_.");
}

Tensor cast(const Tensor& x, DType dtype, SourceLoc loc) {
  return dispatch1(op("cast"), {x}, {{"dtype", dtype}}, loc);
}

Tensor Tensor::clone(SourceLoc loc) const { return dispatch1(op("clone"), {*this}, {}, loc); }
Tensor Tensor::contiguous(SourceLoc loc) const { return is_contiguous() ? *this : clone(loc); }
Tensor Tensor::to(DType t, SourceLoc loc) const { return t == dtype() ? *this : cast(*this, t, loc); }

Tensor& Tensor::copy_(const Tensor& src, SourceLoc loc) {
  return dispatch_inplace(op("copy"), "copy_", *this, {src}, {}, loc);
}
Tensor& Tensor::fill_(Scalar value, SourceLoc loc) {
  return dispatch_inplace(op("copy"), "fill_", *this, {scalar_tensor(value, TensorOptions(dtype()))}, {}, loc);
}
Tensor& Tensor::zero_(SourceLoc loc) { return fill_(0, loc); }

}  // namespace kiln
