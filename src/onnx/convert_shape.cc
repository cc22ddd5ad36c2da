// ONNX shape and data-movement operators → kiln: Reshape, Shape, Size, Flatten, Transpose,
// (Un)Squeeze, Concat, Split, Slice, Gather*, Scatter*, Expand, Tile, Pad, Constant,
// ConstantOfShape, Range, EyeLike, Trilu, OneHot, CumSum, DepthToSpace/SpaceToDepth.
// Inputs that kiln takes as attributes must be constant (Note [Folding at import]).
#include <cmath>
#include <algorithm>
#include <map>
#include <numeric>

#include "onnx/convert.h"
#include "onnx/tensor_proto.h"

namespace kiln::onnx::detail {
namespace {

using V = std::vector<ir::Value*>;

Tensor i64_tensor(const std::vector<int64_t>& v) { return from_vector(v); }

// Reshape's target as dims: 0 copies the input's dim (unless allowzero), -1 is inferred, and
// symbolic entries come from a symbolic shape value. kiln's reshape takes one unknown (-1), so the
// -1 entry is solved from the static sizes when every symbol cancels between input and target.
V reshape(ConvertCtx& c) {
  std::vector<ir::Dim> target;
  if (c.opset() < 5) {
    for (int64_t d : c.attr_ints("shape")) target.push_back(ir::Dim(d));
  } else {
    target = c.shape_dims(1, "shape");
  }
  bool allowzero = c.attr_int("allowzero", 0) != 0;
  const auto& in = c.type(0).shape;
  int64_t infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i].is_symbolic()) continue;
    int64_t d = target[i].size;
    if (d == 0 && !allowzero) {
      if (i >= in.size()) c.fail("shape[" + std::to_string(i) + "] = 0 copies a dim the input (rank " +
                                 std::to_string(in.size()) + ") does not have");
      target[i] = in[i];
    } else if (d == -1) {
      if (infer_at >= 0) c.fail("shape has more than one -1");
      infer_at = static_cast<int64_t>(i);
    } else if (d < 0) {
      c.fail("shape[" + std::to_string(i) + "] = " + std::to_string(d) + " is invalid");
    }
  }
  auto symbolic_count = [&] {
    return std::count_if(target.begin(), target.end(), [](const ir::Dim& d) { return d.is_symbolic(); });
  };
  if (infer_at >= 0 && symbolic_count() > 0) {
    // Solve -1: the symbols must appear equally often in the input and the target.
    std::map<std::string, int> balance;
    int64_t in_static = 1, out_static = 1;
    // A scaled symbol (4*batch) counts its symbol once and its scale as a static factor.
    for (const auto& d : in) {
      if (d.is_symbolic()) ++balance[d.symbol];
      in_static *= d.is_symbolic() ? d.scale : d.size;
    }
    for (size_t i = 0; i < target.size(); ++i) {
      if (static_cast<int64_t>(i) == infer_at) continue;
      if (target[i].is_symbolic()) --balance[target[i].symbol];
      out_static *= target[i].is_symbolic() ? target[i].scale : target[i].size;
    }
    bool cancels = std::all_of(balance.begin(), balance.end(), [](const auto& kv) { return kv.second == 0; });
    if (!cancels || out_static == 0 || in_static % out_static != 0)
      c.fail("cannot infer the -1 of target " + ir::shape_str(target) + " from input " + ir::shape_str(in) +
             " (symbolic dims do not cancel)");
    target[static_cast<size_t>(infer_at)] = ir::Dim(in_static / out_static);
    infer_at = -1;
  }
  if (symbolic_count() > 1 || (symbolic_count() == 1 && infer_at >= 0))
    c.fail("target shape " + ir::shape_str(target) + " has more than one unknown dim (kiln's reshape infers one)");
  std::vector<int64_t> ints;
  for (const auto& d : target) ints.push_back(d.is_symbolic() ? -1 : d.size);
  return {c.emit("reshape", {c.in(0)}, {{"shape", ints}})};
}

V shape(ConvertCtx& c) {
  const auto& sym = c.type(0).shape;
  bool is_static = std::none_of(sym.begin(), sym.end(), [](const ir::Dim& d) { return d.is_symbolic(); });
  if (!is_static) {
    int64_t r = static_cast<int64_t>(sym.size());
    int64_t start = c.attr_int("start", 0), end = c.attr_int("end", r);
    if (start < 0) start += r;
    if (end < 0) end += r;
    start = std::clamp<int64_t>(start, 0, r);
    end = std::clamp<int64_t>(end, 0, r);
    std::vector<ir::Dim> dims(sym.begin() + start, sym.begin() + std::max(start, end));
    return {c.symbolic_shape(dims)};
  }
  Shape s = c.static_shape(0);
  int64_t r = static_cast<int64_t>(s.size());
  int64_t start = c.attr_int("start", 0), end = c.attr_int("end", r);
  if (start < 0) start += r;
  if (end < 0) end += r;
  start = std::clamp<int64_t>(start, 0, r);
  end = std::clamp<int64_t>(end, 0, r);
  std::vector<int64_t> dims;
  for (int64_t i = start; i < end; ++i) dims.push_back(s[static_cast<size_t>(i)]);
  return {c.constant(i64_tensor(dims))};
}

V size(ConvertCtx& c) { return {c.constant(full({}, numel_of(c.static_shape(0)), TensorOptions(DType::i64)))}; }

V flatten(ConvertCtx& c) {
  const auto& s = c.type(0).shape;
  int64_t r = static_cast<int64_t>(s.size());
  int64_t axis = c.attr_int("axis", 1);
  if (axis < 0) axis += r;
  if (axis < 0 || axis > r) c.fail("axis " + std::to_string(c.attr_int("axis", 1)) + " is out of range for rank " + std::to_string(r));
  // [prod(dims before axis), prod(dims from axis)]; a side holding a symbolic dim becomes -1.
  int64_t outer = 1, inner = 1;
  bool outer_sym = false, inner_sym = false;
  for (int64_t i = 0; i < r; ++i) {
    const auto& d = s[static_cast<size_t>(i)];
    if (d.is_symbolic()) (i < axis ? outer_sym : inner_sym) = true;
    else (i < axis ? outer : inner) *= d.size;
  }
  if (outer_sym && inner_sym) c.fail("both sides of axis " + std::to_string(axis) + " hold symbolic dims of " + ir::shape_str(s));
  return {c.emit("reshape", {c.in(0)}, {{"shape", std::vector<int64_t>{outer_sym ? -1 : outer, inner_sym ? -1 : inner}}})};
}

V transpose(ConvertCtx& c) {
  int64_t r = c.rank(0);
  std::vector<int64_t> perm = c.attr_ints("perm");
  if (perm.empty())
    for (int64_t i = r - 1; i >= 0; --i) perm.push_back(i);
  return {c.emit("permute", {c.in(0)}, {{"dims", perm}})};
}

std::vector<int64_t> axes_arg(ConvertCtx& c, size_t input, int since_input_opset) {
  if (c.opset() < since_input_opset) return c.attr_ints("axes");
  return c.has_input(input) ? c.const_ints(input, "axes") : std::vector<int64_t>{};
}

V squeeze(ConvertCtx& c) {
  std::vector<int64_t> axes = axes_arg(c, 1, 13);
  int64_t r = c.rank(0);
  for (auto& a : axes) a = c.axis(a, r, "axes entry");
  return {c.emit("squeeze", {c.in(0)}, {{"dims", axes}})};
}

V unsqueeze(ConvertCtx& c) {
  std::vector<int64_t> axes = axes_arg(c, 1, 13);
  int64_t out_rank = c.rank(0) + static_cast<int64_t>(axes.size());
  for (auto& a : axes) a = c.axis(a, out_rank, "axes entry");
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) c.fail("axes has a repeated entry");
  return {c.emit("unsqueeze", {c.in(0)}, {{"dims", axes}})};
}

V concat(ConvertCtx& c) {
  V ins;
  for (size_t i = 0; i < c.num_inputs(); ++i)
    if (c.has_input(i)) ins.push_back(c.in(i));
  int64_t axis = c.axis(c.attr_int("axis"), c.rank(0));
  return {c.emit("concat", ins, {{"axis", axis}})};
}

V split(ConvertCtx& c) {
  const auto& s = c.type(0).shape;
  int64_t axis = c.axis(c.attr_int("axis", 0), static_cast<int64_t>(s.size()));
  if (s[static_cast<size_t>(axis)].is_symbolic()) c.fail("splitting symbolic dim " + s[static_cast<size_t>(axis)].symbol);
  int64_t n = s[static_cast<size_t>(axis)].size;
  std::vector<int64_t> sizes = c.opset() < 13 ? c.attr_ints("split") : (c.has_input(1) ? c.const_ints(1, "split") : std::vector<int64_t>{});
  if (sizes.empty()) {
    int64_t parts = c.opset() >= 18 && c.has_attr("num_outputs") ? c.attr_int("num_outputs") : c.node().output_size();
    if (parts <= 0) c.fail("cannot split into " + std::to_string(parts) + " parts");
    int64_t each = (n + parts - 1) / parts;
    if (c.opset() < 18 && n % parts != 0)
      c.fail("dim " + std::to_string(n) + " does not split evenly into " + std::to_string(parts) + " outputs");
    for (int64_t left = n; left > 0; left -= each) sizes.push_back(std::min(each, left));
    while (static_cast<int64_t>(sizes.size()) < parts) sizes.push_back(0);
  }
  return c.emit_multi("split", {c.in(0)}, {{"sizes", sizes}, {"axis", axis}});
}

V slice(ConvertCtx& c) {
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.opset() < 10) {
    starts = c.attr_ints("starts");
    ends = c.attr_ints("ends");
    axes = c.attr_ints("axes");
  } else {
    starts = c.const_ints(1, "starts");
    ends = c.const_ints(2, "ends");
    if (c.has_input(3)) axes = c.const_ints(3, "axes");
    if (c.has_input(4)) steps = c.const_ints(4, "steps");
  }
  int64_t r = c.rank(0);
  for (auto& a : axes) a = c.axis(a, r, "axes entry");
  return {c.emit("slice", {c.in(0)}, {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}})};
}

V gather(ConvertCtx& c) {
  int64_t axis = c.axis(c.attr_int("axis", 0), c.rank(0));
  return {c.emit("gather", {c.in(0), c.in(1)}, {{"axis", axis}})};
}

V gather_elements(ConvertCtx& c) {
  int64_t axis = c.axis(c.attr_int("axis", 0), c.rank(0));
  return {c.emit("gather_elements", {c.in(0), c.in(1)}, {{"axis", axis}})};
}

V scatter_elements(ConvertCtx& c) {
  int64_t axis = c.axis(c.attr_int("axis", 0), c.rank(0));
  std::string red = c.attr_string("reduction", "none");
  if (red == "none") return {c.emit("scatter", {c.in(0), c.in(1), c.in(2)}, {{"axis", axis}})};
  if (red == "add") return {c.emit("scatter_add", {c.in(0), c.in(1), c.in(2)}, {{"axis", axis}})};
  c.fail("reduction '" + red + "' is not supported (kiln has none and add)");
}

V expand(ConvertCtx& c) {
  std::vector<ir::Dim> target = c.shape_dims(1, "shape");
  bool symbolic = std::any_of(target.begin(), target.end(), [](const ir::Dim& d) { return d.is_symbolic(); });
  const auto& in = c.type(0).shape;
  if (symbolic || std::any_of(in.begin(), in.end(), [](const ir::Dim& d) { return d.is_symbolic(); }))
    return {c.broadcast_to_dims(c.in(0), target)};  // Note [Symbolic shape arithmetic] in import.cc
  std::vector<int64_t> shape;
  for (const ir::Dim& d : target) {
    if (d.size < 0) c.fail("shape entry " + std::to_string(d.size) + " is negative");
    shape.push_back(d.size);
  }
  return {c.emit("expand", {c.in(0)}, {{"shape", shape}})};
}

// Note [Tiling by the batch]
// DeBERTa repeats its relative-position keys for every image, Tile(pos_key [heads, 2k, d],
// [batch * heads / heads, 1, 1]) as exported: a repeat count that is the batch symbol. Tiling axis i
// r times is x with a new axis of r before axis i, broadcast, and that axis merged into axis i (the
// repeat index the outer part): unsqueeze, broadcast_to_dims, reshape (-1 for the merged size).
// One symbolic repeat, on an input of static shape.
V tile(ConvertCtx& c) {
  if (!c.is_symbolic_value(1)) return {c.emit("tile", {c.in(0)}, {{"repeats", c.const_ints(1, "repeats")}})};
  const std::vector<ir::Dim> reps = c.shape_dims(1, "repeats");
  const auto& in = c.type(0).shape;
  if (reps.size() != in.size())
    c.fail("repeats has " + std::to_string(reps.size()) + " entries for an input of rank " + std::to_string(in.size()));
  int64_t axis = -1;
  std::vector<int64_t> fixed, dims;
  for (size_t i = 0; i < reps.size(); ++i) {
    if (in[i].is_symbolic()) c.fail("a symbolic repeat count needs an input of static shape, got " + ir::shape_str(in));
    if (reps[i].is_symbolic()) {
      if (axis >= 0) c.fail("more than one symbolic repeat count (" + ir::shape_str(reps) + ") is not supported");
      axis = static_cast<int64_t>(i);
    }
    fixed.push_back(reps[i].is_symbolic() ? 1 : reps[i].size);
    dims.push_back(in[i].size * fixed.back());
  }
  ir::Value* v = c.in(0);
  if (std::any_of(fixed.begin(), fixed.end(), [](int64_t r) { return r != 1; }))
    v = c.emit("tile", {v}, {{"repeats", fixed}});
  v = c.emit("unsqueeze", {v}, {{"dims", std::vector<int64_t>{axis}}});
  std::vector<ir::Dim> target;
  for (int64_t d : dims) target.emplace_back(d);
  target.insert(target.begin() + axis, reps[static_cast<size_t>(axis)]);
  v = c.broadcast_to_dims(v, target);
  std::vector<int64_t> merged = dims;
  merged[static_cast<size_t>(axis)] = -1;
  return {c.emit("reshape", {v}, {{"shape", merged}})};
}

V pad(ConvertCtx& c) {
  std::string mode = c.attr_string("mode", "constant");
  int64_t r = c.rank(0);
  std::vector<int64_t> pads;
  double value = 0;
  if (c.opset() < 11) {
    pads = c.attr_ints(c.opset() < 2 ? "paddings" : "pads");
    value = c.attr_float("value", 0.0);
  } else {
    pads = c.const_ints(1, "pads");
    if (c.has_input(2)) {
      Tensor v = c.const_input(2, "constant_value");
      value = v.to(DType::f64).contiguous().data<double>()[0];
    }
    if (c.has_input(3)) {  // opset 18: axes
      std::vector<int64_t> axes = c.const_ints(3, "axes");
      if (pads.size() != 2 * axes.size()) c.fail("pads has " + std::to_string(pads.size()) + " entries for " + std::to_string(axes.size()) + " axes");
      std::vector<int64_t> full_pads(static_cast<size_t>(2 * r), 0);
      for (size_t i = 0; i < axes.size(); ++i) {
        int64_t a = c.axis(axes[i], r, "axes entry");
        full_pads[static_cast<size_t>(a)] = pads[i];
        full_pads[static_cast<size_t>(a + r)] = pads[i + axes.size()];
      }
      pads = full_pads;
    }
  }
  if (mode == "wrap") c.fail("mode 'wrap' is not supported (kiln pads constant, reflect and edge)");
  return {c.emit("pad", {c.in(0)}, {{"pads", pads}, {"mode", mode}, {"value", value}})};
}

V constant(ConvertCtx& c) {
  if (c.has_attr("value")) return {c.constant(c.attr_tensor("value"))};
  if (c.has_attr("value_float")) return {c.constant(full({}, c.attr_float("value_float", 0), TensorOptions(DType::f32)))};
  if (c.has_attr("value_int")) return {c.constant(full({}, c.attr_int("value_int"), TensorOptions(DType::i64)))};
  if (c.has_attr("value_floats")) {
    std::vector<float> v;
    for (double d : c.attr_floats("value_floats")) v.push_back(static_cast<float>(d));
    return {c.constant(from_vector(v))};
  }
  if (c.has_attr("value_ints")) return {c.constant(from_vector(c.attr_ints("value_ints")))};
  if (c.has_attr("sparse_value")) c.fail("sparse constants are not supported");
  if (c.has_attr("value_string") || c.has_attr("value_strings")) c.fail("string constants are not supported (kiln has no string dtype)");
  c.fail("Constant has no value attribute");
}

V constant_of_shape(ConvertCtx& c) {
  std::vector<ir::Dim> sym_dims = c.shape_dims(0, "shape");
  if (std::any_of(sym_dims.begin(), sym_dims.end(), [](const ir::Dim& d) { return d.is_symbolic(); })) {
    Tensor value = c.has_attr("value") ? c.attr_tensor("value") : full({1}, 0.0, TensorOptions(DType::f32));
    if (value.numel() != 1) c.fail("'value' must hold one element, it has " + std::to_string(value.numel()));
    return {c.broadcast_to_dims(c.constant(value.reshape({})), sym_dims)};
  }
  std::vector<int64_t> dims = c.const_ints(0, "shape");
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) c.fail("shape entry " + std::to_string(d) + " is negative");
    if (d > 0 && n > std::numeric_limits<int64_t>::max() / d) c.fail("shape overflows int64");
    n *= d;
  }
  Tensor value = c.has_attr("value") ? c.attr_tensor("value") : full({1}, 0.0, TensorOptions(DType::f32));
  if (value.numel() != 1) c.fail("'value' must hold one element, it has " + std::to_string(value.numel()));
  // The fill is an expand of the one value, folded by the importer (which bounds its size).
  ir::Value* one = c.constant(value.reshape({}));
  return {c.emit("expand", {one}, {{"shape", dims}})};
}

// Range(0, scale * symbol, delta): delta * [0, 1, ..., n) with n = scale / delta * symbol, an
// exclusive cumsum of ones broadcast to [n] (Note [Symbolic shape arithmetic] in import.cc).
V symbolic_range(ConvertCtx& c) {
  if (c.is_symbolic_value(0) || c.is_symbolic_value(2))
    c.fail("Range's start and delta must be static; only its limit may be a symbolic dim");
  std::vector<ir::Dim> limit = c.shape_dims(1, "limit");
  int64_t start = c.const_ints(0, "start").at(0), delta = c.const_ints(2, "delta").at(0);
  if (limit.size() != 1 || c.rank(1) != 0 || c.rank(0) != 0 || c.rank(2) != 0)
    c.fail("start, limit and delta must be scalars");
  const ir::Dim& l = limit[0];
  if (start != 0 || delta <= 0 || l.scale % delta != 0)
    c.fail("Range(" + std::to_string(start) + ", " + ir::dim_str(l) + ", " + std::to_string(delta) +
           ") has a length that is not a whole multiple of " + l.symbol + " (kiln needs start 0 and a delta that "
           "divides the limit's scale)");
  DType dt = c.dtype(1);
  ir::Value* ones = c.broadcast_to_dims(c.scalar(1, dt), {ir::Dim::sym(l.symbol, l.scale / delta)});
  ir::Value* idx = c.emit("cumsum", {ones}, {{"axis", int64_t{0}}, {"exclusive", true}, {"reverse", false}});
  if (delta != 1) idx = c.emit("mul", {idx, c.scalar(static_cast<double>(delta), idx->type().dtype)});
  return {c.cast(idx, dt)};
}

V range(ConvertCtx& c) {
  if (c.is_symbolic_value(0) || c.is_symbolic_value(1) || c.is_symbolic_value(2)) return symbolic_range(c);
  Tensor s = c.const_input(0, "start"), l = c.const_input(1, "limit"), d = c.const_input(2, "delta");
  DType dt = s.dtype();
  double start = s.to(DType::f64).item<double>(), limit = l.to(DType::f64).item<double>(),
         delta = d.to(DType::f64).item<double>();
  if (delta == 0) c.fail("delta is zero");
  double count = std::ceil((limit - start) / delta);
  if (std::isnan(count) || count > static_cast<double>(c.max_constant_elements()))
    c.fail("range of " + std::to_string(count) + " elements is over the importer's limit of " +
           std::to_string(c.max_constant_elements()));
  int64_t n = count > 0 ? static_cast<int64_t>(count) : 0;
  Tensor out = empty({n}, TensorOptions(DType::f64));
  double* p = out.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * delta;
  return {c.constant(out.to(dt))};
}

V eye_like(ConvertCtx& c) {
  Shape s = c.static_shape(0);
  if (s.size() != 2) c.fail("input must be 2-D, got " + shape_str(s));
  DType dt = c.has_attr("dtype") ? from_onnx_dtype(static_cast<int32_t>(c.attr_int("dtype")), "EyeLike's dtype") : c.dtype(0);
  int64_t k = c.attr_int("k", 0);
  if (s[1] != 0 && s[0] > c.max_constant_elements() / s[1])
    c.fail("a " + shape_str(s) + " identity is over the importer's limit of " +
           std::to_string(c.max_constant_elements()) + " elements");
  Tensor out = zeros(s, TensorOptions(DType::f64));
  double* p = out.data<double>();
  for (int64_t i = 0; i < s[0]; ++i) {
    int64_t j = i + k;
    if (j >= 0 && j < s[1]) p[i * s[1] + j] = 1.0;
  }
  return {c.constant(out.to(dt))};
}

V trilu(ConvertCtx& c) {
  int64_t k = c.has_input(1) ? c.const_ints(1, "k").at(0) : 0;
  return {c.emit("trilu", {c.in(0)}, {{"k", k}, {"upper", c.attr_int("upper", 1) != 0}})};
}

V one_hot(ConvertCtx& c) {
  double depth_value = c.const_floats(1, "depth").at(0);
  if (!(depth_value >= 1 && depth_value <= static_cast<double>(c.max_constant_elements())))
    c.fail("depth " + std::to_string(depth_value) + " is not in [1, " + std::to_string(c.max_constant_elements()) + "]");
  int64_t depth = static_cast<int64_t>(depth_value);
  ir::Value* values = c.in(2);
  DType dt = values->type().dtype;
  int64_t axis = c.attr_int("axis", -1);
  ir::Value* idx = c.in(0);
  if (is_floating(idx->type().dtype)) idx = c.cast(idx, DType::i64);
  ir::Value* hot = c.emit("one_hot", {idx}, {{"depth", depth}, {"axis", axis}, {"dtype", dt}});
  // off + (on - off) * hot
  auto vs = c.emit_multi("split", {c.emit("reshape", {values}, {{"shape", std::vector<int64_t>{2}}})},
                         {{"sizes", std::vector<int64_t>{1, 1}}, {"axis", int64_t{0}}});
  ir::Value* off = c.emit("reshape", {vs[0]}, {{"shape", std::vector<int64_t>{}}});
  ir::Value* on = c.emit("reshape", {vs[1]}, {{"shape", std::vector<int64_t>{}}});
  return {c.emit("add", {off, c.emit("mul", {c.emit("sub", {on, off}), hot})})};
}

V cumsum(ConvertCtx& c) {
  int64_t axis = c.axis(c.const_ints(1, "axis").at(0), c.rank(0));
  ir::Value* y = c.emit("cumsum", {c.in(0)},
                        {{"axis", axis}, {"exclusive", c.attr_int("exclusive", 0) != 0}, {"reverse", c.attr_int("reverse", 0) != 0}});
  return {c.cast(y, c.dtype(0))};  // kiln's integer cumsum widens to i64; ONNX keeps T
}

V cumprod(ConvertCtx& c) {
  int64_t axis = c.axis(c.const_ints(1, "axis").at(0), c.rank(0));
  ir::Value* y = c.emit("cumprod", {c.in(0)},
                        {{"axis", axis}, {"exclusive", c.attr_int("exclusive", 0) != 0}, {"reverse", c.attr_int("reverse", 0) != 0}});
  return {c.cast(y, c.dtype(0))};
}

V depth_to_space(ConvertCtx& c) {
  Shape s = c.static_shape(0);
  if (s.size() != 4) c.fail("input must be 4-D NCHW, got " + shape_str(s));
  int64_t b = c.attr_int("blocksize"), n = s[0], ch = s[1], h = s[2], w = s[3];
  if (b <= 0 || ch % (b * b) != 0) c.fail("channels " + std::to_string(ch) + " are not divisible by blocksize^2");
  std::string mode = c.attr_string("mode", "DCR");
  ir::Value* x = c.in(0);
  ir::Value* t;
  if (mode == "DCR") {
    t = c.emit("reshape", {x}, {{"shape", std::vector<int64_t>{n, b, b, ch / (b * b), h, w}}});
    t = c.emit("permute", {t}, {{"dims", std::vector<int64_t>{0, 3, 4, 1, 5, 2}}});
  } else if (mode == "CRD") {
    t = c.emit("reshape", {x}, {{"shape", std::vector<int64_t>{n, ch / (b * b), b, b, h, w}}});
    t = c.emit("permute", {t}, {{"dims", std::vector<int64_t>{0, 1, 4, 2, 5, 3}}});
  } else {
    c.fail("mode '" + mode + "' must be DCR or CRD");
  }
  return {c.emit("reshape", {t}, {{"shape", std::vector<int64_t>{n, ch / (b * b), h * b, w * b}}})};
}

V space_to_depth(ConvertCtx& c) {
  Shape s = c.static_shape(0);
  if (s.size() != 4) c.fail("input must be 4-D NCHW, got " + shape_str(s));
  int64_t b = c.attr_int("blocksize"), n = s[0], ch = s[1], h = s[2], w = s[3];
  if (b <= 0 || h % b != 0 || w % b != 0) c.fail("spatial dims are not divisible by blocksize");
  ir::Value* t = c.emit("reshape", {c.in(0)}, {{"shape", std::vector<int64_t>{n, ch, h / b, b, w / b, b}}});
  t = c.emit("permute", {t}, {{"dims", std::vector<int64_t>{0, 3, 5, 1, 2, 4}}});
  return {c.emit("reshape", {t}, {{"shape", std::vector<int64_t>{n, ch * b * b, h / b, w / b}}})};
}

V gather_nd(ConvertCtx& c) {
  return {c.emit("gather_nd", {c.in(0), c.in(1)}, {{"batch_dims", c.attr_int("batch_dims", 0)}})};
}

V scatter_nd(ConvertCtx& c) {
  return {c.emit("scatter_nd", {c.in(0), c.in(1), c.in(2)}, {{"reduction", c.attr_string("reduction", "none")}})};
}

}  // namespace

void add_shape_converters(std::map<std::string, Converter>& m) {
  m["Reshape"] = reshape;
  m["Shape"] = shape;
  m["Size"] = size;
  m["Flatten"] = flatten;
  m["Transpose"] = transpose;
  m["Squeeze"] = squeeze;
  m["Unsqueeze"] = unsqueeze;
  m["Concat"] = concat;
  m["Split"] = split;
  m["Slice"] = slice;
  m["Gather"] = gather;
  m["GatherElements"] = gather_elements;
  m["ScatterElements"] = scatter_elements;
  m["Scatter"] = scatter_elements;
  m["Expand"] = expand;
  m["Tile"] = tile;
  m["Pad"] = pad;
  m["Constant"] = constant;
  m["ConstantOfShape"] = constant_of_shape;
  m["Range"] = range;
  m["EyeLike"] = eye_like;
  m["Trilu"] = trilu;
  m["OneHot"] = one_hot;
  m["CumSum"] = cumsum;
  m["DepthToSpace"] = depth_to_space;
  m["SpaceToDepth"] = space_to_depth;
  if (OpRegistry::instance().find("cumprod")) m["CumProd"] = cumprod;
  if (OpRegistry::instance().find("gather_nd")) m["GatherND"] = gather_nd;
  if (OpRegistry::instance().find("scatter_nd")) m["ScatterND"] = scatter_nd;
}

}  // namespace kiln::onnx::detail
