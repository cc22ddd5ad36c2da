// kiln's graph IR: one SSA graph for traced functions, ONNX models and compiler stages.
//
// A Graph has inputs, constants (initializers holding Tensors), nodes in topological order and
// outputs. A Node points at the registry's OpDef and holds its bound attributes; a Value has a
// dtype and a shape whose dims may be symbolic (Note [Symbolic dims] in src/ir/infer.cc). The
// text form (print / parse) round-trips exactly; the verifier checks every invariant a pass must
// keep; the reference executor runs any graph with the registry's kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/op_def.h"

namespace kiln::ir {

// ---- types ---------------------------------------------------------------------------------------
// A dimension: a static size, or a named symbol ("batch") times a positive static scale, bound
// when the graph runs. Scaled symbols ("4*batch") are what attention's [L, batch * heads, d]
// reshapes produce (Note [Symbolic dims] in src/ir/infer.cc).
struct Dim {
  int64_t size = 0;    // meaningful when symbol is empty
  std::string symbol;  // non-empty: symbolic
  int64_t scale = 1;   // symbolic: the dim is scale * symbol
  Dim() = default;
  Dim(int64_t s) : size(s) {}  // NOLINT: shapes read naturally as {batch, 3}
  static Dim sym(std::string name, int64_t scale = 1) {
    Dim d;
    d.symbol = std::move(name);
    d.scale = scale;
    return d;
  }
  bool is_symbolic() const { return !symbol.empty(); }
  // The size when the symbol is bound to `value`.
  int64_t at(int64_t value) const { return is_symbolic() ? scale * value : size; }
  bool operator==(const Dim&) const = default;
};
using SymShape = std::vector<Dim>;
SymShape static_shape(const Shape& s);
std::string dim_str(const Dim& d);
std::string shape_str(const SymShape& s);  // "[batch, 3]"

struct ValueType {
  DType dtype = DType::f32;
  SymShape shape;
  bool operator==(const ValueType&) const = default;
  bool is_static() const;
};
std::string type_str(const ValueType& t);  // "f32[batch, 3]"

class Node;

// A Value is defined exactly once: as a graph input, a constant, or a node's output.
class Value {
 public:
  enum class Kind : uint8_t { input, constant, node_output };
  const std::string& name() const { return name_; }
  const ValueType& type() const { return type_; }
  Kind kind() const { return kind_; }
  Node* producer() const { return producer_; }      // nullptr unless a node output
  size_t output_index() const { return index_; }
  const Tensor& constant() const { return constant_; }  // defined for constants

  void set_type(ValueType t) { type_ = std::move(t); }

 private:
  friend class Graph;
  std::string name_;
  ValueType type_;
  Kind kind_ = Kind::input;
  Node* producer_ = nullptr;
  size_t index_ = 0;
  Tensor constant_;
};

class Node {
 public:
  const OpDef& op() const { return *op_; }
  const std::vector<Value*>& inputs() const { return inputs_; }  // nullptr: absent optional input
  const std::vector<Value*>& outputs() const { return outputs_; }
  Value* output(size_t i = 0) const { return outputs_.at(i); }
  const Attrs& attrs() const { return attrs_; }
  void set_input(size_t i, Value* v) { inputs_.at(i) = v; }
  void set_attrs(Attrs a) { attrs_ = std::move(a); }
  std::string str() const;  // "%y = add(%a, %b)": how errors name the node

 private:
  friend class Graph;
  const OpDef* op_ = nullptr;
  std::vector<Value*> inputs_;
  std::vector<Value*> outputs_;
  Attrs attrs_;
};

struct Use {
  Node* node;  // nullptr: a graph output
  size_t index;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;
  Graph(Graph&&) = default;
  Graph& operator=(Graph&&) = default;
  Graph clone() const;

  std::string name = "main";

  // Builders. Names must be unique identifiers; an empty name picks a fresh one.
  Value* add_input(const std::string& name, ValueType type);
  Value* add_constant(const std::string& name, const Tensor& value);  // stores a contiguous copy
  // Appends a node. Attributes are bound (defaults filled) and output types inferred from the
  // inputs' types; output_names may be empty (fresh names) or one per output.
  Node* add_node(const OpDef& op, std::vector<Value*> inputs, const Attrs& attrs = {},
                 const std::vector<std::string>& output_names = {});
  // Appends a node with given output types and attributes used as they are (the parser; the
  // verifier then checks them against the op).
  Node* add_node_raw(const OpDef& op, std::vector<Value*> inputs, Attrs attrs,
                     const std::vector<std::pair<std::string, ValueType>>& outputs);
  void add_output(Value* v) { outputs_.push_back(v); }
  void set_outputs(std::vector<Value*> vs) { outputs_ = std::move(vs); }

  const std::vector<Value*>& inputs() const { return inputs_; }
  const std::vector<Value*>& constants() const { return constants_; }
  const std::vector<Value*>& outputs() const { return outputs_; }
  std::vector<Node*> nodes() const;
  size_t num_nodes() const { return nodes_.size(); }
  Value* find(const std::string& name) const;  // nullptr if no such value

  // Editing (passes).
  void replace_all_uses(Value* from, Value* to);  // node inputs and graph outputs
  std::map<const Value*, std::vector<Use>> uses() const;
  void erase_nodes(const std::vector<Node*>& dead);   // their outputs must be unused
  void erase_constants(const std::vector<Value*>& dead);
  int64_t parameter_count() const;  // elements held by constants
  std::string fresh_name(const std::string& stem = "v");
  void rename(Value* v, const std::string& new_name);  // kiln::Error if taken or invalid

 private:
  Value* new_value(const std::string& name);
  std::vector<std::unique_ptr<Value>> values_;
  std::vector<std::unique_ptr<Node>> nodes_;
  std::vector<Value*> inputs_, constants_, outputs_;
  std::map<std::string, Value*> by_name_;
  int64_t next_id_ = 0;
};

// ---- inference with symbolic dims ------------------------------------------------------------------
// Output types of `op` on inputs of these types (nullopt: absent optional input), with bound attrs.
// kiln::Error when the op rejects them or when an output dim depends on a symbol in a way a single
// symbol cannot express (e.g. 2 * batch).
std::vector<ValueType> infer_types(const OpDef& op, const std::vector<std::optional<ValueType>>& inputs,
                                   const Attrs& bound_attrs);

// ---- text form -------------------------------------------------------------------------------------
std::string print(const Graph& g);
// kiln::Error "<source>:line:col: what" on malformed text. The result is not verified; call verify.
Graph parse(const std::string& text, const std::string& source_name = "<text>");
Graph load(const std::string& path);  // reads and parses a .kir file

// ---- verifier --------------------------------------------------------------------------------------
// Every problem found, each naming the node or value ("node #3 '%y = add(%a, %b)': ...").
std::vector<std::string> verify_errors(const Graph& g);
void verify(const Graph& g);  // kiln::Error listing the problems

// ---- pictures --------------------------------------------------------------------------------------
std::string to_dot(const Graph& g);
// Renders with Graphviz's `dot` (format from the extension: .svg, .png, .pdf; .dot writes DOT).
void draw(const Graph& g, const std::string& path);

// ---- reference executor ------------------------------------------------------------------------------
// Runs every node with the registry's kernels in order. Inputs by name; names, dtypes and shapes
// are checked against the graph (a symbol binds to one size across all inputs). Returns the
// outputs in graph order.
std::vector<Tensor> run(const Graph& g, const std::map<std::string, Tensor>& inputs);
std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs);  // in input order

// ---- passes ----------------------------------------------------------------------------------------
struct PassResult {
  bool changed = false;
  std::string report;  // what changed: "removed 2 nodes (%a, %b)"
};
class Pass {
 public:
  virtual ~Pass() = default;
  virtual std::string name() const = 0;
  virtual PassResult run(Graph& g) = 0;
};
std::unique_ptr<Pass> make_pass(const std::string& name);  // kiln::Error listing known passes
// Higher layers (compiler/) add passes by name; make_pass and pass_names then include them.
// kiln::InternalError when the name is taken.
using PassFactory = std::function<std::unique_ptr<Pass>()>;
void register_pass(const std::string& name, PassFactory factory);
std::vector<std::string> pass_names();
// Runs the passes in order; in debug builds (and when verify_each) the verifier runs after each.
std::vector<PassResult> run_passes(Graph& g, const std::vector<std::string>& names, bool verify_each = false);

}  // namespace kiln::ir
