// vmath kernels for AVX-512 (16 f32 / 8 f64 lanes, masked tails): the vector interface that
// vmath_simd.inc is written against, then the algorithms themselves (Note [vmath accuracy]).
// Compiled for AVX-512 by the target pragma below, called only when active_isa() says the machine
// has it (Note [ISA code in one binary] in gemm_f32_avx512.cc).
// GCC 12 warns about the undefined upper half in its own _mm512 cast intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/vmath.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

namespace kiln::kernels::cpu {

namespace {

constexpr int64_t kW = 16;

struct F {
  __m512 v;
};
struct D {
  __m512d v;
};
struct I {
  __m512i v;
};
struct L {
  __m512i v;
};
using MF = __mmask16;
using MD = __mmask8;

inline F operator+(F a, F b) { return {_mm512_add_ps(a.v, b.v)}; }
inline F operator-(F a, F b) { return {_mm512_sub_ps(a.v, b.v)}; }
inline F operator/(F a, F b) { return {_mm512_div_ps(a.v, b.v)}; }
inline F operator*(F a, F b) { return {_mm512_mul_ps(a.v, b.v)}; }
inline F f_set(float x) { return {_mm512_set1_ps(x)}; }
inline F f_load(const float* p) { return {_mm512_loadu_ps(p)}; }
inline void f_store(float* p, F a) { _mm512_storeu_ps(p, a.v); }
inline MF lanes(int64_t n) { return static_cast<MF>((1u << n) - 1u); }
inline F f_load_part(const float* p, int64_t n) { return {_mm512_maskz_loadu_ps(lanes(n), p)}; }
inline void f_store_part(float* p, F a, int64_t n) { _mm512_mask_storeu_ps(p, lanes(n), a.v); }
inline F f_keep(F a, int64_t n) { return {_mm512_maskz_mov_ps(lanes(n), a.v)}; }
inline F f_fma(F a, F b, F c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
inline F f_min(F a, F b) { return {_mm512_min_ps(a.v, b.v)}; }
inline F f_max(F a, F b) { return {_mm512_max_ps(a.v, b.v)}; }
inline MF f_lt(F a, F b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_LT_OQ); }
inline MF f_gt(F a, F b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_GT_OQ); }
inline MF f_eq(F a, F b) { return _mm512_cmp_ps_mask(a.v, b.v, _CMP_EQ_OQ); }
inline MF f_isnan(F a) { return _mm512_cmp_ps_mask(a.v, a.v, _CMP_UNORD_Q); }
inline MF f_or(MF a, MF b) { return static_cast<MF>(a | b); }
inline bool f_any(MF m) { return m != 0; }
inline F f_sel(MF m, F yes, F no) { return {_mm512_mask_blend_ps(m, no.v, yes.v)}; }
inline float f_hmax(F a) { return _mm512_reduce_max_ps(a.v); }

inline I f_as_i(F a) { return {_mm512_castps_si512(a.v)}; }
inline F i_as_f(I a) { return {_mm512_castsi512_ps(a.v)}; }
inline I i_set(int x) { return {_mm512_set1_epi32(x)}; }
inline I i_add(I a, I b) { return {_mm512_add_epi32(a.v, b.v)}; }
inline I i_sub(I a, I b) { return {_mm512_sub_epi32(a.v, b.v)}; }
inline I i_and(I a, I b) { return {_mm512_and_si512(a.v, b.v)}; }
inline I i_or(I a, I b) { return {_mm512_or_si512(a.v, b.v)}; }
inline I i_sra1(I a) { return {_mm512_srai_epi32(a.v, 1)}; }
inline I i_sll23(I a) { return {_mm512_slli_epi32(a.v, 23)}; }
inline I i_srl23(I a) { return {_mm512_srli_epi32(a.v, 23)}; }
inline I i_srl21(I a) { return {_mm512_srli_epi32(a.v, 21)}; }
// t[i & 15] per lane.
inline F f_lut16(const float* t, I i) { return {_mm512_permutexvar_ps(i.v, _mm512_loadu_ps(t))}; }
inline F i_to_f(I a) { return {_mm512_cvtepi32_ps(a.v)}; }

inline D operator+(D a, D b) { return {_mm512_add_pd(a.v, b.v)}; }
inline D operator-(D a, D b) { return {_mm512_sub_pd(a.v, b.v)}; }
inline D operator*(D a, D b) { return {_mm512_mul_pd(a.v, b.v)}; }
inline D operator/(D a, D b) { return {_mm512_div_pd(a.v, b.v)}; }
inline D d_set(double x) { return {_mm512_set1_pd(x)}; }
inline D d_fma(D a, D b, D c) { return {_mm512_fmadd_pd(a.v, b.v, c.v)}; }
inline D d_min(D a, D b) { return {_mm512_min_pd(a.v, b.v)}; }
inline D d_max(D a, D b) { return {_mm512_max_pd(a.v, b.v)}; }
inline MD d_lt(D a, D b) { return _mm512_cmp_pd_mask(a.v, b.v, _CMP_LT_OQ); }
inline D d_sel(MD m, D yes, D no) { return {_mm512_mask_blend_pd(m, no.v, yes.v)}; }
inline double d_hsum(D a) { return _mm512_reduce_add_pd(a.v); }
inline L d_as_l(D a) { return {_mm512_castpd_si512(a.v)}; }
inline D l_as_d(L a) { return {_mm512_castsi512_pd(a.v)}; }
inline L l_set(int64_t x) { return {_mm512_set1_epi64(x)}; }
inline L l_add(L a, L b) { return {_mm512_add_epi64(a.v, b.v)}; }
inline L l_sll52(L a) { return {_mm512_slli_epi64(a.v, 52)}; }

inline void f_split(F a, D& lo, D& hi) {
  lo.v = _mm512_cvtps_pd(_mm512_castps512_ps256(a.v));
  hi.v = _mm512_cvtps_pd(_mm512_extractf32x8_ps(a.v, 1));
}
inline F d_join(D lo, D hi) {
  return {_mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo.v)), _mm512_cvtpd_ps(hi.v), 1)};
}

#include "kernels/cpu/vmath_simd.inc"

}  // namespace

namespace avx512 {
__m512 gelu(__m512 r) { return gelu_f32v(F{r}).v; }
}  // namespace avx512

const VmathKernelsF32& vmath_kernels_f32_avx512() {
  static const VmathKernelsF32 k = make_kernels(Isa::avx512);
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
