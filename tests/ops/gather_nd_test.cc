// gather_nd and scatter_nd (defs/index/gather_nd.cc) against the reference (ref::gather_nd,
// ref::scatter_nd): every dtype, odd sizes, m from 1 to rank, batch_dims, negative indices,
// non-contiguous operands, every reduction with repeated indices, ONNX's examples, and errors
// naming the bad index. Results are exact (pure data movement; add/mul of the test values are
// exact in every dtype).
#include <cmath>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

// Random coordinates for indices of shape `lead` + [m] into dims [b, b + m) of x, half negative.
Tensor random_indices(const Shape& x, Shape lead, int64_t b, int64_t m, uint64_t seed, DType t = DType::i64) {
  Generator g(seed);
  std::vector<int64_t> v;
  const int64_t tuples = numel_of(lead);
  for (int64_t i = 0; i < tuples; ++i)
    for (int64_t j = 0; j < m; ++j) {
      const int64_t size = x[static_cast<size_t>(b + j)];
      int64_t c = static_cast<int64_t>(g.uniform() * static_cast<double>(size));
      if (c >= size) c = size - 1;
      if (g.uniform() < 0.5) c -= size;
      v.push_back(c);
    }
  lead.push_back(m);
  return from_vector<int64_t>(v, lead).to(t);
}

Tensor whole(const Shape& s, DType t, uint64_t seed) {
  if (t == DType::boolean) return random_tensor(s, t, seed);
  return random_tensor(s, t == DType::u8 ? DType::u8 : DType::i8, seed, -3, 3).to(t);
}

struct NdCase {
  Shape x, lead;  // indices shape = lead + [m]
  int64_t m, batch_dims = 0;
};

const std::vector<NdCase> kCases = {
    {{7}, {1}, 1},
    {{7, 33}, {5}, 1},
    {{7, 33}, {5}, 2},
    {{3, 4, 5}, {2, 3}, 2},
    {{3, 4, 5}, {33}, 3},
    {{3, 7, 5}, {3, 4}, 1, 1},  // batch_dims 1: lead starts with x's batch dim
    {{2, 3, 4, 5}, {2, 3, 2}, 1, 2},
    {{2, 3, 4}, {2, 1}, 2, 1},
};

TEST(GatherNd, MatchesReferenceOnEveryDTypeAndCase) {
  for (DType t : testing::kAllDTypes) {
    uint64_t seed = 1;
    for (const auto& c : kCases) {
      Tensor x = random_tensor(c.x, t, seed++);
      for (DType it : {DType::i64, DType::i32}) {
        Tensor idx = random_indices(c.x, c.lead, c.batch_dims, c.m, seed++, it);
        Tensor got = gather_nd(x, idx, c.batch_dims);
        EXPECT_EQ(got.dtype(), t);
        EXPECT_TRUE(all_close(got, ref::gather_nd(x, idx, c.batch_dims)))
            << dtype_name(t) << " x " << shape_str(c.x) << " indices " << shape_str(idx.shape()) << " b " << c.batch_dims;
        EXPECT_TRUE(all_close(gather_nd(noncontiguous(x), noncontiguous(idx), c.batch_dims), ref::gather_nd(x, idx, c.batch_dims)))
            << dtype_name(t) << " noncontiguous x " << shape_str(c.x);
      }
    }
  }
  // Large slices and many tuples split over the thread pool.
  Tensor big = random_tensor({40, 1023}, DType::f32, 7);
  Tensor bi = random_indices(big.shape(), {77}, 0, 1, 8);
  EXPECT_TRUE(all_close(gather_nd(big, bi), ref::gather_nd(big, bi, 0)));
  Tensor many = random_indices(big.shape(), {20001}, 0, 2, 9);
  EXPECT_TRUE(all_close(gather_nd(big, many), ref::gather_nd(big, many, 0)));
}

// ONNX's GatherND examples (onnx/backend/test/case/node/gathernd.py).
TEST(GatherNd, OnnxExamples) {
  Tensor d = from_vector<int32_t>({0, 1, 2, 3}, Shape{2, 2});
  EXPECT_TRUE(all_close(gather_nd(d, from_vector<int64_t>({0, 0, 1, 1}, Shape{2, 2})), from_vector<double>({0, 3})));
  EXPECT_TRUE(all_close(gather_nd(d, from_vector<int64_t>({1, 0}, Shape{2, 1})), from_vector<double>({2, 3, 0, 1}, Shape{2, 2})));
  Tensor f = from_vector<float>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{2, 2, 2});
  EXPECT_TRUE(all_close(gather_nd(f, from_vector<int64_t>({0, 1, 1, 0}, Shape{2, 1, 2})),
                        from_vector<double>({2, 3, 4, 5}, Shape{2, 1, 2})));
  Tensor b = from_vector<int32_t>({0, 1, 2, 3, 4, 5, 6, 7}, Shape{2, 2, 2});
  EXPECT_TRUE(all_close(gather_nd(b, from_vector<int64_t>({1, 0}, Shape{2, 1}), 1), from_vector<double>({2, 3, 4, 5}, Shape{2, 2})));
  // Negative coordinates count from the end.
  EXPECT_TRUE(all_close(gather_nd(d, from_vector<int64_t>({-1, -2}, Shape{1, 2})), from_vector<double>({2})));
}

// Repeated indices with every reduction; random updates.
TEST(ScatterNd, MatchesReferenceOnEveryDTypeReductionAndCase) {
  for (DType t : testing::kAllDTypes) {
    uint64_t seed = 100;
    for (const auto& c : kCases) {
      if (c.batch_dims != 0) continue;
      for (const char* red : {"none", "add", "mul", "max", "min"}) {
        if (t == DType::boolean && std::string(red) != "none") continue;
        // Whole values in [-3, 3]: sums and products of a few of them are exact in every dtype.
        Tensor x = whole(c.x, t, seed++);
        // Small index spaces: tuples repeat.
        Tensor idx = random_indices(c.x, c.lead, 0, c.m, seed++);
        Shape us = c.lead;
        us.insert(us.end(), c.x.begin() + c.m, c.x.end());
        Tensor upd = whole(us, t, seed++);
        const std::string where = std::string(dtype_name(t)) + " " + red + " x " + shape_str(c.x) + " indices " +
                                  shape_str(idx.shape());
        Tensor want = ref::scatter_nd(x, idx, upd, red);
        EXPECT_TRUE(all_close(scatter_nd(x, idx, upd, red), want)) << where;
        EXPECT_TRUE(all_close(scatter_nd(noncontiguous(x), noncontiguous(idx), noncontiguous(upd), red), want))
            << where << " noncontiguous";
      }
    }
  }
  Tensor big = random_tensor({5, 70001}, DType::f32, 3);  // a slice large enough to split
  Tensor bi = from_vector<int64_t>({1, -1, 1}, Shape{3, 1});
  Tensor bu = random_tensor({3, 70001}, DType::f32, 4);
  EXPECT_TRUE(all_close(scatter_nd(big, bi, bu, "add"), ref::scatter_nd(big, bi, bu, "add")));
}

// ONNX's ScatterND examples (onnx/backend/test/case/node/scatternd.py) and the order of writes.
TEST(ScatterNd, OnnxExamplesAndOrder) {
  Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6, 7, 8});
  Tensor y = scatter_nd(x, from_vector<int64_t>({4, 3, 1, 7}, Shape{4, 1}), from_vector<float>({9, 10, 11, 12}));
  EXPECT_TRUE(all_close(y, from_vector<double>({1, 11, 3, 10, 9, 6, 7, 12})));
  // Repeated index: "none" keeps the last, "add"/"mul" combine all, "max"/"min" pick.
  Tensor d = from_vector<float>({1, 2, 3});
  Tensor i = from_vector<int64_t>({0, 0, 2}, Shape{3, 1});
  Tensor u = from_vector<float>({5, -4, 0.5});
  EXPECT_TRUE(all_close(scatter_nd(d, i, u, "none"), from_vector<double>({-4, 2, 0.5})));
  EXPECT_TRUE(all_close(scatter_nd(d, i, u, "add"), from_vector<double>({2, 2, 3.5})));
  EXPECT_TRUE(all_close(scatter_nd(d, i, u, "mul"), from_vector<double>({-20, 2, 1.5})));
  EXPECT_TRUE(all_close(scatter_nd(d, i, u, "max"), from_vector<double>({5, 2, 3})));
  EXPECT_TRUE(all_close(scatter_nd(d, i, u, "min"), from_vector<double>({-4, 2, 0.5})));
  // NaN propagates through max/min from either side.
  Tensor nan = scatter_nd(from_vector<float>({NAN, 1}), from_vector<int64_t>({0, 1}, Shape{2, 1}),
                          from_vector<float>({2, NAN}), "max");
  EXPECT_TRUE(std::isnan(nan.data<float>()[0]) && std::isnan(nan.data<float>()[1]));
  // Slices: updates [2, 4] replace rows 0 and 2 of a [4, 4] x.
  Tensor m = scatter_nd(zeros({4, 4}), from_vector<int64_t>({0, 2}, Shape{2, 1}), ones({2, 4}));
  EXPECT_TRUE(all_close(m.sum({1}), from_vector<double>({4, 0, 4, 0})));
  EXPECT_TRUE(all_close(scatter_nd(ones({2, 3}, DType::boolean), from_vector<int64_t>({1, -1}, Shape{1, 2}),
                                   from_vector<bool>({false})),
                        from_vector<double>({1, 1, 1, 1, 1, 0}, Shape{2, 3})));
}

TEST(GatherNdScatterNd, RegistryAndErrors) {
  EXPECT_EQ(kiln::op("gather_nd").onnx_mapping()->op_type, "GatherND");
  EXPECT_EQ(kiln::op("scatter_nd").onnx_mapping()->op_type, "ScatterND");
  EXPECT_EQ(kiln::op("gather_nd").vjp_status().kind, RuleStatus::Kind::provided);
  EXPECT_EQ(kiln::op("scatter_nd").vjp_status().kind, RuleStatus::Kind::provided);
  Tensor x = ones({3, 4});
  EXPECT_KILN_ERROR(gather_nd(x, from_vector<int64_t>({0, 4}, Shape{1, 2})), "gather_nd", "index 4", "position [0, 1]",
                    "dim 1 of x", "[3, 4]", "-4 to 3");
  EXPECT_KILN_ERROR(gather_nd(x, from_vector<int64_t>({-4, 0}, Shape{1, 2})), "gather_nd", "index -4", "position [0, 0]",
                    "dim 0 of x");
  EXPECT_KILN_ERROR(gather_nd(x, from_vector<int64_t>({0, 0, 0}, Shape{1, 3})), "gather_nd", "3 coordinates", "1 to 2");
  EXPECT_KILN_ERROR(gather_nd(x, from_vector<float>({0}, Shape{1, 1})), "gather_nd", "indices", "i32 or i64", "f32[1, 1]");
  EXPECT_KILN_ERROR(gather_nd(x, from_vector<int64_t>({0}, Shape{1, 1}), 1), "gather_nd", "batch dims", "differ at dim 0");
  EXPECT_KILN_ERROR(gather_nd(x, from_vector<int64_t>({0}, Shape{1}), 1), "gather_nd", "batch_dims = 1");
  EXPECT_KILN_ERROR(gather_nd(scalar_tensor(1.0), from_vector<int64_t>({0}, Shape{1})), "gather_nd", "rank >= 1");
  Tensor i = from_vector<int64_t>({1, 3}, Shape{2, 1});
  EXPECT_KILN_ERROR(scatter_nd(x, i, ones({2, 4})), "scatter_nd", "index 3", "position [1, 0]", "dim 0 of x");
  EXPECT_KILN_ERROR(scatter_nd(x, from_vector<int64_t>({1}, Shape{1, 1}), ones({2, 4})), "scatter_nd",
                    "updates has shape [2, 4]", "[1, 4]");
  EXPECT_KILN_ERROR(scatter_nd(x, from_vector<int64_t>({1}, Shape{1, 1}), ones({1, 4}, DType::f64)), "scatter_nd",
                    "updates (f64[1, 4])", "dtype of x (f32[3, 4])");
  EXPECT_KILN_ERROR(scatter_nd(x, from_vector<int64_t>({1}, Shape{1, 1}), ones({1, 4}), "sum"), "scatter_nd",
                    "reduction", "\"sum\"", "\"add\"");
  EXPECT_KILN_ERROR(scatter_nd(ones({3}, DType::boolean), from_vector<int64_t>({1}, Shape{1, 1}),
                               ones({1}, DType::boolean), "add"),
                    "scatter_nd", "reduction \"add\"", "numeric", "bool[3]");
}

}  // namespace
}  // namespace kiln
