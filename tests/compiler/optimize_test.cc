// The compiler's pipelines on whole models: each model is built here as kiln IR, exported to ONNX
// and imported back (so the graph has the importer's shape), then optimized at -O0..-O3; the
// optimized graph's outputs must equal the unoptimized graph's within f32 tolerance, and the
// passes each level promises must have fired (no batch_norm left at -O2, conv/gemm + bias +
// activation + residual fused, fewer nodes, ...).
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <unistd.h>

#include "kiln/compiler.h"
#include "kiln/ir.h"
#include "kiln/onnx.h"
#include "kiln/ops/dispatch.h"
#include "support/testing.h"

// GCC 12 misreads std::string concatenations inlined into these tests ("w" + std::to_string(seed))
// as overlapping copies of 2^63 bytes (-Wrestrict; GCC bug 105329), depending on what else the file
// inlines.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

namespace kiln {
namespace {

using testing::random_positive;
using testing::random_tensor;

// Reassociation tolerance: bn_fold rounds scaled weights once to f32 and fold/reshape change no
// arithmetic, so results agree to a few f32 ulps of the sums' magnitude.
constexpr testing::Tol kTol{1e-4, 1e-4};

ir::Value* node(ir::Graph& g, const std::string& op_name, std::vector<ir::Value*> ins, const Attrs& a = {}) {
  return g.add_node(op(op_name), std::move(ins), a)->output();
}

ir::Value* bn(ir::Graph& g, ir::Value* x, int64_t c, uint64_t seed) {
  return node(g, "batch_norm",
              {x, g.add_constant("", random_tensor({c}, DType::f32, seed, -0.5, 0.5)),
               g.add_constant("", random_positive({c}, DType::f32, seed + 1, 0.5, 2.0)),
               g.add_constant("", random_tensor({c}, DType::f32, seed + 2, 0.5, 1.5)),
               g.add_constant("", random_tensor({c}, DType::f32, seed + 3))},
              {{"eps", 1e-5}});
}

// Every output of g on `in` agrees with `want` to kTol; `what` names the graph in a failure.
void expect_outputs(const ir::Graph& g, const std::vector<Tensor>& in, const std::vector<Tensor>& want,
                    const std::string& what) {
  const std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << what << " " << i;
}

// g through the whole pipeline at -O`level`, verified after each pass, still gives `want`.
void expect_optimized_outputs(ir::Graph g, int level, const std::vector<Tensor>& in, const std::vector<Tensor>& want) {
  compiler::PassOptions opts;
  opts.opt_level = level;
  opts.verify_each = true;
  compiler::optimize(g, opts);
  expect_outputs(g, in, want, "-O" + std::to_string(level));
}

// conv-bn-relu, conv-bn + residual add, relu, flatten through a reshape chain, a linear head
// whose weight is transposed by a constant permute, and a no-op reshape.
ir::Graph make_cnn() {
  ir::Graph g;
  g.name = "cnn";
  ir::Value* x = g.add_input("x", {DType::f32, {2, 3, 7, 7}});
  Attrs conv{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  ir::Value* c1 = node(g, "conv2d", {x, g.add_constant("w1", random_tensor({8, 3, 3, 3}, DType::f32, 1, -0.5, 0.5)),
                                     g.add_constant("b1", random_tensor({8}, DType::f32, 2))}, conv);
  ir::Value* r1 = node(g, "relu", {bn(g, c1, 8, 10)});
  ir::Value* c2 = node(g, "conv2d", {r1, g.add_constant("w2", random_tensor({8, 8, 3, 3}, DType::f32, 3, -0.3, 0.3)),
                                     nullptr}, conv);
  ir::Value* res = node(g, "add", {bn(g, c2, 8, 20), r1});
  ir::Value* r2 = node(g, "relu", {res});
  ir::Value* same = node(g, "reshape", {r2}, {{"shape", std::vector<int64_t>{2, 8, 7, 7}}});
  ir::Value* f1 = node(g, "reshape", {same}, {{"shape", std::vector<int64_t>{2, 8, 49}}});
  ir::Value* f2 = node(g, "reshape", {f1}, {{"shape", std::vector<int64_t>{2, 392}}});
  ir::Value* wt = node(g, "permute", {g.add_constant("wh", random_tensor({5, 392}, DType::f32, 4, -0.1, 0.1))},
                       {{"dims", std::vector<int64_t>{1, 0}}});
  ir::Value* logits = node(g, "gemm", {f2, wt, g.add_constant("bh", random_tensor({5}, DType::f32, 5))});
  g.add_output(logits);
  return g;
}

// matmul, bn, relu, gemm(trans_b, beta 0.5) + bn, sigmoid, a permute pair that cancels, x * 1.
ir::Graph make_mlp() {
  ir::Graph g;
  g.name = "mlp";
  ir::Value* x = g.add_input("x", {DType::f32, {6, 17}});
  ir::Value* h = node(g, "matmul", {x, g.add_constant("w1", random_tensor({17, 32}, DType::f32, 30, -0.4, 0.4))});
  h = node(g, "relu", {bn(g, h, 32, 40)});
  h = node(g, "gemm", {h, g.add_constant("w2", random_tensor({11, 32}, DType::f32, 31, -0.3, 0.3)),
                       g.add_constant("b2", random_tensor({11}, DType::f32, 32))},
           {{"trans_b", true}, {"beta", 0.5}});
  h = node(g, "sigmoid", {bn(g, h, 11, 50)});
  h = node(g, "permute", {h}, {{"dims", std::vector<int64_t>{1, 0}}});
  h = node(g, "permute", {h}, {{"dims", std::vector<int64_t>{1, 0}}});
  h = node(g, "mul", {h, g.add_constant("one", full({}, 1.0, TensorOptions(DType::f32)))});
  g.add_output(node(g, "tanh", {h}));
  return g;
}

// Through ONNX when the onnx layer is built: export, then import the file.
ir::Graph via_onnx(const ir::Graph& g) {
#if defined(KILN_HAS_ONNX)
  auto dir = std::filesystem::temp_directory_path() / ("kiln_opt_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::string path = (dir / (g.name + ".onnx")).string();
  onnx::save(g, path);
  ir::Graph out = onnx::import_model(path).graph;
  std::filesystem::remove_all(dir);
  return out;
#else
  return g.clone();
#endif
}

int count_op(const ir::Graph& g, const std::string& name) {
  int n = 0;
  for (const ir::Node* nd : g.nodes()) n += nd->op().name() == name;
  return n;
}

void check_levels(const ir::Graph& model, const std::vector<Tensor>& inputs, int fused_nodes) {
  ir::Graph base = via_onnx(model);
  ir::verify(base);
  std::vector<Tensor> want = ir::run(base, inputs);
  size_t prev_nodes = base.num_nodes() + 1;
  for (int level = 0; level <= 3; ++level) {
    SCOPED_TRACE("-O" + std::to_string(level) + " on " + model.name);
    ir::Graph g = base.clone();
    compiler::PassOptions opts;
    opts.opt_level = level;
    opts.verify_each = true;
    auto reports = compiler::optimize(g, opts);
    ir::verify(g);
    std::vector<Tensor> got = ir::run(g, inputs);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << ir::print(g);
    EXPECT_LE(g.num_nodes(), prev_nodes);
    prev_nodes = g.num_nodes();
    if (level == 0) {
      EXPECT_EQ(g.num_nodes(), base.num_nodes());
    }
    if (level >= 2) {
      EXPECT_EQ(count_op(g, "batch_norm"), 0) << ir::print(g);
      EXPECT_EQ(count_op(g, "permute"), 0) << ir::print(g);
      EXPECT_EQ(count_op(g, "fused_conv2d") + count_op(g, "fused_gemm"), fused_nodes) << ir::print(g);
      EXPECT_EQ(count_op(g, "relu"), 0) << ir::print(g);
      EXPECT_LT(g.num_nodes(), base.num_nodes());
      bool any_changed = false;
      for (const auto& r : reports) {
        EXPECT_FALSE(r.report.empty()) << r.pass;
        any_changed = any_changed || r.changed;
      }
      EXPECT_TRUE(any_changed);
    }
  }
}

TEST(Optimize, CnnConvBnReluResidualMatchesAtEveryLevel) {
  check_levels(make_cnn(), {random_tensor({2, 3, 7, 7}, DType::f32, 100)}, 2);
}

TEST(Optimize, MlpMatchesAtEveryLevel) { check_levels(make_mlp(), {random_tensor({6, 17}, DType::f32, 101)}, 2); }

TEST(Optimize, NonContiguousInputsAgree) {
  ir::Graph g = make_mlp();
  Tensor x = testing::noncontiguous(random_tensor({6, 17}, DType::f32, 102));
  auto want = ir::run(g, {x});
  compiler::PassOptions opts;
  opts.opt_level = 3;
  compiler::optimize(g, opts);
  EXPECT_TRUE(testing::all_close(ir::run(g, {x})[0], want[0], kTol));
}

TEST(Optimize, PipelinesAndBisection) {
  EXPECT_TRUE(compiler::pipeline(0).empty());
  EXPECT_EQ(compiler::pipeline(1), (std::vector<std::string>{"identity", "dce", "cse"}));
  auto o2 = compiler::pipeline(2);
  for (const char* p : {"fold", "reshape", "bn_fold", "epilogue"})
    EXPECT_NE(std::find(o2.begin(), o2.end(), p), o2.end()) << p;
  EXPECT_KILN_ERROR(compiler::pipeline(4), "-O4");
  ir::Graph g = make_cnn();
  compiler::PassOptions opts;
  opts.disabled = {"bn_fold"};
  compiler::optimize(g, opts);
  EXPECT_EQ(count_op(g, "batch_norm"), 2);
  opts.disabled = {"no_such_pass"};
  EXPECT_KILN_ERROR(compiler::optimize(g, opts), "unknown pass 'no_such_pass'");
}

TEST(Optimize, ReportsNameWhatChanged) {
  ir::Graph g = make_mlp();
  auto reps = compiler::run_passes(g, {"bn_fold", "reshape", "identity", "dce"}, true, true);
  ASSERT_EQ(reps.size(), 4u);
  EXPECT_TRUE(reps[0].changed);
  EXPECT_NE(reps[0].report.find("bn_fold: folded 2:"), std::string::npos) << reps[0].report;
  EXPECT_NE(reps[0].report.find("batch_norm"), std::string::npos) << reps[0].report;
  EXPECT_TRUE(reps[1].changed) << reps[1].report;
  EXPECT_NE(reps[2].report.find("mul"), std::string::npos) << reps[2].report;
  EXPECT_EQ(reps[3].graph_after, ir::print(g));
  EXPECT_KILN_ERROR(compiler::run_passes(g, {"dce", "bogus"}), "unknown pass 'bogus'");
}

// Note [Gather of one index]: a constant 0-d index on a static axis becomes a select view; a 1-D
// index, an index out of range, and a symbolic axis stay gathers. Results are unchanged.
TEST(Optimize, GatherOfOneConstantIndexBecomesASelect) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 5, 6}});
  auto gather = [&](std::vector<int64_t> index, Shape shape, int64_t axis) {
    return node(g, "gather", {x, g.add_constant("", from_vector(index, shape))}, {{"axis", axis}});
  };
  g.add_output(gather({2}, {}, 1));       // -> select(dim 1, index 2): [batch, 6]
  g.add_output(gather({-1}, {}, -1));     // -> select(dim 2, index 5): [batch, 5]
  g.add_output(gather({1}, {1}, 2));      // -> select(dim 2, index 1), the dim back by a reshape
  g.add_output(gather({-2}, {1, 1}, 1));  // -> select(dim 1, index 3), [batch, 1, 1, 6] by a reshape
  g.add_output(gather({1, 3}, {2}, 2));   // two indices: stays
  g.add_output(gather({0}, {}, 0));       // the batch axis is symbolic: stays
  Tensor in = random_tensor({3, 5, 6}, DType::f32, 7);
  std::vector<Tensor> want = ir::run(g, std::vector<Tensor>{in});
  auto reps = compiler::run_passes(g, {"reshape", "dce"}, true, true);
  EXPECT_TRUE(reps[0].changed);
  EXPECT_NE(reps[0].report.find("select"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "select"), 4) << ir::print(g);
  EXPECT_EQ(count_op(g, "gather"), 2) << ir::print(g);
  EXPECT_EQ(count_op(g, "reshape"), 2) << ir::print(g);
  std::set<std::pair<int64_t, int64_t>> selects;
  for (ir::Node* n : g.nodes())
    if (n->op().name() == "select") selects.insert({n->attrs().get_int("dim"), n->attrs().get_int("index")});
  EXPECT_EQ(selects, (std::set<std::pair<int64_t, int64_t>>{{1, 2}, {2, 5}, {2, 1}, {1, 3}}));
  std::vector<Tensor> got = ir::run(g, std::vector<Tensor>{in});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << i;
    EXPECT_TRUE(testing::all_close(got[i], want[i], {0, 0})) << i;
  }

  // An index out of range is left to the gather, which names it when the graph runs.
  ir::Graph bad;
  ir::Value* y = bad.add_input("y", ir::ValueType{DType::f32, {5, 6}});
  bad.add_output(node(bad, "gather", {y, bad.add_constant("", from_vector(std::vector<int64_t>{7}, Shape{}))},
                      {{"axis", int64_t{0}}}));
  compiler::run_passes(bad, {"reshape"}, true, true);
  EXPECT_EQ(count_op(bad, "gather"), 1) << ir::print(bad);
  EXPECT_KILN_ERROR(ir::run(bad, std::vector<Tensor>{random_tensor({5, 6}, DType::f32, 8)}), "gather", "7");
}

// SiLU as exporters write it, x * sigmoid(x) in either order, becomes silu(x); the sigmoid stays
// for its other reader, and a product with the sigmoid of another value stays a product.
TEST(Optimize, SiluFromMulAndSigmoid) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {4, 7}});
  ir::Value* y = g.add_input("y", ir::ValueType{DType::f32, {4, 7}});
  ir::Value* sg = node(g, "sigmoid", {x});
  g.add_output(node(g, "mul", {x, sg}));
  g.add_output(node(g, "mul", {sg, x}));
  g.add_output(node(g, "exp", {sg}));
  g.add_output(node(g, "mul", {y, sg}));
  const std::vector<Tensor> in = {random_tensor({4, 7}, DType::f32, 9, -6, 6), random_tensor({4, 7}, DType::f32, 10)};
  std::vector<Tensor> want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"gelu_fusion", "dce"}, true, true);
  EXPECT_NE(reps[0].report.find("silu"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "silu"), 2) << ir::print(g);
  EXPECT_EQ(count_op(g, "sigmoid"), 1) << ir::print(g);
  EXPECT_EQ(count_op(g, "mul"), 1) << ir::print(g);
  std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-6, 1e-6})) << i;
}

// gelu_fusion: hard-swish and hard-sigmoid as TensorFlow writes them (relu6 as clip(0, 6), the
// 1/6 a multiply or a division, the factors in any order), and hard-swish as paddle2onnx writes it
// (x * HardSigmoid(x)), become one node each; x * relu6(x + 3) / 5, relu6(y + 3) * x / 6 with
// x != y and x * hardsigmoid(x) at ONNX's default slope 0.2 are other functions and stay.
TEST(Optimize, HardSwishAndHardSigmoidFromTheirFormulas) {
  ir::Graph g;
  const Shape s{3, 5, 7};
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {3, 5, 7}});
  ir::Value* y = g.add_input("y", ir::ValueType{DType::f32, {3, 5, 7}});
  auto scalar = [&](double v) { return g.add_constant("", full({}, v, DType::f32)); };
  auto relu6_plus3 = [&](ir::Value* v, bool three_first) {
    ir::Value* a = three_first ? node(g, "add", {scalar(3.0), v}) : node(g, "add", {v, scalar(3.0)});
    return node(g, "clip", {a}, {{"min", 0.0}, {"max", 6.0}});
  };
  // Keras: x * (relu6(x + 3) * (1/6)).
  g.add_output(node(g, "mul", {x, node(g, "mul", {relu6_plus3(x, false), scalar(1.0 / 6.0)})}));
  // (x * relu6(3 + x)) / 6.
  g.add_output(node(g, "div", {node(g, "mul", {relu6_plus3(x, true), x}), scalar(6.0)}));
  // A squeeze-excite gate: y * hard_sigmoid(x), the gate a hardsigmoid alone.
  g.add_output(node(g, "mul", {y, node(g, "mul", {relu6_plus3(x, false), scalar(0.16666667)})}));
  // paddle2onnx: x * HardSigmoid(x) {alpha 1/6, beta 0.5}, either order.
  ir::Value* hs = node(g, "hardsigmoid", {x}, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}});
  g.add_output(node(g, "mul", {hs, x}));
  g.add_output(node(g, "mul", {x, node(g, "hardsigmoid", {x}, {{"alpha", 0.16666667}, {"beta", 0.5}})}));
  // Not hard activations: other constants, another value in the product, ONNX's default slope.
  g.add_output(node(g, "div", {node(g, "mul", {x, relu6_plus3(x, false)}), scalar(5.0)}));
  g.add_output(node(g, "div", {node(g, "mul", {relu6_plus3(y, false), x}), scalar(6.0)}));
  g.add_output(node(g, "mul", {x, node(g, "hardsigmoid", {x}, {{"alpha", 0.2}, {"beta", 0.5}})}));
  const std::vector<Tensor> in = {random_tensor(s, DType::f32, 21, -5, 5), random_tensor(s, DType::f32, 22, -5, 5)};
  const std::vector<Tensor> want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"gelu_fusion", "dce"}, true, true);
  EXPECT_NE(reps[0].report.find("hardswish(%x) from 4 nodes"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "hardswish"), 4) << ir::print(g);
  EXPECT_EQ(count_op(g, "hardsigmoid"), 2) << ir::print(g);  // the gate's, and alpha 0.2's
  EXPECT_EQ(count_op(g, "clip"), 2) << ir::print(g);
  const std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-6, 1e-6})) << i;
}

// transpose (Note [Sinking transposes]): a block as tf2onnx writes one when its transpose optimizer
// gives up. Between a permute to NHWC after a convolution and a permute back before the next, a
// bias of shape [C], a hard-swish, a squeeze-excite (a mean with keepdim, a scale of shape
// [1, 1, 1, C], a sigmoid, a mul of two permuted values), a concat along the channels and a pad
// of H and W (which then folds into the convolution); a mean without keepdim to [N, C] reads it
// too. Every permute moves down until it meets the one back and both cancel; a permute also read
// by an add with a plain NHWC input stays for that reader, and a scale of it before a matmul stays
// after it (it would cancel nothing). Results equal the unoptimized graph's.
TEST(Optimize, TransposesSinkAndCancel) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 9, 10}});
  ir::Value* nhwc = g.add_input("nhwc", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 9, 10, 16}});
  auto cst = [&](const Shape& shape, uint64_t seed) {
    return g.add_constant("", random_tensor(shape, DType::f32, seed));
  };
  const std::vector<int64_t> to_nhwc{0, 2, 3, 1}, to_nchw{0, 3, 1, 2};
  ir::Value* c1 = node(g, "conv2d", {x, cst({16, 8, 3, 3}, 31), cst({16}, 32)},
                       {{"padding", std::vector<int64_t>{1, 1, 1, 1}}});
  ir::Value* t = node(g, "permute", {c1}, {{"dims", to_nhwc}});
  ir::Value* a = node(g, "add", {t, cst({16}, 33)});
  ir::Value* six = g.add_constant("", full({}, 1.0 / 6.0, DType::f32));
  ir::Value* plus3 = node(g, "add", {a, g.add_constant("", full({}, 3.0, DType::f32))});
  ir::Value* relu6 = node(g, "clip", {plus3}, {{"min", 0.0}, {"max", 6.0}});
  ir::Value* h = node(g, "mul", {a, node(g, "mul", {relu6, six})});
  ir::Value* m = node(g, "mean", {h}, {{"axes", std::vector<int64_t>{1, 2}}, {"keepdim", true}});
  ir::Value* se = node(g, "mul", {h, node(g, "sigmoid", {node(g, "mul", {m, cst({1, 1, 1, 16}, 34)})})});
  ir::Value* cat = node(g, "concat", {se, node(g, "relu", {se})}, {{"axis", int64_t{-1}}});
  ir::Value* pd = node(g, "pad", {cat}, {{"pads", std::vector<int64_t>{0, 0, 0, 0, 0, 1, 1, 0}}});
  ir::Value* back = node(g, "permute", {pd}, {{"dims", to_nchw}});
  g.add_output(node(g, "conv2d", {back, cst({4, 32, 3, 3}, 35)}, {{"stride", std::vector<int64_t>{2, 2}}}));
  g.add_output(node(g, "mean", {se}, {{"axes", std::vector<int64_t>{-2, -3}}}));
  g.add_output(node(g, "add", {t, nhwc}));
  // A permute that would not cancel stays where it is: the scale stays next to the matmul.
  ir::Value* scaled = node(g, "mul", {t, g.add_constant("two", full({}, 2.0, DType::f32))});
  g.add_output(node(g, "matmul", {scaled, cst({16, 5}, 38)}));
  ir::verify(g);
  const std::vector<Tensor> in = {random_tensor({2, 8, 9, 10}, DType::f32, 36),
                                  random_tensor({2, 9, 10, 16}, DType::f32, 37)};
  const std::vector<Tensor> want = ir::run(g, in);
  ir::Graph o2 = g.clone();
  auto reps = compiler::run_passes(g, {"transpose", "reshape", "identity", "dce"}, true, true);
  EXPECT_NE(reps[0].report.find("moved permutes past"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "permute"), 1) << ir::print(g);
  for (const ir::Node* n : g.nodes())
    if (n->op().name() == "mul" && n->inputs()[1]->name() == "two") {
      EXPECT_EQ(n->inputs()[0]->producer()->op().name(), "permute");
    }
  expect_outputs(g, in, want, "transpose");
  compiler::PassOptions opts;
  opts.opt_level = 2;
  opts.verify_each = true;
  compiler::optimize(o2, opts);
  EXPECT_EQ(count_op(o2, "permute"), 1) << ir::print(o2);
  EXPECT_EQ(count_op(o2, "hardswish"), 1) << ir::print(o2);
  EXPECT_EQ(count_op(o2, "pad"), 0) << "folded into the second convolution once it reads it in NCHW\n" << ir::print(o2);
  expect_outputs(o2, in, want, "-O2");

  // ConvNeXt's residual: the sum of two values permuted back to NCHW is one permute of their sum,
  // though nothing after it cancels.
  ir::Graph r;
  ir::Value* a0 = r.add_input("a", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 9, 10, 16}});
  ir::Value* a1 = node(r, "permute", {a0}, {{"dims", to_nchw}});
  ir::Value* a2 = node(r, "permute", {node(r, "relu", {a0})}, {{"dims", to_nchw}});
  ir::Value* wr = r.add_constant("", random_tensor({4, 16, 1, 1}, DType::f32, 39));
  r.add_output(node(r, "conv2d", {node(r, "add", {a1, a2}), wr}));
  const std::vector<Tensor> rin = {in[1]};
  const std::vector<Tensor> rwant = ir::run(r, rin);
  compiler::run_passes(r, {"transpose", "dce"}, true, false);
  EXPECT_EQ(count_op(r, "permute"), 1) << ir::print(r);
  expect_outputs(r, rin, rwant, "residual");
}

// unstack (Note [Sums over a stacked axis]): selective-kernel attention's sums over its stacked
// branches, plain and weighted (weights with the branch dim, in either operand order, or
// broadcasting over it), become sums of the 4-d branches; a sum over another axis, or keeping the
// stacked axis, stays.
TEST(Optimize, SumsOverAStackedAxisUnstack) {
  ir::Graph g;
  const ir::Dim batch = ir::Dim::sym("batch");
  ir::Value* a = g.add_input("a", ir::ValueType{DType::f32, {batch, 6, 5, 4}});
  ir::Value* b = g.add_input("b", ir::ValueType{DType::f32, {batch, 6, 5, 4}});
  ir::Value* w = g.add_input("w", ir::ValueType{DType::f32, {batch, 2, 6, 1, 1}});
  ir::Value* w1 = g.add_input("w1", ir::ValueType{DType::f32, {batch, 1, 6, 1, 1}});
  auto unsq = [&](ir::Value* v) { return node(g, "unsqueeze", {v}, {{"dims", std::vector<int64_t>{1}}}); };
  ir::Value* st = node(g, "concat", {unsq(a), unsq(b)}, {{"axis", int64_t{1}}});
  auto sum = [&](ir::Value* v, int64_t axis, bool keep = false) {
    return node(g, "sum", {v}, {{"axes", std::vector<int64_t>{axis}}, {"keepdim", keep}});
  };
  g.add_output(sum(st, 1));
  g.add_output(sum(node(g, "mul", {st, w}), -4));
  g.add_output(sum(node(g, "mul", {w1, st}), 1));
  g.add_output(sum(st, 2));
  g.add_output(sum(st, 1, true));
  const std::vector<Tensor> in = {random_tensor({3, 6, 5, 4}, DType::f32, 41),
                                  random_tensor({3, 6, 5, 4}, DType::f32, 42),
                                  random_tensor({3, 2, 6, 1, 1}, DType::f32, 43),
                                  random_tensor({3, 1, 6, 1, 1}, DType::f32, 44)};
  const std::vector<Tensor> want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"unstack", "dce"}, true, true);
  EXPECT_NE(reps[0].report.find("sum of 2 stacked values weighted by %w"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "sum"), 2) << ir::print(g);
  EXPECT_EQ(count_op(g, "select"), 2) << ir::print(g);
  EXPECT_EQ(count_op(g, "squeeze"), 2) << ir::print(g);
  expect_outputs(g, in, want, "unstack");
}

// pad_fold: TensorFlow's SAME padding of a strided convolution as tf2onnx writes it (a Pad of one
// row and column at the end, then a VALID convolution) becomes the convolution's own padding; a
// pad with another reader stays for it. Pads of another value or mode, of the channel dim, or
// cropping stay where they are.
TEST(Optimize, ZeroPadFoldsIntoTheConvolution) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 9, 10}});
  ir::Value* w = g.add_constant("w", random_tensor({16, 8, 3, 3}, DType::f32, 20, -0.3, 0.3));
  auto pad = [&](std::vector<int64_t> pads, const std::string& mode, double value) {
    return node(g, "pad", {x}, {{"pads", std::move(pads)}, {"mode", mode}, {"value", value}});
  };
  auto conv = [&](ir::Value* in, int64_t stride) {
    return node(g, "conv2d", {in, w}, {{"stride", std::vector<int64_t>{stride, stride}},
                                       {"padding", std::vector<int64_t>{1, 0, 0, 1}}});
  };
  ir::Value* same = pad({0, 0, 0, 0, 0, 0, 1, 1}, "constant", 0.0);
  g.add_output(conv(same, 2));                                  // folds: padding [1, 0, 1, 2]
  g.add_output(node(g, "relu", {same}));                        // ... and the pad stays for relu
  g.add_output(conv(pad({0, 0, 2, 1, 0, 0, 0, 3}, "constant", 0.0), 1));  // folds: [3, 1, 0, 4]
  g.add_output(conv(pad({0, 0, 0, 0, 0, 0, 1, 1}, "constant", 1.0), 2));  // value 1: stays
  g.add_output(conv(pad({0, 0, 1, 1, 0, 0, 1, 1}, "reflect", 0.0), 1));   // reflect: stays
  ir::Value* wide = g.add_constant("w2", random_tensor({4, 10, 1, 1}, DType::f32, 21));
  g.add_output(node(g, "conv2d", {pad({0, 1, 0, 0, 0, 1, 0, 0}, "constant", 0.0), wide}));  // channels: stays
  g.add_output(conv(pad({0, 0, -1, 0, 0, 0, 1, 1}, "constant", 0.0), 1));  // crops: stays
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({2, 8, 9, 10}, DType::f32, 22)};
  const std::vector<Tensor> want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"pad_fold", "dce"}, true, true);
  EXPECT_TRUE(reps[0].changed) << reps[0].report;
  EXPECT_EQ(count_op(g, "pad"), 5) << ir::print(g);
  std::vector<std::vector<int64_t>> folded;
  for (const ir::Node* n : g.nodes())
    if (n->op().name() == "conv2d" && n->inputs()[0] == g.inputs()[0]) folded.push_back(n->attrs().get_ints("padding"));
  EXPECT_EQ(folded, (std::vector<std::vector<int64_t>>{{1, 0, 1, 2}, {3, 1, 0, 4}})) << ir::print(g);
  const std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << i;
  const std::vector<std::string> o2 = compiler::pipeline(2);
  EXPECT_NE(std::find(o2.begin(), o2.end(), "pad_fold"), o2.end());
}

// Note [Zero pads before a max pool] (pad_fold.cc): HGNetV2's stem, a relu's output padded by one
// row and column and max-pooled 2 x 2 in ceil mode, and a clip-from-0 one padded on all sides under
// a 3 x 3 stride-2 pool, take the pad as the pool's padding; the output shape and values are the
// pad's. A pad of a value that may be negative, of 2 rows before a 2 x 2 pool (a window of padding
// alone) and before a dilated pool stays.
TEST(Optimize, ZeroPadOfANonNegativeValueFoldsIntoTheMaxPool) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 5, 9, 10}});
  ir::Value* r = node(g, "relu", {x});
  ir::Value* c = node(g, "clip", {x}, {{"min", 0.0}, {"max", 6.0}});
  auto pad = [&](ir::Value* v, std::vector<int64_t> pads) {
    return node(g, "pad", {v}, {{"pads", std::move(pads)}, {"mode", std::string("constant")}, {"value", 0.0}});
  };
  auto pool = [&](ir::Value* v, int64_t k, int64_t stride, bool ceil, int64_t dilation = 1) {
    return node(g, "max_pool2d", {v}, {{"kernel", std::vector<int64_t>{k, k}},
                                      {"stride", std::vector<int64_t>{stride, stride}},
                                      {"dilation", std::vector<int64_t>{dilation, dilation}},
                                      {"ceil_mode", ceil}});
  };
  g.add_output(pool(pad(r, {0, 0, 0, 0, 0, 0, 1, 1}), 2, 1, true));   // folds: [0, 0, 1, 1]
  g.add_output(pool(pad(c, {0, 0, 1, 1, 0, 0, 1, 1}), 3, 2, false));  // folds: [1, 1, 1, 1]
  g.add_output(pool(pad(x, {0, 0, 0, 0, 0, 0, 1, 1}), 2, 1, true));   // x may be negative: stays
  g.add_output(pool(pad(r, {0, 0, 2, 0, 0, 0, 0, 0}), 2, 1, false));  // a window of padding: stays
  g.add_output(pool(pad(r, {0, 0, 1, 1, 0, 0, 1, 1}), 2, 1, false, 2));  // dilated: stays
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({2, 5, 9, 10}, DType::f32, 23, -1, 1)};
  const std::vector<Tensor> want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"pad_fold", "dce"}, true, true);
  EXPECT_TRUE(reps[0].changed) << reps[0].report;
  EXPECT_EQ(count_op(g, "pad"), 3) << ir::print(g);
  std::vector<std::vector<int64_t>> folded;
  for (const ir::Node* n : g.nodes())
    if (n->op().name() == "max_pool2d" && n->inputs()[0]->producer()->op().name() != "pad")
      folded.push_back(n->attrs().get_ints("padding"));
  EXPECT_EQ(folded, (std::vector<std::vector<int64_t>>{{0, 0, 1, 1}, {1, 1, 1, 1}})) << ir::print(g);
  const std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << i;
    EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << i;
  }
}

// Note [Per-channel scales fold like batch norms] (bn_fold.cc): Caffe's scale layer after a
// convolution and its batch norm (mul by [C, 1, 1], add of [1, C, 1, 1]), and a divide and a
// subtract, fold into the convolution, so the ReLU after them joins its epilogue; -O2 matches the
// graph as written on random inputs.
TEST(Optimize, PerChannelScalesFoldIntoTheConvolution) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 6, 7, 7}});
  Attrs pad{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  ir::Value* c = node(g, "conv2d", {x, g.add_constant("w", random_tensor({10, 6, 3, 3}, DType::f32, 60, -0.4, 0.4))},
                      pad);
  ir::Value* s = g.add_constant("s", random_tensor({10, 1, 1}, DType::f32, 61, 0.5, 1.5));
  ir::Value* t = g.add_constant("t", random_tensor({1, 10, 1, 1}, DType::f32, 62));
  ir::Value* y = node(g, "relu", {node(g, "add", {t, node(g, "mul", {bn(g, c, 10, 63), s})})});
  ir::Value* c2 = node(g, "conv2d", {y, g.add_constant("w2", random_tensor({10, 10, 1, 1}, DType::f32, 64, -0.4, 0.4)),
                                     g.add_constant("b2", random_tensor({10}, DType::f32, 65))});
  g.add_output(node(g, "clip", {node(g, "sub", {node(g, "div", {c2, s}), t})}, {{"min", 0.0}, {"max", 6.0}}));
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({3, 6, 7, 7}, DType::f32, 66)};
  const std::vector<Tensor> want = ir::run(g, in);
  compiler::PassOptions opts;
  opts.opt_level = 2;
  opts.verify_each = true;
  compiler::optimize(g, opts);
  EXPECT_EQ(count_op(g, "fused_conv2d"), 2) << ir::print(g);
  for (const char* op_name : {"batch_norm", "mul", "add", "sub", "div", "relu", "clip", "conv2d"})
    EXPECT_EQ(count_op(g, op_name), 0) << op_name << "\n" << ir::print(g);
  const std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(testing::all_close(got[0], want[0], kTol));
}

// Note [Layer scales fold into the linear layer before them] (bn_fold.cc): ConvNeXt's layer scale
// after its last Linear (a bias add and a permute back to NCHW between) and a ViT's after a matmul
// (a divide here) fold into the weights; a scale along another dim, a matmul that something else
// also reads and a divisor of zero stay. The graph computes the same values before and after, and
// after the whole -O2 pipeline.
TEST(Optimize, LayerScalesFoldIntoTheLinearLayerBeforeThem) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 5, 3, 8}});
  ir::Value* r = g.add_input("r", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 6, 5, 3}});
  auto w = [&](uint64_t seed) {
    return g.add_constant("w" + std::to_string(seed), random_tensor({8, 6}, DType::f32, seed, -0.5, 0.5));
  };
  auto matmul = [&](uint64_t seed) { return node(g, "matmul", {x, w(seed)}); };
  const Attrs to_nchw{{"dims", std::vector<int64_t>{0, 3, 1, 2}}};
  ir::Value* b = g.add_constant("b", random_tensor({6}, DType::f32, 71));
  ir::Value* gamma = g.add_constant("gamma", random_tensor({6, 1, 1}, DType::f32, 72, 0.5, 1.5));
  ir::Value* gamma_last = g.add_constant("gamma_last", random_tensor({6}, DType::f32, 73, 0.5, 1.5));
  ir::Value* along_h = g.add_constant("along_h", random_tensor({5, 1}, DType::f32, 74, 0.5, 1.5));
  Tensor with_zero = random_tensor({6}, DType::f32, 75, 0.5, 1.5);
  with_zero.data<float>()[4] = 0.0f;
  ir::Value* zeros = g.add_constant("zeros", with_zero);
  ir::Value* convnext = node(
      g, "add", {node(g, "mul", {gamma, node(g, "permute", {node(g, "add", {matmul(70), b})}, to_nchw)}), r});
  ir::Value* vit = node(g, "div", {matmul(76), gamma_last});
  ir::Value* by_rows = node(g, "mul", {node(g, "permute", {matmul(77)}, to_nchw), along_h});
  ir::Value* shared = matmul(78);
  ir::Value* also_read = node(g, "mul", {shared, gamma_last});
  ir::Value* by_zero = node(g, "div", {matmul(79), zeros});
  for (ir::Value* out : {convnext, vit, by_rows, also_read, shared, by_zero}) g.add_output(out);
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({2, 5, 3, 8}, DType::f32, 80), random_tensor({2, 6, 5, 3}, DType::f32, 81)};
  const std::vector<Tensor> want = ir::run(g, in);
  ir::Graph o2 = g.clone();
  auto reps = compiler::run_passes(g, {"bn_fold", "dce"}, true);
  EXPECT_NE(reps[0].report.find("bn_fold: folded 2:"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "mul"), 2) << ir::print(g);  // by_rows, also_read
  EXPECT_EQ(count_op(g, "div"), 1) << ir::print(g);  // by_zero
  EXPECT_EQ(count_op(g, "matmul"), 5) << ir::print(g);
  expect_outputs(g, in, want, "bn_fold");
  expect_optimized_outputs(std::move(o2), 2, in, want);
}

// Note [Batch norms and activations through a concat]: MixNet's mixed convolutions (a split, a
// 3x3 and a 5x5 convolution, a concat, then batch norm and SiLU) fold into the two convolutions;
// a concat whose branch is also read elsewhere, or that joins along another dim, keeps them.
TEST(Optimize, BatchNormsAndActivationsMoveIntoAConcatsConvolutions) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 6, 9, 7}});
  auto conv = [&](ir::Value* in, int64_t cin, int64_t cout, int64_t k, uint64_t seed) {
    ir::Value* w = g.add_constant("w" + std::to_string(seed), random_tensor({cout, cin, k, k}, DType::f32, seed, -0.5, 0.5));
    ir::Value* b = g.add_constant("b" + std::to_string(seed), random_tensor({cout}, DType::f32, seed + 1, -0.5, 0.5));
    return node(g, "conv2d", {in, w, b}, {{"padding", std::vector<int64_t>{k / 2, k / 2, k / 2, k / 2}}});
  };
  ir::Node* split = g.add_node(op("split"), {x}, {{"axis", int64_t{1}}, {"sizes", std::vector<int64_t>{2, 4}}});
  const Attrs by_channel{{"axis", int64_t{1}}};
  ir::Value* mixed = node(g, "concat", {conv(split->outputs()[0], 2, 5, 3, 90), conv(split->outputs()[1], 4, 3, 5, 92)}, by_channel);
  ir::Value* act = node(g, "silu", {bn(g, mixed, 8, 94)});
  // A branch read elsewhere too (by a node, not as a graph output).
  ir::Value* shared = conv(x, 6, 4, 1, 98);
  ir::Value* with_shared = node(g, "relu", {bn(g, node(g, "concat", {shared, conv(x, 6, 4, 3, 100)}, by_channel), 8, 102)});
  // Joined along the height.
  ir::Value* tall = node(g, "concat", {conv(x, 6, 4, 3, 106), conv(x, 6, 4, 1, 108)}, {{"axis", int64_t{2}}});
  ir::Value* by_rows = node(g, "relu", {tall});
  ir::Value* elsewhere = node(g, "neg", {shared});
  for (ir::Value* out : {act, with_shared, elsewhere, by_rows}) g.add_output(out);
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({3, 6, 9, 7}, DType::f32, 110)};
  const std::vector<Tensor> want = ir::run(g, in);
  compiler::PassOptions opts;
  opts.opt_level = 2;
  opts.verify_each = true;
  compiler::optimize(g, opts);
  EXPECT_EQ(count_op(g, "batch_norm"), 1) << ir::print(g);  // with_shared's
  EXPECT_EQ(count_op(g, "silu"), 0) << ir::print(g);
  EXPECT_EQ(count_op(g, "relu"), 2) << ir::print(g);        // with_shared's, by_rows'
  int silu_epilogues = 0;
  for (const ir::Node* n : g.nodes())
    silu_epilogues += n->op().name() == "fused_conv2d" && n->attrs().get_string("activation") == "silu";
  EXPECT_EQ(silu_epilogues, 2) << ir::print(g);
  expect_outputs(g, in, want, "-O2");
}

// Note [Parallel branches merge]: MobileOne's depthwise block (two 3x3 branches, a 1x1 one, each
// with its batch norm, and a batch norm of the input), RepVGG's strided block (3x3 + 1x1), a plain
// input added to a convolution of it and FastViT's RepMixer (a difference, scaled per channel, added
// to the input) become one convolution each; a branch also read
// elsewhere, a sum of convolutions of different inputs and a dilated branch stay as they are.
TEST(Optimize, ParallelBranchesMergeIntoOneConvolution) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 9, 7}});
  ir::Value* y = g.add_input("y", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 9, 7}});
  auto conv = [&](ir::Value* in, int64_t cout, int64_t k, int64_t stride, int64_t groups, uint64_t seed,
                  int64_t dilation = 1) {
    const int64_t cin = in->type().shape[1].size / groups, pad = k / 2 * dilation;
    ir::Value* w = g.add_constant("w" + std::to_string(seed), random_tensor({cout, cin, k, k}, DType::f32, seed, -0.5, 0.5));
    return node(g, "conv2d", {in, w},
                {{"padding", std::vector<int64_t>{pad, pad, pad, pad}}, {"stride", std::vector<int64_t>{stride, stride}},
                 {"groups", groups}, {"dilation", std::vector<int64_t>{dilation, dilation}}});
  };
  auto sum = [&](std::vector<ir::Value*> vs) {
    ir::Value* acc = vs[0];
    for (size_t i = 1; i < vs.size(); ++i) acc = node(g, "add", {acc, vs[i]});
    return acc;
  };
  ir::Value* mobileone = node(g, "relu", {sum({bn(g, conv(x, 8, 1, 1, 8, 120), 8, 121), bn(g, x, 8, 125),
                                               bn(g, conv(x, 8, 3, 1, 8, 130), 8, 131),
                                               bn(g, conv(x, 8, 3, 1, 8, 135), 8, 136)})});
  ir::Value* repvgg = sum({bn(g, conv(x, 12, 3, 2, 1, 140), 12, 141), bn(g, conv(x, 12, 1, 2, 1, 145), 12, 146)});
  ir::Value* plain = sum({conv(x, 8, 5, 1, 1, 150), x});
  // FastViT's RepMixer: x + layer_scale * (mixer(x) - norm(x)).
  ir::Value* scale = g.add_constant("layer_scale", random_tensor({8, 1, 1}, DType::f32, 152, 0.5, 1.5));
  ir::Value* repmixer =
      node(g, "add", {x, node(g, "mul", {scale, node(g, "sub", {bn(g, conv(x, 8, 3, 1, 8, 153), 8, 154), bn(g, x, 8, 158)})})});
  ir::Value* shared = conv(x, 8, 1, 1, 1, 155);
  ir::Value* with_shared = sum({conv(x, 8, 3, 1, 1, 160), shared});
  ir::Value* elsewhere = node(g, "neg", {shared});
  ir::Value* two_inputs = sum({conv(x, 8, 3, 1, 1, 165), conv(y, 8, 3, 1, 1, 170)});
  ir::Value* dilated = sum({conv(x, 8, 3, 1, 1, 175), conv(x, 8, 3, 1, 1, 180, 2)});
  for (ir::Value* out : {mobileone, repvgg, plain, repmixer, with_shared, elsewhere, two_inputs, dilated}) g.add_output(out);
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({2, 8, 9, 7}, DType::f32, 185), random_tensor({2, 8, 9, 7}, DType::f32, 186)};
  const std::vector<Tensor> want = ir::run(g, in);
  ir::Graph merged = g.clone();
  auto reps = compiler::run_passes(merged, {"bn_fold", "branch_merge", "dce"}, true);
  EXPECT_NE(reps[1].report.find("branch_merge: merged 4"), std::string::npos) << reps[1].report;
  // One convolution each for mobileone, repvgg, plain and repmixer; two each for the three sums that stay.
  EXPECT_EQ(count_op(merged, "conv2d"), 4 + 2 * 3) << ir::print(merged);
  EXPECT_EQ(count_op(merged, "batch_norm"), 0) << ir::print(merged);
  EXPECT_EQ(count_op(merged, "sub"), 0) << ir::print(merged);
  expect_outputs(merged, in, want, "branch_merge");
  expect_optimized_outputs(std::move(g), 3, in, want);
}

// Note [Scalars fold through views]: attention's query scale after the projection is split into
// heads (a conv2d, reshaped and permuted, times a number; a matmul reshaped, divided by one) folds
// into the weights; a view read elsewhere, a scalar that broadcasts the value bigger, a division by
// zero and a tensor of values stay.
TEST(Optimize, ScalarsFoldThroughViewsIntoTheWeights) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 7, 7}});
  ir::Value* t = g.add_input("t", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 49, 8}});
  auto conv = [&](uint64_t seed) {
    ir::Value* w = g.add_constant("w" + std::to_string(seed), random_tensor({16, 8, 1, 1}, DType::f32, seed, -0.5, 0.5));
    ir::Value* b = g.add_constant("b" + std::to_string(seed), random_tensor({16}, DType::f32, seed + 1, -0.5, 0.5));
    return node(g, "conv2d", {x, w, b});
  };
  auto heads = [&](ir::Value* v) {  // [B, 16, 7, 7] -> [B, 4, 49, 4]
    return node(g, "permute", {node(g, "reshape", {v}, {{"shape", std::vector<int64_t>{-1, 4, 4, 49}}})},
                {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
  };
  auto number = [&](const std::string& name, double v, Shape shape = {}) {
    return g.add_constant(name, full(shape, v, TensorOptions(DType::f32)));
  };
  ir::Value* query = node(g, "mul", {heads(conv(190)), number("scale", 0.35)});
  ir::Value* w = g.add_constant("wm", random_tensor({8, 12}, DType::f32, 192, -0.5, 0.5));
  ir::Value* linear = node(g, "div", {node(g, "reshape", {node(g, "matmul", {t, w})}, {{"shape", std::vector<int64_t>{-1, 49, 3, 4}}}),
                                      number("root", 2.0)});
  ir::Value* split = heads(conv(194));
  ir::Value* read_too = node(g, "mul", {number("twice", 2.0), split});
  ir::Value* wider = node(g, "mul", {heads(conv(196)), number("wide", 1.5, {1, 1, 1, 1, 1})});
  ir::Value* by_zero = node(g, "div", {heads(conv(198)), number("zero", 0.0)});
  ir::Value* values = node(g, "mul", {heads(conv(200)), g.add_constant("vals", random_tensor({4, 49, 4}, DType::f32, 202))});
  for (ir::Value* out : {query, linear, read_too, split, wider, by_zero, values}) g.add_output(out);
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({2, 8, 7, 7}, DType::f32, 204), random_tensor({2, 49, 8}, DType::f32, 205)};
  const std::vector<Tensor> want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"bn_fold", "dce"}, true);
  EXPECT_NE(reps[0].report.find("bn_fold: folded 2:"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "mul"), 3) << ir::print(g);  // read_too, wider, values
  EXPECT_EQ(count_op(g, "div"), 1) << ir::print(g);  // by_zero
  const std::vector<Tensor> got = ir::run(g, in);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (i == 5) continue;  // (x / 0: infinities and NaNs)
    EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << i;
  }
}

// Note [Batch norms after a flattened linear layer]: LeViT's Linear + BatchNorm1d over the tokens
// flattened into the batch folds into the matmul (a bias add after it, the reshape after that);
// a flatten that splits the channels, and a matmul read elsewhere too, keep their norms.
TEST(Optimize, BatchNormsAfterAFlattenedLinearLayerFold) {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 5, 8}});
  auto linear = [&](uint64_t seed) {
    return node(g, "matmul", {x, g.add_constant("w" + std::to_string(seed), random_tensor({8, 6}, DType::f32, seed, -0.5, 0.5))});
  };
  auto flat = [&](ir::Value* v, int64_t c) { return node(g, "reshape", {v}, {{"shape", std::vector<int64_t>{-1, c}}}); };
  auto back = [&](ir::Value* v) { return node(g, "reshape", {v}, {{"shape", std::vector<int64_t>{-1, 5, 6}}}); };
  ir::Value* levit = back(bn(g, flat(linear(210), 6), 6, 211));
  ir::Value* split = node(g, "reshape", {bn(g, flat(linear(215), 3), 3, 216)}, {{"shape", std::vector<int64_t>{-1, 5, 6}}});
  ir::Value* shared = linear(220);
  ir::Value* read_too = back(bn(g, flat(shared, 6), 6, 221));
  for (ir::Value* out : {levit, split, read_too, shared}) g.add_output(out);
  ir::verify(g);
  const std::vector<Tensor> in{random_tensor({3, 5, 8}, DType::f32, 225)};
  const std::vector<Tensor> want = ir::run(g, in);
  ir::Graph o3 = g.clone();
  auto reps = compiler::run_passes(g, {"bn_fold", "dce"}, true);
  EXPECT_NE(reps[0].report.find("bn_fold: folded 1:"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "batch_norm"), 2) << ir::print(g);
  expect_outputs(g, in, want, "bn_fold");
  expect_optimized_outputs(std::move(o3), 3, in, want);
}

// Every epilogue shape the pass fuses, run before and after on random inputs.
TEST(Optimize, EpilogueFusionKeepsNumerics) {
  const char* text = R"(graph f(%x: f32[2, 3, 5, 5], %m: f32[7, 6], %res: f32[7, 4], %cres: f32[2, 4, 5, 5]) {
  %w: f32[4, 3, 1, 1] = constant [0.5, -1, 2, 1.5, 0.25, -0.75, 1, 1, -2, 0.5, 0.5, 3]
  %cb: f32[1, 4, 1, 1] = constant [0.5, -0.5, 1, -1]
  %b: f32[6, 4] = constant [1, -2, 3, 0.5, 1, 2, -1, 0.25, 0.5, 0.5, 1, -1, 2, 1, 0.5, -0.5, 1, 1, 1, 1, -1, 2, 0.5, 3]
  %gb: f32[1, 4] = constant [1, -1, 0.5, 2]
  %c: f32[2, 4, 7, 7] = conv2d(%x, %w) {padding=[1, 1, 1, 1], stride=[1, 1]}
  %c0: f32[2, 4, 5, 5] = conv2d(%x, %w) {padding=[0, 0, 0, 0]}
  %cpb: f32[2, 4, 5, 5] = add(%c0, %cb)
  %cg: f32[2, 4, 5, 5] = gelu(%cpb) {approximate="tanh"}
  %cr: f32[2, 4, 5, 5] = add(%cg, %cres)
  %mm: f32[7, 4] = matmul(%m, %b)
  %mb: f32[7, 4] = add(%gb, %mm)
  %h: f32[7, 4] = gelu(%mb)
  %g: f32[7, 4] = gemm(%m, %b, %gb) {alpha=0.5, beta=2}
  %g6: f32[7, 4] = clip(%g) {min=0, max=6}
  %s: f32[7, 4] = add(%g6, %res)
  %k: f32[7, 4] = gemm(%m, %b)
  %kr: f32[7, 4] = add(%res, %k)
  %t: f32[7, 4] = silu(%kr)
  %u: f32[7, 4] = tanh(%h)
  return %c, %cr, %h, %s, %t, %u
})";
  ir::Graph g = ir::parse(text);
  ir::verify(g);
  std::vector<Tensor> in{random_tensor({2, 3, 5, 5}, DType::f32, 7), random_tensor({7, 6}, DType::f32, 8),
                         random_tensor({7, 4}, DType::f32, 9), random_tensor({2, 4, 5, 5}, DType::f32, 10)};
  auto want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"epilogue", "dce"}, true);
  EXPECT_NE(reps[0].report.find("epilogue: fused 4:"), std::string::npos) << reps[0].report;
  EXPECT_EQ(count_op(g, "fused_conv2d"), 1) << ir::print(g);  // a bare conv2d stays
  EXPECT_EQ(count_op(g, "fused_gemm"), 3) << ir::print(g);
  EXPECT_EQ(count_op(g, "tanh"), 1) << ir::print(g);  // %h is a graph output: the chain ends at gelu
  auto got = ir::run(g, in);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << i;
}

// Note [Epilogues that grow]: a fused_gemm / fused_conv2d takes what its epilogue lacks, in the
// order its kernel applies them (a residual it has comes before an activation taken now); a bias
// add joins its bias; one with both a residual and an activation takes nothing more.
TEST(Optimize, FusedAnchorsTakeWhatTheirEpilogueLacks) {
  const char* text = R"(graph f(%m: f32[7, 6], %res: f32[7, 4], %x: f32[2, 3, 5, 5], %cres: f32[2, 4, 5, 5]) {
  %b: f32[6, 4] = constant [1, -2, 3, 0.5, 1, 2, -1, 0.25, 0.5, 0.5, 1, -1, 2, 1, 0.5, -0.5, 1, 1, 1, 1, -1, 2, 0.5, 3]
  %gb: f32[4] = constant [1, -1, 0.5, 2]
  %w: f32[4, 3, 1, 1] = constant [0.5, -1, 2, 1.5, 0.25, -0.75, 1, 1, -2, 0.5, 0.5, 3]
  %cb: f32[4] = constant [0.5, -0.5, 1, -1]
  %f0: f32[7, 4] = fused_gemm(%m, %b, %gb, _) {activation="none", residual_before_activation=false}
  %a0: f32[7, 4] = hardswish(%f0)
  %r0: f32[7, 4] = add(%res, %a0)
  %f1: f32[7, 4] = fused_gemm(%m, %b, _, %res) {activation="none", residual_before_activation=false}
  %a1: f32[7, 4] = sigmoid(%f1)
  %f2: f32[7, 4] = fused_gemm(%m, %b, %gb, _) {activation="relu", alpha=0.5, residual_before_activation=false}
  %r2: f32[7, 4] = add(%f2, %res)
  %f3: f32[7, 4] = fused_gemm(%m, %b, %gb, _) {activation="none", residual_before_activation=false}
  %b3: f32[7, 4] = add(%f3, %gb)
  %c0: f32[2, 4, 5, 5] = fused_conv2d(%x, %w, %cb, _) {activation="none", residual_before_activation=false}
  %c1: f32[2, 4, 5, 5] = add(%c0, %cres)
  %c2: f32[2, 4, 5, 5] = relu(%c1)
  %f4: f32[7, 4] = fused_gemm(%m, %b, %gb, %res) {activation="relu", residual_before_activation=true}
  %t4: f32[7, 4] = tanh(%f4)
  return %r0, %a1, %r2, %b3, %c2, %t4
})";
  ir::Graph g = ir::parse(text);
  ir::verify(g);
  std::vector<Tensor> in{random_tensor({7, 6}, DType::f32, 31), random_tensor({7, 4}, DType::f32, 32),
                         random_tensor({2, 3, 5, 5}, DType::f32, 33), random_tensor({2, 4, 5, 5}, DType::f32, 34)};
  auto want = ir::run(g, in);
  auto reps = compiler::run_passes(g, {"epilogue", "dce"}, true);
  EXPECT_NE(reps[0].report.find("epilogue: fused 5:"), std::string::npos) << reps[0].report;
  for (const char* gone : {"hardswish", "sigmoid", "add", "relu"}) EXPECT_EQ(count_op(g, gone), 0) << gone << ir::print(g);
  EXPECT_EQ(count_op(g, "tanh"), 1) << ir::print(g);
  auto producer = [&](const std::string& name) -> const ir::Node* {
    for (const ir::Node* n : g.nodes())
      if (n->output()->name() == name) return n;
    return nullptr;
  };
  struct Want {
    const char* value;
    const char* act;
    bool before;
  };
  for (const Want& w : {Want{"r0", "hardswish", false}, Want{"a1", "sigmoid", true}, Want{"r2", "relu", false},
                        Want{"b3", "none", false}, Want{"c2", "relu", true}}) {
    const ir::Node* n = producer(w.value);
    ASSERT_NE(n, nullptr) << w.value << ir::print(g);
    EXPECT_EQ(n->attrs().get_string("activation"), w.act) << w.value;
    EXPECT_EQ(n->attrs().get_bool("residual_before_activation"), w.before) << w.value;
  }
  EXPECT_EQ(producer("r2")->attrs().get_float("alpha"), 0.5);  // the anchor's own attributes kept
  auto got = ir::run(g, in);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], kTol)) << i;
}

// Pointwise chains with broadcasts fuse into fused_elementwise (-O3) and compute the same values,
// for every program op, in f32 and f64, on a non-contiguous input.
TEST(Optimize, EltwiseFusionKeepsNumerics) {
  for (const char* dt : {"f32", "f64"}) {
    SCOPED_TRACE(dt);
    std::string text = R"(graph f(%x: T[2, 3, 5], %r: T[3, 1]) {
  %one: T[] = constant [1]
  %half: T[] = constant [0.5]
  %b: T[5] = constant [0.25, -0.5, 1, 2, -1]
  %a0: T[2, 3, 5] = abs(%x)
  %a1: T[2, 3, 5] = add(%a0, %one)
  %a2: T[2, 3, 5] = log(%a1)
  %a3: T[2, 3, 5] = sqrt(%a1)
  %a4: T[2, 3, 5] = rsqrt(%a1)
  %a5: T[2, 3, 5] = mul(%a2, %a3)
  %a6: T[2, 3, 5] = sub(%a5, %a4)
  %a7: T[2, 3, 5] = pow(%a1, %half)
  %a8: T[2, 3, 5] = div(%a6, %a7)
  %a9: T[2, 3, 5] = maximum(%a8, %r)
  %b0: T[2, 3, 5] = minimum(%a9, %b)
  %b1: T[2, 3, 5] = exp(%b0)
  %b2: T[2, 3, 5] = reciprocal(%b1)
  %b3: T[2, 3, 5] = sin(%b2)
  %b4: T[2, 3, 5] = cos(%b3)
  %b5: T[2, 3, 5] = neg(%b4)
  %b6: T[2, 3, 5] = tanh(%b5)
  %b7: T[2, 3, 5] = sigmoid(%b6)
  %b8: T[2, 3, 5] = silu(%b7)
  %b9: T[2, 3, 5] = gelu(%b8)
  %c0: T[2, 3, 5] = erf(%b9)
  %c1: T[2, 3, 5] = relu(%c0)
  %c2: T[2, 3, 5] = add(%c1, %x)
  %c3: T[2, 3, 5] = gelu(%c2) {approximate="tanh"}
  return %c3
})";
    for (size_t p = text.find('T'); p != std::string::npos; p = text.find('T', p + 1))
      if (text[p + 1] == '[') text.replace(p, 1, dt);
    ir::Graph g = ir::parse(text);
    ir::verify(g);
    DType d = std::string(dt) == "f32" ? DType::f32 : DType::f64;
    std::vector<Tensor> in{testing::noncontiguous(random_tensor({2, 3, 5}, d, 11)), random_tensor({3, 1}, d, 12)};
    auto want = ir::run(g, in);
    compiler::PassOptions opts;
    opts.opt_level = 3;
    opts.verify_each = true;
    auto reps = compiler::optimize(g, opts);
    EXPECT_EQ(count_op(g, "fused_elementwise"), 1) << ir::print(g);
    EXPECT_EQ(g.num_nodes(), 1u) << ir::print(g);
    EXPECT_TRUE(testing::all_close(ir::run(g, in)[0], want[0], d == DType::f32 ? kTol : testing::Tol{1e-12, 1e-12}));
  }
  EXPECT_EQ(compiler::pipeline(3).back(), "eltwise");
}

TEST(Optimize, FusedElementwiseRejectsBadPrograms) {
  Tensor x = random_tensor({4}, DType::f32, 1);
  auto call = [&](const std::string& prog) { return dispatch1(op("fused_elementwise"), {x, x}, {{"program", prog}}); };
  EXPECT_KILN_ERROR(call("frob 0"), "unknown op 'frob'");
  EXPECT_KILN_ERROR(call("add 0 5"), "second operand must be a register below 2");
  EXPECT_KILN_ERROR(call("exp 0 1"), "trailing '1'");
  EXPECT_KILN_ERROR(call(""), "empty program");
  EXPECT_KILN_ERROR(dispatch1(op("fused_elementwise"), {x, random_tensor({4}, DType::f64, 2)}, {{"program", "add 0 1"}}),
                    "all inputs share one dtype");
}

}  // namespace
}  // namespace kiln
