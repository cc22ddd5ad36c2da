// AVX2 scan block kernels: 8 floats widened to two 4-lane float64 vectors, an in-register prefix
// of each (lane shifts by permute + blend), then the float64 carry added (Note [Blocked scan] in scan.cc).
#include <immintrin.h>

#include "kernels/cpu/scan.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace kiln::kernels::cpu {

namespace {

// Inclusive prefix of 4 doubles in a register (two lane shifts by permute + blend).
inline __m256d prefix4(__m256d v) {
  const __m256d zero = _mm256_setzero_pd();
  v = _mm256_add_pd(v, _mm256_blend_pd(zero, _mm256_permute4x64_pd(v, 0x90), 0xe));  // (0,0,1,2)
  return _mm256_add_pd(v, _mm256_blend_pd(zero, _mm256_permute4x64_pd(v, 0x40), 0xc));  // (0,0,0,1)
}

double f32_scan_block__avx2(const float* x, float* out, int64_t n, double carry) {
  __m256d c = _mm256_set1_pd(carry);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256d lo = prefix4(_mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    const __m256d hi = _mm256_add_pd(prefix4(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1))),
                                     _mm256_permute4x64_pd(lo, 0xff));
    const __m256d olo = _mm256_add_pd(c, lo), ohi = _mm256_add_pd(c, hi);
    _mm_storeu_ps(out + i, _mm256_cvtpd_ps(olo));
    _mm_storeu_ps(out + i + 4, _mm256_cvtpd_ps(ohi));
    c = _mm256_permute4x64_pd(ohi, 0xff);
  }
  carry = _mm256_cvtsd_f64(c);
  for (; i < n; ++i) {
    carry += static_cast<double>(x[i]);
    out[i] = static_cast<float>(carry);
  }
  return carry;
}

double f32_sum_block__avx2(const float* x, int64_t n) {
  __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    a0 = _mm256_add_pd(a0, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    a1 = _mm256_add_pd(a1, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  alignas(32) double t[4];
  _mm256_store_pd(t, _mm256_add_pd(a0, a1));
  double s = (t[0] + t[1]) + (t[2] + t[3]);
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

}  // namespace

ScanKernelsF32 scan_kernels_f32_avx2() { return {f32_scan_block__avx2, f32_sum_block__avx2}; }

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
