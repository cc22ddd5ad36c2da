// N-d pooling (max_pool with indices, avg_pool, lp_pool, avg_pool_backward) against ONNX's own
// MaxPool / AveragePool / LpPool (values from onnx.reference, tests/data/make_pool_cases.py) on
// 1-D, 2-D and 3-D cases with pads, strides, dilations, ceil_mode and count_include_pad; the 2-D
// cases also against kiln's float64 pooling reference (ref::pool2d) on random inputs in every
// floating dtype and non-contiguous layouts; integer max pooling; the gradients; error cases.
//
// Tolerances: ONNX cases 1e-12 in f64; random cases tol_for(dtype) (one rounding of an f32/f64
// window result); the avg gradient's adjoint identity 1e-10 relative.
#include <cmath>

#include "kiln/ops/resample.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::random_tensor;
using testing::Tol;

struct OnnxPoolCase {
  std::string name, op;
  Shape x, y;
  std::vector<int64_t> kernel, stride, pads, dilation;
  bool ceil_mode, count_include_pad;
  int64_t p, storage_order;
  std::vector<double> want, want_indices;
};

const std::vector<OnnxPoolCase> kOnnxCases = {
    {"max_1d_strided_pads", "MaxPool", {2, 3, 11}, {2, 3, 6},
     {3}, {2}, {1, 2}, {1}, false, false, 2, 0,
     {0.5, 1.5, 1.5, 1.1666666666666667, 0.8333333333333334, 0.8333333333333334, 0.5, 1.5, 1.5, 1.1666666666666667, 0.8333333333333334, 0.8333333333333334, 0.5, 1.5, 1.5, 1.1666666666666667, 0.8333333333333334, 0.8333333333333334, 0.5, 1.5, 1.5, 1.1666666666666667, 0.8333333333333334, 0.8333333333333334, 0.5, 1.5, 1.5, 1.1666666666666667, 0.8333333333333334, 0.8333333333333334, 0.5, 1.5, 1.5, 1.1666666666666667, 0.8333333333333334, 0.8333333333333334},
     {1.0, 3.0, 3.0, 6.0, 9.0, 9.0, 12.0, 14.0, 14.0, 17.0, 20.0, 20.0, 23.0, 25.0, 25.0, 28.0, 31.0, 31.0, 34.0, 36.0, 36.0, 39.0, 42.0, 42.0, 45.0, 47.0, 47.0, 50.0, 53.0, 53.0, 56.0, 58.0, 58.0, 61.0, 64.0, 64.0}},
    {"max_3d_dilated_ceil", "MaxPool", {1, 2, 5, 6, 7}, {1, 2, 3, 5, 3},
     {2, 3, 2}, {2, 1, 3}, {1, 0, 1, 0, 1, 1}, {2, 1, 2}, true, false, 2, 0,
     {1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 0.8333333333333334, 1.5, 1.1666666666666667, 0.8333333333333334, 1.1666666666666667, 0.8333333333333334, 0.5, 1.1666666666666667, 0.8333333333333334, 1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 0.8333333333333334, 1.5, 1.1666666666666667, 0.8333333333333334, 1.1666666666666667, 0.8333333333333334, 0.5, 1.1666666666666667, 0.8333333333333334, 1.1666666666666667, 1.5, 1.1666666666666667, 0.8333333333333334, 1.5, 1.1666666666666667, 0.8333333333333334, 1.1666666666666667, 0.8333333333333334, 0.5, 1.1666666666666667, 0.8333333333333334, 0.5, 0.8333333333333334, 0.5, 1.5, 1.5, 0.16666666666666666, 1.5, 1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 1.5, 1.5, 1.5, 1.5, 1.1666666666666667, 1.5, 1.5, 1.5, 1.5, 1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 1.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 0.8333333333333334, 1.5, 1.1666666666666667},
     {50.0, 58.0, 47.0, 50.0, 58.0, 61.0, 64.0, 58.0, 61.0, 64.0, 72.0, 75.0, 78.0, 72.0, 75.0, 50.0, 58.0, 47.0, 50.0, 58.0, 61.0, 64.0, 58.0, 61.0, 64.0, 72.0, 75.0, 78.0, 72.0, 75.0, 127.0, 135.0, 138.0, 141.0, 135.0, 138.0, 141.0, 149.0, 152.0, 155.0, 149.0, 152.0, 155.0, 163.0, 166.0, 267.0, 256.0, 257.0, 267.0, 270.0, 278.0, 267.0, 270.0, 278.0, 281.0, 289.0, 278.0, 281.0, 289.0, 292.0, 267.0, 256.0, 355.0, 267.0, 270.0, 278.0, 267.0, 366.0, 278.0, 281.0, 289.0, 278.0, 281.0, 289.0, 292.0, 344.0, 347.0, 355.0, 344.0, 347.0, 355.0, 358.0, 366.0, 355.0, 358.0, 366.0, 369.0, 372.0, 366.0, 369.0}},
    {"max_2d_column_major", "MaxPool", {1, 2, 5, 7}, {1, 2, 3, 3},
     {2, 3}, {2, 2}, {1, 0, 0, 1}, {1, 1}, false, false, 2, 1,
     {0.5, 1.5, 1.1666666666666667, 1.5, 1.1666666666666667, 0.8333333333333334, 1.1666666666666667, 1.5, 1.5, 1.5, 1.1666666666666667, 1.1666666666666667, 1.1666666666666667, 0.8333333333333334, 1.5, 1.5, 1.5, 1.5},
     {5.0, 15.0, 30.0, 2.0, 17.0, 32.0, 4.0, 23.0, 23.0, 40.0, 55.0, 55.0, 42.0, 57.0, 61.0, 48.0, 48.0, 69.0}},
    {"max_3d_column_major", "MaxPool", {1, 1, 3, 4, 5}, {1, 1, 2, 2, 2},
     {2, 2, 2}, {1, 2, 2}, {0, 0, 0, 0, 0, 0}, {1, 1, 1}, false, false, 2, 1,
     {1.5, 1.5, 1.5, 1.1666666666666667, 1.5, 1.5, 1.5, 1.5},
     {4.0, 36.0, 22.0, 33.0, 4.0, 29.0, 22.0, 47.0}},
    {"avg_3d_dilated_include_pad_ceil", "AveragePool", {1, 2, 5, 6, 7}, {1, 2, 3, 4, 3},
     {2, 3, 2}, {2, 2, 3}, {1, 1, 0, 1, 1, 1}, {2, 1, 2}, true, true, 2, 0,
     {-0.19444444444444442, 0.0, -0.27777777777777773, -0.11111111111111112, -0.2777777777777778, -0.08333333333333333, -0.2777777777777778, -0.13888888888888887, 0.36111111111111116, -0.3333333333333333, 0.04166666666666666, 0.2916666666666667, -0.13888888888888887, -0.055555555555555546, -0.611111111111111, 0.0, -0.3333333333333333, 0.05555555555555556, -0.3333333333333333, -0.055555555555555546, 0.3333333333333334, -0.24999999999999997, 0.04166666666666666, 0.08333333333333334, 0.055555555555555546, -0.055555555555555546, -0.3333333333333333, 0.11111111111111112, -0.055555555555555525, 0.13888888888888887, -0.055555555555555525, 0.08333333333333333, -0.027777777777777773, 0.08333333333333334, 0.0, -0.20833333333333334, -0.027777777777777773, -0.13888888888888887, -0.11111111111111112, -0.16666666666666666, -0.027777777777777752, -0.1388888888888889, -0.027777777777777752, 0.11111111111111112, -0.3055555555555555, 0.25, 0.16666666666666669, -0.041666666666666664, -0.1111111111111111, -0.3333333333333333, -0.2777777777777778, -0.4166666666666667, -0.13888888888888892, -0.6666666666666666, -0.13888888888888892, -0.16666666666666666, -0.38888888888888884, 0.0, -0.16666666666666663, 0.3333333333333333, -0.08333333333333333, -0.19444444444444445, -0.16666666666666666, -0.25, -0.11111111111111112, -0.5277777777777778, -0.11111111111111112, -0.27777777777777773, -0.08333333333333333, -0.25, -0.3333333333333333, 0.375},
     {}},
    {"avg_3d_dilated_exclude_pad", "AveragePool", {1, 1, 6, 5, 7}, {1, 1, 4, 3, 4},
     {3, 2, 2}, {1, 2, 2}, {2, 1, 1, 0, 1, 1}, {2, 2, 1}, false, false, 2, 0,
     {-1.0, -0.25, -0.1666666666666666, -0.08333333333333331, -0.25, -0.4166666666666667, 0.12500000000000006, -0.25, 0.5, -0.5833333333333333, 0.4166666666666667, -0.41666666666666663, 0.0, -0.1666666666666666, -0.08333333333333331, 0.0, -0.16666666666666666, 0.12500000000000006, -0.25, -0.16666666666666663, -0.33333333333333337, 0.4166666666666667, -0.41666666666666663, -0.3333333333333333, -0.611111111111111, -0.1666666666666667, -0.38888888888888884, 1.850371707708594e-17, -0.16666666666666666, -0.3333333333333333, -0.24999999999999992, -0.16666666666666666, 0.2777777777777778, -0.49999999999999994, -0.11111111111111109, -0.3333333333333333, 0.3888888888888889, -0.38888888888888884, 1.850371707708594e-17, -0.2222222222222222, 0.22222222222222224, -0.24999999999999992, -0.16666666666666666, -0.08333333333333329, 0.055555555555555546, -0.11111111111111109, -0.3333333333333333, 0.05555555555555556},
     {}},
    {"avg_1d_ceil_include_pad", "AveragePool", {1, 2, 10}, {1, 2, 4},
     {4}, {3}, {2, 1}, {1}, true, true, 2, 0,
     {-0.3333333333333333, 0.3333333333333333, 2.0816681711721685e-17, -0.20833333333333334, -0.5833333333333333, -0.16666666666666663, 0.4166666666666667, -0.125},
     {}},
    {"lp_2d_p3_pads", "LpPool", {1, 2, 5, 6}, {1, 2, 3, 3},
     {2, 3}, {2, 2}, {1, 1, 0, 1}, {1, 1}, false, false, 3, 0,
     {1.8456471352586372, 1.5977447005954508, 1.7062735436216518, 1.3192972032268018, 1.9930313023839146, 2.1577543173006104, 1.9428255610838188, 2.083644397996745, 2.1247703626430314, 1.581253038966881, 1.900622209951254, 1.900622209951254, 1.59834899138703, 2.124770362643031, 2.083644397996745, 1.9899184018821412, 2.15775431730061, 1.9930313023839146},
     {}},
    {"lp_1d_dilated", "LpPool", {2, 1, 9}, {2, 1, 5},
     {3}, {1}, {0, 0}, {2}, false, false, 2, 0,
     {2.0207259421636903, 1.9649710204252662, 1.4433756729740645, 1.9075871903765995, 1.9075871903765995, 2.1794494717703365, 1.6583123951777, 2.0207259421636903, 1.9649710204252662, 1.4433756729740645},
     {}},
};

Tensor onnx_case_input(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i) v.push_back((static_cast<double>((i * 7) % 11) - 5.5) / 3);
  return from_vector<double>(v, s);
}

TEST(PoolNd, MatchesOnnxReferenceCases) {
  for (const auto& c : kOnnxCases) {
    SCOPED_TRACE(c.name);
    PoolNdOptions o{c.kernel, c.stride, c.pads, c.dilation, c.ceil_mode, c.count_include_pad, c.storage_order};
    Tensor x = onnx_case_input(c.x);
    Tensor want = from_vector<double>(c.want, c.y);
    for (const Tensor& in : {x, testing::noncontiguous(x)}) {
      if (c.op == "MaxPool") {
        auto [v, i] = max_pool(in, o);
        EXPECT_TRUE(all_close(v, want, Tol{0, 0}));
        EXPECT_EQ(i.dtype(), DType::i64);
        EXPECT_TRUE(all_close(i, from_vector<double>(c.want_indices, c.y), Tol{0, 0}));
      } else if (c.op == "AveragePool") {
        EXPECT_TRUE(all_close(avg_pool(in, o), want, Tol{1e-12, 1e-12}));
      } else {
        EXPECT_TRUE(all_close(lp_pool(in, o, c.p), want, Tol{1e-12, 1e-12}));
      }
    }
  }
}

struct Pool2dCase {
  Shape x;
  std::vector<int64_t> kernel, stride, padding, dilation;  // padding [top, left, bottom, right]
  bool ceil_mode, count_include_pad;
};

const std::vector<Pool2dCase> k2dCases = {
    {{2, 3, 7, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, false, false},
    {{1, 2, 8, 7}, {2, 3}, {2, 1}, {0, 1, 1, 2}, {1, 1}, true, true},
    {{1, 3, 11, 9}, {3, 2}, {1, 2}, {2, 1, 2, 0}, {2, 3}, true, false},
    {{2, 1, 5, 5}, {5, 5}, {1, 1}, {0, 0, 0, 0}, {1, 1}, false, false},
    {{1, 1, 33, 17}, {4, 3}, {3, 3}, {1, 1, 2, 2}, {1, 1}, true, true},
};

TEST(PoolNd, TwoDMatchesFloat64ReferenceInEveryDType) {
  for (DType t : testing::kFloatDTypes) {
    uint64_t seed = 3;
    for (const auto& c : k2dCases) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " x " + shape_str(c.x));
      PoolNdOptions o{c.kernel, c.stride, {c.padding[0], c.padding[1], c.padding[2], c.padding[3]}, c.dilation,
                      c.ceil_mode, c.count_include_pad};
      Tensor x = random_tensor(c.x, t, seed++);
      Tensor want_max = ref::pool2d(true, x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode, false);
      EXPECT_TRUE(all_close(max_pool(testing::noncontiguous(x), o).first, want_max));
      if (c.dilation == std::vector<int64_t>{1, 1}) {
        Tensor want_avg = ref::pool2d(false, x, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode, c.count_include_pad);
        EXPECT_TRUE(all_close(avg_pool(x, o), want_avg));
        EXPECT_TRUE(all_close(avg_pool(testing::noncontiguous(x), o), want_avg));
      }
    }
  }
}

TEST(PoolNd, MaxPoolOnIntegersAndNaN) {
  for (DType t : {DType::u8, DType::i8, DType::i32, DType::i64}) {
    Tensor x = random_tensor({1, 2, 7, 6}, t, 9, 1, 100);
    PoolNdOptions o{{3, 2}, {2, 2}, {1, 0, 1, 1}, {}, true, false};
    Tensor want = ref::pool2d(true, x, {3, 2}, {2, 2}, {1, 0, 1, 1}, {1, 1}, true, false);
    auto [v, i] = max_pool(x, o);
    EXPECT_EQ(v.dtype(), t);
    EXPECT_TRUE(all_close(v, want, Tol{0, 0})) << dtype_name(t);
  }
  Tensor x = from_vector<float>({1, NAN, 3, 2, 5, 4}, Shape{1, 1, 6});
  auto [v, i] = max_pool(x, PoolNdOptions{{3}, {3}});
  EXPECT_TRUE(std::isnan(v.data<float>()[0]));
  EXPECT_EQ(v.data<float>()[1], 5.0f);
  EXPECT_EQ(i.data<int64_t>()[0], 1);
  EXPECT_EQ(i.data<int64_t>()[1], 4);
}

double dot(const Tensor& a, const Tensor& b) {
  auto av = ref::values(a), bv = ref::values(b);
  double s = 0;
  for (size_t k = 0; k < av.size(); ++k) s += av[k] * bv[k];
  return s;
}

TEST(PoolNd, AvgPoolBackwardIsTheAdjoint) {
  uint64_t seed = 20;
  for (const auto& c : kOnnxCases) {
    if (c.op != "AveragePool") continue;
    SCOPED_TRACE(c.name);
    Attrs a{{"kernel", c.kernel}, {"stride", c.stride}, {"pads", c.pads}, {"dilation", c.dilation},
            {"ceil_mode", c.ceil_mode}, {"count_include_pad", c.count_include_pad}};
    Tensor x = random_tensor(c.x, DType::f64, seed++);
    Tensor g = random_tensor(c.y, DType::f64, seed++);
    Tensor y = dispatch1(op("avg_pool"), {x}, a);
    a.set("input_shape", std::vector<int64_t>(c.x.begin(), c.x.end()));
    Tensor dx = dispatch1(op("avg_pool_backward"), {g}, a);
    EXPECT_EQ(dx.shape(), c.x);
    const double lhs = dot(y, g), rhs = dot(x, dx);
    EXPECT_NEAR(lhs, rhs, 1e-10 * (1 + std::fabs(lhs)));
  }
}

// max_pool's vjp rule, called directly (the autograd layer calls it the same way).
TEST(PoolNd, MaxPoolGradientGoesToTheSelectedElements) {
  for (int64_t order : {0, 1}) {
    SCOPED_TRACE("storage_order " + std::to_string(order));
    Tensor x = random_tensor({2, 3, 7, 6}, DType::f64, 5);
    Attrs a = op("max_pool").bind_attrs({{"kernel", std::vector<int64_t>{3, 2}}, {"stride", std::vector<int64_t>{2, 2}},
                                         {"pads", std::vector<int64_t>{1, 1, 1, 0}}, {"storage_order", order}});
    auto outs = dispatch(op("max_pool"), {x}, a);
    Tensor g = random_tensor(outs[0].shape(), DType::f64, 6);
    std::vector<TensorMeta> metas{{x.dtype(), x.shape()}};
    std::vector<Tensor> inputs{Tensor()};
    VjpCtx ctx{inputs, outs, a, {true}, metas};
    std::vector<Tensor> grads{g, Tensor()};
    auto dx = op("max_pool").vjp_rule()->fn(ctx, grads);
    ASSERT_EQ(dx.size(), 1u);
    // Expected: each window's gradient added at its element, found from the row-major indices.
    auto row = dispatch(op("max_pool"), {x}, op("max_pool").bind_attrs({{"kernel", std::vector<int64_t>{3, 2}},
                                                                       {"stride", std::vector<int64_t>{2, 2}},
                                                                       {"pads", std::vector<int64_t>{1, 1, 1, 0}}}));
    std::vector<double> want(static_cast<size_t>(x.numel()), 0.0);
    auto iv = ref::values(row[1]), gv = ref::values(g);
    for (size_t k = 0; k < iv.size(); ++k) want[static_cast<size_t>(iv[k])] += gv[k];
    EXPECT_TRUE(all_close(dx[0], from_vector<double>(want, x.shape()), Tol{1e-12, 1e-12}));
  }
}

TEST(PoolNd, ErrorsNameTheProblem) {
  Tensor x = ones({1, 2, 5, 5});
  EXPECT_KILN_ERROR(avg_pool(ones({2, 5}), PoolNdOptions{{2}}), "avg_pool", "rank 3, 4 or 5", "[2, 5]");
  EXPECT_KILN_ERROR(max_pool(ones({1, 1, 2, 2, 2, 2}), PoolNdOptions{{1, 1, 1, 1}}), "max_pool", "rank 3, 4 or 5",
                    "[1, 1, 2, 2, 2, 2]");
  EXPECT_KILN_ERROR(avg_pool(x, PoolNdOptions{{2}}), "avg_pool", "kernel must have 2 values", "[1, 2, 5, 5]");
  EXPECT_KILN_ERROR(avg_pool(x, PoolNdOptions{{2, 2}, {1, 0}}), "stride values must be >= 1");
  EXPECT_KILN_ERROR(max_pool(x, PoolNdOptions{{2, 2}, {}, {1, 1}}), "max_pool", "pads must be [begin..., end...]",
                    "4 values");
  EXPECT_KILN_ERROR(max_pool(x, PoolNdOptions{{2, 2}, {}, {2, 0, 0, 0}}), "pads", "smaller than the kernel extent 2");
  EXPECT_KILN_ERROR(max_pool(x, PoolNdOptions{{7, 2}}), "kernel extent 7", "larger than the padded input");
  EXPECT_KILN_ERROR(avg_pool(ones({1, 2, 5}, DType::i32), PoolNdOptions{{2}}), "avg_pool", "floating", "i32");
  EXPECT_KILN_ERROR(lp_pool(x, PoolNdOptions{{2, 2}}, 0), "lp_pool", "p must be >= 1");
  EXPECT_KILN_ERROR(dispatch1(op("max_pool"), {x}, {}), "max_pool", "kernel");
  PoolNdOptions so{{2, 2}};
  so.storage_order = 2;
  EXPECT_KILN_ERROR(max_pool(x, so), "max_pool", "storage_order must be 0 (row-major) or 1", "got 2");
}

}  // namespace
}  // namespace kiln
