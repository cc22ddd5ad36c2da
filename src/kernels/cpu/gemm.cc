// The simple blocked GEMM behind gemm_f64 and gemm_i64 (f32 runs the packed GEMM of gemm_packed.cc).
#include "kernels/cpu/gemm.h"

#include <algorithm>
#include <vector>

#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [Blocked GEMM]
// C is cut into tiles of kRowTile rows x col_tile<T> columns; tiles run in parallel. Inside a tile
// the loop order is k-block, then rows four at a time, then k, then j: the innermost loop walks a
// row of B and four rows of C contiguously, so the compiler vectorizes it, and a k-block of the B
// panel (kDepth x col_tile) stays in L2 while every row of the tile passes over it. A is read one
// scalar per (row, k), so any A layout (transposed included) works without packing; B must have
// contiguous rows and is copied once when it does not. This is the "correct and not slow" GEMM;
// f32 has the packed micro-kernel GEMM (Note [Packed GEMM]).

namespace {

constexpr int64_t kRowTile = 64;
constexpr int64_t kDepth = 256;
template <class T> constexpr int64_t col_tile = 1024 / sizeof(T);  // 256 floats, 128 doubles
constexpr int64_t kSerialWork = int64_t{1} << 16;                // m*n*k below this: no threads

template <class T>
void axpy_rows4(int64_t n, T a0, T a1, T a2, T a3, const T* __restrict b, T* __restrict c0, T* __restrict c1,
                T* __restrict c2, T* __restrict c3) {
  for (int64_t j = 0; j < n; ++j) {
    const T bj = b[j];
    c0[j] += a0 * bj;
    c1[j] += a1 * bj;
    c2[j] += a2 * bj;
    c3[j] += a3 * bj;
  }
}

template <class T>
void axpy_row(int64_t n, T a0, const T* __restrict b, T* __restrict c0) {
  for (int64_t j = 0; j < n; ++j) c0[j] += a0 * b[j];
}

// One tile: rows [i0, i1), columns [j0, j1) of C, all of K. B has unit column stride.
template <class T>
void gemm_tile(int64_t i0, int64_t i1, int64_t j0, int64_t j1, int64_t k, T alpha, const T* a, int64_t a_rs,
               int64_t a_cs, const T* b, int64_t ldb, T beta, T* c, int64_t ldc) {
  const int64_t nb = j1 - j0;
  for (int64_t i = i0; i < i1; ++i) {
    T* cr = c + i * ldc + j0;
    if (beta == T(0)) std::fill(cr, cr + nb, T(0));
    else if (beta != T(1))
      for (int64_t j = 0; j < nb; ++j) cr[j] *= beta;
  }
  for (int64_t p0 = 0; p0 < k; p0 += kDepth) {
    const int64_t p1 = std::min(k, p0 + kDepth);
    int64_t i = i0;
    for (; i + 4 <= i1; i += 4) {
      T* c0 = c + i * ldc + j0;
      for (int64_t p = p0; p < p1; ++p) {
        const T* ap = a + i * a_rs + p * a_cs;
        axpy_rows4<T>(nb, alpha * ap[0], alpha * ap[a_rs], alpha * ap[2 * a_rs], alpha * ap[3 * a_rs],
                      b + p * ldb + j0, c0, c0 + ldc, c0 + 2 * ldc, c0 + 3 * ldc);
      }
    }
    for (; i < i1; ++i) {
      T* c0 = c + i * ldc + j0;
      for (int64_t p = p0; p < p1; ++p) axpy_row<T>(nb, alpha * a[i * a_rs + p * a_cs], b + p * ldb + j0, c0);
    }
  }
}

template <class T>
void gemm_blocked(int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t a_rs, int64_t a_cs, const T* b,
                  int64_t b_rs, int64_t b_cs, T beta, T* c, int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  std::vector<T> packed;
  if (b_cs != 1 && n > 1 && k > 0) {  // one column: the column stride is never walked
    packed.resize(static_cast<size_t>(k * n));
    for (int64_t p = 0; p < k; ++p)
      for (int64_t j = 0; j < n; ++j) packed[static_cast<size_t>(p * n + j)] = b[p * b_rs + j * b_cs];
    b = packed.data();
    b_rs = n;
  }
  const int64_t ct = col_tile<T>;
  const int64_t row_tiles = (m + kRowTile - 1) / kRowTile;
  const int64_t col_tiles = (n + ct - 1) / ct;
  auto run = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t i0 = (t / col_tiles) * kRowTile, j0 = (t % col_tiles) * ct;
      gemm_tile<T>(i0, std::min(m, i0 + kRowTile), j0, std::min(n, j0 + ct), k, alpha, a, a_rs, a_cs, b, b_rs, beta,
                   c, ldc);
    }
  };
  const int64_t tiles = row_tiles * col_tiles;
  if (tiles == 1 || m * n * std::max<int64_t>(k, 1) < kSerialWork) run(0, tiles);
  else parallel_for(0, tiles, 1, run);
}

}  // namespace

void gemm_f64(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
              const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc) {
  gemm_blocked<double>(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

void gemm_i64(int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a, int64_t a_rs, int64_t a_cs,
              const int64_t* b, int64_t b_rs, int64_t b_cs, int64_t beta, int64_t* c, int64_t ldc) {
  // Unsigned arithmetic wraps without undefined behaviour; int64_t and uint64_t may alias.
  using U = uint64_t;
  gemm_blocked<U>(m, n, k, static_cast<U>(alpha), reinterpret_cast<const U*>(a), a_rs, a_cs,
                  reinterpret_cast<const U*>(b), b_rs, b_cs, static_cast<U>(beta), reinterpret_cast<U*>(c), ldc);
}

}  // namespace kiln::kernels::cpu
