// Epilogue fusion: conv2d, gemm, or matmul by a 2-D weight (the input of any rank >= 2: a Linear
// layer over a sequence) followed by a bias add, an activation (relu, relu6 = clip(0, 6), sigmoid,
// tanh, silu, gelu, hardswish) and a residual add, in the orders
//   anchor [+ bias] [+ residual] [act]      (residual_before_activation = true)
//   anchor [+ bias] [act] [+ residual]
// becomes one fused_conv2d / fused_gemm node (src/ops/defs/fused/fused.cc) that applies them in
// one pass right after the convolution / GEMM (Note [Fused kernels]). Each fused intermediate must
// have exactly one reader and not be a graph output; a bias add needs a constant broadcast per
// output channel ([C,1,1] / [1,C,1,1] for conv, [N] / [1,N] for gemm and matmul). Only f32 and f64
// graphs fuse (the fused kernels' dtypes). A bare anchor with nothing to fuse stays as it is.
//
// Note [Epilogues that grow]: a fused_gemm / fused_conv2d is an anchor too, for what its epilogue
// still lacks: a bias add where it has no residual or activation yet, a residual and an activation
// where it has neither, the activation after its residual, the residual after its activation. A
// later pass can bring an op next to a node this pass fused in an earlier round: LeViT's Linear +
// BatchNorm1d is matmul -> flatten -> batch_norm -> reshape, and only after bn_fold put the
// BatchNorm into the matmul's bias (fused in round 0) did the reshape pass, in round 1, remove the
// reshapes between it and the hardswish and residual add that follow (22 hardswish and 20 add steps
// left standing in timm's levit_128s).
//
// Note [Epilogues past a reshape]
// A 1-D convolution imports as unsqueeze -> conv2d -> squeeze, so the activation and residual add
// after it read the squeeze, not the convolution: SqueezeBERT's GELU and residual adds (12 layers of
// grouped Conv1d) ran as steps of their own. An activation or a same-shaped add commutes with a
// change of shape, so where an anchor's sole reader is a reshape (squeeze, unsqueeze) read by such
// an op alone, the op moves before it: act(reshape(y)) -> reshape(act(y)), and
// reshape(y) + r -> reshape(y + reshape(r)) with r given the anchor's shape (a view where r's
// strides allow, as the unit dims of a 1-D convolution's always do). The epilogue then takes the op,
// and the reshape pass folds the squeeze into the next convolution's unsqueeze.
#include <algorithm>
#include <set>

#include "compiler/passes/pattern.h"

namespace kiln::compiler::passes {
namespace {

// v (of r's output type) taken back to the type of r's input by r's inverse: unsqueeze for a squeeze
// of given dims and the reverse (so that it is the node a 1-D convolution's import already made for
// the same value, which cse then shares), else a reshape. Nullptr where there is no static target.
ir::Node* back_to(ir::Graph& g, const ir::Node* r, ir::Value* v) {
  const ir::ValueType& to = r->inputs()[0]->type();
  const std::string& op = r->op().name();
  if ((op == "squeeze" || op == "unsqueeze") && !r->attrs().get_ints("dims").empty()) {
    // squeeze's dims index its input; unsqueeze's its output: either way, dims of the larger rank.
    const int64_t rank = static_cast<int64_t>(std::max(to.shape.size(), r->output()->type().shape.size()));
    std::vector<int64_t> dims = r->attrs().get_ints("dims");
    for (int64_t& d : dims) d = d < 0 ? d + rank : d;
    std::sort(dims.begin(), dims.end());
    ir::Node* n = g.add_node(kiln::op(op == "squeeze" ? "unsqueeze" : "squeeze"), {v}, {{"dims", dims}});
    if (n->output()->type() == to) return n;
    g.erase_nodes({n});
  }
  auto target = reshape_target(to);
  return target ? g.add_node(kiln::op("reshape"), {v}, {{"shape", *target}}) : nullptr;
}

// Note [Epilogues past a reshape]: where y's sole reader is a reshape-like node R whose output's
// sole reader u is an activation or an add of R's output and a value of its type, u applied to y
// (the other operand reshaped to y's shape) and R after it take their place, appended (the caller
// re-orders the graph). Returns the nodes erased, u and R (no longer to be dereferenced), and what
// moved; nothing when it did not apply.
struct Moved {
  std::vector<const ir::Node*> erased;
  std::string what;
};
Moved move_before_reshape(ir::Graph& g, ir::Value* y, const Uses& uses) {
  ir::Node* r = sole_reader(g, uses, y);
  if (!r || !is_reshape_like(r) || r->outputs().size() != 1 || r->inputs()[0] != y) return {};
  ir::Value* ry = r->output();
  ir::Node* u = sole_reader(g, uses, ry);  // so an add reads ry once: its other operand is another value
  if (!u || u->outputs().size() != 1 || !(u->output()->type() == ry->type())) return {};
  std::vector<ir::Value*> ins;
  if (activation_of(u)) {
    ins = {y};
  } else if (ir::Value* other = u->op().name() == "add" ? other_operand(u, ry) : nullptr) {
    if (!(other->type() == ry->type())) return {};
    ir::Node* shaped = back_to(g, r, other);
    if (!shaped) return {};
    ins = u->inputs()[0] == ry ? std::vector<ir::Value*>{y, shaped->output()}
                               : std::vector<ir::Value*>{shaped->output(), y};
  } else {
    return {};
  }
  ir::Node* moved = g.add_node(u->op(), ins, u->attrs());
  ir::Node* after = g.add_node(r->op(), {moved->output()}, r->attrs());
  const std::string name = u->output()->name();
  Moved m{{u, r}, u->op().name() + " moved before the " + r->op().name() + " of %" + y->name()};
  g.replace_all_uses(u->output(), after->output());
  g.erase_nodes({u, r});
  g.rename(after->output(), name);  // the reshape now gives u's value; the op's own is <name>_pre
  g.rename(moved->output(), g.find(name + "_pre") ? g.fresh_name(name + "_pre") : name + "_pre");
  return m;
}

class EpiloguePass : public ir::Pass {
 public:
  std::string name() const override { return "epilogue"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::set<const ir::Node*> erased;
    auto uses = g.uses();
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n)) continue;
      const std::string& op = n->op().name();
      const bool fused = op == "fused_gemm" || op == "fused_conv2d";  // Note [Epilogues that grow]
      const bool conv = op == "conv2d" || op == "fused_conv2d";
      if (!conv && !fused && op != "gemm" && op != "matmul") continue;
      // What a fused anchor's epilogue has already: both a residual and an activation is all it takes.
      ir::Value* residual = fused ? input_at(n, 3) : nullptr;
      std::string act = fused ? n->attrs().get_string("activation") : "none";
      if (residual && act != "none") continue;
      ir::Value* cur = n->output();
      const ir::ValueType type = cur->type();
      if (type.dtype != DType::f32 && type.dtype != DType::f64) continue;
      // matmul: a 2-D weight after an input of any rank >= 2 (a Linear layer over a sequence; Note
      // [Fused GEMM over a sequence] in src/ops/defs/fused/fused.cc); conv2d and gemm: their ranks.
      const bool seq_matmul = op == "matmul" && type.shape.size() >= 2 && n->inputs()[0]->type().shape.size() >= 2 &&
                              n->inputs()[1]->type().shape.size() == 2;
      if (op == "matmul" && !seq_matmul) continue;
      if (!fused && !seq_matmul && type.shape.size() != (conv ? 4u : 2u)) continue;
      const size_t ch_axis = conv ? 1 : type.shape.size() - 1;
      if (type.shape[ch_axis].is_symbolic()) continue;
      if (!std::all_of(n->inputs().begin(), n->inputs().end(),
                       [&](const ir::Value* v) { return !v || v->type().dtype == type.dtype; }))
        continue;
      {
        const int64_t ch = type.shape[ch_axis].size;
        // The anchor's own bias.
        std::optional<std::vector<double>> bias;
        ir::Value* own_bias = nullptr;  // conv2d's and the fused anchors' bias input
        if (conv || fused) {
          own_bias = input_at(n, 2);
        } else if (op == "gemm" && input_at(n, 2)) {
          const ir::Value* c = input_at(n, 2);
          if (!is_const(c)) continue;
          Shape s = c->constant().shape();
          bool per_col = s.empty() || s == Shape{1} || s == Shape{ch} || s == Shape{1, ch} || s == Shape{1, 1};
          if (!per_col) continue;
          Tensor cb = c->constant().to(DType::f64).reshape({-1}).broadcast_to({ch}).contiguous();
          double beta = n->attrs().get_float("beta");
          bias = std::vector<double>(static_cast<size_t>(ch));
          for (int64_t j = 0; j < ch; ++j) (*bias)[static_cast<size_t>(j)] = beta * cb.data<double>()[j];
        }
        auto sole_user = [&](const ir::Value* v) -> ir::Node* {
          if (v == cur) {  // Note [Epilogues past a reshape]
            for (Moved m = move_before_reshape(g, cur, uses); !m.erased.empty();
                 m = move_before_reshape(g, cur, uses)) {
              erased.insert(m.erased.begin(), m.erased.end());
              items.push_back(m.what);
              uses = g.uses();
            }
          }
          auto it = uses.find(v);
          if (it == uses.end() || it->second.size() != 1 || !it->second[0].node) return nullptr;
          ir::Node* u = it->second[0].node;
          return u->outputs().size() == 1 && u->output()->type() == type ? u : nullptr;
        };
        std::vector<ir::Node*> chain;
        std::vector<std::string> what;
        // 1. bias add (a fused anchor's only before its residual and activation)
        if (ir::Node* u = sole_user(cur); u && u->op().name() == "add" && !residual && act == "none") {
          ir::Value* other = u->inputs()[0] == cur ? u->inputs()[1] : u->inputs()[0];
          auto cb = per_channel_values(other, ch, conv);
          if (cb && (!own_bias || is_const(own_bias))) {
            if (own_bias) {
              auto old = const_values(own_bias);
              for (size_t i = 0; i < cb->size(); ++i) (*cb)[i] += old[i];
            }
            if (bias)
              for (size_t i = 0; i < cb->size(); ++i) (*cb)[i] += (*bias)[i];
            bias = cb;
            chain.push_back(u);
            what.push_back("bias");
            cur = u->output();
          }
        }
        // 2. residual and activation, in either order (a fused anchor's residual without an
        // activation comes before one taken now)
        bool before = residual != nullptr;
        auto take_residual = [&]() {
          ir::Node* u = sole_user(cur);
          if (!u || u->op().name() != "add" || u->inputs()[0] == u->inputs()[1]) return false;
          ir::Value* other = u->inputs()[0] == cur ? u->inputs()[1] : u->inputs()[0];
          if (!(other->type() == type)) return false;
          residual = other;
          chain.push_back(u);
          what.push_back("residual %" + other->name());
          cur = u->output();
          return true;
        };
        if (!residual && act == "none") before = take_residual();
        if (ir::Node* u = act == "none" ? sole_user(cur) : nullptr) {
          if (auto a = activation_of(u)) {
            act = *a;
            chain.push_back(u);
            what.push_back(act);
            cur = u->output();
          }
        }
        if (!residual) take_residual();
        if (chain.empty()) continue;
        // Build the fused node.
        std::vector<ir::Value*> ins{n->inputs()[0], n->inputs()[1], nullptr, residual};
        Attrs a = fused ? n->attrs() : Attrs{};  // a fused anchor's own attributes, its geometry with them
        a.set("activation", act);
        a.set("residual_before_activation", before && act != "none");
        if (bias) {
          ins[2] = g.add_constant(g.fresh_name("epi_bias"), tensor_from(*bias, {ch}, type.dtype));
        } else {
          ins[2] = own_bias;
        }
        if (op == "conv2d") {
          for (const char* k : {"stride", "padding", "dilation"}) a.set(k, n->attrs().get_ints(k));
          a.set("groups", n->attrs().get_int("groups"));
        } else if (op == "gemm") {
          a.set("alpha", n->attrs().get_float("alpha"));
          a.set("trans_a", n->attrs().get_bool("trans_a"));
          a.set("trans_b", n->attrs().get_bool("trans_b"));
        }
        ir::Node* f = g.add_node(kiln::op(conv ? "fused_conv2d" : "fused_gemm"), ins, a);
        if (!(f->output()->type() == type)) {
          g.erase_nodes({f});
          continue;
        }
        std::string before_str = n->str();
        for (const ir::Node* c : chain) before_str += " + " + c->str();
        std::string out_name = cur->name();
        g.replace_all_uses(cur, f->output());
        std::vector<ir::Node*> dead(chain.rbegin(), chain.rend());
        dead.push_back(n);
        g.erase_nodes(dead);
        erased.insert(dead.begin(), dead.end());
        g.rename(f->output(), out_name);
        std::string list;
        for (const auto& w : what) list += (list.empty() ? "" : ", ") + w;
        items.push_back(op + " + " + list + " -> " + f->str());
        uses = g.uses();
      }
    }
    if (!items.empty()) topo_reorder(g);
    return report("epilogue", "fused", items, "nothing to fuse");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_epilogue() { return std::make_unique<EpiloguePass>(); }

}  // namespace kiln::compiler::passes
