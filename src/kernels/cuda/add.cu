// Elementwise f32 add on the GPU: one thread per element in a grid-stride loop. The first CUDA
// kernel behind an OpDef ("add"); the tuned and generated kernels come with later issues.
#include <cuda_runtime.h>

#include "kernels/cuda/launch.h"

namespace kiln::kernels::cuda {

namespace {

__global__ void add_f32_kernel(float* __restrict__ out, const float* __restrict__ a,
                               const float* __restrict__ b, int64_t n, bool a_scalar, bool b_scalar) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = a[a_scalar ? 0 : i] + b[b_scalar ? 0 : i];
  }
}

}  // namespace

int launch_add_f32(float* out, const float* a, const float* b, int64_t n, bool a_scalar, bool b_scalar) {
  if (n <= 0) return 0;
  constexpr int kThreads = 256;
  const int64_t blocks_needed = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(blocks_needed < 65535 * 8 ? blocks_needed : 65535 * 8);
  add_f32_kernel<<<blocks, kThreads>>>(out, a, b, n, a_scalar, b_scalar);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::kernels::cuda
