// Pooling and LRN kernels behind kernels/cpu/pool.h, parallel over planes: f32 max / average
// pooling through the vectorized window kernels (kernels/cpu/window_f32.h), the other dtypes by
// direct loops.
#include "kernels/cpu/pool.h"

#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/scan.h"
#include "kernels/cpu/window_f32.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

// Grain for plane-parallel loops: enough output elements per chunk to pay for a thread.
int64_t plane_grain(int64_t per_plane) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(per_plane, 1)); }

template <class T>
void max_pool_planes(const Pool2dParams& p, const T* x, T* y, int64_t p0, int64_t p1) {
  using C = compute_t<T>;
  for (int64_t pl = p0; pl < p1; ++pl) {
    const T* xp = x + pl * p.h * p.w;
    T* yp = y + pl * p.ho * p.wo;
    for (int64_t oh = 0; oh < p.ho; ++oh) {
      const int64_t h0 = oh * p.stride_h - p.pad_top;
      for (int64_t ow = 0; ow < p.wo; ++ow) {
        const int64_t w0 = ow * p.stride_w - p.pad_left;
        C m = -std::numeric_limits<C>::infinity();
        for (int64_t r = 0; r < p.kh; ++r) {
          const int64_t ih = h0 + r * p.dil_h;
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t s = 0; s < p.kw; ++s) {
            const int64_t iw = w0 + s * p.dil_w;
            if (iw < 0 || iw >= p.w) continue;
            const C v = static_cast<C>(xp[ih * p.w + iw]);
            if (v > m || std::isnan(v)) m = v;
            if (std::isnan(m)) break;
          }
        }
        yp[oh * p.wo + ow] = static_cast<T>(m);
      }
    }
  }
}

// Taps of a window starting at `start` (stride `dil`, `k` taps) inside [lo, hi).
int64_t taps_inside(int64_t start, int64_t k, int64_t dil, int64_t lo, int64_t hi) {
  int64_t n = 0;
  for (int64_t t = 0; t < k; ++t) n += start + t * dil >= lo && start + t * dil < hi;
  return n;
}

template <class T>
void avg_pool_planes(const Pool2dParams& p, const T* x, T* y, int64_t p0, int64_t p1) {
  using C = compute_t<T>;
  for (int64_t pl = p0; pl < p1; ++pl) {
    const T* xp = x + pl * p.h * p.w;
    T* yp = y + pl * p.ho * p.wo;
    for (int64_t oh = 0; oh < p.ho; ++oh) {
      const int64_t h0 = oh * p.stride_h - p.pad_top;
      const int64_t rows = p.count_include_pad ? taps_inside(h0, p.kh, p.dil_h, -p.pad_top, p.h + p.pad_bottom)
                                               : taps_inside(h0, p.kh, p.dil_h, 0, p.h);
      for (int64_t ow = 0; ow < p.wo; ++ow) {
        const int64_t w0 = ow * p.stride_w - p.pad_left;
        const int64_t cols = p.count_include_pad
                                 ? taps_inside(w0, p.kw, p.dil_w, -p.pad_left, p.w + p.pad_right)
                                 : taps_inside(w0, p.kw, p.dil_w, 0, p.w);
        C sum = 0;
        for (int64_t r = 0; r < p.kh; ++r) {
          const int64_t ih = h0 + r * p.dil_h;
          if (ih < 0 || ih >= p.h) continue;
          for (int64_t s = 0; s < p.kw; ++s) {
            const int64_t iw = w0 + s * p.dil_w;
            if (iw >= 0 && iw < p.w) sum += static_cast<C>(xp[ih * p.w + iw]);
          }
        }
        yp[oh * p.wo + ow] = static_cast<T>(sum / static_cast<C>(rows * cols));
      }
    }
  }
}

// f32 max / average pooling over phased planes (Note [Windows over a phased plane]). The average's
// divisor is (rows counted at oh) * (columns counted at ow), as in avg_pool_planes.
void pool2d_f32(const Pool2dParams& p, const float* x, float* y, bool max) {
  const WindowGeom g{p.h, p.w, p.ho, p.wo, p.kh, p.kw, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.dil_h, p.dil_w};
  const WindowKernelsF32 k = window_kernels_f32(active_isa());
  std::vector<float> rows(static_cast<size_t>(p.ho)), cols(static_cast<size_t>(p.wo));
  for (int64_t oh = 0; oh < p.ho; ++oh) {
    const int64_t h0 = oh * p.stride_h - p.pad_top;
    rows[static_cast<size_t>(oh)] = static_cast<float>(
        p.count_include_pad ? taps_inside(h0, p.kh, p.dil_h, -p.pad_top, p.h + p.pad_bottom) : taps_inside(h0, p.kh, p.dil_h, 0, p.h));
  }
  for (int64_t ow = 0; ow < p.wo; ++ow) {
    const int64_t w0 = ow * p.stride_w - p.pad_left;
    cols[static_cast<size_t>(ow)] = static_cast<float>(
        p.count_include_pad ? taps_inside(w0, p.kw, p.dil_w, -p.pad_left, p.w + p.pad_right) : taps_inside(w0, p.kw, p.dil_w, 0, p.w));
  }
  // Vectorized, a plane costs about a tenth of the scalar loop's: bigger chunks per thread.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 17) / std::max<int64_t>(1, p.ho * p.wo * p.kh * p.kw + p.h * p.w));
  if (max && k.max3x3_s2_plane != nullptr && window3x3_in_place(g)) {  // Note [3x3 windows read in place]
    parallel_for(0, p.planes, grain, [&](int64_t a, int64_t b) {
      for (int64_t pl = a; pl < b; ++pl) k.max3x3_s2_plane(g, x + pl * p.h * p.w, y + pl * p.ho * p.wo);
    });
    return;
  }
  parallel_for(0, p.planes, grain, [&](int64_t a, int64_t b) {
    PhasedPlane plane(g, max ? -std::numeric_limits<float>::infinity() : 0.0f);
    const std::vector<int64_t>& off = plane.offsets();
    const int64_t taps = static_cast<int64_t>(off.size());
    for (int64_t pl = a; pl < b; ++pl) {
      plane.load(x + pl * p.h * p.w, k);
      float* yp = y + pl * p.ho * p.wo;
      if (max) k.max_taps(plane.row(0), plane.row_step(), off.data(), taps, yp, p.wo, p.wo, p.ho);
      else k.avg_taps(plane.row(0), plane.row_step(), off.data(), taps, rows.data(), cols.data(), yp, p.wo, p.wo, p.ho);
    }
  });
}

template <class F>
void visit_float(DType t, F&& f) {
  switch (t) {
    case DType::f32: f(TypeTag<float>{}); return;
    case DType::f64: f(TypeTag<double>{}); return;
    case DType::f16: f(TypeTag<Half>{}); return;
    case DType::bf16: f(TypeTag<BFloat16>{}); return;
    default: KILN_ASSERT(false, "pooling kernel called with dtype ", dtype_name(t));
  }
}

}  // namespace

void max_pool2d(const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  if (x.dtype() == DType::f32) return pool2d_f32(p, x.data<float>(), y.data<float>(), true);
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    parallel_for(0, p.planes, plane_grain(p.ho * p.wo * p.kh * p.kw),
                 [&](int64_t a, int64_t b) { max_pool_planes<T>(p, xp, yp, a, b); });
  });
}

void avg_pool2d(const Pool2dParams& p, const Tensor& x, const Tensor& y) {
  if (x.dtype() == DType::f32) return pool2d_f32(p, x.data<float>(), y.data<float>(), false);
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    parallel_for(0, p.planes, plane_grain(p.ho * p.wo * p.kh * p.kw),
                 [&](int64_t a, int64_t b) { avg_pool_planes<T>(p, xp, yp, a, b); });
  });
}

void row_mean(const Tensor& x, const Tensor& y, int64_t rows, int64_t len) {
  if (x.dtype() == DType::f32) {
    // The scan kernels' vectorized f64 row sum.
    const Isa isa = active_isa();
    const ScanKernelsF32 k = isa == Isa::avx512 ? scan_kernels_f32_avx512()
                             : isa == Isa::avx2 ? scan_kernels_f32_avx2()
                                                : scan_kernels_f32_scalar();
    const float* xp = x.data<float>();
    float* yp = y.data<float>();
    // An eighth of the usual hand-off grain (8192 floats): MobileNetV2's 1280 planes of 7 x 7 at
    // batch 1 and MobileNetV3-Small's 576 (28224 floats, 5-6 us on one thread) split between two
    // threads instead of running on one.
    parallel_for(0, rows, std::max<int64_t>(1, (int64_t{1} << 13) / std::max<int64_t>(len, 1)), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) yp[i] = static_cast<float>(k.sum(xp + i * len, len) / static_cast<double>(len));
    });
    return;
  }
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    parallel_for(0, rows, plane_grain(len), [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const T* row = xp + i * len;
        double sum = 0;
        for (int64_t j = 0; j < len; ++j) sum += static_cast<double>(static_cast<compute_t<T>>(row[j]));
        yp[i] = static_cast<T>(static_cast<compute_t<T>>(sum / static_cast<double>(len)));
      }
    });
  });
}

void lrn(const Tensor& x, const Tensor& y, int64_t n, int64_t c, int64_t len, int64_t size, double alpha,
         double beta, double bias) {
  const int64_t before = (size - 1) / 2, after = size - 1 - before;
  visit_float(x.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    using C = compute_t<T>;
    const T* xp = static_cast<const T*>(x.data_ptr());
    T* yp = static_cast<T*>(y.data_ptr());
    const C scale = static_cast<C>(alpha / static_cast<double>(size));
    const C cb = static_cast<C>(bias), cbeta = static_cast<C>(beta);
    parallel_for(0, n * c, plane_grain(len * size), [&](int64_t a, int64_t b) {
      std::vector<C> sq(static_cast<size_t>(len));
      for (int64_t t = a; t < b; ++t) {
        const int64_t img = t / c, ch = t % c;
        std::fill(sq.begin(), sq.end(), C(0));
        const int64_t c0 = std::max<int64_t>(0, ch - before), c1 = std::min(c - 1, ch + after);
        for (int64_t j = c0; j <= c1; ++j) {
          const T* xj = xp + (img * c + j) * len;
          for (int64_t i = 0; i < len; ++i) {
            const C v = static_cast<C>(xj[i]);
            sq[static_cast<size_t>(i)] += v * v;
          }
        }
        const T* xc = xp + t * len;
        T* yc = yp + t * len;
        for (int64_t i = 0; i < len; ++i)
          yc[i] = static_cast<T>(static_cast<C>(xc[i]) / std::pow(cb + scale * sq[static_cast<size_t>(i)], cbeta));
      }
    });
  });
}

int64_t avg_pool_divisor(const Pool2dParams& p, int64_t oh, int64_t ow) {
  const int64_t h0 = oh * p.stride_h - p.pad_top, w0 = ow * p.stride_w - p.pad_left;
  const int64_t rows = p.count_include_pad ? taps_inside(h0, p.kh, p.dil_h, -p.pad_top, p.h + p.pad_bottom)
                                           : taps_inside(h0, p.kh, p.dil_h, 0, p.h);
  const int64_t cols = p.count_include_pad ? taps_inside(w0, p.kw, p.dil_w, -p.pad_left, p.w + p.pad_right)
                                           : taps_inside(w0, p.kw, p.dil_w, 0, p.w);
  return rows * cols;
}

}  // namespace kiln::kernels::cpu
