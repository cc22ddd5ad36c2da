// Element types, their properties, NumPy/PyTorch type promotion, and dtype dispatch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <limits>
#include <ostream>
#include <type_traits>

#include "kiln/core/error.h"
#include "kiln/core/half.h"

namespace kiln {

enum class DType : uint8_t { f32, f64, f16, bf16, i8, u8, i32, i64, boolean };
inline constexpr int kNumDTypes = 9;

// Canonical short names ("f32", "bool"); parse_dtype also accepts NumPy names ("float32").
std::string_view dtype_name(DType t);
DType parse_dtype(std::string_view name);
size_t dtype_size(DType t);
bool is_floating(DType t);
bool is_integral(DType t);  // signed or unsigned integers, not bool
bool is_signed(DType t);
// Type promotion of two tensor dtypes: bool < integers < floating, the wider type within a
// category; u8 with i8 gives i32 (kiln has no i16); f16 with bf16 gives f32.
DType promote_types(DType a, DType b);
// The dtype a floating-point op (exp, sqrt, mean, ...) computes in for an input dtype:
// floating stays, everything else becomes f32.
DType to_floating(DType t);

std::ostream& operator<<(std::ostream& os, DType t);

// A small set of dtypes, used by kernel registrations.
class DTypeSet {
 public:
  constexpr DTypeSet() = default;
  constexpr DTypeSet(std::initializer_list<DType> ts) {
    for (DType t : ts) bits_ |= 1u << static_cast<unsigned>(t);
  }
  constexpr bool contains(DType t) const { return (bits_ >> static_cast<unsigned>(t)) & 1u; }
  constexpr DTypeSet operator|(DTypeSet o) const { DTypeSet s; s.bits_ = bits_ | o.bits_; return s; }
  constexpr bool empty() const { return bits_ == 0; }
  std::string to_string() const;
  static constexpr DTypeSet all() { DTypeSet s; s.bits_ = (1u << kNumDTypes) - 1; return s; }
  static constexpr DTypeSet floating() { return {DType::f32, DType::f64, DType::f16, DType::bf16}; }
  static constexpr DTypeSet integral() { return {DType::i8, DType::u8, DType::i32, DType::i64}; }
  static constexpr DTypeSet numeric() { return floating() | integral(); }
  static constexpr DTypeSet signed_numeric() {
    return floating() | DTypeSet{DType::i8, DType::i32, DType::i64};
  }

 private:
  uint32_t bits_ = 0;
};

template <class T> struct CppToDType;
template <> struct CppToDType<float> { static constexpr DType value = DType::f32; };
template <> struct CppToDType<double> { static constexpr DType value = DType::f64; };
template <> struct CppToDType<Half> { static constexpr DType value = DType::f16; };
template <> struct CppToDType<BFloat16> { static constexpr DType value = DType::bf16; };
template <> struct CppToDType<int8_t> { static constexpr DType value = DType::i8; };
template <> struct CppToDType<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct CppToDType<int32_t> { static constexpr DType value = DType::i32; };
template <> struct CppToDType<int64_t> { static constexpr DType value = DType::i64; };
template <> struct CppToDType<bool> { static constexpr DType value = DType::boolean; };
template <class T> inline constexpr DType dtype_of = CppToDType<std::remove_cv_t<T>>::value;

// The type arithmetic on T happens in: float for the 16-bit floats, T otherwise.
template <class T> struct ComputeType { using type = T; };
template <> struct ComputeType<Half> { using type = float; };
template <> struct ComputeType<BFloat16> { using type = float; };
template <class T> using compute_t = typename ComputeType<T>::type;

template <class T> struct TypeTag { using type = T; };

// Calls f(TypeTag<T>{}) with T the C++ type of `t`. Every kernel's dtype switch goes through here.
template <class F>
decltype(auto) visit_dtype(DType t, F&& f) {
  switch (t) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::f16: return f(TypeTag<Half>{});
    case DType::bf16: return f(TypeTag<BFloat16>{});
    case DType::i8: return f(TypeTag<int8_t>{});
    case DType::u8: return f(TypeTag<uint8_t>{});
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::i64: return f(TypeTag<int64_t>{});
    case DType::boolean: return f(TypeTag<bool>{});
  }
  KILN_ASSERT(false, "bad dtype ", static_cast<int>(t));
  return f(TypeTag<float>{});  // unreachable
}

// Like visit_dtype, restricted to the floating dtypes; others are a kiln::Error naming `what`.
template <class F>
decltype(auto) visit_floating(DType t, std::string_view what, F&& f) {
  switch (t) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::f16: return f(TypeTag<Half>{});
    case DType::bf16: return f(TypeTag<BFloat16>{});
    default: break;
  }
  KILN_FAIL(what, ": expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(t));
}

// Value conversion between any two element types, with float as the bridge for 16-bit floats and
// bool as != 0.
template <class To, class From>
inline To convert(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (std::is_same_v<To, bool>) {
    return static_cast<compute_t<From>>(v) != compute_t<From>(0);
  } else if constexpr (std::is_same_v<To, Half> || std::is_same_v<To, BFloat16>) {
    return To(static_cast<float>(static_cast<compute_t<From>>(v)));
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(static_cast<compute_t<From>>(v));
  } else {
    // Integer target: float sources are truncated toward zero (C semantics; NaN/out of range
    // values are clamped so the conversion never has undefined behaviour).
    using C = compute_t<From>;
    if constexpr (std::is_floating_point_v<C>) {
      double d = static_cast<double>(static_cast<C>(v));
      if (!(d == d)) return To(0);
      constexpr double lo = static_cast<double>(std::numeric_limits<To>::min());
      constexpr double hi = static_cast<double>(std::numeric_limits<To>::max());
      if (d <= lo) return std::numeric_limits<To>::min();
      if (d >= hi) return std::numeric_limits<To>::max();
      return static_cast<To>(d);
    } else {
      return static_cast<To>(v);
    }
  }
}

}  // namespace kiln
