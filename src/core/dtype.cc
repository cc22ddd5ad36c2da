#include "kiln/core/dtype.h"

#include <ostream>

#include "kiln/core/scalar.h"

namespace kiln {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i8: return "i8";
    case DType::u8: return "u8";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(std::string_view n) {
  struct Alias { std::string_view name; DType t; };
  static constexpr Alias kAliases[] = {
      {"f32", DType::f32},   {"float32", DType::f32},  {"float", DType::f32},
      {"f64", DType::f64},   {"float64", DType::f64},  {"double", DType::f64},
      {"f16", DType::f16},   {"float16", DType::f16},  {"half", DType::f16},
      {"bf16", DType::bf16}, {"bfloat16", DType::bf16},
      {"i8", DType::i8},     {"int8", DType::i8},      {"u8", DType::u8},
      {"uint8", DType::u8},  {"i32", DType::i32},      {"int32", DType::i32},
      {"i64", DType::i64},   {"int64", DType::i64},    {"bool", DType::boolean},
  };
  for (const Alias& a : kAliases)
    if (a.name == n) return a.t;
  KILN_FAIL("unknown dtype '", n, "' (expected one of f32, f64, f16, bf16, i8, u8, i32, i64, bool)");
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::f64: case DType::i64: return 8;
    case DType::f32: case DType::i32: return 4;
    case DType::f16: case DType::bf16: return 2;
    case DType::i8: case DType::u8: case DType::boolean: return 1;
  }
  return 0;
}

bool is_floating(DType t) { return DTypeSet::floating().contains(t); }
bool is_integral(DType t) { return DTypeSet::integral().contains(t); }
bool is_signed(DType t) { return t != DType::u8 && t != DType::boolean; }

namespace {
int category(DType t) { return t == DType::boolean ? 0 : is_integral(t) ? 1 : 2; }
}  // namespace

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  int ca = category(a), cb = category(b);
  if (ca != cb) return ca > cb ? a : b;
  if (ca == 2) {
    if (a == DType::f64 || b == DType::f64) return DType::f64;
    if (a == DType::f32 || b == DType::f32) return DType::f32;
    return DType::f32;  // f16 with bf16
  }
  // integers
  if (a == DType::i64 || b == DType::i64) return DType::i64;
  if (a == DType::i32 || b == DType::i32) return DType::i32;
  return DType::i32;  // u8 with i8: i16 in NumPy/PyTorch; kiln's next type that holds both
}

DType to_floating(DType t) { return is_floating(t) ? t : DType::f32; }

std::ostream& operator<<(std::ostream& os, DType t) { return os << dtype_name(t); }

std::string DTypeSet::to_string() const {
  std::string s = "{";
  for (int i = 0; i < kNumDTypes; ++i) {
    if (!contains(static_cast<DType>(i))) continue;
    if (s.size() > 1) s += ", ";
    s += dtype_name(static_cast<DType>(i));
  }
  return s + "}";
}

DType Scalar::result_type_with(DType t) const {
  switch (kind_) {
    case Kind::floating: return kiln::is_floating(t) ? t : DType::f32;
    case Kind::integral: return t == DType::boolean ? DType::i64 : t;
    case Kind::boolean: return t;
  }
  return t;
}

}  // namespace kiln
