// nn: module bookkeeping, layers against explicit references, losses against float64 formulas and
// gradcheck, optimizers against the published PyTorch update rules in plain doubles, and a small
// end-to-end training run.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "kiln/ops/conv.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;
namespace F = nn::functional;

double at(const Tensor& t, std::vector<int64_t> idx) {
  Tensor c = t.to(DType::f64).contiguous();
  int64_t off = 0, stride = 1;
  for (int64_t d = c.dim() - 1; d >= 0; --d) {
    off += idx[static_cast<size_t>(d)] * stride;
    stride *= c.size(d);
  }
  return c.data<double>()[off];
}

TEST(NNModule, NamesTrainEvalZeroGradTo) {
  Generator g(1);
  auto seq = std::make_shared<nn::Sequential>();
  seq->add(std::make_shared<nn::Linear>(5, 7, true, &g)).add(std::make_shared<nn::ReLU>());
  seq->add(std::make_shared<nn::Linear>(7, 3, false, &g));
  auto np = seq->named_parameters();
  ASSERT_EQ(np.size(), 3u);
  EXPECT_EQ(np[0].first, "0.weight");
  EXPECT_EQ(np[1].first, "0.bias");
  EXPECT_EQ(np[2].first, "2.weight");
  EXPECT_EQ(np[0].second.shape(), (Shape{7, 5}));
  for (auto& p : seq->parameters()) EXPECT_TRUE(p.requires_grad());
  seq->eval();
  for (auto& [n, c] : seq->children()) EXPECT_FALSE(c->is_training());
  seq->train();
  EXPECT_TRUE(seq->children()[0].second->is_training());

  Tensor x = random_tensor({4, 5}, DType::f32, 3);
  (*seq)(x).sum().backward();
  for (auto& p : seq->parameters()) EXPECT_TRUE(p.grad().defined());
  seq->zero_grad();
  for (auto& p : seq->parameters()) EXPECT_FALSE(p.grad().defined());

  seq->to(DType::f64);
  for (auto& p : seq->parameters()) {
    EXPECT_EQ(p.dtype(), DType::f64);
    EXPECT_TRUE(p.requires_grad());
  }
  EXPECT_EQ((*seq)(x.to(DType::f64)).dtype(), DType::f64);
}

TEST(NNModule, LinearMatchesReference) {
  Generator g(2);
  nn::Linear lin(5, 3, true, &g);
  Tensor w = lin.named_parameters()[0].second, b = lin.named_parameters()[1].second;
  // Kaiming-uniform(a = sqrt 5) bound = 1 / sqrt(fan_in).
  EXPECT_LE(w.abs().max().item<double>(), 1.0 / std::sqrt(5.0) + 1e-6);
  Tensor x = testing::noncontiguous(random_tensor({3, 5}, DType::f32, 4));
  Tensor y = lin(x);
  ASSERT_EQ(y.shape(), (Shape{3, 3}));
  Tensor ref = zeros({3, 3}, DType::f64);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t o = 0; o < 3; ++o) {
      double s = at(b, {o});
      for (int64_t k = 0; k < 5; ++k) s += at(x, {i, k}) * at(w, {o, k});
      ref.data<double>()[i * 3 + o] = s;
    }
  EXPECT_TRUE(all_close(y, ref, {1e-5, 1e-5}));
  EXPECT_KILN_ERROR(lin(random_tensor({3, 4}, DType::f32, 5)), "Linear(5, 3)", "last dim 5");
}

TEST(NNModule, InitIsSeededAndBounded) {
  Tensor a = empty({64, 32}), b = empty({64, 32});
  Generator g1(7), g2(7);
  nn::xavier_uniform_(a, 1.0, &g1);
  nn::xavier_uniform_(b, 1.0, &g2);
  EXPECT_TRUE(all_close(a, b, {0, 0}));
  const double bound = std::sqrt(6.0 / 96.0);
  EXPECT_LE(a.abs().max().item<double>(), bound);
  EXPECT_GE(a.abs().max().item<double>(), 0.9 * bound);
  Tensor c = empty({16, 8, 3, 3});
  nn::kaiming_uniform_(c, 0.0, &g1);
  EXPECT_LE(c.abs().max().item<double>(), std::sqrt(2.0) * std::sqrt(3.0 / 72.0) + 1e-6);
  EXPECT_KILN_ERROR(nn::fans(empty({4})), "fans", "at least 2 dims");
}

TEST(NNModule, ConvPoolFlattenShapesAndGrad) {
  Generator g(3);
  nn::Sequential net;
  net.add(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, true, &g))
      .add(std::make_shared<nn::SiLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::AvgPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(4 * 2 * 2, 3, true, &g))
      .add(std::make_shared<nn::Tanh>());
  Tensor x = random_tensor({2, 1, 9, 9}, DType::f32, 8);
  Tensor y = net(x);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  // Conv2d agrees with the conv2d op it wraps.
  auto* conv = static_cast<nn::Conv2d*>(net.children()[0].second.get());
  Conv2dOptions o;
  o.padding = {1, 1, 1, 1};
  auto cp = conv->named_parameters();
  EXPECT_TRUE(all_close((*conv)(x), conv2d(x, cp[0].second, cp[1].second, o), {0, 0}));
  y.sum().backward();
  for (auto& [n, p] : net.named_parameters()) EXPECT_TRUE(p.grad().defined()) << n;
  EXPECT_KILN_ERROR((*conv)(random_tensor({2, 3, 9, 9}, DType::f32, 9)), "Conv2d(1, 4)", "[N, 1, H, W]");
}

TEST(NNLoss, CrossEntropyMatchesFormula) {
  Tensor logits = random_tensor({5, 7}, DType::f64, 10);
  Tensor target = full({5}, 0, DType::i64);
  int64_t cls[5] = {0, 6, 3, 3, 1};
  for (int i = 0; i < 5; ++i) target.data<int64_t>()[i] = cls[i];
  for (double s : {0.0, 0.1}) {
    double total = 0;
    for (int64_t i = 0; i < 5; ++i) {
      double mx = -1e300, z = 0, mean_logp = 0;
      for (int64_t c = 0; c < 7; ++c) mx = std::max(mx, at(logits, {i, c}));
      for (int64_t c = 0; c < 7; ++c) z += std::exp(at(logits, {i, c}) - mx);
      for (int64_t c = 0; c < 7; ++c) mean_logp += (at(logits, {i, c}) - mx - std::log(z)) / 7.0;
      double nll = -(at(logits, {i, cls[i]}) - mx - std::log(z));
      total += (1 - s) * nll - s * mean_logp;
    }
    EXPECT_NEAR(F::cross_entropy(logits, target, s).item<double>(), total / 5, 1e-12) << s;
    EXPECT_NEAR(F::cross_entropy(logits, target, s, F::Reduction::sum).item<double>(), total, 1e-11);
    EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return F::cross_entropy(in[0], target, s); },
                          {logits}));
  }
  EXPECT_NEAR(F::nll_loss(logits.log_softmax(1), target).item<double>(),
              F::cross_entropy(logits, target).item<double>(), 1e-12);
  target.data<int64_t>()[2] = 7;
  EXPECT_KILN_ERROR(F::cross_entropy(logits, target), "cross_entropy", "out of range [0, 7)", "7");
  EXPECT_KILN_ERROR(F::cross_entropy(logits, logits.select(1, 0)), "integer class indices");
}

TEST(NNLoss, MseAndBceWithLogits) {
  Tensor x = random_tensor({3, 4}, DType::f64, 11, -30, 30);
  Tensor y = rand({3, 4}, DType::f64);
  double mse = 0, bce = 0;
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 4; ++j) {
      double a = at(x, {i, j}), b = at(y, {i, j});
      mse += (a - b) * (a - b) / 12;
      bce += (std::max(a, 0.0) - a * b + std::log1p(std::exp(-std::fabs(a)))) / 12;
    }
  EXPECT_NEAR(F::mse_loss(x, y).item<double>(), mse, 1e-9);
  EXPECT_NEAR(F::bce_with_logits(x, y).item<double>(), bce, 1e-12);
  Tensor xs = random_tensor({3, 4}, DType::f64, 12);
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return F::bce_with_logits(in[0], y); }, {xs}));
  EXPECT_KILN_ERROR(F::mse_loss(x, y.t()), "mse_loss", "differs");
}

// The optimizers drive f(p) = sum(c * p^2) with per-element gradient 2 c p; the reference applies
// the published PyTorch rules in plain doubles.
struct Quad {
  std::vector<double> c{0.5, -1.5, 2.0}, p0{1.0, -2.0, 0.3};
  Tensor param() {
    Tensor p = zeros({3}, DType::f64);
    for (int i = 0; i < 3; ++i) p.data<double>()[i] = p0[static_cast<size_t>(i)];
    return p.requires_grad_(true), p;
  }
  Tensor coef() {
    Tensor t = zeros({3}, DType::f64);
    for (int i = 0; i < 3; ++i) t.data<double>()[i] = c[static_cast<size_t>(i)];
    return t;
  }
};

TEST(NNOptim, SGDMomentumNesterovWeightDecay) {
  for (bool nesterov : {false, true}) {
    Quad q;
    Tensor p = q.param(), c = q.coef();
    const double lr = 0.1, mom = 0.9, wd = 0.01;
    nn::SGD opt({p}, lr, {.momentum = mom, .weight_decay = wd, .nesterov = nesterov});
    std::vector<double> rp = q.p0, buf(3, 0.0);
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad();
      (c * p * p).sum().backward();
      opt.step();
      for (size_t i = 0; i < 3; ++i) {
        double g = 2 * q.c[i] * rp[i] + wd * rp[i];
        buf[i] = step == 0 ? g : mom * buf[i] + g;
        rp[i] -= lr * (nesterov ? g + mom * buf[i] : buf[i]);
      }
    }
    for (int64_t i = 0; i < 3; ++i) EXPECT_NEAR(at(p, {i}), rp[static_cast<size_t>(i)], 1e-12) << nesterov;
  }
  Quad q;
  EXPECT_KILN_ERROR(nn::SGD({q.param()}, 0.1, {.nesterov = true}), "nesterov");
}

TEST(NNOptim, AdamAndAdamW) {
  for (bool decoupled : {false, true}) {
    Quad q;
    Tensor p = q.param(), c = q.coef();
    const double lr = 0.05, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
    std::unique_ptr<nn::Optimizer> opt;
    if (decoupled) opt = std::make_unique<nn::AdamW>(std::vector<Tensor>{p}, lr, nn::AdamOptions{.weight_decay = wd});
    else opt = std::make_unique<nn::Adam>(std::vector<Tensor>{p}, lr, nn::AdamOptions{.weight_decay = wd});
    std::vector<double> rp = q.p0, m(3, 0.0), v(3, 0.0);
    for (int t = 1; t <= 5; ++t) {
      opt->zero_grad();
      (c * p * p).sum().backward();
      opt->step();
      for (size_t i = 0; i < 3; ++i) {
        double g = 2 * q.c[i] * rp[i];
        if (decoupled) rp[i] *= 1 - lr * wd;
        else g += wd * rp[i];
        m[i] = b1 * m[i] + (1 - b1) * g;
        v[i] = b2 * v[i] + (1 - b2) * g * g;
        double mh = m[i] / (1 - std::pow(b1, t)), vh = v[i] / (1 - std::pow(b2, t));
        rp[i] -= lr * mh / (std::sqrt(vh) + eps);
      }
    }
    for (int64_t i = 0; i < 3; ++i) EXPECT_NEAR(at(p, {i}), rp[static_cast<size_t>(i)], 1e-12) << decoupled;
  }
}

TEST(NNTrain, MlpLearnsXorLikeProblem) {
  Generator g(5);
  nn::Sequential net;
  net.add(std::make_shared<nn::Linear>(2, 16, true, &g))
      .add(std::make_shared<nn::GELU>())
      .add(std::make_shared<nn::Linear>(16, 2, true, &g));
  Tensor x = rand({64, 2}, DType::f32, &g) * 2.0 - 1.0;
  Tensor y = zeros({64}, DType::i64);
  for (int64_t i = 0; i < 64; ++i)
    y.data<int64_t>()[i] = (x.data<float>()[2 * i] * x.data<float>()[2 * i + 1] > 0) ? 1 : 0;
  nn::Adam opt(net.parameters(), 0.05);
  double first = 0, last = 0;
  for (int it = 0; it < 300; ++it) {
    opt.zero_grad();
    Tensor loss = F::cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    (it == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_LT(last, 0.25 * first);
  Tensor acc = net(x).argmax(1).eq(y).to(DType::f32).mean();
  EXPECT_GE(acc.item<double>(), 0.95);
}

}  // namespace
}  // namespace kiln
