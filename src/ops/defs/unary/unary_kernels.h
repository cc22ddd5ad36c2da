// Shared pieces of the unary op family: kernel builders over kernels::cpu::unary_loop and the
// inference rules the family's ops have in common.
#pragma once

#include <type_traits>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/vmath.h"
#include "ops/defs/common.h"

namespace kiln::defs::unary {

// Runs f elementwise on a floating input (the dispatcher has cast integer/bool inputs with
// InputCast::to_floating). f sees compute_t<T>: float for f32/f16/bf16, double for f64.
template <class F>
void apply_floating(const KernelCall& k, F f) {
  visit_floating(k.in(0).dtype(), k.op.name(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    kernels::cpu::unary_loop<T, T>(k.out(0), k.in(0), f);
  });
}

// Runs f elementwise with the output dtype equal to the input's, for every numeric dtype. bool is
// rejected by the op's inference rule (infer_numeric) before a kernel runs.
template <class F>
void apply_numeric(const KernelCall& k, F f) {
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      KILN_ASSERT(false, k.op.name(), ": bool reached a numeric-only kernel");
    } else {
      kernels::cpu::unary_loop<T, T>(k.out(0), k.in(0), f);
    }
  });
}

template <class F>
KernelFn floating_kernel(F f) {
  return [f](const KernelCall& k) { apply_floating(k, f); };
}

template <class F>
KernelFn numeric_kernel(F f) {
  return [f](const KernelCall& k) { apply_numeric(k, f); };
}

// Whether the input and output are contiguous f32 of one shape (the fast paths' condition).
inline bool contiguous_f32_pair(const KernelCall& k) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  return x.dtype() == DType::f32 && y.dtype() == DType::f32 && x.shape() == y.shape() && x.is_contiguous() &&
         y.is_contiguous();
}

// Note [vmath fast path]: a contiguous f32 input and output of the same shape run the vectorized
// kernels/cpu/vmath function (split over kiln's thread pool, a few ulps from float64; vmath.h);
// everything else (other dtypes, strides, broadcasts) runs f through unary_loop. Returns whether
// the fast path ran.
bool vmath_contiguous_f32(const KernelCall& k, kernels::cpu::VmathFn fn);

template <class F>
KernelFn vmath_kernel(kernels::cpu::VmathFn fn, F f) {
  return [fn, f](const KernelCall& k) {
    if (!vmath_contiguous_f32(k, fn)) apply_floating(k, f);
  };
}

// Output dtype to_floating(x): exp of an i32 tensor is f32.
std::vector<TensorMeta> infer_floating(const InferCtx& c);
// Output = input; bool input is an error naming the op, the argument and its shape.
std::vector<TensorMeta> infer_numeric(const InferCtx& c);

}  // namespace kiln::defs::unary
