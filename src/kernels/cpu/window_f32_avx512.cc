// AVX-512 row primitives of kernels/cpu/window_f32.h: 16 output columns per vector, up to four
// vectors in flight, masked loads and stores for the last columns (Note [ISA code in one binary]
// in gemm_f32_avx512.cc).
// GCC 12 warns that the undefined upper half in its own _mm512 intrinsics is uninitialized (GCC
// bug 105593); the warning is about the header, not this code.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <limits>

#include "kernels/cpu/window_f32.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {

namespace {

using avx512::tail_mask;
// Lanes a .. b - 1 of a vector, clipped to [0, 16) (none when b <= a).
inline __mmask16 lanes_between(int64_t a, int64_t b) {
  a = std::clamp<int64_t>(a, 0, 16), b = std::clamp<int64_t>(b, 0, 16);
  return static_cast<__mmask16>(((1u << b) - 1) & ~((1u << a) - 1));
}

// Vector u of row r: a full load, or (U == 1) a masked one.
template <int U>
inline __m512 load(const float* p, int u, __mmask16 tail) {
  return U == 1 ? _mm512_maskz_loadu_ps(tail, p) : _mm512_loadu_ps(p + 16 * u);
}
template <int U>
inline void store(float* p, int u, __mmask16 tail, __m512 v) {
  if (U == 1) _mm512_mask_storeu_ps(p, tail, v);
  else _mm512_storeu_ps(p + 16 * u, v);
}

// Runs Block<R, U>(i, tail) over the columns of R rows: 32 at a time, then 16, then the masked rest.
template <class Block2, class Block1>
inline void columns(int64_t n, Block2&& b2, Block1&& b1) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) b2(i);
  for (; i + 16 <= n; i += 16) b1(i, __mmask16(0xffff));
  if (i < n) b1(i, tail_mask(n - i));
}

// Note [Max pooling and NaN]
// vmaxps returns its second operand when either is NaN, so a running max alone can drop a NaN
// seen earlier (vrangeps does too). A mask of unordered taps is kept beside the max, one compare
// per two taps (unordered when either is NaN), and the NaN written at the end.
template <int R, int U>
inline void max_block(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                      __mmask16 tail) {
  __m512 m[R][U];
  __mmask16 nan[R][U];
  const float* p0 = base + off[0];
  const float* p1 = base + off[taps >= 2 ? 1 : 0];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) {
      const __m512 a = load<U>(p0 + r * bstep, u, tail), b = load<U>(p1 + r * bstep, u, tail);
      nan[r][u] = _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
      m[r][u] = _mm512_max_ps(a, b);
    }
  int64_t t = 2;
  for (; t + 1 < taps; t += 2) {
    const float* pa = base + off[t];
    const float* pb = base + off[t + 1];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) {
        const __m512 a = load<U>(pa + r * bstep, u, tail), b = load<U>(pb + r * bstep, u, tail);
        nan[r][u] = static_cast<__mmask16>(nan[r][u] | _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q));
        m[r][u] = _mm512_max_ps(_mm512_max_ps(m[r][u], a), b);
      }
  }
  if (t < taps) {
    const float* pa = base + off[t];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) {
        const __m512 a = load<U>(pa + r * bstep, u, tail);
        nan[r][u] = static_cast<__mmask16>(nan[r][u] | _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q));
        m[r][u] = _mm512_max_ps(m[r][u], a);
      }
  }
  const __m512 qnan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) store<U>(out + r * ostep, u, tail, _mm512_mask_mov_ps(m[r][u], nan[r][u], qnan));
}

template <int R>
inline void max_rows(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                     int64_t n) {
  columns(
      n, [&](int64_t i) { max_block<R, 2>(base + i, bstep, off, taps, out + i, ostep, 0xffff); },
      [&](int64_t i, __mmask16 m) { max_block<R, 1>(base + i, bstep, off, taps, out + i, ostep, m); });
}

void max_taps__avx512(const float* base, int64_t bstep, const int64_t* off, int64_t taps, float* out, int64_t ostep,
                      int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 2 <= rows; j += 2) max_rows<2>(base + j * bstep, bstep, off, taps, out + j * ostep, ostep, n);
  for (; j < rows; ++j) max_rows<1>(base + j * bstep, bstep, off, taps, out + j * ostep, ostep, n);
}

template <int R, int U>
inline void avg_block(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                      const float* cdiv, float* out, int64_t ostep, __mmask16 tail) {
  __m512 s[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) s[r][u] = _mm512_setzero_ps();
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) s[r][u] = _mm512_add_ps(s[r][u], load<U>(p + r * bstep, u, tail));
  }
#pragma GCC unroll 2
  for (int u = 0; u < U; ++u) {
    const __m512 c = U == 1 ? _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), tail, cdiv) : _mm512_loadu_ps(cdiv + 16 * u);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
      store<U>(out + r * ostep, u, tail, _mm512_div_ps(s[r][u], _mm512_mul_ps(_mm512_set1_ps(rdiv[r]), c)));
  }
}

template <int R>
inline void avg_rows(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                     const float* cdiv, float* out, int64_t ostep, int64_t n) {
  columns(
      n, [&](int64_t i) { avg_block<R, 2>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, 0xffff); },
      [&](int64_t i, __mmask16 m) { avg_block<R, 1>(base + i, bstep, off, taps, rdiv, cdiv + i, out + i, ostep, m); });
}

void avg_taps__avx512(const float* base, int64_t bstep, const int64_t* off, int64_t taps, const float* rdiv,
                      const float* cdiv, float* out, int64_t ostep, int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) avg_rows<4>(base + j * bstep, bstep, off, taps, rdiv + j, cdiv, out + j * ostep, ostep, n);
  for (; j < rows; ++j) avg_rows<1>(base + j * bstep, bstep, off, taps, rdiv + j, cdiv, out + j * ostep, ostep, n);
}

template <int R, int U>
inline void fma_block(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                      float lo, float hi, float* out, int64_t ostep, __mmask16 tail) {
  __m512 s[R][U];
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) s[r][u] = _mm512_set1_ps(bias);
  for (int64_t t = 0; t < taps; ++t) {
    const float* p = base + off[t];
    const __m512 wt = _mm512_set1_ps(w[t]);
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
      for (int u = 0; u < U; ++u) s[r][u] = _mm512_fmadd_ps(wt, load<U>(p + r * bstep, u, tail), s[r][u]);
  }
  // max/min return their second operand on NaN: NaN passes the clamp.
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
#pragma GCC unroll 4
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 2
    for (int u = 0; u < U; ++u) store<U>(out + r * ostep, u, tail, _mm512_min_ps(vhi, _mm512_max_ps(vlo, s[r][u])));
}

template <int R>
inline void fma_rows(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                     float lo, float hi, float* out, int64_t ostep, int64_t n) {
  columns(
      n, [&](int64_t i) { fma_block<R, 2>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, 0xffff); },
      [&](int64_t i, __mmask16 m) { fma_block<R, 1>(base + i, bstep, off, w, taps, bias, lo, hi, out + i, ostep, m); });
}

void fma_taps__avx512(const float* base, int64_t bstep, const int64_t* off, const float* w, int64_t taps, float bias,
                      float lo, float hi, float* out, int64_t ostep, int64_t n, int64_t rows) {
  int64_t j = 0;
  for (; j + 4 <= rows; j += 4) fma_rows<4>(base + j * bstep, bstep, off, w, taps, bias, lo, hi, out + j * ostep, ostep, n);
  for (; j < rows; ++j) fma_rows<1>(base + j * bstep, bstep, off, w, taps, bias, lo, hi, out + j * ostep, ostep, n);
}

void deinterleave2__avx512(const float* in, float* even, float* odd, int64_t n) {
  const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m512 a = _mm512_loadu_ps(in + 2 * j), b = _mm512_loadu_ps(in + 2 * j + 16);
    _mm512_storeu_ps(even + j, _mm512_permutex2var_ps(a, ie, b));
    _mm512_storeu_ps(odd + j, _mm512_permutex2var_ps(a, io, b));
  }
  if (j < n) {  // 2 (n - j) < 32 floats left
    const int64_t r = 2 * (n - j);
    const __mmask16 ma = r >= 16 ? __mmask16(0xffff) : tail_mask(r), mb = r > 16 ? tail_mask(r - 16) : __mmask16(0);
    const __m512 a = _mm512_maskz_loadu_ps(ma, in + 2 * j), b = _mm512_maskz_loadu_ps(mb, in + 2 * j + 16);
    _mm512_mask_storeu_ps(even + j, tail_mask(n - j), _mm512_permutex2var_ps(a, ie, b));
    _mm512_mask_storeu_ps(odd + j, tail_mask(n - j), _mm512_permutex2var_ps(a, io, b));
  }
}

// Note [3x3 windows read in place]
// Planes of 56 x 56 and more go through the row kernels (the channel blocks lose there: Note
// [Depthwise in channel blocks]), which first copy each plane into a padded, stride-phased buffer:
// at stride 2 that copy deinterleaves every row, and a 3x3 stride-2 max pool spent a third of its
// time on it. A 3x3 stride-2 window reads three input rows, and each output vector's taps from a
// row are two loads split into even and odd columns in registers (taps 1 and 2) and the odd ones
// shifted by one lane, the column before them broadcast into the first (tap 0). Padding and the
// row ends are masked lanes, filled with 0 (depthwise) or -inf (max), and rows outside the plane
// are skipped. Four output vectors of a row go together, so four chains of multiply-adds or maxes
// are in flight. One thread, one layer: MobileNetV2's 96-channel 112 -> 56 depthwise 0.275 -> 0.175
// ms, ResNet's 64-channel 112 -> 56 max pool 0.199 -> 0.131. At stride 1 the same reading (three
// unaligned loads per row) lost to the copy and the row kernels (144 channels at 56 x 56: 0.243 ->
// 0.287 ms), so stride 1 keeps them.
template <bool kMax>
void window3x3_s2_plane(const WindowGeom& g, const float* x, const float* w, float bias, float lo, float hi, float* y) {
  const float padv = kMax ? -std::numeric_limits<float>::infinity() : 0.0f;
  const __m512 pad = _mm512_set1_ps(padv);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
  const __m512 vlo = _mm512_set1_ps(lo), vhi = _mm512_set1_ps(hi);
  const __m512 qnan = _mm512_set1_ps(std::numeric_limits<float>::quiet_NaN());
  const int64_t blocks = (g.wo + 15) / 16;
  // Per output vector, the same for every row: the first column each load reads, the lanes of it
  // inside the row (the others are `pad` and not read: the address may lie before the row), and
  // where each vector's outputs end.
  constexpr int S = 2, kLoads = 2;
  int64_t col[kMaxInPlaceBlocks][kLoads];
  __mmask16 lanes[kMaxInPlaceBlocks][kLoads], out[kMaxInPlaceBlocks];
  bool first_in[kMaxInPlaceBlocks];  // stride 2: tap 0 of the vector's first output lies in the row
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t ow0 = 16 * b, c = S * ow0 - g.pl;  // tap 0 of output ow0; output ow0 + j reads c + S j + s
    for (int l = 0; l < kLoads; ++l) {
      const int64_t at = c + 1 + 16 * l;
      col[b][l] = at;
      lanes[b][l] = lanes_between(-at, g.w - at);
    }
    first_in[b] = c >= 0 && c < g.w;
    out[b] = tail_mask(std::min<int64_t>(16, g.wo - ow0));
  }
  auto load = [&](const float* row, int64_t b, int l) {
    return _mm512_mask_loadu_ps(pad, lanes[b][l],
                                reinterpret_cast<const float*>(reinterpret_cast<uintptr_t>(row) + col[b][l] * 4));
  };
  for (int64_t oh = 0; oh < g.ho; ++oh) {
    float* yr = y + oh * g.wo;
    for (int64_t b0 = 0; b0 < blocks; b0 += 4) {
      const int nb = static_cast<int>(std::min<int64_t>(4, blocks - b0));
      __m512 acc[4];
      __mmask16 nan[4] = {0, 0, 0, 0};
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) acc[i] = kMax ? pad : _mm512_set1_ps(bias);
      for (int r = 0; r < 3; ++r) {
        const int64_t ih = oh * S - g.pt + r;
        if (ih < 0 || ih >= g.h) continue;
        const float* xr = x + ih * g.w;
        const __m512 w0 = _mm512_set1_ps(kMax ? 0.0f : w[3 * r]), w1 = _mm512_set1_ps(kMax ? 0.0f : w[3 * r + 1]);
        const __m512 w2 = _mm512_set1_ps(kMax ? 0.0f : w[3 * r + 2]);
#pragma GCC unroll 4
        for (int i = 0; i < 4; ++i) {
          if (i >= nb) break;
          const int64_t b = b0 + i;
          __m512 t0, t1, t2;  // taps (r, 0), (r, 1), (r, 2) of the vector's 16 outputs
          const __m512 v0 = load(xr, b, 0), v1 = load(xr, b, 1);
          t1 = _mm512_permutex2var_ps(v0, even, v1);
          t2 = _mm512_permutex2var_ps(v0, odd, v1);
          const __m512 first = first_in[b] ? _mm512_set1_ps(xr[col[b][0] - 1]) : pad;
          t0 = _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(t2), _mm512_castps_si512(first), 15));
          if constexpr (kMax) {  // Note [Max pooling and NaN]
            nan[i] = static_cast<__mmask16>(nan[i] | _mm512_cmp_ps_mask(t0, t1, _CMP_UNORD_Q) |
                                            _mm512_cmp_ps_mask(t2, t2, _CMP_UNORD_Q));
            acc[i] = _mm512_max_ps(_mm512_max_ps(_mm512_max_ps(acc[i], t0), t1), t2);
          } else {
            acc[i] = _mm512_fmadd_ps(t0, w0, acc[i]);
            acc[i] = _mm512_fmadd_ps(t1, w1, acc[i]);
            acc[i] = _mm512_fmadd_ps(t2, w2, acc[i]);
          }
        }
      }
#pragma GCC unroll 4
      for (int i = 0; i < 4; ++i) {
        if (i >= nb) break;
        const __m512 v = kMax ? _mm512_mask_mov_ps(acc[i], nan[i], qnan) : avx512::clamp(acc[i], vlo, vhi);
        _mm512_mask_storeu_ps(yr + 16 * (b0 + i), out[b0 + i], v);
      }
    }
  }
}

void depthwise3x3_s2_plane__avx512(const WindowGeom& g, const float* x, const float* w, float bias, float lo,
                                   float hi, float* y) {
  window3x3_s2_plane<false>(g, x, w, bias, lo, hi, y);
}

void max3x3_s2_plane__avx512(const WindowGeom& g, const float* x, float* y) {
  window3x3_s2_plane<true>(g, x, nullptr, 0.0f, 0.0f, 0.0f, y);
}

// Note [Padded rows in whole vectors]
// X' rows are contiguous, so each is written as whole vectors: vector v of a row holds its floats
// 16 v .. 16 v + 15, the input's lanes loaded under a mask (lanes outside [lo, lo + n) read nothing
// and are zero) and stored unmasked even where the vector runs past the row's end, into the next
// row's floats, which that row's own stores then overwrite; only vectors that would run past the
// last row are stored under a mask. Row by row, three partial stores per row (the left padding,
// the input, the right padding: rows of 9 floats for a 7 x 7 input) took each thread's half of a
// 512-channel 7 x 7 layer's X' 62 us of the layer's 1.04 ms on 2 threads; in whole vectors, 40 us
// (16 x 16 planes of 256 channels: 67 -> 19-28 us). Masked stores as such are not slow on Zen 4
// (~3 cycles each, measured alone); what is left is mostly waiting for lines the other core last
// read (on one thread the whole X' takes ~10 us per band). No library calls per row either (per
// row, the memset / memcpy / memset of a 56-float row cost as much as the copy: 8% of ResNet-50 at
// batch 1 went to filling X').
void pad_rows__avx512(const float* src, int64_t src_step, float* dst, int64_t rows, int64_t lo, int64_t n,
                      int64_t width) {
  const int64_t vecs = (width + 15) / 16;
  float* const end = dst + rows * width;
  for (int64_t r = 0; r < rows; ++r, src += src_step, dst += width)
    for (int64_t v = 0; v < vecs; ++v) {
      const __mmask16 m = lanes_between(lo - 16 * v, lo + n - 16 * v);
      // The lanes in m read src[16 v + lane - lo], inside the input row; the others nothing.
      const __m512 x = _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(
                                                    reinterpret_cast<uintptr_t>(src) + (16 * v - lo) * 4));
      float* out = dst + 16 * v;
      if (end - out >= 16)
        _mm512_storeu_ps(out, x);
      else
        _mm512_mask_storeu_ps(out, tail_mask(end - out), x);
    }
}

// Note [Depthwise in channel blocks] in window_f32.h, R x R windows (R = 3, or 5 as in
// MobileNetV3). Full: all 16 channels present.
template <int R, bool Full>
void depthwise_block16(const WindowGeom& g, const DepthwiseBlockF32& a) {
  static_assert(R == 3 || R == 5);
  const int64_t wp = (g.wo - 1) * g.sw + R;    // padded columns the windows read
  const int64_t rows = (g.ho - 1) * g.sh + R;  // scratch rows
  const int64_t ih0 = -g.pt;                   // the input row of scratch row 0
  float* const buf = a.buf;
  const __m512 zero = _mm512_setzero_ps();
  // Padding: rows the windows read outside the input, and the other rows' columns outside it.
  for (int64_t b = 0; b < rows; ++b) {
    float* row = buf + b * wp * 16;
    const int64_t ih = ih0 + b;
    const bool inside = ih >= 0 && ih < g.h;
    const int64_t left = inside ? std::min(g.pl, wp) : wp;
    for (int64_t c = 0; c < left; ++c) _mm512_store_ps(row + 16 * c, zero);
    if (inside)
      for (int64_t c = g.pl + g.w; c < wp; ++c) _mm512_store_ps(row + 16 * c, zero);
  }
  // The input rows, 16 pixels (in the planes' flat order, across row ends) of 16 channels at a time.
  const int64_t ia = std::max<int64_t>(ih0, 0), ib = std::min<int64_t>(ih0 + rows, g.h);
  int64_t ih = ia, iw = 0;
  for (int64_t q = ia * g.w; q < ib * g.w; q += 16) {
    const int64_t n = std::min<int64_t>(16, ib * g.w - q);
    const __mmask16 m = tail_mask(n);
    __m512 r[16];
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
      r[c] = Full || c < a.channels ? _mm512_maskz_loadu_ps(m, a.x + c * a.x_plane + q) : zero;
    avx512::transpose16(r);
#pragma GCC unroll 16
    for (int i = 0; i < 16; ++i) {
      if (i >= n) break;
      if (iw + g.pl < wp) _mm512_store_ps(buf + ((ih - ih0) * wp + iw + g.pl) * 16, r[i]);
      if (++iw == g.w) iw = 0, ++ih;
    }
  }
  // The outputs, 16 pixels of 16 channels at a time: R * R multiply-adds each, then back to planes.
  // The weights are loaded per 16 pixels (the stores may alias them, so they are not hoisted): held
  // across the transposes they would be spilled.
  const int64_t rstep = wp * 16;  // floats from one tap row to the next
  const __m512 vlo = _mm512_set1_ps(a.lo), vhi = _mm512_set1_ps(a.hi);
  // The clamp, or hardswish as the op computes it; NaN passes either.
  auto finish = [&](__m512 v) { return a.hardswish ? avx512::hardswish(v) : avx512::clamp(v, vlo, vhi); };
  int64_t oh = 0, ow = 0;
  for (int64_t q = 0; q < g.ho * g.wo; q += 16) {
    const int64_t n = std::min<int64_t>(16, g.ho * g.wo - q);
    const float* src[16];
    for (int i = 0; i < 16; ++i) {
      if (i >= n) {
        src[i] = src[0];  // a valid window whose result is not stored
        continue;
      }
      src[i] = buf + (oh * g.sh * wp + ow * g.sw) * 16;
      if (++ow == g.wo) ow = 0, ++oh;
    }
    const __m512 bias = _mm512_loadu_ps(a.bias);
    __m512 acc[16];
    if constexpr (R == 5) {
      // 25 taps do not fit in registers beside 16 accumulators: tap by tap instead, each weight
      // vector loaded once for the 16 pixels.
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) acc[i] = bias;
      for (int r = 0; r < 5; ++r) {
#pragma GCC unroll 5
        for (int c = 0; c < 5; ++c) {
          const __m512 wt = _mm512_loadu_ps(a.w + 16 * (5 * r + c));
          const int64_t off = r * rstep + 16 * c;
#pragma GCC unroll 16
          for (int i = 0; i < 16; ++i) acc[i] = _mm512_fmadd_ps(_mm512_load_ps(src[i] + off), wt, acc[i]);
        }
      }
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) acc[i] = finish(acc[i]);
    } else {
      __m512 wv[9];
#pragma GCC unroll 9
      for (int t = 0; t < 9; ++t) wv[t] = _mm512_loadu_ps(a.w + 16 * t);
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        const float* s0 = src[i];
        const float* s1 = s0 + rstep;
        const float* s2 = s1 + rstep;
        __m512 v = _mm512_fmadd_ps(_mm512_load_ps(s0), wv[0], bias);
        v = _mm512_fmadd_ps(_mm512_load_ps(s0 + 16), wv[1], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s0 + 32), wv[2], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s1), wv[3], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s1 + 16), wv[4], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s1 + 32), wv[5], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s2), wv[6], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s2 + 16), wv[7], v);
        v = _mm512_fmadd_ps(_mm512_load_ps(s2 + 32), wv[8], v);
        acc[i] = finish(v);
      }
    }
    avx512::transpose16(acc);
    const __mmask16 m = tail_mask(n);
#pragma GCC unroll 16
    for (int c = 0; c < 16; ++c)
      if (Full || c < a.channels) _mm512_mask_storeu_ps(a.y + c * a.y_plane + q, m, acc[c]);
  }
}

void depthwise3x3_block16__avx512(const WindowGeom& g, const DepthwiseBlockF32& a) {
  if (a.channels == 16) depthwise_block16<3, true>(g, a);
  else depthwise_block16<3, false>(g, a);
}
void depthwise5x5_block16__avx512(const WindowGeom& g, const DepthwiseBlockF32& a) {
  if (a.channels == 16) depthwise_block16<5, true>(g, a);
  else depthwise_block16<5, false>(g, a);
}

}  // namespace

WindowKernelsF32 window_kernels_f32_avx512() {
  WindowKernelsF32 k{max_taps__avx512,
                     avg_taps__avx512,
                     fma_taps__avx512,
                     deinterleave2__avx512,
                     depthwise3x3_block16__avx512,
                     depthwise5x5_block16__avx512,
                     /*block_hardswish=*/true};
  k.pad_rows = pad_rows__avx512;
  k.depthwise3x3_s2_plane = depthwise3x3_s2_plane__avx512;
  k.max3x3_s2_plane = max3x3_s2_plane__avx512;
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
