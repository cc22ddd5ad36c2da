// Bitwise ops (defs/binary/bitwise.cc) against the exact integer reference (ref::bitwise): every
// integer dtype and bool over the dtype's full range at odd sizes, broadcasting, non-contiguous
// and transposed operands, promotion, ONNX's BitShift examples, shift counts at and past the bit
// width, and errors by content. Results are compared exactly (as int64).
#include <limits>

#include "support/testing.h"

namespace kiln {
namespace {

using testing::noncontiguous;
using testing::random_tensor;

const std::vector<DType> kIntDTypes = {DType::i8, DType::u8, DType::i32, DType::i64};
const std::vector<DType> kBitwiseDTypes = {DType::i8, DType::u8, DType::i32, DType::i64, DType::boolean};

std::vector<int64_t> as_ints(const Tensor& t) {
  Tensor c = t.to(DType::i64).contiguous();
  return std::vector<int64_t>(c.data<int64_t>(), c.data<int64_t>() + c.numel());
}

::testing::AssertionResult exactly(const Tensor& got, const Tensor& want, DType dtype) {
  if (got.dtype() != dtype)
    return ::testing::AssertionFailure() << "dtype " << dtype_name(got.dtype()) << ", expected " << dtype_name(dtype);
  if (got.shape() != want.shape())
    return ::testing::AssertionFailure() << "shape " << shape_str(got.shape()) << ", expected " << shape_str(want.shape());
  std::vector<int64_t> g = as_ints(got), w = as_ints(want);
  for (size_t i = 0; i < g.size(); ++i)
    if (g[i] != w[i]) return ::testing::AssertionFailure() << "element " << i << ": got " << g[i] << ", expected " << w[i];
  return ::testing::AssertionSuccess();
}

// Values over the dtype's whole range (i64: +-2^52, exact through the f64 generator).
Tensor full_range(const Shape& s, DType t, uint64_t seed) {
  switch (t) {
    case DType::i8: return random_tensor(s, t, seed, -128, 127);
    case DType::u8: return random_tensor(s, t, seed, 1, 255);
    case DType::i32: return random_tensor(s, t, seed, -2147483648.0, 2147483647.0);
    case DType::i64: return random_tensor(s, t, seed, -4503599627370496.0, 4503599627370496.0);
    default: return random_tensor(s, t, seed);
  }
}

int bits(DType t) { return static_cast<int>(dtype_size(t) * 8); }

// Shift counts in [0, bits) (random_tensor never gives 0, so add 0s by subtracting 1).
Tensor counts(const Shape& s, DType t, uint64_t seed) {
  return random_tensor(s, DType::i64, seed, 1, bits(t)).sub(ones({}, DType::i64)).to(t);
}

Tensor call(const std::string& op, const Tensor& a, const Tensor& b, const Attrs& attrs = {}) {
  if (op == "bitwise_not") return dispatch1(kiln::op(op), {a}, attrs);
  return dispatch1(kiln::op(op), {a, b}, attrs);
}

TEST(Bitwise, MatchesReferenceOnEveryDTypeAndSize) {
  for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not"}) {
    for (DType t : kBitwiseDTypes) {
      for (int64_t n : testing::kOddSizes) {
        Tensor a = full_range({n}, t, 3 + static_cast<uint64_t>(n)), b = full_range({n}, t, 5 + static_cast<uint64_t>(n));
        EXPECT_TRUE(exactly(call(op, a, b), ref::bitwise(op, a, b), t)) << op << " " << dtype_name(t) << " n=" << n;
      }
    }
  }
  for (const char* dir : {"left", "right"}) {
    for (DType t : kIntDTypes) {
      for (int64_t n : testing::kOddSizes) {
        Tensor a = full_range({n}, t, 7 + static_cast<uint64_t>(n)), b = counts({n}, t, 9 + static_cast<uint64_t>(n));
        Attrs at{{"direction", std::string(dir)}};
        EXPECT_TRUE(exactly(call("bit_shift", a, b, at), ref::bitwise("bit_shift", a, b, at), t))
            << dir << " " << dtype_name(t) << " n=" << n;
      }
    }
  }
}

TEST(Bitwise, BroadcastNonContiguousAndTransposed) {
  for (const char* op : {"bitwise_and", "bitwise_or", "bitwise_xor", "bit_shift"}) {
    Attrs at;
    if (std::string(op) == "bit_shift") at.set("direction", std::string("right"));
    for (DType t : kBitwiseDTypes) {
      if (t == DType::boolean && std::string(op) == "bit_shift") continue;
      auto rhs = [&](const Shape& s, uint64_t seed) {
        return std::string(op) == "bit_shift" ? counts(s, t, seed) : full_range(s, t, seed);
      };
      const std::string where = std::string(op) + " " + std::string(dtype_name(t));
      Tensor a = full_range({7, 1}, t, 11), b = rhs({33}, 12);
      EXPECT_TRUE(exactly(call(op, a, b, at), ref::bitwise(op, a, b, at), t)) << where << " [7,1] x [33]";
      Tensor c = full_range({3, 1, 5}, t, 13), d = rhs({4, 1}, 14);
      EXPECT_TRUE(exactly(call(op, c, d, at), ref::bitwise(op, c, d, at), t)) << where << " [3,1,5] x [4,1]";
      Tensor e = full_range({7, 33}, t, 15), f = rhs({7, 33}, 16);
      EXPECT_TRUE(exactly(call(op, noncontiguous(e), noncontiguous(f), at), ref::bitwise(op, e, f, at), t))
          << where << " strided";
      Tensor g = full_range({33, 7}, t, 17), h = rhs({7, 33}, 18);
      EXPECT_TRUE(exactly(call(op, g.t(), h, at), ref::bitwise(op, g.t(), h, at), t)) << where << " transposed";
      Tensor s = rhs({}, 19);
      EXPECT_TRUE(exactly(call(op, e, s, at), ref::bitwise(op, e, s, at), t)) << where << " 0-d rhs";
    }
  }
  for (DType t : kBitwiseDTypes) {
    Tensor x = full_range({7, 33}, t, 21);
    EXPECT_TRUE(exactly(bitwise_not(noncontiguous(x)), ref::bitwise("bitwise_not", x), t)) << dtype_name(t);
    EXPECT_TRUE(exactly(bitwise_not(x.t()), ref::bitwise("bitwise_not", x.t()), t)) << dtype_name(t);
    Tensor big = full_range({129, 513}, t, 22);  // split over the thread pool
    EXPECT_TRUE(exactly(bitwise_xor(big, big.slice(0, 128, 129)), ref::bitwise("bitwise_xor", big, big.slice(0, 128, 129)), t))
        << dtype_name(t);
  }
}

TEST(Bitwise, KnownValuesAndPromotion) {
  EXPECT_TRUE(exactly(bitwise_and(from_vector<int32_t>({12, -1, 5}), from_vector<int32_t>({10, 7, -6})),
                      from_vector<int64_t>({8, 7, 0}), DType::i32));
  EXPECT_TRUE(exactly(bitwise_or(from_vector<uint8_t>({0xF0, 1}), from_vector<uint8_t>({0x0F, 2})),
                      from_vector<int64_t>({255, 3}), DType::u8));
  EXPECT_TRUE(exactly(bitwise_xor(from_vector<int8_t>({-128, 127}), from_vector<int8_t>({-1, -1})),
                      from_vector<int64_t>({127, -128}), DType::i8));
  EXPECT_TRUE(exactly(bitwise_not(from_vector<uint8_t>({0, 255, 7})), from_vector<int64_t>({255, 0, 248}), DType::u8));
  EXPECT_TRUE(exactly(bitwise_not(from_vector<int32_t>({0, -1, 5})), from_vector<int64_t>({-1, 0, -6}), DType::i32));
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  EXPECT_TRUE(exactly(bitwise_not(from_vector<int64_t>({lo, hi})), from_vector<int64_t>({hi, lo}), DType::i64));
  EXPECT_TRUE(exactly(bitwise_and(from_vector<int64_t>({lo, hi}), from_vector<int64_t>({-1, lo + 1})),
                      from_vector<int64_t>({lo, 1}), DType::i64));
  // bool: logical and / or / xor / not.
  Tensor p = from_vector<bool>({true, true, false, false}), q = from_vector<bool>({true, false, true, false});
  EXPECT_TRUE(exactly(bitwise_and(p, q), from_vector<int64_t>({1, 0, 0, 0}), DType::boolean));
  EXPECT_TRUE(exactly(bitwise_or(p, q), from_vector<int64_t>({1, 1, 1, 0}), DType::boolean));
  EXPECT_TRUE(exactly(bitwise_xor(p, q), from_vector<int64_t>({0, 1, 1, 0}), DType::boolean));
  EXPECT_TRUE(exactly(bitwise_not(p), from_vector<int64_t>({0, 0, 1, 1}), DType::boolean));
  // Mixed dtypes promote as the arithmetic ops do.
  EXPECT_TRUE(exactly(bitwise_or(from_vector<uint8_t>({1}), from_vector<int32_t>({256})), from_vector<int64_t>({257}), DType::i32));
  EXPECT_TRUE(exactly(bitwise_and(from_vector<bool>({true}), from_vector<int8_t>({3})), from_vector<int64_t>({1}), DType::i8));
  EXPECT_EQ(bitwise_xor(from_vector<int32_t>({1}), from_vector<int64_t>({1})).dtype(), DType::i64);
}

// ONNX's BitShift examples (uint8) and Note [Shift semantics] at the edges.
TEST(Bitwise, ShiftSemantics) {
  Tensor x = from_vector<uint8_t>({16, 4, 1}), y = from_vector<uint8_t>({1, 2, 3});
  EXPECT_TRUE(exactly(bit_shift(x, y, "RIGHT"), from_vector<int64_t>({8, 1, 0}), DType::u8));
  EXPECT_TRUE(exactly(bit_shift(x, y, "left"), from_vector<int64_t>({32, 16, 8}), DType::u8));
  EXPECT_TRUE(exactly(bit_shift(from_vector<uint8_t>({255, 255, 255}), from_vector<uint8_t>({1, 7, 8}), "left"),
                      from_vector<int64_t>({254, 128, 0}), DType::u8));
  EXPECT_TRUE(exactly(bit_shift(from_vector<uint8_t>({255, 255}), from_vector<uint8_t>({7, 200}), "right"),
                      from_vector<int64_t>({1, 0}), DType::u8));  // logical
  // Signed: left shifts the bit pattern, right is arithmetic; counts < 0 or >= 32 shift all out.
  Tensor a = from_vector<int32_t>({1, 1, 1, -8, -1, -8, 5, -5, 3});
  Tensor l = from_vector<int32_t>({31, 32, -1, 1, 40, 31, 100, 33, 0});
  EXPECT_TRUE(exactly(bit_shift(a, l, "left"),
                      from_vector<int64_t>({std::numeric_limits<int32_t>::min(), 0, 0, -16, 0, 0, 0, 0, 3}), DType::i32));
  EXPECT_TRUE(exactly(bit_shift(a, l, "right"), from_vector<int64_t>({0, 0, 0, -4, -1, -1, 0, -1, 3}), DType::i32));
  EXPECT_TRUE(exactly(bit_shift(from_vector<int64_t>({1, -1}), from_vector<int64_t>({63, 63}), "left"),
                      from_vector<int64_t>({std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::min()}),
                      DType::i64));
  EXPECT_TRUE(exactly(bit_shift(from_vector<int64_t>({std::numeric_limits<int64_t>::min()}), from_vector<int64_t>({63}), "right"),
                      from_vector<int64_t>({-1}), DType::i64));
  // A u8 count against an i32 value promotes to i32.
  EXPECT_TRUE(exactly(bit_shift(from_vector<int32_t>({3}), from_vector<uint8_t>({4}), "left"), from_vector<int64_t>({48}), DType::i32));
}

TEST(Bitwise, RegistryEntries) {
  const std::vector<std::tuple<const char*, const char*, int>> onnx = {{"bitwise_and", "BitwiseAnd", 18},
                                                                       {"bitwise_or", "BitwiseOr", 18},
                                                                       {"bitwise_xor", "BitwiseXor", 18},
                                                                       {"bitwise_not", "BitwiseNot", 18},
                                                                       {"bit_shift", "BitShift", 11}};
  for (const auto& [name, type, since] : onnx) {
    const OpDef& d = kiln::op(name);
    ASSERT_TRUE(d.onnx_mapping().has_value()) << name;
    EXPECT_EQ(d.onnx_mapping()->op_type, type) << name;
    EXPECT_EQ(d.onnx_mapping()->since_opset, since) << name;
    EXPECT_EQ(d.vjp_status().kind, RuleStatus::Kind::not_applicable) << name;
  }
}

TEST(Bitwise, Errors) {
  Tensor f = ones({2, 3}), i = ones({2, 3}, DType::i32), b = ones({3}, DType::boolean);
  EXPECT_KILN_ERROR(bitwise_and(f, i), "bitwise_and", "'a'", "f32[2, 3]", "integer or bool");
  EXPECT_KILN_ERROR(bitwise_or(i, ones({3}, DType::f64)), "bitwise_or", "'b'", "f64[3]");
  EXPECT_KILN_ERROR(bitwise_xor(i, ones({4}, DType::i32)), "bitwise_xor", "[2, 3]", "[4]");
  EXPECT_KILN_ERROR(bitwise_not(ones({5}, DType::f16)), "bitwise_not", "'x'", "f16[5]");
  EXPECT_KILN_ERROR(bit_shift(i, i, "up"), "bit_shift", "direction", "\"up\"", "left", "right");
  EXPECT_KILN_ERROR(bit_shift(b, b, "left"), "bit_shift", "'a'", "bool[3]", "an integer dtype");
  EXPECT_KILN_ERROR(bit_shift(i, f, "left"), "bit_shift", "'b'", "f32[2, 3]");
  EXPECT_KILN_ERROR(dispatch1(kiln::op("bit_shift"), {i, i}), "bit_shift", "direction");
}

}  // namespace
}  // namespace kiln
