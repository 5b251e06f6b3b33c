#include "memory/disk_bandwidth.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>

#include "core/allocator.h"
#include "core/check.h"
#include "memory/extent_allocator.h"
#include "memory/nvme_store.h"

namespace tessera::memory {

namespace {

// A pattern no two words of which are equal, so a block read from the wrong place is caught.
uint64_t pattern_word(size_t i) { return (i + 1) * 0x9E3779B97F4A7C15ull; }

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

DiskBandwidth measure_disk_bandwidth(const std::string& dir, size_t bytes, int threads) {
  TS_CHECK(bytes >= sizeof(uint64_t), "a disk bandwidth measurement of {} bytes is too small to time", bytes);
  NvmeStore::Options options;
  options.dir = dir;
  options.threads = threads;
  NvmeStore store(options);

  // From the tensor allocator, as a run's tensors are: a buffer this large is page-aligned there, so
  // the store moves it straight between memory and disk in whole blocks, as it moves a unit's
  // parameters or an optimizer chunk, not through its staging buffers.
  const size_t words = bytes / sizeof(uint64_t);
  MemoryAccountant accountant;
  std::unique_ptr<uint64_t, std::function<void(uint64_t*)>> data(
      static_cast<uint64_t*>(accountant.allocate(bytes, MemoryTag::Workspace)),
      [&](uint64_t* p) { accountant.deallocate(p, bytes, MemoryTag::Workspace); });
  for (size_t i = 0; i < words; ++i) data.get()[i] = pattern_word(i);

  // Two extents, each half the bytes, so that the last phase can read one while writing the other.
  const size_t half = bytes / 2 / ExtentAllocator::kAlignment * ExtentAllocator::kAlignment;
  uint64_t* second_data = data.get() + half / sizeof(uint64_t);
  const Extent first = store.allocate(half), second = store.allocate(bytes - half);
  DiskBandwidth result;
  result.direct = store.direct();
  const auto both = [](std::shared_ptr<CopyWork> a, std::shared_ptr<CopyWork> b) {
    a->wait();
    b->wait();
  };

  auto start = std::chrono::steady_clock::now();
  both(store.write(first, data.get(), half), store.write(second, second_data, bytes - half));
  store.flush_to_disk();
  result.write_bytes_per_second = static_cast<double>(bytes) / seconds_since(start);

  std::memset(data.get(), 0, bytes);
  start = std::chrono::steady_clock::now();
  both(store.read(first, data.get(), half), store.read(second, second_data, bytes - half));
  result.read_bytes_per_second = static_cast<double>(bytes) / seconds_since(start);

  // Reads and writes at once, as an offloaded optimizer streams its chunks (the next one read while
  // the last is written back): the first half written again while the second is read again.
  start = std::chrono::steady_clock::now();
  both(store.write(first, data.get(), half), store.read(second, second_data, bytes - half));
  store.flush_to_disk();
  result.mixed_bytes_per_second = static_cast<double>(bytes) / seconds_since(start);

  for (size_t i = 0; i < words; ++i) {
    TS_CHECK(data.get()[i] == pattern_word(i),
             "the disk under '{}' gave back other bytes than were written (word {} of {}): check the disk", dir,
             i, words);
  }
  store.release(first);
  store.release(second);
  return result;
}

}  // namespace tessera::memory
