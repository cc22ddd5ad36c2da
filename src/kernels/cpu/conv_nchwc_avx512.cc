// The blocked convolution's micro-kernel for AVX-512 (Note [Blocked channels] in conv_nchwc.cc):
// MR output pixels by NV blocks of 16 output channels in MR * NV zmm accumulators. Compiled for
// AVX-512 by the target pragma below (Note [ISA code in one binary] in gemm_f32_avx512.cc).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/conv_nchwc.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {
namespace {

// Each step broadcasts input channel c of each of the MR pixels (16 floats apart within a block,
// so a tap's 16 steps read one cache line per pixel) and loads the NV filter vectors of (tap, c):
// the packed filters are read once, in order.
template <int MR, int NV>
void nchwc_tile(int64_t blocks, int taps, const int64_t* tap_off, const float* x, const int64_t* pix, int64_t xblk,
                const float* w, float* y, int64_t yblk, int m, bool accumulate, const NchwcEpilogueF32* ep) {
  static_assert(MR * NV <= 28);
  __m512 acc[MR][NV];
  int64_t off[MR];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    off[i] = pix[i];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  }
  // The steps of a tap unrolled by two only, as in the NCHW pixel kernel (pixel_steps in
  // gemm_f32_avx512.cc): unrolled by 16, GCC precomputed and spilled every pixel's offset per step.
  auto step = [&](const float* xc) {
    _mm_prefetch(reinterpret_cast<const char*>(w + 8 * 16 * NV), _MM_HINT_T0);
    __m512 wv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) wv[v] = _mm512_load_ps(w + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(xc[off[i]]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(xi, wv[v], acc[i][v]);
    }
    w += 16 * NV;
  };
  for (int64_t b = 0; b < blocks; ++b, x += xblk)
    for (int t = 0; t < taps; ++t) {
      const float* xt = x + tap_off[t];
#pragma GCC unroll 2
      for (int c = 0; c < 16; ++c) step(xt + c);
    }
  if (ep == nullptr) {
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) {
        float* yv = y + v * yblk + 16 * i;
        _mm512_storeu_ps(yv, accumulate ? _mm512_add_ps(acc[i][v], _mm512_loadu_ps(yv)) : acc[i][v]);
      }
    }
    return;
  }
  using Act = NchwcEpilogueF32::Act;
  const __m512 lo = _mm512_set1_ps(ep->act == Act::relu || ep->act == Act::relu6 ? 0.0f : -__builtin_inff());
  const __m512 hi = _mm512_set1_ps(ep->act == Act::relu6 ? 6.0f : __builtin_inff());
  const bool hswish = ep->act == Act::hardswish;
  const float* res = ep->residual;
  const bool before = ep->residual_before_activation;
#pragma GCC unroll 4
  for (int v = 0; v < NV; ++v) {
    const __m512 bv = _mm512_loadu_ps(ep->bias + 16 * v);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      if (i >= m) break;
      float* yv = y + v * yblk + 16 * i;
      __m512 r = _mm512_add_ps(acc[i][v], bv);
      if (accumulate) r = _mm512_add_ps(r, _mm512_loadu_ps(yv));
      if (res != nullptr && before) r = _mm512_add_ps(r, _mm512_loadu_ps(res + v * yblk + 16 * i));
      r = hswish ? avx512::hardswish(r) : avx512::clamp(r, lo, hi);
      if (res != nullptr && !before) r = _mm512_add_ps(r, _mm512_loadu_ps(res + v * yblk + 16 * i));
      _mm512_storeu_ps(yv, r);
    }
  }
}

}  // namespace

NchwcUkernelF32 nchwc_ukernel_f32_avx512(int nv, int mr) {
  if (mr == 7) {
    switch (nv) {
      case 3: return nchwc_tile<7, 3>;
      case 2: return nchwc_tile<7, 2>;
      case 1: return nchwc_tile<7, 1>;
      default: return nullptr;
    }
  }
  switch (nv) {
    case 4: return mr == 6 ? nchwc_tile<6, 4> : nullptr;
    case 3: return mr == 8 ? nchwc_tile<8, 3> : nullptr;
    case 2: return mr == 12 ? nchwc_tile<12, 2> : nullptr;
    case 1: return mr == 12 ? nchwc_tile<12, 1> : nullptr;
    default: return nullptr;
  }
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
