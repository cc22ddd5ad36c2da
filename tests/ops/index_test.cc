// Index ops (gather, index_select, gather_elements, scatter, one_hot, topk) against the float64
// references in src/kernels/cpu/ref/index.cc: every dtype, i32 and i64 indices (negative ones
// too), odd sizes, negative axes, non-contiguous inputs, and error messages by content. Moved
// values must match exactly.
#include <random>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::kAllDTypes;
using testing::noncontiguous;
using testing::random_tensor;

Tensor rnd(const Shape& s, DType t, uint64_t seed) { return random_tensor(s, t, seed, -100, 100); }

// Random indices in [-n, n) (negative ones wrap) of dtype `t`.
Tensor random_indices(const Shape& s, int64_t n, DType t, uint64_t seed, bool allow_negative = true) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int64_t> dist(allow_negative ? -n : 0, n - 1);
  std::vector<int64_t> v(static_cast<size_t>(numel_of(s)));
  for (int64_t& x : v) x = dist(g);
  return from_vector<int64_t>(v, s).to(t);
}

int64_t wrap(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// ---- gather -------------------------------------------------------------------------------------------------

TEST(Gather, MatchesReferenceOnEveryDTypeAxisAndIndexShape) {
  const std::vector<Shape> index_shapes = {{}, {1}, {7}, {2, 3}, {33}};
  for (DType t : kAllDTypes) {
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      Shape xs = {5, 7, 3};
      Tensor x = rnd(xs, t, 1);
      const int64_t n = xs[static_cast<size_t>(wrap(axis, 3))];
      for (const Shape& is : index_shapes) {
        for (DType it : {DType::i32, DType::i64}) {
          Tensor idx = random_indices(is, n, it, 2 + static_cast<uint64_t>(is.size()));
          Tensor want = ref::gather(x, idx, axis);
          EXPECT_TRUE(all_close(gather(x, idx, axis), want))
              << dtype_name(t) << " axis=" << axis << " indices " << dtype_name(it) << shape_str(is);
          EXPECT_TRUE(all_close(gather(noncontiguous(x), noncontiguous(idx), axis), want)) << dtype_name(t) << " nc";
        }
      }
    }
  }
}

TEST(Gather, LongAxesAndTransposedInput) {
  for (int64_t n : {1, 33, 1000, 1023}) {
    Tensor x = rnd({2, n}, DType::f32, 3);
    Tensor idx = random_indices({1000}, n, DType::i64, 4);
    EXPECT_TRUE(all_close(gather(x, idx, 1), ref::gather(x, idx, 1))) << n;
    EXPECT_TRUE(all_close(gather(x.t(), idx, 0), ref::gather(x.t(), idx, 0))) << n;
  }
  // Enough rows to split between threads inside an outer row (x [37, n, inner] at 1000 indices),
  // rows of one element and of three.
  for (int64_t inner : {1, 3}) {
    Tensor x = rnd({37, 41, inner}, DType::f32, 5);
    Tensor idx = random_indices({1000}, 41, DType::i64, 6);
    EXPECT_TRUE(all_close(gather(x, idx, 1), ref::gather(x, idx, 1))) << inner;
  }
  // Known values: rows of a matrix, with a wrapped negative index.
  Tensor m = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, Shape{3, 2});
  EXPECT_TRUE(all_close(gather(m, from_vector<int64_t>({2, -3}), 0), ref::from_values({5, 6, 1, 2}, {2, 2})));
}

TEST(Gather, Errors) {
  Tensor x = zeros({4, 5});
  EXPECT_KILN_ERROR(gather(x, from_vector<int64_t>({0, 1, 5, 2}, Shape{2, 2}), 1), "gather", "index 5",
                    "position [1, 0]", "axis 1", "[4, 5]");
  EXPECT_KILN_ERROR(gather(x, from_vector<int32_t>({-5}), 0), "gather", "index -5", "position [0]", "axis 0");
  EXPECT_KILN_ERROR(gather(x, from_vector<float>({0}), 0), "gather", "indices", "i32 or i64", "f32[1]");
  EXPECT_KILN_ERROR(gather(x, from_vector<uint8_t>({0}), 0), "gather", "indices", "u8[1]");
  EXPECT_KILN_ERROR(gather(x, from_vector<int64_t>({0}), 2), "gather", "axis");
  EXPECT_KILN_ERROR(gather(scalar_tensor(1.0), from_vector<int64_t>({0}), 0), "gather", "rank >= 1");
}

TEST(IndexSelect, MatchesReference) {
  for (DType t : kAllDTypes) {
    Tensor x = rnd({7, 33}, t, 5);
    for (int64_t axis : {0, 1, -1}) {
      const int64_t n = x.size(axis);
      Tensor idx = random_indices({33}, n, DType::i32, 6);
      Tensor want = ref::gather(x, idx, axis);
      EXPECT_TRUE(all_close(index_select(x, axis, idx), want)) << dtype_name(t) << " axis=" << axis;
      EXPECT_TRUE(all_close(index_select(noncontiguous(x), axis, idx), want)) << dtype_name(t) << " nc";
    }
  }
  EXPECT_KILN_ERROR(index_select(zeros({3}), 0, zeros({1, 1}, DType::i64)), "index_select", "1-D", "[1, 1]");
  EXPECT_KILN_ERROR(index_select(zeros({3}), 0, from_vector<int64_t>({3})), "gather", "index 3");
}

// ---- gather_elements ----------------------------------------------------------------------------------------

TEST(GatherElements, MatchesReferenceOnEveryDTypeAndAxis) {
  for (DType t : kAllDTypes) {
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      Tensor x = rnd({5, 7, 3}, t, 7);
      const int64_t n = x.size(axis);
      // index may be smaller than x off the axis and longer along it.
      Shape is = {4, 7, 2};
      is[static_cast<size_t>(wrap(axis, 3))] = 9;
      for (DType it : {DType::i32, DType::i64}) {
        Tensor idx = random_indices(is, n, it, 8);
        Tensor want = ref::gather_elements(x, idx, axis);
        EXPECT_TRUE(all_close(gather_elements(x, idx, axis), want)) << dtype_name(t) << " axis=" << axis;
        EXPECT_TRUE(all_close(gather_elements(noncontiguous(x), noncontiguous(idx), axis), want)) << dtype_name(t) << " nc";
      }
    }
  }
  Tensor x = rnd({1000, 2}, DType::f32, 9);
  Tensor idx = random_indices({1023, 2}, 1000, DType::i64, 10);
  EXPECT_TRUE(all_close(gather_elements(x, idx, 0), ref::gather_elements(x, idx, 0)));
  EXPECT_TRUE(all_close(gather_elements(x.t(), idx.t(), 1), ref::gather_elements(x.t(), idx.t(), 1)));
  // Note [Gathering along rows]: DeBERTa's relative-position gather, one [q, k] table of indices
  // expanded over the heads (stride 0), rows of 2k scores; and an index read down a column.
  for (DType it : {DType::i32, DType::i64}) {
    Tensor scores = rnd({12, 33, 14}, DType::f32, 11);
    Tensor table = random_indices({1, 33, 7}, 14, it, 12);
    Tensor expanded = table.expand({12, 33, 7});
    EXPECT_TRUE(all_close(gather_elements(scores, expanded, -1), ref::gather_elements(scores, expanded, -1)));
    Tensor cols = random_indices({7, 33}, 14, it, 13).t();  // [33, 7], its last dim 33 apart
    Tensor rows = rnd({33, 14}, DType::f32, 14);
    EXPECT_TRUE(all_close(gather_elements(rows, cols, 1), ref::gather_elements(rows, cols, 1)));
  }
  // torch.gather's documented example.
  Tensor m = from_vector<int32_t>({1, 2, 3, 4}, Shape{2, 2});
  EXPECT_TRUE(all_close(gather_elements(m, from_vector<int64_t>({0, 0, 1, 0}, Shape{2, 2}), 1),
                        ref::from_values({1, 1, 4, 3}, {2, 2})));
}

TEST(GatherElements, Errors) {
  Tensor x = zeros({3, 4});
  EXPECT_KILN_ERROR(gather_elements(x, from_vector<int64_t>({0, 4}, Shape{1, 2}), 1), "gather_elements", "index 4",
                    "position [0, 1]", "axis 1", "[3, 4]");
  EXPECT_KILN_ERROR(gather_elements(x, zeros({3}, DType::i64), 1), "gather_elements", "rank", "i64[3]", "f32[3, 4]");
  EXPECT_KILN_ERROR(gather_elements(x, zeros({4, 1}, DType::i64), 1), "gather_elements", "[4, 1]", "[3, 4]", "dim 0");
  EXPECT_KILN_ERROR(gather_elements(x, zeros({3, 4}, DType::f32), 1), "gather_elements", "index", "i32 or i64");
}

// ---- scatter ------------------------------------------------------------------------------------------------

TEST(Scatter, MatchesReferenceOnEveryDTypeAndAxis) {
  for (DType t : kAllDTypes) {
    for (int64_t axis : {0, 1, -1, -2}) {
      Tensor x = rnd({7, 5}, t, 11);
      Tensor src = rnd({8, 6}, t, 12);
      const int64_t n = x.size(axis);
      Shape is = {3, 4};
      for (DType it : {DType::i32, DType::i64}) {
        // Repeated indices are allowed: the later position wins, in the kernel as in the reference.
        Tensor idx = random_indices(is, n, it, 13);
        Tensor want = ref::scatter(x, axis, idx, src);
        EXPECT_TRUE(all_close(scatter(x, axis, idx, src), want)) << dtype_name(t) << " axis=" << axis;
        EXPECT_TRUE(all_close(scatter(noncontiguous(x), axis, noncontiguous(idx), noncontiguous(src)), want))
            << dtype_name(t) << " nc";
      }
    }
  }
  Tensor x = rnd({1000, 3}, DType::f64, 14), src = rnd({1023, 3}, DType::f64, 15);
  Tensor idx = random_indices({1023, 2}, 1000, DType::i64, 16);
  EXPECT_TRUE(all_close(scatter(x, 0, idx, src), ref::scatter(x, 0, idx, src)));
  EXPECT_TRUE(all_close(scatter(x.t(), 1, idx.t(), src.t()), ref::scatter(x.t(), 1, idx.t(), src.t())));
  // Known values and x left untouched.
  Tensor z = zeros({2, 3});
  Tensor out = scatter(z, 0, from_vector<int64_t>({1, 0, 1}, Shape{1, 3}), from_vector<float>({7, 8, 9}, Shape{1, 3}));
  EXPECT_TRUE(all_close(out, ref::from_values({0, 8, 0, 7, 0, 9}, {2, 3})));
  EXPECT_TRUE(all_close(z, ref::from_values({0, 0, 0, 0, 0, 0}, {2, 3})));
}

TEST(Scatter, Errors) {
  Tensor x = zeros({3, 4}), src = ones({3, 4});
  EXPECT_KILN_ERROR(scatter(x, 0, from_vector<int64_t>({0, 3}, Shape{1, 2}), src), "scatter", "index 3", "position [0, 1]",
                    "axis 0");
  EXPECT_KILN_ERROR(scatter(x, 0, zeros({1, 1}, DType::i64), ones({3, 4}, DType::f64)), "scatter", "src", "f64[3, 4]",
                    "dtype of x", "f32[3, 4]");
  EXPECT_KILN_ERROR(scatter(x, 0, zeros({4, 1}, DType::i64), src), "scatter", "[4, 1]", "src", "[3, 4]");
  EXPECT_KILN_ERROR(scatter(x, 0, zeros({1, 5}, DType::i64), ones({3, 5})), "scatter", "[1, 5]", "x", "[3, 4]");
  EXPECT_KILN_ERROR(scatter(x, 0, zeros({3}, DType::i64), src), "scatter", "same rank");
  EXPECT_KILN_ERROR(scatter(x, 0, zeros({1, 1}, DType::boolean), src), "scatter", "index", "i32 or i64", "bool");
}

// ---- one_hot ------------------------------------------------------------------------------------------------

TEST(OneHot, MatchesReferenceForEveryIndexAndOutputDType) {
  for (DType it : {DType::i8, DType::u8, DType::i32, DType::i64}) {
    for (int64_t depth : {1, 7, 33}) {
      for (int64_t axis : {-1, 0, 1, 2, -3}) {
        Tensor idx = random_indices({4, 5}, depth, it, 17, /*allow_negative=*/it != DType::u8);
        Tensor want = ref::one_hot(idx, depth, axis);
        for (DType out : kAllDTypes) {
          Tensor got = one_hot(idx, depth, axis, out);
          EXPECT_EQ(got.dtype(), out);
          EXPECT_TRUE(all_close(got, want)) << dtype_name(it) << " depth=" << depth << " axis=" << axis << " -> "
                                            << dtype_name(out);
        }
        EXPECT_TRUE(all_close(one_hot(noncontiguous(idx), depth, axis), want)) << "nc";
      }
    }
  }
  Tensor idx = random_indices({1000}, 1023, DType::i64, 18);
  EXPECT_TRUE(all_close(one_hot(idx, 1023), ref::one_hot(idx, 1023, -1)));
  EXPECT_TRUE(all_close(one_hot(from_vector<int64_t>({2, -1}), 3, -1, DType::i32), ref::from_values({0, 0, 1, 0, 0, 1}, {2, 3})));
  EXPECT_TRUE(all_close(one_hot(scalar_tensor(1, DType::i64), 2), from_vector<double>({0, 1})));
}

TEST(OneHot, Errors) {
  EXPECT_KILN_ERROR(one_hot(from_vector<int64_t>({0, 3}), 3), "one_hot", "index 3", "position [1]", "depth 3");
  EXPECT_KILN_ERROR(one_hot(from_vector<int64_t>({-4}), 3), "one_hot", "index -4", "position [0]");
  EXPECT_KILN_ERROR(one_hot(from_vector<float>({0}), 3), "one_hot", "indices", "integer", "f32[1]");
  EXPECT_KILN_ERROR(one_hot(from_vector<int64_t>({0}), 0), "one_hot", "depth", ">= 1", "0");
  EXPECT_KILN_ERROR(one_hot(from_vector<int64_t>({0}), 3, 2), "one_hot", "axis");
}

// ---- topk ---------------------------------------------------------------------------------------------------

// Checks topk against the reference: values, and indices exactly (ties resolve to the lower index).
void check_topk(const Tensor& x, int64_t k, int64_t axis, bool largest, const std::string& what) {
  auto [vals, idxs] = topk(x, k, axis, largest);
  auto [want_v, want_i] = ref::topk(x, k, axis, largest);
  EXPECT_EQ(idxs.dtype(), DType::i64);
  EXPECT_EQ(vals.dtype(), x.dtype());
  EXPECT_TRUE(all_close(vals, want_v)) << what;
  EXPECT_TRUE(all_close(idxs, want_i)) << what;
}

TEST(TopK, MatchesReferenceOnEveryDTypeAxisAndK) {
  for (DType t : kAllDTypes) {
    Tensor x = rnd({4, 7, 5}, t, 19);
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      const int64_t n = x.size(axis);
      for (int64_t k : {int64_t{0}, int64_t{1}, n / 2, n}) {
        for (bool largest : {true, false}) {
          std::string what = std::string(dtype_name(t)) + " axis=" + std::to_string(axis) + " k=" + std::to_string(k) +
                             (largest ? " largest" : " smallest");
          check_topk(x, k, axis, largest, what);
          check_topk(noncontiguous(x), k, axis, largest, what + " nc");
        }
      }
    }
  }
}

TEST(TopK, LongRowsTiesAndUnsorted) {
  for (int64_t n : {1, 7, 33, 1000, 1023}) {
    // Few distinct values: many ties, which must resolve to the lower index.
    Tensor x = random_tensor({3, n}, DType::i32, 20, -3, 3);
    for (int64_t k : {int64_t{1}, std::min<int64_t>(n, 5), n}) {
      check_topk(x, k, -1, true, "i32 ties n=" + std::to_string(n));
      check_topk(x, k, -1, false, "i32 ties smallest n=" + std::to_string(n));
      check_topk(x.t(), k, 0, true, "transposed n=" + std::to_string(n));
    }
    Tensor f = rnd({2, n}, DType::bf16, 21);
    check_topk(f, std::min<int64_t>(n, 33), 1, true, "bf16 n=" + std::to_string(n));
  }
  // Ties: the lower index first.
  auto [v, i] = topk(from_vector<float>({1, 3, 3, 2, 3}), 3);
  EXPECT_TRUE(all_close(v, from_vector<double>({3, 3, 3})));
  EXPECT_TRUE(all_close(i, from_vector<double>({1, 2, 4})));
  // sorted=false: the same elements, in index order.
  auto [uv, ui] = topk(from_vector<float>({5, 1, 9, 7, 3}), 3, -1, true, /*sorted=*/false);
  EXPECT_TRUE(all_close(uv, from_vector<double>({5, 9, 7})));
  EXPECT_TRUE(all_close(ui, from_vector<double>({0, 2, 3})));
  // NaN ranks above every number (as in torch).
  Tensor nan = from_vector<float>({1, NAN, 3});
  EXPECT_TRUE(all_close(topk(nan, 2).second, from_vector<double>({1, 2})));
  EXPECT_TRUE(all_close(topk(nan, 2, -1, false).second, from_vector<double>({0, 2})));
  check_topk(nan, 3, 0, true, "nan largest");
  check_topk(nan, 3, 0, false, "nan smallest");
}

TEST(TopK, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_KILN_ERROR(topk(x, 4), "topk", "k = 4", "axis 1", "f32[2, 3]", "size 3");
  EXPECT_KILN_ERROR(topk(x, -1, 0), "topk", "k = -1", "axis 0");
  EXPECT_KILN_ERROR(topk(x, 1, 2), "topk", "axis");
  EXPECT_KILN_ERROR(topk(scalar_tensor(1.0), 1), "topk", "rank >= 1");
}

// Inputs large enough that every kernel splits its work over the pool's threads (when it has
// more than one; the pool's size is left as the machine sets it).
TEST(IndexOps, LargeInputsMatchReferenceWithThreads) {
  Tensor x = rnd({300, 257}, DType::f32, 30);
  Tensor idx = random_indices({500}, 300, DType::i64, 31);
  EXPECT_TRUE(all_close(gather(x, idx, 0), ref::gather(x, idx, 0)));
  Tensor ie = random_indices({300, 257}, 257, DType::i32, 32);
  EXPECT_TRUE(all_close(gather_elements(x, ie, 1), ref::gather_elements(x, ie, 1)));
  Tensor src = rnd({300, 257}, DType::f32, 33);
  EXPECT_TRUE(all_close(scatter(x, 1, ie, src), ref::scatter(x, 1, ie, src)));
  Tensor rows = rnd({4096, 33}, DType::f64, 34);
  check_topk(rows, 5, 1, true, "large");
  check_topk(rows, 7, 0, false, "large axis 0");
}

}  // namespace
}  // namespace kiln
