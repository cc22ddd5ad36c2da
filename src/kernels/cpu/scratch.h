// Per-thread, grow-only workspace for kernels that need a temporary buffer on every call (im2col
// matrices, packed panels). Note [Reused workspace]: a fresh multi-megabyte std::vector per call
// costs a zero fill plus, in this VM, ~14 us of page faults per 4 KiB page when the allocator hands
// the pages back in between; a thread keeps its buffer instead (one per thread and slot, never
// shrunk, uninitialized: callers write before they read). From 512 KiB up a buffer is 2 MiB-aligned
// and advised MADV_HUGEPAGE: the blocked convolution's padded copy of a 56 x 56 x 64 input (861 KB)
// on 4 KiB pages made ResNet-18's 56 x 56 layers about 4% slower.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <new>

#include <sys/mman.h>

namespace kiln::kernels::cpu {

enum class ScratchSlot { im2col, conv_nhwc, packed_weight, direct_conv_x, direct_conv_y, depthwise_block, pixel_stage,
                         nchwc_pad, depthwise_nchwc_band, winograd_v, winograd_m, layer_norm_rows };

inline constexpr size_t kHugeScratch = size_t{512} << 10;

// `bytes` rounded up, 64-aligned, or 2 MiB-aligned and advised MADV_HUGEPAGE from kHugeScratch up;
// nullptr when out of memory. Freed with std::free.
inline void* aligned_alloc_large(size_t bytes) {
  const size_t align = bytes >= kHugeScratch ? (size_t{2} << 20) : 64;
  const size_t rounded = (std::max<size_t>(bytes, 1) + align - 1) / align * align;
  void* p = std::aligned_alloc(align, rounded);
  if (p != nullptr && align > 64) madvise(p, rounded, MADV_HUGEPAGE);
  return p;
}

template <class T, ScratchSlot Slot>
T* thread_scratch(size_t n) {
  struct Buffer {
    T* p = nullptr;
    size_t cap = 0;
    ~Buffer() { std::free(p); }
  };
  thread_local Buffer buf;
  if (n > buf.cap) {
    std::free(buf.p);
    buf.p = nullptr;
    buf.cap = 0;
    buf.p = static_cast<T*>(aligned_alloc_large(n * sizeof(T)));
    if (buf.p == nullptr) throw std::bad_alloc();
    buf.cap = n;
  }
  return buf.p;
}

}  // namespace kiln::kernels::cpu
