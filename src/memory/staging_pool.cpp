#include "memory/staging_pool.h"

#include <cstdlib>

#include "core/check.h"

namespace tessera::memory {

void StagingPool::FreeBuffer::operator()(std::byte* p) const { std::free(p); }

StagingPool::StagingPool(size_t buffer_bytes, int buffers, size_t alignment)
    : buffer_bytes_(buffer_bytes), max_buffers_(static_cast<size_t>(buffers)), alignment_(alignment) {
  TS_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "staging alignment {} is not a power of two",
           alignment);
  TS_CHECK(buffer_bytes > 0 && buffer_bytes % alignment == 0,
           "staging buffers of {} bytes: the size must be a positive multiple of {}", buffer_bytes, alignment);
  TS_CHECK(buffers >= 1, "the staging pool needs at least one buffer, not {}", buffers);
  // give_back runs in a lease's destructor and must not allocate.
  free_.reserve(max_buffers_);
  owned_.reserve(max_buffers_);
}

StagingPool::Lease::~Lease() {
  if (pool_ != nullptr) pool_->give_back(buffer_);
}

StagingPool::Lease StagingPool::acquire() {
  std::unique_lock lock(mutex_);
  if (free_.empty() && owned_.size() < max_buffers_) {
    void* memory = std::aligned_alloc(alignment_, buffer_bytes_);
    TS_CHECK(memory != nullptr,
             "cannot allocate a staging buffer of {} bytes for direct I/O ({} made so far): free RAM, or make "
             "the staging buffers smaller",
             buffer_bytes_, owned_.size());
    owned_.emplace_back(static_cast<std::byte*>(memory));
    return Lease(this, owned_.back().get());
  }
  returned_.wait(lock, [&] { return !free_.empty(); });
  std::byte* buffer = free_.back();
  free_.pop_back();
  return Lease(this, buffer);
}

void StagingPool::give_back(std::byte* buffer) {
  {
    std::lock_guard lock(mutex_);
    free_.push_back(buffer);
  }
  returned_.notify_one();
}

size_t StagingPool::allocated_bytes() const {
  std::lock_guard lock(mutex_);
  return owned_.size() * buffer_bytes_;
}

}  // namespace tessera::memory
