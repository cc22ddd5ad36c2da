// Elementwise math: neg, abs, exp, log, sqrt, rsqrt, reciprocal, sin, cos, tanh, sigmoid, erf,
// floor, ceil, round, sign, clip, logical_not. Floating ops cast integer/bool inputs to f32
// (InputCast::to_floating); the others keep the input's dtype (logical_not gives bool).
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "kiln/ops/unary.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"
#include "ops/defs/unary/unary_kernels.h"

namespace kiln {

namespace defs::unary {

std::vector<TensorMeta> infer_floating(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  return {{to_floating(x.dtype), x.shape}};
}

bool vmath_contiguous_f32(const KernelCall& k, kernels::cpu::VmathFn fn) {
  const Tensor& x = k.in(0);
  const Tensor& y = k.out(0);
  // Note [Strided inputs through vmath]
  // A strided f32 input into a contiguous output (PVTv2's GELU reads its depthwise convolution's
  // [N, C, H, W] output as [N, H W, C]) went through unary_loop's scalar function, gelu's erf in
  // float64 at ~1 ns an element: 0.8 ms for one [3136, 256] layer, 6.4 of the model's 12.7 ms at
  // batch 1 (ORT: 0.63 for all 8). It is copied into the output (a tiled transpose where it is a
  // permuted view: Note [Transposed operands] in loops.h) and the vector function runs there in
  // place, as the engines run it over a dead input.
  if (x.dtype() != DType::f32 || y.dtype() != DType::f32 || x.shape() != y.shape() || !y.is_contiguous()) return false;
  const bool copy_first = !x.is_contiguous();  // (y itself is contiguous: never x then)
  if (copy_first) kernels::cpu::copy_into(y, x);
  const kernels::cpu::VmathUnaryF32 f =
      kernels::cpu::vmath_kernels_f32(kernels::cpu::active_isa()).unary[static_cast<int>(fn)];
  const float* xp = static_cast<const float*>(copy_first ? y.data_ptr() : x.data_ptr());
  float* yp = static_cast<float*>(y.data_ptr());
  parallel_for(0, x.numel(), kernels::cpu::kGrain, [&](int64_t b, int64_t e) { f(xp + b, yp + b, e - b); });
  return true;
}

std::vector<TensorMeta> infer_numeric(const InferCtx& c) {
  const TensorMeta& x = c.in(0);
  if (x.dtype == DType::boolean)
    c.fail("input '" + c.arg_name(0) + "' is " + meta_str(x) + ", but " + c.op.name() +
           " needs a numeric dtype (cast it first; for a logical negation use logical_not)");
  return {x};
}

}  // namespace defs::unary

namespace {

using defs::rules_pending;
using namespace defs::unary;
using kernels::cpu::unary_loop;
using kernels::cpu::VmathFn;

// Two's-complement negation without signed-overflow UB (-INT_MIN wraps to INT_MIN, u8 wraps
// modulo 256, as in PyTorch).
template <class C>
C wrapping_neg(C x) {
  if constexpr (std::is_integral_v<C>) {
    using U = std::make_unsigned_t<C>;
    return static_cast<C>(static_cast<U>(U(0) - static_cast<U>(x)));
  } else {
    return -x;
  }
}

template <class C>
C abs_value(C x) {
  if constexpr (std::is_unsigned_v<C>) return x;
  else if constexpr (std::is_integral_v<C>) return x < C(0) ? wrapping_neg(x) : x;
  else return std::abs(x);
}

// NaN stays NaN and a floating zero keeps its sign (NumPy's sign, and ONNX Sign).
template <class C>
C sign_value(C x) {
  if constexpr (std::is_unsigned_v<C>) return static_cast<C>(x > C(0));
  else if constexpr (std::is_integral_v<C>) return static_cast<C>((x > C(0)) - (x < C(0)));
  else return x > C(0) ? C(1) : (x < C(0) ? C(-1) : x);
}

// Note [Rounding half to even]: std::nearbyint rounds in the current rounding mode, which kiln
// never changes from the default FE_TONEAREST (ties to even), and it compiles to one instruction
// (roundss/roundsd) where the ISA has it. std::round would round ties away from zero.
template <class F>
KernelFn rounding_kernel(F f) {
  return numeric_kernel([f](auto x) {
    if constexpr (std::is_floating_point_v<decltype(x)>) return f(x);
    else return x;  // integers are already whole
  });
}

// A clip bound as the compute type C: absent means unbounded; integer dtypes saturate the bound to
// their range (clip(u8, min=-5) is a no-op, not a wrap).
template <class C>
C clip_bound(const Attrs& attrs, const char* name, bool upper) {
  using L = std::numeric_limits<C>;
  if constexpr (std::is_floating_point_v<C>) {
    if (!attrs.has(name)) return upper ? L::infinity() : -L::infinity();
    return static_cast<C>(attrs.get_float(name));
  } else {
    if (!attrs.has(name)) return upper ? L::max() : L::lowest();
    double b = attrs.get_float(name);
    if (b <= static_cast<double>(L::lowest())) return L::lowest();
    if (b >= static_cast<double>(L::max())) return L::max();
    return static_cast<C>(b);
  }
}

void clip_kernel(const KernelCall& k) {
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, bool>) {
      KILN_ASSERT(false, "clip: bool reached the kernel");
    } else {
      using C = compute_t<T>;
      const C lo = clip_bound<C>(k.attrs, "min", false), hi = clip_bound<C>(k.attrs, "max", true);
      // min first, then max: with min > max every element becomes max (NumPy, PyTorch, ONNX).
      // Comparisons are false for NaN, so NaN passes through.
      unary_loop<T, T>(k.out(0), k.in(0), [lo, hi](C x) {
        if (x < lo) x = lo;
        if (x > hi) x = hi;
        return x;
      });
    }
  });
}

std::vector<TensorMeta> infer_clip(const InferCtx& c) {
  auto out = infer_numeric(c);
  const TensorMeta& x = c.in(0);
  for (const char* name : {"min", "max"}) {
    if (!c.attrs.has(name) || is_floating(x.dtype)) continue;
    double b = c.attrs.get_float(name);
    if (std::floor(b) != b)
      c.fail(std::string("bound '") + name + "' = " + std::to_string(b) + " is not a whole number but input '" +
             c.arg_name(0) + "' is " + meta_str(x) + " (cast x to a floating dtype first)");
  }
  return out;
}

void logical_not_kernel(const KernelCall& k) {
  visit_dtype(k.in(0).dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    unary_loop<bool, T>(k.out(0), k.in(0), [](C x) { return x == C(0); });
  });
}

OpDef& floating_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return rules_pending(r.add(schema), onnx_type, since)
      .infer(infer_floating)
      .cast_inputs(InputCast::to_floating)
      .per_sample();
}

OpDef& numeric_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return rules_pending(r.add(schema), onnx_type, since).infer(infer_numeric).per_sample();
}

const DTypeSet kFloating = DTypeSet::floating();
const DTypeSet kNumeric = DTypeSet::numeric();

}  // namespace

void register_unary_math_ops(OpRegistry& r) {
  numeric_def(r, "neg(Tensor x) -> Tensor", "Neg", 6)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor&, const Attrs&) { return neg(g); }))
      .kernel(DeviceType::cpu, kNumeric, numeric_kernel([](auto x) { return wrapping_neg(x); }))
      .doc("-x; integers wrap (u8: modulo 256); not defined for bool");
  numeric_def(r, "abs(Tensor x) -> Tensor", "Abs", 6)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * sign(x); }))
      .kernel(DeviceType::cpu, kNumeric, numeric_kernel([](auto x) { return abs_value(x); }))
      .doc("|x|; identity on u8; abs of the most negative integer wraps to itself");
  floating_def(r, "exp(Tensor x) -> Tensor", "Exp", 6)
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return g * y; }))
      .kernel(DeviceType::cpu, kFloating, vmath_kernel(VmathFn::exp, [](auto x) { return std::exp(x); }))
      .doc("e^x; overflows to inf");
  floating_def(r, "log(Tensor x) -> Tensor", "Log", 6)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g / x; }))
      .kernel(DeviceType::cpu, kFloating, vmath_kernel(VmathFn::log, [](auto x) { return std::log(x); }))
      .doc("natural log; log(0) = -inf, log(x < 0) = NaN");
  floating_def(r, "sqrt(Tensor x) -> Tensor", "Sqrt", 6)
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return g / (y * 2.0); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::sqrt(x); }))
      .doc("square root; NaN for x < 0");
  floating_def(r, "rsqrt(Tensor x) -> Tensor", nullptr, 0)
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return g * (y * y * y) * -0.5; }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return decltype(x)(1) / std::sqrt(x); }))
      .doc("1 / sqrt(x) (ONNX: Reciprocal(Sqrt(x)))");
  floating_def(r, "reciprocal(Tensor x) -> Tensor", "Reciprocal", 6)
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return -(g * y * y); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return decltype(x)(1) / x; }))
      .doc("1 / x");
  floating_def(r, "sin(Tensor x) -> Tensor", "Sin", 7)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * cos(x); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::sin(x); }))
      .doc("sine (radians)");
  floating_def(r, "cos(Tensor x) -> Tensor", "Cos", 7)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return -(g * sin(x)); }))
      .kernel(DeviceType::cpu, kFloating, floating_kernel([](auto x) { return std::cos(x); }))
      .doc("cosine (radians)");
  floating_def(r, "tanh(Tensor x) -> Tensor", "Tanh", 6)
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return g * (1.0 - y * y); }))
      .kernel(DeviceType::cpu, kFloating, vmath_kernel(VmathFn::tanh, [](auto x) { return std::tanh(x); }))
      .writes_over(0)
      .doc("hyperbolic tangent");
  // Note [Stable sigmoid]: 1 / (1 + e^-x) needs no branch: for x -> -inf, e^-x overflows to inf
  // and the result is 0 (correctly, with full relative precision before that); for x -> +inf it
  // is 1. No inf/inf or 0/0 can occur, so only a NaN input gives NaN.
  floating_def(r, "sigmoid(Tensor x) -> Tensor", "Sigmoid", 6)
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs&) { return g * (y * (1.0 - y)); }))
      .kernel(DeviceType::cpu, kFloating, vmath_kernel(VmathFn::sigmoid, [](auto x) {
        using C = decltype(x);
        return C(1) / (C(1) + std::exp(-x));
      }))
      .writes_over(0)
      .doc("1 / (1 + e^-x), stable for large |x| (Note [Stable sigmoid])");
  floating_def(r, "erf(Tensor x) -> Tensor", "Erf", 9)
      .vjp(defs::unary_rule_x([](const Tensor& g, const Tensor& x, const Attrs&) { return g * exp(-(x * x)) * (2.0 / std::sqrt(std::numbers::pi)); }))
      .kernel(DeviceType::cpu, kFloating, vmath_kernel(VmathFn::erf, [](auto x) { return std::erf(x); }))
      .doc("Gauss error function");
  numeric_def(r, "floor(Tensor x) -> Tensor", "Floor", 6)
      .vjp(defs::zero_rule())
      .kernel(DeviceType::cpu, kNumeric, rounding_kernel([](auto x) { return std::floor(x); }))
      .doc("round toward -inf; identity on integers");
  numeric_def(r, "ceil(Tensor x) -> Tensor", "Ceil", 6)
      .vjp(defs::zero_rule())
      .kernel(DeviceType::cpu, kNumeric, rounding_kernel([](auto x) { return std::ceil(x); }))
      .doc("round toward +inf; identity on integers");
  numeric_def(r, "round(Tensor x) -> Tensor", "Round", 11)
      .vjp(defs::zero_rule())
      .kernel(DeviceType::cpu, kNumeric, rounding_kernel([](auto x) { return std::nearbyint(x); }))
      .doc("round to nearest, ties to even (Note [Rounding half to even]); identity on integers");
  numeric_def(r, "sign(Tensor x) -> Tensor", "Sign", 9)
      .vjp(defs::zero_rule())
      .kernel(DeviceType::cpu, kNumeric, numeric_kernel([](auto x) { return sign_value(x); }))
      .doc("-1, 0 or 1 in x's dtype; NaN stays NaN");
  rules_pending(r.add("clip(Tensor x, float? min, float? max) -> Tensor"), "Clip", 11)
      .per_sample()
      .infer(infer_clip)
      .kernel(DeviceType::cpu, kNumeric, clip_kernel)
      // Note [Clip gradient]: passes where the output lies strictly inside (min, max); read from the
      // output so that clamp_ (whose input is overwritten) has the same rule. At an input exactly
      // on a bound the gradient is 0.
      .vjp(defs::unary_rule_y([](const Tensor& g, const Tensor& y, const Attrs& a) {
        Tensor inside;
        if (a.has("min")) inside = gt(y, defs::scalar_like(a.get_float("min"), y));
        if (a.has("max")) {
          Tensor below = lt(y, defs::scalar_like(a.get_float("max"), y));
          inside = inside.defined() ? logical_and(inside, below) : below;
        }
        return inside.defined() ? defs::mask_grad(inside, g) : g;
      }))
      .writes_over(0)
      .doc("min(max(x, min), max); absent bounds are unbounded; integer inputs need whole bounds");
  rules_pending(r.add("logical_not(Tensor x) -> Tensor"), "Not", 1)
      .infer([](const InferCtx& c) { return std::vector<TensorMeta>{{DType::boolean, c.in(0).shape}}; })
      .kernel(DeviceType::cpu, DTypeSet::all(), logical_not_kernel)
      .no_vjp("bool output")
      .doc("x == 0, as bool (NaN is true, so its negation is false)");
}

Tensor neg(const Tensor& x, SourceLoc loc) { return dispatch1(op("neg"), {x}, {}, loc); }
Tensor abs(const Tensor& x, SourceLoc loc) { return dispatch1(op("abs"), {x}, {}, loc); }
Tensor exp(const Tensor& x, SourceLoc loc) { return dispatch1(op("exp"), {x}, {}, loc); }
Tensor log(const Tensor& x, SourceLoc loc) { return dispatch1(op("log"), {x}, {}, loc); }
Tensor sqrt(const Tensor& x, SourceLoc loc) { return dispatch1(op("sqrt"), {x}, {}, loc); }
Tensor rsqrt(const Tensor& x, SourceLoc loc) { return dispatch1(op("rsqrt"), {x}, {}, loc); }
Tensor reciprocal(const Tensor& x, SourceLoc loc) { return dispatch1(op("reciprocal"), {x}, {}, loc); }
Tensor sin(const Tensor& x, SourceLoc loc) { return dispatch1(op("sin"), {x}, {}, loc); }
Tensor cos(const Tensor& x, SourceLoc loc) { return dispatch1(op("cos"), {x}, {}, loc); }
Tensor tanh(const Tensor& x, SourceLoc loc) { return dispatch1(op("tanh"), {x}, {}, loc); }
Tensor sigmoid(const Tensor& x, SourceLoc loc) { return dispatch1(op("sigmoid"), {x}, {}, loc); }
Tensor erf(const Tensor& x, SourceLoc loc) { return dispatch1(op("erf"), {x}, {}, loc); }
Tensor floor(const Tensor& x, SourceLoc loc) { return dispatch1(op("floor"), {x}, {}, loc); }
Tensor ceil(const Tensor& x, SourceLoc loc) { return dispatch1(op("ceil"), {x}, {}, loc); }
Tensor round(const Tensor& x, SourceLoc loc) { return dispatch1(op("round"), {x}, {}, loc); }
Tensor sign(const Tensor& x, SourceLoc loc) { return dispatch1(op("sign"), {x}, {}, loc); }
Tensor clip(const Tensor& x, std::optional<Scalar> min, std::optional<Scalar> max, SourceLoc loc) {
  Attrs attrs;
  if (min) attrs.set("min", min->to_double());
  if (max) attrs.set("max", max->to_double());
  return dispatch1(op("clip"), {x}, attrs, loc);
}
Tensor logical_not(const Tensor& x, SourceLoc loc) { return dispatch1(op("logical_not"), {x}, {}, loc); }

}  // namespace kiln
