// The hooks by which the CUDA layer plugs into core and ops without those layers depending on it.
// They are defined (null) in src/core/device.cc and src/ops/tensor_methods.cc and set at static
// initialization by src/kernels/cuda/runtime.cc when kiln is built with CUDA.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln::detail {

// True when a CUDA device is usable (kiln::cuda_available() calls it when set).
extern bool (*g_cuda_available)();
// Copies `src` into `dst` across devices; `dst` is contiguous and has src's shape and dtype.
extern void (*g_cross_device_copy)(const Tensor& dst, const Tensor& src);

}  // namespace kiln::detail
