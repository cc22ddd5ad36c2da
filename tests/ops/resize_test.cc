// resize against ONNX's own Resize (values from onnx.reference, tests/data/make_resize_cases.py)
// and against the float64 reference (ref::resize, a per-element tensor product of the filters) on
// random inputs: every mode, coordinate transform and nearest rounding, antialias, exclude_outside,
// tf_crop_and_resize extrapolation, given scales, 3-D and 5-D, non-contiguous inputs, every
// floating dtype, nearest on integer and bool dtypes, the gradient (adjoint) and error cases.
//
// Tolerances: f64 1e-12 (abs and rel); f32 1e-5 (the passes accumulate in f32 with |weights| summing
// to at most ~1.5 per axis); f16 / bf16 compute in f32 and round once: 2^-9 / 2^-6 relative plus
// twice that absolute (cancellation near zero).
#include <cmath>
#include <limits>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/ref/resample.h"
#include "kernels/cpu/resample.h"
#include "kiln/ops/resample.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::Tol;

Tol resize_tol(DType t) {
  switch (t) {
    case DType::f64: return {1e-12, 1e-12};
    case DType::f32: return {1e-5, 1e-5};
    case DType::f16: return {1.0 / 512, 1.0 / 256};
    default: return {1.0 / 64, 1.0 / 32};
  }
}

Attrs attrs_of(const std::vector<int64_t>& sizes, const ResizeOptions& o) {
  return {{"sizes", sizes},
          {"scales", o.scales},
          {"roi", o.roi},
          {"mode", o.mode},
          {"coordinate_transformation_mode", o.coordinate_transformation_mode},
          {"nearest_mode", o.nearest_mode},
          {"cubic_coeff_a", o.cubic_coeff_a},
          {"exclude_outside", o.exclude_outside},
          {"extrapolation_value", o.extrapolation_value},
          {"antialias", o.antialias}};
}

struct Mode {
  std::string mode, coord, nearest;
  double a;
  bool exclude;
  double extrapolation;
  bool antialias;
};

struct OnnxCase {
  std::string name;
  Shape x, y;
  std::vector<double> scales, roi;
  Mode m;
  std::vector<double> want;
};

const std::vector<OnnxCase> kOnnxCases = {
    {"linear_half_pixel_up", {1, 1, 3, 4}, {1, 1, 5, 7},
     {}, {},
     {"linear", "half_pixel", "round_prefer_floor", -0.75, false, 0.0, false},
     {-1.8333333333333335, -1.0000000000000002, 0.33333333333333337, -0.16666666666666669, -0.6666666666666663, 0.6666666666666665, 1.5, -1.0333333333333334, -0.7238095238095239, -0.22857142857142848, -0.10000000000000003, 0.028571428571428602, 0.5238095238095238, 0.8333333333333335, 0.16666666666666663, -0.3095238095238095, -1.0714285714285716, 0.0, 1.0714285714285714, 0.30952380952380965, -0.16666666666666666, -0.8333333333333335, -0.5238095238095238, -0.028571428571428404, 0.10000000000000003, 0.07142857142857109, -0.6904761904761905, -1.1666666666666667, -1.5, -0.6666666666666667, 0.6666666666666669, 0.16666666666666674, -0.5952380952380955, -1.3571428571428568, -1.833333333333333}},
    {"cubic_align_corners_scales", {1, 2, 5, 6}, {1, 2, 3, 10},
     {1.0, 1.0, 0.6000000238418579, 1.7000000476837158}, {},
     {"cubic", "align_corners", "round_prefer_floor", -0.75, false, 0.0, false},
     {-1.8333333333333333, -0.4177892903486887, 0.5206993718942006, -0.46720377604166674, -0.5758884946505228, 0.9801476498444874, 1.4826177656650543, 0.5760711133480072, -0.4220287203788758, -1.0575434267520905, 0.5000014106432598, -0.46780319323432806, -0.7342820590430548, 0.7339149396098367, 1.5320269994134343, 0.7598081074808422, -0.3809638331349289, -1.1900374703123842, -0.5432873737530718, 0.9467414336839834, -0.8333329359690348, 0.5822096600644072, 1.5396821417345639, 0.9367255206947838, -0.196390678293407, -1.131061167998027, -0.7039810968812313, 0.8618139290193718, 0.9848080004047213, -0.028582773095919833, -1.5, -0.08445609609285987, 0.8730161686738332, 0.27005871136983234, -0.86305832862854, -1.7977286875247953, -1.3706471423308055, 0.19514843821525577, 0.3181421955426533, -0.6952496866385143, 0.8333346247673035, 0.2363460331133271, -0.6786531967296542, -1.7039884555154239, -1.5758876999400608, -0.019851183557076074, 0.34429173007519037, -0.7720311949522636, -0.2099544903583872, 1.280074488016376, -0.4999994436899821, -1.4678026006161768, -1.7342820125351608, -0.2660859007779285, 0.4633154671033614, -0.6401638225076784, -0.3706475965340606, 1.1951474815416578, 1.3181414529473254, 0.3047505801055621}},
    {"cubic_antialias_down", {1, 1, 7, 9}, {1, 1, 3, 4},
     {}, {},
     {"cubic", "half_pixel", "round_prefer_floor", -0.75, false, 0.0, true},
     {-0.5332834120352875, -0.15306727249464316, 0.1178205727039613, -0.013181263242116293, 0.09738699450458882, -0.34372364529904237, -0.44349847708195234, -0.28523590348109323, -0.18714385153985222, 0.15749945103422322, -0.0014670523616611836, -0.2609983630193575}},
    {"linear_antialias_scales", {1, 1, 6, 7}, {1, 1, 2, 5},
     {1.0, 1.0, 0.4000000059604645, 0.75}, {},
     {"linear", "half_pixel", "round_prefer_floor", -0.75, false, 0.0, true},
     {-0.47696970316858023, -0.3133333292007446, 0.27575758132067596, -0.46242425211993177, -0.14666666253407784, 0.09636362857529615, -0.4866666812896729, -0.07090908502809917, 0.07090909297538514, -0.5399999918937681}},
    {"crop_and_resize_extrapolate", {1, 1, 4, 5}, {1, 1, 3, 4},
     {}, {0.0, 0.0, 0.4000000059604645, -0.20000000298023224, 1.0, 1.0, 1.2999999523162842, 0.699999988079071},
     {"linear", "tf_crop_and_resize", "round_prefer_floor", -0.75, false, 10.0, false},
     {10.0, -0.3933334414164148, 0.20666667381921078, -1.0999998251597085, 10.0, -0.6666666004392836, -0.06666683488421932, -0.1999998490015666, 10.0, 10.0, 10.0, 10.0}},
    {"nearest_ceil_asymmetric_3d", {2, 3, 4}, {3, 5, 7},
     {}, {},
     {"nearest", "asymmetric", "round_prefer_ceil", -0.75, false, 0.0, false},
     {-1.8333333333333333, 0.5, 0.5, -0.8333333333333334, -0.8333333333333334, 1.5, 1.5, 0.16666666666666666, -1.1666666666666667, -1.1666666666666667, 1.1666666666666667, 1.1666666666666667, -0.16666666666666666, -0.16666666666666666, 0.16666666666666666, -1.1666666666666667, -1.1666666666666667, 1.1666666666666667, 1.1666666666666667, -0.16666666666666666, -0.16666666666666666, -1.5, 0.8333333333333334, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333, -1.8333333333333333, -1.5, 0.8333333333333334, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333, -1.8333333333333333, 0.5, -0.8333333333333334, -0.8333333333333334, 1.5, 1.5, 0.16666666666666666, 0.16666666666666666, -1.1666666666666667, 1.1666666666666667, 1.1666666666666667, -0.16666666666666666, -0.16666666666666666, -1.5, -1.5, -1.1666666666666667, 1.1666666666666667, 1.1666666666666667, -0.16666666666666666, -0.16666666666666666, -1.5, -1.5, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333, -1.8333333333333333, 0.5, 0.5, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333, -1.8333333333333333, 0.5, 0.5, 0.5, -0.8333333333333334, -0.8333333333333334, 1.5, 1.5, 0.16666666666666666, 0.16666666666666666, -1.1666666666666667, 1.1666666666666667, 1.1666666666666667, -0.16666666666666666, -0.16666666666666666, -1.5, -1.5, -1.1666666666666667, 1.1666666666666667, 1.1666666666666667, -0.16666666666666666, -0.16666666666666666, -1.5, -1.5, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333, -1.8333333333333333, 0.5, 0.5, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333, -1.8333333333333333, 0.5, 0.5}},
    {"nearest_floor_half_pixel_scales", {1, 1, 5, 3}, {1, 1, 3, 7},
     {1.0, 1.0, 0.699999988079071, 2.5}, {},
     {"nearest", "half_pixel", "floor", -0.75, false, 0.0, false},
     {-1.8333333333333333, -1.8333333333333333, -1.8333333333333333, -1.8333333333333333, 0.5, 0.5, -0.8333333333333334, 1.5, 1.5, 1.5, 1.5, 0.16666666666666666, 0.16666666666666666, -1.1666666666666667, 0.8333333333333334, 0.8333333333333334, 0.8333333333333334, 0.8333333333333334, -0.5, -0.5, -1.8333333333333333}},
    {"linear_half_pixel_symmetric", {1, 1, 4, 5}, {1, 1, 5, 3},
     {1.0, 1.0, 1.2999999523162842, 0.699999988079071}, {},
     {"linear", "half_pixel_symmetric", "round_prefer_floor", -0.75, false, 0.0, false},
     {-0.5000000567663287, -0.8333333333333334, 0.9285713961335263, -0.01282058839698652, -0.34615386496399114, -0.1153845423273594, -0.5476190597832609, 0.16666666666666669, -0.16666660990033777, -1.0824175311695352, 0.6794871982973246, -0.07692306970132845, -0.5952380628001931, 1.1666666666666667, -0.7380952705331403}},
    {"cubic_exclude_outside", {1, 1, 4, 4}, {1, 1, 7, 3},
     {}, {},
     {"cubic", "half_pixel", "round_prefer_floor", -0.5, true, 0.0, false},
     {-1.6756213931894208, -0.17988785319035894, 1.315845686808703, -1.0411039678240244, -0.131437556868215, 0.9197943086123086, -0.04325186410254753, -0.019704716926922605, 0.11775159744139607, -0.6152445073468921, 0.21223958333333337, -1.0459063910836288, -1.1872371505912365, 0.4051649389563634, -1.6562978593315025, -0.18938504686975993, 0.36732482628504215, -0.3374808755785149, 0.4451323784956365, 0.3283753883869488, 0.5057464421190097}},
    {"linear_pytorch_half_pixel_to_one", {1, 2, 5, 4}, {1, 2, 1, 3},
     {}, {},
     {"linear", "pytorch_half_pixel", "round_prefer_floor", -0.75, false, 0.0, false},
     {-1.4444444444444444, -0.16666666666666669, 1.1111111111111114, 0.6111111111111112, -1.1666666666666665, 0.1111111111111115}},
    {"linear_5d", {1, 1, 3, 4, 3}, {1, 1, 5, 3, 4},
     {}, {},
     {"linear", "align_corners", "round_prefer_floor", -0.75, false, 0.0, false},
     {-1.8333333333333333, -0.27777777777777785, 0.055555555555555636, -0.8333333333333334, 1.3333333333333335, 0.44444444444444453, -0.4444444444444444, -1.3333333333333335, 0.8333333333333334, -0.05555555555555547, -0.9444444444444443, -1.8333333333333333, -0.6666666666666666, -0.33333333333333337, -5.551115123125783e-17, 0.3333333333333333, 0.6666666666666667, -0.2222222222222222, -0.5000000000000001, -0.16666666666666666, 0.16666666666666669, -0.7222222222222221, -1.0, -0.6666666666666666, 0.5, -0.3888888888888889, -0.0555555555555558, 1.5, 0.0, -0.888888888888889, -0.5555555555555558, 1.0, -0.5, -1.3888888888888888, -1.0555555555555558, 0.5, -0.16666666666666669, 0.16666666666666663, 0.5, 0.8333333333333334, -0.6666666666666667, -0.33333333333333337, -1.3877787807814457e-17, 0.33333333333333337, -1.1666666666666665, -0.8333333333333333, -0.5, -0.16666666666666669, -0.8333333333333334, 0.7222222222222221, 1.0555555555555556, 0.16666666666666666, -1.3333333333333335, 0.2222222222222221, 0.5555555555555557, -0.3333333333333333, -1.8333333333333333, -0.27777777777777785, 0.055555555555555636, -0.8333333333333334}},
};

ResizeOptions options_of(const Mode& m, const std::vector<double>& scales, const std::vector<double>& roi) {
  ResizeOptions o;
  o.mode = m.mode, o.coordinate_transformation_mode = m.coord, o.nearest_mode = m.nearest;
  o.cubic_coeff_a = m.a, o.exclude_outside = m.exclude, o.extrapolation_value = m.extrapolation;
  o.antialias = m.antialias, o.scales = scales, o.roi = roi;
  return o;
}

Tensor onnx_case_input(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((static_cast<double>((i * 7) % 11) - 5.5) / 3);
  return from_vector<double>(v, s);
}

TEST(Resize, MatchesOnnxReferenceCases) {
  for (const auto& c : kOnnxCases) {
    SCOPED_TRACE(c.name);
    Tensor x = onnx_case_input(c.x);
    ResizeOptions o = options_of(c.m, c.scales, c.roi);
    Tensor want = from_vector<double>(c.want, c.y);
    std::vector<int64_t> sizes(c.y.begin(), c.y.end());
    // ONNX's reference computes with float32 attributes (cubic_coeff_a, roi) under NumPy 2's
    // promotion rules, so its values carry f32 rounding: compare at 2e-6.
    const Tol onnx_tol{2e-6, 2e-6};
    EXPECT_TRUE(all_close(resize(x, sizes, o), want, onnx_tol));
    EXPECT_TRUE(all_close(resize(x.to(DType::f32), sizes, o), want, Tol{1e-5, 1e-5}));
    EXPECT_TRUE(all_close(ref::resize(x, attrs_of(sizes, o)), want, onnx_tol));
    EXPECT_TRUE(all_close(resize(x, sizes, o), ref::resize(x, attrs_of(sizes, o)), resize_tol(DType::f64)));
  }
}

struct RandomCase {
  Shape x;
  std::vector<int64_t> sizes;
  Mode m;
  std::vector<double> scales = {}, roi = {};
};

const std::vector<RandomCase> kRandomCases = {
    {{2, 3, 5, 7}, {2, 3, 9, 4}, {"linear", "half_pixel", "round_prefer_floor", -0.75, false, 0, false}},
    {{2, 3, 5, 7}, {2, 3, 11, 13}, {"cubic", "half_pixel", "round_prefer_floor", -0.75, false, 0, false}},
    {{1, 2, 9, 11}, {1, 2, 4, 3}, {"cubic", "pytorch_half_pixel", "round_prefer_floor", -0.5, true, 0, true}},
    {{1, 2, 9, 11}, {1, 2, 5, 4}, {"linear", "align_corners", "round_prefer_floor", -0.75, false, 0, true}},
    {{3, 7, 5}, {4, 3, 8}, {"linear", "asymmetric", "round_prefer_floor", -0.75, true, 0, false}},
    {{1, 1, 4, 5, 6}, {1, 1, 7, 3, 6}, {"cubic", "align_corners", "round_prefer_floor", -0.75, false, 0, false}},
    {{2, 1, 6, 5}, {2, 1, 4, 7}, {"linear", "tf_crop_and_resize", "round_prefer_floor", -0.75, false, -3.5, false},
     {}, {0, 0, -0.3, 0.1, 1, 1, 0.8, 1.4}},
    {{2, 1, 6, 5}, {2, 1, 4, 7}, {"cubic", "tf_crop_and_resize", "round_prefer_floor", -0.75, false, 2.5, false},
     {}, {0, 0, 0.1, -0.2, 1, 1, 0.7, 0.9}},
    {{1, 3, 7, 6}, {1, 3, 10, 4}, {"linear", "half_pixel_symmetric", "round_prefer_floor", -0.75, false, 0, false},
     {1, 1, 1.5, 0.7}},
    {{1, 3, 7, 6}, {1, 3, 10, 4}, {"nearest", "half_pixel", "round_prefer_ceil", -0.75, false, 0, false}},
    {{1, 3, 7, 6}, {1, 3, 3, 13}, {"nearest", "align_corners", "floor", -0.75, false, 0, false}},
    {{1, 3, 7, 6}, {1, 3, 3, 13}, {"nearest", "asymmetric", "ceil", -0.75, false, 0, false}},
    {{1, 3, 7, 6}, {1, 3, 3, 13}, {"nearest", "pytorch_half_pixel", "round_prefer_floor", -0.75, false, 0, false}},
    {{5, 6, 7}, {3, 11, 1}, {"nearest", "tf_crop_and_resize", "round_prefer_floor", -0.75, false, 1.25, false},
     {}, {-0.2, 0.1, 0.2, 1.1, 0.9, 0.8}},
    {{1, 1, 1, 33}, {1, 1, 5, 32}, {"linear", "half_pixel", "round_prefer_floor", -0.75, false, 0, false}},
};

TEST(Resize, MatchesFloat64ReferenceOnRandomInputs) {
  for (DType t : testing::kFloatDTypes) {
    uint64_t seed = 10;
    for (const auto& c : kRandomCases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + c.m.mode + " " + c.m.coord + " x " + shape_str(c.x) + " -> " +
                   shape_str(Shape(c.sizes.begin(), c.sizes.end())));
      ResizeOptions o = options_of(c.m, c.scales, c.roi);
      Tensor x = random_tensor(c.x, t, seed++);
      Tensor want = ref::resize(x, attrs_of(c.sizes, o));
      Tensor got = resize(x, c.sizes, o);
      EXPECT_EQ(got.dtype(), t);
      EXPECT_TRUE(all_close(got, want, resize_tol(t)));
      EXPECT_TRUE(all_close(resize(testing::noncontiguous(x), c.sizes, o), want, resize_tol(t)));
    }
  }
}

// Tables on the last two axes run in one pass (Note [Resizing the last two axes at once]): per
// block of 16 output columns, a permute of the (blended) columns it reads, or a gather where it
// spans more than 16. Every ISA, against the float64 reference, contiguous and not: several
// blocks (70 wide), a last partial block, the height or the width alone, a 1-D tensor, one output
// column, and downsampling by 140x and 4500x with antialias (wide blocks, many taps).
TEST(Resize, LastTwoAxesInOnePassMatchesTheReference) {
  const Mode lin{"linear", "half_pixel", "round_prefer_floor", -0.75, false, 0, false};
  const Mode cub{"cubic", "align_corners", "round_prefer_floor", -0.5, true, 0, false};
  const Mode aa{"linear", "pytorch_half_pixel", "round_prefer_floor", -0.75, false, 0, true};
  const std::vector<RandomCase> cases = {
      {{2, 5, 7, 7}, {2, 5, 14, 14}, lin},  {{1, 3, 33, 40}, {1, 3, 17, 70}, cub},
      {{1, 2, 9, 1000}, {1, 2, 4, 7}, aa},  {{2, 3, 9, 16}, {2, 3, 5, 16}, lin},
      {{3, 1, 50}, {3, 1, 77}, cub},        {{33}, {70}, lin},
      {{1, 1, 5, 1}, {1, 1, 9, 1}, lin},    {{1, 2, 6, 7}, {1, 2, 3, 1}, aa},
      {{1, 1, 2, 9000}, {1, 1, 3, 2}, aa},
  };
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride use(isa);
    uint64_t seed = 60;
    for (const auto& c : cases) {
      SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " " + c.m.mode + " x " + shape_str(c.x) + " -> " +
                   shape_str(Shape(c.sizes.begin(), c.sizes.end())));
      ResizeOptions o = options_of(c.m, c.scales, c.roi);
      Tensor x = random_tensor(c.x, DType::f32, seed++);
      Tensor want = ref::resize(x.to(DType::f64), attrs_of(c.sizes, o));
      EXPECT_TRUE(all_close(resize(x, c.sizes, o), want, resize_tol(DType::f32)));
      EXPECT_TRUE(all_close(resize(testing::noncontiguous(x), c.sizes, o), want, resize_tol(DType::f32)));
    }
  }
}

// What the one-pass path takes: tables on the last two axes, none extrapolating, none longer than
// its 32-bit gather indices reach.
TEST(Resize, OnePassTakesTheLastTwoAxesOnly) {
  using kernels::cpu::ResampleAxis;
  auto table = [](int64_t axis, int64_t in_len) {
    ResampleAxis t;
    t.axis = axis, t.in_len = in_len, t.out_len = 2, t.taps = 1, t.index = {0, 0}, t.weight = {1, 1};
    return t;
  };
  const Shape x{2, 3, 4, 5};
  EXPECT_TRUE(kernels::cpu::resample_last2_f32_applies(x, {table(2, 4), table(3, 5)}));
  EXPECT_TRUE(kernels::cpu::resample_last2_f32_applies(x, {table(3, 5)}));
  EXPECT_FALSE(kernels::cpu::resample_last2_f32_applies(x, {table(1, 3), table(3, 5)}));
  EXPECT_FALSE(kernels::cpu::resample_last2_f32_applies(x, {}));
  ResampleAxis crop = table(3, 5);
  crop.outside = {0, 1};
  EXPECT_FALSE(kernels::cpu::resample_last2_f32_applies(x, {crop}));
  crop.outside = {0, 0};
  EXPECT_TRUE(kernels::cpu::resample_last2_f32_applies(x, {crop}));
  EXPECT_FALSE(kernels::cpu::resample_last2_f32_applies(Shape{1, int64_t{1} << 32}, {table(1, int64_t{1} << 32)}));
}

// An inf reaches only the outputs whose taps read it: a block loads all the columns its outputs
// read, but each output combines only its own taps (0 * inf would be NaN).
TEST(Resize, AnInfReachesOnlyTheOutputsThatReadIt) {
  ResizeOptions o;
  o.mode = "linear";
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride use(isa);
    Tensor x = random_tensor({1, 1, 4, 12}, DType::f32, 70);
    x.data<float>()[12 + 5] = std::numeric_limits<float>::infinity();  // row 1, column 5
    Tensor y = resize(x, {1, 1, 8, 24}, o);
    // Output column j reads input columns floor((j + 0.5) / 2 - 0.5) and the one after it; output
    // row i likewise reads rows near i / 2.
    for (int64_t i = 0; i < 8; ++i)
      for (int64_t j = 0; j < 24; ++j) {
        const float v = y.data<float>()[i * 24 + j];
        const bool reads_row = i >= 1 && i <= 4, reads_col = j >= 9 && j <= 12;
        if (reads_row && reads_col) EXPECT_TRUE(std::isinf(v)) << isa_name(isa) << " " << i << " " << j;
        else EXPECT_TRUE(std::isfinite(v)) << isa_name(isa) << " " << i << " " << j << " " << v;
      }
  }
}

TEST(Resize, NearestIsAnExactGatherForEveryDType) {
  ResizeOptions o;
  o.coordinate_transformation_mode = "asymmetric";
  for (DType t : {DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean, DType::f16, DType::f32}) {
    Tensor x = random_tensor({2, 3, 5}, t, 4);
    Tensor got = resize(x, {3, 3, 9}, o);
    EXPECT_EQ(got.dtype(), t);
    EXPECT_TRUE(all_close(got, ref::resize(x, attrs_of({3, 3, 9}, o)), Tol{0, 0})) << dtype_name(t);
  }
  // f32 over the last two axes runs as one tap of weight 1 (Note [Resizing the last two axes at
  // once]): still a copy, -0, inf and NaN included, on every ISA; upsampled by 2 a row repeats the
  // row above (copied), here also across the threads' chunks of rows.
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas())
    for (const auto& [xs, ys] : {std::pair<Shape, std::vector<int64_t>>{{2, 3, 4, 21}, {2, 3, 8, 47}},
                                 std::pair<Shape, std::vector<int64_t>>{{1, 72, 28, 28}, {1, 72, 56, 56}}}) {
      kernels::cpu::IsaOverride use(isa);
      Tensor x = random_tensor(xs, DType::f32, 5);
      float* xp = x.data<float>();
      xp[0] = -0.0f, xp[1] = std::numeric_limits<float>::infinity(), xp[30] = std::numeric_limits<float>::quiet_NaN();
      Tensor got = resize(x, ys, o);
      // The f64 resize is the byte gather (the float64 reference sums products and drops -0's sign).
      Tensor want = resize(x.to(DType::f64), ys, o);
      const float* g = got.data<float>();
      const double* w = want.data<double>();
      for (int64_t i = 0; i < got.numel(); ++i) {
        if (std::isnan(w[i])) {
          EXPECT_TRUE(std::isnan(g[i])) << kernels::cpu::isa_name(isa) << " at " << i;
        } else {
          EXPECT_EQ(static_cast<double>(g[i]), w[i]) << kernels::cpu::isa_name(isa) << " at " << i;
          EXPECT_EQ(std::signbit(g[i]), std::signbit(w[i])) << kernels::cpu::isa_name(isa) << " at " << i;
        }
      }
    }
  // Values past 2^53 survive (no trip through double).
  Tensor big = from_vector<int64_t>({(int64_t(1) << 60) + 1, -((int64_t(1) << 59) + 3)}, Shape{2});
  Tensor y = resize(big, {4}, o);
  EXPECT_EQ(y.data<int64_t>()[1], (int64_t(1) << 60) + 1);
  EXPECT_EQ(y.data<int64_t>()[3], -((int64_t(1) << 59) + 3));
}

TEST(Resize, SameSizeIsTheIdentity) {
  Tensor x = random_tensor({2, 3, 4, 5}, DType::f32, 8);
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    ResizeOptions o;
    o.mode = mode;
    EXPECT_TRUE(all_close(resize(x, {2, 3, 4, 5}, o), x, Tol{0, 0})) << mode;
  }
  // Zero-sized output.
  EXPECT_EQ(resize(x, {2, 3, 0, 5}).shape(), Shape({2, 3, 0, 5}));
}

// sizes -1 keeps x's dim (a symbolic batch imported from ONNX); given scales must be 1 there.
TEST(Resize, MinusOneKeepsTheDim) {
  Tensor x = random_tensor({3, 2, 4, 5}, DType::f32, 9);
  ResizeOptions o;
  o.mode = "linear";
  Tensor want = resize(x, {3, 2, 8, 10}, o);
  EXPECT_TRUE(all_close(resize(x, {-1, -1, 8, 10}, o), want, Tol{0, 0}));
  EXPECT_TRUE(all_close(ref::resize(x, attrs_of({-1, -1, 8, 10}, o)), want, resize_tol(DType::f32)));
  o.scales = {1, 1, 2, 2};
  EXPECT_TRUE(all_close(resize(x, {-1, 2, 8, 10}, o), want, Tol{0, 0}));
  o.scales = {2, 1, 2, 2};
  EXPECT_KILN_ERROR(resize(x, {-1, 2, 8, 10}, o), "resize", "keeps dim 0 (-1)", "resizes it");
}

double dot(const Tensor& a, const Tensor& b) {
  auto av = ref::values(a), bv = ref::values(b);
  double s = 0;
  for (size_t i = 0; i < av.size(); ++i) s += av[i] * bv[i];
  return s;
}

// <resize(x), g> = <x, resize_backward(g)> for the linear part (extrapolated positions do not
// depend on x: with a zero extrapolation value the map is linear).
TEST(Resize, BackwardIsTheAdjoint) {
  uint64_t seed = 40;
  for (const auto& c : kRandomCases) {
    ResizeOptions o = options_of(c.m, c.scales, c.roi);
    o.extrapolation_value = 0;
    SCOPED_TRACE(c.m.mode + " " + c.m.coord + " x " + shape_str(c.x));
    Tensor x = random_tensor(c.x, DType::f64, seed++);
    Tensor g = random_tensor(Shape(c.sizes.begin(), c.sizes.end()), DType::f64, seed++);
    Attrs a = attrs_of(c.sizes, o);
    a.set("input_shape", std::vector<int64_t>(c.x.begin(), c.x.end()));
    Tensor dx = dispatch1(op("resize_backward"), {g}, a);
    EXPECT_EQ(dx.shape(), c.x);
    const double lhs = dot(resize(x, c.sizes, o), g), rhs = dot(x, dx);
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::fabs(lhs)));
    Tensor dx32 = dispatch1(op("resize_backward"), {g.to(DType::f32)}, a);
    EXPECT_EQ(dx32.dtype(), DType::f32);
    EXPECT_TRUE(all_close(dx32, dx, Tol{1e-5, 1e-5}));
  }
}

TEST(Resize, ErrorsNameTheProblem) {
  Tensor x = ones({1, 2, 3, 4});
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6}), "resize", "sizes must have one entry per dim", "[1, 2, 3, 4]");
  EXPECT_KILN_ERROR(resize(x, {1, 2, -2, 4}), "resize", "negative entry at dim 2");
  ResizeOptions bad_mode;
  bad_mode.mode = "bilinear";
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6, 8}, bad_mode), "resize", "mode must be one of", "'bilinear'");
  ResizeOptions bad_coord;
  bad_coord.coordinate_transformation_mode = "half";
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6, 8}, bad_coord), "coordinate_transformation_mode", "'half'");
  ResizeOptions bad_nearest;
  bad_nearest.nearest_mode = "round";
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6, 8}, bad_nearest), "nearest_mode", "'round'");
  ResizeOptions aa;
  aa.antialias = true;
  EXPECT_KILN_ERROR(resize(x, {1, 2, 2, 2}, aa), "antialias", "nearest");
  ResizeOptions lin;
  lin.mode = "linear";
  EXPECT_KILN_ERROR(resize(ones({1, 2, 3, 4}, DType::i32), {1, 2, 6, 8}, lin), "linear interpolation needs a floating x",
                    "i32");
  ResizeOptions sc;
  sc.scales = {1, 2};
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6, 8}, sc), "scales must be empty or have one entry per dim", "[1.0, 2.0]");
  sc.scales = {1, 1, 0, 2};
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6, 8}, sc), "scales must be positive");
  ResizeOptions roi;
  roi.roi = {0, 1};
  EXPECT_KILN_ERROR(resize(x, {1, 2, 6, 8}, roi), "roi must be empty or", "8 entries");
  EXPECT_KILN_ERROR(resize(ones({1, 0, 3}), {1, 2, 3}), "dim 1", "is empty");
  EXPECT_KILN_ERROR(resize(full({}, 1.0f), {}), "rank >= 1");
}

}  // namespace
}  // namespace kiln
