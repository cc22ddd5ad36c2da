// Elementwise-chain fusion (-O3): a connected group of pointwise ops (unary math/activations and
// add/sub/mul/div/maximum/minimum/pow, broadcasting included) becomes one fused_elementwise node
// that reads each input once and writes one output (Note [Elementwise programs] in
// src/ops/defs/fused/elementwise.cc). Every group has exactly one value read outside it, its last
// node's output. Only f32/f64 groups whose values all share one dtype fuse; groups of one node
// stay as they are.
#include <algorithm>
#include <set>

#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

const std::set<std::string> kUnary = {"neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sin", "cos",
                                      "tanh", "sigmoid", "relu", "silu", "gelu", "erf"};
const std::set<std::string> kBinary = {"add", "sub", "mul", "div", "maximum", "minimum", "pow"};
constexpr size_t kMaxGroup = 48;

bool pointwise(const ir::Node* n) {
  const std::string& op = n->op().name();
  size_t arity = kUnary.count(op) ? 1 : kBinary.count(op) ? 2 : 0;
  if (!arity || n->inputs().size() != arity || n->outputs().size() != 1) return false;
  DType dt = n->output()->type().dtype;
  if (dt != DType::f32 && dt != DType::f64) return false;
  return std::all_of(n->inputs().begin(), n->inputs().end(),
                     [&](const ir::Value* v) { return v && v->type().dtype == dt; });
}

std::string program_op(const ir::Node* n) {
  if (n->op().name() == "gelu") return n->attrs().get_string("approximate") == "tanh" ? "gelu_tanh" : "gelu";
  return n->op().name();
}

class EltwisePass : public ir::Pass {
 public:
  std::string name() const override { return "eltwise"; }
  ir::PassResult run(ir::Graph& g) override {
    auto uses = g.uses();
    // Connected components of pointwise nodes (through pointwise producers). A component whose
    // only value read outside it is its last node's output fuses whole (a DAG: one value may feed
    // several members); otherwise its nodes regroup into chains, where a node joins the group of
    // a producer whose output only it reads.
    std::vector<ir::Node*> pw;
    std::map<const ir::Node*, size_t> comp;
    std::vector<size_t> parent;
    auto find = [&](size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    for (ir::Node* n : g.nodes()) {
      if (!pointwise(n)) continue;
      size_t id = parent.size();
      parent.push_back(id);
      comp[n] = id;
      pw.push_back(n);
      for (const ir::Value* v : n->inputs())
        if (v->producer() && comp.count(v->producer())) parent[find(comp[v->producer()])] = find(id);
    }
    std::map<size_t, std::vector<ir::Node*>> components;
    for (ir::Node* n : pw) components[find(comp[n])].push_back(n);
    std::vector<std::vector<ir::Node*>> groups;
    for (auto& [root, members] : components) {
      std::set<const ir::Node*> in(members.begin(), members.end());
      int escapes = 0;
      bool last_escapes = false;
      for (const ir::Node* m : members) {
        bool out = is_graph_output(g, m->output());
        auto it = uses.find(m->output());
        if (it != uses.end())
          for (const ir::Use& u : it->second) out = out || !u.node || !in.count(u.node);
        escapes += out;
        if (m == members.back()) last_escapes = out;
      }
      if (escapes == 1 && last_escapes && members.size() <= kMaxGroup) {
        groups.push_back(members);
        continue;
      }
      std::map<const ir::Node*, size_t> group_of;
      for (ir::Node* n : members) {
        size_t gid = groups.size();
        for (const ir::Value* v : n->inputs()) {
          const ir::Node* p = v->producer();
          if (!p || !group_of.count(p) || use_count(uses, v) != 1 || is_graph_output(g, v)) continue;
          if (groups[group_of[p]].size() >= kMaxGroup) continue;
          gid = group_of[p];
          break;
        }
        if (gid == groups.size()) groups.emplace_back();
        groups[gid].push_back(n);
        group_of[n] = gid;
      }
    }
    std::vector<std::string> items;
    for (auto& grp : groups) {
      if (grp.size() < 2) continue;
      std::set<const ir::Node*> members(grp.begin(), grp.end());
      std::vector<ir::Value*> inputs;
      std::map<const ir::Value*, int> reg;
      for (ir::Node* n : grp)
        for (ir::Value* v : n->inputs())
          if (!members.count(v->producer()) && !reg.count(v)) {
            reg[v] = static_cast<int>(inputs.size());
            inputs.push_back(v);
          }
      std::string prog, what;
      for (size_t i = 0; i < grp.size(); ++i) {
        const ir::Node* n = grp[i];
        if (i) prog += "; ";
        prog += program_op(n);
        for (const ir::Value* v : n->inputs()) {
          prog += ' ';
          prog += std::to_string(reg.at(v));
        }
        reg[n->output()] = static_cast<int>(inputs.size() + i);
        if (i) what += " -> ";
        what += n->op().name();
      }
      ir::Value* tail = grp.back()->output();
      ir::Node* f = g.add_node(kiln::op("fused_elementwise"), inputs, {{"program", prog}});
      if (!(f->output()->type() == tail->type())) {
        g.erase_nodes({f});
        continue;
      }
      std::string name = tail->name();
      g.replace_all_uses(tail, f->output());
      g.erase_nodes(std::vector<ir::Node*>(grp.rbegin(), grp.rend()));
      g.rename(f->output(), name);
      std::string item = "%";
      item.append(name).append(" = ").append(what).append(" (").append(std::to_string(inputs.size()));
      item.append(" input(s))");
      items.push_back(std::move(item));
    }
    if (!items.empty()) topo_reorder(g);
    return report("eltwise", "fused", items, "nothing to fuse");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_eltwise() { return std::make_unique<EltwisePass>(); }

}  // namespace kiln::compiler::passes
