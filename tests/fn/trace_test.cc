// Tracing: traced graphs match eager execution, round-trip through text, and reading traced data
// is a clear error.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;

// Traces f on `inputs`, checks the graph verifies and round-trips through text, then runs it (and
// its reparsed twin) on fresh random inputs of the same shapes and compares with eager f.
void check_trace(const fn::TracedFn& f, const std::vector<Tensor>& inputs, uint64_t seed,
                 const fn::TraceOptions& opt = {}) {
  ir::Graph g = fn::trace(f, inputs, opt);
  ir::verify(g);
  std::string text = ir::print(g);
  ir::Graph back = ir::parse(text);
  ir::verify(back);
  EXPECT_EQ(ir::print(back), text);
  std::vector<Tensor> fresh;
  for (size_t i = 0; i < inputs.size(); ++i)
    fresh.push_back(inputs[i].dtype() == DType::f32 ? random_tensor(inputs[i].shape(), DType::f32, seed + i) : inputs[i]);
  std::vector<Tensor> want = f(fresh);
  std::vector<Tensor> got = ir::run(g, fresh);
  std::vector<Tensor> got2 = ir::run(back, fresh);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(all_close(got[i], want[i])) << "output " << i << "\n" << text;
    EXPECT_TRUE(all_close(got2[i], want[i])) << "output " << i << " (reparsed)";
  }
}

TEST(Trace, ElementwiseAndReductions) {
  Tensor x = random_tensor({5, 7}, DType::f32, 1), y = random_tensor({7}, DType::f32, 2);
  check_trace([](const std::vector<Tensor>& a) {
    Tensor h = (a[0] * a[1]).tanh() + a[0].exp().sqrt();
    return std::vector<Tensor>{h.sum({1}), h.softmax(-1), h.max({0}, true), h.argmax(1)};
  }, {x, y}, 10);
}

TEST(Trace, ViewsAndMovement) {
  Tensor x = random_tensor({4, 6, 3}, DType::f32, 3);
  check_trace([](const std::vector<Tensor>& a) {
    Tensor t = a[0].transpose(0, 2).reshape({3, -1});
    Tensor s = a[0].slice(1, 1, 5, 2).permute({2, 0, 1}).unsqueeze(0).squeeze(0);
    Tensor e = a[0].select(2, 1).unsqueeze(1).expand({4, 3, 6});
    return std::vector<Tensor>{t.contiguous(), s * 2.0f, e + 1.0f, concat({a[0], a[0]}, 1).flatten()};
  }, {x}, 20);
}

TEST(Trace, MultiOutputSplitAndTopk) {
  Tensor x = random_tensor({6, 9}, DType::f32, 4);
  check_trace([](const std::vector<Tensor>& a) {
    auto parts = split(a[0], {2, 3, 4}, 1);
    auto [v, i] = topk(a[0], 3, 1);
    return std::vector<Tensor>{parts[0], parts[2] * parts[2], v, i};
  }, {x}, 30);
}

TEST(Trace, MatmulConvWithCapturedWeights) {
  Tensor w = random_tensor({8, 3, 3, 3}, DType::f32, 5), b = random_tensor({8}, DType::f32, 6);
  Tensor m = random_tensor({8 * 4 * 4, 10}, DType::f32, 7);
  Tensor x = random_tensor({2, 3, 6, 6}, DType::f32, 8);
  ir::Graph g;
  check_trace([&](const std::vector<Tensor>& a) {
    Tensor h = conv2d(a[0], w, b).relu();
    Tensor flat = h.reshape({h.size(0), -1});
    return std::vector<Tensor>{flat.matmul(m).log_softmax(1)};
  }, {x}, 40);
  g = fn::trace([&](const std::vector<Tensor>& a) { return conv2d(a[0], w, b).relu(); }, {x});
  EXPECT_EQ(g.constants().size(), 2u);
  EXPECT_EQ(g.parameter_count(), w.numel() + b.numel());
}

TEST(Trace, InPlaceIsRecordedOutOfPlace) {
  Tensor x = random_tensor({3, 4}, DType::f32, 9);
  check_trace([](const std::vector<Tensor>& a) {
    Tensor h = a[0].exp();
    h.mul_(a[0]);
    h.add_(a[0]);
    return std::vector<Tensor>{h};
  }, {x}, 50);
  EXPECT_KILN_ERROR(fn::trace([](const std::vector<Tensor>& a) {
    Tensor h = a[0].exp();
    Tensor v = h.slice(0, 0, 1);
    v.add_(a[0].slice(0, 0, 1));
    return h;
  }, {x}), "add_", "view");
}

TEST(Trace, ItemAndDataAreClearErrors) {
  Tensor x = random_tensor({3}, DType::f32, 10);
  EXPECT_KILN_ERROR(fn::trace([](const std::vector<Tensor>& a) {
    Tensor s = a[0].sum();
    if (s.item<float>() > 0) return s;
    return -s;
  }, {x}), "item", "op 'sum'", "while tracing");
  EXPECT_KILN_ERROR(fn::trace([](const std::vector<Tensor>& a) {
    (void)a[0].data<float>();
    return a[0];
  }, {x}), "data<T>()", "traced input 'x0'");
  // A tracer that escapes its trace cannot be computed with.
  Tensor escaped;
  fn::trace([&](const std::vector<Tensor>& a) { escaped = a[0].exp(); return escaped; }, {x});
  EXPECT_KILN_ERROR(escaped + x, "finished");
  EXPECT_FALSE(fn::is_tracing());
}

TEST(Trace, SymbolicBatch) {
  Tensor w = random_tensor({5, 4}, DType::f32, 11);
  Tensor x = random_tensor({3, 5}, DType::f32, 12);
  fn::TraceOptions opt;
  opt.batch_inputs = {0};
  opt.input_names = {"x"};
  ir::Graph g = fn::trace([&](const std::vector<Tensor>& a) {
    return (a[0].matmul(w) + 1.0f).relu().sum({1}, true);
  }, {x}, opt);
  EXPECT_EQ(ir::type_str(g.inputs()[0]->type()), "f32[batch, 5]");
  EXPECT_EQ(ir::type_str(g.outputs()[0]->type()), "f32[batch, 1]");
  for (int64_t b : {1, 3, 8}) {
    Tensor xb = random_tensor({b, 5}, DType::f32, 100 + static_cast<uint64_t>(b));
    EXPECT_TRUE(all_close(ir::run(g, {xb})[0], (xb.matmul(w) + 1.0f).relu().sum({1}, true)));
  }
  ir::Graph back = ir::parse(ir::print(g));
  EXPECT_EQ(ir::print(back), ir::print(g));
  // A function that bakes the example's batch size into a reshape cannot be symbolic.
  EXPECT_KILN_ERROR(fn::trace([](const std::vector<Tensor>& a) { return a[0].reshape({3, 5, 1}); }, {x}, opt),
                    "reshape", "batch");
}

TEST(Trace, OutputNamesAndConstantsOnly) {
  Tensor x = random_tensor({2, 2}, DType::f32, 13);
  fn::TraceOptions opt;
  opt.output_names = {"y"};
  ir::Graph g = fn::trace([](const std::vector<Tensor>& a) { return a[0] * scalar_tensor(3.0f); }, {x}, opt);
  EXPECT_EQ(g.outputs()[0]->name(), "y");
  EXPECT_TRUE(all_close(ir::run(g, {x})[0], x * 3.0f));
}

TEST(Trace, NnModuleForwardPass) {
  // A small CNN in eval mode: parameters and running statistics become the graph's constants.
  Generator gen(21);
  nn::Sequential model;
  model.add(std::make_shared<nn::Conv2d>(1, 4, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::BatchNorm2d>(4))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(4 * 8 * 8, 10, true, &gen));
  {  // one training step's worth of batch statistics so the running stats are not trivial
    NoGradGuard ng;
    model.train();
    model(random_tensor({6, 1, 8, 8}, DType::f32, 22));
  }
  model.eval();
  check_trace([&](const std::vector<Tensor>& x) { return std::vector<Tensor>{model(x[0])}; },
              {random_tensor({2, 1, 8, 8}, DType::f32, 23)}, 24);
}

}  // namespace
}  // namespace kiln
