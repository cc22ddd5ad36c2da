// Reading index tensors for the index family: dtype checks at inference, and in kernels the
// indices as a flat i64 vector with negative values wrapped and every value checked against the
// indexed dim (kiln::Error naming the op, the value and its position otherwise).
#pragma once

#include <string>
#include <vector>

#include "kiln/ops/op_def.h"

namespace kiln::defs {

// kiln::Error unless `m` (the input named `arg` of `op`) is i32 or i64 (or, with any_integer, any
// integral dtype).
void check_index_dtype(const char* op, const char* arg, const TensorMeta& m, bool any_integer = false);

// The values of `index` in row-major order, each wrapped into [0, size) when negative; a value
// outside [-size, size) is a kiln::Error naming `op`, the value, its position in `index` and
// `what` (e.g. "axis 1 of x (shape [2, 5])").
std::vector<int64_t> read_indices(const char* op, const char* arg, const Tensor& index, int64_t size,
                                  const std::string& what);

// Row-major multi-index of a flat position.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);

}  // namespace kiln::defs
