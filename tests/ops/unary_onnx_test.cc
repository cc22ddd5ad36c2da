// The unary ops ONNX needs beyond the core set (defs/unary/trig.cc, activation_onnx.cc) against
// the float64 reference (ref::unary): every claimed dtype at odd sizes, strided/transposed/
// broadcast views, special values, attribute variants, ONNX's documented examples, registry
// entries and error cases by content. Tolerance: tol_for(output dtype) (Note [Unary tolerances]
// in unary_test.cc) unless stated.
#include <cmath>
#include <limits>
#include <numbers>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

enum class Domain { real, unit, at_least_one };  // R, (-1, 1), [1, inf)

struct Case {
  const char* op;
  Attrs attrs;
  bool boolean_out = false;
  Domain domain = Domain::real;
};

const std::vector<Case> kCases = {
    {"tan", {}},
    {"asin", {}, false, Domain::unit},
    {"acos", {}, false, Domain::unit},
    {"atan", {}},
    {"sinh", {}},
    {"cosh", {}},
    {"asinh", {}},
    {"acosh", {}, false, Domain::at_least_one},
    {"atanh", {}, false, Domain::unit},
    {"isnan", {}, true},
    {"isinf", {}, true},
    {"isinf", {{"detect_positive", false}}, true},
    {"isinf", {{"detect_negative", false}}, true},
    {"softsign", {}},
    {"selu", {}},
    {"selu", {{"alpha", 2.0}, {"gamma", 0.5}}},
    {"celu", {}},
    {"celu", {{"alpha", 0.4}}},
    {"celu", {{"alpha", -1.5}}},
    {"thresholded_relu", {}},
    {"thresholded_relu", {{"alpha", -0.5}}},
    {"mish", {}},
};

std::string describe(const Case& c) {
  std::string s = c.op;
  for (const auto& [k, v] : c.attrs.values()) s += " " + k + "=" + attr_value_str(v);
  return s;
}

DType out_dtype(const Case& c, DType in) { return c.boolean_out ? DType::boolean : to_floating(in); }

// Inputs inside the op's domain for every dtype: floats in [-4, 4], (-0.95, 0.95) or [1.05, 4];
// integers in [-4, 4], {-1, 1} or [1, 4] (the random helpers never give 0).
Tensor input_for(const Case& c, const Shape& shape, DType t, uint64_t seed) {
  const bool integral = is_integral(t);
  switch (c.domain) {
    case Domain::unit: return integral ? random_tensor(shape, t, seed, -1, 1) : random_tensor(shape, t, seed, -0.95, 0.95);
    case Domain::at_least_one: return random_tensor(shape, t, seed, integral ? 1.0 : 1.05, 4.0);
    case Domain::real: break;
  }
  return random_tensor(shape, t, seed, -4.0, 4.0);
}

Tensor call(const Case& c, const Tensor& x) { return dispatch1(kiln::op(c.op), {x}, c.attrs); }

::testing::AssertionResult matches_reference(const Case& c, const Tensor& x) {
  Tensor got = call(c, x);
  if (got.dtype() != out_dtype(c, x.dtype()))
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << ", expected "
                                         << dtype_name(out_dtype(c, x.dtype()));
  return all_close(got, ref::unary(c.op, x, c.attrs), testing::tol_for(got.dtype()));
}

TEST(UnaryOnnx, MatchesReferenceOnEveryDTypeAndSize) {
  for (const auto& c : kCases) {
    for (DType t : testing::kAllDTypes) {
      if (t == DType::boolean && c.domain == Domain::at_least_one) continue;  // acosh(0) is NaN: not a value test
      for (int64_t n : testing::kOddSizes) {
        Tensor x = input_for(c, {n}, t, 17 + static_cast<uint64_t>(n));
        EXPECT_TRUE(matches_reference(c, x)) << describe(c) << " " << dtype_name(t) << " n=" << n;
      }
    }
  }
}

TEST(UnaryOnnx, NonContiguousTransposedAndBroadcastViews) {
  for (const auto& c : kCases) {
    for (DType t : testing::kAllDTypes) {
      if (t == DType::boolean && c.domain == Domain::at_least_one) continue;
      const std::string where = describe(c) + " " + std::string(dtype_name(t));
      EXPECT_TRUE(matches_reference(c, noncontiguous(input_for(c, {7, 33}, t, 3)))) << where << " strided";
      EXPECT_TRUE(matches_reference(c, input_for(c, {33, 7}, t, 4).t())) << where << " transposed";
      EXPECT_TRUE(matches_reference(c, input_for(c, {3, 4, 5}, t, 5).permute({2, 0, 1}))) << where << " permuted";
      EXPECT_TRUE(matches_reference(c, input_for(c, {7, 1}, t, 6).expand({7, 33}))) << where << " broadcast";
      EXPECT_TRUE(matches_reference(c, input_for(c, {}, t, 7))) << where << " 0-d";
      EXPECT_TRUE(matches_reference(c, input_for(c, {40}, t, 8).slice(0, 3, 40, 3))) << where << " step 3";
    }
  }
}

TEST(UnaryOnnx, LargeInputsSplitOverThreads) {
  for (const auto& c : kCases) {
    Tensor x = input_for(c, {129, 513}, DType::f32, 11);  // three uneven chunks of the pool
    Tensor want = ref::unary(c.op, x, c.attrs);
    EXPECT_TRUE(all_close(call(c, x), want)) << describe(c);
    EXPECT_TRUE(all_close(call(c, x.t()), want.t())) << describe(c) << " transposed";
  }
}

TEST(UnaryOnnx, SpecialValuesMatchReference) {
  const std::vector<double> specials = {NAN,  INFINITY, -INFINITY, 0.0,  -0.0,  100.0, -100.0, 1e-30, -1e-30, 0.5,
                                        -0.5, 1.0,      -1.0,      1.5,  -1.5,  2.0,   20.0,   -20.0, 88.0,   -88.0,
                                        1e10, -1e10,    710.0,     -710.0, 0.999, -0.999};
  for (const auto& c : kCases) {
    for (DType t : testing::kFloatDTypes) {
      Tensor x = from_vector<double>(specials).to(t);
      Tensor got = call(c, x);
      Tensor want = ref::unary(c.op, x, c.attrs).to(got.dtype());  // overflow rounds to inf in both
      EXPECT_TRUE(all_close(got, want)) << describe(c) << " " << dtype_name(t);
    }
  }
}

TEST(UnaryOnnx, NaNPropagatesThroughEveryFloatingOp) {
  for (const auto& c : kCases) {
    if (c.boolean_out) continue;
    for (DType t : testing::kFloatDTypes) {
      const double inside = c.domain == Domain::at_least_one ? 1.5 : 0.5;
      Tensor got = call(c, from_vector<double>({NAN, inside, NAN}).to(t)).to(DType::f64);
      EXPECT_TRUE(std::isnan(got.data<double>()[0]) && std::isnan(got.data<double>()[2])) << describe(c) << " " << dtype_name(t);
      EXPECT_FALSE(std::isnan(got.data<double>()[1])) << describe(c) << " " << dtype_name(t);
    }
  }
}

TEST(UnaryOnnx, KnownValuesAndDomainEdges) {
  const double pi = std::numbers::pi;
  Tensor x = from_vector<double>({-1, -0.5, 0.5, 1});
  EXPECT_TRUE(all_close(asin(x), from_vector<double>({-pi / 2, -pi / 6, pi / 6, pi / 2})));
  EXPECT_TRUE(all_close(acos(x), from_vector<double>({pi, 2 * pi / 3, pi / 3, 0})));
  EXPECT_TRUE(all_close(atan(from_vector<double>({-1, 1, INFINITY})), from_vector<double>({-pi / 4, pi / 4, pi / 2})));
  EXPECT_TRUE(all_close(tan(from_vector<double>({pi / 4, -pi / 4})), from_vector<double>({1, -1})));
  EXPECT_TRUE(all_close(atanh(from_vector<float>({-1.f, 1.f, 0.5f})),
                        from_vector<double>({-INFINITY, INFINITY, 0.5 * std::log(3.0)})));
  EXPECT_TRUE(std::isnan(asin(from_vector<float>({1.5f})).data<float>()[0]));
  EXPECT_TRUE(std::isnan(acosh(from_vector<float>({0.5f})).data<float>()[0]));
  EXPECT_TRUE(std::isnan(atanh(from_vector<float>({-2.f})).data<float>()[0]));
  EXPECT_EQ(acosh(from_vector<float>({1.f})).data<float>()[0], 0.f);
  EXPECT_EQ(sinh(from_vector<float>({100.f})).data<float>()[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(sinh(from_vector<float>({-100.f})).data<float>()[0], -std::numeric_limits<float>::infinity());
  EXPECT_EQ(cosh(from_vector<float>({-100.f})).data<float>()[0], std::numeric_limits<float>::infinity());
  // asinh keeps relative precision for tiny x (no log(x + sqrt(x^2 + 1)) cancellation).
  EXPECT_NEAR(asinh(from_vector<float>({1e-8f})).data<float>()[0] / 1e-8, 1.0, 1e-6);
  // Integer and bool inputs compute in f32.
  EXPECT_EQ(tan(from_vector<int32_t>({1})).dtype(), DType::f32);
  EXPECT_EQ(acosh(from_vector<uint8_t>({2})).dtype(), DType::f32);
  EXPECT_EQ(mish(ones({1}, DType::boolean)).dtype(), DType::f32);
  EXPECT_EQ(asin(ones({1}, DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(selu(ones({1}, DType::bf16)).dtype(), DType::bf16);
}

TEST(UnaryOnnx, IsNanAndIsInf) {
  Tensor x = from_vector<float>({NAN, INFINITY, -INFINITY, 0.f, -3.f, std::numeric_limits<float>::max()});
  Tensor n = isnan(x);
  EXPECT_EQ(n.dtype(), DType::boolean);
  EXPECT_TRUE(all_close(n, from_vector<double>({1, 0, 0, 0, 0, 0})));
  EXPECT_TRUE(all_close(isinf(x), from_vector<double>({0, 1, 1, 0, 0, 0})));
  EXPECT_TRUE(all_close(isinf(x, true, false), from_vector<double>({0, 1, 0, 0, 0, 0})));
  EXPECT_TRUE(all_close(isinf(x, false, true), from_vector<double>({0, 0, 1, 0, 0, 0})));
  EXPECT_TRUE(all_close(isinf(x, false, false), from_vector<double>({0, 0, 0, 0, 0, 0})));
  for (DType t : testing::kFloatDTypes) {
    Tensor y = x.to(t);
    EXPECT_TRUE(all_close(isnan(y), from_vector<double>({1, 0, 0, 0, 0, 0}))) << dtype_name(t);
    // f32's largest value rounds to inf in f16 (out of range) and in bf16 (its 8-bit mantissa
    // rounds up past the largest finite bf16).
    const double big_inf = t == DType::f16 || t == DType::bf16 ? 1 : 0;
    EXPECT_TRUE(all_close(isinf(y), from_vector<double>({0, 1, 1, 0, 0, big_inf}))) << dtype_name(t);
  }
  // Integer and bool elements are never NaN or infinite.
  for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean}) {
    Tensor i = random_tensor({7}, t, 3);
    EXPECT_TRUE(all_close(isnan(i), zeros({7}, DType::boolean))) << dtype_name(t);
    EXPECT_TRUE(all_close(isinf(i), zeros({7}, DType::boolean))) << dtype_name(t);
    EXPECT_EQ(isinf(i).dtype(), DType::boolean);
  }
}

// ONNX's documented examples (onnx/backend/test/case/node/*.py).
TEST(UnaryOnnx, OnnxExamples) {
  Tensor x = from_vector<float>({-1.f, 0.f, 1.f});
  EXPECT_TRUE(all_close(softsign(x), from_vector<double>({-0.5, 0, 0.5})));
  EXPECT_TRUE(all_close(selu(x, 2.0, 3.0), from_vector<double>({3 * 2 * (std::exp(-1.0) - 1), 0, 3})));
  EXPECT_TRUE(all_close(thresholded_relu(from_vector<float>({-1.5f, 0.f, 1.2f, 2.f, 2.2f}), 2.0),
                        from_vector<double>({0, 0, 0, 0, 2.2})));
  EXPECT_TRUE(all_close(thresholded_relu(from_vector<float>({0.5f, 1.f, 1.5f})), from_vector<double>({0, 0, 1.5})));
  // Celu with alpha = 2.
  Tensor c = celu(from_vector<float>({-3.f, 0.5f}), 2.0);
  EXPECT_TRUE(all_close(c, from_vector<double>({2 * (std::exp(-1.5) - 1), 0.5})));
  // Selu's defaults are ONNX's float32 constants; selu(1) = gamma.
  EXPECT_TRUE(all_close(selu(from_vector<double>({1.0, -1.0})),
                        from_vector<double>({1.05070102214813232421875,
                                             1.05070102214813232421875 * 1.67326319217681884765625 * (std::exp(-1.0) - 1)})));
  // Mish: x * tanh(log(1 + e^x)), linear far right, x e^x far left with relative precision.
  Tensor m = mish(from_vector<float>({100.f, 1e30f, -30.f}));
  EXPECT_EQ(m.data<float>()[0], 100.f);
  EXPECT_EQ(m.data<float>()[1], 1e30f);
  EXPECT_NEAR(m.data<float>()[2] / (-30 * std::exp(-30.0)), 1.0, 1e-5);
}

TEST(UnaryOnnx, PublicFunctionsForwardToTheirOps) {
  Tensor x = random_tensor({5, 3}, DType::f32, 21, -0.9, 0.9);
  Tensor p = testing::random_positive({5, 3}, DType::f32, 22, 1.1, 3.0);
  EXPECT_TRUE(all_close(tan(x), ref::unary("tan", x)));
  EXPECT_TRUE(all_close(asin(x), ref::unary("asin", x)));
  EXPECT_TRUE(all_close(acos(x), ref::unary("acos", x)));
  EXPECT_TRUE(all_close(atan(x), ref::unary("atan", x)));
  EXPECT_TRUE(all_close(sinh(x), ref::unary("sinh", x)));
  EXPECT_TRUE(all_close(cosh(x), ref::unary("cosh", x)));
  EXPECT_TRUE(all_close(asinh(x), ref::unary("asinh", x)));
  EXPECT_TRUE(all_close(acosh(p), ref::unary("acosh", p)));
  EXPECT_TRUE(all_close(atanh(x), ref::unary("atanh", x)));
  EXPECT_TRUE(all_close(isnan(x), ref::unary("isnan", x)));
  EXPECT_TRUE(all_close(isinf(x), ref::unary("isinf", x)));
  EXPECT_TRUE(all_close(softsign(x), ref::unary("softsign", x)));
  EXPECT_TRUE(all_close(selu(x), ref::unary("selu", x)));
  EXPECT_TRUE(all_close(celu(x, 0.3), ref::unary("celu", x, {{"alpha", 0.3}})));
  EXPECT_TRUE(all_close(thresholded_relu(x, 0.1), ref::unary("thresholded_relu", x, {{"alpha", 0.1}})));
  EXPECT_TRUE(all_close(mish(x), ref::unary("mish", x)));
}

TEST(UnaryOnnx, RegistryEntries) {
  const std::vector<std::tuple<const char*, const char*, int>> onnx = {
      {"tan", "Tan", 7},       {"asin", "Asin", 7},         {"acos", "Acos", 7},
      {"atan", "Atan", 7},     {"sinh", "Sinh", 9},         {"cosh", "Cosh", 9},
      {"asinh", "Asinh", 9},   {"acosh", "Acosh", 9},       {"atanh", "Atanh", 9},
      {"isnan", "IsNaN", 9},   {"isinf", "IsInf", 10},      {"softsign", "Softsign", 1},
      {"selu", "Selu", 6},     {"celu", "Celu", 12},        {"thresholded_relu", "ThresholdedRelu", 10},
      {"mish", "Mish", 18}};
  for (const auto& [name, type, since] : onnx) {
    const OpDef& d = kiln::op(name);
    ASSERT_TRUE(d.onnx_mapping().has_value()) << name;
    EXPECT_EQ(d.onnx_mapping()->op_type, type) << name;
    EXPECT_EQ(d.onnx_mapping()->since_opset, since) << name;
    const bool classifier = std::string(name) == "isnan" || std::string(name) == "isinf";
    EXPECT_EQ(d.vjp_status().kind, classifier ? RuleStatus::Kind::not_applicable : RuleStatus::Kind::provided) << name;
  }
}

TEST(UnaryOnnx, Errors) {
  Tensor x = ones({2, 3});
  EXPECT_KILN_ERROR(celu(x, 0.0), "celu", "alpha", "nonzero", "f32[2, 3]");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("isinf"), {x}, {{"detect_positive", 1.0}}), "isinf", "detect_positive",
                    "expects bool");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("selu"), {x}, {{"gama", 1.0}}), "selu", "unknown attribute 'gama'");
  EXPECT_KILN_ERROR(tan(Tensor()), "tan", "'x'");
  EXPECT_KILN_ERROR(isnan(Tensor()), "isnan", "'x'");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("mish"), {x, x}), "mish", "expected at most 1");
}

}  // namespace
}  // namespace kiln
