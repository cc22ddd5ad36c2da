// `kiln compile MODEL.onnx|GRAPH.kir -o model.kiln [-O N] [--disable-pass NAME] [--batch MIN:MAX]`:
// optimizes the graph, plans its memory and writes an engine; prints the pass report and the plan.
// Also the engine side of `kiln run` and `kiln inspect`.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <utility>

#include "engine_commands.h"
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
  if (default_range) std::tie(co.batch_min, co.batch_max) = std::pair<int64_t, int64_t>{1, kDefaultBatchMax};
  kiln::runtime::CompileResult r = kiln::runtime::compile(lg.graph, co);
  if (default_range && r.engine.memory.arena_bytes > kDefaultArenaBudget) {
    // Intermediates grow with the batch: scale the range down to the budget.
    co.batch_max = std::max<int64_t>(
        1, static_cast<int64_t>(static_cast<double>(kDefaultBatchMax) * static_cast<double>(kDefaultArenaBudget) /
                                static_cast<double>(r.engine.memory.arena_bytes)));
    r = kiln::runtime::compile(lg.graph, co);
  }
  std::cout << "compiled " << opt.model << " at -O" << opt.opt_level << " for " << r.engine.target << "\n";
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
  std::cout << "target: " << e.target << " (this machine: " << kiln::runtime::host_target() << ")\n";
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
