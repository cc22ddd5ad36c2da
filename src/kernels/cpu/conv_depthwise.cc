// Direct depthwise convolution behind kernels/cpu/conv_depthwise.h.
#include "kernels/cpu/conv_depthwise.h"

#include <algorithm>

#include "kernels/cpu/window_f32.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

bool is_depthwise(const Conv2dParams& p) { return p.groups > 1 && p.groups == p.c && p.k % p.c == 0; }

void conv2d_depthwise_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                          const DepthwisePlaneHook& plane_done, float lo, float hi) {
  KILN_ASSERT(is_depthwise(p), "conv2d_depthwise_f32: not depthwise (C ", p.c, ", K ", p.k, ", groups ", p.groups, ")");
  const WindowGeom g{p.h, p.w, p.ho, p.wo, p.r, p.s, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.dil_h, p.dil_w};
  const WindowKernelsF32 k = window_kernels_f32(active_isa());
  const int64_t mult = p.k / p.c, taps = p.r * p.s, howo = p.ho * p.wo;
  // Enough multiply-adds per chunk to pay for a thread hand-off.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, mult * howo * taps + p.h * p.w));
  parallel_for(0, p.n * p.c, grain, [&](int64_t a, int64_t b) {
    PhasedPlane plane(g, 0.0f);
    const std::vector<int64_t>& off = plane.offsets();
    for (int64_t t = a; t < b; ++t) {
      const int64_t img = t / p.c, ch = t % p.c;
      plane.load(x + t * p.h * p.w, k);
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t oc = ch * mult + m;
        const float* wk = w + oc * taps;
        const float bv = bias ? bias[oc] : 0.0f;
        float* yp = y + (img * p.k + oc) * howo;
        k.fma_taps(plane.row(0), plane.row_step(), off.data(), wk, taps, bv, lo, hi, yp, p.wo, p.wo, p.ho);
        if (plane_done) plane_done(yp, img, oc);
      }
    }
  });
}

}  // namespace kiln::kernels::cpu
