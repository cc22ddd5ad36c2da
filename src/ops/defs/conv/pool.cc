// Pooling (max_pool2d: ONNX MaxPool 12; avg_pool2d: ONNX AveragePool 19; global_avg_pool: ONNX
// GlobalAveragePool 1) and lrn (ONNX LRN 13), NCHW, floating dtypes (16-bit ones compute in f32).
#include <cmath>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/pool.h"
#include "kiln/ops/conv.h"
#include "ops/defs/common.h"
#include "ops/defs/conv/conv_common.h"
#include "ops/defs/register_all.h"

namespace kiln {

namespace {

void check_floating(const InferCtx& c) {
  if (!is_floating(c.in(0).dtype))
    c.fail("x must be floating (f32, f64, f16, bf16), got " + std::string(dtype_name(c.in(0).dtype)) + " of shape " +
           shape_str(c.in(0).shape));
}

// The pooling geometry of a call; `max` pools have dilation.
kernels::cpu::Pool2dParams pool_params(const std::string& op, const Shape& x, const Attrs& attrs, bool max) {
  kernels::cpu::Pool2dParams p;
  const auto& kernel = attrs.get_ints("kernel");
  const auto& stride = attrs.get_ints("stride").empty() ? kernel : attrs.get_ints("stride");
  auto pad = defs::padding_attr(op, attrs);
  p.planes = x[0] * x[1], p.h = x[2], p.w = x[3];
  p.kh = kernel[0], p.kw = kernel[1], p.stride_h = stride[0], p.stride_w = stride[1];
  p.pad_top = pad[0], p.pad_left = pad[1], p.pad_bottom = pad[2], p.pad_right = pad[3];
  if (max) {
    p.dil_h = attrs.get_ints("dilation")[0];
    p.dil_w = attrs.get_ints("dilation")[1];
  } else {
    p.count_include_pad = attrs.get_bool("count_include_pad");
  }
  return p;
}

std::vector<TensorMeta> infer_pool2d(const InferCtx& c, bool max) {
  const TensorMeta& x = c.in(0);
  if (x.shape.size() != 4) c.fail("x must be 4-D [N, C, H, W], got shape " + shape_str(x.shape));
  check_floating(c);
  auto kernel = defs::pair_attr(c, "kernel", 1);
  if (!c.attrs.get_ints("stride").empty()) defs::pair_attr(c, "stride", 1);
  if (max) defs::pair_attr(c, "dilation", 1);
  defs::check_padding(c);
  auto p = pool_params(c.op.name(), x.shape, c.attrs, max);
  // A window must reach the input: padding no wider than the (dilated) kernel.
  const int64_t span_h = p.dil_h * (p.kh - 1) + 1, span_w = p.dil_w * (p.kw - 1) + 1;
  if (std::max(p.pad_top, p.pad_bottom) >= span_h || std::max(p.pad_left, p.pad_right) >= span_w)
    c.fail("padding " + attr_value_str(c.attrs.get_ints("padding")) + " must be smaller than the kernel extent [" +
           std::to_string(span_h) + ", " + std::to_string(span_w) + "] (x has shape " + shape_str(x.shape) + ")");
  const bool ceil = c.attrs.get_bool("ceil_mode");
  const int64_t ho = defs::window_out_size(c, "height", p.h, p.kh, p.stride_h, p.pad_top, p.pad_bottom, p.dil_h, ceil);
  const int64_t wo = defs::window_out_size(c, "width", p.w, p.kw, p.stride_w, p.pad_left, p.pad_right, p.dil_w, ceil);
  return {{x.dtype, {x.shape[0], x.shape[1], ho, wo}}};
}

KernelFn pool_kernel(bool max) {
  return [max](const KernelCall& k) {
    const Tensor& out = k.out(0);
    Tensor x = defs::contiguous_as(k.in(0), k.in(0).dtype());
    Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype(), out.device()));
    auto p = pool_params(k.op.name(), x.shape(), k.attrs, max);
    p.ho = out.shape()[2], p.wo = out.shape()[3];
    if (y.numel() > 0) {
      if (max) kernels::cpu::max_pool2d(p, x, y);
      else kernels::cpu::avg_pool2d(p, x, y);
    }
    if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
  };
}

std::vector<TensorMeta> infer_global_avg_pool(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  if (x.shape.size() < 3) c.fail("x must have rank >= 3 [N, C, D1, ...], got shape " + shape_str(x.shape));
  check_floating(c);
  int64_t spatial = 1;
  for (size_t d = 2; d < x.shape.size(); ++d) spatial *= x.shape[d];
  if (spatial == 0) c.fail("x has an empty spatial extent (shape " + shape_str(x.shape) + "); the mean is undefined");
  Shape out(x.shape.size(), 1);
  out[0] = x.shape[0], out[1] = x.shape[1];
  return {{x.dtype, out}};
}

void global_avg_pool_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  Tensor x = defs::contiguous_as(k.in(0), k.in(0).dtype());
  const int64_t rows = x.shape()[0] * x.shape()[1];
  if (rows == 0) return;
  Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype(), out.device()));
  kernels::cpu::row_mean(x, y, rows, x.numel() / rows);
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

std::vector<TensorMeta> infer_lrn(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  if (x.shape.size() < 3) c.fail("x must have rank >= 3 [N, C, D1, ...], got shape " + shape_str(x.shape));
  check_floating(c);
  if (c.attrs.get_int("size") < 1) c.fail("size must be >= 1, got " + std::to_string(c.attrs.get_int("size")));
  return {x};
}

void lrn_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  Tensor x = defs::contiguous_as(k.in(0), k.in(0).dtype());
  const int64_t n = x.shape()[0], ch = x.shape()[1];
  if (x.numel() == 0) return;
  Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype(), out.device()));
  kernels::cpu::lrn(x, y, n, ch, x.numel() / (n * ch), k.attrs.get_int("size"), k.attrs.get_float("alpha"),
                    k.attrs.get_float("beta"), k.attrs.get_float("bias"));
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

Attrs pool_attrs(const Pool2dOptions& o, bool max) {
  Attrs a{{"kernel", o.kernel}, {"stride", o.stride}, {"padding", o.padding}, {"ceil_mode", o.ceil_mode}};
  if (max) a.set("dilation", o.dilation);
  else a.set("count_include_pad", o.count_include_pad);
  return a;
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  defs::rules_pending(r.add("max_pool2d(Tensor x, int[] kernel, int[] stride=[], int[] padding=[0,0,0,0], "
                            "int[] dilation=[1,1], bool ceil_mode=false) -> Tensor"),
                      "MaxPool", 12)
      .infer([](const InferCtx& c) { return infer_pool2d(c, true); })
      .kernel(DeviceType::cpu, DTypeSet::floating(), pool_kernel(true))
      .doc("2-D max pooling, NCHW; stride [] = kernel; NaN propagates; ceil_mode drops a window starting in "
           "the end padding (Note [Pool output size]).");
  defs::rules_pending(r.add("avg_pool2d(Tensor x, int[] kernel, int[] stride=[], int[] padding=[0,0,0,0], "
                            "bool ceil_mode=false, bool count_include_pad=false) -> Tensor"),
                      "AveragePool", 19)
      .infer([](const InferCtx& c) { return infer_pool2d(c, false); })
      .kernel(DeviceType::cpu, DTypeSet::floating(), pool_kernel(false))
      .doc("2-D average pooling, NCHW; count_include_pad counts padding (not the overhang past it in "
           "ceil_mode) in the divisor, as PyTorch.");
  defs::rules_pending(r.add("global_avg_pool(Tensor x) -> Tensor"), "GlobalAveragePool", 1)
      .infer(infer_global_avg_pool)
      .kernel(DeviceType::cpu, DTypeSet::floating(), global_avg_pool_kernel)
      .doc("mean over every dim after the first two, kept as size 1");
  defs::rules_pending(r.add("lrn(Tensor x, int size, float alpha=0.0001, float beta=0.75, float bias=1.0) -> Tensor"),
                      "LRN", 13)
      .infer(infer_lrn)
      .kernel(DeviceType::cpu, DTypeSet::floating(), lrn_kernel)
      .doc("local response normalization across channels (ONNX LRN)");
}

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt, SourceLoc loc) {
  return dispatch1(op("max_pool2d"), {x}, pool_attrs(opt, true), loc);
}
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt, SourceLoc loc) {
  KILN_CHECK(opt.dilation == std::vector<int64_t>({1, 1}), "avg_pool2d: dilation is not supported (got ",
             attr_value_str(opt.dilation), "); it applies to max_pool2d only");
  return dispatch1(op("avg_pool2d"), {x}, pool_attrs(opt, false), loc);
}
Tensor global_avg_pool(const Tensor& x, SourceLoc loc) { return dispatch1(op("global_avg_pool"), {x}, {}, loc); }
Tensor lrn(const Tensor& x, int64_t size, double alpha, double beta, double bias, SourceLoc loc) {
  return dispatch1(op("lrn"), {x}, {{"size", size}, {"alpha", alpha}, {"beta", beta}, {"bias", bias}}, loc);
}

}  // namespace kiln
