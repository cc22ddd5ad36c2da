// Dead-code elimination: removes nodes none of whose outputs reach a graph output, and constants
// nothing uses. Inputs stay: they are the graph's signature.
#include <set>

#include "ir/passes/passes.h"

namespace kiln::ir {

PassResult DcePass::run(Graph& g) {
  std::set<const Value*> live(g.outputs().begin(), g.outputs().end());
  std::vector<Node*> dead;
  auto nodes = g.nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    Node* n = *it;
    bool used = false;
    for (const Value* v : n->outputs()) used = used || live.count(v);
    if (!used) {
      dead.push_back(n);
      continue;
    }
    for (const Value* v : n->inputs())
      if (v) live.insert(v);
  }
  std::vector<Value*> dead_consts;
  for (Value* c : g.constants())
    if (!live.count(c)) dead_consts.push_back(c);
  PassResult r;
  if (dead.empty() && dead_consts.empty()) {
    r.report = "dce: nothing to remove";
    return r;
  }
  r.changed = true;
  r.report = "dce: removed " + std::to_string(dead.size()) + " node(s) and " + std::to_string(dead_consts.size()) +
             " constant(s):";
  for (auto it = dead.rbegin(); it != dead.rend(); ++it) r.report.append(" ").append((*it)->str()).append(";");
  for (const Value* c : dead_consts) r.report.append(" %").append(c->name()).append(";");
  g.erase_nodes(dead);
  g.erase_constants(dead_consts);
  return r;
}

}  // namespace kiln::ir
