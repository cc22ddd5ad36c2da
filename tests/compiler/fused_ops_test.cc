// fused_gemm and fused_conv2d (src/ops/defs/fused/fused.cc) against a float64 reference composed
// of kiln's unfused ops on f64 copies of the inputs: every activation, residual before/after the
// activation or absent, bias present or absent, transposes, odd sizes, non-contiguous inputs.
#include <gtest/gtest.h>

#include "kiln/kiln.h"
#include "support/testing.h"

namespace kiln {
namespace {

using testing::random_tensor;

const std::vector<std::string> kActs = {"none", "relu", "relu6", "sigmoid", "tanh",
                                        "silu", "gelu", "gelu_tanh", "hardswish"};

Tensor act_ref(const Tensor& y, const std::string& act) {
  if (act == "relu") return relu(y);
  if (act == "relu6") return clip(y, Scalar(0.0), Scalar(6.0));
  if (act == "sigmoid") return sigmoid(y);
  if (act == "tanh") return tanh(y);
  if (act == "silu") return silu(y);
  if (act == "gelu") return gelu(y, "none");
  if (act == "gelu_tanh") return gelu(y, "tanh");
  if (act == "hardswish") return hardswish(y);
  return y;
}

Tensor f64(const Tensor& t) { return t.defined() ? t.to(DType::f64) : t; }

// act(y + bias (+ res)) (+ res) in f64; bias broadcast by `bias_shape`.
Tensor epilogue_ref(Tensor y, const Tensor& bias, const Shape& bias_shape, const Tensor& res, bool before,
                    const std::string& act) {
  if (bias.defined()) y = add(y, f64(bias).reshape(bias_shape));
  if (res.defined() && before) y = add(y, f64(res));
  y = act_ref(y, act);
  if (res.defined() && !before) y = add(y, f64(res));
  return y;
}

Tensor fused_gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& res, double alpha, bool ta,
                  bool tb, const std::string& act, bool before) {
  return dispatch1(op("fused_gemm"), {a, b, bias, res},
                   {{"alpha", alpha}, {"trans_a", ta}, {"trans_b", tb}, {"activation", act},
                    {"residual_before_activation", before}});
}

TEST(FusedGemm, MatchesFloat64ReferenceForEveryEpilogue) {
  const int64_t m = 37, n = 29, k = 53;
  int seed = 0;
  for (DType dt : {DType::f32, DType::f64}) {
    testing::Tol tol = dt == DType::f32 ? testing::Tol{2e-5, 2e-4} : testing::Tol{1e-12, 1e-12};
    for (const auto& act : kActs)
      for (int mode = 0; mode < 3; ++mode)  // 0: no residual, 1: before, 2: after
        for (bool with_bias : {false, true})
          for (bool ta : {false, true}) {
            bool tb = !ta;
            SCOPED_TRACE(std::string(dtype_name(dt)) + " act=" + act + " mode=" + std::to_string(mode) +
                         " bias=" + std::to_string(with_bias) + " ta=" + std::to_string(ta));
            ++seed;
            Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, dt, 10 * seed, -1, 1);
            Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, dt, 10 * seed + 1, -1, 1);
            if (seed % 2) a = testing::noncontiguous(a);
            Tensor bias = with_bias ? random_tensor({n}, dt, 10 * seed + 2) : Tensor();
            Tensor res = mode ? random_tensor({m, n}, dt, 10 * seed + 3) : Tensor();
            Tensor got = fused_gemm(a, b, bias, res, 0.75, ta, tb, act, mode == 1);
            Tensor want = epilogue_ref(gemm(f64(a), f64(b), {}, 0.75, 0.0, ta, tb), bias, {1, n}, res, mode == 1, act);
            EXPECT_EQ(got.dtype(), dt);
            EXPECT_TRUE(testing::all_close(got, want, tol));
          }
  }
}

TEST(FusedGemm, RowBiasShapeAndEmptyK) {
  Tensor a = random_tensor({3, 0}, DType::f32, 1), b = random_tensor({0, 4}, DType::f32, 2);
  Tensor bias = random_tensor({1, 4}, DType::f32, 3);
  Tensor got = fused_gemm(a, b, bias, {}, 1.0, false, false, "relu", false);
  EXPECT_TRUE(testing::all_close(got, relu(bias.to(DType::f64).broadcast_to({3, 4}))));
}

TEST(FusedGemm, RejectsBadEpilogues) {
  Tensor a = random_tensor({3, 5}, DType::f32, 1), b = random_tensor({5, 4}, DType::f32, 2);
  EXPECT_KILN_ERROR(fused_gemm(a, b, {}, {}, 1.0, false, false, "swish", false), "fused_gemm", "unknown activation 'swish'");
  EXPECT_KILN_ERROR(fused_gemm(a, b, random_tensor({3}, DType::f32, 3), {}, 1.0, false, false, "none", false),
                    "bias of shape [3] must be [4]");
  EXPECT_KILN_ERROR(fused_gemm(a, b, {}, random_tensor({3, 1}, DType::f32, 4), 1.0, false, false, "none", false),
                    "residual of shape [3, 1] must have the output's shape [3, 4]");
  EXPECT_KILN_ERROR(fused_gemm(a, random_tensor({4, 4}, DType::f32, 5), {}, {}, 1.0, false, false, "none", false),
                    "inner dimensions differ");
}

TEST(FusedConv2d, MatchesFloat64ReferenceForEveryEpilogue) {
  int seed = 100;
  for (DType dt : {DType::f32, DType::f64}) {
    testing::Tol tol = dt == DType::f32 ? testing::Tol{2e-5, 2e-4} : testing::Tol{1e-12, 1e-12};
    for (const auto& act : kActs)
      for (int mode = 0; mode < 3; ++mode)
        for (int64_t groups : {1, 2, 4}) {  // 4: depthwise (the direct kernel, epilogue per plane)
          SCOPED_TRACE(std::string(dtype_name(dt)) + " act=" + act + " mode=" + std::to_string(mode) +
                       " groups=" + std::to_string(groups));
          ++seed;
          Conv2dOptions o;
          o.stride = {2, 1};
          o.padding = {1, 0, 2, 1};
          o.groups = groups;
          Tensor x = random_tensor({2, 4, 9, 7}, dt, seed, -1, 1);
          if (seed % 2) x = testing::noncontiguous(x);
          const int64_t k = groups == 4 ? 8 : 6;  // depthwise with a depth multiplier of 2
          Tensor w = random_tensor({k, 4 / groups, 3, 2}, dt, seed + 1000, -1, 1);
          Tensor bias = seed % 3 ? random_tensor({k}, dt, seed + 2000) : Tensor();
          Tensor ref_conv = conv2d(f64(x), f64(w), f64(bias), o);
          Tensor res = mode ? random_tensor(ref_conv.shape(), dt, seed + 3000) : Tensor();
          Tensor got = dispatch1(op("fused_conv2d"), {x, w, bias, res},
                                 {{"stride", o.stride}, {"padding", o.padding}, {"groups", groups},
                                  {"activation", act}, {"residual_before_activation", mode == 1}});
          Tensor want = epilogue_ref(ref_conv, {}, {}, res, mode == 1, act);
          EXPECT_TRUE(testing::all_close(got, want, tol));
        }
  }
}

TEST(FusedConv2d, RejectsBadEpilogues) {
  Tensor x = random_tensor({1, 2, 5, 5}, DType::f32, 1), w = random_tensor({3, 2, 3, 3}, DType::f32, 2);
  auto call = [&](const Tensor& res, const std::string& act) {
    return dispatch1(op("fused_conv2d"), {x, w, Tensor(), res}, {{"activation", act}});
  };
  EXPECT_KILN_ERROR(call({}, "leaky"), "fused_conv2d", "unknown activation 'leaky'");
  EXPECT_KILN_ERROR(call(random_tensor({1, 3, 5, 5}, DType::f32, 3), "relu"),
                    "residual of shape [1, 3, 5, 5] must have the output's shape [1, 3, 3, 3]");
}

}  // namespace
}  // namespace kiln
