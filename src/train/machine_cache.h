#pragma once
// Figures measured once per machine and kept between runs (the matmul peak, the float GEMM
// library): JSON files of keyed entries in $TESSERA_CACHE_DIR, else $XDG_CACHE_HOME/tessera, else
// ~/.cache/tessera. Delete a file to measure again.
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::train {

// Where the cache file `name` lives; empty when no folder is known (no HOME).
std::filesystem::path machine_cache_path(const std::string& name);

// The file's entries; an empty object when it is missing or damaged (a damaged cache is measured
// again, never an error).
nlohmann::json read_machine_cache(const std::filesystem::path& file);

// Sets entry `key` of the file to `value`, written atomically. False when it could not be written
// (a read-only home): the run goes on with its own measurement and the next one measures again.
bool store_in_machine_cache(const std::filesystem::path& file, const std::string& key, const nlohmann::json& value);

}  // namespace tessera::train
