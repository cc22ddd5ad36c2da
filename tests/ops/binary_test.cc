// Binary ops against the float64 reference: every dtype each op claims, odd sizes, broadcasting,
// non-contiguous views, type promotion, and error cases.
#include <bit>
#include <cmath>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::noncontiguous;
using testing::random_tensor;

struct BinaryCase {
  const char* op;
  DTypeSet dtypes;
};

Tensor call(const std::string& name, const Tensor& a, const Tensor& b) {
  return dispatch1(kiln::op(name), {a, b});
}

const BinaryCase kCases[] = {
    {"add", DTypeSet::all()},          {"sub", DTypeSet::numeric()},     {"mul", DTypeSet::all()},
    {"div", DTypeSet::numeric()},      {"pow", DTypeSet::floating()},    {"mod", DTypeSet::numeric()},
    {"maximum", DTypeSet::all()},      {"minimum", DTypeSet::all()},     {"eq", DTypeSet::all()},
    {"ne", DTypeSet::all()},           {"lt", DTypeSet::all()},          {"le", DTypeSet::all()},
    {"gt", DTypeSet::all()},           {"ge", DTypeSet::all()},          {"logical_and", DTypeSet::all()},
    {"logical_or", DTypeSet::all()},   {"logical_xor", DTypeSet::all()},
};

// Integer ops whose result can overflow the dtype are checked with small inputs.
std::pair<double, double> range_for(const std::string& op, DType t) {
  if (t == DType::u8) return {1, 15};
  if (op == "pow" && !is_floating(t)) return {1, 3};
  if (op == "pow") return {0.5, 2.0};
  return {-9, 9};
}

TEST(Binary, MatchesReferenceOnEveryDTypeAndSize) {
  for (const auto& c : kCases) {
    for (DType t : testing::kAllDTypes) {
      if (!c.dtypes.contains(t)) continue;
      auto [lo, hi] = range_for(c.op, t);
      for (int64_t n : testing::kOddSizes) {
        // u8 subtraction wraps around; keep a > b so the float64 reference agrees.
        bool u8_sub = t == DType::u8 && std::string(c.op) == "sub";
        Tensor a = random_tensor({n}, t, 1 + static_cast<uint64_t>(n), u8_sub ? 10 : lo, hi);
        Tensor b = random_tensor({n}, t, 99 + static_cast<uint64_t>(n), lo, u8_sub ? 9 : hi);
        Tensor got = call(c.op, a, b);
        Tensor want = ref::binary(c.op, a, b);
        EXPECT_TRUE(all_close(got, want)) << c.op << " " << dtype_name(t) << " n=" << n;
      }
    }
  }
}

TEST(Binary, BroadcastingAndNonContiguous) {
  for (const auto& c : kCases) {
    for (DType t : {DType::f32, DType::f64, DType::i32, DType::f16}) {
      if (!c.dtypes.contains(t)) continue;
      auto [lo, hi] = range_for(c.op, t);
      const std::vector<std::pair<Shape, Shape>> shapes = {
          {{7, 33}, {33}}, {{7, 1}, {1, 33}}, {{3, 1, 5}, {4, 1}}, {{}, {7, 3}}, {{1000}, {}}, {{2, 3, 4}, {2, 3, 4}},
          // runs long enough for f32's vector kernels, one value broadcast on either side
          {{3, 1}, {3, 100}}, {{3, 100}, {3, 1}},
          // short rows against one repeated over them (Note [Short rows over a broadcast]): a
          // blocked activation and its per-channel scale, either side; rows of 64 and of 65 (the
          // general loop); enough tiles to split between threads
          {{2, 3, 5, 7, 16}, {2, 3, 1, 1, 16}}, {{2, 3, 1, 1, 16}, {2, 3, 5, 7, 16}}, {{3, 9, 64}, {3, 1, 64}},
          {{3, 1, 65}, {3, 9, 65}}, {{4, 600, 16}, {4, 1, 16}}};
      for (const auto& [sa, sb] : shapes) {
        Tensor a = random_tensor(sa, t, 5, lo, hi), b = random_tensor(sb, t, 6, lo, hi);
        Tensor want = ref::binary(c.op, a, b);
        EXPECT_TRUE(all_close(call(c.op, a, b), want)) << c.op << " " << shape_str(sa) << " " << shape_str(sb);
        EXPECT_TRUE(all_close(call(c.op, noncontiguous(a), noncontiguous(b)), want)) << c.op << " noncontiguous";
      }
      // Transposed operands.
      Tensor a = random_tensor({33, 7}, t, 7, lo, hi), b = random_tensor({7, 33}, t, 8, lo, hi);
      EXPECT_TRUE(all_close(call(c.op, a.t(), b), ref::binary(c.op, a.t(), b))) << c.op << " transposed";
      // Tiles of a transposed operand (Note [Transposed operands] in loops.h): [3, 37, 150] is 16 +
      // 16 + 5 rows by 128 + 22 columns, either side, against a full, broadcast or sliced other side.
      Tensor tr = random_tensor({3, 150, 37}, t, 9, lo, hi).permute({0, 2, 1});
      for (const Tensor& other : {random_tensor({3, 37, 150}, t, 10, lo, hi), random_tensor({37, 150}, t, 11, lo, hi),
                                  random_tensor({3, 37, 1}, t, 12, lo, hi), noncontiguous(random_tensor(
                                                                                {3, 37, 150}, t, 13, lo, hi))}) {
        EXPECT_TRUE(all_close(call(c.op, tr, other), ref::binary(c.op, tr, other))) << c.op << " tiles, left";
        EXPECT_TRUE(all_close(call(c.op, other, tr), ref::binary(c.op, other, tr))) << c.op << " tiles, right";
      }
    }
  }
}

// One image's channel-blocked activation against its per-channel scale goes in a band of rows a
// thread (Note [Short rows over a broadcast] in loops.h): 1, 2 and 3 threads, planes of 1155 rows
// (bands of 578 + 577, 385 x 3), one too small to split and planes of 1, either operand the tile,
// against the float64 reference.
TEST(Binary, OneBlockedImageAgainstItsScaleInBandsOfRows) {
  for (int threads : {1, 2, 3}) {
    set_num_threads(threads);
    for (const char* name : {"mul", "add", "sub"})
      for (const auto& [sa, sb] : std::vector<std::pair<Shape, Shape>>{{{1, 5, 33, 35, 16}, {1, 5, 1, 1, 16}},
                                                                       {{1, 5, 1, 1, 16}, {1, 5, 33, 35, 16}},
                                                                       {{1, 5, 9, 7, 16}, {1, 5, 1, 1, 16}},
                                                                       {{1, 3, 1, 1, 16}, {1, 3, 1, 1, 16}},
                                                                       {{1, 2, 1, 1, 16}, {1, 2, 1, 1, 16}}}) {
        Tensor a = random_tensor(sa, DType::f32, 11, -2, 2), b = random_tensor(sb, DType::f32, 12, -2, 2);
        EXPECT_TRUE(all_close(call(name, a, b), ref::binary(name, a, b)))
            << name << " " << shape_str(sa) << " " << shape_str(sb) << " threads " << threads;
      }
  }
  set_num_threads(available_cores());
}

TEST(Binary, TypePromotion) {
  Tensor i = from_vector<int32_t>({1, 2, 3});
  Tensor f = from_vector<float>({0.5f, 0.5f, 0.5f});
  Tensor d = from_vector<double>({1.0, 1.0, 1.0});
  Tensor h = ones({3}, DType::f16);
  Tensor bf = ones({3}, DType::bf16);
  Tensor u = ones({3}, DType::u8);
  Tensor s8 = ones({3}, DType::i8);
  EXPECT_EQ((i + f).dtype(), DType::f32);
  EXPECT_EQ((f + d).dtype(), DType::f64);
  EXPECT_EQ((h + bf).dtype(), DType::f32);
  EXPECT_EQ((u + s8).dtype(), DType::i32);
  EXPECT_EQ((i + from_vector<int64_t>({1, 1, 1})).dtype(), DType::i64);
  EXPECT_EQ((h * 2.5).dtype(), DType::f16);   // a float scalar keeps the tensor's float type
  EXPECT_EQ((i * 2.5).dtype(), DType::f32);   // ... and makes an integer tensor f32
  EXPECT_EQ((i * 2).dtype(), DType::i32);
  EXPECT_TRUE(all_close(i + f, from_vector<double>({1.5, 2.5, 3.5})));
  EXPECT_EQ(eq(i, f).dtype(), DType::boolean);
}

TEST(Binary, IntegerDivisionAndModSemantics) {
  Tensor a = from_vector<int32_t>({7, -7, 7, -7});
  Tensor b = from_vector<int32_t>({2, 2, -2, -2});
  EXPECT_TRUE(all_close(div(a, b), from_vector<double>({3, -3, -3, 3})));          // truncation
  EXPECT_TRUE(all_close(mod(a, b), from_vector<double>({1, 1, -1, -1})));           // sign of divisor
  EXPECT_TRUE(all_close(mod(a, b, /*fmod=*/true), from_vector<double>({1, -1, 1, -1})));  // sign of dividend
  Tensor fa = from_vector<float>({7.5f, -7.5f}), fb = from_vector<float>({2.f, 2.f});
  EXPECT_TRUE(all_close(mod(fa, fb), from_vector<double>({1.5, 0.5})));
  EXPECT_KILN_ERROR(div(a, from_vector<int32_t>({1, 0, 1, 1})), "div", "division by zero");
}

// Note [Squares as products]: a scalar exponent of 2 runs as a * a, which must give pow's bits:
// special values, a non-contiguous base, an exponent broadcast from [1, 1], f32 and f64; any other
// exponent (2.5, a 2 that is not a scalar) still goes through std::pow.
TEST(Binary, PowOfTwoIsTheSquareBitForBit) {
  for (DType t : {DType::f32, DType::f64}) {
    Tensor specials = from_vector<double>({0.0, -0.0, INFINITY, -INFINITY, NAN, 1e-30, -3e20, 1e200, 0.1}).to(t);
    Tensor x = random_tensor({33, 7}, t, 11, -30, 30);
    for (const Tensor& base : {specials, x, noncontiguous(x), x.t()}) {
      for (const Tensor& two : {full({}, 2.0, TensorOptions(t)), full({1, 1}, 2.0, TensorOptions(t))}) {
        Tensor got = pow(base, two).to(DType::f64).contiguous(), b64 = base.to(DType::f64).contiguous();
        ASSERT_EQ(got.numel(), b64.numel());
        for (int64_t i = 0; i < got.numel(); ++i) {
          const double v = b64.data<double>()[i], g = got.data<double>()[i];
          const double w = t == DType::f32 ? static_cast<double>(std::pow(static_cast<float>(v), 2.0f)) : std::pow(v, 2.0);
          if (std::isnan(w)) EXPECT_TRUE(std::isnan(g)) << i;
          else EXPECT_EQ(std::bit_cast<uint64_t>(g), std::bit_cast<uint64_t>(w)) << dtype_name(t) << " " << i;
        }
      }
    }
    Tensor half_more = full({}, 2.5, TensorOptions(t)), twos = full({7}, 2.0, TensorOptions(t));
    Tensor pos = random_tensor({33, 7}, t, 12, 0.5, 3);
    EXPECT_TRUE(all_close(pow(pos, half_more), ref::binary("pow", pos, half_more)));
    EXPECT_TRUE(all_close(pow(pos, twos), ref::binary("pow", pos, twos)));
  }
}

TEST(Binary, NaNPropagatesThroughMaxMin) {
  Tensor a = from_vector<float>({NAN, 1.f}), b = from_vector<float>({0.f, NAN});
  Tensor m = maximum(a, b);
  EXPECT_TRUE(std::isnan(m.data<float>()[0]) && std::isnan(m.data<float>()[1]));
}

TEST(Binary, WhereMatchesReference) {
  for (DType t : testing::kAllDTypes) {
    Tensor c = random_tensor({7, 1}, DType::boolean, 3);
    Tensor a = random_tensor({7, 33}, t, 4), b = random_tensor({33}, t, 5);
    EXPECT_TRUE(all_close(where(c, a, b), ref::where(c, a, b))) << dtype_name(t);
    EXPECT_TRUE(all_close(where(noncontiguous(c), noncontiguous(a), b), ref::where(c, a, b))) << dtype_name(t);
    // The same tensor on both sides (how the ONNX importer broadcasts to a symbolic shape): a copy
    // of it broadcast, contiguous runs or not.
    Tensor cond = random_tensor({5, 7, 33}, DType::boolean, 6);
    for (const Tensor& v : {b, a, noncontiguous(a), a.slice(0, 2, 3)})
      EXPECT_TRUE(all_close(where(cond, v, v), ref::where(cond, v, v))) << dtype_name(t) << " " << shape_str(v.shape());
  }
  EXPECT_EQ(where(ones({2}, DType::boolean), ones({2}, DType::i32), ones({2}, DType::f32)).dtype(), DType::f32);
}

TEST(Binary, ErrorsNameTheOpAndShapes) {
  EXPECT_KILN_ERROR(add(ones({2, 3}), ones({4})), "add", "[2, 3]", "[4]", "broadcast");
  EXPECT_KILN_ERROR(sub(ones({2}, DType::boolean), ones({2}, DType::boolean)), "sub", "no kernel for dtype bool");
  EXPECT_KILN_ERROR(where(ones({2}), ones({2}), ones({2})), "where", "cond", "bool");
  EXPECT_KILN_ERROR(add(Tensor(), ones({2})), "required input 'a'");
}

TEST(Binary, InPlaceBumpsVersionAndChecksShape) {
  Tensor a = ones({3});
  uint64_t v = a.version();
  a.add_(full({3}, 2.0f));
  EXPECT_EQ(a.version(), v + 1);
  EXPECT_TRUE(all_close(a, full({3}, 3.0, DType::f64)));
  Tensor view = a.slice(0, 0, 2);
  view.mul_(full({1}, 2.0f));
  EXPECT_EQ(a.version(), v + 2);  // views share the counter
  EXPECT_TRUE(all_close(a, from_vector<double>({6, 6, 3})));
  EXPECT_KILN_ERROR(a.add_(ones({2, 3})), "add_", "shape", "[2, 3]");
  Tensor i = ones({3}, DType::i32);
  EXPECT_KILN_ERROR(i.add_(full({3}, 0.5f)), "add_", "dtype", "f32", "i32");
  Tensor e = ones({1}).expand({4});
  EXPECT_KILN_ERROR(e.add_(ones({4})), "add_", "broadcast");
}

}  // namespace
}  // namespace kiln
