// LayerNorm fusion: the decomposed layer norm that PyTorch and ONNX exporters emit,
//   mu  = mean(x, trailing axes, keepdim)        d  = x - mu   (one sub, or two equal ones)
//   var = mean(d^2, same axes, keepdim)          d^2 as pow(d, 2) or d * d
//   n   = d / sqrt(var + eps)   or   d * rsqrt(var + eps)   or   d * pow(var + eps, -0.5)
//         or d * reciprocal(sqrt(var + eps))
//   y   = n [* gamma] [+ beta]
// becomes one layer_norm(x, gamma, beta) {axis, eps} node (src/ops/defs/norm/layer_norm.cc). eps
// must be a constant scalar >= 0, the reduced axes the trailing ones, and every intermediate
// private to the pattern (Note [Private intermediates]). gamma / beta join when they broadcast
// over the normalized dims only: a constant of any such shape (expanded to the normalized shape)
// or a value of exactly the normalized shape; otherwise the fused node stops before them and the
// mul / add stays. Anything else (eps outside the sqrt, a reduction over a middle axis, a
// variance read elsewhere) is left alone.
#include <algorithm>
#include <numeric>
#include <sstream>

#include "compiler/passes/pattern.h"

namespace kiln::compiler::passes {
namespace {

// The reduced axes of a keepdim mean over the trailing dims of its input, as the first normalized
// axis; nullopt otherwise.
std::optional<int64_t> trailing_mean_axis(const ir::Node* n) {
  if (n->op().name() != "mean" || n->inputs().size() != 1 || !n->attrs().get_bool("keepdim")) return std::nullopt;
  const int64_t r = static_cast<int64_t>(n->inputs()[0]->type().shape.size());
  std::vector<int64_t> axes = n->attrs().get_ints("axes");
  if (axes.empty()) {  // all axes
    axes.resize(static_cast<size_t>(r));
    std::iota(axes.begin(), axes.end(), 0);
  }
  for (auto& a : axes) {
    if (a < -r || a >= r) return std::nullopt;
    a = a < 0 ? a + r : a;
  }
  std::sort(axes.begin(), axes.end());
  if (axes.empty() || std::adjacent_find(axes.begin(), axes.end()) != axes.end()) return std::nullopt;
  if (axes.back() != r - 1 || axes.front() != r - static_cast<int64_t>(axes.size())) return std::nullopt;
  return axes.front();
}

std::string format_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

struct LayerNormMatch {
  ir::Value* x = nullptr;
  int64_t axis = 0;
  double eps = 0;
  ir::Value* gamma = nullptr;
  ir::Value* beta = nullptr;
  ir::Node* root = nullptr;
  std::set<ir::Node*> nodes;
  std::string how;  // "sqrt+div", "rsqrt*", ...
};

class LayerNormFusion {
 public:
  LayerNormFusion(ir::Graph& g, const Uses& uses) : g_(g), uses_(uses) {}

  std::optional<LayerNormMatch> match(ir::Node* mean1) {
    auto axis = trailing_mean_axis(mean1);
    if (!axis) return std::nullopt;
    LayerNormMatch m;
    m.x = mean1->inputs()[0];
    m.axis = axis_ = *axis;
    const ir::ValueType& xt = m.x->type();
    if (!is_floating(xt.dtype)) return std::nullopt;
    m.nodes.insert(mean1);
    // d = x - mu: every reader of mu must be one.
    std::set<const ir::Value*> centered;
    auto it = uses_.find(mean1->output());
    if (it == uses_.end() || is_graph_output(g_, mean1->output())) return std::nullopt;
    for (const ir::Use& u : it->second) {
      ir::Node* s = u.node;
      if (!s || s->op().name() != "sub" || s->inputs().size() != 2 || s->inputs()[0] != m.x ||
          s->inputs()[1] != mean1->output() || !(s->output()->type() == xt))
        return std::nullopt;
      m.nodes.insert(s);
      centered.insert(s->output());
    }
    // var = mean(d^2)
    ir::Node* sq = nullptr;
    for (const ir::Value* d : centered)
      for (const ir::Use& u : uses_.at(d)) {
        ir::Node* n = u.node;
        if (!n || sq) continue;
        const std::string& op = n->op().name();
        if (op == "pow" && n->inputs()[0] == d && scalar_const(n->inputs()[1]) == 2.0) sq = n;
        if (op == "mul" && centered.count(n->inputs()[0]) && centered.count(n->inputs()[1])) sq = n;
      }
    if (!sq) return std::nullopt;
    m.nodes.insert(sq);
    ir::Node* mean2 = sole_reader(g_, uses_, sq->output());
    if (!mean2 || trailing_mean_axis(mean2) != m.axis) return std::nullopt;
    m.nodes.insert(mean2);
    // + eps
    ir::Node* add_eps = sole_reader(g_, uses_, mean2->output());
    ir::Value* var = nullptr;
    if (!add_eps || add_eps->op().name() != "add") return std::nullopt;
    auto eps = scalar_operand(add_eps, &var);
    if (!eps || var != mean2->output() || !(*eps >= 0.0) || !std::isfinite(*eps)) return std::nullopt;
    m.eps = *eps;
    m.nodes.insert(add_eps);
    // 1 / sqrt
    ir::Node* n = normalize(add_eps->output(), centered, m);
    if (!n || !(n->output()->type() == xt)) return std::nullopt;
    m.root = n;
    // Every centered value is read by the pattern only, and the statistics nowhere else.
    if (!private_to(g_, uses_, m.nodes, m.root)) return std::nullopt;
    // Optional affine: * gamma, then + beta (each only when it broadcasts over the normalized dims).
    if (ir::Node* mul = sole_reader(g_, uses_, m.root->output()); mul && mul->op().name() == "mul") {
      ir::Value* gamma = other_operand(mul, m.root->output());
      if (gamma && gamma != m.root->output() && (m.gamma = param(gamma, m.x, mul))) {
        m.nodes.insert(mul);
        m.root = mul;
      }
    }
    if (ir::Node* add = sole_reader(g_, uses_, m.root->output()); add && add->op().name() == "add") {
      ir::Value* beta = other_operand(add, m.root->output());
      if (beta && beta != m.root->output() && (m.beta = param(beta, m.x, add))) {
        m.nodes.insert(add);
        m.root = add;
      }
    }
    return m;
  }

 private:
  // The node computing d / sqrt(ve) (or its product forms) from ve = var + eps.
  ir::Node* normalize(ir::Value* ve, const std::set<const ir::Value*>& centered, LayerNormMatch& m) {
    ir::Node* a = sole_reader(g_, uses_, ve);
    if (!a) return nullptr;
    const std::string& op = a->op().name();
    ir::Value* inv_std = nullptr;  // 1 / sqrt(ve), multiplied into d
    if (op == "sqrt") {
      m.nodes.insert(a);
      ir::Node* b = sole_reader(g_, uses_, a->output());
      if (!b) return nullptr;
      if (b->op().name() == "div" && centered.count(b->inputs()[0]) && b->inputs()[1] == a->output()) {
        m.nodes.insert(b);
        m.how = "sqrt, div";
        return b;
      }
      if (b->op().name() != "reciprocal") return nullptr;
      m.nodes.insert(b);
      inv_std = b->output();
      m.how = "reciprocal(sqrt), mul";
    } else if (op == "rsqrt") {
      m.nodes.insert(a);
      inv_std = a->output();
      m.how = "rsqrt, mul";
    } else if (op == "pow" && a->inputs()[0] == ve && scalar_const(a->inputs()[1]) == -0.5) {
      m.nodes.insert(a);
      inv_std = a->output();
      m.how = "pow -0.5, mul";
    } else {
      return nullptr;
    }
    ir::Node* mul = sole_reader(g_, uses_, inv_std);
    if (!mul || mul->op().name() != "mul") return nullptr;
    ir::Value* d = other_operand(mul, inv_std);
    if (!d || !centered.count(d)) return nullptr;
    m.nodes.insert(mul);
    return mul;
  }

  // gamma or beta as layer_norm's weight / bias input: the value itself when it has exactly the
  // normalized shape, a new constant expanded to it when a constant broadcasts into the
  // normalized dims only; nullptr otherwise. `user` (x * gamma or + beta) must keep x's type.
  ir::Value* param(ir::Value* p, const ir::Value* x, const ir::Node* user) {
    const ir::ValueType& xt = x->type();
    if (!(user->output()->type() == xt) || p->type().dtype != xt.dtype) return nullptr;
    const size_t r = xt.shape.size(), axis = static_cast<size_t>(axis_);
    ir::SymShape norm(xt.shape.begin() + static_cast<std::ptrdiff_t>(axis), xt.shape.end());
    if (p->type().shape == norm) return p;
    if (!is_const(p) || !ir::ValueType{xt.dtype, norm}.is_static()) return nullptr;
    const Shape& ps = p->constant().shape();
    if (ps.size() > r) return nullptr;
    for (size_t i = 0; i < ps.size(); ++i) {
      const size_t xd = r - ps.size() + i;
      if (xd < axis && ps[i] != 1) return nullptr;  // varies along a dim that is not normalized
    }
    Shape ns;
    for (const ir::Dim& d : norm) ns.push_back(d.size);
    Shape trimmed(ps.begin() + static_cast<std::ptrdiff_t>(ps.size() > ns.size() ? ps.size() - ns.size() : 0),
                  ps.end());
    Tensor t = p->constant().reshape(trimmed).broadcast_to(ns).contiguous();
    return g_.add_constant(g_.fresh_name(p->name() + "_ln"), t);
  }

  ir::Graph& g_;
  const Uses& uses_;
  int64_t axis_ = 0;  // the first normalized axis of the current match
};

class LayerNormFusionPass : public ir::Pass {
 public:
  std::string name() const override { return "layer_norm_fusion"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::set<const ir::Node*> erased;
    auto uses = g.uses();
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n) || n->op().name() != "mean") continue;
      auto m = LayerNormFusion(g, uses).match(n);
      if (!m) continue;
      ir::Node* ln = g.add_node(kiln::op("layer_norm"), {m->x, m->gamma, m->beta}, {{"axis", m->axis}, {"eps", m->eps}});
      if (!(ln->output()->type() == m->root->output()->type())) {
        g.erase_nodes({ln});
        continue;
      }
      std::string out = m->root->output()->name();
      size_t count = m->nodes.size();
      replace_pattern(g, m->root, ln, m->nodes);
      erased.insert(m->nodes.begin(), m->nodes.end());
      std::string item = "%" + out + " = layer_norm(%" + m->x->name() + ") {axis=" + std::to_string(m->axis) +
                         ", eps=" + format_double(m->eps) + "}" + (m->gamma ? " * weight" : "") +
                         (m->beta ? " + bias" : "") + " from " + std::to_string(count) + " nodes (mean, sub, " +
                         m->how + ")";
      items.push_back(std::move(item));
      uses = g.uses();
    }
    if (!items.empty()) topo_reorder(g);
    return report("layer_norm_fusion", "fused", items, "nothing to fuse");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_layer_norm_fusion() { return std::make_unique<LayerNormFusionPass>(); }

}  // namespace kiln::compiler::passes
