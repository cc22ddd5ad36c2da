// cumprod against the reference (ref::cumprod): every dtype at odd sizes, every axis of a 3-D
// tensor with exclusive/reverse, non-contiguous, permuted and broadcast inputs, zeros, special
// values, wrapping integer products, ONNX's CumProd examples, registry entry and errors.
// Tolerance: tol_for(result dtype); integer results are exact.
#include <cmath>
#include <limits>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

// |values| <= 1.5 keep long products finite in f16 (the line's product drifts toward 0).
Tensor input(const Shape& s, DType t, uint64_t seed) { return random_tensor(s, t, seed, -1.5, 1.5); }

TEST(Cumprod, MatchesReferenceOnEveryDTypeAndSize) {
  for (DType t : testing::kAllDTypes) {
    for (int64_t n : testing::kOddSizes) {
      Tensor x = input({n}, t, 3 + static_cast<uint64_t>(n));
      for (bool exclusive : {false, true})
        for (bool reverse : {false, true})
          EXPECT_TRUE(all_close(cumprod(x, 0, exclusive, reverse), ref::cumprod(x, 0, exclusive, reverse)))
              << dtype_name(t) << " n=" << n << " exclusive " << exclusive << " reverse " << reverse;
      Tensor m = input({3, n}, t, 5 + static_cast<uint64_t>(n));
      EXPECT_TRUE(all_close(cumprod(m, -1), ref::cumprod(m, -1))) << dtype_name(t) << " n=" << n;
      EXPECT_TRUE(all_close(cumprod(m, 0), ref::cumprod(m, 0))) << dtype_name(t) << " n=" << n;
    }
  }
}

TEST(Cumprod, EveryAxisOf3DWithExclusiveReverseAndStrides) {
  for (DType t : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::u8, DType::i64, DType::boolean}) {
    Tensor x = input({5, 7, 33}, t, 17);
    for (int64_t axis : {0, 1, 2, -1, -3}) {
      for (bool exclusive : {false, true}) {
        for (bool reverse : {false, true}) {
          const std::string where = std::string(dtype_name(t)) + " axis " + std::to_string(axis) + " exclusive " +
                                    std::to_string(exclusive) + " reverse " + std::to_string(reverse);
          Tensor want = ref::cumprod(x, axis, exclusive, reverse);
          EXPECT_TRUE(all_close(cumprod(x, axis, exclusive, reverse), want)) << where;
          EXPECT_TRUE(all_close(cumprod(noncontiguous(x), axis, exclusive, reverse), want)) << where << " strided";
          Tensor p = x.permute({2, 0, 1});
          EXPECT_TRUE(all_close(cumprod(p, axis, exclusive, reverse), ref::cumprod(p, axis, exclusive, reverse)))
              << where << " permuted";
        }
      }
    }
  }
  // Broadcast input (stride 0 along the scanned axis), 0-d and empty inputs.
  Tensor e = from_vector<float>({1.5f, -2.f}).reshape({1, 2}).expand({5, 2});
  EXPECT_TRUE(all_close(cumprod(e, 0), ref::cumprod(e, 0)));
  EXPECT_TRUE(all_close(cumprod(e, 0, true, true), ref::cumprod(e, 0, true, true)));
  EXPECT_EQ(cumprod(scalar_tensor(2.5), 0).item<double>(), 2.5);
  EXPECT_EQ(cumprod(scalar_tensor(2.5), 0, true).item<double>(), 1.0);
  EXPECT_EQ(cumprod(zeros({0, 3}), 0).shape(), (Shape{0, 3}));
  // Many short rows: split over the thread pool.
  Tensor many = input({6001, 17}, DType::f32, 71);
  EXPECT_TRUE(all_close(cumprod(many, 1, true), ref::cumprod(many, 1, true)));
  EXPECT_TRUE(all_close(cumprod(noncontiguous(many), 1, false, true), ref::cumprod(many, 1, false, true)));
}

// ONNX's CumProd examples (onnx/backend/test/case/node/cumprod.py).
TEST(Cumprod, OnnxExamplesAndResultDTypes) {
  Tensor x = from_vector<double>({1, 2, 3, 4, 5});
  EXPECT_TRUE(all_close(cumprod(x, 0), from_vector<double>({1, 2, 6, 24, 120})));
  EXPECT_TRUE(all_close(cumprod(x, 0, true), from_vector<double>({1, 1, 2, 6, 24})));
  EXPECT_TRUE(all_close(cumprod(x, 0, false, true), from_vector<double>({120, 120, 60, 20, 5})));
  EXPECT_TRUE(all_close(cumprod(x, 0, true, true), from_vector<double>({120, 60, 20, 5, 1})));
  Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_TRUE(all_close(cumprod(m, 0), from_vector<double>({1, 2, 3, 4, 10, 18}, Shape{2, 3})));
  EXPECT_TRUE(all_close(cumprod(m, 1), from_vector<double>({1, 2, 6, 4, 20, 120}, Shape{2, 3})));
  EXPECT_TRUE(all_close(cumprod(m, -1), from_vector<double>({1, 2, 6, 4, 20, 120}, Shape{2, 3})));
  Tensor i = cumprod(from_vector<int32_t>({1, 2, 3, 4, 5}), 0, true);
  EXPECT_EQ(i.dtype(), DType::i64);
  EXPECT_TRUE(all_close(i, from_vector<int64_t>({1, 1, 2, 6, 24})));
  EXPECT_EQ(cumprod(ones({3}, DType::boolean), 0).dtype(), DType::i64);
  EXPECT_EQ(cumprod(ones({3}, DType::u8), 0).dtype(), DType::i64);
  EXPECT_EQ(cumprod(ones({3}, DType::bf16), 0).dtype(), DType::bf16);
  // u8 products do not wrap at 255: they multiply in i64, which wraps modulo 2^64.
  EXPECT_EQ(cumprod(full({3}, 200, DType::u8), 0).select(0, 2).item<int64_t>(), 8000000);
  Tensor twos = cumprod(full({64}, 2, DType::i64), 0);
  EXPECT_EQ(twos.select(0, 61).item<int64_t>(), int64_t{1} << 62);
  EXPECT_EQ(twos.select(0, 62).item<int64_t>(), std::numeric_limits<int64_t>::min());  // 2^63 wraps
  EXPECT_EQ(twos.select(0, 63).item<int64_t>(), 0);                                    // 2^64 wraps to 0
  Tensor neg = cumprod(from_vector<int64_t>({-2, int64_t{1} << 62}), 0);
  EXPECT_EQ(neg.select(0, 1).item<int64_t>(), std::numeric_limits<int64_t>::min());
}

TEST(Cumprod, ZerosAndSpecialValues) {
  Tensor x = from_vector<float>({2, 0, 3, 0, 4});
  EXPECT_TRUE(all_close(cumprod(x, 0), from_vector<double>({2, 0, 0, 0, 0})));
  EXPECT_TRUE(all_close(cumprod(x, 0, true, true), from_vector<double>({0, 0, 0, 4, 1})));
  Tensor s = from_vector<double>({NAN, 1, 2});
  Tensor got = cumprod(s, 0);
  for (int k = 0; k < 3; ++k) EXPECT_TRUE(std::isnan(got.data<double>()[k])) << k;
  EXPECT_TRUE(all_close(cumprod(s, 0, false, true), ref::cumprod(s, 0, false, true)));  // NaN only at 0
  Tensor inf = from_vector<float>({INFINITY, -1, 0, 5});
  EXPECT_TRUE(all_close(cumprod(inf, 0), ref::cumprod(inf, 0)));  // inf * 0 = NaN from there on
  // f32 overflow goes to inf (the f64 accumulator holds it until the final rounding).
  Tensor big = cumprod(full({3}, 1e20, DType::f32), 0);
  EXPECT_EQ(big.data<float>()[1], std::numeric_limits<float>::infinity());
  // ... and a product that leaves and re-enters f32's range stays exact in the accumulator.
  Tensor back = cumprod(from_vector<float>({1e30f, 1e30f, 1e-30f, 1e-30f}), 0);
  EXPECT_NEAR(back.data<float>()[3], 1.0f, 1e-6);
}

TEST(Cumprod, RegistryAndErrors) {
  const OpDef& d = kiln::op("cumprod");
  ASSERT_TRUE(d.onnx_mapping().has_value());
  EXPECT_EQ(d.onnx_mapping()->op_type, "CumProd");
  EXPECT_EQ(d.onnx_mapping()->since_opset, 26);
  EXPECT_EQ(d.vjp_status().kind, RuleStatus::Kind::provided);
  Tensor x = ones({2, 3});
  EXPECT_KILN_ERROR(cumprod(x, 2), "cumprod", "axis 2", "rank 2");
  EXPECT_KILN_ERROR(cumprod(x, -3), "cumprod", "axis -3", "rank 2");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("cumprod"), {x}), "cumprod", "required attribute", "axis");
  EXPECT_KILN_ERROR(cumprod(Tensor(), 0), "cumprod", "'x'");
}

}  // namespace
}  // namespace kiln
