// ONNX neural-network operators → kiln: Conv/ConvTranspose (1-D through kiln's 2-D ops),
// pooling, normalizations (Batch/Instance/Layer/Group/RMS, LRN, Lp, MVN), Gemm/MatMul,
// Softmax/LogSoftmax/Hardmax, and the losses NegativeLogLikelihoodLoss/SoftmaxCrossEntropyLoss.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <numeric>

#include "onnx/convert.h"

namespace kiln::onnx::detail {
namespace {

using V = std::vector<ir::Value*>;
using Ints = std::vector<int64_t>;

Ints spatial_axes_of(int64_t r) {
  Ints a;
  for (int64_t i = 2; i < r; ++i) a.push_back(i);
  return a;
}
Ints spatial_axes(int64_t r) { return spatial_axes_of(r); }

// ---- convolution and pooling geometry --------------------------------------------------------------
struct Window {
  Ints kernel, stride, dilation, pad_begin, pad_end;
};

// Reads kernel/strides/dilations/pads/auto_pad for `nsp` spatial dims of input shape `in`.
Window window(ConvertCtx& c, const ir::SymShape& in, int64_t nsp, Ints kernel) {
  Window w;
  w.kernel = std::move(kernel);
  if (static_cast<int64_t>(w.kernel.size()) != nsp)
    c.fail("kernel has " + std::to_string(w.kernel.size()) + " dims for " + std::to_string(nsp) + " spatial dims");
  w.stride = c.attr_ints("strides", Ints(static_cast<size_t>(nsp), 1));
  w.dilation = c.attr_ints("dilations", Ints(static_cast<size_t>(nsp), 1));
  Ints pads = c.attr_ints("pads", Ints(static_cast<size_t>(2 * nsp), 0));
  if (static_cast<int64_t>(w.stride.size()) != nsp || static_cast<int64_t>(w.dilation.size()) != nsp ||
      static_cast<int64_t>(pads.size()) != 2 * nsp)
    c.fail("strides/dilations/pads do not match " + std::to_string(nsp) + " spatial dims");
  std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  for (int64_t i = 0; i < nsp; ++i) {
    size_t u = static_cast<size_t>(i);
    if (w.stride[u] <= 0 || w.dilation[u] <= 0) c.fail("strides and dilations must be positive");
    const ir::Dim& dim = in[static_cast<size_t>(2 + i)];
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      if (dim.is_symbolic()) c.fail("auto_pad " + auto_pad + " over symbolic spatial dim " + dim.symbol);
      int64_t n = dim.size;
      int64_t out = (n + w.stride[u] - 1) / w.stride[u];
      int64_t total = std::max<int64_t>((out - 1) * w.stride[u] + (w.kernel[u] - 1) * w.dilation[u] + 1 - n, 0);
      int64_t small = total / 2;
      w.pad_begin.push_back(auto_pad == "SAME_UPPER" ? small : total - small);
      w.pad_end.push_back(auto_pad == "SAME_UPPER" ? total - small : small);
    } else if (auto_pad == "VALID") {
      w.pad_begin.push_back(0);
      w.pad_end.push_back(0);
    } else if (auto_pad == "NOTSET" || auto_pad.empty()) {
      w.pad_begin.push_back(pads[u]);
      w.pad_end.push_back(pads[u + static_cast<size_t>(nsp)]);
    } else {
      c.fail("auto_pad '" + auto_pad + "' is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID");
    }
  }
  return w;
}

// kiln's conv/pool ops are 2-D; a 1-D window becomes a 1×k window on an inserted height of 1.
Window as_2d(const Window& w) {
  if (w.kernel.size() == 2) return w;
  return Window{{1, w.kernel[0]}, {1, w.stride[0]}, {1, w.dilation[0]}, {0, w.pad_begin[0]}, {0, w.pad_end[0]}};
}

Ints padding_2d(const Window& w) { return {w.pad_begin[0], w.pad_begin[1], w.pad_end[0], w.pad_end[1]}; }

int64_t spatial_dims(ConvertCtx& c, size_t input) {
  int64_t r = c.rank(input);
  if (r != 3 && r != 4)
    c.fail(std::to_string(r - 2) + "-D windows are not supported (kiln converts 1-D and 2-D; the input has rank " +
           std::to_string(r) + ")");
  return r - 2;
}

ir::Value* to_2d(ConvertCtx& c, ir::Value* v, int64_t nsp) {
  return nsp == 2 ? v : c.emit("unsqueeze", {v}, {{"dims", Ints{2}}});
}
ir::Value* from_2d(ConvertCtx& c, ir::Value* v, int64_t nsp) {
  return nsp == 2 ? v : c.emit("squeeze", {v}, {{"dims", Ints{2}}});
}

V conv(ConvertCtx& c) {
  int64_t nsp = spatial_dims(c, 0);
  Shape ws = c.static_shape(1);
  check_same_types(c);
  if (static_cast<int64_t>(ws.size()) != nsp + 2)
    c.fail("weight " + shape_str(ws) + " must have rank " + std::to_string(nsp + 2) + " like the input");
  Ints kernel = c.attr_ints("kernel_shape", Ints(ws.begin() + 2, ws.end()));
  Window w = as_2d(window(c, c.type(0).shape, nsp, kernel));
  ir::Value* out = c.emit("conv2d", {to_2d(c, c.in(0), nsp), to_2d(c, c.in(1), nsp), c.in_or_null(2)},
                          {{"stride", w.stride}, {"padding", padding_2d(w)}, {"dilation", w.dilation},
                           {"groups", c.attr_int("group", 1)}});
  return {from_2d(c, out, nsp)};
}

// An input's dims with a symbolic batch (or other leading dims) allowed; the spatial dims from 2 on
// must be static (their sizes become attributes). Symbolic dims read as -1.
Ints static_spatial_shape(ConvertCtx& c, size_t i) {
  Ints dims;
  const auto& t = c.type(i).shape;
  for (size_t d = 0; d < t.size(); ++d) {
    if (t[d].is_symbolic() && d >= 2)
      c.fail("input #" + std::to_string(i) + " has symbolic spatial dim " + ir::dim_str(t[d]) + " in " +
             ir::shape_str(t) + "; bind it (ImportOptions::dim_values)");
    dims.push_back(t[d].is_symbolic() ? -1 : t[d].size);
  }
  return dims;
}

V conv_transpose(ConvertCtx& c) {
  int64_t nsp = spatial_dims(c, 0);
  Ints xs = static_spatial_shape(c, 0);
  Shape ws = c.static_shape(1);
  check_same_types(c);
  if (ws.size() != xs.size())
    c.fail("weight " + shape_str(ws) + " must have rank " + std::to_string(xs.size()) + " like the input");
  Ints kernel = c.attr_ints("kernel_shape", Ints(ws.begin() + 2, ws.end()));
  Ints stride = c.attr_ints("strides", Ints(static_cast<size_t>(nsp), 1));
  Ints dil = c.attr_ints("dilations", Ints(static_cast<size_t>(nsp), 1));
  Ints out_pad = c.attr_ints("output_padding", Ints(static_cast<size_t>(nsp), 0));
  Ints pads = c.attr_ints("pads", Ints(static_cast<size_t>(2 * nsp), 0));
  Ints out_shape = c.attr_ints("output_shape");
  std::string auto_pad = c.attr_string("auto_pad", "NOTSET");
  if (static_cast<int64_t>(kernel.size()) != nsp || static_cast<int64_t>(stride.size()) != nsp ||
      static_cast<int64_t>(pads.size()) != 2 * nsp || static_cast<int64_t>(out_pad.size()) != nsp)
    c.fail("kernel/strides/pads/output_padding do not match the spatial rank");
  for (int64_t i = 0; i < nsp; ++i) {
    size_t u = static_cast<size_t>(i);
    int64_t in = xs[2 + u];
    int64_t natural = stride[u] * (in - 1) + out_pad[u] + (kernel[u] - 1) * dil[u] + 1;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      int64_t want = !out_shape.empty() ? out_shape[out_shape.size() - static_cast<size_t>(nsp) + u] : in * stride[u];
      int64_t total = natural - want;
      if (total < 0) {  // a larger output_shape grows the output padding (at the end)
        out_pad[u] -= total;
        total = 0;
      }
      bool upper = auto_pad != "SAME_LOWER";
      // ONNX: SAME_UPPER puts the extra pad at the end; an explicit output_shape follows SAME_UPPER's split.
      pads[u] = upper ? total / 2 : total - total / 2;
      pads[u + static_cast<size_t>(nsp)] = total - pads[u];
    } else if (auto_pad == "VALID") {
      pads[u] = pads[u + static_cast<size_t>(nsp)] = 0;
    }
  }
  Ints pad2, stride2 = stride, dil2 = dil, op2 = out_pad;
  if (nsp == 1) {
    pad2 = {0, pads[0], 0, pads[1]};
    stride2 = {1, stride[0]};
    dil2 = {1, dil[0]};
    op2 = {0, out_pad[0]};
  } else {
    pad2 = {pads[0], pads[1], pads[2], pads[3]};
  }
  ir::Value* out = c.emit("conv_transpose2d", {to_2d(c, c.in(0), nsp), to_2d(c, c.in(1), nsp), c.in_or_null(2)},
                          {{"stride", stride2}, {"padding", pad2}, {"output_padding", op2}, {"dilation", dil2},
                           {"groups", c.attr_int("group", 1)}});
  return {from_2d(c, out, nsp)};
}

// Pools through kiln's N-d ops (any spatial rank, MaxPool's Indices, dilated AveragePool).
Attrs nd_window_attrs(const Window& w, bool ceil_mode) {
  Ints pads = w.pad_begin;
  pads.insert(pads.end(), w.pad_end.begin(), w.pad_end.end());
  return {{"kernel", w.kernel}, {"stride", w.stride}, {"pads", pads}, {"dilation", w.dilation}, {"ceil_mode", ceil_mode}};
}

int64_t any_spatial_dims(ConvertCtx& c, size_t input) {
  int64_t r = c.rank(input);
  if (r < 3) c.fail("pooling needs an [N, C, spatial...] input, got rank " + std::to_string(r));
  return r - 2;
}

V max_pool_nd(ConvertCtx& c) {
  int64_t nsp = any_spatial_dims(c, 0);
  Window w = window(c, c.type(0).shape, nsp, c.attr_ints("kernel_shape"));
  Attrs a = nd_window_attrs(w, c.attr_int("ceil_mode", 0) != 0);
  a.set("storage_order", c.attr_int("storage_order", 0));
  return c.emit_multi("max_pool", {c.in(0)}, a);
}

V avg_pool_nd(ConvertCtx& c) {
  int64_t nsp = any_spatial_dims(c, 0);
  Window w = window(c, c.type(0).shape, nsp, c.attr_ints("kernel_shape"));
  Attrs a = nd_window_attrs(w, c.attr_int("ceil_mode", 0) != 0);
  a.set("count_include_pad", c.attr_int("count_include_pad", 0) != 0);
  return {c.emit("avg_pool", {c.in(0)}, a)};
}

V lp_pool(ConvertCtx& c) {
  int64_t nsp = any_spatial_dims(c, 0);
  Window w = window(c, c.type(0).shape, nsp, c.attr_ints("kernel_shape"));
  Attrs a = nd_window_attrs(w, c.attr_int("ceil_mode", 0) != 0);
  a.set("p", c.attr_int("p", 2));
  return {c.emit("lp_pool", {c.in(0)}, a)};
}

V global_lp_pool(ConvertCtx& c) {
  int64_t p = c.attr_int("p", 2);
  ir::Value* x = c.in(0);
  Ints axes = spatial_axes_of(c.rank(0));
  if (p == 2) return {c.emit("norm", {x}, {{"axes", axes}, {"keepdim", true}})};
  if (p == 1) return {c.emit("sum", {c.emit("abs", {x})}, {{"axes", axes}, {"keepdim", true}})};
  DType dt = x->type().dtype;
  ir::Value* s = c.emit("sum", {c.emit("pow", {c.emit("abs", {x}), c.scalar(static_cast<double>(p), dt)})},
                        {{"axes", axes}, {"keepdim", true}});
  return {c.emit("pow", {s, c.scalar(1.0 / static_cast<double>(p), dt)})};
}

V max_pool(ConvertCtx& c) {
  bool wants_indices = c.node().output_size() > 1 && !c.node().output(1).empty();
  if (c.rank(0) != 4 || wants_indices || c.attr_int("storage_order", 0) != 0) return max_pool_nd(c);
  int64_t nsp = spatial_dims(c, 0);
  Window w = as_2d(window(c, c.type(0).shape, nsp, c.attr_ints("kernel_shape")));
  // kiln pools floating tensors; 8-bit and i32 values are exact in f64.
  DType dt = c.dtype(0);
  ir::Value* x = is_floating(dt) ? c.in(0) : c.cast(c.in(0), DType::f64);
  ir::Value* out = c.emit("max_pool2d", {to_2d(c, x, nsp)},
                          {{"kernel", w.kernel}, {"stride", w.stride}, {"padding", padding_2d(w)},
                           {"dilation", w.dilation}, {"ceil_mode", c.attr_int("ceil_mode", 0) != 0}});
  return {c.cast(from_2d(c, out, nsp), dt)};
}

V avg_pool(ConvertCtx& c) {
  Ints dil = c.attr_ints("dilations");
  bool dilated = std::any_of(dil.begin(), dil.end(), [](int64_t d) { return d != 1; });
  if (c.rank(0) != 4 || dilated) return avg_pool_nd(c);
  int64_t nsp = spatial_dims(c, 0);
  Window w = as_2d(window(c, c.type(0).shape, nsp, c.attr_ints("kernel_shape")));
  ir::Value* out = c.emit("avg_pool2d", {to_2d(c, c.in(0), nsp)},
                          {{"kernel", w.kernel}, {"stride", w.stride}, {"padding", padding_2d(w)},
                           {"ceil_mode", c.attr_int("ceil_mode", 0) != 0},
                           {"count_include_pad", c.attr_int("count_include_pad", 0) != 0}});
  return {from_2d(c, out, nsp)};
}


V global_avg_pool(ConvertCtx& c) { return {c.emit("global_avg_pool", {c.in(0)})}; }
V global_max_pool(ConvertCtx& c) {
  return {c.emit("max", {c.in(0)}, {{"axes", spatial_axes(c.rank(0))}, {"keepdim", true}})};
}

// ---- resampling -------------------------------------------------------------------------------------
V resize(ConvertCtx& c) {
  // Axes that are not resized may be symbolic (a dynamic batch): kiln's resize keeps them (-1).
  const auto& in_dims = c.type(0).shape;
  Ints in;
  for (const auto& d : in_dims) in.push_back(d.is_symbolic() ? -1 : d.size);
  int64_t r = static_cast<int64_t>(in.size());
  std::string mode = c.attr_string("mode", "nearest");
  std::string ctm = c.attr_string("coordinate_transformation_mode", c.opset() < 11 ? "asymmetric" : "half_pixel");
  std::string nearest_mode = c.attr_string("nearest_mode", c.opset() < 11 ? "floor" : "round_prefer_floor");
  std::vector<double> scales, roi;
  Ints sizes;
  if (c.opset() < 11) {
    scales = c.const_floats(1, "scales");
  } else {
    if (c.has_input(1)) roi = c.const_floats(1, "roi");
    if (c.has_input(2)) scales = c.const_floats(2, "scales");
    if (c.has_input(3) && c.is_symbolic_value(3)) {  // Shape(x)[:2] ++ [h, w]: symbolic entries keep x's dim
      for (const auto& d : c.shape_dims(3, "sizes")) sizes.push_back(d.is_symbolic() ? -1 : d.size);
    } else if (c.has_input(3)) {
      sizes = c.const_ints(3, "sizes");
    }
  }
  if (!sizes.empty() && !scales.empty()) c.fail("give scales or sizes, not both");
  if (sizes.empty() && scales.empty()) c.fail("neither scales nor sizes is given");
  Ints axes = c.attr_ints("axes");
  if (axes.empty())
    for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  for (auto& a : axes) a = c.axis(a, r, "axes entry");
  size_t na = axes.size();
  if ((!scales.empty() && scales.size() != na) || (!sizes.empty() && sizes.size() != na))
    c.fail("scales/sizes have " + std::to_string(std::max(scales.size(), sizes.size())) + " entries for " +
           std::to_string(na) + " axes");
  if (!roi.empty() && roi.size() != 2 * na && roi.size() != 2 * static_cast<size_t>(r)) c.fail("roi has the wrong length");
  std::vector<ir::Dim> size_dims = c.is_symbolic_value(3) ? c.shape_dims(3, "sizes") : std::vector<ir::Dim>{};
  for (size_t i = 0; i < na; ++i) {
    size_t a = static_cast<size_t>(axes[i]);
    bool keeps = !sizes.empty() ? sizes[i] == -1 : scales[i] == 1.0;
    if (!sizes.empty() && sizes[i] == -1 && !(i < size_dims.size() && size_dims[i] == in_dims[a]))
      c.fail("sizes entry " + std::to_string(i) + " is symbolic but x's dim is " + ir::dim_str(in_dims[a]));
    if (in_dims[a].is_symbolic() && !keeps)
      c.fail("resizing symbolic dim " + ir::dim_str(in_dims[a]) + " of " + ir::shape_str(in_dims) +
             " (kiln resizes static dims; a symbolic dim may only keep its size)");
  }
  if (std::any_of(in.begin(), in.end(), [](int64_t d) { return d < 0; }) &&
      c.attr_string("keep_aspect_ratio_policy", "stretch") != "stretch")
    c.fail("keep_aspect_ratio_policy other than stretch over symbolic dims " + ir::shape_str(in_dims));
  // Everything per dim of x: scales (1 where not resized), sizes, roi [starts..., ends...].
  std::vector<double> full_scales(static_cast<size_t>(r), 1.0);
  Ints out(in.begin(), in.end());
  if (!sizes.empty()) {
    for (size_t i = 0; i < na; ++i)
      full_scales[static_cast<size_t>(axes[i])] = static_cast<double>(sizes[i]) / static_cast<double>(in[static_cast<size_t>(axes[i])]);
    std::string policy = c.attr_string("keep_aspect_ratio_policy", "stretch");
    if (policy == "stretch") {
      for (size_t i = 0; i < na; ++i) out[static_cast<size_t>(axes[i])] = sizes[i];
    } else {
      double s = full_scales[static_cast<size_t>(axes[0])];
      for (int64_t a : axes) {
        double v = full_scales[static_cast<size_t>(a)];
        s = policy == "not_larger" ? std::min(s, v) : policy == "not_smaller" ? std::max(s, v) : (c.fail("keep_aspect_ratio_policy '" + policy + "' is unknown"), s);
      }
      for (int64_t a : axes) {
        full_scales[static_cast<size_t>(a)] = s;
        out[static_cast<size_t>(a)] = static_cast<int64_t>(s * static_cast<double>(in[static_cast<size_t>(a)]) + 0.5);
      }
    }
  } else {
    for (size_t i = 0; i < na; ++i) {
      if (scales[i] <= 0) c.fail("scales must be positive");
      size_t a = static_cast<size_t>(axes[i]);
      full_scales[a] = scales[i];
      out[a] = static_cast<int64_t>(std::floor(static_cast<double>(in[a]) * scales[i]));
    }
  }
  std::vector<double> full_roi;
  if (!roi.empty()) {
    if (roi.size() == 2 * static_cast<size_t>(r)) {
      full_roi = roi;
    } else {
      full_roi.assign(static_cast<size_t>(2 * r), 0.0);
      for (int64_t i = 0; i < r; ++i) full_roi[static_cast<size_t>(r + i)] = 1.0;
      for (size_t i = 0; i < na; ++i) {
        full_roi[static_cast<size_t>(axes[i])] = roi[i];
        full_roi[static_cast<size_t>(r + axes[i])] = roi[na + i];
      }
    }
  }
  if (ctm != "tf_crop_and_resize") full_roi.clear();
  return {c.emit("resize", {c.in(0)},
                 {{"sizes", out}, {"scales", full_scales}, {"roi", full_roi}, {"mode", mode},
                  {"coordinate_transformation_mode", ctm}, {"nearest_mode", nearest_mode},
                  {"cubic_coeff_a", c.attr_float("cubic_coeff_a", -0.75)},
                  {"exclude_outside", c.attr_int("exclude_outside", 0) != 0},
                  {"extrapolation_value", c.attr_float("extrapolation_value", 0.0)},
                  {"antialias", c.attr_int("antialias", 0) != 0}})};
}

V upsample(ConvertCtx& c) {
  // Upsample (opsets 7-9): scales per dim, asymmetric coordinates, nearest rounds down.
  Shape in = c.static_shape(0);
  std::vector<double> scales = c.opset() < 9 ? c.attr_floats("scales") : c.const_floats(1, "scales");
  if (scales.size() != in.size()) c.fail("scales has " + std::to_string(scales.size()) + " entries for rank " + std::to_string(in.size()));
  Ints out;
  for (size_t i = 0; i < in.size(); ++i) out.push_back(static_cast<int64_t>(std::floor(static_cast<double>(in[i]) * scales[i])));
  std::string mode = c.attr_string("mode", "nearest");
  if (mode == "bilinear") mode = "linear";
  return {c.emit("resize", {c.in(0)},
                 {{"sizes", out}, {"scales", scales}, {"mode", mode}, {"coordinate_transformation_mode", std::string("asymmetric")},
                  {"nearest_mode", std::string("floor")}})};
}

V grid_sample(ConvertCtx& c) {
  std::string mode = c.attr_string("mode", c.opset() < 20 ? "bilinear" : "linear");
  if (mode == "bilinear") mode = "linear";
  if (mode == "bicubic") mode = "cubic";
  return {c.emit("grid_sample", {c.in(0), c.in(1)},
                 {{"mode", mode}, {"padding_mode", c.attr_string("padding_mode", "zeros")},
                  {"align_corners", c.attr_int("align_corners", 0) != 0}})};
}

// ---- normalizations ----------------------------------------------------------------------------------
// [C] → [C, 1, ..., 1] so it broadcasts against [N, C, spatial...].
ir::Value* per_channel(ConvertCtx& c, ir::Value* v, int64_t rank) {
  Ints shape{-1};
  for (int64_t i = 2; i < rank; ++i) shape.push_back(1);
  return c.emit("reshape", {v}, {{"shape", shape}});
}

V batch_norm(ConvertCtx& c) {
  double eps = c.attr_float("epsilon", 1e-5);
  bool training = c.attr_int("training_mode", 0) != 0;
  if (c.opset() < 7 && c.attr_int("is_test", 0) == 0 && c.node().output_size() > 1) training = true;
  if (!training)
    return {c.emit("batch_norm", {c.in(0), c.in(3), c.in(4), c.in(1), c.in(2)}, {{"eps", eps}})};
  // Training: normalize with the batch statistics; running stats blend with `momentum`.
  ir::Value* x = c.in(0);
  int64_t r = c.rank(0);
  DType dt = x->type().dtype;
  Ints axes{0};
  for (int64_t i = 2; i < r; ++i) axes.push_back(i);
  ir::Value* mean = c.emit("mean", {x}, {{"axes", axes}});
  ir::Value* var = c.emit("var", {x}, {{"axes", axes}, {"correction", int64_t{0}}});
  ir::Value* y = c.emit("batch_norm", {x, mean, var, c.in(1), c.in(2)}, {{"eps", eps}});
  double momentum = c.attr_float("momentum", 0.9);
  auto blend = [&](ir::Value* running, ir::Value* current) {
    return c.emit("add", {c.emit("mul", {running, c.scalar(momentum, dt)}),
                          c.emit("mul", {current, c.scalar(1.0 - momentum, dt)})});
  };
  return {y, blend(c.in(3), mean), blend(c.in(4), var)};
}

// (x - mean) / sqrt(var + eps) over `axes` (population variance). Trailing axes, as instance and
// group norms' are, go through layer_norm without weights: its statistics in one pass of its own
// kernel, where mean, var, sub and mul were four passes and their temporaries (timm's GroupNorm
// ResNet-50 at batch 1: 53 norms, ~5 of its 25.7 ms, against ONNX Runtime's 25.4 in all).
ir::Value* normalize(ConvertCtx& c, ir::Value* x, const Ints& axes, double eps) {
  const int64_t r = static_cast<int64_t>(x->type().shape.size());
  bool trailing = !axes.empty() && axes.back() == r - 1;
  for (size_t i = 1; i < axes.size() && trailing; ++i) trailing = axes[i] == axes[i - 1] + 1;
  if (trailing && is_floating(x->type().dtype))
    return c.emit("layer_norm", {x, nullptr, nullptr}, {{"axis", axes.front()}, {"eps", eps}});
  ir::Value* mean = c.emit("mean", {x}, {{"axes", axes}, {"keepdim", true}});
  ir::Value* var = c.emit("var", {x}, {{"axes", axes}, {"correction", int64_t{0}}, {"keepdim", true}});
  ir::Value* inv = c.emit("rsqrt", {c.emit("add", {var, c.scalar(eps, x->type().dtype)})});
  return c.emit("mul", {c.emit("sub", {x, mean}), inv});
}

V instance_norm(ConvertCtx& c) {
  int64_t r = c.rank(0);
  ir::Value* y = normalize(c, c.in(0), spatial_axes(r), c.attr_float("epsilon", 1e-5));
  y = c.emit("mul", {y, per_channel(c, c.in(1), r)});
  return {c.emit("add", {y, per_channel(c, c.in(2), r)})};
}

V layer_norm(ConvertCtx& c) {
  int64_t r = c.rank(0);
  int64_t axis = c.axis(c.attr_int("axis", -1), r);
  double eps = c.attr_float("epsilon", 1e-5);
  V out{c.emit("layer_norm", {c.in(0), c.in_or_null(1), c.in_or_null(2)}, {{"axis", axis}, {"eps", eps}})};
  bool want_stats = (c.node().output_size() > 1 && !c.node().output(1).empty()) ||
                    (c.node().output_size() > 2 && !c.node().output(2).empty());
  if (want_stats) {
    Ints axes;
    for (int64_t i = axis; i < r; ++i) axes.push_back(i);
    ir::Value* x = c.in(0);
    if (c.attr_int("stash_type", 1) == 1) x = c.cast(x, DType::f32);
    ir::Value* mean = c.emit("mean", {x}, {{"axes", axes}, {"keepdim", true}});
    ir::Value* var = c.emit("var", {x}, {{"axes", axes}, {"correction", int64_t{0}}, {"keepdim", true}});
    out.push_back(mean);
    out.push_back(c.emit("rsqrt", {c.emit("add", {var, c.scalar(eps, x->type().dtype)})}));
  }
  return out;
}

V group_norm(ConvertCtx& c) {
  Ints s = static_spatial_shape(c, 0);  // a symbolic batch reads as -1
  if (s.size() < 2 || s[1] < 0) c.fail("input must be [N, C, ...] with static C, got " + ir::shape_str(c.type(0).shape));
  int64_t g = c.attr_int("num_groups");
  int64_t n = s[0], ch = s[1];
  if (g <= 0 || ch % g != 0) c.fail("channels " + std::to_string(ch) + " are not divisible into " + std::to_string(g) + " groups");
  int64_t group_size = ch / g;
  for (size_t d = 2; d < s.size(); ++d) group_size *= s[d];
  ir::Value* x = c.emit("reshape", {c.in(0)}, {{"shape", n < 0 ? Ints{-1, g, group_size} : Ints{n, g, -1}}});
  ir::Value* y = normalize(c, x, {2}, c.attr_float("epsilon", 1e-5));
  y = c.emit("reshape", {y}, {{"shape", s}});
  ir::Value* scale = c.in(1);
  ir::Value* bias = c.in(2);
  if (c.opset() < 21) {  // scale and bias per group: repeat each over its channels
    auto per_group = [&](ir::Value* v) {
      ir::Value* t = c.emit("expand", {c.emit("reshape", {v}, {{"shape", Ints{g, 1}}})}, {{"shape", Ints{g, ch / g}}});
      return c.emit("reshape", {t}, {{"shape", Ints{ch}}});
    };
    scale = per_group(scale);
    bias = per_group(bias);
  }
  int64_t r = static_cast<int64_t>(s.size());
  return {c.emit("add", {c.emit("mul", {y, per_channel(c, scale, r)}), per_channel(c, bias, r)})};
}

// RMSNormalization (opset 23) is kiln's rms_norm, computed in at least f32 whatever stash_type says.
// Its scale joins the op when it has the normalized shape and X's dtype; one that only broadcasts to
// that shape, or is of another type (Y takes the scale's), multiplies the result instead.
V rms_norm(ConvertCtx& c) {
  const int64_t axis = c.axis(c.attr_int("axis", -1), c.rank(0));
  ir::Value* x = c.in(0);
  ir::Value* scale = c.in(1);
  const ir::SymShape& xs = x->type().shape;
  const ir::SymShape normalized(xs.begin() + axis, xs.end());
  const bool joins = scale->type().shape == normalized && scale->type().dtype == x->type().dtype;
  ir::Value* y = c.emit("rms_norm", {x, joins ? scale : nullptr},
                        {{"axis", axis}, {"eps", c.attr_float("epsilon", 1e-5)}});
  return {joins ? y : c.emit("mul", {c.cast(y, scale->type().dtype), scale})};
}

// RotaryEmbedding (opset 23) as kiln's rotary_embedding, which takes cos and sin at full width
// beside x: the half-width caches ([max position + 1, rd/2] gathered by position_ids, or [B, S,
// rd/2]) are widened by a gather along their last dim (each angle twice: c0..c(h-1) c0..c(h-1),
// or c0 c0 c1 c1 .. interleaved) and given a heads dim. X is [B, H, S, D], or [B, S, H * D] with
// num_heads (split to [B, S, H, D] and back); only its first rd = rotary_embedding_dim elements of
// each head turn (all when 0), the rest pass through.
V rotary_embedding(ConvertCtx& c) {
  const int64_t rank = c.rank(0);
  if (rank != 3 && rank != 4)
    c.fail("input 'X' must be [batch, heads, seq, head] or [batch, seq, hidden], got " + ir::type_str(c.type(0)));
  const bool interleaved = c.attr_int("interleaved", 0) != 0;
  const ir::SymShape& xs = c.type(0).shape;
  if (xs.back().is_symbolic()) c.fail("the last dim of 'X' must be static, got " + ir::type_str(c.type(0)));
  ir::Value* x = c.in(0);
  Ints whole;  // a 3-D input's shape, its symbolic dim (at most one) as -1
  if (rank == 3) {
    const int64_t heads = c.attr_int("num_heads", 0);
    if (heads <= 0 || xs[2].size % heads != 0)
      c.fail("a 3-D input needs num_heads dividing its hidden size " + std::to_string(xs[2].size) + ", got " +
             std::to_string(heads));
    Ints split;
    for (size_t i = 0; i < 2; ++i) split.push_back(xs[i].is_symbolic() ? -1 : xs[i].size);
    if (std::count(split.begin(), split.end(), -1) > 1)
      c.fail("a 3-D input with both batch and sequence symbolic cannot be split into heads; fix one (--dim)");
    whole = {split[0], split[1], xs[2].size};
    split.insert(split.end(), {heads, xs[2].size / heads});
    x = c.emit("reshape", {x}, {{"shape", split}});
  }
  const int64_t d = x->type().shape.back().size;
  const int64_t rd = c.attr_int("rotary_embedding_dim", 0) == 0 ? d : c.attr_int("rotary_embedding_dim", 0);
  if (rd <= 0 || rd > d || rd % 2 != 0)
    c.fail("rotary_embedding_dim " + std::to_string(rd) + " must be even and at most the head size " +
           std::to_string(d));
  std::vector<int64_t> twice;
  for (int64_t i = 0; i < rd; ++i) twice.push_back(interleaved ? i / 2 : i % (rd / 2));
  ir::Value* index = c.constant(from_vector(twice));
  auto widen = [&](ir::Value* cache) {
    if (c.has_input(3)) cache = c.emit("gather", {cache, c.in(3)}, {{"axis", int64_t{0}}});
    if (cache->type().shape.size() != 3)
      c.fail("cos and sin must be [batch, seq, rd/2] (or [positions, rd/2] with position_ids), got " +
             ir::type_str(cache->type()));
    cache = c.emit("gather", {cache, index}, {{"axis", int64_t{2}}});
    return c.emit("unsqueeze", {cache}, {{"dims", Ints{rank == 4 ? 1 : 2}}});
  };
  ir::Value* cos = widen(c.in(1));
  ir::Value* sin = widen(c.in(2));
  ir::Value* y;
  if (rd == d) {
    y = c.emit("rotary_embedding", {x, cos, sin}, {{"interleaved", interleaved}});
  } else {
    auto part = [&](int64_t from, int64_t to) {
      return c.emit("slice", {x}, {{"starts", Ints{from}}, {"ends", Ints{to}}, {"axes", Ints{-1}}});
    };
    ir::Value* turned = c.emit("rotary_embedding", {part(0, rd), cos, sin}, {{"interleaved", interleaved}});
    y = c.emit("concat", {turned, part(rd, d)}, {{"axis", int64_t{-1}}});
  }
  return {rank == 3 ? c.emit("reshape", {y}, {{"shape", whole}}) : y};
}

V lrn(ConvertCtx& c) {
  return {c.emit("lrn", {c.in(0)},
                 {{"size", c.attr_int("size")}, {"alpha", c.attr_float("alpha", 1e-4)},
                  {"beta", c.attr_float("beta", 0.75)}, {"bias", c.attr_float("bias", 1.0)}})};
}

V lp_norm(ConvertCtx& c) {
  int64_t axis = c.axis(c.attr_int("axis", -1), c.rank(0));
  int64_t p = c.attr_int("p", 2);
  ir::Value* x = c.in(0);
  ir::Value* n;
  if (p == 2) n = c.emit("norm", {x}, {{"axes", Ints{axis}}, {"keepdim", true}});
  else if (p == 1) n = c.emit("sum", {c.emit("abs", {x})}, {{"axes", Ints{axis}}, {"keepdim", true}});
  else c.fail("p must be 1 or 2, got " + std::to_string(p));
  // A zero norm gives 0, not 0/0 (ONNX's reference).
  DType dt = x->type().dtype;
  ir::Value* zero = c.emit("eq", {n, c.scalar(0, dt)});
  ir::Value* safe = c.emit("where", {zero, c.scalar(1, dt), n});
  return {c.emit("where", {zero, c.scalar(0, dt), c.emit("div", {x, safe})})};
}

V mvn(ConvertCtx& c) {
  Ints axes = c.attr_ints("axes", {0, 2, 3});
  ir::Value* x = c.in(0);
  DType dt = x->type().dtype;
  ir::Value* mean = c.emit("mean", {x}, {{"axes", axes}, {"keepdim", true}});
  ir::Value* sq_mean = c.emit("mean", {c.emit("mul", {x, x})}, {{"axes", axes}, {"keepdim", true}});
  ir::Value* var = c.emit("sub", {sq_mean, c.emit("mul", {mean, mean})});
  ir::Value* sd = c.emit("add", {c.emit("sqrt", {var}), c.scalar(1e-9, dt)});
  return {c.emit("div", {c.emit("sub", {x, mean}), sd})};
}

// ---- matrix products ------------------------------------------------------------------------------------
V gemm(ConvertCtx& c) {
  check_same_types(c);
  return {c.emit("gemm", {c.in(0), c.in(1), c.in_or_null(2)},
                 {{"alpha", c.attr_float("alpha", 1.0)}, {"beta", c.attr_float("beta", 1.0)},
                  {"trans_a", c.attr_int("transA", 0) != 0}, {"trans_b", c.attr_int("transB", 0) != 0}})};
}

V matmul(ConvertCtx& c) {
  check_same_types(c);
  return {c.emit("matmul", {c.in(0), c.in(1)})};
}

// Note [Einsum as products]
// Einsum (HuggingFace's Funnel Transformer writes its attention scores with one) becomes the ops
// kiln has: each operand's labels that nothing else reads are summed out first; then operands are
// contracted left to right, each pair as one batched matmul: A permuted to [batch, left,
// contracted] and B to [batch, contracted, right], the left, contracted and right labels each
// merged into one dim (batch dims stay apart, so size-1 batch dims broadcast as in MatMul), the
// product reshaped back to [batch, left, right]; the result is permuted to the output's order.
// An ellipsis stands for the leading dims an operand has beyond its letters (aligned from the
// right, as NumPy does); without "->" the output is the letters that occur once, sorted, after the
// ellipsis. A letter repeated within one operand (a diagonal) is refused by name.
struct EinsumTerm {
  ir::Value* v = nullptr;
  std::vector<int> labels;  // one per dim: a letter's char code, or -(k + 1) for ellipsis dim k from the right
};

std::vector<int> einsum_labels(ConvertCtx& c, const std::string& term, int64_t rank, const std::string& where) {
  std::vector<int> letters;
  int64_t ellipsis_at = -1;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.compare(i, 3, "...") == 0) {
      if (ellipsis_at >= 0) c.fail("equation term '" + term + "' (" + where + ") has two ellipses");
      ellipsis_at = static_cast<int64_t>(letters.size());
      i += 2;
    } else if (std::isalpha(static_cast<unsigned char>(term[i]))) {
      letters.push_back(term[i]);
    } else {
      c.fail("equation term '" + term + "' (" + where + ") has '" + term[i] + "', not a letter or '...'");
    }
  }
  const int64_t n = static_cast<int64_t>(letters.size());
  if (ellipsis_at < 0 ? n != rank : n > rank)
    c.fail("equation term '" + term + "' names " + std::to_string(n) + " dims but " + where + " has rank " +
           std::to_string(rank));
  std::vector<int> labels(letters.begin(), letters.end());
  if (ellipsis_at >= 0) {
    std::vector<int> e;
    for (int64_t k = rank - n; k-- > 0;) e.push_back(-static_cast<int>(k) - 1);
    labels.insert(labels.begin() + ellipsis_at, e.begin(), e.end());
  }
  return labels;
}

// One dim standing for a group of dims (their product), as reshape's target needs it.
ir::Dim dims_product(const std::vector<ir::Dim>& ds, ConvertCtx& c) {
  int64_t scale = 1;
  std::string symbol;
  for (const ir::Dim& d : ds) {
    if (!d.is_symbolic()) {
      scale *= d.size;
    } else if (symbol.empty()) {
      symbol = d.symbol, scale *= d.scale;
    } else {
      c.fail("merges two symbolic dims (" + symbol + ", " + d.symbol + ") into one; give them sizes");
    }
  }
  return symbol.empty() ? ir::Dim(scale) : ir::Dim::sym(symbol, scale);
}

ir::Value* reshape_to(ConvertCtx& c, ir::Value* v, const std::vector<ir::Dim>& target) {
  if (v->type().shape == target) return v;
  Ints ints;
  int symbolic = 0;
  for (const ir::Dim& d : target) {
    symbolic += d.is_symbolic();
    ints.push_back(d.is_symbolic() ? -1 : d.size);
  }
  if (symbolic > 1) c.fail("needs a reshape to " + ir::shape_str(target) + ", which has more than one symbolic dim");
  return c.emit("reshape", {v}, {{"shape", ints}});
}

ir::Value* permute_to(ConvertCtx& c, const EinsumTerm& t, const std::vector<int>& order) {
  Ints dims;
  for (int l : order)
    dims.push_back(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin());
  Ints identity(dims.size());
  std::iota(identity.begin(), identity.end(), 0);
  return dims == identity ? t.v : c.emit("permute", {t.v}, {{"dims", dims}});
}

// t with the labels not in `keep` summed out.
EinsumTerm einsum_sum_out(ConvertCtx& c, EinsumTerm t, const std::vector<int>& keep) {
  Ints axes;
  std::vector<int> left;
  for (size_t i = 0; i < t.labels.size(); ++i) {
    if (std::find(keep.begin(), keep.end(), t.labels[i]) == keep.end()) axes.push_back(static_cast<int64_t>(i));
    else left.push_back(t.labels[i]);
  }
  if (axes.empty()) return t;
  return {c.emit("sum", {t.v}, {{"axes", axes}, {"keepdim", false}}), left};
}

EinsumTerm einsum_contract(ConvertCtx& c, const EinsumTerm& a, const EinsumTerm& b, const std::vector<int>& keep) {
  auto has = [](const std::vector<int>& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); };
  std::vector<int> batch, left, contracted, right;
  for (int l : a.labels) {
    if (has(b.labels, l)) (has(keep, l) ? batch : contracted).push_back(l);
    else left.push_back(l);
  }
  for (int l : b.labels)
    if (!has(a.labels, l)) right.push_back(l);
  auto dim_of = [](const EinsumTerm& t, int l) {
    return t.v->type().shape[static_cast<size_t>(std::find(t.labels.begin(), t.labels.end(), l) - t.labels.begin())];
  };
  auto group = [&](const EinsumTerm& t, const std::vector<int>& ls) {
    std::vector<ir::Dim> ds;
    for (int l : ls) ds.push_back(dim_of(t, l));
    return ds;
  };
  auto shape_of = [&](const EinsumTerm& t, const std::vector<int>& g1, const std::vector<int>& g2) {
    std::vector<ir::Dim> s = group(t, batch);
    s.push_back(dims_product(group(t, g1), c));
    s.push_back(dims_product(group(t, g2), c));
    return s;
  };
  std::vector<int> ao = batch, bo = batch;
  ao.insert(ao.end(), left.begin(), left.end());
  ao.insert(ao.end(), contracted.begin(), contracted.end());
  bo.insert(bo.end(), contracted.begin(), contracted.end());
  bo.insert(bo.end(), right.begin(), right.end());
  ir::Value* am = reshape_to(c, permute_to(c, a, ao), shape_of(a, left, contracted));
  ir::Value* bm = reshape_to(c, permute_to(c, b, bo), shape_of(b, contracted, right));
  ir::Value* p = c.emit("matmul", {am, bm});
  // [batch (broadcast), left..., right...]
  std::vector<ir::Dim> out(p->type().shape.begin(), p->type().shape.begin() + static_cast<int64_t>(batch.size()));
  for (const ir::Dim& d : group(a, left)) out.push_back(d);
  for (const ir::Dim& d : group(b, right)) out.push_back(d);
  std::vector<int> labels = batch;
  labels.insert(labels.end(), left.begin(), left.end());
  labels.insert(labels.end(), right.begin(), right.end());
  return {reshape_to(c, p, out), labels};
}

V einsum(ConvertCtx& c) {
  check_same_types(c);
  std::string eq;
  for (char ch : c.attr_string("equation", "")) if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (terms.size() != c.num_inputs())
    c.fail("equation '" + eq + "' has " + std::to_string(terms.size()) + " input term(s) for " +
           std::to_string(c.num_inputs()) + " input(s)");
  std::vector<EinsumTerm> ops;
  int64_t ellipsis_dims = 0;
  std::map<int, int> count;
  for (size_t i = 0; i < terms.size(); ++i) {
    std::vector<int> ls = einsum_labels(c, terms[i], c.rank(i), "input #" + std::to_string(i));
    for (size_t j = 0; j < ls.size(); ++j) {
      if (ls[j] >= 0 && std::count(ls.begin(), ls.end(), ls[j]) > 1)
        c.fail("label '" + std::string(1, static_cast<char>(ls[j])) + "' repeats within input #" + std::to_string(i) +
               " ('" + terms[i] + "'): diagonals are not supported");
      ++count[ls[j]];
      if (ls[j] < 0) ellipsis_dims = std::max<int64_t>(ellipsis_dims, -ls[j]);
    }
    ops.push_back({c.in(i), ls});
  }
  std::vector<int> out;
  if (arrow == std::string::npos) {
    for (int64_t k = ellipsis_dims; k-- > 0;) out.push_back(-static_cast<int>(k) - 1);
    for (const auto& [l, n] : count)
      if (l >= 0 && n == 1) out.push_back(l);
  } else {
    const std::string rhs = eq.substr(arrow + 2);
    const bool has_ellipsis = rhs.find("...") != std::string::npos;
    int64_t letters = 0;
    for (char ch : rhs) letters += std::isalpha(static_cast<unsigned char>(ch)) != 0;
    out = einsum_labels(c, rhs, letters + (has_ellipsis ? ellipsis_dims : 0), "the output");
    for (int l : out)
      if (!count.count(l))
        c.fail("output label '" + std::string(1, static_cast<char>(l)) + "' is in no input of '" + eq + "'");
  }
  // What the ops from index i on, and the output, still read.
  auto needed_after = [&](size_t i) {
    std::vector<int> keep = out;
    for (size_t j = i; j < ops.size(); ++j) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    return keep;
  };
  std::vector<EinsumTerm> summed;
  for (size_t i = 0; i < ops.size(); ++i) {
    std::vector<int> keep = out;
    for (size_t j = 0; j < ops.size(); ++j)
      if (j != i) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
    summed.push_back(einsum_sum_out(c, ops[i], keep));
  }
  EinsumTerm acc = summed[0];
  for (size_t i = 1; i < summed.size(); ++i) {
    std::vector<int> keep = needed_after(i + 1);
    acc = einsum_sum_out(c, einsum_contract(c, acc, summed[i], keep), keep);
  }
  acc = einsum_sum_out(c, acc, out);
  return {permute_to(c, acc, out)};
}

// ---- softmax family ---------------------------------------------------------------------------------------
// Before opset 13 these coerce the input to 2-D at `axis` (default 1) and work on the second dim.
template <class F>
V softmax_like(ConvertCtx& c, F apply) {
  int64_t r = c.rank(0);
  if (c.opset() >= 13) return {apply(c.in(0), c.axis(c.attr_int("axis", -1), r))};
  int64_t axis = c.axis(c.attr_int("axis", 1), r);
  Shape s = c.static_shape(0);
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < r; ++i) (i < axis ? outer : inner) *= s[static_cast<size_t>(i)];
  ir::Value* x2 = c.emit("reshape", {c.in(0)}, {{"shape", Ints{outer, inner}}});
  return {c.emit("reshape", {apply(x2, 1)}, {{"shape", s}})};
}

V softmax(ConvertCtx& c) {
  return softmax_like(c, [&](ir::Value* x, int64_t a) { return c.emit("softmax", {x}, {{"axis", a}}); });
}
V log_softmax(ConvertCtx& c) {
  return softmax_like(c, [&](ir::Value* x, int64_t a) { return c.emit("log_softmax", {x}, {{"axis", a}}); });
}
V hardmax(ConvertCtx& c) {
  return softmax_like(c, [&](ir::Value* x, int64_t a) {
    ir::Value* idx = c.emit("argmax", {x}, {{"axis", a}});
    int64_t depth = 0;
    const auto& d = x->type().shape[static_cast<size_t>(a)];
    if (d.is_symbolic()) c.fail("Hardmax over symbolic dim " + d.symbol);
    depth = d.size;
    return c.emit("one_hot", {idx}, {{"depth", depth}, {"axis", a}, {"dtype", x->type().dtype}});
  });
}

// ---- losses --------------------------------------------------------------------------------------------
// NegativeLogLikelihoodLoss on log-probabilities `x` [N, C, d...] and targets [N, d...].
ir::Value* nll(ConvertCtx& c, ir::Value* x, ir::Value* target, ir::Value* weight) {
  DType dt = x->type().dtype;
  std::string reduction = c.attr_string("reduction", "mean");
  bool has_ignore = c.has_attr("ignore_index");
  int64_t ignore = c.attr_int("ignore_index", 0);
  ir::Value* mask = nullptr;
  ir::Value* safe = target;
  if (has_ignore) {
    mask = c.emit("ne", {target, c.scalar(static_cast<double>(ignore), target->type().dtype)});
    safe = c.emit("where", {mask, target, c.scalar(0, target->type().dtype)});
  }
  ir::Value* picked = c.emit("gather_elements", {x, c.emit("unsqueeze", {safe}, {{"dims", Ints{1}}})}, {{"axis", int64_t{1}}});
  ir::Value* loss = c.emit("neg", {c.emit("squeeze", {picked}, {{"dims", Ints{1}}})});
  ir::Value* w = weight ? c.emit("gather", {weight, safe}, {{"axis", int64_t{0}}}) : nullptr;
  if (mask) {
    ir::Value* m = c.cast(mask, dt);
    w = w ? c.emit("mul", {w, m}) : m;
  }
  if (w) loss = c.emit("mul", {loss, w});
  if (reduction == "none") return loss;
  ir::Value* total = c.emit("sum", {loss});
  if (reduction == "sum") return total;
  if (reduction != "mean") c.fail("reduction '" + reduction + "' must be none, sum or mean");
  if (!w) return c.emit("mean", {loss});
  return c.emit("div", {total, c.emit("sum", {w})});
}

V nll_loss(ConvertCtx& c) { return {nll(c, c.in(0), c.in(1), c.in_or_null(2))}; }

V softmax_cross_entropy(ConvertCtx& c) {
  ir::Value* log_prob = c.emit("log_softmax", {c.in(0)}, {{"axis", int64_t{1}}});
  return {nll(c, log_prob, c.in(1), c.in_or_null(2)), log_prob};
}

}  // namespace

void add_nn_converters(std::map<std::string, Converter>& m) {
  m["Conv"] = conv;
  if (OpRegistry::instance().find("conv_transpose2d")) m["ConvTranspose"] = conv_transpose;
  m["MaxPool"] = max_pool;
  m["AveragePool"] = avg_pool;
  m["GlobalAveragePool"] = global_avg_pool;
  m["GlobalMaxPool"] = global_max_pool;
  if (OpRegistry::instance().find("lp_pool")) m["LpPool"] = lp_pool;
  m["GlobalLpPool"] = global_lp_pool;
  if (OpRegistry::instance().find("resize")) {
    m["Resize"] = resize;
    m["Upsample"] = upsample;
  }
  if (OpRegistry::instance().find("grid_sample")) m["GridSample"] = grid_sample;
  m["BatchNormalization"] = batch_norm;
  m["InstanceNormalization"] = instance_norm;
  m["LayerNormalization"] = layer_norm;
  m["GroupNormalization"] = group_norm;
  m["RMSNormalization"] = rms_norm;
  m["RotaryEmbedding"] = rotary_embedding;
  m["LRN"] = lrn;
  m["LpNormalization"] = lp_norm;
  m["MeanVarianceNormalization"] = mvn;
  m["Gemm"] = gemm;
  m["MatMul"] = matmul;
  m["Einsum"] = einsum;
  m["Softmax"] = softmax;
  m["LogSoftmax"] = log_softmax;
  m["Hardmax"] = hardmax;
  m["NegativeLogLikelihoodLoss"] = nll_loss;
  m["SoftmaxCrossEntropyLoss"] = softmax_cross_entropy;
}

}  // namespace kiln::onnx::detail
