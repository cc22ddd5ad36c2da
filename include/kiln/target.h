// What an engine is built for (DESIGN.md: compiler/ targets): the CPU's ISA, its cores and caches,
// the threads the engine runs on, a memory budget and the objective. Tactic selection times
// kernels under the target's ISA and threads and keys its timing cache on them; the memory planner
// must fit the budget; the engine file records the target and refuses to load where it cannot run.
#pragma once

#include <cstdint>
#include <string>

namespace kiln::runtime {

struct Target {
  enum class Objective : uint8_t { latency, throughput };

#if defined(__aarch64__)
  std::string arch = "aarch64";  // "x86_64", "aarch64"
#else
  std::string arch = "x86_64";
#endif
  std::string isa = "scalar";   // the CPU kernels' ISA: "avx512", "avx2", "scalar"
  int cores = 1;                // physical cores (logical CPUs when unknown)
  int threads = 1;              // threads the engine's kernels run on
  int64_t l1d_bytes = 0;        // per core; 0: unknown
  int64_t l2_bytes = 0;         // per core; 0: unknown
  int64_t l3_bytes = 0;         // shared; 0: unknown
  int64_t memory_budget = 0;    // bytes for the arena and the weights; 0: none
  Objective objective = Objective::latency;

  // This machine: the active ISA (KILN_ISA respected), cores and caches from sysfs, threads =
  // kiln's current thread count.
  static Target host();
  // "host", or "<arch>-<isa>" ("x86_64-avx2": build for a lesser machine; cores and caches are the
  // host's). kiln::Error naming the choices for anything else.
  static Target parse(const std::string& spec);

  std::string name() const { return arch + "-" + isa; }  // "x86_64-avx512"
  std::string str() const;  // one line with every field, for reports
  // Whether engines built for this target run here; kiln::Error explaining why not when `why` is null.
  bool runs_here(std::string* why = nullptr) const;
};

const char* objective_name(Target::Objective o);
Target::Objective parse_objective(const std::string& s);  // "latency" | "throughput"
// "64MiB", "1.5GiB", "4096", "512KiB", "2GB"; kiln::Error for anything else.
int64_t parse_bytes(const std::string& s);

}  // namespace kiln::runtime
