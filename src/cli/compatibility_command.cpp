// `tessera compatibility`: the compatibility matrix of the settings, as docs/compatibility.md holds
// it (the page is this command's output; a test keeps the two equal). With --array: the covering
// array's configurations as command lines, and the configuration that trains each pair.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "config/compatibility.h"
#include "train/array_run.h"

namespace tessera::cli {

namespace {

void print_array(std::span<const config::ArrayConfiguration> array) {
  for (const config::ArrayConfiguration& c : array) {
    std::string args;
    for (const auto& [key, value] : train::array_run_overrides(c.settings)) args += fmt::format(" --{} {}", key, value);
    fmt::print("configuration {} ({}, {} pairs first, loss within {} of the reference): tessera launch -n {} -- "
               "train{}\n",
               c.id, c.ci ? "CI" : "matrix", c.first_covered.size(),
               config::array_loss_bound(config::array_tolerance(c.settings)), c.world, args);
  }
  for (const config::ArrayConfiguration& c : array) {
    for (const auto& [a, b] : c.first_covered) {
      fmt::print("{} with {}: configuration {}\n", config::feature_name(a), config::feature_name(b), c.id);
    }
  }
}

}  // namespace

void add_compatibility_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "compatibility",
      "print which parallel.*, memory.*, precision.* and optim.* settings run together, and why the others are "
      "refused (the Markdown of docs/compatibility.md)");
  auto array_only = std::make_shared<bool>(false);
  command->add_flag("--array", *array_only,
                    "print the covering array instead: each configuration as a command line, then the configuration "
                    "that trains each pair");
  command->callback([array_only] {
    const std::vector<config::ArrayConfiguration> array = train::checked_covering_array();
    if (*array_only) {
      print_array(array);
    } else {
      fmt::print("{}", config::compatibility_markdown(array));
    }
  });
}

}  // namespace tessera::cli
