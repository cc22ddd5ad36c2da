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

// Vector u of row r: a full load, or (U == 1) a masked one.
template <int U>
inline __m512 load(const float* p, int u, __mmask16 tail) {
  return U == 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p + 16 * u);
}
template <int U>
inline void store(float* p, int u, __mmask16 tail, __m512 v) {
  if (U == 1) _mm512_mask_storeu_ps(p, tail, v);
  else _mm512_storeu_ps(p + 16 * u, v);
}

// Runs Block<R, U>(i, tail) over the columns of R rows: 32 at a time, then 16, then the masked rest.
template <class Block2, class Block1>
inline void columns(int64_t n, Block2&& b2, Block1&& b1) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) b2(i);
  for (; i + 16 <= n; i += 16) b1(i, __mmask16(0xffff));
  if (i < n) b1(i, tail_mask(n - i));
}

// Note [Max pooling and NaN]
// vmaxps returns its second operand when either is NaN, so a running max alone can drop a NaN
// seen earlier (vrangeps does too). A mask of unordered taps is kept beside the max, one compare
// per two taps (unordered when either is NaN), and the NaN written at the end.
template <int R, int U>
inline void max_block(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                      __mmask16 tail) {
  __m512 m[R][U];
  __mmask16 nan[R][U];
  const float* p0 = base + off[0];
  const float* p1 = base + off[taps >= 2 ? 1 : 0];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      const __m512 a = load<U>(p0 + r * bstep, u, tail), b = load<U>(p1 + r * bstep, u, tail);
      nan[r][u] = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
      m[r][u] = _mm512_max_ps(a, b);
    }
  int64_t t = 2;
  for (; t + 1 < taps; t += 2) {
    const float* pa = base + off[t];
    const float* pb = base + off[t + 1];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) {
        const __m512 a = load<U>(pa + r * bstep, u, tail), b = load<U>(pb + r * bstep, u, tail);
        nan[r][u] = static_cast<__mmask16>(nan[r][u] | _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q));
        m[r][u] = _mm512_max_ps(_mm512_max_ps(m[r][u], a), b);
      }
  }
  if (t < taps) {
    const float* pa = base + off[t];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) {
        const __m512 a = load<U>(pa + r * bstep, u, tail);
        nan[r][u] = static_cast<__mmask16>(nan[r][u] | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q));
        m[r][u] = _mm512_max_ps(m[r][u], a);
      }
  }
  const __m512 qnan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) store<U>(out + r * ostep, u, tail, _mm512_mask_mov_ps(m[r][u], nan[r][u], qnan));
}

template <int R>
inline void max_rows(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                     int64_t n) {
  columns(
      n, [&](int64_t i) { max_block<R, 2>(base + i, bstep, off, taps, out + i, ostep, 0xffff); },
      [&](int64_t i, __mmask16 m) { max_block<R, 1>(base + i, bstep, off, taps, out + i, ostep, m); });
}

void max_taps__avx512(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                      int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 2 <= rows; j += 2) max_rows<2>(base + j * bstep, bstep, off, taps, out + j * ostep, ostep, n);
  for (; j < rows; ++j) max_rows<1>(base + j * bstep, bstep, off, taps, out + j * ostep, ostep, n);
}

template <int R, int U>
inline void avg_block(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                      const float* cdiv, float* out, int64_t ostep, __mmask16 tail) {
  __m512 s[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) s[r][u] = _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) s[r][u] = _mm512_add_ps(s[r][u], load<U>(p + r * bstep, u, tail));
  }
#pragma GCC unroll 2
  for (int u = 0; u < U; ++u) {
    const __m512 c = U == 1 ? _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), tail, cdiv) : _mm512_loadu_ps(cdiv + 16 * u);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      store<U>(out + r * ostep, u, tail, _mm512_div_ps(s[r][u], _mm512_mul_ps(_mm512_set1_ps(rdiv[r]), c)));
  }
}

template <int R>
inline void avg_rows(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                     const float* cdiv, float* out, int64_t ostep, int64_t n) {
  columns(
      n, [&](int64_t i) { avg_block<R, 2>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, 0xffff); },
      [&](int64_t i, __mmask16 m) { avg_block<R, 1>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, m); });
}

void avg_taps__avx512(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                      const float* cdiv, float* out, int64_t ostep, int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) avg_rows<4>(base + j * bstep, bstep, off, taps, rdiv + j, cdiv, out + j * ostep, ostep, n);
  for (; j < rows; ++j) avg_rows<1>(base + j * bstep, bstep, off, taps, rdiv + j, cdiv, out + j * ostep, ostep, n);
}

template <int R, int U>
inline void fma_block(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                      float lo, float hi, float* out, int64_t ostep, __mmask16 tail) {
  __m512 s[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) s[r][u] = _mm512_set1_ps(bias);
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
    const __m512 wt = _mm512_set1_ps(w[t]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) s[r][u] = _mm512_fmadd_ps(wt, load<U>(p + r * bstep, u, tail), s[r][u]);
  }
  // max/min return their second operand on NaN: NaN passes the clamp.
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) store<U>(out + r * ostep, u, tail, _mm512_min_ps(vhi, _mm512_max_ps(vlo, s[r][u])));
}

template <int R>
inline void fma_rows(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                     float lo, float hi, float* out, int64_t ostep, int64_t n) {
  columns(
      n, [&](int64_t i) { fma_block<R, 2>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, 0xffff); },
      [&](int64_t i, __mmask16 m) { fma_block<R, 1>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, m); });
}

void fma_taps__avx512(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                      float lo, float hi, float* out, int64_t ostep, int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) fma_rows<4>(base + j * bstep, bstep, off, w, taps, bias, lo, hi, out + j * ostep, ostep, n);
  for (; j < rows; ++j) fma_rows<1>(base + j * bstep, bstep, off, w, taps, bias, lo, hi, out + j * ostep, ostep, n);
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
  if (j < n) {  // 2 (n - j) < 32 floats left
    const int64_t r = 2 * (n - j);
    const __mmask16 ma = r >= 16 ? __mmask16(0xffff) : tail_mask(r), mb = r > 16 ? tail_mask(r - 16) : __mmask16(0);
    const __m512 a = _mm512_maskz_loadu_ps(ma, in + 2 * j), b = _mm512_maskz_loadu_ps(mb, in + 2 * j + 16);
    _mm512_mask_storeu_ps(even + j, tail_mask(n - j), _mm512_permutex2var_ps(a, ie, b));
    _mm512_mask_storeu_ps(odd + j, tail_mask(n - j), _mm512_permutex2var_ps(a, io, b));
  }
}

}  // namespace

WindowKernelsF32 window_kernels_f32_avx512() {
  return {max_taps__avx512, avg_taps__avx512, fma_taps__avx512, deinterleave2__avx512};
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
