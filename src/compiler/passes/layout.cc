// Layout: regions of convolutions that run on channel-blocked activations (NCHWc; Note [Blocked
// channels] in src/kernels/cpu/conv_nchwc.cc), with conversions only at a region's edges.
//
// Note [Layout regions]
// A convolution can run blocked when it has one group, f32 constant filters [K, C, R, S] with C
// and K multiples of 16, and an epilogue the blocked kernel has (none, relu, relu6, hardswish;
// conv2d and fused_conv2d alike). Such convolutions are joined into regions along the values they
// pass each other (input or residual) and the values two of them read (a ResNet block's input
// feeds its first convolution and its projection). A region reads each value from outside through
// one to_nchwc and hands each value read outside through one from_nchwc; inside it values stay
// blocked, so a conversion pair between two blocked convolutions never appears (there is nothing
// to cancel later). Whether a region pays is a cost model, in multiply-add equivalents:
//   gain = kGain * (the region's convolution FLOPs)
//   cost = kConvertCost * (elements of every conversion at its edges)
// "layout" keeps the regions whose gain exceeds their cost; "layout_all" keeps every region (for
// tests and for measuring what blocking does where the model says no). ResNets become one region
// with two conversions; a MobileNet's 1x1 convolutions, each between two depthwise ones that stay
// NCHW, would each pay two conversions for a few MFLOPs and stay as they are.
// The constants come from bench/RESULTS.md ("blocked layout" tables): blocking saved 3-50% of a
// convolution's time (the most on 1x1 layers at 56 x 56 and 28 x 28) and a conversion ran at
// about 1.5-3 elements per nanosecond, one thread.
#include <map>
#include <numeric>
#include <set>

#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

constexpr double kGain = 0.05;          // of a blocked convolution's FLOPs
constexpr double kConvertCost = 200.0;  // FLOPs per element converted

const std::set<std::string> kBlockedActs = {"none", "relu", "relu6", "hardswish"};

struct Conv {
  ir::Node* node = nullptr;
  ir::Value* x = nullptr;
  ir::Value* residual = nullptr;
  double flops = 0;
};

int64_t static_elems(const ir::Value* v, bool& ok) {
  int64_t n = 1;
  for (const ir::Dim& d : v->type().shape) {
    // A symbolic batch counts as 1: the model compares work per image.
    n *= d.is_symbolic() ? d.scale : d.size;
  }
  ok = ok && n > 0;
  return n;
}

std::optional<Conv> blockable(ir::Node* n) {
  const std::string& op = n->op().name();
  if (op != "conv2d" && op != "fused_conv2d") return std::nullopt;
  ir::Value* x = input_at(n, 0);
  ir::Value* w = input_at(n, 1);
  ir::Value* residual = op == "fused_conv2d" ? input_at(n, 3) : nullptr;
  if (!x || !w || !is_const(w) || n->outputs().size() != 1) return std::nullopt;
  const ir::ValueType& yt = n->output()->type();
  if (yt.dtype != DType::f32 || x->type().dtype != DType::f32 || w->type().dtype != DType::f32) return std::nullopt;
  if (yt.shape.size() != 4 || x->type().shape.size() != 4 || w->type().shape.size() != 4) return std::nullopt;
  if (n->attrs().get_int("groups") != 1) return std::nullopt;
  if (op == "fused_conv2d" && !kBlockedActs.count(n->attrs().get_string("activation"))) return std::nullopt;
  ir::Value* bias = input_at(n, 2);
  if (bias && (!is_const(bias) || bias->type().dtype != DType::f32)) return std::nullopt;
  if (residual && residual->type().dtype != DType::f32) return std::nullopt;
  const Shape ws = w->constant().shape();
  if (ws[0] % 16 != 0 || ws[1] % 16 != 0) return std::nullopt;
  for (size_t i = 1; i < 4; ++i)
    if (yt.shape[i].is_symbolic() || x->type().shape[i].is_symbolic()) return std::nullopt;
  bool ok = true;
  const int64_t out = static_elems(n->output(), ok);
  if (!ok) return std::nullopt;
  return Conv{n, x, residual, 2.0 * static_cast<double>(out) * static_cast<double>(ws[1] * ws[2] * ws[3])};
}

class LayoutPass : public ir::Pass {
 public:
  explicit LayoutPass(bool all) : all_(all) {}
  std::string name() const override { return all_ ? "layout_all" : "layout"; }

  ir::PassResult run(ir::Graph& g) override {
    std::vector<Conv> convs;
    std::map<const ir::Node*, size_t> index;
    for (ir::Node* n : g.nodes())
      if (auto c = blockable(n)) {
        index[n] = convs.size();
        convs.push_back(*c);
      }
    if (convs.empty()) return report(name(), "blocked", {}, "no convolution to block");
    // Regions: union-find over the convolutions.
    std::vector<size_t> parent(convs.size());
    std::iota(parent.begin(), parent.end(), size_t{0});
    auto find = [&](size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    auto join = [&](size_t a, size_t b) { parent[find(a)] = find(b); };
    std::map<const ir::Value*, size_t> first_reader;
    for (size_t i = 0; i < convs.size(); ++i)
      for (ir::Value* v : {convs[i].x, convs[i].residual}) {
        if (!v) continue;
        if (v->producer() && index.count(v->producer())) join(i, index[v->producer()]);
        auto [it, fresh] = first_reader.emplace(v, i);
        if (!fresh) join(i, it->second);
      }
    // Each region's gain and the conversions at its edges.
    auto uses = g.uses();
    std::map<size_t, double> gain, cost;
    std::map<size_t, size_t> size;
    for (size_t i = 0; i < convs.size(); ++i) {
      const size_t r = find(i);
      gain[r] += kGain * convs[i].flops;
      ++size[r];
      bool ok = true;
      // A value read from outside: converted once for the region.
      for (ir::Value* v : {convs[i].x, convs[i].residual})
        if (v && !(v->producer() && index.count(v->producer())) && first_reader[v] == i)
          cost[r] += kConvertCost * static_cast<double>(static_elems(v, ok));
      // An output read outside the region (or a graph output): converted back once.
      bool outside = false;
      for (const ir::Use& u : uses[convs[i].node->output()])
        outside = outside || !u.node || !index.count(u.node);
      if (outside) cost[r] += kConvertCost * static_cast<double>(static_elems(convs[i].node->output(), ok));
    }
    std::set<size_t> keep;
    std::vector<std::string> skipped;
    for (const auto& [r, gn] : gain) {
      if (all_ || gn > cost[r]) keep.insert(r);
      else
        skipped.push_back("a region of " + std::to_string(size[r]) + " convolution(s) at %" +
                          convs[r].node->output()->name() + " (conversions would cost more than blocking saves)");
    }
    if (keep.empty()) return report(name(), "blocked", {}, "no region pays for its conversions");

    // Rewrite, in graph order: a kept convolution's blocked inputs exist before it.
    std::map<const ir::Value*, ir::Value*> blocked;  // plain value -> its blocked form
    int64_t to = 0, from = 0;
    auto blocked_of = [&](ir::Value* v) -> ir::Value* {
      if (auto it = blocked.find(v); it != blocked.end()) return it->second;
      ir::Node* t = g.add_node(kiln::op("to_nchwc"), {v});
      g.rename(t->output(), g.fresh_name(v->name() + "_nchwc"));
      ++to;
      return blocked[v] = t->output();
    };
    std::vector<ir::Node*> old;
    std::set<const ir::Node*> old_set;
    for (const Conv& c : convs) {
      if (!keep.count(find(index[c.node]))) continue;
      ir::Node* n = c.node;
      const bool fused = n->op().name() == "fused_conv2d";
      Attrs a{{"stride", n->attrs().get_ints("stride")},
              {"padding", n->attrs().get_ints("padding")},
              {"dilation", n->attrs().get_ints("dilation")},
              {"activation", fused ? n->attrs().get_string("activation") : std::string("none")},
              {"residual_before_activation", fused && n->attrs().get_bool("residual_before_activation")}};
      ir::Value* xb = blocked_of(c.x);
      ir::Value* rb = c.residual ? blocked_of(c.residual) : nullptr;
      ir::Node* b = g.add_node(kiln::op("fused_conv2d_nchwc"), {xb, input_at(n, 1), input_at(n, 2), rb}, a);
      g.rename(b->output(), g.fresh_name(n->output()->name() + "_nchwc"));
      blocked[n->output()] = b->output();
      old.push_back(n);
      old_set.insert(n);
    }
    // Readers outside the region (graph outputs too) get one conversion back; the old nodes, the
    // only other readers, go.
    uses = g.uses();
    std::vector<std::pair<ir::Value*, std::string>> names;
    for (ir::Node* n : old) {
      ir::Value* y = n->output();
      bool plain = false;
      for (const ir::Use& u : uses[y]) plain = plain || !u.node || !old_set.count(u.node);
      if (!plain) continue;
      ir::Node* f = g.add_node(kiln::op("from_nchwc"), {blocked[y]}, Attrs{{"channels", y->type().shape[1].size}});
      g.replace_all_uses(y, f->output());
      names.emplace_back(f->output(), y->name());
      ++from;
    }
    g.erase_nodes(std::vector<ir::Node*>(old.rbegin(), old.rend()));
    for (auto& [v, nm] : names) g.rename(v, nm);
    topo_reorder(g);
    std::vector<std::string> out{std::to_string(old.size()) + " convolution(s) in " + std::to_string(keep.size()) +
                                 " region(s), " + std::to_string(to) + " to_nchwc, " + std::to_string(from) +
                                 " from_nchwc"};
    for (const auto& sk : skipped) out.push_back("kept NCHW: " + sk);
    return report(name(), "blocked", out, "nothing blocked");
  }

 private:
  bool all_;
};

}  // namespace

std::unique_ptr<ir::Pass> make_layout() { return std::make_unique<LayoutPass>(false); }
std::unique_ptr<ir::Pass> make_layout_all() { return std::make_unique<LayoutPass>(true); }

}  // namespace kiln::compiler::passes
