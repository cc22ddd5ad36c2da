// Ops that make a larger tensor out of copies of the input: tile (repeat the whole tensor per
// dim) and pad (constant / reflect / edge borders; negative pads crop). Both are written as
// strided copies between views, so every dtype shares one loop per element size.
#include <algorithm>

#include "kiln/ops/index.h"
#include "kiln/ops/shape.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/shape/movement.h"

namespace kiln {

void register_pad_ops(OpRegistry& r);

namespace {

using defs::raw_view;
using kernels::cpu::copy_into;

// ---- tile ---------------------------------------------------------------------------------------------------

// repeats and the input shape aligned to the same rank (torch.tile: missing leading entries are 1).
struct TileSpec {
  Shape in_shape;
  std::vector<int64_t> repeats;
  Shape out_shape;
};

TileSpec tile_spec(const Shape& shape, const std::vector<int64_t>& repeats) {
  for (int64_t rep : repeats)
    KILN_CHECK(rep >= 0, "tile: repeats ", shape_str(repeats), " contains the negative count ", rep,
               " (x has shape ", shape_str(shape), ")");
  const size_t rank = std::max(shape.size(), repeats.size());
  TileSpec s;
  s.in_shape.assign(rank - shape.size(), 1);
  s.in_shape.insert(s.in_shape.end(), shape.begin(), shape.end());
  s.repeats.assign(rank - repeats.size(), 1);
  s.repeats.insert(s.repeats.end(), repeats.begin(), repeats.end());
  for (size_t d = 0; d < rank; ++d) s.out_shape.push_back(s.in_shape[d] * s.repeats[d]);
  return s;
}

std::vector<TensorMeta> infer_tile(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  return {{x.dtype, tile_spec(x.shape, c.attrs.get_ints("repeats")).out_shape}};
}

// The output seen as [r0, d0, r1, d1, ...] receives the input broadcast along each r (stride 0).
void tile_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  TileSpec s = tile_spec(x.shape(), k.attrs.get_ints("repeats"));
  const size_t lead = s.in_shape.size() - x.shape().size();
  Shape view_shape;
  Strides out_st, in_st;
  for (size_t d = 0; d < s.in_shape.size(); ++d) {
    const int64_t os = out.strides()[d];
    const int64_t xs = d < lead ? 0 : x.strides()[d - lead];
    view_shape.insert(view_shape.end(), {s.repeats[d], s.in_shape[d]});
    out_st.insert(out_st.end(), {s.in_shape[d] * os, os});
    in_st.insert(in_st.end(), {0, xs});
  }
  copy_into(raw_view(out, out.storage_offset(), view_shape, out_st),
            raw_view(x, x.storage_offset(), view_shape, in_st));
}

// ---- pad ----------------------------------------------------------------------------------------------------

enum class PadMode { constant, reflect, edge };

// Per dim: how many leading/trailing elements of x are cropped away (negative pads), the size
// that remains, and how many elements are added on each side.
struct PadSpec {
  PadMode mode;
  std::vector<int64_t> crop_begin, kept, add_begin, add_end;
  Shape out_shape;
};

PadSpec pad_spec(const Shape& shape, const std::vector<int64_t>& pads, const std::string& mode) {
  PadSpec s;
  if (mode == "constant") s.mode = PadMode::constant;
  else if (mode == "reflect") s.mode = PadMode::reflect;
  else if (mode == "edge") s.mode = PadMode::edge;
  else KILN_FAIL("pad: unknown mode '", mode, "'; expected \"constant\", \"reflect\" or \"edge\"");
  const size_t rank = shape.size();
  KILN_CHECK(pads.size() == 2 * rank, "pad: pads ", shape_str(pads), " has ", pads.size(),
             " entries but x has shape ", shape_str(shape), "; expected 2 * rank = ", 2 * rank,
             " entries [x1_begin, x2_begin, ..., x1_end, x2_end, ...]");
  for (size_t d = 0; d < rank; ++d) {
    const int64_t b = pads[d], e = pads[d + rank], n = shape[d];
    const int64_t kept = n + std::min<int64_t>(b, 0) + std::min<int64_t>(e, 0);
    KILN_CHECK(kept >= 0, "pad: pads ", shape_str(pads), " crop ", -std::min<int64_t>(b, 0) - std::min<int64_t>(e, 0),
               " elements from dim ", d, " of x (shape ", shape_str(shape), ") which has only ", n);
    const int64_t ab = std::max<int64_t>(b, 0), ae = std::max<int64_t>(e, 0);
    if (s.mode == PadMode::reflect)
      KILN_CHECK((ab < kept && ae < kept) || (ab == 0 && ae == 0), "pad: reflect padding (", ab, ", ", ae,
                 ") on dim ", d, " must be smaller than the dim, which has size ", kept,
                 " (x has shape ", shape_str(shape), ")");
    if (s.mode == PadMode::edge)
      KILN_CHECK(kept > 0 || (ab == 0 && ae == 0), "pad: edge padding of dim ", d, " needs a non-empty dim (x has shape ",
                 shape_str(shape), ")");
    s.crop_begin.push_back(-std::min<int64_t>(b, 0));
    s.kept.push_back(kept);
    s.add_begin.push_back(ab);
    s.add_end.push_back(ae);
    s.out_shape.push_back(kept + ab + ae);
  }
  return s;
}

std::vector<TensorMeta> infer_pad(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  return {{x.dtype, pad_spec(x.shape, c.attrs.get_ints("pads"), c.attrs.get_string("mode")).out_shape}};
}

// Note [Padding in place]
// The cropped input is copied into the centre of the output first. Reflect and edge borders are
// then filled dim by dim from the output itself: when dim d is filled, dims before it already span
// the whole output and dims after it only the centre, so each border slab copies one slab that is
// already complete. After the last dim the whole output is written.
void pad_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  if (out.numel() == 0) return;
  PadSpec s = pad_spec(x.shape(), k.attrs.get_ints("pads"), k.attrs.get_string("mode"));
  const size_t rank = s.kept.size();
  const Strides& ost = out.strides();

  if (s.mode == PadMode::constant && numel_of(s.kept) != out.numel())
    copy_into(out, scalar_tensor(k.attrs.get_float("value"), DType::f64));

  int64_t x_off = x.storage_offset(), centre_off = out.storage_offset();
  for (size_t d = 0; d < rank; ++d) {
    x_off += s.crop_begin[d] * x.strides()[d];
    centre_off += s.add_begin[d] * ost[d];
  }
  if (numel_of(s.kept) > 0)
    copy_into(raw_view(out, centre_off, s.kept, ost), raw_view(x, x_off, s.kept, x.strides()));
  if (s.mode == PadMode::constant) return;

  for (size_t d = 0; d < rank; ++d) {
    if (s.add_begin[d] == 0 && s.add_end[d] == 0) continue;
    Shape slab = s.out_shape;
    int64_t base = out.storage_offset();
    for (size_t e = d + 1; e < rank; ++e) {
      slab[e] = s.kept[e];
      base += s.add_begin[e] * ost[e];
    }
    slab[d] = 1;
    if (numel_of(slab) == 0) continue;
    const int64_t n = s.kept[d];
    auto fill = [&](int64_t j) {
      int64_t p = j - s.add_begin[d];  // position relative to the kept input
      if (s.mode == PadMode::edge) p = std::clamp<int64_t>(p, 0, n - 1);
      else p = p < 0 ? -p : 2 * (n - 1) - p;
      const int64_t src = s.add_begin[d] + p;
      copy_into(raw_view(out, base + j * ost[d], slab, ost), raw_view(out, base + src * ost[d], slab, ost));
    };
    for (int64_t j = 0; j < s.add_begin[d]; ++j) fill(j);
    for (int64_t j = s.add_begin[d] + n; j < s.out_shape[d]; ++j) fill(j);
  }
}


// Note [Pad gradient]
// Constant padding: the gradient is the cropped centre (pad with the negated pads; negative pads
// crop). Reflect and edge padding copy some input elements several times; they are separable
// per axis, so the gradient scatter-adds the output gradient back along one axis at a time, with
// the index of the input element each output position was copied from.
Tensor pad_index(int64_t n, int64_t begin, int64_t out_len, const std::string& mode) {
  std::vector<int64_t> idx(static_cast<size_t>(out_len));
  for (int64_t o = 0; o < out_len; ++o) {
    int64_t i = o - begin;
    if (mode == "reflect") {
      if (i < 0) i = -i;
      if (i >= n) i = 2 * (n - 1) - i;
    } else {
      i = std::clamp<int64_t>(i, 0, n - 1);
    }
    idx[static_cast<size_t>(o)] = i;
  }
  return from_vector<int64_t>(idx);
}

std::vector<Tensor> pad_vjp(const VjpCtx& c, std::span<const Tensor> g) {
  const std::string& mode = c.attrs.get_string("mode");
  std::vector<int64_t> pads = c.attrs.get_ints("pads");
  if (mode == "constant") {
    for (auto& p : pads) p = -p;
    return {pad(g[0], pads)};
  }
  const Shape& xs = c.in_shape(0);
  const size_t rank = xs.size();
  Tensor grad = g[0];
  for (size_t d = 0; d < rank; ++d) {
    int64_t begin = pads[d], end = pads[d + rank];
    if (begin == 0 && end == 0) continue;
    Shape to = grad.shape();
    const int64_t out_len = to[d];
    to[d] = xs[d];
    Shape index_shape(rank, 1);
    index_shape[d] = out_len;
    Tensor index = pad_index(xs[d], begin, out_len, mode).reshape(index_shape).expand(grad.shape()).contiguous();
    grad = scatter_add(zeros(to, TensorOptions(grad.dtype())), static_cast<int64_t>(d), index, grad);
  }
  return {grad};
}

}  // namespace

void register_pad_ops(OpRegistry& r) {
  defs::rules_pending(r.add("tile(Tensor x, int[] repeats) -> Tensor"), "Tile", 13)
      .infer(infer_tile)
      .kernel(DeviceType::cpu, DTypeSet::all(), tile_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Out dim d is repeats[d] copies of x's dim d: view it as [r0, d0, r1, d1, ...] and
                     // sum over the r axes.
                     const Shape& xs = c.in_shape(0);
                     std::vector<int64_t> reps = c.attrs.get_ints("repeats");
                     const size_t rank = std::max(xs.size(), reps.size());
                     reps.insert(reps.begin(), rank - reps.size(), 1);
                     Shape dims(rank - xs.size(), 1);
                     dims.insert(dims.end(), xs.begin(), xs.end());
                     Shape split_shape;
                     std::vector<int64_t> rep_axes;
                     for (size_t d = 0; d < rank; ++d) {
                       rep_axes.push_back(static_cast<int64_t>(split_shape.size()));
                       split_shape.push_back(reps[d]);
                       split_shape.push_back(dims[d]);
                     }
                     return std::vector<Tensor>{reshape(sum(reshape(g[0], split_shape), rep_axes), xs)};
                   },
                   {}, {}})
      .doc("Repeats x `repeats[d]` times along each dim (missing leading repeats are 1, as torch.tile).");
  defs::rules_pending(r.add("pad(Tensor x, int[] pads, str mode=\"constant\", float value=0.0) -> Tensor"), "Pad", 18)
      .infer(infer_pad)
      .kernel(DeviceType::cpu, DTypeSet::all(), pad_kernel)
      .vjp(VjpRule{pad_vjp, {}, {}})
      .doc("ONNX Pad: pads [x1_begin, ..., x1_end, ...] (negative crops); constant, reflect or edge borders.");
}

// ---- public functions -------------------------------------------------------------------------------------

Tensor tile(const Tensor& x, const std::vector<int64_t>& repeats, SourceLoc loc) {
  return dispatch1(op("tile"), {x}, {{"repeats", repeats}}, loc);
}

Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value, SourceLoc loc) {
  return dispatch1(op("pad"), {x}, {{"pads", pads}, {"mode", mode}, {"value", value}}, loc);
}

}  // namespace kiln
