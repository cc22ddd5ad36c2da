// resize (ONNX Resize 19) and its gradient resize_backward: per-axis tap tables built here from
// ONNX's coordinate transforms and interpolation filters, applied by kernels/cpu/resample.h.
#include <cmath>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/resample.h"
#include "kiln/ops/resample.h"
#include "ops/defs/common.h"
#include "ops/defs/conv/conv_common.h"

namespace kiln {

namespace {

using kernels::cpu::ResampleAxis;

bool one_of(const std::string& v, std::initializer_list<const char*> options) {
  for (const char* o : options)
    if (v == o) return true;
  return false;
}

std::string options_str(std::initializer_list<const char*> options) {
  std::string s;
  for (const char* o : options) s += (s.empty() ? "" : ", ") + std::string(o);
  return s;
}

#define KILN_RESIZE_MODES {"nearest", "linear", "cubic"}
#define KILN_RESIZE_COORDS \
  {"half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_crop_and_resize"}
#define KILN_RESIZE_NEAREST {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"}

// The output shape: sizes, where -1 keeps x's dim (an axis that is not resized and whose size is
// only known at run time, e.g. a symbolic batch imported from ONNX).
Shape resize_sizes(const Shape& x, const Attrs& a) {
  const auto& sizes = a.get_ints("sizes");
  Shape out(sizes.begin(), sizes.end());
  for (size_t d = 0; d < out.size() && d < x.size(); ++d)
    if (out[d] == -1) out[d] = x[d];
  return out;
}

// Checks the attributes against x's shape; `what` prefixes the messages.
void check_resize_attrs(const std::string& what, const Shape& x, DType dtype, const Attrs& a) {
  const size_t rank = x.size();
  const auto& sizes = a.get_ints("sizes");
  const auto& scales = a.get_floats("scales");
  const auto& roi = a.get_floats("roi");
  const std::string& mode = a.get_string("mode");
  const std::string& coord = a.get_string("coordinate_transformation_mode");
  const std::string& nearest = a.get_string("nearest_mode");
  KILN_CHECK(rank >= 1, what, ": x must have rank >= 1, got a scalar");
  KILN_CHECK(sizes.size() == rank, what, ": sizes must have one entry per dim of x (", rank, "), got ",
             attr_value_str(sizes), " for x of shape ", shape_str(x));
  for (size_t d = 0; d < rank; ++d) {
    KILN_CHECK(sizes[d] >= -1, what, ": sizes ", attr_value_str(sizes), " has a negative entry at dim ", d,
               " (-1 keeps x's dim)");
    KILN_CHECK(sizes[d] != -1 || a.get_floats("scales").size() != rank || a.get_floats("scales")[d] == 1.0, what,
               ": sizes keeps dim ", d, " (-1) but scales ", attr_value_str(a.get_floats("scales")), " resizes it");
    KILN_CHECK(x[d] > 0 || sizes[d] <= 0, what, ": dim ", d, " of x (shape ", shape_str(x),
               ") is empty and cannot be resized to ", sizes[d]);
  }
  KILN_CHECK(scales.empty() || scales.size() == rank, what, ": scales must be empty or have one entry per dim of x (",
             rank, "), got ", attr_value_str(scales));
  for (double s : scales) KILN_CHECK(s > 0 && std::isfinite(s), what, ": scales must be positive, got ", attr_value_str(scales));
  KILN_CHECK(roi.empty() || roi.size() == 2 * rank, what, ": roi must be empty or [starts..., ends...] with ", 2 * rank,
             " entries for x of rank ", rank, ", got ", attr_value_str(roi));
  KILN_CHECK(one_of(mode, KILN_RESIZE_MODES), what, ": mode must be one of ", options_str(KILN_RESIZE_MODES), ", got '",
             mode, "'");
  KILN_CHECK(one_of(coord, KILN_RESIZE_COORDS), what, ": coordinate_transformation_mode must be one of ",
             options_str(KILN_RESIZE_COORDS), ", got '", coord, "'");
  KILN_CHECK(one_of(nearest, KILN_RESIZE_NEAREST), what, ": nearest_mode must be one of ",
             options_str(KILN_RESIZE_NEAREST), ", got '", nearest, "'");
  KILN_CHECK(!(a.get_bool("antialias") && mode == "nearest"), what,
             ": antialias applies to the linear and cubic modes only, got mode 'nearest'");
  KILN_CHECK(mode == "nearest" || is_floating(dtype), what, ": ", mode, " interpolation needs a floating x, got ",
             dtype_name(dtype), " (nearest works for every dtype)");
}

bool is_close(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); }

// Note [Resize coordinates]
// Output position y of an axis maps to the input coordinate x_ori by the coordinate transform,
// with scale = the given scale or out / in and the "output width" scale * in as a real number
// (ONNX's reference; it differs from the integer size when scales do not divide evenly). The
// filter is centred on x_ori: base = ceil(x_ori) - 1 and ratio = x_ori - base in (0, 1], so an
// integer x_ori takes its right tap with weight 1. An n-tap filter reads base - n/2 + 1 + t,
// clamped to the input (edge padding); exclude_outside zeroes the taps past the edge and
// renormalizes. Axes whose transform is the identity (scale 1, same size, full roi) are skipped.
ResampleAxis axis_table(const Attrs& a, size_t d, size_t rank, int64_t in, int64_t out) {
  const auto& scales = a.get_floats("scales");
  const auto& roi = a.get_floats("roi");
  const std::string& mode = a.get_string("mode");
  const std::string& coord = a.get_string("coordinate_transformation_mode");
  const std::string& nearest = a.get_string("nearest_mode");
  const bool antialias = a.get_bool("antialias"), exclude = a.get_bool("exclude_outside");
  const double A = a.get_float("cubic_coeff_a");
  const double scale = scales.empty() ? static_cast<double>(out) / static_cast<double>(in) : scales[d];
  const double width = scale * static_cast<double>(in), fin = static_cast<double>(in);
  const double roi_start = roi.empty() ? 0.0 : roi[d], roi_end = roi.empty() ? 1.0 : roi[d + rank];

  ResampleAxis t;
  t.axis = static_cast<int64_t>(d), t.in_len = in, t.out_len = out;
  const double aa = std::min(scale, 1.0);
  int64_t first = 0;  // the first tap's offset from base
  if (mode == "nearest") t.taps = 1;
  else if (mode == "linear") {
    first = antialias ? static_cast<int64_t>(std::floor(-1.0 / aa)) + 1 : 0;
    t.taps = 2 - 2 * first;
  } else {
    first = antialias ? static_cast<int64_t>(std::floor(-2.0 / aa)) + 1 : -1;
    t.taps = 2 - 2 * first;
  }
  const bool crop = coord == "tf_crop_and_resize";
  if (crop) t.outside.assign(static_cast<size_t>(out), 0);
  t.index.resize(static_cast<size_t>(out * t.taps));
  t.weight.resize(static_cast<size_t>(out * t.taps));
  auto cubic = [A](double x) {
    x = std::fabs(x);
    if (x <= 1) return ((A + 2) * x - (A + 3)) * x * x + 1;
    if (x < 2) return ((A * x - 5 * A) * x + 8 * A) * x - 4 * A;
    return 0.0;
  };
  for (int64_t j = 0; j < out; ++j) {
    const double y = static_cast<double>(j);
    double x = 0;
    if (coord == "align_corners") x = width == 1 ? 0.0 : y * (fin - 1) / (width - 1);
    else if (coord == "asymmetric") x = y / scale;
    else if (crop) {
      x = width == 1 ? (roi_end - roi_start) * (fin - 1) / 2 : y * (roi_end - roi_start) * (fin - 1) / (width - 1);
      x += roi_start * (fin - 1);
      if (x < 0 || x > fin - 1) t.outside[static_cast<size_t>(j)] = 1;
    } else if (coord == "pytorch_half_pixel") x = width == 1 ? -0.5 : (y + 0.5) / scale - 0.5;
    else if (coord == "half_pixel") x = (y + 0.5) / scale - 0.5;
    else x = fin / 2 * (1 - static_cast<double>(out) / width) + (y + 0.5) / scale - 0.5;  // half_pixel_symmetric
    const double base = std::ceil(x) - 1, ratio = x - base;
    int64_t* idx = t.index.data() + j * t.taps;
    double* w = t.weight.data() + j * t.taps;
    if (mode == "nearest") {
      bool right = true;  // an integer x_ori (ratio 1) is its own right tap
      if (ratio < 1) {
        if (nearest == "round_prefer_floor") right = ratio > 0.5;
        else if (nearest == "round_prefer_ceil") right = ratio >= 0.5;
        else right = nearest == "ceil";
      }
      idx[0] = static_cast<int64_t>(base) + (right ? 1 : 0);
      w[0] = 1;
    } else {
      double sum = 0;
      for (int64_t k = 0; k < t.taps; ++k) {
        idx[k] = static_cast<int64_t>(base) + first + k;
        const double dist = static_cast<double>(first + k) - ratio;  // tap position - x_ori
        if (mode == "linear") w[k] = antialias ? std::max(0.0, 1 - std::fabs(dist * aa)) : std::max(0.0, 1 - std::fabs(dist));
        else w[k] = cubic(antialias ? dist * aa : dist);
        if (exclude && (idx[k] < 0 || idx[k] >= in)) w[k] = 0;
        sum += w[k];
      }
      if ((antialias || exclude) && sum != 0)
        for (int64_t k = 0; k < t.taps; ++k) w[k] /= sum;
    }
    for (int64_t k = 0; k < t.taps; ++k) idx[k] = std::clamp<int64_t>(idx[k], 0, in - 1);
  }
  return t;
}

// The tables of every axis that is not the identity, in axis order.
std::vector<ResampleAxis> resize_tables(const Shape& x, const Attrs& a) {
  const Shape sizes = resize_sizes(x, a);
  const auto& scales = a.get_floats("scales");
  const auto& roi = a.get_floats("roi");
  const bool crop = a.get_string("coordinate_transformation_mode") == "tf_crop_and_resize";
  std::vector<ResampleAxis> tables;
  for (size_t d = 0; d < x.size(); ++d) {
    const double scale = scales.empty() ? static_cast<double>(sizes[d]) / static_cast<double>(x[d]) : scales[d];
    const bool full_roi = !crop || roi.empty() || (roi[d] == 0.0 && is_close(roi[d + x.size()], 1.0));
    if (sizes[d] == 0 || x[d] == 0 || (sizes[d] == x[d] && is_close(scale, 1.0) && full_roi)) continue;
    tables.push_back(axis_table(a, d, x.size(), x[d], sizes[d]));
  }
  return tables;
}

std::vector<TensorMeta> infer_resize(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  check_resize_attrs(c.op.name(), x.shape, x.dtype, c.attrs);
  return {{x.dtype, resize_sizes(x.shape, c.attrs)}};
}

void resize_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  const Tensor& x = k.in(0);
  auto tables = resize_tables(x.shape(), k.attrs);
  const double fill = k.attrs.get_float("extrapolation_value");
  Tensor y;
  const bool nearest = k.attrs.get_string("mode") == "nearest";
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  // Nearest of another dtype stays a gather of its own elements (f16 through f32 is not a copy).
  if (compute == DType::f32 && (!nearest || x.dtype() == DType::f32) &&
      kernels::cpu::resample_last2_f32_applies(x.shape(), tables)) {
    y = out.is_contiguous() && out.dtype() == DType::f32 ? out : empty(out.shape(), TensorOptions(DType::f32));
    kernels::cpu::resample_last2_f32(defs::contiguous_as(x, compute), tables, y);
  } else if (nearest) {
    Tensor xc = defs::contiguous_as(x, x.dtype());
    y = out.is_contiguous() ? out : empty(out.shape(), TensorOptions(out.dtype()));
    kernels::cpu::resample_gather(xc, y, tables, full({1}, Scalar(fill), TensorOptions(out.dtype())));
  } else {
    y = kernels::cpu::resample_separable(defs::contiguous_as(x, compute), tables, fill);
  }
  if (!y.is_same(out)) kernels::cpu::copy_into(out, y);
}

std::vector<TensorMeta> infer_resize_backward(const InferCtx& c) {
  const TensorMeta& g = c.in(0);
  const auto& in_shape = c.attrs.get_ints("input_shape");
  Shape xs(in_shape.begin(), in_shape.end());
  check_resize_attrs(c.op.name(), xs, g.dtype, c.attrs);
  const Shape sizes = resize_sizes(xs, c.attrs);
  if (g.shape != sizes) c.fail("grad has shape " + shape_str(g.shape) + " but the resize produced " + shape_str(sizes));
  if (!is_floating(g.dtype)) c.fail("grad must be floating, got " + meta_str(g));
  return {{g.dtype, xs}};
}

void resize_backward_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  auto tables = resize_tables(out.shape(), k.attrs);
  Tensor g = defs::contiguous_as(k.in(0), DType::f64);
  kernels::cpu::copy_into(out, kernels::cpu::resample_separable_adjoint(g, out.shape(), tables));
}

const char* kResizeAttrs =
    "int[] sizes, float[] scales=[], float[] roi=[], str mode=\"nearest\", "
    "str coordinate_transformation_mode=\"half_pixel\", str nearest_mode=\"round_prefer_floor\", "
    "float cubic_coeff_a=-0.75, bool exclude_outside=false, float extrapolation_value=0.0, bool antialias=false";

}  // namespace

void register_resize_ops(OpRegistry& r) {
  defs::rules_pending(r.add(std::string("resize(Tensor x, ") + kResizeAttrs + ") -> Tensor"), "Resize", 19)
      .infer(infer_resize)
      .kernel(DeviceType::cpu, DTypeSet::all(), resize_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     Attrs a = c.attrs;
                     a.set("input_shape", std::vector<int64_t>(c.in_shape(0).begin(), c.in_shape(0).end()));
                     return std::vector<Tensor>{dispatch1(op("resize_backward"), {g[0]}, a)};
                   },
                   {}, {}})
      .doc("ONNX Resize 19 to explicit sizes (one per dim; -1 keeps x's dim); nearest (any dtype), linear and cubic (floating; "
           "16-bit floats compute in f32) over any number of axes, applied one axis at a time; scales, when "
           "given, drive the coordinate transform (Note [Resize coordinates]). exclude_outside does not apply "
           "to nearest.");
  defs::rules_pending(r.add(std::string("resize_backward(Tensor grad, int[] input_shape, ") + kResizeAttrs +
                            ") -> Tensor"))
      .infer(infer_resize_backward)
      .kernel(DeviceType::cpu, DTypeSet::floating(), resize_backward_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Linear in grad; its adjoint is resize's linear part (no extrapolation constant).
                     Attrs fwd;
                     for (const auto& [name, v] : c.attrs.values())
                       if (name != "input_shape") fwd.set(name, v);
                     fwd.set("extrapolation_value", 0.0);
                     return std::vector<Tensor>{dispatch1(op("resize"), {g[0]}, fwd)};
                   },
                   {}, {}})
      .no_onnx("training-only op")
      .doc("Gradient of resize w.r.t. x: the adjoint of its interpolation (computed in f64).");
}

Tensor resize(const Tensor& x, const std::vector<int64_t>& sizes, const ResizeOptions& o, SourceLoc loc) {
  return dispatch1(op("resize"), {x},
                   {{"sizes", sizes},
                    {"scales", o.scales},
                    {"roi", o.roi},
                    {"mode", o.mode},
                    {"coordinate_transformation_mode", o.coordinate_transformation_mode},
                    {"nearest_mode", o.nearest_mode},
                    {"cubic_coeff_a", o.cubic_coeff_a},
                    {"exclude_outside", o.exclude_outside},
                    {"extrapolation_value", o.extrapolation_value},
                    {"antialias", o.antialias}},
                   loc);
}

}  // namespace kiln
