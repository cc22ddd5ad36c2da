// grid_sample (ONNX GridSample 20; PyTorch's grid_sample) over 1 to 4 spatial dims, and its
// gradient grid_sample_backward (w.r.t. x and grid).
#include "kernels/cpu/grid_sample.h"
#include "kernels/cpu/loops.h"
#include "kiln/ops/resample.h"
#include "ops/defs/common.h"
#include "ops/defs/conv/conv_common.h"

namespace kiln {

namespace {

using kernels::cpu::GridSampleParams;

GridSampleParams params_of(const std::string& op, const Attrs& a) {
  GridSampleParams p;
  const std::string& mode = a.get_string("mode");
  const std::string& pad = a.get_string("padding_mode");
  if (mode == "nearest") p.mode = GridSampleParams::Mode::nearest;
  else if (mode == "linear" || mode == "bilinear") p.mode = GridSampleParams::Mode::linear;
  else if (mode == "cubic" || mode == "bicubic") p.mode = GridSampleParams::Mode::cubic;
  else KILN_FAIL(op, ": mode must be one of nearest, linear, cubic (or PyTorch's bilinear, bicubic), got '", mode, "'");
  if (pad == "zeros") p.padding = GridSampleParams::Padding::zeros;
  else if (pad == "border") p.padding = GridSampleParams::Padding::border;
  else if (pad == "reflection") p.padding = GridSampleParams::Padding::reflection;
  else KILN_FAIL(op, ": padding_mode must be one of zeros, border, reflection, got '", pad, "'");
  p.align_corners = a.get_bool("align_corners");
  return p;
}

// Checks x [N, C, D1..Dk] against grid [N, O1..Ok, k]; returns the output shape [N, C, O1..Ok].
Shape check_shapes(const InferCtx& c, const TensorMeta& x, const TensorMeta& grid) {
  params_of(c.op.name(), c.attrs);
  if (!is_floating(x.dtype)) c.fail("x must be floating (f32, f64, f16, bf16), got " + meta_str(x));
  if (!is_floating(grid.dtype)) c.fail("grid must be floating, got " + meta_str(grid));
  if (x.shape.size() < 3) c.fail("x must have rank >= 3 [N, C, D1, ...], got shape " + shape_str(x.shape));
  const int64_t k = static_cast<int64_t>(x.shape.size()) - 2;
  if (k > 4) c.fail("at most 4 spatial dims are supported, x has shape " + shape_str(x.shape));
  if (grid.shape.size() != x.shape.size() || grid.shape.back() != k)
    c.fail("grid must have shape [N, O1, ..., O" + std::to_string(k) + ", " + std::to_string(k) + "] for x of shape " +
           shape_str(x.shape) + ", got " + shape_str(grid.shape));
  if (grid.shape[0] != x.shape[0])
    c.fail("grid's batch " + std::to_string(grid.shape[0]) + " differs from x's " + std::to_string(x.shape[0]) +
           " (x " + shape_str(x.shape) + ", grid " + shape_str(grid.shape) + ")");
  Shape out{x.shape[0], x.shape[1]};
  out.insert(out.end(), grid.shape.begin() + 1, grid.shape.end() - 1);
  return out;
}

std::vector<TensorMeta> infer_grid_sample(const InferCtx& c) {
  return {{c.in(0).dtype, check_shapes(c, c.in(0), c.in(1))}};
}

void grid_sample_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  const DType compute = k.in(0).dtype() == DType::f64 ? DType::f64 : DType::f32;
  Tensor x = defs::contiguous_as(k.in(0), compute);
  Tensor grid = defs::contiguous_as(k.in(1), DType::f64);
  Tensor y = out.is_contiguous() && out.dtype() == compute ? out : empty(out.shape(), TensorOptions(compute));
  if (x.numel() == 0) {
    kernels::cpu::copy_into(out, zeros(out.shape(), TensorOptions(compute)));
    return;
  }
  kernels::cpu::grid_sample(params_of(k.op.name(), k.attrs), x, grid, y);
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

std::vector<TensorMeta> infer_grid_sample_backward(const InferCtx& c) {
  const TensorMeta& g = c.in(0);
  Shape out = check_shapes(c, c.in(1), c.in(2));
  if (g.shape != out) c.fail("grad has shape " + shape_str(g.shape) + ", grid_sample produced " + shape_str(out));
  return {c.in(1), c.in(2)};
}

void grid_sample_backward_kernel(const KernelCall& k) {
  Tensor g = defs::contiguous_as(k.in(0), DType::f64);
  Tensor x = defs::contiguous_as(k.in(1), DType::f64);
  Tensor grid = defs::contiguous_as(k.in(2), DType::f64);
  Tensor dx = zeros(x.shape(), TensorOptions(DType::f64)), dgrid = zeros(grid.shape(), TensorOptions(DType::f64));
  if (g.numel() > 0 && x.numel() > 0) kernels::cpu::grid_sample_backward(params_of(k.op.name(), k.attrs), x, grid, g, dx, dgrid);
  kernels::cpu::copy_into(k.out(0), dx);
  kernels::cpu::copy_into(k.out(1), dgrid);
}

const char* kGridAttrs = "str mode=\"linear\", str padding_mode=\"zeros\", bool align_corners=false";

}  // namespace

void register_grid_sample_ops(OpRegistry& r) {
  defs::rules_pending(r.add(std::string("grid_sample(Tensor x, Tensor grid, ") + kGridAttrs + ") -> Tensor"),
                      "GridSample", 20)
      .infer(infer_grid_sample)
      .kernel(DeviceType::cpu, DTypeSet::floating(), grid_sample_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     return dispatch(op("grid_sample_backward"), {g[0], c.inputs[0], c.inputs[1]}, c.attrs);
                   },
                   {0, 1}, {}})
      .doc("ONNX GridSample 20 over 1 to 4 spatial dims: x [N, C, D1..Dk], grid [N, O1..Ok, k] of "
           "normalized coordinates in [-1, 1], last dim in reverse order (x = width first); nearest rounds half "
           "to even. 16-bit floats compute in f32; coordinates in f64.");
  defs::rules_pending(r.add(std::string("grid_sample_backward(Tensor grad, Tensor x, Tensor grid, ") + kGridAttrs +
                            ") -> (Tensor dx, Tensor dgrid)"))
      .infer(infer_grid_sample_backward)
      .kernel(DeviceType::cpu, DTypeSet::floating(), grid_sample_backward_kernel)
      .no_vjp("second derivatives of grid_sample are not implemented; detach() through it for higher order")
      .no_onnx("training-only op")
      .doc("Gradients of grid_sample w.r.t. x and grid (computed in f64); zero w.r.t. the grid for nearest and "
           "for border-clamped coordinates.");
}

Tensor grid_sample(const Tensor& x, const Tensor& grid, const std::string& mode, const std::string& padding_mode,
                   bool align_corners, SourceLoc loc) {
  return dispatch1(op("grid_sample"), {x, grid},
                   {{"mode", mode}, {"padding_mode", padding_mode}, {"align_corners", align_corners}}, loc);
}

}  // namespace kiln
