// tessera: train, plan and simulate large neural networks.
#include <fmt/format.h>

#include <cstdio>

#include "cli/commands.h"
#include "core/check.h"

int main(int argc, char** argv) {
  CLI::App app{"tessera: training large neural networks with every kind of parallelism, and planning them"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tessera 0.1.0");
  tessera::cli::add_data_command(app);
  tessera::cli::add_train_command(app);
  tessera::cli::add_sample_command(app);
  tessera::cli::add_export_command(app);
  tessera::cli::add_plan_command(app);
  tessera::cli::add_simulate_command(app);
  tessera::cli::add_launch_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tessera::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    return 1;
  }
  return 0;
}
