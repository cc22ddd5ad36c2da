// Per-device allocators. The CPU one caches freed blocks by size class (a fresh 4 KiB page costs
// ~14 µs on the VMs we run on, more than the arithmetic on it) and asks for huge pages on large
// blocks. See Note [Caching allocator] in src/core/allocator.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kiln/core/device.h"

namespace kiln {

inline constexpr size_t kAlignment = 64;

struct AllocatorStats {
  uint64_t allocations = 0;      // calls to allocate()
  uint64_t cache_hits = 0;       // served from the cache without asking the OS
  uint64_t bytes_in_use = 0;     // handed out and not yet returned
  uint64_t bytes_cached = 0;     // returned and kept for reuse
  uint64_t peak_bytes_in_use = 0;
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t nbytes) = 0;  // kAlignment-aligned; nbytes may be 0
  virtual void deallocate(void* p, size_t nbytes) = 0;
  virtual void empty_cache() = 0;
  virtual AllocatorStats stats() const = 0;
  virtual Device device() const = 0;
};

// The process-wide allocator for a device. CUDA throws kiln::Error when kiln has no CUDA.
Allocator& allocator_for(Device device);

// Registration hook for device back ends living in other targets (kernels/cuda).
void register_allocator(DeviceType type, Allocator* allocator);

}  // namespace kiln
