// Autograd's per-tensor state (AutogradMeta, attached through TensorImpl::autograd_meta), saved
// tensors with their version check, and the helpers the recorder, engine and Function share.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "kiln/autograd.h"

namespace kiln::autograd {

// Note [Meta objects are replaced, not mutated]
// An in-place op gives its tensor new history by installing a *new* AutogradMeta on the impl.
// Saved inputs are aliases (a second TensorImpl over the same storage) that keep the meta they
// had at save time, so a saved input still points at the history it had when it was saved.
struct AutogradMeta : TensorExtension {
  bool requires_grad = false;
  Tensor grad;                     // leaves (and non-leaves with retains_grad)
  std::shared_ptr<Node> grad_fn;   // null for leaves
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // leaves: the AccumulateGrad node, while a graph holds it
  bool retains_grad = false;
  std::vector<Node::GradHook> leaf_hooks;
  bool is_view = false;            // produced by a view op while grad mode was on
  bool base_requires_grad = false; // the viewed tensor required grad
};

AutogradMeta* meta_of(const Tensor& t);            // null when none
AutogradMeta& ensure_meta(const Tensor& t);
bool requires_grad(const Tensor& t);
// The edge a gradient of `t` flows along (grad_fn or the leaf's accumulator); invalid if none.
Edge gradient_edge(const Tensor& t);
// A second handle over t's storage and layout; `keep_meta` shares t's AutogradMeta.
Tensor alias_of(const Tensor& t, bool keep_meta);
// Installs fresh history on `t` (Note [Meta objects are replaced, not mutated]).
void set_history(const Tensor& t, std::shared_ptr<Node> fn, uint32_t output_nr);

bool differentiable_dtype(DType t);

// A tensor saved for backward, with the storage version seen at save time.
class SavedTensor {
 public:
  SavedTensor() = default;
  // Output saved by its own node: stored without history (no reference cycle) and rebuilt.
  SavedTensor(const Tensor& t, bool is_output, const std::shared_ptr<Node>& owner, uint32_t output_nr);
  bool defined() const { return defined_; }
  // Raises kiln::Error when released (second backward) or modified in place since saving.
  Tensor unpack(const Node& node) const;
  void release() { data_ = Tensor(); released_ = true; }

 private:
  Tensor data_;
  uint64_t version_ = 0;
  bool defined_ = false, released_ = false, is_output_ = false;
  std::weak_ptr<Node> owner_;
  uint32_t output_nr_ = 0;
};

// The error for a saved tensor changed in place (also used by matmul_ and custom Functions).
[[noreturn]] void fail_version_mismatch(const std::string& op, const SourceLoc& site, const Tensor& t,
                                        uint64_t saved, uint64_t now);
[[noreturn]] void fail_released(const std::string& op, const SourceLoc& site);
std::string site_of(const SourceLoc& s);

// Registers the interceptor (idempotent); called from every entry point of this layer.
void ensure_registered();

}  // namespace kiln::autograd
