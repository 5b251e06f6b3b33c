#pragma once
// The dotted config overrides of `tessera train` (--section.key value), shared by the commands that
// read a run config: train, and plan --config, which predicts the same run.
#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

// "--train.steps 100" and "--train.steps=100" pairs from the arguments CLI11 left over. Several
// words up to the next option are an array (`--parallel.stage_layers 1 3` is [1, 3]). An option
// that is neither a config key nor one of the command's own `options` ("--config") is a
// UsageError with the closest of them: `--lr` -> `--optim.lr`, `--confg` -> `--config`.
std::vector<std::pair<std::string, std::string>> parse_overrides(const std::vector<std::string>& args,
                                                                 const std::vector<std::string>& options);

// A command's own options as they are typed: "--config", "-c", ...
std::vector<std::string> option_names(const CLI::App& command);

}  // namespace tessera::cli
