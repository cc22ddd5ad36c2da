// Matrix products.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// NumPy matmul: 1-D operands are promoted and the added dim removed; batch dims broadcast.
Tensor matmul(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// ONNX/BLAS Gemm: alpha * op(A) @ op(B) + beta * C, A and B 2-D, C (optional) broadcast to MxN.
Tensor gemm(const Tensor& a, const Tensor& b, const Tensor& c = {}, double alpha = 1.0,
            double beta = 1.0, bool trans_a = false, bool trans_b = false, SourceLoc loc = KILN_HERE);

}  // namespace kiln
