// ResNet-50's convolution shapes under every convolution kernel kiln has: NCHW im2col + GEMM
// (kernels/cpu/conv.h) with filters packed per call and packed once (the engines' "prepacked"
// tactic), the NCHW direct convolution with filters packed once (the "direct" tactic, Note [Direct
// convolution]; also forced to its column or pixel tiling, Note [Pixels as rows]), NHWC (row-blocked im2col or none + GEMM with the weight packed once,
// kernels/cpu/conv_nhwc.h) and channel-blocked NCHWc (kernels/cpu/conv_nchwc.h: the layout
// pass's regions; a stem reads its NCHW input as it is), batch 1 and 8, 1 and 2 threads, on the raw kernels (no dispatch), so
// the numbers say which kernel and layout a compiler should pick per layer. GFLOPS counts 2 * MACs.
//   ./build/bench/kiln_bench_conv_layout --benchmark_counters_tabular=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/conv_nchwc.h"
#include "kernels/cpu/conv_nhwc.h"
#include "kiln/core/tensor.h"
#include "kiln/core/thread_pool.h"

namespace {

using kiln::kernels::cpu::Conv2dParams;

std::vector<float> random_floats(int64_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(gen);
  return v;
}

// Args: batch, channels in, spatial size, channels out, kernel, stride, threads.
Conv2dParams params(const benchmark::State& s) {
  Conv2dParams p;
  p.n = s.range(0), p.c = s.range(1), p.h = p.w = s.range(2), p.k = s.range(3), p.r = p.s = s.range(4);
  p.stride_h = p.stride_w = s.range(5);
  p.pad_top = p.pad_left = p.r / 2;
  p.ho = (p.h + 2 * p.pad_top - p.r) / p.stride_h + 1;
  p.wo = (p.w + 2 * p.pad_left - p.s) / p.stride_w + 1;
  return p;
}

enum class Kernel {
  im2col,
  im2col_prepacked,
  direct_prepacked,
  direct_columns,
  direct_pixels,
  nhwc,
  nchwc,
  nchwc_panels3,
  nchwc_panels4,
};

template <Kernel K>
void BM_conv(benchmark::State& state) {
  namespace cpu = kiln::kernels::cpu;
  kiln::set_num_threads(static_cast<int>(state.range(6)));
  Conv2dParams p = params(state);
  // The blocked kernel with its output blocks in panels of 3 or 4 (Note [Panels as tactics]).
  constexpr bool blocked = K == Kernel::nchwc || K == Kernel::nchwc_panels3 || K == Kernel::nchwc_panels4;
  p.nchwc_panel_blocks = K == Kernel::nchwc_panels3 ? 3 : K == Kernel::nchwc_panels4 ? 4 : 0;
  std::vector<float> w = random_floats(p.k * p.c * p.r * p.s, 2), bias = random_floats(p.k, 3);
  // Activations and output from kiln's allocator, as an engine's arena holds them (64-byte aligned,
  // 2 MiB pages from 1 MiB up): in std::vector's 4 KiB pages a memory-bound layer ran slower (16 ->
  // 96 1x1 at 112 x 112, batch 8, column tiles, 2 threads: 4.15-4.21 ms against 2.81-3.09).
  const std::vector<float> x_init = random_floats(p.n * p.c * p.h * p.w, 1);
  kiln::Tensor x_t = kiln::empty({p.n * p.c * p.h * p.w}), y_t = kiln::zeros({p.n * p.k * p.ho * p.wo});
  std::copy(x_init.begin(), x_init.end(), x_t.data<float>());
  float* x = x_t.data<float>();
  float* y = y_t.data<float>();
  std::vector<float> packed;
  if constexpr (K == Kernel::im2col_prepacked) {
    packed.resize(cpu::conv2d_packed_weight_f32_floats(p));
    cpu::pack_conv2d_weight_f32(p, w.data(), packed.data());
  }
  // The direct kernel with its per-layer tiling choice, or forced to one (Note [Pixels as rows]).
  constexpr bool direct = K == Kernel::direct_prepacked || K == Kernel::direct_columns || K == Kernel::direct_pixels;
  const cpu::DirectConvTilingOverride forced(K == Kernel::direct_columns  ? cpu::DirectConvTiling::columns
                                             : K == Kernel::direct_pixels ? cpu::DirectConvTiling::pixels
                                                                          : cpu::DirectConvTiling::automatic);
  if constexpr (direct) {
    if (!cpu::conv2d_direct_supported(p)) {
      state.SkipWithError("no direct convolution kernel for this ISA");
      return;
    }
    packed.resize(cpu::conv2d_direct_packed_weight_f32_floats(p));
    cpu::pack_conv2d_direct_weight_f32(p, w.data(), packed.data());
  }
  // Blocked: x converted once (a region's layers read and write blocked tensors), filters packed.
  const cpu::NchwcInput input = p.c < 16 ? cpu::NchwcInput::plain : cpu::NchwcInput::blocked;
  kiln::Tensor xb_t;
  if constexpr (blocked) {
    if (!cpu::conv2d_nchwc_supported(p, input)) {
      state.SkipWithError("not blockable (channels)");
      return;
    }
    packed.resize(cpu::conv2d_nchwc_packed_weight_f32_floats(p));
    cpu::pack_conv2d_nchwc_weight_f32(p, w.data(), packed.data());
    // Blocked tensors hold whole blocks of 16 channels.
    y_t = kiln::zeros({p.n * ((p.k + 15) / 16 * 16) * p.ho * p.wo});
    y = y_t.data<float>();
    if (input == cpu::NchwcInput::blocked) {
      xb_t = kiln::empty({p.n * ((p.c + 15) / 16 * 16) * p.h * p.w});
      cpu::nchw_to_nchwc_f32(p.n, p.c, p.h * p.w, x, xb_t.data<float>());
      x = xb_t.data<float>();
    }
  }
  for (auto _ : state) {
    if constexpr (K == Kernel::nhwc) cpu::conv2d_nhwc_f32(p, x, w.data(), bias.data(), y);
    else if constexpr (blocked) cpu::conv2d_nchwc_f32(p, x, packed.data(), bias.data(), y, {}, input);
    else if constexpr (K == Kernel::im2col) cpu::conv2d_nchw_f32(p, x, w.data(), bias.data(), y);
    else if constexpr (K == Kernel::im2col_prepacked)
      cpu::conv2d_nchw_f32_prepacked(p, x, packed.data(), bias.data(), y);
    else cpu::conv2d_direct_f32(p, x, nullptr, packed.data(), bias.data(), y);  // direct
    benchmark::DoNotOptimize(y);
  }
  if constexpr (direct) state.SetLabel(cpu::conv2d_direct_pixel_rows(p) ? "pixel tiles" : "column tiles");
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(p.n * p.k * p.ho * p.wo * p.c * p.r * p.s),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// Note [Residual in place] (conv_nchwc.cc): a blocked 1x1 expansion with a residual added before
// the ReLU, the residual in a buffer of its own or the output's own buffer (as the memory planner
// places it when the residual dies at the layer). Before each run every buffer is pushed out of
// the caches (256 MiB written, untimed), as the layers between do in an engine.
//   ./build/bench/kiln_bench_conv_layout --benchmark_filter=BM_conv_nchwc_residual
template <bool InPlace>
void BM_conv_nchwc_residual(benchmark::State& state) {
  namespace cpu = kiln::kernels::cpu;
  kiln::set_num_threads(static_cast<int>(state.range(6)));
  const Conv2dParams p = params(state);
  const int64_t xn = p.n * ((p.c + 15) / 16 * 16) * p.h * p.w, yn = p.n * ((p.k + 15) / 16 * 16) * p.ho * p.wo;
  std::vector<float> w = random_floats(p.k * p.c * p.r * p.s, 2), bias = random_floats(p.k, 3);
  std::vector<float> packed(cpu::conv2d_nchwc_packed_weight_f32_floats(p));
  cpu::pack_conv2d_nchwc_weight_f32(p, w.data(), packed.data());
  kiln::Tensor x = kiln::empty({xn}), res = kiln::empty({yn}), y = kiln::empty({yn});
  kiln::Tensor flush = kiln::empty({int64_t{64} << 20});
  const std::vector<float> x_init = random_floats(xn, 1), res_init = random_floats(yn, 4);
  std::copy(x_init.begin(), x_init.end(), x.data<float>());
  std::copy(res_init.begin(), res_init.end(), res.data<float>());
  cpu::Conv2dEpilogue ep;
  ep.activation = kiln::kernels::cpu::GemmActivation::relu;
  ep.residual_before_activation = true;
  ep.residual = InPlace ? y.data<float>() : res.data<float>();
  for (auto _ : state) {
    state.PauseTiming();
    if (InPlace) std::copy(res.data<float>(), res.data<float>() + yn, y.data<float>());
    std::fill(flush.data<float>(), flush.data<float>() + flush.numel(), 1.0f);
    state.ResumeTiming();
    cpu::conv2d_nchwc_f32(p, x.data<float>(), packed.data(), bias.data(), y.data<float>(), ep);
    benchmark::DoNotOptimize(y.data<float>());
  }
  state.counters["GFLOPS"] = benchmark::Counter(2.0 * static_cast<double>(p.n * p.k * p.ho * p.wo * p.c * p.r * p.s),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void residual_shapes(benchmark::internal::Benchmark* b) {
  // ResNet-50's 1x1 expansions, each closing a bottleneck block with its residual.
  const std::vector<std::vector<int64_t>> layers = {{64, 56, 256}, {128, 28, 512}, {256, 14, 1024}, {512, 7, 2048}};
  for (int64_t n : {1, 8})
    for (const auto& l : layers)
      for (int64_t t : {1, 2}) b->Args({n, l[0], l[1], l[2], 1, 1, t});
  b->ArgNames({"n", "c", "hw", "k", "r", "stride", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(20);
}
BENCHMARK(BM_conv_nchwc_residual<false>)->Name("BM_conv_nchwc_residual_apart")->Apply(residual_shapes);
BENCHMARK(BM_conv_nchwc_residual<true>)->Name("BM_conv_nchwc_residual_in_place")->Apply(residual_shapes);

void shapes(benchmark::internal::Benchmark* b) {
  // {C, HW, K, kernel, stride}: ResNet-50's stem, its 3x3s per stage, 1x1 expand/reduce, a stride-2
  // 3x3 and a stride-2 1x1 projection.
  const std::vector<std::vector<int64_t>> layers = {{3, 224, 64, 7, 2},   {64, 56, 64, 3, 1},  {64, 56, 256, 1, 1},
                                                    {256, 56, 64, 1, 1},  {128, 28, 128, 3, 1}, {128, 56, 128, 3, 2},
                                                    {256, 14, 256, 3, 1}, {256, 14, 1024, 1, 1}, {1024, 14, 256, 1, 1},
                                                    {512, 7, 512, 3, 1},  {512, 7, 2048, 1, 1}, {2048, 7, 512, 1, 1},
                                                    {256, 56, 512, 1, 2}, {512, 28, 128, 1, 1},
                                                    // MobileNetV2: its stem, 1x1 expansions over few channels
                                                    // and projections (to 16 and 24 channels, and to
                                                    // multiples of 32)
                                                    {3, 224, 32, 3, 2},   {16, 112, 96, 1, 1},  {24, 56, 144, 1, 1},
                                                    {160, 7, 960, 1, 1},  {960, 7, 160, 1, 1},  {960, 7, 320, 1, 1},
                                                    {144, 56, 32, 1, 1},  {32, 112, 16, 1, 1},  {96, 56, 24, 1, 1},
                                                    {64, 14, 384, 1, 1},  {384, 14, 64, 1, 1}};
  for (int64_t n : {1, 8})
    for (const auto& l : layers)
      for (int64_t t : {1, 2}) b->Args({n, l[0], l[1], l[2], l[3], l[4], t});
  b->ArgNames({"n", "c", "hw", "k", "r", "stride", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_conv<Kernel::im2col>)->Name("BM_conv_nchw")->Apply(shapes);
BENCHMARK(BM_conv<Kernel::im2col_prepacked>)->Name("BM_conv_nchw_prepacked")->Apply(shapes);
BENCHMARK(BM_conv<Kernel::direct_prepacked>)->Name("BM_conv_direct_prepacked")->Apply(shapes);
BENCHMARK(BM_conv<Kernel::direct_columns>)->Name("BM_conv_direct_columns")->Apply(shapes);
BENCHMARK(BM_conv<Kernel::direct_pixels>)->Name("BM_conv_direct_pixels")->Apply(shapes);
BENCHMARK(BM_conv<Kernel::nhwc>)->Name("BM_conv_nhwc")->Apply(shapes);
BENCHMARK(BM_conv<Kernel::nchwc>)->Name("BM_conv_nchwc")->Apply(shapes);

// Note [Panels as tactics] (conv_nchwc.cc): blocked layers whose K is not a multiple of 64, their
// output blocks in panels of 3 or of 4 (a narrower last panel either way).
//   ./build/bench/kiln_bench_conv_layout --benchmark_filter=BM_conv_nchwc_panels
void panel_shapes(benchmark::internal::Benchmark* b) {
  // {C, HW, K}, 1x1: MobileNetV2's projections to 96 and 160 channels and its expansions to 144;
  // 16 -> 96 at 112 x 112; K = 160 at 28 x 28.
  const std::vector<std::vector<int64_t>> layers = {{576, 14, 96}, {384, 14, 96}, {960, 7, 160}, {24, 56, 144},
                                                    {256, 56, 144}, {16, 112, 96}, {256, 28, 160}};
  for (int64_t n : {1, 8})
    for (const auto& l : layers)
      for (int64_t t : {1, 2}) b->Args({n, l[0], l[1], l[2], 1, 1, t});
  b->ArgNames({"n", "c", "hw", "k", "r", "stride", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}
BENCHMARK(BM_conv<Kernel::nchwc_panels3>)->Name("BM_conv_nchwc_panels3")->Apply(panel_shapes);
BENCHMARK(BM_conv<Kernel::nchwc_panels4>)->Name("BM_conv_nchwc_panels4")->Apply(panel_shapes);

}  // namespace

BENCHMARK_MAIN();
