// The verifier: the invariants every graph (and every pass's output) must keep.
#include <set>
#include <sstream>

#include "kiln/ir.h"

namespace kiln::ir {

std::vector<std::string> verify_errors(const Graph& g) {
  std::vector<std::string> errs;
  std::set<const Value*> defined;
  std::set<std::string> names;
  std::set<const Value*> owned;  // values this graph defines anywhere (to tell dangling from late)
  for (const Value* v : g.inputs()) owned.insert(v);
  for (const Value* v : g.constants()) owned.insert(v);
  for (const Node* n : g.nodes())
    for (const Value* v : n->outputs()) owned.insert(v);

  auto define = [&](const Value* v, const std::string& where) {
    if (!defined.insert(v).second) errs.push_back(where + ": value %" + v->name() + " is defined more than once");
    if (!names.insert(v->name()).second)
      errs.push_back(where + ": the name %" + v->name() + " is used by two different values");
  };
  for (const Value* v : g.inputs()) {
    if (v->kind() != Value::Kind::input) errs.push_back("input %" + v->name() + " is not marked as an input");
    define(v, "input %" + v->name());
  }
  for (const Value* c : g.constants()) {
    std::string where = "constant %" + c->name();
    define(c, where);
    const Tensor& t = c->constant();
    if (!t.defined()) {
      errs.push_back(where + ": holds no tensor");
      continue;
    }
    ValueType actual{t.dtype(), static_shape(t.shape())};
    if (!(actual == c->type()))
      errs.push_back(where + ": declared " + type_str(c->type()) + " but holds a tensor of " + type_str(actual));
  }

  auto nodes = g.nodes();
  for (size_t idx = 0; idx < nodes.size(); ++idx) {
    const Node* n = nodes[idx];
    std::string where = "node #" + std::to_string(idx) + " '" + n->str() + "'";
    const Schema& schema = n->op().schema();
    bool inputs_ok = true;
    std::vector<std::optional<ValueType>> in;
    for (size_t i = 0; i < n->inputs().size(); ++i) {
      const Value* v = n->inputs()[i];
      const TensorArg& arg = i < schema.inputs.size() ? schema.inputs[i] : schema.inputs.back();
      if (!v) {
        if (!arg.optional) {
          errs.push_back(where + ": input " + std::to_string(i) + " ('" + arg.name + "') is required but absent");
          inputs_ok = false;
        }
        in.push_back(std::nullopt);
        continue;
      }
      if (!owned.count(v)) {
        errs.push_back(where + ": input " + std::to_string(i) + " uses %" + v->name() +
                       ", which is not defined in this graph (a dangling use)");
        inputs_ok = false;
      } else if (!defined.count(v)) {
        errs.push_back(where + ": input " + std::to_string(i) + " uses %" + v->name() +
                       " before its definition (nodes must be in topological order)");
        inputs_ok = false;
      }
      in.push_back(v->type());
    }
    for (size_t i = 0; i < n->outputs().size(); ++i) {
      const Value* v = n->outputs()[i];
      if (v->producer() != n || v->output_index() != i || v->kind() != Value::Kind::node_output)
        errs.push_back(where + ": output %" + v->name() + " does not record this node as its producer");
      define(v, where);
    }
    // Attributes: exactly the bound set (all required present, types right, no unknown names).
    Attrs bound;
    try {
      bound = n->op().bind_attrs(n->attrs());
    } catch (const Error& e) {
      errs.push_back(where + ": invalid attributes: " + e.what());
      continue;
    }
    if (!(bound == n->attrs())) {
      std::string missing;
      for (const auto& [k, v] : bound.values())
        if (!n->attrs().has(k) || !attr_values_identical(n->attrs().get(k), v))
          missing += (missing.empty() ? "" : ", ") + k;
      errs.push_back(where + ": attributes are not in bound form (check: " + missing + ")");
      continue;
    }
    if (!inputs_ok) continue;
    std::vector<ValueType> inferred;
    try {
      inferred = infer_types(n->op(), in, bound);
    } catch (const Error& e) {
      errs.push_back(where + ": the op rejects its inputs: " + e.what());
      continue;
    }
    if (inferred.size() != n->outputs().size()) {
      errs.push_back(where + ": the op produces " + std::to_string(inferred.size()) + " outputs here, the node has " +
                     std::to_string(n->outputs().size()));
      continue;
    }
    for (size_t i = 0; i < inferred.size(); ++i) {
      const Value* v = n->outputs()[i];
      if (!(inferred[i] == v->type()))
        errs.push_back(where + ": output %" + v->name() + " is declared " + type_str(v->type()) +
                       " but the op infers " + type_str(inferred[i]));
    }
  }
  for (size_t i = 0; i < g.outputs().size(); ++i) {
    const Value* v = g.outputs()[i];
    if (!v) errs.push_back("graph output " + std::to_string(i) + " is null");
    else if (!owned.count(v)) errs.push_back("graph output " + std::to_string(i) + " (%" + v->name() + ") is not defined in this graph (a dangling use)");
  }
  return errs;
}

void verify(const Graph& g) {
  auto errs = verify_errors(g);
  if (errs.empty()) return;
  std::ostringstream os;
  os << "graph '" << g.name << "' failed verification (" << errs.size() << " problem" << (errs.size() > 1 ? "s" : "") << "):";
  for (const auto& e : errs) os << "\n  " << e;
  KILN_FAIL(os.str());
}

}  // namespace kiln::ir
