// Float64 references for the resampling family (resize, N-d pooling, grid_sample): direct loops
// over every output element, written independently of the fast kernels. Slow on purpose.
#pragma once

#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/attrs.h"

namespace kiln::ref {

// resize with every attribute of the resize op's schema present in `attrs`: each output element
// is the tensor product of the per-axis filters (ONNX's n-d formulation), not separable passes.
Tensor resize(const Tensor& x, const Attrs& attrs);

// grid_sample (ONNX GridSample 20): mode nearest/linear/cubic, padding zeros/border/reflection.
Tensor grid_sample(const Tensor& x, const Tensor& grid, const std::string& mode, const std::string& padding_mode,
                   bool align_corners);

}  // namespace kiln::ref
