// f32 GEMM micro-kernel for AVX-512: a 12 x 32 tile in 24 zmm accumulators (FMA), masked stores at
// the right edge. Compiled for AVX-512 by the target pragma below and only called when
// active_isa() says the machine has it (see Note [ISA code in one binary]).
// GCC 12 warns that the undefined upper half in its own _mm512 cast/convert intrinsics is
// uninitialized (GCC bug 105593); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/prefetch.h"

// Note [ISA code in one binary]
// Each *_avx512.cc / *_avx2.cc file switches the target with `#pragma GCC target` *after* its
// includes, so only the functions defined in the file get the wider instructions. Inline
// functions from headers (std::, kiln) stay baseline: were they compiled with -mavx512f, the linker
// could keep that copy for the whole program and crash machines without AVX-512. The library
// itself is built for baseline x86-64; nothing uses -march=native.
#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx2_util.h"
#include "kernels/cpu/avx512_util.h"
#include "kernels/cpu/gemm_rows.h"
#include "kernels/cpu/tile_store.h"

namespace kiln::kernels::cpu {

namespace {

constexpr int kMr = 12, kNr = 32;

// The tiles' epilogue pieces (Note [A branch-free tile store] in gemm_f32_avx2.cc).
using avx2::clamp;  // the pixel tiles' 8-wide rows
using avx2::hardswish;
using avx512::clamp;
using avx512::hardswish;

// The vectors of the rows kernel (kernels/cpu/gemm_rows.h), whose row store the 12 x 32 tile uses
// too: a partial row is read and written with masked loads and stores.
struct Zmm {
  using Reg = __m512;
  static constexpr int kWidth = 16;
  static Reg zero() { return _mm512_setzero_ps(); }
  static Reg load(const float* p) { return _mm512_loadu_ps(p); }
  static Reg broadcast(const float* p) { return _mm512_set1_ps(*p); }
  static Reg fma(Reg a, Reg b, Reg c) { return _mm512_fmadd_ps(a, b, c); }
  static Reg add(Reg a, Reg b) { return _mm512_add_ps(a, b); }
  static void store_row(float* c, int n, Reg r0, Reg r1, float alpha, float beta) {
    const __mmask16 m0 = n >= 16 ? __mmask16(0xffff) : __mmask16((1u << n) - 1);
    const __mmask16 m1 = n >= 32 ? __mmask16(0xffff) : n > 16 ? __mmask16((1u << (n - 16)) - 1) : __mmask16(0);
    const __m512 va = _mm512_set1_ps(alpha);
    r0 = _mm512_mul_ps(va, r0), r1 = _mm512_mul_ps(va, r1);
    if (beta != 0.0f) {
      const __m512 vb = _mm512_set1_ps(beta);
      r0 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m0, c), r0);
      r1 = _mm512_fmadd_ps(vb, _mm512_maskz_loadu_ps(m1, c + 16), r1);
    }
    _mm512_mask_storeu_ps(c, m0, r0);
    _mm512_mask_storeu_ps(c + 16, m1, r1);
  }
};

// Note [12 x 32 AVX-512 tile]
// 24 of the 32 zmm registers hold the C tile (12 rows x 2 vectors), two hold the B row, one the
// broadcast A element: 24 FMAs per 2 B loads and 12 broadcasts, enough independent chains to cover
// Zen 5's FMA latency on both FMA pipes. The packed A micro-panel (12 x kc) streams from L2, so
// it is prefetched a few k-steps ahead, and so is the B panel (768 x 32 floats, 96 KiB, is larger
// than L1: on the Xeon, BERT's 768 -> 768 products went 0.55 -> 0.52 ms at batch 1 on two
// threads); the C tile is prefetched before the k loop so its first load in the epilogue does not
// miss.
template <int M>
void f32_gemm_ukernel_12x32__avx512(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                                    int n, float alpha, float beta, uintptr_t l2_next, uintptr_t l2_end) {
  __m512 acc0[M], acc1[M];
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) {
    acc0[i] = acc1[i] = _mm512_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + 16), _MM_HINT_T0);
  }
  L2Stream l2(l2_next, l2_end, k);
#pragma GCC unroll 4
  for (int64_t p = 0; p < k; ++p) {
    // As integers: the last steps' A and B rows lie past their panels (prefetch.h).
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<uintptr_t>(a) + 8 * kMr * sizeof(float)), _MM_HINT_T0);
    l2.step();
    const uintptr_t b_ahead = reinterpret_cast<uintptr_t>(b) + static_cast<uintptr_t>(8 * ldb) * sizeof(float);
    _mm_prefetch(reinterpret_cast<const char*>(b_ahead), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(b_ahead + 64), _MM_HINT_T0);
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc0[i] = _mm512_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm512_fmadd_ps(ai, b1, acc1[i]);
    }
    a += kMr;
    b += ldb;
  }
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) Zmm::store_row(c + i * ldc, n, acc0[i], acc1[i], alpha, beta);
}

void f32_gemm_ukernel__avx512(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
                              int n, float alpha, float beta, uintptr_t l2_next, uintptr_t l2_end) {
  switch (m) {
    case 1: return f32_gemm_ukernel_12x32__avx512<1>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 2: return f32_gemm_ukernel_12x32__avx512<2>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 3: return f32_gemm_ukernel_12x32__avx512<3>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 4: return f32_gemm_ukernel_12x32__avx512<4>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 5: return f32_gemm_ukernel_12x32__avx512<5>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 6: return f32_gemm_ukernel_12x32__avx512<6>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 7: return f32_gemm_ukernel_12x32__avx512<7>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 8: return f32_gemm_ukernel_12x32__avx512<8>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 9: return f32_gemm_ukernel_12x32__avx512<9>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 10: return f32_gemm_ukernel_12x32__avx512<10>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    case 11: return f32_gemm_ukernel_12x32__avx512<11>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
    default: return f32_gemm_ukernel_12x32__avx512<12>(k, a, b, ldb, c, ldc, n, alpha, beta, l2_next, l2_end);
  }
}

// The direct convolution's tiles (GemmTapsUkernelF32): M rows of an MR-row A panel by NV vectors
// of 16 columns, NV * M <= 24 accumulators; the B rows of each tap start at their own offset. B is
// read with masked loads, so the tile may end at the last valid column of the activations (the
// rows of one tap are a channel, ldb floats, apart).
// With kHalo, c and the residual are output planes (Note [Storing across the halo] in
// conv_direct.cc): vector v of a row goes to at most two runs, lanes mask0[v] at offset off0[v]
// and lanes mask1[v] at off1[v] (the next output row); without, one run, lanes mask[v] at 16 * v.
template <int MR, int NV, int M, bool kHalo>
void f32_conv_taps_ukernel__avx512(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                   int64_t ldb, float* c, int64_t ldc, int n, bool accumulate,
                                   const ConvTileEpilogueF32* ep, const ConvTileHaloF32* halo) {
  static_assert(M * NV <= 24 && M <= MR);
  __m512 acc[M][NV];
  __mmask16 mask[NV], mask0[NV], mask1[NV];
  int64_t off0[NV], off1[NV];
  // Vector v's first product column is output row oh, column ow (one division per tile).
  int64_t oh = 0, ow = 0;
  if constexpr (kHalo) oh = halo->q0 / halo->wq, ow = halo->q0 - oh * halo->wq;
#pragma GCC unroll 3
  for (int v = 0; v < NV; ++v) {
    const int left = n - 16 * v;
    mask[v] = left >= 16 ? __mmask16(0xffff) : left > 0 ? __mmask16((1u << left) - 1) : __mmask16(0);
    if constexpr (kHalo) {
      // Columns ow .. ow + 15 of row oh: the next row starts at lane wq - ow.
      const int64_t first = ow >= halo->wo ? 0 : halo->wo - ow < 16 ? halo->wo - ow : 16;  // lanes on row oh
      const int64_t next = halo->wq - ow;  // lane of row oh + 1's column 0 (>= 1)
      const unsigned below_next = next >= 16 ? 0xffffu : (1u << next) - 1;
      const unsigned past_row = next + halo->wo >= 16 ? 0xffffu : (1u << (next + halo->wo)) - 1;
      mask0[v] = static_cast<__mmask16>(((1u << first) - 1) & mask[v]);
      mask1[v] = static_cast<__mmask16>(past_row & ~below_next & mask[v]);
      off0[v] = oh * halo->wo + ow;
      off1[v] = mask1[v] != 0 ? (oh + 1) * halo->wo - next : off0[v];
      ow += 16;  // wq >= 16: the next vector starts at most one row further
      if (ow >= halo->wq) ow -= halo->wq, ++oh;
    } else {
      mask0[v] = mask[v], mask1[v] = 0, off0[v] = off1[v] = 16 * v;
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 3
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + off0[0]), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + off0[NV - 1] + 15), _MM_HINT_T0);
  }
  for (int t = 0; t < taps; ++t) {
    const float* bt = b + tap_off[t];
#pragma GCC unroll 4
    for (int64_t p = 0; p < k; ++p) {
      _mm_prefetch(reinterpret_cast<const char*>(a + 8 * MR), _MM_HINT_T0);
      __m512 bv[NV];
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], bt + 16 * v);
#pragma GCC unroll 12
      for (int i = 0; i < M; ++i) {
        const __m512 ai = _mm512_set1_ps(a[i]);
#pragma GCC unroll 3
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
      }
      a += MR;
      bt += ldb;
    }
  }
  // Note [Epilogue in the store]: bias, residual and a clamp cost a few instructions on registers
  // that are stored anyway; as a pass of their own they reload and store the tile again. The
  // options are decided once per tile, not per vector (Note [A branch-free tile store] in
  // gemm_f32_avx2.cc).
  const bool fin = ep != nullptr;
  const __m512 lo = _mm512_set1_ps(fin && ep->act != ConvTileEpilogueF32::Act::none ? 0.0f : -__builtin_inff());
  const __m512 hi = _mm512_set1_ps(fin && ep->act == ConvTileEpilogueF32::Act::relu6 ? 6.0f : __builtin_inff());
  const float* bias = fin && ep->bias != nullptr ? ep->bias : kTileZeroBias;
  const float* res = fin ? ep->residual : nullptr;
  const int64_t ldr = fin ? ep->ldr : 0;
  auto store = [&](auto acc_tag, auto fin_tag, auto res_tag, auto act_tag) {
    constexpr bool kAcc = decltype(acc_tag)::value, kFin = decltype(fin_tag)::value;
    constexpr bool kHardswish = decltype(act_tag)::value;
    constexpr TileResidual kRes = decltype(res_tag)::value;
    // Vector v of the row at p (the tile's c or residual row): one masked load, or two merged.
    auto load = [&](const float* p, int v) {
      const __m512 r = _mm512_maskz_loadu_ps(mask0[v], p + off0[v]);
      if constexpr (kHalo) return _mm512_mask_loadu_ps(r, mask1[v], p + off1[v]);
      return r;
    };
#pragma GCC unroll 12
    for (int i = 0; i < M; ++i) {
      float* cr = c + i * ldc;
      const __m512 bv = _mm512_set1_ps(bias[i]);
#pragma GCC unroll 3
      for (int v = 0; v < NV; ++v) {
        __m512 r = acc[i][v];
        if constexpr (kAcc) r = _mm512_add_ps(r, load(cr, v));
        if constexpr (kFin) {
          r = _mm512_add_ps(r, bv);
          if constexpr (kRes == TileResidual::before) r = _mm512_add_ps(r, load(res + i * ldr, v));
          r = kHardswish ? hardswish(r) : clamp(r, lo, hi);
          if constexpr (kRes == TileResidual::after) r = _mm512_add_ps(r, load(res + i * ldr, v));
        }
        _mm512_mask_storeu_ps(cr + off0[v], mask0[v], r);
        if constexpr (kHalo) _mm512_mask_storeu_ps(cr + off1[v], mask1[v], r);
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

// Rows m of an MR x 16 NV tile, storing into a product plane or (kHalo) across the halo.
template <int MR, int NV, bool kHalo>
void f32_conv_taps_rows__avx512(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                const ConvTileEpilogueF32* ep, const ConvTileHaloF32* halo) {
#define KILN_TAPS_CASE(M)                                                                                           \
  case M:                                                                                                           \
    if constexpr (M <= MR)                                                                                          \
      return f32_conv_taps_ukernel__avx512<MR, NV, M, kHalo>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep, \
                                                             halo);                                                 \
    break;
  switch (m) {
    KILN_TAPS_CASE(1) KILN_TAPS_CASE(2) KILN_TAPS_CASE(3) KILN_TAPS_CASE(4) KILN_TAPS_CASE(5) KILN_TAPS_CASE(6)
    KILN_TAPS_CASE(7) KILN_TAPS_CASE(8) KILN_TAPS_CASE(9) KILN_TAPS_CASE(10) KILN_TAPS_CASE(11)
    default: break;
  }
#undef KILN_TAPS_CASE
  f32_conv_taps_ukernel__avx512<MR, NV, MR, kHalo>(taps, tap_off, k, a, b, ldb, c, ldc, n, accumulate, ep, halo);
}

void f32_conv_taps_12x32__avx512(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                 int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                 const ConvTileEpilogueF32* ep) {
  f32_conv_taps_rows__avx512<12, 2, false>(taps, tap_off, k, a, b, ldb, c, ldc, m, n, accumulate, ep, nullptr);
}
void f32_conv_taps_12x32_halo__avx512(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                      int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                      const ConvTileEpilogueF32* ep, const ConvTileHaloF32& halo) {
  f32_conv_taps_rows__avx512<12, 2, true>(taps, tap_off, k, a, b, ldb, c, ldc, m, n, accumulate, ep, &halo);
}
void f32_conv_taps_8x48__avx512(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                const ConvTileEpilogueF32* ep) {
  f32_conv_taps_rows__avx512<8, 3, false>(taps, tap_off, k, a, b, ldb, c, ldc, m, n, accumulate, ep, nullptr);
}
void f32_conv_taps_8x48_halo__avx512(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                     int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                     const ConvTileEpilogueF32* ep, const ConvTileHaloF32& halo) {
  f32_conv_taps_rows__avx512<8, 3, true>(taps, tap_off, k, a, b, ldb, c, ldc, m, n, accumulate, ep, &halo);
}

// The direct convolution with output pixels as rows (ConvPixelsUkernelF32): MR pixels by NV
// vectors of 16 output channels. Each step broadcasts one activation per pixel (each from its own
// offset, so the pixels need not be adjacent) and loads NV vectors of the packed filter panel.
//
// Note [Three channels a tap]: a stem (3 input channels, 7x7 or 3x3 taps) runs 3 steps a tap, and
// the step loop's entry and exit around them cost the tile 14% on a Xeon with two FMA ports
// (ResNet's 7x7 stem tile, 208 -> 236 GFLOP/s of a 246 peak, the tile alone); with k known to be 3
// the taps loop carries the steps unrolled.
template <int MR, int NV, int K>
[[gnu::always_inline]] inline void pixel_steps(__m512 (&acc)[MR][NV], int taps, const int64_t* tap_off,
                                               const int32_t* tap_blk, int64_t k, const float* x,
                                               const int64_t (&off)[MR], int64_t ldx, const float* b) {
  auto step = [&](const float* xt) {
    _mm_prefetch(reinterpret_cast<const char*>(b + 8 * 16 * NV), _MM_HINT_T0);
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(xt[off[i]]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(xi, bv[v], acc[i][v]);
    }
    b += 16 * NV;
  };
  const float* const b0 = b;
  for (int t = 0; t < taps; ++t) {
    const float* xt = x + tap_off[t];
    if (tap_blk != nullptr) b = b0 + tap_blk[t] * k * (16 * NV);
    if constexpr (K > 0) {
#pragma GCC unroll 4
      for (int p = 0; p < K; ++p) step(xt + p * ldx);
    } else {
#pragma GCC unroll 2
      for (int64_t p = 0; p < k; ++p, xt += ldx) step(xt);
    }
  }
}

// The first two rounds of transposing N rows (N a multiple of 4) of 16 floats, within each 128-bit
// lane: rows paired (unpack), then pairs of pairs (shuffle), after which lane l of u[h + j] holds
// rows h .. h + 3 of column 4l + j. Note [A transposed store] and Note [Staged pixel stores] finish
// the transpose across lanes.
template <int N>
[[gnu::always_inline]] inline void transpose_in_lanes(const __m512 (&r)[N], __m512 (&u)[N]) {
  static_assert(N % 4 == 0);
  __m512 t[N];
#pragma GCC unroll 8
  for (int h = 0; h < N; h += 2) {
    t[h] = _mm512_unpacklo_ps(r[h], r[h + 1]);
    t[h + 1] = _mm512_unpackhi_ps(r[h], r[h + 1]);
  }
#pragma GCC unroll 4
  for (int h = 0; h < N; h += 4) {
    u[h] = _mm512_shuffle_ps(t[h], t[h + 2], 0x44);
    u[h + 1] = _mm512_shuffle_ps(t[h], t[h + 2], 0xEE);
    u[h + 2] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0x44);
    u[h + 3] = _mm512_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
  }
}

template <int MR, int NV>
void f32_conv_pixels_ukernel__avx512(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k,
                                     const float* x, const int64_t* pix, int64_t ldx, const float* b, float* c,
                                     int64_t ldc, bool accumulate, const ConvPixelsOutF32* out) {
  static_assert(MR * NV <= 24 && MR <= 8);
  __m512 acc[MR][NV];
  int64_t off[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) {
    off[i] = pix[i];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  if (k == 3)  // Note [Three channels a tap]
    pixel_steps<MR, NV, 3>(acc, taps, tap_off, tap_blk, k, x, off, ldx, b);
  else
    pixel_steps<MR, NV, 0>(acc, taps, tap_off, tap_blk, k, x, off, ldx, b);
  if (accumulate) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_add_ps(acc[i][v], _mm512_loadu_ps(c + i * ldc + 16 * v));
  }
  if (out == nullptr) {
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) _mm512_storeu_ps(c + i * ldc + 16 * v, acc[i][v]);
    return;
  }
  // Note [A transposed store]: each 8 x 16 block (pixels x channels; an eighth row of zeros when
  // MR == 7) is transposed in registers into 16 channel rows of 8 pixels, in three rounds of
  // shuffles (32 in all), each row then finished (bias, residual, clamp) and stored masked to its
  // first m pixels.
  const ConvTileEpilogueF32& ep = out->ep;
  const __mmask8 pm = static_cast<__mmask8>((1u << out->m) - 1);
  // Note [A branch-free tile store] (gemm_f32_avx2.cc)
  const __m256 lo = _mm256_set1_ps(ep.act != ConvTileEpilogueF32::Act::none ? 0.0f : -__builtin_inff());
  const __m256 hi = _mm256_set1_ps(ep.act == ConvTileEpilogueF32::Act::relu6 ? 6.0f : __builtin_inff());
  const float* bias = ep.bias != nullptr ? ep.bias : kTileZeroBias;
  auto store = [&](auto res_tag, auto act_tag) {
    constexpr TileResidual kRes = decltype(res_tag)::value;
    constexpr bool kHardswish = decltype(act_tag)::value;
    auto finish_row = [&](int j, __m256 r) {  // channel j of the tile
      if (j >= out->n) return;
      r = _mm256_add_ps(r, _mm256_set1_ps(bias[j]));
      if constexpr (kRes == TileResidual::before)
        r = _mm256_add_ps(r, _mm256_maskz_loadu_ps(pm, ep.residual + j * ep.ldr));
      r = kHardswish ? hardswish(r) : clamp(r, lo, hi);
      if constexpr (kRes == TileResidual::after)
        r = _mm256_add_ps(r, _mm256_maskz_loadu_ps(pm, ep.residual + j * ep.ldr));
      _mm256_mask_storeu_ps(out->y + j * out->ldy, pm, r);
    };
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      __m512 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = i < MR ? acc[i][v] : _mm512_setzero_ps();
      __m512 u[8];
      transpose_in_lanes(r, u);
#pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) {  // columns j, 4 + j, 8 + j, 12 + j: rows 0-3 in u[j], 4-7 in u[4 + j]
        const __m512 w02 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(2, 0, 2, 0));
        const __m512 w13 = _mm512_shuffle_f32x4(u[j], u[4 + j], _MM_SHUFFLE(3, 1, 3, 1));
        const __m512 x02 = _mm512_shuffle_f32x4(w02, w02, _MM_SHUFFLE(3, 1, 2, 0));  // columns j | 8 + j
        const __m512 x13 = _mm512_shuffle_f32x4(w13, w13, _MM_SHUFFLE(3, 1, 2, 0));  // columns 4 + j | 12 + j
        finish_row(16 * v + j, _mm512_castps512_ps256(x02));
        finish_row(16 * v + 8 + j, _mm512_extractf32x8_ps(x02, 1));
        finish_row(16 * v + 4 + j, _mm512_castps512_ps256(x13));
        finish_row(16 * v + 12 + j, _mm512_extractf32x8_ps(x13, 1));
      }
    }
  };
  with_tile_store(ep, store);
}

void f32_conv_pixels_7x48__avx512(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k,
                                  const float* x, const int64_t* pix, int64_t ldx, const float* b, float* c,
                                  int64_t ldc, bool accumulate, const ConvPixelsOutF32* out) {
  f32_conv_pixels_ukernel__avx512<7, 3>(taps, tap_off, tap_blk, k, x, pix, ldx, b, c, ldc, accumulate, out);
}
void f32_conv_pixels_6x64__avx512(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k,
                                  const float* x, const int64_t* pix, int64_t ldx, const float* b, float* c,
                                  int64_t ldc, bool accumulate, const ConvPixelsOutF32* out) {
  f32_conv_pixels_ukernel__avx512<6, 4>(taps, tap_off, tap_blk, k, x, pix, ldx, b, c, ldc, accumulate, out);
}
void f32_conv_pixels_8x32__avx512(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k,
                                  const float* x, const int64_t* pix, int64_t ldx, const float* b, float* c,
                                  int64_t ldc, bool accumulate, const ConvPixelsOutF32* out) {
  f32_conv_pixels_ukernel__avx512<8, 2>(taps, tap_off, tap_blk, k, x, pix, ldx, b, c, ldc, accumulate, out);
}

// Note [Staged pixel stores] (conv_direct.cc): a run of m pixels' sums (pixel-major: pixel i's
// nr channels at c + i * ldc) goes to y's channel planes 16 pixels by 16 channels at a time: the 16
// rows loaded, transposed in registers (four rounds of 16 shuffles) into 16 channel rows of 16
// pixels, each finished with out.ep (bias, residual, clamp or hardswish) and stored masked to the
// run's pixels.
void f32_conv_pixels_store__avx512(const float* c, int64_t ldc, const ConvPixelsOutF32& out) {
  const ConvTileEpilogueF32& ep = out.ep;
  const __m512 lo = _mm512_set1_ps(ep.act != ConvTileEpilogueF32::Act::none ? 0.0f : -__builtin_inff());
  const __m512 hi = _mm512_set1_ps(ep.act == ConvTileEpilogueF32::Act::relu6 ? 6.0f : __builtin_inff());
  const float* bias = ep.bias != nullptr ? ep.bias : kTileZeroBias;
  auto store = [&](auto res_tag, auto act_tag) {
    constexpr TileResidual kRes = decltype(res_tag)::value;
    constexpr bool kHardswish = decltype(act_tag)::value;
    for (int p0 = 0; p0 < out.m; p0 += 16) {
      const int np = std::min(16, out.m - p0);
      const __mmask16 pm = static_cast<__mmask16>((1u << np) - 1);
      for (int j0 = 0; j0 < out.n; j0 += 16) {
        __m512 r[16], u[16];
#pragma GCC unroll 16
        for (int i = 0; i < 16; ++i) r[i] = i < np ? _mm512_loadu_ps(c + (p0 + i) * ldc + j0) : _mm512_setzero_ps();
        transpose_in_lanes(r, u);
        auto finish = [&](int j, __m512 v) {  // channel j0 + j, all 16 pixels
          if (j0 + j >= out.n) return;
          const int64_t ch = j0 + j;
          v = _mm512_add_ps(v, _mm512_set1_ps(bias[ch]));
          if constexpr (kRes == TileResidual::before)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(pm, ep.residual + ch * ep.ldr + p0));
          v = kHardswish ? hardswish(v) : clamp(v, lo, hi);
          if constexpr (kRes == TileResidual::after)
            v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(pm, ep.residual + ch * ep.ldr + p0));
          _mm512_mask_storeu_ps(out.y + ch * out.ldy + p0, pm, v);
        };
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {  // columns j, 4 + j, 8 + j, 12 + j from u[j], u[4 + j], u[8 + j], u[12 + j]
          const __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
          const __m512 w0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
          const __m512 w1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
          finish(j, _mm512_shuffle_f32x4(v0, w0, 0x88));
          finish(4 + j, _mm512_shuffle_f32x4(v1, w1, 0x88));
          finish(8 + j, _mm512_shuffle_f32x4(v0, w0, 0xDD));
          finish(12 + j, _mm512_shuffle_f32x4(v1, w1, 0xDD));
        }
      }
    }
  };
  with_tile_store(ep, store);
}

// Note [Packing A in registers]
// Packing a row-major A is a transpose, and the portable loop moved it a float at a time (12
// scalar loads and stores a k-step): ConvNeXt's 384 -> 96 pointwise product (3136 rows, N = 96, so
// few multiply-adds per A element) spent 17% of its time in pack_a and ran at 0.82x ONNX Runtime's
// MatMul on one thread. Here 16 k-steps at a time: the 12 rows' 16 floats loaded as vectors (rows
// past mv as zeros), transposed in registers, each k-step's 12 floats stored under a mask.
void pack_a_rows_12__avx512(int64_t mv, int64_t kc, const float* src, int64_t a_rs, float* dst) {
  const float* rows[kMr];
  for (int i = 0; i < kMr; ++i) rows[i] = src + std::min<int64_t>(i, mv - 1) * a_rs;
  int64_t p0 = 0;
  for (; p0 + 16 <= kc; p0 += 16) {
    __m512 r[16];
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      _mm_prefetch(reinterpret_cast<const char*>(rows[i] + p0 + 64), _MM_HINT_T0);
      r[i] = i < mv ? _mm512_loadu_ps(rows[i] + p0) : _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int i = kMr; i < 16; ++i) r[i] = _mm512_setzero_ps();
    avx512::transpose16(r);
#pragma GCC unroll 16
    for (int j = 0; j < 16; ++j) _mm512_mask_storeu_ps(dst + (p0 + j) * kMr, __mmask16(0x0fff), r[j]);
  }
  for (int64_t p = p0; p < kc; ++p)
    for (int i = 0; i < kMr; ++i) dst[p * kMr + i] = i < mv ? rows[i][p] : 0.0f;
}

}  // namespace

// Note [AVX-512 blocking]
// kc = 768 deep slices, mc = 144 rows (A block 432 KiB in the 1 MiB L2), nc = 2048 columns (B
// block 6 MiB in L3). The textbook choice keeps the kc x 32 B panel in L1 (kc = 256 here), but on
// Zen 5 the cost that dominated was the read-modify-write of the C tile once per k-slice, worst
// for power-of-two leading dimensions whose 12 rows share one L1 set: at 2048^3 on one thread
// kc = 256 ran at 176 GFLOP/s against 206 for kc = 768 (B panel streaming from L2 at 128 bytes
// per 24 FMAs costs nothing measurable). 1024^3: 194 against 201.
const GemmKernelF32& gemm_kernel_f32_avx512() {
  static const GemmKernelF32 k{Isa::avx512, kMr, kNr, 144, 768, 2048, f32_gemm_ukernel__avx512,
                               {{12, 32, f32_conv_taps_12x32__avx512, f32_conv_taps_12x32_halo__avx512, 16},
                                {8, 48, f32_conv_taps_8x48__avx512, f32_conv_taps_8x48_halo__avx512, 16}},
                               {{7, 48, f32_conv_pixels_7x48__avx512},
                                {6, 64, f32_conv_pixels_6x64__avx512},
                                {8, 32, f32_conv_pixels_8x32__avx512}},
                               /*store_hardswish=*/true, gemm_rows<Zmm>, /*rows_max=*/4, f32_conv_pixels_store__avx512,
                               pack_a_rows_12__avx512};
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
