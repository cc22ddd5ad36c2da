// The backward engine: collects the graph reachable from the roots, runs each Node once in
// topological order with the summed gradients of its outputs, accumulates into leaves (backward)
// or captures the requested inputs' gradients (grad). Also grad mode, anomaly mode and the leaf
// accumulator node.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <unordered_map>
#include <unordered_set>

#include "autograd/meta.h"
#include "kiln/ops/reduce.h"
#include "kiln/ops/unary.h"

namespace kiln {

namespace {
thread_local bool t_grad_enabled = true;
thread_local bool t_anomaly = false;
}  // namespace

bool is_grad_enabled() { return t_grad_enabled; }
void set_grad_enabled(bool enabled) { t_grad_enabled = enabled; }

namespace autograd {

bool is_anomaly_enabled() { return t_anomaly; }
void set_anomaly_enabled(bool enabled) { t_anomaly = enabled; }

namespace {
std::atomic<uint64_t> g_next_seq{0};
}  // namespace

Node::Node() : seq_(g_next_seq.fetch_add(1, std::memory_order_relaxed)) {}

// Note [Iterative graph teardown]
// Dropping the last reference to a long chain would destroy node after node recursively and
// overflow the stack (a 100k-step loop is an ordinary training graph). The outermost destructor
// on a thread owns a work list; nested destructors only hand it the children they solely own.
Node::~Node() {
  thread_local std::vector<std::shared_ptr<Node>>* pending = nullptr;
  std::vector<std::shared_ptr<Node>> local;
  const bool owner = pending == nullptr;
  if (owner) pending = &local;
  for (Edge& e : next_edges_)
    if (e.fn && e.fn.use_count() == 1) pending->push_back(std::move(e.fn));
  next_edges_.clear();
  if (owner) {
    while (!local.empty()) {
      std::shared_ptr<Node> n = std::move(local.back());
      local.pop_back();
      n.reset();  // may append its own children to `local`
    }
    pending = nullptr;
  }
}
std::string Node::site_str() const { return site_of(site_); }

// ---- leaves ----------------------------------------------------------------------------------------
// Note [Stealing the gradient]: as PyTorch's AccumulateGrad, a leaf's first gradient is kept without
// a copy when this handle is its only owner and its storage is its own (no other tensor or view
// shares it), dense and exactly its size; then no one else can write to it or read it later, and
// the copy would cost a pass over every parameter's gradient each step.
static bool sole_owner(const Tensor& g) {
  return g.impl_ptr().use_count() == 1 && g.storage().use_count() == 1 && g.storage_offset() == 0 &&
         g.is_contiguous() && g.storage()->nbytes() == g.nbytes();
}

class AccumulateGrad final : public Node {
 public:
  AccumulateGrad(const std::shared_ptr<TensorExtension>& meta, const Tensor& leaf) : meta_(meta) {
    set_outputs({{leaf.shape(), leaf.dtype()}});
  }
  std::string name() const override { return "AccumulateGrad"; }

  Tensor run_hooks(Tensor g) const {
    auto m = meta_.lock();
    if (!m) return g;
    for (const auto& h : static_cast<AutogradMeta*>(m.get())->leaf_hooks) {
      Tensor r = h(g);
      if (r.defined()) g = r;
    }
    return g;
  }

  std::vector<Tensor> apply(std::vector<Tensor> grads) override {
    auto locked = meta_.lock();
    if (!locked || !grads[0].defined()) return {};
    auto* m = static_cast<AutogradMeta*>(locked.get());
    Tensor g = run_hooks(std::move(grads[0]));
    if (!m->grad.defined()) {
      // Without create_graph the stored gradient must not alias a tensor the graph passed around
      // (add's rule hands the same gradient to both inputs), so it is copied once, unless nothing
      // else can see it (Note [Stealing the gradient]).
      if (is_grad_enabled()) m->grad = g;
      else m->grad = alias_of(sole_owner(g) ? g : g.clone(), false);
    } else {
      m->grad = is_grad_enabled() ? m->grad + g : alias_of(m->grad + g, false);
    }
    return {};
  }

 private:
  std::weak_ptr<TensorExtension> meta_;
};

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta_of(t);
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl().autograd_meta, t);
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

// ---- engine ------------------------------------------------------------------------------------------
namespace {

void check_finite(const Node& node, const std::vector<Tensor>& grads) {
  for (size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined() || !is_floating(g.dtype()) || g.numel() == 0) continue;
    NoGradGuard ng;
    double s = sum(abs(g.to(DType::f64))).item<double>();
    if (!std::isfinite(s))
      KILN_FAIL("autograd anomaly: '", node.name(), "' (forward call at ", node.site_str(),
                ") produced a NaN or Inf in the gradient of its input ", i, " (", dtype_name(g.dtype()),
                shape_str(g.shape()), ") during backward");
  }
}

Tensor accumulate(const Tensor& a, const Tensor& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return a + b;
}

// Runs backward from `roots`. When `captures` is non-empty the gradients flowing into those edges
// are returned (autograd::grad) and leaves are not accumulated into.
std::vector<Tensor> run_engine(const std::vector<Edge>& roots, const std::vector<Tensor>& root_grads,
                               bool keep_graph, bool create_graph, const std::vector<Edge>& captures) {
  ensure_registered();
  // Dependencies (number of incoming edges from reachable nodes).
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Edge& r : roots)
    if (seen.insert(r.fn.get()).second) stack.push_back(r.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }
  // Topological order (Kahn), so every node runs once with all its gradients summed.
  std::vector<Node*> order;
  order.reserve(seen.size());
  std::vector<Node*> ready;
  for (Node* n : seen)
    if (deps[n] == 0) ready.push_back(n);
  std::sort(ready.begin(), ready.end(), [](Node* a, Node* b) { return a->sequence_nr() < b->sequence_nr(); });
  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    order.push_back(n);
    for (const Edge& e : n->next_edges())
      if (e.valid() && --deps[e.fn.get()] == 0) ready.push_back(e.fn.get());
  }
  KILN_ASSERT(order.size() == seen.size(), "autograd graph has a cycle");

  const bool capturing = !captures.empty();
  std::unordered_map<Node*, std::vector<std::pair<uint32_t, size_t>>> capture_at;
  for (size_t i = 0; i < captures.size(); ++i)
    if (captures[i].valid()) capture_at[captures[i].fn.get()].push_back({captures[i].input_nr, i});
  // With captures, run only nodes from which a captured edge is reachable.
  std::unordered_set<Node*> needed;
  if (capturing) {
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      Node* n = *it;
      bool need = capture_at.count(n) > 0;
      for (const Edge& e : n->next_edges()) need = need || (e.valid() && needed.count(e.fn.get()));
      if (need) needed.insert(n);
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  for (size_t i = 0; i < roots.size(); ++i) {
    auto& buf = buffers[roots[i].fn.get()];
    buf.resize(roots[i].fn->outputs().size());
    buf[roots[i].input_nr] = accumulate(buf[roots[i].input_nr], root_grads[i]);
  }

  std::vector<Tensor> captured(captures.size());
  bool prev_mode = is_grad_enabled();
  struct Restore {
    bool prev;
    ~Restore() { set_grad_enabled(prev); }
  } restore{prev_mode};
  set_grad_enabled(create_graph);

  for (Node* n : order) {
    auto it = buffers.find(n);
    if (it == buffers.end()) continue;  // no gradient reached it
    std::vector<Tensor> grads = std::move(it->second);
    buffers.erase(it);
    if (capturing && !needed.count(n)) continue;
    grads.resize(n->outputs().size());
    bool any = false;
    for (const Tensor& g : grads) any = any || g.defined();
    if (!any) continue;
    for (const auto& h : n->pre_hooks()) {
      Tensor& g = grads[h.output_nr];
      if (!g.defined()) continue;
      Tensor r = h.fn(g);
      if (r.defined()) g = r;
    }
    auto* acc = dynamic_cast<AccumulateGrad*>(n);
    if (auto c = capture_at.find(n); c != capture_at.end()) {
      for (auto [nr, slot] : c->second)
        captured[slot] = acc ? acc->run_hooks(grads[nr]) : grads[nr];
    }
    if (capturing && acc) continue;  // grad(): leaves are not accumulated into
    for (size_t j = 0; j < grads.size(); ++j) {
      if (grads[j].defined()) continue;
      const OutputInfo& info = n->outputs()[j];
      grads[j] = zeros(info.shape, TensorOptions(info.dtype));
    }
    std::vector<Tensor> out = n->apply(std::move(grads));
    if (is_anomaly_enabled()) check_finite(*n, out);
    if (!keep_graph) n->release_saved();
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size() && i < out.size(); ++i) {
      if (!edges[i].valid() || !out[i].defined()) continue;
      auto& buf = buffers[edges[i].fn.get()];
      buf.resize(edges[i].fn->outputs().size());
      buf[edges[i].input_nr] = accumulate(buf[edges[i].input_nr], out[i]);
    }
  }
  return captured;
}

void collect_roots(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
                   std::vector<Edge>& roots, std::vector<Tensor>& grads) {
  KILN_CHECK(grad_outputs.empty() || grad_outputs.size() == outputs.size(), "backward: got ",
             grad_outputs.size(), " gradients for ", outputs.size(), " outputs");
  for (size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& o = outputs[i];
    KILN_CHECK(o.defined(), "backward: output ", i, " is an undefined tensor");
    Edge e = gradient_edge(o);
    KILN_CHECK(e.valid(), "backward: output ", i, " (", dtype_name(o.dtype()), shape_str(o.shape()),
               ") does not require grad and has no grad_fn; did you call requires_grad_() on an input, or compute "
               "it under NoGradGuard?");
    Tensor g = grad_outputs.empty() ? Tensor() : grad_outputs[i];
    if (!g.defined()) {
      KILN_CHECK(o.numel() == 1, "backward: output ", i, " has shape ", shape_str(o.shape()),
                 "; a gradient can be created implicitly only for a one-element output. Pass grad_outputs "
                 "(or backward(gradient)) with the output's shape");
      g = ones(o.shape(), TensorOptions(o.dtype()));
    } else {
      KILN_CHECK(g.shape() == o.shape(), "backward: the gradient for output ", i, " has shape ",
                 shape_str(g.shape()), " but the output has shape ", shape_str(o.shape()));
    }
    roots.push_back(std::move(e));
    grads.push_back(std::move(g));
  }
}

}  // namespace

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                         bool allow_unused) {
  std::vector<Edge> roots;
  std::vector<Tensor> gs;
  collect_roots(outputs, grad_outputs, roots, gs);
  KILN_CHECK(!inputs.empty(), "autograd::grad: no inputs given");
  std::vector<Edge> caps;
  for (size_t i = 0; i < inputs.size(); ++i) {
    KILN_CHECK(requires_grad(inputs[i]), "autograd::grad: input ", i, " does not require grad");
    caps.push_back(gradient_edge(inputs[i]));
  }
  auto res = run_engine(roots, gs, retain_graph || create_graph, create_graph, caps);
  for (size_t i = 0; i < res.size(); ++i) {
    if (!res[i].defined()) {
      KILN_CHECK(allow_unused, "autograd::grad: input ", i, " (", dtype_name(inputs[i].dtype()),
                 shape_str(inputs[i].shape()),
                 ") was not used to compute the outputs; pass allow_unused=true to get an undefined gradient");
    } else if (!create_graph) {
      res[i] = alias_of(res[i], false);
    }
  }
  return res;
}

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs, bool retain_graph,
              bool create_graph) {
  std::vector<Edge> roots;
  std::vector<Tensor> gs;
  collect_roots(outputs, grad_outputs, roots, gs);
  run_engine(roots, gs, retain_graph || create_graph, create_graph, {});
}

}  // namespace autograd
}  // namespace kiln
