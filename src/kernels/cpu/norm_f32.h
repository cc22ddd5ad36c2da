// f32 row kernels for normalization over contiguous rows (layer_norm's last dims), one set per ISA
// (Note [ISA code in one binary] in gemm_f32_avx512.cc). The ops choose them for contiguous f32
// rows and keep their generic (f64-statistics, any-stride) loops for everything else.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace kiln::kernels::cpu {

// Note [Layer norm in f32 lanes]
// Per row of n floats: mean and the mean squared deviation in two passes over the row (the row is
// in L1 for the second; one pass of sum and sum of squares loses the variance to cancellation
// when |mean| >> std). The first pass sums x - x[0], so its f32 lanes hold values of the row's
// spread even when the mean dwarfs it. Both sums run in f32 vector lanes over chunks of at most 4096 elements and
// are added up in f64, so a lane never holds more than 4096 / lanes terms; rstd = 1 / sqrt(var +
// eps) in f64. The deviations use the f32-rounded mean, corrected for its rounding error in the
// variance and in the output, which is (x - mean) * rstd, then * weight and + bias (one fma): a
// few f32 roundings, within the f32 tolerance of the float64 reference even for rows whose mean
// dwarfs their spread. NaN or inf anywhere in a row makes
// the whole row NaN, as in the f64 loop.
struct NormKernelsF32 {
  // y[r * ldy + j] = (x[r * ldx + j] - mean_r) * rstd_r * w[j] + b[j] for r < rows, j < n (n >= 1);
  // w and b may be null (1 and 0). y may equal x (in place).
  void (*layer_norm_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                          const float* w, const float* b, double eps);
};
NormKernelsF32 norm_kernels_f32_scalar();
NormKernelsF32 norm_kernels_f32_avx2();
NormKernelsF32 norm_kernels_f32_avx512();
NormKernelsF32 norm_kernels_f32(Isa isa);  // scalar machines: the portable f64-statistics loop

}  // namespace kiln::kernels::cpu
