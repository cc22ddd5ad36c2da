// Shape ops (concat, stack, split, chunk, tile, pad, trilu) against the float64 references in
// src/kernels/cpu/ref/shape.cc: every dtype, odd sizes along the op's axis, negative axes,
// non-contiguous and transposed inputs, and error messages by content. These ops only move
// elements, so results must match exactly (all_close uses each dtype's tolerance; for moved values
// the error is 0).
#include "support/testing.h"

namespace kiln {
namespace {

using testing::all_close;
using testing::kAllDTypes;
using testing::noncontiguous;
using testing::random_tensor;

Tensor rnd(const Shape& s, DType t, uint64_t seed) { return random_tensor(s, t, seed, -100, 100); }

// ---- concat -----------------------------------------------------------------------------------------------

TEST(Concat, MatchesReferenceOnEveryDTypeSizeAndAxis) {
  for (DType t : kAllDTypes) {
    for (int64_t n : {1, 7, 33, 1000}) {
      for (int64_t axis : {0, 1, 2, -1, -3}) {
        Shape base = {3, 2, 5};
        const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
        Shape s0 = base, s1 = base, s2 = base;
        s0[a] = n;
        s1[a] = 1;
        s2[a] = 7;
        Tensor x0 = rnd(s0, t, 1), x1 = rnd(s1, t, 2), x2 = rnd(s2, t, 3);
        Tensor want = ref::concat({x0, x1, x2}, axis);
        Tensor got = concat({x0, x1, x2}, axis);
        EXPECT_EQ(got.dtype(), t);
        EXPECT_TRUE(all_close(got, want)) << dtype_name(t) << " n=" << n << " axis=" << axis;
        EXPECT_TRUE(all_close(concat({noncontiguous(x0), x1, noncontiguous(x2)}, axis), want))
            << dtype_name(t) << " noncontiguous n=" << n << " axis=" << axis;
      }
    }
  }
}

TEST(Concat, TransposedInputsAndSingleInput) {
  Tensor a = rnd({33, 7}, DType::f32, 4), b = rnd({7, 5}, DType::f32, 5);
  EXPECT_TRUE(all_close(concat({a.t(), b}, 1), ref::concat({a.t(), b}, 1)));
  EXPECT_TRUE(all_close(concat({a}, 0), a));
  EXPECT_FALSE(concat({a}, 0).storage() == a.storage());  // a new tensor, not an alias
  // An empty piece along the axis is allowed.
  Tensor e = empty({0, 7});
  EXPECT_TRUE(all_close(concat({e, a, e}, 0), a));
}

TEST(Concat, PromotesToTheCommonDType) {
  Tensor i = from_vector<int32_t>({1, 2}), f = from_vector<float>({0.5f}), h = ones({1}, DType::f16),
         bf = ones({1}, DType::bf16), u = from_vector<uint8_t>({200}), s8 = from_vector<int8_t>({-3});
  Tensor c = concat({i, f}, 0);
  EXPECT_EQ(c.dtype(), DType::f32);
  EXPECT_TRUE(all_close(c, from_vector<double>({1, 2, 0.5})));
  EXPECT_EQ(concat({h, bf}, 0).dtype(), DType::f32);
  Tensor us = concat({u, s8}, 0);
  EXPECT_EQ(us.dtype(), DType::i32);
  EXPECT_TRUE(all_close(us, from_vector<double>({200, -3})));
  EXPECT_EQ(concat({ones({1}, DType::boolean), i}, 0).dtype(), DType::i32);
}

TEST(Concat, ErrorsNameTheOpInputAndShapes) {
  Tensor a = zeros({2, 3}), b = zeros({2, 3, 4}), c = zeros({2, 4});
  EXPECT_KILN_ERROR(concat({a, b}, 0), "concat", "input 1", "[2, 3, 4]", "[2, 3]", "rank");
  EXPECT_KILN_ERROR(concat({a, c}, 0), "concat", "input 1", "[2, 4]", "[2, 3]", "dim 1");
  EXPECT_KILN_ERROR(concat({a, a, c}, 0), "concat", "input 2", "[2, 4]", "[2, 3]");
  EXPECT_KILN_ERROR(concat({a, a}, 2), "concat", "axis");
  EXPECT_KILN_ERROR(concat({}, 0), "concat", "at least one");
  EXPECT_KILN_ERROR(concat({scalar_tensor(1.0)}, 0), "concat", "0-d");
}

// ---- stack --------------------------------------------------------------------------------------------------

TEST(Stack, MatchesReferenceOnEveryDTypeAndAxis) {
  for (DType t : kAllDTypes) {
    for (int64_t n : {1, 7, 33}) {
      std::vector<Tensor> xs;
      for (int64_t i = 0; i < n % 5 + 2; ++i) xs.push_back(rnd({n, 3}, t, 10 + static_cast<uint64_t>(i)));
      for (int64_t axis : {0, 1, 2, -1, -3}) {
        Tensor want = ref::stack(xs, axis);
        EXPECT_TRUE(all_close(stack(xs, axis), want)) << dtype_name(t) << " n=" << n << " axis=" << axis;
        std::vector<Tensor> nc;
        for (const Tensor& x : xs) nc.push_back(noncontiguous(x));
        EXPECT_TRUE(all_close(stack(nc, axis), want)) << dtype_name(t) << " noncontiguous";
      }
    }
  }
  // 0-d inputs stack into a vector.
  EXPECT_TRUE(all_close(stack({scalar_tensor(1.0), scalar_tensor(2.0)}), from_vector<double>({1, 2})));
}

TEST(Stack, Errors) {
  EXPECT_KILN_ERROR(stack({zeros({2, 3}), zeros({3, 2})}), "stack", "input 1", "[3, 2]", "[2, 3]");
  EXPECT_KILN_ERROR(stack({zeros({2, 3}), zeros({2, 3})}, 3), "stack", "axis");
  EXPECT_KILN_ERROR(stack({}), "stack", "at least one");
}

// ---- split and chunk ----------------------------------------------------------------------------------------

TEST(Split, MatchesReferenceOnEveryDTypeSizeAndAxis) {
  for (DType t : kAllDTypes) {
    for (int64_t n : {1, 7, 33, 1023}) {
      for (int64_t axis : {0, 1, -1}) {
        Shape s = {4, 3};
        if (axis == 0) s = {n, 3};
        else s = {4, n};
        Tensor x = rnd(s, t, 20);
        std::vector<int64_t> sizes = n == 1 ? std::vector<int64_t>{1} : std::vector<int64_t>{1, 0, n / 2 - 1, n - n / 2};
        if (n == 1) sizes = {0, 1};
        auto want = ref::split(x, sizes, axis);
        for (const Tensor& in : {x, noncontiguous(x)}) {
          auto got = split(in, sizes, axis);
          ASSERT_EQ(got.size(), sizes.size());
          for (size_t i = 0; i < got.size(); ++i)
            EXPECT_TRUE(all_close(got[i], want[i])) << dtype_name(t) << " n=" << n << " axis=" << axis << " piece " << i;
        }
      }
    }
  }
  Tensor x = rnd({7, 5}, DType::f64, 21);
  auto pieces = split(x.t(), {2, 5}, 1);
  auto want = ref::split(x.t(), {2, 5}, 1);
  EXPECT_TRUE(all_close(pieces[0], want[0]));
  EXPECT_TRUE(all_close(pieces[1], want[1]));
}

TEST(Split, Errors) {
  Tensor x = zeros({2, 7});
  EXPECT_KILN_ERROR(split(x, {3, 3}, 1), "split", "add up to 6", "axis 1", "[2, 7]", "size 7");
  EXPECT_KILN_ERROR(split(x, {8, -1}, 1), "split", "negative size -1");
  EXPECT_KILN_ERROR(split(x, {}, 1), "split", "sizes is empty");
  EXPECT_KILN_ERROR(split(x, {7}, 2), "split", "axis");
  EXPECT_KILN_ERROR(split(scalar_tensor(1.0), {1}, 0), "split", "0-d");
}

TEST(Chunk, SizesFollowOnnxNumOutputs) {
  auto sizes_of = [](const std::vector<Tensor>& v, int64_t axis) {
    std::vector<int64_t> s;
    for (const Tensor& t : v) s.push_back(t.size(axis));
    return s;
  };
  EXPECT_EQ(sizes_of(chunk(zeros({7}), 3), 0), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(sizes_of(chunk(zeros({6}), 3), 0), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(sizes_of(chunk(zeros({6}), 4), 0), (std::vector<int64_t>{2, 2, 2, 0}));
  EXPECT_EQ(sizes_of(chunk(zeros({5}), 4), 0), (std::vector<int64_t>{2, 2, 1, 0}));
  EXPECT_EQ(sizes_of(chunk(zeros({1}), 1), 0), (std::vector<int64_t>{1}));
  EXPECT_EQ(sizes_of(chunk(zeros({2, 1000}), 7, -1), 1), (std::vector<int64_t>{143, 143, 143, 143, 143, 143, 142}));
  for (DType t : kAllDTypes) {
    Tensor x = rnd({3, 1023}, t, 30);
    auto got = chunk(noncontiguous(x), 5, -1);
    auto want = ref::split(x, {205, 205, 205, 205, 203}, -1);
    ASSERT_EQ(got.size(), 5u);
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(all_close(got[i], want[i])) << dtype_name(t) << " " << i;
  }
  EXPECT_KILN_ERROR(chunk(zeros({4}), 0), "chunk", "chunks must be >= 1", "0");
  EXPECT_KILN_ERROR(chunk(zeros({4}), 2, 1), "chunk", "axis");
}

// ---- tile ---------------------------------------------------------------------------------------------------

TEST(Tile, MatchesReferenceOnEveryDType) {
  const std::vector<std::pair<Shape, std::vector<int64_t>>> cases = {
      {{7}, {3}},           {{1}, {1000}},       {{33}, {1}},        {{2, 3}, {2, 4}}, {{3, 1, 5}, {1, 7, 2}},
      {{2, 3}, {3}},        {{4}, {2, 1, 3}},    {{2, 3}, {0, 2}},   {{}, {5}},        {{1000, 2}, {1, 3}},
  };
  for (DType t : kAllDTypes) {
    for (const auto& [shape, reps] : cases) {
      Tensor x = rnd(shape, t, 40);
      Tensor want = ref::tile(x, reps);
      EXPECT_TRUE(all_close(tile(x, reps), want)) << dtype_name(t) << " " << shape_str(shape) << " x " << shape_str(reps);
      EXPECT_TRUE(all_close(tile(noncontiguous(x), reps), want)) << dtype_name(t) << " noncontiguous";
    }
  }
  Tensor x = rnd({5, 3}, DType::f32, 41);
  EXPECT_TRUE(all_close(tile(x.t(), {2, 3}), ref::tile(x.t(), {2, 3})));
  EXPECT_KILN_ERROR(tile(x, {2, -1}), "tile", "negative", "-1", "[5, 3]");
}

// ---- pad ----------------------------------------------------------------------------------------------------

TEST(Pad, MatchesReferenceOnEveryDTypeAndMode) {
  struct Case {
    Shape shape;
    std::vector<int64_t> pads;
  };
  const std::vector<Case> cases = {
      {{7}, {2, 3}},           {{33}, {0, 32}},            {{1000}, {5, 1}},        {{1}, {0, 0}},
      {{4, 5}, {1, 2, 3, 4}},  {{4, 5}, {-1, 2, 2, -2}},   {{3, 4, 5}, {0, 1, 2, 2, 1, 0}},
      {{6, 7}, {-2, -3, -1, 3}}, {{1, 7}, {0, 6, 0, 6}},
  };
  for (DType t : kAllDTypes) {
    for (const Case& c : cases) {
      Tensor x = rnd(c.shape, t, 50);
      for (const char* mode : {"constant", "reflect", "edge"}) {
        // The pad value 3 as the dtype holds it (bool: true).
        Tensor want = ref::pad(x, c.pads, mode, t == DType::boolean ? 1.0 : 3.0);
        EXPECT_TRUE(all_close(pad(x, c.pads, mode, 3.0), want))
            << dtype_name(t) << " " << mode << " " << shape_str(c.shape) << " pads " << shape_str(c.pads);
        EXPECT_TRUE(all_close(pad(noncontiguous(x), c.pads, mode, 3.0), want)) << dtype_name(t) << " " << mode << " nc";
      }
    }
  }
  Tensor x = rnd({5, 3}, DType::f32, 51);
  EXPECT_TRUE(all_close(pad(x.t(), {1, 2, 2, 1}, "reflect"), ref::pad(x.t(), {1, 2, 2, 1}, "reflect", 0)));
}

TEST(Pad, KnownValues) {
  Tensor x = from_vector<float>({1, 2, 3});
  EXPECT_TRUE(all_close(pad(x, {2, 2}, "reflect"), from_vector<double>({3, 2, 1, 2, 3, 2, 1})));
  EXPECT_TRUE(all_close(pad(x, {2, 1}, "edge"), from_vector<double>({1, 1, 1, 2, 3, 3})));
  EXPECT_TRUE(all_close(pad(x, {1, -1}, "constant", -5), from_vector<double>({-5, 1, 2})));
  // A non-integral pad value is converted like a cast for integer tensors.
  EXPECT_TRUE(all_close(pad(from_vector<int32_t>({4}), {1, 0}, "constant", 2.7), from_vector<double>({2, 4})));
}

TEST(Pad, Errors) {
  Tensor x = zeros({2, 3});
  EXPECT_KILN_ERROR(pad(x, {0, 3, 0, 0}, "reflect"), "pad", "reflect", "dim 1", "size 3");
  EXPECT_KILN_ERROR(pad(x, {2, 0, 0, 0}, "reflect"), "pad", "reflect", "dim 0", "size 2");
  EXPECT_KILN_ERROR(pad(x, {0, -1, 0, 2}, "reflect"), "pad", "reflect", "dim 1", "size 2");
  EXPECT_KILN_ERROR(pad(x, {1, 1}), "pad", "pads", "2 entries", "[2, 3]");
  EXPECT_KILN_ERROR(pad(x, {0, 0, 0, 0}, "wrap"), "pad", "unknown mode 'wrap'");
  EXPECT_KILN_ERROR(pad(x, {0, -2, 0, -2}), "pad", "crop", "dim 1", "[2, 3]");
  EXPECT_KILN_ERROR(pad(x, {0, -3, 0, 1}, "edge"), "pad", "edge", "dim 1");
}

// ---- trilu --------------------------------------------------------------------------------------------------

TEST(Trilu, MatchesReferenceOnEveryDTypeAndOffset) {
  const std::vector<Shape> shapes = {{1, 1}, {7, 33}, {33, 7}, {3, 5, 4}, {2, 2, 7, 7}, {33, 1000}};
  for (DType t : kAllDTypes) {
    for (const Shape& s : shapes) {
      Tensor x = rnd(s, t, 60);
      for (int64_t k : {0, 1, -2, 5, -40, 1001}) {
        for (bool upper : {true, false}) {
          Tensor want = ref::trilu(x, k, upper);
          EXPECT_TRUE(all_close(trilu(x, k, upper), want))
              << dtype_name(t) << " " << shape_str(s) << " k=" << k << " upper=" << upper;
          EXPECT_TRUE(all_close(trilu(noncontiguous(x), k, upper), want)) << dtype_name(t) << " nc";
        }
      }
    }
  }
  Tensor x = rnd({5, 3}, DType::f32, 61);
  EXPECT_TRUE(all_close(trilu(x.t(), 0, false), ref::trilu(x.t(), 0, false)));
  EXPECT_TRUE(all_close(trilu(from_vector<float>({1, 2, 3, 4}, Shape{2, 2})), from_vector<double>({1, 2, 0, 4}, Shape{2, 2})));
}

TEST(Trilu, Errors) {
  EXPECT_KILN_ERROR(trilu(zeros({5})), "trilu", "rank >= 2", "f32[5]");
}

// ---- cast / clone / copy (defined in copy.cc) ---------------------------------------------------------------

TEST(Copy, CloneCastAndCopyOnEveryDType) {
  for (DType t : kAllDTypes) {
    Tensor x = rnd({7, 33}, t, 70);
    Tensor c = noncontiguous(x).clone();
    EXPECT_TRUE(c.is_contiguous());
    EXPECT_TRUE(all_close(c, x)) << dtype_name(t);
    for (DType u : kAllDTypes) {
      Tensor y = cast(x, u);
      EXPECT_EQ(y.dtype(), u);
      // The f64 reference of a cast: truncation toward zero for integers, != 0 for bool, and the
      // target's rounding for floats (compared with the target's tolerance).
      std::vector<double> v = ref::values(x);
      for (double& e : v) {
        if (u == DType::boolean) e = e != 0;
        else if (!is_floating(u)) e = std::trunc(e);
        // To u8, negative integers wrap modulo 2^8 (C semantics); negative floats clamp to 0.
        if (u == DType::u8 && e < 0) e = is_floating(t) ? 0 : e + 256;
      }
      EXPECT_TRUE(all_close(y, ref::from_values(v, x.shape()))) << dtype_name(t) << " -> " << dtype_name(u);
    }
  }
  Tensor dst = zeros({3, 4}, DType::i32);
  dst.copy_(from_vector<float>({1.5f, -2.5f, 3.f, 4.f}));  // broadcast along rows, truncating
  EXPECT_TRUE(all_close(dst, ref::from_values({1, -2, 3, 4, 1, -2, 3, 4, 1, -2, 3, 4}, {3, 4})));
  EXPECT_KILN_ERROR(dst.copy_(zeros({3})), "copy_", "[3]", "[3, 4]");
}

// Inputs large enough that the copy loops and trilu split their work over the pool's threads.
TEST(ShapeOps, LargeInputsMatchReferenceWithThreads) {
  Tensor a = rnd({200, 300}, DType::f32, 80), b = rnd({200, 7}, DType::f32, 81);
  EXPECT_TRUE(all_close(concat({noncontiguous(a), b}, 1), ref::concat({a, b}, 1)));
  auto parts = split(noncontiguous(a), {100, 200}, 1);
  auto want = ref::split(a, {100, 200}, 1);
  EXPECT_TRUE(all_close(parts[0], want[0]));
  EXPECT_TRUE(all_close(parts[1], want[1]));
  EXPECT_TRUE(all_close(tile(a, {2, 1}), ref::tile(a, {2, 1})));
  EXPECT_TRUE(all_close(pad(a, {3, 4, 5, 6}, "reflect"), ref::pad(a, {3, 4, 5, 6}, "reflect", 0)));
  Tensor m = rnd({3, 300, 200}, DType::bf16, 82);
  EXPECT_TRUE(all_close(trilu(m, -3, true), ref::trilu(m, -3, true)));
  EXPECT_TRUE(all_close(trilu(m, 7, false), ref::trilu(m, 7, false)));
}

}  // namespace
}  // namespace kiln
