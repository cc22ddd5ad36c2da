// The channels-last convolution kernel (kernels/cpu/conv_nhwc.h) under every ISA the machine has,
// against the float64 NCHW reference (inputs and weights permuted): strides, asymmetric padding,
// dilation, groups, depthwise, 1x1 with and without im2col, odd sizes, images large enough that
// row blocks run in parallel, and the epilogue (bias, activation, residual before and after).
//
// Tolerance: each element within eps * (the same convolution of |x|, |w|, |bias|, plus |residual|)
// with eps = 1e-5, a few f32 roundings per product (ReLU is 1-Lipschitz, so the bound carries).
#include <optional>

#include "kernels/cpu/conv_nhwc.h"
#include "kernels/cpu/isa.h"
#include "kiln/core/thread_pool.h"
#include "support/conv_case.h"
#include "support/testing.h"

namespace kiln {
namespace {

using kernels::cpu::Conv2dEpilogue;
using kernels::cpu::Conv2dParams;
using kernels::cpu::GemmActivation;
using kernels::cpu::Isa;
using testing::abs_values;
using testing::close_by_magnitude;
using testing::random_tensor;

class ConvNhwcIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::isa_supported(GetParam())) GTEST_SKIP() << kernels::cpu::isa_name(GetParam()) << " not supported";
    override_.emplace(GetParam());
  }
  std::optional<kernels::cpu::IsaOverride> override_;
};

using Case = testing::ConvCase;
using testing::conv_params_of;

const std::vector<Case> kCases = {
    {{1, 1, 1, 1}, {1, 1, 1, 1}},                                        // everything size 1
    {{2, 3, 7, 9}, {4, 3, 3, 3}},                                        // no padding
    {{2, 3, 9, 11}, {5, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}},                 // stride + padding
    {{1, 2, 7, 8}, {3, 2, 3, 2}, {1, 2}, {0, 2, 1, 0}},                  // asymmetric
    {{1, 3, 11, 9}, {2, 3, 3, 3}, {1, 1}, {2, 1, 2, 1}, {2, 3}},         // dilation
    {{1, 4, 8, 7}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},       // groups
    {{2, 6, 9, 9}, {6, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6},       // depthwise
    {{2, 5, 7, 7}, {33, 5, 1, 1}},                                       // 1x1: x is the GEMM's A
    {{1, 5, 7, 7}, {3, 5, 1, 1}, {2, 2}},                                // 1x1 strided: im2col
    {{1, 3, 33, 33}, {7, 3, 7, 7}, {2, 2}, {3, 3, 3, 3}},                // a ResNet stem, odd
    {{2, 17, 33, 33}, {32, 17, 3, 3}, {1, 1}, {1, 1, 1, 1}},             // parallel row blocks
    {{3, 16, 20, 20}, {24, 8, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},   // parallel, grouped
};


Tensor nhwc(const Tensor& t) { return t.permute({0, 2, 3, 1}).contiguous(); }

// Runs the kernel on permuted copies and returns y (NHWC).
Tensor run_nhwc(const Case& c, const Tensor& x, const Tensor& w, const Tensor& bias, const Conv2dEpilogue& ep) {
  const Conv2dParams p = conv_params_of(c);
  Tensor xn = nhwc(x), wn = nhwc(w);  // OIHW -> OHWI is the same permutation
  Tensor y = zeros({p.n, p.ho, p.wo, p.k}, TensorOptions(DType::f32));
  kernels::cpu::conv2d_nhwc_f32(p, static_cast<const float*>(xn.data_ptr()), static_cast<const float*>(wn.data_ptr()),
                                bias.defined() ? static_cast<const float*>(bias.data_ptr()) : nullptr,
                                static_cast<float*>(y.data_ptr()), ep);
  return y;
}

TEST_P(ConvNhwcIsaTest, MatchesReferenceOnEveryCase) {
  set_num_threads(2);
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    for (bool with_bias : {false, true}) {
      Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
      Tensor bias = with_bias ? random_tensor({c.w[0]}, DType::f32, seed++) : Tensor();
      Tensor got = run_nhwc(c, x, w, bias, {});
      Tensor want = nhwc(ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups));
      Tensor mag = nhwc(ref::conv2d(abs_values(x), abs_values(w), with_bias ? abs_values(bias) : Tensor(), c.stride,
                                    c.padding, c.dilation, c.groups));
      EXPECT_TRUE(close_by_magnitude(got, want, mag, 1e-5)) << "x " << shape_str(c.x) << " w " << shape_str(c.w) << " bias " << with_bias;
    }
  }
}

TEST_P(ConvNhwcIsaTest, EpilogueActivationAndResidual) {
  set_num_threads(2);
  uint64_t seed = 100;
  for (const Case& c : {kCases[2], kCases[7], kCases[10]}) {
    for (bool before : {false, true}) {
      const Conv2dParams p = conv_params_of(c);
      Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
      Tensor bias = random_tensor({c.w[0]}, DType::f32, seed++);
      Tensor res = random_tensor({p.n, p.ho, p.wo, p.k}, DType::f32, seed++);
      Conv2dEpilogue ep;
      ep.activation = GemmActivation::relu;
      ep.residual = static_cast<const float*>(res.data_ptr());
      ep.residual_before_activation = before;
      Tensor got = run_nhwc(c, x, w, bias, ep);
      Tensor conv = nhwc(ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups));
      Tensor res64 = res.to(DType::f64);
      Tensor want = before ? (conv + res64).relu() : conv.relu() + res64;
      Tensor mag = nhwc(ref::conv2d(abs_values(x), abs_values(w), abs_values(bias), c.stride, c.padding, c.dilation,
                                    c.groups)) +
                   abs_values(res64);
      EXPECT_TRUE(close_by_magnitude(got, want, mag, 1e-5)) << "x " << shape_str(c.x) << " w " << shape_str(c.w) << " before " << before;
    }
  }
}

TEST(ConvNhwcLayout, OihwToOhwiPermutesEveryElement) {
  Tensor w = random_tensor({5, 3, 2, 4}, DType::f32, 7);
  Tensor got = zeros({5, 2, 4, 3}, TensorOptions(DType::f32));
  kernels::cpu::oihw_to_ohwi_f32(5, 3, 2, 4, static_cast<const float*>(w.data_ptr()),
                                 static_cast<float*>(got.data_ptr()));
  EXPECT_TRUE(testing::all_close(got, nhwc(w), testing::Tol{0.0, 0.0}));
}

INSTANTIATE_TEST_SUITE_P(Isa, ConvNhwcIsaTest, ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(kernels::cpu::isa_name(i.param)); });

}  // namespace
}  // namespace kiln
