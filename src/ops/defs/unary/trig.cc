// Trigonometric and hyperbolic functions beyond sin/cos/tanh (tan, asin, acos, atan, sinh, cosh,
// asinh, acosh, atanh), and the floating-point classifiers isnan / isinf (bool output). The
// trigonometric ops compute in floating point (integer/bool inputs become f32, as in math.cc);
// the classifiers take every dtype (an integer or bool is never NaN or infinite).
#include <cmath>
#include <type_traits>

#include "kiln/ops/unary.h"
#include "ops/defs/register_all.h"
#include "ops/defs/unary/unary_kernels.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::rules_pending;
using defs::unary_rule_x;
using defs::unary_rule_y;
using namespace defs::unary;

OpDef& trig_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return rules_pending(r.add(schema), onnx_type, since)
      .infer(infer_floating)
      .cast_inputs(InputCast::to_floating);
}

std::vector<TensorMeta> infer_to_bool(const InferCtx& c) { return {{DType::boolean, c.in(0).shape}}; }

// Writes pred(x) as bool; integer and bool inputs are finite numbers, so pred sees them never.
template <class Pred>
void classify(const KernelCall& k, Pred pred) {
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    if constexpr (std::is_floating_point_v<C>) {
      kernels::cpu::unary_loop<bool, T>(k.out(0), k.in(0), [&](C x) { return pred(x); });
    } else {
      kernels::cpu::unary_loop<bool, T>(k.out(0), k.in(0), [](C) { return false; });
    }
  });
}

void isinf_kernel(const KernelCall& k) {
  const bool pos = k.attrs.get_bool("detect_positive"), neg = k.attrs.get_bool("detect_negative");
  classify(k, [pos, neg](auto x) { return std::isinf(x) && (x > 0 ? pos : neg); });
}

const DTypeSet kFloating = DTypeSet::floating();

}  // namespace

void register_unary_trig_ops(OpRegistry& r) {
  trig_def(r, "tan(Tensor x) -> Tensor", "Tan", 7)
      .vjp(unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return g * (y * y + 1.0); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::tan(x); }))
      .doc("tangent (radians)");
  trig_def(r, "asin(Tensor x) -> Tensor", "Asin", 7)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * rsqrt(1.0 - x * x); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::asin(x); }))
      .doc("arcsine in [-pi/2, pi/2]; NaN outside [-1, 1]");
  trig_def(r, "acos(Tensor x) -> Tensor", "Acos", 7)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return -(g * rsqrt(1.0 - x * x)); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::acos(x); }))
      .doc("arccosine in [0, pi]; NaN outside [-1, 1]");
  trig_def(r, "atan(Tensor x) -> Tensor", "Atan", 7)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g / (x * x + 1.0); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::atan(x); }))
      .doc("arctangent in (-pi/2, pi/2)");
  trig_def(r, "sinh(Tensor x) -> Tensor", "Sinh", 9)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * cosh(x); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::sinh(x); }))
      .doc("hyperbolic sine; overflows to +-inf");
  trig_def(r, "cosh(Tensor x) -> Tensor", "Cosh", 9)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * sinh(x); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::cosh(x); }))
      .doc("hyperbolic cosine; overflows to inf");
  trig_def(r, "asinh(Tensor x) -> Tensor", "Asinh", 9)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * rsqrt(x * x + 1.0); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::asinh(x); }))
      .doc("inverse hyperbolic sine");
  // d/dx acosh(x) = 1 / sqrt(x^2 - 1), written as a product of two roots so that x^2 - 1 does not
  // cancel near x = 1.
  trig_def(r, "acosh(Tensor x) -> Tensor", "Acosh", 9)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) {
        return g * rsqrt(x - 1.0) * rsqrt(x + 1.0);
      }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::acosh(x); }))
      .doc("inverse hyperbolic cosine; NaN for x < 1");
  trig_def(r, "atanh(Tensor x) -> Tensor", "Atanh", 9)
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g / ((1.0 - x) * (x + 1.0)); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::atanh(x); }))
      .doc("inverse hyperbolic tangent; +-inf at +-1, NaN outside [-1, 1]");
  rules_pending(r.add("isnan(Tensor x) -> Tensor"), "IsNaN", 9)
      .infer(infer_to_bool)
      .kernel(DeviceType::cpu, DTypeSet::all(), [](const KernelCall& k) { classify(k, [](auto x) { return std::isnan(x); }); })
      .no_vjp("bool output")
      .doc("x != x, as bool; false for every integer and bool element");
  rules_pending(r.add("isinf(Tensor x, bool detect_positive=true, bool detect_negative=true) -> Tensor"), "IsInf", 10)
      .infer(infer_to_bool)
      .kernel(DeviceType::cpu, DTypeSet::all(), isinf_kernel)
      .no_vjp("bool output")
      .doc("x == +inf (when detect_positive) or x == -inf (when detect_negative), as bool; false for integers");
}

Tensor tan(const Tensor& x, SourceLoc loc) { return dispatch1(op("tan"), {x}, {}, loc); }
Tensor asin(const Tensor& x, SourceLoc loc) { return dispatch1(op("asin"), {x}, {}, loc); }
Tensor acos(const Tensor& x, SourceLoc loc) { return dispatch1(op("acos"), {x}, {}, loc); }
Tensor atan(const Tensor& x, SourceLoc loc) { return dispatch1(op("atan"), {x}, {}, loc); }
Tensor sinh(const Tensor& x, SourceLoc loc) { return dispatch1(op("sinh"), {x}, {}, loc); }
Tensor cosh(const Tensor& x, SourceLoc loc) { return dispatch1(op("cosh"), {x}, {}, loc); }
Tensor asinh(const Tensor& x, SourceLoc loc) { return dispatch1(op("asinh"), {x}, {}, loc); }
Tensor acosh(const Tensor& x, SourceLoc loc) { return dispatch1(op("acosh"), {x}, {}, loc); }
Tensor atanh(const Tensor& x, SourceLoc loc) { return dispatch1(op("atanh"), {x}, {}, loc); }
Tensor isnan(const Tensor& x, SourceLoc loc) { return dispatch1(op("isnan"), {x}, {}, loc); }
Tensor isinf(const Tensor& x, bool detect_positive, bool detect_negative, SourceLoc loc) {
  return dispatch1(op("isinf"), {x}, {{"detect_positive", detect_positive}, {"detect_negative", detect_negative}}, loc);
}

}  // namespace kiln
