// Normalization, dropout, adaptive pooling and embedding modules, and the LR schedules. Built from
// kiln ops, so autograd differentiates them (BatchNorm2d's training form included).
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/core/error.h"
#include "kiln/nn.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/index.h"

namespace kiln::nn {

BatchNorm2d::BatchNorm2d(int64_t c, double eps_, double momentum_) : channels(c), eps(eps_), momentum(momentum_) {
  KILN_CHECK(c > 0, "BatchNorm2d: channels must be positive, got ", c);
  KILN_CHECK(momentum_ >= 0 && momentum_ <= 1, "BatchNorm2d: momentum must be in [0, 1], got ", momentum_);
  register_parameter("weight", ones({c}));
  register_parameter("bias", zeros({c}));
  register_buffer("running_mean", zeros({c}));
  register_buffer("running_var", ones({c}));
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == channels, "BatchNorm2d(", channels, "): expected input [N, ", channels,
             ", H, W], got shape ", shape_str(x.shape()));
  auto bufs = named_buffers();
  Tensor rm = bufs[0].second, rv = bufs[1].second;
  const Shape bshape{1, channels, 1, 1};
  Tensor mean, var;
  if (is_training()) {
    const int64_t n = x.size(0) * x.size(2) * x.size(3);
    KILN_CHECK(n > 1, "BatchNorm2d: training needs more than one value per channel, got shape ", shape_str(x.shape()));
    mean = x.mean({0, 2, 3}, true);
    Tensor d = x - mean;
    var = (d * d).mean({0, 2, 3}, true);
    NoGradGuard ng;
    rm.mul_(1.0 - momentum);
    rm.add_(mean.detach().reshape({channels}).to(rm.dtype()) * momentum);
    rv.mul_(1.0 - momentum);
    rv.add_(var.detach().reshape({channels}).to(rv.dtype()) * (momentum * static_cast<double>(n) / static_cast<double>(n - 1)));
  } else {
    mean = rm.reshape(bshape).to(x.dtype());
    var = rv.reshape(bshape).to(x.dtype());
  }
  Tensor y = (x - mean) * (var + eps).rsqrt();
  return y * param("weight").reshape(bshape) + param("bias").reshape(bshape);
}

LayerNorm::LayerNorm(std::vector<int64_t> shape, double eps_) : normalized_shape(std::move(shape)), eps(eps_) {
  KILN_CHECK(!normalized_shape.empty(), "LayerNorm: normalized_shape must not be empty");
  Shape s(normalized_shape.begin(), normalized_shape.end());
  register_parameter("weight", ones(s));
  register_parameter("bias", zeros(s));
}

Tensor LayerNorm::forward(const Tensor& x) {
  const int64_t k = static_cast<int64_t>(normalized_shape.size());
  bool ok = x.dim() >= k;
  for (int64_t i = 0; ok && i < k; ++i) ok = x.size(x.dim() - k + i) == normalized_shape[static_cast<size_t>(i)];
  KILN_CHECK(ok, "LayerNorm: input shape ", shape_str(x.shape()), " does not end with ",
             shape_str(Shape(normalized_shape.begin(), normalized_shape.end())));
  std::vector<int64_t> axes;
  for (int64_t i = x.dim() - k; i < x.dim(); ++i) axes.push_back(i);
  Tensor mean = x.mean(axes, true);
  Tensor d = x - mean;
  Tensor var = (d * d).mean(axes, true);
  return d * (var + eps).rsqrt() * param("weight") + param("bias");
}

Dropout::Dropout(double p_, uint64_t seed) : p(p_), gen_(seed) {
  KILN_CHECK(p_ >= 0.0 && p_ < 1.0, "Dropout: p must be in [0, 1), got ", p_);
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p == 0.0) return x;
  Tensor keep = rand(x.shape(), DType::f32, &gen_).ge(scalar_tensor(p, DType::f32)).to(x.dtype());
  return x * keep / (1.0 - p);
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4, "AdaptiveAvgPool2d: expected [N, C, H, W], got shape ", shape_str(x.shape()));
  KILN_CHECK(out > 0 && x.size(2) % out == 0 && x.size(3) % out == 0, "AdaptiveAvgPool2d(", out,
             "): H and W must be multiples of the output size, got shape ", shape_str(x.shape()));
  if (out == 1) return global_avg_pool(x);
  Pool2dOptions o;
  o.kernel = {x.size(2) / out, x.size(3) / out};
  o.stride = o.kernel;
  return avg_pool2d(x, o);
}

Embedding::Embedding(int64_t num, int64_t d, Generator* gen) : num_embeddings(num), dim(d) {
  KILN_CHECK(num > 0 && d > 0, "Embedding: sizes must be positive, got ", num, " x ", d);
  Tensor w = empty({num, d});
  normal_(w, 0.0, 1.0, gen);
  register_parameter("weight", w);
}

Tensor Embedding::forward(const Tensor& idx) {
  KILN_CHECK(is_integral(idx.dtype()), "Embedding: indices must be integers, got ", dtype_name(idx.dtype()));
  if (idx.numel() > 0) {
    const int64_t lo = idx.min().to(DType::i64).item<int64_t>(), hi = idx.max().to(DType::i64).item<int64_t>();
    KILN_CHECK(lo >= 0 && hi < num_embeddings, "Embedding(", num_embeddings, ", ", dim, "): index ",
               lo < 0 ? lo : hi, " out of range [0, ", num_embeddings, ")");
  }
  Shape s = idx.shape();
  s.push_back(dim);
  return index_select(param("weight"), 0, idx.to(DType::i64).reshape({idx.numel()})).reshape(s);
}

StepLR::StepLR(Optimizer& opt, int64_t s, double g) : LRScheduler(opt), step_size(s), gamma(g) {
  KILN_CHECK(s > 0, "StepLR: step_size must be positive, got ", s);
}
double StepLR::lr_at(int64_t t) const { return base_lr_ * std::pow(gamma, static_cast<double>(t / step_size)); }

CosineAnnealingLR::CosineAnnealingLR(Optimizer& opt, int64_t tm, double em) : LRScheduler(opt), t_max(tm), eta_min(em) {
  KILN_CHECK(tm > 0, "CosineAnnealingLR: T_max must be positive, got ", tm);
}
double CosineAnnealingLR::lr_at(int64_t t) const {
  if (t >= t_max) return eta_min;
  return eta_min + (base_lr_ - eta_min) * 0.5 * (1.0 + std::cos(M_PI * static_cast<double>(t) / static_cast<double>(t_max)));
}

LinearWarmupLR::LinearWarmupLR(Optimizer& opt, int64_t w, double sf) : LRScheduler(opt), warmup(w), start_factor(sf) {
  KILN_CHECK(w > 0 && sf > 0 && sf <= 1, "LinearWarmupLR: needs warmup > 0 and start_factor in (0, 1], got ", w,
             ", ", sf);
  opt.lr = base_lr_ * sf;
}
double LinearWarmupLR::lr_at(int64_t t) const {
  if (t >= warmup) return base_lr_;
  return base_lr_ * (start_factor + (1.0 - start_factor) * static_cast<double>(t) / static_cast<double>(warmup));
}

}  // namespace kiln::nn
