// Portable f32 GEMM micro-kernel (4 x 8 tile in plain C++; the compiler may use baseline SSE2), and
// the per-ISA kernel table.
#include "kernels/cpu/gemm_ukernel.h"

#include "kiln/core/error.h"

namespace kiln::kernels::cpu {

namespace {

constexpr int kMr = 4, kNr = 8;

void f32_gemm_ukernel_4x8__scalar(int64_t k, const float* a, const float* b, int64_t ldb, float* c, int64_t ldc,
                                  int m, int n, float alpha, float beta, uintptr_t /*l2_next*/, uintptr_t /*l2_end*/) {
  float acc[kMr][kNr] = {};
  for (int64_t p = 0; p < k; ++p) {
    for (int i = 0; i < kMr; ++i)
      for (int j = 0; j < kNr; ++j) acc[i][j] += a[i] * b[j];
    a += kMr;
    b += ldb;
  }
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      float& cij = c[i * ldc + j];
      cij = beta == 0.0f ? alpha * acc[i][j] : alpha * acc[i][j] + beta * cij;
    }
}

}  // namespace

const GemmKernelF32& gemm_kernel_f32_scalar() {
  static const GemmKernelF32 k{Isa::scalar, kMr, kNr, 128, 256, 2048, f32_gemm_ukernel_4x8__scalar, {}, {}};
  return k;
}

const GemmKernelF32& gemm_kernel_f32(Isa isa) {
  switch (isa) {
    case Isa::avx512: return gemm_kernel_f32_avx512();
    case Isa::avx2: return gemm_kernel_f32_avx2();
    case Isa::scalar: return gemm_kernel_f32_scalar();
  }
  KILN_ASSERT(false, "unknown ISA");
  return gemm_kernel_f32_scalar();
}

}  // namespace kiln::kernels::cpu
