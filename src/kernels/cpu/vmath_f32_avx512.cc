// vmath kernels for AVX-512 (16 f32 / 8 f64 lanes, masked tails): the vector interface that
// vmath_simd.inc is written against, then the algorithms themselves (Note [vmath accuracy]).
// Compiled for AVX-512 by the target pragma below, called only when active_isa() says the machine
// has it (Note [ISA code in one binary] in gemm_f32_avx512.cc).
// GCC 12 warns about the undefined upper half in its own _mm512 cast intrinsics (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/cpu/vmath.h"

#pragma GCC push_options
#pragma GCC target("avx512f,avx512vl,avx512bw,avx512dq,avx2,fma")

namespace kiln::kernels::cpu {

namespace {

#include "kernels/cpu/vmath_lanes_avx512.inc"
#include "kernels/cpu/vmath_simd.inc"

}  // namespace

const VmathKernelsF32& vmath_kernels_f32_avx512() {
  static const VmathKernelsF32 k = make_kernels(Isa::avx512);
  return k;
}

}  // namespace kiln::kernels::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
