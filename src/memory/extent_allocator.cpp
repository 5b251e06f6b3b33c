#include "memory/extent_allocator.h"

#include "core/check.h"

namespace tessera::memory {

std::optional<Extent> ExtentAllocator::allocate_free(uint64_t bytes) {
  const uint64_t length = round_up(bytes);
  TS_CHECK(length > 0, "an extent of {} bytes was asked for; 0-byte allocations have no extent", bytes);
  auto best = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second >= length && (best == free_.end() || it->second < best->second)) best = it;
  }
  if (best == free_.end()) return std::nullopt;
  const Extent extent{best->first, length};
  const uint64_t rest = best->second - length;
  free_.erase(best);
  if (rest > 0) free_.emplace(extent.offset + length, rest);
  allocated_.emplace(extent.offset, length);
  live_bytes_ += length;
  return extent;
}

uint64_t ExtentAllocator::size_to_allocate_at_end(uint64_t bytes) const {
  uint64_t start = file_bytes_;
  if (!free_.empty()) {
    const auto& [offset, length] = *free_.rbegin();
    if (offset + length == file_bytes_) start = offset;
  }
  return start + round_up(bytes);
}

Extent ExtentAllocator::allocate_at_end(uint64_t bytes) {
  const uint64_t length = round_up(bytes);
  TS_CHECK(length > 0, "an extent of {} bytes was asked for; 0-byte allocations have no extent", bytes);
  uint64_t start = file_bytes_;
  if (!free_.empty()) {
    auto last = std::prev(free_.end());
    if (last->first + last->second == file_bytes_) {
      start = last->first;
      free_.erase(last);
    }
  }
  file_bytes_ = start + length;
  allocated_.emplace(start, length);
  live_bytes_ += length;
  return Extent{start, length};
}

bool ExtentAllocator::is_allocated(const Extent& extent) const {
  const auto it = allocated_.find(extent.offset);
  return it != allocated_.end() && it->second == extent.bytes;
}

void ExtentAllocator::release(const Extent& extent) {
  TS_CHECK(is_allocated(extent),
           "extent [{}, +{}) is released but is not allocated: it was released already, or it is not one "
           "that allocate returned",
           extent.offset, extent.bytes);
  allocated_.erase(extent.offset);
  live_bytes_ -= extent.bytes;
  uint64_t offset = extent.offset;
  uint64_t length = extent.bytes;
  // Merge with the free range after it, then with the one before it.
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && next->first == offset + length) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      offset = prev->first;
      length += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(offset, length);
}

}  // namespace tessera::memory
