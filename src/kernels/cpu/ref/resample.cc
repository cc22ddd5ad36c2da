// Float64 references for resize (and the rest of the resampling family): ONNX's formulas for the
// coordinate transform and the filters, evaluated per output element over the product of taps.
#include "kernels/cpu/ref/resample.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/ref/ref.h"

namespace kiln::ref {

namespace {

// The taps of one output position along one axis.
struct Taps {
  std::vector<int64_t> index;
  std::vector<double> weight;
  bool outside = false;
};

// ONNX's filter coefficients for a ratio in (0, 1] (the distance of x_ori past its left neighbour).
std::vector<double> coefficients(const std::string& mode, const std::string& nearest, double ratio, double scale,
                                 double A, bool antialias) {
  if (mode == "nearest") {
    if (ratio == 1) return {0, 1};
    if (nearest == "round_prefer_floor") return {ratio <= 0.5 ? 1.0 : 0.0, ratio > 0.5 ? 1.0 : 0.0};
    if (nearest == "round_prefer_ceil") return {ratio < 0.5 ? 1.0 : 0.0, ratio >= 0.5 ? 1.0 : 0.0};
    if (nearest == "floor") return {1, 0};
    return {0, 1};
  }
  if (!antialias) {
    if (mode == "linear") return {1 - ratio, ratio};
    const double r1 = ratio + 1, q = 1 - ratio, q1 = q + 1;
    return {((A * r1 - 5 * A) * r1 + 8 * A) * r1 - 4 * A, ((A + 2) * ratio - (A + 3)) * ratio * ratio + 1,
            ((A + 2) * q - (A + 3)) * q * q + 1, ((A * q1 - 5 * A) * q1 + 8 * A) * q1 - 4 * A};
  }
  const double s = std::min(scale, 1.0);
  std::vector<double> c;
  if (mode == "linear") {
    const int64_t start = static_cast<int64_t>(std::floor(-1 / s)) + 1;
    for (int64_t i = start; i < 2 - start; ++i) c.push_back(std::clamp(1 - std::fabs((static_cast<double>(i) - ratio) * s), 0.0, 1.0));
  } else {
    const int64_t start = static_cast<int64_t>(std::floor(-2 / s)) + 1;
    for (int64_t i = start; i < 2 - start; ++i) {
      const double x = std::fabs(s * (static_cast<double>(i) - ratio));
      c.push_back(x <= 1 ? (A + 2) * x * x * x - (A + 3) * x * x + 1
                  : x < 2 ? A * x * x * x - 5 * A * x * x + 8 * A * x - 4 * A
                          : 0.0);
    }
  }
  double sum = 0;
  for (double v : c) sum += v;
  for (double& v : c) v /= sum;
  return c;
}

Taps axis_taps(const Attrs& a, size_t d, size_t rank, int64_t in, int64_t out, int64_t y) {
  const auto& scales = a.get_floats("scales");
  const auto& roi = a.get_floats("roi");
  const std::string& coord = a.get_string("coordinate_transformation_mode");
  const double scale = scales.empty() ? double(out) / double(in) : scales[d];
  const double ow = scale * double(in), fy = double(y), fin = double(in);
  Taps t;
  double x;
  if (coord == "align_corners") {
    x = ow == 1 ? 0 : fy * (fin - 1) / (ow - 1);
  } else if (coord == "asymmetric") {
    x = fy / scale;
  } else if (coord == "tf_crop_and_resize") {
    const double r0 = roi.empty() ? 0 : roi[d], r1 = roi.empty() ? 1 : roi[rank + d];
    x = (ow == 1 ? (r1 - r0) * (fin - 1) / 2 : fy * (r1 - r0) * (fin - 1) / (ow - 1)) + r0 * (fin - 1);
    if (x < 0 || x > fin - 1) {
      t.outside = true;
      return t;
    }
  } else if (coord == "pytorch_half_pixel") {
    x = ow == 1 ? -0.5 : (fy + 0.5) / scale - 0.5;
  } else if (coord == "half_pixel") {
    x = (fy + 0.5) / scale - 0.5;
  } else {
    const double offset = fin / 2 * (1 - double(out) / ow);
    x = offset + (fy + 0.5) / scale - 0.5;
  }
  const double fl = std::floor(x);
  const double ratio = x == fl ? 1.0 : x - fl;
  t.weight = coefficients(a.get_string("mode"), a.get_string("nearest_mode"), ratio, scale, a.get_float("cubic_coeff_a"),
                          a.get_bool("antialias"));
  // The n integer positions nearest x, ties to the smaller: for even n they are
  // floor(x) - n/2 + 1 ... (or x - n/2 ... when x is an integer).
  const int64_t n = static_cast<int64_t>(t.weight.size());
  const int64_t left = x == fl ? static_cast<int64_t>(fl) - n / 2 : static_cast<int64_t>(fl) - n / 2 + 1;
  const bool exclude = a.get_bool("exclude_outside") && a.get_string("mode") != "nearest";
  double sum = 0;
  for (int64_t k = 0; k < n; ++k) {
    const int64_t i = left + k;
    if (exclude && (i < 0 || i >= in)) t.weight[size_t(k)] = 0;
    sum += t.weight[size_t(k)];
    t.index.push_back(std::min(std::max<int64_t>(i, 0), in - 1));
  }
  if (exclude && sum != 0)
    for (double& w : t.weight) w /= sum;
  return t;
}

}  // namespace

Tensor resize(const Tensor& x, const Attrs& a) {
  const Shape& xs = x.shape();
  const auto& sizes = a.get_ints("sizes");
  const size_t rank = xs.size();
  Shape os(sizes.begin(), sizes.end());
  for (size_t d = 0; d < rank; ++d)
    if (os[d] == -1) os[d] = xs[d];  // -1 keeps x's dim
  std::vector<std::vector<Taps>> taps(rank);
  for (size_t d = 0; d < rank; ++d)
    for (int64_t y = 0; y < os[d]; ++y) taps[d].push_back(axis_taps(a, d, rank, xs[d], os[d], y));
  const std::vector<double> xv = values(x);
  const double fill = a.get_float("extrapolation_value");
  std::vector<double> out;
  for_each_index(os, [&](const std::vector<int64_t>& o) {
    std::vector<const Taps*> per(rank);
    for (size_t d = 0; d < rank; ++d) {
      per[d] = &taps[d][size_t(o[d])];
      if (per[d]->outside) {
        out.push_back(fill);
        return;
      }
    }
    // Sum over the product of every axis' taps.
    std::vector<size_t> k(rank, 0);
    double acc = 0;
    while (true) {
      double w = 1;
      std::vector<int64_t> idx(rank);
      for (size_t d = 0; d < rank; ++d) {
        w *= per[d]->weight[k[d]];
        idx[d] = per[d]->index[k[d]];
      }
      if (w != 0) acc += w * xv[size_t(row_major_offset(xs, idx))];
      size_t d = rank;
      while (d > 0 && ++k[d - 1] == per[d - 1]->weight.size()) k[--d] = 0;
      if (d == 0) break;
    }
    out.push_back(acc);
  });
  return from_values(out, os);
}

namespace {

// ONNX's reflection of v into [lo, hi] by the nearer border.
double reflect_into(double v, double lo, double hi) {
  const double range = hi - lo;
  if (range <= 0) return lo;
  if (v < lo) {
    const double d = lo - v;
    const double n = std::trunc(d / range), r = d - n * range;
    return std::fmod(n, 2) == 0 ? lo + r : hi - r;
  }
  if (v > hi) {
    const double d = v - hi;
    const double n = std::trunc(d / range), r = d - n * range;
    return std::fmod(n, 2) == 0 ? hi - r : lo + r;
  }
  return v;
}

}  // namespace

Tensor grid_sample(const Tensor& x, const Tensor& grid, const std::string& mode, const std::string& padding_mode,
                   bool align_corners) {
  const Shape& xs = x.shape();
  const Shape& gs = grid.shape();
  const size_t k = xs.size() - 2;
  Shape os{xs[0], xs[1]};
  os.insert(os.end(), gs.begin() + 1, gs.end() - 1);
  const std::vector<double> xv = values(x), gv = values(grid);
  std::vector<double> out;
  for_each_index(os, [&](const std::vector<int64_t>& o) {
    // The grid entry of this location: [n, o2, ..., 0] .. [n, o2, ..., k - 1].
    std::vector<int64_t> gi{o[0]};
    gi.insert(gi.end(), o.begin() + 2, o.end());
    gi.push_back(0);
    const int64_t gbase = row_major_offset(gs, gi);
    // Per spatial dim: the integer positions read and their coefficients.
    std::vector<std::vector<int64_t>> pos(k);
    std::vector<std::vector<double>> coef(k);
    std::vector<double> lo(k), hi(k);
    for (size_t d = 0; d < k; ++d) {
      const double len = static_cast<double>(xs[d + 2]);
      const double u = gv[size_t(gbase) + (k - 1 - d)];
      lo[d] = align_corners ? 0 : -0.5;
      hi[d] = align_corners ? len - 1 : len - 0.5;
      double c = align_corners ? (u + 1) / 2 * (len - 1) : ((u + 1) * len - 1) / 2;
      if (mode == "nearest") c = std::nearbyint(c);
      if (c < lo[d] || c > hi[d]) {
        if (padding_mode == "border") c = std::min(std::max(c, 0.0), len - 1);
        else if (padding_mode == "reflection") c = reflect_into(c, lo[d], hi[d]);
      }
      if (mode == "nearest") {
        pos[d] = {static_cast<int64_t>(c)};
        coef[d] = {1.0};
      } else if (mode == "linear") {
        const double f = std::floor(c), t = c - f;
        pos[d] = {int64_t(f), int64_t(f) + 1};
        coef[d] = {1 - t, t};
      } else {
        const double f = std::floor(c), t = c - f, A = -0.75;
        pos[d] = {int64_t(f) - 1, int64_t(f), int64_t(f) + 1, int64_t(f) + 2};
        coef[d] = {((A * (t + 1) - 5 * A) * (t + 1) + 8 * A) * (t + 1) - 4 * A,
                   ((A + 2) * t - (A + 3)) * t * t + 1,
                   ((A + 2) * (1 - t) - (A + 3)) * (1 - t) * (1 - t) + 1,
                   ((A * (2 - t) - 5 * A) * (2 - t) + 8 * A) * (2 - t) - 4 * A};
      }
    }
    // Sum over the product of the dims' taps; a tap outside x reads 0 (zeros), the clamped pixel
    // (border) or the reflected one (reflection).
    std::vector<size_t> sel(k, 0);
    double acc = 0;
    while (true) {
      double w = 1;
      bool zero = false;
      std::vector<int64_t> idx{o[0], o[1]};
      for (size_t d = 0; d < k; ++d) {
        int64_t i = pos[d][sel[d]];
        const int64_t len = xs[d + 2];
        if (i < 0 || i >= len) {
          if (padding_mode == "zeros") zero = true;
          else if (padding_mode == "border") i = std::min(std::max<int64_t>(i, 0), len - 1);
          else i = std::min(std::max<int64_t>(static_cast<int64_t>(reflect_into(double(i), lo[d], hi[d])), 0), len - 1);
        }
        idx.push_back(i);
        w *= coef[d][sel[d]];
      }
      if (!zero) acc += w * xv[size_t(row_major_offset(xs, idx))];
      size_t d = k;
      while (d > 0 && ++sel[d - 1] == pos[d - 1].size()) sel[--d] = 0;
      if (d == 0) break;
    }
    out.push_back(acc);
  });
  return from_values(out, os);
}

}  // namespace kiln::ref
