// Elementwise binary ops with NumPy broadcasting and type promotion; where().
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

Tensor add(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor sub(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor mul(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// Integer division truncates toward zero (C, ONNX); division by integer zero is a kiln::Error.
Tensor div(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor pow(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// fmod=false: result has the divisor's sign (Python %, torch.remainder, ONNX Mod fmod=0);
// fmod=true: the dividend's sign (C fmod, ONNX Mod fmod=1).
Tensor mod(const Tensor& a, const Tensor& b, bool fmod = false, SourceLoc loc = KILN_HERE);
Tensor maximum(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);  // NaN propagates
Tensor minimum(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// Comparisons return bool.
Tensor eq(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor ne(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor lt(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor le(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor gt(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor ge(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// Logical ops treat any nonzero as true and return bool.
Tensor logical_and(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor logical_or(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor logical_xor(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// cond ? a : b, all three broadcast together; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
// Bitwise ops on integer and bool tensors (src/ops/defs/binary/bitwise.cc); floating is an error.
Tensor bitwise_and(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor bitwise_or(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor bitwise_xor(const Tensor& a, const Tensor& b, SourceLoc loc = KILN_HERE);
Tensor bitwise_not(const Tensor& x, SourceLoc loc = KILN_HERE);
// a << b (direction "left") or a >> b ("right") on integers, broadcasting: left shifts the two's-
// complement pattern, right is arithmetic for signed and logical for u8; counts outside
// [0, bits) shift every bit out (0, or -1 for a right shift of a negative value).
Tensor bit_shift(const Tensor& a, const Tensor& b, const std::string& direction, SourceLoc loc = KILN_HERE);

}  // namespace kiln
