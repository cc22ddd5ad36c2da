// The ISA-independent part of kernels/cpu/attention_f32.h: workspace size and kernel selection.
#include "kernels/cpu/attention_f32.h"

namespace kiln::kernels::cpu {

// Layout (attention_f32_avx512.cc): k^T packed as d rows of skp = sk rounded up to 16 floats, the
// scores / probabilities as `rows` rows of skp, one mask row of skp, 1 / row sum per row (+ 16),
// v packed as sk rows of dv rounded up to 16.
size_t attention_f32_workspace(int64_t rows, int64_t sk, int64_t d, int64_t dv) {
  const int64_t skp = (sk + 15) / 16 * 16, dvp = (dv + 15) / 16 * 16;
  return static_cast<size_t>(d * skp + rows * skp + skp + rows + 16 + sk * dvp);
}

AttentionRowsF32 attention_rows_f32(Isa isa) { return isa == Isa::avx512 ? attention_rows_f32_avx512() : nullptr; }

}  // namespace kiln::kernels::cpu
