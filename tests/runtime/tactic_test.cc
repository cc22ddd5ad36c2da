// Tactic selection and targets: autotuning picks and records a tactic per step, the timing cache
// is written, reused (hits, no timing) and survives corruption; --no-autotune uses the default
// kernels; every tactic computes what the default kernel does (kernel by kernel over transposes,
// alpha/beta, broadcast C, epilogues and fallback shapes, and through whole engines); the target
// and the tactics survive the engine file; budgets, bad targets and old files fail with clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include "kernels/cpu/gemm_ukernel.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ir.h"
#include "kiln/ops/dispatch.h"
#include "kiln/runtime.h"
#include "ops/tactics.h"
#include "runtime/tactics.h"
#include "support/testing.h"

namespace kiln::runtime {
namespace {

using kiln::testing::random_tensor;

// Seeded random constants for a test graph: each call adds one in [-range, range) from the next seed.
struct SeededConstants {
  ir::Graph& g;
  uint64_t seed;
  double range = 0.5;
  ir::Value* operator()(const std::string& name, const Shape& shape) {
    return g.add_constant(name, random_tensor(shape, DType::f32, seed++, -range, range));
  }
};

// x[batch, 13] -> gemm(w1^T) + b1 -> relu -> matmul(w2) + b2 -> gelu -> gemm(w3^T, c = b3)
ir::Graph mlp() {
  ir::Graph g;
  g.name = "mlp";
  SeededConstants cst{g, 7};
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 13}});
  ir::Value* h = g.add_node(op("gemm"), {x, cst("w1", {24, 13}), cst("b1", {24})}, {{"trans_b", true}})->output();
  h = g.add_node(op("relu"), {h})->output();
  h = g.add_node(op("matmul"), {h, cst("w2", {24, 17})})->output();
  h = g.add_node(op("add"), {h, cst("b2", {17})})->output();
  h = g.add_node(op("gelu"), {h})->output();
  h = g.add_node(op("gemm"), {h, cst("w3", {5, 17}), cst("b3", {5})},
                 {{"trans_b", true}, {"alpha", 0.75}, {"beta", 1.5}})->output();
  g.add_output(h);
  ir::verify(g);
  return g;
}

// conv -> relu -> conv -> relu -> mean -> gemm: the CNN head every image model has (the second
// conv and the gemm read their input from the engine's arena).
ir::Graph small_cnn() {
  ir::Graph g;
  g.name = "small_cnn";
  SeededConstants cst{g, 100};
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 3, 9, 7}});
  ir::Value* c = g.add_node(op("conv2d"), {x, cst("c1_w", {8, 3, 3, 3}), cst("c1_b", {8})},
                            {{"padding", std::vector<int64_t>{1, 1, 1, 1}}})->output();
  c = g.add_node(op("relu"), {c})->output();
  c = g.add_node(op("conv2d"), {c, cst("c2_w", {8, 8, 3, 3}), cst("c2_b", {8})},
                 {{"padding", std::vector<int64_t>{1, 1, 1, 1}}})->output();
  c = g.add_node(op("relu"), {c})->output();
  ir::Value* m = g.add_node(op("mean"), {c}, {{"axes", std::vector<int64_t>{2, 3}}})->output();
  ir::Value* logits = g.add_node(op("gemm"), {m, cst("fc_w", {6, 8}), cst("fc_b", {6})}, {{"trans_b", true}})->output();
  g.add_output(g.add_node(op("softmax"), {logits})->output());
  ir::verify(g);
  return g;
}

std::string temp_path(const std::string& name) {
  std::string p = ::testing::TempDir() + "/kiln_tactic_" + name;
  std::filesystem::remove(p);
  return p;
}

CompileOptions tuned(const std::string& cache, int level = 2) {
  CompileOptions o;
  o.passes.opt_level = level;
  o.batch_min = 1;
  o.batch_max = 4;
  o.autotune = true;
  o.timing_cache = cache;
  o.tune_runs = 2;
  o.tune_ms = 5;
  return o;
}

std::set<std::string> cpu_tactics(const OpDef& d) {
  std::set<std::string> s;
  for (const KernelEntry& k : d.kernels())
    if (k.device == DeviceType::cpu && k.dtypes.contains(DType::f32)) s.insert(k.tactic);
  return s;
}

TEST(Tactics, OpsOfferSeveralTactics) {
  for (const char* name : {"gemm", "matmul", "fused_gemm", "conv2d", "fused_conv2d"}) {
    std::set<std::string> t = cpu_tactics(op(name));
    EXPECT_GE(t.size(), 2u) << name;
    EXPECT_TRUE(t.count("prepacked")) << name;
  }
}

TEST(Tactics, AutotunePicksAndRecordsThenTheCacheIsReused) {
  std::string cache = temp_path("cache_reuse");
  for (int level : {0, 2}) {
    std::filesystem::remove(cache);
    CompileResult first = compile(mlp(), tuned(cache, level));
    const TuneReport& r = first.tuning;
    EXPECT_TRUE(r.autotune);
    EXPECT_EQ(r.cache_path, cache);
    EXPECT_EQ(r.tuned_steps, 3) << "gemm/fused_gemm, matmul, gemm";
    EXPECT_EQ(r.misses, 3);
    EXPECT_EQ(r.hits, 0);
    EXPECT_GT(r.ms, 0.0);
    EXPECT_TRUE(r.warnings.empty()) << r.warnings[0];
    EXPECT_EQ(r.choices.size(), 3u);
    int chosen = 0;
    for (const EngineStep& st : first.engine.steps) {
      if (cpu_tactics(*st.op).size() < 2) {
        EXPECT_EQ(st.tactic, "") << st.name;
        continue;
      }
      EXPECT_TRUE(cpu_tactics(*st.op).count(st.tactic)) << st.name << " got '" << st.tactic << "'";
      ++chosen;
    }
    EXPECT_EQ(chosen, 3);
    ASSERT_TRUE(std::filesystem::exists(cache));
    std::ifstream f(cache);
    std::string header;
    std::getline(f, header);
    EXPECT_EQ(header, "kiln-timing-cache 2");

    CompileResult second = compile(mlp(), tuned(cache, level));
    EXPECT_EQ(second.tuning.hits, 3);
    EXPECT_EQ(second.tuning.misses, 0);
    EXPECT_EQ(second.tuning.ms, 0.0);
    ASSERT_EQ(second.engine.steps.size(), first.engine.steps.size());
    for (size_t i = 0; i < first.engine.steps.size(); ++i)
      EXPECT_EQ(second.engine.steps[i].tactic, first.engine.steps[i].tactic) << i;
    EXPECT_NE(second.tuning.summary().find("3 hits / 0 misses"), std::string::npos) << second.tuning.summary();
  }
  // Another batch range is another shape: misses again.
  CompileOptions o = tuned(cache);
  o.batch_max = 3;
  EXPECT_EQ(compile(mlp(), o).tuning.misses, 3);
  std::filesystem::remove(cache);
}

// Note [Timing cache]: entries carry the build ID of the kernels that were timed; another build's
// are dropped on reading, with a warning saying why, timed again and the file rewritten.
TEST(Tactics, CacheEntriesOfAnotherBuildAreTimedAgain) {
  std::string cache = temp_path("other_build");
  CompileResult first = compile(mlp(), tuned(cache));
  EXPECT_EQ(first.tuning.misses, 3);
  std::stringstream text;
  text << std::ifstream(cache).rdbuf();
  std::string s = text.str();
  size_t marks = 0;
  for (size_t at = s.find("|build="); at != std::string::npos; at = s.find("|build=", at + 1)) {
    const size_t end = s.find('\t', at);
    ASSERT_NE(end, std::string::npos);
    EXPECT_GT(end - at, std::string("|build=").size()) << "an empty build id";
    s.replace(at, end - at, "|build=0123abcd");
    ++marks;
  }
  EXPECT_EQ(marks, 3u);
  std::ofstream(cache, std::ios::trunc) << s;
  CompileResult second = compile(mlp(), tuned(cache));
  EXPECT_EQ(second.tuning.hits, 0);
  EXPECT_EQ(second.tuning.misses, 3);
  ASSERT_EQ(second.tuning.warnings.size(), 1u);
  EXPECT_NE(second.tuning.warnings[0].find("3 entries from another kiln build"), std::string::npos)
      << second.tuning.warnings[0];
  CompileResult third = compile(mlp(), tuned(cache));  // rewritten with this build's
  EXPECT_EQ(third.tuning.hits, 3);
  EXPECT_TRUE(third.tuning.warnings.empty());
  std::filesystem::remove(cache);
}

// Note [Heuristic tactics]: every step of mlp() multiplies by a constant weight, which is packed
// once ("prepacked") instead of on every call.
TEST(Tactics, NoAutotunePacksConstantWeightsAndWritesNoCache) {
  std::string cache = temp_path("no_autotune");
  CompileOptions o = tuned(cache);
  o.autotune = false;
  CompileResult r = compile(mlp(), o);
  EXPECT_FALSE(r.tuning.autotune);
  EXPECT_EQ(r.tuning.tuned_steps, 3);
  EXPECT_EQ(r.tuning.hits + r.tuning.misses, 0);
  for (const EngineStep& st : r.engine.steps) {
    if (!st.op->is_view()) {
      EXPECT_EQ(st.tactic, "prepacked") << st.name;
    }
  }
  EXPECT_FALSE(std::filesystem::exists(cache));
  EXPECT_NE(r.tuning.summary().find("heuristic"), std::string::npos);
  // "none": timed, but no file.
  o.autotune = true;
  o.timing_cache = "none";
  CompileResult n = compile(mlp(), o);
  EXPECT_EQ(n.tuning.misses, 3);
  EXPECT_EQ(n.tuning.cache_path, "");
}

// A tactic left out (`kiln compile --no-tactic`) is neither timed nor taken by the heuristics; a
// name no op has is an error naming it, as is the default kernel's empty name.
TEST(Tactics, ExcludedTacticsAreNeverTakenAndMustExist) {
  for (bool autotune : {false, true}) {
    CompileOptions o = tuned("none");
    o.autotune = autotune;
    o.excluded_tactics = {"prepacked"};
    CompileResult r = compile(mlp(), o);
    for (const EngineStep& st : r.engine.steps) {
      EXPECT_NE(st.tactic, "prepacked") << st.name << (autotune ? " timed" : " heuristic");
      EXPECT_NE(st.small_tactic, "prepacked") << st.name;
    }
    Tensor x = random_tensor({2, 13}, DType::f32, 61);
    EXPECT_TRUE(testing::all_close(Executor(std::make_shared<Engine>(r.engine)).run({x})[0], ir::run(mlp(), {x})[0],
                                   {1e-5, 1e-5}));
  }
  CompileOptions o = tuned("none");
  o.excluded_tactics = {"winograd", "no_such_tactic"};
  EXPECT_KILN_ERROR(compile(mlp(), o), "no op has a CPU tactic named 'no_such_tactic'");
  o.excluded_tactics = {""};
  EXPECT_KILN_ERROR(compile(mlp(), o), "no op has a CPU tactic named ''");
}

// The latency objective times a batch range at both ends ("tactic=max/min ms" in the report), the
// throughput objective at the largest batch alone; the two never share a timing cache entry.
TEST(Tactics, TheObjectiveDecidesWhichBatchesAreTimed) {
  std::string cache = temp_path("objective");
  auto timed_at = [](const CompileResult& r) {
    std::set<size_t> ends;
    for (const std::string& c : r.tuning.choices) {
      const std::string timings = c.substr(c.find('(', c.find("): ")));
      const size_t eq = std::count(timings.begin(), timings.end(), '=');
      const size_t slash = std::count(timings.begin(), timings.end(), '/');
      ends.insert(slash == 0 ? 1 : (slash == eq ? 2 : 0));
    }
    return ends;
  };
  CompileOptions o = tuned(cache);
  Target t = Target::host();
  t.objective = Target::Objective::latency;
  o.target = t;
  CompileResult lat = compile(mlp(), o);
  EXPECT_EQ(lat.tuning.misses, 3);
  EXPECT_EQ(timed_at(lat), std::set<size_t>{2}) << lat.tuning.choices[0];

  t.objective = Target::Objective::throughput;
  o.target = t;
  CompileResult thr = compile(mlp(), o);
  EXPECT_EQ(thr.tuning.misses, 3) << "the latency entries are not reused";
  EXPECT_EQ(timed_at(thr), std::set<size_t>{1}) << thr.tuning.choices[0];
  EXPECT_EQ(thr.engine.target.objective, Target::Objective::throughput);
  EXPECT_EQ(compile(mlp(), o).tuning.hits, 3);

  // A fixed batch has one end: both objectives time it once.
  o.batch_max = 1;
  EXPECT_EQ(timed_at(compile(mlp(), o)), std::set<size_t>{1});
  std::filesystem::remove(cache);
}

// Note [Tactics timed as the step runs]: small_cnn's convolutions, which a depth-first group runs
// image by image at batch 4 on two threads, are timed so (their cache entries say it); its GEMM,
// which no group takes, is timed on the batch; at a fixed batch nothing is. The steps the tuner
// times image by image are the ones the executor's groups hold.
TEST(Tactics, StepsInDepthFirstGroupsAreTimedImageByImage) {
  const int before = get_num_threads();
  set_num_threads(2);
  std::string cache = temp_path("image_by_image");
  auto image_keys = [&] {
    std::ifstream f(cache);
    std::map<std::string, int> n;  // op -> entries timed image by image
    for (std::string line; std::getline(f, line);)
      if (line.find("|image by image") != std::string::npos) ++n[line.substr(0, line.find('['))];
    return n;
  };
  CompileOptions o = tuned(cache, 0);
  o.layout = CompileOptions::Layout::nchw;
  CompileResult r = compile(small_cnn(), o);
  EXPECT_EQ(r.tuning.misses, 3) << "two convolutions and the gemm";
  EXPECT_EQ(image_keys(), (std::map<std::string, int>{{"conv2d", 2}}));
  auto shared = std::make_shared<const Engine>(r.engine);
  Executor ex(shared);
  std::set<size_t> grouped, timed;
  for (const auto& [b, end] : ex.depth_first_groups())
    for (size_t s = b; s < end; ++s) grouped.insert(s);
  for (size_t s = 0; s < r.engine.steps.size(); ++s)
    if (image_by_image(r.engine, r.engine.steps[s])) timed.insert(s);
  EXPECT_FALSE(timed.empty());
  EXPECT_EQ(timed, grouped);
  std::filesystem::remove(cache);
  o.batch_max = 1;
  compile(small_cnn(), o);
  EXPECT_TRUE(image_keys().empty());
  std::filesystem::remove(cache);
  set_num_threads(before);
}

TEST(Tactics, ThreadsAndIsaAreRestoredAfterTuning) {
  const int before = get_num_threads();
  CompileOptions o = tuned("none");
  o.threads = 2;
  CompileResult r = compile(mlp(), o);
  EXPECT_EQ(r.engine.target.threads, 2);
  EXPECT_EQ(get_num_threads(), before);
  Target scalar = Target::host();
  scalar.isa = "scalar";
  o.target = scalar;
  CompileResult s = compile(mlp(), o);
  EXPECT_EQ(s.engine.target.name(), scalar.arch + "-scalar");
  EXPECT_EQ(host_target(), Target::host().name()) << "the active ISA came back";
}

// Rewrites every cached choice (the field between the two tabs) of `cache` with `choice`.
void rewrite_choices(const std::string& cache, const std::string& choice) {
  std::ifstream in(cache);
  std::string line, text;
  while (std::getline(in, line)) {
    const size_t t1 = line.find('\t'), t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    text += (t2 == std::string::npos ? line : line.substr(0, t1 + 1) + choice + line.substr(t2)) + "\n";
  }
  in.close();
  std::ofstream(cache, std::ios::trunc) << text;
}

TEST(Tactics, CorruptCacheIsIgnoredWithAWarningAndRewritten) {
  for (const std::string& junk : {std::string("garbage\x01\xff"), std::string("kiln-timing-cache 2\nno tabs here\n"),
                                  std::string("kiln-timing-cache 2\n\t\t\n"), std::string("")}) {
    std::string cache = temp_path("corrupt");
    {
      std::ofstream f(cache, std::ios::binary);
      f << junk;
    }
    CompileResult r = compile(mlp(), tuned(cache));
    ASSERT_EQ(r.tuning.warnings.size(), 1u) << junk;
    EXPECT_NE(r.tuning.warnings[0].find("unreadable"), std::string::npos) << r.tuning.warnings[0];
    EXPECT_NE(r.tuning.warnings[0].find(cache), std::string::npos);
    EXPECT_EQ(r.tuning.misses, 3);
    EXPECT_EQ(compile(mlp(), tuned(cache)).tuning.hits, 3) << "rewritten after the timing";
  }
  // A cached tactic this kiln does not have counts as a miss. (Every choice is replaced whole: a
  // timing can cache a pair, "prepacked;default<=2", which replacing tactic names between the
  // tabs missed, and the test failed when a loaded machine's timings split a step.)
  std::string cache = temp_path("stale");
  compile(mlp(), tuned(cache));
  rewrite_choices(cache, "warp");
  CompileResult r = compile(mlp(), tuned(cache));
  EXPECT_EQ(r.tuning.hits, 0);
  EXPECT_EQ(r.tuning.misses, 3);
}

// A cache written before tactics per batch bucket is set aside with a warning that says why; a
// cached pair of tactics comes back as the pair, and one whose small batches fall outside the
// engine's range, or that does not parse, is a miss.
TEST(Tactics, CachedBatchBucketsAreKeptAndCheckedAgainstTheRange) {
  std::string cache = temp_path("buckets");
  std::ofstream(cache) << "kiln-timing-cache 1\nkey\tprepacked\tprepacked=1\n";
  CompileResult old = compile(mlp(), tuned(cache, 0));
  ASSERT_EQ(old.tuning.warnings.size(), 1u);
  EXPECT_NE(old.tuning.warnings[0].find("older kiln"), std::string::npos) << old.tuning.warnings[0];
  EXPECT_EQ(old.tuning.misses, 3);

  rewrite_choices(cache, "prepacked;default<=2");  // every tuned step of the unfused mlp() has both
  CompileResult r = compile(mlp(), tuned(cache, 0));
  EXPECT_EQ(r.tuning.hits, 3);
  int split = 0;
  for (const EngineStep& st : r.engine.steps) {
    if (st.small_tactic.empty()) continue;
    ++split;
    EXPECT_EQ(st.tactic, "prepacked");
    EXPECT_EQ(st.small_tactic, "default");
    EXPECT_EQ(st.small_batch_max, 2);
    EXPECT_EQ(st.tactic_at(1), "default");
    EXPECT_EQ(st.tactic_at(2), "default");
    EXPECT_EQ(st.tactic_at(3), "prepacked");
  }
  EXPECT_EQ(split, 3);
  for (const std::string& c : r.tuning.choices) EXPECT_NE(c.find("default at batch <= 2"), std::string::npos) << c;

  // The range is 1..4: small batches up to 4 would leave nothing for the other tactic.
  for (const std::string bad : {"prepacked;default<=4", "prepacked;default<=0", "prepacked;default<=", "prepacked;",
                                "prepacked;default<=x", ";default<=1", "prepacked;warp<=2"}) {
    rewrite_choices(cache, bad);
    CompileResult m = compile(mlp(), tuned(cache, 0));
    EXPECT_EQ(m.tuning.hits, 0) << bad;
    EXPECT_EQ(m.tuning.misses, 3) << bad;
  }
  std::filesystem::remove(cache);
}

// Note [Tactics per batch bucket], on made-up timings (tactic i's time at the largest batch, then
// at the smallest).
TEST(Tactics, OneTacticUnlessNoneFitsBothEndsThenTwoSplitWhereTheyCross) {
  // One end timed (a fixed batch, or the throughput objective): its fastest.
  TacticChoice c = choose_tactics({3.0, 2.0, 4.0}, {}, 1, 8);
  EXPECT_EQ(c.tactic, 1u);
  EXPECT_FALSE(c.split);
  // The same tactic wins at both ends.
  c = choose_tactics({3.0, 2.0, 4.0}, {0.5, 0.3, 0.6}, 1, 8);
  EXPECT_EQ(c.tactic, 1u);
  EXPECT_FALSE(c.split);
  // Different winners, but tactic 0 is within 15% of each: one tactic, the best relative sum.
  c = choose_tactics({2.1, 2.0, 4.0}, {0.31, 0.5, 0.3}, 1, 8);
  EXPECT_EQ(c.tactic, 0u);
  EXPECT_FALSE(c.split);
  // ResNet-50's first projection on 2 threads (bench/RESULTS.md): the packed GEMM (0) is 25% faster
  // than the direct convolution (1) at batch 1 and 17% slower at 8; direct_columns (2) is within
  // 13% of the fastest at both ends: one tactic.
  c = choose_tactics({18.46, 15.75, 16.0}, {0.934, 1.168, 1.051}, 1, 8);
  EXPECT_FALSE(c.split);
  EXPECT_EQ(c.tactic, 2u);
  // The single tactic (1, sums 2.95 against 3 and 3) is within the margin at batch 8 only: it keeps
  // the large batches, the fastest at batch 1 (2) takes the small ones up to where they cross.
  c = choose_tactics({10.0, 10.5, 20.0}, {1.0, 0.95, 0.5}, 1, 8);
  EXPECT_TRUE(c.split);
  EXPECT_EQ(c.tactic, 1u);
  EXPECT_EQ(c.small_tactic, 2u);
  EXPECT_EQ(c.small_batch_max, 1) << "0.45 ms saved at batch 1, 9.5 ms lost at 8: they cross below 2";
  // Within the margin at batch 1 only: tactic 1 saves 0.8 ms at batch 1, tactic 0 saves 1.6 ms at
  // batch 8: they cross a third of the way, at 3.33.
  c = choose_tactics({8.0, 9.6}, {1.0, 0.2}, 1, 8);
  EXPECT_TRUE(c.split);
  EXPECT_EQ(c.tactic, 0u);
  EXPECT_EQ(c.small_tactic, 1u);
  EXPECT_EQ(c.small_batch_max, 3);
  // The single tactic (2) is far from both ends' fastest: each end its own, crossing at 1 + 63/11.
  c = choose_tactics({10.0, 20.0, 13.0}, {2.0, 1.0, 1.3}, 1, 64);
  EXPECT_TRUE(c.split);
  EXPECT_EQ(c.tactic, 0u);
  EXPECT_EQ(c.small_tactic, 1u);
  EXPECT_EQ(c.small_batch_max, 6);
  // The crossover is kept inside the range: at least the smallest batch, below the largest.
  c = choose_tactics({8.0, 100.0}, {1.0, 0.2}, 4, 16);
  EXPECT_TRUE(c.split);
  EXPECT_EQ(c.small_batch_max, 4);
  c = choose_tactics({8.0, 8.0 + 1e-6}, {1.0, 0.2}, 4, 16, 0.0);
  EXPECT_TRUE(c.split);
  EXPECT_EQ(c.small_batch_max, 15);
  // An infinite margin gives the single tactic (what a budget with room for one packed weight takes).
  c = choose_tactics({8.0, 9.6}, {1.0, 0.2}, 1, 8, std::numeric_limits<double>::infinity());
  EXPECT_FALSE(c.split);
  EXPECT_EQ(c.tactic, 1u) << "relative sums 2.2 against 6";
}

// An engine with a tactic per batch bucket: both packed at load, the small batches' tactic runs up
// to its limit and the other above (the profile names what ran), every batch gives the default
// kernels' results, the pair survives the file, and a limit outside the range is refused.
TEST(Tactics, BatchBucketsRunTheirOwnTacticThroughTheEngineFile) {
  const bool direct = kernels::cpu::gemm_kernel_f32(kernels::cpu::active_isa()).taps[0].ukernel != nullptr;
  const std::string large = direct ? "direct" : "default";
  CompileOptions o = tuned("none", 2);
  o.autotune = false;
  auto base = std::make_shared<Engine>(compile(small_cnn(), o).engine);
  Engine e = *base;
  int64_t split = 0;
  for (EngineStep& st : e.steps)
    if (st.op->name().find("conv2d") != std::string::npos) {
      st.tactic = large;
      st.small_tactic = "prepacked";
      st.small_batch_max = 2;
      ++split;
    }
  ASSERT_EQ(split, 2);
  e.validate();
  auto loaded = std::make_shared<Engine>(Engine::deserialize(e.serialize(), "buckets.kiln"));
  for (size_t i = 0; i < e.steps.size(); ++i) {
    EXPECT_EQ(loaded->steps[i].tactic, e.steps[i].tactic) << i;
    EXPECT_EQ(loaded->steps[i].small_tactic, e.steps[i].small_tactic) << i;
    EXPECT_EQ(loaded->steps[i].small_batch_max, e.steps[i].small_batch_max) << i;
  }
  EXPECT_NE(loaded->steps_str().find("[" + large + "; prepacked at batch <= 2]"), std::string::npos)
      << loaded->steps_str();
  Executor ref(base);
  const int64_t before = prepacked_weight_count();
  Executor ex(loaded);
  // The im2col GEMM's filters are packed at load; the direct ones on the first run of each image
  // size and register tile (Note [Prepacked tactics]). The classifier's weight too: without
  // autotuning it is prepacked (Note [Heuristic tactics]).
  int64_t gemms = 0;
  for (const EngineStep& st : loaded->steps) gemms += st.op->name().find("gemm") != std::string::npos &&
                                                      st.tactic == "prepacked";
  EXPECT_EQ(gemms, 1);
  EXPECT_EQ(prepacked_weight_count(), before + split + gemms) << "the small batches' packed filters, at load";
  // Image by image (Note [Depth-first groups]) every call is at batch 1 and runs the small batches'
  // tactic; here the batch is what picks it.
  ex.set_depth_first(false);
  ex.set_profiling(true);
  int64_t packs = 0;
  for (int64_t batch : {1, 2, 3, 4, 1, 2, 3, 4}) {
    if (batch == 1 && packs == 0 && ex.profile()[0].runs > 0) packs = prepacked_weight_count();
    Tensor x = random_tensor({batch, 3, 9, 7}, DType::f32, 70 + static_cast<uint64_t>(batch));
    const int64_t fallbacks = tactic_fallback_count();
    std::vector<Tensor> got = ex.run({x}), want = ref.run({x});
    EXPECT_EQ(tactic_fallback_count(), fallbacks) << "batch " << batch;
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(kiln::testing::all_close(got[i], want[i], {1e-4, 1e-5})) << "batch " << batch;
    for (size_t s = 0; s < loaded->steps.size(); ++s) {
      if (loaded->steps[s].small_tactic.empty()) continue;
      EXPECT_EQ(ex.profile()[s].tactic, batch <= 2 ? "prepacked" : large) << "batch " << batch << " step " << s;
    }
  }
  if (direct) {
    EXPECT_GT(packs, before + split) << "the large batches' direct filters, on their first runs";
  }
  EXPECT_EQ(prepacked_weight_count(), packs) << "no packing per run";

  for (int64_t bad : {0, 4, 9}) {
    Engine b = e;
    b.steps[0].small_batch_max = bad;
    EXPECT_KILN_ERROR(b.validate(), "up to batch " + std::to_string(bad), "batch range [1, 4)", "recompile");
    EXPECT_KILN_ERROR(Engine::deserialize(b.serialize(), "bad.kiln"), "up to batch " + std::to_string(bad));
  }
  Engine unknown = e;
  unknown.steps[0].small_tactic = "warp_drive";
  EXPECT_KILN_ERROR(unknown.validate(), "tactic 'warp_drive'", "recompile");
}

// ---- every tactic equals the default kernel -----------------------------------------------------------

// Winograd's F(4x4, 3x3) tiles round more than the direct sum (Note [Winograd tiles] in
// kernels/cpu/conv_nchwc.cc): ~3e-5 off it here, where the outputs reach ~10.
kiln::testing::Tol tactic_tol(const std::string& tactic, kiln::testing::Tol usual) {
  return tactic == "winograd4" ? kiln::testing::Tol{1e-4, 1e-4} : usual;
}

void expect_tactics_agree(const std::string& name, const std::vector<Tensor>& ins, const Attrs& given) {
  const OpDef& d = op(name);
  Attrs attrs = d.bind_attrs(given);
  OpCall call{d, ins, attrs, KILN_HERE, Tensor(), nullptr};
  Tensor want = run_kernel(call)[0];
  for (const std::string& t : cpu_tactics(d)) {
    Tensor got = run_kernel(call, {}, t)[0];
    EXPECT_TRUE(kiln::testing::all_close(got, want, tactic_tol(t, {2e-5, 2e-5}))) << name << " tactic " << t;
    Tensor again = run_kernel(call, {}, t)[0];  // a prepacked tactic's second call reuses the packing
    EXPECT_TRUE(kiln::testing::all_close(again, want, tactic_tol(t, {2e-5, 2e-5}))) << name << " tactic " << t
                                                                                      << " (2nd)";
  }
}

TEST(Tactics, GemmTacticsMatchTheDefault) {
  uint64_t seed = 1;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t m : {1, 7, 33})
        for (int64_t n : {1, 19}) {
          const int64_t k = 29;
          Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, DType::f32, seed++);
          Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::f32, seed++);
          Attrs at;
          at.set("trans_a", ta);
          at.set("trans_b", tb);
          at.set("alpha", 0.5);
          expect_tactics_agree("gemm", {a, b, Tensor()}, at);
          at.set("beta", -1.25);
          expect_tactics_agree("gemm", {a, b, random_tensor({n}, DType::f32, seed++)}, at);  // broadcast C
          expect_tactics_agree("gemm", {kiln::testing::noncontiguous(a), kiln::testing::noncontiguous(b),
                                        random_tensor({m, n}, DType::f32, seed++)}, at);
        }
}

TEST(Tactics, MatmulTacticsMatchTheDefault) {
  uint64_t seed = 50;
  for (const auto& [as, bs] : std::vector<std::pair<Shape, Shape>>{{{5, 11}, {11, 3}},
                                                                    {{2, 3, 11}, {11, 9}},    // folds to 6 x 11
                                                                    {{11}, {11, 4}},          // 1-D a: default
                                                                    {{2, 5, 11}, {2, 11, 4}}, // batched b: default
                                                                    {{40, 64}, {64, 70}}}) {
    Tensor a = random_tensor(as, DType::f32, seed++), b = random_tensor(bs, DType::f32, seed++);
    expect_tactics_agree("matmul", {a, b}, {});
    expect_tactics_agree("matmul", {kiln::testing::noncontiguous(a), kiln::testing::noncontiguous(b)}, {});
    if (as.size() == 3 && bs.size() == 2) expect_tactics_agree("matmul", {a.transpose(0, 1), b}, {});  // rows gathered
  }
  // Permuted rows over a wide weight, as PyTorch's attention feeds its input projection.
  Tensor x = random_tensor({3, 33, 24}, DType::f32, seed++), w = random_tensor({24, 70}, DType::f32, seed++);
  expect_tactics_agree("matmul", {x.transpose(0, 1), w}, {});
}

TEST(Tactics, FusedGemmTacticsMatchTheDefault) {
  uint64_t seed = 80;
  for (const char* act : {"none", "relu", "gelu", "sigmoid", "relu6"})
    for (bool before : {false, true})
      for (bool tb : {false, true}) {
        const int64_t m = 9, n = 21, k = 17;
        Tensor a = random_tensor({m, k}, DType::f32, seed++);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, DType::f32, seed++);
        Attrs at;
        at.set("trans_b", tb);
        at.set("activation", std::string(act));
        at.set("residual_before_activation", before);
        at.set("alpha", 1.5);
        expect_tactics_agree("fused_gemm", {a, b, random_tensor({n}, DType::f32, seed++),
                                            random_tensor({m, n}, DType::f32, seed++)}, at);
        expect_tactics_agree("fused_gemm", {a, b, Tensor(), Tensor()}, at);
        // A sequence input [B, T, K]: its leading dims are rows.
        Tensor seq = random_tensor({2, 3, k}, DType::f32, seed++);
        expect_tactics_agree("fused_gemm", {seq, b, random_tensor({n}, DType::f32, seed++),
                                            random_tensor({2, 3, n}, DType::f32, seed++)}, at);
      }
}

TEST(Tactics, ConvTacticsMatchTheDefault) {
  struct Case {
    Shape x, w;
    std::vector<int64_t> stride, padding, dilation;
    int64_t groups;
  };
  const std::vector<Case> cases = {
      {{1, 3, 9, 7}, {8, 3, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1},
      {{3, 6, 11, 10}, {4, 6, 1, 1}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1},   // 1x1: no im2col
      {{2, 6, 11, 10}, {10, 3, 3, 2}, {2, 1}, {1, 0, 2, 1}, {1, 2}, 2},  // groups, stride, dilation, odd pads
      {{2, 4, 8, 8}, {4, 1, 3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 4},     // depthwise: the default kernel
      {{1, 5, 13, 13}, {7, 5, 5, 5}, {3, 3}, {2, 2, 2, 2}, {1, 1}, 1}};
  uint64_t seed = 300;
  for (const Case& c : cases) {
    Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++);
    Tensor b = random_tensor({c.w[0]}, DType::f32, seed++);
    Attrs at;
    at.set("stride", c.stride);
    at.set("padding", c.padding);
    at.set("dilation", c.dilation);
    at.set("groups", c.groups);
    expect_tactics_agree("conv2d", {x, w, b}, at);
    expect_tactics_agree("conv2d", {kiln::testing::noncontiguous(x), w, Tensor()}, at);
    Tensor y = run_kernel(OpCall{op("conv2d"), {x, w, b}, op("conv2d").bind_attrs(at), KILN_HERE, Tensor(), nullptr})[0];
    Tensor res = random_tensor(y.shape(), DType::f32, seed++);
    for (const char* act : {"none", "relu", "silu"})
      for (bool before : {false, true}) {
        at.set("activation", std::string(act));
        at.set("residual_before_activation", before);
        expect_tactics_agree("fused_conv2d", {x, w, b, res}, at);
        expect_tactics_agree("fused_conv2d", {x, w, Tensor(), Tensor()}, at);
      }
  }
}

// The direct convolution's packed filters depend on the image size (its register tile): the same
// filters at a size that picks the other tile must be packed again, not reused (an engine packed
// them at load without the image size and ran every 8 x 48 layer with 12-row panels).
TEST(Tactics, DirectConvFiltersFollowTheImageSize) {
  Tensor w = random_tensor({64, 9, 3, 3}, DType::f32, 900), b = random_tensor({64}, DType::f32, 901);
  Attrs at;
  at.set("padding", std::vector<int64_t>{1, 1, 1, 1});
  uint64_t seed = 902;
  for (const Shape& xs : {Shape{1, 9, 6, 70}, Shape{1, 9, 7, 7}, Shape{2, 9, 6, 70}}) {
    Tensor x = random_tensor(xs, DType::f32, seed++);
    expect_tactics_agree("conv2d", {x, w, b}, at);
  }
}

// Forces every step that can take tactic `t` onto it and checks the engine's outputs.
void expect_engines_agree(const ir::Graph& g, const Shape& in_shape, int level,
                          CompileOptions::Layout layout = CompileOptions::Layout::automatic) {
  CompileOptions o = tuned("none", level);
  o.autotune = false;
  o.layout = layout;
  o.excluded_tactics = {"winograd4"};  // the reference: sums that round as the direct kernel's (tactic_tol)
  auto base = std::make_shared<Engine>(compile(g, o).engine);
  Executor ref(base);
  for (int64_t batch : {1, 4}) {
    Shape s = in_shape;
    s[0] = batch;
    Tensor x = random_tensor(s, DType::f32, 900 + static_cast<uint64_t>(batch));
    std::vector<Tensor> want = ref.run({x});
    std::set<std::string> all;
    for (const EngineStep& st : base->steps)
      for (const std::string& t : cpu_tactics(*st.op)) all.insert(t);
    for (const std::string& t : all) {
      auto e = std::make_shared<Engine>(*base);
      int forced = 0;
      for (EngineStep& st : e->steps)
        if (cpu_tactics(*st.op).count(t) && st.op->kernels().size() > 1) st.tactic = t, ++forced;
      if (forced == 0) continue;
      // Through the file, as a deployed engine would.
      auto loaded = std::make_shared<Engine>(Engine::deserialize(e->serialize(), "forced.kiln"));
      Executor ex(loaded);
      for (int rep = 0; rep < 2; ++rep) {
        std::vector<Tensor> got = ex.run({x});
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          EXPECT_TRUE(kiln::testing::all_close(got[i], want[i], tactic_tol(t, {1e-4, 1e-5})))
              << g.name << " -O" << level << " tactic " << t << " batch " << batch << " run " << rep;
      }
    }
  }
}

TEST(Tactics, PrepackedWeightsArePackedOnceWhenTheEngineLoads) {
  for (const ir::Graph& g : {mlp(), small_cnn()}) {
    CompileOptions o = tuned("none", 2);
    o.autotune = false;
    Engine e = compile(g, o).engine;
    int64_t forced = 0;
    for (EngineStep& st : e.steps)
      if (cpu_tactics(*st.op).count("prepacked")) st.tactic = "prepacked", ++forced;
    ASSERT_GT(forced, 0) << g.name;
    auto loaded = std::make_shared<Engine>(Engine::deserialize(e.serialize(), "packed.kiln"));
    const int64_t before = prepacked_weight_count();
    {
      Executor ex(loaded);
      EXPECT_EQ(prepacked_weight_count(), before + forced) << g.name << ": packed at load";
      Shape s = g.inputs()[0]->type().shape.size() == 2 ? Shape{3, 13} : Shape{3, 3, 9, 7};
      for (int rep = 0; rep < 3; ++rep) ex.run({random_tensor(s, DType::f32, 40 + static_cast<uint64_t>(rep))});
      EXPECT_EQ(prepacked_weight_count(), before + forced) << g.name << ": no packing per run";
      Executor second(loaded);  // another executor of the same loaded engine shares the packing
      EXPECT_EQ(prepacked_weight_count(), before + forced) << g.name;
    }
    loaded.reset();
    EXPECT_EQ(prepacked_weight_count(), before) << g.name << ": packed copies die with the engine";
  }
}

// Every value of an engine is a view of one arena: a tactic that took sharing the arena for
// aliasing its output fell back to the default kernel on every step whose input was not a graph
// input, silently (the tuner, timing on separate tensors, never saw it).
TEST(Tactics, ForcedTacticsRunInsideEnginesWithoutFallingBack) {
  const bool direct = kernels::cpu::gemm_kernel_f32(kernels::cpu::active_isa()).taps[0].ukernel != nullptr;
  for (const ir::Graph& g : {mlp(), small_cnn()}) {
    for (const std::string t : {"prepacked", "direct", "direct_columns", "direct_pixels"}) {
      if (t.starts_with("direct") && !direct) continue;
      CompileOptions o = tuned("none", 2);
      o.autotune = false;
      auto e = std::make_shared<Engine>(compile(g, o).engine);
      int64_t forced = 0;
      for (EngineStep& st : e->steps)
        if (cpu_tactics(*st.op).count(t)) st.tactic = t, ++forced;
      if (forced == 0) continue;
      Executor ex(e);
      Shape s = g.inputs()[0]->type().shape.size() == 2 ? Shape{3, 13} : Shape{3, 3, 9, 7};
      const int64_t before = tactic_fallback_count();
      ex.run({random_tensor(s, DType::f32, 50)});
      EXPECT_EQ(tactic_fallback_count(), before) << g.name << " forced onto " << t << " (" << forced << " steps)";
    }
  }
}

// A depthwise convolution has no packed fast path (the packed tactics are GEMM-shaped and would
// run the default kernel): the tuner neither offers nor times them, and a grouped convolution
// with several channels per group keeps them.
TEST(Tactics, DepthwiseConvolutionsAreNotTuned) {
  ir::Graph g;
  g.name = "depthwise";
  SeededConstants cst{g, 300};
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 9, 7}});
  const Attrs pad{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  Attrs depthwise = pad, grouped = pad;
  depthwise.set("groups", int64_t{8});
  grouped.set("groups", int64_t{2});
  ir::Value* c = g.add_node(op("conv2d"), {x, cst("dw_w", {8, 1, 3, 3}), cst("dw_b", {8})}, depthwise)->output();
  c = g.add_node(op("conv2d"), {c, cst("g_w", {8, 4, 3, 3}), cst("g_b", {8})}, grouped)->output();
  g.add_output(c);
  ir::verify(g);
  EXPECT_FALSE(tactic_fits(op("conv2d"), "direct", depthwise, {8, 1, 3, 3}, 4));
  EXPECT_TRUE(tactic_fits(op("conv2d"), "direct", grouped, {8, 4, 3, 3}, 4));
  EXPECT_TRUE(tactic_fits(op("conv2d"), "", depthwise, {8, 1, 3, 3}, 4));
  CompileResult r = compile(g, tuned("none", 0));
  EXPECT_EQ(r.tuning.tuned_steps, 1) << "only the grouped convolution";
  ASSERT_EQ(r.tuning.choices.size(), 1u);
  EXPECT_NE(r.tuning.choices[0].find("conv2d"), std::string::npos) << r.tuning.choices[0];
  for (const EngineStep& st : r.engine.steps)
    if (st.attrs.get_int("groups") == 8) {
      EXPECT_EQ(st.tactic, "") << st.name;
    }
}

TEST(Tactics, EveryTacticGivesTheDefaultsResultsThroughEngines) {
  for (int level : {0, 2}) {
    expect_engines_agree(mlp(), {1, 13}, level);
    expect_engines_agree(small_cnn(), {1, 3, 9, 7}, level);
  }
}

// ---- the blocked convolution's panel widths (Note [Panels as tactics] in conv_nchwc.cc) -------------

Tensor blocked(const Tensor& x) {
  return run_kernel(OpCall{op("to_nchwc"), {x}, Attrs{}, KILN_HERE, Tensor(), nullptr})[0];
}

TEST(Tactics, BlockedConvolutionPanelWidthsMatchTheDefault) {
  struct Case {
    Shape x, w;
    int64_t pad;
  };
  // K = 96 (4 + 2 blocks or 3 + 3), 40 (one panel of 3, partial), 144 (4 + 4 + 1 or 3 + 3 + 3);
  // a stem reading 3 NCHW channels.
  const std::vector<Case> cases = {{{1, 32, 14, 14}, {96, 32, 1, 1}, 0},
                                   {{2, 16, 9, 11}, {40, 16, 3, 3}, 1},
                                   {{1, 24, 8, 8}, {144, 24, 3, 3}, 1},
                                   {{1, 3, 15, 15}, {40, 3, 3, 3}, 1}};
  uint64_t seed = 700;
  for (const Case& c : cases) {
    Tensor x = random_tensor(c.x, DType::f32, seed++), w = random_tensor(c.w, DType::f32, seed++, -0.3, 0.3);
    Tensor b = random_tensor({c.w[0]}, DType::f32, seed++);
    const Tensor xin = c.x[1] > 16 ? blocked(x) : x;
    Attrs at;
    at.set("padding", std::vector<int64_t>(4, c.pad));
    at.set("activation", std::string("relu"));
    OpCall call{op("fused_conv2d_nchwc"), {xin, w, b, Tensor()}, op("fused_conv2d_nchwc").bind_attrs(at), KILN_HERE,
                Tensor(), nullptr};
    Tensor res = random_tensor(run_kernel(call)[0].shape(), DType::f32, seed++);
    for (bool before : {false, true}) {
      at.set("residual_before_activation", before);
      expect_tactics_agree("fused_conv2d_nchwc", {xin, w, b, res}, at);
    }
    EXPECT_TRUE(tactic_fits(op("fused_conv2d_nchwc"), "panels3", op("fused_conv2d_nchwc").bind_attrs(at), c.w, 5));
  }
  const Attrs one = op("fused_conv2d_nchwc").bind_attrs({});
  Attrs depthwise = one;
  depthwise.set("groups", int64_t{96});
  for (const char* t : {"panels3", "panels4"}) {
    EXPECT_TRUE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {96, 32, 1, 1}, 5));
    EXPECT_FALSE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {64, 32, 1, 1}, 5)) << "whole panels of 4";
    EXPECT_FALSE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {256, 32, 3, 3}, 5));
    EXPECT_FALSE(tactic_fits(op("fused_conv2d_nchwc"), t, depthwise, {96, 1, 3, 3}, 5)) << "depthwise: no panels";
  }
  // Note [Winograd tiles]: 3x3 stride-1 filters on blocked input, where a panel's stay in L2.
  for (const char* t : {"winograd", "winograd4"}) {
    EXPECT_TRUE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {64, 64, 3, 3}, 5));
    EXPECT_FALSE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {64, 3, 3, 3}, 4)) << "a stem's plain input";
    EXPECT_FALSE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {64, 64, 1, 1}, 5));
    EXPECT_FALSE(tactic_fits(op("fused_conv2d_nchwc"), t, one, {512, 512, 3, 3}, 5));
  }
}

// x -> conv 16 -> 96 (a narrower last panel: tuned over panel widths) -> relu -> conv 96 -> 64
// (whole panels: not) -> relu, blocked when compiled with Layout::nchwc.
ir::Graph blocked_pair() {
  ir::Graph g;
  g.name = "blocked_pair";
  SeededConstants cst{g, 800, 0.3};
  const Attrs pad{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16, 14, 14}});
  ir::Value* c = g.add_node(op("conv2d"), {x, cst("w96", {96, 16, 3, 3}), cst("b96", {96})}, pad)->output();
  c = g.add_node(op("relu"), {c})->output();
  c = g.add_node(op("conv2d"), {c, cst("w64", {64, 96, 1, 1}), cst("b64", {64})})->output();
  g.add_output(g.add_node(op("relu"), {c})->output());
  ir::verify(g);
  return g;
}

TEST(Tactics, PanelWidthsAreTunedWhereKLeavesANarrowerPanel) {
  CompileOptions o = tuned("none", 2);
  o.layout = CompileOptions::Layout::nchwc;
  CompileResult r = compile(blocked_pair(), o);
  int narrower = 0, whole = 0;
  for (const std::string& c : r.tuning.choices) {
    if (c.find("fused_conv2d_nchwc") == std::string::npos) continue;
    const bool panels = c.find("panels3=") != std::string::npos && c.find("panels4=") != std::string::npos;
    (panels ? narrower : whole) += 1;
  }
  EXPECT_EQ(narrower, 1) << r.tuning.summary();
  EXPECT_EQ(whole, 0) << "the 96 -> 64 layer has one panel width to offer: not tuned\n" << r.tuning.summary();
  // Either width, forced on every blocked convolution and through the engine file, gives the
  // untuned engine's results.
  expect_engines_agree(blocked_pair(), {1, 16, 14, 14}, 2, CompileOptions::Layout::nchwc);
}

// ---- targets, budgets, files ------------------------------------------------------------------------

TEST(Target, HostAndParse) {
  Target h = Target::host();
  EXPECT_EQ(h.name(), host_target());
  EXPECT_GE(h.cores, 1);
  EXPECT_GE(h.threads, 1);
  EXPECT_GE(h.l1d_bytes, 0);
  EXPECT_TRUE(h.runs_here());
  EXPECT_EQ(Target::parse("host").name(), h.name());
  EXPECT_EQ(Target::parse(h.arch + "-scalar").isa, "scalar");
  EXPECT_KILN_ERROR(Target::parse("pdp11-scalar"), "pdp11", h.arch);
  EXPECT_KILN_ERROR(Target::parse(h.arch + "-avx4096"), "avx4096");
  EXPECT_KILN_ERROR(Target::parse("hostile"), "hostile", "<arch>-<isa>");
  EXPECT_NE(h.str().find(h.name()), std::string::npos);
}

TEST(Target, ParseBytesAndObjective) {
  EXPECT_EQ(parse_bytes("4096"), 4096);
  EXPECT_EQ(parse_bytes("64MiB"), 64 << 20);
  EXPECT_EQ(parse_bytes("1.5GiB"), int64_t{3} << 29);
  EXPECT_EQ(parse_bytes("2GB"), 2000000000);
  EXPECT_EQ(parse_bytes("512K"), 512 * 1024);
  for (const char* bad : {"", "MiB", "-5", "12XB", "1.2.3KiB", "1e99GiB"}) EXPECT_KILN_ERROR(parse_bytes(bad), "not a size");
  EXPECT_EQ(parse_objective("throughput"), Target::Objective::throughput);
  EXPECT_KILN_ERROR(parse_objective("speed"), "speed", "latency", "throughput");
}

TEST(Target, MemoryBudgetIsFitOrFailsNamingThePlan) {
  CompileOptions o = tuned("none");
  o.autotune = false;
  Target t = Target::host();
  t.memory_budget = 1024;
  o.target = t;
  EXPECT_KILN_ERROR(compile(mlp(), o), "memory budget", "planned arena", "weights", "at batch 4", "--memory-budget");
  t.memory_budget = int64_t{64} << 20;
  o.target = t;
  CompileResult r = compile(mlp(), o);
  EXPECT_EQ(r.engine.target.memory_budget, int64_t{64} << 20);
  // A budget that holds the plan but not a packed copy of the weights: no prepacked tactic.
  int64_t weights = 0;
  for (const Tensor& c : r.engine.constants) weights += c.numel() * 4;
  t.memory_budget = r.engine.memory.arena_bytes + weights;
  o.target = t;
  o.autotune = true;
  for (const EngineStep& st : compile(mlp(), o).engine.steps) EXPECT_NE(st.tactic, "prepacked") << st.name;
}

// Note [Packed weights in the budget]: the blocked convolution packs its filters under every
// tactic, Winograd's F(4x4, 3x3) tiles 4x their size; the copies count against the budget. A budget
// with room for the direct kernel's copies but not the transformed ones takes the direct kernel, one
// byte less leaves the GEMM's weight unpacked, less than the convolutions' copies fails naming the
// packed weights, and with room for the transformed filters the heuristic's tiles are kept.
TEST(Target, PackedFiltersCountAgainstTheMemoryBudget) {
  CompileOptions o = tuned("none");
  o.autotune = false;
  o.layout = CompileOptions::Layout::nchwc;
  auto winograd_steps = [](const Engine& e) {
    int n = 0;
    for (const EngineStep& st : e.steps) n += st.tactic == "winograd4";
    return n;
  };
  CompileResult all = compile(small_cnn(), o);
  ASSERT_EQ(winograd_steps(all.engine), 1) << "c2 (8 -> 8); not c1, a stem on plain input";
  o.excluded_tactics = {"winograd", "winograd4"};
  CompileResult direct = compile(small_cnn(), o);
  o.excluded_tactics.clear();
  // c1 (a stem on plain input: 3 lanes x 9 taps x 16) and c2 (one block: 16 x 16 x 9) packed as
  // the direct kernel reads them; fc packed for the GEMM (6 x 8).
  EXPECT_EQ(direct.tuning.packed_bytes, (16 * 3 * 9 + 16 * 16 * 9 + 6 * 8) * 4);
  // c2's F(4x4, 3x3) filters: 36 positions x 16 x 16.
  EXPECT_EQ(all.tuning.packed_bytes - direct.tuning.packed_bytes, (36 - 9) * 16 * 16 * 4);
  int64_t weights = 0;
  for (const Tensor& c : all.engine.constants) weights += c.numel() * 4;
  Target t = Target::host();
  t.memory_budget = all.engine.memory.arena_bytes + weights + direct.tuning.packed_bytes;
  o.target = t;
  CompileResult fit = compile(small_cnn(), o);
  EXPECT_EQ(winograd_steps(fit.engine), 0);
  EXPECT_EQ(fit.tuning.packed_bytes, direct.tuning.packed_bytes);
  Tensor x = random_tensor({2, 3, 9, 7}, DType::f32, 63);
  EXPECT_TRUE(testing::all_close(Executor(std::make_shared<Engine>(fit.engine)).run({x})[0],
                                 ir::run(small_cnn(), {x})[0], {1e-5, 1e-5}));
  // A byte less: the GEMM's weight is read as it is; less than the convolutions' copies fails.
  t.memory_budget -= 1;
  o.target = t;
  CompileResult less = compile(small_cnn(), o);
  EXPECT_EQ(less.tuning.packed_bytes, (16 * 3 * 9 + 16 * 16 * 9) * 4);
  for (const EngineStep& st : less.engine.steps) EXPECT_NE(st.tactic, "prepacked") << st.name;
  t.memory_budget -= 6 * 8 * 4;
  o.target = t;
  EXPECT_KILN_ERROR(compile(small_cnn(), o), "memory budget", "packed weights", "--memory-budget");
  t.memory_budget = all.engine.memory.arena_bytes + weights + all.tuning.packed_bytes;
  o.target = t;
  EXPECT_EQ(winograd_steps(compile(small_cnn(), o).engine), 1);

  // The steps after a choice keep their own copies: a 3x3 layer's transformed filters (36 KiB) fit
  // the room left beside its direct copy (9 KiB) and the next layer's (32 KiB), which that layer
  // still needs.
  ir::Graph g;
  g.name = "reserve";
  SeededConstants cst{g, 300};
  const Attrs pad1{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  ir::Value* v = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16, 8, 8}});
  v = g.add_node(op("relu"), {g.add_node(op("conv2d"), {v, cst("a", {16, 16, 1, 1})})->output()})->output();
  v = g.add_node(op("relu"), {g.add_node(op("conv2d"), {v, cst("b", {16, 16, 3, 3})}, pad1)->output()})->output();
  g.add_output(g.add_node(op("conv2d"), {v, cst("c", {512, 16, 1, 1})})->output());
  o.target = Target::host();
  o.excluded_tactics = {"winograd", "winograd4"};
  CompileResult plain = compile(g, o);
  EXPECT_EQ(plain.tuning.packed_bytes, (16 * 16 + 16 * 16 * 9 + 512 * 16) * 4);
  o.excluded_tactics = {"winograd"};
  weights = (16 * 16 + 16 * 16 * 9 + 512 * 16) * 4;
  t.memory_budget = plain.engine.memory.arena_bytes + weights + plain.tuning.packed_bytes;
  o.target = t;
  CompileResult r = compile(g, o);
  EXPECT_EQ(winograd_steps(r.engine), 0);
  EXPECT_EQ(r.tuning.packed_bytes, plain.tuning.packed_bytes);
}

// Note [Winograd by groups]: a grouped 3x3 layer whose groups are at least two whole blocks in and
// out (ResNeSt's 2 x (32 -> 64)) takes F(4x4, 3x3) tiles without timing and matches the graph run
// directly; one of a block a group (RegNetX's 16 -> 16) keeps the direct kernel.
TEST(Tactics, GroupedThreeByThreeTakesWinogradWhereGroupsAreWholeBlocks) {
  ir::Graph g;
  g.name = "grouped";
  SeededConstants cst{g, 400};
  const std::vector<int64_t> pad1{1, 1, 1, 1};
  const Attrs two{{"padding", pad1}, {"groups", int64_t{2}}}, four{{"padding", pad1}, {"groups", int64_t{4}}};
  ir::Value* v = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 64, 11, 9}});
  v = g.add_node(op("relu"), {g.add_node(op("conv2d"), {v, cst("a", {64, 64, 1, 1})})->output()})->output();
  v = g.add_node(op("relu"), {g.add_node(op("conv2d"), {v, cst("b", {128, 32, 3, 3}), cst("bb", {128})}, two)
                                  ->output()})->output();
  v = g.add_node(op("relu"), {g.add_node(op("conv2d"), {v, cst("c", {64, 128, 1, 1})})->output()})->output();
  v = g.add_node(op("conv2d"), {v, cst("d", {64, 16, 3, 3})}, four)->output();
  g.add_output(v);
  CompileOptions o = tuned("none");
  o.autotune = false;
  o.layout = CompileOptions::Layout::nchwc;
  CompileResult r = compile(g, o);
  int grouped = 0;
  for (const EngineStep& st : r.engine.steps) {
    if (st.op->name() != "fused_conv2d_nchwc" || st.attrs.get_int("groups") == 1) continue;
    ++grouped;
    EXPECT_EQ(st.tactic == "winograd4", st.attrs.get_int("groups") == 2) << st.name << " ran " << st.tactic;
  }
  EXPECT_EQ(grouped, 2);
  for (int64_t batch : {1, 3}) {
    Tensor x = random_tensor({batch, 64, 11, 9}, DType::f32, 64 + batch, -1, 1);
    Tensor want = ir::run(g, {x})[0].contiguous();
    float spread = 0;
    for (int64_t i = 0; i < want.numel(); ++i) spread = std::max(spread, std::abs(want.data<float>()[i]));
    // F(4x4, 3x3) rounds to ~1e-5 of the outputs' spread a layer (Note [Winograd tiles]).
    EXPECT_TRUE(testing::all_close(Executor(std::make_shared<Engine>(r.engine)).run({x})[0], want,
                                   {1e-4, 2e-5 * spread}))
        << "batch " << batch << ", outputs up to " << spread;
  }
}

// Note [Packed weights in the budget]: a weight two steps read is packed once when the engine
// loads (the pack cache hands both the same copy), so it is charged once, and a budget with room
// for that one copy keeps both steps packed.
TEST(Target, AWeightStepsShareIsChargedOnce) {
  ir::Graph g;
  g.name = "shared";
  ir::Value* w = g.add_constant("w", random_tensor({16, 24}, DType::f32, 500, -0.5, 0.5));
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 16}});
  g.add_output(g.add_node(op("matmul"), {x, w})->output());
  g.add_output(g.add_node(op("matmul"), {g.add_node(op("relu"), {x})->output(), w})->output());
  CompileOptions o = tuned("none");
  o.autotune = false;
  auto prepacked_steps = [](const Engine& e) {
    int n = 0;
    for (const EngineStep& st : e.steps) n += st.tactic == "prepacked";
    return n;
  };
  CompileResult all = compile(g, o);
  ASSERT_EQ(prepacked_steps(all.engine), 2);
  EXPECT_EQ(all.tuning.packed_bytes, 16 * 24 * 4);
  Target t = Target::host();
  t.memory_budget = all.engine.memory.arena_bytes + 2 * (16 * 24 * 4);  // the weight and one packed copy
  o.target = t;
  CompileResult fit = compile(g, o);
  EXPECT_EQ(prepacked_steps(fit.engine), 2);
  const int64_t before = prepacked_weight_count();
  Executor ex(std::make_shared<Engine>(fit.engine));
  EXPECT_EQ(prepacked_weight_count(), before + 1) << "one packed copy for both steps";
  Tensor in = random_tensor({3, 16}, DType::f32, 501);
  std::vector<Tensor> got = ex.run({in}), want = ir::run(g, {in});
  for (size_t i = 0; i < 2; ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], {1e-5, 1e-5})) << i;
}

TEST(EngineFile, KeepsTargetAndTactics) {
  std::string cache = temp_path("roundtrip");
  CompileOptions o = tuned(cache);
  Target t = Target::host();
  t.threads = 3;
  t.memory_budget = int64_t{1} << 30;
  t.objective = Target::Objective::throughput;
  o.target = t;
  Engine e = compile(mlp(), o).engine;
  e.steps[0].tactic = "prepacked";  // whatever the timing said, a non-default one must survive
  Engine back = Engine::deserialize(e.serialize(), "rt.kiln");
  EXPECT_EQ(back.target.name(), t.name());
  EXPECT_EQ(back.target.threads, 3);
  EXPECT_EQ(back.target.cores, t.cores);
  EXPECT_EQ(back.target.l1d_bytes, t.l1d_bytes);
  EXPECT_EQ(back.target.l2_bytes, t.l2_bytes);
  EXPECT_EQ(back.target.l3_bytes, t.l3_bytes);
  EXPECT_EQ(back.target.memory_budget, int64_t{1} << 30);
  EXPECT_EQ(back.target.objective, Target::Objective::throughput);
  ASSERT_EQ(back.steps.size(), e.steps.size());
  for (size_t i = 0; i < e.steps.size(); ++i) EXPECT_EQ(back.steps[i].tactic, e.steps[i].tactic) << i;
  EXPECT_NE(back.steps_str().find("[prepacked]"), std::string::npos);
  std::filesystem::remove(cache);
}

TEST(EngineFile, UnknownTacticAndOldVersionAreNamed) {
  CompileOptions o = tuned("none");
  o.autotune = false;
  Engine e = compile(mlp(), o).engine;
  e.steps[0].tactic = "warp_drive";
  EXPECT_KILN_ERROR(e.validate(), "tactic 'warp_drive'", "recompile");
  e.steps[0].tactic.clear();
  std::string bytes = e.serialize();
  uint32_t v = 1;
  std::memcpy(bytes.data() + 8, &v, 4);
  EXPECT_KILN_ERROR(Engine::deserialize(bytes, "old.kiln"), "old.kiln", "format version 1",
                    "reads version " + std::to_string(kEngineFormatVersion), "recompile");
}

}  // namespace
}  // namespace kiln::runtime
