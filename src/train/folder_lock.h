#pragma once
// An exclusive lock on a folder a process works in (flock on a lock file in it, released by the
// kernel when the process ends, however it ends), with a note of the holder (its process, host
// and start) for whoever is refused.
#include <optional>
#include <string>
#include <utility>

namespace tessera::train {

class FolderLock {
 public:
  // Takes the lock on `lock_file`, or returns nothing and sets `holder` to the holder's note ("" if
  // unknown). Throws when the file cannot be opened; `what` names the folder in that message.
  static std::optional<FolderLock> try_take(const std::string& lock_file, const std::string& what, std::string& holder);
  FolderLock(FolderLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  FolderLock& operator=(FolderLock&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  FolderLock(const FolderLock&) = delete;
  ~FolderLock();

 private:
  explicit FolderLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace tessera::train
