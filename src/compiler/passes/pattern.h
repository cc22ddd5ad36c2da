// Small matching helpers for the passes that recognize decomposed formulas (layer_norm_fusion,
// gelu_fusion, attention_fusion): scalar constants with a tolerance, operand lookup in commutative
// nodes, products flattened through chains of mul / div-by-constant, and the check that a matched
// set of nodes is private to the pattern (Note [Private intermediates]).
#pragma once

#include <cmath>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "compiler/passes/common.h"

namespace kiln::compiler::passes {

using Uses = std::map<const ir::Value*, std::vector<ir::Use>>;

// The value of a constant with one element (any shape of ones), or nullopt.
inline std::optional<double> scalar_const(const ir::Value* v) {
  if (!is_const(v) || v->constant().numel() != 1) return std::nullopt;
  return const_values(v)[0];
}

// |got - want| <= rel * |want|: constants written with fewer digits (1.4142, 0.7071) still match.
inline bool near(double got, double want, double rel = 1e-4) { return std::abs(got - want) <= rel * std::abs(want); }

// v's producer when it is an `op` node with one output, else nullptr.
inline ir::Node* producer_op(const ir::Value* v, const char* op) {
  ir::Node* p = v ? v->producer() : nullptr;
  return p && p->op().name() == op && p->outputs().size() == 1 ? p : nullptr;
}

// The only node reading v (v is no graph output), or nullptr.
inline ir::Node* sole_reader(const ir::Graph& g, const Uses& uses, const ir::Value* v) {
  auto it = uses.find(v);
  if (it == uses.end() || it->second.size() != 1 || !it->second[0].node || is_graph_output(g, v)) return nullptr;
  return it->second[0].node;
}

// For a binary node holding `v` as one operand, the other operand (nullptr if v is not one).
inline ir::Value* other_operand(const ir::Node* n, const ir::Value* v) {
  if (n->inputs().size() != 2) return nullptr;
  if (n->inputs()[0] == v) return n->inputs()[1];
  if (n->inputs()[1] == v) return n->inputs()[0];
  return nullptr;
}

// For a commutative binary node with one scalar-constant operand: that constant's value, the
// other operand in *x.
inline std::optional<double> scalar_operand(const ir::Node* n, ir::Value** x) {
  if (n->inputs().size() != 2) return std::nullopt;
  for (int i = 0; i < 2; ++i)
    if (auto c = scalar_const(n->inputs()[static_cast<size_t>(i)])) {
      if (is_const(n->inputs()[static_cast<size_t>(1 - i)])) return std::nullopt;
      *x = n->inputs()[static_cast<size_t>(1 - i)];
      return c;
    }
  return std::nullopt;
}

// A product flattened through mul nodes and divisions by scalar constants: value = factor *
// prod(leaves). Only nodes whose output has exactly one reader are expanded (the root always),
// so every node in `nodes` belongs to this product alone.
struct Product {
  double factor = 1.0;
  std::vector<ir::Value*> leaves;  // non-constant (or non-scalar) factors, in visiting order
  std::vector<ir::Node*> nodes;    // the mul / div nodes expanded, root first
};

inline void flatten_into(const ir::Graph& g, const Uses& uses, ir::Value* v, bool root, Product& p, int depth) {
  ir::Node* n = v->producer();
  bool expand = n && depth < 16 && n->outputs().size() == 1 && (root || sole_reader(g, uses, v));
  if (expand && n->op().name() == "mul" && n->inputs().size() == 2) {
    p.nodes.push_back(n);
    for (ir::Value* in : n->inputs()) flatten_into(g, uses, in, false, p, depth + 1);
    return;
  }
  if (expand && n->op().name() == "div" && n->inputs().size() == 2) {
    if (auto c = scalar_const(n->inputs()[1]); c && *c != 0.0) {
      p.nodes.push_back(n);
      p.factor /= *c;
      flatten_into(g, uses, n->inputs()[0], false, p, depth + 1);
      return;
    }
  }
  if (auto c = scalar_const(v)) {
    p.factor *= *c;
    return;
  }
  p.leaves.push_back(v);
}

// The product rooted at v (v's producer is expanded whatever its readers).
inline Product flatten_product(const ir::Graph& g, const Uses& uses, ir::Value* v) {
  Product p;
  flatten_into(g, uses, v, true, p, 0);
  return p;
}

// Note [Private intermediates]
// A pattern may replace its nodes only when nothing else sees their results: every output of
// every matched node except the root's is read only by matched nodes and is no graph output.
// Then the fused node computes all the graph still needs, and the matched nodes can be erased.
inline bool private_to(const ir::Graph& g, const Uses& uses, const std::set<ir::Node*>& nodes, const ir::Node* root) {
  for (const ir::Node* n : nodes) {
    if (n == root) continue;
    for (const ir::Value* v : n->outputs()) {
      if (is_graph_output(g, v)) return false;
      auto it = uses.find(v);
      if (it == uses.end()) continue;
      for (const ir::Use& u : it->second)
        if (!u.node || !nodes.count(u.node)) return false;
    }
  }
  return true;
}

// Replaces root's output by `fused`'s (keeping the name) and erases the matched nodes.
inline void replace_pattern(ir::Graph& g, ir::Node* root, ir::Node* fused, const std::set<ir::Node*>& nodes) {
  ir::Value* out = root->output();
  std::string name = out->name();
  g.replace_all_uses(out, fused->output());
  // Consumers first: erase in reverse graph order.
  std::vector<ir::Node*> dead;
  for (ir::Node* n : g.nodes())
    if (nodes.count(n)) dead.push_back(n);
  std::reverse(dead.begin(), dead.end());
  g.erase_nodes(dead);
  g.rename(fused->output(), name);
}

}  // namespace kiln::compiler::passes
