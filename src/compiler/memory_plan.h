// The memory planner: tensor lifetimes over a graph's node order -> offsets in one arena.
// See Note [Memory planning] in memory_plan.cc.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kiln/ir.h"

namespace kiln::compiler {

inline constexpr int64_t kArenaAlignment = 64;

// One buffer to place: `bytes` live from step `first` to step `last`, both inclusive.
struct BufferLifetime {
  int64_t bytes = 0;
  int first = 0;
  int last = 0;
};

// Offsets (kArenaAlignment-aligned) such that no two buffers whose lifetimes intersect overlap:
// best fit, largest first. `arena_bytes` receives the arena size the offsets need.
std::vector<int64_t> assign_offsets(const std::vector<BufferLifetime>& buffers, int64_t& arena_bytes);

// The largest total of (aligned) bytes live at one step: no placement can use less.
int64_t live_set_bound(const std::vector<BufferLifetime>& buffers);

// Where each value of a graph lives.
struct ValuePlacement {
  enum class Kind : uint8_t { input, constant, arena, view };
  Kind kind = Kind::arena;
  int buffer = -1;      // arena and view: the buffer holding the bytes (a view's source's buffer; -1: outside the arena)
  int64_t offset = 0;   // arena: byte offset of the buffer
  int64_t bytes = 0;    // arena: bytes at the largest sizes of the symbols
  bool inplace = false; // arena: shares the buffer of an input that dies at its node
};

// "arena 1.2 MiB = 6.8% of 17.6 MiB of intermediates (lower bound, the largest live set: ...); N
// buffers, ..." -- the plan's one-line report, shared by GraphMemoryPlan and the runtime's MemoryStats.
std::string memory_summary(int64_t arena_bytes, int64_t sum_bytes, int64_t lower_bound, int64_t buffers,
                           int64_t inplace, int64_t views);

struct GraphMemoryPlan {
  std::map<const ir::Value*, ValuePlacement> values;
  std::vector<BufferLifetime> buffers;
  std::vector<int64_t> offsets;       // per buffer
  int64_t arena_bytes = 0;            // planned peak
  int64_t sum_bytes = 0;              // every intermediate in its own (aligned) buffer
  int64_t lower_bound = 0;            // largest live set
  int inplace_count = 0;
  int view_count = 0;
  std::string summary() const;        // "arena 12.3 MiB (41% of 30.0 MiB of intermediates; lower bound 10.1 MiB), ..."
};

// Plans a verified graph. Symbolic dims take their sizes from `symbol_max` (kiln::Error naming a
// symbol missing there). Graph outputs live to the end of the graph.
GraphMemoryPlan plan_memory(const ir::Graph& g, const std::map<std::string, int64_t>& symbol_max);

// Bytes of a value's type with symbols replaced by their sizes.
int64_t value_bytes(const ir::ValueType& t, const std::map<std::string, int64_t>& symbol_max);

}  // namespace kiln::compiler
