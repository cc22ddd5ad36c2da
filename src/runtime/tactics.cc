// Tactic selection with a timing cache (Note [Tactics] in include/kiln/runtime.h, Note [Timing
// cache] below) and the memory budget check.
#include "runtime/tactics.h"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "kernels/cpu/isa.h"
#include "kiln/core/thread_pool.h"
#include "kiln/ops/dispatch.h"
#include "ops/tactics.h"

namespace kiln::runtime {

namespace {

std::string mib(int64_t b) {
  char s[48];
  std::snprintf(s, sizeof s, "%.2f MiB", static_cast<double>(b) / (1024.0 * 1024.0));
  return s;
}

// Note [Timing cache]
// A text file: the line "kiln-timing-cache 2", then one line per timed configuration,
//   <key> TAB <choice> TAB <tactic>=<ms>,<tactic>=<ms>,...
// where the choice is a tactic, or "<tactic>;<small-batch tactic><=<largest small batch>" (Note
// [Tactics per batch bucket]; version 1 files, from before the buckets, are not read).
// The key is the op, its bound attributes, each input's dtype and shape at the largest batch
// (with "@const" for constant weights: some tactics need them), the ISA and the thread count.
// A file that does not parse is ignored with a warning (and rewritten after the next timing); a
// hit whose tactic this kiln no longer has counts as a miss.
//
// Each key ends in "|build=<id>", the ELF build ID of the binary holding kiln's kernels: a kiln
// rebuilt with faster or slower kernels under the same tactic names (the Winograd tiles' chunking,
// say) would otherwise keep the old build's choices. Entries of another build are dropped when
// the file is read, with a warning, and the file is rewritten with this build's. Where the linker
// wrote no build ID the id is "unknown" and builds share entries, as before.
constexpr const char* kCacheHeader = "kiln-timing-cache 2";

// The GNU build ID (hex) of the loaded object that holds this function, or "unknown".
int find_build_id(dl_phdr_info* info, size_t, void* data) {
  auto* want = static_cast<std::pair<uintptr_t, std::string>*>(data);
  bool mine = false;
  for (int i = 0; i < info->dlpi_phnum && !mine; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    const uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    mine = ph.p_type == PT_LOAD && want->first >= lo && want->first < lo + ph.p_memsz;
  }
  if (!mine) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    // Notes padded to the segment's alignment (4, or 8 for .note.gnu.property), as offsets so
    // that a malformed size never forms a pointer past the segment.
    const auto* base = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
    const size_t size = ph.p_memsz, pad = ph.p_align == 8 ? 7 : 3;
    for (size_t at = 0; at + sizeof(ElfW(Nhdr)) <= size;) {
      ElfW(Nhdr) n;
      std::memcpy(&n, base + at, sizeof n);
      const size_t name = at + sizeof n, desc = name + ((n.n_namesz + pad) & ~pad);
      if (desc > size || n.n_descsz > size - desc) break;
      if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 && std::memcmp(base + name, "GNU", 4) == 0) {
        static constexpr char kHex[] = "0123456789abcdef";
        for (size_t k = 0; k < n.n_descsz; ++k) want->second += {kHex[base[desc + k] >> 4], kHex[base[desc + k] & 15]};
        return 1;
      }
      at = desc + ((n.n_descsz + pad) & ~pad);
    }
  }
  return 1;
}

const std::string& kernels_build_id() {
  static const std::string id = [] {
    std::pair<uintptr_t, std::string> want{reinterpret_cast<uintptr_t>(&find_build_id), std::string()};
    dl_iterate_phdr(find_build_id, &want);
    return want.second.empty() ? std::string("unknown") : want.second;
  }();
  return id;
}

constexpr const char* kBuildMark = "|build=";

struct CacheEntry {
  std::string best;
  std::string timings;
};

// A cache entry's choice: "direct" or "direct;prepacked<=3". False if it does not parse.
struct CachedChoice {
  std::string tactic, small_tactic;
  int64_t small_batch_max = 0;
};
std::string choice_str(const CachedChoice& c) {
  return c.small_tactic.empty() ? c.tactic : c.tactic + ";" + c.small_tactic + "<=" + std::to_string(c.small_batch_max);
}
bool parse_choice(const std::string& s, CachedChoice& c) {
  c = CachedChoice{};
  const size_t semi = s.find(';');
  c.tactic = s.substr(0, semi);
  if (semi == std::string::npos) return !c.tactic.empty();
  const size_t le = s.find("<=", semi);
  if (le == std::string::npos) return false;
  c.small_tactic = s.substr(semi + 1, le - semi - 1);
  const std::string n = s.substr(le + 2);
  if (c.tactic.empty() || c.small_tactic.empty() || n.empty() || n.size() > 18 ||
      n.find_first_not_of("0123456789") != std::string::npos)
    return false;
  c.small_batch_max = std::stoll(n);
  return true;
}
using Cache = std::map<std::string, CacheEntry>;

std::string clean(std::string s) {
  for (char& c : s)
    if (c == '\t' || c == '\n' || c == '\r') c = ' ';
  return s;
}

bool load_cache(const std::string& path, Cache& cache, std::vector<std::string>& warnings) {
  std::ifstream f(path);
  if (!f) return false;  // no file yet
  std::string line;
  int64_t lineno = 0, other_builds = 0;
  Cache loaded;
  auto corrupt = [&](const std::string& why) {
    warnings.push_back("timing cache '" + path + "' is unreadable at line " + std::to_string(lineno) + " (" + why +
                       "); ignoring it, it will be rewritten");
    return false;
  };
  while (std::getline(f, line)) {
    ++lineno;
    if (lineno == 1) {
      if (line == "kiln-timing-cache 1") {
        warnings.push_back("timing cache '" + path + "' was written by an older kiln (format 1, one tactic per " +
                           "step); ignoring it, it will be rewritten");
        return false;
      }
      if (line != kCacheHeader) return corrupt("expected the header \"" + std::string(kCacheHeader) + "\"");
      continue;
    }
    if (line.empty()) continue;
    auto t1 = line.find('\t');
    auto t2 = t1 == std::string::npos ? t1 : line.find('\t', t1 + 1);
    if (t2 == std::string::npos || line.find('\t', t2 + 1) != std::string::npos || t1 == 0 || t2 == t1 + 1)
      return corrupt("expected <key> TAB <tactic> TAB <timings>");
    const std::string key = line.substr(0, t1);
    const size_t mark = key.rfind(kBuildMark);
    if (mark == std::string::npos || key.compare(mark + std::strlen(kBuildMark), std::string::npos, kernels_build_id()) != 0) {
      ++other_builds;
      continue;
    }
    loaded[key] = CacheEntry{line.substr(t1 + 1, t2 - t1 - 1), line.substr(t2 + 1)};
  }
  if (lineno == 0) return corrupt("empty file");
  if (other_builds > 0)
    warnings.push_back("timing cache '" + path + "': " + std::to_string(other_builds) +
                       " entries from another kiln build ignored (its kernels may time differently); they are "
                       "timed again and the file is rewritten");
  cache = std::move(loaded);
  return true;
}

void save_cache(const std::string& path, const Cache& cache, std::vector<std::string>& warnings) {
  std::error_code ec;
  std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  std::string tmp = path + ".tmp" + std::to_string(static_cast<long long>(
                                        std::chrono::steady_clock::now().time_since_epoch().count()));
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) {
      warnings.push_back("cannot write the timing cache '" + path + "' (" +
                         (ec ? ec.message() : std::string("cannot create ") + tmp) + "); timings not kept");
      return;
    }
    f << kCacheHeader << "\n";
    for (const auto& [key, entry] : cache) f << key << "\t" << entry.best << "\t" << entry.timings << "\n";
    if (!f.good()) {
      warnings.push_back("writing the timing cache '" + tmp + "' failed; timings not kept");
      return;
    }
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    warnings.push_back("cannot replace the timing cache '" + path + "': " + ec.message());
    std::filesystem::remove(tmp, ec);
  }
}

int64_t resolve(const ir::Dim& d, int64_t batch) { return d.is_symbolic() ? d.scale * batch : d.size; }

Shape max_shape(const EngineValue& v, int64_t batch) {
  Shape s;
  for (const ir::Dim& d : v.shape) s.push_back(resolve(d, batch));
  return s;
}

DType key_dtype(const Engine& e, const EngineStep& st) {
  int key = st.op->dtype_key_index();
  if (key >= 0 && static_cast<size_t>(key) < st.inputs.size() && st.inputs[static_cast<size_t>(key)] >= 0)
    return e.values[static_cast<size_t>(st.inputs[static_cast<size_t>(key)])].dtype;
  return e.values[static_cast<size_t>(st.outputs[0])].dtype;
}

// The step's CPU tactics for its dtype, in registration order (the first is the heuristic default).
// "prepacked" tactics need a constant weight (input 1): Note [Prepacked tactics] in
// src/ops/defs/linalg/matmul_tactics.cc.
std::vector<std::string> candidate_tactics(const Engine& e, const EngineStep& st, DType dt) {
  std::vector<std::string> out;
  const bool const_weight = st.inputs.size() > 1 && st.inputs[1] >= 0 &&
                            e.values[static_cast<size_t>(st.inputs[1])].kind == EngineValue::Kind::constant;
  for (const KernelEntry& k : st.op->kernels()) {
    if (k.device != DeviceType::cpu || !k.dtypes.contains(dt)) continue;
    if (tactic_packs_weight(k.tactic) && !const_weight) continue;
    if (const_weight && !tactic_fits(*st.op, k.tactic, st.attrs,
                                     max_shape(e.values[static_cast<size_t>(st.inputs[1])], e.batch.max),
                                     e.values[static_cast<size_t>(st.inputs[0])].shape.size()))
      continue;
    if (std::find(out.begin(), out.end(), k.tactic) == out.end()) out.push_back(k.tactic);
  }
  return out;
}

// Note [Tactics timed as the step runs]
// At batch 8 a step that a depth-first group takes (Note [Depth-first groups] in executor.cc) runs
// one image at a time on each thread, its kernel inline; timed on the whole batch split between
// the threads it was judged on work it never does. DenseNet-121's 128 -> 32 3x3 layers at 14 x 14
// took Winograd by that timing and ran 0.28-0.29 ms at batch 8 in the engine, where the direct
// kernel runs 0.25-0.26 (ORT 0.25). So such a step's largest batch is timed as the group runs it:
// an image on every thread at once, the time scaled by the images a thread runs. Engines compiled
// so against those compiled before, alternating (`bench/ab_engines.py`, two threads, medians of 5-10
// rounds): DenseNet-121 40 Winograd steps fewer, 97.2 -> 96.0 ms at batch 8, 13.18 -> 12.86 at
// batch 1; ResNet-50 121.3 -> 119.7 at batch 8, even at 1; MobileNetV4-Medium 28.44 -> 28.19 at
// batch 8, even at 1; MobileNetV2 even.
bool per_image(const Engine& e, const EngineStep& st) {
  return e.batch.max >= std::max(2, e.target.threads) && image_by_image(e, st);
}

// The candidates are part of the key: a kiln with a new tactic times the step again instead of
// reusing a choice made without it.
std::string cache_key(const Engine& e, const EngineStep& st, const Target& t, const std::vector<std::string>& tactics) {
  std::ostringstream os;
  os << st.op->name() << "[";
  for (size_t i = 0; i < tactics.size(); ++i) os << (i ? "," : "") << tactics[i];
  os << "]|";
  bool first = true;
  for (const auto& [k, v] : st.attrs.values()) {
    os << (first ? "" : ",") << k << "=" << attr_value_str(v);
    first = false;
  }
  os << "|";
  for (size_t i = 0; i < st.inputs.size(); ++i) {
    if (i) os << ",";
    if (st.inputs[i] < 0) {
      os << "_";
      continue;
    }
    const EngineValue& v = e.values[static_cast<size_t>(st.inputs[i])];
    os << dtype_name(v.dtype) << shape_str(max_shape(v, e.batch.max));
    if (v.kind == EngineValue::Kind::constant) os << "@const";
  }
  os << "|" << t.name() << "|t" << t.threads;
  // Note [Tuning both ends of the batch range]: what is timed depends on the range and the objective.
  if (!e.batch.symbol.empty()) os << "|b" << e.batch.min << ":" << e.batch.max << "|" << objective_name(t.objective);
  if (per_image(e, st)) os << "|image by image";  // Note [Tactics timed as the step runs]
  os << kBuildMark << kernels_build_id();  // last: load_cache reads it there
  return clean(os.str());
}

double elapsed_ms(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Times each tactic on the step's shapes at batch `batch`: constants as they are, every other
// input random in [0.5, 1.5) (never zero). One warm-up run each (a prepacked tactic packs there),
// then up to `runs` rounds, or until each tactic has used `budget_ms` on average, of one timed run
// of every tactic in turn; a tactic's time is its fastest run. Taking turns puts every tactic in
// the same stretches of a shared machine's noise (timed one after another, a tactic that ran
// while a neighbour was busy lost to one that ran after), and each run starts after another
// tactic's, with caches as disturbed as between an engine's steps.
std::vector<double> time_tactics(const Engine& e, const EngineStep& st, const std::vector<std::string>& tactics,
                                 int64_t batch, int runs, double budget_ms, bool image_each) {
  // Note [Tactics timed as the step runs]: image_each, one image on every thread at once, the
  // time scaled to the batch's (each thread's images one after another).
  const int copies = image_each ? std::max(1, get_num_threads()) : 1;
  const double images_a_thread = image_each ? static_cast<double>((batch + copies - 1) / copies) : 1.0;
  if (image_each) batch = 1;
  std::vector<OpCall> calls;
  std::vector<std::vector<Tensor>> outs(static_cast<size_t>(copies));  // one set a thread for all tactics
  for (int c = 0; c < copies; ++c) {
    std::vector<Tensor> ins;
    for (int32_t id : st.inputs) {
      if (id < 0) {
        ins.emplace_back();
        continue;
      }
      const EngineValue& v = e.values[static_cast<size_t>(id)];
      if (v.kind == EngineValue::Kind::constant) ins.push_back(e.constants[static_cast<size_t>(v.index)]);
      else ins.push_back((rand(max_shape(v, batch), TensorOptions(DType::f32)) + 0.5).to(v.dtype));
    }
    for (const TensorMeta& m : infer_call(*st.op, ins, st.attrs))
      outs[static_cast<size_t>(c)].push_back(empty(m.shape, TensorOptions(m.dtype)));
    calls.push_back(OpCall{*st.op, std::move(ins), st.attrs, KILN_HERE, Tensor(), nullptr});
  }
  auto run = [&](const std::string& tactic) {
    if (!image_each) {
      run_kernel(calls[0], outs[0], tactic);
      return;
    }
    parallel_run(copies, [&](int i, int) { run_kernel(calls[static_cast<size_t>(i)], outs[static_cast<size_t>(i)], tactic); });
  };
  for (const std::string& tactic : tactics) run(tactic);  // warm-up
  std::vector<double> best(tactics.size(), 1e300);
  const double budget_all = budget_ms * static_cast<double>(tactics.size());
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < std::max(1, runs); ++r) {
    for (size_t t = 0; t < tactics.size(); ++t) {
      const auto t0 = std::chrono::steady_clock::now();
      run(tactics[t]);
      best[t] = std::min(best[t], elapsed_ms(t0));
    }
    if (elapsed_ms(start) >= budget_all) break;
  }
  for (double& ms : best) ms *= images_a_thread;
  return best;
}

// "direct" or "direct, prepacked at batch <= 3".
std::string choice_report(const EngineStep& st) {
  return st.small_tactic.empty() ? st.tactic
                                 : st.tactic + ", " + st.small_tactic + " at batch <= " + std::to_string(st.small_batch_max);
}

std::string fmt_ms(double ms) {
  char s[32];
  std::snprintf(s, sizeof s, "%.4g", ms);
  return s;
}

}  // namespace

TacticChoice choose_tactics(const std::vector<double>& ms_max, const std::vector<double>& ms_min, int64_t batch_min,
                            int64_t batch_max, double margin) {
  KILN_ASSERT(!ms_max.empty() && (ms_min.empty() || ms_min.size() == ms_max.size()), "choose_tactics: ",
              ms_max.size(), " and ", ms_min.size(), " timings");
  auto argmin = [](const std::vector<double>& v) {
    return static_cast<size_t>(std::min_element(v.begin(), v.end()) - v.begin());
  };
  TacticChoice c;
  const size_t large = argmin(ms_max);
  if (ms_min.empty() || batch_max <= batch_min) {
    c.tactic = large;
    return c;
  }
  // The single tactic: the lowest sum of times relative to each end's fastest.
  std::vector<double> score(ms_max.size(), 0.0);
  for (const std::vector<double>* v : {&ms_max, &ms_min}) {
    const double fastest = std::max((*v)[argmin(*v)], 1e-9);
    for (size_t i = 0; i < v->size(); ++i) score[i] += (*v)[i] / fastest;
  }
  const size_t single = argmin(score);
  c.tactic = single;
  const bool fits_max = ms_max[single] <= (1 + margin) * ms_max[large];
  const size_t small = argmin(ms_min);
  const bool fits_min = ms_min[single] <= (1 + margin) * ms_min[small];
  if (fits_max && fits_min) return c;
  // The single tactic keeps the end where it is within the margin; the other end gets its fastest.
  const size_t big = fits_max ? single : large, little = fits_min ? single : small;
  // Where `little` (faster at batch_min by gain_min) and `big` (faster at batch_max by gain_max)
  // cross, both linear in the batch.
  const double gain_min = ms_min[big] - ms_min[little];
  const double gain_max = ms_max[little] - ms_max[big];
  if (gain_min <= 0 || gain_max <= 0) {  // one is no slower at either end (or they are one tactic)
    c.tactic = gain_min <= 0 ? big : little;
    return c;
  }
  c.tactic = big;
  c.split = true;
  c.small_tactic = little;
  const double f = gain_min / (gain_min + gain_max);
  c.small_batch_max = std::clamp<int64_t>(batch_min + static_cast<int64_t>(f * static_cast<double>(batch_max - batch_min)),
                                          batch_min, batch_max - 1);
  return c;
}

std::string default_timing_cache_path() {
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return std::string(x) + "/kiln/timing_cache";
  if (const char* h = std::getenv("HOME"); h && *h) return std::string(h) + "/.cache/kiln/timing_cache";
  return "";
}

std::string TuneReport::summary() const {
  std::ostringstream os;
  const std::string packed = packed_bytes > 0 ? "; packed weights " + mib(packed_bytes) : std::string();
  if (!autotune) {
    os << "tactics: heuristic (no autotuning), " << tuned_steps << " steps with a choice" << packed;
    return os.str();
  }
  os << "tactics: " << tuned_steps << " steps with a choice, timing cache " << hits << " hits / " << misses
     << " misses, " << fmt_ms(ms) << " ms timing";
  os << " (" << (cache_path.empty() ? std::string("no cache file") : cache_path) << ")" << packed;
  return os.str();
}

void check_memory_budget(const std::string& graph, const Target& target, const BatchRange& batch, int64_t arena_bytes,
                         int64_t weight_bytes, int64_t packed_bytes) {
  if (target.memory_budget <= 0) return;
  const int64_t total = arena_bytes + weight_bytes + packed_bytes;
  KILN_CHECK(total <= target.memory_budget, "compile graph '", graph, "': the engine needs ", mib(total),
             " but the memory budget is ", mib(target.memory_budget), " (", target.memory_budget,
             " B): planned arena ", mib(arena_bytes),
             batch.symbol.empty() ? std::string() : " at batch " + std::to_string(batch.max), " + weights ",
             mib(weight_bytes), packed_bytes ? " + packed weights " + mib(packed_bytes) : std::string(),
             "; raise --memory-budget",
             batch.symbol.empty() ? std::string() : ", or lower the largest batch (--batch)");
}

TuneReport select_tactics(Engine& e, const CompileOptions& options) {
  TuneReport rep;
  rep.autotune = options.autotune;
  KILN_CHECK(options.tune_runs >= 1 && options.tune_ms > 0, "compile: tune_runs (", options.tune_runs,
             ") and tune_ms (", options.tune_ms, ") must be positive");
  for (const std::string& t : options.excluded_tactics) {
    bool known = false;
    for (const OpDef* def : OpRegistry::instance().all())
      for (const KernelEntry& k : def->kernels()) known = known || (k.device == DeviceType::cpu && k.tactic == t);
    KILN_CHECK(known && !t.empty(), "compile: no op has a CPU tactic named '", t,
               "' to leave out (names: kiln compile --show-tactics, or a per-layer table of kiln bench)");
  }
  Cache cache;
  if (options.autotune) {
    rep.cache_path = options.timing_cache.empty() ? default_timing_cache_path() : options.timing_cache;
    if (rep.cache_path == "none") rep.cache_path.clear();
    if (!rep.cache_path.empty()) load_cache(rep.cache_path, cache, rep.warnings);
  }
  int64_t weight_bytes = 0, packed_bytes = 0;
  for (const Tensor& c : e.constants) weight_bytes += c.numel() * static_cast<int64_t>(dtype_size(c.dtype()));

  // Time under the target's ISA and threads, restored afterwards.
  std::optional<kernels::cpu::IsaOverride> isa;
  const int saved_threads = get_num_threads();
  bool changed_cache = false;
  try {
    if (options.autotune) {
      isa.emplace(kernels::cpu::parse_isa(e.target.isa));
      set_num_threads(e.target.threads);
    }
    // Note [Packed weights in the budget]
    // A tactic that packs a constant weight keeps the packed copy beside it for the engine's life,
    // and the blocked convolution packs its filters under every tactic (Winograd's transformed ones
    // 16/9 and 4x the filters' size). Each step is charged what its tactic (or tactics, one per
    // batch bucket) keeps; where the target has a memory budget a tactic is offered only if its
    // copy fits beside the arena, the weights, the copies of the steps before and what the steps
    // after keep at the least (their own kernels'), or, where none does, the step keeps the least of
    // them, and the engine fails to compile, naming the packed weights, when the sum passes the
    // budget. ResNet-50 without timing keeps 137 MiB of packed weights beside its 97 MiB of weights
    // (F(2x2, 3x3) tiles instead of F(4x4, 3x3): 108 MiB; no Winograd: 97).
    //
    // A weight several steps read (ALBERT's layers share theirs) is packed once per layout: the
    // process-wide pack cache hands each step the copy packed first. So a step's copy is charged
    // unless a step charged before it packs the same weight the same way (same op, tactic and
    // attributes, on an input of the same shape); ALBERT-base's was 324 MiB, its real copies 27.
    struct Charged {
      const EngineStep* step;
      std::string tactic;
    };
    std::vector<Charged> charged;
    auto same_copy = [&](const EngineStep& a, const EngineStep& b) {
      return a.inputs[1] == b.inputs[1] && a.op == b.op && a.attrs == b.attrs &&
             e.values[static_cast<size_t>(a.inputs[0])].shape == e.values[static_cast<size_t>(b.inputs[0])].shape;
    };
    auto packed_for = [&](const EngineStep& st, const std::string& tactic) -> int64_t {
      if (st.inputs.size() < 2 || st.inputs[0] < 0 || st.inputs[1] < 0) return 0;
      const EngineValue& w = e.values[static_cast<size_t>(st.inputs[1])];
      if (w.kind != EngineValue::Kind::constant) return 0;
      for (const Charged& c : charged)
        if (c.tactic == tactic && same_copy(*c.step, st)) return 0;
      return packed_weight_bytes(*st.op, tactic, st.attrs, max_shape(w, e.batch.max),
                                 e.values[static_cast<size_t>(st.inputs[0])].shape.size());
    };
    auto charge = [&](const EngineStep& st, const std::string& tactic) {
      const int64_t bytes = packed_for(st, tactic);
      if (bytes > 0) charged.push_back(Charged{&st, tactic});
      return bytes;
    };
    // The least the steps not yet chosen keep: their own kernels' copies (each step's, shared or not).
    int64_t pending = 0;
    std::vector<int64_t> own(e.steps.size());
    for (size_t i = 0; i < e.steps.size(); ++i) pending += own[i] = packed_for(e.steps[i], "");
    // One step's choice; it returns early where there is none to make (the op's own kernel runs).
    auto choose = [&](EngineStep& st) {
      st.tactic.clear();
      st.small_tactic.clear();
      st.small_batch_max = 0;
      if (st.op->is_view() || st.outputs.empty()) return;
      const DType dt = key_dtype(e, st);
      std::vector<std::string> tactics = candidate_tactics(e, st, dt);
      std::erase_if(tactics, [&](const std::string& t) {
        return std::find(options.excluded_tactics.begin(), options.excluded_tactics.end(), t) !=
               options.excluded_tactics.end();
      });
      if (tactics.size() < 2) return;
      ++rep.tuned_steps;
      // Note [Packed weights in the budget]: the tactics whose packed copy fits, or the least.
      if (e.target.memory_budget > 0) {
        const int64_t room = e.target.memory_budget - e.memory.arena_bytes - weight_bytes - packed_bytes - pending;
        std::map<std::string, int64_t> cost;
        for (const std::string& t : tactics) cost[t] = packed_for(st, t);
        int64_t least = std::numeric_limits<int64_t>::max();
        for (const auto& [t, bytes] : cost) least = std::min(least, bytes);
        std::erase_if(tactics, [&](const std::string& t) { return cost[t] > room && cost[t] > least; });
      }
      if (!options.autotune) {
        // Note [Heuristic tactics]: without timing, a convolution with constant filters takes the
        // direct kernel with its filters packed once (it beat im2col + GEMM on most of ResNet-50's
        // layers, bench/RESULTS.md), and a product by a constant weight takes it packed once
        // ("prepacked": ResNet-18's classifier, 512 -> 1000 at batch 1, ran 0.36 ms packing its
        // weight on every call and 0.023 ms prepacked); a blocked 3x3 convolution takes Winograd's
        // F(4x4, 3x3) tiles wherever they are offered (Note [Winograd tiles] in
        // kernels/cpu/conv_nchwc.cc: they ran ResNet-50's 56 x 56 to 14 x 14 layers in 0.35-0.55x the
        // direct kernel's time at batch 1 and 8, F(2x2, 3x3) 0.53-0.63x); everything else keeps the
        // op's own kernel.
        for (const char* t : {"direct", "prepacked", "winograd4", "winograd"})
          if (std::find(tactics.begin(), tactics.end(), t) != tactics.end()) {
            st.tactic = t;
            break;
          }
        return;
      }
      if (tactics.size() < 2) return;
      bool floating_inputs = true;
      for (int32_t id : st.inputs)
        if (id >= 0 && e.values[static_cast<size_t>(id)].kind != EngineValue::Kind::constant)
          floating_inputs = floating_inputs && is_floating(e.values[static_cast<size_t>(id)].dtype);
      if (!floating_inputs) return;
      // Two packed copies where both of a step's tactics keep one (Note [Tactics per batch bucket]).
      auto budget_holds_both = [&](const std::string& a, const std::string& b) {
        return e.target.memory_budget <= 0 || e.memory.arena_bytes + weight_bytes + packed_bytes + pending +
                                                      packed_for(st, a) + packed_for(st, b) <= e.target.memory_budget;
      };
      const std::string key = cache_key(e, st, e.target, tactics);
      auto offered = [&](const std::string& t) { return std::find(tactics.begin(), tactics.end(), t) != tactics.end(); };
      auto hit = cache.find(key);
      CachedChoice cached;
      if (hit != cache.end() && parse_choice(hit->second.best, cached) && offered(cached.tactic) &&
          (cached.small_tactic.empty() ||
           (offered(cached.small_tactic) && cached.small_batch_max >= e.batch.min &&
            cached.small_batch_max < e.batch.max))) {
        ++rep.hits;
        st.tactic = cached.tactic;
        st.small_tactic = cached.small_tactic;
        st.small_batch_max = cached.small_batch_max;
        if (!st.small_tactic.empty() && !budget_holds_both(st.tactic, st.small_tactic)) {
          st.small_tactic.clear();  // the budget has room for one packed weight: the large batches' tactic
          st.small_batch_max = 0;
        }
        rep.choices.push_back("step '" + st.name + "' (" + st.op->name() + "): " + choice_report(st) + " (cached: " +
                              hit->second.timings + ")");
      } else {
        ++rep.misses;
        auto t0 = std::chrono::steady_clock::now();
        // Note [Tuning both ends of the batch range]: a tactic's costs per call (packing a weight on
        // every run, say) hide at the largest batch and dominate at the smallest, so for the latency
        // objective a dynamic batch range is timed at both ends, and the step keeps one tactic or
        // one per batch bucket (Note [Tactics per batch bucket] in runtime/tactics.h). The
        // throughput objective serves full batches: only the largest batch is timed (and tuning
        // takes half as long).
        std::vector<double> ms =
            time_tactics(e, st, tactics, e.batch.max, options.tune_runs, options.tune_ms, per_image(e, st));
        std::vector<double> ms_min;
        if (!e.batch.symbol.empty() && e.batch.min != e.batch.max && e.target.objective == Target::Objective::latency)
          ms_min = time_tactics(e, st, tactics, e.batch.min, options.tune_runs, options.tune_ms, false);
        rep.ms += elapsed_ms(t0);
        TacticChoice choice = choose_tactics(ms, ms_min, e.batch.min, e.batch.max);
        if (choice.split && !budget_holds_both(tactics[choice.tactic], tactics[choice.small_tactic]))
          choice = choose_tactics(ms, ms_min, e.batch.min, e.batch.max, std::numeric_limits<double>::infinity());
        st.tactic = tactics[choice.tactic];
        if (choice.split) {
          st.small_tactic = tactics[choice.small_tactic];
          st.small_batch_max = choice.small_batch_max;
        }
        std::string timings;
        for (size_t i = 0; i < tactics.size(); ++i) {
          timings += (i ? "," : "") + tactics[i] + "=" + fmt_ms(ms[i]);
          if (!ms_min.empty()) timings += "/" + fmt_ms(ms_min[i]);
        }
        cache[key] = CacheEntry{choice_str(CachedChoice{st.tactic, st.small_tactic, st.small_batch_max}), timings};
        changed_cache = true;
        rep.choices.push_back("step '" + st.name + "' (" + st.op->name() + "): " + choice_report(st) + " (" + timings +
                              " ms)");
      }
    };
    for (size_t i = 0; i < e.steps.size(); ++i) {
      EngineStep& st = e.steps[i];
      pending -= own[i];
      choose(st);
      packed_bytes += charge(st, st.tactic);
      if (!st.small_tactic.empty() && st.small_tactic != st.tactic) packed_bytes += charge(st, st.small_tactic);
    }
  } catch (...) {
    set_num_threads(saved_threads);
    throw;
  }
  if (options.autotune) set_num_threads(saved_threads);
  if (changed_cache && !rep.cache_path.empty()) save_cache(rep.cache_path, cache, rep.warnings);
  rep.packed_bytes = packed_bytes;
  check_memory_budget(e.name, e.target, e.batch, e.memory.arena_bytes, weight_bytes, packed_bytes);
  return rep;
}

}  // namespace kiln::runtime
