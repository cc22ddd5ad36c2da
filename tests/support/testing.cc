#include "support/testing.h"

#include <cmath>
#include <sstream>

namespace kiln::testing {

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  Generator g(seed);
  std::vector<double> v(static_cast<size_t>(numel_of(shape)));
  for (double& x : v) {
    if (dtype == DType::boolean) {
      x = g.uniform() < 0.5 ? 0.0 : 1.0;
    } else if (is_integral(dtype)) {
      double l = dtype == DType::u8 ? std::max(1.0, lo) : std::ceil(lo), h = std::floor(hi);
      if (dtype == DType::u8 && h < l) h = l + 5;
      do {
        x = l + std::floor(g.uniform() * (h - l + 1));
      } while (x == 0);
    } else {
      do {
        x = lo + (hi - lo) * g.uniform();
      } while (std::abs(x) < 0.05);
    }
  }
  return from_vector<double>(v, shape).to(dtype);
}

Tensor random_positive(const Shape& shape, DType dtype, uint64_t seed, double lo, double hi) {
  return random_tensor(shape, dtype, seed, lo, hi);
}

Tensor noncontiguous(const Tensor& t) {
  Shape big;
  for (int64_t d : t.shape()) big.push_back(d * 2);
  Tensor buf = zeros(big, TensorOptions(t.dtype()));
  Tensor view = buf;
  for (int64_t d = 0; d < t.dim(); ++d) view = view.slice(d, 1, big[static_cast<size_t>(d)], 2);
  view.copy_(t);
  return view;
}

Tol tol_for(DType t) {
  switch (t) {
    case DType::f32: return {5e-6, 1e-6};
    case DType::f64: return {1e-12, 1e-13};
    case DType::f16: return {2e-3, 1e-4};
    case DType::bf16: return {1.6e-2, 1e-3};
    default: return {0, 0};
  }
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected) {
  return all_close(actual, expected, tol_for(actual.dtype()));
}

::testing::AssertionResult all_close(const Tensor& actual, const Tensor& expected, Tol tol) {
  if (actual.shape() != expected.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " != expected "
                                         << shape_str(expected.shape());
  std::vector<double> a = ref::values(actual), e = ref::values(expected);
  double worst = -1;
  size_t worst_i = 0;
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok;
    double err = 0;
    if (std::isnan(e[i]) || std::isnan(a[i])) {
      ok = std::isnan(e[i]) && std::isnan(a[i]);
      err = ok ? 0 : INFINITY;
    } else if (std::isinf(e[i]) || std::isinf(a[i])) {
      ok = a[i] == e[i];
      err = ok ? 0 : INFINITY;
    } else {
      err = std::abs(a[i] - e[i]);
      ok = err <= tol.atol + tol.rtol * std::abs(e[i]);
      err /= (tol.atol + tol.rtol * std::abs(e[i]) + 1e-300);
    }
    if (!ok) ++bad;
    if (!ok && err > worst) {
      worst = err;
      worst_i = i;
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  // Multi-index of the worst element.
  std::vector<int64_t> idx(actual.shape().size());
  size_t rem = worst_i;
  for (size_t d = idx.size(); d-- > 0;) {
    idx[d] = static_cast<int64_t>(rem % static_cast<size_t>(actual.shape()[d]));
    rem /= static_cast<size_t>(actual.shape()[d]);
  }
  std::ostringstream os;
  os.precision(10);
  os << bad << " of " << a.size() << " elements differ (dtype " << dtype_name(actual.dtype()) << ", rtol "
     << tol.rtol << ", atol " << tol.atol << "); worst at " << shape_str(idx) << ": got " << a[worst_i]
     << ", expected " << e[worst_i];
  return ::testing::AssertionFailure() << os.str();
}

::testing::AssertionResult throws_error(const std::function<void()>& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const Error& e) {
    std::string msg = e.what();
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "kiln::Error message lacks \"" << p << "\": " << msg;
    return ::testing::AssertionSuccess();
  } catch (const std::exception& e) {
    return ::testing::AssertionFailure() << "threw a non-kiln::Error exception: " << e.what();
  }
  return ::testing::AssertionFailure() << "no exception thrown";
}

Tensor abs_values(const Tensor& t) {
  std::vector<double> v = ref::values(t);
  for (double& x : v) x = std::abs(x);
  return ref::from_values(v, t.shape());
}

::testing::AssertionResult close_by_magnitude(const Tensor& got, const Tensor& want, const Tensor& magnitude,
                                              double eps) {
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << " != " << shape_str(want.shape());
  std::vector<double> g = ref::values(got), w = ref::values(want), m = ref::values(magnitude);
  for (size_t i = 0; i < g.size(); ++i) {
    double bound = eps * m[i] + 1e-300;
    if (!(std::abs(g[i] - w[i]) <= bound))
      return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", want " << w[i]
                                           << " (bound " << bound << ", magnitude " << m[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

}  // namespace kiln::testing
