// Statistical reductions: var, std_dev (with a correction), logsumexp (max-shifted so large
// inputs do not overflow) and the L2 norm. Outputs are floating (integer inputs compute in f32,
// the cast policy to_floating); every row accumulates in double (Note [Reduction accuracy]).
#include <cmath>
#include <limits>

#include "kiln/ops/reduce.h"
#include "ops/defs/reduce/reduce_common.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::for_each_inner_run;
using defs::RowPlan;

// Sum over the row of f(v) in double.
template <class T, class F>
double row_sum(const RowPlan<2>& p, char** row, F f) {
  double acc = 0;
  for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) { acc += defs::sum_run_f64<T>(q[0], s[0], n, f); });
  return acc;
}

// Runs row_value(plan, row) -> double for each output element of a floating reduction.
template <class RowValue>
void stat_kernel(const KernelCall& k, RowValue row_value) {
  std::vector<int64_t> axes = defs::reduction_axes(k.op.name().c_str(), k.in(0).shape(), k.attrs.get_ints("axes"));
  visit_floating(k.in(0).dtype(), k.op.name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    defs::reduce_rows(k, axes, k.attrs.get_bool("keepdim"), [&](const RowPlan<2>& p, char** row) {
      *reinterpret_cast<T*>(row[1]) = convert<T>(row_value(tag, p, row));
    });
  });
}

// Two passes: the mean, then the squared deviations from it (no cancellation, unlike E[x^2]-E[x]^2).
template <class T>
double row_var(const RowPlan<2>& p, char** row, int64_t correction) {
  const double mean = row_sum<T>(p, row, [](double v) { return v; }) / static_cast<double>(p.inner);
  const double ss = row_sum<T>(p, row, [mean](double v) { return (v - mean) * (v - mean); });
  const double dof = static_cast<double>(std::max<int64_t>(0, p.inner - correction));
  return ss / dof;  // dof 0: NaN or inf, as in PyTorch
}

void var_kernel(const KernelCall& k) {
  const int64_t corr = k.attrs.get_int("correction");
  stat_kernel(k, [corr](auto tag, const RowPlan<2>& p, char** row) {
    return row_var<typename decltype(tag)::type>(p, row, corr);
  });
}

void std_kernel(const KernelCall& k) {
  const int64_t corr = k.attrs.get_int("correction");
  stat_kernel(k, [corr](auto tag, const RowPlan<2>& p, char** row) {
    return std::sqrt(row_var<typename decltype(tag)::type>(p, row, corr));
  });
}

void logsumexp_kernel(const KernelCall& k) {
  stat_kernel(k, [](auto tag, const RowPlan<2>& p, char** row) {
    using T = typename decltype(tag)::type;
    double m = -std::numeric_limits<double>::infinity();
    for_each_inner_run(p, row, [&](char** q, const int64_t* s, int64_t n) {
      defs::each_in_run<T>(q[0], s[0], n, [&](auto v) {
        double d = static_cast<double>(v);
        m = (d > m || d != d) ? d : m;
      });
    });
    if (!std::isfinite(m)) return m;  // empty or all -inf: -inf; any +inf: +inf; NaN: NaN
    return m + std::log(row_sum<T>(p, row, [m](double v) { return std::exp(v - m); }));
  });
}

void norm_kernel(const KernelCall& k) {
  stat_kernel(k, [](auto tag, const RowPlan<2>& p, char** row) {
    using T = typename decltype(tag)::type;
    return std::sqrt(row_sum<T>(p, row, [](double v) { return v * v; }));
  });
}

std::vector<TensorMeta> infer_var(const InferCtx& c) {
  int64_t corr = c.attrs.get_int("correction");
  if (corr < 0) c.fail("correction must be >= 0, got " + std::to_string(corr) + " (input 'x' " + meta_str(c.in(0)) + ")");
  return defs::infer_reduce(c, defs::ReduceOut::to_floating, false);
}

std::vector<TensorMeta> infer_floating_reduce(const InferCtx& c) {
  return defs::infer_reduce(c, defs::ReduceOut::to_floating, false);
}

}  // namespace

namespace defs {

// ---- derivative rules ------------------------------------------------------------------------------
struct Reduced {
  std::vector<int64_t> axes;
  int64_t count = 1;
  bool keepdim = false;
};
Reduced reduced(const VjpCtx& c) {
  Reduced r;
  r.axes = reduce_axes(c.attrs, c.in_shape(0).size(), "var");
  for (int64_t d : r.axes) r.count *= c.in_shape(0)[static_cast<size_t>(d)];
  r.keepdim = c.attrs.get_bool("keepdim");
  return r;
}
Tensor back(const Tensor& t, const VjpCtx& c, const Reduced& r) { return unreduce(t, c.in_shape(0), r.axes, r.keepdim); }

VjpRule var_rule(bool is_std) {
  return VjpRule{[is_std](const VjpCtx& c, std::span<const Tensor> g) {
                   Reduced r = reduced(c);
                   const Tensor& x = c.inputs[0];
                   Tensor centered = x - kiln::mean(x, r.axes, true);
                   double denom = static_cast<double>(r.count - c.attrs.get_int("correction"));
                   Tensor scale = is_std ? g[0] / c.outputs[0] : g[0] * 2.0;
                   return std::vector<Tensor>{back(scale, c, r) * centered / denom};
                 },
                 {0}, {0}};
}

void register_reduce_stats_ops(OpRegistry& r) {
  const DTypeSet fl = DTypeSet::floating();
  rules_pending(r.add("var(Tensor x, int[] axes=[], int correction=1, bool keepdim=false) -> Tensor"))
      .infer(infer_var)
      .cast_inputs(InputCast::to_floating)
      .kernel(DeviceType::cpu, fl, var_kernel)
      .vjp(var_rule(false))
      .doc("variance over axes (empty = all): sum((x - mean)^2) / (n - correction); correction 1 = unbiased");
  rules_pending(r.add("std_dev(Tensor x, int[] axes=[], int correction=1, bool keepdim=false) -> Tensor"))
      .infer(infer_var)
      .cast_inputs(InputCast::to_floating)
      .kernel(DeviceType::cpu, fl, std_kernel)
      .vjp(var_rule(true))
      .doc("standard deviation: sqrt(var(x, axes, correction))");
  rules_pending(r.add("logsumexp(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor"), "ReduceLogSumExp", 13)
      .infer(infer_floating_reduce)
      .cast_inputs(InputCast::to_floating)
      .kernel(DeviceType::cpu, fl, logsumexp_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     Reduced red = reduced(c);
                     return std::vector<Tensor>{back(g[0], c, red) * exp(c.inputs[0] - back(c.outputs[0], c, red))};
                   },
                   {0}, {0}})
      .doc("log(sum(exp(x))) over axes, computed as m + log(sum(exp(x - m))) with m the max; empty gives -inf");
  rules_pending(r.add("norm(Tensor x, int[] axes=[], bool keepdim=false) -> Tensor"), "ReduceL2", 13)
      .infer(infer_floating_reduce)
      .cast_inputs(InputCast::to_floating)
      .kernel(DeviceType::cpu, fl, norm_kernel)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     // x / |x|: NaN at a zero norm
                     Reduced red = reduced(c);
                     return std::vector<Tensor>{back(g[0] / c.outputs[0], c, red) * c.inputs[0]};
                   },
                   {0}, {0}})
      .doc("L2 norm over axes: sqrt(sum(x^2)), accumulated in f64");
}

}  // namespace defs

Tensor var(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim, SourceLoc loc) {
  return dispatch1(op("var"), {x}, {{"axes", axes}, {"correction", correction}, {"keepdim", keepdim}}, loc);
}
Tensor std_dev(const Tensor& x, const Axes& axes, int64_t correction, bool keepdim, SourceLoc loc) {
  return dispatch1(op("std_dev"), {x}, {{"axes", axes}, {"correction", correction}, {"keepdim", keepdim}}, loc);
}
Tensor logsumexp(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("logsumexp"), {x}, {{"axes", axes}, {"keepdim", keepdim}}, loc);
}
Tensor norm(const Tensor& x, const Axes& axes, bool keepdim, SourceLoc loc) {
  return dispatch1(op("norm"), {x}, {{"axes", axes}, {"keepdim", keepdim}}, loc);
}

}  // namespace kiln
