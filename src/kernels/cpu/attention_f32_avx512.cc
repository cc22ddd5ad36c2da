// AVX-512 attention rows of kernels/cpu/attention_f32.h. Compiled for AVX-512 by the target
// pragma below, called only when active_isa() says the machine has it (Note [ISA code in one
// binary] in gemm_f32_avx512.cc).
//
// Note [Attention rows in registers]
// fused_attention's shapes are small GEMMs (BERT-base: 128 x 128 x 64 and 128 x 64 x 128 per
// head) for which the general GEMM's packing of both operands, twice per head, cost as much as
// the products (perf: pack_a + pack_b 19% of the op, the micro-kernels 45%). Here:
//   1. k^T is packed once per call into d rows of skp (sk rounded up to 16) floats, zero-padded:
//      a 16 x 16 in-register transpose when k's rows are unit-stride along D (BERT's [B, S, H, D]
//      split), row copies when k^T's rows are, a scalar gather otherwise.
//   2. Scores: blocks of up to 6 query rows x 64 key columns in 24 zmm accumulators; q is read in
//      place (one broadcast per row and step), the packed k^T rows stream through.
//   3. Softmax per row in f32 lanes: s = scale * s + mask (one fma) and the row max, then
//      e^(s - max) (a degree-7 polynomial on a Cody-Waite reduced argument, scaled by vscalefps;
//      about 1 ulp; -inf and anything below -87 give exactly 0: Note [No denormal exponentials] in avx512_util.h;
//      NaN stays NaN) and the row sum. A NaN anywhere makes the row NaN, as does a max of +-inf
//      (all -inf: 0/0), as in the unfused softmax; under zero_nan_rows such a row is zeros.
//   4. Output, after all rows' scores: v packed into sk rows of Dv rounded up to 16 floats (BERT's
//      v rows lie 3 KiB apart, a stride that maps a head's v onto 16 of L1's 64 sets: read in
//      place, this product ran 2.6x slower than the scores), then 6 rows x 64 output columns in 24
//      accumulators, the probabilities broadcast; each row scaled by 1 / its sum as it is stored.
// Every output element sees the same sequence of operations whatever the row blocking, so the
// result does not depend on the thread count.
// GCC 12 warns about the undefined upper half in its own _mm512 cast intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "kernels/cpu/attention_f32.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

#include "kernels/cpu/avx512_util.h"

namespace kiln::kernels::cpu {

namespace {

constexpr int kRows = 6;  // query rows per register block
constexpr int kVecs = 4;  // 16-float vectors per register block row (64 columns)

using avx512::tail_mask;

// ---- packing k^T ---------------------------------------------------------------------------------

// kt[p * skp + j] = k[j, p] for p < d, j < sk; zero for sk <= j < skp.
void pack_kt(const AttentionF32Args& a, int64_t skp, float* kt) {
  if (a.k_ps == 1) {
    for (int64_t j0 = 0; j0 < skp; j0 += 16) {
      const int64_t nj = std::min<int64_t>(16, a.sk - j0);
      for (int64_t p0 = 0; p0 < a.d; p0 += 16) {
        const __mmask16 m = tail_mask(a.d - p0);
        __m512 r[16];
        for (int i = 0; i < 16; ++i)
          r[i] = i < nj ? _mm512_maskz_loadu_ps(m, a.k + (j0 + i) * a.k_js + p0) : _mm512_setzero_ps();
        avx512::transpose16(r);
        const int64_t nc = std::min<int64_t>(16, a.d - p0);
        for (int64_t c = 0; c < nc; ++c) _mm512_storeu_ps(kt + (p0 + c) * skp + j0, r[c]);
      }
    }
    return;
  }
  for (int64_t p = 0; p < a.d; ++p) {
    float* row = kt + p * skp;
    const float* src = a.k + p * a.k_ps;
    if (a.k_js == 1) {
      std::memcpy(row, src, static_cast<size_t>(a.sk) * sizeof(float));
    } else {
      for (int64_t j = 0; j < a.sk; ++j) row[j] = src[j * a.k_js];
    }
    for (int64_t j = a.sk; j < skp; ++j) row[j] = 0.0f;
  }
}

// ---- scores --------------------------------------------------------------------------------------

// s[r * ld + 16 u + l] = sum_p q[r, p] * kt[p, 16 u + l] for r < R, u < U (kt and s already offset
// to the block's first column; kt zero-padded, so all U vectors are whole).
template <int R, int U>
void score_block(const float* q, int64_t q_rs, const float* kt, int64_t skp, int64_t d, float* s, int64_t ld) {
  __m512 acc[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) acc[r][u] = _mm512_setzero_ps();
  for (int64_t p = 0; p < d; ++p) {
    __m512 b[U];
    for (int u = 0; u < U; ++u) b[u] = _mm512_loadu_ps(kt + p * skp + 16 * u);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(q[r * q_rs + p]);
      for (int u = 0; u < U; ++u) acc[r][u] = _mm512_fmadd_ps(x, b[u], acc[r][u]);
    }
  }
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) _mm512_storeu_ps(s + r * ld + 16 * u, acc[r][u]);
}

template <int R>
void score_rows(const float* q, int64_t q_rs, const float* kt, int64_t skp, int64_t d, float* s) {
  int64_t j = 0;
  for (; j + 16 * kVecs <= skp; j += 16 * kVecs) score_block<R, kVecs>(q, q_rs, kt + j, skp, d, s + j, skp);
  switch ((skp - j) / 16) {
    case 3: score_block<R, 3>(q, q_rs, kt + j, skp, d, s + j, skp); break;
    case 2: score_block<R, 2>(q, q_rs, kt + j, skp, d, s + j, skp); break;
    case 1: score_block<R, 1>(q, q_rs, kt + j, skp, d, s + j, skp); break;
    default: break;
  }
}

// ---- softmax -------------------------------------------------------------------------------------

// row[j] <- e^(scale * row[j] + mrow[j] - max) for j < n (mrow null: no mask); returns 1 / sum.
// A row that would be NaN (a NaN, or a max of +-inf) becomes zeros under zero_nan_rows, and 0 is
// returned.
float softmax_row(float* row, int64_t n, float scale, const float* mrow, bool zero_nan_rows) {
  const __m512 vs = _mm512_set1_ps(scale), ninf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  __m512 mx = ninf;
  __mmask16 nan = 0;
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    const __m512 s = _mm512_maskz_loadu_ps(m, row + j);
    const __m512 x = mrow != nullptr ? _mm512_fmadd_ps(s, vs, _mm512_maskz_loadu_ps(m, mrow + j)) : _mm512_mul_ps(s, vs);
    _mm512_mask_storeu_ps(row + j, m, x);
    nan = static_cast<__mmask16>(nan | _mm512_mask_cmp_ps_mask(m, x, x, _CMP_UNORD_Q));
    mx = _mm512_mask_max_ps(mx, m, mx, x);
  }
  const float rmax = nan != 0 ? std::numeric_limits<float>::quiet_NaN() : _mm512_reduce_max_ps(mx);
  if (zero_nan_rows && !(std::abs(rmax) <= std::numeric_limits<float>::max())) {
    std::memset(row, 0, static_cast<size_t>(n) * sizeof(float));
    return 0.0f;
  }
  const __m512 vm = _mm512_set1_ps(rmax);
  // Sums in f32 lanes, moved to f64 every 1024 columns.
  double total = 0;
  __m512 acc = _mm512_setzero_ps();
  for (int64_t j = 0; j < n; j += 16) {
    const __mmask16 m = tail_mask(n - j);
    const __m512 e = avx512::exp_nonpositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, row + j), vm));
    _mm512_mask_storeu_ps(row + j, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
    if ((j & 1023) == 1008) {
      total += static_cast<double>(_mm512_reduce_add_ps(acc));
      acc = _mm512_setzero_ps();
    }
  }
  total += static_cast<double>(_mm512_reduce_add_ps(acc));
  return static_cast<float>(1.0 / total);
}

// ---- output ------------------------------------------------------------------------------------

// y[r, 16 u + l] = inv[r] * sum_j p[r, j] * v[j, 16 u + l] for r < R, u < U; the last vector
// stored under `tail` (v packed and zero-padded, v and y offset to the block's first column).
template <int R, int U>
void output_block(const float* p, int64_t ld, const float* v, int64_t v_rs, int64_t sk, const float* inv, float* y,
                  int64_t y_rs, __mmask16 tail) {
  __m512 acc[R][U];
  for (int r = 0; r < R; ++r)
    for (int u = 0; u < U; ++u) acc[r][u] = _mm512_setzero_ps();
  for (int64_t j = 0; j < sk; ++j) {
    __m512 b[U];
    for (int u = 0; u < U; ++u) b[u] = _mm512_loadu_ps(v + j * v_rs + 16 * u);
    for (int r = 0; r < R; ++r) {
      const __m512 x = _mm512_set1_ps(p[r * ld + j]);
      for (int u = 0; u < U; ++u) acc[r][u] = _mm512_fmadd_ps(x, b[u], acc[r][u]);
    }
  }
  for (int r = 0; r < R; ++r) {
    const __m512 w = _mm512_set1_ps(inv[r]);
    for (int u = 0; u < U; ++u) {
      const __m512 o = _mm512_mul_ps(acc[r][u], w);
      if (u + 1 < U) _mm512_storeu_ps(y + r * y_rs + 16 * u, o);
      else _mm512_mask_storeu_ps(y + r * y_rs + 16 * u, tail, o);
    }
  }
}

template <int R>
void output_rows(const float* p, int64_t ld, const float* v, int64_t v_rs, int64_t sk, int64_t dv, const float* inv,
                 float* y, int64_t y_rs) {
  int64_t c = 0;
  for (; c + 16 * kVecs <= dv; c += 16 * kVecs)
    output_block<R, kVecs>(p, ld, v + c, v_rs, sk, inv, y + c, y_rs, __mmask16(0xffff));
  const int64_t rest = dv - c;
  if (rest == 0) return;
  const __mmask16 tail = tail_mask(rest - (rest - 1) / 16 * 16);
  switch ((rest + 15) / 16) {
    case 4: output_block<R, 4>(p, ld, v + c, v_rs, sk, inv, y + c, y_rs, tail); break;
    case 3: output_block<R, 3>(p, ld, v + c, v_rs, sk, inv, y + c, y_rs, tail); break;
    case 2: output_block<R, 2>(p, ld, v + c, v_rs, sk, inv, y + c, y_rs, tail); break;
    default: output_block<R, 1>(p, ld, v + c, v_rs, sk, inv, y + c, y_rs, tail); break;
  }
}

// ---- driver ------------------------------------------------------------------------------------

// v[j, 0:dv] -> vp[j * dvp + 0:dvp], zero-padded to dvp (dv rounded up to 16).
void pack_v(const AttentionF32Args& a, int64_t dvp, float* vp) {
  for (int64_t j = 0; j < a.sk; ++j) {
    const float* src = a.v + j * a.v_rs;
    float* dst = vp + j * dvp;
    for (int64_t c = 0; c < dvp; c += 16) {
      const __mmask16 m = tail_mask(a.dv - c);
      _mm512_storeu_ps(dst + c, _mm512_maskz_loadu_ps(m, src + c));
    }
  }
}

void attention_rows__avx512(const AttentionF32Args& a, int64_t i0, int64_t i1, float* ws) {
  const int64_t skp = (a.sk + 15) / 16 * 16, dvp = (a.dv + 15) / 16 * 16, rows = i1 - i0;
  float* kt = ws;
  float* s = kt + a.d * skp;
  float* mrow = s + rows * skp;
  float* inv = mrow + skp;
  float* vp = inv + rows + 16;
  // Scores and softmax for every row while the packed k^T is hot, then the products with the
  // packed v (k^T and v together pass L1 at BERT's size; one at a time they stay in it).
  pack_kt(a, skp, kt);
  for (int64_t ib = 0; ib < rows; ib += kRows) {
    const int64_t nr = std::min<int64_t>(kRows, rows - ib);
    const int64_t i = i0 + ib;
    float* sb = s + ib * skp;
    const float* qb = a.q + i * a.q_rs;
    switch (nr) {
      case 6: score_rows<6>(qb, a.q_rs, kt, skp, a.d, sb); break;
      case 5: score_rows<5>(qb, a.q_rs, kt, skp, a.d, sb); break;
      case 4: score_rows<4>(qb, a.q_rs, kt, skp, a.d, sb); break;
      case 3: score_rows<3>(qb, a.q_rs, kt, skp, a.d, sb); break;
      case 2: score_rows<2>(qb, a.q_rs, kt, skp, a.d, sb); break;
      default: score_rows<1>(qb, a.q_rs, kt, skp, a.d, sb); break;
    }
    for (int64_t r = 0; r < nr; ++r) {
      const float* m = nullptr;
      if (a.mask != nullptr) {
        m = a.mask + (i + r) * a.m_rs;
        if (a.m_cs != 1) {
          for (int64_t j = 0; j < a.sk; ++j) mrow[j] = m[j * a.m_cs];
          m = mrow;
        }
      }
      inv[ib + r] = softmax_row(sb + r * skp, a.sk, a.scale, m, a.zero_nan_rows);
    }
  }
  pack_v(a, dvp, vp);
  for (int64_t ib = 0; ib < rows; ib += kRows) {
    const int64_t nr = std::min<int64_t>(kRows, rows - ib);
    const float* sb = s + ib * skp;
    float* yb = a.y + (i0 + ib) * a.y_rs;
    switch (nr) {
      case 6: output_rows<6>(sb, skp, vp, dvp, a.sk, a.dv, inv + ib, yb, a.y_rs); break;
      case 5: output_rows<5>(sb, skp, vp, dvp, a.sk, a.dv, inv + ib, yb, a.y_rs); break;
      case 4: output_rows<4>(sb, skp, vp, dvp, a.sk, a.dv, inv + ib, yb, a.y_rs); break;
      case 3: output_rows<3>(sb, skp, vp, dvp, a.sk, a.dv, inv + ib, yb, a.y_rs); break;
      case 2: output_rows<2>(sb, skp, vp, dvp, a.sk, a.dv, inv + ib, yb, a.y_rs); break;
      default: output_rows<1>(sb, skp, vp, dvp, a.sk, a.dv, inv + ib, yb, a.y_rs); break;
    }
  }
}

}  // namespace

AttentionRowsF32 attention_rows_f32_avx512() { return attention_rows__avx512; }

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
