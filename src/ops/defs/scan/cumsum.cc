// cumsum: the running sum along one axis, optionally exclusive (out[i] leaves out x[i]) and/or
// reversed (sums from the end). Each row along the axis is scanned sequentially; rows run in
// parallel. Floating inputs keep their dtype and accumulate in double (a 10^6-element f32 scan
// stays within one f32 rounding of the exact prefix sums); bool and integers give i64.
#include <type_traits>

#include "kernels/cpu/scan.h"
#include "kiln/ops/scan.h"
#include "ops/defs/common.h"
#include "ops/defs/reduce/row_loop.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::RowPlan;

std::vector<int64_t> scan_axes(const Shape& shape, int64_t axis) {
  int64_t a = normalize_axis(axis, static_cast<int64_t>(shape.size()), "cumsum");
  if (shape.empty()) return {};
  return {a};
}

std::vector<TensorMeta> infer_cumsum(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  scan_axes(x.shape, c.attrs.get_int("axis"));
  return {{is_floating(x.dtype) ? x.dtype : DType::i64, x.shape}};
}

// Scans one row: n elements at byte strides sx (input) and so (output), from the end if reverse.
template <class T, class Out, class Acc>
void scan_row(const char* x, int64_t sx, char* out, int64_t so, int64_t n, bool exclusive, bool reverse) {
  auto load = [&](int64_t i) -> Acc {
    if constexpr (std::is_floating_point_v<Acc>) return static_cast<Acc>(static_cast<compute_t<T>>(*reinterpret_cast<const T*>(x + i * sx)));
    else return static_cast<Acc>(static_cast<int64_t>(*reinterpret_cast<const T*>(x + i * sx)));
  };
  auto store = [&](int64_t i, Acc acc) {
    if constexpr (std::is_floating_point_v<Acc>) *reinterpret_cast<Out*>(out + i * so) = convert<Out>(acc);
    else *reinterpret_cast<Out*>(out + i * so) = static_cast<Out>(acc);
  };
  if constexpr (std::is_same_v<T, float>) {
    // A contiguous forward f32 scan runs the parallel vectorized kernel (Note [Blocked scan]).
    if (!exclusive && !reverse && sx == sizeof(float) && so == sizeof(float)) {
      kernels::cpu::cumsum_f32(reinterpret_cast<const float*>(x), reinterpret_cast<float*>(out), n);
      return;
    }
  }
  Acc acc = 0;
  const int64_t step = reverse ? -1 : 1;
  for (int64_t c = 0, i = reverse ? n - 1 : 0; c < n; ++c, i += step) {
    Acc v = load(i);
    if (exclusive) store(i, acc);
    acc += v;
    if (!exclusive) store(i, acc);
  }
}

void cumsum_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  std::vector<int64_t> axes = scan_axes(x.shape(), k.attrs.get_int("axis"));
  const bool exclusive = k.attrs.get_bool("exclusive"), reverse = k.attrs.get_bool("reverse");
  std::array<std::vector<int64_t>, 2> st{defs::byte_strides(x), defs::byte_strides(out)};
  std::array<char*, 2> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(out.data_ptr())};
  RowPlan<2> plan = defs::make_row_plan<2>(x.shape(), st, base, axes);
  visit_dtype(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr bool kFloat = std::is_floating_point_v<compute_t<T>>;
    using Out = std::conditional_t<kFloat, T, int64_t>;
    using Acc = std::conditional_t<kFloat, double, uint64_t>;  // unsigned: wraps without UB
    defs::for_each_row(plan, [&](int64_t, char** row) {
      // One inner axis: a single run (n = 1, stride 0 when the axis has size 1 or x is 0-d).
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        scan_row<T, Out, Acc>(q[0], s[0], q[1], s[1], n, exclusive, reverse);
      });
    });
  });
}

}  // namespace

void register_cumprod_ops(OpRegistry& r);  // cumprod.cc

void register_scan_ops(OpRegistry& r) {
  register_cumprod_ops(r);
  defs::rules_pending(r.add("cumsum(Tensor x, int axis, bool exclusive=false, bool reverse=false) -> Tensor"),
                      "CumSum", 14)
      .infer(infer_cumsum)
      .kernel(DeviceType::cpu, DTypeSet::all(), cumsum_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // Each x[j] feeds every output after it (before it when reverse), so the
                     // gradient is the cumulative sum in the opposite direction.
                     return std::vector<Tensor>{cumsum(g[0], c.attrs.get_int("axis"), c.attrs.get_bool("exclusive"),
                                                       !c.attrs.get_bool("reverse"))};
                   },
                   {}, {}})
      .doc("running sum along axis; exclusive leaves out the current element, reverse sums from the end; "
           "bool/integers give i64, floating accumulates in f64");
}

Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse, SourceLoc loc) {
  return dispatch1(op("cumsum"), {x}, {{"axis", axis}, {"exclusive", exclusive}, {"reverse", reverse}}, loc);
}

}  // namespace kiln
