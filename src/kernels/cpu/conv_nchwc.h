// CPU 2-D convolution on channel-blocked activations ("NCHWc", Note [Blocked channels] in
// conv_nchwc.cc): x [N, ceil(C/16), H, W, 16], y [N, ceil(K/16), Ho, Wo, 16], filters packed once;
// dense, depthwise and a stem's NCHW input; blocked max pooling and the conversions. The
// compiler's layout pass (src/compiler/passes/layout.cc) puts whole regions of a network in this
// layout, with conversions only at the region's edges.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/pool.h"

namespace kiln::kernels::cpu {

inline constexpr int64_t kChannelBlock = 16;
// The blocks of 16 that c channels take.
inline constexpr int64_t nchwc_blocks(int64_t c) { return (c + kChannelBlock - 1) / kChannelBlock; }

// The output columns [first, second) of `out` whose k taps (dil apart, stride between outputs,
// `pad` columns of padding on the left) all lie inside an input row of `in` columns: the ones the
// depthwise convolution and the max pool run without bounds checks.
inline std::pair<int64_t, int64_t> nchwc_inside_columns(int64_t out, int64_t stride, int64_t pad, int64_t dil,
                                                        int64_t in, int64_t k) {
  const int64_t last = in - 1 - (k - 1) * dil + pad;  // the last first-tap column that fits, padded
  const int64_t lo = std::min(out, (pad + stride - 1) / stride);
  const int64_t hi = last < 0 ? lo : std::clamp(last / stride + 1, lo, out);
  return {lo, hi};
}

// [n, c, hw] -> [n, ceil(c / 16), hw, 16]; lanes past c are written as zeros.
void nchw_to_nchwc_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y);
// [n, hw, c] (channels last) -> [n, ceil(c / 16), hw, 16]; lanes past c are written as zeros.
void nhwc_to_nchwc_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y);
// [n, ceil(c / 16), hw, 16] -> [n, c, hw] (lanes past c are dropped).
void nchwc_to_nchw_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y);

// The input of a blocked convolution: blocked, or plain NCHW (a network's stem, whose 3 input
// channels would waste 13 of a block's 16 lanes: its output starts a blocked region).
enum class NchwcInput { blocked, plain };
// Note [Grouped blocks] (conv_nchwc.cc): a grouped convolution runs blocked in block groups, the
// fewest consecutive groups (a span) whose input and output channels both fill whole blocks of 16;
// a span multiplies the work by itself (the filters between its groups are zeros), so at most
// kMaxGroupSpan. The span, or 0 where there is none (groups that do not divide C and K, or
// depthwise layers, whose span would be 16: they have their own kernel).
inline constexpr int64_t kMaxGroupSpan = 4;
int64_t nchwc_group_span(int64_t c, int64_t k, int64_t groups);
// What the blocked convolution takes: one group (any C and K: a partial last block's lanes are
// zero in x and come out zero in y; at most 16 channels of plain input), or groups with a span on
// blocked input; any filter size, stride, padding and dilation.
bool conv2d_nchwc_supported(const Conv2dParams& p, NchwcInput input = NchwcInput::blocked);
// Whether conv2d_nchwc_f32 reads a zero-bordered copy of a padded input rather than cutting the
// output into rectangles of the same taps (Note [Borders without a copy] in conv_nchwc.cc).
bool conv2d_nchwc_copies_input(const Conv2dParams& p, NchwcInput input = NchwcInput::blocked);
// Whether it reads a plain input copied by pixel, a kernel row's S * C values consecutive (Note
// [Stem rows] in conv_nchwc.cc).
bool conv2d_nchwc_reads_rows(const Conv2dParams& p, NchwcInput input);
// Filters [K, C / groups, R, S] packed per panel of up to 4 output blocks: [panel][blocks][R*S][16]
// [width] for blocked input (the C/16 blocks, or a block group's), [panel][R*S][C][width] for
// plain input; zeros for channels past C and K and between the groups of a block group.
size_t conv2d_nchwc_packed_weight_f32_floats(const Conv2dParams& p, NchwcInput input = NchwcInput::blocked);
void pack_conv2d_nchwc_weight_f32(const Conv2dParams& p, const float* w, float* out,
                                  NchwcInput input = NchwcInput::blocked);
// y = act(conv(x, w) + bias (+ residual)) (+ residual), y and the residual blocked, x as `input`
// says; bias [K] or nullptr. Activations: none, relu, relu6, hardswish, sigmoid, silu. The residual
// may be y itself when it is added before the activation (Note [Residual in place] in
// conv_nchwc.cc).
// plan: conv2d_nchwc_plan(p, input), made once for a call that repeats (Note [Prepared kernels] in
// kiln/ops/op_def.h), or nullptr to make it here.
struct NchwcPlan;
void conv2d_nchwc_f32(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias, float* y,
                      const Conv2dEpilogue& epilogue = {}, NchwcInput input = NchwcInput::blocked,
                      const NchwcPlan* plan = nullptr);
// What conv2d_nchwc_f32 derives from p and the thread count alone: the work items, tiles and
// rectangles of its borders.
std::shared_ptr<const NchwcPlan> conv2d_nchwc_plan(const Conv2dParams& p, NchwcInput input = NchwcInput::blocked);

// A depthwise convolution (groups = C = K, filters [C, 1, R, S]) on blocked x and y (Note [Blocked
// depthwise] in conv_nchwc_depthwise.cc), with the same epilogue; filters packed [C/16][R*S][16].
size_t depthwise_nchwc_packed_weight_f32_floats(const Conv2dParams& p);
void pack_depthwise_nchwc_weight_f32(const Conv2dParams& p, const float* w, float* out);
void depthwise_conv2d_nchwc_f32(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias,
                                float* y, const Conv2dEpilogue& epilogue = {});

// Max pooling on blocked planes: x [p.planes, H, W, 16] -> y [p.planes, Ho, Wo, 16] (planes =
// N * C/16), as max_pool2d on NCHW: NaN propagates; a window with no element inside gives -inf.
void max_pool2d_nchwc_f32(const Pool2dParams& p, const float* x, float* y);

// Average pooling on blocked planes, as avg_pool2d on NCHW (its divisor: avg_pool_divisor in
// pool.h). x [p.planes, H, W, 16] -> y [p.planes, Ho, Wo, 16] (Note [Blocked average pool]).
void avg_pool2d_nchwc_f32(const Pool2dParams& p, const float* x, float* y);

// Global average pooling on blocked planes: x [planes, pixels, 16] -> y [planes, 16], each lane the
// mean of its plane's pixels (a partial block's zero lanes stay zero). pixels >= 1.
void global_avg_pool_nchwc_f32(int64_t planes, int64_t pixels, const float* x, float* y);
// Layer norm over the channels of each pixel of blocked x [n, blocks, pixels, 16] (Note [Blocked
// channel norm]): the mean and variance of the pixel's first `channels` lanes across its blocks,
// then (x - mean) / sqrt(var + eps) * w + b per channel; w and b hold blocks * 16 values, zero past
// `channels`, so the lanes past it come out zero (x's are finite there). y may be x.
void layer_norm_channels_nchwc_f32(int64_t n, int64_t blocks, int64_t pixels, int64_t channels, const float* x,
                                   const float* w, const float* b, float eps, float* y);
// The same with each lane the L2 norm of its plane's pixels, sqrt(sum of squares) (Note [Blocked
// spatial norm]). pixels >= 0 (no pixels: 0).
void global_norm_nchwc_f32(int64_t planes, int64_t pixels, const float* x, float* y);

// Winograd F(tile x tile, 3x3), tile 2 or 4, on blocked planes (Note [Winograd tiles] in
// conv_nchwc.cc): the same contract as conv2d_nchwc_f32 with blocked input, for 3x3 filters of
// stride 1 and dilation 1, one group or groups of whole 16-channel blocks in and out (Note [Winograd
// by groups]). The filters are transformed and packed for it: U = G g G^T, per position of the
// (tile + 2)^2 transformed tile and per group a 1x1 blocked convolution's filters [K/G, C/G].
bool conv2d_nchwc_winograd_supported(const Conv2dParams& p);
// Whether it is worth timing: a panel's transformed filters for a group's C -> K (all of the
// layer's where it has one group) fit what a thread's L2 holds across a layer's work items (Note
// [Winograd in two passes] in conv_nchwc.cc).
bool conv2d_nchwc_winograd_offered(int64_t c, int64_t k, int tile);
size_t conv2d_nchwc_winograd_packed_weight_f32_floats(const Conv2dParams& p, int tile);
void pack_conv2d_nchwc_winograd_weight_f32(const Conv2dParams& p, int tile, const float* w, float* out);
void conv2d_nchwc_winograd_f32(const Conv2dParams& p, int tile, const float* x, const float* packed_u,
                               const float* bias, float* y, const Conv2dEpilogue& epilogue = {});

// A per-channel scale and shift on blocked planes, then an activation (none, relu, relu6,
// hardswish, sigmoid or silu): y = act(x * scale + shift) with x and y [n, blocks, pixels, 16] and
// scale and shift [blocks * 16], a channel's values at its lane (Note [Blocked batch norm] in
// conv_nchwc.cc). y may be x.
void scale_shift_nchwc_f32(int64_t n, int64_t blocks, int64_t pixels, const float* x, const float* scale,
                           const float* shift, float* y, GemmActivation act);

// The blocked convolution's register tiles (Note [Blocked tiles] in conv_nchwc.cc): panels of
// `panel_blocks` output blocks, and the pixels of a tile `blocks` wide (tests pick odd shapes
// against them). The packed filters depend on panel_blocks.
struct NchwcTiling {
  int panel_blocks = 4;
  bool one_pixel = false;  // a plane of one pixel: tiles of one (Note [One-pixel planes])
  int pixels(int blocks) const {
    return one_pixel ? 1 : panel_blocks == 3 ? 7 : blocks == 4 ? 6 : blocks == 3 ? 8 : 12;
  }
};
NchwcTiling conv2d_nchwc_tiling(const Conv2dParams& p);

// ---- the micro-kernel, per ISA ----
// One tile: m <= MR output pixels of a panel's output blocks, summed over `blocks` input blocks
// (xblk floats apart) and, in each, the `taps` filter taps listed and `lanes` channels (ldc floats
// apart: 16 and 1 for blocked input, C and a plane for plain input, S * C and 1 for a plain input
// read as rows, Note [Stem rows] in conv_nchwc.cc). Pixel i reads x[pix[i] + tap_off[t] + c * ldc]
// for listed tap t (never outside the input: a border pixel's list leaves out the taps that would
// fall in the padding, Note [Borders without a copy] in conv_nchwc.cc) with filter tap tap_w[t] of
// the block_taps packed per block, and its outputs are y + v * yblk + yoff[i] for output block v
// (pixels past m repeat the last one and are not stored). Adds y's contents when `accumulate`;
// finished with `ep` when given: the NCHW tiles' ConvTileEpilogueF32 (gemm_ukernel.h) with the bias
// at the panel's first channel (never nullptr: 16 floats a block) and the residual laid out as y
// (its ldr unused). w: the panel's packed filters from the first block on. prefetch: the address of
// filters to fetch into L2 as it runs, a line a step (Note [Filters fetched ahead] in
// conv_nchwc.cc), or 0 to fetch w's own ahead into L1.
struct NchwcTileArgs {
  int64_t blocks = 0;
  int taps = 0;
  const int64_t* tap_off = nullptr;
  const int32_t* tap_w = nullptr;
  int64_t block_taps = 0;
  const float* x = nullptr;
  const int64_t* pix = nullptr;
  int64_t xblk = 0;
  int lanes = 0;
  int64_t ldc = 0;
  const float* w = nullptr;
  uintptr_t prefetch = 0;
  float* y = nullptr;
  const int64_t* yoff = nullptr;
  int64_t yblk = 0;
  int m = 0;
  // Channels of the last block read (blocked input: lanes 16, ldc 1); the rest are a partial last
  // block's zero lanes, skipped with their zero filters (Note [The last block's real lanes] in
  // conv_nchwc.cc).
  int last_lanes = 16;
  int64_t tiles = 1;  // consecutive whole tiles (nchwc_dense_tiles_f32_avx512, nchwc_row_tiles_f32_avx512)
  bool accumulate = false;
  const ConvTileEpilogueF32* ep = nullptr;
};
using NchwcUkernelF32 = void (*)(const NchwcTileArgs& a);
// Winograd F(2x2, 3x3) and F(4x4, 3x3) transforms under AVX-512 (Note [Winograd tiles] in
// conv_nchwc.cc), tiles t0 .. t0 + count - 1 of a plane's tw-wide grid of m x m output tiles (m = 2,
// 4; n = m + 2). Input: the block plane x [h][w][16] (zero outside, padded by pad_top and pad_left)
// to v + xi * vpos + 16 i for each of the n^2 positions xi of tile t0 + i. Output: m + xi * mpos + 16 i
// to the block plane y [ho][wo][16], finished by ep (bias at the block; residual laid out as y, or
// nullptr).
void winograd_input_avx512(const float* x, int64_t h, int64_t w, int64_t pad_top, int64_t pad_left, int64_t tw,
                           int64_t t0, int64_t count, float* v, int64_t vpos);
void winograd_output_avx512(const float* m, int64_t mpos, int64_t ho, int64_t wo, int64_t tw, int64_t t0,
                            int64_t count, float* y, const ConvTileEpilogueF32& ep);
void winograd4_input_avx512(const float* x, int64_t h, int64_t w, int64_t pad_top, int64_t pad_left, int64_t tw,
                            int64_t t0, int64_t count, float* v, int64_t vpos);
void winograd4_output_avx512(const float* m, int64_t mpos, int64_t ho, int64_t wo, int64_t tw, int64_t t0,
                             int64_t count, float* y, const ConvTileEpilogueF32& ep);
// d[3 i + c] = (c0, c1, c2)[c][i] for i < n under AVX-512: three channels' runs interleaved by
// pixel (Note [Stem rows] in conv_nchwc.cc).
void interleave3_avx512(const float* c0, const float* c1, const float* c2, float* d, int64_t n);
// Rows [row0, row1) of max_pool2d_nchwc_f32's output (row = plane * Ho + oh) under AVX-512.
void max_pool2d_nchwc_rows_avx512(const Pool2dParams& p, const float* x, float* y, int64_t row0, int64_t row1);
// Rows [row0, row1) of avg_pool2d_nchwc_f32's output under AVX-512, output o of row oh scaled by
// inv[oh * Wo + o] (Note [Blocked average pool] in conv_nchwc.cc).
void avg_pool2d_nchwc_rows_avx512(const Pool2dParams& p, const float* x, const float* inv, float* y, int64_t row0,
                                  int64_t row1);
// `count` consecutive outputs of a row of the blocked depthwise convolution under AVX-512: output o
// sums x[o * xstep + tap_off[t]] * the block's filter tap_w[t] over the `taps` listed, finished
// with ep (bias at the block, residual at the first output) into y + 16 * o.
void depthwise_nchwc_row_avx512(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x, int64_t xstep,
                                const float* w, float* y, int64_t count, const ConvTileEpilogueF32& ep);
// depthwise_nchwc_row_avx512 for a window S columns wide (S = 3 or 5 read at `stride` 1 or 2, or
// 7 or 9 at stride 1; no dilation across): `rows` kernel rows, row r's first tap for output o at x[o * stride * 16 +
// row_off[r]] with the block's filter row_w[r] (its S taps consecutive in both). Each kernel row's
// inputs are loaded once for its S taps (Note [Kernel rows in registers] in conv_nchwc_depthwise.cc).
void depthwise_nchwc_kernel_rows_avx512(int s, int stride, int rows, const int64_t* row_off, const int32_t* row_w,
                                        const float* x, const float* w, float* y, int64_t count,
                                        const ConvTileEpilogueF32& ep);
// The same for a whole output row of a padded input (at stride 2 a 5-wide window only): output o's
// first input column is o * stride - pad_left of rows `width` columns wide, row r's column 0 at
// x[row_off[r]], and the columns outside [0, width) read as zeros (Note [Row borders as zeros] in
// conv_nchwc_depthwise.cc).
void depthwise_nchwc_padded_rows_avx512(int s, int stride, int rows, const int64_t* row_off, const int32_t* row_w,
                                        const float* x, int64_t pad_left, int64_t width, const float* w, float* y,
                                        int64_t count, const ConvTileEpilogueF32& ep);
// `count` outputs of the blocked depthwise convolution anywhere in a plane under AVX-512 (Note [Small
// depthwise planes] in conv_nchwc_depthwise.cc): output i sums x[xoff[i] + tap_off[t]] * the block's filter
// tap_w[t] over the `taps` listed, finished with ep (bias at the block, residual laid out as y)
// into y + yoff[i].
void depthwise_nchwc_pixels_avx512(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x,
                                   const int64_t* xoff, const float* w, float* y, const int64_t* yoff, int64_t count,
                                   const ConvTileEpilogueF32& ep);
// `count` pixels of one block plane under AVX-512: y[i] = act(x[i] * scale + shift), the block's
// 16 scales and shifts (ep.act the activation; its bias and residual unused).
// layer_norm_channels_nchwc_f32's pixels [p0, p1) of one image (x, y at its first block).
void layer_norm_channels_nchwc_avx512(int64_t blocks, int64_t pixels, int64_t channels, const float* x, const float* w,
                                      const float* b, float eps, float* y, int64_t p0, int64_t p1);
void scale_shift_nchwc_avx512(int64_t count, const float* x, const float* scale, const float* shift, float* y,
                              const ConvTileEpilogueF32& ep);
// The AVX-512 kernel for tiles of mr pixels by nv blocks (NchwcTiling::pixels), or nullptr.
// Unless `listed`, the kernel takes every tap in order (tap_w unused) and pixel i's outputs at
// y + yoff[0] + 16 i: a rectangle of whole rows with every tap inside the input.
NchwcUkernelF32 nchwc_ukernel_f32_avx512(int nv, int mr, bool listed);
// The kernel for args.tiles whole tiles of a 1x1 stride-1 layer on blocked input (taps 1, lanes 16,
// ldc 1), tile t's pixel i at x + pix[0] + 16 (mr t + i) and its outputs at y + yoff[0] +
// 16 (mr t + i) (Note [Dense 1x1 tiles] in conv_nchwc.cc); nullptr where nchwc_ukernel_f32_avx512
// has no kernel.
NchwcUkernelF32 nchwc_dense_tiles_f32_avx512(int nv, int mr);
// The kernel for args.tiles whole tiles of pixels `pixel_floats` apart in the input (a row of a
// rectangle: its stride times 16 for blocked input, times 1 for plain), tile t's pixel i read at
// x + pix[0] + pixel_floats (mr t + i) through the taps (all of them in order, or listed) and its
// outputs at y + yoff[0] + 16 (mr t + i) (Note [Row tiles] in conv_nchwc.cc); nullptr where there
// is none for those.
NchwcUkernelF32 nchwc_row_tiles_f32_avx512(int nv, int mr, int64_t pixel_floats, bool plain, bool listed);

}  // namespace kiln::kernels::cpu
