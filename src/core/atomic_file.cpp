#include "core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace tessera {

namespace {

// The process's umask, read without changing it (umask(2) can only be read by setting it, which
// would race with other threads creating files). Linux reports it in /proc/self/status.
mode_t current_umask() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  unsigned mask = 022;
  if (f != nullptr) {
    char line[256];
    while (std::fgets(line, sizeof(line), f) != nullptr) {
      if (std::sscanf(line, "Umask: %o", &mask) == 1) break;
    }
    std::fclose(f);
  }
  return static_cast<mode_t>(mask);
}

}  // namespace

AtomicFile::AtomicFile(std::filesystem::path target) : target_(std::move(target)) {
  const std::filesystem::path dir = target_.has_parent_path() ? target_.parent_path() : std::filesystem::path(".");
  // Beside the target, so the rename stays within one file system.
  const std::string pattern = (dir / fmt::format(".{}.tmp-XXXXXX", target_.filename().string())).string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  fd_ = ::mkstemp(name.data());
  TS_CHECK(fd_ >= 0, "cannot create a file in '{}' to write '{}': {}", dir.string(), target_.string(),
           std::strerror(errno));
  tmp_ = name.data();
  // mkstemp makes the file private (0600); the finished file gets what any new file would.
  TS_CHECK(::fchmod(fd_, 0666 & ~current_umask()) == 0, "cannot set the permissions of '{}': {}", tmp_,
           std::strerror(errno));
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!tmp_.empty()) ::unlink(tmp_.c_str());
}

void AtomicFile::write(const void* data, size_t bytes) {
  TS_CHECK(fd_ >= 0, "write to '{}' after commit", target_.string());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd_, p, std::min<size_t>(bytes, size_t{1} << 30));
    if (n < 0 && errno == EINTR) continue;
    TS_CHECK(n > 0, "writing '{}' failed: {} (is the disk full?)", target_.string(), std::strerror(errno));
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  TS_CHECK(fd_ >= 0, "'{}' committed twice", target_.string());
  TS_CHECK(::fsync(fd_) == 0, "syncing '{}' failed: {}", target_.string(), std::strerror(errno));
  const int rc = ::close(fd_);
  fd_ = -1;
  TS_CHECK(rc == 0, "closing '{}' failed: {}", target_.string(), std::strerror(errno));
  TS_CHECK(::rename(tmp_.c_str(), target_.c_str()) == 0, "renaming '{}' to '{}' failed: {}", tmp_,
           target_.string(), std::strerror(errno));
  tmp_.clear();
  sync_path(target_.has_parent_path() ? target_.parent_path() : std::filesystem::path("."));
}

void write_file_atomically(const std::filesystem::path& path, std::string_view bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

void sync_path(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK(fd >= 0, "cannot open '{}' to sync it: {}", path.string(), std::strerror(errno));
  const int rc = ::fsync(fd);
  ::close(fd);
  TS_CHECK(rc == 0, "syncing '{}' failed: {}", path.string(), std::strerror(errno));
}

}  // namespace tessera
