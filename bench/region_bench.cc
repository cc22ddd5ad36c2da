// What a parallel region costs on the pool (Note [The caller's frames fetched at once] in
// src/core/thread_pool.cc): the median over 21 rounds of the mean time of a region, for an empty
// loop over 2 units, and for a kernel-like loop over 2 and 16 units whose body reads its
// arguments through a struct on the caller's stack, as kiln's kernels do. Run it beside
// kiln_bench_core_distance: the cost follows how far apart the two CPUs are.
//
//   ./build/bench/kiln_bench_region [regions, default 100000]
//   LD_LIBRARY_PATH=/other/build ./build/bench/kiln_bench_region   (another build's pool)
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "kiln/core/thread_pool.h"

namespace {

struct Args {
  const float* in;
  float* out;
  int64_t values[14];
};

__attribute__((noinline)) void kernel(const Args& a, int64_t units) {
  const int64_t stride = a.values[3], k = a.values[7];
  kiln::parallel_for(0, units, 1, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) a.out[u * 16] = a.in[u * 16] * static_cast<float>(stride + k);
  });
}

}  // namespace

int main(int argc, char** argv) {
  const long regions = argc > 1 ? std::atol(argv[1]) : 100000;
  if (regions < 21) {
    std::fprintf(stderr, "usage: %s [regions >= 21]\n", argv[0]);
    return 2;
  }
  kiln::set_num_threads(2);
  std::vector<float> in(4096, 1.0f), out(4096);
  const long per_round = regions / 21;
  const char* names[] = {"empty, 2 units", "kernel, 2 units", "kernel, 16 units"};
  for (int which = 0; which < 3; ++which) {
    std::vector<double> us;
    for (int round = 0; round < 21; ++round) {
      const auto t0 = std::chrono::steady_clock::now();
      for (long i = 0; i < per_round; ++i) {
        if (which == 0) {
          kiln::parallel_for(0, 2, 1, [](int64_t, int64_t) {});
        } else {
          Args a{in.data(), out.data(), {}};
          a.values[3] = i;
          a.values[7] = 2;
          kernel(a, which == 1 ? 2 : 16);
        }
      }
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
                   static_cast<double>(per_round));
    }
    std::sort(us.begin(), us.end());
    std::printf("%-17s median %.3f us a region, min %.3f\n", names[which], us[10], us[0]);
  }
  return 0;
}
