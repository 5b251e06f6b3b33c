#pragma once
// Folders for the nvme-store tests: a temporary folder removed afterwards, and a tmpfs mounted on
// one (a small one to fill, or a read-only one), which needs root.
#include <sys/mount.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera::memory::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "tessera_nvme_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + std::string(std::strerror(errno)));
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ignored);
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

class TmpfsMount {
 public:
  TmpfsMount(const std::filesystem::path& where, unsigned long flags, const std::string& options) : where_(where) {
    if (::geteuid() != 0) {
      why_not_ = "mounting a tmpfs needs root";
    } else if (::mount("tmpfs", where.c_str(), "tmpfs", flags, options.c_str()) != 0) {
      why_not_ = std::string("mount -t tmpfs failed: ") + std::strerror(errno);
    }
  }
  ~TmpfsMount() {
    if (mounted() && ::umount(where_.c_str()) != 0) ::umount2(where_.c_str(), MNT_DETACH);
  }
  TmpfsMount(const TmpfsMount&) = delete;
  TmpfsMount& operator=(const TmpfsMount&) = delete;
  bool mounted() const { return why_not_.empty(); }
  const std::string& why_not() const { return why_not_; }

 private:
  std::filesystem::path where_;
  std::string why_not_;
};

// `bytes` of random data starting at a pointer that is not 4096-aligned (nor 8-aligned, when
// `misalign` is odd), inside a vector that owns them.
class Buffer {
 public:
  Buffer(size_t bytes, size_t misalign) : storage_(bytes + 2 * 4096) {
    const auto address = reinterpret_cast<uintptr_t>(storage_.data());
    const size_t to_aligned = (4096 - address % 4096) % 4096;
    data_ = storage_.data() + to_aligned + misalign;
    bytes_ = bytes;
  }
  std::byte* data() { return data_; }
  size_t size() const { return bytes_; }
  void fill(std::mt19937_64& rng) {
    for (size_t i = 0; i < bytes_; i += 8) {
      const uint64_t word = rng();
      std::memcpy(data_ + i, &word, std::min<size_t>(8, bytes_ - i));
    }
  }
  bool equals(const Buffer& other) const {
    return bytes_ == other.bytes_ && std::memcmp(data_, other.data_, bytes_) == 0;
  }

 private:
  std::vector<std::byte> storage_;
  std::byte* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace tessera::memory::testing
