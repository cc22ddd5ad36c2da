// Unstacking: a sum over the axis along which values were stacked is a sum of the values:
//   sum(stack(x_0 .. x_n-1, k), [k])                -> x_0 + ... + x_n-1
//   sum(stack(x_0 .. x_n-1, k) * w, [k])            -> x_0 * w_0 + ... + x_n-1 * w_n-1
// where stack(x, k) is concat(unsqueeze(x_i, k), k) as exporters write torch.stack, and w_i is
// w's index i along k (select), or w without k where it broadcasts there.
//
// Note [Sums over a stacked axis]
// Selective-kernel attention (timm's SKNet; SKNet-18's every block) stacks its two branches'
// outputs to [N, 2, C, H, W], sums them over the branches for the attention's pool, and sums
// them again weighted by a softmax over the branches. The 5-d values cannot be blocked (Note
// [Layout regions] in layout.cc), so every block cut the region apart and the cost model kept the
// whole network NCHW: SKNet-18 ran 1.10x ONNX Runtime's time at batch 8, its convolutions 12%
// slower than blocked. As sums of 4-d values the adds and muls are region members, the weights'
// [N, C, 1, 1] selects the only values converted, and the stack itself goes unread.
#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

// The values stacked along `axis` by concat(unsqueeze(x_i, axis), axis), or empty.
std::vector<ir::Value*> stacked(const ir::Value* v, int64_t axis) {
  const ir::Node* cat = v ? v->producer() : nullptr;
  if (!cat || cat->op().name() != "concat" || cat->inputs().size() < 2) return {};
  const auto rank = static_cast<int64_t>(v->type().shape.size());
  int64_t a = cat->attrs().get_int("axis");
  if ((a < 0 ? a + rank : a) != axis) return {};
  std::vector<ir::Value*> xs;
  for (const ir::Value* in : cat->inputs()) {
    const ir::Node* u = in ? in->producer() : nullptr;
    if (!u || u->op().name() != "unsqueeze" || u->inputs().size() != 1) return {};
    const std::vector<int64_t>& dims = u->attrs().get_ints("dims");
    if (dims.size() != 1 || (dims[0] < 0 ? dims[0] + rank : dims[0]) != axis) return {};
    xs.push_back(u->inputs()[0]);
  }
  for (const ir::Value* x : xs)
    if (!(x->type() == xs[0]->type())) return {};
  return xs;
}

class UnstackPass : public ir::Pass {
 public:
  std::string name() const override { return "unstack"; }

  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::vector<ir::Node*> dead;
    std::vector<std::pair<ir::Value*, std::string>> names;  // each sum's name, for its replacement
    for (ir::Node* n : g.nodes()) {
      if (n->op().name() != "sum" || n->inputs().size() != 1 || n->outputs().size() != 1 ||
          n->attrs().get_bool("keepdim"))
        continue;
      const std::vector<int64_t>& axes = n->attrs().get_ints("axes");
      ir::Value* x = n->inputs()[0];
      const auto rank = static_cast<int64_t>(x->type().shape.size());
      if (axes.size() != 1 || !is_floating(x->type().dtype)) continue;
      const int64_t axis = axes[0] < 0 ? axes[0] + rank : axes[0];
      std::vector<ir::Value*> xs = stacked(x, axis);
      ir::Value* w = nullptr;
      if (xs.empty() && x->producer() && x->producer()->op().name() == "mul" && x->producer()->inputs().size() == 2) {
        // The stack times weights, in either order.
        for (int i = 0; i < 2 && xs.empty(); ++i) {
          xs = stacked(x->producer()->inputs()[static_cast<size_t>(i)], axis);
          w = x->producer()->inputs()[static_cast<size_t>(1 - i)];
        }
        if (xs.empty()) continue;
        // w must have the stack's rank (a lower rank would broadcast its dims to other axes), its
        // dim `axis` 1 or n, and the stack's dtype.
        const auto& ws = w->type().shape;
        const auto n_stacked = static_cast<int64_t>(xs.size());
        if (static_cast<int64_t>(ws.size()) != rank || w->type().dtype != x->type().dtype ||
            ws[static_cast<size_t>(axis)].is_symbolic() ||
            (ws[static_cast<size_t>(axis)].size != 1 && ws[static_cast<size_t>(axis)].size != n_stacked))
          continue;
      }
      if (xs.empty()) continue;
      ir::Value* total = nullptr;
      for (size_t i = 0; i < xs.size(); ++i) {
        ir::Value* term = xs[i];
        if (w) {
          const bool one = w->type().shape[static_cast<size_t>(axis)].size == 1;
          ir::Node* wi = one ? g.add_node(kiln::op("squeeze"), {w}, Attrs{{"dims", std::vector<int64_t>{axis}}})
                             : g.add_node(kiln::op("select"), {w},
                                          Attrs{{"dim", axis}, {"index", static_cast<int64_t>(i)}});
          term = g.add_node(kiln::op("mul"), {term, wi->output()})->output();
        }
        total = total ? g.add_node(kiln::op("add"), {total, term})->output() : term;
      }
      if (!(total->type() == n->output()->type())) continue;  // (the unused new nodes go with dce)
      items.push_back("%" + n->output()->name() + " = sum of " + std::to_string(xs.size()) + " stacked values" +
                      (w ? " weighted by %" + w->name() : std::string()));
      names.emplace_back(total, n->output()->name());
      g.replace_all_uses(n->output(), total);
      dead.push_back(n);
    }
    if (items.empty()) return report("unstack", "rewrote", {}, "no sum over a stacked axis");
    g.erase_nodes(dead);
    for (auto& [v, nm] : names) g.rename(v, nm);
    topo_reorder(g);
    return report("unstack", "rewrote", items, "no sum over a stacked axis");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_unstack() { return std::make_unique<UnstackPass>(); }

}  // namespace kiln::compiler::passes
