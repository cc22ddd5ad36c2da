// MaxPool2d / AvgPool2d modules with padding, non-square kernels and strides, dilation, ceil_mode
// and count_include_pad, against a float64 reference written here from PyTorch's documented
// semantics; gradients by gradcheck; bad configurations as errors.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

struct PoolCase {
  nn::Size2 kernel, stride, padding, dilation{1, 1};
  bool ceil_mode = false, count_include_pad = true;
};

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t span = d * (k - 1) + 1, num = in + 2 * p - span;
  int64_t out = (ceil_mode ? (num + s - 1) / s : num / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;  // the last window must start inside input or left padding
  return out;
}

// Reference pooling in double over a contiguous [N, C, H, W] copy.
Tensor reference_pool(const Tensor& x, const PoolCase& c, bool is_max) {
  Tensor xc = x.to(DType::f64).contiguous();
  const int64_t n = x.size(0), ch = x.size(1), h = x.size(2), w = x.size(3);
  const int64_t ho = out_size(h, c.kernel[0], c.stride[0], c.padding[0], c.dilation[0], c.ceil_mode);
  const int64_t wo = out_size(w, c.kernel[1], c.stride[1], c.padding[1], c.dilation[1], c.ceil_mode);
  Tensor out = empty({n, ch, ho, wo}, DType::f64);
  const double* xp = xc.data<double>();
  double* op = out.data<double>();
  for (int64_t plane = 0; plane < n * ch; ++plane)
    for (int64_t oy = 0; oy < ho; ++oy)
      for (int64_t ox = 0; ox < wo; ++ox) {
        const int64_t y0 = oy * c.stride[0] - c.padding[0], x0 = ox * c.stride[1] - c.padding[1];
        double acc = is_max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t i = 0; i < c.kernel[0]; ++i)
          for (int64_t j = 0; j < c.kernel[1]; ++j) {
            const int64_t iy = y0 + i * c.dilation[0], ix = x0 + j * c.dilation[1];
            if (iy < 0 || iy >= h || ix < 0 || ix >= w) continue;
            const double v = xp[(plane * h + iy) * w + ix];
            acc = is_max ? std::max(acc, v) : acc + v;
          }
        if (!is_max) {
          // PyTorch's divisor: the window clipped to the padded input (include_pad) or to the input.
          const int64_t y1 = std::min(y0 + c.kernel[0], h + c.padding[0]);
          const int64_t x1 = std::min(x0 + c.kernel[1], w + c.padding[1]);
          int64_t div = (y1 - y0) * (x1 - x0);
          if (!c.count_include_pad)
            div = (std::min(y1, h) - std::max(y0, int64_t{0})) * (std::min(x1, w) - std::max(x0, int64_t{0}));
          acc /= static_cast<double>(div);
        }
        op[(plane * ho + oy) * wo + ox] = acc;
      }
  return out;
}

const std::vector<PoolCase>& cases() {
  static const std::vector<PoolCase> c = {
      {{3, 3}, {2, 2}, {1, 1}},
      {{2, 3}, {1, 2}, {1, 1}},
      {{3, 2}, {2, 1}, {1, 0}},
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {{2, 2}, {2, 2}, {1, 1}, {1, 1}, true},
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, false, false},
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true, false},
      {{4, 2}, {3, 1}, {2, 1}, {1, 1}, true, true},
      {{3, 3}, {2, 3}, {1, 1}, {2, 1}},  // dilation (max only)
  };
  return c;
}

TEST(NNPool, MaxPool2dPaddingNonSquareAgainstReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = random_tensor({2, 3, 9, 8}, dt, 11);
    for (const PoolCase& c : cases()) {
      nn::MaxPool2d m(c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
      Tensor ref = reference_pool(x, c, true);
      EXPECT_TRUE(all_close(m(x).to(DType::f64), ref, {1e-7, 1e-7}))
          << "kernel " << c.kernel[0] << "x" << c.kernel[1] << " stride " << c.stride[0] << "x" << c.stride[1]
          << " padding " << c.padding[0] << "x" << c.padding[1] << " ceil " << c.ceil_mode;
      EXPECT_TRUE(all_close(m(testing::noncontiguous(x)).to(DType::f64), ref, {1e-7, 1e-7}));
    }
  }
}

TEST(NNPool, AvgPool2dPaddingNonSquareAgainstReference) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor x = random_tensor({2, 3, 9, 8}, dt, 12);
    for (const PoolCase& c : cases()) {
      if (c.dilation != nn::Size2{1, 1}) continue;
      nn::AvgPool2d m(c.kernel, c.stride, c.padding, c.ceil_mode, c.count_include_pad);
      Tensor ref = reference_pool(x, c, false);
      EXPECT_TRUE(all_close(m(x).to(DType::f64), ref, {1e-6, 1e-6}))
          << "kernel " << c.kernel[0] << "x" << c.kernel[1] << " stride " << c.stride[0] << "x" << c.stride[1]
          << " padding " << c.padding[0] << "x" << c.padding[1] << " ceil " << c.ceil_mode << " include_pad "
          << c.count_include_pad;
      EXPECT_TRUE(all_close(m(testing::noncontiguous(x)).to(DType::f64), ref, {1e-6, 1e-6}));
    }
  }
}

TEST(NNPool, IntConstructorsAndDefaults) {
  nn::MaxPool2d m(3, 0, 1);
  EXPECT_EQ(m.kernel, (nn::Size2{3, 3}));
  EXPECT_EQ(m.stride, (nn::Size2{3, 3}));  // stride 0: the kernel
  EXPECT_EQ(m.padding, (nn::Size2{1, 1}));
  nn::AvgPool2d a(2);
  EXPECT_TRUE(a.count_include_pad);  // PyTorch's default
  EXPECT_EQ(a.stride, (nn::Size2{2, 2}));
  Tensor x = random_tensor({1, 2, 7, 7}, DType::f64, 13);
  PoolCase c{{3, 3}, {2, 2}, {1, 1}};
  EXPECT_TRUE(all_close(nn::MaxPool2d(3, 2, 1)(x), reference_pool(x, c, true), {1e-12, 1e-12}));
  EXPECT_TRUE(all_close(nn::AvgPool2d(3, 2, 1)(x), reference_pool(x, c, false), {1e-12, 1e-12}));
}

TEST(NNPool, GradientsWithPadding) {
  Tensor x = random_tensor({1, 2, 6, 5}, DType::f64, 14).requires_grad_();
  nn::MaxPool2d mp({3, 2}, {2, 1}, {1, 1});
  nn::AvgPool2d ap({3, 2}, {2, 2}, {1, 1}, true, true);
  nn::AvgPool2d ap_ex({3, 3}, {2, 2}, {1, 1}, false, false);
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return mp(in[0]); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return ap(in[0]); }, {x}));
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return ap_ex(in[0]); }, {x}));
}

TEST(NNPool, BadConfigurationsAreErrors) {
  EXPECT_KILN_ERROR(nn::MaxPool2d(3, 1, 2), "at most half the kernel");
  EXPECT_KILN_ERROR(nn::AvgPool2d({2, 4}, {1, 1}, {0, 3}), "at most half the kernel");
  EXPECT_KILN_ERROR(nn::MaxPool2d(0), "kernel and dilation must be positive");
  EXPECT_KILN_ERROR(nn::AvgPool2d(2, -1), "stride and padding non-negative");
  EXPECT_KILN_ERROR(nn::MaxPool2d(2, 2, 0, 0), "kernel and dilation must be positive");
  EXPECT_KILN_ERROR(nn::MaxPool2d(2)(random_tensor({3, 4, 4}, DType::f32, 1)), "expected input [N, C, H, W]");
  EXPECT_KILN_ERROR(nn::AvgPool2d(5)(random_tensor({1, 1, 4, 4}, DType::f32, 1)), "larger than the padded input");
}

}  // namespace
}  // namespace kiln
