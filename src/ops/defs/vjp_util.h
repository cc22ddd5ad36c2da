// Helpers for derivative (vjp) rules. Rules are written with kiln ops on Tensors, so they run
// eagerly under autograd (and record, for create_graph) and can emit IR under tracing.
#pragma once

#include <vector>

#include "kiln/ops/binary.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/shape.h"
#include "kiln/ops/unary.h"
#include "ops/defs/common.h"

namespace kiln::defs {

// Sums a broadcast gradient back to `shape` (leading dims, and dims where shape has 1).
inline Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int64_t lead = g.dim() - static_cast<int64_t>(shape.size());
  std::vector<int64_t> axes;
  for (int64_t d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[static_cast<size_t>(d - lead)] == 1 && g.shape()[static_cast<size_t>(d)] != 1))
      axes.push_back(d);
  Tensor r = axes.empty() ? g : sum(g, axes, /*keepdim=*/true);
  return reshape(r, shape);
}

// The gradient of a reduction over `axes` (normalized; empty = all) brought back to `in_shape`.
inline Tensor unreduce(const Tensor& g, const Shape& in_shape, const std::vector<int64_t>& axes, bool keepdim) {
  std::vector<int64_t> all = axes;
  if (all.empty())
    for (int64_t d = 0; d < static_cast<int64_t>(in_shape.size()); ++d) all.push_back(d);
  Tensor k = keepdim ? g : reshape(g, reduced_shape(in_shape, all, true));
  return expand(k, in_shape);
}

inline std::vector<int64_t> reduce_axes(const Attrs& a, size_t rank, const char* op) {
  auto axes = normalize_axes(a.get_ints("axes"), static_cast<int64_t>(rank), op);
  if (axes.empty())
    for (int64_t d = 0; d < static_cast<int64_t>(rank); ++d) axes.push_back(d);
  return axes;
}

inline Tensor scalar_like(double v, const Tensor& like) { return wrap_scalar(v, like.dtype()); }
inline Tensor zeros_grad(const Tensor& g) { return zeros_like(g); }
// g where cond holds, 0 elsewhere.
inline Tensor mask_grad(const Tensor& cond, const Tensor& g) { return where(cond, g, scalar_like(0, g)); }

// Rules of one-input, one-output ops: from the saved input x, or the saved output y.
using UnaryGradFn = Tensor (*)(const Tensor& g, const Tensor& saved, const Attrs& attrs);
inline VjpRule unary_rule_x(UnaryGradFn f) {
  return VjpRule{[f](const VjpCtx& c, std::span<const Tensor> g) {
                   return std::vector<Tensor>{f(g[0], c.inputs[0], c.attrs)};
                 },
                 {0}, {}};
}
inline VjpRule unary_rule_y(UnaryGradFn f) {
  return VjpRule{[f](const VjpCtx& c, std::span<const Tensor> g) {
                   return std::vector<Tensor>{f(g[0], c.outputs[0], c.attrs)};
                 },
                 {}, {0}};
}
// Piecewise-constant ops (floor, sign, ...): zero gradient almost everywhere.
inline VjpRule zero_rule() {
  return VjpRule{[](const VjpCtx&, std::span<const Tensor> g) { return std::vector<Tensor>{zeros_like(g[0])}; }, {}, {}};
}

}  // namespace kiln::defs
