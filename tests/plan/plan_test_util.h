#pragma once
// Helpers shared by the planner tests: shipped configs, error capture.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "config/parallel_layout.h"
#include "core/check.h"
#include "plan/cluster.h"
#include "plan/config_files.h"

namespace tessera::plan::test_util {

// The configs/ folder of the source tree: $TESSERA_SOURCE_DIR/configs when ctest sets it, else the
// library's own search path (which includes the source tree it was built from).
inline std::vector<std::string> config_dirs() {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  if (src != nullptr && *src != '\0') return {(std::filesystem::path(src) / "configs").string()};
  return default_config_dirs();
}

// A file of the source tree, found next to the first configs/ folder that exists.
inline std::string source_file(const std::string& relative) {
  for (const auto& dir : config_dirs()) {
    std::filesystem::path candidate = std::filesystem::path(dir).parent_path() / relative;
    if (std::filesystem::exists(candidate)) return candidate.string();
  }
  return relative;
}

// A pipeline of p stages running m microbatches of one sequence with v chunks per stage, as the
// layout the pipeline models read.
inline config::ParallelLayout pipeline_layout(config::ScheduleKind kind, int p, int64_t m, int v = 1) {
  config::ParallelLayout l;
  l.schedule = kind;
  l.pp = p;
  l.virtual_stages = v;
  l.global_batch = m;
  return l;
}

inline ClusterSpec a100() { return load_cluster("a100-80gb", config_dirs()); }

// The message of the tessera::Error `f` throws, or "" when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& haystack, const std::string& needle) { return haystack.find(needle) != std::string::npos; }

}  // namespace tessera::plan::test_util
