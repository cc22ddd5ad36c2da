// The kiln command-line tool.
#include <CLI/CLI.hpp>

#include <iostream>

#include "kiln/kiln.h"

int run_demo();

int main(int argc, char** argv) {
  CLI::App app{"kiln: arrays, autograd and a model compiler"};
  app.set_version_flag("--version", std::string("kiln ") + kiln::kVersion);
  app.require_subcommand(1);
  auto* demo = app.add_subcommand("demo", "A short tour of the array layer");
  demo->callback([] { std::exit(run_demo()); });
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const kiln::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
