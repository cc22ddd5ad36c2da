// Fused against unfused, one thread (issue #9's "fused kernels that pay"): GEMM + bias + activation
// (+ residual) as one fused_gemm op whose epilogue runs in the GEMM's tiles vs the separate ops;
// the same at kernel level (gemm_f32 with the tile epilogue hook vs gemm_f32 then one vectorized
// pass over C); conv2d + bias + residual + relu (ResNet layers) as fused_conv2d vs the ops; a
// 1M-element mul/add/relu chain as fused_elementwise vs the ops. Run the pairs interleaved:
//   kiln_bench_fused --benchmark_repetitions=5 --benchmark_enable_random_interleaving=true
//                    --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/vmath.h"
#include "kiln/kiln.h"

namespace {

using kiln::Tensor;
namespace cpu = kiln::kernels::cpu;

const char* act_name(int64_t a) { return a == 0 ? "relu" : "gelu"; }

// mode 0: the unfused ops; 1: fused_gemm. act 0 relu, 1 gelu; bias per column and a residual.
void BM_gemm_bias_act_residual(benchmark::State& state) {
  kiln::set_num_threads(1);
  const int64_t mode = state.range(0), act = state.range(1), m = state.range(2), n = state.range(3), k = state.range(4);
  Tensor a = kiln::randn({m, k}), b = kiln::randn({k, n}), bias = kiln::randn({n}), res = kiln::randn({m, n});
  for (auto _ : state) {
    Tensor y;
    if (mode == 1) {
      y = kiln::dispatch1(kiln::op("fused_gemm"), {a, b, bias, res},
                          {{"activation", std::string(act_name(act))}, {"residual_before_activation", false}});
    } else {
      Tensor t = kiln::add(kiln::matmul(a, b), bias);
      t = act == 0 ? kiln::relu(t) : kiln::gelu(t);
      y = kiln::add(t, res);
    }
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetLabel(std::string(mode ? "fused_gemm " : "unfused ops ") + act_name(act));
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}
BENCHMARK(BM_gemm_bias_act_residual)
    ->ArgsProduct({{0, 1}, {0, 1}, {128}, {512}, {512}})
    ->ArgsProduct({{0, 1}, {0, 1}, {128}, {3072}, {768}})
    ->ArgNames({"fused", "act", "m", "n", "k"})
    ->Unit(benchmark::kMillisecond);

// Kernel level, the same epilogue: mode 0 gemm_f32 then vmath's row epilogue as a second pass over
// C (what fused_gemm did before); mode 1 the epilogue in the GEMM's tiles. res: with a residual.
void BM_gemm_epilogue_hook(benchmark::State& state) {
  kiln::set_num_threads(1);
  const int64_t mode = state.range(0), act = state.range(1), m = state.range(2), n = state.range(3), k = state.range(4);
  const bool with_res = state.range(5) != 0;
  Tensor a = kiln::randn({m, k}), b = kiln::randn({k, n}), bias = kiln::randn({n}), res = kiln::randn({m, n});
  std::vector<float> c(static_cast<size_t>(m * n));
  cpu::GemmEpilogue ep;
  ep.bias_kind = cpu::GemmBias::per_col;
  ep.bias = bias.data<float>();
  ep.activation = act == 0 ? cpu::GemmActivation::relu : cpu::GemmActivation::gelu;
  ep.residual = with_res ? res.data<float>() : nullptr;
  ep.ldr = n;
  const cpu::VmathEpilogueF32 row =
      cpu::vmath_kernels_f32(cpu::active_isa()).epilogue[static_cast<int>(act == 0 ? cpu::VmathAct::relu : cpu::VmathAct::gelu)];
  for (auto _ : state) {
    if (mode == 1) {
      cpu::gemm_f32(m, n, k, 1.0f, a.data<float>(), k, 1, b.data<float>(), n, 1, 0.0f, c.data(), n, ep);
    } else {
      cpu::gemm_f32(m, n, k, 1.0f, a.data<float>(), k, 1, b.data<float>(), n, 1, 0.0f, c.data(), n);
      row(c.data(), n, m, n, nullptr, ep.bias, with_res ? ep.residual : nullptr, n, false);
    }
    benchmark::DoNotOptimize(c.data());
  }
  state.SetLabel(std::string(mode ? "tile hook " : "gemm + pass ") + act_name(act));
}
BENCHMARK(BM_gemm_epilogue_hook)
    ->ArgsProduct({{0, 1}, {0, 1}, {128}, {512}, {512}, {0, 1}})
    ->ArgsProduct({{0, 1}, {0, 1}, {128}, {3072}, {768}, {0, 1}})
    ->ArgNames({"hook", "act", "m", "n", "k", "res"})
    ->Unit(benchmark::kMillisecond);

// The row epilogue alone (bias per column, then the activation, in place) on 32 rows of 3072: a
// GEMM tile row block of BERT's 768 -> 3072 layer, in L2. act 0 relu, 1 gelu (erf form).
void BM_vmath_epilogue(benchmark::State& state) {
  const int64_t act = state.range(0), m = 32, n = 3072;
  Tensor x = kiln::randn({m, n}) * 2.0f, bias = kiln::randn({n});
  std::vector<float> y(static_cast<size_t>(m * n));
  const cpu::VmathEpilogueF32 row =
      cpu::vmath_kernels_f32(cpu::active_isa()).epilogue[static_cast<int>(act == 0 ? cpu::VmathAct::relu : cpu::VmathAct::gelu)];
  for (auto _ : state) {
    state.PauseTiming();
    std::copy_n(x.data<float>(), m * n, y.data());
    state.ResumeTiming();
    row(y.data(), n, m, n, nullptr, bias.data<float>(), nullptr, n, false);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * m * n);
  state.SetLabel(act_name(act));
}
BENCHMARK(BM_vmath_epilogue)->Arg(0)->Arg(1)->ArgNames({"act"});

// conv2d (batch 1, stride 1, 'same' padding) + bias + residual + relu: mode 0 the ops, 1 fused_conv2d.
void BM_conv_bias_residual_relu(benchmark::State& state) {
  kiln::set_num_threads(1);
  const int64_t mode = state.range(0), c = state.range(1), hw = state.range(2), kout = state.range(3), r = state.range(4);
  Tensor x = kiln::randn({1, c, hw, hw}), w = kiln::randn({kout, c, r, r}), bias = kiln::randn({kout});
  Tensor res = kiln::randn({1, kout, hw, hw});
  const int64_t p = r / 2;
  kiln::Conv2dOptions o;
  o.padding = {p, p, p, p};
  for (auto _ : state) {
    Tensor y;
    if (mode == 1)
      y = kiln::dispatch1(kiln::op("fused_conv2d"), {x, w, bias, res},
                          {{"padding", o.padding}, {"activation", std::string("relu")}});
    else
      y = kiln::relu(kiln::add(kiln::conv2d(x, w, bias, o), res));
    benchmark::DoNotOptimize(y.data_ptr());
  }
  state.SetLabel(mode ? "fused_conv2d" : "unfused ops");
}
BENCHMARK(BM_conv_bias_residual_relu)
    ->ArgsProduct({{0, 1}, {64}, {56}, {64}, {3}})     // ResNet conv2_x 3x3
    ->ArgsProduct({{0, 1}, {256}, {14}, {1024}, {1}})  // ResNet-50 conv4_x 1x1 expansion
    ->ArgNames({"fused", "c", "hw", "k", "r"})
    ->Unit(benchmark::kMillisecond);

// relu(x * y + y) over n elements: mode 0 the ops, 1 fused_elementwise.
void BM_elementwise_chain(benchmark::State& state) {
  kiln::set_num_threads(1);
  const int64_t mode = state.range(0), n = state.range(1);
  Tensor x = kiln::randn({n}), y = kiln::randn({n});
  for (auto _ : state) {
    Tensor out = mode == 1 ? kiln::dispatch1(kiln::op("fused_elementwise"), {x, y},
                                             {{"program", std::string("mul 0 1; add 2 1; relu 3")}})
                           : kiln::relu(kiln::add(kiln::mul(x, y), y));
    benchmark::DoNotOptimize(out.data_ptr());
  }
  state.SetLabel(mode ? "fused_elementwise" : "unfused ops");
  state.SetBytesProcessed(state.iterations() * n * 12);
}
BENCHMARK(BM_elementwise_chain)->ArgsProduct({{0, 1}, {1 << 20}})->ArgNames({"fused", "n"})->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
