// conv2d, pooling, global average pooling and LRN against the float64 references: strides,
// asymmetric padding, dilation, groups and depthwise, bias, ceil_mode and count_include_pad, odd
// sizes, non-contiguous inputs, every floating dtype, and error cases.
//
// Tolerances: conv2d is a sum of products, so each element is checked against eps * sum |x||w|
// (+ |bias|) with eps = 1e-5 (f32), 1e-13 (f64), 2^-10 (f16) and 2^-7 (bf16), the 16-bit values being
// the final rounding of an f32 result. Pooling, global_avg_pool and LRN use tol_for(dtype) (f16 and
// bf16 round the output once; global_avg_pool accumulates in double).
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::abs_values;
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

struct ConvCase {
  Shape x, w;
  std::vector<int64_t> stride{1, 1}, padding{0, 0, 0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

const std::vector<ConvCase> kConvCases = {
    {{2, 3, 7, 9}, {4, 3, 3, 3}},
    {{1, 1, 1, 1}, {1, 1, 1, 1}},                                           // everything size 1
    {{2, 3, 9, 11}, {5, 3, 3, 3}, {2, 2}, {1, 1, 1, 1}},                    // stride + padding
    {{1, 2, 7, 8}, {3, 2, 3, 2}, {1, 2}, {0, 2, 1, 0}},                     // asymmetric padding and stride
    {{1, 3, 11, 9}, {2, 3, 3, 3}, {1, 1}, {2, 1, 2, 1}, {2, 3}},            // dilation
    {{1, 4, 8, 7}, {6, 2, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 2},          // groups
    {{2, 6, 9, 9}, {6, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 6},          // depthwise
    {{1, 6, 7, 7}, {12, 1, 3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 6},         // depthwise, multiplier 2
    {{2, 5, 7, 7}, {3, 5, 1, 1}},                                           // 1x1: no im2col
    {{1, 5, 7, 7}, {3, 5, 1, 1}, {2, 2}},                                   // 1x1 strided
    {{1, 2, 5, 5}, {3, 2, 5, 5}},                                           // kernel covers the input
    {{1, 1, 3, 3}, {1, 1, 5, 5}, {1, 1}, {1, 1, 1, 1}},                     // kernel fits only padded
    {{1, 16, 33, 33}, {32, 16, 3, 3}, {1, 1}, {1, 1, 1, 1}},                // large enough to thread the GEMM
};

::testing::AssertionResult conv_matches(const ConvCase& c, const Tensor& x, const Tensor& w, const Tensor& bias) {
  Conv2dOptions o{c.stride, c.padding, c.dilation, c.groups};
  Tensor got = conv2d(x, w, bias, o);
  Tensor want = ref::conv2d(x, w, bias, c.stride, c.padding, c.dilation, c.groups);
  Tensor mag = ref::conv2d(abs_values(x), abs_values(w), bias.defined() ? abs_values(bias) : Tensor(), c.stride,
                           c.padding, c.dilation, c.groups);
  return close_by_magnitude(got, want, mag, eps_for(got.dtype()));
}

TEST(Conv2d, MatchesReferenceOnEveryCaseAndDType) {
  for (DType t : testing::kFloatDTypes) {
    uint64_t seed = 1;
    for (const auto& c : kConvCases) {
      Tensor x = random_tensor(c.x, t, seed++), w = random_tensor(c.w, t, seed++);
      Tensor bias = random_tensor({c.w[0]}, t, seed++);
      EXPECT_TRUE(conv_matches(c, x, w, Tensor())) << dtype_name(t) << " x " << shape_str(c.x) << " w " << shape_str(c.w);
      EXPECT_TRUE(conv_matches(c, x, w, bias)) << dtype_name(t) << " bias, x " << shape_str(c.x) << " w " << shape_str(c.w);
    }
  }
}

TEST(Conv2d, NonContiguousInputsAndPromotion) {
  for (const auto& c : {kConvCases[2], kConvCases[6], kConvCases[8]}) {
    Tensor x = random_tensor(c.x, DType::f32, 3), w = random_tensor(c.w, DType::f32, 4), b = random_tensor({c.w[0]}, DType::f32, 5);
    EXPECT_TRUE(conv_matches(c, testing::noncontiguous(x), testing::noncontiguous(w), testing::noncontiguous(b)))
        << shape_str(c.x);
  }
  Tensor x = random_tensor({1, 2, 5, 5}, DType::f16, 6), w = random_tensor({3, 2, 3, 3}, DType::f32, 7);
  EXPECT_EQ(conv2d(x, w).dtype(), DType::f32);
  EXPECT_EQ(conv2d(x, w.to(DType::f16)).dtype(), DType::f16);
  EXPECT_EQ(conv2d(x, w).shape(), Shape({1, 3, 3, 3}));
}

TEST(Conv2d, HandComputedValue) {
  // 3x3 input 1..9, 2x2 kernel of ones, bias 0.5: window sums 12, 16, 24, 28.
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8, 9}, Shape{1, 1, 3, 3});
  Tensor y = conv2d(x, ones({1, 1, 2, 2}), full({1}, 0.5f));
  EXPECT_TRUE(all_close(y, from_vector<double>({12.5, 16.5, 24.5, 28.5}, Shape{1, 1, 2, 2})));
}

TEST(Conv2d, ErrorsNameOpArgumentsAndShapes) {
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}), ones({4, 2, 3, 3})), "conv2d", "channel mismatch", "[1, 3, 5, 5]",
                    "[4, 2, 3, 3]");
  Conv2dOptions g3;
  g3.groups = 3;
  EXPECT_KILN_ERROR(conv2d(ones({1, 4, 5, 5}), ones({6, 1, 3, 3}), Tensor(), g3), "conv2d", "groups = 3",
                    "4 input channels", "[1, 4, 5, 5]");
  Conv2dOptions g2;
  g2.groups = 2;
  EXPECT_KILN_ERROR(conv2d(ones({1, 4, 5, 5}), ones({3, 2, 3, 3}), Tensor(), g2), "conv2d", "groups = 2",
                    "3 output channels", "[3, 2, 3, 3]");
  EXPECT_KILN_ERROR(conv2d(ones({1, 1, 3, 3}), ones({1, 1, 5, 5})), "conv2d", "larger than the padded input",
                    "[1, 1, 3, 3]");
  Conv2dOptions dil;
  dil.dilation = {3, 1};
  EXPECT_KILN_ERROR(conv2d(ones({1, 1, 6, 6}), ones({1, 1, 3, 3}), Tensor(), dil), "conv2d", "height", "dilation 3");
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5}), ones({4, 3, 3, 3})), "conv2d", "x must be 4-D", "[1, 3, 5]");
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}), ones({4, 3, 3})), "conv2d", "w must be 4-D", "[4, 3, 3]");
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}), ones({4, 3, 3, 3}), ones({3})), "conv2d", "bias", "[4]", "[3]");
  Conv2dOptions s0;
  s0.stride = {0, 1};
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}), ones({4, 3, 3, 3}), Tensor(), s0), "conv2d", "stride", ">= 1");
  Conv2dOptions p3;
  p3.padding = {1, 1, 1};
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}), ones({4, 3, 3, 3}), Tensor(), p3), "conv2d", "padding");
  EXPECT_KILN_ERROR(conv2d(ones({1, 3, 5, 5}, DType::i32), ones({4, 3, 3, 3}, DType::i32)), "conv2d",
                    "no kernel for dtype i32");
}

// ---- pooling ---------------------------------------------------------------------------------------

struct PoolCase {
  Shape x;
  std::vector<int64_t> kernel, stride, padding{0, 0, 0, 0}, dilation{1, 1};
  bool ceil_mode = false, count_include_pad = false;
};

const std::vector<PoolCase> kPoolCases = {
    {{2, 3, 8, 9}, {2, 2}, {}},                                          // stride = kernel
    {{1, 1, 1, 1}, {1, 1}, {}},
    {{2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}},
    {{2, 3, 9, 11}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, true},   // count_include_pad
    {{1, 2, 8, 8}, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true},          // ceil adds a partial window
    {{1, 2, 8, 8}, {3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true, true},
    {{1, 2, 5, 5}, {2, 2}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true},          // ceil window in end padding dropped
    {{1, 2, 6, 7}, {3, 2}, {2, 3}, {1, 0, 2, 1}, {1, 1}, true, true},    // asymmetric, ceil, include pad
    {{1, 3, 33, 7}, {3, 3}, {1, 1}, {1, 1, 1, 1}},
    {{2, 2, 7, 7}, {3, 3}, {1, 1}, {0, 0, 0, 0}, {2, 2}},                // dilation (max only)
    {{1, 1, 7, 9}, {2, 3}, {3, 2}, {1, 2, 1, 2}, {2, 1}, true},          // dilation + ceil + padding
};

TEST(Pool2d, MatchesReferenceOnEveryCaseAndDType) {
  for (DType t : testing::kFloatDTypes) {
    uint64_t seed = 10;
    for (const auto& c : kPoolCases) {
      Tensor x = random_tensor(c.x, t, seed++);
      Pool2dOptions o{c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode, c.count_include_pad};
      Tensor want_max = ref::pool2d(true, x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode, false);
      EXPECT_TRUE(all_close(max_pool2d(x, o), want_max)) << dtype_name(t) << " max " << shape_str(c.x);
      EXPECT_TRUE(all_close(max_pool2d(testing::noncontiguous(x), o), want_max)) << "noncontiguous";
      if (c.dilation == std::vector<int64_t>{1, 1}) {
        Tensor want_avg = ref::pool2d(false, x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode, c.count_include_pad);
        EXPECT_TRUE(all_close(avg_pool2d(x, o), want_avg)) << dtype_name(t) << " avg " << shape_str(c.x);
        EXPECT_TRUE(all_close(avg_pool2d(testing::noncontiguous(x), o), want_avg)) << "noncontiguous";
      }
    }
  }
}

TEST(Pool2d, OutputSizesAndHandValues) {
  // 6x6 input 0..35, kernel 3, stride 2, ceil_mode: windows start at 0, 2, 4 (the last one partial).
  Tensor x = arange(36, DType::f32).reshape({1, 1, 6, 6});
  Pool2dOptions o{{3, 3}, {2, 2}, {0, 0, 0, 0}, {1, 1}, true, false};
  EXPECT_TRUE(all_close(max_pool2d(x, o), from_vector<double>({14, 16, 17, 26, 28, 29, 32, 34, 35}, Shape{1, 1, 3, 3})));
  Tensor avg = avg_pool2d(x, o);
  EXPECT_DOUBLE_EQ(avg.data<float>()[8], 31.5f);  // mean of 28, 29, 34, 35
  o.count_include_pad = true;                     // no padding: the overhang is not counted either
  EXPECT_DOUBLE_EQ(avg_pool2d(x, o).data<float>()[8], 31.5f);
  o.ceil_mode = false;
  EXPECT_EQ(max_pool2d(x, o).shape(), Shape({1, 1, 2, 2}));
  // A window that would start in the end padding is dropped: 5 + 2 padding, kernel 2, stride 2.
  Pool2dOptions drop{{2, 2}, {2, 2}, {1, 1, 1, 1}, {1, 1}, true, false};
  EXPECT_EQ(max_pool2d(ones({1, 1, 5, 5}), drop).shape(), Shape({1, 1, 3, 3}));
  // count_include_pad: a 3x3 window at a corner of a padded 3x3 input holds 4 ones of 9 slots.
  Pool2dOptions pad{{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, false, true};
  EXPECT_NEAR(avg_pool2d(ones({1, 1, 3, 3}), pad).data<float>()[0], 4.0 / 9.0, 1e-6);
  pad.count_include_pad = false;
  EXPECT_NEAR(avg_pool2d(ones({1, 1, 3, 3}), pad).data<float>()[0], 1.0, 1e-6);
}

TEST(Pool2d, MaxPropagatesNaN) {
  Tensor x = from_vector<float>({1, NAN, 3, 4}, Shape{1, 1, 2, 2});
  Tensor y = max_pool2d(x, Pool2dOptions{{2, 2}});
  EXPECT_TRUE(std::isnan(y.data<float>()[0]));
}

TEST(Pool2d, ErrorsNameOpAndShapes) {
  Pool2dOptions big{{5, 5}};
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 3, 3}), big), "max_pool2d", "larger than the padded input", "[1, 1, 3, 3]");
  EXPECT_KILN_ERROR(avg_pool2d(ones({1, 1, 3, 3}), big), "avg_pool2d", "larger than the padded input");
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 3, 3}), Pool2dOptions{{2, 2}}), "max_pool2d", "4-D", "[1, 3, 3]");
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 4, 4}, DType::i32), Pool2dOptions{{2, 2}}), "max_pool2d", "floating", "i32");
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 4, 4}), Pool2dOptions{{2}}), "max_pool2d", "kernel", "2 values");
  Pool2dOptions wide_pad{{2, 2}, {}, {2, 2, 2, 2}};
  EXPECT_KILN_ERROR(max_pool2d(ones({1, 1, 4, 4}), wide_pad), "max_pool2d", "padding", "smaller than the kernel");
  Pool2dOptions dil{{2, 2}, {}, {0, 0, 0, 0}, {2, 2}};
  EXPECT_KILN_ERROR(avg_pool2d(ones({1, 1, 4, 4}), dil), "avg_pool2d", "dilation");
}

// ---- global_avg_pool and lrn ---------------------------------------------------------------------------

TEST(GlobalAvgPool, MatchesReferenceOnRanksAndDTypes) {
  for (DType t : testing::kFloatDTypes) {
    for (const Shape& s : {Shape{2, 3, 7, 9}, Shape{2, 3, 33}, Shape{1, 2, 3, 4, 5}, Shape{1, 1, 1000}, Shape{3, 2, 1, 1}}) {
      Tensor x = random_tensor(s, t, 21);
      Tensor y = global_avg_pool(x);
      Shape want_shape(s.size(), 1);
      want_shape[0] = s[0], want_shape[1] = s[1];
      EXPECT_EQ(y.shape(), want_shape);
      EXPECT_TRUE(all_close(y, ref::global_avg_pool(x), {testing::tol_for(t).rtol, testing::tol_for(t).rtol}))
          << dtype_name(t) << " " << shape_str(s);
      EXPECT_TRUE(all_close(global_avg_pool(testing::noncontiguous(x)), ref::global_avg_pool(x),
                            {testing::tol_for(t).rtol, testing::tol_for(t).rtol}));
    }
  }
  EXPECT_KILN_ERROR(global_avg_pool(ones({2, 3})), "global_avg_pool", "rank >= 3", "[2, 3]");
  EXPECT_KILN_ERROR(global_avg_pool(ones({2, 3, 4}, DType::i64)), "global_avg_pool", "floating", "i64");
}

TEST(Lrn, MatchesReferenceOnSizesAndDTypes) {
  for (DType t : testing::kFloatDTypes) {
    for (int64_t size : {1, 2, 3, 4, 5, 9}) {
      for (const Shape& s : {Shape{2, 7, 5, 3}, Shape{1, 7, 33}, Shape{1, 1, 2, 2}}) {
        Tensor x = random_tensor(s, t, 31);
        Tensor want = ref::lrn(x, size, 0.3, 0.75, 2.0);
        EXPECT_TRUE(all_close(lrn(x, size, 0.3, 0.75, 2.0), want)) << dtype_name(t) << " size " << size;
        EXPECT_TRUE(all_close(lrn(testing::noncontiguous(x), size, 0.3, 0.75, 2.0), want)) << "noncontiguous";
      }
    }
  }
}

TEST(Lrn, HandComputedValueAndErrors) {
  // Channels 1, 2, 3 at one position, size 2: the window of channel c is [c, c + 1].
  Tensor x = from_vector<double>({1, 2, 3}, Shape{1, 3, 1});
  Tensor y = lrn(x, 2, 1.0, 1.0, 1.0);
  EXPECT_TRUE(all_close(y, from_vector<double>({1 / (1 + 5 / 2.0), 2 / (1 + 13 / 2.0), 3 / (1 + 9 / 2.0)}, Shape{1, 3, 1})));
  EXPECT_KILN_ERROR(lrn(ones({2, 3}), 3), "lrn", "rank >= 3", "[2, 3]");
  EXPECT_KILN_ERROR(lrn(ones({1, 3, 2}), 0), "lrn", "size", ">= 1");
}

}  // namespace
}  // namespace kiln
