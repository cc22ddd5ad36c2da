// The memory planner: offsets never overlap for buffers alive at once, views extend their
// source's lifetime, pointwise ops and the blocked convolution (over its residual) go in place,
// and ResNet-50 fits in well under the sum of its intermediates.
#include <gtest/gtest.h>

#include <random>

#include "compiler/memory_plan.h"
#include "kiln/ir.h"
#include "support/testing.h"

namespace kiln::compiler {
namespace {

// No two buffers that are alive at one step share a byte; offsets aligned; arena between the bounds.
void expect_valid_placement(const std::vector<BufferLifetime>& bufs, const std::vector<int64_t>& offsets,
                            int64_t arena) {
  ASSERT_EQ(bufs.size(), offsets.size());
  int64_t sum = 0;
  for (size_t i = 0; i < bufs.size(); ++i) {
    EXPECT_EQ(offsets[i] % kArenaAlignment, 0) << "buffer " << i;
    EXPECT_GE(offsets[i], 0);
    EXPECT_LE(offsets[i] + bufs[i].bytes, arena) << "buffer " << i;
    sum += (bufs[i].bytes + 63) / 64 * 64;
    for (size_t j = i + 1; j < bufs.size(); ++j) {
      bool live_together = bufs[i].first <= bufs[j].last && bufs[j].first <= bufs[i].last;
      bool overlap = offsets[i] < offsets[j] + bufs[j].bytes && offsets[j] < offsets[i] + bufs[i].bytes;
      EXPECT_FALSE(live_together && overlap && bufs[i].bytes > 0 && bufs[j].bytes > 0)
          << "buffers " << i << " [" << bufs[i].first << ", " << bufs[i].last << "] at " << offsets[i] << "+"
          << bufs[i].bytes << " and " << j << " [" << bufs[j].first << ", " << bufs[j].last << "] at " << offsets[j]
          << "+" << bufs[j].bytes;
    }
  }
  EXPECT_GE(arena, live_set_bound(bufs));
  EXPECT_LE(arena, sum);
}

TEST(AssignOffsets, RandomLifetimesNeverOverlap) {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    std::mt19937_64 rng(seed);
    int n = 1 + static_cast<int>(rng() % 60);
    std::vector<BufferLifetime> bufs;
    for (int i = 0; i < n; ++i) {
      int first = static_cast<int>(rng() % 40);
      int last = first + static_cast<int>(rng() % 10);
      int64_t bytes = static_cast<int64_t>(rng() % 5000) + (rng() % 7 == 0 ? 0 : 1);
      bufs.push_back({bytes, first, last});
    }
    int64_t arena = 0;
    auto offsets = assign_offsets(bufs, arena);
    SCOPED_TRACE("seed " + std::to_string(seed));
    expect_valid_placement(bufs, offsets, arena);
  }
}

TEST(AssignOffsets, DisjointLifetimesShareOneSlot) {
  std::vector<BufferLifetime> bufs = {{1000, 0, 1}, {1000, 2, 3}, {1000, 4, 5}, {500, 6, 6}};
  int64_t arena = 0;
  auto offsets = assign_offsets(bufs, arena);
  EXPECT_EQ(arena, 1024);
  for (int64_t o : offsets) EXPECT_EQ(o, 0);
}

TEST(AssignOffsets, BestFitPicksTheSmallestGap) {
  // Big buffers at [0,1024) and [2048,4096) around a 1024-byte hole, live throughout; then a small
  // one that fits the hole.
  std::vector<BufferLifetime> bufs = {{1024, 0, 10}, {1024, 0, 0}, {2048, 0, 10}, {512, 5, 6}};
  int64_t arena = 0;
  auto offsets = assign_offsets(bufs, arena);
  expect_valid_placement(bufs, offsets, arena);
  EXPECT_EQ(arena, 4096);  // the small buffer reuses the dead one's hole instead of growing the arena
  EXPECT_EQ(live_set_bound(bufs), 4096);
}

ir::Graph parse_graph(const std::string& text) {
  ir::Graph g = ir::parse(text);
  ir::verify(g);
  return g;
}

TEST(PlanMemory, PointwiseChainRunsInPlace) {
  ir::Graph g = parse_graph(R"(graph f(%x: f32[b, 64]) {
  %a: f32[b, 64] = exp(%x)
  %c: f32[b, 64] = relu(%a)
  %d: f32[b, 64] = sigmoid(%c)
  %e: f32[b, 64] = tanh(%d)
  return %e
})");
  auto plan = plan_memory(g, {{"b", 8}});
  EXPECT_EQ(plan.buffers.size(), 1u);
  EXPECT_EQ(plan.inplace_count, 3);
  EXPECT_EQ(plan.arena_bytes, 8 * 64 * 4);
  EXPECT_EQ(plan.sum_bytes, 4 * 8 * 64 * 4);
  EXPECT_EQ(plan.lower_bound, 8 * 64 * 4);
}

TEST(PlanMemory, NoInPlaceWhileTheInputIsStillNeeded) {
  ir::Graph g = parse_graph(R"(graph f(%x: f32[16]) {
  %a: f32[16] = exp(%x)
  %c: f32[16] = relu(%a)
  %d: f32[16] = add(%c, %a)
  return %d
})");
  auto plan = plan_memory(g, {});
  const auto& a = plan.values.at(g.find("a"));
  const auto& c = plan.values.at(g.find("c"));
  const auto& d = plan.values.at(g.find("d"));
  EXPECT_FALSE(c.inplace);      // %a is read again by add
  EXPECT_NE(a.buffer, c.buffer);
  EXPECT_TRUE(d.inplace);       // %c dies at add
  EXPECT_EQ(d.buffer, c.buffer);
  expect_valid_placement(plan.buffers, plan.offsets, plan.arena_bytes);
}

TEST(PlanMemory, NoInPlaceOverAViewOfTheSameBuffer) {
  // add(%a, %t) with %t a transpose of %a: writing %a in place would clobber %t's unread elements.
  ir::Graph g = parse_graph(R"(graph f(%x: f32[8, 8]) {
  %a: f32[8, 8] = exp(%x)
  %t: f32[8, 8] = permute(%a) {dims=[1, 0]}
  %d: f32[8, 8] = add(%a, %t)
  return %d
})");
  auto plan = plan_memory(g, {});
  EXPECT_FALSE(plan.values.at(g.find("d")).inplace);
  EXPECT_EQ(plan.values.at(g.find("t")).kind, ValuePlacement::Kind::view);
  EXPECT_EQ(plan.values.at(g.find("t")).buffer, plan.values.at(g.find("a")).buffer);
}

// The blocked convolution writes over a residual it adds before its activation (Note [Residual in
// place] in conv_nchwc.cc); never over one still read later, one added after the activation, or a
// depthwise layer's.
TEST(PlanMemory, BlockedConvolutionWritesOverItsResidual) {
  ir::Graph g = parse_graph(R"(graph f(%x: f32[2, 4, 8, 8, 16], %w: f32[64, 64, 1, 1], %dw: f32[64, 1, 3, 3], %b: f32[64]) {
  %r: f32[2, 4, 8, 8, 16] = relu(%x)
  %s: f32[2, 4, 8, 8, 16] = exp(%x)
  %a: f32[2, 4, 8, 8, 16] = fused_conv2d_nchwc(%x, %w, %b, %r) {activation="relu", residual_before_activation=true}
  %c: f32[2, 4, 8, 8, 16] = fused_conv2d_nchwc(%a, %w, _, %s) {activation="relu", residual_before_activation=false}
  %d: f32[2, 4, 8, 8, 16] = fused_conv2d_nchwc(%c, %dw, %b, %a) {groups=64, padding=[1, 1, 1, 1]}
  %e: f32[2, 4, 8, 8, 16] = fused_conv2d_nchwc(%d, %w, _, %d)
  %f: f32[2, 4, 8, 8, 16] = fused_conv2d_nchwc(%x, %w, _, %e)
  %h: f32[2, 4, 8, 8, 16] = add(%f, %e)
  return %h
})");
  auto plan = plan_memory(g, {});
  const auto& at = [&](const char* name) { return plan.values.at(g.find(name)); };
  EXPECT_TRUE(at("a").inplace);  // %r dies at %a, added before the relu
  EXPECT_EQ(at("a").buffer, at("r").buffer);
  EXPECT_FALSE(at("c").inplace);  // %s is added after the relu
  EXPECT_FALSE(at("d").inplace);  // depthwise
  EXPECT_FALSE(at("e").inplace);  // %d is also the convolution's input
  EXPECT_FALSE(at("f").inplace);  // %e is read again by %h
  EXPECT_TRUE(at("h").inplace);
  EXPECT_EQ(plan.inplace_count, 2);
  expect_valid_placement(plan.buffers, plan.offsets, plan.arena_bytes);
}

TEST(PlanMemory, ViewsExtendTheirSourcesLifetime) {
  ir::Graph g = parse_graph(R"(graph f(%x: f32[4, 6]) {
  %a: f32[4, 6] = exp(%x)
  %v: f32[6, 4] = permute(%a) {dims=[1, 0]}
  %b: f32[4, 6] = sin(%x)
  %c: f32[4, 6] = cos(%b)
  %w: f32[24] = reshape(%v) {shape=[24]}
  %d: f32[24] = neg(%w)
  return %d, %c
})");
  auto plan = plan_memory(g, {});
  const auto& a = plan.values.at(g.find("a"));
  EXPECT_EQ(plan.values.at(g.find("v")).kind, ValuePlacement::Kind::view);
  EXPECT_EQ(plan.values.at(g.find("w")).buffer, a.buffer);
  // %a's bytes are read through %w at node 5 (neg).
  EXPECT_EQ(plan.buffers[static_cast<size_t>(a.buffer)].last, 5);
  // So %b and %c may not sit on %a.
  for (const char* n : {"b", "c"}) {
    const auto& p = plan.values.at(g.find(n));
    bool overlap = p.offset < a.offset + a.bytes && a.offset < p.offset + p.bytes;
    EXPECT_FALSE(overlap) << n;
  }
  // Graph outputs live to the end.
  EXPECT_EQ(plan.buffers[static_cast<size_t>(plan.values.at(g.find("c")).buffer)].last, 6);
  expect_valid_placement(plan.buffers, plan.offsets, plan.arena_bytes);
}

TEST(PlanMemory, UnboundSymbolIsAnError) {
  ir::Graph g = parse_graph(R"(graph f(%x: f32[n, 2]) {
  %a: f32[n, 2] = exp(%x)
  return %a
})");
  EXPECT_KILN_ERROR(plan_memory(g, {}), "dim 'n'", "--batch");
}

// ResNet-50 (BatchNorm folded into the convs, as the compiler leaves it): 3-4-6-3 bottlenecks.
ir::Graph resnet50(int64_t batch) {
  ir::Graph g;
  g.name = "resnet50";
  ir::Value* cur = g.add_input("image", ir::ValueType{DType::f32, {batch, 3, 224, 224}});
  int counter = 0;
  auto conv = [&](ir::Value* in, int64_t cout, int64_t k, int64_t stride, bool relu) {
    int64_t cin = in->type().shape[1].size;
    std::string id = std::to_string(counter++);
    ir::Value* w = g.add_constant("w" + id, zeros({cout, cin, k, k}));
    ir::Value* b = g.add_constant("b" + id, zeros({cout}));
    int64_t p = k / 2;
    ir::Value* y = g.add_node(op("conv2d"), {in, w, b}, {{"stride", std::vector<int64_t>{stride, stride}},
                                                        {"padding", std::vector<int64_t>{p, p, p, p}}})->output();
    return relu ? g.add_node(op("relu"), {y})->output() : y;
  };
  cur = conv(cur, 64, 7, 2, true);
  cur = g.add_node(op("max_pool2d"), {cur}, {{"kernel", std::vector<int64_t>{3, 3}}, {"stride", std::vector<int64_t>{2, 2}},
                                             {"padding", std::vector<int64_t>{1, 1, 1, 1}}})->output();
  const int64_t widths[] = {64, 128, 256, 512};
  const int blocks[] = {3, 4, 6, 3};
  for (int stage = 0; stage < 4; ++stage) {
    for (int blk = 0; blk < blocks[stage]; ++blk) {
      int64_t stride = (stage > 0 && blk == 0) ? 2 : 1;
      int64_t w = widths[stage];
      ir::Value* shortcut = cur;
      if (blk == 0) shortcut = conv(cur, 4 * w, 1, stride, false);
      ir::Value* y = conv(cur, w, 1, 1, true);
      y = conv(y, w, 3, stride, true);
      y = conv(y, 4 * w, 1, 1, false);
      y = g.add_node(op("add"), {y, shortcut})->output();
      cur = g.add_node(op("relu"), {y})->output();
    }
  }
  cur = g.add_node(op("global_avg_pool"), {cur})->output();
  cur = g.add_node(op("reshape"), {cur}, {{"shape", std::vector<int64_t>{batch, 2048}}})->output();
  ir::Value* fw = g.add_constant("fc_w", zeros({1000, 2048}));
  ir::Value* fb = g.add_constant("fc_b", zeros({1000}));
  cur = g.add_node(op("gemm"), {cur, fw, fb}, {{"trans_b", true}})->output();
  g.add_output(cur);
  ir::verify(g);
  return g;
}

TEST(PlanMemory, ResNet50ArenaIsAFractionOfTheIntermediates) {
  for (int64_t batch : {1, 8}) {
    ir::Graph g = resnet50(batch);
    auto plan = plan_memory(g, {});
    SCOPED_TRACE(plan.summary());
    std::cout << "resnet50 batch " << batch << ": " << plan.summary() << "\n";
    expect_valid_placement(plan.buffers, plan.offsets, plan.arena_bytes);
    EXPECT_LE(static_cast<double>(plan.arena_bytes), 0.6 * static_cast<double>(plan.sum_bytes));
    EXPECT_LE(static_cast<double>(plan.arena_bytes), 1.25 * static_cast<double>(plan.lower_bound));
    EXPECT_GT(plan.inplace_count, 0);
    EXPECT_EQ(plan.view_count, 1);
  }
}

}  // namespace
}  // namespace kiln::compiler
