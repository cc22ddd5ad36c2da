// The GEMM's rows kernel (GemmRowsUkernelF32: Note [Few rows read in place] in gemm_packed.cc),
// written once over a vector type and instantiated by the AVX2 and AVX-512 files. Include it after
// the file's `#pragma GCC target(...)`, like tile_store.h: the functions are static, so each ISA's
// file compiles its own copy with its own instructions.
//
// V supplies the vector type (V::Reg, V::kWidth floats), zero / load / broadcast / fma / add, and
// store_row(c, n, r0, r1, alpha, beta): c[0:n] = alpha * (r0, r1)[0:n] + beta * c[0:n] (beta == 0:
// c is not read) for the tile's 2 * kWidth columns, writing only the first n.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

// M rows of A (row i at a + i * lda) by a 2-vector-wide panel of B (row p at b + p * ldb). With
// one row the packed tile's loop is two FMA chains, each waiting on its own previous FMA; here U
// consecutive k-steps go to their own accumulators (2 * M * U >= 8 chains), summed at the end.
template <class V, int M>
static void gemm_rows_2v(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                         int n, float alpha, float beta) {
  using R = typename V::Reg;
  constexpr int W = V::kWidth, U = M == 1 ? 4 : M == 2 ? 2 : 1;
  R acc0[U][M], acc1[U][M];
#pragma GCC unroll 4
  for (int u = 0; u < U; ++u)
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) acc0[u][i] = acc1[u][i] = V::zero();
  auto step = [&](int u, int64_t p) {
    const R b0 = V::load(b + p * ldb), b1 = V::load(b + p * ldb + W);
#pragma GCC unroll 4
    for (int i = 0; i < M; ++i) {
      const R ai = V::broadcast(a + i * lda + p);
      acc0[u][i] = V::fma(ai, b0, acc0[u][i]);
      acc1[u][i] = V::fma(ai, b1, acc1[u][i]);
    }
  };
  int64_t p = 0;
  for (; p + U <= k; p += U) {
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) step(u, p + u);
  }
  for (; p < k; ++p) step(0, p);
#pragma GCC unroll 4
  for (int i = 0; i < M; ++i) {
#pragma GCC unroll 4
    for (int u = 1; u < U; ++u) {
      acc0[0][i] = V::add(acc0[0][i], acc0[u][i]);
      acc1[0][i] = V::add(acc1[0][i], acc1[u][i]);
    }
    V::store_row(c + i * ldc, n, acc0[0][i], acc1[0][i], alpha, beta);
  }
}

// GemmRowsUkernelF32 for 1 <= m <= 4.
template <class V>
static void gemm_rows(int64_t k, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                      int m, int n, float alpha, float beta) {
  switch (m) {
    case 1: return gemm_rows_2v<V, 1>(k, a, lda, b, ldb, c, ldc, n, alpha, beta);
    case 2: return gemm_rows_2v<V, 2>(k, a, lda, b, ldb, c, ldc, n, alpha, beta);
    case 3: return gemm_rows_2v<V, 3>(k, a, lda, b, ldb, c, ldc, n, alpha, beta);
    default: return gemm_rows_2v<V, 4>(k, a, lda, b, ldb, c, ldc, n, alpha, beta);
  }
}

}  // namespace kiln::kernels::cpu
