// Building small CNN graphs in tests: constants with seeded random values in [-0.25, 0.25], padded
// ("same") convolutions, and elementwise nodes, shared by the layout and depth-first tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/ir.h"
#include "support/testing.h"

namespace kiln::testing {

struct CnnGraphBuilder {
  explicit CnnGraphBuilder(uint64_t first_seed = 500) : seed(first_seed) {}

  ir::Graph g;
  uint64_t seed;  // of the next constant

  ir::Value* cst(const std::string& n, const Shape& s) {
    return g.add_constant(n, random_tensor(s, DType::f32, seed++, -0.25, 0.25));
  }
  // A k x k convolution with bias, padding k / 2 on every side.
  ir::Value* conv(ir::Value* in, int64_t cout, int64_t k, int64_t stride, const std::string& n, int64_t groups = 1) {
    const int64_t cin = in->type().shape[1].size, p = k / 2;
    return g.add_node(op("conv2d"), {in, cst(n + "_w", {cout, cin / groups, k, k}), cst(n + "_b", {cout})},
                      {{"padding", std::vector<int64_t>{p, p, p, p}},
                       {"stride", std::vector<int64_t>{stride, stride}},
                       {"groups", groups}})
        ->output();
  }
  ir::Value* unary(const std::string& name, ir::Value* v) { return g.add_node(op(name), {v})->output(); }
  ir::Value* binary(const std::string& name, ir::Value* a, ir::Value* b) {
    return g.add_node(op(name), {a, b})->output();
  }
  ir::Value* relu(ir::Value* v) { return unary("relu", v); }
  ir::Value* add(ir::Value* a, ir::Value* b) { return binary("add", a, b); }
};

}  // namespace kiln::testing
