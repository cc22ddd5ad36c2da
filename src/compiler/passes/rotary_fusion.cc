// Rotary fusion: the rotate_half formula of GPT-NeoX-style rotary position embeddings (LLaMA,
// Mistral, Qwen, Phi) as PyTorch exports it,
//   x1 = slice(x, last dim, 0 .. D/2)      x2 = slice(x, last dim, D/2 .. D)
//   y  = x * cos + concat(-x2, x1, last dim) * sin
// or GPT-J's rotate_every_two, concat(unsqueeze(-x[1::2], -1), unsqueeze(x[0::2], -1), -1)
// reshaped back to x's shape in place of concat(-x2, x1) (interleaved pairs),
// (the products and the sum in either operand order) becomes one rotary_embedding(x, cos, sin)
// (src/ops/defs/norm/rotary.cc), where cos and sin have x's dtype and broadcast to its shape
// without growing it, x's last dim is static and even, and every intermediate is private to the
// pattern (Note [Private intermediates]). Anything else (other slice bounds, a different x in
// one place, -x1 instead of -x2) is left alone.
//
// Note [Rotary embeddings from their parts]
// Each rotate_half is seven steps over q or k in an engine, four of them over the whole tensor
// (mul, neg, concat, mul, add) and the first reading q through the heads permute; in a LLaMA-shaped
// decoder (6 layers, 12 query and 4 key heads of 64, sequence 128) they took ~0.2 ms a layer at
// batch 1 and ~0.8 at batch 8 on two threads. As one step each reads x once (in place, permuted)
// and writes y once.
#include "compiler/passes/pattern.h"

namespace kiln::compiler::passes {
namespace {

struct RotaryMatch {
  ir::Value* x = nullptr;
  ir::Value* cos = nullptr;
  ir::Value* sin = nullptr;
  bool interleaved = false;  // GPT-J's pairs (2i, 2i + 1), not rotate_half's halves
  ir::Node* root = nullptr;
  std::set<ir::Node*> nodes;
};

// Whether slice node n takes the elements from, from + step, .. of x's last dim (size d) below `to`
// (step 1: exactly [from, to); step 2: d / 2 elements), and nothing else.
bool slices_last(const ir::Node* n, const ir::Value* x, int64_t d, int64_t from, int64_t to, int64_t step = 1) {
  if (n == nullptr || n->op().name() != "slice" || n->inputs()[0] != x) return false;
  const int64_t r = static_cast<int64_t>(x->type().shape.size());
  const auto starts = n->attrs().get_ints("starts"), ends = n->attrs().get_ints("ends");
  const auto axes = n->attrs().get_ints("axes"), steps = n->attrs().get_ints("steps");
  if (starts.size() != 1 || ends.size() != 1) return false;
  if (axes.empty() ? r != 1 : (axes.size() != 1 || (axes[0] != r - 1 && axes[0] != -1))) return false;
  if (steps.empty() ? step != 1 : (steps.size() != 1 || steps[0] != step)) return false;
  auto clamp = [d](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + d : v, 0, d); };
  const int64_t begin = clamp(starts[0]), end = clamp(ends[0]);
  if (step == 1) return begin == from && end == to;
  return begin == from && end > begin && (end - begin + step - 1) / step == d / 2;
}

// Whether n is unsqueeze(v) adding a last dim to v of rank r.
bool unsqueezes_last(const ir::Node* n, int64_t r) {
  if (n == nullptr || n->op().name() != "unsqueeze") return false;
  const auto dims = n->attrs().get_ints("dims");
  return dims.size() == 1 && (dims[0] == r || dims[0] == -1);
}

class RotaryFusion {
 public:
  RotaryFusion(const ir::Graph& g, const Uses& uses) : g_(g), uses_(uses) {}

  // From the concat that builds rotate_half(x), or rotate_every_two(x) before its flatten.
  std::optional<RotaryMatch> match(ir::Node* cat) {
    if (cat->inputs().size() != 2) return std::nullopt;
    // GPT-J's form: concat(unsqueeze(-x[1::2], -1), unsqueeze(x[0::2], -1), -1) flattened back.
    ir::Node* first = producer_op(cat->inputs()[0], "unsqueeze");
    ir::Node* second = producer_op(cat->inputs()[1], "unsqueeze");
    const bool pairs = first && second;
    ir::Node* neg = producer_op(pairs ? first->inputs()[0] : cat->inputs()[0], "neg");
    ir::Node* lo = producer_op(pairs ? second->inputs()[0] : cat->inputs()[1], "slice");
    ir::Node* hi = neg ? producer_op(neg->inputs()[0], "slice") : nullptr;
    if (!lo || !hi) return std::nullopt;
    RotaryMatch m;
    m.x = lo->inputs()[0];
    m.interleaved = pairs;
    const ir::ValueType& xt = m.x->type();
    if (!is_floating(xt.dtype) || xt.shape.empty() || xt.shape.back().is_symbolic()) return std::nullopt;
    const int64_t r = static_cast<int64_t>(xt.shape.size()), d = xt.shape.back().size;
    const int64_t axis = cat->attrs().get_int("axis");
    if (d % 2 != 0) return std::nullopt;
    m.nodes = {lo, hi, neg, cat};
    ir::Node* turned = cat;  // the node whose output is R(x)
    if (pairs) {
      if ((axis != r && axis != -1) || !unsqueezes_last(first, r) || !unsqueezes_last(second, r)) return std::nullopt;
      if (!slices_last(lo, m.x, d, 0, d, 2) || !slices_last(hi, m.x, d, 1, d, 2)) return std::nullopt;
      turned = sole_reader(g_, uses_, cat->output());
      if (!turned || turned->op().name() != "reshape") return std::nullopt;
      m.nodes.insert({first, second, turned});
    } else {
      if ((axis != r - 1 && axis != -1)) return std::nullopt;
      if (!slices_last(lo, m.x, d, 0, d / 2) || !slices_last(hi, m.x, d, d / 2, d)) return std::nullopt;
    }
    if (!(turned->output()->type() == xt)) return std::nullopt;
    // * sin, then + x * cos.
    ir::Node* times_sin = sole_reader(g_, uses_, turned->output());
    if (!times_sin || times_sin->op().name() != "mul") return std::nullopt;
    m.sin = other_operand(times_sin, turned->output());
    ir::Node* sum = sole_reader(g_, uses_, times_sin->output());
    if (!m.sin || !sum || sum->op().name() != "add" || !(sum->output()->type() == xt)) return std::nullopt;
    ir::Node* times_cos = producer_op(other_operand(sum, times_sin->output()), "mul");
    if (!times_cos) return std::nullopt;
    m.cos = other_operand(times_cos, m.x);
    if (!m.cos || m.cos == m.x) return std::nullopt;
    for (const ir::Node* p : {times_sin, times_cos})
      if (!(p->output()->type() == xt)) return std::nullopt;
    if (m.sin->type().dtype != xt.dtype || m.cos->type().dtype != xt.dtype) return std::nullopt;
    m.nodes.insert({times_sin, times_cos, sum});
    m.root = sum;
    if (!private_to(g_, uses_, m.nodes, m.root)) return std::nullopt;
    return m;
  }

 private:
  const ir::Graph& g_;
  const Uses& uses_;
};

class RotaryFusionPass : public ir::Pass {
 public:
  std::string name() const override { return "rotary_fusion"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::set<const ir::Node*> erased;
    auto uses = g.uses();
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n) || n->op().name() != "concat") continue;
      auto m = RotaryFusion(g, uses).match(n);
      if (!m) continue;
      ir::Node* rot =
          g.add_node(kiln::op("rotary_embedding"), {m->x, m->cos, m->sin}, {{"interleaved", m->interleaved}});
      if (!(rot->output()->type() == m->root->output()->type())) {
        g.erase_nodes({rot});
        continue;
      }
      std::string out = m->root->output()->name();
      size_t count = m->nodes.size();
      replace_pattern(g, m->root, rot, m->nodes);
      erased.insert(m->nodes.begin(), m->nodes.end());
      items.push_back("%" + out + " = rotary_embedding(%" + m->x->name() + ", %" + m->cos->name() + ", %" +
                      m->sin->name() + ")" + (m->interleaved ? " {interleaved}" : "") + " from " +
                      std::to_string(count) + " nodes");
      uses = g.uses();
    }
    if (!items.empty()) topo_reorder(g);
    return report("rotary_fusion", "fused", items, "nothing to fuse");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_rotary_fusion() { return std::make_unique<RotaryFusionPass>(); }

}  // namespace kiln::compiler::passes
