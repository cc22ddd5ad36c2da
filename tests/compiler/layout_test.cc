// The layout pass (src/compiler/passes/layout.cc, Note [Layout regions]): regions of blockable
// convolutions become fused_conv2d_nchwc with one to_nchwc per value read from outside and one
// from_nchwc per value read outside (graph outputs too); engines with blocked regions match the
// reference executor and the NCHW engine at every batch; a stem, a max or average pool and a global
// average pool join the region, and so do depthwise and grouped convolutions and channel counts that are not
// multiples of 16; the cost model keeps a small region in NCHW and blocks a deep chain; what cannot be
// blocked stays as it is.
#include <variant>

#include <gtest/gtest.h>

#include "kiln/compiler.h"
#include "kiln/ir.h"
#include "kiln/runtime.h"
#include "support/cnn_graph.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;

using Builder = testing::CnnGraphBuilder;

// Two residual blocks (the second with a strided 1x1 projection), a global mean and a gemm; the
// first block's output is also a graph output (a plain reader in the middle of the region).
ir::Graph resnet_like(int64_t c) {
  Builder b;
  b.g.name = "resnet_like";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16, 12, 12}});
  ir::Value* a = b.relu(b.conv(x, c, 3, 1, "c1"));
  ir::Value* y1 = b.relu(b.add(b.conv(a, c, 3, 1, "c2"), a));
  ir::Value* proj = b.conv(y1, 2 * c, 1, 2, "proj");
  ir::Value* y2 = b.relu(b.add(b.conv(b.relu(b.conv(y1, 2 * c, 3, 2, "c3")), 2 * c, 3, 1, "c4"), proj));
  ir::Value* m = b.g.add_node(op("mean"), {y2}, {{"axes", std::vector<int64_t>{2, 3}}})->output();
  ir::Value* logits =
      b.g.add_node(op("gemm"), {m, b.cst("fc_w", {5, 2 * c}), b.cst("fc_b", {5})}, {{"trans_b", true}})->output();
  b.g.add_output(logits);
  b.g.add_output(y1);
  ir::verify(b.g);
  return std::move(b.g);
}

std::map<std::string, int> op_counts(const runtime::Engine& e) {
  std::map<std::string, int> n;
  for (const runtime::EngineStep& st : e.steps) ++n[st.op->name()];
  return n;
}

// The rank of a step's output: 5 where it runs blocked, 4 where it runs NCHW.
size_t output_rank(const runtime::Engine& e, const runtime::EngineStep& st) {
  return e.values[static_cast<size_t>(st.outputs[0])].shape.size();
}

// Whether some pass of the compile reported `line`.
bool reported(const runtime::CompileResult& r, const std::string& line) {
  for (const auto& p : r.passes)
    if (p.report.find(line) != std::string::npos) return true;
  return false;
}

// The engine's first output equals the reference executor's on g at batch 1 and 3, random inputs
// of `image` (a sample's shape) seeded seed + batch.
void expect_engine_matches(const runtime::Engine& e, const ir::Graph& g, const Shape& image, uint64_t seed) {
  runtime::Executor ex(std::make_shared<runtime::Engine>(e));
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Shape shape{batch};
    shape.insert(shape.end(), image.begin(), image.end());
    Tensor xin = random_tensor(shape, DType::f32, seed + static_cast<uint64_t>(batch));
    EXPECT_TRUE(testing::all_close(ex.run({xin})[0], ir::run(g, {xin})[0], {1e-4, 1e-4}));
  }
}

runtime::CompileOptions opts(runtime::CompileOptions::Layout layout, int64_t bmax) {
  runtime::CompileOptions o;
  o.passes.opt_level = 2;
  o.batch_min = 1;
  o.batch_max = bmax;
  o.layout = layout;
  return o;
}

TEST(Layout, BlockedRegionMatchesReferenceWithConversionsOnlyAtItsEdges) {
  const ir::Graph g = resnet_like(32);
  using Layout = runtime::CompileOptions::Layout;
  runtime::Engine blocked = runtime::compile(g, opts(Layout::nchwc, 3)).engine;
  runtime::Engine plain = runtime::compile(g, opts(Layout::nchw, 3)).engine;
  auto n = op_counts(blocked);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 5);
  EXPECT_EQ(n["to_nchwc"], 1);    // x
  EXPECT_EQ(n["from_nchwc"], 2);  // y1 (a graph output) and y2 (read by mean)
  EXPECT_EQ(n["fused_conv2d"] + n["conv2d"], 0);
  EXPECT_EQ(op_counts(plain)["fused_conv2d_nchwc"], 0);
  runtime::Executor eb(std::make_shared<runtime::Engine>(blocked)), ep(std::make_shared<runtime::Engine>(plain));
  for (int64_t batch : {1, 3}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    Tensor x = random_tensor({batch, 16, 12, 12}, DType::f32, 40 + static_cast<uint64_t>(batch));
    auto want = ir::run(g, {x});
    auto got = eb.run({x});
    auto other = ep.run({x});
    ASSERT_EQ(got.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-4, 1e-4}));
      EXPECT_TRUE(testing::all_close(got[i], other[i], {1e-4, 1e-4}));
    }
  }
  // The blocked engine survives its file.
  runtime::Engine back = runtime::Engine::deserialize(blocked.serialize(), "blocked.kiln");
  runtime::Executor eback(std::make_shared<runtime::Engine>(std::move(back)));
  Tensor x = random_tensor({2, 16, 12, 12}, DType::f32, 77);
  EXPECT_TRUE(testing::all_close(eback.run({x})[0], ir::run(g, {x})[0], {1e-4, 1e-4}));
}

TEST(Layout, CostModelBlocksDeepChainsAndKeepsSmallRegionsPlain) {
  // Three small convolutions (a depthwise, a 1x1, a depthwise at 8 x 8): two conversions for a few
  // hundred thousand FLOPs.
  {
    Builder b;
    ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {1, 32, 8, 8}});
    ir::Value* d1 = b.relu(b.conv(x, 32, 3, 1, "dw1", 32));
    ir::Value* pw = b.relu(b.conv(d1, 32, 1, 1, "pw"));
    b.g.add_output(b.conv(pw, 32, 3, 1, "dw2", 32));
    compiler::optimize(b.g);
    auto r = compiler::run_passes(b.g, {"layout"});
    EXPECT_FALSE(r[0].changed) << r[0].report;
    EXPECT_NE(r[0].report.find("no region pays for its conversions"), std::string::npos) << r[0].report;
    // layout_all blocks it anyway (what measurements of the model's "no" use).
    auto all = compiler::run_passes(b.g, {"layout_all", "dce"});
    EXPECT_TRUE(all[0].changed);
    EXPECT_NE(all[0].report.find("3 convolution(s) in 1 region(s), 1 to_nchwc, 1 from_nchwc"), std::string::npos)
        << all[0].report;
  }
  // Eight 3x3 convolutions of 64 channels at 28 x 28 in a chain: one region, two conversions.
  {
    Builder b;
    ir::Value* v = b.g.add_input("x", ir::ValueType{DType::f32, {1, 64, 28, 28}});
    for (int i = 0; i < 8; ++i) v = b.relu(b.conv(v, 64, 3, 1, std::string("c").append(std::to_string(i))));
    b.g.add_output(v);
    // Beside it, a lone 1x1 at 8 x 8 (its output is %v16): its two conversions (4096 elements at 100
    // FLOP equivalents each) outweigh a fifth of its 131072 FLOPs, and the report gives both numbers.
    b.g.add_output(b.conv(b.g.add_input("y", ir::ValueType{DType::f32, {1, 32, 8, 8}}), 32, 1, 1, "lone"));
    compiler::optimize(b.g);
    auto r = compiler::run_passes(b.g, {"layout"});
    EXPECT_TRUE(r[0].changed);
    EXPECT_NE(r[0].report.find("8 convolution(s) in 1 region(s), 1 to_nchwc, 1 from_nchwc"), std::string::npos)
        << r[0].report;
    EXPECT_NE(r[0].report.find("kept NCHW: a region of 1 node(s) at %v16 (conversions would cost 409600 FLOP "
                               "equivalents, blocking saves 26214.4)"),
              std::string::npos)
        << r[0].report;
  }
  // EfficientNetV2's fused blocks at 24 channels: 3x3 24 -> 96 of stride 1, then 1x1 96 -> 24 and the
  // residual. A third of each layer's lanes is padding, which outweighed the direct blocked kernels'
  // gain; the 3x3 layers' Winograd counts half their FLOPs saved (Note [Winograd regions]), so the
  // chain is blocked, and the engine matches the graph.
  {
    Builder b;
    ir::Value* v = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 56, 56}});
    for (int i = 0; i < 3; ++i) {
      const std::string n = std::to_string(i);
      v = b.add(b.conv(b.relu(b.conv(v, 96, 3, 1, "e" + n)), 24, 1, 1, "p" + n), v);
    }
    b.g.add_output(v);
    ir::verify(b.g);
    ir::Graph g = b.g.clone();
    compiler::optimize(g);
    auto r = compiler::run_passes(g, {"layout"});
    EXPECT_TRUE(r[0].changed) << r[0].report;
    EXPECT_NE(r[0].report.find("6 convolution(s) in 1 region(s), 1 to_nchwc, 1 from_nchwc"), std::string::npos)
        << r[0].report;
    using Layout = runtime::CompileOptions::Layout;
    runtime::CompileResult c = runtime::compile(b.g, opts(Layout::automatic, 3));
    EXPECT_EQ(op_counts(c.engine)["fused_conv2d_nchwc"], 6);
    // Three blocks of F(4x4, 3x3) rounding (Note [Winograd tiles]: about 4x F(2x2)'s) on 216-term
    // sums: within 1e-3 of the graph's outputs.
    runtime::Executor ex(std::make_shared<runtime::Engine>(c.engine));
    for (int64_t batch : {1, 3}) {
      Tensor xin = random_tensor({batch, 24, 56, 56}, DType::f32, 91 + static_cast<uint64_t>(batch));
      EXPECT_TRUE(testing::all_close(ex.run({xin})[0], ir::run(b.g, {xin})[0], {1e-3, 1e-3})) << "batch " << batch;
    }
  }
}

// Note [Permuted inputs]: SqueezeBERT's q, k and v Conv1d layers read one layer norm output
// permuted from [N, L, C] to [N, C, L], which each copies when it stays NCHW. Three 1x1 layers
// (256 -> 256 over 128 positions) reading such a view block, the copies counted as saved (4
// conversions of 32768 elements against 0.2 of the layers' FLOPs and 3 copies); on a contiguous
// input the same layers stay NCHW; the blocked engine matches the graph.
TEST(Layout, PermutedInputsCountTheCopiesNchwWouldMake) {
  using Layout = runtime::CompileOptions::Layout;
  for (bool permuted : {true, false}) {
    SCOPED_TRACE(permuted ? "permuted input" : "contiguous input");
    Builder b;
    const Shape in_shape = permuted ? Shape{128, 256} : Shape{256, 128};
    ir::Value* x =
        b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), in_shape[0], in_shape[1]}});
    ir::Value* v = x;
    if (permuted) v = b.g.add_node(op("permute"), {v}, {{"dims", std::vector<int64_t>{0, 2, 1}}})->output();
    v = b.g.add_node(op("unsqueeze"), {v}, {{"dims", std::vector<int64_t>{2}}})->output();
    for (const char* n : {"q", "k", "v"}) b.g.add_output(b.conv(v, 256, 1, 1, n));
    ir::verify(b.g);
    runtime::CompileResult c = runtime::compile(b.g, opts(Layout::automatic, 2));
    EXPECT_EQ(op_counts(c.engine)["fused_conv2d_nchwc"], permuted ? 3 : 0);
    EXPECT_EQ(reported(c, "no region pays for its conversions"), !permuted);
    runtime::Executor ex(std::make_shared<runtime::Engine>(c.engine));
    for (int64_t batch : {1, 2}) {
      Tensor xin = random_tensor({batch, in_shape[0], in_shape[1]}, DType::f32, 77 + static_cast<uint64_t>(batch));
      auto got = ex.run({xin});
      auto want = ir::run(b.g, {xin});
      for (size_t i = 0; i < 3; ++i)
        EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-4, 1e-4})) << "batch " << batch << " output " << i;
    }
  }
}

// A global average pool of the last convolution's output runs blocked (Note [Blocked global pool]):
// the region hands out the pooled [N, C, 1, 1] (40 channels: a partial block) instead of the whole
// activation.
TEST(Layout, GlobalAveragePoolJoinsTheRegion) {
  Builder b;
  b.g.name = "pooled";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 10, 9}});
  ir::Value* c = b.relu(b.conv(b.relu(b.conv(x, 32, 3, 1, "c1")), 40, 3, 1, "c2"));
  ir::Value* pooled = b.g.add_node(op("global_avg_pool"), {c})->output();
  ir::Value* flat = b.g.add_node(op("reshape"), {pooled}, {{"shape", std::vector<int64_t>{-1, 40}}})->output();
  b.g.add_output(b.g.add_node(op("gemm"), {flat, b.cst("fc_w", {5, 40}), b.cst("fc_b", {5})}, {{"trans_b", true}})
                     ->output());
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 2);
  EXPECT_EQ(n["global_avg_pool_nchwc"], 1);
  EXPECT_EQ(n["global_avg_pool"], 0);
  EXPECT_EQ(n["to_nchwc"], 1);
  ASSERT_EQ(n["from_nchwc"], 1);
  for (const runtime::EngineStep& st : r.engine.steps)
    if (st.op->name() == "from_nchwc") {
      EXPECT_EQ(st.attrs.get_int("channels"), 40);
      EXPECT_EQ(r.engine.values[static_cast<size_t>(st.inputs[0])].shape.size(), 5u);
      EXPECT_EQ(r.engine.values[static_cast<size_t>(st.inputs[0])].shape[2].size, 1) << "the pooled output";
    }
  expect_engine_matches(r.engine, b.g, {24, 10, 9}, 60);
}

// Note [Elementwise ops in a region]: a squeeze-excite (pool, 1x1, relu, 1x1, hardsigmoid, then
// the depthwise output times the scale) runs blocked inside the region, the scale's partial
// block (40 channels) included, with the scale on either side of the mul, its pool a
// global_avg_pool or a mean over H and W kept as 4-d, as timm writes it (Note [Spatial means as
// global pools]); an op that could make a padded lane infinite (exp) stays NCHW and ends the region.
// pool: "global_avg_pool", or the axes of a mean with keepdim.
ir::Graph squeeze_excite(bool scale_first, const std::string& gate,
                         const std::variant<std::string, std::vector<int64_t>>& pool = "global_avg_pool") {
  Builder b;
  b.g.name = "se";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 9, 9}});
  ir::Value* e = b.relu(b.conv(x, 40, 1, 1, "expand"));
  ir::Value* d = b.relu(b.conv(e, 40, 3, 1, "dw", 40));
  ir::Value* s = std::holds_alternative<std::string>(pool)
                    ? b.g.add_node(op(std::get<std::string>(pool)), {d})->output()
                    : b.g.add_node(op("mean"), {d}, {{"axes", std::get<std::vector<int64_t>>(pool)}, {"keepdim", true}})
                          ->output();
  s = b.conv(b.relu(b.conv(s, 16, 1, 1, "fc1")), 40, 1, 1, "fc2");
  s = b.g.add_node(op(gate), {s})->output();
  ir::Value* m = b.g.add_node(op("mul"), {scale_first ? s : d, scale_first ? d : s})->output();
  b.g.add_output(b.add(b.conv(m, 24, 1, 1, "project"), x));
  ir::verify(b.g);
  return std::move(b.g);
}

TEST(Layout, SqueezeExciteRunsBlocked) {
  using Layout = runtime::CompileOptions::Layout;
  using Pool = std::variant<std::string, std::vector<int64_t>>;
  for (bool scale_first : {false, true})
    for (const Pool& pool : {Pool{"global_avg_pool"}, Pool{std::vector<int64_t>{2, 3}},
                             Pool{std::vector<int64_t>{-1, -2}}}) {
      SCOPED_TRACE(std::string(scale_first ? "scale * x" : "x * scale") +
                   (pool.index() == 0 ? ", global_avg_pool" : ", mean"));
      const ir::Graph g = squeeze_excite(scale_first, "hardsigmoid", pool);
      runtime::CompileResult r = runtime::compile(g, opts(Layout::nchwc, 3));
      auto n = op_counts(r.engine);
      EXPECT_EQ(n["to_nchwc"], 1);    // x, read by the first convolution and the residual
      EXPECT_EQ(n["from_nchwc"], 1);  // the output
      EXPECT_EQ(n["global_avg_pool_nchwc"], 1);
      EXPECT_EQ(n["mean"], 0);
      for (const runtime::EngineStep& st : r.engine.steps)
        if (st.op->name() == "mul" || st.op->name() == "hardsigmoid") {
          EXPECT_EQ(output_rank(r.engine, st), 5u) << st.name << " runs blocked";
        }
      expect_engine_matches(r.engine, g, {24, 9, 9}, 80);
    }
  // A mean over channels and H is no global pool: it stays NCHW.
  {
    const ir::Graph g = squeeze_excite(false, "hardsigmoid", std::vector<int64_t>{1, 2});
    runtime::CompileResult r = runtime::compile(g, opts(Layout::nchwc, 3));
    auto n = op_counts(r.engine);
    EXPECT_EQ(n["global_avg_pool_nchwc"], 0);
    ASSERT_EQ(n["mean"], 1);
    for (const runtime::EngineStep& st : r.engine.steps)
      if (st.op->name() == "mean") {
        EXPECT_EQ(output_rank(r.engine, st), 4u);
      }
    Tensor xin = random_tensor({2, 24, 9, 9}, DType::f32, 95);
    runtime::Executor ex(std::make_shared<runtime::Engine>(r.engine));
    EXPECT_TRUE(testing::all_close(ex.run({xin})[0], ir::run(g, {xin})[0], {1e-4, 1e-4}));
  }
  const ir::Graph g = squeeze_excite(false, "exp");
  runtime::CompileResult r = runtime::compile(g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_GE(n["from_nchwc"], 2) << "the pooled scale leaves the region for exp";
  for (const runtime::EngineStep& st : r.engine.steps)
    if (st.op->name() == "exp") {
      EXPECT_EQ(output_rank(r.engine, st), 4u);
    }
  Tensor xin = random_tensor({2, 24, 9, 9}, DType::f32, 90);
  runtime::Executor ex(std::make_shared<runtime::Engine>(r.engine));
  EXPECT_TRUE(testing::all_close(ex.run({xin})[0], ir::run(g, {xin})[0], {1e-4, 1e-4}));
}

// timm's ECA gate, x * gate.expand_as(x): the pooled [N, C] goes through an op outside any region
// (its 1-d convolution across channels; a matmul here), a sigmoid and a reshape to [N, C, 1, 1],
// and is expanded to x's shape before the mul. The identity pass lets the mul broadcast the gate
// itself (Note [Expands the broadcast does]), so the mul and the residual add run blocked and only
// the [N, C, 1, 1] gate is converted, not a full [N, C, H, W] plane. An expand that no other
// operand's shape covers stays.
TEST(Layout, ExpandedGateRunsBlocked) {
  Builder b;
  b.g.name = "eca";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 32, 9, 9}});
  ir::Value* c = b.conv(b.relu(b.conv(x, 32, 3, 1, "c1")), 32, 1, 1, "c2");
  ir::Value* m = b.g.add_node(op("mean"), {c}, {{"axes", std::vector<int64_t>{2, 3}}, {"keepdim", false}})->output();
  ir::Value* gate = b.unary("sigmoid", b.g.add_node(op("matmul"), {m, b.cst("mix", {32, 32})})->output());
  gate = b.g.add_node(op("reshape"), {gate}, {{"shape", std::vector<int64_t>{-1, 32, 1, 1}}})->output();
  gate = b.g.add_node(op("expand"), {gate}, {{"shape", std::vector<int64_t>{-1, 32, 9, 9}}})->output();
  ir::Value* y = b.relu(b.add(b.binary("mul", c, gate), x));
  b.g.add_output(b.conv(y, 16, 1, 1, "c3"));
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  EXPECT_TRUE(reported(r, "reads %")) << "the identity pass names the expand it dropped";
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["expand"], 0);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 3);
  EXPECT_EQ(n["to_nchwc"], 2);    // x and the [N, 32, 1, 1] gate
  EXPECT_EQ(n["from_nchwc"], 2);  // the pooled mean and the output
  int pooled_conversions = 0;
  for (const runtime::EngineStep& st : r.engine.steps) {
    if (st.op->name() == "mul" || st.op->name() == "add") {
      EXPECT_EQ(output_rank(r.engine, st), 5u) << st.name;
    }
    if (st.op->name() == "to_nchwc")
      pooled_conversions += r.engine.values[static_cast<size_t>(st.inputs[0])].shape[2].size == 1;
  }
  EXPECT_EQ(pooled_conversions, 1) << "the gate is converted as [N, 32, 1, 1]";
  expect_engine_matches(r.engine, b.g, {32, 9, 9}, 130);

  // add(expand(a), b) where b is [N, 32, 1, 1]: the expand makes the output's H and W; it stays.
  Builder e;
  e.g.name = "grows";
  ir::Value* a = e.g.add_input("a", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 32, 1, 9}});
  ir::Value* bb = e.g.add_input("b", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 32, 1, 1}});
  ir::Value* ea = e.g.add_node(op("expand"), {a}, {{"shape", std::vector<int64_t>{-1, 32, 7, 9}}})->output();
  e.g.add_output(e.add(ea, bb));
  ir::verify(e.g);
  ir::Graph kept = e.g.clone();
  compiler::run_passes(kept, {"identity", "dce"}, true, false);
  int expands = 0;
  for (const ir::Node* nd : kept.nodes()) expands += nd->op().name() == "expand";
  EXPECT_EQ(expands, 1);
  Tensor ta = random_tensor({2, 32, 1, 9}, DType::f32, 131), tb = random_tensor({2, 32, 1, 1}, DType::f32, 132);
  const std::vector<Tensor> in{ta, tb};
  EXPECT_TRUE(testing::all_close(ir::run(kept, in)[0], ir::run(e.g, in)[0], {0, 0}));
}

// SKNet's blocks split their input between two convolutions: a split along channels into whole
// blocks joins the region (no conversion around it); parts off a block boundary stay NCHW.
TEST(Layout, ChannelSplitsOfWholeBlocksJoinTheRegion) {
  using Layout = runtime::CompileOptions::Layout;
  for (int64_t first : {int64_t{16}, int64_t{8}}) {
    SCOPED_TRACE("parts " + std::to_string(first) + " and " + std::to_string(48 - first));
    Builder b;
    b.g.name = "split";
    ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16, 9, 9}});
    ir::Value* c = b.relu(b.conv(x, 48, 3, 1, "c1"));
    ir::Node* sp =
        b.g.add_node(op("split"), {c}, {{"sizes", std::vector<int64_t>{first, 48 - first}}, {"axis", int64_t{1}}});
    ir::Value* p0 = b.relu(b.conv(sp->outputs()[0], 32, 3, 1, "p0"));
    ir::Value* p1 = b.relu(b.conv(sp->outputs()[1], 32, 1, 1, "p1"));
    b.g.add_output(b.conv(b.add(p0, p1), 16, 1, 1, "c2"));
    ir::verify(b.g);
    runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
    const bool whole = first == 16;
    for (const runtime::EngineStep& st : r.engine.steps)
      if (st.op->name() == "split") {
        EXPECT_EQ(output_rank(r.engine, st), whole ? 5u : 4u);
      }
    if (whole) {
      EXPECT_TRUE(reported(r, "1 split(s)"));
      auto n = op_counts(r.engine);
      EXPECT_EQ(n["to_nchwc"], 1);
      EXPECT_EQ(n["from_nchwc"], 1);
    }
    expect_engine_matches(r.engine, b.g, {16, 9, 9}, 140);
  }
}

// CSPResNet's LeakyReLU (no convolution epilogue has it) runs blocked between its convolutions
// instead of ending the region at each one, and so do NF-ResNet's scalings by a constant of one
// value (0-d and [1, 1, 1, 1]).
TEST(Layout, LeakyReluAndScalarConstantsJoinTheRegion) {
  using Layout = runtime::CompileOptions::Layout;
  Builder b;
  b.g.name = "leaky";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16, 9, 9}});
  ir::Value* c = b.g.add_node(op("leaky_relu"), {b.conv(x, 40, 3, 1, "c1")}, {{"negative_slope", 0.1}})->output();
  c = b.binary("mul", c, b.g.add_constant("beta", full({}, 0.7, DType::f32)));
  c = b.binary("add", b.g.add_constant("shift", full({1, 1, 1, 1}, 0.25, DType::f32)), c);
  b.g.add_output(b.conv(c, 16, 1, 1, "c2"));
  ir::verify(b.g);
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 2);
  EXPECT_EQ(n["to_nchwc"], 1);
  EXPECT_EQ(n["from_nchwc"], 1);
  for (const runtime::EngineStep& st : r.engine.steps)
    if (st.op->name() == "leaky_relu" || st.op->name() == "mul" || st.op->name() == "add") {
      EXPECT_EQ(output_rank(r.engine, st), 5u) << st.op->name();
    }
  expect_engine_matches(r.engine, b.g, {16, 9, 9}, 150);
}

// torchvision's MNASNet pools with x.mean([2, 3]) (no keepdim) before its classifier: the mean
// runs as the region's global pool, converted back and reshaped to [N, C] for the classifier
// (Note [Spatial means as global pools]).
TEST(Layout, MeanWithoutKeepdimPoolsBlocked) {
  using Layout = runtime::CompileOptions::Layout;
  for (const std::vector<int64_t>& axes : {std::vector<int64_t>{2, 3}, std::vector<int64_t>{-1, -2}}) {
    Builder b;
    b.g.name = "head";
    ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 9, 9}});
    ir::Value* c = b.relu(b.conv(b.relu(b.conv(x, 40, 3, 1, "c1")), 40, 1, 1, "c2"));
    ir::Value* m = b.g.add_node(op("mean"), {c}, {{"axes", axes}, {"keepdim", false}})->output();
    ir::Value* w = b.g.add_constant("fc_w", random_tensor({40, 10}, DType::f32, 61));
    b.g.add_output(b.g.add_node(op("matmul"), {m, w})->output());
    ir::verify(b.g);
    runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
    auto n = op_counts(r.engine);
    EXPECT_EQ(n["global_avg_pool_nchwc"], 1);
    EXPECT_EQ(n["mean"], 0);
    EXPECT_EQ(n["from_nchwc"], 1);  // the pooled [N, 40, 1, 1], not the 9 x 9 plane
    expect_engine_matches(r.engine, b.g, {24, 9, 9}, 120);
  }
}

// ConvNeXt V2's block as timm exports it: a 7x7 depthwise layer, its channels-last LayerNorm
// (permute -> layer_norm over the last axis -> permute back), a 1x1 expansion with gelu, the global
// response norm (the L2 norm of each channel over H and W, divided by its mean over the channels,
// scaling the activation), a 1x1 projection and the residual. 40 channels leave a partial block.
// The norms run blocked (Note [Blocked channel norm], Note [Blocked spatial norm]), the block is one
// region, and only the GRN's per-channel [N, C, 1, 1] values cross it.
ir::Graph convnext_v2_block(bool affine) {
  Builder b;
  b.g.name = "convnext_v2";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 40, 9, 9}});
  ir::Value* v = b.relu(b.conv(x, 40, 3, 1, "stem"));
  for (int i = 0; i < 2; ++i) {
    const std::string n = std::to_string(i);
    ir::Value* dw = b.conv(v, 40, 7, 1, "dw" + n, 40);
    ir::Value* t = b.g.add_node(op("permute"), {dw}, {{"dims", std::vector<int64_t>{0, 2, 3, 1}}})->output();
    std::vector<ir::Value*> ln_in{t};
    if (affine) ln_in.push_back(b.cst("ln_w" + n, {40})), ln_in.push_back(b.cst("ln_b" + n, {40}));
    ir::Value* ln = b.g.add_node(op("layer_norm"), ln_in, {{"axis", int64_t{-1}}, {"eps", 1e-6}})->output();
    ir::Value* back = b.g.add_node(op("permute"), {ln}, {{"dims", std::vector<int64_t>{0, 3, 1, 2}}})->output();
    ir::Value* e = b.unary("gelu", b.conv(back, 160, 1, 1, "fc1" + n));
    ir::Value* gx = b.g.add_node(op("norm"), {e}, {{"axes", std::vector<int64_t>{2, 3}}, {"keepdim", true}})->output();
    ir::Value* gm = b.g.add_node(op("mean"), {gx}, {{"axes", std::vector<int64_t>{1}}, {"keepdim", true}})->output();
    ir::Value* nx = b.binary("div", gx, b.binary("add", gm, b.g.add_constant("eps" + n, scalar_tensor(1e-6))));
    ir::Value* grn = b.add(b.binary("mul", b.cst("gamma" + n, {1, 160, 1, 1}), b.binary("mul", e, nx)), e);
    v = b.add(b.conv(grn, 40, 1, 1, "fc2" + n), v);
  }
  b.g.add_output(v);
  ir::verify(b.g);
  return std::move(b.g);
}

TEST(Layout, ConvNeXtNormsRunBlocked) {
  using Layout = runtime::CompileOptions::Layout;
  for (bool affine : {true, false}) {
    SCOPED_TRACE(affine ? "affine" : "no weight or bias");
    const ir::Graph g = convnext_v2_block(affine);
    runtime::CompileResult r = runtime::compile(g, opts(Layout::nchwc, 3));
    auto n = op_counts(r.engine);
    EXPECT_EQ(n["layer_norm_nchwc"], 2);
    EXPECT_EQ(n["global_norm_nchwc"], 2);
    EXPECT_EQ(n["layer_norm"] + n["norm"] + n["permute"], 0);
    // x, then per block the GRN's divided norm back in; out: the output and each block's norm.
    EXPECT_EQ(n["to_nchwc"], 3);
    EXPECT_EQ(n["from_nchwc"], 3);
    EXPECT_TRUE(reported(r, "2 layer norm(s)"));
    expect_engine_matches(r.engine, g, {40, 9, 9}, 140);
  }
  // A layer norm whose permuted input is read elsewhere too stays as it is.
  Builder b;
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {1, 32, 6, 6}});
  ir::Value* c = b.conv(x, 32, 3, 1, "c");
  ir::Value* t = b.g.add_node(op("permute"), {c}, {{"dims", std::vector<int64_t>{0, 2, 3, 1}}})->output();
  ir::Value* ln = b.g.add_node(op("layer_norm"), {t}, {{"axis", int64_t{3}}})->output();
  b.g.add_output(b.g.add_node(op("permute"), {ln}, {{"dims", std::vector<int64_t>{0, 3, 1, 2}}})->output());
  b.g.add_output(t);
  ir::verify(b.g);
  auto r = compiler::run_passes(b.g, {"layout_all"});
  EXPECT_EQ(r[0].report.find("layer norm"), std::string::npos) << r[0].report;
}

// EfficientNet's block as ONNX exporters write it: SiLU as x * sigmoid(x) (both operand orders)
// after the expansion and the depthwise layer and in the squeeze-excite's first 1x1 (10 channels:
// a partial block), its second 1x1 gated by a sigmoid. gelu_fusion makes each SiLU one silu node,
// the epilogue pass puts silu and sigmoid into the convolutions, and the whole block runs blocked
// (silu and sigmoid in the blocked tiles' finish). The gate's mul reads the sigmoid of another
// value and stays a mul.
TEST(Layout, SiluAndSigmoidEpiloguesRunBlocked) {
  using Layout = runtime::CompileOptions::Layout;
  Builder b;
  b.g.name = "mbconv";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 9, 9}});
  bool flip = false;
  auto swish = [&](ir::Value* v) {
    ir::Value* sg = b.g.add_node(op("sigmoid"), {v})->output();
    flip = !flip;
    return flip ? b.g.add_node(op("mul"), {v, sg})->output() : b.g.add_node(op("mul"), {sg, v})->output();
  };
  ir::Value* e = swish(b.conv(x, 48, 1, 1, "expand"));
  ir::Value* d = swish(b.conv(e, 48, 3, 1, "dw", 48));
  ir::Value* s = b.g.add_node(op("global_avg_pool"), {d})->output();
  s = b.g.add_node(op("sigmoid"), {b.conv(swish(b.conv(s, 10, 1, 1, "fc1")), 48, 1, 1, "fc2")})->output();
  ir::Value* m = b.g.add_node(op("mul"), {d, s})->output();
  b.g.add_output(b.add(b.conv(m, 24, 1, 1, "project"), x));
  ir::verify(b.g);

  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  EXPECT_TRUE(reported(r, "= silu(%")) << "gelu_fusion names the SiLUs it fused";
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 5);
  EXPECT_EQ(n["mul"], 1) << "only the gate's mul is left";
  EXPECT_EQ(n["sigmoid"] + n["silu"] + n["fused_conv2d"] + n["conv2d"], 0);
  EXPECT_EQ(n["to_nchwc"], 1);
  EXPECT_EQ(n["from_nchwc"], 1);
  std::map<std::string, int> acts;
  for (const runtime::EngineStep& st : r.engine.steps)
    if (st.op->name() == "fused_conv2d_nchwc") ++acts[st.attrs.get_string("activation")];
  EXPECT_EQ(acts["silu"], 3);
  EXPECT_EQ(acts["sigmoid"], 1);
  expect_engine_matches(r.engine, b.g, {24, 9, 9}, 70);
}

// EfficientFormer's and InceptionNeXt's MLPs: 1x1 -> bias -> GELU (erf) -> 1x1 with a residual,
// GELU written as exporters write it (x * 0.5 * (1 + erf(x / sqrt 2))) and as the op. gelu_fusion
// makes one gelu node, the epilogue pass puts it into the first 1x1 (the blocked tiles' finish),
// and EfficientFormer's token mixer, pool(y) - y, with a gelu after it, runs in the region as
// elementwise members: one region, no erf, fused_conv2d or conv2d left.
TEST(Layout, GeluEpiloguesAndAPoolsDifferenceRunBlocked) {
  using Layout = runtime::CompileOptions::Layout;
  Builder b;
  b.g.name = "mlp";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 9, 9}});
  auto scalar = [&](const std::string& n, float v) { return b.g.add_constant(n, full({}, v, TensorOptions())); };
  ir::Value* h = b.conv(x, 40, 1, 1, "fc1");
  ir::Value* erf = b.g.add_node(op("erf"), {b.binary("mul", h, scalar("inv_sqrt2", 0.70710678f))})->output();
  ir::Value* g1 = b.binary("mul", b.binary("mul", h, scalar("half", 0.5f)), b.binary("add", erf, scalar("one", 1.f)));
  ir::Value* y = b.add(b.conv(g1, 24, 1, 1, "fc2"), x);
  ir::Value* pool = b.g.add_node(op("max_pool2d"), {y},
                                 {{"kernel", std::vector<int64_t>{3, 3}},
                                  {"stride", std::vector<int64_t>{1, 1}},
                                  {"padding", std::vector<int64_t>{1, 1, 1, 1}}})
                        ->output();
  ir::Value* g2 = b.g.add_node(op("gelu"), {b.binary("sub", pool, y)})->output();
  b.g.add_output(b.conv(g2, 24, 3, 1, "mix"));
  ir::verify(b.g);

  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 3);
  EXPECT_EQ(n["max_pool2d_nchwc"], 1);
  EXPECT_EQ(n["gelu"], 1) << "the mixer's gelu, in the region";
  EXPECT_EQ(n["sub"], 1);
  EXPECT_EQ(n["erf"] + n["fused_conv2d"] + n["conv2d"], 0);
  EXPECT_EQ(n["to_nchwc"], 1);
  EXPECT_EQ(n["from_nchwc"], 1);
  std::map<std::string, int> acts;
  for (const runtime::EngineStep& st : r.engine.steps)
    if (st.op->name() == "fused_conv2d_nchwc") ++acts[st.attrs.get_string("activation")];
  EXPECT_EQ(acts["gelu"], 1);
  expect_engine_matches(r.engine, b.g, {24, 9, 9}, 90);
}

// Note [Winograd tiles] (kernels/cpu/conv_nchwc.cc): without timing, the blocked 3x3 layers of
// stride 1 take Winograd's F(4x4, 3x3) tiles (Note [Heuristic tactics] in runtime/tactics.cc), the
// strided one and the 1x1 keep the direct kernel, and the engine matches the reference, a residual
// summed in place included.
TEST(Layout, StrideOneThreeByThreeLayersRunWinograd) {
  using Layout = runtime::CompileOptions::Layout;
  const ir::Graph g = resnet_like(32);
  runtime::Engine e = runtime::compile(g, opts(Layout::nchwc, 3)).engine;
  int winograd = 0, direct = 0;
  for (const runtime::EngineStep& st : e.steps) {
    if (st.op->name() != "fused_conv2d_nchwc") continue;
    const auto& w = e.values[static_cast<size_t>(st.inputs[1])].shape;
    const bool three = w[2].size == 3 && st.attrs.get_ints("stride") == std::vector<int64_t>{1, 1};
    EXPECT_EQ(st.tactic == "winograd4", three) << "a " << w[2].size << "x" << w[3].size << " layer ran " << st.tactic;
    ++(st.tactic == "winograd4" ? winograd : direct);
  }
  EXPECT_EQ(winograd, 3);  // c1, c2, c4
  EXPECT_EQ(direct, 2);    // c3 (stride 2), proj
  runtime::Executor ex(std::make_shared<runtime::Engine>(e));
  for (int64_t batch : {1, 3}) {
    Tensor xin = random_tensor({batch, 16, 12, 12}, DType::f32, 90 + static_cast<uint64_t>(batch), -2, 2);
    auto got = ex.run({xin});
    auto want = ir::run(g, {xin});
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-4, 1e-4})) << "batch " << batch << " output " << i;
  }
}

// Pre-activation blocks (ResNet v2): each block's input is batch-normalized and activated before its
// first convolution while the shortcut reads it as it is, so no convolution precedes the batch
// norm to fold it into. It runs blocked as one scale_shift_nchwc with the activation after it
// (Note [Blocked batch norm] in kernels/cpu/conv_nchwc.cc). 40 channels: a partial last block.
// With `peek`, the last batch norm's output is also a graph output: the activation then runs on
// its own, blocked, and the norm's output is converted back for the reader outside.
ir::Graph preactivation(const std::string& act, bool peek) {
  Builder b;
  b.g.name = "preact";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 10, 10}});
  auto norm = [&](ir::Value* v, const std::string& n) {
    const int64_t c = v->type().shape[1].size;
    ir::Value* var = b.g.add_constant(n + "_var", random_tensor({c}, DType::f32, b.seed++, 0.5, 1.5));
    ir::Value* gamma = b.g.add_constant(n + "_gamma", random_tensor({c}, DType::f32, b.seed++, 0.5, 2.0));
    ir::Value* mean = b.cst(n + "_mean", {c});
    return b.g.add_node(op("batch_norm"), {v, mean, var, gamma, b.cst(n + "_beta", {c})}, {{"eps", 1e-5}})->output();
  };
  auto activate = [&](ir::Value* v) {
    if (act == "relu6")
      return b.g.add_node(op("clip"), {v}, {{"min", 0.0}, {"max", 6.0}})->output();
    return b.g.add_node(op(act), {v})->output();
  };
  ir::Value* h = b.conv(x, 40, 3, 1, "c0");
  for (int i = 0; i < 2; ++i) {
    const std::string id = std::to_string(i);
    ir::Value* a = activate(norm(h, std::string("bn").append(id)));
    ir::Value* r = b.relu(b.conv(a, 40, 3, 1, std::string("ca").append(id)));
    h = b.add(b.conv(r, 40, 3, 1, std::string("cb").append(id)), h);
  }
  ir::Value* last = norm(h, "bn_last");
  b.g.add_output(activate(last));
  if (peek) b.g.add_output(last);
  ir::verify(b.g);
  return std::move(b.g);
}

TEST(Layout, PreActivationBatchNormsRunBlocked) {
  using Layout = runtime::CompileOptions::Layout;
  for (const std::string act : {"relu", "relu6", "hardswish"})
    for (bool peek : {false, true}) {
      SCOPED_TRACE(act + (peek ? ", the last norm read outside" : ""));
      const ir::Graph g = preactivation(act, peek);
      {
        // layout_all: the cost model keeps a graph this small in NCHW.
        runtime::CompileResult r = runtime::compile(g, opts(Layout::nchwc, 3));
        auto n = op_counts(r.engine);
        EXPECT_EQ(n["scale_shift_nchwc"], 3);
        EXPECT_EQ(n["batch_norm"], 0);
        EXPECT_EQ(n["to_nchwc"], 1);              // x
        EXPECT_EQ(n["from_nchwc"], peek ? 2 : 1);  // the outputs
        // The activation runs in the scale and shift, except after the norm read outside.
        const std::string act_op = act == "relu6" ? "clip" : act;
        EXPECT_EQ(n[act_op], peek ? 1 : 0);
        for (const runtime::EngineStep& st : r.engine.steps)
          if (st.op->name() == act_op) {
            EXPECT_EQ(output_rank(r.engine, st), 5u) << st.name;
          }
        const std::string want_report = peek ? "5 convolution(s), 3 batch norm(s) and 1 elementwise op(s) in 1 region"
                                             : "5 convolution(s) and 3 batch norm(s) in 1 region";
        EXPECT_TRUE(reported(r, want_report));
        runtime::Executor ex(std::make_shared<runtime::Engine>(r.engine));
        for (int64_t batch : {1, 3}) {
          Tensor xin = random_tensor({batch, 24, 10, 10}, DType::f32, 70 + static_cast<uint64_t>(batch));
          auto got = ex.run({xin});
          auto want = ir::run(g, {xin});
          ASSERT_EQ(got.size(), want.size());
          // Both in f32, summed in different orders; the residual sums grow before a norm subtracts
          // its mean (x * scale + shift cancels), and later 360-term sums carry the difference on.
          for (size_t i = 0; i < got.size(); ++i)
            EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-3, 1e-3})) << "batch " << batch << ", output " << i;
        }
      }
    }
  // A batch norm of a value from outside any region (here the graph input) stays as it is.
  Builder b;
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {1, 32, 6, 6}});
  ir::Value* var = b.g.add_constant("v", random_tensor({32}, DType::f32, 9, 0.5, 1.5));
  ir::Value* bn = b.g.add_node(op("batch_norm"), {x, b.cst("m", {32}), var}, {{"eps", 1e-5}})->output();
  b.g.add_output(b.conv(b.relu(bn), 32, 3, 1, "c"));
  ir::verify(b.g);
  auto r = compiler::run_passes(b.g, {"layout_all"});
  EXPECT_EQ(r[0].report.find("batch norm"), std::string::npos) << r[0].report;
  int norms = 0;
  for (const ir::Node* nd : b.g.nodes()) norms += nd->op().name() == "batch_norm";
  EXPECT_EQ(norms, 1);
}

// Caffe's scale layer after a batch norm (the ONNX zoo's DenseNet): a mul and an add by per-channel
// constants, [C, 1, 1] or [1, C, 1, 1], either side of the op. They run blocked, the constants
// blocked when the pass runs (no to_nchwc for them); 40 channels leave a partial block.
TEST(Layout, PerChannelConstantsJoinTheRegion) {
  Builder b;
  b.g.name = "scale_layer";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 8, 8}});
  ir::Value* h = b.conv(x, 40, 3, 1, "c0");
  ir::Value* var = b.g.add_constant("var", random_tensor({40}, DType::f32, 5, 0.5, 1.5));
  ir::Value* c1 = b.relu(b.conv(h, 40, 3, 1, "c1"));  // the relu keeps bn_fold off the batch norm
  h = b.g.add_node(op("batch_norm"), {c1, b.cst("mean", {40}), var}, {{"eps", 1e-5}})->output();
  h = b.g.add_node(op("mul"), {h, b.cst("scale", {40, 1, 1})})->output();
  h = b.g.add_node(op("add"), {b.cst("shift", {1, 40, 1, 1}), h})->output();
  b.g.add_output(b.conv(b.relu(h), 16, 1, 1, "c2"));
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["to_nchwc"], 1);  // x
  EXPECT_EQ(n["from_nchwc"], 1);
  EXPECT_EQ(n["scale_shift_nchwc"], 1);
  for (const runtime::EngineStep& st : r.engine.steps)
    if (st.op->name() == "mul" || st.op->name() == "add" || st.op->name() == "relu") {
      EXPECT_EQ(output_rank(r.engine, st), 5u) << st.name;
    }
  expect_engine_matches(r.engine, b.g, {24, 8, 8}, 50);
}

// Note [Blocked concat]: SqueezeNet's fire module (a squeeze convolution, two expand convolutions
// concatenated along channels) runs as one region when every part is whole blocks (32 + 48); a
// part of 24 channels, or a concat along another axis, leaves the region.
ir::Graph fire(int64_t second, int64_t axis) {
  Builder b;
  b.g.name = "fire";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 9, 9}});
  ir::Value* sq = b.relu(b.conv(x, 32, 3, 1, "squeeze"));
  ir::Value* e1 = b.relu(b.conv(sq, 32, 1, 1, "expand1"));
  ir::Value* e3 = b.relu(b.conv(sq, axis == 1 ? second : 32, 3, 1, "expand3"));
  ir::Value* cat = b.g.add_node(op("concat"), {e1, e3}, {{"axis", axis}})->output();
  b.g.add_output(b.conv(b.relu(b.conv(cat, 48, 3, 1, "next")), 16, 1, 1, "out"));
  ir::verify(b.g);
  return std::move(b.g);
}

TEST(Layout, ConcatOfWholeBlocksJoinsTheRegion) {
  using Layout = runtime::CompileOptions::Layout;
  for (const auto& [second, axis] : std::vector<std::pair<int64_t, int64_t>>{{48, 1}, {24, 1}, {32, 2}}) {
    SCOPED_TRACE("32 + " + std::to_string(second) + " channels, axis " + std::to_string(axis));
    const ir::Graph g = fire(second, axis);
    runtime::CompileResult r = runtime::compile(g, opts(Layout::nchwc, 3));
    const bool blocked = second % 16 == 0 && axis == 1;
    auto n = op_counts(r.engine);
    EXPECT_EQ(n["to_nchwc"], blocked ? 1 : 2);    // x; and, unblocked, the concat's output
    EXPECT_EQ(n["from_nchwc"], blocked ? 1 : 3);  // the output; unblocked, the concat's two parts
    for (const runtime::EngineStep& st : r.engine.steps)
      if (st.op->name() == "concat") {
        EXPECT_EQ(output_rank(r.engine, st), blocked ? 5u : 4u);
      }
    expect_engine_matches(r.engine, g, {24, 9, 9}, 60);
  }
}

// A stem (3 input channels) reads the NCHW input as it is and its max pool runs blocked: the region
// starts at the graph input without a conversion. A plain reader of the pool (a graph output) gets
// one back.
TEST(Layout, StemAndMaxPoolJoinTheRegion) {
  Builder b;
  b.g.name = "stem";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 3, 21, 19}});
  ir::Value* stem = b.relu(b.conv(x, 32, 7, 2, "stem"));
  ir::Value* pool = b.g.add_node(op("max_pool2d"), {stem},
                                 {{"kernel", std::vector<int64_t>{3, 3}},
                                  {"stride", std::vector<int64_t>{2, 2}},
                                  {"padding", std::vector<int64_t>{1, 1, 1, 1}}})
                        ->output();
  ir::Value* y = b.relu(b.add(b.conv(b.relu(b.conv(pool, 32, 3, 1, "c1")), 32, 3, 1, "c2"), pool));
  b.g.add_output(y);
  b.g.add_output(pool);
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 2));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 3);
  EXPECT_EQ(n["max_pool2d_nchwc"], 1);
  EXPECT_EQ(n["to_nchwc"], 0);
  EXPECT_EQ(n["from_nchwc"], 2);  // y and the pool: both graph outputs
  EXPECT_TRUE(reported(r, "3 convolution(s) and 1 pool(s) in 1 region(s), 0 to_nchwc, 2 from_nchwc"));
  runtime::Executor ex(std::make_shared<runtime::Engine>(r.engine));
  for (int64_t batch : {1, 2}) {
    Tensor in = random_tensor({batch, 3, 21, 19}, DType::f32, 60 + static_cast<uint64_t>(batch));
    auto want = ir::run(b.g, {in});
    auto got = ex.run({in});
    for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-4, 1e-4})) << batch << " " << i;
  }
}

// Note [Blocked average pool] (conv_nchwc.cc): ResNet-D's downsampling block, whose shortcut
// average-pools the block's input (2 x 2, stride 2, ceil mode, an odd plane) before its 1x1
// projection, is one region with the pool inside it.
TEST(Layout, AveragePoolJoinsTheRegion) {
  Builder b;
  b.g.name = "resnet_d";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 24, 11, 11}});
  ir::Value* in = b.relu(b.conv(x, 32, 3, 1, "c0"));
  ir::Value* pool = b.g.add_node(op("avg_pool2d"), {in},
                                 {{"kernel", std::vector<int64_t>{2, 2}},
                                  {"stride", std::vector<int64_t>{2, 2}},
                                  {"ceil_mode", true},
                                  {"count_include_pad", false}})
                        ->output();
  ir::Value* main = b.conv(b.relu(b.conv(in, 48, 3, 2, "c1")), 48, 3, 1, "c2");
  b.g.add_output(b.relu(b.add(main, b.conv(pool, 48, 1, 1, "proj"))));
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["avg_pool2d_nchwc"], 1);
  EXPECT_EQ(n["avg_pool2d"], 0);
  EXPECT_EQ(n["to_nchwc"], 1);
  EXPECT_EQ(n["from_nchwc"], 1);
  expect_engine_matches(r.engine, b.g, {24, 11, 11}, 70);
}

// Two groups (neither one group nor depthwise), an activation the blocked kernels lack, filters
// that are not constants, f64.
TEST(Layout, LeavesWhatCannotBeBlocked) {
  Builder b;
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {1, 32, 10, 10}});
  ir::Value* w = b.g.add_input("w", ir::ValueType{DType::f32, {32, 32, 3, 3}});
  ir::Value* grouped = b.conv(x, 32, 3, 1, "grouped", 16);  // 2 channels a group: no span fills a block
  ir::Value* act = b.g.add_node(op("tanh"), {b.conv(grouped, 32, 1, 1, "act")})->output();  // fuses tanh: not blocked
  ir::Value* runtime_w = b.g.add_node(op("conv2d"), {act, w}, {{"padding", std::vector<int64_t>{1, 1, 1, 1}}})->output();
  b.g.add_output(runtime_w);
  ir::Value* xd = b.g.add_input("xd", ir::ValueType{DType::f64, {1, 16, 6, 6}});
  b.g.add_output(b.g.add_node(op("conv2d"), {xd, b.g.add_constant("wd", random_tensor({16, 16, 1, 1}, DType::f64, 3))})
                     ->output());
  compiler::optimize(b.g);
  auto r = compiler::run_passes(b.g, {"layout_all"});
  EXPECT_FALSE(r[0].changed) << r[0].report;
  EXPECT_NE(r[0].report.find("no convolution to block"), std::string::npos) << r[0].report;
}

// ResNeXt's bottleneck: 1x1, a grouped 3x3 (4 channels a group: spans of 4 groups; then 8 a group,
// strided: spans of 2), 1x1 with the residual. The grouped layers join the region (Note [Grouped
// blocks] in conv_nchwc.cc): no conversion around them, and the engine matches the reference.
TEST(Layout, GroupedConvolutionsJoinTheRegion) {
  Builder b;
  b.g.name = "resnext_like";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 64, 11, 11}});
  ir::Value* g1 = b.relu(b.conv(b.relu(b.conv(x, 64, 1, 1, "a1")), 64, 3, 1, "g1", 16));
  ir::Value* y1 = b.relu(b.add(b.conv(g1, 64, 1, 1, "c1"), x));
  ir::Value* g2 = b.relu(b.conv(b.relu(b.conv(y1, 128, 1, 1, "a2")), 128, 3, 2, "g2", 16));
  ir::Value* y2 = b.relu(b.add(b.conv(g2, 128, 1, 1, "c2"), b.conv(y1, 128, 1, 2, "proj")));
  b.g.add_output(y2);
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 7);
  EXPECT_EQ(n["fused_conv2d"] + n["conv2d"], 0);
  EXPECT_EQ(n["to_nchwc"], 1);
  EXPECT_EQ(n["from_nchwc"], 1);
  expect_engine_matches(r.engine, b.g, {64, 11, 11}, 90);
}

// MobileNet's shapes: depthwise convolutions and channel counts that are not multiples of 16 (a
// stem of 3 -> 24, 24 -> 40) run blocked too, their partial blocks' lanes zero.
TEST(Layout, DepthwiseAndPartialBlocksMatchReference) {
  Builder b;
  b.g.name = "mobile";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 3, 17, 15}});
  ir::Value* stem = b.g.add_node(op("clip"), {b.conv(x, 24, 3, 2, "stem")}, {{"min", 0.0}, {"max", 6.0}})->output();
  ir::Value* dw = b.relu(b.conv(stem, 24, 3, 1, "dw", 24));
  ir::Value* pw = b.conv(dw, 40, 1, 1, "pw");
  ir::Value* dw2 = b.relu(b.conv(pw, 40, 5, 2, "dw2", 40));
  ir::Value* y = b.add(b.conv(dw2, 40, 1, 1, "proj"), b.conv(pw, 40, 3, 2, "skip"));
  b.g.add_output(y);
  ir::verify(b.g);
  using Layout = runtime::CompileOptions::Layout;
  runtime::CompileResult r = runtime::compile(b.g, opts(Layout::nchwc, 3));
  auto n = op_counts(r.engine);
  EXPECT_EQ(n["fused_conv2d_nchwc"], 6);
  EXPECT_EQ(n["to_nchwc"], 0);
  EXPECT_EQ(n["from_nchwc"], 1);
  expect_engine_matches(r.engine, b.g, {3, 17, 15}, 80);
}

}  // namespace
}  // namespace kiln
