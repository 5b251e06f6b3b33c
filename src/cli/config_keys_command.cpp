// `tessera config-keys`: the keys of the run config as the README's config reference holds them
// (the table is this command's output; a test keeps the two equal). With --fuzz-dictionary: the
// sections and keys as the run config's fuzz dictionary begins.
#include <fmt/format.h>

#include <memory>

#include "cli/commands.h"
#include "train/config_keys.h"

namespace tessera::cli {

void add_config_keys_command(CLI::App& app) {
  CLI::App* command = app.add_subcommand(
      "config-keys",
      "print every key of the run config with its default and meaning (the Markdown table of README.md)");
  auto fuzz_dictionary = std::make_shared<bool>(false);
  command->add_flag("--fuzz-dictionary", *fuzz_dictionary,
                    "print the sections and keys as libFuzzer dictionary lines instead (the first part of "
                    "tests/fuzz/fuzz_run_config.dict)");
  command->callback([fuzz_dictionary] {
    fmt::print("{}", *fuzz_dictionary ? train::config_fuzz_dictionary() : train::config_reference_markdown());
  });
}

}  // namespace tessera::cli
