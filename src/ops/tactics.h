// Hooks the runtime uses for the extra kernel tactics (src/ops/defs/linalg/matmul_tactics.cc):
// packing a constant weight when an engine is loaded, and the packed-weight cache's size.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kiln/ops/op_def.h"

namespace kiln {

// An "activation" attribute (fused_gemm, fused_conv2d and the blocked convolutions) as the
// kernels' epilogue activation; an unknown name fails ("fused_gemm: unknown activation ...").
kernels::cpu::GemmActivation parse_activation(const std::string& s);

// Tactics that keep a packed copy of the step's constant weight (input 1): "prepacked", "direct",
// "direct_columns", "direct_pixels".
bool tactic_packs_weight(const std::string& tactic);
// Whether `tactic` of `op` (with bound `attrs`) has a fast path for a weight (input 1) of this
// shape on a first input of rank x_rank, or would only run the op's default kernel (depthwise
// convolutions: the packed tactics are GEMM-shaped; the blocked convolution's panel widths where K
// is a multiple of 64, its Winograd tiles on a stem's plain NCHW input); the tuner offers only
// tactics that fit.
bool tactic_fits(const OpDef& op, const std::string& tactic, const Attrs& attrs, const Shape& weight, size_t x_rank);
// Bytes of the packed copy of a constant weight (input 1, shape `weight`) that `tactic` of `op` with
// bound `attrs` keeps, on a first input of rank x_rank; "" or "default": the op's own kernel. 0 where
// it keeps none. For the memory budget (Note [Packed weights in the budget] in runtime/tactics.cc).
int64_t packed_weight_bytes(const OpDef& op, const std::string& tactic, const Attrs& attrs, const Shape& weight,
                            size_t x_rank);
// Packs `weight` (the step's input 1, a constant) for `tactic` of `op` with bound `attrs`, so the
// first run finds it packed (Note [Prepacked tactics]). False when the tactic packs nothing or the
// weight does not fit its fast path (the kernel then runs its default at run time).
bool prepack_weight(const OpDef& op, const std::string& tactic, const Tensor& weight, const Attrs& attrs);
// The packed copy of weight `w` for a kernel outside the tactics (the blocked convolution), from the
// same process-wide cache: `layout` keys what was packed (a tag, then sizes), `pack` fills `floats`
// 64-byte-aligned floats on a miss.
std::shared_ptr<const float> cached_packed_weight_f32(const Tensor& w, std::vector<int64_t> layout, size_t floats,
                                                      const std::function<void(float*)>& pack);
// Packed weights alive in the process-wide cache (tests: packing happens once, not per run).
int64_t prepacked_weight_count();
// Calls in which an extra tactic ran the op's default kernel instead (a shape or layout its fast
// path does not take; tests: chosen tactics really run inside engines).
int64_t tactic_fallback_count();

}  // namespace kiln
