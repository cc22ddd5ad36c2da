// oneDNN's dnnl_sgemm (row-major) on the same shapes as kiln's BM_sgemm (bench/gemm_shapes.h). Its
// own executable, so oneDNN's OpenMP threads never share a process with kiln's pool; threads set
// with omp_set_num_threads (Debian's libdnnl uses the OpenMP runtime).
#include <benchmark/benchmark.h>
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>

#include "gemm_shapes.h"

namespace {

void BM_sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  omp_set_num_threads(static_cast<int>(state.range(3)));
  std::vector<float> a = kiln_bench::random_floats(m * k, 1), b = kiln_bench::random_floats(k * n, 2), c(m * n);
  for (auto _ : state) {
    if (dnnl_sgemm('N', 'N', m, n, k, 1.0f, a.data(), k, b.data(), n, 0.0f, c.data(), n) != dnnl_success) {
      state.SkipWithError("dnnl_sgemm failed");
      break;
    }
    benchmark::DoNotOptimize(c.data());
  }
  kiln_bench::set_gemm_counters(state);
}
BENCHMARK(BM_sgemm)->Apply(kiln_bench::gemm_shapes);

}  // namespace

BENCHMARK_MAIN();
