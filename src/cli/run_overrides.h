#pragma once
// The dotted config overrides of `tessera train` (--section.key value), shared by the commands that
// read a run config: train, and plan --config, which predicts the same run.
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

// "--train.steps 100" and "--train.steps=100" pairs from the arguments CLI11 left over. Several
// words up to the next option are an array (`--parallel.stage_layers 1 3` is [1, 3]).
std::vector<std::pair<std::string, std::string>> parse_overrides(const std::vector<std::string>& args);

}  // namespace tessera::cli
