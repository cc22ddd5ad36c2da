// Convolution and pooling, NCHW.
#pragma once

#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/attrs.h"

namespace kiln {

struct Conv2dOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0, 0, 0};  // top, left, bottom, right (ONNX order: begins, ends)
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
};
// x: [N, C, H, W], w: [K, C/groups, R, S], bias: [K] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias = {}, const Conv2dOptions& opt = {},
              SourceLoc loc = KILN_HERE);

// Transposed convolution (ONNX ConvTranspose with explicit pads): x [N, C, H, W], w [C, K/groups,
// R, S], bias [K] or undefined; output [N, K, Ho, Wo] with Ho = stride*(H-1) + output_padding +
// dilation*(R-1) + 1 - top - bottom. output_padding < stride or dilation.
struct ConvTranspose2dOptions {
  std::vector<int64_t> stride{1, 1};
  std::vector<int64_t> padding{0, 0, 0, 0};  // top, left, bottom, right: cropped from the full output
  std::vector<int64_t> output_padding{0, 0};
  std::vector<int64_t> dilation{1, 1};
  int64_t groups = 1;
};
Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias = {},
                        const ConvTranspose2dOptions& opt = {}, SourceLoc loc = KILN_HERE);

// The compiler's blocked convolution (fused_conv2d_nchwc, channels in blocks of 16) runs a grouped
// convolution a span of consecutive groups at a time, the fewest whose input and output channels
// fill whole blocks, at span times the work (Note [Grouped blocks] in kernels/cpu/conv_nchwc.cc):
// the span for C input and K output channels in `groups` groups (1 for one group), or 0 where
// there is none it takes (depthwise layers have a kernel of their own).
int64_t nchwc_conv_group_span(int64_t c, int64_t k, int64_t groups);
// Whether the blocked convolution offers Winograd's F(tile x tile, 3x3) (tile 2: the "winograd"
// tactic, 4: "winograd4") for a layer of `weight` [K, C / groups, R, S] and the convolution's
// attributes: 3x3, stride 1, undilated, one group, its transformed filters within L2 (Note
// [Winograd tiles]).
bool nchwc_winograd_offered(const Shape& weight, const Attrs& attrs, int tile);

struct Pool2dOptions {
  std::vector<int64_t> kernel{2, 2};
  std::vector<int64_t> stride{};             // empty = kernel
  std::vector<int64_t> padding{0, 0, 0, 0};  // top, left, bottom, right
  std::vector<int64_t> dilation{1, 1};       // max pool only
  bool ceil_mode = false;
  bool count_include_pad = false;            // avg pool only
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& opt, SourceLoc loc = KILN_HERE);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& opt, SourceLoc loc = KILN_HERE);
Tensor global_avg_pool(const Tensor& x, SourceLoc loc = KILN_HERE);  // [N, C, ...] -> [N, C, 1, 1...]
// ONNX LRN across channels: x / (bias + alpha/size * sum(x^2 over the window))^beta.
Tensor lrn(const Tensor& x, int64_t size, double alpha = 1e-4, double beta = 0.75, double bias = 1.0,
           SourceLoc loc = KILN_HERE);

}  // namespace kiln
