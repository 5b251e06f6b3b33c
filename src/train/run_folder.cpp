#include "train/run_folder.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <ctime>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"

namespace fs = std::filesystem;

namespace tessera::train {

namespace {

constexpr const char* kLockFile = ".lock";

}  // namespace

RunFolder::RunFolder(std::string path) : path_(std::move(path)) {
  TS_CHECK(!path_.empty(), "train.out_dir is empty; give the folder the run writes to, e.g. runs/mine");
  std::error_code ec;
  TS_CHECK(!fs::exists(path_, ec) || fs::is_directory(path_, ec),
           "train.out_dir '{}' is a file, not a folder; choose another train.out_dir", path_);
  fs::create_directories(path_, ec);
  TS_CHECK(!ec, "cannot create the run folder '{}': {}; choose another train.out_dir", path_, ec.message());
  std::string holder;
  lock_ = FolderLock::try_take((fs::path(path_) / kLockFile).string(), fmt::format("the run folder '{}'", path_),
                               holder);
  TS_CHECK(lock_.has_value(), "the run folder '{}' is in use by another trainer ({}); wait for it to finish, or give "
           "this run another train.out_dir", path_, holder.empty() ? "holder unknown" : holder);
}

RunFolder::~RunFolder() = default;

std::string RunFolder::metrics_path() const { return (fs::path(path_) / "metrics.jsonl").string(); }
std::string RunFolder::chart_path() const { return (fs::path(path_) / "loss.svg").string(); }
std::string RunFolder::timeline_path() const { return (fs::path(path_) / "timeline.json").string(); }
std::string RunFolder::trace_path() const { return (fs::path(path_) / "trace.json").string(); }
std::string RunFolder::profile_path() const { return (fs::path(path_) / "profile.txt").string(); }
std::string RunFolder::config_path() const { return (fs::path(path_) / "config.toml").string(); }
std::string RunFolder::checkpoints_dir() const { return (fs::path(path_) / "checkpoints").string(); }

std::optional<std::string> RunFolder::earlier_run() const {
  std::error_code ec;
  int checkpoints = 0;
  if (fs::is_directory(checkpoints_dir(), ec)) {
    for (const auto& e : fs::directory_iterator(checkpoints_dir(), ec)) {
      checkpoints += e.is_directory() && e.path().filename().string().starts_with("step_") &&
                     fs::exists(e.path() / "manifest.json");
    }
  }
  const bool metrics = fs::exists(metrics_path(), ec) && fs::file_size(metrics_path(), ec) > 0;
  if (checkpoints == 0 && !metrics) return std::nullopt;
  if (checkpoints == 0) return std::string("a metrics log and no checkpoint");
  return fmt::format("{} checkpoint{}", checkpoints, checkpoints == 1 ? "" : "s");
}

void RunFolder::clear() {
  std::error_code ec;
  for (const std::string& p : {metrics_path(), chart_path(), config_path(), timeline_path(), trace_path(), profile_path()}) fs::remove(p, ec);
  fs::remove_all(checkpoints_dir(), ec);
  TS_CHECK(!ec, "cannot clear the earlier run in '{}': {}", path_, ec.message());
}

}  // namespace tessera::train
