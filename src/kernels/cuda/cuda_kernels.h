// The CUDA kernels kiln's op definitions attach to (compiled only when KILN_CUDA is on; the ops
// that use them guard the include with KILN_HAS_CUDA).
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::kernels::cuda {

// out = a + b for f32 tensors on one CUDA device: `out` contiguous, `a` and `b` contiguous with
// out's shape or holding a single element (a broadcast scalar). Other layouts are a kiln::Error.
void add_f32(const Tensor& out, const Tensor& a, const Tensor& b);

}  // namespace kiln::kernels::cuda
