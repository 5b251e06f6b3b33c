#include "train/folder_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/check.h"

namespace tessera::train {

namespace {

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

std::optional<FolderLock> FolderLock::try_take(const std::string& lock_file, const std::string& what,
                                               std::string& holder) {
  const int fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  TS_CHECK(fd >= 0, "cannot open '{}' to lock {}: {}; is the folder writable?", lock_file, what, std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    holder = read_all(fd);
    ::close(fd);
    TS_CHECK(err == EWOULDBLOCK, "cannot lock {}: {}", what, std::strerror(err));
    return std::nullopt;
  }
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  ::gmtime_r(&now, &utc);
  char since[32] = {};
  std::strftime(since, sizeof since, "%Y-%m-%d %H:%M:%S UTC", &utc);
  const std::string me = fmt::format("process {} on host {}, since {}\n", ::getpid(), host_name(), since);
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, me.data(), me.size(), 0) < 0) {
    // The lock holds without the note; only the message to a refused process would be poorer.
  }
  return FolderLock(fd);
}

FolderLock::~FolderLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace tessera::train
