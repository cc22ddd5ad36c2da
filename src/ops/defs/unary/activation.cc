// Activation functions: relu, leaky_relu, elu, hardsigmoid, hardswish, gelu, silu, softplus.
// relu keeps integer dtypes; the others compute in floating point (integer/bool inputs become f32).
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <type_traits>

#include "kiln/ops/unary.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/unary/unary_kernels.h"

namespace kiln {

namespace {

using defs::rules_pending;
using namespace defs::unary;

OpDef& activation_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return rules_pending(r.add(schema), onnx_type, since)
      .infer(infer_floating)
      .cast_inputs(InputCast::to_floating)
      .per_sample();
}

std::vector<TensorMeta> infer_gelu(const InferCtx& c) {
  const std::string& a = c.attrs.get_string("approximate");
  if (a != "none" && a != "tanh")
    c.fail("attribute 'approximate' must be \"none\" or \"tanh\", got \"" + a + "\" (input '" + c.arg_name(0) +
           "' is " + meta_str(c.in(0)) + ")");
  return infer_floating(c);
}

std::vector<TensorMeta> infer_softplus(const InferCtx& c) {
  if (c.attrs.get_float("beta") == 0.0)
    c.fail("attribute 'beta' must be nonzero (softplus divides by it; input '" + c.arg_name(0) + "' is " +
           meta_str(c.in(0)) + ")");
  return infer_floating(c);
}

// Note [GELU without cancellation]: the textbook forms 0.5x(1 + erf(x/sqrt2)) and
// 0.5x(1 + tanh(u)) subtract nearly equal numbers for negative x, losing most f32 digits by
// x = -4. We use the identities 1 + erf(z) = erfc(-z) and 0.5(1 + tanh(u)) = 1 / (1 + e^(-2u)),
// which keep full relative precision.
void gelu_kernel(const KernelCall& k) {
  const bool tanh_form = k.attrs.get_string("approximate") == "tanh";
  if (vmath_contiguous_f32(k, tanh_form ? kernels::cpu::VmathFn::gelu_tanh : kernels::cpu::VmathFn::gelu)) return;
  if (tanh_form) {
    apply_floating(k, [](auto x) {
      using C = decltype(x);
      const C u = C(std::numbers::sqrt2 * std::numbers::inv_sqrtpi) * (x + C(0.044715) * x * x * x);  // sqrt(2/pi)
      return x / (C(1) + std::exp(C(-2) * u));
    });
  } else {
    apply_floating(k, [](auto x) {
      using C = decltype(x);
      return C(0.5) * x * std::erfc(-x * C(1 / std::numbers::sqrt2));
    });
  }
}

// A contiguous f32 leaky_relu as a loop the compiler vectorizes, split over the thread pool (the
// element-by-element unary_loop, branching on each sign, ran CSPResNet-50's 51 of them at ~0.14 ms
// each, 7 of its 24 ms at batch 1 on two threads). Same arithmetic as the general path.
bool leaky_relu_contiguous_f32(const KernelCall& k, float s) {
  if (!contiguous_f32_pair(k)) return false;
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  const float* xp = static_cast<const float*>(x.data_ptr());
  float* yp = static_cast<float*>(y.data_ptr());
  // x times a factor picked from x's bits (the slope where x < 0, else 1): no branch, which the
  // compiler vectorizes (GCC does not if-convert `x < 0 ? x * s : x` under the default
  // -ftrapping-math, and the branch on random signs mispredicts half the time: 4 ns an element).
  // x < 0 is the sign bit set on a nonzero magnitude (-0 keeps the factor 1, whatever the slope's
  // sign); a NaN stays a NaN either way.
  const int32_t one = std::bit_cast<int32_t>(1.0f), slope = std::bit_cast<int32_t>(s);
  parallel_for(0, x.numel(), kernels::cpu::kGrain, [xp, yp, one, slope](int64_t b, int64_t e) {
    const float* const in = xp;
    float* const out = yp;
    for (int64_t i = b; i < e; ++i) {
      const int32_t bits = std::bit_cast<int32_t>(in[i]);
      const int32_t negative = (bits >> 31) & -static_cast<int32_t>((bits & 0x7fffffff) != 0);  // all ones if x < 0
      out[i] = in[i] * std::bit_cast<float>(one ^ ((one ^ slope) & negative));
    }
  });
  return true;
}

}  // namespace

void register_unary_activation_ops(OpRegistry& r) {
  rules_pending(r.add("relu(Tensor x) -> Tensor"), "Relu", 6)
      .per_sample()
      .infer(infer_numeric)
      .kernel(DeviceType::cpu, DTypeSet::numeric(), numeric_kernel([](auto x) {
        using C = decltype(x);
        if constexpr (std::is_unsigned_v<C>) return x;
        else return x < C(0) ? C(0) : x;  // NaN passes through
      }))
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return defs::mask_grad(gt(y, defs::scalar_like(0, y)), g); }))
      .writes_over(0)
      .doc("max(x, 0); keeps integer dtypes; NaN stays NaN");
  activation_def(r, "leaky_relu(Tensor x, float negative_slope=0.01) -> Tensor", "LeakyRelu", 6)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double s = k.attrs.get_float("negative_slope");
        if (leaky_relu_contiguous_f32(k, static_cast<float>(s))) return;
        apply_floating(k, [s](auto x) {
          using C = decltype(x);
          return x < C(0) ? x * C(s) : x;
        });
      })
      .writes_over(0)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        return where(gt(x, defs::scalar_like(0, x)), g, g * a.get_float("negative_slope"));
      }))
      .doc("x for x >= 0, negative_slope * x otherwise");
  activation_def(r, "elu(Tensor x, float alpha=1.0) -> Tensor", "Elu", 6)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double a = k.attrs.get_float("alpha");
        apply_floating(k, [a](auto x) {
          using C = decltype(x);
          return x > C(0) ? x : C(a) * std::expm1(x);
        });
      })
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        return where(gt(x, defs::scalar_like(0, x)), g, g * exp(x) * a.get_float("alpha"));
      }))
      .doc("x for x > 0, alpha * (e^x - 1) otherwise");
  activation_def(r, "hardsigmoid(Tensor x, float alpha=0.16666666666666666, float beta=0.5) -> Tensor", "HardSigmoid", 6)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double a = k.attrs.get_float("alpha"), b = k.attrs.get_float("beta");
        apply_floating(k, [a, b](auto x) {
          using C = decltype(x);
          const C v = C(a) * x + C(b);
          return v < C(0) ? C(0) : (v > C(1) ? C(1) : v);  // NaN passes through
        });
      })
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        const double al = a.get_float("alpha");
        Tensor v = x * al + a.get_float("beta");
        return defs::mask_grad(logical_and(gt(v, defs::scalar_like(0, v)), lt(v, defs::scalar_like(1, v))), g * al);
      }))
      .doc("max(0, min(1, alpha * x + beta)) (ONNX HardSigmoid; PyTorch's is alpha = 1/6, beta = 0.5)");
  activation_def(r, "hardswish(Tensor x) -> Tensor", "HardSwish", 14)
      .kernel(DeviceType::cpu, DTypeSet::floating(), floating_kernel([](auto x) {
        using C = decltype(x);
        C t = x + C(3);
        t = t < C(0) ? C(0) : (t > C(6) ? C(6) : t);
        return x * t / C(6);
      }))
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) {
        Tensor mid = g * (x * 2.0 + 3.0) / 6.0;
        return where(lt(x, defs::scalar_like(-3, x)), defs::scalar_like(0, g),
                     where(gt(x, defs::scalar_like(3, x)), g, mid));
      }))
      .doc("x * relu6(x + 3) / 6");
  activation_def(r, "gelu(Tensor x, str approximate=\"none\") -> Tensor", "Gelu", 20)
      .infer(infer_gelu)
      .kernel(DeviceType::cpu, DTypeSet::floating(), gelu_kernel)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        if (a.get_string("approximate") == "tanh") {
          const double c = std::numbers::sqrt2 * std::numbers::inv_sqrtpi;  // sqrt(2/pi)
          Tensor t = tanh((x + x * x * x * 0.044715) * c);
          Tensor du = (x * x * (3 * 0.044715) + 1.0) * c;
          return g * ((t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * du);
        }
        Tensor cdf = (erf(x * (1 / std::numbers::sqrt2)) + 1.0) * 0.5;
        Tensor pdf = exp(x * x * -0.5) * (std::numbers::inv_sqrtpi / std::numbers::sqrt2);
        return g * (cdf + x * pdf);
      }))
      .doc("x * Phi(x) (approximate=\"none\") or its tanh approximation (\"tanh\"); Note [GELU without cancellation]");
  activation_def(r, "silu(Tensor x) -> Tensor", nullptr, 0)
      .kernel(DeviceType::cpu, DTypeSet::floating(), vmath_kernel(kernels::cpu::VmathFn::silu, [](auto x) {
        using C = decltype(x);
        return x / (C(1) + std::exp(-x));
      }))
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) {
        Tensor s = sigmoid(x);
        return g * (s * (x * (1.0 - s) + 1.0));
      }))
      .doc("x * sigmoid(x) (ONNX: Mul(x, Sigmoid(x)))");
  activation_def(r, "softplus(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor", "Softplus", 1)
      .infer(infer_softplus)
      .kernel(DeviceType::cpu, DTypeSet::floating(), [](const KernelCall& k) {
        const double beta = k.attrs.get_float("beta"), threshold = k.attrs.get_float("threshold");
        apply_floating(k, [beta, threshold](auto x) {
          using C = decltype(x);
          const C bx = C(beta) * x;
          // Linear above the threshold, like PyTorch: there log1p(e^bx) / beta == x to working precision.
          return bx > C(threshold) ? x : std::log1p(std::exp(bx)) / C(beta);
        });
      })
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs& a) {
        Tensor bx = x * a.get_float("beta");
        return where(gt(bx, defs::scalar_like(a.get_float("threshold"), bx)), g, g * sigmoid(bx));
      }))
      .doc("log(1 + e^(beta x)) / beta, and x where beta * x > threshold (PyTorch's Softplus; ONNX's has beta = 1 and no threshold)");
}

Tensor relu(const Tensor& x, SourceLoc loc) { return dispatch1(op("relu"), {x}, {}, loc); }
Tensor leaky_relu(const Tensor& x, double negative_slope, SourceLoc loc) {
  return dispatch1(op("leaky_relu"), {x}, {{"negative_slope", negative_slope}}, loc);
}
Tensor elu(const Tensor& x, double alpha, SourceLoc loc) { return dispatch1(op("elu"), {x}, {{"alpha", alpha}}, loc); }
Tensor hardsigmoid(const Tensor& x, double alpha, double beta, SourceLoc loc) {
  return dispatch1(op("hardsigmoid"), {x}, {{"alpha", alpha}, {"beta", beta}}, loc);
}
Tensor hardswish(const Tensor& x, SourceLoc loc) { return dispatch1(op("hardswish"), {x}, {}, loc); }
Tensor gelu(const Tensor& x, const std::string& approximate, SourceLoc loc) {
  return dispatch1(op("gelu"), {x}, {{"approximate", approximate}}, loc);
}
Tensor silu(const Tensor& x, SourceLoc loc) { return dispatch1(op("silu"), {x}, {}, loc); }
Tensor softplus(const Tensor& x, double beta, double threshold, SourceLoc loc) {
  return dispatch1(op("softplus"), {x}, {{"beta", beta}, {"threshold", threshold}}, loc);
}

}  // namespace kiln
