// Constant folding: a node whose inputs are all constants runs once at compile time and its
// outputs become constants. This folds shape subgraphs (shape -> gather -> concat -> reshape's
// target) and weight preprocessing (transposes, casts of initializers).
//
// Note [Fold size limit]: folding trades compute for engine size. A node is folded only when
// each output has at most kMaxFoldElements elements and the outputs together are no larger than
// the node's constant inputs plus kMaxFoldElements, so folding an expand/tile of a scalar into a
// huge tensor never bloats the engine.
#include "compiler/passes/common.h"
#include "kiln/ops/dispatch.h"

namespace kiln::compiler::passes {
namespace {

constexpr int64_t kMaxFoldElements = int64_t{1} << 20;

class FoldPass : public ir::Pass {
 public:
  std::string name() const override { return "fold"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    for (ir::Node* n : g.nodes()) {
      int64_t in_elems = 0;
      bool all_const = true;
      std::vector<Tensor> ins;
      for (const ir::Value* v : n->inputs()) {
        if (!v) {
          ins.emplace_back();
          continue;
        }
        if (!is_const(v)) {
          all_const = false;
          break;
        }
        in_elems += v->constant().numel();
        ins.push_back(v->constant());
      }
      if (!all_const) continue;
      int64_t out_elems = 0;
      bool small = true;
      for (const ir::Value* v : n->outputs()) {
        if (!v->type().is_static()) {
          small = false;
          break;
        }
        int64_t e = 1;
        for (const auto& d : v->type().shape) e *= d.size;
        out_elems += e;
        small = small && e <= kMaxFoldElements;
      }
      if (!small || out_elems > in_elems + kMaxFoldElements) continue;
      std::vector<Tensor> outs;
      try {
        OpCall call{n->op(), std::move(ins), n->attrs(), KILN_HERE, Tensor(), nullptr};
        outs = run_kernel(call);
      } catch (const Error&) {
        continue;  // e.g. no CPU kernel for this dtype, or the op rejects these values: leave it to run time
      }
      if (outs.size() != n->outputs().size()) continue;
      bool types_ok = true;
      for (size_t i = 0; i < outs.size(); ++i)
        types_ok = types_ok && outs[i].dtype() == n->outputs()[i]->type().dtype &&
                   ir::static_shape(outs[i].shape()) == n->outputs()[i]->type().shape;
      if (!types_ok) continue;
      std::string what = n->str();
      std::vector<std::pair<ir::Value*, std::string>> renames;
      for (size_t i = 0; i < outs.size(); ++i) {
        ir::Value* c = g.add_constant(g.fresh_name("fold"), outs[i]);
        g.replace_all_uses(n->outputs()[i], c);
        renames.emplace_back(c, n->outputs()[i]->name());
      }
      g.erase_nodes({n});
      for (auto& [c, old] : renames) g.rename(c, old);  // the folded value keeps its name
      items.push_back(what);
    }
    return report("fold", "folded", items, "nothing to fold");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_fold() { return std::make_unique<FoldPass>(); }

}  // namespace kiln::compiler::passes
