// Reductions sum, prod, mean, max, min over any set of axes (empty = all) with keepdim, and the
// helpers the family shares. The kernels walk the input one output element ("row") at a time:
// the reduced axes form the row, the kept axes are split over the thread pool (row_loop.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "kiln/ops/reduce.h"
#include "ops/defs/reduce/reduce_common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace defs {

std::vector<int64_t> reduction_axes(const char* op, const Shape& shape, const std::vector<int64_t>& axes) {
  std::vector<int64_t> ax = normalize_axes(axes, static_cast<int64_t>(shape.size()), op);
  if (shape.empty()) ax.clear();
  return ax;
}

void check_nonempty_reduction(const InferCtx& c, const Shape& shape, const std::vector<int64_t>& axes) {
  for (int64_t a : axes)
    if (shape[static_cast<size_t>(a)] == 0)
      c.fail("cannot reduce over axis " + std::to_string(a) + " of size 0 (input 'x' has shape " +
             shape_str(shape) + "); an empty reduction has no identity for this op");
}

std::vector<TensorMeta> infer_reduce(const InferCtx& c, ReduceOut out, bool nonempty) {
  const TensorMeta& x = c.in(0);
  std::vector<int64_t> axes = reduction_axes(c.op.name().c_str(), x.shape, c.attrs.get_ints("axes"));
  if (nonempty) check_nonempty_reduction(c, x.shape, axes);
  DType t = x.dtype;
  switch (out) {
    case ReduceOut::same: break;
    case ReduceOut::sum_promote: t = is_floating(t) ? t : DType::i64; break;
    case ReduceOut::to_floating: t = to_floating(t); break;
    case ReduceOut::index: t = DType::i64; break;
  }
  return {{t, reduced_shape(x.shape, axes, c.attrs.get_bool("keepdim"))}};
}

std::vector<double> values_f64(const Tensor& t) {
  std::vector<double> v;
  v.reserve(static_cast<size_t>(t.numel()));
  std::vector<int64_t> all(static_cast<size_t>(t.dim()));
  std::iota(all.begin(), all.end(), int64_t{0});
  RowPlan<1> p = make_row_plan<1>(t.shape(), {byte_strides(t)}, {static_cast<char*>(t.data_ptr())}, all);
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_inner_run(p, p.base.data(), [&](char** q, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i) v.push_back(load_f64<T>(q[0], s[0], i));
    });
  });
  return v;
}

}  // namespace defs

namespace {

using defs::for_each_inner_run;
using defs::reduce_rows;
using defs::RowPlan;

template <class T>
inline constexpr bool kFloating = std::is_floating_point_v<compute_t<T>>;

// Note [Reduction accuracy]
// Floating sums, products and means accumulate in double whatever the input's precision, with
// four independent partial sums in contiguous runs: a 10^6-element f32 sum is then exact to about
// 1e-16 relative before its one final rounding, and the loop still pipelines. Integer and bool
// sums and products accumulate in 64-bit unsigned arithmetic (wrapping, as PyTorch's i64 does,
// without signed-overflow UB) and are returned as i64.

struct AxesAttrs {
  std::vector<int64_t> axes;
  bool keepdim;
};
AxesAttrs axes_of(const KernelCall& k) {
  return {defs::reduction_axes(k.op.name().c_str(), k.in(0).shape(), k.attrs.get_ints("axes")),
          k.attrs.get_bool("keepdim")};
}

// Note [Sums across slices]
// Split attention (ResNeSt, SKNet) adds its radix branches as x.sum(dim=1) over [B, radix, C, H, W]:
// a reduction of a few values per output, each output a row of the general loop with its own set-up,
// 3.4-3.9 ms of ~13-16 at batch 1 for SKNet-18 and ResNeSt-14d. A contiguous f32 input reduced over
// one axis with a long inner block is instead the sum of its slices, element by element down the
// axis, in chunks of the inner block split between the threads (in double, as Note [Reduction
// accuracy] has it).
bool sum_slices_f32(const KernelCall& k, const std::vector<int64_t>& axes) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  if (axes.size() != 1 || x.dtype() != DType::f32 || out.dtype() != DType::f32 || !x.is_contiguous() ||
      !out.is_contiguous() || x.numel() == 0)
    return false;
  const Shape& s = x.shape();
  const size_t axis = static_cast<size_t>(axes[0]);
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= s[d];
  for (size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const int64_t reps = s[axis];
  if (inner < 64 || reps > 64) return false;
  constexpr int64_t kChunk = 1024;
  const int64_t chunks = (inner + kChunk - 1) / kChunk;
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* yp = static_cast<float*>(out.data_ptr());
  parallel_for(0, outer * chunks, 1, [&](int64_t u0, int64_t u1) {
    double acc[kChunk];
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t o = u / chunks, i0 = u % chunks * kChunk, n = std::min(kChunk, inner - i0);
      const float* src = xp + o * reps * inner + i0;
      for (int64_t i = 0; i < n; ++i) acc[i] = src[i];
      for (int64_t r = 1; r < reps; ++r)
        for (int64_t i = 0; i < n; ++i) acc[i] += src[r * inner + i];
      float* dst = yp + o * inner + i0;
      for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(acc[i]);
    }
  });
  return true;
}

void sum_kernel(const KernelCall& k) {
  AxesAttrs a = axes_of(k);
  if (sum_slices_f32(k, a.axes)) return;
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_rows(k, a.axes, a.keepdim, [](const RowPlan<2>& p, char** row) {
      if constexpr (kFloating<T>) {
        double acc = 0;
        for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
          acc += defs::sum_run_f64<T>(q[0], s[0], n, [](double v) { return v; });
        });
        *reinterpret_cast<T*>(row[1]) = convert<T>(acc);
      } else {
        uint64_t acc = 0;
        for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
          defs::each_in_run<T>(q[0], s[0], n, [&](auto v) { acc += static_cast<uint64_t>(static_cast<int64_t>(v)); });
        });
        *reinterpret_cast<int64_t*>(row[1]) = static_cast<int64_t>(acc);
      }
    });
  });
}

void prod_kernel(const KernelCall& k) {
  AxesAttrs a = axes_of(k);
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_rows(k, a.axes, a.keepdim, [](const RowPlan<2>& p, char** row) {
      if constexpr (kFloating<T>) {
        double acc = 1;
        for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
          defs::each_in_run<T>(q[0], s[0], n, [&](auto v) { acc *= static_cast<double>(v); });
        });
        *reinterpret_cast<T*>(row[1]) = convert<T>(acc);
      } else {
        uint64_t acc = 1;
        for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
          defs::each_in_run<T>(q[0], s[0], n, [&](auto v) { acc *= static_cast<uint64_t>(static_cast<int64_t>(v)); });
        });
        *reinterpret_cast<int64_t*>(row[1]) = static_cast<int64_t>(acc);
      }
    });
  });
}

void mean_kernel(const KernelCall& k) {
  AxesAttrs a = axes_of(k);
  visit_floating(k.in(0).dtype(), "mean", [&](auto tag) {
    using T = typename decltype(tag)::type;
    reduce_rows(k, a.axes, a.keepdim, [](const RowPlan<2>& p, char** row) {
      double acc = 0;
      for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
        acc += defs::sum_run_f64<T>(q[0], s[0], n, [](double v) { return v; });
      });
      *reinterpret_cast<T*>(row[1]) = convert<T>(acc / static_cast<double>(p.inner));  // empty: NaN
    });
  });
}

// max (kMax) or min; NaN wins over every number. Rows are never empty (inference checks).
template <bool kMax>
void extreme_kernel(const KernelCall& k) {
  AxesAttrs a = axes_of(k);
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    reduce_rows(k, a.axes, a.keepdim, [](const RowPlan<2>& p, char** row) {
      C acc;
      if constexpr (std::is_same_v<C, bool>) acc = !kMax;
      else if constexpr (std::is_floating_point_v<C>) acc = kMax ? -std::numeric_limits<C>::infinity() : std::numeric_limits<C>::infinity();
      else acc = kMax ? std::numeric_limits<C>::lowest() : std::numeric_limits<C>::max();
      for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
        defs::each_in_run<T>(q[0], s[0], n, [&](C v) {
          bool take = kMax ? v > acc : v < acc;
          acc = (take || defs::is_nan_value(v)) ? v : acc;
        });
      });
      *reinterpret_cast<T*>(row[1]) = convert<T>(acc);
    });
  });
}

OpDef& reduce_def(OpRegistry& r, const char* schema, const char* onnx_type, int since, defs::ReduceOut out,
                  bool nonempty = false) {
  return defs::rules_pending(r.add(schema), onnx_type, since).infer([out, nonempty](const InferCtx& c) {
    return defs::infer_reduce(c, out, nonempty);
  });
}

Attrs reduce_attrs(const Axes& axes, bool keepdim) { return {{"axes", axes}, {"keepdim", keepdim}}; }

// ---- derivative rules ------------------------------------------------------------------------------
// g brought back to x's shape: every reduced element receives its row's gradient.
Tensor spread(const Tensor& g, const VjpCtx& c) {
  auto axes = defs::reduce_axes(c.attrs, c.in_shape(0).size(), "sum");
  return defs::unreduce(g, c.in_shape(0), axes, c.attrs.get_bool("keepdim"));
}
int64_t reduced_count(const VjpCtx& c) {
  int64_t n = 1;
  for (int64_t d : defs::reduce_axes(c.attrs, c.in_shape(0).size(), "mean")) n *= c.in_shape(0)[static_cast<size_t>(d)];
  return n;
}
// Note [Ties in max/min]: the gradient is split evenly among the elements equal to the extreme.
VjpRule extreme_rule() {
  return VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                   const Tensor& x = c.inputs[0];
                   Tensor y = spread(c.outputs[0], c);
                   Tensor hit = where(eq(x, y), defs::scalar_like(1, g[0]), defs::scalar_like(0, g[0]));
                   auto axes = defs::reduce_axes(c.attrs, x.dim() < 0 ? 0 : static_cast<size_t>(x.dim()), "max");
                   Tensor count = kiln::sum(hit, axes, /*keepdim=*/true);
                   return std::vector<Tensor>{spread(g[0], c) * hit / count};
                 },
                 {0}, {0}};
}

}  // namespace

void register_reduce_ops(OpRegistry& r) {
  using defs::ReduceOut;
  reduce_def(r, "sum(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor", "ReduceSum", 13, ReduceOut::sum_promote)
      .kernel(DeviceType::cpu, DTypeSet::all(), sum_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) { return std::vector<Tensor>{spread(g[0], c)}; }, {}, {}})
      .doc("sum over axes (empty = all); bool/integers give i64; floating accumulates in f64");
  reduce_def(r, "prod(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor", "ReduceProd", 13, ReduceOut::sum_promote)
      .kernel(DeviceType::cpu, DTypeSet::all(), prod_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // d prod / d x_i = prod / x_i (inputs with zeros give NaN/Inf; stated in the docs)
                     return std::vector<Tensor>{spread(g[0] * c.outputs[0], c) / c.inputs[0]};
                   },
                   {0}, {0}})
      .doc("product over axes (empty = all); bool/integers give i64 (wrapping); floating accumulates in f64");
  reduce_def(r, "mean(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor", "ReduceMean", 13, ReduceOut::to_floating)
      .cast_inputs(InputCast::to_floating)
      .kernel(DeviceType::cpu, DTypeSet::floating(), mean_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     return std::vector<Tensor>{spread(g[0], c) / static_cast<double>(reduced_count(c))};
                   },
                   {}, {}})
      .doc("arithmetic mean over axes (empty = all); integers compute in f32; an empty slice gives NaN");
  reduce_def(r, "max(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor", "ReduceMax", 13, ReduceOut::same, true)
      .kernel(DeviceType::cpu, DTypeSet::all(), extreme_kernel<true>)
      .vjp(extreme_rule())
      .doc("largest value over axes (values only); NaN propagates; empty slices are an error");
  reduce_def(r, "min(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor", "ReduceMin", 13, ReduceOut::same, true)
      .kernel(DeviceType::cpu, DTypeSet::all(), extreme_kernel<false>)
      .vjp(extreme_rule())
      .doc("smallest value over axes (values only); NaN propagates; empty slices are an error");
  defs::register_reduce_arg_ops(r);
  defs::register_reduce_stats_ops(r);
}

Tensor sum(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("sum"), {x}, reduce_attrs(axes, keepdim), loc);
}
Tensor prod(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("prod"), {x}, reduce_attrs(axes, keepdim), loc);
}
Tensor mean(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("mean"), {x}, reduce_attrs(axes, keepdim), loc);
}
Tensor max(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("max"), {x}, reduce_attrs(axes, keepdim), loc);
}
Tensor min(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("min"), {x}, reduce_attrs(axes, keepdim), loc);
}

}  // namespace kiln
