// CPU 2-D convolution in channels-last layout (NHWC activations, OHWI weights) through the blocked
// GEMM: the layout in which a convolution *is* a matrix product (Note [NHWC convolution] in
// conv_nhwc.cc). For the compiler's layout choice beside conv2d_nchw_f32 (kernels/cpu/conv.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/conv.h"

namespace kiln::kernels::cpu {

// x [N, H, W, C], w [K, R, S, C / groups] (OHWI), bias [K] or nullptr, y [N, Ho, Wo, K]; all
// contiguous. The epilogue's residual has y's layout. Geometry (sizes, stride, padding, dilation,
// groups) as in Conv2dParams; f32 only.
void conv2d_nhwc_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                     const Conv2dEpilogue& epilogue = {});

// OIHW [K, C / groups, R, S] -> OHWI [K, R, S, C / groups] (for weights exported in ONNX's layout).
void oihw_to_ohwi_f32(int64_t k, int64_t cg, int64_t r, int64_t s, const float* src, float* dst);

}  // namespace kiln::kernels::cpu
