#include "kiln/core/shape.h"

#include <algorithm>

#include "kiln/core/error.h"

namespace kiln {

int64_t numel_of(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides s(shape.size());
  int64_t acc = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    s[i] = acc;
    acc *= std::max<int64_t>(shape[i], 1);
  }
  return s;
}

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

int64_t normalize_axis(int64_t axis, int64_t rank, const char* op) {
  int64_t lo = rank == 0 ? -1 : -rank, hi = rank == 0 ? 0 : rank - 1;
  KILN_CHECK(axis >= lo && axis <= hi, op, ": axis ", axis, " is out of range for a tensor of rank ",
             rank, " (expected ", lo, " to ", hi, ")");
  return axis < 0 ? axis + std::max<int64_t>(rank, 1) : axis;
}

std::vector<int64_t> normalize_axes(const std::vector<int64_t>& axes, int64_t rank, const char* op,
                                    bool all_if_empty) {
  std::vector<int64_t> out;
  if (axes.empty() && all_if_empty) {
    for (int64_t i = 0; i < rank; ++i) out.push_back(i);
    return out;
  }
  for (int64_t a : axes) {
    int64_t n = normalize_axis(a, rank, op);
    KILN_CHECK(std::find(out.begin(), out.end(), n) == out.end(), op, ": axis ", a,
               " appears more than once in the axes list");
    out.push_back(n);
  }
  std::sort(out.begin(), out.end());
  return out;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    KILN_CHECK(da == db || da == 1 || db == 1, op, ": shapes ", shape_str(a), " and ", shape_str(b),
               " cannot be broadcast together (dim ", i, " of the broadcast result: ", da, " vs ", db, ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

}  // namespace kiln
