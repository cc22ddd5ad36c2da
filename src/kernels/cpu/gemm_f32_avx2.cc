// f32 micro-kernels for AVX2+FMA: the GEMM's 6 x 16 tile in 12 ymm accumulators (right-edge tiles
// go through a small stack tile) and the direct convolution's tiles (Note [AVX2 convolution
// tiles]). Compiled for AVX2 by the target pragma below (Note [ISA code in one binary] in
// gemm_f32_avx512.cc).
#include <immintrin.h>

#include <type_traits>

#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/prefetch.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/gemm_rows.h"
#include "kernels/cpu/tile_store.h"

namespace kiln::kernels::cpu {

namespace {

using avx2::lanes_below;
using avx2::store_first;

constexpr int kMr = 6, kNr = 16;

// Note [A branch-free tile store]
// The tiles' epilogues (bias, residual before or after, relu / relu6) used to test each option
// for every vector they stored: ~6 branches per vector, 72 per 6 x 16 tile, all predictable, and
// yet on a Zen 3 the store then cost as much as 16-32 K steps (a 4 x 24 tile over K = 16 with
// bias and relu ran at 44 GFLOP/s, 68 without the epilogue). Now the options are decided once per
// tile: the activation is a clamp to [lo, hi] (-inf / +inf when there is none, which leaves every
// value, NaN included, as it is), a missing bias adds zeros, and whether C is accumulated and
// where the residual goes are template arguments of the store loop (4 x 24, K = 16: 61 GFLOP/s).
// hardswish (without a residual) is one more such variant, so the 1x1 expansions of a
// MobileNetV3 need no pass over each tile afterwards (two threads, in-process alternation: 24 -> 96
// at 28 x 28 1.46x, 96 -> 576 at 7 x 7 1.24x faster; the 3 -> 16 stride-2 stem 1-4%).
using avx2::clamp;
using avx2::hardswish;

// The vectors of the rows kernel (kernels/cpu/gemm_rows.h), whose row store the 6 x 16 tile uses
// too: a partial row goes through a stack copy, so every vector access stays in bounds.
struct Ymm {
  using Reg = __m256;
  static constexpr int kWidth = 8;
  static Reg zero() { return _mm256_setzero_ps(); }
  static Reg load(const float* p) { return _mm256_loadu_ps(p); }
  static Reg broadcast(const float* p) { return _mm256_broadcast_ss(p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm256_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm256_add_ps(a, b); }
  static void store_row(float* c, int n, Reg r0, Reg r1, float alpha, float beta) {
    if (n >= kNr) return store_full(c, r0, r1, alpha, beta);
    alignas(32) float row[kNr] = {};
    if (beta != 0.0f)
      for (int j = 0; j < n; ++j) row[j] = c[j];
    store_full(row, r0, r1, alpha, beta);
    for (int j = 0; j < n; ++j) c[j] = row[j];
  }
  static void store_full(float* c, Reg r0, Reg r1, float alpha, float beta) {
    const __m256 va = _mm256_set1_ps(alpha);
    r0 = _mm256_mul_ps(va, r0), r1 = _mm256_mul_ps(va, r1);
    if (beta != 0.0f) {
      const __m256 vb = _mm256_set1_ps(beta);
      r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c), r0);
      r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(c + 8), r1);
    }
    _mm256_storeu_ps(c, r0);
    _mm256_storeu_ps(c + 8, r1);
  }
};

template <int M>
void f32_gemm_ukernel_6x16__avx2(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                                 int n, float alpha, float beta, uintptr_t l2_next, uintptr_t l2_end) {
  __m256 acc0[M], acc1[M];
  // C's lines, so that the stores after the K loop find them (as the AVX-512 tile does; Note
  // [Prefetching the tile's output] in conv_direct.cc): a 1024^3 product 0.80-0.85x the time on a
  // Zen 3, one thread, alternating within one process.
  prefetch_rows(reinterpret_cast<uintptr_t>(c), ldc, M, n);
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  L2Stream l2(l2_next, l2_end, k);
  for (int64_t p = 0; p < k; ++p) {
    l2.step();
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
    }
    a += kMr;
    b += ldb;
  }
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) Ymm::store_row(c + i * ldc, n, acc0[i], acc1[i], alpha, beta);
}

void f32_gemm_ukernel__avx2(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
                            int n, float alpha, float beta, uintptr_t l2_next, uintptr_t l2_end) {
  switch (m) {
    case 1: return f32_gemm_ukernel_6x16__avx2<1>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 2: return f32_gemm_ukernel_6x16__avx2<2>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 3: return f32_gemm_ukernel_6x16__avx2<3>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 4: return f32_gemm_ukernel_6x16__avx2<4>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 5: return f32_gemm_ukernel_6x16__avx2<5>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    default: return f32_gemm_ukernel_6x16__avx2<6>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
  }
}

// Note [AVX2 convolution tiles]
// The direct convolution's tiles (gemm_ukernel.h) with AVX2's 16 ymm registers: 12 accumulators
// (enough independent FMA chains for two FMA pipes of 4-cycle latency), the B vectors and one
// broadcast. Column tiles: 6 x 16 (the GEMM's shape) and 4 x 24 (no wasted rows on 64-channel
// layers); pixel tiles: 6 pixels x 16 channels, 4 x 24 and 3 x 32. AVX2 has no mask registers:
// a column tile at a plane's last columns uses vmaskmov loads and partial plain stores, full tiles
// (the common case) plain ones, and the pixel tiles' transposed rows partial plain stores (Note
// [No masked stores on Zen] in avx2_util.h).

// Column tiles (GemmTapsUkernelF32): M rows of an MR-row A panel by NV vectors of 8 columns. Full:
// all NV * 8 columns are valid (plain loads and stores); otherwise the first n (masked loads,
// partial stores).
template <int MR, int NV, int M, bool Full>
void f32_conv_taps_ukernel__avx2(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                 int64_t ldb, float* c, int64_t ldc, int n, bool accumulate,
                                 const ConvTileEpilogueF32* ep) {
  static_assert(M * NV <= 12 && M <= MR);
  __m256 acc[M][NV];
  __m256i mask[NV];
#pragma GCC unroll 3
  for (int v = 0; v < NV; ++v) mask[v] = lanes_below(n - 8 * v);
  auto load = [&](const float* s, int v) { return Full ? _mm256_loadu_ps(s) : _mm256_maskload_ps(s, mask[v]); };
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i)
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  for (int t = 0; t < taps; ++t) {
    const float* bt = b + tap_off[t];
#pragma GCC unroll 4
    for (int64_t p = 0; p < k; ++p) {
      __m256 bv[NV];
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) bv[v] = load(bt + 8 * v, v);
#pragma GCC unroll 6
      for (int i = 0; i < M; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
      }
      a += MR;
      bt += ldb;
    }
  }
  // Note [Epilogue in the store] (gemm_f32_avx512.cc), without a branch per vector (Note [A
  // branch-free tile store]).
  const bool fin = ep != nullptr;
  const __m256 lo = _mm256_set1_ps(fin && ep->act != ConvTileEpilogueF32::Act::none ? 0.0f : -__builtin_inff());
  const __m256 hi = _mm256_set1_ps(fin && ep->act == ConvTileEpilogueF32::Act::relu6 ? 6.0f : __builtin_inff());
  const float* bias = fin && ep->bias != nullptr ? ep->bias : kTileZeroBias;
  const float* res = fin ? ep->residual : nullptr;
  const int64_t ldr = fin ? ep->ldr : 0;
  auto store = [&](auto acc_tag, auto fin_tag, auto res_tag, auto act_tag) {
    constexpr bool kAcc = decltype(acc_tag)::value, kFin = decltype(fin_tag)::value;
    constexpr bool kHardswish = decltype(act_tag)::value;
    constexpr TileResidual kRes = decltype(res_tag)::value;
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      float* cr = c + i * ldc;
      const __m256 bv = _mm256_broadcast_ss(bias + i);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        __m256 r = acc[i][v];
        if constexpr (kAcc) r = _mm256_add_ps(r, load(cr + 8 * v, v));
        if constexpr (kFin) {
          r = _mm256_add_ps(r, bv);
          if constexpr (kRes == TileResidual::before) r = _mm256_add_ps(r, load(res + i * ldr + 8 * v, v));
          r = kHardswish ? hardswish(r) : clamp(r, lo, hi);
          if constexpr (kRes == TileResidual::after) r = _mm256_add_ps(r, load(res + i * ldr + 8 * v, v));
        }
        if (Full) _mm256_storeu_ps(cr + 8 * v, r);
        else store_first(cr + 8 * v, r, n - 8 * v);  // Note [No masked stores on Zen] (avx2_util.h)
      }
    }
  };
  auto with_acc = [&](auto acc_tag) {
    if (!fin) return store(acc_tag, std::false_type{}, TileResidualTag<TileResidual::none>{}, TileClamp{});
    with_tile_store(*ep, [&](auto res_tag, auto act_tag) { store(acc_tag, std::true_type{}, res_tag, act_tag); });
  };
  if (accumulate) with_acc(std::true_type{});
  else with_acc(std::false_type{});
}

template <int MR, int NV, int M>
void taps_rows__avx2(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b, int64_t ldb,
                     float* c, int64_t ldc, int n, bool accumulate, const ConvTileEpilogueF32* ep) {
  if (n == 8 * NV) f32_conv_taps_ukernel__avx2<MR, NV, M, true>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep);
  else f32_conv_taps_ukernel__avx2<MR, NV, M, false>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep);
}

#define KILN_TAPS_CASE(MR, NV, M) \
  case M: return taps_rows__avx2<MR, NV, M>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep);

void f32_conv_taps_6x16__avx2(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                              int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                              const ConvTileEpilogueF32* ep) {
  switch (m) {
    KILN_TAPS_CASE(6, 2, 1) KILN_TAPS_CASE(6, 2, 2) KILN_TAPS_CASE(6, 2, 3) KILN_TAPS_CASE(6, 2, 4)
    KILN_TAPS_CASE(6, 2, 5)
    default: return taps_rows__avx2<6, 2, 6>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep);
  }
}

void f32_conv_taps_4x24__avx2(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                              int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                              const ConvTileEpilogueF32* ep) {
  switch (m) {
    KILN_TAPS_CASE(4, 3, 1) KILN_TAPS_CASE(4, 3, 2) KILN_TAPS_CASE(4, 3, 3)
    default: return taps_rows__avx2<4, 3, 4>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep);
  }
}

#undef KILN_TAPS_CASE

// Pixel tiles (ConvPixelsUkernelF32): MR pixels by NV vectors of 8 output channels; each step
// broadcasts one activation per pixel (from its own offset) and loads NV vectors of the packed
// filter panel.
template <int MR, int NV>
void f32_conv_pixels_ukernel__avx2(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k,
                                   const float* x, const int64_t* pix, int64_t ldx, const float* b, float* c,
                                   int64_t ldc, bool accumulate, const ConvPixelsOutF32* out) {
  static_assert(MR * NV <= 12 && MR <= 8);
  // 12 accumulators leave 4 registers: the NV filter vectors and one broadcast (NV <= 3), or the
  // MR broadcasts and one filter vector (MR <= 3). 3 x 32 the other way round spilled and ran
  // at half the speed.
  constexpr bool kPixelsFirst = NV > MR;
  static_assert(kPixelsFirst ? MR + 1 + MR * NV <= 16 : NV + 1 + MR * NV <= 16);
  __m256 acc[MR][NV];
  int64_t off[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    off[i] = pix[i];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  }
  const float* const b0 = b;
  for (int t = 0; t < taps; ++t) {
    const float* xt = x + tap_off[t];
    if (tap_blk != nullptr) b = b0 + tap_blk[t] * k * (8 * NV);
#pragma GCC unroll 2
    for (int64_t p = 0; p < k; ++p) {
      if constexpr (kPixelsFirst) {
        __m256 xv[MR];
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) xv[i] = _mm256_broadcast_ss(xt + off[i]);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) {
          const __m256 bv = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
          for (int i = 0; i < MR; ++i) acc[i][v] = _mm256_fmadd_ps(xv[i], bv, acc[i][v]);
        }
      } else {
        __m256 bv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
        for (int i = 0; i < MR; ++i) {
          const __m256 xi = _mm256_broadcast_ss(xt + off[i]);
#pragma GCC unroll 4
          for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(xi, bv[v], acc[i][v]);
        }
      }
      b += 8 * NV;
      xt += ldx;
    }
  }
  if (accumulate) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_add_ps(acc[i][v], _mm256_loadu_ps(c + i * ldc + 8 * v));
  }
  if (out == nullptr) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm256_storeu_ps(c + i * ldc + 8 * v, acc[i][v]);
    return;
  }
  // Note [A transposed store] (gemm_f32_avx512.cc), 8 channels at a time: each 8 x 8 block
  // (pixels x channels, rows of zeros past MR) is transposed into 8 channel rows of 8 pixels, each
  // then finished and stored to its first m pixels (Note [No masked stores on Zen] in avx2_util.h).
  const ConvTileEpilogueF32& ep = out->ep;
  const __m256i pm = lanes_below(out->m);
  // Note [A branch-free tile store]
  const __m256 lo = _mm256_set1_ps(ep.act != ConvTileEpilogueF32::Act::none ? 0.0f : -__builtin_inff());
  const __m256 hi = _mm256_set1_ps(ep.act == ConvTileEpilogueF32::Act::relu6 ? 6.0f : __builtin_inff());
  const float* bias = ep.bias != nullptr ? ep.bias : kTileZeroBias;
  auto store = [&](auto res_tag, auto act_tag) {
    constexpr TileResidual kRes = decltype(res_tag)::value;
    constexpr bool kHardswish = decltype(act_tag)::value;
    auto finish_row = [&](int j, __m256 r) {  // channel j of the tile
      if (j >= out->n) return;
      r = _mm256_add_ps(r, _mm256_broadcast_ss(bias + j));
      if constexpr (kRes == TileResidual::before)
        r = _mm256_add_ps(r, _mm256_maskload_ps(ep.residual + j * ep.ldr, pm));
      r = kHardswish ? hardswish(r) : clamp(r, lo, hi);
      if constexpr (kRes == TileResidual::after) r = _mm256_add_ps(r, _mm256_maskload_ps(ep.residual + j * ep.ldr, pm));
      store_first(out->y + j * out->ldy, r, out->m);
    };
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = i < MR ? acc[i][v] : _mm256_setzero_ps();
      avx2::transpose8(r);
#pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) finish_row(8 * v + j, r[j]);
    }
  };
  with_tile_store(ep, store);
}

void f32_conv_pixels_6x16__avx2(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k, const float* x,
                                const int64_t* pix, int64_t ldx, const float* b, float* c, int64_t ldc, bool accumulate,
                                const ConvPixelsOutF32* out) {
  f32_conv_pixels_ukernel__avx2<6, 2>(taps, tap_off, tap_blk, k, x, pix, ldx, b, c, ldc, accumulate, out);
}
void f32_conv_pixels_4x24__avx2(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k, const float* x,
                                const int64_t* pix, int64_t ldx, const float* b, float* c, int64_t ldc, bool accumulate,
                                const ConvPixelsOutF32* out) {
  f32_conv_pixels_ukernel__avx2<4, 3>(taps, tap_off, tap_blk, k, x, pix, ldx, b, c, ldc, accumulate, out);
}
void f32_conv_pixels_3x32__avx2(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k, const float* x,
                                const int64_t* pix, int64_t ldx, const float* b, float* c, int64_t ldc, bool accumulate,
                                const ConvPixelsOutF32* out) {
  f32_conv_pixels_ukernel__avx2<3, 4>(taps, tap_off, tap_blk, k, x, pix, ldx, b, c, ldc, accumulate, out);
}

}  // namespace

const GemmKernelF32& gemm_kernel_f32_avx2() {
  static const GemmKernelF32 k{Isa::avx2, kMr, kNr, 240, 256, 4096, f32_gemm_ukernel__avx2,
                               {{6, 16, f32_conv_taps_6x16__avx2}, {4, 24, f32_conv_taps_4x24__avx2}},
                               {{6, 16, f32_conv_pixels_6x16__avx2},
                                {4, 24, f32_conv_pixels_4x24__avx2},
                                {3, 32, f32_conv_pixels_3x32__avx2}},
                               /*store_hardswish=*/true, gemm_rows<Ymm>, /*rows_max=*/4};
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options

