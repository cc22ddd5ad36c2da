// Resampling and N-d pooling with ONNX semantics: resize (ONNX Resize 19), grid_sample (ONNX
// GridSample 20), and max/avg/lp pooling over 1-3 spatial dims (MaxPool 12, AveragePool 19,
// LpPool 18, GlobalMaxPool, GlobalLpPool). Layout [N, C, D1, ...].
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

struct ResizeOptions {
  std::string mode = "nearest";  // nearest, linear, cubic
  // half_pixel, half_pixel_symmetric, pytorch_half_pixel, align_corners, asymmetric, tf_crop_and_resize
  std::string coordinate_transformation_mode = "half_pixel";
  std::string nearest_mode = "round_prefer_floor";  // round_prefer_floor, round_prefer_ceil, floor, ceil
  double cubic_coeff_a = -0.75;
  bool exclude_outside = false;
  double extrapolation_value = 0.0;  // tf_crop_and_resize only
  bool antialias = false;            // linear and cubic, when downsampling
  // Per-dim scales used by the coordinate transform (empty: sizes[d] / x.shape[d]); ONNX uses the
  // given scale, not the size ratio, when Resize is called with scales.
  std::vector<double> scales;
  std::vector<double> roi;  // tf_crop_and_resize: [starts..., ends...] normalized; empty: [0..., 1...]
};
// Resizes every dim of x to sizes (one entry per dim).
Tensor resize(const Tensor& x, const std::vector<int64_t>& sizes, const ResizeOptions& opt = {},
              SourceLoc loc = KILN_HERE);

// N-d pooling windows over [N, C, D1, ..., Dk]: one entry per spatial dim (stride/dilation empty =
// 1); pads [begin..., end...] (empty = 0). ONNX's auto_pad is resolved into pads by the caller.
struct PoolNdOptions {
  std::vector<int64_t> kernel;
  std::vector<int64_t> stride{};
  std::vector<int64_t> pads{};
  std::vector<int64_t> dilation{};
  bool ceil_mode = false;
  bool count_include_pad = false;  // avg_pool only
  int64_t storage_order = 0;       // max_pool indices: 0 row-major, 1 column-major spatial offsets
};
// Values and the i64 row-major flat index into x (N and C included) of each window's maximum.
std::pair<Tensor, Tensor> max_pool(const Tensor& x, const PoolNdOptions& opt, SourceLoc loc = KILN_HERE);
Tensor avg_pool(const Tensor& x, const PoolNdOptions& opt, SourceLoc loc = KILN_HERE);
Tensor lp_pool(const Tensor& x, const PoolNdOptions& opt, int64_t p = 2, SourceLoc loc = KILN_HERE);

// Samples x [N, C, D1..Dk] at grid [N, O1..Ok, k] (normalized coordinates, last dim in reverse dim
// order: x = width first) -> [N, C, O1..Ok]. mode: nearest, linear, cubic; padding_mode: zeros,
// border, reflection (ONNX GridSample 20 / torch.nn.functional.grid_sample).
Tensor grid_sample(const Tensor& x, const Tensor& grid, const std::string& mode = "linear",
                   const std::string& padding_mode = "zeros", bool align_corners = false, SourceLoc loc = KILN_HERE);

}  // namespace kiln
