// OpenBLAS cblas_sgemm on the same shapes as kiln's BM_sgemm (bench/gemm_shapes.h). Its own
// executable, so OpenBLAS's thread pool never shares a process with kiln's.
#include <benchmark/benchmark.h>
#include <cblas.h>

#include "gemm_shapes.h"

namespace {

void BM_sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  openblas_set_num_threads(static_cast<int>(state.range(3)));
  std::vector<float> a = kiln_bench::random_floats(m * k, 1), b = kiln_bench::random_floats(k * n, 2), c(m * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k), b.data(), static_cast<int>(n), 0.0f,
                c.data(), static_cast<int>(n));
    benchmark::DoNotOptimize(c.data());
  }
  kiln_bench::set_gemm_counters(state);
}
BENCHMARK(BM_sgemm)->Apply(kiln_bench::gemm_shapes);

}  // namespace

BENCHMARK_MAIN();
