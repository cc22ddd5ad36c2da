// Small AVX-512 helpers shared by the *_avx512.cc kernels. Include it after the file's
// `#pragma GCC target(...)` (Note [ISA code in one binary] in gemm_f32_avx512.cc): the functions
// are static, so each AVX-512 file gets its own copy and no baseline file can pick one up.
#pragma once

#include <immintrin.h>

namespace kiln::kernels::cpu::avx512 {

// min(hi, max(lo, r)): max/min return their second operand on NaN, so NaN passes through as in
// vmath's relu; lo = -inf and hi = +inf leave r as it is.
static inline __m512 clamp(__m512 r, __m512 lo, __m512 hi) { return _mm512_min_ps(hi, _mm512_max_ps(lo, r)); }

// r * clamp(r + 3, 0, 6) / 6 in f32, operation for operation as the hardswish op (and vmath's
// epilogue) computes it; NaN passes through.
static inline __m512 hardswish(__m512 r) {
  const __m512 six = _mm512_set1_ps(6.0f);
  const __m512 t = _mm512_min_ps(six, _mm512_max_ps(_mm512_setzero_ps(), _mm512_add_ps(r, _mm512_set1_ps(3.0f))));
  return _mm512_div_ps(_mm512_mul_ps(r, t), six);
}

}  // namespace kiln::kernels::cpu::avx512
