// The blocked convolution's micro-kernel for AVX-512 (Note [Blocked channels] in conv_nchwc.cc):
// MR output pixels by NV blocks of 16 output channels in MR * NV zmm accumulators. Compiled for
// AVX-512 by the target pragma below (Note [ISA code in one binary] in gemm_f32_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/conv_nchwc.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {
namespace {

// vmath's per-vector math (gelu_f32v), in its own namespace: Note [gelu inside the tile].
namespace vm {
#include "kernels/cpu/vmath_lanes_avx512.inc"
#include "kernels/cpu/vmath_simd_math.inc"
}  // namespace vm

// The epilogue after the bias: the residual on its side of the activation, the activation.
struct Finish {
  __m512 lo, hi;
  bool hswish, before;
  explicit Finish(const ConvTileEpilogueF32& ep)
      : lo(_mm512_set1_ps(ep.act == ConvTileEpilogueF32::Act::relu || ep.act == ConvTileEpilogueF32::Act::relu6
                              ? 0.0f
                              : -__builtin_inff())),
        hi(_mm512_set1_ps(ep.act == ConvTileEpilogueF32::Act::relu6 ? 6.0f : __builtin_inff())),
        hswish(ep.act == ConvTileEpilogueF32::Act::hardswish),
        before(ep.residual_before_activation) {}
  // res: the residual vector's address, or nullptr.
  __m512 operator()(__m512 r, const float* res) const {
    if (res != nullptr && before) r = _mm512_add_ps(r, _mm512_loadu_ps(res));
    r = hswish ? avx512::hardswish(r) : avx512::clamp(r, lo, hi);
    if (res != nullptr && !before) r = _mm512_add_ps(r, _mm512_loadu_ps(res));
    return r;
  }
};

// The same for sigmoid and silu (an exponential a vector). Kept apart so that the loops finishing
// with a clamp compile as before: with all five activations in one finish, MobileNetV2's
// depthwise layers (8 outputs stored a step, each finished) ran ~1% slower.
struct FinishExp {
  bool silu, before;
  explicit FinishExp(const ConvTileEpilogueF32& ep)
      : silu(ep.act == ConvTileEpilogueF32::Act::silu), before(ep.residual_before_activation) {}
  __m512 operator()(__m512 r, const float* res) const {
    if (res != nullptr && before) r = _mm512_add_ps(r, _mm512_loadu_ps(res));
    r = silu ? avx512::silu(r) : avx512::sigmoid(r);
    if (res != nullptr && !before) r = _mm512_add_ps(r, _mm512_loadu_ps(res));
    return r;
  }
};

// Note [gelu inside the tile]
// And for gelu (EfficientFormer's and InceptionNeXt's MLPs: 1x1 convolution, bias, gelu): vmath's
// gelu_f32v, compiled into this file (vmath_simd_math.inc in namespace vm below). It was a call to
// vmath's copy in another file, and every zmm register is the caller's to save across a call: the
// tile's accumulators went to the stack and back around each of them. EfficientFormerV2's 16 -> 32
// stem layer (3x3, stride 2, 56 x 56) ran 0.43 ms on one thread against 0.17 without the gelu,
// whose own arithmetic is 0.05 of that.
struct FinishGelu {
  bool before;
  explicit FinishGelu(const ConvTileEpilogueF32& ep) : before(ep.residual_before_activation) {}
  __m512 operator()(__m512 r, const float* res) const {
    if (res != nullptr && before) r = _mm512_add_ps(r, _mm512_loadu_ps(res));
    r = vm::gelu_f32v(vm::F{r}).v;
    if (res != nullptr && !before) r = _mm512_add_ps(r, _mm512_loadu_ps(res));
    return r;
  }
};

// f(finish) with the finish ep needs: FinishExp for sigmoid and silu, FinishGelu for gelu, Finish
// for the rest.
template <class F>
void with_finish(const ConvTileEpilogueF32& ep, F&& f) {
  if (ep.act == ConvTileEpilogueF32::Act::sigmoid || ep.act == ConvTileEpilogueF32::Act::silu) f(FinishExp(ep));
  else if (ep.act == ConvTileEpilogueF32::Act::gelu) f(FinishGelu(ep));
  else f(Finish(ep));
}

// Each step broadcasts input channel c of each of the MR pixels (16 floats apart within a block,
// so a tap's 16 steps read one cache line per pixel) and loads the NV filter vectors of (tap, c):
// a tap's filters are read in order. A plain (NCHW) input steps `lanes` channels a plane apart
// instead (a stem's 3, unrolled as in Note [Three channels a tap] in gemm_f32_avx512.cc).
// Listed: the tile's taps are a rectangle's list (tap_w, the filters' taps) and its outputs are
// scattered (yoff); otherwise every tap in order and outputs 16 floats apart from y + yoff[0]. Two
// instantiations, so the common one carries nothing of the other: with both in one body, light
// 1x1 tiles ran 10% slower.
template <int MR, int NV, bool Listed>
void nchwc_tile(const NchwcTileArgs& a) {
  static_assert(MR * NV <= 28);
  const int64_t blocks = a.blocks, xblk = a.xblk, ldc = a.ldc, yblk = a.yblk, block_taps = a.block_taps;
  const int taps = a.taps, lanes = a.lanes, m = a.m;
  const int64_t* const tap_off = a.tap_off;
  const int32_t* const tap_w = a.tap_w;
  const bool accumulate = a.accumulate;
  const ConvTileEpilogueF32* const ep = a.ep;
  const float* x = a.x;
  const float* w = a.w;
  // One line fetched a step: the `prefetch` stream into L2, or this tile's own filters 8 steps
  // ahead into L1. Addresses as integers: either stream may run past its buffer (prefetch.h).
  uintptr_t pf = a.prefetch != 0 ? a.prefetch : reinterpret_cast<uintptr_t>(w) + 8 * 64 * NV;
  const uintptr_t pf_step = a.prefetch != 0 ? 64 : 64 * NV;
  const bool to_l2 = a.prefetch != 0;
  __m512 acc[MR][NV];
  int64_t off[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    off[i] = a.pix[i];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  // The steps of a tap unrolled by two only, as in the NCHW pixel kernel (pixel_steps in
  // gemm_f32_avx512.cc): unrolled by 16, GCC precomputed and spilled every pixel's offset per step.
  auto step = [&](const float* xc) {
    if (to_l2) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1);
    else _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T0);
    pf += pf_step;
    __m512 wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(w + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(xc[off[i]]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(xi, wv[v], acc[i][v]);
    }
    w += 16 * NV;
  };
  // A listed tap's filters: w from the block's start (w0), at its filter tap.
  const float* const w0 = w;
  const int64_t tap_floats = lanes * 16 * NV;
  auto tap_filters = [&](int64_t b, int t) {
    if constexpr (Listed) w = w0 + (b * block_taps + tap_w[t]) * tap_floats;
  };
  // x + tap_off[t] stays inside the input: every listed tap of every pixel does, and offsets count
  // from a rectangle's first valid tap (Note [Borders without a copy] in conv_nchwc.cc).
  if (lanes == 16 && ldc == 1) {
    const int64_t full = a.last_lanes < 16 ? blocks - 1 : blocks;
    for (int64_t b = 0; b < full; ++b, x += xblk)
      for (int t = 0; t < taps; ++t) {
        const float* xt = x + tap_off[t];
        // A 1x1 layer's next block is new lines a block plane away (12.5 KB at 14 x 14), which no
        // hardware prefetcher follows: its pixels' lines are fetched into L1 a block ahead (as an
        // address: past the last block it may lie outside x). ResNet-50's 14 x 14 1x1 layers ran
        // 2-4% faster, MobileNetV2 and V3-Large 3-4% at batch 1 on two threads. Not for larger
        // filters, whose taps mostly reread the lines before them: a 3x3 layer ran ~1-3% slower.
        if (taps == 1) {
          const uintptr_t next = reinterpret_cast<uintptr_t>(xt) + 4 * xblk;
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i) _mm_prefetch(reinterpret_cast<const char*>(next + 4 * off[i]), _MM_HINT_T0);
        }
        tap_filters(b, t);
#pragma GCC unroll 2
        for (int c = 0; c < 16; ++c) step(xt + c);
      }
    // A partial last block: its real channels only (Note [The last block's real lanes] in
    // conv_nchwc.cc).
    if (full < blocks) {
      const int real = a.last_lanes;
      for (int t = 0; t < taps; ++t) {
        const float* xt = x + tap_off[t];
        tap_filters(full, t);
#pragma GCC unroll 2
        for (int c = 0; c < real; ++c) step(xt + c);
        if constexpr (!Listed) w += (16 - real) * 16 * NV;
      }
    }
  } else if (ldc == 1) {
    // A stem's kernel rows of S * C consecutive values (Note [Stem rows] in conv_nchwc.cc).
    for (int64_t b = 0; b < blocks; ++b, x += xblk)
      for (int t = 0; t < taps; ++t) {
        const float* xt = x + tap_off[t];
        tap_filters(b, t);
#pragma GCC unroll 2
        for (int c = 0; c < lanes; ++c) step(xt + c);
      }
  } else if (lanes == 3) {
    for (int64_t b = 0; b < blocks; ++b, x += xblk)
      for (int t = 0; t < taps; ++t) {
        const float* xt = x + tap_off[t];
        tap_filters(b, t);
        step(xt);
        step(xt + ldc);
        step(xt + 2 * ldc);
      }
  } else {
    for (int64_t b = 0; b < blocks; ++b, x += xblk)
      for (int t = 0; t < taps; ++t) {
        const float* xt = x + tap_off[t];
        tap_filters(b, t);
        for (int c = 0; c < lanes; ++c) step(xt + c * ldc);
      }
  }
  // Pixel i's output: y + yoff[i] (listed), or y + yoff[0] + 16 i.
  float* const y = Listed ? a.y : a.y + a.yoff[0];
  const int64_t* const yoff = a.yoff;
  auto at_of = [&](int v, int i) -> int64_t {
    if constexpr (Listed) return v * yblk + yoff[i];
    else return v * yblk + 16 * i;
  };
  if (ep == nullptr) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* yv = y + at_of(v, i);
        _mm512_storeu_ps(yv, accumulate ? _mm512_add_ps(acc[i][v], _mm512_loadu_ps(yv)) : acc[i][v]);
      }
    }
    return;
  }
  const float* const res = ep->residual == nullptr ? nullptr : Listed ? ep->residual : ep->residual + a.yoff[0];
  with_finish(*ep, [&](const auto& finish) {
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      const __m512 bv = _mm512_loadu_ps(ep->bias + 16 * v);
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i) {
        if (i >= m) break;
        const int64_t at = at_of(v, i);
        __m512 r = _mm512_add_ps(acc[i][v], bv);
        if (accumulate) r = _mm512_add_ps(r, _mm512_loadu_ps(y + at));
        _mm512_storeu_ps(y + at, finish(r, res != nullptr ? res + at : nullptr));
      }
    }
  });
}

// What a row of tiles reads (nchwc_row_tiles): a 1x1 stride-1 layer's blocked input (one tap at
// the pixel, Note [Dense 1x1 tiles] in conv_nchwc.cc), blocked input through listed taps, or a
// plain input's `lanes` channels `ldc` apart through listed taps (Note [Row tiles]).
enum class RowInput { dense, blocked, plain };

// a.tiles whole tiles of pixels at a fixed distance: pixel i of tile t reads x + pix[0] + PS (MR t
// + i) and is stored at y + yoff[0] + 16 (MR t + i) (Note [Row tiles] in conv_nchwc.cc);
// nchwc_tile's contract otherwise, its taps as for a tile of the rectangle (Listed: through tap_w).
template <int MR, int NV, int PS, RowInput In, bool Listed>
void nchwc_row_tiles(const NchwcTileArgs& a) {
  static_assert(MR * NV <= 28);
  static_assert(In != RowInput::dense || (PS == 16 && !Listed));
  const int64_t blocks = a.blocks, xblk = a.xblk, yblk = a.yblk, tiles = a.tiles, ldc = a.ldc;
  const int last_lanes = a.last_lanes, lanes = a.lanes, taps = In == RowInput::dense ? 1 : a.taps;
  const int64_t* const tap_off = a.tap_off;
  const int32_t* const tap_w = a.tap_w;
  const bool accumulate = a.accumulate;
  const float* const x0 = a.x + a.pix[0];
  float* const y0 = a.y + a.yoff[0];
  const ConvTileEpilogueF32* const ep = a.ep;
  const float* const res0 = ep != nullptr && ep->residual != nullptr ? ep->residual + a.yoff[0] : nullptr;
  // Lines of filters a tile's steps read, each fetching one of the next slice's (below).
  const int64_t steps = In == RowInput::dense ? (blocks - 1) * 16 + last_lanes : blocks * a.block_taps * lanes;
  const int64_t tap_floats = static_cast<int64_t>(lanes) * 16 * NV;
  // Note [A light tile's epilogue]
  // A light layer's tile is few steps (MobileNetV4's 48 -> 192 at 56 x 56: 48 of 24 multiply-adds),
  // and its epilogue was 18% of the kernel's samples: stores through y may alias the epilogue's
  // fields as far as the compiler knows, so it reloaded the bias and the residual's address for
  // every output and tested the residual and the accumulation there. The bias vectors are loaded
  // once a call, and a tile without residual or accumulation stores through a loop that tests
  // neither: that layer 0.264 -> 0.240 ms on one thread (per-layer minima of 6 alternations; ONNX
  // Runtime 0.237).
  __m512 bv[NV];
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) bv[v] = ep != nullptr ? _mm512_loadu_ps(ep->bias + 16 * v) : _mm512_setzero_ps();
  const bool plain_store = !accumulate && res0 == nullptr;
  // finish: the epilogue's Finish or FinishExp, or nullptr for a slice that only sums.
  auto run = [&](auto finish) {
    constexpr bool kFinish = !std::is_same_v<decltype(finish), std::nullptr_t>;
    for (int64_t t = 0; t < tiles; ++t) {
      __m512 acc[MR][NV];
#pragma GCC unroll 16
      for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
      // The first NV tiles fetch the next slice's or panel's filters into L2, a line a step
      // (Note [Filters fetched ahead] in conv_nchwc.cc).
      uintptr_t pf = a.prefetch != 0 && t < NV ? a.prefetch + static_cast<uintptr_t>(t * steps * 64) : 0;
      const float* x = x0 + t * PS * MR;
      const float* const w0 = a.w;
      const float* w = w0;
      // Pixel i's value at xc: PS i floats on, a displacement in the broadcast's address.
      auto step = [&](const float* xc) __attribute__((always_inline)) {
        if (pf != 0) _mm_prefetch(reinterpret_cast<const char*>(pf), _MM_HINT_T1), pf += 64;
        __m512 wv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) wv[v] = _mm512_loadu_ps(w + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const __m512 xi = _mm512_set1_ps(xc[PS * i]);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(xi, wv[v], acc[i][v]);
        }
        w += 16 * NV;
      };
      for (int64_t b = 0; b < blocks; ++b, x += xblk) {
        for (int tt = 0; tt < taps; ++tt) {
          const float* const xt = In == RowInput::dense ? x : x + tap_off[tt];
          if constexpr (Listed) w = w0 + (b * a.block_taps + tap_w[tt]) * tap_floats;
          if constexpr (In == RowInput::plain) {
            if (lanes == 3) {
              step(xt), step(xt + ldc), step(xt + 2 * ldc);
            } else {
              for (int c = 0; c < lanes; ++c) step(xt + c * ldc);
            }
            continue;
          }
          // A partial last block: its real channels only (Note [The last block's real lanes]).
          const int real = b + 1 < blocks ? 16 : last_lanes;
          if (real == 16) {
#pragma GCC unroll 2
            for (int c = 0; c < 16; ++c) step(xt + c);
          } else {
            for (int c = 0; c < real; ++c) step(xt + c);
            if constexpr (In == RowInput::blocked && !Listed) w += (16 - real) * 16 * NV;
          }
        }
      }
      float* const y = y0 + t * 16 * MR;
      if (plain_store) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v)
#pragma GCC unroll 16
          for (int i = 0; i < MR; ++i) {
            __m512 r = acc[i][v];
            if constexpr (kFinish) r = (*finish)(_mm512_add_ps(r, bv[v]), nullptr);
            _mm512_storeu_ps(y + v * yblk + 16 * i, r);
          }
        continue;
      }
      const float* const res = res0 != nullptr ? res0 + t * 16 * MR : nullptr;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
#pragma GCC unroll 16
        for (int i = 0; i < MR; ++i) {
          const int64_t at = v * yblk + 16 * i;
          __m512 r = acc[i][v];
          if constexpr (kFinish) r = _mm512_add_ps(r, bv[v]);
          if (accumulate) r = _mm512_add_ps(r, _mm512_loadu_ps(y + at));
          if constexpr (kFinish) r = (*finish)(r, res != nullptr ? res + at : nullptr);
          _mm512_storeu_ps(y + at, r);
        }
      }
    }
  };
  if (ep == nullptr) run(nullptr);
  else with_finish(*ep, [&](const auto& finish) { run(&finish); });
}

// `count` outputs of the blocked depthwise convolution: output o reads x_at(o) + tap_off[t] and is
// stored (its residual read) y_at(o) floats into y (ep.residual). Note [Blocked depthwise]
// (conv_nchwc_depthwise.cc): 8 outputs a step, the taps' filter vectors loaded once per 8 outputs.
template <class XAt, class YAt>
void depthwise_nchwc_outputs_avx512(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* w, float* y,
                                    int64_t count, const ConvTileEpilogueF32& ep, XAt x_at, YAt y_at) {
  const __m512 bv = _mm512_loadu_ps(ep.bias);
  with_finish(ep, [&](const auto& finish) {
    // N outputs from o on, each tap's filters loaded once for all N.
    auto run = [&]<int N>(int64_t o) {
      __m512 acc[N];
      const float* xo[N];
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) acc[i] = bv, xo[i] = x_at(o + i);
      for (int t = 0; t < taps; ++t) {
        const __m512 wv = _mm512_loadu_ps(w + 16 * tap_w[t]);
        const int64_t off = tap_off[t];
#pragma GCC unroll 8
        for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(_mm512_loadu_ps(xo[i] + off), wv, acc[i]);
      }
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const int64_t at = y_at(o + i);
        _mm512_storeu_ps(y + at, finish(acc[i], ep.residual != nullptr ? ep.residual + at : nullptr));
      }
    };
    // 8 at a time, then 4 (a 7 x 7 plane's 5 interior columns), then one: one at a time, every tap
    // loaded its filters again, and MobileNetV2's 7 x 7 layers ran 1.2-1.4x ONNX Runtime's time.
    int64_t o = 0;
    for (; o + 8 <= count; o += 8) run.template operator()<8>(o);
    for (; o + 4 <= count; o += 4) run.template operator()<4>(o);
    for (; o < count; ++o) run.template operator()<1>(o);
  });
}

// depthwise_nchwc_kernel_rows_avx512 for a window S wide at stride ST: N outputs a step, a kernel
// row's (N - 1) ST + S input vectors loaded once and each used by up to S taps (8 outputs of a
// 5-wide window at stride 2: 19 inputs, 8 accumulators and the filter in 28 registers; of a 9-wide
// one at stride 1: 16 + 8 + 1).
// Padded (Note [Row borders as zeros] in conv_nchwc_depthwise.cc): output o's inputs start at column
// o ST - pad_left of rows `width` columns wide, x at their column 0, and columns outside them are
// zeros; otherwise at x + o ST 16 with every input present.
template <int S, int ST, bool Padded>
void depthwise_nchwc_kernel_rows(int rows, const int64_t* row_off, const int32_t* row_w, const float* x,
                                 const float* w, float* y, int64_t count, const ConvTileEpilogueF32& ep,
                                 int64_t pad_left, int64_t width) {
  const __m512 bv = _mm512_loadu_ps(ep.bias);
  with_finish(ep, [&](const auto& finish) {
    auto run = [&]<int N>(int64_t o) {
      __m512 acc[N];
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) acc[i] = bv;
      constexpr int kIn = (N - 1) * ST + S;
      // The step's first input column, and whether its kIn columns are all inside the row.
      const int64_t c0 = Padded ? o * ST - pad_left : o * ST;
      const bool inside = !Padded || (c0 >= 0 && c0 + kIn <= width);
      for (int r = 0; r < rows; ++r) {
        const float* xr = x + row_off[r] + c0 * 16;
        const float* wr = w + 16 * row_w[r];
        __m512 in[kIn];
        if (inside) {
#pragma GCC unroll 20
          for (int j = 0; j < kIn; ++j) in[j] = _mm512_loadu_ps(xr + 16 * j);
        } else {
          const float* row = x + row_off[r];
#pragma GCC unroll 20
          for (int j = 0; j < kIn; ++j)
            in[j] = c0 + j >= 0 && c0 + j < width ? _mm512_loadu_ps(row + 16 * (c0 + j)) : _mm512_setzero_ps();
        }
#pragma GCC unroll 9
        for (int t = 0; t < S; ++t) {
          const __m512 wv = _mm512_loadu_ps(wr + 16 * t);
#pragma GCC unroll 8
          for (int i = 0; i < N; ++i) acc[i] = _mm512_fmadd_ps(in[i * ST + t], wv, acc[i]);
        }
      }
#pragma GCC unroll 8
      for (int i = 0; i < N; ++i) {
        const int64_t at = (o + i) * 16;
        _mm512_storeu_ps(y + at, finish(acc[i], ep.residual != nullptr ? ep.residual + at : nullptr));
      }
    };
    // 8 outputs a step, then the rest in one (a 7- or 14-wide row of Note [Small depthwise
    // planes]: 7, or 8 and 6).
    int64_t o = 0;
    for (; o + 8 <= count; o += 8) run.template operator()<8>(o);
    switch (count - o) {
      case 7: run.template operator()<7>(o); break;
      case 6: run.template operator()<6>(o); break;
      case 5: run.template operator()<5>(o); break;
      case 4: run.template operator()<4>(o); break;
      case 3: run.template operator()<3>(o); break;
      case 2: run.template operator()<2>(o); break;
      case 1: run.template operator()<1>(o); break;
      default: break;
    }
  });
}

}  // namespace

void depthwise_nchwc_kernel_rows_avx512(int s, int stride, int rows, const int64_t* row_off, const int32_t* row_w,
                                        const float* x, const float* w, float* y, int64_t count,
                                        const ConvTileEpilogueF32& ep) {
  if (stride == 1) {
    switch (s) {
      case 3: return depthwise_nchwc_kernel_rows<3, 1, false>(rows, row_off, row_w, x, w, y, count, ep, 0, 0);
      case 5: return depthwise_nchwc_kernel_rows<5, 1, false>(rows, row_off, row_w, x, w, y, count, ep, 0, 0);
      case 7: return depthwise_nchwc_kernel_rows<7, 1, false>(rows, row_off, row_w, x, w, y, count, ep, 0, 0);
      default: return depthwise_nchwc_kernel_rows<9, 1, false>(rows, row_off, row_w, x, w, y, count, ep, 0, 0);
    }
  } else {
    if (s == 3) depthwise_nchwc_kernel_rows<3, 2, false>(rows, row_off, row_w, x, w, y, count, ep, 0, 0);
    else depthwise_nchwc_kernel_rows<5, 2, false>(rows, row_off, row_w, x, w, y, count, ep, 0, 0);
  }
}

void depthwise_nchwc_padded_rows_avx512(int s, int stride, int rows, const int64_t* row_off, const int32_t* row_w,
                                        const float* x, int64_t pad_left, int64_t width, const float* w, float* y,
                                        int64_t count, const ConvTileEpilogueF32& ep) {
  KILN_ASSERT(stride == 1 || s == 5, "depthwise_nchwc_padded_rows_avx512: a ", s, "-wide window at stride ", stride);
  if (stride == 2) return depthwise_nchwc_kernel_rows<5, 2, true>(rows, row_off, row_w, x, w, y, count, ep, pad_left,
                                                                   width);
  switch (s) {
    case 3: return depthwise_nchwc_kernel_rows<3, 1, true>(rows, row_off, row_w, x, w, y, count, ep, pad_left, width);
    case 5: return depthwise_nchwc_kernel_rows<5, 1, true>(rows, row_off, row_w, x, w, y, count, ep, pad_left, width);
    case 7: return depthwise_nchwc_kernel_rows<7, 1, true>(rows, row_off, row_w, x, w, y, count, ep, pad_left, width);
    default: return depthwise_nchwc_kernel_rows<9, 1, true>(rows, row_off, row_w, x, w, y, count, ep, pad_left, width);
  }
}

void depthwise_nchwc_row_avx512(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x, int64_t xstep,
                                const float* w, float* y, int64_t count, const ConvTileEpilogueF32& ep) {
  depthwise_nchwc_outputs_avx512(
      taps, tap_off, tap_w, w, y, count, ep, [&](int64_t o) { return x + o * xstep; },
      [](int64_t o) { return o * 16; });
}

void depthwise_nchwc_pixels_avx512(int taps, const int64_t* tap_off, const int32_t* tap_w, const float* x,
                                   const int64_t* xoff, const float* w, float* y, const int64_t* yoff, int64_t count,
                                   const ConvTileEpilogueF32& ep) {
  depthwise_nchwc_outputs_avx512(
      taps, tap_off, tap_w, w, y, count, ep, [&](int64_t o) { return x + xoff[o]; },
      [&](int64_t o) { return yoff[o]; });
}

void layer_norm_channels_nchwc_avx512(int64_t blocks, int64_t pixels, int64_t channels, const float* x, const float* w,
                                      const float* b, float eps, float* y, int64_t p0, int64_t p1) {
  const int64_t step = pixels * 16;  // one block to the next
  const __mmask16 last = avx512::tail_mask(channels - (blocks - 1) * 16);
  const __m512 inv_c = _mm512_set1_ps(1.0f / static_cast<float>(channels));
  for (int64_t p = p0; p < p1; ++p) {
    const float* xp = x + p * 16;
    float* yp = y + p * 16;
    __m512 s = _mm512_setzero_ps();
    for (int64_t k = 0; k + 1 < blocks; ++k) s = _mm512_add_ps(s, _mm512_loadu_ps(xp + k * step));
    s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(last, xp + (blocks - 1) * step));
    const __m512 mean = _mm512_mul_ps(_mm512_set1_ps(_mm512_reduce_add_ps(s)), inv_c);
    __m512 ss = _mm512_setzero_ps();
    for (int64_t k = 0; k + 1 < blocks; ++k) {
      const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(xp + k * step), mean);
      ss = _mm512_fmadd_ps(d, d, ss);
    }
    const __m512 dl = _mm512_maskz_sub_ps(last, _mm512_loadu_ps(xp + (blocks - 1) * step), mean);
    ss = _mm512_fmadd_ps(dl, dl, ss);
    const float var = _mm512_reduce_add_ps(ss) / static_cast<float>(channels);
    const __m512 rstd = _mm512_set1_ps(1.0f / std::sqrt(var + eps));
    for (int64_t k = 0; k < blocks; ++k) {
      const __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(xp + k * step), mean), rstd);
      _mm512_storeu_ps(yp + k * step, _mm512_fmadd_ps(v, _mm512_loadu_ps(w + 16 * k), _mm512_loadu_ps(b + 16 * k)));
    }
  }
}

void scale_shift_nchwc_avx512(int64_t count, const float* x, const float* scale, const float* shift, float* y,
                              const ConvTileEpilogueF32& ep) {
  const __m512 sv = _mm512_loadu_ps(scale), bv = _mm512_loadu_ps(shift);
  with_finish(ep, [&](const auto& finish) {
#pragma GCC unroll 4
    for (int64_t i = 0; i < count; ++i)
      _mm512_storeu_ps(y + i * 16, finish(_mm512_fmadd_ps(_mm512_loadu_ps(x + i * 16), sv, bv), nullptr));
  });
}

namespace {

// The patches of tiles t0 .. t0 + count - 1 of an M x M-output grid, tw tiles wide: each tile's
// (M + 2) x (M + 2) input vectors (zero outside the plane) to transform(d, v + 16 i), which stores
// its positions vpos apart.
template <int M, class Transform>
[[gnu::always_inline]] inline void winograd_patches(const float* x, int64_t h, int64_t w, int64_t pad_top,
                                                    int64_t pad_left, int64_t tw, int64_t t0, int64_t count, float* v,
                                                    Transform transform) {
  constexpr int N = M + 2;
  int64_t ty = t0 / tw, tx = t0 % tw;  // stepped, not divided, from here on
  for (int64_t i = 0; i < count; ++i) {
    const int64_t iy0 = M * ty - pad_top, ix0 = M * tx - pad_left;
    if (++tx == tw) tx = 0, ++ty;
    const bool inside = iy0 >= 0 && ix0 >= 0 && iy0 + N <= h && ix0 + N <= w;
    __m512 d[N][N];
    for (int r = 0; r < N; ++r)
      for (int c = 0; c < N; ++c) {
        const int64_t iy = iy0 + r, ix = ix0 + c;
        d[r][c] = inside || (iy >= 0 && iy < h && ix >= 0 && ix < w) ? _mm512_loadu_ps(x + (iy * w + ix) * 16)
                                                                      : _mm512_setzero_ps();
      }
    transform(d, v + 16 * i);
  }
}

// Tiles t0 .. t0 + count - 1 back to the plane: transform(m + 16 i, out) gives a tile's M x M
// outputs from its positions mpos apart, stored (those inside ho x wo) with the bias, finished by ep.
template <int M, class Transform>
[[gnu::always_inline]] inline void winograd_outputs(const float* m, int64_t ho, int64_t wo, int64_t tw, int64_t t0,
                                                    int64_t count, float* y, const ConvTileEpilogueF32& ep,
                                                    Transform transform) {
  const __m512 bias = _mm512_loadu_ps(ep.bias);
  with_finish(ep, [&](const auto& finish) {
    int64_t ty = t0 / tw, tx = t0 % tw;
    for (int64_t i = 0; i < count; ++i) {
      const int64_t oy = M * ty, ox = M * tx;
      if (++tx == tw) tx = 0, ++ty;
      __m512 out[M][M];
      transform(m + 16 * i, out);
      for (int a = 0; a < M && oy + a < ho; ++a)
        for (int b = 0; b < M && ox + b < wo; ++b) {
          const int64_t at = ((oy + a) * wo + ox + b) * 16;
          const float* res = ep.residual != nullptr ? ep.residual + at : nullptr;
          _mm512_storeu_ps(y + at, finish(_mm512_add_ps(out[a][b], bias), res));
        }
    }
  });
}

// B^T of F(4x4, 3x3) applied to six vectors: a row or column of a patch.
inline void winograd4_bt(const __m512 (&d)[6], __m512 (&o)[6]) {
  const __m512 four = _mm512_set1_ps(4.0f), five = _mm512_set1_ps(-5.0f), two = _mm512_set1_ps(2.0f);
  const __m512 a = _mm512_fnmadd_ps(four, d[2], d[4]), b = _mm512_fnmadd_ps(four, d[1], d[3]);
  const __m512 c = _mm512_sub_ps(d[4], d[2]), e = _mm512_mul_ps(two, _mm512_sub_ps(d[3], d[1]));
  o[0] = _mm512_fmadd_ps(four, d[0], _mm512_fmadd_ps(five, d[2], d[4]));
  o[1] = _mm512_add_ps(a, b);
  o[2] = _mm512_sub_ps(a, b);
  o[3] = _mm512_add_ps(c, e);
  o[4] = _mm512_sub_ps(c, e);
  o[5] = _mm512_fmadd_ps(four, d[1], _mm512_fmadd_ps(five, d[3], d[5]));
}

// A^T of F(4x4, 3x3) applied to six vectors: a column or row of a transformed tile.
inline void winograd4_at(const __m512 (&m)[6], __m512 (&o)[4]) {
  const __m512 s12 = _mm512_add_ps(m[1], m[2]), d12 = _mm512_sub_ps(m[1], m[2]);
  const __m512 s34 = _mm512_add_ps(m[3], m[4]), d34 = _mm512_sub_ps(m[3], m[4]);
  o[0] = _mm512_add_ps(_mm512_add_ps(m[0], s12), s34);
  o[1] = _mm512_fmadd_ps(_mm512_set1_ps(2.0f), d34, d12);
  o[2] = _mm512_fmadd_ps(_mm512_set1_ps(4.0f), s34, s12);
  o[3] = _mm512_fmadd_ps(_mm512_set1_ps(8.0f), d34, _mm512_add_ps(d12, m[5]));
}

}  // namespace

void winograd_input_avx512(const float* x, int64_t h, int64_t w, int64_t pad_top, int64_t pad_left, int64_t tw,
                           int64_t t0, int64_t count, float* v, int64_t vpos) {
  winograd_patches<2>(x, h, w, pad_top, pad_left, tw, t0, count, v, [&](const __m512 (&d)[4][4], float* vi) {
    // B^T d, then its rows times B: the same four sums and differences down and across.
    __m512 e[4][4];
    for (int c = 0; c < 4; ++c) {
      e[0][c] = _mm512_sub_ps(d[0][c], d[2][c]);
      e[1][c] = _mm512_add_ps(d[1][c], d[2][c]);
      e[2][c] = _mm512_sub_ps(d[2][c], d[1][c]);
      e[3][c] = _mm512_sub_ps(d[1][c], d[3][c]);
    }
    for (int r = 0; r < 4; ++r) {  // position 4 r + c at vi + (4 r + c) * vpos
      _mm512_storeu_ps(vi, _mm512_sub_ps(e[r][0], e[r][2]));
      _mm512_storeu_ps(vi + vpos, _mm512_add_ps(e[r][1], e[r][2]));
      _mm512_storeu_ps(vi + 2 * vpos, _mm512_sub_ps(e[r][2], e[r][1]));
      _mm512_storeu_ps(vi + 3 * vpos, _mm512_sub_ps(e[r][1], e[r][3]));
      vi += 4 * vpos;
    }
  });
}

void winograd_output_avx512(const float* m, int64_t mpos, int64_t ho, int64_t wo, int64_t tw, int64_t t0,
                            int64_t count, float* y, const ConvTileEpilogueF32& ep) {
  winograd_outputs<2>(m, ho, wo, tw, t0, count, y, ep, [&](const float* mi, __m512 (&out)[2][2]) {
    // A^T m: rows 0 + 1 + 2 and 1 - 2 - 3; then the same across.
    __m512 mv[16];
    for (int k = 0; k < 16; ++k, mi += mpos) mv[k] = _mm512_loadu_ps(mi);
    __m512 s[2][4];
    for (int c = 0; c < 4; ++c) {
      s[0][c] = _mm512_add_ps(_mm512_add_ps(mv[c], mv[4 + c]), mv[8 + c]);
      s[1][c] = _mm512_sub_ps(_mm512_sub_ps(mv[4 + c], mv[8 + c]), mv[12 + c]);
    }
    for (int a = 0; a < 2; ++a) {
      out[a][0] = _mm512_add_ps(_mm512_add_ps(s[a][0], s[a][1]), s[a][2]);
      out[a][1] = _mm512_sub_ps(_mm512_sub_ps(s[a][1], s[a][2]), s[a][3]);
    }
  });
}

void winograd4_input_avx512(const float* x, int64_t h, int64_t w, int64_t pad_top, int64_t pad_left, int64_t tw,
                            int64_t t0, int64_t count, float* v, int64_t vpos) {
  winograd_patches<4>(x, h, w, pad_top, pad_left, tw, t0, count, v, [&](const __m512 (&d)[6][6], float* vi) {
    // d B, row by row; then B^T of each column, stored by position 6 r + j.
    __m512 e[6][6];
    for (int r = 0; r < 6; ++r) winograd4_bt(d[r], e[r]);
    for (int j = 0; j < 6; ++j) {
      const __m512 col[6] = {e[0][j], e[1][j], e[2][j], e[3][j], e[4][j], e[5][j]};
      __m512 o[6];
      winograd4_bt(col, o);
      for (int r = 0; r < 6; ++r) _mm512_storeu_ps(vi + (6 * r + j) * vpos, o[r]);
    }
  });
}

void winograd4_output_avx512(const float* m, int64_t mpos, int64_t ho, int64_t wo, int64_t tw, int64_t t0,
                             int64_t count, float* y, const ConvTileEpilogueF32& ep) {
  winograd_outputs<4>(m, ho, wo, tw, t0, count, y, ep, [&](const float* mi, __m512 (&out)[4][4]) {
    // A^T of each column of the 6 x 6 tile, then of each of the four rows that gives.
    __m512 s[6][4];  // s[j][a]: row a, column j of A^T M
    for (int j = 0; j < 6; ++j) {
      __m512 col[6];
      for (int r = 0; r < 6; ++r) col[r] = _mm512_loadu_ps(mi + (6 * r + j) * mpos);
      winograd4_at(col, s[j]);
    }
    for (int a = 0; a < 4; ++a) {
      const __m512 row[6] = {s[0][a], s[1][a], s[2][a], s[3][a], s[4][a], s[5][a]};
      winograd4_at(row, out[a]);
    }
  });
}

void interleave3_avx512(const float* c0, const float* c1, const float* c2, float* d, int64_t n) {
  // Output vector j holds values 16 j .. 16 j + 15 of the interleaved run, value e being channel
  // e % 3 of pixel e / 3 (pixels 0-5, 5-10, 10-15 of the 16 read): channels 0 and 1 are picked
  // first, then channel 2 is put in.
  __m512i pick01[3], put2[3];
  for (int j = 0; j < 3; ++j) {
    alignas(64) int32_t a[16], b[16];
    for (int l = 0; l < 16; ++l) {
      const int e = 16 * j + l, px = e / 3, ch = e % 3;
      a[l] = ch == 0 ? px : ch == 1 ? 16 + px : 0;
      b[l] = ch == 2 ? 16 + px : l;
    }
    pick01[j] = _mm512_load_si512(a);
    put2[j] = _mm512_load_si512(b);
  }
  int64_t i = 0;
  for (; i + 16 <= n; i += 16, d += 48) {
    const __m512 v0 = _mm512_loadu_ps(c0 + i), v1 = _mm512_loadu_ps(c1 + i), v2 = _mm512_loadu_ps(c2 + i);
    for (int j = 0; j < 3; ++j)
      _mm512_storeu_ps(d + 16 * j, _mm512_permutex2var_ps(_mm512_permutex2var_ps(v0, pick01[j], v1), put2[j], v2));
  }
  for (; i < n; ++i, d += 3) d[0] = c0[i], d[1] = c1[i], d[2] = c2[i];
}

// The columns whose window lies inside the input run without bounds checks, over the window rows
// that exist: a NaN is remembered in a mask (vmaxps drops NaNs in its first operand) and written
// out at the end. ResNet-18's 3x3 stride-2 pool: 0.134 -> 0.115 ms at batch 1 on two threads; at
// batch 8 (25.7 MB read) it stays 1.29 ms, memory-bound.
void max_pool2d_nchwc_rows_avx512(const Pool2dParams& p, const float* x, float* y, int64_t row0, int64_t row1) {
  const __m512 lowest = _mm512_set1_ps(-__builtin_inff());
  // Columns [lo, hi): every tap inside the input.
  const auto [lo, hi] = nchwc_inside_columns(p.wo, p.stride_w, p.pad_left, p.dil_w, p.w, p.kw);
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t plane = row / p.ho, oh = row % p.ho;
    const float* xp = x + plane * p.h * p.w * 16;
    float* yr = y + row * p.wo * 16;
    auto edge = [&](int64_t ow) {
      __m512 o = lowest;
      for (int64_t i = 0; i < p.kh; ++i) {
        const int64_t ih = oh * p.stride_h - p.pad_top + i * p.dil_h;
        if (ih < 0 || ih >= p.h) continue;
        for (int64_t j = 0; j < p.kw; ++j) {
          const int64_t iw = ow * p.stride_w - p.pad_left + j * p.dil_w;
          if (iw < 0 || iw >= p.w) continue;
          const __m512 v = _mm512_loadu_ps(xp + (ih * p.w + iw) * 16);
          // vmaxps keeps its second operand when either is NaN: o's NaN stays, v's is blended in.
          o = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_max_ps(v, o), v);
        }
      }
      _mm512_storeu_ps(yr + ow * 16, o);
    };
    for (int64_t ow = 0; ow < lo; ++ow) edge(ow);
    // The window rows inside the input, the same for every column of this output row.
    int64_t i0 = 0, i1 = p.kh;
    while (i0 < i1 && oh * p.stride_h - p.pad_top + i0 * p.dil_h < 0) ++i0;
    while (i1 > i0 && oh * p.stride_h - p.pad_top + (i1 - 1) * p.dil_h >= p.h) --i1;
    const int64_t tap = p.dil_w * 16;
    for (int64_t ow = lo; ow < hi; ++ow) {
      const float* xc = xp + (ow * p.stride_w - p.pad_left) * 16;
      __m512 o = lowest;
      __mmask16 nan = 0;
      for (int64_t i = i0; i < i1; ++i) {
        const float* xr = xc + (oh * p.stride_h - p.pad_top + i * p.dil_h) * p.w * 16;
        for (int64_t j = 0; j < p.kw; ++j) {
          const __m512 v = _mm512_loadu_ps(xr + j * tap);
          o = _mm512_max_ps(o, v);
          nan |= _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q);
        }
      }
      _mm512_storeu_ps(yr + ow * 16, _mm512_mask_mov_ps(o, nan, _mm512_set1_ps(__builtin_nanf(""))));
    }
    for (int64_t ow = std::max(lo, hi); ow < p.wo; ++ow) edge(ow);
  }
}

void avg_pool2d_nchwc_rows_avx512(const Pool2dParams& p, const float* x, const float* inv, float* y, int64_t row0,
                                  int64_t row1) {
  for (int64_t row = row0; row < row1; ++row) {
    const int64_t plane = row / p.ho, oh = row % p.ho;
    const float* xp = x + plane * p.h * p.w * 16;
    float* yr = y + row * p.wo * 16;
    const int64_t ih0 = std::max<int64_t>(0, oh * p.stride_h - p.pad_top);
    const int64_t ih1 = std::min(p.h, oh * p.stride_h - p.pad_top + p.kh);
    for (int64_t ow = 0; ow < p.wo; ++ow) {
      const int64_t iw0 = std::max<int64_t>(0, ow * p.stride_w - p.pad_left);
      const int64_t iw1 = std::min(p.w, ow * p.stride_w - p.pad_left + p.kw);
      __m512 acc = _mm512_setzero_ps();
      for (int64_t ih = ih0; ih < ih1; ++ih)
        for (int64_t iw = iw0; iw < iw1; ++iw) acc = _mm512_add_ps(acc, _mm512_loadu_ps(xp + (ih * p.w + iw) * 16));
      _mm512_storeu_ps(yr + ow * 16, _mm512_mul_ps(acc, _mm512_set1_ps(inv[oh * p.wo + ow])));
    }
  }
}

namespace {

// pick.operator()<MR, NV>() for the tiles the blocked convolution runs (NchwcTiling): MR pixels by
// NV blocks; nullptr for any other.
template <class Pick>
NchwcUkernelF32 by_tile(int nv, int mr, Pick&& pick) {
  if (mr == 1) {  // Note [One-pixel planes]
    switch (nv) {
      case 4: return pick.template operator()<1, 4>();
      case 3: return pick.template operator()<1, 3>();
      case 2: return pick.template operator()<1, 2>();
      case 1: return pick.template operator()<1, 1>();
      default: return nullptr;
    }
  }
  if (mr == 7) {
    switch (nv) {
      case 3: return pick.template operator()<7, 3>();
      case 2: return pick.template operator()<7, 2>();
      case 1: return pick.template operator()<7, 1>();
      default: return nullptr;
    }
  }
  switch (nv) {
    case 4: return mr == 6 ? pick.template operator()<6, 4>() : nullptr;
    case 3: return mr == 8 ? pick.template operator()<8, 3>() : nullptr;
    case 2: return mr == 12 ? pick.template operator()<12, 2>() : nullptr;
    case 1: return mr == 12 ? pick.template operator()<12, 1>() : nullptr;
    default: return nullptr;
  }
}

}  // namespace

NchwcUkernelF32 nchwc_dense_tiles_f32_avx512(int nv, int mr) {
  return by_tile(nv, mr, []<int MR, int NV>() -> NchwcUkernelF32 {
    return nchwc_row_tiles<MR, NV, 16, RowInput::dense, false>;
  });
}

NchwcUkernelF32 nchwc_row_tiles_f32_avx512(int nv, int mr, int64_t pixel_floats, bool plain, bool listed) {
  if (mr == 1) return nullptr;
  return by_tile(nv, mr, [&]<int MR, int NV>() -> NchwcUkernelF32 {
    if (plain) {
      if (listed) return nullptr;
      // A plain input's stride (1 or 2), or a stem's rows' pixel of C values at stride 1 or 2
      // (Note [Stem rows] in conv_nchwc.cc: 3 or 4 channels).
      switch (pixel_floats) {
        case 1: return nchwc_row_tiles<MR, NV, 1, RowInput::plain, false>;
        case 2: return nchwc_row_tiles<MR, NV, 2, RowInput::plain, false>;
        case 3: return nchwc_row_tiles<MR, NV, 3, RowInput::plain, false>;
        case 4: return nchwc_row_tiles<MR, NV, 4, RowInput::plain, false>;
        case 6: return nchwc_row_tiles<MR, NV, 6, RowInput::plain, false>;
        case 8: return nchwc_row_tiles<MR, NV, 8, RowInput::plain, false>;
        default: return nullptr;
      }
    }
    if (pixel_floats == 16)
      return listed ? nchwc_row_tiles<MR, NV, 16, RowInput::blocked, true> : nchwc_row_tiles<MR, NV, 16, RowInput::blocked, false>;
    if (pixel_floats == 32)
      return listed ? nchwc_row_tiles<MR, NV, 32, RowInput::blocked, true> : nchwc_row_tiles<MR, NV, 32, RowInput::blocked, false>;
    return nullptr;
  });
}

NchwcUkernelF32 nchwc_ukernel_f32_avx512(int nv, int mr, bool listed) {
  return by_tile(nv, mr, [&]<int MR, int NV>() -> NchwcUkernelF32 {
    return listed ? nchwc_tile<MR, NV, true> : nchwc_tile<MR, NV, false>;
  });
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
