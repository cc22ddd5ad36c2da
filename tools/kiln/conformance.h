// `kiln conformance`: ONNX backend tests through kiln's importer and executor.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

struct ConformanceOptions {
  std::vector<std::string> dirs;
  std::string json;
  std::string filter;
  std::string expect;
  std::string save_outputs;
  int threads = 0;
  int engine_level = -1;  // >= 0: compile each case into an engine at -ON and run that instead
  bool quiet = false;
};

CLI::App* add_conformance_command(CLI::App& app, ConformanceOptions& opt);
int run_conformance_command(const ConformanceOptions& opt);
