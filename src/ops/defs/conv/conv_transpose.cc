// conv_transpose2d (NCHW, ONNX ConvTranspose 11 with explicit pads): the adjoint of conv2d in x,
// through GEMM + col2im (kernels/cpu/conv_transpose.h). The importer resolves auto_pad and
// output_shape into padding and output_padding.
#include <algorithm>
#include <limits>

#include "kernels/cpu/conv_transpose.h"
#include "kernels/cpu/loops.h"
#include "kiln/ops/conv.h"
#include "ops/defs/common.h"
#include "ops/defs/conv/conv_common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

// Note [Transposed convolution shape]
// Each input pixel (ih, iw) spreads the kernel over the full output at rows ih*stride + r*dil;
// the full output has stride*(H-1) + dil*(R-1) + 1 rows, to which output_padding adds rows at the
// end, and padding [top, left, bottom, right] crops from the start and end (ONNX's pads):
//   Ho = stride*(H-1) + output_padding + dil*(R-1) + 1 - top - bottom.
// output_padding must be smaller than stride or dilation (as PyTorch and ONNX require), so that
// it only reaches rows the input's last pixel cannot, and Ho must be >= 1.
int64_t transposed_size(const InferCtx& c, const char* dim, int64_t in, int64_t k, int64_t stride, int64_t pad_begin,
                        int64_t pad_end, int64_t dil, int64_t out_pad) {
  if (out_pad >= std::max(stride, dil))
    c.fail("output_padding " + std::to_string(out_pad) + " (" + dim + ") must be smaller than the stride (" +
           std::to_string(stride) + ") or the dilation (" + std::to_string(dil) + ")");
  const int64_t out = stride * (in - 1) + out_pad + dil * (k - 1) + 1 - pad_begin - pad_end;
  if (out < 1)
    c.fail(std::string("the output ") + dim + " would be " + std::to_string(out) + ": padding " +
           std::to_string(pad_begin) + " + " + std::to_string(pad_end) + " crops more than the full output of " +
           std::to_string(out + pad_begin + pad_end) + " (x has shape " + shape_str(c.in(0).shape) + ")");
  return out;
}

std::vector<TensorMeta> infer_conv_transpose2d(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  const TensorMeta& w = c.in(1);
  if (x.shape.size() != 4) c.fail("x must be 4-D [N, C, H, W], got shape " + shape_str(x.shape));
  if (w.shape.size() != 4) c.fail("w must be 4-D [C, K / groups, R, S], got shape " + shape_str(w.shape));
  auto stride = defs::pair_attr(c, "stride", 1);
  auto dil = defs::pair_attr(c, "dilation", 1);
  auto out_pad = defs::pair_attr(c, "output_padding", 0);
  auto pad = defs::padding_attr("conv_transpose2d", c.attrs);
  const int64_t groups = c.attrs.get_int("groups");
  if (groups < 1) c.fail("groups must be >= 1, got " + std::to_string(groups));
  const int64_t ch = x.shape[1];
  if (ch % groups != 0)
    c.fail("groups = " + std::to_string(groups) + " does not divide the " + std::to_string(ch) +
           " input channels of x (shape " + shape_str(x.shape) + ")");
  if (w.shape[0] != ch)
    c.fail("channel mismatch: x has shape " + shape_str(x.shape) + " (C = " + std::to_string(ch) +
           ") but w has shape " + shape_str(w.shape) + ", whose first dim must be C (w is [C, K / groups, R, S])");
  const int64_t k = w.shape[1] * groups;
  DType dt = promote_types(x.dtype, w.dtype);
  if (c.has(2)) {
    const TensorMeta& b = c.in(2);
    if (b.shape != Shape{k})
      c.fail("bias must have shape [" + std::to_string(k) + "] (K = w.shape[1] * groups = " +
             std::to_string(w.shape[1]) + " * " + std::to_string(groups) + "), got " + shape_str(b.shape));
    dt = promote_types(dt, b.dtype);
  }
  const int64_t ho = transposed_size(c, "height", x.shape[2], w.shape[2], stride[0], pad[0], pad[2], dil[0], out_pad[0]);
  const int64_t wo = transposed_size(c, "width", x.shape[3], w.shape[3], stride[1], pad[1], pad[3], dil[1], out_pad[1]);
  return {{dt, {x.shape[0], k, ho, wo}}};
}

void conv_transpose2d_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const DType ct = out.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor x = defs::contiguous_as(k.in(0), ct), w = defs::contiguous_as(k.in(1), ct);
  Tensor bias = k.inputs.size() > 2 && k.in(2).defined() ? defs::contiguous_as(k.in(2), ct) : Tensor();
  Tensor y = out.dtype() == ct && out.is_contiguous() ? out : empty(out.shape(), TensorOptions(ct, out.device()));
  auto pad = defs::padding_attr("conv_transpose2d", k.attrs);
  const auto& stride = k.attrs.get_ints("stride");
  const auto& dil = k.attrs.get_ints("dilation");
  kernels::cpu::ConvTranspose2dParams p;
  p.n = x.shape()[0], p.c = x.shape()[1], p.h = x.shape()[2], p.w = x.shape()[3];
  p.k = out.shape()[1], p.r = w.shape()[2], p.s = w.shape()[3];
  p.ho = out.shape()[2], p.wo = out.shape()[3];
  p.stride_h = stride[0], p.stride_w = stride[1], p.pad_top = pad[0], p.pad_left = pad[1];
  p.dil_h = dil[0], p.dil_w = dil[1], p.groups = k.attrs.get_int("groups");
  if (y.numel() > 0) {
    if (ct == DType::f64)
      kernels::cpu::conv_transpose2d_nchw_f64(p, x.data<double>(), w.data<double>(),
                                              bias.defined() ? bias.data<double>() : nullptr, y.data<double>());
    else
      kernels::cpu::conv_transpose2d_nchw_f32(p, x.data<float>(), w.data<float>(),
                                              bias.defined() ? bias.data<float>() : nullptr, y.data<float>());
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

// Note [Transposed convolution gradients]: conv_transpose2d is the adjoint of conv2d in x, so
//   dx = conv2d(g, w) with the same stride, padding, dilation and groups (cropped to x's size
//        when output_padding made the output larger than conv2d's inverse size);
//   dw = conv2d's weight gradient with g (padded back to the full output) in the role of the
//        input and x in the role of the output gradient: images [Kg, G*N, Hp, Wp], "weights"
//        [G*Cg, N, H, W], stride = dilation and dilation = stride, cropped to [R, S];
//   db = the sum of g over N, H, W.
// All are kiln ops, so the rule differentiates again and traces.
std::vector<Tensor> conv_transpose2d_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& g = gs[0];
  const auto& st = c.attrs.get_ints("stride");
  const auto pd = defs::padding_attr("conv_transpose2d", c.attrs);
  const auto& dl = c.attrs.get_ints("dilation");
  const int64_t groups = c.attrs.get_int("groups");
  const Shape& xs = c.in_shape(0);
  const Shape& ws = c.in_shape(1);
  const int64_t n = xs[0], ch = xs[1], h = xs[2], w = xs[3];
  const int64_t cg = ch / groups, kg = ws[1], kr = ws[2], ks = ws[3];
  std::vector<Tensor> r(3);
  if (c.needs(0)) {
    Conv2dOptions o;
    o.stride = st;
    o.padding = pd;
    o.dilation = dl;
    o.groups = groups;
    Tensor dx = conv2d(g, c.inputs[1], {}, o);
    if (dx.shape()[2] != h || dx.shape()[3] != w) dx = slice(dx, {0, 0}, {h, w}, {2, 3});
    r[0] = dx;
  }
  if (c.needs(1)) {
    Tensor gp = pad(g, {0, 0, pd[0], pd[1], 0, 0, pd[2], pd[3]});
    const int64_t hp = gp.shape()[2], wp = gp.shape()[3];
    Tensor g5 = reshape(permute(reshape(gp, {n, groups, kg, hp, wp}), {2, 1, 0, 3, 4}), {kg, groups * n, hp, wp});
    Tensor x5 = reshape(permute(reshape(c.inputs[0], {n, groups, cg, h, w}), {1, 2, 0, 3, 4}), {groups * cg, n, h, w});
    Conv2dOptions o;
    o.stride = dl;
    o.padding = {0, 0, 0, 0};
    o.dilation = st;
    o.groups = groups;
    Tensor dw = conv2d(g5, x5, {}, o);  // [kg, C, R', S'], R' >= R
    dw = slice(dw, {0, 0}, {kr, ks}, {2, 3});
    r[1] = permute(dw, {1, 0, 2, 3});
  }
  if (c.needs(2)) r[2] = sum(g, {0, 2, 3});
  return r;
}

}  // namespace

void register_conv_transpose_ops(OpRegistry& r) {
  defs::rules_pending(r.add("conv_transpose2d(Tensor x, Tensor w, Tensor? bias, int[] stride=[1,1], "
                            "int[] padding=[0,0,0,0], int[] output_padding=[0,0], int[] dilation=[1,1], "
                            "int groups=1) -> Tensor"),
                      "ConvTranspose", 11)
      .infer(infer_conv_transpose2d)
      .cast_inputs(InputCast::common)
      .kernel(DeviceType::cpu, DTypeSet::floating(), conv_transpose2d_kernel, "col2im")
      .vjp(VjpRule{conv_transpose2d_vjp, {0, 1}, {}})
      .doc("2-D transposed convolution, NCHW; w is [C, K / groups, R, S]; padding [top, left, bottom, right] "
           "crops the full output (Note [Transposed convolution shape]); 16-bit floats compute in f32.");
}

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const ConvTranspose2dOptions& opt,
                        SourceLoc loc) {
  return dispatch1(op("conv_transpose2d"), {x, w, bias},
                   {{"stride", opt.stride},
                    {"padding", opt.padding},
                    {"output_padding", opt.output_padding},
                    {"dilation", opt.dilation},
                    {"groups", opt.groups}},
                   loc);
}

}  // namespace kiln
