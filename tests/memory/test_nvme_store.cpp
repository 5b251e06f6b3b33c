#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>
#include <vector>

#include "core/check.h"
#include "memory/disk_bandwidth.h"
#include "memory/extent_allocator.h"
#include "memory/nvme_store.h"
#include "store_test_support.h"

using namespace tessera;
using namespace tessera::memory;
using namespace tessera::memory::testing;
namespace fs = std::filesystem;

namespace {

constexpr size_t kMiB = size_t{1} << 20;

NvmeStore::Options options_in(const TempDir& dir) {
  NvmeStore::Options options;
  options.dir = dir.str();
  return options;
}

// The message of the tessera::Error that `body` throws, or "" when it throws none.
template <typename Body>
std::string error_of(Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Writes buffers of random sizes (1 B to 20 MiB, log-uniform, and the edges) from unaligned
// memory, all in flight at once, then reads them into other unaligned memory, all in flight, and
// counts those that came back different. Returns the bytes moved each way.
size_t round_trip_random_buffers(NvmeStore& store, uint64_t seed, int count, int& mismatches) {
  std::mt19937_64 rng(seed);
  std::vector<size_t> sizes = {1, 4095, 4096, 4097, 20 * kMiB};
  std::uniform_real_distribution<double> log_size(0.0, std::log(20.0 * kMiB));
  while (static_cast<int>(sizes.size()) < count) sizes.push_back(static_cast<size_t>(std::exp(log_size(rng))));
  std::vector<Buffer> sources, copies;
  std::vector<Extent> extents;
  std::vector<std::shared_ptr<CopyWork>> work;
  size_t total = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    sources.emplace_back(sizes[i], 1 + rng() % 4095);
    sources.back().fill(rng);
    copies.emplace_back(sizes[i], 1 + rng() % 4095);
    extents.push_back(store.allocate(sizes[i]));
    total += sizes[i];
  }
  for (size_t i = 0; i < sizes.size(); ++i) work.push_back(store.write(extents[i], sources[i].data(), sizes[i]));
  for (auto& w : work) w->wait();
  work.clear();
  for (size_t i = 0; i < sizes.size(); ++i) work.push_back(store.read(extents[i], copies[i].data(), sizes[i]));
  for (auto& w : work) w->wait();
  mismatches = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (!sources[i].equals(copies[i])) ++mismatches;
    store.release(extents[i]);
  }
  return total;
}

void expect_round_trip_from_two_threads(NvmeStore& store) {
  int mismatches[2] = {-1, -1};
  size_t moved[2] = {0, 0};
  std::thread other([&] { moved[1] = round_trip_random_buffers(store, 2, 24, mismatches[1]); });
  moved[0] = round_trip_random_buffers(store, 1, 24, mismatches[0]);
  other.join();
  EXPECT_EQ(mismatches[0], 0);
  EXPECT_EQ(mismatches[1], 0);
  EXPECT_EQ(store.bytes_written(), moved[0] + moved[1]);
  EXPECT_EQ(store.bytes_read(), moved[0] + moved[1]);
  EXPECT_EQ(store.live_bytes(), 0u);
}

}  // namespace

TEST(ExtentAllocator, ReusesReleasedSpaceAndMergesNeighbours) {
  ExtentAllocator extents;
  const Extent a = extents.allocate_at_end(10000);  // 3 blocks
  const Extent b = extents.allocate_at_end(4096);
  const Extent c = extents.allocate_at_end(1);
  EXPECT_EQ(a, (Extent{0, 12288}));
  EXPECT_EQ(b, (Extent{12288, 4096}));
  EXPECT_EQ(c, (Extent{16384, 4096}));
  EXPECT_FALSE(extents.allocate_free(1).has_value());
  extents.release(b);
  EXPECT_EQ(extents.allocate_free(100), b);  // the hole is reused
  extents.release(a);
  extents.release(b);
  EXPECT_EQ(extents.free_ranges(), 1u);  // a and b merged
  extents.release(c);
  EXPECT_EQ(extents.free_ranges(), 1u);  // and c with them
  EXPECT_EQ(extents.allocate_free(20480), (Extent{0, 20480}));
  EXPECT_EQ(extents.free_ranges(), 0u);
  EXPECT_EQ(extents.file_bytes(), 20480u);
}

TEST(ExtentAllocator, TakesTheSmallestFitAndExtendsAFreeTail) {
  ExtentAllocator extents;
  const Extent big = extents.allocate_at_end(8 * 4096);
  const Extent keep = extents.allocate_at_end(4096);
  const Extent small = extents.allocate_at_end(2 * 4096);
  const Extent tail = extents.allocate_at_end(4096);
  extents.release(big);
  extents.release(small);
  EXPECT_EQ(extents.allocate_free(4096), (Extent{small.offset, 4096}));  // best fit, not first fit
  extents.release(tail);  // merges with the rest of `small`: a free tail of 2 blocks
  EXPECT_EQ(extents.size_to_allocate_at_end(5 * 4096), small.offset + 4096 + 5 * 4096);
  EXPECT_EQ(extents.allocate_at_end(5 * 4096), (Extent{small.offset + 4096, 5 * 4096}));
  EXPECT_TRUE(extents.is_allocated(keep));
}

TEST(ExtentAllocator, RefusesAReleaseOfWhatIsNotAllocated) {
  ExtentAllocator extents;
  const Extent a = extents.allocate_at_end(4096);
  extents.release(a);
  EXPECT_NE(error_of([&] { extents.release(a); }).find("not allocated"), std::string::npos);
  EXPECT_THROW(extents.release(Extent{8192, 4096}), Error);
}

TEST(NvmeStore, ExtentsAreReusedAfterReleaseAndCoalesced) {
  TempDir dir;
  NvmeStore store(options_in(dir));
  const Extent a = store.allocate(10000);
  const Extent b = store.allocate(10000);
  const Extent c = store.allocate(10000);
  EXPECT_EQ(a.offset % 4096, 0u);
  EXPECT_EQ(a.bytes, 12288u);
  EXPECT_EQ(store.file_bytes(), 3 * 12288u);
  EXPECT_EQ(fs::file_size(store.path()), 3 * 12288u);  // fallocate sized the file
  store.release(b);
  EXPECT_EQ(store.allocate(5000).offset, b.offset);
  store.release(Extent{b.offset, 8192});
  store.release(a);
  store.release(c);
  const Extent all = store.allocate(3 * 12288);
  EXPECT_EQ(all.offset, 0u);
  EXPECT_EQ(store.file_bytes(), 3 * 12288u);  // no growth: the three were merged
  store.release(all);
}

TEST(NvmeStore, RoundTripsRandomSizesFromTwoThreads) {
  TempDir dir;
  NvmeStore store(options_in(dir));
  expect_round_trip_from_two_threads(store);
  if (store.direct()) {
    EXPECT_LE(store.staging_ram_bytes(), 4 * 8 * kMiB);
  }
}

TEST(NvmeStore, RoundTripsRandomSizesFromTwoThreadsWithBufferedIo) {
  TempDir dir;
  NvmeStore::Options options = options_in(dir);
  options.direct_io = false;
  NvmeStore store(options);
  EXPECT_FALSE(store.direct());
  expect_round_trip_from_two_threads(store);
  EXPECT_EQ(store.staging_ram_bytes(), 0u);
}

// Block-aligned memory in whole blocks skips the staging buffers; a partial last block, or
// unaligned memory on the other side, goes through them; the bytes are the same either way.
TEST(NvmeStore, AlignedMemoryMovesWithoutStaging) {
  TempDir dir;
  NvmeStore store(options_in(dir));
  std::mt19937_64 rng(7);
  Buffer aligned(3 * kMiB, 0), copy(3 * kMiB, 0), unaligned(3 * kMiB, 5);
  aligned.fill(rng);
  const Extent extent = store.allocate(3 * kMiB);
  store.write(extent, aligned.data(), 3 * kMiB)->wait();
  store.read(extent, copy.data(), 3 * kMiB)->wait();
  EXPECT_TRUE(aligned.equals(copy));
  EXPECT_EQ(store.staging_ram_bytes(), 0u) << "aligned whole blocks went through a staging buffer";
  store.read(extent, unaligned.data(), 3 * kMiB)->wait();
  EXPECT_TRUE(aligned.equals(unaligned));
  for (size_t bytes : {size_t{1}, size_t{4097}, 3 * kMiB - 1}) {
    Buffer source(bytes, 0), back(bytes, 0);
    source.fill(rng);
    store.write(extent, source.data(), bytes)->wait();
    store.read(extent, back.data(), bytes)->wait();
    EXPECT_TRUE(source.equals(back)) << bytes << " bytes";
  }
  store.release(extent);
}

// Two staging buffers of 64 KiB and four threads: 160 parts compete for two buffers.
TEST(NvmeStore, MovesTenMiBThroughTwoStagingBuffersOf64KiB) {
  TempDir dir;
  NvmeStore::Options options = options_in(dir);
  options.staging_bytes = 64 << 10;
  options.staging_buffers = 2;
  options.threads = 4;
  NvmeStore store(options);
  std::mt19937_64 rng(3);
  const size_t bytes = 10 * kMiB + 123;
  Buffer source(bytes, 17), back(bytes, 9);
  source.fill(rng);
  const Extent extent = store.allocate(bytes);
  auto written = store.write(extent, source.data(), bytes);
  written->wait();
  store.read(extent, back.data(), bytes)->wait();
  EXPECT_TRUE(source.equals(back));
  EXPECT_LE(store.staging_ram_bytes(), 2 * (64u << 10));
  if (store.direct()) {
    EXPECT_GT(store.staging_ram_bytes(), 0u);
  }
  EXPECT_GT(written->seconds(), 0.0);
}

TEST(NvmeStore, CountsLiveAndPeakBytes) {
  TempDir dir;
  NvmeStore store(options_in(dir));
  const Extent a = store.allocate(5000);
  const Extent b = store.allocate(4096);
  EXPECT_EQ(store.live_bytes(), 8192u + 4096u);
  store.release(a);
  EXPECT_EQ(store.live_bytes(), 4096u);
  EXPECT_EQ(store.peak_bytes(), 12288u);
  store.reset_peak();
  EXPECT_EQ(store.peak_bytes(), 4096u);
  EXPECT_TRUE(store.allocate(0).empty());
  store.release(b);
}

TEST(NvmeStore, RefusesTransfersOutsideAllocatedExtents) {
  TempDir dir;
  NvmeStore store(options_in(dir));
  std::vector<std::byte> memory(10000);
  const Extent extent = store.allocate(4096);
  EXPECT_NE(error_of([&] { store.write(extent, memory.data(), 5000); }).find("does not fit"), std::string::npos);
  store.release(extent);
  EXPECT_NE(error_of([&] { store.read(extent, memory.data(), 10); }).find("not allocated"), std::string::npos);
  EXPECT_THROW(store.release(extent), Error);
}

TEST(NvmeStore, DestructorRemovesItsFile) {
  TempDir dir;
  std::string path, second_path;
  std::vector<std::byte> memory(kMiB, std::byte{1});  // outlives the store: a write reads it until done
  {
    NvmeStore store(options_in(dir));
    NvmeStore second(options_in(dir));
    path = store.path();
    second_path = second.path();
    EXPECT_NE(path, second_path);  // two stores share a folder
    EXPECT_EQ(fs::path(path).parent_path(), dir.path());
    EXPECT_TRUE(fs::exists(path));
    const Extent extent = store.allocate(kMiB);
    store.write(extent, memory.data(), kMiB);  // still in flight when the store goes
  }
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(second_path));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

TEST(NvmeStore, RefusesAMissingFolder) {
  TempDir dir;
  NvmeStore::Options options;
  options.dir = (dir.path() / "absent").string();
  const std::string message = error_of([&] { NvmeStore store(options); });
  EXPECT_NE(message.find(options.dir), std::string::npos) << message;
  EXPECT_NE(message.find("does not exist"), std::string::npos) << message;
  EXPECT_NE(message.find("mkdir -p"), std::string::npos) << message;
}

TEST(NvmeStore, RefusesAFile) {
  TempDir dir;
  NvmeStore::Options options;
  options.dir = (dir.path() / "a-file").string();
  { std::ofstream(options.dir) << "x"; }
  const std::string message = error_of([&] { NvmeStore store(options); });
  EXPECT_NE(message.find(options.dir), std::string::npos) << message;
  EXPECT_NE(message.find("is not a folder"), std::string::npos) << message;
}

// chmod 0555 for a user; root ignores modes, so as root the folder is a read-only tmpfs instead.
TEST(NvmeStore, RefusesAReadOnlyFolder) {
  TempDir dir;
  std::unique_ptr<TmpfsMount> read_only;
  if (::geteuid() == 0) {
    read_only = std::make_unique<TmpfsMount>(dir.path(), MS_RDONLY, "size=1m");
    if (!read_only->mounted()) GTEST_SKIP() << "root ignores chmod, and a read-only tmpfs: " << read_only->why_not();
  } else {
    ASSERT_EQ(::chmod(dir.str().c_str(), 0555), 0) << std::strerror(errno);
  }
  const std::string message = error_of([&] { NvmeStore store(options_in(dir)); });
  EXPECT_NE(message.find(dir.str()), std::string::npos) << message;
  EXPECT_NE(message.find("not writable"), std::string::npos) << message;
}

TEST(NvmeStore, AFullDiskIsFoundAtAllocationAndNamed) {
  TempDir dir;
  TmpfsMount small(dir.path(), 0, "size=1m");
  if (!small.mounted()) GTEST_SKIP() << "a full disk is made by mounting a 1 MiB tmpfs: " << small.why_not();
  {
    NvmeStore store(options_in(dir));
    const Extent fits = store.allocate(512 << 10);
    const std::string message = error_of([&] { store.allocate(4 * kMiB); });
    EXPECT_NE(message.find(dir.str()), std::string::npos) << message;
    EXPECT_NE(message.find("4194304"), std::string::npos) << message;  // the bytes asked for
    EXPECT_NE(message.find("bytes free"), std::string::npos) << message;
    EXPECT_EQ(store.file_bytes(), 512u << 10);  // nothing half-allocated
    EXPECT_EQ(fs::file_size(store.path()), 512u << 10);
    std::vector<std::byte> memory(1000, std::byte{42}), back(1000);
    store.write(fits, memory.data(), memory.size())->wait();  // the store still works
    store.read(fits, back.data(), back.size())->wait();
    EXPECT_EQ(memory, back);
  }
}

TEST(DiskBandwidth, MeasuresPositiveRatesAndLeavesNoFile) {
  TempDir dir;
  const DiskBandwidth bandwidth = measure_disk_bandwidth(dir.str(), 64 * kMiB, 2);
  EXPECT_GT(bandwidth.write_bytes_per_second, 0.0);
  EXPECT_GT(bandwidth.read_bytes_per_second, 0.0);
  EXPECT_TRUE(std::isfinite(bandwidth.write_bytes_per_second));
  EXPECT_TRUE(std::isfinite(bandwidth.read_bytes_per_second));
  EXPECT_GT(bandwidth.mixed_bytes_per_second, 0.0);
  EXPECT_TRUE(std::isfinite(bandwidth.mixed_bytes_per_second));
  EXPECT_TRUE(fs::is_empty(dir.path()));
}
