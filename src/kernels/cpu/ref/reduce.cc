// Reference reductions: the input's values grouped by the output element they fall into, then
// reduced with the textbook formula in long double.
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

std::vector<bool> reduced_dims(const Shape& shape, std::vector<int64_t> axes) {
  const int64_t rank = static_cast<int64_t>(shape.size());
  std::vector<bool> red(shape.size(), axes.empty());
  for (int64_t a : axes) {
    if (rank == 0) break;
    int64_t d = a < 0 ? a + rank : a;
    KILN_CHECK(d >= 0 && d < rank, "ref::reduce: bad axis ", a);
    red[static_cast<size_t>(d)] = true;
  }
  return red;
}

struct Groups {
  std::vector<std::vector<double>> values;  // per output element, in row-major order of the slice
  Shape out_shape;
};

Groups group_values(const Tensor& x, const std::vector<bool>& red, bool keepdim) {
  Groups g;
  Shape kept;
  for (size_t d = 0; d < red.size(); ++d) {
    if (!red[d]) kept.push_back(x.shape()[d]);
    if (!red[d]) g.out_shape.push_back(x.shape()[d]);
    else if (keepdim) g.out_shape.push_back(1);
  }
  g.values.resize(static_cast<size_t>(numel_of(kept)));
  std::vector<double> v = values(x);
  size_t i = 0;
  for_each_index(x.shape(), [&](const std::vector<int64_t>& idx) {
    int64_t pos = 0;
    for (size_t d = 0; d < idx.size(); ++d)
      if (!red[d]) pos = pos * x.shape()[d] + idx[d];
    g.values[static_cast<size_t>(pos)].push_back(v[i++]);
  });
  return g;
}

bool any_nan(const std::vector<double>& v) {
  return std::any_of(v.begin(), v.end(), [](double a) { return std::isnan(a); });
}

long double total(const std::vector<double>& v) {
  long double s = 0;
  for (double a : v) s += a;
  return s;
}

double reduce_one(const std::string& op, const std::vector<double>& v, int64_t correction) {
  const long double n = static_cast<long double>(v.size());
  if (op == "sum") return static_cast<double>(total(v));
  if (op == "prod") {
    long double p = 1;
    for (double a : v) p *= a;
    return static_cast<double>(p);
  }
  if (op == "mean") return static_cast<double>(total(v) / n);
  if (op == "max" || op == "min") {
    if (any_nan(v)) return NAN;
    return op == "max" ? *std::max_element(v.begin(), v.end()) : *std::min_element(v.begin(), v.end());
  }
  if (op == "var" || op == "std_dev") {
    long double m = total(v) / n, ss = 0;
    for (double a : v) ss += (a - m) * (a - m);
    long double r = ss / std::max<long double>(0, n - static_cast<long double>(correction));
    return static_cast<double>(op == "var" ? r : std::sqrt(r));
  }
  if (op == "logsumexp") {
    if (v.empty()) return -INFINITY;
    if (any_nan(v)) return NAN;
    double m = *std::max_element(v.begin(), v.end());
    if (std::isinf(m)) return m;
    long double s = 0;
    for (double a : v) s += std::exp(static_cast<long double>(a) - m);
    return static_cast<double>(m + std::log(s));
  }
  if (op == "norm") {
    long double s = 0;
    for (double a : v) s += static_cast<long double>(a) * a;
    return static_cast<double>(std::sqrt(s));
  }
  KILN_FAIL("ref::reduce: unknown op ", op);
}

}  // namespace

Tensor reduce(const std::string& op, const Tensor& x, const Attrs& attrs) {
  std::vector<int64_t> axes = attrs.has("axes") ? attrs.get_ints("axes") : std::vector<int64_t>{};
  bool keepdim = attrs.has("keepdim") && attrs.get_bool("keepdim");
  int64_t correction = attrs.has("correction") ? attrs.get_int("correction") : 1;
  Groups g = group_values(x, reduced_dims(x.shape(), axes), keepdim);
  std::vector<double> out;
  for (const auto& v : g.values) out.push_back(reduce_one(op, v, correction));  // no i64 wrapping
  return from_values(out, g.out_shape);
}

Tensor arg_reduce(const std::string& op, const Tensor& x, int64_t axis, bool keepdim, bool select_last_index) {
  Groups g = group_values(x, reduced_dims(x.shape(), {axis}), keepdim);
  const bool is_max = op == "argmax";
  KILN_CHECK(is_max || op == "argmin", "ref::arg_reduce: unknown op ", op);
  std::vector<double> out;
  for (const auto& v : g.values) {
    KILN_CHECK(!v.empty(), "ref::arg_reduce: empty slice");
    size_t best = 0;
    for (size_t i = 1; i < v.size(); ++i) {
      bool nan_i = std::isnan(v[i]), nan_b = std::isnan(v[best]);
      bool take;
      if (nan_b) take = nan_i && select_last_index;
      else if (nan_i) take = true;
      else if (v[i] == v[best]) take = select_last_index;
      else take = is_max ? v[i] > v[best] : v[i] < v[best];
      if (take) best = i;
    }
    out.push_back(static_cast<double>(best));
  }
  return from_values(out, g.out_shape);
}

}  // namespace kiln::ref
