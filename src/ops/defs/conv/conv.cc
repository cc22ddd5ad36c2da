// conv2d (NCHW, ONNX Conv 11) through im2col + GEMM, and the conv family's registration and
// shared attribute rules. Pooling and LRN are in pool.cc.
#include <limits>

#include "kernels/cpu/conv.h"

#include "kernels/cpu/loops.h"
#include "kiln/ops/conv.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/conv/conv_common.h"
#include "ops/defs/register_all.h"

namespace kiln {

void register_pool_ops(OpRegistry& r);  // pool.cc
void register_conv_transpose_ops(OpRegistry& r);  // conv_transpose.cc

namespace defs {

std::vector<int64_t> pair_attr(const InferCtx& c, const std::string& name, int64_t min) {
  const auto& v = c.attrs.get_ints(name);
  if (v.size() != 2) c.fail(name + " must have 2 values [h, w], got " + attr_value_str(v));
  for (int64_t x : v)
    if (x < min) c.fail(name + " values must be >= " + std::to_string(min) + ", got " + attr_value_str(v));
  return v;
}

std::vector<int64_t> padding_attr(const std::string& op, const Attrs& attrs) {
  const auto& v = attrs.get_ints("padding");
  KILN_CHECK(v.size() == 4 || v.size() == 2, op, ": padding must be [top, left, bottom, right] or [h, w], got ",
             attr_value_str(v));
  for (int64_t x : v) KILN_CHECK(x >= 0, op, ": padding values must be >= 0, got ", attr_value_str(v));
  if (v.size() == 2) return {v[0], v[1], v[0], v[1]};
  return v;
}

void check_padding(const InferCtx& c) { padding_attr(c.op.name(), c.attrs); }

// Note [Pool output size]
// out = floor((in + pads - dil * (k - 1) - 1) / stride) + 1, or with ceil_mode the ceiling; in
// ceil mode a last window that would start inside the end padding is dropped (PyTorch's rule, which
// ONNX's reference follows), so every window starts inside the input or the begin padding.
int64_t window_out_size(const InferCtx& c, const char* dim, int64_t in, int64_t k, int64_t stride, int64_t pad_begin,
                        int64_t pad_end, int64_t dil, bool ceil_mode) {
  const int64_t span = dil * (k - 1) + 1, padded = in + pad_begin + pad_end;
  if (span > padded)
    c.fail("the kernel (" + std::string(dim) + " extent " + std::to_string(span) + " with dilation " +
           std::to_string(dil) + ") is larger than the padded input (" + std::string(dim) + " = " +
           std::to_string(in) + " + padding " + std::to_string(pad_begin + pad_end) + " = " + std::to_string(padded) +
           "); x has shape " + shape_str(c.in(0).shape));
  int64_t out = (padded - span + (ceil_mode ? stride - 1 : 0)) / stride + 1;
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

kernels::cpu::Conv2dParams filter_params(const Shape& w, int64_t groups) {
  kernels::cpu::Conv2dParams p;
  p.groups = groups;
  p.k = w[0], p.c = w[1] * groups, p.r = w[2], p.s = w[3];
  return p;
}

kernels::cpu::Conv2dParams conv2d_params(const std::string& op, const Shape& x, const Shape& w, const Shape& y,
                                         const Attrs& attrs) {
  kernels::cpu::Conv2dParams p = filter_params(w, attrs.get_int("groups"));
  const auto pad = padding_attr(op, attrs);
  const auto& stride = attrs.get_ints("stride");
  const auto& dil = attrs.get_ints("dilation");
  p.n = x[0], p.h = x[2], p.w = x[3];
  p.ho = y[2], p.wo = y[3];
  p.stride_h = stride[0], p.stride_w = stride[1], p.pad_top = pad[0], p.pad_left = pad[1];
  p.dil_h = dil[0], p.dil_w = dil[1];
  return p;
}

Tensor contiguous_as(const Tensor& t, DType to) {
  if (t.dtype() == to && t.is_contiguous()) return t;
  Tensor out = empty(t.shape(), TensorOptions(to, t.device()));
  kernels::cpu::copy_into(out, t);
  return out;
}

}  // namespace defs

namespace {

std::vector<TensorMeta> infer_conv2d(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  const TensorMeta& w = c.in(1);
  if (x.shape.size() != 4) c.fail("x must be 4-D [N, C, H, W], got shape " + shape_str(x.shape));
  if (w.shape.size() != 4) c.fail("w must be 4-D [K, C / groups, R, S], got shape " + shape_str(w.shape));
  auto stride = defs::pair_attr(c, "stride", 1);
  auto dil = defs::pair_attr(c, "dilation", 1);
  auto pad = defs::padding_attr("conv2d", c.attrs);
  const int64_t groups = c.attrs.get_int("groups");
  if (groups < 1) c.fail("groups must be >= 1, got " + std::to_string(groups));
  const int64_t ch = x.shape[1], k = w.shape[0];
  if (ch % groups != 0)
    c.fail("groups = " + std::to_string(groups) + " does not divide the " + std::to_string(ch) +
           " input channels of x (shape " + shape_str(x.shape) + ")");
  if (k % groups != 0)
    c.fail("groups = " + std::to_string(groups) + " does not divide the " + std::to_string(k) +
           " output channels of w (shape " + shape_str(w.shape) + ")");
  if (w.shape[1] * groups != ch)
    c.fail("channel mismatch: x has shape " + shape_str(x.shape) + " (C = " + std::to_string(ch) +
           ") but w has shape " + shape_str(w.shape) + ", which expects C = " + std::to_string(w.shape[1]) +
           " * groups (" + std::to_string(groups) + ") = " + std::to_string(w.shape[1] * groups));
  DType dt = promote_types(x.dtype, w.dtype);
  if (c.has(2)) {
    const TensorMeta& b = c.in(2);
    if (b.shape != Shape{k})
      c.fail("bias must have shape [" + std::to_string(k) + "] (one per output channel of w, shape " +
             shape_str(w.shape) + "), got " + shape_str(b.shape));
    dt = promote_types(dt, b.dtype);
  }
  const int64_t ho = defs::window_out_size(c, "height", x.shape[2], w.shape[2], stride[0], pad[0], pad[2], dil[0], false);
  const int64_t wo = defs::window_out_size(c, "width", x.shape[3], w.shape[3], stride[1], pad[1], pad[3], dil[1], false);
  return {{dt, {x.shape[0], k, ho, wo}}};
}

void conv2d_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const DType ct = out.dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor x = defs::contiguous_as(k.in(0), ct), w = defs::contiguous_as(k.in(1), ct);
  Tensor bias = k.inputs.size() > 2 && k.in(2).defined() ? defs::contiguous_as(k.in(2), ct) : Tensor();
  Tensor y = out.dtype() == ct && out.is_contiguous() ? out : empty(out.shape(), TensorOptions(ct, out.device()));
  const kernels::cpu::Conv2dParams p = defs::conv2d_params("conv2d", x.shape(), w.shape(), out.shape(), k.attrs);
  if (y.numel() > 0) {
    if (ct == DType::f64)
      kernels::cpu::conv2d_nchw_f64(p, x.data<double>(), w.data<double>(), bias.defined() ? bias.data<double>() : nullptr,
                                    y.data<double>());
    else
      kernels::cpu::conv2d_nchw_f32(p, x.data<float>(), w.data<float>(), bias.defined() ? bias.data<float>() : nullptr,
                                    y.data<float>());
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

// ---- derivative rule -------------------------------------------------------------------------------
// Note [Conv2d gradients as convolutions]
// dx is a transposed convolution: g with stride-1 zeros inserted between its elements, padded so
// the result has x's size, convolved (stride 1, the forward dilation) with the weight flipped in
// space and with in/out channels swapped per group. dw is a convolution of the padded input with
// g, with batch and channel roles swapped: images [Cg, G*N, Hp, Wp] and "weights" [G*Kg, N, Ho,
// Wo], stride = forward dilation and dilation = forward stride, cropped to [R, S]. Both are kiln
// ops, so the rule differentiates again (gradgradcheck) and traces.

// Inserts step-1 zeros between consecutive elements along `axis`.
Tensor dilate_axis(const Tensor& t, int64_t axis, int64_t step) {
  const int64_t n = t.shape()[static_cast<size_t>(axis)];
  if (step == 1 || n == 0) return t;
  Tensor u = t.unsqueeze(axis + 1);
  std::vector<int64_t> pads(2 * static_cast<size_t>(u.dim()), 0);
  pads[static_cast<size_t>(u.dim() + axis + 1)] = step - 1;
  Shape merged = t.shape();
  merged[static_cast<size_t>(axis)] = n * step;
  return reshape(pad(u, pads), merged).slice(axis, 0, (n - 1) * step + 1);
}

std::vector<Tensor> conv2d_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& g = gs[0];
  const auto& st = c.attrs.get_ints("stride");
  const auto& pd = c.attrs.get_ints("padding");  // top, left, bottom, right
  const auto& dl = c.attrs.get_ints("dilation");
  const int64_t groups = c.attrs.get_int("groups");
  const Shape& xs = c.in_shape(0);
  const Shape& ws = c.in_shape(1);
  const int64_t n = xs[0], h = xs[2], w = xs[3];
  const int64_t k = ws[0], cg = ws[1], kr = ws[2], ks = ws[3], kg = k / groups;
  const int64_t ho = g.shape()[2], wo = g.shape()[3];
  std::vector<Tensor> r(3);
  if (c.needs(0)) {
    Tensor gd = dilate_axis(dilate_axis(g, 2, st[0]), 3, st[1]);
    const int64_t hd = (ho - 1) * st[0] + 1, wd = (wo - 1) * st[1] + 1;
    const int64_t pt = dl[0] * (kr - 1) - pd[0], pl = dl[1] * (ks - 1) - pd[1];
    const int64_t pb = h - hd + pd[0], pr = w - wd + pd[1];
    Tensor gp = pad(gd, {0, 0, pt, pl, 0, 0, pb, pr});
    Tensor wt = reshape(permute(reshape(c.inputs[1], {groups, kg, cg, kr, ks}), {0, 2, 1, 3, 4}), {groups * cg, kg, kr, ks});
    wt = slice(wt, {-1, -1}, {std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min()}, {2, 3}, {-1, -1});
    Conv2dOptions o;
    o.stride = {1, 1};
    o.padding = {0, 0, 0, 0};
    o.dilation = dl;
    o.groups = groups;
    r[0] = conv2d(gp, wt, {}, o);
  }
  if (c.needs(1)) {
    Tensor xp = pad(c.inputs[0], {0, 0, pd[0], pd[1], 0, 0, pd[2], pd[3]});
    const int64_t hp = xp.shape()[2], wp = xp.shape()[3];
    Tensor x5 = reshape(permute(reshape(xp, {n, groups, cg, hp, wp}), {2, 1, 0, 3, 4}), {cg, groups * n, hp, wp});
    Tensor g5 = reshape(permute(reshape(g, {n, groups, kg, ho, wo}), {1, 2, 0, 3, 4}), {groups * kg, n, ho, wo});
    Conv2dOptions o;
    o.stride = dl;
    o.padding = {0, 0, 0, 0};
    o.dilation = st;
    o.groups = groups;
    Tensor dw = conv2d(x5, g5, {}, o);  // [cg, k, R', S'], R' >= R
    dw = slice(dw, {0, 0}, {kr, ks}, {2, 3});
    r[1] = permute(dw, {1, 0, 2, 3});
  }
  if (c.needs(2)) r[2] = sum(g, {0, 2, 3});
  return r;
}

}  // namespace

void register_conv_ops(OpRegistry& r) {
  defs::rules_pending(r.add("conv2d(Tensor x, Tensor w, Tensor? bias, int[] stride=[1,1], int[] padding=[0,0,0,0], "
                            "int[] dilation=[1,1], int groups=1) -> Tensor"),
                      "Conv", 11)
      .infer(infer_conv2d)
      .cast_inputs(InputCast::common)
      .per_sample()
      .kernel(DeviceType::cpu, DTypeSet::floating(), conv2d_kernel, "im2col")
      .vjp(VjpRule{conv2d_vjp, {0, 1}, {}})
      .doc("2-D convolution, NCHW; padding [top, left, bottom, right]; groups (depthwise when groups = C). "
           "16-bit floats compute in f32.");
  register_pool_ops(r);
  register_conv_transpose_ops(r);
}

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dOptions& opt, SourceLoc loc) {
  return dispatch1(op("conv2d"), {x, w, bias},
                   {{"stride", opt.stride}, {"padding", opt.padding}, {"dilation", opt.dilation}, {"groups", opt.groups}},
                   loc);
}

}  // namespace kiln
