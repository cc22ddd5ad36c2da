// Direct depthwise convolution behind kernels/cpu/conv_depthwise.h.
#include "kernels/cpu/conv_depthwise.h"

#include <algorithm>
#include <limits>
#include <optional>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scratch.h"
#include "kernels/cpu/window_f32.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

bool is_depthwise(const Conv2dParams& p) { return p.groups > 1 && p.groups == p.c && p.k % p.c == 0; }

namespace {

// The block kernel for p's window: 3x3, or 5x5 (MobileNetV3's) where the ISA has one, under the
// same limits as 3x3 (use_channel_blocks). Against the row kernels, AVX2, one thread, in-process
// alternation: 576 channels at 7x7 0.50x the time (two threads 0.72x; batch 8 0.66x), 96 at 14x14
// stride 2 0.42x, 288 there 0.49x.
using BlockKernel = void (*)(const WindowGeom&, const DepthwiseBlockF32&);
constexpr int64_t kMaxBlockTaps = 25;  // 5x5
BlockKernel block_kernel(const Conv2dParams& p, const WindowKernelsF32& k) {
  if (p.r != p.s) return nullptr;
  return p.r == 3 ? k.depthwise3x3_block16 : p.r == 5 ? k.depthwise5x5_block16 : nullptr;
}

// Whether the channel-block kernel computes `p` (Note [Depthwise in channel blocks] in
// window_f32.h): 3x3 (or 5x5, above), undilated, one output channel per input channel, and an
// input plane of at most 28x28. Larger planes gain less in cache-hot runs (56x56: 149 -> 130 us)
// and lose in an engine, where the input arrives from memory and 16 planes read side by side
// prefetch worse than one (MobileNetV2's 112x112 stride-2 layer: 252 -> 345 us). Padding far past
// the kernel's would blow the scratch up 16-fold over the row kernels' copy: at most 256 KiB of
// it. With AVX2's 8-wide rows, a 28x28 output already fills its vectors (3.5 per row): there the
// blocks lost (MobileNetV2's 192-channel layer, one thread on a Zen 3: 167 -> 176 us) while 14x14
// and smaller outputs gained 1.5-4x (576 channels at 14x14 stride 2: 296 -> 77 us).
bool use_channel_blocks(const Conv2dParams& p, const WindowGeom& g, const WindowKernelsF32& k) {
  return block_kernel(p, k) != nullptr && p.k == p.c && p.dil_h == 1 && p.dil_w == 1 && p.h * p.w <= 28 * 28 &&
         (active_isa() == Isa::avx512 || p.ho * p.wo <= 14 * 14) &&
         depthwise_block_floats(g) * static_cast<int64_t>(sizeof(float)) <= 256 * 1024;
}

// hardswish on one finished output plane (where the kernel did not apply it in its store; in the
// store, MobileNetV3's 5x5 layers took 0.71-0.81x the time of this pass per plane, 3x3 0.68-0.77x).
void hardswish_plane(float* plane, int64_t n) {
  GemmEpilogue e;
  e.activation = GemmActivation::hardswish;
  gemm_epilogue_f32(e, plane, n, 0, 0, 1, n);
}

void depthwise_in_channel_blocks(const Conv2dParams& p, const WindowGeom& g, const WindowKernelsF32& k, const float* x,
                                 const float* w, const float* bias, float* y, const DepthwisePlaneHook& plane_done,
                                 float lo, float hi, DepthwiseAct act) {
  const int64_t blocks = (p.c + 15) / 16, taps = p.r * p.s;
  const BlockKernel kernel = block_kernel(p, k);
  KILN_ASSERT(taps <= kMaxBlockTaps, "depthwise_in_channel_blocks: ", taps, " taps");
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, 16 * taps * p.ho * p.wo));
  const int64_t howo = p.ho * p.wo;
  parallel_for(0, p.n * blocks, grain, [&](int64_t u0, int64_t u1) {
    DepthwiseBlockF32 a;
    a.buf = thread_scratch<float, ScratchSlot::depthwise_block>(static_cast<size_t>(depthwise_block_floats(g)));
    a.x_plane = p.h * p.w, a.y_plane = howo, a.lo = lo, a.hi = hi;
    a.hardswish = act == DepthwiseAct::hardswish && k.block_hardswish;
    const bool hardswish_after = act == DepthwiseAct::hardswish && !a.hardswish;
    // Note [Block weights packed where they are used]: the block's weights as [tap][16] and its
    // biases, zero past the last channel, packed by the thread that runs the block. Packing all
    // the blocks up front ran on the calling thread alone while the other waited, into two vectors
    // allocated and zeroed per call: MobileNetV2's 960-channel 7 x 7 layers at batch 1 on 2 threads
    // spent 12-15 of their 55 us per call outside the parallel region, under 3 after.
    alignas(64) float wt[kMaxBlockTaps * 16], bt[16];
    int64_t packed = -1;
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t img = u / blocks, blk = u % blocks;
      a.channels = std::min<int64_t>(16, p.c - blk * 16);
      if (blk != packed) {
        std::fill(wt, wt + taps * 16, 0.0f);
        std::fill(bt, bt + 16, 0.0f);
        for (int64_t c = 0; c < a.channels; ++c) {
          const int64_t ch = blk * 16 + c;
          for (int64_t t = 0; t < taps; ++t) wt[t * 16 + c] = w[ch * taps + t];
          if (bias != nullptr) bt[c] = bias[ch];
        }
        packed = blk;
      }
      a.x = x + (img * p.c + blk * 16) * p.h * p.w;
      a.y = y + (img * p.c + blk * 16) * howo;
      a.w = wt, a.bias = bt;
      kernel(g, a);
      for (int64_t c = 0; c < a.channels; ++c) {
        if (hardswish_after) hardswish_plane(a.y + c * howo, howo);
        if (plane_done) plane_done(a.y + c * howo, img, blk * 16 + c);
      }
    }
  });
}

}  // namespace

void conv2d_depthwise_f32(const Conv2dParams& p, const float* x, const float* w, const float* bias, float* y,
                          const DepthwisePlaneHook& plane_done, float lo, float hi, DepthwiseAct act) {
  KILN_ASSERT(is_depthwise(p), "conv2d_depthwise_f32: not depthwise (C ", p.c, ", K ", p.k, ", groups ", p.groups, ")");
  const WindowGeom g{p.h, p.w, p.ho, p.wo, p.r, p.s, p.stride_h, p.stride_w, p.pad_top, p.pad_left, p.dil_h, p.dil_w};
  const WindowKernelsF32 k = window_kernels_f32(active_isa());
  if (act == DepthwiseAct::hardswish) {  // instead of the clamp
    lo = -std::numeric_limits<float>::infinity();
    hi = std::numeric_limits<float>::infinity();
  }
  if (use_channel_blocks(p, g, k)) return depthwise_in_channel_blocks(p, g, k, x, w, bias, y, plane_done, lo, hi, act);
  const int64_t mult = p.k / p.c, taps = p.r * p.s, howo = p.ho * p.wo;
  // Enough multiply-adds per chunk to pay for a thread hand-off.
  const int64_t grain = std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(1, mult * howo * taps + p.h * p.w));
  // Note [3x3 windows read in place]: those read x's planes themselves; the rest a phased copy.
  const bool in_place = k.depthwise3x3_s2_plane != nullptr && mult == 1 && window3x3_in_place(g);
  parallel_for(0, p.n * p.c, grain, [&](int64_t a, int64_t b) {
    std::optional<PhasedPlane> plane;
    if (!in_place) plane.emplace(g, 0.0f);
    for (int64_t t = a; t < b; ++t) {
      const int64_t img = t / p.c, ch = t % p.c;
      const float* xp = x + t * p.h * p.w;
      if (plane) plane->load(xp, k);
      for (int64_t m = 0; m < mult; ++m) {
        const int64_t oc = ch * mult + m;
        const float* wk = w + oc * taps;
        const float bv = bias ? bias[oc] : 0.0f;
        float* yp = y + (img * p.k + oc) * howo;
        if (plane)
          k.fma_taps(plane->row(0), plane->row_step(), plane->offsets().data(), wk, taps, bv, lo, hi, yp, p.wo, p.wo,
                     p.ho);
        else
          k.depthwise3x3_s2_plane(g, xp, wk, bv, lo, hi, yp);
        if (act == DepthwiseAct::hardswish) hardswish_plane(yp, howo);
        if (plane_done) plane_done(yp, img, oc);
      }
    }
  });
}

}  // namespace kiln::kernels::cpu
