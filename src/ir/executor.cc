// The reference executor: runs a graph node by node with the registry's kernels, no optimization.
// It is the oracle later compiler passes are checked against.
#include <map>

#include "kiln/ir.h"
#include "kiln/ops/dispatch.h"

namespace kiln::ir {

namespace {

// Checks a tensor against a declared type, binding symbols on first sight.
void check_against(const Tensor& t, const ValueType& want, std::map<std::string, int64_t>& bound,
                   const std::string& what) {
  KILN_CHECK(t.dtype() == want.dtype, what, ": expected dtype ", dtype_name(want.dtype), ", got ",
             dtype_name(t.dtype()), " (declared type ", type_str(want), ")");
  KILN_CHECK(t.dim() == static_cast<int64_t>(want.shape.size()), what, ": expected rank ", want.shape.size(), " (",
             type_str(want), "), got shape ", kiln::shape_str(t.shape()));
  for (size_t d = 0; d < want.shape.size(); ++d) {
    const Dim& w = want.shape[d];
    int64_t got = t.shape()[d];
    if (!w.is_symbolic()) {
      KILN_CHECK(got == w.size, what, ": dim ", d, " must be ", w.size, " (", type_str(want), "), got shape ",
                 kiln::shape_str(t.shape()));
      continue;
    }
    KILN_CHECK(got % w.scale == 0, what, ": dim ", d, " is ", dim_str(w), ", got ", got, ", not a multiple of ",
               w.scale, " (shape ", kiln::shape_str(t.shape()), ")");
    auto [it, fresh] = bound.emplace(w.symbol, got / w.scale);
    KILN_CHECK(fresh || it->second == got / w.scale, what, ": dim ", d, " is ",
               w.scale == 1 ? std::string() : std::to_string(w.scale) + " times ", "the symbol '", w.symbol,
               "', already bound to ", it->second, " by an earlier input, but here it is ", got, " (shape ",
               kiln::shape_str(t.shape()), ")");
  }
}

}  // namespace

std::vector<Tensor> run(const Graph& g, const std::map<std::string, Tensor>& inputs) {
  for (const auto& [name, t] : inputs) {
    bool known = false;
    for (const Value* v : g.inputs()) known = known || v->name() == name;
    if (!known) {
      std::string names;
      for (const Value* v : g.inputs()) names += (names.empty() ? "" : ", ") + v->name();
      KILN_FAIL("run graph '", g.name, "': no input named '", name, "' (the graph's inputs: ",
                names.empty() ? "none" : names, ")");
    }
  }
  std::map<const Value*, Tensor> env;
  std::map<std::string, int64_t> symbols;
  for (const Value* v : g.inputs()) {
    auto it = inputs.find(v->name());
    KILN_CHECK(it != inputs.end(), "run graph '", g.name, "': input '", v->name(), "' (", type_str(v->type()),
               ") was not given");
    KILN_CHECK(it->second.defined(), "run graph '", g.name, "': input '", v->name(), "' is an undefined tensor");
    check_against(it->second, v->type(), symbols, "run graph '" + g.name + "': input '" + v->name() + "'");
    env[v] = it->second;
  }
  for (const Value* c : g.constants()) env[c] = c->constant();
  auto nodes = g.nodes();
  for (size_t idx = 0; idx < nodes.size(); ++idx) {
    const Node* n = nodes[idx];
    std::vector<Tensor> ins;
    for (const Value* v : n->inputs()) {
      if (!v) {
        ins.emplace_back();
        continue;
      }
      auto it = env.find(v);
      KILN_CHECK(it != env.end(), "run graph '", g.name, "': node #", idx, " '", n->str(), "' uses %", v->name(),
                 " before it is computed; verify the graph");
      ins.push_back(it->second);
    }
    OpCall call{n->op(), std::move(ins), n->attrs(), KILN_HERE, Tensor(), nullptr};
    std::vector<Tensor> outs;
    try {
      outs = run_kernel(call);
    } catch (const Error& e) {
      KILN_FAIL("run graph '", g.name, "': node #", idx, " '", n->str(), "' failed: ", e.what());
    }
    KILN_CHECK(outs.size() == n->outputs().size(), "run graph '", g.name, "': node #", idx, " '", n->str(),
               "' produced ", outs.size(), " outputs, the graph declares ", n->outputs().size());
    for (size_t i = 0; i < outs.size(); ++i) {
      check_against(outs[i], n->outputs()[i]->type(), symbols,
                    "run graph '" + g.name + "': node #" + std::to_string(idx) + " '" + n->str() + "' output %" +
                        n->outputs()[i]->name());
      env[n->outputs()[i]] = std::move(outs[i]);
    }
  }
  std::vector<Tensor> result;
  for (const Value* v : g.outputs()) {
    auto it = env.find(v);
    KILN_CHECK(it != env.end(), "run graph '", g.name, "': output %", v->name(), " is never computed");
    result.push_back(it->second);
  }
  return result;
}

std::vector<Tensor> run(const Graph& g, const std::vector<Tensor>& inputs) {
  KILN_CHECK(inputs.size() == g.inputs().size(), "run graph '", g.name, "': expected ", g.inputs().size(),
             " inputs, got ", inputs.size());
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < inputs.size(); ++i) named[g.inputs()[i]->name()] = inputs[i];
  return run(g, named);
}

}  // namespace kiln::ir
