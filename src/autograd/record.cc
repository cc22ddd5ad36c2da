// The autograd interceptor: records an OpNode for every differentiable call whose inputs require
// grad, saving exactly the tensors the op's vjp rule asks for, with their storage versions; also
// the per-tensor AutogradMeta helpers and the saved-tensor version check.
#include <cctype>

#include "autograd/meta.h"
#include "kiln/ops/dispatch.h"

namespace kiln::autograd {

// ---- meta helpers ---------------------------------------------------------------------------------
AutogradMeta* meta_of(const Tensor& t) {
  if (!t.defined()) return nullptr;
  return static_cast<AutogradMeta*>(t.impl().autograd_meta.get());
}

AutogradMeta& ensure_meta(const Tensor& t) {
  auto& slot = t.impl().autograd_meta;
  if (!slot) slot = std::make_shared<AutogradMeta>();
  return *static_cast<AutogradMeta*>(slot.get());
}

bool requires_grad(const Tensor& t) {
  const AutogradMeta* m = meta_of(t);
  return m && m->requires_grad;
}

bool differentiable_dtype(DType t) { return is_floating(t); }

Tensor alias_of(const Tensor& t, bool keep_meta) {
  auto impl = std::make_shared<TensorImpl>(t.impl());
  if (!keep_meta) impl->autograd_meta.reset();
  return Tensor(std::move(impl));
}

void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr) {
  auto m = std::make_shared<AutogradMeta>();
  if (const AutogradMeta* old = meta_of(t)) {
    m->is_view = old->is_view;
    m->base_requires_grad = old->base_requires_grad;
  }
  m->requires_grad = true;
  m->grad_fn = std::move(fn);
  m->output_nr = output_nr;
  t.impl().autograd_meta = std::move(m);
}

std::string site_of(const SourceLoc& s) {
  std::string f = s.file_name() ? s.file_name() : "?";
  return f + ":" + std::to_string(s.line());
}

// ---- saved tensors -------------------------------------------------------------------------------
SavedTensor::SavedTensor(const Tensor& t, bool is_output, const std::shared_ptr<Node>& owner, uint32_t output_nr)
    : data_(alias_of(t, /*keep_meta=*/!is_output)),
      version_(t.version()),
      defined_(true),
      is_output_(is_output),
      owner_(is_output ? owner : nullptr),
      output_nr_(output_nr) {}

Tensor SavedTensor::unpack(const Node& node) const {
  if (!defined_) return Tensor();
  if (released_) fail_released(node.forward_name() + "' (" + node.name(), node.forward_site());
  if (data_.version() != version_)
    fail_version_mismatch(node.forward_name() + "' (grad_fn " + node.name(), node.forward_site(), data_, version_,
                          data_.version());
  if (!is_output_) return data_;
  // Rebuild the output's history so that create_graph differentiates through it.
  Tensor out = alias_of(data_, false);
  if (auto owner = owner_.lock(); owner && is_grad_enabled()) set_history(out, owner, output_nr_);
  return out;
}

void fail_version_mismatch(const std::string& op, const SourceLoc& site, const Tensor& t, uint64_t saved,
                           uint64_t now) {
  const WriteRecord& w = t.storage()->last_write();
  std::string inplace = w.op ? w.op : "an in-place op";
  std::string plain = inplace;
  if (!plain.empty() && plain.back() == '_') plain.pop_back();
  KILN_FAIL("autograd: a tensor that '", op, ", forward call at ", site_of(site),
            ") saved for its backward was modified in place by '", inplace, "' at ",
            w.op ? site_of(w.site) : std::string("an unknown site"), ". The tensor is ", dtype_name(t.dtype()),
            shape_str(t.shape()), "; it was saved at version ", saved, " but is now at version ", now,
            ", so the gradient would use the wrong values. Fix: call .clone() on the tensor before '", inplace,
            "' modifies it (or clone the tensor you pass to the op), or use the out-of-place form ('", plain,
            "' instead of '", inplace, "').");
}

void fail_released(const std::string& op, const SourceLoc& site) {
  KILN_FAIL("autograd: trying to run backward through '", op, ", forward call at ", site_of(site),
            ") a second time, but its saved tensors were freed after the first backward. Pass retain_graph=true "
            "to the first backward() if you need to call it twice.");
}

// ---- OpNode ------------------------------------------------------------------------------------------
namespace {

std::string camel_backward(const std::string& op) {
  std::string out;
  bool up = true;
  for (char c : op) {
    if (c == '_') { up = true; continue; }
    out += up ? static_cast<char>(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out + "Backward";
}

class OpNode final : public Node {
 public:
  OpNode(const OpDef& op, Attrs attrs, std::vector<TensorMeta> in_metas)
      : op_(op), attrs_(std::move(attrs)), in_metas_(std::move(in_metas)), name_(camel_backward(op.name())) {}

  std::string name() const override { return name_; }
  std::string forward_name() const override { return op_.name(); }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    std::vector<Tensor> in(saved_in_.size()), out(saved_out_.size());
    for (size_t i = 0; i < saved_in_.size(); ++i) in[i] = saved_in_[i].unpack(*this);
    for (size_t i = 0; i < saved_out_.size(); ++i) out[i] = saved_out_[i].unpack(*this);
    std::vector<bool> needs(next_edges().size());
    for (size_t i = 0; i < needs.size(); ++i) needs[i] = next_edges()[i].valid();
    VjpCtx ctx{in, out, attrs_, needs, in_metas_};
    std::vector<Tensor> g = op_.vjp_rule()->fn(ctx, grads);
    KILN_ASSERT(g.size() <= needs.size(), op_.name(), ": vjp rule returned ", g.size(), " gradients for ",
                needs.size(), " inputs");
    g.resize(needs.size());
    for (size_t i = 0; i < g.size(); ++i) {
      if (!needs[i]) {
        g[i] = Tensor();
        continue;
      }
      if (!g[i].defined()) continue;
      const TensorMeta& m = in_metas_[i];
      KILN_ASSERT(g[i].shape() == m.shape, op_.name(), ": vjp rule gave input ", i, " a gradient of shape ",
                  shape_str(g[i].shape()), ", expected ", shape_str(m.shape));
      if (g[i].dtype() != m.dtype) g[i] = g[i].to(m.dtype);
    }
    return g;
  }

  void release_saved() override {
    for (auto& s : saved_in_) if (s.defined()) s.release();
    for (auto& s : saved_out_) if (s.defined()) s.release();
  }

  std::vector<SavedTensor> saved_in_, saved_out_;

 private:
  const OpDef& op_;
  Attrs attrs_;
  std::vector<TensorMeta> in_metas_;
  std::string name_;
};

// Note [In-place and saved self]
// An in-place call overwrites input 0. Rules of ops with in-place forms read the old self only to
// differentiate the *other* inputs (mul: db = g * a; matmul: dB = Aᵀ g) and read their outputs
// otherwise (relu_, sigmoid_, tanh_, clamp_). So the recorder never saves self: when another
// input requires grad (db needs the old a) the call is refused at once, naming the fix.
class AutogradInterceptor final : public Interceptor {
 public:
  const char* name() const override { return "autograd"; }

  std::vector<Tensor> intercept(OpCall& call, const std::function<std::vector<Tensor>(OpCall&)>& next) override {
    if (!is_grad_enabled()) return next(call);
    const OpDef& op = call.op;
    bool any = false;
    for (const Tensor& t : call.inputs) any = any || requires_grad(t);
    if (!any) {
      auto outs = next(call);
      if (op.is_view())
        for (const Tensor& o : outs) ensure_meta(o).is_view = true;
      return outs;
    }
    if (!op.vjp_rule()) {
      KILN_CHECK(op.vjp_status().kind == RuleStatus::Kind::not_applicable, op.name(),
                 ": an input requires grad but the op has no derivative rule (", op.vjp_status().reason,
                 "); call it under NoGradGuard or on detach()ed inputs");
      auto outs = next(call);
      // A stated "no derivative" is fine for integer/bool outputs (no history); a floating output
      // would silently carry a zero gradient, so that is refused.
      for (const Tensor& o : outs)
        KILN_CHECK(!differentiable_dtype(o.dtype()), op.name(), " at ", site_of(call.loc),
                   ": an input requires grad but the op has no derivative (", op.vjp_status().reason,
                   "); call it under NoGradGuard or on detach()ed inputs");
      return outs;
    }
    if (call.is_inplace()) check_inplace(call);

    const VjpRule& rule = *op.vjp_rule();
    std::vector<TensorMeta> metas(call.inputs.size());
    std::vector<Edge> edges(call.inputs.size());
    for (size_t i = 0; i < call.inputs.size(); ++i) {
      const Tensor& t = call.inputs[i];
      if (!t.defined()) continue;
      metas[i] = TensorMeta{t.dtype(), t.shape()};
      if (requires_grad(t) && differentiable_dtype(t.dtype())) edges[i] = gradient_edge(t);
    }
    auto node = std::make_shared<OpNode>(op, call.attrs, std::move(metas));
    node->set_site(call.loc);
    node->saved_in_.resize(call.inputs.size());
    bool others_need = false;
    for (size_t i = 1; i < edges.size(); ++i) others_need = others_need || edges[i].valid();
    for (int i : rule.save_inputs) {
      size_t k = static_cast<size_t>(i);
      if (k >= call.inputs.size() || !call.inputs[k].defined()) continue;
      if (call.is_inplace() && k == 0) {
        if (!others_need) continue;  // Note [In-place and saved self]
        const Tensor& self = call.inputs[0];
        KILN_FAIL(call.inplace_name, " at ", site_of(call.loc), ": another operand requires grad, and its gradient needs "
                  "the old value of the tensor written in place (", dtype_name(self.dtype()), shape_str(self.shape()),
                  ", version ", self.version(), "), which '", call.inplace_name,
                  "' would overwrite. Fix: use the out-of-place form ('", op.name(), "'), or call .clone() on the "
                  "tensor before '", call.inplace_name, "'");
      }
      node->saved_in_[k] = SavedTensor(call.inputs[k], false, nullptr, 0);
    }
    node->set_next_edges(std::move(edges));

    auto outs = next(call);

    std::vector<OutputInfo> infos;
    infos.reserve(outs.size());
    for (const Tensor& o : outs) infos.push_back({o.shape(), o.dtype()});
    node->set_outputs(std::move(infos));
    for (size_t j = 0; j < outs.size(); ++j) {
      if (!differentiable_dtype(outs[j].dtype())) continue;
      set_history(outs[j], node, static_cast<uint32_t>(j));
      if (op.is_view()) {
        AutogradMeta& m = ensure_meta(outs[j]);
        m.is_view = true;
        m.base_requires_grad = true;
      }
    }
    node->saved_out_.resize(outs.size());
    for (int j : rule.save_outputs) {
      size_t k = static_cast<size_t>(j);
      if (k < outs.size()) node->saved_out_[k] = SavedTensor(outs[k], true, node, static_cast<uint32_t>(k));
    }
    return outs;
  }

 private:
  static void check_inplace(const OpCall& call) {
    const Tensor& self = call.inplace_out;
    const AutogradMeta* m = meta_of(self);
    if (m && m->requires_grad && !m->grad_fn)
      KILN_FAIL(call.inplace_name, " at ", site_of(call.loc), ": the tensor written in place (",
                dtype_name(self.dtype()), shape_str(self.shape()),
                ") is a leaf that requires grad; changing it would invalidate its gradient. Update parameters "
                "inside a kiln::NoGradGuard scope, or use the out-of-place form");
    // Note [In-place on views]: kiln refuses rather than rebasing the base's history, so a
    // gradient is never silently wrong.
    if (m && m->is_view)
      KILN_FAIL(call.inplace_name, " at ", site_of(call.loc), ": the tensor written in place (",
                dtype_name(self.dtype()), shape_str(self.shape()),
                ") is a view of another tensor, and autograd is recording (an input requires grad). kiln does "
                "not rewrite the base tensor's history for in-place writes through views; use the out-of-place "
                "form (e.g. build the result with concat/where/pad), or call .clone() on the view first");
  }
};

AutogradInterceptor g_interceptor;

}  // namespace

void ensure_registered() {
  static const bool once = [] {
    register_interceptor(200, &g_interceptor);
    return true;
  }();
  (void)once;
}

namespace {
// The kiln shared library links every object, so this runs at load time.
const bool g_registered = [] {
  ensure_registered();
  return true;
}();
}  // namespace

}  // namespace kiln::autograd
