// Eager reverse-mode autograd: the tape (Node, grad_fn), the engine behind Tensor::backward and
// autograd::grad, grad mode (NoGradGuard), anomaly mode, custom Functions, and gradcheck.
// The derivative rules themselves live with each op (OpDef::vjp, src/ops/defs/**); this layer
// records a Node per differentiable call through a dispatcher interceptor (src/autograd/record.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kiln/core/tensor.h"

namespace kiln {

// ---- grad mode (thread-local) ---------------------------------------------------------------------
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// While alive, ops record no history on this thread (parameter updates, evaluation).
class NoGradGuard {
 public:
  NoGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

// The opposite: turns recording on inside a NoGradGuard region.
class EnableGradGuard {
 public:
  EnableGradGuard() : prev_(is_grad_enabled()) { set_grad_enabled(true); }
  ~EnableGradGuard() { set_grad_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

namespace autograd {

class Node;

// An edge of the graph: the gradient of input `input_nr` of `fn` (for a Node, input_nr indexes
// the Node's outputs, i.e. the forward outputs it differentiates).
struct Edge {
  std::shared_ptr<Node> fn;
  uint32_t input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

// Metadata of a forward output: what a missing gradient is filled with.
struct OutputInfo {
  Shape shape;
  DType dtype = DType::f32;
};

// A recorded backward function (grad_fn). Subclasses: OpNode (a dispatcher op with an OpDef vjp
// rule), AccumulateGrad (a leaf), custom Functions.
class Node : public std::enable_shared_from_this<Node> {
 public:
  virtual ~Node();  // tears long graphs down iteratively (no deep recursion)
  // Readable name, e.g. "MulBackward" or "AccumulateGrad".
  virtual std::string name() const = 0;
  // The forward operation this node differentiates, e.g. "mul" (custom Functions: their name).
  virtual std::string forward_name() const { return name(); }
  // grads[i] is the gradient of forward output i (filled with zeros where none flowed); returns
  // one gradient per next edge (undefined = none).
  virtual std::vector<Tensor> apply(std::vector<Tensor> grads) = 0;
  // Drops saved tensors (after a backward without retain_graph).
  virtual void release_saved() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<OutputInfo>& outputs() const { return outputs_; }
  const SourceLoc& forward_site() const { return site_; }
  std::string site_str() const;  // "file:line"
  uint64_t sequence_nr() const { return seq_; }

  // Hooks on the gradient of forward output `output_nr` (tensor hooks of non-leaf tensors).
  using GradHook = std::function<Tensor(const Tensor&)>;
  void add_pre_hook(uint32_t output_nr, GradHook hook) { pre_hooks_.push_back({output_nr, std::move(hook)}); }
  struct PreHook {
    uint32_t output_nr;
    GradHook fn;
  };
  const std::vector<PreHook>& pre_hooks() const { return pre_hooks_; }

  // Used by the recorder.
  void set_next_edges(std::vector<Edge> e) { next_edges_ = std::move(e); }
  void set_outputs(std::vector<OutputInfo> o) { outputs_ = std::move(o); }
  void set_site(SourceLoc s) { site_ = s; }
  Node();

 private:
  std::vector<Edge> next_edges_;
  std::vector<OutputInfo> outputs_;
  std::vector<PreHook> pre_hooks_;
  SourceLoc site_;
  uint64_t seq_;
};

// Gradients of `outputs` with respect to `inputs` (returned, not accumulated into .grad()).
// grad_outputs: one per output (undefined = ones for a one-element output). Inputs that the
// outputs do not depend on: kiln::Error unless allow_unused (then an undefined Tensor).
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {}, bool retain_graph = false,
                         bool create_graph = false, bool allow_unused = false);

// Accumulates d(outputs)/d(leaves) into every leaf's .grad() (Tensor::backward for many roots).
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// ---- anomaly mode ---------------------------------------------------------------------------------
// When on (thread-local), each backward step checks the gradients it produced and raises
// kiln::Error at the first NaN/Inf, naming the op and its forward call site.
bool is_anomaly_enabled();
void set_anomaly_enabled(bool enabled);
class DetectAnomalyGuard {
 public:
  DetectAnomalyGuard() : prev_(is_anomaly_enabled()) { set_anomaly_enabled(true); }
  ~DetectAnomalyGuard() { set_anomaly_enabled(prev_); }
  DetectAnomalyGuard(const DetectAnomalyGuard&) = delete;
  DetectAnomalyGuard& operator=(const DetectAnomalyGuard&) = delete;

 private:
  bool prev_;
};

// ---- gradcheck --------------------------------------------------------------------------------------
struct GradcheckOptions {
  double eps = 1e-6;   // central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};
struct GradcheckResult {
  bool ok = true;
  std::string message;  // the worst element: output, input, index, analytic and numeric values
  operator bool() const { return ok; }  // NOLINT: `bool ok = gradcheck(f, xs);` reads naturally
};
using TensorFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;
using SingleTensorFn = std::function<Tensor(const std::vector<Tensor>&)>;
// Compares the analytic Jacobian (one backward per output element) with central finite
// differences, in float64: `inputs` are converted to f64 and those that are floating get
// requires_grad. Returns the worst element, its index and both values when they differ.
GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});
// gradcheck of the function (inputs, v) -> grad(f(inputs), inputs, v) with create_graph.
GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});
// Single-output forms: f returns one tensor.
GradcheckResult gradcheck(const SingleTensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});
GradcheckResult gradgradcheck(const SingleTensorFn& f, const std::vector<Tensor>& inputs, GradcheckOptions opt = {});

// ---- custom functions ----------------------------------------------------------------------------------
// Context handed to a custom Function's forward and backward.
class FunctionCtx {
 public:
  void save_for_backward(std::vector<Tensor> tensors);
  std::vector<Tensor> saved_tensors() const;  // version-checked; error after release
  // Inputs that forward modified in place (their history is rebased onto this Function).
  void mark_dirty(std::vector<Tensor> tensors) { dirty_ = std::move(tensors); }
  // Outputs that carry no gradient (e.g. indices).
  void mark_non_differentiable(std::vector<Tensor> tensors) { non_diff_ = std::move(tensors); }
  std::vector<bool> needs_input_grad;

 private:
  friend struct FunctionAccess;
  struct Saved {
    Tensor alias;
    uint64_t version;
  };
  std::vector<Saved> saved_;
  bool released_ = false;
  std::string owner_;
  SourceLoc site_;
  std::vector<Tensor> dirty_, non_diff_;
};

// A user-defined differentiable function. Forward runs without recording; backward receives one
// gradient per output and returns one per input (undefined = none).
//   struct Square : Function<Square> {
//     static std::vector<Tensor> forward(FunctionCtx& ctx, const std::vector<Tensor>& in);
//     static std::vector<Tensor> backward(FunctionCtx& ctx, const std::vector<Tensor>& grad_out);
//   };
//   auto y = Square::apply({x});
using ForwardFn = std::function<std::vector<Tensor>(FunctionCtx&, const std::vector<Tensor>&)>;
using BackwardFn = std::function<std::vector<Tensor>(FunctionCtx&, const std::vector<Tensor>&)>;
std::vector<Tensor> apply_function(const std::string& name, const ForwardFn& forward, const BackwardFn& backward,
                                   const std::vector<Tensor>& inputs, SourceLoc loc = KILN_HERE);

template <class Derived>
struct Function {
  static std::vector<Tensor> apply(const std::vector<Tensor>& inputs, SourceLoc loc = KILN_HERE) {
    return apply_function(Derived::name(), &Derived::forward, &Derived::backward, inputs, loc);
  }
};

}  // namespace autograd
}  // namespace kiln
