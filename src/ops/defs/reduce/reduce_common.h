// Pieces shared by the reduction definitions (reduce.cc, arg.cc, stats.cc): axis handling, the
// inference rule, and the row loop that hands each output element its slice of the input.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

#include "ops/defs/common.h"
#include "ops/defs/reduce/row_loop.h"

namespace kiln::defs {

// What a reduction's output dtype is for input dtype t.
enum class ReduceOut : uint8_t {
  same,          // max, min
  sum_promote,   // sum, prod: floating stays, bool/integers -> i64
  to_floating,   // mean, var, std_dev, logsumexp, norm
  index          // argmax, argmin -> i64
};

// The normalized, sorted axes a reduction of `shape` runs over: empty `axes` = all; a 0-d tensor
// has nothing to reduce (axis 0 or -1 is accepted, as in PyTorch). kiln::Error naming `op`, the
// axis and the rank when an axis is out of range or repeated.
std::vector<int64_t> reduction_axes(const char* op, const Shape& shape, const std::vector<int64_t>& axes);

// Inference for "op(Tensor x, int[] axes=[], ..., bool keepdim=false)". `nonempty`: the reduced
// slice may not be empty (max, min: no identity element).
std::vector<TensorMeta> infer_reduce(const InferCtx& c, ReduceOut out, bool nonempty);

// kiln::Error unless every reduced slice has at least one element.
void check_nonempty_reduction(const InferCtx& c, const Shape& shape, const std::vector<int64_t>& axes);

// Calls row_fn(plan, row) for every output element; operand 0 is k.in(0), operand 1 is k.out(0)
// (0 strides along the reduced axes). `axes` as reduction_axes returns them.
template <class RowFn>
void reduce_rows(const KernelCall& k, const std::vector<int64_t>& axes, bool keepdim, RowFn&& row_fn) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  std::array<std::vector<int64_t>, 2> st{byte_strides(x), reduced_out_strides(out, x.dim(), axes, keepdim)};
  std::array<char*, 2> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(out.data_ptr())};
  RowPlan<2> plan = make_row_plan<2>(x.shape(), st, base, axes);
  for_each_row(plan, [&](int64_t, char** row) { row_fn(plan, row); });
}

// Sum of a run of n T values (stride in bytes) in double, with independent partial sums so the
// contiguous loop pipelines (Note [Reduction accuracy] in reduce.cc).
template <class T, class F>
double sum_run_f64(const char* p, int64_t stride, int64_t n, F f) {
  double acc[4] = {0, 0, 0, 0};
  int64_t i = 0;
  if (stride == static_cast<int64_t>(sizeof(T))) {
    const T* a = reinterpret_cast<const T*>(p);
    for (; i + 4 <= n; i += 4)
      for (int j = 0; j < 4; ++j) acc[j] += f(static_cast<double>(static_cast<compute_t<T>>(a[i + j])));
    for (; i < n; ++i) acc[0] += f(static_cast<double>(static_cast<compute_t<T>>(a[i])));
  } else {
    for (; i < n; ++i) acc[0] += f(load_f64<T>(p, stride, i));
  }
  return (acc[0] + acc[1]) + (acc[2] + acc[3]);
}

// Calls f(v) with v of type compute_t<T> for each of the n values of a run.
template <class T, class F>
void each_in_run(const char* p, int64_t stride, int64_t n, F&& f) {
  if (stride == static_cast<int64_t>(sizeof(T))) {
    const T* a = reinterpret_cast<const T*>(p);
    for (int64_t i = 0; i < n; ++i) f(static_cast<compute_t<T>>(a[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) f(static_cast<compute_t<T>>(*reinterpret_cast<const T*>(p + i * stride)));
  }
}

template <class C>
constexpr bool is_nan_value(C v) {
  if constexpr (std::is_floating_point_v<C>) return v != v;
  else return false;
}

// The other files of the family.
void register_reduce_arg_ops(OpRegistry& r);    // arg.cc
void register_reduce_stats_ops(OpRegistry& r);  // stats.cc

}  // namespace kiln::defs
