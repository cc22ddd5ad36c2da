// softmax and log_softmax over one axis, computed stably: each row subtracts its max before exp,
// so inputs of any magnitude (1000, -1e30) neither overflow nor underflow to 0/0. Rows accumulate
// in double; f16/bf16/f32 round once at the end. Contiguous f32 rows take the vectorized path
// (Note [Vectorized softmax]).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "kernels/cpu/vmath.h"

#include "kiln/ops/norm.h"
#include "ops/defs/common.h"
#include "ops/defs/norm/norm_common.h"
#include "ops/defs/reduce/row_loop.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace defs {

void check_floating_input(const InferCtx& c, size_t i) {
  const TensorMeta& m = c.in(i);
  if (!is_floating(m.dtype))
    c.fail("input '" + c.arg_name(i) + "' must be floating (f32, f64, f16, bf16), got " + meta_str(m) +
           "; convert it first, e.g. x.to(DType::f32)");
}

}  // namespace defs

namespace {

using defs::RowPlan;

std::vector<int64_t> softmax_axes(const char* op, const Shape& shape, int64_t axis) {
  int64_t a = normalize_axis(axis, static_cast<int64_t>(shape.size()), op);
  if (shape.empty()) return {};
  return {a};
}

std::vector<TensorMeta> infer_softmax(const InferCtx& c) {
  defs::check_floating_input(c, 0);
  softmax_axes(c.op.name().c_str(), c.in(0).shape, c.attrs.get_int("axis"));
  return {c.in(0)};
}

// Note [Vectorized softmax]: a contiguous f32 row is three vector passes: the NaN-propagating max;
// y = exp(x - max) with the subtraction carried exactly into vmath's exp (so each term is within an
// ulp of the float64 one) and their sum accumulated in float64; then y *= 1 / sum (softmax) or
// y = x - (max + log(sum)) (log_softmax, shift in double). Same results as the double path to an
// ulp or two, and the same NaN/inf behaviour (every exp(NaN) and inf - inf is NaN either way).
template <bool kLog>
void softmax_row_f32(const float* x, float* y, int64_t n) {
  const kernels::cpu::VmathKernelsF32& k = kernels::cpu::vmath_kernels_f32(kernels::cpu::active_isa());
  const float m = k.max(x, n);
  if constexpr (kLog) {
    // The exps go to a stack buffer, not y: y may be x (an engine's in-place step).
    float buf[1024];
    double sum = 0.0;
    for (int64_t i = 0; i < n; i += 1024) sum += k.exp_shift_sum(x + i, buf, std::min<int64_t>(1024, n - i), m);
    const double shift = static_cast<double>(m) + std::log(sum);
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<float>(static_cast<double>(x[i]) - shift);
  } else {
    const double sum = k.exp_shift_sum(x, y, n, m);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; ++i) y[i] *= inv;
  }
}

template <bool kLog>
void softmax_kernel(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& out = k.out(0);
  std::vector<int64_t> axes = softmax_axes(k.op.name().c_str(), x.shape(), k.attrs.get_int("axis"));
  std::array<std::vector<int64_t>, 2> st{defs::byte_strides(x), defs::byte_strides(out)};
  std::array<char*, 2> base{static_cast<char*>(x.data_ptr()), static_cast<char*>(out.data_ptr())};
  RowPlan<2> plan = defs::make_row_plan<2>(x.shape(), st, base, axes);
  visit_floating(x.dtype(), k.op.name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    defs::for_each_row(plan, [&](int64_t, char** row) {
      // One inner axis: a single run.
      defs::for_each_inner_run(plan, row, [&](char** q, const int64_t* s, int64_t n) {
        if constexpr (std::is_same_v<T, float>) {
          if (s[0] == sizeof(float) && s[1] == sizeof(float) && n > 0) {
            softmax_row_f32<kLog>(reinterpret_cast<const float*>(q[0]), reinterpret_cast<float*>(q[1]), n);
            return;
          }
        }
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t i = 0; i < n; ++i) {
          double v = defs::load_f64<T>(q[0], s[0], i);
          m = (v > m || v != v) ? v : m;
        }
        double sum = 0;
        for (int64_t i = 0; i < n; ++i) sum += std::exp(defs::load_f64<T>(q[0], s[0], i) - m);
        if constexpr (kLog) {
          const double shift = m + std::log(sum);
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<T*>(q[1] + i * s[1]) = convert<T>(defs::load_f64<T>(q[0], s[0], i) - shift);
        } else {
          const double inv = 1.0 / sum;
          for (int64_t i = 0; i < n; ++i)
            *reinterpret_cast<T*>(q[1] + i * s[1]) = convert<T>(std::exp(defs::load_f64<T>(q[0], s[0], i) - m) * inv);
        }
      });
    });
  });
}

}  // namespace

void register_norm_ops(OpRegistry& r) {
  defs::rules_pending(r.add("softmax(Tensor x, int axis=-1) -> Tensor"), "Softmax", 13)
      .infer(infer_softmax)
      .kernel(DeviceType::cpu, DTypeSet::floating(), softmax_kernel<false>)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     const Tensor& y = c.outputs[0];
                     int64_t axis = c.attrs.get_int("axis");
                     return std::vector<Tensor>{y * (g[0] - sum(g[0] * y, {axis}, true))};
                   },
                   {}, {0}})
      .doc("exp(x - max) / sum(exp(x - max)) along axis");
  defs::rules_pending(r.add("log_softmax(Tensor x, int axis=-1) -> Tensor"), "LogSoftmax", 13)
      .infer(infer_softmax)
      .kernel(DeviceType::cpu, DTypeSet::floating(), softmax_kernel<true>)
      .vjp(VjpRule{[](const VjpCtx& c, std::span<const Tensor> g) {
                     int64_t axis = c.attrs.get_int("axis");
                     return std::vector<Tensor>{g[0] - exp(c.outputs[0]) * sum(g[0], {axis}, true)};
                   },
                   {}, {0}})
      .doc("x - max - log(sum(exp(x - max))) along axis");
  defs::register_norm_layer_ops(r);
  defs::register_rotary_ops(r);
}

Tensor softmax(const Tensor& x, int64_t axis, SourceLoc loc) { return dispatch1(op("softmax"), {x}, {{"axis", axis}}, loc); }
Tensor log_softmax(const Tensor& x, int64_t axis, SourceLoc loc) {
  return dispatch1(op("log_softmax"), {x}, {{"axis", axis}}, loc);
}

}  // namespace kiln
