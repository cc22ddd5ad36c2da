// Vectorized f32 math (kernels/cpu/vmath.h) under every ISA this machine has: the ulp error of each
// function against float64 over the whole f32 range (a stride through every bit pattern plus dense
// samples of each binade, denormals included), exact special values (+-0, +-inf, NaN, exp's
// overflow and underflow thresholds), tails of every length, softmax's exp-and-sum, the row
// epilogue. The measured maxima are printed; the bounds asserted are the documented ones.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "kernels/cpu/vmath.h"
#include "support/testing.h"

namespace kiln::kernels::cpu {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

double ref(VmathFn f, double x) {
  switch (f) {
    case VmathFn::exp: return std::exp(x);
    case VmathFn::log: return std::log(x);
    case VmathFn::tanh: return std::tanh(x);
    case VmathFn::sigmoid: return 1.0 / (1.0 + std::exp(-x));
    case VmathFn::erf: return std::erf(x);
    case VmathFn::gelu: return 0.5 * x * std::erfc(-x / std::sqrt(2.0));
    case VmathFn::gelu_tanh: {
      const double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
      return x / (1.0 + std::exp(-2.0 * u));
    }
    case VmathFn::silu: return x / (1.0 + std::exp(-x));
  }
  return 0;
}

const char* fn_name(VmathFn f) {
  static const char* names[] = {"exp", "log", "tanh", "sigmoid", "erf", "gelu", "gelu_tanh", "silu"};
  return names[static_cast<int>(f)];
}

// |got - want| in units of the f32 spacing at want (2^-149 below FLT_MIN): a correctly rounded
// result is within 0.5. Where want rounds to +-inf in f32, got must be that infinity (else 1e30).
double ulp_error(float got, double want) {
  const float wf = static_cast<float>(want);
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : 1e30;
  if (std::isinf(wf) || std::isnan(got) || std::isinf(got)) return got == wf ? 0.0 : 1e30;
  const double a = std::abs(want);
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  const double ulp = a < static_cast<double>(std::numeric_limits<float>::min()) ? std::ldexp(1.0, -149)
                                                                                : std::ldexp(1.0, e - 24);
  return std::abs(static_cast<double>(got) - want) / ulp;
}

// Finite inputs: every 1021st bit pattern of both signs plus 64 random mantissas per binade.
std::vector<float> sweep_inputs() {
  std::vector<float> xs;
  for (uint64_t b = 0; b < 0x7f800000u; b += 1021) {
    xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
    xs.push_back(-std::bit_cast<float>(static_cast<uint32_t>(b)));
  }
  std::mt19937 g(7);
  for (uint32_t e = 0; e < 255; ++e)
    for (int i = 0; i < 64; ++i) {
      const uint32_t bits = (e << 23) | (g() & 0x7fffffu);
      xs.push_back(std::bit_cast<float>(bits));
      xs.push_back(-std::bit_cast<float>(bits));
    }
  return xs;
}

class VmathIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not supported on this machine";
    override_.emplace(GetParam());
  }
  std::optional<IsaOverride> override_;
};

// The bound each function meets under every ISA (Note [vmath accuracy]).
double ulp_bound(VmathFn f) {
  switch (f) {
    case VmathFn::gelu: return 4.0;
    case VmathFn::sigmoid: return 2.5;
    case VmathFn::silu: return 3.0;
    default: return 1.0;
  }
}

TEST_P(VmathIsaTest, UlpErrorOverTheWholeRange) {
  const std::vector<float> xs = sweep_inputs();
  std::vector<float> ys(xs.size());
  for (int fi = 0; fi < kVmathFns; ++fi) {
    const auto f = static_cast<VmathFn>(fi);
    vmath_f32(f, xs.data(), ys.data(), static_cast<int64_t>(xs.size()));
    double worst = 0, worst_rel = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const double want = ref(f, xs[i]);
      const double u = ulp_error(ys[i], want);
      if (u > worst) worst = u, worst_x = xs[i];
      if (std::abs(want) >= std::numeric_limits<float>::min() && std::abs(want) <= std::numeric_limits<float>::max())
        worst_rel = std::max(worst_rel, std::abs(ys[i] - want) / std::abs(want));
    }
    std::printf("[vmath %s] %-9s max error %.3f ulp (at x = %.9g), max rel error %.3g over %zu inputs\n",
                std::string(isa_name(GetParam())).c_str(), fn_name(f), worst, worst_x, worst_rel, xs.size());
    EXPECT_LE(worst, ulp_bound(f)) << fn_name(f) << " at x = " << worst_x;
  }
}

TEST_P(VmathIsaTest, SpecialValues) {
  auto one = [](VmathFn f, float x) {
    float y = 0;
    vmath_f32(f, &x, &y, 1);
    return y;
  };
  const float denorm_min = std::numeric_limits<float>::denorm_min();
  EXPECT_EQ(one(VmathFn::exp, kInf), kInf);
  EXPECT_EQ(one(VmathFn::exp, -kInf), 0.0f);
  EXPECT_EQ(one(VmathFn::exp, 0.0f), 1.0f);
  EXPECT_EQ(one(VmathFn::exp, -0.0f), 1.0f);
  EXPECT_EQ(one(VmathFn::exp, denorm_min), 1.0f);
  EXPECT_EQ(one(VmathFn::exp, 88.72283f), 3.40279851e38f);                  // just below FLT_MAX
  EXPECT_EQ(one(VmathFn::exp, 88.7228394f), kInf);                          // exp > FLT_MAX + ulp/2
  EXPECT_EQ(one(VmathFn::exp, -103.972076f), denorm_min);  // -150 ln2 = -103.97207708: just above 2^-150
  EXPECT_EQ(one(VmathFn::exp, -103.972084f), 0.0f);        // just below 2^-150: rounds to 0
  EXPECT_EQ(one(VmathFn::exp, -87.0f), static_cast<float>(std::exp(-87.0)));  // normal edge
  EXPECT_EQ(one(VmathFn::exp, -100.0f), static_cast<float>(std::exp(-100.0)));  // denormal result
  EXPECT_EQ(one(VmathFn::log, 0.0f), -kInf);
  EXPECT_EQ(one(VmathFn::log, -0.0f), -kInf);
  EXPECT_EQ(one(VmathFn::log, kInf), kInf);
  EXPECT_TRUE(std::isnan(one(VmathFn::log, -1.0f)));
  EXPECT_TRUE(std::isnan(one(VmathFn::log, -kInf)));
  EXPECT_EQ(one(VmathFn::log, 1.0f), 0.0f);
  EXPECT_EQ(one(VmathFn::log, denorm_min), static_cast<float>(std::log(static_cast<double>(denorm_min))));
  EXPECT_EQ(one(VmathFn::tanh, kInf), 1.0f);
  EXPECT_EQ(one(VmathFn::tanh, -kInf), -1.0f);
  EXPECT_TRUE(std::signbit(one(VmathFn::tanh, -0.0f)));
  EXPECT_EQ(one(VmathFn::tanh, denorm_min), denorm_min);
  EXPECT_EQ(one(VmathFn::sigmoid, kInf), 1.0f);
  EXPECT_EQ(one(VmathFn::sigmoid, -kInf), 0.0f);
  EXPECT_EQ(one(VmathFn::sigmoid, -100.0f), static_cast<float>(1.0 / (1.0 + std::exp(100.0))));  // denormal
  EXPECT_EQ(one(VmathFn::erf, kInf), 1.0f);
  EXPECT_EQ(one(VmathFn::erf, -kInf), -1.0f);
  EXPECT_TRUE(std::signbit(one(VmathFn::erf, -0.0f)));
  for (VmathFn f : {VmathFn::gelu, VmathFn::gelu_tanh, VmathFn::silu}) {
    EXPECT_EQ(one(f, kInf), kInf) << fn_name(f);
    EXPECT_TRUE(std::isnan(one(f, -kInf))) << fn_name(f);  // -inf * 0, as in float64
    EXPECT_EQ(one(f, -1e30f), 0.0f) << fn_name(f);
    EXPECT_EQ(one(f, 0.0f), 0.0f) << fn_name(f);
  }
  for (int fi = 0; fi < kVmathFns; ++fi) EXPECT_TRUE(std::isnan(one(static_cast<VmathFn>(fi), kNaN))) << fi;
}

// Every length and misalignment: vector bodies and masked tails give the same values.
TEST_P(VmathIsaTest, TailsAndInPlace) {
  std::mt19937 g(3);
  std::uniform_real_distribution<float> d(-6.0f, 6.0f);
  std::vector<float> x(80);
  for (float& v : x) v = d(g);
  for (float& v : x) v = v == 0.0f ? 0.5f : v;
  for (int fi = 0; fi < kVmathFns; ++fi) {
    const auto f = static_cast<VmathFn>(fi);
    std::vector<float> xs = x;
    if (f == VmathFn::log)
      for (float& v : xs) v = std::abs(v);
    std::vector<float> full(xs.size());
    vmath_f32(f, xs.data(), full.data(), static_cast<int64_t>(xs.size()));
    for (int64_t off = 0; off < 3; ++off)
      for (int64_t n = 1; n + off <= 40; ++n) {
        std::vector<float> y(static_cast<size_t>(n) + 2, 42.0f);
        vmath_f32(f, xs.data() + off, y.data(), n);
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[static_cast<size_t>(i)], full[static_cast<size_t>(off + i)]) << fn_name(f);
        ASSERT_EQ(y[static_cast<size_t>(n)], 42.0f) << "wrote past the end";
      }
    std::vector<float> inplace = xs;
    vmath_f32(f, inplace.data(), inplace.data(), static_cast<int64_t>(inplace.size()));
    EXPECT_EQ(inplace, full) << fn_name(f);
  }
}

TEST_P(VmathIsaTest, ExpShiftSumAndMax) {
  const VmathKernelsF32& k = vmath_kernels_f32(active_isa());
  std::mt19937 g(5);
  std::uniform_real_distribution<float> d(-30.0f, 30.0f);
  for (int64_t n : {1, 5, 16, 17, 100, 1001}) {
    std::vector<float> x(static_cast<size_t>(n)), y(x.size());
    for (float& v : x) v = d(g) + 1000.0f;  // x - max is not representable in f32
    float m = k.max(x.data(), n);
    double want_m = -1e300;
    for (float v : x) want_m = std::max(want_m, static_cast<double>(v));
    ASSERT_EQ(m, static_cast<float>(want_m));
    const double sum = k.exp_shift_sum(x.data(), y.data(), n, m);
    double want_sum = 0, worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      const double e = std::exp(static_cast<double>(x[i]) - m);
      want_sum += e;
      worst = std::max(worst, ulp_error(y[i], e));
    }
    EXPECT_LE(worst, 1.0) << "n=" << n;
    EXPECT_NEAR(sum, want_sum, 1e-6 * want_sum) << "n=" << n;
  }
  std::vector<float> x = {1.0f, 3.0f, kNaN, 2.0f};
  EXPECT_TRUE(std::isnan(k.max(x.data(), 4)));
  std::vector<float> big(37, -2.0f);
  big[33] = kNaN;  // in the scalar tail of the vector kernels
  EXPECT_TRUE(std::isnan(k.max(big.data(), 37)));
  big[33] = 5.0f;
  EXPECT_EQ(k.max(big.data(), 37), 5.0f);
}

double act_ref(VmathAct a, double v) {
  switch (a) {
    case VmathAct::none: return v;
    case VmathAct::relu: return v > 0 ? v : 0;
    case VmathAct::relu6: return std::min(std::max(v, 0.0), 6.0);
    case VmathAct::sigmoid: return ref(VmathFn::sigmoid, v);
    case VmathAct::tanh: return std::tanh(v);
    case VmathAct::silu: return ref(VmathFn::silu, v);
    case VmathAct::gelu: return ref(VmathFn::gelu, v);
    case VmathAct::gelu_tanh: return ref(VmathFn::gelu_tanh, v);
    case VmathAct::hardswish: return v * std::min(std::max(v + 3, 0.0), 6.0) / 6;
  }
  return v;
}

// A 3-row block with padded leading dimensions: every activation, with/without row and column
// bias and residual, residual on either side of the activation, and the residual aliasing y.
// Binary arithmetic gives the scalar operators' bits (Note [f32 arithmetic through vmath] in
// src/ops/defs/binary/arith.cc): arrays and broadcast values on either side, every tail, in place,
// with infinities, NaN, zeros of both signs and denormals among the values.
TEST_P(VmathIsaTest, BinaryMatchesScalarBitForBit) {
  const VmathKernelsF32& k = vmath_kernels_f32(active_isa());
  std::mt19937 g(11);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  const float specials[] = {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(), 1e30f};
  auto same = [](float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y) || (x != x && y != y); };
  auto apply = [](int op, float x, float y) {
    switch (op) {
      case 0: return x + y;
      case 1: return x - y;
      case 2: return x * y;
      default: return x / y;
    }
  };
  for (int op = 0; op < kVmathBinOps; ++op)
    for (int64_t n : {1, 7, 15, 16, 17, 33, 100})
      for (int64_t sa : {0, 1})
        for (int64_t sb : {0, 1}) {
          std::vector<float> a(static_cast<size_t>(n)), b(static_cast<size_t>(n)), y(static_cast<size_t>(n) + 1, 42.0f);
          for (int64_t i = 0; i < n; ++i) {
            a[static_cast<size_t>(i)] = i % 5 == 3 ? specials[(i / 5) % 7] : d(g);
            b[static_cast<size_t>(i)] = i % 7 == 2 ? specials[(i / 7 + 3) % 7] : d(g);
          }
          k.binary[op](a.data(), sa, b.data(), sb, y.data(), n);
          for (int64_t i = 0; i < n; ++i) {
            const float want = apply(op, a[static_cast<size_t>(sa * i)], b[static_cast<size_t>(sb * i)]);
            ASSERT_TRUE(same(y[static_cast<size_t>(i)], want))
                << "op " << op << " n " << n << " sa " << sa << " sb " << sb << " i " << i << ": " << y[static_cast<size_t>(i)]
                << " vs " << want;
          }
          ASSERT_EQ(y.back(), 42.0f) << "wrote past n";
          if (sa == 1) {  // in place over a
            std::vector<float> in = a;
            k.binary[op](in.data(), 1, b.data(), sb, in.data(), n);
            for (int64_t i = 0; i < n; ++i) ASSERT_TRUE(same(in[static_cast<size_t>(i)], y[static_cast<size_t>(i)]));
          }
        }
}

TEST_P(VmathIsaTest, BlockEpilogue) {
  const VmathKernelsF32& k = vmath_kernels_f32(active_isa());
  std::mt19937 g(9);
  std::uniform_real_distribution<float> d(-4.0f, 4.0f);
  const int64_t m = 3;
  for (int ai = 0; ai < kVmathActs; ++ai) {
    const auto act = static_cast<VmathAct>(ai);
    for (int64_t n : {1, 7, 16, 33, 70})
      for (int variant = 0; variant < 8; ++variant) {
        const bool rowb = variant & 1, col = variant & 2, res = variant & 4;
        for (int mode = 0; mode < (res ? 3 : 1); ++mode) {  // 0: after, 1: before, 2: after, res is y
          const bool before = mode == 1, alias = mode == 2;
          const int64_t ldy = n + 5, ldr = alias ? ldy : n + 2;
          std::vector<float> y(static_cast<size_t>(m * ldy)), r(static_cast<size_t>(m * ldr)), cb(static_cast<size_t>(n));
          std::vector<float> rb(static_cast<size_t>(m));
          for (auto* v : {&y, &r, &cb, &rb})
            for (float& e : *v) e = d(g);
          const std::vector<float> y0 = y;
          const float* rp = !res ? nullptr : alias ? y.data() : r.data();
          const std::vector<float> r0 = alias ? y0 : r;
          k.epilogue[ai](y.data(), ldy, m, n, rowb ? rb.data() : nullptr, col ? cb.data() : nullptr, rp, ldr, before);
          for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < ldy; ++j) {
              const size_t at = static_cast<size_t>(i * ldy + j);
              if (j >= n) {
                ASSERT_EQ(y[at], y0[at]) << "wrote outside the block";
                continue;
              }
              float v = y0[at];
              if (rowb) v += rb[static_cast<size_t>(i)];
              if (col) v += cb[static_cast<size_t>(j)];
              const float rv = res ? r0[static_cast<size_t>(i * ldr + j)] : 0.0f;
              double want;
              if (!res) want = act_ref(act, v);
              else if (before) want = act_ref(act, v + rv);
              else want = static_cast<double>(static_cast<float>(act_ref(act, v))) + rv;
              ASSERT_NEAR(y[at], want, 4e-7 * (1 + std::abs(want))) << "act " << ai << " n " << n << " variant " << variant
                                                                       << " mode " << mode << " at " << i << "," << j;
            }
        }
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, VmathIsaTest, ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace kiln::kernels::cpu
