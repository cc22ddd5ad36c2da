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
#include <set>

#include "kernels/cpu/gemm_ukernel.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ir.h"
#include "kiln/ops/dispatch.h"
#include "kiln/runtime.h"
#include "ops/tactics.h"
#include "support/testing.h"

namespace kiln::runtime {
namespace {

using kiln::testing::random_tensor;

// x[batch, 13] -> gemm(w1^T) + b1 -> relu -> matmul(w2) + b2 -> gelu -> gemm(w3^T, c = b3)
ir::Graph mlp() {
  ir::Graph g;
  g.name = "mlp";
  uint64_t seed = 7;
  auto cst = [&](const std::string& n, const Shape& s) {
    return g.add_constant(n, random_tensor(s, DType::f32, seed++, -0.5, 0.5));
  };
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
  uint64_t seed = 100;
  auto cst = [&](const std::string& n, const Shape& s) {
    return g.add_constant(n, random_tensor(s, DType::f32, seed++, -0.5, 0.5));
  };
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
    EXPECT_EQ(header, "kiln-timing-cache 1");

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

TEST(Tactics, NoAutotuneUsesTheDefaultKernelsAndWritesNoCache) {
  std::string cache = temp_path("no_autotune");
  CompileOptions o = tuned(cache);
  o.autotune = false;
  CompileResult r = compile(mlp(), o);
  EXPECT_FALSE(r.tuning.autotune);
  EXPECT_EQ(r.tuning.tuned_steps, 3);
  EXPECT_EQ(r.tuning.hits + r.tuning.misses, 0);
  for (const EngineStep& st : r.engine.steps) EXPECT_EQ(st.tactic, "") << st.name;
  EXPECT_FALSE(std::filesystem::exists(cache));
  EXPECT_NE(r.tuning.summary().find("heuristic"), std::string::npos);
  // "none": timed, but no file.
  o.autotune = true;
  o.timing_cache = "none";
  CompileResult n = compile(mlp(), o);
  EXPECT_EQ(n.tuning.misses, 3);
  EXPECT_EQ(n.tuning.cache_path, "");
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

TEST(Tactics, CorruptCacheIsIgnoredWithAWarningAndRewritten) {
  for (const std::string& junk : {std::string("garbage\x01\xff"), std::string("kiln-timing-cache 1\nno tabs here\n"),
                                  std::string("kiln-timing-cache 1\n\t\t\n"), std::string("")}) {
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
  // A cached tactic this kiln does not have counts as a miss.
  std::string cache = temp_path("stale");
  compile(mlp(), tuned(cache));
  std::ifstream in(cache);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  for (const std::string t : {"\tprepacked\t", "\tdefault\t", "\tepilogue\t", "\topenblas\t"})
    for (size_t at = text.find(t); at != std::string::npos; at = text.find(t)) text.replace(at, t.size(), "\twarp\t");
  std::ofstream(cache, std::ios::trunc) << text;
  CompileResult r = compile(mlp(), tuned(cache));
  EXPECT_EQ(r.tuning.hits, 0);
  EXPECT_EQ(r.tuning.misses, 3);
}

// ---- every tactic equals the default kernel -----------------------------------------------------------

void expect_tactics_agree(const std::string& name, const std::vector<Tensor>& ins, const Attrs& given) {
  const OpDef& d = op(name);
  Attrs attrs = d.bind_attrs(given);
  OpCall call{d, ins, attrs, KILN_HERE, Tensor(), nullptr};
  Tensor want = run_kernel(call)[0];
  for (const std::string& t : cpu_tactics(d)) {
    Tensor got = run_kernel(call, {}, t)[0];
    EXPECT_TRUE(kiln::testing::all_close(got, want, {2e-5, 2e-5})) << name << " tactic " << t;
    Tensor again = run_kernel(call, {}, t)[0];  // a prepacked tactic's second call reuses the packing
    EXPECT_TRUE(kiln::testing::all_close(again, want, {2e-5, 2e-5})) << name << " tactic " << t << " (2nd)";
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
  }
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
void expect_engines_agree(const ir::Graph& g, const Shape& in_shape, int level) {
  CompileOptions o = tuned("none", level);
  o.autotune = false;
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
          EXPECT_TRUE(kiln::testing::all_close(got[i], want[i], {1e-4, 1e-5}))
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
  uint64_t seed = 300;
  auto cst = [&](const std::string& n, const Shape& s) {
    return g.add_constant(n, random_tensor(s, DType::f32, seed++, -0.5, 0.5));
  };
  ir::Value* x = g.add_input("x", ir::ValueType{DType::f32, {ir::Dim::sym("batch"), 8, 9, 7}});
  const Attrs pad{{"padding", std::vector<int64_t>{1, 1, 1, 1}}};
  Attrs depthwise = pad, grouped = pad;
  depthwise.set("groups", int64_t{8});
  grouped.set("groups", int64_t{2});
  ir::Value* c = g.add_node(op("conv2d"), {x, cst("dw_w", {8, 1, 3, 3}), cst("dw_b", {8})}, depthwise)->output();
  c = g.add_node(op("conv2d"), {c, cst("g_w", {8, 4, 3, 3}), cst("g_b", {8})}, grouped)->output();
  g.add_output(c);
  ir::verify(g);
  EXPECT_FALSE(tactic_fits(op("conv2d"), "direct", depthwise, {8, 1, 3, 3}));
  EXPECT_TRUE(tactic_fits(op("conv2d"), "direct", grouped, {8, 4, 3, 3}));
  EXPECT_TRUE(tactic_fits(op("conv2d"), "", depthwise, {8, 1, 3, 3}));
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
