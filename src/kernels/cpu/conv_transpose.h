// CPU 2-D transposed convolution, NCHW (ONNX ConvTranspose): GEMM (kernels/cpu/gemm.h) + col2im.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

struct ConvTranspose2dParams {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input [N, C, H, W]
  int64_t k = 1, r = 1, s = 1;         // weight [C, K / groups, R, S]; output channels K
  int64_t ho = 1, wo = 1;              // output [N, K, Ho, Wo]
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;   // cropped from the full output's start
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
};

// x, w, y contiguous; bias [K] or nullptr. Workspace: one column matrix per worker
// ((K / groups) * R * S * H * W elements).
void conv_transpose2d_nchw_f32(const ConvTranspose2dParams& p, const float* x, const float* w, const float* bias,
                               float* y);
void conv_transpose2d_nchw_f64(const ConvTranspose2dParams& p, const double* x, const double* w,
                               const double* bias, double* y);

}  // namespace kiln::kernels::cpu
