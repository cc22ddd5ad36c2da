// The SGEMM shapes kiln's and the peers' GEMM benchmarks share (M, N, K), so their rows line up.
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

namespace kiln_bench {

inline void gemm_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {1, 2}) {
    for (int64_t s : {64, 128, 256, 512, 1024, 2048}) b->Args({s, s, s, threads});
    b->Args({1, 4096, 4096, threads});
    b->Args({8, 4096, 4096, threads});
    b->Args({128, 3072, 768, threads});  // 128 x 768 @ 768 x 3072
  }
  b->ArgNames({"m", "n", "k", "threads"})->UseRealTime();
}

inline std::vector<float> random_floats(int64_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(g);
  return v;
}

inline void set_gemm_counters(benchmark::State& state) {
  const double flops = 2.0 * static_cast<double>(state.range(0)) * static_cast<double>(state.range(1)) *
                       static_cast<double>(state.range(2));
  state.counters["GFLOPS"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace kiln_bench
