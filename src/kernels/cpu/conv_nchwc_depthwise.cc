// The blocked depthwise convolution behind kernels/cpu/conv_nchwc.h (Note [Blocked depthwise]).
#include "kernels/cpu/conv_nchwc.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/cpu/conv_nchwc_common.h"
#include "kernels/cpu/isa.h"
#include "kernels/cpu/scratch.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [Blocked depthwise]
// A depthwise convolution on blocked channels is 16 independent lanes: each output vector is the
// sum over taps of an input vector times the tap's 16 filters, with nothing to broadcast. Rows of
// the output plane (image, block, output row) are the work items; a row's interior columns (every
// tap inside the input) run 8 outputs at a time in registers over the taps whose input row exists,
// its border columns one at a time over theirs: no padded copy of the input (which, for MobileNetV2's
// stride-2 layers, was 4x the output and made them 2x ONNX Runtime's time). Filters are packed
// [C/16][tap][16] (zeros past C).
size_t depthwise_nchwc_packed_weight_f32_floats(const Conv2dParams& p) {
  return static_cast<size_t>(nchwc_blocks(p.c) * p.r * p.s * kChannelBlock);
}

void pack_depthwise_nchwc_weight_f32(const Conv2dParams& p, const float* w, float* out) {
  const int64_t taps = p.r * p.s;
  for (int64_t blk = 0; blk < nchwc_blocks(p.c); ++blk)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t l = 0; l < kChannelBlock; ++l) {
        const int64_t c = blk * kChannelBlock + l;
        *out++ = c < p.c ? w[c * taps + t] : 0.0f;
      }
}

// Note [Kernel rows in registers]
// Along a row at stride 1, output o's tap (r, s) reads the same input vector as output o + 1's tap
// (r, s - 1): the row kernel loaded each input vector once per tap that reads it, S times (9 loads
// for 8 multiply-adds a tap). For 3- and 5-wide windows at stride 1 the interior runs kernel row by
// kernel row instead: the row's N + S - 1 input vectors loaded once into registers (12 for 8
// outputs of a 5-wide window), then its S taps. MNASNet's depthwise layers at batch 1 on one thread,
// alternating (`kiln bench --profile`): 5 x 5 at 28 x 28 0.086-0.089 -> 0.072-0.077 ms, 3 x 3 at
// 112 x 112 0.172-0.173 -> 0.158-0.165, at 56 x 56 0.083-0.087 -> 0.080-0.081; whole models within
// noise (MNASNet at batch 8 on two threads 29.52-29.59 -> 29.16-29.54). The bands of narrow planes
// (Note [Small depthwise planes]) run the same kernel a band's output row at a time, its rest after
// 8 outputs in one step (a 7-wide row: 11 input loads a kernel row for 35 multiply-adds, where 8
// outputs across rows loaded an input vector per multiply-add): MNASNet at batch 1 on one thread,
// alternating libraries, 3 rounds, 5 x 5 at 14 x 14 0.095-0.099 -> 0.059-0.072 ms, at 7 x 7
// 0.063-0.067 -> 0.044-0.053, 3 x 3 at 7 x 7 0.036-0.038 -> 0.029-0.038; the engine 7.62-8.63 ->
// 7.50-7.62 ms, MobileNetV2, V3-Large and EfficientNet-B0 within noise. At stride 2 across,
// output o's tap s reads input column 2 o + s: a kernel row's 2N + S - 2 inputs serve N outputs (19 loads for
// 40 multiply-adds at N = 8, S = 5, against 40). With both (bands and stride 2), per-layer minima
// of 5 alternations at batch 1 on one thread (`kiln bench --profile`), against the library before:
// MNASNet's layers sum to 7.66 -> 7.43 ms (its 3 x 3 stride-2 layer from 112 x 112 0.067 ->
// 0.052), MobileNetV3-Large's 6.16 -> 6.06; MobileNetV2's stride-2 layers unchanged (0.121, 0.048,
// 0.019-0.020, 0.027-0.029).

namespace {

// Planes narrower than this whose rows have fewer than 8 interior columns, or whose window is
// larger than 3 x 3, run in bands (Note [Small depthwise planes]).
constexpr int64_t kNarrowDepthwise = 16;

// Whether rows run kernel row by kernel row (Note [Kernel rows in registers]): AVX-512, a 3- or
// 5-wide window read at stride 1 or 2 without dilation across, or a 7- or 9-wide one at stride 1
// (ConvNeXt's 7 x 7, ConvMixer's 9 x 9: through the row kernel each output loaded an input a tap, and
// ConvMixer-768/32's layers took 0.46 ms against ONNX Runtime's 0.19).
bool kernel_rows(const Conv2dParams& p) {
  if (active_isa() != Isa::avx512 || p.dil_w != 1) return false;
  const bool narrow = p.s == 3 || p.s == 5, wide = p.s == 7 || p.s == 9;
  return ((p.stride_w == 1 || p.stride_w == 2) && narrow) || (p.stride_w == 1 && wide);
}

// `count` outputs of the blocked depthwise convolution, for any ISA: output o reads from x offset
// x_at(o) and is stored (its residual read) y_at(o) floats into y.
template <class XAt, class YAt>
void depthwise_nchwc_outputs_scalar(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x,
                                    const float* w, float* y, int64_t count, const ConvTileEpilogueF32& ep, XAt x_at,
                                    YAt y_at) {
  for (int64_t o = 0; o < count; ++o)
    for (int64_t l = 0; l < kChannelBlock; ++l) {
      float acc = ep.bias[l];
      for (int t = 0; t < taps; ++t) acc += x[x_at(o) + tap_off[t] + l] * w[tap_w[t] * kChannelBlock + l];
      const int64_t at = y_at(o) + l;
      y[at] = finish_scalar(acc, ep.residual != nullptr ? ep.residual + at : nullptr, ep);
    }
}

// depthwise_nchwc_row_avx512's contract, for any ISA.
void depthwise_nchwc_row_scalar(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x, int64_t xstep,
                                const float* w, float* y, int64_t count, const ConvTileEpilogueF32& ep) {
  depthwise_nchwc_outputs_scalar(
      taps, tap_off, tap_w, x, w, y, count, ep, [&](int64_t o) { return o * xstep; },
      [](int64_t o) { return o * kChannelBlock; });
}

// depthwise_nchwc_pixels_avx512's contract, for any ISA.
void depthwise_nchwc_pixels_scalar(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x,
                                   const int64_t* xoff, const float* w, float* y, const int64_t* yoff, int64_t count,
                                   const ConvTileEpilogueF32& ep) {
  depthwise_nchwc_outputs_scalar(
      taps, tap_off, tap_w, x, w, y, count, ep, [&](int64_t o) { return xoff[o]; }, [&](int64_t o) { return yoff[o]; });
}

// Note [Small depthwise planes]
// Row by row (Note [Blocked depthwise]), a plane under 16 columns wide runs most of its outputs one
// at a time: a 7 x 7 plane under a 5 x 5 window has 3 interior columns and 4 border ones, each
// output loading all 25 filter vectors again, and each row gathering its taps again. MobileNetV3's
// 5 x 5 layers ran blocked at 0.040 ms against 0.019-0.024 in NCHW. So a narrow plane goes in
// bands of output rows (enough bands for 4 items a thread), each band's input rows copied into a
// zero-bordered scratch (an L1-sized copy for a 7 x 7 or 14 x 14 plane), where every output has
// every tap at the same offsets and outputs run 8 at a time across rows (a row at a time, kernel
// row by kernel row, where Note [Kernel rows in registers] applies): those layers 0.012-0.022 ms,
// MobileNetV2's 3 x 3 layers at 7 x 7 0.021-0.023 -> 0.015 (batch 1, 2 threads). Where a row
// has 8 or more interior columns and a 3 x 3 window, rows run as before: for MobileNetV2's 3 x 3
// stride-2 layer from 28 x 28 to 14 x 14 the copy is 4x the output, and it ran 0.015 -> 0.024 ms in
// bands. So do larger windows at stride 2 where rows run kernel row by kernel row (Note [Kernel rows
// in registers]): MNASNet's 5 x 5 from 28 x 28 to 14 x 14, 0.062 -> 0.053 ms (minima of 4
// alternations, batch 1, one thread); at stride 1 the bands stay faster (its 5 x 5 layers at
// 14 x 14 0.060-0.062 in bands, 0.11 by rows).
void depthwise_nchwc_narrow(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias, float* y,
                            const Conv2dEpilogue& epilogue, const ConvTileEpilogueF32& ep) {
  const int64_t cb = nchwc_blocks(p.c), planes = p.n * cb, taps = p.r * p.s;
  const int64_t xplane = p.h * p.w * kChannelBlock, yplane = p.ho * p.wo * kChannelBlock;
  // Columns any output reads, from column -pad_left on; a band's input rows.
  const int64_t wp = (p.wo - 1) * p.stride_w + (p.s - 1) * p.dil_w + 1;
  const int64_t want = items_wanted();
  const int64_t split = std::min(p.ho, (want + planes - 1) / planes);  // bands a plane, at most
  const int64_t band = (p.ho + split - 1) / split, bands = (p.ho + band - 1) / band;  // rows a band; bands a plane
  const int64_t rows_max = (band - 1) * p.stride_h + (p.r - 1) * p.dil_h + 1;
  std::vector<int64_t> tap_off(static_cast<size_t>(taps));
  std::vector<int32_t> tap_w(static_cast<size_t>(taps));
  for (int64_t r = 0; r < p.r; ++r)
    for (int64_t s = 0; s < p.s; ++s) {
      tap_off[static_cast<size_t>(r * p.s + s)] = (r * p.dil_h * wp + s * p.dil_w) * kChannelBlock;
      tap_w[static_cast<size_t>(r * p.s + s)] = static_cast<int32_t>(r * p.s + s);
    }
  const auto kernel = active_isa() == Isa::avx512 ? depthwise_nchwc_pixels_avx512 : depthwise_nchwc_pixels_scalar;
  // Rows of a 3- or 5-wide window at stride 1 or 2 keep a kernel row's inputs in registers: kernel
  // row r of every output row at the row's first input pixel + row_off[r], its filters row_w[r].
  const bool by_kernel_rows = kernel_rows(p);
  std::vector<int64_t> row_off(static_cast<size_t>(p.r));
  std::vector<int32_t> row_w(static_cast<size_t>(p.r));
  for (int64_t r = 0; r < p.r; ++r) {
    row_off[static_cast<size_t>(r)] = r * p.dil_h * wp * kChannelBlock;
    row_w[static_cast<size_t>(r)] = static_cast<int32_t>(r * p.s);
  }
  // Input columns [c0, c1) of the scratch hold x's columns [0, W); the rest are padding.
  const int64_t c0 = std::min(wp, p.pad_left), c1 = std::min(wp, p.pad_left + p.w);
  parallel_for(0, planes * bands, 1, [&](int64_t i0, int64_t i1) {
    float* buf =
        thread_scratch<float, ScratchSlot::depthwise_nchwc_band>(static_cast<size_t>(rows_max * wp * kChannelBlock));
    int64_t xoff[8], yoff[8];
    for (int64_t item = i0; item < i1; ++item) {
      const int64_t nb = item / bands, oh0 = item % bands * band, oh1 = std::min(p.ho, oh0 + band);
      const int64_t rows = (oh1 - oh0 - 1) * p.stride_h + (p.r - 1) * p.dil_h + 1, ih0 = oh0 * p.stride_h - p.pad_top;
      const float* xp = x + nb * xplane;
      for (int64_t r = 0; r < rows; ++r) {
        float* dst = buf + r * wp * kChannelBlock;
        const int64_t ih = ih0 + r;
        if (ih < 0 || ih >= p.h) {
          std::memset(dst, 0, static_cast<size_t>(wp * kChannelBlock) * sizeof(float));
          continue;
        }
        std::memset(dst, 0, static_cast<size_t>(c0 * kChannelBlock) * sizeof(float));
        if (c1 > c0)
          std::memcpy(dst + c0 * kChannelBlock, xp + ih * p.w * kChannelBlock,
                      static_cast<size_t>((c1 - c0) * kChannelBlock) * sizeof(float));
        std::memset(dst + c1 * kChannelBlock, 0, static_cast<size_t>((wp - c1) * kChannelBlock) * sizeof(float));
      }
      ConvTileEpilogueF32 e = ep;
      e.bias = bias + nb % cb * kChannelBlock;
      e.residual = epilogue.residual != nullptr ? epilogue.residual + nb * yplane : nullptr;
      if (by_kernel_rows) {
        // Note [Kernel rows in registers], a band's output row at a time.
        for (int64_t oh = oh0; oh < oh1; ++oh) {
          const int64_t at = nb * yplane + oh * p.wo * kChannelBlock;
          e.residual = epilogue.residual != nullptr ? epilogue.residual + at : nullptr;
          depthwise_nchwc_kernel_rows_avx512(static_cast<int>(p.s), static_cast<int>(p.stride_w), static_cast<int>(p.r),
                                             row_off.data(), row_w.data(),
                                             buf + (oh - oh0) * p.stride_h * wp * kChannelBlock,
                                             packed_w + nb % cb * taps * kChannelBlock, y + at, p.wo, e);
        }
        continue;
      }
      const int64_t count = (oh1 - oh0) * p.wo;
      for (int64_t k = 0; k < count; k += 8) {
        const int64_t m = std::min<int64_t>(8, count - k);
        for (int64_t i = 0; i < m; ++i) {
          const int64_t oh = oh0 + (k + i) / p.wo, ow = (k + i) % p.wo;
          xoff[i] = ((oh - oh0) * p.stride_h * wp + ow * p.stride_w) * kChannelBlock;
          yoff[i] = (oh * p.wo + ow) * kChannelBlock;
        }
        kernel(static_cast<int>(taps), tap_off.data(), tap_w.data(), buf, xoff,
               packed_w + nb % cb * taps * kChannelBlock, y + nb * yplane, yoff, m, e);
      }
    }
  });
}

}  // namespace

void depthwise_conv2d_nchwc_f32(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias,
                                float* y, const Conv2dEpilogue& epilogue) {
  KILN_CHECK(p.groups == p.c && p.k == p.c, "depthwise_conv2d_nchwc_f32: needs groups = C = K, got C=", p.c,
             " K=", p.k, " groups=", p.groups);
  const int64_t cb = nchwc_blocks(p.c), taps = p.r * p.s, plane = p.h * p.w * kChannelBlock;
  std::vector<float> bias_storage;
  bias = padded_bias(bias, p.k, bias_storage);
  // Columns whose every tap lies inside the input: ow in [lo, hi).
  const auto [lo, hi] = nchwc_inside_columns(p.wo, p.stride_w, p.pad_left, p.dil_w, p.w, p.s);
  ConvTileEpilogueF32 ep;
  ep.act = blocked_act(epilogue.activation);
  ep.residual_before_activation = epilogue.residual_before_activation;
  // Note [Small depthwise planes]; a wide window at stride 2 runs rows by kernel rows unbanded.
  const bool by_kernel_rows = kernel_rows(p);
  if (p.wo < kNarrowDepthwise && (hi - lo < 8 || (taps > 9 && !(by_kernel_rows && p.stride_w == 2)))) {
    depthwise_nchwc_narrow(p, x, packed_w, bias, y, epilogue, ep);
    return;
  }
  const auto row_kernel = active_isa() == Isa::avx512 ? depthwise_nchwc_row_avx512 : depthwise_nchwc_row_scalar;
  const int64_t xstep = p.stride_w * kChannelBlock, orow = p.wo * kChannelBlock;
  // Columns with a tap outside the input (each its own list), then the interior run (one list).
  std::vector<int64_t> edge;
  for (int64_t ow = 0; ow < p.wo; ++ow)
    if (!(ow >= lo && ow < hi)) edge.push_back(ow);
  const size_t lists = edge.size() + 1;
  // Note [Row borders as zeros]
  // Row by row, a padded layer's border columns each had their own tap list and a call of the row
  // kernel for one output (two a row for a 3x3 window), and the tap lists were rebuilt for the top
  // and bottom rows: 16% of the depthwise layers' samples outside the kernels in MobileNetV2 at
  // batch 1. At stride 1, where rows run kernel row by kernel row (Note [Kernel rows in
  // registers]), a whole output row is now one call over the kernel rows inside the input, its
  // steps of 8 outputs loading zeros for the columns outside it. Per-layer minima of 4-5
  // alternations, one thread, batch 1: MobileNetV2's 3x3 at 56 x 56 0.076-0.079 -> 0.066-0.067 ms
  // (112 x 112 even); the two libraries alternating, medians: MobileNetV2 3.26-3.28 -> 3.19 ms on one
  // thread, 1.77-1.82 -> 1.71-1.72 on two, MNASNet 1.86-1.87 -> 1.82-1.84 on two. At stride 2 (from
  // 112 x 112 to 56 x 56) the same was slower, 0.072 -> 0.080, and rows keep the lists. But a
  // 5-wide window at stride 2 has two border columns a row of 20 taps each, one output at a time
  // (a chain of dependent multiply-adds), and a short rest after the steps of 8 (26 interior
  // columns of 28: 8 + 8 + 8 + 2): padded, 28 = 8 + 8 + 8 + 4 and no border calls. Per-layer
  // minima of 5 alternations, one thread, batch 1, blocked chains (1x1, depthwise, 1x1):
  // MobileNetV4-Medium's 5 x 5 from 56 x 56 to 28 x 28 on 192 channels 0.073 -> 0.055 ms (ONNX
  // Runtime 0.054), from 28 x 28 to 14 x 14 on 480 0.059 -> 0.043; 3 x 3 at stride 2 padded ran
  // 4-5% slower (from 112 x 112 on 96 channels, from 56 x 56 on 144) and keeps the lists.
  const bool padded_rows = by_kernel_rows && (p.stride_w == 1 || p.s == 5);
  // Note [One image split by rows]
  // The pool hands each thread its own share of the units (Note [Chunks on lines of their own] in
  // core/chunks.h), so what a thread gets follows the order of the units. Blocks outermost, one
  // image's depthwise layer split its channels between the threads while the 1x1 layers around it
  // split their pixels (or their output channels), and half of each layer's input had been written
  // by the other core. The cores of this VM are at times ~90 ns apart for a round trip and at times
  // ~350-400 or more (the host moves them, for minutes at a time), and at the far distance every
  // line that crosses is expensive. So one image runs its rows in as many bands as there are
  // threads, outermost (then blocks, then a band's rows), and its other blocked convolutions whose
  // data stays in L2 go chunk by chunk (Note [Panels inside or outside] in conv_nchwc.cc): the top rows stay on one
  // core and the bottom rows on the other through a run of layers, but for a few rows either side
  // of the middle. Batch 1 on two threads, medians of runs alternating with the old order, by the
  // distance measured before and after each run: MNASNet 1.740 -> 1.737 ms near (30 runs), 2.55 ->
  // 2.42 far (19), 6.67 -> 6.44 in a stretch where everything ran 4x slower (51); MobileNetV2 1.667
  // -> 1.662 near, 6.73 -> 6.51 in the slow stretch. (On one thread, where only the order of the
  // convolutions changes, MNASNet 3.30-3.40 -> 3.23-3.33 ms.)
  const int64_t threads = get_num_threads(), band = (p.ho + threads - 1) / threads;
  const bool by_bands = p.n == 1 && threads > 1;
  parallel_for(0, p.n * cb * p.ho, 4, [&](int64_t r0, int64_t r1) {
    // Note [Tap lists per row pattern]
    // A row's tap lists depend only on which kernel rows fall inside the input ([kr0, kr1)) when
    // their offsets count from the input row of kernel row kr0: every interior row shares one set,
    // and the lists are built again only where that range changes (the top and bottom rows).
    // Built for every row and column (a double loop over the window each), they cost 28% of the
    // row kernel's own time in MobileNetV3-Large at batch 1 (perf), most on its 5 x 5 layers at
    // 28 x 28 with four border columns a row: those ran 0.057-0.065 ms, now 0.040-0.053.
    // (None where rows run as padded rows, Note [Row borders as zeros].)
    const size_t listed = padded_rows ? 0 : lists;
    std::vector<int64_t> off(listed * static_cast<size_t>(taps));
    std::vector<int32_t> widx(listed * static_cast<size_t>(taps));
    std::vector<int> count(listed);
    std::vector<int64_t> row_off(static_cast<size_t>(p.r));
    std::vector<int32_t> row_w(static_cast<size_t>(p.r));
    int64_t have0 = -1, have1 = -1;
    for (int64_t unit = r0; unit < r1; ++unit) {
      int64_t row = unit;  // (image * blocks + block) * Ho + output row
      if (by_bands) {      // units in (band, block, row in the band) order
        const int64_t b0 = unit / (band * cb) * band, rows = std::min(band, p.ho - b0), at = unit - b0 * cb;
        row = at / rows * p.ho + b0 + at % rows;
      }
      const int64_t nb = row / p.ho, oh = row % p.ho, blk = nb % cb;
      int64_t kr0 = 0, kr1 = p.r;
      while (kr0 < kr1 && oh * p.stride_h - p.pad_top + kr0 * p.dil_h < 0) ++kr0;
      while (kr1 > kr0 && oh * p.stride_h - p.pad_top + (kr1 - 1) * p.dil_h >= p.h) --kr1;
      if (padded_rows) {
        // Note [Row borders as zeros]: the whole row in one call, kernel rows [kr0, kr1).
        const int nrows = static_cast<int>(kr1 - kr0);
        for (int r = 0; r < nrows; ++r) {
          row_off[static_cast<size_t>(r)] = r * p.dil_h * p.w * kChannelBlock;
          row_w[static_cast<size_t>(r)] = static_cast<int32_t>((kr0 + r) * p.s);
        }
        const int64_t ih0 = kr0 < kr1 ? oh * p.stride_h - p.pad_top + kr0 * p.dil_h : 0;
        ConvTileEpilogueF32 e = ep;
        e.bias = bias + blk * kChannelBlock;
        e.residual = epilogue.residual != nullptr ? epilogue.residual + row * orow : nullptr;
        depthwise_nchwc_padded_rows_avx512(static_cast<int>(p.s), static_cast<int>(p.stride_w), nrows, row_off.data(),
                                           row_w.data(), x + nb * plane + ih0 * p.w * kChannelBlock, p.pad_left, p.w,
                                           packed_w + blk * taps * kChannelBlock, y + row * orow, p.wo, e);
        continue;
      }
      if (kr0 != have0 || kr1 != have1) {
        have0 = kr0, have1 = kr1;
        // List i: edge column edge[i] (offsets from the row's first input pixel, column 0), or
        // the interior (offsets from column ow's first input pixel) last.
        for (size_t i = 0; i < lists; ++i) {
          const bool interior = i == edge.size();
          const int64_t ow = interior ? lo : edge[i];
          int n = 0;
          for (int64_t r = kr0; r < kr1; ++r)
            for (int64_t s = 0; s < p.s; ++s) {
              const int64_t iw = ow * p.stride_w - p.pad_left + s * p.dil_w;
              if (!interior && (iw < 0 || iw >= p.w)) continue;
              off[i * static_cast<size_t>(taps) + static_cast<size_t>(n)] =
                  ((r - kr0) * p.dil_h * p.w + (interior ? s * p.dil_w : iw)) * kChannelBlock;
              widx[i * static_cast<size_t>(taps) + static_cast<size_t>(n++)] = static_cast<int32_t>(r * p.s + s);
            }
          count[i] = n;
        }
      }
      // The input row of kernel row kr0 (inside the input whenever any row is).
      const int64_t ih0 = kr0 < kr1 ? oh * p.stride_h - p.pad_top + kr0 * p.dil_h : 0;
      const float* xr = x + nb * plane + ih0 * p.w * kChannelBlock;
      const float* w = packed_w + blk * taps * kChannelBlock;
      float* yrow = y + row * orow;
      ConvTileEpilogueF32 e = ep;
      e.bias = bias + blk * kChannelBlock;
      const float* res = epilogue.residual != nullptr ? epilogue.residual + row * orow : nullptr;
      for (size_t i = 0; i < lists; ++i) {
        const bool interior = i == edge.size();
        if (interior && hi <= lo) continue;
        const int64_t ow = interior ? lo : edge[i];
        const size_t at = i * static_cast<size_t>(taps);
        e.residual = res != nullptr ? res + ow * kChannelBlock : nullptr;
        if (interior && by_kernel_rows) {
          // Note [Kernel rows in registers]: the interior list is kernel row by kernel row, S taps each.
          const int nrows = count[i] / static_cast<int>(p.s);
          for (int r = 0; r < nrows; ++r) {
            row_off[static_cast<size_t>(r)] = off[at + static_cast<size_t>(r * p.s)];
            row_w[static_cast<size_t>(r)] = widx[at + static_cast<size_t>(r * p.s)];
          }
          depthwise_nchwc_kernel_rows_avx512(static_cast<int>(p.s), static_cast<int>(p.stride_w), nrows, row_off.data(),
                                             row_w.data(), xr + (lo * p.stride_w - p.pad_left) * kChannelBlock, w,
                                             yrow + lo * kChannelBlock, hi - lo, e);
        } else if (interior)
          row_kernel(count[i], off.data() + at, widx.data() + at, xr + (lo * p.stride_w - p.pad_left) * kChannelBlock,
                     xstep, w, yrow + lo * kChannelBlock, hi - lo, e);
        else
          row_kernel(count[i], off.data() + at, widx.data() + at, xr, 0, w, yrow + ow * kChannelBlock, 1, e);
      }
    }
  });
}

}  // namespace kiln::kernels::cpu
