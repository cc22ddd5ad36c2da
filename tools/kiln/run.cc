// `kiln run GRAPH --input name=file ... [--output-dir DIR]`: runs a graph (.kir text IR or an
// .onnx model) with the reference executor and prints (and optionally saves) its outputs. Inputs
// are .npy or ONNX TensorProto .pb files.
#include <CLI/CLI.hpp>

#include <cmath>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <map>

#include "engine_commands.h"
#include "graph_commands.h"
#include "model_file.h"
#include "kiln/kiln.h"

CLI::App* add_run_command(CLI::App& app, RunOptions& opt) {
  auto* c = app.add_subcommand("run", "Run a graph (text IR .kir, an ONNX model .onnx, or an engine .kiln) on inputs from .npy or .pb files");
  c->add_option("graph", opt.graph, "graph file (.kir or .onnx)")->required()->check(CLI::ExistingFile);
  c->add_option("--input,-i", opt.inputs, "an input as name=file.npy or name=file.pb (repeat for each input)");
  c->add_option("--known", opt.known, "ONNX: an input kiln needs at compile time (a shape tensor), name=file");
  c->add_option("--dim", opt.dims, "ONNX: a symbolic dim's size, name=value");
  c->add_option("--output-dir,-o", opt.output_dir, "write each output to DIR/<name>.npy (or .pb with --pb)");
  c->add_flag("--pb", opt.pb_outputs, "write outputs as ONNX TensorProto .pb files");
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
  if (is_engine_file(opt.graph)) {
    KILN_CHECK(opt.known.empty() && opt.dims.empty(), "--known and --dim apply to models, not engines");
    return run_engine_file(opt.graph, parse_tensor_args(opt.inputs, "--input"), opt.output_dir, opt.pb_outputs);
  }
  std::map<std::string, int64_t> dims;
  for (const auto& spec : opt.dims) {
    auto eq = spec.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "--dim '", spec, "': expected name=value");
    dims[spec.substr(0, eq)] = std::stoll(spec.substr(eq + 1));
  }
  LoadedGraph lg = load_graph_file(opt.graph, parse_tensor_args(opt.known, "--known"), dims);
  const kiln::ir::Graph& g = lg.graph;
  kiln::ir::verify(g);
  std::map<std::string, kiln::Tensor> given = parse_tensor_args(opt.inputs, "--input");
  // Inputs by the names the user knows (ONNX names for .onnx), fed under the graph's own names.
  std::map<std::string, kiln::Tensor> inputs;
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    auto it = given.find(lg.input_names[i]);
    if (it == given.end()) continue;  // the executor names what is missing
    inputs[g.inputs()[i]->name()] = it->second;
    given.erase(it);
  }
  for (const auto& [name, t] : given) {
    std::string names;
    for (const auto& n : lg.input_names) names += (names.empty() ? "" : ", ") + n;
    KILN_FAIL("--input '", name, "': the graph has no such input (its inputs: ", names.empty() ? "none" : names, ")");
  }
  std::vector<kiln::Tensor> outs = kiln::ir::run(g, inputs);
  if (!opt.output_dir.empty()) std::filesystem::create_directories(opt.output_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string name = lg.output_names[i];
    for (char& ch : name)
      if (ch == '/' || ch == '\\') ch = '_';
    std::cout << name << ": " << kiln::dtype_name(outs[i].dtype()) << kiln::shape_str(outs[i].shape()) << "  "
              << summary(outs[i]) << "\n";
    if (!opt.output_dir.empty()) {
      std::string path = (std::filesystem::path(opt.output_dir) / (name + (opt.pb_outputs ? ".pb" : ".npy"))).string();
      save_tensor_file(outs[i], path);
      std::cout << "  wrote " << path << "\n";
    }
  }
  return 0;
}
