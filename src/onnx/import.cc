// ONNX → kiln IR. Parses the ModelProto with ONNX's generated classes, checks the opset imports,
// turns initializers into constants and graph inputs into IR inputs, then converts node by node
// (convert_*.cc), folding constant subgraphs as it goes.
//
// Note [Folding at import]
// ONNX exporters compute shapes at run time (Shape → Gather → Concat → Reshape) and light test
// models build every weight with ConstantOfShape. kiln's ops take shapes, axes and pads as
// attributes, so the importer evaluates any node whose inputs are all constants right away, with
// the same kernels the executor would run (run_kernel, below every interceptor), and keeps the
// result as a constant. What stays a node is exactly what depends on graph inputs.
//
// Note [Known inputs]
// ONNX's node tests often feed a shape or an axis list as a graph input. When a converter needs
// such a value and it depends only on inputs whose values the caller supplied
// (ImportOptions::known_inputs), the importer binds those inputs as constants and converts the
// model again; otherwise the error names the inputs the value depends on.
//
// Note [Symbolic shape values]
// With a symbolic dim (dim_param "batch"), Shape cannot fold to plain numbers. Its value becomes a
// constant in which each symbolic dim is a marker (kSymbolMarker - k for symbol k); ops that only
// move elements (Gather, Slice, Concat, (Un)Squeeze, Cast to int32 or int64, Identity) fold it as
// usual and the markers travel with the elements. Reshape, Expand and ConstantOfShape read such a shape as
// dims (ConvertCtx::shape_dims); any other use of a marked value is an error naming the symbols,
// never a silently wrong number.
//
// Note [Symbolic shape arithmetic]
// PyTorch's exporters compute attention's reshape targets from the input's shape: [L, N * heads,
// d] with N the symbolic batch (Mul of a gathered dim by a constant), then d = E / heads (Div).
// A marker therefore stands for a term scale * symbol (IR dims carry the same scale, Note
// [Symbolic dims] in src/ir/infer.cc), and Mul, Div, Add and Sub of marked values fold when the
// result is again such a term: term * c, term / c when c divides the scale, term + 0; anything
// else (batch * batch, batch + 1) is refused, naming the symbols. A symbolic target dim that the
// tensor being expanded lacks (ConstantOfShape(Shape(ids)), Expand of a scalar to [batch, s]) is
// broadcast in through a `where(c, v, v)` whose condition carries the dim and comes from a graph
// input that has it (ConvertCtx::broadcast_to_dims); where's result is v whatever c holds.
// Range(0, scale * symbol, delta) is delta times an exclusive cumsum of such a broadcast of ones.
//
// Note [Symbolic shape selection]
// PyTorch exports x.expand(n, -1, -1) with n = input.size(0) (ViT's class token) as
// Where(Equal(shape, -1), ones, shape) on the target [n, -1, -1] before the Expand, and Shape of
// that target (its length, static) to make the ones. Equal of a marked value and a negative
// constant is false (a dim is never negative), of two equal terms true, of static values their
// comparison; anything else is refused. Where with a constant condition picks elements, markers
// and all, so the target stays symbolic.
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>

#include "kiln/ops/dispatch.h"
#include "onnx/convert.h"
#include "onnx/tensor_proto.h"

namespace kiln::onnx {
namespace detail {

std::string sanitize_name(const std::string& onnx_name) {
  std::string s;
  s.reserve(onnx_name.size() + 1);
  for (char c : onnx_name) s += (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.') ? c : '_';
  if (s.empty()) s = "v";
  return s;
}

namespace {
std::string node_label(const ::onnx::NodeProto& n, int index) {
  std::string s = "node #" + std::to_string(index);
  if (!n.name().empty()) s += " '" + n.name() + "'";
  return s + " (" + n.op_type() + ")";
}

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

// Model-local functions are inlined; a function calling itself would never end.
constexpr int kMaxFunctionDepth = 32;
// Inlining multiplies nodes (a function calling another twice, 40 levels deep, is 2^40 nodes from a
// few hundred bytes): the total a model may expand to.
constexpr int64_t kMaxInlinedNodes = int64_t{1} << 20;

// numel of a shape, saturating at INT64_MAX instead of overflowing (hostile declared dims).
int64_t saturating_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) {
    if (d == 0) return 0;
    n = d > 0 && n > std::numeric_limits<int64_t>::max() / d ? std::numeric_limits<int64_t>::max() : n * d;
  }
  return n;
}
constexpr int64_t kMaxOpset = 27;
}  // namespace

class Importer {
 public:
  Importer(const ImportOptions& opts, std::string base_dir, std::set<std::string> bound)
      : opts_(opts), base_dir_(std::move(base_dir)), bound_(std::move(bound)) {}

  Model run(const ::onnx::ModelProto& m);

  ir::Value* emit(const OpDef& op, std::vector<ir::Value*> inputs, const Attrs& attrs, size_t n_outputs);
  ir::Value* constant(const Tensor& t, const std::string& onnx_name = "");
  [[noreturn]] void needs_value(ir::Value* v, const std::string& what);
  const ImportOptions& options() const { return opts_; }
  ir::Value* value_of(const std::string& onnx_name) const { return values_.at(onnx_name); }
  const std::string& base_dir() const { return base_dir_; }
  std::vector<ir::Value*> last_outputs;  // all outputs of the last emit (emit_multi)

  // Note [Symbolic shape values]
  ir::Value* symbolic_shape(const std::vector<ir::Dim>& dims);
  bool is_symbolic_shape(const ir::Value* v) const { return symbolic_.count(v) != 0; }
  std::vector<ir::Dim> decode_dims(const Tensor& t) const;
  std::string symbols_in(const ir::Value* v) const;
  // Where the graph's inputs carry several symbols (batch, height, width): which to bind, and how.
  std::string unbound_symbols_hint() const;
  // Note [Symbolic shape arithmetic]
  ir::Value* symbolic_arith(const std::string& op_type, ir::Value* a, ir::Value* b);
  // Note [Symbolic shape selection]
  ir::Value* symbolic_select(const std::string& op_type, const std::vector<ir::Value*>& ins);
  // The result of op_type on shape values: int64 entries v (markers where `symbolic`) as a constant
  // of dtype dt, 0-d when `scalar`; registered as symbolic when it holds a marker.
  ir::Value* shape_value(const std::string& op_type, const std::vector<int64_t>& v, bool symbolic, DType dt,
                         bool scalar);
  ir::Value* broadcast_to_dims(ir::Value* v, const std::vector<ir::Dim>& target);

 private:
  void import_graph(const ::onnx::GraphProto& g);
  void convert_node(const ::onnx::NodeProto& n, int index, int depth, const std::string& scope);
  void inline_function(const ::onnx::FunctionProto& f, const ::onnx::NodeProto& call, int index, int depth);
  int64_t inlined_size(const ::onnx::FunctionProto& f, std::set<const ::onnx::FunctionProto*>& active,
                       const ::onnx::NodeProto& call, int index);
  ir::ValueType input_type(const ::onnx::ValueInfoProto& vi, size_t index);
  std::string batch_symbol_;  // Note [One batch symbol]
  ir::Value* lookup(const std::string& scoped_name, const ::onnx::NodeProto& n, int index) const;
  void define(const std::string& onnx_name, ir::Value* v);

  const ImportOptions& opts_;
  std::string base_dir_;
  std::set<std::string> bound_;  // graph inputs bound to known values (Note [Known inputs])
  std::map<const ::onnx::FunctionProto*, int64_t> inlined_sizes_;  // memo of inlined_size
  int64_t inlined_nodes_ = 0, inline_calls_ = 0;
  ir::Graph g_;
  std::map<std::string, ir::Value*> values_;  // ONNX (scoped) name -> value
  std::set<const ir::Value*> named_;          // values already carrying an ONNX name
  std::map<const ir::Value*, std::string> input_of_;  // IR input -> ONNX input name
  std::map<std::string, int64_t> opsets_;
  std::map<std::pair<std::string, std::string>, const ::onnx::FunctionProto*> functions_;
  int64_t opset_ = 0;
  int unknown_dims_ = 0;
  std::set<const ir::Value*> symbolic_;  // constants holding symbol markers
  std::vector<ir::Dim> terms_;           // marker index -> scale * symbol
  std::map<std::string, ir::Value*> carriers_;  // symbol -> bool [symbol] (broadcast_to_dims)
  int64_t marker_of(const ir::Dim& d);
  ir::Value* carrier(const ir::Dim& d);
};

namespace {
// Within int32, so that a Cast of a shape to int32 (TensorFlow computes shapes in int32: tf2onnx
// writes Shape -> Cast(int32) -> Slice -> Concat -> Cast(int64) -> Expand) keeps its markers; no
// real shape value or Slice bound lies in [kSymbolMarker - 2^20, kSymbolMarker].
constexpr int64_t kSymbolMarker = -(int64_t{1} << 30);
bool is_marker(int64_t v) { return v <= kSymbolMarker && v > kSymbolMarker - (int64_t{1} << 20); }

// Ops that take symbolic shape values: element movers fold them (markers travel), the rest read them as dims.
bool accepts_symbolic_shape(const std::string& op_type) {
  static const std::set<std::string> ops{"Gather", "Slice", "Concat", "Unsqueeze", "Squeeze", "Cast", "Identity",
                                         "Reshape", "Expand", "Flatten", "ConstantOfShape", "Range", "Resize",
                                         "Shape", "Size", "Tile"};
  return ops.count(op_type) != 0;
}
bool is_shape_arith(const std::string& op_type) {
  return op_type == "Mul" || op_type == "Div" || op_type == "Add" || op_type == "Sub";
}
// Note [Symbolic shape selection]
bool is_shape_select(const std::string& op_type) { return op_type == "Equal" || op_type == "Where"; }
}  // namespace

int64_t Importer::marker_of(const ir::Dim& d) {
  auto it = std::find(terms_.begin(), terms_.end(), d);
  if (it == terms_.end()) it = terms_.insert(terms_.end(), d);
  return kSymbolMarker - (it - terms_.begin());
}

ir::Value* Importer::symbolic_shape(const std::vector<ir::Dim>& dims) {
  std::vector<int64_t> v;
  for (const auto& d : dims) v.push_back(d.is_symbolic() ? marker_of(d) : d.size);
  ir::Value* c = constant(from_vector(v));
  // (A shape's static part, Shape(x, start, end) of a partly symbolic x, is an ordinary constant:
  // ops that need its value may read it.)
  if (std::any_of(dims.begin(), dims.end(), [](const ir::Dim& d) { return d.is_symbolic(); })) symbolic_.insert(c);
  return c;
}

std::vector<ir::Dim> Importer::decode_dims(const Tensor& t) const {
  Tensor c = t.to(DType::i64).contiguous();
  std::vector<ir::Dim> out;
  for (int64_t i = 0; i < c.numel(); ++i) {
    int64_t v = c.data<int64_t>()[i];
    if (is_marker(v)) out.push_back(terms_.at(static_cast<size_t>(kSymbolMarker - v)));
    else out.push_back(ir::Dim(v));
  }
  return out;
}

// Note [Symbolic shape arithmetic]
ir::Value* Importer::symbolic_arith(const std::string& op_type, ir::Value* a, ir::Value* b) {
  const Tensor& ta = a->constant();
  const Tensor& tb = b->constant();
  KILN_CHECK(is_integral(ta.dtype()) && ta.dtype() == tb.dtype() && ta.dim() <= 1 && tb.dim() <= 1, op_type,
             " of shape values ", meta_str({ta.dtype(), ta.shape()}), " and ", meta_str({tb.dtype(), tb.shape()}),
             ": kiln computes symbolic shape arithmetic on integer scalars and 1-D tensors of one dtype");
  int64_t na = ta.numel(), nb = tb.numel();
  KILN_CHECK(na == nb || na == 1 || nb == 1, op_type, " of shape values with ", na, " and ", nb,
             " elements does not broadcast");
  std::vector<ir::Dim> da = decode_dims(ta), db = decode_dims(tb);
  int64_t n = std::max(na, nb);
  std::vector<ir::Dim> out;
  for (int64_t i = 0; i < n; ++i) {
    const ir::Dim& x = da[static_cast<size_t>(na == 1 ? 0 : i)];
    const ir::Dim& y = db[static_cast<size_t>(nb == 1 ? 0 : i)];
    auto refuse = [&]() {
      KILN_FAIL(op_type, " of shape values ", ir::dim_str(x), " and ", ir::dim_str(y),
                " is not a whole multiple of one symbol (kiln's symbolic dims are scale * symbol); bind the dims "
                "(ImportOptions::dim_values, `kiln run --dim NAME=SIZE`)");
    };
    if (!x.is_symbolic() && !y.is_symbolic()) {
      int64_t p = x.size, q = y.size, r = 0;
      if (op_type == "Mul") r = p * q;
      else if (op_type == "Add") r = p + q;
      else if (op_type == "Sub") r = p - q;
      else if (q == 0) KILN_FAIL("Div of shape values by zero");
      else r = p / q;  // ONNX's integer Div truncates
      out.emplace_back(r);
    } else if (op_type == "Mul" && x.is_symbolic() != y.is_symbolic()) {
      const ir::Dim& s = x.is_symbolic() ? x : y;
      int64_t c = x.is_symbolic() ? y.size : x.size;
      if (c == 0) out.emplace_back(0);
      else if (c > 0 && s.scale <= std::numeric_limits<int64_t>::max() / c) out.push_back(ir::Dim::sym(s.symbol, s.scale * c));
      else refuse();
    } else if (op_type == "Div" && x.is_symbolic() && !y.is_symbolic() && y.size > 0 && x.scale % y.size == 0) {
      out.push_back(ir::Dim::sym(x.symbol, x.scale / y.size));
    } else if (op_type == "Div" && x.is_symbolic() && y.is_symbolic() && x.symbol == y.symbol && y.scale > 0 &&
               x.scale % y.scale == 0) {
      out.emplace_back(x.scale / y.scale);  // GPT-2's dynamo export: mask.numel() // batch, (seq * batch) / batch
    } else if (op_type == "Sub" && x.is_symbolic() && x == y) {
      out.emplace_back(0);
    } else if ((op_type == "Add" || op_type == "Sub") && !y.is_symbolic() && y.size == 0) {
      out.push_back(x);
    } else if (op_type == "Add" && !x.is_symbolic() && x.size == 0) {
      out.push_back(y);
    } else {
      refuse();
    }
  }
  const bool any_symbolic = std::any_of(out.begin(), out.end(), [](const ir::Dim& d) { return d.is_symbolic(); });
  std::vector<int64_t> v;
  for (const auto& d : out) v.push_back(d.is_symbolic() ? marker_of(d) : d.size);
  return shape_value(op_type, v, any_symbolic, ta.dtype(), ta.dim() == 0 && tb.dim() == 0);
}

ir::Value* Importer::shape_value(const std::string& op_type, const std::vector<int64_t>& v, bool symbolic, DType dt,
                                 bool scalar) {
  KILN_CHECK(!symbolic || dt == DType::i64 || dt == DType::i32, op_type, " of ", dtype_name(dt),
             " shape values: symbolic shape values must be int64 or int32");
  Tensor t = from_vector(v);
  if (scalar) t = t.reshape({});
  ir::Value* c = constant(t.to(dt).contiguous());
  if (symbolic) symbolic_.insert(c);
  return c;
}

// Note [Symbolic shape selection]: Equal(a, b) or Where(cond, a, b) of shape values, one of them marked.
ir::Value* Importer::symbolic_select(const std::string& op_type, const std::vector<ir::Value*>& ins) {
  const bool equal = op_type == "Equal";
  const size_t first = equal ? 0 : 1;
  const Tensor& ta = ins[first]->constant();
  const Tensor& tb = ins[first + 1]->constant();
  KILN_CHECK(is_integral(ta.dtype()) && ta.dtype() == tb.dtype() && ta.dim() <= 1 && tb.dim() <= 1, op_type,
             " of shape values ", meta_str({ta.dtype(), ta.shape()}), " and ", meta_str({tb.dtype(), tb.shape()}),
             ": kiln selects among symbolic shape values of integer scalars and 1-D tensors of one dtype");
  Tensor cond;
  if (!equal) {
    cond = ins[0]->constant().to(DType::boolean).contiguous();
    KILN_CHECK(!is_symbolic_shape(ins[0]) && cond.dim() <= 1, "Where on shape values needs a constant condition of at "
               "most one dim, got ", meta_str({ins[0]->constant().dtype(), ins[0]->constant().shape()}));
  }
  std::vector<int64_t> sizes{ta.numel(), tb.numel()};
  if (!equal) sizes.push_back(cond.numel());
  const int64_t n = *std::max_element(sizes.begin(), sizes.end());
  for (int64_t k : sizes)
    KILN_CHECK(k == n || k == 1, op_type, " of shape values with ", ta.numel(), " and ", tb.numel(),
               " elements", equal ? "" : " (condition: " + std::to_string(cond.numel()) + ")", " does not broadcast");
  const std::vector<ir::Dim> da = decode_dims(ta), db = decode_dims(tb);
  const Tensor raw_a = ta.to(DType::i64).contiguous(), raw_b = tb.to(DType::i64).contiguous();
  std::vector<int64_t> v;
  std::vector<uint8_t> eq;
  bool any_symbolic = false;
  for (int64_t i = 0; i < n; ++i) {
    const size_t ia = static_cast<size_t>(ta.numel() == 1 ? 0 : i), ib = static_cast<size_t>(tb.numel() == 1 ? 0 : i);
    const ir::Dim& x = da[ia];
    const ir::Dim& y = db[ib];
    if (equal) {
      if (!x.is_symbolic() && !y.is_symbolic()) eq.push_back(x.size == y.size);
      else if (x.is_symbolic() && y.is_symbolic() && x == y) eq.push_back(1);
      else if ((x.is_symbolic() && !y.is_symbolic() && y.size < 0) || (y.is_symbolic() && !x.is_symbolic() && x.size < 0))
        eq.push_back(0);
      else
        KILN_FAIL("Equal of shape values ", ir::dim_str(x), " and ", ir::dim_str(y),
                  " depends on the symbol's value; bind the dims (ImportOptions::dim_values, `kiln run --dim "
                  "NAME=SIZE`)");
      continue;
    }
    const bool pick_a = cond.data<bool>()[cond.numel() == 1 ? 0 : i];
    v.push_back(pick_a ? raw_a.data<int64_t>()[ia] : raw_b.data<int64_t>()[ib]);
    any_symbolic = any_symbolic || (pick_a ? x : y).is_symbolic();
  }
  const bool scalar = ta.dim() == 0 && tb.dim() == 0 && (equal || cond.dim() == 0);
  if (equal) {
    Tensor t = zeros({n}, TensorOptions(DType::boolean)).contiguous();
    for (int64_t i = 0; i < n; ++i) t.data<bool>()[i] = eq[static_cast<size_t>(i)] != 0;
    return constant(scalar ? t.reshape({}) : t);
  }
  return shape_value(op_type, v, any_symbolic, ta.dtype(), scalar);
}

// A bool [scale * symbol] value cut from a graph input that has the symbol (its values do not matter).
ir::Value* Importer::carrier(const ir::Dim& d) {
  auto it = carriers_.find(d.symbol);
  ir::Value* base = it == carriers_.end() ? nullptr : it->second;
  if (!base) {
    for (ir::Value* in : g_.inputs()) {
      const auto& s = in->type().shape;
      auto at = std::find(s.begin(), s.end(), ir::Dim::sym(d.symbol));
      if (at == s.end()) continue;
      size_t k = static_cast<size_t>(at - s.begin());
      std::vector<int64_t> starts, ends, axes;
      for (size_t j = 0; j < s.size(); ++j) {
        if (j == k) continue;
        starts.push_back(0);
        ends.push_back(1);
        axes.push_back(static_cast<int64_t>(j));
      }
      ir::Value* x = in;
      if (!axes.empty())
        x = emit(kiln::op("slice"), {x},
                 {{"starts", starts}, {"ends", ends}, {"axes", axes}, {"steps", std::vector<int64_t>{}}}, 1);
      x = emit(kiln::op("reshape"), {x}, {{"shape", std::vector<int64_t>{-1}}}, 1);
      base = emit(kiln::op("eq"), {x, x}, {}, 1);
      carriers_[d.symbol] = base;
      break;
    }
    KILN_CHECK(base, "no graph input has the symbolic dim ", d.symbol, " to broadcast to");
  }
  if (d.scale == 1) return base;
  ir::Value* x = emit(kiln::op("unsqueeze"), {base}, {{"dims", std::vector<int64_t>{1}}}, 1);
  x = emit(kiln::op("expand"), {x}, {{"shape", std::vector<int64_t>{-1, d.scale}}}, 1);
  return emit(kiln::op("reshape"), {x}, {{"shape", std::vector<int64_t>{-1}}}, 1);
}

// v broadcast to target (ONNX Expand semantics), symbolic target dims included.
ir::Value* Importer::broadcast_to_dims(ir::Value* v, const std::vector<ir::Dim>& target) {
  const auto& in = v->type().shape;
  size_t r = std::max(in.size(), target.size());
  std::vector<int64_t> shape;
  std::vector<size_t> missing;  // output positions whose symbolic dim v lacks
  for (size_t i = 0; i < r; ++i) {
    const ir::Dim* t = i + target.size() >= r ? &target[i + target.size() - r] : nullptr;
    const ir::Dim* x = i + in.size() >= r ? &in[i + in.size() - r] : nullptr;
    if (!t || (!t->is_symbolic() && t->size == 1)) {  // v's dim (or 1) stays
      shape.push_back(!x ? 1 : x->is_symbolic() ? -1 : x->size);
      continue;
    }
    if (!t->is_symbolic()) {
      KILN_CHECK(t->size >= 0, "shape entry ", t->size, " is negative");
      KILN_CHECK(!x || (!x->is_symbolic() && (x->size == 1 || x->size == t->size)), "cannot broadcast ",
                 ir::shape_str(in), " to ", ir::shape_str(target));
      shape.push_back(t->size);
      continue;
    }
    if (x && *x == *t) {
      shape.push_back(-1);
      continue;
    }
    KILN_CHECK(!x || (!x->is_symbolic() && x->size == 1), "cannot broadcast ", ir::shape_str(in), " to ",
               ir::shape_str(target), " (dim ", i, ")");
    shape.push_back(1);
    missing.push_back(i);
  }
  ir::Value* out = emit(kiln::op("expand"), {v}, {{"shape", shape}}, 1);
  for (size_t i : missing) {
    std::vector<int64_t> at(r, 1);
    at[i] = -1;
    ir::Value* c = emit(kiln::op("reshape"), {carrier(target[i + target.size() - r])}, {{"shape", at}}, 1);
    out = emit(kiln::op("where"), {c, out, out}, {}, 1);
  }
  return out;
}

std::string Importer::symbols_in(const ir::Value* v) const {
  std::set<std::string> names;
  for (const auto& d : decode_dims(v->constant()))
    if (d.is_symbolic()) names.insert(ir::dim_str(d));
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

std::string Importer::unbound_symbols_hint() const {
  std::vector<std::string> names;
  for (const ir::Value* v : g_.inputs())
    for (const ir::Dim& d : v->type().shape)
      if (d.is_symbolic() && std::find(names.begin(), names.end(), d.symbol) == names.end()) names.push_back(d.symbol);
  if (names.size() < 2) return "";
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  return " (the graph's inputs have symbolic dims " + list + "; kiln keeps one symbol, the batch, free: give the "
         "others sizes, e.g. `kiln compile --dim " + names[1] + "=SIZE`, ImportOptions::dim_values)";
}

// ---- values -------------------------------------------------------------------------------------

ir::Value* Importer::constant(const Tensor& t, const std::string& onnx_name) {
  std::string name = onnx_name.empty() ? g_.fresh_name("c") : sanitize_name(onnx_name);
  if (g_.find(name)) name = g_.fresh_name(name + "_");
  return g_.add_constant(name, t);
}

void Importer::define(const std::string& onnx_name, ir::Value* v) {
  if (onnx_name.empty()) return;
  values_[onnx_name] = v;
  // Give the value ONNX's name when it has none yet (readable IR, error messages that match).
  if (!named_.count(v) && v->kind() == ir::Value::Kind::node_output) {
    std::string want = sanitize_name(onnx_name);
    if (!g_.find(want)) g_.rename(v, want);
    named_.insert(v);
  }
}

ir::Value* Importer::lookup(const std::string& name, const ::onnx::NodeProto& n, int index) const {
  auto it = values_.find(name);
  KILN_CHECK(it != values_.end(), node_label(n, index), ": input '", name,
             "' is not defined by any earlier node, initializer or graph input (is the graph out of "
             "topological order, cyclic, or missing an initializer?)");
  return it->second;
}

void Importer::needs_value(ir::Value* v, const std::string& what) {
  // Which graph inputs does v depend on?
  std::set<const ir::Value*> seen;
  std::vector<const ir::Value*> stack{v};
  std::vector<std::string> inputs;
  while (!stack.empty()) {
    const ir::Value* x = stack.back();
    stack.pop_back();
    if (!seen.insert(x).second) continue;
    if (x->kind() == ir::Value::Kind::input) {
      inputs.push_back(input_of_.count(x) ? input_of_.at(x) : x->name());
    } else if (x->kind() == ir::Value::Kind::node_output) {
      for (const ir::Value* i : x->producer()->inputs())
        if (i) stack.push_back(i);
    }
  }
  std::sort(inputs.begin(), inputs.end());
  bool all_known = !inputs.empty() && std::all_of(inputs.begin(), inputs.end(), [&](const std::string& n) {
    return opts_.known_inputs.count(n) && !bound_.count(n);
  });
  if (all_known) throw NeedsKnownInputs{inputs};
  std::string list;
  for (const auto& n : inputs) list += (list.empty() ? "'" : ", '") + n + "'";
  KILN_FAIL(what, " must be known when the model is compiled, but it is computed from graph input(s) ", list,
            "; pass their values as known inputs (ImportOptions::known_inputs, `kiln run --known NAME=FILE`)");
}

ir::Value* Importer::emit(const OpDef& op, std::vector<ir::Value*> inputs, const Attrs& attrs, size_t n_outputs) {
  bool all_const = std::all_of(inputs.begin(), inputs.end(),
                               [](const ir::Value* v) { return !v || v->kind() == ir::Value::Kind::constant; });
  if (all_const) {
    std::vector<Tensor> ts;
    for (ir::Value* v : inputs) ts.push_back(v ? v->constant() : Tensor());
    Attrs bound = op.bind_attrs(attrs);
    // Guard folding against hostile declared sizes before anything is allocated.
    auto metas = infer_call(op, ts, bound);
    for (const auto& m : metas)
      KILN_CHECK(saturating_numel(m.shape) <= opts_.max_constant_elements, op.name(), ": folding would materialize ",
                 saturating_numel(m.shape), " elements (", meta_str(m), "), over the importer's limit of ",
                 opts_.max_constant_elements);
    OpCall call{op, std::move(ts), bound, KILN_HERE, Tensor(), nullptr};
    auto outs = run_kernel(call);
    last_outputs.clear();
    for (auto& t : outs) last_outputs.push_back(constant(t.contiguous()));
    KILN_ASSERT(last_outputs.size() >= n_outputs || op.schema().variadic_outputs, "fold produced too few outputs");
    return last_outputs.empty() ? nullptr : last_outputs[0];
  }
  ir::Node* node = g_.add_node(op, std::move(inputs), attrs);
  last_outputs = node->outputs();
  return last_outputs.empty() ? nullptr : last_outputs[0];
}

// ---- the model ---------------------------------------------------------------------------------------

ir::ValueType Importer::input_type(const ::onnx::ValueInfoProto& vi, size_t index) {
  std::string where = "graph input #" + std::to_string(index) + " '" + vi.name() + "'";
  KILN_CHECK(vi.has_type() && vi.type().has_tensor_type(), where,
             ": only tensor inputs are supported (sequence, map and optional types are not)");
  const auto& tt = vi.type().tensor_type();
  ir::ValueType t;
  t.dtype = from_onnx_dtype(tt.elem_type(), where);
  KILN_CHECK(tt.has_shape(), where, ": the input has no shape (kiln needs its rank)");
  int64_t static_elements = 1;
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      KILN_CHECK(d.dim_value() >= 0, where, ": negative dimension ", d.dim_value());
      static_elements = d.dim_value() == 0 ? 0 : static_elements;
      KILN_CHECK(d.dim_value() == 0 || static_elements <= std::numeric_limits<int64_t>::max() / d.dim_value(), where,
                 ": declared dims overflow int64 element counts (dim ", t.shape.size(), " = ", d.dim_value(), ")");
      static_elements *= d.dim_value() == 0 ? 1 : d.dim_value();
      t.shape.push_back(ir::Dim(d.dim_value()));
    } else {
      std::string sym = d.has_dim_param() && !d.dim_param().empty() ? sanitize_name(d.dim_param())
                                                                      : "unk" + std::to_string(unknown_dims_++);
      if (std::isdigit(static_cast<unsigned char>(sym[0]))) sym = "d" + sym;
      auto bound = opts_.dim_values.find(d.dim_param());
      if (bound != opts_.dim_values.end()) {
        t.shape.push_back(ir::Dim(bound->second));
        continue;
      }
      // Note [One batch symbol]
      // An engine has one free dim, the batch, and it leads every input. tf2onnx names each
      // input's dims on their own (input_ids [unk__1578, unk__1579], attention_mask [unk__1580,
      // unk__1581]), so the ids' and the mask's batches were two symbols and their first meeting
      // (the mask's broadcast over the attention scores) failed to infer. An unbound symbolic
      // leading dim of any input is the batch symbol of the first such input.
      if (t.shape.empty()) {
        if (batch_symbol_.empty()) batch_symbol_ = sym;
        sym = batch_symbol_;
      }
      t.shape.push_back(ir::Dim::sym(sym));
    }
  }
  return t;
}

void Importer::import_graph(const ::onnx::GraphProto& gp) {
  g_.name = gp.name().empty() ? "main" : sanitize_name(gp.name());
  KILN_CHECK(gp.sparse_initializer_size() == 0, "graph '", gp.name(), "': sparse initializers are not supported");
  std::set<std::string> inits;
  for (int i = 0; i < gp.initializer_size(); ++i) {
    const auto& tp = gp.initializer(i);
    KILN_CHECK(!tp.name().empty(), "initializer #", i, " has no name");
    KILN_CHECK(!values_.count(tp.name()), "initializer '", tp.name(), "' is defined twice");
    Tensor t = tensor_from_proto(tp, base_dir_, opts_.max_constant_elements);
    ir::Value* c = constant(t, tp.name());
    values_[tp.name()] = c;
    inits.insert(tp.name());
  }
  std::set<std::string> seen_inputs;
  for (int i = 0; i < gp.input_size(); ++i) {
    const auto& vi = gp.input(i);
    KILN_CHECK(!vi.name().empty(), "graph input #", i, " has no name");
    KILN_CHECK(seen_inputs.insert(vi.name()).second, "graph input '", vi.name(), "' is declared twice");
    if (inits.count(vi.name())) continue;  // IR < 4: initializers are listed as inputs too
    ir::ValueType t = input_type(vi, static_cast<size_t>(i));
    if (bound_.count(vi.name())) {
      const Tensor& known = opts_.known_inputs.at(vi.name());
      KILN_CHECK(known.dtype() == t.dtype && known.dim() == static_cast<int64_t>(t.shape.size()),
                 "known input '", vi.name(), "' is ", meta_str({known.dtype(), known.shape()}),
                 ", the model declares ", ir::type_str(t));
      values_[vi.name()] = constant(known.contiguous(), vi.name());
      continue;
    }
    std::string name = sanitize_name(vi.name());
    if (g_.find(name) || std::isdigit(static_cast<unsigned char>(name[0]))) name = g_.fresh_name("in_" + name + "_");
    ir::Value* v = g_.add_input(name, t);
    values_[vi.name()] = v;
    input_of_[v] = vi.name();
  }
  for (int i = 0; i < gp.node_size(); ++i) convert_node(gp.node(i), i, 0, "");
  KILN_CHECK(gp.output_size() > 0, "graph '", gp.name(), "' has no outputs");
  for (int i = 0; i < gp.output_size(); ++i) {
    const auto& vo = gp.output(i);
    auto it = values_.find(vo.name());
    KILN_CHECK(it != values_.end(), "graph output '", vo.name(), "' is not computed by any node");
    ir::Value* v = it->second;
    if (vo.has_type() && vo.type().has_tensor_type() && vo.type().tensor_type().elem_type() != 0) {
      DType want = from_onnx_dtype(vo.type().tensor_type().elem_type(), "graph output '" + vo.name() + "'");
      KILN_CHECK(want == v->type().dtype, "graph output '", vo.name(), "' is declared ", dtype_name(want),
                 " but kiln computes ", ir::type_str(v->type()));
    }
    g_.add_output(v);
  }
}

void Importer::inline_function(const ::onnx::FunctionProto& f, const ::onnx::NodeProto& call, int index, int depth) {
  KILN_CHECK(depth < kMaxFunctionDepth, node_label(call, index), ": model-local functions nest deeper than ",
             kMaxFunctionDepth, " (recursive function '", f.name(), "'?)");
  // The body sees the call's inputs under the function's formal names, its attributes as the
  // call gives them (ref_attr_name), and writes the call's outputs.
  if (depth == 0) {  // the whole expansion of a top-level call, checked before any of it is built
    std::set<const ::onnx::FunctionProto*> active;
    inlined_nodes_ += inlined_size(f, active, call, index);
    KILN_CHECK(inlined_nodes_ <= kMaxInlinedNodes, node_label(call, index), ": inlining model-local function '",
               f.name(), "' expands the model past ", kMaxInlinedNodes, " nodes");
  }
  // A fresh scope per call: two calls of one function in the same body must not share names.
  std::string scope = call.name() + "/" + f.name() + "#" + std::to_string(index) + "/" +
                      std::to_string(inline_calls_++) + "/";
  for (int i = 0; i < f.input_size(); ++i) {
    if (i < call.input_size() && !call.input(i).empty()) values_[scope + f.input(i)] = lookup(call.input(i), call, index);
  }
  std::map<std::string, const ::onnx::AttributeProto*> call_attrs;
  for (const auto& a : call.attribute()) call_attrs[a.name()] = &a;
  for (int j = 0; j < f.node_size(); ++j) {
    ::onnx::NodeProto body = f.node(j);
    for (auto& in : *body.mutable_input()) if (!in.empty()) in = scope + in;
    for (auto& out : *body.mutable_output()) if (!out.empty()) out = scope + out;
    google::protobuf::RepeatedPtrField<::onnx::AttributeProto> attrs;
    for (const auto& a : body.attribute()) {
      if (a.ref_attr_name().empty()) {
        *attrs.Add() = a;
        continue;
      }
      auto it = call_attrs.find(a.ref_attr_name());
      if (it != call_attrs.end()) {
        ::onnx::AttributeProto r = *it->second;
        r.set_name(a.name());
        *attrs.Add() = r;
      }
      // Not given by the call: the attribute is left out and the converter's ONNX default applies
      // (Debian's onnx 1.12 schema has no FunctionProto attribute defaults).
    }
    *body.mutable_attribute() = attrs;
    convert_node(body, index, depth + 1, scope);
  }
  for (int i = 0; i < call.output_size() && i < f.output_size(); ++i) {
    if (call.output(i).empty()) continue;
    auto it = values_.find(scope + f.output(i));
    KILN_CHECK(it != values_.end(), node_label(call, index), ": function '", f.name(), "' never computes its output '",
               f.output(i), "'");
    define(call.output(i), it->second);
  }
}

// The number of nodes a call of `f` inlines to (saturating past kMaxInlinedNodes); kiln::Error when
// `f` reaches itself. Memoized, so a function called twice per level costs its levels, not 2^levels.
int64_t Importer::inlined_size(const ::onnx::FunctionProto& f, std::set<const ::onnx::FunctionProto*>& active,
                               const ::onnx::NodeProto& call, int index) {
  auto memo = inlined_sizes_.find(&f);
  if (memo != inlined_sizes_.end()) return memo->second;
  KILN_CHECK(active.insert(&f).second, node_label(call, index), ": model-local function '", f.name(),
             "' calls itself (directly or through other functions); recursive functions cannot be inlined");
  int64_t n = 0;
  for (const auto& body : f.node()) {
    auto callee = functions_.find({body.domain(), body.op_type()});
    n += callee == functions_.end() ? 1 : inlined_size(*callee->second, active, call, index);
    n = std::min(n, kMaxInlinedNodes + 1);
  }
  active.erase(&f);
  inlined_sizes_[&f] = n;
  return n;
}

void Importer::convert_node(const ::onnx::NodeProto& n, int index, int depth, const std::string& /*scope*/) {
  for (int i = 0; i < n.output_size(); ++i)
    KILN_CHECK(n.output(i).empty() || std::find(n.output().begin(), n.output().begin() + i, n.output(i)) ==
                                          n.output().begin() + i,
               node_label(n, index), ": output '", n.output(i), "' is listed twice");
  for (const auto& out : n.output())
    KILN_CHECK(out.empty() || !values_.count(out), node_label(n, index), ": output '", out,
               "' is already defined (ONNX values are assigned once)");
  auto fn = functions_.find({n.domain(), n.op_type()});
  if (fn != functions_.end()) {
    inline_function(*fn->second, n, index, depth);
    return;
  }
  KILN_CHECK(is_default_domain(n.domain()), node_label(n, index), ": operator domain '", n.domain(),
             "' is not supported (kiln imports ai.onnx operators)");
  KILN_CHECK(opset_ > 0, node_label(n, index), ": the model imports no ai.onnx opset");
  const auto& table = converters();
  auto it = table.find(n.op_type());
  KILN_CHECK(it != table.end(), node_label(n, index), ": unsupported operator ", n.op_type(), " (opset ", opset_, ")");
  ConvertCtx ctx(*this, n, opset_, g_);
  std::vector<ir::Value*> outs;
  // Resolve inputs first so a missing one is reported as such, not as a converter error.
  bool symbolic_in = false;
  for (const auto& in : n.input()) {
    if (in.empty()) continue;
    ir::Value* v = lookup(in, n, index);
    if (is_symbolic_shape(v)) {
      symbolic_in = true;
      KILN_CHECK(accepts_symbolic_shape(n.op_type()) || is_shape_arith(n.op_type()) || is_shape_select(n.op_type()),
                 node_label(n, index), ": input '", in, "' is a shape computed from symbolic dim(s) ", symbols_in(v),
                 "; ", n.op_type(),
                 " on it is not supported (kiln follows symbolic shapes through Shape, Gather, Slice, Concat, "
                 "(Un)Squeeze, Cast, Mul, Div, Add, Sub, Equal, Where into Reshape, Expand, ConstantOfShape, Range, "
                 "Resize and Tile). Bind the dims (ImportOptions::dim_values, `kiln run --dim NAME=SIZE`)");
    }
  }
  try {
    if (symbolic_in && is_shape_arith(n.op_type())) {
      KILN_CHECK(n.input_size() == 2, n.op_type(), " takes two inputs");
      ir::Value* a = lookup(n.input(0), n, index);
      ir::Value* b = lookup(n.input(1), n, index);
      KILN_CHECK(a->kind() == ir::Value::Kind::constant && b->kind() == ir::Value::Kind::constant, n.op_type(),
                 " of a symbolic shape value and a tensor computed at run time is not supported");
      outs = {symbolic_arith(n.op_type(), a, b)};
    } else if (symbolic_in && is_shape_select(n.op_type())) {
      std::vector<ir::Value*> ins;
      for (const auto& in : n.input()) {
        ir::Value* v = lookup(in, n, index);
        KILN_CHECK(v->kind() == ir::Value::Kind::constant, n.op_type(),
                   " of a symbolic shape value and a tensor computed at run time is not supported");
        ins.push_back(v);
      }
      KILN_CHECK(ins.size() == (n.op_type() == "Equal" ? 2u : 3u), n.op_type(), " takes ",
                 n.op_type() == "Equal" ? "two" : "three", " inputs");
      outs = {symbolic_select(n.op_type(), ins)};
    } else {
      outs = it->second(ctx);
    }
  } catch (const NeedsKnownInputs&) {
    throw;
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    std::string msg = e.what();
    if (msg.rfind("node #", 0) == 0) throw;
    KILN_FAIL(node_label(n, index), ": ", msg, msg.find("symbolic") != std::string::npos ? unbound_symbols_hint() : "");
  } catch (const std::out_of_range&) {
    // A converter read element k of a constant (a scalar k, ratio, depth, ...) that has fewer.
    KILN_FAIL(node_label(n, index), ": a constant input or attribute holds fewer values than the operator reads");
  }
  KILN_CHECK(outs.size() >= static_cast<size_t>(n.output_size()) ||
                 std::all_of(n.output().begin() + static_cast<long>(outs.size()), n.output().end(),
                             [](const std::string& s) { return s.empty(); }),
             node_label(n, index), ": kiln computes ", outs.size(), " output(s), the node asks for ", n.output_size(),
             " (optional outputs beyond these are not supported)");
  if (symbolic_in) {
    // Markers travel through element-moving ops (Note [Symbolic shape values]).
    for (ir::Value* v : outs) {
      if (!v || v->kind() != ir::Value::Kind::constant || !is_integral(v->type().dtype)) continue;
      auto dims = decode_dims(v->constant());
      if (std::any_of(dims.begin(), dims.end(), [](const ir::Dim& d) { return d.is_symbolic(); })) symbolic_.insert(v);
    }
  }
  for (int i = 0; i < n.output_size(); ++i) {
    if (n.output(i).empty()) continue;
    KILN_CHECK(outs[static_cast<size_t>(i)] != nullptr, node_label(n, index), ": output #", i, " '", n.output(i),
               "' is not supported by kiln's conversion");
    define(n.output(i), outs[static_cast<size_t>(i)]);
  }
}

Model Importer::run(const ::onnx::ModelProto& m) {
  KILN_CHECK(m.has_graph(), "the model has no graph");
  KILN_CHECK(m.ir_version() >= 3, "unsupported ONNX IR version ", m.ir_version(), " (kiln reads 3 and newer)");
  for (const auto& os : m.opset_import()) opsets_[os.domain()] = os.version();
  if (opsets_.count("ai.onnx")) opsets_[""] = opsets_["ai.onnx"];
  // A model may import only other domains (ai.onnx.ml, training); its nodes then fail by domain.
  opset_ = opsets_.count("") ? opsets_[""] : 0;
  KILN_CHECK(!opsets_.count("") || opset_ >= 1, "invalid ai.onnx opset version ", opset_);
  KILN_CHECK(opset_ <= kMaxOpset, "unsupported opset ", opset_, ": kiln imports ai.onnx opsets up to ", kMaxOpset,
             " (the newest ONNX 1.22 defines)");
  for (const auto& f : m.functions()) functions_[{f.domain(), f.name()}] = &f;
  import_graph(m.graph());
  ir::run_passes(g_, {"dce"});
  Model out;
  out.ir_version = m.ir_version();
  out.opset = opset_;
  out.producer = m.producer_name();
  for (const ir::Value* v : g_.inputs()) out.input_names.push_back(input_of_.at(v));
  for (const auto& o : m.graph().output()) out.output_names.push_back(o.name());
  out.graph = std::move(g_);
  ir::verify(out.graph);
  return out;
}

// ---- ConvertCtx --------------------------------------------------------------------------------------------

bool ConvertCtx::has_input(size_t i) const { return i < num_inputs() && !node_.input(static_cast<int>(i)).empty(); }

ir::Value* ConvertCtx::in_or_null(size_t i) const {
  if (!has_input(i)) return nullptr;
  return imp_.value_of(node_.input(static_cast<int>(i)));
}

ir::Value* ConvertCtx::in(size_t i) const {
  if (!has_input(i)) fail("input #" + std::to_string(i) + " is required but absent");
  return in_or_null(i);
}

Shape ConvertCtx::static_shape(size_t i) const {
  const ir::ValueType& t = type(i);
  std::vector<int64_t> dims;
  for (const auto& d : t.shape) {
    if (d.is_symbolic())
      fail("input #" + std::to_string(i) + " has symbolic shape " + ir::shape_str(t.shape) +
           "; this conversion needs static dims (bind the symbol with ImportOptions::dim_values)");
    dims.push_back(d.size);
  }
  return Shape(dims);
}

std::optional<Tensor> ConvertCtx::try_const(size_t i) const {
  ir::Value* v = in_or_null(i);
  if (!v || v->kind() != ir::Value::Kind::constant) return std::nullopt;
  return v->constant();
}

Tensor ConvertCtx::const_input(size_t i, const char* what) const {
  ir::Value* v = in(i);
  if (v->kind() != ir::Value::Kind::constant)
    imp_.needs_value(v, std::string("input #") + std::to_string(i) + " (" + what + ")");
  return v->constant();
}

std::vector<int64_t> ConvertCtx::const_ints(size_t i, const char* what) const {
  Tensor t = const_input(i, what);
  if (imp_.is_symbolic_shape(in(i)))
    fail(std::string(what) + " is computed from symbolic dim(s) " + imp_.symbols_in(in(i)) +
         " and kiln needs its value here; bind the dims (ImportOptions::dim_values, `kiln run --dim NAME=SIZE`)");
  if (!is_integral(t.dtype()) && t.dtype() != DType::boolean)
    fail(std::string(what) + " must be an integer tensor, got " + std::string(dtype_name(t.dtype())));
  Tensor c = t.to(DType::i64).contiguous();
  const int64_t* p = c.data<int64_t>();
  return std::vector<int64_t>(p, p + c.numel());
}

std::vector<ir::Dim> ConvertCtx::shape_dims(size_t i, const char* what) const {
  Tensor t = const_input(i, what);
  if (!is_integral(t.dtype())) fail(std::string(what) + " must be an integer tensor");
  return imp_.decode_dims(t);
}

ir::Value* ConvertCtx::symbolic_shape(const std::vector<ir::Dim>& dims) { return imp_.symbolic_shape(dims); }

bool ConvertCtx::is_symbolic_value(size_t i) const { return has_input(i) && imp_.is_symbolic_shape(in(i)); }

ir::Value* ConvertCtx::broadcast_to_dims(ir::Value* v, const std::vector<ir::Dim>& target) {
  return imp_.broadcast_to_dims(v, target);
}

std::vector<double> ConvertCtx::const_floats(size_t i, const char* what) const {
  Tensor c = const_input(i, what).to(DType::f64).contiguous();
  const double* p = c.data<double>();
  return std::vector<double>(p, p + c.numel());
}

const ::onnx::AttributeProto* ConvertCtx::find_attr(const std::string& name) const {
  for (const auto& a : node_.attribute())
    if (a.name() == name) return &a;
  return nullptr;
}

namespace {
const char* attr_kind(::onnx::AttributeProto::AttributeType t) {
  return ::onnx::AttributeProto::AttributeType_Name(t).c_str();
}
}  // namespace

int64_t ConvertCtx::attr_int(const std::string& name, int64_t dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::INT && !(a->type() == 0 && a->has_i()))
    fail("attribute '" + name + "' must be INT, got " + attr_kind(a->type()));
  return a->i();
}

int64_t ConvertCtx::attr_int(const std::string& name) const {
  if (!find_attr(name)) fail("required attribute '" + name + "' is missing");
  return attr_int(name, 0);
}

double ConvertCtx::attr_float(const std::string& name, double dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() == ::onnx::AttributeProto::INT) return static_cast<double>(a->i());
  if (a->type() != ::onnx::AttributeProto::FLOAT && !(a->type() == 0 && a->has_f()))
    fail("attribute '" + name + "' must be FLOAT, got " + attr_kind(a->type()));
  return static_cast<double>(a->f());
}

std::string ConvertCtx::attr_string(const std::string& name, const std::string& dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::STRING && !(a->type() == 0 && a->has_s()))
    fail("attribute '" + name + "' must be STRING, got " + attr_kind(a->type()));
  return a->s();
}

std::vector<int64_t> ConvertCtx::attr_ints(const std::string& name, std::vector<int64_t> dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::INTS && a->type() != 0)
    fail("attribute '" + name + "' must be INTS, got " + attr_kind(a->type()));
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

std::vector<double> ConvertCtx::attr_floats(const std::string& name, std::vector<double> dflt) const {
  const auto* a = find_attr(name);
  if (!a) return dflt;
  if (a->type() != ::onnx::AttributeProto::FLOATS && a->type() != 0)
    fail("attribute '" + name + "' must be FLOATS, got " + attr_kind(a->type()));
  return std::vector<double>(a->floats().begin(), a->floats().end());
}

Tensor ConvertCtx::attr_tensor(const std::string& name) const {
  const auto* a = find_attr(name);
  if (!a) fail("required attribute '" + name + "' is missing");
  if (!a->has_t()) fail("attribute '" + name + "' must be TENSOR, got " + attr_kind(a->type()));
  return tensor_from_proto(a->t(), imp_.base_dir(), imp_.options().max_constant_elements);
}

ir::Value* ConvertCtx::emit(const std::string& op, std::vector<ir::Value*> inputs, const Attrs& attrs) {
  return imp_.emit(kiln::op(op), std::move(inputs), attrs, 1);
}

std::vector<ir::Value*> ConvertCtx::emit_multi(const std::string& op, std::vector<ir::Value*> inputs,
                                               const Attrs& attrs) {
  imp_.emit(kiln::op(op), std::move(inputs), attrs, 0);
  return imp_.last_outputs;
}

ir::Value* ConvertCtx::constant(const Tensor& t) { return imp_.constant(t); }

ir::Value* ConvertCtx::scalar(double v, DType dt) { return imp_.constant(full({}, v, TensorOptions(dt))); }

int64_t ConvertCtx::max_constant_elements() const { return imp_.options().max_constant_elements; }

ir::Value* ConvertCtx::cast(ir::Value* v, DType dt) {
  if (v->type().dtype == dt) return v;
  return emit("cast", {v}, {{"dtype", dt}});
}

int64_t ConvertCtx::axis(int64_t a, int64_t r, const char* what) const {
  // ONNX's range, [-r, r - 1]: a 0-d input has no axis to name (kiln's normalize_axis lets 0 / -1 name
  // a 0-d tensor itself, which converters that index the input's dims must not see).
  if (r == 0) fail(std::string(what) + " " + std::to_string(a) + " given for a 0-d input, which has no axes");
  if (a < -r || a > r - 1)
    fail(std::string(what) + " " + std::to_string(a) + " is out of range for rank " + std::to_string(r));
  return a < 0 ? a + r : a;
}

void ConvertCtx::fail(const std::string& msg) const { KILN_FAIL(msg); }

}  // namespace detail

// ---- public entry points ------------------------------------------------------------------------------------

namespace {
bool is_default_domain_name(const std::string& d) { return d.empty() || d == "ai.onnx"; }

Model import_proto(const ::onnx::ModelProto& m, const std::string& base_dir, const ImportOptions& options) {
  std::set<std::string> bound;
  for (int attempt = 0;; ++attempt) {
    try {
      detail::Importer imp(options, base_dir, bound);
      return imp.run(m);
    } catch (const detail::NeedsKnownInputs& need) {
      size_t before = bound.size();
      bound.insert(need.names.begin(), need.names.end());
      KILN_ASSERT(bound.size() > before, "importer asked twice for the same known inputs");
    }
  }
}
}  // namespace

Model import_bytes(std::string_view bytes, const std::string& base_dir, const ImportOptions& options) {
  ::onnx::ModelProto m;
  KILN_CHECK(bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()),
             "ONNX model is larger than 2 GiB; keep weights in external data");
  KILN_CHECK(m.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())),
             "not a valid ONNX model: the protobuf does not parse (truncated or corrupt file?)");
  return import_proto(m, base_dir, options);
}

Model import_model(const std::string& path, const ImportOptions& options) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open ONNX model '", path, "'");
  std::stringstream ss;
  ss << f.rdbuf();
  std::string bytes = ss.str();
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  try {
    return import_bytes(bytes, dir, options);
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    KILN_FAIL(path, ": ", e.what());
  }
}

ModelInfo read_model_info(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "cannot open ONNX model '", path, "'");
  ::onnx::ModelProto m;
  KILN_CHECK(m.ParseFromIstream(&f), path, ": not a valid ONNX model: the protobuf does not parse");
  ModelInfo info;
  std::set<std::string> inits;
  for (const auto& t : m.graph().initializer()) inits.insert(t.name());
  auto note_type = [&](const ::onnx::ValueInfoProto& v) {
    if (info.non_tensor.empty() && v.has_type() && !v.type().has_tensor_type())
      info.non_tensor = v.name();
    if (info.non_tensor.empty() && v.has_type() && v.type().has_tensor_type() && v.type().tensor_type().elem_type() == 0)
      info.non_tensor = v.name();
  };
  for (const auto& i : m.graph().input())
    if (!inits.count(i.name())) {
      info.inputs.push_back(i.name());
      note_type(i);
    }
  for (const auto& o : m.graph().output()) {
    info.outputs.push_back(o.name());
    note_type(o);
  }
  for (const auto& os : m.opset_import())
    if (is_default_domain_name(os.domain())) info.opset = os.version();
  return info;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (const auto& [name, fn] : detail::converters()) out.push_back(name);
  return out;
}

namespace detail {
const std::map<std::string, Converter>& converters() {
  static const std::map<std::string, Converter> table = [] {
    std::map<std::string, Converter> m;
    add_elementwise_converters(m);
    add_shape_converters(m);
    add_nn_converters(m);
    add_reduce_converters(m);
    return m;
  }();
  return table;
}
}  // namespace detail

}  // namespace kiln::onnx
