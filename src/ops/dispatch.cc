// Note [Dispatch order]
// dispatch() binds attributes and walks the interceptors in ascending order (tracing 100,
// autograd 200); each either handles the call or passes it on; the last step is run_kernel().
// The dispatcher itself never includes autograd/ or fn/: they register at start-up.
#include "kiln/ops/dispatch.h"

#include <algorithm>
#include <mutex>

namespace kiln {

namespace {

struct Registered {
  int order;
  Interceptor* interceptor;
};

std::vector<Registered>& interceptors() {
  static std::vector<Registered> v;
  return v;
}

std::vector<Tensor> run_from(size_t index, OpCall& call) {
  const auto& list = interceptors();
  if (index >= list.size()) return run_kernel(call);
  return list[index].interceptor->intercept(
      call, [index](OpCall& c) { return run_from(index + 1, c); });
}

std::string describe_input(const OpDef& op, size_t i, const Tensor& t) {
  std::string name = i < op.schema().inputs.size() ? op.schema().inputs[i].name
                                                   : op.schema().inputs.back().name;
  return "'" + name + "' (" + std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + ")";
}

}  // namespace

void register_interceptor(int order, Interceptor* interceptor) {
  auto& v = interceptors();
  v.push_back({order, interceptor});
  std::stable_sort(v.begin(), v.end(), [](const Registered& a, const Registered& b) { return a.order < b.order; });
}

void unregister_interceptor(Interceptor* interceptor) {
  auto& v = interceptors();
  v.erase(std::remove_if(v.begin(), v.end(), [&](const Registered& r) { return r.interceptor == interceptor; }),
          v.end());
}

std::vector<TensorMeta> infer_call(const OpDef& op, std::span<const Tensor> inputs, const Attrs& bound) {
  std::vector<std::optional<TensorMeta>> metas;
  metas.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    if (t.defined()) metas.push_back(TensorMeta{t.dtype(), t.shape()});
    else metas.push_back(std::nullopt);
  }
  return op.infer_meta(metas, bound);
}

std::vector<Tensor> dispatch(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs, SourceLoc loc) {
  OpCall call{op, std::move(inputs), op.bind_attrs(attrs), loc, Tensor(), nullptr};
  return run_from(0, call);
}

Tensor dispatch1(const OpDef& op, std::vector<Tensor> inputs, const Attrs& attrs, SourceLoc loc) {
  auto outs = dispatch(op, std::move(inputs), attrs, loc);
  KILN_ASSERT(outs.size() == 1, op.name(), " returned ", outs.size(), " outputs, expected 1");
  return std::move(outs[0]);
}

Tensor& dispatch_inplace(const OpDef& op, const char* inplace_name, Tensor& self, std::vector<Tensor> others,
                         const Attrs& attrs, SourceLoc loc) {
  std::vector<Tensor> inputs;
  inputs.reserve(others.size() + 1);
  inputs.push_back(self);
  for (auto& o : others) inputs.push_back(std::move(o));
  OpCall call{op, std::move(inputs), op.bind_attrs(attrs), loc, self, inplace_name};
  auto outs = run_from(0, call);
  // An interceptor (autograd) may return a new handle sharing self's storage with new metadata.
  if (!outs.empty() && outs[0].defined() && !outs[0].is_same(self)) self = outs[0];
  return self;
}

namespace {

// The dtype run_kernel casts each input to under the op's InputCast (an input's own dtype where
// nothing applies: before cast_first_input, undefined, or InputCast::none).
std::vector<DType> cast_dtypes(const OpDef& op, std::span<const Tensor> inputs) {
  std::vector<DType> to(inputs.size(), DType::f32);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) to[i] = inputs[i].dtype();
  if (op.input_cast() == InputCast::none) return to;
  const size_t first = static_cast<size_t>(op.cast_first_input());
  if (op.input_cast() == InputCast::common) {
    std::optional<DType> common;
    for (size_t i = first; i < inputs.size(); ++i)
      if (inputs[i].defined()) common = common ? promote_types(*common, inputs[i].dtype()) : inputs[i].dtype();
    for (size_t i = first; i < inputs.size(); ++i)
      if (inputs[i].defined()) to[i] = *common;
  } else {
    for (size_t i = first; i < inputs.size(); ++i)
      if (inputs[i].defined()) to[i] = to_floating(inputs[i].dtype());
  }
  return to;
}

// All defined inputs on one device (the CPU when none is defined).
Device call_device(const OpDef& op, std::span<const Tensor> inputs) {
  Device device = Device::cpu();
  bool have_device = false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    if (!have_device) {
      device = inputs[i].device();
      have_device = true;
    } else if (inputs[i].device() != device) {
      KILN_FAIL(op.name(), ": input ", describe_input(op, i, inputs[i]), " is on ", inputs[i].device().str(),
                " but earlier inputs are on ", device.str(), "; move them to one device first");
    }
  }
  return device;
}

// The kernel for the (cast) inputs kin and the tactic, or a message naming what the op has.
const KernelEntry& call_kernel(const OpDef& op, Device device, std::span<const Tensor> kin,
                               const std::vector<TensorMeta>& metas, const std::string& tactic) {
  int key = op.dtype_key_index();
  DType key_dtype;
  if (key >= 0 && static_cast<size_t>(key) < kin.size() && kin[static_cast<size_t>(key)].defined())
    key_dtype = kin[static_cast<size_t>(key)].dtype();
  else
    key_dtype = metas.empty() ? DType::f32 : metas[0].dtype;
  const KernelEntry* k = op.find_kernel(device.type, key_dtype, tactic);
  if (!k) {
    DTypeSet supported;
    for (const auto& e : op.kernels())
      if (e.device == device.type) supported = supported | e.dtypes;
    KILN_FAIL(op.name(), ": no kernel for dtype ", dtype_name(key_dtype), " on ", device.str(),
              supported.empty() ? std::string(" (the op has no kernels on this device)")
                                : " (supported dtypes: " + supported.to_string() + ")",
              tactic.empty() ? "" : ", tactic '" + tactic + "'");
  }
  return *k;
}

}  // namespace

std::vector<Tensor> run_kernel(const OpCall& call, std::vector<Tensor> outputs, const std::string& tactic) {
  const OpDef& op = call.op;
  const auto& inputs = call.inputs;
  const Device device = call_device(op, inputs);

  if (op.is_view()) {
    KILN_CHECK(!call.is_inplace(), op.name(), " is a view op and has no in-place form");
    infer_call(op, inputs, call.attrs);  // validates and raises the op's own errors
    return op.view_fn()(inputs, call.attrs);
  }

  std::vector<TensorMeta> metas = infer_call(op, inputs, call.attrs);

  // Input casts.
  std::vector<Tensor> cast_inputs;
  std::span<const Tensor> kin(inputs);
  if (op.input_cast() != InputCast::none) {
    cast_inputs = inputs;
    const std::vector<DType> to = cast_dtypes(op, inputs);
    for (size_t i = 0; i < cast_inputs.size(); ++i) {
      Tensor& t = cast_inputs[i];
      if (t.defined() && t.dtype() != to[i]) t = t.to(to[i]);
    }
    kin = cast_inputs;
  }

  // Outputs.
  if (call.is_inplace()) {
    KILN_CHECK(metas.size() == 1, op.name(), " has ", metas.size(), " outputs and no in-place form");
    const Tensor& self = call.inplace_out;
    KILN_CHECK(metas[0].shape == self.shape(), call.inplace_name, ": the result has shape ",
               shape_str(metas[0].shape), " but the tensor written in place has shape ", shape_str(self.shape()),
               "; in-place ops cannot change a tensor's shape (use the out-of-place form)");
    KILN_CHECK(metas[0].dtype == self.dtype() || op.name() == "copy", call.inplace_name, ": the result has dtype ",
               dtype_name(metas[0].dtype), " but the tensor written in place is ", dtype_name(self.dtype()),
               "; in-place ops cannot change a tensor's dtype (use the out-of-place form)");
    for (size_t d = 0; d < self.shape().size(); ++d)
      KILN_CHECK(self.strides()[d] != 0 || self.shape()[d] <= 1, call.inplace_name,
                 ": the tensor written in place is a broadcast (expanded) view of shape ", shape_str(self.shape()),
                 " whose elements share memory; call .contiguous() or .clone() first");
    outputs = {self};
  } else if (outputs.empty()) {
    outputs.reserve(metas.size());
    for (const auto& m : metas) outputs.push_back(empty(m.shape, TensorOptions(m.dtype, device)));
  } else {
    KILN_ASSERT(outputs.size() == metas.size(), op.name(), ": ", outputs.size(), " outputs given, ", metas.size(), " inferred");
  }

  // Kernel.
  const KernelEntry& k = call_kernel(op, device, kin, metas, tactic);
  KernelCall kc{op, kin, call.attrs, outputs};
  k.fn(kc);
  if (call.is_inplace()) {
    Tensor& self = outputs[0];
    if (self.storage()) self.storage()->bump_version(call.inplace_name, call.loc);
  }
  return outputs;
}

namespace {

// Whether run_kernel's input casts leave these inputs as they are, so a resolved call may skip
// them.
bool casts_nothing(const OpDef& op, std::span<const Tensor> inputs) {
  if (op.input_cast() == InputCast::none) return true;
  const std::vector<DType> to = cast_dtypes(op, inputs);
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].dtype() != to[i]) return false;
  return true;
}

}  // namespace

// Note [Resolved calls]
// An engine runs the same calls on every run: at one batch, every step's inputs have the same
// devices, dtypes and shapes each time. run_kernel still checked the devices, inferred the outputs
// (the op's attributes looked up by name) and searched the kernel list for the tactic on every
// call, and the executor inferred once more to size its arena views: with the OpCall's copies of
// the inputs and attributes, about 10% of MobileNetV3-Small's time at batch 1 on one thread went to
// malloc, string compares and shape inference rather than to kernels (perf). resolve_call does
// that work once; run_resolved then only calls the kernel. An op that casts its inputs is resolved
// when the casts would change nothing (the dtypes it sees at resolve time are the ones it sees on
// every run): a convolution and a residual add are, and they went through run_kernel on every run
// before (MobileNetV2 at batch 1: ~60 such steps).
ResolvedCall resolve_call(const OpDef& op, std::span<const Tensor> inputs, const Attrs& bound,
                          const std::string& tactic) {
  const Device device = call_device(op, inputs);
  ResolvedCall r;
  r.outputs = infer_call(op, inputs, bound);
  if (op.is_view() || !casts_nothing(op, inputs)) return r;
  r.kernel = &call_kernel(op, device, inputs, r.outputs, tactic);
  if (r.kernel->prepare) r.prepared = r.kernel->prepare(inputs, bound, r.outputs);
  return r;
}

void run_resolved(const ResolvedCall& r, const OpDef& op, std::span<const Tensor> inputs, const Attrs& bound,
                  std::span<Tensor> outputs) {
  KILN_ASSERT(r.kernel != nullptr && outputs.size() == r.outputs.size(), op.name(),
              ": run_resolved on a call that was not resolved, or with other outputs");
  r.kernel->fn(KernelCall{op, inputs, bound, outputs, r.prepared.get()});
}

}  // namespace kiln
