// The runtime (DESIGN.md: runtime/): engines and the executor that runs them.
//
// An Engine is what the compiler leaves behind: steps (an op, its attributes, the values it reads
// and writes), packed constants, the memory plan (every intermediate at a fixed offset in one
// arena), the input/output signature with the compiled batch range, and the target it was built
// for. It serializes to a checksummed file (Note [Engine file format] in src/runtime/engine_file.cc)
// and loads back without the compiler. An Executor makes one arena allocation and runs an engine's
// steps through the dispatcher's run_kernel into arena views, optionally timing every step.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kiln/compiler.h"
#include "kiln/core/tensor.h"
#include "kiln/ir.h"
#include "kiln/ops/dispatch.h"
#include "kiln/ops/op_def.h"
#include "kiln/target.h"

namespace kiln::runtime {

// 2: the full Target (ISA, cores, caches, threads, budget, objective) and a tactic per step.
// 3: a second tactic per step for the small batches (Note [Tactics per batch bucket]), and arena
// slots per unit of batch (Note [Arena slots scale with the batch]).
// 4: a blocked convolution's output may share its residual's slot (Note [Residual in place]).
inline constexpr uint32_t kEngineFormatVersion = 4;

// A value the steps read or write.
struct EngineValue {
  enum class Kind : uint8_t { input, constant, arena, view };
  std::string name;
  Kind kind = Kind::arena;
  DType dtype = DType::f32;
  ir::SymShape shape;    // dims static or the batch symbol
  int64_t index = 0;     // input: position in the signature; constant: index into constants
  // Note [Arena slots scale with the batch] (src/runtime/engine.cc): in an engine with a batch
  // symbol, an arena slot is given per unit of batch, planned at batch 1; at batch b it is
  // [b * offset, b * (offset + bytes)). Without one, the slot itself.
  int64_t offset = 0;    // arena: byte offset
  int64_t bytes = 0;     // arena: bytes reserved
};

struct EngineStep {
  std::string name;                 // the node's first output, for profiles
  const OpDef* op = nullptr;
  Attrs attrs;                      // bound
  std::vector<int32_t> inputs;      // value indices; -1: absent optional input
  std::vector<int32_t> outputs;     // value indices
  std::string tactic;               // the kernel's tactic; empty: the op's first kernel (Note [Tactics])
  // Note [Tactics per batch bucket] (src/runtime/tactics.h): a dynamic-batch engine tuned at both
  // ends of its range runs `small_tactic` at batches <= small_batch_max where no one kernel is
  // close to the fastest at both ends (a packed GEMM at batch 1, a direct convolution at 8, say).
  std::string small_tactic;         // empty: `tactic` at every batch
  int64_t small_batch_max = 0;      // set with small_tactic: the largest batch it runs
  // The tactic for a run at `batch` (< 0: an engine without a batch symbol).
  const std::string& tactic_at(int64_t batch) const {
    return !small_tactic.empty() && batch >= 0 && batch <= small_batch_max ? small_tactic : tactic;
  }
};

struct BatchRange {
  std::string symbol;  // empty: the engine has only static shapes
  int64_t min = 1;
  int64_t max = 1;
};

struct MemoryStats {
  int64_t arena_bytes = 0;
  int64_t sum_bytes = 0;     // every intermediate in its own buffer
  int64_t lower_bound = 0;   // the largest live set
  int64_t buffers = 0;
  int64_t inplace = 0;
  int64_t views = 0;
  std::string summary() const;
};

struct Engine {
  std::string name = "main";
  Target target;             // target.name(): "x86_64-avx512"
  std::string kiln_version;  // of the compiler that built it
  std::vector<EngineValue> values;
  std::vector<EngineStep> steps;
  std::vector<Tensor> constants;       // contiguous
  std::vector<int32_t> inputs;         // value indices, signature order
  std::vector<int32_t> outputs;        // value indices
  std::vector<std::string> input_names;   // what users call them (ONNX names)
  std::vector<std::string> output_names;
  BatchRange batch;
  MemoryStats memory;

  // What arena slots are multiplied by at batch b (Note [Arena slots scale with the batch]).
  int64_t arena_scale(int64_t b) const { return batch.symbol.empty() ? 1 : b; }

  std::string signature_str() const;   // "inputs: x f32[batch, 3] ...", with the batch range
  std::string steps_str() const;       // one line per step with its slots
  // Checks every index, offset and op of the engine (what load() relies on); kiln::Error naming the problem.
  void validate() const;

  std::string serialize() const;
  void save(const std::string& path) const;
  // kiln::Error naming what is wrong for a corrupt, truncated, wrong-version or wrong-target file.
  static Engine deserialize(const std::string& bytes, const std::string& source = "<memory>");
  static Engine load(const std::string& path);
};

// This machine's target name: "<arch>-<isa of the CPU kernels>", e.g. "x86_64-avx512".
std::string host_target();
// Whether engines built for target name `target` run here (kiln::Error explaining why not, when
// `why` is null).
bool target_runs_here(const std::string& target, std::string* why = nullptr);

// ---- building (uses the compiler) ------------------------------------------------------------------
struct CompileOptions {
  compiler::PassOptions passes;
  int64_t batch_min = 0;   // 0: the graph's own (symbolic batch: 1..1)
  int64_t batch_max = 0;
  std::vector<std::string> input_names;   // user-facing names (default: the graph's)
  std::vector<std::string> output_names;
  std::optional<Target> target;  // default: Target::host()
  int threads = 0;               // > 0: overrides target.threads (what tactics are timed on)
  // Note [Tactics]: autotuning times every CPU kernel (tactic) of each step that has several, on
  // random inputs at the largest batch (and, for the latency objective, the smallest), and keeps the
  // fastest. Off by default in the library (no
  // timing and no cache file unless asked); `kiln compile` turns it on unless --no-autotune.
  bool autotune = false;
  std::string timing_cache;      // file; empty: default_timing_cache_path(); "none": in memory only
  // Note [Layout choice]: automatic runs regions of convolutions channel-blocked (NCHWc) where the
  // target's CPU kernels are AVX-512 and the layout pass's cost model says a region pays for its
  // conversions; nchw never blocks; nchwc blocks every region it can (at -O2 and above).
  enum class Layout { automatic, nchw, nchwc };
  Layout layout = Layout::automatic;
  int tune_runs = 5;             // timed runs per tactic per step (after one warm-up run) ...
  double tune_ms = 50;           // ... or fewer, once a tactic has used this many milliseconds
  // Tactics never offered, timed or taken by the heuristics (e.g. "winograd", "openblas"): for
  // comparing a kernel against the rest. Each must name some op's CPU tactic; an op's default
  // kernel cannot be left out.
  std::vector<std::string> excluded_tactics;
};
struct TuneReport {
  bool autotune = false;
  std::string cache_path;         // empty: none
  int64_t tuned_steps = 0;        // steps with a choice of tactics
  int64_t hits = 0, misses = 0;   // timing cache
  double ms = 0;                  // spent timing
  int64_t packed_bytes = 0;       // weights' packed copies the tactics keep (Note [Packed weights in the budget])
  std::vector<std::string> warnings;  // unreadable cache file, cache not written, ...
  std::vector<std::string> choices;   // "step 'x' (gemm): prepacked 0.12 ms (default 0.20 ms)"
  std::string summary() const;
};
struct CompileResult {
  Engine engine;
  std::vector<compiler::PassReport> passes;
  std::string memory_summary;
  TuneReport tuning;
};
// $XDG_CACHE_HOME/kiln/timing_cache, else $HOME/.cache/kiln/timing_cache; empty if neither is set.
std::string default_timing_cache_path();
// Optimizes a copy of g, plans its memory and packs it into an engine. The batch symbol is the
// only symbolic dim allowed (the first input's leading dim, or the graph's only symbol).
CompileResult compile(const ir::Graph& g, const CompileOptions& options = {});

// ---- running ---------------------------------------------------------------------------------------
struct LayerTime {
  std::string name;
  std::string op;
  std::string tactic;  // of the last profiled run (empty: the op's first kernel)
  double ms = 0;  // summed over the profiled runs
  int64_t runs = 0;
  std::vector<double> run_ms;  // each profiled run's time, in order
  bool image_by_image = false;  // the last profiled run ran it in a depth-first group
  // The median of run_ms (0 before any run): on a shared machine a mean takes in every run a
  // neighbour slowed.
  double median_ms() const;
};

class Executor {
 public:
  explicit Executor(std::shared_ptr<const Engine> engine);
  const Engine& engine() const { return *engine_; }

  // Inputs in signature order, or by (user-facing or graph) name. Any batch in the compiled range.
  // Returns the outputs in signature order; they own their memory (no arena aliasing).
  std::vector<Tensor> run(const std::vector<Tensor>& inputs);
  std::vector<Tensor> run(const std::map<std::string, Tensor>& inputs);

  void set_profiling(bool on) { profiling_ = on; }
  // One entry per step. A step of a depth-first group (below) is timed image by image; its entry is
  // the sum of those times over the batch divided by the threads that shared them.
  const std::vector<LayerTime>& profile() const { return profile_; }
  void reset_profile();

  // Note [Depth-first groups] (src/runtime/executor.cc): at a batch of 2 or more, runs of
  // per-sample steps run image by image, a thread's images on that thread alone. On by default;
  // KILN_DEPTH_FIRST=0 in the environment (read when an Executor is made) or this turns it off.
  void set_depth_first(bool on) { depth_first_ = on; }
  bool depth_first() const { return depth_first_; }
  // The groups' steps [begin, end), in order (empty when the engine has none).
  std::vector<std::pair<size_t, size_t>> depth_first_groups() const;

 private:
  // Note [Resolved steps] (src/runtime/executor.cc): a step's call resolved at one batch, and its
  // outputs' arena views at that batch.
  struct ResolvedStep {
    bool ready = false;
    ResolvedCall call;            // call.kernel == nullptr: the step goes through run_kernel
    std::vector<Tensor> outputs;  // views of arena_
  };

  // Note [Depth-first groups]: steps [begin, end); their intermediates in a sub-arena per thread.
  struct Group {
    size_t begin = 0, end = 0;
    std::vector<int64_t> sub_offset;  // by value: its byte offset in a sub-arena, or -1 (not in one)
    int64_t sub_bytes = 0;            // a sub-arena: one image's intermediates
    std::vector<ResolvedCall> calls;  // the steps' calls at one image (empty before the first run)
    std::vector<TensorMeta> metas;    // by value: one image's metadata (the group's outputs)
    std::vector<std::vector<Tensor>> views;  // by sub-arena, by value: the intermediates' views
    const StorageImpl* views_of = nullptr;   // the sub-arena storage `views` point into
    bool usable = true;               // false: a step without a resolved kernel; runs batched
  };
  void find_groups();
  bool run_group(Group& g, int64_t batch, int64_t scale);

  std::shared_ptr<const Engine> engine_;
  Storage arena_;
  std::vector<Tensor> env_;
  std::map<int64_t, std::vector<ResolvedStep>> resolved_;  // by batch (-1: no batch symbol)
  bool profiling_ = false;
  std::vector<LayerTime> profile_;
  bool depth_first_ = true;
  std::vector<Group> groups_;
  std::vector<int> group_at_;  // by step: the group beginning there, or -1
  Storage sub_arena_;          // the threads' sub-arenas, one after another
  int64_t spare_bytes_ = -1;   // the target's memory budget less the arena and the weights (-1: no budget)
};

}  // namespace kiln::runtime
