// Version counters and in-place ops under autograd: the saved-tensor error names both ops and
// both call sites; safe in-place just works; leaves and views are protected; matmul_.
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;


TEST(Inplace, EveryInplaceOpBumpsTheVersion) {
  Tensor t = random_tensor({3, 3}, DType::f32, 1);
  Tensor o = random_tensor({3, 3}, DType::f32, 2);
  uint64_t v = t.version();
  auto step = [&](const char* what) {
    EXPECT_EQ(t.version(), ++v) << what;
    EXPECT_STREQ(t.storage()->last_write().op, what);
  };
  t.add_(o); step("add_");
  t.sub_(o); step("sub_");
  t.mul_(o); step("mul_");
  t.div_(o); step("div_");
  t.relu_(); step("relu_");
  t.clamp_(-1.0, 1.0); step("clamp_");
  t.sigmoid_(); step("sigmoid_");
  t.tanh_(); step("tanh_");
  t.copy_(o); step("copy_");
  t.zero_(); step("fill_");
  t.fill_(2.0); step("fill_");
  t.cumsum_(1); step("cumsum_");
  t.matmul_(o); step("matmul_");
}

TEST(Inplace, InplaceResultsMatchOutOfPlace) {
  Tensor x = random_tensor({4, 5}, DType::f64, 3);
  EXPECT_TRUE(all_close(x.clone().relu_(), x.relu()));
  EXPECT_TRUE(all_close(x.clone().sigmoid_(), x.sigmoid()));
  EXPECT_TRUE(all_close(x.clone().tanh_(), x.tanh()));
  EXPECT_TRUE(all_close(x.clone().clamp_(-0.5, 0.7), x.clip(-0.5, 0.7)));
  EXPECT_TRUE(all_close(x.clone().cumsum_(1), cumsum(x, 1)));
  EXPECT_TRUE(all_close(x.clone().cumsum_(0), cumsum(x, 0)));
}

TEST(Inplace, SavedTensorModifiedNamesBothOpsSitesAndFix) {
  Tensor x = random_tensor({2, 3}, DType::f32, 4).requires_grad_();
  Tensor y = x.sigmoid();  // saves its output
  const int sig_line = __LINE__ - 1;
  y.mul_(full({2, 3}, 3.0f));
  const int mul_line = __LINE__ - 1;
  EXPECT_KILN_ERROR(y.sum().backward(), "'sigmoid'", "SigmoidBackward", "inplace_test.cc:" + std::to_string(sig_line),
                    "mul_", "inplace_test.cc:" + std::to_string(mul_line), "f32[2, 3]", "version 0", "version 1",
                    ".clone()", "out-of-place");
}

TEST(Inplace, ReluAfterMatmulJustWorks) {
  Tensor a = random_tensor({3, 4}, DType::f64, 5).requires_grad_();
  Tensor w = random_tensor({4, 2}, DType::f64, 6).requires_grad_();
  Tensor h = a.matmul(w);
  h.relu_();  // matmul's backward needs a and w, not h
  EXPECT_EQ(h.grad_fn()->name(), "ReluBackward");
  h.sum().backward();
  Tensor mask = (a.detach().matmul(w.detach()).gt(zeros({1}, DType::f64))).to(DType::f64);
  EXPECT_TRUE(all_close(a.grad(), mask.matmul(w.detach().t())));
  EXPECT_TRUE(all_close(w.grad(), a.detach().t().matmul(mask)));
}

TEST(Inplace, SafeInplaceChainsGiveRightGradients) {
  Tensor x = random_tensor({5}, DType::f64, 7).requires_grad_();
  Tensor w = random_tensor({5}, DType::f64, 8).requires_grad_();
  Tensor h = x * 1.0;
  h.add_(w);
  h.mul_(full({5}, 3.0, DType::f64));
  h.tanh_();
  h.sum().backward();
  Tensor t = ((x.detach() + w.detach()) * 3.0).tanh();
  Tensor expect = (1.0 - t * t) * 3.0;
  EXPECT_TRUE(all_close(x.grad(), expect));
  EXPECT_TRUE(all_close(w.grad(), expect));
}

TEST(Inplace, OperandNeedingOldSelfIsRefused) {
  Tensor x = random_tensor({3}, DType::f64, 9).requires_grad_();
  Tensor w = random_tensor({3}, DType::f64, 10).requires_grad_();
  Tensor h = x * 2.0;
  EXPECT_KILN_ERROR(h.mul_(w), "mul_", "inplace_test.cc:", "old value", "out-of-place", ".clone()");
}

TEST(Inplace, LeafRequiringGradIsRefusedOutsideNoGrad) {
  Tensor w = random_tensor({3}, DType::f32, 11).requires_grad_();
  EXPECT_KILN_ERROR(w.add_(ones({3})), "add_", "leaf that requires grad", "NoGradGuard");
  const uint64_t v = w.version();
  {
    NoGradGuard g;
    w.sub_(ones({3}));
  }
  EXPECT_EQ(w.version(), v + 1);
  EXPECT_TRUE(w.is_leaf());
}

TEST(Inplace, ViewOfTensorRequiringGradIsRefusedAndBaseStaysCorrect) {
  Tensor x = random_tensor({4, 3}, DType::f64, 12).requires_grad_();
  Tensor base = x * 2.0;
  Tensor v = base.slice(0, 1, 3);
  EXPECT_KILN_ERROR(v.mul_(full({2, 3}, 3.0, DType::f64)), "view", "mul_", "out-of-place");
  // Nothing was written: the base and the view still give the right gradients.
  EXPECT_EQ(base.version(), 0u);
  (base.sum() + (v * v).sum()).backward();
  Tensor expect = full({4, 3}, 2.0, DType::f64);
  Tensor xd = x.detach();
  for (int64_t r = 1; r < 3; ++r)
    for (int64_t c = 0; c < 3; ++c)
      expect.data<double>()[r * 3 + c] += 8.0 * xd.data<double>()[r * 3 + c];
  EXPECT_TRUE(all_close(x.grad(), expect));
  // A view written in place with an operand that requires grad is refused too (it would need the
  // base's history rewritten).
  Tensor buf = zeros({4, 3}, DType::f64);
  Tensor row = buf.select(0, 2);
  Tensor src = random_tensor({3}, DType::f64, 13).requires_grad_();
  EXPECT_KILN_ERROR(row.copy_(src), "copy_", "view");
  // Without autograd involvement views are written freely.
  row.copy_(src.detach());
  EXPECT_TRUE(all_close(buf.select(0, 2), src.detach()));
}

TEST(Inplace, MatmulInplaceEqualsOutOfPlace) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t m : {1, 7, 300, 513}) {
      Tensor a = random_tensor({m, 65}, t, 14 + static_cast<uint64_t>(m));
      Tensor b = random_tensor({65, 65}, t, 15);
      Tensor expect = a.matmul(b);
      Tensor c = a.clone();
      c.matmul_(b);
      EXPECT_TRUE(all_close(c, expect, {1e-5, 1e-5})) << dtype_name(t) << " m=" << m;
    }
  }
  // Batched and non-contiguous a, and a.matmul_(a).
  Tensor a3 = random_tensor({2, 5, 4}, DType::f64, 16);
  Tensor b = random_tensor({4, 4}, DType::f64, 17);
  Tensor e3 = a3.matmul(b);
  a3.matmul_(b);
  EXPECT_TRUE(all_close(a3, e3));
  Tensor big = random_tensor({6, 8}, DType::f64, 18);
  Tensor view = big.slice(1, 0, 8, 2);  // non-contiguous [6, 4]
  Tensor ev = view.matmul(b);
  view.matmul_(b);
  EXPECT_TRUE(all_close(view, ev));
  Tensor sq = random_tensor({5, 5}, DType::f64, 19);
  Tensor esq = sq.matmul(sq);
  sq.matmul_(sq);
  EXPECT_TRUE(all_close(sq, esq));
  EXPECT_KILN_ERROR(sq.matmul_(random_tensor({5, 3}, DType::f64, 20)), "matmul_", "square");
}

TEST(Inplace, MatmulInplaceAutograd) {
  Tensor x = random_tensor({3, 4}, DType::f64, 21).requires_grad_();
  Tensor b = random_tensor({4, 4}, DType::f64, 22);
  Tensor a = x * 1.5;
  a.matmul_(b);
  EXPECT_EQ(a.grad_fn()->name(), "MatmulBackward");
  Tensor g = random_tensor({3, 4}, DType::f64, 23);
  a.backward(g);
  EXPECT_TRUE(all_close(x.grad(), g.matmul(b.t()) * 1.5));
  // B requiring grad needs the old A: refused with the item-4 style explanation.
  Tensor bw = b.clone().requires_grad_();
  Tensor a2 = x * 1.0;
  EXPECT_KILN_ERROR(a2.matmul_(bw), "matmul_", "old value", "overwrite", "'matmul'", ".clone()");
}

TEST(Inplace, MatmulInplaceLargeMatchesOutOfPlace) {
  // Larger than one 256-row panel, so the panel loop and its O(k) scratch are exercised; speed is
  // bench/ops_bench.cc's BM_matmul_inplace_f32 against BM_matmul_f32, not a timed unit test.
  // The last panel's single row takes the GEMM's few-rows kernel, which sums in another order than
  // the out-of-place product's tile: both are checked against float64 at a 130-deep f32 tolerance.
  Tensor a = random_tensor({513, 130}, DType::f32, 24);
  Tensor b = random_tensor({130, 130}, DType::f32, 25);
  Tensor want = a.to(DType::f64).matmul(b.to(DType::f64));
  Tensor c = a.clone();
  c.matmul_(b);
  EXPECT_TRUE(all_close(c.to(DType::f64), want, {2e-5, 2e-5}));
  EXPECT_TRUE(all_close(a.matmul(b).to(DType::f64), want, {2e-5, 2e-5}));
}

TEST(Inplace, ScalarFormsMatchTensorFormsAndAreVersionChecked) {
  Tensor x = random_tensor({7, 3}, DType::f64, 31).requires_grad_();
  Tensor y = x.sigmoid();
  Tensor z = y.clone();
  z.mul_(2).add_(1.5).sub_(0.5).div_(4);
  EXPECT_TRUE(all_close(z, (y * 2 + 1.5 - 0.5) / 4));
  z.sum().backward();
  Tensor s = x.detach().sigmoid();
  EXPECT_TRUE(all_close(x.grad(), s * (1 - s) * 0.5));
  Tensor y2 = x.sigmoid();
  y2.mul_(2);  // sigmoid saved its output: backward must refuse
  EXPECT_KILN_ERROR(y2.sum().backward(), "sigmoid", "mul_", "inplace_test.cc", "clone()");
}

TEST(Gradcheck, AcceptsSingleOutputFunctions) {
  Tensor x = random_tensor({3, 4}, DType::f64, 32), w = random_tensor({4, 2}, DType::f64, 33);
  bool ok = autograd::gradcheck([](const std::vector<Tensor>& in) { return in[0].matmul(in[1]).tanh().sum(); }, {x, w});
  EXPECT_TRUE(ok);
}

}  // namespace
}  // namespace kiln
