// gradcheck of the vjp rules of the ops added for ONNX import (trigonometric and hyperbolic
// functions, ONNX activations, cumprod, conv_transpose2d, gather_nd, scatter_nd) against float64
// finite differences, on random non-zero inputs with odd shapes and non-contiguous views;
// gradgradcheck where the rule is smooth (rules are kiln ops, so they differentiate again).
#include "support/testing.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using autograd::gradgradcheck;
using testing::noncontiguous;
using testing::random_tensor;

struct Case {
  std::string name;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  std::vector<Tensor> inputs;
  bool second_order = false;
};

Tensor rt(const Shape& s, uint64_t seed, double lo = -2, double hi = 2) { return random_tensor(s, DType::f64, seed, lo, hi); }
Tensor nc(const Shape& s, uint64_t seed, double lo = -2, double hi = 2) { return noncontiguous(rt(s, seed, lo, hi)); }

std::vector<Case> cases() {
  std::vector<Case> c;
  auto un = [&](const std::string& name, Tensor (*op)(const Tensor&, SourceLoc), Tensor in, bool so = true) {
    c.push_back({name, [op](const std::vector<Tensor>& x) { return op(x[0], KILN_HERE); }, {std::move(in)}, so});
  };
  // trigonometric and hyperbolic (inside each domain, away from the poles)
  un("tan", tan, nc({3, 5}, 1, -1.2, 1.2));
  un("asin", asin, nc({3, 5}, 2, -0.9, 0.9));
  un("acos", acos, nc({3, 5}, 3, -0.9, 0.9));
  un("atan", atan, nc({3, 5}, 4));
  un("sinh", sinh, nc({3, 5}, 5));
  un("cosh", cosh, nc({3, 5}, 6));
  un("asinh", asinh, nc({3, 5}, 7));
  un("acosh", acosh, nc({3, 5}, 8, 1.1, 3.0));
  un("atanh", atanh, nc({3, 5}, 9, -0.9, 0.9));
  // activations
  un("softsign", softsign, nc({3, 5}, 10), false);  // |x| has a kink at 0; inputs avoid it
  un("mish", mish, nc({3, 5}, 11));
  c.push_back({"selu", [](auto& x) { return selu(x[0]); }, {nc({3, 5}, 12)}});
  c.push_back({"selu_attrs", [](auto& x) { return selu(x[0], 0.7, 1.9); }, {nc({3, 5}, 13)}});
  c.push_back({"celu", [](auto& x) { return celu(x[0], 0.6); }, {nc({3, 5}, 14)}});
  c.push_back({"celu_negative_alpha", [](auto& x) { return celu(x[0], -1.3); }, {nc({3, 5}, 15)}});
  c.push_back({"thresholded_relu", [](auto& x) { return thresholded_relu(x[0], 0.3); }, {nc({3, 5}, 16)}});
  // cumprod: random lines (also second order), and lines with one or two zeros (first, middle,
  // last; Note [Cumprod gradient with zeros]: first order only) in every exclusive/reverse combination.
  Tensor zeros_in = from_vector<double>({0.7, 0, 1.3, -0.9, 1.1, 0.6, -1.2, 0.8, 0, 1.4, 0, -0.5, 0.9, 1.6, -0.7, 0},
                                        Shape{4, 4});
  for (bool exclusive : {false, true}) {
    for (bool reverse : {false, true}) {
      const std::string tag = std::string(exclusive ? "_excl" : "") + (reverse ? "_rev" : "");
      c.push_back({"cumprod" + tag, [=](auto& x) { return cumprod(x[0], 1, exclusive, reverse); }, {nc({3, 5}, 20, 0.5, 1.5)}, true});
      c.push_back({"cumprod_axis0" + tag, [=](auto& x) { return cumprod(x[0], 0, exclusive, reverse); }, {nc({4, 3}, 21)}});
      c.push_back({"cumprod_zeros" + tag, [=](auto& x) { return cumprod(x[0], 1, exclusive, reverse); }, {zeros_in}});
      c.push_back({"cumprod_zeros_cols" + tag, [=](auto& x) { return cumprod(x[0], 0, exclusive, reverse); },
                   {noncontiguous(zeros_in)}});
    }
  }
  // conv_transpose2d: strides, asymmetric padding, output_padding, dilation, groups, bias.
  ConvTranspose2dOptions ct;
  ct.stride = {2, 1};
  ct.padding = {1, 0, 0, 1};
  ct.output_padding = {1, 0};
  ct.dilation = {1, 2};
  ct.groups = 2;
  c.push_back({"conv_transpose2d", [ct](auto& x) { return conv_transpose2d(x[0], x[1], x[2], ct); },
               {nc({2, 4, 3, 4}, 23), rt({4, 3, 2, 3}, 24), rt({6}, 25)}, true});
  c.push_back({"conv_transpose2d_plain", [](auto& x) { return conv_transpose2d(x[0], x[1]); },
               {rt({1, 3, 3, 2}, 26), nc({3, 2, 3, 3}, 27)}});
  ConvTranspose2dOptions cs;
  cs.stride = {3, 2};
  cs.padding = {1, 2, 1, 2};
  c.push_back({"conv_transpose2d_pads", [cs](auto& x) { return conv_transpose2d(x[0], x[1], {}, cs); },
               {rt({1, 1, 3, 3}, 28), rt({1, 2, 3, 3}, 29)}});
  // gather_nd / scatter_nd (each one's rule uses the other).
  Tensor nd = from_vector<int64_t>({0, 1, -1, 2, 0, 3}, Shape{3, 2});
  c.push_back({"gather_nd", [nd](auto& x) { return gather_nd(x[0], nd); }, {nc({3, 4, 5}, 30)}, true});
  Tensor nb = from_vector<int64_t>({1, 0, 2}, Shape{3, 1});
  c.push_back({"gather_nd_batch_dims", [nb](auto& x) { return gather_nd(x[0], nb, 1); }, {nc({3, 4, 2}, 31)}, true});
  Tensor nb2 = from_vector<int64_t>({1, 0, 2, -1, 0, 1, 1, 1, 0, 2, 1, 0}, Shape{2, 3, 2, 1});
  c.push_back({"gather_nd_two_batch_dims", [nb2](auto& x) { return gather_nd(x[0], nb2, 2); }, {nc({2, 3, 3, 2}, 32)}});
  Tensor unique_rows = from_vector<int64_t>({2, -4}, Shape{2, 1});
  c.push_back({"scatter_nd_none", [unique_rows](auto& x) { return scatter_nd(x[0], unique_rows, x[1]); },
               {nc({4, 3}, 33), rt({2, 3}, 34)}, true});
  Tensor repeated = from_vector<int64_t>({1, 2, 1, 2, 0, 0}, Shape{3, 2});
  c.push_back({"scatter_nd_add_repeated", [repeated](auto& x) { return scatter_nd(x[0], repeated, x[1], "add"); },
               {nc({3, 4}, 35), rt({3}, 36)}, true});
  c.push_back({"cumprod_0d", [](auto& x) { return cumprod(x[0], 0); }, {rt({}, 22)}});
  return c;
}

class GradcheckOnnxOps : public ::testing::TestWithParam<size_t> {};

TEST_P(GradcheckOnnxOps, MatchesFiniteDifferences) {
  auto all = cases();
  const Case& k = all[GetParam()];
  auto f = [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{k.f(x)}; };
  auto r = gradcheck(f, k.inputs);
  EXPECT_TRUE(r) << k.name << ": " << r.message;
  if (k.second_order) {
    auto r2 = gradgradcheck(f, k.inputs);
    EXPECT_TRUE(r2) << k.name << " (second order): " << r2.message;
  }
}

INSTANTIATE_TEST_SUITE_P(OnnxOps, GradcheckOnnxOps, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) { return cases()[i.param].name; });

}  // namespace
}  // namespace kiln
