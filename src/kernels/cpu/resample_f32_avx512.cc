// AVX-512 row kernel of resample_last2_f32 (kernels/cpu/resample.h, Note [Resizing the last two axes
// at once] in resample.cc): per block of 16 output columns, the input columns it reads loaded and
// blended once, each tap a permute and a multiply-add (a gather where the block spans more).
// GCC 12 warns that the undefined upper half in its own _mm512 intrinsics is uninitialized (GCC
// bug 105593); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/resample.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {

namespace {

using avx512::tail_mask;

// blend[i] = sum over k of w[k] * plane[idx[k] * in_w + i], i < in_w. With `padded`, blend has room
// for whole vectors and the last one is stored whole: a load from a masked store is not forwarded
// and waits for the store to retire.
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
  const int64_t in_w = p.in_w, out_w = p.out_w, out_h = p.out_h, h_taps = p.h_taps;
  const int64_t blocks = p.w_blocks, w_taps = p.w_taps, plane_size = p.in_h * in_w;
  const int64_t *w_lo = p.w_lo, *w_span = p.w_span;
  const int32_t* w_index = p.w_index;
  const float* w_weight = p.w_weight;
  const float* plane = x + (r0 / out_h) * plane_size;
  int64_t oy = r0 % out_h;
  for (int64_t r = r0; r < r1; ++r) {
    float* out = y + r * out_w;
    if (p.h_repeat && r > r0 && p.h_repeat[oy]) {  // the row above again (this call wrote it)
      std::memcpy(out, out - out_w, static_cast<size_t>(out_w) * sizeof(float));
      if (++oy == out_h) oy = 0, plane += plane_size;
      continue;
    }
    const int64_t* hidx = p.h_index + oy * h_taps;
    const float* hw = p.h_weight + oy * h_taps;
    const float* row = plane + oy * in_w;
    if (blocks == 0) blend_rows(plane, in_w, hidx, hw, h_taps, out, false);  // the height alone
    else if (p.w_wide && h_taps > 0) blend_rows(plane, in_w, hidx, hw, h_taps, tmp, true);
    for (int64_t b = 0; b < blocks; ++b) {
      const int32_t* idx = w_index + b * w_taps * 16;
      const float* ww = w_weight + b * w_taps * 16;
      __m512 acc;
      if (w_span[b] <= 16) {
        // The 16 columns from w_lo[b], the height's taps blended here; each tap a permute of them.
        const __mmask16 m = tail_mask(w_span[b]);
        const int64_t lo = w_lo[b];
        __m512 v;
        if (h_taps == 0) {
          v = _mm512_maskz_loadu_ps(m, row + lo);
        } else {
          v = _mm512_mul_ps(_mm512_set1_ps(hw[0]), _mm512_maskz_loadu_ps(m, plane + hidx[0] * in_w + lo));
          for (int64_t k = 1; k < h_taps; ++k)
            v = _mm512_fmadd_ps(_mm512_set1_ps(hw[k]), _mm512_maskz_loadu_ps(m, plane + hidx[k] * in_w + lo), v);
        }
        acc = _mm512_permutexvar_ps(_mm512_loadu_si512(idx), v);
        if (!p.w_copy) acc = _mm512_mul_ps(acc, _mm512_loadu_ps(ww));
        for (int64_t t = 1; t < w_taps; ++t)
          acc = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_loadu_si512(idx + 16 * t), v),
                                _mm512_loadu_ps(ww + 16 * t), acc);
      } else {
        // A wide block (downsampling): its taps gathered from the row's blend.
        const float* src = h_taps > 0 ? tmp : row;
        acc = _mm512_mul_ps(_mm512_i32gather_ps(_mm512_loadu_si512(idx), src, 4), _mm512_loadu_ps(ww));
        for (int64_t t = 1; t < w_taps; ++t)
          acc = _mm512_fmadd_ps(_mm512_i32gather_ps(_mm512_loadu_si512(idx + 16 * t), src, 4),
                                _mm512_loadu_ps(ww + 16 * t), acc);
      }
      _mm512_mask_storeu_ps(out + 16 * b, tail_mask(out_w - 16 * b), acc);
    }
    if (++oy == out_h) oy = 0, plane += plane_size;
  }
}

}  // namespace

Last2RowsF32 last2_rows_f32_avx512() { return last2_rows__avx512; }

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
