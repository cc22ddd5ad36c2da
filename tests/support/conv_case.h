// One 2-D convolution test case in the float64 reference's terms (NCHW input, OIHW weight, ONNX
// padding [top, left, bottom, right]) and the kernels' Conv2dParams for it, shared by the CPU
// convolution kernel tests.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kiln/core/shape.h"

namespace kiln::testing {

struct ConvCase {
  Shape x, w;  // NCHW / OIHW
  std::vector<int64_t> stride{1, 1}, padding{0, 0, 0, 0}, dilation{1, 1};
  int64_t groups = 1;
};

inline kernels::cpu::Conv2dParams conv_params_of(const ConvCase& c) {
  kernels::cpu::Conv2dParams p;
  p.n = c.x[0], p.c = c.x[1], p.h = c.x[2], p.w = c.x[3];
  p.k = c.w[0], p.r = c.w[2], p.s = c.w[3];
  p.stride_h = c.stride[0], p.stride_w = c.stride[1];
  p.pad_top = c.padding[0], p.pad_left = c.padding[1];
  p.dil_h = c.dilation[0], p.dil_w = c.dilation[1];
  p.groups = c.groups;
  p.ho = (p.h + c.padding[0] + c.padding[2] - p.dil_h * (p.r - 1) - 1) / p.stride_h + 1;
  p.wo = (p.w + c.padding[1] + c.padding[3] - p.dil_w * (p.s - 1) - 1) / p.stride_w + 1;
  return p;
}

}  // namespace kiln::testing
