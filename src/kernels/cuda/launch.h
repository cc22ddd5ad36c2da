// Plain-C++ entry points of the .cu kernels, so the .cc files that call them need no CUDA syntax
// and the .cu files need no kiln headers. Each returns the CUDA error code of the launch (0: ok).
#pragma once

#include <cstdint>

namespace kiln::kernels::cuda {

// out[i] = a[a_scalar ? 0 : i] + b[b_scalar ? 0 : i] for i < n, on the current device.
int launch_add_f32(float* out, const float* a, const float* b, int64_t n, bool a_scalar, bool b_scalar);

}  // namespace kiln::kernels::cuda
