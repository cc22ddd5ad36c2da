// `kiln inspect GRAPH.kir|MODEL.onnx [--draw PICTURE]`: inputs, outputs, op histogram, parameter count, the
// text IR, and optionally a picture through Graphviz.
#include <CLI/CLI.hpp>

#include <iostream>
#include <map>

#include "engine_commands.h"
#include "graph_commands.h"
#include "model_file.h"
#include "kiln/kiln.h"

CLI::App* add_inspect_command(CLI::App& app, InspectOptions& opt) {
  auto* c = app.add_subcommand("inspect", "Describe a graph (text IR .kir, or an ONNX model .onnx as kiln imports it): "
                                          "signature, ops, parameters, text");
  c->add_option("graph", opt.graph, "graph file (.kir or .onnx)")->required()->check(CLI::ExistingFile);
  c->add_option("--known", opt.known, "ONNX: an input kiln needs at compile time (a shape tensor), name=file");
  c->add_option("--draw", opt.draw, "also draw the graph (.svg, .png, .pdf via Graphviz's dot; .dot)");
  c->add_flag("--no-text", opt.no_text, "do not print the text IR");
  return c;
}

int inspect_graph_command(const InspectOptions& opt) {
  if (is_engine_file(opt.graph)) return inspect_engine_file(opt.graph);
  LoadedGraph lg = load_graph_file(opt.graph, parse_tensor_args(opt.known, "--known"));
  const kiln::ir::Graph& g = lg.graph;
  auto errs = kiln::ir::verify_errors(g);
  std::cout << "graph " << g.name << " (" << opt.graph << ")\n";
  auto alias = [](const std::string& user, const kiln::ir::Value* v) {
    return user == v->name() ? std::string() : "  (ONNX '" + user + "')";
  };
  std::cout << "inputs:\n";
  for (size_t i = 0; i < g.inputs().size(); ++i) {
    const auto* v = g.inputs()[i];
    std::cout << "  %" << v->name() << ": " << kiln::ir::type_str(v->type()) << alias(lg.input_names[i], v) << "\n";
  }
  std::cout << "outputs:\n";
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const auto* v = g.outputs()[i];
    std::cout << "  %" << v->name() << ": " << kiln::ir::type_str(v->type()) << alias(lg.output_names[i], v) << "\n";
  }
  std::map<std::string, int> hist;
  for (const auto* n : g.nodes()) ++hist[n->op().name()];
  std::cout << "ops (" << g.num_nodes() << " nodes):\n";
  for (const auto& [name, count] : hist) std::cout << "  " << name << ": " << count << "\n";
  std::cout << "parameters: " << g.parameter_count() << " elements in " << g.constants().size() << " constants\n";
  std::cout << "verifier: " << (errs.empty() ? "ok" : std::to_string(errs.size()) + " problem(s)") << "\n";
  for (const auto& e : errs) std::cout << "  " << e << "\n";
  if (!opt.no_text) std::cout << "\n" << kiln::ir::print(g);
  if (!opt.draw.empty()) {
    kiln::ir::draw(g, opt.draw);
    std::cout << "drew " << opt.draw << "\n";
  }
  return errs.empty() ? 0 : 1;
}
