// Custom differentiable functions (autograd::Function): a user forward run without recording and
// a user backward recorded as one Node, with saved tensors version-checked like built-in ops.
#include <algorithm>

#include "autograd/meta.h"

namespace kiln::autograd {

struct FunctionAccess {
  static void set_owner(FunctionCtx& c, std::string name, SourceLoc site) {
    c.owner_ = std::move(name);
    c.site_ = site;
  }
  static void release(FunctionCtx& c) {
    c.saved_.clear();
    c.released_ = true;
  }
  static const std::vector<Tensor>& dirty(const FunctionCtx& c) { return c.dirty_; }
  // The dirty / non-differentiable lists are only read while apply_function wires the node; kept
  // longer they would form a cycle (tensor -> node -> ctx -> tensor) and leak the graph.
  static void forget_marks(FunctionCtx& c) {
    c.dirty_.clear();
    c.non_diff_.clear();
  }
  static const std::vector<Tensor>& non_diff(const FunctionCtx& c) { return c.non_diff_; }
};

void FunctionCtx::save_for_backward(std::vector<Tensor> tensors) {
  saved_.clear();
  for (const Tensor& t : tensors) saved_.push_back(t.defined() ? Saved{alias_of(t, true), t.version()} : Saved{});
}

std::vector<Tensor> FunctionCtx::saved_tensors() const {
  if (released_) fail_released(owner_ + "' (custom Function", site_);
  std::vector<Tensor> out;
  for (const Saved& s : saved_) {
    if (s.alias.defined() && s.alias.version() != s.version)
      fail_version_mismatch(owner_ + "' (custom Function", site_, s.alias, s.version, s.alias.version());
    out.push_back(s.alias);
  }
  return out;
}

namespace {

class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, std::shared_ptr<FunctionCtx> ctx, BackwardFn backward, size_t n_inputs)
      : name_(std::move(name)), ctx_(std::move(ctx)), backward_(std::move(backward)), n_inputs_(n_inputs) {}
  std::string name() const override { return name_ + "Backward"; }
  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    std::vector<Tensor> g = backward_(*ctx_, grads);
    KILN_CHECK(g.size() == n_inputs_, "custom Function '", name_, "' (forward call at ", site_str(),
               "): backward returned ", g.size(), " gradients for ", n_inputs_, " inputs");
    for (size_t i = 0; i < g.size(); ++i) {
      if (!next_edges()[i].valid()) {
        g[i] = Tensor();
        continue;
      }
      if (!g[i].defined()) continue;
      const OutputInfo& want = in_info_[i];
      KILN_CHECK(g[i].shape() == want.shape, "custom Function '", name_, "': backward returned a gradient of shape ",
                 shape_str(g[i].shape()), " for input ", i, " of shape ", shape_str(want.shape));
      if (g[i].dtype() != want.dtype) g[i] = g[i].to(want.dtype);
    }
    return g;
  }
  void release_saved() override { FunctionAccess::release(*ctx_); }
  std::vector<OutputInfo> in_info_;

 private:
  std::string name_;
  std::shared_ptr<FunctionCtx> ctx_;
  BackwardFn backward_;
  size_t n_inputs_;
};

bool contains(const std::vector<Tensor>& v, const Tensor& t) {
  return std::any_of(v.begin(), v.end(), [&](const Tensor& u) { return u.defined() && u.impl_ptr() == t.impl_ptr(); });
}

}  // namespace

std::vector<Tensor> apply_function(const std::string& name, const ForwardFn& forward, const BackwardFn& backward,
                                   const std::vector<Tensor>& inputs, SourceLoc loc) {
  ensure_registered();
  auto ctx = std::make_shared<FunctionCtx>();
  FunctionAccess::set_owner(*ctx, name, loc);
  bool any = false;
  ctx->needs_input_grad.resize(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    ctx->needs_input_grad[i] = is_grad_enabled() && requires_grad(inputs[i]) && differentiable_dtype(inputs[i].dtype());
    any = any || ctx->needs_input_grad[i];
  }
  std::vector<Tensor> outs;
  {
    NoGradGuard ng;
    outs = forward(*ctx, inputs);
  }
  if (!any) {
    FunctionAccess::forget_marks(*ctx);
    return outs;
  }
  for (const Tensor& d : FunctionAccess::dirty(*ctx)) {
    KILN_CHECK(contains(inputs, d), "custom Function '", name, "': mark_dirty() got a tensor that is not an input");
    const AutogradMeta* m = meta_of(d);
    KILN_CHECK(!(m && m->requires_grad && !m->grad_fn), "custom Function '", name, "' at ", site_of(loc),
               ": it modifies in place (mark_dirty) a leaf that requires grad; do it under NoGradGuard or on a clone");
  }
  auto node = std::make_shared<FunctionNode>(name, ctx, backward, inputs.size());
  node->set_site(loc);
  std::vector<Edge> edges(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    node->in_info_.push_back({inputs[i].defined() ? inputs[i].shape() : Shape{}, inputs[i].defined() ? inputs[i].dtype() : DType::f32});
    if (ctx->needs_input_grad[i]) edges[i] = gradient_edge(inputs[i]);
  }
  node->set_next_edges(std::move(edges));
  std::vector<OutputInfo> infos;
  for (Tensor& o : outs) {
    infos.push_back({o.shape(), o.dtype()});
    // An output that is an input returned unchanged gets its own handle, so the input keeps its
    // history; a dirty input is rebased onto this node (its impl takes the new history).
    if (contains(inputs, o) && !contains(FunctionAccess::dirty(*ctx), o)) o = alias_of(o, false);
  }
  node->set_outputs(std::move(infos));
  for (size_t j = 0; j < outs.size(); ++j) {
    if (!outs[j].defined() || !differentiable_dtype(outs[j].dtype()) || contains(FunctionAccess::non_diff(*ctx), outs[j]))
      continue;
    set_history(outs[j], node, static_cast<uint32_t>(j));
  }
  FunctionAccess::forget_marks(*ctx);
  return outs;
}

}  // namespace kiln::autograd
