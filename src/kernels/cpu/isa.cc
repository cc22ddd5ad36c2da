// cpuid/xgetbv feature detection and the KILN_ISA override (see isa.h).
#include "kernels/cpu/isa.h"

#include <atomic>
#include <cpuid.h>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "kiln/core/error.h"

namespace kiln::kernels::cpu {

namespace {

// Note [ISA detection]
// A CPU flag is not enough: the OS must also save the wider registers on context switches, which
// xgetbv(0) reports (bits 1-2: SSE/AVX state; bits 5-7: opmask and the upper zmm halves). Without
// that, AVX instructions fault even on a CPU that has them (e.g. some VMs).
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

struct Features {
  bool avx2 = false, avx512 = false;
};

Features detect() {
  Features f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, avx = (c >> 28) & 1;
  if (!osxsave || !avx) return f;
  const uint64_t xcr0 = xgetbv0();
  const bool os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const bool avx2 = (b >> 5) & 1;
  const bool avx512f = (b >> 16) & 1, avx512dq = (b >> 17) & 1, avx512bw = (b >> 30) & 1, avx512vl = (b >> 31) & 1;
  f.avx2 = os_avx && avx2 && fma;
  f.avx512 = f.avx2 && os_avx512 && avx512f && avx512dq && avx512bw && avx512vl;
  return f;
}

const Features& features() {
  static const Features f = detect();
  return f;
}

Isa best_isa() {
  if (features().avx512) return Isa::avx512;
  if (features().avx2) return Isa::avx2;
  return Isa::scalar;
}

Isa initial_isa() {
  const char* env = std::getenv("KILN_ISA");
  if (env == nullptr || *env == '\0') return best_isa();
  Isa isa = parse_isa(env);
  KILN_CHECK(isa_supported(isa), "KILN_ISA=", env, " asks for ", isa_name(isa),
             " kernels but this machine does not support them (best available: ", isa_name(best_isa()),
             "); unset KILN_ISA or choose a supported one");
  return isa;
}

std::atomic<int>& current() {
  static std::atomic<int> isa{static_cast<int>(initial_isa())};
  return isa;
}

}  // namespace

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx512: return "avx512";
    case Isa::avx2: return "avx2";
    case Isa::scalar: return "scalar";
  }
  return "unknown";
}

Isa parse_isa(std::string_view name) {
  if (name == "avx512") return Isa::avx512;
  if (name == "avx2") return Isa::avx2;
  if (name == "scalar") return Isa::scalar;
  KILN_FAIL("unknown ISA '", std::string(name), "': expected one of avx512, avx2, scalar (KILN_ISA)");
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::avx512: return features().avx512;
    case Isa::avx2: return features().avx2;
    case Isa::scalar: return true;
  }
  return false;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out{Isa::scalar};
  if (isa_supported(Isa::avx2)) out.push_back(Isa::avx2);
  if (isa_supported(Isa::avx512)) out.push_back(Isa::avx512);
  return out;
}

Isa active_isa() { return static_cast<Isa>(current().load(std::memory_order_relaxed)); }

void set_active_isa(Isa isa) {
  KILN_CHECK(isa_supported(isa), "cannot select ", isa_name(isa), " kernels: this machine does not support them");
  current().store(static_cast<int>(isa), std::memory_order_relaxed);
}

}  // namespace kiln::kernels::cpu
