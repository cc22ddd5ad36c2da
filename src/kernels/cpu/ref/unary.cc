// Float64 reference for the unary family: the textbook formula of each op on logical indices,
// independent of the kernels in src/ops/defs/unary/ (which use rearranged, branch-free forms).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

// Attribute value or the schema's default (written here again on purpose: a test that passes no
// attributes then also checks the op's defaults).
double attr_or(const Attrs& attrs, const char* name, double fallback) {
  return attrs.has(name) ? attrs.get_float(name) : fallback;
}

double sigmoid(double x) {
  if (x >= 0) return 1 / (1 + std::exp(-x));
  double e = std::exp(x);
  return e / (1 + e);
}

double round_half_even(double x) {
  if (!std::isfinite(x)) return x;
  double f = std::floor(x), d = x - f;
  double r = d > 0.5 ? f + 1 : d < 0.5 ? f : (std::fmod(f, 2.0) == 0 ? f : f + 1);
  return r == 0 ? std::copysign(0.0, x) : r;
}

double apply(const std::string& op, double x, const Attrs& attrs, DType in) {
  const bool integral = is_integral(in) || in == DType::boolean;
  if (op == "neg") return in == DType::u8 ? std::fmod(256 - x, 256) : -x;
  if (op == "abs") return std::fabs(x);
  if (op == "exp") return std::exp(x);
  if (op == "log") return std::log(x);
  if (op == "sqrt") return std::sqrt(x);
  if (op == "rsqrt") return 1 / std::sqrt(x);
  if (op == "reciprocal") return 1 / x;
  if (op == "sin") return std::sin(x);
  if (op == "cos") return std::cos(x);
  if (op == "tanh") return std::tanh(x);
  if (op == "sigmoid") return sigmoid(x);
  if (op == "erf") return std::erf(x);
  if (op == "floor") return integral ? x : std::floor(x);
  if (op == "ceil") return integral ? x : std::ceil(x);
  if (op == "round") return integral ? x : round_half_even(x);
  if (op == "sign") return std::isnan(x) ? x : x > 0 ? 1.0 : x < 0 ? -1.0 : x;
  if (op == "logical_not") return x == 0 ? 1.0 : 0.0;
  if (op == "clip") {
    if (attrs.has("min") && x < attrs.get_float("min")) x = attrs.get_float("min");
    if (attrs.has("max") && x > attrs.get_float("max")) x = attrs.get_float("max");
    // An integer result cannot leave its dtype: a bound outside the range acts as the range's end.
    if (in == DType::u8) return std::clamp(x, 0.0, 255.0);
    if (in == DType::i8) return std::clamp(x, -128.0, 127.0);
    if (in == DType::i32) return std::clamp(x, -2147483648.0, 2147483647.0);
    return x;
  }
  if (op == "relu") return x < 0 ? 0.0 : x;
  if (op == "leaky_relu") return x >= 0 ? x : attr_or(attrs, "negative_slope", 0.01) * x;
  if (op == "elu") return x > 0 ? x : attr_or(attrs, "alpha", 1.0) * (std::exp(x) - 1);
  if (op == "hardsigmoid") {
    if (std::isnan(x)) return x;
    double v = attr_or(attrs, "alpha", 1.0 / 6.0) * x + attr_or(attrs, "beta", 0.5);
    return std::max(0.0, std::min(1.0, v));
  }
  if (op == "hardswish") return std::isnan(x) ? x : x * std::max(0.0, std::min(6.0, x + 3)) / 6;
  if (op == "silu") return x * sigmoid(x);
  if (op == "gelu") {
    std::string a = attrs.has("approximate") ? attrs.get_string("approximate") : "none";
    if (a == "tanh") {
      double u = std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x);
      return 0.5 * x * (1 + std::tanh(u));
    }
    return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
  }
  if (op == "softplus") {
    double beta = attr_or(attrs, "beta", 1.0), threshold = attr_or(attrs, "threshold", 20.0);
    return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
  }
  // Trigonometric, classifiers and ONNX activations (defs/unary/trig.cc, activation_onnx.cc).
  if (op == "tan") return std::tan(x);
  if (op == "asin") return std::asin(x);
  if (op == "acos") return std::acos(x);
  if (op == "atan") return std::atan(x);
  if (op == "sinh") return std::sinh(x);
  if (op == "cosh") return std::cosh(x);
  if (op == "asinh") return std::asinh(x);
  if (op == "acosh") return std::acosh(x);
  if (op == "atanh") return std::atanh(x);
  if (op == "isnan") return std::isnan(x) ? 1.0 : 0.0;
  if (op == "isinf") {
    const bool pos = !attrs.has("detect_positive") || attrs.get_bool("detect_positive");
    const bool negv = !attrs.has("detect_negative") || attrs.get_bool("detect_negative");
    return (x == INFINITY && pos) || (x == -INFINITY && negv) ? 1.0 : 0.0;
  }
  if (op == "softsign") return x / (1 + std::fabs(x));
  if (op == "selu") {
    const double a = attr_or(attrs, "alpha", 1.67326319217681884765625), g = attr_or(attrs, "gamma", 1.05070102214813232421875);
    return x > 0 ? g * x : g * a * (std::exp(x) - 1);
  }
  if (op == "celu") {
    const double a = attr_or(attrs, "alpha", 1.0);
    if (std::isnan(x)) return x;
    return std::max(0.0, x) + std::min(0.0, a * (std::exp(x / a) - 1));
  }
  if (op == "thresholded_relu") return std::isnan(x) || x > attr_or(attrs, "alpha", 1.0) ? x : 0.0;
  if (op == "mish") return x * std::tanh(std::log1p(std::exp(x)));
  KILN_FAIL("ref::unary: unknown op ", op);
}

}  // namespace

Tensor unary(const std::string& op, const Tensor& x, const Attrs& attrs) {
  std::vector<double> v = values(x);
  for (double& e : v) e = apply(op, e, attrs, x.dtype());
  return from_values(v, x.shape());
}

}  // namespace kiln::ref
