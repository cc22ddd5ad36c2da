// nn: modules with named parameters (Module, Linear, Conv2d, activations, pooling, Flatten,
// Sequential), seedable initializers, loss functions (nn::functional) and optimizers (SGD, Adam,
// AdamW) following PyTorch's update rules. Modules are built from kiln ops, so autograd
// differentiates them without extra rules.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kiln/core/generator.h"
#include "kiln/core/tensor.h"

namespace kiln::nn {

// ---- initializers (in place, no history) ----------------------------------------------------------
// fan_in / fan_out of a weight: [out, in] or [out, in, kh, kw].
std::pair<int64_t, int64_t> fans(const Tensor& w);
void uniform_(Tensor& t, double lo, double hi, Generator* gen = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* gen = nullptr);
// Kaiming (He) uniform with gain sqrt(2 / (1 + a^2)) over fan_in; a = sqrt(5) is PyTorch's default
// Linear/Conv init.
void kaiming_uniform_(Tensor& t, double a = 0.0, Generator* gen = nullptr);
void xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);

// ---- Module -----------------------------------------------------------------------------------------
class Module {
 public:
  virtual ~Module() = default;
  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  virtual std::string name() const = 0;

  // Recursive, in registration order; names are dotted ("0.weight").
  std::vector<std::pair<std::string, Tensor>> named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  // Parameters and buffers together (what a checkpoint stores).
  std::vector<std::pair<std::string, Tensor>> state_dict() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }

  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  void zero_grad();
  // Converts every parameter and buffer (floating ones) to `dtype`, keeping requires_grad.
  void to(DType dtype);

 protected:
  Tensor& register_parameter(const std::string& name, Tensor t);
  Tensor& register_buffer(const std::string& name, Tensor t);
  void register_module(const std::string& name, std::shared_ptr<Module> m);
  Tensor& param(const std::string& name);
  Tensor param_or_undefined(const std::string& name) const;  // optional parameters (bias)

 private:
  std::vector<std::pair<std::string, Tensor>> params_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Linear"; }
  int64_t in_features, out_features;
};

class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Conv2d"; }
  int64_t in_channels, out_channels, kernel, stride, padding;
};

class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "ReLU"; }
};
class GELU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "GELU"; }
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "SiLU"; }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Tanh"; }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sigmoid"; }
};

// Pooling windows as in PyTorch: kernel, stride and padding per (height, width) (an int: the same for
// both); stride {0, 0} (the default) = kernel; zero-or-more padding on each side, at most half the
// kernel; ceil_mode rounds the output size up (a window starting in the right/bottom padding is dropped);
// dilation (MaxPool2d) spaces the taps.
using Size2 = std::array<int64_t, 2>;
class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0, int64_t dilation = 1,
                     bool ceil_mode = false)
      : MaxPool2d(Size2{kernel, kernel}, Size2{stride, stride}, Size2{padding, padding}, Size2{dilation, dilation},
                  ceil_mode) {}
  MaxPool2d(Size2 kernel, Size2 stride, Size2 padding = {0, 0}, Size2 dilation = {1, 1}, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "MaxPool2d"; }
  Size2 kernel, stride, padding, dilation;
  bool ceil_mode;
};
// count_include_pad (PyTorch's default true): padded zeros count in the divisor.
class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true)
      : AvgPool2d(Size2{kernel, kernel}, Size2{stride, stride}, Size2{padding, padding}, ceil_mode,
                  count_include_pad) {}
  AvgPool2d(Size2 kernel, Size2 stride, Size2 padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AvgPool2d"; }
  Size2 kernel, stride, padding;
  bool ceil_mode, count_include_pad;
};

// [N, d1, d2, ...] -> [N, d1 * d2 * ...].
class Flatten : public Module {
 public:
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Flatten"; }
};

class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential& add(std::shared_ptr<Module> m);  // named "0", "1", ...
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Sequential"; }
  size_t size() const { return children().size(); }
};

// Batch statistics over (N, H, W) in training (running_mean/var updated with `momentum`, the
// variance unbiased as in PyTorch), running statistics in eval. Buffers: running_mean, running_var.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t channels, double eps = 1e-5, double momentum = 0.1);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "BatchNorm2d"; }
  int64_t channels;
  double eps, momentum;
};

// Normalizes over the last `normalized_dims` dims (their sizes given), with weight and bias.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::vector<int64_t> normalized_shape, double eps = 1e-5);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "LayerNorm"; }
  std::vector<int64_t> normalized_shape;
  double eps;
};

// Zeroes each element with probability p in training (scaling the rest by 1 / (1 - p)); identity in
// eval. Its masks come from its own seeded generator.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, uint64_t seed = 0);
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "Dropout"; }
  double p;

 private:
  Generator gen_;
};

// Output [N, C, out, out]; H and W must be multiples of `out` (out = 1: global average).
class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(int64_t out = 1) : out(out) {}
  Tensor forward(const Tensor& x) override;
  std::string name() const override { return "AdaptiveAvgPool2d"; }
  int64_t out;
};

// Rows of an [num, dim] N(0, 1)-initialized table; integer indices of any shape -> shape + [dim].
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t dim, Generator* gen = nullptr);
  Tensor forward(const Tensor& indices) override;
  std::string name() const override { return "Embedding"; }
  int64_t num_embeddings, dim;
};

// ---- losses -----------------------------------------------------------------------------------------
namespace functional {
enum class Reduction { mean, sum, none };
// logits [N, C], target [N] integer class indices in [0, C); label smoothing as in PyTorch:
// target distribution (1 - s) * onehot + s / C.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, double label_smoothing = 0.0,
                     Reduction reduction = Reduction::mean);
// log_probs [N, C], target [N]: -log_probs[i, target[i]].
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, Reduction reduction = Reduction::mean);
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Numerically stable: max(x, 0) - x * y + log(1 + exp(-|x|)).
Tensor bce_with_logits(const Tensor& logits, const Tensor& target, Reduction reduction = Reduction::mean);
}  // namespace functional

// ---- optimizers -------------------------------------------------------------------------------------
class Optimizer {
 public:
  explicit Optimizer(std::vector<Tensor> params, double lr);
  virtual ~Optimizer() = default;
  virtual void step() = 0;
  void zero_grad();
  double lr;

 protected:
  std::vector<Tensor> params_;
};

struct SGDOptions {
  double momentum = 0.0, dampening = 0.0, weight_decay = 0.0;
  bool nesterov = false;
};
class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, double lr, SGDOptions opt = {});
  void step() override;

 private:
  SGDOptions opt_;
  std::vector<Tensor> buf_;
};

struct AdamOptions {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
};
// decoupled = false: Adam (weight decay added to the gradient); true: AdamW (p *= 1 - lr * wd).
class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, double lr, AdamOptions opt = {}, bool decoupled = false);
  void step() override;

 private:
  AdamOptions opt_;
  bool decoupled_;
  int64_t t_ = 0;
  std::vector<Tensor> m_, v_;
};
class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, double lr, AdamOptions opt = {.weight_decay = 1e-2})
      : Adam(std::move(params), lr, opt, true) {}
};

// ---- learning-rate schedules (call step() once per epoch or per iteration; they set opt.lr) --------
class LRScheduler {
 public:
  explicit LRScheduler(Optimizer& opt) : opt_(opt), base_lr_(opt.lr) {}
  virtual ~LRScheduler() = default;
  void step() { opt_.lr = lr_at(++t_); }
  virtual double lr_at(int64_t t) const = 0;  // lr after t steps

 protected:
  Optimizer& opt_;
  double base_lr_;
  int64_t t_ = 0;
};
// base * gamma^(t / step_size)
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& opt, int64_t step_size, double gamma = 0.1);
  double lr_at(int64_t t) const override;
  int64_t step_size;
  double gamma;
};
// eta_min + (base - eta_min) (1 + cos(pi t / T_max)) / 2, held at eta_min after T_max.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& opt, int64_t t_max, double eta_min = 0.0);
  double lr_at(int64_t t) const override;
  int64_t t_max;
  double eta_min;
};
// Linear warmup from base * start_factor to base over `warmup` steps (PyTorch's LinearLR), then base.
class LinearWarmupLR : public LRScheduler {
 public:
  LinearWarmupLR(Optimizer& opt, int64_t warmup, double start_factor = 1.0 / 3.0);
  double lr_at(int64_t t) const override;
  int64_t warmup;
  double start_factor;
};

// ---- safetensors ------------------------------------------------------------------------------------
// The format: 8-byte little-endian header length, a JSON header {name: {"dtype": "F32", "shape": [..],
// "data_offsets": [begin, end]}, "__metadata__": {str: str}}, then the raw little-endian data.
// Tensors are written in name order.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata = {});
std::vector<std::pair<std::string, Tensor>> load_safetensors(const std::string& path);
// Copies a file's tensors into the module's state_dict; one kiln::Error lists every missing,
// unexpected, shape- or dtype-mismatched tensor by name.
void load_state_dict(Module& m, const std::string& path);

// ---- data -------------------------------------------------------------------------------------------
struct Batch {
  Tensor x, y;
};
// Batches of (x[idx], y[idx]) along dim 0; a seeded reshuffle at every epoch() when shuffle is on.
class DataLoader {
 public:
  DataLoader(Tensor x, Tensor y, int64_t batch_size, bool shuffle = false, uint64_t seed = 0,
             bool drop_last = false);
  // The batches of one pass (a new permutation per call when shuffling).
  std::vector<Batch> epoch();
  int64_t size() const { return x_.size(0); }

 private:
  Tensor x_, y_;
  int64_t batch_;
  bool shuffle_, drop_last_;
  Generator gen_;
};

// The digits CSV (data/digits/digits.csv: 64 pixels 0..16 then the label per row) as images
// [N, 1, 8, 8] f32 scaled to [0, 1] and labels [N] i64. Fixed split: rows [0, 1437) train,
// [1437, 1797) test.
struct Digits {
  Tensor train_x, train_y, test_x, test_y;
};
Digits load_digits(const std::string& csv_path);

}  // namespace kiln::nn
