// Reductions against the float64 reference (ref::reduce, ref::arg_reduce): every op on every
// dtype, odd sizes, single/multiple/negative/all axes with and without keepdim, non-contiguous,
// transposed and broadcast inputs; result dtypes; NaN, ties, empty slices and error messages.
// Tolerances: tol_for(result dtype) (one final rounding, since rows accumulate in f64), unless a
// test states otherwise.
#include <cmath>
#include <limits>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

const char* const kReduceOps[] = {"sum", "prod", "mean", "max", "min", "var", "std_dev", "logsumexp", "norm"};

Tensor call(const std::string& name, const Tensor& x, const Axes& axes, bool keepdim) {
  return dispatch1(kiln::op(name), {x}, {{"axes", axes}, {"keepdim", keepdim}});
}

Attrs ref_attrs(const Axes& axes, bool keepdim) { return {{"axes", axes}, {"keepdim", keepdim}}; }

// Inputs whose products stay finite and exact: |v| <= 2 for short slices, near 1 (or +-1 for
// integers) for long ones.
Tensor input_for(const std::string& op, const Shape& shape, DType t, uint64_t seed) {
  if (op == "prod" && numel_of(shape) > 50) {
    if (is_floating(t)) return random_tensor(shape, t, seed, 0.9, 1.1);
    return random_tensor(shape, t, seed, -1, 1);
  }
  return random_tensor(shape, t, seed);
}

struct AxesCase {
  Shape shape;
  Axes axes;
};

std::vector<AxesCase> axes_cases(int64_t n) {
  return {{{n}, {}},           {{n}, {0}},         {{n}, {-1}},         {{3, n}, {1}},   {{3, n}, {0}},
          {{3, n}, {-1, 0}},   {{2, n, 3}, {1}},   {{2, n, 3}, {0, 2}}, {{2, n, 3}, {}}, {{2, n, 3}, {2, -3}},
          {{2, n, 3}, {-2}}};
}

// The keepdim shape, written out independently of the kernels' inference.
Shape keepdim_shape(Shape shape, const Axes& axes) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  if (axes.empty()) return Shape(shape.size(), 1);
  for (int64_t a : axes) shape[static_cast<size_t>(a < 0 ? a + rank : a)] = 1;
  return shape;
}

TEST(Reduce, MatchesReferenceOnEveryDTypeSizeAndAxisSet) {
  for (const char* name : kReduceOps) {
    for (DType t : testing::kAllDTypes) {
      for (int64_t n : testing::kOddSizes) {
        for (const AxesCase& c : axes_cases(n)) {
          Tensor x = input_for(name, c.shape, t, 11 + static_cast<uint64_t>(n));
          Tensor want = ref::reduce(name, x, ref_attrs(c.axes, false));
          Tensor want_keep = want.reshape(keepdim_shape(c.shape, c.axes));
          EXPECT_TRUE(all_close(call(name, x, c.axes, false), want))
              << name << " " << dtype_name(t) << " " << shape_str(c.shape) << " axes " << shape_str(c.axes);
          EXPECT_TRUE(all_close(call(name, x, c.axes, true), want_keep))
              << name << " " << dtype_name(t) << " " << shape_str(c.shape) << " axes " << shape_str(c.axes) << " keepdim";
        }
      }
    }
  }
}

TEST(Reduce, NonContiguousTransposedAndBroadcastInputs) {
  for (const char* name : kReduceOps) {
    for (DType t : {DType::f32, DType::f64, DType::f16, DType::i32, DType::u8}) {
      Tensor x = input_for(name, {7, 33, 5}, t, 21);
      for (const Axes& axes : std::vector<Axes>{{}, {0}, {1}, {2}, {0, 2}, {-1, -2}}) {
        Tensor want = ref::reduce(name, x, ref_attrs(axes, false));
        EXPECT_TRUE(all_close(call(name, noncontiguous(x), axes, false), want))
            << name << " " << dtype_name(t) << " noncontiguous axes " << shape_str(axes);
        Tensor p = x.permute({2, 0, 1});  // a transposed layout of the same values
        EXPECT_TRUE(all_close(call(name, p, axes, true), ref::reduce(name, p, ref_attrs(axes, true))))
            << name << " " << dtype_name(t) << " permuted axes " << shape_str(axes);
      }
      Tensor e = input_for(name, {7, 33}, t, 22).slice(0, 0, 1).expand({7, 33});  // stride 0 along dim 0
      for (const Axes& axes : std::vector<Axes>{{0}, {1}, {}})
        EXPECT_TRUE(all_close(call(name, e, axes, false), ref::reduce(name, e, ref_attrs(axes, false))))
            << name << " " << dtype_name(t) << " expanded axes " << shape_str(axes);
      Tensor m = input_for(name, {33, 7}, t, 23).t();
      EXPECT_TRUE(all_close(call(name, m, {1}, false), ref::reduce(name, m, ref_attrs({1}, false))))
          << name << " " << dtype_name(t) << " transposed";
    }
  }
}

// Many short rows: the row loop splits them over the thread pool (about 32768 elements a task).
TEST(Reduce, ManyRowsTakeTheParallelPath) {
  Tensor x = random_tensor({6001, 17}, DType::f32, 61);
  for (const char* name : kReduceOps) {
    Tensor in = input_for(name, {6001, 17}, DType::f32, 61);
    EXPECT_TRUE(all_close(call(name, in, {1}, false), ref::reduce(name, in, ref_attrs({1}, false)))) << name;
    EXPECT_TRUE(all_close(call(name, noncontiguous(in), {-1}, true), ref::reduce(name, in, ref_attrs({-1}, true))))
        << name << " noncontiguous";
  }
  EXPECT_TRUE(all_close(argmax(x.t(), 0), ref::arg_reduce("argmax", x.t(), 0)));
  EXPECT_TRUE(all_close(sum(x, {0}), ref::reduce("sum", x, ref_attrs({0}, false))));
}

// Note [Sums across slices]: split attention's x.sum(dim=1) over [B, radix, C, H, W], and one axis
// in the middle or first with an inner block longer than a chunk, keepdim or not.
TEST(Reduce, SumsAcrossSlices) {
  const std::vector<std::pair<Shape, Axes>> cases = {
      {{1, 2, 16, 9, 9}, {1}}, {{2, 4, 5, 33}, {1}}, {{3, 2, 1100}, {1}}, {{5, 7, 70}, {0}}, {{2, 3, 5, 33}, {-3}}};
  for (const auto& [shape, axes] : cases)
    for (bool keepdim : {false, true}) {
      Tensor x = random_tensor(shape, DType::f32, 62);
      EXPECT_TRUE(all_close(call("sum", x, axes, keepdim), ref::reduce("sum", x, ref_attrs(axes, keepdim))))
          << shape_str(shape) << " keepdim " << keepdim;
    }
}

TEST(Reduce, ResultDTypes) {
  EXPECT_EQ(sum(ones({3}, DType::i32)).dtype(), DType::i64);
  EXPECT_EQ(sum(ones({3}, DType::u8)).dtype(), DType::i64);
  EXPECT_EQ(sum(ones({3}, DType::boolean)).dtype(), DType::i64);
  EXPECT_EQ(prod(ones({3}, DType::i8)).dtype(), DType::i64);
  EXPECT_EQ(sum(ones({3}, DType::f16)).dtype(), DType::f16);
  EXPECT_EQ(sum(ones({3}, DType::bf16)).dtype(), DType::bf16);
  EXPECT_EQ(sum(ones({3}, DType::f64)).dtype(), DType::f64);
  EXPECT_EQ(mean(ones({3}, DType::i32)).dtype(), DType::f32);
  EXPECT_EQ(var(ones({3}, DType::i64)).dtype(), DType::f32);
  EXPECT_EQ(norm(ones({3}, DType::f16)).dtype(), DType::f16);
  EXPECT_EQ(logsumexp(ones({3}, DType::boolean)).dtype(), DType::f32);
  EXPECT_EQ(max(ones({3}, DType::i8)).dtype(), DType::i8);
  EXPECT_EQ(min(ones({3}, DType::boolean)).dtype(), DType::boolean);
  EXPECT_EQ(argmax(ones({3}, DType::f16), 0).dtype(), DType::i64);
  // Bool: sum counts, prod is "all", max is "any".
  Tensor b = from_vector<bool>({true, false, true});
  EXPECT_EQ(sum(b).item<int64_t>(), 2);
  EXPECT_EQ(prod(b).item<int64_t>(), 0);
  EXPECT_TRUE(max(b).item<bool>());
  EXPECT_FALSE(min(b).item<bool>());
  EXPECT_FLOAT_EQ(mean(b).item<float>(), 2.0f / 3.0f);  // f32 result
}

TEST(Reduce, ShapesWithKeepdimAndZeroDim) {
  Tensor x = random_tensor({2, 3, 4}, DType::f32, 3);
  EXPECT_EQ(sum(x, {1}).shape(), (Shape{2, 4}));
  EXPECT_EQ(sum(x, {1}, true).shape(), (Shape{2, 1, 4}));
  EXPECT_EQ(sum(x).shape(), Shape{});
  EXPECT_EQ(sum(x, {}, true).shape(), (Shape{1, 1, 1}));
  EXPECT_EQ(argmax(x, -1, true).shape(), (Shape{2, 3, 1}));
  Tensor s = scalar_tensor(2.5);
  EXPECT_EQ(sum(s).item<double>(), 2.5);
  EXPECT_EQ(sum(s, {0}).shape(), Shape{});
  EXPECT_EQ(max(s, {-1}).item<double>(), 2.5);
  EXPECT_EQ(argmax(s, 0).item<int64_t>(), 0);
}

TEST(Reduce, EmptySlices) {
  Tensor z = zeros({0, 3});
  EXPECT_TRUE(all_close(sum(z, {0}), zeros({3}, DType::f64)));
  EXPECT_TRUE(all_close(prod(z, {0}), ones({3}, DType::f64)));
  EXPECT_TRUE(std::isnan(mean(z).item<double>()));
  EXPECT_EQ(logsumexp(z).item<double>(), -std::numeric_limits<double>::infinity());
  EXPECT_EQ(norm(z).item<double>(), 0.0);
  EXPECT_EQ(sum(zeros({0, 3}, DType::i32)).item<int64_t>(), 0);
  // Reducing over a non-empty axis of an empty tensor has no slices at all: fine.
  EXPECT_EQ(max(z, {1}).shape(), Shape{0});
  EXPECT_KILN_ERROR(max(z), "max", "axis 0", "size 0", "[0, 3]");
  EXPECT_KILN_ERROR(min(z, {0}), "min", "axis 0", "size 0", "[0, 3]");
  EXPECT_KILN_ERROR(argmax(z, 0), "argmax", "axis 0", "size 0", "[0, 3]");
}

TEST(Reduce, MaxMinPropagateNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (DType t : testing::kFloatDTypes) {
    // NaN first, in the middle, last, and next to infinities; one row without NaN.
    Tensor x = from_vector<float>({nan, 1, 2, 3,  //
                                   1, nan, 5, -inf,
                                   inf, 2, 3, nan,
                                   -1, -inf, inf, 4},
                                  Shape{4, 4})
                   .to(t);
    Tensor mx = max(x, {1}), mn = min(x, {1});
    EXPECT_TRUE(all_close(mx, from_vector<double>({NAN, NAN, NAN, INFINITY}))) << dtype_name(t);
    EXPECT_TRUE(all_close(mn, from_vector<double>({NAN, NAN, NAN, -INFINITY}))) << dtype_name(t);
    EXPECT_TRUE(std::isnan(max(x).item<double>())) << dtype_name(t);
    EXPECT_TRUE(all_close(max(noncontiguous(x), {0}), ref::reduce("max", x, ref_attrs({0}, false)))) << dtype_name(t);
    EXPECT_TRUE(std::isnan(logsumexp(x, {1}).select(0, 0).item<double>()));
  }
}

TEST(Reduce, ArgMaxArgMinMatchReference) {
  for (DType t : testing::kAllDTypes) {
    for (int64_t n : testing::kOddSizes) {
      // Few distinct values, so ties are common.
      Tensor x = random_tensor({3, n, 2}, t, 31 + static_cast<uint64_t>(n), -3, 3);
      for (int64_t axis : {0, 1, 2, -1}) {
        for (bool last : {false, true}) {
          for (const char* name : {"argmax", "argmin"}) {
            Tensor got = name == std::string("argmax") ? argmax(x, axis, false, last) : argmin(x, axis, false, last);
            EXPECT_TRUE(all_close(got, ref::arg_reduce(name, x, axis, false, last)))
                << name << " " << dtype_name(t) << " n=" << n << " axis " << axis << " last " << last;
          }
        }
      }
      Tensor nc = noncontiguous(x);
      EXPECT_TRUE(all_close(argmax(nc, 1, true), ref::arg_reduce("argmax", x, 1, true))) << dtype_name(t);
      EXPECT_TRUE(all_close(argmin(x.transpose(0, 1), 0), ref::arg_reduce("argmin", x.transpose(0, 1), 0)));
    }
  }
}

TEST(Reduce, ArgMaxTiesAndNaN) {
  Tensor x = from_vector<float>({1, 3, 3, 2, 3});
  EXPECT_EQ(argmax(x, 0).item<int64_t>(), 1);
  EXPECT_EQ(argmax(x, 0, false, true).item<int64_t>(), 4);
  Tensor y = from_vector<int32_t>({5, 1, 4, 1, 7});
  EXPECT_EQ(argmin(y, 0).item<int64_t>(), 1);
  EXPECT_EQ(argmin(y, 0, false, true).item<int64_t>(), 3);
  Tensor z = from_vector<float>({1, NAN, 9, NAN});
  EXPECT_EQ(argmax(z, 0).item<int64_t>(), 1);
  EXPECT_EQ(argmin(z, 0).item<int64_t>(), 1);
  EXPECT_EQ(argmax(z, 0, false, true).item<int64_t>(), 3);
  Tensor b = from_vector<bool>({false, true, true});
  EXPECT_EQ(argmax(b, 0).item<int64_t>(), 1);
  EXPECT_EQ(argmin(b, 0).item<int64_t>(), 0);
}

TEST(Reduce, VarianceCorrection) {
  Tensor x = from_vector<double>({1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(var(x).item<double>(), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(var(x, {}, 0).item<double>(), 1.25);
  EXPECT_DOUBLE_EQ(std_dev(x, {}, 0).item<double>(), std::sqrt(1.25));
  EXPECT_TRUE(std::isnan(var(from_vector<double>({3.0})).item<double>()));  // n - correction = 0
  for (int64_t corr : {0, 1, 2}) {
    Tensor y = random_tensor({5, 33}, DType::f32, 41);
    Attrs a = {{"axes", Axes{1}}, {"keepdim", false}, {"correction", corr}};
    EXPECT_TRUE(all_close(var(y, {1}, corr), ref::reduce("var", y, a))) << corr;
    EXPECT_TRUE(all_close(std_dev(y, {1}, corr), ref::reduce("std_dev", y, a))) << corr;
  }
  EXPECT_KILN_ERROR(var(x, {}, -1), "var", "correction", "-1");
}

TEST(Reduce, LogSumExpIsStable) {
  Tensor big = from_vector<float>({1000, 1000, 999});
  EXPECT_NEAR(logsumexp(big).item<double>(), 1000 + std::log(1 + 1 + std::exp(-1.0)), 1e-3);
  Tensor small = from_vector<float>({-1000, -1000});
  EXPECT_NEAR(logsumexp(small).item<double>(), -1000 + std::log(2.0), 1e-3);
  Tensor ninf = full({3}, -std::numeric_limits<double>::infinity());
  EXPECT_EQ(logsumexp(ninf).item<double>(), -std::numeric_limits<double>::infinity());
  Tensor pinf = from_vector<float>({1, INFINITY});
  EXPECT_EQ(logsumexp(pinf).item<double>(), std::numeric_limits<double>::infinity());
}

TEST(Reduce, LongFloatSumIsAccurate) {
  Generator g(5);
  Tensor x = rand({1000000}, DType::f32, &g);
  double exact = 0;
  for (double v : ref::values(x)) exact += v;
  // Accumulating in f64 leaves only the final f32 rounding: 2^-24 relative.
  EXPECT_NEAR(sum(x).item<double>(), exact, exact * 6e-8);
  EXPECT_NEAR(mean(x).item<double>(), exact / 1e6, exact / 1e6 * 6e-8);
  Tensor h = x.to(DType::bf16);
  double exact_h = 0;
  for (double v : ref::values(h)) exact_h += v;
  EXPECT_NEAR(sum(h).item<double>(), exact_h, exact_h * 4e-3);  // one bf16 rounding (2^-8)
}

TEST(Reduce, BadAxesNameOpAxisAndRank) {
  Tensor x = ones({2, 3});
  EXPECT_KILN_ERROR(sum(x, {2}), "sum", "axis 2", "rank 2");
  EXPECT_KILN_ERROR(mean(x, {-3}), "mean", "axis -3", "rank 2");
  EXPECT_KILN_ERROR(max(x, {0, -2}), "max", "axis -2", "more than once");
  EXPECT_KILN_ERROR(var(x, {1, 1}), "var", "axis 1", "more than once");
  EXPECT_KILN_ERROR(argmax(x, 5), "argmax", "axis 5", "rank 2");
  EXPECT_KILN_ERROR(argmin(x, -3), "argmin", "axis -3", "rank 2");
  EXPECT_KILN_ERROR(logsumexp(x, {7}), "logsumexp", "axis 7", "rank 2");
  EXPECT_KILN_ERROR(sum(Tensor()), "sum", "'x'");
}

TEST(Reduce, TensorMethodsForward) {
  Tensor x = random_tensor({4, 5}, DType::f32, 51);
  EXPECT_TRUE(all_close(x.sum({1}), ref::reduce("sum", x, ref_attrs({1}, false))));
  EXPECT_TRUE(all_close(x.max({0}, true), ref::reduce("max", x, ref_attrs({0}, true))));
  EXPECT_TRUE(all_close(x.argmin(1), ref::arg_reduce("argmin", x, 1)));
  const OpDef& s = kiln::op("sum");
  ASSERT_TRUE(s.onnx_mapping().has_value());
  EXPECT_EQ(s.onnx_mapping()->op_type, "ReduceSum");
  EXPECT_EQ(kiln::op("argmax").onnx_mapping()->since_opset, 13);
  EXPECT_FALSE(kiln::op("var").onnx_mapping().has_value());
}

}  // namespace
}  // namespace kiln
