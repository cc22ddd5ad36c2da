// trilu: the upper or lower triangle of the last two dims (batched), with diagonal offset k
// (ONNX Trilu; torch.triu / torch.tril). Elements outside the triangle become zero, whose bit
// pattern is all zeros in every kiln dtype, so one byte-level loop serves all of them.
#include <algorithm>
#include <cstring>

#include "kiln/ops/shape.h"
#include "ops/defs/common.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/shape/movement.h"

namespace kiln {

void register_trilu_ops(OpRegistry& r);

namespace {

std::vector<TensorMeta> infer_trilu(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  KILN_CHECK(x.shape.size() >= 2, "trilu: x must have rank >= 2 (a batch of matrices), got ", meta_str(x));
  return {x};
}

void trilu_kernel(const KernelCall& k) {
  const Tensor& out = k.out(0);
  KILN_ASSERT(out.numel() == 0 || out.is_contiguous(), "trilu: output must be contiguous");
  kernels::cpu::copy_into(out, k.in(0));
  const int64_t rows = out.shape()[out.shape().size() - 2], cols = out.shape().back();
  const int64_t total_rows = cols == 0 ? 0 : out.numel() / cols;
  const int64_t diag = k.attrs.get_int("k");
  const bool upper = k.attrs.get_bool("upper");
  const size_t es = out.element_size();
  char* base = static_cast<char*>(out.data_ptr());
  const int64_t grain = std::max<int64_t>(1, kernels::cpu::kGrain / std::max<int64_t>(cols, 1));
  parallel_for(0, total_rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t i = r % rows;
      // upper keeps columns j >= i + k; lower keeps j <= i + k.
      const int64_t lo = upper ? 0 : std::clamp<int64_t>(i + diag + 1, 0, cols);
      const int64_t hi = upper ? std::clamp<int64_t>(i + diag, 0, cols) : cols;
      if (hi > lo) std::memset(base + (r * cols + lo) * static_cast<int64_t>(es), 0, static_cast<size_t>(hi - lo) * es);
    }
  });
}

}  // namespace

void register_trilu_ops(OpRegistry& r) {
  defs::rules_pending(r.add("trilu(Tensor x, int k=0, bool upper=true) -> Tensor"), "Trilu", 14)
      .infer(infer_trilu)
      .kernel(DeviceType::cpu, DTypeSet::all(), trilu_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     return std::vector<Tensor>{trilu(g[0], c.attrs.get_int("k"), c.attrs.get_bool("upper"))};
                   },
                   {}, {}})
      .doc("Upper (j - i >= k) or lower (j - i <= k) triangle of the last two dims; the rest is zero.");
}

Tensor trilu(const Tensor& x, int64_t k, bool upper, SourceLoc loc) {
  return dispatch1(op("trilu"), {x}, {{"k", k}, {"upper", upper}}, loc);
}

}  // namespace kiln
