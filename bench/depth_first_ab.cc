// An engine's runs image by image (Note [Depth-first groups] in src/runtime/executor.cc) against
// its batched runs, in one process on one executor, alternating run by run: a slow minute on a
// shared machine slows both sides alike, which two `kiln bench` processes taking turns do not
// promise.
//
//   ./build/bench/kiln_bench_depth_first ENGINE.kiln [--batch 8] [--threads 2] [--iterations 40]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "kiln/kiln.h"
#include "kiln/runtime.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s ENGINE.kiln [--batch N] [--threads N] [--iterations N]\n", argv[0]);
    return 2;
  }
  int64_t batch = 8;
  int threads = 2, iterations = 40;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int value = std::atoi(argv[i + 1]);
    if (flag == "--batch") batch = value;
    else if (flag == "--threads") threads = value;
    else if (flag == "--iterations") iterations = value;
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  try {
    auto engine = std::make_shared<const kiln::runtime::Engine>(kiln::runtime::Engine::load(argv[1]));
    kiln::set_num_threads(threads);
    kiln::runtime::Executor ex(engine);
    for (const auto& [begin, end] : ex.depth_first_groups())
      std::printf("group: steps [%zu, %zu), '%s' .. '%s'\n", begin, end, engine->steps[begin].name.c_str(),
                  engine->steps[end - 1].name.c_str());
    std::vector<kiln::Tensor> inputs;
    for (int32_t id : engine->inputs) {
      const kiln::runtime::EngineValue& v = engine->values[static_cast<size_t>(id)];
      kiln::Shape shape;
      for (const kiln::ir::Dim& d : v.shape) shape.push_back(d.is_symbolic() ? batch * d.scale : d.size);
      inputs.push_back(kiln::rand(shape).to(v.dtype));
    }
    std::vector<double> ms[2];
    for (int i = -3; i < iterations; ++i)
      for (int df = 0; df < 2; ++df) {
        ex.set_depth_first(df == 1);
        const auto t0 = std::chrono::steady_clock::now();
        ex.run(inputs);
        const double t = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
        if (i >= 0) ms[df].push_back(t);
      }
    for (auto& m : ms) std::sort(m.begin(), m.end());
    auto at = [](const std::vector<double>& m, double q) { return m[static_cast<size_t>(q * static_cast<double>(m.size() - 1))]; };
    std::printf("batch %lld, %d threads, %d runs each\n", static_cast<long long>(batch), threads, iterations);
    std::printf("batched      min %.3f  p25 %.3f  median %.3f ms\n", ms[0][0], at(ms[0], 0.25), at(ms[0], 0.5));
    std::printf("depth-first  min %.3f  p25 %.3f  median %.3f ms\n", ms[1][0], at(ms[1], 0.25), at(ms[1], 0.5));
    std::printf("depth-first / batched: min %.3f, median %.3f\n", ms[1][0] / ms[0][0], at(ms[1], 0.5) / at(ms[0], 0.5));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
