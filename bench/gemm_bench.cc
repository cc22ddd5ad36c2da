// kiln's f32 GEMM (kernels/cpu/gemm.h) on the shared SGEMM shapes, and cumsum against a copy of the
// same bytes. Compare with OpenBLAS through bench/run_gemm_vs_openblas.sh (separate processes).
#include <benchmark/benchmark.h>

#include <cstring>

#include "gemm_shapes.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/scan.h"
#include "kiln/core/thread_pool.h"

namespace {

void BM_sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), n = state.range(1), k = state.range(2);
  kiln::set_num_threads(static_cast<int>(state.range(3)));
  std::vector<float> a = kiln_bench::random_floats(m * k, 1), b = kiln_bench::random_floats(k * n, 2), c(m * n);
  for (auto _ : state) {
    kiln::kernels::cpu::gemm_f32(m, n, k, 1.0f, a.data(), k, 1, b.data(), n, 1, 0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  kiln_bench::set_gemm_counters(state);
}
BENCHMARK(BM_sgemm)->Apply(kiln_bench::gemm_shapes);

void BM_cumsum_f32(benchmark::State& state) {
  const int64_t n = state.range(0);
  kiln::set_num_threads(static_cast<int>(state.range(1)));
  std::vector<float> x = kiln_bench::random_floats(n, 3), y(static_cast<size_t>(n));
  for (auto _ : state) {
    kiln::kernels::cpu::cumsum_f32(x.data(), y.data(), n);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_cumsum_f32)->ArgsProduct({{int64_t{1} << 26}, {1, 2}})->ArgNames({"n", "threads"})->UseRealTime();

void BM_memcpy_f32(benchmark::State& state) {
  const int64_t n = state.range(0);
  std::vector<float> x = kiln_bench::random_floats(n, 3), y(static_cast<size_t>(n));
  for (auto _ : state) {
    std::memcpy(y.data(), x.data(), static_cast<size_t>(n) * sizeof(float));
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_memcpy_f32)->Arg(int64_t{1} << 26)->ArgName("n")->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
