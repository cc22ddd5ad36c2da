// Attribute checks and output-size rules shared by the conv family's op definitions.
#pragma once

#include <string>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/pool.h"
#include "kiln/core/tensor.h"
#include "kiln/ops/op_def.h"

namespace kiln::defs {

// A 2-element int[] attribute with every value >= `min`; errors name the attribute.
std::vector<int64_t> pair_attr(const InferCtx& c, const std::string& name, int64_t min);
// The padding attribute as [top, left, bottom, right] (a 2-element [h, w] pads both sides).
std::vector<int64_t> padding_attr(const std::string& op, const Attrs& attrs);
void check_padding(const InferCtx& c);

// Output length of a window sweep (conv, and pooling with ceil_mode; Note [Pool output size]).
// Fails naming op, x's shape and the kernel when the dilated kernel does not fit the padded input.
int64_t window_out_size(const InferCtx& c, const char* dim, int64_t in, int64_t k, int64_t stride,
                        int64_t pad_begin, int64_t pad_end, int64_t dil, bool ceil_mode);

// The pooling geometry of a call of `op` on x of shape [N, C, H, W] (`max` pools have dilation;
// stride [] is the kernel).
kernels::cpu::Pool2dParams pool_params(const std::string& op, const Shape& x, const Attrs& attrs, bool max);

// The geometry of a 2-D convolution `op` of x [N, C, H, W] (or blocked [N, C/16, H, W, 16]) with
// filters w [K, C / groups, R, S] into y [N, K, Ho, Wo] (or blocked), bound with attrs (stride,
// padding, dilation, groups).
kernels::cpu::Conv2dParams conv2d_params(const std::string& op, const Shape& x, const Shape& w, const Shape& y,
                                         const Attrs& attrs);
// What the filters w [K, C / groups, R, S] and the groups tell alone: for packing filters ahead of
// a call.
kernels::cpu::Conv2dParams filter_params(const Shape& w, int64_t groups);

// Bytes of the packed filters fused_conv2d_nchwc keeps for filters of shape `w` (a constant) bound
// with `attrs`, on an input of rank x_rank (4: plain NCHW, a stem; 5: blocked), with Winograd's
// F(tile x tile, 3x3) tiles (2 or 4; the tactic must fit the layer) or the direct kernel (0).
int64_t conv_nchwc_packed_bytes(size_t x_rank, const Shape& w, const Attrs& attrs, int winograd_tile);

// `t` contiguous and in dtype `to` (t itself when it already is). For kernels: no dispatcher.
Tensor contiguous_as(const Tensor& t, DType to);

}  // namespace kiln::defs
