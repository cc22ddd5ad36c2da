// Helpers shared by the compiler's passes.
#include "compiler/passes/common.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>
#include <sstream>

namespace kiln::compiler::passes {

std::string format_double(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool is_graph_output(const ir::Graph& g, const ir::Value* v) {
  return std::find(g.outputs().begin(), g.outputs().end(), v) != g.outputs().end();
}

size_t use_count(const std::map<const ir::Value*, std::vector<ir::Use>>& uses, const ir::Value* v) {
  auto it = uses.find(v);
  return it == uses.end() ? 0 : it->second.size();
}

std::vector<double> const_values(const ir::Value* v) {
  KILN_ASSERT(is_const(v), "const_values: %", v ? v->name() : "?", " is not a constant");
  Tensor t = v->constant().to(DType::f64).contiguous();
  const double* p = t.data<double>();
  return std::vector<double>(p, p + t.numel());
}

Tensor tensor_from(const std::vector<double>& values, const Shape& shape, DType dtype) {
  return from_vector<double>(values, shape).to(dtype);
}

std::optional<BatchNormAffine> batch_norm_affine(const ir::Node* bn, int64_t channels) {
  const auto& in = bn->inputs();
  for (size_t i = 1; i < in.size(); ++i)
    if (in[i] && !is_const(in[i])) return std::nullopt;
  auto mean = const_values(in[1]), var = const_values(in[2]);
  auto c = static_cast<size_t>(channels);
  if (mean.size() != c || var.size() != c) return std::nullopt;
  std::vector<double> gamma(c, 1.0), beta(c, 0.0);
  if (in.size() > 3 && in[3]) gamma = const_values(in[3]);
  if (in.size() > 4 && in[4]) beta = const_values(in[4]);
  if (gamma.size() != c || beta.size() != c) return std::nullopt;
  double eps = bn->attrs().get_float("eps");
  BatchNormAffine p;
  for (size_t i = 0; i < c; ++i) {
    double s = gamma[i] / std::sqrt(var[i] + eps);
    p.scale.push_back(s);
    p.shift.push_back(beta[i] - mean[i] * s);
  }
  return p;
}

std::optional<std::vector<double>> per_channel_values(const ir::Value* c, int64_t channels, bool conv) {
  if (!is_const(c) || !is_floating(c->type().dtype)) return std::nullopt;
  Shape s = c->constant().shape();
  std::vector<Shape> ok = conv ? std::vector<Shape>{{channels, 1, 1}, {1, channels, 1, 1}}
                               : std::vector<Shape>{{channels}, {1, channels}};
  if (std::find(ok.begin(), ok.end(), s) == ok.end()) return std::nullopt;
  return const_values(c);
}

std::optional<std::string> activation_of(const ir::Node* n) {
  const std::string& op = n->op().name();
  if (op == "relu" || op == "sigmoid" || op == "tanh" || op == "silu" || op == "hardswish") return op;
  if (op == "gelu") return n->attrs().get_string("approximate") == "tanh" ? "gelu_tanh" : "gelu";
  if (op == "clip" && n->inputs().size() == 1 && n->attrs().has("min") && n->attrs().has("max") &&
      n->attrs().get_float("min") == 0.0 && n->attrs().get_float("max") == 6.0)
    return "relu6";
  return std::nullopt;
}

bool is_reshape_like(const ir::Node* n) {
  const std::string& op = n->op().name();
  return op == "reshape" || op == "squeeze" || op == "unsqueeze";
}

std::optional<std::vector<int64_t>> reshape_target(const ir::ValueType& t) {
  std::vector<int64_t> s;
  int syms = 0;
  for (const auto& d : t.shape) {
    if (d.is_symbolic()) ++syms;
    s.push_back(d.is_symbolic() ? -1 : d.size);
  }
  if (syms > 1) return std::nullopt;
  return s;
}

std::vector<int64_t> normalized_perm(const std::vector<int64_t>& dims) {
  std::vector<int64_t> out(dims);
  for (int64_t& d : out)
    if (d < 0) d += static_cast<int64_t>(dims.size());
  return out;
}

bool is_identity_perm(const std::vector<int64_t>& dims) {
  const std::vector<int64_t> p = normalized_perm(dims);
  for (size_t i = 0; i < p.size(); ++i)
    if (p[i] != static_cast<int64_t>(i)) return false;
  return true;
}

void topo_reorder(ir::Graph& g) {
  auto nodes = g.nodes();
  bool ordered = true;
  {
    std::set<const ir::Value*> defined(g.inputs().begin(), g.inputs().end());
    defined.insert(g.constants().begin(), g.constants().end());
    for (const ir::Node* n : nodes) {
      for (const ir::Value* v : n->inputs()) ordered = ordered && (!v || defined.count(v));
      for (const ir::Value* v : n->outputs()) defined.insert(v);
    }
  }
  if (ordered) return;
  // Post-order DFS from each node in the current order: producers are emitted first.
  std::vector<const ir::Node*> order;
  std::set<const ir::Node*> done, active;
  std::function<void(const ir::Node*)> visit = [&](const ir::Node* n) {
    if (done.count(n)) return;
    KILN_ASSERT(!active.count(n), "topo_reorder: cycle through ", n->str());
    active.insert(n);
    for (const ir::Value* v : n->inputs())
      if (v && v->producer()) visit(v->producer());
    active.erase(n);
    done.insert(n);
    order.push_back(n);
  };
  for (const ir::Node* n : nodes) visit(n);
  ir::Graph out;
  out.name = g.name;
  std::map<const ir::Value*, ir::Value*> map;
  for (const ir::Value* v : g.inputs()) map[v] = out.add_input(v->name(), v->type());
  for (const ir::Value* v : g.constants()) map[v] = out.add_constant(v->name(), v->constant());
  for (const ir::Node* n : order) {
    std::vector<ir::Value*> ins;
    for (const ir::Value* v : n->inputs()) ins.push_back(v ? map.at(v) : nullptr);
    std::vector<std::pair<std::string, ir::ValueType>> outs;
    for (const ir::Value* v : n->outputs()) outs.emplace_back(v->name(), v->type());
    ir::Node* c = out.add_node_raw(n->op(), std::move(ins), n->attrs(), outs);
    for (size_t i = 0; i < n->outputs().size(); ++i) map[n->outputs()[i]] = c->outputs()[i];
  }
  std::vector<ir::Value*> outs;
  for (const ir::Value* v : g.outputs()) outs.push_back(map.at(v));
  out.set_outputs(std::move(outs));
  g = std::move(out);
}

ir::PassResult report(const std::string& pass, const std::string& verb, const std::vector<std::string>& items,
                      const std::string& nothing) {
  ir::PassResult r;
  r.changed = !items.empty();
  if (!r.changed) {
    r.report = pass + ": " + nothing;
    return r;
  }
  r.report = pass + ": " + verb + " " + std::to_string(items.size()) + ":";
  for (size_t i = 0; i < items.size(); ++i) r.report += (i ? "; " : " ") + items[i];
  return r;
}

}  // namespace kiln::compiler::passes
