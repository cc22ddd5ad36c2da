// Module bookkeeping (parameters, buffers, children), initializers and the basic layers.
#include <cmath>

#include "kiln/autograd.h"
#include "kiln/core/error.h"
#include "kiln/nn.h"
#include "kiln/ops/conv.h"
#include "kiln/ops/linalg.h"
#include "kiln/ops/unary.h"

namespace kiln::nn {

// ---- initializers -----------------------------------------------------------------------------------
std::pair<int64_t, int64_t> fans(const Tensor& w) {
  KILN_CHECK(w.dim() >= 2, "fans: expected a weight with at least 2 dims, got shape ", shape_str(w.shape()));
  int64_t receptive = 1;
  for (int64_t d = 2; d < w.dim(); ++d) receptive *= w.size(d);
  return {w.size(1) * receptive, w.size(0) * receptive};
}

void uniform_(Tensor& t, double lo, double hi, Generator* gen) {
  NoGradGuard ng;
  Generator& g = gen ? *gen : default_generator();
  Tensor u = rand(t.shape(), DType::f64, &g);
  t.copy_(u * (hi - lo) + lo);
}

void normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard ng;
  Generator& g = gen ? *gen : default_generator();
  Tensor n = randn(t.shape(), DType::f64, &g);
  t.copy_(n * std + mean);
}

void kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fans(t).first));
  uniform_(t, -bound, bound, gen);
}

void xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  auto [fi, fo] = fans(t);
  const double bound = gain * std::sqrt(6.0 / static_cast<double>(fi + fo));
  uniform_(t, -bound, bound, gen);
}

// ---- Module -----------------------------------------------------------------------------------------
std::vector<std::pair<std::string, Tensor>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [n, t] : params_) out.emplace_back(n, t);
  for (const auto& [cn, c] : children_)
    for (auto& [n, t] : c->named_parameters()) out.emplace_back(cn + "." + n, t);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [n, t] : buffers_) out.emplace_back(n, t);
  for (const auto& [cn, c] : children_)
    for (auto& [n, t] : c->named_buffers()) out.emplace_back(cn + "." + n, t);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::state_dict() const {
  auto out = named_parameters();
  for (auto& b : named_buffers()) out.push_back(b);
  return out;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [n, c] : children_) c->train(on);
}

void Module::zero_grad() {
  for (auto& p : parameters()) p.set_grad(Tensor());
}

void Module::to(DType dtype) {
  KILN_CHECK(is_floating(dtype), "Module::to: expected a floating dtype, got ", dtype_name(dtype));
  NoGradGuard ng;
  for (auto& [n, t] : params_) {
    if (t.dtype() == dtype) continue;
    t = t.to(dtype).detach();
    t.requires_grad_(true);
  }
  for (auto& [n, t] : buffers_)
    if (is_floating(t.dtype())) t = t.to(dtype);
  for (auto& [n, c] : children_) c->to(dtype);
}

Tensor& Module::register_parameter(const std::string& name, Tensor t) {
  for (auto& [n, p] : params_) KILN_CHECK(n != name, "register_parameter: duplicate name '", name, "'");
  t.requires_grad_(true);
  params_.emplace_back(name, std::move(t));
  return params_.back().second;
}

Tensor& Module::register_buffer(const std::string& name, Tensor t) {
  buffers_.emplace_back(name, std::move(t));
  return buffers_.back().second;
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> m) {
  KILN_CHECK(m != nullptr, "register_module: null module '", name, "'");
  children_.emplace_back(name, std::move(m));
}

Tensor& Module::param(const std::string& name) {
  for (auto& [n, p] : params_)
    if (n == name) return p;
  KILN_FAIL(this->name(), ": no parameter named '", name, "'");
}

Tensor Module::param_or_undefined(const std::string& name) const {
  for (auto& [n, p] : params_)
    if (n == name) return p;
  return Tensor();
}

// ---- layers -----------------------------------------------------------------------------------------
Linear::Linear(int64_t in, int64_t out, bool bias, Generator* gen) : in_features(in), out_features(out) {
  KILN_CHECK(in > 0 && out > 0, "Linear: features must be positive, got in=", in, " out=", out);
  Tensor w = empty({out, in});
  kaiming_uniform_(w, std::sqrt(5.0), gen);  // PyTorch's default
  register_parameter("weight", w);
  if (bias) {
    Tensor b = empty({out});
    const double bound = 1.0 / std::sqrt(static_cast<double>(in));
    uniform_(b, -bound, bound, gen);
    register_parameter("bias", b);
  }
}

Tensor Linear::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_features, "Linear(", in_features, ", ", out_features,
             "): expected input with last dim ", in_features, ", got shape ", shape_str(x.shape()));
  Tensor b = param_or_undefined("bias");
  // One gemm for [N, in] inputs: bias in its epilogue, and dense weight gradients (Note [Dense gemm
  // gradients] in src/ops/defs/linalg/matmul.cc).
  if (x.dim() == 2) return gemm(x, param("weight"), b, 1.0, 1.0, false, true);
  Tensor y = matmul(x, param("weight").t());
  return b.defined() ? y + b : y;
}

Conv2d::Conv2d(int64_t in_c, int64_t out_c, int64_t k, int64_t s, int64_t p, bool bias, Generator* gen)
    : in_channels(in_c), out_channels(out_c), kernel(k), stride(s), padding(p) {
  KILN_CHECK(in_c > 0 && out_c > 0 && k > 0 && s > 0 && p >= 0, "Conv2d: invalid configuration in=", in_c,
             " out=", out_c, " kernel=", k, " stride=", s, " padding=", p);
  Tensor w = empty({out_c, in_c, k, k});
  kaiming_uniform_(w, std::sqrt(5.0), gen);
  register_parameter("weight", w);
  if (bias) {
    Tensor b = empty({out_c});
    const double bound = 1.0 / std::sqrt(static_cast<double>(in_c * k * k));
    uniform_(b, -bound, bound, gen);
    register_parameter("bias", b);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == in_channels, "Conv2d(", in_channels, ", ", out_channels,
             "): expected input [N, ", in_channels, ", H, W], got shape ", shape_str(x.shape()));
  Conv2dOptions o;
  o.stride = {stride, stride};
  o.padding = {padding, padding, padding, padding};
  return conv2d(x, param("weight"), param_or_undefined("bias"), o);
}

Tensor ReLU::forward(const Tensor& x) { return x.relu(); }
Tensor GELU::forward(const Tensor& x) { return gelu(x); }
Tensor SiLU::forward(const Tensor& x) { return silu(x); }
Tensor Tanh::forward(const Tensor& x) { return x.tanh(); }
Tensor Sigmoid::forward(const Tensor& x) { return x.sigmoid(); }

namespace {
// Checks a pooling module's configuration (PyTorch's rules) and fills stride {0, 0} with the kernel.
Size2 checked_stride(const char* what, Size2 kernel, Size2 stride, Size2 padding, Size2 dilation) {
  for (int i = 0; i < 2; ++i) {
    const auto u = static_cast<size_t>(i);
    KILN_CHECK(kernel[u] > 0 && stride[u] >= 0 && padding[u] >= 0 && dilation[u] > 0, what,
               ": kernel and dilation must be positive, stride and padding non-negative, got kernel [", kernel[0], ", ",
               kernel[1], "] stride [", stride[0], ", ", stride[1], "] padding [", padding[0], ", ", padding[1],
               "] dilation [", dilation[0], ", ", dilation[1], "]");
    KILN_CHECK(2 * padding[u] <= kernel[u], what, ": padding must be at most half the kernel, got padding [",
               padding[0], ", ", padding[1], "] for kernel [", kernel[0], ", ", kernel[1], "]");
  }
  return {stride[0] ? stride[0] : kernel[0], stride[1] ? stride[1] : kernel[1]};
}

Pool2dOptions pool_options(Size2 kernel, Size2 stride, Size2 padding, bool ceil_mode) {
  Pool2dOptions o;
  o.kernel = {kernel[0], kernel[1]};
  o.stride = {stride[0], stride[1]};
  o.padding = {padding[0], padding[1], padding[0], padding[1]};
  o.ceil_mode = ceil_mode;
  return o;
}

void check_pool_input(const char* what, const Tensor& x) {
  KILN_CHECK(x.dim() == 4, what, ": expected input [N, C, H, W], got shape ", shape_str(x.shape()));
}
}  // namespace

MaxPool2d::MaxPool2d(Size2 k, Size2 s, Size2 p, Size2 d, bool ceil)
    : kernel(k), stride(checked_stride("MaxPool2d", k, s, p, d)), padding(p), dilation(d), ceil_mode(ceil) {}

Tensor MaxPool2d::forward(const Tensor& x) {
  check_pool_input("MaxPool2d", x);
  Pool2dOptions o = pool_options(kernel, stride, padding, ceil_mode);
  o.dilation = {dilation[0], dilation[1]};
  return max_pool2d(x, o);
}

AvgPool2d::AvgPool2d(Size2 k, Size2 s, Size2 p, bool ceil, bool include_pad)
    : kernel(k), stride(checked_stride("AvgPool2d", k, s, p, {1, 1})), padding(p), ceil_mode(ceil),
      count_include_pad(include_pad) {}

Tensor AvgPool2d::forward(const Tensor& x) {
  check_pool_input("AvgPool2d", x);
  Pool2dOptions o = pool_options(kernel, stride, padding, ceil_mode);
  o.count_include_pad = count_include_pad;
  return avg_pool2d(x, o);
}

Tensor Flatten::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 1, "Flatten: expected at least 1 dim, got a 0-d tensor");
  if (x.dim() == 1) return x;
  return x.flatten(1, -1);
}

Sequential& Sequential::add(std::shared_ptr<Module> m) {
  register_module(std::to_string(children().size()), std::move(m));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (auto& [n, c] : children()) y = c->forward(y);
  return y;
}

}  // namespace kiln::nn
