// cumsum against the float64 reference (ref::cumsum): every dtype, odd sizes, every axis of a
// 3-D tensor with exclusive/reverse, non-contiguous and transposed inputs, result dtypes, the
// accuracy of a long f32 scan, and error cases. Tolerance: tol_for(result dtype) unless stated.
#include <cmath>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

TEST(Scan, CumsumMatchesReferenceOnEveryDTypeAndSize) {
  for (DType t : testing::kAllDTypes) {
    for (int64_t n : testing::kOddSizes) {
      Tensor x = random_tensor({n}, t, 3 + static_cast<uint64_t>(n));
      for (bool exclusive : {false, true})
        for (bool reverse : {false, true})
          EXPECT_TRUE(all_close(cumsum(x, 0, exclusive, reverse), ref::cumsum(x, 0, exclusive, reverse)))
              << dtype_name(t) << " n=" << n << " exclusive " << exclusive << " reverse " << reverse;
      Tensor m = random_tensor({3, n}, t, 5 + static_cast<uint64_t>(n));
      EXPECT_TRUE(all_close(cumsum(m, -1), ref::cumsum(m, -1))) << dtype_name(t) << " n=" << n;
      EXPECT_TRUE(all_close(cumsum(m, 0), ref::cumsum(m, 0))) << dtype_name(t) << " n=" << n;
    }
  }
}

TEST(Scan, EveryAxisOf3DWithExclusiveReverseAndStrides) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::u8, DType::boolean}) {
    Tensor x = random_tensor({5, 7, 33}, t, 17);
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      for (bool exclusive : {false, true}) {
        for (bool reverse : {false, true}) {
          Tensor want = ref::cumsum(x, axis, exclusive, reverse);
          EXPECT_TRUE(all_close(cumsum(x, axis, exclusive, reverse), want))
              << dtype_name(t) << " axis " << axis << " exclusive " << exclusive << " reverse " << reverse;
          EXPECT_TRUE(all_close(cumsum(noncontiguous(x), axis, exclusive, reverse), want))
              << dtype_name(t) << " noncontiguous axis " << axis;
          Tensor p = x.permute({2, 0, 1});
          EXPECT_TRUE(all_close(cumsum(p, axis, exclusive, reverse), ref::cumsum(p, axis, exclusive, reverse)))
              << dtype_name(t) << " permuted axis " << axis;
        }
      }
    }
  }
}

TEST(Scan, ResultDTypesAndSmallCases) {
  EXPECT_EQ(cumsum(ones({3}, DType::i32), 0).dtype(), DType::i64);
  EXPECT_EQ(cumsum(ones({3}, DType::boolean), 0).dtype(), DType::i64);
  EXPECT_EQ(cumsum(ones({3}, DType::u8), 0).dtype(), DType::i64);
  EXPECT_EQ(cumsum(ones({3}, DType::f16), 0).dtype(), DType::f16);
  EXPECT_EQ(cumsum(ones({3}, DType::f64), 0).dtype(), DType::f64);
  Tensor x = from_vector<int32_t>({1, 2, 3, 4});
  EXPECT_TRUE(all_close(cumsum(x, 0), from_vector<double>({1, 3, 6, 10})));
  EXPECT_TRUE(all_close(cumsum(x, 0, true), from_vector<double>({0, 1, 3, 6})));
  EXPECT_TRUE(all_close(cumsum(x, 0, false, true), from_vector<double>({10, 9, 7, 4})));
  EXPECT_TRUE(all_close(cumsum(x, 0, true, true), from_vector<double>({9, 7, 4, 0})));
  // u8 inputs do not wrap at 255: they sum in i64.
  EXPECT_EQ(cumsum(full({300}, 200, DType::u8), 0).select(0, 299).item<int64_t>(), 60000);
  // 0-d and empty inputs.
  EXPECT_EQ(cumsum(scalar_tensor(2.5), 0).item<double>(), 2.5);
  EXPECT_EQ(cumsum(zeros({0, 3}), 0).shape(), (Shape{0, 3}));
  // Broadcast input (stride 0 along the scanned axis).
  Tensor e = from_vector<float>({1, 2}).reshape({1, 2}).expand({4, 2});
  EXPECT_TRUE(all_close(cumsum(e, 0), ref::cumsum(e, 0)));
}

TEST(Scan, LongFloatCumsumIsAccurate) {
  Generator g(9);
  Tensor x = rand({1000000}, DType::f32, &g);
  Tensor got = cumsum(x, 0);
  std::vector<double> v = ref::values(x), c = ref::values(got);
  double exact = 0, worst = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    exact += v[i];
    if (exact > 0) worst = std::max(worst, std::abs(c[i] - exact) / exact);
  }
  EXPECT_LE(worst, 1e-6);  // f64 accumulation: only each output's own f32 rounding (6e-8) remains
  EXPECT_TRUE(all_close(cumsum(x, 0, false, true), ref::cumsum(x, 0, false, true), {1e-6, 1e-6}));
}

// Many short rows: split over the thread pool.
TEST(Scan, ManyRowsTakeTheParallelPath) {
  Tensor x = random_tensor({6001, 17}, DType::f32, 71);
  EXPECT_TRUE(all_close(cumsum(x, 1, true), ref::cumsum(x, 1, true)));
  EXPECT_TRUE(all_close(cumsum(noncontiguous(x), 1, false, true), ref::cumsum(x, 1, false, true)));
  Tensor i = random_tensor({17, 6001}, DType::i32, 73);
  EXPECT_TRUE(all_close(cumsum(i, 0), ref::cumsum(i, 0)));
}

TEST(Scan, Errors) {
  Tensor x = ones({2, 3});
  EXPECT_KILN_ERROR(cumsum(x, 2), "cumsum", "axis 2", "rank 2");
  EXPECT_KILN_ERROR(cumsum(x, -3), "cumsum", "axis -3", "rank 2");
  EXPECT_EQ(kiln::op("cumsum").onnx_mapping()->op_type, "CumSum");
}

}  // namespace
}  // namespace kiln
