// Transformer fusions: fused_attention (src/ops/defs/fused/attention.cc) against a float64
// reference built from kiln's unfused ops, for odd sequence lengths, heads, every mask broadcast
// form, -inf and large-negative mask values, k given transposed or not, non-contiguous inputs;
// and the layer_norm_fusion / gelu_fusion / attention_fusion passes on a BERT-like encoder block
// (decomposed as exporters emit it): the optimized graph, run by the reference executor and as a
// compiled engine, equals the unfused graph; the same for T5's and LLaMA's RMS norms and LLaMA's
// rotary embeddings, MPNet's two additive terms, and SqueezeBERT's 1-D convolutions with their
// epilogues.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kiln/compiler.h"
#include "kiln/ir.h"
#include "kiln/kiln.h"
#include "kiln/ops/dispatch.h"
#include "kiln/runtime.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;

// f32 against the f64 reference: scores carry ~D ulps of |q||k|, and the output is a convex
// combination of v's rows, so errors stay near 1e-6 absolute for inputs in [-1, 1].
constexpr testing::Tol kF32Tol{1e-4, 2e-5};
constexpr testing::Tol kF64Tol{1e-10, 1e-12};

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool kt) {
  return dispatch1(op("fused_attention"), {q, k, v, mask}, {{"scale", scale}, {"k_transposed", kt}});
}

Tensor attention_ref(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool kt) {
  Tensor k64 = k.to(DType::f64);
  Tensor s = matmul(q.to(DType::f64), kt ? k64 : transpose(k64, -2, -1)) * Scalar(scale);
  if (mask.defined()) s = s + mask.to(DType::f64);
  return matmul(softmax(s, -1), v.to(DType::f64));
}

// A mask of `shape` with random values, -inf, -1e9 and the dtype's lowest value sprinkled in;
// column 0 stays finite and ordinary so no row is masked entirely.
Tensor make_mask(const Shape& shape, DType dt, uint64_t seed) {
  Tensor m = random_tensor(shape, DType::f64, seed, -2, 2).contiguous();
  double* p = m.data<double>();
  const int64_t cols = shape.back();
  const double lowest = dt == DType::f32 ? static_cast<double>(std::numeric_limits<float>::lowest())
                                         : std::numeric_limits<double>::lowest();
  for (int64_t i = 0; i < m.numel(); ++i) {
    if (i % cols == 0) continue;
    const int64_t r = (i * 7919 + static_cast<int64_t>(seed)) % 11;
    if (r == 0) p[i] = -std::numeric_limits<double>::infinity();
    if (r == 1) p[i] = -1e9;
    if (r == 2) p[i] = lowest;
  }
  return m.to(dt);
}

TEST(FusedAttention, MatchesFloat64ReferenceForEveryMaskForm) {
  int seed = 0;
  for (DType dt : {DType::f32, DType::f64}) {
    const testing::Tol tol = dt == DType::f32 ? kF32Tol : kF64Tol;
    for (int64_t sq : {1, 7, 33})
      for (int64_t sk : {1, 7, 33}) {
        if (sq != sk && sq != 7) continue;  // every S for self-attention, cross-attention from 7 rows
        const int64_t b = 2, h = 3, d = 5, dv = 6;
        const std::vector<Shape> masks = {{},           {sk},          {sq, sk},     {b, 1, 1, sk},
                                          {b, 1, sq, sk}, {1, h, sq, sk}, {b, h, sq, sk}};
        for (const Shape& ms : masks)
          for (bool kt : {false, true}) {
            SCOPED_TRACE(std::string(dtype_name(dt)) + " Sq=" + std::to_string(sq) + " Sk=" + std::to_string(sk) +
                         " mask=" + shape_str(ms) + " kt=" + std::to_string(kt));
            ++seed;
            Tensor q = random_tensor({b, h, sq, d}, dt, 100 * seed, -1, 1);
            Tensor k = random_tensor(kt ? Shape{b, h, d, sk} : Shape{b, h, sk, d}, dt, 100 * seed + 1, -1, 1);
            Tensor v = random_tensor({b, h, sk, dv}, dt, 100 * seed + 2, -1, 1);
            Tensor mask = ms.empty() ? Tensor() : make_mask(ms, dt, 100 * seed + 3);
            const double scale = 1.0 / std::sqrt(static_cast<double>(d));
            Tensor got = fused_attention(q, k, v, mask, scale, kt);
            EXPECT_EQ(got.shape(), (Shape{b, h, sq, dv}));
            EXPECT_TRUE(testing::all_close(got, attention_ref(q, k, v, mask, scale, kt), tol));
          }
      }
  }
}

TEST(FusedAttention, RankThreeNonContiguousAndThreads) {
  // Heads split from [B, S, H, D] by a permute (strided rows), v non-contiguous, rank 3 as well.
  for (DType dt : {DType::f32, DType::f64}) {
    SCOPED_TRACE(dtype_name(dt));
    const testing::Tol tol = dt == DType::f32 ? kF32Tol : kF64Tol;
    Tensor qs = random_tensor({2, 33, 3, 8}, dt, 1, -1, 1);
    Tensor ks = random_tensor({2, 33, 3, 8}, dt, 2, -1, 1);
    Tensor q = qs.permute({0, 2, 1, 3});
    Tensor kt = ks.permute({0, 2, 3, 1});  // [B, H, D, S]: BERT's ONNX k^T
    Tensor v = testing::noncontiguous(random_tensor({2, 3, 33, 8}, dt, 3, -1, 1));
    Tensor mask = make_mask({2, 1, 1, 33}, dt, 4);
    Tensor want = attention_ref(q, kt, v, mask, 0.3, true);
    set_num_threads(1);
    Tensor one = fused_attention(q, kt, v, mask, 0.3, true);
    set_num_threads(2);
    Tensor two = fused_attention(q, kt, v, mask, 0.3, true);
    EXPECT_TRUE(testing::all_close(one, want, tol));
    EXPECT_TRUE(testing::all_close(two, one, testing::Tol{0, 0}));  // tasks are independent: same bits
    // Rank 3: [N, S, D] with a [S, S] mask.
    Tensor q3 = random_tensor({4, 7, 5}, dt, 5, -1, 1), k3 = random_tensor({4, 9, 5}, dt, 6, -1, 1);
    Tensor v3 = random_tensor({4, 9, 2}, dt, 7, -1, 1), m3 = make_mask({7, 9}, dt, 8);
    EXPECT_TRUE(testing::all_close(fused_attention(q3, k3, v3, m3, 1.5, false), attention_ref(q3, k3, v3, m3, 1.5, false),
                                   tol));
  }
  set_num_threads(available_cores());
}

TEST(FusedAttention, NonFiniteRowsFollowTheUnfusedGraph) {
  // A row masked entirely by -inf is softmax(0/0) = NaN in the unfused graph and here; a NaN score
  // poisons its row; a finite large-negative mask excludes its columns.
  Tensor q = random_tensor({1, 1, 3, 4}, DType::f32, 1, -1, 1);
  Tensor k = random_tensor({1, 1, 5, 4}, DType::f32, 2, -1, 1);
  Tensor v = random_tensor({1, 1, 5, 2}, DType::f32, 3, -1, 1);
  Tensor mask = zeros({3, 5}, TensorOptions(DType::f32)).contiguous();
  float* m = mask.data<float>();
  const float inf = std::numeric_limits<float>::infinity();
  for (int j = 0; j < 5; ++j) m[j] = -inf;                                 // row 0: all -inf
  m[5 + 0] = std::numeric_limits<float>::quiet_NaN();                     // row 1: NaN
  for (int j = 1; j < 5; ++j) m[10 + j] = std::numeric_limits<float>::lowest();  // row 2: only column 0
  Tensor got = fused_attention(q, k, v, mask, 0.5, false);
  Tensor unfused = matmul(softmax(matmul(q, transpose(k, -2, -1)) * Scalar(0.5) + mask, -1), v);
  EXPECT_TRUE(testing::all_close(got, unfused, kF32Tol));  // NaNs must match
  const float* g = got.contiguous().data<float>();
  EXPECT_TRUE(std::isnan(g[0]) && std::isnan(g[2]));
  EXPECT_NEAR(g[4], v.contiguous().data<float>()[0], 1e-6);  // row 2 takes v's row 0
}

// zero_nan_rows (Note [NaN rows to zero] in attention_fusion.cc): the rows above that are NaN
// come out as where(isnan(p), 0, p) @ v, zeros, on the register-tiled f32 kernel, the GEMM-based
// loop (q strided along D) and f64; the other rows are unchanged.
TEST(FusedAttention, ZeroNanRowsMatchesTheGuardedGraph) {
  const float inf = std::numeric_limits<float>::infinity();
  for (DType dt : {DType::f32, DType::f64})
    for (bool strided_q : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + (strided_q ? " strided q" : ""));
      Tensor q = random_tensor({2, 7, 3, 4}, dt, 1, -1, 1);
      if (strided_q) q = random_tensor({2, 7, 4, 3}, dt, 1, -1, 1).transpose(-2, -1);
      Tensor k = random_tensor({2, 7, 5, 4}, dt, 2, -1, 1);
      Tensor v = random_tensor({2, 7, 5, 6}, dt, 3, -1, 1);
      Tensor mask = random_tensor({2, 1, 3, 5}, DType::f32, 4, -1, 1).contiguous();
      float* m = mask.data<float>();
      for (int j = 0; j < 5; ++j) m[j] = -inf;                       // entry 0, row 0: all -inf
      m[5 + 2] = std::numeric_limits<float>::quiet_NaN();           // entry 0, row 1: a NaN
      m[15 + 10 + 3] = inf;                                         // entry 1, row 2: +inf
      for (int j = 1; j < 5; ++j) m[15 + j] = -inf;                 // entry 1, row 0: only key 0
      mask = mask.to(dt);
      Tensor got = dispatch1(op("fused_attention"), {q, k, v, mask},
                             {{"scale", 0.5}, {"k_transposed", false}, {"zero_nan_rows", true}});
      Tensor p = softmax(matmul(q, transpose(k, -2, -1)) * Scalar(0.5) + mask, -1);
      Tensor want = matmul(where(isnan(p), zeros({}, TensorOptions(dt)), p), v);
      EXPECT_TRUE(testing::all_close(got, want, dt == DType::f32 ? kF32Tol : kF64Tol));
      Tensor g = got.to(DType::f64).contiguous();
      const double* gp = g.data<double>();
      for (int64_t h = 0; h < 7; ++h)
        for (int64_t c = 0; c < 6; ++c) {
          const int64_t e0 = (h * 3) * 6 + c, e1 = ((7 + h) * 3 + 2) * 6 + c;
          EXPECT_EQ(gp[e0], 0.0);                 // all -inf
          EXPECT_EQ(gp[e0 + 6], 0.0);             // NaN
          EXPECT_EQ(gp[e1], 0.0);                 // +inf
          EXPECT_FALSE(std::isnan(gp[e0 + 12]));  // row 2 of entry 0 is an ordinary row
        }
    }
}

TEST(FusedAttention, RejectsBadShapes) {
  Tensor q = random_tensor({2, 3, 4}, DType::f32, 1), k = random_tensor({2, 5, 4}, DType::f32, 2);
  Tensor v = random_tensor({2, 5, 6}, DType::f32, 3);
  EXPECT_KILN_ERROR(fused_attention(q, random_tensor({2, 5, 3}, DType::f32, 4), v, {}, 1.0, false), "q's last dim");
  EXPECT_KILN_ERROR(fused_attention(q, k, random_tensor({2, 4, 6}, DType::f32, 5), {}, 1.0, false), "rows");
  EXPECT_KILN_ERROR(fused_attention(q, random_tensor({1, 5, 4}, DType::f32, 6), v, {}, 1.0, false), "leading");
  EXPECT_KILN_ERROR(fused_attention(q, k, v, random_tensor({2, 3, 4}, DType::f32, 7), 1.0, false), "must broadcast");
  EXPECT_KILN_ERROR(fused_attention(q, k, v, random_tensor({3, 5}, DType::f64, 8), 1.0, false), "share a dtype");
  EXPECT_KILN_ERROR(fused_attention(q, k, v, {}, std::numeric_limits<double>::infinity(), false), "finite");
  EXPECT_KILN_ERROR(fused_attention(q.to(DType::i32), k.to(DType::i32), v.to(DType::i32), {}, 1.0, false), "f32 or f64");
}

// ---- the passes on an encoder block ---------------------------------------------------------------

ir::Value* node(ir::Graph& g, const std::string& op_name, std::vector<ir::Value*> ins, const Attrs& a = {}) {
  return g.add_node(op(op_name), std::move(ins), a)->output();
}
ir::Value* scalar(ir::Graph& g, double v) { return g.add_constant("", full({}, v, TensorOptions(DType::f32))); }
ir::Value* weight(ir::Graph& g, const Shape& s, uint64_t seed, double range) {
  return g.add_constant("", random_tensor(s, DType::f32, seed, -range, range));
}

// PyTorch's LayerNorm as exported before opset 17: mean, sub, pow 2, mean, + eps, sqrt, div, * g, + b.
ir::Value* layer_norm_decomposed(ir::Graph& g, ir::Value* x, int64_t e, uint64_t seed) {
  Attrs last{{"axes", std::vector<int64_t>{-1}}, {"keepdim", true}};
  ir::Value* d = node(g, "sub", {x, node(g, "mean", {x}, last)});
  ir::Value* var = node(g, "mean", {node(g, "pow", {d, scalar(g, 2)})}, last);
  ir::Value* n = node(g, "div", {d, node(g, "sqrt", {node(g, "add", {var, scalar(g, 1e-12)})})});
  n = node(g, "mul", {n, g.add_constant("", random_tensor({e}, DType::f32, seed, 0.5, 1.5))});
  return node(g, "add", {n, weight(g, {e}, seed + 1, 0.5)});
}

ir::Value* gelu_decomposed(ir::Graph& g, ir::Value* x, bool tanh_form) {
  if (!tanh_form) {
    ir::Value* e = node(g, "erf", {node(g, "div", {x, scalar(g, 1.4142135623730951)})});
    return node(g, "mul", {node(g, "mul", {x, node(g, "add", {e, scalar(g, 1)})}), scalar(g, 0.5)});
  }
  ir::Value* cube = node(g, "mul", {node(g, "mul", {x, x}), x});
  ir::Value* inner = node(g, "add", {x, node(g, "mul", {scalar(g, 0.044715), cube})});
  ir::Value* t = node(g, "tanh", {node(g, "mul", {inner, scalar(g, 0.7978845608028654)})});
  return node(g, "mul", {node(g, "mul", {scalar(g, 0.5), x}), node(g, "add", {scalar(g, 1), t})});
}

ir::Value* linear(ir::Graph& g, ir::Value* x, int64_t in, int64_t out, uint64_t seed) {
  const double r = 1.0 / std::sqrt(static_cast<double>(in));
  return node(g, "add", {node(g, "matmul", {x, weight(g, {in, out}, seed, r)}), weight(g, {out}, seed + 1, 0.1)});
}

// One BERT encoder layer, [B, S, E] with H heads, as PyTorch exports it.
ir::Graph encoder_block(int64_t b, int64_t s, int64_t e, int64_t h, bool tanh_gelu) {
  const int64_t d = e / h;
  ir::Graph g;
  g.name = "encoder";
  ir::Value* x = g.add_input("x", {DType::f32, {b, s, e}});
  ir::Value* mask = g.add_input("mask", {DType::f32, {b, 1, 1, s}});
  auto heads = [&](ir::Value* t, std::vector<int64_t> perm) {
    t = node(g, "reshape", {t}, {{"shape", std::vector<int64_t>{b, s, h, d}}});
    return node(g, "permute", {t}, {{"dims", std::move(perm)}});
  };
  ir::Value* q = heads(linear(g, x, e, e, 10), {0, 2, 1, 3});
  ir::Value* kt = heads(linear(g, x, e, e, 20), {0, 2, 3, 1});
  ir::Value* v = heads(linear(g, x, e, e, 30), {0, 2, 1, 3});
  ir::Value* scores = node(g, "div", {node(g, "matmul", {q, kt}), scalar(g, std::sqrt(static_cast<double>(d)))});
  ir::Value* p = node(g, "softmax", {node(g, "add", {scores, mask})}, {{"axis", int64_t{-1}}});
  ir::Value* ctx = node(g, "permute", {node(g, "matmul", {p, v})}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
  ctx = node(g, "reshape", {ctx}, {{"shape", std::vector<int64_t>{b, s, e}}});
  ir::Value* a = layer_norm_decomposed(g, node(g, "add", {linear(g, ctx, e, e, 40), x}), e, 50);
  ir::Value* f = gelu_decomposed(g, linear(g, a, e, 4 * e, 60), tanh_gelu);
  g.add_output(layer_norm_decomposed(g, node(g, "add", {linear(g, f, 4 * e, e, 70), a}), e, 80));
  return g;
}

int count_op(const ir::Graph& g, const std::string& name) {
  int n = 0;
  for (const ir::Node* nd : g.nodes()) n += nd->op().name() == name;
  return n;
}

// The additive BERT mask: 0 where attended, f32's lowest where padded (batch 1 pads its tail).
Tensor padding_mask(int64_t b, int64_t s) {
  Tensor m = zeros({b, 1, 1, s}, TensorOptions(DType::f32)).contiguous();
  for (int64_t j = s - 3; j < s; ++j) m.data<float>()[s + j] = std::numeric_limits<float>::lowest();
  return m;
}

TEST(TransformerFusion, EachPassKeepsTheEncoderBlocksNumerics) {
  for (bool tanh_gelu : {false, true}) {
    SCOPED_TRACE(tanh_gelu ? "tanh gelu" : "erf gelu");
    const int64_t b = 2, s = 7, e = 12, h = 3;
    ir::Graph base = encoder_block(b, s, e, h, tanh_gelu);
    ir::verify(base);
    std::vector<Tensor> in{random_tensor({b, s, e}, DType::f32, 1), padding_mask(b, s)};
    Tensor want = ir::run(base, in)[0];
    struct Case {
      const char* pass;
      const char* fused_op;
      int fused;
      const char* gone;  // an op the pass removes entirely
    };
    for (const Case& c : {Case{"layer_norm_fusion", "layer_norm", 2, "sqrt"}, Case{"gelu_fusion", "gelu", 1, tanh_gelu ? "tanh" : "erf"},
                          Case{"attention_fusion", "fused_attention", 1, "softmax"}}) {
      SCOPED_TRACE(c.pass);
      ir::Graph g = base.clone();
      auto reps = compiler::run_passes(g, {c.pass, "dce"}, true);
      EXPECT_TRUE(reps[0].changed) << reps[0].report;
      EXPECT_EQ(count_op(g, c.fused_op), c.fused) << ir::print(g);
      EXPECT_EQ(count_op(g, c.gone), 0) << ir::print(g);
      EXPECT_LT(g.num_nodes(), base.num_nodes());
      EXPECT_TRUE(testing::all_close(ir::run(g, in)[0], want, testing::Tol{1e-4, 1e-4}));
      // A second run finds nothing left.
      EXPECT_FALSE(compiler::run_passes(g, {c.pass}, true)[0].changed);
    }
  }
}

TEST(TransformerFusion, PipelineAndEngineMatchTheUnfusedGraph) {
  const int64_t b = 2, s = 9, e = 16, h = 4;
  ir::Graph base = encoder_block(b, s, e, h, false);
  std::vector<Tensor> in{random_tensor({b, s, e}, DType::f32, 2), padding_mask(b, s)};
  Tensor want = ir::run(base, in)[0];
  for (int level : {1, 2, 3}) {
    SCOPED_TRACE("-O" + std::to_string(level));
    ir::Graph g = base.clone();
    compiler::PassOptions opts;
    opts.opt_level = level;
    opts.verify_each = true;
    compiler::optimize(g, opts);
    EXPECT_EQ(count_op(g, "fused_attention"), level >= 2 ? 1 : 0) << ir::print(g);
    EXPECT_EQ(count_op(g, "layer_norm"), level >= 2 ? 2 : 0) << ir::print(g);
    EXPECT_TRUE(testing::all_close(ir::run(g, in)[0], want, testing::Tol{1e-4, 1e-4}));
    runtime::CompileOptions co;
    co.passes.opt_level = level;
    // Through the engine file too: fused_attention's attributes survive serialization.
    runtime::Engine engine = runtime::Engine::deserialize(runtime::compile(base, co).engine.serialize());
    runtime::Executor ex(std::make_shared<runtime::Engine>(std::move(engine)));
    EXPECT_TRUE(testing::all_close(ex.run(in)[0], want, testing::Tol{1e-4, 1e-4}));
  }
  // --disable-pass bisection: each fusion can be switched off by name.
  for (const char* p : {"layer_norm_fusion", "gelu_fusion", "attention_fusion"}) {
    ir::Graph g = base.clone();
    compiler::PassOptions opts;
    opts.disabled = {p};
    auto reps = compiler::optimize(g, opts);
    for (const auto& r : reps) EXPECT_NE(r.pass, p);
  }
  auto o2 = compiler::pipeline(2);
  for (const char* p : {"layer_norm_fusion", "gelu_fusion", "attention_fusion"})
    EXPECT_NE(std::find(o2.begin(), o2.end(), p), o2.end()) << p;
}

// MPNet's attention: a relative position bias [1, H, S, S] and the padding mask [B, 1, 1, S] added
// to the scaled scores one after the other, the same two values in every layer, in either nesting
// (Note [Two additive terms] in attention_fusion.cc): each layer fuses with their sum as its mask,
// one sum for both layers after cse; and a second term that would grow the scores stays unfused.
TEST(TransformerFusion, TwoAdditiveTermsFuseAsOneMask) {
  const int64_t b = 2, s = 7, h = 3, d = 4;
  ir::Graph base;
  ir::Value* x = base.add_input("x", {DType::f32, {b, h, s, d}});
  ir::Value* mask = base.add_input("mask", {DType::f32, {b, 1, 1, s}});
  ir::Value* bias = weight(base, {1, h, s, s}, 81, 2.0);
  auto attention = [&](ir::Value* in, bool bias_first, uint64_t seed) {
    ir::Value* q = node(base, "mul", {in, weight(base, {d}, seed, 1.0)});
    ir::Value* kt = node(base, "permute", {node(base, "mul", {in, weight(base, {d}, seed + 1, 1.0)})},
                         {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
    ir::Value* sc = node(base, "div", {node(base, "matmul", {q, kt}), scalar(base, 2.0)});
    ir::Value* sum = bias_first ? node(base, "add", {node(base, "add", {sc, bias}), mask})
                                : node(base, "add", {mask, node(base, "add", {bias, sc})});
    return node(base, "matmul", {node(base, "softmax", {sum}, {{"axis", int64_t{-1}}}), in});
  };
  base.add_output(attention(attention(x, true, 82), false, 84));
  ir::verify(base);
  std::vector<Tensor> in{random_tensor({b, h, s, d}, DType::f32, 86), padding_mask(b, s)};
  Tensor want = ir::run(base, in)[0];
  ir::Graph g = base.clone();
  auto reps = compiler::run_passes(g, {"attention_fusion", "cse", "dce"}, true);
  EXPECT_EQ(count_op(g, "fused_attention"), 2) << reps[0].report << ir::print(g);
  EXPECT_EQ(count_op(g, "add"), 1) << ir::print(g);
  EXPECT_EQ(count_op(g, "softmax"), 0) << ir::print(g);
  EXPECT_TRUE(testing::all_close(ir::run(g, in)[0], want, testing::Tol{1e-5, 1e-5}));
  runtime::CompileOptions co;
  co.passes.opt_level = 2;
  runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(base, co).engine));
  EXPECT_TRUE(testing::all_close(ex.run(in)[0], want, testing::Tol{1e-5, 1e-5}));

  // A term [2, B, H, S, S] would broadcast the scores to rank 5: the pattern stays.
  ir::Graph big;
  ir::Value* y = big.add_input("y", {DType::f32, {b, h, s, d}});
  ir::Value* sc = node(big, "matmul", {y, node(big, "permute", {y}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}})});
  ir::Value* grown = node(big, "add", {node(big, "add", {sc, weight(big, {1, h, s, s}, 88, 1.0)}),
                                       weight(big, {2, 1, 1, 1, s}, 89, 1.0)});
  big.add_output(node(big, "matmul", {node(big, "softmax", {grown}, {{"axis", int64_t{-1}}}),
                                      node(big, "unsqueeze", {y}, {{"dims", std::vector<int64_t>{0}}})}));
  ir::verify(big);
  compiler::run_passes(big, {"attention_fusion"}, true);
  EXPECT_EQ(count_op(big, "fused_attention"), 0) << ir::print(big);
}

// SqueezeBERT's feed-forward block as PyTorch exports it: [B, C, S] activations, grouped Conv1d
// layers (unsqueeze -> conv2d -> squeeze in kiln), a GELU between them, a residual add of the block's
// input, itself a permuted view of a [B, S, C] layer norm: the GELU and the residual join the
// convolutions (Note [Epilogues past a reshape] in epilogue.cc), no squeeze / unsqueeze pair is
// left between them, and the -O2 graph and the compiled engine equal the unfused graph.
TEST(TransformerFusion, OneDimensionalConvolutionsTakeTheirEpilogues) {
  const int64_t b = 2, s = 9, c = 12, inner = 24, groups = 4;
  ir::Graph base;
  ir::Value* t = base.add_input("t", {DType::f32, {b, s, c}});
  ir::Value* x = node(base, "permute", {node(base, "layer_norm", {t, weight(base, {c}, 70, 1.5)}, {{"axis", -1}})},
                      {{"dims", std::vector<int64_t>{0, 2, 1}}});
  auto conv1d = [&](ir::Value* v, int64_t cin, int64_t cout, uint64_t seed) {
    ir::Value* u = node(base, "unsqueeze", {v}, {{"dims", std::vector<int64_t>{2}}});
    ir::Value* y = node(base, "conv2d", {u, weight(base, {cout, cin / groups, 1, 1}, seed, 0.5),
                                          weight(base, {cout}, seed + 1, 0.5)}, {{"groups", groups}});
    return node(base, "squeeze", {y}, {{"dims", std::vector<int64_t>{2}}});
  };
  ir::Value* h = node(base, "gelu", {conv1d(x, c, inner, 71)});
  ir::Value* y = node(base, "add", {x, conv1d(h, inner, c, 73)});
  base.add_output(node(base, "relu", {conv1d(y, c, c, 75)}));
  ir::verify(base);
  Tensor in = random_tensor({b, s, c}, DType::f32, 77, -2, 2);
  Tensor want = ir::run(base, {in})[0];
  ir::Graph g = base.clone();
  compiler::PassOptions opts;
  opts.opt_level = 2;
  opts.verify_each = true;
  compiler::optimize(g, opts);
  for (const char* gone : {"gelu", "add", "relu", "conv2d"}) EXPECT_EQ(count_op(g, gone), 0) << gone << ir::print(g);
  EXPECT_EQ(count_op(g, "fused_conv2d"), 3) << ir::print(g);
  EXPECT_EQ(count_op(g, "squeeze"), 1) << ir::print(g);  // the output's
  EXPECT_EQ(count_op(g, "unsqueeze"), 1) << ir::print(g);  // x's, read by a convolution and as the residual
  EXPECT_TRUE(testing::all_close(ir::run(g, {in})[0], want, testing::Tol{1e-5, 1e-5}));
  runtime::CompileOptions co;
  co.passes.opt_level = 2;
  runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(base, co).engine));
  EXPECT_TRUE(testing::all_close(ex.run({in})[0], want, testing::Tol{1e-5, 1e-5}));
}

// Note [Attention output layout] (attention_fusion.cc): the head-merge permute after attention
// folds into fused_attention's out_dims, BERT's [0, 2, 1, 3] and nn.MultiheadAttention's
// [2, 0, 1, 3] alike; a permute that moves Dv, or an attention output read twice, stays.
// T5's RMSNorm as PyTorch exports it (pow 2, mean, + eps, sqrt, 1 / that, * x, weight * that) and
// LLaMA's (rsqrt) around a residual MLP, [B, S, E] with odd sizes: layer_norm_fusion makes each one
// rms_norm (Note [RMS norms from their parts]), and the pass's graph, the -O2 pipeline's and the
// compiled engine's outputs equal the unfused graph's.
TEST(TransformerFusion, RmsNormsFuseAndKeepTheNumerics) {
  const int64_t b = 2, s = 7, e = 33;
  ir::Graph base;
  ir::Value* x = base.add_input("x", {DType::f32, {b, s, e}});
  Attrs last{{"axes", std::vector<int64_t>{-1}}, {"keepdim", true}};
  auto ms = [&](ir::Value* v, ir::Value* eps) {
    return node(base, "add", {node(base, "mean", {node(base, "pow", {v, scalar(base, 2)})}, last), eps});
  };
  ir::Value* inv = node(base, "div", {scalar(base, 1), node(base, "sqrt", {ms(x, scalar(base, 1e-6))})});
  ir::Value* t5 = node(base, "mul", {weight(base, {e}, 90, 1.5), node(base, "mul", {x, inv})});
  ir::Value* h = node(base, "add", {linear(base, t5, e, e, 91), x});
  ir::Value* llama = node(base, "mul", {node(base, "mul", {h, node(base, "rsqrt", {ms(h, scalar(base, 1e-5))})}),
                                       weight(base, {e}, 92, 1.5)});
  base.add_output(llama);
  ir::verify(base);
  Tensor in = random_tensor({b, s, e}, DType::f32, 93, -2, 2);
  Tensor want = ir::run(base, {in})[0];
  ir::Graph g = base.clone();
  auto reps = compiler::run_passes(g, {"layer_norm_fusion", "dce"}, true);
  EXPECT_TRUE(reps[0].changed) << reps[0].report;
  EXPECT_EQ(count_op(g, "rms_norm"), 2) << ir::print(g);
  for (const char* gone : {"pow", "mean", "sqrt", "rsqrt", "div"}) EXPECT_EQ(count_op(g, gone), 0) << gone;
  EXPECT_TRUE(testing::all_close(ir::run(g, {in})[0], want, testing::Tol{1e-5, 1e-5}));
  runtime::CompileOptions co;
  co.passes.opt_level = 2;
  runtime::CompileResult compiled = runtime::compile(base, co);
  int norms = 0;
  for (const runtime::EngineStep& st : compiled.engine.steps) norms += st.op->name() == "rms_norm";
  EXPECT_EQ(norms, 2);
  runtime::Engine engine = runtime::Engine::deserialize(compiled.engine.serialize());
  runtime::Executor ex(std::make_shared<runtime::Engine>(std::move(engine)));
  EXPECT_TRUE(testing::all_close(ex.run({in})[0], want, testing::Tol{1e-5, 1e-5}));
}

// LLaMA's rotary embedding of q and k as PyTorch exports it (rotate_half: slice, neg, concat; the
// heads permuted out of [B, S, H, D] first; cos and sin [1, 1, S, D] constants of RoPE angles), and
// GPT-J's (rotate_every_two: strided slices, neg, unsqueeze, concat, reshape back; each angle
// twice in a row): rotary_fusion makes each one rotary_embedding (Note [Rotary embeddings from
// their parts]), and the pass's graph and the compiled engine equal the unfused graph.
TEST(TransformerFusion, RotaryEmbeddingsFuseAndKeepTheNumerics) {
  const int64_t b = 2, s = 7, d = 10;
  for (bool pairs : {false, true}) {
    SCOPED_TRACE(pairs ? "GPT-J pairs" : "rotate_half");
    ir::Graph base;
    ir::Value* q = base.add_input("q", {DType::f32, {b, s, 3, d}});
    ir::Value* k = base.add_input("k", {DType::f32, {b, s, 1, d}});
    Tensor cos = empty({1, 1, s, d}, TensorOptions(DType::f32)), sin = empty({1, 1, s, d}, TensorOptions(DType::f32));
    for (int64_t p = 0; p < s; ++p)
      for (int64_t i = 0; i < d; ++i) {
        const int64_t pair = pairs ? i / 2 : i % (d / 2);
        const double angle = static_cast<double>(p) * std::pow(10000.0, -2.0 * static_cast<double>(pair) / d);
        cos.data<float>()[p * d + i] = static_cast<float>(std::cos(angle));
        sin.data<float>()[p * d + i] = static_cast<float>(std::sin(angle));
      }
    ir::Value* c = base.add_constant("cos", cos);
    ir::Value* sn = base.add_constant("sin", sin);
    auto part = [&](ir::Value* x, int64_t from, int64_t to, int64_t step) {
      return node(base, "slice", {x}, {{"starts", std::vector<int64_t>{from}}, {"ends", std::vector<int64_t>{to}},
                                       {"axes", std::vector<int64_t>{3}}, {"steps", std::vector<int64_t>{step}}});
    };
    auto turn = [&](ir::Value* x) {
      if (!pairs)
        return node(base, "concat", {node(base, "neg", {part(x, d / 2, d, 1)}), part(x, 0, d / 2, 1)},
                    {{"axis", int64_t{3}}});
      const Attrs last{{"dims", std::vector<int64_t>{-1}}};
      ir::Value* odd = node(base, "unsqueeze", {node(base, "neg", {part(x, 1, d, 2)})}, last);
      ir::Value* even = node(base, "unsqueeze", {part(x, 0, d, 2)}, last);
      ir::Value* st = node(base, "concat", {odd, even}, {{"axis", int64_t{-1}}});
      std::vector<int64_t> shape;
      for (const ir::Dim& dim : x->type().shape) shape.push_back(dim.size);
      return node(base, "reshape", {st}, {{"shape", shape}});
    };
    auto rope = [&](ir::Value* x) {
      x = node(base, "permute", {x}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}});
      return node(base, "add", {node(base, "mul", {x, c}), node(base, "mul", {turn(x), sn})});
    };
    base.add_output(rope(q));
    base.add_output(rope(k));
    ir::verify(base);
    std::vector<Tensor> in{random_tensor({b, s, 3, d}, DType::f32, 94), random_tensor({b, s, 1, d}, DType::f32, 95)};
    std::vector<Tensor> want = ir::run(base, in);
    ir::Graph g = base.clone();
    auto reps = compiler::run_passes(g, {"rotary_fusion", "dce"}, true);
    EXPECT_TRUE(reps[0].changed) << reps[0].report;
    EXPECT_EQ(count_op(g, "rotary_embedding"), 2) << ir::print(g);
    for (const char* gone : {"neg", "concat", "slice", "mul", "add", "unsqueeze"})
      EXPECT_EQ(count_op(g, gone), 0) << gone;
    runtime::CompileOptions co;
    co.passes.opt_level = 2;
    runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(base, co).engine));
    std::vector<Tensor> fused = ir::run(g, in), engine = ex.run(in);
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_TRUE(testing::all_close(fused[i], want[i], testing::Tol{1e-6, 1e-6})) << i;
      EXPECT_TRUE(testing::all_close(engine[i], want[i], testing::Tol{1e-6, 1e-6})) << i;
    }
  }
}

// Grouped-query attention as PyTorch exports repeat_kv (unsqueeze, expand, reshape of k and v)
// with a [B, 1, S, S] mask and the head merge after it: attention_fusion runs fused_attention on
// the expand's stride-0 views (Note [Grouped-query heads read in place]), no copy of k or v left;
// with a mask per head it keeps the plain form. Both equal the unfused graph, through the pass and
// an engine.
TEST(TransformerFusion, GroupedQueryHeadsAreReadInPlace) {
  const int64_t b = 2, s = 7, kv = 2, group = 3, h = kv * group, d = 8;
  for (bool per_head_mask : {false, true}) {
    SCOPED_TRACE(per_head_mask ? "mask per head" : "mask [B, 1, S, S]");
    ir::Graph base;
    ir::Value* q = base.add_input("q", {DType::f32, {b, s, h, d}});
    ir::Value* k = base.add_input("k", {DType::f32, {b, s, kv, d}});
    ir::Value* v = base.add_input("v", {DType::f32, {b, s, kv, d}});
    ir::Value* mask = base.add_input("mask", {DType::f32, {b, per_head_mask ? h : 1, s, s}});
    auto heads = [&](ir::Value* x) { return node(base, "permute", {x}, {{"dims", std::vector<int64_t>{0, 2, 1, 3}}}); };
    auto repeat = [&](ir::Value* x) {
      x = node(base, "unsqueeze", {heads(x)}, {{"dims", std::vector<int64_t>{2}}});
      x = node(base, "expand", {x}, {{"shape", std::vector<int64_t>{b, kv, group, s, d}}});
      return node(base, "reshape", {x}, {{"shape", std::vector<int64_t>{b, h, s, d}}});
    };
    ir::Value* kt = node(base, "permute", {repeat(k)}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
    ir::Value* scores = node(base, "mul", {node(base, "matmul", {heads(q), kt}), scalar(base, 0.35)});
    ir::Value* p = node(base, "softmax", {node(base, "add", {scores, mask})}, {{"axis", int64_t{-1}}});
    ir::Value* ctx = heads(node(base, "matmul", {p, repeat(v)}));
    base.add_output(node(base, "reshape", {ctx}, {{"shape", std::vector<int64_t>{b, s, h * d}}}));
    ir::verify(base);
    std::vector<Tensor> in{random_tensor({b, s, h, d}, DType::f32, 96), random_tensor({b, s, kv, d}, DType::f32, 97),
                           random_tensor({b, s, kv, d}, DType::f32, 98),
                           random_tensor({b, per_head_mask ? h : 1, s, s}, DType::f32, 99, -3, 0)};
    Tensor want = ir::run(base, in)[0];
    ir::Graph g = base.clone();
    auto reps = compiler::run_passes(g, {"attention_fusion", "dce"}, true);
    ASSERT_EQ(count_op(g, "fused_attention"), 1) << reps[0].report;
    const ir::Node* fa = nullptr;
    for (const ir::Node* nd : g.nodes())
      if (nd->op().name() == "fused_attention") fa = nd;
    for (size_t i : {1, 2})
      EXPECT_EQ(fa->inputs()[i]->producer()->op().name(), per_head_mask ? "reshape" : "expand") << i;
    EXPECT_EQ(reps[0].report.find("key heads read by groups of 3") != std::string::npos, !per_head_mask)
        << reps[0].report;
    EXPECT_TRUE(testing::all_close(ir::run(g, in)[0], want, kF32Tol));
    runtime::CompileOptions co;
    co.passes.opt_level = 2;
    runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(base, co).engine));
    EXPECT_TRUE(testing::all_close(ex.run(in)[0], want, kF32Tol));
  }
}

// Multi-query attention as timm's MobileNetV4 exports it: one key and value head, unsqueezed to
// [B, 1, S, D], against four query heads; the matmuls broadcast. attention_fusion reads k and v
// through an expand to q's heads (Note [One key head for all]), equal to the unfused graph through
// the pass and an engine of symbolic batch. A single query head against several key heads (q the
// one broadcast) stays unfused.
TEST(TransformerFusion, OneKeyHeadIsReadByEveryQueryHead) {
  const int64_t b = 2, sq = 9, sk = 5, h = 4, d = 8;
  ir::Graph base;
  ir::Value* q = base.add_input("q", {DType::f32, {ir::Dim::sym("batch"), h, sq, d}});
  ir::Value* k = base.add_input("k", {DType::f32, {ir::Dim::sym("batch"), sk, d}});
  ir::Value* v = base.add_input("v", {DType::f32, {ir::Dim::sym("batch"), sk, d}});
  ir::Value* k1 = node(base, "unsqueeze", {k}, {{"dims", std::vector<int64_t>{1}}});
  ir::Value* kt = node(base, "permute", {k1}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
  ir::Value* p = node(base, "softmax", {node(base, "matmul", {q, kt})}, {{"axis", int64_t{-1}}});
  base.add_output(node(base, "matmul", {p, node(base, "unsqueeze", {v}, {{"dims", std::vector<int64_t>{1}}})}));
  ir::verify(base);
  std::vector<Tensor> in{random_tensor({b, h, sq, d}, DType::f32, 101), random_tensor({b, sk, d}, DType::f32, 102),
                         random_tensor({b, sk, d}, DType::f32, 103)};
  Tensor want = ir::run(base, in)[0];
  ir::Graph g = base.clone();
  auto reps = compiler::run_passes(g, {"attention_fusion", "dce"}, true);
  ASSERT_EQ(count_op(g, "fused_attention"), 1) << reps[0].report;
  EXPECT_EQ(count_op(g, "matmul"), 0);
  EXPECT_EQ(count_op(g, "expand"), 2);
  EXPECT_NE(reps[0].report.find("k and v read by every query head"), std::string::npos) << reps[0].report;
  EXPECT_TRUE(testing::all_close(ir::run(g, in)[0], want, kF32Tol));
  runtime::CompileOptions co;
  co.passes.opt_level = 2;
  co.batch_max = 4;
  runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(base, co).engine));
  EXPECT_TRUE(testing::all_close(ex.run(in)[0], want, kF32Tol));

  ir::Graph one;
  ir::Value* q1 = one.add_input("q", {DType::f32, {b, 1, sq, d}});
  ir::Value* kk = one.add_input("k", {DType::f32, {b, h, sk, d}});
  ir::Value* vv = one.add_input("v", {DType::f32, {b, h, sk, d}});
  ir::Value* kkt = node(one, "permute", {kk}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
  ir::Value* pp = node(one, "softmax", {node(one, "matmul", {q1, kkt})}, {{"axis", int64_t{-1}}});
  one.add_output(node(one, "matmul", {pp, vv}));
  ir::verify(one);
  auto r1 = compiler::run_passes(one, {"attention_fusion"}, true);
  EXPECT_EQ(count_op(one, "fused_attention"), 0) << r1[0].report;
}

TEST(TransformerFusion, HeadMergePermuteFoldsIntoAttention) {
  const int64_t b = 2, s = 7, h = 3, d = 4;
  struct Case {
    std::vector<int64_t> perm;
    bool second_reader;
    bool folds;
  };
  for (const Case& c : {Case{{0, 2, 1, 3}, false, true}, Case{{2, 0, 1, 3}, false, true}, Case{{0, 1, 3, 2}, false, false},
                        Case{{0, 2, 1, 3}, true, false}}) {
    SCOPED_TRACE(shape_str(Shape(c.perm.begin(), c.perm.end())) + (c.second_reader ? " read twice" : ""));
    ir::Graph g;
    g.name = "heads";
    ir::Value* q = g.add_input("q", {DType::f32, {b, h, s, d}});
    ir::Value* k = g.add_input("k", {DType::f32, {b, h, s, d}});
    ir::Value* v = g.add_input("v", {DType::f32, {b, h, s, d}});
    ir::Value* mask = g.add_input("mask", {DType::f32, {b, 1, 1, s}});
    ir::Value* kt = node(g, "permute", {k}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
    ir::Value* sc = node(g, "mul", {node(g, "matmul", {q, kt}), scalar(g, 0.5)});
    ir::Value* p = node(g, "softmax", {node(g, "add", {sc, mask})}, {{"axis", int64_t{-1}}});
    ir::Value* o = node(g, "matmul", {p, v});
    g.add_output(node(g, "permute", {o}, {{"dims", c.perm}}));
    if (c.second_reader) g.add_output(node(g, "neg", {o}));
    ir::verify(g);
    std::vector<Tensor> in{random_tensor({b, h, s, d}, DType::f32, 1), random_tensor({b, h, s, d}, DType::f32, 2),
                           random_tensor({b, h, s, d}, DType::f32, 3), padding_mask(b, s)};
    std::vector<Tensor> want = ir::run(g, in);
    ir::Graph f = g.clone();
    auto reps = compiler::run_passes(f, {"attention_fusion", "dce"}, true);
    ASSERT_TRUE(reps[0].changed) << reps[0].report;
    EXPECT_EQ(count_op(f, "fused_attention"), 1) << ir::print(f);
    EXPECT_EQ(count_op(f, "permute"), c.folds ? 0 : 1) << ir::print(f);
    for (const ir::Node* n : f.nodes()) {
      if (n->op().name() != "fused_attention") continue;
      EXPECT_EQ(n->attrs().get_ints("out_dims"), c.folds ? c.perm : std::vector<int64_t>{}) << ir::print(f);
    }
    std::vector<Tensor> got = ir::run(f, in);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(testing::all_close(got[i], want[i], testing::Tol{1e-5, 1e-6}));
    // The engine runs the folded node (its reshape-free layout) to the same result.
    runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(g, {}).engine));
    std::vector<Tensor> eng = ex.run(in);
    for (size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(testing::all_close(eng[i], want[i], testing::Tol{1e-5, 1e-6}));
  }
}

// Note [Masked fill as an additive mask] (attention_fusion.cc): DistilBERT's
// scores.masked_fill(mask, finfo.min) exports as where(mask, fill, s); a mask of the keys kept
// as where(keep, s, fill). With fill <= -1e30 or -inf the attention fuses around an additive
// mask, q's division by a constant included in the scale; a fill of -10000 (a fully masked row
// would differ) stays unfused. The finfo.min case masks one row entirely: uniform both ways.
TEST(TransformerFusion, MaskedFillFusesAsAnAdditiveMask) {
  const int64_t b = 2, s = 7, h = 3, d = 4;
  const double lowest = std::numeric_limits<float>::lowest(), inf = std::numeric_limits<double>::infinity();
  struct Case {
    double fill;
    bool fill_first;
    bool fuses;
  };
  for (const Case& c : {Case{lowest, true, true}, Case{-inf, false, true}, Case{-1e4, true, false}}) {
    SCOPED_TRACE("fill " + std::to_string(c.fill) + (c.fill_first ? " where(mask, fill, s)" : " where(keep, s, fill)"));
    ir::Graph g;
    g.name = "masked";
    ir::Value* q = g.add_input("q", {DType::f32, {b, h, s, d}});
    ir::Value* k = g.add_input("k", {DType::f32, {b, h, s, d}});
    ir::Value* v = g.add_input("v", {DType::f32, {b, h, s, d}});
    ir::Value* cond = g.add_input("cond", {DType::boolean, {b, 1, 1, s}});
    ir::Value* kt = node(g, "permute", {k}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}});
    ir::Value* sc = node(g, "matmul", {node(g, "div", {q, scalar(g, 2.0)}), kt});
    ir::Value* fill = scalar(g, c.fill);
    ir::Value* filled = c.fill_first ? node(g, "where", {cond, fill, sc}) : node(g, "where", {cond, sc, fill});
    ir::Value* p = node(g, "softmax", {filled}, {{"axis", int64_t{-1}}});
    g.add_output(node(g, "matmul", {p, v}));
    ir::verify(g);
    // Keys 4.. masked (kept, for where(keep, s, fill): the complement); batch 1 of the finfo.min
    // case masks every key.
    Tensor masked = zeros({b, 1, 1, s}, TensorOptions(DType::boolean)).contiguous();
    masked.slice(3, 4, s).fill_(Scalar(true));
    if (c.fill == lowest) masked.slice(0, 1, 2).fill_(Scalar(true));
    Tensor cin = c.fill_first ? masked : logical_not(masked);
    std::vector<Tensor> in{random_tensor({b, h, s, d}, DType::f32, 1, -2, 2), random_tensor({b, h, s, d}, DType::f32, 2, -2, 2),
                           random_tensor({b, h, s, d}, DType::f32, 3), cin};
    std::vector<Tensor> want = ir::run(g, in);
    ir::Graph f = g.clone();
    auto reps = compiler::run_passes(f, {"attention_fusion", "dce"}, true);
    EXPECT_EQ(reps[0].changed, c.fuses) << reps[0].report;
    EXPECT_EQ(count_op(f, "fused_attention"), c.fuses ? 1 : 0) << ir::print(f);
    EXPECT_EQ(count_op(f, "softmax"), c.fuses ? 0 : 1) << ir::print(f);
    for (const ir::Node* n : f.nodes()) {
      if (n->op().name() == "fused_attention") {
        EXPECT_DOUBLE_EQ(n->attrs().get_float("scale"), 0.5);
      }
    }
    std::vector<Tensor> got = ir::run(f, in);
    EXPECT_TRUE(testing::all_close(got[0], want[0], testing::Tol{1e-5, 1e-6}));
    runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(g, {}).engine));
    EXPECT_TRUE(testing::all_close(ex.run(in)[0], want[0], testing::Tol{1e-5, 1e-6}));
  }
}

// PyTorch's scaled_dot_product_attention with a boolean mask, as HuggingFace encoders export it:
// q and k^T scaled by sqrt(scale), an additive where(keep, 0, -inf), the softmax guarded by
// where(isnan(p), 0, p). It fuses with zero_nan_rows; a batch entry with every key masked comes
// out zeros, as in the graph; a guard that fills NaN rows with anything but 0 stays unfused.
TEST(TransformerFusion, SdpaNanGuardFusesAsZeroNanRows) {
  const int64_t b = 3, s = 9, h = 2, d = 8;
  for (double guard_fill : {0.0, 0.5}) {
    SCOPED_TRACE("guard fill " + std::to_string(guard_fill));
    ir::Graph g;
    g.name = "sdpa";
    ir::Value* q = g.add_input("q", {DType::f32, {b, h, s, d}});
    ir::Value* k = g.add_input("k", {DType::f32, {b, h, s, d}});
    ir::Value* v = g.add_input("v", {DType::f32, {b, h, s, d}});
    ir::Value* keep = g.add_input("keep", {DType::boolean, {b, 1, 1, s}});
    const double r = std::sqrt(1.0 / std::sqrt(static_cast<double>(d)));
    ir::Value* kt = node(g, "mul", {node(g, "permute", {k}, {{"dims", std::vector<int64_t>{0, 1, 3, 2}}}), scalar(g, r)});
    ir::Value* sc = node(g, "matmul", {node(g, "mul", {q, scalar(g, r)}), kt});
    ir::Value* additive = node(g, "where", {keep, scalar(g, 0.0), scalar(g, -std::numeric_limits<double>::infinity())});
    ir::Value* p = node(g, "softmax", {node(g, "add", {sc, additive})}, {{"axis", int64_t{-1}}});
    ir::Value* guarded = node(g, "where", {node(g, "isnan", {p}), scalar(g, guard_fill), p});
    g.add_output(node(g, "matmul", {guarded, v}));
    ir::verify(g);
    // Keys 6.. padding in every entry; entry 2 entirely.
    Tensor kept = ones({b, 1, 1, s}, TensorOptions(DType::boolean)).contiguous();
    kept.slice(3, 6, s).fill_(Scalar(false));
    kept.slice(0, 2, 3).fill_(Scalar(false));
    std::vector<Tensor> in{random_tensor({b, h, s, d}, DType::f32, 1, -2, 2), random_tensor({b, h, s, d}, DType::f32, 2, -2, 2),
                           random_tensor({b, h, s, d}, DType::f32, 3), kept};
    std::vector<Tensor> want = ir::run(g, in);
    const bool fuses = guard_fill == 0.0;
    ir::Graph f = g.clone();
    auto reps = compiler::run_passes(f, {"attention_fusion", "dce"}, true);
    EXPECT_EQ(reps[0].changed, fuses) << reps[0].report;
    EXPECT_EQ(count_op(f, "fused_attention"), fuses ? 1 : 0) << ir::print(f);
    EXPECT_EQ(count_op(f, "isnan"), fuses ? 0 : 1) << ir::print(f);
    for (const ir::Node* n : f.nodes())
      if (n->op().name() == "fused_attention") {
        EXPECT_TRUE(n->attrs().get_bool("zero_nan_rows"));
        EXPECT_NEAR(n->attrs().get_float("scale"), 1.0 / std::sqrt(static_cast<double>(d)), 1e-7);
      }
    std::vector<Tensor> got = ir::run(f, in);
    EXPECT_TRUE(testing::all_close(got[0], want[0], testing::Tol{1e-5, 1e-6}));
    runtime::Executor ex(std::make_shared<runtime::Engine>(runtime::compile(g, {}).engine));
    Tensor eng = ex.run(in)[0];
    EXPECT_TRUE(testing::all_close(eng, want[0], testing::Tol{1e-5, 1e-6}));
    // Entry 2: every key masked, zeros (or the guard's fill times v's column sums: not NaN).
    Tensor last = eng.slice(0, 2, 3).contiguous();
    for (int64_t i = 0; i < last.numel(); ++i) {
      EXPECT_FALSE(std::isnan(last.data<float>()[i]));
      if (fuses) {
        EXPECT_EQ(last.data<float>()[i], 0.0f);
      }
    }
  }
}

// The fused layer_norm node the pass writes in text IR may omit its absent weight and bias; the
// kernels must not read past the inputs they were given (batch_norm likewise).
TEST(TransformerFusion, NormKernelsAcceptOmittedOptionalInputs) {
  ir::Graph g = ir::parse(R"(graph f(%x: f32[2, 3, 4]) {
  %m: f32[3] = constant [0.5, -0.5, 1]
  %v: f32[3] = constant [1, 2, 0.5]
  %y: f32[2, 3, 4] = layer_norm(%x) {eps=1e-5}
  %z: f32[2, 3, 4] = batch_norm(%x, %m, %v)
  return %y, %z
})");
  ir::verify(g);
  Tensor x = random_tensor({2, 3, 4}, DType::f32, 9);
  auto got = ir::run(g, {x});
  EXPECT_TRUE(testing::all_close(got[0], layer_norm(x.to(DType::f64), -1, Tensor(), Tensor(), 1e-5)));
  Tensor m = from_vector<double>({0.5, -0.5, 1}, Shape{3}), v = from_vector<double>({1, 2, 0.5}, Shape{3});
  EXPECT_TRUE(testing::all_close(got[1], batch_norm(x.to(DType::f64), m, v, Tensor(), Tensor(), 1e-5)));
}

}  // namespace
}  // namespace kiln
