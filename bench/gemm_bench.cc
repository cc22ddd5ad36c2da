// kiln's f32 GEMM (kernels/cpu/gemm.h) on the shared SGEMM shapes, and cumsum against a copy of the
// same bytes. Compare with OpenBLAS through bench/run_gemm_vs_openblas.sh (separate processes).
#include <benchmark/benchmark.h>

#include <cstring>

#include "gemm_shapes.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_ukernel.h"
#include "kernels/cpu/isa.h"
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

// One direct-convolution column tile (gemm_ukernel.h) of the active ISA over K steps, operands in
// L1, finished with each epilogue the store applies (Note [A branch-free tile store]): what the
// store costs beside the K loop. Args: tile (0 / 1: the ISA's first or second column tile), K,
// epilogue (0 none: a partial K slice, 1 bias + relu, 2 bias + relu6, 3 bias + hardswish,
// 4 bias + residual after relu).
void BM_conv_tile_epilogue(benchmark::State& state) {
  using kiln::kernels::cpu::ConvTileEpilogueF32;
  const auto& kk = kiln::kernels::cpu::gemm_kernel_f32(kiln::kernels::cpu::active_isa());
  const auto& tile = kk.taps[state.range(0)];
  const int64_t k = state.range(1), variant = state.range(2), ldb = 64;
  if (tile.ukernel == nullptr || (variant == 3 && !kk.store_hardswish)) {
    state.SkipWithError("no such tile or epilogue on this ISA");
    return;
  }
  std::vector<float> a = kiln_bench::random_floats(tile.mr * k, 1), b = kiln_bench::random_floats(ldb * k + 64, 2);
  std::vector<float> bias = kiln_bench::random_floats(64, 3), res = kiln_bench::random_floats(tile.mr * ldb + 64, 4);
  std::vector<float> c(static_cast<size_t>(tile.mr * ldb + 64));
  const int64_t off = 0;
  ConvTileEpilogueF32 ep;
  ep.bias = bias.data();
  ep.act = variant == 2 ? ConvTileEpilogueF32::Act::relu6
           : variant == 3 ? ConvTileEpilogueF32::Act::hardswish
                          : ConvTileEpilogueF32::Act::relu;
  if (variant == 4) ep.residual = res.data(), ep.ldr = ldb;
  int i = 0;
  for (auto _ : state) {
    const int64_t shift = (i++ & 1) * tile.nr;  // two column tiles in turn
    tile.ukernel(1, &off, k, a.data(), b.data() + shift, ldb, c.data() + shift, ldb, tile.mr, tile.nr, false,
                 variant == 0 ? nullptr : &ep);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * tile.mr * tile.nr * k * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_conv_tile_epilogue)
    ->ArgsProduct({{0, 1}, {16, 32, 64, 256}, {0, 1, 2, 3, 4}})
    ->ArgNames({"tile", "k", "epilogue"});

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
