// Grid sampling kernels behind kernels/cpu/grid_sample.h. Per output location, each spatial dim
// yields up to 4 taps (input index, weight, d weight / d grid coordinate); the value is the sum
// over the product of the dims' taps, shared by every channel (Note [Grid sample layout]). The
// backward runs parallel over the batch (its scatters stay inside one image).
#include "kernels/cpu/grid_sample.h"

#include <cmath>
#include <vector>

#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

using Mode = GridSampleParams::Mode;
using Padding = GridSampleParams::Padding;

constexpr int kMaxTaps = 4;

struct AxisTaps {
  int n = 0;
  int64_t index[kMaxTaps];
  double w[kMaxTaps], dw[kMaxTaps];  // dw: d weight / d normalized coordinate
};

// Reflects v into [lo, hi] by the nearer border; *slope becomes +-1 (d result / d v).
double reflect(double v, double lo, double hi, double* slope) {
  const double range = hi - lo;
  *slope = 1;
  if (range <= 0) {
    *slope = 0;
    return lo;
  }
  if (v < lo) {
    const double d = lo - v;
    const int64_t n = static_cast<int64_t>(d / range);
    const double r = d - static_cast<double>(n) * range;
    *slope = n % 2 == 0 ? -1 : 1;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (v > hi) {
    const double d = v - hi;
    const int64_t n = static_cast<int64_t>(d / range);
    const double r = d - static_cast<double>(n) * range;
    *slope = n % 2 == 0 ? -1 : 1;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return v;
}

// The input index a tap at integer position i reads, or -1 for a zero (padding) tap.
int64_t pixel_index(const GridSampleParams& p, int64_t i, int64_t len, double lo, double hi) {
  if (p.padding == Padding::zeros) return i >= 0 && i < len ? i : -1;
  if (p.padding == Padding::border) return std::clamp<int64_t>(i, 0, len - 1);
  double slope;
  const int64_t r = static_cast<int64_t>(reflect(static_cast<double>(i), lo, hi, &slope));
  return std::clamp<int64_t>(r, 0, len - 1);
}

// Keys' cubic convolution (A = -0.75) at the 4 taps x0 - 1 .. x0 + 2 for t = x - x0 in [0, 1),
// and the derivatives d coefficient / d t.
void cubic(double t, double* c, double* dc) {
  const double A = -0.75;
  auto near = [A](double s) { return ((A + 2) * s - (A + 3)) * s * s + 1; };       // |s| <= 1
  auto dnear = [A](double s) { return (3 * (A + 2) * s - 2 * (A + 3)) * s; };
  auto far = [A](double s) { return ((A * s - 5 * A) * s + 8 * A) * s - 4 * A; };  // 1 < |s| < 2
  auto dfar = [A](double s) { return (3 * A * s - 10 * A) * s + 8 * A; };
  c[0] = far(t + 1), dc[0] = dfar(t + 1);
  c[1] = near(t), dc[1] = dnear(t);
  c[2] = near(1 - t), dc[2] = -dnear(1 - t);
  c[3] = far(2 - t), dc[3] = -dfar(2 - t);
}

AxisTaps axis_taps(const GridSampleParams& p, double u, int64_t len) {
  const double flen = static_cast<double>(len);
  const double lo = p.align_corners ? 0.0 : -0.5, hi = p.align_corners ? flen - 1 : flen - 0.5;
  // Denormalize: align_corners maps -1, 1 to the corner pixels' centres, else to their outer edges.
  double x = p.align_corners ? (u + 1) / 2 * (flen - 1) : ((u + 1) * flen - 1) / 2;
  double dx = p.align_corners ? (flen - 1) / 2 : flen / 2;  // d x / d u
  if (p.mode == Mode::nearest) x = std::nearbyint(x), dx = 0;  // round half to even
  if (x < lo || x > hi) {
    if (p.padding == Padding::border) {
      x = std::clamp(x, 0.0, flen - 1);
      dx = 0;
    } else if (p.padding == Padding::reflection) {
      double slope;
      x = reflect(x, lo, hi, &slope);
      dx *= slope;
    }
  }
  AxisTaps t;
  if (!std::isfinite(x)) return t;  // NaN / inf coordinates read nothing (zero)
  if (p.mode == Mode::nearest) {
    const int64_t i = pixel_index(p, static_cast<int64_t>(x), len, lo, hi);
    if (i >= 0) t.index[t.n] = i, t.w[t.n] = 1, t.dw[t.n] = 0, ++t.n;
    return t;
  }
  const double x0 = std::floor(x), f = x - x0;
  double c[kMaxTaps], dc[kMaxTaps];
  int taps;
  int64_t first;
  if (p.mode == Mode::linear) {
    c[0] = 1 - f, c[1] = f, dc[0] = -1, dc[1] = 1;
    taps = 2, first = static_cast<int64_t>(x0);
  } else {
    cubic(f, c, dc);
    taps = 4, first = static_cast<int64_t>(x0) - 1;
  }
  for (int k = 0; k < taps; ++k) {
    const int64_t i = pixel_index(p, first + k, len, lo, hi);
    if (i < 0) continue;
    t.index[t.n] = i, t.w[t.n] = c[k], t.dw[t.n] = dc[k] * dx, ++t.n;
  }
  return t;
}

struct Geometry {
  int64_t n, c, k, in_plane, locations;
  Shape in;
  std::vector<int64_t> in_stride;
};

Geometry geometry(const Tensor& x, const Tensor& grid) {
  Geometry g;
  const Shape& xs = x.shape();
  g.n = xs[0], g.c = xs[1], g.k = static_cast<int64_t>(xs.size()) - 2;
  g.in.assign(xs.begin() + 2, xs.end());
  g.in_stride.assign(static_cast<size_t>(g.k), 1);
  for (int64_t d = g.k - 1; d > 0; --d) g.in_stride[size_t(d - 1)] = g.in_stride[size_t(d)] * g.in[size_t(d)];
  g.in_plane = 1;
  for (int64_t v : g.in) g.in_plane *= v;
  g.locations = grid.numel() / std::max<int64_t>(1, g.n * g.k);
  return g;
}

// Calls fn(offset, weight, taps, combo) for every combination of the dims' taps.
template <class Fn>
void for_each_combo(const std::vector<AxisTaps>& taps, const std::vector<int64_t>& stride, Fn&& fn) {
  const size_t k = taps.size();
  for (const AxisTaps& t : taps)
    if (t.n == 0) return;
  int sel[8] = {0};
  while (true) {
    int64_t off = 0;
    double w = 1;
    for (size_t d = 0; d < k; ++d) {
      off += taps[d].index[sel[d]] * stride[d];
      w *= taps[d].w[sel[d]];
    }
    fn(off, w, sel);
    size_t d = k;
    while (d > 0 && ++sel[d - 1] == taps[d - 1].n) sel[--d] = 0;
    if (d == 0) return;
  }
}

// Note [Grid sample layout]
// The taps of a location are shared by every channel, and a channel's plane is what the samples
// read: so each image first tabulates every location's taps (flat offsets and weights, at most
// taps_per_dim^k of them), then each channel walks its plane location by location, which keeps
// one plane hot in cache however scattered the grid is.
template <class C>
void forward(const GridSampleParams& p, const Tensor& x, const Tensor& grid, const Tensor& y) {
  const Geometry g = geometry(x, grid);
  const C* xp = static_cast<const C*>(x.data_ptr());
  const double* gp = static_cast<const double*>(grid.data_ptr());
  C* yp = static_cast<C*>(y.data_ptr());
  int64_t stride = 1;
  const int64_t per_dim = p.mode == Mode::nearest ? 1 : p.mode == Mode::linear ? 2 : 4;
  for (int64_t d = 0; d < g.k; ++d) stride *= per_dim;
  std::vector<int64_t> off(static_cast<size_t>(g.locations * stride));
  std::vector<C> wt(static_cast<size_t>(g.locations * stride));
  std::vector<int32_t> count(static_cast<size_t>(g.locations));
  for (int64_t n = 0; n < g.n; ++n) {
    parallel_for(0, g.locations, 256, [&](int64_t a, int64_t b) {
      std::vector<AxisTaps> taps(static_cast<size_t>(g.k));
      for (int64_t loc = a; loc < b; ++loc) {
        const double* u = gp + (n * g.locations + loc) * g.k;
        for (int64_t d = 0; d < g.k; ++d) taps[size_t(d)] = axis_taps(p, u[g.k - 1 - d], g.in[size_t(d)]);
        int32_t m = 0;
        int64_t* o = off.data() + loc * stride;
        C* w = wt.data() + loc * stride;
        for_each_combo(taps, g.in_stride, [&](int64_t offset, double weight, const int*) {
          o[m] = offset, w[m] = static_cast<C>(weight), ++m;
        });
        count[size_t(loc)] = m;
      }
    });
    parallel_for(0, g.c, std::max<int64_t>(1, 16384 / std::max<int64_t>(1, g.locations * stride)), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const C* plane = xp + (n * g.c + c) * g.in_plane;
        C* out = yp + (n * g.c + c) * g.locations;
        for (int64_t loc = 0; loc < g.locations; ++loc) {
          const int64_t* o = off.data() + loc * stride;
          const C* w = wt.data() + loc * stride;
          C acc = 0;
          for (int32_t e = 0; e < count[size_t(loc)]; ++e) acc += w[e] * plane[o[e]];
          out[loc] = acc;
        }
      }
    });
  }
}

}  // namespace

void grid_sample(const GridSampleParams& p, const Tensor& x, const Tensor& grid, const Tensor& y) {
  KILN_ASSERT(x.shape().size() <= 6, "grid_sample: too many spatial dims");
  if (x.dtype() == DType::f32) forward<float>(p, x, grid, y);
  else forward<double>(p, x, grid, y);
}

void grid_sample_backward(const GridSampleParams& p, const Tensor& x, const Tensor& grid, const Tensor& g,
                          const Tensor& dx, const Tensor& dgrid) {
  const Geometry geo = geometry(x, grid);
  const double* xp = x.data<double>();
  const double* gp = grid.data<double>();
  const double* gy = g.data<double>();
  double* dxp = dx.defined() ? dx.data<double>() : nullptr;
  double* dgp = dgrid.defined() ? dgrid.data<double>() : nullptr;
  if (dxp) std::fill(dxp, dxp + dx.numel(), 0.0);
  if (dgp) std::fill(dgp, dgp + dgrid.numel(), 0.0);
  parallel_for(0, geo.n, 1, [&](int64_t a, int64_t b) {
    std::vector<AxisTaps> taps(static_cast<size_t>(geo.k));
    for (int64_t n = a; n < b; ++n) {
      const double* xn = xp + n * geo.c * geo.in_plane;
      for (int64_t loc = 0; loc < geo.locations; ++loc) {
        const int64_t r = n * geo.locations + loc;
        const double* u = gp + r * geo.k;
        for (int64_t d = 0; d < geo.k; ++d) taps[size_t(d)] = axis_taps(p, u[geo.k - 1 - d], geo.in[size_t(d)]);
        for_each_combo(taps, geo.in_stride, [&](int64_t off, double w, const int* sel) {
          double gx = 0;  // sum over channels of g * x at this tap
          for (int64_t c = 0; c < geo.c; ++c) {
            const double gv = gy[(n * geo.c + c) * geo.locations + loc];
            if (dxp) dxp[(n * geo.c + c) * geo.in_plane + off] += w * gv;
            gx += gv * xn[c * geo.in_plane + off];
          }
          if (!dgp) return;
          for (int64_t d = 0; d < geo.k; ++d) {
            double partial = taps[size_t(d)].dw[sel[d]];
            for (int64_t e = 0; e < geo.k; ++e)
              if (e != d) partial *= taps[size_t(e)].w[sel[e]];
            dgp[r * geo.k + (geo.k - 1 - d)] += partial * gx;
          }
        });
      }
    }
  });
}

}  // namespace kiln::kernels::cpu
