// Software prefetch of a tile's rows, shared by the GEMM and convolution drivers and micro-kernels.
#pragma once

#include <cstdint>

namespace kiln::kernels::cpu {

// Requests the lines of `rows` rows of n floats (n >= 1), ld floats apart, the first at address p:
// each row's first line, and its last when that is another. Addresses are integers because a row
// may lie past the buffer (a prefetch never faults, but a pointer past the end is undefined).
// Static and always inlined: the AVX2 files include this under their target pragma (Note [ISA code
// in one binary] in gemm_f32_avx512.cc), and a separate function holding only prefetches is one
// GCC may judge free of side effects and drop its calls (Note [Prefetching the tile's output] in
// conv_direct.cc).
[[gnu::always_inline]] static inline void prefetch_rows(uintptr_t p, int64_t ld, int64_t rows, int64_t n) {
  const uintptr_t step = static_cast<uintptr_t>(ld) * sizeof(float), span = static_cast<uintptr_t>(n - 1) * sizeof(float);
  for (int64_t i = 0; i < rows; ++i, p += step) {
    __builtin_prefetch(reinterpret_cast<const void*>(p));
    if ((p ^ (p + span)) >= 64) __builtin_prefetch(reinterpret_cast<const void*>(p + span));
  }
}

// One k-step's share of a micro-kernel's L2 stream (Note [The next B panel] in gemm_packed.cc):
// the next two lines of [next, end) into L2, next advanced past them; nothing once it is empty.
[[gnu::always_inline]] static inline void prefetch_l2_step(uintptr_t& next, uintptr_t end) {
  if (next >= end) return;
  __builtin_prefetch(reinterpret_cast<const void*>(next), 0, 2);
  __builtin_prefetch(reinterpret_cast<const void*>(next + 64), 0, 2);
  next += 128;
}

}  // namespace kiln::kernels::cpu
