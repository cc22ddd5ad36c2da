// CPU 2-D convolution, NCHW, by im2col + the blocked GEMM (kernels/cpu/gemm.h).
#pragma once

#include <cstdint>

#include "kernels/cpu/gemm.h"

namespace kiln::kernels::cpu {

// How the direct convolution tiles its product (Note [Pixels as rows] in conv_direct.cc): output
// columns or output pixels as the register tile's rows, or whichever wastes less of its tiles.
enum class DirectConvTiling { automatic, columns, pixels };

struct Conv2dParams {
  int64_t n = 1, c = 1, h = 1, w = 1;  // input [N, C, H, W]
  int64_t k = 1, r = 1, s = 1;         // weight [K, C / groups, R, S]
  int64_t ho = 1, wo = 1;              // output [N, K, Ho, Wo]
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_top = 0, pad_left = 0;   // bottom/right padding only shape Ho/Wo
  int64_t dil_h = 1, dil_w = 1;
  int64_t groups = 1;
  // The direct convolution's tiling (an engine's "direct_columns" / "direct_pixels" tactics, timed
  // at compile time); the other kernels ignore it. Pixels where no pixel tile fits: columns.
  DirectConvTiling tiling = DirectConvTiling::automatic;
  // The blocked convolution's panel width in output blocks, 3 or 4 (an engine's "panels3" /
  // "panels4" tactics: Note [Panels as tactics] in conv_nchwc.cc); 0: conv2d_nchwc_tiling's choice.
  int nchwc_panel_blocks = 0;
};

// x, w, y contiguous; bias [K] or nullptr. Workspace is one im2col matrix per worker
// ((C / groups) * R * S * Ho * Wo elements), never the whole batch.
// f32 runs the bias, and optionally an activation and a residual (y's layout, [N, K, Ho, Wo]), as the
// GEMM's epilogue on each output tile while it is in cache (output channels are the GEMM's rows).
struct Conv2dEpilogue {
  GemmActivation activation = GemmActivation::none;
  const float* residual = nullptr;
  bool residual_before_activation = false;
};
void conv2d_nchw_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                     const Conv2dEpilogue& epilogue = {});
void conv2d_nchw_f64(const Conv2dParams& p, const double* x, const double* w, const double* bias, double* y);
// Filters packed once (the GEMM's A, per group, for the ISA active now) for weights reused across
// calls: conv2d_nchw_f32_prepacked runs the im2col/direct GEMM path with them (never the depthwise
// kernel) under the same ISA.
size_t conv2d_packed_weight_f32_floats(const Conv2dParams& p);
void pack_conv2d_weight_f32(const Conv2dParams& p, const float* w, float* out);
void conv2d_nchw_f32_prepacked(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias, float* y,
                               const Conv2dEpilogue& epilogue = {});

// The direct convolution (Note [Direct convolution] in conv_direct.cc): the GEMM micro-kernel reads
// a once-per-image shifted (polyphase, padded) copy of x instead of an im2col matrix. Supported for
// every non-depthwise shape when the active ISA has the kernel (AVX-512, AVX2). Filters come either
// packed by pack_conv2d_direct_weight_f32 under the same ISA (packed_w, w unused) or raw in w
// (packed_w == nullptr: packed on each call).
bool conv2d_direct_supported(const Conv2dParams& p);
// The packed filters' panel height (filter rows per panel), which depends on the whole shape (the
// tiling and register tile are chosen per convolution): packed filters fit another convolution
// only if this agrees.
int conv2d_direct_tile_rows(const Conv2dParams& p);
// Whether the convolution runs with output pixels as the tile's rows (Note [Pixels as rows]).
bool conv2d_direct_pixel_rows(const Conv2dParams& p);
// Both at once (one look at the shape): what packed filters are keyed by.
struct DirectConvLayout {
  int tile_rows = 0;
  bool pixel_rows = false;
};
DirectConvLayout conv2d_direct_layout(const Conv2dParams& p);
// The (pixel tile, filter tap) pairs the pixel tiles run per image and group, with the epilogue in
// the tiles' store, how many that is without skipping taps that read only padding (Note [Taps that
// read only padding]), and whether the tiles read x itself rather than a padded copy (Note
// [Reading x in place]); {0, 0, false} when the convolution runs column tiles.
struct DirectConvTapPairs {
  int64_t run = 0, every = 0;
  bool in_place = false;
};
DirectConvTapPairs conv2d_direct_tap_pairs(const Conv2dParams& p);
// For tests and benchmarks: while one lives, every direct convolution uses this tiling (where the
// ISA has it) whatever its params say; the previous setting comes back when it goes. Not for use
// while convolutions run on other threads.
class DirectConvTilingOverride {
 public:
  explicit DirectConvTilingOverride(DirectConvTiling t);
  ~DirectConvTilingOverride();
  DirectConvTilingOverride(const DirectConvTilingOverride&) = delete;
  DirectConvTilingOverride& operator=(const DirectConvTilingOverride&) = delete;

 private:
  DirectConvTiling saved_;
};
size_t conv2d_direct_packed_weight_f32_floats(const Conv2dParams& p);
void pack_conv2d_direct_weight_f32(const Conv2dParams& p, const float* w, float* out);
void conv2d_direct_f32(const Conv2dParams& p, const float* x, const float* w, const float* packed_w, const float* bias,
                       float* y, const Conv2dEpilogue& epilogue = {});

}  // namespace kiln::kernels::cpu
