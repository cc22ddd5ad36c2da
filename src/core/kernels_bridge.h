// Small element helpers core needs for printing and I/O.
#pragma once

#include <cstring>

#include "kiln/core/tensor.h"

namespace kiln::detail {

// The element at `offset` (in elements from the storage start) of t's storage, as double.
inline double element_as_double(const Tensor& t, int64_t offset) {
  const char* base = static_cast<const char*>(t.storage()->data());
  return visit_dtype(t.dtype(), [&](auto tag) -> double {
    using T = typename decltype(tag)::type;
    T v;
    std::memcpy(&v, base + offset * static_cast<int64_t>(sizeof(T)), sizeof(T));
    return convert<double>(v);
  });
}

}  // namespace kiln::detail
