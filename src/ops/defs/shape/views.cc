// View ops: outputs alias the input's storage; no kernel runs. reshape copies only when the
// strides cannot express the new shape (Note [Reshape as a view]).
#include <algorithm>
#include <limits>

#include "kiln/ops/shape.h"
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::rules_pending;

Tensor alias(const Tensor& x, int64_t offset, Shape shape, Strides strides) {
  auto impl = std::make_shared<TensorImpl>(*x.impl_ptr());
  impl->offset = offset;
  impl->shape = std::move(shape);
  impl->strides = std::move(strides);
  impl->autograd_meta.reset();  // the view's autograd state is set by autograd, not inherited
  impl->symbolic.reset();
  return Tensor(std::move(impl));
}

// Resolves one -1 and checks the element count.
Shape resolve_shape(const char* op, const Shape& in, Shape target) {
  int64_t known = 1, infer_at = -1;
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      KILN_CHECK(infer_at < 0, op, ": only one dimension may be -1 in ", shape_str(target));
      infer_at = static_cast<int64_t>(i);
    } else {
      KILN_CHECK(target[i] >= 0, op, ": invalid dimension ", target[i], " in ", shape_str(target));
      KILN_CHECK(target[i] == 0 || known <= std::numeric_limits<int64_t>::max() / target[i], op, ": shape ",
                 shape_str(target), " has more elements than int64 counts");
      known *= target[i];
    }
  }
  int64_t n = numel_of(in);
  if (infer_at >= 0) {
    KILN_CHECK(known != 0 && n % known == 0, op, ": cannot reshape a tensor of shape ", shape_str(in), " (", n,
               " elements) into ", shape_str(target));
    target[static_cast<size_t>(infer_at)] = n / known;
  }
  KILN_CHECK(numel_of(target) == n, op, ": cannot reshape a tensor of shape ", shape_str(in), " (", n,
             " elements) into ", shape_str(target), " (", numel_of(target), " elements)");
  return target;
}

// Note [Reshape as a view]
// A reshape is a view when each group of old dims that maps onto a group of new dims is
// contiguous within itself (the stride chain holds); then the new strides follow from the group's
// innermost stride. Otherwise the data must be copied. Same rule as NumPy's and PyTorch's.
std::optional<Strides> view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& new_shape) {
  if (numel_of(old_shape) == 0) return contiguous_strides(new_shape);
  Strides out(new_shape.size());
  // Drop size-1 old dims: they never constrain a view.
  Shape os;
  Strides ost;
  for (size_t i = 0; i < old_shape.size(); ++i)
    if (old_shape[i] != 1) { os.push_back(old_shape[i]); ost.push_back(old_strides[i]); }
  size_t oi = 0, ni = 0;
  while (ni < new_shape.size()) {
    if (new_shape[ni] == 1) {
      out[ni] = 1;
      ++ni;
      continue;
    }
    if (oi >= os.size()) return std::nullopt;
    // Grow an old group and a new group until their sizes match.
    size_t og = oi, ng = ni;
    int64_t osz = os[oi++], nsz = new_shape[ni++];
    while (osz != nsz) {
      if (osz < nsz) {
        if (oi >= os.size()) return std::nullopt;
        if (ost[oi - 1] != ost[oi] * os[oi]) return std::nullopt;  // not contiguous inside the group
        osz *= os[oi++];
      } else {
        if (ni >= new_shape.size()) return std::nullopt;
        nsz *= new_shape[ni++];
      }
    }
    for (size_t k = og + 1; k < oi; ++k)
      if (ost[k - 1] != ost[k] * os[k]) return std::nullopt;
    // Assign strides for new dims ng..ni-1 from the innermost old stride.
    int64_t stride = ost[oi - 1];
    for (size_t k = ni; k-- > ng;) {
      out[k] = stride;
      stride *= new_shape[k];
    }
  }
  if (oi != os.size()) return std::nullopt;
  return out;
}

std::vector<TensorMeta> infer_reshape(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  return {{x.dtype, resolve_shape("reshape", x.shape, c.attrs.get_ints("shape"))}};
}

std::vector<Tensor> view_reshape(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape s = resolve_shape("reshape", x.shape(), a.get_ints("shape"));
  if (auto st = view_strides(x.shape(), x.strides(), s)) return {alias(x, x.storage_offset(), s, *st)};
  KILN_CHECK(a.get_bool("allow_copy"), "view: a tensor of shape ", shape_str(x.shape()), " with strides ",
             shape_str(x.strides()), " cannot be viewed as ", shape_str(s),
             " without copying; use reshape() (which copies) or call contiguous() first");
  Tensor c = empty(x.shape(), TensorOptions(x.dtype(), x.device()));
  run_kernel(OpCall{op("clone"), {x}, Attrs{}, KILN_HERE, Tensor(), nullptr}, {c});
  return {alias(c, 0, s, contiguous_strides(s))};
}

std::vector<int64_t> check_perm(const char* opname, const std::vector<int64_t>& dims, int64_t rank) {
  KILN_CHECK(static_cast<int64_t>(dims.size()) == rank, opname, ": permutation ", shape_str(dims),
             " has ", dims.size(), " entries for a tensor of rank ", rank);
  std::vector<int64_t> p;
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t d : dims) {
    int64_t n = normalize_axis(d, rank, opname);
    KILN_CHECK(!seen[static_cast<size_t>(n)], opname, ": dimension ", d, " appears twice in permutation ", shape_str(dims));
    seen[static_cast<size_t>(n)] = true;
    p.push_back(n);
  }
  return p;
}

std::vector<TensorMeta> infer_permute(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  auto p = check_perm("permute", c.attrs.get_ints("dims"), static_cast<int64_t>(x.shape.size()));
  Shape s;
  for (int64_t d : p) s.push_back(x.shape[static_cast<size_t>(d)]);
  return {{x.dtype, s}};
}

std::vector<Tensor> view_permute(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  auto p = check_perm("permute", a.get_ints("dims"), x.dim());
  Shape s;
  Strides st;
  for (int64_t d : p) {
    s.push_back(x.shape()[static_cast<size_t>(d)]);
    st.push_back(x.strides()[static_cast<size_t>(d)]);
  }
  return {alias(x, x.storage_offset(), s, st)};
}

// ONNX Slice semantics for one axis: clamp start/end per the step's direction.
struct AxisSlice {
  int64_t start, size, step;
};
AxisSlice resolve_slice(int64_t dim, int64_t start, int64_t end, int64_t step) {
  KILN_CHECK(step != 0, "slice: step cannot be 0");
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
  } else {
    start = std::clamp<int64_t>(start, -1, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
  }
  int64_t size = 0;
  if (step > 0 && end > start) size = (end - start + step - 1) / step;
  if (step < 0 && start > end) size = (start - end + (-step) - 1) / (-step);
  return {size > 0 ? start : 0, size, step};
}

struct SliceSpec {
  std::vector<int64_t> axes;
  std::vector<AxisSlice> slices;
};
SliceSpec slice_spec(const Shape& shape, const Attrs& a) {
  const auto& starts = a.get_ints("starts");
  const auto& ends = a.get_ints("ends");
  std::vector<int64_t> axes = a.get_ints("axes");
  std::vector<int64_t> steps = a.get_ints("steps");
  int64_t rank = static_cast<int64_t>(shape.size());
  KILN_CHECK(starts.size() == ends.size(), "slice: starts has ", starts.size(), " entries but ends has ", ends.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  KILN_CHECK(axes.size() == starts.size() && steps.size() == starts.size(), "slice: starts, ends, axes and steps ",
             "must have the same length (", starts.size(), ", ", ends.size(), ", ", axes.size(), ", ", steps.size(), ")");
  KILN_CHECK(rank > 0 || axes.empty(), "slice: cannot slice a 0-d tensor (axes ", shape_str(axes),
             "); slice needs a tensor of rank >= 1");
  SliceSpec spec;
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t ax = normalize_axis(axes[i], rank, "slice");
    KILN_CHECK(std::find(spec.axes.begin(), spec.axes.end(), ax) == spec.axes.end(), "slice: axis ", axes[i], " repeated");
    spec.axes.push_back(ax);
    spec.slices.push_back(resolve_slice(shape[static_cast<size_t>(ax)], starts[i], ends[i], steps[i]));
  }
  return spec;
}

std::vector<TensorMeta> infer_slice(const InferCtx& c) {
  TensorMeta m = c.in(0);
  SliceSpec spec = slice_spec(m.shape, c.attrs);
  for (size_t i = 0; i < spec.axes.size(); ++i) m.shape[static_cast<size_t>(spec.axes[i])] = spec.slices[i].size;
  return {m};
}

std::vector<Tensor> view_slice(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  SliceSpec spec = slice_spec(x.shape(), a);
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t off = x.storage_offset();
  for (size_t i = 0; i < spec.axes.size(); ++i) {
    size_t ax = static_cast<size_t>(spec.axes[i]);
    const AxisSlice& sl = spec.slices[i];
    off += sl.start * st[ax];
    s[ax] = sl.size;
    st[ax] *= sl.step;
  }
  return {alias(x, off, s, st)};
}

std::vector<TensorMeta> infer_select(const InferCtx& c) {
  TensorMeta m = c.in(0);
  int64_t rank = static_cast<int64_t>(m.shape.size());
  KILN_CHECK(rank > 0, "select: cannot select from a 0-d tensor");
  int64_t d = normalize_axis(c.attrs.get_int("dim"), rank, "select");
  int64_t size = m.shape[static_cast<size_t>(d)];
  int64_t i = c.attrs.get_int("index");
  KILN_CHECK(i >= -size && i < size, "select: index ", i, " is out of range for dim ", d, " of size ", size);
  m.shape.erase(m.shape.begin() + d);
  return {m};
}

std::vector<Tensor> view_select(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  int64_t d = normalize_axis(a.get_int("dim"), x.dim(), "select");
  int64_t i = a.get_int("index");
  if (i < 0) i += x.shape()[static_cast<size_t>(d)];
  Shape s = x.shape();
  Strides st = x.strides();
  int64_t off = x.storage_offset() + i * st[static_cast<size_t>(d)];
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return {alias(x, off, s, st)};
}

// expand: ONNX Expand's two-way broadcast, with -1 keeping the input's dim (PyTorch).
Shape expand_shape(const Shape& in, Shape target) {
  int64_t lead = static_cast<int64_t>(target.size()) - static_cast<int64_t>(in.size());
  for (size_t i = 0; i < target.size(); ++i) {
    if (target[i] == -1) {
      KILN_CHECK(static_cast<int64_t>(i) >= lead && lead >= 0, "expand: -1 is only allowed for existing dims, got ",
                 shape_str(target), " for input ", shape_str(in));
      target[i] = in[i - static_cast<size_t>(lead)];
    }
  }
  return broadcast_shapes(in, target, "expand");
}

std::vector<TensorMeta> infer_expand(const InferCtx& c) {
  TensorMeta m = c.in(0);
  m.shape = expand_shape(m.shape, c.attrs.get_ints("shape"));
  return {m};
}

std::vector<Tensor> view_expand(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape s = expand_shape(x.shape(), a.get_ints("shape"));
  Strides st(s.size(), 0);
  size_t lead = s.size() - x.shape().size();  // broadcast_shapes: s has at least x's rank
  for (size_t i = 0; i < x.shape().size(); ++i)
    st[lead + i] = x.shape()[i] == 1 && s[lead + i] != 1 ? 0 : x.strides()[i];
  return {alias(x, x.storage_offset(), s, st)};
}

std::vector<int64_t> squeeze_dims(const Shape& shape, const std::vector<int64_t>& dims) {
  int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<int64_t> out;
  if (dims.empty()) {
    for (int64_t d = 0; d < rank; ++d)
      if (shape[static_cast<size_t>(d)] == 1) out.push_back(d);
    return out;
  }
  out = normalize_axes(dims, rank, "squeeze", false);
  for (int64_t d : out)
    KILN_CHECK(shape[static_cast<size_t>(d)] == 1, "squeeze: dim ", d, " has size ", shape[static_cast<size_t>(d)],
               ", not 1, in shape ", shape_str(shape));
  return out;
}

std::vector<TensorMeta> infer_squeeze(const InferCtx& c) {
  TensorMeta m = c.in(0);
  auto ds = squeeze_dims(m.shape, c.attrs.get_ints("dims"));
  for (size_t k = ds.size(); k-- > 0;) m.shape.erase(m.shape.begin() + ds[k]);
  return {m};
}

std::vector<Tensor> view_squeeze(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  auto ds = squeeze_dims(x.shape(), a.get_ints("dims"));
  Shape s = x.shape();
  Strides st = x.strides();
  for (size_t k = ds.size(); k-- > 0;) {
    s.erase(s.begin() + ds[k]);
    st.erase(st.begin() + ds[k]);
  }
  return {alias(x, x.storage_offset(), s, st)};
}

// Unsqueeze with ONNX semantics: axes index the output (rank + len(axes)).
std::vector<int64_t> unsqueeze_axes(size_t rank, const std::vector<int64_t>& dims) {
  KILN_CHECK(!dims.empty(), "unsqueeze: no dims given");
  return normalize_axes(dims, static_cast<int64_t>(rank + dims.size()), "unsqueeze", false);
}

std::vector<TensorMeta> infer_unsqueeze(const InferCtx& c) {
  TensorMeta m = c.in(0);
  for (int64_t d : unsqueeze_axes(m.shape.size(), c.attrs.get_ints("dims"))) m.shape.insert(m.shape.begin() + d, 1);
  return {m};
}

std::vector<Tensor> view_unsqueeze(std::span<const Tensor> in, const Attrs& a) {
  const Tensor& x = in[0];
  Shape s = x.shape();
  Strides st = x.strides();
  for (int64_t d : unsqueeze_axes(s.size(), a.get_ints("dims"))) {
    int64_t stride = static_cast<size_t>(d) < s.size() ? st[static_cast<size_t>(d)] * s[static_cast<size_t>(d)] : 1;
    s.insert(s.begin() + d, 1);
    st.insert(st.begin() + d, stride);
  }
  return {alias(x, x.storage_offset(), s, st)};
}

// ---- derivative rules ------------------------------------------------------------------------------
// Note [View gradients]: every view's gradient is written with kiln ops (reshape, permute, pad,
// slice, sum), so higher-order gradients and tracing work through them.

// g (of length `size` along `axis`) placed at start, start+step, ... of a zero tensor whose `axis`
// has length `dim`.
Tensor embed_axis(Tensor g, int64_t axis, int64_t dim, int64_t start, int64_t size, int64_t step) {
  const size_t ax = static_cast<size_t>(axis);
  Shape full = g.shape();
  full[ax] = dim;
  if (size == 0) return zeros(full, TensorOptions(g.dtype()));
  if (step < 0) {
    g = slice(g, {size - 1}, {std::numeric_limits<int64_t>::min()}, {axis}, {-1});  // reversed
    start += (size - 1) * step;
    step = -step;
  }
  if (step > 1) {
    Tensor u = g.unsqueeze(axis + 1);
    std::vector<int64_t> pads(2 * static_cast<size_t>(u.dim()), 0);
    pads[static_cast<size_t>(u.dim()) + ax + 1] = step - 1;
    u = pad(u, pads);
    Shape merged = g.shape();
    merged[ax] = size * step;
    g = slice(reshape(u, merged), {0}, {(size - 1) * step + 1}, {axis}, {1});
  }
  const int64_t len = g.shape()[ax];
  std::vector<int64_t> pads(2 * static_cast<size_t>(g.dim()), 0);
  pads[ax] = start;
  pads[static_cast<size_t>(g.dim()) + ax] = dim - start - len;
  return pad(g, pads);
}

VjpRule reshape_back() {
  return VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) { return std::vector<Tensor>{reshape(g[0], c.in_shape(0))}; },
                 {}, {}};
}

std::vector<Tensor> slice_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Shape& in = c.in_shape(0);
  SliceSpec spec = slice_spec(in, c.attrs);
  Tensor g = gs[0];
  for (size_t i = 0; i < spec.axes.size(); ++i) {
    const AxisSlice& sl = spec.slices[i];
    g = embed_axis(g, spec.axes[i], in[static_cast<size_t>(spec.axes[i])], sl.start, sl.size, sl.step);
  }
  return {g};
}

std::vector<Tensor> select_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const Shape& in = c.in_shape(0);
  int64_t d = normalize_axis(c.attrs.get_int("dim"), static_cast<int64_t>(in.size()), "select");
  int64_t i = c.attrs.get_int("index");
  if (i < 0) i += in[static_cast<size_t>(d)];
  return {embed_axis(gs[0].unsqueeze(d), d, in[static_cast<size_t>(d)], i, 1, 1)};
}

std::vector<Tensor> permute_vjp(const VjpCtx& c, std::span<const Tensor> gs) {
  const auto& p = c.attrs.get_ints("dims");
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(normalize_axis(p[i], static_cast<int64_t>(p.size()), "permute"))] = static_cast<int64_t>(i);
  return {permute(gs[0], inv)};
}

}  // namespace

void register_view_ops(OpRegistry& r) {
  rules_pending(r.add("reshape(Tensor x, int[] shape, bool allow_copy=true) -> Tensor"), "Reshape", 5)
      .infer(infer_reshape).view(view_reshape)
      .vjp(reshape_back()).doc("New shape with the same elements; a view when strides allow, else a copy (allow_copy=false: error).");
  rules_pending(r.add("permute(Tensor x, int[] dims) -> Tensor"), "Transpose", 1)
      .infer(infer_permute).view(view_permute).vjp(VjpRule{permute_vjp, {}, {}}).doc("Reorders dims: out.shape[i] = x.shape[dims[i]].");
  rules_pending(r.add("slice(Tensor x, int[] starts, int[] ends, int[] axes=[], int[] steps=[]) -> Tensor"), "Slice", 10)
      .infer(infer_slice).view(view_slice).vjp(VjpRule{slice_vjp, {}, {}}).doc("ONNX Slice: per-axis start/end/step, negative steps allowed.");
  rules_pending(r.add("select(Tensor x, int dim, int index) -> Tensor"))
      .infer(infer_select).view(view_select).vjp(VjpRule{select_vjp, {}, {}}).doc("x[..., index, ...] along dim, removing it.");
  rules_pending(r.add("expand(Tensor x, int[] shape) -> Tensor"), "Expand", 8)
      .infer(infer_expand).view(view_expand).vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) { return std::vector<Tensor>{defs::sum_to(g[0], c.in_shape(0))}; }, {}, {}}).doc("Broadcast to shape without copying (stride 0).");
  rules_pending(r.add("squeeze(Tensor x, int[] dims=[]) -> Tensor"), "Squeeze", 1)
      .infer(infer_squeeze).view(view_squeeze).vjp(reshape_back()).doc("Removes size-1 dims (all of them when dims is empty).");
  rules_pending(r.add("unsqueeze(Tensor x, int[] dims) -> Tensor"), "Unsqueeze", 1)
      .infer(infer_unsqueeze).view(view_unsqueeze).vjp(reshape_back()).doc("Inserts size-1 dims at the given output positions.");
}

// ---- public functions -------------------------------------------------------------------------------------

Tensor reshape(const Tensor& x, const Shape& shape, SourceLoc loc) {
  return dispatch1(op("reshape"), {x}, {{"shape", shape}}, loc);
}
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims, SourceLoc loc) {
  return dispatch1(op("permute"), {x}, {{"dims", dims}}, loc);
}
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1, SourceLoc loc) {
  int64_t r = x.dim();
  d0 = normalize_axis(d0, r, "transpose");
  d1 = normalize_axis(d1, r, "transpose");
  if (r == 0) return permute(x, {}, loc);  // as torch.transpose: dims 0 / -1 of a 0-d tensor name itself
  std::vector<int64_t> p(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) p[static_cast<size_t>(i)] = i;
  std::swap(p[static_cast<size_t>(d0)], p[static_cast<size_t>(d1)]);
  return permute(x, p, loc);
}
Tensor flatten(const Tensor& x, int64_t start_dim, int64_t end_dim, SourceLoc loc) {
  int64_t r = x.dim();
  if (r == 0) return reshape(x, {1}, loc);
  int64_t s = normalize_axis(start_dim, r, "flatten"), e = normalize_axis(end_dim, r, "flatten");
  KILN_CHECK(s <= e, "flatten: start_dim ", start_dim, " comes after end_dim ", end_dim);
  Shape out;
  for (int64_t i = 0; i < s; ++i) out.push_back(x.shape()[static_cast<size_t>(i)]);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= x.shape()[static_cast<size_t>(i)];
  out.push_back(m);
  for (int64_t i = e + 1; i < r; ++i) out.push_back(x.shape()[static_cast<size_t>(i)]);
  // Dim 0 is written as -1 (when the rest has elements): a trace with a symbolic batch then records
  // no batch size.
  if (numel_of(Shape(out.begin() + 1, out.end())) != 0) out[0] = -1;
  return reshape(x, out, loc);
}
Tensor squeeze(const Tensor& x, const std::vector<int64_t>& dims, SourceLoc loc) {
  return dispatch1(op("squeeze"), {x}, {{"dims", dims}}, loc);
}
Tensor unsqueeze(const Tensor& x, int64_t dim, SourceLoc loc) {
  return dispatch1(op("unsqueeze"), {x}, {{"dims", std::vector<int64_t>{dim}}}, loc);
}
Tensor expand(const Tensor& x, const Shape& shape, SourceLoc loc) {
  return dispatch1(op("expand"), {x}, {{"shape", shape}}, loc);
}
Tensor slice(const Tensor& x, const std::vector<int64_t>& starts, const std::vector<int64_t>& ends,
             const std::vector<int64_t>& axes, const std::vector<int64_t>& steps, SourceLoc loc) {
  return dispatch1(op("slice"), {x}, {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", steps}}, loc);
}

}  // namespace kiln
