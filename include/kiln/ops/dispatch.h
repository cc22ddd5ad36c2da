// The dispatcher: the single path of every eager op call. It knows nothing of autograd or
// tracing; those layers register Interceptors at start-up (tracing first, then autograd), and the
// kernel runs last. See Note [Dispatch order] in src/ops/dispatch.cc.
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "kiln/ops/op_def.h"

namespace kiln {

struct OpCall {
  const OpDef& op;
  std::vector<Tensor> inputs;  // undefined Tensor = absent optional input
  Attrs attrs;                 // bound: defaults filled, types checked
  SourceLoc loc;               // the user's call site
  // In-place calls: the tensor written (also inputs[0]); its storage version is bumped.
  Tensor inplace_out;
  const char* inplace_name = nullptr;  // "add_", ... for error messages
  bool is_inplace() const { return inplace_out.defined(); }
};

class Interceptor {
 public:
  virtual ~Interceptor() = default;
  virtual const char* name() const = 0;
  // Handles the call or passes it on with next(call).
  virtual std::vector<Tensor> intercept(OpCall& call,
                                        const std::function<std::vector<Tensor>(OpCall&)>& next) = 0;
};

// Interceptors run in ascending `order` (tracing: 100, autograd: 200).
void register_interceptor(int order, Interceptor* interceptor);
void unregister_interceptor(Interceptor* interceptor);

// Runs an op: binds attributes, goes through the interceptors, then run_kernel.
std::vector<Tensor> dispatch(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs = {},
                             SourceLoc loc = KILN_HERE);
Tensor dispatch1(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs = {},
                 SourceLoc loc = KILN_HERE);  // single-output shorthand
// In place: `self` receives the result of op(self, others...) and its version is bumped.
Tensor& dispatch_inplace(const OpDef& op, const char* inplace_name, Tensor& self,
                         std::vector<Tensor> others, const Attrs& attrs = {}, SourceLoc loc = KILN_HERE);

// The bottom of the stack, without interceptors: checks devices, infers output metadata, casts
// inputs per the op's policy, allocates outputs (or uses `outputs` when given, e.g. an arena
// slot), and runs the kernel. Used by interceptors' `next` and by executors.
std::vector<Tensor> run_kernel(const OpCall& call, std::vector<Tensor> outputs = {},
                               const std::string& tactic = "");

// Infers output metadata of a call from its inputs' metadata (no data touched).
std::vector<TensorMeta> infer_call(const OpDef& op, std::span<const Tensor> inputs, const Attrs& bound);

// A call whose inputs keep their devices, dtypes and shapes from run to run (an engine's step at
// one batch) can be resolved once, as run_kernel would check it: devices, output metadata, the
// kernel for the tactic. Running it resolved then skips all three (Note [Resolved calls] in
// src/ops/dispatch.cc). Views, and ops whose input casts would change an input, are not resolved
// (kernel == nullptr): they go through run_kernel.
struct ResolvedCall {
  std::vector<TensorMeta> outputs;
  const KernelEntry* kernel = nullptr;
  std::shared_ptr<const void> prepared;  // the kernel's prepare function's (Note [Prepared kernels])
};
ResolvedCall resolve_call(const OpDef& op, std::span<const Tensor> inputs, const Attrs& bound,
                          const std::string& tactic = "");
// Runs r's kernel on inputs like those it was resolved for, into outputs shaped as r.outputs.
void run_resolved(const ResolvedCall& r, const OpDef& op, std::span<const Tensor> inputs, const Attrs& bound,
                  std::span<Tensor> outputs);

}  // namespace kiln
