// N-d pooling with ONNX semantics over [N, C, D1, ..., Dk] (k = 1, 2, 3): max_pool (MaxPool 12, with
// its Indices output), avg_pool (AveragePool 19, dilations included), lp_pool (LpPool 18), and
// avg_pool's gradient. Explicit pads [begin..., end...] (the importer resolves auto_pad). The 2-D
// ops of pool.cc stay as they are (nn and autograd use them).
#include "kernels/cpu/loops.h"
#include "kernels/cpu/pool_nd.h"
#include "kiln/ops/binary.h"
#include "kiln/ops/index.h"
#include "kiln/ops/resample.h"
#include "kiln/ops/shape.h"
#include "ops/defs/common.h"
#include "ops/defs/conv/conv_common.h"

namespace kiln {

namespace {

using kernels::cpu::PoolNdParams;

// An int[] attribute with one value per spatial dim (empty: `fill`), each >= `min`.
std::vector<int64_t> per_axis(const std::string& op, const Attrs& a, const std::string& name, size_t k, int64_t fill,
                              int64_t min, const Shape& x) {
  std::vector<int64_t> v = a.get_ints(name);
  if (v.empty()) v.assign(k, fill);
  KILN_CHECK(v.size() == k, op, ": ", name, " must have ", k, " values (one per spatial dim of x with shape ",
             shape_str(x), "), got ", attr_value_str(v));
  for (int64_t e : v) KILN_CHECK(e >= min, op, ": ", name, " values must be >= ", min, ", got ", attr_value_str(v));
  return v;
}

// The geometry of a call, checked; out extents follow Note [Pool output size] (conv.cc).
PoolNdParams pool_params(const std::string& op, const Shape& x, const Attrs& a) {
  KILN_CHECK(x.size() >= 3 && x.size() <= 5, op, ": x must have rank 3, 4 or 5 [N, C, D1 (, D2 (, D3))], got shape ",
             shape_str(x));
  const size_t k = x.size() - 2;
  PoolNdParams p;
  p.planes = x[0] * x[1];
  p.in.assign(x.begin() + 2, x.end());
  p.kernel = per_axis(op, a, "kernel", k, 1, 1, x);
  KILN_CHECK(!a.get_ints("kernel").empty(), op, ": kernel must be given (one size per spatial dim)");
  p.stride = per_axis(op, a, "stride", k, 1, 1, x);
  p.dilation = per_axis(op, a, "dilation", k, 1, 1, x);
  std::vector<int64_t> pads = a.get_ints("pads");
  if (pads.empty()) pads.assign(2 * k, 0);
  KILN_CHECK(pads.size() == 2 * k, op, ": pads must be [begin..., end...] with ", 2 * k, " values for x of shape ",
             shape_str(x), ", got ", attr_value_str(pads));
  for (int64_t e : pads) KILN_CHECK(e >= 0, op, ": pads must be >= 0, got ", attr_value_str(pads));
  p.pad_begin.assign(pads.begin(), pads.begin() + static_cast<int64_t>(k));
  p.pad_end.assign(pads.begin() + static_cast<int64_t>(k), pads.end());
  const bool ceil = a.get_bool("ceil_mode");
  for (size_t d = 0; d < k; ++d) {
    const int64_t span = p.dilation[d] * (p.kernel[d] - 1) + 1, padded = x[d + 2] + p.pad_begin[d] + p.pad_end[d];
    KILN_CHECK(std::max(p.pad_begin[d], p.pad_end[d]) < span, op, ": pads ", attr_value_str(pads),
               " must be smaller than the kernel extent ", span, " along spatial dim ", d, " (x has shape ",
               shape_str(x), ")");
    KILN_CHECK(span <= padded, op, ": the kernel extent ", span, " along spatial dim ", d,
               " is larger than the padded input (", x[d + 2], " + pads ", p.pad_begin[d] + p.pad_end[d], "); x has shape ",
               shape_str(x));
    int64_t out = (padded - span + (ceil ? p.stride[d] - 1 : 0)) / p.stride[d] + 1;
    if (ceil && (out - 1) * p.stride[d] >= x[d + 2] + p.pad_begin[d]) --out;
    p.out.push_back(out);
  }
  if (a.has("count_include_pad")) p.count_include_pad = a.get_bool("count_include_pad");
  if (a.has("storage_order"))
    KILN_CHECK(a.get_int("storage_order") == 0 || a.get_int("storage_order") == 1, op,
               ": storage_order must be 0 (row-major) or 1 (column-major), got ", a.get_int("storage_order"));
  if (a.has("p")) {
    KILN_CHECK(a.get_int("p") >= 1, op, ": p must be >= 1, got ", a.get_int("p"));
    p.p = static_cast<double>(a.get_int("p"));
  }
  return p;
}

Shape out_shape(const Shape& x, const PoolNdParams& p) {
  Shape s{x[0], x[1]};
  s.insert(s.end(), p.out.begin(), p.out.end());
  return s;
}

std::vector<TensorMeta> infer_max_pool(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  if (!is_floating(x.dtype) && !is_integral(x.dtype)) c.fail("x must be numeric, got " + meta_str(x));
  Shape s = out_shape(x.shape, pool_params(c.op.name(), x.shape, c.attrs));
  return {{x.dtype, s}, {DType::i64, s}};
}

std::vector<TensorMeta> infer_float_pool(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  if (!is_floating(x.dtype)) c.fail("x must be floating (f32, f64, f16, bf16), got " + meta_str(x));
  return {{x.dtype, out_shape(x.shape, pool_params(c.op.name(), x.shape, c.attrs))}};
}

// Runs `body(xc, yc)` on contiguous copies in the compute dtype (f32 / f64) and writes out(0).
template <class Body>
void float_pool_kernel(const KernelCall& k, Body&& body) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  const DType compute = k.in(0).dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor x = defs::contiguous_as(k.in(0), compute);
  Tensor y = out.is_contiguous() && out.dtype() == compute ? out : empty(out.shape(), TensorOptions(compute));
  body(pool_params(k.op.name(), x.shape(), k.attrs), x, y);
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

void max_pool_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const Tensor& ind = k.out(1);
  if (out.numel() == 0) return;
  Tensor x = defs::contiguous_as(k.in(0), k.in(0).dtype());
  Tensor y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype()));
  Tensor i = ind.is_contiguous() ? ind : empty(ind.shape(), TensorOptions(DType::i64));
  const PoolNdParams p = pool_params(k.op.name(), x.shape(), k.attrs);
  kernels::cpu::max_pool_nd(p, x, y, i);
  if (k.attrs.get_int("storage_order") == 1) {
    // Column-major spatial offsets (the plane offset stays in front), as ONNX's storage_order 1.
    int64_t* ip = i.data<int64_t>();
    int64_t plane = 1;
    for (int64_t v : p.in) plane *= v;
    for (int64_t e = 0; e < i.numel(); ++e) {
      if (ip[e] < 0) continue;
      int64_t rem = ip[e] % plane, col = 0, scale = plane;
      for (size_t d = 0; d < p.in.size(); ++d) {  // peel row-major digits from the front
        scale /= p.in[d];
        const int64_t digit = rem / scale;
        rem %= scale;
        int64_t col_scale = 1;
        for (size_t e2 = 0; e2 < d; ++e2) col_scale *= p.in[e2];
        col += digit * col_scale;
      }
      ip[e] = ip[e] - ip[e] % plane + col;
    }
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
  if (!i.is_same(ind)) kernels::cpu::copy_into(ind, i);
}

// dx = the window gradients scattered to the selected elements (Note [Max pool gradient] in
// conv/pool.cc picks the same element); built from kiln ops so it has derivatives of its own.
std::vector<Tensor> max_pool_vjp(const VjpCtx& c, std::span<const Tensor> g) {
  const Shape& xs = c.in_shape(0);
  int64_t n = 1;
  for (int64_t d : xs) n *= d;
  const Tensor& gv = g[0];
  Tensor flat_idx = reshape(c.outputs[1], {-1});
  if (c.attrs.get_int("storage_order") == 1) {
    // Back to row-major spatial offsets: peel the column-major digits, recompose row-major.
    int64_t plane = 1;
    for (size_t d = 2; d < xs.size(); ++d) plane *= xs[d];
    auto scalar = [&](int64_t v) { return full({}, Scalar(v), TensorOptions(DType::i64)); };
    Tensor rest = mod(flat_idx, scalar(plane));
    Tensor row = flat_idx - rest;
    std::vector<Tensor> digits;
    for (size_t d = 2; d < xs.size(); ++d) {
      digits.push_back(mod(rest, scalar(xs[d])));
      rest = div(rest, scalar(xs[d]));
    }
    Tensor acc = scalar(0);
    for (size_t d = 2; d < xs.size(); ++d) acc = acc * scalar(xs[d]) + digits[d - 2];
    flat_idx = row + acc;
  }
  Tensor dx = scatter_add(zeros({n}, TensorOptions(gv.dtype())), 0, flat_idx, reshape(gv, {-1}));
  return {reshape(dx, xs)};
}

Attrs pool_attrs(const PoolNdOptions& o) {
  return {{"kernel", o.kernel}, {"stride", o.stride}, {"pads", o.pads}, {"dilation", o.dilation}, {"ceil_mode", o.ceil_mode}};
}

const char* kWindowAttrs = "int[] kernel, int[] stride=[], int[] pads=[], int[] dilation=[], bool ceil_mode=false";

}  // namespace

void register_pool_nd_ops(OpRegistry& r) {
  defs::rules_pending(r.add(std::string("max_pool(Tensor x, ") + kWindowAttrs +
                            ", int storage_order=0) -> (Tensor values, Tensor indices)"),
                      "MaxPool", 12)
      .infer(infer_max_pool)
      .kernel(DeviceType::cpu, DTypeSet::numeric(), max_pool_kernel)
      .vjp(VjpRule{max_pool_vjp, {}, {1}})
      .doc("N-d max pooling (ONNX MaxPool 12): values and the flat index into x (N and C included, spatial "
           "dims row-major, or column-major with storage_order 1) of each window's first maximum; NaN "
           "propagates. stride/dilation [] = 1, pads [] = 0.");
  defs::rules_pending(r.add(std::string("avg_pool(Tensor x, ") + kWindowAttrs +
                            ", bool count_include_pad=false) -> Tensor"),
                      "AveragePool", 19)
      .infer(infer_float_pool)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        float_pool_kernel(k, [](const PoolNdParams& p, const Tensor& x, const Tensor& y) { kernels::cpu::avg_pool_nd(p, x, y); });
      })
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     return std::vector<Tensor>{dispatch1(op("avg_pool_backward"), {g[0]}, [&] {
                       Attrs a = c.attrs;
                       a.set("input_shape", std::vector<int64_t>(c.in_shape(0).begin(), c.in_shape(0).end()));
                       return a;
                     }())};
                   },
                   {}, {}})
      .doc("N-d average pooling (ONNX AveragePool 19, dilations included); the divisor counts the taps inside "
           "x, or (count_include_pad) inside the padded x. 16-bit floats compute in f32.");
  defs::rules_pending(r.add(std::string("avg_pool_backward(Tensor grad, int[] input_shape, ") + kWindowAttrs +
                            ", bool count_include_pad=false) -> Tensor"))
      .infer([](const InferCtx& c) {
        const auto& in = c.attrs.get_ints("input_shape");
        Shape xs(in.begin(), in.end());
        const TensorMeta& g = c.in(0);
        if (!is_floating(g.dtype)) c.fail("grad must be floating, got " + meta_str(g));
        Shape want = out_shape(xs, pool_params(c.op.name(), xs, c.attrs));
        if (g.shape != want) c.fail("grad has shape " + shape_str(g.shape) + ", the pooling produced " + shape_str(want));
        return std::vector<TensorMeta>{{g.dtype, xs}};
      })
      .kernel(DeviceType::cpu, DTypeSet::floating(),
              [](const KernelCall& k) {
                const Tensor& out = k.out(0);
                if (out.numel() == 0) return;
                auto p = pool_params(k.op.name(), out.shape(), k.attrs);
                kernels::cpu::copy_into(out, kernels::cpu::avg_pool_nd_adjoint(p, defs::contiguous_as(k.in(0), DType::f64)));
              })
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Linear in grad: its adjoint is avg_pool itself.
                     Attrs a;
                     for (const auto& [name, v] : c.attrs.values())
                       if (name != "input_shape") a.set(name, v);
                     return std::vector<Tensor>{dispatch1(op("avg_pool"), {g[0]}, a)};
                   },
                   {}, {}})
      .no_onnx("training-only op")
      .doc("Gradient of avg_pool w.r.t. x (computed in f64).");
  defs::rules_pending(r.add(std::string("lp_pool(Tensor x, ") + kWindowAttrs + ", int p=2) -> Tensor"), "LpPool", 18)
      .infer(infer_float_pool)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        float_pool_kernel(k, [](const PoolNdParams& p, const Tensor& x, const Tensor& y) { kernels::cpu::lp_pool_nd(p, x, y); });
      })
      .no_vjp("the gradient of Lp pooling is not implemented yet (it is undefined where a window is all zeros)")
      .doc("N-d Lp pooling (ONNX LpPool 18): (sum of |x|^p over the window's taps inside x)^(1/p); padding "
           "adds nothing. 16-bit floats compute in f32.");
}

std::pair<Tensor, Tensor> max_pool(const Tensor& x, const PoolNdOptions& o, SourceLoc loc) {
  Attrs a = pool_attrs(o);
  a.set("storage_order", o.storage_order);
  auto outs = dispatch(op("max_pool"), {x}, a, loc);
  return {outs[0], outs[1]};
}
Tensor avg_pool(const Tensor& x, const PoolNdOptions& o, SourceLoc loc) {
  Attrs a = pool_attrs(o);
  a.set("count_include_pad", o.count_include_pad);
  return dispatch1(op("avg_pool"), {x}, a, loc);
}
Tensor lp_pool(const Tensor& x, const PoolNdOptions& o, int64_t p, SourceLoc loc) {
  Attrs a = pool_attrs(o);
  a.set("p", p);
  return dispatch1(op("lp_pool"), {x}, a, loc);
}

}  // namespace kiln
