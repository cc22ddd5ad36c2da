// `kiln compile MODEL.onnx|GRAPH.kir -o model.kiln [-O N] [--disable-pass NAME] [--batch MIN:MAX]
//  [--target host|ARCH-ISA] [--threads N] [--memory-budget SIZE] [--no-autotune] [--timing-cache FILE]
//  [--no-tactic NAME]`:
// optimizes the graph, plans its memory, picks tactics (timed, with a timing cache) and writes an
// engine; prints the pass report, the plan and the tactic report.
// Also the engine side of `kiln run` and `kiln inspect`.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <optional>
#include <utility>

#include "engine_commands.h"
#include "kiln/core/thread_pool.h"
#include "model_file.h"

CLI::App* add_compile_command(CLI::App& app, CompileCommandOptions& opt) {
  auto* c = app.add_subcommand("compile", "Compile a model (.onnx or text IR .kir) into an engine file that runs "
                                          "without the compiler");
  c->add_option("model", opt.model, "model file (.onnx or .kir)")->required()->check(CLI::ExistingFile);
  c->add_option("-o,--output", opt.out, "engine file to write (.kiln)")->required();
  c->add_option("-O,--opt-level", opt.opt_level, "optimization level 0..3")->check(CLI::Range(0, 3));
  c->add_option("--disable-pass", opt.disabled, "skip a pass by name (repeat; for bisecting a wrong result)");
  c->add_option("--batch", opt.batch,
                "compiled batch range MIN:MAX (or N) of the symbolic batch dim (default 1:64, less if the arena "
                "would pass 1 GiB)");
  c->add_option("--known", opt.known, "ONNX: an input kiln needs at compile time (a shape tensor), name=file");
  c->add_option("--dim", opt.dims, "ONNX: fix a symbolic dim other than the batch, name=value");
  c->add_flag("--verify-each", opt.verify_each, "run the IR verifier after every pass");
  c->add_option("--target", opt.target,
                "what to build for: host (default) or ARCH-ISA, e.g. x86_64-avx2 for a lesser machine");
  c->add_option("--threads", opt.threads, "threads the engine's tactics are timed on (default: kiln's thread count)")
      ->check(CLI::Range(1, 1024));
  c->add_option("--memory-budget", opt.memory_budget,
                "bytes for the arena and the weights, e.g. 64MiB, 1.5GiB (compile fails when the plan exceeds it)");
  c->add_option("--objective", opt.objective, "latency (default) or throughput");
  c->add_flag("--no-autotune", opt.no_autotune, "choose tactics by heuristics, without timing kernels");
  c->add_option("--layout", opt.layout,
                "convolution activations: auto (default: channel-blocked regions where they pay, AVX-512 only), "
                "nchw, or nchwc (every region that can)")
      ->check(CLI::IsMember({"auto", "nchw", "nchwc"}));
  c->add_option("--timing-cache", opt.timing_cache,
                "timing cache file (default $XDG_CACHE_HOME/kiln/timing_cache or ~/.cache/kiln/timing_cache; "
                "'none': keep no file)");
  c->add_option("--tune-runs", opt.tune_runs, "timed runs per tactic per layer")->check(CLI::Range(1, 1000));
  c->add_option("--tune-ms", opt.tune_ms, "time budget per tactic per layer, milliseconds")->check(CLI::Range(0.1, 1e5));
  c->add_flag("--show-tactics", opt.show_tactics, "print every tuned step's choice and timings");
  c->add_option("--no-tactic", opt.no_tactics,
                "leave a tactic out of every layer's choice, timed or not (repeat; e.g. winograd, openblas)");
  return c;
}

namespace {
constexpr int64_t kDefaultBatchMax = 64;
constexpr int64_t kDefaultArenaBudget = int64_t{1} << 30;
}  // namespace

std::pair<int64_t, int64_t> parse_batch_range(const std::string& spec) {
  auto number = [&](const std::string& s) {
    size_t used = 0;
    int64_t v = 0;
    try {
      v = std::stoll(s, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    KILN_CHECK(used == s.size() && !s.empty() && v >= 1, "--batch '", spec, "': expected MIN:MAX or N with positive integers");
    return v;
  };
  auto colon = spec.find(':');
  if (colon == std::string::npos) {
    int64_t n = number(spec);
    return {n, n};
  }
  int64_t lo = number(spec.substr(0, colon)), hi = number(spec.substr(colon + 1));
  KILN_CHECK(lo <= hi, "--batch '", spec, "': MIN is larger than MAX");
  return {lo, hi};
}

std::map<std::string, int64_t> parse_dim_args(const std::vector<std::string>& specs) {
  std::map<std::string, int64_t> dims;
  for (const auto& spec : specs) {
    auto eq = spec.find('=');
    KILN_CHECK(eq != std::string::npos && eq > 0, "--dim '", spec, "': expected name=value");
    try {
      dims[spec.substr(0, eq)] = std::stoll(spec.substr(eq + 1));
    } catch (const std::exception&) {
      KILN_FAIL("--dim '", spec, "': the value is not an integer");
    }
  }
  return dims;
}

int run_compile_command(const CompileCommandOptions& opt) {
  LoadedGraph lg = load_graph_file(opt.model, parse_tensor_args(opt.known, "--known"), parse_dim_args(opt.dims));
  kiln::runtime::CompileOptions co;
  co.passes.opt_level = opt.opt_level;
  co.passes.disabled = std::set<std::string>(opt.disabled.begin(), opt.disabled.end());
  co.passes.verify_each = opt.verify_each;
  if (!opt.batch.empty()) std::tie(co.batch_min, co.batch_max) = parse_batch_range(opt.batch);
  co.input_names = lg.input_names;
  co.output_names = lg.output_names;
  size_t nodes_before = lg.graph.num_nodes();
  // Note [Default batch range]: a model exported with a dynamic batch and compiled without
  // --batch accepts batches 1..64 (fewer when the arena would pass 1 GiB), the way ONNX Runtime
  // runs such a model at any batch; an engine pinned to batch 1 would reject the very inputs the
  // model was exported with. --batch N or MIN:MAX sets the range exactly.
  bool symbolic_inputs = false;
  for (const kiln::ir::Value* v : lg.graph.inputs())
    for (const auto& d : v->type().shape) symbolic_inputs = symbolic_inputs || d.is_symbolic();
  bool default_range = opt.batch.empty() && symbolic_inputs;
  kiln::runtime::Target target = kiln::runtime::Target::parse(opt.target);
  if (opt.threads > 0) target.threads = opt.threads;
  if (!opt.memory_budget.empty()) target.memory_budget = kiln::runtime::parse_bytes(opt.memory_budget);
  target.objective = kiln::runtime::parse_objective(opt.objective);
  co.target = target;
  co.autotune = !opt.no_autotune;
  co.excluded_tactics = opt.no_tactics;
  co.layout = opt.layout == "nchw"    ? kiln::runtime::CompileOptions::Layout::nchw
              : opt.layout == "nchwc" ? kiln::runtime::CompileOptions::Layout::nchwc
                                      : kiln::runtime::CompileOptions::Layout::automatic;
  co.timing_cache = opt.timing_cache;
  co.tune_runs = opt.tune_runs;
  co.tune_ms = opt.tune_ms;
  auto t0 = std::chrono::steady_clock::now();
  std::optional<kiln::runtime::CompileResult> result;
  if (default_range) {
    // Probe at 1:64 without timing or the budget, then shrink the range to what 1 GiB of arena (and
    // the memory budget, less the weights) allows.
    kiln::runtime::CompileOptions probe = co;
    probe.batch_min = 1, probe.batch_max = kDefaultBatchMax;
    probe.autotune = false;
    probe.target->memory_budget = 0;
    kiln::runtime::CompileResult pr = kiln::runtime::compile(lg.graph, probe);
    int64_t limit = kDefaultArenaBudget;
    if (target.memory_budget > 0) {
      int64_t weights = 0;
      for (const auto& c : pr.engine.constants) weights += c.numel() * static_cast<int64_t>(kiln::dtype_size(c.dtype()));
      limit = std::min(limit, target.memory_budget - weights);
    }
    co.batch_min = 1;
    co.batch_max = kDefaultBatchMax;
    if (pr.engine.memory.arena_bytes > limit)
      co.batch_max = std::max<int64_t>(
          1, static_cast<int64_t>(static_cast<double>(kDefaultBatchMax) * static_cast<double>(std::max<int64_t>(limit, 0)) /
                                  static_cast<double>(pr.engine.memory.arena_bytes)));
    else if (!co.autotune && target.memory_budget == 0)
      result = std::move(pr);  // the probe is the engine
  }
  if (!result) result = kiln::runtime::compile(lg.graph, co);
  kiln::runtime::CompileResult& r = *result;
  double compile_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "compiled " << opt.model << " at -O" << opt.opt_level << " for " << r.engine.target.name() << " in "
            << std::fixed << std::setprecision(2) << compile_s << " s\n" << std::defaultfloat;
  std::cout << "target: " << r.engine.target.str() << "\n";
  std::cout << "passes:\n";
  int shown = 0;
  for (const auto& p : r.passes) {
    if (!p.changed) continue;
    // Reports usually start with the pass's name already.
    bool named = p.report.rfind(p.pass + ":", 0) == 0;
    std::cout << "  [" << p.iteration << "] " << (named ? "" : p.pass + ": ") << p.report << "\n";
    ++shown;
  }
  if (shown == 0) std::cout << "  (no pass changed the graph)\n";
  std::cout << "nodes: " << nodes_before << " -> " << r.engine.steps.size() << " steps\n";
  std::cout << "memory: " << r.memory_summary << "\n";
  std::cout << r.tuning.summary() << "\n";
  for (const auto& w : r.tuning.warnings) std::cerr << "warning: " << w << "\n";
  if (opt.show_tactics)
    for (const auto& c : r.tuning.choices) std::cout << "  " << c << "\n";
  std::cout << r.engine.signature_str();
  r.engine.save(opt.out);
  std::cout << "wrote " << opt.out << " (" << std::filesystem::file_size(opt.out) << " bytes)\n";
  return 0;
}

bool is_engine_file(const std::string& path) {
  if (path.size() >= 5 && path.compare(path.size() - 5, 5, ".kiln") == 0) return true;
  std::ifstream f(path, std::ios::binary);
  char magic[8] = {};
  f.read(magic, 8);
  return f.gcount() == 8 && std::memcmp(magic, "KILNENG\0", 8) == 0;
}

int run_engine_file(const std::string& path, const std::map<std::string, kiln::Tensor>& inputs,
                    const std::string& output_dir, bool pb_outputs) {
  auto engine = std::make_shared<kiln::runtime::Engine>(kiln::runtime::Engine::load(path));
  // The threads its tactics were chosen for (at most the cores here).
  kiln::set_num_threads(std::clamp(engine->target.threads, 1, kiln::available_cores()));
  kiln::runtime::Executor ex(engine);
  std::vector<kiln::Tensor> outs = ex.run(inputs);
  if (!output_dir.empty()) std::filesystem::create_directories(output_dir);
  for (size_t i = 0; i < outs.size(); ++i) {
    std::string name = engine->output_names[i];
    for (char& ch : name)
      if (ch == '/' || ch == '\\') ch = '_';
    std::cout << name << ": " << kiln::dtype_name(outs[i].dtype()) << kiln::shape_str(outs[i].shape()) << "\n";
    if (!output_dir.empty()) {
      std::string file = (std::filesystem::path(output_dir) / (name + (pb_outputs ? ".pb" : ".npy"))).string();
      save_tensor_file(outs[i], file);
      std::cout << "  wrote " << file << "\n";
    }
  }
  return 0;
}

int inspect_engine_file(const std::string& path) {
  kiln::runtime::Engine e = kiln::runtime::Engine::load(path);
  std::cout << "engine " << e.name << " (" << path << ")\n";
  std::cout << "target: " << e.target.str() << " (this machine: " << kiln::runtime::host_target() << ")\n";
  std::cout << "built by: kiln " << e.kiln_version << ", format version " << kiln::runtime::kEngineFormatVersion << "\n";
  std::cout << e.signature_str();
  int64_t const_bytes = 0;
  for (const auto& c : e.constants) const_bytes += c.numel() * static_cast<int64_t>(kiln::dtype_size(c.dtype()));
  std::cout << "constants: " << e.constants.size() << " (" << const_bytes << " bytes)\n";
  std::cout << "arena: " << e.memory.arena_bytes << " bytes at batch " << e.batch.max << "\n";
  std::cout << "memory: " << e.memory.summary() << "\n";
  std::cout << "steps (" << e.steps.size() << "):\n" << e.steps_str();
  return 0;
}
