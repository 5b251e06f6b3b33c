#include "cli/calibrate_disk.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "core/check.h"
#include "memory/disk_bandwidth.h"
#include "memory/extent_allocator.h"
#include "memory/nvme_store.h"

namespace tessera::cli {

namespace {

constexpr size_t kMiB = size_t{1} << 20;
// Enough that the store's start-up and a fresh file's first blocks do not set the rate: at 512 MiB
// this disk measured 2.3 GB/s written and 3.3 both at once, at 2 GiB 2.5 and 4.6, which is what a
// 3.2B-parameter run's optimizer stream sustained.
constexpr size_t kUsualBytes = 2048 * kMiB;
// Below this a measurement times the store's fixed costs more than the disk.
constexpr size_t kLeastBytes = 32 * kMiB;

std::string mib(double bytes) { return fmt::format("{:.0f} MiB", bytes / static_cast<double>(kMiB)); }

}  // namespace

DiskMeasurement plan_disk_measurement(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TS_CHECK(!dir.empty() && fs::exists(dir, ec),
           "plan --calibrate-here: --offload-dir '{}' does not exist; make it (on the disk runs will offload to, as "
           "memory.offload_dir) or leave the option out to measure the disk of --out's folder", dir);
  TS_CHECK(fs::is_directory(dir, ec), "plan --calibrate-here: --offload-dir '{}' is not a folder; give a folder", dir);
  // Writable: a probe file, which also catches a read-only mount that access() would not.
  const fs::path probe = fs::path(dir) / fmt::format(".tessera-disk-probe-{}", ::getpid());
  FILE* f = std::fopen(probe.c_str(), "w");
  TS_CHECK(f != nullptr, "plan --calibrate-here: --offload-dir '{}' is not writable; give a folder this user may write "
           "on the disk runs will offload to", dir);
  std::fclose(f);
  fs::remove(probe, ec);

  DiskMeasurement m;
  m.dir = dir;
  m.bytes = kUsualBytes;
  // Half the free space at most: the measurement must not fill the disk others use.
  const fs::space_info space = fs::space(dir, ec);
  const auto disk_room = ec ? kUsualBytes : static_cast<size_t>(space.available / 2);
  // The data is held in RAM while it is written and read back: a quarter of the free RAM at most.
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  const size_t ram_room = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) / 4 : kUsualBytes;
  if (disk_room < m.bytes) {
    m.bytes = disk_room;
    m.smaller_because = fmt::format("the disk has {} free", mib(static_cast<double>(space.available)));
  }
  if (ram_room < m.bytes) {
    m.bytes = ram_room;
    m.smaller_because = fmt::format("the machine has {} of RAM free", mib(static_cast<double>(ram_room) * 4));
  }
  m.bytes = m.bytes / memory::ExtentAllocator::kAlignment * memory::ExtentAllocator::kAlignment;
  TS_CHECK(m.bytes >= kLeastBytes,
           "plan --calibrate-here: too little room to measure the disk of --offload-dir '{}': {}, which leaves {} "
           "to write, and a measurement needs {}; free some, or give another --offload-dir", dir, m.smaller_because,
           mib(static_cast<double>(m.bytes)), mib(static_cast<double>(kLeastBytes)));
  return m;
}

plan::DiskSpec measure_disk(const DiskMeasurement& m) {
  // The copy threads of the store a run offloads through.
  const int threads = memory::NvmeStore::Options{}.threads;
  fmt::print("  disk: writing and reading {}{} through the nvme tier's store in {} ({} copy threads) ...\n",
             mib(static_cast<double>(m.bytes)),
             m.smaller_because.empty() ? std::string() : fmt::format(" (less than {}: {})", mib(static_cast<double>(kUsualBytes)), m.smaller_because),
             m.dir, threads);
  std::fflush(stdout);
  plan::DiskSpec disk;
  bool direct = false;
  for (int round = 0; round < 2; ++round) {
    const memory::DiskBandwidth b = memory::measure_disk_bandwidth(m.dir, m.bytes, threads);
    disk.write_bandwidth = std::max(disk.write_bandwidth, b.write_bytes_per_second);
    disk.read_bandwidth = std::max(disk.read_bandwidth, b.read_bytes_per_second);
    disk.mixed_bandwidth = std::max(disk.mixed_bandwidth, b.mixed_bytes_per_second);
    direct = b.direct;
  }
  fmt::print("  disk: {:.2f} GB/s written, {:.2f} GB/s read, {:.2f} GB/s both at once ({}; the best of two)\n",
             disk.write_bandwidth / 1e9, disk.read_bandwidth / 1e9, disk.mixed_bandwidth / 1e9,
             direct ? "direct I/O" : "buffered I/O: this file system has no direct I/O, so reads may come from RAM");
  return disk;
}

}  // namespace tessera::cli
