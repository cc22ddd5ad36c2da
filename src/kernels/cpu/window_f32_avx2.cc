// AVX2 + FMA row primitives of kernels/cpu/window_f32.h: 8 output columns per vector, up to four
// vectors in flight, vmaskmov loads and stores for the last columns (Note [ISA code in one binary]
// in gemm_f32_avx512.cc; Note [Max pooling and NaN] in window_f32_avx512.cc).
#include <immintrin.h>

#include <limits>

#include "kernels/cpu/window_f32.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace kiln::kernels::cpu {

namespace {

// Lanes [0, n) set, n in [0, 8].
inline __m256i tail_mask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

template <int U, bool Tail>
inline __m256 load(const float* p, int u, __m256i tail) {
  if constexpr (Tail) return _mm256_maskload_ps(p, tail);
  else return _mm256_loadu_ps(p + 8 * u);
}

template <int U, bool Tail>
inline void store(float* p, int u, __m256i tail, __m256 v) {
  if constexpr (Tail) _mm256_maskstore_ps(p, tail, v);
  else _mm256_storeu_ps(p + 8 * u, v);
}

template <int U, bool Tail>
inline void max_block(const float* base, const int64_t* off, int64_t taps, float* out, __m256i tail) {
  __m256 m[U], nan[U];
  const float* p = base + off[0];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    m[u] = load<U, Tail>(p, u, tail);
    nan[u] = _mm256_cmp_ps(m[u], m[u], _CMP_UNORD_Q);
  }
  for (int64_t t = 1; t < taps; ++t) {
    p = base + off[t];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m256 v = load<U, Tail>(p, u, tail);
      nan[u] = _mm256_or_ps(nan[u], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
      m[u] = _mm256_max_ps(m[u], v);
    }
  }
  const __m256 qnan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) store<U, Tail>(out, u, tail, _mm256_blendv_ps(m[u], qnan, nan[u]));
}

void max_taps__avx2(const float* base, const int64_t* off, int64_t taps, float* out, int64_t n) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) max_block<4, false>(base + i, off, taps, out + i, all);
  for (; i + 8 <= n; i += 8) max_block<1, false>(base + i, off, taps, out + i, all);
  if (i < n) max_block<1, true>(base + i, off, taps, out + i, tail_mask(n - i));
}

template <int U, bool Tail>
inline void avg_block(const float* base, const int64_t* off, int64_t taps, const float* div, float* out,
                      __m256i tail) {
  __m256 s[U];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) s[u] = _mm256_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) s[u] = _mm256_add_ps(s[u], load<U, Tail>(p, u, tail));
  }
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) {
    __m256 d = load<U, Tail>(div, u, tail);
    if constexpr (Tail) d = _mm256_blendv_ps(_mm256_set1_ps(1.0f), d, _mm256_castsi256_ps(tail));
    store<U, Tail>(out, u, tail, _mm256_div_ps(s[u], d));
  }
}

void avg_taps__avx2(const float* base, const int64_t* off, int64_t taps, const float* div, float* out, int64_t n) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) avg_block<4, false>(base + i, off, taps, div + i, out + i, all);
  for (; i + 8 <= n; i += 8) avg_block<1, false>(base + i, off, taps, div + i, out + i, all);
  if (i < n) avg_block<1, true>(base + i, off, taps, div + i, out + i, tail_mask(n - i));
}

template <int U, bool Tail>
inline void fma_block(const float* base, const int64_t* off, const float* w, int64_t taps, float bias, float* out,
                      __m256i tail) {
  __m256 s[U];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) s[u] = _mm256_set1_ps(bias);
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
    const __m256 wt = _mm256_set1_ps(w[t]);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) s[u] = _mm256_fmadd_ps(wt, load<U, Tail>(p, u, tail), s[u]);
  }
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u) store<U, Tail>(out, u, tail, s[u]);
}

void fma_taps__avx2(const float* base, const int64_t* off, const float* w, int64_t taps, float bias, float* out,
                    int64_t n) {
  const __m256i all = _mm256_set1_epi32(-1);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) fma_block<4, false>(base + i, off, w, taps, bias, out + i, all);
  for (; i + 8 <= n; i += 8) fma_block<1, false>(base + i, off, w, taps, bias, out + i, all);
  if (i < n) fma_block<1, true>(base + i, off, w, taps, bias, out + i, tail_mask(n - i));
}

void deinterleave2__avx2(const float* in, float* even, float* odd, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 a = _mm256_loadu_ps(in + 2 * j), b = _mm256_loadu_ps(in + 2 * j + 8);
    // Per 128-bit lane [a0 a2 b0 b2 | a4 a6 b4 b6]; the 64-bit permute orders the halves.
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(even + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(odd + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  for (; j < n; ++j) {
    even[j] = in[2 * j];
    odd[j] = in[2 * j + 1];
  }
}

}  // namespace

WindowKernelsF32 window_kernels_f32_avx2() {
  return {max_taps__avx2, avg_taps__avx2, fma_taps__avx2, deinterleave2__avx2};
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
