// Joining and splitting along an axis: concat (promotes to the common dtype, like torch.cat),
// split (pieces of given sizes, one output per piece), and the compositions stack (unsqueeze +
// concat) and chunk (split with near-equal sizes).
#include <algorithm>

#include "kiln/ops/shape.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/shape/movement.h"

namespace kiln {

void register_join_ops(OpRegistry& r);

namespace {

using defs::raw_view;
using kernels::cpu::copy_into;

std::vector<TensorMeta> infer_concat(const InferCtx& c) {
  KILN_CHECK(c.num_inputs() > 0, "concat: expected at least one input tensor, got none");
  const TensorMeta& first = c.in(0);
  const size_t rank = first.shape.size();
  KILN_CHECK(rank > 0, "concat: input 0 is 0-d (", meta_str(first), "); concat joins tensors of rank >= 1 ",
             "(use stack to join 0-d tensors)");
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(rank), "concat");
  TensorMeta out = first;
  for (size_t i = 1; i < c.num_inputs(); ++i) {
    const TensorMeta& m = c.in(i);
    KILN_CHECK(m.shape.size() == rank, "concat: input ", i, " has shape ", shape_str(m.shape), " (rank ",
               m.shape.size(), ") but input 0 has shape ", shape_str(first.shape), " (rank ", rank,
               "); all inputs must have the same rank");
    for (size_t d = 0; d < rank; ++d)
      KILN_CHECK(static_cast<int64_t>(d) == axis || m.shape[d] == first.shape[d], "concat: input ", i,
                 " has shape ", shape_str(m.shape), " but input 0 has shape ", shape_str(first.shape),
                 "; they must match in every dim except the concat axis ", axis, " (dim ", d, " differs)");
    out.shape[static_cast<size_t>(axis)] += m.shape[static_cast<size_t>(axis)];
    out.dtype = promote_types(out.dtype, m.dtype);
  }
  return {out};
}

// Each input is copied into its slab of the output (inputs already share the output's dtype).
void concat_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), out.dim(), "concat"));
  int64_t offset = 0;
  for (const Tensor& x : k.inputs) {
    const int64_t n = x.shape()[axis];
    if (x.numel() > 0) {
      Shape s = out.shape();
      s[axis] = n;
      copy_into(raw_view(out, out.storage_offset() + offset * out.strides()[axis], s, out.strides()), x);
    }
    offset += n;
  }
}

std::vector<TensorMeta> infer_split(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  KILN_CHECK(!x.shape.empty(), "split: x is 0-d (", meta_str(x), "); split needs a tensor of rank >= 1");
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(x.shape.size()), "split");
  const auto& sizes = c.attrs.get_ints("sizes");
  KILN_CHECK(!sizes.empty(), "split: sizes is empty; give at least one piece");
  int64_t total = 0;
  std::vector<TensorMeta> out;
  for (int64_t s : sizes) {
    KILN_CHECK(s >= 0, "split: sizes ", shape_str(sizes), " contains the negative size ", s);
    total += s;
    TensorMeta m = x;
    m.shape[static_cast<size_t>(axis)] = s;
    out.push_back(std::move(m));
  }
  const int64_t dim = x.shape[static_cast<size_t>(axis)];
  KILN_CHECK(total == dim, "split: sizes ", shape_str(sizes), " add up to ", total, " but axis ", axis,
             " of x (shape ", shape_str(x.shape), ") has size ", dim);
  return out;
}

void split_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), x.dim(), "split"));
  int64_t offset = 0;
  for (Tensor& piece : k.outputs) {
    const int64_t n = piece.shape()[axis];
    if (piece.numel() > 0)
      copy_into(piece, raw_view(x, x.storage_offset() + offset * x.strides()[axis], piece.shape(), x.strides()));
    offset += n;
  }
}

}  // namespace

void register_join_ops(OpRegistry& r) {
  defs::rules_pending(r.add("concat(Tensor[] xs, int axis) -> Tensor"), "Concat", 13)
      .infer(infer_concat)
      .cast_inputs(InputCast::common)
      .kernel(DeviceType::cpu, DTypeSet::all(), concat_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     const int64_t axis = normalize_axis(c.attrs.get_int("axis"), g[0].dim(), "concat");
                     std::vector<int64_t> sizes;
                     for (const TensorMeta& m : c.input_metas) sizes.push_back(m.shape[static_cast<size_t>(axis)]);
                     return split(g[0], sizes, axis);
                   },
                   {}, {}})
      .doc("Joins tensors along an existing axis; inputs are promoted to their common dtype (torch.cat).");
  defs::rules_pending(r.add("split(Tensor x, int[] sizes, int axis=0) -> Tensor[]"), "Split", 13)
      .infer(infer_split)
      .kernel(DeviceType::cpu, DTypeSet::all(), split_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     return std::vector<Tensor>{concat(std::vector<Tensor>(g.begin(), g.end()), c.attrs.get_int("axis"))};
                   },
                   {}, {}})
      .doc("Pieces of the given sizes along axis (they must add up to its size); one output per piece.");
}

// ---- public functions -------------------------------------------------------------------------------------

Tensor concat(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc) {
  return dispatch1(op("concat"), xs, {{"axis", axis}}, loc);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis, SourceLoc loc) {
  KILN_CHECK(!xs.empty(), "stack: expected at least one input tensor, got none");
  for (size_t i = 1; i < xs.size(); ++i)
    KILN_CHECK(xs[i].shape() == xs[0].shape(), "stack: input ", i, " has shape ", shape_str(xs[i].shape()),
               " but input 0 has shape ", shape_str(xs[0].shape()), "; stacked tensors must have equal shapes");
  const int64_t a = normalize_axis(axis, xs[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(xs.size());
  for (const Tensor& x : xs) parts.push_back(unsqueeze(x, a, loc));
  return concat(parts, a, loc);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis, SourceLoc loc) {
  return dispatch(op("split"), {x}, {{"sizes", sizes}, {"axis", axis}}, loc);
}

// Note [Chunk sizes]
// ONNX Split-18 with num_outputs gives every piece ceil(dim / chunks) elements except the last,
// which takes the rest. When that rest would be negative (dim 5 in 4 chunks) ONNX has no answer;
// kiln keeps exactly `chunks` outputs and lets the trailing ones be smaller, down to empty
// (5 in 4: 2, 2, 1, 0). torch.chunk would return fewer pieces instead.
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t axis, SourceLoc loc) {
  KILN_CHECK(chunks >= 1, "chunk: chunks must be >= 1, got ", chunks);
  KILN_CHECK(x.dim() >= 1, "chunk: x is 0-d (shape ", shape_str(x.shape()), "); chunk needs rank >= 1");
  const int64_t a = normalize_axis(axis, x.dim(), "chunk");
  const int64_t dim = x.shape()[static_cast<size_t>(a)];
  const int64_t each = (dim + chunks - 1) / chunks;
  std::vector<int64_t> sizes;
  for (int64_t i = 0; i < chunks; ++i) sizes.push_back(std::clamp<int64_t>(dim - i * each, 0, each));
  return split(x, sizes, a, loc);
}

}  // namespace kiln
