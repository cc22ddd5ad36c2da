// Run-time instruction-set selection for the CPU kernels: AVX-512, AVX2+FMA or scalar, chosen from
// cpuid and the OS's saved register state (xgetbv), never from the build machine's flags.
// KILN_ISA=avx512|avx2|scalar overrides the choice; asking for an ISA the machine lacks is an error.
#pragma once

#include <string_view>
#include <vector>

namespace kiln::kernels::cpu {

enum class Isa { scalar = 0, avx2 = 1, avx512 = 2 };

std::string_view isa_name(Isa isa);
// Parses "avx512", "avx2" or "scalar"; anything else is a kiln::Error naming the choices.
Isa parse_isa(std::string_view name);
// Whether this machine (CPU and OS) can run kernels of `isa`.
bool isa_supported(Isa isa);
// Every supported ISA, best last (scalar is always first).
std::vector<Isa> supported_isas();
// The ISA kernels use now: KILN_ISA when set (checked once), else the best supported one.
Isa active_isa();
// Forces the ISA (tests and benchmarks); an unsupported one is a kiln::Error.
void set_active_isa(Isa isa);

// Sets the ISA for a scope and restores the previous one on exit.
class IsaOverride {
 public:
  explicit IsaOverride(Isa isa) : saved_(active_isa()) { set_active_isa(isa); }
  ~IsaOverride() { set_active_isa(saved_); }
  IsaOverride(const IsaOverride&) = delete;
  IsaOverride& operator=(const IsaOverride&) = delete;

 private:
  Isa saved_;
};

}  // namespace kiln::kernels::cpu
