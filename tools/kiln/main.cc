// The kiln command-line tool. Subcommands grow with the layers; for now `kiln demo`.
#include <CLI/CLI.hpp>

#include <exception>
#include <iostream>

#include "conformance.h"
#include "demo.h"
#include "engine_commands.h"
#include "graph_commands.h"
#include "train.h"
#include "kiln/kiln.h"

int main(int argc, char** argv) {
  CLI::App app{"kiln: arrays, autograd and a model compiler"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::kVersion);
  app.require_subcommand(1);

  DemoOptions demo_opt;
  auto* demo = app.add_subcommand("demo", "A short tour of the array layer: creation, broadcasting, views, "
                                          "reductions and a timed matmul");
  demo->add_option("--size", demo_opt.matmul_size, "n of the timed [n, n] x [n, n] f32 matmul")
      ->check(CLI::Range(int64_t{1}, int64_t{8192}));
  demo->add_option("--seed", demo_opt.seed, "seed of the random tensors");
  demo->add_option("--threads", demo_opt.threads, "CPU threads (0: the cores this process may use)")
      ->check(CLI::Range(0, 1024));

  RunOptions run_opt;
  auto* run = add_run_command(app, run_opt);
  InspectOptions inspect_opt;
  auto* inspect = add_inspect_command(app, inspect_opt);
  TrainOptions train_opt;
  auto* train = add_train_command(app, train_opt);
  ConformanceOptions conf_opt;
  auto* conformance = add_conformance_command(app, conf_opt);
  CompileCommandOptions compile_opt;
  auto* compile = add_compile_command(app, compile_opt);
  BenchOptions bench_opt;
  auto* bench = add_bench_command(app, bench_opt);

  int rc = 0;
  try {
    app.parse(argc, argv);
    if (demo->parsed()) rc = run_demo(demo_opt);
    if (run->parsed()) rc = run_graph_command(run_opt);
    if (inspect->parsed()) rc = inspect_graph_command(inspect_opt);
    if (train->parsed()) rc = run_train_command(train_opt);
    if (conformance->parsed()) rc = run_conformance_command(conf_opt);
    if (compile->parsed()) rc = run_compile_command(compile_opt);
    if (bench->parsed()) rc = run_bench_command(bench_opt);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::Error& e) {
    std::cerr << "kiln: error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    // kiln::InternalError or a standard library exception: a bug in kiln, not in the input.
    std::cerr << "kiln: internal error: " << e.what()
              << "\n(this is a bug in kiln, not in your model or arguments; please report it with the command)\n";
    return 2;
  }
  return rc;
}
