// Engines: compile -> execute equals the reference executor (every -O level, every batch in the
// range, repeated runs on one arena), serialization round trips, and damaged files (every
// truncation, every single-bit flip, a version bump, another target) fail with a kiln::Error.
#include <algorithm>
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "kiln/ir.h"
#include "kiln/runtime.h"
#include "support/testing.h"

namespace kiln::runtime {
namespace {

using kiln::testing::random_tensor;

// A small residual CNN with a symbolic batch: conv-relu-conv + skip, pool, a transpose view, gemm, softmax.
ir::Graph small_cnn() {
  ir::Graph g;
  g.name = "small_cnn";
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 3, 9, 7}});
  uint64_t seed = 100;
  auto cst = [&](const std::string& n, const Shape& s) { return g.add_constant(n, random_tensor(s, DType::f32, seed++, -0.5, 0.5)); };
  auto conv = [&](ir::Value* in, int64_t cout, const std::string& n) {
    int64_t cin = in->type().shape[1].size;
    return g.add_node(op("conv2d"), {in, cst(n + "_w", {cout, cin, 3, 3}), cst(n + "_b", {cout})},
                      {{"padding", std::vector<int64_t>{1, 1, 1, 1}}})->output();
  };
  ir::Value* a = g.add_node(op("relu"), {conv(x, 8, "c1")})->output();
  ir::Value* b = g.add_node(op("relu"), {conv(a, 8, "c2")})->output();
  ir::Value* c = conv(b, 8, "c3");
  ir::Value* d = g.add_node(op("add"), {c, a})->output();
  ir::Value* e = g.add_node(op("relu"), {d})->output();
  ir::Value* p = g.add_node(op("max_pool2d"), {e}, {{"kernel", std::vector<int64_t>{2, 2}},
                                                   {"stride", std::vector<int64_t>{2, 2}}})->output();
  ir::Value* t = g.add_node(op("permute"), {p}, {{"dims", std::vector<int64_t>{0, 2, 3, 1}}})->output();
  ir::Value* m = g.add_node(op("mean"), {t}, {{"axes", std::vector<int64_t>{1, 2}}})->output();
  ir::Value* logits = g.add_node(op("gemm"), {m, cst("fc_w", {5, 8}), cst("fc_b", {5})}, {{"trans_b", true}})->output();
  ir::Value* prob = g.add_node(op("softmax"), {logits})->output();
  g.add_output(prob);
  g.add_output(e);
  ir::verify(g);
  return g;
}

CompileOptions opts(int level, int64_t bmin, int64_t bmax) {
  CompileOptions o;
  o.passes.opt_level = level;
  o.batch_min = bmin;
  o.batch_max = bmax;
  return o;
}

void expect_matches_reference(const ir::Graph& g, Executor& ex, int64_t batch, uint64_t seed) {
  Tensor x = random_tensor({batch, 3, 9, 7}, DType::f32, seed);
  auto want = ir::run(g, {x});
  auto got = ex.run({x});
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].shape(), want[i].shape()) << "output " << i;
    EXPECT_TRUE(kiln::testing::all_close(got[i], want[i], {1e-5, 1e-5})) << "output " << i << " batch " << batch;
  }
}

TEST(Engine, MatchesReferenceAtEveryLevelAndBatch) {
  ir::Graph g = small_cnn();
  for (int level = 0; level <= 3; ++level) {
    CompileResult r = compile(g, opts(level, 1, 6));
    SCOPED_TRACE("-O" + std::to_string(level) + ": " + r.memory_summary);
    EXPECT_EQ(r.engine.batch.symbol, "batch");
    EXPECT_LT(r.engine.memory.arena_bytes, r.engine.memory.sum_bytes);
    Executor ex(std::make_shared<Engine>(std::move(r.engine)));
    // Several batches through the one arena, largest first so stale bytes would show.
    for (int64_t batch : {6, 1, 3, 6}) expect_matches_reference(g, ex, batch, static_cast<uint64_t>(batch * 10 + level));
  }
}

// Note [Arena slots scale with the batch]: an engine for batches 1..8 has the batch-1 engine's
// slots per unit of batch (so batch 1 runs in the bottom eighth of its arena, not spread over all
// of it), a static-sized intermediate (unfolded at -O0) fits its scaled slot at every batch, and a
// slot that only fits at batch 1 is refused naming the largest batch.
TEST(Engine, SmallBatchesUseTheBottomOfTheArena) {
  ir::Graph g = small_cnn();
  for (int level : {0, 2}) {
    const Engine one = compile(g, opts(level, 1, 1)).engine, eight = compile(g, opts(level, 1, 8)).engine;
    EXPECT_EQ(eight.memory.arena_bytes, 8 * one.memory.arena_bytes) << "-O" << level;
    ASSERT_EQ(eight.values.size(), one.values.size());
    for (size_t i = 0; i < one.values.size(); ++i) {
      if (one.values[i].kind != EngineValue::Kind::arena) continue;
      EXPECT_EQ(eight.values[i].offset, one.values[i].offset) << one.values[i].name;
      EXPECT_EQ(eight.values[i].bytes, one.values[i].bytes) << one.values[i].name;
    }
    EXPECT_NE(eight.steps_str().find("/b"), std::string::npos) << eight.steps_str();
  }

  ir::Graph s;
  s.name = "static_intermediate";
  ir::Value* x = s.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 40}});
  ir::Value* c = s.add_constant("c", random_tensor({40}, DType::f32, 5, -1.0, 1.0));
  ir::Value* k = s.add_node(op("exp"), {s.add_node(op("relu"), {c})->output()})->output();  // [40], not folded at -O0
  ir::Value* y = s.add_node(op("mul"), {s.add_node(op("add"), {x, k})->output(), k})->output();
  s.add_output(s.add_node(op("tanh"), {y})->output());
  ir::verify(s);
  Engine e = compile(s, opts(0, 1, 4)).engine;
  bool static_slot = false;
  for (const EngineValue& v : e.values) static_slot = static_slot || (v.kind == EngineValue::Kind::arena &&
                                                                      ir::type_str(ir::ValueType{v.dtype, v.shape}) == "f32[40]");
  EXPECT_TRUE(static_slot) << e.steps_str();
  Executor ex(std::make_shared<Engine>(e));
  for (int64_t batch : {4, 1, 3, 2, 4}) {
    Tensor in = random_tensor({batch, 40}, DType::f32, 60 + static_cast<uint64_t>(batch));
    EXPECT_TRUE(kiln::testing::all_close(ex.run({in})[0], ir::run(s, {in})[0], {1e-5, 1e-6})) << "batch " << batch;
  }

  Engine bad = compile(g, opts(0, 1, 8)).engine;
  for (EngineValue& v : bad.values)
    if (v.kind == EngineValue::Kind::arena) {
      v.offset = (bad.memory.arena_bytes / 8 - v.bytes) / 64 * 64 + 64;  // just past the end at batch 8
      break;
    }
  EXPECT_KILN_ERROR(bad.validate(), "per unit of batch", "at batch 8");
}

TEST(Engine, OutputsOutliveTheNextRun) {
  ir::Graph g = small_cnn();
  Executor ex(std::make_shared<Engine>(compile(g, opts(2, 1, 2)).engine));
  Tensor x1 = random_tensor({2, 3, 9, 7}, DType::f32, 1), x2 = random_tensor({2, 3, 9, 7}, DType::f32, 2);
  auto first = ex.run({x1});
  auto second = ex.run({x2});
  EXPECT_TRUE(kiln::testing::all_close(first[0], ir::run(g, {x1})[0], {1e-5, 1e-5}));
  EXPECT_TRUE(kiln::testing::all_close(second[0], ir::run(g, {x2})[0], {1e-5, 1e-5}));
}

TEST(Engine, RoundTripsThroughItsFile) {
  ir::Graph g = small_cnn();
  CompileResult r = compile(g, opts(2, 2, 4));
  std::string bytes = r.engine.serialize();
  Engine back = Engine::deserialize(bytes, "small.kiln");
  EXPECT_EQ(back.target.name(), host_target());
  EXPECT_EQ(back.steps.size(), r.engine.steps.size());
  EXPECT_EQ(back.signature_str(), r.engine.signature_str());
  EXPECT_EQ(back.steps_str(), r.engine.steps_str());
  EXPECT_EQ(back.serialize(), bytes);  // deterministic
  // Constants are 64-byte aligned in memory.
  for (const Tensor& c : back.constants) EXPECT_EQ(reinterpret_cast<uintptr_t>(c.data_ptr()) % 64, 0u);
  std::string path = ::testing::TempDir() + "/small.kiln";
  r.engine.save(path);
  Executor ex(std::make_shared<Engine>(Engine::load(path)));
  expect_matches_reference(g, ex, 3, 7);
  EXPECT_NE(back.signature_str().find("batch in [2, 4]"), std::string::npos) << back.signature_str();
}

// Attention as PyTorch exports it with a dynamic batch: heads folded into the batch ([4*batch, L, d],
// Note [Symbolic dims]); the scaled dims survive the file and every batch in the range runs.
TEST(Engine, ScaledBatchDimsRoundTrip) {
  ir::Graph g = ir::parse(R"(graph attn(%x: f32[batch, 5, 8]) {
  %q: f32[4*batch, 5, 2] = reshape(%x) {shape=[-1, 5, 2]}
  %k: f32[4*batch, 2, 5] = permute(%q) {dims=[0, 2, 1]}
  %s: f32[4*batch, 5, 5] = matmul(%q, %k)
  %p: f32[4*batch, 5, 5] = softmax(%s) {axis=-1}
  %o: f32[4*batch, 5, 2] = matmul(%p, %q)
  %y: f32[batch, 5, 8] = reshape(%o) {shape=[-1, 5, 8]}
  return %y, %p
})");
  for (int level : {0, 3}) {
    CompileResult r = compile(g, opts(level, 1, 5));
    std::string bytes = r.engine.serialize();
    Engine back = Engine::deserialize(bytes, "attn.kiln");
    EXPECT_EQ(back.serialize(), bytes);
    EXPECT_NE(back.signature_str().find("f32[4*batch, 5, 5]"), std::string::npos) << back.signature_str();
    Executor ex(std::make_shared<Engine>(std::move(back)));
    for (int64_t batch : {5, 1, 3}) {
      Tensor x = random_tensor({batch, 5, 8}, DType::f32, static_cast<uint64_t>(batch));
      auto want = ir::run(g, {x});
      auto got = ex.run({x});
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_EQ(got[i].shape(), want[i].shape());
        EXPECT_TRUE(kiln::testing::all_close(got[i], want[i], {1e-5, 1e-5})) << "-O" << level << " batch " << batch;
      }
    }
  }
}

TEST(Engine, RejectsBadInputs) {
  ir::Graph g = small_cnn();
  Executor ex(std::make_shared<Engine>(compile(g, opts(2, 2, 4)).engine));
  EXPECT_KILN_ERROR(ex.run({random_tensor({5, 3, 9, 7}, DType::f32, 1)}), "batch 5", "[2, 4]");
  EXPECT_KILN_ERROR(ex.run({random_tensor({1, 3, 9, 7}, DType::f32, 1)}), "batch 1", "[2, 4]");
  EXPECT_KILN_ERROR(ex.run({random_tensor({2, 3, 9, 8}, DType::f32, 1)}), "dim 3 must be 7");
  EXPECT_KILN_ERROR(ex.run({random_tensor({2, 3, 9, 7}, DType::f64, 1)}), "dtype f64");
  EXPECT_KILN_ERROR(ex.run(std::vector<Tensor>{}), "expected 1 inputs");
  EXPECT_KILN_ERROR(ex.run(std::map<std::string, Tensor>{{"y", random_tensor({2, 3, 9, 7}, DType::f32, 1)}}),
                    "no input named 'y'");
  // By name works too.
  Tensor x = random_tensor({2, 3, 9, 7}, DType::f32, 9);
  EXPECT_TRUE(kiln::testing::all_close(ex.run(std::map<std::string, Tensor>{{"x", x}})[0], ir::run(g, {x})[0],
                                       {1e-5, 1e-5}));
}

TEST(Engine, CompileRejectsBadBatchRanges) {
  ir::Graph g = small_cnn();
  EXPECT_KILN_ERROR(compile(g, opts(2, 4, 2)), "batch range 4:2");
  ir::Graph s = ir::parse("graph f(%x: f32[2, 3]) {\n  %y: f32[2, 3] = relu(%x)\n  return %y\n}");
  EXPECT_KILN_ERROR(compile(s, opts(2, 1, 8)), "only static shapes");
  ir::Graph two = ir::parse("graph f(%x: f32[n, m]) {\n  %y: f32[n, m] = relu(%x)\n  return %y\n}");
  EXPECT_KILN_ERROR(compile(two, opts(2, 1, 8)), "dim 'm' is symbolic", "--dim m=N");
  EXPECT_KILN_ERROR(compile(g, opts(2, 1, int64_t{1} << 61)), "overflows 64-bit sizes");
}

TEST(Engine, ProfilerTimesEveryStep) {
  ir::Graph g = small_cnn();
  Executor ex(std::make_shared<Engine>(compile(g, opts(0, 1, 2)).engine));
  ex.set_profiling(true);
  for (int i = 0; i < 3; ++i) ex.run({random_tensor({2, 3, 9, 7}, DType::f32, 4)});
  ASSERT_EQ(ex.profile().size(), ex.engine().steps.size());
  double total = 0;
  for (const LayerTime& l : ex.profile()) {
    EXPECT_EQ(l.runs, 3) << l.name;
    EXPECT_GE(l.ms, 0) << l.name;
    EXPECT_FALSE(l.op.empty());
    ASSERT_EQ(l.run_ms.size(), 3u) << l.name;
    std::vector<double> sorted = l.run_ms;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(l.median_ms(), sorted[1]) << l.name;
    EXPECT_NEAR(sorted[0] + sorted[1] + sorted[2], l.ms, 1e-9 * (1 + l.ms)) << l.name;
    total += l.ms;
  }
  EXPECT_GT(total, 0);
  EXPECT_EQ(ex.profile()[0].op, "conv2d");
  ex.reset_profile();
  EXPECT_EQ(ex.profile()[0].runs, 0);
  EXPECT_TRUE(ex.profile()[0].run_ms.empty());
  EXPECT_EQ(ex.profile()[0].median_ms(), 0);
}

// A small engine (one constant) so every truncation and every bit flip is cheap to try.
std::string tiny_engine_bytes() {
  ir::Graph g;
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 4}});
  ir::Value* w = g.add_constant("w", random_tensor({4, 3}, DType::f32, 3));
  ir::Value* y = g.add_node(op("matmul"), {x, w})->output();
  ir::Value* z = g.add_node(op("relu"), {y})->output();
  g.add_output(z);
  return compile(g, opts(0, 1, 4)).engine.serialize();
}

TEST(EngineFile, EveryTruncationIsAnError) {
  std::string bytes = tiny_engine_bytes();
  for (size_t n = 0; n < bytes.size(); ++n) {
    try {
      Engine::deserialize(bytes.substr(0, n), "tiny.kiln");
      ADD_FAILURE() << "truncated to " << n << " of " << bytes.size() << " bytes loaded";
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("not a kiln engine") != std::string::npos)
          << n << ": " << msg;
    }
  }
  EXPECT_KILN_ERROR(Engine::deserialize(bytes + "x", "tiny.kiln"), "trailing data");
}

TEST(EngineFile, EveryBitFlipIsAnError) {
  std::string bytes = tiny_engine_bytes();
  for (size_t i = 0; i < bytes.size(); ++i)
    for (int bit = 0; bit < 8; ++bit) {
      std::string bad = bytes;
      bad[i] = static_cast<char>(bad[i] ^ (1 << bit));
      try {
        Engine::deserialize(bad, "tiny.kiln");
        ADD_FAILURE() << "flipping bit " << bit << " of byte " << i << " loaded";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("tiny.kiln"), std::string::npos) << e.what();
      }
    }
}

// Rewrites a field and refreshes the checksum, as a newer writer would.
std::string with_checksum(std::string bytes) {
  uint64_t zero = 0;
  std::memcpy(bytes.data() + 24, &zero, 8);
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : bytes) h = (h ^ c) * 1099511628211ull;
  std::memcpy(bytes.data() + 24, &h, 8);
  return bytes;
}

TEST(EngineFile, WrongVersionIsNamed) {
  std::string bytes = tiny_engine_bytes();
  uint32_t v = kEngineFormatVersion + 1;
  std::memcpy(bytes.data() + 8, &v, 4);
  EXPECT_KILN_ERROR(Engine::deserialize(with_checksum(bytes), "new.kiln"), "new.kiln",
                    "format version " + std::to_string(kEngineFormatVersion + 1),
                    "reads version " + std::to_string(kEngineFormatVersion), "recompile");
}

TEST(EngineFile, WrongTargetIsNamed) {
  ir::Graph g = small_cnn();
  Engine e = compile(g, opts(0, 1, 1)).engine;
  const Target host = e.target;
  e.target.arch = "aarch64";
  e.target.isa = "neon";
  EXPECT_KILN_ERROR(Engine::deserialize(e.serialize(), "arm.kiln"), "arm.kiln", "built for aarch64-neon");
  e.target = host;
  e.target.isa = "avx4096";
  EXPECT_KILN_ERROR(Engine::deserialize(e.serialize(), "future.kiln"), "avx4096", "this CPU supports only");
  EXPECT_KILN_ERROR(target_runs_here("nonsense"), "<arch>-<isa>");
}

TEST(EngineFile, NotAnEngine) {
  EXPECT_KILN_ERROR(Engine::deserialize("", "empty.kiln"), "not a kiln engine");
  EXPECT_KILN_ERROR(Engine::deserialize(std::string(200, 'a'), "a.kiln"), "not a kiln engine");
  EXPECT_KILN_ERROR(Engine::load(::testing::TempDir() + "/does_not_exist.kiln"), "cannot open");
}

TEST(EngineValidate, CatchesInconsistentEngines) {
  ir::Graph g = small_cnn();
  const Engine good = compile(g, opts(0, 1, 2)).engine;
  {
    Engine e = good;
    for (auto& v : e.values)
      if (v.kind == EngineValue::Kind::arena) {
        v.offset = e.memory.arena_bytes;
        break;
      }
    EXPECT_KILN_ERROR(e.validate(), "arena slot");
  }
  {
    Engine e = good;
    e.steps[1].inputs[0] = 9999;
    EXPECT_KILN_ERROR(e.validate(), "step #1", "value 9999");
  }
  {
    Engine e = good;
    std::swap(e.steps[0], e.steps[1]);
    EXPECT_KILN_ERROR(e.validate(), "before any step writes it");
  }
  {
    Engine e = good;
    e.batch.min = 3;
    EXPECT_KILN_ERROR(e.validate(), "batch range");
  }
  {
    Engine e = good;
    e.batch.max = int64_t{1} << 62;  // every batch-sized slot now overflows
    EXPECT_KILN_ERROR(e.validate(), "overflows 64-bit sizes");
  }
}

TEST(Engine, InspectStrings) {
  ir::Graph g = small_cnn();
  Engine e = compile(g, opts(0, 1, 8)).engine;
  std::string sig = e.signature_str();
  EXPECT_NE(sig.find("x: f32[batch, 3, 9, 7]"), std::string::npos) << sig;
  EXPECT_NE(sig.find("batch in [1, 8]"), std::string::npos) << sig;
  std::string steps = e.steps_str();
  EXPECT_NE(steps.find("conv2d(%x@input0"), std::string::npos) << steps;
  EXPECT_NE(steps.find("@const"), std::string::npos) << steps;
  EXPECT_NE(steps.find("@view"), std::string::npos) << steps;
  EXPECT_EQ(host_target().rfind("x86_64-", 0) == 0 || host_target().rfind("aarch64-", 0) == 0, true) << host_target();
}

}  // namespace
}  // namespace kiln::runtime
