// A custom differentiable function with kiln::autograd::Function: a numerically stable
// "softclip" (x / (1 + |x|)) whose backward is written by hand, checked with gradcheck, then used
// in a tiny optimisation loop.
#include <cstdio>

#include <kiln/kiln.h>

using kiln::Tensor;
namespace ag = kiln::autograd;

struct SoftClip : ag::Function<SoftClip> {
  static std::string name() { return "SoftClip"; }
  static std::vector<Tensor> forward(ag::FunctionCtx& ctx, const std::vector<Tensor>& in) {
    const Tensor& x = in[0];
    Tensor denom = x.abs() + 1.0;
    ctx.save_for_backward({denom});
    return {x / denom};
  }
  // d/dx x / (1 + |x|) = 1 / (1 + |x|)^2
  static std::vector<Tensor> backward(ag::FunctionCtx& ctx, const std::vector<Tensor>& grad_out) {
    Tensor denom = ctx.saved_tensors()[0];
    return {grad_out[0] / (denom * denom)};
  }
};

int main() {
  // 1. The hand-written backward agrees with finite differences.
  auto check = ag::gradcheck([](const std::vector<Tensor>& in) { return SoftClip::apply(in); },
                             {kiln::randn({4, 3}, kiln::DType::f64)});
  std::printf("gradcheck: %s %s\n", check ? "ok" : "FAILED", check.message.c_str());

  // 2. Fit w so that softclip(x @ w) matches a target.
  Tensor x = kiln::randn({16, 3});
  Tensor target = kiln::full({16, 1}, 0.25);
  Tensor w = kiln::randn({3, 1}).requires_grad_();
  for (int step = 0; step < 200; ++step) {
    Tensor y = SoftClip::apply({x.matmul(w)})[0];
    Tensor loss = ((y - target) * (y - target)).mean();
    loss.backward();
    {
      kiln::NoGradGuard no_grad;
      w.sub_(w.grad() * 0.5f);
    }
    w.set_grad({});
    if (step % 50 == 0 || step == 199) std::printf("step %3d  loss %.6f\n", step, loss.item<float>());
  }
  return check ? 0 : 1;
}
