// The register-tiled f32 GEMM micro-kernels, one set per ISA (gemm_f32_<isa>.cc), and the
// table the packed GEMM driver (gemm.cc) picks from at run time.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/cpu/isa.h"

namespace kiln::kernels::cpu {

// C[0:m, 0:n] = alpha * A~ @ B~ + beta * C (beta == 0: C is not read) for one mr x nr tile, where
// A~ is a packed micro-panel (k steps of mr floats, rows >= m zero-padded) and B~ is k rows of nr
// floats, row p at b + p * ldb (a packed panel with ldb == nr, or B itself when its rows are
// contiguous: the skinny path). 1 <= m <= mr, 1 <= n <= nr; all nr columns of B~ are readable.
// While it runs, the tile fetches the lines [l2_next, l2_end) into L2, evenly over its k steps
// (the next B panel: Note [The next B panel] in gemm_packed.cc, L2Stream in prefetch.h); an empty
// range fetches nothing. Addresses are integers: they may lie past any buffer (prefetch.h).
using GemmUkernelF32 = void (*)(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                                int m, int n, float alpha, float beta, uintptr_t l2_next, uintptr_t l2_end);

// The same product for a few rows of A read where they lie (row i at a + i * lda, unit stride), with
// no packed micro-panel: Note [Few rows read in place] in gemm_packed.cc. 1 <= m <= rows_max.
using GemmRowsUkernelF32 = void (*)(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c,
                                    int64_t ldc, int m, int n, float alpha, float beta);

// The direct convolution's tile (Note [Direct convolution] in conv_direct.cc): C[0:m, 0:n] =
// A~ @ B~ (+ C when accumulate), where A~ is taps * k steps of mr floats (tap-major, rows >= m
// zero) and B~ row (t, p) is b + tap_off[t] + p * ldb: each filter tap reads the activations at
// its own shift, so no im2col matrix is ever written. Only the first n columns of each B~ row are
// read (masked loads), so B~ may end at the last valid column.
// With `ep` (the last K slice), the tile is finished in registers before its only store:
// + bias[i], + residual (before or after), relu / relu6 (Note [Epilogue in the store]), or
// hardswish without a residual where the kernel set says it can (GemmKernelF32::store_hardswish).
// sigmoid and silu only in the blocked (NCHWc) convolutions' tiles (conv_nchwc_avx512.cc:
// FinishExp); the GEMM tiles' stores never see them.
struct ConvTileEpilogueF32 {
  enum class Act { none, relu, relu6, hardswish, sigmoid, silu, gelu };
  const float* bias = nullptr;      // bias[i] for tile row i, or nullptr
  const float* residual = nullptr;  // residual[i * ldr + j], or nullptr
  int64_t ldr = 0;
  bool residual_before_activation = false;
  Act act = Act::none;
};
// What the tiles' stores decide once per tile (Note [A branch-free tile store] in
// gemm_f32_avx2.cc): where the residual goes, and hardswish or a clamp, as compile-time tags.
enum class TileResidual { none, before, after };
template <TileResidual R>
using TileResidualTag = std::integral_constant<TileResidual, R>;
inline TileResidual tile_residual(const ConvTileEpilogueF32* ep) {
  if (ep == nullptr || ep->residual == nullptr) return TileResidual::none;
  return ep->residual_before_activation ? TileResidual::before : TileResidual::after;
}
using TileHardswish = std::true_type;
using TileClamp = std::false_type;
// The bias of a tile without one (at most 64 rows or channels).
alignas(64) inline constexpr float kTileZeroBias[64] = {};

using GemmTapsUkernelF32 = void (*)(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                    int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                    const ConvTileEpilogueF32* ep);

// The same tile stored straight into the output across the halo (Note [Storing across the halo]
// in conv_direct.cc): the tile's columns are product columns halo.q0 .. halo.q0 + n - 1, column q
// being output row q / wq, column q % wq, where columns wo .. wq - 1 of each row are the halo and
// are not stored. c (ldc apart per tile row) and the residual (ldr apart) point at column 0 of
// output planes wo floats wide; accumulate reads c the same way. Needs wq >= 16 on AVX-512 (a
// vector covers at most two output rows).
struct ConvTileHaloF32 {
  int64_t q0 = 0, wq = 0, wo = 0;
};
using GemmTapsHaloUkernelF32 = void (*)(int taps, const int64_t* tap_off, int64_t k, const float* a, const float* b,
                                        int64_t ldb, float* c, int64_t ldc, int m, int n, bool accumulate,
                                        const ConvTileEpilogueF32* ep, const ConvTileHaloF32& halo);

// One register tile shape of the direct convolution (mr x nr, ukernel == nullptr: none;
// halo_ukernel == nullptr: the tile cannot store across the halo).
struct GemmTapsKernelF32 {
  int mr = 0, nr = 0;
  GemmTapsUkernelF32 ukernel = nullptr;
  GemmTapsHaloUkernelF32 halo_ukernel = nullptr;
  int64_t min_halo_wq = 0;  // the narrowest product rows halo_ukernel takes
};

// The direct convolution's tile with output pixels as rows (Note [Pixels as rows] in
// conv_direct.cc): for each of mr pixels i and nr output channels j,
//   C[i, j] (+)= sum over taps t and k channels p of
//                x[pix[i] + tap_off[t] + p * ldx] * B~[(blk(t), p), j],
// where B~ is a packed filter panel (k rows of nr floats per filter tap, tap-major) and C row i is
// at c + i * ldc. blk(t) = tap_blk[t], the filter tap whose rows tap t multiplies, or with
// tap_blk == nullptr t itself (every tap in order): a tile can leave out taps that read only
// padding for all its pixels (Note [Taps that read only padding] in conv_direct.cc). All mr rows
// are computed and stored: a partial tile repeats a valid pixel.
// With `out` (the last K slice) the tile goes to y instead, transposed: y[j * ldy + i] for the
// first m pixels and n channels, finished on the way with out->ep (bias[j] per channel,
// residual[j * ldr + i], relu / relu6); c is then only read (when accumulate).
struct ConvPixelsOutF32 {
  float* y = nullptr;
  int64_t ldy = 0;
  int m = 0, n = 0;
  ConvTileEpilogueF32 ep;
};
using ConvPixelsUkernelF32 = void (*)(int taps, const int64_t* tap_off, const int32_t* tap_blk, int64_t k,
                                      const float* x, const int64_t* pix, int64_t ldx, const float* b, float* c,
                                      int64_t ldc, bool accumulate, const ConvPixelsOutF32* out);
struct ConvPixelsKernelF32 {
  int mr = 0, nr = 0;
  ConvPixelsUkernelF32 ukernel = nullptr;
};
// The pixel tiles' staged store (Note [Staged pixel stores] in conv_direct.cc): the sums of out.m
// pixels (pixel i's out.n channels at c + i * ldc) transposed into y (y[j * ldy + i]) and finished
// with out.ep, as the tile's own store with `out` does for one tile. Reads c only.
using ConvPixelsStoreF32 = void (*)(const float* c, int64_t ldc, const ConvPixelsOutF32& out);

// A row-major A block's mv <= mr rows (kc floats each, a_rs apart) packed into an mr-row micro-panel
// of kc steps, rows past mv zero (Note [Packing A row-major] in gemm_packed.cc).
using GemmPackRowsF32 = void (*)(int64_t mv, int64_t kc, const float* src, int64_t a_rs, float* dst);

struct GemmKernelF32 {
  Isa isa;
  int mr, nr;       // register tile
  int64_t mc, kc, nc;  // cache blocks: A block mc x kc in L2, B panel kc x nr in L1, B block kc x nc
  GemmUkernelF32 ukernel;
  // The direct convolution's tiles, in order of preference (Note [Direct convolution tiles] in
  // conv_direct.cc); none: this ISA convolves through im2col only.
  GemmTapsKernelF32 taps[2];
  ConvPixelsKernelF32 pixels[3];  // the pixel-row tiles (Note [Pixels as rows]); none: columns only
  bool store_hardswish = false;   // the tiles' stores apply Act::hardswish (without a residual)
  GemmRowsUkernelF32 rows_ukernel = nullptr;  // products of at most rows_max rows; none: pack A
  int rows_max = 0;
  ConvPixelsStoreF32 pixels_store = nullptr;  // none: each pixel tile stores itself
  GemmPackRowsF32 pack_a_rows = nullptr;      // none: the portable packing loop
};

const GemmKernelF32& gemm_kernel_f32_scalar();
const GemmKernelF32& gemm_kernel_f32_avx2();
const GemmKernelF32& gemm_kernel_f32_avx512();
// The kernel set of `isa` (must be supported).
const GemmKernelF32& gemm_kernel_f32(Isa isa);

}  // namespace kiln::kernels::cpu
