// Attention fusion: scaled dot-product attention as exporters emit it,
//   s = matmul(q, k^T)  [* c | / c]  [+ mask | masked fill]  ->  p = softmax(s, last axis)
//   [-> where(isnan(p), 0, p)]  ->  matmul(p, v)  [-> permute keeping the last dim last, the head merge's]
// becomes one fused_attention(q, k, v, mask) {scale, k_transposed, out_dims, zero_nan_rows} node
// (src/ops/defs/fused/attention.cc) that never materializes the scores. k^T is either a permute
// swapping k's last two dims (k is then read untransposed and the permute disappears when nothing
// else reads it) or any value already laid out [..., D, Sk] (k_transposed = true; e.g. BERT's
// Transpose(perm = 0, 2, 3, 1) of [B, S, H, D]). Scalar-constant factors on q, on k^T (before or
// after its permute; PyTorch's scaled_dot_product_attention export scales both by sqrt(scale))
// and on the scores multiply into `scale` (divisions by one divide it).
//
// Note [Masked fill as an additive mask]
// PyTorch's masked_fill (DistilBERT's scores.masked_fill(mask == 0, finfo.min)) exports as
// where(cond, fill, s), or where(cond, s, fill) for a mask of the keys kept. With fill at most
// -1e30 or -inf, s + fill rounds to fill for any score under 1e21 in magnitude, so the fill is the
// same as adding where(cond, fill, 0) (where(cond, 0, fill)): a row with every key masked comes out
// uniform (finfo.min) or NaN (-inf) either way. The pass emits that additive mask, the shape of
// cond (one row of keys per sequence), and fuses the attention around it. A larger fill
// (-10000, as old BERT exports have it in an add) would differ on fully masked rows and stays.
//
// Note [NaN rows to zero]
// PyTorch's scaled_dot_product_attention with a mask exports (opset 14+) as an additive mask of
// where(keep, 0, -inf), the softmax, and where(isnan(p), 0, p) before the second matmul: a query
// row whose keys are all masked gets zero probabilities instead of 0/0. HuggingFace encoders use
// that attention by default. With the guard unfused (it kept the softmax's output from being the
// second matmul's only input), a HuggingFace BERT-base at sequence 128 on two threads of a Zen 4
// took 120 ms at batch 1 and 947 at batch 8, 0.97-0.99x ONNX Runtime's time; fused, 109 and 868.
// In kiln's softmax a row is NaN wholly or not at all (a NaN score, or a max of +-inf, poisons the
// row), so the guard is a per-row choice, which fused_attention makes under zero_nan_rows: such a
// row's probabilities become zeros, and its output 0 * v, as the guarded graph's.
// Note [Two additive terms]
// MPNet adds a relative position bias [1, H, S, S] (computed once, read by every layer) and the
// padding mask [B, 1, 1, S] to its scaled scores, one add after the other; unfused, its attention
// ran as matmul, div, two adds, softmax and matmul in each of 12 layers (12.3 of 158 ms at batch 1
// on one thread). Either nesting of the two adds matches: the pass emits their sum as the one mask
// (each term must broadcast to the scores without growing them), and since every layer adds the
// same two values in the same order, cse leaves one such sum for the whole encoder.
//
// Left alone: a softmax over another axis, a dropout (or anything) between softmax and the second
// matmul, a mask that would broadcast the scores to a larger shape or has another dtype, q / k / v
// whose leading (batch, head) dims differ other than by k's and v's 1s against q's static counts
// (Note [One key head for all]), ranks other than 2..4, dtypes other than f32 / f64, non-constant
// scales, and any intermediate read outside the pattern (Note [Private intermediates]).

#include "compiler/passes/pattern.h"

namespace kiln::compiler::passes {
namespace {

struct AttentionMatch {
  ir::Value* q = nullptr;
  ir::Value* k = nullptr;
  ir::Value* v = nullptr;
  ir::Value* mask = nullptr;
  ir::Value* mask2 = nullptr;  // a second additive term, summed with mask (Note [Two additive terms])
  ir::Node* fill = nullptr;  // a masked fill's where (Note [Masked fill as an additive mask])
  bool fill_first = true;    // where(cond, fill, s), else where(cond, s, fill)
  double scale = 1.0;
  bool k_transposed = true;
  bool zero_nan_rows = false;  // Note [NaN rows to zero]
  std::vector<int64_t> out_dims;  // the permute after it, folded in (Note [Attention output layout])
  ir::Node* root = nullptr;
  std::set<ir::Node*> nodes;
};

// Note [Attention output layout]
// Encoders merge heads by permuting the attention output [B, H, S, Dv] (to [B, S, H, Dv] in
// BERT-style exports, [S, B, H, Dv] in nn.MultiheadAttention's) and reshaping it to rows of
// H * Dv. The permute is a view, but the reshape of a permuted view is a copy: a full pass over the
// activations in every layer. When such a permute (any that keeps Dv last) is the attention
// output's only reader, fused_attention takes it over (out_dims: it writes its rows straight into
// the permuted layout, H * Dv floats apart) and the reshape becomes a view.
// The permute's dims, normalized, when it keeps the last dim last and is no identity; else empty.
std::vector<int64_t> row_preserving_dims(const ir::Node* permute) {
  std::vector<int64_t> dims = permute->attrs().get_ints("dims");
  const int64_t r = static_cast<int64_t>(dims.size());
  bool identity = true;
  for (int64_t i = 0; i < r; ++i) {
    int64_t& d = dims[static_cast<size_t>(i)];
    d = d < 0 ? d + r : d;
    identity = identity && d == i;
  }
  if (r < 3 || identity || dims.back() != r - 1) return {};
  return dims;
}

bool swaps_last_two(const ir::Node* permute) {
  const std::vector<int64_t>& dims = permute->attrs().get_ints("dims");
  const int64_t r = static_cast<int64_t>(dims.size());
  if (r < 2) return false;
  for (int64_t i = 0; i < r; ++i) {
    int64_t want = i == r - 2 ? r - 1 : i == r - 1 ? r - 2 : i;
    int64_t d = dims[static_cast<size_t>(i)];
    if ((d < 0 ? d + r : d) != want) return false;
  }
  return true;
}

class AttentionFusion {
 public:
  AttentionFusion(const ir::Graph& g, const Uses& uses) : g_(g), uses_(uses) {}

  std::optional<AttentionMatch> match(ir::Node* softmax) {
    AttentionMatch m;
    const ir::ValueType& st = softmax->output()->type();
    const int64_t rank = static_cast<int64_t>(st.shape.size());
    if (rank < 2 || rank > 4 || (st.dtype != DType::f32 && st.dtype != DType::f64)) return std::nullopt;
    int64_t axis = softmax->attrs().get_int("axis");
    if ((axis < 0 ? axis + rank : axis) != rank - 1) return std::nullopt;
    m.nodes.insert(softmax);
    // [where(isnan(p), 0, p)] (Note [NaN rows to zero]), then p @ v
    ir::Value* p = softmax->output();
    if (ir::Node* guard = nan_guard(p, m)) p = guard->output();
    ir::Node* pv = sole_reader(g_, uses_, p);
    if (!pv || pv->op().name() != "matmul" || pv->inputs()[0] != p) return std::nullopt;
    m.v = pv->inputs()[1];
    m.root = pv;
    m.nodes.insert(pv);
    // [+ mask]
    ir::Value* s = softmax->inputs()[0];
    ir::Node* qk = nullptr;
    if (ir::Node* add = producer_op(s, "add"); add && sole_reader(g_, uses_, s)) {
      for (int i = 0; i < 2 && !qk; ++i) {
        ir::Value* cand = add->inputs()[static_cast<size_t>(i)];
        ir::Value* mask = add->inputs()[static_cast<size_t>(1 - i)];
        std::set<ir::Node*> nodes;
        double scale = 1.0;
        if (ir::Node* mm = scores(cand, nodes, scale); mm && mask != cand && mask->type().dtype == st.dtype &&
                                                       mask->type().shape.size() <= st.shape.size() &&
                                                       mm->output()->type() == st) {
          qk = mm;
          m.mask = mask;
          m.scale = scale;
          m.nodes.insert(nodes.begin(), nodes.end());
          m.nodes.insert(add);
        }
      }
      if (!qk) qk = two_terms(add, st, m);
    }
    if (!qk) qk = masked_fill(s, st, m);
    if (!qk) {
      std::set<ir::Node*> nodes;
      qk = scores(s, nodes, m.scale);
      if (!qk) return std::nullopt;
      m.nodes.insert(nodes.begin(), nodes.end());
    }
    // q and k^T, with their scalar factors
    m.q = peel_scale(qk->inputs()[0], m);
    ir::Value* kt = peel_scale(qk->inputs()[1], m);
    m.k = kt;
    if (ir::Node* perm = producer_op(kt, "permute"); perm && swaps_last_two(perm) && sole_reader(g_, uses_, kt)) {
      m.nodes.insert(perm);
      m.k = peel_scale(perm->inputs()[0], m);
      m.k_transposed = false;
    }
    // Shapes: k and v have q's leading dims, or 1 where q's is static (Note [One key head for all]).
    const auto& qs = m.q->type().shape;
    const auto& ks = m.k->type().shape;
    const auto& vs = m.v->type().shape;
    if (qs.size() != st.shape.size() || ks.size() != qs.size() || vs.size() != qs.size()) return std::nullopt;
    for (size_t d = 0; d + 2 < qs.size(); ++d)
      for (const ir::SymShape* os : {&ks, &vs})
        if (!((*os)[d] == qs[d]) && !((*os)[d] == ir::Dim(1) && !qs[d].is_symbolic())) return std::nullopt;
    for (const ir::Value* t : {m.q, m.k, m.v})
      if (t->type().dtype != st.dtype) return std::nullopt;
    if (!std::isfinite(m.scale)) return std::nullopt;
    if (!private_to(g_, uses_, m.nodes, m.root)) return std::nullopt;
    if (ir::Node* perm = sole_reader(g_, uses_, m.root->output()); perm && perm->op().name() == "permute") {
      if (std::vector<int64_t> dims = row_preserving_dims(perm); !dims.empty()) {
        m.nodes.insert(perm);
        m.root = perm;
        m.out_dims = std::move(dims);
      }
    }
    return m;
  }

 private:
  // Whether an additive term has the scores' dtype and broadcasts to them without growing them.
  static bool fits_scores(const ir::Value* t, const ir::ValueType& st) {
    const ir::SymShape& ts = t->type().shape;
    if (t->type().dtype != st.dtype || ts.size() > st.shape.size()) return false;
    for (size_t i = 1; i <= ts.size(); ++i) {
      const ir::Dim& d = ts[ts.size() - i];
      if (!(d == ir::Dim(1)) && !(d == st.shape[st.shape.size() - i])) return false;
    }
    return true;
  }

  // Note [Two additive terms]: s = (scores + a) + b with `outer` the second add (either operand
  // order in each). On a match, the scores' matmul, with m.mask = a and m.mask2 = b.
  ir::Node* two_terms(ir::Node* outer, const ir::ValueType& st, AttentionMatch& m) {
    for (int i = 0; i < 2; ++i) {
      ir::Value* inner_out = outer->inputs()[static_cast<size_t>(i)];
      ir::Value* b = outer->inputs()[static_cast<size_t>(1 - i)];
      ir::Node* inner = producer_op(inner_out, "add");
      if (!inner || !sole_reader(g_, uses_, inner_out) || !fits_scores(b, st)) continue;
      for (int j = 0; j < 2; ++j) {
        ir::Value* cand = inner->inputs()[static_cast<size_t>(j)];
        ir::Value* a = inner->inputs()[static_cast<size_t>(1 - j)];
        std::set<ir::Node*> nodes;
        double scale = 1.0;
        ir::Node* mm = fits_scores(a, st) && a != cand && b != cand ? scores(cand, nodes, scale) : nullptr;
        if (!mm || !(mm->output()->type() == st) || !(inner_out->type() == st)) continue;
        m.mask = a;
        m.mask2 = b;
        m.scale = scale;
        m.nodes.insert(nodes.begin(), nodes.end());
        m.nodes.insert({inner, outer});
        return mm;
      }
    }
    return nullptr;
  }

  // s = matmul(q, k^T) [* c | / c]: the matmul, with the scale multiplied into `scale`.
  ir::Node* scores(ir::Value* s, std::set<ir::Node*>& nodes, double& scale) {
    for (int steps = 0; steps < 4; ++steps) {
      if (!sole_reader(g_, uses_, s)) return nullptr;
      ir::Node* p = s->producer();
      if (!p || p->outputs().size() != 1) return nullptr;
      if (p->op().name() == "matmul") {
        nodes.insert(p);
        return p;
      }
      ir::Value* other = nullptr;
      if (p->op().name() == "mul") {
        auto c = scalar_operand(p, &other);
        if (!c || !(other->type() == s->type())) return nullptr;
        scale *= *c;
      } else if (p->op().name() == "div") {
        auto c = scalar_const(p->inputs()[1]);
        other = p->inputs()[0];
        if (!c || *c == 0.0 || !(other->type() == s->type())) return nullptr;
        scale /= *c;
      } else {
        return nullptr;
      }
      nodes.insert(p);
      s = other;
    }
    return nullptr;
  }

  // Note [Masked fill as an additive mask]: s = where(cond, fill, scores) or where(cond, scores,
  // fill). On a match, the scores' matmul, with m.fill set to the where node and m.mask left
  // null (the pass emits the additive mask).
  ir::Node* masked_fill(ir::Value* s, const ir::ValueType& st, AttentionMatch& m) {
    ir::Node* w = producer_op(s, "where");
    if (!w || !sole_reader(g_, uses_, s) || w->inputs().size() != 3) return nullptr;
    ir::Value* cond = w->inputs()[0];
    if (!cond || cond->type().dtype != DType::boolean || cond->type().shape.size() > st.shape.size()) return nullptr;
    for (int fill_first = 0; fill_first < 2; ++fill_first) {
      ir::Value* fill = w->inputs()[fill_first ? 1 : 2];
      ir::Value* cand = w->inputs()[fill_first ? 2 : 1];
      auto f = scalar_const(fill);
      if (!f || !(*f <= -1e30) || fill->type().dtype != st.dtype) continue;
      std::set<ir::Node*> nodes;
      double scale = 1.0;
      ir::Node* mm = scores(cand, nodes, scale);
      if (!mm || !(mm->output()->type() == st)) continue;
      m.scale = scale;
      m.nodes.insert(nodes.begin(), nodes.end());
      m.nodes.insert(w);
      m.fill = w;
      m.fill_first = fill_first != 0;
      return mm;
    }
    return nullptr;
  }

  // Note [NaN rows to zero]: p read by exactly isnan(p) and where(isnan(p), 0, p), the isnan by
  // the where alone: the where (its nodes added to m, m.zero_nan_rows set), else nullptr.
  ir::Node* nan_guard(ir::Value* p, AttentionMatch& m) {
    auto it = uses_.find(p);
    if (it == uses_.end() || it->second.size() != 2 || is_graph_output(g_, p)) return nullptr;
    ir::Node* isnan = nullptr;
    ir::Node* where = nullptr;
    for (const ir::Use& u : it->second) {
      if (!u.node || u.node->outputs().size() != 1) return nullptr;
      if (u.node->op().name() == "isnan") isnan = u.node;
      else if (u.node->op().name() == "where") where = u.node;
    }
    if (!isnan || !where || where->inputs().size() != 3) return nullptr;
    if (where->inputs()[0] != isnan->output() || where->inputs()[2] != p || sole_reader(g_, uses_, isnan->output()) != where)
      return nullptr;
    auto zero = scalar_const(where->inputs()[1]);
    if (!zero || *zero != 0.0 || !(where->output()->type() == p->type())) return nullptr;
    m.nodes.insert(isnan);
    m.nodes.insert(where);
    m.zero_nan_rows = true;
    return where;
  }

  // v = mul(x, c) or div(x, c) with c a scalar constant and v read once: x (c multiplied into, or
  // divided out of, the scale).
  ir::Value* peel_scale(ir::Value* v, AttentionMatch& m) {
    if (!sole_reader(g_, uses_, v)) return v;
    ir::Value* x = nullptr;
    std::optional<double> c;
    ir::Node* p = producer_op(v, "mul");
    if (p) {
      c = scalar_operand(p, &x);
    } else if ((p = producer_op(v, "div"))) {
      x = p->inputs()[0];
      auto d = scalar_const(p->inputs()[1]);
      if (d && *d != 0.0) c = 1.0 / *d;
    }
    if (!c || !(x->type() == v->type())) return v;
    m.scale *= *c;
    m.nodes.insert(p);
    return x;
  }

  const ir::Graph& g_;
  const Uses& uses_;
};

// Note [Grouped-query heads read in place]
// Grouped-query attention (LLaMA 2/3, Mistral, Qwen) keeps Hkv key and value heads for H = Hkv * G
// query heads, and PyTorch exports its repeat_kv as unsqueeze(kv, 2), expand to [B, Hkv, G, S, D]
// (a view: stride 0 along G), reshape to [B, H, S, D]: that reshape cannot be a view, so every
// layer copied k and v G times over (in a LLaMA-shaped decoder with 12 query and 4 key heads,
// 0.1 ms a layer at batch 1 and 0.34 at batch 8 on two threads). fused_attention reads any strides
// in place, so the grouped form runs it on 5-D operands instead: q split to [B, Hkv, G, Sq, D] (a
// view), k and v the expand's stride-0 views, a mask [B, 1, Sq, Sk] given a dim for the group, and
// out_dims carried over with H as the (Hkv, G) pair, whose output reshapes back to the 4-D one as a
// view. Where k and v are not both repeated alike, q's dims past the batch are not static, or a
// mask varies by head, the plain form stays.
struct GroupedHeads {
  ir::Value* k = nullptr;  // the expand's [B, Hkv, G, S, D]
  ir::Value* v = nullptr;
  int64_t kv_heads = 0, group = 0;
};

// The expand's output where k is reshape(expand(unsqueeze(x, [2]))) to [B, Hkv * G, .., ..].
ir::Value* repeated_heads(ir::Value* k, int64_t& kv_heads, int64_t& group) {
  ir::Node* rs = producer_op(k, "reshape");
  ir::Node* ex = rs ? producer_op(rs->inputs()[0], "expand") : nullptr;
  ir::Node* un = ex ? producer_op(ex->inputs()[0], "unsqueeze") : nullptr;
  if (!un) return nullptr;
  const std::vector<int64_t> dims = un->attrs().get_ints("dims");
  if (dims.size() != 1 || (dims[0] != 2 && dims[0] != -3)) return nullptr;
  const ir::SymShape& es = ex->output()->type().shape;
  const ir::SymShape& ks = k->type().shape;
  if (es.size() != 5 || ks.size() != 4 || !(es[0] == ks[0]) || !(es[3] == ks[2]) || !(es[4] == ks[3])) return nullptr;
  if (es[1].is_symbolic() || es[2].is_symbolic() || ks[1].is_symbolic() || es[1].size * es[2].size != ks[1].size)
    return nullptr;
  kv_heads = es[1].size;
  group = es[2].size;
  return ex->output();
}

std::optional<GroupedHeads> grouped_heads(const AttentionMatch& m) {
  GroupedHeads gh;
  int64_t hv = 0, gv = 0;
  gh.k = repeated_heads(m.k, gh.kv_heads, gh.group);
  gh.v = repeated_heads(m.v, hv, gv);
  if (!gh.k || !gh.v || hv != gh.kv_heads || gv != gh.group || gh.group < 2) return std::nullopt;
  const ir::SymShape& qs = m.q->type().shape;
  if (qs.size() != 4 || qs[1].is_symbolic() || qs[1].size != gh.kv_heads * gh.group) return std::nullopt;
  for (size_t d = 1; d < 4; ++d)
    if (qs[d].is_symbolic()) return std::nullopt;
  if (m.mask) {
    const ir::SymShape& ms = m.mask->type().shape;
    const bool per_head = ms.size() >= 3 && !(ms[ms.size() - 3] == ir::Dim(1));
    if (per_head) return std::nullopt;
  }
  return gh;
}

// Note [One key head for all]
// Multi-query attention (MobileNetV4's hybrid blocks) keeps one key and one value head for all its
// query heads: k [B, 1, Sk, D] against q [B, H, Sq, D], the two matmuls broadcasting over the
// heads. The match took only equal leading dims, so MobileNetV4-Hybrid-Medium ran its 8 attentions
// as matmul, softmax, matmul with the scores materialized. Now k and v may have 1 where q's dim is
// static, and are read through an expand to q's dims: a stride-0 view, which fused_attention reads
// in place as the grouped form's operands.
// The expand of k or v to q's leading dims (nullptr where it has them already).
ir::Node* expand_to_heads(ir::Graph& g, ir::Value* t, const ir::SymShape& qs) {
  const ir::SymShape& ts = t->type().shape;
  std::vector<int64_t> shape(ts.size(), -1);
  bool any = false;
  for (size_t d = 0; d + 2 < ts.size(); ++d)
    if (!(ts[d] == qs[d])) shape[d] = qs[d].size, any = true;
  return any ? g.add_node(kiln::op("expand"), {t}, {{"shape", shape}}) : nullptr;
}

// The fused node in its grouped form (Note [Grouped-query heads read in place]) and the reshape
// back to the plain form's output (the last of the nodes returned).
std::vector<ir::Node*> add_grouped_attention(ir::Graph& g, const AttentionMatch& m, const GroupedHeads& gh,
                                             Attrs attrs, const ir::ValueType& want) {
  std::vector<ir::Node*> made;
  const ir::SymShape& qs = m.q->type().shape;
  auto dim = [](const ir::Dim& d) { return d.is_symbolic() ? int64_t{-1} : d.size; };
  std::vector<int64_t> split{dim(qs[0]), gh.kv_heads, gh.group, qs[2].size, qs[3].size};
  made.push_back(g.add_node(kiln::op("reshape"), {m.q}, {{"shape", split}}));
  ir::Value* q = made.back()->output();
  ir::Value* mask = m.mask;
  if (mask && mask->type().shape.size() == 4) {
    made.push_back(g.add_node(kiln::op("unsqueeze"), {mask}, {{"dims", std::vector<int64_t>{1}}}));
    mask = made.back()->output();
  }
  if (!m.out_dims.empty()) {
    std::vector<int64_t> od;
    for (int64_t d : m.out_dims) {
      if (d == 1) od.insert(od.end(), {1, 2});
      else od.push_back(d < 1 ? d : d + 1);
    }
    attrs.set("out_dims", od);
  }
  made.push_back(g.add_node(kiln::op("fused_attention"), {q, gh.k, gh.v, mask}, attrs));
  std::vector<int64_t> back;
  for (const ir::Dim& d : want.shape) back.push_back(dim(d));
  made.push_back(g.add_node(kiln::op("reshape"), {made.back()->output()}, {{"shape", back}}));
  return made;
}

class AttentionFusionPass : public ir::Pass {
 public:
  std::string name() const override { return "attention_fusion"; }
  ir::PassResult run(ir::Graph& g) override {
    std::vector<std::string> items;
    std::set<const ir::Node*> erased;
    auto uses = g.uses();
    for (ir::Node* n : g.nodes()) {
      if (erased.count(n) || n->op().name() != "softmax") continue;
      auto m = AttentionFusion(g, uses).match(n);
      if (!m) continue;
      Attrs attrs{{"scale", m->scale}, {"k_transposed", m->k_transposed}};
      if (!m->out_dims.empty()) attrs.set("out_dims", m->out_dims);
      if (m->zero_nan_rows) attrs.set("zero_nan_rows", true);
      ir::Node* additive = nullptr;
      if (m->fill) {
        ir::Value* fill = m->fill->inputs()[m->fill_first ? 1 : 2];
        ir::Value* zero = g.add_constant("", full({}, 0.0, TensorOptions(fill->type().dtype)));
        additive = g.add_node(kiln::op("where"), {m->fill->inputs()[0], m->fill_first ? fill : zero,
                                                  m->fill_first ? zero : fill});
        m->mask = additive->output();
      }
      if (m->mask2) {  // Note [Two additive terms]
        additive = g.add_node(kiln::op("add"), {m->mask, m->mask2});
        m->mask = additive->output();
      }
      const ir::ValueType& want = m->root->output()->type();
      std::optional<GroupedHeads> gh = grouped_heads(*m);
      std::vector<ir::Node*> made;
      bool broadcast = false;  // Note [One key head for all]
      if (gh) {
        made = add_grouped_attention(g, *m, *gh, attrs, want);
      } else {
        ir::Value* kv[2] = {m->k, m->v};
        for (ir::Value*& t : kv)
          if (ir::Node* e = expand_to_heads(g, t, m->q->type().shape))
            made.push_back(e), t = e->output(), broadcast = true;
        made.push_back(g.add_node(kiln::op("fused_attention"), {m->q, kv[0], kv[1], m->mask}, attrs));
      }
      ir::Node* fa = made.back();
      if (!(fa->output()->type() == want)) {
        for (auto it = made.rbegin(); it != made.rend(); ++it) g.erase_nodes({*it});
        if (additive) g.erase_nodes({additive});
        continue;
      }
      std::string out = m->root->output()->name();
      size_t count = m->nodes.size();
      replace_pattern(g, m->root, fa, m->nodes);
      erased.insert(m->nodes.begin(), m->nodes.end());
      std::string item = "%" + out + " = fused_attention(%" + m->q->name() + ", %" + (gh ? gh->k : m->k)->name() +
                         ", %" + (gh ? gh->v : m->v)->name() + (m->mask ? ", %" + m->mask->name() : std::string()) +
                         ") {scale=" + format_double(m->scale) +
                         (m->k_transposed ? ", k_transposed" : "") + (m->zero_nan_rows ? ", zero_nan_rows" : "") +
                         (m->out_dims.empty() ? "" : ", out_dims=" + shape_str(Shape(m->out_dims.begin(), m->out_dims.end()))) +
                         "} from " + std::to_string(count) + " nodes" +
                         (gh ? ", " + std::to_string(gh->kv_heads) + " key heads read by groups of " +
                                   std::to_string(gh->group)
                             : std::string()) +
                         (broadcast ? ", k and v read by every query head" : "");
      items.push_back(std::move(item));
      uses = g.uses();
    }
    if (!items.empty()) topo_reorder(g);
    return report("attention_fusion", "fused", items, "nothing to fuse");
  }
};

}  // namespace

std::unique_ptr<ir::Pass> make_attention_fusion() { return std::make_unique<AttentionFusionPass>(); }

}  // namespace kiln::compiler::passes
