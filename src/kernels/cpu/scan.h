// Parallel blocked prefix sum of contiguous f32 with a float64 carry (Note [Blocked scan] in
// scan.cc), and the per-ISA block kernels it runs.
#pragma once

#include <cstdint>

#include "kernels/cpu/isa.h"

namespace kiln::kernels::cpu {

// out[i] = x[0] + ... + x[i], accumulated so that the error stays near one f32 rounding of the
// exact prefix sum even for 10^8 elements. out may equal x. Parallel on kiln's pool.
void cumsum_f32(const float* x, float* out, int64_t n);

// Block kernels: scan `n` elements starting from `carry`, return carry + their sum (in f64); and
// sum `n` elements in f64.
struct ScanKernelsF32 {
  double (*scan)(const float* x, float* out, int64_t n, double carry);
  double (*sum)(const float* x, int64_t n);
};
ScanKernelsF32 scan_kernels_f32_scalar();
ScanKernelsF32 scan_kernels_f32_avx2();
ScanKernelsF32 scan_kernels_f32_avx512();

}  // namespace kiln::kernels::cpu
