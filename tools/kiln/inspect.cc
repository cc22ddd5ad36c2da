// `kiln inspect GRAPH.kir|MODEL.onnx [--draw PICTURE]`: inputs, outputs, op histogram, parameter count, the
// text IR, and optionally a picture through Graphviz.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>

#include "engine_commands.h"
#include "graph_commands.h"
#include "model_file.h"
#include "kiln/compiler.h"
#include "kiln/kiln.h"

CLI::App* add_inspect_command(CLI::App& app, InspectOptions& opt) {
  auto* c = app.add_subcommand("inspect", "Describe a graph (text IR .kir, or an ONNX model .onnx as kiln imports it): "
                                          "signature, ops, parameters, text");
  c->add_option("graph", opt.graph, "graph file (.kir or .onnx)")->required()->check(CLI::ExistingFile);
  c->add_option("--known", opt.known, "ONNX: an input kiln needs at compile time (a shape tensor), name=file");
  c->add_option("--draw", opt.draw, "also draw the graph (.svg, .png, .pdf via Graphviz's dot; .dot)");
  c->add_flag("--no-text", opt.no_text, "do not print the text IR");
  c->add_option("--passes", opt.passes_level,
                "run the -ON pipeline and print the graph after every pass that changes it (with its report)")
      ->check(CLI::Range(0, 3));
  c->add_option("--draw-passes", opt.draw_passes,
                "with --passes: draw the graph before and after every changing pass as DIR/NN_pass.svg");
  return c;
}

namespace {
// The compiler's pipeline at -O`level`, one stage at a time (Note: the text after each pass comes
// from compiler::optimize's keep_graphs, so what is shown is exactly what the compiler produced).
int show_passes(const kiln::ir::Graph& g0, const InspectOptions& opt) {
  kiln::ir::Graph g = g0.clone();
  kiln::compiler::PassOptions po;
  po.opt_level = opt.passes_level;
  auto reports = kiln::compiler::optimize(g, po, /*keep_graphs=*/true);
  if (!opt.draw_passes.empty()) {
    std::filesystem::create_directories(opt.draw_passes);
    kiln::ir::draw(g0, (std::filesystem::path(opt.draw_passes) / "00_input.svg").string());
  }
  std::cout << "pipeline -O" << opt.passes_level << ":";
  for (const auto& n : kiln::compiler::pipeline(opt.passes_level)) std::cout << " " << n;
  std::cout << "\n";
  int stage = 0;
  for (const auto& r : reports) {
    std::cout << "\n== pass " << r.pass << " (iteration " << r.iteration << "): "
              << (r.changed ? r.report : "no change") << "\n";
    if (!r.changed) continue;
    ++stage;
    if (!opt.no_text) std::cout << r.graph_after;
    if (!opt.draw_passes.empty()) {
      char name[64];
      std::snprintf(name, sizeof name, "%02d_%s.svg", stage, r.pass.c_str());
      std::string path = (std::filesystem::path(opt.draw_passes) / name).string();
      kiln::ir::draw(kiln::ir::parse(r.graph_after, r.pass), path);
      std::cout << "drew " << path << "\n";
    }
  }
  std::cout << "\n" << g0.num_nodes() << " nodes before, " << g.num_nodes() << " after\n";
  return 0;
}
}  // namespace

int inspect_graph_command(const InspectOptions& opt) {
  if (is_engine_file(opt.graph)) return inspect_engine_file(opt.graph);
  KILN_CHECK(opt.draw_passes.empty() || opt.passes_level >= 0, "--draw-passes needs --passes N");
  LoadedGraph lg = load_graph_file(opt.graph, parse_tensor_args(opt.known, "--known"));
  if (opt.passes_level >= 0) return show_passes(lg.graph, opt);
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
