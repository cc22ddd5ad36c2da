// Reference index ops: gather, gather_elements, scatter, one_hot, topk as naive loops in float64.
// Indices are assumed valid (tests check the error paths on the real ops).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

int64_t wrap(int64_t v, int64_t n) { return v < 0 ? v + n : v; }

}  // namespace

Tensor gather(const Tensor& x, const Tensor& indices, int64_t axis) {
  const size_t a = static_cast<size_t>(wrap(axis, x.dim()));
  const std::vector<double> xv = values(x), iv = values(indices);
  const size_t ir = indices.shape().size();
  Shape s(x.shape().begin(), x.shape().begin() + static_cast<int64_t>(a));
  s.insert(s.end(), indices.shape().begin(), indices.shape().end());
  s.insert(s.end(), x.shape().begin() + static_cast<int64_t>(a) + 1, x.shape().end());
  std::vector<double> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> ii(idx.begin() + static_cast<int64_t>(a), idx.begin() + static_cast<int64_t>(a + ir));
    const int64_t j = wrap(static_cast<int64_t>(iv[static_cast<size_t>(row_major_offset(indices.shape(), ii))]), x.shape()[a]);
    std::vector<int64_t> xi(idx.begin(), idx.begin() + static_cast<int64_t>(a));
    xi.push_back(j);
    xi.insert(xi.end(), idx.begin() + static_cast<int64_t>(a + ir), idx.end());
    out.push_back(xv[static_cast<size_t>(row_major_offset(x.shape(), xi))]);
  });
  return from_values(out, s);
}

Tensor gather_elements(const Tensor& x, const Tensor& index, int64_t axis) {
  const size_t a = static_cast<size_t>(wrap(axis, x.dim()));
  const std::vector<double> xv = values(x), iv = values(index);
  std::vector<double> out;
  size_t t = 0;
  for_each_index(index.shape(), [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> xi = idx;
    xi[a] = wrap(static_cast<int64_t>(iv[t++]), x.shape()[a]);
    out.push_back(xv[static_cast<size_t>(row_major_offset(x.shape(), xi))]);
  });
  return from_values(out, index.shape());
}

Tensor scatter(const Tensor& x, int64_t axis, const Tensor& index, const Tensor& src) {
  const size_t a = static_cast<size_t>(wrap(axis, x.dim()));
  std::vector<double> out = values(x);
  const std::vector<double> iv = values(index), sv = values(src);
  size_t t = 0;
  for_each_index(index.shape(), [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> xi = idx;
    xi[a] = wrap(static_cast<int64_t>(iv[t++]), x.shape()[a]);
    out[static_cast<size_t>(row_major_offset(x.shape(), xi))] = sv[static_cast<size_t>(row_major_offset(src.shape(), idx))];
  });
  return from_values(out, x.shape());
}

Tensor one_hot(const Tensor& indices, int64_t depth, int64_t axis) {
  const size_t a = static_cast<size_t>(wrap(axis, indices.dim() + 1));
  const std::vector<double> iv = values(indices);
  Shape s = indices.shape();
  s.insert(s.begin() + static_cast<int64_t>(a), depth);
  std::vector<double> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> ii = idx;
    const int64_t c = ii[a];
    ii.erase(ii.begin() + static_cast<int64_t>(a));
    const int64_t want = wrap(static_cast<int64_t>(iv[static_cast<size_t>(row_major_offset(indices.shape(), ii))]), depth);
    out.push_back(c == want ? 1.0 : 0.0);
  });
  return from_values(out, s);
}

// Stable sort of each lane by value (NaN ranks above every number), so ties keep index order.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t axis, bool largest) {
  const size_t a = static_cast<size_t>(wrap(axis, x.dim()));
  const std::vector<double> xv = values(x);
  Shape s = x.shape();
  s[a] = k;
  std::vector<double> vals(static_cast<size_t>(numel_of(s))), idxs(vals.size());
  auto rank_key = [](double v) { return std::isnan(v) ? INFINITY : v; };
  auto higher = [&](double p, double q) {  // p ranks strictly above q
    if (std::isnan(p) || std::isnan(q)) return std::isnan(p) && !std::isnan(q);
    return rank_key(p) > rank_key(q);
  };
  Shape lanes = x.shape();
  lanes[a] = 1;
  for_each_index(lanes, [&](const std::vector<int64_t>& lane) {
    std::vector<int64_t> order(static_cast<size_t>(x.shape()[a]));
    std::iota(order.begin(), order.end(), int64_t{0});
    auto at = [&](int64_t i) {
      std::vector<int64_t> xi = lane;
      xi[a] = i;
      return xv[static_cast<size_t>(row_major_offset(x.shape(), xi))];
    };
    std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
      return largest ? higher(at(p), at(q)) : higher(at(q), at(p));
    });
    for (int64_t j = 0; j < k; ++j) {
      std::vector<int64_t> oi = lane;
      oi[a] = j;
      const size_t o = static_cast<size_t>(row_major_offset(s, oi));
      vals[o] = at(order[static_cast<size_t>(j)]);
      idxs[o] = static_cast<double>(order[static_cast<size_t>(j)]);
    }
  });
  return {from_values(vals, s), from_values(idxs, s)};
}

}  // namespace kiln::ref
