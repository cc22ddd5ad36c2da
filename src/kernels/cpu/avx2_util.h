// Small AVX2 helpers shared by the *_avx2.cc kernels. Include it after the file's
// `#pragma GCC target("avx2,fma")` (Note [ISA code in one binary] in gemm_f32_avx512.cc): the
// functions are static, so each AVX2 file gets its own copy and no baseline file can pick one up.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kiln::kernels::cpu::avx2 {

// Lanes [0, n) set, n in [0, 8] (a vmaskmov mask).
static inline __m256i lanes_below(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// Note [No masked stores on Zen]: vmaskmovps stores are microcoded on AMD's cores (one every ~12
// cycles or worse), and the transposed stores write one short row per channel, 16 per 6 x 16
// tile: with K = 27 (MobileNetV2's stem) those stores cost more than the FMAs. The first m lanes
// of r (m in [1, 8]) go out as plain 16-, 8- and 4-byte stores instead.
static inline void store_first(float* dst, __m256 r, int64_t m) {
  if (m >= 8) return _mm256_storeu_ps(dst, r);
  __m128 lo = _mm256_castps256_ps128(r);
  if (m >= 4) {
    _mm_storeu_ps(dst, lo);
    lo = _mm256_extractf128_ps(r, 1);
    dst += 4;
    m -= 4;
  }
  if (m >= 2) {
    _mm_storel_pi(reinterpret_cast<__m64*>(dst), lo);
    lo = _mm_movehl_ps(lo, lo);
    dst += 2;
    m -= 2;
  }
  if (m == 1) _mm_store_ss(dst, lo);
}

// r[i][j] <- r[j][i] for an 8 x 8 block, in three rounds of shuffles (24 in all).
static inline void transpose8(__m256 r[8]) {
  __m256 t[8], u[8];
  for (int h = 0; h < 8; h += 2) {  // within each 128-bit lane: rows paired
    t[h] = _mm256_unpacklo_ps(r[h], r[h + 1]);
    t[h + 1] = _mm256_unpackhi_ps(r[h], r[h + 1]);
  }
  for (int h = 0; h < 8; h += 4) {  // u[h + j]: rows h..h+3 of column j (low lane) and 4 + j (high)
    u[h] = _mm256_shuffle_ps(t[h], t[h + 2], 0x44);
    u[h + 1] = _mm256_shuffle_ps(t[h], t[h + 2], 0xEE);
    u[h + 2] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0x44);
    u[h + 3] = _mm256_shuffle_ps(t[h + 1], t[h + 3], 0xEE);
  }
  for (int j = 0; j < 4; ++j) {
    r[j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x20);
    r[4 + j] = _mm256_permute2f128_ps(u[j], u[4 + j], 0x31);
  }
}

// min(hi, max(lo, r)): max/min return their second operand on NaN, so NaN passes through as in
// vmath's relu; lo = -inf and hi = +inf leave r as it is.
static inline __m256 clamp(__m256 r, __m256 lo, __m256 hi) { return _mm256_min_ps(hi, _mm256_max_ps(lo, r)); }

// r * clamp(r + 3, 0, 6) / 6 in f32, operation for operation as the hardswish op (and vmath's
// epilogue) computes it; NaN passes through. Also the AVX-512 kernels' 8-wide rows.
static inline __m256 hardswish(__m256 r) {
  const __m256 six = _mm256_set1_ps(6.0f);
  const __m256 t = _mm256_min_ps(six, _mm256_max_ps(_mm256_setzero_ps(), _mm256_add_ps(r, _mm256_set1_ps(3.0f))));
  return _mm256_div_ps(_mm256_mul_ps(r, t), six);
}

}  // namespace kiln::kernels::cpu::avx2
