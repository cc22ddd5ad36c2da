// vmath kernels for AVX2 + FMA (8 f32 / 4 f64 lanes, masked-load and partial-store tails): the
// vector interface that vmath_simd.inc is written against, then the algorithms themselves (Note
// [vmath accuracy]). Compiled for AVX2 by the target pragma below, called only when active_isa()
// allows it (Note [ISA code in one binary] in gemm_f32_avx512.cc).
#include <immintrin.h>

#include "kernels/cpu/vmath.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/cpu/avx2_util.h"

namespace kiln::kernels::cpu {

namespace {

constexpr int64_t kW = 8;

struct F {
  __m256 v;
};
struct D {
  __m256d v;
};
struct I {
  __m256i v;
};
struct L {
  __m256i v;
};
using MF = __m256;
using MD = __m256d;

inline F operator+(F a, F b) { return {_mm256_add_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm256_sub_ps(a.v, b.v)}; }
inline F operator/(F a, F b) { return {_mm256_div_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm256_mul_ps(a.v, b.v)}; }
inline F f_set(float x) { return {_mm256_set1_ps(x)}; }
inline F f_load(const float* p) { return {_mm256_loadu_ps(p)}; }
inline void f_store(float* p, F a) { _mm256_storeu_ps(p, a.v); }
inline __m256i lanes(int64_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
inline F f_load_part(const float* p, int64_t n) { return {_mm256_maskload_ps(p, lanes(n))}; }
// Plain stores of the first n lanes (Note [No masked stores on Zen] in avx2_util.h): a GEMM
// epilogue over 49-wide rows ends every row in one.
inline void f_store_part(float* p, F a, int64_t n) { avx2::store_first(p, a.v, n); }
inline F f_keep(F a, int64_t n) { return {_mm256_and_ps(a.v, _mm256_castsi256_ps(lanes(n)))}; }
inline F f_fma(F a, F b, F c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
inline F f_min(F a, F b) { return {_mm256_min_ps(a.v, b.v)}; }
inline F f_max(F a, F b) { return {_mm256_max_ps(a.v, b.v)}; }
inline MF f_lt(F a, F b) { return _mm256_cmp_ps(a.v, b.v, _CMP_LT_OQ); }
inline MF f_gt(F a, F b) { return _mm256_cmp_ps(a.v, b.v, _CMP_GT_OQ); }
inline MF f_eq(F a, F b) { return _mm256_cmp_ps(a.v, b.v, _CMP_EQ_OQ); }
inline MF f_isnan(F a) { return _mm256_cmp_ps(a.v, a.v, _CMP_UNORD_Q); }
inline MF f_or(MF a, MF b) { return _mm256_or_ps(a, b); }
inline bool f_any(MF m) { return _mm256_movemask_ps(m) != 0; }
inline F f_sel(MF m, F yes, F no) { return {_mm256_blendv_ps(no.v, yes.v, m)}; }
inline float f_hmax(F a) {
  alignas(32) float t[8];
  _mm256_store_ps(t, a.v);
  float m = t[0];
  for (int i = 1; i < 8; ++i) m = t[i] > m ? t[i] : m;
  return m;
}

inline I f_as_i(F a) { return {_mm256_castps_si256(a.v)}; }
inline F i_as_f(I a) { return {_mm256_castsi256_ps(a.v)}; }
inline I i_set(int x) { return {_mm256_set1_epi32(x)}; }
inline I i_add(I a, I b) { return {_mm256_add_epi32(a.v, b.v)}; }
inline I i_sub(I a, I b) { return {_mm256_sub_epi32(a.v, b.v)}; }
inline I i_and(I a, I b) { return {_mm256_and_si256(a.v, b.v)}; }
inline I i_or(I a, I b) { return {_mm256_or_si256(a.v, b.v)}; }
inline I i_sra1(I a) { return {_mm256_srai_epi32(a.v, 1)}; }
inline I i_sll23(I a) { return {_mm256_slli_epi32(a.v, 23)}; }
inline I i_srl23(I a) { return {_mm256_srli_epi32(a.v, 23)}; }
inline I i_srl21(I a) { return {_mm256_srli_epi32(a.v, 21)}; }
// t[i & 15] per lane: both halves permuted by the low three bits, then bit 3 (moved to the sign) picks.
inline F f_lut16(const float* t, I i) {
  const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t), i.v);
  const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(t + 8), i.v);
  return {_mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(i.v, 28)))};
}
inline F i_to_f(I a) { return {_mm256_cvtepi32_ps(a.v)}; }

inline D operator+(D a, D b) { return {_mm256_add_pd(a.v, b.v)}; }
inline D operator-(D a, D b) { return {_mm256_sub_pd(a.v, b.v)}; }
inline D operator*(D a, D b) { return {_mm256_mul_pd(a.v, b.v)}; }
inline D operator/(D a, D b) { return {_mm256_div_pd(a.v, b.v)}; }
inline D d_set(double x) { return {_mm256_set1_pd(x)}; }
inline D d_fma(D a, D b, D c) { return {_mm256_fmadd_pd(a.v, b.v, c.v)}; }
inline D d_min(D a, D b) { return {_mm256_min_pd(a.v, b.v)}; }
inline D d_max(D a, D b) { return {_mm256_max_pd(a.v, b.v)}; }
inline MD d_lt(D a, D b) { return _mm256_cmp_pd(a.v, b.v, _CMP_LT_OQ); }
inline D d_sel(MD m, D yes, D no) { return {_mm256_blendv_pd(no.v, yes.v, m)}; }
inline double d_hsum(D a) {
  alignas(32) double t[4];
  _mm256_store_pd(t, a.v);
  return (t[0] + t[1]) + (t[2] + t[3]);
}
inline L d_as_l(D a) { return {_mm256_castpd_si256(a.v)}; }
inline D l_as_d(L a) { return {_mm256_castsi256_pd(a.v)}; }
inline L l_set(int64_t x) { return {_mm256_set1_epi64x(x)}; }
inline L l_add(L a, L b) { return {_mm256_add_epi64(a.v, b.v)}; }
inline L l_sll52(L a) { return {_mm256_slli_epi64(a.v, 52)}; }

inline void f_split(F a, D& lo, D& hi) {
  lo.v = _mm256_cvtps_pd(_mm256_castps256_ps128(a.v));
  hi.v = _mm256_cvtps_pd(_mm256_extractf128_ps(a.v, 1));
}
inline F d_join(D lo, D hi) {
  return {_mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo.v)), _mm256_cvtpd_ps(hi.v), 1)};
}

#include "kernels/cpu/vmath_simd.inc"

}  // namespace

const VmathKernelsF32& vmath_kernels_f32_avx2() {
  static const VmathKernelsF32 k = make_kernels(Isa::avx2);
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
