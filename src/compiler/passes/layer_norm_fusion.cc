// LayerNorm fusion: the decomposed layer norm that PyTorch and ONNX exporters emit,
//   mu  = mean(x, trailing axes, keepdim)        d  = x - mu   (one sub, or two equal ones)
//   var = mean(d^2, same axes, keepdim)          d^2 as pow(d, 2) or d * d
//   n   = d / sqrt(var + eps)   or   d * rsqrt(var + eps)   or   d * pow(var + eps, -0.5)
//         or d * reciprocal(sqrt(var + eps))   or   d * (1 / sqrt(var + eps))
//   y   = n [* gamma] [+ beta]
// becomes one layer_norm(x, gamma, beta) {axis, eps} node (src/ops/defs/norm/layer_norm.cc), and
// the same without the mean (T5's and LLaMA's RMSNorm, Note [RMS norms from their parts]),
//   ms  = mean(x^2, trailing axes, keepdim)      n = x / sqrt(ms + eps) (any form above)
//   y   = n [* gamma]
// one rms_norm(x, gamma) {axis, eps}. eps
// must be a constant scalar >= 0, the reduced axes the trailing ones, and every intermediate
// private to the pattern (Note [Private intermediates]). gamma / beta join when they broadcast
// over the normalized dims only: a constant of any such shape (expanded to the normalized shape)
// or a value of exactly the normalized shape; otherwise the fused node stops before them and the
// mul / add stays. Anything else (eps outside the sqrt, a reduction over a middle axis, a
// variance read elsewhere) is left alone.
//
// Note [RMS norms from their parts]
// PyTorch exports T5's RMSNorm as pow(x, 2), mean, add eps, sqrt, 1 / that, mul by x, mul by the
// weight: six steps in an engine, four of them over the whole activation (T5-small's encoder at
// batch 8: 13 norms, ~3.9 of 131 ms, against ONNX Runtime's fused SimplifiedLayerNormalization at
// ~1.6). As one rms_norm it reads x twice (the second time from L1/L2) and writes y once.
#include <algorithm>
#include <numeric>

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

struct LayerNormMatch {
  ir::Value* x = nullptr;
  int64_t axis = 0;
  double eps = 0;
  ir::Value* gamma = nullptr;
  ir::Value* beta = nullptr;
  ir::Node* root = nullptr;
  std::set<ir::Node*> nodes;
  std::string how;  // "sqrt+div", "rsqrt*", ...
  bool rms = false;  // an RMS norm: no mean, no beta
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
        const bool cross = n->op().name() == "mul" && centered.count(n->inputs()[0]) && centered.count(n->inputs()[1]);
        if (squares(n, d) || cross) sq = n;
      }
    if (!sq) return std::nullopt;
    m.nodes.insert(sq);
    ir::Node* mean2 = sole_reader(g_, uses_, sq->output());
    if (!mean2 || trailing_mean_axis(mean2) != m.axis) return std::nullopt;
    m.nodes.insert(mean2);
    return finish(m, mean2, centered);
  }

  // The RMS form (Note [RMS norms from their parts]): `mean` reads x^2.
  std::optional<LayerNormMatch> match_rms(ir::Node* mean) {
    auto axis = trailing_mean_axis(mean);
    if (!axis) return std::nullopt;
    ir::Node* sq = producer_op(mean->inputs()[0], "pow");
    if (!sq) sq = producer_op(mean->inputs()[0], "mul");
    if (!sq || !squares(sq, sq->inputs()[0])) return std::nullopt;
    LayerNormMatch m;
    m.rms = true;
    m.x = sq->inputs()[0];
    m.axis = axis_ = *axis;
    if (!is_floating(m.x->type().dtype) || !(sq->output()->type() == m.x->type())) return std::nullopt;
    m.nodes = {sq, mean};
    return finish(m, mean, {m.x});
  }

 private:
  // Whether n computes v^2: pow(v, 2) or v * v.
  static bool squares(const ir::Node* n, const ir::Value* v) {
    if (n->inputs().size() != 2 || n->inputs()[0] != v) return false;
    if (n->op().name() == "pow") return scalar_const(n->inputs()[1]) == 2.0;
    return n->op().name() == "mul" && n->inputs()[1] == v;
  }

  // From the mean of squares `ms` on: + eps, the normalization of a value in `centered` (x itself
  // for an RMS norm), then the optional affine: * gamma, then + beta (each only when it
  // broadcasts over the normalized dims; no beta for an RMS norm).
  std::optional<LayerNormMatch> finish(LayerNormMatch& m, ir::Node* ms, const std::set<const ir::Value*>& centered) {
    const ir::ValueType& xt = m.x->type();
    ir::Node* add_eps = sole_reader(g_, uses_, ms->output());
    ir::Value* var = nullptr;
    if (!add_eps || add_eps->op().name() != "add") return std::nullopt;
    auto eps = scalar_operand(add_eps, &var);
    if (!eps || var != ms->output() || !(*eps >= 0.0) || !std::isfinite(*eps)) return std::nullopt;
    m.eps = *eps;
    m.nodes.insert(add_eps);
    ir::Node* n = normalize(add_eps->output(), centered, m);
    if (!n || !(n->output()->type() == xt)) return std::nullopt;
    m.root = n;
    // Every intermediate is read by the pattern only, and the statistics nowhere else.
    if (!private_to(g_, uses_, m.nodes, m.root)) return std::nullopt;
    if (ir::Node* mul = sole_reader(g_, uses_, m.root->output()); mul && mul->op().name() == "mul") {
      ir::Value* gamma = other_operand(mul, m.root->output());
      if (gamma && gamma != m.root->output() && (m.gamma = param(gamma, m.x, mul))) {
        m.nodes.insert(mul);
        m.root = mul;
      }
    }
    if (m.rms) return m;
    if (ir::Node* add = sole_reader(g_, uses_, m.root->output()); add && add->op().name() == "add") {
      ir::Value* beta = other_operand(add, m.root->output());
      if (beta && beta != m.root->output() && (m.beta = param(beta, m.x, add))) {
        m.nodes.insert(add);
        m.root = add;
      }
    }
    return m;
  }

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
      if (b->op().name() == "reciprocal") {
        m.how = "reciprocal(sqrt), mul";
      } else if (b->op().name() == "div" && scalar_const(b->inputs()[0]) == 1.0 && b->inputs()[1] == a->output()) {
        m.how = "1 / sqrt, mul";
      } else {
        return nullptr;
      }
      m.nodes.insert(b);
      inv_std = b->output();
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
      if (!m) m = LayerNormFusion(g, uses).match_rms(n);
      if (!m) continue;
      ir::Node* ln = m->rms ? g.add_node(kiln::op("rms_norm"), {m->x, m->gamma}, {{"axis", m->axis}, {"eps", m->eps}})
                            : g.add_node(kiln::op("layer_norm"), {m->x, m->gamma, m->beta},
                                         {{"axis", m->axis}, {"eps", m->eps}});
      if (!(ln->output()->type() == m->root->output()->type())) {
        g.erase_nodes({ln});
        continue;
      }
      std::string out = m->root->output()->name();
      size_t count = m->nodes.size();
      replace_pattern(g, m->root, ln, m->nodes);
      erased.insert(m->nodes.begin(), m->nodes.end());
      const char* op = m->rms ? "rms_norm" : "layer_norm";
      std::string item = "%" + out + " = " + op + "(%" + m->x->name() + ") {axis=" + std::to_string(m->axis) +
                         ", eps=" + format_double(m->eps) + "}" + (m->gamma ? " * weight" : "") +
                         (m->beta ? " + bias" : "") + " from " + std::to_string(count) + " nodes (" +
                         (m->rms ? "square, mean, " : "mean, sub, ") + m->how + ")";
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
