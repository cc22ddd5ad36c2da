// AVX2 + FMA row primitives of kernels/cpu/window_f32.h: 8 output columns per vector, up to four
// vectors in flight, vmaskmov loads and stores for the last columns (Note [ISA code in one binary]
// in gemm_f32_avx512.cc; Note [Max pooling and NaN] in window_f32_avx512.cc).
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/cpu/window_f32.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

#include "kernels/cpu/avx2_util.h"

namespace kiln::kernels::cpu {

namespace {

using avx2::lanes_below;

// A row's last columns: lanes [0, n) of the last vector, n in [0, 8].
struct TailLanes {
  __m256i mask;
  int64_t n;
};
inline TailLanes tail_lanes(int64_t n) { return {lanes_below(n), n}; }

template <int U, bool Tail>
inline __m256 load(const float* p, int u, TailLanes tail) {
  if constexpr (Tail) return _mm256_maskload_ps(p, tail.mask);
  else return _mm256_loadu_ps(p + 8 * u);
}

// The tail goes out with plain stores (Note [No masked stores on Zen] in avx2_util.h): a 28-wide
// output row ends in 4 columns on every row.
template <int U, bool Tail>
inline void store(float* p, int u, TailLanes tail, __m256 v) {
  if constexpr (Tail) avx2::store_first(p, v, tail.n);
  else _mm256_storeu_ps(p + 8 * u, v);
}

// Runs the blocks over the columns: 16 at a time, then 8, then the partial rest.
template <class Block2, class Block1, class BlockTail>
inline void columns(int64_t n, Block2&& b2, Block1&& b1, BlockTail&& bt) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) b2(i);
  for (; i + 8 <= n; i += 8) b1(i);
  if (i < n) bt(i, tail_lanes(n - i));
}

template <int R, int U, bool Tail>
inline void max_block(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                      TailLanes tail) {
  __m256 m[R][U], nan[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      m[r][u] = load<U, Tail>(base + r * bstep + off[0], u, tail);
      nan[r][u] = _mm256_cmp_ps(m[r][u], m[r][u], _CMP_UNORD_Q);
    }
  for (int64_t t = 1; t < taps; ++t) {
    const float* p = base + off[t];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) {
        const __m256 v = load<U, Tail>(p + r * bstep, u, tail);
        nan[r][u] = _mm256_or_ps(nan[r][u], _mm256_cmp_ps(v, v, _CMP_UNORD_Q));
        m[r][u] = _mm256_max_ps(m[r][u], v);
      }
  }
  const __m256 qnan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) store<U, Tail>(out + r * ostep, u, tail, _mm256_blendv_ps(m[r][u], qnan, nan[r][u]));
}

template <int R>
inline void max_rows(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                     int64_t n) {
  const TailLanes all{_mm256_set1_epi32(-1), 8};
  columns(
      n, [&](int64_t i) { max_block<R, 2, false>(base + i, bstep, off, taps, out + i, ostep, all); },
      [&](int64_t i) { max_block<R, 1, false>(base + i, bstep, off, taps, out + i, ostep, all); },
      [&](int64_t i, TailLanes m) { max_block<R, 1, true>(base + i, bstep, off, taps, out + i, ostep, m); });
}

void max_taps__avx2(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                    int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 2 <= rows; j += 2) max_rows<2>(base + j * bstep, bstep, off, taps, out + j * ostep, ostep, n);
  if (j < rows) max_rows<1>(base + j * bstep, bstep, off, taps, out + j * ostep, ostep, n);
}

template <int R, int U, bool Tail>
inline void avg_block(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                      const float* cdiv, float* out, int64_t ostep, TailLanes tail) {
  __m256 s[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) s[r][u] = _mm256_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) s[r][u] = _mm256_add_ps(s[r][u], load<U, Tail>(p + r * bstep, u, tail));
  }
#pragma GCC unroll 2
  for (int u = 0; u < U; ++u) {
    __m256 c = load<U, Tail>(cdiv, u, tail);
    if constexpr (Tail) c = _mm256_blendv_ps(_mm256_set1_ps(1.0f), c, _mm256_castsi256_ps(tail.mask));
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      store<U, Tail>(out + r * ostep, u, tail, _mm256_div_ps(s[r][u], _mm256_mul_ps(_mm256_set1_ps(rdiv[r]), c)));
  }
}

template <int R>
inline void avg_rows(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                     const float* cdiv, float* out, int64_t ostep, int64_t n) {
  const TailLanes all{_mm256_set1_epi32(-1), 8};
  columns(
      n, [&](int64_t i) { avg_block<R, 2, false>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, all); },
      [&](int64_t i) { avg_block<R, 1, false>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, all); },
      [&](int64_t i, TailLanes m) { avg_block<R, 1, true>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, m); });
}

void avg_taps__avx2(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                    const float* cdiv, float* out, int64_t ostep, int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) avg_rows<4>(base + j * bstep, bstep, off, taps, rdiv + j, cdiv, out + j * ostep, ostep, n);
  for (; j < rows; ++j) avg_rows<1>(base + j * bstep, bstep, off, taps, rdiv + j, cdiv, out + j * ostep, ostep, n);
}

template <int R, int U, bool Tail>
inline void fma_block(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                      float lo, float hi, float* out, int64_t ostep, TailLanes tail) {
  __m256 s[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) s[r][u] = _mm256_set1_ps(bias);
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
    const __m256 wt = _mm256_set1_ps(w[t]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) s[r][u] = _mm256_fmadd_ps(wt, load<U, Tail>(p + r * bstep, u, tail), s[r][u]);
  }
  // max/min return their second operand on NaN: NaN passes the clamp.
  const __m256 vlo = _mm256_set1_ps(lo), vhi = _mm256_set1_ps(hi);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) store<U, Tail>(out + r * ostep, u, tail, _mm256_min_ps(vhi, _mm256_max_ps(vlo, s[r][u])));
}

template <int R>
inline void fma_rows(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                     float lo, float hi, float* out, int64_t ostep, int64_t n) {
  const TailLanes all{_mm256_set1_epi32(-1), 8};
  columns(
      n, [&](int64_t i) { fma_block<R, 2, false>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, all); },
      [&](int64_t i) { fma_block<R, 1, false>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, all); },
      [&](int64_t i, TailLanes m) { fma_block<R, 1, true>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, m); });
}

void fma_taps__avx2(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                    float lo, float hi, float* out, int64_t ostep, int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) fma_rows<4>(base + j * bstep, bstep, off, w, taps, bias, lo, hi, out + j * ostep, ostep, n);
  for (; j < rows; ++j) fma_rows<1>(base + j * bstep, bstep, off, w, taps, bias, lo, hi, out + j * ostep, ostep, n);
}

void deinterleave2__avx2(const float* in, float* even, float* odd, int64_t n) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 a = _mm256_loadu_ps(in + 2 * j), b = _mm256_loadu_ps(in + 2 * j + 8);
    // Per 128-bit lane [a0 a2 b0 b2 | a4 a6 b4 b6]; the 64-bit permute orders the halves.
    const __m256 e = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0));
    const __m256 o = _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1));
    _mm256_storeu_ps(even + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(e), _MM_SHUFFLE(3, 1, 2, 0))));
    _mm256_storeu_ps(odd + j, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(o), _MM_SHUFFLE(3, 1, 2, 0))));
  }
  // The last pairs one by one: a masked store for each half (Note [No masked stores on Zen] in
  // avx2_util.h) cost a stride-2 depthwise layer whose rows end in such a tail 15% (144 channels,
  // 56 x 56 -> 28 x 28, one or two threads, relu6: 0.85x without them).
  for (; j < n; ++j) {
    even[j] = in[2 * j];
    odd[j] = in[2 * j + 1];
  }
}


// Full vectors with plain loads and stores, the ends one by one (Note [No masked stores on Zen] in
// avx2_util.h), and no library calls per row.
void pad_rows__avx2(const float* src, int64_t src_step, float* dst, int64_t rows, int64_t lo, int64_t n,
                    int64_t width) {
  for (int64_t r = 0; r < rows; ++r, src += src_step, dst += width) {
    for (int64_t j = 0; j < lo; ++j) dst[j] = 0.0f;
    float* mid = dst + lo;
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) _mm256_storeu_ps(mid + j, _mm256_loadu_ps(src + j));
    for (; j < n; ++j) mid[j] = src[j];
    for (int64_t k = lo + n; k < width; ++k) dst[k] = 0.0f;
  }
}

// Note [Depthwise in channel blocks] in window_f32.h, with the 16 channels of a block as two
// vectors of 8: the transposes are 8 x 8 (8 pixels at a time, each half of the block on its own),
// and the output rows go out with plain stores (Note [No masked stores on Zen] in avx2_util.h).
// R x R windows, R = 3 or 5 (MobileNetV3's); Full: all 16 channels present.
template <int R, bool Full>
void depthwise_block16(const WindowGeom& g, const DepthwiseBlockF32& a) {
  static_assert(R == 3 || R == 5);
  const int64_t wp = (g.wo - 1) * g.sw + R;    // padded columns the windows read
  const int64_t rows = (g.ho - 1) * g.sh + R;  // scratch rows
  const int64_t ih0 = -g.pt;                   // the input row of scratch row 0
  float* const buf = a.buf;
  const __m256 zero = _mm256_setzero_ps();
  auto zero_pixel = [&](float* px) {
    _mm256_store_ps(px, zero);
    _mm256_store_ps(px + 8, zero);
  };
  // Padding: rows the windows read outside the input, and the other rows' columns outside it.
  for (int64_t b = 0; b < rows; ++b) {
    float* row = buf + b * wp * 16;
    const int64_t ih = ih0 + b;
    const bool inside = ih >= 0 && ih < g.h;
    const int64_t left = inside ? std::min(g.pl, wp) : wp;
    for (int64_t c = 0; c < left; ++c) zero_pixel(row + 16 * c);
    if (inside)
      for (int64_t c = g.pl + g.w; c < wp; ++c) zero_pixel(row + 16 * c);
  }
  // The input rows, 8 pixels (in the planes' flat order, across row ends) at a time.
  const int64_t ia = std::max<int64_t>(ih0, 0), ib = std::min<int64_t>(ih0 + rows, g.h);
  int64_t ih = ia, iw = 0;
  for (int64_t q = ia * g.w; q < ib * g.w; q += 8) {
    const int64_t n = std::min<int64_t>(8, ib * g.w - q);
    const __m256i m = lanes_below(n);
    float* dst[8];  // where each pixel goes in the scratch; nullptr: a column no window reads
    for (int i = 0; i < 8; ++i) {
      dst[i] = nullptr;
      if (i >= n) continue;
      if (iw + g.pl < wp) dst[i] = buf + ((ih - ih0) * wp + iw + g.pl) * 16;
      if (++iw == g.w) iw = 0, ++ih;
    }
    for (int h = 0; h < 2; ++h) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c) {
        const float* src = a.x + (8 * h + c) * a.x_plane + q;
        r[c] = !Full && 8 * h + c >= a.channels ? zero : n == 8 ? _mm256_loadu_ps(src) : _mm256_maskload_ps(src, m);
      }
      avx2::transpose8(r);
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i)
        if (dst[i] != nullptr) _mm256_store_ps(dst[i] + 8 * h, r[i]);
    }
  }
  // The outputs, 8 pixels of 8 channels at a time: R * R multiply-adds each, then back to planes.
  const int64_t rstep = wp * 16;  // floats from one tap row to the next
  const __m256 vlo = _mm256_set1_ps(a.lo), vhi = _mm256_set1_ps(a.hi);
  // The clamp, or hardswish as the op computes it; NaN passes either.
  auto finish = [&](__m256 v) { return a.hardswish ? avx2::hardswish(v) : avx2::clamp(v, vlo, vhi); };
  int64_t oh = 0, ow = 0;
  for (int64_t q = 0; q < g.ho * g.wo; q += 8) {
    const int64_t n = std::min<int64_t>(8, g.ho * g.wo - q);
    const float* src[8];
    for (int i = 0; i < 8; ++i) {
      if (i >= n) {
        src[i] = src[0];  // a valid window whose result is not stored
        continue;
      }
      src[i] = buf + (oh * g.sh * wp + ow * g.sw) * 16;
      if (++ow == g.wo) ow = 0, ++oh;
    }
    for (int h = 0; h < 2; ++h) {
      if (!Full && 8 * h >= a.channels) break;
      const __m256 bias = _mm256_loadu_ps(a.bias + 8 * h);
      __m256 acc[8];
      if constexpr (R == 5) {
        // 25 taps do not fit in registers beside 8 accumulators: tap by tap instead, each weight
        // vector loaded once for the 8 pixels (9 loads per 8 multiply-adds).
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = bias;
        for (int r = 0; r < 5; ++r) {
#pragma GCC unroll 5
          for (int c = 0; c < 5; ++c) {
            const __m256 wt = _mm256_loadu_ps(a.w + 16 * (5 * r + c) + 8 * h);
            const int64_t off = r * rstep + 16 * c + 8 * h;
#pragma GCC unroll 8
            for (int i = 0; i < 8; ++i) acc[i] = _mm256_fmadd_ps(_mm256_load_ps(src[i] + off), wt, acc[i]);
          }
        }
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) acc[i] = finish(acc[i]);
      } else {
        __m256 wv[9];
#pragma GCC unroll 9
        for (int t = 0; t < 9; ++t) wv[t] = _mm256_loadu_ps(a.w + 16 * t + 8 * h);
#pragma GCC unroll 8
        for (int i = 0; i < 8; ++i) {
          const float* s0 = src[i] + 8 * h;
          const float* s1 = s0 + rstep;
          const float* s2 = s1 + rstep;
          __m256 v = _mm256_fmadd_ps(_mm256_load_ps(s0), wv[0], bias);
          v = _mm256_fmadd_ps(_mm256_load_ps(s0 + 16), wv[1], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s0 + 32), wv[2], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s1), wv[3], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s1 + 16), wv[4], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s1 + 32), wv[5], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s2), wv[6], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s2 + 16), wv[7], v);
          v = _mm256_fmadd_ps(_mm256_load_ps(s2 + 32), wv[8], v);
          acc[i] = finish(v);
        }
      }
      avx2::transpose8(acc);
#pragma GCC unroll 8
      for (int c = 0; c < 8; ++c)
        if (Full || 8 * h + c < a.channels) avx2::store_first(a.y + (8 * h + c) * a.y_plane + q, acc[c], n);
    }
  }
}

void depthwise3x3_block16__avx2(const WindowGeom& g, const DepthwiseBlockF32& a) {
  if (a.channels == 16) depthwise_block16<3, true>(g, a);
  else depthwise_block16<3, false>(g, a);
}
void depthwise5x5_block16__avx2(const WindowGeom& g, const DepthwiseBlockF32& a) {
  if (a.channels == 16) depthwise_block16<5, true>(g, a);
  else depthwise_block16<5, false>(g, a);
}

}  // namespace

WindowKernelsF32 window_kernels_f32_avx2() {
  WindowKernelsF32 k{max_taps__avx2,
                     avg_taps__avx2,
                     fma_taps__avx2,
                     deinterleave2__avx2,
                     depthwise3x3_block16__avx2,
                     depthwise5x5_block16__avx2,
                     /*block_hardswish=*/true};
  k.pad_rows = pad_rows__avx2;
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
