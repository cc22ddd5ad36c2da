// f32 GEMM micro-kernel for AVX2+FMA: a 6 x 16 tile in 12 ymm accumulators; right-edge tiles go
// through a small stack tile. Compiled for AVX2 by the target pragma below (Note [ISA code in one
// binary] in gemm_f32_avx512.cc).
#include <immintrin.h>

#include "kernels/cpu/gemm_ukernel.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace kiln::kernels::cpu {

namespace {

constexpr int kMr = 6, kNr = 16;

template <int M>
void f32_gemm_ukernel_6x16__avx2(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                                 int n, float alpha, float beta) {
  __m256 acc0[M], acc1[M];
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) acc0[i] = acc1[i] = _mm256_setzero_ps();
  for (int64_t p = 0; p < k; ++p) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < M; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc0[i] = _mm256_fmadd_ps(ai, b0, acc0[i]);
      acc1[i] = _mm256_fmadd_ps(ai, b1, acc1[i]);
    }
    a += kMr;
    b += ldb;
  }
  // A partial tile is stored through a full-width stack tile so every vector access stays in bounds.
  alignas(32) float tile[kMr * kNr];
  float* dst = c;
  int64_t ld = ldc;
  if (n < kNr) {
    dst = tile;
    ld = kNr;
    if (beta != 0.0f)
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < n; ++j) tile[i * kNr + j] = c[i * ldc + j];
  }
  const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
#pragma GCC unroll 6
  for (int i = 0; i < M; ++i) {
    float* cr = dst + i * ld;
    __m256 r0 = _mm256_mul_ps(va, acc0[i]), r1 = _mm256_mul_ps(va, acc1[i]);
    if (beta != 0.0f) {
      r0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr), r0);
      r1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(cr + 8), r1);
    }
    _mm256_storeu_ps(cr, r0);
    _mm256_storeu_ps(cr + 8, r1);
  }
  if (n < kNr)
    for (int i = 0; i < M; ++i)
      for (int j = 0; j < n; ++j) c[i * ldc + j] = tile[i * kNr + j];
}

void f32_gemm_ukernel__avx2(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc, int m,
                            int n, float alpha, float beta) {
  switch (m) {
    case 1: return f32_gemm_ukernel_6x16__avx2<1>(k, a, b, ldb, c, ldc, n, alpha, beta);
    case 2: return f32_gemm_ukernel_6x16__avx2<2>(k, a, b, ldb, c, ldc, n, alpha, beta);
    case 3: return f32_gemm_ukernel_6x16__avx2<3>(k, a, b, ldb, c, ldc, n, alpha, beta);
    case 4: return f32_gemm_ukernel_6x16__avx2<4>(k, a, b, ldb, c, ldc, n, alpha, beta);
    case 5: return f32_gemm_ukernel_6x16__avx2<5>(k, a, b, ldb, c, ldc, n, alpha, beta);
    default: return f32_gemm_ukernel_6x16__avx2<6>(k, a, b, ldb, c, ldc, n, alpha, beta);
  }
}

}  // namespace

const GemmKernelF32& gemm_kernel_f32_avx2() {
  static const GemmKernelF32 k{Isa::avx2, kMr, kNr, 240, 256, 4096, f32_gemm_ukernel__avx2, {}, {}};
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
