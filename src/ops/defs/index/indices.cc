// See indices.h.
#include "ops/defs/index/indices.h"

#include "ops/defs/shape/movement.h"

namespace kiln::defs {

void check_index_dtype(const char* op, const char* arg, const TensorMeta& m, bool any_integer) {
  const bool ok = any_integer ? is_integral(m.dtype) : (m.dtype == DType::i32 || m.dtype == DType::i64);
  KILN_CHECK(ok, op, ": ", arg, " must be ", any_integer ? "an integer tensor (i8, u8, i32, i64)" : "i32 or i64",
             ", got ", meta_str(m));
}

std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t d = shape.size(); d-- > 0;) {
    if (shape[d] == 0) continue;
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

std::vector<int64_t> read_indices(const char* op, const char* arg, const Tensor& index, int64_t size,
                                  const std::string& what) {
  KILN_CHECK(is_integral(index.dtype()), op, ": ", arg, " must be an integer tensor, got ",
             dtype_name(index.dtype()), shape_str(index.shape()));
  Tensor c = contiguous_data(index);
  std::vector<int64_t> out(static_cast<size_t>(c.numel()));
  visit_dtype(c.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      const T* p = static_cast<const T*>(c.data_ptr());
      for (size_t i = 0; i < out.size(); ++i) {
        const int64_t v = static_cast<int64_t>(p[i]);
        if (v < -size || v >= size) [[unlikely]]
          KILN_FAIL(op, ": index ", v, " at position ", shape_str(unravel(static_cast<int64_t>(i), c.shape())),
                    " of ", arg, " (shape ", shape_str(c.shape()), ") is out of range for ", what,
                    "; valid indices are ", -size, " to ", size - 1);
        out[i] = v < 0 ? v + size : v;
      }
    }
  });
  return out;
}

}  // namespace kiln::defs
