// Vectorized f32 math over contiguous arrays: exp, log, tanh, sigmoid, erf, gelu (erf and tanh
// forms), silu; the exp-and-sum step of softmax; and the fused bias/activation/residual row
// epilogue that the GEMM and the fused ops run. One kernel set per ISA (vmath_f32_<isa>.cc, the
// scalar set in vmath.cc), picked at run time from active_isa() (kernels/cpu/isa.h).
//
// Accuracy (Note [vmath accuracy] in vmath_simd.inc): every function is within a few ulps of the
// float64 function (measured: exp 0.9 ulp, gelu 3.5, sigmoid 2.2, silu 2.7, the others 0.51), over the whole f32 range including denormal inputs and outputs;
// exp overflows to +inf and underflows to 0 (through the denormals) where the exact result does;
// NaN in gives NaN out; tanh(+-inf) = +-1, log(0) = -inf, log(x < 0) = NaN; gelu, gelu_tanh and
// silu of -inf are NaN, as their float64 formulas give (-inf * 0) and PyTorch returns. tests/ops/vmath_test.cc measures the ulp
// errors under every ISA.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace kiln::kernels::cpu {

enum class VmathFn { exp, log, tanh, sigmoid, erf, gelu, gelu_tanh, silu };
inline constexpr int kVmathFns = 8;

// Activations of the row epilogue (the GEMM's GemmActivation). hardswish is x * clamp(x + 3, 0, 6) / 6
// in f32, as the hardswish op computes it.
enum class VmathAct { none, relu, relu6, sigmoid, tanh, silu, gelu, gelu_tanh, hardswish };
inline constexpr int kVmathActs = 9;

// y[i] = f(x[i]) for i < n; y may be x (in place) but must not overlap it otherwise.
using VmathUnaryF32 = void (*)(const float* x, float* y, int64_t n);
// y[i] = exp(x[i] - shift) with the subtraction carried exactly into exp; returns the sum of the
// y[i] accumulated in float64 (softmax's denominator).
using VmathExpSumF32 = double (*)(const float* x, float* y, int64_t n, float shift);
// The NaN-propagating maximum of x[0:n] (n >= 1).
using VmathMaxF32 = float (*)(const float* x, int64_t n);
// An epilogue on an m x n block in place (a GEMM tile, or whole rows), y_ij = y[i * ldy + j]:
//   v = y_ij (+ row_bias[i]) (+ col_bias[j]);  v += r_ij if res_before;  v = act(v);  v += r_ij if !res_before
// with r_ij = res[i * ldr + j]. row_bias, col_bias and res may be null; res may be y itself (ldr == ldy).
using VmathEpilogueF32 = void (*)(float* y, int64_t ldy, int64_t m, int64_t n, const float* row_bias,
                                  const float* col_bias, const float* res, int64_t ldr, bool res_before);

// Elementwise binary arithmetic, IEEE-rounded as the scalar operators are (so every ISA gives the
// same bits): y[i] = a[i * sa] op b[i * sb] for i < n, with sa, sb each 1 (an array) or 0 (one
// value, broadcast). y may be a or b (in place) but must not overlap them otherwise.
enum class VmathBinOp { add, sub, mul, div };
inline constexpr int kVmathBinOps = 4;
using VmathBinaryF32 = void (*)(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n);

struct VmathKernelsF32 {
  Isa isa;
  VmathUnaryF32 unary[kVmathFns];  // indexed by VmathFn
  VmathExpSumF32 exp_shift_sum;
  VmathMaxF32 max;
  VmathEpilogueF32 epilogue[kVmathActs];  // indexed by VmathAct
  VmathBinaryF32 binary[kVmathBinOps];    // indexed by VmathBinOp
};

const VmathKernelsF32& vmath_kernels_f32_scalar();
const VmathKernelsF32& vmath_kernels_f32_avx2();
const VmathKernelsF32& vmath_kernels_f32_avx512();
// The kernel set of `isa` (must be supported).
const VmathKernelsF32& vmath_kernels_f32(Isa isa);

// The same on the active ISA, single-threaded (callers split large arrays over threads).
inline void vmath_f32(VmathFn f, const float* x, float* y, int64_t n) {
  if (n > 0) vmath_kernels_f32(active_isa()).unary[static_cast<int>(f)](x, y, n);
}

}  // namespace kiln::kernels::cpu
