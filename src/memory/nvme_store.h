#pragma once
// The nvme tier: bytes kept in one file in a folder (the run's offload folder), for activations,
// parameters and optimizer state that training moves out of RAM and back (ZeRO-Offload,
// ZeRO-Infinity). Space is handed out in extents (extent_allocator.h); reads and writes run
// asynchronously on the store's own copy engine and return a handle to wait for.
//
// Why one file: the file is made, sized and removed in one place, with one descriptor; space is
// reused by the allocator instead of by the file system, and a crash leaves one file to delete.
// Why direct I/O: offloaded data is read back once, soon, and never again from the page cache;
// buffered I/O would fill RAM with pages of it (the very RAM the offload was to free) and copy
// every byte twice. The data goes through a bounded pool of aligned staging buffers, whose size
// is the store's whole RAM cost. File systems without direct I/O (tmpfs) get buffered I/O.
// Why fallocate: a full disk is found when space is allocated, before a step starts to depend on
// it, not in the middle of a write. Every error names the folder and what to do.
//
// A transfer larger than a staging buffer is split into parts of staging_bytes, which run on all
// the store's threads at once, so one large tensor keeps several requests in flight.
//
// Thread-safe: any thread may allocate, release, read and write. The caller keeps an extent
// allocated, and the memory a transfer reads or writes alive and untouched, until the transfer's
// handle completes; extents written and read at the same time see no order between them.
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "memory/copy_engine.h"
#include "memory/extent_allocator.h"
#include "memory/staging_pool.h"

namespace tessera::memory {

class NvmeStore {
 public:
  struct Options {
    std::string dir;                            // an existing, writable folder
    size_t staging_bytes = size_t{8} << 20;     // per staging buffer, and the size of a transfer's parts
    int staging_buffers = 4;                    // at most this many buffers in RAM at once
    int threads = 2;                            // copy-engine threads of this store
    bool direct_io = true;                      // O_DIRECT where the file system has it
  };

  explicit NvmeStore(Options options);
  // Finishes the transfers still queued, then removes the file.
  ~NvmeStore();
  NvmeStore(const NvmeStore&) = delete;
  NvmeStore& operator=(const NvmeStore&) = delete;

  // round_up(bytes, 4096) bytes of the file, growing it when no released space fits; throws
  // tessera::Error naming the folder, the bytes needed and the bytes free when the disk is full.
  // 0 bytes give the empty extent.
  Extent allocate(size_t bytes);
  void release(const Extent& extent);

  // Copy `bytes` (at most extent.bytes) from src into the extent, or from the extent into dst, on
  // the copy engine. Any alignment, any size. Errors (a full disk, EIO) surface from wait().
  std::shared_ptr<CopyWork> write(const Extent& extent, const void* src, size_t bytes);
  std::shared_ptr<CopyWork> read(const Extent& extent, void* dst, size_t bytes);

  // Waits for the disk to hold everything written so far (fdatasync) and, with buffered I/O,
  // drops the file's pages from the page cache, so that the next read comes from the disk. Call it
  // with no transfer in flight. A bandwidth measurement needs it; training does not.
  void flush_to_disk();

  bool direct() const { return direct_; }
  const std::string& path() const { return path_; }
  uint64_t live_bytes() const;   // in allocated extents
  uint64_t peak_bytes() const;   // the most live_bytes since construction or reset_peak
  void reset_peak();
  uint64_t file_bytes() const;   // the file's size: its high-water mark, kept for reuse
  // The bytes of every transfer posted so far, counted when it is posted: a step's count is what it
  // asked the disk to move, whether its read-ahead for the next step finished before the step's end
  // or after.
  uint64_t bytes_written() const { return bytes_written_.load(std::memory_order_relaxed); }
  uint64_t bytes_read() const { return bytes_read_.load(std::memory_order_relaxed); }
  // RAM held by staging buffers now (0 with buffered I/O).
  size_t staging_ram_bytes() const { return staging_.allocated_bytes(); }

 private:
  void check_transfer(const char* operation, const Extent& extent, const void* data, size_t bytes) const;
  void grow_file(uint64_t new_size, uint64_t bytes_asked);
  // One part of a transfer of transfer_bytes: `bytes` at file offset `offset`.
  void write_part(uint64_t offset, const std::byte* src, size_t bytes, size_t transfer_bytes);
  void read_part(uint64_t offset, std::byte* dst, size_t bytes, size_t transfer_bytes);
  // pwrite/pread of exactly `bytes`, of which `payload` are the caller's (the rest is padding).
  void write_all(uint64_t offset, const std::byte* src, size_t bytes, size_t transfer_bytes);
  void read_all(uint64_t offset, std::byte* dst, size_t bytes, size_t transfer_bytes);
  [[noreturn]] void fail_io(const char* operation, uint64_t offset, size_t bytes, size_t transfer_bytes,
                            int error) const;
  std::string free_space() const;  // "the file system there has N bytes free", for messages

  const Options options_;
  std::string path_;
  int fd_ = -1;
  bool direct_ = false;
  StagingPool staging_;
  mutable std::mutex mutex_;  // guards extents_ and peak_bytes_
  ExtentAllocator extents_;
  uint64_t peak_bytes_ = 0;
  std::atomic<uint64_t> bytes_written_{0};
  std::atomic<uint64_t> bytes_read_{0};
  // Last, and reset first in the destructor: its jobs use everything above.
  std::unique_ptr<CopyEngine> engine_;
};

}  // namespace tessera::memory
