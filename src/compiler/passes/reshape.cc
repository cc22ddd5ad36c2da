// Reshape / transpose simplification:
//   reshape(reshape(x, s1), s2)          -> reshape(x, s2)   (also through squeeze/unsqueeze)
//   permute(permute(x, p1), p2)          -> permute(x, p1[p2]) (dropped when that is the identity)
//   permute that only moves size-1 dims  -> reshape (then merges with neighbouring reshapes)
//   reshape(x, ...) back to x's own type -> x
//   gather(x, constant scalar i, axis)   -> select(x, axis, i), a view (Note [Gather of one index])
// The inner node stays when something else reads it (dce removes it otherwise).
#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

// A permutation keeps the relative order of the non-1 dims: it is a reshape.
bool moves_only_unit_dims(const ir::ValueType& in, const std::vector<int64_t>& perm) {
  int64_t last = -1;
  for (int64_t d : perm) {
    const ir::Dim& dim = in.shape.at(static_cast<size_t>(d));
    if (!dim.is_symbolic() && dim.size == 1) continue;
    if (d < last) return false;
    last = d;
  }
  return true;
}

// Note [Gather of one index]
// ONNX has no select: PyTorch exports x[i] and unbind (the q, k, v of a packed input projection in
// nn.MultiheadAttention) as Gather with a constant 0-d index, which copies. Picking one index
// along an axis is a view, so it becomes select; only for a static axis and an index in range (a
// bad index then still fails where the gather would, with the gather's message). An index of one
// element with unit dims ([1], [1, 1]) is the same select with those dims put back by a reshape:
// ConvBERT's unfold (im2col over the sequence, kernel [9, 1]) gathers index [[0]] along a
// width of 1, a 1.7 MB copy in every layer.
ir::Node* gather_as_select(ir::Graph& g, ir::Node* n) {
  ir::Value* idx = input_at(n, 1);
  if (!is_const(idx) || !is_integral(idx->type().dtype)) return nullptr;
  for (const ir::Dim& d : idx->type().shape)
    if (d.is_symbolic() || d.size != 1) return nullptr;
  const ir::ValueType& xt = n->inputs()[0]->type();
  const int64_t rank = static_cast<int64_t>(xt.shape.size());
  int64_t axis = n->attrs().get_int("axis");
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return nullptr;
  const ir::Dim& d = xt.shape[static_cast<size_t>(axis)];
  const std::vector<double> v = const_values(idx);
  if (d.is_symbolic() || v.size() != 1) return nullptr;
  int64_t i = static_cast<int64_t>(v[0]);
  if (i < 0) i += d.size;
  if (i < 0 || i >= d.size) return nullptr;
  auto target = reshape_target(n->output()->type());
  if (!idx->type().shape.empty() && !target) return nullptr;
  ir::Node* sel = g.add_node(kiln::op("select"), {n->inputs()[0]}, {{"dim", axis}, {"index", i}});
  ir::Node* s =
      idx->type().shape.empty() ? sel : g.add_node(kiln::op("reshape"), {sel->output()}, {{"shape", *target}});
  if (!(s->output()->type() == n->output()->type())) {
    g.erase_nodes(s == sel ? std::vector<ir::Node*>{sel} : std::vector<ir::Node*>{s, sel});
    return nullptr;
  }
  return s;
}

class ReshapePass : public ir::Pass {
 public:
  std::string name() const override { return "reshape"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::vector<ir::Node*> dead;
    bool appended = false;
    for (ir::Node* n : g.nodes()) {
      if (n->inputs().empty() || !n->inputs()[0]) continue;
      ir::Value* x = n->inputs()[0];
      ir::Node* p = x->producer();
      const std::string& op = n->op().name();
      if (op == "gather") {
        if (ir::Node* s = gather_as_select(g, n)) {
          std::string before = n->str();
          std::string out_name = n->output()->name();
          g.replace_all_uses(n->output(), s->output());
          g.erase_nodes({n});
          g.rename(s->output(), out_name);
          items.push_back(before + " -> " + s->str());
          appended = true;
        }
        continue;
      }
      if (op == "permute") {
        auto perm = normalized_perm(n->attrs().get_ints("dims"));
        if (p && p->op().name() == "permute") {
          auto inner = normalized_perm(p->attrs().get_ints("dims"));
          std::vector<int64_t> comp(perm.size());
          for (size_t i = 0; i < perm.size(); ++i) comp[i] = inner[static_cast<size_t>(perm[i])];
          std::string before = n->str();
          n->set_input(0, p->inputs()[0]);
          Attrs a = n->attrs();
          a.set("dims", comp);
          n->set_attrs(a);
          items.push_back(before + " -> " + n->str());
          x = n->inputs()[0];
          p = x->producer();
          perm = comp;
        }
        if (moves_only_unit_dims(x->type(), perm) && reshape_target(n->output()->type())) {
          // Re-emit as a reshape with the same output name.
          std::string before = n->str();
          std::string out_name = n->output()->name();
          ir::Node* r = g.add_node(kiln::op("reshape"), {x}, {{"shape", *reshape_target(n->output()->type())}});
          if (!(r->output()->type() == n->output()->type())) {
            g.erase_nodes({r});
            continue;
          }
          g.replace_all_uses(n->output(), r->output());
          g.erase_nodes({n});
          g.rename(r->output(), out_name);
          items.push_back(before + " -> " + r->str());
          appended = true;
          n = r;
          p = x->producer();
        } else {
          continue;
        }
      }
      if (!is_reshape_like(n)) continue;
      if (p && is_reshape_like(p) && n->op().name() == "reshape") {
        std::string before = n->str();
        n->set_input(0, p->inputs()[0]);
        items.push_back(before + " -> " + n->str());
        x = n->inputs()[0];
      } else if (p && is_reshape_like(p) && reshape_target(n->output()->type())) {
        // squeeze/unsqueeze of a reshape: one reshape to the final type.
        std::string before = n->str();
        std::string out_name = n->output()->name();
        const std::vector<int64_t> target = *reshape_target(n->output()->type());
        ir::Node* r = g.add_node(kiln::op("reshape"), {p->inputs()[0]}, {{"shape", target}});
        if (!(r->output()->type() == n->output()->type())) {
          g.erase_nodes({r});
          continue;
        }
        g.replace_all_uses(n->output(), r->output());
        g.erase_nodes({n});
        g.rename(r->output(), out_name);
        items.push_back(before + " -> " + r->str());
        appended = true;
        n = r;
        x = r->inputs()[0];
      }
      if (x->type() == n->output()->type() &&
          !(is_graph_output(g, n->output()) && x->kind() != ir::Value::Kind::node_output)) {
        items.push_back("removed " + n->str());
        g.replace_all_uses(n->output(), x);
        dead.push_back(n);
      }
    }
    g.erase_nodes(dead);
    if (appended) topo_reorder(g);
    return report("reshape", "simplified", items, "nothing to simplify");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_reshape() { return std::make_unique<ReshapePass>(); }

}  // namespace kiln::compiler::passes
