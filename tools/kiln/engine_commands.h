// `kiln compile`, `kiln bench`, and the engine side of `kiln run` / `kiln inspect`.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace CLI {
class App;
}

struct CompileCommandOptions {
  std::string model;
  std::string out;
  int opt_level = 2;
  std::vector<std::string> disabled;
  std::string batch;                 // "MIN:MAX" or "N"
  std::vector<std::string> known;    // ONNX compile-time inputs, name=file
  std::vector<std::string> dims;     // ONNX symbolic dims fixed at load, name=value
  bool verify_each = false;
  std::string target = "host";       // "host" or <arch>-<isa>
  int threads = 0;                   // 0: kiln's thread count
  std::string memory_budget;         // "64MiB"; empty: none
  std::string objective = "latency";
  bool no_autotune = false;
  std::string layout = "auto";
  std::string timing_cache;          // empty: the default path
  int tune_runs = 5;
  double tune_ms = 50;
  bool show_tactics = false;
  std::vector<std::string> no_tactics;  // tactics left out
};
struct BenchOptions {
  std::string model;
  int64_t batch = 1;
  int threads = 0;
  int iterations = 50;
  int warmup = 5;
  int opt_level = 2;
  std::vector<std::string> disabled;
  std::vector<std::string> inputs;   // name=file; others random
  std::vector<std::string> dims;
  bool profile = false;
  bool json = false;
};

CLI::App* add_compile_command(CLI::App& app, CompileCommandOptions& opt);
CLI::App* add_bench_command(CLI::App& app, BenchOptions& opt);
int run_compile_command(const CompileCommandOptions& opt);
int run_bench_command(const BenchOptions& opt);

// Engines for `kiln run` / `kiln inspect` (a .kiln file, or any file starting with the engine magic).
bool is_engine_file(const std::string& path);
int run_engine_file(const std::string& path, const std::map<std::string, kiln::Tensor>& inputs,
                    const std::string& output_dir, bool pb_outputs);
int inspect_engine_file(const std::string& path);
// "MIN:MAX" or "N" -> {min, max}; kiln::Error naming the flag otherwise.
std::pair<int64_t, int64_t> parse_batch_range(const std::string& spec);
std::map<std::string, int64_t> parse_dim_args(const std::vector<std::string>& specs);
