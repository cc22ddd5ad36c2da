// Activations ONNX defines beyond those in activation.cc: softsign, selu, celu, thresholded_relu,
// mish. All compute in floating point (integer/bool inputs become f32) and propagate NaN.
#include <cmath>

#include "kiln/ops/unary.h"
#include "ops/defs/register_all.h"
#include "ops/defs/unary/unary_kernels.h"
#include "ops/defs/vjp_util.h"

namespace kiln {

namespace {

using defs::rules_pending;
using defs::scalar_like;
using defs::unary_rule_x;
using namespace defs::unary;

OpDef& activation_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return rules_pending(r.add(schema), onnx_type, since)
      .infer(infer_floating)
      .cast_inputs(InputCast::to_floating)
      .per_sample();
}

std::vector<TensorMeta> infer_celu(const InferCtx& c) {
  if (c.attrs.get_float("alpha") == 0.0)
    c.fail("attribute 'alpha' must be nonzero (celu divides by it; input '" + c.arg_name(0) + "' is " +
           meta_str(c.in(0)) + ")");
  return infer_floating(c);
}

// Note [Mish in one pass]: x * tanh(log1p(e^x)) needs no threshold: for large x, e^x overflows to
// inf, log1p(inf) = inf and tanh(inf) = 1, giving exactly x; for very negative x, log1p and tanh of
// a tiny argument keep full relative precision, giving x * e^x.
template <class C>
C mish_value(C x) {
  return x * std::tanh(std::log1p(std::exp(x)));
}

}  // namespace

void register_unary_activation_onnx_ops(OpRegistry& r) {
  activation_def(r, "softsign(Tensor x) -> Tensor", "Softsign", 1)
      .kernel(DeviceType::cpu, DTypeSet::floating(), floating_kernel([](auto x) {
        using C = decltype(x);
        return x / (C(1) + std::abs(x));
      }))
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) {
        Tensor d = abs(x) + 1.0;
        return g / (d * d);
      }))
      .doc("x / (1 + |x|)");
  // The defaults are ONNX's (the float32 values of the constants in Klambauer et al., 2017).
  activation_def(r, "selu(Tensor x, float alpha=1.67326319217681884765625, float gamma=1.05070102214813232421875) -> Tensor",
                 "Selu", 6)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double a = k.attrs.get_float("alpha"), gm = k.attrs.get_float("gamma");
        apply_floating(k, [a, gm](auto x) {
          using C = decltype(x);
          return C(gm) * (x > C(0) ? x : C(a) * std::expm1(x));
        });
      })
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        const double al = a.get_float("alpha"), gm = a.get_float("gamma");
        return where(gt(x, scalar_like(0, x)), g * gm, g * exp(x) * (al * gm));
      }))
      .doc("gamma * (x for x > 0, alpha * (e^x - 1) otherwise); ONNX's alpha and gamma by default");
  activation_def(r, "celu(Tensor x, float alpha=1.0) -> Tensor", "Celu", 12)
      .infer(infer_celu)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double a = k.attrs.get_float("alpha");
        // max(0, x) + min(0, alpha * (e^(x/alpha) - 1)) is this branch for every nonzero alpha.
        apply_floating(k, [a](auto x) {
          using C = decltype(x);
          return x > C(0) ? x : C(a) * std::expm1(x / C(a));
        });
      })
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        return where(gt(x, scalar_like(0, x)), g, g * exp(x / a.get_float("alpha")));
      }))
      .doc("max(0, x) + min(0, alpha * (e^(x / alpha) - 1)); alpha must be nonzero");
  activation_def(r, "thresholded_relu(Tensor x, float alpha=1.0) -> Tensor", "ThresholdedRelu", 10)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double a = k.attrs.get_float("alpha");
        apply_floating(k, [a](auto x) {
          using C = decltype(x);
          return x > C(a) || x != x ? x : C(0);  // NaN passes through
        });
      })
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        return defs::mask_grad(gt(x, scalar_like(a.get_float("alpha"), x)), g);
      }))
      .doc("x for x > alpha, 0 otherwise; NaN stays NaN");
  activation_def(r, "mish(Tensor x) -> Tensor", "Mish", 18)
      .kernel(DeviceType::cpu, DTypeSet::floating(), floating_kernel([](auto x) { return mish_value(x); }))
      .vjp(unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) {
        Tensor t = tanh(softplus(x));
        return g * (t + x * (1.0 - t * t) * sigmoid(x));
      }))
      .doc("x * tanh(softplus(x)) (Note [Mish in one pass])");
}

Tensor softsign(const Tensor& x, SourceLoc loc) { return dispatch1(op("softsign"), {x}, {}, loc); }
Tensor selu(const Tensor& x, double alpha, double gamma, SourceLoc loc) {
  return dispatch1(op("selu"), {x}, {{"alpha", alpha}, {"gamma", gamma}}, loc);
}
Tensor celu(const Tensor& x, double alpha, SourceLoc loc) { return dispatch1(op("celu"), {x}, {{"alpha", alpha}}, loc); }
Tensor thresholded_relu(const Tensor& x, double alpha, SourceLoc loc) {
  return dispatch1(op("thresholded_relu"), {x}, {{"alpha", alpha}}, loc);
}
Tensor mish(const Tensor& x, SourceLoc loc) { return dispatch1(op("mish"), {x}, {}, loc); }

}  // namespace kiln
