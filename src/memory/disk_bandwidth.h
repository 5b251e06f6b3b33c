#pragma once
// How fast a folder's disk moves offloaded bytes, measured the way training will move them:
// through an NvmeStore there, with its staging buffers and copy threads. `tessera plan
// --calibrate-here` feeds these figures to the planner's offload cost.
#include <cstddef>
#include <string>

namespace tessera::memory {

struct DiskBandwidth {
  double read_bytes_per_second = 0;
  double write_bytes_per_second = 0;
  double mixed_bytes_per_second = 0;  // read and written together, while both run at once
  bool direct = false;  // whether the store used direct I/O (false: buffered, through the page cache)
};

// Writes `bytes` into a store in `dir` with `threads` copy threads, waits until the disk holds
// them, reads them back and checks them, timing the write and the read; the store's file is gone
// when it returns. Needs `bytes` of RAM for the data itself.
DiskBandwidth measure_disk_bandwidth(const std::string& dir, size_t bytes, int threads);

}  // namespace tessera::memory
