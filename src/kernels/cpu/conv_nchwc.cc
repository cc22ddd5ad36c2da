// Channel-blocked convolution behind kernels/cpu/conv_nchwc.h.
#include "kernels/cpu/conv_nchwc.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "kernels/cpu/conv_nchwc_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [Blocked channels]
// In NCHW a convolution's register tile (output pixels x output channels, Note [Pixels as rows] in
// conv_direct.cc) leaves its sums pixel-major, and each of its 64 channels is a short run in its
// own plane, 12.5 KB from the next on a 56 x 56 layer: the tile has to be transposed to be stored
// (10% of such a layer on a Xeon), its residual is read the same scattered way, and the next layer
// reads it back from 64 streams. With channels blocked by 16 ([N, C/16, H, W, 16], as ONNX
// Runtime's NCHWc and oneDNN's nChw16c), a pixel's 16 channels of a block are one cache line: the
// tile stores, adds the residual and reads its input in whole vectors, a block plane at a time.
//
// The kernel here: filters packed per panel of up to 4 output blocks as [C/16][tap][16][width];
// the register tile is 6 pixels x 64 channels (8 x 48, 12 x 32, 12 x 16 for narrower panels),
// each step broadcasting one input channel per pixel. The pixels of a tile are consecutive in the
// flattened output plane (rows may break inside a tile: each pixel has its own input offset), so
// their outputs are consecutive vectors, except on a padded layer's borders. An unpadded input (1x1 layers, stride or not) is read in
// place; a padded one too, the output cut into rectangles that list only the taps inside the input
// (Note [Borders without a copy]), except on small planes, where it is copied once into a
// zero-bordered plane (whole rows of 16-float pixels: a memcpy per row). Input blocks are summed in slices
// of at least 144 multiply-adds per output (one block of a 3x3 layer, nine of a 1x1) over chunks
// of up to 48 pixels (Note [Chunks for every thread]): a slice's filters (36 KiB for a panel of
// 4 blocks) are read from L1 by every tile of the chunk after the first, the chunk's partial sums
// stay in L1 between slices, and the last slice adds the bias, residual and activation as it
// stores. Slices of 768 (a 3x3 layer's 4-5 blocks, 150 KiB of filters, read from L2 by every
// tile) ran 56 x 56 to 7 x 7 3x3 layers 3-5% slower on one thread on a Xeon. Threads take (panel, image, chunk)
// items in order. Channel counts that are not multiples of 16 leave the last block's extra lanes
// zero: their filters and bias are packed as zeros, so they stay zero through every layer. A stem
// (at most 16 input channels, NchwcInput::plain) reads its NCHW input as it is, one channel a
// plane apart (or, when heavy, a copy interleaved by pixel: Note [Stem rows]), and writes blocked
// output: a region starts at the network's input unconverted.

namespace {

constexpr int64_t kMaxChunk = 4 * 49;  // pixels a work item at most (Note [Chunks for every thread])
// A work item's pixels with each rectangle's part rounded up to whole tiles (of at most 12).
constexpr int64_t kMaxTilePixels = kMaxChunk * 12;
constexpr double kNearBytes = 1 << 20;  // what a thread's share of L2 holds across a layer
constexpr int64_t kSliceDepth = 144;  // input channels x taps per slice (Note [Blocked channels])

// The scalar micro-kernel (any ISA): the same contract as the AVX-512 one, 4 pixels a tile.
template <int MR>
void nchwc_tile_scalar(const NchwcTileArgs& a, int nv) {
  float acc[MR][64] = {};
  const int width = 16 * nv;
  const float* x = a.x;
  for (int64_t b = 0; b < a.blocks; ++b, x += a.xblk)
    for (int t = 0; t < a.taps; ++t) {
      const float* w = a.w + (b * a.block_taps + a.tap_w[t]) * a.lanes * width;
      const int lanes = b + 1 == a.blocks && a.lanes == 16 && a.ldc == 1 ? a.last_lanes : a.lanes;
      for (int c = 0; c < lanes; ++c, w += width)
        for (int i = 0; i < MR; ++i) {
          const float xi = x[a.tap_off[t] + a.pix[i] + c * a.ldc];
          for (int j = 0; j < width; ++j) acc[i][j] += xi * w[j];
        }
    }
  for (int i = 0; i < a.m; ++i)
    for (int j = 0; j < width; ++j) {
      const int64_t at = (j / 16) * a.yblk + a.yoff[i] + j % 16;
      const float r = acc[i][j] + (a.accumulate ? a.y[at] : 0.0f);
      a.y[at] = a.ep == nullptr ? r
                                : finish_scalar(r + a.ep->bias[j],
                                                a.ep->residual != nullptr ? a.ep->residual + at : nullptr, *a.ep);
    }
}

// Note [Borders without a copy]
// A padded layer used to copy its input into zero-bordered planes so that every tap of every
// pixel read memory: 4-5% of a 56 x 56 3x3 layer at batch 1, and at batch 8 a 6.9 MB copy that
// left L2 before the tiles read it back. Instead the output plane is cut into rectangles whose
// pixels keep the same taps inside the input: bands of rows with the same valid kernel rows times
// bands of columns with the same valid kernel columns (for a 3x3 layer padded by 1: the interior,
// four edges and four corners). A rectangle's tiles list only its valid taps, with their filter
// taps (tap_w), and read from its first valid tap on, so no read falls in the padding; their
// outputs are scattered (yoff: a tile may run past a row's end into the next row of its
// rectangle). Work items are ranges of the rectangles' pixels in order (a chunk may span several,
// so its tiles share the filter slice in L1); a tile never mixes two rectangles, so each
// rectangle a chunk touches may end in a short tile. On small planes those short tiles cost more
// than the copy (a 7 x 7 plane: 12 tiles of 7 instead of 7, and ResNet-18's last stage ran 1.6x
// slower); there the copy stays, when the rectangles take over 2% more tiles.
struct Rect {
  int64_t oh0 = 0, rows = 0, ow0 = 0, cols = 0;
  int64_t dy = 0, dx = 0;        // input offset of the first valid tap: rows, columns
  int64_t tap0 = 0, taps = 0;    // its taps in Plan::tap_off / tap_w
  int64_t first = 0;             // its first pixel in the rectangles' order
};

// Output indices along one axis in bands with the same range [lo, hi) of kernel indices inside
// the input: (o0, o1, lo, hi).
std::vector<std::array<int64_t, 4>> bands(int64_t out, int64_t stride, int64_t pad, int64_t dil, int64_t in,
                                           int64_t k) {
  std::vector<std::array<int64_t, 4>> b;
  b.reserve(static_cast<size_t>(std::min<int64_t>(out, 2 * k + 1)));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t start = o * stride - pad;  // input index of kernel index 0
    int64_t lo = start >= 0 ? 0 : (-start + dil - 1) / dil;
    int64_t hi = in - 1 - start < 0 ? 0 : std::min(k, (in - 1 - start) / dil + 1);
    lo = std::min(lo, k);
    hi = std::max(hi, lo);
    if (!b.empty() && b.back()[2] == lo && b.back()[3] == hi) b.back()[1] = o + 1;
    else b.push_back({o, o + 1, lo, hi});
  }
  return b;
}

// Note [Stem rows]
// A stem's plain input (Note [Blocked channels]) is read a channel a plane apart, C values a tap:
// ResNet's 7 x 7 stem is 49 taps of 3 steps each, and GCC spills accumulators and pixel offsets
// in the loop around a tap's 3 steps (three input bases, a tap's offsets, the prefetch). Copied
// once into a zero-bordered plane whose pixels hold their C values together ([Hp][Wp][C], as
// NHWC), a kernel row's S taps of C values are S * C consecutive floats (with no dilation across
// columns), so the tiles run R taps of S * C steps, one input base each, through the same
// contiguous loop as a 16-channel block; the filters' packed order (tap by tap, a tap's channels)
// is already a row's order. The copy moves the input twice more, which pays where a copied float
// is used often: ResNet's stem (64 filters of 7 x 7, stride 2: 784 multiply-adds a copied float)
// went from 0.84 to 0.79 ms at batch 1 on two threads, but MobileNetV2's (32 of 3 x 3: 72) from
// 0.123 to 0.148. Rows are taken from 256 multiply-adds a copied float on.
bool stem_rows(const Conv2dParams& p) {
  return p.s > 1 && p.dil_w == 1 && p.k * p.r * p.s >= 256 * p.stride_h * p.stride_w;
}

// Note [The last block's real lanes]
// A channel count that is not a multiple of 16 leaves the last input block partly zero lanes with
// zero filters: 24 channels are 2 blocks, a third of a 24 -> 144 layer's steps multiplying zeros.
// The kernel's steps over the last block stop at its real channels (NchwcTileArgs::last_lanes, on
// the slice that holds it; an ungrouped layer's blocked input only). MobileNet-style layers with
// such inputs: MobileNetV2's two 24 -> 144 at 56 x 56, MNASNet's 24 -> 72 and 40 -> 120,
// MobileNetV3's 40-, 72-, 120-, 184- and 200-channel inputs. Engines at batch 1 on one thread,
// alternating libraries, 4 rounds (Zen 4): MobileNetV2 7.10-7.17 -> 7.00-7.13 ms, MNASNet 1.0
// 7.50-7.62 -> 7.30-7.45, MobileNetV3-Large 5.88-6.01 -> 5.83-5.88. (A partial last output block
// still costs whole vectors: its lanes share the FMAs of the real ones.)

// Note [Grouped blocks]
// A grouped convolution's output channels read only their own group's input channels. Where a
// group's channels fill whole blocks in and out (16 or 32 channels a group: ResNeXt's last two
// stages), a panel of output blocks lying in one group reads that group's input blocks, and the
// tiles are the ungrouped layer's with fewer blocks a slice. Where they do not (ResNeXt-50 32x4d's
// 4 and 8 channels a group), a span of consecutive groups does: 4 groups of 4 channels fill a
// block in and out, and the span runs as one group whose filters are zero between its groups
// (span times the multiply-adds, at the tiles' rate instead of the grouped NCHW kernel's). So a
// plan has block groups of gib input and gob output blocks each; the panels split each block
// group's output blocks, and the packed filters of a panel hold its block group's input blocks
// only. Before, ResNeXt-50 32x4d's grouped 3x3 layers ran NCHW with a conversion on either side:
// 5.4 ms of layers and 1.9 of conversions at batch 1 on two threads; blocked 4.4 ms (the span-4
// layers at 56 x 56 run 0.55 ms, 4x the work at the blocked tiles' full rate, against 0.43 + 0.24
// of conversions NCHW), and the model 44.4-57.1 -> 42.0-47.2 ms against ONNX Runtime's 42.7-49.0
// (which blocks a grouped layer only where each group fills whole blocks). Spans past 4 are not
// taken (a depthwise layer's would be 16: it has a kernel of its own).
// The block groups of p (1 for an ungrouped layer, or one without a span: unsupported, which the
// callers check).
int64_t block_groups_of(const Conv2dParams& p) {
  const int64_t span = p.groups == 1 ? 0 : nchwc_group_span(p.c, p.k, p.groups);
  return span == 0 ? 1 : p.groups / span;
}

struct Plan {
  bool plain = false;      // NCHW input (NchwcInput::plain)
  bool rows = false;       // a plain input read as kernel rows of S * C values (Note [Stem rows])
  int64_t kb = 0, cb = 0;
  // Note [Grouped blocks]: block groups, each of gob output blocks reading its own gib input
  // blocks; one group of all the blocks for an ungrouped convolution.
  int64_t block_groups = 1, gib = 0, gob = 0, group_panels = 0;
  int64_t taps = 0;        // R * S, or R for rows
  int64_t lanes = 0;       // input channels a block: 16 (the last block's lanes past C are zero),
                           // or C for a plain input (C <= 16), or S * C for rows
  int64_t last_lanes = 16; // the real channels of the last input block (Note [The last block's real lanes])
  int64_t px = 0;          // floats a pixel of the read plane: 16, or 1 for a plain input, C for rows
  bool copy = false;             // read a zero-bordered copy (Note [Borders without a copy])
  bool dense = false;            // a 1x1 stride-1 layer's pixels are consecutive (Note [Dense 1x1 tiles])
  int64_t hp = 0, wp = 0;        // the plane read: the copy's, or x's
  int64_t oy = 0, ox = 0;        // input row and column of output (0, 0)'s kernel index 0
  std::vector<Rect> rects;
  std::vector<int64_t> tap_off;  // the rectangles' taps: input offsets from the first valid tap
  std::vector<int32_t> tap_w;    // and filter taps
  int64_t pixels = 0;      // Ho * Wo
  NchwcTiling tiling;
  int64_t chunk = 0;       // pixels per work item at most: a multiple of every tile's pixels,
                           // or whole rows of the first rectangle (row_chunks)
  int64_t panels = 0, chunks = 0;
  bool row_chunks = false;   // chunks of whole rows of the first rectangle (Note [Row tiles])
  bool panel_inner = false;  // items ordered (image, chunk, panel) instead of (panel, image, chunk)
  int64_t slice_blocks = 0;  // input blocks per slice
};

Plan plan(const Conv2dParams& p, NchwcInput input) {
  Plan pl;
  pl.plain = input == NchwcInput::plain;
  pl.rows = pl.plain && stem_rows(p);
  pl.kb = nchwc_blocks(p.k);
  pl.cb = nchwc_blocks(p.c);
  pl.block_groups = block_groups_of(p);
  pl.gib = pl.cb / pl.block_groups, pl.gob = pl.kb / pl.block_groups;
  pl.lanes = pl.rows ? p.s * p.c : pl.plain ? p.c : kChannelBlock;
  pl.px = pl.rows ? p.c : pl.plain ? 1 : kChannelBlock;
  if (!pl.plain && pl.block_groups == 1) pl.last_lanes = p.c - (pl.cb - 1) * kChannelBlock;
  pl.taps = pl.rows ? p.r : p.r * p.s;
  pl.pixels = p.ho * p.wo;
  pl.tiling = conv2d_nchwc_tiling(p);
  pl.group_panels = (pl.gob + pl.tiling.panel_blocks - 1) / pl.tiling.panel_blocks;
  pl.panels = pl.block_groups * pl.group_panels;
  // Note [Chunks for every thread]: 48 or 49 pixels a chunk unless that leaves fewer than 4 items
  // a thread; then smaller ones. A 7 x 7 layer of 512 filters was 11 items, 6 and 5 for two
  // threads, and each thread's share of the panels streams its filters from memory while the other
  // waits: 1.1 ms on two threads against 1.3 on one. Each candidate is a multiple of every
  // panel's tile (6, 8 or 12 pixels; 7 with panels of 3 blocks).
  const bool all_six = pl.gob % 4 == 0;
  // (12-pixel tiles: nothing under 24.)
  static constexpr std::array<int64_t, 4> kBy7{49, 28, 14, 7}, kBy6{48, 24, 12, 6}, kBy12{48, 24, 24, 24};
  const std::array<int64_t, 4>& candidates = pl.tiling.panel_blocks == 3 ? kBy7 : all_six ? kBy6 : kBy12;
  const int64_t want = items_wanted();
  for (int64_t chunk : candidates) {
    pl.chunk = chunk;
    pl.chunks = (pl.pixels + chunk - 1) / chunk;
    if (p.n * pl.panels * pl.chunks >= want) break;
  }
  // A light 1x1 layer (at most 160 multiply-adds an output: MobileNetV2's 16-160 channel inputs)
  // spends a tile's few steps against the item's fixed costs (its offsets, its tile list, a queue
  // take): chunks 4x as large while there are still `want` items. MobileNetV2 at batch 1 ran 2-5%
  // faster, its 112 x 112 1x1 layers 4-6%; ResNets unchanged.
  if (pl.taps == 1 && pl.gib * pl.lanes <= 160 && pl.chunks > 1) {
    const int64_t big = 4 * pl.chunk, chunks = (pl.pixels + big - 1) / big;
    if (p.n * pl.panels * chunks >= want) pl.chunk = big, pl.chunks = chunks;
  }
  // Note [Borders without a copy]: rectangles, unless a copy costs less.
  const auto row_bands = bands(p.ho, p.stride_h, p.pad_top, p.dil_h, p.h, p.r);
  const auto col_bands = bands(p.wo, p.stride_w, p.pad_left, p.dil_w, p.w, p.s);
  const bool whole = row_bands.size() == 1 && col_bands.size() == 1 && row_bands[0][2] == 0 &&
                     row_bands[0][3] == p.r && col_bands[0][2] == 0 && col_bands[0][3] == p.s;
  if (pl.rows) {
    pl.copy = true;
  } else if (!whole) {
    const int64_t mr = pl.tiling.pixels(pl.tiling.panel_blocks);
    int64_t rect_tiles = 0;
    for (const auto& rb : row_bands)
      for (const auto& cb : col_bands) rect_tiles += ((rb[1] - rb[0]) * (cb[1] - cb[0]) + mr - 1) / mr;
    pl.copy = static_cast<double>(rect_tiles) > 1.02 * static_cast<double>((pl.pixels + mr - 1) / mr);
  }
  pl.hp = p.h, pl.wp = p.w, pl.oy = -p.pad_top, pl.ox = -p.pad_left;
  const size_t nrects = pl.copy ? 1 : row_bands.size() * col_bands.size();
  pl.rects.reserve(nrects);
  pl.tap_off.reserve(nrects * static_cast<size_t>(pl.taps));
  pl.tap_w.reserve(nrects * static_cast<size_t>(pl.taps));
  auto add_rect = [&](const std::array<int64_t, 4>& rb, const std::array<int64_t, 4>& cb) {
    Rect rc{rb[0], rb[1] - rb[0], cb[0], cb[1] - cb[0], rb[2] * p.dil_h, cb[2] * p.dil_w,
            static_cast<int64_t>(pl.tap_off.size()), 0, 0};
    const int64_t row_taps = pl.taps / p.r;  // S, or 1 for rows
    for (int64_t r = rb[2]; r < rb[3]; ++r)
      for (int64_t c = cb[2]; c < cb[3]; ++c) {
        pl.tap_off.push_back(((r - rb[2]) * p.dil_h * pl.wp + (c - cb[2]) * p.dil_w) * pl.px);
        pl.tap_w.push_back(static_cast<int32_t>(r * row_taps + c));
      }
    rc.taps = static_cast<int64_t>(pl.tap_off.size()) - rc.tap0;
    rc.first = pl.rects.empty() ? 0 : pl.rects.back().first + pl.rects.back().rows * pl.rects.back().cols;
    pl.rects.push_back(rc);
  };
  if (pl.copy) {
    // Rows and columns any tap of any output reads, from the top-left padding on.
    pl.hp = (p.ho - 1) * p.stride_h + (p.r - 1) * p.dil_h + 1;
    pl.wp = (p.wo - 1) * p.stride_w + (p.s - 1) * p.dil_w + 1;
    pl.oy = pl.ox = 0;
    add_rect({0, p.ho, 0, p.r}, {0, p.wo, 0, pl.rows ? 1 : p.s});
  } else {
    // The largest rectangle first: chunks of its whole rows (Note [Row tiles]).
    size_t top_rb = 0, top_cb = 0;
    auto area = [&](size_t i, size_t j) {
      return (row_bands[i][1] - row_bands[i][0]) * (col_bands[j][1] - col_bands[j][0]);
    };
    for (size_t i = 0; i < row_bands.size(); ++i)
      for (size_t j = 0; j < col_bands.size(); ++j)
        if (area(i, j) > area(top_rb, top_cb)) top_rb = i, top_cb = j;
    add_rect(row_bands[top_rb], col_bands[top_cb]);
    for (size_t i = 0; i < row_bands.size(); ++i)
      for (size_t j = 0; j < col_bands.size(); ++j)
        if (i != top_rb || j != top_cb) add_rect(row_bands[i], col_bands[j]);
  }
  // Note [Dense 1x1 tiles]: blocked input, one tap, stride 1 and no padding (one rectangle).
  // Pixel k is then 16 k floats into its input plane and its output plane.
  pl.dense = !pl.plain && pl.taps == 1 && p.stride_h == 1 && p.stride_w == 1 && !pl.copy && pl.rects.size() == 1 &&
             pl.hp == p.ho && pl.wp == p.wo && pl.oy == 0 && pl.ox == 0;
  // Note [Row tiles]: chunks of whole rows of the first (largest) rectangle where its rows hold
  // row tiles (at stride 1 or 2), as many rows as leave `want` items.
  const int64_t row_cols = pl.rects[0].cols, least_row_tile = NchwcTiling{}.pixels(4);  // 6 (nv 4)
  if (!pl.dense && p.stride_w <= 2 && row_cols >= least_row_tile && row_cols <= kMaxChunk &&
      p.n * pl.panels * ((pl.pixels + row_cols - 1) / row_cols) >= want) {
    for (int64_t rows = kMaxChunk / row_cols; rows >= 1; --rows) {
      pl.chunk = rows * row_cols;
      pl.chunks = (pl.pixels + pl.chunk - 1) / pl.chunk;
      if (p.n * pl.panels * pl.chunks >= want) break;
    }
    pl.row_chunks = true;
  }
  // Note [Panels inside or outside]
  // Items run panel by panel (each panel over every image and chunk) or chunk by chunk (each chunk
  // of each image through every panel). Panel by panel reads the filters once but the input once
  // a panel; chunk by chunk reads the input once but the filters once a chunk. Either repeat is
  // free while what is repeated stays in L2 (kNearBytes), so the order is the one that moves
  // fewer bytes from beyond it. Panel by panel everywhere (Note [Images share the filter blocks]
  // in conv_direct.cc: image by image, ResNet-18's 7 x 7 layers ran 1.33x the NCHW kernel's time
  // at batch 8) read ResNet-50's stride-2 1x1 layers' 25.7 MB input (batch 8) eight times: 9.0 ms
  // against ONNX Runtime's 7.3; chunk by chunk, 6.5. ResNet-50 ran 5% faster at batch 1 and 8.
  const double filters = 4.0 * static_cast<double>(pl.kb * kChannelBlock * pl.gib * pl.lanes * pl.taps);
  const double inputs = 4.0 * static_cast<double>(p.n * (pl.plain ? p.c : pl.cb * kChannelBlock) * p.h * p.w);
  auto far = [](double bytes) { return bytes > kNearBytes ? bytes : 0.0; };
  const double panel_outer = filters + static_cast<double>(pl.panels) * far(inputs);
  const double panel_inner = inputs + static_cast<double>(p.n * pl.chunks) * far(filters);
  // Where neither order reads from beyond L2 and there are several images, image by image: a
  // thread's share of the output is then whole images, the same ones its share of the next layer
  // reads (the depthwise layers split by image first too), so they stay in its own L2 instead of
  // half of them crossing to the other core's. Panel by panel, MobileNetV3-Small's 3x3 and 5x5
  // depthwise layers at 28 x 28 ran 0.136-0.171 ms at batch 8 on two threads, image by image
  // 0.113-0.134; the sums of the layers' times: MobileNetV3-Small 5.71 -> 5.52 ms, MobileNetV2
  // 21.7 -> 21.2, ResNet-50 169.6 -> 168.1. One image goes chunk by chunk as well, its rows split
  // between the threads as the depthwise layers split them (Note [One image split by rows] in
  // conv_nchwc_depthwise.cc).
  const bool near = far(inputs) == 0.0 && far(filters) == 0.0;
  pl.panel_inner = near || panel_inner < panel_outer;
  KILN_ASSERT(pl.chunk <= kMaxChunk, "conv2d_nchwc: chunk of ", pl.chunk, " pixels");
  const int64_t per_block = pl.lanes * pl.taps;
  const int64_t slices = std::max<int64_t>(1, (pl.gib * per_block + kSliceDepth - 1) / kSliceDepth);
  pl.slice_blocks = (pl.gib + slices - 1) / slices;
  return pl;
}

// Note [Row tiles]: the row tile for panels of nv blocks on rows `cols` wide, 7 pixels or the
// panel's default (NchwcTiling), whichever costs less a row, counting `steps` multiply-add steps a
// tile (nv MR / 2 cycles each, at least the 4 of an FMA's latency) and its epilogue (~1.5 cycles a
// vector stored, 20 a call), and what is left at the row's end in a listed tile of 1, 7 or the
// default's pixels. A 14-pixel row is then two 7-pixel tiles, not a 12-pixel one and 2 pixels in a
// 7-pixel one, and a stem's 111 (27 steps) nine 12-pixel tiles and a 7-pixel one.
int row_tile_pixels(int nv, int64_t cols, int64_t steps) {
  const int wide = NchwcTiling{}.pixels(nv);
  auto tile = [&](int mr) {
    return static_cast<double>(steps) * std::max(4.0, 0.5 * nv * mr) + 20.0 + 1.5 * nv * mr;
  };
  auto row_cost = [&](int mr) {
    const int64_t left = cols % mr;
    const double rest = left == 0 ? 0.0 : left == 1 ? tile(1) : left <= 7 && nv <= 3 ? tile(7) : tile(wide);
    return static_cast<double>(cols / mr) * tile(mr) + rest;
  };
  return nv <= 3 && row_cost(7) < row_cost(wide) ? 7 : wide;
}

// A panel's output blocks: its first, and how many (a block group's last panel may be narrower).
int64_t panel_block(const Plan& pl, int64_t panel) {
  return panel / pl.group_panels * pl.gob + panel % pl.group_panels * pl.tiling.panel_blocks;
}
int panel_width(const Plan& pl, int64_t panel) {
  const int64_t pb = pl.tiling.panel_blocks;
  return static_cast<int>(std::min(pb, pl.gob - pb * (panel % pl.group_panels)));
}
// The first input block a panel reads (its block group's).
int64_t panel_input_block(const Plan& pl, int64_t panel) { return panel / pl.group_panels * pl.gib; }

// The plane the tiles read: x itself, or x copied into zero-bordered planes (a thread's scratch):
// per image a plane per block (blocked input) or channel (plain), or for rows one plane of pixels
// of C values (Note [Stem rows]).
const float* padded_input(const Conv2dParams& p, const Plan& pl, const float* x) {
  if (!pl.copy) return x;
  const int64_t planes = p.n * (pl.rows ? 1 : pl.plain ? p.c : pl.cb), row_floats = pl.wp * pl.px;
  float* xp = thread_scratch<float, ScratchSlot::nchwc_pad>(static_cast<size_t>(planes * pl.hp * row_floats));
  const int64_t left = std::min(p.pad_left, pl.wp), cols = std::max<int64_t>(0, std::min(p.w, pl.wp - p.pad_left));
  const bool avx512 = active_isa() == Isa::avx512;
  parallel_for(0, planes * pl.hp, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t plane = row / pl.hp, ih = row % pl.hp - p.pad_top;
      float* d = xp + row * row_floats;
      if (ih < 0 || ih >= p.h) {
        std::memset(d, 0, static_cast<size_t>(row_floats) * sizeof(float));
        continue;
      }
      std::memset(d, 0, static_cast<size_t>(left * pl.px) * sizeof(float));
      float* dc = d + left * pl.px;
      if (!pl.rows) {
        std::memcpy(dc, x + (plane * p.h + ih) * p.w * pl.px, static_cast<size_t>(cols * pl.px) * sizeof(float));
      } else {  // the image's C channel rows interleaved by pixel
        const int64_t hw = p.h * p.w;
        const float* xs = x + (plane * p.c * p.h + ih) * p.w;
        if (p.c == 3 && avx512) interleave3_avx512(xs, xs + hw, xs + 2 * hw, dc, cols);
        else
          for (int64_t iw = 0; iw < cols; ++iw)
            for (int64_t c = 0; c < p.c; ++c) dc[iw * p.c + c] = xs[c * hw + iw];
      }
      const int64_t right = pl.wp - left - cols;
      if (right > 0) std::memset(dc + cols * pl.px, 0, static_cast<size_t>(right * pl.px) * sizeof(float));
    }
  });
  return xp;
}

// The micro-kernels conv2d_nchwc_f32 calls for panels of nv blocks, nv = 1 .. 4 (none but on
// AVX-512), looked up once with the plan.
struct TileKernels {
  struct Panel {
    NchwcUkernelF32 all = nullptr, listed = nullptr, dense = nullptr;
    // Note [Row tiles]: whole tiles along a rectangle's rows, with every tap or listed ones.
    NchwcUkernelF32 row = nullptr, row_listed = nullptr;
    int row_mr = 0;
    // Listed tiles of 1 and 7 pixels, for a rectangle's few pixels left over by row tiles.
    NchwcUkernelF32 one = nullptr, seven = nullptr;
  };
  std::array<Panel, 5> by_nv;
};

TileKernels tile_kernels_for(const Conv2dParams& p, const Plan& pl, Isa isa) {
  TileKernels t;
  for (int nv = 1; isa == Isa::avx512 && nv <= 4; ++nv) {
    TileKernels::Panel& k = t.by_nv[static_cast<size_t>(nv)];
    const int mr = pl.tiling.pixels(nv);
    k.all = nchwc_ukernel_f32_avx512(nv, mr, false);
    k.listed = nchwc_ukernel_f32_avx512(nv, mr, true);
    if (pl.dense) {
      k.dense = nchwc_dense_tiles_f32_avx512(nv, mr);
      continue;
    }
    k.row_mr = row_tile_pixels(nv, pl.rects[0].cols, pl.gib * pl.taps * pl.lanes);
    k.row = nchwc_row_tiles_f32_avx512(nv, k.row_mr, p.stride_w * pl.px, pl.plain, false);
    k.row_listed = nchwc_row_tiles_f32_avx512(nv, k.row_mr, p.stride_w * pl.px, pl.plain, true);
    if (mr > 1) k.one = nchwc_ukernel_f32_avx512(nv, 1, true);
    if (mr > 7) k.seven = nchwc_ukernel_f32_avx512(nv, 7, true);
  }
  return t;
}

}  // namespace

struct NchwcPlan {
  Plan plan;
  Isa isa;              // the ISA active when the plan was made
  TileKernels kernels;  // its kernels for that ISA
};

std::shared_ptr<const NchwcPlan> conv2d_nchwc_plan(const Conv2dParams& p, NchwcInput input) {
  KILN_CHECK(conv2d_nchwc_supported(p, input), "conv2d_nchwc_plan: needs one group or groups that fill whole blocks",
             input == NchwcInput::plain ? " and at most 16 channels of plain input" : "", ", got C=", p.c, " K=", p.k,
             " groups=", p.groups);
  Plan pl = plan(p, input);
  const Isa isa = active_isa();
  TileKernels kernels = tile_kernels_for(p, pl, isa);
  return std::make_shared<const NchwcPlan>(NchwcPlan{std::move(pl), isa, kernels});
}

namespace {
// The blocks of n images of c channels, split between the threads: fn(img, blk, lanes, nb) for
// each, nb = img * blocks + blk, lanes its real channels.
template <class F>
void for_each_channel_block(int64_t n, int64_t c, F fn) {
  const int64_t cb = nchwc_blocks(c);
  parallel_for(0, n * cb, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t nb = b0; nb < b1; ++nb)
      fn(nb / cb, nb % cb, std::min(kChannelBlock, c - nb % cb * kChannelBlock), nb);
  });
}
}  // namespace

void nchw_to_nchwc_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y) {
  for_each_channel_block(n, c, [&](int64_t img, int64_t blk, int64_t lanes, int64_t nb) {
    const float* xs = x + (img * c + blk * kChannelBlock) * hw;
    float* yd = y + nb * hw * kChannelBlock;
    // 64 pixels at a time: the 16 source runs stay in L1 while the block's lines are written.
    for (int64_t p0 = 0; p0 < hw; p0 += 64) {
      const int64_t p1 = std::min(hw, p0 + 64);
      for (int64_t q = p0; q < p1; ++q) {
        float* d = yd + q * kChannelBlock;
        for (int64_t l = 0; l < lanes; ++l) d[l] = xs[l * hw + q];
        for (int64_t l = lanes; l < kChannelBlock; ++l) d[l] = 0.0f;
      }
    }
  });
}

void nhwc_to_nchwc_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y) {
  for_each_channel_block(n, c, [&](int64_t img, int64_t blk, int64_t lanes, int64_t nb) {
    const float* xs = x + img * hw * c + blk * kChannelBlock;
    float* yd = y + nb * hw * kChannelBlock;
    // A pixel's block is `lanes` consecutive floats of its channels.
    for (int64_t q = 0; q < hw; ++q) {
      std::memcpy(yd + q * kChannelBlock, xs + q * c, static_cast<size_t>(lanes) * sizeof(float));
      std::fill(yd + q * kChannelBlock + lanes, yd + (q + 1) * kChannelBlock, 0.0f);
    }
  });
}

void nchwc_to_nchw_f32(int64_t n, int64_t c, int64_t hw, const float* x, float* y) {
  for_each_channel_block(n, c, [&](int64_t img, int64_t blk, int64_t lanes, int64_t nb) {
    const float* xs = x + nb * hw * kChannelBlock;
    float* yd = y + (img * c + blk * kChannelBlock) * hw;
    for (int64_t l = 0; l < lanes; ++l)
      for (int64_t q = 0; q < hw; ++q) yd[l * hw + q] = xs[q * kChannelBlock + l];
  });
}

void max_pool2d_nchwc_f32(const Pool2dParams& p, const float* x, float* y) {
  const bool avx512 = active_isa() == Isa::avx512;
  parallel_for(0, p.planes * p.ho, 4, [&](int64_t r0, int64_t r1) {
    if (avx512) return max_pool2d_nchwc_rows_avx512(p, x, y, r0, r1);
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t plane = row / p.ho, oh = row % p.ho;
      const float* xp = x + plane * p.h * p.w * kChannelBlock;
      float* yr = y + row * p.wo * kChannelBlock;
      for (int64_t ow = 0; ow < p.wo; ++ow) {
        float o[kChannelBlock];
        for (float& v : o) v = -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < p.kh; ++i) {
          const int64_t ih = oh * p.stride_h - p.pad_top + i * p.dil_h;
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t j = 0; j < p.kw; ++j) {
            const int64_t iw = ow * p.stride_w - p.pad_left + j * p.dil_w;
            if (iw < 0 || iw >= p.w) continue;
            const float* v = xp + (ih * p.w + iw) * kChannelBlock;
            // A NaN already taken stays (nothing compares greater); a NaN read is taken.
            for (int64_t l = 0; l < kChannelBlock; ++l) o[l] = (v[l] > o[l] || v[l] != v[l]) ? v[l] : o[l];
          }
        }
        std::memcpy(yr + ow * kChannelBlock, o, sizeof o);
      }
    }
  });
}

// Note [Blocked average pool]
// ResNet-D's shortcuts (timm's resnet50d: a 2 x 2 average pool before the projection), DenseNet's
// transitions and Inception's pool branches pool a blocked activation; with no blocked kernel
// each ended a region in a conversion back and forth around an NCHW pool. A window's 16-lane
// pixels add as vectors (a row of taps at a time), then scale by the divisor avg_pool2d uses.
// Batch 1, two threads, engines of the two builds alternating (the pools now inside the region):
// timm's resnet50d 35.6-41.3 -> 34.9-39.7 ms (ORT 40.2-44.2), the ONNX zoo's Inception v2 (its 8
// pools had kept the whole network NCHW) 20.4-20.6 -> 14.8-14.9 (ORT 19.0), DenseNet-121
// 28.6-28.9 -> 28.0-28.4 (ORT 34.7-35.0). Under AVX-512 a row runs as 16-lane vectors
// (avg_pool2d_nchwc_rows_avx512, the sums in the same order): this file is built for the baseline
// ISA, so the lane loop below ran 4 lanes wide, and the pool was bound by its instructions, not
// its bytes. A 2 x 2 pool of [8, 128, 56, 56] after a 1x1 layer on one thread 1.37 -> 0.89 ms
// (0.21 -> 0.12 on two threads image by image, Note [Depth-first groups]); DenseNet-121's three
// transition pools at batch 8 on two threads 0.53 / 0.23 / 0.13 -> 0.38-0.41 / 0.15-0.16 / 0.10-0.11
// ms; Inception-v3's nine at batch 1 0.34-0.39 -> 0.16-0.25 ms in all.
void avg_pool2d_nchwc_f32(const Pool2dParams& p, const float* x, float* y) {
  KILN_CHECK(p.dil_h == 1 && p.dil_w == 1, "avg_pool2d_nchwc_f32: dilation ", p.dil_h, "x", p.dil_w);
  std::vector<float> inv(static_cast<size_t>(p.ho * p.wo));
  for (int64_t oh = 0; oh < p.ho; ++oh)
    for (int64_t ow = 0; ow < p.wo; ++ow) {
      const int64_t d = avg_pool_divisor(p, oh, ow);
      inv[static_cast<size_t>(oh * p.wo + ow)] = d > 0 ? 1.0f / static_cast<float>(d) : 0.0f;
    }
  const int64_t grain = std::max<int64_t>(1, 1024 / std::max<int64_t>(1, p.wo * p.kh * p.kw));
  const bool avx512 = active_isa() == Isa::avx512;
  parallel_for(0, p.planes * p.ho, grain, [&](int64_t r0, int64_t r1) {
    if (avx512) return avg_pool2d_nchwc_rows_avx512(p, x, inv.data(), y, r0, r1);
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t plane = row / p.ho, oh = row % p.ho;
      const float* xp = x + plane * p.h * p.w * kChannelBlock;
      float* yr = y + row * p.wo * kChannelBlock;
      const int64_t ih0 = std::max<int64_t>(0, oh * p.stride_h - p.pad_top);
      const int64_t ih1 = std::min(p.h, oh * p.stride_h - p.pad_top + p.kh);
      for (int64_t ow = 0; ow < p.wo; ++ow) {
        const int64_t iw0 = std::max<int64_t>(0, ow * p.stride_w - p.pad_left);
        const int64_t iw1 = std::min(p.w, ow * p.stride_w - p.pad_left + p.kw);
        float acc[kChannelBlock] = {};
        for (int64_t ih = ih0; ih < ih1; ++ih)
          for (int64_t iw = iw0; iw < iw1; ++iw) {
            const float* v = xp + (ih * p.w + iw) * kChannelBlock;
            for (int64_t l = 0; l < kChannelBlock; ++l) acc[l] += v[l];
          }
        const float s = inv[static_cast<size_t>(oh * p.wo + ow)];
        for (int64_t l = 0; l < kChannelBlock; ++l) yr[ow * kChannelBlock + l] = acc[l] * s;
      }
    }
  });
}

// Note [Blocked global pool]
// A CNN's last convolution feeds a global average pool. Pooled in NCHW, the region ended in a
// from_nchwc of the whole last activation (ResNet-50 at batch 8: 7 x 7 x 2048 x 8, 0.23 ms, then
// the pool 0.13); pooled blocked, the conversion back is of one pixel a channel. A plane's 16 lanes
// sum in four partial sums over its pixels (independent adds; less rounding on a large plane).
namespace {

// Per plane and lane, g of the sum of f(x) over the plane's pixels, in four partial sums of Acc.
template <class Acc, class F, class G>
void global_sum_nchwc_f32(int64_t planes, int64_t pixels, const float* x, float* y, F f, G g) {
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 14) / (std::max<int64_t>(pixels, 1) * kChannelBlock));
  parallel_for(0, planes, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t plane = p0; plane < p1; ++plane) {
      const float* xp = x + plane * pixels * kChannelBlock;
      Acc acc[4][kChannelBlock] = {};
      int64_t i = 0;
      for (; i + 4 <= pixels; i += 4)
        for (int u = 0; u < 4; ++u)
          for (int64_t l = 0; l < kChannelBlock; ++l) acc[u][l] += f(xp[(i + u) * kChannelBlock + l]);
      for (; i < pixels; ++i)
        for (int64_t l = 0; l < kChannelBlock; ++l) acc[0][l] += f(xp[i * kChannelBlock + l]);
      for (int64_t l = 0; l < kChannelBlock; ++l)
        y[plane * kChannelBlock + l] = g((acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]));
    }
  });
}

}  // namespace

void global_avg_pool_nchwc_f32(int64_t planes, int64_t pixels, const float* x, float* y) {
  KILN_ASSERT(pixels >= 1, "global_avg_pool_nchwc_f32: ", pixels, " pixels");
  const float inv = 1.0f / static_cast<float>(pixels);
  global_sum_nchwc_f32<float>(
      planes, pixels, x, y, [](float v) { return v; }, [inv](float s) { return s * inv; });
}

// Note [Blocked channel norm]
// ConvNeXt normalizes each pixel over its channels (a LayerNorm in channels-last order, exported
// as permute -> LayerNormalization over the last axis -> permute back) after every depthwise layer.
// Run in NCHW, that cut the blocked region twice per block (from_nchwc of the depthwise output,
// to_nchwc of the norm's). Blocked, a pixel's channels are its 16 lanes in each block, `pixels * 16`
// floats apart: its sums run over the blocks, lanes past the channel count masked out, then across
// the 16 lanes. Two passes over the pixel (mean, then the squared deviations from it), as the NCHW
// kernels do.
void layer_norm_channels_nchwc_f32(int64_t n, int64_t blocks, int64_t pixels, int64_t channels, const float* x,
                                   const float* w, const float* b, float eps, float* y) {
  KILN_ASSERT(channels >= 1 && channels <= blocks * kChannelBlock && channels > (blocks - 1) * kChannelBlock,
              "layer_norm_channels_nchwc_f32: ", channels, " channels in ", blocks, " blocks");
  const bool avx512 = active_isa() == Isa::avx512;
  const int64_t image = blocks * pixels * kChannelBlock;
  // Units of 32 pixels, so a plane splits between threads at batch 1.
  constexpr int64_t kUnit = 32;
  const int64_t units = (pixels + kUnit - 1) / kUnit;
  const int64_t grain = std::max<int64_t>(1, 2048 / (blocks * kUnit));
  parallel_for(0, n * units, grain, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t img = u / units, p0 = u % units * kUnit, p1 = std::min(pixels, p0 + kUnit);
      const float* xi = x + img * image;
      float* yi = y + img * image;
      if (avx512) {
        layer_norm_channels_nchwc_avx512(blocks, pixels, channels, xi, w, b, eps, yi, p0, p1);
        continue;
      }
      for (int64_t p = p0; p < p1; ++p) {
        auto at = [&](int64_t c) { return (c / kChannelBlock * pixels + p) * kChannelBlock + c % kChannelBlock; };
        float sum = 0;
        for (int64_t c = 0; c < channels; ++c) sum += xi[at(c)];
        const float mean = sum / static_cast<float>(channels);
        float ss = 0;
        for (int64_t c = 0; c < channels; ++c) ss += (xi[at(c)] - mean) * (xi[at(c)] - mean);
        const float rstd = 1.0f / std::sqrt(ss / static_cast<float>(channels) + eps);
        for (int64_t c = 0; c < blocks * kChannelBlock; ++c) yi[at(c)] = (xi[at(c)] - mean) * rstd * w[c] + b[c];
      }
    }
  });
}

// Note [Blocked spatial norm]
// ConvNeXt V2's global response norm starts with the L2 norm of each channel over H and W
// (ReduceL2 over axes 2 and 3), read from the output of the 1x1 expansion before it. Run in NCHW,
// it cut the region at every block: the expansion's whole output (4x the block's width) went
// through from_nchwc. Blocked, it is the global pool's loop summing squares in f64 (as the norm op
// does: no overflow below |x| ~ 1e154), then a square root rounded once to f32.
void global_norm_nchwc_f32(int64_t planes, int64_t pixels, const float* x, float* y) {
  KILN_ASSERT(pixels >= 0, "global_norm_nchwc_f32: ", pixels, " pixels");
  global_sum_nchwc_f32<double>(
      planes, pixels, x, y, [](float v) { return static_cast<double>(v) * v; },
      [](double s) { return static_cast<float>(std::sqrt(s)); });
}

// Note [Blocked batch norm]
// A batch norm right after a convolution folds into its filters (src/compiler/passes/bn_fold.cc),
// but a pre-activation ResNet's normalizes each block's input, the residual sum that the shortcut
// also reads, and a ReLU follows it: ResNet-50 v2 ran its 17 such batch norms and ReLUs in NCHW,
// with the whole network kept NCHW around them (1.22x ONNX Runtime's time at batch 1, 1.20x at
// batch 8). The layout pass turns such a batch norm into this scale and shift, on the blocked
// values, with the activation after it applied in the same pass. A partial block's scales and
// shifts are zero past C, so its extra lanes come out zero (an activation of zero is zero).
void scale_shift_nchwc_f32(int64_t n, int64_t blocks, int64_t pixels, const float* x, const float* scale,
                           const float* shift, float* y, GemmActivation act) {
  ConvTileEpilogueF32 ep;
  ep.act = blocked_act(act);
  const bool avx512 = active_isa() == Isa::avx512;
  // Units of 64 pixels (4 KiB), so a plane splits between threads at batch 1.
  constexpr int64_t kUnit = 64;
  const int64_t units = (pixels + kUnit - 1) / kUnit;
  parallel_for(0, n * blocks * units, 16, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1;) {
      const int64_t plane = u / units, first = u % units;
      const int64_t last = std::min(units, first + (u1 - u));  // this plane's units in [u0, u1)
      const int64_t p0 = first * kUnit, p1 = std::min(pixels, last * kUnit);
      const int64_t blk = plane % blocks;
      const float* xs = x + (plane * pixels + p0) * kChannelBlock;
      float* ys = y + (plane * pixels + p0) * kChannelBlock;
      const float* sc = scale + blk * kChannelBlock;
      const float* sh = shift + blk * kChannelBlock;
      if (avx512) {
        scale_shift_nchwc_avx512(p1 - p0, xs, sc, sh, ys, ep);
      } else {
        for (int64_t i = 0; i < (p1 - p0) * kChannelBlock; ++i)
          ys[i] = finish_scalar(std::fma(xs[i], sc[i % kChannelBlock], sh[i % kChannelBlock]), nullptr, ep);
      }
      u += last - first;
    }
  });
}

bool conv2d_nchwc_copies_input(const Conv2dParams& p, NchwcInput input) { return plan(p, input).copy; }

bool conv2d_nchwc_reads_rows(const Conv2dParams& p, NchwcInput input) {
  return input == NchwcInput::plain && stem_rows(p);
}

int64_t nchwc_group_span(int64_t c, int64_t k, int64_t groups) {
  if (groups < 1 || c % groups != 0 || k % groups != 0) return 0;
  for (int64_t span = 1; span <= kMaxGroupSpan; ++span)
    if (groups % span == 0 && span * (c / groups) % kChannelBlock == 0 && span * (k / groups) % kChannelBlock == 0)
      return span;
  return 0;
}

bool conv2d_nchwc_supported(const Conv2dParams& p, NchwcInput input) {
  const bool grouping = p.groups == 1 || (input == NchwcInput::blocked && nchwc_group_span(p.c, p.k, p.groups) != 0);
  return grouping && p.c > 0 && p.k > 0 && (input == NchwcInput::blocked || p.c <= kChannelBlock) && p.r >= 1 &&
         p.s >= 1 && p.ho >= 1 && p.wo >= 1 && p.stride_h >= 1 && p.stride_w >= 1 && p.dil_h >= 1 && p.dil_w >= 1 &&
         p.pad_top >= 0 && p.pad_left >= 0;
}

// Note [Dense 1x1 tiles]
// A light 1x1 layer's tile is few steps (MobileNetV2's 32 -> 16 projection: 32 steps of 12
// multiply-adds), and per tile nchwc_tile paid for what its general contract needs: a call through
// a pointer with its arguments in memory, twelve pixel offsets (more than the free general
// registers, so GCC kept some in vector registers and moved them back every step), a line of
// filters fetched into L1 every step and the next block's lines once a block. A loop of the same
// steps with pixels at fixed distances ran the 32 -> 16 layer at 56 x 56 in 0.014 ms where the
// engine's layer took 0.026. At stride 1 with one tap and no padding an item's pixels are
// consecutive in the input and the output, so its whole tiles go to one call of the dense kernel
// (nchwc_dense_tiles_f32_avx512, the one-tap case of the row tiles, Note [Row tiles]):
// pixel i of tile t at 16 (MR t + i) floats from the first, no offsets, no fetching ahead into L1
// (a slice's filters, at most 36 KiB, are read in order, a stream the hardware prefetcher follows;
// measured on a 48 KiB L1 only), only the next slice's or panel's filters into L2 as before (Note
// [Filters fetched ahead]). One thread, batch 1, the same binary
// with the path on and off alternating (`kiln bench --profile` of a 56 x 56 chain): 32 -> 16
// 0.026-0.028 -> 0.019 ms, 16 -> 96 0.070-0.076 -> 0.053-0.054, 96 -> 16 0.063-0.066 -> 0.049-0.050;
// engines' medians, three alternations: MobileNetV2 3.54-3.93 -> 3.33-3.67 ms on one thread,
// 2.03-2.08 -> 1.92-1.96 on two; MNASNet 3.70-3.74 -> 3.44-3.51 and 2.08-2.10 -> 1.91-2.03;
// ResNet-50 on two threads 16.94-17.05 -> 16.63-16.66 (batch 8: 135-138 -> 131). Fetching the
// next block's lines as nchwc_tile does was no better (MobileNetV2 2-3% slower on one thread, 2%
// faster on two, ResNet-50 within noise), so the dense loop does without. Nor does such an item
// list its pixels' offsets (two stores a pixel, 6% of a 112 x 112 chain's samples): pixel k is 16 k
// floats into both planes, so only the pixels after its whole tiles are listed: 32 -> 16 at
// 112 x 112 0.080 -> 0.071-0.073 ms, 16 -> 96 0.217-0.221 -> 0.198-0.209; MobileNetV2 at batch 1
// 3.10-3.21 -> 3.07-3.13 ms on one thread (medians, three alternations), 1.75-1.79 -> 1.72-1.78 on two.
//
// Note [Row tiles]
// Outside a dense layer a tile's pixels carry their own input offsets, so that a tile may run on
// past a row's end, and the kernel holds them in general registers: the 7- or 12-pixel tile needs
// more than there are, and GCC reloaded spilled offsets between the broadcasts of each step. On a
// row of a rectangle the pixels are a fixed distance apart (the stride times 16 floats for a
// blocked input, the stride for a plain one, the stride times C for a stem's rows:
// Note [Stem rows]), so nchwc_row_tiles_f32_avx512 runs whole tiles along it with that distance a
// constant: a broadcast's address is one base plus a displacement, no offsets, and a run of tiles
// is one call. Only what is left at a row's end (less than a tile) is listed, in tiles of 1 or 7
// pixels where they hold it (a 12-pixel tile costs the same for 3 pixels as for 12), and the row
// tiles are 7 pixels where that wastes less (row_tile_pixels): rows of 14 as one 12-pixel tile and
// 2 pixels in a 7-pixel one ran DenseNet's 128 -> 32 3x3 at 14 x 14 (batch 8, two threads) in 0.33
// ms against 0.26 before row tiles; as two 7-pixel row tiles 0.24 (ONNX Runtime 0.25), ResNet-50's
// 256 -> 256 at 14 x 14 0.346 -> 0.293. And since what is left is then per row, the largest
// rectangle comes first and its rows are whole in a chunk: a chunk is as many of its rows as leave
// `want` items (at most kMaxChunk pixels), and quarter items (Note [Quarter items at the end]) are
// whole rows too. MobileNetV4's stem (3 -> 32, 3 x 3 stride 2 on 224 x 224, plain input), one
// thread: 0.139 -> 0.110 ms (ONNX Runtime 0.097-0.101); its 32 -> 32 3 x 3 stride 2 at 112 x 112
// 0.240 -> 0.228 (0.240); Medium's 32 -> 128 0.986 -> 0.937 (0.941; per-layer minima of 4-6
// alternations). At batch 1 on two threads, against the build before, medians by distance (near):
// MobileNetV4-Medium 4.574 -> 4.486 ms, MobileNetV3-Large 1.546 -> 1.517, MobileNetV2 1.744 ->
// 1.732, ResNet-50 16.08 -> 15.99, EfficientNet-B0 even (bench/RESULTS.md, 2026-12-06 20:18). A
// stem's rows (3 or 4 channels) took them later: ResNet-50's 7 x 7 stem on one thread 1.01-1.02 ->
// 0.97-0.98 ms in the engine, ~96% of the FMA peak.
//
// Note [Blocked tiles]
// Panels of 4 output blocks run 6-pixel tiles (8 x 48, 12 x 32 and 12 x 16 for a narrower last
// panel), which split 56 x 56, 28 x 28 and 14 x 14 planes with at most a pixel to spare, but a
// 7 x 7 plane into 9 tiles for 49 pixels (10% of the work wasted: ResNet's last stage ran 8-13%
// slower than the NCHW kernel with its 7-pixel tiles). Planes that 7-pixel tiles split with 3% less
// waste take panels of 3 blocks and 7 x 48 tiles (7 x 32, 7 x 16 for the last panel).
//
// Note [Panels as tactics]
// The waste is not all that decides. Where K is not a multiple of 64 the last panel is narrower,
// and its tiles (12 x 32, 12 x 16) leave spare pixels of their own; its items are also cheaper
// than the others', which splits the work unevenly between the threads. Layers alone, batch 1,
// 2 threads (BM_conv_nchwc_panels in bench/conv_layout_bench.cc): MobileNetV2's 576 -> 96 1x1 at
// 14 x 14 ran 0.082 ms in panels of 4 + 2 blocks and 0.077 in 3 + 3 (7 x 48 tiles, 196 = 28 x 7);
// 256 -> 144 at 56 x 56 0.778 in 4 + 4 + 1 and 0.742 in 3 + 3 + 3. But 256 -> 160 at 28 x 28 ran
// 0.213 in 4 + 4 + 2 and 0.238 in 3 + 3 + 3 + 1, and by how much either wins moves with the plane,
// batch and threads. So for K that is not a multiple of 64, an engine times both widths (the
// "panels3" and "panels4" tactics of fused_conv2d_nchwc set p.nchwc_panel_blocks). Untuned,
// panels of 3 are taken where panels of 4 would leave one or two blocks over and panels of 3
// none or two (the same benchmark at batch 1 and 8, 1 and 2 threads: 3 + 3 ran 0.90-0.99x the
// time of 4 + 2, 3 + 3 + 3 0.91-1.0x that of 4 + 4 + 1, and at 28 x 28 4 + 4 + 2 0.89-0.99x that
// of 3 + 3 + 3 + 1; at 7 x 7 the plane's own rule takes panels of 3 first).
//
// Note [One-pixel planes]
// A squeeze-excite's two 1x1 layers and MobileNetV3/V4's head after the global pool run on a plane
// of one pixel, where a tile of 6-12 pixels computed the one 6-12 times over (its last pixel
// repeated, Note [Blocked tiles]): MobileNetV4-Medium's 960 -> 1280 head ran 0.141 ms on one
// thread against ONNX Runtime's 0.085. Such a plane takes tiles of one pixel: NV independent sums
// a step, bound by the filters' stream instead of by 6-12x the multiply-adds. One thread, batch 1,
// per-layer minima of 4 alternations with the library before: that head 0.154 -> 0.115 ms, timm's
// MobileNetV3-Large's 1280-wide head 0.142 -> 0.111 and its squeeze-excites' 1x1 layers 20-30%
// faster (the model's layers sum to 2.76 -> 2.57 ms), EfficientNet-B0's 25-35% faster.
NchwcTiling conv2d_nchwc_tiling(const Conv2dParams& p) {
  KILN_CHECK(p.nchwc_panel_blocks == 0 || p.nchwc_panel_blocks == 3 || p.nchwc_panel_blocks == 4,
             "conv2d_nchwc: panels of ", p.nchwc_panel_blocks, " blocks; expected 3 or 4 (0: chosen by the plane)");
  NchwcTiling t;
  t.one_pixel = p.ho * p.wo == 1;
  if (p.nchwc_panel_blocks != 0) {
    t.panel_blocks = p.nchwc_panel_blocks;
    return t;
  }
  // Panels split a block group's output blocks (Note [Grouped blocks]).
  const int64_t pixels = p.ho * p.wo, kb = nchwc_blocks(p.k) / block_groups_of(p);
  const int64_t by6 = (pixels + 5) / 6 * 6, by7 = (pixels + 6) / 7 * 7;
  const bool less_waste = static_cast<double>(by7) < 0.97 * static_cast<double>(by6);
  const bool narrow_last_panel = (kb % 4 == 1 || kb % 4 == 2) && kb % 3 != 1;
  if (less_waste || narrow_last_panel) t.panel_blocks = 3;
  return t;
}

size_t conv2d_nchwc_packed_weight_f32_floats(const Conv2dParams& p, NchwcInput input) {
  // As plan()'s kb, gib, lanes and taps, without the rest of a plan (this runs on every call).
  const int64_t lanes = input == NchwcInput::plain ? p.c : kChannelBlock;
  const int64_t gib = nchwc_blocks(p.c) / block_groups_of(p);
  return static_cast<size_t>(nchwc_blocks(p.k) * kChannelBlock * gib * lanes * p.r * p.s);
}

void pack_conv2d_nchwc_weight_f32(const Conv2dParams& p, const float* w, float* out, NchwcInput input) {
  KILN_ASSERT(conv2d_nchwc_supported(p, input), "pack_conv2d_nchwc_weight_f32: unsupported convolution");
  const Plan pl = plan(p, input);
  // Tap by tap, a tap's channels: for rows the same order (Note [Stem rows]).
  const int64_t taps = p.r * p.s, lanes = pl.plain ? p.c : kChannelBlock;
  const int64_t cpg = p.c / p.groups, kpg = p.k / p.groups;  // channels a group, in and out
  for (int64_t panel = 0; panel < pl.panels; ++panel) {
    const int64_t width = kChannelBlock * panel_width(pl, panel);
    const int64_t k0 = panel_block(pl, panel) * kChannelBlock, b0 = panel_input_block(pl, panel);
    for (int64_t blk = b0; blk < b0 + pl.gib; ++blk)
      for (int64_t t = 0; t < taps; ++t)
        for (int64_t c = 0; c < lanes; ++c) {
          // Channels past C or K (a partial last block) get zero filters: their lanes stay zero;
          // so do the pairs of a block group whose channels lie in different groups.
          const int64_t ci = blk * kChannelBlock + c;
          for (int64_t j = 0; j < width; ++j) {
            const int64_t ko = k0 + j;
            *out++ = ci < p.c && ko < p.k && ci / cpg == ko / kpg ? w[(ko * cpg + ci % cpg) * taps + t] : 0.0f;
          }
        }
  }
}

void conv2d_nchwc_f32(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias, float* y,
                      const Conv2dEpilogue& epilogue, NchwcInput input, const NchwcPlan* prepared) {
  std::shared_ptr<const NchwcPlan> own;  // the plan made here (which checks that p is supported)
  if (prepared == nullptr) {
    own = conv2d_nchwc_plan(p, input);
    prepared = own.get();
  }
  const Plan& pl = prepared->plan;
  const ConvTileEpilogueF32::Act act = blocked_act(epilogue.activation);
  // Note [Residual in place]
  // A residual that dies at this convolution is a buffer the output may take (Note [Memory
  // planning] in memory_plan.cc): ResNet-50's 64 -> 256 1x1 layers at 56 x 56, batch 8, read a
  // 25.7 MB residual and write a 25.7 MB output, and each output line was first read for ownership:
  // three streams to and from memory, where the same layer over its residual reads and writes one.
  // There the residual is the sum's start: every slice accumulates onto y, and the last adds the
  // bias and activates, as when a slice's partial sums are the start. Only a residual added before
  // the activation (or with none) can be. That layer on two threads, its buffers evicted before
  // each run (BM_conv_nchwc_residual in bench/conv_layout_bench.cc): 4.42 -> 3.44 ms; in ResNet-50's
  // engine 3.18 -> 2.66, against ONNX Runtime's 2.64-2.72 (its convolution also sums onto its
  // residual's buffer).
  const bool residual_in_y = epilogue.residual != nullptr && epilogue.residual == y;
  KILN_CHECK(!residual_in_y || epilogue.residual_before_activation || act == ConvTileEpilogueF32::Act::none,
             "conv2d_nchwc_f32: a residual in place of the output must be added before the activation");
  // A block's plane (blocked input) or a channel's (plain input), and an image's planes.
  const int64_t plane = pl.hp * pl.wp * pl.px, planes = pl.rows ? 1 : pl.plain ? p.c : pl.cb;
  const float* xr = padded_input(p, pl, x);
  std::vector<float> bias_storage;
  bias = padded_bias(bias, p.k, bias_storage);
  const int64_t xplane = planes * plane, yplane = pl.kb * pl.pixels * kChannelBlock;
  // Input blocks (xblk apart) of `lanes` channels (ldc apart): a plain input is one block.
  const int64_t xblk = pl.plain ? 0 : plane, ldc = pl.plain && !pl.rows ? plane : 1;
  const int64_t depth = pl.gib * pl.taps * pl.lanes;  // packed floats per output channel
  const int64_t items = p.n * pl.panels * pl.chunks;
  auto item_of = [&](int64_t item) {
    if (pl.panel_inner)
      return std::tuple<int64_t, int64_t, int64_t>{item % pl.panels, item / (pl.panels * pl.chunks),
                                                   item / pl.panels % pl.chunks};
    return std::tuple<int64_t, int64_t, int64_t>{item / (p.n * pl.chunks), item / pl.chunks % p.n, item % pl.chunks};
  };
  // Note [Quarter items at the end]
  // The threads take items from both ends of one queue, in chunks that shrink to one item as it
  // empties; the thread that takes the last item runs it while the other waits, half an item on
  // average. A light layer's item is a whole panel over 192 pixels (Note [Chunks for every
  // thread]): MobileNetV2's 64 -> 384 1x1 at 14 x 14 is 12 items of ~8 us, and at batch 1 on two
  // threads it ran 0.053 ms in the engine against 0.048 for half its one-thread time. So the queue
  // hands out quarters of items (whole tiles each), and a range of them runs as one pixel range an
  // item: the first takes cover whole items as before, the last ones a quarter. MobileNetV2 at
  // batch 1 on 2 threads, alternating with the library before on a noisy Zen 4: a lower median in
  // 6 rounds of 6 (4.05-6.68 ms against 4.51-7.40), ResNet-50 in 4 of 4 (33.97-34.38 against
  // 34.26-39.44); MobileNetV3-Large even.
  // Row chunks (Note [Row tiles]) go in quarters of whole rows.
  const int64_t tile_lcm = pl.row_chunks ? pl.rects[0].cols : pl.tiling.panel_blocks == 3 ? 7 : pl.gob % 4 == 0 ? 6 : 24;
  const int64_t part_px = (pl.chunk + 4 * tile_lcm - 1) / (4 * tile_lcm) * tile_lcm;
  const int64_t parts = (pl.chunk + part_px - 1) / part_px;
  // The tile kernels chosen with the plan, unless the ISA changed since (a test's override).
  TileKernels local;
  const TileKernels* tile_kernels = &prepared->kernels;
  if (prepared->isa != active_isa()) {
    local = tile_kernels_for(p, pl, active_isa());
    tile_kernels = &local;
  }
  parallel_for(0, items * parts, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1;) {
      // Items in the order Note [Panels inside or outside] chose; parts [part0, part1) of this one.
      const int64_t item = u / parts, part0 = u % parts, part1 = std::min(parts, part0 + (u1 - u));
      u += part1 - part0;
      const auto [panel, img, chunk] = item_of(item);
      const int nv = panel_width(pl, panel);
      const TileKernels::Panel& uk = tile_kernels->by_nv[static_cast<size_t>(nv)];
      const int mr = uk.all != nullptr ? pl.tiling.pixels(nv) : 4, rmr = uk.row_mr;
      const int64_t kblock = panel_block(pl, panel), xblock = panel_input_block(pl, panel);
      const float* wpanel = packed_w + kblock * kChannelBlock * depth;
      const int64_t obase = img * yplane + kblock * pl.pixels * kChannelBlock;
      ConvTileEpilogueF32 ep;
      ep.bias = bias + kblock * kChannelBlock;
      ep.residual_before_activation = epilogue.residual_before_activation;
      ep.act = act;
      ep.residual = epilogue.residual != nullptr && !residual_in_y ? epilogue.residual + obase : nullptr;
      // The item's tiles: pixels [k0, k1) of the rectangles' order, a rectangle at a time, each
      // pixel's input offset (from its rectangle's first valid tap) and output offset. Walked a
      // column at a time: two divisions a pixel cost more than a light layer's arithmetic
      // (MobileNetV2's 32 -> 16 1x1 layer ran at 0.6x ONNX Runtime's speed). A rectangle's part
      // ends in whole tiles: its last pixel again, computed and not stored.
      const int64_t c1 = std::min(pl.pixels, (chunk + 1) * pl.chunk);
      const int64_t k0 = std::min(c1, chunk * pl.chunk + part0 * part_px);
      const int64_t k1 = std::min(c1, chunk * pl.chunk + part1 * part_px);
      if (k0 >= k1) continue;
      int64_t poff[kMaxTilePixels], yoff[kMaxTilePixels];
      struct Tile {
        int64_t at;
        int m;
        const Rect* rect;
      } tiles[kMaxTilePixels / 4];
      int ntiles = 0;
      // Runs of whole row tiles: the first pixel's input and output offsets, how many tiles.
      struct Run {
        int64_t in, out, tiles;
        const Rect* rect;
      } runs[kMaxChunk / 6 + 1];
      int nruns = 0;
      // Note [Dense 1x1 tiles]: the whole tiles from k0 on need no offsets but k0's (16 k0 in and
      // out); only the pixels after them are listed below.
      const int64_t dense_tiles = uk.dense != nullptr ? (k1 - k0) / mr : 0, k_listed = k0 + dense_tiles * mr;
      if (k_listed < k1) {
        size_t ri = 0;
        while (pl.rects[ri].first + pl.rects[ri].rows * pl.rects[ri].cols <= k_listed) ++ri;
        int64_t n = 0;
        for (int64_t k = k_listed; k < k1; ++ri) {
          const Rect& rc = pl.rects[ri];
          const int64_t end = std::min(k1, rc.first + rc.rows * rc.cols);
          int64_t row = (k - rc.first) / rc.cols, col = (k - rc.first) % rc.cols;
          const int64_t start = n;
          // Incrementally: a column right, or at a row's end back to the rectangle's first column
          // a row down.
          const int64_t col_step = p.stride_w * pl.px, row_step = p.stride_h * pl.wp * pl.px;
          const int64_t wrap_in = row_step - (rc.cols - 1) * col_step, wrap_out = (p.wo - rc.cols + 1) * kChannelBlock;
          int64_t in = ((rc.oh0 + row) * p.stride_h + pl.oy + rc.dy) * pl.wp * pl.px +
                       ((rc.ow0 + col) * p.stride_w + pl.ox + rc.dx) * pl.px;
          int64_t out = ((rc.oh0 + row) * p.wo + rc.ow0 + col) * kChannelBlock;
          const NchwcUkernelF32 uk_run = rc.cols < rmr ? nullptr : rc.taps == pl.taps ? uk.row : uk.row_listed;
          while (k < end) {
            // The rest of this row of the rectangle in the range: whole row tiles, then listed pixels.
            const int64_t row_end = std::min(end, k + rc.cols - col);
            if (uk_run != nullptr && row_end - k >= rmr) {
              const int64_t nt = (row_end - k) / rmr;
              runs[nruns++] = Run{in, out, nt, &rc};
              k += nt * rmr, col += nt * rmr, in += nt * rmr * col_step, out += nt * rmr * kChannelBlock;
            }
            for (; k < row_end; ++k, ++n, ++col, in += col_step, out += kChannelBlock) poff[n] = in, yoff[n] = out;
            if (col == rc.cols) col = 0, in += wrap_in - col_step, out += wrap_out - kChannelBlock;
          }
          for (int64_t t = start; t < n; t += mr)
            tiles[ntiles++] = Tile{t, static_cast<int>(std::min<int64_t>(mr, n - t)), &rc};
          for (const int64_t whole = start + (n - start + mr - 1) / mr * mr; n < whole; ++n)
            poff[n] = poff[n - 1], yoff[n] = yoff[n - 1];
        }
      }
      // Note [Filters fetched ahead]
      // At batch 1 a layer's filters are read once, and the late layers' are megabytes (ResNet's
      // 512 x 512 3x3: 9.4 MB) that the layers in between have pushed out of every cache: each
      // slice's first tile waited on memory, 4.5 GB/s on one thread, and the 7 x 7 layers ran
      // 1.14-1.19 ms on two threads against 0.82 with the filters in cache (ONNX Runtime: 1.13-1.22).
      // So while a slice runs, its first tiles fetch the next slice's filters into L2, one line a
      // step (a slice is nv lines a step, so its first nv tiles cover the next); after the item's
      // last slice, the next panel's first slice when the next item in order is that panel's.
      // The other tiles fetch their own filters 8 steps ahead into L1, as before. The 7 x 7 layers
      // went to 0.89-0.95 ms, ResNet-18 and -50 at batch 1 ran 6-7% faster; a layer whose filters
      // stay in L2 (56 x 56) is unchanged.
      const int64_t npanel = item + 1 < items ? std::get<0>(item_of(item + 1)) : panel;
      const bool next_panel = npanel != panel && part1 == parts;
      NchwcTileArgs args;
      args.block_taps = pl.taps;
      args.xblk = xblk;
      args.lanes = static_cast<int>(pl.lanes);
      args.ldc = ldc;
      args.y = y + obase;
      args.yblk = pl.pixels * kChannelBlock;
      for (int64_t b0 = 0; b0 < pl.gib; b0 += pl.slice_blocks) {
        const int64_t nb = std::min(pl.slice_blocks, pl.gib - b0);
        const bool last = b0 + nb == pl.gib;
        args.blocks = nb;
        args.w = wpanel + b0 * pl.taps * pl.lanes * kChannelBlock * nv;
        args.x = xr + img * xplane + (xblock + b0) * xblk;
        args.accumulate = b0 > 0 || residual_in_y;
        args.ep = last ? &ep : nullptr;
        args.last_lanes = last ? static_cast<int>(pl.last_lanes) : 16;
        // The kernel's steps, a line of `ahead` each; as an address, since the last lines may lie
        // past the filters' end (kernels/cpu/prefetch.h).
        const int64_t steps = nb * pl.taps * pl.lanes;
        const uintptr_t ahead =
            !last ? reinterpret_cast<uintptr_t>(args.w + steps * kChannelBlock * nv)
                  : next_panel ? reinterpret_cast<uintptr_t>(packed_w + panel_block(pl, npanel) * kChannelBlock * depth)
                               : 0;
        // Note [Dense 1x1 tiles]: the whole tiles in one call, then the listed ones.
        if (dense_tiles > 0) {
          const int64_t first = k0 * kChannelBlock;
          args.tiles = dense_tiles;
          args.m = mr;
          args.pix = &first;
          args.yoff = &first;
          args.prefetch = ahead;
          uk.dense(args);
        }
        int64_t done = dense_tiles;  // tiles run in this slice (the first nv fetch the next filters)
        for (int r = 0; r < nruns; ++r) {
          const Run& run = runs[r];
          const bool listed = run.rect->taps != pl.taps;
          args.taps = static_cast<int>(run.rect->taps);
          args.tap_off = pl.tap_off.data() + run.rect->tap0;
          args.tap_w = pl.tap_w.data() + run.rect->tap0;
          args.tiles = run.tiles;
          args.m = rmr;
          args.pix = &run.in;
          args.yoff = &run.out;
          args.prefetch = ahead != 0 && done < nv ? ahead + static_cast<uintptr_t>(done * steps * 64) : 0;
          (listed ? uk.row_listed : uk.row)(args);
          done += run.tiles;
        }
        for (int t = 0; t < ntiles; ++t) {
          const Tile& tl = tiles[t];
          args.taps = static_cast<int>(tl.rect->taps);
          args.tap_off = pl.tap_off.data() + tl.rect->tap0;
          args.tap_w = pl.tap_w.data() + tl.rect->tap0;
          args.m = tl.m;
          args.pix = poff + tl.at;
          args.yoff = yoff + tl.at;
          const int64_t index = done + t;  // the tile's place among the item's
          args.prefetch = ahead != 0 && index < nv ? ahead + static_cast<uintptr_t>(index * steps * 64) : 0;
          // Whole rows with every tap: the plain kernel (outputs in order from yoff[0]), unless row
          // tiles took some of them.
          const bool listed = tl.rect->taps != pl.taps || tl.rect->cols != p.wo || nruns > 0;
          if (uk.all == nullptr) nchwc_tile_scalar<4>(args, nv);
          else if (tl.m == 1 && uk.one != nullptr) uk.one(args);
          else if (tl.m <= 7 && uk.seven != nullptr) uk.seven(args);
          else (listed ? uk.listed : uk.all)(args);
        }
      }
    }
  });
}

// Note [Winograd tiles]
// A 3x3 convolution of stride 1 computes each m x m block of outputs from an n x n patch of input,
// n = m + 2, with n^2 multiplies a channel pair instead of 9 m^2: Winograd's F(m x m, 3x3),
// Y = A^T [U . V] A with V = B^T d B the patch transformed, U = G g G^T the filter (Lavin and Gray,
// "Fast Algorithms for Convolutional Neural Networks", 2015). Summed over input channels, each of the
// n^2 positions of the transformed tile is a matrix product [tiles, C] x [C, K]: a 1x1 blocked
// convolution over "pixels" that are tiles, which the blocked micro-kernel runs as it runs any 1x1
// layer. A work item is an image's chunk of tiles: its patches transformed into V
// ([n^2][C/16][tiles][16]), the n^2 products into M (the same with K), M transformed back into the
// m x m outputs, finished with the bias, residual and activation as they are stored. Two tile sizes,
// each its own tactic:
// - "winograd", F(2x2, 3x3): 16 multiplies for 4 outputs, 2.25x fewer than the direct sum; the
//   transforms' factors (0, +-1, +-1/2) keep f32 rounding near the direct sum's. ResNet-50's 64- and
//   128-channel layers at 56 x 56 and 28 x 28 ran 0.43-0.48 ms at batch 1 on two threads against the
//   direct kernel's 0.64-0.69.
// - "winograd4", F(4x4, 3x3): 36 multiplies for 16 outputs, 4x fewer, and the transforms' passes
//   over V and M 2.25x the input and output instead of 4x; but filters 4x the size (16/9 for
//   F(2x2)), a plane's last tile row and column wasted where 4 does not divide it, and larger
//   rounding (factors up to 5 and 8 in the transforms, 1/24 in G: about 4x F(2x2)'s error, still
//   ~1e-5 of the outputs' spread for unit inputs). ResNet-50's 64-, 128- and 256-channel layers at
//   56 x 56, 28 x 28 and 14 x 14 ran 1.39-1.42, 1.39-1.45 and 1.82-1.90 ms at batch 8 on two threads
//   in the engine against F(2x2)'s 1.99-2.02, 2.02-2.04 and 2.17-2.25; 0.18-0.21, 0.19-0.20 and
//   0.27-0.28 at batch 1 against 0.26-0.28, 0.26-0.27 and 0.30-0.31 (before the two-pass items by
//   position, Note [Winograd in two passes]).
// Every work item reads the transformed filters, which must stay in L2: where all of them do not
// (Note [Winograd in two passes]), a panel's must, so the tactics are offered where that holds
// (conv2d_nchwc_winograd_offered), and taken where they time faster, or without timing wherever
// offered (Note [Heuristic tactics] in runtime/tactics.cc).
namespace {

// B^T (n x n), G (n x 3) and A^T (m x n) of F(m x m, 3x3), row-major.
struct WinogradMatrices {
  int m, n;
  const double* bt;
  const double* g;
  const double* at;
};

// Interpolation points 0, 1, -1 and infinity.
constexpr double kWinogradBt2[] = {1, 0, -1, 0, 0, 1, 1, 0, 0, -1, 1, 0, 0, 1, 0, -1};
constexpr double kWinogradG2[] = {1, 0, 0, 0.5, 0.5, 0.5, 0.5, -0.5, 0.5, 0, 0, 1};
constexpr double kWinogradAt2[] = {1, 1, 1, 0, 0, 1, -1, -1};
// Interpolation points 0, 1, -1, 2, -2 and infinity.
constexpr double kWinogradBt4[] = {4, 0, -5, 0,  1, 0, 0, -4, -4, 1,  1, 0, 0, 4, -4, -1, 1, 0,
                                   0, -2, -1, 2, 1, 0, 0, 2,  -1, -2, 1, 0, 0, 4, 0,  -5, 0, 1};
constexpr double kWinogradG4[] = {1.0 / 4,  0,          0,         -1.0 / 6, -1.0 / 6, -1.0 / 6,
                                  -1.0 / 6, 1.0 / 6,    -1.0 / 6,  1.0 / 24, 1.0 / 12, 1.0 / 6,
                                  1.0 / 24, -1.0 / 12,  1.0 / 6,   0,        0,        1};
constexpr double kWinogradAt4[] = {1, 1, 1, 1, 1, 0, 0, 1, -1, 2, -2, 0, 0, 1, 1, 4, 4, 0, 0, 1, -1, 8, -8, 1};

WinogradMatrices winograd_matrices(int tile) {
  KILN_CHECK(tile == 2 || tile == 4, "Winograd tiles: F(2x2, 3x3) or F(4x4, 3x3), not a tile of ", tile);
  return tile == 2 ? WinogradMatrices{2, 4, kWinogradBt2, kWinogradG2, kWinogradAt2}
                   : WinogradMatrices{4, 6, kWinogradBt4, kWinogradG4, kWinogradAt4};
}

int64_t winograd_positions(int tile) { return (tile + 2) * (tile + 2); }

// Tiles a work item at most: 24, or fewer while that leaves under 4 items a thread, or while the
// item's V and M (4 bytes a position of a tile and channel of C and of K) would pass what a thread's
// L2 holds. The transforms' stores miss L1 (a line a tile, block and position): chunks of 24 tiles
// ran a 64-channel 56 x 56 layer ~4-6% faster than 48, on one thread and two, at batch 1 and 8; at
// 28 x 28 and 14 x 14 (two passes) 12, 24 and 48 were within the noise. In two passes V and M hold
// every tile and a chunk is what a patches or outputs item covers; it is sized as it was when the
// products ran by (panel, image, chunk), M a panel's 4 blocks (Note [Winograd in two passes]).
int64_t winograd_chunk(const Conv2dParams& p, int64_t positions, int64_t tiles, bool two_passes) {
  const int64_t blocks = two_passes ? 4 : nchwc_blocks(p.c) + nchwc_blocks(p.k);
  const int64_t panels = two_passes ? (nchwc_blocks(p.k) / p.groups + 3) / 4 * p.groups : 1;
  int64_t chunk = 24;
  while (chunk > 6 && (static_cast<double>(chunk * blocks * positions * 64) > kNearBytes ||
                       panels * p.n * ((tiles + chunk - 1) / chunk) < items_wanted()))
    chunk /= 2;
  // As many chunks, as even as 6-pixel tiles make them: a 14 x 14 plane's 49 tiles went as 24, 24
  // and 1, and with two threads taking 12 items (4 panels a chunk, Note [Winograd in two passes])
  // one waited on the other's last 24-tile item. 18, 18 and 13: ResNet-50's 14 x 14 layers at batch 1
  // on two threads 0.331-0.341 -> 0.307-0.324 ms (per-layer minima of 4 alternations).
  const int64_t chunks = (tiles + chunk - 1) / chunk;
  return ((tiles + chunks - 1) / chunks + 5) / 6 * 6;
}

// The 1x1 problem of one position and group: C/G in, K/G out, panels of 4 blocks.
Conv2dParams winograd_position_params(const Conv2dParams& p) {
  Conv2dParams q;
  q.c = p.c / p.groups, q.k = p.k / p.groups, q.nchwc_panel_blocks = 4;
  return q;
}

// The patches of tiles t0 .. t0 + count - 1 of a block plane, transformed: V = B^T d B, position
// n r + j of tile t0 + i at v + (n r + j) vpos + 16 i (any ISA).
void winograd_input_scalar(const WinogradMatrices& mt, const float* x, const Conv2dParams& p, int64_t tw, int64_t t0,
                           int64_t count, float* v, int64_t vpos) {
  const int n = mt.n;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = t0 + i, iy0 = mt.m * (t / tw) - p.pad_top, ix0 = mt.m * (t % tw) - p.pad_left;
    for (int64_t l = 0; l < kChannelBlock; ++l) {
      float d[6][6], e[6][6];
      for (int r = 0; r < n; ++r)
        for (int c = 0; c < n; ++c) {
          const int64_t iy = iy0 + r, ix = ix0 + c;
          d[r][c] = iy >= 0 && iy < p.h && ix >= 0 && ix < p.w ? x[(iy * p.w + ix) * kChannelBlock + l] : 0.0f;
        }
      for (int r = 0; r < n; ++r)  // d B, row by row
        for (int j = 0; j < n; ++j) {
          float s = 0;
          for (int c = 0; c < n; ++c) s += static_cast<float>(mt.bt[j * n + c]) * d[r][c];
          e[r][j] = s;
        }
      float* vi = v + kChannelBlock * i + l;
      for (int r = 0; r < n; ++r)  // B^T (d B)
        for (int j = 0; j < n; ++j) {
          float s = 0;
          for (int a = 0; a < n; ++a) s += static_cast<float>(mt.bt[r * n + a]) * e[a][j];
          vi[(n * r + j) * vpos] = s;
        }
    }
  }
}

// M (position n r + j of tile t0 + i at m + (n r + j) mpos + 16 i) back to the block plane y:
// A^T M A, finished by ep (any ISA).
void winograd_output_scalar(const WinogradMatrices& mt, const float* m, int64_t mpos, const Conv2dParams& p,
                            int64_t tw, int64_t t0, int64_t count, float* y, const ConvTileEpilogueF32& ep) {
  const int n = mt.n, mo = mt.m;
  for (int64_t i = 0; i < count; ++i) {
    const int64_t t = t0 + i, oy = mo * (t / tw), ox = mo * (t % tw);
    for (int64_t l = 0; l < kChannelBlock; ++l) {
      const float* mi = m + kChannelBlock * i + l;
      float s[4][6];
      for (int a = 0; a < mo; ++a)  // A^T M
        for (int j = 0; j < n; ++j) {
          float sum = 0;
          for (int r = 0; r < n; ++r) sum += static_cast<float>(mt.at[a * n + r]) * mi[(n * r + j) * mpos];
          s[a][j] = sum;
        }
      for (int a = 0; a < mo && oy + a < p.ho; ++a)
        for (int b = 0; b < mo && ox + b < p.wo; ++b) {
          float out = 0;
          for (int j = 0; j < n; ++j) out += s[a][j] * static_cast<float>(mt.at[b * n + j]);
          const int64_t at = ((oy + a) * p.wo + ox + b) * kChannelBlock + l;
          y[at] = finish_scalar(out + ep.bias[l], ep.residual != nullptr ? ep.residual + at : nullptr, ep);
        }
    }
  }
}

}  // namespace

bool conv2d_nchwc_winograd_supported(const Conv2dParams& p) {
  const bool whole_block_groups =
      p.groups == 1 || (p.groups > 1 && p.c % (p.groups * kChannelBlock) == 0 && p.k % (p.groups * kChannelBlock) == 0);
  return whole_block_groups && p.c > 0 && p.k > 0 && p.r == 3 && p.s == 3 && p.stride_h == 1 && p.stride_w == 1 &&
         p.dil_h == 1 && p.dil_w == 1 && p.ho >= 1 && p.wo >= 1 && p.pad_top >= 0 && p.pad_left >= 0;
}

bool conv2d_nchwc_winograd_offered(int64_t c, int64_t k, int tile) {
  // A panel's F(2x2, 3x3) filters (Note [Winograd in two passes]), for either tile: F(4x4, 3x3)'s
  // are 2.25x those, past L2 from C = 128 on, yet the next position's, fetched into L2 as a position
  // runs, kept it ahead (ResNet-50 at batch 8 on two threads, per layer: 128 -> 128 at 28 x 28 1.27
  // against F(2x2)'s 2.00 ms, 256 -> 256 at 14 x 14 1.70 against 2.19). At 512 -> 512 (7 x 7) it won
  // only at batch 8 (3.10 against the direct kernel's 3.87 ms; 0.59 against 0.51 at batch 1) for
  // 38 MB of transformed filters a layer: not offered.
  winograd_matrices(tile);  // checks the tile: 2 or 4
  Conv2dParams p;
  p.c = c, p.k = std::min<int64_t>(k, 4 * kChannelBlock), p.r = p.s = 3;
  return static_cast<double>(conv2d_nchwc_winograd_packed_weight_f32_floats(p, 2) * sizeof(float)) <= kNearBytes;
}

size_t conv2d_nchwc_winograd_packed_weight_f32_floats(const Conv2dParams& p, int tile) {
  return winograd_positions(winograd_matrices(tile).m) * p.groups *
         conv2d_nchwc_packed_weight_f32_floats(winograd_position_params(p));
}

void pack_conv2d_nchwc_winograd_weight_f32(const Conv2dParams& p, int tile, const float* w, float* out) {
  KILN_ASSERT(conv2d_nchwc_winograd_supported(p), "pack_conv2d_nchwc_winograd_weight_f32: unsupported convolution");
  const WinogradMatrices mt = winograd_matrices(tile);
  const int n = mt.n;
  const int64_t positions = winograd_positions(mt.m);
  // U = G g G^T per (k, c) of a group, in double, as [position][group][K/G][C/G] for the 1x1
  // packing (Note [Winograd by groups]): the filters w are [K][C/G][3][3].
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  std::vector<float> u(static_cast<size_t>(positions * p.k * cg));
  for (int64_t k = 0; k < p.k; ++k)
    for (int64_t c = 0; c < cg; ++c) {
      const float* g = w + (k * cg + c) * 9;
      double gt[6][3];  // G g
      for (int a = 0; a < n; ++a)
        for (int j = 0; j < 3; ++j)
          gt[a][j] = mt.g[a * 3] * g[j] + mt.g[a * 3 + 1] * g[3 + j] + mt.g[a * 3 + 2] * g[6 + j];
      for (int a = 0; a < n; ++a)
        for (int b = 0; b < n; ++b)
          u[static_cast<size_t>(((a * n + b) * p.k + k) * cg + c)] =
              static_cast<float>(gt[a][0] * mt.g[b * 3] + gt[a][1] * mt.g[b * 3 + 1] + gt[a][2] * mt.g[b * 3 + 2]);
    }
  const Conv2dParams q = winograd_position_params(p);
  const size_t per = conv2d_nchwc_packed_weight_f32_floats(q);
  for (int64_t xg = 0; xg < positions * p.groups; ++xg)  // position xg / G, group xg % G
    pack_conv2d_nchwc_weight_f32(q, u.data() + xg * kg * cg, out + static_cast<size_t>(xg) * per);
}

void conv2d_nchwc_winograd_f32(const Conv2dParams& p, int tile, const float* x, const float* packed_u,
                               const float* bias, float* y, const Conv2dEpilogue& epilogue) {
  KILN_CHECK(conv2d_nchwc_winograd_supported(p), "conv2d_nchwc_winograd_f32: needs a 3x3 filter of stride 1 and "
             "dilation 1, one group or groups of whole 16-channel blocks; got ", p.r, "x", p.s, " stride ", p.stride_h,
             "x", p.stride_w, " dilation ", p.dil_h, "x", p.dil_w, ", ", p.groups, " groups of ", p.c, " -> ", p.k,
             " channels");
  const WinogradMatrices mt = winograd_matrices(tile);
  const int64_t positions = winograd_positions(mt.m);
  // Note [Winograd by groups]
  // A grouped layer whose groups are whole blocks in and out (ResNeSt's split-attention 3x3 layers:
  // two groups of 64 -> 128 channels and up) is G independent position products per position: a
  // panel's filters are its group's, [position][group][K/G blocks][C/G blocks], and its products
  // read only its group's input blocks of V. Panels are numbered group by group; the patches and
  // outputs pass over every block as for one group. ResNeSt-14d's four such layers (32 -> 64 at
  // 56 x 56 to 256 -> 512 at 14 x 14 a group), batch 1 on two threads: 0.68, 2.58, 2.70 and 2.77 ms
  // with the direct kernel, 0.38, 1.28, 1.20 and 1.98 with F(4x4, 3x3); the model 18.1 -> 14.2 ms,
  // at batch 8 146.3 -> 106.5. Groups of one block are supported but not offered (nchwc.cc).
  const int64_t cb = nchwc_blocks(p.c), kb = nchwc_blocks(p.k);
  const int64_t cbg = cb / p.groups, kbg = kb / p.groups;  // blocks a group, in and out
  const int64_t group_panels = (kbg + 3) / 4, panels = p.groups * group_panels;
  // A panel's first output block.
  auto panel_first_block = [&](int64_t panel) { return panel / group_panels * kbg + panel % group_panels * 4; };
  const int64_t tw = (p.wo + mt.m - 1) / mt.m, tiles = (p.ho + mt.m - 1) / mt.m * tw;
  const ConvTileEpilogueF32::Act act = blocked_act(epilogue.activation);
  std::vector<float> bias_storage;
  bias = padded_bias(bias, p.k, bias_storage);
  const bool avx512 = active_isa() == Isa::avx512;
  const auto input_avx512 = mt.m == 2 ? winograd_input_avx512 : winograd4_input_avx512;
  const auto output_avx512 = mt.m == 2 ? winograd_output_avx512 : winograd4_output_avx512;
  const size_t per_group = conv2d_nchwc_packed_weight_f32_floats(winograd_position_params(p));
  const size_t per_position = per_group * static_cast<size_t>(p.groups);
  const int64_t xplane = p.h * p.w * kChannelBlock, yplane = p.ho * p.wo * kChannelBlock;
  const int64_t slice_blocks = std::max<int64_t>(1, kSliceDepth / kChannelBlock);
  // Note [Winograd in two passes]: all the filters in L2, or a panel's.
  const bool two_passes = static_cast<double>(positions * per_position * sizeof(float)) > kNearBytes;
  const int64_t chunk = winograd_chunk(p, positions, tiles, two_passes), chunks = (tiles + chunk - 1) / chunk;
  // V: [positions][C/16][vtiles][16], tile t0 + i of image img at vbase + i; vtiles = a chunk's
  // tiles (one pass), or every image's (two passes).
  const int64_t vtiles = two_passes ? p.n * tiles : chunk, vpos = cb * vtiles * kChannelBlock;
  // The patches of an image's tiles t0 .. t0 + count - 1, input blocks [b0, b1).
  auto patches = [&](int64_t img, int64_t t0, int64_t count, float* v, int64_t vbase, int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const float* xb = x + (img * cb + b) * xplane;
      float* vb = v + (b * vtiles + vbase) * kChannelBlock;
      if (avx512) input_avx512(xb, p.h, p.w, p.pad_top, p.pad_left, tw, t0, count, vb, vpos);
      else winograd_input_scalar(mt, xb, p, tw, t0, count, vb, vpos);
    }
  };
  // The products at position xi for panel `panel` of `count` tiles from V (at vbase) into ypanel,
  // its blocks yblk floats apart, tile i at 16 i, in tiles of the micro-kernel's pixels (the last
  // one's spare pixels repeat its last tile and are not stored).
  auto position_products = [&](const float* v, int64_t vbase, int64_t count, int64_t xi, int64_t panel, float* ypanel,
                               int64_t yblk) {
    static constexpr int64_t kTap0 = 0;
    static constexpr int32_t kTapW0 = 0;
    int64_t pix[48];
    NchwcTileArgs args;
    args.taps = 1;
    args.tap_off = &kTap0;
    args.tap_w = &kTapW0;
    args.block_taps = 1;
    args.xblk = vtiles * kChannelBlock;
    args.lanes = static_cast<int>(kChannelBlock);
    args.ldc = 1;
    args.yblk = yblk;
    const int64_t group = panel / group_panels, group_panel = panel % group_panels;
    const int nv = static_cast<int>(std::min<int64_t>(4, kbg - 4 * group_panel));
    const NchwcUkernelF32 uk = avx512 ? nchwc_ukernel_f32_avx512(nv, NchwcTiling{}.pixels(nv), false) : nullptr;
    const int mr = uk != nullptr ? NchwcTiling{}.pixels(nv) : 4;
    const float* wpanel = packed_u + static_cast<size_t>(xi) * per_position + static_cast<size_t>(group) * per_group +
                          group_panel * 4 * kChannelBlock * cbg * kChannelBlock;
    const int64_t xblock0 = group * cbg;  // the group's first input block
    for (int64_t b0 = 0; b0 < cbg; b0 += slice_blocks) {
      args.blocks = std::min(slice_blocks, cbg - b0);
      args.w = wpanel + b0 * kChannelBlock * kChannelBlock * nv;
      args.x = v + xi * vpos + ((xblock0 + b0) * vtiles + vbase) * kChannelBlock;
      args.accumulate = b0 > 0;
      // The next position's filters for this slice fetched into L2 as these run, a line a
      // step by the first nv tiles (Note [Filters fetched ahead]; a slice is nv lines a step).
      const int64_t steps = args.blocks * kChannelBlock;
      const uintptr_t ahead = xi + 1 < positions ? reinterpret_cast<uintptr_t>(args.w + per_position) : 0;
      for (int64_t t = 0; t < count; t += mr) {
        const int64_t tile_index = t / mr;
        args.prefetch = ahead != 0 && tile_index < nv ? ahead + static_cast<uintptr_t>(tile_index * steps * 64) : 0;
        args.m = static_cast<int>(std::min<int64_t>(mr, count - t));
        for (int i = 0; i < mr; ++i) pix[i] = (t + std::min(i, args.m - 1)) * kChannelBlock;
        args.pix = pix;
        int64_t yoff[4];
        for (int i = 0; i < 4; ++i) yoff[i] = (t + std::min(i, args.m - 1)) * kChannelBlock;
        args.yoff = yoff;
        args.y = ypanel;
        if (uk != nullptr) uk(args);
        else nchwc_tile_scalar<4>(args, nv);
      }
    }
  };
  // Output block o's tiles t0 .. t0 + count - 1 of image img from M (tile i at mo + 16 i, positions
  // mpos apart), finished as they are stored.
  auto outputs = [&](const float* mo, int64_t mpos, int64_t img, int64_t t0, int64_t count, int64_t o) {
    ConvTileEpilogueF32 ep;
    ep.bias = bias + o * kChannelBlock;
    ep.act = act;
    ep.residual_before_activation = epilogue.residual_before_activation;
    ep.residual = epilogue.residual != nullptr ? epilogue.residual + (img * kb + o) * yplane : nullptr;
    float* yo = y + (img * kb + o) * yplane;
    if (avx512) output_avx512(mo, mpos, p.ho, p.wo, tw, t0, count, yo, ep);
    else winograd_output_scalar(mt, mo, mpos, p, tw, t0, count, yo, ep);
  };
  if (!two_passes) {
    // An item: an image's chunk of tiles, start to end; M is [positions][K/16][chunk][16].
    const int64_t mpos = kb * chunk * kChannelBlock;
    parallel_for(0, p.n * chunks, 1, [&](int64_t i0, int64_t i1) {
      float* v = thread_scratch<float, ScratchSlot::winograd_v>(static_cast<size_t>(positions * vpos));
      float* m = thread_scratch<float, ScratchSlot::winograd_m>(static_cast<size_t>(positions * mpos));
      for (int64_t item = i0; item < i1; ++item) {
        const int64_t img = item / chunks, t0 = item % chunks * chunk, count = std::min(chunk, tiles - t0);
        patches(img, t0, count, v, 0, 0, cb);
        for (int64_t xi = 0; xi < positions; ++xi)
          for (int64_t panel = 0; panel < panels; ++panel)
            position_products(v, 0, count, xi, panel, m + xi * mpos + panel_first_block(panel) * chunk * kChannelBlock,
                              chunk * kChannelBlock);
        for (int64_t o = 0; o < kb; ++o) outputs(m + o * chunk * kChannelBlock, mpos, img, t0, count, o);
      }
    });
    return;
  }
  // Note [Winograd in two passes]
  // Transformed filters past L2 (256 -> 256 channels: 4 MB for F(2x2, 3x3)) were read again by every
  // item: ResNet-50's 14 x 14 layers ran 0.90 ms against the direct kernel's 0.71. There the patches
  // of every image are transformed first; then each item is one position's products for one panel
  // over every image's tiles, which reads that position's share of the panel's filters (C x 64
  // floats, 64 KB for C = 256) once, the next position's fetched into L2 as it runs, the items of a
  // position one after another (its V read from L2 by each panel's); then the outputs, as items of
  // (block, image, chunk). M holds every position of every tile: [positions][K/16][images x
  // tiles][16]. Items of (panel, image, chunk) that ran every position read their panel's filters
  // again each (F(4x4, 3x3), C = 256: 2.4 MB an item, from L3): ResNet-50's F(4x4) layers at batch
  // 8 on two threads, per-layer minima of 3 alternations, 128 -> 128 at 28 x 28 1.41-1.59 -> 1.29-
  // 1.45 ms, 256 -> 256 at 14 x 14 1.91-2.10 -> 1.60-1.64 (batch 1: 0.24-0.27 -> 0.21-0.23 and
  // 0.34 -> 0.31-0.33); whole engines alternated, ResNet-101 at batch 8 211.2 -> 203.0 ms, ResNet-50
  // 118.1 -> 116.8, both even at batch 1.
  float* v = thread_scratch<float, ScratchSlot::winograd_v>(static_cast<size_t>(positions * vpos));
  const int64_t all = p.n * tiles, mpos = kb * all * kChannelBlock;
  float* m = thread_scratch<float, ScratchSlot::winograd_m>(static_cast<size_t>(positions * mpos));
  // The patches a chunk's input block at a time: by chunks alone a 14 x 14 plane was 3 items for
  // two threads (0.307-0.324 -> 0.298-0.316 ms for ResNet-50's 14 x 14 layers, as above).
  parallel_for(0, p.n * chunks * cb, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t b = item % cb, img = item / cb / chunks, t0 = item / cb % chunks * chunk;
      patches(img, t0, std::min(chunk, tiles - t0), v, img * tiles + t0, b, b + 1);
    }
  });
  parallel_for(0, panels * positions, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t xi = item / panels, panel = item % panels;
      position_products(v, 0, all, xi, panel, m + xi * mpos + panel_first_block(panel) * all * kChannelBlock,
                        all * kChannelBlock);
    }
  });
  parallel_for(0, kb * p.n * chunks, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t o = item / (p.n * chunks), img = item / chunks % p.n, t0 = item % chunks * chunk;
      outputs(m + (o * all + img * tiles + t0) * kChannelBlock, mpos, img, t0, std::min(chunk, tiles - t0), o);
    }
  });
}

}  // namespace kiln::kernels::cpu
