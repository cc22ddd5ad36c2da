// kiln IR -> ONNX ModelProto at opset 17 (kiln::onnx::save / export_bytes).
//
// Every kiln node becomes one ONNX node or a short decomposition (Note [Export forms]); graph
// constants become initializers; inputs, outputs and every intermediate value carry their kiln
// types (symbolic dims as dim_param) so ONNX's shape inference can check them. The finished model
// goes through ONNX's own checker before it is returned.
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <numbers>
#include <set>
#include <unordered_map>

#include "kiln/onnx.h"
#include "kiln/version.h"
#include "onnx/tensor_proto.h"

namespace kiln::onnx {

namespace {

using ::onnx::NodeProto;

// Note [Export forms]
// A kiln op maps onto ONNX in one of three ways:
//  - one ONNX op with attributes (relu -> Relu, conv2d -> Conv, softmax -> Softmax);
//  - one ONNX op whose opset-17 form takes as inputs what kiln keeps as attributes (reshape's
//    shape, slice's starts/ends/axes/steps, sum's axes, squeeze/unsqueeze axes, pad's pads, topk's
//    k, clip's bounds, expand's shape, split's sizes, tile's repeats): those become initializers;
//  - a decomposition where opset 17 has no such op (gelu -> Erf form, silu -> x * Sigmoid(x),
//    rsqrt, var/std_dev, ne -> Not(Equal), Python-style float mod, softplus with beta/threshold).
// Inputs are first cast as the op's InputCast policy says (kiln promotes mixed dtypes, ONNX
// requires them equal), and a result whose ONNX dtype differs from kiln's (sum of integers is i64
// in kiln) gets a Cast, so the ONNX graph computes what kiln's kernels compute.

constexpr int64_t kOpset = 17;
constexpr int64_t kIrVersion = 8;  // the IR version of opset 17 (ONNX 1.12)

// What an op's exporter sees: the node, its (cast) input names and dtypes.
struct NodeCtx {
  const ir::Node& node;
  std::vector<std::string> in;  // "" for an absent optional input
  std::vector<DType> dt;
  const Attrs& a;
  bool has(size_t i) const { return i < in.size() && !in[i].empty(); }
  const ir::ValueType& in_type(size_t i) const { return node.inputs()[i]->type(); }
  const ir::ValueType& out_type(size_t i = 0) const { return node.outputs()[i]->type(); }
};

// One exported result: the ONNX value and the dtype ONNX computes it in.
struct Result {
  std::string name;
  DType dtype;
};

class Exporter {
 public:
  Exporter(const ir::Graph& g, const ExportOptions& opt) : g_(g), opt_(opt) {}
  ::onnx::ModelProto run();

 private:
  using Emit = std::function<std::vector<Result>(Exporter&, const NodeCtx&)>;
  static const std::map<std::string, Emit>& emitters();

  // ---- building blocks ----
  std::string fresh(const std::string& stem) {
    std::string base = stem.empty() ? "t" : stem;
    for (;;) {
      std::string n = base + "_" + std::to_string(counter_++);
      if (used_.insert(n).second) return n;
    }
  }
  NodeProto* add_node(const std::string& type, const std::vector<std::string>& ins,
                      const std::vector<std::string>& outs) {
    NodeProto* n = graph_->add_node();
    n->set_op_type(type);
    n->set_name(fresh((cur_ ? cur_->output()->name() + "/" : std::string()) + type));
    for (const auto& i : ins) n->add_input(i);
    for (const auto& o : outs) n->add_output(o);
    if (cur_) n->set_doc_string(cur_->str());
    return n;
  }
  // One node with one fresh output; returns the output name (node via last_).
  std::string op(const std::string& type, const std::vector<std::string>& ins) {
    std::string out = fresh(stem_ + "_" + type);
    last_ = add_node(type, ins, {out});
    return out;
  }
  NodeProto* last() const { return last_; }
  static void attr(NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_f(NodeProto* n, const std::string& name, double v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(static_cast<float>(v));
  }
  static void attr(NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  static void attr(NodeProto* n, const std::string& name, const std::string& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::STRING);
    a->set_s(v);
  }
  std::string initializer(const Tensor& t, const std::string& stem) {
    std::string name = fresh(stem);
    auto* p = graph_->add_initializer();
    tensor_to_proto(t, p);
    p->set_name(name);
    return name;
  }
  std::string ints(const std::vector<int64_t>& v, const std::string& what) {
    return initializer(from_vector<int64_t>(v), stem_ + "_" + what);
  }
  std::string int_scalar(int64_t v, const std::string& what) {
    return initializer(scalar_tensor(v, DType::i64), stem_ + "_" + what);
  }
  std::string scalar(double v, DType dt, const std::string& what) {
    return initializer(scalar_tensor(v, DType::f64).to(dt), stem_ + "_" + what);
  }
  std::string cast(const std::string& name, DType from, DType to) {
    if (from == to) return name;
    auto key = std::make_pair(name, to);
    if (auto it = cast_cache_.find(key); it != cast_cache_.end()) return it->second;
    std::string out = op("Cast", {name});
    attr(last(), "to", static_cast<int64_t>(to_onnx_dtype(to)));
    cast_cache_[key] = out;
    return out;
  }
  // The static size of every dim of `t`, or a kiln::Error naming the node and `what` needs it.
  Shape static_dims(const ir::ValueType& t, const std::string& what) const {
    Shape s;
    for (const auto& d : t.shape) {
      KILN_CHECK(!d.is_symbolic(), where(), ": ", what, " needs static dims, got ", ir::type_str(t));
      s.push_back(d.size);
    }
    return s;
  }
  std::string where() const {
    return "onnx export: node #" + std::to_string(node_index_) + " '" + (cur_ ? cur_->str() : "") + "'";
  }
  void value_info(::onnx::ValueInfoProto* vi, const std::string& name, const ir::ValueType& t) {
    vi->set_name(name);
    auto* tt = vi->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(to_onnx_dtype(t.dtype));
    auto* shape = tt->mutable_shape();
    for (const auto& d : t.shape) {
      auto* dim = shape->add_dim();
      if (d.is_symbolic()) dim->set_dim_param(ir::dim_str(d));
      else dim->set_dim_value(d.size);
    }
  }
  void export_node(const ir::Node& n);

  // ---- op families (defined below) ----
  friend struct Forms;

  const ir::Graph& g_;
  const ExportOptions& opt_;
  ::onnx::GraphProto* graph_ = nullptr;
  std::set<std::string> used_;
  std::map<const ir::Value*, std::string> names_;
  std::map<std::pair<std::string, DType>, std::string> cast_cache_;
  int64_t counter_ = 0;
  const ir::Node* cur_ = nullptr;
  size_t node_index_ = 0;
  std::string stem_;
  NodeProto* last_ = nullptr;
};

// ---- the forms, by kiln op ------------------------------------------------------------------------------

struct Forms {
  using E = Exporter;
  using R = std::vector<Result>;

  static R same(E& e, const NodeCtx& c, const std::string& type) { return {{e.op(type, {c.in[0]}), c.dt[0]}}; }
  static R binary(E& e, const NodeCtx& c, const std::string& type) {
    return {{e.op(type, {c.in[0], c.in[1]}), c.dt[0]}};
  }
  static R compare(E& e, const NodeCtx& c, const std::string& type) {
    return {{e.op(type, {c.in[0], c.in[1]}), DType::boolean}};
  }
  static std::string to_bool(E& e, const NodeCtx& c, size_t i) { return e.cast(c.in[i], c.dt[i], DType::boolean); }
  static R logical(E& e, const NodeCtx& c, const std::string& type) {
    return {{e.op(type, {to_bool(e, c, 0), to_bool(e, c, 1)}), DType::boolean}};
  }

  static R gelu(E& e, const NodeCtx& c) {
    const std::string& x = c.in[0];
    const DType t = c.dt[0];
    const std::string approx = c.a.get_string("approximate");
    std::string inner;
    if (approx == "tanh") {
      // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
      std::string x3 = e.op("Mul", {e.op("Mul", {x, x}), x});
      std::string poly = e.op("Add", {x, e.op("Mul", {x3, e.scalar(0.044715, t, "c")})});
      inner = e.op("Tanh", {e.op("Mul", {poly, e.scalar(std::sqrt(2.0 / std::numbers::pi), t, "k")})});
    } else {
      KILN_CHECK(approx == "none", e.where(), ": gelu approximate='", approx, "' has no ONNX form");
      inner = e.op("Erf", {e.op("Mul", {x, e.scalar(1.0 / std::numbers::sqrt2, t, "rsqrt2")})});
    }
    std::string one_plus = e.op("Add", {inner, e.scalar(1.0, t, "one")});
    return {{e.op("Mul", {e.op("Mul", {x, e.scalar(0.5, t, "half")}), one_plus}), t}};
  }
  static R softplus(E& e, const NodeCtx& c) {
    // kiln: log(1 + exp(beta x)) / beta, and x itself where beta x > threshold.
    const std::string& x = c.in[0];
    const DType t = c.dt[0];
    const double beta = c.a.get_float("beta"), threshold = c.a.get_float("threshold");
    std::string bx = beta == 1.0 ? x : e.op("Mul", {x, e.scalar(beta, t, "beta")});
    std::string sp = e.op("Softplus", {bx});
    if (beta != 1.0) sp = e.op("Div", {sp, e.scalar(beta, t, "beta")});
    std::string big = e.op("Greater", {bx, e.scalar(threshold, t, "threshold")});
    return {{e.op("Where", {big, x, sp}), t}};
  }
  static R mod(E& e, const NodeCtx& c) {
    const bool fmod = c.a.get_bool("fmod");
    const DType t = c.dt[0];
    std::string r = e.op("Mod", {c.in[0], c.in[1]});
    if (!is_floating(t)) {
      e.attr(e.last(), "fmod", int64_t{fmod});
      return {{r, t}};
    }
    e.attr(e.last(), "fmod", int64_t{1});  // ONNX requires fmod=1 for floats
    if (fmod) return {{r, t}};
    // Python remainder: the C remainder moved by b where it is non-zero and its sign differs from b's.
    std::string zero = e.scalar(0.0, t, "zero");
    std::string nonzero = e.op("Not", {e.op("Equal", {r, zero})});
    std::string differ = e.op("Xor", {e.op("Less", {r, zero}), e.op("Less", {c.in[1], zero})});
    std::string fix = e.op("And", {nonzero, differ});
    return {{e.op("Where", {fix, e.op("Add", {r, c.in[1]}), r}), t}};
  }
  static R clip(E& e, const NodeCtx& c) {
    std::string lo = c.a.has("min") ? e.scalar(c.a.get_float("min"), c.dt[0], "min") : "";
    std::string hi = c.a.has("max") ? e.scalar(c.a.get_float("max"), c.dt[0], "max") : "";
    std::vector<std::string> ins{c.in[0], lo};
    if (!hi.empty()) ins.push_back(hi);
    return {{e.op("Clip", ins), c.dt[0]}};
  }

  // Reductions: attribute axes at opset 17 (ReduceSum takes them as an input since 13).
  static R reduce(E& e, const NodeCtx& c, const std::string& type, bool axes_input, DType compute) {
    std::string x = e.cast(c.in[0], c.dt[0], compute);
    const auto& axes = c.a.get_ints("axes");
    std::vector<std::string> ins{x};
    if (axes_input && !axes.empty()) ins.push_back(e.ints(axes, "axes"));
    std::string y = e.op(type, ins);
    if (!axes_input && !axes.empty()) e.attr(e.last(), "axes", axes);
    e.attr(e.last(), "keepdims", int64_t{c.a.get_bool("keepdim")});
    return {{y, compute}};
  }
  // var / std_dev: sum((x - mean)^2) / (n - correction), n the reduced elements.
  static R variance(E& e, const NodeCtx& c, bool take_sqrt) {
    const std::string& x = c.in[0];
    const DType t = c.dt[0];
    const auto& in_shape = c.in_type(0).shape;
    const int64_t rank = static_cast<int64_t>(in_shape.size());
    std::vector<int64_t> axes = c.a.get_ints("axes");
    if (axes.empty())
      for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
    for (auto& ax : axes) ax = ax < 0 ? ax + rank : ax;
    std::string mean = e.op("ReduceMean", {x});
    e.attr(e.last(), "axes", axes);
    e.attr(e.last(), "keepdims", int64_t{1});
    std::string diff = e.op("Sub", {x, mean});
    std::string sq = e.op("Mul", {diff, diff});
    std::string ss = e.op("ReduceSum", {sq, e.ints(axes, "axes")});
    e.attr(e.last(), "keepdims", int64_t{c.a.get_bool("keepdim")});
    bool is_static = true;
    int64_t n = 1;
    for (int64_t ax : axes) {
      const ir::Dim& d = in_shape[static_cast<size_t>(ax)];
      if (d.is_symbolic()) is_static = false;
      else n *= d.size;
    }
    const double corr = static_cast<double>(c.a.get_int("correction"));
    std::string denom;
    if (is_static) {
      denom = e.scalar(static_cast<double>(n) - corr, t, "denom");
    } else {
      std::string dims = e.op("Gather", {e.op("Shape", {x}), e.ints(axes, "axes")});
      std::string count = e.op("ReduceProd", {dims});
      e.attr(e.last(), "keepdims", int64_t{0});
      denom = e.op("Sub", {e.cast(count, DType::i64, t), e.scalar(corr, t, "correction")});
    }
    std::string var = e.op("Div", {ss, denom});
    return {{take_sqrt ? e.op("Sqrt", {var}) : var, t}};
  }

  static R layer_norm(E& e, const NodeCtx& c) {
    const DType t = c.dt[0];
    const auto& shape = c.in_type(0).shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    int64_t axis = c.a.get_int("axis");
    if (axis < 0) axis += rank;
    std::string scale, bias;
    if (c.has(1)) {
      scale = e.cast(c.in[1], c.dt[1], t);
    } else {  // LayerNormalization requires a scale
      Shape ns;
      for (int64_t d = axis; d < rank; ++d) {
        const ir::Dim& dim = shape[static_cast<size_t>(d)];
        KILN_CHECK(!dim.is_symbolic(), e.where(), ": layer_norm without a weight needs static normalized dims, got ",
                   ir::type_str(c.in_type(0)));
        ns.push_back(dim.size);
      }
      scale = e.initializer(ones(ns, TensorOptions(t)), e.stem_ + "_scale");
    }
    std::vector<std::string> ins{c.in[0], scale};
    if (c.has(2)) ins.push_back(e.cast(c.in[2], c.dt[2], t));
    std::string y = e.op("LayerNormalization", ins);
    e.attr(e.last(), "axis", axis);
    e.attr_f(e.last(), "epsilon", c.a.get_float("eps"));
    return {{y, t}};
  }
  // rms_norm: opset 17 has no RMSNormalization (23), so x * Reciprocal(Sqrt(ReduceMean(x * x) + eps))
  // [* weight], in f32 for half types (RMSNormalization's stash_type).
  static R rms_norm(E& e, const NodeCtx& c) {
    const DType t = c.dt[0], compute = t == DType::f64 ? t : DType::f32;
    const int64_t rank = static_cast<int64_t>(c.in_type(0).shape.size());
    int64_t axis = c.a.get_int("axis");
    if (axis < 0) axis += rank;
    std::vector<int64_t> axes;
    for (int64_t d = axis; d < rank; ++d) axes.push_back(d);
    std::string x = e.cast(c.in[0], t, compute);
    std::string ms = e.op("ReduceMean", {e.op("Mul", {x, x})});
    e.attr(e.last(), "axes", axes);
    e.attr(e.last(), "keepdims", int64_t{1});
    std::string rms = e.op("Sqrt", {e.op("Add", {ms, e.scalar(c.a.get_float("eps"), compute, "eps")})});
    std::string y = e.op("Mul", {x, e.op("Reciprocal", {rms})});
    if (c.has(1)) y = e.op("Mul", {y, e.cast(c.in[1], c.dt[1], compute)});
    return {{e.cast(y, compute, t), t}};
  }
  // rotary_embedding: opset 17 has no RotaryEmbedding (23), so x * cos + R(x) * sin with R(x) a
  // Gather of each element's partner times its sign (-1 for the first of each pair).
  static R rotary_embedding(E& e, const NodeCtx& c) {
    const DType t = c.dt[0];
    const ir::Dim& last = c.in_type(0).shape.back();
    KILN_CHECK(!last.is_symbolic(), e.where(), ": rotary_embedding needs a static last dim, got ",
               ir::type_str(c.in_type(0)));
    const int64_t d = last.size, h = d / 2;
    const bool interleaved = c.a.get_bool("interleaved");
    std::vector<int64_t> partner;
    std::vector<double> sign;
    for (int64_t i = 0; i < d; ++i) {
      partner.push_back(interleaved ? (i ^ 1) : (i < h ? i + h : i - h));
      sign.push_back((interleaved ? i % 2 == 0 : i < h) ? -1.0 : 1.0);
    }
    std::string turned = e.op("Gather", {c.in[0], e.ints(partner, "partner")});
    e.attr(e.last(), "axis", int64_t{-1});
    turned = e.op("Mul", {turned, e.initializer(from_vector(sign).to(t), e.stem_ + "_sign")});
    std::string y = e.op("Add", {e.op("Mul", {c.in[0], c.in[1]}), e.op("Mul", {turned, c.in[2]})});
    return {{y, t}};
  }
  static R batch_norm(E& e, const NodeCtx& c) {
    const DType t = c.dt[0];
    Shape cs = e.static_dims(c.in_type(1), "batch_norm's mean");
    std::string scale = c.has(3) ? e.cast(c.in[3], c.dt[3], t) : e.initializer(ones(cs, TensorOptions(t)), e.stem_ + "_scale");
    std::string bias = c.has(4) ? e.cast(c.in[4], c.dt[4], t) : e.initializer(zeros(cs, TensorOptions(t)), e.stem_ + "_bias");
    std::string y = e.op("BatchNormalization",
                         {c.in[0], scale, bias, e.cast(c.in[1], c.dt[1], t), e.cast(c.in[2], c.dt[2], t)});
    e.attr_f(e.last(), "epsilon", c.a.get_float("eps"));
    return {{y, t}};
  }

  static R conv2d(E& e, const NodeCtx& c) {
    Shape w = e.static_dims(c.in_type(1), "conv2d's weight");
    std::vector<std::string> ins{c.in[0], c.in[1]};
    if (c.has(2)) ins.push_back(c.in[2]);
    std::string y = e.op("Conv", ins);
    NodeProto* n = e.last();
    e.attr(n, "kernel_shape", std::vector<int64_t>(w.begin() + 2, w.end()));
    e.attr(n, "strides", c.a.get_ints("stride"));
    e.attr(n, "pads", c.a.get_ints("padding"));  // [top, left, bottom, right] is ONNX's order too
    e.attr(n, "dilations", c.a.get_ints("dilation"));
    e.attr(n, "group", c.a.get_int("groups"));
    return {{y, c.dt[0]}};
  }
  static R pool(E& e, const NodeCtx& c, bool is_max) {
    std::vector<int64_t> kernel = c.a.get_ints("kernel");
    std::vector<int64_t> stride = c.a.get_ints("stride");
    if (stride.empty()) stride = kernel;
    std::string y = e.op(is_max ? "MaxPool" : "AveragePool", {c.in[0]});
    NodeProto* n = e.last();
    e.attr(n, "kernel_shape", kernel);
    e.attr(n, "strides", stride);
    e.attr(n, "pads", c.a.get_ints("padding"));
    e.attr(n, "ceil_mode", int64_t{c.a.get_bool("ceil_mode")});
    if (is_max) e.attr(n, "dilations", c.a.get_ints("dilation"));
    else e.attr(n, "count_include_pad", int64_t{c.a.get_bool("count_include_pad")});
    return {{y, c.dt[0]}};
  }

  static R reshape(E& e, const NodeCtx& c) {
    const auto& shape = c.a.get_ints("shape");
    std::string y = e.op("Reshape", {c.in[0], e.ints(shape, "shape")});
    // kiln's 0 is an empty dim; ONNX's default reads 0 as "copy the input's dim".
    if (std::find(shape.begin(), shape.end(), 0) != shape.end()) e.attr(e.last(), "allowzero", int64_t{1});
    return {{y, c.dt[0]}};
  }
  static R slice(E& e, const NodeCtx& c) {
    const auto& starts = c.a.get_ints("starts");
    std::vector<int64_t> axes = c.a.get_ints("axes"), steps = c.a.get_ints("steps");
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    return {{e.op("Slice", {c.in[0], e.ints(starts, "starts"), e.ints(c.a.get_ints("ends"), "ends"),
                            e.ints(axes, "axes"), e.ints(steps, "steps")}),
             c.dt[0]}};
  }
  static R squeeze(E& e, const NodeCtx& c) {
    // Explicit axes always: without them ONNX squeezes whatever is 1 at run time (a batch of 1 too).
    const auto& shape = c.in_type(0).shape;
    const int64_t rank = static_cast<int64_t>(shape.size());
    std::vector<int64_t> axes;
    for (int64_t d : c.a.get_ints("dims")) axes.push_back(d < 0 ? d + rank : d);
    if (c.a.get_ints("dims").empty())
      for (int64_t d = 0; d < rank; ++d)
        if (!shape[static_cast<size_t>(d)].is_symbolic() && shape[static_cast<size_t>(d)].size == 1) axes.push_back(d);
    // kiln skips listed dims that are not 1; ONNX rejects them.
    std::erase_if(axes, [&](int64_t d) {
      const ir::Dim& dim = shape[static_cast<size_t>(d)];
      return dim.is_symbolic() || dim.size != 1;
    });
    if (axes.empty()) return {{e.op("Identity", {c.in[0]}), c.dt[0]}};
    return {{e.op("Squeeze", {c.in[0], e.ints(axes, "axes")}), c.dt[0]}};
  }
  static R expand(E& e, const NodeCtx& c) {
    std::vector<int64_t> shape = c.a.get_ints("shape");
    for (auto& d : shape)
      if (d == -1) d = 1;  // ONNX broadcasting keeps the input's dim where the shape says 1
    return {{e.op("Expand", {c.in[0], e.ints(shape, "shape")}), c.dt[0]}};
  }
  static R tile(E& e, const NodeCtx& c) {
    std::vector<int64_t> reps = c.a.get_ints("repeats");
    const size_t rank = c.in_type(0).shape.size();
    std::string x = c.in[0];
    if (reps.size() > rank) {  // torch.tile: x gains leading dims of 1
      std::vector<int64_t> lead;
      for (size_t i = 0; i < reps.size() - rank; ++i) lead.push_back(static_cast<int64_t>(i));
      x = e.op("Unsqueeze", {x, e.ints(lead, "lead")});
    }
    while (reps.size() < rank) reps.insert(reps.begin(), 1);
    return {{e.op("Tile", {x, e.ints(reps, "repeats")}), c.dt[0]}};
  }
  static R pad(E& e, const NodeCtx& c) {
    const std::string mode = c.a.get_string("mode");
    std::vector<std::string> ins{c.in[0], e.ints(c.a.get_ints("pads"), "pads")};
    if (mode == "constant") ins.push_back(e.scalar(c.a.get_float("value"), c.dt[0], "value"));
    std::string y = e.op("Pad", ins);
    e.attr(e.last(), "mode", mode);
    return {{y, c.dt[0]}};
  }
  // N-d pooling (resample/pool_nd.cc): empty stride / dilation mean 1, empty pads 0.
  static void window_attrs(E& e, NodeProto* n, const NodeCtx& c, bool dilations) {
    const auto& kernel = c.a.get_ints("kernel");
    std::vector<int64_t> stride = c.a.get_ints("stride"), pads = c.a.get_ints("pads");
    if (stride.empty()) stride.assign(kernel.size(), 1);
    if (pads.empty()) pads.assign(2 * kernel.size(), 0);
    e.attr(n, "kernel_shape", kernel);
    e.attr(n, "strides", stride);
    e.attr(n, "pads", pads);
    if (dilations && !c.a.get_ints("dilation").empty()) e.attr(n, "dilations", c.a.get_ints("dilation"));
  }
  // Opset 17's AveragePool (11) and LpPool (11) have no dilations; LpPool has no ceil_mode either.
  static void check_window_at_17(E& e, const NodeCtx& c, const char* onnx_op, bool ceil_mode_ok) {
    for (int64_t d : c.a.get_ints("dilation"))
      KILN_CHECK(d == 1, e.where(), ": dilations ", attr_value_str(c.a.get_ints("dilation")), " need ", onnx_op,
                 " of a newer opset than 17");
    KILN_CHECK(ceil_mode_ok || !c.a.get_bool("ceil_mode"), e.where(), ": ceil_mode needs ", onnx_op,
               " of a newer opset than 17");
  }
  static R resize(E& e, const NodeCtx& c) {
    const std::string ctm = c.a.get_string("coordinate_transformation_mode");
    KILN_CHECK(!c.a.get_bool("antialias"), e.where(), ": antialias needs Resize 18; kiln writes opset 17");
    KILN_CHECK(ctm != "half_pixel_symmetric", e.where(), ": coordinate_transformation_mode half_pixel_symmetric needs "
               "Resize 19; kiln writes opset 17");
    const auto& sizes = c.a.get_ints("sizes");
    const auto& scales = c.a.get_floats("scales");
    std::vector<std::string> ins{c.in[0], "", ""};
    const auto& roi = c.a.get_floats("roi");
    if (!roi.empty()) {
      std::vector<float> r(roi.begin(), roi.end());
      ins[1] = e.initializer(from_vector<float>(r), e.stem_ + "_roi");
    }
    if (!scales.empty()) {
      // ONNX derives the sizes from the scales (floor(in * scale)): they must agree with kiln's.
      const auto& shape = c.in_type(0).shape;
      for (size_t d = 0; d < shape.size() && d < scales.size(); ++d) {
        if (shape[d].is_symbolic()) continue;
        const auto from_scale = static_cast<int64_t>(std::floor(static_cast<double>(static_cast<float>(scales[d])) *
                                                                static_cast<double>(shape[d].size)));
        KILN_CHECK(from_scale == sizes[d], e.where(), ": scales ", attr_value_str(scales), " give dim ", d, " size ",
                   from_scale, " in ONNX but kiln's sizes say ", sizes[d]);
      }
      std::vector<float> f(scales.begin(), scales.end());
      ins[2] = e.initializer(from_vector<float>(f), e.stem_ + "_scales");
    } else {
      ins.push_back(e.ints(sizes, "sizes"));
    }
    std::string y = e.op("Resize", ins);
    NodeProto* n = e.last();
    e.attr(n, "mode", c.a.get_string("mode"));
    e.attr(n, "coordinate_transformation_mode", ctm);
    e.attr(n, "nearest_mode", c.a.get_string("nearest_mode"));
    e.attr_f(n, "cubic_coeff_a", c.a.get_float("cubic_coeff_a"));
    e.attr(n, "exclude_outside", int64_t{c.a.get_bool("exclude_outside")});
    e.attr_f(n, "extrapolation_value", c.a.get_float("extrapolation_value"));
    return {{y, c.dt[0]}};
  }
  static R grid_sample(E& e, const NodeCtx& c) {
    // GridSample 16 (opset 17): 4-D only, modes named bilinear / bicubic.
    KILN_CHECK(c.in_type(0).shape.size() == 4, e.where(), ": grid_sample over ", c.in_type(0).shape.size() - 2,
               " spatial dims needs GridSample 20; opset 17's takes 4-D inputs only");
    std::string mode = c.a.get_string("mode");
    if (mode == "linear") mode = "bilinear";
    else if (mode == "cubic") mode = "bicubic";
    std::string y = e.op("GridSample", {c.in[0], e.cast(c.in[1], c.dt[1], c.dt[0])});
    e.attr(e.last(), "mode", mode);
    e.attr(e.last(), "padding_mode", c.a.get_string("padding_mode"));
    e.attr(e.last(), "align_corners", int64_t{c.a.get_bool("align_corners")});
    return {{y, c.dt[0]}};
  }
  static std::string index_input(E& e, const NodeCtx& c, size_t i) {
    return c.dt[i] == DType::i32 || c.dt[i] == DType::i64 ? c.in[i] : e.cast(c.in[i], c.dt[i], DType::i64);
  }
};

const std::map<std::string, Exporter::Emit>& Exporter::emitters() {
  using F = Forms;
  using R = std::vector<Result>;
  static const std::map<std::string, Emit> table = [] {
    std::map<std::string, Emit> m;
    auto same = [&m](const char* kiln, const char* onnx_type) {
      m[kiln] = [t = std::string(onnx_type)](Exporter& e, const NodeCtx& c) { return F::same(e, c, t); };
    };
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"abs", "Abs"}, {"ceil", "Ceil"}, {"cos", "Cos"}, {"erf", "Erf"}, {"exp", "Exp"},
             {"floor", "Floor"}, {"log", "Log"}, {"neg", "Neg"}, {"reciprocal", "Reciprocal"}, {"relu", "Relu"},
             {"round", "Round"}, {"sigmoid", "Sigmoid"}, {"sign", "Sign"}, {"sin", "Sin"}, {"sqrt", "Sqrt"},
             {"tanh", "Tanh"}, {"hardswish", "HardSwish"}, {"clone", "Identity"},
             {"global_avg_pool", "GlobalAveragePool"}, {"tan", "Tan"}, {"asin", "Asin"}, {"acos", "Acos"},
             {"atan", "Atan"}, {"sinh", "Sinh"}, {"cosh", "Cosh"}, {"asinh", "Asinh"}, {"acosh", "Acosh"},
             {"atanh", "Atanh"}, {"softsign", "Softsign"}})
      same(k, o);
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"sub", "Sub"}, {"div", "Div"}, {"pow", "Pow"}, {"maximum", "Max"}, {"minimum", "Min"},
             {"matmul", "MatMul"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) { return F::binary(e, c, t); };
    // bool add / mul are logical or / and in kiln; ONNX's Add and Mul take no bools.
    m["add"] = [](Exporter& e, const NodeCtx& c) { return F::binary(e, c, c.dt[0] == DType::boolean ? "Or" : "Add"); };
    m["mul"] = [](Exporter& e, const NodeCtx& c) { return F::binary(e, c, c.dt[0] == DType::boolean ? "And" : "Mul"); };
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"eq", "Equal"}, {"gt", "Greater"}, {"ge", "GreaterOrEqual"}, {"lt", "Less"}, {"le", "LessOrEqual"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) { return F::compare(e, c, t); };
    m["ne"] = [](Exporter& e, const NodeCtx& c) -> R {
      return {{e.op("Not", {e.op("Equal", {c.in[0], c.in[1]})}), DType::boolean}};
    };
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"logical_and", "And"}, {"logical_or", "Or"}, {"logical_xor", "Xor"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) { return F::logical(e, c, t); };
    m["logical_not"] = [](Exporter& e, const NodeCtx& c) -> R {
      return {{e.op("Not", {F::to_bool(e, c, 0)}), DType::boolean}};
    };
    m["where"] = [](Exporter& e, const NodeCtx& c) -> R {
      return {{e.op("Where", {F::to_bool(e, c, 0), c.in[1], c.in[2]}), c.dt[1]}};
    };
    m["mod"] = F::mod;
    m["clip"] = F::clip;
    m["cast"] = [](Exporter& e, const NodeCtx& c) -> R {
      DType to = c.a.get_dtype("dtype");
      std::string y = e.op("Cast", {c.in[0]});
      e.attr(e.last(), "to", static_cast<int64_t>(to_onnx_dtype(to)));
      return {{y, to}};
    };
    m["copy"] = [](Exporter& e, const NodeCtx& c) -> R {
      // dst's shape and dtype, src's values
      DType to = c.dt[0];
      std::string v = e.cast(c.in[1], c.dt[1], to);
      return {{e.op("Expand", {v, e.op("Shape", {c.in[0]})}), to}};
    };

    // activations
    m["elu"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Elu", {c.in[0]});
      e.attr_f(e.last(), "alpha", c.a.get_float("alpha"));
      return {{y, c.dt[0]}};
    };
    m["leaky_relu"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("LeakyRelu", {c.in[0]});
      e.attr_f(e.last(), "alpha", c.a.get_float("negative_slope"));
      return {{y, c.dt[0]}};
    };
    m["hardsigmoid"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("HardSigmoid", {c.in[0]});
      e.attr_f(e.last(), "alpha", c.a.get_float("alpha"));
      e.attr_f(e.last(), "beta", c.a.get_float("beta"));
      return {{y, c.dt[0]}};
    };
    m["gelu"] = F::gelu;
    m["selu"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Selu", {c.in[0]});
      e.attr_f(e.last(), "alpha", c.a.get_float("alpha"));
      e.attr_f(e.last(), "gamma", c.a.get_float("gamma"));
      return {{y, c.dt[0]}};
    };
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"celu", "Celu"}, {"thresholded_relu", "ThresholdedRelu"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) -> R {
        // Celu (12) is defined for float only: other floating types compute in f32.
        const DType in = t == "Celu" ? DType::f32 : c.dt[0];
        std::string y = e.op(t, {e.cast(c.in[0], c.dt[0], in)});
        e.attr_f(e.last(), "alpha", c.a.get_float("alpha"));
        return {{y, in}};
      };
    m["mish"] = [](Exporter& e, const NodeCtx& c) -> R {  // Mish is opset 18: x * tanh(softplus(x))
      return {{e.op("Mul", {c.in[0], e.op("Tanh", {e.op("Softplus", {c.in[0]})})}), c.dt[0]}};
    };
    m["isnan"] = [](Exporter& e, const NodeCtx& c) -> R { return {{e.op("IsNaN", {c.in[0]}), DType::boolean}}; };
    m["isinf"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("IsInf", {c.in[0]});
      e.attr(e.last(), "detect_positive", int64_t{c.a.get_bool("detect_positive")});
      e.attr(e.last(), "detect_negative", int64_t{c.a.get_bool("detect_negative")});
      return {{y, DType::boolean}};
    };
    m["silu"] = [](Exporter& e, const NodeCtx& c) -> R {
      return {{e.op("Mul", {c.in[0], e.op("Sigmoid", {c.in[0]})}), c.dt[0]}};
    };
    m["rsqrt"] = [](Exporter& e, const NodeCtx& c) -> R {
      return {{e.op("Reciprocal", {e.op("Sqrt", {c.in[0]})}), c.dt[0]}};
    };
    m["softplus"] = F::softplus;
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"softmax", "Softmax"}, {"log_softmax", "LogSoftmax"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) -> R {
        std::string y = e.op(t, {c.in[0]});
        e.attr(e.last(), "axis", c.a.get_int("axis"));
        return {{y, c.dt[0]}};
      };

    // reductions
    m["sum"] = [](Exporter& e, const NodeCtx& c) {
      return F::reduce(e, c, "ReduceSum", true, c.out_type().dtype);
    };
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"prod", "ReduceProd"}, {"mean", "ReduceMean"}, {"max", "ReduceMax"}, {"min", "ReduceMin"},
             {"logsumexp", "ReduceLogSumExp"}, {"norm", "ReduceL2"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) {
        return F::reduce(e, c, t, false, c.out_type().dtype);
      };
    m["var"] = [](Exporter& e, const NodeCtx& c) { return F::variance(e, c, false); };
    m["std_dev"] = [](Exporter& e, const NodeCtx& c) { return F::variance(e, c, true); };
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"argmax", "ArgMax"}, {"argmin", "ArgMin"}})
      m[k] = [t = std::string(o)](Exporter& e, const NodeCtx& c) -> R {
        std::string y = e.op(t, {c.in[0]});
        e.attr(e.last(), "axis", c.a.get_int("axis"));
        e.attr(e.last(), "keepdims", int64_t{c.a.get_bool("keepdim")});
        e.attr(e.last(), "select_last_index", int64_t{c.a.get_bool("select_last_index")});
        return {{y, DType::i64}};
      };
    m["cumsum"] = [](Exporter& e, const NodeCtx& c) -> R {
      DType t = c.out_type().dtype;
      std::string y = e.op("CumSum", {e.cast(c.in[0], c.dt[0], t), e.int_scalar(c.a.get_int("axis"), "axis")});
      e.attr(e.last(), "exclusive", int64_t{c.a.get_bool("exclusive")});
      e.attr(e.last(), "reverse", int64_t{c.a.get_bool("reverse")});
      return {{y, t}};
    };

    // normalization, linear algebra, convolution
    m["layer_norm"] = F::layer_norm;
    m["rms_norm"] = F::rms_norm;
    m["rotary_embedding"] = F::rotary_embedding;
    m["batch_norm"] = F::batch_norm;
    m["lrn"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("LRN", {c.in[0]});
      e.attr(e.last(), "size", c.a.get_int("size"));
      e.attr_f(e.last(), "alpha", c.a.get_float("alpha"));
      e.attr_f(e.last(), "beta", c.a.get_float("beta"));
      e.attr_f(e.last(), "bias", c.a.get_float("bias"));
      return {{y, c.dt[0]}};
    };
    m["gemm"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::vector<std::string> ins{c.in[0], c.in[1]};
      if (c.has(2)) ins.push_back(c.in[2]);
      std::string y = e.op("Gemm", ins);
      e.attr_f(e.last(), "alpha", c.a.get_float("alpha"));
      e.attr_f(e.last(), "beta", c.a.get_float("beta"));
      e.attr(e.last(), "transA", int64_t{c.a.get_bool("trans_a")});
      e.attr(e.last(), "transB", int64_t{c.a.get_bool("trans_b")});
      return {{y, c.dt[0]}};
    };
    m["conv2d"] = F::conv2d;
    m["conv_transpose2d"] = [](Exporter& e, const NodeCtx& c) -> R {
      Shape w = e.static_dims(c.in_type(1), "conv_transpose2d's weight");
      std::vector<std::string> ins{c.in[0], c.in[1]};
      if (c.has(2)) ins.push_back(c.in[2]);
      std::string y = e.op("ConvTranspose", ins);
      NodeProto* n = e.last();
      e.attr(n, "kernel_shape", std::vector<int64_t>(w.begin() + 2, w.end()));
      e.attr(n, "strides", c.a.get_ints("stride"));
      e.attr(n, "pads", c.a.get_ints("padding"));  // crops the full output, as ONNX's pads
      e.attr(n, "output_padding", c.a.get_ints("output_padding"));
      e.attr(n, "dilations", c.a.get_ints("dilation"));
      e.attr(n, "group", c.a.get_int("groups"));
      return {{y, c.dt[0]}};
    };
    m["max_pool2d"] = [](Exporter& e, const NodeCtx& c) { return F::pool(e, c, true); };
    m["avg_pool2d"] = [](Exporter& e, const NodeCtx& c) { return F::pool(e, c, false); };

    // N-d pooling and resampling
    m["max_pool"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string v = e.fresh(e.stem_ + "_values"), i = e.fresh(e.stem_ + "_indices");
      NodeProto* n = e.add_node("MaxPool", {c.in[0]}, {v, i});
      F::window_attrs(e, n, c, true);
      e.attr(n, "ceil_mode", int64_t{c.a.get_bool("ceil_mode")});
      if (c.a.has("storage_order")) e.attr(n, "storage_order", c.a.get_int("storage_order"));
      return {{v, c.dt[0]}, {i, DType::i64}};
    };
    m["avg_pool"] = [](Exporter& e, const NodeCtx& c) -> R {
      F::check_window_at_17(e, c, "AveragePool", true);
      std::string y = e.op("AveragePool", {c.in[0]});
      F::window_attrs(e, e.last(), c, false);
      e.attr(e.last(), "ceil_mode", int64_t{c.a.get_bool("ceil_mode")});
      e.attr(e.last(), "count_include_pad", int64_t{c.a.get_bool("count_include_pad")});
      return {{y, c.dt[0]}};
    };
    m["lp_pool"] = [](Exporter& e, const NodeCtx& c) -> R {
      F::check_window_at_17(e, c, "LpPool", false);
      std::string y = e.op("LpPool", {c.in[0]});
      F::window_attrs(e, e.last(), c, false);
      e.attr(e.last(), "p", c.a.get_int("p"));
      return {{y, c.dt[0]}};
    };
    m["resize"] = F::resize;
    m["grid_sample"] = F::grid_sample;

    // shape and indexing
    m["reshape"] = F::reshape;
    m["permute"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Transpose", {c.in[0]});
      e.attr(e.last(), "perm", c.a.get_ints("dims"));
      return {{y, c.dt[0]}};
    };
    m["slice"] = F::slice;
    m["select"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Gather", {c.in[0], e.int_scalar(c.a.get_int("index"), "index")});
      e.attr(e.last(), "axis", c.a.get_int("dim"));
      return {{y, c.dt[0]}};
    };
    m["expand"] = F::expand;
    m["squeeze"] = F::squeeze;
    m["unsqueeze"] = [](Exporter& e, const NodeCtx& c) -> R {
      return {{e.op("Unsqueeze", {c.in[0], e.ints(c.a.get_ints("dims"), "axes")}), c.dt[0]}};
    };
    m["tile"] = F::tile;
    m["pad"] = F::pad;
    m["concat"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Concat", c.in);
      e.attr(e.last(), "axis", c.a.get_int("axis"));
      return {{y, c.dt[0]}};
    };
    m["split"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::vector<std::string> outs;
      R res;
      for (size_t i = 0; i < c.node.outputs().size(); ++i) {
        outs.push_back(e.fresh(e.stem_ + "_Split"));
        res.push_back({outs.back(), c.dt[0]});
      }
      NodeProto* n = e.add_node("Split", {c.in[0], e.ints(c.a.get_ints("sizes"), "sizes")}, outs);
      e.attr(n, "axis", c.a.get_int("axis"));
      return res;
    };
    m["trilu"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Trilu", {c.in[0], e.int_scalar(c.a.get_int("k"), "k")});
      e.attr(e.last(), "upper", int64_t{c.a.get_bool("upper")});
      return {{y, c.dt[0]}};
    };
    m["topk"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string v = e.fresh(e.stem_ + "_values"), i = e.fresh(e.stem_ + "_indices");
      NodeProto* n = e.add_node("TopK", {c.in[0], e.ints({c.a.get_int("k")}, "k")}, {v, i});
      e.attr(n, "axis", c.a.get_int("axis"));
      e.attr(n, "largest", int64_t{c.a.get_bool("largest")});
      e.attr(n, "sorted", int64_t{c.a.get_bool("sorted")});
      return {{v, c.dt[0]}, {i, DType::i64}};
    };
    m["gather"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("Gather", {c.in[0], F::index_input(e, c, 1)});
      e.attr(e.last(), "axis", c.a.get_int("axis"));
      return {{y, c.dt[0]}};
    };
    m["gather_elements"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("GatherElements", {c.in[0], F::index_input(e, c, 1)});
      e.attr(e.last(), "axis", c.a.get_int("axis"));
      return {{y, c.dt[0]}};
    };
    for (auto [k, add] : std::initializer_list<std::pair<const char*, bool>>{{"scatter", false}, {"scatter_add", true}})
      m[k] = [add = add](Exporter& e, const NodeCtx& c) -> R {
        std::string y = e.op("ScatterElements", {c.in[0], F::index_input(e, c, 1), e.cast(c.in[2], c.dt[2], c.dt[0])});
        e.attr(e.last(), "axis", c.a.get_int("axis"));
        if (add) e.attr(e.last(), "reduction", std::string("add"));
        return {{y, c.dt[0]}};
      };
    m["gather_nd"] = [](Exporter& e, const NodeCtx& c) -> R {
      std::string y = e.op("GatherND", {c.in[0], e.cast(c.in[1], c.dt[1], DType::i64)});
      e.attr(e.last(), "batch_dims", c.a.get_int("batch_dims"));
      return {{y, c.dt[0]}};
    };
    m["scatter_nd"] = [](Exporter& e, const NodeCtx& c) -> R {
      const std::string red = c.a.get_string("reduction");
      KILN_CHECK(red == "none" || red == "add" || red == "mul", e.where(), ": scatter_nd reduction '", red,
                 "' needs ScatterND 18; kiln writes opset 17");
      std::string y = e.op("ScatterND", {c.in[0], e.cast(c.in[1], c.dt[1], DType::i64), e.cast(c.in[2], c.dt[2], c.dt[0])});
      if (red != "none") e.attr(e.last(), "reduction", red);
      return {{y, c.dt[0]}};
    };
    // The Bitwise* ops are opset 18; on bools they are the logical ops.
    for (auto [k, o] : std::initializer_list<std::pair<const char*, const char*>>{
             {"bitwise_and", "And"}, {"bitwise_or", "Or"}, {"bitwise_xor", "Xor"}, {"bitwise_not", "Not"}})
      m[k] = [t = std::string(o), kiln = std::string(k)](Exporter& e, const NodeCtx& c) -> R {
        for (DType d : c.dt)
          KILN_CHECK(d == DType::boolean, e.where(), ": ", kiln, " on ", dtype_name(d),
                     " needs the Bitwise ops of opset 18; kiln writes opset 17 (bool operands only)");
        return {{e.op(t, c.in), DType::boolean}};
      };
    m["bit_shift"] = [](Exporter& e, const NodeCtx& c) -> R {
      // BitShift takes unsigned types only, and kiln shifts counts >= the width out (C++ would not).
      KILN_CHECK(c.dt[0] == DType::u8 && c.dt[1] == DType::u8, e.where(), ": bit_shift on ", dtype_name(c.dt[0]),
                 " has no ONNX form (BitShift takes unsigned integers; kiln's only one is u8)");
      std::string shift = e.op("Min", {c.in[1], e.scalar(8.0, DType::u8, "width")});
      std::string y = e.op("BitShift", {c.in[0], shift});
      e.attr(e.last(), "direction", c.a.get_string("direction") == "left" || c.a.get_string("direction") == "LEFT" ? std::string("LEFT")
                                                                                           : std::string("RIGHT"));
      return {{y, DType::u8}};
    };
    m["one_hot"] = [](Exporter& e, const NodeCtx& c) -> R {
      DType t = c.a.get_dtype("dtype");
      Tensor values = from_vector<double>({0.0, 1.0}).to(t);
      std::string y = e.op("OneHot", {F::index_input(e, c, 0), e.ints({c.a.get_int("depth")}, "depth"),
                                      e.initializer(values, e.stem_ + "_values")});
      e.attr(e.last(), "axis", c.a.get_int("axis"));
      return {{y, t}};
    };
    return m;
  }();
  return table;
}

void Exporter::export_node(const ir::Node& n) {
  cur_ = &n;
  stem_ = n.output()->name();
  const OpDef& def = n.op();
  auto it = emitters().find(def.name());
  if (it == emitters().end()) {
    std::string why = def.onnx_status().kind == RuleStatus::Kind::not_applicable
                          ? " (" + def.onnx_status().reason + ")"
                          : "";
    KILN_FAIL(where(), ": op '", def.name(), "' has no ONNX form", why,
              "; export the graph before such ops are added, or rewrite it with ops that have one");
  }

  // Inputs, cast as the kernel would see them (Note [Export forms]).
  NodeCtx c{n, {}, {}, n.attrs()};
  const auto& ins = n.inputs();
  std::vector<DType> want(ins.size(), DType::f32);
  for (size_t i = 0; i < ins.size(); ++i) want[i] = ins[i] ? ins[i]->type().dtype : DType::f32;
  const size_t first = static_cast<size_t>(std::max(0, def.cast_first_input()));
  if (def.input_cast() == InputCast::common) {
    std::optional<DType> common;
    for (size_t i = first; i < ins.size(); ++i)
      if (ins[i]) common = common ? promote_types(*common, want[i]) : want[i];
    for (size_t i = first; i < ins.size(); ++i)
      if (ins[i]) want[i] = *common;
  } else if (def.input_cast() == InputCast::to_floating) {
    for (size_t i = first; i < ins.size(); ++i)
      if (ins[i]) want[i] = to_floating(want[i]);
  }
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i]) {
      c.in.emplace_back();
      c.dt.push_back(DType::f32);
      continue;
    }
    c.in.push_back(cast(names_.at(ins[i]), ins[i]->type().dtype, want[i]));
    c.dt.push_back(want[i]);
  }

  const int start = graph_->node_size();
  std::vector<Result> results = it->second(*this, c);
  KILN_ASSERT(results.size() == n.outputs().size(), "exporter of ", def.name(), " gave ", results.size(),
              " results for ", n.outputs().size(), " outputs");

  // Bind each result to the kiln value's name: rename the node output that made it when this node's
  // emission made it, else route it through a Cast or Identity.
  for (size_t k = 0; k < results.size(); ++k) {
    const ir::Value* v = n.outputs()[k];
    const std::string& want_name = v->name();
    used_.insert(want_name);
    Result r = results[k];
    if (r.dtype != v->type().dtype) {
      std::string out = op("Cast", {r.name});
      attr(last(), "to", static_cast<int64_t>(to_onnx_dtype(v->type().dtype)));
      r = {out, v->type().dtype};
    }
    bool renamed = false;
    for (int ni = graph_->node_size() - 1; ni >= start && !renamed; --ni) {
      NodeProto* p = graph_->mutable_node(ni);
      for (int o = 0; o < p->output_size(); ++o)
        if (p->output(o) == r.name) {
          p->set_output(o, want_name);
          renamed = true;
        }
    }
    if (renamed) {
      for (int ni = start; ni < graph_->node_size(); ++ni) {
        NodeProto* p = graph_->mutable_node(ni);
        for (int i = 0; i < p->input_size(); ++i)
          if (p->input(i) == r.name) p->set_input(i, want_name);
      }
    } else {
      add_node("Identity", {r.name}, {want_name});
    }
    names_[v] = want_name;
  }
  cur_ = nullptr;
}

::onnx::ModelProto Exporter::run() {
  KILN_CHECK(opt_.opset == kOpset, "onnx export: opset ", opt_.opset, " is not supported; kiln writes opset ",
             kOpset);
  ::onnx::ModelProto model;
  model.set_ir_version(kIrVersion);
  model.set_producer_name(opt_.producer_name);
  model.set_producer_version(kVersion);
  auto* opset = model.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOpset);
  graph_ = model.mutable_graph();
  graph_->set_name(opt_.graph_name.empty() ? g_.name : opt_.graph_name);

  // Every kiln name is taken before any fresh name is made.
  for (const ir::Value* v : g_.inputs()) used_.insert(v->name());
  for (const ir::Value* v : g_.constants()) used_.insert(v->name());
  for (const ir::Node* n : g_.nodes())
    for (const ir::Value* v : n->outputs()) used_.insert(v->name());

  for (const ir::Value* v : g_.inputs()) {
    value_info(graph_->add_input(), v->name(), v->type());
    names_[v] = v->name();
  }
  for (const ir::Value* v : g_.constants()) {
    auto* p = graph_->add_initializer();
    tensor_to_proto(v->constant(), p);
    p->set_name(v->name());
    names_[v] = v->name();
  }
  std::set<const ir::Value*> outputs(g_.outputs().begin(), g_.outputs().end());
  for (const ir::Node* n : g_.nodes()) {
    export_node(*n);
    for (const ir::Value* v : n->outputs())
      if (!outputs.count(v)) value_info(graph_->add_value_info(), v->name(), v->type());
    ++node_index_;
  }
  // A graph output must be a node output with a name of its own: inputs, constants and repeated
  // outputs go through an Identity.
  std::set<std::string> output_names;
  for (const ir::Value* v : g_.outputs()) {
    std::string name = names_.at(v);
    if (v->kind() != ir::Value::Kind::node_output || output_names.count(name)) {
      std::string out = fresh(v->name() + "_out");
      add_node("Identity", {name}, {out});
      name = out;
    }
    output_names.insert(name);
    value_info(graph_->add_output(), name, v->type());
  }

  KILN_CHECK(model.ByteSizeLong() <= static_cast<size_t>(INT_MAX), "onnx export: the model is ",
             model.ByteSizeLong(), " bytes; a single ONNX file holds at most 2 GiB (external data is not written yet)");
  try {
    ::onnx::checker::check_model(model);
  } catch (const std::exception& ex) {
    KILN_ASSERT(false, "onnx export wrote a model ONNX's checker rejects: ", ex.what());
  }
  return model;
}

}  // namespace

std::string export_bytes(const ir::Graph& g, const ExportOptions& options) {
  ::onnx::ModelProto model = Exporter(g, options).run();
  std::string bytes;
  KILN_CHECK(model.SerializeToString(&bytes), "onnx export: serializing the model failed");
  return bytes;
}

void save(const ir::Graph& g, const std::string& path, const ExportOptions& options) {
  std::string bytes = export_bytes(g, options);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  KILN_CHECK(out.good(), "onnx::save: cannot write '", path, "'");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  KILN_CHECK(out.good(), "onnx::save: writing '", path, "' failed");
}

}  // namespace kiln::onnx
