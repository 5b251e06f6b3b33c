#include "memory/disk_bandwidth.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/check.h"
#include "memory/nvme_store.h"

namespace tessera::memory {

namespace {

struct FreeMemory {
  void operator()(void* p) const { std::free(p); }
};

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

  // Aligned as the tensor allocator aligns storage (64 bytes, not a disk block), so the data goes
  // through the staging buffers as a tensor's would.
  const size_t words = bytes / sizeof(uint64_t);
  std::unique_ptr<uint64_t, FreeMemory> data(static_cast<uint64_t*>(std::aligned_alloc(64, (bytes + 63) / 64 * 64)));
  TS_CHECK(data != nullptr, "cannot allocate {} bytes of RAM to measure the disk bandwidth of '{}': measure fewer bytes",
           bytes, dir);
  for (size_t i = 0; i < words; ++i) data.get()[i] = pattern_word(i);

  const Extent extent = store.allocate(bytes);
  DiskBandwidth result;
  result.direct = store.direct();

  auto start = std::chrono::steady_clock::now();
  store.write(extent, data.get(), bytes)->wait();
  store.flush_to_disk();
  result.write_bytes_per_second = static_cast<double>(bytes) / seconds_since(start);

  std::memset(data.get(), 0, bytes);
  start = std::chrono::steady_clock::now();
  store.read(extent, data.get(), bytes)->wait();
  result.read_bytes_per_second = static_cast<double>(bytes) / seconds_since(start);

  for (size_t i = 0; i < words; ++i) {
    TS_CHECK(data.get()[i] == pattern_word(i),
             "the disk under '{}' gave back other bytes than were written (word {} of {}): check the disk", dir,
             i, words);
  }
  store.release(extent);
  return result;
}

}  // namespace tessera::memory
