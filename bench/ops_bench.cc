// Benchmarks of the core ops on the reference-quality kernels of the core issue. They are the
// baseline the tuned kernels (issue #3) are measured against; run with
//   ./build/bench/kiln_bench_ops --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

void set_threads(benchmark::State& state, int arg_index) {
  kiln::set_num_threads(static_cast<int>(state.range(arg_index)));
}

void BM_add_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n}), b = kiln::randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_add_f32)->ArgsProduct({{1 << 10, 1 << 16, 1 << 22}, {1, 2}})->ArgNames({"n", "threads"});

void BM_add_broadcast_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n, n}), b = kiln::randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::add(a, b).data_ptr());
  state.SetBytesProcessed(state.iterations() * n * n * 8);
}
BENCHMARK(BM_add_broadcast_f32)->ArgsProduct({{256, 2048}, {1, 2}})->ArgNames({"n", "threads"});

void BM_exp_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::exp(a).data_ptr());
  state.SetItemsProcessed(state.iterations() * n);
}
BENCHMARK(BM_exp_f32)->ArgsProduct({{1 << 16, 1 << 22}, {1, 2}})->ArgNames({"n", "threads"});

void BM_sum_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::sum(a, {1}).data_ptr());
  state.SetBytesProcessed(state.iterations() * n * n * 4);
}
BENCHMARK(BM_sum_f32)->ArgsProduct({{256, 2048}, {1, 2}})->ArgNames({"n", "threads"});

void BM_softmax_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n, 1024});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::softmax(a, -1).data_ptr());
  state.SetBytesProcessed(state.iterations() * n * 1024 * 8);
}
BENCHMARK(BM_softmax_f32)->ArgsProduct({{64, 1024}, {1, 2}})->ArgNames({"rows", "threads"});

void BM_matmul_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n, n}), b = kiln::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::matmul(a, b).data_ptr());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * n * n) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_matmul_f32)->ArgsProduct({{64, 256, 1024}, {1, 2}})->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond);

// matmul_ (in place, O(k) extra memory per row panel) against the out-of-place product above;
// the in-place form should stay within ~0.8x of it.
void BM_matmul_inplace_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::randn({n, n}), b = kiln::randn({n, n});
  for (auto _ : state) benchmark::DoNotOptimize(a.matmul_(b).data_ptr());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(n * n * n) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_matmul_inplace_f32)->ArgsProduct({{256, 1024}, {1, 2}})->ArgNames({"n", "threads"})->Unit(benchmark::kMillisecond);

void BM_cumsum_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t n = state.range(0);
  Tensor a = kiln::rand({n});
  for (auto _ : state) benchmark::DoNotOptimize(kiln::cumsum(a, 0).data_ptr());
  state.SetBytesProcessed(state.iterations() * n * 8);
}
BENCHMARK(BM_cumsum_f32)->ArgsProduct({{1 << 20, 1 << 24}, {1, 2}})->ArgNames({"n", "threads"});

void BM_conv2d_3x3_f32(benchmark::State& state) {
  set_threads(state, 1);
  int64_t c = state.range(0), hw = 56 * 64 / c;
  Tensor x = kiln::randn({1, c, hw, hw}), w = kiln::randn({c, c, 3, 3});
  kiln::Conv2dOptions opt;
  opt.padding = {1, 1, 1, 1};
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, w, {}, opt).data_ptr());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(c * c * 9 * hw * hw) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_conv2d_3x3_f32)->ArgsProduct({{64, 256}, {1, 2}})->ArgNames({"c", "threads"})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
