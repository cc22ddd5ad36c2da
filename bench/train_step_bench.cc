// One training step (zero_grad, forward, cross_entropy, backward, SGD step) of an MLP 784-512-256-10
// at batch 128 and of the digits CNN (kiln train's net) on 28x28 inputs at batch 64, 1 and 2 threads.
// bench/torch_train_step.py times the same steps in PyTorch; bench/run_train_step_vs_torch.sh runs
// both, alternated, and prints the ratios (bench/RESULTS.md). Wall time per step is the measure; the CPU
// time (the whole process's) is reported too, as a check on how much of the wall time was spent
// waiting for cores other processes held.
//   ./build/bench/kiln_bench_train_step --benchmark_filter=BM_train_step_mlp
#include <benchmark/benchmark.h>

#include <memory>

#include "kiln/kiln.h"

namespace {

using kiln::Tensor;
namespace nn = kiln::nn;

std::shared_ptr<nn::Sequential> make_mlp(kiln::Generator& gen) {
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Linear>(784, 512, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(512, 256, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::Linear>(256, 10, true, &gen));
  return net;
}

// kiln train's CNN (tools/kiln/train.cc) with the classifier sized for 28x28 inputs (7x7 after two pools).
std::shared_ptr<nn::Sequential> make_cnn(kiln::Generator& gen) {
  auto net = std::make_shared<nn::Sequential>();
  net->add(std::make_shared<nn::Conv2d>(1, 32, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Conv2d>(32, 64, 3, 1, 1, true, &gen))
      .add(std::make_shared<nn::ReLU>())
      .add(std::make_shared<nn::MaxPool2d>(2))
      .add(std::make_shared<nn::Flatten>())
      .add(std::make_shared<nn::Linear>(64 * 7 * 7, 10, true, &gen));
  return net;
}

void run_steps(benchmark::State& state, nn::Module& net, const Tensor& x, const Tensor& y) {
  nn::SGD opt(net.parameters(), 0.01);
  for (auto _ : state) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(net(x), y);
    loss.backward();
    opt.step();
    benchmark::DoNotOptimize(loss.data_ptr());
  }
}

void BM_train_step_mlp(benchmark::State& state) {
  kiln::set_num_threads(static_cast<int>(state.range(0)));
  kiln::Generator gen(0);
  auto net = make_mlp(gen);
  Tensor x = kiln::randn({128, 784}, {}, &gen);
  Tensor y = kiln::randint(0, 10, {128}, kiln::DType::i64, &gen);
  run_steps(state, *net, x, y);
}
BENCHMARK(BM_train_step_mlp)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->MeasureProcessCPUTime()->Unit(
    benchmark::kMicrosecond);

void BM_train_step_cnn(benchmark::State& state) {
  kiln::set_num_threads(static_cast<int>(state.range(0)));
  kiln::Generator gen(0);
  auto net = make_cnn(gen);
  Tensor x = kiln::randn({64, 1, 28, 28}, {}, &gen);
  Tensor y = kiln::randint(0, 10, {64}, kiln::DType::i64, &gen);
  run_steps(state, *net, x, y);
}
BENCHMARK(BM_train_step_cnn)->Arg(1)->Arg(2)->ArgName("threads")->UseRealTime()->MeasureProcessCPUTime()->Unit(
    benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
