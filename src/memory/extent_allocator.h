#pragma once
// Space in one file, handed out in extents: the bookkeeping of the nvme store (nvme_store.h),
// kept apart from the file so it can be tested on its own. It does no I/O and takes no lock; the
// store calls it under its own.
//
// Offsets and lengths are multiples of 4096, the block size direct I/O needs (and a multiple of
// every logical block size in use), so an extent can be read and written without touching a
// neighbour. Released extents go to a free list that merges neighbours, so a training step that
// frees and allocates the same sizes every step reuses the same space and the file stops growing
// after the first step. An allocation takes the smallest free range that fits (best fit, which
// keeps large ranges whole for large tensors); when none fits it goes at the end of the file,
// starting inside a free range that ends the file, so the file grows only by what is missing.
#include <cstdint>
#include <map>
#include <optional>

namespace tessera::memory {

struct Extent {
  uint64_t offset = 0;
  uint64_t bytes = 0;  // a multiple of 4096; 0 for the empty extent of a 0-byte allocation
  bool empty() const { return bytes == 0; }
  bool operator==(const Extent&) const = default;
};

class ExtentAllocator {
 public:
  static constexpr uint64_t kAlignment = 4096;
  static uint64_t round_up(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

  // An extent of round_up(bytes) from the free list, or none when no free range is large enough.
  std::optional<Extent> allocate_free(uint64_t bytes);
  // The file size an extent of round_up(bytes) at the end needs. The caller grows the file to it,
  // then takes the extent with allocate_at_end.
  uint64_t size_to_allocate_at_end(uint64_t bytes) const;
  Extent allocate_at_end(uint64_t bytes);

  // Gives an allocated extent back; refuses one that is not allocated (freed twice, never
  // allocated, or a different length).
  void release(const Extent& extent);
  bool is_allocated(const Extent& extent) const;

  uint64_t file_bytes() const { return file_bytes_; }  // the end of the space handed out so far
  uint64_t live_bytes() const { return live_bytes_; }  // allocated and not released
  size_t free_ranges() const { return free_.size(); }

 private:
  std::map<uint64_t, uint64_t> free_;       // offset -> bytes; no two touch
  std::map<uint64_t, uint64_t> allocated_;  // offset -> bytes
  uint64_t file_bytes_ = 0;
  uint64_t live_bytes_ = 0;
};

}  // namespace tessera::memory
