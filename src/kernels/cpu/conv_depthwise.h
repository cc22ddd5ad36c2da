// Direct depthwise 2-D convolution, NCHW f32: groups == C input channels, each producing K / C
// output channels (the depth multiplier), any kernel, stride, padding and dilation, bias fused.
#pragma once

#include <functional>
#include <limits>

#include "kernels/cpu/conv.h"

namespace kiln::kernels::cpu {

// Whether conv2d_depthwise_f32 computes `p` (groups == C and K a multiple of C).
bool is_depthwise(const Conv2dParams& p);
// x [N, C, H, W], w [K, 1, R, S], bias [K] or nullptr, y [N, K, Ho, Wo], all contiguous. Parallel
// over (image, input channel) planes; each plane is copied once, padded and stride-phased (Note
// [Windows over a phased plane] in window_f32.h), and every output row is one vectorized pass.
// 3x3 undilated layers with K == C (MobileNet's; 5x5 too under AVX2) go 16 channels at a time
// through a channels-last scratch instead (Note [Depthwise in channel blocks]), parallel over
// (image, block of 16 channels), when their planes are small.
// `plane_done(y_plane, image, channel)`, when set, runs on the worker right after an output plane
// [Ho, Wo] is written, while it is still in cache: a fused epilogue (activation, residual add).
// Outputs are clamped to [lo, hi] before they are stored (relu and relu6 without a pass of their
// own; NaN stays NaN). `act` hardswish applies x * clamp(x + 3, 0, 6) / 6 (in f32, as the op)
// instead of the clamp, before plane_done: in the store of the block kernels that can (AVX2's),
// otherwise on each plane right after it is written.
enum class DepthwiseAct { clamp, hardswish };
using DepthwisePlaneHook = std::function<void(float* y_plane, int64_t image, int64_t channel)>;
void conv2d_depthwise_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                          const DepthwisePlaneHook& plane_done = {},
                          float lo = -std::numeric_limits<float>::infinity(),
                          float hi = std::numeric_limits<float>::infinity(), DepthwiseAct act = DepthwiseAct::clamp);

}  // namespace kiln::kernels::cpu
