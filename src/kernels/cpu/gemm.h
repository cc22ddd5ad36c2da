// Raw CPU GEMM entry points: C = alpha * A @ B + beta * C on plain pointers. A simple
// cache-blocked loop nest (see Note [Blocked GEMM] in gemm.cc); the tuned packed micro-kernel
// GEMM replaces the inside later without changing these signatures. matmul, gemm and conv2d
// (through im2col) all end here.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

// A is M x K with element (i, p) at a[i * a_rs + p * a_cs]; B is K x N with element (p, j) at
// b[p * b_rs + j * b_cs] (strides in elements, any layout: transposes are just swapped strides).
// C is row-major with leading dimension ldc. beta == 0 overwrites C without reading it (so NaNs
// already in C do not leak through). Parallel over tiles of C on kiln's thread pool; runs inline
// when called inside a parallel region.
void gemm_f32(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
              const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc);
void gemm_f64(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
              const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc);
// Integer GEMM with wrap-around (two's complement) arithmetic, as NumPy's integer matmul.
void gemm_i64(int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a, int64_t a_rs, int64_t a_cs,
              const int64_t* b, int64_t b_rs, int64_t b_cs, int64_t beta, int64_t* c, int64_t ldc);

// Overloads for templates that hold the element type.
inline void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_rs, int64_t a_cs,
                 const float* b, int64_t b_rs, int64_t b_cs, float beta, float* c, int64_t ldc) {
  gemm_f32(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}
inline void gemm(int64_t m, int64_t n, int64_t k, double alpha, const double* a, int64_t a_rs, int64_t a_cs,
                 const double* b, int64_t b_rs, int64_t b_cs, double beta, double* c, int64_t ldc) {
  gemm_f64(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}
inline void gemm(int64_t m, int64_t n, int64_t k, int64_t alpha, const int64_t* a, int64_t a_rs, int64_t a_cs,
                 const int64_t* b, int64_t b_rs, int64_t b_cs, int64_t beta, int64_t* c, int64_t ldc) {
  gemm_i64(m, n, k, alpha, a, a_rs, a_cs, b, b_rs, b_cs, beta, c, ldc);
}

}  // namespace kiln::kernels::cpu
