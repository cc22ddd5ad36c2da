// Separable resampling (resize): each resized axis maps every output position to a few input
// positions and weights (a tap table built by the op definition); the kernels apply the tables one
// axis at a time, their adjoint (the gradient), or a pure gather for nearest-neighbour tables.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::kernels::cpu {

// The taps of one axis: output position j reads input positions index[j * taps + t] (in
// [0, in_len)) with weights weight[j * taps + t]; when outside[j] is set the output is the
// constant `outside_value` instead (tf_crop_and_resize extrapolation).
struct ResampleAxis {
  int64_t axis = 0;
  int64_t in_len = 0, out_len = 0, taps = 1;
  std::vector<int64_t> index;
  std::vector<double> weight;
  std::vector<uint8_t> outside;
};

// x: contiguous f32 or f64. Applies the tables in order (each replaces its axis' length) and
// returns a new contiguous tensor of x's dtype. Accumulates in x's dtype.
Tensor resample_separable(const Tensor& x, const std::vector<ResampleAxis>& axes, double outside_value);
// The adjoint of resample_separable's linear part: g has the resampled shape, the result has
// `in_shape` (contiguous f64; g is read as f64). Outside positions contribute nothing.
Tensor resample_separable_adjoint(const Tensor& g, const Shape& in_shape, const std::vector<ResampleAxis>& axes);
// Nearest-neighbour resampling of any dtype: every table has one tap of weight 1. x: contiguous;
// y: contiguous with the resampled shape and x's dtype; `fill`: one element of that dtype written
// at outside positions.
void resample_gather(const Tensor& x, const Tensor& y, const std::vector<ResampleAxis>& axes, const Tensor& fill);

}  // namespace kiln::kernels::cpu
