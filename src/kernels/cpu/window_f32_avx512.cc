// AVX-512 row primitives of kernels/cpu/window_f32.h: 16 output columns per vector, up to four
// vectors in flight, masked loads and stores for the last columns (Note [ISA code in one binary]
// in gemm_f32_avx512.cc).
// GCC 12 warns that the undefined upper half in its own _mm512 intrinsics is uninitialized (GCC
// bug 105593); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <limits>

#include "kernels/cpu/window_f32.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

namespace kiln::kernels::cpu {

namespace {

inline __mmask16 tail_mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }

// Note [Max pooling and NaN]
// vmaxps returns its second operand when either is NaN, so a running max alone can drop a NaN
// seen earlier; a mask of the unordered taps is kept beside it and the NaN written at the end.
template <int U>
inline void max_block(const float* base, const int64_t* off, int64_t taps, float* out, __mmask16 tail) {
  __m512 m[U];
  __mmask16 nan[U];
  const float* p = base + off[0];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    m[u] = U == 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p + 16 * u);
    nan[u] = _mm512_cmp_ps_mask(m[u], m[u], _CMP_UNORD_Q);
  }
  for (int64_t t = 1; t < taps; ++t) {
    p = base + off[t];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m512 v = U == 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p + 16 * u);
      nan[u] = static_cast<__mmask16>(nan[u] | _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q));
      m[u] = _mm512_max_ps(m[u], v);
    }
  }
  const __m512 qnan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    m[u] = _mm512_mask_mov_ps(m[u], nan[u], qnan);
    if (U == 1) _mm512_mask_storeu_ps(out, tail, m[u]);
    else _mm512_storeu_ps(out + 16 * u, m[u]);
  }
}

void max_taps__avx512(const float* base, const int64_t* off, int64_t taps, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) max_block<4>(base + i, off, taps, out + i, 0xffff);
  for (; i + 16 <= n; i += 16) max_block<1>(base + i, off, taps, out + i, 0xffff);
  if (i < n) max_block<1>(base + i, off, taps, out + i, tail_mask(n - i));
}

template <int U>
inline void avg_block(const float* base, const int64_t* off, int64_t taps, const float* div, float* out,
                      __mmask16 tail) {
  __m512 s[U];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) s[u] = _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u)
      s[u] = _mm512_add_ps(s[u], U == 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p + 16 * u));
  }
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    if (U == 1) {
      const __m512 d = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), tail, div);
      _mm512_mask_storeu_ps(out, tail, _mm512_div_ps(s[u], d));
    } else {
      _mm512_storeu_ps(out + 16 * u, _mm512_div_ps(s[u], _mm512_loadu_ps(div + 16 * u)));
    }
  }
}

void avg_taps__avx512(const float* base, const int64_t* off, int64_t taps, const float* div, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) avg_block<4>(base + i, off, taps, div + i, out + i, 0xffff);
  for (; i + 16 <= n; i += 16) avg_block<1>(base + i, off, taps, div + i, out + i, 0xffff);
  if (i < n) avg_block<1>(base + i, off, taps, div + i, out + i, tail_mask(n - i));
}

template <int U>
inline void fma_block(const float* base, const int64_t* off, const float* w, int64_t taps, float bias, float* out,
                      __mmask16 tail) {
  __m512 s[U];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) s[u] = _mm512_set1_ps(bias);
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
    const __m512 wt = _mm512_set1_ps(w[t]);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u)
      s[u] = _mm512_fmadd_ps(wt, U == 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p + 16 * u), s[u]);
  }
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    if (U == 1) _mm512_mask_storeu_ps(out, tail, s[u]);
    else _mm512_storeu_ps(out + 16 * u, s[u]);
  }
}

void fma_taps__avx512(const float* base, const int64_t* off, const float* w, int64_t taps, float bias, float* out,
                      int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) fma_block<4>(base + i, off, w, taps, bias, out + i, 0xffff);
  for (; i + 32 <= n; i += 32) fma_block<2>(base + i, off, w, taps, bias, out + i, 0xffff);
  for (; i + 16 <= n; i += 16) fma_block<1>(base + i, off, w, taps, bias, out + i, 0xffff);
  if (i < n) fma_block<1>(base + i, off, w, taps, bias, out + i, tail_mask(n - i));
}

void deinterleave2__avx512(const float* in, float* even, float* odd, int64_t n) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 a = _mm512_loadu_ps(in + 2 * j), b = _mm512_loadu_ps(in + 2 * j + 16);
    _mm512_storeu_ps(even + j, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(odd + j, _mm512_permutex2var_ps(a, io, b));
  }
  for (; j < n; ++j) {
    even[j] = in[2 * j];
    odd[j] = in[2 * j + 1];
  }
}

}  // namespace

WindowKernelsF32 window_kernels_f32_avx512() {
  return {max_taps__avx512, avg_taps__avx512, fma_taps__avx512, deinterleave2__avx512};
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
