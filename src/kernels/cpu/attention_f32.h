// f32 attention rows for fused_attention (src/ops/defs/fused/attention.cc): softmax(scale q k^T +
// mask) v for a block of query rows of one (batch, head) entry, with its own register-tiled
// products instead of two general GEMM calls (Note [Attention rows in registers]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/isa.h"

namespace kiln::kernels::cpu {

// One (batch, head) entry. Element strides; q, v and y rows are unit-stride along D / Dv, k may
// have any strides (it is packed), the mask any (0 where broadcast).
struct AttentionF32Args {
  int64_t sq = 0, sk = 0, d = 0, dv = 0;
  const float* q = nullptr;  // q[i, p] = q[i * q_rs + p]
  int64_t q_rs = 0;
  const float* k = nullptr;  // k[j, p] = k[j * k_js + p * k_ps]
  int64_t k_js = 0, k_ps = 0;
  const float* v = nullptr;  // v[j, c] = v[j * v_rs + c]
  int64_t v_rs = 0;
  const float* mask = nullptr;  // mask[i, j] = mask[i * m_rs + j * m_cs]; null: no mask
  int64_t m_rs = 0, m_cs = 0;
  float scale = 1.0f;
  bool zero_nan_rows = false;  // a NaN row of probabilities becomes zeros (fused_attention's attribute)
  float* y = nullptr;  // y[i, c] = y[i * y_rs + c]
  int64_t y_rs = 0;
};

// Floats of workspace attention rows [i0, i0 + rows) need (64-byte alignment not required).
size_t attention_f32_workspace(int64_t rows, int64_t sk, int64_t d, int64_t dv);

// Output rows [i0, i1) of one entry, using `ws` (attention_f32_workspace(i1 - i0, sk, d, dv) floats).
using AttentionRowsF32 = void (*)(const AttentionF32Args& a, int64_t i0, int64_t i1, float* ws);

// The kernel for `isa`, or nullptr where there is none (the op then runs its GEMM-based loop).
AttentionRowsF32 attention_rows_f32(Isa isa);
AttentionRowsF32 attention_rows_f32_avx512();

}  // namespace kiln::kernels::cpu
