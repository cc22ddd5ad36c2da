// Portable f32 normalization row kernels (kernels/cpu/norm_f32.h) and the per-ISA selection.
#include "kernels/cpu/norm_f32.h"

#include <cmath>

namespace kiln::kernels::cpu {

namespace {

void layer_norm_rows__scalar(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                             const float* w, const float* b, double eps) {
  for (int64_t r = 0; r < rows; ++r, x += ldx, y += ldy) {
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += x[j];
    const double mean = sum / static_cast<double>(n);
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) {
      const double d = x[j] - mean;
      ss += d * d;
    }
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t j = 0; j < n; ++j) {
      double v = (x[j] - mean) * rstd;
      if (w != nullptr) v *= w[j];
      if (b != nullptr) v += b[j];
      y[j] = static_cast<float>(v);
    }
  }
}

// layer_norm_rows__scalar on rows gathered 16 at a time (Note [Layer norm across]).
void layer_norm_columns__scalar(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n,
                                const float* w, const float* b, double eps) {
  layer_norm_columns_by(gather_rows_scalar, layer_norm_rows__scalar, x, ldx, y, ldy, rows, n, w, b, eps);
}

void rms_norm_rows__scalar(const float* x, int64_t ldx, float* y, int64_t ldy, int64_t rows, int64_t n, const float* w,
                           double eps) {
  for (int64_t r = 0; r < rows; ++r, x += ldx, y += ldy) {
    double ss = 0;
    for (int64_t j = 0; j < n; ++j) ss += static_cast<double>(x[j]) * x[j];
    const double rstd = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t j = 0; j < n; ++j) y[j] = static_cast<float>(x[j] * rstd * (w != nullptr ? w[j] : 1.0));
  }
}

}  // namespace

NormKernelsF32 norm_kernels_f32_scalar() {
  return {layer_norm_rows__scalar, layer_norm_columns__scalar, rms_norm_rows__scalar};
}

NormKernelsF32 norm_kernels_f32(Isa isa) {
  if (isa == Isa::avx512) return norm_kernels_f32_avx512();
  if (isa == Isa::avx2) return norm_kernels_f32_avx2();
  return norm_kernels_f32_scalar();
}

}  // namespace kiln::kernels::cpu
