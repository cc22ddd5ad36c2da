// Reference cumprod: each line along the axis of the row-major values, multiplied in long double
// for floating dtypes and in wrapping 64-bit integer arithmetic for integer and bool ones (the
// i64 result of kiln's cumprod).
#include <cstdint>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

Tensor cumprod(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  const Shape& s = x.shape();
  const bool floating = is_floating(x.dtype());
  std::vector<double> v = values(x), out(v.size());
  auto finish = [&](const std::vector<double>& o) {
    Tensor f = from_values(o, s);
    return floating ? f : f.to(DType::i64);
  };
  if (s.empty()) return finish({exclusive ? 1.0 : v[0]});
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= s[static_cast<size_t>(d)];
  for (int64_t d = a + 1; d < rank; ++d) inner *= s[static_cast<size_t>(d)];
  const int64_t len = s[static_cast<size_t>(a)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      long double acc = 1;
      uint64_t iacc = 1;
      for (int64_t c = 0; c < len; ++c) {
        const int64_t i = reverse ? len - 1 - c : c;
        const size_t pos = static_cast<size_t>((o * len + i) * inner + in);
        const double before = floating ? static_cast<double>(acc) : static_cast<double>(static_cast<int64_t>(iacc));
        acc *= v[pos];
        iacc *= static_cast<uint64_t>(static_cast<int64_t>(v[pos]));
        const double after = floating ? static_cast<double>(acc) : static_cast<double>(static_cast<int64_t>(iacc));
        out[pos] = exclusive ? before : after;
      }
    }
  }
  return finish(out);
}

}  // namespace kiln::ref
