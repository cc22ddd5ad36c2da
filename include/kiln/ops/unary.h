// Elementwise unary ops. Floating ops on integer/bool inputs compute in f32 (as PyTorch does);
// neg/abs/relu/sign/clip keep integer dtypes; floor/ceil/round are identity on integers.
#pragma once

#include <optional>

#include "kiln/core/tensor.h"

namespace kiln {

Tensor neg(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor abs(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor exp(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor log(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor sqrt(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor rsqrt(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor reciprocal(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor sin(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor cos(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor tanh(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor sigmoid(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor relu(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01, SourceLoc loc = KILN_HERE);
Tensor elu(const Tensor& x, double alpha = 1.0, SourceLoc loc = KILN_HERE);
// ONNX HardSigmoid: max(0, min(1, alpha*x + beta)); PyTorch's is alpha=1/6, beta=0.5.
Tensor hardsigmoid(const Tensor& x, double alpha = 1.0 / 6.0, double beta = 0.5, SourceLoc loc = KILN_HERE);
Tensor hardswish(const Tensor& x, SourceLoc loc = KILN_HERE);  // x * relu6(x + 3) / 6
// approximate: "none" (erf form) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none", SourceLoc loc = KILN_HERE);
Tensor silu(const Tensor& x, SourceLoc loc = KILN_HERE);
// log(1 + exp(beta*x)) / beta, linear above threshold (PyTorch's Softplus).
Tensor softplus(const Tensor& x, double beta = 1.0, double threshold = 20.0, SourceLoc loc = KILN_HERE);
Tensor erf(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor floor(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor ceil(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor round(const Tensor& x, SourceLoc loc = KILN_HERE);  // half to even, like NumPy and ONNX
Tensor sign(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor clip(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc = KILN_HERE);
Tensor logical_not(const Tensor& x, SourceLoc loc = KILN_HERE);  // bool output
Tensor cast(const Tensor& x, DType dtype, SourceLoc loc = KILN_HERE);

// Trigonometric and hyperbolic functions (src/ops/defs/unary/trig.cc); floating output.
Tensor tan(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor asin(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor acos(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor atan(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor sinh(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor cosh(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor asinh(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor acosh(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor atanh(const Tensor& x, SourceLoc loc = KILN_HERE);
// Floating-point classes as bool (false for integer and bool inputs).
Tensor isnan(const Tensor& x, SourceLoc loc = KILN_HERE);
Tensor isinf(const Tensor& x, bool detect_positive = true, bool detect_negative = true, SourceLoc loc = KILN_HERE);
// ONNX activations (src/ops/defs/unary/activation_onnx.cc); floating output.
Tensor softsign(const Tensor& x, SourceLoc loc = KILN_HERE);  // x / (1 + |x|)
// gamma * (x > 0 ? x : alpha * (e^x - 1)); the defaults are ONNX's.
Tensor selu(const Tensor& x, double alpha = 1.67326319217681884765625, double gamma = 1.05070102214813232421875,
            SourceLoc loc = KILN_HERE);
Tensor celu(const Tensor& x, double alpha = 1.0, SourceLoc loc = KILN_HERE);  // alpha != 0
Tensor thresholded_relu(const Tensor& x, double alpha = 1.0, SourceLoc loc = KILN_HERE);  // x > alpha ? x : 0
Tensor mish(const Tensor& x, SourceLoc loc = KILN_HERE);  // x * tanh(softplus(x))

}  // namespace kiln
