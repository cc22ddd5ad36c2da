// kiln's CUDA add on large f32 vectors, timed as a user pays for it: each round launches `reps`
// adds (dispatch, output allocation from the caching allocator, launch) and then copies one
// element back, which waits for the stream. bench/torch_add.py times PyTorch the same way.
// Needs a GPU: `kiln_bench_cuda_add` (built when KILN_CUDA is on). Results: bench/RESULTS.md.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "kiln/kiln.h"

int main() {
  using namespace kiln;
  if (!cuda_available()) {
    std::printf("no CUDA device\n");
    return 1;
  }
  const Device gpu = Device::cuda(0);
  for (int64_t n : {int64_t{1} << 16, int64_t{1} << 20, int64_t{1} << 24, int64_t{1} << 26}) {
    Tensor a = rand({n}).to(gpu), b = rand({n}).to(gpu);
    Tensor c = add(a, b);
    (void)c.slice(0, 0, 1).cpu();
    constexpr int kReps = 200;
    double best_us = 1e30;
    for (int round = 0; round < 5; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kReps; ++i) c = add(a, b);
      (void)c.slice(0, 0, 1).cpu();
      const std::chrono::duration<double, std::micro> t = std::chrono::steady_clock::now() - t0;
      best_us = std::min(best_us, t.count() / kReps);
    }
    std::printf("kiln add n=%lld  %.2f us  %.1f GB/s\n", static_cast<long long>(n), best_us, 12.0 * n / best_us / 1e3);
  }
  return 0;
}
