// Identity / no-op removal: a node whose output equals one of its inputs is bypassed.
//   reshape, squeeze, unsqueeze, expand to the input's own type; permute by the identity
//   permutation; cast to the input's dtype; clone; slice with unit steps that keeps every
//   element; x + 0, x - 0, x * 1, x / 1 where the constant is all zeros/ones and the result
//   has x's exact type (no broadcast growth, no dtype promotion).
// Note [Identity at the interface]: when the node's output is a graph output and its input is a
// graph input or constant, the node stays: an engine's output must be a buffer of its own, not
// an alias of an input.
#include <numeric>

#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

bool all_equal(const ir::Value* c, double want) {
  if (!is_const(c) || c->constant().numel() > 4096) return false;
  for (double v : const_values(c))
    if (v != want) return false;
  return true;
}

// The input a no-op node passes through, or nullptr.
ir::Value* passthrough(const ir::Node* n) {
  const std::string& op = n->op().name();
  if (n->inputs().empty() || !n->inputs()[0] || n->outputs().size() != 1) return nullptr;
  ir::Value* x = n->inputs()[0];
  const ir::ValueType& out = n->output()->type();
  bool same = x->type() == out;
  if (op == "reshape" || op == "squeeze" || op == "unsqueeze" || op == "expand" || op == "cast" || op == "clone")
    return same ? x : nullptr;
  if (op == "permute") {
    const auto& dims = n->attrs().get_ints("dims");
    for (size_t i = 0; i < dims.size(); ++i)
      if (dims[i] != static_cast<int64_t>(i) && dims[i] != static_cast<int64_t>(i) - static_cast<int64_t>(dims.size()))
        return nullptr;
    return same ? x : nullptr;
  }
  if (op == "slice") {
    for (int64_t s : n->attrs().get_ints("steps"))
      if (s != 1) return nullptr;
    // Same static shape with unit steps: every element, in order.
    return same && x->type().is_static() ? x : nullptr;
  }
  if (n->inputs().size() == 2 && n->inputs()[1]) {
    ir::Value* a = n->inputs()[0];
    ir::Value* b = n->inputs()[1];
    if ((op == "add" || op == "sub") && a->type() == out && all_equal(b, 0.0)) return a;
    if (op == "add" && b->type() == out && all_equal(a, 0.0)) return b;
    if ((op == "mul" || op == "div") && a->type() == out && all_equal(b, 1.0)) return a;
    if (op == "mul" && b->type() == out && all_equal(a, 1.0)) return b;
  }
  return nullptr;
}

class IdentityPass : public ir::Pass {
 public:
  std::string name() const override { return "identity"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::vector<ir::Node*> dead;
    for (ir::Node* n : g.nodes()) {
      ir::Value* x = passthrough(n);
      if (!x) continue;
      if (is_graph_output(g, n->output()) && x->kind() != ir::Value::Kind::node_output) continue;
      items.push_back(n->str());
      g.replace_all_uses(n->output(), x);
      dead.push_back(n);
    }
    g.erase_nodes(dead);
    return report("identity", "removed", items, "no no-op nodes");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_identity() { return std::make_unique<IdentityPass>(); }

}  // namespace kiln::compiler::passes
