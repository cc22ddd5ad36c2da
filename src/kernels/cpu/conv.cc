// im2col convolution behind kernels/cpu/conv.h (and the f32 entry point, which prefers the direct
// convolution of conv_direct.cc and the depthwise kernel where they apply).
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <limits>
#include <type_traits>

#include "kernels/cpu/conv_depthwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

namespace {

// col[(c * R + r) * S + s][oh * Wo + ow] = x[c][oh * sh - pt + r * dh][ow * sw - pl + s * dw] (0 outside).
template <class T>
void im2col(const Conv2dParams& p, int64_t channels, const T* x, T* col) {
  const int64_t howo = p.ho * p.wo;
  for (int64_t c = 0; c < channels; ++c) {
    const T* xc = x + c * p.h * p.w;
    for (int64_t r = 0; r < p.r; ++r) {
      for (int64_t s = 0; s < p.s; ++s) {
        T* row = col + ((c * p.r + r) * p.s + s) * howo;
        const int64_t w_off = s * p.dil_w - p.pad_left;
        // Output columns whose input column lies inside [0, W).
        int64_t ow_lo = w_off >= 0 ? 0 : (-w_off + p.stride_w - 1) / p.stride_w;
        int64_t ow_hi = p.w - w_off <= 0 ? 0 : std::min(p.wo, (p.w - w_off - 1) / p.stride_w + 1);
        ow_lo = std::min(ow_lo, p.wo);
        ow_hi = std::max(ow_hi, ow_lo);
        for (int64_t oh = 0; oh < p.ho; ++oh) {
          T* out = row + oh * p.wo;
          const int64_t ih = oh * p.stride_h - p.pad_top + r * p.dil_h;
          if (ih < 0 || ih >= p.h) {
            std::fill(out, out + p.wo, T(0));
            continue;
          }
          const T* xr = xc + ih * p.w + w_off;
          std::fill(out, out + ow_lo, T(0));
          if (p.stride_w == 1) std::copy(xr + ow_lo, xr + ow_hi, out + ow_lo);
          else
            for (int64_t ow = ow_lo; ow < ow_hi; ++ow) out[ow] = xr[ow * p.stride_w];
          std::fill(out + ow_hi, out + p.wo, T(0));
        }
      }
    }
  }
}

template <class T>
void conv2d_nchw(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y, const Conv2dEpilogue& ep,
                 const float* prepacked_w = nullptr) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t howo = p.ho * p.wo, crs = cg * p.r * p.s;
  // A 1x1 kernel with unit stride and no padding reads x as it is: no im2col.
  const bool direct = p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
                      p.pad_left == 0 && p.ho == p.h && p.wo == p.w;
  // f32 with several images: each group's filters are packed for the GEMM once per call, not once
  // per image (they are the GEMM's A; packing them was ~10% of a batch-8 ResNet's time).
  float* packed_w = nullptr;
  size_t packed_per_group = 0;
  if constexpr (std::is_same_v<T, float>) {
    if (prepacked_w != nullptr) {  // pack_conv2d_weight_f32's layout, packed by the caller once
      packed_per_group = packed_a_f32_floats(kg, crs);
      packed_w = const_cast<float*>(prepacked_w);
    } else if (p.n > 1) {
      packed_per_group = packed_a_f32_floats(kg, crs);
      packed_w = thread_scratch<float, ScratchSlot::packed_weight>(packed_per_group * static_cast<size_t>(p.groups));
      for (int64_t g = 0; g < p.groups; ++g)
        pack_a_f32(kg, crs, w + g * kg * crs, crs, 1, packed_w + static_cast<size_t>(g) * packed_per_group);
    }
  }
  auto one = [&](int64_t task) {
    const int64_t img = task / p.groups, g = task % p.groups;
    const T* xg = x + (img * p.c + g * cg) * p.h * p.w;
    T* yg = y + (img * p.k + g * kg) * howo;
    const T* b = xg;
    if (!direct) {
      T* col = thread_scratch<T, ScratchSlot::im2col>(static_cast<size_t>(crs * howo));
      im2col<T>(p, cg, xg, col);
      b = col;
    }
    if constexpr (std::is_same_v<T, float>) {
      GemmEpilogue e;
      if (bias) e.bias_kind = GemmBias::per_row, e.bias = bias + g * kg;
      e.activation = ep.activation;
      if (ep.residual) e.residual = ep.residual + (img * p.k + g * kg) * howo, e.ldr = howo;
      e.residual_before_activation = ep.residual_before_activation;
      if (packed_w != nullptr)
        gemm_f32_packed_a(kg, howo, crs, 1.0f, packed_w + static_cast<size_t>(g) * packed_per_group, b, howo, 1, 0.0f,
                          yg, howo, e);
      else
        gemm_f32(kg, howo, crs, 1.0f, w + g * kg * crs, crs, 1, b, howo, 1, 0.0f, yg, howo, e);
      return;
    }
    T beta = T(0);
    if (bias) {
      for (int64_t o = 0; o < kg; ++o) std::fill(yg + o * howo, yg + (o + 1) * howo, bias[g * kg + o]);
      beta = T(1);
    }
    gemm(kg, howo, crs, T(1), w + g * kg * crs, crs, 1, b, howo, 1, beta, yg, howo);
  };
  const int64_t tasks = p.n * p.groups;
  // Note [Conv parallelism]: many small (image, group) products (depthwise, small images) run in
  // parallel, each with its own im2col buffer and an inline GEMM; one big product per task runs
  // the tasks in order and lets the GEMM use the threads.
  const int64_t per_task = kg * howo * crs;
  if (tasks > 1 && per_task < (int64_t{1} << 22)) {
    parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) one(t);
    });
  } else {
    for (int64_t t = 0; t < tasks; ++t) one(t);
  }
}

}  // namespace

void conv2d_nchw_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                     const Conv2dEpilogue& epilogue) {
  const bool plain = epilogue.activation == GemmActivation::none && epilogue.residual == nullptr;
  if (is_depthwise(p)) {  // the direct kernel (the GEMM would see one row per group)
    if (plain) return conv2d_depthwise_f32(p, x, w, bias, y);
    // relu / relu6 alone: a clamp in the kernel's store (MobileNet's depthwise layers spent as long
    // in a separate relu6 pass over each plane as in the convolution).
    if (epilogue.residual == nullptr && (epilogue.activation == GemmActivation::relu ||
                                         epilogue.activation == GemmActivation::relu6))
      return conv2d_depthwise_f32(p, x, w, bias, y, {}, 0.0f,
                                  epilogue.activation == GemmActivation::relu6
                                      ? 6.0f
                                      : std::numeric_limits<float>::infinity());
    // hardswish alone: in the channel blocks' store, or right after each plane (MobileNetV3).
    if (epilogue.residual == nullptr && epilogue.activation == GemmActivation::hardswish)
      return conv2d_depthwise_f32(p, x, w, bias, y, {}, -std::numeric_limits<float>::infinity(),
                                  std::numeric_limits<float>::infinity(), DepthwiseAct::hardswish);
    // Activation and residual on each output plane right after it is written (bias is in already):
    // the plane is the epilogue's row `image * K + channel` of an [N*K, Ho*Wo] matrix.
    GemmEpilogue e;
    e.activation = epilogue.activation;
    e.residual = epilogue.residual;
    e.ldr = p.ho * p.wo;
    e.residual_before_activation = epilogue.residual_before_activation;
    return conv2d_depthwise_f32(p, x, w, bias, y, [&](float* plane, int64_t image, int64_t channel) {
      gemm_epilogue_f32(e, plane, p.ho * p.wo, image * p.k + channel, 0, 1, p.ho * p.wo);
    });
  }
  // Note [Direct convolution] (conv_direct.cc): no im2col matrix where the ISA has the kernel.
  if (conv2d_direct_supported(p)) return conv2d_direct_f32(p, x, w, nullptr, bias, y, epilogue);
  conv2d_nchw<float>(p, x, w, bias, y, epilogue);
}
size_t conv2d_packed_weight_f32_floats(const Conv2dParams& p) {
  return packed_a_f32_floats(p.k / p.groups, p.c / p.groups * p.r * p.s) * static_cast<size_t>(p.groups);
}
void pack_conv2d_weight_f32(const Conv2dParams& p, const float* w, float* out) {
  const int64_t kg = p.k / p.groups, crs = p.c / p.groups * p.r * p.s;
  const size_t per_group = packed_a_f32_floats(kg, crs);
  for (int64_t g = 0; g < p.groups; ++g) pack_a_f32(kg, crs, w + g * kg * crs, crs, 1, out + static_cast<size_t>(g) * per_group);
}
void conv2d_nchw_f32_prepacked(const Conv2dParams& p, const float* x, const float* packed_w, const float* bias, float* y,
                               const Conv2dEpilogue& epilogue) {
  conv2d_nchw<float>(p, x, nullptr, bias, y, epilogue, packed_w);
}
void conv2d_nchw_f64(const Conv2dParams& p, const double* x, const double* w, const double* bias, double* y) {
  conv2d_nchw<double>(p, x, w, bias, y, Conv2dEpilogue{});
}

}  // namespace kiln::kernels::cpu
