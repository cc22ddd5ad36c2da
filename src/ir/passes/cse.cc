// Common-subexpression elimination: a node with the same op, attributes and inputs as an earlier
// one is replaced by it; constants with the same dtype, shape and bytes are merged. Every op in
// the registry is a pure function of its inputs and attributes (none draws random numbers), so
// this is always sound; an op that is not pure must be excluded here when one is added.
#include <cstring>
#include <map>

#include "ir/passes/passes.h"

namespace kiln::ir {

PassResult CsePass::run(Graph& g) {
  PassResult r;
  std::vector<std::string> merged;
  // Constants first, so nodes reading equal constants become equal too.
  std::map<std::string, Value*> const_seen;
  std::vector<Value*> dead_consts;
  for (Value* c : g.constants()) {
    const Tensor& t = c->constant();
    std::string key = type_str(c->type()) + ":" +
                      std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
    auto [it, fresh] = const_seen.emplace(key, c);
    if (fresh) continue;
    g.replace_all_uses(c, it->second);
    dead_consts.push_back(c);
    merged.push_back("%" + c->name() + " -> %" + it->second->name());
  }
  std::map<std::string, Node*> seen;
  std::vector<Node*> dead;
  for (Node* n : g.nodes()) {
    std::string key = n->op().name() + "(";
    for (const Value* v : n->inputs()) key += (v ? std::to_string(reinterpret_cast<uintptr_t>(v)) : "_") + ",";
    key += ")";
    for (const auto& [k, v] : n->attrs().values()) key += k + "=" + attr_value_str(v) + ";";
    auto [it, fresh] = seen.emplace(key, n);
    if (fresh) continue;
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      g.replace_all_uses(n->outputs()[i], it->second->outputs()[i]);
      merged.push_back("%" + n->outputs()[i]->name() + " -> %" + it->second->outputs()[i]->name());
    }
    dead.push_back(n);
  }
  g.erase_nodes(dead);
  g.erase_constants(dead_consts);
  r.changed = !merged.empty();
  r.report = r.changed ? "cse: merged " + std::to_string(merged.size()) + " value(s):" : "cse: nothing to merge";
  for (const auto& m : merged) r.report += " " + m + ";";
  return r;
}

}  // namespace kiln::ir
