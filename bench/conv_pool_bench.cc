// Pooling and depthwise-convolution layers of ResNet and MobileNetV2 through kiln's public ops
// (dispatch and output allocation included, as a runtime sees them), batch 1 and 8, 1 and 2
// threads. bench/conv_pool_vs_ort.py times the same layers in ONNX Runtime. Run with
//   ./build/bench/kiln_bench_conv_pool --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;

void set_threads(benchmark::State& state, int arg_index) {
  kiln::set_num_threads(static_cast<int>(state.range(arg_index)));
}

void bytes(benchmark::State& state, const Tensor& x, const Tensor& y) {
  state.SetBytesProcessed(state.iterations() * (x.numel() + y.numel()) * 4);
}

// ResNet stem: 3x3 stride 2 pad 1 on [N, 64, 112, 112].
void BM_max_pool_3x3s2(benchmark::State& state) {
  set_threads(state, 1);
  Tensor x = kiln::randn({state.range(0), 64, 112, 112});
  kiln::Pool2dOptions o{{3, 3}, {2, 2}, {1, 1, 1, 1}};
  Tensor y = kiln::max_pool2d(x, o);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::max_pool2d(x, o).data_ptr());
  bytes(state, x, y);
}
BENCHMARK(BM_max_pool_3x3s2)->ArgsProduct({{1, 8}, {1, 2}})->ArgNames({"n", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();

// 2x2 stride 2 on [N, 64, 56, 56] (VGG-style downsampling).
void BM_max_pool_2x2s2(benchmark::State& state) {
  set_threads(state, 1);
  Tensor x = kiln::randn({state.range(0), 64, 56, 56});
  kiln::Pool2dOptions o{{2, 2}, {2, 2}};
  Tensor y = kiln::max_pool2d(x, o);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::max_pool2d(x, o).data_ptr());
  bytes(state, x, y);
}
BENCHMARK(BM_max_pool_2x2s2)->ArgsProduct({{1, 8}, {1, 2}})->ArgNames({"n", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();

void BM_avg_pool_2x2s2(benchmark::State& state) {
  set_threads(state, 1);
  Tensor x = kiln::randn({state.range(0), 64, 56, 56});
  kiln::Pool2dOptions o{{2, 2}, {2, 2}};
  Tensor y = kiln::avg_pool2d(x, o);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::avg_pool2d(x, o).data_ptr());
  bytes(state, x, y);
}
BENCHMARK(BM_avg_pool_2x2s2)->ArgsProduct({{1, 8}, {1, 2}})->ArgNames({"n", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();

// ResNet head: global average pool of [N, 512, 7, 7].
void BM_global_avg_pool(benchmark::State& state) {
  set_threads(state, 1);
  Tensor x = kiln::randn({state.range(0), 512, 7, 7});
  Tensor y = kiln::global_avg_pool(x);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::global_avg_pool(x).data_ptr());
  bytes(state, x, y);
}
BENCHMARK(BM_global_avg_pool)->ArgsProduct({{1, 8}, {1, 2}})->ArgNames({"n", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();

// MobileNetV2 depthwise 3x3 pad 1 with bias: [N, C, H, W] with stride s (args: n, c, hw, stride).
void BM_depthwise_3x3(benchmark::State& state) {
  set_threads(state, 4);
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2), s = state.range(3);
  Tensor x = kiln::randn({n, c, hw, hw}), w = kiln::randn({c, 1, 3, 3}), b = kiln::randn({c});
  kiln::Conv2dOptions o;
  o.stride = {s, s};
  o.padding = {1, 1, 1, 1};
  o.groups = c;
  Tensor y = kiln::conv2d(x, w, b, o);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, w, b, o).data_ptr());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 9 * static_cast<double>(y.numel()) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_depthwise_3x3)
    ->ArgsProduct({{1, 8}, {32}, {112}, {1}, {1, 2}})
    ->ArgsProduct({{1, 8}, {144}, {56}, {2}, {1, 2}})
    // the rest of MobileNetV2's depthwise layers (planes up to 28x28 take the channel blocks)
    ->ArgsProduct({{1}, {96}, {112}, {2}, {1, 2}})
    ->ArgsProduct({{1}, {144}, {56}, {1}, {1, 2}})
    ->ArgsProduct({{1}, {192}, {28}, {1, 2}, {1, 2}})
    ->ArgsProduct({{1}, {384, 576}, {14}, {1}, {1, 2}})
    ->ArgsProduct({{1}, {576}, {14}, {2}, {1, 2}})
    ->ArgsProduct({{1}, {960}, {7}, {1}, {1, 2}})
    ->ArgNames({"n", "c", "hw", "stride", "threads"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

// MobileNetV3-Small's depthwise 5x5 pad 2 layers with bias (AVX2: the 5x5 channel blocks).
void BM_depthwise_5x5(benchmark::State& state) {
  set_threads(state, 4);
  const int64_t n = state.range(0), c = state.range(1), hw = state.range(2), s = state.range(3);
  Tensor x = kiln::randn({n, c, hw, hw}), w = kiln::randn({c, 1, 5, 5}), b = kiln::randn({c});
  kiln::Conv2dOptions o;
  o.stride = {s, s};
  o.padding = {2, 2, 2, 2};
  o.groups = c;
  Tensor y = kiln::conv2d(x, w, b, o);
  for (auto _ : state) benchmark::DoNotOptimize(kiln::conv2d(x, w, b, o).data_ptr());
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * 25 * static_cast<double>(y.numel()) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_depthwise_5x5)
    ->ArgsProduct({{1}, {96, 288}, {14}, {2}, {1, 2}})
    ->ArgsProduct({{1, 8}, {120, 240, 576}, {7}, {1}, {1, 2}})
    ->ArgNames({"n", "c", "hw", "stride", "threads"})
    ->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
