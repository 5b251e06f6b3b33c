#include "train/machine_cache.h"

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"

namespace fs = std::filesystem;

namespace tessera::train {

fs::path machine_cache_path(const std::string& name) {
  if (const char* dir = std::getenv("TESSERA_CACHE_DIR"); dir != nullptr && *dir != 0) return fs::path(dir) / name;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != 0) {
    return fs::path(xdg) / "tessera" / name;
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != 0) {
    return fs::path(home) / ".cache" / "tessera" / name;
  }
  return {};
}

nlohmann::json read_machine_cache(const fs::path& file) {
  std::error_code ec;
  if (file.empty() || !fs::exists(file, ec)) return nlohmann::json::object();
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json cache = nlohmann::json::parse(text.str(), nullptr, false);
  return cache.is_object() ? cache : nlohmann::json::object();
}

bool store_in_machine_cache(const fs::path& file, const std::string& key, const nlohmann::json& value) {
  if (file.empty()) return false;
  nlohmann::json cache = read_machine_cache(file);
  cache[key] = value;
  try {
    fs::create_directories(file.parent_path());
    write_file_atomically(file, cache.dump(2) + "\n");
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

}  // namespace tessera::train
