// `kiln run` and `kiln inspect`: graph files (text IR .kir, ONNX .onnx) from the command line.
#pragma once

#include <string>
#include <vector>

namespace CLI {
class App;
}

struct RunOptions {
  std::string graph;
  std::vector<std::string> inputs;  // name=file.npy|.pb
  std::vector<std::string> known;   // ONNX compile-time inputs, name=file
  std::vector<std::string> dims;    // ONNX symbolic dims, name=value
  std::string output_dir;
  bool pb_outputs = false;
};
struct InspectOptions {
  std::string graph;
  std::vector<std::string> known;
  std::string draw;     // picture path (.svg, .png, .pdf, .dot)
  int passes_level = -1;     // --passes N: the graph after each pass of -ON
  std::string draw_passes;   // --draw-passes DIR: a picture per pass
  bool no_text = false;
};

CLI::App* add_run_command(CLI::App& app, RunOptions& opt);
CLI::App* add_inspect_command(CLI::App& app, InspectOptions& opt);
int run_graph_command(const RunOptions& opt);
int inspect_graph_command(const InspectOptions& opt);
