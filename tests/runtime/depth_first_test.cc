// Depth-first groups (Note [Depth-first groups] in src/runtime/executor.cc): at a batch of 2 or
// more, runs of per-sample steps go image by image, a thread's images on that thread alone, their
// intermediates in a sub-arena per thread. The results must be the reference's at every batch
// (the threads' share of the images whole or not), blocked and NCHW, on one thread and two; a
// step whose filters outweigh an image stays out of the groups; the arena's slots for what comes
// into a group and what leaves it never overlap; the profile still has every step.
#include <gtest/gtest.h>

#include "kiln/compiler.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ir.h"
#include "kiln/runtime.h"
#include "support/cnn_graph.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;
using Layout = runtime::CompileOptions::Layout;

using Builder = testing::CnnGraphBuilder;

// A MobileNetV3-like stack: a strided stem, an inverted residual block with a squeeze-excite gate
// (a pooled [N, C, 1, 1] scale broadcast over the image), then a 1x1 layer whose 512 KB of filters
// outweigh an image (and kSmallFilterBytes), a mean and a gemm. The block's output is a graph
// output as well: a value leaving a group while later steps of the group still read it.
ir::Graph mobile_like() {
  Builder b(700);
  b.g.name = "mobile_like";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 3, 24, 24}});
  ir::Value* stem = b.unary("relu", b.conv(x, 16, 3, 2, "stem"));
  ir::Value* e = b.unary("relu", b.conv(stem, 64, 1, 1, "expand"));
  ir::Value* d = b.unary("relu", b.conv(e, 64, 3, 1, "dw", 64));
  ir::Value* s = b.g.add_node(op("global_avg_pool"), {d})->output();
  s = b.unary("hardsigmoid", b.conv(b.unary("relu", b.conv(s, 16, 1, 1, "fc1")), 64, 1, 1, "fc2"));
  ir::Value* block = b.binary("add", b.conv(b.binary("mul", d, s), 16, 1, 1, "project"), stem);
  ir::Value* wide = b.unary("relu", b.conv(block, 256, 1, 1, "wide"));
  ir::Value* big = b.unary("relu", b.conv(wide, 512, 1, 1, "big"));
  ir::Value* m = b.g.add_node(op("mean"), {big}, {{"axes", std::vector<int64_t>{2, 3}}})->output();
  ir::Value* logits =
      b.g.add_node(op("gemm"), {m, b.cst("fc_w", {10, 512}), b.cst("fc_b", {10})}, {{"trans_b", true}})->output();
  b.g.add_output(logits);
  b.g.add_output(block);
  ir::verify(b.g);
  return std::move(b.g);
}

runtime::Engine compile(const ir::Graph& g, Layout layout) {
  runtime::CompileOptions o;
  o.passes.opt_level = 2;
  o.batch_min = 1;
  o.batch_max = 8;
  o.layout = layout;
  return runtime::compile(g, o).engine;
}

// The step whose constant input 1 has `shape` (a convolution's filters), or steps.size().
size_t step_with_filters(const runtime::Engine& e, const Shape& shape) {
  for (size_t s = 0; s < e.steps.size(); ++s) {
    const auto& ins = e.steps[s].inputs;
    if (ins.size() < 2 || ins[1] < 0) continue;
    const runtime::EngineValue& v = e.values[static_cast<size_t>(ins[1])];
    if (v.kind == runtime::EngineValue::Kind::constant && ir::static_shape(e.constants[static_cast<size_t>(v.index)].shape()) == ir::static_shape(shape))
      return s;
  }
  return e.steps.size();
}

class ThreadsGuard {
 public:
  ThreadsGuard() : saved_(get_num_threads()) {}
  ~ThreadsGuard() { set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(DepthFirst, GroupsStopAtHeavyFiltersAndMatchTheReference) {
  const ir::Graph g = mobile_like();
  ThreadsGuard guard;
  for (Layout layout : {Layout::nchwc, Layout::nchw}) {
    SCOPED_TRACE(layout == Layout::nchwc ? "blocked" : "NCHW");
    auto engine = std::make_shared<runtime::Engine>(compile(g, layout));
    runtime::Executor ex(engine), batched(engine);
    batched.set_depth_first(false);
    const auto groups = ex.depth_first_groups();
    ASSERT_FALSE(groups.empty());
    EXPECT_EQ(groups[0].first, 0u) << "the stem reads the engine's input and starts the group";
    const size_t big = step_with_filters(*engine, {512, 256, 1, 1});
    ASSERT_LT(big, engine->steps.size());
    for (auto [begin, end] : groups) {
      EXPECT_GE(end - begin, 2u);
      EXPECT_FALSE(begin <= big && big < end) << "the 512 KB filters are read once for the batch";
    }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int64_t batch : {1, 2, 3, 5, 8}) {
        SCOPED_TRACE("threads " + std::to_string(threads) + ", batch " + std::to_string(batch));
        Tensor x = random_tensor({batch, 3, 24, 24}, DType::f32, 10 + static_cast<uint64_t>(batch));
        const auto want = ir::run(g, {x});
        const auto got = ex.run({x});
        const auto plain = batched.run({x});
        ASSERT_EQ(got.size(), 2u);
        for (size_t i = 0; i < 2; ++i) {
          EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-4, 1e-4})) << "output " << i;
          EXPECT_TRUE(testing::all_close(got[i], plain[i], {1e-5, 1e-5})) << "output " << i;
        }
        // Again: the sub-arenas and the arena's views are reused, nothing is left over from before.
        EXPECT_TRUE(testing::all_close(ex.run({x})[0], want[0], {1e-4, 1e-4}));
      }
    }
  }
}

// softmax (not per sample) before and after a chain of convolutions: the value coming into the
// chain dies at its first step, and the plan gives its slot to a later value; one leaving the chain
// must not land on it (image 0 would write over images 1..n's input before they read it). Whatever
// groups the executor finds, every batch must match the reference.
TEST(DepthFirst, GroupInputsAndOutputsNeverShareASlot) {
  Builder b(700);
  b.g.name = "chain";
  ir::Value* x = b.g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16, 10, 10}});
  ir::Value* in = b.g.add_node(op("softmax"), {x}, {{"axis", int64_t{1}}})->output();
  ir::Value* v = in;
  for (int i = 0; i < 4; ++i) v = b.unary("relu", b.conv(v, 16, 3, 1, "c" + std::to_string(i)));
  b.g.add_output(b.g.add_node(op("softmax"), {v}, {{"axis", int64_t{1}}})->output());
  ir::verify(b.g);
  ThreadsGuard guard;
  for (Layout layout : {Layout::nchwc, Layout::nchw}) {
    auto engine = std::make_shared<runtime::Engine>(compile(b.g, layout));
    runtime::Executor ex(engine);
    EXPECT_FALSE(ex.depth_first_groups().empty());
    for (const auto& [begin, end] : ex.depth_first_groups()) {
      // The group's arena inputs and outputs, pairwise apart.
      std::vector<const runtime::EngineValue*> ins, outs;
      for (size_t s = begin; s < end; ++s) {
        for (int32_t id : engine->steps[s].inputs) {
          if (id < 0) continue;
          bool made_inside = false;
          for (size_t t = begin; t < s; ++t)
            for (int32_t o : engine->steps[t].outputs) made_inside = made_inside || o == id;
          const runtime::EngineValue& val = engine->values[static_cast<size_t>(id)];
          if (!made_inside && val.kind == runtime::EngineValue::Kind::arena) ins.push_back(&val);
        }
        for (int32_t id : engine->steps[s].outputs) {
          bool read_after = false;
          for (size_t t = end; t < engine->steps.size(); ++t)
            for (int32_t i : engine->steps[t].inputs) read_after = read_after || i == id;
          for (int32_t o : engine->outputs) read_after = read_after || o == id;
          if (read_after) outs.push_back(&engine->values[static_cast<size_t>(id)]);
        }
      }
      for (const auto* i : ins)
        for (const auto* o : outs)
          EXPECT_FALSE(i->offset < o->offset + o->bytes && o->offset < i->offset + i->bytes)
              << "%" << i->name << " and %" << o->name << " share arena bytes in group [" << begin << ", " << end << ")";
    }
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      for (int64_t batch : {2, 3, 8}) {
        Tensor xin = random_tensor({batch, 16, 10, 10}, DType::f32, 30 + static_cast<uint64_t>(batch));
        EXPECT_TRUE(testing::all_close(ex.run({xin})[0], ir::run(b.g, {xin})[0], {1e-4, 1e-4}))
            << "threads " << threads << ", batch " << batch;
      }
    }
  }
}

TEST(DepthFirst, ProfileKeepsEveryStep) {
  const ir::Graph g = mobile_like();
  auto engine = std::make_shared<runtime::Engine>(compile(g, Layout::nchwc));
  runtime::Executor ex(engine);
  ASSERT_FALSE(ex.depth_first_groups().empty());
  ex.set_profiling(true);
  Tensor x = random_tensor({4, 3, 24, 24}, DType::f32, 5);
  ex.run({x});
  ex.run({x});
  ASSERT_EQ(ex.profile().size(), engine->steps.size());
  double group_ms = 0;
  size_t in_groups = 0;
  for (const auto& [begin, end] : ex.depth_first_groups())
    for (size_t s = begin; s < end; ++s) {
      group_ms += ex.profile()[s].ms;
      EXPECT_TRUE(ex.profile()[s].image_by_image) << ex.profile()[s].name;
      ++in_groups;
    }
  size_t marked = 0;
  for (const runtime::LayerTime& t : ex.profile()) marked += t.image_by_image;
  EXPECT_EQ(marked, in_groups);
  for (const runtime::LayerTime& t : ex.profile()) {
    EXPECT_EQ(t.runs, 2) << t.name;
    EXPECT_EQ(t.run_ms.size(), 2u) << t.name;
    EXPECT_GE(t.ms, 0.0) << t.name;
  }
  EXPECT_GT(group_ms, 0.0);
}

// With a memory budget that holds the arena and the weights but not a sub-arena, the executor runs
// the groups batched instead of going over it; the results are the same.
TEST(DepthFirst, StaysInsideTheMemoryBudget) {
  const ir::Graph g = mobile_like();
  runtime::Engine e = compile(g, Layout::nchwc);
  int64_t weights = 0;
  for (const Tensor& c : e.constants) weights += c.numel() * static_cast<int64_t>(dtype_size(c.dtype()));
  e.target.memory_budget = e.memory.arena_bytes + weights + 1024;
  runtime::Executor ex(std::make_shared<runtime::Engine>(std::move(e)));
  ASSERT_FALSE(ex.depth_first_groups().empty());
  ex.set_profiling(true);
  Tensor x = random_tensor({4, 3, 24, 24}, DType::f32, 6);
  EXPECT_TRUE(testing::all_close(ex.run({x})[0], ir::run(g, {x})[0], {1e-4, 1e-4}));
  for (const runtime::LayerTime& t : ex.profile()) EXPECT_FALSE(t.image_by_image) << t.name;
}

}  // namespace
}  // namespace kiln
