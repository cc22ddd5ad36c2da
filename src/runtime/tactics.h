// Tactic selection for engines (Note [Tactics] in include/kiln/runtime.h) and the memory budget
// check: internal to runtime/ (engine.cc's compile calls them).
#pragma once

#include <cstdint>
#include <string>

#include "kiln/runtime.h"

namespace kiln::runtime {

// kiln::Error naming the planned arena, the weights, the packed weights and the budget when their
// sum exceeds target.memory_budget (0: no budget).
void check_memory_budget(const std::string& graph, const Target& target, const BatchRange& batch, int64_t arena_bytes,
                         int64_t weight_bytes, int64_t packed_bytes);

// Sets EngineStep::tactic for every step whose op has several CPU kernels for its dtype: the
// timing cache's choice, else the fastest timed one (options.autotune), else none (the op's first
// kernel). Reads and updates the timing cache file.
TuneReport select_tactics(Engine& e, const CompileOptions& options);

}  // namespace kiln::runtime
