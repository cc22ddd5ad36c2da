// Pad folding: a zero pad of a 4-D value's height and width read by a convolution (or a max pool:
// Note [Zero pads before a max pool]) becomes that convolution's own padding:
//   conv2d(pad(x, [0, 0, t, l, 0, 0, b, r], constant 0), w) -> conv2d(x, w) {padding += [t, l, b, r]}
// (fused_conv2d alike). TensorFlow writes SAME padding of a strided convolution this way (an
// explicit Pad of one row and column at the end, then a VALID convolution, as tf2onnx exports
// MobileNets), and a Pad node there copies the whole feature map and breaks the blocked region
// around it (Note [Layout regions] in layout.cc): such a MobileNetV2 ran 1.5x ONNX Runtime's time.
// Each convolution reading the pad is rewritten as a new node of the same type; the pad stays
// while anything else (or a graph output) reads it. Pads of another mode or value, negative pads
// (crops), pads of the batch or channel dim, and a pad feeding a convolution's filters stay.
//
// Note [Zero pads before a max pool]
// A max pool ignores its padding, where the explicit pad puts zeros. The two agree where the padded
// value is never negative (a relu's, clip's from 0 or a sigmoid's output) and every window keeps
// a real element (each side's padding under the kernel's extent): HGNetV2's stem pads its relu
// output by one row and column and max-pools it 2 x 2 (ceil mode, stride 1). The pad broke the
// blocked region there, and the layout's cost model kept the whole network NCHW (1.12 / 1.15x ONNX
// Runtime's time at batch 1 / 8). Such a pool takes the pad as its own padding, checked to give the
// same output shape.
#include "compiler/passes/common.h"

namespace kiln::compiler::passes {
namespace {

// Whether v is never negative (nor NaN where its input is not): a relu, a clip from 0 or more,
// a sigmoid or a hard sigmoid of anything.
bool non_negative(const ir::Value* v) {
  const ir::Node* n = v->producer();
  if (!n) return false;
  const std::string& op = n->op().name();
  if (op == "relu" || op == "sigmoid" || op == "hardsigmoid") return true;
  return op == "clip" && n->inputs().size() == 1 && n->attrs().has("min") && n->attrs().get_float("min") >= 0.0;
}

// A max pool that can take `add` ([top, left, bottom, right]) as padding of its own (Note [Zero pads
// before a max pool]).
bool pool_takes_pad(const ir::Node* pool, const ir::Node* pad, const std::vector<int64_t>& add) {
  if (pool->op().name() != "max_pool2d" || !non_negative(pad->inputs()[0])) return false;
  const std::vector<int64_t>& k = pool->attrs().get_ints("kernel");
  const std::vector<int64_t>& padding = pool->attrs().get_ints("padding");
  if (k.size() != 2 || padding.size() != 4 || pool->attrs().get_ints("dilation") != std::vector<int64_t>{1, 1})
    return false;
  for (size_t i = 0; i < 4; ++i)
    if (padding[i] + add[i] >= k[i % 2]) return false;
  return true;
}

// The [top, left, bottom, right] a pad node adds, or nullopt when it is not a zero pad of H and W alone.
std::optional<std::vector<int64_t>> spatial_zero_pad(const ir::Node* pad) {
  if (pad->op().name() != "pad" || pad->inputs().size() != 1 || pad->outputs().size() != 1) return std::nullopt;
  if (pad->attrs().get_string("mode") != "constant" || pad->attrs().get_float("value") != 0.0) return std::nullopt;
  if (pad->inputs()[0]->type().shape.size() != 4) return std::nullopt;
  const std::vector<int64_t>& p = pad->attrs().get_ints("pads");
  if (p.size() != 8 || p[0] != 0 || p[1] != 0 || p[4] != 0 || p[5] != 0) return std::nullopt;
  for (int64_t v : p)
    if (v < 0) return std::nullopt;
  return std::vector<int64_t>{p[2], p[3], p[6], p[7]};
}

class PadFoldPass : public ir::Pass {
 public:
  std::string name() const override { return "pad_fold"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    const auto uses = g.uses();
    std::vector<std::pair<ir::Node*, ir::Node*>> folds;  // (pad, convolution reading it)
    for (ir::Node* pad : g.nodes()) {
      const auto add = spatial_zero_pad(pad);
      if (!add) continue;
      auto it = uses.find(pad->output());
      if (it == uses.end()) continue;
      for (const ir::Use& u : it->second) {
        ir::Node* c = u.node;
        if (!c || u.index != 0) continue;
        const bool conv = c->op().name() == "conv2d" || c->op().name() == "fused_conv2d";
        if (!conv && !pool_takes_pad(c, pad, *add)) continue;
        if (std::find(folds.begin(), folds.end(), std::make_pair(pad, c)) == folds.end()) folds.emplace_back(pad, c);
      }
    }
    for (const auto& [pad, c] : folds) {
      const std::vector<int64_t> add = *spatial_zero_pad(pad);
      std::vector<int64_t> padding = c->attrs().get_ints("padding");
      if (padding.size() != 4) continue;
      for (size_t i = 0; i < 4; ++i) padding[i] += add[i];
      Attrs attrs = c->attrs();
      attrs.set("padding", padding);
      std::vector<ir::Value*> ins = c->inputs();
      ins[0] = pad->inputs()[0];
      ir::Node* r = g.add_node(c->op(), ins, attrs);
      if (!(r->output()->type() == c->output()->type())) {
        g.erase_nodes({r});
        continue;
      }
      const std::string before = pad->str() + " -> " + c->str();
      const std::string name = c->output()->name();
      g.replace_all_uses(c->output(), r->output());
      g.erase_nodes({c});
      g.rename(r->output(), name);
      items.push_back(before + " => " + r->str());
    }
    if (!items.empty()) topo_reorder(g);
    return report("pad_fold", "folded", items, "no pad before a convolution or max pool");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_pad_fold() { return std::make_unique<PadFoldPass>(); }

}  // namespace kiln::compiler::passes
