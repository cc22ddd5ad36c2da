// `kiln bench MODEL|ENGINE [--batch N] [--threads N] [--iterations N] [--warmup N] [--profile] [--json]`:
// trtexec-style timing of an engine (a model is compiled first): latency min/median/p90/p99,
// throughput, and a per-layer table from the executor's profiler.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <sstream>

#include "engine_commands.h"
#include "kiln/core/thread_pool.h"
#include "model_file.h"

CLI::App* add_bench_command(CLI::App& app, BenchOptions& opt) {
  auto* c = app.add_subcommand("bench", "Time an engine (or a model, compiled first): latency percentiles, "
                                        "throughput, per-layer profile");
  c->add_option("model", opt.model, "engine (.kiln) or model (.onnx, .kir)")->required()->check(CLI::ExistingFile);
  c->add_option("--batch", opt.batch, "batch size (inside the engine's compiled range)")->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  c->add_option("--threads", opt.threads,
                "CPU threads (0: an engine's target threads, a model's the cores this process may use)")
      ->check(CLI::Range(0, 1024));
  c->add_option("--iterations", opt.iterations, "timed runs")->check(CLI::Range(1, 1000000));
  c->add_option("--warmup", opt.warmup, "untimed runs first")->check(CLI::Range(0, 1000000));
  c->add_option("-O,--opt-level", opt.opt_level, "models: optimization level 0..3")->check(CLI::Range(0, 3));
  c->add_option("--disable-pass", opt.disabled, "models: skip a pass by name (repeat)");
  c->add_option("--dim", opt.dims, "ONNX models: fix a symbolic dim other than the batch, name=value");
  c->add_option("--input,-i", opt.inputs, "an input as name=file (others are random)");
  c->add_flag("--profile", opt.profile, "print the per-layer table");
  c->add_flag("--json", opt.json, "print one JSON object (with the per-layer times) instead of text");
  return c;
}

namespace {

std::string json_string(const std::string& s) {
  std::ostringstream os;
  os << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') os << '\\' << c;
    else if (c < 0x20) os << "\\u" << std::hex << std::setw(4) << std::setfill('0') << int{c} << std::dec;
    else os << c;
  }
  os << '"';
  return os.str();
}

// Nearest-rank percentile of sorted samples.
double percentile(const std::vector<double>& sorted, double p) {
  size_t rank = static_cast<size_t>(std::ceil(p / 100.0 * static_cast<double>(sorted.size())));
  return sorted[std::min(sorted.size() - 1, rank == 0 ? 0 : rank - 1)];
}

}  // namespace

int run_bench_command(const BenchOptions& opt) {
  if (opt.threads > 0) kiln::set_num_threads(opt.threads);
  std::shared_ptr<kiln::runtime::Engine> engine;
  if (is_engine_file(opt.model)) {
    KILN_CHECK(opt.dims.empty() && opt.disabled.empty(), "--dim and --disable-pass apply to models, not engines");
    engine = std::make_shared<kiln::runtime::Engine>(kiln::runtime::Engine::load(opt.model));
    // Its tactics were chosen for its target's threads (at most the cores here).
    if (opt.threads == 0) kiln::set_num_threads(std::clamp(engine->target.threads, 1, kiln::available_cores()));
  } else {
    LoadedGraph lg = load_graph_file(opt.model, {}, parse_dim_args(opt.dims));
    kiln::runtime::CompileOptions co;
    co.passes.opt_level = opt.opt_level;
    co.passes.disabled = std::set<std::string>(opt.disabled.begin(), opt.disabled.end());
    co.input_names = lg.input_names;
    co.output_names = lg.output_names;
    bool symbolic = false;
    for (const auto* v : lg.graph.inputs())
      for (const auto& d : v->type().shape) symbolic = symbolic || d.is_symbolic();
    if (symbolic) co.batch_min = co.batch_max = opt.batch;
    engine = std::make_shared<kiln::runtime::Engine>(kiln::runtime::compile(lg.graph, co).engine);
  }
  const kiln::runtime::Engine& e = *engine;
  int64_t batch = e.batch.symbol.empty() ? e.batch.max : opt.batch;
  KILN_CHECK(e.batch.symbol.empty() || (batch >= e.batch.min && batch <= e.batch.max), "--batch ", batch,
             " is outside the engine's compiled range [", e.batch.min, ", ", e.batch.max, "]");

  // Inputs: given files, else random normal floats / zeros for integer and bool inputs.
  std::map<std::string, kiln::Tensor> given = parse_tensor_args(opt.inputs, "--input");
  std::vector<kiln::Tensor> inputs;
  for (size_t i = 0; i < e.inputs.size(); ++i) {
    const auto& v = e.values[static_cast<size_t>(e.inputs[i])];
    auto it = given.find(e.input_names[i]);
    if (it != given.end()) {
      inputs.push_back(it->second);
      given.erase(it);
      continue;
    }
    kiln::Shape shape;
    for (const auto& d : v.shape) shape.push_back(d.at(batch));
    inputs.push_back(kiln::is_floating(v.dtype) ? kiln::randn(shape, kiln::TensorOptions(v.dtype))
                                                : kiln::zeros(shape, kiln::TensorOptions(v.dtype)));
  }
  KILN_CHECK(given.empty(), "--input '", given.empty() ? "" : given.begin()->first, "': the engine has no such input");

  kiln::runtime::Executor ex(engine);
  for (int i = 0; i < opt.warmup; ++i) ex.run(inputs);
  bool profile = opt.profile || opt.json;
  ex.set_profiling(profile);
  std::vector<double> ms;
  ms.reserve(static_cast<size_t>(opt.iterations));
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  for (int i = 0; i < opt.iterations; ++i) {
    auto t0 = Clock::now();
    ex.run(inputs);
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  double total_s = std::chrono::duration<double>(Clock::now() - start).count();
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  double mean = 0;
  for (double x : ms) mean += x / static_cast<double>(ms.size());
  double throughput = static_cast<double>(batch) * opt.iterations / total_s;
  int threads = kiln::get_num_threads();

  double layer_total = 0;
  for (const auto& l : ex.profile()) layer_total += l.ms;
  auto per_run = [&](const kiln::runtime::LayerTime& l) { return l.runs ? l.ms / static_cast<double>(l.runs) : 0.0; };
  auto percent = [&](const kiln::runtime::LayerTime& l) { return layer_total > 0 ? 100.0 * l.ms / layer_total : 0.0; };

  if (opt.json) {
    std::ostringstream os;
    os << std::setprecision(6);
    os << "{\"model\": " << json_string(opt.model) << ", \"target\": " << json_string(e.target.name())
       << ", \"batch\": " << batch << ", \"threads\": " << threads << ", \"iterations\": " << opt.iterations
       << ", \"warmup\": " << opt.warmup << ", \"latency_ms\": {\"min\": " << sorted.front()
       << ", \"median\": " << percentile(sorted, 50) << ", \"p90\": " << percentile(sorted, 90)
       << ", \"p99\": " << percentile(sorted, 99) << ", \"max\": " << sorted.back() << ", \"mean\": " << mean
       << "}, \"throughput_per_s\": " << throughput << ", \"arena_bytes\": " << e.memory.arena_bytes
       << ", \"layers\": [";
    for (size_t i = 0; i < ex.profile().size(); ++i) {
      const auto& l = ex.profile()[i];
      os << (i ? ", " : "") << "{\"name\": " << json_string(l.name) << ", \"op\": " << json_string(l.op)
         << ", \"tactic\": " << json_string(l.tactic) << ", \"ms\": " << per_run(l)
         << ", \"median_ms\": " << l.median_ms() << ", \"percent\": " << percent(l)
         << ", \"image_by_image\": " << (l.image_by_image ? "true" : "false") << "}";
    }
    os << "]}\n";
    std::cout << os.str();
    return 0;
  }
  std::cout << std::fixed << std::setprecision(3);
  std::cout << "engine: " << opt.model << " (" << e.target.name() << "), " << e.steps.size() << " steps, arena "
            << e.memory.arena_bytes << " bytes\n";
  std::cout << "batch " << batch << ", threads " << threads << ", " << opt.iterations << " iterations after "
            << opt.warmup << " warmup\n";
  std::cout << "latency (ms): min " << sorted.front() << "  median " << percentile(sorted, 50) << "  p90 "
            << percentile(sorted, 90) << "  p99 " << percentile(sorted, 99) << "  max " << sorted.back() << "  mean "
            << mean << "\n";
  std::cout << "throughput: " << std::setprecision(1) << throughput << " samples/s\n";
  if (opt.profile) {
    std::cout << std::setprecision(3) << "\nper-layer (ms per run, in step order):\n";
    // Columns as wide as their longest entry (names cut at 40), two spaces apart.
    size_t name_w = 4, op_w = 2, tactic_w = 6;
    for (const auto& l : ex.profile()) {
      name_w = std::max(name_w, std::min<size_t>(l.name.size(), 40));
      op_w = std::max(op_w, l.op.size());
      tactic_w = std::max(tactic_w, l.tactic.size());
    }
    const int nw = static_cast<int>(name_w + 2), ow = static_cast<int>(op_w + 2), tw = static_cast<int>(tactic_w);
    std::cout << "  " << std::left << std::setw(nw) << "name" << std::setw(ow) << "op" << std::setw(tw) << "tactic"
              << std::right << std::setw(10) << "ms" << std::setw(8) << "%" << "\n";
    for (const auto& l : ex.profile())
      std::cout << "  " << std::left << std::setw(nw) << l.name.substr(0, 40) << std::setw(ow) << l.op << std::setw(tw)
                << (l.tactic.empty() ? "-" : l.tactic) << std::right << std::setw(10) << per_run(l) << std::setw(7)
                << std::setprecision(1) << percent(l) << "%" << (l.image_by_image ? "  *" : "")
                << std::setprecision(3) << "\n";
    std::cout << "  " << std::left << std::setw(nw + ow + tw) << "total" << std::right << std::setw(10)
              << layer_total / opt.iterations << "\n";
    if (std::any_of(ex.profile().begin(), ex.profile().end(), [](const auto& l) { return l.image_by_image; }))
      std::cout << "  * ran image by image, each thread its own images (a depth-first group): the time is the "
                   "batch's sum over the threads\n";
  }
  return 0;
}
