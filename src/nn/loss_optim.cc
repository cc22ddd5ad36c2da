// Loss functions (nn::functional) and optimizers (SGD, Adam, AdamW) with PyTorch's update rules.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/core/error.h"
#include "kiln/nn.h"
#include "kiln/ops/index.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {
namespace functional {
namespace {
Tensor reduce(const Tensor& l, Reduction r) {
  switch (r) {
    case Reduction::mean: return l.mean();
    case Reduction::sum: return l.sum();
    case Reduction::none: return l;
  }
  KILN_ASSERT(false, "unknown reduction");
  return l;
}

void check_class_target(const char* what, const Tensor& x, const Tensor& target) {
  KILN_CHECK(x.dim() == 2, what, ": expected input [N, C], got shape ", shape_str(x.shape()));
  KILN_CHECK(target.dim() == 1 && target.size(0) == x.size(0), what, ": expected target [", x.size(0),
             "] of class indices, got shape ", shape_str(target.shape()));
  KILN_CHECK(!is_floating(target.dtype()), what, ": target must hold integer class indices, got ",
             dtype_name(target.dtype()));
  if (target.numel() == 0) return;
  const int64_t lo = target.min().item<int64_t>(), hi = target.max().item<int64_t>();
  KILN_CHECK(lo >= 0 && hi < x.size(1), what, ": class index out of range [0, ", x.size(1), "): found ",
             lo < 0 ? lo : hi);
}

Tensor pick(const Tensor& logp, const Tensor& target) {
  return gather_elements(logp, target.to(DType::i64).unsqueeze(1), 1).squeeze(1);
}
}  // namespace

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction) {
  check_class_target("nll_loss", log_probs, target);
  return reduce(-pick(log_probs, target), reduction);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing, Reduction reduction) {
  check_class_target("cross_entropy", logits, target);
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "cross_entropy: label_smoothing must be in [0, 1], got ", label_smoothing);
  Tensor logp = logits.log_softmax(1);
  Tensor l = -pick(logp, target);
  if (label_smoothing > 0.0) l = l * (1.0 - label_smoothing) - logp.mean({1}) * label_smoothing;
  return reduce(l, reduction);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction) {
  KILN_CHECK(input.shape() == target.shape(), "mse_loss: input shape ", shape_str(input.shape()),
             " differs from target shape ", shape_str(target.shape()));
  Tensor d = input - target;
  return reduce(d * d, reduction);
}

Tensor bce_with_logits(const Tensor& x, const Tensor& y, Reduction reduction) {
  KILN_CHECK(x.shape() == y.shape(), "bce_with_logits: logits shape ", shape_str(x.shape()),
             " differs from target shape ", shape_str(y.shape()));
  Tensor l = x.relu() - x * y + ((-x.abs()).exp() + 1.0).log();
  return reduce(l, reduction);
}
}  // namespace functional

// ---- optimizers -------------------------------------------------------------------------------------
Optimizer::Optimizer(std::vector<Tensor> params, double lr_) : lr(lr_), params_(std::move(params)) {
  KILN_CHECK(lr_ >= 0.0, "optimizer: learning rate must be >= 0, got ", lr_);
  for (size_t i = 0; i < params_.size(); ++i)
    KILN_CHECK(params_[i].defined() && params_[i].requires_grad(), "optimizer: parameter ", i,
               " is undefined or does not require grad");
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.set_grad(Tensor());
}

SGD::SGD(std::vector<Tensor> params, double lr_, SGDOptions opt) : Optimizer(std::move(params), lr_), opt_(opt) {
  KILN_CHECK(!opt.nesterov || (opt.momentum > 0.0 && opt.dampening == 0.0),
             "SGD: nesterov needs momentum > 0 and dampening 0");
  buf_.resize(params_.size());
}

// Note [SGD rule]: PyTorch's: g += wd * p; buf = g (first step) else momentum * buf + (1 - dampening) * g;
// g = nesterov ? g + momentum * buf : buf; p -= lr * g.
void SGD::step() {
  NoGradGuard ng;
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (opt_.weight_decay != 0.0) g = g + p * opt_.weight_decay;
    if (opt_.momentum != 0.0) {
      if (!buf_[i].defined()) {
        buf_[i] = g.clone();
      } else {
        buf_[i].mul_(opt_.momentum);
        buf_[i].add_(g * (1.0 - opt_.dampening));
      }
      g = opt_.nesterov ? g + buf_[i] * opt_.momentum : buf_[i];
    }
    p.sub_(g * lr);
  }
}

Adam::Adam(std::vector<Tensor> params, double lr_, AdamOptions opt, bool decoupled)
    : Optimizer(std::move(params), lr_), opt_(opt), decoupled_(decoupled) {
  KILN_CHECK(opt.beta1 >= 0.0 && opt.beta1 < 1.0 && opt.beta2 >= 0.0 && opt.beta2 < 1.0,
             "Adam: betas must be in [0, 1), got ", opt.beta1, ", ", opt.beta2);
  KILN_CHECK(opt.eps >= 0.0, "Adam: eps must be >= 0, got ", opt.eps);
  m_.resize(params_.size());
  v_.resize(params_.size());
}

// Note [Adam rule]: PyTorch's: (AdamW) p *= 1 - lr * wd, (Adam) g += wd * p; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
void Adam::step() {
  NoGradGuard ng;
  ++t_;
  const double bc1 = 1.0 - std::pow(opt_.beta1, static_cast<double>(t_));
  const double bc2 = 1.0 - std::pow(opt_.beta2, static_cast<double>(t_));
  for (size_t i = 0; i < params_.size(); ++i) {
    Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (opt_.weight_decay != 0.0) {
      if (decoupled_) p.mul_(1.0 - lr * opt_.weight_decay);
      else g = g + p * opt_.weight_decay;
    }
    if (!m_[i].defined()) {
      m_[i] = zeros_like(p);
      v_[i] = zeros_like(p);
    }
    m_[i].mul_(opt_.beta1);
    m_[i].add_(g * (1.0 - opt_.beta1));
    v_[i].mul_(opt_.beta2);
    v_[i].add_(g * g * (1.0 - opt_.beta2));
    Tensor denom = v_[i].sqrt() / std::sqrt(bc2) + opt_.eps;
    p.sub_(m_[i] / denom * (lr / bc1));
  }
}

}  // namespace kiln::nn
