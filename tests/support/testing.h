// Test helpers shared by every suite: random inputs that are never zero, non-contiguous copies,
// comparison against float64 references with a stated tolerance, and error assertions by content.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include <string>
#include <vector>

#include "kernels/cpu/ref/ref.h"
#include "kiln/kiln.h"

namespace kiln::testing {

// Sizes every elementwise test covers (odd on purpose).
inline const std::vector<int64_t> kOddSizes = {1, 7, 33, 1000, 1023};
inline const std::vector<DType> kAllDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i8,
                                              DType::u8,  DType::i32, DType::i64, DType::boolean};
inline const std::vector<DType> kFloatDTypes = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Random values in [lo, hi] with |v| >= 0.05 for floats (never exactly zero); integers uniform in
// [lo, hi] excluding 0 (u8: [1, hi]); bool random. Deterministic for a given seed.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo = -2.0, double hi = 2.0);
// Positive values in [lo, hi] (for log, sqrt, ...).
Tensor random_positive(const Shape& shape, DType dtype, uint64_t seed, double lo = 0.1, double hi = 3.0);
// The same values as `t` in a non-contiguous layout: a strided slice of a larger buffer (every
// dim doubled, step 2), so strides differ from contiguous ones in every dim.
Tensor noncontiguous(const Tensor& t);

// Tolerances for comparing a result of dtype `t` against a float64 reference: ~4 ulps for f32,
// 1e-12 for f64, 2^-9 / 2^-6 relative for f16 / bf16, exact for integers and bool.
struct Tol {
  double rtol, atol;
};
Tol tol_for(DType t);

// Checks `actual` (any dtype, any layout) against `expected` (values in f64 or any dtype) with
// |a - e| <= atol + rtol * |e|; NaNs must match; reports the worst element and its index.
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, Tol tol);
::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected);  // tol_for(actual)

// |t| elementwise as an f64 tensor (computed here, not by kiln's abs op).
Tensor abs_values(const Tensor& t);
// |got - want| <= eps * magnitude elementwise: for sums of products (matmul, conv), where the
// rounding error scales with sum |a||b| (`magnitude`) rather than with the result.
::testing::AssertionResult close_by_magnitude(const Tensor& got, const Tensor& want, const Tensor& magnitude,
                                              double eps);

// Runs `fn`, expects a kiln::Error whose message contains every one of `parts`.
::testing::AssertionResult throws_error(const std::function<void()>& fn, const std::vector<std::string>& parts);

}  // namespace kiln::testing

#define EXPECT_KILN_ERROR(stmt, ...) \
  EXPECT_TRUE(::kiln::testing::throws_error([&] { (void)(stmt); }, {__VA_ARGS__}))
