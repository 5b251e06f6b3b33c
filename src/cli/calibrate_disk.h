#pragma once
// `tessera plan --calibrate-here`'s disk: the bandwidth the nvme tier's store reaches in the folder
// a run would offload to (memory/disk_bandwidth.h: through the store's staging buffers and copy
// threads, with direct I/O where the file system allows it), written into the cluster file as
// [cluster.disk] for the planner's I/O time (plan/offload_io.h).
#include <cstddef>
#include <string>

#include "plan/cluster.h"

namespace tessera::cli {

// What the measurement will write, and in which folder.
struct DiskMeasurement {
  std::string dir;
  size_t bytes = 0;
  std::string smaller_because;  // why `bytes` is below the usual size; empty when it is not
};

// The measurement of `dir`, checked before anything is measured: the folder must exist, be a
// folder and take a file, with room for a measurement; throws naming the fix. 512 MiB (a few
// transfers of every copy thread, long enough that the store's fixed costs do not decide the
// figure), less where the disk has less than twice that free or the machine less than four times
// that RAM free.
DiskMeasurement plan_disk_measurement(const std::string& dir);

// Writes and reads `m.bytes` through a store in `m.dir` twice (the best of each counts), prints the
// figures and whether direct I/O was used, and returns them as the cluster's disk.
plan::DiskSpec measure_disk(const DiskMeasurement& m);

}  // namespace tessera::cli
