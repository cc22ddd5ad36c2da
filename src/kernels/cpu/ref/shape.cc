// Reference shape ops: concat, stack, split, tile, pad, trilu as naive loops over output
// indices in float64, written without the kernels' views and byte copies.
#include <algorithm>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

int64_t wrap(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

}  // namespace

Tensor concat(const std::vector<Tensor>& xs, int64_t axis) {
  const size_t a = static_cast<size_t>(wrap(axis, xs[0].dim()));
  Shape s = xs[0].shape();
  s[a] = 0;
  std::vector<std::vector<double>> vals;
  for (const Tensor& x : xs) {
    s[a] += x.shape()[a];
    vals.push_back(values(x));
  }
  std::vector<double> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> i = idx;
    size_t which = 0;
    while (i[a] >= xs[which].shape()[a]) i[a] -= xs[which++].shape()[a];
    out.push_back(vals[which][static_cast<size_t>(row_major_offset(xs[which].shape(), i))]);
  });
  return from_values(out, s);
}

Tensor stack(const std::vector<Tensor>& xs, int64_t axis) {
  const size_t a = static_cast<size_t>(wrap(axis, xs[0].dim() + 1));
  Shape s = xs[0].shape();
  s.insert(s.begin() + static_cast<int64_t>(a), static_cast<int64_t>(xs.size()));
  std::vector<std::vector<double>> vals;
  for (const Tensor& x : xs) vals.push_back(values(x));
  std::vector<double> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> i = idx;
    const size_t which = static_cast<size_t>(i[a]);
    i.erase(i.begin() + static_cast<int64_t>(a));
    out.push_back(vals[which][static_cast<size_t>(row_major_offset(xs[which].shape(), i))]);
  });
  return from_values(out, s);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t axis) {
  const size_t a = static_cast<size_t>(wrap(axis, x.dim()));
  const std::vector<double> v = values(x);
  std::vector<Tensor> outs;
  int64_t start = 0;
  for (int64_t n : sizes) {
    Shape s = x.shape();
    s[a] = n;
    std::vector<double> out;
    for_each_index(s, [&](const std::vector<int64_t>& idx) {
      std::vector<int64_t> i = idx;
      i[a] += start;
      out.push_back(v[static_cast<size_t>(row_major_offset(x.shape(), i))]);
    });
    outs.push_back(from_values(out, s));
    start += n;
  }
  return outs;
}

Tensor tile(const Tensor& x, const std::vector<int64_t>& repeats) {
  Shape xs = x.shape();
  std::vector<int64_t> reps = repeats;
  while (xs.size() < reps.size()) xs.insert(xs.begin(), 1);
  while (reps.size() < xs.size()) reps.insert(reps.begin(), 1);
  Shape s;
  for (size_t d = 0; d < xs.size(); ++d) s.push_back(xs[d] * reps[d]);
  const std::vector<double> v = values(x);
  std::vector<double> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> i(idx.size());
    for (size_t d = 0; d < idx.size(); ++d) i[d] = idx[d] % xs[d];
    out.push_back(v[static_cast<size_t>(row_major_offset(xs, i))]);
  });
  return from_values(out, s);
}

// Each output index maps straight to an input index (or to `value`): begin pads shift, then
// the mode decides what a position outside the input reads.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, const std::string& mode, double value) {
  const size_t rank = x.shape().size();
  Shape s;
  for (size_t d = 0; d < rank; ++d) s.push_back(x.shape()[d] + pads[d] + pads[d + rank]);
  const std::vector<double> v = values(x);
  std::vector<double> out;
  for_each_index(s, [&](const std::vector<int64_t>& idx) {
    std::vector<int64_t> i(rank);
    bool outside = false;
    for (size_t d = 0; d < rank; ++d) {
      const int64_t n = x.shape()[d];
      // Cropping (negative pads) restricts the readable range to [lo, hi).
      const int64_t lo = std::max<int64_t>(-pads[d], 0), hi = n - std::max<int64_t>(-pads[d + rank], 0);
      int64_t p = idx[d] - pads[d];
      if (p < lo || p >= hi) {
        if (mode == "constant") outside = true;
        else if (mode == "edge") p = p < lo ? lo : hi - 1;
        else p = p < lo ? 2 * lo - p : 2 * (hi - 1) - p;  // reflect about the first / last kept element
      }
      i[d] = p;
    }
    out.push_back(outside ? value : v[static_cast<size_t>(row_major_offset(x.shape(), i))]);
  });
  return from_values(out, s);
}

Tensor trilu(const Tensor& x, int64_t k, bool upper) {
  const std::vector<double> v = values(x);
  std::vector<double> out;
  size_t t = 0;
  for_each_index(x.shape(), [&](const std::vector<int64_t>& idx) {
    const int64_t i = idx[idx.size() - 2], j = idx.back();
    const bool keep = upper ? j - i >= k : j - i <= k;
    out.push_back(keep ? v[t] : 0.0);
    ++t;
  });
  return from_values(out, x.shape());
}

}  // namespace kiln::ref
