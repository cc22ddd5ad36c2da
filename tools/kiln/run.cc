// `kiln run GRAPH.kir --input name=file.npy ... [--output-dir DIR]`: runs a graph with the
// reference executor and prints (and optionally saves) its outputs.
#include <CLI/CLI.hpp>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>

#include "graph_commands.h"
#include "kiln/kiln.h"

CLI::App* add_run_command(CLI::App& app, RunOptions& opt) {
  auto* c = app.add_subcommand("run", "Run a graph (text IR, .kir) on inputs from .npy files");
  c->add_option("graph", opt.graph, "graph file (.kir)")->required()->check(CLI::ExistingFile);
  c->add_option("--input,-i", opt.inputs, "an input as name=file.npy (repeat for each input)");
  c->add_option("--output-dir,-o", opt.output_dir, "write each output to DIR/<name>.npy");
  return c;
}

namespace {
// min / max / mean over the elements, computed in f64.
std::string summary(const kiln::Tensor& t) {
  if (t.numel() == 0) return "(empty)";
  kiln::Tensor d = t.to(kiln::DType::f64).contiguous();
  const double* p = d.data<double>();
  double lo = p[0], hi = p[0], sum = 0;
  for (int64_t i = 0; i < d.numel(); ++i) {
    lo = std::min(lo, p[i]);
    hi = std::max(hi, p[i]);
    sum += p[i];
  }
  std::ostringstream os;
  os << std::setprecision(6) << "min " << lo << "  max " << hi << "  mean " << sum / static_cast<double>(d.numel());
  return os.str();
}
}  // namespace

int run_graph_command(const RunOptions& opt) {
  kiln::ir::Graph g = kiln::ir::load(opt.graph);
  kiln::ir::verify(g);
  std::map<std::string, kiln::Tensor> inputs;
  for (const auto& spec : opt.inputs) {
    auto eq = spec.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "--input '", spec, "': expected name=file.npy");
    std::string name = spec.substr(0, eq);
    KILN_CHECK(!inputs.count(name), "--input: '", name, "' given twice");
    inputs[name] = kiln::load_npy(spec.substr(eq + 1));
  }
  std::vector<kiln::Tensor> outs = kiln::ir::run(g, inputs);
  if (!opt.output_dir.empty()) std::filesystem::create_directories(opt.output_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    const std::string& name = g.outputs()[i]->name();
    std::cout << name << ": " << kiln::dtype_name(outs[i].dtype()) << kiln::shape_str(outs[i].shape()) << "  "
              << summary(outs[i]) << "\n";
    if (!opt.output_dir.empty()) {
      std::string path = (std::filesystem::path(opt.output_dir) / (name + ".npy")).string();
      kiln::save_npy(path, outs[i].contiguous());
      std::cout << "  wrote " << path << "\n";
    }
  }
  return 0;
}
