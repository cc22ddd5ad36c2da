#include <cstring>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

void for_each_index(const Shape& shape, const std::function<void(const std::vector<int64_t>&)>& fn) {
  int64_t n = numel_of(shape);
  std::vector<int64_t> idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    fn(idx);
    for (size_t d = shape.size(); d-- > 0;) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t broadcast_offset(const Shape& shape, const std::vector<int64_t>& idx) {
  size_t lead = idx.size() - shape.size();
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + (shape[d] == 1 ? 0 : idx[lead + d]);
  return off;
}

int64_t row_major_offset(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < shape.size(); ++d) off = off * shape[d] + idx[d];
  return off;
}

std::vector<double> values(const Tensor& t) {
  KILN_CHECK(t.device().is_cpu(), "ref::values: CPU tensors only");
  std::vector<double> out;
  out.reserve(static_cast<size_t>(t.numel()));
  const char* base = static_cast<const char*>(t.data_ptr());
  const auto& st = t.strides();
  int64_t es = static_cast<int64_t>(t.element_size());
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for_each_index(t.shape(), [&](const std::vector<int64_t>& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
      T v;
      std::memcpy(&v, base + off * es, sizeof(T));
      out.push_back(convert<double>(v));
    });
  });
  return out;
}

Tensor from_values(const std::vector<double>& v, const Shape& shape) { return from_vector<double>(v, shape); }

}  // namespace kiln::ref
