// The vectorized f32 window kernels (kernels/cpu/window_f32.h) under every ISA the machine has:
// max / average pooling, global average pooling and depthwise convolution against the float64
// references over odd sizes (1, 7, 33 columns; 1, 3, 17 channels), every stride / padding /
// dilation / ceil_mode / count_include_pad combination that is valid, non-contiguous inputs, and
// NaN / infinity propagation. The f32 max pool backward is checked against f64 too.
//
// Tolerances: max pooling selects an input, so it must match exactly (NaN where the reference has
// NaN). Sums (average pooling, depthwise convolution) are checked against eps * (the same
// operation applied to |x|, |w|, |bias|) with eps = 1e-5, a few f32 roundings per tap.
#include <algorithm>
#include <cmath>
#include <atomic>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cpu/conv_depthwise.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/window_f32.h"
#include "support/testing.h"

namespace kiln {
namespace {

using kernels::cpu::Isa;
using kernels::cpu::IsaOverride;
using testing::abs_values;
using testing::all_close;
using testing::close_by_magnitude;
using testing::random_tensor;

class WindowIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!kernels::cpu::isa_supported(GetParam())) GTEST_SKIP() << kernels::cpu::isa_name(GetParam()) << " not supported";
    override_.emplace(GetParam());
  }
  std::optional<IsaOverride> override_;
};

constexpr double kEps = 1e-5;

// Inputs [N, C, H, W] covering 1-wide, odd and longer-than-two-vectors rows.
const std::vector<Shape> kShapes = {{1, 1, 1, 1}, {2, 3, 7, 7}, {1, 17, 7, 33}, {1, 3, 33, 1}, {1, 1, 12, 70}};

struct Window {
  std::vector<int64_t> kernel, stride, padding, dilation;
};

// Every window geometry to try (filtered per input by valid()).
std::vector<Window> windows(bool dilated) {
  std::vector<Window> out;
  for (auto k : std::vector<std::vector<int64_t>>{{1, 1}, {2, 2}, {3, 3}, {3, 2}, {1, 5}, {5, 5}})
    for (auto s : std::vector<std::vector<int64_t>>{{1, 1}, {2, 2}, {3, 3}, {1, 2}, {2, 3}})
      for (auto pad : std::vector<std::vector<int64_t>>{{0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 1, 0}, {2, 2, 1, 2}})
        for (auto d : dilated ? std::vector<std::vector<int64_t>>{{1, 1}, {2, 2}, {1, 3}} : std::vector<std::vector<int64_t>>{{1, 1}})
          out.push_back({k, s, pad, d});
  return out;
}

// Whether kiln's pooling accepts the geometry: padding below the (dilated) kernel extent, which
// fits the padded input.
bool valid_pool(const Shape& x, const Window& w) {
  for (int a = 0; a < 2; ++a) {
    const int64_t span = w.dilation[size_t(a)] * (w.kernel[size_t(a)] - 1) + 1;
    const int64_t pb = w.padding[size_t(a)], pe = w.padding[size_t(a) + 2];
    if (std::max(pb, pe) >= span || span > x[size_t(a) + 2] + pb + pe) return false;
  }
  return true;
}

TEST_P(WindowIsaTest, MaxPoolMatchesReferenceExactly) {
  uint64_t seed = 1, checked = 0;
  for (const Shape& xs : kShapes) {
    Tensor x = random_tensor(xs, DType::f32, seed++);
    for (const Window& w : windows(true)) {
      if (!valid_pool(xs, w)) continue;
      for (bool ceil : {false, true}) {
        Pool2dOptions o{w.kernel, w.stride, w.padding, w.dilation, ceil, false};
        Tensor want = ref::pool2d(true, x, w.kernel, w.stride, w.padding, w.dilation, ceil, false);
        ASSERT_TRUE(all_close(max_pool2d(x, o), want, {0, 0}))
            << shape_str(xs) << " k " << attr_value_str(w.kernel) << " s " << attr_value_str(w.stride) << " p "
            << attr_value_str(w.padding) << " d " << attr_value_str(w.dilation) << " ceil " << ceil;
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500u);
}

TEST_P(WindowIsaTest, AvgPoolMatchesReferenceByMagnitude) {
  uint64_t seed = 100, checked = 0;
  for (const Shape& xs : kShapes) {
    Tensor x = random_tensor(xs, DType::f32, seed++);
    Tensor ax = abs_values(x);
    for (const Window& w : windows(false)) {
      if (!valid_pool(xs, w)) continue;
      for (bool ceil : {false, true})
        for (bool cip : {false, true}) {
          Pool2dOptions o{w.kernel, w.stride, w.padding, w.dilation, ceil, cip};
          Tensor want = ref::pool2d(false, x, w.kernel, w.stride, w.padding, w.dilation, ceil, cip);
          Tensor mag = ref::pool2d(false, ax, w.kernel, w.stride, w.padding, w.dilation, ceil, cip);
          ASSERT_TRUE(close_by_magnitude(avg_pool2d(x, o), want, mag, kEps))
              << shape_str(xs) << " k " << attr_value_str(w.kernel) << " s " << attr_value_str(w.stride) << " p "
              << attr_value_str(w.padding) << " ceil " << ceil << " count_include_pad " << cip;
          ++checked;
        }
    }
  }
  EXPECT_GT(checked, 500u);
}

TEST_P(WindowIsaTest, PoolingNonContiguousInputs) {
  Tensor x = random_tensor({2, 3, 33, 33}, DType::f32, 7);
  Tensor xn = testing::noncontiguous(x);
  Pool2dOptions stem{{3, 3}, {2, 2}, {1, 1, 1, 1}};
  EXPECT_TRUE(all_close(max_pool2d(xn, stem), ref::pool2d(true, x, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false), {0, 0}));
  Tensor want = ref::pool2d(false, x, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, true);
  Tensor mag = ref::pool2d(false, abs_values(x), {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, true);
  stem.count_include_pad = true;
  EXPECT_TRUE(close_by_magnitude(avg_pool2d(xn, stem), want, mag, kEps));
  // A channels-last view (permuted strides) as well.
  Tensor cl = x.permute({0, 2, 3, 1}).contiguous().permute({0, 3, 1, 2});
  EXPECT_TRUE(all_close(max_pool2d(cl, Pool2dOptions{{2, 2}}), ref::pool2d(true, x, {2, 2}, {}, {0, 0, 0, 0}, {1, 1}, false, false), {0, 0}));
}

TEST_P(WindowIsaTest, MaxPoolPropagatesNaNAndInfinities) {
  // Sparse NaN and +-inf at positions that hit the first, middle and last tap of windows and the
  // vector tails (33 columns).
  Tensor x = random_tensor({1, 2, 9, 33}, DType::f32, 11);
  float* p = x.data<float>();
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (int64_t i : {0, 5, 40, 64, 100, 297 + 31, 330, 500}) p[i] = nan;
  for (int64_t i : {3, 70, 200, 400}) p[i] = inf;
  for (int64_t i : {7, 71, 201, 401, 590}) p[i] = -inf;
  for (const Window& w : windows(true)) {
    if (!valid_pool(x.shape(), w)) continue;
    Pool2dOptions o{w.kernel, w.stride, w.padding, w.dilation, false, false};
    ASSERT_TRUE(all_close(max_pool2d(x, o), ref::pool2d(true, x, w.kernel, w.stride, w.padding, w.dilation, false, false), {0, 0}))
        << "k " << attr_value_str(w.kernel) << " s " << attr_value_str(w.stride) << " p " << attr_value_str(w.padding)
        << " d " << attr_value_str(w.dilation);
  }
  // A NaN reaches the average too.
  Tensor avg = avg_pool2d(x, Pool2dOptions{{3, 3}, {1, 1}, {1, 1, 1, 1}});
  EXPECT_TRUE(std::isnan(avg.data<float>()[0]));
}

TEST_P(WindowIsaTest, GlobalAvgPoolMatchesReference) {
  uint64_t seed = 200;
  for (const Shape& xs : std::vector<Shape>{{1, 1, 1, 1}, {2, 17, 7, 7}, {3, 5, 33}, {1, 3, 1, 1000}, {2, 2, 3, 5, 7}}) {
    Tensor x = random_tensor(xs, DType::f32, seed++);
    EXPECT_TRUE(all_close(global_avg_pool(x), ref::global_avg_pool(x), {1e-6, 1e-6})) << shape_str(xs);
    EXPECT_TRUE(all_close(global_avg_pool(testing::noncontiguous(x)), ref::global_avg_pool(x), {1e-6, 1e-6}));
  }
}

// ---- depthwise convolution ------------------------------------------------------------------------

TEST_P(WindowIsaTest, DepthwiseConvMatchesReference) {
  uint64_t seed = 300, checked = 0;
  for (const Shape& xs : std::vector<Shape>{{1, 1, 1, 1}, {2, 3, 7, 7}, {1, 17, 7, 33}, {1, 3, 33, 9}}) {
    const int64_t c = xs[1];
    Tensor x = random_tensor(xs, DType::f32, seed++);
    for (int64_t mult : {1, 2, 3}) {
      for (const Window& win : windows(true)) {
        if (win.kernel == std::vector<int64_t>{1, 5}) continue;  // keeps the run short; 5x5 covers it
        std::vector<int64_t> k = win.kernel;
        // conv2d allows any padding as long as the dilated kernel fits the padded input.
        bool ok = true;
        for (int a = 0; a < 2; ++a)
          ok &= win.dilation[size_t(a)] * (k[size_t(a)] - 1) + 1 <= xs[size_t(a) + 2] + win.padding[size_t(a)] + win.padding[size_t(a) + 2];
        if (!ok) continue;
        Tensor w = random_tensor({c * mult, 1, k[0], k[1]}, DType::f32, seed++);
        Tensor b = (checked % 2) ? random_tensor({c * mult}, DType::f32, seed++) : Tensor();
        Conv2dOptions o{win.stride, win.padding, win.dilation, c};
        Tensor want = ref::conv2d(x, w, b, win.stride, win.padding, win.dilation, c);
        Tensor mag = ref::conv2d(abs_values(x), abs_values(w), b.defined() ? abs_values(b) : Tensor(), win.stride,
                                 win.padding, win.dilation, c);
        ASSERT_TRUE(close_by_magnitude(conv2d(x, w, b, o), want, mag, kEps))
            << shape_str(xs) << " multiplier " << mult << " k " << attr_value_str(k) << " s " << attr_value_str(win.stride)
            << " p " << attr_value_str(win.padding) << " d " << attr_value_str(win.dilation) << " bias " << b.defined();
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 500u);
}

// Note [A phased plane kept per thread]: a plane of the same geometry reuses the last one's copy
// without refilling its padding. Each geometry runs first on large positive inputs, then on
// negative ones, on one and two threads: a padding cell left holding an earlier input would win
// the max, or shift the average and the convolution.
TEST_P(WindowIsaTest, PaddingSurvivesAKeptPlane) {
  const int saved = get_num_threads();
  uint64_t seed = 900;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const Window& w : {Window{{3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}}, Window{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}},
                            Window{{3, 2}, {2, 1}, {2, 0, 1, 1}, {1, 2}}}) {
      const Shape xs{2, 5, 11, 13};
      Tensor big = random_tensor(xs, DType::f32, seed++) + 10.0, low = random_tensor(xs, DType::f32, seed++) - 10.0;
      Tensor wt = random_tensor({5, 1, w.kernel[0], w.kernel[1]}, DType::f32, seed++);
      for (bool ceil : {false, true}) {
        Pool2dOptions o{w.kernel, w.stride, w.padding, w.dilation, ceil, true};
        (void)max_pool2d(big, o);
        ASSERT_TRUE(all_close(max_pool2d(low, o), ref::pool2d(true, low, w.kernel, w.stride, w.padding, w.dilation, ceil, true),
                              {0, 0}))
            << "max, threads " << threads << " k " << attr_value_str(w.kernel) << " ceil " << ceil;
        const Pool2dOptions a{w.kernel, w.stride, w.padding, {1, 1}, ceil, true};  // undilated: avg pool has none
        (void)avg_pool2d(big, a);
        ASSERT_TRUE(all_close(avg_pool2d(low, a), ref::pool2d(false, low, w.kernel, w.stride, w.padding, {1, 1}, ceil, true),
                              {1e-5, 1e-5}))
            << "avg, threads " << threads << " k " << attr_value_str(w.kernel) << " ceil " << ceil;
      }
      Conv2dOptions co{w.stride, w.padding, w.dilation, 5};
      (void)conv2d(big, wt, Tensor(), co);
      Tensor want = ref::conv2d(low, wt, Tensor(), w.stride, w.padding, w.dilation, 5);
      Tensor mag = ref::conv2d(abs_values(low), abs_values(wt), Tensor(), w.stride, w.padding, w.dilation, 5);
      ASSERT_TRUE(close_by_magnitude(conv2d(low, wt, Tensor(), co), want, mag, kEps))
          << "depthwise, threads " << threads << " k " << attr_value_str(w.kernel);
    }
  }
  set_num_threads(saved);
}

TEST_P(WindowIsaTest, DepthwiseConvNonContiguousAndLarge) {
  // MobileNetV2-like layers (long rows, several vectors per row) with non-contiguous operands.
  for (int64_t s : {1, 2}) {
    Tensor x = random_tensor({2, 24, 40, 75}, DType::f32, 400 + uint64_t(s));
    Tensor w = random_tensor({24, 1, 3, 3}, DType::f32, 410 + uint64_t(s)), b = random_tensor({24}, DType::f32, 420);
    Conv2dOptions o{{s, s}, {1, 1, 1, 1}, {1, 1}, 24};
    Tensor want = ref::conv2d(x, w, b, {s, s}, {1, 1, 1, 1}, {1, 1}, 24);
    Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(b), {s, s}, {1, 1, 1, 1}, {1, 1}, 24);
    EXPECT_TRUE(close_by_magnitude(conv2d(testing::noncontiguous(x), testing::noncontiguous(w), testing::noncontiguous(b), o),
                                   want, mag, kEps))
        << "stride " << s;
  }
}

TEST_P(WindowIsaTest, DepthwiseConvInChannelBlocks) {
  // The shapes AVX-512 and AVX2 compute in blocks of 16 channels (Note [Depthwise in channel
  // blocks]; AVX2 only for outputs up to 14x14, and also with 5x5 windows): a last block of 8 or 1
  // channels, planes up to the 28x28 limit whose 16- or 8-pixel groups cross row ends (7x7, 14x14,
  // 27x29), long rows, strides 1 and 2, asymmetric padding, and a plane hook that must see each
  // channel once.
  struct Case { Shape x; int64_t stride; std::vector<int64_t> pad; int64_t r = 3; };
  uint64_t seed = 900;
  for (const Case& cs : {Case{{1, 40, 28, 28}, 1, {1, 1, 1, 1}}, Case{{2, 40, 27, 29}, 2, {1, 1, 1, 1}},
                         Case{{1, 48, 7, 7}, 1, {1, 1, 1, 1}}, Case{{2, 24, 14, 14}, 2, {0, 1, 1, 0}},
                         Case{{1, 16, 14, 14}, 1, {2, 0, 0, 2}}, Case{{1, 33, 9, 5}, 2, {1, 1, 1, 1}},
                         Case{{1, 17, 1, 700}, 1, {1, 1, 1, 1}}, Case{{1, 17, 2, 91}, 2, {1, 1, 1, 1}},
                         // 5x5 (MobileNetV3's): 7x7 and 14x14 outputs, stride 2, a ragged last block
                         Case{{1, 40, 7, 7}, 1, {2, 2, 2, 2}, 5}, Case{{2, 24, 14, 14}, 2, {2, 2, 2, 2}, 5},
                         Case{{1, 33, 14, 14}, 1, {2, 2, 2, 2}, 5}, Case{{1, 17, 9, 5}, 2, {1, 2, 2, 1}, 5},
                         Case{{1, 16, 28, 28}, 2, {2, 2, 2, 2}, 5}}) {
    const int64_t c = cs.x[1];
    Tensor x = random_tensor(cs.x, DType::f32, seed++), w = random_tensor({c, 1, cs.r, cs.r}, DType::f32, seed++);
    Tensor b = random_tensor({c}, DType::f32, seed++);
    Tensor want = ref::conv2d(x, w, b, {cs.stride, cs.stride}, cs.pad, {1, 1}, c);
    Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(b), {cs.stride, cs.stride}, cs.pad, {1, 1}, c);
    const Conv2dOptions o{{cs.stride, cs.stride}, cs.pad, {1, 1}, c};
    EXPECT_TRUE(close_by_magnitude(conv2d(x, w, b, o), want, mag, kEps))
        << shape_str(cs.x) << " " << cs.r << "x" << cs.r << " stride " << cs.stride;

    kernels::cpu::Conv2dParams p;
    p.n = cs.x[0], p.c = p.k = p.groups = c, p.h = cs.x[2], p.w = cs.x[3], p.r = p.s = cs.r;
    p.ho = want.shape()[2], p.wo = want.shape()[3];
    p.stride_h = p.stride_w = cs.stride, p.pad_top = cs.pad[0], p.pad_left = cs.pad[1];
    Tensor y = empty(want.shape());
    std::vector<std::atomic<int>> seen(static_cast<size_t>(p.n * c));
    kernels::cpu::conv2d_depthwise_f32(p, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(),
                                       [&](float* plane, int64_t img, int64_t oc) {
                                         EXPECT_EQ(plane, y.data<float>() + (img * c + oc) * p.ho * p.wo);
                                         ++seen[static_cast<size_t>(img * c + oc)];
                                       });
    for (const auto& s : seen) EXPECT_EQ(s.load(), 1) << shape_str(cs.x);
    EXPECT_TRUE(close_by_magnitude(y, want, mag, kEps))
        << shape_str(cs.x) << " " << cs.r << "x" << cs.r << " stride " << cs.stride << " with a hook";
  }
}

// hardswish as the depthwise kernel's activation (MobileNetV3's): in the store of the channel
// blocks (3x3 and 5x5 on small planes, a ragged last block), on each plane after the row kernels
// otherwise, against float64; one NaN in x reaches exactly the outputs whose windows hold it.
TEST_P(WindowIsaTest, DepthwiseHardswish) {
  struct Case { Shape x; int64_t r, stride; };
  uint64_t seed = 1000;
  for (const Case& cs : {Case{{1, 40, 7, 7}, 3, 1}, Case{{2, 24, 14, 14}, 5, 2}, Case{{1, 33, 14, 14}, 5, 1},
                         Case{{1, 20, 30, 31}, 3, 1}, Case{{1, 9, 28, 28}, 5, 1}}) {
    const int64_t c = cs.x[1], pad = cs.r / 2;
    Tensor x = random_tensor(cs.x, DType::f32, seed++, -4.0, 4.0);
    Tensor w = random_tensor({c, 1, cs.r, cs.r}, DType::f32, seed++), b = random_tensor({c}, DType::f32, seed++);
    kernels::cpu::Conv2dParams p;
    p.n = cs.x[0], p.c = p.k = p.groups = c, p.h = cs.x[2], p.w = cs.x[3], p.r = p.s = cs.r;
    p.ho = (p.h + 2 * pad - cs.r) / cs.stride + 1, p.wo = (p.w + 2 * pad - cs.r) / cs.stride + 1;
    p.stride_h = p.stride_w = cs.stride, p.pad_top = p.pad_left = pad;
    const std::vector<int64_t> pads{pad, pad, pad, pad};
    auto run = [&] {
      Tensor y = empty({p.n, c, p.ho, p.wo});
      kernels::cpu::conv2d_depthwise_f32(p, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), {},
                                         -std::numeric_limits<float>::infinity(),
                                         std::numeric_limits<float>::infinity(),
                                         kernels::cpu::DepthwiseAct::hardswish);
      Tensor conv = ref::conv2d(x, w, b, {cs.stride, cs.stride}, pads, {1, 1}, c);
      return std::make_pair(y, conv * minimum((conv + 3.0).relu(), full_like(conv, 6.0)) / 6.0);
    };
    // |hardswish(v)| <= |v| + 3 with slope at most 1.5: the convolution's error bound, doubled.
    auto [y, want] = run();
    Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(b), {cs.stride, cs.stride}, pads, {1, 1}, c);
    EXPECT_TRUE(close_by_magnitude(y, want, mag * 2.0 + 3.0, kEps))
        << shape_str(cs.x) << " " << cs.r << "x" << cs.r << " stride " << cs.stride;

    x.data<float>()[x.numel() / 3] = std::numeric_limits<float>::quiet_NaN();
    auto [y_nan, want_nan] = run();
    const float* got = y_nan.data<float>();
    const double* ref = want_nan.data<double>();
    int64_t nans = 0, nan_mismatch = 0;
    for (int64_t i = 0; i < y_nan.numel(); ++i) {
      nans += std::isnan(ref[i]);
      nan_mismatch += std::isnan(got[i]) != std::isnan(ref[i]);
    }
    EXPECT_GT(nans, 0) << shape_str(cs.x);
    EXPECT_EQ(nan_mismatch, 0) << shape_str(cs.x) << " " << cs.r << "x" << cs.r << " stride " << cs.stride;
  }
}

TEST_P(WindowIsaTest, DepthwiseConvPropagatesNaN) {
  Tensor x = random_tensor({1, 2, 5, 21}, DType::f32, 500);
  x.data<float>()[30] = std::numeric_limits<float>::quiet_NaN();
  Tensor w = random_tensor({2, 1, 3, 3}, DType::f32, 501);
  Conv2dOptions o{{1, 1}, {1, 1, 1, 1}, {1, 1}, 2};
  Tensor y = conv2d(x, w, Tensor(), o);
  const float* yp = y.data<float>();
  int nans = 0;
  for (int64_t i = 0; i < y.numel(); ++i) nans += std::isnan(yp[i]);
  EXPECT_EQ(nans, 9);  // the NaN's 3x3 neighbourhood in channel 0 only
}

TEST_P(WindowIsaTest, DepthwisePlaneHookSeesEveryPlaneOnce) {
  // The fused-epilogue hook: ReLU on each finished plane, every (image, channel) exactly once.
  const int64_t n = 2, c = 5, mult = 2;
  Tensor x = random_tensor({n, c, 9, 20}, DType::f32, 700), w = random_tensor({c * mult, 1, 3, 3}, DType::f32, 701);
  Tensor b = random_tensor({c * mult}, DType::f32, 702);
  kernels::cpu::Conv2dParams p;
  p.n = n, p.c = c, p.h = 9, p.w = 20, p.k = c * mult, p.r = 3, p.s = 3, p.ho = 5, p.wo = 10;
  p.stride_h = p.stride_w = 2, p.pad_top = p.pad_left = 1, p.groups = c;
  Tensor y = empty({n, c * mult, 5, 10});
  std::vector<std::atomic<int>> seen(static_cast<size_t>(n * c * mult));
  kernels::cpu::conv2d_depthwise_f32(p, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(),
                                     [&](float* plane, int64_t img, int64_t oc) {
                                       EXPECT_EQ(plane, y.data<float>() + (img * c * mult + oc) * 50);
                                       for (int i = 0; i < 50; ++i) plane[i] = std::max(plane[i], 0.0f);
                                       ++seen[static_cast<size_t>(img * c * mult + oc)];
                                     });
  for (const auto& s : seen) EXPECT_EQ(s.load(), 1);
  Tensor want = ref::conv2d(x, w, b, {2, 2}, {1, 1, 1, 1}, {1, 1}, c);
  double* wp = want.data<double>();
  for (int64_t i = 0; i < want.numel(); ++i) wp[i] = std::max(wp[i], 0.0);
  // |relu(a) - relu(b)| <= |a - b|: the convolution's bound holds after the hook.
  Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(b), {2, 2}, {1, 1, 1, 1}, {1, 1}, c);
  EXPECT_TRUE(close_by_magnitude(y, want, mag, kEps));
}

TEST_P(WindowIsaTest, DepthwiseClampIsReluOrRelu6AndKeepsNaN) {
  // The clamp in the kernel's store (fused_conv2d's relu / relu6 on depthwise layers), every ISA,
  // ragged row lengths (21 columns: a full vector and a masked tail), one NaN input.
  const int64_t c = 3;
  Tensor x = random_tensor({2, c, 7, 21}, DType::f32, 800, -4.0, 4.0);
  x.data<float>()[40] = std::numeric_limits<float>::quiet_NaN();
  Tensor w = random_tensor({c, 1, 3, 3}, DType::f32, 801), b = random_tensor({c}, DType::f32, 802);
  kernels::cpu::Conv2dParams p;
  p.n = 2, p.c = c, p.h = 7, p.w = 21, p.k = c, p.r = 3, p.s = 3, p.ho = 7, p.wo = 21;
  p.pad_top = p.pad_left = 1, p.groups = c;
  Tensor conv = ref::conv2d(x, w, b, {1, 1}, {1, 1, 1, 1}, {1, 1}, c);
  Tensor mag = ref::conv2d(abs_values(x), abs_values(w), abs_values(b), {1, 1}, {1, 1, 1, 1}, {1, 1}, c);
  for (float hi : {6.0f, std::numeric_limits<float>::infinity()}) {
    Tensor y = empty({2, c, 7, 21});
    kernels::cpu::conv2d_depthwise_f32(p, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), {},
                                       0.0f, hi);
    Tensor want = conv.clone(), m = mag.clone();
    double* wp = want.data<double>();
    float* yp = y.data<float>();
    int64_t clipped = 0, nans = 0;
    for (int64_t i = 0; i < want.numel(); ++i) {
      if (std::isnan(wp[i])) {  // the NaN's 3x3 neighbourhood: NaN out, not a clamped number
        nans += std::isnan(yp[i]);
        wp[i] = yp[i] = 0.0f, m.data<double>()[i] = 0.0;
        continue;
      }
      clipped += wp[i] > hi;
      wp[i] = std::min<double>(std::max(wp[i], 0.0), hi);
    }
    EXPECT_EQ(nans, 9) << "hi " << hi;
    if (hi == 6.0f) {
      EXPECT_GT(clipped, 0);  // the inputs reach past 6, so relu6 is exercised
    }
    // Clamping is 1-Lipschitz: the convolution's bound holds after it.
    EXPECT_TRUE(close_by_magnitude(y, want, m, kEps)) << "hi " << hi;
  }
}

// ---- max pool backward ----------------------------------------------------------------------------

// Note [3x3 windows read in place]: 3x3 stride-2 depthwise (planes past the channel blocks' 28 x 28)
// and max pooling read the plane itself. Widths around the vector boundaries (odd and even, the
// last output vector full or ragged, one and several groups of four vectors), every padding the
// kernel takes (0-2, asymmetric), relu6 in the store, and a NaN and infinities, against float64.
TEST_P(WindowIsaTest, Stride2WindowsReadThePlaneInPlace) {
  uint64_t seed = 3000;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (const Shape& xs : std::vector<Shape>{{1, 3, 30, 31}, {2, 2, 29, 64}, {1, 2, 33, 65}, {1, 2, 31, 97}, {1, 2, 40, 130}}) {
    Tensor x = random_tensor(xs, DType::f32, seed++, -4.0, 4.0);
    float* xp = x.data<float>();
    xp[0] = nan, xp[xs[3] + 1] = inf, xp[x.numel() / 2] = -inf, xp[x.numel() - 1] = nan;
    Tensor finite = random_tensor(xs, DType::f32, seed++, -4.0, 4.0);
    for (const std::vector<int64_t>& pad : std::vector<std::vector<int64_t>>{
             {0, 0, 0, 0}, {1, 1, 1, 1}, {0, 1, 1, 0}, {2, 2, 2, 2}, {1, 2, 0, 1}}) {
      for (bool ceil : {false, true}) {
        Pool2dOptions o{{3, 3}, {2, 2}, pad, {1, 1}, ceil, false};
        ASSERT_TRUE(all_close(max_pool2d(x, o), ref::pool2d(true, x, {3, 3}, {2, 2}, pad, {1, 1}, ceil, false), {0, 0}))
            << shape_str(xs) << " p " << attr_value_str(pad) << " ceil " << ceil;
      }
      const int64_t c = xs[1];
      Tensor w = random_tensor({c, 1, 3, 3}, DType::f32, seed++), b = random_tensor({c}, DType::f32, seed++, -3.0, 3.0);
      Conv2dOptions o{{2, 2}, pad, {1, 1}, c};
      Tensor want = ref::conv2d(finite, w, b, {2, 2}, pad, {1, 1}, c);
      Tensor mag = ref::conv2d(abs_values(finite), abs_values(w), abs_values(b), {2, 2}, pad, {1, 1}, c);
      ASSERT_TRUE(close_by_magnitude(conv2d(finite, w, b, o), want, mag, kEps)) << shape_str(xs) << " p " << attr_value_str(pad);
      // relu6 in the store, straight through the kernel; NaN stays NaN where a window reads it.
      kernels::cpu::Conv2dParams p;
      p.n = xs[0], p.c = p.k = p.groups = c, p.h = xs[2], p.w = xs[3], p.r = p.s = 3;
      p.stride_h = p.stride_w = 2, p.pad_top = pad[0], p.pad_left = pad[1];
      p.ho = (p.h + pad[0] + pad[2] - 3) / 2 + 1, p.wo = (p.w + pad[1] + pad[3] - 3) / 2 + 1;
      Tensor y = empty({p.n, c, p.ho, p.wo});
      kernels::cpu::conv2d_depthwise_f32(p, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), {},
                                         0.0f, 6.0f);
      Tensor conv = ref::conv2d(x, w, b, {2, 2}, pad, {1, 1}, c);
      const double* r = static_cast<const double*>(conv.data_ptr());
      const float* got = y.data<float>();
      for (int64_t i = 0; i < y.numel(); ++i) {
        if (std::isnan(r[i])) {
          ASSERT_TRUE(std::isnan(got[i])) << shape_str(xs) << " p " << attr_value_str(pad) << " at " << i;
          continue;
        }
        const double clamped = std::min(6.0, std::max(0.0, r[i]));
        ASSERT_NEAR(got[i], clamped, 1e-4 * (1.0 + std::abs(r[i]))) << shape_str(xs) << " p " << attr_value_str(pad) << " at " << i;
      }
    }
  }
}

// The direct convolution's padded row copy: zeros, the row, zeros, for every split of a row into
// padding and input around the 8- and 16-float vectors (and no write past a row's width).
TEST_P(WindowIsaTest, PadRowsCopiesBetweenZeros) {
  const kernels::cpu::WindowKernelsF32 k = kernels::cpu::window_kernels_f32(GetParam());
  ASSERT_NE(k.pad_rows, nullptr);
  std::vector<float> src(3 * 40);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<float>(i) + 0.5f;
  for (int64_t lo : {0, 1, 3, 16, 17})
    for (int64_t n : {0, 1, 7, 8, 15, 16, 17, 33, 40})
      for (int64_t right : {0, 1, 2, 9}) {
        const int64_t width = lo + n + right, rows = 3;
        std::vector<float> dst(static_cast<size_t>(rows * width + 1), -7.0f);
        k.pad_rows(src.data(), 40, dst.data(), rows, lo, n, width);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < width; ++j) {
            const float want = j >= lo && j < lo + n ? src[static_cast<size_t>(r * 40 + j - lo)] : 0.0f;
            ASSERT_EQ(dst[static_cast<size_t>(r * width + j)], want) << "lo " << lo << " n " << n << " right " << right
                                                                      << " row " << r << " col " << j;
          }
        ASSERT_EQ(dst.back(), -7.0f) << "wrote past the last row";
      }
}

TEST_P(WindowIsaTest, MaxPoolBackwardF32MatchesF64) {
  uint64_t seed = 600;
  for (const Window& w : {Window{{3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}}, Window{{2, 2}, {1, 1}, {0, 1, 1, 0}, {2, 1}},
                          Window{{3, 2}, {2, 3}, {1, 1, 0, 1}, {1, 1}}}) {
    Tensor x = random_tensor({2, 3, 7, 33}, DType::f32, seed++);
    Tensor g = random_tensor(max_pool2d(x, Pool2dOptions{w.kernel, w.stride, w.padding, w.dilation}).shape(), DType::f32, seed++);
    Attrs a{{"kernel", w.kernel}, {"stride", w.stride}, {"padding", w.padding}, {"dilation", w.dilation}, {"ceil_mode", false}};
    Tensor got = dispatch1(op("max_pool2d_backward"), {g, x}, a);
    Tensor want = dispatch1(op("max_pool2d_backward"), {g.to(DType::f64), x.to(DType::f64)}, a);
    EXPECT_EQ(got.dtype(), DType::f32);
    EXPECT_TRUE(close_by_magnitude(got, want, dispatch1(op("max_pool2d_backward"), {abs_values(g), x.to(DType::f64)}, a), kEps));
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, WindowIsaTest, ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(kernels::cpu::isa_name(i.param)); });

}  // namespace
}  // namespace kiln
