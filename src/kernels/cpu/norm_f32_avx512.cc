// AVX-512 normalization row kernels of kernels/cpu/norm_f32.h (Note [Layer norm in f32 lanes]):
// 16 floats per vector, four accumulators in flight, masked loads and stores for a row's last
// elements. Compiled for AVX-512 by the target pragma below, called only when active_isa() says the
// machine has it (Note [ISA code in one binary] in gemm_f32_avx512.cc).
// GCC 12 warns about the undefined upper half in its own _mm512 cast intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/norm_f32.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {

namespace {

constexpr int64_t kChunk = 4096;  // elements summed in f32 lanes before the f64 total

using avx512::tail_mask;

// Sum over the row of x[j] - shift (Sq = false) or of (x[j] - shift)^2 (Sq = true). Masked-off
// lanes of the last vector contribute 0 (the subtraction is masked).
template <bool Sq>
inline __m512 accumulate(__m512 acc, __m512 v, __m512 shift, __mmask16 m) {
  const __m512 d = _mm512_maskz_sub_ps(m, v, shift);
  if constexpr (Sq) return _mm512_fmadd_ps(d, d, acc);
  else return _mm512_add_ps(acc, d);
}

template <bool Sq>
double row_sum(const float* x, int64_t n, float shift_value) {
  const __m512 shift = _mm512_set1_ps(shift_value);
  double total = 0;
  for (int64_t c0 = 0; c0 < n; c0 += kChunk) {
    const int64_t c1 = std::min(n, c0 + kChunk);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
    int64_t j = c0;
    for (; j + 64 <= c1; j += 64) {
      a0 = accumulate<Sq>(a0, _mm512_loadu_ps(x + j), shift, 0xffff);
      a1 = accumulate<Sq>(a1, _mm512_loadu_ps(x + j + 16), shift, 0xffff);
      a2 = accumulate<Sq>(a2, _mm512_loadu_ps(x + j + 32), shift, 0xffff);
      a3 = accumulate<Sq>(a3, _mm512_loadu_ps(x + j + 48), shift, 0xffff);
    }
    for (; j + 16 <= c1; j += 16) a0 = accumulate<Sq>(a0, _mm512_loadu_ps(x + j), shift, 0xffff);
    if (j < c1) {
      const __mmask16 m = tail_mask(c1 - j);
      a1 = accumulate<Sq>(a1, _mm512_maskz_loadu_ps(m, x + j), shift, m);
    }
    total += static_cast<double>(_mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3))));
  }
  return total;
}

template <bool W, bool B>
inline void normalize_vec(const float* x, float* y, int64_t j, __mmask16 m, __m512 vm, __m512 vr, __m512 vc,
                          const float* w, const float* b) {
  __m512 t = _mm512_fmadd_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), vm), vr, vc);
  if constexpr (W && B) t = _mm512_fmadd_ps(t, _mm512_maskz_loadu_ps(m, w + j), _mm512_maskz_loadu_ps(m, b + j));
  else if constexpr (W) t = _mm512_mul_ps(t, _mm512_maskz_loadu_ps(m, w + j));
  else if constexpr (B) t = _mm512_add_ps(t, _mm512_maskz_loadu_ps(m, b + j));
  _mm512_mask_storeu_ps(y + j, m, t);
}

template <bool W, bool B>
void normalize_row(const float* x, float* y, int64_t n, float mean, float rstd, float shift, const float* w,
                   const float* b) {
  const __m512 vm = _mm512_set1_ps(mean), vr = _mm512_set1_ps(rstd), vc = _mm512_set1_ps(shift);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) normalize_vec<W, B>(x, y, j, 0xffff, vm, vr, vc, w, b);
  if (j < n) normalize_vec<W, B>(x, y, j, tail_mask(n - j), vm, vr, vc, w, b);
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
  // 16 x 16 blocks in registers (rows past m read under a mask as zeros and not stored), the
  // elements after the last whole block one at a time.
  static void gather(const float* x, int64_t ldx, int64_t m, int64_t n, float* t) {
    const __mmask16 live = tail_mask(m);
    int64_t j0 = 0;
    for (; j0 + 16 <= n; j0 += 16) {
      __m512 r[16];
#pragma GCC unroll 16
      for (int k = 0; k < 16; ++k) r[k] = _mm512_maskz_loadu_ps(live, x + (j0 + k) * ldx);
      avx512::transpose16(r);
      for (int64_t i = 0; i < m; ++i) _mm512_storeu_ps(t + i * n + j0, r[i]);
    }
    for (; j0 < n; ++j0)
      for (int64_t i = 0; i < m; ++i) t[i * n + j0] = x[i + j0 * ldx];
  }
};

}  // namespace

NormKernelsF32 norm_kernels_f32_avx512() {
  return {layer_norm_rows_in_lanes<Lanes>, layer_norm_columns_in_lanes<Lanes>, rms_norm_rows_in_lanes<Lanes>};
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
