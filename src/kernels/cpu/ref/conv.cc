// Float64 references for conv2d, pooling, global average pooling and LRN: direct loops over every
// output element and every tap, with the output sizes found by walking the windows.
#include <cmath>
#include <limits>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

// Windows start at 0, stride, 2 * stride, ... in the padded input of length `padded` and must fit
// inside it. Ceil mode adds one more window when the fitting ones leave elements uncovered, unless
// it would start in the end padding (at or after in + pad_begin).
int64_t count_windows(int64_t in, int64_t pad_begin, int64_t pad_end, int64_t span, int64_t stride, bool ceil_mode) {
  const int64_t padded = in + pad_begin + pad_end;
  int64_t n = 0, next = 0;
  while (next + span <= padded) {
    ++n;
    next += stride;
  }
  const int64_t covered = n == 0 ? 0 : next - stride + span;
  if (ceil_mode && covered < padded && next < in + pad_begin) ++n;
  return n;
}

}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
              const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, int64_t groups) {
  const auto& xs = x.shape();
  const auto& ws = w.shape();
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3], k = ws[0], cg = ws[1], r = ws[2], s = ws[3];
  KILN_CHECK(cg * groups == c, "ref::conv2d: channel mismatch");
  const int64_t ho = count_windows(h, padding[0], padding[2], dilation[0] * (r - 1) + 1, stride[0], false);
  const int64_t wo = count_windows(wd, padding[1], padding[3], dilation[1] * (s - 1) + 1, stride[1], false);
  std::vector<double> xv = values(x), wv = values(w), bv = bias.defined() ? values(bias) : std::vector<double>{};
  std::vector<double> out;
  const int64_t kg = k / groups;
  for (int64_t in = 0; in < n; ++in)
    for (int64_t o = 0; o < k; ++o)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow) {
          double acc = bias.defined() ? bv[static_cast<size_t>(o)] : 0.0;
          const int64_t g = o / kg;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t ri = 0; ri < r; ++ri)
              for (int64_t si = 0; si < s; ++si) {
                int64_t ih = oh * stride[0] - padding[0] + ri * dilation[0];
                int64_t iw = ow * stride[1] - padding[1] + si * dilation[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                double xval = xv[static_cast<size_t>(((in * c + g * cg + ci) * h + ih) * wd + iw)];
                acc += xval * wv[static_cast<size_t>(((o * cg + ci) * r + ri) * s + si)];
              }
          out.push_back(acc);
        }
  return from_values(out, {n, k, ho, wo});
}

Tensor pool2d(bool max, const Tensor& x, const std::vector<int64_t>& kernel, const std::vector<int64_t>& stride_in,
              const std::vector<int64_t>& padding, const std::vector<int64_t>& dilation, bool ceil_mode,
              bool count_include_pad) {
  const std::vector<int64_t>& stride = stride_in.empty() ? kernel : stride_in;
  const auto& xs = x.shape();
  const int64_t planes = xs[0] * xs[1], h = xs[2], w = xs[3];
  const int64_t dh = max ? dilation[0] : 1, dw = max ? dilation[1] : 1;
  const int64_t ho = count_windows(h, padding[0], padding[2], dh * (kernel[0] - 1) + 1, stride[0], ceil_mode);
  const int64_t wo = count_windows(w, padding[1], padding[3], dw * (kernel[1] - 1) + 1, stride[1], ceil_mode);
  std::vector<double> xv = values(x), out;
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oh = 0; oh < ho; ++oh)
      for (int64_t ow = 0; ow < wo; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t inside = 0, in_padded = 0;
        for (int64_t ri = 0; ri < kernel[0]; ++ri)
          for (int64_t si = 0; si < kernel[1]; ++si) {
            int64_t ih = oh * stride[0] - padding[0] + ri * dh, iw = ow * stride[1] - padding[1] + si * dw;
            if (ih < h + padding[2] && iw < w + padding[3]) ++in_padded;  // taps past the end padding don't count
            if (ih < 0 || ih >= h || iw < 0 || iw >= w) continue;
            double v = xv[static_cast<size_t>((p * h + ih) * w + iw)];
            if (std::isnan(v) || std::isnan(best)) best = NAN;
            else best = std::max(best, v);
            sum += v;
            ++inside;
          }
        out.push_back(max ? best : sum / static_cast<double>(count_include_pad ? in_padded : inside));
      }
  return from_values(out, {xs[0], xs[1], ho, wo});
}

Tensor global_avg_pool(const Tensor& x) {
  const auto& xs = x.shape();
  const int64_t rows = xs[0] * xs[1], len = rows == 0 ? 0 : x.numel() / rows;
  std::vector<double> xv = values(x), out;
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0;
    for (int64_t j = 0; j < len; ++j) s += xv[static_cast<size_t>(i * len + j)];
    out.push_back(s / static_cast<double>(len));
  }
  Shape os(xs.size(), 1);
  os[0] = xs[0], os[1] = xs[1];
  return from_values(out, os);
}

Tensor lrn(const Tensor& x, int64_t size, double alpha, double beta, double bias) {
  const auto& xs = x.shape();
  const int64_t n = xs[0], c = xs[1], len = x.numel() / (n * c);
  std::vector<double> xv = values(x), out;
  const int64_t lo = (size - 1) / 2;                  // floor((size - 1) / 2) channels before
  const int64_t hi = (size - 1 + 1) / 2;              // ceil((size - 1) / 2) channels after
  for (int64_t in = 0; in < n; ++in)
    for (int64_t ci = 0; ci < c; ++ci)
      for (int64_t l = 0; l < len; ++l) {
        double sq = 0;
        for (int64_t j = ci - lo; j <= ci + hi; ++j)
          if (j >= 0 && j < c) {
            double v = xv[static_cast<size_t>((in * c + j) * len + l)];
            sq += v * v;
          }
        double v = xv[static_cast<size_t>((in * c + ci) * len + l)];
        out.push_back(v / std::pow(bias + alpha / static_cast<double>(size) * sq, beta));
      }
  return from_values(out, xs);
}

}  // namespace kiln::ref
