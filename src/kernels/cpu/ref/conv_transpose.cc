// Reference transposed convolution: every input pixel scatters x * w over the full (uncropped)
// output in float64, which is then cropped by the padding (ONNX ConvTranspose's definition).
#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

Tensor conv_transpose2d(const Tensor& x, const Tensor& w, const Tensor& bias, const std::vector<int64_t>& stride,
                        const std::vector<int64_t>& padding, const std::vector<int64_t>& output_padding,
                        const std::vector<int64_t>& dilation, int64_t groups) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  const int64_t n = xs[0], c = xs[1], h = xs[2], wd = xs[3];
  const int64_t kg = ws[1], r = ws[2], s = ws[3], k = kg * groups, cg = c / groups;
  const int64_t full_h = stride[0] * (h - 1) + dilation[0] * (r - 1) + 1 + output_padding[0];
  const int64_t full_w = stride[1] * (wd - 1) + dilation[1] * (s - 1) + 1 + output_padding[1];
  const int64_t ho = full_h - padding[0] - padding[2], wo = full_w - padding[1] - padding[3];
  std::vector<double> xv = values(x), wv = values(w), bv = bias.defined() ? values(bias) : std::vector<double>();
  std::vector<double> full(static_cast<size_t>(n * k * full_h * full_w), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ci = 0; ci < c; ++ci) {
      const int64_t g = ci / cg;
      for (int64_t ih = 0; ih < h; ++ih)
        for (int64_t iw = 0; iw < wd; ++iw) {
          const double xval = xv[static_cast<size_t>(((b * c + ci) * h + ih) * wd + iw)];
          for (int64_t ko = 0; ko < kg; ++ko)
            for (int64_t rr = 0; rr < r; ++rr)
              for (int64_t ss = 0; ss < s; ++ss) {
                const int64_t oh = ih * stride[0] + rr * dilation[0], ow = iw * stride[1] + ss * dilation[1];
                const double wval = wv[static_cast<size_t>(((ci * kg + ko) * r + rr) * s + ss)];
                full[static_cast<size_t>(((b * k + g * kg + ko) * full_h + oh) * full_w + ow)] += xval * wval;
              }
        }
    }
  std::vector<double> out(static_cast<size_t>(n * k * ho * wo));
  for (int64_t b = 0; b < n; ++b)
    for (int64_t ko = 0; ko < k; ++ko)
      for (int64_t oh = 0; oh < ho; ++oh)
        for (int64_t ow = 0; ow < wo; ++ow)
          out[static_cast<size_t>(((b * k + ko) * ho + oh) * wo + ow)] =
              full[static_cast<size_t>(((b * k + ko) * full_h + oh + padding[0]) * full_w + ow + padding[1])] +
              (bias.defined() ? bv[static_cast<size_t>(ko)] : 0.0);
  return from_values(out, {n, k, ho, wo});
}

}  // namespace kiln::ref
