// Identity / no-op removal: a node whose output equals one of its inputs is bypassed.
//   reshape, squeeze, unsqueeze, expand to the input's own type; permute by the identity
//   permutation; cast to the input's dtype; clone; slice with unit steps that keeps every
//   element; x + 0, x - 0, x * 1, x / 1 where the constant is all zeros/ones and the result
//   has x's exact type (no broadcast growth, no dtype promotion).
// An expand that a broadcasting elementwise op reads is dropped where the op's own broadcast does
// the same (Note [Expands the broadcast does]).
// Note [Identity at the interface]: when the node's output is a graph output and its input is a
// graph input or constant, the node stays: an engine's output must be a buffer of its own, not
// an alias of an input.
#include <numeric>
#include <set>

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
  if (op == "permute") return is_identity_perm(n->attrs().get_ints("dims")) && same ? x : nullptr;
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

// Note [Expands the broadcast does]
// x * y.expand_as(x) (timm's ECA and CBAM gates, and many exported models' masks) reaches the
// graph as mul(x, expand(y, shape(x))): the expand is a view, but it hides that y is a per-channel
// [N, C, 1, 1] scale. The layout pass then saw a full [N, C, H, W] operand from outside its region
// and would convert it (ECA-ResNet-50d ran wholly NCHW), and a broadcast kernel sees zero strides
// instead of its per-channel pattern. Where another operand already has the output's shape and y's
// dims are each 1 or the output's, the op broadcasts y itself to the same result: it reads y.
const std::set<std::string> kBroadcasting = {"add", "sub",         "mul",        "div",        "pow", "maximum",
                                             "minimum", "where",   "eq",         "ne",         "lt",  "le",
                                             "gt",  "ge",          "logical_and", "logical_or", "logical_xor"};

// The input that expand node e's reader n may read in its place, or nullptr.
ir::Value* broadcast_instead(const ir::Node* n, const ir::Node* e) {
  if (!e || e->op().name() != "expand" || e->inputs().empty() || !e->inputs()[0]) return nullptr;
  ir::Value* y = e->inputs()[0];
  const ir::SymShape& out = n->output()->type().shape;
  bool full = false;  // another operand has the output's shape
  for (const ir::Value* v : n->inputs()) full = full || (v && v != e->output() && v->type().shape == out);
  const auto& ys = y->type().shape;
  if (!full || ys.size() > out.size()) return nullptr;
  for (size_t i = 0; i < ys.size(); ++i) {
    const ir::Dim& d = ys[i];
    if (!(d == out[out.size() - ys.size() + i]) && !(!d.is_symbolic() && d.size == 1)) return nullptr;
  }
  return y;
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
    for (ir::Node* n : g.nodes()) {
      if (!kBroadcasting.count(n->op().name()) || n->outputs().size() != 1) continue;
      for (size_t i = 0; i < n->inputs().size(); ++i) {
        ir::Value* v = n->inputs()[i];
        ir::Value* y = v ? broadcast_instead(n, v->producer()) : nullptr;
        if (!y) continue;
        items.push_back(n->op().name() + " of %" + n->output()->name() + " reads %" + y->name() + " instead of %" +
                        v->name() + " (its broadcast does the expand)");
        n->set_input(i, y);
      }
    }
    return report("identity", "removed", items, "no no-op nodes");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_identity() { return std::make_unique<IdentityPass>(); }

}  // namespace kiln::compiler::passes
