// The ONNX importer's converters: one function per ONNX op type that emits kiln ops for a node.
//
// A converter reads the node through ConvertCtx (inputs as kiln IR values, attributes with their
// ONNX defaults, the model's opset) and returns one IR value per ONNX output. It emits kiln ops
// with ctx.emit(...), which folds a node whose inputs are all constants into a new constant
// (Note [Folding at import] in import.cc): shape subgraphs and ConstantOfShape weights become
// constants, so inputs that kiln takes as attributes (Reshape's shape, Slice's starts) are known.
#pragma once

#include <onnx/onnx_pb.h>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "kiln/onnx.h"

namespace kiln::onnx::detail {

class Importer;

// Thrown (internally) when a converter needs the value of a tensor that depends on graph inputs
// the caller may know (ImportOptions::known_inputs); the importer binds them and starts again.
struct NeedsKnownInputs {
  std::vector<std::string> names;
};

class ConvertCtx {
 public:
  ConvertCtx(Importer& imp, const ::onnx::NodeProto& node, int64_t opset, ir::Graph& g)
      : imp_(imp), node_(node), opset_(opset), g_(g) {}

  const ::onnx::NodeProto& node() const { return node_; }
  int64_t opset() const { return opset_; }
  ir::Graph& graph() { return g_; }

  // ---- inputs
  size_t num_inputs() const { return static_cast<size_t>(node_.input_size()); }
  bool has_input(size_t i) const;                 // present and not the empty name
  ir::Value* in(size_t i) const;                  // kiln::Error when absent
  ir::Value* in_or_null(size_t i) const;          // nullptr when absent
  const ir::ValueType& type(size_t i) const { return in(i)->type(); }
  DType dtype(size_t i) const { return in(i)->type().dtype; }
  int64_t rank(size_t i) const { return static_cast<int64_t>(in(i)->type().shape.size()); }
  Shape static_shape(size_t i) const;             // kiln::Error when a dim is symbolic
  // The value of input i, which kiln needs at compile time (it becomes an attribute).
  Tensor const_input(size_t i, const char* what) const;
  std::vector<int64_t> const_ints(size_t i, const char* what) const;  // any integer dtype, flattened
  std::vector<double> const_floats(size_t i, const char* what) const;
  // A shape-valued constant input read as dims, symbolic entries included (Note [Symbolic shape
  // values] in import.cc); and the constant that Shape of a symbolic tensor produces.
  std::vector<ir::Dim> shape_dims(size_t i, const char* what) const;
  ir::Value* symbolic_shape(const std::vector<ir::Dim>& dims);
  // v broadcast to target like ONNX Expand, symbolic dims v lacks included (Note [Symbolic shape
  // arithmetic] in import.cc).
  ir::Value* broadcast_to_dims(ir::Value* v, const std::vector<ir::Dim>& target);
  bool is_symbolic_value(size_t i) const;  // input i is a shape value holding symbolic dims
  std::optional<Tensor> try_const(size_t i) const;  // nullopt when not constant

  // ---- attributes (ONNX names)
  bool has_attr(const std::string& name) const { return find_attr(name) != nullptr; }
  int64_t attr_int(const std::string& name, int64_t dflt) const;
  int64_t attr_int(const std::string& name) const;  // required
  double attr_float(const std::string& name, double dflt) const;
  std::string attr_string(const std::string& name, const std::string& dflt) const;
  std::vector<int64_t> attr_ints(const std::string& name, std::vector<int64_t> dflt = {}) const;
  std::vector<double> attr_floats(const std::string& name, std::vector<double> dflt = {}) const;
  Tensor attr_tensor(const std::string& name) const;
  const ::onnx::AttributeProto* find_attr(const std::string& name) const;

  // ---- emitting kiln ops
  ir::Value* emit(const std::string& op, std::vector<ir::Value*> inputs, const Attrs& attrs = {});
  std::vector<ir::Value*> emit_multi(const std::string& op, std::vector<ir::Value*> inputs,
                                     const Attrs& attrs = {});
  ir::Value* constant(const Tensor& t);
  ir::Value* scalar(double v, DType dt);  // a 0-d constant of dtype dt
  ir::Value* cast(ir::Value* v, DType dt);  // no node when already dt
  // ImportOptions::max_constant_elements: the most a converter may materialize itself.
  int64_t max_constant_elements() const;
  // Normalizes an axis of a rank-r tensor (ONNX allows -r..r-1); kiln::Error otherwise.
  int64_t axis(int64_t a, int64_t r, const char* what = "axis") const;

  [[noreturn]] void fail(const std::string& msg) const;

 private:
  Importer& imp_;
  const ::onnx::NodeProto& node_;
  int64_t opset_;
  ir::Graph& g_;
};

using Converter = std::function<std::vector<ir::Value*>(ConvertCtx&)>;

// All converters by ONNX op type (domain ai.onnx), filled by the convert_*.cc files.
const std::map<std::string, Converter>& converters();
void add_elementwise_converters(std::map<std::string, Converter>& m);
void add_shape_converters(std::map<std::string, Converter>& m);
void add_nn_converters(std::map<std::string, Converter>& m);
void add_reduce_converters(std::map<std::string, Converter>& m);

// ONNX's arithmetic, comparison, Gemm/MatMul and Conv ops take one element type T for all their
// inputs; kiln's ops would promote, so a mixed-type node is refused rather than given a meaning.
// kiln::Error "input #1 is i64 but input #0 is f32 (Add takes one element type)".
void check_same_types(const ConvertCtx& c);

// ONNX's symbolic names may be any string; kiln's value names are identifiers.
std::string sanitize_name(const std::string& onnx_name);

}  // namespace kiln::onnx::detail
