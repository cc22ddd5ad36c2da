// Which store variant a conv tile's epilogue asks for, shared by the AVX2 and AVX-512 tiles (Note
// [A branch-free tile store] in gemm_f32_avx2.cc). Include it after the file's `#pragma GCC
// target(...)`, like avx2_util.h: the function is static, so each ISA's file gets its own copy,
// inlined into its micro-kernels with their accumulators still in registers (a shared out-of-line
// copy would be compiled for the baseline ISA and could not take them).
#pragma once

#include "kernels/cpu/gemm_ukernel.h"

namespace kiln::kernels::cpu {

// Calls store(residual tag, activation tag) once, with the variant `ep` decides: hardswish (which
// comes without a residual: store_activation in conv_direct.cc), or the clamp with the residual
// before it, after it or none.
template <class Store>
static inline void with_tile_store(const ConvTileEpilogueF32& ep, Store&& store) {
  if (ep.act == ConvTileEpilogueF32::Act::hardswish)
    return store(TileResidualTag<TileResidual::none>{}, TileHardswish{});
  switch (tile_residual(&ep)) {
    case TileResidual::none: return store(TileResidualTag<TileResidual::none>{}, TileClamp{});
    case TileResidual::before: return store(TileResidualTag<TileResidual::before>{}, TileClamp{});
    case TileResidual::after: return store(TileResidualTag<TileResidual::after>{}, TileClamp{});
  }
}

}  // namespace kiln::kernels::cpu
