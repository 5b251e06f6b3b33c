#include "plan/config_files.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "core/check.h"

namespace tessera::plan {

namespace fs = std::filesystem;

std::vector<std::string> default_config_dirs() {
  std::vector<std::string> dirs;
  if (const char* d = std::getenv("TESSERA_CONFIG_DIR"); d != nullptr && *d != '\0') dirs.emplace_back(d);
  // The source tree the library was built from: lets a build-tree binary find the shipped configs
  // without any environment set up.
  dirs.push_back((fs::path(TESSERA_PLAN_SOURCE_ROOT) / "configs").string());
  // An installed binary (cmake --install): PREFIX/bin/tessera finds PREFIX/share/tessera/configs.
  std::error_code ec;
  if (const fs::path exe = fs::read_symlink("/proc/self/exe", ec); !ec) {
    dirs.push_back((exe.parent_path().parent_path() / "share" / "tessera" / "configs").string());
  }
  dirs.emplace_back("configs");
  return dirs;
}

std::vector<std::string> shipped_config_names(const std::string& kind, const std::vector<std::string>& dirs) {
  std::vector<std::string> names;
  for (const auto& dir : dirs) {
    std::error_code ec;
    fs::path folder = fs::path(dir) / kind;
    if (!fs::is_directory(folder, ec)) continue;
    for (const auto& entry : fs::directory_iterator(folder, ec)) {
      if (entry.path().extension() == ".toml") names.push_back(entry.path().stem().string());
    }
  }
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  return names;
}

std::string resolve_config_file(const std::string& name_or_path, const std::string& kind,
                                const std::vector<std::string>& dirs) {
  TS_CHECK(!name_or_path.empty(), "plan: an empty {} name was given; pass a TOML file or a shipped name", kind);
  std::error_code ec;
  if (fs::is_regular_file(name_or_path, ec)) return name_or_path;
  std::string looked = name_or_path;
  // A name with a path separator or a .toml suffix was meant as a file: do not reinterpret it.
  bool looks_like_path = name_or_path.find('/') != std::string::npos || fs::path(name_or_path).extension() == ".toml";
  if (!looks_like_path) {
    for (const auto& dir : dirs) {
      fs::path candidate = fs::path(dir) / kind / (name_or_path + ".toml");
      if (fs::is_regular_file(candidate, ec)) return candidate.string();
      looked += ", " + candidate.string();
    }
  }
  std::string shipped;
  for (const auto& n : shipped_config_names(kind, dirs)) shipped += (shipped.empty() ? "" : ", ") + n;
  const std::string what = kind.back() == 's' ? kind.substr(0, kind.size() - 1) : kind;  // "clusters" -> "cluster"
  TS_FAIL("plan: no {} config '{}' (looked at: {}); pass a TOML file{}", what, name_or_path, looked,
          shipped.empty() ? std::string(" (no shipped configs were found; set TESSERA_CONFIG_DIR)")
                          : " or one of the shipped names: " + shipped);
}

config::ModelConfig load_model(const std::string& name_or_path, const std::vector<std::string>& dirs) {
  std::string path = resolve_config_file(name_or_path, "models", dirs);
  toml::table root = config::parse_toml_file(path);
  const toml::node* model = root.get("model");
  TS_CHECK(model != nullptr && model->is_table(), "plan: '{}' has no [model] table; the planner reads the same [model] section as the trainer", path);
  return config::read_model_config(config::TableReader(*model->as_table(), "model"));
}

}  // namespace tessera::plan
