// Scans.
#pragma once

#include "kiln/core/tensor.h"

namespace kiln {

// Running sum along `axis`. exclusive: out[i] excludes x[i]; reverse: sums from the end.
// Floating inputs accumulate in f64 for f32/f16/bf16; bool/integers give i64.
Tensor cumsum(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false,
              SourceLoc loc = KILN_HERE);
// Running product along `axis` (src/ops/defs/scan/cumprod.cc); exclusive and reverse as cumsum.
// Floating inputs accumulate in f64; bool/integers give i64 (products wrap modulo 2^64).
Tensor cumprod(const Tensor& x, int64_t axis, bool exclusive = false, bool reverse = false,
               SourceLoc loc = KILN_HERE);

}  // namespace kiln
