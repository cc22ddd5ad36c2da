// Optimization pipelines: which passes run at each -O level, iterated to a fixpoint.
#include <algorithm>

#include "kiln/compiler.h"

namespace kiln::compiler {

std::vector<std::string> pipeline(int opt_level) {
  KILN_CHECK(opt_level >= 0 && opt_level <= 3, "optimization level -O", opt_level, " is not one of 0..3");
  if (opt_level == 0) return {};
  return {"cse", "dce"};
}

std::vector<PassReport> optimize(ir::Graph& g, const PassOptions& options, bool keep_graphs) {
  std::vector<std::string> names = pipeline(options.opt_level);
  auto known = ir::pass_names();
  for (const auto& d : options.disabled)
    KILN_CHECK(std::find(known.begin(), known.end(), d) != known.end(), "--disable-pass: unknown pass '", d, "'");
  std::erase_if(names, [&](const std::string& n) { return options.disabled.count(n) != 0; });
  std::vector<PassReport> reports;
  for (int it = 0; it < std::max(1, options.max_iterations); ++it) {
    bool any = false;
    for (const auto& n : names) {
      auto r = ir::run_passes(g, {n}, options.verify_each);
      PassReport rep{n, it, r[0].changed, r[0].report, keep_graphs ? ir::print(g) : std::string()};
      any = any || rep.changed;
      reports.push_back(std::move(rep));
    }
    if (!options.fixpoint || !any) break;
  }
  return reports;
}

}  // namespace kiln::compiler
