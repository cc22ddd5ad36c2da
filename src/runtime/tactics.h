// Tactic selection for engines (Note [Tactics] in include/kiln/runtime.h) and the memory budget
// check: internal to runtime/ (engine.cc's compile calls them).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kiln/runtime.h"

namespace kiln::runtime {

// kiln::Error naming the planned arena, the weights, the packed weights and the budget when their
// sum exceeds target.memory_budget (0: no budget).
void check_memory_budget(const std::string& graph, const Target& target, const BatchRange& batch, int64_t arena_bytes,
                         int64_t weight_bytes, int64_t packed_bytes);

// Note [Tactics per batch bucket]
// For the latency objective a dynamic batch range is timed at both ends (Note [Tuning both ends of
// the batch range]). One tactic serves the whole range when some tactic is within `margin` of the
// fastest at both ends (the one with the lowest sum of times relative to each end's fastest).
// Otherwise the step keeps two: the largest batch's fastest, and the smallest batch's fastest for
// the batches up to where the two cross, each taken as linear in the batch between the ends
// (at least the smallest batch, below the largest). Both packed weights are kept.
struct TacticChoice {
  size_t tactic = 0;             // index into the timed tactics: every batch, or those above small_batch_max
  bool split = false;            // whether small_tactic runs the batches up to small_batch_max
  size_t small_tactic = 0;
  int64_t small_batch_max = 0;
};
// `ms_max`: each tactic's time at batch_max; `ms_min`: at batch_min (empty: only one end was timed).
TacticChoice choose_tactics(const std::vector<double>& ms_max, const std::vector<double>& ms_min, int64_t batch_min,
                            int64_t batch_max, double margin = 0.10);

// Sets EngineStep::tactic for every step whose op has several CPU kernels for its dtype: the
// timing cache's choice, else the fastest timed one (options.autotune), else none (the op's first
// kernel), and its small-batch tactic where one tactic does not fit the range. Reads and updates
// the timing cache file.
TuneReport select_tactics(Engine& e, const CompileOptions& options);

}  // namespace kiln::runtime
