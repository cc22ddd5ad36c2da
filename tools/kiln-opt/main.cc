// kiln-opt: text IR in, named passes (or an -O level's pipeline), text IR out (like LLVM's opt /
// mlir-opt). The graph is verified after parsing and after every pass; each pass's report goes to
// stderr with --report.
#include <CLI/CLI.hpp>

#include <iostream>
#include <sstream>

#include "kiln/compiler.h"
#include "kiln/kiln.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln-opt: run IR passes over a text-IR graph"};
  std::string file;
  std::string passes;
  bool report = false;
  int opt_level = -1;
  std::vector<std::string> disabled;
  kiln::compiler::register_passes();
  app.add_option("file", file, "graph file (.kir), or - for stdin")->required();
  std::string known;
  for (const auto& n : kiln::ir::pass_names()) known += (known.empty() ? "" : ", ") + n;
  app.add_option("--passes,-p", passes, "comma-separated passes to run in order (" + known + ")");
  app.add_option("-O", opt_level, "run the -O level's pipeline (0..3) after --passes")->check(CLI::Range(0, 3));
  app.add_option("--disable-pass", disabled, "skip this pass in the -O pipeline (repeatable)");
  app.add_flag("--report", report, "print each pass's report (what it changed) to stderr");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    kiln::ir::Graph g;
    if (file == "-") {
      std::ostringstream ss;
      ss << std::cin.rdbuf();
      g = kiln::ir::parse(ss.str(), "<stdin>");
    } else {
      g = kiln::ir::load(file);
    }
    kiln::ir::verify(g);
    std::vector<std::string> names;
    std::stringstream ps(passes);
    for (std::string p; std::getline(ps, p, ',');)
      if (!p.empty()) names.push_back(p);
    auto results = kiln::compiler::run_passes(g, names, /*verify_each=*/true);
    if (opt_level >= 0) {
      kiln::compiler::PassOptions opts;
      opts.opt_level = opt_level;
      opts.disabled.insert(disabled.begin(), disabled.end());
      opts.verify_each = true;
      auto more = kiln::compiler::optimize(g, opts);
      results.insert(results.end(), more.begin(), more.end());
    } else {
      KILN_CHECK(disabled.empty(), "--disable-pass needs -O N");
    }
    if (report)
      for (const auto& r : results) std::cerr << r.report << (r.changed ? " [changed]" : " [unchanged]") << "\n";
    std::cout << kiln::ir::print(g);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln-opt: error: " << e.what() << "\n";
    return 1;
  } catch (const kiln::InternalError& e) {
    std::cerr << "kiln-opt: internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}
