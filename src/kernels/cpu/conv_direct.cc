// Direct f32 convolution (NCHW) behind kernels/cpu/conv.h: the GEMM's micro-kernel reads the
// activations in place at a per-tap offset, so no im2col matrix is written or packed.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <thread>
#include <utility>
#include <vector>

#include "core/chunks.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_depthwise.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/prefetch.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/window_f32.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [Direct convolution]
// The im2col convolution copies the input R*S times into a matrix and the GEMM then copies that
// matrix again into packed panels: on ResNet-18 those two copies were ~30% of the time, the
// micro-kernel 56%. Here the output plane is flattened with a halo: output (oh, ow) is column
// q = oh * Wq + ow of the product, and the input is laid out once per image as X', C channels of
// Hq x Wq planes, so that filter tap (r, s) reads X' at column q + off(r, s) for every q. The
// GEMM's B row for (tap, channel) is then a contiguous run of X', which the micro-kernel loads
// where it lies (GemmTapsUkernelF32), all taps of a channel slice accumulating in registers.
//
// Strides: X' holds the polyphase split of the padded input (phase (a, b) = rows a, a + sh, ...
// and columns b, b + sw, ...), only the phases some tap uses, so every tap is again a unit-stride
// shift within one phase plane. Padding is written into X' as zeros once; a 1x1 unit-stride
// unpadded convolution uses x itself as X'.
//
// Columns ow in [Wo, Wq) are computed and dropped (2 of 58 on a 56-wide 3x3 layer, 2 of 9 on a
// 7-wide one): the tile goes to a scratch plane and its valid runs are copied to y, with the
// epilogue (bias, residual, activation) applied right there; when Wq == Wo (1x1 convolutions) the
// tile is stored into y directly. K is sliced by channels so that a slice (all its taps) is about
// kc deep, and the filters are packed per slice, tap-major, into the micro-kernel's panels.
//
// Threads: images in parallel when there are enough of them; otherwise each image's tiles are cut
// between the threads by output columns or output channels (whichever duplicates the smaller
// operand, unless it splits much less evenly), one parallel region per image, each worker copying
// the part of X' it reads.

namespace {

struct Geometry {
  int64_t cg = 0, kg = 0, taps = 0;
  int64_t hq = 0, wq = 0, plane = 0;  // one phase plane of X'
  int64_t shift_h = 0;                // the largest tap row shift within a plane
  int64_t cstride = 0;                // floats per channel of X' (all its phase planes)
  int64_t nq = 0;                     // product columns: Ho * Wq
  int64_t kcs = 0;                    // channels per K slice
  int64_t mc = 0;                     // filter rows per pass over a column tile
  GemmTapsKernelF32 tile;             // the register tile (Note [Direct convolution tiles])
  bool pixels = false;                // output pixels as the tile's rows (Note [Pixels as rows])
  ConvPixelsKernelF32 ptile;          // that tile, when pixels
  ConvPixelsStoreF32 pstore = nullptr;  // the pixel tiles' staged store (Note [Staged pixel stores]); none: per tile
  int64_t panel = 0;                  // filter rows per packed panel: tile.mr, or ptile.nr when pixels
  int64_t mpad = 0;                   // kg rounded up to the panel
  bool identity = false;              // X' is x itself
  int64_t pix_row = 0, pix_col = 1;   // pixel tiles: output (oh, ow) reads X' at oh * pix_row + ow * pix_col
  bool plain = false;                 // X' is x zero-padded, without the polyphase split (pixel tiles)
  bool store_hardswish = false;       // the tiles' stores apply hardswish (GemmKernelF32::store_hardswish)
  bool halo = false;                  // the column tiles store across the halo into y (Note [Storing across the halo])
  int64_t rows_per_out = 1;           // X' rows from one output row to the next
  std::vector<std::pair<int64_t, int64_t>> phases;  // (row phase, column phase) per plane of X'
  std::vector<int64_t> tap_off;                     // per tap (r * S + s): offset within a channel of X'
  std::vector<int64_t> line_off;  // the cache lines (as offsets from a tile's column) a tile reads per channel
};

// Note [Prefetching the next tile]
// A tile's B rows are a channel (a plane, kilobytes) apart, a pattern the hardware prefetcher does
// not follow: without help the first micro-kernel on each column tile waited on memory for every
// row (1x1 convolutions over a batch of 8 ran at 40% of the im2col path's speed). So while one
// tile runs, the lines the next tile will read are prefetched, per channel: the union of the tap
// spans [off, off + nr) with a point every 16 floats and at each span's end, so every cache line in
// it gets one whatever the alignment.
void prefetch_lines(Geometry& g, int nr) {
  std::vector<int64_t> starts = g.tap_off;
  std::sort(starts.begin(), starts.end());
  for (size_t i = 0; i < starts.size();) {
    const int64_t a = starts[i];
    int64_t b = a + nr - 1;
    for (++i; i < starts.size() && starts[i] <= b + 1; ++i) b = std::max(b, starts[i] + nr - 1);
    for (int64_t l = a; l < b; l += 16) g.line_off.push_back(l);
    g.line_off.push_back(b);
  }
}

// Note [Direct convolution tiles]
// The 12 x 32 tile wastes a ninth of its rows on 64 output channels (6 panels of 12 for 64 rows),
// a third of ResNet-18; an 8 x 48 tile fits every multiple of 8 but wastes columns on small
// planes (a 7 x 8 plane is 56 columns: 2 tiles of 32, or 2 of 48). Each convolution takes the tile
// with the larger useful fraction of rows x columns, the first on a near tie.
GemmTapsKernelF32 pick_tile(const GemmKernelF32& kk, int64_t rows, int64_t cols) {
  auto useful = [&](const GemmTapsKernelF32& t) {
    const int64_t r = (rows + t.mr - 1) / t.mr * t.mr, c = (cols + t.nr - 1) / t.nr * t.nr;
    return static_cast<double>(rows * cols) / static_cast<double>(r * c);
  };
  GemmTapsKernelF32 best = kk.taps[0];
  for (const GemmTapsKernelF32& t : kk.taps)
    if (t.ukernel != nullptr && useful(t) > 1.01 * useful(best)) best = t;
  return best;
}

// Note [Pixels as rows]
// On small planes the column tiles waste most: a 7 x 7 output is 49 columns (56 with the halo),
// which fill 64 of a 12 x 32 tile's, and ResNet-50's last stage ran at ~130 GFLOP/s. Swapping the
// operands fixes that: the tile's rows are output pixels (7 of them, each broadcast from its own
// place in X', so the halo columns are skipped and 7 x 7, 14 x 14, 28 x 28 planes split exactly)
// and its columns are 48 output channels loaded from a packed filter panel (48 | 96, 192, 384,
// 576, 960; 512 and 2048 waste 3% and 1%), or 64 (6 pixels), or 32 (8 pixels: MobileNetV2's stem
// and its projections to 32 and 160 channels, 0.26 -> 0.20 ms for the stem). The tile comes out
// pixel-major: partial sums over K slices accumulate in a scratch Yt[pixel][channel], and the last
// slice's tile is transposed in registers and stored into y with the epilogue (Note [A transposed
// store] in gemm_f32_avx512.cc). Filters are packed as for the column tiles, in panels of the
// tile's output channels. The images of a batch share each panel (as in Note [Images share the
// filter blocks]); one image is split between threads by panels, by pixel tiles or by (panel,
// tile) pairs (Note [Panels and tiles in one order]). Since each pixel has its own offset, an
// unpadded convolution (strided, dilated, 1x1 or not: ResNet's 1x1 stride-2 projections) reads x
// itself, with no X' copy (a 1x1 with many filter panels packs its pixels: Note [Pixel panels]),
// and a padded one a plain zero-padded copy (no polyphase split for strides). Each convolution
// takes whichever tiling wastes less of its tiles (the columns when within 0.5%).
std::atomic<int> g_forced_tiling{0};

// The pixel tile for this convolution (ukernel == nullptr: the column tiles waste less).
ConvPixelsKernelF32 pick_pixel_tile(const Conv2dParams& p, const GemmKernelF32& kk, const GemmTapsKernelF32& tile,
                                    int64_t nq) {
  auto up = [](int64_t a, int64_t b) { return static_cast<double>((a + b - 1) / b * b); };
  const int64_t kg = p.k / p.groups, pixels = p.ho * p.wo;
  const double work = static_cast<double>(kg * pixels);
  ConvPixelsKernelF32 best;
  double best_useful = 0;
  for (const ConvPixelsKernelF32& t : kk.pixels) {
    // Yt (one image and group) stays small: the pixel tiles are for small planes.
    if (t.ukernel == nullptr || up(pixels, t.mr) * up(kg, t.nr) * 4 > (8 << 20)) continue;
    const double useful = work / (up(kg, t.nr) * up(pixels, t.mr));
    if (useful > 1.01 * best_useful) best = t, best_useful = useful;
  }
  auto forced = static_cast<DirectConvTiling>(g_forced_tiling.load(std::memory_order_relaxed));
  if (forced == DirectConvTiling::automatic) forced = p.tiling;
  if (forced != DirectConvTiling::automatic) return forced == DirectConvTiling::pixels ? best : ConvPixelsKernelF32{};
  const double by_columns = work / (up(kg, tile.mr) * up(nq, tile.nr));
  // The columns on a near tie: their tiles store plain rows where the pixel tiles transpose, which
  // shows when K is shallow (MobileNetV2's 32 -> 16 projection at 112x112, one thread on a Zen 3:
  // 0.25-0.27 ms by columns, 0.32-0.35 by pixels, which wasted 0.05% less).
  return best_useful > 1.005 * by_columns ? best : ConvPixelsKernelF32{};
}

// Note [A narrower halo]
// Output column ow reads plane columns ow .. ow + shift_w, so planes Wo + shift_w wide hold every
// read in its own row. With unit column stride they can be narrower: a read past the row's end
// lands at the start of the next row, which is left padding (zero) as long as it reaches no
// further than pad_left columns, and each row must still hold all of the input's columns. A 3x3,
// pad 1 layer then computes one dropped column per row instead of two (7 x 7 outputs: 1 in 8
// columns wasted instead of 2 in 9).
int64_t plane_width(const Conv2dParams& p) {
  const int64_t shift_w = (p.s - 1) * p.dil_w / p.stride_w;
  if (p.stride_w != 1) return p.wo + shift_w;
  return std::max({p.wo, p.pad_left + p.w, p.wo + shift_w - p.pad_left});
}

Geometry geometry(const Conv2dParams& p, const GemmKernelF32& kk) {
  Geometry g;
  g.cg = p.c / p.groups;
  g.kg = p.k / p.groups;
  g.taps = p.r * p.s;
  g.store_hardswish = kk.store_hardswish;
  g.tile = pick_tile(kk, g.kg, p.ho * plane_width(p));
  const bool identity = p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
                        p.pad_left == 0 && p.ho == p.h && p.wo == p.w;
  g.ptile = pick_pixel_tile(p, kk, g.tile, identity ? p.h * p.w : p.ho * plane_width(p));
  g.pixels = g.ptile.ukernel != nullptr;
  g.pstore = kk.pixels_store;
  g.panel = g.pixels ? g.ptile.nr : g.tile.mr;
  g.mpad = (g.kg + g.panel - 1) / g.panel * g.panel;
  // Note [Direct convolution blocking]: the filter rows that share one pass over a column tile are
  // as many as fit ~384 KiB of packed filters (of the 1 MiB L2), but at most 144. Letting a 1x1
  // convolution over 64 channels take all 256 output rows at once (to read each activation tile
  // once) made it slower on 2 threads (64 -> 256 at 56x56, batch 1: 235 against 324-346 GFLOP/s
  // with 144): every column tile then writes 256 output rows, pages apart, and the activations
  // stay in L2 anyway.
  const int64_t slices = std::max<int64_t>(1, (g.cg * g.taps + kk.kc - 1) / kk.kc);
  g.kcs = (g.cg + slices - 1) / slices;
  g.mc = std::max<int64_t>(
      g.tile.mr, std::min<int64_t>(144, (int64_t{384} << 10) / (4 * g.taps * g.kcs)) / g.tile.mr * g.tile.mr);
  // The pixel tiles read any unpadded convolution from x itself (Note [Pixels as rows]).
  const bool reads_x = g.pixels && p.pad_top == 0 && p.pad_left == 0 &&
                       (p.ho - 1) * p.stride_h + (p.r - 1) * p.dil_h < p.h &&
                       (p.wo - 1) * p.stride_w + (p.s - 1) * p.dil_w < p.w;
  g.identity = identity || reads_x;
  if (g.identity || g.pixels) {
    // One plane per channel: x itself, or for the pixel tiles (whose own offsets stride) a plain
    // zero-padded copy of x (no polyphase split: one row copy per input row, where a stride-2
    // split deinterleaves every row).
    g.plain = !g.identity;
    g.wq = g.identity ? p.w : (p.wo - 1) * p.stride_w + (p.s - 1) * p.dil_w + 1;
    g.hq = g.identity ? p.h : (p.ho - 1) * p.stride_h + (p.r - 1) * p.dil_h + 1;
    g.plane = g.cstride = g.hq * g.wq;
    g.nq = p.ho * p.wo;
    g.rows_per_out = p.stride_h;
    g.shift_h = (p.r - 1) * p.dil_h;
    g.pix_row = p.stride_h * g.wq, g.pix_col = p.stride_w;
    g.phases = {{0, 0}};
    for (int64_t r = 0; r < p.r; ++r)
      for (int64_t s = 0; s < p.s; ++s) g.tap_off.push_back(r * p.dil_h * g.wq + s * p.dil_w);
    if (!g.pixels) prefetch_lines(g, g.tile.nr);  // the column tiles' Note [Prefetching the next tile]
    return g;
  }
  const int64_t shift_h = (p.r - 1) * p.dil_h / p.stride_h;
  g.shift_h = shift_h;
  g.wq = plane_width(p);
  g.hq = p.ho + shift_h + 1;  // one more row: the halo columns of the last output row read into it
  g.plane = g.hq * g.wq;
  g.nq = p.ho * g.wq;
  for (int64_t r = 0; r < p.r; ++r) {
    for (int64_t s = 0; s < p.s; ++s) {
      const std::pair<int64_t, int64_t> ph{r * p.dil_h % p.stride_h, s * p.dil_w % p.stride_w};
      const auto it = std::find(g.phases.begin(), g.phases.end(), ph);
      const int64_t slot = it - g.phases.begin();
      if (it == g.phases.end()) g.phases.push_back(ph);
      g.tap_off.push_back(slot * g.plane + r * p.dil_h / p.stride_h * g.wq + s * p.dil_w / p.stride_w);
    }
  }
  g.cstride = static_cast<int64_t>(g.phases.size()) * g.plane;
  prefetch_lines(g, g.tile.nr);
  return g;
}

// Columns [j_lo, j_hi) of a phase plane hold input columns j * sw + d in [0, W); the rest of each
// row is padding. The same for every row and channel, so worked out once per fill (per row and
// channel, small planes spent as long on it as on the copy).
struct PhaseSpan {
  int64_t d, j_lo, j_hi;
};
std::vector<PhaseSpan> phase_spans(const Conv2dParams& p, const Geometry& g) {
  std::vector<PhaseSpan> spans;
  for (const auto& phase : g.phases) {
    const int64_t d = phase.second - p.pad_left;
    int64_t j_lo = 0, j_hi = g.wq;
    while (j_lo < g.wq && j_lo * p.stride_w + d < 0) ++j_lo;
    while (j_hi > j_lo && (j_hi - 1) * p.stride_w + d >= p.w) --j_hi;
    spans.push_back({d, j_lo, j_hi});
  }
  return spans;
}

// Rows [i0, i1) of every phase plane of one channel of X' from that channel of x (xc: H x W).
// Stride 2 across columns splits each input row into its even and odd columns once (vectorized,
// window_f32.h's deinterleave2, into `split`: 2 * (W / 2 + 1) floats) and copies runs of those;
// the planes of one row phase are adjacent (taps are enumerated row by row), so a row is split
// once for all its column phases. Other strides gather element by element. Unit stride: each
// phase plane's input rows go through the ISA's pad_rows in one call. spans: phase_spans.
void fill_rows(const Conv2dParams& p, const Geometry& g, const PhaseSpan* spans, const float* xc, float* dst,
               int64_t i0, int64_t i1, const WindowKernelsF32& wk, float* split) {
  if (p.stride_w == 1) {
    // Each phase plane's input rows in one call (y rises with i: the rows past the top padding are
    // input rows up to the bottom padding), the padding rows as one run of zeros each side.
    for (size_t slot = 0; slot < g.phases.size(); ++slot) {
      const int64_t ph = g.phases[slot].first;
      const auto [d, j_lo, j_hi] = spans[slot];
      float* plane = dst + static_cast<int64_t>(slot) * g.plane;
      auto y_of = [&](int64_t i) { return i * p.stride_h + ph - p.pad_top; };
      int64_t a = i0;
      while (a < i1 && y_of(a) < 0) ++a;
      int64_t b = a;
      while (b < i1 && y_of(b) < p.h) ++b;
      if (j_lo == j_hi) a = b = i1;  // no input column lands in this plane
      std::fill(plane + i0 * g.wq, plane + a * g.wq, 0.0f);
      if (a < b) wk.pad_rows(xc + y_of(a) * p.w + (j_lo + d), p.stride_h * p.w, plane + a * g.wq, b - a, j_lo,
                             j_hi - j_lo, g.wq);
      std::fill(plane + b * g.wq, plane + i1 * g.wq, 0.0f);
    }
    return;
  }
  float* even = split;
  float* odd = split + (p.w / 2 + 1);
  int64_t split_row = -1;
  for (int64_t i = i0; i < i1; ++i) {
    for (size_t slot = 0; slot < g.phases.size(); ++slot) {
      const int64_t ph = g.phases[slot].first;
      const auto [d, j_lo, j_hi] = spans[slot];
      float* row = dst + static_cast<int64_t>(slot) * g.plane + i * g.wq;
      const int64_t y = i * p.stride_h + ph - p.pad_top;
      if (y < 0 || y >= p.h || j_lo == j_hi) {
        std::fill(row, row + g.wq, 0.0f);
        continue;
      }
      const float* xr = xc + y * p.w;
      std::fill(row, row + j_lo, 0.0f);
      if (p.stride_w == 2) {
        if (split_row != y) {
          wk.deinterleave2(xr, even, odd, p.w / 2);
          if (p.w % 2) even[p.w / 2] = xr[p.w - 1];
          split_row = y;
        }
        // Input column 2j + d is even[j + e] or odd[j + e] for d = 2e or 2e + 1.
        const int64_t e = d >= 0 ? d / 2 : -((1 - d) / 2);
        const float* src = (d - 2 * e) != 0 ? odd : even;
        std::copy(src + (j_lo + e), src + (j_hi + e), row + j_lo);
      } else {
        for (int64_t j = j_lo; j < j_hi; ++j) row[j] = xr[j * p.stride_w + d];
      }
      std::fill(row + j_hi, row + g.wq, 0.0f);
    }
  }
}

void pack_weights(const Conv2dParams& p, const Geometry& g, const float* w, float* out) {
  const int64_t mr = g.panel;
  const size_t per_group = static_cast<size_t>(g.mpad * g.cg * g.taps);
  for (int64_t grp = 0; grp < p.groups; ++grp) {
    const float* wg = w + grp * g.kg * g.cg * g.taps;
    float* og = out + static_cast<size_t>(grp) * per_group;
    for (int64_t c0 = 0; c0 < g.cg; c0 += g.kcs) {
      const int64_t kcur = std::min(g.kcs, g.cg - c0);
      float* slice = og + c0 * g.taps * g.mpad;
      for (int64_t ir = 0; ir < g.mpad; ir += mr) {
        float* panel = slice + ir * g.taps * kcur;
        for (int64_t t = 0; t < g.taps; ++t)
          for (int64_t c = 0; c < kcur; ++c)
            for (int64_t i = 0; i < mr; ++i) {
              const int64_t o = ir + i;
              panel[(t * kcur + c) * mr + i] = o < g.kg ? wg[(o * g.cg + c0 + c) * g.taps + t] : 0.0f;
            }
      }
    }
  }
}

// Whether the micro-kernels' store applies activation a (none, relu, relu6; hardswish where the
// kernel set has it and no residual is added), and as which.
bool store_activation(const Geometry& g, GemmActivation a, bool residual, ConvTileEpilogueF32::Act& act) {
  using Act = ConvTileEpilogueF32::Act;
  act = a == GemmActivation::relu                                             ? Act::relu
        : a == GemmActivation::relu6                                          ? Act::relu6
        : a == GemmActivation::hardswish && g.store_hardswish && !residual ? Act::hardswish
                                                                              : Act::none;
  return a == GemmActivation::none || act != Act::none;
}

// The epilogue of image img, group grp: bias per filter row, the residual in y's layout.
GemmEpilogue group_epilogue(const Conv2dParams& p, const float* bias, const Conv2dEpilogue& e, int64_t img,
                            int64_t grp) {
  const int64_t kg = p.k / p.groups, howo = p.ho * p.wo;
  GemmEpilogue ep;
  if (bias != nullptr) ep.bias_kind = GemmBias::per_row, ep.bias = bias + grp * kg;
  ep.activation = e.activation;
  if (e.residual != nullptr) ep.residual = e.residual + (img * p.k + grp * kg) * howo, ep.ldr = howo;
  ep.residual_before_activation = e.residual_before_activation;
  return ep;
}

// Note [Storing across the halo]
// Product column q is output (q / Wq, q % Wq), and columns Wo .. Wq - 1 of each row are the halo.
// A column tile used to be stored whole into a product plane, whose valid runs were then copied to
// y (with the epilogue, when the store could not apply it): for a stem that is a second pass over
// its largest output (MobileNetV3's 3 -> 16 stride-2 stem at batch 8: as much time in that copy
// and X' as in the tile). Where the kernel set can, the tile instead stores into y itself: each
// 16-column vector covers at most two output rows (Wq >= 16), so it goes out as two masked stores,
// its lanes on row oh at y column oh * Wo + ow and its lanes from the next row's column 0 on, and
// the residual and the partial sums of earlier K slices are read back the same way. That needs the
// whole epilogue in the store (relu, relu6, hardswish without a residual); otherwise, and on
// narrower planes, the product plane stays.
void plan_halo(Geometry& g, const Conv2dParams& p, const Conv2dEpilogue& e) {
  ConvTileEpilogueF32::Act act;
  g.halo = !g.pixels && g.wq != p.wo && g.tile.halo_ukernel != nullptr && g.wq >= g.tile.min_halo_wq &&
           store_activation(g, e.activation, e.residual != nullptr, act);
}

constexpr int kMaxTile = 12 * 32;  // the largest micro-kernel tile (AVX-512's)
constexpr size_t kChunkBytes = size_t{24} << 20;  // X' and product planes of the images run together

// One image, one group: the micro-kernel calls for its tiles, block by block (run_images).
struct GroupRun {
  const Conv2dParams* p;
  const Geometry* g;
  const float* xq;      // X' of this group's first channel
  const float* packed;  // this group's packed filters
  float* yq;            // the product plane (ldq = nq): y itself when Wq == Wo or the tiles store across the halo
  float* y;             // this image and group's output, [kg, Ho * Wo]
  GemmEpilogue ep;      // indexed by the group's rows and y's columns
  bool in_store = false;  // the micro-kernel applies ep (Note [Epilogue in the store])
  ConvTileEpilogueF32::Act act = ConvTileEpilogueF32::Act::none;

  // ep in the micro-kernel's store where it can: relu/relu6/none (hardswish: store_activation), and
  // a residual only when the tile is stored into y itself (the residual's layout).
  void plan_epilogue() {
    in_store = !ep.empty() && store_activation(*g, ep.activation, ep.residual != nullptr, act) &&
               (yq == y || ep.residual == nullptr);
  }

  // Tile (ir, jr) is final: the epilogue runs on it in the product plane (bias, activation, and
  // the residual gathered into the plane's layout first), then its valid runs go to y.
  void finish(int64_t ir, int64_t jr, int mv, int nv) const {
    const int64_t howo = p->ho * p->wo;
    if (g->halo) return;  // stored into y, finished in the store (plan_halo)
    if (yq == y) {
      if (!ep.empty() && !in_store) gemm_epilogue_f32(ep, y + ir * howo + jr, howo, ir, jr, mv, nv);
      return;
    }
    float* tile = yq + ir * g->nq + jr;
    const int nr = g->tile.nr;
    auto for_runs = [&](auto&& fn) {  // fn(q offset in the tile, y column, length) per valid run
      for (int64_t q = jr; q < jr + nv;) {
        const int64_t oh = q / g->wq, ow = q % g->wq, end = std::min(jr + nv, (oh + 1) * g->wq);
        if (ow < p->wo) fn(q - jr, oh * p->wo + ow, std::min(p->wo, ow + end - q) - ow);
        q = end;
      }
    };
    if (!ep.empty() && !in_store) {
      GemmEpilogue e = ep;
      if (e.bias != nullptr) e.bias += ir;
      float res[kMaxTile];
      if (ep.residual != nullptr) {
        KILN_ASSERT(mv * nr <= kMaxTile, "direct convolution: tile larger than its residual buffer");
        std::fill(res, res + mv * nr, 0.0f);  // the halo columns, dropped afterwards
        for_runs([&](int64_t t, int64_t col, int64_t len) {
          for (int i = 0; i < mv; ++i)
            std::memcpy(res + i * nr + t, ep.residual + (ir + i) * ep.ldr + col, static_cast<size_t>(len) * sizeof(float));
        });
        e.residual = res;
        e.ldr = nr;
      }
      gemm_epilogue_f32(e, tile, g->nq, 0, 0, mv, nv);
    }
    for_runs([&](int64_t t, int64_t col, int64_t len) {
      for (int i = 0; i < mv; ++i)
        std::memcpy(y + (ir + i) * howo + col, tile + i * g->nq + t, static_cast<size_t>(len) * sizeof(float));
    });
  }

  // Note [Prefetching the tile's output]: before the tile at rows [ir, ir + mv) runs, the lines the
  // same rows of the next column tile will store to, and the residual lines its epilogue reads, are
  // requested. A tile's stores come after its K loop; where the output leaves the caches (a 1x1
  // convolution's 256 output planes at 56 x 56 are 25.7 MB at batch 8) every row of them missed, the
  // stores filled the store buffer, and the next call stalled behind them. One column tile ahead,
  // the lines have all the filter panels of the pass to arrive in: a shallow K (MobileNetV2's 1x1
  // layers over 16-32 channels) is too short to hide the wait within the tile itself. One thread on
  // a Zen 3, alternating within one process: 64 -> 256 at 56 x 56, batch 8, 16.6 -> 13.0 ms (also on
  // 2 threads: 8.4 -> 6.5); with the outputs rotated through 16 buffers so that they start cold, as
  // in an engine, 16 -> 96 at 112 x 112 2.8 -> 1.7 ms and 24 -> 144 at 56 x 56 1.0 -> 0.52; where
  // the output is already cached the requests cost 1.5-3% (64 -> 256 at batch 1, 16 -> 96). The
  // pixel tiles do not prefetch: their transposed store writes short runs into 16-32 planes that the
  // next tiles continue, and asking for those lines made them 3-15% slower. A prefetch never faults;
  // every line asked for here lies inside y (or the product plane) and the residual. The requests go
  // through prefetch_rows (prefetch.h), always inlined: as a member function of its own, the loop
  // was judged by GCC free of side effects and its calls were dropped.

  // y's column for product column j (the next output row's first for a halo column).
  int64_t y_column(int64_t j) const { return j / g->wq * p->wo + std::min(j % g->wq, p->wo); }

  // K slice c0, filter rows [ic, iend) (one L2 block), product columns [j0, j1).
  void block(int64_t c0, int64_t ic, int64_t iend, int64_t j0, int64_t j1) const {
    const int mr = g->tile.mr, nr = g->tile.nr;
    const int64_t howo = p->ho * p->wo;
    const int64_t kcur = std::min(g->kcs, g->cg - c0);
    const bool last = c0 + kcur == g->cg;
    const float* a = packed + c0 * g->taps * g->mpad;
    const float* b = xq + c0 * g->cstride;
    for (int64_t jr = j0; jr < j1; jr += nr) {
      const int nv = static_cast<int>(std::min<int64_t>(nr, j1 - jr));
      if (jr + nr < j1) {  // Note [Prefetching the next tile]; a prefetch never faults
        const uintptr_t next = reinterpret_cast<uintptr_t>(b + jr + nr);
        for (int64_t c = 0; c < kcur; ++c)
          for (int64_t l : g->line_off)
            __builtin_prefetch(
                reinterpret_cast<const void*>(next + static_cast<uintptr_t>(c * g->cstride + l) * sizeof(float)));
      }
      // Where the tiles' rows store: the product plane, or (halo) y's rows, indexed by y's columns.
      const int64_t ldq = g->halo ? howo : g->nq;
      for (int64_t ir = ic; ir < iend; ir += mr) {
        const int mv = static_cast<int>(std::min<int64_t>(mr, iend - ir));
        if (jr + nr < j1) {  // Note [Prefetching the tile's output]
          const int64_t j = jr + nr, n = std::min<int64_t>(nr, j1 - j), col = g->halo ? y_column(j) : j;
          prefetch_rows(reinterpret_cast<uintptr_t>(yq + ir * ldq + col), ldq, mv, n);
          if (last && in_store && ep.residual != nullptr)
            prefetch_rows(reinterpret_cast<uintptr_t>(ep.residual + ir * ep.ldr + col), ep.ldr, mv, n);
        }
        ConvTileEpilogueF32 te;
        if (last && in_store) {
          te.bias = ep.bias != nullptr ? ep.bias + ir : nullptr;
          te.residual = ep.residual != nullptr ? ep.residual + ir * ep.ldr + (g->halo ? 0 : jr) : nullptr;
          te.ldr = ep.ldr;
          te.residual_before_activation = ep.residual_before_activation;
          te.act = act;
        }
        const float* at = a + ir * g->taps * kcur;
        const ConvTileEpilogueF32* fin = last && in_store ? &te : nullptr;
        if (g->halo)
          g->tile.halo_ukernel(static_cast<int>(g->taps), g->tap_off.data(), kcur, at, b + jr, g->cstride,
                               y + ir * howo, howo, mv, nv, c0 != 0, fin, ConvTileHaloF32{jr, g->wq, p->wo});
        else
          g->tile.ukernel(static_cast<int>(g->taps), g->tap_off.data(), kcur, at, b + jr, g->cstride,
                          yq + ir * g->nq + jr, g->nq, mv, nv, c0 != 0, fin);
        if (last) finish(ir, jr, mv, nv);
      }
    }
  }
};

// Note [Images share the filter blocks]
// Rows [i0, i1) (i0 a multiple of mr) x product columns [j0, j1) of several images (same group):
// each L2 block of filters runs over every image's tiles before the next block is read, so a batch
// reads the filters once per chunk of images instead of once per image (ResNet-50's 100 MB of
// filters per image, streamed from memory).
void run_images(const std::vector<GroupRun>& runs, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
  const Geometry& g = *runs.front().g;
  for (int64_t c0 = 0; c0 < g.cg; c0 += g.kcs)
    for (int64_t ic = i0; ic < i1; ic += g.mc)
      for (const GroupRun& r : runs) r.block(c0, ic, std::min(ic + g.mc, i1), j0, j1);
}

// Below this a convolution runs on the calling thread alone: 2^16 multiply-adds, the depthwise
// kernels' hand-off grain. It was 2^21 flops, which left three of MobileNetV3-Small's 1x1 layers
// (16 -> 16 at 56 x 56, 96 -> 40 and 40 -> 120 at 14 x 14: 1.5-1.9 MFLOP) to one core while the
// other waited; at 2^17 (which also splits its four 576 <-> 144 squeeze-excite layers, 0.17 MFLOP)
// its batch-1 engine took 1.33-1.42 ms (min of 300 runs, 8 alternations) against 1.37-1.50,
// MobileNetV2's 4.50-4.56 against 4.55-4.63, and 2^15 was no faster.
constexpr int64_t kSerialFlops = int64_t{1} << 17;

// How evenly `blocks` split into `parts` (1 = perfectly).
double balance(int64_t blocks, int64_t parts) {
  const int64_t most = (blocks + parts - 1) / parts;
  return static_cast<double>(blocks) / static_cast<double>(most * parts);
}

// Note [Images share the filter blocks]: images [0, n) split between the threads, each worker
// running its images in chunks whose X' (xq_floats each, filled here; none: x itself) and product
// scratch (yq_floats each) are together at most kChunkBytes (one_at_a_time: one image per chunk):
// body(img0, count, xq, yq).
// Sharing pays only where the filters outweigh an image's scratch. Where they do not (a stem's
// 3 -> 16 filters are 2 KB, its X' and product planes 1.4 MB per image), a chunk's scratch only
// spills L2 and the images go one at a time: column tiles at batch 8, two threads, alternating
// call by call on a Zen 4 (busy with a CI build: medians), one image at a time against chunks:
// MobileNetV3's 3 -> 16 stride-2 stem 0.79-0.86x, ResNet's 3 -> 64 7x7 stem 0.86x, MobileNetV2's
// 3 -> 32 stem 0.96x, and even where the filters are larger (ResNet-18's 64 -> 64 3x3 at 56 x 56
// 0.99x, 128 -> 128 at 28 x 28 0.94x) it did not lose.
template <class Fill, class Body>
void image_chunks(int64_t n, const Geometry& g, size_t xq_floats, size_t yq_floats, size_t filter_floats,
                  const Fill& fill, const Body& body, bool one_at_a_time = false) {
  const size_t per_image = (xq_floats + yq_floats) * sizeof(float);
  one_at_a_time = one_at_a_time || filter_floats * sizeof(float) < per_image;
  const int64_t chunk = one_at_a_time ? 1
                        : per_image == 0 ? n
                                         : std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / per_image));
  // Images that share the filters go to one thread together (each thread's part, as a fixed split
  // would deal it); one at a time, they are taken from the pool's two-ended queue one by one.
  const int threads = in_parallel_region() ? 1 : get_num_threads();
  const int64_t grain = one_at_a_time ? 1 : std::min(chunk, (n + threads - 1) / threads);
  parallel_for(0, n, grain, [&](int64_t i0, int64_t i1) {
    for (int64_t img0 = i0; img0 < i1; img0 += chunk) {
      const int64_t count = std::min(chunk, i1 - img0);
      float* xq = xq_floats ? thread_scratch<float, ScratchSlot::direct_conv_x>(xq_floats * count) : nullptr;
      float* yq = yq_floats ? thread_scratch<float, ScratchSlot::direct_conv_y>(yq_floats * count) : nullptr;
      if (xq != nullptr)
        for (int64_t m = 0; m < count; ++m) fill(img0 + m, xq + m * xq_floats, 0, g.hq);
      body(img0, count, xq, yq);
    }
  });
}

// Where the pixel tiles' output pixels read X': output pixel q = (oh, ow) at oh * row + ow * col,
// the last tile repeating the last pixel. Worked out per tile (one division) rather than kept per
// pixel: the table took a division per output pixel on the calling thread before every call
// (MobileNetV2's stem, 12544 pixels: 5% of its time on one thread).
constexpr int64_t kMaxPixelTile = 16;
// Note [Staged pixel stores]
// A pixel tile's own store (Note [A transposed store] in gemm_f32_avx512.cc) writes 6-8 pixels
// into each of its 48-64 channel planes: rows of 8 lanes with 2 idle, one output line touched by
// two or three tiles in turn. On a Xeon with two FMA ports that store was 10% of a 64 -> 64 3x3
// layer at 56 x 56 (one thread: 1.111 ms, 0.995 with the stores left out), 5% at 28 x 28 and 3% at
// 14 x 14, where K slices share it. Where the ISA has a staged store (GemmKernelF32::pixels_store),
// the last K slice's tiles of a spatial filter leave their sums pixel-major instead, in Yt where K
// is sliced (the earlier slices' sums are there already) or else in a stage per filter panel, and
// the pending run of each panel (consecutive pixels of y, one image) goes to y 16 pixels by 16
// channels, in full vectors, as soon as it has 16; the rest waits for the next tile. A tile
// across two rows of a group (Note [Reading x in place]) ends one run and starts the next; one
// whose pixels lie in more runs (a column of the border) still stores itself, scattered.
//   - Runs flushed whole (up to 64 pixels) made a 1x1 with a residual and a shallow K up to 1.5x
//     slower (24 -> 144 at 56 x 56): the flush's residual and output lines, 144 planes apart,
//     missed together with no multiply-adds left to hide them. Sixteen at a time spreads them.
//   - 1x1 layers keep their own stores: their tiles are short, and MobileNetV2's expansions at
//     14 x 14 and 7 x 7 ran 5-8% slower staged.
// One layer, alternating processes, min of 5 x 10 runs (bench/RESULTS.md, 2026-12-05): 64 -> 64
// at 56 x 56 1.132 -> 1.107 ms (2 threads 0.659 -> 0.644), 128 -> 128 at 28 x 28 1.065 -> 1.052,
// 14 x 14 and 7 x 7 unchanged; ResNet's stem (with Note [Three channels a tap]) 1.544 -> 1.431.
constexpr int64_t kStagePixels = 256;  // a panel's stage: pending pixels move back to its start at the end
struct PixelMap {
  int64_t pixels = 0, wo = 1, row = 0, col = 1;
  // Offsets of tile t's mr pixels into out[0 .. mr).
  void tile(int64_t t, int64_t mr, int64_t* out) const {
    const int64_t q0 = t * mr;
    int64_t oh = q0 / wo, ow = q0 - oh * wo, off = 0;
    for (int64_t i = 0; i < mr; ++i) {
      if (q0 + i < pixels) off = oh * row + ow * col;  // else the tile's last pixel again
      out[i] = off;
      if (++ow == wo) ow = 0, ++oh;
    }
  }
};

// Note [Taps that read only padding]
// A padded convolution's border pixels read zeros at some taps: output row 0 of a 3x3, pad 1 layer
// never reads filter row 0's input, nor column 0 its filter column 0. A pixel tile runs only the
// taps some pixel of it reads inside x, the bounding box of its pixels' windows (tap rows
// [r_lo, r_hi] x columns [s_lo, s_hi]; the others' taps in that box read X''s zero padding, as
// before), passing the micro-kernel those taps' offsets and filter blocks (tap_blk). How many taps
// that saves depends on which pixels share a tile, so the pixels go in one of two orders:
//   - rows: row by row, as without skipping (tile t = pixels t * mr ...); on a plane as wide as the
//     tile (7 x 7 with 7-pixel tiles) the first and last rows are tiles of their own;
//   - inner first: the pixels whose windows lie inside x (rows [rt, re) x columns [lc, ce)) row by
//     row, then the ring around them: the top rows, the bottom rows, the left and the right
//     columns; tiles then span a border row or column, and only the few where two parts meet run
//     every tap.
// Each layer takes the order that runs fewer (tile, tap) pairs (inner first without counting on
// planes over kCountPixels, where the ring is a small part), or a third that needs no X' at all
// where it costs little more (Note [Reading x in place]). A tile whose pixels do not lie in one
// run of y (an inner-first tile spanning two rows, or a column of the ring) is stored through a
// small buffer and scattered (its residual gathered first), which costs a few hundred scalar moves
// against the tile's thousands of multiply-adds. The skipped fraction is what ONNX Runtime's
// blocked kernels skip by not padding at all: (3 Wo - 2)^2 / (9 Wo^2) of a 3x3 layer's taps
// remain, 91% at 14 x 14 and 82% at 7 x 7; the tiles here get 94% and 90%.
// Note [Reading x in place]
// With tiles that never mix pixels whose windows have different taps inside x, no tile reads
// padding at all, and the tiles can read x itself: each pixel's offset is that of its window's
// top-left corner in x (before x for a border pixel, whose taps outside x are not run), the taps'
// offsets are in x's rows, and X' is neither allocated nor filled. The pixels go in groups: runs
// of output rows with the same tap rows inside x, by runs of columns with the same tap columns
// (a 3x3, pad 1 layer: the inside, four edges and four corners), the inside first, each group in
// tiles of its own. Filling X' cost each thread 20-40 us of a 1 ms layer on 2 threads, mostly
// waiting for lines the other core had read. A layer reads x in place when its groups' partial
// tiles run at most 2% more (tile, tap) pairs than the better of the two orders above (always on
// planes over kCountPixels): 14 x 14 and larger, not 7 x 7 (a third more). One layer, batch 1, 2
// threads, min of 200, three alternations: 64 -> 64 at 56 x 56 1.056 -> 1.031 ms (ORT 1.019),
// 256 -> 256 at 14 x 14 0.994 -> 0.975 (ORT 0.976).
constexpr int kMaxTileTaps = 64;      // larger filters run every tap
constexpr int64_t kCountPixels = 1024;

class PixelOrder {
 public:
  enum class Mode { rows, rows_skipping, inner_first, in_place };

  // `skip`: the tiles may skip taps (their stores can scatter: the epilogue is in the store).
  PixelOrder(const Conv2dParams& p, const Geometry& g, int64_t mr, bool skip)
      : howo_(p.ho * p.wo), wo_(p.wo), ho_(p.ho), s_(p.s), pix_row_(g.pix_row), pix_col_(g.pix_col),
        tap_off_(g.tap_off.data()), tiles_((howo_ + mr - 1) / mr) {
    if (!skip || g.identity || g.taps == 1 || g.taps > kMaxTileTaps) return;
    auto ranges = [](int64_t n, int64_t taps, int64_t stride, int64_t pad, int64_t dil, int64_t size,
                     std::vector<int32_t>& lo, std::vector<int32_t>& hi) {
      lo.assign(static_cast<size_t>(n), static_cast<int32_t>(taps));
      hi.assign(static_cast<size_t>(n), -1);
      for (int64_t o = 0; o < n; ++o)
        for (int64_t r = 0; r < taps; ++r) {
          const int64_t i = o * stride - pad + r * dil;
          if (i < 0 || i >= size) continue;
          lo[static_cast<size_t>(o)] = std::min(lo[static_cast<size_t>(o)], static_cast<int32_t>(r));
          hi[static_cast<size_t>(o)] = static_cast<int32_t>(r);
        }
    };
    ranges(p.ho, p.r, p.stride_h, p.pad_top, p.dil_h, p.h, r_lo_, r_hi_);
    ranges(p.wo, p.s, p.stride_w, p.pad_left, p.dil_w, p.w, s_lo_, s_hi_);
    // The rows (columns) whose windows lie inside x: one run, as a window moves monotonically.
    auto inner = [](const std::vector<int32_t>& lo, const std::vector<int32_t>& hi, int64_t taps, int64_t& b,
                    int64_t& e) {
      const int64_t n = static_cast<int64_t>(lo.size());
      auto full = [&](int64_t o) { return lo[static_cast<size_t>(o)] == 0 && hi[static_cast<size_t>(o)] == taps - 1; };
      for (b = 0; b < n && !full(b);) ++b;
      for (e = b; e < n && full(e);) ++e;
    };
    inner(r_lo_, r_hi_, p.r, rt_, re_);
    inner(s_lo_, s_hi_, p.s, lc_, ce_);
    if (rt_ == 0 && re_ == p.ho && lc_ == 0 && ce_ == p.wo) return;  // every window inside x
    const int64_t in_place = plan_in_place(p, mr, tiles_);
    mode_ = Mode::in_place;
    if (howo_ > kCountPixels) return;  // the groups' partial tiles are a small part
    // Small planes: the bounding-box orders, and which of the three runs fewest pairs.
    if (re_ == rt_ || ce_ == lc_) rt_ = re_ = lc_ = ce_ = 0;  // no inner pixel: all ring
    iw_ = ce_ - lc_;
    inner_ = (re_ - rt_) * iw_;
    ring_.reserve(static_cast<size_t>(howo_ - inner_));
    auto add = [&](int64_t oh, int64_t ow) { ring_.push_back({static_cast<int32_t>(oh), static_cast<int32_t>(ow)}); };
    const int64_t top = inner_ > 0 ? rt_ : p.ho, bottom = inner_ > 0 ? re_ : p.ho;
    for (int64_t oh = 0; oh < top; ++oh)
      for (int64_t ow = 0; ow < p.wo; ++ow) add(oh, ow);
    for (int64_t oh = bottom; oh < p.ho; ++oh)
      for (int64_t ow = 0; ow < p.wo; ++ow) add(oh, ow);
    for (int64_t ow = 0; ow < lc_; ++ow)
      for (int64_t oh = rt_; oh < re_; ++oh) add(oh, ow);
    for (int64_t ow = ce_; ow < p.wo; ++ow)
      for (int64_t oh = rt_; oh < re_; ++oh) add(oh, ow);
    const int64_t tiles = (howo_ + mr - 1) / mr;
    auto cost = [&](Mode m) {
      mode_ = m;
      int64_t pairs = 0;
      for (int64_t t = 0; t < tiles; ++t) pairs += box(t, mr).taps();
      return pairs;
    };
    const int64_t by_rows = cost(Mode::rows_skipping), inner_first = cost(Mode::inner_first);
    if (in_place * 100 <= std::min(by_rows, inner_first) * 102) {
      mode_ = Mode::in_place;
      return;
    }
    tiles_ = tiles;
    mode_ = std::min(by_rows, inner_first) >= tiles * g.taps ? Mode::rows  // nothing to skip
            : inner_first < by_rows                           ? Mode::inner_first
                                                              : Mode::rows_skipping;
  }

  // Whether the tiles read x itself (Note [Reading x in place]), with no X'.
  bool in_place() const { return mode_ == Mode::in_place; }
  // The pixel tiles of one image and group.
  int64_t tiles() const { return tiles_; }

  // Output rows [lo, hi] that tiles [q0, q1) write.
  std::pair<int64_t, int64_t> rows(int64_t q0, int64_t q1, int64_t mr) const {
    if (mode_ == Mode::in_place) return {0, ho_ - 1};  // no X' to fill
    const int64_t a = q0 * mr, b = std::min(howo_, q1 * mr) - 1;
    if (mode_ != Mode::inner_first) return {a / wo_, b / wo_};
    if (b >= inner_) return {0, ho_ - 1};  // the ring spans every row
    return {rt_ + a / iw_, rt_ + b / iw_};
  }

  // Tile t: its pixels' offsets in X' (x) and in y (y), the last valid pixel repeated past the end;
  // the number of valid pixels; and the taps it runs (tap_off / tap_blk, tap_blk == nullptr: all).
  struct Tile {
    int64_t x[kMaxPixelTile], y[kMaxPixelTile];
    int m = 0;
    bool contiguous = true;  // y[i] == y[0] + i for the valid pixels
    int taps = 0;
    const int64_t* tap_off = nullptr;
    const int32_t* tap_blk = nullptr;
    int64_t off_buf[kMaxTileTaps];
    int32_t blk_buf[kMaxTileTaps];
  };
  void tile(int64_t t, int64_t mr, int64_t all_taps, Tile& out) const {
    const int64_t q0 = t * mr;
    out.m = static_cast<int>(std::min(mr, howo_ - q0));
    if (mode_ == Mode::rows) {
      PixelMap{howo_, wo_, pix_row_, pix_col_}.tile(t, mr, out.x);
      for (int64_t i = 0; i < mr; ++i) out.y[i] = std::min(q0 + i, howo_ - 1);
      out.contiguous = true;
      out.taps = static_cast<int>(all_taps);
      out.tap_off = tap_off_;
      out.tap_blk = nullptr;
      return;
    }
    if (mode_ == Mode::in_place) return in_place_tile(t, mr, all_taps, out);
    finish(box(t, mr, &out), tap_off_, all_taps, out);
  }

 private:
  struct Box {  // tap rows [r0, r1] x tap columns [s0, s1]; empty when r0 > r1
    int32_t r0, r1, s0, s1;
    int64_t taps() const { return r0 > r1 || s0 > s1 ? 0 : int64_t{r1 - r0 + 1} * (s1 - s0 + 1); }
  };
  // The bounding box of tile t's pixels' taps (and, with `out`, their offsets).
  Box box(int64_t t, int64_t mr, Tile* out = nullptr) const {
    Box b{std::numeric_limits<int32_t>::max(), -1, std::numeric_limits<int32_t>::max(), -1};
    const int64_t q0 = t * mr, n = std::min(mr, howo_ - q0);
    walk(q0, n, [&](int64_t i, int64_t oh, int64_t ow) {
      const auto h = static_cast<size_t>(oh), w = static_cast<size_t>(ow);
      if (r_lo_[h] <= r_hi_[h] && s_lo_[w] <= s_hi_[w]) {  // else its window is all padding
        b.r0 = std::min(b.r0, r_lo_[h]), b.r1 = std::max(b.r1, r_hi_[h]);
        b.s0 = std::min(b.s0, s_lo_[w]), b.s1 = std::max(b.s1, s_hi_[w]);
      }
      if (out != nullptr) out->x[i] = oh * pix_row_ + ow * pix_col_, out->y[i] = oh * wo_ + ow;
    });
    if (out != nullptr)
      for (int64_t i = n; i < mr; ++i) out->x[i] = out->x[n - 1], out->y[i] = out->y[n - 1];
    return b;
  }

  // f(i, oh, ow) for pixels q0 .. q0 + n - 1 of the order, stepping from one to the next (a
  // division per pixel was 8% of a stem's time).
  template <class F>
  void walk(int64_t q0, int64_t n, const F& f) const {
    int64_t oh = 0, ow = 0;
    auto seek = [&](int64_t q) {
      if (mode_ != Mode::inner_first) {
        oh = q / wo_, ow = q - oh * wo_;
      } else if (q < inner_) {
        oh = rt_ + q / iw_, ow = lc_ + q % iw_;
      } else {
        const Pixel& r = ring_[static_cast<size_t>(q - inner_)];
        oh = r.oh, ow = r.ow;
      }
    };
    seek(q0);
    for (int64_t i = 0; i < n; ++i) {
      f(i, oh, ow);
      const int64_t q = q0 + i + 1;
      if (mode_ != Mode::inner_first) {
        if (++ow == wo_) ow = 0, ++oh;
      } else if (q < inner_) {
        if (++ow == ce_) ow = lc_, ++oh;
      } else if (i + 1 < n) {
        seek(q);
      }
    }
  }

  // Note [Reading x in place]: the pixels in groups whose windows have the same taps inside x
  // (runs of output rows with the same tap rows, by runs of columns with the same tap columns), the
  // all-inside group first; a group's pixels row by row, in tiles of their own (the last one
  // partial). Returns the (tile, tap) pairs; `tiles` gets the tiles.
  int64_t plan_in_place(const Conv2dParams& p, int64_t mr, int64_t& tiles) {
    x_w_ = p.w, sh_ = p.stride_h, sw_ = p.stride_w, pt_ = p.pad_top, pl_ = p.pad_left;
    for (int64_t r = 0; r < p.r; ++r)
      for (int64_t c = 0; c < p.s; ++c) tap_off_x_.push_back(r * p.dil_h * p.w + c * p.dil_w);
    auto runs = [](const std::vector<int32_t>& lo, const std::vector<int32_t>& hi) {
      std::vector<std::pair<int64_t, int64_t>> out;
      for (size_t o = 0; o < lo.size(); ++o)
        if (o == 0 || lo[o] != lo[o - 1] || hi[o] != hi[o - 1]) out.emplace_back(o, o + 1);
        else out.back().second = static_cast<int64_t>(o) + 1;
      return out;
    };
    const auto row_runs = runs(r_lo_, r_hi_), col_runs = runs(s_lo_, s_hi_);
    for (const auto& [h0, h1] : row_runs)
      for (const auto& [w0, w1] : col_runs) {
        const auto h = static_cast<size_t>(h0), w = static_cast<size_t>(w0);
        Group gr{h0, h1, w0, w1, 0, Box{r_lo_[h], r_hi_[h], s_lo_[w], s_hi_[w]}};
        const bool inside = gr.box.taps() == static_cast<int64_t>(tap_off_x_.size());
        groups_.insert(inside ? groups_.begin() : groups_.end(), gr);
      }
    int64_t first = 0, pairs = 0;
    for (Group& gr : groups_) {
      gr.first_tile = first;
      const int64_t n = ((gr.oh1 - gr.oh0) * (gr.ow1 - gr.ow0) + mr - 1) / mr;
      first += n;
      pairs += n * gr.box.taps();
    }
    tiles = first;
    return pairs;
  }

  void in_place_tile(int64_t t, int64_t mr, int64_t all_taps, Tile& out) const {
    size_t gi = 0;
    while (gi + 1 < groups_.size() && groups_[gi + 1].first_tile <= t) ++gi;
    const Group& gr = groups_[gi];
    const int64_t gw = gr.ow1 - gr.ow0, q0 = (t - gr.first_tile) * mr;
    const int64_t n = (gr.oh1 - gr.oh0) * gw;
    out.m = static_cast<int>(std::min(mr, n - q0));
    int64_t oh = gr.oh0 + q0 / gw, ow = gr.ow0 + q0 % gw;
    for (int64_t i = 0; i < mr; ++i) {
      if (i < out.m) {
        // The window's top-left corner, before x for a border pixel: the taps it runs land inside.
        out.x[i] = (oh * sh_ - pt_) * x_w_ + (ow * sw_ - pl_);
        out.y[i] = oh * wo_ + ow;
        if (++ow == gr.ow1) ow = gr.ow0, ++oh;
      } else {
        out.x[i] = out.x[i - 1], out.y[i] = out.y[i - 1];
      }
    }
    finish(gr.box, tap_off_x_.data(), all_taps, out);
  }

  // Whether out's pixels are one run of y, and its taps: those of box b (offsets from `offsets`,
  // per filter tap), or all of them in order when b holds every tap.
  void finish(const Box& b, const int64_t* offsets, int64_t all_taps, Tile& out) const {
    out.contiguous = true;
    for (int i = 1; i < out.m; ++i) out.contiguous = out.contiguous && out.y[i] == out.y[0] + i;
    if (b.taps() == all_taps) {
      out.taps = static_cast<int>(all_taps);
      out.tap_off = offsets;
      out.tap_blk = nullptr;
      return;
    }
    int n = 0;
    for (int32_t r = b.r0; r <= b.r1; ++r)
      for (int32_t c = b.s0; c <= b.s1; ++c, ++n) {
        const int32_t tap = static_cast<int32_t>(r * s_ + c);
        out.off_buf[n] = offsets[tap];
        out.blk_buf[n] = tap;
      }
    out.taps = n;
    out.tap_off = out.off_buf;
    out.tap_blk = out.blk_buf;
  }

  struct Group {  // output rows [oh0, oh1) x columns [ow0, ow1), tiles from first_tile
    int64_t oh0, oh1, ow0, ow1, first_tile;
    Box box;
  };
  struct Pixel {
    int32_t oh, ow;
  };
  Mode mode_ = Mode::rows;
  int64_t howo_, wo_, ho_, s_, pix_row_, pix_col_;
  const int64_t* tap_off_;
  std::vector<int32_t> r_lo_, r_hi_, s_lo_, s_hi_;  // per output row (column): the taps inside x
  int64_t rt_ = 0, re_ = 0, lc_ = 0, ce_ = 0, iw_ = 1, inner_ = 0;
  std::vector<Pixel> ring_;  // the pixels after the inner ones, in order
  int64_t tiles_;
  // Reading x in place: the groups, x's width, strides and padding, the taps' offsets in x.
  std::vector<Group> groups_;
  int64_t x_w_ = 1, sh_ = 1, sw_ = 1, pt_ = 0, pl_ = 0;
  std::vector<int64_t> tap_off_x_;
};

// Note [Pixel panels]
// A 1x1 convolution's pixel tiles read x in place, each step broadcasting the tile's pixels from
// one channel row of x and the next step from the next row, a plane further on: a new cache line
// per step per tile, which neither stays in L1 (the filter panel shares it) nor follows a pattern
// the prefetcher takes up, and every filter panel sweeps x again. With more than 4 panels the
// tiles' pixels are packed first, each tile's as one [channel][pixel] panel (the GEMM's packed
// A), so each step's broadcasts are the next few floats of one stream. Kernel A/B on a Zen 3,
// alternating call by call, one thread: MobileNetV2's 160 -> 960 1x1 at 7 x 7 0.78x at batch 1
// and 8, ResNet-50's 2048 -> 512 and 512 -> 2048 at 7 x 7 0.79x, 256 -> 1024 at 14 x 14 0.89x,
// its strided 1x1 projections 0.78x; two threads 0.86-0.96x. With 1 or 2 panels the copy is not
// repaid (192 -> 32 at 28 x 28 1.2x, 144 -> 24 at 56 x 56 1.3x); 4 panels break even
// (576 -> 96 at 14 x 14).
//
// pack_pixel_panels: pixel tiles [t0, t1) of one image's x (cg channels, cstride apart), each
// tile's mr pixels where `pix` places them, packed as panel t = [channel][pixel] at out + t * cg * mr.
template <int MR>
void pack_pixel_panels_mr(const float* x, int64_t cg, int64_t cstride, const PixelMap& pix, int64_t t0, int64_t t1,
                          float* out) {
  // 16 channels at a time, so the lines one tile reads are still in L1 for the tiles after it.
  for (int64_t c0 = 0; c0 < cg; c0 += 16) {
    const int64_t c1 = std::min(cg, c0 + 16);
    for (int64_t t = t0; t < t1; ++t) {
      int64_t pt[MR];
      pix.tile(t, MR, pt);
      float* dst = out + (t * cg + c0) * MR;
      if (pt[MR - 1] - pt[0] == MR - 1) {  // consecutive pixels (unit stride, not the last tile)
        const float* src = x + c0 * cstride + pt[0];
        for (int64_t c = c0; c < c1; ++c, dst += MR, src += cstride) std::memcpy(dst, src, MR * sizeof(float));
      } else {
        for (int64_t c = c0; c < c1; ++c, dst += MR)
          for (int i = 0; i < MR; ++i) dst[i] = x[c * cstride + pt[i]];
      }
    }
  }
}

void pack_pixel_panels(int64_t mr, const float* x, int64_t cg, int64_t cstride, const PixelMap& pix, int64_t t0,
                       int64_t t1, float* out) {
  switch (mr) {
    case 3: return pack_pixel_panels_mr<3>(x, cg, cstride, pix, t0, t1, out);
    case 4: return pack_pixel_panels_mr<4>(x, cg, cstride, pix, t0, t1, out);
    case 6: return pack_pixel_panels_mr<6>(x, cg, cstride, pix, t0, t1, out);
    case 7: return pack_pixel_panels_mr<7>(x, cg, cstride, pix, t0, t1, out);
    case 8: return pack_pixel_panels_mr<8>(x, cg, cstride, pix, t0, t1, out);
    default: break;
  }
  int64_t pt[kMaxPixelTile];
  for (int64_t t = t0; t < t1; ++t) {
    pix.tile(t, mr, pt);
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t i = 0; i < mr; ++i) out[(t * cg + c) * mr + i] = x[c * cstride + pt[i]];
  }
}

// Note [Pixels as rows]: the driver. `fill(img, xq, r0, r1)` writes rows of image img's X'.
template <class Fill>
void pixel_rows(const Conv2dParams& p, const Geometry& g, const float* x, const float* packed_w, const float* bias,
                float* y, const Conv2dEpilogue& epilogue, int threads, bool by_images, size_t xq_floats,
                const Fill& fill) {
  const int64_t mr = g.ptile.mr, nr = g.ptile.nr, howo = p.ho * p.wo, panels = g.mpad / nr;
  KILN_ASSERT(mr <= kMaxPixelTile, "conv2d_direct_f32: a pixel tile of ", mr, " rows");
  const PixelMap pix{howo, p.wo, g.pix_row, g.pix_col};
  // Note [Pixel panels]
  const bool pixel_panels = g.identity && g.taps == 1 && p.groups == 1 && panels > 4;
  // bias, relu, relu6 (or hardswish) and the residual are applied in the kernel's transposed store;
  // anything else in a pass over y afterwards.
  ConvTileEpilogueF32::Act act;
  const bool in_store = store_activation(g, epilogue.activation, epilogue.residual != nullptr, act);
  // Note [Taps that read only padding]: where the epilogue is applied afterwards, over runs of y
  // that tile ranges cover, the tiles keep their rows.
  const PixelOrder order(p, g, mr, in_store && !pixel_panels);
  const int64_t ptiles = order.tiles(), rows = ptiles * mr;
  // Note [Reading x in place]: no X'; the tiles read x's channel planes.
  if (order.in_place()) xq_floats = 0;
  const int64_t xstride = order.in_place() ? p.h * p.w : g.cstride;
  std::vector<int64_t> lanes;  // with pixel panels, a tile's pixels are lanes 0 .. mr - 1 of its panel
  if (pixel_panels) {
    lanes.resize(static_cast<size_t>(mr));
    std::iota(lanes.begin(), lanes.end(), int64_t{0});
    xq_floats = static_cast<size_t>(rows * g.cg);
  }
  // Rows [r0, r1) of X' (of g.hq), or with pixel panels the same share of the pixel tiles: tiles
  // [panel_tile(r0), panel_tile(r1)).
  auto panel_tile = [&](int64_t r) { return ptiles * r / g.hq; };
  auto fill_x = [&](int64_t img, float* xq, int64_t r0, int64_t r1) {
    if (!pixel_panels) return fill(img, xq, r0, r1);
    pack_pixel_panels(mr, x + img * p.c * p.h * p.w, g.cg, g.cstride, pix, panel_tile(r0), panel_tile(r1), xq);
  };
  // Yt holds the partial sums between K slices (one image, one group); one slice needs none.
  const size_t yt_floats = g.kcs < g.cg ? static_cast<size_t>(rows * g.mpad) : 0;
  const size_t per_group = static_cast<size_t>(g.mpad * g.cg * g.taps);
  // Note [Pixel tiles or filter panels outer]: with the panels outer, every panel sweeps the
  // activations of all the images in the chunk, which stream from L3 or memory once they outgrow
  // L2 (a 1x1 256 -> 512 stride-2 projection at batch 8 read its 26 MB of activations 8 times and
  // ran at 1.8x ONNX Runtime's time). When one K slice of the filters fits in half the L2 and an
  // image's activations do not, the pixel tiles go outer instead: each tile's activations stay in
  // L1 across all the panels, which are re-read from L2 (that projection at batch 8: 13.0 -> 9.5
  // ms on one thread; MobileNetV2's 16 -> 96 1x1 at 112 x 112: 8.5 -> 5.2). The images then go
  // one at a time (X' filled just before its tiles run, not the whole chunk's first), and the
  // tiles in blocks whose partial sums in Yt take ~64 KiB, all K slices of a block before the
  // next, so Yt stays in L2 instead of a whole image's (800 KB for 64 channels at 56 x 56) going
  // through L3 once per slice: ResNet-18's 64 -> 64 3x3 at batch 8 on one thread, 3.05-3.15 ->
  // 2.73 ms per image.
  const int64_t slice_bytes = g.kcs * g.taps * g.mpad * 4;
  const int64_t image_bytes = (g.identity ? p.c * p.h * p.w : p.c * g.cstride) * 4;
  const bool tiles_outer = slice_bytes <= (512 << 10) && image_bytes > (512 << 10);
  const int64_t block_tiles = std::max<int64_t>(1, (int64_t{64} << 10) / (mr * g.mpad * 4));
  // Note [Staged pixel stores]: spatial filters only.
  const bool staged = g.pstore != nullptr && g.taps > 1;
  // Filter panels [j0, j1) x pixel tiles [q0, q1) of images [img0, img0 + count): X' at xq
  // (xq_floats apart; nullptr: x itself), Yt at yt (yt_floats apart); group by group, each
  // finished into y before the next.
  auto run = [&](int64_t img0, int64_t count, const float* xq, float* yt, int64_t j0, int64_t j1, int64_t q0,
                 int64_t q1) {
    // Note [Staged pixel stores]: per filter panel, the run of last-slice tiles not yet stored (image
    // m, pixels [y0, y0 + npix) of y, their sums pixel-major from c, in Yt or in `stage`).
    struct Pending {
      int64_t m = 0, y0 = 0, npix = 0;
      float* c = nullptr;
    };
    std::vector<Pending> pending(staged ? static_cast<size_t>(j1 - j0) : 0);
    float* const stage = staged && yt == nullptr ? thread_scratch<float, ScratchSlot::pixel_stage>(
                                                       static_cast<size_t>((j1 - j0) * kStagePixels * nr))
                                                 : nullptr;
    const int64_t ldc = yt != nullptr ? g.mpad : nr;  // between a staged run's pixels
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      const float* pw = packed_w + static_cast<size_t>(grp) * per_group;
      // `out` for channels [ch, ch + n) of image img at pixels from y0 of y: where they go, and
      // their epilogue unless it is applied afterwards. Filled in place: a ConvPixelsOutF32
      // returned by value was copied through the stack in pieces and read back whole, a stalled
      // store forward per tile (5% of a 160 -> 960 1x1 at 7 x 7).
      auto tile_out = [&](ConvPixelsOutF32& out, int64_t img, int64_t jp, int64_t y0, const float* residual,
                          int64_t ldr) {
        const int64_t ch = grp * g.kg + jp * nr;
        out.n = static_cast<int>(std::min<int64_t>(nr, g.kg - jp * nr));
        out.y = y + (img * p.k + ch) * howo + y0;
        out.ldy = howo;
        if (in_store) {
          out.ep.bias = bias != nullptr ? bias + ch : nullptr;
          out.ep.residual = residual;
          out.ep.ldr = ldr;
          out.ep.residual_before_activation = epilogue.residual_before_activation;
          out.ep.act = act;
        }
      };
      auto residual_at = [&](int64_t img, int64_t jp) {
        return epilogue.residual != nullptr ? epilogue.residual + (img * p.k + grp * g.kg + jp * nr) * howo : nullptr;
      };
      // The pending run's pixels into y: all of them, or (`all` false) its whole 16-pixel chunks,
      // the rest staying pending.
      auto flush = [&](int64_t jp, bool all) {
        Pending& pd = pending[static_cast<size_t>(jp - j0)];
        const int64_t n = all ? pd.npix : pd.npix / 16 * 16;
        if (n == 0) return;
        const int64_t img = img0 + pd.m;
        const float* residual = residual_at(img, jp);
        ConvPixelsOutF32 out;
        tile_out(out, img, jp, pd.y0, residual != nullptr ? residual + pd.y0 : nullptr, howo);
        out.m = static_cast<int>(n);
        g.pstore(pd.c, ldc, out);
        pd.y0 += n;
        pd.npix -= n;
        pd.c += n * ldc;
      };
      // One micro-kernel call: the K slice from channel c0, image m, panel jp, pixel tile t.
      auto tile = [&](int64_t c0, int64_t m, int64_t jp, int64_t t) {
        const int64_t kcur = std::min(g.kcs, g.cg - c0);
        const bool last = c0 + kcur == g.cg;
        const int64_t img = img0 + m;
        const float* xi = xq != nullptr ? xq + m * xq_floats : x + img * p.c * p.h * p.w;
        PixelOrder::Tile pt;
        const int64_t* px = pt.x;
        int64_t ldx = xstride;
        if (pixel_panels) {
          xi += (t * g.cg + c0) * mr;
          px = lanes.data();
          ldx = mr;
          pt.m = static_cast<int>(std::min<int64_t>(mr, howo - t * mr));
          pt.y[0] = t * mr;
          for (int i = 1; i < pt.m && staged; ++i) pt.y[i] = pt.y[0] + i;
          pt.taps = static_cast<int>(g.taps);
          pt.tap_off = g.tap_off.data();
        } else {
          order.tile(t, mr, g.taps, pt);
          xi += (grp * g.cg + c0) * xstride;
        }
        float* ym = yt != nullptr ? yt + m * yt_floats + jp * nr + t * mr * g.mpad : nullptr;
        const float* pwt = pw + (c0 * g.mpad + jp * nr * kcur) * g.taps;
        if (!last) {
          g.ptile.ukernel(pt.taps, pt.tap_off, pt.tap_blk, kcur, xi, px, ldx, pwt, ym, g.mpad, c0 != 0, nullptr);
          return;
        }
        // Note [Staged pixel stores]: the sums stay pixel-major for now, unless the tile's pixels
        // lie in more than two runs of y (a column of a plane's border: scattered below).
        int breaks = 0;
        for (int i = 1; i < pt.m && staged; ++i) breaks += pt.y[i] != pt.y[i - 1] + 1 ? 1 : 0;
        if (staged && breaks <= 1) {
          Pending& pd = pending[static_cast<size_t>(jp - j0)];
          // Where the tile's rows go: in Yt where its K slices summed them; in the stage after the
          // pending run's pixels, or at its start when the tile would not fit.
          float* c = ym;
          if (yt == nullptr) {
            float* const first = stage + (jp - j0) * kStagePixels * nr;
            c = pd.npix > 0 ? pd.c + pd.npix * nr : first;
            if (c + mr * nr > first + kStagePixels * nr) {  // the pending pixels (under 16) to the start
              std::memmove(first, pd.c, static_cast<size_t>(pd.npix * nr) * sizeof(float));
              pd.c = first;
              c = first + pd.npix * nr;
            }
          }
          g.ptile.ukernel(pt.taps, pt.tap_off, pt.tap_blk, kcur, xi, px, ldx, pwt, c, ldc, c0 != 0, nullptr);
          // Each run of the tile's pixels extends the pending run when it continues it in y and
          // in the rows, or starts the next one.
          for (int i0 = 0, i1; i0 < pt.m; i0 = i1) {
            for (i1 = i0 + 1; i1 < pt.m && pt.y[i1] == pt.y[i1 - 1] + 1;) ++i1;
            float* ci = c + i0 * ldc;
            if (pd.npix == 0 || pd.m != m || pd.y0 + pd.npix != pt.y[i0] || pd.c + pd.npix * ldc != ci) {
              flush(jp, true);
              pd = Pending{m, pt.y[i0], 0, ci};
            }
            pd.npix += i1 - i0;
          }
          flush(jp, false);
          return;
        }
        // The last slice's tile stores itself: channels jp * nr ... of this image and group,
        // straight into y, or (pixels not in one run: Note [Taps that read only padding]) through
        // `buf` and scattered.
        float buf[kMaxPixelTile * 64], res[kMaxPixelTile * 64];
        const float* residual = residual_at(img, jp);
        ConvPixelsOutF32 out;
        if (pt.contiguous) {
          tile_out(out, img, jp, pt.y[0], residual != nullptr ? residual + pt.y[0] : nullptr, howo);
        } else {
          KILN_ASSERT(nr <= 64, "conv2d_direct_f32: a pixel tile of ", nr, " channels");
          if (residual != nullptr) {  // gathered before the tile's stores, which may overwrite it
            for (int64_t j = 0; j < std::min<int64_t>(nr, g.kg - jp * nr); ++j)
              for (int i = 0; i < pt.m; ++i) res[j * kMaxPixelTile + i] = residual[j * howo + pt.y[i]];
            residual = res;
          }
          tile_out(out, img, jp, 0, residual, kMaxPixelTile);
          out.y = buf;
          out.ldy = kMaxPixelTile;
        }
        out.m = pt.m;
        g.ptile.ukernel(pt.taps, pt.tap_off, pt.tap_blk, kcur, xi, px, ldx, pwt, ym, g.mpad, c0 != 0, &out);
        if (!pt.contiguous) {
          float* yc = y + (img * p.k + grp * g.kg + jp * nr) * howo;
          for (int j = 0; j < out.n; ++j)
            for (int i = 0; i < out.m; ++i) yc[j * howo + pt.y[i]] = buf[j * kMaxPixelTile + i];
        }
      };
      if (tiles_outer) {
        for (int64_t m = 0; m < count; ++m)
          for (int64_t b0 = q0; b0 < q1; b0 += block_tiles)
            for (int64_t c0 = 0; c0 < g.cg; c0 += g.kcs)
              for (int64_t t = b0; t < std::min(q1, b0 + block_tiles); ++t)
                for (int64_t jp = j0; jp < j1; ++jp) tile(c0, m, jp, t);
      } else {
        for (int64_t c0 = 0; c0 < g.cg; c0 += g.kcs)
          for (int64_t jp = j0; jp < j1; ++jp)
            for (int64_t m = 0; m < count; ++m)
              for (int64_t t = q0; t < q1; ++t) tile(c0, m, jp, t);
      }
      for (int64_t jp = j0; jp < j1 && staged; ++jp) flush(jp, true);
      if (in_store) continue;
      // Channels [ch0, ch1) of each image: the epilogue the store could not apply.
      const int64_t ch0 = j0 * nr, ch1 = std::min(g.kg, j1 * nr), col0 = q0 * mr, col1 = std::min(howo, q1 * mr);
      for (int64_t m = 0; m < count; ++m) {
        const int64_t img = img0 + m;
        gemm_epilogue_f32(group_epilogue(p, bias, epilogue, img, grp), y + (img * p.k + grp * g.kg + ch0) * howo + col0,
                          howo, ch0, col0, ch1 - ch0, col1 - col0);
      }
    }
  };
  if (threads <= 1 || by_images) {
    image_chunks(p.n, g, xq_floats, yt_floats, per_group * static_cast<size_t>(p.groups), fill_x,
                 [&](int64_t img0, int64_t count, const float* xq, float* yt) {
      run(img0, count, xq, yt, 0, panels, 0, ptiles);
    }, tiles_outer);
    return;
  }
  // One image at a time, split between the threads by filter panels (each reads all of X') or
  // by pixel tiles (each reads all the filters and mostly the rows of X' it filled itself):
  // duplicate the smaller operand unless that split is much less even (as the column tiles do).
  // Note [Panels and tiles in one order]: when neither split is even (a 7x7 plane's 7 tiles and
  // 160 channels' 5 panels between 2 threads: 4/3 and 3/2), the (panel, tile) pairs are split in
  // panel-major order instead (35: 18/17), each thread taking whole panels and at most two partial
  // ones (MobileNetV2's 960 -> 160 projection, ResNet-50's last stage: 11 panels).
  const double bp = balance(panels, threads), bq = balance(ptiles, threads);
  const bool by_pairs = std::max(bp, bq) < 0.95 && balance(panels * ptiles, threads) > std::max(bp, bq);
  const bool by_pixels = !by_pairs && (static_cast<double>(p.k) * static_cast<double>(g.cg * g.taps) <=
                                               static_cast<double>(p.c) * static_cast<double>(g.cstride)
                                           ? bq >= 0.75 * bp
                                           : bq > bp / 0.75);
  float* yt = yt_floats ? thread_scratch<float, ScratchSlot::direct_conv_y>(yt_floats) : nullptr;
  float* xq = xq_floats ? thread_scratch<float, ScratchSlot::direct_conv_x>(xq_floats) : nullptr;
  // Note [Shares taken, not dealt]: the split's units (pixel tiles, panels, or (panel, tile)
  // pairs in panel-major order) go in chunks that shrink as the queue empties, from a queue both
  // ends of which are taken (Note [Chunks that shrink] in core/chunks.h). With fixed halves one
  // thread waited for the other: on 2 shared cores, ResNet-18 at batch 1, the two threads' busy
  // times differed by 3-20% from run to run, either way round. Each thread starts on the part a
  // fixed split would give it (the rows of X' it fills itself: Note [X' filled in the compute
  // region]), and only the last chunks cross over.
  const int64_t units = by_pairs ? panels * ptiles : by_pixels ? ptiles : panels;
  struct Share {
    int64_t j0, j1, q0, q1;
  };
  // Units [u0, u1) as at most three rectangles of filter panels [j0, j1) x pixel tiles [q0, q1).
  auto rectangles = [&](int64_t u0, int64_t u1, Share out[3]) {
    if (by_pixels) {
      out[0] = {0, panels, u0, u1};
      return 1;
    }
    if (!by_pairs) {
      out[0] = {u0, u1, 0, ptiles};
      return 1;
    }
    int count = 0;  // whole panels and at most two partial ones
    for (int64_t u = u0; u < u1;) {
      const int64_t jp = u / ptiles, q = u % ptiles;
      const int64_t whole = q == 0 ? (u1 - u) / ptiles : 0;
      out[count] = whole > 0 ? Share{jp, jp + whole, 0, ptiles} : Share{jp, jp + 1, q, std::min(ptiles, q + u1 - u)};
      u += (out[count].j1 - out[count].j0) * (out[count].q1 - out[count].q0);
      ++count;
    }
    return count;
  };
  // Note [X' filled in the compute region]: X' is cut into one band of rows per thread (with
  // pixel panels, of pixel tiles), and each thread fills its own band first, then starts on its
  // chunks, which mostly read its own band. Before a chunk that reads a band it did not fill, a
  // thread fills that band itself if nobody has claimed it, or waits for the thread filling it
  // (which is running: a claimed band is being filled, so a region run inline by one thread, band
  // after band, never waits). This took the place of a parallel region of its own for the fill,
  // whose barrier cost each padded layer a hand-off and the wait for the slower filler: ResNet-18
  // at batch 1 on 2 threads, 18 such regions a run (bench/RESULTS.md, 2026-12-04 19:45 - 20:45).
  std::unique_ptr<std::atomic<int>[]> band_state(xq != nullptr ? new std::atomic<int>[static_cast<size_t>(threads)]
                                                               : nullptr);
  const int64_t bands = threads;
  // The X' rows of band b, or with pixel panels its pixel tiles.
  auto band_range = [&](int64_t b) {
    const int64_t r0 = g.hq * b / bands, r1 = g.hq * (b + 1) / bands;
    return pixel_panels ? std::make_pair(panel_tile(r0), panel_tile(r1)) : std::make_pair(r0, r1);
  };
  enum : int { kUnfilled, kFilling, kFilled };
  auto ensure_band = [&](int64_t img, int64_t b) {
    std::atomic<int>& st = band_state[static_cast<size_t>(b)];
    int state = st.load(std::memory_order_acquire);
    if (state == kFilled) return;
    if (state == kUnfilled && st.compare_exchange_strong(state, kFilling, std::memory_order_acq_rel)) {
      struct Done {  // marked filled even if the fill throws, so no thread waits forever
        std::atomic<int>& st;
        ~Done() { st.store(kFilled, std::memory_order_release); }
      } done{st};
      fill_x(img, xq, g.hq * b / bands, g.hq * (b + 1) / bands);
      return;
    }
    for (int spin = 0; st.load(std::memory_order_acquire) != kFilled; ++spin)
      if (spin > 1000) std::this_thread::yield();
  };
  // Every band that pixel tiles [q0, q1) read.
  auto ensure_tiles = [&](int64_t img, int64_t q0, int64_t q1) {
    int64_t lo = q0, hi = q1;  // with pixel panels the bands are tile ranges
    if (!pixel_panels) {
      const auto [oh0, oh1] = order.rows(q0, q1, mr);
      lo = oh0 * g.rows_per_out;
      hi = std::min(g.hq, oh1 * g.rows_per_out + g.shift_h + 1);
    }
    for (int64_t b = 0; b < bands; ++b) {
      const auto [b0, b1] = band_range(b);
      if (b0 < hi && lo < b1) ensure_band(img, b);
    }
  };
  for (int64_t img = 0; img < p.n; ++img) {
    if (xq != nullptr)
      for (int64_t b = 0; b < bands; ++b) band_state[static_cast<size_t>(b)].store(kUnfilled, std::memory_order_relaxed);
    TwoEndedChunks queue(units, 1, threads, 16);
    parallel_run(threads, [&](int t, int) {
      if (xq != nullptr && t < bands) ensure_band(img, t);
      Share rects[3];
      for (int64_t u0, u1; queue.take(t, u0, u1);) {
        const int count = rectangles(u0, u1, rects);
        for (int i = 0; i < count; ++i) {
          if (xq != nullptr) ensure_tiles(img, rects[i].q0, rects[i].q1);
          run(img, 1, xq, yt, rects[i].j0, rects[i].j1, rects[i].q0, rects[i].q1);
        }
      }
    });
  }
}

}  // namespace

bool conv2d_direct_supported(const Conv2dParams& p) {
  return gemm_kernel_f32(active_isa()).taps[0].ukernel != nullptr && !is_depthwise(p) && p.c / p.groups > 0 &&
         p.k / p.groups > 0 && p.r > 0 && p.s > 0;
}

DirectConvLayout conv2d_direct_layout(const Conv2dParams& p) {
  const Geometry g = geometry(p, gemm_kernel_f32(active_isa()));
  return {static_cast<int>(g.panel), g.pixels};
}

DirectConvTapPairs conv2d_direct_tap_pairs(const Conv2dParams& p) {
  const Geometry g = geometry(p, gemm_kernel_f32(active_isa()));
  if (!g.pixels) return {};
  const int64_t mr = g.ptile.mr;
  const PixelOrder order(p, g, mr, true);
  DirectConvTapPairs pairs{0, (p.ho * p.wo + mr - 1) / mr * g.taps, order.in_place()};
  PixelOrder::Tile pt;
  for (int64_t t = 0; t < order.tiles(); ++t) {
    order.tile(t, mr, g.taps, pt);
    pairs.run += pt.taps;
  }
  return pairs;
}

int conv2d_direct_tile_rows(const Conv2dParams& p) { return conv2d_direct_layout(p).tile_rows; }

bool conv2d_direct_pixel_rows(const Conv2dParams& p) { return conv2d_direct_layout(p).pixel_rows; }

DirectConvTilingOverride::DirectConvTilingOverride(DirectConvTiling t)
    : saved_(static_cast<DirectConvTiling>(g_forced_tiling.exchange(static_cast<int>(t)))) {}

DirectConvTilingOverride::~DirectConvTilingOverride() { g_forced_tiling.store(static_cast<int>(saved_)); }

size_t conv2d_direct_packed_weight_f32_floats(const Conv2dParams& p) {
  const Geometry g = geometry(p, gemm_kernel_f32(active_isa()));
  return static_cast<size_t>(p.groups * g.mpad * g.cg * g.taps);
}

void pack_conv2d_direct_weight_f32(const Conv2dParams& p, const float* w, float* out) {
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  KILN_ASSERT(conv2d_direct_supported(p), "pack_conv2d_direct_weight_f32: no direct kernel for this ISA and shape");
  pack_weights(p, geometry(p, kk), w, out);
}

void conv2d_direct_f32(const Conv2dParams& p, const float* x, const float* w, const float* packed_w, const float* bias,
                       float* y, const Conv2dEpilogue& epilogue) {
  const GemmKernelF32& kk = gemm_kernel_f32(active_isa());
  KILN_ASSERT(conv2d_direct_supported(p), "conv2d_direct_f32: unsupported convolution for the active ISA");
  Geometry g = geometry(p, kk);
  plan_halo(g, p, epilogue);
  if (packed_w == nullptr) {
    float* buf = thread_scratch<float, ScratchSlot::packed_weight>(conv2d_direct_packed_weight_f32_floats(p));
    pack_weights(p, g, w, buf);
    packed_w = buf;
  }
  const int64_t howo = p.ho * p.wo;
  const size_t xq_floats = g.identity ? 0 : static_cast<size_t>(p.c * g.cstride);
  const size_t yq_floats = g.wq == p.wo || g.halo ? 0 : static_cast<size_t>(p.k * g.nq);
  const size_t per_group = static_cast<size_t>(g.mpad * g.cg * g.taps);

  // A worker's share of one image: filter rows [i0, i1) x product columns [j0, j1), which read the
  // rows [r0, r1) of each plane of X' (the whole image: everything).
  struct Share {
    int64_t i0, i1, j0, j1, r0, r1;
  };
  const int64_t mr = g.tile.mr, nr = g.tile.nr, col_tiles = (g.nq + nr - 1) / nr, row_tiles = g.mpad / mr;
  // Splitting by columns makes every thread read all the filters, by rows all of X': duplicate the
  // smaller one unless that split is much less even (at batch 1 a 7x7 layer's 512 x 4608 filters
  // read by both threads made it memory-bound).
  auto share = [&](int part, int parts) {
    if (parts <= 1) return Share{0, g.kg, 0, g.nq, 0, g.hq};
    const double bc = balance(col_tiles, parts), br = balance(row_tiles, parts);
    const bool by_cols = g.kg <= g.nq ? bc >= 0.75 * br : bc > br / 0.75;
    if (!by_cols) {
      const int64_t t0 = row_tiles * part / parts, t1 = row_tiles * (part + 1) / parts;
      return Share{t0 * mr, std::min(g.kg, t1 * mr), 0, t0 < t1 ? g.nq : 0, 0, g.hq};
    }
    const int64_t t0 = col_tiles * part / parts, t1 = col_tiles * (part + 1) / parts;
    const int64_t j0 = t0 * nr, j1 = std::min(g.nq, t1 * nr);
    if (j0 >= j1) return Share{0, g.kg, 0, 0, 0, 0};
    // Column q reads plane rows q / Wq up to (q + the largest in-plane tap offset) / Wq.
    return Share{0, g.kg, j0, j1, j0 / g.wq, std::min(g.hq, (j1 - 1) / g.wq + g.shift_h + 2)};
  };
  // Images [img0, img0 + count), X' and product planes at xq, yq (xq_floats, yq_floats apart; xq
  // == nullptr: x itself), this worker's share of each.
  auto images = [&](int64_t img0, int64_t count, const float* xq, float* yq, const Share& sh) {
    if (sh.i0 >= sh.i1 || sh.j0 >= sh.j1) return;
    std::vector<GroupRun> runs;
    for (int64_t grp = 0; grp < p.groups; ++grp) {
      runs.clear();
      for (int64_t m = 0; m < count; ++m) {
        const int64_t img = img0 + m;
        const float* xi = xq != nullptr ? xq + m * xq_floats : x + img * p.c * p.h * p.w;
        GroupRun run{&p, &g, xi + grp * g.cg * g.cstride, packed_w + static_cast<size_t>(grp) * per_group,
                     nullptr, y + (img * p.k + grp * g.kg) * howo, {}};
        run.yq = yq == nullptr ? run.y : yq + m * yq_floats + grp * g.kg * g.nq;
        run.ep = group_epilogue(p, bias, epilogue, img, grp);
        run.plan_epilogue();
        runs.push_back(run);
      }
      run_images(runs, sh.i0, sh.i1, sh.j0, sh.j1);
    }
  };
  // Rows [r0, r1) of every plane of image img's X'.
  const WindowKernelsF32 wk = window_kernels_f32(active_isa());
  // A plain X' is the polyphase layout of a unit-stride convolution (one phase).
  Conv2dParams fp = p;
  if (g.plain) fp.stride_h = fp.stride_w = 1;
  const std::vector<PhaseSpan> spans = phase_spans(fp, g);
  auto fill = [&](int64_t img, float* xq, int64_t r0, int64_t r1) {
    std::vector<float> split(fp.stride_w == 2 ? static_cast<size_t>(2 * (p.w / 2 + 1)) : 0);
    for (int64_t c = 0; c < p.c; ++c)
      fill_rows(fp, g, spans.data(), x + (img * p.c + c) * p.h * p.w, xq + c * g.cstride, r0, r1, wk, split.data());
  };

  int threads = in_parallel_region() ? 1 : get_num_threads();
  if (2 * p.k * g.cg * g.taps * g.nq < kSerialFlops) threads = 1;
  const bool by_images = threads > 1 && p.n >= threads && (p.n % threads == 0 || p.n >= 4 * threads);
  if (g.pixels) return pixel_rows(p, g, x, packed_w, bias, y, epilogue, threads, by_images, xq_floats, fill);
  if (threads <= 1 || by_images) {
    image_chunks(p.n, g, xq_floats, yq_floats, per_group * static_cast<size_t>(p.groups), fill,
                 [&](int64_t img0, int64_t count, const float* xq, float* yq) {
      images(img0, count, xq, yq, share(0, 1));
    });
    return;
  }
  // One image at a time across the threads, in one parallel region each: every worker copies the
  // rows of X' its share reads into its own buffer (a halo row may be copied twice), so no worker
  // waits for another's copy.
  float* yq = yq_floats ? thread_scratch<float, ScratchSlot::direct_conv_y>(yq_floats) : nullptr;
  for (int64_t img = 0; img < p.n; ++img) {
    parallel_run(threads, [&](int t, int nt) {
      const Share sh = share(t, nt);
      float* xq = xq_floats ? thread_scratch<float, ScratchSlot::direct_conv_x>(xq_floats) : nullptr;
      if (xq != nullptr) fill(img, xq, sh.r0, sh.r1);
      images(img, 1, xq, yq, sh);
    });
  }
}

}  // namespace kiln::kernels::cpu
