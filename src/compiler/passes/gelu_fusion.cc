// GELU fusion: the decomposed GELU formulas exporters and hand-written models emit become one
// gelu node (src/ops/defs/unary/activation.cc):
//   erf form:   0.5 * x * (1 + erf(x / sqrt(2)))                      -> gelu(x) {approximate="none"}
//               (x / 1.4142 or x * 0.7071, the 0.5 anywhere in the product, or a division by 2)
//   tanh form:  0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))) -> gelu(x) {approximate="tanh"}
//               (x^3 as pow(x, 3), x * x * x or x * pow(x, 2), factors in any order)
// Products are matched by flattening chains of mul / div-by-constant (pattern.h), so the order in
// which the factors are multiplied does not matter; constants match within 1e-4 relative. Every
// intermediate must be private to the pattern (Note [Private intermediates]); anything else (a
// different constant, x in one place and another value in the other, sigmoid(1.702 x)) stays.
//
// The pass also fuses SiLU (swish), which ONNX before opset 24 cannot name, and hard-swish as
// paddle2onnx writes it:
//   x * sigmoid(x)                                                     -> silu(x)
//   x * hardsigmoid(x) {alpha 1/6, beta 0.5}                           -> hardswish(x)
// in either order. EfficientNet exports it after every convolution; fused, the convolution's
// epilogue applies it (passes/epilogue.cc) instead of a sigmoid pass and a mul pass
// over the whole feature map. The sigmoid stays where something else also reads it.
//
// And the hard activations, which TensorFlow (and so tf2onnx) writes out:
//   x * relu6(x + 3) / 6                                               -> hardswish(x)
//   relu6(x + 3) / 6                                                   -> hardsigmoid(x) {1/6, 0.5}
// (relu6 as clip(0, 6); the 1/6 as a multiply or a division, anywhere in the product). Keras'
// MobileNetV3 has one after most of its convolutions: decomposed, the add, clip and two muls each
// passed over the feature map, and the scalar operands kept them out of the blocked region.
#include <numbers>

#include "compiler/passes/pattern.h"

namespace kiln::compiler::passes {
namespace {

constexpr double kSqrt2 = std::numbers::sqrt2;
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;

// The muls and divisions by a constant that each alone read the one before, from v's reader on
// (at most `limit`): the products a formula's factor may sit in, innermost first.
std::vector<ir::Node*> products_above(const ir::Graph& g, const Uses& uses, ir::Value* v, size_t limit) {
  std::vector<ir::Node*> chain;
  while (chain.size() < limit) {
    ir::Node* r = sole_reader(g, uses, v);
    if (!r || r->outputs().size() != 1) break;
    const std::string& op = r->op().name();
    if (op != "mul" && !(op == "div" && r->inputs()[0] == v && scalar_const(r->inputs()[1]))) break;
    chain.push_back(r);
    v = r->output();
  }
  return chain;
}

struct GeluMatch {
  ir::Value* x = nullptr;
  bool tanh = false;
  ir::Node* root = nullptr;
  std::set<ir::Node*> nodes;
};

class GeluFusion {
 public:
  GeluFusion(const ir::Graph& g, const Uses& uses) : g_(g), uses_(uses) {}

  // `act` is an erf or tanh node.
  std::optional<GeluMatch> match(ir::Node* act) {
    GeluMatch m;
    m.tanh = act->op().name() == "tanh";
    if (act->inputs().size() != 1) return std::nullopt;
    m.nodes.insert(act);
    // p = 1 + act(.)
    ir::Node* plus = sole_reader(g_, uses_, act->output());
    ir::Value* a = nullptr;
    if (!plus || plus->op().name() != "add" || scalar_operand(plus, &a) != 1.0 || a != act->output())
      return std::nullopt;
    m.nodes.insert(plus);
    // The outer product x * p * 0.5: try the largest product above p first.
    const std::vector<ir::Node*> chain = products_above(g_, uses_, plus->output(), 8);
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      Product outer = flatten_product(g_, uses_, (*it)->output());
      if (outer.leaves.size() != 2 || !near(outer.factor, 0.5)) continue;
      ir::Value* x = outer.leaves[0] == plus->output() ? outer.leaves[1]
                     : outer.leaves[1] == plus->output() ? outer.leaves[0] : nullptr;
      if (!x || x == plus->output() || !(x->type() == (*it)->output()->type())) continue;
      std::set<ir::Node*> nodes = m.nodes;
      nodes.insert(outer.nodes.begin(), outer.nodes.end());
      if (!(m.tanh ? tanh_argument(act->inputs()[0], x, nodes) : erf_argument(act->inputs()[0], x, nodes)))
        continue;
      if (!private_to(g_, uses_, nodes, *it)) continue;
      m.x = x;
      m.root = *it;
      m.nodes = std::move(nodes);
      return m;
    }
    return std::nullopt;
  }

 private:
  // u = x / sqrt(2) (or x * 0.7071, x * (1 / sqrt 2) flattened).
  bool erf_argument(ir::Value* u, ir::Value* x, std::set<ir::Node*>& nodes) {
    if (!u->producer() || !sole_reader(g_, uses_, u)) return false;
    Product p = flatten_product(g_, uses_, u);
    if (p.leaves.size() != 1 || p.leaves[0] != x || !near(p.factor, 1.0 / kSqrt2)) return false;
    nodes.insert(p.nodes.begin(), p.nodes.end());
    return true;
  }

  // t = sqrt(2/pi) * (x + 0.044715 * x^3).
  bool tanh_argument(ir::Value* t, ir::Value* x, std::set<ir::Node*>& nodes) {
    if (!t->producer() || !sole_reader(g_, uses_, t)) return false;
    Product p = flatten_product(g_, uses_, t);
    if (p.leaves.size() != 1 || !near(p.factor, kSqrt2OverPi)) return false;
    ir::Node* inner = producer_op(p.leaves[0], "add");
    if (!inner || !sole_reader(g_, uses_, inner->output())) return false;
    ir::Value* cubic = other_operand(inner, x);
    if (!cubic || cubic == x || !cubic->producer() || !sole_reader(g_, uses_, cubic)) return false;
    Product c = flatten_product(g_, uses_, cubic);
    if (!near(c.factor, kCubic)) return false;
    int power = 0;
    std::vector<ir::Node*> pows;
    for (ir::Value* leaf : c.leaves) {
      if (leaf == x) {
        ++power;
        continue;
      }
      ir::Node* pw = producer_op(leaf, "pow");
      auto e = pw ? scalar_const(pw->inputs()[1]) : std::nullopt;
      if (!pw || pw->inputs()[0] != x || !e || (*e != 2.0 && *e != 3.0) || !sole_reader(g_, uses_, leaf)) return false;
      power += static_cast<int>(*e);
      pows.push_back(pw);
    }
    if (power != 3) return false;
    nodes.insert(p.nodes.begin(), p.nodes.end());
    nodes.insert(inner);
    nodes.insert(c.nodes.begin(), c.nodes.end());
    nodes.insert(pows.begin(), pows.end());
    return true;
  }

  const ir::Graph& g_;
  const Uses& uses_;
};

// The nodes reading v, each once.
std::vector<ir::Node*> readers_of(const Uses& uses, const ir::Value* v) {
  std::vector<ir::Node*> out;
  auto it = uses.find(v);
  if (it == uses.end()) return out;
  for (const ir::Use& u : it->second)
    if (u.node && std::find(out.begin(), out.end(), u.node) == out.end()) out.push_back(u.node);
  return out;
}

// relu6(x + 3) (the clip `relu6`) times 1/6, and times x for a hard-swish: the largest product
// above the clip that is one of the two, its nodes private to it.
struct HardMatch {
  ir::Value* x = nullptr;
  bool swish = false;
  ir::Node* root = nullptr;
  std::set<ir::Node*> nodes;
};

std::optional<HardMatch> hard_activation(const ir::Graph& g, const Uses& uses, ir::Node* relu6) {
  ir::Node* plus = producer_op(relu6->inputs()[0], "add");
  ir::Value* x = nullptr;
  if (!plus || !sole_reader(g, uses, plus->output()) || scalar_operand(plus, &x) != 3.0) return std::nullopt;
  const std::vector<ir::Node*> chain = products_above(g, uses, relu6->output(), 4);
  for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
    Product p = flatten_product(g, uses, (*it)->output());
    if (!near(p.factor, 1.0 / 6.0)) continue;
    const bool sigmoid = p.leaves.size() == 1 && p.leaves[0] == relu6->output();
    const bool swish = p.leaves.size() == 2 && ((p.leaves[0] == relu6->output() && p.leaves[1] == x) ||
                                                (p.leaves[1] == relu6->output() && p.leaves[0] == x));
    if (!(sigmoid || swish) || !((*it)->output()->type() == x->type())) continue;
    HardMatch m{x, swish, *it, {relu6, plus}};
    m.nodes.insert(p.nodes.begin(), p.nodes.end());
    if (!private_to(g, uses, m.nodes, *it)) continue;
    return m;
  }
  return std::nullopt;
}

class GeluFusionPass : public ir::Pass {
 public:
  std::string name() const override { return "gelu_fusion"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::set<const ir::Node*> erased;
    auto uses = g.uses();
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n) || (n->op().name() != "erf" && n->op().name() != "tanh")) continue;
      auto m = GeluFusion(g, uses).match(n);
      if (!m || !is_floating(m->x->type().dtype)) continue;
      const char* approx = m->tanh ? "tanh" : "none";
      ir::Node* ge = g.add_node(kiln::op("gelu"), {m->x}, {{"approximate", std::string(approx)}});
      if (!(ge->output()->type() == m->root->output()->type())) {
        g.erase_nodes({ge});
        continue;
      }
      std::string out = m->root->output()->name();
      size_t count = m->nodes.size();
      replace_pattern(g, m->root, ge, m->nodes);
      erased.insert(m->nodes.begin(), m->nodes.end());
      items.push_back("%" + out + " = gelu(%" + m->x->name() + ") {approximate=\"" + approx + "\"} from " +
                      std::to_string(count) + " nodes");
      uses = g.uses();
    }
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n)) continue;  // (erased: n is gone, nothing of it may be read)
      // x * sigmoid(x) is silu(x); x * hardsigmoid(x) at PyTorch's 1/6 and 0.5 (as paddle2onnx
      // writes hard-swish) is hardswish(x).
      const bool sigmoid = n->op().name() == "sigmoid";
      const bool hard = n->op().name() == "hardsigmoid" && near(n->attrs().get_float("alpha"), 1.0 / 6.0, 1e-6) &&
                        n->attrs().get_float("beta") == 0.5;
      if ((!sigmoid && !hard) || n->inputs().size() != 1) continue;
      ir::Value* x = n->inputs()[0];
      if (!x || !is_floating(x->type().dtype)) continue;
      for (ir::Node* mul : readers_of(uses, n->output())) {
        if (erased.count(mul) || mul->op().name() != "mul" || other_operand(mul, n->output()) != x ||
            !(mul->output()->type() == x->type()))
          continue;
        ir::Node* si = g.add_node(kiln::op(sigmoid ? "silu" : "hardswish"), {x});
        std::string out = mul->output()->name();
        replace_pattern(g, mul, si, {mul});
        erased.insert(mul);
        items.push_back("%" + out + " = " + si->op().name() + "(%" + x->name() + ") from mul and " + n->op().name());
      }
      uses = g.uses();
    }
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n) || activation_of(n) != "relu6") continue;
      auto m = hard_activation(g, uses, n);
      if (!m) continue;
      ir::Node* h = m->swish ? g.add_node(kiln::op("hardswish"), {m->x})
                             : g.add_node(kiln::op("hardsigmoid"), {m->x}, {{"alpha", 1.0 / 6.0}, {"beta", 0.5}});
      if (!(h->output()->type() == m->root->output()->type())) {
        g.erase_nodes({h});
        continue;
      }
      const std::string out = m->root->output()->name();
      const size_t count = m->nodes.size();
      replace_pattern(g, m->root, h, m->nodes);
      erased.insert(m->nodes.begin(), m->nodes.end());
      items.push_back("%" + out + " = " + h->op().name() + "(%" + m->x->name() + ") from " + std::to_string(count) +
                      " nodes");
      uses = g.uses();
    }
    if (!items.empty()) topo_reorder(g);
    return report("gelu_fusion", "fused", items, "nothing to fuse");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_gelu_fusion() { return std::make_unique<GeluFusionPass>(); }

}  // namespace kiln::compiler::passes
