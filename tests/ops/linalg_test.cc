// matmul and gemm against the float64 reference: 1-D promotion, batch broadcasting, odd and long
// inner dims, transposed and non-contiguous operands, every claimed dtype, and error cases.
//
// Tolerance: a product's rounding error scales with sum_k |a_ik| |b_kj| (cancellation can make the
// result itself tiny), so each element is checked as |got - want| <= eps * that magnitude with
// eps = 1e-5 (f32, inner dims up to 1000), 1e-13 (f64), 2^-10 (f16) and 2^-7 (bf16), covering the
// final rounding of the 16-bit result; integers are exact.
#include "support/testing.h"

namespace kiln {
namespace {

using testing::abs_values;
using testing::close_by_magnitude;
using testing::random_tensor;

const std::vector<DType> kLinalgDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64};

double eps_for(DType t) {
  switch (t) {
    case DType::f32: return 1e-5;
    case DType::f64: return 1e-13;
    case DType::f16: return 1.0 / 1024;
    case DType::bf16: return 1.0 / 128;
    default: return 0;
  }
}

::testing::AssertionResult matmul_matches(const Tensor& a, const Tensor& b) {
  Tensor got = matmul(a, b);
  if (got.dtype() != promote_types(a.dtype(), b.dtype()))
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype());
  return close_by_magnitude(got, ref::matmul(a, b), ref::matmul(abs_values(a), abs_values(b)), eps_for(got.dtype()));
}

const std::vector<std::pair<Shape, Shape>> kMatmulShapes = {
    {{7}, {7}},                    // vector . vector -> scalar
    {{1}, {1}},
    {{7}, {7, 33}},                // vector @ matrix
    {{33, 7}, {7}},                // matrix @ vector
    {{1, 1}, {1, 1}},
    {{7, 33}, {33, 1}},
    {{33, 7}, {7, 33}},
    {{2, 1, 3, 4}, {5, 4, 6}},     // batch broadcasting both ways
    {{3, 4}, {2, 4, 5}},
    {{2, 3, 4}, {4}},
    {{4}, {2, 4, 3}},
    {{4, 5, 7}, {7, 3}},           // shared b: folded into one GEMM
    {{1, 1000}, {1000, 7}},        // long inner dim
    {{33, 1000}, {1000, 7}},
    {{7, 1000}, {1000}},
    {{65, 129}, {129, 257}},       // several row and column tiles
    {{300, 33}, {33, 300}},
    {{5, 13, 9}, {5, 9, 1}},       // a column per batch: direct (Note [Matrix-vector products in batches])
    {{3, 2, 64, 9}, {3, 2, 9, 1}},
    {{2, 200, 100}, {2, 100, 1}},  // past the direct path's size
};

TEST(Matmul, MatchesReferenceOnShapesAndDTypes) {
  for (DType t : kLinalgDTypes) {
    uint64_t seed = 1;
    for (const auto& [sa, sb] : kMatmulShapes) {
      Tensor a = random_tensor(sa, t, seed++), b = random_tensor(sb, t, seed++);
      EXPECT_TRUE(matmul_matches(a, b)) << dtype_name(t) << " " << shape_str(sa) << " x " << shape_str(sb);
    }
  }
}

TEST(Matmul, ResultShapesFollowNumPy) {
  EXPECT_EQ(matmul(ones({7}), ones({7})).shape(), Shape{});
  EXPECT_EQ(matmul(ones({7}), ones({7, 3})).shape(), Shape({3}));
  EXPECT_EQ(matmul(ones({3, 7}), ones({7})).shape(), Shape({3}));
  EXPECT_EQ(matmul(ones({2, 1, 3, 4}), ones({5, 4, 6})).shape(), Shape({2, 5, 3, 6}));
  EXPECT_EQ(matmul(ones({4}), ones({2, 4, 3})).shape(), Shape({2, 3}));
  EXPECT_EQ(matmul(ones({0, 3}), ones({3, 4})).shape(), Shape({0, 4}));
  // An empty inner dim gives zeros.
  EXPECT_TRUE(testing::all_close(matmul(ones({2, 0}), ones({0, 3})), zeros({2, 3}, DType::f64)));
}

TEST(Matmul, TransposedNonContiguousAndBroadcastOperands) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::i64}) {
    Tensor a = random_tensor({33, 7}, t, 11), b = random_tensor({33, 9}, t, 12);
    EXPECT_TRUE(matmul_matches(a.t(), b)) << "a transposed " << dtype_name(t);                  // [7,33] x [33,9]
    Tensor c = random_tensor({9, 33}, t, 13);
    EXPECT_TRUE(matmul_matches(a.t(), c.t())) << "both transposed " << dtype_name(t);           // B columns strided
    Tensor d = random_tensor({4, 5, 7}, t, 14), e = random_tensor({7, 6}, t, 15);
    EXPECT_TRUE(matmul_matches(testing::noncontiguous(d), testing::noncontiguous(e))) << dtype_name(t);
    EXPECT_TRUE(matmul_matches(d.transpose(0, 1), e)) << "batch dims permuted " << dtype_name(t);
    // Wide enough that the permuted rows are gathered into one GEMM (Note [Gathering rows before a
    // shared B]): PyTorch's seq-first attention input, [seq, batch, d] over a [batch, seq, d] buffer.
    Tensor f = random_tensor({3, 33, 7}, t, 18), w = random_tensor({7, 19}, t, 19);
    EXPECT_TRUE(matmul_matches(f.transpose(0, 1), w)) << "permuted rows, wide b " << dtype_name(t);
    EXPECT_TRUE(matmul_matches(f.transpose(0, 1).slice(2, 1, 7, 1), w.slice(0, 0, 6, 1))) << "and sliced K " << dtype_name(t);
    EXPECT_TRUE(matmul_matches(random_tensor({5, 7}, t, 20), w.expand({3, 7, 19}))) << "a broadcast, wide b " << dtype_name(t);
    EXPECT_TRUE(matmul_matches(d, e.expand({4, 7, 6}))) << "b expanded over batch " << dtype_name(t);
    EXPECT_TRUE(matmul_matches(random_tensor({7}, t, 16), e.expand({3, 7, 6}))) << "vector x expanded " << dtype_name(t);
    EXPECT_TRUE(matmul_matches(d.slice(2, 0, 7, 2), random_tensor({4, 4, 3}, t, 17))) << "sliced K " << dtype_name(t);
    // One column per batch, a's rows and b's column strided.
    Tensor rows = random_tensor({5, 9, 13}, t, 21).transpose(1, 2);
    Tensor col = random_tensor({5, 1, 9}, t, 22).transpose(1, 2);
    EXPECT_TRUE(matmul_matches(rows, col)) << "a column per batch, strided " << dtype_name(t);
  }
}

// Note [Products side by side] (matmul.cc): attention-sized products per head, too small to thread
// one by one, run in parallel over the heads; B is a transposed view (K^T), as attention reads it.
// Every product is summed the same way on one thread or two, so the bits agree.
TEST(Matmul, HeadsSideBySideMatchOneThread) {
  for (DType t : {DType::f32, DType::f64}) {
    for (int64_t heads : {6, 3}) {  // shared evenly between two threads, and not
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << ", " << heads << " heads");
      Tensor q = random_tensor({heads, 70, 64}, t, 41), k = random_tensor({heads, 71, 64}, t, 42);
      set_num_threads(1);
      Tensor one = matmul(q, k.transpose(1, 2));
      set_num_threads(2);
      Tensor two = matmul(q, k.transpose(1, 2));
      set_num_threads(available_cores());
      EXPECT_TRUE(testing::all_close(two, one, testing::Tol{0, 0}));
      EXPECT_TRUE(matmul_matches(q, k.transpose(1, 2)));
    }
  }
}

TEST(Matmul, PromotesMixedDTypes) {
  EXPECT_EQ(matmul(ones({2, 3}, DType::i32), ones({3, 2}, DType::f32)).dtype(), DType::f32);
  EXPECT_EQ(matmul(ones({2, 3}, DType::f16), ones({3, 2}, DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(matmul(ones({2, 3}, DType::i32), ones({3, 2}, DType::i32)).dtype(), DType::i32);
  Tensor a = random_tensor({5, 33}, DType::f16, 1), b = random_tensor({33, 4}, DType::f32, 2);
  EXPECT_TRUE(matmul_matches(a, b));
  EXPECT_TRUE(testing::all_close(a.matmul(b), matmul(a, b), {0, 0}));  // the method is the same op
}

TEST(Matmul, IntegerProductsWrapAround) {
  Tensor a = full({1, 2}, 65536, DType::i32), b = full({2, 1}, 32768, DType::i32);  // 2 * 2^31 wraps to 0
  EXPECT_EQ(matmul(a, b).item<int32_t>(), 0);
  const int64_t x = (int64_t{1} << 40) + 3, y = (int64_t{1} << 30) + 5;
  Tensor c = full({1, 1}, x, DType::i64), d = full({1, 1}, y, DType::i64);
  EXPECT_EQ(matmul(c, d).item<int64_t>(), static_cast<int64_t>(static_cast<uint64_t>(x) * static_cast<uint64_t>(y)));
}

TEST(Matmul, ErrorsNameOpAndShapes) {
  EXPECT_KILN_ERROR(matmul(ones({2, 3}), ones({4, 5})), "matmul", "[2, 3]", "[4, 5]", "inner");
  EXPECT_KILN_ERROR(matmul(ones({2, 3, 4}), ones({3, 4, 5})), "matmul", "batch", "[2, 3, 4]", "[3, 4, 5]");
  EXPECT_KILN_ERROR(matmul(ones({}), ones({3})), "matmul", "at least 1-D", "[]");
  EXPECT_KILN_ERROR(matmul(ones({3}), ones({4})), "matmul", "[3]", "[4]");
  EXPECT_KILN_ERROR(matmul(ones({2, 2}, DType::boolean), ones({2, 2}, DType::boolean)), "matmul", "no kernel for dtype bool");
  EXPECT_KILN_ERROR(matmul(ones({2, 2}, DType::i8), ones({2, 2}, DType::i8)), "matmul", "i8");
}

// ---- gemm ----------------------------------------------------------------------------------------

TEST(Gemm, AllTransposesAlphaBetaAndCShapes) {
  const int64_t m = 7, n = 33, k = 9;
  const std::vector<Shape> c_shapes = {{}, {n}, {m, 1}, {1, n}, {m, n}};
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64}) {
    const bool integral = !is_floating(t);
    const double alpha = integral ? 2 : 0.75, beta = integral ? -3 : -1.5;
    uint64_t seed = 100;
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, t, seed++);
        Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, t, seed++);
        Tensor mag_ab = ref::gemm(abs_values(a), abs_values(b), Tensor(), std::abs(alpha), 0, ta, tb);
        // Without C.
        Tensor got = gemm(a, b, Tensor(), alpha, beta, ta, tb);
        EXPECT_TRUE(close_by_magnitude(got, ref::gemm(a, b, Tensor(), alpha, beta, ta, tb), mag_ab, eps_for(t)))
            << dtype_name(t) << " ta=" << ta << " tb=" << tb << " no C";
        for (const Shape& cs : c_shapes) {
          Tensor c = random_tensor(cs, t, seed++);
          Tensor mag = ref::gemm(abs_values(a), abs_values(b), abs_values(c), std::abs(alpha), std::abs(beta), ta, tb);
          EXPECT_TRUE(close_by_magnitude(gemm(a, b, c, alpha, beta, ta, tb), ref::gemm(a, b, c, alpha, beta, ta, tb),
                                         mag, eps_for(t)))
              << dtype_name(t) << " ta=" << ta << " tb=" << tb << " C " << shape_str(cs);
        }
      }
    }
  }
}

TEST(Gemm, NonContiguousOperandsAndBetaZero) {
  Tensor a = random_tensor({7, 5}, DType::f32, 1), b = random_tensor({5, 9}, DType::f32, 2);
  Tensor c = random_tensor({7, 9}, DType::f32, 3);
  Tensor na = testing::noncontiguous(a), nb = testing::noncontiguous(b), nc = testing::noncontiguous(c);
  Tensor mag = ref::gemm(abs_values(a), abs_values(b), abs_values(c), 1, 1, false, false);
  EXPECT_TRUE(close_by_magnitude(gemm(na, nb, nc), ref::gemm(a, b, c, 1, 1, false, false), mag, 1e-5));
  // beta = 0 ignores C (BLAS convention), even a C full of NaN.
  Tensor nan_c = full({7, 9}, NAN);
  EXPECT_TRUE(close_by_magnitude(gemm(a, b, nan_c, 1.0, 0.0), ref::matmul(a, b), ref::matmul(abs_values(a), abs_values(b)), 1e-5));
  EXPECT_EQ(gemm(a, b, c, 1.0, 1.0).dtype(), DType::f32);
  EXPECT_EQ(gemm(a, b.to(DType::f64)).dtype(), DType::f64);
}

TEST(Gemm, ErrorsNameOpAndShapes) {
  EXPECT_KILN_ERROR(gemm(ones({2, 3}), ones({4, 5})), "gemm", "[2, 3]", "[4, 5]", "inner");
  EXPECT_KILN_ERROR(gemm(ones({3, 2}), ones({3, 5}), Tensor(), 1, 1, false, false), "gemm", "[3, 2]", "[3, 5]");
  EXPECT_KILN_ERROR(gemm(ones({2, 3, 4}), ones({4, 5})), "gemm", "2-D", "[2, 3, 4]");
  EXPECT_KILN_ERROR(gemm(ones({2, 3}), ones({3, 5}), ones({3})), "gemm", "c of shape [3]", "[2, 5]");
  EXPECT_KILN_ERROR(gemm(ones({2, 3}), ones({3, 5}), ones({2, 5, 1})), "gemm", "[2, 5, 1]");
  EXPECT_KILN_ERROR(gemm(ones({2, 3}, DType::i32), ones({3, 5}, DType::i32), Tensor(), 0.5), "gemm", "alpha", "i32");
}

}  // namespace
}  // namespace kiln
