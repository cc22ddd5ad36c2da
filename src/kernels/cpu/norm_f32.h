// f32 row kernels for normalization over contiguous rows (layer_norm's last dims), one set per ISA
// (Note [ISA code in one binary] in gemm_f32_avx512.cc). The ops choose them for contiguous f32
// rows and keep their generic (f64-statistics, any-stride) loops for everything else. rms_norm's
// rows use the same passes with no mean (Note [RMS norm in f32 lanes]).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"

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
  // The same for rows stored across (Note [Layer norm across]): element j of row r at x[r + j * ldx],
  // the rows consecutive; y as above.
  void (*layer_norm_columns)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                             const float* w, const float* b, double eps);
  // y[r * ldy + j] = x[r * ldx + j] / sqrt(mean_j(x[r * ldx + j]^2) + eps) * w[j]; w may be null.
  // y may equal x.
  void (*rms_norm_rows)(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n, const float* w,
                        double eps);
};
NormKernelsF32 norm_kernels_f32_scalar();
NormKernelsF32 norm_kernels_f32_avx2();
NormKernelsF32 norm_kernels_f32_avx512();
NormKernelsF32 norm_kernels_f32(Isa isa);  // scalar machines: the portable f64-statistics loop

// The row loop of the vector kernels (Note [Layer norm in f32 lanes]), one copy for every ISA.
// Lanes holds the ISA's passes over a row, compiled for it in its own file:
//   static double sum(const float* x, int64_t n, float shift);     // of x[j] - shift
//   static double sum_sq(const float* x, int64_t n, float shift);  // of (x[j] - shift)^2
//   template <bool W, bool B> static void normalize(const float* x, float* y, int64_t n, float mean,
//       float rstd, float shift, const float* w, const float* b);  // fma(x - mean, rstd, shift) * w + b
//   static void gather(const float* x, int64_t ldx, int64_t m, int64_t n, float* t);  // t[i n + j] = x[i + j ldx]
template <class Lanes>
void layer_norm_rows_in_lanes(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                              const float* w, const float* b, double eps) {
  for (int64_t r = 0; r < rows; ++r, x += ldx, y += ldy) {
    // Summing x - x[0] keeps the f32 lane sums at the row's spread, not its mean.
    const double mean = static_cast<double>(x[0]) + Lanes::sum(x, n, x[0]) / static_cast<double>(n);
    const float mf = static_cast<float>(mean);
    const double ss = Lanes::sum_sq(x, n, mf);
    // The deviations were taken from the f32-rounded mean mf; the exact mean differs by
    // delta = mean - mf, which adds delta^2 to the mean squared deviation (removed here) and
    // -delta * rstd to each normalized value (the fma's addend). Without it a row near 1000 would
    // be off by up to ulp(1000) / 2 * rstd, far past f32 rounding of the result.
    const double delta = mean - static_cast<double>(mf);
    const double var = std::max(ss / static_cast<double>(n) - delta * delta, 0.0);
    const double rstd = 1.0 / std::sqrt(var + eps);
    const float rf = static_cast<float>(rstd), shift = static_cast<float>(-delta * rstd);
    if (w != nullptr && b != nullptr) Lanes::template normalize<true, true>(x, y, n, mf, rf, shift, w, b);
    else if (w != nullptr) Lanes::template normalize<true, false>(x, y, n, mf, rf, shift, w, b);
    else if (b != nullptr) Lanes::template normalize<false, true>(x, y, n, mf, rf, shift, w, b);
    else Lanes::template normalize<false, false>(x, y, n, mf, rf, shift, w, b);
  }
}

// Note [RMS norm in f32 lanes]
// rms_norm (T5's and LLaMA's RMSNorm, ONNX RMSNormalization) is layer_norm without the mean: one
// pass for the sum of squares (Lanes::sum_sq with no shift: every term is >= 0, so no
// cancellation, the same f32 chunks added up in f64) and one normalizing pass (Lanes::normalize
// with mean and shift 0, no bias). No new per-ISA code.
template <class Lanes>
void rms_norm_rows_in_lanes(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                            const float* w, double eps) {
  for (int64_t r = 0; r < rows; ++r, x += ldx, y += ldy) {
    const double rstd = 1.0 / std::sqrt(Lanes::sum_sq(x, n, 0.0f) / static_cast<double>(n) + eps);
    const float rf = static_cast<float>(rstd);
    if (w != nullptr) Lanes::template normalize<true, false>(x, y, n, 0.0f, rf, 0.0f, w, nullptr);
    else Lanes::template normalize<false, false>(x, y, n, 0.0f, rf, 0.0f, nullptr, nullptr);
  }
}

// Note [Layer norm across]
// ConvNeXt normalizes each pixel's channels of an NCHW activation (a permute to NHWC, LayerNorm over
// the last dim, a permute back; torchvision's blocks and its LayerNorm2d), so a row's elements lie
// a plane apart and the rows are consecutive. The generic loop (f64, one element at a time, one
// thread) ran ConvNeXt-T's 23 layer norms in 3.1 ms of 27.7 at batch 1 on two threads (the largest
// 0.32 ms). Here 16 rows at a time are gathered into a scratch of 16 contiguous rows (16 x 16
// blocks transposed in registers where the ISA has them) and the row kernel above runs on it,
// writing y directly: the same arithmetic as for contiguous rows, so the same accuracy. Those
// layers now 0.50 ms (the largest 0.06).
//
// gather(x, ldx, m, n, t) fills t as Lanes::gather does; rows_kernel is a layer_norm_rows.
template <class Gather, class RowsKernel>
void layer_norm_columns_by(Gather gather, RowsKernel rows_kernel, const float* x, int64_t ldx, float* y, int64_t ldy,
                           int64_t rows, int64_t n, const float* w, const float* b, double eps) {
  float* t = thread_scratch<float, ScratchSlot::layer_norm_rows>(static_cast<size_t>(16 * n));
  for (int64_t r0 = 0; r0 < rows; r0 += 16) {
    const int64_t m = std::min<int64_t>(16, rows - r0);
    gather(x + r0, ldx, m, n, t);
    rows_kernel(t, n, y + r0 * ldy, ldy, m, n, w, b, eps);
  }
}

template <class Lanes>
void layer_norm_columns_in_lanes(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                                 const float* w, const float* b, double eps) {
  layer_norm_columns_by(Lanes::gather, layer_norm_rows_in_lanes<Lanes>, x, ldx, y, ldy, rows, n, w, b, eps);
}

// Lanes::gather without vectors: t[i n + j] = x[i + j ldx] for i < m, j < n.
inline void gather_rows_scalar(const float* x, int64_t ldx, int64_t m, int64_t n, float* t) {
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) t[i * n + j] = x[i + j * ldx];
}

}  // namespace kiln::kernels::cpu
