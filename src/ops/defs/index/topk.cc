// topk: the k largest (or smallest) values along an axis and their i64 indices (ONNX TopK 11).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <type_traits>

#include "kiln/ops/index.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/shape/movement.h"

namespace kiln {

void register_topk_ops(OpRegistry& r);

namespace {

std::vector<TensorMeta> infer_topk(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  KILN_CHECK(!x.shape.empty(), "topk: x must have rank >= 1, got ", meta_str(x));
  const int64_t axis = normalize_axis(c.attrs.get_int("axis"), static_cast<int64_t>(x.shape.size()), "topk");
  const int64_t k = c.attrs.get_int("k");
  const int64_t dim = x.shape[static_cast<size_t>(axis)];
  KILN_CHECK(k >= 0 && k <= dim, "topk: k = ", k, " is out of range for axis ", axis, " of x (", meta_str(x),
             ") of size ", dim, "; need 0 <= k <= ", dim);
  Shape s = x.shape;
  s[static_cast<size_t>(axis)] = k;
  return {{x.dtype, s}, {DType::i64, s}};
}

// Note [TopK order]
// Elements are ranked by value (NaN above every number, as in torch), ties by the lower index, so
// the result is deterministic. sorted=true returns them best first; sorted=false returns the same
// k elements in their original (index) order.
void topk_kernel(const KernelCall& k) {
  const Tensor x = defs::contiguous_data(k.in(0));
  Tensor& values = k.out(0);
  Tensor& indices = k.out(1);
  KILN_ASSERT(values.numel() == 0 || (values.is_contiguous() && indices.is_contiguous()), "topk: outputs must be contiguous");
  const size_t axis = static_cast<size_t>(normalize_axis(k.attrs.get_int("axis"), x.dim(), "topk"));
  const int64_t kk = k.attrs.get_int("k");
  const bool largest = k.attrs.get_bool("largest"), sorted = k.attrs.get_bool("sorted");
  const int64_t n = x.shape()[axis];
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.shape()[d];
  for (size_t d = axis + 1; d < x.shape().size(); ++d) inner *= x.shape()[d];
  if (kk == 0 || outer * inner == 0) return;
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* src = static_cast<const T*>(x.data_ptr());
    T* vo = static_cast<T*>(values.data_ptr());
    int64_t* io = indices.data<int64_t>();
    const int64_t grain = std::max<int64_t>(1, kernels::cpu::kGrain / std::max<int64_t>(n, 1));
    parallel_for(0, outer * inner, grain, [&](int64_t begin, int64_t end) {
      std::vector<C> row(static_cast<size_t>(n));
      std::vector<int64_t> order(static_cast<size_t>(n));
      for (int64_t r = begin; r < end; ++r) {
        const int64_t p = r / inner, q = r % inner;
        for (int64_t i = 0; i < n; ++i) row[static_cast<size_t>(i)] = static_cast<C>(src[(p * n + i) * inner + q]);
        std::iota(order.begin(), order.end(), int64_t{0});
        auto before = [&](int64_t a, int64_t b) {
          const C va = row[static_cast<size_t>(a)], vb = row[static_cast<size_t>(b)];
          if constexpr (std::is_floating_point_v<C>) {
            const bool na = std::isnan(va), nb = std::isnan(vb);
            if (na || nb) return na != nb ? (largest ? na : nb) : a < b;
          }
          if (va != vb) return largest ? va > vb : va < vb;
          return a < b;
        };
        std::partial_sort(order.begin(), order.begin() + kk, order.end(), before);
        if (!sorted) std::sort(order.begin(), order.begin() + kk);
        for (int64_t j = 0; j < kk; ++j) {
          const int64_t i = order[static_cast<size_t>(j)];
          vo[(p * kk + j) * inner + q] = src[(p * n + i) * inner + q];
          io[(p * kk + j) * inner + q] = i;
        }
      }
    });
  });
}

}  // namespace

void register_topk_ops(OpRegistry& r) {
  defs::rules_pending(r.add("topk(Tensor x, int k, int axis=-1, bool largest=true, bool sorted=true) -> "
                            "(Tensor values, Tensor indices)"),
                      "TopK", 11)
      .infer(infer_topk)
      .kernel(DeviceType::cpu, DTypeSet::all(), topk_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // The values' gradient goes back to the positions they came from.
                     Tensor z = zeros(c.in_shape(0), TensorOptions(g[0].dtype()));
                     return std::vector<Tensor>{scatter_add(z, c.attrs.get_int("axis"), c.outputs[1], g[0])};
                   },
                   {}, {1}})
      .doc("The k largest (or smallest) values along axis and their i64 indices; ties keep the lower index.");
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest, bool sorted, SourceLoc loc) {
  auto outs = dispatch(op("topk"), {x}, {{"k", k}, {"axis", axis}, {"largest", largest}, {"sorted", sorted}}, loc);
  return {std::move(outs[0]), std::move(outs[1])};
}

}  // namespace kiln
