// `tessera compatibility`: the compatibility matrix of the settings, as docs/compatibility.md holds
// it (the page is this command's output; a test keeps the two equal).
#include <fmt/format.h>

#include "cli/commands.h"
#include "config/compatibility.h"

namespace tessera::cli {

void add_compatibility_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "compatibility",
      "print which parallel.*, memory.*, precision.* and optim.* settings run together, and why the others are "
      "refused (the Markdown of docs/compatibility.md)");
  command->callback([] { fmt::print("{}", config::compatibility_markdown()); });
}

}  // namespace tessera::cli
