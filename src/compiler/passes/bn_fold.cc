// BatchNorm folding: inference batch_norm over channel dim 1 right after a conv2d, gemm or
// matmul whose weights are constants becomes part of that op:
//   scale = gamma / sqrt(var + eps)
//   conv2d:  w'[oc, ...] = w[oc, ...] * scale[oc],   bias' = (bias - mean) * scale + beta
//   gemm:    op(b)' columns scaled, c' = scale * (beta_gemm * c - mean) + beta, beta_gemm' = 1
//   matmul (2-D result): becomes gemm(a, b * scale, c = beta - mean * scale)
// The folded op is a new node (appended, then the graph is re-ordered) named like the batch_norm.
// Folding happens in float64 and rounds once to the weight dtype. The producer must have no
// other reader (its unnormalized output would change) and all statistics must be constants.
// Note [Per-channel scales fold like batch norms]: a conv2d's output times, divided by, plus or
// minus a constant of one value per output channel ([C, 1, 1] or [1, C, 1, 1]) is the same affine
// map, and folds the same way. Caffe's scale layer after a batch norm comes out of converters so
// (the ONNX zoo's Inception v2 and DenseNet-121), as does a batch norm some exporters decompose:
// left alone, each is a pass over the activations and keeps the activation after it out of the
// convolution's epilogue. The zoo's Inception v2 (light_inception_v2, batch 1, 2 threads): 282
// engine steps -> 90, 21.1 -> 20.6 ms (ONNX Runtime 18.9; it stays NCHW, its average pools having
// no blocked kernel).
// Note [Layer scales fold into the linear layer before them]: a per-channel scale after a matmul
// by constant weights folds into the weights' columns, through a bias add and a permute between.
// Note [Batch norms and activations through a concat]: a batch norm, then an activation, after a
// channel concat of convolutions' outputs move into the branches, where both fold.
// Note [Scalars fold through views]: a number times a conv2d's or matmul's output, through reshapes
// and permutes, folds into the weights.
// Note [Batch norms after a flattened linear layer]: batch_norm(reshape(matmul(x, W))) with the
// channels last on both sides folds into W's columns and a bias add before the reshape.
#include "compiler/passes/common.h"

#include <functional>
#include <numeric>

namespace kiln::compiler::passes {
namespace {

bool floating_const(const ir::Value* v) { return is_const(v) && is_floating(v->type().dtype); }

// A constant of w [K, N] with column j times scale[j] (a matmul's output channels): the weights a
// batch norm of that matmul's output folds into.
ir::Value* columns_scaled(ir::Graph& g, const ir::Value* w, const std::vector<double>& scale) {
  const Shape ws = w->constant().shape();
  std::vector<double> wv = const_values(w);
  for (size_t i = 0; i < wv.size(); ++i) wv[i] *= scale[i % static_cast<size_t>(ws[1])];
  return g.add_constant(g.fresh_name(w->name() + "_bn"), tensor_from(wv, ws, w->type().dtype));
}

// Appends op(x, w, bias) with attrs (x: the producer's first input unless given), or nullptr when
// its type would differ from `want`. Appending (not editing in place) also covers producers whose
// optional bias slot is absent in the text IR.
ir::Value* emit(ir::Graph& g, const ir::Node& p, ir::Value* w, ir::Value* bias, const Attrs& attrs,
                const ir::ValueType& want) {
  ir::Node* r = g.add_node(p.op(), {p.inputs()[0], w, bias}, attrs);
  if (r->output()->type() == want) return r->output();
  g.erase_nodes({r});
  return nullptr;
}
ir::Value* emit(ir::Graph& g, const OpDef& op, ir::Value* w, ir::Value* bias, const Attrs& attrs,
                const ir::ValueType& want, ir::Value* x) {
  ir::Node* r = g.add_node(op, {x, w, bias}, attrs);
  if (r->output()->type() == want) return r->output();
  g.erase_nodes({r});
  return nullptr;
}

// Note [Per-channel scales fold like batch norms]: n as y = x * scale + shift per channel of x, a
// conv2d's output that n reads as its first operand (either operand of mul and add), or nullopt.
struct ChannelAffine {
  ir::Value* x = nullptr;
  BatchNormAffine affine;
};
std::optional<ChannelAffine> channel_affine(const ir::Node* n) {
  const std::string& op = n->op().name();
  if ((op != "mul" && op != "add" && op != "sub" && op != "div") || n->inputs().size() != 2 || n->outputs().size() != 1)
    return std::nullopt;
  for (size_t i : {size_t{0}, size_t{1}}) {
    if (i == 1 && (op == "sub" || op == "div")) break;
    ir::Value* x = n->inputs()[i];
    const ir::Value* c = n->inputs()[1 - i];
    if (!x || !c || !x->producer() || x->producer()->op().name() != "conv2d") continue;
    const ir::ValueType& t = x->type();
    if (t.shape.size() != 4 || t.shape[1].is_symbolic() || !(n->output()->type() == t)) continue;
    const int64_t ch = t.shape[1].size;
    auto v = per_channel_values(c, ch, true);
    if (!v) continue;
    const size_t n_ch = static_cast<size_t>(ch);
    ChannelAffine r{x, {std::vector<double>(n_ch, 1.0), std::vector<double>(n_ch, 0.0)}};
    for (size_t k = 0; k < v->size(); ++k) {
      const double a = (*v)[k];
      if (op == "div" && a == 0.0) return std::nullopt;  // x / 0 stays what it is
      if (op == "mul") r.affine.scale[k] = a;
      else if (op == "div") r.affine.scale[k] = 1.0 / a;
      else r.affine.shift[k] = op == "add" ? a : -a;
    }
    return r;
  }
  return std::nullopt;
}

// Note [Layer scales fold into the linear layer before them]
// DeiT III, CaiT or ConvNeXt scale a block's last Linear by a learned vector per channel (a layer
// scale) before the residual add. Left alone the scale is a pass over the activations, and it
// keeps the bias and the residual add out of the GEMM's epilogue. It lands on the matmul's output
// columns, so it folds into the columns of the weights (and of the bias):
//   mul(permute?(add?(matmul(x, W), b)), g)  ->  permute?(add?(matmul(x, W * g), b * g))
// (div by g as mul by 1 / g), where g varies at most along the dim that the matmul's last one
// becomes, b at most along the last, and each value between has no other reader. timm's DeiT III
// Small: 229 engine steps -> 181, the 24 scales and their residual adds gone into the GEMMs;
// batch 8 on two threads 177 -> 170 ms (medians of six alternating rounds), batch 1 even (the
// step times' sums 0.15 ms less of ~21). torchvision's ConvNeXt scales after permuting the
// channels-last result back to NCHW: the scale folds, but the transposed read it did moves to the
// residual add after it, so ConvNeXt-T runs as before (24.0 ms at batch 1).
// It returns the replacement of n's output and the nodes it replaces, or nullptr.
ir::Value* fold_layer_scale(ir::Graph& g, ir::Node* n, const std::map<const ir::Value*, std::vector<ir::Use>>& uses,
                            std::vector<ir::Node*>& replaced) {
  const std::string& name = n->op().name();
  if ((name != "mul" && name != "div") || n->inputs().size() != 2 || n->outputs().size() != 1) return nullptr;
  auto alone = [&](const ir::Value* v) { return v->producer() && use_count(uses, v) == 1 && !is_graph_output(g, v); };
  for (size_t i : {size_t{0}, size_t{1}}) {
    if (i == 1 && name == "div") break;
    ir::Value* v = n->inputs()[i];
    const ir::Value* scale = n->inputs()[1 - i];
    if (!v || !floating_const(scale) || !(n->output()->type() == v->type()) || !alone(v)) continue;
    const size_t rank = v->type().shape.size();
    std::vector<int64_t> dims(rank);  // v's dim d is dim dims[d] of the matmul's output
    std::iota(dims.begin(), dims.end(), int64_t{0});
    ir::Node* permute = nullptr;
    if (v->producer()->op().name() == "permute") {
      permute = v->producer();
      dims = permute->attrs().get_ints("dims");
      if (dims.size() != rank) continue;
      for (int64_t& d : dims) d = d < 0 ? d + static_cast<int64_t>(rank) : d;
      v = permute->inputs()[0];
      if (!alone(v)) continue;
    }
    ir::Node* add = nullptr;
    const ir::Value* bias = nullptr;
    if (v->producer()->op().name() == "add" && v->producer()->inputs().size() == 2) {
      add = v->producer();
      const size_t b = floating_const(add->inputs()[1]) ? 1 : 0;
      bias = add->inputs()[b];
      v = add->inputs()[1 - b];
      if (!floating_const(bias) || !v || !(add->output()->type() == v->type()) || !alone(v)) continue;
    }
    ir::Node* mm = v->producer();
    if (mm->op().name() != "matmul" || mm->inputs().size() != 2 || !floating_const(mm->inputs()[1]) ||
        mm->inputs()[1]->type().shape.size() != 2 || v->type().shape.size() != rank || rank == 0)
      continue;
    const ir::Value* w = mm->inputs()[1];
    const Shape ws = w->constant().shape();
    const int64_t cols = ws[1];
    // Constants broadcast from the right; each of their dims is 1 but one of `cols` at `at`.
    auto along = [&](const ir::Value* c, size_t at) {
      const Shape cs = c->constant().shape();
      if (cs.size() > rank) return false;
      for (size_t k = 0; k < cs.size(); ++k)
        if (cs[k] != 1 && !(rank - cs.size() + k == at && cs[k] == cols)) return false;
      return true;
    };
    const size_t channel = static_cast<size_t>(std::find(dims.begin(), dims.end(), static_cast<int64_t>(rank) - 1) - dims.begin());
    if (channel == rank || !along(scale, channel) || (bias && !along(bias, rank - 1))) continue;
    const std::vector<double> sv = const_values(scale);
    std::vector<double> col_scale(static_cast<size_t>(cols));
    bool finite = true;
    for (size_t c = 0; c < col_scale.size(); ++c) {
      const double s = sv[sv.size() == 1 ? 0 : c];
      if (name == "div" && s == 0.0) finite = false;  // x / 0 stays what it is
      col_scale[c] = name == "div" ? 1.0 / s : s;
    }
    if (!finite) continue;
    std::vector<double> wv = const_values(w);
    for (size_t k = 0; k < wv.size(); ++k) wv[k] *= col_scale[k % static_cast<size_t>(cols)];
    std::vector<ir::Node*> made;
    made.push_back(g.add_node(mm->op(), {mm->inputs()[0], g.add_constant(g.fresh_name(w->name() + "_scaled"),
                                                                           tensor_from(wv, ws, w->type().dtype))},
                              mm->attrs()));
    if (add) {
      const std::vector<double> bv = const_values(bias);
      std::vector<double> nb(static_cast<size_t>(cols));
      for (size_t c = 0; c < nb.size(); ++c) nb[c] = bv[bv.size() == 1 ? 0 : c] * col_scale[c];
      ir::Value* nbv = g.add_constant(g.fresh_name(bias->name() + "_scaled"), tensor_from(nb, {cols}, bias->type().dtype));
      made.push_back(g.add_node(add->op(), {made.back()->output(), nbv}, add->attrs()));
    }
    if (permute) made.push_back(g.add_node(permute->op(), {made.back()->output()}, permute->attrs()));
    if (!(made.back()->output()->type() == n->output()->type())) {
      g.erase_nodes(made);
      continue;
    }
    replaced = {n, mm};
    if (add) replaced.push_back(add);
    if (permute) replaced.push_back(permute);
    return made.back()->output();
  }
  return nullptr;
}

// Note [Batch norms and activations through a concat]
// MixNet's mixed convolutions split the channels, convolve each part with its own kernel size
// and concatenate, then normalize and activate the concat: BN(concat(conv_i(x_i))) and
// act(concat(...)). Left there, the batch norm and the activation are each a pass over every
// activation of the network (timm's MixNet-S at batch 1 on two threads: 34 batch norms and 19
// SiLUs, 1.8 of 5.4 ms, where ONNX Runtime took 4.8 in all). Both are per channel, so they commute
// with the concat: BN's scale and shift split by the branches' channels (as a mul and an add per
// branch, which the fold below then takes into the convolution), and an activation copied onto each
// branch joins that convolution's epilogue. Only where every branch is a convolution that nothing
// else reads: elsewhere (DenseNet's concat of earlier layers' outputs, which later layers read too)
// the work would only move.

// The concat along dim 1 that v is (4-D, static channels, v read once and not a graph output),
// whose every input is a conv2d's output with constant weights and no other reader; or nullptr.
ir::Node* concat_of_convs(const ir::Graph& g, const ir::Value* v, const std::map<const ir::Value*, std::vector<ir::Use>>& uses) {
  ir::Node* c = v->producer();
  if (!c || c->op().name() != "concat" || c->outputs().size() != 1 || use_count(uses, v) != 1 || is_graph_output(g, v))
    return nullptr;
  const ir::ValueType& t = v->type();
  if (t.shape.size() != 4 || t.shape[1].is_symbolic() || !is_floating(t.dtype)) return nullptr;
  const int64_t axis = c->attrs().get_int("axis");
  if (axis != 1 && axis != -3) return nullptr;
  for (const ir::Value* x : c->inputs()) {
    const ir::Node* p = x ? x->producer() : nullptr;
    if (!p || p->op().name() != "conv2d" || use_count(uses, x) != 1 || is_graph_output(g, x) ||
        !floating_const(p->inputs()[1]) || x->type().shape.size() != 4 || x->type().shape[1].is_symbolic())
      return nullptr;
  }
  return c;
}

// Rewrites n(concat(x_i)) as concat(branch(x_i, c0, c1)) for the concat c, where branch makes the
// part of n for channels [c0, c1) of the concat; n's output keeps its name.
void into_branches(ir::Graph& g, ir::Node* n, ir::Node* c,
                   const std::function<ir::Value*(ir::Value*, int64_t, int64_t)>& branch) {
  std::vector<ir::Value*> parts;
  int64_t c0 = 0;
  for (ir::Value* x : c->inputs()) {
    const int64_t ch = x->type().shape[1].size;
    parts.push_back(branch(x, c0, c0 + ch));
    c0 += ch;
  }
  ir::Node* joined = g.add_node(c->op(), parts, c->attrs());
  const std::string name = n->output()->name();
  g.replace_all_uses(n->output(), joined->output());
  g.erase_nodes({n, c});
  g.rename(joined->output(), name);
}

// Note [Scalars fold through views]
// Attention scales its queries (and keys) by a number after the projection's output has been
// reshaped and permuted into heads: MobileNetV4-Hybrid's multi-query attention multiplies a
// [1, 4, 49, 64] permuted view of a 1x1 convolution's output by 1/sqrt(sqrt(64)), a strided pass
// of 0.016 ms for each of its eight. A number commutes with anything that only moves elements, so
// mul(views(p), c) (and div by c != 0) folds into p's weights and bias: p a conv2d, or a matmul by
// constant weights, each value on the way read by the next alone. Returns the value that replaces
// n's output (the end of the view chain, which now reads the scaled producer), or nullptr.
ir::Value* fold_scalar_through_views(ir::Graph& g, ir::Node* n, const std::map<const ir::Value*, std::vector<ir::Use>>& uses,
                                     std::vector<ir::Node*>& replaced) {
  const std::string& op = n->op().name();
  if ((op != "mul" && op != "div") || n->inputs().size() != 2 || n->outputs().size() != 1) return nullptr;
  for (size_t i : {size_t{0}, size_t{1}}) {
    if (i == 1 && op == "div") break;
    ir::Value* v = n->inputs()[i];
    const ir::Value* c = n->inputs()[1 - i];
    if (!v || !floating_const(c) || c->constant().numel() != 1 || !(n->output()->type() == v->type())) continue;
    const double a = const_values(c)[0];
    if (op == "div" && a == 0.0) return nullptr;
    const double scale = op == "div" ? 1.0 / a : a;
    // Down the views to the producer.
    ir::Value* at = v;
    while (at->producer() && at->producer()->op().is_view() && at->producer()->inputs().size() == 1 &&
           use_count(uses, at) == 1 && !is_graph_output(g, at))
      at = at->producer()->inputs()[0];
    ir::Node* p = at->producer();
    if (!p || use_count(uses, at) != 1 || is_graph_output(g, at) || !is_floating(at->type().dtype)) continue;
    if (at != v && (use_count(uses, v) != 1 || is_graph_output(g, v))) continue;
    const bool conv = p->op().name() == "conv2d" && floating_const(p->inputs()[1]) &&
                      (!input_at(p, 2) || floating_const(input_at(p, 2)));
    const bool matmul = p->op().name() == "matmul" && floating_const(p->inputs()[1]);
    if (!conv && !matmul) continue;
    auto scaled = [&](const ir::Value* w) {
      std::vector<double> wv = const_values(w);
      for (double& x : wv) x *= scale;
      return g.add_constant(g.fresh_name(w->name() + "_scaled"), tensor_from(wv, w->constant().shape(), w->type().dtype));
    };
    std::vector<ir::Value*> ins = p->inputs();
    ins[1] = scaled(p->inputs()[1]);
    if (conv && input_at(p, 2)) ins[2] = scaled(input_at(p, 2));
    ir::Node* r = g.add_node(p->op(), ins, p->attrs());
    if (!(r->output()->type() == at->type())) {
      g.erase_nodes({r});
      continue;
    }
    g.replace_all_uses(at, r->output());
    replaced = {n, p};
    return v == at ? r->output() : v;
  }
  return nullptr;
}

// Note [Batch norms after a flattened linear layer]
// LeViT normalizes each Linear layer's output with a BatchNorm1d over the tokens flattened into
// the batch: batch_norm(reshape(matmul(x [B, N, K], W), [-1, C])), reshaped back after. The
// matmul-then-batch-norm fold above wants the norm right after a 2-D matmul; here a reshape that
// keeps the channels last sits between, and the 47 norms of LeViT-128S ran as passes of their own,
// 3.4 of ~6.2 ms at batch 1 (2.2x ONNX Runtime's time). The norm scales W's columns and adds its
// shift after the matmul; the reshape moves after the add. Returns the replacement of n's output
// and, in `replaced`, n, the reshape and the matmul; or nullptr.
ir::Value* fold_batch_norm_through_flatten(ir::Graph& g, ir::Node* n,
                                           const std::map<const ir::Value*, std::vector<ir::Use>>& uses,
                                           std::vector<ir::Node*>& replaced) {
  if (n->op().name() != "batch_norm") return nullptr;
  ir::Value* flat = n->inputs()[0];
  ir::Node* reshape = flat->producer();
  if (!reshape || reshape->op().name() != "reshape" || flat->type().shape.size() != 2 || flat->type().shape[1].is_symbolic())
    return nullptr;
  ir::Value* v = reshape->inputs()[0];
  ir::Node* p = v->producer();
  const int64_t ch = flat->type().shape[1].size;
  if (!p || p->op().name() != "matmul" || !floating_const(p->inputs()[1]) || p->inputs()[1]->type().shape.size() != 2 ||
      v->type().shape.empty() || !(v->type().shape.back() == ir::Dim(ch)) || use_count(uses, flat) != 1 ||
      use_count(uses, v) != 1 || is_graph_output(g, flat) || is_graph_output(g, v))
    return nullptr;
  auto bp = batch_norm_affine(n, ch);
  if (!bp) return nullptr;
  const DType dt = p->inputs()[1]->type().dtype;
  ir::Node* mm = g.add_node(p->op(), {p->inputs()[0], columns_scaled(g, p->inputs()[1], bp->scale)}, p->attrs());
  ir::Node* add = g.add_node(kiln::op("add"), {mm->output(), g.add_constant(g.fresh_name("bias_bn"), tensor_from(bp->shift, {ch}, dt))});
  ir::Node* back = g.add_node(reshape->op(), {add->output()}, reshape->attrs());
  if (!(add->output()->type() == v->type()) || !(back->output()->type() == n->output()->type())) {
    g.erase_nodes({back, add, mm});
    return nullptr;
  }
  replaced = {n, reshape, p};
  return back->output();
}

class BnFoldPass : public ir::Pass {
 public:
  std::string name() const override { return "bn_fold"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    bool appended = false;
    auto uses = g.uses();
    // n's output becomes `result` (under n's name) and the nodes `gone` (n among them) go.
    auto replace = [&](ir::Node* n, ir::Value* result, const std::vector<ir::Node*>& gone, const std::string& before) {
      appended = true;
      const std::string out_name = n->output()->name();
      g.replace_all_uses(n->output(), result);
      g.erase_nodes(gone);
      g.rename(result, out_name);
      items.push_back(before + " -> " + result->producer()->str());
      uses = g.uses();
    };
    // Note [Batch norms and activations through a concat]: the batch norms first (their parts
    // fold in the loop below), ...
    for (ir::Node* bn : g.nodes()) {
      if (bn->op().name() != "batch_norm") continue;
      ir::Node* c = concat_of_convs(g, bn->inputs()[0], uses);
      if (!c) continue;
      auto bp = batch_norm_affine(bn, bn->inputs()[0]->type().shape[1].size);
      if (!bp) continue;
      const std::string before = bn->str();
      const size_t branches = c->inputs().size();
      const DType dt = bn->output()->type().dtype;
      into_branches(g, bn, c, [&](ir::Value* x, int64_t c0, int64_t c1) {
        const auto slice = [&](const std::vector<double>& v) {
          return std::vector<double>(v.begin() + c0, v.begin() + c1);
        };
        ir::Value* s = g.add_constant(g.fresh_name("bn_scale"), tensor_from(slice(bp->scale), {1, c1 - c0, 1, 1}, dt));
        ir::Value* t = g.add_constant(g.fresh_name("bn_shift"), tensor_from(slice(bp->shift), {1, c1 - c0, 1, 1}, dt));
        return g.add_node(kiln::op("add"), {g.add_node(kiln::op("mul"), {x, s}, {})->output(), t}, {})->output();
      });
      appended = true;
      items.push_back(before + " -> into the " + std::to_string(branches) + " branches of its concat");
      uses = g.uses();
    }
    for (ir::Node* bn : g.nodes()) {
      std::vector<ir::Node*> replaced;
      ir::Value* folded = fold_layer_scale(g, bn, uses, replaced);
      if (!folded) folded = fold_scalar_through_views(g, bn, uses, replaced);
      if (!folded) folded = fold_batch_norm_through_flatten(g, bn, uses, replaced);
      if (folded) {
        std::string before;
        for (auto it = replaced.rbegin(); it != replaced.rend(); ++it) before += (before.empty() ? "" : " + ") + (*it)->str();
        replace(bn, folded, replaced, before);
        continue;
      }
      const bool batch_norm = bn->op().name() == "batch_norm";
      std::optional<ChannelAffine> scale = batch_norm ? std::nullopt : channel_affine(bn);
      if (!batch_norm && !scale) continue;
      ir::Value* x = batch_norm ? bn->inputs()[0] : scale->x;
      ir::Node* p = x->producer();
      if (!p || use_count(uses, x) != 1 || is_graph_output(g, x) || !is_floating(x->type().dtype)) continue;
      if (x->type().shape.size() < 2 || x->type().shape[1].is_symbolic()) continue;
      int64_t ch = x->type().shape[1].size;
      auto bp = batch_norm ? batch_norm_affine(bn, ch) : std::optional<BatchNormAffine>(scale->affine);
      if (!bp) continue;
      const std::string& op = p->op().name();
      std::string before = p->str() + " + " + bn->str();
      ir::Value* result = nullptr;
      if (op == "conv2d" && floating_const(p->inputs()[1]) && (!input_at(p, 2) || floating_const(input_at(p, 2)))) {
        const ir::Value* w = p->inputs()[1];
        Shape ws = w->constant().shape();
        if (ws.empty() || ws[0] != ch) continue;
        auto wv = const_values(w);
        size_t per = wv.size() / static_cast<size_t>(ch);
        for (size_t i = 0; i < wv.size(); ++i) wv[i] *= bp->scale[i / per];
        std::vector<double> b(static_cast<size_t>(ch), 0.0);
        if (input_at(p, 2)) b = const_values(input_at(p, 2));
        for (size_t i = 0; i < b.size(); ++i) b[i] = b[i] * bp->scale[i] + bp->shift[i];
        DType dt = w->type().dtype;
        result = emit(g, *p, g.add_constant(g.fresh_name(w->name() + "_bn"), tensor_from(wv, ws, dt)),
                      g.add_constant(g.fresh_name("bias_bn"), tensor_from(b, {ch}, dt)), p->attrs(), x->type());
      } else if (op == "gemm" && x->type().shape.size() == 2 && floating_const(p->inputs()[1]) &&
                 (!input_at(p, 2) || floating_const(input_at(p, 2)))) {
        const ir::Value* w = p->inputs()[1];
        bool tb = p->attrs().get_bool("trans_b");
        Shape ws = w->constant().shape();
        auto wv = const_values(w);
        // op(b) is K x N: b is [N, K] when transposed, else [K, N].
        for (int64_t r = 0; r < ws[0]; ++r)
          for (int64_t c = 0; c < ws[1]; ++c) wv[static_cast<size_t>(r * ws[1] + c)] *= bp->scale[static_cast<size_t>(tb ? r : c)];
        double beta = p->attrs().get_float("beta");
        Shape cs{ch};
        std::vector<double> cv(static_cast<size_t>(ch), 0.0);
        if (input_at(p, 2)) {
          Tensor c = input_at(p, 2)->constant();
          Shape s = c.shape();
          if (s.size() == 2) cs = {s[0], ch};
          Tensor cb = c.to(DType::f64).broadcast_to(cs).contiguous();
          const double* d = cb.data<double>();
          cv.assign(d, d + cb.numel());
        }
        for (size_t i = 0; i < cv.size(); ++i) {
          size_t j = i % static_cast<size_t>(ch);
          cv[i] = bp->scale[j] * (beta * cv[i]) + bp->shift[j];
        }
        DType dt = w->type().dtype;
        Attrs a = p->attrs();
        a.set("beta", 1.0);
        result = emit(g, *p, g.add_constant(g.fresh_name(w->name() + "_bn"), tensor_from(wv, ws, dt)),
                      g.add_constant(g.fresh_name("bias_bn"), tensor_from(cv, cs, dt)), a, x->type());
      } else if (op == "matmul" && x->type().shape.size() == 2 && p->inputs()[0]->type().shape.size() == 2 &&
                 floating_const(p->inputs()[1]) && p->inputs()[1]->type().shape.size() == 2) {
        DType dt = p->inputs()[1]->type().dtype;
        ir::Value* nw = columns_scaled(g, p->inputs()[1], bp->scale);
        ir::Value* nc = g.add_constant(g.fresh_name("bias_bn"), tensor_from(bp->shift, {ch}, dt));
        result = emit(g, kiln::op("gemm"), nw, nc, {}, x->type(), p->inputs()[0]);
      } else {
        continue;
      }
      if (!result) continue;
      replace(bn, result, {bn, p}, before);
    }
    // ... then an activation after a concat of (by now folded) convolutions, which the epilogue
    // pass takes into each. (In order again first: a concat made above lies after its readers.)
    if (appended) {
      topo_reorder(g);
      uses = g.uses();
    }
    for (ir::Node* a : g.nodes()) {
      if (!activation_of(a) || a->inputs().size() != 1) continue;
      ir::Node* c = concat_of_convs(g, a->inputs()[0], uses);
      if (!c) continue;
      const std::string before = a->str();
      const size_t branches = c->inputs().size();
      into_branches(g, a, c, [&](ir::Value* x, int64_t, int64_t) { return g.add_node(a->op(), {x}, a->attrs())->output(); });
      appended = true;
      items.push_back(before + " -> into the " + std::to_string(branches) + " branches of its concat");
      uses = g.uses();
    }
    if (appended) topo_reorder(g);
    return report("bn_fold", "folded", items, "no batch_norm or per-channel scale to fold");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_bn_fold() { return std::make_unique<BnFoldPass>(); }

}  // namespace kiln::compiler::passes
