// Graph, Node and Value: construction, lookup and the edits passes make.
#include <algorithm>
#include <cctype>
#include <set>

#include "kiln/ir.h"

namespace kiln::ir {

SymShape static_shape(const Shape& s) { return SymShape(s.begin(), s.end()); }

std::string dim_str(const Dim& d) {
  if (!d.is_symbolic()) return std::to_string(d.size);
  return d.scale == 1 ? d.symbol : std::to_string(d.scale) + "*" + d.symbol;
}

std::string shape_str(const SymShape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + dim_str(s[i]);
  return out + "]";
}

bool ValueType::is_static() const {
  return std::none_of(shape.begin(), shape.end(), [](const Dim& d) { return d.is_symbolic(); });
}

std::string type_str(const ValueType& t) { return std::string(dtype_name(t.dtype)) + shape_str(t.shape); }

std::string Node::str() const {
  std::string s;
  for (size_t i = 0; i < outputs_.size(); ++i) s += (i ? ", %" : "%") + outputs_[i]->name();
  s += " = " + op_->name() + "(";
  for (size_t i = 0; i < inputs_.size(); ++i) s += (i ? ", " : "") + (inputs_[i] ? "%" + inputs_[i]->name() : "_");
  return s + ")";
}

namespace {
bool valid_name(const std::string& n) {
  if (n.empty()) return false;
  return std::all_of(n.begin(), n.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.';
  });
}
}  // namespace

std::string Graph::fresh_name(const std::string& stem) {
  for (;;) {
    std::string n = stem + std::to_string(next_id_++);
    if (!by_name_.count(n)) return n;
  }
}

Value* Graph::new_value(const std::string& name) {
  std::string n = name.empty() ? fresh_name() : name;
  KILN_CHECK(valid_name(n), "ir: invalid value name '", n, "' (letters, digits, '_' and '.')");
  KILN_CHECK(!by_name_.count(n), "ir: value '%", n, "' is defined twice");
  auto v = std::make_unique<Value>();
  v->name_ = n;
  Value* p = v.get();
  values_.push_back(std::move(v));
  by_name_[n] = p;
  return p;
}

void Graph::rename(Value* v, const std::string& new_name) {
  if (v->name_ == new_name) return;
  KILN_CHECK(valid_name(new_name), "ir: invalid value name '", new_name, "' (letters, digits, '_' and '.')");
  KILN_CHECK(!by_name_.count(new_name), "ir: cannot rename %", v->name_, " to %", new_name, ": the name is taken");
  by_name_.erase(v->name_);
  v->name_ = new_name;
  by_name_[new_name] = v;
}

Value* Graph::add_input(const std::string& name, ValueType type) {
  Value* v = new_value(name);
  v->kind_ = Value::Kind::input;
  v->type_ = std::move(type);
  inputs_.push_back(v);
  return v;
}

Value* Graph::add_constant(const std::string& name, const Tensor& value) {
  KILN_CHECK(value.defined(), "ir: constant '", name, "' is an undefined tensor");
  KILN_CHECK(!value.impl().symbolic, "ir: constant '", name, "' is a traced value, not data");
  Value* v = new_value(name.empty() ? fresh_name("c") : name);
  v->kind_ = Value::Kind::constant;
  v->type_ = ValueType{value.dtype(), static_shape(value.shape())};
  v->constant_ = value.cpu().contiguous();
  constants_.push_back(v);
  return v;
}

Node* Graph::add_node(const OpDef& op, std::vector<Value*> inputs, const Attrs& attrs,
                      const std::vector<std::string>& output_names) {
  Attrs bound = op.bind_attrs(attrs);
  std::vector<std::optional<ValueType>> in;
  for (Value* v : inputs) in.push_back(v ? std::optional<ValueType>(v->type()) : std::nullopt);
  std::vector<ValueType> types = infer_types(op, in, bound);
  KILN_CHECK(output_names.empty() || output_names.size() == types.size(), "ir: ", op.name(), " has ",
             types.size(), " outputs but ", output_names.size(), " names were given");
  std::vector<std::pair<std::string, ValueType>> outs;
  for (size_t i = 0; i < types.size(); ++i) outs.emplace_back(output_names.empty() ? "" : output_names[i], types[i]);
  return add_node_raw(op, std::move(inputs), std::move(bound), outs);
}

Node* Graph::add_node_raw(const OpDef& op, std::vector<Value*> inputs, Attrs attrs,
                          const std::vector<std::pair<std::string, ValueType>>& outputs) {
  auto n = std::make_unique<Node>();
  n->op_ = &op;
  n->inputs_ = std::move(inputs);
  n->attrs_ = std::move(attrs);
  for (size_t i = 0; i < outputs.size(); ++i) {
    Value* v = new_value(outputs[i].first);
    v->kind_ = Value::Kind::node_output;
    v->type_ = outputs[i].second;
    v->producer_ = n.get();
    v->index_ = i;
    n->outputs_.push_back(v);
  }
  nodes_.push_back(std::move(n));
  return nodes_.back().get();
}

std::vector<Node*> Graph::nodes() const {
  std::vector<Node*> out;
  out.reserve(nodes_.size());
  for (const auto& n : nodes_) out.push_back(n.get());
  return out;
}

Value* Graph::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

void Graph::replace_all_uses(Value* from, Value* to) {
  for (auto& n : nodes_)
    for (auto& in : n->inputs_)
      if (in == from) in = to;
  for (auto& o : outputs_)
    if (o == from) o = to;
}

std::map<const Value*, std::vector<Use>> Graph::uses() const {
  std::map<const Value*, std::vector<Use>> u;
  for (const auto& n : nodes_)
    for (size_t i = 0; i < n->inputs_.size(); ++i)
      if (n->inputs_[i]) u[n->inputs_[i]].push_back({n.get(), i});
  for (size_t i = 0; i < outputs_.size(); ++i) u[outputs_[i]].push_back({nullptr, i});
  return u;
}

void Graph::erase_nodes(const std::vector<Node*>& dead) {
  std::set<const Node*> gone(dead.begin(), dead.end());
  std::set<const Value*> dead_values;
  for (const Node* n : dead)
    for (const Value* v : n->outputs_) dead_values.insert(v);
  auto u = uses();
  for (const Value* v : dead_values)
    for (const Use& use : u[v])
      KILN_ASSERT(use.node && gone.count(use.node), "erasing %", v->name(), " which is still used");
  nodes_.erase(std::remove_if(nodes_.begin(), nodes_.end(), [&](const auto& n) { return gone.count(n.get()) > 0; }),
               nodes_.end());
  for (const Value* v : dead_values) by_name_.erase(v->name());
  values_.erase(std::remove_if(values_.begin(), values_.end(),
                               [&](const auto& v) { return dead_values.count(v.get()) > 0; }),
                values_.end());
}

void Graph::erase_constants(const std::vector<Value*>& dead) {
  std::set<const Value*> gone(dead.begin(), dead.end());
  auto u = uses();
  for (const Value* v : dead) KILN_ASSERT(u[v].empty(), "erasing constant %", v->name(), " which is still used");
  constants_.erase(std::remove_if(constants_.begin(), constants_.end(), [&](Value* v) { return gone.count(v) > 0; }),
                   constants_.end());
  for (const Value* v : dead) by_name_.erase(v->name());
  values_.erase(std::remove_if(values_.begin(), values_.end(), [&](const auto& v) { return gone.count(v.get()) > 0; }),
                values_.end());
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const Value* c : constants_) n += c->constant().numel();
  return n;
}

Graph Graph::clone() const {
  Graph g;
  g.name = name;
  g.next_id_ = next_id_;
  std::map<const Value*, Value*> map;
  for (const Value* v : inputs_) map[v] = g.add_input(v->name(), v->type());
  for (const Value* v : constants_) map[v] = g.add_constant(v->name(), v->constant());
  for (const auto& n : nodes_) {
    std::vector<Value*> ins;
    for (Value* v : n->inputs_) ins.push_back(v ? map.at(v) : nullptr);
    std::vector<std::pair<std::string, ValueType>> outs;
    for (const Value* v : n->outputs_) outs.emplace_back(v->name(), v->type());
    Node* c = g.add_node_raw(*n->op_, std::move(ins), n->attrs_, outs);
    for (size_t i = 0; i < n->outputs_.size(); ++i) map[n->outputs_[i]] = c->outputs_[i];
  }
  for (const Value* v : outputs_) g.outputs_.push_back(map.at(v));
  return g;
}

}  // namespace kiln::ir
