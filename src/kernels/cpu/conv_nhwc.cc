// Channels-last convolution behind kernels/cpu/conv_nhwc.h.
#include "kernels/cpu/conv_nhwc.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [NHWC convolution]
// In NHWC every output pixel is a row: y[N*Ho*Wo, K] = col[N*Ho*Wo, R*S*Cg] @ W^T[R*S*Cg, K] per
// group, and an OHWI weight read as W^T is a plain strided matrix (row stride 1, column stride
// R*S*Cg). Consequences:
//   - a 1x1, unit-stride, unpadded convolution needs no im2col at all: x itself is the A matrix
//     (row stride C), for the whole batch in one GEMM;
//   - otherwise im2col copies runs of Cg contiguous channels (memcpy), not single elements, and
//     works on blocks of output rows, so the workspace is bounded (kRowBlock rows per worker) and
//     the batch and the pixels of one image split the same way;
//   - the weight is packed once per call for the GEMM's micro-kernel (pack_b_f32, into reused
//     workspace) and shared by every row block, instead of once per block;
//   - bias is per GEMM column, the residual has y's layout (leading dimension K), so the whole
//     epilogue runs on the GEMM tile while it is in cache.
// Row blocks run in parallel, each with its own im2col buffer and a single-threaded GEMM, when
// there are enough of them to keep every thread busy; with fewer (one small image) they run in
// order and the GEMM threads over its columns instead.

namespace {

constexpr int64_t kRowBlock = 256;  // output pixels per im2col block

// col[i][(r * S + s) * cg + c] = x[n, oh*sh - pt + r*dh, ow*sw - pl + s*dw, c0 + c] (0 outside), for
// the output pixels row0 .. row0 + rows - 1 (flattened over N, Ho, Wo).
void im2col_nhwc(const Conv2dParams& p, const float* x, int64_t c0, int64_t cg, int64_t row0, int64_t rows,
                 float* col) {
  const int64_t width = p.r * p.s * cg;
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t pix = row0 + i;
    const int64_t n = pix / (p.ho * p.wo), oh = pix / p.wo % p.ho, ow = pix % p.wo;
    float* dst = col + i * width;
    for (int64_t r = 0; r < p.r; ++r) {
      const int64_t ih = oh * p.stride_h - p.pad_top + r * p.dil_h;
      for (int64_t s = 0; s < p.s; ++s, dst += cg) {
        const int64_t iw = ow * p.stride_w - p.pad_left + s * p.dil_w;
        if (ih < 0 || ih >= p.h || iw < 0 || iw >= p.w) {
          std::fill(dst, dst + cg, 0.0f);
          continue;
        }
        std::memcpy(dst, x + ((n * p.h + ih) * p.w + iw) * p.c + c0, static_cast<size_t>(cg) * sizeof(float));
      }
    }
  }
}

}  // namespace

void oihw_to_ohwi_f32(int64_t k, int64_t cg, int64_t r, int64_t s, const float* src, float* dst) {
  for (int64_t o = 0; o < k; ++o)
    for (int64_t c = 0; c < cg; ++c)
      for (int64_t i = 0; i < r * s; ++i) dst[(o * r * s + i) * cg + c] = src[(o * cg + c) * r * s + i];
}

void conv2d_nhwc_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                     const Conv2dEpilogue& ep) {
  const int64_t cg = p.c / p.groups, kg = p.k / p.groups;
  const int64_t rows = p.n * p.ho * p.wo, width = p.r * p.s * cg;
  if (rows == 0 || p.k == 0) return;
  const bool direct = p.r == 1 && p.s == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_top == 0 &&
                      p.pad_left == 0 && p.ho == p.h && p.wo == p.w;
  for (int64_t g = 0; g < p.groups; ++g) {
    // W^T for this group (element (q, j) at w[(g*kg + j) * width + q]), packed into this thread's
    // workspace; the row blocks of other threads only read it.
    float* wt = thread_scratch<float, ScratchSlot::packed_weight>(packed_b_f32_floats(width, kg));
    pack_b_f32(width, kg, w + g * kg * width, 1, width, wt);
    GemmEpilogue e;
    if (bias != nullptr) e.bias_kind = GemmBias::per_col, e.bias = bias + g * kg;
    e.activation = ep.activation;
    e.residual_before_activation = ep.residual_before_activation;
    auto block = [&](int64_t row0, int64_t nrows) {
      GemmEpilogue eb = e;
      if (ep.residual != nullptr) eb.residual = ep.residual + row0 * p.k + g * kg, eb.ldr = p.k;
      float* yb = y + row0 * p.k + g * kg;
      if (direct) {
        gemm_f32_packed_b(nrows, kg, width, 1.0f, x + row0 * p.c + g * cg, p.c, 1, wt, 0.0f, yb, p.k, eb);
        return;
      }
      float* col = thread_scratch<float, ScratchSlot::conv_nhwc>(static_cast<size_t>(nrows * width));
      im2col_nhwc(p, x, g * cg, cg, row0, nrows, col);
      gemm_f32_packed_b(nrows, kg, width, 1.0f, col, width, 1, wt, 0.0f, yb, p.k, eb);
    };
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    if (direct) {
      block(0, rows);  // one GEMM over every pixel; it threads itself
    } else if (blocks >= 2 * get_num_threads()) {
      parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
        for (int64_t b = b0; b < b1; ++b) block(b * kRowBlock, std::min(kRowBlock, rows - b * kRowBlock));
      });
    } else {
      for (int64_t b = 0; b < blocks; ++b) block(b * kRowBlock, std::min(kRowBlock, rows - b * kRowBlock));
    }
  }
}

}  // namespace kiln::kernels::cpu
