#pragma once
// The accounting allocator: every byte tessera allocates carries a tag, so memory is counted, not
// guessed. It knows live and peak bytes per tag and in total, and can enforce a budget (an
// emulated device-memory size on CPU) that fails with an error naming the tag, the request and
// the budget. Freed blocks are cached by size and reused, because a training step allocates the
// same sizes every step and fresh pages cost a page fault each; a block of 64 KiB or more also
// serves a smaller request that it exceeds by at most an eighth of the request (an encoded
// activation's size follows its values); a block a whole step left unused goes back to the system
// (trim_cache). The accounting counts the bytes asked for by live tensors, never the cache.
//
// There is no global allocator: a MemoryAccountant is a value owned by whoever runs the model and
// passed to what allocates.
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string_view>

namespace tessera {

// WeightStash: PipeDream-2BW's previous weight version, a second copy of a rank's parameters.
// WorkingCopies: the 16-bit copies of the weights that mixed precision makes for the model to read.
enum class MemoryTag : uint8_t { Params, Grads, Optimizer, Activations, Comm, Workspace, WeightStash, WorkingCopies };
inline constexpr size_t kMemoryTagCount = 8;
std::string_view memory_tag_name(MemoryTag tag);

struct MemoryStats {
  std::array<size_t, kMemoryTagCount> live{};
  std::array<size_t, kMemoryTagCount> peak{};
  size_t live_total = 0;
  size_t peak_total = 0;
  size_t live_of(MemoryTag t) const { return live[static_cast<size_t>(t)]; }
  size_t peak_of(MemoryTag t) const { return peak[static_cast<size_t>(t)]; }
};

class MemoryAccountant {
 public:
  static constexpr size_t kAlignment = 64;

  // budget_bytes == 0 means unlimited.
  explicit MemoryAccountant(size_t budget_bytes = 0) : budget_(budget_bytes) {}
  ~MemoryAccountant();
  MemoryAccountant(const MemoryAccountant&) = delete;
  MemoryAccountant& operator=(const MemoryAccountant&) = delete;

  // 64-byte aligned (a page from 64 KiB on), uninitialized. Throws tessera::Error when the budget
  // would be exceeded.
  void* allocate(size_t bytes, MemoryTag tag);
  void deallocate(void* ptr, size_t bytes, MemoryTag tag);

  MemoryStats stats() const;
  void reset_peaks();  // peaks restart from the live counts (e.g. to measure one step)
  void set_budget(size_t bytes);
  size_t budget() const { return budget_; }
  void release_cache();  // returns cached blocks to the system
  // Returns to the system the cached blocks nobody took since the previous call, and their bytes.
  // Called once a step: a step asks for the same sizes every step, so a block a whole step left
  // in the cache serves no size the run still asks for (an encoded activation's block from when
  // its values were denser), and without this the cache only grows.
  size_t trim_cache();
  size_t cached_bytes() const;  // held in the cache, not counted as live

 private:
  mutable std::mutex mutex_;
  size_t budget_;
  MemoryStats stats_;
  struct CachedBlock {
    void* ptr = nullptr;
    uint64_t since = 0;  // the trim_cache generation in which it was freed
  };
  std::multimap<size_t, CachedBlock> cache_;  // rounded size -> free block
  size_t cached_bytes_ = 0;
  uint64_t generation_ = 0;
  std::map<void*, size_t> capacity_;     // live blocks larger than their request -> their size
};

}  // namespace tessera
