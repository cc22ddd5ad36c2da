// Reference GatherND / ScatterND: multi-index loops over the f64 values, straight from ONNX's
// definitions (negative coordinates wrap; they must be in range).
#include <cmath>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

// x's multi-index for output position `o` of gather_nd (or updates position of scatter_nd).
std::vector<int64_t> source_index(const Shape& xs, const Tensor& indices, const std::vector<double>& iv,
                                  int64_t b, const std::vector<int64_t>& o) {
  const Shape& is = indices.shape();
  const int64_t q = static_cast<int64_t>(is.size()), m = is.back();
  std::vector<int64_t> ipos(o.begin(), o.begin() + (q - 1));
  std::vector<int64_t> src(o.begin(), o.begin() + b);
  for (int64_t j = 0; j < m; ++j) {
    ipos.push_back(j);
    int64_t v = static_cast<int64_t>(iv[static_cast<size_t>(row_major_offset(is, ipos))]);
    ipos.pop_back();
    const int64_t size = xs[static_cast<size_t>(b + j)];
    src.push_back(v < 0 ? v + size : v);
  }
  src.insert(src.end(), o.begin() + (q - 1), o.end());
  return src;
}

}  // namespace

Tensor gather_nd(const Tensor& x, const Tensor& indices, int64_t batch_dims) {
  const Shape& xs = x.shape();
  const Shape& is = indices.shape();
  Shape out(is.begin(), is.end() - 1);
  out.insert(out.end(), xs.begin() + batch_dims + is.back(), xs.end());
  std::vector<double> xv = values(x), iv = values(indices), r;
  for_each_index(out, [&](const std::vector<int64_t>& o) {
    r.push_back(xv[static_cast<size_t>(row_major_offset(xs, source_index(xs, indices, iv, batch_dims, o)))]);
  });
  return from_values(r, out);
}

Tensor scatter_nd(const Tensor& x, const Tensor& indices, const Tensor& updates, const std::string& reduction) {
  const Shape& xs = x.shape();
  std::vector<double> r = values(x), iv = values(indices), uv = values(updates);
  size_t u = 0;
  for_each_index(updates.shape(), [&](const std::vector<int64_t>& o) {
    double& d = r[static_cast<size_t>(row_major_offset(xs, source_index(xs, indices, iv, 0, o)))];
    const double v = uv[u++];
    if (reduction == "none") d = v;
    else if (reduction == "add") d += v;
    else if (reduction == "mul") d *= v;
    else if (reduction == "max") d = std::isnan(d) || std::isnan(v) ? NAN : std::max(d, v);
    else if (reduction == "min") d = std::isnan(d) || std::isnan(v) ? NAN : std::min(d, v);
    else KILN_FAIL("ref::scatter_nd: unknown reduction ", reduction);
  });
  return from_values(r, xs);
}

}  // namespace kiln::ref
