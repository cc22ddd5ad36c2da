// Binary arithmetic: add, sub, mul, div, pow, mod, maximum, minimum. Inputs are promoted to their
// common dtype by the dispatcher (InputCast::common); the kernels see one element type.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vmath.h"
#include "kiln/ops/binary.h"
#include "ops/defs/common.h"
#include "ops/defs/register_all.h"
#include "ops/defs/vjp_util.h"
#if KILN_HAS_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace kiln {

namespace {

using kernels::cpu::binary_loop;

// Registers a same-type binary op whose kernel applies F to compute_t<T> values.
template <class F>
KernelFn same_type_kernel(F f) {
  return [f](const KernelCall& k) {
    visit_dtype(k.in(0).dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      binary_loop<T, T>(k.out(0), k.in(0), k.in(1), [&](compute_t<T> a, compute_t<T> b) { return f(a, b); });
    });
  };
}

// Note [f32 arithmetic through vmath]
// The generic elementwise loop is compiled for the baseline ISA (SSE2). For f32 add, sub, mul and
// div, each contiguous or broadcast run of at least kVmathRun floats goes to vmath's binary kernel
// for the active ISA instead (the same IEEE operations, so the same bits). One-thread engines of
// 20 chained ops, alternating with the SSE2 loop (min of 1000 runs, twice): 64 x 56 x 56 plus a
// tensor of that shape 0.576 -> 0.370 ms, 16 planes of 56 x 56 times one value each 0.151 ->
// 0.085, 96 planes of 14 x 14 0.066 -> 0.050. Runs of 7 x 7 (a squeeze-excite scale) were slower
// through the vector kernel (0.122 -> 0.152 ms for 576 planes), so an op whose runs are shorter
// takes binary_loop's loop whole (a test per run cost it 0.122 -> 0.137), and runs with other
// strides take its strided pattern.
constexpr int64_t kVmathRun = 64;

template <class F>
KernelFn arith_kernel(kernels::cpu::VmathBinOp op, F f) {
  return [op, f](const KernelCall& k) {
    if (k.out(0).dtype() != DType::f32 || k.in(0).dtype() != DType::f32 || k.in(1).dtype() != DType::f32) {
      same_type_kernel(f)(k);
      return;
    }
    const kernels::cpu::VmathBinaryF32 bin =
        kernels::cpu::vmath_kernels_f32(kernels::cpu::active_isa()).binary[static_cast<int>(op)];
    const Tensor ops[3] = {k.out(0), k.in(0), k.in(1)};
    const kernels::cpu::LoopPlan<3> plan = kernels::cpu::plan_loop<3>(ops);
    // Note [Short rows over a broadcast] in loops.h: a tile against a row repeated over it goes
    // through the vector kernel in chunks, against the row copied out kRepeat floats long.
    constexpr int64_t kRepeat = 256;
    auto tile = [&](float* o, const float* x, const float* y, int64_t mid, int64_t inner, bool x_full) {
      alignas(64) float rep[kRepeat + 64];
      const int64_t rows = std::max<int64_t>(1, kRepeat / inner), len = mid * inner;
      const float* r = x_full ? y : x;
      for (int64_t j = 0; j < rows; ++j) std::copy(r, r + inner, rep + j * inner);
      for (int64_t c = 0; c < len; c += rows * inner) {
        const int64_t n = std::min(rows * inner, len - c);
        if (x_full) bin(x + c, 1, rep, 1, o + c, n);
        else bin(rep, 1, y + c, 1, o + c, n);
      }
    };
    // One image's channel-blocked activation ([1, C/16, H, W, 16]) goes in a band of rows a thread.
    const Shape& out_shape = k.out(0).shape();
    const bool one_blocked_image = out_shape.size() == 5 && out_shape[0] == 1 && out_shape[4] == 16;
    const int64_t bands = one_blocked_image ? get_num_threads() : 1;
    if (kernels::cpu::for_each_broadcast_tile<float, float>(plan, tile, bands)) return;
    auto run = [&](char** p, const int64_t* s, int64_t n) {
      constexpr int64_t w = sizeof(float);
      if (s[0] == w && (s[1] == w || s[1] == 0) && (s[2] == w || s[2] == 0)) {
        bin(reinterpret_cast<const float*>(p[1]), s[1] / w, reinterpret_cast<const float*>(p[2]), s[2] / w,
            reinterpret_cast<float*>(p[0]), n);
        return;
      }
      kernels::cpu::binary_run<float, float>(p, s, n, f);
    };
    // Note [Transposed operands] in loops.h: runs of a transposed input's tiles, copied contiguous.
    if (kernels::cpu::for_each_transposed_run<3>(plan, {4, 4, 4}, run)) return;
    if (plan.shape.back() < kVmathRun) {  // short runs: binary_loop's loop, with no per-run test
      kernels::cpu::for_each_run<3>(plan, [&](char** p, const int64_t* s, int64_t n) {
        kernels::cpu::binary_run<float, float>(p, s, n, f);
      });
      return;
    }
    kernels::cpu::for_each_run<3>(plan, run);
  };
}

// mul's CPU kernel (pow's square too, Note [Squares as products]).
KernelFn mul_kernel() {
  return arith_kernel(kernels::cpu::VmathBinOp::mul, [](auto a, auto b) { return static_cast<decltype(a)>(a * b); });
}

template <class C>
C int_pow(C base, C exp) {
  if constexpr (std::is_same_v<C, bool>) {
    return base || !exp;
  } else {
    if (exp < 0) return base == 1 ? C(1) : base == C(-1) ? ((exp & 1) ? C(-1) : C(1)) : C(0);
    using U = std::make_unsigned_t<C>;
    U result = 1, b = static_cast<U>(base);  // wraps like C arithmetic on overflow, no UB
    for (auto e = exp; e > 0; e >>= 1) {
      if (e & 1) result = static_cast<U>(result * b);
      b = static_cast<U>(b * b);
    }
    return static_cast<C>(result);
  }
}

void check_int_divisor(const Tensor& b, const char* opname) {
  if (is_floating(b.dtype())) return;
  visit_dtype(b.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    std::vector<double> dummy;
    const Tensor& t = b;
    bool zero = false;
    const Tensor ops[1] = {t};
    kernels::cpu::for_each_run<1>(ops, [&](char** p, const int64_t* s, int64_t n) {
      for (int64_t i = 0; i < n; ++i)
        if (*reinterpret_cast<const T*>(p[0] + i * s[0]) == T(0)) zero = true;
    }, INT64_MAX);
    KILN_CHECK(!zero, opname, ": integer division by zero (divisor of dtype ", dtype_name(b.dtype()), ", shape ",
               shape_str(b.shape()), " contains 0)");
  });
}

template <class C>
C int_div(C a, C b) {
  if constexpr (std::is_same_v<C, bool>) {
    return a;
  } else {
    if constexpr (std::is_signed_v<C>)
      if (b == C(-1)) return static_cast<C>(0 - static_cast<std::make_unsigned_t<C>>(a));  // no overflow UB
    return static_cast<C>(a / b);
  }
}

template <class C>
C mod_value(C a, C b, bool fmod) {
  if constexpr (std::is_floating_point_v<C>) {
    C r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0))) r += b;
    return r;
  } else if constexpr (std::is_same_v<C, bool>) {
    return false;
  } else {
    if constexpr (std::is_signed_v<C>)
      if (b == C(-1)) return C(0);
    C r = static_cast<C>(a % b);
    if constexpr (std::is_signed_v<C>)
      if (!fmod && r != 0 && ((r < 0) != (b < 0))) r = static_cast<C>(r + b);
    return r;
  }
}

template <class C>
C max_value(C a, C b) {
  if constexpr (std::is_floating_point_v<C>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  return a > b ? a : b;
}
template <class C>
C min_value(C a, C b) {
  if constexpr (std::is_floating_point_v<C>)
    if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<C>::quiet_NaN();
  return a < b ? a : b;
}

const DTypeSet kArith = DTypeSet::numeric();

OpDef& binary_def(OpRegistry& r, const char* schema, const char* onnx_type, int since) {
  return defs::rules_pending(r.add(schema), onnx_type, since)
      .infer(defs::infer_broadcast_promote)
      .cast_inputs(InputCast::common)
      .per_sample();
}

// Derivative rules of the binary ops: gradients are summed back over broadcast dims (sum_to).
using defs::sum_to;
VjpRule binary_rule(std::vector<int> save, Tensor (*da)(const Tensor& g, const VjpCtx& c),
                    Tensor (*db)(const Tensor& g, const VjpCtx& c), std::vector<int> save_out = {}) {
  return VjpRule{[da, db](const VjpCtx& c, std::span<const Tensor> g) {
                   std::vector<Tensor> r(2);
                   if (c.needs(0)) r[0] = sum_to(da(g[0], c), c.in_shape(0));
                   if (c.needs(1)) r[1] = sum_to(db(g[0], c), c.in_shape(1));
                   return r;
                 },
                 std::move(save), std::move(save_out)};
}

// Note [Ties in maximum/minimum]: where a == b the gradient is split evenly between a and b
// (as PyTorch does), so the sum of both gradients is g everywhere.
Tensor extreme_share(const Tensor& g, const VjpCtx& c, bool for_a, bool is_max) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  Tensor wins = for_a == is_max ? gt(a, b) : lt(a, b);
  Tensor w = where(wins, defs::scalar_like(1, g), where(eq(a, b), defs::scalar_like(0.5, g), defs::scalar_like(0, g)));
  return g * w;
}

}  // namespace

void register_binary_arith_ops(OpRegistry& r) {
  binary_def(r, "add(Tensor a, Tensor b) -> Tensor", "Add", 7)
      .kernel(DeviceType::cpu, DTypeSet::all(),
              arith_kernel(kernels::cpu::VmathBinOp::add, [](auto a, auto b) { return static_cast<decltype(a)>(a + b); }))
#if KILN_HAS_CUDA
      .kernel(DeviceType::cuda, {DType::f32},
              [](const KernelCall& k) { kernels::cuda::add_f32(k.out(0), k.in(0), k.in(1)); })
#endif
      .vjp(binary_rule({}, [](const Tensor& g, const VjpCtx&) { return g; }, [](const Tensor& g, const VjpCtx&) { return g; }))
      .writes_over(0)
      .doc("a + b (bool: logical or)");
  binary_def(r, "sub(Tensor a, Tensor b) -> Tensor", "Sub", 7)
      .kernel(DeviceType::cpu, kArith,
              arith_kernel(kernels::cpu::VmathBinOp::sub, [](auto a, auto b) { return static_cast<decltype(a)>(a - b); }))
      .vjp(binary_rule({}, [](const Tensor& g, const VjpCtx&) { return g; }, [](const Tensor& g, const VjpCtx&) { return neg(g); }))
      .writes_over(0)
      .doc("a - b");
  binary_def(r, "mul(Tensor a, Tensor b) -> Tensor", "Mul", 7)
      .kernel(DeviceType::cpu, DTypeSet::all(), mul_kernel())
      .vjp(binary_rule({0, 1}, [](const Tensor& g, const VjpCtx& c) { return g * c.inputs[1]; }, [](const Tensor& g, const VjpCtx& c) { return g * c.inputs[0]; }))
      .writes_over(0)
      .doc("a * b (bool: logical and)");
  binary_def(r, "div(Tensor a, Tensor b) -> Tensor", "Div", 7)
      .kernel(DeviceType::cpu, kArith, [](const KernelCall& k) {
        check_int_divisor(k.in(1), "div");
        arith_kernel(kernels::cpu::VmathBinOp::div, [](auto a, auto b) {
          using C = decltype(a);
          if constexpr (std::is_floating_point_v<C>) return a / b;
          else return int_div(a, b);
        })(k);
      })
      .vjp(binary_rule({0, 1}, [](const Tensor& g, const VjpCtx& c) { return g / c.inputs[1]; },
                        [](const Tensor& g, const VjpCtx& c) { return -(g * c.inputs[0] / (c.inputs[1] * c.inputs[1])); }))
      .writes_over(0)
      .doc("a / b; integers truncate toward zero (ONNX Div, C), integer division by zero is an error");
  binary_def(r, "pow(Tensor a, Tensor b) -> Tensor", "Pow", 7)
      .kernel(DeviceType::cpu, kArith, [](const KernelCall& k) {
        // Note [Squares as products]
        // T5's RMS norm squares its input as pow(x, 2): through std::pow, ~3.8 ns a float, 0.25 ms of
        // each of its 13 norms over [1, 128, 512] (3.2 of 15.3 ms, where ONNX Runtime took 13.8 in
        // all). A float raised to exactly 2 is x * x, correctly rounded as pow's is (and so for
        // infinities, NaNs and signed zeros): a scalar exponent of 2 runs as mul(a, a).
        static const KernelFn square = mul_kernel();
        const Tensor& b = k.in(1);
        if (b.numel() == 1 && b.dtype() == k.in(0).dtype() && (b.dtype() == DType::f32 || b.dtype() == DType::f64) &&
            (b.dtype() == DType::f32 ? *static_cast<const float*>(b.data_ptr()) == 2.0f
                                     : *static_cast<const double*>(b.data_ptr()) == 2.0)) {
          const Tensor both[2] = {k.in(0), k.in(0)};
          square(KernelCall{k.op, both, k.attrs, k.outputs, nullptr});
          return;
        }
        same_type_kernel([](auto a, auto e) {
          using C = decltype(a);
          if constexpr (std::is_floating_point_v<C>) return static_cast<C>(std::pow(a, e));
          else return int_pow(a, e);
        })(k);
      })
      .vjp(binary_rule({0, 1}, [](const Tensor& g, const VjpCtx& c) { return g * c.inputs[1] * pow(c.inputs[0], c.inputs[1] - 1.0); },
                        [](const Tensor& g, const VjpCtx& c) { return g * c.outputs[0] * log(c.inputs[0]); }, {0}))
      .doc("a ** b");
  binary_def(r, "mod(Tensor a, Tensor b, bool fmod=false) -> Tensor", "Mod", 10)
      .kernel(DeviceType::cpu, kArith, [](const KernelCall& k) {
        check_int_divisor(k.in(1), "mod");
        bool fm = k.attrs.get_bool("fmod");
        same_type_kernel([fm](auto a, auto b) { return mod_value(a, b, fm); })(k);
      })
      .vjp(binary_rule({0, 1}, [](const Tensor& g, const VjpCtx&) { return g; },
                        [](const Tensor& g, const VjpCtx& c) {
                          Tensor q = c.inputs[0] / c.inputs[1];
                          Tensor whole = c.attrs.get_bool("fmod") ? sign(q) * floor(abs(q)) : floor(q);
                          return -(g * whole);
                        }))
      .doc("remainder: sign of the divisor (fmod=false, Python %) or of the dividend (fmod=true, C fmod)");
  binary_def(r, "maximum(Tensor a, Tensor b) -> Tensor", "Max", 8)
      .kernel(DeviceType::cpu, DTypeSet::all(), same_type_kernel([](auto a, auto b) { return max_value(a, b); }))
      .vjp(binary_rule({0, 1}, [](const Tensor& g, const VjpCtx& c) { return extreme_share(g, c, true, true); }, [](const Tensor& g, const VjpCtx& c) { return extreme_share(g, c, false, true); }))
      .doc("elementwise max; NaN propagates");
  binary_def(r, "minimum(Tensor a, Tensor b) -> Tensor", "Min", 8)
      .kernel(DeviceType::cpu, DTypeSet::all(), same_type_kernel([](auto a, auto b) { return min_value(a, b); }))
      .vjp(binary_rule({0, 1}, [](const Tensor& g, const VjpCtx& c) { return extreme_share(g, c, true, false); }, [](const Tensor& g, const VjpCtx& c) { return extreme_share(g, c, false, false); }))
      .doc("elementwise min; NaN propagates");
}

Tensor add(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("add"), {a, b}, {}, loc); }
Tensor sub(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("sub"), {a, b}, {}, loc); }
Tensor mul(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("mul"), {a, b}, {}, loc); }
Tensor div(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("div"), {a, b}, {}, loc); }
Tensor pow(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("pow"), {a, b}, {}, loc); }
Tensor mod(const Tensor& a, const Tensor& b, bool fmod, SourceLoc loc) {
  return dispatch1(op("mod"), {a, b}, {{"fmod", fmod}}, loc);
}
Tensor maximum(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("maximum"), {a, b}, {}, loc); }
Tensor minimum(const Tensor& a, const Tensor& b, SourceLoc loc) { return dispatch1(op("minimum"), {a, b}, {}, loc); }

}  // namespace kiln
