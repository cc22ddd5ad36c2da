// The training step's gradient bookkeeping: leaves keep their first gradient without a copy when
// nothing else owns it (Note [Stealing the gradient] in src/autograd/engine.cc), and never share
// storage with each other, with a tensor a hook kept, or with a gradient the caller passed in.
#include "kiln/autograd.h"
#include "kiln/nn.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

TEST(NNTrainStep, SameGradientToTwoLeavesIsNotShared) {
  Tensor x = random_tensor({3, 4}, DType::f32, 1).requires_grad_();
  Tensor y = random_tensor({3, 4}, DType::f32, 2).requires_grad_();
  (x + y).sum().backward();  // add's rule hands one gradient to both
  ASSERT_TRUE(x.grad().defined() && y.grad().defined());
  EXPECT_NE(x.grad().storage().get(), y.grad().storage().get());
  {
    NoGradGuard ng;
    x.grad().mul_(5.0);
  }
  EXPECT_TRUE(all_close(y.grad(), ones({3, 4}), {0, 0}));
  EXPECT_TRUE(all_close(x.grad(), full({3, 4}, 5.0), {0, 0}));
}

TEST(NNTrainStep, GradientKeptByAHookOrTheCallerIsCopied) {
  Tensor x = random_tensor({5}, DType::f32, 3).requires_grad_();
  Tensor seen;
  x.register_hook([&](const Tensor& g) {
    seen = g;
    return Tensor();
  });
  (x * 2.0).sum().backward();
  ASSERT_TRUE(seen.defined());
  EXPECT_NE(x.grad().storage().get(), seen.storage().get());

  Tensor w = random_tensor({4}, DType::f32, 4).requires_grad_();
  Tensor gout = random_tensor({4}, DType::f32, 5);
  w.backward(gout);  // the leaf's gradient is the caller's tensor: it must be copied
  EXPECT_NE(w.grad().storage().get(), gout.storage().get());
  EXPECT_TRUE(all_close(w.grad(), gout, {0, 0}));
}

TEST(NNTrainStep, StepsMatchAcrossRepeatsAndAccumulate) {
  Generator gen(7);
  nn::Linear lin(6, 3, true, &gen);
  Tensor x = random_tensor({8, 6}, DType::f32, 6);
  Tensor y = randint(0, 3, {8}, DType::i64, &gen);
  nn::functional::cross_entropy(lin(x), y).backward();
  std::vector<Tensor> first;
  for (auto& p : lin.parameters()) first.push_back(p.grad().clone());
  // A second backward without zero_grad accumulates: exactly twice the first gradients.
  nn::functional::cross_entropy(lin(x), y).backward();
  auto ps = lin.parameters();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(all_close(ps[i].grad(), first[i] * 2.0, {1e-6, 1e-7}));
  // zero_grad then backward: the first gradients again, in fresh (unshared) storage.
  lin.zero_grad();
  nn::functional::cross_entropy(lin(x), y).backward();
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_TRUE(all_close(ps[i].grad(), first[i], {1e-6, 1e-7}));
    EXPECT_NE(ps[i].grad().storage().get(), first[i].storage().get());
  }
}

}  // namespace
}  // namespace kiln
