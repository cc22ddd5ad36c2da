// The tape and the engine: leaves and grad(), grad_fn names, backward with explicit gradients,
// autograd::grad, accumulation, retain_graph, create_graph (higher order), detach, NoGradGuard,
// hooks, reentrant backward, custom Functions and anomaly mode.
#include <cmath>
#include <thread>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

Tensor f64(std::vector<double> v, Shape s) { return from_vector<double>(v, s); }

TEST(Autograd, LeafAndGradFn) {
  Tensor x = random_tensor({3, 4}, DType::f32, 1).requires_grad_();
  EXPECT_TRUE(x.requires_grad());
  EXPECT_TRUE(x.is_leaf());
  EXPECT_EQ(x.grad_fn(), nullptr);
  Tensor y = (x * x).sum();
  EXPECT_FALSE(y.is_leaf());
  ASSERT_NE(y.grad_fn(), nullptr);
  EXPECT_EQ(y.grad_fn()->name(), "SumBackward");
  EXPECT_EQ((x * x).grad_fn()->name(), "MulBackward");
  EXPECT_EQ(x.log_softmax(1).grad_fn()->name(), "LogSoftmaxBackward");
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), (x.detach() * 2.0)));
}

TEST(Autograd, IntegerTensorsCannotRequireGrad) {
  Tensor i = zeros({3}, DType::i64);
  EXPECT_KILN_ERROR(i.requires_grad_(), "only floating tensors can require grad", "i64");
}

TEST(Autograd, AccumulatesAcrossBackwardCalls) {
  Tensor x = f64({1, 2, 3}, {3}).requires_grad_();
  (x * 3.0).sum().backward();
  (x * x).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), f64({3 + 2, 3 + 4, 3 + 6}, {3})));
  x.set_grad({});
  EXPECT_FALSE(x.grad().defined());
}

TEST(Autograd, SameTensorUsedTwiceSumsGradients) {
  Tensor x = f64({1, -2}, {2}).requires_grad_();
  Tensor y = x + x;  // add's rule hands the same gradient to both inputs
  (y * x).sum().backward();
  EXPECT_TRUE(all_close(x.grad(), f64({4, -8}, {2})));
}

TEST(Autograd, BackwardOfNonScalarNeedsGradient) {
  Tensor x = random_tensor({2, 3}, DType::f64, 2).requires_grad_();
  Tensor y = x * 2.0;
  EXPECT_KILN_ERROR(y.backward(), "one-element output", "[2, 3]");
  Tensor g = random_tensor({2, 3}, DType::f64, 3);
  y.backward(g);
  EXPECT_TRUE(all_close(x.grad(), g * 2.0));
  Tensor z = random_tensor({2, 3}, DType::f64, 4);
  EXPECT_KILN_ERROR(z.backward(), "does not require grad");
}

TEST(Autograd, GradFunctionDoesNotTouchLeaves) {
  Tensor a = random_tensor({4}, DType::f64, 5).requires_grad_();
  Tensor b = random_tensor({4}, DType::f64, 6).requires_grad_();
  Tensor h = a * b;  // non-leaf input
  Tensor y = (h.sin() * a).sum();
  auto g = autograd::grad({y}, {a, h}, {}, /*retain_graph=*/true);
  Tensor ad = a.detach(), bd = b.detach(), hd = h.detach();
  EXPECT_TRUE(all_close(g[0], hd.cos() * bd * ad + hd.sin()));
  EXPECT_TRUE(all_close(g[1], hd.cos() * ad));
  EXPECT_FALSE(a.grad().defined());
  Tensor unused = random_tensor({2}, DType::f64, 7).requires_grad_();
  EXPECT_KILN_ERROR(autograd::grad({y}, {unused}, {}, true), "was not used", "allow_unused");
  auto u = autograd::grad({y}, {unused}, {}, true, false, /*allow_unused=*/true);
  EXPECT_FALSE(u[0].defined());
}

TEST(Autograd, SecondBackwardNeedsRetainGraph) {
  Tensor x = random_tensor({3}, DType::f64, 8).requires_grad_();
  Tensor y = x.exp().sum();
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_TRUE(all_close(x.grad(), x.detach().exp() * 2.0));
  EXPECT_KILN_ERROR(y.backward(), "second time", "retain_graph=true", "ExpBackward");
}

TEST(Autograd, CreateGraphGivesHigherOrderGradients) {
  Tensor x = f64({0.3, -0.7, 1.1}, {3}).requires_grad_();
  Tensor y = (x * x * x).sum();  // y' = 3x^2, y'' = 6x, y''' = 6
  auto g1 = autograd::grad({y}, {x}, {}, false, /*create_graph=*/true);
  EXPECT_TRUE(g1[0].requires_grad());
  EXPECT_TRUE(all_close(g1[0].detach(), x.detach() * x.detach() * 3.0));
  auto g2 = autograd::grad({g1[0].sum()}, {x}, {}, false, true);
  EXPECT_TRUE(all_close(g2[0].detach(), x.detach() * 6.0));
  auto g3 = autograd::grad({g2[0].sum()}, {x}, {}, false, true);
  EXPECT_TRUE(all_close(g3[0].detach(), full({3}, 6.0, DType::f64)));
  // backward(create_graph) leaves a differentiable grad in the leaf.
  Tensor z = x.tanh().sum();
  z.backward(Tensor(), false, true);
  EXPECT_TRUE(x.grad().requires_grad());
}

TEST(Autograd, DetachAndNoGradStopRecording) {
  Tensor x = random_tensor({3}, DType::f32, 9).requires_grad_();
  Tensor d = x.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.data_ptr(), x.data_ptr());
  {
    NoGradGuard g;
    EXPECT_FALSE(is_grad_enabled());
    Tensor y = x * 2.0f;
    EXPECT_FALSE(y.requires_grad());
    {
      EnableGradGuard e;
      EXPECT_TRUE((x * 2.0f).requires_grad());
    }
  }
  EXPECT_TRUE(is_grad_enabled());
  // Grad mode is per thread.
  bool other = true;
  {
    NoGradGuard g;
    std::thread t([&] { other = is_grad_enabled(); });
    t.join();
  }
  EXPECT_TRUE(other);
}

TEST(Autograd, IntegerOutputsHaveNoHistory) {
  Tensor x = random_tensor({3, 4}, DType::f32, 10).requires_grad_();
  Tensor i = x.argmax(1);
  EXPECT_FALSE(i.requires_grad());
  EXPECT_FALSE(x.gt(x * 0.5f).requires_grad());
  EXPECT_FALSE(x.to(DType::i32).requires_grad());
}

TEST(Autograd, Hooks) {
  Tensor x = f64({1, 2}, {2}).requires_grad_();
  Tensor h = x * 3.0;
  Tensor seen;
  h.register_hook([&](const Tensor& g) {
    seen = g;
    return g * 10.0;  // replaces the gradient flowing on
  });
  x.register_hook([](const Tensor& g) { return g + 1.0; });
  h.retain_grad();
  (h * h).sum().backward();
  ASSERT_TRUE(seen.defined());
  EXPECT_TRUE(all_close(seen, f64({6, 12}, {2})));
  EXPECT_TRUE(all_close(h.grad(), f64({60, 120}, {2})));
  EXPECT_TRUE(all_close(x.grad(), f64({181, 361}, {2})));
}

TEST(Autograd, ReentrantBackwardInsideAHook) {
  Tensor x = f64({0.5, 1.5}, {2}).requires_grad_();
  Tensor w = f64({2, 3}, {2}).requires_grad_();
  Tensor h = x * w;
  Tensor inner_grad;
  h.register_hook([&](const Tensor& g) {
    // A nested backward on an unrelated graph while the outer one runs (backward runs without
    // recording unless create_graph, as in PyTorch, so the hook turns recording on).
    EnableGradGuard enable;
    Tensor z = (w * w).sum();
    inner_grad = autograd::grad({z}, {w})[0];
    return g;
  });
  h.sum().backward();
  EXPECT_TRUE(all_close(inner_grad, f64({4, 6}, {2})));
  EXPECT_TRUE(all_close(x.grad(), f64({2, 3}, {2})));
}

TEST(Autograd, SavedTensorsAreFreedAfterBackward) {
  Tensor x = random_tensor({64}, DType::f64, 11).requires_grad_();
  std::weak_ptr<StorageImpl> saved;
  Tensor y;
  {
    Tensor e = x.exp();  // saved by ExpBackward (its output) and read by mul
    saved = e.storage();
    y = (e * x).sum();
  }
  EXPECT_FALSE(saved.expired());
  y.backward();
  EXPECT_TRUE(saved.expired()) << "the saved exp output outlived backward without retain_graph";
}

TEST(Autograd, LongChainDoesNotRecurse) {
  Tensor x = f64({1.0}, {1}).requires_grad_();
  Tensor y = x;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  y.sum().backward();
  EXPECT_TRUE(all_close(x.grad(), f64({1.0}, {1})));
}

TEST(Autograd, AnomalyModeNamesTheOpAndSite) {
  Tensor x = f64({0.0, 1.0}, {2}).requires_grad_();
  Tensor y = x.sqrt().sum();  // d sqrt at 0 is inf
  {
    autograd::DetectAnomalyGuard g;
    EXPECT_KILN_ERROR(y.backward(Tensor(), true), "SqrtBackward", "engine_test.cc:", "NaN or Inf");
  }
  y.backward();  // off again: no error, inf in the gradient
  EXPECT_TRUE(std::isinf(x.grad().data<double>()[0]));
}

// ---- custom functions -----------------------------------------------------------------------------
struct CubeFn : autograd::Function<CubeFn> {
  static std::string name() { return "Cube"; }
  static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& in) {
    ctx.save_for_backward({in[0]});
    return {in[0] * in[0] * in[0], in[0].argmax(0)};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& g) {
    Tensor x = ctx.saved_tensors()[0];
    return {g[0] * x * x * 3.0};
  }
};

TEST(Autograd, CustomFunction) {
  Tensor x = f64({1, -2, 0.5}, {3}).requires_grad_();
  auto outs = CubeFn::apply({x});
  EXPECT_EQ(outs[0].grad_fn()->name(), "CubeBackward");
  EXPECT_FALSE(outs[1].requires_grad());
  outs[0].sum().backward();
  EXPECT_TRUE(all_close(x.grad(), f64({3, 12, 0.75}, {3})));
  auto r = autograd::gradcheck([](const std::vector<Tensor>& in) { return std::vector<Tensor>{CubeFn::apply(in)[0]}; },
                               {random_tensor({4}, DType::f64, 12)});
  EXPECT_TRUE(r) << r.message;
}

TEST(Autograd, CustomFunctionSavedTensorVersionCheck) {
  Tensor x0 = f64({1, 2}, {2}).requires_grad_();
  Tensor x = x0 * 1.0;
  auto y = CubeFn::apply({x})[0];
  x.mul_(f64({2, 2}, {2}));
  EXPECT_KILN_ERROR(y.sum().backward(), "Cube", "mul_", "engine_test.cc:", "version 0", "version 1");
}

struct ScaleInPlace : autograd::Function<ScaleInPlace> {
  static std::string name() { return "ScaleInPlace"; }
  static std::vector<Tensor> forward(autograd::FunctionCtx& ctx, const std::vector<Tensor>& in) {
    Tensor x = in[0];
    x.mul_(f64({2.0}, {1}));
    ctx.mark_dirty({in[0]});
    return {x};
  }
  static std::vector<Tensor> backward(autograd::FunctionCtx&, const std::vector<Tensor>& g) { return {g[0] * 2.0}; }
};

TEST(Autograd, CustomFunctionMarkDirtyRebasesHistory) {
  Tensor a = f64({1, 2}, {2}).requires_grad_();
  Tensor b = a * 3.0;
  ScaleInPlace::apply({b});
  EXPECT_EQ(b.grad_fn()->name(), "ScaleInPlaceBackward");
  b.sum().backward();
  EXPECT_TRUE(all_close(a.grad(), f64({6, 6}, {2})));
  EXPECT_KILN_ERROR(ScaleInPlace::apply({a}), "leaf that requires grad");
}

}  // namespace
}  // namespace kiln
