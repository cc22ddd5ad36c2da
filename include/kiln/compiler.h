// The compiler (DESIGN.md: compiler/): optimization pipelines over kiln's IR at levels -O0..-O3,
// any pass switchable off by name, each reporting what it changed.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::compiler {

struct PassOptions {
  int opt_level = 2;                  // 0: verify only; 1: cleanups; 2: + folding and fusion; 3: + aggressive
  std::set<std::string> disabled;     // pass names to skip (bisection: --disable-pass NAME)
  bool verify_each = false;           // always on in debug builds
  bool fixpoint = true;               // repeat the pipeline while some pass changes the graph
  int max_iterations = 8;
};

struct PassReport {
  std::string pass;
  int iteration = 0;
  bool changed = false;
  std::string report;  // "folded 3 nodes (%a, %b, %c)"
  std::string graph_after;  // the text IR after the pass, when keep_graphs
};

// The pass names run at a level, in order.
std::vector<std::string> pipeline(int opt_level);
// Runs the pipeline for options.opt_level on g (kiln::Error naming an unknown disabled pass).
std::vector<PassReport> optimize(ir::Graph& g, const PassOptions& options = {}, bool keep_graphs = false);

}  // namespace kiln::compiler
