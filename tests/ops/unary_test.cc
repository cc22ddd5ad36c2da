// Unary ops against the float64 reference (src/kernels/cpu/ref/unary.cc): every op on every dtype
// it claims at odd sizes, strided/transposed/broadcast views, special values (NaN, inf, overflow),
// f16/bf16, attribute variants, and error cases by content.
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;
using testing::Tol;

// How an op's output dtype follows from its input's.
enum class Out { same, floating, boolean };

struct UnaryCase {
  const char* op;
  DTypeSet dtypes;
  Attrs attrs;
  Out out = Out::same;
  bool positive = false;  // domain (0, inf): log, sqrt, rsqrt
};

const DTypeSet kAll = DTypeSet::all();
const DTypeSet kNumeric = DTypeSet::numeric();

// Floating ops claim every dtype: integer and bool inputs compute in f32.
const std::vector<UnaryCase> kCases = {
    {"neg", kNumeric, {}},
    {"abs", kNumeric, {}},
    {"exp", kAll, {}, Out::floating},
    {"log", kAll, {}, Out::floating, true},
    {"sqrt", kAll, {}, Out::floating, true},
    {"rsqrt", kAll, {}, Out::floating, true},
    {"reciprocal", kAll, {}, Out::floating},
    {"sin", kAll, {}, Out::floating},
    {"cos", kAll, {}, Out::floating},
    {"tanh", kAll, {}, Out::floating},
    {"sigmoid", kAll, {}, Out::floating},
    {"relu", kNumeric, {}},
    {"leaky_relu", kAll, {}, Out::floating},
    {"leaky_relu", kAll, {{"negative_slope", 0.2}}, Out::floating},
    {"elu", kAll, {}, Out::floating},
    {"elu", kAll, {{"alpha", 0.5}}, Out::floating},
    {"hardsigmoid", kAll, {}, Out::floating},
    {"hardsigmoid", kAll, {{"alpha", 0.2}, {"beta", 0.4}}, Out::floating},
    {"hardswish", kAll, {}, Out::floating},
    {"gelu", kAll, {}, Out::floating},
    {"gelu", kAll, {{"approximate", std::string("tanh")}}, Out::floating},
    {"silu", kAll, {}, Out::floating},
    {"softplus", kAll, {}, Out::floating},
    {"softplus", kAll, {{"beta", 2.0}, {"threshold", 1.0}}, Out::floating},
    {"erf", kAll, {}, Out::floating},
    {"floor", kNumeric, {}},
    {"ceil", kNumeric, {}},
    {"round", kNumeric, {}},
    {"sign", kNumeric, {}},
    {"clip", kNumeric, {{"min", -2.0}, {"max", 3.0}}},
    {"clip", kNumeric, {{"min", 1.0}}},
    {"clip", kNumeric, {{"max", -1.0}}},
    {"logical_not", kAll, {}, Out::boolean},
};

std::string describe(const UnaryCase& c) {
  std::string s = c.op;
  for (const auto& [k, v] : c.attrs.values()) s += " " + k + "=" + attr_value_str(v);
  return s;
}

DType out_dtype(const UnaryCase& c, DType in) {
  switch (c.out) {
    case Out::floating: return to_floating(in);
    case Out::boolean: return DType::boolean;
    case Out::same: break;
  }
  return in;
}

// Note [Unary tolerances]: every comparison uses tol_for(output dtype), including f32 results of
// libm transcendentals (expf, erfcf, tanhf, expm1f, log1pf): glibc's are within a few ulps, and
// gelu/softplus/silu/sigmoid chain at most three of them, so ~4-8 ulps fit tol_for's 5e-6 relative.
// Integer and bool results are exact. (Tuned SIMD kernels with polynomial approximations will need
// their own stated bound; they are a later issue.)
Tol tol_of(const UnaryCase&, DType out) { return testing::tol_for(out); }

// Inputs that keep the op in its domain and its result finite in every dtype: [-4, 4] for floats
// (exp(4) fits f16; never zero), [-100, 100] for integer-preserving ops on integers (u8: [1, 100]),
// (0.1, 4] for log/sqrt/rsqrt.
Tensor input_for(const UnaryCase& c, const Shape& shape, DType t, uint64_t seed) {
  if (c.positive) return testing::random_positive(shape, t, seed, 0.1, 4.0);
  if (c.out == Out::same && is_integral(t)) return random_tensor(shape, t, seed, -100, 100);
  return random_tensor(shape, t, seed, -4.0, 4.0);
}

Tensor call(const UnaryCase& c, const Tensor& x) { return dispatch1(kiln::op(c.op), {x}, c.attrs); }

::testing::AssertionResult matches_reference(const UnaryCase& c, const Tensor& x) {
  Tensor got = call(c, x);
  if (got.dtype() != out_dtype(c, x.dtype()))
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << ", expected "
                                         << dtype_name(out_dtype(c, x.dtype()));
  return all_close(got, ref::unary(c.op, x, c.attrs), tol_of(c, got.dtype()));
}

TEST(Unary, MatchesReferenceOnEveryDTypeAndSize) {
  for (const auto& c : kCases) {
    for (DType t : testing::kAllDTypes) {
      if (!c.dtypes.contains(t)) continue;
      for (int64_t n : testing::kOddSizes) {
        Tensor x = input_for(c, {n}, t, 17 + static_cast<uint64_t>(n));
        EXPECT_TRUE(matches_reference(c, x)) << describe(c) << " " << dtype_name(t) << " n=" << n;
      }
    }
  }
}

TEST(Unary, NonContiguousTransposedAndBroadcastViews) {
  for (const auto& c : kCases) {
    for (DType t : testing::kAllDTypes) {
      if (!c.dtypes.contains(t)) continue;
      const std::string where = describe(c) + " " + std::string(dtype_name(t));
      Tensor a = input_for(c, {7, 33}, t, 3);
      EXPECT_TRUE(matches_reference(c, noncontiguous(a))) << where << " strided";
      Tensor b = input_for(c, {33, 7}, t, 4);
      EXPECT_TRUE(matches_reference(c, b.t())) << where << " transposed";
      Tensor d = input_for(c, {3, 4, 5}, t, 5);
      EXPECT_TRUE(matches_reference(c, d.permute({2, 0, 1}))) << where << " permuted";
      // Read in tiles (Note [Transposed operands] in loops.h): 16 + 16 + 5 rows by 128 + 22 columns.
      Tensor f = input_for(c, {2, 150, 37}, t, 9);
      EXPECT_TRUE(matches_reference(c, f.permute({0, 2, 1}))) << where << " transposed tiles";
      Tensor e = input_for(c, {7, 1}, t, 6);
      EXPECT_TRUE(matches_reference(c, e.expand({7, 33}))) << where << " broadcast";
      EXPECT_TRUE(matches_reference(c, input_for(c, {}, t, 7))) << where << " 0-d";
      Tensor s = input_for(c, {40}, t, 8);
      EXPECT_TRUE(matches_reference(c, s.slice(0, 3, 40, 3))) << where << " sliced with step 3";
    }
  }
}

// Enough elements to split over the thread pool (kernels::cpu::kGrain is 32768).
TEST(Unary, LargeInputsSplitOverThreads) {
  for (const auto& c : kCases) {
    for (DType t : {DType::f32, DType::i32}) {
      if (!c.dtypes.contains(t)) continue;
      Tensor x = input_for(c, {129, 513}, t, 11);  // 66177 elements: three uneven chunks
      Tensor want = ref::unary(c.op, x, c.attrs);  // computed once (the reference is slow)
      EXPECT_TRUE(all_close(call(c, x), want, tol_of(c, out_dtype(c, t)))) << describe(c) << " " << dtype_name(t);
      EXPECT_TRUE(all_close(call(c, x.t()), want.t(), tol_of(c, out_dtype(c, t))))
          << describe(c) << " " << dtype_name(t) << " transposed";
    }
  }
}

TEST(Unary, SpecialValuesMatchReference) {
  const std::vector<double> specials = {NAN,  INFINITY, -INFINITY, 0.0,   -0.0,  100.0, -100.0, 1e-30, -1e-30,
                                        0.5,  1.5,      2.5,       -0.5,  -2.5,  88.0,  -88.0,  1e10,  -1e10,
                                        20.0, 20.5,     -3.0,      3.0,   710.0, -710.0};
  for (const auto& c : kCases) {
    for (DType t : testing::kFloatDTypes) {
      Tensor x = from_vector<double>(specials).to(t);
      Tensor got = call(c, x);
      // The reference rounded to the output dtype, so overflow (exp(100) in f32) is inf in both.
      Tensor want = ref::unary(c.op, x, c.attrs).to(got.dtype());
      EXPECT_TRUE(all_close(got, want, tol_of(c, got.dtype()))) << describe(c) << " " << dtype_name(t);
    }
  }
}

TEST(Unary, NaNPropagatesThroughEveryFloatingOp) {
  for (const auto& c : kCases) {
    if (c.out == Out::boolean) continue;
    for (DType t : testing::kFloatDTypes) {
      Tensor got = call(c, from_vector<double>({NAN, 1.0, NAN}).to(t)).to(DType::f64);
      EXPECT_TRUE(std::isnan(got.data<double>()[0]) && std::isnan(got.data<double>()[2]))
          << describe(c) << " " << dtype_name(t);
      EXPECT_FALSE(std::isnan(got.data<double>()[1])) << describe(c) << " " << dtype_name(t);
    }
  }
  Tensor n = logical_not(from_vector<float>({NAN, 0.f, -0.f, INFINITY}));
  EXPECT_TRUE(all_close(n, from_vector<double>({0, 1, 1, 0})));
}

TEST(Unary, OverflowAndDomainEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor e = exp(from_vector<float>({100.f, 89.f, -inf, inf, -200.f}));
  EXPECT_EQ(e.data<float>()[0], inf);
  EXPECT_EQ(e.data<float>()[1], inf);
  EXPECT_EQ(e.data<float>()[2], 0.f);
  EXPECT_EQ(e.data<float>()[3], inf);
  EXPECT_EQ(e.data<float>()[4], 0.f);
  EXPECT_EQ(exp(from_vector<double>({710.0})).data<double>()[0], std::numeric_limits<double>::infinity());
  EXPECT_EQ(exp(from_vector<double>({12.0}).to(DType::f16)).to(DType::f32).data<float>()[0], inf);  // > 65504

  Tensor l = log(from_vector<float>({-1.f, 0.f, -0.f, inf}));
  EXPECT_TRUE(std::isnan(l.data<float>()[0]));
  EXPECT_EQ(l.data<float>()[1], -inf);
  EXPECT_EQ(l.data<float>()[2], -inf);
  EXPECT_EQ(l.data<float>()[3], inf);
  EXPECT_TRUE(std::isnan(sqrt(from_vector<float>({-1.f})).data<float>()[0]));
  EXPECT_EQ(rsqrt(from_vector<float>({0.f})).data<float>()[0], inf);
  EXPECT_EQ(reciprocal(from_vector<float>({-0.f})).data<float>()[0], -inf);

  // Note [Stable sigmoid]: no NaN and full relative precision far out in the tails.
  Tensor s = sigmoid(from_vector<float>({-inf, -100.f, -80.f, 80.f, inf}));
  EXPECT_EQ(s.data<float>()[0], 0.f);
  EXPECT_GE(s.data<float>()[1], 0.f);
  EXPECT_NEAR(s.data<float>()[2] / std::exp(-80.0), 1.0, 1e-5);
  EXPECT_EQ(s.data<float>()[3], 1.f);
  EXPECT_EQ(s.data<float>()[4], 1.f);
  EXPECT_TRUE(all_close(tanh(from_vector<float>({-inf, inf})), from_vector<double>({-1, 1})));

  // Note [GELU without cancellation]: the tails keep relative precision in f32.
  Tensor g = gelu(from_vector<float>({-5.f, -8.f}));
  EXPECT_NEAR(g.data<float>()[0] / (-5 * 0.5 * std::erfc(5 / std::sqrt(2.0))), 1.0, 1e-5);
  EXPECT_NEAR(g.data<float>()[1] / (-8 * 0.5 * std::erfc(8 / std::sqrt(2.0))), 1.0, 1e-5);
  Tensor gt = gelu(from_vector<float>({-5.f}), "tanh");
  EXPECT_TRUE(all_close(gt, ref::unary("gelu", from_vector<float>({-5.f}), {{"approximate", std::string("tanh")}}),
                        Tol{1e-5, 0}));

  // softplus: linear above threshold (exactly x), log1p(e^x) far below it.
  Tensor sp = softplus(from_vector<float>({30.f, 1e6f, -80.f}));
  EXPECT_EQ(sp.data<float>()[0], 30.f);
  EXPECT_EQ(sp.data<float>()[1], 1e6f);
  EXPECT_NEAR(sp.data<float>()[2] / std::exp(-80.0), 1.0, 1e-5);
}

TEST(Unary, RoundHalfToEven) {
  const std::vector<double> in = {0.5, 1.5, 2.5, 3.5, -0.5, -1.5, -2.5, 2.4999, 2.5001, -7.0, 1e7 + 0.5};
  const std::vector<double> want = {0, 2, 2, 4, -0.0, -2, -2, 2, 3, -7, 1e7};
  for (DType t : testing::kFloatDTypes) {
    Tensor x = from_vector<double>(in).to(t);
    Tensor got = round(x);
    EXPECT_EQ(got.dtype(), t);
    EXPECT_TRUE(all_close(got, ref::unary("round", x))) << dtype_name(t);
    if (t == DType::f32 || t == DType::f64) {
      // 1e7 + 0.5 is exact in f32 (< 2^24) and rounds to the even 1e7.
      EXPECT_TRUE(all_close(got, from_vector<double>(want))) << dtype_name(t);
    }
  }
  EXPECT_TRUE(all_close(floor(from_vector<float>({-1.5f, 1.5f})), from_vector<double>({-2, 1})));
  EXPECT_TRUE(all_close(ceil(from_vector<float>({-1.5f, 1.5f})), from_vector<double>({-1, 2})));
}

TEST(Unary, IntegerSemantics) {
  // neg wraps (u8 modulo 256, the most negative i8 to itself), abs of u8 is the identity.
  Tensor nu = neg(from_vector<uint8_t>({1, 200, 255}));
  EXPECT_EQ(nu.dtype(), DType::u8);
  EXPECT_TRUE(all_close(nu, from_vector<double>({255, 56, 1})));
  EXPECT_TRUE(all_close(neg(from_vector<int8_t>({-128, 127, -5})), from_vector<double>({-128, -127, 5})));
  EXPECT_TRUE(all_close(neg(from_vector<int64_t>({std::numeric_limits<int64_t>::min()})),
                        from_vector<int64_t>({std::numeric_limits<int64_t>::min()})));
  EXPECT_TRUE(all_close(abs(from_vector<uint8_t>({0, 7, 255})), from_vector<double>({0, 7, 255})));
  EXPECT_TRUE(all_close(abs(from_vector<int8_t>({-128, -3, 3})), from_vector<double>({-128, 3, 3})));
  EXPECT_TRUE(all_close(sign(from_vector<int32_t>({-9, 0, 4})), from_vector<double>({-1, 0, 1})));
  EXPECT_TRUE(all_close(sign(from_vector<uint8_t>({0, 9})), from_vector<double>({0, 1})));
  EXPECT_TRUE(all_close(relu(from_vector<int64_t>({-9, 0, 4})), from_vector<double>({0, 0, 4})));
  for (auto fn : {&floor, &ceil, &round}) {
    Tensor r = fn(from_vector<int32_t>({-3, 5}), KILN_HERE);
    EXPECT_EQ(r.dtype(), DType::i32);
    EXPECT_TRUE(all_close(r, from_vector<double>({-3, 5})));
  }
  // Floating ops on integers and bool compute in f32.
  EXPECT_EQ(exp(from_vector<int32_t>({1})).dtype(), DType::f32);
  EXPECT_EQ(sigmoid(from_vector<int64_t>({1})).dtype(), DType::f32);
  EXPECT_EQ(sqrt(ones({2}, DType::boolean)).dtype(), DType::f32);
  EXPECT_EQ(gelu(from_vector<uint8_t>({1})).dtype(), DType::f32);
  EXPECT_EQ(exp(from_vector<double>({1})).dtype(), DType::f64);
  EXPECT_EQ(exp(ones({1}, DType::bf16)).dtype(), DType::bf16);
  EXPECT_EQ(logical_not(from_vector<int32_t>({0, 3})).dtype(), DType::boolean);
  EXPECT_TRUE(all_close(logical_not(from_vector<int32_t>({0, 3})), from_vector<double>({1, 0})));
  EXPECT_TRUE(all_close(logical_not(from_vector<bool>({true, false})), from_vector<double>({0, 1})));
}

// leaky_relu's contiguous f32 path (a factor picked by the sign bit, split over threads) gives the
// general path's bits: over 100003 elements (several chunks) with -0, infinities and NaNs of both
// signs mixed in, against the same values read through a transposed (strided) view.
TEST(Unary, LeakyReluFastPathEqualsTheGeneralPath) {
  const int64_t rows = 7, cols = 14286;  // 100002 elements, odd chunk ends
  Tensor x = random_tensor({rows, cols}, DType::f32, 71, -4.0, 4.0).contiguous();
  float* p = static_cast<float*>(x.data_ptr());
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  const float specials[] = {-0.0f, 0.0f, inf, -inf, nan, -nan, -1e-40f, 1e-40f};
  for (int i = 0; i < 8; ++i) p[1000 * i + 3] = specials[i];
  for (double slope : {0.01, 0.2, -0.5, 1.5}) {
    Tensor fast = leaky_relu(x, slope);
    Tensor general = leaky_relu(x.t().contiguous().t(), slope);  // a strided view: the general path
    ASSERT_EQ(fast.numel(), general.numel());
    const Tensor g = general.contiguous();
    const auto* a = static_cast<const uint32_t*>(fast.data_ptr());
    const auto* b = static_cast<const uint32_t*>(g.data_ptr());
    int64_t differ = 0;
    for (int64_t i = 0; i < fast.numel(); ++i) {
      const bool both_nan = std::isnan(std::bit_cast<float>(a[i])) && std::isnan(std::bit_cast<float>(b[i]));
      differ += !both_nan && a[i] != b[i];
    }
    EXPECT_EQ(differ, 0) << "slope " << slope;
    EXPECT_EQ(static_cast<const float*>(fast.data_ptr())[1000 * 3 + 3], -inf * (slope < 0 ? -1.0f : 1.0f)) << slope;
  }
}

TEST(Unary, ActivationAttributes) {
  Tensor x = from_vector<double>({-3, -1, -0.25, 0.25, 1, 3});
  for (double slope : {0.0, 0.2, 1.5, -0.5})
    EXPECT_TRUE(all_close(leaky_relu(x, slope), ref::unary("leaky_relu", x, {{"negative_slope", slope}}))) << slope;
  EXPECT_TRUE(all_close(leaky_relu(x), from_vector<double>({-0.03, -0.01, -0.0025, 0.25, 1, 3})));
  for (double alpha : {0.5, 1.0, 2.0})
    EXPECT_TRUE(all_close(elu(x, alpha), ref::unary("elu", x, {{"alpha", alpha}}))) << alpha;
  EXPECT_TRUE(all_close(elu(from_vector<double>({-1}), 2.0), from_vector<double>({2 * (std::exp(-1.0) - 1)})));
  // hardsigmoid: PyTorch's default (1/6, 0.5) and ONNX's (0.2, 0.5).
  EXPECT_TRUE(all_close(hardsigmoid(x), from_vector<double>({0, 1.0 / 3, 0.5 - 0.25 / 6, 0.5 + 0.25 / 6, 2.0 / 3, 1})));
  EXPECT_TRUE(all_close(hardsigmoid(x, 0.2, 0.5), from_vector<double>({0, 0.3, 0.45, 0.55, 0.7, 1})));
  EXPECT_TRUE(all_close(hardswish(x), from_vector<double>({0, -1.0 / 3, -0.25 * 2.75 / 6, 0.25 * 3.25 / 6, 4.0 / 6, 3})));
  // gelu: both forms, and they differ (by < 1e-3) so the attribute is really read.
  Tensor ge = gelu(x), gt = gelu(x, "tanh");
  EXPECT_TRUE(all_close(ge, ref::unary("gelu", x)));
  EXPECT_TRUE(all_close(gt, ref::unary("gelu", x, {{"approximate", std::string("tanh")}})));
  EXPECT_FALSE(all_close(ge, gt));
  EXPECT_TRUE(all_close(ge, gt, Tol{0, 1e-3}));
  EXPECT_TRUE(all_close(silu(x), ref::unary("silu", x)));
  // softplus: beta scales, threshold switches to the identity where beta * x > threshold.
  for (auto [beta, threshold] : {std::pair{1.0, 20.0}, {2.0, 1.0}, {0.5, 30.0}, {-1.0, 20.0}, {3.0, -1.0}}) {
    Tensor got = softplus(x, beta, threshold);
    EXPECT_TRUE(all_close(got, ref::unary("softplus", x, {{"beta", beta}, {"threshold", threshold}})))
        << beta << " " << threshold;
  }
  Tensor lin = softplus(x, 2.0, 1.0);
  EXPECT_EQ(lin.data<double>()[4], 1.0);  // 2 * 1 > 1: exactly x
  EXPECT_EQ(lin.data<double>()[5], 3.0);
  EXPECT_NE(lin.data<double>()[3], 0.25);  // 2 * 0.25 < 1: the log form
}

TEST(Unary, ClipVariants) {
  Tensor f = from_vector<float>({-3.f, -1.f, 0.5f, 2.f, 7.f});
  EXPECT_TRUE(all_close(clip(f, -1.5, 2.5), from_vector<double>({-1.5, -1, 0.5, 2, 2.5})));
  EXPECT_TRUE(all_close(clip(f, 0.0, std::nullopt), from_vector<double>({0, 0, 0.5, 2, 7})));   // only min
  EXPECT_TRUE(all_close(clip(f, std::nullopt, 1), from_vector<double>({-3, -1, 0.5, 1, 1})));   // only max
  EXPECT_TRUE(all_close(clip(f, std::nullopt, std::nullopt), f));                               // neither
  EXPECT_TRUE(all_close(clip(f, 3, 1), from_vector<double>({1, 1, 1, 1, 1})));  // min > max: max wins
  EXPECT_TRUE(all_close(f.clip(0, 1), from_vector<double>({0, 0, 0.5, 1, 1})));
  Tensor h = from_vector<double>({-3, 0.3, 7}).to(DType::f16);
  EXPECT_TRUE(all_close(clip(h, -1, 0.25), ref::unary("clip", h, {{"min", -1.0}, {"max", 0.25}})));

  // Integer dtypes keep their dtype; bounds outside the dtype's range saturate.
  Tensor i = from_vector<int32_t>({-30, -1, 5, 100});
  Tensor ci = clip(i, -2, 50);
  EXPECT_EQ(ci.dtype(), DType::i32);
  EXPECT_TRUE(all_close(ci, from_vector<double>({-2, -1, 5, 50})));
  EXPECT_TRUE(all_close(clip(i, 0, std::nullopt), from_vector<double>({0, 0, 5, 100})));
  EXPECT_TRUE(all_close(clip(i, std::nullopt, 0), from_vector<double>({-30, -1, 0, 0})));
  EXPECT_TRUE(all_close(clip(from_vector<uint8_t>({1, 200}), -5, 300), from_vector<double>({1, 200})));
  EXPECT_TRUE(all_close(clip(from_vector<uint8_t>({1, 200}), 7.0, 100.0), from_vector<double>({7, 100})));
  EXPECT_TRUE(all_close(clip(from_vector<int8_t>({-100, 100}), -1000, 5), from_vector<double>({-100, 5})));
  const int64_t big = int64_t(1) << 60;
  EXPECT_TRUE(all_close(clip(from_vector<int64_t>({-big, big}), -(int64_t(1) << 40), 1e30),
                        from_vector<int64_t>({-(int64_t(1) << 40), big})));
}

TEST(Unary, PublicFunctionsAndMethodsForwardToTheirOps) {
  Tensor x = random_tensor({5, 3}, DType::f32, 21, -2, 2);
  Tensor p = testing::random_positive({5, 3}, DType::f32, 22);
  EXPECT_TRUE(all_close(neg(x), ref::unary("neg", x)));
  EXPECT_TRUE(all_close(-x, ref::unary("neg", x)));
  EXPECT_TRUE(all_close(x.neg(), ref::unary("neg", x)));
  EXPECT_TRUE(all_close(x.abs(), ref::unary("abs", x)));
  EXPECT_TRUE(all_close(x.exp(), ref::unary("exp", x)));
  EXPECT_TRUE(all_close(p.log(), ref::unary("log", p)));
  EXPECT_TRUE(all_close(p.sqrt(), ref::unary("sqrt", p)));
  EXPECT_TRUE(all_close(p.rsqrt(), ref::unary("rsqrt", p)));
  EXPECT_TRUE(all_close(x.reciprocal(), ref::unary("reciprocal", x)));
  EXPECT_TRUE(all_close(x.sin(), ref::unary("sin", x)));
  EXPECT_TRUE(all_close(x.cos(), ref::unary("cos", x)));
  EXPECT_TRUE(all_close(x.tanh(), ref::unary("tanh", x)));
  EXPECT_TRUE(all_close(x.sigmoid(), ref::unary("sigmoid", x)));
  EXPECT_TRUE(all_close(x.relu(), ref::unary("relu", x)));
  EXPECT_TRUE(all_close(x.erf(), ref::unary("erf", x)));
  EXPECT_TRUE(all_close(x.floor(), ref::unary("floor", x)));
  EXPECT_TRUE(all_close(x.ceil(), ref::unary("ceil", x)));
  EXPECT_TRUE(all_close(x.round(), ref::unary("round", x)));
  EXPECT_TRUE(all_close(x.sign(), ref::unary("sign", x)));
  EXPECT_TRUE(all_close(abs(x), ref::unary("abs", x)));
  EXPECT_TRUE(all_close(exp(x), ref::unary("exp", x)));
  EXPECT_TRUE(all_close(log(p), ref::unary("log", p)));
  EXPECT_TRUE(all_close(sqrt(p), ref::unary("sqrt", p)));
  EXPECT_TRUE(all_close(rsqrt(p), ref::unary("rsqrt", p)));
  EXPECT_TRUE(all_close(reciprocal(x), ref::unary("reciprocal", x)));
  EXPECT_TRUE(all_close(sin(x), ref::unary("sin", x)));
  EXPECT_TRUE(all_close(cos(x), ref::unary("cos", x)));
  EXPECT_TRUE(all_close(tanh(x), ref::unary("tanh", x)));
  EXPECT_TRUE(all_close(sigmoid(x), ref::unary("sigmoid", x)));
  EXPECT_TRUE(all_close(relu(x), ref::unary("relu", x)));
  EXPECT_TRUE(all_close(hardswish(x), ref::unary("hardswish", x)));
  EXPECT_TRUE(all_close(silu(x), ref::unary("silu", x)));
  EXPECT_TRUE(all_close(erf(x), ref::unary("erf", x)));
  EXPECT_TRUE(all_close(floor(x), ref::unary("floor", x)));
  EXPECT_TRUE(all_close(ceil(x), ref::unary("ceil", x)));
  EXPECT_TRUE(all_close(round(x), ref::unary("round", x)));
  EXPECT_TRUE(all_close(sign(x), ref::unary("sign", x)));
  EXPECT_TRUE(all_close(logical_not(x), ref::unary("logical_not", x)));
}

TEST(Unary, RegistryEntries) {
  const std::vector<std::pair<const char*, const char*>> onnx = {
      {"neg", "Neg"},           {"abs", "Abs"},       {"exp", "Exp"},          {"log", "Log"},
      {"sqrt", "Sqrt"},         {"reciprocal", "Reciprocal"}, {"sin", "Sin"},  {"cos", "Cos"},
      {"tanh", "Tanh"},         {"sigmoid", "Sigmoid"}, {"relu", "Relu"},      {"leaky_relu", "LeakyRelu"},
      {"elu", "Elu"},           {"hardsigmoid", "HardSigmoid"}, {"hardswish", "HardSwish"},
      {"gelu", "Gelu"},         {"softplus", "Softplus"}, {"erf", "Erf"},      {"floor", "Floor"},
      {"ceil", "Ceil"},         {"round", "Round"},   {"sign", "Sign"},        {"clip", "Clip"},
      {"logical_not", "Not"}};
  for (const auto& [name, type] : onnx) {
    const OpDef& d = kiln::op(name);
    ASSERT_TRUE(d.onnx_mapping().has_value()) << name;
    EXPECT_EQ(d.onnx_mapping()->op_type, type) << name;
  }
  EXPECT_FALSE(kiln::op("rsqrt").onnx_mapping().has_value());
  EXPECT_FALSE(kiln::op("silu").onnx_mapping().has_value());
  EXPECT_EQ(kiln::op("round").onnx_mapping()->since_opset, 11);
  EXPECT_EQ(kiln::op("logical_not").vjp_status().kind, RuleStatus::Kind::not_applicable);
}

TEST(Unary, ErrorsNameTheOpArgumentAndShape) {
  Tensor b = ones({2, 3}, DType::boolean);
  EXPECT_KILN_ERROR(neg(b), "neg", "'x'", "bool[2, 3]", "logical_not");
  EXPECT_KILN_ERROR(-b, "neg", "bool[2, 3]");
  EXPECT_KILN_ERROR(abs(b), "abs", "'x'", "bool[2, 3]");
  EXPECT_KILN_ERROR(sign(b), "sign", "bool[2, 3]");
  EXPECT_KILN_ERROR(relu(b), "relu", "bool[2, 3]");
  EXPECT_KILN_ERROR(floor(b), "floor", "bool[2, 3]");
  EXPECT_KILN_ERROR(clip(b, 0, 1), "clip", "bool[2, 3]");

  Tensor x = ones({4});
  EXPECT_KILN_ERROR(gelu(x, "bogus"), "gelu", "approximate", "bogus", "none", "tanh", "f32[4]");
  EXPECT_KILN_ERROR(softplus(x, 0.0), "softplus", "beta", "nonzero", "f32[4]");
  EXPECT_KILN_ERROR(clip(ones({3}, DType::i32), 0.5, std::nullopt), "clip", "min", "whole number", "i32[3]");
  EXPECT_KILN_ERROR(clip(ones({3}, DType::u8), std::nullopt, 2.25), "clip", "max", "u8[3]");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("elu"), {x}, {{"alpah", 1.0}}), "elu", "unknown attribute 'alpah'", "alpha");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("gelu"), {x}, {{"approximate", int64_t{1}}}), "gelu", "approximate",
                    "expects str");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("exp"), {}), "exp", "'x'");
  EXPECT_KILN_ERROR(exp(Tensor()), "exp", "'x'");
}

}  // namespace
}  // namespace kiln
