// kiln's CUDA back end at run time: the device allocator, the cross-device copy, the
// cuda_available() probe, and the Tensor-level wrappers of the .cu kernels. Everything registers
// at static initialization (Note [CUDA registration]); kiln links the CUDA runtime statically and
// never the driver library, which the runtime loads itself when a GPU is present.
#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <vector>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_hooks.h"
#include "kernels/cuda/launch.h"
#include "kiln/core/allocator.h"

namespace kiln {

namespace {

// Why CUDA is unusable ("" when it is usable), probed once.
const std::string& cuda_problem() {
  static const std::string problem = [] {
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err != cudaSuccess) {
      std::string msg = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      cudaGetLastError();  // clear the sticky error
      return "no usable CUDA device (" + msg + ")";
    }
    if (count == 0) return std::string("no CUDA device is visible");
    return std::string();
  }();
  return problem;
}

void check_cuda(cudaError_t err, const char* what) {
  KILN_CHECK(err == cudaSuccess, "CUDA: ", what, " failed: ", cudaGetErrorName(err), ": ", cudaGetErrorString(err));
}

// Note [CUDA allocator]
// cudaMalloc is slow (it may synchronize the device), so freed blocks are kept by size class
// (rounded up to 512 bytes) for reuse until empty_cache(). cudaMalloc returns 256-byte aligned
// memory, which covers kAlignment (64). The allocator is created once and never destroyed: at
// process exit the CUDA runtime may already be gone, so freeing then would only fail.
class CudaAllocator final : public Allocator {
 public:
  void* allocate(size_t nbytes) override {
    if (nbytes == 0) return nullptr;
    KILN_CHECK(cuda_problem().empty(), "cannot allocate ", nbytes, " bytes on cuda:0: ", cuda_problem(),
               "; kiln::cuda_available() is false on this machine, keep tensors on the CPU");
    const size_t cls = round_up(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    ++stats_.allocations;
    void* p = nullptr;
    auto it = cache_.find(cls);
    if (it != cache_.end() && !it->second.empty()) {
      p = it->second.back();
      it->second.pop_back();
      stats_.bytes_cached -= cls;
      ++stats_.cache_hits;
    } else {
      cudaError_t err = cudaMalloc(&p, cls);
      if (err == cudaErrorMemoryAllocation && stats_.bytes_cached > 0) {
        cudaGetLastError();
        release_cache_locked();
        err = cudaMalloc(&p, cls);
      }
      if (err != cudaSuccess) {
        cudaGetLastError();
        KILN_FAIL("CUDA: cudaMalloc of ", cls, " bytes failed: ", cudaGetErrorString(err), " (", stats_.bytes_in_use,
                  " bytes in use by kiln)");
      }
    }
    KILN_ASSERT(reinterpret_cast<uintptr_t>(p) % 256 == 0, "cudaMalloc returned unaligned memory");
    stats_.bytes_in_use += cls;
    stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
    return p;
  }

  void deallocate(void* p, size_t nbytes) override {
    if (!p) return;
    const size_t cls = round_up(nbytes);
    std::lock_guard<std::mutex> lock(mu_);
    stats_.bytes_in_use -= cls;
    stats_.bytes_cached += cls;
    cache_[cls].push_back(p);
  }

  void empty_cache() override {
    std::lock_guard<std::mutex> lock(mu_);
    release_cache_locked();
  }

  AllocatorStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  Device device() const override { return Device::cuda(0); }

 private:
  static size_t round_up(size_t n) { return (n + 511) / 512 * 512; }
  void release_cache_locked() {
    for (auto& [cls, blocks] : cache_)
      for (void* p : blocks) cudaFree(p);
    cache_.clear();
    stats_.bytes_cached = 0;
  }

  mutable std::mutex mu_;
  std::map<size_t, std::vector<void*>> cache_;
  AllocatorStats stats_;
};

void cross_device_copy(const Tensor& dst, const Tensor& src) {
  KILN_CHECK(dst.dtype() == src.dtype() && dst.shape() == src.shape(), "to(", dst.device().str(),
             "): internal copy between ", dtype_name(src.dtype()), shape_str(src.shape()), " and ",
             dtype_name(dst.dtype()), shape_str(dst.shape()));
  KILN_CHECK(dst.is_contiguous() && src.is_contiguous(), "to(", dst.device().str(), "): copying a non-contiguous ",
             src.device().str(), " view of shape ", shape_str(src.shape()),
             " across devices is not supported yet; call .contiguous() on it first");
  if (dst.numel() == 0) return;
  KILN_CHECK(cuda_problem().empty(), "to(", dst.device().str(), "): ", cuda_problem());
  check_cuda(cudaMemcpy(dst.data_ptr(), src.data_ptr(), dst.nbytes(), cudaMemcpyDefault), "cudaMemcpy");
}

bool probe_cuda_available() { return cuda_problem().empty(); }

// Note [CUDA registration]
// One static object installs the allocator and the hooks when libkiln loads. The hooks are plain
// function pointers with constant initialization (null), so setting them here is safe whatever
// the order of dynamic initialization; nothing touches the GPU until a CUDA tensor is made.
struct CudaRegistration {
  CudaRegistration() {
    register_allocator(DeviceType::cuda, new CudaAllocator());
    detail::g_cuda_available = &probe_cuda_available;
    detail::g_cross_device_copy = &cross_device_copy;
  }
};
const CudaRegistration registration;

}  // namespace

namespace kernels::cuda {

void add_f32(const Tensor& out, const Tensor& a, const Tensor& b) {
  auto operand_ok = [&](const Tensor& t) {
    return t.dtype() == DType::f32 && t.device() == out.device() && t.is_contiguous() &&
           (t.numel() == out.numel() || t.numel() == 1);  // the dispatcher checked broadcasting
  };
  KILN_CHECK(out.dtype() == DType::f32 && out.is_contiguous() && operand_ok(a) && operand_ok(b),
             "add on ", out.device().str(), ": the CUDA kernel takes contiguous f32 tensors of one shape or a "
             "one-element operand; got a: ", dtype_name(a.dtype()), shape_str(a.shape()), ", b: ",
             dtype_name(b.dtype()), shape_str(b.shape()), " (compute on the CPU or make them contiguous)");
  int err = launch_add_f32(static_cast<float*>(out.data_ptr()), static_cast<const float*>(a.data_ptr()),
                           static_cast<const float*>(b.data_ptr()), out.numel(), a.numel() == 1 && out.numel() != 1,
                           b.numel() == 1 && out.numel() != 1);
  check_cuda(static_cast<cudaError_t>(err), "add kernel launch");
}

}  // namespace kernels::cuda

}  // namespace kiln
