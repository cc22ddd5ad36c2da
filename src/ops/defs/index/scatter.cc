// Writing by index: scatter (ONNX ScatterElements, reduction none / torch.scatter) and one_hot.
#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kiln/ops/index.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/index/indices.h"
#include "ops/defs/shape/movement.h"

namespace kiln {

void register_scatter_ops(OpRegistry& r);

namespace {

using defs::contiguous_data;
using defs::read_indices;

// ---- scatter ------------------------------------------------------------------------------------------------

std::vector<TensorMeta> infer_scatter(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  const TensorMeta& idx = c.in(1);
  const TensorMeta& src = c.in(2);
  KILN_CHECK(!x.shape.empty(), "scatter: x must have rank >= 1, got ", meta_str(x));
  defs::check_index_dtype("scatter", "index", idx);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), rank, "scatter");
  KILN_CHECK(src.dtype == x.dtype, "scatter: src (", meta_str(src), ") must have the dtype of x (", meta_str(x), ")");
  KILN_CHECK(idx.shape.size() == x.shape.size() && src.shape.size() == x.shape.size(), "scatter: x (", meta_str(x),
             "), index (", meta_str(idx), ") and src (", meta_str(src), ") must have the same rank");
  for (int64_t d = 0; d < rank; ++d) {
    const size_t u = static_cast<size_t>(d);
    KILN_CHECK(idx.shape[u] <= src.shape[u], "scatter: index has shape ", shape_str(idx.shape), " but src has shape ",
               shape_str(src.shape), "; index dims must not exceed src's (dim ", d, ")");
    KILN_CHECK(d == axis || idx.shape[u] <= x.shape[u], "scatter: index has shape ", shape_str(idx.shape),
               " but x has shape ", shape_str(x.shape), "; off the scatter axis ", axis,
               " index dims must not exceed x's (dim ", d, ")");
  }
  return {x};
}

// Note [Scatter order]
// Positions of `index` that differ before the axis write disjoint rows of the output, so the
// outer dims run in parallel; within one outer position the writes go in index order, so when
// two indices collide the later one wins (deterministic, like the sequential reference).
//
// scatter_walk copies x into the output, then calls write(o, s) for every element of `index`,
// with o and s the element offsets of its target in the output and of its value in src. scatter
// and scatter_add differ only in `write`.
template <class Write>
void scatter_walk(const KernelCall& k, const char* opname, Write write) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), opname, ": output must be contiguous");
  kernels::cpu::copy_into(out, k.in(0));
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), out.dim(), opname));
  const Tensor& index = k.in(1);
  const Tensor& src = k.in(2);
  const std::vector<int64_t> idx = read_indices(opname, "index", index, out.shape()[axis],
                                                "axis " + std::to_string(axis) + " of x (shape " + shape_str(out.shape()) + ")");
  if (idx.empty()) return;
  const Shape& shape = index.shape();
  const size_t rank = shape.size();
  int64_t outer = 1;
  for (size_t d = 0; d < axis; ++d) outer *= shape[d];
  const int64_t block = static_cast<int64_t>(idx.size()) / outer;
  const Strides& ost = out.strides();
  const Strides& sst = src.strides();
  parallel_for(0, outer, std::max<int64_t>(1, kernels::cpu::kGrain / block), [&](int64_t begin, int64_t end) {
    std::vector<int64_t> pos = defs::unravel(begin * block, shape);
    for (int64_t t = begin * block; t < end * block; ++t) {
      int64_t o = 0, s = 0;
      for (size_t d = 0; d < rank; ++d) {
        o += (d == axis ? idx[static_cast<size_t>(t)] : pos[d]) * ost[d];
        s += pos[d] * sst[d];
      }
      write(o, s);
      for (size_t d = rank; d-- > 0;) {
        if (++pos[d] < shape[d]) break;
        pos[d] = 0;
      }
    }
  });
}

void scatter_kernel(const KernelCall& k) {
  defs::visit_elem_size(k.out(0).dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const char* sp = static_cast<const char*>(k.in(2).data_ptr());
    char* dp = static_cast<char*>(k.out(0).data_ptr());
    scatter_walk(k, "scatter", [&](int64_t o, int64_t s) {
      std::memcpy(dp + o * static_cast<int64_t>(sizeof(U)), sp + s * static_cast<int64_t>(sizeof(U)), sizeof(U));
    });
  });
}

// ---- one_hot ------------------------------------------------------------------------------------------------

std::vector<TensorMeta> infer_one_hot(const InferCtx& c) {
  const TensorMeta& ind = c.in(0);
  defs::check_index_dtype("one_hot", "indices", ind, /*any_integer=*/true);
  const int64_t depth = c.attrs.get_int("depth");
  KILN_CHECK(depth >= 1, "one_hot: depth must be >= 1, got ", depth, " (indices ", meta_str(ind), ")");
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(ind.shape.size()) + 1, "one_hot");
  Shape s = ind.shape;
  s.insert(s.begin() + axis, depth);
  return {{c.attrs.get_dtype("dtype"), s}};
}

// out viewed as [outer, depth, inner]: zero everywhere, one at [p, index[p, q], q].
void one_hot_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), "one_hot: output must be contiguous");
  const Tensor& ind = k.in(0);
  const int64_t depth = k.attrs.get_int("depth");
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), ind.dim() + 1, "one_hot"));
  const std::vector<int64_t> idx = read_indices("one_hot", "indices", ind, depth, "depth " + std::to_string(depth));
  std::memset(out.data_ptr(), 0, out.nbytes());
  int64_t inner = 1;
  for (size_t d = axis; d < ind.shape().size(); ++d) inner *= ind.shape()[d];
  const size_t es = out.element_size();
  char one[8];
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T v = convert<T>(1);
    std::memcpy(one, &v, sizeof(T));
  });
  char* base = static_cast<char*>(out.data_ptr());
  for (size_t t = 0; t < idx.size(); ++t) {
    const int64_t p = static_cast<int64_t>(t) / inner, q = static_cast<int64_t>(t) % inner;
    std::memcpy(base + ((p * depth + idx[t]) * inner + q) * static_cast<int64_t>(es), one, es);
  }
}

// ---- scatter_add ----------------------------------------------------------------------------------------------
// out = x; out[index[i][j]][j] += src[i][j] (axis 0). The backward of every gather; repeated
// indices accumulate. Outer positions write disjoint rows, so they run in parallel and each row
// adds in index order (deterministic).
void scatter_add_kernel(const KernelCall& k) {
  visit_dtype(k.out(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<compute_t<T>>) {
      const T* sp = static_cast<const T*>(k.in(2).data_ptr());
      T* dp = static_cast<T*>(k.out(0).data_ptr());
      scatter_walk(k, "scatter_add", [&](int64_t o, int64_t s) {
        dp[o] = convert<T>(static_cast<compute_t<T>>(dp[o]) + static_cast<compute_t<T>>(sp[s]));
      });
    } else {
      KILN_FAIL("scatter_add: dtype ", dtype_name(k.out(0).dtype()), " is not floating");
    }
  });
}

// Gradient for `src` of a scatter: g at the index positions, zero-padded up to src's shape.
Tensor gather_to_src(const Tensor& g, const Tensor& index, int64_t axis, const Shape& src_shape) {
  Tensor picked = gather_elements(g, index, axis);
  if (picked.shape() == src_shape) return picked;
  std::vector<int64_t> pads(2 * src_shape.size(), 0);
  for (size_t d = 0; d < src_shape.size(); ++d) pads[src_shape.size() + d] = src_shape[d] - picked.shape()[d];
  return pad(picked, pads);
}

}  // namespace

void register_scatter_ops(OpRegistry& r) {
  defs::rules_pending(r.add("scatter(Tensor x, Tensor index, Tensor src, int axis) -> Tensor"), "ScatterElements", 18)
      .infer(infer_scatter)
      .kernel(DeviceType::cpu, DTypeSet::all(), scatter_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Note [Scatter gradient]: overwritten positions of x get no gradient; src
                     // elements get g at the position they were written to. With repeated indices
                     // only the last write survives in the forward, but every duplicate receives the
                     // gradient here (as in PyTorch); use unique indices when differentiating src.
                     const int64_t axis = c.attrs.get_int("axis");
                     const Tensor& index = c.inputs[1];
                     std::vector<Tensor> res(3);
                     if (c.needs(0)) res[0] = scatter(g[0], axis, index, zeros(index.shape(), TensorOptions(g[0].dtype())));
                     if (c.needs(2)) res[2] = gather_to_src(g[0], index, axis, c.in_shape(2));
                     return res;
                   },
                   {1}, {}})
      .doc("A copy of x with out[index[i][j]][j] = src[i][j] (axis 0); on repeated indices the last write wins.");
  defs::rules_pending(r.add("scatter_add(Tensor x, Tensor index, Tensor src, int axis) -> Tensor"), "ScatterElements", 18)
      .infer(infer_scatter)
      .kernel(DeviceType::cpu, DTypeSet::floating(), scatter_add_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     const int64_t axis = c.attrs.get_int("axis");
                     std::vector<Tensor> res(3);
                     if (c.needs(0)) res[0] = g[0];
                     if (c.needs(2)) res[2] = gather_to_src(g[0], c.inputs[1], axis, c.in_shape(2));
                     return res;
                   },
                   {1}, {}})
      .doc("A copy of x with out[index[i][j]][j] += src[i][j] (axis 0); repeated indices accumulate "
           "(ONNX ScatterElements reduction=add). The backward of the gathers.");
  defs::rules_pending(r.add("one_hot(Tensor indices, int depth, int axis=-1, dtype dtype=f32) -> Tensor"), "OneHot", 11)
      .infer(infer_one_hot)
      .kernel(DeviceType::cpu, DTypeSet::all(), one_hot_kernel)
      .dtype_key(-1)
      .no_vjp("integer indices input; the output is constant in every differentiable input")
      .doc("1 at position indices[...] (negative wraps) of a new axis of size depth, 0 elsewhere; dtype `dtype`.");
}

Tensor scatter_add(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, SourceLoc loc) {
  return dispatch1(op("scatter_add"), {x, index, src}, {{"axis", axis}}, loc);
}

Tensor scatter(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src, SourceLoc loc) {
  return dispatch1(op("scatter"), {x, index, src}, {{"axis", axis}}, loc);
}

Tensor one_hot(const Tensor& indices, int64_t depth, int64_t axis, DType dtype, SourceLoc loc) {
  return dispatch1(op("one_hot"), {indices}, {{"depth", depth}, {"axis", axis}, {"dtype", dtype}}, loc);
}

}  // namespace kiln
