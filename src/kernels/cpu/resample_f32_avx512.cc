// AVX-512 row kernel of resample_last2_f32 (kernels/cpu/resample.h, Note [Resizing the last two axes
// at once] in resample.cc): the height's taps blended 16 columns a vector, the width's banded blocks
// one broadcast multiply-add per input column, masked to the lanes its taps feed.
// GCC 12 warns that the undefined upper half in its own _mm512 intrinsics is uninitialized (GCC
// bug 105593); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/resample.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {

namespace {

using avx512::tail_mask;

// blend[i] = sum over k of w[k] * plane[idx[k] * in_w + i], i < in_w. With `padded`, blend has room
// for whole vectors and the last one is stored whole: the width's blocks read it back a float at a
// time, and a load from a masked store waits for the store to retire (no forwarding), which had
// cost more than the arithmetic.
void blend_rows(const float* plane, int64_t in_w, const int64_t* idx, const float* w, int64_t taps, float* blend,
                bool padded) {
  for (int64_t i = 0; i < in_w; i += 16) {
    const __mmask16 m = tail_mask(in_w - i);
    __m512 acc = _mm512_mul_ps(_mm512_set1_ps(w[0]), _mm512_maskz_loadu_ps(m, plane + idx[0] * in_w + i));
    for (int64_t k = 1; k < taps; ++k)
      acc = _mm512_fmadd_ps(_mm512_set1_ps(w[k]), _mm512_maskz_loadu_ps(m, plane + idx[k] * in_w + i), acc);
    if (padded) _mm512_storeu_ps(blend + i, acc);
    else _mm512_mask_storeu_ps(blend + i, m, acc);
  }
}

void last2_rows__avx512(const Last2PlanF32& p, const float* x, float* y, float* tmp, int64_t r0, int64_t r1) {
  // The plan in locals: the stores to y could alias it as far as the compiler knows.
  const int64_t in_w = p.in_w, out_w = p.out_w, out_h = p.out_h, h_taps = p.h_taps, blocks = p.w_blocks;
  const int64_t plane_size = p.in_h * in_w;
  const int64_t *w_lo = p.w_lo, *w_span = p.w_span, *w_off = p.w_off;
  const float* w_m = p.w_m;
  const uint16_t* w_mask = p.w_mask;
  const float* plane = x + (r0 / out_h) * plane_size;
  int64_t oy = r0 % out_h;
  for (int64_t r = r0; r < r1; ++r) {
    float* out = y + r * out_w;
    const float* row = plane + oy * in_w;
    if (h_taps > 0) {
      float* blend = blocks > 0 ? tmp : out;
      blend_rows(plane, in_w, p.h_index + oy * h_taps, p.h_weight + oy * h_taps, h_taps, blend, blocks > 0);
      row = blend;
    }
    for (int64_t b = 0; b < blocks; ++b) {
      const float* m = w_m + w_off[b];
      const uint16_t* mask = w_mask + w_off[b] / 16;
      const float* s = row + w_lo[b];
      const int64_t span = w_span[b];
      // Two chains, so a short span is not one multiply-add latency after another.
      __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
      int64_t i = 0;
      for (; i + 2 <= span; i += 2) {
        acc0 = _mm512_mask3_fmadd_ps(_mm512_set1_ps(s[i]), _mm512_loadu_ps(m + 16 * i), acc0, mask[i]);
        acc1 = _mm512_mask3_fmadd_ps(_mm512_set1_ps(s[i + 1]), _mm512_loadu_ps(m + 16 * i + 16), acc1, mask[i + 1]);
      }
      if (i < span) acc0 = _mm512_mask3_fmadd_ps(_mm512_set1_ps(s[i]), _mm512_loadu_ps(m + 16 * i), acc0, mask[i]);
      _mm512_mask_storeu_ps(out + 16 * b, tail_mask(out_w - 16 * b), _mm512_add_ps(acc0, acc1));
    }
    if (++oy == out_h) oy = 0, plane += plane_size;
  }
}

}  // namespace

Last2RowsF32 last2_rows_f32_avx512() { return last2_rows__avx512; }

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
