// gradcheck of every differentiable op's vjp rule against float64 finite differences, on random
// inputs (never zero) with odd shapes, broadcasting and non-contiguous views; gradgradcheck on a
// representative set (rules are written with kiln ops, so they differentiate again).
#include "support/testing.h"

namespace kiln {
namespace {

using autograd::gradcheck;
using autograd::gradgradcheck;
using testing::noncontiguous;
using testing::random_positive;
using testing::random_tensor;
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Case {
  std::string name;
  Fn f;
  std::vector<Tensor> inputs;
  bool second_order = false;
};

Tensor rt(const Shape& s, uint64_t seed) { return random_tensor(s, DType::f64, seed); }
Tensor nc(const Shape& s, uint64_t seed) { return noncontiguous(random_tensor(s, DType::f64, seed)); }
Tensor pos(const Shape& s, uint64_t seed) { return noncontiguous(random_positive(s, DType::f64, seed, 0.5, 2.0)); }

std::vector<Case> cases() {
  std::vector<Case> c;
  auto un = [&](const std::string& name, Tensor (*op)(const Tensor&, SourceLoc), Tensor in, bool so = false) {
    c.push_back({name, [op](const std::vector<Tensor>& x) { return op(x[0], KILN_HERE); }, {std::move(in)}, so});
  };
  // unary
  un("neg", neg, nc({3, 5}, 1));
  un("abs", abs, nc({3, 5}, 2));
  un("exp", exp, nc({3, 5}, 3), true);
  un("log", log, pos({3, 5}, 4), true);
  un("sqrt", sqrt, pos({3, 5}, 5), true);
  un("rsqrt", rsqrt, pos({3, 5}, 6));
  un("reciprocal", reciprocal, pos({3, 5}, 7));
  un("sin", sin, nc({3, 5}, 8), true);
  un("cos", cos, nc({3, 5}, 9));
  un("tanh", tanh, nc({3, 5}, 10), true);
  un("sigmoid", sigmoid, nc({3, 5}, 11), true);
  un("relu", relu, nc({3, 5}, 12));
  un("erf", erf, nc({3, 5}, 13));
  un("floor", floor, nc({7}, 14));
  un("sign", sign, nc({7}, 15));
  un("hardswish", hardswish, nc({3, 5}, 16));
  un("silu", silu, nc({3, 5}, 17), true);
  c.push_back({"leaky_relu", [](auto& x) { return leaky_relu(x[0], 0.2); }, {nc({3, 5}, 18)}});
  c.push_back({"elu", [](auto& x) { return elu(x[0], 0.7); }, {nc({3, 5}, 19)}});
  c.push_back({"hardsigmoid", [](auto& x) { return hardsigmoid(x[0], 0.3, 0.4); }, {nc({3, 5}, 20)}});
  c.push_back({"gelu", [](auto& x) { return gelu(x[0]); }, {nc({3, 5}, 21)}, true});
  c.push_back({"gelu_tanh", [](auto& x) { return gelu(x[0], "tanh"); }, {nc({3, 5}, 22)}});
  c.push_back({"softplus", [](auto& x) { return softplus(x[0], 2.0, 3.0); }, {nc({3, 5}, 23)}});
  c.push_back({"clip", [](auto& x) { return clip(x[0], -0.9, 1.1); }, {nc({4, 5}, 24)}});
  c.push_back({"clip_min", [](auto& x) { return clip(x[0], 0.3, std::nullopt); }, {nc({4, 5}, 25)}});
  c.push_back({"clone", [](auto& x) { return x[0].clone(); }, {nc({3, 4}, 26)}});
  // binary, with broadcasting and non-contiguous operands
  c.push_back({"add", [](auto& x) { return x[0] + x[1]; }, {nc({3, 1, 4}, 30), rt({5, 4}, 31)}});
  c.push_back({"sub", [](auto& x) { return x[0] - x[1]; }, {nc({5, 4}, 32), rt({4}, 33)}});
  c.push_back({"mul", [](auto& x) { return x[0] * x[1]; }, {nc({3, 1, 4}, 34), nc({5, 1}, 35)}, true});
  c.push_back({"div", [](auto& x) { return x[0] / x[1]; }, {nc({2, 3}, 36), pos({3}, 37)}, true});
  c.push_back({"pow", [](auto& x) { return pow(x[0], x[1]); }, {pos({2, 3}, 38), nc({2, 1}, 39)}, true});
  c.push_back({"maximum", [](auto& x) { return maximum(x[0], x[1]); }, {nc({3, 4}, 40), rt({4}, 41)}});
  c.push_back({"minimum", [](auto& x) { return minimum(x[0], x[1]); }, {nc({3, 4}, 42), rt({3, 1}, 43)}});
  c.push_back({"scalar_mul", [](auto& x) { return x[0] * 2.5 + 1.0; }, {nc({3}, 44)}});
  Tensor cond = random_tensor({3, 4}, DType::boolean, 45);
  c.push_back({"where", [cond](auto& x) { return where(cond, x[0], x[1]); }, {nc({3, 4}, 46), rt({4}, 47)}});
  // reductions
  c.push_back({"sum_all", [](auto& x) { return x[0].sum(); }, {nc({3, 4}, 50)}});
  c.push_back({"sum_axes", [](auto& x) { return x[0].sum({0, 2}); }, {nc({2, 3, 4}, 51)}});
  c.push_back({"sum_keepdim", [](auto& x) { return x[0].sum({-1}, true); }, {nc({2, 3, 4}, 52)}});
  c.push_back({"mean", [](auto& x) { return x[0].mean({1}); }, {nc({2, 3, 4}, 53)}});
  c.push_back({"prod", [](auto& x) { return x[0].prod({1}, true); }, {nc({2, 3, 2}, 54)}, true});
  c.push_back({"max", [](auto& x) { return x[0].max({1}); }, {nc({3, 5}, 55)}});
  c.push_back({"min_all", [](auto& x) { return x[0].min(); }, {nc({3, 5}, 56)}});
  c.push_back({"var", [](auto& x) { return var(x[0], {1}); }, {nc({3, 5}, 57)}, true});
  c.push_back({"std_dev", [](auto& x) { return std_dev(x[0], {0}, 0, true); }, {nc({4, 3}, 58)}});
  c.push_back({"logsumexp", [](auto& x) { return logsumexp(x[0], {1}); }, {nc({3, 5}, 59)}, true});
  c.push_back({"norm", [](auto& x) { return norm(x[0], {1}); }, {nc({3, 5}, 60)}});
  // scan
  c.push_back({"cumsum", [](auto& x) { return cumsum(x[0], 1); }, {nc({3, 5}, 61)}});
  c.push_back({"cumsum_excl_rev", [](auto& x) { return cumsum(x[0], 0, true, true); }, {nc({4, 3}, 62)}});
  // softmax and norms
  c.push_back({"softmax", [](auto& x) { return softmax(x[0], 1); }, {nc({3, 5}, 63)}, true});
  c.push_back({"log_softmax", [](auto& x) { return log_softmax(x[0], 0); }, {nc({4, 3}, 64)}, true});
  c.push_back({"layer_norm", [](auto& x) { return layer_norm(x[0], 1, x[1], x[2]); },
               {nc({2, 3, 4}, 65), rt({3, 4}, 66), rt({3, 4}, 67)}, true});
  c.push_back({"layer_norm_plain", [](auto& x) { return layer_norm(x[0], -1); }, {nc({3, 5}, 68)}});
  c.push_back({"rms_norm", [](auto& x) { return rms_norm(x[0], 1, x[1]); }, {nc({2, 3, 4}, 74), rt({3, 4}, 75)}, true});
  c.push_back({"rms_norm_plain", [](auto& x) { return rms_norm(x[0], -1, {}, 0.1); }, {nc({3, 5}, 76)}});
  c.push_back({"rotary_embedding", [](auto& x) { return rotary_embedding(x[0], x[1], x[2]); },
               {nc({2, 3, 6}, 77), rt({3, 6}, 78), rt({3, 6}, 79)}, true});
  c.push_back({"rotary_interleaved", [](auto& x) { return rotary_embedding(x[0], x[1], x[2], true); },
               {nc({3, 4}, 177), rt({4}, 178), rt({3, 4}, 179)}});
  c.push_back({"batch_norm", [](auto& x) { return batch_norm(x[0], x[1], x[2], x[3], x[4]); },
               {nc({2, 3, 2, 2}, 69), rt({3}, 70), random_positive({3}, DType::f64, 71), rt({3}, 72), rt({3}, 73)}});
  // views
  c.push_back({"reshape_nc", [](auto& x) { return x[0].reshape({4, 3}); }, {nc({2, 6}, 80)}});
  c.push_back({"permute", [](auto& x) { return x[0].permute({2, 0, 1}); }, {nc({2, 3, 4}, 81)}});
  c.push_back({"transpose", [](auto& x) { return x[0].transpose(0, 1) * x[0].transpose(0, 1); }, {nc({3, 4}, 82)}});
  c.push_back({"slice_step", [](auto& x) { return x[0].slice(1, 1, 7, 2); }, {nc({3, 8}, 83)}});
  c.push_back({"slice_neg", [](auto& x) { return slice(x[0], {-1, 4}, {-100, 0}, {0, 1}, {-2, -3}); }, {nc({5, 6}, 84)}});
  c.push_back({"select", [](auto& x) { return x[0].select(1, -2); }, {nc({3, 4}, 85)}});
  c.push_back({"expand", [](auto& x) { return x[0].expand({2, 3, 4}); }, {nc({3, 1}, 86)}});
  c.push_back({"squeeze", [](auto& x) { return x[0].squeeze(); }, {nc({3, 1, 2}, 87)}});
  c.push_back({"unsqueeze", [](auto& x) { return x[0].unsqueeze(1); }, {nc({3, 2}, 88)}});
  // linalg
  c.push_back({"matmul", [](auto& x) { return x[0].matmul(x[1]); }, {nc({3, 4}, 90), nc({4, 5}, 91)}, true});
  c.push_back({"matmul_batch_bcast", [](auto& x) { return x[0].matmul(x[1]); }, {nc({2, 1, 3, 4}, 92), rt({3, 4, 2}, 93)}});
  c.push_back({"matmul_vec_mat", [](auto& x) { return x[0].matmul(x[1]); }, {rt({4}, 94), nc({2, 4, 3}, 95)}});
  c.push_back({"matmul_mat_vec", [](auto& x) { return x[0].matmul(x[1]); }, {nc({3, 4}, 96), rt({4}, 97)}});
  c.push_back({"matmul_vec_vec", [](auto& x) { return x[0].matmul(x[1]); }, {rt({4}, 98), rt({4}, 99)}});
  c.push_back({"gemm", [](auto& x) { return gemm(x[0], x[1], x[2], 0.7, 1.3, true, false); },
               {nc({4, 3}, 100), rt({4, 2}, 101), rt({2}, 102)}});
  c.push_back({"gemm_tb", [](auto& x) { return gemm(x[0], x[1], x[2], 1.0, 0.5, false, true); },
               {rt({3, 4}, 103), nc({2, 4}, 104), rt({3, 1}, 105)}});
  // convolution and pooling
  Conv2dOptions co;
  co.stride = {2, 1};
  co.padding = {1, 0, 2, 1};
  co.dilation = {1, 2};
  co.groups = 2;
  c.push_back({"conv2d", [co](auto& x) { return conv2d(x[0], x[1], x[2], co); },
               {nc({2, 4, 5, 6}, 110), rt({4, 2, 2, 3}, 111), rt({4}, 112)}, true});
  c.push_back({"conv2d_plain", [](auto& x) { return conv2d(x[0], x[1]); }, {rt({1, 3, 4, 4}, 113), nc({2, 3, 3, 3}, 114)}});
  Pool2dOptions mp;
  mp.kernel = {2, 3};
  mp.stride = {2, 2};
  mp.padding = {1, 1, 0, 1};
  mp.dilation = {1, 1};
  c.push_back({"max_pool2d", [mp](auto& x) { return max_pool2d(x[0], mp); }, {nc({2, 2, 5, 6}, 115)}});
  Pool2dOptions mpd = mp;
  mpd.dilation = {2, 1};
  mpd.padding = {0, 0, 0, 0};
  c.push_back({"max_pool2d_dilated", [mpd](auto& x) { return max_pool2d(x[0], mpd); }, {rt({1, 2, 6, 5}, 116)}});
  Pool2dOptions ap;
  ap.kernel = {3, 2};
  ap.stride = {2, 1};
  ap.padding = {1, 0, 1, 1};
  ap.ceil_mode = true;
  ap.count_include_pad = true;
  c.push_back({"avg_pool2d", [ap](auto& x) { return avg_pool2d(x[0], ap); }, {nc({2, 2, 5, 4}, 117)}, true});
  Pool2dOptions ap2 = ap;
  ap2.count_include_pad = false;
  c.push_back({"avg_pool2d_excl", [ap2](auto& x) { return avg_pool2d(x[0], ap2); }, {rt({1, 3, 4, 5}, 118)}});
  c.push_back({"global_avg_pool", [](auto& x) { return global_avg_pool(x[0]); }, {nc({2, 3, 2, 3}, 119)}});
  c.push_back({"lrn", [](auto& x) { return lrn(x[0], 3, 0.5, 0.75, 1.5); }, {nc({2, 5, 2, 2}, 120)}, true});
  // indexing
  Tensor idx = from_vector<int64_t>({2, 0, 2, 1}, Shape{2, 2});
  c.push_back({"gather", [idx](auto& x) { return gather(x[0], idx, 1); }, {nc({2, 3, 2}, 130)}});
  Tensor ge = from_vector<int64_t>({0, 2, 1, 1, 0, 0}, Shape{2, 3});
  c.push_back({"gather_elements", [ge](auto& x) { return gather_elements(x[0], ge, 1); }, {nc({2, 4}, 131)}});
  c.push_back({"index_select", [](auto& x) { return index_select(x[0], 0, from_vector<int64_t>({3, 0, 3})); },
               {nc({4, 2}, 132)}});
  Tensor si = from_vector<int64_t>({1, 0, 2, 3}, Shape{2, 2});
  c.push_back({"scatter", [si](auto& x) { return scatter(x[0], 1, si, x[1]); }, {nc({2, 4}, 133), rt({2, 3}, 134)}});
  Tensor sa = from_vector<int64_t>({1, 1, 2, 0}, Shape{2, 2});
  c.push_back({"scatter_add", [sa](auto& x) { return scatter_add(x[0], 1, sa, x[1]); }, {nc({2, 3}, 135), rt({2, 2}, 136)}});
  c.push_back({"topk", [](auto& x) { return topk(x[0], 2, 1).first; }, {nc({3, 5}, 137)}});
  // joins and shape-making ops
  c.push_back({"concat", [](auto& x) { return concat({x[0], x[1], x[2]}, 1); }, {nc({2, 1}, 140), rt({2, 3}, 141), nc({2, 2}, 142)}});
  c.push_back({"stack", [](auto& x) { return stack({x[0], x[1]}, 2); }, {nc({2, 3}, 143), rt({2, 3}, 144)}});
  c.push_back({"split", [](auto& x) { auto p = split(x[0], {1, 3}, 1); return p[0] * 2.0 + p[1].sum({1}, true); }, {nc({2, 4}, 145)}});
  c.push_back({"chunk_unused_piece", [](auto& x) { return chunk(x[0], 3, 0)[1]; }, {nc({5, 2}, 146)}});
  c.push_back({"tile", [](auto& x) { return tile(x[0], {2, 1, 3}); }, {nc({2, 3}, 147)}});
  c.push_back({"pad", [](auto& x) { return pad(x[0], {1, -1, 2, 1}, "constant", 0.5); }, {nc({3, 4}, 148)}});
  c.push_back({"pad_reflect", [](auto& x) { return pad(x[0], {2, 0, 1, 3}, "reflect"); }, {nc({4, 5}, 151)}});
  c.push_back({"pad_edge", [](auto& x) { return pad(x[0], {1, -1, 3, 2}, "edge"); }, {nc({3, 4}, 152)}});
  c.push_back({"trilu", [](auto& x) { return trilu(x[0], 1, false); }, {nc({2, 3, 4}, 149)}});
  c.push_back({"cast_to_f32_and_back", [](auto& x) { return x[0].to(DType::f32).to(DType::f64) * 1.0; }, {rt({3}, 150)}});
  return c;
}

class GradcheckOps : public ::testing::TestWithParam<size_t> {};

TEST_P(GradcheckOps, MatchesFiniteDifferences) {
  auto all = cases();
  const Case& k = all[GetParam()];
  auto f = [&](const std::vector<Tensor>& x) { return std::vector<Tensor>{k.f(x)}; };
  autograd::GradcheckOptions opt;
  if (k.name == "cast_to_f32_and_back") {  // the f32 round trip needs a step well above f32 rounding
    opt.eps = 1e-3;
    opt.atol = 1e-3;
  }
  auto r = gradcheck(f, k.inputs, opt);
  EXPECT_TRUE(r) << k.name << ": " << r.message;
  if (k.second_order) {
    auto r2 = gradgradcheck(f, k.inputs);
    EXPECT_TRUE(r2) << k.name << " (second order): " << r2.message;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, GradcheckOps, ::testing::Range<size_t>(0, cases().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) { return cases()[i.param].name; });

TEST(Gradcheck, ReportsTheWorstElement) {
  // A deliberately wrong "function": its output depends on x but a detach() hides it.
  auto f = [](const std::vector<Tensor>& x) { return std::vector<Tensor>{x[0] * 2.0 + x[0].detach() * x[0].detach()}; };
  auto r = gradcheck(f, {from_vector<double>({1.0, 3.0})});
  ASSERT_FALSE(r);
  EXPECT_NE(r.message.find("input 0 [1]"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("analytic 2"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("numeric 8"), std::string::npos) << r.message;
}

TEST(Gradcheck, RandomCompositeFunction) {
  auto f = [](const std::vector<Tensor>& x) {
    Tensor h = (x[0].matmul(x[1]) + x[2]).tanh();
    return std::vector<Tensor>{softmax(h, 1).log() * h.sigmoid() + h.sum({0}, true).exp() / 5.0};
  };
  std::vector<Tensor> in = {nc({3, 4}, 160), rt({4, 2}, 161), rt({2}, 162)};
  auto r = gradcheck(f, in);
  EXPECT_TRUE(r) << r.message;
  auto r2 = gradgradcheck(f, in);
  EXPECT_TRUE(r2) << r2.message;
}

}  // namespace
}  // namespace kiln
