// Tensor's autograd methods (declared in include/kiln/core/tensor.h, defined here so that core
// does not depend on this layer).
#include "autograd/meta.h"

namespace kiln {

using autograd::AutogradMeta;
using autograd::meta_of;

Tensor& Tensor::requires_grad_(bool requires_grad) {
  autograd::ensure_registered();
  AutogradMeta* m = meta_of(*this);
  if (m && m->grad_fn) {
    KILN_CHECK(requires_grad, "requires_grad_(false) on a tensor with a grad_fn (", m->grad_fn->name(),
               "): only leaves can stop requiring grad; use detach()");
    return *this;
  }
  if (requires_grad)
    KILN_CHECK(autograd::differentiable_dtype(dtype()), "requires_grad_(): only floating tensors can require grad, got ",
               dtype_name(dtype()), shape_str(shape()), "; cast it with .to(DType::f32) first");
  autograd::ensure_meta(*this).requires_grad = requires_grad;
  return *this;
}

bool Tensor::requires_grad() const { return autograd::requires_grad(*this); }

bool Tensor::is_leaf() const {
  const AutogradMeta* m = meta_of(*this);
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = meta_of(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) const {
  if (g.defined())
    KILN_CHECK(g.shape() == shape(), "set_grad: gradient of shape ", shape_str(g.shape()), " for a tensor of shape ",
               shape_str(shape()));
  autograd::ensure_meta(*this).grad = g;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta* m = meta_of(*this);
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph, create_graph);
}

Tensor Tensor::detach() const { return autograd::alias_of(*this, false); }

void Tensor::retain_grad() const {
  AutogradMeta* m = meta_of(*this);
  KILN_CHECK(m && m->requires_grad, "retain_grad() on a tensor that does not require grad");
  if (!m->grad_fn || m->retains_grad) return;
  m->retains_grad = true;
  std::weak_ptr<TensorExtension> weak = impl().autograd_meta;
  m->grad_fn->add_pre_hook(m->output_nr, [weak](const Tensor& g) {
    if (auto locked = weak.lock()) {
      auto* mm = static_cast<AutogradMeta*>(locked.get());
      Tensor d = is_grad_enabled() ? g : autograd::alias_of(g, false);
      mm->grad = mm->grad.defined() ? mm->grad + d : (is_grad_enabled() ? d : d.clone());
    }
    return Tensor();
  });
}

void Tensor::register_hook(std::function<Tensor(const Tensor&)> hook) const {
  AutogradMeta* m = meta_of(*this);
  KILN_CHECK(m && m->requires_grad, "register_hook() on a tensor that does not require grad");
  if (m->grad_fn) m->grad_fn->add_pre_hook(m->output_nr, std::move(hook));
  else m->leaf_hooks.push_back(std::move(hook));
}

}  // namespace kiln
