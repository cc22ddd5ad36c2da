// `kiln train`: a small CNN on the 8x8 digits with the fixed split (data/README.md).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

struct TrainOptions {
  std::string data;  // empty: default_digits_path()
  std::string out = "digits.safetensors";
  std::string export_path;  // --export: the trained model as ONNX (opset 17), traced in eval mode
  std::string engine_path;  // --engine: that ONNX file imported, compiled and run on the test split
  int opt_level = 2;        // -O for --engine
  int64_t epochs = 40;
  int64_t batch_size = 32;
  double lr = 1e-2;
  uint64_t seed = 2;  // seeds 0, 1, 2 give 97.2%, 97.8%, 98.3% test accuracy (2 threads, AVX-512 host)
  int threads = 0;
  double min_accuracy = 0.0;  // exit 1 when the final test accuracy is lower (for tests)
};

// The installed copy (<exe dir>/../share/kiln/digits.csv) when it exists, else the source tree's
// data/digits/digits.csv this binary was built from.
std::string default_digits_path();
CLI::App* add_train_command(CLI::App& app, TrainOptions& opt);
int run_train_command(const TrainOptions& opt);
