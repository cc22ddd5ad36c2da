// Allocators per device.
//
// Note [Caching allocator]
// On the VMs kiln is developed on, the first touch of a fresh 4 KiB page costs ~14 µs (with huge
// pages ~0.3 µs): an op that allocates a fresh output each call spends more time faulting pages
// than computing. So freed blocks are kept in per-size-class free lists and handed out again.
// Sizes are rounded up to a class (8 classes per power of two, so at most 12.5% waste), blocks
// from 1 MiB up are 2 MiB-aligned and advised MADV_HUGEPAGE. The cache is bounded
// (kMaxCachedBytes); beyond it blocks go back to the OS. Under AddressSanitizer caching is off so
// use-after-free is still caught; KILN_ALLOCATOR_CACHE=0 turns it off too.
#include "kiln/core/allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <vector>

#include "kiln/core/error.h"

namespace kiln {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

constexpr size_t kHugeThreshold = size_t{1} << 20;
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kMaxCachedBytes = size_t{2} << 30;

size_t size_class(size_t n) {
  if (n <= 256) return (n + 63) & ~size_t{63};
  // 8 classes per power of two.
  size_t p = size_t{1} << (63 - __builtin_clzll(n - 1));  // largest power of two < n
  size_t step = p / 8;
  return (n + step - 1) / step * step;
}

class CpuCachingAllocator final : public Allocator {
 public:
  CpuCachingAllocator() {
    const char* env = std::getenv("KILN_ALLOCATOR_CACHE");
    caching_ = !kSanitized && !(env && std::strcmp(env, "0") == 0);
  }
  ~CpuCachingAllocator() override { empty_cache(); }

  void* allocate(size_t nbytes) override {
    size_t cls = size_class(nbytes == 0 ? 1 : nbytes);
    {
      std::lock_guard<std::mutex> g(mu_);
      ++stats_.allocations;
      stats_.bytes_in_use += cls;
      if (stats_.bytes_in_use > stats_.peak_bytes_in_use) stats_.peak_bytes_in_use = stats_.bytes_in_use;
      auto it = free_.find(cls);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        stats_.bytes_cached -= cls;
        ++stats_.cache_hits;
        return p;
      }
    }
    size_t align = cls >= kHugeThreshold ? kHugePage : kAlignment;
    size_t rounded = (cls + align - 1) / align * align;
    void* p = std::aligned_alloc(align, rounded);
    if (!p) {
      empty_cache();
      p = std::aligned_alloc(align, rounded);
    }
    if (!p) {
      std::lock_guard<std::mutex> g(mu_);
      stats_.bytes_in_use -= cls;
      KILN_FAIL("out of memory: could not allocate ", nbytes, " bytes on cpu");
    }
    if (cls >= kHugeThreshold) madvise(p, rounded, MADV_HUGEPAGE);
    return p;
  }

  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    size_t cls = size_class(nbytes == 0 ? 1 : nbytes);
    {
      std::lock_guard<std::mutex> g(mu_);
      stats_.bytes_in_use -= cls;
      if (caching_ && stats_.bytes_cached + cls <= kMaxCachedBytes) {
        free_[cls].push_back(p);
        stats_.bytes_cached += cls;
        return;
      }
    }
    std::free(p);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> g(mu_);
    for (auto& [cls, blocks] : free_)
      for (void* p : blocks) std::free(p);
    free_.clear();
    stats_.bytes_cached = 0;
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> g(mu_);
    return stats_;
  }
  Device device() const override { return Device::cpu(); }

 private:
  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
  bool caching_ = true;
};

Allocator* g_device_allocators[2] = {nullptr, nullptr};

}  // namespace

void register_allocator(DeviceType type, Allocator* allocator) {
  g_device_allocators[static_cast<int>(type)] = allocator;
}

Allocator& allocator_for(Device device) {
  if (device.is_cpu()) {
    static CpuCachingAllocator* cpu = new CpuCachingAllocator();  // never destroyed: tensors may outlive main
    return *cpu;
  }
  Allocator* a = g_device_allocators[static_cast<int>(device.type)];
  KILN_CHECK(a != nullptr, "device ", device.str(),
             " is not available: this kiln was built without CUDA (configure with -DKILN_CUDA=ON)");
  return *a;
}

}  // namespace kiln
