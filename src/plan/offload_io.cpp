#include "plan/offload_io.h"

#include <algorithm>

#include "core/check.h"

namespace tessera::plan {

OffloadIo offload_io(const ClusterSpec& c, double bytes_written, double bytes_read, int64_t ranks_on_node,
                     double compute_seconds) {
  TS_CHECK(bytes_written >= 0 && bytes_read >= 0 && ranks_on_node >= 1 && compute_seconds >= 0,
           "plan: the nvme tier's I/O of {} bytes written and {} read per step on one of {} ranks beside {} s of "
           "compute", bytes_written, bytes_read, ranks_on_node, compute_seconds);
  OffloadIo io;
  io.bytes_written = bytes_written;
  io.bytes_read = bytes_read;
  if (bytes_written == 0 && bytes_read == 0) {
    io.timed = true;  // nothing to move takes no time, known disk or not
    return io;
  }
  if (!c.disk.known()) return io;
  const auto share = static_cast<double>(ranks_on_node);
  io.timed = true;
  const double reading = io.bytes_read * share / c.disk.read_bandwidth;
  const double writing = io.bytes_written * share / c.disk.write_bandwidth;
  // A disk that serves reads and writes at once (as an offloaded optimizer posts them) moves both at
  // its mixed rate, each still no faster than alone; otherwise they take turns.
  io.seconds = c.disk.mixed_bandwidth > 0
                   ? std::max({reading, writing, (io.bytes_read + io.bytes_written) * share / c.disk.mixed_bandwidth})
                   : reading + writing;
  io.exposed_seconds = std::max(0.0, io.seconds - compute_seconds);
  return io;
}

void add_exposed_io(Estimate& e, double exposed_seconds) {
  TS_CHECK(exposed_seconds >= 0 && e.time.step > 0, "plan: {} s of exposed I/O on a step of {} s", exposed_seconds,
           e.time.step);
  const double longer = (e.time.step + exposed_seconds) / e.time.step;
  e.time.io += exposed_seconds;
  e.time.step += exposed_seconds;
  e.tflops_per_device /= longer;
  e.mfu /= longer;
  e.hfu /= longer;
  e.tokens_per_second /= longer;
}

}  // namespace tessera::plan
