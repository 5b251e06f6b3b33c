#pragma once
// A bounded pool of aligned staging buffers for direct I/O. O_DIRECT moves data between the disk
// and memory without the page cache, which needs the memory address, the file offset and the
// length aligned to the block size; a tensor's storage is not (the allocator aligns to 64 bytes),
// so its bytes go through one of these buffers on their way. The pool is the whole RAM cost of the
// nvme tier: buffers are made when first needed, never more than `buffers` of them, and a copy
// that finds none free waits for one, so a burst of offloads slows down instead of growing RAM.
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace tessera::memory {

class StagingPool {
 public:
  StagingPool(size_t buffer_bytes, int buffers, size_t alignment);
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // A buffer held until the lease ends.
  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), buffer_(other.buffer_) { other.pool_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    std::byte* data() const { return buffer_; }

   private:
    friend class StagingPool;
    Lease(StagingPool* pool, std::byte* buffer) : pool_(pool), buffer_(buffer) {}
    StagingPool* pool_;
    std::byte* buffer_;
  };

  // Blocks until a buffer is free.
  Lease acquire();

  size_t buffer_bytes() const { return buffer_bytes_; }
  // RAM the buffers made so far hold; at most buffers × buffer_bytes.
  size_t allocated_bytes() const;

 private:
  void give_back(std::byte* buffer);

  struct FreeBuffer {
    void operator()(std::byte* p) const;
  };
  const size_t buffer_bytes_;
  const size_t max_buffers_;
  const size_t alignment_;
  mutable std::mutex mutex_;
  std::condition_variable returned_;
  std::vector<std::unique_ptr<std::byte, FreeBuffer>> owned_;
  std::vector<std::byte*> free_;
};

}  // namespace tessera::memory
