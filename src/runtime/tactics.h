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
// the batch range]). The single tactic is the one with the lowest sum of times relative to each
// end's fastest; it serves the whole range when it is within `margin` of the fastest at both ends.
// Otherwise it keeps the end where it is within the margin, the other end gets its own fastest,
// and the two split the range where they cross, each taken as linear in the batch between the
// ends (the small batches' tactic takes at least the smallest batch, never the largest). Both
// packed weights are kept. The margin is wide because the timings are noisy: on a shared host a
// burst can slow every run of one tactic at one end by 10-25% (bench/RESULTS.md), and a split
// trusts one end's timings where the single tactic weighs both.
struct TacticChoice {
  size_t tactic = 0;             // index into the timed tactics: every batch, or those above small_batch_max
  bool split = false;            // whether small_tactic runs the batches up to small_batch_max
  size_t small_tactic = 0;
  int64_t small_batch_max = 0;
};
// `ms_max`: each tactic's time at batch_max; `ms_min`: at batch_min (empty: only one end was timed).
TacticChoice choose_tactics(const std::vector<double>& ms_max, const std::vector<double>& ms_min, int64_t batch_min,
                            int64_t batch_max, double margin = 0.15);

// Whether a depth-first group may take st, running it image by image on each thread (Note
// [Depth-first groups] in executor.cc): a per-sample step whose filters are small beside an
// image's inputs and outputs. Tactic selection times such a step as the group runs it.
bool image_by_image(const Engine& e, const EngineStep& st);

// Sets EngineStep::tactic for every step whose op has several CPU kernels for its dtype: the
// timing cache's choice, else the fastest timed one (options.autotune), else none (the op's first
// kernel), and its small-batch tactic where one tactic does not fit the range. Reads and updates
// the timing cache file.
TuneReport select_tactics(Engine& e, const CompileOptions& options);

}  // namespace kiln::runtime
