// OpDef: the one definition of an operator that every layer of kiln reads (Note [One definition]
// in src/ops/registry.cc). Schema, shape and dtype inference, kernels per device and dtype (with
// room for several tactics), and the slots for derivative, batching and ONNX rules.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"
#include "kiln/ops/attrs.h"

namespace kiln {

class OpDef;

// ---- schema -------------------------------------------------------------------------------------
// Parsed from text such as
//   "conv2d(Tensor x, Tensor w, Tensor? bias, int[] stride=[1,1], int groups=1) -> Tensor"
//   "topk(Tensor x, int k, int axis=-1, bool largest=true) -> (Tensor values, Tensor indices)"
//   "concat(Tensor[] xs, int axis) -> Tensor"      "split(Tensor x, ...) -> Tensor[]"
struct TensorArg {
  std::string name;
  bool optional = false;  // Tensor?   (absent = an undefined Tensor)
  bool variadic = false;  // Tensor[]  (only as the last tensor argument)
};
struct AttrSpec {
  std::string name;
  AttrType type;
  std::optional<AttrValue> default_value;  // nullopt: required
  bool nullable = false;                   // "float? min": may be absent
};
struct Schema {
  std::string name;
  std::vector<TensorArg> inputs;
  std::vector<AttrSpec> attrs;
  std::vector<std::string> outputs;  // names; a single unnamed output is "out"
  bool variadic_outputs = false;     // "-> Tensor[]"
  std::string text;                  // the normalized schema string
  static Schema parse(const std::string& text);  // kiln::InternalError on a malformed schema
  const AttrSpec* find_attr(const std::string& name) const;
};

// ---- shape and dtype inference --------------------------------------------------------------------
struct TensorMeta {
  DType dtype = DType::f32;
  Shape shape;
  bool operator==(const TensorMeta&) const = default;
};
std::string meta_str(const TensorMeta& m);  // "f32[2, 3]"

// What an inference rule sees: input metadata (nullopt for an absent optional input) and the
// attributes with defaults filled in. fail()/check() throw kiln::Error prefixed with the op name.
struct InferCtx {
  const OpDef& op;
  std::vector<std::optional<TensorMeta>> inputs;
  const Attrs& attrs;
  const TensorMeta& in(size_t i) const;  // kiln::Error if absent
  bool has(size_t i) const { return i < inputs.size() && inputs[i].has_value(); }
  size_t num_inputs() const { return inputs.size(); }
  const std::string& arg_name(size_t i) const;
  [[noreturn]] void fail(const std::string& msg) const;
};
using InferFn = std::function<std::vector<TensorMeta>(const InferCtx&)>;

// ---- kernels ----------------------------------------------------------------------------------------
// A kernel writes into outputs the dispatcher allocated from the inferred metadata (or that the
// caller provided: in-place ops, the runtime's arena). Inputs have already been cast as the op's
// input cast policy says.
struct KernelCall {
  const OpDef& op;
  std::span<const Tensor> inputs;
  const Attrs& attrs;
  std::span<Tensor> outputs;
  // What the kernel's prepare function made for this call (Note [Prepared kernels]), or nullptr.
  const void* prepared = nullptr;
  const Tensor& in(size_t i) const { return inputs[i]; }
  Tensor& out(size_t i) const { return outputs[i]; }
};
using KernelFn = std::function<void(const KernelCall&)>;
// Note [Prepared kernels]
// A call the runtime repeats (a resolved engine step: the same shapes, attributes and constant
// inputs on every run, Note [Resolved calls] in src/ops/dispatch.cc) may hand its kernel work done
// once: a kernel entry's prepare function, run by resolve_call with the inputs of that call and
// the outputs' metadata, returns what the kernel would otherwise derive on every run (parameters
// read from the attributes, packed filters, a work plan); run_resolved passes it as
// KernelCall::prepared. The kernel must still run without it (an eager call has none), and must
// not trust it for anything a run can change: tensor data pointers other than constants it checks.
using PrepareFn = std::function<std::shared_ptr<const void>(std::span<const Tensor> inputs, const Attrs& attrs,
                                                            std::span<const TensorMeta> outputs)>;
// A view op computes outputs that alias the input's storage, without a kernel.
using ViewFn = std::function<std::vector<Tensor>(std::span<const Tensor>, const Attrs&)>;

struct KernelEntry {
  DeviceType device;
  DTypeSet dtypes;     // dtypes of the kernel's key input (see OpDef::dtype_key)
  std::string tactic;  // "default", "blocked", "openblas", ...
  KernelFn fn;
  PrepareFn prepare;  // optional (Note [Prepared kernels])
};

// How the dispatcher casts tensor inputs before the kernel runs.
enum class InputCast : uint8_t {
  none,        // kernel takes inputs as they are
  common,      // all tensor inputs to their promoted type (binary math, comparisons, where's a/b)
  to_floating  // each input to to_floating(its dtype) (exp, sqrt, mean, ...)
};

// ---- rule slots filled by later layers ---------------------------------------------------------------
// Each slot holds a rule, or a stated reason why there is none. The registry test fails when a
// slot holds neither.
struct RuleStatus {
  enum class Kind : uint8_t { missing, provided, not_applicable, pending } kind = Kind::missing;
  std::string reason;  // for not_applicable / pending
};

// The derivative rule (vjp) is written with kiln ops on Tensors so it runs eagerly under autograd
// and emits IR under tracing. `saved` says which inputs/outputs the rule reads, so autograd keeps
// (and version-checks) only those.
struct VjpCtx {
  std::span<const Tensor> inputs;   // undefined where the rule did not ask to save the input
  std::span<const Tensor> outputs;  // likewise
  const Attrs& attrs;
  std::vector<bool> needs_input_grad;
  std::span<const TensorMeta> input_metas = {};  // dtype and shape of every input (absent: empty shape)
  bool needs(size_t i) const { return i < needs_input_grad.size() && needs_input_grad[i]; }
  const Shape& in_shape(size_t i) const { return input_metas[i].shape; }
};
using VjpFn = std::function<std::vector<Tensor>(const VjpCtx&, std::span<const Tensor> grad_outputs)>;
struct VjpRule {
  VjpFn fn;
  std::vector<int> save_inputs;   // indices of inputs the rule reads
  std::vector<int> save_outputs;  // indices of outputs the rule reads
};

// Batching rule for vmap: filled by the fn/ layer's issue.
struct BatchRule {
  std::function<std::vector<Tensor>(std::span<const Tensor>, std::span<const int64_t> batch_dims,
                                    const Attrs&, std::vector<int64_t>& out_batch_dims)> fn;
};

// ONNX mapping: the ONNX op type and first opset it follows; the onnx/ layer adds converters.
struct OnnxMapping {
  std::string op_type;
  int since_opset = 0;
  std::string domain;  // "" = ai.onnx
};

// The input a kernel may write its output over, for the memory planner (Note [Memory planning] in
// src/compiler/memory_plan.cc): given the node's attributes and which inputs it has, an input's
// index, or -1 for none.
using WritesOverFn = std::function<int(const Attrs&, const std::vector<bool>& present)>;

// ---- the definition -----------------------------------------------------------------------------------
class OpDef {
 public:
  explicit OpDef(const std::string& schema_text);

  const std::string& name() const { return schema_.name; }
  const Schema& schema() const { return schema_; }

  // Builder (used at registration).
  OpDef& infer(InferFn fn) { infer_ = std::move(fn); return *this; }
  OpDef& kernel(DeviceType d, DTypeSet dtypes, KernelFn fn, std::string tactic = "default", PrepareFn prepare = {});
  OpDef& view(ViewFn fn) { view_ = std::move(fn); return *this; }
  // Casts tensor inputs from index `first_input` on (where() keeps its bool condition).
  OpDef& cast_inputs(InputCast c, int first_input = 0) {
    input_cast_ = c;
    cast_first_ = first_input;
    return *this;
  }
  // Which input's dtype selects the kernel (default 0; -1: the first output's dtype).
  OpDef& dtype_key(int input_index) { dtype_key_ = input_index; return *this; }
  OpDef& vjp(VjpRule rule);
  OpDef& no_vjp(std::string reason);       // e.g. "integer output"
  OpDef& vjp_pending(std::string reason);  // rule lands with a later issue
  OpDef& batch(BatchRule rule);
  OpDef& no_batch(std::string reason);
  OpDef& batch_pending(std::string reason);
  OpDef& onnx(OnnxMapping m);
  OpDef& no_onnx(std::string reason);
  OpDef& onnx_pending(std::string reason);
  OpDef& doc(std::string text) { doc_ = std::move(text); return *this; }
  // The kernel may write its output over input `input` (same dtype and shape, dying at the node).
  OpDef& writes_over(int input);
  OpDef& writes_over(WritesOverFn fn) { writes_over_ = std::move(fn); return *this; }
  // Every output's row i along dim 0 depends only on row i of the inputs whose dim 0 is that same
  // batch dim (and on the whole of any other input, a filter, say), so a step may run image by
  // image (Note [Depth-first groups] in src/runtime/executor.cc). Elementwise ops broadcast: it
  // holds where no input's batch dim lines up with another dim of the output.
  OpDef& per_sample() { per_sample_ = true; return *this; }

  // Readers.
  const InferFn& infer_fn() const { return infer_; }
  const ViewFn& view_fn() const { return view_; }
  bool is_view() const { return static_cast<bool>(view_); }
  bool is_per_sample() const { return per_sample_; }
  InputCast input_cast() const { return input_cast_; }
  int cast_first_input() const { return cast_first_; }
  int dtype_key_index() const { return dtype_key_; }
  const std::vector<KernelEntry>& kernels() const { return kernels_; }
  // The first kernel for (device, dtype) or, when `tactic` is given, that tactic; nullptr if none.
  const KernelEntry* find_kernel(DeviceType d, DType t, const std::string& tactic = "") const;
  const std::optional<VjpRule>& vjp_rule() const { return vjp_; }
  const std::optional<BatchRule>& batch_rule() const { return batch_; }
  const std::optional<OnnxMapping>& onnx_mapping() const { return onnx_; }
  const RuleStatus& vjp_status() const { return vjp_status_; }
  const RuleStatus& batch_status() const { return batch_status_; }
  const RuleStatus& onnx_status() const { return onnx_status_; }
  const std::string& doc_text() const { return doc_; }
  // writes_over's input for a node with these attributes and inputs, or -1.
  int writable_input(const Attrs& attrs, const std::vector<bool>& present) const {
    return writes_over_ ? writes_over_(attrs, present) : -1;
  }

  // Fills attribute defaults, checks names and types (an int is accepted for a float), and
  // returns the complete set; kiln::Error naming the op and the attribute otherwise.
  Attrs bind_attrs(const Attrs& given) const;
  // Runs shape/dtype inference on metadata; kiln::Error naming the op on bad input.
  std::vector<TensorMeta> infer_meta(const std::vector<std::optional<TensorMeta>>& inputs,
                                     const Attrs& bound_attrs) const;

 private:
  Schema schema_;
  InferFn infer_;
  ViewFn view_;
  InputCast input_cast_ = InputCast::none;
  int cast_first_ = 0;
  int dtype_key_ = 0;
  std::vector<KernelEntry> kernels_;
  std::optional<VjpRule> vjp_;
  std::optional<BatchRule> batch_;
  std::optional<OnnxMapping> onnx_;
  RuleStatus vjp_status_, batch_status_, onnx_status_;
  std::string doc_;
  WritesOverFn writes_over_;
  bool per_sample_ = false;
};

// ---- registry --------------------------------------------------------------------------------------------
class OpRegistry {
 public:
  static OpRegistry& instance();  // populated with every built-in op on first use
  OpDef& add(const std::string& schema_text);  // kiln::InternalError on a duplicate name
  const OpDef* find(const std::string& name) const;
  // An op registered earlier, to attach more kernels (tactics) from another file; kiln::InternalError if missing.
  OpDef& extend(const std::string& name);
  const OpDef& get(const std::string& name) const;  // kiln::Error "unknown op" if missing
  std::vector<const OpDef*> all() const;             // sorted by name

 private:
  OpRegistry() = default;
  std::vector<std::unique_ptr<OpDef>> ops_;
};

// Shorthand used by op definitions: the registered op named `name`.
const OpDef& op(const std::string& name);

}  // namespace kiln
