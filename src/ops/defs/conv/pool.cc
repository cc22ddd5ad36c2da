// Pooling (max_pool2d: ONNX MaxPool 12; avg_pool2d: ONNX AveragePool 19; global_avg_pool: ONNX
// GlobalAveragePool 1) and lrn (ONNX LRN 13), NCHW, floating dtypes (16-bit ones compute in f32).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/pool.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/shape.h"
#include "ops/defs/common.h"
#include "ops/defs/conv/conv_common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace defs {

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

}  // namespace defs

namespace {

using defs::pool_params;

void check_floating(const InferCtx& c) {
  if (!is_floating(c.in(0).dtype))
    c.fail("x must be floating (f32, f64, f16, bf16), got " + std::string(dtype_name(c.in(0).dtype)) + " of shape " +
           shape_str(c.in(0).shape));
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

// ---- pooling backward ----------------------------------------------------------------------------------
// max_pool2d_backward / avg_pool2d_backward(grad, x, <the pool's attributes>) -> dx. They compute
// in T (f32 for f32 grad and x, else f64) over contiguous copies, parallel over planes (each
// plane's dx is written by one thread).
// Note [Max pool gradient]: each window's gradient goes to the first maximal element in row-major
// window order (a NaN counts as the maximum), the element the forward picked.
template <class T>
void pool_backward(const KernelCall& k, bool max) {
  const Tensor& out = k.out(0);
  constexpr DType ct = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  Tensor g = defs::contiguous_as(k.in(0), ct);
  Tensor x = defs::contiguous_as(k.in(1), ct);
  auto p = pool_params(max ? "max_pool2d" : "avg_pool2d", x.shape(), k.attrs, max);
  p.ho = g.shape()[2], p.wo = g.shape()[3];
  // dx is written in place into out unless out overlaps an input (an engine may reuse buffers).
  auto overlaps = [&](const Tensor& t) {
    const char* a = static_cast<const char*>(out.data_ptr());
    const char* b = static_cast<const char*>(t.data_ptr());
    return a < b + t.numel() * static_cast<int64_t>(dtype_size(t.dtype())) &&
           b < a + out.numel() * static_cast<int64_t>(dtype_size(out.dtype()));
  };
  const bool direct = out.dtype() == ct && out.is_contiguous() && !overlaps(g) && !overlaps(x);
  Tensor dx = direct ? out : empty(x.shape(), TensorOptions(ct));
  const T* gp = static_cast<const T*>(g.data_ptr());
  const T* xp = static_cast<const T*>(x.data_ptr());
  T* dp = static_cast<T*>(dx.data_ptr());
  auto taps = [](int64_t start, int64_t n, int64_t dil, int64_t lo, int64_t hi) {
    int64_t c = 0;
    for (int64_t t = 0; t < n; ++t) c += start + t * dil >= lo && start + t * dil < hi;
    return c;
  };
  parallel_for(0, p.planes, 1, [&](int64_t a, int64_t b) {
    for (int64_t pl = a; pl < b; ++pl) {
      const T* xpl = xp + pl * p.h * p.w;
      T* dpl = dp + pl * p.h * p.w;
      std::fill(dpl, dpl + p.h * p.w, T(0));
      for (int64_t oh = 0; oh < p.ho; ++oh) {
        const int64_t h0 = oh * p.stride_h - p.pad_top;
        for (int64_t ow = 0; ow < p.wo; ++ow) {
          const int64_t w0 = ow * p.stride_w - p.pad_left;
          const T gv = gp[(pl * p.ho + oh) * p.wo + ow];
          if (max) {
            int64_t best = -1;
            T m = -std::numeric_limits<T>::infinity();
            for (int64_t r = 0; r < p.kh && !(best >= 0 && std::isnan(m)); ++r) {
              const int64_t ih = h0 + r * p.dil_h;
              if (ih < 0 || ih >= p.h) continue;
              for (int64_t q = 0; q < p.kw; ++q) {
                const int64_t iw = w0 + q * p.dil_w;
                if (iw < 0 || iw >= p.w) continue;
                const T v = xpl[ih * p.w + iw];
                if (best < 0 || v > m || std::isnan(v)) {
                  m = v;
                  best = ih * p.w + iw;
                }
                if (std::isnan(m)) break;
              }
            }
            if (best >= 0) dpl[best] += gv;
          } else {
            const int64_t rows = p.count_include_pad ? taps(h0, p.kh, 1, -p.pad_top, p.h + p.pad_bottom) : taps(h0, p.kh, 1, 0, p.h);
            const int64_t cols = p.count_include_pad ? taps(w0, p.kw, 1, -p.pad_left, p.w + p.pad_right) : taps(w0, p.kw, 1, 0, p.w);
            const T share = gv / static_cast<T>(rows * cols);
            for (int64_t r = 0; r < p.kh; ++r) {
              const int64_t ih = h0 + r;
              if (ih < 0 || ih >= p.h) continue;
              for (int64_t q = 0; q < p.kw; ++q) {
                const int64_t iw = w0 + q;
                if (iw >= 0 && iw < p.w) dpl[ih * p.w + iw] += share;
              }
            }
          }
        }
      }
    }
  });
  if (!dx.is_same(out)) kernels::cpu::copy_into(out, dx);
}

void pool_backward_kernel(const KernelCall& k, bool max) {
  if (k.in(0).dtype() == DType::f32 && k.in(1).dtype() == DType::f32) pool_backward<float>(k, max);
  else pool_backward<double>(k, max);
}

std::vector<TensorMeta> infer_pool_backward(const InferCtx& c) {
  if (c.in(1).shape.size() != 4 || c.in(0).shape.size() != 4)
    c.fail("grad and x must be 4-D, got " + meta_str(c.in(0)) + " and " + meta_str(c.in(1)));
  return {c.in(1)};
}

// The pool's own rule: dx = pool_backward(g, x); the backward op's rule (second order) is linear
// in grad: d grad = pool forward's linear map applied to the incoming gradient; for avg pooling
// that is avg_pool2d itself, for max pooling a gather of the selected elements (not provided).
VjpRule pool_rule(const char* backward_op) {
  return VjpRule{[backward_op](const VjpCtx& c, std::span<const Tensor> g) {
                   return std::vector<Tensor>{dispatch1(op(backward_op), {g[0], c.inputs[0]}, c.attrs)};
                 },
                 {0}, {}};
}

// LRN's channel window sum: out[c] = sum of t[c - before .. c + after] along dim 1 (zeros outside).
Tensor channel_window_sum(const Tensor& t, int64_t before, int64_t after) {
  const int64_t ch = t.shape()[1];
  std::vector<int64_t> pads(2 * static_cast<size_t>(t.dim()), 0);
  pads[1] = before;
  pads[static_cast<size_t>(t.dim()) + 1] = after;
  Tensor p = pad(t, pads);
  Tensor acc;
  for (int64_t s = 0; s <= before + after; ++s) {
    Tensor part = p.slice(1, s, s + ch);
    acc = acc.defined() ? acc + part : part;
  }
  return acc;
}

// y = x * d^-beta, d = bias + alpha/size * W(x^2) with W the channel window sum, so
// dx = g * d^-beta - (2 alpha beta / size) * x * Wᵀ(g * x * d^(-beta-1)); Wᵀ is the window with
// `before` and `after` swapped.
std::vector<Tensor> lrn_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& x = c.inputs[0];
  const Tensor& g = gs[0];
  const int64_t size = c.attrs.get_int("size");
  const double alpha = c.attrs.get_float("alpha"), beta = c.attrs.get_float("beta"), bias = c.attrs.get_float("bias");
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  Tensor d = channel_window_sum(x * x, before, after) * (alpha / static_cast<double>(size)) + bias;
  Tensor dpow = pow(d, defs::scalar_like(-beta, d));
  Tensor inner = channel_window_sum(g * x * dpow / d, after, before);
  return {g * dpow - x * inner * (2 * alpha * beta / static_cast<double>(size))};
}

}  // namespace

void register_pool_ops(OpRegistry& r) {
  defs::rules_pending(r.add("max_pool2d(Tensor x, int[] kernel, int[] stride=[], int[] padding=[0,0,0,0], "
                            "int[] dilation=[1,1], bool ceil_mode=false) -> Tensor"),
                      "MaxPool", 12)
      .infer([](const InferCtx& c) { return infer_pool2d(c, true); })
      .per_sample()
      .kernel(DeviceType::cpu, DTypeSet::floating(), pool_kernel(true))
      .vjp(pool_rule("max_pool2d_backward"))
      .doc("2-D max pooling, NCHW; stride [] = kernel; NaN propagates; ceil_mode drops a window starting in "
           "the end padding (Note [Pool output size]).");
  defs::rules_pending(r.add("avg_pool2d(Tensor x, int[] kernel, int[] stride=[], int[] padding=[0,0,0,0], "
                            "bool ceil_mode=false, bool count_include_pad=false) -> Tensor"),
                      "AveragePool", 19)
      .infer([](const InferCtx& c) { return infer_pool2d(c, false); })
      .per_sample()
      .kernel(DeviceType::cpu, DTypeSet::floating(), pool_kernel(false))
      .vjp(pool_rule("avg_pool2d_backward"))
      .doc("2-D average pooling, NCHW; count_include_pad counts padding (not the overhang past it in "
           "ceil_mode) in the divisor, as PyTorch.");
  defs::rules_pending(r.add("max_pool2d_backward(Tensor grad, Tensor x, int[] kernel, int[] stride=[], "
                            "int[] padding=[0,0,0,0], int[] dilation=[1,1], bool ceil_mode=false) -> Tensor"))
      .infer(infer_pool_backward)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) { pool_backward_kernel(k, true); })
      .no_vjp("second derivative of max pooling is not implemented; detach() through it for higher order")
      .no_onnx("training-only op")
      .doc("Gradient of max_pool2d w.r.t. x (Note [Max pool gradient]).");
  defs::rules_pending(r.add("avg_pool2d_backward(Tensor grad, Tensor x, int[] kernel, int[] stride=[], "
                            "int[] padding=[0,0,0,0], bool ceil_mode=false, bool count_include_pad=false) -> Tensor"))
      .infer(infer_pool_backward)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) { pool_backward_kernel(k, false); })
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Linear in grad: its adjoint is average pooling itself.
                     std::vector<Tensor> res(2);
                     Attrs a = c.attrs;
                     if (c.needs(0)) res[0] = dispatch1(op("avg_pool2d"), {g[0]}, a);
                     if (c.needs(1)) res[1] = zeros_like(g[0]);
                     return res;
                   },
                   {}, {}})
      .no_onnx("training-only op")
      .doc("Gradient of avg_pool2d w.r.t. x.");
  defs::rules_pending(r.add("global_avg_pool(Tensor x) -> Tensor"), "GlobalAveragePool", 1)
      .infer(infer_global_avg_pool)
      .per_sample()
      .kernel(DeviceType::cpu, DTypeSet::floating(), global_avg_pool_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     const Shape& xs = c.in_shape(0);
                     double n = 1;
                     for (size_t d = 2; d < xs.size(); ++d) n *= static_cast<double>(xs[d]);
                     return std::vector<Tensor>{expand(g[0], xs) / n};
                   },
                   {}, {}})
      .doc("mean over every dim after the first two, kept as size 1");
  defs::rules_pending(r.add("lrn(Tensor x, int size, float alpha=0.0001, float beta=0.75, float bias=1.0) -> Tensor"),
                      "LRN", 13)
      .infer(infer_lrn)
      .kernel(DeviceType::cpu, DTypeSet::floating(), lrn_kernel)
      .vjp(VjpRule{lrn_vjp, {0}, {}})
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
