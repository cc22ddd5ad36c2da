// CPU pooling and local response normalization over contiguous NCHW-like planes.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::kernels::cpu {

struct Pool2dParams {
  int64_t planes = 1;                   // N * C
  int64_t h = 1, w = 1, ho = 1, wo = 1;
  int64_t kh = 1, kw = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0, pad_bottom = 0, pad_right = 0;
  int64_t dil_h = 1, dil_w = 1;
  bool count_include_pad = false;       // avg only
};

// x: contiguous [planes, H, W]; y: contiguous [planes, Ho, Wo]; same floating dtype (f32, f64,
// f16, bf16; 16-bit ones compute in f32). Max pooling propagates NaN; a window with no element
// inside the input gives -inf. f32 runs the active ISA's vectorized window kernels
// (kernels/cpu/window_f32.h); the other dtypes direct loops.
void max_pool2d(const Pool2dParams& p, const Tensor& x, const Tensor& y);
// The divisor counts the window's taps inside the input, or (count_include_pad) inside the padded
// input [-pad, size + pad) — a window hanging past the padding (ceil_mode) is not counted there.
void avg_pool2d(const Pool2dParams& p, const Tensor& x, const Tensor& y);
// That divisor for output (oh, ow) (the blocked average pool's too).
int64_t avg_pool_divisor(const Pool2dParams& p, int64_t oh, int64_t ow);
// x: contiguous [rows, len] -> y: [rows], the mean of each row (accumulated in double).
void row_mean(const Tensor& x, const Tensor& y, int64_t rows, int64_t len);
// x, y: contiguous [n, c, len]. y = x / (bias + alpha / size * sum of x^2 over channels
// [c - (size - 1) / 2, c + ceil((size - 1) / 2)])^beta.
void lrn(const Tensor& x, const Tensor& y, int64_t n, int64_t c, int64_t len, int64_t size, double alpha,
         double beta, double bias);

}  // namespace kiln::kernels::cpu
