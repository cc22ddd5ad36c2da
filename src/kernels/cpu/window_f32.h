// f32 sliding-window kernels (max / average pooling, depthwise convolution) over NCHW planes: a
// padded, stride-phased copy of each input plane (Note [Windows over a phased plane]) and per-ISA
// row primitives that reduce a window's taps for a run of output columns.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cpu/isa.h"

namespace kiln::kernels::cpu {

struct WindowGeom;
struct DepthwiseBlockF32;

// Row primitives over `rows` output rows of `n` columns: output row j is out + j * out_step, and
// its tap t of column i reads base[j * base_step + off[t] + i] (taps >= 1). Several rows go through
// the registers together, so short rows still keep enough independent FMA / max chains in flight.
struct WindowKernelsF32 {
  // The largest tap, NaN when any tap is NaN.
  void (*max_taps)(const float* base, int64_t base_step, const int64_t* off, int64_t taps, float* out,
                   int64_t out_step, int64_t n, int64_t rows);
  // (Sum of the taps) / (rdiv[j] * cdiv[i]).
  void (*avg_taps)(const float* base, int64_t base_step, const int64_t* off, int64_t taps, const float* rdiv,
                   const float* cdiv, float* out, int64_t out_step, int64_t n, int64_t rows);
  // bias + sum over t of w[t] * tap t, clamped to [lo, hi] (relu: [0, inf], relu6: [0, 6]; NaN
  // stays NaN; +-inf bounds clamp nothing).
  void (*fma_taps)(const float* base, int64_t base_step, const int64_t* off, const float* w, int64_t taps, float bias,
                   float lo, float hi, float* out, int64_t out_step, int64_t n, int64_t rows);
  // even[j] = in[2j], odd[j] = in[2j + 1] for j < n.
  void (*deinterleave2)(const float* in, float* even, float* odd, int64_t n);
  // A 3x3, undilated depthwise convolution of 16 planes held channels-last (Note [Depthwise in
  // channel blocks]); nullptr where the ISA has no such kernel.
  void (*depthwise3x3_block16)(const WindowGeom& g, const DepthwiseBlockF32& b);
  // The same for 5x5 windows (w: [25][16]); nullptr where the ISA has none.
  void (*depthwise5x5_block16)(const WindowGeom& g, const DepthwiseBlockF32& b) = nullptr;
  // Whether those kernels apply DepthwiseBlockF32::hardswish (AVX2's and AVX-512's do).
  bool block_hardswish = false;
  // `rows` rows of `width` floats at dst (contiguous), row r = `lo` zeros, then src[r * src_step]
  // .. + n, then zeros to the width (lo + n <= width): a zero-padded copy of input rows, as the
  // direct convolution's X' holds them.
  void (*pad_rows)(const float* src, int64_t src_step, float* dst, int64_t rows, int64_t lo, int64_t n,
                   int64_t width) = nullptr;
  // Note [3x3 windows read in place]: one plane's 3x3, undilated, stride-2 windows, any padding up
  // to 2, read from the plane itself (x: [h, w], y: [ho, wo]) without a phased copy. depthwise:
  // clamp(bias + sum over taps of w[t] * tap, lo, hi) as fma_taps; max: as max_taps. nullptr
  // where the ISA has none.
  void (*depthwise3x3_s2_plane)(const WindowGeom& g, const float* x, const float* w, float bias, float lo, float hi,
                                float* y) = nullptr;
  void (*max3x3_s2_plane)(const WindowGeom& g, const float* x, float* y) = nullptr;
};
// Whether depthwise3x3_s2_plane / max3x3_s2_plane take geometry g (outputs at most
// kMaxInPlaceBlocks vectors of 16 wide).
constexpr int64_t kMaxInPlaceBlocks = 64;
bool window3x3_in_place(const WindowGeom& g);
WindowKernelsF32 window_kernels_f32_scalar();
WindowKernelsF32 window_kernels_f32_avx2();
WindowKernelsF32 window_kernels_f32_avx512();
WindowKernelsF32 window_kernels_f32(Isa isa);

// One plane's window geometry: input [h, w], output [ho, wo], kernel [kh, kw], stride, begin
// padding (the end padding is implied by ho, wo) and dilation.
struct WindowGeom {
  int64_t h = 1, w = 1, ho = 1, wo = 1, kh = 1, kw = 1;
  int64_t sh = 1, sw = 1, pt = 0, pl = 0, dh = 1, dw = 1;
};

// Note [Depthwise in channel blocks]
// A plane at a time, a depthwise convolution pays for every plane: its padded copy, its row calls,
// and a masked vector per row of a narrow plane (a 7x7 output fills 7 of 16 lanes). Held
// channels-last instead, 16 channels are one vector: each output pixel is 9 full-width
// multiply-adds whatever the plane's width or stride, as in ONNX Runtime's NCHWc layout. The
// activations stay NCHW: the kernel transposes the 16 input planes into a zero-padded
// [rows][columns][16] scratch (16x16 blocks of pixels x channels, in registers), computes 16 output
// pixels of 16 channels at a time and transposes them back into the 16 output planes. The two
// transposes cost about as many shuffles as the window costs multiply-adds, so narrow planes and
// strides gain the most: one thread, cache-hot, through conv2d, MobileNetV2's 7x7 layers 89 -> 28
// us, its 14x14 stride-2 layer 82 -> 21 us (bench/RESULTS.md). Large planes gain little hot and
// lose in an engine (conv_depthwise.cc keeps them on the row kernels). AVX2 holds a block's 16
// channels in two vectors and transposes 8 x 8 (window_f32_avx2.cc). Both have 5x5 windows too.
struct DepthwiseBlockF32 {
  const float* x = nullptr;  // the block's first input plane; channel c's at x + c * x_plane, [h, w]
  float* y = nullptr;        // the block's first output plane; channel c's at y + c * y_plane, [ho, wo]
  int64_t x_plane = 0, y_plane = 0;
  int64_t channels = 16;         // 1..16: planes past it are neither read nor written
  const float* w = nullptr;      // [taps][16]: tap t (row-major) of the 16 channels, 0 past `channels`
  const float* bias = nullptr;   // [16]
  float lo = 0, hi = 0;          // the clamp, as in fma_taps
  bool hardswish = false;        // hardswish (x * clamp(x + 3, 0, 6) / 6) instead of the clamp
  float* buf = nullptr;          // scratch of depthwise_block_floats(g) floats, 64-byte aligned
};
// Scratch floats: the padded rows and columns the windows read, 16 channels each.
int64_t depthwise_block_floats(const WindowGeom& g);

// Note [Windows over a phased plane]
// Every window of a plane is read from a private copy of it that holds all rows and columns any
// window touches, padding (and a ceil_mode overhang) filled with the op's identity (-inf for max,
// 0 for sums); so the kernels never test bounds. Each row of the copy is split into `sw` phases
// (phase p holds padded columns p, p + sw, p + 2 sw, ...): the taps at column offset o of the
// outputs ow, ow + 1, ... are then consecutive elements of phase o % sw, and every stride reads
// contiguous vectors. Output row oh reads row(oh) + offsets()[t] + ow for tap t (row-major (r, s)).
// Padding cells are written once; load() overwrites only the input's cells.
// Note [A phased plane kept per thread]: construction fills the whole copy with the padding
// value, and each parallel chunk of planes constructs one (with chunks taken from a queue, eight
// per thread: Note [Loops taken, not dealt] in src/core/thread_pool.cc). A destroyed plane's
// buffer is kept by its thread, and the next plane of the same geometry and padding value takes it
// without the fill: loads never touch the padding cells, so they still hold it.
class PhasedPlane {
 public:
  PhasedPlane(const WindowGeom& g, float pad_value);
  ~PhasedPlane();
  PhasedPlane(const PhasedPlane&) = delete;
  PhasedPlane& operator=(const PhasedPlane&) = delete;
  void load(const float* x, const WindowKernelsF32& k);  // x: contiguous [h, w]
  const float* row(int64_t oh) const { return buf_.data() + oh * g_.sh * row_stride_; }
  int64_t row_step() const { return g_.sh * row_stride_; }  // from output row oh to oh + 1
  const std::vector<int64_t>& offsets() const { return offsets_; }

 private:
  WindowGeom g_;
  float pad_ = 0;
  int64_t rows_ = 0, row_stride_ = 0, phase_len_ = 0;
  std::vector<float> buf_;
  std::vector<int64_t> offsets_;
};

}  // namespace kiln::kernels::cpu
