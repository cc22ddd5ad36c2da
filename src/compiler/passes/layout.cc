// Layout: regions of convolutions that run on channel-blocked activations (NCHWc; Note [Blocked
// channels] in src/kernels/cpu/conv_nchwc.cc), with conversions only at a region's edges.
//
// Note [Layout regions]
// A convolution can run blocked when its filters are f32 constants, it has one group, is depthwise
// (groups = C = K) or has groups of which a few fill whole blocks (nchwc_conv_group_span; its
// padded work counts the span), and its epilogue is one the blocked kernels have (none, relu, relu6,
// hardswish, sigmoid, silu, gelu; conv2d and fused_conv2d alike). Channel counts need not be multiples of
// 16: a partial last block's lanes are zero (or, past an elementwise op or a sigmoid, finite) and
// ignored. A convolution of at most 16 input channels whose input comes from outside (a stem) reads
// that NCHW input as it is. Such convolutions are joined into regions along the values they pass
// each other (input or residual) and the values two of them read (a ResNet block's input feeds its
// first convolution and its projection); a max or average pool or a global average pool of a
// member's output joins its region, and so does an elementwise op that reads one
// (Note [Elementwise ops in a region]), a batch norm of one (with the activation after it:
// Note [Blocked batch norm] in conv_nchwc.cc), an L2 norm of one over H and W (Note [Blocked
// spatial norm]) and a channels-last layer norm of one (Note [Blocked channel norm]). A region
// reads each value from outside through one to_nchwc and hands each value read outside through
// one from_nchwc; inside it values stay blocked, so a conversion pair between two members never
// appears (there is nothing to cancel later). Whether a region pays is a cost model, in FLOP
// equivalents:
//   gain = sum of kGain<kind> * (a member's FLOPs) - (FLOPs spent on partial blocks' lanes)
//   cost = kConvertCost * (elements of every conversion at its edges)
// "layout" keeps the regions whose gain exceeds their cost; "layout_all" keeps every region (for
// tests and for measuring what blocking does where the model says no). ResNets and MobileNetV2
// (and MobileNetV3, its squeeze-excites included) become one region from the stem to the global
// pool, with one conversion, of the pooled output (Note [Blocked global pool] in conv_nchwc.cc; a
// mean over H and W is one: Note [Spatial means as global pools]); a handful of small
// convolutions between two conversions stays as it is.
// Note [Winograd regions]: a 3x3 layer of stride 1 (one group, or groups of whole blocks) that the
// blocked Winograd F(4x4, 3x3) tactic is offered for (Note [Winograd tiles] in conv_nchwc.cc)
// gains far more than the direct blocked kernel's 5%: it does a quarter of the multiplies, and ran
// at 0.37-0.5x the NCHW direct convolution's time (timm's EfficientNetV2-rw-t, 40 -> 160 channels
// at 56 x 56: 1.58 -> 0.58 ms at batch 1 on two threads). Counted at 5%, its narrow layers' padded
// lanes (24 and 40 channels) outweighed every gain, the region stayed NCHW, and the model ran 2.5x
// ONNX Runtime's time (50.8 ms; 16.8 blocked, ORT 22.1). Such layers count half their FLOPs as saved.
// The constants come from bench/RESULTS.md (2026-12-05 05:55, the blocked layout): blocking saved
// 0-50% of a convolution's time (the most on 1x1 layers at 56 x 56 and 28 x 28; 3x3 layers 0-10%
// in the engine), and a conversion ran at 2-3 elements per nanosecond per thread, about 80 FLOP
// equivalents an element at this machine's ~200 GFLOP/s per core.
// Note [What a conversion costs]
// kConvertCost counted that 2.5x until the blocked kernels' gelu came inline (Note [gelu inside the
// tile] in conv_nchwc_avx512.cc). Then timm's EfficientFormerV2-S0 ran 20% faster blocked than
// NCHW and stayed NCHW: its one region gained 1.5e8 FLOP equivalents against 2.3e8 counted for
// 1.2M elements converted, which took 0.49 ms on one thread (to_nchwc 4 elements a nanosecond,
// from_nchwc 2: 50-100 FLOP equivalents at ~200 GFLOP/s). At 100, the slower direction's rate,
// seven held-out timm models change regions (RESULTS.md, 2026-12-07 20:11): EfficientFormerV2-S0
// 21% faster, InceptionNeXt-atto and EfficientViT-M0 15-17%, ReXNet and LeViT 3-5%, ConvNeXtV2-atto
// and TinyViT as before.
// Note [Permuted inputs]
// A convolution or pool that stays NCHW reads its input contiguous, so an input that is a permuted
// view is copied by each reader: SqueezeBERT's q, k and v Conv1d layers read one layer norm output
// written [N, L, C] and permuted to [N, C, L], three transposing copies a layer (0.22 ms a layer
// against 0.15 on a contiguous input). Blocked, the region's one to_nchwc reads the view instead (a
// channels-last view at its contiguous rate). So each such read of a member counts as a conversion
// blocking saves. SqueezeBERT's q / k / v regions (5.3e7 saved against 5.9e7 of conversions,
// 8.2e7 with the copies) then block, every one of its 72 convolutions: batch 1 on two threads
// 37.9-38.7 -> 35.1-35.7 ms, batch 8 254.7-256.6 -> 250.6-251.2 (alternated). Of 117 exported
// models two others change regions, MambaOut-femto and TinyViT-5M, both even.

#include <map>
#include <numeric>
#include <set>

#include "compiler/passes/common.h"
#include "compiler/passes/pattern.h"
#include "kiln/ops/conv.h"

namespace kiln::compiler::passes {
namespace {

// The share of a convolution's FLOPs that blocking saves, by kind (measured: RESULTS.md).
constexpr double kGainSpatial = 0.05;    // filters wider than 1x1, one group
constexpr double kGainPointwise = 0.2;   // 1x1
constexpr double kGainDepthwise = 0.5;
constexpr double kGainWinograd = 0.5;    // 3x3 stride 1 where F(4x4, 3x3) is offered (nchwc_winograd_offered)
constexpr double kConvertCost = 100.0;  // FLOPs per element converted

const std::set<std::string> kBlockedActs = {"none", "relu", "relu6", "hardswish", "sigmoid", "silu", "gelu"};

// A node that can run in a region: a convolution on blocked input, a stem (a convolution of at
// most 16 input channels that reads its NCHW input as it is and writes blocked output), a max or
// average pool or global average pool (or L2 norm over H and W) of a member's output, an
// elementwise op that reads one, a batch norm of one (and the activation after it), or a
// channels-last layer norm of one (the permutes around it).
struct Member {
  // affine: a batch norm as scale_shift_nchwc; channel_norm: a channels-last layer norm's first
  // permute, as layer_norm_nchwc; absorbed: a node such a member runs (the activation after a batch
  // norm; the layer norm and the permute back after the first permute).
  enum class Kind { conv, stem, pool, global_pool, eltwise, affine, channel_norm, absorbed, concat, split } kind =
      Kind::conv;
  ir::Node* node = nullptr;
  ir::Value* x = nullptr;       // read blocked (nullptr: a stem's input, read as it is)
  ir::Value* second = nullptr;  // read blocked: a convolution's residual, a binary op's second operand
  double gain = 0;              // FLOPs blocking saves, less the work on partial blocks' lanes
  std::string act = "none";     // an affine member's activation
  std::vector<ir::Node*> absorbed;  // the nodes after it that it runs, in order (each reads the one before)
  std::vector<ir::Value*> rest;  // a concat's inputs after the first (x)

  // Every value the member reads blocked.
  std::vector<ir::Value*> reads() const {
    std::vector<ir::Value*> r;
    for (ir::Value* v : {x, second})
      if (v) r.push_back(v);
    r.insert(r.end(), rest.begin(), rest.end());
    return r;
  }
};

// Whether v is a permuted view (Note [Permuted inputs]): a permute that reorders axes longer than 1,
// perhaps under unsqueezes and squeezes.
bool permuted_view(const ir::Value* v) {
  for (const ir::Node* n = v->producer(); n != nullptr;) {
    const ir::Value* x = input_at(n, 0);
    if (!x) return false;
    const std::string& op = n->op().name();
    if (op == "unsqueeze" || op == "squeeze") {
      n = x->producer();
      continue;
    }
    if (op != "permute") return false;
    std::vector<int64_t> moved;  // the permute's axes longer than 1, in output order
    for (int64_t d : n->attrs().get_ints("dims"))
      if (d >= 0 && d < static_cast<int64_t>(x->type().shape.size()) &&
          (x->type().shape[static_cast<size_t>(d)].is_symbolic() || x->type().shape[static_cast<size_t>(d)].size != 1))
        moved.push_back(d);
    return !std::is_sorted(moved.begin(), moved.end());
  }
  return false;
}

int64_t static_elems(const ir::Value* v, bool& ok) {
  int64_t n = 1;
  for (const ir::Dim& d : v->type().shape) {
    // A symbolic batch counts as 1: the model compares work per image.
    n *= d.is_symbolic() ? d.scale : d.size;
  }
  ok = ok && n > 0;
  return n;
}

// `x_blocked`: whether the convolution's input is a member's output (so a narrow input is read
// blocked rather than as a stem's).
std::optional<Member> blockable_conv(ir::Node* n, bool x_blocked) {
  const std::string& op = n->op().name();
  if (op != "conv2d" && op != "fused_conv2d") return std::nullopt;
  ir::Value* x = input_at(n, 0);
  ir::Value* w = input_at(n, 1);
  ir::Value* residual = op == "fused_conv2d" ? input_at(n, 3) : nullptr;
  if (!x || !w || !is_const(w) || n->outputs().size() != 1) return std::nullopt;
  const ir::ValueType& yt = n->output()->type();
  if (yt.dtype != DType::f32 || x->type().dtype != DType::f32 || w->type().dtype != DType::f32) return std::nullopt;
  if (yt.shape.size() != 4 || x->type().shape.size() != 4 || w->type().shape.size() != 4) return std::nullopt;
  if (op == "fused_conv2d" && !kBlockedActs.count(n->attrs().get_string("activation"))) return std::nullopt;
  ir::Value* bias = input_at(n, 2);
  if (bias && (!is_const(bias) || bias->type().dtype != DType::f32)) return std::nullopt;
  if (residual && residual->type().dtype != DType::f32) return std::nullopt;
  for (size_t i = 1; i < 4; ++i)
    if (yt.shape[i].is_symbolic() || x->type().shape[i].is_symbolic()) return std::nullopt;
  const Shape ws = w->constant().shape();
  const int64_t groups = n->attrs().get_int("groups"), c = ws[1] * groups;
  const bool depthwise = groups > 1 && groups == ws[0] && ws[1] == 1;
  // Note [Grouped blocks] in conv_nchwc.cc: a span of groups fills whole blocks, at span times
  // the work.
  const int64_t span = depthwise ? 1 : nchwc_conv_group_span(c, ws[0], groups);
  if (span == 0) return std::nullopt;
  const bool stem = groups == 1 && c < 16 && !x_blocked;
  bool ok = true;
  const double out = static_cast<double>(static_elems(n->output(), ok));
  if (!ok) return std::nullopt;
  // Channels padded to whole blocks are work too: a partial block's lanes cost what full ones do.
  auto up = [](int64_t v) { return static_cast<double>((v + 15) / 16 * 16); };
  const double taps = static_cast<double>(ws[2] * ws[3]);
  const double flops = depthwise ? 2.0 * out * taps : 2.0 * out * taps * static_cast<double>(ws[1]);
  const double padded = depthwise ? flops * up(c) / static_cast<double>(c)
                                  : flops * up(ws[0]) / static_cast<double>(ws[0]) *
                                        (stem ? 1.0 : up(c) / static_cast<double>(c)) * static_cast<double>(span);
  // Note [Winograd regions]
  const bool winograd = !stem && nchwc_winograd_offered(ws, n->attrs(), 4);
  const double rate = depthwise            ? kGainDepthwise
                      : ws[2] * ws[3] == 1 ? kGainPointwise
                      : winograd           ? kGainWinograd
                                           : kGainSpatial;
  return Member{stem ? Member::Kind::stem : Member::Kind::conv, n, stem ? nullptr : x, residual,
                rate * flops - (padded - flops)};
}

// Note [Elementwise ops in a region]
// MobileNetV3's squeeze-excite scales a depthwise output by a per-channel factor computed from
// its global pool: pool -> 1x1 -> relu -> 1x1 -> hardsigmoid -> mul. Its convolutions and pool can
// be members; the hardsigmoid and the mul ran in NCHW, so the region broke into one per block, with
// a conversion out and one back in around every mul. Elementwise ops work on blocked values as they
// are: the same op on the 5-d forms, the scale [N, C/16, 1, 1, 16] broadcasting over
// [N, C/16, H, W, 16] as [N, C, 1, 1] does over [N, C, H, W]. So a unary op that keeps finite
// values finite, or a mul, add or sub of two 4-d operands (one may be a pooled [N, C, 1, 1]), joins
// the region of a member whose output it reads (EfficientFormer's token mixer, pool(x) - x, too).
// A partial block's lanes then need not stay zero (a hardsigmoid makes them 0.5), but they stay
// finite, and every reader ignores them: a convolution's filters, a depthwise layer's and a
// conversion back are zero there, and a mul by a zero lane is zero again. A constant per-channel
// operand ([C, 1, 1] or [1, C, 1, 1]: Caffe's scale layer after a batch norm, as the ONNX zoo's
// DenseNet has it) is blocked when the pass runs, zero past C; a constant of one value is read as
// it is.
const std::set<std::string> kBlockedUnary = {"relu", "hardsigmoid", "hardswish", "sigmoid", "tanh", "clip", "silu",
                                             "leaky_relu", "gelu"};

// A constant of one value (NF-ResNet's block scales, x * beta): it broadcasts over the blocked
// form as over the plain one.
bool one_value_constant(const ir::Value* v) {
  return is_const(v) && v->constant().numel() == 1 && v->type().shape.size() <= 4;
}

// A constant of one value per channel of y ([C, 1, 1] or [1, C, 1, 1]), broadcast over y.
bool per_channel_constant(const ir::Value* v, const ir::ValueType& yt) {
  return yt.shape.size() == 4 && !yt.shape[1].is_symbolic() && per_channel_values(v, yt.shape[1].size, true);
}

template <class IsMemberOutput>
std::optional<Member> blockable_eltwise(ir::Node* n, const IsMemberOutput& member_output) {
  const std::string& op = n->op().name();
  const bool unary = kBlockedUnary.count(op) != 0, binary = op == "mul" || op == "add" || op == "sub";
  if ((!unary && !binary) || n->outputs().size() != 1) return std::nullopt;
  const ir::ValueType& yt = n->output()->type();
  if (yt.dtype != DType::f32 || yt.shape.size() != 4) return std::nullopt;
  ir::Value* a = input_at(n, 0);
  ir::Value* b = binary ? input_at(n, 1) : nullptr;
  // Each operand 4-d f32, with the output's N and C and either its H and W or 1 x 1; or a
  // per-channel constant.
  auto fits = [&](const ir::Value* v) {
    if (!v || v->type().dtype != DType::f32) return false;
    if (per_channel_constant(v, yt) || one_value_constant(v)) return true;
    if (v->type().shape.size() != 4) return false;
    const auto& s = v->type().shape;
    const bool pooled = !s[2].is_symbolic() && !s[3].is_symbolic() && s[2].size == 1 && s[3].size == 1;
    return s[0] == yt.shape[0] && s[1] == yt.shape[1] && (pooled || (s[2] == yt.shape[2] && s[3] == yt.shape[3]));
  };
  if (!fits(a) || (binary && !fits(b)) || (unary && n->inputs().size() != 1)) return std::nullopt;
  if (!member_output(a) && !(binary && member_output(b))) return std::nullopt;
  return Member{Member::Kind::eltwise, n, a, b, 0.0};
}

// A batch norm of a member's output (f32, 4-d, constant statistics; bn_fold left it: no
// convolution precedes it) as a per-channel scale and shift, with the activation that alone reads
// it (relu, relu6, hardswish, sigmoid, silu, gelu) applied in the same pass.
template <class IsMemberOutput>
std::optional<Member> blockable_batch_norm(const ir::Graph& g, ir::Node* n, const IsMemberOutput& member_output,
                                           const std::map<const ir::Value*, std::vector<ir::Use>>& uses) {
  if (n->op().name() != "batch_norm" || n->outputs().size() != 1) return std::nullopt;
  ir::Value* x = input_at(n, 0);
  const ir::ValueType& yt = n->output()->type();
  if (!x || !member_output(x) || x->type().dtype != DType::f32 || yt.dtype != DType::f32 || yt.shape.size() != 4 ||
      x->type().shape != yt.shape)
    return std::nullopt;
  for (size_t i = 1; i < 4; ++i)
    if (yt.shape[i].is_symbolic()) return std::nullopt;
  if (!batch_norm_affine(n, yt.shape[1].size)) return std::nullopt;
  Member m{Member::Kind::affine, n, x, nullptr, 0.0};
  auto it = uses.find(n->output());
  if (it != uses.end() && it->second.size() == 1 && it->second[0].node && !is_graph_output(g, n->output())) {
    ir::Node* u = it->second[0].node;
    const auto a = activation_of(u);
    if (a && kBlockedActs.count(*a) && u->outputs().size() == 1 && u->output()->type() == yt &&
        input_at(u, 0) == n->output()) {
      m.act = *a;
      m.absorbed = {u};
    }
  }
  return m;
}

// A layer norm over each pixel's channels, as PyTorch's channels-last LayerNorm exports:
// permute [0, 2, 3, 1] of a member's output -> layer_norm over the last axis (weight and bias
// constant or absent) -> permute [0, 3, 1, 2], each read only by the next (Note [Blocked channel
// norm] in conv_nchwc.cc). The member is the first permute; it runs the other two.
template <class IsMemberOutput>
std::optional<Member> blockable_channel_norm(const ir::Graph& g, ir::Node* n, const IsMemberOutput& member_output,
                                             const std::map<const ir::Value*, std::vector<ir::Use>>& uses) {
  if (n->op().name() != "permute" || n->outputs().size() != 1) return std::nullopt;
  ir::Value* x = input_at(n, 0);
  if (!x || !member_output(x) || x->type().dtype != DType::f32 || x->type().shape.size() != 4) return std::nullopt;
  const ir::Dim& c = x->type().shape[1];
  if (c.is_symbolic() || n->attrs().get_ints("dims") != std::vector<int64_t>{0, 2, 3, 1}) return std::nullopt;
  ir::Node* ln = sole_reader(g, uses, n->output());
  if (!ln || ln->op().name() != "layer_norm" || input_at(ln, 0) != n->output() || ln->outputs().size() != 1)
    return std::nullopt;
  const int64_t axis = ln->attrs().get_int("axis");
  if (axis != 3 && axis != -1) return std::nullopt;
  for (size_t i = 1; i < 3; ++i) {
    const ir::Value* v = input_at(ln, i);
    bool ok = true;
    if (v && (!is_const(v) || v->type().dtype != DType::f32 || static_elems(v, ok) != c.size || !ok))
      return std::nullopt;
  }
  ir::Node* back = sole_reader(g, uses, ln->output());
  if (!back || back->op().name() != "permute" || back->outputs().size() != 1 ||
      back->attrs().get_ints("dims") != std::vector<int64_t>{0, 3, 1, 2})
    return std::nullopt;
  Member m{Member::Kind::channel_norm, n, x, nullptr, 0.0};
  m.absorbed = {ln, back};
  return m;
}

// Note [Blocked concat]
// A concatenation along channels of values whose channel counts are multiples of 16 is, blocked,
// the same concatenation of whole blocks along dim 1 of [N, C/16, H, W, 16]: the op runs as it is
// on the blocked values. SqueezeNet's fire modules (two expand convolutions concatenated) and
// DenseNet's and Inception's joins otherwise end a region at every concat (SqueezeNet ran NCHW
// throughout: 1.33-1.44x ONNX Runtime's time at batch 1). A channel count off a block boundary
// would need lanes moved across blocks, and such a concat stays outside.
template <class IsMemberOutput>
std::optional<Member> blockable_concat(ir::Node* n, const IsMemberOutput& member_output) {
  if (n->op().name() != "concat" || n->outputs().size() != 1 || n->inputs().empty()) return std::nullopt;
  const ir::ValueType& yt = n->output()->type();
  if (yt.dtype != DType::f32 || yt.shape.size() != 4) return std::nullopt;
  if (n->attrs().get_int("axis") != 1 && n->attrs().get_int("axis") != -3) return std::nullopt;
  bool any_member = false;
  for (ir::Value* v : n->inputs()) {
    if (!v || v->type().dtype != DType::f32 || v->type().shape.size() != 4) return std::nullopt;
    const ir::Dim& c = v->type().shape[1];
    if (c.is_symbolic() || c.size % 16 != 0) return std::nullopt;
    any_member = any_member || member_output(v);
  }
  if (!any_member) return std::nullopt;
  Member m{Member::Kind::concat, n, n->inputs()[0], nullptr, 0.0};
  m.rest.assign(n->inputs().begin() + 1, n->inputs().end());
  return m;
}

// A split along channels into parts of whole blocks is, blocked, the same split of
// [N, C/16, H, W, 16] along dim 1 into parts of size/16 blocks (as a concat is: Note [Blocked
// concat]). SKNet splits each block's input between its two kernels' convolutions.
template <class IsMemberOutput>
std::optional<Member> blockable_split(ir::Node* n, const IsMemberOutput& member_output) {
  if (n->op().name() != "split" || n->inputs().size() != 1 || n->outputs().empty()) return std::nullopt;
  ir::Value* x = n->inputs()[0];
  if (!x || !member_output(x) || x->type().dtype != DType::f32 || x->type().shape.size() != 4) return std::nullopt;
  if (n->attrs().get_int("axis") != 1 && n->attrs().get_int("axis") != -3) return std::nullopt;
  for (int64_t size : n->attrs().get_ints("sizes"))
    if (size % 16 != 0) return std::nullopt;
  return Member{Member::Kind::split, n, x, nullptr, 0.0};
}

// Note [Spatial means as global pools]
// x.mean((2, 3), keepdim=True) is a global average pool as PyTorch code often writes it: timm's
// squeeze-excite does, and its MobileNetV3 exported as ReduceMean ran wholly NCHW (each squeeze-
// excite cut the regions apart, and the cost model kept every piece unblocked). Such a mean of a
// member's output joins the region as the global pool does: timm's mobilenetv3_large_100 at batch 1
// on two threads 4.00-4.02 -> 3.41-3.46 ms (ONNX Runtime 3.71-3.74), as one region like
// torchvision's. Without keepdim (torchvision's MNASNet: x.mean([2, 3]) before its classifier) the
// [N, C] mean is the pool, its conversion back and a reshape: MNASNet's mean had run NCHW after a
// from_nchwc of the 7 x 7 x 1280 plane, 0.026 ms at batch 1 on two threads against 0.005 for the
// blocked pool and its conversion.
// A mean or (Note [Blocked spatial norm] in conv_nchwc.cc) an L2 norm over H and W.
bool spatial_mean_or_norm(const ir::Node* n) {
  const std::string& op = n->op().name();
  if ((op != "mean" && op != "norm") || n->inputs().size() != 1 || !n->inputs()[0] || n->outputs().size() != 1)
    return false;
  const int64_t rank = static_cast<int64_t>(n->inputs()[0]->type().shape.size());
  std::vector<int64_t> axes = n->attrs().get_ints("axes");
  for (int64_t& d : axes) d = d < 0 ? d + rank : d;
  std::sort(axes.begin(), axes.end());
  return rank == 4 && axes == std::vector<int64_t>{2, 3};
}

// A per-channel vector of `channels` as the blocked ops take it, a value per lane: [C/16 * 16], zero
// past the values given (a partial block's extra lanes stay zero; no values: all zero).
ir::Value* lane_constant(ir::Graph& g, const std::vector<double>& values, int64_t channels, const std::string& name) {
  const int64_t lanes = (channels + 15) / 16 * 16;
  std::vector<double> v(static_cast<size_t>(lanes), 0.0);
  std::copy(values.begin(), values.end(), v.begin());
  return g.add_constant(g.fresh_name(name), tensor_from(v, {lanes}, DType::f32));
}

class LayoutPass : public ir::Pass {
 public:
  explicit LayoutPass(bool all) : all_(all) {}
  std::string name() const override { return all_ ? "layout_all" : "layout"; }

  ir::PassResult run(ir::Graph& g) override {
    std::vector<Member> members;  // in graph order
    std::map<const ir::Node*, size_t> index;
    auto member_output = [&](const ir::Value* v) { return v && v->producer() && index.count(v->producer()); };
    auto uses = g.uses();
    std::map<const ir::Node*, ir::Node*> absorbed_by;  // a node a member runs -> the node it reads
    for (ir::Node* n : g.nodes()) {
      if (auto it = absorbed_by.find(n); it != absorbed_by.end()) {
        index[n] = members.size();
        members.push_back(Member{Member::Kind::absorbed, n, it->second->output(), nullptr, 0.0});
        continue;
      }
      std::optional<Member> m = blockable_conv(n, member_output(input_at(n, 0)));
      // A pool joins the region of the member whose output it reads.
      const std::string& name = n->op().name();
      const bool pool = name == "max_pool2d" || name == "avg_pool2d" || name == "global_avg_pool";
      if (!m && (pool || spatial_mean_or_norm(n)) &&
          n->outputs().size() == 1 && member_output(input_at(n, 0)) && n->output()->type().dtype == DType::f32 &&
          (n->output()->type().shape.size() == 4 || spatial_mean_or_norm(n)))
        m = Member{name == "max_pool2d" || name == "avg_pool2d" ? Member::Kind::pool : Member::Kind::global_pool, n,
                   input_at(n, 0), nullptr, 0.0};
      if (!m) m = blockable_batch_norm(g, n, member_output, uses);
      if (!m) m = blockable_channel_norm(g, n, member_output, uses);
      if (m) {
        ir::Node* before = n;
        for (ir::Node* a : m->absorbed) absorbed_by[a] = before, before = a;
      }
      if (!m) m = blockable_eltwise(n, member_output);
      if (!m) m = blockable_concat(n, member_output);
      if (!m) m = blockable_split(n, member_output);
      if (m) {
        index[n] = members.size();
        members.push_back(*m);
      }
    }
    if (members.empty()) return report(name(), "blocked", {}, "no convolution to block");
    // Regions: union-find over the members.
    std::vector<size_t> parent(members.size());
    std::iota(parent.begin(), parent.end(), size_t{0});
    auto find = [&](size_t i) {
      while (parent[i] != i) i = parent[i] = parent[parent[i]];
      return i;
    };
    auto join = [&](size_t a, size_t b) { parent[find(a)] = find(b); };
    std::map<const ir::Value*, size_t> first_reader;
    for (size_t i = 0; i < members.size(); ++i)
      for (ir::Value* v : members[i].reads()) {
        if (is_const(v)) continue;  // blocked on its own (a per-channel operand): joins nothing
        if (v->producer() && index.count(v->producer())) join(i, index[v->producer()]);
        auto [it, fresh] = first_reader.emplace(v, i);
        if (!fresh) join(i, it->second);
      }
    // Each region's gain and the conversions at its edges.
    std::map<size_t, double> gain, cost;
    std::map<size_t, size_t> size;
    for (size_t i = 0; i < members.size(); ++i) {
      const size_t r = find(i);
      gain[r] += members[i].gain;
      ++size[r];
      bool ok = true;
      // A value read from outside: converted once for the region; a permuted view read by a
      // convolution or pool, copied by it in NCHW (Note [Permuted inputs]).
      const Member::Kind kind = members[i].kind;
      const bool copies = kind == Member::Kind::conv || kind == Member::Kind::pool ||
                          kind == Member::Kind::global_pool;
      for (ir::Value* v : members[i].reads())
        if (!is_const(v) && !(v->producer() && index.count(v->producer()))) {
          if (first_reader[v] == i) cost[r] += kConvertCost * static_cast<double>(static_elems(v, ok));
          if (copies && v == members[i].x && permuted_view(v))
            gain[r] += kConvertCost * static_cast<double>(static_elems(v, ok));
        }
      // An output read outside the region (or a graph output): converted back once.
      for (ir::Value* y : members[i].node->outputs()) {
        bool outside = false;
        for (const ir::Use& u : uses[y]) outside = outside || !u.node || !index.count(u.node);
        if (outside) cost[r] += kConvertCost * static_cast<double>(static_elems(y, ok));
      }
    }
    std::set<size_t> keep;
    std::vector<std::string> skipped;
    for (const auto& [r, gn] : gain) {
      if (all_ || gn > cost[r]) keep.insert(r);
      else
        skipped.push_back("a region of " + std::to_string(size[r]) + " node(s) at %" +
                          members[r].node->output()->name() + " (conversions would cost " + format_double(cost[r]) +
                          " FLOP equivalents, blocking saves " + format_double(gn) + ")");
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
    int64_t pools = 0, eltwise = 0, norms = 0, channel_norms = 0, absorbed = 0, concats = 0, splits = 0;
    for (const Member& c : members) {
      if (!keep.count(find(index[c.node]))) continue;
      ir::Node* n = c.node;
      ir::Node* b = nullptr;
      if (c.kind == Member::Kind::absorbed) {
        // Its batch norm's scale_shift_nchwc applied it: that output is this one's blocked form.
        blocked[n->output()] = blocked.at(c.x);
        old.push_back(n);
        old_set.insert(n);
        ++absorbed;
        continue;
      }
      if (c.kind == Member::Kind::channel_norm) {
        // Weight and bias a lane each, zero past C (absent: 1 and 0).
        const ir::Node* ln = c.absorbed[0];
        const int64_t ch = c.x->type().shape[1].size;
        const ir::Value* w = input_at(ln, 1);
        const ir::Value* bias = input_at(ln, 2);
        const std::string& nm = ln->output()->name();
        b = g.add_node(kiln::op("layer_norm_nchwc"),
                       {blocked_of(c.x),
                        lane_constant(g, w ? const_values(w) : std::vector<double>(static_cast<size_t>(ch), 1.0),
                                      ch, nm + "_weight"),
                        lane_constant(g, bias ? const_values(bias) : std::vector<double>{}, ch, nm + "_bias")},
                       Attrs{{"channels", ch}, {"eps", ln->attrs().get_float("eps")}});
        ++channel_norms;
      } else if (c.kind == Member::Kind::affine) {
        // Scale and shift a lane each, zero past C: a partial block's extra lanes stay zero.
        const int64_t ch = n->output()->type().shape[1].size;
        const BatchNormAffine aff = *batch_norm_affine(n, ch);
        const std::string& nm = n->output()->name();
        b = g.add_node(kiln::op("scale_shift_nchwc"),
                       {blocked_of(c.x), lane_constant(g, aff.scale, ch, nm + "_scale"),
                        lane_constant(g, aff.shift, ch, nm + "_shift")},
                       Attrs{{"activation", c.act}});
        ++norms;
      } else if (c.kind == Member::Kind::pool) {
        // A max pool, or an average pool (Note [Blocked average pool] in conv_nchwc.cc).
        const bool avg = n->op().name() == "avg_pool2d";
        Attrs a;
        for (const char* k : {"kernel", "stride", "padding"}) a.set(k, n->attrs().get_ints(k));
        if (!avg) a.set("dilation", n->attrs().get_ints("dilation"));
        a.set("ceil_mode", n->attrs().get_bool("ceil_mode"));
        if (avg) a.set("count_include_pad", n->attrs().get_bool("count_include_pad"));
        b = g.add_node(kiln::op(avg ? "avg_pool2d_nchwc" : "max_pool2d_nchwc"), {blocked_of(c.x)}, a);
      } else if (c.kind == Member::Kind::global_pool) {
        b = g.add_node(kiln::op(n->op().name() == "norm" ? "global_norm_nchwc" : "global_avg_pool_nchwc"),
                       {blocked_of(c.x)});
      } else if (c.kind == Member::Kind::split) {
        std::vector<int64_t> blocks = n->attrs().get_ints("sizes");
        for (int64_t& b16 : blocks) b16 /= 16;
        b = g.add_node(n->op(), {blocked_of(c.x)}, Attrs{{"sizes", blocks}, {"axis", int64_t{1}}});
        for (size_t i = 0; i < n->outputs().size(); ++i) {
          g.rename(b->outputs()[i], g.fresh_name(n->outputs()[i]->name() + "_nchwc"));
          blocked[n->outputs()[i]] = b->outputs()[i];
        }
        old.push_back(n);
        old_set.insert(n);
        ++splits;
        continue;
      } else if (c.kind == Member::Kind::concat) {
        std::vector<ir::Value*> ins;
        for (ir::Value* v : c.reads()) ins.push_back(blocked_of(v));
        b = g.add_node(n->op(), ins, Attrs{{"axis", int64_t{1}}});
        ++concats;
      } else if (c.kind == Member::Kind::eltwise) {
        // A per-channel constant operand blocked now: [1, C/16, 1, 1, 16], zero past C.
        auto operand = [&](ir::Value* v) {
          if (one_value_constant(v)) return v;
          if (!per_channel_constant(v, n->output()->type())) return blocked_of(v);
          const int64_t ch = n->output()->type().shape[1].size, blocks = (ch + 15) / 16;
          std::vector<double> vals = *per_channel_values(v, ch, true);
          vals.resize(static_cast<size_t>(blocks * 16), 0.0);
          return g.add_constant(g.fresh_name(v->name() + "_nchwc"),
                                tensor_from(vals, {1, blocks, 1, 1, 16}, DType::f32));
        };
        std::vector<ir::Value*> ins{operand(c.x)};
        if (c.second) ins.push_back(operand(c.second));
        b = g.add_node(n->op(), ins, n->attrs());
      } else {
        const bool fused = n->op().name() == "fused_conv2d";
        Attrs a{{"stride", n->attrs().get_ints("stride")},
                {"padding", n->attrs().get_ints("padding")},
                {"dilation", n->attrs().get_ints("dilation")},
                {"groups", n->attrs().get_int("groups")},
                {"activation", fused ? n->attrs().get_string("activation") : std::string("none")},
                {"residual_before_activation", fused && n->attrs().get_bool("residual_before_activation")}};
        ir::Value* xb = c.kind == Member::Kind::stem ? input_at(n, 0) : blocked_of(c.x);
        ir::Value* rb = c.second ? blocked_of(c.second) : nullptr;
        b = g.add_node(kiln::op("fused_conv2d_nchwc"), {xb, input_at(n, 1), input_at(n, 2), rb}, a);
      }
      g.rename(b->output(), g.fresh_name(n->output()->name() + "_nchwc"));
      blocked[n->output()] = b->output();
      old.push_back(n);
      old_set.insert(n);
      pools += c.kind == Member::Kind::pool || c.kind == Member::Kind::global_pool;
      eltwise += c.kind == Member::Kind::eltwise;
    }
    // Readers outside the region (graph outputs too) get one conversion back; the old nodes, the
    // only other readers, go.
    uses = g.uses();
    std::vector<std::pair<ir::Value*, std::string>> names;
    for (ir::Node* n : old)
      for (ir::Value* y : n->outputs()) {
        bool plain = false;
        for (const ir::Use& u : uses[y]) plain = plain || !u.node || !old_set.count(u.node);
        if (!plain) continue;
        ir::Node* f = g.add_node(kiln::op("from_nchwc"), {blocked[y]}, Attrs{{"channels", y->type().shape[1].size}});
        // A mean without keepdim (Note [Spatial means as global pools]): the pool's [N, C, 1, 1] as [N, C].
        if (y->type().shape.size() == 2)
          f = g.add_node(kiln::op("reshape"), {f->output()},
                         Attrs{{"shape", std::vector<int64_t>{-1, y->type().shape[1].size}}});
        g.replace_all_uses(y, f->output());
        names.emplace_back(f->output(), y->name());
        ++from;
      }
    g.erase_nodes(std::vector<ir::Node*>(old.rbegin(), old.rend()));
    for (auto& [v, nm] : names) g.rename(v, nm);
    topo_reorder(g);
    const int64_t convs =
        static_cast<int64_t>(old.size()) - pools - eltwise - norms - channel_norms - absorbed - concats - splits;
    std::vector<std::string> kinds{std::to_string(convs) + " convolution(s)"};
    if (pools) kinds.push_back(std::to_string(pools) + " pool(s)");
    if (norms) kinds.push_back(std::to_string(norms) + " batch norm(s)");
    if (channel_norms) kinds.push_back(std::to_string(channel_norms) + " layer norm(s)");
    if (concats) kinds.push_back(std::to_string(concats) + " concat(s)");
    if (splits) kinds.push_back(std::to_string(splits) + " split(s)");
    if (eltwise) kinds.push_back(std::to_string(eltwise) + " elementwise op(s)");
    std::string what = kinds[0];
    for (size_t i = 1; i < kinds.size(); ++i) what += (i + 1 == kinds.size() ? " and " : ", ") + kinds[i];
    std::vector<std::string> out{what + " in " + std::to_string(keep.size()) + " region(s), " + std::to_string(to) +
                                 " to_nchwc, " + std::to_string(from) + " from_nchwc"};
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
