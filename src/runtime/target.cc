// Target: the host's description (sysfs caches and topology, the active ISA) and parsing of
// `--target`, `--memory-budget` and the objective.
#include "kiln/target.h"

#include <cctype>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "kernels/cpu/isa.h"
#include "kiln/core/error.h"
#include "kiln/core/thread_pool.h"
#include "kiln/runtime.h"

namespace kiln::runtime {

namespace {

std::string host_arch() {
#if defined(__x86_64__) || defined(_M_X64)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

bool read_line(const std::string& path, std::string& out) {
  std::ifstream f(path);
  return f && std::getline(f, out);
}

// sysfs cache sizes look like "48K", "2048K", "32M".
int64_t sysfs_size(const std::string& s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return 0;
  int64_t v = std::stoll(s);
  char unit = s.back();
  if (unit == 'K') v *= 1024;
  else if (unit == 'M') v *= 1024 * 1024;
  else if (unit == 'G') v *= int64_t{1024} * 1024 * 1024;
  return v;
}

void read_caches(Target& t) {
  for (int i = 0; i < 8; ++i) {
    std::string dir = "/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(i) + "/";
    std::string level, type, size;
    if (!read_line(dir + "level", level) || !read_line(dir + "type", type) || !read_line(dir + "size", size)) continue;
    int64_t bytes = sysfs_size(size);
    if (level == "1" && (type == "Data" || type == "Unified")) t.l1d_bytes = bytes;
    else if (level == "2") t.l2_bytes = bytes;
    else if (level == "3") t.l3_bytes = bytes;
  }
}

int physical_cores() {
  const unsigned logical = std::max(1u, std::thread::hardware_concurrency());
  std::set<std::pair<std::string, std::string>> cores;
  for (unsigned c = 0; c < logical; ++c) {
    std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    std::string pkg, core;
    if (read_line(dir + "physical_package_id", pkg) && read_line(dir + "core_id", core)) cores.insert({pkg, core});
  }
  return cores.empty() ? static_cast<int>(logical) : static_cast<int>(cores.size());
}

}  // namespace

Target Target::host() {
  Target t;
  t.arch = host_arch();
  t.isa = std::string(kernels::cpu::isa_name(kernels::cpu::active_isa()));
  t.cores = physical_cores();
  t.threads = std::max(1, get_num_threads());
  read_caches(t);
  return t;
}

Target Target::parse(const std::string& spec) {
  Target t = host();
  if (spec == "host") return t;
  auto dash = spec.find('-');
  KILN_CHECK(dash != std::string::npos && dash > 0 && dash + 1 < spec.size(), "target '", spec,
             "' is neither 'host' nor of the form <arch>-<isa> (e.g. ", t.name(), ", ", t.arch, "-avx2, ", t.arch,
             "-scalar)");
  std::string arch = spec.substr(0, dash), isa = spec.substr(dash + 1);
  KILN_CHECK(arch == t.arch, "target '", spec, "': kiln builds engines for this machine's architecture (", t.arch,
             ") only; got '", arch, "'");
  try {
    t.isa = std::string(kernels::cpu::isa_name(kernels::cpu::parse_isa(isa)));
  } catch (const Error& e) {
    KILN_FAIL("target '", spec, "': ", e.what());
  }
  return t;
}

std::string Target::str() const {
  auto kib = [](int64_t b) { return b ? std::to_string(b / 1024) + " KiB" : std::string("?"); };
  std::ostringstream os;
  os << name() << ", " << cores << " cores, " << threads << " thread" << (threads == 1 ? "" : "s") << ", L1d "
     << kib(l1d_bytes) << ", L2 " << kib(l2_bytes) << ", L3 " << kib(l3_bytes) << ", memory budget ";
  if (memory_budget) os << memory_budget << " B";
  else os << "none";
  os << ", objective " << objective_name(objective);
  return os.str();
}

bool Target::runs_here(std::string* why) const {
  auto fail = [&](const std::string& msg) {
    if (why) {
      *why = msg;
      return false;
    }
    KILN_FAIL(msg);
  };
  const std::string here = host_arch();
  if (arch != here)
    return fail("engine was built for " + name() + " but this machine is " + here + " (" + Target::host().name() +
                "); recompile the model here");
  for (auto supported : kernels::cpu::supported_isas())
    if (kernels::cpu::isa_name(supported) == isa) return true;
  std::string have;
  for (auto supported : kernels::cpu::supported_isas())
    have += (have.empty() ? "" : ", ") + std::string(kernels::cpu::isa_name(supported));
  return fail("engine was built for " + name() + " but this CPU supports only " + have +
              "; recompile the model here (or build it with --target " + here + "-<one of those>)");
}

const char* objective_name(Target::Objective o) { return o == Target::Objective::latency ? "latency" : "throughput"; }

Target::Objective parse_objective(const std::string& s) {
  if (s == "latency") return Target::Objective::latency;
  if (s == "throughput") return Target::Objective::throughput;
  KILN_FAIL("objective '", s, "' is neither 'latency' nor 'throughput'");
}

int64_t parse_bytes(const std::string& s) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  std::string num = s.substr(0, i), unit = s.substr(i);
  while (!unit.empty() && unit.front() == ' ') unit.erase(unit.begin());
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  else if (unit == "KiB" || unit == "K") scale = 1024.0;
  else if (unit == "MiB" || unit == "M") scale = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "KB") scale = 1e3;
  else if (unit == "MB") scale = 1e6;
  else if (unit == "GB") scale = 1e9;
  char* end = nullptr;
  double v = num.empty() ? -1 : std::strtod(num.c_str(), &end);
  KILN_CHECK(scale > 0 && v >= 0 && end && *end == '\0' && v * scale < 9.2e18, "memory size '", s,
             "' is not a size (examples: 4096, 512KiB, 64MiB, 1.5GiB, 2GB)");
  return static_cast<int64_t>(std::llround(v * scale));
}

// The engine-file form of a target, "<arch>-<isa>" (kiln/runtime.h).
std::string host_target() { return host_arch() + "-" + std::string(kernels::cpu::isa_name(kernels::cpu::active_isa())); }

bool target_runs_here(const std::string& target, std::string* why) {
  auto dash = target.find('-');
  if (dash == std::string::npos) {
    std::string msg = "engine target '" + target + "' is not of the form <arch>-<isa> (e.g. " + host_target() + ")";
    if (why) {
      *why = msg;
      return false;
    }
    KILN_FAIL(msg);
  }
  Target t;
  t.arch = target.substr(0, dash);
  t.isa = target.substr(dash + 1);
  return t.runs_here(why);
}

}  // namespace kiln::runtime
