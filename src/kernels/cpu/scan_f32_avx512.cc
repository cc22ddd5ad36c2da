// AVX-512 scan block kernels: 16 floats widened to two 8-lane float64 vectors, an in-register
// prefix of each (masked lane shifts), then the float64 carry added (Note [Blocked scan] in scan.cc; Note [ISA code in one
// binary] in gemm_f32_avx512.cc).
// GCC 12 warns that the undefined upper half in its own _mm512 cast/convert intrinsics is
// uninitialized (GCC bug 105593); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/scan.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

namespace kiln::kernels::cpu {

namespace {

// Inclusive prefix of 8 doubles in a register (three masked lane shifts).
inline __m512d prefix8(__m512d v) {
  const __m512i s1 = _mm512_set_epi64(6, 5, 4, 3, 2, 1, 0, 0);
  const __m512i s2 = _mm512_set_epi64(5, 4, 3, 2, 1, 0, 0, 0);
  const __m512i s4 = _mm512_set_epi64(3, 2, 1, 0, 0, 0, 0, 0);
  v = _mm512_add_pd(v, _mm512_maskz_permutexvar_pd(0xfe, s1, v));
  v = _mm512_add_pd(v, _mm512_maskz_permutexvar_pd(0xfc, s2, v));
  return _mm512_add_pd(v, _mm512_maskz_permutexvar_pd(0xf0, s4, v));
}

double f32_scan_block__avx512(const float* x, float* out, int64_t n, double carry) {
  const __m512i last = _mm512_set1_epi64(7);
  __m512d c = _mm512_set1_pd(carry);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    const __m512d lo = prefix8(_mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    const __m512d hi = _mm512_add_pd(prefix8(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1))),
                                     _mm512_permutexvar_pd(last, lo));
    const __m512d olo = _mm512_add_pd(c, lo), ohi = _mm512_add_pd(c, hi);
    _mm256_storeu_ps(out + i, _mm512_cvtpd_ps(olo));
    _mm256_storeu_ps(out + i + 8, _mm512_cvtpd_ps(ohi));
    c = _mm512_permutexvar_pd(last, ohi);
  }
  carry = _mm_cvtsd_f64(_mm512_castpd512_pd128(c));
  for (; i < n; ++i) {
    carry += static_cast<double>(x[i]);
    out[i] = static_cast<float>(carry);
  }
  return carry;
}

double f32_sum_block__avx512(const float* x, int64_t n) {
  __m512d a0 = _mm512_setzero_pd(), a1 = _mm512_setzero_pd(), a2 = _mm512_setzero_pd(), a3 = _mm512_setzero_pd();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m512 v0 = _mm512_loadu_ps(x + i), v1 = _mm512_loadu_ps(x + i + 16);
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v0)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v0, 1)));
    a2 = _mm512_add_pd(a2, _mm512_cvtps_pd(_mm512_castps512_ps256(v1)));
    a3 = _mm512_add_pd(a3, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v1, 1)));
  }
  // The last 0-31 floats in masked vectors, not one by one: a 7 x 7 plane (global average pooling)
  // is one full step and 17 floats, which were a dependent chain of 17 scalar f64 adds.
  for (; i < n; i += 16) {
    const int64_t left = n - i;
    const __m512 v = _mm512_maskz_loadu_ps(left >= 16 ? __mmask16(0xffff) : __mmask16((1u << left) - 1), x + i);
    a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(v)));
    a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)));
  }
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_add_pd(a0, a1), _mm512_add_pd(a2, a3)));
}

}  // namespace

ScanKernelsF32 scan_kernels_f32_avx512() { return {f32_scan_block__avx512, f32_sum_block__avx512}; }

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
