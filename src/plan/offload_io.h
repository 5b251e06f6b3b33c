#pragma once
// The time a step spends moving bytes to and from the nvme tier (memory.offload_activations =
// "nvme"), and how much of it the step's compute hides.
//
// The model: the copy engine writes a forward's kept activations while the next unit action
// computes, and reads a backward's back while the backward before it computes (exec/
// activation_offload.h); the program waits for a transfer only at fixed points. So the transfers
// run beside the step's forwards and backwards, and only what outlasts them costs time:
//   seconds = written / (write bandwidth / r) + read / (read bandwidth / r)
//   exposed = max(0, seconds - compute of the step's forwards and backwards)
// where r processes of the node share its disk (every rank offloads at the same points of the
// same program), and writes and reads take turns on it. It is a first model, over the whole step:
// a transfer waits where it is needed — a forward's writes before the unit action after the next,
// a backward's reads before that backward — so one that outlasts the single unit action it runs
// beside stalls there even when the step as a whole has compute to spare; and the staging copies
// take cores from compute on a CPU, which it does not count.
#include <cstdint>

#include "plan/cluster.h"
#include "plan/estimate.h"

namespace tessera::plan {

struct OffloadIo {
  double bytes_written = 0;  // per step, by one rank
  double bytes_read = 0;     // per step
  bool timed = false;        // false: traffic without a known disk (ClusterSpec::disk), not timed
  double seconds = 0;        // the transfers at the rank's share of the disk
  double exposed_seconds = 0;  // of those, what the step's compute does not hide
};

// One rank's I/O of a step that writes `bytes_written` to the nvme tier and reads `bytes_read`
// from it, one of `ranks_on_node` sharing the node's disk, beside `compute_seconds` of the work it
// runs with (the forwards and backwards, or the optimizer's update).
OffloadIo offload_io(const ClusterSpec& c, double bytes_written, double bytes_read, int64_t ranks_on_node,
                     double compute_seconds);
// A step that writes `bytes_per_step` and reads each of them back once.
inline OffloadIo offload_io(const ClusterSpec& c, double bytes_per_step, int64_t ranks_on_node, double compute_seconds) {
  return offload_io(c, bytes_per_step, bytes_per_step, ranks_on_node, compute_seconds);
}

// The estimate with `exposed_seconds` of I/O on its step (time.io), its throughput figures
// (TFLOP/s per device, MFU, HFU, tokens/s) for the longer step.
void add_exposed_io(Estimate& e, double exposed_seconds);

}  // namespace tessera::plan
