// Gathering by index: gather (ONNX Gather: whole slices picked along an axis), gather_elements
// (ONNX GatherElements / torch.gather: one element per index position) and index_select (gather
// with a 1-D index). Kernels move elements by size, not by dtype (movement.h).
#include <algorithm>
#include <atomic>
#include <cstring>

#include "kiln/ops/index.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/index/indices.h"
#include "ops/defs/shape/movement.h"

namespace kiln {

void register_gather_ops(OpRegistry& r);

namespace {

using defs::contiguous_data;
using defs::read_indices;

std::string axis_what(int64_t axis, const Shape& x) {
  return "axis " + std::to_string(axis) + " of x (shape " + shape_str(x) + ")";
}

// ---- gather -----------------------------------------------------------------------------------------------

std::vector<TensorMeta> infer_gather(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  const TensorMeta& idx = c.in(1);
  KILN_CHECK(!x.shape.empty(), "gather: x must have rank >= 1, got ", meta_str(x));
  defs::check_index_dtype("gather", "indices", idx);
  const size_t axis = static_cast<size_t>(normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(x.shape.size()), "gather"));
  Shape s(x.shape.begin(), x.shape.begin() + static_cast<int64_t>(axis));
  s.insert(s.end(), idx.shape.begin(), idx.shape.end());
  s.insert(s.end(), x.shape.begin() + static_cast<int64_t>(axis) + 1, x.shape.end());
  return {{x.dtype, s}};
}

// out viewed as [outer, m, inner] = x viewed as [outer, n, inner] at rows index[j].
void gather_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), "gather: output must be contiguous");
  const Tensor x = contiguous_data(k.in(0));
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), x.dim(), "gather"));
  const int64_t n = x.shape()[axis];
  const std::vector<int64_t> idx = read_indices("gather", "indices", k.in(1), n, axis_what(static_cast<int64_t>(axis), x.shape()));
  if (out.numel() == 0) return;
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (size_t d = axis + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  const int64_t m = static_cast<int64_t>(idx.size());
  defs::visit_elem_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    const int64_t grain = std::max<int64_t>(1, kernels::cpu::kGrain / inner);
    const size_t bytes = static_cast<size_t>(inner) * sizeof(U);  // one gathered row
    parallel_for(0, outer * m, grain, [&](int64_t begin, int64_t end) {
      // Output row t = p * m + j copies x's row idx[j] of outer index p: one division where the
      // chunk starts, then j wraps. ConvBERT's unfold (im2col over the sequence, as Pad and Gather)
      // gathers rows of one element, and spent most of its time dividing t by m for every element
      // and copying it through a loop of one-element memcpys.
      int64_t j = begin % m;
      const char* s = src + static_cast<size_t>(begin / m * n) * bytes;
      char* o = dst + static_cast<size_t>(begin) * bytes;
      auto walk = [&](auto copy) {
        for (int64_t t = begin; t < end; ++t, o += bytes) {
          copy(o, s + static_cast<size_t>(idx[static_cast<size_t>(j)]) * bytes);
          if (++j == m) j = 0, s += static_cast<size_t>(n) * bytes;
        }
      };
      if (inner == 1) walk([](char* to, const char* from) { std::memcpy(to, from, sizeof(U)); });
      else walk([bytes](char* to, const char* from) { std::memcpy(to, from, bytes); });
    });
  });
}

// ---- gather_elements ----------------------------------------------------------------------------------

std::vector<TensorMeta> infer_gather_elements(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  const TensorMeta& idx = c.in(1);
  KILN_CHECK(!x.shape.empty(), "gather_elements: x must have rank >= 1, got ", meta_str(x));
  defs::check_index_dtype("gather_elements", "index", idx);
  const int64_t rank = static_cast<int64_t>(x.shape.size());
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), rank, "gather_elements");
  KILN_CHECK(idx.shape.size() == x.shape.size(), "gather_elements: index (", meta_str(idx), ") must have the rank of x (",
             meta_str(x), ")");
  for (int64_t d = 0; d < rank; ++d)
    KILN_CHECK(d == axis || idx.shape[static_cast<size_t>(d)] <= x.shape[static_cast<size_t>(d)],
               "gather_elements: index has shape ", shape_str(idx.shape), " but x has shape ", shape_str(x.shape),
               "; off the gather axis ", axis, " index dims must not exceed x's (dim ", d, ")");
  return {{x.dtype, idx.shape}};
}

// Note [Gathering along rows]
// DeBERTa's disentangled attention picks, for every query row, the relative-position scores at the
// keys' offsets: gather_elements(scores [B*H, q, 2k], index [B*H, q, k] along the last axis), with
// the index one [q, k] table expanded over B*H. The general loop below first copies and checks
// every index (the expanded ones too) on one thread, then walks the output with a rank-deep offset
// sum an element: 0.47 ms for each of a 6-layer DeBERTa-v3's 12 such gathers ([12, 128, 128] at
// batch 1), 5.7 of its 40 ms. Along the last axis a row of the output reads one row of x through
// one row of the index, whatever the index's strides (an expanded one re-reads its table): rows
// split between the threads, the indices checked as they are read. An index out of range leaves
// the work to the general loop, whose error names it.
template <class U, class I>
bool gather_rows(const Tensor& out, const Tensor& x, const Tensor& index) {
  const Shape& shape = out.shape();
  const size_t rank = shape.size();
  const int64_t cols = shape.back(), size = x.shape().back(), rows = cols == 0 ? 0 : out.numel() / cols;
  const Strides& xs = x.strides();
  const Strides& is = index.strides();
  const U* src = static_cast<const U*>(x.data_ptr());
  const I* ip = static_cast<const I*>(index.data_ptr());
  U* dst = static_cast<U*>(out.data_ptr());
  std::atomic<bool> bad{false};
  const int64_t grain = std::max<int64_t>(1, kernels::cpu::kGrain / std::max<int64_t>(cols, 1));
  parallel_for(0, rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> pos = defs::unravel(r0, Shape(shape.begin(), shape.end() - 1));
    for (int64_t r = r0; r < r1; ++r) {
      int64_t xo = 0, io = 0;
      for (size_t d = 0; d + 1 < rank; ++d) xo += pos[d] * xs[d], io += pos[d] * is[d];
      const U* xrow = src + xo;
      const I* irow = ip + io;
      U* orow = dst + r * cols;
      bool ok = true;
      for (int64_t j = 0; j < cols; ++j) {
        int64_t v = static_cast<int64_t>(irow[j * is[rank - 1]]);
        v += v < 0 ? size : 0;
        ok &= v >= 0 && v < size;
        orow[j] = xrow[std::clamp<int64_t>(v, 0, size - 1) * xs[rank - 1]];
      }
      if (!ok) bad.store(true, std::memory_order_relaxed);
      for (size_t d = rank - 1; d-- > 0;) {
        if (++pos[d] < shape[d]) break;
        pos[d] = 0;
      }
    }
  });
  return !bad.load();
}

void gather_elements_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), "gather_elements: output must be contiguous");
  const Tensor& x = k.in(0);
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), x.dim(), "gather_elements"));
  // Note [Gathering along rows]
  if (axis + 1 == static_cast<size_t>(x.dim()) && x.shape().back() > 0 && out.numel() > 0 &&
      (x.dtype() == DType::f32 || x.dtype() == DType::i32) &&
      (k.in(1).dtype() == DType::i64 || k.in(1).dtype() == DType::i32)) {
    const bool i64 = k.in(1).dtype() == DType::i64;
    const bool done = x.dtype() == DType::f32
                          ? (i64 ? gather_rows<float, int64_t>(out, x, k.in(1)) : gather_rows<float, int32_t>(out, x, k.in(1)))
                          : (i64 ? gather_rows<int32_t, int64_t>(out, x, k.in(1))
                                 : gather_rows<int32_t, int32_t>(out, x, k.in(1)));
    if (done) return;
  }
  const std::vector<int64_t> idx = read_indices("gather_elements", "index", k.in(1), x.shape()[axis],
                                                axis_what(static_cast<int64_t>(axis), x.shape()));
  const Shape& shape = out.shape();
  const size_t rank = shape.size();
  const Strides& xst = x.strides();
  defs::visit_elem_size(x.dtype(), [&](auto tag) {
    using U = typename decltype(tag)::type;
    const char* src = static_cast<const char*>(x.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    parallel_for(0, out.numel(), kernels::cpu::kGrain, [&](int64_t begin, int64_t end) {
      std::vector<int64_t> pos = defs::unravel(begin, shape);
      for (int64_t t = begin; t < end; ++t) {
        int64_t off = 0;
        for (size_t d = 0; d < rank; ++d) off += (d == axis ? idx[static_cast<size_t>(t)] : pos[d]) * xst[d];
        std::memcpy(dst + t * static_cast<int64_t>(sizeof(U)), src + off * static_cast<int64_t>(sizeof(U)), sizeof(U));
        for (size_t d = rank; d-- > 0;) {
          if (++pos[d] < shape[d]) break;
          pos[d] = 0;
        }
      }
    });
  });
}

}  // namespace

void register_gather_ops(OpRegistry& r) {
  defs::rules_pending(r.add("gather(Tensor x, Tensor indices, int axis=0) -> Tensor"), "Gather", 13)
      .infer(infer_gather)
      .kernel(DeviceType::cpu, DTypeSet::all(), gather_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // As a gather_elements over x.shape[:axis] + [numel(indices)] + x.shape[axis+1:]
                     // whose index repeats `indices` along the other dims; then scatter_add.
                     const Shape& xs = c.in_shape(0);
                     const Tensor& ind = c.inputs[1];
                     const int64_t axis = normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(xs.size()), "gather");
                     Shape flat = xs;
                     flat[static_cast<size_t>(axis)] = ind.numel();
                     Shape ishape(xs.size(), 1);
                     ishape[static_cast<size_t>(axis)] = ind.numel();
                     Tensor index = reshape(ind, ishape).expand(flat).contiguous();
                     Tensor z = zeros(xs, TensorOptions(g[0].dtype()));
                     return std::vector<Tensor>{scatter_add(z, axis, index, reshape(g[0], flat))};
                   },
                   {1}, {}})
      .doc("x's slices at `indices` along axis: out.shape = x.shape[:axis] + indices.shape + x.shape[axis+1:].");
  defs::rules_pending(r.add("gather_elements(Tensor x, Tensor index, int axis) -> Tensor"), "GatherElements", 13)
      .infer(infer_gather_elements)
      .kernel(DeviceType::cpu, DTypeSet::all(), gather_elements_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     Tensor z = zeros(c.in_shape(0), TensorOptions(g[0].dtype()));
                     return std::vector<Tensor>{scatter_add(z, c.attrs.get_int("axis"), c.inputs[1], g[0])};
                   },
                   {1}, {}})
      .doc("out[i][j] = x[index[i][j]][j] (axis 0); out has index's shape.");
}

// ---- public functions -------------------------------------------------------------------------------------

Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis, SourceLoc loc) {
  return dispatch1(op("gather"), {x, indices}, {{"axis", axis}}, loc);
}

Tensor gather_elements(const Tensor& x, const Tensor& index, int64_t axis, SourceLoc loc) {
  return dispatch1(op("gather_elements"), {x, index}, {{"axis", axis}}, loc);
}

// A gather whose index must be 1-D; recorded as gather.
Tensor index_select(const Tensor& x, int64_t axis, const Tensor& index, SourceLoc loc) {
  KILN_CHECK(index.dim() == 1, "index_select: index must be 1-D, got ", dtype_name(index.dtype()),
             shape_str(index.shape()));
  return gather(x, index, axis, loc);
}

}  // namespace kiln
