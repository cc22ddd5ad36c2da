// 16-bit floating types stored as bits; arithmetic happens in float.
#pragma once

#include <cstdint>
#include <cstring>

namespace kiln {

namespace detail {
inline uint32_t float_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_float(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// IEEE binary16 <-> binary32 with round-to-nearest-even, subnormals, inf and NaN.
inline uint16_t float_to_half_bits(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mag = x & 0x7fffffffu;
  if (mag >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (mag > 0x7f800000u ? 0x200u : 0u));
  }
  if (mag >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (mag < 0x38800000u) {  // subnormal or zero in half
    // value = mag_float; half subnormal unit is 2^-24
    float af = bits_float(mag);
    // scale so that 1 unit of half subnormal becomes 1.0 and round to nearest even via float add
    float scaled = af * 16777216.0f;  // 2^24
    uint32_t r = static_cast<uint32_t>(scaled);
    float frac = scaled - static_cast<float>(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t exp = ((mag >> 23) - 127 + 15);
  uint32_t mant = mag & 0x7fffffu;
  uint32_t h = (exp << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
  return static_cast<uint16_t>(sign | h);
}

inline float half_bits_to_float(uint16_t h) {
  uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = static_cast<float>(mant) * (1.0f / 16777216.0f);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

inline uint16_t float_to_bf16_bits(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}
inline float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }
}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  Half(float f) : bits(detail::float_to_half_bits(f)) {}  // NOLINT: implicit like a float type
  operator float() const { return detail::half_bits_to_float(bits); }
  static Half from_bits(uint16_t b) { Half h; h.bits = b; return h; }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  BFloat16(float f) : bits(detail::float_to_bf16_bits(f)) {}  // NOLINT
  operator float() const { return detail::bf16_bits_to_float(bits); }
  static BFloat16 from_bits(uint16_t b) { BFloat16 h; h.bits = b; return h; }
};

}  // namespace kiln
