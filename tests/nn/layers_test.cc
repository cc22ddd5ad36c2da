// BatchNorm2d (training and eval, running statistics, gradients), LayerNorm, Dropout, adaptive
// pooling, Embedding and the LR schedules, against float64 references computed here.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

TEST(NNLayers, BatchNorm2dTrainEvalRunningStats) {
  nn::BatchNorm2d bn(3, 1e-5, 0.1);
  bn.to(DType::f64);
  Tensor x = random_tensor({4, 3, 5, 2}, DType::f64, 1) * 3.0 + 1.0;
  Tensor y = bn(x);
  // reference per channel
  Tensor xc = x.contiguous();
  const double* xp = xc.data<double>();
  const int64_t n = 4 * 5 * 2;
  Tensor ref = empty_like(xc);
  double* rp = ref.data<double>();
  std::vector<double> means(3), vars(3);
  for (int64_t c = 0; c < 3; ++c) {
    double m = 0, v = 0;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 10; ++k) m += xp[(b * 3 + c) * 10 + k] / n;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 10; ++k) v += std::pow(xp[(b * 3 + c) * 10 + k] - m, 2) / n;
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t k = 0; k < 10; ++k) rp[(b * 3 + c) * 10 + k] = (xp[(b * 3 + c) * 10 + k] - m) / std::sqrt(v + 1e-5);
    means[static_cast<size_t>(c)] = m;
    vars[static_cast<size_t>(c)] = v;
  }
  EXPECT_TRUE(all_close(y, ref, {1e-10, 1e-10}));
  auto bufs = bn.named_buffers();
  ASSERT_EQ(bufs[0].first, "running_mean");
  for (int64_t c = 0; c < 3; ++c) {
    EXPECT_NEAR(bufs[0].second.data<double>()[c], 0.1 * means[static_cast<size_t>(c)], 1e-12);
    EXPECT_NEAR(bufs[1].second.data<double>()[c], 0.9 + 0.1 * vars[static_cast<size_t>(c)] * n / (n - 1), 1e-12);
  }
  bn.eval();
  Tensor ye = bn(x);
  for (int64_t c = 0; c < 3; ++c) {
    double m = bufs[0].second.data<double>()[c], v = bufs[1].second.data<double>()[c];
    EXPECT_NEAR(ye.contiguous().data<double>()[c * 10 + 3], (xp[c * 10 + 3] - m) / std::sqrt(v + 1e-5), 1e-10);
  }
  bn.train();
  Tensor xs = random_tensor({2, 3, 2, 2}, DType::f64, 2);
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return (bn(in[0]) * in[0]).sum(); }, {xs}));
  EXPECT_KILN_ERROR(bn(random_tensor({2, 4, 2, 2}, DType::f64, 3)), "BatchNorm2d(3)", "[N, 3, H, W]");
}

TEST(NNLayers, LayerNormMatchesReference) {
  nn::LayerNorm ln({4});
  Tensor x = random_tensor({3, 4}, DType::f32, 4);
  Tensor y = ln(x);
  for (int64_t r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int64_t k = 0; k < 4; ++k) m += x.data<float>()[r * 4 + k] / 4.0;
    for (int64_t k = 0; k < 4; ++k) v += std::pow(x.data<float>()[r * 4 + k] - m, 2) / 4.0;
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_NEAR(y.contiguous().data<float>()[r * 4 + k], (x.data<float>()[r * 4 + k] - m) / std::sqrt(v + 1e-5), 1e-5);
  }
  nn::LayerNorm l2({2, 3});
  l2.to(DType::f64);
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return l2(in[0]) * in[0]; },
                                  {random_tensor({2, 2, 3}, DType::f64, 5)}));
  EXPECT_KILN_ERROR(ln(random_tensor({3, 5}, DType::f32, 6)), "LayerNorm", "does not end with [4]");
}

TEST(NNLayers, DropoutSeededScaledAndEvalIdentity) {
  nn::Dropout a(0.25, 9), b(0.25, 9);
  Tensor x = ones({1000});
  Tensor ya = a(x), yb = b(x);
  EXPECT_TRUE(all_close(ya, yb, {0, 0}));
  int64_t zeros_n = 0;
  for (int64_t i = 0; i < 1000; ++i) {
    float v = ya.data<float>()[i];
    EXPECT_TRUE(v == 0.0f || std::fabs(v - 1.0f / 0.75f) < 1e-6);
    zeros_n += v == 0.0f;
  }
  EXPECT_GT(zeros_n, 200);
  EXPECT_LT(zeros_n, 300);
  a.eval();
  EXPECT_TRUE(a(x).is_same(x));
  EXPECT_KILN_ERROR(nn::Dropout(1.0), "Dropout", "[0, 1)");
}

TEST(NNLayers, AdaptiveAvgPoolAndEmbedding) {
  Tensor x = random_tensor({2, 3, 4, 6}, DType::f32, 7);
  EXPECT_TRUE(all_close(nn::AdaptiveAvgPool2d(1)(x), x.mean({2, 3}, true), {1e-6, 1e-6}));
  Tensor y = nn::AdaptiveAvgPool2d(2)(x);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 2, 2}));
  EXPECT_NEAR(y.select(0, 1).select(0, 2).select(0, 1).select(0, 0).item<double>(),
              x.select(0, 1).select(0, 2).slice(0, 2, 4).slice(1, 0, 3).mean().item<double>(), 1e-6);
  EXPECT_KILN_ERROR(nn::AdaptiveAvgPool2d(4)(x), "multiples");

  Generator g(3);
  nn::Embedding emb(5, 3, &g);
  Tensor idx = zeros({2, 2}, DType::i64);
  int64_t v[4] = {4, 0, 2, 4};
  for (int i = 0; i < 4; ++i) idx.data<int64_t>()[i] = v[i];
  Tensor e = emb(idx);
  ASSERT_EQ(e.shape(), (Shape{2, 2, 3}));
  Tensor w = emb.named_parameters()[0].second;
  EXPECT_TRUE(all_close(e.select(0, 1).select(0, 1), w.select(0, 4), {0, 0}));
  e.sum().backward();
  EXPECT_EQ(w.grad().select(0, 4).sum().item<double>(), 6.0);  // row 4 used twice, 3 columns
  EXPECT_EQ(w.grad().select(0, 1).sum().item<double>(), 0.0);
  idx.data<int64_t>()[0] = 5;
  EXPECT_KILN_ERROR(emb(idx), "Embedding(5, 3)", "index 5 out of range");
}

TEST(NNLayers, LRSchedules) {
  Tensor p = ones({1});
  p.requires_grad_(true);
  nn::SGD opt({p}, 0.1);
  nn::StepLR s(opt, 2, 0.5);
  std::vector<double> want = {0.1, 0.05, 0.05, 0.025};
  for (double w : want) {
    s.step();
    EXPECT_NEAR(opt.lr, w, 1e-15);
  }
  nn::SGD o2({p}, 1.0);
  nn::CosineAnnealingLR c(o2, 4, 0.1);
  c.step();
  EXPECT_NEAR(o2.lr, 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4)), 1e-12);
  for (int i = 0; i < 5; ++i) c.step();
  EXPECT_NEAR(o2.lr, 0.1, 1e-15);
  nn::SGD o3({p}, 0.3);
  nn::LinearWarmupLR w(o3, 3, 0.25);
  EXPECT_NEAR(o3.lr, 0.075, 1e-15);
  w.step();
  EXPECT_NEAR(o3.lr, 0.3 * (0.25 + 0.75 / 3), 1e-15);
  w.step();
  w.step();
  EXPECT_NEAR(o3.lr, 0.3, 1e-15);
}

}  // namespace
}  // namespace kiln
