// conv_transpose2d against the float64 reference (ref::conv_transpose2d, a scatter over the full
// output): strides, asymmetric padding, output_padding, dilation, groups and depthwise, bias, odd
// sizes, non-contiguous inputs, every floating dtype, the adjoint identity with conv2d, ONNX's
// ConvTranspose examples, and error cases.
//
// Tolerance: a sum of products, so each element is checked against eps * sum |x||w| (+ |bias|)
// with eps = 1e-5 (f32), 1e-13 (f64), 2^-10 (f16), 2^-7 (bf16), as in conv_test.cc.
#include "support/testing.h"

namespace kiln {
namespace {

using testing::abs_values;
using testing::all_close;
using testing::close_by_magnitude;
using testing::random_tensor;

double eps_for(DType t) {
  switch (t) {
    case DType::f32: return 1e-5;
    case DType::f64: return 1e-13;
    case DType::f16: return 1.0 / 1024;
    default: return 1.0 / 128;
  }
}

struct Case {
  Shape x, w;  // w: [C, K / groups, R, S]
  std::vector<int64_t> stride{1, 1}, padding{0, 0, 0, 0}, output_padding{0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

const std::vector<Case> kCases = {
    {{2, 3, 7, 9}, {3, 4, 3, 3}},
    {{1, 1, 1, 1}, {1, 1, 1, 1}},                                                 // everything size 1
    {{2, 3, 5, 7}, {3, 5, 3, 3}, {2, 2}, {1, 1, 1, 1}},                           // stride + padding
    {{1, 2, 4, 5}, {2, 3, 3, 2}, {3, 2}, {0, 2, 1, 0}, {2, 1}},                   // asymmetric, output_padding
    {{1, 3, 5, 4}, {3, 2, 3, 3}, {1, 2}, {2, 1, 0, 1}, {0, 1}, {2, 3}},           // dilation
    {{1, 4, 6, 5}, {4, 3, 3, 3}, {2, 1}, {1, 1, 1, 1}, {1, 0}, {1, 1}, 2},        // groups
    {{2, 6, 5, 5}, {6, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 6},        // depthwise
    {{1, 5, 7, 7}, {5, 3, 1, 1}},                                                 // 1x1
    {{1, 5, 4, 3}, {5, 2, 1, 1}, {3, 2}},                                         // 1x1 strided (gaps stay 0)
    {{1, 2, 3, 3}, {2, 3, 5, 5}, {1, 1}, {2, 1, 2, 3}},                           // padding crops 7x7 to 3x3
    {{1, 1, 3, 3}, {1, 2, 3, 3}, {1, 1}, {0, 0, 0, 0}, {0, 1}, {2, 2}},           // output_padding < dilation
    {{2, 16, 17, 15}, {16, 32, 4, 4}, {2, 2}, {1, 1, 1, 1}},                      // large enough to thread the GEMM
};

std::string describe(const Case& c) { return "x " + shape_str(c.x) + " w " + shape_str(c.w); }

::testing::AssertionResult matches(const Case& c, const Tensor& x, const Tensor& w, const Tensor& bias) {
  ConvTranspose2dOptions o{c.stride, c.padding, c.output_padding, c.dilation, c.groups};
  Tensor got = conv_transpose2d(x, w, bias, o);
  Tensor want = ref::conv_transpose2d(x, w, bias, c.stride, c.padding, c.output_padding, c.dilation, c.groups);
  Tensor mag = ref::conv_transpose2d(abs_values(x), abs_values(w), bias.defined() ? abs_values(bias) : Tensor(),
                                     c.stride, c.padding, c.output_padding, c.dilation, c.groups);
  return close_by_magnitude(got, want, mag, eps_for(got.dtype()));
}

TEST(ConvTranspose2d, MatchesReferenceOnEveryCaseAndDType) {
  for (DType t : testing::kFloatDTypes) {
    uint64_t seed = 1;
    for (const auto& c : kCases) {
      Tensor x = random_tensor(c.x, t, seed++), w = random_tensor(c.w, t, seed++);
      Tensor bias = random_tensor({c.w[1] * c.groups}, t, seed++);
      EXPECT_TRUE(matches(c, x, w, Tensor())) << dtype_name(t) << " " << describe(c);
      EXPECT_TRUE(matches(c, x, w, bias)) << dtype_name(t) << " bias, " << describe(c);
    }
  }
}

TEST(ConvTranspose2d, NonContiguousInputsAndPromotion) {
  for (const auto& c : {kCases[2], kCases[5], kCases[6]}) {
    Tensor x = random_tensor(c.x, DType::f32, 3), w = random_tensor(c.w, DType::f32, 4);
    Tensor b = random_tensor({c.w[1] * c.groups}, DType::f32, 5);
    EXPECT_TRUE(matches(c, testing::noncontiguous(x), testing::noncontiguous(w), testing::noncontiguous(b))) << describe(c);
    Tensor xt = random_tensor({c.x[0], c.x[1], c.x[3], c.x[2]}, DType::f32, 6).transpose(2, 3);
    EXPECT_TRUE(matches(c, xt, w, b)) << describe(c) << " transposed x";
  }
  Tensor x = random_tensor({1, 2, 5, 5}, DType::f16, 6), w = random_tensor({2, 3, 3, 3}, DType::f32, 7);
  EXPECT_EQ(conv_transpose2d(x, w).dtype(), DType::f32);
  EXPECT_EQ(conv_transpose2d(x, w.to(DType::f16)).dtype(), DType::f16);
  EXPECT_EQ(conv_transpose2d(x, w).shape(), Shape({1, 3, 7, 7}));
}

// <conv2d(x, w), y> = <x, conv_transpose2d(y, w)> for the same stride, padding, dilation, groups:
// conv_transpose2d is conv2d's adjoint in x.
TEST(ConvTranspose2d, IsTheAdjointOfConv2d) {
  struct Geometry {
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups;
  };
  for (const auto& g : std::vector<Geometry>{{{2, 4, 9, 8}, {6, 2, 3, 3}, {2, 1}, {1, 0, 2, 1}, {1, 2}, 2},
                                             {{1, 3, 7, 7}, {5, 3, 3, 2}, {1, 2}, {0, 1, 1, 0}, {2, 1}, 1}}) {
    Tensor x = random_tensor(g.x, DType::f64, 11), w = random_tensor(g.w, DType::f64, 12);
    Tensor cx = conv2d(x, w, {}, Conv2dOptions{g.stride, g.padding, g.dilation, g.groups});
    Tensor y = random_tensor(cx.shape(), DType::f64, 13);
    // Ho of the transposed conv equals x's H when output_padding recovers the rows conv2d dropped.
    std::vector<int64_t> op(2);
    for (int d = 0; d < 2; ++d) {
      const int64_t span = g.dilation[static_cast<size_t>(d)] * (g.w[static_cast<size_t>(d) + 2] - 1) + 1;
      op[static_cast<size_t>(d)] = g.x[static_cast<size_t>(d) + 2] + g.padding[static_cast<size_t>(d)] +
                                   g.padding[static_cast<size_t>(d) + 2] - span -
                                   g.stride[static_cast<size_t>(d)] * (cx.shape()[static_cast<size_t>(d) + 2] - 1);
    }
    Tensor ty = conv_transpose2d(y, w, {}, ConvTranspose2dOptions{g.stride, g.padding, op, g.dilation, g.groups});
    ASSERT_EQ(ty.shape(), x.shape());
    const double lhs = (cx * y).sum().item<double>(), rhs = (x * ty).sum().item<double>();
    EXPECT_NEAR(lhs, rhs, 1e-10 * std::max(1.0, std::abs(lhs)));
  }
}

// ONNX's ConvTranspose examples (onnx/backend/test/case/node/convtranspose.py).
TEST(ConvTranspose2d, OnnxExamples) {
  Tensor x = from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7, 8}, Shape{1, 1, 3, 3});
  Tensor w = ones({1, 2, 3, 3});
  // Default attributes: a 5x5 output per channel.
  Tensor y = conv_transpose2d(x, w);
  const std::vector<double> plain = {0,  1,  3,  3,  2,  3,  8,  15, 12, 7,  9,  21, 36,
                                     27, 15, 9,  20, 33, 24, 13, 6,  13, 21, 15, 8};
  std::vector<double> both(plain);
  both.insert(both.end(), plain.begin(), plain.end());
  EXPECT_TRUE(all_close(y, from_vector<double>(both, Shape{1, 2, 5, 5})));
  // strides [3, 2], pads [1, 2, 1, 2] -> [1, 2, 7, 3] (test_convtranspose_pads).
  ConvTranspose2dOptions o;
  o.stride = {3, 2};
  o.padding = {1, 2, 1, 2};
  Tensor yp = conv_transpose2d(x, w, {}, o);
  EXPECT_EQ(yp.shape(), Shape({1, 2, 7, 3}));
  const std::vector<double> pads = {1, 1, 3, 1, 1, 3, 7, 4, 9, 7, 4, 9, 7, 4, 9, 13, 7, 15, 13, 7, 15};
  std::vector<double> pads2(pads);
  pads2.insert(pads2.end(), pads.begin(), pads.end());
  EXPECT_TRUE(all_close(yp, from_vector<double>(pads2, Shape{1, 2, 7, 3})));
  // strides [3, 2], output_padding [1, 1] -> [1, 2, 10, 8] (test_convtranspose_kernel_shape's shape).
  ConvTranspose2dOptions q;
  q.stride = {3, 2};
  q.output_padding = {1, 1};
  Tensor yq = conv_transpose2d(x, w, {}, q);
  EXPECT_EQ(yq.shape(), Shape({1, 2, 10, 8}));
  EXPECT_TRUE(all_close(yq, ref::conv_transpose2d(x, w, {}, {3, 2}, {0, 0, 0, 0}, {1, 1}, {1, 1}, 1)));
  EXPECT_EQ(yq.select(2, 9).abs().sum().item<float>(), 0.f);  // the output_padding row gets bias only
}

TEST(ConvTranspose2d, RegistryAndErrors) {
  const OpDef& d = kiln::op("conv_transpose2d");
  ASSERT_TRUE(d.onnx_mapping().has_value());
  EXPECT_EQ(d.onnx_mapping()->op_type, "ConvTranspose");
  EXPECT_EQ(d.vjp_status().kind, RuleStatus::Kind::provided);
  Tensor x = ones({1, 4, 5, 5}), w = ones({4, 3, 3, 3});
  EXPECT_KILN_ERROR(conv_transpose2d(ones({4, 5, 5}), w), "conv_transpose2d", "x must be 4-D", "[4, 5, 5]");
  EXPECT_KILN_ERROR(conv_transpose2d(x, ones({4, 3, 3})), "conv_transpose2d", "w must be 4-D");
  EXPECT_KILN_ERROR(conv_transpose2d(x, ones({3, 3, 3, 3})), "conv_transpose2d", "channel mismatch", "[1, 4, 5, 5]",
                    "[3, 3, 3, 3]");
  ConvTranspose2dOptions g;
  g.groups = 3;
  EXPECT_KILN_ERROR(conv_transpose2d(x, w, {}, g), "conv_transpose2d", "groups = 3", "4 input channels");
  EXPECT_KILN_ERROR(conv_transpose2d(x, w, ones({4})), "conv_transpose2d", "bias must have shape [3]", "[4]");
  ConvTranspose2dOptions op;
  op.output_padding = {1, 0};
  EXPECT_KILN_ERROR(conv_transpose2d(x, w, {}, op), "conv_transpose2d", "output_padding 1", "height", "stride (1)");
  ConvTranspose2dOptions crop;
  crop.padding = {4, 0, 4, 0};
  EXPECT_KILN_ERROR(conv_transpose2d(x, w, {}, crop), "conv_transpose2d", "output height would be -1", "[1, 4, 5, 5]");
  ConvTranspose2dOptions bad;
  bad.stride = {0, 1};
  EXPECT_KILN_ERROR(conv_transpose2d(x, w, {}, bad), "conv_transpose2d", "stride", ">= 1");
  bad = {};
  bad.padding = {1, 1, 1};
  EXPECT_KILN_ERROR(conv_transpose2d(x, w, {}, bad), "conv_transpose2d", "padding must be");
}

}  // namespace
}  // namespace kiln
