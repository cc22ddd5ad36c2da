// AVX2 + FMA normalization row kernels of kernels/cpu/norm_f32.h (Note [Layer norm in f32 lanes]):
// AVX-512's algorithm (norm_f32_avx512.cc) with 8 floats per vector and four accumulators in
// flight; a row's last elements go through vmaskmov loads and a partial store (Note [No masked
// stores on Zen] in avx2_util.h). Compiled for AVX2 by the target pragma below, called only when
// the machine has it (Note [ISA code in one binary] in gemm_f32_avx512.cc).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/norm_f32.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/cpu/avx2_util.h"

namespace kiln::kernels::cpu {

namespace {

constexpr int64_t kChunk = 4096;  // elements summed in f32 lanes before the f64 total

inline double hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return static_cast<double>(_mm_cvtss_f32(s));
}

// Sum over the row of x[j] - shift (Sq = false) or of (x[j] - shift)^2 (Sq = true). The lanes past
// a row's end are zeroed after the subtraction, so they contribute 0.
template <bool Sq>
inline __m256 accumulate(__m256 acc, __m256 v, __m256 shift, __m256 keep) {
  const __m256 d = _mm256_and_ps(_mm256_sub_ps(v, shift), keep);
  if constexpr (Sq) return _mm256_fmadd_ps(d, d, acc);
  else return _mm256_add_ps(acc, d);
}

template <bool Sq>
double row_sum(const float* x, int64_t n, float shift_value) {
  const __m256 shift = _mm256_set1_ps(shift_value), all = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
  double total = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t c1 = std::min(n, c0 + kChunk);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps(), a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
    int64_t j = c0;
    for (; j + 32 <= c1; j += 32) {
      a0 = accumulate<Sq>(a0, _mm256_loadu_ps(x + j), shift, all);
      a1 = accumulate<Sq>(a1, _mm256_loadu_ps(x + j + 8), shift, all);
      a2 = accumulate<Sq>(a2, _mm256_loadu_ps(x + j + 16), shift, all);
      a3 = accumulate<Sq>(a3, _mm256_loadu_ps(x + j + 24), shift, all);
    }
    for (; j + 8 <= c1; j += 8) a0 = accumulate<Sq>(a0, _mm256_loadu_ps(x + j), shift, all);
    if (j < c1) {
      const __m256i m = avx2::lanes_below(c1 - j);
      a1 = accumulate<Sq>(a1, _mm256_maskload_ps(x + j, m), shift, _mm256_castsi256_ps(m));
    }
    total += hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
  }
  return total;
}

// y[j .. j + 8) (the first `left` of them when left < 8).
template <bool W, bool B>
inline void normalize_vec(const float* x, float* y, int64_t j, int64_t left, __m256 vm, __m256 vr, __m256 vc,
                          const float* w, const float* b) {
  const bool full = left >= 8;
  const __m256i m = avx2::lanes_below(std::min<int64_t>(left, 8));
  auto load = [&](const float* p) { return full ? _mm256_loadu_ps(p + j) : _mm256_maskload_ps(p + j, m); };
  __m256 t = _mm256_fmadd_ps(_mm256_sub_ps(load(x), vm), vr, vc);
  if constexpr (W && B) t = _mm256_fmadd_ps(t, load(w), load(b));
  else if constexpr (W) t = _mm256_mul_ps(t, load(w));
  else if constexpr (B) t = _mm256_add_ps(t, load(b));
  avx2::store_first(y + j, t, left);
}

template <bool W, bool B>
void normalize_row(const float* x, float* y, int64_t n, float mean, float rstd, float shift, const float* w,
                   const float* b) {
  const __m256 vm = _mm256_set1_ps(mean), vr = _mm256_set1_ps(rstd), vc = _mm256_set1_ps(shift);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) normalize_vec<W, B>(x, y, j, 8, vm, vr, vc, w, b);
  if (j < n) normalize_vec<W, B>(x, y, j, n - j, vm, vr, vc, w, b);
}

// The ISA's passes for layer_norm_rows_in_lanes (norm_f32.h).
struct Lanes {
  static double sum(const float* x, int64_t n, float shift) { return row_sum<false>(x, n, shift); }
  static double sum_sq(const float* x, int64_t n, float shift) { return row_sum<true>(x, n, shift); }
  template <bool W, bool B>
  static void normalize(const float* x, float* y, int64_t n, float mean, float rstd, float shift, const float* w,
                        const float* b) {
    normalize_row<W, B>(x, y, n, mean, rstd, shift, w, b);
  }
  static void gather(const float* x, int64_t ldx, int64_t m, int64_t n, float* t) {
    gather_rows_scalar(x, ldx, m, n, t);
  }
};

}  // namespace

NormKernelsF32 norm_kernels_f32_avx2() {
  return {layer_norm_rows_in_lanes<Lanes>, layer_norm_columns_in_lanes<Lanes>, rms_norm_rows_in_lanes<Lanes>};
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
