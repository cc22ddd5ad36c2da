// Packed f32 GEMM kernels (kernels/cpu/gemm.h) under every ISA this machine has, against a float64
// triple loop: edge tiles, transposes and strides, alpha/beta, epilogues, pre-packed B, batches,
// skinny shapes and threads. Also the ISA selection itself.
#include <gtest/gtest.h>

#include <cmath>
#include <optional>
#include <random>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/prefetch.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"
#include "support/testing.h"

namespace kiln::kernels::cpu {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// A dense matrix stored with arbitrary strides inside a larger buffer.
struct Mat {
  int64_t rows, cols, rs, cs;
  std::vector<float> buf;
  float at(int64_t i, int64_t j) const { return buf[static_cast<size_t>(i * rs + j * cs)]; }
};

// layout: 0 row-major, 1 column-major (a transpose), 2 row-major with padded rows, 3 both strides > 1.
Mat make_mat(int64_t rows, int64_t cols, int layout, uint32_t seed) {
  Mat m{rows, cols, 0, 0, {}};
  switch (layout) {
    case 0: m.rs = cols; m.cs = 1; break;
    case 1: m.rs = 1; m.cs = rows; break;
    case 2: m.rs = cols + 5; m.cs = 1; break;
    default: m.rs = 2 * cols + 3; m.cs = 2; break;
  }
  m.buf = random_vec(static_cast<size_t>((rows - 1) * m.rs + (cols - 1) * m.cs + 1), seed);
  return m;
}

double act_ref(GemmActivation a, double y) {
  switch (a) {
    case GemmActivation::none: return y;
    case GemmActivation::relu: return y > 0 ? y : 0;
    case GemmActivation::gelu: return 0.5 * y * (1 + std::erf(y / std::sqrt(2.0)));
    case GemmActivation::gelu_tanh: return 0.5 * y * (1 + std::tanh(std::sqrt(2 / M_PI) * (y + 0.044715 * y * y * y)));
    case GemmActivation::sigmoid: return 1 / (1 + std::exp(-y));
    case GemmActivation::tanh: return std::tanh(y);
    case GemmActivation::silu: return y / (1 + std::exp(-y));
    case GemmActivation::relu6: return std::min(std::max(y, 0.0), 6.0);
    case GemmActivation::hardswish: return y * std::min(std::max(y + 3, 0.0), 6.0) / 6;
  }
  return y;
}

// float64 reference of gemm_f32 with its epilogue; c0 is C before the call (ldc = n).
std::vector<double> reference(const Mat& a, const Mat& b, float alpha, float beta, const std::vector<float>& c0,
                              const GemmEpilogue& ep) {
  const int64_t m = a.rows, k = a.cols, n = b.cols;
  std::vector<double> out(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += static_cast<double>(a.at(i, p)) * b.at(p, j);
      double y = alpha * s + (beta == 0.0f ? 0.0 : beta * static_cast<double>(c0[static_cast<size_t>(i * n + j)]));
      if (ep.bias_kind == GemmBias::per_row) y += ep.bias[i];
      if (ep.bias_kind == GemmBias::per_col) y += ep.bias[j];
      const double r = ep.residual ? ep.residual[i * ep.ldr + j] : 0.0;
      if (ep.residual_before_activation) y += r;
      y = act_ref(ep.activation, y);
      if (!ep.residual_before_activation) y += r;
      out[static_cast<size_t>(i * n + j)] = y;
    }
  return out;
}

// Tolerance for an f32 dot product of length k of values in [-1, 1].
::testing::AssertionResult close(const std::vector<float>& got, const std::vector<double>& want, int64_t k) {
  const double tol = 1e-5 * (1.0 + static_cast<double>(k)) + 1e-5;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(got[i] - want[i]) <= tol * (1.0 + std::abs(want[i]))))
      return ::testing::AssertionFailure() << "element " << i << ": got " << got[i] << ", want " << want[i];
  return ::testing::AssertionSuccess();
}

// A per-column bias then `act`: the epilogue the tests with a pre-packed or in-place operand use.
GemmEpilogue col_bias(const std::vector<float>& bias, GemmActivation act) {
  GemmEpilogue ep;
  ep.bias_kind = GemmBias::per_col;
  ep.bias = bias.data();
  ep.activation = act;
  return ep;
}

class GemmIsaTest : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) GTEST_SKIP() << isa_name(GetParam()) << " not supported on this machine";
    override_.emplace(GetParam());
  }
  std::optional<IsaOverride> override_;
};

void check_gemm(int64_t m, int64_t n, int64_t k, int la, int lb, float alpha, float beta, const GemmEpilogue& ep,
                uint32_t seed) {
  Mat a = make_mat(m, k, la, seed), b = make_mat(k, n, lb, seed + 1);
  std::vector<float> c = random_vec(static_cast<size_t>(m * n), seed + 2);
  std::vector<double> want = reference(a, b, alpha, beta, c, ep);
  gemm_f32(m, n, k, alpha, a.buf.data(), a.rs, a.cs, b.buf.data(), b.rs, b.cs, beta, c.data(), n, ep);
  EXPECT_TRUE(close(c, want, k)) << "m=" << m << " n=" << n << " k=" << k << " layouts " << la << "," << lb
                                 << " alpha=" << alpha << " beta=" << beta;
}

TEST_P(GemmIsaTest, EdgeTilesAllSizes) {
  const std::vector<int64_t> sizes = {1, 7, 33, 70};
  uint32_t seed = 1;
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes) check_gemm(m, n, k, 0, 0, 1.0f, 0.0f, {}, seed++);
}

TEST_P(GemmIsaTest, LargeAcrossCacheBlocks) {
  // k > kc, m > mc and n spanning several panels, with ragged edges everywhere; threaded.
  check_gemm(1003, 77, 600, 0, 0, 1.0f, 0.0f, {}, 11);
  check_gemm(37, 1001, 520, 1, 0, 0.5f, 1.0f, {}, 12);
  // Past every AVX-512 block (mc 144, kc 768 in two balanced slices of 400, nc 2048).
  check_gemm(150, 2050, 800, 0, 0, 1.0f, 0.5f, {}, 13);
}

TEST_P(GemmIsaTest, TransposesStridesAlphaBeta) {
  uint32_t seed = 100;
  for (int la = 0; la < 4; ++la)
    for (int lb = 0; lb < 4; ++lb) {
      check_gemm(45, 38, 29, la, lb, 1.0f, 0.0f, {}, seed++);
      check_gemm(9, 70, 300, la, lb, -0.75f, 0.5f, {}, seed++);  // skinny (B read in place when it can be)
    }
}

TEST_P(GemmIsaTest, SkinnyShapes) {
  check_gemm(1, 517, 300, 0, 0, 1.0f, 0.0f, {}, 21);   // GEMV
  check_gemm(1, 1001, 300, 0, 1, 1.0f, 0.0f, {}, 25);  // GEMV over a B too big for one thread: split
  check_gemm(8, 300, 1000, 0, 0, 1.0f, 0.0f, {}, 22);
  check_gemm(16, 33, 7, 0, 1, 1.0f, 1.0f, {}, 23);
  check_gemm(300, 1, 64, 0, 0, 1.0f, 0.0f, {}, 24);    // one column
}

// One to four rows of A are read in place where the ISA has a rows kernel (Note [Few rows read in
// place] in gemm_packed.cc): depths that leave each k-unroll's remainder, several K slices, padded
// and transposed A (the latter packs as before), B read in place, packed per call and pre-packed,
// with alpha, beta and an epilogue, on two threads.
TEST_P(GemmIsaTest, FewRowsReadInPlace) {
  const int saved = get_num_threads();
  set_num_threads(2);
  uint32_t seed = 300;
  for (int64_t m : {1, 2, 3, 4, 5})
    for (int64_t k : {1, 3, 5, 1601})
      for (int64_t n : {1, 33, 1001})
        for (int la : {0, 1, 2}) {
          Mat a = make_mat(m, k, la, seed++), b = make_mat(k, n, 0, seed++);
          std::vector<float> c = random_vec(static_cast<size_t>(m * n), seed++), bias = random_vec(n, seed++);
          const GemmEpilogue ep = col_bias(bias, GemmActivation::relu);
          std::vector<double> want = reference(a, b, 0.5f, 1.0f, c, ep);
          std::vector<float> c_packed = c, c_strided = c;
          gemm_f32(m, n, k, 0.5f, a.buf.data(), a.rs, a.cs, b.buf.data(), b.rs, b.cs, 1.0f, c.data(), n, ep);
          EXPECT_TRUE(close(c, want, k)) << "B in place: m=" << m << " n=" << n << " k=" << k << " layout " << la;
          Mat bt = make_mat(k, n, 1, 0);  // the same B transposed in memory: packed per call
          for (int64_t p = 0; p < k; ++p)
            for (int64_t j = 0; j < n; ++j) bt.buf[static_cast<size_t>(p * bt.rs + j * bt.cs)] = b.at(p, j);
          gemm_f32(m, n, k, 0.5f, a.buf.data(), a.rs, a.cs, bt.buf.data(), bt.rs, bt.cs, 1.0f, c_strided.data(), n,
                   ep);
          EXPECT_TRUE(close(c_strided, want, k)) << "B packed: m=" << m << " n=" << n << " k=" << k;
          PackedGemmB packed = pack_gemm_b_f32(k, n, b.buf.data(), b.rs, b.cs);
          gemm_f32_prepacked(m, 0.5f, a.buf.data(), a.rs, a.cs, packed, 1.0f, c_packed.data(), n, ep);
          EXPECT_TRUE(close(c_packed, want, k)) << "B pre-packed: m=" << m << " n=" << n << " k=" << k;
        }
  set_num_threads(saved);
}

TEST_P(GemmIsaTest, BetaZeroIgnoresNaNInC) {
  Mat a = make_mat(7, 5, 0, 1), b = make_mat(5, 33, 0, 2);
  std::vector<float> c(7 * 33, std::nanf(""));
  gemm_f32(7, 33, 5, 1.0f, a.buf.data(), a.rs, a.cs, b.buf.data(), b.rs, b.cs, 0.0f, c.data(), 33, {});
  for (float v : c) ASSERT_FALSE(std::isnan(v));
}

TEST_P(GemmIsaTest, ZeroDepthScalesC) {
  std::vector<float> c = random_vec(6 * 9, 3), want = c;
  float dummy = 1.0f;
  gemm_f32(6, 9, 0, 1.0f, &dummy, 0, 1, &dummy, 9, 1, 2.0f, c.data(), 9, {});
  for (size_t i = 0; i < c.size(); ++i) EXPECT_FLOAT_EQ(c[i], 2.0f * want[i]);
}

TEST_P(GemmIsaTest, Epilogues) {
  const int64_t m = 29, n = 45, k = 300;
  std::vector<float> row_bias = random_vec(m, 5), col_bias = random_vec(n, 6), res = random_vec(m * (n + 3), 7);
  const GemmActivation acts[] = {GemmActivation::none, GemmActivation::relu,    GemmActivation::gelu,
                                 GemmActivation::gelu_tanh, GemmActivation::sigmoid, GemmActivation::tanh,
                                 GemmActivation::silu, GemmActivation::relu6, GemmActivation::hardswish};
  uint32_t seed = 200;
  for (GemmActivation act : acts)
    for (int variant = 0; variant < 4; ++variant) {
      GemmEpilogue ep;
      ep.activation = act;
      if (variant == 1 || variant == 3) ep.bias_kind = GemmBias::per_row, ep.bias = row_bias.data();
      if (variant == 2) ep.bias_kind = GemmBias::per_col, ep.bias = col_bias.data();
      if (variant >= 2) ep.residual = res.data(), ep.ldr = n + 3, ep.residual_before_activation = variant == 3;
      check_gemm(m, n, k, 0, 1, 0.5f, variant == 1 ? 1.0f : 0.0f, ep, seed++);
      check_gemm(3, n, k, 0, 0, 1.0f, 0.0f, ep, seed++);  // skinny path applies it too
    }
}

// Pre-packed B over two k-slices and two column blocks (nc = 2048 on every ISA), on two threads:
// the tiles fetch the next panel ahead from the next slice and the next block as well
// (Note [The next B panel] in gemm_packed.cc), which must leave the products as they were.
TEST_P(GemmIsaTest, PrepackedAcrossSlicesAndColumnBlocks) {
  const int saved = get_num_threads();
  set_num_threads(2);
  const int64_t m = 13, n = 2100, k = 800;
  Mat a = make_mat(m, k, 0, 41), b = make_mat(k, n, 0, 42);
  PackedGemmB packed = pack_gemm_b_f32(k, n, b.buf.data(), b.rs, b.cs);
  std::vector<float> c = random_vec(static_cast<size_t>(m * n), 43), bias = random_vec(n, 44);
  const GemmEpilogue ep = col_bias(bias, GemmActivation::gelu);
  std::vector<double> want = reference(a, b, 1.0f, 0.0f, c, ep);
  gemm_f32_prepacked(m, 1.0f, a.buf.data(), a.rs, a.cs, packed, 0.0f, c.data(), n, ep);
  EXPECT_TRUE(close(c, want, k));
  set_num_threads(saved);
}

TEST_P(GemmIsaTest, PrepackedMatchesAndIsReused) {
  const int64_t n = 77;
  // k = 1601 > kc on every ISA: three balanced slices (536, 536, 529) with AVX-512's kc = 768.
  for (const int64_t k : {int64_t{531}, int64_t{1601}}) {
    for (int lb : {0, 1, 3}) {
      Mat b = make_mat(k, n, lb, 31);
      PackedGemmB packed = pack_gemm_b_f32(k, n, b.buf.data(), b.rs, b.cs);
      EXPECT_EQ(packed.k(), k);
      EXPECT_EQ(packed.n(), n);
      for (int64_t m : {1, 6, 50, 301}) {
        Mat a = make_mat(m, k, 0, 32 + static_cast<uint32_t>(m));
        std::vector<float> c = random_vec(static_cast<size_t>(m * n), 33);
        std::vector<float> bias = random_vec(n, 34);
        const GemmEpilogue ep = col_bias(bias, GemmActivation::relu);
        std::vector<double> want = reference(a, b, 1.0f, 0.5f, c, ep);
        gemm_f32_prepacked(m, 1.0f, a.buf.data(), a.rs, a.cs, packed, 0.5f, c.data(), n, ep);
        EXPECT_TRUE(close(c, want, k)) << "m=" << m << " k=" << k << " layout " << lb;
      }
    }
  }
}

TEST_P(GemmIsaTest, OperandsPackedInCallerMemory) {
  // A packed once and multiplied by several B (a convolution's filters over a batch), and B packed
  // once for several A; rows not a multiple of mr, skinny m (B read in place), k over one slice.
  uint32_t seed = 60;
  for (int64_t m : {1, 13, 150})
    for (int64_t k : {37, 1601}) {
      const int64_t n = 70;
      Mat a = make_mat(m, k, 0, seed++);
      std::vector<float> pa(packed_a_f32_floats(m, k));
      pack_a_f32(m, k, a.buf.data(), a.rs, a.cs, pa.data());
      for (int lb : {0, 1}) {
        Mat b = make_mat(k, n, lb, seed++);
        std::vector<float> c = random_vec(static_cast<size_t>(m * n), seed++), bias = random_vec(n, seed++);
        const GemmEpilogue ep = col_bias(bias, GemmActivation::gelu);
        std::vector<double> want = reference(a, b, 0.5f, 1.0f, c, ep);
        std::vector<float> c2 = c;
        gemm_f32_packed_a(m, n, k, 0.5f, pa.data(), b.buf.data(), b.rs, b.cs, 1.0f, c.data(), n, ep);
        EXPECT_TRUE(close(c, want, k)) << "packed A: m=" << m << " k=" << k << " layout " << lb;
        std::vector<float> pb(packed_b_f32_floats(k, n));
        pack_b_f32(k, n, b.buf.data(), b.rs, b.cs, pb.data());
        gemm_f32_packed_b(m, n, k, 0.5f, a.buf.data(), a.rs, a.cs, pb.data(), 1.0f, c2.data(), n, ep);
        EXPECT_TRUE(close(c2, want, k)) << "packed B: m=" << m << " k=" << k << " layout " << lb;
      }
    }
}

TEST_P(GemmIsaTest, Batched) {
  const int64_t batch = 5, m = 13, n = 21, k = 40;
  Mat a = make_mat(batch * m, k, 0, 41);  // batch i is rows [i*m, (i+1)*m)
  Mat b = make_mat(k, n, 0, 42);          // shared: batch stride 0
  std::vector<float> c(static_cast<size_t>(batch * m * n));
  gemm_f32_batched(batch, m, n, k, 1.0f, a.buf.data(), m * a.rs, a.rs, a.cs, b.buf.data(), 0, b.rs, b.cs, 0.0f,
                   c.data(), m * n, n);
  for (int64_t i = 0; i < batch; ++i) {
    Mat ai{m, k, a.rs, a.cs, std::vector<float>(a.buf.begin() + i * m * a.rs, a.buf.begin() + (i + 1) * m * a.rs)};
    std::vector<double> want = reference(ai, b, 1.0f, 0.0f, {}, {});
    std::vector<float> got(c.begin() + i * m * n, c.begin() + (i + 1) * m * n);
    EXPECT_TRUE(close(got, want, k)) << "batch " << i;
  }
}

TEST_P(GemmIsaTest, OneAndTwoThreadsAgree) {
  const int saved = get_num_threads();
  Mat a = make_mat(250, 300, 0, 51), b = make_mat(300, 260, 1, 52);
  std::vector<float> c1(250 * 260), c2(250 * 260);
  set_num_threads(1);
  gemm_f32(250, 260, 300, 1.0f, a.buf.data(), a.rs, a.cs, b.buf.data(), b.rs, b.cs, 0.0f, c1.data(), 260, {});
  set_num_threads(2);
  gemm_f32(250, 260, 300, 1.0f, a.buf.data(), a.rs, a.cs, b.buf.data(), b.rs, b.cs, 0.0f, c2.data(), 260, {});
  set_num_threads(saved);
  EXPECT_EQ(c1, c2);  // each element is computed by the same kernel in the same order either way
}

INSTANTIATE_TEST_SUITE_P(Isa, GemmIsaTest, ::testing::Values(Isa::scalar, Isa::avx2, Isa::avx512),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

// A tile's share of the next B panel goes out evenly over its k steps (Note [An even L2 stream] in
// prefetch.h): all of it by the last step, never more than two lines a step, and at any step no
// further ahead than its even pace (not a burst at the start), nor more than one interval behind.
TEST(L2Stream, SpreadsTheShareEvenlyOverTheSteps) {
  const uintptr_t base = 1 << 20;
  for (int64_t steps : {1, 7, 64, 768}) {
    for (int64_t lines : {0, 1, 5, 140, 768, 1000, 1536}) {
      if (lines > 2 * steps) continue;  // more than the tile can ask for: not handed out so
      SCOPED_TRACE(::testing::Message() << steps << " steps, " << lines << " lines");
      L2Stream s(base, base + static_cast<uintptr_t>(lines) * 64, steps);
      const int64_t every = lines > steps || lines == 0 ? 1 : steps / lines;
      uintptr_t before = s.next();
      for (int64_t p = 1; p <= steps; ++p) {
        s.step();
        const int64_t asked = static_cast<int64_t>(s.next() - base) / 64;
        EXPECT_LE(s.next() - before, 128u);
        before = s.next();
        if (lines <= steps) {
          EXPECT_LE(asked, std::min(lines, (p + every - 1) / every)) << "step " << p;
          EXPECT_GE(asked, std::min(lines, p / every)) << "step " << p;
        }
      }
      EXPECT_GE(s.next(), base + static_cast<uintptr_t>(lines) * 64);
      EXPECT_LE(s.next(), base + static_cast<uintptr_t>(lines + 1) * 64);
    }
  }
}

TEST(IsaSelection, ParsesNamesAndRejectsUnknown) {
  EXPECT_EQ(parse_isa("avx512"), Isa::avx512);
  EXPECT_EQ(parse_isa("avx2"), Isa::avx2);
  EXPECT_EQ(parse_isa("scalar"), Isa::scalar);
  EXPECT_KILN_ERROR(parse_isa("sse9"), "unknown ISA 'sse9'", "avx512, avx2, scalar");
}

TEST(IsaSelection, SupportedListAndOverride) {
  std::vector<Isa> isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  EXPECT_EQ(isas.front(), Isa::scalar);
  EXPECT_TRUE(isa_supported(active_isa()));
  for (Isa isa : isas) {
    IsaOverride o(isa);
    EXPECT_EQ(active_isa(), isa);
  }
  if (!isa_supported(Isa::avx512)) {
    EXPECT_KILN_ERROR(set_active_isa(Isa::avx512), "avx512", "does not support");
  }
}

TEST(IsaSelection, PrepackedForAnotherIsaIsAnError) {
  std::vector<Isa> isas = supported_isas();
  if (isas.size() < 2) GTEST_SKIP() << "only one ISA on this machine";
  std::vector<float> b = random_vec(16 * 16, 1), a = random_vec(4 * 16, 2), c(4 * 16);
  PackedGemmB packed = [&] {
    IsaOverride o(isas.back());
    return pack_gemm_b_f32(16, 16, b.data(), 16, 1);
  }();
  IsaOverride o(isas.front());
  EXPECT_KILN_ERROR(gemm_f32_prepacked(4, 1.0f, a.data(), 16, 1, packed, 0.0f, c.data(), 16), "packed for",
                    "pack it again");
}

}  // namespace
}  // namespace kiln::kernels::cpu
