#pragma once
// Finding the TOML files the planner reads: a path, or the name of a shipped config under
// configs/models/ or configs/clusters/.
#include <string>
#include <vector>

#include "config/model_config.h"

namespace tessera::plan {

// Folders searched for shipped configs, in order: $TESSERA_CONFIG_DIR,
// the source tree this library was built from, ./configs. Each holds clusters/ and models/.
std::vector<std::string> default_config_dirs();

// `name_or_path` is an existing file, or a name looked up as <dir>/<kind>/<name>.toml in each of
// `dirs` (kind is "clusters" or "models"). Throws naming every place it looked and the names shipped.
std::string resolve_config_file(const std::string& name_or_path, const std::string& kind,
                                const std::vector<std::string>& dirs);

// The names (file stems) of the shipped configs of one kind, sorted.
std::vector<std::string> shipped_config_names(const std::string& kind, const std::vector<std::string>& dirs);

// Reads the [model] table of a TOML file (the section the trainer reads) by path or shipped name.
config::ModelConfig load_model(const std::string& name_or_path,
                               const std::vector<std::string>& dirs = default_config_dirs());

}  // namespace tessera::plan
