#include "memory/nvme_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <vector>

#include "core/check.h"

namespace tessera::memory {

namespace {

constexpr uint64_t kBlock = ExtentAllocator::kAlignment;

NvmeStore::Options validated(NvmeStore::Options options) {
  TS_CHECK(!options.dir.empty(), "the nvme store needs a folder for its file: set the offload folder");
  TS_CHECK(options.staging_bytes > 0 && options.staging_bytes % kBlock == 0,
           "offload staging buffers of {} bytes: use a positive multiple of {} (direct I/O moves whole blocks)",
           options.staging_bytes, kBlock);
  TS_CHECK(options.staging_buffers >= 1, "offload staging buffers: {} given, at least 1 is needed",
           options.staging_buffers);
  TS_CHECK(options.threads >= 1, "offload copy threads: {} given, at least 1 is needed", options.threads);
  return options;
}

void check_folder(const std::string& dir) {
  struct stat status {};
  if (::stat(dir.c_str(), &status) != 0) {
    const int error = errno;
    TS_CHECK(error != ENOENT,
             "the offload folder '{}' does not exist: create it (mkdir -p '{}') or point the offload folder at "
             "one that does",
             dir, dir);
    TS_FAIL("cannot look at the offload folder '{}': {}; check that the path and its parents can be reached", dir,
            std::strerror(error));
  }
  TS_CHECK(S_ISDIR(status.st_mode),
           "the offload folder '{}' is not a folder: point the offload folder at a folder on a fast local disk",
           dir);
}

// Creates store-<pid>-<n>.bin with the first n not taken: stores of several processes, or several
// stores of one process, can share a folder. Creating it is also the probe for a writable folder.
int create_data_file(const std::string& dir, std::string& path) {
  for (int n = 0; n < 100000;) {
    path = (std::filesystem::path(dir) / fmt::format("store-{}-{}.bin", ::getpid(), n)).string();
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd >= 0) return fd;
    const int error = errno;
    if (error == EINTR) continue;
    if (error == EEXIST) {
      ++n;
      continue;
    }
    TS_CHECK(error != EACCES && error != EPERM && error != EROFS,
             "the offload folder '{}' is not writable (creating '{}' failed: {}): give this user write "
             "permission there, mount it read-write, or point the offload folder at a writable one",
             dir, path, std::strerror(error));
    TS_FAIL("cannot create the offload file '{}': {}", path, std::strerror(error));
  }
  TS_FAIL("the offload folder '{}' holds 100000 store files of process {} already: remove the stale ones", dir,
          ::getpid());
}

// Whether direct I/O works on this file: the flag is refused by file systems without it (EINVAL),
// and one aligned block written proves the rest of the path takes it too.
bool turn_on_direct_io(int fd, const std::string& path) {
  const int flags = ::fcntl(fd, F_GETFL);
  TS_CHECK(flags >= 0, "cannot read the flags of '{}': {}", path, std::strerror(errno));
  if (::fcntl(fd, F_SETFL, flags | O_DIRECT) != 0) {
    TS_CHECK(errno == EINVAL, "cannot turn on direct I/O for '{}': {}", path, std::strerror(errno));
    return false;
  }
  void* block = std::aligned_alloc(kBlock, kBlock);
  TS_CHECK(block != nullptr, "cannot allocate {} bytes to probe direct I/O", kBlock);
  std::memset(block, 0, kBlock);
  ssize_t written = 0;
  do {
    written = ::pwrite(fd, block, kBlock, 0);
  } while (written < 0 && errno == EINTR);
  const int error = errno;
  std::free(block);
  if (written < 0 && error == EINVAL) {
    TS_CHECK(::fcntl(fd, F_SETFL, flags) == 0, "cannot turn direct I/O off again for '{}': {}", path,
             std::strerror(errno));
    return false;
  }
  TS_CHECK(written == static_cast<ssize_t>(kBlock), "writing a first block to '{}' failed: {}", path,
           written < 0 ? std::strerror(error) : "short write");
  TS_CHECK(::ftruncate(fd, 0) == 0, "cannot empty '{}' after probing it: {}", path, std::strerror(errno));
  return true;
}

bool is_out_of_space(int error) { return error == ENOSPC || error == EDQUOT || error == EFBIG; }

}  // namespace

NvmeStore::NvmeStore(Options options)
    : options_(validated(std::move(options))), staging_(options_.staging_bytes, options_.staging_buffers, kBlock) {
  check_folder(options_.dir);
  fd_ = create_data_file(options_.dir, path_);
  try {
    direct_ = options_.direct_io && turn_on_direct_io(fd_, path_);
    engine_ = std::make_unique<CopyEngine>(options_.threads);
  } catch (...) {
    // No destructor runs for a store that failed to construct.
    ::close(fd_);
    ::unlink(path_.c_str());
    throw;
  }
}

NvmeStore::~NvmeStore() {
  engine_.reset();
  // A destructor has nobody to report to, and the file is scratch: failures here change nothing.
  ::close(fd_);
  ::unlink(path_.c_str());
}

std::string NvmeStore::free_space() const {
  struct statvfs fs {};
  if (::statvfs(options_.dir.c_str(), &fs) != 0) {
    return fmt::format("its free space is unknown (statvfs failed: {})", std::strerror(errno));
  }
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  return fmt::format("the file system there has {} bytes free ({:.1f} MiB)", free_bytes,
                     static_cast<double>(free_bytes) / (1 << 20));
}

void NvmeStore::grow_file(uint64_t new_size, uint64_t bytes_asked) {
  const uint64_t old_size = extents_.file_bytes();
  if (new_size <= old_size) return;
  int rc = 0;
  do {
    rc = ::fallocate(fd_, 0, static_cast<off_t>(old_size), static_cast<off_t>(new_size - old_size));
  } while (rc != 0 && errno == EINTR);
  if (rc == 0) return;
  const int error = errno;
  if (error == EOPNOTSUPP) {
    // A file system without fallocate: size the file; a full disk then shows at write time.
    TS_CHECK(::ftruncate(fd_, static_cast<off_t>(new_size)) == 0, "cannot grow the offload file '{}' to {} bytes: {}",
             path_, new_size, std::strerror(errno));
    return;
  }
  // fallocate may have reserved part of the range before it failed: give that back.
  const bool shrunk = ::ftruncate(fd_, static_cast<off_t>(old_size)) == 0;
  const std::string shrink_note =
      shrunk ? "" : fmt::format(" (shrinking the file back to {} bytes failed too: {})", old_size, std::strerror(errno));
  TS_CHECK(!is_out_of_space(error),
           "the offload folder '{}' has no room for {} bytes more: an extent of {} bytes was asked for and the "
           "store's file would grow from {} to {} bytes, but fallocate failed ({}); {}{}. Free space there, point "
           "the offload folder at a larger disk, or offload less",
           options_.dir, new_size - old_size, bytes_asked, old_size, new_size, std::strerror(error), free_space(),
           shrink_note);
  TS_FAIL("cannot grow the offload file '{}' from {} to {} bytes: {}{}", path_, old_size, new_size,
          std::strerror(error), shrink_note);
}

Extent NvmeStore::allocate(size_t bytes) {
  if (bytes == 0) return Extent{};
  std::lock_guard lock(mutex_);
  std::optional<Extent> extent = extents_.allocate_free(bytes);
  if (!extent) {
    grow_file(extents_.size_to_allocate_at_end(bytes), bytes);
    extent = extents_.allocate_at_end(bytes);
  }
  peak_bytes_ = std::max(peak_bytes_, extents_.live_bytes());
  return *extent;
}

void NvmeStore::release(const Extent& extent) {
  if (extent.empty()) return;
  std::lock_guard lock(mutex_);
  extents_.release(extent);
}

uint64_t NvmeStore::live_bytes() const {
  std::lock_guard lock(mutex_);
  return extents_.live_bytes();
}

uint64_t NvmeStore::peak_bytes() const {
  std::lock_guard lock(mutex_);
  return peak_bytes_;
}

void NvmeStore::reset_peak() {
  std::lock_guard lock(mutex_);
  peak_bytes_ = extents_.live_bytes();
}

uint64_t NvmeStore::file_bytes() const {
  std::lock_guard lock(mutex_);
  return extents_.file_bytes();
}

void NvmeStore::check_transfer(const char* operation, const Extent& extent, const void* data, size_t bytes) const {
  TS_CHECK(bytes <= extent.bytes, "a {} of {} bytes does not fit its extent of {} bytes at offset {} in '{}'",
           operation, bytes, extent.bytes, extent.offset, path_);
  TS_CHECK(data != nullptr || bytes == 0, "a {} of {} bytes was given no memory", operation, bytes);
  if (extent.empty()) return;
  std::lock_guard lock(mutex_);
  TS_CHECK(extents_.is_allocated(extent),
           "a {} of {} bytes was given extent [{}, +{}) of '{}', which is not allocated (released already?)",
           operation, bytes, extent.offset, extent.bytes, path_);
}

std::shared_ptr<CopyWork> NvmeStore::write(const Extent& extent, const void* src, size_t bytes) {
  check_transfer("write", extent, src, bytes);
  const auto* memory = static_cast<const std::byte*>(src);
  std::vector<std::function<void()>> parts;
  for (size_t done = 0; done < bytes; done += options_.staging_bytes) {
    const size_t part = std::min(options_.staging_bytes, bytes - done);
    parts.emplace_back([this, offset = extent.offset + done, p = memory + done, part, bytes] {
      write_part(offset, p, part, bytes);
    });
  }
  bytes_written_.fetch_add(bytes, std::memory_order_relaxed);
  return engine_->submit_parts(std::move(parts));
}

std::shared_ptr<CopyWork> NvmeStore::read(const Extent& extent, void* dst, size_t bytes) {
  check_transfer("read", extent, dst, bytes);
  auto* memory = static_cast<std::byte*>(dst);
  std::vector<std::function<void()>> parts;
  for (size_t done = 0; done < bytes; done += options_.staging_bytes) {
    const size_t part = std::min(options_.staging_bytes, bytes - done);
    parts.emplace_back([this, offset = extent.offset + done, p = memory + done, part, bytes] {
      read_part(offset, p, part, bytes);
    });
  }
  bytes_read_.fetch_add(bytes, std::memory_order_relaxed);
  return engine_->submit_parts(std::move(parts));
}

// With direct I/O, memory that is block-aligned is moved as it is, whole blocks of it; the rest
// (unaligned memory, or the last partial block) goes through a staging buffer, padded with zeros
// to whole blocks. The padding stays inside the extent: parts start at multiples of staging_bytes
// in it, and its length is whole blocks.
void NvmeStore::write_part(uint64_t offset, const std::byte* src, size_t bytes, size_t transfer_bytes) {
  if (!direct_) {
    write_all(offset, src, bytes, transfer_bytes);
    return;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(src) % kBlock == 0;
  const size_t head = aligned ? bytes / kBlock * kBlock : 0;
  if (head > 0) write_all(offset, src, head, transfer_bytes);
  if (head == bytes) return;
  const size_t rest = bytes - head;
  const size_t padded = ExtentAllocator::round_up(rest);
  StagingPool::Lease staging = staging_.acquire();
  std::memcpy(staging.data(), src + head, rest);
  std::memset(staging.data() + rest, 0, padded - rest);
  write_all(offset + head, staging.data(), padded, transfer_bytes);
}

void NvmeStore::read_part(uint64_t offset, std::byte* dst, size_t bytes, size_t transfer_bytes) {
  if (!direct_) {
    read_all(offset, dst, bytes, transfer_bytes);
    return;
  }
  const bool aligned = reinterpret_cast<uintptr_t>(dst) % kBlock == 0;
  const size_t head = aligned ? bytes / kBlock * kBlock : 0;
  if (head > 0) read_all(offset, dst, head, transfer_bytes);
  if (head == bytes) return;
  const size_t rest = bytes - head;
  StagingPool::Lease staging = staging_.acquire();
  read_all(offset + head, staging.data(), ExtentAllocator::round_up(rest), transfer_bytes);
  std::memcpy(dst + head, staging.data(), rest);
}

void NvmeStore::write_all(uint64_t offset, const std::byte* src, size_t bytes, size_t transfer_bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pwrite(fd_, src + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_io("write", offset, bytes, transfer_bytes, n < 0 ? errno : 0);
    done += static_cast<size_t>(n);
  }
}

void NvmeStore::read_all(uint64_t offset, std::byte* dst, size_t bytes, size_t transfer_bytes) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd_, dst + done, bytes - done, static_cast<off_t>(offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_io("read", offset, bytes, transfer_bytes, n < 0 ? errno : 0);
    done += static_cast<size_t>(n);
  }
}

void NvmeStore::fail_io(const char* operation, uint64_t offset, size_t bytes, size_t transfer_bytes,
                        int error) const {
  const std::string what =
      error != 0 ? std::string(std::strerror(error))
                 : (std::string(operation) == "read" ? "the file ended early (was it truncated from outside?)"
                                                     : "no bytes were written");
  std::string fix;
  if (is_out_of_space(error)) {
    fix = fmt::format("; {}. Free space there, point the offload folder at a larger disk, or offload less",
                      free_space());
  } else if (error == EIO) {
    fix = "; the disk reported an I/O error: check its health (dmesg, smartctl) or use another disk";
  }
  TS_FAIL("offload {} of {} bytes in the offload folder '{}' failed ({} bytes at offset {} of '{}'): {}{}",
          operation, transfer_bytes, options_.dir, bytes, offset, path_, what, fix);
}

void NvmeStore::flush_to_disk() {
  TS_CHECK(::fdatasync(fd_) == 0, "syncing the offload file '{}' failed: {}", path_, std::strerror(errno));
  if (direct_) return;
  const int rc = ::posix_fadvise(fd_, 0, 0, POSIX_FADV_DONTNEED);
  TS_CHECK(rc == 0, "dropping the offload file '{}' from the page cache failed: {}", path_, std::strerror(rc));
}

}  // namespace tessera::memory
