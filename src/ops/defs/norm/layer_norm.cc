// Normalization layers: layer_norm and rms_norm (over the trailing dims from `axis`, ONNX
// LayerNormalization's and RMSNormalization's convention) and batch_norm in inference form (per
// channel, dim 1, with given running statistics). Statistics and the affine transform are computed
// in double, except layer_norm and rms_norm on contiguous f32 rows (vector row kernels, Note [Layer
// norm in f32 lanes] and Note [RMS norm in f32 lanes] in kernels/cpu/norm_f32.h).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/norm_f32.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ops/norm.h"
#include "ops/defs/common.h"
#include "ops/defs/norm/norm_common.h"
#include "ops/defs/reduce/row_loop.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::RowPlan;

// Checks an optional parameter input against the shape it must have.
void check_param(const InferCtx& c, size_t i, const Shape& want, const std::string& what) {
  if (!c.has(i)) return;
  defs::check_floating_input(c, i);
  const Shape& got = c.in(i).shape;
  if (got != want)
    c.fail("'" + c.arg_name(i) + "' has shape " + shape_str(got) + " but must have shape " + shape_str(want) + " (" +
           what + ")");
}

// ---- layer_norm -----------------------------------------------------------------------------------

int64_t layer_norm_axis(const char* op, const Shape& shape, int64_t axis) {
  return normalize_axis(axis, static_cast<int64_t>(shape.size()), op);
}

// layer_norm's and rms_norm's: y like x, the weight (and bias) of the normalized dims' shape.
std::vector<TensorMeta> infer_trailing_norm(const InferCtx& c) {
  defs::check_floating_input(c, 0);
  const TensorMeta& x = c.in(0);
  int64_t axis = layer_norm_axis(c.op.name().c_str(), x.shape, c.attrs.get_int("axis"));
  if (c.attrs.get_float("eps") < 0) c.fail("eps must be >= 0, got " + std::to_string(c.attrs.get_float("eps")));
  Shape normalized(x.shape.begin() + std::min<int64_t>(axis, static_cast<int64_t>(x.shape.size())), x.shape.end());
  std::string what = "the normalized dims " + std::to_string(axis) + ".. of input 'x' " + shape_str(x.shape);
  for (size_t i = 1; i < c.num_inputs(); ++i) check_param(c, i, normalized, what);
  return {x};
}

// The optional weight and bias (inputs 1 and 2) of an f32 layer_norm: whether each is f32 or absent,
// and their values contiguous (nullptr where absent), kept alive by w and b.
bool affine_is_f32(const KernelCall& k) {
  for (size_t i : {1, 2})
    if (k.inputs.size() > i && k.in(i).defined() && k.in(i).dtype() != DType::f32) return false;
  return true;
}
struct AffineF32 {
  Tensor w, b;
  const float* wp = nullptr;
  const float* bp = nullptr;
};
AffineF32 affine_f32(const KernelCall& k) {
  AffineF32 a;
  if (k.inputs.size() > 1 && k.in(1).defined()) {
    a.w = k.in(1).contiguous();
    a.wp = static_cast<const float*>(a.w.data_ptr());
  }
  if (k.inputs.size() > 2 && k.in(2).defined()) {
    a.b = k.in(2).contiguous();
    a.bp = static_cast<const float*>(a.b.data_ptr());
  }
  return a;
}

// f32 rows contiguous in x and out, with f32 (or no) weight and bias: the vector row kernels of
// kernels/cpu/norm_f32.h (Note [Layer norm in f32 lanes], Note [RMS norm in f32 lanes]), rows
// split over the pool, each task's handed to rows_kernel(kernels, x, y, rows, n, affine). False
// when the call does not qualify (the generic loop then runs).
template <class RowsKernel>
bool f32_rows(const KernelCall& k, int64_t axis, RowsKernel rows_kernel) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  if (x.dtype() != DType::f32 || out.dtype() != DType::f32 || !x.is_contiguous() || !out.is_contiguous()) return false;
  if (!affine_is_f32(k)) return false;
  int64_t inner = 1;
  for (int64_t d = axis; d < x.dim(); ++d) inner *= x.shape()[d];
  if (inner == 0 || x.numel() == 0) return false;
  const AffineF32 affine = affine_f32(k);
  const int64_t rows = x.numel() / inner;
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* yp = static_cast<float*>(out.data_ptr());
  const kernels::cpu::NormKernelsF32 kern = kernels::cpu::norm_kernels_f32(kernels::cpu::active_isa());
  // About 32K elements per task: a BERT-base LayerNorm (128 x 768) splits in three, not 128.
  const int64_t grain = std::max<int64_t>(1, 32768 / inner);
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    rows_kernel(kern, xp + r0 * inner, yp + r0 * inner, r1 - r0, inner, affine);
  });
  return true;
}

// The generic loop's rows: x and out over the normalized dims axis..end, any strides.
RowPlan<2> norm_rows(const Tensor& x, const Tensor& out, int64_t axis) {
  std::vector<int64_t> axes;
  for (int64_t d = axis; d < x.dim(); ++d) axes.push_back(d);
  std::array<std::vector<int64_t>, 2> st{defs::byte_strides(x), defs::byte_strides(out)};
  std::array<char*, 2> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(out.data_ptr())};
  return defs::make_row_plan<2>(x.shape(), st, base, axes);
}

// f32 rows stored across (Note [Layer norm across] in kernels/cpu/norm_f32.h): one normalized dim,
// the last, whose elements are not adjacent, over rows that are (the dims before it but the first
// collapse to one run of stride 1; the first, if not part of it, is a batch of such runs), into a
// contiguous output. False when the call does not qualify.
bool layer_norm_f32_columns(const KernelCall& k, int64_t axis, double eps) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  const int64_t dims = x.dim();
  if (x.dtype() != DType::f32 || out.dtype() != DType::f32 || !out.is_contiguous() || dims < 2 || axis != dims - 1)
    return false;
  if (!affine_is_f32(k)) return false;
  const Shape& shape = x.shape();
  const std::vector<int64_t>& stride = x.strides();
  const int64_t n = shape[static_cast<size_t>(dims - 1)], ldx = stride[static_cast<size_t>(dims - 1)];
  if (n <= 1 || ldx == 1 || x.numel() == 0) return false;
  // Dims [first, dims - 1) form a run of stride 1: `run` consecutive rows.
  int64_t first = dims - 1, run = 1;
  while (first > 0 && stride[static_cast<size_t>(first - 1)] == run) run *= shape[static_cast<size_t>(--first)];
  if (first > 1 || run < 16) return false;
  const int64_t batch = first == 1 ? shape[0] : 1, batch_stride = first == 1 ? stride[0] : 0;
  const AffineF32 affine = affine_f32(k);
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* yp = static_cast<float*>(out.data_ptr());
  const kernels::cpu::NormKernelsF32 kern = kernels::cpu::norm_kernels_f32(kernels::cpu::active_isa());
  // Tasks of 16 rows of one batch entry, about 32K elements each.
  const int64_t groups = (run + 15) / 16, grain = std::max<int64_t>(1, 32768 / (16 * n));
  parallel_for(0, batch * groups, grain, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1;) {
      const int64_t img = g / groups, r0 = g % groups * 16, g_end = std::min(g1, (img + 1) * groups);
      const int64_t r1 = std::min(run, (g_end - img * groups) * 16);
      kern.layer_norm_columns(xp + img * batch_stride + r0, ldx, yp + (img * run + r0) * n, n, r1 - r0, n, affine.wp,
                              affine.bp, eps);
      g = g_end;
    }
  });
  return true;
}

void layer_norm_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  const int64_t axis = layer_norm_axis("layer_norm", x.shape(), k.attrs.get_int("axis"));
  const double eps = k.attrs.get_float("eps");
  auto rows = [&](const kernels::cpu::NormKernelsF32& kern, const float* xp, float* yp, int64_t m, int64_t n,
                  const AffineF32& a) { kern.layer_norm_rows(xp, n, yp, n, m, n, a.wp, a.bp, eps); };
  if (f32_rows(k, axis, rows) || layer_norm_f32_columns(k, axis, eps)) return;
  RowPlan<2> plan = norm_rows(x, out, axis);
  // Trailing optional inputs may be absent altogether (a text-IR node `layer_norm(%x)`).
  const bool has_w = k.inputs.size() > 1 && k.in(1).defined(), has_b = k.inputs.size() > 2 && k.in(2).defined();
  const std::vector<double> w = has_w ? defs::values_f64(k.in(1)) : std::vector<double>{};
  const std::vector<double> b = has_b ? defs::values_f64(k.in(2)) : std::vector<double>{};
  visit_floating(x.dtype(), "layer_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    defs::for_each_row(plan, [&](int64_t, char** row) {
      double sum = 0;
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) sum += defs::load_f64<T>(q[0], s[0], i);
      });
      const double mean = sum / static_cast<double>(plan.inner);
      double ss = 0;
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          double d = defs::load_f64<T>(q[0], s[0], i) - mean;
          ss += d * d;
        }
      });
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(plan.inner) + eps);
      size_t j = 0;  // row-major position within the normalized dims
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i, ++j) {
          double v = (defs::load_f64<T>(q[0], s[0], i) - mean) * rstd;
          if (!w.empty()) v *= w[j];
          if (!b.empty()) v += b[j];
          *reinterpret_cast<T*>(q[1] + i * s[1]) = convert<T>(v);
        }
      });
    });
  });
}

// ---- rms_norm -------------------------------------------------------------------------------------
// y = x / sqrt(mean(x^2) + eps) * weight over dims axis..end: T5's and LLaMA's RMSNorm.

void rms_norm_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  const int64_t axis = layer_norm_axis("rms_norm", x.shape(), k.attrs.get_int("axis"));
  const double eps = k.attrs.get_float("eps");
  auto rows = [&](const kernels::cpu::NormKernelsF32& kern, const float* xp, float* yp, int64_t m, int64_t n,
                  const AffineF32& a) { kern.rms_norm_rows(xp, n, yp, n, m, n, a.wp, eps); };
  if (f32_rows(k, axis, rows)) return;
  RowPlan<2> plan = norm_rows(x, out, axis);
  const bool has_w = k.inputs.size() > 1 && k.in(1).defined();
  const std::vector<double> w = has_w ? defs::values_f64(k.in(1)) : std::vector<double>{};
  visit_floating(x.dtype(), "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    defs::for_each_row(plan, [&](int64_t, char** row) {
      double ss = 0;
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i) {
          const double v = defs::load_f64<T>(q[0], s[0], i);
          ss += v * v;
        }
      });
      const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(plan.inner) + eps);
      size_t j = 0;  // row-major position within the normalized dims
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i, ++j) {
          const double v = defs::load_f64<T>(q[0], s[0], i) * rstd;
          *reinterpret_cast<T*>(q[1] + i * s[1]) = convert<T>(w.empty() ? v : v * w[j]);
        }
      });
    });
  });
}

// ---- batch_norm ------------------------------------------------------------------------------------

std::vector<TensorMeta> infer_batch_norm(const InferCtx& c) {
  defs::check_floating_input(c, 0);
  const TensorMeta& x = c.in(0);
  if (x.shape.size() < 2)
    c.fail("input 'x' must have shape [N, C, ...] (at least 2 dims), got " + meta_str(x));
  if (c.attrs.get_float("eps") < 0) c.fail("eps must be >= 0, got " + std::to_string(c.attrs.get_float("eps")));
  const Shape want{x.shape[1]};
  std::string what = "[C] with C = dim 1 of input 'x' " + shape_str(x.shape);
  for (size_t i = 1; i < 5; ++i) check_param(c, i, want, what);
  return {x};
}

void batch_norm_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  const double eps = k.attrs.get_float("eps");
  const int64_t channels = x.shape()[1];
  // Per channel: out = (x - mean) * scale + bias, scale = weight / sqrt(var + eps).
  const std::vector<double> mean = defs::values_f64(k.in(1)), var = defs::values_f64(k.in(2));
  std::vector<double> scale(static_cast<size_t>(channels)), bias(static_cast<size_t>(channels), 0.0);
  const std::vector<double> w =
      k.inputs.size() > 3 && k.in(3).defined() ? defs::values_f64(k.in(3)) : std::vector<double>{};
  if (k.inputs.size() > 4 && k.in(4).defined()) bias = defs::values_f64(k.in(4));
  for (size_t c = 0; c < scale.size(); ++c) scale[c] = (w.empty() ? 1.0 : w[c]) / std::sqrt(var[c] + eps);
  std::vector<int64_t> axes;
  for (int64_t d = 2; d < x.dim(); ++d) axes.push_back(d);
  std::array<std::vector<int64_t>, 2> st{defs::byte_strides(x), defs::byte_strides(out)};
  std::array<char*, 2> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(out.data_ptr())};
  RowPlan<2> plan = defs::make_row_plan<2>(x.shape(), st, base, axes);
  visit_floating(x.dtype(), "batch_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    defs::for_each_row(plan, [&](int64_t r, char** row) {
      const size_t c = static_cast<size_t>(r % channels);  // rows are (n, c) in row-major order
      const double m = mean[c], sc = scale[c], bi = bias[c];
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          *reinterpret_cast<T*>(q[1] + i * s[1]) = convert<T>((defs::load_f64<T>(q[0], s[0], i) - m) * sc + bi);
      });
    });
  });
}

// ---- derivative rules ------------------------------------------------------------------------------
// Note [Norm backward recomputes statistics]: the rules recompute mean and variance from the saved
// input instead of saving them, so the forward kernels stay single-output (and traced graphs hold
// one definition of the statistics).
// The normalized dims (axis..end) of a trailing norm's input and the leading ones, for its rule.
struct NormDims {
  std::vector<int64_t> norm, lead;
  NormDims(const VjpCtx& c, const char* op) {
    const int64_t rank = c.inputs[0].dim();
    const int64_t axis = normalize_axis(c.attrs.get_int("axis"), rank, op);
    for (int64_t d = 0; d < rank; ++d) (d >= axis ? norm : lead).push_back(d);
  }
  // t summed over the leading dims, to a parameter's shape.
  Tensor lead_sum(const Tensor& t, const Shape& to) const {
    return defs::sum_to(lead.empty() ? t : kiln::sum(t, lead, false), to);
  }
};

std::vector<Tensor> layer_norm_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& g = gs[0];
  const NormDims dims(c, "layer_norm");
  Tensor mu = kiln::mean(x, dims.norm, true);
  Tensor xc = x - mu;
  Tensor rstd = rsqrt(kiln::mean(xc * xc, dims.norm, true) + c.attrs.get_float("eps"));
  Tensor xhat = xc * rstd;
  std::vector<Tensor> r(3);
  if (c.needs(0)) {
    Tensor dxhat = w.defined() ? g * w : g;
    r[0] = rstd * (dxhat - kiln::mean(dxhat, dims.norm, true) - xhat * kiln::mean(dxhat * xhat, dims.norm, true));
  }
  if (c.needs(1)) r[1] = dims.lead_sum(g * xhat, c.in_shape(1));
  if (c.needs(2)) r[2] = dims.lead_sum(g, c.in_shape(2));
  return r;
}

// y = x * r * w with r = (mean(x^2) + eps)^-1/2 over the normalized dims: dr/dx_j = -r^3 x_j / n, so
// dx = r * gw - x * r^3 * mean(gw * x) with gw = g * w, and dw = sum over the leading dims of g * x * r.
std::vector<Tensor> rms_norm_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& x = c.inputs[0];
  const Tensor& w = c.inputs[1];
  const Tensor& g = gs[0];
  const NormDims dims(c, "rms_norm");
  Tensor r = rsqrt(kiln::mean(x * x, dims.norm, true) + c.attrs.get_float("eps"));
  std::vector<Tensor> out(2);
  if (c.needs(0)) {
    Tensor gw = w.defined() ? g * w : g;
    out[0] = r * gw - x * (r * r * r) * kiln::mean(gw * x, dims.norm, true);
  }
  if (c.needs(1)) out[1] = dims.lead_sum(g * x * r, c.in_shape(1));
  return out;
}

// Inference batch norm: y = (x - mean) * rsqrt(var + eps) * weight + bias, parameters along dim 1.
std::vector<Tensor> batch_norm_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Tensor& x = c.inputs[0];
  const Tensor& g = gs[0];
  const int64_t rank = x.dim();
  Shape pshape(static_cast<size_t>(rank), 1);
  pshape[1] = x.shape()[1];
  std::vector<int64_t> other;
  for (int64_t d = 0; d < rank; ++d)
    if (d != 1) other.push_back(d);
  auto param = [&](const Tensor& t) { return reshape(t, pshape); };
  auto per_channel = [&](const Tensor& t, size_t i) { return reshape(kiln::sum(t, other, true), c.in_shape(i)); };
  Tensor mean = param(c.inputs[1]);
  Tensor inv = rsqrt(param(c.inputs[2]) + c.attrs.get_float("eps"));
  Tensor w = c.inputs[3].defined() ? param(c.inputs[3]) : Tensor();
  Tensor gw = w.defined() ? g * w : g;
  Tensor xc = x - mean;
  std::vector<Tensor> r(5);
  if (c.needs(0)) r[0] = gw * inv;
  if (c.needs(1)) r[1] = neg(per_channel(gw * inv, 1));
  if (c.needs(2)) r[2] = per_channel(gw * xc * inv * inv * inv * -0.5, 2);
  if (c.needs(3)) r[3] = per_channel(g * xc * inv, 3);
  if (c.needs(4)) r[4] = per_channel(g, 4);
  return r;
}

}  // namespace

namespace defs {

void register_norm_layer_ops(OpRegistry& r) {
  rules_pending(r.add("layer_norm(Tensor x, Tensor? weight, Tensor? bias, int axis=-1, float eps=1e-5) -> Tensor"),
                "LayerNormalization", 17)
      .infer(infer_trailing_norm)
      .kernel(DeviceType::cpu, DTypeSet::floating(), layer_norm_kernel)
      .vjp(VjpRule{layer_norm_vjp, {0, 1}, {}})
      .doc("(x - mean) / sqrt(var + eps) * weight + bias, statistics over dims axis..end (population variance)");
  rules_pending(r.add("rms_norm(Tensor x, Tensor? weight, int axis=-1, float eps=1e-5) -> Tensor"), "RMSNormalization",
                23)
      .infer(infer_trailing_norm)
      .kernel(DeviceType::cpu, DTypeSet::floating(), rms_norm_kernel)
      .vjp(VjpRule{rms_norm_vjp, {0, 1}, {}})
      .doc("x / sqrt(mean(x^2) + eps) * weight, the mean over dims axis..end (RMSNorm)");
  rules_pending(r.add("batch_norm(Tensor x, Tensor mean, Tensor var, Tensor? weight, Tensor? bias, float eps=1e-5) -> Tensor"),
                "BatchNormalization", 15)
      .infer(infer_batch_norm)
      .per_sample()
      .kernel(DeviceType::cpu, DTypeSet::floating(), batch_norm_kernel)
      .vjp(VjpRule{batch_norm_vjp, {0, 1, 2, 3}, {}})
      .doc("inference batch norm over channel dim 1: (x - mean) / sqrt(var + eps) * weight + bias");
}

}  // namespace defs

Tensor layer_norm(const Tensor& x, int64_t axis, const Tensor& weight, const Tensor& bias, double eps, SourceLoc loc) {
  return dispatch1(op("layer_norm"), {x, weight, bias}, {{"axis", axis}, {"eps", eps}}, loc);
}
Tensor rms_norm(const Tensor& x, int64_t axis, const Tensor& weight, double eps, SourceLoc loc) {
  return dispatch1(op("rms_norm"), {x, weight}, {{"axis", axis}, {"eps", eps}}, loc);
}
Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight, const Tensor& bias,
                  double eps, SourceLoc loc) {
  return dispatch1(op("batch_norm"), {x, mean, var, weight, bias}, {{"eps", eps}}, loc);
}

}  // namespace kiln
