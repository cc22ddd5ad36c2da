// Per-thread, grow-only workspace for kernels that need a temporary buffer on every call (im2col
// matrices, packed panels). Note [Reused workspace]: a fresh multi-megabyte std::vector per call
// costs a zero fill plus, in this VM, ~14 us of page faults per 4 KiB page when the allocator hands
// the pages back in between; a thread keeps its buffer instead (one per thread and slot, never
// shrunk, uninitialized: callers write before they read).
#pragma once

#include <cstddef>
#include <cstdlib>
#include <new>

namespace kiln::kernels::cpu {

enum class ScratchSlot { im2col, conv_nhwc, packed_weight, direct_conv_x, direct_conv_y, depthwise_block, pixel_stage,
                         nchwc_pad };

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
    const size_t bytes = (n * sizeof(T) + 63) / 64 * 64;
    buf.p = static_cast<T*>(std::aligned_alloc(64, bytes));
    if (buf.p == nullptr) throw std::bad_alloc();
    buf.cap = n;
  }
  return buf.p;
}

}  // namespace kiln::kernels::cpu
