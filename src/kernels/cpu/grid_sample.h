// Grid sampling (ONNX GridSample 20, PyTorch grid_sample) over 1 to 4 spatial dims: each
// output location reads x at the grid's normalized coordinates with nearest, linear or cubic
// interpolation and zeros / border / reflection padding. Forward, and the backward for x and grid.
#pragma once

#include <cstdint>

#include "kiln/core/tensor.h"

namespace kiln::kernels::cpu {

struct GridSampleParams {
  enum class Mode : uint8_t { nearest, linear, cubic } mode = Mode::linear;
  enum class Padding : uint8_t { zeros, border, reflection } padding = Padding::zeros;
  bool align_corners = false;
};

// x: contiguous f32 or f64 [N, C, D1..Dk]; grid: contiguous f64 [N, O1..Om, k] whose last dim
// lists coordinates in reverse dim order (x = Dk first); y: contiguous x's dtype [N, C, O1..Om].
void grid_sample(const GridSampleParams& p, const Tensor& x, const Tensor& grid, const Tensor& y);
// All f64 contiguous. dx (x's shape) and dgrid (grid's shape) are overwritten with the gradients of
// sum(g * y); either may be undefined (not computed). Nearest has zero gradient w.r.t. the grid,
// and so have clamped (border) coordinates.
void grid_sample_backward(const GridSampleParams& p, const Tensor& x, const Tensor& grid, const Tensor& g,
                          const Tensor& dx, const Tensor& dgrid);

}  // namespace kiln::kernels::cpu
