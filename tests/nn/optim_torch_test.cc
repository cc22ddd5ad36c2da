// SGD (momentum, dampening, nesterov, weight decay), Adam, AdamW and the LR schedules against
// parameters PyTorch produced on the same problem (tests/nn/data/optim_reference.npz, made by
// tests/nn/make_optim_reference.py): every step's W, b and learning rate, in float64 (relative
// 1e-9) and in float32 (relative 1e-5).
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "kiln/autograd.h"
#include "kiln/core/io.h"
#include "kiln/nn.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;

const std::map<std::string, Tensor>& reference() {
  // ctest sets KILN_TEST_DATA to tests/data; the fixture sits in tests/nn/data.
  static const std::map<std::string, Tensor> r = [] {
    const char* env = std::getenv("KILN_TEST_DATA");
    const std::filesystem::path dir = env ? std::filesystem::path(env) / ".." / "nn" / "data"
                                          : std::filesystem::path(__FILE__).parent_path() / "data";
    return load_npz((dir / "optim_reference.npz").string());
  }();
  return r;
}

Tensor fixture(const std::string& name) {
  auto it = reference().find(name);
  KILN_CHECK(it != reference().end(), "optim_reference.npz has no array '", name,
             "': rerun tests/nn/make_optim_reference.py");
  return it->second.clone();  // a fresh copy: the tests update parameters in place
}

struct Schedule {
  std::unique_ptr<nn::Optimizer> opt;
  std::unique_ptr<nn::LRScheduler> sched;
};
using MakeSchedule = std::function<Schedule(std::vector<Tensor>)>;

template <class Opt, class... Args>
MakeSchedule plain(Args... args) {
  return [=](std::vector<Tensor> p) { return Schedule{std::make_unique<Opt>(std::move(p), args...), nullptr}; };
}

// Keep in sync with CONFIGS in make_optim_reference.py.
const std::vector<std::pair<std::string, MakeSchedule>>& configs() {
  using nn::AdamOptions;
  using nn::SGDOptions;
  static const std::vector<std::pair<std::string, MakeSchedule>> c = {
      {"sgd", plain<nn::SGD>(0.3, SGDOptions{})},
      {"sgd_momentum", plain<nn::SGD>(0.2, SGDOptions{.momentum = 0.9})},
      {"sgd_dampening", plain<nn::SGD>(0.2, SGDOptions{.momentum = 0.8, .dampening = 0.3})},
      {"sgd_nesterov_wd", plain<nn::SGD>(0.2, SGDOptions{.momentum = 0.9, .weight_decay = 0.05, .nesterov = true})},
      {"sgd_wd", plain<nn::SGD>(0.25, SGDOptions{.weight_decay = 0.1})},
      {"adam", plain<nn::Adam>(0.05, AdamOptions{})},
      {"adam_wd", plain<nn::Adam>(0.05, AdamOptions{.beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1})},
      {"adamw",  // AdamW's default weight decay (0.01, as PyTorch's)
       [](std::vector<Tensor> p) { return Schedule{std::make_unique<nn::AdamW>(std::move(p), 0.05), nullptr}; }},
      {"adamw_wd",
       plain<nn::AdamW>(0.05, AdamOptions{.beta1 = 0.85, .beta2 = 0.99, .eps = 1e-7, .weight_decay = 0.3})},
      {"step_lr",
       [](std::vector<Tensor> p) {
         Schedule s{std::make_unique<nn::SGD>(std::move(p), 0.3, SGDOptions{.momentum = 0.5}), nullptr};
         s.sched = std::make_unique<nn::StepLR>(*s.opt, 2, 0.5);
         return s;
       }},
      {"cosine_lr",
       [](std::vector<Tensor> p) {
         Schedule s{std::make_unique<nn::Adam>(std::move(p), 0.05), nullptr};
         s.sched = std::make_unique<nn::CosineAnnealingLR>(*s.opt, 5, 0.005);
         return s;
       }},
      {"warmup_lr",
       [](std::vector<Tensor> p) {
         Schedule s{std::make_unique<nn::AdamW>(std::move(p), 0.05, AdamOptions{.weight_decay = 0.1}), nullptr};
         s.sched = std::make_unique<nn::LinearWarmupLR>(*s.opt, 4, 0.25);
         return s;
       }},
  };
  return c;
}

void replay(DType dt, testing::Tol tol) {
  const Tensor x = fixture("X").to(dt), y = fixture("Y").to(dt);
  for (const auto& [name, make] : configs()) {
    SCOPED_TRACE(name + " " + std::string(dtype_name(dt)));
    const Tensor ref_w = fixture(name + "_W"), ref_b = fixture(name + "_b");
    const Tensor ref_lr = fixture(name + "_lr");
    ASSERT_EQ(ref_w.dim(), 3);
    const int64_t steps = ref_w.size(0);
    ASSERT_EQ(ref_b.size(0), steps);
    ASSERT_EQ(ref_lr.size(0), steps);
    Tensor w = fixture("W0").to(dt).requires_grad_();
    Tensor b = fixture("b0").to(dt).requires_grad_();
    Schedule s = make({w, b});
    for (int64_t t = 0; t < steps; ++t) {
      SCOPED_TRACE("step " + std::to_string(t + 1));
      s.opt->zero_grad();
      Tensor d = (x.matmul(w) + b).tanh() - y;
      (d * d).mean().backward();
      EXPECT_NEAR(s.opt->lr, ref_lr.select(0, t).item<double>(), 1e-15);
      s.opt->step();
      if (s.sched) s.sched->step();
      EXPECT_TRUE(all_close(w.detach().to(DType::f64), ref_w.select(0, t), tol));
      EXPECT_TRUE(all_close(b.detach().to(DType::f64), ref_b.select(0, t), tol));
    }
  }
}

TEST(NNOptimTorch, Float64MatchesPyTorch) { replay(DType::f64, {1e-9, 1e-12}); }

TEST(NNOptimTorch, Float32MatchesPyTorch) { replay(DType::f32, {1e-5, 1e-6}); }

TEST(NNOptimTorch, FixturesArePresentAndMoveTheParameters) {
  const Tensor w0 = fixture("W0");
  for (const auto& [name, make] : configs()) {
    const Tensor w = fixture(name + "_W");
    EXPECT_GT((w.select(0, w.size(0) - 1) - w0).abs().max().item<double>(), 1e-3) << name;
  }
}

}  // namespace
}  // namespace kiln
