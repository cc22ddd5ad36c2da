// A number that is not a tensor: the `2` in x * 2. Keeps whether it was integral, floating or
// bool, which decides type promotion (an int tensor times 2.5 is f32, an f16 tensor times 2.0
// stays f16, as in PyTorch).
#pragma once

#include <cstdint>
#include <type_traits>

#include "kiln/core/dtype.h"

namespace kiln {

class Scalar {
 public:
  enum class Kind : uint8_t { floating, integral, boolean };
  Scalar() = default;
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Scalar(T v) {  // NOLINT: implicit on purpose, like a number literal
    if constexpr (std::is_same_v<T, bool>) {
      kind_ = Kind::boolean; i_ = v; d_ = v;
    } else if constexpr (std::is_floating_point_v<T>) {
      kind_ = Kind::floating; d_ = static_cast<double>(v); i_ = 0;
    } else {
      kind_ = Kind::integral; i_ = static_cast<int64_t>(v); d_ = static_cast<double>(v);
    }
  }
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}      // NOLINT
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}  // NOLINT
  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::floating; }
  double to_double() const { return d_; }
  int64_t to_int() const { return kind_ == Kind::floating ? static_cast<int64_t>(d_) : i_; }
  template <class T>
  T to() const {
    if (kind_ == Kind::floating) return convert<T>(d_);
    return convert<T>(i_);
  }
  // The dtype this scalar takes when combined with a tensor of dtype `t`.
  DType result_type_with(DType t) const;

 private:
  Kind kind_ = Kind::integral;
  int64_t i_ = 0;
  double d_ = 0;
};

}  // namespace kiln
