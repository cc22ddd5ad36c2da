// vmath's scalar kernel set and the per-ISA table lookup (see vmath.h). The scalar set computes in
// double with the C library and rounds once, so it is the accurate fallback for machines without
// AVX2 and follows the same special-value rules as the vector sets (vmath.h).
#include "kernels/cpu/vmath.h"

#include <algorithm>
#include <cmath>
#include <functional>

namespace kiln::kernels::cpu {

namespace {

// silu, gelu and gelu_tanh of -inf are NaN, as in float64 (-inf * 0; vmath.h).
double sigmoid_s(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu_s(double x) { return x == -HUGE_VAL ? NAN : std::max(x, -200.0) / (1.0 + std::exp(-x)); }
double gelu_s(double x) {
  const double xc = x == -HUGE_VAL ? NAN : std::max(x, -40.0);
  return 0.5 * xc * std::erfc(-xc * 0.70710678118654752440);
}
double gelu_tanh_s(double x) {
  const double xc = x == -HUGE_VAL ? NAN : std::max(x, -40.0);
  const double u = 0.79788456080286535588 * (xc + 0.044715 * xc * xc * xc);
  return xc / (1.0 + std::exp(-2.0 * u));
}

// NaN in, NaN out (std::max(NaN, c) returns c).
template <double (*Fn)(double)>
float apply_s(float x) {
  return x != x ? x : static_cast<float>(Fn(static_cast<double>(x)));
}

double exp_d(double x) { return std::exp(x); }
double log_d(double x) { return std::log(x); }
double tanh_d(double x) { return std::tanh(x); }
double erf_d(double x) { return std::erf(x); }

template <float (*Fn)(float)>
void unary_s(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Fn(x[i]);
}

double exp_shift_sum_s(const float* x, float* y, int64_t n, float shift) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = static_cast<float>(std::exp(static_cast<double>(x[i]) - static_cast<double>(shift)));
    sum += static_cast<double>(y[i]);
  }
  return sum;
}

float max_s(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 0; i < n; ++i) {
    if (x[i] != x[i]) return x[i];
    m = x[i] > m ? x[i] : m;
  }
  return m;
}

float relu_s(float v) { return v < 0.0f ? 0.0f : v; }
float relu6_s(float v) { return v < 0.0f ? 0.0f : (v > 6.0f ? 6.0f : v); }
float none_s(float v) { return v; }
float hardswish_s(float v) {  // in f32, as the hardswish op: x * clamp(x + 3, 0, 6) / 6
  float t = v + 3.0f;
  t = t < 0.0f ? 0.0f : (t > 6.0f ? 6.0f : t);
  return v * t / 6.0f;
}

template <float (*Act)(float)>
void epilogue_s(float* y, int64_t ldy, int64_t m, int64_t n, const float* row_bias, const float* col_bias,
                const float* res, int64_t ldr, bool res_before) {
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float v = y[i * ldy + j];
      if (row_bias) v += row_bias[i];
      if (col_bias) v += col_bias[j];
      if (!res) {
        y[i * ldy + j] = Act(v);
      } else {
        const float r = res[i * ldr + j];
        y[i * ldy + j] = res_before ? Act(v + r) : Act(v) + r;
      }
    }
}

template <class Op>
void binary_s(const float* a, int64_t sa, const float* b, int64_t sb, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = Op{}(a[i * sa], b[i * sb]);
}

const VmathKernelsF32 kScalar{
    Isa::scalar,
    {unary_s<apply_s<exp_d>>, unary_s<apply_s<log_d>>, unary_s<apply_s<tanh_d>>, unary_s<apply_s<sigmoid_s>>,
     unary_s<apply_s<erf_d>>, unary_s<apply_s<gelu_s>>, unary_s<apply_s<gelu_tanh_s>>, unary_s<apply_s<silu_s>>},
    exp_shift_sum_s,
    max_s,
    {epilogue_s<none_s>, epilogue_s<relu_s>, epilogue_s<relu6_s>, epilogue_s<apply_s<sigmoid_s>>,
     epilogue_s<apply_s<tanh_d>>, epilogue_s<apply_s<silu_s>>, epilogue_s<apply_s<gelu_s>>,
     epilogue_s<apply_s<gelu_tanh_s>>, epilogue_s<hardswish_s>},
    {binary_s<std::plus<float>>, binary_s<std::minus<float>>, binary_s<std::multiplies<float>>,
     binary_s<std::divides<float>>}};

}  // namespace

const VmathKernelsF32& vmath_kernels_f32_scalar() { return kScalar; }

const VmathKernelsF32& vmath_kernels_f32(Isa isa) {
  switch (isa) {
    case Isa::avx512: return vmath_kernels_f32_avx512();
    case Isa::avx2: return vmath_kernels_f32_avx2();
    case Isa::scalar: break;
  }
  return kScalar;
}

}  // namespace kiln::kernels::cpu
