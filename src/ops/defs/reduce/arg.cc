// argmax / argmin: the i64 index of the extreme value along one axis. Ties give the first index
// (select_last_index: the last, as ONNX's attribute says); NaN counts as the extreme, as in
// PyTorch and NumPy.
#include <type_traits>

#include "kiln/ops/reduce.h"
#include "ops/defs/reduce/reduce_common.h"

namespace kiln {

namespace {

using defs::RowPlan;

std::vector<int64_t> arg_axes(const char* op, const Shape& shape, int64_t axis) {
  int64_t a = normalize_axis(axis, static_cast<int64_t>(shape.size()), op);
  if (shape.empty()) return {};
  return {a};
}

std::vector<TensorMeta> infer_arg(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  std::vector<int64_t> axes = arg_axes(c.op.name().c_str(), x.shape, c.attrs.get_int("axis"));
  defs::check_nonempty_reduction(c, x.shape, axes);
  return {{DType::i64, defs::reduced_shape(x.shape, axes, c.attrs.get_bool("keepdim"))}};
}

template <bool kMax>
void arg_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  std::vector<int64_t> axes = arg_axes(k.op.name().c_str(), x.shape(), k.attrs.get_int("axis"));
  const bool keepdim = k.attrs.get_bool("keepdim");
  const bool last = k.attrs.get_bool("select_last_index");
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    defs::reduce_rows(k, axes, keepdim, [last](const RowPlan<2>& p, char** row) {
      C best{};
      int64_t best_i = 0, j = 0;
      defs::for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
        defs::each_in_run<T>(q[0], s[0], n, [&](C v) {
          bool take;
          if (j == 0) {
            take = true;
          } else if (defs::is_nan_value(v) || defs::is_nan_value(best)) {
            take = defs::is_nan_value(v) && (last || !defs::is_nan_value(best));
          } else {
            bool better = kMax ? v > best : v < best;
            take = better || (last && v == best);
          }
          if (take) {
            best = v;
            best_i = j;
          }
          ++j;
        });
      });
      *reinterpret_cast<int64_t*>(row[1]) = best_i;
    });
  });
}

}  // namespace

namespace defs {

void register_reduce_arg_ops(OpRegistry& r) {
  rules_pending(r.add("argmax(Tensor x, int axis, bool keepdim=false, bool select_last_index=false) -> Tensor"),
                "ArgMax", 13)
      .infer(infer_arg)
      .kernel(DeviceType::cpu, DTypeSet::all(), arg_kernel<true>)
      .no_vjp("integer output")
      .doc("i64 index of the largest value along axis; first of ties unless select_last_index; NaN is largest");
  rules_pending(r.add("argmin(Tensor x, int axis, bool keepdim=false, bool select_last_index=false) -> Tensor"),
                "ArgMin", 13)
      .infer(infer_arg)
      .kernel(DeviceType::cpu, DTypeSet::all(), arg_kernel<false>)
      .no_vjp("integer output")
      .doc("i64 index of the smallest value along axis; first of ties unless select_last_index; NaN is smallest");
}

}  // namespace defs

Tensor argmax(const Tensor& x, int64_t axis, bool keepdim, bool select_last_index, SourceLoc loc) {
  return dispatch1(op("argmax"), {x}, {{"axis", axis}, {"keepdim", keepdim}, {"select_last_index", select_last_index}},
                   loc);
}
Tensor argmin(const Tensor& x, int64_t axis, bool keepdim, bool select_last_index, SourceLoc loc) {
  return dispatch1(op("argmin"), {x}, {{"axis", axis}, {"keepdim", keepdim}, {"select_last_index", select_last_index}},
                   loc);
}

}  // namespace kiln
