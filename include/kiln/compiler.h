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

// Adds the compiler's passes (identity, fold, reshape, bn_fold, ...) to ir's pass registry, so
// ir::make_pass / ir::run_passes / kiln-opt know them. Idempotent; pipeline(), optimize() and
// run_passes() call it.
void register_passes();

// Runs the named passes in order (any registered pass), reporting each; the verifier runs after
// each in debug builds and when verify_each. kiln::Error naming an unknown pass.
std::vector<PassReport> run_passes(ir::Graph& g, const std::vector<std::string>& names, bool verify_each = false,
                                   bool keep_graphs = false);

// The pass names run at a level, in order.
std::vector<std::string> pipeline(int opt_level);
// Runs the pipeline for options.opt_level on g (kiln::Error naming an unknown disabled pass).
std::vector<PassReport> optimize(ir::Graph& g, const PassOptions& options = {}, bool keep_graphs = false);

}  // namespace kiln::compiler
