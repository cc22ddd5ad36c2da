// Elementwise f32 add on the GPU, in grid-stride loops. When every operand that is read per
// element is 16-byte aligned, each thread moves float4s: scalar 4-byte accesses reached only about
// half of an H200's memory bandwidth (2.1 against 4.3 TB/s for PyTorch's add at 2^26 elements;
// bench/RESULTS.md). A broadcast scalar operand is read once per thread, never per element.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/launch.h"

namespace kiln::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 8;

template <bool AScalar, bool BScalar>
__global__ void add_f32_kernel(float* __restrict__ out, const float* __restrict__ a,
                               const float* __restrict__ b, int64_t n) {
  const float a0 = AScalar ? a[0] : 0.f, b0 = BScalar ? b[0] : 0.f;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = (AScalar ? a0 : a[i]) + (BScalar ? b0 : b[i]);
  }
}

// The same over float4s: elements [0, 4 * n4) as vectors, then the last n % 4 one by one.
template <bool AScalar, bool BScalar>
__global__ void add_f32x4_kernel(float* __restrict__ out, const float* __restrict__ a,
                                 const float* __restrict__ b, int64_t n) {
  const float a0 = AScalar ? a[0] : 0.f, b0 = BScalar ? b[0] : 0.f;
  const int64_t n4 = n / 4;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = first; i < n4; i += stride) {
    const float4 x = AScalar ? make_float4(a0, a0, a0, a0) : reinterpret_cast<const float4*>(a)[i];
    const float4 y = BScalar ? make_float4(b0, b0, b0, b0) : reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(x.x + y.x, x.y + y.y, x.z + y.z, x.w + y.w);
  }
  if (first < n - 4 * n4) {
    const int64_t i = 4 * n4 + first;
    out[i] = (AScalar ? a0 : a[i]) + (BScalar ? b0 : b[i]);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <bool AScalar, bool BScalar>
void launch(float* out, const float* a, const float* b, int64_t n) {
  const bool vector = aligned16(out) && (AScalar || aligned16(a)) && (BScalar || aligned16(b));
  const int64_t items = vector ? (n + 3) / 4 : n;  // threads needed
  const int64_t blocks = (items + kThreads - 1) / kThreads;  // >= 1, as n > 0
  const int grid = static_cast<int>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
  if (vector) {
    add_f32x4_kernel<AScalar, BScalar><<<grid, kThreads>>>(out, a, b, n);
  } else {
    add_f32_kernel<AScalar, BScalar><<<grid, kThreads>>>(out, a, b, n);
  }
}

}  // namespace

int launch_add_f32(float* out, const float* a, const float* b, int64_t n, bool a_scalar, bool b_scalar) {
  if (n <= 0) return 0;
  if (a_scalar && b_scalar) {
    launch<true, true>(out, a, b, n);
  } else if (a_scalar) {
    launch<true, false>(out, a, b, n);
  } else if (b_scalar) {
    launch<false, true>(out, a, b, n);
  } else {
    launch<false, false>(out, a, b, n);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace kiln::kernels::cuda
