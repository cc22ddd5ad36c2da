// Shapes and strides: small vectors of int64, counted in elements.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kiln {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel_of(const Shape& shape);
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);  // "[2, 3, 4]"

// Wraps a possibly negative axis into [0, rank); kiln::Error naming `op` when out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);
// Normalized, sorted, duplicate-free axes; an empty list means "all axes" when all_if_empty.
std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op,
                                    bool all_if_empty = true);
// NumPy broadcasting of two shapes; kiln::Error naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace kiln
