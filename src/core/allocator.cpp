#include "core/allocator.h"

#include <cstdlib>

#include "core/check.h"

namespace tessera {

std::string_view memory_tag_name(MemoryTag tag) {
  switch (tag) {
    case MemoryTag::Params: return "params";
    case MemoryTag::Grads: return "grads";
    case MemoryTag::Optimizer: return "optimizer";
    case MemoryTag::Activations: return "activations";
    case MemoryTag::Comm: return "comm";
    case MemoryTag::Workspace: return "workspace";
    case MemoryTag::WeightStash: return "weight_stash";
    case MemoryTag::WorkingCopies: return "working_copies";
  }
  return "?";
}

namespace {
// Large blocks start on a page, so the nvme tier reads and writes them with direct I/O as they are
// instead of through its staging buffers (memory/nvme_store.h); a page is what O_DIRECT asks.
constexpr size_t kPage = 4096;
constexpr size_t kPageAlignedFrom = size_t{64} << 10;
// A cached block of at least that size serves a request it exceeds by at most 1/kSlackFraction of it.
constexpr size_t kSlackFraction = 8;

size_t alignment_of(size_t bytes) { return bytes >= kPageAlignedFrom ? kPage : MemoryAccountant::kAlignment; }

size_t round_up(size_t bytes) {
  const size_t a = alignment_of(bytes);
  return bytes == 0 ? a : (bytes + a - 1) / a * a;
}
}  // namespace

MemoryAccountant::~MemoryAccountant() { release_cache(); }

void* MemoryAccountant::allocate(size_t bytes, MemoryTag tag) {
  size_t rounded = round_up(bytes);
  void* ptr = nullptr;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (budget_ != 0 && stats_.live_total + bytes > budget_) {
      TS_FAIL(
          "out of memory: allocating {} bytes for '{}' would bring live memory to {} bytes, over the budget of {} "
          "bytes (live: params {}, grads {}, optimizer {}, activations {}, comm {}, workspace {}, weight stash {}). "
          "Reduce the batch or sequence length, enable recomputation or ZeRO, or raise the memory budget",
          bytes, memory_tag_name(tag), stats_.live_total + bytes, budget_, stats_.live[0], stats_.live[1],
          stats_.live[2], stats_.live[3], stats_.live[4], stats_.live[5], stats_.live[6]);
    }
    // The smallest cached block that fits, if it wastes little: an encoded activation's size
    // changes a little from step to step with its values, and a block cached only for its exact
    // size would never serve it again while fresh pages fault.
    auto it = cache_.lower_bound(rounded);
    const size_t slack = rounded >= kPageAlignedFrom ? rounded / kSlackFraction : 0;
    if (it != cache_.end() && it->first <= rounded + slack) {
      ptr = it->second.ptr;
      if (it->first != rounded) capacity_.emplace(ptr, it->first);
      cached_bytes_ -= it->first;
      cache_.erase(it);
    }
    size_t t = static_cast<size_t>(tag);
    stats_.live[t] += bytes;
    stats_.live_total += bytes;
    if (stats_.live[t] > stats_.peak[t]) stats_.peak[t] = stats_.live[t];
    if (stats_.live_total > stats_.peak_total) stats_.peak_total = stats_.live_total;
  }
  if (ptr == nullptr) {
    ptr = std::aligned_alloc(alignment_of(rounded), rounded);
    if (ptr == nullptr) {
      std::lock_guard<std::mutex> lock(mutex_);
      stats_.live[static_cast<size_t>(tag)] -= bytes;
      stats_.live_total -= bytes;
      TS_FAIL("the system refused {} bytes for '{}'", rounded, memory_tag_name(tag));
    }
  }
  return ptr;
}

void MemoryAccountant::deallocate(void* ptr, size_t bytes, MemoryTag tag) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  size_t t = static_cast<size_t>(tag);
  stats_.live[t] -= bytes;
  stats_.live_total -= bytes;
  const auto larger = capacity_.find(ptr);
  size_t size = round_up(bytes);
  if (larger != capacity_.end()) {
    size = larger->second;
    capacity_.erase(larger);
  }
  cache_.emplace(size, CachedBlock{ptr, generation_});
  cached_bytes_ += size;
}

MemoryStats MemoryAccountant::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void MemoryAccountant::reset_peaks() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak = stats_.live;
  stats_.peak_total = stats_.live_total;
}

void MemoryAccountant::set_budget(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  budget_ = bytes;
}

void MemoryAccountant::release_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, block] : cache_) std::free(block.ptr);
  cache_.clear();
  cached_bytes_ = 0;
}

size_t MemoryAccountant::trim_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t freed = 0;
  for (auto it = cache_.begin(); it != cache_.end();) {
    if (it->second.since < generation_) {
      std::free(it->second.ptr);
      freed += it->first;
      it = cache_.erase(it);
    } else {
      ++it;
    }
  }
  cached_bytes_ -= freed;
  ++generation_;
  return freed;
}

size_t MemoryAccountant::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

}  // namespace tessera
