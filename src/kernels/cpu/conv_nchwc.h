// CPU 2-D convolution on channel-blocked activations ("NCHWc", Note [Blocked channels] in
// conv_nchwc.cc): x [N, C/16, H, W, 16], y [N, K/16, Ho, Wo, 16], filters packed once. The
// compiler's layout pass (src/compiler/passes/layout.cc) puts whole regions of a network in this
// layout, with conversions only at the region's edges.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/conv.h"

namespace kiln::kernels::cpu {

inline constexpr int64_t kChannelBlock = 16;

// [n, c, hw] -> [n, ceil(c / 16), hw, 16]; lanes past c are written as zeros.
void nchw_to_nchwc_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y);
// [n, ceil(c / 16), hw, 16] -> [n, c, hw] (lanes past c are dropped).
void nchwc_to_nchw_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y);

// What the blocked convolution takes: one group, C and K multiples of 16 (the compiler's layout
// pass only blocks such convolutions), any filter size, stride, padding and dilation.
bool conv2d_nchwc_supported(const Conv2dParams& p);
// Filters [K, C, R, S] packed per panel of up to 64 output channels: [panel][C/16][R*S][16][width].
size_t conv2d_nchwc_packed_weight_f32_floats(const Conv2dParams& p);
void pack_conv2d_nchwc_weight_f32(const Conv2dParams& p, const float* w, float* out);
// y = act(conv(x, w) + bias (+ residual)) (+ residual), all of x, y and the residual blocked; bias
// [K] or nullptr. Activations: none, relu, relu6, hardswish.
void conv2d_nchwc_f32(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias, float* y,
                      const Conv2dEpilogue& epilogue = {});

// The blocked convolution's register tiles (Note [Blocked tiles] in conv_nchwc.cc): panels of
// `panel_blocks` output blocks, and the pixels of a tile `blocks` wide (tests pick odd shapes
// against them). The packed filters depend on panel_blocks.
struct NchwcTiling {
  int panel_blocks = 4;
  int pixels(int blocks) const { return panel_blocks == 3 ? 7 : blocks == 4 ? 6 : blocks == 3 ? 8 : 12; }
};
NchwcTiling conv2d_nchwc_tiling(const Conv2dParams& p);

// ---- the micro-kernel, per ISA ----
// Finishing a tile: bias at the panel's first channel, residual laid out as y, the activation.
struct NchwcEpilogueF32 {
  enum class Act { none, relu, relu6, hardswish };
  const float* bias = nullptr;      // 16 * blocks floats, never nullptr
  const float* residual = nullptr;  // at the tile's first pixel, or nullptr
  bool residual_before_activation = false;
  Act act = Act::none;
};
// Sums over `blocks` input blocks (xblk floats apart) and `taps` filter taps (tap_off[t] floats from
// a pixel's base, pix[i] for pixel i) into m <= MR pixels of the panel's output blocks (y, blocks
// yblk floats apart, pixels 16 floats apart), adding y's contents when `accumulate`, finished with
// `ep` when given. w: the panel's packed filters from the first block on.
using NchwcUkernelF32 = void (*)(int64_t blocks, int taps, const int64_t* tap_off, const float* x, const int64_t* pix,
                                 int64_t xblk, const float* w, float* y, int64_t yblk, int m, bool accumulate,
                                 const NchwcEpilogueF32* ep);
// The AVX-512 kernel for tiles of mr pixels by nv blocks (NchwcTiling::pixels), or nullptr.
NchwcUkernelF32 nchwc_ukernel_f32_avx512(int nv, int mr);

}  // namespace kiln::kernels::cpu
