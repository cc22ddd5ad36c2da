// Branch merging: a linear combination (adds, subs, per-channel scales) of convolutions of one
// input and of per-channel affine maps of that input itself (a batch norm of it, or the input as it
// is) becomes one convolution:
//   conv(x, W1, b1) + conv(x, W2, b2) + bn(x)  ->  conv(x, W1 (+) W2 (+) diag(s), b1 + b2 + t)
// where (+) adds the kernels centred in the largest one. See Note [Parallel branches merge].
#include <algorithm>
#include <set>

#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

// Note [Parallel branches merge]
// MobileNet's successors train with parallel branches that a deployment is meant to fold away
// ("re-parameterization"): RepVGG sums a 3x3 and a 1x1 convolution and a batch norm of the input,
// MobileOne (and FastViT, built from its blocks) sums k 3x3 convolutions, a 1x1 one and a batch
// norm, each convolution with its own batch norm. Exported without timm's reparameterize(), each
// branch is a convolution of its own over the same input and the adds between them run as residual
// epilogues: timm's MobileOne-S0 at batch 1 on two threads ran 6.07 ms against ONNX Runtime's
// 5.59. A convolution is linear in its kernel, so convolutions of x with the same stride, groups
// and output channels, each padded to keep the centre of its odd kernel over the output pixel, sum
// to one convolution whose kernel is the sum of theirs centred in the largest; a per-channel
// affine map of x (stride 1, as many channels out as in) is the centre tap of a kernel that maps
// each channel to itself. bn_fold runs first, so each branch's batch norm is in its weights.
//
// FastViT's RepMixer is such a combination too, x + layer_scale * (mixer(x) - norm(x)): the sum is
// a tree of adds, subs and muls by a constant per channel (or one number), each inner value read by
// the next alone, whose leaves are such branches, each with a factor per output channel; at least
// one is a convolution, and every branch is read by the combination alone.

struct Branch {
  ir::Value* x = nullptr;
  const ir::Node* conv = nullptr;   // a convolution branch, or
  std::vector<double> scale, shift; // a per-channel affine map of x (scale 1, shift 0: x itself)
};

bool same_pad_odd_kernel(const ir::Node* c, int64_t& r, int64_t& s) {
  const Shape ws = c->inputs()[1]->constant().shape();
  if (ws.size() != 4) return false;
  r = ws[2], s = ws[3];
  const auto& pad = c->attrs().get_ints("padding");
  const auto& dil = c->attrs().get_ints("dilation");
  const std::vector<int64_t> p = pad.size() == 2 ? std::vector<int64_t>{pad[0], pad[1], pad[0], pad[1]} : pad;
  return r % 2 == 1 && s % 2 == 1 && p.size() == 4 && p[0] == r / 2 && p[2] == r / 2 && p[1] == s / 2 &&
         p[3] == s / 2 && std::all_of(dil.begin(), dil.end(), [](int64_t d) { return d == 1; });
}

// v as a branch: a conv2d with constant weights (and bias), a batch norm with constant statistics,
// or (as `x`, once known) x itself.
std::optional<Branch> branch_of(ir::Value* v, const ir::Value* x) {
  const ir::Node* p = v->producer();
  if (p && p->op().name() == "conv2d" && is_const(p->inputs()[1]) && (!input_at(p, 2) || is_const(input_at(p, 2)))) {
    int64_t r = 0, s = 0;
    if (!same_pad_odd_kernel(p, r, s)) return std::nullopt;
    return Branch{p->inputs()[0], p, {}, {}};
  }
  const ir::ValueType& t = v->type();
  if (t.shape.size() != 4 || t.shape[1].is_symbolic()) return std::nullopt;
  const int64_t ch = t.shape[1].size;
  if (p && p->op().name() == "batch_norm") {
    auto bp = batch_norm_affine(p, ch);
    if (!bp) return std::nullopt;
    return Branch{p->inputs()[0], nullptr, bp->scale, bp->shift};
  }
  const size_t n = static_cast<size_t>(ch);
  if (v == x) return Branch{v, nullptr, std::vector<double>(n, 1.0), std::vector<double>(n, 0.0)};
  return std::nullopt;
}

class BranchMergePass : public ir::Pass {
 public:
  std::string name() const override { return "branch_merge"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::set<const ir::Node*> erased;
    auto uses = g.uses();
    for (ir::Node* n : g.nodes()) {
      const std::string& op = n->op().name();
      if (erased.count(n) || (op != "add" && op != "sub") || n->inputs().size() != 2) continue;
      const ir::ValueType type = n->output()->type();
      if (type.shape.size() != 4 || type.shape[1].is_symbolic() || !is_floating(type.dtype)) continue;
      const int64_t ch = type.shape[1].size;
      // The per-channel factor of a mul by a constant ([C, 1, 1], [1, C, 1, 1] or one number) of a
      // value of n's type, and that value; or nullopt.
      auto channel_scale = [&](const ir::Node* p) -> std::optional<std::pair<ir::Value*, std::vector<double>>> {
        if (p->op().name() != "mul" || p->inputs().size() != 2) return std::nullopt;
        for (size_t i : {size_t{0}, size_t{1}}) {
          ir::Value* v = p->inputs()[i];
          const ir::Value* c = p->inputs()[1 - i];
          if (!v || !(v->type() == type) || !is_const(c) || !is_floating(c->type().dtype)) continue;
          if (c->constant().numel() == 1) return std::make_pair(v, std::vector<double>(static_cast<size_t>(ch), const_values(c)[0]));
          if (auto k = per_channel_values(c, ch, true)) return std::make_pair(v, *k);
        }
        return std::nullopt;
      };
      // A node of the linear combination: an add or sub of two values of n's type, or a per-channel scale.
      auto linear = [&](const ir::Node* p) {
        if (!p) return false;
        const std::string& o = p->op().name();
        if ((o == "add" || o == "sub") && p->inputs().size() == 2)
          return p->inputs()[0]->type() == type && p->inputs()[1]->type() == type;
        return channel_scale(p).has_value();
      };
      auto inner = [&](const ir::Value* v) {
        return linear(v->producer()) && use_count(uses, v) == 1 && !is_graph_output(g, v) && v->type() == type;
      };
      // Only from the root of a combination: not an inner value another linear node reads.
      const auto& readers = uses[n->output()];
      if (inner(n->output()) && readers.size() == 1 && readers[0].node && linear(readers[0].node)) continue;
      // Its leaves, each with a factor per output channel; the linear nodes it replaces.
      std::vector<std::pair<ir::Value*, std::vector<double>>> leaves;
      std::vector<ir::Node*> nodes;
      std::vector<std::pair<ir::Value*, std::vector<double>>> pending{{n->output(), std::vector<double>(static_cast<size_t>(ch), 1.0)}};
      while (!pending.empty()) {
        auto [v, f] = std::move(pending.back());
        pending.pop_back();
        if (v != n->output() && !inner(v)) {
          leaves.emplace_back(v, std::move(f));
          continue;
        }
        ir::Node* p = v->producer();
        nodes.push_back(p);
        if (auto sc = channel_scale(p)) {
          for (size_t c = 0; c < f.size(); ++c) f[c] *= sc->second[c];
          pending.emplace_back(sc->first, std::move(f));
          continue;
        }
        std::vector<double> second = f;
        if (p->op().name() == "sub")
          for (double& c : second) c = -c;
        pending.emplace_back(p->inputs()[0], std::move(f));
        pending.emplace_back(p->inputs()[1], std::move(second));
      }
      if (leaves.size() < 2) continue;
      // The input every branch reads: a convolution's.
      ir::Value* x = nullptr;
      for (const auto& [v, f] : leaves)
        if (auto b = branch_of(v, nullptr); b && b->conv) x = b->x;
      if (!x) continue;
      std::vector<Branch> branches;
      std::vector<std::vector<double>> factors;
      std::set<const ir::Value*> seen;
      for (const auto& [v, f] : leaves) {
        auto b = branch_of(v, x);
        if (!b || b->x != x || !(v->type() == type)) break;
        if (v != x && (use_count(uses, v) != 1 || is_graph_output(g, v) || !seen.insert(v).second)) break;
        branches.push_back(std::move(*b));
        factors.push_back(f);
      }
      if (branches.size() != leaves.size()) continue;
      // One stride, groups and filter shape but for the kernel's extent; the largest extent.
      const ir::Node* first = nullptr;
      int64_t rmax = 1, smax = 1;
      bool ok = true;
      for (const Branch& b : branches) {
        if (!b.conv) continue;
        int64_t r = 0, s = 0;
        same_pad_odd_kernel(b.conv, r, s);
        rmax = std::max(rmax, r), smax = std::max(smax, s);
        if (!first) {
          first = b.conv;
          continue;
        }
        const Shape a = first->inputs()[1]->constant().shape(), c = b.conv->inputs()[1]->constant().shape();
        ok = ok && a[0] == c[0] && a[1] == c[1] && b.conv->attrs().get_ints("stride") == first->attrs().get_ints("stride") &&
             b.conv->attrs().get_int("groups") == first->attrs().get_int("groups") &&
             b.conv->inputs()[1]->type().dtype == first->inputs()[1]->type().dtype;
      }
      const Shape ws = first->inputs()[1]->constant().shape();
      const int64_t k = ws[0], cpg = ws[1];
      const auto& stride = first->attrs().get_ints("stride");
      const bool unit_stride = std::all_of(stride.begin(), stride.end(), [](int64_t v) { return v == 1; });
      // An affine branch is a convolution mapping channel c to itself: stride 1, K = C.
      for (const Branch& b : branches)
        ok = ok && (b.conv || (unit_stride && static_cast<int64_t>(b.scale.size()) == k &&
                               x->type().shape[1] == ir::Dim(k)));
      if (!ok) continue;
      std::vector<double> w(static_cast<size_t>(k * cpg * rmax * smax), 0.0), bias(static_cast<size_t>(k), 0.0);
      auto at = [&](int64_t o, int64_t c, int64_t r, int64_t s) { return static_cast<size_t>(((o * cpg + c) * rmax + r) * smax + s); };
      for (size_t bi = 0; bi < branches.size(); ++bi) {
        const Branch& b = branches[bi];
        const std::vector<double>& f = factors[bi];
        if (!b.conv) {
          for (int64_t o = 0; o < k; ++o) {
            w[at(o, o % cpg, rmax / 2, smax / 2)] += f[static_cast<size_t>(o)] * b.scale[static_cast<size_t>(o)];
            bias[static_cast<size_t>(o)] += f[static_cast<size_t>(o)] * b.shift[static_cast<size_t>(o)];
          }
          continue;
        }
        const Shape bs = b.conv->inputs()[1]->constant().shape();
        const std::vector<double> bw = const_values(b.conv->inputs()[1]);
        const int64_t r0 = (rmax - bs[2]) / 2, s0 = (smax - bs[3]) / 2;
        for (int64_t o = 0; o < k; ++o)
          for (int64_t c = 0; c < cpg; ++c)
            for (int64_t r = 0; r < bs[2]; ++r)
              for (int64_t s = 0; s < bs[3]; ++s)
                w[at(o, c, r0 + r, s0 + s)] +=
                    f[static_cast<size_t>(o)] * bw[static_cast<size_t>(((o * cpg + c) * bs[2] + r) * bs[3] + s)];
        if (const ir::Value* bb = input_at(b.conv, 2)) {
          const std::vector<double> bv = const_values(bb);
          for (int64_t o = 0; o < k; ++o)
            bias[static_cast<size_t>(o)] += f[static_cast<size_t>(o)] * bv[bv.size() == 1 ? 0 : static_cast<size_t>(o)];
        }
      }
      const DType dt = first->inputs()[1]->type().dtype;
      Attrs attrs = first->attrs();
      attrs.set("padding", std::vector<int64_t>{rmax / 2, smax / 2, rmax / 2, smax / 2});
      ir::Value* nw = g.add_constant(g.fresh_name(first->inputs()[1]->name() + "_merged"), tensor_from(w, {k, cpg, rmax, smax}, dt));
      ir::Value* nb = g.add_constant(g.fresh_name("bias_merged"), tensor_from(bias, {k}, dt));
      ir::Node* merged = g.add_node(first->op(), {x, nw, nb}, attrs);
      if (!(merged->output()->type() == type)) {
        g.erase_nodes({merged});
        continue;
      }
      std::vector<ir::Node*> gone(nodes.begin(), nodes.end());
      for (const auto& [v, f] : leaves)
        if (v != x) gone.push_back(v->producer());
      const std::string name = n->output()->name();
      g.replace_all_uses(n->output(), merged->output());
      erased.insert(gone.begin(), gone.end());
      g.erase_nodes(gone);
      g.rename(merged->output(), name);
      items.push_back(std::to_string(branches.size()) + " branches of %" + x->name() + " -> " + merged->str());
      uses = g.uses();
    }
    if (!items.empty()) topo_reorder(g);
    return report("branch_merge", "merged", items, "no parallel branches to merge");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_branch_merge() { return std::make_unique<BranchMergePass>(); }

}  // namespace kiln::compiler::passes
