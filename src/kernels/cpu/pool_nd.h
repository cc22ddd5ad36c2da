// N-d pooling over contiguous [planes, D1, ..., Dk] tensors (k = 1, 2 or 3): max (with ONNX's flat
// argmax indices), average and Lp windows, and the average window's adjoint.
#pragma once

#include <cstdint>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln::kernels::cpu {

struct PoolNdParams {
  int64_t planes = 1;                 // N * C
  Shape in, out;                      // spatial extents
  std::vector<int64_t> kernel, stride, pad_begin, pad_end, dilation;
  bool count_include_pad = false;     // avg: the divisor counts taps inside the padded input
  double p = 2;                       // lp
};

// x: contiguous, any numeric dtype; y: contiguous, x's dtype; indices: contiguous i64 or undefined,
// the row-major flat index into x (planes included) of each window's maximum (first in window
// order; NaN counts as the maximum). A window with no tap inside the input gives -inf (lowest for
// integers) and index -1.
void max_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y, const Tensor& indices);
// x, y: contiguous f32 or f64 (the same).
void avg_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y);
// y = (sum over the window's taps inside the input of |x|^p)^(1/p).
void lp_pool_nd(const PoolNdParams& p, const Tensor& x, const Tensor& y);
// The adjoint of avg_pool_nd: g f64 [planes, out...] -> dx f64 [planes, in...].
Tensor avg_pool_nd_adjoint(const PoolNdParams& p, const Tensor& g);

}  // namespace kiln::kernels::cpu
