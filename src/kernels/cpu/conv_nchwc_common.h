// What the blocked convolutions (conv_nchwc.cc) and the blocked depthwise convolution
// (conv_nchwc_depthwise.cc) share inside the library: the scalar epilogue, the activation mapping,
// the padded bias and the number of work items wanted.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "kernels/cpu/conv_nchwc.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// The scalar kernels' epilogue after the bias: the residual (res, or nullptr) on its side of the
// activation, the activation (hardswish in f32, as the op).
inline float finish_scalar(float r, const float* res, const ConvTileEpilogueF32& ep) {
  using Act = ConvTileEpilogueF32::Act;
  if (res != nullptr && ep.residual_before_activation) r += *res;
  if (ep.act == Act::relu) r = std::max(r, 0.0f);
  else if (ep.act == Act::relu6) r = std::min(std::max(r, 0.0f), 6.0f);
  else if (ep.act == Act::hardswish) r = r * std::min(std::max(r + 3.0f, 0.0f), 6.0f) / 6.0f;
  else if (ep.act == Act::sigmoid || ep.act == Act::silu) {
    const float e = std::exp(-std::abs(r)), s = (r < 0.0f ? e : 1.0f) / (1.0f + e);
    r = ep.act == Act::silu ? r * s : s;
  } else if (ep.act == Act::gelu) {
    r = static_cast<float>(0.5 * r * std::erfc(-static_cast<double>(r) * 0.70710678118654752440));
  }
  if (res != nullptr && !ep.residual_before_activation) r += *res;
  return r;
}

// The work items a layer is split into at least, where its shape allows: 4 a thread, so a thread
// slowed by a neighbour hands its last items to the other (Note [Chunks for every thread]).
inline int64_t items_wanted() { return 4 * static_cast<int64_t>(get_num_threads()); }

inline ConvTileEpilogueF32::Act blocked_act(GemmActivation a) {
  using Act = ConvTileEpilogueF32::Act;
  switch (a) {
    case GemmActivation::none: return Act::none;
    case GemmActivation::relu: return Act::relu;
    case GemmActivation::relu6: return Act::relu6;
    case GemmActivation::hardswish: return Act::hardswish;
    case GemmActivation::sigmoid: return Act::sigmoid;
    case GemmActivation::silu: return Act::silu;
    case GemmActivation::gelu: return Act::gelu;
    default: KILN_FAIL("the blocked convolutions apply none, relu, relu6, hardswish, sigmoid, silu or gelu");
  }
}

// A bias of 16 values per block: `bias` itself, or a zero-padded copy in `storage` when K is not
// a multiple of 16 (zeros without a bias).
inline const float* padded_bias(const float* bias, int64_t k, std::vector<float>& storage) {
  if (bias != nullptr && k % kChannelBlock == 0) return bias;
  storage.assign(static_cast<size_t>(nchwc_blocks(k) * kChannelBlock), 0.0f);
  if (bias != nullptr) std::copy(bias, bias + k, storage.begin());
  return storage.data();
}

}  // namespace kiln::kernels::cpu
