// Transposed convolution behind kernels/cpu/conv_transpose.h: per (image, group), one GEMM
// col = W_g^T @ X_g ([Kg*R*S, H*W]) and a col2im that adds each column entry into the output
// pixel it lands on: y[k][ih*sh - pt + r*dh][iw*sw - pl + s*dw] += col[(k*R + r)*S + s][ih*W + iw].
#include "kernels/cpu/conv_transpose.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

// Output channels write disjoint planes, so they run in parallel (inline when the caller already
// runs in a parallel region, i.e. one task per (image, group)).
template <class T>
void col2im_add(const ConvTranspose2dParams& p, int64_t channels, const T* col, T* y) {
  const int64_t hw = p.h * p.w;
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 15) / std::max<int64_t>(1, p.r * p.s * hw));
  parallel_for(0, channels, grain, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      T* yk = y + k * p.ho * p.wo;
      for (int64_t r = 0; r < p.r; ++r) {
        for (int64_t s = 0; s < p.s; ++s) {
          const T* row = col + ((k * p.r + r) * p.s + s) * hw;
          const int64_t w_off = s * p.dil_w - p.pad_left;
          // Input columns iw whose output column iw*sw + w_off lies inside [0, Wo).
          int64_t iw_lo = w_off >= 0 ? 0 : (-w_off + p.stride_w - 1) / p.stride_w;
          int64_t iw_hi = p.wo - w_off <= 0 ? 0 : std::min(p.w, (p.wo - w_off - 1) / p.stride_w + 1);
          iw_lo = std::min(iw_lo, p.w);
          iw_hi = std::max(iw_hi, iw_lo);
          for (int64_t ih = 0; ih < p.h; ++ih) {
            const int64_t oh = ih * p.stride_h - p.pad_top + r * p.dil_h;
            if (oh < 0 || oh >= p.ho) continue;
            const T* src = row + ih * p.w;
            T* dst = yk + oh * p.wo + w_off;
            if (p.stride_w == 1) {
              for (int64_t iw = iw_lo; iw < iw_hi; ++iw) dst[iw] += src[iw];
            } else {
              for (int64_t iw = iw_lo; iw < iw_hi; ++iw) dst[iw * p.stride_w] += src[iw];
            }
          }
        }
      }
    }
  });
}

template <class T>
void conv_transpose2d_nchw(const ConvTranspose2dParams& p, const T* x, const T* w, const T* bias, T* y) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t hw = p.h * p.w, howo = p.ho * p.wo, krs = kg * p.r * p.s;
  auto one = [&](int64_t task, std::vector<T>& col) {
    const int64_t img = task / p.groups, g = task % p.groups;
    const T* xg = x + (img * p.c + g * cg) * hw;
    const T* wg = w + g * cg * krs;  // [cg, krs] row-major
    T* yg = y + (img * p.k + g * kg) * howo;
    for (int64_t o = 0; o < kg; ++o) std::fill(yg + o * howo, yg + (o + 1) * howo, bias ? bias[g * kg + o] : T(0));
    col.resize(static_cast<size_t>(krs * hw));
    // col[krs, hw] = wg^T @ xg: A(i, q) = wg[q * krs + i], B(q, j) = xg[q * hw + j].
    gemm(krs, hw, cg, T(1), wg, 1, krs, xg, hw, 1, T(0), col.data(), hw);
    col2im_add<T>(p, kg, col.data(), yg);
  };
  const int64_t tasks = p.n * p.groups;
  // As Note [Conv parallelism] in conv.cc: small products run in parallel over (image, group),
  // one big product per task lets the GEMM use the threads.
  const int64_t per_task = krs * hw * cg;
  if (tasks > 1 && per_task < (int64_t{1} << 22)) {
    parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
      std::vector<T> col;
      for (int64_t t = t0; t < t1; ++t) one(t, col);
    });
  } else {
    std::vector<T> col;
    for (int64_t t = 0; t < tasks; ++t) one(t, col);
  }
}

}  // namespace

void conv_transpose2d_nchw_f32(const ConvTranspose2dParams& p, const float* x, const float* w, const float* bias,
                               float* y) {
  conv_transpose2d_nchw<float>(p, x, w, bias, y);
}
void conv_transpose2d_nchw_f64(const ConvTranspose2dParams& p, const double* x, const double* w,
                               const double* bias, double* y) {
  conv_transpose2d_nchw<double>(p, x, w, bias, y);
}

}  // namespace kiln::kernels::cpu
