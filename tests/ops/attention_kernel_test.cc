// fused_attention's f32 row kernels (kernels/cpu/attention_f32.h; the op in
// src/ops/defs/fused/attention.cc) on every ISA this machine has, against a float64 reference from
// kiln's unfused ops: head sizes around the 16-float vector and the 6 x 64 register blocks (D and
// Dv of 1, 15, 17, 64, 65, 80), odd and long sequences (a row past the 1024-column sum flush), one
// and three heads, every k layout the packer handles (BERT's permuted [B, S, H, D] split with k^T
// = permute(0, 2, 3, 1), plain [B, H, Sk, D], a contiguous k^T, a strided one), masks broadcast,
// full or transposed (column stride != 1) with -inf / -1e9 / f32 lowest in them, scores large
// enough for e^x to underflow, and the same bits on one and two threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/isa.h"
#include "kiln/core/thread_pool.h"
#include "kiln/kiln.h"
#include "kiln/ops/dispatch.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;

// Scores carry ~D ulps of |q||k|; the output is a convex combination of v's rows.
constexpr testing::Tol kTol{1e-4, 2e-5};

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool kt) {
  return dispatch1(op("fused_attention"), {q, k, v, mask}, {{"scale", scale}, {"k_transposed", kt}});
}

Tensor reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, double scale, bool kt) {
  Tensor k64 = k.to(DType::f64);
  Tensor s = matmul(q.to(DType::f64), kt ? k64 : transpose(k64, -2, -1)) * Scalar(scale);
  if (mask.defined()) s = s + mask.to(DType::f64);
  return matmul(softmax(s, -1), v.to(DType::f64));
}

// -inf, -1e9 and f32's lowest sprinkled over a random mask; column 0 stays finite in every row.
Tensor make_mask(const Shape& shape, uint64_t seed) {
  Tensor m = random_tensor(shape, DType::f64, seed, -2, 2).contiguous();
  double* p = m.data<double>();
  const int64_t cols = shape.back();
  for (int64_t i = 0; i < m.numel(); ++i) {
    if (i % cols == 0) continue;
    const int64_t r = (i * 7919 + static_cast<int64_t>(seed)) % 13;
    if (r == 0) p[i] = -std::numeric_limits<double>::infinity();
    if (r == 1) p[i] = -1e9;
    if (r == 2) p[i] = static_cast<double>(std::numeric_limits<float>::lowest());
  }
  return m.to(DType::f32);
}

enum class KLayout { bert_split, plain, transposed_contiguous, strided, heads_transposed };

struct Case {
  int64_t b, h, sq, sk, d, dv;
  KLayout layout;
};

// q [B, H, Sq, D], k as `layout` says, v [B, H, Sk, Dv] (from a [B, Sk, H, Dv] permute for the
// BERT split), with k_transposed set to match.
struct Inputs {
  Tensor q, k, v;
  bool kt = false;
};

Inputs make_inputs(const Case& c, uint64_t seed, double lo, double hi) {
  Inputs in;
  switch (c.layout) {
    case KLayout::bert_split:
      in.q = random_tensor({c.b, c.sq, c.h, c.d}, DType::f32, seed, lo, hi).permute({0, 2, 1, 3});
      in.k = random_tensor({c.b, c.sk, c.h, c.d}, DType::f32, seed + 1, lo, hi).permute({0, 2, 3, 1});
      in.v = random_tensor({c.b, c.sk, c.h, c.dv}, DType::f32, seed + 2, -1, 1).permute({0, 2, 1, 3});
      in.kt = true;
      break;
    case KLayout::plain:
      in.q = random_tensor({c.b, c.h, c.sq, c.d}, DType::f32, seed, lo, hi);
      in.k = random_tensor({c.b, c.h, c.sk, c.d}, DType::f32, seed + 1, lo, hi);
      in.v = random_tensor({c.b, c.h, c.sk, c.dv}, DType::f32, seed + 2, -1, 1);
      break;
    case KLayout::transposed_contiguous:
      in.q = random_tensor({c.b, c.h, c.sq, c.d}, DType::f32, seed, lo, hi);
      in.k = random_tensor({c.b, c.h, c.d, c.sk}, DType::f32, seed + 1, lo, hi);
      in.v = random_tensor({c.b, c.h, c.sk, c.dv}, DType::f32, seed + 2, -1, 1);
      in.kt = true;
      break;
    case KLayout::heads_transposed:  // SqueezeBERT's heads: q, k and v from [B, H, D, S] (Note [Transposed
                                     // queries and values] in attention.cc)
      in.q = random_tensor({c.b, c.h, c.d, c.sq}, DType::f32, seed, lo, hi).transpose(-2, -1);
      in.k = random_tensor({c.b, c.h, c.d, c.sk}, DType::f32, seed + 1, lo, hi);
      in.v = random_tensor({c.b, c.h, c.dv, c.sk}, DType::f32, seed + 2, -1, 1).transpose(-2, -1);
      in.kt = true;
      break;
    case KLayout::strided:
      in.q = random_tensor({c.b, c.h, c.sq, c.d}, DType::f32, seed, lo, hi);
      in.k = testing::noncontiguous(random_tensor({c.b, c.h, c.sk, c.d}, DType::f32, seed + 1, lo, hi));
      in.v = random_tensor({c.b, c.h, c.sk, c.dv}, DType::f32, seed + 2, -1, 1);
      break;
  }
  return in;
}

std::string describe(const Case& c) {
  return "B=" + std::to_string(c.b) + " H=" + std::to_string(c.h) + " Sq=" + std::to_string(c.sq) +
         " Sk=" + std::to_string(c.sk) + " D=" + std::to_string(c.d) + " Dv=" + std::to_string(c.dv) +
         " layout=" + std::to_string(static_cast<int>(c.layout));
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {1, 12, 128, 128, 64, 64, KLayout::bert_split},  // BERT-base
      {2, 3, 33, 33, 64, 64, KLayout::bert_split},
      {1, 1, 7, 7, 17, 15, KLayout::bert_split},
      {2, 3, 7, 130, 65, 80, KLayout::bert_split},
      {1, 3, 33, 7, 1, 1, KLayout::plain},
      {2, 1, 130, 33, 15, 17, KLayout::plain},
      {1, 3, 1, 128, 64, 65, KLayout::transposed_contiguous},
      {2, 3, 13, 33, 80, 64, KLayout::transposed_contiguous},
      {1, 3, 33, 17, 17, 33, KLayout::strided},
      {2, 3, 33, 33, 64, 64, KLayout::heads_transposed},
      {1, 2, 7, 130, 17, 1, KLayout::heads_transposed},
      {1, 1, 3, 1100, 16, 16, KLayout::plain},  // rows past the 1024-column sum flush
  };
  return all;
}

TEST(AttentionKernel, MatchesFloat64OnEveryIsaLayoutAndMask) {
  uint64_t seed = 1;
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    for (const Case& c : cases()) {
      const double scale = 1.0 / std::sqrt(static_cast<double>(c.d));
      Inputs in = make_inputs(c, 1000 * ++seed, -1, 1);
      const std::vector<Shape> mask_shapes = {{}, {c.sk}, {c.b, 1, 1, c.sk}, {c.b, c.h, c.sq, c.sk}};
      for (const Shape& ms : mask_shapes) {
        SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " " + describe(c) + " mask=" + shape_str(ms));
        Tensor mask = ms.empty() ? Tensor() : make_mask(ms, seed + ms.size());
        Tensor got = fused_attention(in.q, in.k, in.v, mask, scale, in.kt);
        EXPECT_EQ(got.shape(), (Shape{c.b, c.h, c.sq, c.dv}));
        EXPECT_TRUE(testing::all_close(got, reference(in.q, in.k, in.v, mask, scale, in.kt), kTol));
      }
      // A mask whose columns are not adjacent: [Sq, Sk] stored column-major.
      SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " " + describe(c) + " transposed mask");
      Tensor mt = make_mask({c.sq, c.sk}, seed + 7).t().contiguous().t();
      EXPECT_TRUE(testing::all_close(fused_attention(in.q, in.k, in.v, mt, scale, in.kt),
                                     reference(in.q, in.k, in.v, mt, scale, in.kt), kTol));
    }
  }
}

// Scores of +-hundreds: most e^(s - max) underflow (the AVX-512 kernel returns 0 below e^-87, Note
// [No denormal exponentials]; the reference rounds to denormals or 0), the row max dominates.
TEST(AttentionKernel, LargeScoresUnderflowLikeTheReference) {
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    SCOPED_TRACE(kernels::cpu::isa_name(isa));
    const Case c{1, 2, 33, 70, 64, 64, KLayout::bert_split};
    Inputs in = make_inputs(c, 77, -3, 3);
    Tensor got = fused_attention(in.q, in.k, in.v, Tensor(), 1.0, in.kt);
    EXPECT_TRUE(testing::all_close(got, reference(in.q, in.k, in.v, Tensor(), 1.0, in.kt), kTol));
  }
}

// One (batch, head) entry: the rows are cut into blocks across threads; no bit may depend on it.
TEST(AttentionKernel, SameBitsOnOneAndTwoThreads) {
  for (const Case& c : {Case{1, 1, 100, 45, 64, 64, KLayout::bert_split}, Case{2, 3, 128, 128, 64, 64, KLayout::plain}}) {
    SCOPED_TRACE(describe(c));
    Inputs in = make_inputs(c, 91, -1, 1);
    Tensor mask = make_mask({c.b, 1, 1, c.sk}, 93);
    set_num_threads(1);
    Tensor one = fused_attention(in.q, in.k, in.v, mask, 0.125, in.kt);
    set_num_threads(2);
    Tensor two = fused_attention(in.q, in.k, in.v, mask, 0.125, in.kt);
    set_num_threads(available_cores());
    EXPECT_TRUE(testing::all_close(two, one, testing::Tol{0, 0}));
    EXPECT_TRUE(testing::all_close(one, reference(in.q, in.k, in.v, mask, 0.125, in.kt), kTol));
  }
}

// NaN in a score row poisons that row only; a row masked entirely by -inf is NaN (0/0) as in the
// unfused softmax; +inf in a row's scores (an inf mask) makes it NaN too.
TEST(AttentionKernel, NonFiniteRowsFollowTheUnfusedGraph) {
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    SCOPED_TRACE(kernels::cpu::isa_name(isa));
    const int64_t sq = 4, sk = 37;
    Tensor q = random_tensor({1, 1, sq, 64}, DType::f32, 1, -1, 1);
    Tensor k = random_tensor({1, 1, sk, 64}, DType::f32, 2, -1, 1);
    Tensor v = random_tensor({1, 1, sk, 20}, DType::f32, 3, -1, 1);
    Tensor mask = zeros({sq, sk}, TensorOptions(DType::f32)).contiguous();
    float* m = mask.data<float>();
    const float inf = std::numeric_limits<float>::infinity();
    for (int j = 0; j < sk; ++j) m[j] = -inf;                  // row 0: all -inf
    m[sk + 20] = std::numeric_limits<float>::quiet_NaN();      // row 1: one NaN
    m[2 * sk + 36] = inf;                                      // row 2: one +inf
    Tensor got = fused_attention(q, k, v, mask, 0.5, false).contiguous();
    Tensor unfused = matmul(softmax(matmul(q, transpose(k, -2, -1)) * Scalar(0.5) + mask, -1), v);
    EXPECT_TRUE(testing::all_close(got, unfused, kTol));  // NaNs must match
    const float* g = got.data<float>();
    for (int64_t r = 0; r < 3; ++r)
      for (int64_t c = 0; c < 20; ++c) EXPECT_TRUE(std::isnan(g[r * 20 + c])) << "row " << r << " col " << c;
    for (int64_t c = 0; c < 20; ++c) EXPECT_FALSE(std::isnan(g[3 * 20 + c])) << "row 3 col " << c;
  }
}

// out_dims: the result written straight into a permuted layout (BERT's [B, Sq, H, Dv],
// nn.MultiheadAttention's [Sq, B, H, Dv], rank 3's [Sq, H, Dv]) equals the permuted result, on
// every ISA and in f64; permutations that move Dv or are not permutations are errors.
TEST(AttentionKernel, OutDimsWritesThePermutedLayout) {
  for (kernels::cpu::Isa isa : kernels::cpu::supported_isas()) {
    kernels::cpu::IsaOverride o(isa);
    for (DType dt : {DType::f32, DType::f64}) {
      for (const std::vector<int64_t>& od : std::vector<std::vector<int64_t>>{{0, 2, 1, 3}, {2, 0, 1, 3}, {1, 2, 0, 3}}) {
        SCOPED_TRACE(std::string(kernels::cpu::isa_name(isa)) + " " + std::string(dtype_name(dt)) + " out_dims " +
                     shape_str(Shape(od.begin(), od.end())));
        const Case c{2, 3, 33, 20, 64, 24, KLayout::bert_split};
        Inputs in = make_inputs(c, 501, -1, 1);
        Tensor q = in.q.to(dt), k = in.k.to(dt), v = in.v.to(dt);
        Tensor mask = make_mask({c.b, 1, 1, c.sk}, 503).to(dt);
        Tensor got = dispatch1(op("fused_attention"), {q, k, v, mask},
                               {{"scale", 0.125}, {"k_transposed", in.kt}, {"out_dims", od}});
        Tensor want = reference(q, k, v, mask, 0.125, in.kt).permute(od);
        EXPECT_EQ(got.shape(), want.shape());
        EXPECT_TRUE(got.is_contiguous());
        EXPECT_TRUE(testing::all_close(got, want, dt == DType::f32 ? kTol : testing::Tol{1e-10, 1e-12}));
      }
      // Rank 3: [H, Sq, D] heads without a batch dim, written as [Sq, H, Dv].
      Tensor q3 = random_tensor({3, 7, 16}, dt, 511, -1, 1), k3 = random_tensor({3, 9, 16}, dt, 513, -1, 1);
      Tensor v3 = random_tensor({3, 9, 5}, dt, 517, -1, 1);
      Tensor got3 = dispatch1(op("fused_attention"), {q3, k3, v3, Tensor()},
                              {{"scale", 0.25}, {"out_dims", std::vector<int64_t>{1, 0, 2}}});
      EXPECT_TRUE(testing::all_close(got3, reference(q3, k3, v3, Tensor(), 0.25, false).permute({1, 0, 2}),
                                     dt == DType::f32 ? kTol : testing::Tol{1e-10, 1e-12}));
    }
  }
  Tensor q = random_tensor({1, 2, 3, 4}, DType::f32, 1), kk = random_tensor({1, 2, 5, 4}, DType::f32, 2);
  Tensor v = random_tensor({1, 2, 5, 4}, DType::f32, 3);
  auto call = [&](std::vector<int64_t> od) {
    return dispatch1(op("fused_attention"), {q, kk, v, Tensor()}, {{"out_dims", std::move(od)}});
  };
  EXPECT_KILN_ERROR(call({0, 1, 3, 2}), "fused_attention", "out_dims [0, 1, 3, 2]", "last (Dv) dim last");
  EXPECT_KILN_ERROR(call({0, 2, 1}), "out_dims [0, 2, 1]", "all 4 dims");
  EXPECT_KILN_ERROR(call({0, 0, 1, 3}), "out_dims [0, 0, 1, 3]", "permutation of 0..3");
}

}  // namespace
}  // namespace kiln
