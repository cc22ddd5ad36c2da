// Reference softmax, layer_norm, rms_norm, batch_norm and rotary_embedding on row-major values in long double.
#include <algorithm>
#include <cmath>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

Tensor softmax(const Tensor& x, int64_t axis, bool log) {
  const Shape& s = x.shape();
  std::vector<double> v = values(x), out(v.size());
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t a = rank == 0 ? 0 : (axis < 0 ? axis + rank : axis);
  int64_t outer = 1, inner = 1, len = rank == 0 ? 1 : s[static_cast<size_t>(a)];
  for (int64_t d = 0; d < a && rank > 0; ++d) outer *= s[static_cast<size_t>(d)];
  for (int64_t d = a + 1; d < rank; ++d) inner *= s[static_cast<size_t>(d)];
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t in = 0; in < inner; ++in) {
      auto at = [&](int64_t i) { return static_cast<size_t>((o * len + i) * inner + in); };
      long double m = -INFINITY;
      for (int64_t i = 0; i < len; ++i) m = std::max<long double>(m, v[at(i)]);
      long double sum = 0;
      for (int64_t i = 0; i < len; ++i) sum += std::exp(v[at(i)] - m);
      for (int64_t i = 0; i < len; ++i) {
        long double e = v[at(i)] - m;
        out[at(i)] = static_cast<double>(log ? e - std::log(sum) : std::exp(e) / sum);
      }
    }
  }
  return from_values(out, s);
}

namespace {

// The dims of `shape` before `axis` as rows of the dims from it to the end (a trailing norm's).
struct TrailingRows {
  int64_t rows = 1, len = 1;
};
TrailingRows trailing_rows(const Shape& s, int64_t axis) {
  const int64_t rank = static_cast<int64_t>(s.size());
  const int64_t a = axis < 0 ? axis + rank : axis;
  TrailingRows t;
  for (int64_t d = 0; d < rank; ++d) (d < a ? t.rows : t.len) *= s[static_cast<size_t>(d)];
  return t;
}

// t's values, or n copies of `fill` where t is undefined (an absent weight or bias).
std::vector<double> values_or(const Tensor& t, int64_t n, double fill) {
  return t.defined() ? values(t) : std::vector<double>(static_cast<size_t>(n), fill);
}

}  // namespace

Tensor layer_norm(const Tensor& x, int64_t axis, const Tensor& weight, const Tensor& bias, double eps) {
  const Shape& s = x.shape();
  const auto [rows, len] = trailing_rows(s, axis);
  std::vector<double> v = values(x), out(v.size());
  std::vector<double> w = values_or(weight, len, 1.0), b = values_or(bias, len, 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    const size_t base = static_cast<size_t>(r * len);
    long double m = 0, var = 0;
    for (int64_t i = 0; i < len; ++i) m += v[base + static_cast<size_t>(i)];
    m /= len;
    for (int64_t i = 0; i < len; ++i) var += (v[base + static_cast<size_t>(i)] - m) * (v[base + static_cast<size_t>(i)] - m);
    var /= len;
    for (int64_t i = 0; i < len; ++i) {
      size_t p = base + static_cast<size_t>(i);
      out[p] = static_cast<double>((v[p] - m) / std::sqrt(var + eps) * w[static_cast<size_t>(i)] + b[static_cast<size_t>(i)]);
    }
  }
  return from_values(out, s);
}

Tensor rms_norm(const Tensor& x, int64_t axis, const Tensor& weight, double eps) {
  const Shape& s = x.shape();
  const auto [rows, len] = trailing_rows(s, axis);
  std::vector<double> v = values(x), out(v.size());
  std::vector<double> w = values_or(weight, len, 1.0);
  for (int64_t r = 0; r < rows; ++r) {
    const double* row = v.data() + r * len;
    long double ss = 0;
    for (int64_t i = 0; i < len; ++i) ss += static_cast<long double>(row[i]) * row[i];
    const long double inv = 1.0L / std::sqrt(ss / len + eps);
    for (int64_t i = 0; i < len; ++i)
      out[static_cast<size_t>(r * len + i)] = static_cast<double>(row[i] * inv * w[static_cast<size_t>(i)]);
  }
  return from_values(out, s);
}

Tensor rotary_embedding(const Tensor& x, const Tensor& cos, const Tensor& sin, bool interleaved) {
  const Shape& s = x.shape();
  const int64_t d = s.back(), h = d / 2;
  std::vector<double> v = values(x), c = values(cos.broadcast_to(s)), sn = values(sin.broadcast_to(s));
  std::vector<double> out(v.size());
  for (size_t r = 0; r < v.size(); r += static_cast<size_t>(d))
    for (int64_t i = 0; i < d; ++i) {
      const int64_t j = interleaved ? (i ^ 1) : (i < h ? i + h : i - h);
      const bool negate = interleaved ? i % 2 == 0 : i < h;
      const size_t at = r + static_cast<size_t>(i);
      const long double rx = negate ? -v[r + static_cast<size_t>(j)] : v[r + static_cast<size_t>(j)];
      out[at] = static_cast<double>(static_cast<long double>(v[at]) * c[at] + rx * sn[at]);
    }
  return from_values(out, s);
}

Tensor batch_norm(const Tensor& x, const Tensor& mean, const Tensor& var, const Tensor& weight, const Tensor& bias,
                  double eps) {
  const Shape& s = x.shape();
  const int64_t channels = s[1];
  int64_t inner = 1;
  for (size_t d = 2; d < s.size(); ++d) inner *= s[d];
  std::vector<double> v = values(x), out(v.size()), m = values(mean), vr = values(var);
  std::vector<double> w = values_or(weight, channels, 1.0), b = values_or(bias, channels, 0.0);
  for (size_t p = 0; p < v.size(); ++p) {
    size_t c = static_cast<size_t>((static_cast<int64_t>(p) / inner) % channels);
    out[p] = static_cast<double>((v[p] - static_cast<long double>(m[c])) / std::sqrt(static_cast<long double>(vr[c]) + eps) * w[c] + b[c]);
  }
  return from_values(out, s);
}

}  // namespace kiln::ref
