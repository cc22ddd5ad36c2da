// Reference cumsum: each line along the axis of the row-major values, summed in long double.
#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive, bool reverse) {
  const Shape& s = x.shape();
  std::vector<double> v = values(x), out(v.size());
  if (s.empty()) {
    out[0] = exclusive ? 0.0 : v[0];
    return from_values(out, s);
  }
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a; ++d) outer *= s[static_cast<size_t>(d)];
  for (int64_t d = a + 1; d < rank; ++d) inner *= s[static_cast<size_t>(d)];
  const int64_t len = s[static_cast<size_t>(a)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      long double acc = 0;
      for (int64_t c = 0; c < len; ++c) {
        int64_t i = reverse ? len - 1 - c : c;
        size_t pos = static_cast<size_t>((o * len + i) * inner + in);
        if (exclusive) out[pos] = static_cast<double>(acc);
        acc += v[pos];
        if (!exclusive) out[pos] = static_cast<double>(acc);
      }
    }
  }
  return from_values(out, s);
}

}  // namespace kiln::ref
