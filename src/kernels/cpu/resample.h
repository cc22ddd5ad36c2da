// Separable resampling (resize): each resized axis maps every output position to a few input
// positions and weights (a tap table built by the op definition); the kernels apply the tables one
// axis at a time (f32 ones on the last two axes both at once), their adjoint (the gradient), or a
// pure gather for nearest-neighbour tables.
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
// f32 resampling whose tables all sit on the last two axes and have no outside positions (every
// resize of an image's height and width but tf_crop_and_resize's extrapolation): y = x resampled,
// in one pass with no intermediate tensor (Note [Resizing the last two axes at once]).
bool resample_last2_f32_applies(const Shape& x, const std::vector<ResampleAxis>& axes);
// x: contiguous f32; y: contiguous f32 of the resampled shape. The tables must pass
// resample_last2_f32_applies.
void resample_last2_f32(const Tensor& x, const std::vector<ResampleAxis>& axes, const Tensor& y);

// The row kernel behind resample_last2_f32, per ISA. Output row r (of planes * out_h) is plane
// r / out_h, row oy = r % out_h: the input rows h_index[oy * h_taps + k] weighted by
// h_weight[oy * h_taps + k] (h_taps == 0: the height is not resized, row oy itself). The width
// (w_blocks == 0: not resized) comes in blocks of 16 output columns: output column 16 b + l is the
// sum over t < w_taps of w_weight[e] * (blended row)[i], e = (b * w_taps + t) * 16 + l, where
// i = w_lo[b] + w_index[e] if w_span[b] <= 16 (the block's taps all read the 16 columns from w_lo[b])
// and i = w_index[e] otherwise. Lanes past out_w read column w_lo[b] with weight 0. `tmp` has room
// for in_w rounded up to a multiple of 16 floats.
struct Last2PlanF32 {
  int64_t in_h = 0, in_w = 0, out_h = 0, out_w = 0;
  int64_t h_taps = 0;
  const int64_t* h_index = nullptr;
  const float* h_weight = nullptr;
  // h_repeat[oy]: output row oy has output row oy - 1's height taps, so it is that row again
  // (nearest upsampling); nullptr when no row does.
  const uint8_t* h_repeat = nullptr;
  int64_t w_blocks = 0, w_taps = 0;
  bool w_wide = false;  // some block spans more than 16 columns
  bool w_copy = false;  // one tap of weight 1 per column (nearest): a permute, no multiply
  const int64_t* w_lo = nullptr;
  const int64_t* w_span = nullptr;
  const int32_t* w_index = nullptr;
  const float* w_weight = nullptr;
};
using Last2RowsF32 = void (*)(const Last2PlanF32& p, const float* x, float* y, float* tmp, int64_t r0, int64_t r1);
Last2RowsF32 last2_rows_f32_avx512();

// Nearest-neighbour resampling of any dtype: every table has one tap of weight 1. x: contiguous;
// y: contiguous with the resampled shape and x's dtype; `fill`: one element of that dtype written
// at outside positions.
void resample_gather(const Tensor& x, const Tensor& y, const std::vector<ResampleAxis>& axes, const Tensor& fill);

}  // namespace kiln::kernels::cpu
