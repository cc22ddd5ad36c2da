// Transpose sinking: a permute read by ops that do not care about the order of dims moves past
// them, so that two permutes meet and cancel (the reshape pass composes them, identity drops the
// identity permutation):
//   op(permute(x, p))                  -> permute(op(x), p)          unary elementwise ops
//   op(permute(x, p), permute(y, p))   -> permute(op(x, y), p)       binary; a constant operand is
//   op(permute(x, p), c)               -> permute(op(x, c'), p)      permuted back (c' = c^(p^-1))
//   pad(permute(x, p), pads)           -> permute(pad(x, pads'), p)
//   reduce(permute(x, p), axes)        -> permute?(reduce(x, p[axes]))
//   concat(permute(x_i, p), axis)      -> permute(concat(x_i, p[axis]), p)
//
// Note [Sinking transposes]
// TensorFlow computes in NHWC and ONNX's Conv is NCHW, so tf2onnx wraps every convolution in a
// Transpose pair and relies on its own transpose optimizer to cancel them. Where that optimizer
// fails (tf2onnx 1.16 on Keras' MobileNetV3, whose hard-swish adds a scalar it cannot handle), the
// model reaches us with 128 Transposes: conv -> to NHWC -> add, relu6, mul (hard-swish), squeeze-
// excite means -> to NCHW -> conv. Each NHWC stretch ran as strided elementwise passes on permuted
// views, every convolution read a permuted copy, and no activation or bias joined a convolution:
// Keras' MobileNetV3-Large ran 2.3x ONNX Runtime's time (which cancels them). Sinking each permute
// past the ops after it, in graph order, carries it to the next permute the other way, where the
// two cancel, and the ops between run in NCHW on the convolution's own output. An op sinks a
// permute when every operand that is not a constant is a permute by the same p (or holds one
// value); a constant operand is re-laid out at compile time. A permute read also by something
// else stays for that reader.
#include <algorithm>
#include <numeric>
#include <set>

#include "compiler/passes/pattern.h"
#include "kiln/ops/shape.h"

namespace kiln::compiler::passes {
namespace {

const std::set<std::string> kUnary = {
    "relu",  "leaky_relu", "elu",   "hardsigmoid", "hardswish", "silu",  "softplus", "softsign", "selu", "celu",
    "mish",  "neg",        "abs",   "exp",         "log",       "sqrt",  "rsqrt",    "reciprocal", "sin", "cos",
    "tanh",  "sigmoid",    "erf",   "floor",       "ceil",      "round", "sign",     "clip",     "gelu", "cast"};
const std::set<std::string> kBinary = {"add", "sub", "mul", "div", "pow", "maximum", "minimum"};
const std::set<std::string> kReduce = {"mean", "sum", "max"};

// The permutation of a permute node, normalized, or empty.
std::vector<int64_t> perm_of(const ir::Value* v) {
  if (!v || !v->producer() || v->producer()->op().name() != "permute") return {};
  return normalized_perm(v->producer()->attrs().get_ints("dims"));
}

std::vector<int64_t> inverse(const std::vector<int64_t>& p) {
  std::vector<int64_t> inv(p.size());
  for (size_t i = 0; i < p.size(); ++i) inv[static_cast<size_t>(p[i])] = static_cast<int64_t>(i);
  return inv;
}

// Every dim 1 (a scalar or a [1, 1, ...] value): the same under any permutation.
bool one_value(const ir::Value* v) {
  for (const ir::Dim& d : v->type().shape)
    if (d.is_symbolic() || d.size != 1) return false;
  return true;
}

bool movable(const ir::Node* n) {
  const std::string& op = n->op().name();
  return n->outputs().size() == 1 && !n->inputs().empty() &&
         (kUnary.count(op) || kBinary.count(op) || kReduce.count(op) || op == "pad" || op == "concat");
}

// The dims reduced by a reduction of permute(x, p) along `axes`, as dims of x.
std::set<int64_t> reduced_dims(const ir::Node* n, const std::vector<int64_t>& p) {
  std::set<int64_t> reduced;
  const auto rank = static_cast<int64_t>(p.size());
  for (int64_t d : n->attrs().get_ints("axes")) reduced.insert(p[static_cast<size_t>(d < 0 ? d + rank : d)]);
  return reduced;
}

// The permute n's result needs once p has moved past n: p, or for a reduction without keepdim the
// order of x's kept dims, renumbered among themselves.
std::vector<int64_t> perm_after(const ir::Node* n, const std::vector<int64_t>& p) {
  if (!kReduce.count(n->op().name()) || n->attrs().get_bool("keepdim")) return p;
  const std::set<int64_t> reduced = reduced_dims(n, p);
  std::vector<int64_t> kept;
  for (int64_t d : p)
    if (!reduced.count(d)) kept.push_back(d);
  std::vector<int64_t> sorted = kept;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> after;
  for (int64_t d : kept) after.push_back(std::lower_bound(sorted.begin(), sorted.end(), d) - sorted.begin());
  return after;
}

// Whether a permute by p of v, moved on past every movable op that reads it, ends in a permute
// that undoes it (or in nothing, a reduction's kept dims being in order) on every path. Moving a
// permute that does not cancel only trades places with the ops after it (and can hide a pattern
// from a later pass: a scale between a permute and a matmul). `budget` bounds the search.
bool cancels(const ir::Graph& g, const Uses& uses, const ir::Value* v, const std::vector<int64_t>& p, int& budget) {
  if (is_identity_perm(p)) return true;
  auto it = uses.find(v);
  if (it == uses.end() || it->second.empty() || is_graph_output(g, v)) return false;
  for (const ir::Use& u : it->second) {
    if (!u.node || --budget < 0) return false;
    const ir::Node* r = u.node;
    if (r->op().name() == "permute") {
      std::vector<int64_t> q = perm_of(r->output());
      if (q.size() != p.size()) return false;
      for (size_t i = 0; i < q.size(); ++i)
        if (p[static_cast<size_t>(q[i])] != static_cast<int64_t>(i)) return false;
      continue;
    }
    if (!movable(r) || !cancels(g, uses, r->output(), perm_after(r, p), budget)) return false;
  }
  return true;
}

class TransposePass : public ir::Pass {
 public:
  std::string name() const override { return "transpose"; }

  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::vector<ir::Node*> dead;
    std::vector<std::pair<ir::Value*, std::string>> names;
    const std::vector<ir::Node*> order = g.nodes();
    const Uses uses = g.uses();
    for (ir::Node* n : order) {
      if (!movable(n) || !pays(g, uses, n)) continue;
      ir::Node* sunk = sink(g, n);
      if (!sunk) continue;
      items.push_back(n->op().name() + " %" + n->output()->name());
      g.replace_all_uses(n->output(), sunk->output());
      names.emplace_back(sunk->output(), n->output()->name());
      dead.push_back(n);
    }
    if (items.empty()) return report("transpose", "moved permutes past", {}, "no permute to move");
    g.erase_nodes(std::vector<ir::Node*>(dead.rbegin(), dead.rend()));
    for (auto& [v, nm] : names) g.rename(v, nm);
    topo_reorder(g);
    return report("transpose", "moved permutes past", items, "no permute to move");
  }

 private:
  // The permutation of n's first permuted operand, or empty.
  static std::vector<int64_t> first_perm(const ir::Node* n) {
    for (const ir::Value* v : n->inputs())
      if (std::vector<int64_t> q = perm_of(v); !q.empty()) return q;
    return {};
  }

  // Moving a permute past n pays where two permutes of its operands become one, or where it goes
  // on to cancel (cancels()).
  static bool pays(const ir::Graph& g, const Uses& uses, const ir::Node* n) {
    const std::vector<int64_t> p = first_perm(n);
    if (p.empty()) return false;
    std::set<const ir::Value*> permuted;
    for (const ir::Value* v : n->inputs())
      if (perm_of(v) == p) permuted.insert(v);
    int budget = 256;
    return permuted.size() >= 2 || cancels(g, uses, n->output(), perm_after(n, p), budget);
  }

  // The permute that now produces n's value (appended after n's replacement), or nullptr.
  static ir::Node* sink(ir::Graph& g, const ir::Node* n) {
    const std::string& op = n->op().name();
    const bool unary = kUnary.count(op) != 0, binary = kBinary.count(op) != 0;
    const std::vector<int64_t> p = first_perm(n);
    if (p.empty()) return nullptr;
    const size_t rank = p.size();
    const std::vector<int64_t> inv = inverse(p);
    // Each operand as the op reads it without the permute.
    std::vector<ir::Value*> ins;
    for (ir::Value* v : n->inputs()) {
      if (!v) return nullptr;
      if (perm_of(v) == p) {
        ins.push_back(v->producer()->inputs()[0]);
      } else if (binary && one_value(v)) {
        ins.push_back(v);
      } else if (binary && is_const(v) && v->type().shape.size() <= rank) {
        Shape full(rank - v->type().shape.size(), 1);
        const Shape s = v->constant().shape();
        full.insert(full.end(), s.begin(), s.end());
        Tensor c = kiln::permute(kiln::reshape(v->constant(), full), inv).contiguous();
        ins.push_back(g.add_constant(g.fresh_name(v->name() + "_t"), c));
      } else {
        return nullptr;
      }
    }
    if ((unary || op == "pad" || kReduce.count(op)) && ins.size() != 1) return nullptr;
    Attrs a = n->attrs();
    const std::vector<int64_t> after = perm_after(n, p);  // the permute of the result
    if (op == "pad") {
      const std::vector<int64_t>& pads = a.get_ints("pads");
      if (pads.size() != 2 * rank) return nullptr;
      std::vector<int64_t> moved(pads.size());
      for (size_t i = 0; i < rank; ++i) {
        moved[static_cast<size_t>(p[i])] = pads[i];
        moved[rank + static_cast<size_t>(p[i])] = pads[rank + i];
      }
      a.set("pads", moved);
    } else if (kReduce.count(op)) {
      if (a.get_ints("axes").empty()) return nullptr;  // every dim: nothing to gain
      const std::set<int64_t> reduced = reduced_dims(n, p);
      a.set("axes", std::vector<int64_t>(reduced.begin(), reduced.end()));
    } else if (op == "concat") {
      int64_t axis = a.get_int("axis");
      if (axis < 0) axis += static_cast<int64_t>(rank);
      a.set("axis", p[static_cast<size_t>(axis)]);
    }
    ir::Node* r = g.add_node(n->op(), ins, a);
    ir::Node* out = is_identity_perm(after) ? r : g.add_node(kiln::op("permute"), {r->output()}, Attrs{{"dims", after}});
    if (!(out->output()->type() == n->output()->type())) {
      std::vector<ir::Node*> made{out};
      if (out != r) made.push_back(r);
      g.erase_nodes(made);
      return nullptr;
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_transpose() { return std::make_unique<TransposePass>(); }

}  // namespace kiln::compiler::passes
