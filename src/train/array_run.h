#pragma once
// The tiny run each configuration of the covering array (config/covering_array.h) trains, and the
// array built against the run config's own checks, so that every configuration it holds is one the
// run config accepts.
#include <string>
#include <utility>
#include <vector>

#include "config/covering_array.h"
#include "train/run_config.h"

namespace tessera::train {

// The dotted overrides of a configuration's run: the tiny model, batch and steps every
// configuration shares (four blocks, so that two stages of two chunks each have one), then the
// configuration's own settings (config::array_overrides).
std::vector<std::pair<std::string, std::string>> array_run_overrides(const config::FeatureSettings& s);
// Those overrides read as `tessera train` reads them and validated; throws the run config's error.
RunConfig array_run_config(const config::FeatureSettings& s);
bool array_settings_run(const config::FeatureSettings& s);
// config::covering_array with array_settings_run as its check.
std::vector<config::ArrayConfiguration> checked_covering_array();

}  // namespace tessera::train
