// cumsum_f32: the parallel blocked scan driver and the scalar block kernels.
#include "kernels/cpu/scan.h"

#include <algorithm>
#include <vector>

#include "kiln/core/thread_pool.h"

namespace kiln::kernels::cpu {

// Note [Blocked scan]
// Accuracy: a running f32 sum of 64M values in [0, 1) stalls once the sum outgrows the values'
// precision (~50% off). The block kernels widen each vector to float64, take its prefix in registers
// and add the float64 carry, so every output is the f32 rounding of a float64 running sum (as the
// serial loop and PyTorch give), even where the sum cancels to near zero.
// Parallelism: the array is walked in super-blocks of threads x kTile elements. Per super-block,
// each thread first sums its tile (f64), the caller turns the sums into carries, then each thread
// scans its tile from its carry. The tile (kTile floats = 512 KB) is still in that core's L2 for
// the second pass, so memory sees one read and one write per element, as a copy does.

namespace {

constexpr int64_t kTile = int64_t{1} << 17;
constexpr int64_t kSerial = int64_t{1} << 16;

double f32_scan_block__scalar(const float* x, float* out, int64_t n, double carry) {
  for (int64_t i = 0; i < n; ++i) {
    carry += static_cast<double>(x[i]);
    out[i] = static_cast<float>(carry);
  }
  return carry;
}

double f32_sum_block__scalar(const float* x, int64_t n) {
  double s[4] = {0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (int j = 0; j < 4; ++j) s[j] += static_cast<double>(x[i + j]);
  for (; i < n; ++i) s[0] += static_cast<double>(x[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

ScanKernelsF32 kernels_for(Isa isa) {
  switch (isa) {
    case Isa::avx512: return scan_kernels_f32_avx512();
    case Isa::avx2: return scan_kernels_f32_avx2();
    case Isa::scalar: break;
  }
  return scan_kernels_f32_scalar();
}

}  // namespace

ScanKernelsF32 scan_kernels_f32_scalar() { return {f32_scan_block__scalar, f32_sum_block__scalar}; }

void cumsum_f32(const float* x, float* out, int64_t n) {
  if (n <= 0) return;
  const ScanKernelsF32 k = kernels_for(active_isa());
  int threads = in_parallel_region() ? 1 : get_num_threads();
  if (n < kSerial || threads <= 1) {
    k.scan(x, out, n, 0.0);
    return;
  }
  const int64_t super = kTile * threads;
  std::vector<double> carry(static_cast<size_t>(threads) + 1);
  double base = 0.0;
  for (int64_t s0 = 0; s0 < n; s0 += super) {
    const int64_t len = std::min(super, n - s0);
    const int64_t tile = (len + threads - 1) / threads;
    parallel_run(threads, [&](int t, int) {
      const int64_t b0 = std::min(len, t * tile), b1 = std::min(len, b0 + tile);
      carry[static_cast<size_t>(t) + 1] = b1 > b0 ? k.sum(x + s0 + b0, b1 - b0) : 0.0;
    });
    carry[0] = base;
    for (int t = 0; t < threads; ++t) carry[static_cast<size_t>(t) + 1] += carry[static_cast<size_t>(t)];
    parallel_run(threads, [&](int t, int) {
      const int64_t b0 = std::min(len, t * tile), b1 = std::min(len, b0 + tile);
      if (b1 > b0) k.scan(x + s0 + b0, out + s0 + b0, b1 - b0, carry[static_cast<size_t>(t)]);
    });
    base = carry[static_cast<size_t>(threads)];
  }
}

}  // namespace kiln::kernels::cpu
