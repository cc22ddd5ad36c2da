// Small AVX-512 helpers shared by the *_avx512.cc kernels. Include it after the file's
// `#pragma GCC target(...)` (Note [ISA code in one binary] in gemm_f32_avx512.cc): the functions
// are static, so each AVX-512 file gets its own copy and no baseline file can pick one up.
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace kiln::kernels::cpu::avx512 {

// The first n lanes (all 16 from n = 16 on).
static inline __mmask16 tail_mask(int64_t n) {
  return n >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << n) - 1);
}

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

// e^x for x <= 0 (or NaN): n = round(x / ln 2), r = x - n ln 2 in two steps (|r| <= ln 2 / 2),
// e^r by its Taylor polynomial of degree 7 (truncation < 2e-9 relative), times 2^n by vscalefps.
//
// Note [No denormal exponentials]
// Below x = -87, e^x is under 1.7e-38, near the smallest normal float, and it is returned as 0:
// a vscalefps whose result is denormal takes a microcode assist on Intel cores, and a masked key
// (an additive -10000) makes every one of its scores that small. BERT-shaped attention at
// sequence 256 with a tenth of the keys masked ran its softmax at a tenth of its speed (3.06 ms a
// layer at batch 1 on a Xeon, the scores and outputs 0.5). x is clamped at -87 so no lane makes a
// denormal, and the lanes below it are zeroed by the mask (NaN compares unordered and stays;
// vmaxps returns its second operand, x, when x is NaN; -inf gives 0).
static inline __m512 exp_nonpositive(__m512 x) {
  const __m512 lowest = _mm512_set1_ps(-87.0f);
  const __mmask16 kept = _mm512_cmp_ps_mask(x, lowest, _CMP_NLT_UQ);
  x = _mm512_max_ps(lowest, x);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);  // ln 2 high part (exact n * hi)
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.42860682030941723212e-6f), r);  // ln 2 - high part
  __m512 p = _mm512_set1_ps(1.0f / 5040.0f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(kept, p, n);
}

// sigmoid(r) = 1 / (1 + e^-r) and silu(r) = r sigmoid(r), from e = e^-|r| (never overflows):
// 1 / (1 + e) for r >= 0, e / (1 + e) below. Within a few ulp of vmath's (the sigmoid and silu
// ops) for r >= -87; below, where they are under 1e-37 in magnitude, 0 (Note [No denormal
// exponentials]). NaN passes through.
template <bool kSilu>
static inline __m512 sigmoid_or_silu(__m512 r) {
  const __m512 e = exp_nonpositive(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(r)));
  const __m512 d = _mm512_add_ps(_mm512_set1_ps(1.0f), e);
  const __mmask16 neg = _mm512_cmp_ps_mask(r, _mm512_setzero_ps(), _CMP_LT_OQ);
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 num = kSilu ? _mm512_mask_mul_ps(r, neg, r, e) : _mm512_mask_mov_ps(one, neg, e);
  return _mm512_div_ps(num, d);
}
static inline __m512 sigmoid(__m512 r) { return sigmoid_or_silu<false>(r); }
static inline __m512 silu(__m512 r) { return sigmoid_or_silu<true>(r); }

// r[i] = row i of a 16 x 16 block -> r[j] = its column j: pairs of rows interleaved within 128-bit
// lanes, then pairs of pairs, then lanes gathered across registers twice (64 shuffles).
static inline void transpose16(__m512 r[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  // u[4k + j], lane L: rows 4k .. 4k + 3 of column 4L + j.
  __m512 u[16];
#pragma GCC unroll 4
  for (int k = 0; k < 16; k += 4) {
    const __m512d a = _mm512_castps_pd(t[k]), b = _mm512_castps_pd(t[k + 1]);
    const __m512d c = _mm512_castps_pd(t[k + 2]), d = _mm512_castps_pd(t[k + 3]);
    u[k] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    u[k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    u[k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    u[k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    const __m512 p0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88), p1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    const __m512 q0 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    const __m512 q1 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    r[j] = _mm512_shuffle_f32x4(p0, q0, 0x88);
    r[4 + j] = _mm512_shuffle_f32x4(p1, q1, 0x88);
    r[8 + j] = _mm512_shuffle_f32x4(p0, q0, 0xDD);
    r[12 + j] = _mm512_shuffle_f32x4(p1, q1, 0xDD);
  }
}

}  // namespace kiln::kernels::cpu::avx512
