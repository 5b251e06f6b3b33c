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

std::string host_name() {
  char name[256] = {};
  return ::gethostname(name, sizeof(name) - 1) == 0 ? std::string(name) : std::string("an unknown host");
}

std::string read_all(int fd) {
  std::string text(512, '\0');
  const ssize_t n = ::pread(fd, text.data(), text.size(), 0);
  text.resize(n > 0 ? static_cast<size_t>(n) : 0);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
  return text;
}

}  // namespace

RunFolder::RunFolder(std::string path) : path_(std::move(path)) {
  TS_CHECK(!path_.empty(), "train.out_dir is empty; give the folder the run writes to, e.g. runs/mine");
  std::error_code ec;
  TS_CHECK(!fs::exists(path_, ec) || fs::is_directory(path_, ec),
           "train.out_dir '{}' is a file, not a folder; choose another train.out_dir", path_);
  fs::create_directories(path_, ec);
  TS_CHECK(!ec, "cannot create the run folder '{}': {}; choose another train.out_dir", path_, ec.message());
  const std::string lock = (fs::path(path_) / kLockFile).string();
  lock_fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  TS_CHECK(lock_fd_ >= 0, "cannot open '{}' to lock the run folder: {}; is the folder writable?", lock,
           std::strerror(errno));
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_all(lock_fd_);
    ::close(lock_fd_);
    lock_fd_ = -1;
    TS_CHECK(err != EWOULDBLOCK, "the run folder '{}' is in use by another trainer ({}); wait for it to finish, "
             "or give this run another train.out_dir", path_, holder.empty() ? "holder unknown" : holder);
    TS_FAIL("cannot lock the run folder '{}': {}", path_, std::strerror(err));
  }
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32] = {};
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  const std::string me = fmt::format("process {} on host {}, since {}\n", ::getpid(), host_name(), since);
  if (::ftruncate(lock_fd_, 0) != 0 || ::pwrite(lock_fd_, me.data(), me.size(), 0) < 0) {
    // The lock holds without the note; only the message to a second trainer would be poorer.
  }
}

RunFolder::~RunFolder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);  // releases the lock
}

std::string RunFolder::metrics_path() const { return (fs::path(path_) / "metrics.jsonl").string(); }
std::string RunFolder::chart_path() const { return (fs::path(path_) / "loss.svg").string(); }
std::string RunFolder::timeline_path() const { return (fs::path(path_) / "timeline.json").string(); }
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
  for (const std::string& p : {metrics_path(), chart_path(), config_path(), timeline_path()}) fs::remove(p, ec);
  fs::remove_all(checkpoints_dir(), ec);
  TS_CHECK(!ec, "cannot clear the earlier run in '{}': {}", path_, ec.message());
}

}  // namespace tessera::train
